"""Tests of python/triton_fa2.py (the seed's Triton kernel, written here): `make check-python`.

Against the same float64 reference and tolerance rule as test_flashattn_stages.py (suite/check.c's),
outputs compared row by row, ragged N, causal and not, fp16 and bf16, through tensor descriptors
(where the GPU has TMA) and through pointer loads. A fixed tile shape keeps compilations few; one
test goes through the autotuner. Skips, saying why, without torch, triton or a CUDA GPU.
"""
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the Triton kernel needs it")
pytest.importorskip("triton", reason="Triton is not installed")
if not torch.cuda.is_available():
    pytest.skip("PyTorch %s sees no CUDA GPU" % torch.__version__, allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import triton_fa2  # noqa: E402
from test_flashattn_stages import reference  # noqa: E402

PATHS = [False] + ([True] if triton_fa2.tma_available() else [])


def check(B, H, N, D, causal, dtype, **kw):
    gen = torch.Generator(device="cuda").manual_seed(7 * N + D + causal)
    q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    o, lse = triton_fa2.attention(q, k, v, causal=causal, **kw)
    torch.cuda.synchronize()
    ref_o, ref_lse, tol_o, tol_lse = reference(torch, q, k, v, causal, kw.get("scale") or 1 / math.sqrt(D))
    assert bool(torch.isfinite(o).all()) and bool(torch.isfinite(lse).all()), "NaN or inf in O or LSE"
    worst_o = float(((o.double() - ref_o).abs() / tol_o).max())
    worst_lse = float(((lse.double() - ref_lse).abs() / tol_lse).max())
    assert worst_o <= 1.0, "O: worst |err| / tol = %.3g" % worst_o
    assert worst_lse <= 1.0, "LSE: worst |err| / tol = %.3g" % worst_lse


@pytest.mark.parametrize("use_tma", PATHS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [1, 17, 129, 1000])
@pytest.mark.parametrize("D", [64, 128])
def test_matches_float64_reference(use_tma, dtype, causal, N, D):
    check(2, 3, N, D, causal, getattr(torch, dtype), use_tma=use_tma, config=(64, 32, 4, 2))


@pytest.mark.parametrize("causal", [False, True])
def test_autotuned(causal):
    check(1, 4, 1031, 64, causal, torch.float16, scale=0.2)


def test_refusals():
    q = torch.randn(1, 2, 64, 80, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="D in"):
        triton_fa2.attention(q, q, q)
    q = torch.randn(1, 2, 64, 64, device="cuda", dtype=torch.float16)
    with pytest.raises(ValueError, match="v must be a contiguous CUDA tensor"):
        triton_fa2.attention(q, q, q.transpose(2, 3))
