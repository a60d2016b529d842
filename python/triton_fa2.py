"""triton_fa2: the FlashAttention-2 forward in Triton, written after the walk-through this suite started from.

    import torch, sys; sys.path.insert(0, "python")
    from triton_fa2 import attention
    o, lse = attention(q, k, v, causal=True)        # q, k, v: CUDA [B, H, N, D], fp16 or bf16

That walk-through (of the Triton tutorial's kernel; not part of the repository) explains the kernel
this one follows: this is the project's own kernel built on the same ideas, so that `make bench` can
set the C stages against the kernel the walk-through explains (bench/peers.py runs it as the `triton_fa2` peer):
  - grid (cdiv(N, BLOCK_M), B*H): program (i, bh) owns rows i*BLOCK_M.. of one (batch, head), holds
    its Q tile for the whole K/V loop (Q outer, as in FA2), and no program talks to another;
  - online softmax per row: running max m, running sum l, accumulator acc; scores are scaled by
    scale * log2(e) once so every exponential is an exp2; alpha = exp2(m_old - m_new) rescales l and acc;
  - causal: the key tiles wholly below the diagonal take the unmasked path (the seed's STAGE 1,
    "off-band"), the BLOCK_M keys on the diagonal the masked one (STAGE 2, "on-band"), tiles above it
    are never visited; non-causal runs every tile unmasked (STAGE 3), plus one tail tile masked at
    key N when N is not a multiple of BLOCK_N;
  - Q, K, V tiles come through tensor descriptors (TMA on Hopper) where Triton and the GPU offer them,
    through plain pointer loads otherwise;
  - the tile shape is autotuned over a few (BLOCK_M, BLOCK_N, warps, stages);
  - epilogue: O = acc / l, and LSE = m + log2(l), kept for a backward pass; returned in natural log
    (times ln 2), as every stage of the suite defines LSE.
Limits: forward only; head dims 16, 32, 64, 128; N of any size >= 1.
"""
import math

import torch
import triton
import triton.language as tl
import triton.testing

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # Triton before 3.4: pointer loads only
    TensorDescriptor = None

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
HEAD_DIMS = (16, 32, 64, 128)


@triton.jit
def _tile(src, row0, first, N, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr, USE_TMA: tl.constexpr):
    """Rows first..first+BLOCK of one head ([BLOCK, HEAD_DIM]); row0 is the head's first row in the
    [B*H*N, D] view. TMA reads rows past N from the next head (or zeros past the tensor): they are
    finite, and the caller masks their scores or never stores their outputs."""
    if USE_TMA:
        return src.load([row0 + first, 0])
    else:
        rows = first + tl.arange(0, BLOCK)
        ptrs = src + (row0 + rows).to(tl.int64)[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
        return tl.load(ptrs, mask=(rows < N)[:, None], other=0.0)


@triton.jit
def _kv_loop(acc, l_i, m_i, q, K, V, row0, N, offs_m, lo, hi, qk_scale,
             MASK: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, USE_TMA: tl.constexpr):
    """Key tiles lo..hi through the online softmax. MASK 0: none; 1: the diagonal (key <= query);
    2: keys past N."""
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = _tile(K, row0, start_n, N, BLOCK_N, HEAD_DIM, USE_TMA)
        s = tl.dot(q, tl.trans(k)) * qk_scale                   # scores in log2 units
        if MASK == 1:
            s = tl.where(offs_m[:, None] >= (start_n + offs_n)[None, :], s, float("-inf"))
        if MASK == 2:
            s = tl.where((start_n + offs_n)[None, :] < N, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))                   # every row sees key 0 first: finite
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)                       # 0 on the first tile (m_i = -inf)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = _tile(V, row0, start_n, N, BLOCK_N, HEAD_DIM, USE_TMA)
        acc = tl.dot(p.to(q.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(Q, K, V, O, LSE, scale, N,
              HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, USE_TMA: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):
    start_m = tl.program_id(0)                  # which BLOCK_M rows of Q
    row0 = tl.program_id(1) * N                 # batch * heads: the head's first row
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = scale * 1.4426950408889634       # log2(e): exp(x) = exp2(x log2 e)
    q = _tile(Q, row0, start_m * BLOCK_M, N, BLOCK_M, HEAD_DIM, USE_TMA)   # held for the whole loop
    if CAUSAL:
        acc, l_i, m_i = _kv_loop(acc, l_i, m_i, q, K, V, row0, N, offs_m, 0, start_m * BLOCK_M,
                                 qk_scale, 0, BLOCK_N, HEAD_DIM, USE_TMA)  # off-band: no mask
        acc, l_i, m_i = _kv_loop(acc, l_i, m_i, q, K, V, row0, N, offs_m, start_m * BLOCK_M,
                                 (start_m + 1) * BLOCK_M, qk_scale, 1, BLOCK_N, HEAD_DIM, USE_TMA)
    else:
        full = N if EVEN_N else (N // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _kv_loop(acc, l_i, m_i, q, K, V, row0, N, offs_m, 0, full,
                                 qk_scale, 0, BLOCK_N, HEAD_DIM, USE_TMA)
        if not EVEN_N:
            acc, l_i, m_i = _kv_loop(acc, l_i, m_i, q, K, V, row0, N, offs_m, full, full + BLOCK_N,
                                     qk_scale, 2, BLOCK_N, HEAD_DIM, USE_TMA)
    # Epilogue: normalise, and the log-sum-exp m + log2(l) in natural log; rows past N are dropped.
    keep = offs_m < N
    tl.store(LSE + row0 + offs_m, (m_i + tl.math.log2(l_i)) * 0.6931471805599453, mask=keep)
    o_ptrs = O + (row0 + offs_m).to(tl.int64)[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
    tl.store(o_ptrs, (acc / l_i[:, None]).to(q.dtype), mask=keep[:, None])


def _set_blocks(nargs):
    """Autotuning picks the tile shape after the descriptors exist: give them the config's blocks."""
    if TensorDescriptor is not None and isinstance(nargs["Q"], TensorDescriptor):
        nargs["Q"].block_shape = [nargs["BLOCK_M"], nargs["HEAD_DIM"]]
        nargs["K"].block_shape = [nargs["BLOCK_N"], nargs["HEAD_DIM"]]
        nargs["V"].block_shape = [nargs["BLOCK_N"], nargs["HEAD_DIM"]]


# A few shapes: BLOCK_N divides BLOCK_M (the causal split needs it). More configs tune better but
# compile longer, and make bench has a budget of minutes.
CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s, pre_hook=_set_blocks)
           for bm, bn, w, s in ((128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3))]

_even = triton.heuristics({"EVEN_N": lambda a: a["N"] % a["BLOCK_N"] == 0})(_attn_fwd)
_tuned = triton.autotune(
    CONFIGS, key=["N", "HEAD_DIM", "CAUSAL", "USE_TMA"],
    do_bench=lambda fn, quantiles: triton.testing.do_bench(fn, warmup=5, rep=20, quantiles=quantiles))(_even)


def tma_available(device=None):
    """Tensor descriptors need Triton >= 3.4 and a GPU with TMA (sm_90 or newer)."""
    return TensorDescriptor is not None and torch.cuda.get_device_capability(device)[0] >= 9


def attention(q, k, v, causal=False, scale=None, use_tma=None, config=None):
    """(O, LSE) for q, k, v of shape [B, H, N, D] (one dtype: fp16 or bf16; contiguous; CUDA).
    use_tma: None picks tensor descriptors where available. config: (BLOCK_M, BLOCK_N, warps, stages)
    to skip autotuning (the tests use it: fewer compilations)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not x.is_cuda or x.dim() != 4 or x.shape != q.shape or x.dtype != q.dtype or not x.is_contiguous():
            raise ValueError("%s must be a contiguous CUDA tensor [B, H, N, D] like q (got %s %s on %s)"
                             % (name, list(x.shape), x.dtype, x.device))
    B, H, N, D = q.shape
    if q.dtype not in (torch.float16, torch.bfloat16) or D not in HEAD_DIMS or min(B, H, N) < 1:
        raise ValueError("triton_fa2 takes fp16 or bf16, D in %s, B, H, N >= 1 (got %s, %s)"
                         % (HEAD_DIMS, q.dtype, list(q.shape)))
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    use_tma = tma_available(q.device) if use_tma is None else bool(use_tma)
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), device=q.device, dtype=torch.float32)
    srcs = (q, k, v)
    if use_tma:   # the [B*H*N, D] view; the blocks are set per config (_set_blocks)
        srcs = [TensorDescriptor(x, [B * H * N, D], [D, 1], [16, D]) for x in srcs]
    with torch.cuda.device(q.device):
        if config is None:
            grid = lambda meta: (triton.cdiv(N, meta["BLOCK_M"]), B * H)  # noqa: E731
            _tuned[grid](*srcs, o, lse, scale, N, HEAD_DIM=D, CAUSAL=bool(causal), USE_TMA=use_tma)
        else:
            bm, bn, w, s = config
            _set_blocks({"Q": srcs[0], "K": srcs[1], "V": srcs[2], "BLOCK_M": bm, "BLOCK_N": bn, "HEAD_DIM": D})
            _even[(triton.cdiv(N, bm), B * H)](*srcs, o, lse, scale, N, HEAD_DIM=D, CAUSAL=bool(causal),
                                               USE_TMA=use_tma, BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)
    return o, lse
