"""Tests of python/flashattn_stages.py: `make check-python` (builds the library, runs pytest).

The refusals of bad arguments need neither torch nor a GPU (fake __cuda_array_interface__ objects:
the checks run before the library is loaded), nor does the layout of the ctypes structures (a C
compiler and the header). The results need torch, a CUDA GPU and build/libflashattn.so; without them
those tests skip and say why. Every result is compared, row by row,
with a float64 reference under the tolerance rule of suite/check.c; outputs are poisoned with NaN
first, so an element never written fails.
"""
import ctypes
import math
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashattn_stages as fa  # noqa: E402

U32 = 2.0 ** -24


class FakeCuda:
    """Only what __cuda_array_interface__ promises: the refusals must not need more."""

    def __init__(self, shape, typestr="<f2", ptr=1 << 20, strides=None):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}


def fakes(shape=(2, 3, 17, 64)):
    return [FakeCuda(shape, ptr=(i + 1) << 20) for i in range(3)]


def out_for(shape, dtype="<f2"):
    return (FakeCuda(shape, dtype, ptr=4 << 20), FakeCuda(shape[:3], "<f4", ptr=5 << 20))


@pytest.mark.parametrize("case, exc, words", [
    ("3-d q", ValueError, "q must have shape [B, H, N, D]"),
    ("k shape", ValueError, "k must have shape [2, 3, 17, 64]"),
    ("fp32 q", TypeError, "q must be fp16 or bf16"),
    ("strided v", ValueError, "v must be contiguous"),
    ("misaligned k", ValueError, "k must start on a 16-byte boundary"),
    ("empty q", ValueError, "at least 1"),
    ("nan scale", ValueError, "scale must be finite with |scale| <= 2.3e+38 (got nan)"),
    ("huge int scale", ValueError, "scale must be finite with |scale| <= 2.3e+38 (got an int of 401 digits)"),
    ("scale past float32", ValueError, "scale must be finite with |scale| <= 2.3e+38 (got 1e+39)"),
    ("string scale", TypeError, "scale must be a number (got str)"),
    ("no lse for 07", ValueError, "out[1] (lse) is needed for stage 07"),
    ("read-only o", ValueError, "out[0] (o) is read-only"),
    ("no out", TypeError, "out=(o, lse) is needed"),
    ("lse shape", ValueError, "out[1] (lse) must have shape [2, 3, 17] float32"),
    ("o dtype", TypeError, "out[0] (o) must be fp16"),
    ("not an array", TypeError, "q must be a torch CUDA tensor or have __cuda_array_interface__"),
    ("stage", ValueError, "stage must be None (the library's choice) or one of 06, 07, 08, 09 (got '99')"),
    ("stage not a str", ValueError, "stage must be None (the library's choice) or one of"),
    ("sizes past int64", ValueError, "q's B, H, N and D must be at most 2^63 - 1"),
    ("string stream", TypeError, "stream must be a cudaStream_t as an int, or a torch.cuda.Stream (got str)"),
    ("float stream", TypeError, "stream must be a cudaStream_t as an int, or a torch.cuda.Stream (got float)"),
    ("negative stream", ValueError, "stream must be a cudaStream_t, 0 .. 2^64 - 1 (got -1)"),
    ("stream past 64 bits", ValueError, "stream must be a cudaStream_t, 0 .. 2^64 - 1 (got 18446744073709551616)"),
])
def test_refusals_name_the_argument(case, exc, words):
    q, k, v = fakes()
    shape, kw = (2, 3, 17, 64), {"out": out_for((2, 3, 17, 64))}
    if case == "3-d q":
        q = FakeCuda((2, 3, 17))
    elif case == "k shape":
        k = FakeCuda((2, 3, 18, 64))
    elif case == "fp32 q":
        q = FakeCuda(shape, "<f4")
    elif case == "strided v":
        v = FakeCuda(shape, strides=(2 * 3 * 17 * 64 * 2, 17 * 64 * 2, 2, 17 * 2))
    elif case == "misaligned k":
        k = FakeCuda(shape, ptr=(2 << 20) + 2)
    elif case == "empty q":
        q, k, v = fakes((2, 3, 0, 64))
        kw["out"] = out_for((2, 3, 0, 64))
    elif case == "nan scale":
        kw["scale"] = float("nan")
    elif case == "huge int scale":
        kw["scale"] = 10 ** 400
    elif case == "scale past float32":
        kw["scale"] = 1e39
    elif case == "string scale":
        kw["scale"] = "0.125"
    elif case == "no lse for 07":
        kw["out"], kw["stage"] = (kw["out"][0], None), "07"
    elif case == "read-only o":
        o = FakeCuda(shape, ptr=4 << 20)
        o.__cuda_array_interface__["data"] = (4 << 20, True)
        kw["out"] = (o, kw["out"][1])
    elif case == "no out":
        kw = {}
    elif case == "lse shape":
        kw["out"] = (kw["out"][0], FakeCuda((2, 3, 16), "<f4"))
    elif case == "o dtype":
        kw["out"] = (FakeCuda(shape, "<f4"), kw["out"][1])
    elif case == "not an array":
        q = [[1.0]]
    elif case == "stage":
        kw["stage"] = "99"
    elif case == "stage not a str":
        kw["stage"] = []
    elif case == "sizes past int64":   # ctypes wrapped 2^64 + 1 to 1: a batch of one reached the C side
        big = (2 ** 64 + 1, 3, 17, 64)
        q, k, v = fakes(big)
        kw["out"] = out_for(big)
    elif case == "string stream":   # ctypes passed the string's address as the cudaStream_t
        kw["stream"] = "abc"
    elif case == "float stream":
        kw["stream"] = 1.5
    elif case == "negative stream":
        kw["stream"] = -1
    elif case == "stream past 64 bits":
        kw["stream"] = 2 ** 64
    with pytest.raises(exc) as e:
        fa.forward(q, k, v, **kw)
    assert words in str(e.value)


def interface_without(key):
    f = FakeCuda((2, 3, 17, 64))
    del f.__cuda_array_interface__[key]
    return f


def interface_with(**kw):
    f = FakeCuda((2, 3, 17, 64))
    f.__cuda_array_interface__.update(kw)
    return f


@pytest.mark.parametrize("case, fake, exc, words", [
    # a pointer past 64 bits reached ctypes, which kept its low 64: 2^64 + x aliased x
    ("q", interface_with(data=(2 ** 64 + (1 << 20), False)), ValueError,
     "q's data pointer must be 0 .. 2^64 - 1 (got 18446744073710600192)"),
    ("k", interface_with(data=(-16, False)), ValueError, "k's data pointer must be 0 .. 2^64 - 1 (got -16)"),
    ("v", interface_with(data=(float(1 << 20), False)), TypeError,
     "v's __cuda_array_interface__ 'data' must be a pair (an int pointer, a read-only flag) "
     "(got (1048576.0, False))"),
    ("q", interface_with(data=1 << 20), TypeError, "q's __cuda_array_interface__ 'data' must be a pair"),
    ("q", interface_with(data=(True, False)), TypeError, "q's __cuda_array_interface__ 'data' must be a pair"),
    # missing keys and non-integer sizes raised KeyError and ctypes' ArgumentError, naming nothing
    ("q", interface_without("shape"), TypeError,
     "q's __cuda_array_interface__ has no 'shape' (it needs 'shape', 'typestr' and 'data')"),
    ("k", interface_without("data"), TypeError, "k's __cuda_array_interface__ has no 'data'"),
    ("v", interface_without("typestr"), TypeError, "v's __cuda_array_interface__ has no 'typestr'"),
    ("q", interface_with(shape=(2, 3, 17.0, 64)), TypeError,
     "q's __cuda_array_interface__ 'shape' must be a tuple of ints (got (2, 3, 17.0, 64))"),
    ("q", interface_with(shape=(2, 3, "17", 64)), TypeError, "'shape' must be a tuple of ints"),
    ("q", interface_with(shape=(2, 3, True, 64)), TypeError, "'shape' must be a tuple of ints"),
    ("q", interface_with(shape=17), TypeError, "'shape' must be a tuple of ints (got 17)"),
    ("q", interface_with(shape=(2, -3, 17, 64)), ValueError,
     "q's __cuda_array_interface__ 'shape' must hold sizes >= 0 (got (2, -3, 17, 64))"),
    ("k", interface_with(typestr=2), TypeError, "k's __cuda_array_interface__ 'typestr' must be a str (got 2)"),
    ("v", interface_with(strides=(1.5, 2, 2, 2)), TypeError,
     "v's __cuda_array_interface__ 'strides' must be None or 4 ints (got (1.5, 2, 2, 2))"),
    ("v", interface_with(strides=(2, 2)), TypeError, "'strides' must be None or 4 ints"),
    ("o", interface_with(data=(2 ** 64, False)), ValueError, "out[0] (o)'s data pointer must be 0 .. 2^64 - 1"),
    ("lse", FakeCuda((2, 3, 17.5), "<f4"), TypeError, "out[1] (lse)'s __cuda_array_interface__ 'shape'"),
])
def test_a_malformed_interface_is_refused_by_name(monkeypatch, case, fake, exc, words):
    """__cuda_array_interface__ is the caller's: every key forward reads is checked (a missing one raised a
    bare KeyError, a float size ctypes' ArgumentError) before the library is loaded, and a refusal names
    the argument and the key. Pure Python: no GPU, torch or library needed."""
    lib = LibraryCalls(monkeypatch)
    q, k, v = fakes()
    o, lse = out_for((2, 3, 17, 64))
    args = {"q": q, "k": k, "v": v, "o": o, "lse": lse}
    args[case] = fake
    with pytest.raises(exc) as e:
        fa.forward(args["q"], args["k"], args["v"], out=(args["o"], args["lse"]))
    assert words in str(e.value)
    assert lib.loads == [], "the library was loaded"


def test_a_well_formed_interface_reaches_the_library(monkeypatch):
    """What the interface allows passes: a list shape, numpy-style integer sizes (as ints), the largest
    pointer, explicit dense strides."""
    _, np_int, _ = numpy_or_fake(monkeypatch)
    lib = LibraryCalls(monkeypatch)
    q, k, v = fakes()
    q.__cuda_array_interface__["shape"] = [np_int(2), 3, 17, 64]
    k.__cuda_array_interface__["data"] = (2 ** 64 - 256, False)
    v.__cuda_array_interface__["strides"] = (3 * 17 * 64 * 2, 17 * 64 * 2, 64 * 2, 2)
    fa.forward(q, k, v, out=out_for((2, 3, 17, 64)))
    assert lib.calls[-1][1] == 2 ** 64 - 256 and lib.calls[-1][5:9] == (2, 3, 17, 64)
    assert all(type(n) is int for n in lib.calls[-1][5:9])


@pytest.mark.parametrize("case", ["lse 4-byte aligned", "scale 0", "scale -2.3e38"])
def test_what_the_c_side_takes_passes_the_python_checks(case):
    """These reach the library (which, without a GPU or the .so, fails for that reason instead)."""
    q, k, v = fakes()
    o, lse = out_for((2, 3, 17, 64))
    kw = {"out": (o, lse), "stage": "07"}
    if case == "lse 4-byte aligned":
        kw["out"] = (o, FakeCuda((2, 3, 17), "<f4", ptr=(5 << 20) + 4))
    elif case == "scale 0":
        kw["scale"] = 0
    else:
        kw["scale"] = -2.3e38
    with pytest.raises((FileNotFoundError, RuntimeError, ValueError)) as e:
        fa.forward(q, k, v, **kw)
    for words in ("boundary", "scale must", "scale:"):
        assert words not in str(e.value), str(e.value)


def library_or_skip():
    if not os.path.exists(fa.library_path()):
        pytest.skip("%s is missing: make lib (a CUDA build; make check-python does)" % fa.library_path())


def test_without_a_gpu_the_library_says_no_cuda_device():
    """On a machine without a GPU (or its driver) the library cannot ask the runtime which GPU this is:
    the runtime's own words, "CUDA driver version is insufficient for CUDA runtime version", read as a
    driver to update, so the library says "no CUDA device" first (issue 58), as RuntimeError. Needs the
    library (FLASHATTN_LIB_DIR or build/); with a GPU, the made-up pointers are refused as no device
    memory instead, and the test skips. forward_stage() says the same."""
    library_or_skip()
    q, k, v = fakes()
    with pytest.raises((RuntimeError, ValueError)) as e:
        fa.forward(q, k, v, out=out_for((2, 3, 17, 64)))
    if isinstance(e.value, ValueError):
        pytest.skip("a GPU is here: %s" % e.value)
    assert "no GPU: no CUDA device (no NVIDIA GPU or driver here" in str(e.value), str(e.value)
    with pytest.raises(RuntimeError, match=r"no CUDA device \(no NVIDIA GPU or driver here"):
        fa.forward_stage(q)


def test_a_named_stage_refuses_in_the_librarys_words():
    """The stage's own limits are the library's to say, before any CUDA call (no GPU needed)."""
    library_or_skip()
    q, k, v = fakes((2, 3, 17, 64))
    for stage in ("07", "08", "09"):   # the LSE is always written there; refused by Python first
        with pytest.raises(ValueError, match="out\\[1\\] \\(lse\\) is needed for stage %s" % stage):
            fa.forward(q, k, v, out=(out_for((2, 3, 17, 64))[0], None), stage=stage)
    lib = fa._load()
    st, stage = lib.forward_stage(1 << 31, 2, 1, 64, 0, 0.125, 0, True, "06")
    assert (st, stage) == (2, None) and lib.last_error().startswith("B*H: stage 06 takes at most 65535^2 heads"), \
        lib.last_error()


def c_layout():
    """{struct: (size, {field: offset})} of flashattn.h's argument structures, as a C compiler lays them
    out; skips where there is no compiler."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cc = os.environ.get("CC", "cc")
    structs = {"attn_problem": fa._Problem, "attn_tensor": fa._Tensor, "attn_forward_args": fa._ForwardArgs,
               "attn_backward_args": fa._BackwardArgs}
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "flashattn.h"', 'int main(void) {']
    for c, py in structs.items():
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (c, c))
        for name, _ in py._fields_:
            lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (c, name, c, name))
    lines.append("return 0; }")
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        try:
            subprocess.run([cc, "-std=c11", "-I", os.path.join(root, "lib"), src, "-o", exe], check=True,
                           capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as e:
            pytest.skip("no C compiler to lay out flashattn.h with (%s): %s" % (cc, e))
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    got = {}
    for line in out.split("\n"):
        if line:
            c, field, n = line.split()
            got.setdefault(c, {})[field] = int(n)
    return structs, got


def test_the_structures_match_the_header():
    """_Problem, _Tensor, _ForwardArgs and _BackwardArgs repeat flashattn.h's structures field by field:
    the same names, order, offsets and sizes as the C compiler gives them."""
    structs, got = c_layout()
    for c, py in structs.items():
        want = {name: getattr(py, name).offset for name, _ in py._fields_}
        want["sizeof"] = ctypes.sizeof(py)
        assert got[c] == want, (c, got[c], want)


class LibraryCalls:
    """Stands in for fa._load: records whether the library was loaded and what forward passed it."""

    def __init__(self, monkeypatch):
        self.loads, self.calls = [], []
        monkeypatch.setattr(fa, "_load", self.load)

    def load(self):
        self.loads.append(1)
        return self

    def forward(self, *args):
        self.calls.append(args)   # q, k, v, o, lse, B, H, N, D, causal, scale, dtype, stream, stage
        return 0


def call(D=64, stage="06", with_out=True, **kw):
    shape = (2, 3, 17, D)
    q, k, v = fakes(shape)
    return fa.forward(q, k, v, stage=stage, out=out_for(shape) if with_out else None, **kw)


class FakeNumpy:
    """Stand-ins for numpy's scalar types when numpy is absent: neither int, float nor bool subclasses."""

    class bool_:
        def __init__(self, x): self.x = bool(x)
        def __bool__(self): return self.x
        def __float__(self): return float(self.x)
        def __repr__(self): return "np.%s" % self.x

    class integer:
        def __init__(self, x): self.x = int(x)
        def __int__(self): return self.x
        def __index__(self): return self.x
        def __float__(self): return float(self.x)
        def __eq__(self, other): return self.x == other
        def __hash__(self): return hash(self.x)
        def __repr__(self): return "np.int64(%d)" % self.x

    class float32:   # only __float__, as an object that is no numbers.Real registers itself
        def __init__(self, x): self.x = x
        def __float__(self): return float(self.x)
        def __repr__(self): return "np.float32(%r)" % self.x


def numpy_or_fake(monkeypatch):
    """(bool_, int64, float32) of numpy if it is installed, else of a fake numpy put in sys.modules."""
    try:
        import numpy as np
        return np.bool_, np.int64, np.float32
    except ImportError:
        fake = type(sys)("numpy")
        fake.bool_, fake.integer, fake.float32 = FakeNumpy.bool_, FakeNumpy.integer, FakeNumpy.float32
        monkeypatch.setitem(sys.modules, "numpy", fake)
        return fake.bool_, fake.integer, fake.float32


@pytest.mark.parametrize("causal", [2, -1, "no", "", None, 1.0, 0.5, [1]])
def test_causal_is_a_bool_or_0_or_1(monkeypatch, causal):
    """The C libraries refuse causal other than 0 or 1: int(bool(2)) must not turn it into 1."""
    lib = LibraryCalls(monkeypatch)
    with pytest.raises(ValueError, match=r"causal must be a bool or the int 0 or 1 \(got "):
        call(causal=causal)
    assert lib.loads == []


def test_causal_takes_bools_0_1_and_numpy_scalars(monkeypatch):
    np_bool, np_int, _ = numpy_or_fake(monkeypatch)
    lib = LibraryCalls(monkeypatch)
    for causal, want in ((True, 1), (False, 0), (1, 1), (0, 0), (np_bool(True), 1), (np_bool(False), 0),
                         (np_int(1), 1), (np_int(0), 0)):
        call(causal=causal)
        got = lib.calls[-1][9]
        assert type(got) is int and got == want, (causal, got)
    for causal in (np_int(2), np_int(-1)):
        with pytest.raises(ValueError, match="causal must be"):
            call(causal=causal)


# The head dims of the C side, written out again here (06_fa2_full/stage06.h; kit/hopper_host.c), so
# that a wrong STAGES table fails too.
C_HEAD_DIMS = {"06": (32, 64, 80, 96, 128, 192, 256), "07": (64, 128, 256), "08": (64, 128, 256), "09": (64, 128, 256)}


@pytest.mark.parametrize("stage", ["06", "07", "08", "09"])
def test_head_dim_refused_before_loading_or_allocating(monkeypatch, stage):
    lib = LibraryCalls(monkeypatch)
    for D in (1, 16, 32, 64, 80, 96, 128, 192, 256, 300, 512):
        if D in C_HEAD_DIMS[stage]:
            call(D=D, stage=stage)
            assert lib.calls[-1][8] == D
            continue
        n = len(lib.loads)
        for with_out in (True, False):   # without out=, before the allocation (and the out= TypeError)
            with pytest.raises(ValueError) as e:
                call(D=D, stage=stage, with_out=with_out)
            msg = str(e.value)
            for words in ("D (q's last dim) = %d" % D, "stage %s" % stage, ", ".join(map(str, C_HEAD_DIMS[stage]))):
                assert words in msg, msg
        assert len(lib.loads) == n, "the library was loaded for D=%d" % D


def registry_dims(stage):
    """The head dims the C registry gives `stage` (suite/registry.c, through `attn --list-dims`); skips
    the test where build/attn is not built."""
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    attn = next((p for p in (os.path.join(root, "build", "attn"), os.path.join(root, "build", "nocuda", "attn"))
                 if os.access(p, os.X_OK)), None)
    if attn is None:
        pytest.skip("build/attn not built (make, or make NO_CUDA=1)")
    listed = subprocess.run([attn, "--list-dims", stage], check=True, capture_output=True, text=True).stdout
    return tuple(int(d) for d in listed.split())


def test_head_dims_agree_with_the_registry():
    """STAGES' head dims repeat what the C registry says: this test is what keeps the two from drifting
    apart."""
    for stage, entry in fa.STAGES.items():
        assert registry_dims(stage) == entry[0], (stage, entry[0])


def test_the_default_stage_is_the_librarys_choice(monkeypatch):
    """stage=None reaches the C side as NULL (the library chooses); a D no forward stage takes is refused
    before the library is loaded, naming every stage's head dims; out=(o, None) is taken for it."""
    lib = LibraryCalls(monkeypatch)
    call(stage=None)
    assert lib.calls[-1][13] is None
    call(stage="09")
    assert lib.calls[-1][13] == "09"
    q, k, v = fakes()
    fa.forward(q, k, v, out=(out_for((2, 3, 17, 64))[0], None))
    assert lib.calls[-1][4] is None and lib.calls[-1][13] is None
    n = len(lib.loads)
    with pytest.raises(ValueError, match=r"D \(q's last dim\) = 72 is unsupported by every forward stage: their "
                                         r"head dims are 32, 64, 80, 96, 128, 192, 256"):
        call(D=72, stage=None)
    assert len(lib.loads) == n


def test_scale_takes_any_real_number(monkeypatch):
    import decimal
    import fractions
    _, np_int, np_float32 = numpy_or_fake(monkeypatch)
    lib = LibraryCalls(monkeypatch)
    for scale in (fractions.Fraction(1, 8), decimal.Decimal("0.125"), np_float32(0.125), np_int(2), 0.125, 1):
        call(scale=scale)
        got = lib.calls[-1][10]
        assert type(got) is float and got == float(scale), (scale, got)


@pytest.mark.parametrize("scale, exc, words", [
    (True, TypeError, "scale must be a number (got bool)"),
    (b"1", TypeError, "scale must be a number (got bytes)"),
    (1j, TypeError, "scale must be a number (got complex)"),
    ("decimal nan", ValueError, "scale must be finite"),
    ("decimal inf", ValueError, "scale must be finite"),
    ("huge fraction", ValueError, "past float range"),
    ("numpy nan", ValueError, "scale must be finite"),
    ("numpy bool", TypeError, "scale must be a number"),
])
def test_scale_refusals_of_other_number_types(monkeypatch, scale, exc, words):
    import decimal
    import fractions
    np_bool, _, np_float32 = numpy_or_fake(monkeypatch)
    scale = {"decimal nan": decimal.Decimal("nan"), "decimal inf": decimal.Decimal("-Infinity"),
             "huge fraction": fractions.Fraction(10 ** 400, 3), "numpy nan": np_float32("nan"),
             "numpy bool": np_bool(True)}.get(scale, scale) if isinstance(scale, str) else scale
    lib = LibraryCalls(monkeypatch)
    with pytest.raises(exc) as e:
        call(scale=scale)
    assert words in str(e.value)
    assert lib.loads == []


@pytest.mark.parametrize("kind", ["lse", "k"])
def test_misalignment_hint_fits_a_non_torch_array(kind):
    q, k, v = fakes()
    o, lse = out_for((2, 3, 17, 64))
    if kind == "k":
        k = FakeCuda((2, 3, 17, 64), ptr=(2 << 20) + 2)
    else:
        lse = FakeCuda((2, 3, 17), "<f4", ptr=(5 << 20) + 2)
    with pytest.raises(ValueError) as e:
        fa.forward(q, k, v, out=(o, lse))
    assert "fresh allocation that starts on a %d-byte boundary" % (16 if kind == "k" else 4) in str(e.value)
    assert ".clone()" not in str(e.value)


# ---- on the GPU ------------------------------------------------------------------------------

def gpu_or_skip():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: the GPU tests need it")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch %s sees no CUDA GPU" % torch.__version__)
    if not os.path.exists(fa.library_path()):
        pytest.skip("%s is missing: run make lib (make check-python does)" % fa.library_path())
    return torch


def reference(torch, q, k, v, causal, scale):
    """float64 O, LSE and per-element tolerances: check.c's rule before 5b2fd89, with the row's Vmax
    where check.c now takes each element's own sum_j p_j |v_jd| (looser; not ported: these tests run
    on a GPU only, and none was at hand when check.c changed)."""
    q64, k64, v64 = q.double(), k.double(), v.double()
    N, D = q.shape[-2], q.shape[-1]
    s = (q64 @ k64.transpose(-2, -1)) * scale
    sabs = (q64.abs() @ k64.abs().transpose(-2, -1)) * abs(scale)
    vrow = v64.abs().amax(-1)                                    # max |v_jd| per key
    if causal:
        hide = torch.ones(N, N, dtype=torch.bool, device=q.device).triu_(1)
        s = s.masked_fill(hide, float("-inf"))
        sabs = sabs.masked_fill(hide, 0.0)
        vmax = torch.cummax(vrow, dim=-1).values                 # over keys 0..i
    else:
        vmax = vrow.amax(-1, keepdim=True).expand(vrow.shape)
    lse = torch.logsumexp(s, dim=-1)
    o = torch.softmax(s, dim=-1) @ v64
    u = 2.0 ** -11 if q.dtype == torch.float16 else 2.0 ** -8
    ds = U32 * (D + 16) * sabs.amax(-1)
    tol_o = 2 * u * o.abs() + ((2 * u + 2 * ds + 8 * math.sqrt(N) * U32) * vmax)[..., None] + 1e-7
    tol_lse = ds + U32 * (8 * math.sqrt(N) + 16) + 4 * U32 * lse.abs() + 1e-6
    return o, lse, tol_o, tol_lse


def stage_or_skip(torch, stage):
    """The Hopper stages (07-09) need an sm_90 GPU."""
    if stage not in (None, "06") and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("stage %s needs an sm_90 GPU (H100, H200); this one is sm_%d%d"
                    % ((stage,) + torch.cuda.get_device_capability()))


def run_and_check(torch, B, H, N, D, causal, dtype, scale=None, stream=None, stage=None):
    gen = torch.Generator(device="cuda").manual_seed(1000 * N + D + causal)
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    o = torch.full_like(q, float("nan"))
    lse = torch.full((B, H, N), float("nan"), device="cuda")
    got_o, got_lse = fa.forward(q, k, v, causal=causal, scale=scale, out=(o, lse), stream=stream, stage=stage)
    torch.cuda.synchronize()
    assert got_o is o and got_lse is lse
    ref_o, ref_lse, tol_o, tol_lse = reference(torch, q, k, v, causal, scale or 1 / math.sqrt(D))
    assert bool(torch.isfinite(o).all()), "O has NaN or inf: an element was never written"
    assert bool(torch.isfinite(lse).all()), "LSE has NaN or inf"
    worst_o = float(((o.double() - ref_o).abs() / tol_o).max())
    worst_lse = float(((lse.double() - ref_lse).abs() / tol_lse).max())
    assert worst_o <= 1.0, "O: worst |err| / tol = %.3g" % worst_o
    assert worst_lse <= 1.0, "LSE: worst |err| / tol = %.3g" % worst_lse


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [1, 17, 129, 1000])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("stage", ["06", "07", "08", "09", None])
def test_matches_float64_reference(stage, dtype, causal, N, D):
    torch = gpu_or_skip()
    stage_or_skip(torch, stage)
    run_and_check(torch, 2, 3, N, D, causal, getattr(torch, dtype), stage=stage)


@pytest.mark.parametrize("stage", ["07", "08", "09"])
def test_hopper_stage_on_another_gpu_says_so(stage, monkeypatch):
    """On a GPU other than sm_90 the library refuses (ValueError naming it) and writes nothing.
    ATTN_FAKE_SM (kit/device_sm.h) makes the H200 answer as an A100 would; as itself it then runs."""
    torch = gpu_or_skip()
    stage_or_skip(torch, stage)
    q = torch.randn(1, 2, 100, 64, device="cuda", dtype=torch.float16)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((1, 2, 100), float("nan"), device="cuda")
    monkeypatch.setenv("ATTN_FAKE_SM", "80")
    with pytest.raises(ValueError, match=r"device: stages 07-09 need an sm_90 GPU .*\(got sm_80\)"):
        fa.forward(q, q, q, out=(o, lse), stage=stage)
    torch.cuda.synchronize()
    assert bool(torch.isnan(o).all()) and bool(torch.isnan(lse).all()), "written though refused"
    monkeypatch.setenv("ATTN_FAKE_SM", "90")
    fa.forward(q, q, q, out=(o, lse), stage=stage)
    torch.cuda.synchronize()
    assert bool(torch.isfinite(o).all()) and bool(torch.isfinite(lse).all())


@pytest.mark.parametrize("D", [32, 96, 256])
def test_other_head_dims(D):
    torch = gpu_or_skip()
    run_and_check(torch, 1, 2, 77, D, True, torch.float16)


def test_scale_and_a_side_stream():
    torch = gpu_or_skip()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):      # the default stream= is the current one: s
        run_and_check(torch, 1, 2, 300, 64, False, torch.bfloat16, scale=0.3)


def test_new_outputs_and_cuda_array_interface():
    torch = gpu_or_skip()
    q, k, v = (torch.randn(1, 2, 65, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    o, lse = fa.forward(q, k, v)
    assert o.shape == q.shape and o.dtype == q.dtype and lse.shape == (1, 2, 65) and lse.dtype == torch.float32

    class View:   # a non-torch array: the interface alone
        def __init__(self, t):
            self.__cuda_array_interface__ = t.__cuda_array_interface__
    o2, lse2 = torch.full_like(o, float("nan")), torch.full_like(lse, float("nan"))
    fa.forward(View(q), View(k), View(v), out=(View(o2), View(lse2)),
               stream=torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert torch.equal(o, o2) and torch.equal(lse, lse2)


def test_refusals_on_torch_tensors():
    torch = gpu_or_skip()
    q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="q must be on a CUDA device"):
        fa.forward(q.cpu(), q, q)
    with pytest.raises(TypeError, match="k must be fp16"):
        fa.forward(q, q.bfloat16(), q)
    with pytest.raises(ValueError, match="v must be contiguous"):
        fa.forward(q, q, q.transpose(2, 3))
    flat = torch.empty(q.numel() + 1, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="k must start on a 16-byte boundary"):
        fa.forward(q, flat[1:].view(q.shape), q)
    q72 = torch.randn(1, 2, 64, 72, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match=r"D \(q's last dim\) = 72 is unsupported by every forward stage"):
        fa.forward(q72, q72, q72)
    with pytest.raises(ValueError, match=r"call \.clone\(\)"):
        fa.forward(q, flat[1:].view(q.shape), q)


def test_stream_takes_an_int_or_a_stream_object_and_is_checked_before_loading(monkeypatch):
    lib = LibraryCalls(monkeypatch)

    class FakeStream:   # what forward reads of a torch.cuda.Stream
        cuda_stream = 0x5eed

    call(stream=FakeStream())
    assert lib.calls[-1][12] == 0x5eed
    call(stream=2 ** 64 - 1)
    assert lib.calls[-1][12] == 2 ** 64 - 1
    n = len(lib.loads)
    for bad in ("abc", -1, 2 ** 64, True, FakeNumpy.bool_(1)):
        with pytest.raises((TypeError, ValueError), match="stream must be"):
            call(stream=bad)
    assert len(lib.loads) == n, "the library was loaded for a bad stream"


def test_forward_stage_is_the_fastest_here():
    """09 on an H100 or H200 at the head dims it takes and with an LSE; 06 everywhere else."""
    torch = gpu_or_skip()
    hopper = torch.cuda.get_device_capability() == (9, 0)
    for D in (32, 64, 80, 96, 128, 192, 256):
        q = torch.empty(2, 3, 100, D, device="cuda", dtype=torch.float16)
        assert fa.forward_stage(q) == ("09" if hopper and D in (64, 128, 256) else "06"), D
        assert fa.forward_stage(q, lse=False) == "06", D
