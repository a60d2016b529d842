#!/usr/bin/env python3
"""bench/decode_peers.py: the peers beside stage 15 at attn-bench --decode's shapes, in its CSV format.

Peers (the `stage` column), each F.scaled_dot_product_attention(q, k, v, enable_gqa=True) under
sdpa_kernel() allowing one backend: sdpa_flash (FLASH_ATTENTION), sdpa_efficient (EFFICIENT_ATTENTION),
sdpa_cudnn (CUDNN_ATTENTION), sdpa_math (MATH); and flash_attn4 (flash-attn-4's flash_attn_func, its
sm90 path on Hopper) where that package imports. q is [B, H, N_q, D], k and v [B, H_kv, N_k, D], fp16,
query head h reading K/V head h / (H / H_kv) as in the suite. A backend that refuses the shape or
enable_gqa (PyTorch before 2.5 has no enable_gqa) gives a row with status unsupported and its reason.
Causal points are unsupported here: SDPA's is_causal aligns the mask to the top left, where the suite's
(and decoding's) new queries are the last N_q positions of the sequence.

Timing and checking are peers.py's: the first call (warm-up), about --warmup-ms of untimed runs, CUDA
events over --repeat-ms of timed runs, the median; --check-rows rows of O against a float64 reference
with suite/check.c's tolerance (peers.check_rows). kv_gbps is the K and V bytes of the step (2 B H_kv
N_k D x 2) over the median time: the column to hold against the device's copy bandwidth.

Optional: without PyTorch or a CUDA GPU it says why and exits 0, writing nothing. make bench-decode
runs it before attn-bench --decode and merges the two CSVs.
"""
import argparse
import datetime
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers  # noqa: E402  (the timing, the check, the CSV writer: one copy of each)

# attn-bench --decode's columns (bench_main.c, csv_decode_rows), in its order
COLS = ("gpu,date,commit,stage,name,B,H,H_kv,N_q,N_k,D,causal,dtype,status,ms,kv_bytes,kv_gbps,tflops,"
        "check,max_abs_err,repeats,l2,note,warmup_ms,driver,sm_clock_mhz").split(",")
BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_efficient": "EFFICIENT_ATTENTION",
            "sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_math": "MATH"}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", default="build/bench/decode_peers.csv", help="CSV to write")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--batches", type=peers.int_list(peers.MAX_B), default=[1, 8])
    ap.add_argument("--heads", type=peers.int_in(1, peers.MAX_H), default=32)
    ap.add_argument("--kv-heads", type=peers.int_in(1, peers.MAX_H), default=8)
    ap.add_argument("--queries", type=peers.int_in(1, peers.MAX_N), default=1)
    ap.add_argument("--seqs", type=peers.int_list(peers.MAX_N), default=[8192, 16384, 32768, 65536, 131072],
                    help="the cache lengths N_k")
    ap.add_argument("--dims", type=peers.int_list(peers.MAX_D), default=[128])
    ap.add_argument("--causal", choices=("both", "0", "1"), default="0")
    ap.add_argument("--repeat-ms", type=peers.finite_ms, default=300.0)
    ap.add_argument("--warmup-ms", type=peers.finite_ms, default=100.0)
    ap.add_argument("--min-repeat", type=peers.int_in(1, peers.MAX_REPEAT), default=3)
    ap.add_argument("--max-repeat", type=peers.int_in(1, peers.MAX_REPEAT), default=50)
    ap.add_argument("--check-rows", type=peers.int_in(0, peers.MAX_CHECK_ROWS), default=16)
    a = ap.parse_args(argv)
    if a.heads % a.kv_heads:
        ap.error("--kv-heads must divide --heads = %d (got %d)" % (a.heads, a.kv_heads))
    problem = peers.csv_target_problem(a.csv)
    if problem:
        ap.error(problem)
    a.cold = False
    return a


def make_fn(torch, peer, q, k, v, scale):
    """The peer's call, or raises peers.Unsupported."""
    if peer == "flash_attn4":
        from flash_attn.cute import interface as fa4  # ImportError: the caller's row says why
        return lambda: peers.flash_attn4(fa4, q, k, v, False, scale)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if not hasattr(SDPBackend, BACKENDS[peer]):
        raise peers.Unsupported("PyTorch %s has no SDPBackend.%s" % (torch.__version__, BACKENDS[peer]))
    backend = getattr(SDPBackend, BACKENDS[peer])

    def sdpa():
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=True)
    return sdpa


def run_point(torch, args, peer, q, k, v, causal, row):
    """Fills row: status, ms, kv_gbps, tflops, check, max_abs_err, repeats, l2, note."""
    B, H, N_q, D = q.shape
    H_kv, N_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D)
    if causal:
        row.update(status="unsupported", note="SDPA's is_causal aligns the mask top-left; decoding's is bottom-right")
        return
    try:
        fn = make_fn(torch, peer, q, k, v, scale)
    except (peers.Unsupported, ImportError) as e:
        row.update(status="unsupported", note=peers.clean("%s: %s" % (type(e).__name__, e)))
        return
    try:
        got = peers.first_call(torch, row, fn, compile_first=peer == "flash_attn4")
    except TypeError as e:  # PyTorch before 2.5: no enable_gqa
        row.update(status="unsupported", note=peers.clean("%s: %s" % (type(e).__name__, e)))
        return
    if got is None:
        return
    out = got[0][0] if isinstance(got[0], tuple) else got[0]
    ok, max_err, worst, nchecked = peers.check_rows(torch, out, q, k, v, False, scale, args.check_rows,
                                                    2000 + N_k + D)
    del out, got
    if peers.time_point(torch, args, fn, None, row, 4.0 * B * H * N_q * N_k * D):
        kv = 4.0 * B * H_kv * N_k * D
        row["kv_gbps"] = "%.6g" % (kv / (float(row["ms"]) * 1e6))
        peers.set_check(row, ok, max_err, "%d rows: max abs err %.3g; worst err/tol %.3g" % (nchecked, max_err, worst))


def decode_inputs(torch, gen, args, B, N_k, D):
    """Q [B, H, N_q, D], K and V [B, H_kv, N_k, D] of one point, and None; or None and the OOM's note."""
    gen.manual_seed(0xDEC0 + 64 * D + N_k + B)
    try:
        q = torch.randn((B, args.heads, args.queries, D), dtype=torch.float16, device="cuda", generator=gen)
        kv = [torch.randn((B, args.kv_heads, N_k, D), dtype=torch.float16, device="cuda", generator=gen)
              for _ in range(2)]
        return (q, kv[0], kv[1]), None
    except torch.cuda.OutOfMemoryError as e:
        return None, peers.clean(peers.short_oom(e))


def one_row(torch, args, peer, inputs, err, causal, row):
    """One peer at one point into row, whatever it raises; its progress line on stderr."""
    peers.log("D=%-3s B=%-3s N_k=%-7s %-15s " % (row["D"], row["B"], row["N_k"], peer), end="")
    t0 = time.time()
    if err:
        row.update(status="OOM", note="inputs: " + err)
    else:
        try:
            run_point(torch, args, peer, *inputs, causal, row)
        except Exception as e:  # keep the sweep going; the row says what happened
            row.update(status="error", note=peers.clean("%s: %s" % (type(e).__name__, e)))
    peers.log("%s %s ms %s GB/s %s (%.1f s)" % (row["status"], row["ms"] or "-", row["kv_gbps"] or "-",
                                                row["note"], time.time() - t0))


def sweep(torch, args, meta, names):
    rows, gen = [], torch.Generator(device="cuda")
    causals = [0, 1] if args.causal == "both" else [int(args.causal)]
    points = [(D, B, N_k) for D in args.dims for B in args.batches for N_k in args.seqs]
    for D, B, N_k in points:
        inputs, err = decode_inputs(torch, gen, args, B, N_k, D)
        for causal in causals:
            for peer in names:
                row = dict.fromkeys(COLS, "")
                row.update(meta, stage=peer, name=peer, B=str(B), H=str(args.heads), H_kv=str(args.kv_heads),
                           N_q=str(args.queries), N_k=str(N_k), D=str(D), causal=str(causal), dtype="fp16",
                           kv_bytes="%.0f" % (4.0 * B * args.kv_heads * N_k * D), l2="-")
                one_row(torch, args, peer, inputs, err, causal, row)
                rows.append(row)
        inputs = None
        torch.cuda.empty_cache()
    return rows


def main(argv):
    args = parse_args(argv)
    torch = peers.cuda_torch("decode_peers")
    if torch is None:
        return 0
    t0 = time.time()
    gpu = peers.clean(torch.cuda.get_device_name())
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = dict(gpu=gpu, date=date, commit=peers.clean(args.commit), warmup_ms="%g" % args.warmup_ms,
                driver="", sm_clock_mhz="")
    rows = sweep(torch, args, meta, list(BACKENDS) + ["flash_attn4"])
    peers.write_csv(args.csv, [",".join(COLS)] + [",".join(str(r[c]) for c in COLS) for r in rows])
    peers.log("decode_peers: wrote %d rows to %s in %.1f s" % (len(rows), args.csv, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
