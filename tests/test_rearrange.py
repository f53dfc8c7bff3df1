"""Rearrangement host layout <-> PIM layout (compiler/rearrange.py), timed by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pimphony.compiler.pim_gemv import gemv_layout
from pimphony.compiler.rearrange import (
    RearrangeError,
    Strategy,
    access_stream,
    access_stream_reference,
    gemv_output_addresses,
    gemv_weight_addresses,
    rearrangement_cost,
    rearrangement_seconds,
)
from pimphony.models.backends import load_backend
from pimphony.models.hbm_pim import Op, time_stream

HBM = load_backend("hbm-pim")


def test_write_stream_by_hand() -> None:
    """Two banks in different bank groups (0 and 4), two columns each, one row."""
    t = HBM.timing
    assert t is not None
    addr = np.array([(0, 7, 0), (0, 7, 1), (4, 7, 0), (4, 7, 1)])
    s = access_stream(HBM, addr, Op.WR)
    shown = [(Op(int(c["op"])).name, int(c["bank"]), int(c["col"])) for c in s]
    assert shown == [("ACT", 0, 0), ("ACT", 4, 0), ("WR", 0, 0), ("WR", 4, 0), ("WR", 0, 1),
                     ("WR", 4, 1), ("PRE", 0, 0), ("PRE", 4, 0)]  # fmt: skip
    act4 = t.tRRD_S
    w0 = t.tRCD_WR  # bank 0's ACT at 0
    w4 = max(w0 + t.tCCD_S, act4 + t.tRCD_WR)
    w0b, w4b = w4 + t.tCCD_S, w4 + 2 * t.tCCD_S
    p0 = max(w4b + 1, 0 + t.tRAS, w0b + t.write_to_precharge)
    p4 = max(p0 + 1, act4 + t.tRAS, w4b + t.write_to_precharge)
    tl = time_stream(HBM, s)
    assert tl.issue.tolist() == [0, act4, w0, w4, w0b, w4b, p0, p4]
    assert tl.cycles == p4 + t.tRP == 58
    cost = rearrangement_cost(HBM, addr, channels=2, op=Op.WR, strategy=Strategy.STAGED)
    host_gbps = 2039.0 * 0.85  # a100-80gb: datasheet bandwidth x the AttAcc efficiency cap
    assert cost.bytes == 4 * 32 * 2
    assert cost.host_s == pytest.approx(256 / (host_gbps * 1e9))
    assert cost.channel_s == pytest.approx(58 / 1.2e9)
    assert cost.total_s == pytest.approx(cost.host_s + cost.channel_s)


def test_strategies_in_closed_form() -> None:
    # 1 MB over 4 channels, host at 100 GB/s, each channel's share takes 1 ms
    host_s, staged, rounds = rearrangement_seconds(Strategy.STAGED, 10**6, 100.0, 1e-3, 4, 4096)
    assert host_s == pytest.approx(1e-5) and rounds == -(-(10**6) // 4096) == 245
    assert staged == pytest.approx(1e-5 + 1e-3)  # reads, then the channels write in parallel
    _, direct, rounds = rearrangement_seconds(Strategy.DIRECT, 10**6, 100.0, 1e-3, 4, 0)
    assert direct == pytest.approx(4e-3) and rounds == 1  # one channel at a time
    _, direct, _ = rearrangement_seconds(Strategy.DIRECT, 10**6, 0.1, 1e-3, 4, 0)
    assert direct == pytest.approx(1e-2)  # host-bound: 1 MB at 0.1 GB/s


def test_gemv_weights_and_results() -> None:
    lay = gemv_layout(HBM, 256, 512, channels=2)
    w = gemv_weight_addresses(lay)
    # every weight vector once: dout x din / lanes / channels
    assert len(np.unique(w, axis=0)) == len(w) == 256 * 512 // 16 // 2
    cost = rearrangement_cost(HBM, w, channels=2)
    assert cost.strategy is Strategy.STAGED  # the A100 has shared memory
    assert cost.bytes == 256 * 512 * 2
    assert cost.channel_commands["WR"] == len(w)
    # the channel bus moves 32 B per tCCD_S at best
    assert cost.channel_cycles >= len(w) * HBM.timing.tCCD_S
    out = gemv_output_addresses(lay)
    assert len(out) == lay.units * lay.out_tiles * lay.output_regs
    back = rearrangement_cost(HBM, out, channels=2, op=Op.RD)
    assert back.channel_commands["RD"] == len(out) and back.bytes == len(out) * 32 * 2


def test_refusals() -> None:
    with pytest.raises(RearrangeError, match="no addresses"):
        access_stream(HBM, np.zeros((0, 3)), Op.WR)
    with pytest.raises(RearrangeError, match="onchip_bytes = 2, channels = 4"):
        rearrangement_seconds(Strategy.STAGED, 100, 1.0, 1.0, 4, 2)
    bare = dataclasses.replace(load_backend("aim"), hardware_config=None)
    with pytest.raises(RearrangeError, match="aim: an aim back end without its hardware preset"):
        rearrangement_cost(bare, np.array([(0, 0, 0)]), 1)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["hbm-pim", "hbm-pim-hbm3", "lpddr5x-pim"]), st.integers(1, 400),
       st.integers(1, 6), st.sampled_from([Op.RD, Op.WR]), st.integers(0, 2**32 - 1))  # fmt: skip
def test_access_stream_equals_reference(name: str, n: int, rows: int, op: Op, seed: int) -> None:
    """The vectorised stream is the reference's, command for command (repeated addresses,
    banks with different column counts in one row, several rows)."""
    cfg = load_backend(name)
    rng = np.random.default_rng(seed)
    g = cfg.group
    addr = np.stack([rng.integers(0, g.banks, n), rng.integers(0, rows, n) * 37,
                     rng.integers(0, g.columns_per_row, n)], axis=1)  # fmt: skip
    fast, ref = access_stream(cfg, addr, op), access_stream_reference(cfg, addr, op)
    assert fast.dtype == ref.dtype
    np.testing.assert_array_equal(fast, ref)
