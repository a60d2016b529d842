#!/usr/bin/env python3
"""Writes the .npy regression inputs of tests/test_npy.c into this folder (standard library only).

    python3 tests/npy_cases/make_cases.py

valid_*.npy must load; bad_*.npy must fail with ATTN_EIO and a message that begins with the file's
path and contains the text listed for it in expected.tsv (written here too). Files named
bad_fuzz_*.npy are inputs the fuzzer found; they are kept by hand, not written by this script,
and are listed in expected.tsv under a section this script preserves.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ALIGN = 64
GROWTH = 21  # NumPy's GROWTH_AXIS_MAX_DIGITS


def numpy_dict(descr, shape, fortran=False):
    """The header text NumPy 1.24+ writes, before padding (keys sorted, trailing ', ')."""
    if len(shape) == 1:
        st = "(%d,)" % shape[0]
    else:
        st = "(" + ", ".join(str(d) for d in shape) + ")"
    text = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, st)
    if shape:
        text += " " * (GROWTH - len(str(shape[0])))
    return text


def image(text, version=(1, 0), data=b"", align=ALIGN, hlen=None, raw=None):
    """magic + version + header length + text padded with spaces and '\\n' (as NumPy does) + data.
    hlen overrides the stored header length; raw replaces the padded header bytes."""
    fmt = "<H" if version[0] == 1 else "<I"
    prefix = 8 + struct.calcsize(fmt)
    if raw is None:
        body = text.encode("latin1") if isinstance(text, str) else text
        pad = align - ((prefix + len(body) + 1) % align)
        raw = body + b" " * pad + b"\n"
    n = len(raw) if hlen is None else hlen
    return b"\x93NUMPY" + bytes(version) + struct.pack(fmt, n) + raw + data


def f16(vals):
    return struct.pack("<%de" % len(vals), *vals)


def f32(vals):
    return struct.pack("<%df" % len(vals), *vals)


def cases():
    d6 = f16([0.5, -1.0, 2.0, 3.25, -0.125, 65504.0])
    ok = image(numpy_dict("<f2", (2, 3)), data=d6)
    v, b = {}, {}

    # ---- valid --------------------------------------------------------------------------------
    v["valid_f16_2x3_numpy.npy"] = ok
    v["valid_f32_4_old_numpy_align16.npy"] = image(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", align=16,
        data=f32([1.0, -2.0, 3.5, 1e-3]))
    v["valid_f16_v2.npy"] = image(numpy_dict("<f2", (3,)), version=(2, 0), data=f16([1, 2, 3]))
    v["valid_f32_v3.npy"] = image(numpy_dict("<f4", (1, 2)), version=(3, 0), data=f32([7.0, -7.0]))
    v["valid_f32_scalar.npy"] = image(numpy_dict("<f4", ()), data=f32([42.0]))
    v["valid_f16_zero_dim.npy"] = image(numpy_dict("<f2", (0, 3)), data=b"")
    v["valid_f32_free_style.npy"] = image(
        '{ "shape" : ( 2 ,1 , ) ,"descr":"=f4","fortran_order" :False}', data=f32([1.5, 2.5]))
    v["valid_f16_pipe_order_no_newline.npy"] = image(
        "{'descr': '|f2', 'fortran_order': False, 'shape': (1,)}", data=f16([1.0]), raw=
        b"{'descr': '|f2', 'fortran_order': False, 'shape': (1,)}")

    # [B, H, N, D] inputs for build/attn --load (make leakcheck); k has another N than q
    v["valid_f16_qkv_1x2x3x8.npy"] = image(numpy_dict("<f2", (1, 2, 3, 8)),
                                           data=f16([(i % 17) / 8.0 - 1.0 for i in range(48)]))
    v["valid_f32_qkv_1x2x5x8.npy"] = image(numpy_dict("<f4", (1, 2, 5, 8)),
                                           data=f32([(i % 13) / 4.0 - 1.5 for i in range(80)]))

    # ---- malformed: (file, bytes, text the message must contain) -------------------------------
    def bad(name, data, expect):
        b[name] = (data, expect)

    hdr_len = struct.unpack("<H", ok[8:10])[0]
    bad("bad_empty.npy", b"", "empty file")
    bad("bad_magic.npy", b"PK\x03\x04" + ok[4:], "not a .npy file (bad magic)")
    bad("bad_magic_short.npy", b"\x93NUM", "truncated header")
    bad("bad_magic_text.npy", b"q,k,v\n1,2,3\n", "not a .npy file (bad magic)")
    bad("bad_version_4_0.npy", ok[:6] + b"\x04\x00" + ok[8:], "unsupported .npy format version 4.0")
    bad("bad_version_1_1.npy", ok[:6] + b"\x01\x01" + ok[8:], "unsupported .npy format version 1.1")
    bad("bad_truncated_prefix.npy", ok[:9], "truncated header")
    bad("bad_truncated_header.npy", ok[:10 + hdr_len // 2], "runs past the end of the file")
    bad("bad_header_len_past_end_by_5.npy", ok[:10 + hdr_len - 5], "runs past the end of the file")
    bad("bad_header_len_past_end.npy", image("", hlen=0xFFFF, raw=b"{}"), "runs past the end of the file")
    bad("bad_header_len_huge_v2.npy", image("", version=(2, 0), hlen=0xFFFFFFFF, raw=b"{}"),
        "header length 4294967295 is too large")
    bad("bad_truncated_data.npy", ok[:-6], "truncated: expected 12 bytes of data, found 6")
    bad("bad_no_data.npy", ok[:10 + hdr_len], "truncated: expected 12 bytes of data, found 0")
    bad("bad_lying_shape.npy", image(numpy_dict("<f2", (1000, 1000)), data=d6),
        "truncated: expected 2000000 bytes of data, found 12")
    bad("bad_huge_shape.npy", image(numpy_dict("<f2", (2**62, 2**62)), data=d6), "shape is too large")
    bad("bad_huge_shape_f4.npy", image(numpy_dict("<f4", (2**61, 2)), data=d6), "shape is too large")
    bad("bad_huge_shape_8d.npy", image(numpy_dict("<f2", (256,) * 8), data=d6), "shape is too large")
    bad("bad_dim_overflow.npy", image(numpy_dict("<f2", (2**64, 1)), data=d6), "overflows a 64-bit integer")
    bad("bad_negative_dim.npy", image("{'descr': '<f2', 'fortran_order': False, 'shape': (2, -3), }", data=d6),
        "negative dimension")
    bad("bad_too_many_dims.npy", image(numpy_dict("<f2", (1,) * 9), data=f16([1])), "more than 8 dimensions")
    bad("bad_dtype_f8.npy", image(numpy_dict("<f8", (2, 3)), data=b"\0" * 48), "unsupported dtype '<f8'")
    bad("bad_dtype_i4.npy", image(numpy_dict("<i4", (2, 3)), data=b"\0" * 24), "unsupported dtype '<i4'")
    bad("bad_dtype_b1.npy", image(numpy_dict("|b1", (2, 3)), data=b"\0" * 6), "unsupported dtype '|b1'")
    bad("bad_dtype_c8.npy", image(numpy_dict("<c8", (2, 3)), data=b"\0" * 48), "unsupported dtype '<c8'")
    bad("bad_dtype_big_endian_f2.npy", image(numpy_dict(">f2", (2, 3)), data=d6), "big-endian dtype '>f2'")
    bad("bad_dtype_structured.npy",
        image("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", data=b"\0" * 4),
        "structured arrays are not supported")
    bad("bad_fortran_order.npy", image(numpy_dict("<f2", (2, 3), fortran=True), data=d6),
        "fortran order is not supported; save with np.ascontiguousarray")
    bad("bad_fortran_order_not_bool.npy",
        image("{'descr': '<f2', 'fortran_order': 0, 'shape': (2, 3), }", data=d6), "True or False")
    bad("bad_trailing_garbage.npy", ok + b"extra", "trailing garbage: 5 bytes after the data")
    bad("bad_missing_key_shape.npy", image("{'descr': '<f2', 'fortran_order': False, }", data=d6),
        "missing key 'shape'")
    bad("bad_missing_key_descr.npy", image("{'fortran_order': False, 'shape': (2, 3), }", data=d6),
        "missing key 'descr'")
    bad("bad_duplicate_key.npy",
        image("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), 'descr': '<f2', }", data=d6),
        "duplicate key 'descr'")
    bad("bad_unknown_key.npy",
        image("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), 'align': 8, }", data=d6),
        "unexpected key 'align'")
    bad("bad_unterminated_dict.npy", image("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), ", data=d6),
        "unterminated dict")
    bad("bad_unterminated_string.npy", image("{'descr': '<f2", data=d6), "unterminated string")
    bad("bad_unterminated_shape.npy", image("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3", data=d6),
        "malformed header")
    bad("bad_non_ascii_header.npy",
        image("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), 'note': 'caf\xe9'}", data=d6),
        "non-ASCII byte 0xe9")
    bad("bad_nul_in_header.npy", image("{'descr': '<f2'\0, 'fortran_order': False, 'shape': (2, 3), }", data=d6),
        "control byte 0x00")
    bad("bad_not_a_dict.npy", image("[2, 3]", data=d6), "the header is not a dict")
    bad("bad_shape_list.npy", image("{'descr': '<f2', 'fortran_order': False, 'shape': [2, 3], }", data=d6),
        "shape must be a tuple")
    bad("bad_shape_not_tuple.npy", image("{'descr': '<f2', 'fortran_order': False, 'shape': (6), }", data=d6),
        "is not a tuple")
    bad("bad_shape_float.npy", image("{'descr': '<f2', 'fortran_order': False, 'shape': (2.0, 3), }", data=d6),
        "malformed header")
    bad("bad_text_after_dict.npy", image(numpy_dict("<f2", (2, 3)) + " x", data=d6), "after the dict")
    bad("bad_empty_header.npy", image("", raw=b""), "the header is not a dict")
    return v, b


def main():
    v, b = cases()
    for name in os.listdir(HERE):
        if name.endswith(".npy") and not name.startswith("bad_fuzz_"):
            os.remove(os.path.join(HERE, name))
    for name, data in sorted(v.items()):
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)
    # Keep the hand-kept fuzz regressions' lines.
    tsv = os.path.join(HERE, "expected.tsv")
    kept = []
    if os.path.exists(tsv):
        with open(tsv, encoding="ascii") as f:
            kept = [ln for ln in f if ln.startswith("bad_fuzz_")]
    with open(tsv, "w", encoding="ascii") as f:
        f.write("# file<TAB>text the error message must contain (written by make_cases.py;\n")
        f.write("# bad_fuzz_* lines are kept by hand: inputs the fuzzer found)\n")
        for name, (data, expect) in sorted(b.items()):
            with open(os.path.join(HERE, name), "wb") as g:
                g.write(data)
            f.write("%s\t%s\n" % (name, expect))
        f.writelines(kept)
    print("wrote %d valid and %d malformed files to %s" % (len(v), len(b), HERE))


if __name__ == "__main__":
    main()
