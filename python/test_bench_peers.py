"""Tests of bench/peers.py's check of the peers' backward (check_grads): `make check-python`.

A peer's dQ, dK and dV are held to suite/check_backward.c's tolerance against a float64 reference on
the heads pick_heads chooses. Here the "peer" is an emulation in fp32 from fp16 inputs, the way
FlashAttention-2 computes (P and dS rounded to 16 bits before their products, or kept in fp32), on
fresh random inputs at sizes that are no multiple of any tile, causal and not: right gradients must
pass, and each classic mistake must fail (the D term dropped, the LSE read as base 2, one key tile's
share of dQ lost, the causal mask on the wrong side, a NaN). Runs on the GPU where there is one and on
the CPU otherwise (the check is plain float64 PyTorch); skips without PyTorch.
"""
import math
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: bench/peers.py's peers need it")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import peers  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def inputs(B, H, N, D, seed):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    return [torch.randn(B, H, N, D, device=DEVICE, dtype=torch.float16, generator=gen) for _ in range(4)]


def emulated_peer(q, k, v, d_o, causal, scale, round_p=True, mistake=None):
    """O and (dQ, dK, dV) in fp32 from the fp16 inputs, as a FlashAttention-2 kernel computes them,
    rounded to fp16; mistake names one error to make."""
    q, k, v, g = (x.float() for x in (q, k, v, d_o))
    N = q.shape[-2]
    s = (q @ k.transpose(-2, -1)) * scale
    hidden = torch.ones(N, N, dtype=torch.bool, device=q.device).triu_(1)
    if causal:
        s = s.masked_fill(hidden.T if mistake == "mask_side" else hidden, -math.inf)
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    if mistake == "lse_base2":  # the recompute reads a natural-log LSE as if it were base 2
        lse = lse * math.log(2.0)
    p = torch.exp(s - lse)
    p16 = p.half().float() if round_p else p
    o = (p16 @ v).half()
    delta = (g * o.float()).sum(-1, keepdim=True)
    dp = g @ v.transpose(-2, -1)
    ds = p * (dp if mistake == "no_delta" else dp - delta)
    ds16 = ds.half().float() if round_p else ds
    if mistake == "lost_tile":  # one key tile's share of dQ never added
        ds16_q = ds16.clone()
        ds16_q[..., 16:32] = 0
    else:
        ds16_q = ds16
    dq = (ds16_q @ k) * scale
    dk = (ds16.transpose(-2, -1) @ q) * scale
    dv = p16.transpose(-2, -1) @ g
    return o, tuple(x.half() for x in (dq, dk, dv))


SHAPES = [(1, 2, 17, 64), (2, 1, 129, 128), (1, 1, 300, 64), (2, 3, 65, 32)]


@pytest.mark.parametrize("round_p", [True, False])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_right_gradients_pass(shape, causal, round_p):
    B, H, N, D = shape
    scale = 1 / math.sqrt(D)
    q, k, v, d_o = inputs(B, H, N, D, 11 * N + D + causal)
    o, grads = emulated_peer(q, k, v, d_o, causal, scale, round_p)
    res = peers.check_grads(torch, o, grads, q, k, v, d_o, causal, scale, seed=N)
    assert res["ok"], res["note"]
    assert res["heads"] == min(3, B * H)
    assert 0 < res["max_abs_err"] < 0.05


@pytest.mark.parametrize("mistake", ["no_delta", "lse_base2", "lost_tile", "mask_side"])
@pytest.mark.parametrize("causal", [False, True])
def test_each_mistake_fails(mistake, causal):
    if mistake == "mask_side" and not causal:
        pytest.skip("the mask's side matters only when causal")
    B, H, N, D = 1, 2, 129, 64
    scale = 1 / math.sqrt(D)
    q, k, v, d_o = inputs(B, H, N, D, 5 * N + causal)
    o, grads = emulated_peer(q, k, v, d_o, causal, scale, True, mistake)
    res = peers.check_grads(torch, o, grads, q, k, v, d_o, causal, scale, seed=3)
    assert not res["ok"], "%s passed: %s" % (mistake, res["note"])
    assert res["worst"] > 1.0


def test_nan_or_poison_fails():
    B, H, N, D = 1, 1, 33, 64
    scale = 1 / math.sqrt(D)
    q, k, v, d_o = inputs(B, H, N, D, 99)
    o, grads = emulated_peer(q, k, v, d_o, False, scale)
    for t in range(3):
        bad = [g.clone() for g in grads]
        bad[t][0, 0, N - 1, D - 1] = float("nan")
        res = peers.check_grads(torch, o, bad, q, k, v, d_o, False, scale, seed=1)
        assert not res["ok"] and "1 non-finite" in res["note"], res["note"]
        poisoned = [g.clone() for g in grads]
        poisoned[t].view(torch.int16).fill_(-1)  # all bits set: what the stages' harness poisons with
        assert not peers.check_grads(torch, o, poisoned, q, k, v, d_o, False, scale, seed=1)["ok"]


def test_chunks_give_the_same_reference():
    N, D = 77, 32
    q, k, v, g = (x[0, 0].double() for x in inputs(1, 1, N, D, 7))
    for causal in (False, True):
        one = peers.head_reference(torch, q, k, v, g, v, causal, 0.3, 2.0 ** -11, 2.0 ** -25)
        rows = peers.head_reference(torch, q, k, v, g, v, causal, 0.3, 2.0 ** -11, 2.0 ** -25, chunk_elems=5 * N)
        for a, b in zip(one[0] + one[1], rows[0] + rows[1]):
            assert torch.allclose(a, b, rtol=1e-12, atol=1e-15)


def test_pick_heads():
    assert peers.pick_heads(1, 3, 0) == [(0, 0), (0, 1), (0, 2)]
    for seed in range(20):
        heads = peers.pick_heads(4, 32, seed)
        assert heads[0] == (0, 0) and heads[-1] == (3, 31) and len(set(heads)) == 3
