#!/usr/bin/env python3
"""tools/ncu_bytes.py: the bytes model of the stages (attn_bytes, build/attn's "bytes" line) against
what Nsight Compute counts on the GPU, for the table in README.md ("Bytes moved").

    python3 tools/ncu_bytes.py                         # stages 02, 03, 06, 09 at B=4 H=32 N=4096 D=64
    python3 tools/ncu_bytes.py --stages 02,06 --shape "--batch 4 --heads 32 --seq 2048 --dim 128"

For each stage it runs build/attn twice: once plainly, for the computed bytes (HBM read and written,
and the tiles' loads and stores), and once under ncu with these counters, summed over the stage's
kernels:
    dram__bytes_read.sum, dram__bytes_write.sum     HBM: what the hbm_* model predicts
    lts__t_sectors_op_read.sum, _op_write.sum,      requests the SMs (and TMA) make of L2, 32 bytes a
    _op_atom.sum, _op_red.sum                       sector: what the tile_* model predicts (atomics,
                                                    12 and 13's dQ adds, count as read and written)
build/attn runs a stage twice here (the first run whose output it keeps, then one timed run:
--warmup 0 --repeat 1), so the sums are halved. The harness's own cudaMemsets (the output poisoned
with NaN before each run) are left out by name. Prints one Markdown row per stage, each measured
count beside the computed one and their ratio; the issue's aim is a ratio within 0.9-1.1.
Needs ncu (Nsight Compute) on PATH and a GPU; run it as a user allowed to read the counters.
"""
import argparse
import csv
import io
import re
import subprocess
import sys

METRICS = ["dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sectors_op_read.sum",
           "lts__t_sectors_op_write.sum", "lts__t_sectors_op_atom.sum", "lts__t_sectors_op_red.sum"]
UNITS = {"bytes": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12, "PB": 1e15}
RUNS = 2


def computed(attn, stage, shape):
    """build/attn's bytes line: (hbm read, hbm written, tiles loaded, tiles stored) in bytes."""
    out = subprocess.run([attn, "--stage", stage, *shape.split(), "--warmup", "0", "--repeat", "1"],
                         capture_output=True, text=True, check=True).stdout
    num = r"([0-9.e+]+) (bytes|kB|MB|GB|TB|PB)"
    hbm = re.search(r"HBM " + num + r" read, " + num + r" written", out)
    tiles = re.search(r"tiles: " + num + r" loaded and " + num + r" stored", out)
    if not hbm:
        sys.exit(f"ncu_bytes: no bytes line from stage {stage}:\n{out}")
    vals = [float(hbm.group(1)) * UNITS[hbm.group(2)], float(hbm.group(3)) * UNITS[hbm.group(4)]]
    vals += [float(tiles.group(1)) * UNITS[tiles.group(2)], float(tiles.group(3)) * UNITS[tiles.group(4)]] \
        if tiles else vals[:]
    return vals


def measured(ncu, attn, stage, shape):
    """The counters summed over the stage's kernels, per run: dram read, dram written, L2 read, L2 written."""
    cmd = [ncu, "--metrics", ",".join(METRICS), "--csv", "--page", "raw", "--print-units", "base",
           attn, "--stage", stage, *shape.split(), "--warmup", "0", "--repeat", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    start = out.find('"ID"')
    if start < 0:
        sys.exit(f"ncu_bytes: no ncu table for stage {stage}:\n{out[-2000:]}")
    rows = list(csv.DictReader(io.StringIO(out[start:])))
    total = {m: 0.0 for m in METRICS}
    kernels = set()
    for r in rows:
        name = r.get("Kernel Name", "")
        if not name or "memset" in name.lower() or not r.get(METRICS[0], "").replace(",", "").replace(".", "").isdigit():
            continue  # the units row, and the harness's own fills
        kernels.add(name.split("(")[0])
        for m in METRICS:
            total[m] += float(r[m].replace(",", ""))
    sectors = 32.0
    atom = (total["lts__t_sectors_op_atom.sum"] + total["lts__t_sectors_op_red.sum"]) * sectors
    return [total["dram__bytes_read.sum"] / RUNS, total["dram__bytes_write.sum"] / RUNS,
            (total["lts__t_sectors_op_read.sum"] * sectors + atom) / RUNS,
            (total["lts__t_sectors_op_write.sum"] * sectors + atom) / RUNS], sorted(kernels)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attn", default="build/attn")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--stages", default="02,03,06,09")
    ap.add_argument("--shape", default="--batch 4 --heads 32 --seq 4096 --dim 64")
    args = ap.parse_args()
    print(f"Shape: {args.shape}. Bytes in GB (1e9); each ratio is measured / computed.\n")
    print("| stage | HBM read: model | ncu | ratio | HBM written: model | ncu | ratio "
          "| tiles loaded: model | L2 reads | ratio | tiles stored: model | L2 writes | ratio | kernels |")
    print("|---|" + "---:|" * 12 + "---|")
    for stage in args.stages.split(","):
        c = computed(args.attn, stage, args.shape)
        m, kernels = measured(args.ncu, args.attn, stage, args.shape)
        cells = []
        for want, got in zip(c, m):
            cells += [f"{want / 1e9:.4g}", f"{got / 1e9:.4g}", f"{got / want:.3f}" if want > 0 else "-"]
        print(f"| {stage} | " + " | ".join(cells) + f" | {', '.join(kernels)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
