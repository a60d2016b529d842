#!/usr/bin/env python3
"""bench/ceilings.py: the ceilings of the roofline (bench/roofline.sh), measured on this GPU.

Three numbers, each the median of timed runs after --warmup-ms of untimed ones (the H200 drops its
clock within 100 ms of full load, bench/README.md "Clock", so a ceiling read from idle would sit above
what the stages run at):
  copy_bandwidth  bytes/s: a device-to-device copy of --copy-mib MiB, counted as read + written
                  (the HBM bandwidth a streaming kernel can reach)
  matmul_fp16     FLOP/s: an fp16 matrix product of --matmul-n squared (2 n^3 FLOPs), tensor cores with
                  fp32 accumulation, the ceiling of stages 06-13's mma and wgmma
  matmul_fp32     FLOP/s: the same in fp32 with TF32 off, so on the CUDA cores: the ceiling of stages
                  02-05 and 11-12, which multiply in fp32 FFMAs

Writes a CSV (gpu,date,what,value,unit,how). Needs PyTorch with CUDA; without it, says so and exits 0
having written nothing, as bench/peers.py does.

  python3 bench/ceilings.py --csv build/bench/bench_ceilings.csv
"""
import argparse
import csv
import datetime
import os
import statistics
import sys
import time


def timed(torch, fn, warmup_ms, runs):
    """Median seconds of fn() over `runs` timed calls, after warmup_ms of untimed ones."""
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    while (time.perf_counter() - start) * 1e3 < warmup_ms:
        fn()
        torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def measure(torch, args):
    """The three ceilings as (what, value, unit, how) rows."""
    n_bytes = args.copy_mib << 20
    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = timed(torch, lambda: dst.copy_(src), args.warmup_ms, args.runs)
    rows = [("copy_bandwidth", 2.0 * n_bytes / t, "B/s",
             f"device-to-device copy of {args.copy_mib} MiB; read + written; median of {args.runs}")]
    del src, dst
    n = args.matmul_n
    for dtype, what in ((torch.float16, "matmul_fp16"), (torch.float32, "matmul_fp32")):
        torch.backends.cuda.matmul.allow_tf32 = False
        a = torch.randn(n, n, dtype=dtype, device="cuda")
        b = torch.randn(n, n, dtype=dtype, device="cuda")
        t = timed(torch, lambda: torch.matmul(a, b), args.warmup_ms, args.runs)
        rows.append((what, 2.0 * n ** 3 / t, "FLOP/s",
                     f"torch.matmul {n} x {n} x {n} {str(dtype).replace('torch.', '')}; TF32 off; "
                     f"median of {args.runs}"))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--csv", required=True, help="the CSV to write")
    ap.add_argument("--copy-mib", type=int, default=2048, help="MiB copied (default 2048: far past L2)")
    ap.add_argument("--matmul-n", type=int, default=8192, help="matrix size (default 8192)")
    ap.add_argument("--runs", type=int, default=20, help="timed runs of each (default 20)")
    ap.add_argument("--warmup-ms", type=float, default=100.0, help="untimed work first (default 100)")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("ceilings: skipped: PyTorch not found", file=sys.stderr)
        return 0
    if not torch.cuda.is_available():
        print("ceilings: skipped: PyTorch sees no GPU", file=sys.stderr)
        return 0
    rows = measure(torch, args)
    gpu = torch.cuda.get_device_name().replace(",", ";")
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    tmp = args.csv + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["gpu", "date", "what", "value", "unit", "how"])
        for what, value, unit, how in rows:
            w.writerow([gpu, date, what, f"{value:.6g}", unit, how.replace(",", ";")])
    os.replace(tmp, args.csv)
    for what, value, unit, _ in rows:
        print(f"ceilings: {what} {value / 1e12:.3f} T{unit}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
