#!/usr/bin/env python3
"""tests/peers_tolerance.py DIR B H N D CAUSAL SCALE b h n d: bench/peers.py's tolerance of element
(b, h, n, d) of DIR/o.npy, for the inputs DIR/q.npy, k.npy, v.npy that `build/attn --save DIR
--save-inputs` wrote (fp16, [B, H, N, D]). Prints "tol T ratio R" (T as %.3g, R = |o - ref| / T as %.3f,
as build/attn prints its worst element), so that a test can hold the peers' rule to suite/check.c's on
the element the C check found worst (tests/test_bench.c). Standard library only: the peers' rule is
plain arithmetic (peers.o_tolerance), and the test must run where PyTorch and numpy are not."""
import ast
import math
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import peers  # noqa: E402


def load_f16(path):
    """A little-endian float16 .npy file, as a flat list of floats (the only kind attn writes here)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        raise SystemExit("%s: not a .npy file" % path)
    hlen, start = (struct.unpack("<H", data[8:10])[0], 10) if data[6] == 1 else (struct.unpack("<I", data[8:12])[0], 12)
    header = ast.literal_eval(data[start:start + hlen].decode("latin-1"))
    if header["descr"] != "<f2" or header["fortran_order"]:
        raise SystemExit("%s: %s, not C-ordered float16" % (path, header["descr"]))
    n = math.prod(header["shape"])
    return list(struct.unpack("<%de" % n, data[start + hlen:start + hlen + 2 * n]))


def main(argv):
    d_ = argv[0]
    B, H, N, D, causal = (int(x) for x in argv[1:6])
    scale = float(argv[6])
    b, h, n, d = (int(x) for x in argv[7:11])
    q, k, v, o = (load_f16(os.path.join(d_, name + ".npy")) for name in ("q", "k", "v", "o"))
    base = (b * H + h) * N * D
    row = q[base + n * D:base + n * D + D]
    keys = range(n + 1 if causal else N)
    s = [scale * sum(row[t] * k[base + j * D + t] for t in range(D)) for j in keys]
    m = max(s)
    w = [math.exp(x - m) for x in s]
    total = sum(w)
    ref = sum(w[j] * v[base + j * D + d] for j in keys) / total
    mag = sum(w[j] * abs(v[base + j * D + d]) for j in keys) / total
    sub = sum(min(w[j], peers.ETA_F16) * abs(v[base + j * D + d]) for j in keys) / total
    vmax = max(abs(v[base + j * D + t]) for j in keys for t in range(D))
    sabs = abs(scale) * max(sum(abs(row[t] * k[base + j * D + t]) for t in range(D)) for j in keys)
    reach = peers.range_reach(sabs, D, len(keys))
    near = [v[base + j * D + d] for j in keys if s[j] >= m - reach]
    got = o[base + n * D + d]
    tol = peers.o_tolerance(got, ref, mag, sub, vmax, sabs, D, len(keys), min(near), max(near))
    print("tol %.3g ratio %.3f" % (tol, abs(got - ref) / tol))


if __name__ == "__main__":
    main(sys.argv[1:])
