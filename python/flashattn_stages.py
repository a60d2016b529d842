"""flashattn_stages: the suite's public library, libflashattn, called from Python through ctypes.

    import torch, sys; sys.path.insert(0, "python")
    import flashattn_stages as fa
    o, lse = fa.forward(q, k, v, causal=True)      # q, k, v: CUDA [B, H, N, D] fp16 or bf16
    dq, dk, dv = fa.backward(q, k, v, o, lse, do, causal=True)
    o = fa.attention(q, k, v, causal=True)         # differentiable: o.backward(do) fills q.grad, ...

O = softmax(scale * Q K^T [+ causal mask]) V and LSE, the natural-log log-sum-exp of each query row's
scaled scores (float32 [B, H, N]), as every stage of the suite defines them; backward() turns O, LSE
and dO = dLoss/dO into dQ, dK and dV (FlashAttention-2's Algorithm 2: stage 14 on an H100 or H200 at
D = 64 and 128, stage 13 on tensor cores everywhere else; 13d when deterministic). forward() runs, unless stage= names one, the stage the library picks: the fastest this GPU runs for
the problem (09 on an H100 or H200 at D = 64, 128, 256; else 06), the C library's own choice
(attn_forward in lib/flashattn.h), which forward_stage() reports. attention() is both passes as one
torch.autograd.Function. The work is queued on the current CUDA stream (torch.cuda.current_stream())
and not waited for, like any PyTorch kernel.

No compiled extension: `make lib` builds build/libflashattn.so (lib/flashattn.mk) and this module
loads it with ctypes. Inputs are PyTorch tensors, or any object with __cuda_array_interface__ (fp16
only, since that interface has no bf16 type string) together with out= (and, for backward(),
workspace=); outputs must not be read-only. Their stream= defaults to 0, the legacy default stream.
The head dim D must be one a stage takes (STAGES and BACKWARD_STAGES below). Bad arguments raise
ValueError or TypeError naming the argument, before anything is allocated or runs; a CUDA failure, or
no GPU, raises RuntimeError.
FLASHATTN_LIB_DIR overrides the folder of libflashattn.so (default: build/ beside this folder).
"""
import ctypes
import math
import numbers
import operator
import os
import sys

__all__ = ["forward", "backward", "attention", "forward_stage", "stages", "library_path"]

# Stage id -> (head dims D, GPU), as the C side states them: stage 06 in 06_fa2_full/stage06.h
# (STAGE06_DIMS_TEXT), stages 07-09 in kit/hopper_host.c (hop_check_head_shape) and suite/registry.c
# (dims_hopper, SM90_ONLY); test_head_dims_agree_with_the_registry keeps the two from drifting.
# forward() refuses another D before anything is allocated or loaded; python/README.md has the table.
STAGES = {
    "06": ((32, 64, 80, 96, 128, 192, 256), "sm_80 or newer"),
    "07": ((64, 128, 256), "sm_90 (H100, H200) only"),
    "08": ((64, 128, 256), "sm_90 (H100, H200) only"),
    "09": ((64, 128, 256), "sm_90 (H100, H200) only"),
}

# The backward stages (13_backward_fa2/backward_fa2.h, 14_backward_hopper/backward_hopper.h): 13 and 14
# sum dQ by atomic adds, 13d and 14d in a fixed order (bitwise repeatable). backward() runs the
# library's choice for its deterministic flag (attn_backward in lib/flashattn.h): 14 on sm_90 where it
# takes D, else 13; 13d when deterministic (14d, slower than 13d, only by name in C). The library takes
# what 13 takes, so 13's head dims are the ones backward() checks. Same fields as STAGES.
BACKWARD_STAGES = {
    "13": ((32, 64, 96, 128), "sm_80 or newer"),
    "13d": ((32, 64, 96, 128), "sm_80 or newer"),
    "14": ((64, 128), "sm_90 (H100, H200) only"),
    "14d": ((64, 128), "sm_90 (H100, H200) only"),
}

LIBRARY = "libflashattn.so"
_DTYPES = {"fp16": 0, "bf16": 1}   # attn_dtype
MAX_SCALE = 2.3e38                  # flashattn.h's ATTN_MAX_SCALE
# attn_status: EINVAL, EUNSUPPORTED, ENOMEM, ENODEV, ECUDA
_STATUS = {1: ValueError, 2: ValueError, 3: MemoryError, 4: RuntimeError, 5: RuntimeError}
_libs = []


def stages():
    """The forward stage ids the library runs by name, in order."""
    return sorted(STAGES)


def _check_stage(stage):
    # a str test first: `[] in STAGES` raises "unhashable type", naming nothing
    if stage is not None and (not isinstance(stage, str) or stage not in STAGES):
        raise ValueError("stage must be None (the library's choice) or one of %s (got %r)"
                         % (", ".join(stages()), stage))


def library_path():
    """Where libflashattn.so is expected."""
    here = os.path.dirname(os.path.abspath(__file__))
    folder = os.environ.get("FLASHATTN_LIB_DIR") or os.path.join(os.path.dirname(here), "build")
    return os.path.join(folder, LIBRARY)


# ---- the C interface (lib/flashattn.h) as ctypes structures ----------------------------------------
# Their layout repeats the header's; test_the_structures_match_the_header compiles the header and
# compares every offset.

class _Problem(ctypes.Structure):
    _fields_ = [("B", ctypes.c_int64), ("H", ctypes.c_int64), ("N", ctypes.c_int64), ("D", ctypes.c_int64),
                ("causal", ctypes.c_int), ("scale", ctypes.c_float), ("dtype", ctypes.c_int),
                ("H_kv", ctypes.c_int64), ("N_k", ctypes.c_int64),
                ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p)]


class _Tensor(ctypes.Structure):   # strides 0: contiguous
    _fields_ = [("data", ctypes.c_void_p), ("stride_b", ctypes.c_int64), ("stride_h", ctypes.c_int64),
                ("stride_n", ctypes.c_int64)]


class _ForwardArgs(ctypes.Structure):
    _fields_ = [("p", _Problem), ("q", _Tensor), ("k", _Tensor), ("v", _Tensor), ("o", _Tensor),
                ("lse", ctypes.c_void_p)]


class _BackwardArgs(ctypes.Structure):
    _fields_ = [("p", _Problem), ("q", _Tensor), ("k", _Tensor), ("v", _Tensor), ("o", _Tensor),
                ("d_o", _Tensor), ("lse", ctypes.c_void_p), ("dq", _Tensor), ("dk", _Tensor),
                ("dv", _Tensor), ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_size_t),
                ("deterministic", ctypes.c_int)]


def _problem(B, H, N, D, causal, scale, dtype):
    """attn_problem_make's fields, with H_kv = H and N_k = N: what the stages take today."""
    return _Problem(B, H, N, D, causal, scale, dtype, H, N, None, None)


class _Library:
    """libflashattn.so, opened, its functions typed; each call takes and returns plain Python values."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        self.lib = lib
        for name, args in (("attn_forward", [ctypes.POINTER(_ForwardArgs), ctypes.c_char_p, ctypes.c_void_p]),
                           ("attn_backward", [ctypes.POINTER(_BackwardArgs), ctypes.c_char_p, ctypes.c_void_p]),
                           ("attn_forward_stage", [ctypes.POINTER(_ForwardArgs), ctypes.c_char_p,
                                                   ctypes.POINTER(ctypes.c_char_p)]),
                           ("attn_backward_workspace_bytes", [ctypes.POINTER(_BackwardArgs), ctypes.c_char_p,
                                                              ctypes.POINTER(ctypes.c_size_t)])):
            getattr(lib, name).argtypes, getattr(lib, name).restype = args, ctypes.c_int
        lib.attn_status_name.argtypes, lib.attn_status_name.restype = [ctypes.c_int], ctypes.c_char_p
        lib.attn_last_error.argtypes, lib.attn_last_error.restype = [], ctypes.c_char_p

    @staticmethod
    def _stage(stage):
        return None if stage is None else stage.encode()

    def forward(self, q, k, v, o, lse, B, H, N, D, causal, scale, dtype, stream, stage):
        a = _ForwardArgs(_problem(B, H, N, D, causal, scale, dtype), _Tensor(q), _Tensor(k), _Tensor(v),
                         _Tensor(o), lse)
        return self.lib.attn_forward(ctypes.byref(a), self._stage(stage), stream)

    def forward_stage(self, B, H, N, D, causal, scale, dtype, lse, stage):
        """(status, the stage attn_forward would run) for a problem; lse: whether one is written."""
        a = _ForwardArgs(_problem(B, H, N, D, causal, scale, dtype), lse=1 if lse else None)
        got = ctypes.c_char_p()
        st = self.lib.attn_forward_stage(ctypes.byref(a), self._stage(stage), ctypes.byref(got))
        return st, got.value.decode() if st == 0 else None

    @staticmethod
    def _backward_args(ptrs, ws_bytes, B, H, N, D, causal, scale, dtype, deterministic):
        """ptrs: q, k, v, o, lse, do, dq, dk, dv, workspace"""
        q, k, v, o, lse, do, dq, dk, dv, ws = ptrs
        return _BackwardArgs(_problem(B, H, N, D, causal, scale, dtype), _Tensor(q), _Tensor(k), _Tensor(v),
                             _Tensor(o), _Tensor(do), lse, _Tensor(dq), _Tensor(dk), _Tensor(dv), ws, ws_bytes,
                             deterministic)

    def backward(self, q, k, v, o, lse, do, dq, dk, dv, ws, ws_bytes, B, H, N, D, causal, scale, dtype,
                 deterministic, stream, stage=None):
        a = self._backward_args((q, k, v, o, lse, do, dq, dk, dv, ws), ws_bytes, B, H, N, D, causal, scale,
                                dtype, deterministic)
        return self.lib.attn_backward(ctypes.byref(a), self._stage(stage), stream)

    def workspace_bytes(self, B, H, N, D, deterministic, stage=None):
        """(status, bytes) of the scratch attn_backward needs for the problem."""
        a = self._backward_args((None,) * 10, 0, B, H, N, D, 0, 1.0, 0, deterministic)
        n = ctypes.c_size_t(0)
        st = self.lib.attn_backward_workspace_bytes(ctypes.byref(a), self._stage(stage), ctypes.byref(n))
        return st, n.value

    def status_name(self, st):
        return self.lib.attn_status_name(st).decode()

    def last_error(self):
        return self.lib.attn_last_error().decode()


def _load():
    """The library, opened once."""
    if not _libs:
        path = library_path()
        if not os.path.exists(path):
            raise FileNotFoundError("%s not found: build it with `make lib` in the repository root (a CUDA build)"
                                    % path)
        _libs.append(_Library(path))
    return _libs[0]


class _Arg:
    """What the C function needs to know of one array: pointer, shape, dtype, layout, device."""

    def __init__(self, x, name, torch_ok=True):
        self.name, self.torch, self.readonly = name, None, False
        if torch_ok and type(x).__module__.split(".")[0] == "torch" and hasattr(x, "data_ptr"):
            import torch
            self.torch = x
            if not x.is_cuda:
                raise ValueError("%s must be on a CUDA device (got %s)" % (name, x.device))
            self.dtype = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}.get(x.dtype, str(x.dtype))
            self.shape, self.ptr, self.device = tuple(x.shape), x.data_ptr(), x.device.index
            self.contiguous = x.is_contiguous()
            self.nbytes = x.numel() * x.element_size()
            return
        cai = getattr(x, "__cuda_array_interface__", None)
        if not isinstance(cai, dict):
            raise TypeError("%s must be a torch CUDA tensor or have __cuda_array_interface__ (got %s)"
                            % (name, type(x).__name__))
        typestr, self.shape, self.ptr, self.readonly, strides = _interface(cai, name)
        self.dtype, self.device = {"<f2": "fp16", "<f4": "fp32"}.get(typestr, typestr), None
        size = typestr[2:]   # the item's bytes: "<f2" -> 2, "|u1" -> 1 (a workspace may be any type)
        itemsize = int(size) if size.isdigit() else 1
        dense, step = [], itemsize
        for n in reversed(self.shape):
            dense.insert(0, step)
            step *= n
        self.contiguous = strides is None or strides == tuple(dense)
        self.nbytes = math.prod(self.shape) * itemsize if size.isdigit() else 0

    def expect(self, shape, dtypes, what, align=16):
        if len(self.shape) != len(shape) or any(a != b for a, b in zip(self.shape, shape) if b is not None):
            raise ValueError("%s must have shape %s (got %s)" % (self.name, what, list(self.shape)))
        if self.dtype not in dtypes:
            raise TypeError("%s must be %s (got %s)" % (self.name, " or ".join(dtypes), self.dtype))
        if not self.contiguous:
            raise ValueError("%s must be contiguous, row-major %s (call .contiguous() first)" % (self.name, what))
        if self.ptr % align:
            if self.torch is not None:   # .contiguous() would return this same (contiguous) view
                fix = "call .clone(): a new tensor starts aligned"
            else:
                fix = "copy it into a fresh allocation that starts on a %d-byte boundary (cudaMalloc " \
                      "gives 256)" % align
            raise ValueError("%s must start on a %d-byte boundary (its data pointer is 0x%x; a view at an "
                             "offset can break this: %s)" % (self.name, align, self.ptr, fix))


def _is_int(v):
    """An int or an integer type of numpy's (__index__), never a bool (True would pass as 1)."""
    return not isinstance(v, bool) and hasattr(type(v), "__index__")


def _interface(cai, name):
    """(typestr, shape, pointer, read-only, strides) of a __cuda_array_interface__ dict, every key checked:
    a missing one raised a bare KeyError, a size that is no int reached ctypes (ArgumentError, naming no
    argument), a pointer past 64 bits was cut to its low 64 bits by ctypes (2^64 + x aliased x), and a
    float one was cut to an int."""
    what = "%s's __cuda_array_interface__" % name
    for key in ("shape", "typestr", "data"):
        if key not in cai:
            raise TypeError("%s has no %r (it needs 'shape', 'typestr' and 'data')" % (what, key))
    shape, typestr, data, strides = cai["shape"], cai["typestr"], cai["data"], cai.get("strides")
    if not isinstance(shape, (tuple, list)) or not all(_is_int(n) for n in shape):
        raise TypeError("%s 'shape' must be a tuple of ints (got %r)" % (what, shape))
    shape = tuple(operator.index(n) for n in shape)
    if min(shape, default=0) < 0:
        raise ValueError("%s 'shape' must hold sizes >= 0 (got %r)" % (what, shape))
    if not isinstance(typestr, str):
        raise TypeError("%s 'typestr' must be a str (got %r)" % (what, typestr))
    if not isinstance(data, (tuple, list)) or len(data) != 2 or not (data[0] is None or _is_int(data[0])):
        raise TypeError("%s 'data' must be a pair (an int pointer, a read-only flag) (got %r)" % (what, data))
    ptr = operator.index(data[0] or 0)
    if not 0 <= ptr < 2 ** 64:
        raise ValueError("%s's data pointer must be 0 .. 2^64 - 1 (got %d)" % (name, ptr))
    if strides is not None and (not isinstance(strides, (tuple, list)) or len(strides) != len(shape)
                                or not all(_is_int(n) for n in strides)):
        raise TypeError("%s 'strides' must be None or %d ints (got %r)" % (what, len(shape), strides))
    strides = None if strides is None else tuple(map(operator.index, strides))
    return typestr, shape, ptr, bool(data[1]), strides


def _numpy_types(*names):
    """numpy's scalar types of these names if numpy is loaded (a numpy scalar means it is), else ()."""
    np = sys.modules.get("numpy")
    return tuple(getattr(np, n) for n in names if hasattr(np, n)) if np is not None else ()


def _flag(value, name):
    """A flag (causal, deterministic) as the C libraries take it: 0 or 1 (they refuse anything else)."""
    if isinstance(value, bool) or isinstance(value, _numpy_types("bool_")):
        return int(bool(value))
    if isinstance(value, (int,) + _numpy_types("integer")) and int(value) in (0, 1):
        return int(value)
    raise ValueError("%s must be a bool or the int 0 or 1 (got %r)" % (name, value))


def _causal(causal):
    return _flag(causal, "causal")


def _forward_dims():
    """The head dims some forward stage takes: those of forward(stage=None)."""
    return tuple(sorted(set(d for dims, _ in STAGES.values() for d in dims)))


def _head_dim(D, stage):
    """stage: a forward stage, None (the library's choice among the forward stages), "13" or "13d"."""
    dims = _forward_dims() if stage is None else (STAGES.get(stage) or BACKWARD_STAGES[stage])[0]
    if D not in dims:
        what = ("the backward (stage %s)" % stage if stage in BACKWARD_STAGES
                else "stage %s" % stage if stage else "every forward stage")
        raise ValueError("D (q's last dim) = %d is unsupported by %s: %s head dims are %s"
                         % (D, what, "their" if stage is None else "its", ", ".join(map(str, dims))))


def _scale(scale, D):
    """The scale as the C libraries take it: a float with |scale| <= MAX_SCALE (0: uniform attention)."""
    if scale is None:
        return 1.0 / math.sqrt(D)
    # any real number: int, float, fractions.Fraction, decimal.Decimal, numpy's float32 and int64...
    if isinstance(scale, (bool,) + _numpy_types("bool_")) or not (
            isinstance(scale, numbers.Real) or hasattr(type(scale), "__float__")):
        raise TypeError("scale must be a number (got %s)" % type(scale).__name__)
    try:
        scale = float(scale)
    except OverflowError:
        if isinstance(scale, int):
            raise ValueError("scale must be finite with |scale| <= %g (got an int of %d digits)"
                             % (MAX_SCALE, len(str(abs(scale))))) from None
        raise ValueError("scale must be finite with |scale| <= %g (got %r, past float range)"
                         % (MAX_SCALE, scale)) from None
    except (TypeError, ValueError) as e:   # a __float__ that refuses, Decimal("sNaN")
        raise ValueError("scale must be finite with |scale| <= %g (got %r: %s)" % (MAX_SCALE, scale, e)) from None
    if not abs(scale) <= MAX_SCALE:
        raise ValueError("scale must be finite with |scale| <= %g (got %r)" % (MAX_SCALE, scale))
    return scale


INT64_MAX = 2 ** 63 - 1


def _stream(stream):
    """The cudaStream_t as an int: None (the default: resolved in forward), an int in 0 .. 2^64 - 1, or an
    object with an int .cuda_stream (a torch.cuda.Stream)."""
    if stream is None:
        return None
    handle = getattr(stream, "cuda_stream", stream)
    if not _is_int(handle):   # int, numpy's integers
        raise TypeError("stream must be a cudaStream_t as an int, or a torch.cuda.Stream (got %s)"
                        % type(stream).__name__)
    handle = operator.index(handle)
    if not 0 <= handle < 2 ** 64:
        raise ValueError("stream must be a cudaStream_t, 0 .. 2^64 - 1 (got %d)" % handle)
    return handle


def _check_inputs(arrays, stage):
    """[(array, name), ...], q first and the rest of q's shape and dtype, as _Args: q [B, H, N, D] of a
    16-bit dtype with sizes the C side can take and a head dim of the stage, the rest alike, on q's
    device."""
    a = [_Arg(x, n) for x, n in arrays]
    a[0].expect([None] * 4, ("fp16", "bf16"), "[B, H, N, D]")
    if min(a[0].shape) < 1:
        raise ValueError("q must have B, H, N and D of at least 1 (got %s)" % list(a[0].shape))
    if max(a[0].shape) > INT64_MAX:   # ctypes would wrap it: 2^64 + 1 reached the C side as 1
        raise ValueError("q's B, H, N and D must be at most 2^63 - 1, the C side's int64_t (got %s)"
                         % list(a[0].shape))
    _head_dim(a[0].shape[3], stage)
    for x in a[1:]:
        x.expect(a[0].shape, (a[0].dtype,), "%s, the same as q's [B, H, N, D]" % list(a[0].shape))
    for x in a[1:]:
        _same_device(x, a[0])
    return a


def _same_device(x, q):
    """torch tensors only: __cuda_array_interface__ has no device (the C library checks)."""
    if None not in (x.device, q.device) and x.device != q.device:
        raise ValueError("%s is on cuda:%s but q is on cuda:%s" % (x.name, x.device, q.device))


def _writable(x, q):
    """An output: not read-only, on q's device."""
    if x.readonly:
        raise ValueError("%s is read-only (its __cuda_array_interface__ says so)" % x.name)
    _same_device(x, q)


def _check(q, k, v, out, scale, stage, causal):
    a = _check_inputs(((q, "q"), (k, "k"), (v, "v")), stage)
    B, H, N, D = a[0].shape
    scale = _scale(scale, D)
    causal = _causal(causal)
    if out is not None:
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError("out must be a pair (o, lse); lse may be None for stage 06 or stage=None")
        o = _Arg(out[0], "out[0] (o)")
        o.expect(a[0].shape, (a[0].dtype,), "%s, q's shape and dtype" % list(a[0].shape))
        if out[1] is None and stage not in (None, "06"):
            raise ValueError("out[1] (lse) is needed for stage %s: it always writes the LSE" % stage)
        lse = None if out[1] is None else _Arg(out[1], "out[1] (lse)")
        if lse is not None:
            lse.expect([B, H, N], ("fp32",), "[%d, %d, %d] float32" % (B, H, N), align=4)
        for x in (o, lse):
            if x is not None:
                _writable(x, a[0])
    elif a[0].torch is None:
        raise TypeError("out=(o, lse) is needed for inputs that are not torch tensors")
    return a, scale, causal


def forward(q, k, v, causal=False, scale=None, stage=None, out=None, stream=None):
    """O and LSE of attention over q, k, v ([B, H, N, D], one 16-bit dtype, contiguous, one CUDA
    device). stage: None, the library's choice (the fastest stage this GPU runs for the problem:
    forward_stage() says which), or one of STAGES, whose head dims D must include q's. causal: True or
    1, query i sees keys 0..i; False or 0, every key (no other value). scale: any real number, default
    1/sqrt(D); finite with |scale| <= MAX_SCALE, 0 is uniform attention. out=(o, lse): write there (lse
    may be None for stage 06 or None: then no stage that always writes it is chosen) instead of new
    tensors. stream: a cudaStream_t as an int, or a torch.cuda.Stream; default: torch's current stream
    on q's device when q is a torch tensor, else 0, the legacy default stream. Returns (o, lse)."""
    _check_stage(stage)
    (aq, ak, av), scale, causal = _check(q, k, v, out, scale, stage, causal)
    stream = _stream(stream)   # before the library is loaded and anything allocated
    B, H, N, D = aq.shape
    lib = _load()
    torch = None
    if aq.torch is not None:
        import torch
    if out is None:
        o = torch.empty_like(q)
        lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    else:
        o, lse = out
    optr = _Arg(o, "o").ptr
    lptr = _Arg(lse, "lse").ptr if lse is not None else None
    if stream is None:
        stream = torch.cuda.current_stream(q.device).cuda_stream if torch is not None else 0
    args = (aq.ptr, ak.ptr, av.ptr, optr, lptr, B, H, N, D, causal, scale, _DTYPES[aq.dtype], stream, stage)
    if torch is not None:
        with torch.cuda.device(q.device):
            st = lib.forward(*args)
    else:
        st = lib.forward(*args)
    if st != 0:
        raise _refusal(st, lib, "attn_forward (stage %s)" % (stage or "None: the library's choice"), aq)
    return o, lse


def forward_stage(q, causal=False, lse=True):
    """The stage forward(q, k, v, causal=causal) runs on this GPU (with k and v of q's shape and dtype),
    as the library chooses it: "09" on an H100 or H200 at D = 64, 128, 256; "06" on the other sm_80 and
    newer GPUs and head dims. lse=False: for out=(o, None), which leaves out the stages that always
    write it. Raises as forward() does (RuntimeError without a GPU)."""
    (aq,) = _check_inputs(((q, "q"),), None)
    B, H, N, D = aq.shape
    lib = _load()
    args = (B, H, N, D, _causal(causal), 1.0 / math.sqrt(D), _DTYPES[aq.dtype], bool(lse), None)
    if aq.torch is not None:
        import torch
        with torch.cuda.device(q.device):
            st, stage = lib.forward_stage(*args)
    else:
        st, stage = lib.forward_stage(*args)
    if st != 0:
        raise _refusal(st, lib, "attn_forward_stage", aq)
    return stage


def _refusal(st, lib, who, aq):
    """The exception for the library's status st: ValueError for a refused argument or problem (1, 2),
    RuntimeError for no GPU or a CUDA error (4, 5)."""
    return _STATUS.get(st, RuntimeError)("%s refused q of shape %s, %s: %s: %s" % (
        who, list(aq.shape), aq.dtype, lib.status_name(st), lib.last_error()))


# ---- the backward, and the two as one autograd function ----------------------------------------

def _check_backward(q, k, v, o, lse, do, causal, scale, deterministic, out, workspace):
    stage = "13d" if _flag(deterministic, "deterministic") else "13"
    a = _check_inputs(((q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do")), stage)
    B, H, N, D = a[0].shape
    al = _Arg(lse, "lse")
    al.expect([B, H, N], ("fp32",), "[%d, %d, %d] float32" % (B, H, N), align=4)
    _same_device(al, a[0])
    scale = _scale(scale, D)
    causal = _causal(causal)
    if out is not None:
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            raise TypeError("out must be a triple (dq, dk, dv)")
        for x, name in zip(out, ("dq", "dk", "dv")):
            g = _Arg(x, "out (%s)" % name)
            g.expect(a[0].shape, (a[0].dtype,), "%s, q's shape and dtype" % list(a[0].shape))
            _writable(g, a[0])
    if workspace is not None:   # its size is the library's to check: attn_backward_workspace_bytes
        w = _Arg(workspace, "workspace")
        w.expect([None] * len(w.shape), (w.dtype,), "memory")
        _writable(w, a[0])
    if a[0].torch is None and (out is None or workspace is None):
        raise TypeError("out=(dq, dk, dv) and workspace= are needed for inputs that are not torch tensors")
    return a, al, scale, causal, stage


def backward(q, k, v, o, lse, do, causal=False, scale=None, deterministic=False, out=None, workspace=None,
             stream=None):
    """dQ, dK and dV of attention over q, k, v, given the forward's o and lse (any forward stage's, run
    with the same causal and scale) and do = dLoss/dO: FlashAttention-2's Algorithm 2, the library's
    choice (attn_backward in lib/flashattn.h): stage 14 on an H100 or H200 at D = 64 and 128, else
    stage 13 on tensor cores. q, k, v, o, do: [B, H, N, D], one 16-bit dtype, contiguous, one CUDA
    device, D one of stage 13's head dims (32, 64, 96, 128); lse float32 [B, H, N]. causal and scale
    as for forward(). deterministic: False or 0, dQ summed by atomic adds (its last bits change from
    run to run); True or 1, stage 13d, in a fixed order (bitwise repeatable).
    out=(dq, dk, dv): write there instead of new tensors. workspace: an array of at least
    attn_backward_workspace_bytes() bytes (4 (D + 1) per row and a little), contiguous and
    16-byte aligned, whose contents do not matter; by default a new torch uint8 tensor, freed when the
    call returns (PyTorch's allocator then keeps it for the next one). Both are needed for inputs that
    are not torch tensors. stream: as for forward(). Returns (dq, dk, dv)."""
    a, al, scale, causal, stage = _check_backward(q, k, v, o, lse, do, causal, scale, deterministic, out,
                                                  workspace)
    stream = _stream(stream)   # before the library is loaded and anything allocated
    B, H, N, D = a[0].shape
    lib = _load()
    det = int(stage == "13d")
    torch = None
    if a[0].torch is not None:
        import torch
    if stream is None:
        stream = torch.cuda.current_stream(q.device).cuda_stream if torch is not None else 0
    dq, dk, dv = out if out is not None else (torch.empty_like(q) for _ in range(3))
    if workspace is None:
        with torch.cuda.device(q.device):   # the library's choice asks the current GPU
            st, need = lib.workspace_bytes(B, H, N, D, det)
        if st != 0:
            raise _refusal(st, lib, "attn_backward_workspace_bytes", a[0])
        workspace = torch.empty(need, dtype=torch.uint8, device=q.device)
        if stream != torch.cuda.current_stream(q.device).cuda_stream:
            # allocated on the current stream, used on another: not reused before that one is done
            workspace.record_stream(torch.cuda.ExternalStream(stream, device=q.device))
    w = _Arg(workspace, "workspace")
    ptrs = [x.ptr for x in a[:4]] + [al.ptr, a[4].ptr] + [_Arg(x, n).ptr for x, n in
                                                          ((dq, "dq"), (dk, "dk"), (dv, "dv"))] + [w.ptr]
    # stage None: the library's choice for the flag (14 or 13; 13d)
    args = ptrs + [w.nbytes, B, H, N, D, causal, scale, _DTYPES[a[0].dtype], det, stream]
    if torch is not None:
        with torch.cuda.device(q.device):
            st = lib.backward(*args)
    else:
        st = lib.backward(*args)
    if st != 0:
        raise _refusal(st, lib, "attn_backward (stage None: the library's choice)", a[0])
    return dq, dk, dv


def attention(q, k, v, causal=False, scale=None, deterministic=False):
    """softmax(scale * q k^T [+ causal mask]) v as a differentiable PyTorch operation: q, k, v torch
    CUDA tensors [B, H, N, D] of one 16-bit dtype (made contiguous here, so views are fine). The
    forward runs the library's choice (forward_stage()) and keeps O and the LSE for the backward, the
    library's choice too: stage 14 on an H100 or H200 at D = 64 and 128, else 13 (13d when
    deterministic: bitwise repeatable gradients). causal and scale as for forward().
    Where q, k or v requires grad, D must be one the backward takes (32, 64, 96, 128): another D is
    refused before the forward runs, not when .backward() is called. Returns o."""
    import torch
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(x, torch.Tensor):
            raise TypeError("%s must be a torch tensor for attention() (got %s); forward() and backward() "
                            "take __cuda_array_interface__ arrays too" % (name, type(x).__name__))
    causal = _causal(causal)
    deterministic = _flag(deterministic, "deterministic")
    if q.dim() == 4 and q.shape[3] >= 1:   # else forward() refuses q's shape
        D = q.shape[3]
        scale = _scale(scale, D)
        if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v)):
            try:
                _head_dim(D, "13")
            except ValueError as e:
                alone = " (under torch.no_grad() the forward alone takes it)" if D in _forward_dims() else ""
                raise ValueError("%s; attention() refuses it before the forward runs because q, k or v "
                                 "requires grad%s" % (e, alone)) from None
    return _attention_function().apply(q.contiguous(), k.contiguous(), v.contiguous(), causal, scale,
                                       deterministic)


_function = []


def _attention_function():
    """The torch.autograd.Function behind attention(), made on first use so that importing this module
    needs no torch."""
    if _function:
        return _function[0]
    import torch
    from torch.autograd.function import once_differentiable

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, scale, deterministic):
            o, lse = forward(q, k, v, causal=causal, scale=scale)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.flags = (causal, scale, deterministic)
            return o

        @staticmethod
        @once_differentiable
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            causal, scale, deterministic = ctx.flags
            do = do.contiguous()   # a gradient may come as an expanded or strided view
            if do.data_ptr() % 16:   # a contiguous view at an odd offset: a fresh tensor is aligned
                do = do.clone()
            dq, dk, dv = backward(q, k, v, o, lse, do, causal=causal, scale=scale,
                                  deterministic=deterministic)
            return dq, dk, dv, None, None, None

    _function.append(Attention)
    return Attention
