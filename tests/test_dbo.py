"""LibraPIM's Dynamic Batch Offloading (models/dbo.py): every branch of Algorithm 1 by hand.

The toy model: d_model 2, d_ff 4, K_QKV 6, K_Proj 2, K_FFN 4, K_MHA 4, so one request costs
QKV 24, projection 8, FFN 32 FLOPs and attention 8 L FLOPs. At an xPU of 1 FLOP/s a group of
B = 8 requests takes 8 x 64 = 512 s per layer on the xPU.
"""

from __future__ import annotations

import math

import pytest
from pimphony.models.dbo import (
    DboCase,
    DboError,
    DboModel,
    DboThroughput,
    dynamic_batch_offload,
    solve_ffn_offload,
    solve_mha_offload,
)
from pimphony.models.errors import PimphonyError

TOY = DboModel(d_model=2, d_ff=4, k_qkv=6, k_proj=2, k_ffn=4, k_mha=4, context_window=100)
HW = DboThroughput(xpu_flops=1.0, xpu_gemv_flops=0.5, pim_flops=1.0, pim_channels=4)


def test_lines_5_to_8_times():
    d = dynamic_batch_offload(TOY, HW, 8, 8)
    assert d.before == {
        "t_qkv_xpu": 192.0,
        "t_proj_xpu": 64.0,
        "t_ffn_xpu": 256.0,
        "t_mha_pim": 512.0,
    }


def test_small_batch_offloads_the_whole_group_ffn():
    # B = 3 < 4 channels: m = B. xPU keeps QKV + proj (32 x 3 = 96); PIM does attention
    # 8 L x 3 = 240 at L = 10 plus the group's FFN 32 x 3 = 96.
    d = dynamic_batch_offload(TOY, HW, 3, 10)
    assert d.case is DboCase.SMALL_BATCH
    assert (d.m, d.n, d.m_capped) == (3, 0, False)
    assert (d.xpu_seconds, d.pim_seconds) == (96.0, 336.0)
    assert math.isnan(d.m_exact) and math.isnan(d.n_exact)


def test_longer_ffn_exact_integer_solution():
    # L = 5: PIM 8 x 5 x 8 = 320 < xPU 512. Eq. 1: 256 + 32 (8 - m) = 320 + 32 m -> m = 3.
    d = dynamic_batch_offload(TOY, HW, 8, 5)
    assert d.case is DboCase.LONGER_FFN
    assert d.m_exact == 3.0
    assert (d.m, d.n, d.m_capped) == (3, 0, False)
    assert d.xpu_seconds == d.pim_seconds == 416.0
    assert d.pipelined_seconds == 416.0 and d.serial_seconds == 832.0


@pytest.mark.parametrize(
    ("hw", "seq_len", "case", "share", "exact", "chosen", "seconds"),
    [
        # PIM at 2 FLOP/s, L = 12: PIM 32 x 12 = 384; m = (512 - 384) / (32 + 16) = 8/3.
        # m = 2: max(448, 416) = 448; m = 3: max(416, 432) = 432 -> 3.
        pytest.param(
            DboThroughput(xpu_flops=1.0, xpu_gemv_flops=0.5, pim_flops=2.0, pim_channels=4),
            12, DboCase.LONGER_FFN, "m", 8 / 3, 3, (416.0, 432.0), id="longer-ffn",
        ),
        # L = 16: n = (1024 - 512) / 384 = 4/3. n = 1: max(768, 896) = 896; n = 2: max(1024, 768).
        pytest.param(HW, 16, DboCase.LONGER_MHA, "n", 4 / 3, 1, (768.0, 896.0), id="longer-mha"),
    ],
)  # fmt: skip
def test_a_fraction_picks_the_faster_neighbour(hw, seq_len, case, share, exact, chosen, seconds):
    """The real ``m`` (``n``) is a fraction: the integer either side that ends the layer
    sooner is taken."""
    d = dynamic_batch_offload(TOY, hw, 8, seq_len)
    assert d.case is case
    assert getattr(d, f"{share}_exact") == pytest.approx(exact)
    assert getattr(d, share) == chosen
    assert (d.xpu_seconds, d.pim_seconds) == seconds


def test_longer_ffn_capped_at_the_pim_channels():
    # L = 2: PIM 128. Eq. 1: 512 - 32 m = 128 + 32 m -> m = 6 > 4 channels: m = 4.
    d = dynamic_batch_offload(TOY, HW, 8, 2)
    assert d.case is DboCase.LONGER_FFN
    assert d.m_exact == 6.0
    assert (d.m, d.m_capped) == (4, True)
    assert (d.xpu_seconds, d.pim_seconds) == (384.0, 256.0)


def test_longer_mha_exact_integer_solution():
    # L = 32: PIM 8 x 32 x 8 = 2048 > 512. Eq. 2: 512 + 16 L n = 8 L (8 - n) ->
    # n = (64 L - 512) / (24 L) = 1536 / 768 = 2; both sides 1536.
    d = dynamic_batch_offload(TOY, HW, 8, 32)
    assert d.case is DboCase.LONGER_MHA
    assert d.n_exact == 2.0
    assert (d.m, d.n) == (0, 2)
    assert d.xpu_seconds == d.pim_seconds == 1536.0


def test_balanced_moves_nothing():
    d = dynamic_batch_offload(TOY, HW, 8, 8)  # PIM 8 x 8 x 8 = 512 = xPU
    assert d.case is DboCase.BALANCED
    assert (d.m, d.n, d.xpu_seconds, d.pim_seconds) == (0, 0, 512.0, 512.0)


@pytest.mark.parametrize("seq_len", [2, 3, 5, 7, 9, 17, 40, 99])
def test_closed_forms_solve_equations_1_and_2(seq_len):
    """The real m, n put the two sides of eq. (1) / (2) equal (at any L, either branch)."""
    hw = DboThroughput(xpu_flops=3.0, xpu_gemv_flops=0.7, pim_flops=1.3, pim_channels=4)
    b, d, ff = 11, TOY.d_model, TOY.d_ff
    t_qkv, t_proj = 6 * d * d * b / 3.0, 2 * d * d * b / 3.0
    m, _, _ = solve_ffn_offload(TOY, hw, b, seq_len)
    lhs1 = t_qkv + t_proj + 4 * d * ff * (b - m) / 3.0
    rhs1 = 4 * d * b * seq_len / 1.3 + 4 * d * ff * m / 1.3
    assert lhs1 == pytest.approx(rhs1)
    n, _, _ = solve_mha_offload(TOY, hw, b, seq_len)
    lhs2 = t_qkv + t_proj + 4 * d * ff * b / 3.0 + 4 * d * n * seq_len / 0.7
    rhs2 = 4 * d * (b - n) * seq_len / 1.3
    assert lhs2 == pytest.approx(rhs2)


def test_offloading_never_predicts_a_slower_layer():
    for seq_len in range(1, 101):
        for b in (1, 4, 8, 33):
            d = dynamic_batch_offload(TOY, HW, b, seq_len)
            if d.case is not DboCase.SMALL_BATCH:
                before = d.before
                xpu0 = before["t_qkv_xpu"] + before["t_proj_xpu"] + before["t_ffn_xpu"]
                assert d.pipelined_seconds <= max(xpu0, before["t_mha_pim"]) + 1e-9
            assert 0 <= d.m <= b and 0 <= d.n <= b


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch": 0}, r"batch = 0: must be an integer >= 1 \(requests in the batch group\)"),
        ({"batch": True}, r"batch = True: must be an integer >= 1"),
        ({"seq_len": 0}, r"seq_len = 0: must be an integer >= 1 \(tokens"),
        ({"seq_len": 101}, r"seq_len = 101: beyond the model's context window; allowed: 1 to 100"),
    ],
)
def test_bad_step_inputs_name_field_value_and_range(kwargs, match):
    args = {"batch": 8, "seq_len": 8} | kwargs
    with pytest.raises(DboError, match=match):
        dynamic_batch_offload(TOY, HW, **args)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("xpu_flops", -1.0, r"xpu_flops = -1.0: must be a finite number \(FLOP/s\) > 0"),
        ("xpu_gemv_flops", 0, r"xpu_gemv_flops = 0: must be a finite number \(FLOP/s\) > 0"),
        ("pim_flops", math.inf, r"pim_flops = inf: must be a finite number"),
        ("pim_flops", "1", r"pim_flops = '1': must be a number \(FLOP/s\) > 0"),
        ("pim_channels", 0, r"pim_channels = 0: must be an integer >= 1"),
    ],
)
def test_bad_throughputs_are_refused(field, value, match):
    kw = {"xpu_flops": 1.0, "xpu_gemv_flops": 1.0, "pim_flops": 1.0, "pim_channels": 4}
    with pytest.raises(DboError, match=match):
        DboThroughput(**(kw | {field: value}))


def test_bad_model_parameters_are_refused():
    with pytest.raises(DboError, match=r"k_ffn = -4: must be a finite number"):
        DboModel(2, 4, 6, 2, -4, 4, 100)
    with pytest.raises(DboError, match=r"context_window = 0: must be an integer >= 1 \(tokens\)"):
        DboModel(2, 4, 6, 2, 4, 4, 0)
    assert issubclass(DboError, PimphonyError) and issubclass(DboError, ValueError)


def test_a_separate_pim_ffn_rate_enters_equation_1_and_the_small_batch_branch():
    # PIM's FFN at 0.5 FLOP/s, its attention at 1: L = 5, eq. 1:
    # 256 + 32 (8 - m) = 320 + 64 m -> m = 192 / 96 = 2 (with one rate it is 3).
    hw = DboThroughput(1.0, 0.5, 1.0, 4, pim_ffn_flops=0.5)
    assert hw.ffn_pim_flops == 0.5 and HW.ffn_pim_flops == HW.pim_flops
    d = dynamic_batch_offload(TOY, hw, 8, 5)
    assert (d.case, d.m_exact, d.m) == (DboCase.LONGER_FFN, 2.0, 2)
    assert d.xpu_seconds == d.pim_seconds == 448.0
    # small batch (B = 3, L = 10): attention 240 plus the group's FFN 96 FLOPs at 0.5 = 192
    d = dynamic_batch_offload(TOY, hw, 3, 10)
    assert (d.case, d.pim_seconds) == (DboCase.SMALL_BATCH, 432.0)
    with pytest.raises(DboError, match=r"pim_ffn_flops = -1\.0: must be a finite number"):
        DboThroughput(1.0, 0.5, 1.0, 4, pim_ffn_flops=-1.0)
