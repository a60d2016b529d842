#!/usr/bin/env python3
"""bench/peers.py: the peers beside the stages, on the same shapes, in the same CSV format.

Peers (the `stage` column):
  torch_naive  the seed's baseline: scores = q @ k^T * scale (fp16), masked_fill(-inf) above the
               diagonal when causal, softmax in fp32, cast back to fp16, probs @ v
  sdpa_flash   F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.FLASH_ATTENTION)
  sdpa_cudnn   the same under sdpa_kernel(SDPBackend.CUDNN_ATTENTION)
  triton_fa2   python/triton_fa2.py, the seed's Triton kernel as written here (when triton imports)
  flash_attn4  flash-attn-4's CuTe DSL kernel, flash_attn.cute.interface.flash_attn_func (when the
               flash-attn-4 package imports; on Hopper it runs its FlashAttention-3-class sm90 path)
  flashattn_06 .. flashattn_09  the suite's fast stages by name through its public library,
               build/libflashattn.so, and python/flashattn_stages.py (ctypes), where make has built
               it: the C kernels timed in this same process
(causal: is_causal=True). Inputs are random fp16 [B, H, N, D]. Each point: the first call is the
warm-up and the memory measurement (torch.cuda.max_memory_allocated after reset_peak_memory_stats,
minus what was allocated before and minus the outputs; Triton compiles and autotunes in a call
before that), then about --warmup-ms of untimed runs (default 100, at least 1 or 2; the H200's clock
falls about 20% within 100 ms of full load: attn-bench --help), then CUDA-event timing, median over adaptive
repeats (aim --repeat-ms of timed work, 3..50 runs; --cold writes 4x the L2 size before each,
outside the timed window), then a spot check of --check-rows rows against a float64 reference with
the tolerance rule of suite/check.c (taking the fp16 scores of the naive path into account).
torch.cuda.OutOfMemoryError -> status OOM; a backend that refuses a shape -> status unsupported,
with the reason.

The backward (rows with pass bwd; --no-backward leaves them out, --no-forward the forward's): the
peers that have one (sdpa_flash, sdpa_cudnn, flash_attn4) run their forward on leaf copies of q, k, v
that require grad, then torch.autograd.grad(O, (q, k, v), dO, retain_graph=True) is the timed call:
the same backward node o.backward(dO) would run, but the gradients come back as they are, never
accumulated into .grad, so no zeroing and no accumulate or copy kernel is in the timed window. The
first call measures the memory (peak beyond what the forward left allocated, less dQ, dK and dV),
the rest is timed as the forward is (the same warm-up and repeats); TFLOP/s count 2.5 times the
forward's FLOPs. dQ, dK and dV are checked against a float64 reference on three heads (the first,
the last, one at random: every head when B*H <= 3) with suite/check_backward.c's tolerance
(check_grads).

Optional: without PyTorch or without a CUDA GPU it says why and exits 0, writing nothing.
bench/report.sh merges its CSV with attn-bench's (make bench does).
"""
import argparse
import datetime
import math
import os
import random
import stat
import statistics
import sys
import tempfile
import time
import warnings

COLS = ("gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms,tflops,extra_bytes,workspace_bytes,"
        "max_abs_err,check,repeats,l2,note,pass,warmup_ms,gpus,driver,sm_clock_mhz,power_limit_w,torch,cudnn,"
        "triton,fa4").split(",")
PEERS = ["torch_naive", "sdpa_flash", "sdpa_cudnn"]
BACKWARD_PEERS = ["sdpa_flash", "sdpa_cudnn", "flash_attn4"]  # the peers whose backward is timed
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
U16 = 2.0 ** -11
U32 = 2.0 ** -24
EXP_ERR = 2.0 ** -22  # ex2.approx's relative error, a shift of the scores (suite/check.c's term (c))
ETA_F16 = 2.0 ** -25  # half of fp16's subnormal spacing: a P' under 2^-14 is off by up to this (term (b))


def log(msg, end="\n"):
    sys.stderr.write(msg + end)
    sys.stderr.flush()


def clean(s):
    """A field that can go into the CSV and a Markdown table as it is."""
    s = str(s)
    for a, b in ((",", ";"), ("|", ";"), ('"', "'"), ("\n", " "), ("\r", " "), ("\t", " ")):
        s = s.replace(a, b)
    return " ".join(s.split())[:300]


# attn-bench's bounds (common/attn.h: ATTN_MAX_B, ATTN_MAX_H, ATTN_MAX_N, ATTN_MAX_D; its --help)
MAX_B = MAX_H = 1 << 20
MAX_N = 1 << 24
MAX_D = 256
MAX_LIST = 32
MAX_CHECK_ROWS = 1 << 20
OTHER_PEERS = ["triton_fa2", "flash_attn4"]


MAX_REPEAT = 1000   # timed runs per point: attn-bench takes 3 to 50; more is a long wait, not a better median


def strict_int(s):
    """An integer as attn-bench takes one: digits, and an optional '-' (" 12" and "+5" are refused)."""
    t = s[1:] if s.startswith("-") else s
    if not t or not all("0" <= ch <= "9" for ch in t):
        raise ValueError(s)
    return int(s)


def int_in(lo, hi):
    def parse(s):
        try:
            v = strict_int(s)
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            raise argparse.ArgumentTypeError("must be an integer from %d to %d (got %r)" % (lo, hi, s))
        return v
    return parse


def int_list(hi):
    def parse(s):
        what = "must be a comma-separated list of 1 to %d distinct integers from 1 to %d (got %r)" % (MAX_LIST, hi, s)
        try:
            v = [strict_int(x) for x in s.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(what)
        if not v or len(v) > MAX_LIST or min(v) < 1 or max(v) > hi or len(set(v)) != len(v):
            raise argparse.ArgumentTypeError(what)
        return v
    return parse


def finite_ms(s):
    try:
        v = float(s)
    except ValueError:
        v = math.nan
    if not 0 <= v < math.inf:
        raise argparse.ArgumentTypeError("must be a finite number >= 0 (got %r)" % s)
    return v


def known_peers():
    """Every peer name this script knows, whether or not it can run here: the library's stages come
    from python/flashattn_stages.py (no PyTorch needed to ask it)."""
    names = PEERS + OTHER_PEERS
    try:
        import flashattn_stages as fa
        names += [library_peer(st) for st in fa.stages()]
    except Exception as e:  # a broken python/: the libraries' names are then not checked here
        log("peers: python/flashattn_stages.py does not import (%s); library peers unchecked" % e)
        return None
    return names


def csv_target_problem(path):
    """Why path may not be replaced by the CSV, or None: it may be when it does not exist, or is a file
    or a link (os.replace replaces the link, never what it points to). A directory, FIFO or device
    would be replaced by the file (as root, even /dev/full). A path that names no file is refused here
    too, before the sweep: an empty one (os.replace(tmp, '') failed only after it), one ending in '/'
    (a folder's name) and one lstat cannot look up for another reason than its absence (a file on the
    way, a folder not to be searched: a NotADirectoryError traceback, exit 1, where a flag's error is
    due)."""
    if not path:
        return "--csv: a file's path is needed (got '')"
    if path.endswith("/"):
        return "--csv: %r ends in '/', a folder's name (give a file's path)" % path
    try:
        m = os.lstat(path).st_mode
    except FileNotFoundError:  # a missing folder on the way: write_csv makes it
        return None
    except OSError as e:
        return "--csv: cannot look up %r: %s" % (path, e.strerror or e)
    if stat.S_ISREG(m) or stat.S_ISLNK(m):
        return None
    kind = ("a directory" if stat.S_ISDIR(m) else "a FIFO" if stat.S_ISFIFO(m)
            else "a socket" if stat.S_ISSOCK(m) else "a device")
    return "--csv: %r is %s, not a file: it would be replaced (give a file's path)" % (path, kind)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="B=1 H=4 N=128,512,1024 D=64")
    ap.add_argument("--csv", default="build/bench/bench_peers.csv", help="CSV to write")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--batch", type=int_in(1, MAX_B))
    ap.add_argument("--heads", type=int_in(1, MAX_H))
    ap.add_argument("--seqs", type=int_list(MAX_N))
    ap.add_argument("--dims", type=int_list(MAX_D))
    ap.add_argument("--causal", choices=("both", "0", "1"), default="both")
    ap.add_argument("--repeat-ms", type=finite_ms, default=300.0)
    ap.add_argument("--warmup-ms", type=finite_ms, default=100.0,
                    help="untimed work before each point's timed runs (default 100; 0: 1 or 2 runs), as attn-bench's")
    ap.add_argument("--cold", action="store_true", help="flush L2 (write 4x its size) before every timed run")
    ap.add_argument("--min-repeat", type=int_in(1, MAX_REPEAT), default=3, help="timed runs per point, at least")
    ap.add_argument("--max-repeat", type=int_in(1, MAX_REPEAT), default=50, help="timed runs per point, at most")
    ap.add_argument("--check-rows", type=int_in(0, MAX_CHECK_ROWS), default=16)
    ap.add_argument("--peers", help="a subset of torch_naive,sdpa_flash,sdpa_cudnn,triton_fa2,flash_attn4,flashattn_06,...")
    ap.add_argument("--forward", action=argparse.BooleanOptionalAction, default=True,
                    help="time the peers' forward (default; --no-forward: the backward alone)")
    ap.add_argument("--backward", action=argparse.BooleanOptionalAction, default=True,
                    help="time the backward of %s (default; --no-backward: the forward alone)"
                    % ",".join(BACKWARD_PEERS))
    a = ap.parse_args(argv)
    if not a.forward and not a.backward:
        ap.error("--no-forward and --no-backward together leave nothing to time")
    if a.peers is not None:
        a.peers = a.peers.split(",")
        known = known_peers()
        bad = [p for p in a.peers if not p or (known is not None and p not in known)]
        if bad or len(set(a.peers)) != len(a.peers):
            ap.error("--peers must be a comma-separated list of distinct names from %s (got %r)"
                     % (",".join(known or PEERS + OTHER_PEERS), ",".join(a.peers)))
    problem = csv_target_problem(a.csv)
    if problem:
        ap.error(problem)
    if a.quick:
        defaults = dict(batch=1, heads=4, seqs=[128, 512, 1024], dims=[64])
    else:
        defaults = dict(batch=4, heads=32, seqs=[512, 1024, 2048, 4096, 8192, 16384], dims=[64, 128])
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.max_repeat < a.min_repeat:
        ap.error("--max-repeat must be at least --min-repeat (got %d and %d)" % (a.max_repeat, a.min_repeat))
    return a


class Unsupported(Exception):
    pass


def backend_ctx(torch, which):
    """A context manager that allows exactly one SDPA backend, or raises Unsupported."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        SDPBackend = sdpa_kernel = None
    if sdpa_kernel is not None:
        name = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"}[which]
        if not hasattr(SDPBackend, name):
            raise Unsupported("PyTorch %s has no SDPBackend.%s" % (torch.__version__, name))
        return sdpa_kernel(getattr(SDPBackend, name))
    if which == "flash":  # PyTorch < 2.3
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                              enable_mem_efficient=False)
    raise Unsupported("PyTorch %s has no cuDNN attention backend" % torch.__version__)


def find_kernels(torch):
    """The peers beyond PyTorch that can run here: name -> f(q, k, v, causal, scale) -> (O, LSE)."""
    found = {}
    try:
        import triton_fa2
        found["triton_fa2"] = lambda q, k, v, c, s: triton_fa2.attention(q, k, v, causal=c, scale=s)
    except Exception as e:  # ImportError without triton; anything a broken install raises
        log("peers: triton_fa2 skipped: %s: %s" % (type(e).__name__, str(e).split("\n")[0]))
    try:
        from flash_attn.cute import interface as fa4
        found["flash_attn4"] = lambda q, k, v, c, s: flash_attn4(fa4, q, k, v, c, s)
    except Exception as e:  # not installed (the usual case), or a broken install
        log("peers: flash_attn4 skipped: %s: %s" % (type(e).__name__, str(e).split("\n")[0]))
    import flashattn_stages as fa
    path = fa.library_path()
    if not os.path.exists(path):
        log("peers: the library's stages skipped: %s is not built (make lib)" % path)
        return found
    for stage in fa.stages():
        found[library_peer(stage)] = (
            lambda q, k, v, c, s, st=stage: fa.forward(q, k, v, causal=c, scale=s, stage=st))
    return found


def run_facts(torch, args, kernels):
    """The run's facts every row records (bench/README.md, "CSV"): the warm-up asked for, one GPU, and
    the libraries the peers ran on, "-" for one that did not run here. The driver, the SM clock and the
    power limit are left to attn-bench and make bench (nvidia-smi), which fill the same columns."""
    from importlib import metadata

    def version(*names):
        for name in names:
            try:
                return metadata.version(name)
            except Exception:  # not installed under that name (or a broken install's metadata)
                pass
        return "-"
    return dict(warmup_ms="%g" % args.warmup_ms, gpus="1", torch=clean(torch.__version__),
                cudnn=clean(torch.backends.cudnn.version() or "-"),
                triton=clean(version("triton") if "triton_fa2" in kernels else "-"),
                fa4=clean(version("flash-attn-4", "flash_attn_4") if "flash_attn4" in kernels else "-"))


def library_peer(stage):
    """The peer name of a stage run through the public library: flashattn_09."""
    return "flashattn_" + stage


def flash_attn4(fa4, q, k, v, causal, scale):
    """flash-attn-4 takes [B, N, H, D]: the transposed views of our [B, H, N, D] tensors, no copies."""
    got = fa4.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                              softmax_scale=scale, causal=bool(causal))
    o, lse = got if isinstance(got, tuple) else (got, None)
    return (o.transpose(1, 2), lse) if lse is not None else o.transpose(1, 2)


def make_fn(torch, peer, q, k, v, causal, scale, kernels):
    F = torch.nn.functional
    if peer in kernels:
        return lambda: kernels[peer](q, k, v, causal, scale)
    if peer == "torch_naive":
        n = q.shape[-2]

        def naive():
            s = (q @ k.transpose(-2, -1)) * scale
            if causal:
                mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu_(1)
                s = s.masked_fill(mask, float("-inf"))
            p = torch.softmax(s.float(), dim=-1).to(q.dtype)
            return p @ v
        return naive

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    return sdpa


def o_tolerance(got, ref, mag, sub, vmax, sabs, D, n, lo, hi, fp16_scores=False, minimum=min, where=None):
    """suite/check.c's tolerance of one element of O (its header derives it; u = U16, fp16): tol =
    2u (|ref| + M) + 2E + expm1(2 (ds + 2^-22)) M + 8 sqrt(n) u32 M + 1e-7 with ds = u32 (D + 16) Sabs,
    M = sum_j p_j |v_jd| and E = sum_j min(p_j, eta / l) |v_jd| the element's own magnitudes (mag and
    sub, from the row's exact weights, as check_rows takes them), and, where term (c) is its largest
    part (2 ds > 4u + 8 sqrt(n) u32), the rule of the range: no more than the distance from ref to
    [lo - w, hi + w] on got's side, w = (4u + 8 sqrt(n) u32 + 5e-9) Vmax + 2E + 1e-7, lo and hi the
    range of V's column over the keys within reach of the row's max (range_of_v). fp16_scores: the path
    rounds its scores to fp16 before the softmax (torch_naive: q @ k^T in fp16), an error of u16 Sabs
    that no stage makes, added to ds for it alone. got, ref, mag, sub, lo and hi: floats, or tensors of
    a row with minimum=torch.minimum and where=torch.where."""
    ds = (U32 * (D + 16) + (U16 if fp16_scores else 0.0)) * sabs
    tol = (2 * U16 * (abs(ref) + mag) + 2 * sub + math.expm1(2 * (ds + EXP_ERR)) * mag
           + 8 * math.sqrt(n) * U32 * mag + 1e-7)
    if not 2 * ds > 4 * U16 + 8 * math.sqrt(n) * U32:
        return tol
    w = (4 * U16 + 8 * math.sqrt(n) * U32 + 5e-9) * vmax + 2 * sub + 1e-7
    edge = (where(got > ref, hi + w - ref, ref - (lo - w)) if where is not None
            else hi + w - ref if got > ref else ref - (lo - w))
    return minimum(tol, edge)


def range_reach(sabs, D, n, fp16_scores=False):
    """How far below the row's max score a key counts for the rule of the range (suite/check.c):
    2 ds (1 + 2^-20) + ln n + 20, ds as o_tolerance's."""
    ds = (U32 * (D + 16) + (U16 if fp16_scores else 0.0)) * sabs
    return 2 * ds * (1 + 2.0 ** -20) + math.log(n) + 20


def check_rows(torch, out, q, k, v, causal, scale, nrows, seed, fp16_scores=False):
    """Max abs error and pass/fail on sampled rows against a float64 reference, element by element
    with suite/check.c's tolerance and its rule of the range (o_tolerance); fp16_scores for the path
    that rounds its scores to fp16 (torch_naive). K and V may have a shape of their own, [B, H_kv, N_k,
    D] (bench/decode_peers.py): query head h reads K/V head h / (H / H_kv), and causal row i sees keys
    0 .. i + N_k - N (the mask at the bottom right, common/attn.h)."""
    B, H, N, D = q.shape
    H_kv, N_k = k.shape[1], k.shape[2]
    rng = random.Random(seed)
    rows = {(0, 0, 0), (B - 1, H - 1, N - 1)}
    while len(rows) < min(nrows, B * H * N):
        rows.add((rng.randrange(B), rng.randrange(H), rng.randrange(N)))
    max_err, worst = 0.0, 0.0
    finite = True
    for b, h, i in sorted(rows):
        n = i + N_k - N + 1 if causal else N_k
        qi = q[b, h, i].double()
        kk = k[b, h // (H // H_kv), :n].double()
        vv = v[b, h // (H // H_kv), :n].double()
        s = (kk @ qi) * scale
        e = torch.exp(s - s.max())
        total = e.sum()
        ref = (e / total) @ vv
        mag = (e / total) @ vv.abs()  # M_d = sum_j p_j |v_jd|
        sub = (torch.clamp(e, max=ETA_F16) / total) @ vv.abs()  # E_d = sum_j min(p_j, eta / l) |v_jd|
        got = out[b, h, i].double()
        if not bool(torch.isfinite(got).all()):
            finite = False
            continue
        sabs = float(((kk.abs() @ qi.abs()) * abs(scale)).max())
        vmax = float(vv.abs().max())
        near = s >= s.max() - range_reach(sabs, D, n, fp16_scores)
        lo, hi = vv[near].min(0).values, vv[near].max(0).values
        tol = o_tolerance(got, ref, mag, sub, vmax, sabs, D, n, lo, hi, fp16_scores, torch.minimum, torch.where)
        err = (got - ref).abs()
        max_err = max(max_err, float(err.max()))
        worst = max(worst, float((err / tol).max()))
    return finite and worst <= 1.0, max_err, worst, len(rows)


U16_BY_DTYPE = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
ETA_BY_DTYPE = {"float16": 2.0 ** -25, "bfloat16": 2.0 ** -134}  # fp16's subnormal step / 2; bf16's


def pick_heads(B, H, seed):
    """The heads check_grads compares: every one when B*H <= 3, else the first, the last and one at
    random between them, as suite/check_backward.c picks them."""
    if B * H <= 3:
        return [(b, h) for b in range(B) for h in range(H)]
    r = random.Random(seed).randrange(1, B * H - 1)
    return [(0, 0), divmod(r, H), (B - 1, H - 1)]


def head_reference(torch, q, k, v, g, o_got, causal, scale, u, eta, chunk_elems=1 << 25):
    """One head in float64 ([N, D] each; g is dO, o_got the peer's forward O): the exact dQ, dK, dV and
    suite/check_backward.c's tolerance terms for each element (its header derives them), row chunks
    of at most chunk_elems scores at a time. The peer's LSE is not seen: its error enters as the
    forward's LSE tolerance (suite/check.c), ds + u32 (8 sqrt(N) + 16) + 4 u32 |LSE| + 1e-6, where the
    C check puts the measured |LSE' - LSE|. Returns ((dq, dk, dv), (tq, tk, tv))."""
    N, D = q.shape
    sq = math.sqrt(N)
    g_sum = 8 * sq * U32 + 2 * U32
    aq, ak, av, ag = q.abs(), k.abs(), v.abs(), g.abs()
    dq, tq = torch.empty_like(q), torch.empty_like(q)
    dk, dv, tk, tv = (torch.zeros_like(q) for _ in range(4))
    rows = max(1, chunk_elems // N)
    cols = torch.arange(N, device=q.device)
    for r0 in range(0, N, rows):
        r1 = min(N, r0 + rows)
        qi, gi, ai = q[r0:r1], g[r0:r1], ag[r0:r1]
        s = (qi @ k.T) * scale
        sabs = (aq[r0:r1] @ ak.T) * abs(scale)
        hidden = (cols[None, :] > torch.arange(r0, r1, device=q.device)[:, None]) if causal else None
        if causal:
            s = s.masked_fill(hidden, -math.inf)
            sabs = sabs.masked_fill(hidden, 0.0)
        lse = torch.logsumexp(s, dim=1)
        p = torch.exp(s - lse[:, None])                      # 0 where hidden
        o = p @ v
        delta = (gi * o).sum(1)                              # D_i = dO_i . O_i, the reference's own
        dp = gi @ v.T
        a_ij = ai @ av.T                                      # A_ij = sum_d |dO_id v_jd|
        ds_bound = U32 * (D + 16) * sabs.max(1).values
        lse_err = ds_bound + U32 * (8 * sq + 16) + 4 * U32 * lse.abs() + 1e-6
        eps = ds_bound + lse_err + U32 * (4 * lse.abs() + 8)
        a = torch.expm1(eps) * (1 + u) + u
        og = o_got[r0:r1]
        b = (ai * (og - o).abs()).sum(1) + U32 * (D + 2) * (ai * og.abs()).sum(1)
        alpha, beta = a + u * (1 + a) + g_sum, (1 + a) * (1 + u) * U32 * (D + 2)
        gamma, wdelta = (1 + a) * (1 + u) * b, a + g_sum
        diff = dp - delta[:, None]
        w = p * (alpha[:, None] * diff.abs() + beta[:, None] * a_ij + gamma[:, None]) + eta
        wv = wdelta[:, None] * p + eta
        if causal:  # a hidden score is no term of any sum: no eta for it either
            w, wv = w.masked_fill(hidden, 0.0), wv.masked_fill(hidden, 0.0)
        ds = p * diff
        dq[r0:r1], tq[r0:r1] = scale * (ds @ k), abs(scale) * (w @ ak)
        dk += scale * (ds.T @ qi)
        tk += abs(scale) * (w.T @ aq[r0:r1])
        dv += p.T @ gi
        tv += wv.T @ ai
    return (dq, dk, dv), (tq, tk, tv)


def check_grads(torch, o, grads, q, k, v, d_o, causal, scale, seed):
    """The peer's dQ, dK, dV (grads, [B, H, N, D] in q's dtype) against the float64 reference on the
    heads pick_heads chooses, element by element with suite/check_backward.c's tolerance
    (head_reference): tol = 2 u |ref| + 2 t + 1e-7. Fails on the largest err / tol above 1 and on any
    NaN or inf. o: the peer's forward output, whose error enters the tolerance as in the C check.
    Returns a dict: ok, max_abs_err (over the three), worst (err / tol), heads, note."""
    B, H, N, D = q.shape
    u, eta = U16_BY_DTYPE[str(q.dtype).split(".")[-1]], ETA_BY_DTYPE[str(q.dtype).split(".")[-1]]
    heads = pick_heads(B, H, seed)
    max_err, worst, where, nonfinite = 0.0, 0.0, "", 0
    for b, h in heads:
        f64 = [x[b, h].double() for x in (q, k, v, d_o, o)]
        refs, tols = head_reference(torch, *f64[:4], f64[4], causal, scale, u, eta)
        for name, got, ref, tol in zip(("dQ", "dK", "dV"), grads, refs, tols):
            x = got[b, h].double()
            bad = ~torch.isfinite(x)
            nonfinite += int(bad.sum())
            err = (x - ref).abs()
            ratio = torch.nan_to_num(err / (2 * u * ref.abs() + 2 * tol + 1e-7), nan=math.inf)
            max_err = max(max_err, float(err.masked_fill(bad, 0.0).max()))
            r = float(ratio.max())
            if r > worst or not where:
                i, d = divmod(int(ratio.argmax()), D)
                worst = r
                where = "%s at b=%d h=%d n=%d d=%d: got %.5g want %.5g" % (
                    name, b, h, i, d, float(x[i, d]), float(ref[i, d]))
    ok = nonfinite == 0 and worst <= 1.0
    note = "%d heads: max abs err %.3g; worst err/tol %.3g, %s; %d non-finite" % (
        len(heads), max_err, worst, where, nonfinite)
    return dict(ok=ok, max_abs_err=max_err, worst=worst, heads=len(heads), note=note)


def time_fn(torch, fn, reps, warmup, flush=None, sleep_cycles=200000):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(reps)]
    if hasattr(torch.cuda, "_sleep"):
        # Keep the GPU busy (about 0.1 ms per run at 2 GHz; 0.2 ms for a backward, whose autograd call
        # costs Python more) while Python queues the runs: the events then time the GPU's work, not
        # Python's 10-40 us of launch overhead, which a 30 us kernel would otherwise show as idle time
        # (the C stages launch from C, where it is a few us).
        torch.cuda._sleep(sleep_cycles * reps)
    for a, b in ev:
        if flush is not None:  # cold L2: evict what the previous run left there, outside the timing
            flush.zero_()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in ev)


def short_oom(e):
    msg = str(e).split(". GPU")[0]
    return "CUDA out of memory: " + msg.replace("CUDA out of memory. ", "")


def first_call(torch, row, fn, compile_first=False):
    """fn() once, the warm-up and the memory measurement: (its result, the memory allocated before
    it), torch's peak reset just before it. None, with row's status and note, when it raised: OOM,
    unsupported (a backend that refuses the shape), error. compile_first: one call before, for the
    kernels that compile on first use (and Triton autotunes): that memory is not the kernel's."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if compile_first:
                fn()
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = fn()
            torch.cuda.synchronize()
            return out, base
        except torch.cuda.OutOfMemoryError as e:
            row.update(status="OOM", note=clean(short_oom(e)))
        except (RuntimeError, ValueError, NotImplementedError) as e:
            why = "; ".join(str(w.message).split("\n")[0] for w in caught) or str(e)
            text = (str(e) + why).lower()
            if "out of memory" in text:
                row.update(status="OOM", note=clean(short_oom(e)))
            elif isinstance(e, NotImplementedError) or any(
                    s in text for s in ("no available kernel", "support", "cudnn", "requires")):
                row.update(status="unsupported", note=clean(str(e).split("\n")[0] + " " + why))
            else:
                row.update(status="error", note=clean(str(e).split("\n")[0]))
    return None


def time_point(torch, args, fn, flush, row, flops, sleep_cycles=200000):
    """fn timed as every point is (one run for the estimate, about --warmup-ms untimed, about
    --repeat-ms timed, the median): row's ms, tflops, repeats and l2. False, with row's status OOM,
    when it ran out of memory."""
    try:
        est = time_fn(torch, fn, 1, 0)
        reps = max(args.min_repeat, min(args.max_repeat, math.ceil(args.repeat_ms / max(est, 1e-4))))
        warm = 0 if est >= 250 else max(1 if est >= 20 else 2,
                                        min(20000, math.ceil(args.warmup_ms / max(est, 1e-3))))
        ms = time_fn(torch, fn, reps, warm, flush, sleep_cycles)
    except torch.cuda.OutOfMemoryError as e:
        row.update(status="OOM", note=clean(short_oom(e)))
        return False
    row.update(ms="%.6g" % ms, tflops="%.6g" % (flops / (ms * 1e9)), repeats=str(reps),
               l2="cold" if flush is not None else "warm")
    return True


def set_check(row, ok, max_err, note):
    row.update(status="ok" if ok else "FAIL", max_abs_err="%.4g" % max_err, check="pass" if ok else "FAIL")
    if not ok:
        row["note"] = clean(note)


def run_point(torch, args, peer, q, k, v, causal, row, kernels, flush):
    """Fills row (status, ms, tflops, extra_bytes, max_abs_err, check, repeats, l2, note)."""
    B, H, N, D = q.shape
    scale = 1.0 / math.sqrt(D)
    fn = make_fn(torch, peer, q, k, v, causal, scale, kernels)
    ctx = None
    if peer.startswith("sdpa_"):
        try:
            ctx = backend_ctx(torch, peer.split("_")[1])
        except Unsupported as e:
            row.update(status="unsupported", note=clean(e))
            return
    try:
        if ctx is not None:
            ctx.__enter__()
        got = first_call(torch, row, fn, compile_first=peer in ("triton_fa2", "flash_attn4"))
        if got is None:
            return
        out, base = got
        peak = torch.cuda.max_memory_allocated()
        outs = out if isinstance(out, tuple) else (out,)  # (O, LSE) from the kernels, O from PyTorch
        extra = max(0, peak - base - sum(x.numel() * x.element_size() for x in outs))
        out = outs[0]
        ok, max_err, worst, nchecked = check_rows(torch, out, q, k, v, causal, scale, args.check_rows,
                                                   1000 + N + D + causal, fp16_scores=peer == "torch_naive")
        del out, outs
        flops = 4.0 * B * H * N * N * D / (2 if causal else 1)
        if time_point(torch, args, fn, flush, row, flops):
            row["extra_bytes"] = str(extra)
            set_check(row, ok, max_err, "%d rows: max abs err %.3g; worst err/tol %.3g" % (nchecked, max_err, worst))
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
        torch.cuda.empty_cache()


def backward_setup(torch, peer, q, k, v, causal, scale, kernels):
    """The peer's forward on leaf copies of q, k, v that require grad: (O, the leaves). The backward
    is then torch.autograd.grad(O, leaves, dO): the backend's backward node alone."""
    leaves = tuple(x.detach().requires_grad_() for x in (q, k, v))
    if peer == "flash_attn4":
        got = kernels[peer](*leaves, causal, scale)
        return (got[0] if isinstance(got, tuple) else got), leaves
    return torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=bool(causal)), leaves


def run_point_backward(torch, args, peer, q, k, v, d_o, causal, row, kernels, flush):
    """The peer's backward at one point: fills row as run_point does (pass bwd). extra_bytes: the peak
    of the first backward beyond what was allocated before it (Q, K, V, O, dO and what the forward
    saved for it), less dQ, dK and dV."""
    B, H, N, D = q.shape
    scale = 1.0 / math.sqrt(D)
    ctx = None
    if peer.startswith("sdpa_"):
        try:
            ctx = backend_ctx(torch, peer.split("_")[1])
        except Unsupported as e:
            row.update(status="unsupported", note=clean(e))
            return
    try:
        if ctx is not None:
            ctx.__enter__()
        saved = {}

        def forward():
            saved["o"], saved["leaves"] = backward_setup(torch, peer, q, k, v, causal, scale, kernels)
        if first_call(torch, row, forward) is None:
            return

        def fn():
            return torch.autograd.grad(saved["o"], saved["leaves"], d_o, retain_graph=True)
        got = first_call(torch, row, fn, compile_first=peer == "flash_attn4")
        if got is None:
            return
        grads, base = got
        extra = max(0, torch.cuda.max_memory_allocated() - base - sum(g.numel() * g.element_size() for g in grads))
        res = check_grads(torch, saved["o"].detach(), grads, q, k, v, d_o, causal, scale, 2000 + N + D + causal)
        del grads
        flops = 2.5 * 4.0 * B * H * N * N * D / (2 if causal else 1)
        if time_point(torch, args, fn, flush, row, flops, sleep_cycles=400000):
            row["extra_bytes"] = str(extra)
            set_check(row, res["ok"], res["max_abs_err"], res["note"])
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
        saved = None
        torch.cuda.empty_cache()


def write_csv(path, lines):
    """The lines into a new temporary file beside path (created exclusively: a planted file or symlink
    is never written through, two runs never share one), with the mode a new file gets, then renamed
    over path: a reader sees the old file or the whole new one."""
    problem = csv_target_problem(path)  # first: a path under a file gave makedirs' FileExistsError
    if problem:
        raise ValueError(problem)
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=d or ".")
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        problem = csv_target_problem(path)  # it may have become a FIFO or a directory since
        if problem:
            raise ValueError(problem)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def point_runs(args):
    """What runs at each point, in order: (peer, pass) for the forward's peers, then the backward's."""
    runs = [(p, "fwd") for p in args.peers] if args.forward else []
    return runs + ([(p, "bwd") for p in args.peers if p in BACKWARD_PEERS] if args.backward else [])


def one_row(torch, args, run, inputs, in_err, causal, row, kernels, flush):
    """One peer's run at one point into row, whatever it raises; the progress line's end on stderr."""
    peer, pass_ = run
    t0 = time.time()
    if in_err:
        row.update(status=in_err[0], note="inputs: " + in_err[1])
    else:
        q, k, v, d_o = inputs
        try:
            if pass_ == "fwd":
                run_point(torch, args, peer, q, k, v, causal, row, kernels, flush)
            else:
                run_point_backward(torch, args, peer, q, k, v, d_o, causal, row, kernels, flush)
        except Exception as e:  # keep the sweep going; the row says what happened
            row.update(status="error", note=clean("%s: %s" % (type(e).__name__, e)))
    if row["status"] in ("ok", "FAIL"):
        log("%9s ms %8.1f TFLOP/s %3s reps  %s%s  (%.1f s)" % (
            row["ms"], float(row["tflops"]), row["repeats"], row["check"],
            "  " + row["note"] if row["note"] else "", time.time() - t0))
    else:
        log("%s: %s  (%.1f s)" % (row["status"], row["note"], time.time() - t0))


def make_inputs(torch, gen, args, N, D):
    """Q, K, V (and dO when the backward runs) of one point, and None; or None and (status, note)."""
    try:
        gen.manual_seed(0xA77E + 64 * D + N)
        shape = (args.batch, args.heads, N, D)
        x = [torch.randn(shape, dtype=torch.float16, device="cuda", generator=gen) for _ in range(3)]
        x.append(torch.randn(shape, dtype=torch.float16, device="cuda", generator=gen) if args.backward else None)
        return x, None
    except torch.cuda.OutOfMemoryError as e:
        return None, ("OOM", clean(short_oom(e)))


def sweep(torch, args, kernels, flush, meta):
    """Every point, every run of point_runs: the rows."""
    causals = [0, 1] if args.causal == "both" else [int(args.causal)]
    runs = point_runs(args)
    total, i, rows = len(args.dims) * len(args.seqs) * len(causals) * len(runs), 0, []
    gen = torch.Generator(device="cuda")
    for D in args.dims:
        for N in args.seqs:
            inputs, in_err = make_inputs(torch, gen, args, N, D)
            for causal in causals:
                for run in runs:
                    i += 1
                    row = dict.fromkeys(COLS, "")
                    row.update(meta, stage=run[0], name=run[0], B=str(args.batch), H=str(args.heads), N=str(N),
                               D=str(D), causal=str(causal), dtype="fp16", **{"pass": run[1]})
                    log("[%*d/%d] D=%-3d %-10s N=%-6d %-12s %s " % (len(str(total)), i, total, D,
                        "causal" if causal else "non-causal", N, run[0], run[1]), end="")
                    one_row(torch, args, run, inputs, in_err, causal, row, kernels, flush)
                    rows.append(row)
            inputs = None
            torch.cuda.empty_cache()
    return rows


def cuda_torch(who):
    """torch, where it imports and sees a CUDA GPU; else None, having said why (who: the script)."""
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install
        log("%s: skipped: PyTorch is not importable here (%s: %s); the stages do not need it"
            % (who, type(e).__name__, e))
        return None
    if not torch.cuda.is_available():
        log("%s: skipped: PyTorch %s sees no CUDA GPU" % (who, torch.__version__))
        return None
    return torch


def main(argv):
    args = parse_args(argv)
    torch = cuda_torch("peers")
    if torch is None:
        return 0
    t_start = time.time()
    kernels = find_kernels(torch)
    known = PEERS + sorted(kernels)
    for p in args.peers or []:
        if p not in known:
            log("peers: unknown peer %r (here: %s)" % (p, ", ".join(known)))
            return 2
    args.peers = args.peers or known
    flush = None
    if args.cold:  # 4x the L2 size, as attn-bench --cold; 256 MiB where PyTorch does not say the size
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 64 << 20
        flush = torch.empty(4 * l2, dtype=torch.uint8, device="cuda")
    gpu = clean(torch.cuda.get_device_name())
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    log("peers: PyTorch %s, CUDA %s, cuDNN %s on %s; B=%d H=%d N=%s D=%s causal=%s; L2 %s; peers %s"
        % (torch.__version__, torch.version.cuda, torch.backends.cudnn.version(), gpu, args.batch,
           args.heads, ",".join(map(str, args.seqs)), ",".join(map(str, args.dims)), args.causal,
           "cold" if flush is not None else "warm", ",".join("%s %s" % r for r in point_runs(args))))
    rows = sweep(torch, args, kernels, flush,
                 dict(gpu=gpu, date=date, commit=clean(args.commit), **run_facts(torch, args, kernels)))
    for r in rows:
        r["l2"] = r["l2"] or "-"
    write_csv(args.csv, [",".join(COLS)] + [",".join(str(r[c]) for c in COLS) for r in rows])
    log("peers: wrote %d rows to %s in %.1f s" % (len(rows), args.csv, time.time() - t_start))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
