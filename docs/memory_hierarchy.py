#!/usr/bin/env python3
"""docs/memory_hierarchy.py: draws docs/memory_hierarchy.svg, where each stage keeps S, P and O.

    python3 docs/memory_hierarchy.py > docs/memory_hierarchy.svg

A row per stage (or family of stages), a column per level of memory, from HBM to the registers; a
red chip is an N x N matrix in device memory, a green one a tile or a row. What the rows say comes
from the stages' READMEs; edit them here, not in the SVG. No dependency beyond Python 3.
"""
cols = ["HBM (device memory)", "L2 cache", "shared memory (per block)", "registers (per thread)"]
sub = ["141 GB on an H200, 80 GB on an H100", "50 MB on an H100 or H200", "up to 227 KB per block", "up to 255 x 32 bits per thread"]
rows = [
 ("01", "CPU, double", [["O", "LSE"], [], [], []], "CPU: S and P one row at a time, in a thread's scratch (the caches); O a row at a time"),
 ("02", "eager, 3 kernels", [["S  fp32 N x N", "P  fp16 N x N", "O"], ["re-reads of q, k rows"], [], ["one score or one row"]], None),
 ("03-05", "tiles, CUDA cores", [["O"], ["K, V re-read per row tile"], ["Q, K, V tiles", "P tile"], ["S 4x4", "O", "m, l"]], None),
 ("06", "FA2, mma.sync", [["O", "LSE"], ["K, V re-read per row tile"], ["K, V tiles (cp.async)", "Q (D > 64)"], ["S", "P = S regs", "O", "Q (D <= 64)"]], None),
 ("07-09", "Hopper, wgmma", [["O", "LSE"], ["K, V per row tile"], ["Q, K, V tiles (TMA)", "O staging (08, 09)"], ["S", "P", "O"]], None),
 ("11", "backward, naive", [["P  fp32 N x N", "dS  fp32 N x N", "dQ, dK, dV"], [], [], ["one element"]], None),
 ("12", "backward, tiles", [["dQ acc fp32 (atomics)", "dQ, dK, dV"], ["Q, dO per key tile"], ["K, V, Q, dO tiles", "P^T, dS^T, dS"], ["S/P, dP/dS 4x4", "dK, dV"]], None),
 ("13", "backward, mma.sync", [["dQ acc fp32", "dQ, dK, dV"], ["Q, dO per key tile"], ["K, V, Q, dO tiles", "dS (16-bit)"], ["S^T/P^T, dP^T/dS^T", "dK, dV"]], None),
]
X0, W0 = 10, 150
CW = [230, 185, 200, 195]
xs = [X0 + W0]
for w in CW[:-1]: xs.append(xs[-1] + w)
H_HEAD = 78
RH = 52
width = X0 + W0 + sum(CW) + 10
height = H_HEAD + RH * len(rows) + 80
from xml.sax.saxutils import escape

def chip(x, y, text):
    big = "N x N" in text
    fill = "#f4b6b0" if big else ("#c9e7c3" if True else "")
    stroke = "#b3261e" if big else "#2e7d32"
    w = int(6.2 * len(text)) + 12
    return (f'<rect x="{x}" y="{y}" width="{w}" height="18" rx="4" fill="{fill}" stroke="{stroke}"/>'
            f'<text x="{x + 6}" y="{y + 13}" class="chip">{escape(text)}</text>', w)
out = []
out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif">')
out.append('<style>.h{font-size:14px;font-weight:bold}.s{font-size:10.5px;fill:#555}.id{font-size:15px;font-weight:bold}.chip{font-size:11px}.note{font-size:11px;fill:#333}.t{font-size:17px;font-weight:bold}</style>')
out.append(f'<rect width="{width}" height="{height}" fill="#ffffff"/>')
out.append(f'<text x="{X0}" y="24" class="t">Where each stage keeps S, P and O: the memory hierarchy, from far and large to near and small</text>')
shades = ["#fde9e7", "#fff4de", "#e8f1fb", "#e7f6ea"]
for i, c in enumerate(cols):
    out.append(f'<rect x="{xs[i]}" y="34" width="{CW[i]-6}" height="{H_HEAD-38+RH*len(rows)}" fill="{shades[i]}" rx="6"/>')
    out.append(f'<text x="{xs[i]+8}" y="54" class="h">{c}</text>')
    out.append(f'<text x="{xs[i]+8}" y="69" class="s">{sub[i]}</text>')
y = H_HEAD + 4
for rid, what, cells, note in rows:
    out.append(f'<line x1="{X0}" y1="{y-4}" x2="{width-10}" y2="{y-4}" stroke="#cccccc"/>')
    out.append(f'<text x="{X0+4}" y="{y+18}" class="id">{rid}</text>')
    out.append(f'<text x="{X0+4}" y="{y+34}" class="s">{what}</text>')
    for i, items in enumerate(cells):
        cx, cy = xs[i] + 6, y + 2
        for it in items:
            svg, w = chip(cx, cy, it)
            if cx + w > xs[i] + CW[i] - 8:
                cx, cy = xs[i] + 6, cy + 22
                svg, w = chip(cx, cy, it)
            out.append(svg)
            cx += w + 5
    if note:
        out.append(f'<text x="{xs[1]+6}" y="{y+34}" class="note">{escape(note)}</text>')
    y += RH
ly = y + 8
svg, w = chip(X0, ly, "S  fp32 N x N")
out.append(svg)
out.append(f'<text x="{X0+w+8}" y="{ly+13}" class="note">an N x N matrix in device memory: 6 bytes a score in 02 (48 GiB at B=4, H=32, N=8192), 8 in 11</text>')
svg, w = chip(X0, ly + 24, "K, V tiles")
out.append(svg)
out.append(f'<text x="{X0+w+8}" y="{ly+37}" class="note">a tile: Br or Bc rows at a time, on chip while in use. The bytes each stage moves: the bytes line of build/attn</text>')
out.append('</svg>')
print("\n".join(out))
