"""The AttAcc command-level model (models/attacc.py) and its DCC lowerings
(compiler/dcc/attacc_lowering.py): hand-timed streams, closed-form counts, values == numpy."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from pimphony.compiler.dcc.attacc_lowering import (
    GROUP_LOWERINGS,
    AttAccLoweringError,
    _nest,
    combine_partials,
    lower_attention,
    lower_attention_reference,
    lower_group,
    run_attention,
    run_attention_split,
    run_group,
    token_shares,
)
from pimphony.compiler.dcc.schedule import DCC_KERNELS, DccKernel, dimension_sets, drafts
from pimphony.compiler.dcc.tune import default_draft
from pimphony.models.attacc import (
    COMMAND_DTYPE,
    AttAccError,
    AttAccState,
    MacMode,
    Op,
    Scope,
    SfmMode,
    access_stream,
    command,
    execute,
    interleave,
    time_stream,
)
from pimphony.models.backends import PimTiming, load_backend
from pimphony.models.reference import access_stream_reference

from tests.helpers import on_reference_engine

ATT = load_backend("attacc")
time_stream_reference = on_reference_engine(time_stream)


def _numpy(kernel: DccKernel, a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The loop nest's result in float64."""
    f = {k: v.astype(np.float64) for k, v in a.items()}
    return {
        DccKernel.GEMV: lambda: {"y": f["W"] @ f["x"]},
        DccKernel.BATCHED_GEMV: lambda: {"Y": f["X"] @ f["W"].T},
        DccKernel.QK: lambda: {"S": np.einsum("hd,htd->ht", f["Q"], f["K"])},
        DccKernel.SV: lambda: {"O": np.einsum("ht,htd->hd", f["P"], f["V"])},
        DccKernel.RED: lambda: {"r": f["A"].sum(axis=1)},
        DccKernel.BATCHED_RED: lambda: {"r": f["A"].sum(axis=-1)},
    }[kernel]()


def _arrays(kernel: DccKernel, sizes: tuple[int, ...], seed: int) -> dict[str, np.ndarray]:
    # small integers: every FP16 product and partial sum is exact, so any mapping error shows
    rng = np.random.default_rng(seed)
    return {
        name: rng.integers(-3, 4, shape).astype(np.float16)
        for name, shape in _nest(kernel, sizes).tensors
    }


def test_small_gemv_cycles_by_hand() -> None:
    """GEMV 64 x 128 on the default mapping: 16 bank groups x 4 outputs, 4 banks x 32 inputs
    (two 16-element vectors per bank). Stream: 8 WRGB (2 entries x 4 bank indices, each a
    broadcast to every bank group), ACTAB, 8 MACAB (4 outputs x 2 vectors, one row), 16 MVSB
    (one per bank group, its 4 banks summed), 16 RDSB, PREA."""
    t = ATT.timing
    assert t is not None
    k = lower_group(ATT, DccKernel.GEMV, (64, 128), (16, 4))
    ops = k.stream["op"]
    assert [Op(o).name for o in ops[:10]] == ["WRGB"] * 8 + ["ACTAB", "MACAB"]
    tl = time_stream(ATT, k.stream)
    bus = t.burst_cycles
    # WRGBs all carry bank group 0 (the simulator's broadcast address): tCCD_L apart
    last_wrgb = 7 * t.tCCD_L
    gb_ready = last_wrgb + t.WL + bus
    act = last_wrgb + 1
    first_mac = max(act + t.tRCD_RD, gb_ready)
    last_mac = first_mac + 7 * t.tCCD_AB
    # MVSB: accumulators ready tCCD_AB after the last MAC; 8 bank groups of pseudo-channel 0
    # then 8 of pseudo-channel 1 (its bus is free: one cycle after the previous command)
    mvsb0 = last_mac + t.tCCD_AB
    assert bus == t.tCCD_S  # within a pseudo-channel: another rank or bank group, nBL apart
    last_mvsb_p0 = mvsb0 + 7 * bus
    last_mvsb = last_mvsb_p0 + 1 + 7 * bus
    # RDSB: after the last move lands (+ nBL); addresses alternate pseudo-channels: 1/cycle
    first_rdsb = last_mvsb + bus
    last_rdsb = first_rdsb + 15
    end = last_rdsb + t.RL + bus
    prea = last_rdsb + 1
    assert prea >= act + t.tRAS and prea >= last_mac + t.tRTP
    assert prea + t.tRP < end
    np.testing.assert_array_equal(tl.issue[:8], np.arange(8) * t.tCCD_L)
    assert (act, first_mac, last_mac, mvsb0, last_mvsb, first_rdsb) == (29, 48, 90, 96, 125, 127)
    assert tl.cycles == k.cycles == end == 163
    assert k.counts == {"ACTAB": 1, "PREA": 1, "MACAB": 8, "WRGB": 8, "MVSB": 16, "RDSB": 16}
    # the weights: 64 outputs x 2 vectors x 4 banks... one 32 B vector per (output, 16 inputs)
    assert k.inputs["W"].shape == (64 * 128 // 16, 3)
    assert k.outputs == {} and k.host_ops == 0


@pytest.mark.parametrize(("dout", "din"), [(64, 128), (256, 512), (1024, 4096), (100, 300)])
def test_gemv_counts_closed_form(dout: int, din: int) -> None:
    """Default mapping (16 bank groups x 4 banks), GEMV-buffer of IR = 16 entries, one
    16-lane accumulator: lo = ceil(dout / 16) outputs and li = ceil(din / 4) inputs per bank,
    vr = ceil(li / 16) vectors per output, T = ceil(vr / IR) input tiles, P = ceil(lo / 16)
    passes of 16 outputs."""
    c = ATT.core
    lo, li = -(-dout // 16), -(-din // 4)
    vr = -(-li // c.lanes)
    T = -(-vr // c.input_regs)
    P = -(-lo // c.lanes)
    k = lower_group(ATT, DccKernel.GEMV, (dout, din), (16, 4))
    # bank groups holding outputs in pass p (the last ones may hold only padding)
    groups = sum(
        sum(1 for g in range(16) if g * lo + p * c.lanes < dout and p * c.lanes < lo)
        for p in range(P)
    )
    rows = -(-lo * vr // ATT.group.columns_per_row)
    assert k.counts == {
        "ACTAB": rows,
        "PREA": rows,
        "MACAB": lo * vr,
        "WRGB": 4 * (vr if T == 1 else P * vr),  # a broadcast per bank index and entry
        "MVSB": groups,  # one per bank group per pass: the adder tree sums its 4 banks
        "RDSB": groups,
    }


KERNEL_SIZES = {
    DccKernel.GEMV: st.tuples(st.integers(1, 80), st.integers(1, 300)),
    DccKernel.BATCHED_GEMV: st.tuples(st.integers(1, 3), st.integers(1, 40), st.integers(1, 90)),
    DccKernel.QK: st.tuples(st.integers(1, 3), st.integers(1, 50), st.integers(1, 70)),
    DccKernel.SV: st.tuples(st.integers(1, 3), st.integers(1, 50), st.integers(1, 70)),
    DccKernel.RED: st.tuples(st.integers(1, 80), st.integers(1, 300)),
    DccKernel.BATCHED_RED: st.tuples(st.integers(1, 5), st.integers(1, 20), st.integers(1, 300)),
}


@st.composite
def _cases(draw, kernel: DccKernel):
    sizes = draw(KERNEL_SIZES[kernel])
    cores: list[int] = []
    left = ATT.cores_per_group
    for _ in sizes:
        c = draw(st.integers(1, min(left, 20)))
        cores.append(c)
        left //= c
    return sizes, tuple(cores), draw(st.integers(0, 1000))


@pytest.mark.parametrize("kernel", list(KERNEL_SIZES))
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_values_equal_numpy(kernel: DccKernel, data) -> None:
    sizes, cores, seed = data.draw(_cases(kernel))
    arrays = _arrays(kernel, sizes, seed)
    got = run_group(ATT, kernel, sizes, cores, arrays)
    want = _numpy(kernel, arrays)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name].astype(np.float64), want[name])


@pytest.mark.parametrize(
    ("kernel", "sizes", "cores"),
    [
        (DccKernel.GEMV, (64, 4096), (16, 4)),  # 4 input tiles: the GEMV buffer is reloaded
        (DccKernel.GEMV, (300, 2000), (8, 8)),  # 8 banks share outputs: 2 bank groups each
        (DccKernel.GEMV, (1000, 100), (64, 1)),
        (DccKernel.QK, (2, 256, 128), (1, 16, 4)),
        (DccKernel.SV, (2, 128, 256), (1, 4, 16)),
        (DccKernel.RED, (40, 1000), (4, 16)),
        (DccKernel.BATCHED_RED, (1, 1, 4096), (1, 1, 64)),  # the default's share
        (DccKernel.BATCHED_RED, (20, 1, 1000), (4, 1, 16)),  # 5 batch rows in a bank's lanes
        (DccKernel.BATCHED_RED, (6, 40, 300), (3, 4, 5)),
    ],
)
def test_values_equal_numpy_larger(kernel: DccKernel, sizes: tuple, cores: tuple) -> None:
    arrays = _arrays(kernel, sizes, 7)
    got = run_group(ATT, kernel, sizes, cores, arrays)
    for name, want in _numpy(kernel, arrays).items():
        np.testing.assert_array_equal(got[name].astype(np.float64), want)


def test_gemv_random_fp16_close_to_numpy() -> None:
    rng = np.random.default_rng(3)
    a = {
        "W": (rng.standard_normal((128, 512)) / 16).astype(np.float16),
        "x": rng.standard_normal(512).astype(np.float16),
    }
    y = run_group(ATT, DccKernel.GEMV, (128, 512), (16, 4), a)["y"].astype(np.float64)
    ref = _numpy(DccKernel.GEMV, a)["y"]
    # FP16 adder trees of 16 products, 8 accumulations per bank, 4 banks summed: < 1%
    assert np.max(np.abs(y - ref)) < 0.01 * np.max(np.abs(ref))


def test_split_reduction_uses_the_accumulator() -> None:
    """RED 16 x 256 with n over 8 cores: each output's 8 partial sums meet in the softmax
    buffer, 4 + 4 through two bank groups' adder trees; with n over 2 cores, one add each."""
    k = lower_group(ATT, DccKernel.RED, (16, 256), (8, 8))
    m = k.stream[k.stream["op"] == Op.MVSB]
    assert set(m["mode"].tolist()) == {Scope.GROUP} and len(m) == 2 * 8
    assert m["add"].tolist() == [0, 1] * 8
    k = lower_group(ATT, DccKernel.RED, (16, 256), (8, 2))
    m = k.stream[k.stream["op"] == Op.MVSB]
    assert set(m["mode"].tolist()) == {Scope.BANK} and m["add"].tolist() == [0, 1] * 8


def test_small_batched_red_cycles_by_hand() -> None:
    """Batched RED (4, 1, 512), batch rows over 2 cores and n over 4: bank group 0 (banks
    0-3) holds batch rows 0-1, bank group 1 (banks 4-7) rows 2-3, each bank 128 of n (8
    vectors). The ones go once per bank group and vector (16 WRGB, GROUP: fewer than 4 bank
    indices x 8); each bank folds its two batch rows into lanes 0 and 1 of its accumulator
    (2 outputs x 8 vectors = 16 MACAB, one row); one MVSB per bank group (its 4 banks summed
    by the adder tree) holds both rows' sums; 2 RDSB; PREA."""
    t = ATT.timing
    assert t is not None
    bus = t.burst_cycles
    k = lower_group(ATT, DccKernel.BATCHED_RED, (4, 1, 512), (2, 1, 4))
    assert k.counts == {"WRGB": 16, "ACTAB": 1, "MACAB": 16, "MVSB": 2, "RDSB": 2, "PREA": 1}
    # WRGBs alternate bank groups 0 and 1 (one rank, one pseudo-channel): nBL = tCCD_S apart
    # (the same bank group again is tCCD_L = 2 x nBL later, already met)
    assert bus == t.tCCD_S and t.tCCD_L == 2 * bus
    last_wrgb = 15 * bus  # 30
    gb_ready = last_wrgb + t.WL + bus  # 38: the last ones land
    act = last_wrgb + 1  # 31
    first_mac = max(act + t.tRCD_RD, gb_ready)  # 50
    last_mac = first_mac + 15 * t.tCCD_AB  # 140
    mvsb = [last_mac + t.tCCD_AB]  # 146: the accumulators ready
    mvsb.append(mvsb[0] + bus)  # 148: the same pseudo-channel's bus
    # RDSB of slot 0 waits for the last move to land (+ nBL); slot 1's address is on the
    # other pseudo-channel (interleave): the next cycle
    rdsb = [mvsb[1] + bus, mvsb[1] + bus + 1]  # 150, 151
    prea = max(rdsb[1] + 1, act + t.tRAS, last_mac + t.tRTP)  # 152
    end = max(rdsb[1] + t.RL + bus, prea + t.tRP)  # 172 = 151 + 19 + 2
    tl = time_stream(ATT, k.stream)
    ops = [Op(o).name for o in k.stream["op"]]
    assert ops == ["WRGB"] * 16 + ["ACTAB"] + ["MACAB"] * 16 + ["MVSB"] * 2 + ["RDSB"] * 2 + [
        "PREA"
    ]
    np.testing.assert_array_equal(tl.issue[:16], np.arange(16) * bus)
    np.testing.assert_array_equal(
        tl.issue[16:], [act, *(first_mac + np.arange(16) * t.tCCD_AB), *mvsb, *rdsb, prea]
    )
    assert k.cycles == tl.cycles == end == 172
    # lanes: output j of a bank is its batch row j; both rows leave in one entry per group
    macs = k.stream[k.stream["op"] == Op.MACAB]
    assert macs["lane"].tolist() == [0] * 8 + [1] * 8
    m = k.stream[k.stream["op"] == Op.MVSB]
    assert m["bank"].tolist() == [0, 4] and set(m["mode"].tolist()) == {Scope.GROUP}
    assert k.inputs["A"].shape == (4 * 512 // 16, 3) and k.host_ops == 0
    a = _arrays(DccKernel.BATCHED_RED, (4, 1, 512), 5)
    r = run_group(ATT, DccKernel.BATCHED_RED, (4, 1, 512), (2, 1, 4), a)["r"]
    np.testing.assert_array_equal(r.astype(np.float64), _numpy(DccKernel.BATCHED_RED, a)["r"])


@pytest.mark.parametrize(
    ("b", "n", "c_b", "c_n"), [(2, 128, 1, 8), (5, 1000, 2, 16), (7, 300, 3, 5), (1, 4096, 1, 64)]
)
def test_batched_red_of_one_row_is_red(b: int, n: int, c_b: int, c_n: int) -> None:
    """Batched RED (B, 1, N) on cores (c_b, 1, c_n) is RED (B, N) on (c_b, c_n), command for
    command: a core's batch rows are its outputs, as RED's rows."""
    x = lower_group(ATT, DccKernel.BATCHED_RED, (b, 1, n), (c_b, 1, c_n))
    y = lower_group(ATT, DccKernel.RED, (b, n), (c_b, c_n))
    assert x.stream.tobytes() == y.stream.tobytes() and x.cycles == y.cycles
    np.testing.assert_array_equal(x.inputs["A"], y.inputs["A"])


@pytest.mark.parametrize("batch", [1, 4, 16, 80, 100])
def test_batched_red_default_puts_batch_rows_on_channels(batch: int) -> None:
    """DCC V's default of batched RED (B, 1, N) on AttAcc: batch rows on min(B, 80) channels
    (every device's pseudo-channels), the row of extent 1 not spread, N over all 64 banks."""
    assert ATT.groups == 80
    d = default_draft(ATT, DccKernel.BATCHED_RED, (batch, 1, 1024))
    assert [(p.groups, p.cores, p.function.var) for p in d] == [
        (min(batch, ATT.groups), 1, "b"),
        (1, 1, "m"),
        (1, ATT.cores_per_group, "n"),
    ]
    # it runs: each channel's share is one batch row (two above 80), 16 n per bank
    share = (-(-batch // min(batch, 80)), 1, 1024)
    k = lower_group(ATT, DccKernel.BATCHED_RED, share, (1, 1, 64))
    assert k.counts["MACAB"] == share[0] and k.counts["RDSB"] == 1


def test_sv_broadcasts_per_bank_group() -> None:
    """SV on the default mapping: each bank group holds its tokens' probabilities in all 4
    banks (a bank-group broadcast, the simulator's MVGB per bank group), 16 tokens a vector."""
    k = lower_group(ATT, DccKernel.SV, (1, 128, 256), (1, 4, 16))
    w = k.stream[k.stream["op"] == Op.WRGB]
    assert set(w["mode"].tolist()) == {Scope.GROUP} and len(w) == 16  # 16 tokens per group
    assert k.counts["MACAB"] == 16 * 2  # 16 tokens x 2 output vectors (32 d per bank)


@pytest.mark.parametrize(
    ("kernel", "sizes", "cores", "message"),
    [
        (DccKernel.VA, (64,), (1,), "va cannot run on AttAcc: vector addition needs a near-b"),
        (DccKernel.RELU, (64,), (1,), "relu cannot run on AttAcc"),
        (DccKernel.BATCHED_VA, (2, 64), (1, 1), "batched-va cannot run on AttAcc: vector add"),
        (DccKernel.BATCHED_RELU, (2, 64), (1, 1), "batched-relu cannot run on AttAcc: ReLU"),
        (DccKernel.GEMV, (64, 64), (16, 8), r"cores = \(16, 8\): 128 cores, more than the 64"),
        (DccKernel.GEMV, (64, 64), (16,), "gemv has 2 dimension sets; got sizes = "),
        (DccKernel.GEMV, (0, 64), (1, 1), r"sizes = \(0, 64\), cores = \(1, 1\): every entry"),
    ],
)
def test_refusals(kernel: DccKernel, sizes: tuple, cores: tuple, message: str) -> None:
    with pytest.raises(AttAccLoweringError, match=message):
        lower_group(ATT, kernel, sizes, cores)


def test_shares_that_do_not_fit() -> None:
    small = dataclasses.replace(ATT, group=dataclasses.replace(ATT.group, rows_per_bank=2))
    need = r"W needs 96 rows per bank \(3,072 vectors of 32 B\); a bank has 2"
    with pytest.raises(AttAccLoweringError, match=need):
        lower_group(small, DccKernel.GEMV, (48, 1024), (1, 1))
    tiny = dataclasses.replace(ATT, group=dataclasses.replace(ATT.group, buffer_bytes=64))
    with pytest.raises(AttAccLoweringError, match="more than the 2 softmax-buffer entries"):
        lower_group(tiny, DccKernel.GEMV, (64, 64), (16, 4))
    with pytest.raises(AttAccLoweringError, match="not an AttAcc back end"):
        lower_group(load_backend("hbm-pim"), DccKernel.GEMV, (64, 64), (1, 1))


@pytest.mark.parametrize(
    ("kernel", "sizes", "groups", "bound"),
    [
        (DccKernel.GEMV, (256, 512), 1, 16),
        (DccKernel.RED, (64, 1024), 1, 16),
        # batches / heads over min(size, 16) channels; the search is bounded to those groups
        # (with 16 groups the 3-set searches take seconds)
        (DccKernel.BATCHED_GEMV, (2, 64, 128), 2, 2),
        (DccKernel.QK, (2, 256, 128), 2, 2),
        (DccKernel.SV, (2, 256, 128), 2, 2),
    ],
)
def test_default_draft_is_a_draft(kernel: DccKernel, sizes: tuple, groups: int, bound: int) -> None:
    d = default_draft(ATT, kernel, sizes)
    sets = dimension_sets(DCC_KERNELS[kernel](*sizes))
    assert d in set(drafts(sets, bound, ATT.cores_per_group))
    assert math.prod(p.cores for p in d) == 64  # every bank works
    assert math.prod(p.groups for p in d) == groups


def test_default_draft_lands_as_attacc_places_data() -> None:
    """QK^T default: heads over channels; tokens over the 16 bank groups, d_h over the 4
    banks of a group (the simulator's score layout): bank 4 g + b holds tokens of group g and
    d_h slice b."""
    d = default_draft(ATT, DccKernel.QK, (16, 256, 128))
    assert [(p.groups, p.cores, p.dim) for p in d] == [(16, 1, "K0"), (1, 16, "K1"), (1, 4, "K2")]
    share = (1, 256, 128)
    k = lower_group(ATT, DccKernel.QK, share, tuple(p.cores for p in d))
    addr = k.inputs["K"]
    for bank in (0, 5, 63):
        rows = addr[addr[:, 0] == bank]
        assert len(rows) == 16 * 2  # 16 tokens x 32 d_h (two vectors)


def test_access_stream_timed_by_hand() -> None:
    """Writes of two columns to banks 0 and 4 (bank groups 0 and 1 of rank 0)."""
    t = ATT.timing
    assert t is not None
    s = access_stream(ATT, np.array([[0, 0, 0], [0, 0, 1], [4, 0, 0], [4, 0, 1]]), Op.WR)
    assert [Op(o).name for o in s["op"]] == ["ACT"] * 2 + ["WR"] * 4 + ["PRE"] * 2
    tl = time_stream(ATT, s)
    act1 = max(1, 2, t.tRRD_S)  # two-cycle ACT, then tRRD_S to another bank group
    wr = [t.tRCD_WR, act1 + t.tRCD_WR]
    wr += [wr[1] + t.tCCD_S, wr[1] + 2 * t.tCCD_S]  # bank 0 again: tCCD_L after its first
    assert wr[2] == wr[0] + t.tCCD_L
    pre = [wr[2] + t.write_to_precharge, wr[3] + t.write_to_precharge]
    np.testing.assert_array_equal(tl.issue, [0, act1, *wr, *pre])
    assert tl.cycles == pre[1] + t.tRP == 73


def test_access_stream_fills_both_pseudo_channels() -> None:
    """A full row of every bank: consecutive writes alternate pseudo-channels, so after the
    ACTs the WRs go one per cycle (2,048 WRs) and the channel's two buses both carry data."""
    addr = np.array([(b, 3, c) for b in range(64) for c in range(32)])
    s = access_stream(ATT, addr, Op.WR)
    wr = np.flatnonzero(s["op"] == Op.WR)
    tl = time_stream(ATT, s)
    assert len(wr) == 2048 and np.all(np.diff(tl.issue[wr]) == 1)
    assert interleave(ATT)[:4].tolist() == [0, 32, 16, 48]  # pCH0, pCH1, rank 1 of each
    with pytest.raises(AttAccError, match="not MACAB"):
        access_stream(ATT, addr, Op.MACAB)


def test_macab_spacing_and_row_rules() -> None:
    t = ATT.timing
    assert t is not None
    s = np.array(
        [
            command(Op.ACTAB, row=5),
            *(
                command(Op.MACAB, row=5, col=c, src=0, dst=0, lane=c, mode=int(MacMode.DOT))
                for c in range(3)
            ),
            command(Op.PREA),
        ],
        dtype=COMMAND_DTYPE,
    )
    tl = time_stream(ATT, s)
    macs = [t.tRCD_RD + k * t.tCCD_AB for k in range(3)]
    np.testing.assert_array_equal(tl.issue, [0, *macs, max(t.tRAS, macs[-1] + t.tRTP)])
    st_ = AttAccState.for_backend(ATT)
    st_.row(5)[:, :3, :] = 1
    st_.gb[:, 0, :] = 2
    execute(ATT, s, np.zeros((0, 16), np.uint16), st_)
    assert np.all(st_.acc[:, 0, :3] == 32) and st_.macs == 3  # 16 lanes x 1 x 2
    with pytest.raises(AttAccError, match=r"command 0 \(MACAB row=5 .*row 5 is not open in eve"):
        execute(ATT, s[1:2], np.zeros((0, 16), np.uint16), AttAccState.for_backend(ATT))
    with pytest.raises(AttAccError, match="MACAB has no operand"):
        command(Op.MACAB, bank=3)


def _attention_numpy(a: dict[str, np.ndarray]) -> np.ndarray:
    f = {k: v.astype(np.float64) for k, v in a.items()}
    s = np.einsum("hd,htd->ht", f["Q"], f["K"])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return np.einsum("ht,htd->hd", p, f["V"])


@pytest.mark.parametrize(
    ("sizes", "cores"),
    [((1, 16, 16), (1, 1, 1)), ((2, 256, 128), (1, 16, 4)), ((1, 100, 64), (1, 1, 4)),
     ((2, 64, 128), (1, 4, 16)), ((1, 600, 32), (1, 1, 2)),
     # heads over cores: parallel QK^T and SV, one SFM per head; padded heads and tokens
     ((2, 128, 16), (2, 8, 1)), ((4, 256, 128), (2, 16, 2)), ((3, 64, 64), (2, 4, 4)),
     ((5, 100, 33), (4, 1, 4)), ((8, 512, 64), (8, 2, 4))],
)  # fmt: skip
def test_attention_close_to_numpy(sizes: tuple, cores: tuple) -> None:
    """QK^T, SFM on the softmax unit, MVGB of the probabilities, SV: FP16 scores and
    probabilities (the unit computes in float32 and stores FP16), so a tolerance."""
    H, T, D = sizes
    rng = np.random.default_rng(T)
    a = {
        "Q": (rng.standard_normal((H, D)) / 4).astype(np.float16),
        "K": (rng.standard_normal((H, T, D)) / 4).astype(np.float16),
        "V": rng.standard_normal((H, T, D)).astype(np.float16),
    }
    got = run_attention(ATT, sizes, cores, a)["O"].astype(np.float64)
    ref = _attention_numpy(a)
    assert np.max(np.abs(got - ref)) < 0.01 * np.max(np.abs(ref))
    # a wrong softmax (none at all) is far off
    assert np.max(np.abs(got - np.einsum("ht,htd->hd", np.ones((H, T)) / T, a["V"]))) > 1e-3


def test_attention_counts_default_mapping() -> None:
    """One head of 4096 tokens, d_h 128, on the default mapping (tokens over the 16 bank
    groups, d_h over the 4 banks): per bank 256 tokens x 32 d_h."""
    k = lower_attention(ATT, (1, 4096, 128), (1, 16, 4))
    tok, vec_dh = 4096 // 16, 128 // 4 // 16  # 2 vectors of d_h per bank
    assert k.counts == {
        "WRGB": 2 * 4,  # Q: 2 entries per bank index, broadcast over bank groups
        "ACTAB": 2 * tok * vec_dh // 32,  # K then V: 512 vectors each, 32 per row
        "PREA": 2 * tok * vec_dh // 32,
        "MACAB": 2 * tok * vec_dh,  # QK: 2 per token; SV: 2 output vectors per token
        "MVSB": 4096 // 16 + 4 * vec_dh * 16,  # a bank group's 16 scores; SV: 16 partials
        "SFM": 1,
        "MVGB": 16 * tok // 16,  # 16 entries per bank group, broadcast to its 4 banks
        "RDSB": 4 * vec_dh,
    }
    assert set(k.inputs) == {"K", "V"} and k.outputs == {}
    sfm = np.flatnonzero(k.stream["op"] == Op.SFM)[0]
    mvgb = np.flatnonzero(k.stream["op"] == Op.MVGB)[0]
    tl = time_stream(ATT, k.stream)
    assert tl.issue[mvgb] >= tl.issue[sfm] + 4096 // 16  # the softmax unit: 16 per cycle


@pytest.mark.parametrize(
    ("sizes", "cores", "message"),
    [
        ((1, 100, 64), (1, 4, 4), "tokens = 100 over 4 cores gives 25 per core, not a multiple"),
        ((1, 8192, 64), (1, 16, 4), "8192 scores take 512 softmax-buffer entries"),
        # heads over cores: the round's heads' scores wait in the buffer together
        (
            (2, 4096, 128),
            (2, 16, 2),
            r"2 heads' 4096 scores \(cores\[0\] = 2: a round has one head per head core.*\) "
            r"take 512 softmax-buffer entries.*the buffer has 256 .*at most 1 head\(s\) of 4096 "
            r"tokens per round",
        ),
        (
            (16, 512, 64),
            (16, 2, 2),
            r"16 heads' 512 scores \(cores\[0\] = 16: .*\) take 512 .*at most 8 head\(s\) of 512 "
            r"tokens per round",
        ),
    ],
)
def test_attention_refusals(sizes: tuple, cores: tuple, message: str) -> None:
    with pytest.raises(AttAccLoweringError, match=message):
        lower_attention(ATT, sizes, cores)


def test_attention_heads_over_cores_cycles_by_hand() -> None:
    """2 heads x 128 tokens x d_h 16 on cores (2, 8, 1): head core j is banks 8j .. 8j + 7
    (bank groups 2j, 2j + 1; all rank 0, pseudo-channel 0), bank 8j + c holds tokens
    16c .. 16c + 15 of head j: one K vector and one V vector per token. Against the same
    share with the heads one after another on cores (1, 8, 1), both counted here from the
    [timing] fields (tCCD_S 2, tCCD_L 4, nBL 2, tCCD_AB 6, tRCD_RD 19, tRAS 45, tRP 19,
    tRC 63, tRTP 8, WL 6, RL 19) and the softmax unit's 16 elements per cycle."""
    t = ATT.timing
    assert t is not None
    bus, ab, L = t.burst_cycles, t.tCCD_AB, ATT.core.lanes
    assert (t.tCCD_S, t.tCCD_L, bus, ab, t.tRCD_RD, t.tRAS, t.tRP, t.tRTP, t.WL, t.RL) == (
        2, 4, 2, 6, 19, 45, 19, 8, 6, 19)  # fmt: skip
    sfm = 128 // L  # one SFM over 128 scores: 8 cycles
    # --- parallel (cores (2, 8, 1)): one round, both heads at once
    # QK^T: 4 WRGBs of Q (a GROUP broadcast per bank group: bank groups 0, 1 want Q[0], 2, 3
    # Q[1]), another bank group each: nBL apart at 0, 2, 4, 6; they land at 6 + WL + nBL = 14
    # ACTAB at 7; 16 MACABs (16 tokens per bank, one vector of d_h) from max(7 + tRCD_RD,
    # 14) = 26, tCCD_AB apart: the last at 26 + 15 x 6 = 116, accumulators ready at 122
    # 16 MVSBs, one per bank (each bank its own 16 scores) into entry 8j + c = the bank:
    # from 122, tCCD_L apart within a bank group, nBL (= tCCD_S) on to the next:
    # 122-134 (bank group 0), 136-148, 150-162, 164-176; the last lands at 178
    # PREA at 177 (>= 7 + tRAS, 116 + tRTP)
    # SFM of head 0 (entries 0-7): 178 (after the last MVSB lands), busy until 186;
    # SFM of head 1 (entries 8-15): waits for the unit, 186 .. 194
    # SV: 16 MVGBs (one per bank: every bank its own probabilities) from the end of the
    # softmax, 194, bank groups in turn nBL apart: 194, 196, ..., 224; they land at 226
    # ACTAB at 225 (>= PREA 177 + tRP); 16 MACABs (AXPY, one per token) from 225 + tRCD_RD
    # = 244 to 334; accumulators ready at 340
    # 4 MVSBs (each head's 8 banks: two bank groups summed by their adder trees, the second
    # added) 340, 342, 344, 346, landed at 348; RDSB of head 0 at 348 (bank 0), of head 1 at
    # 349 (interleaved to pseudo-channel 1); the last completes at 349 + RL + nBL = 370
    # (the final PREA at 350 is done at 369)
    par = lower_attention(ATT, (2, 128, 16), (2, 8, 1))
    tl = time_stream(ATT, par.stream)
    ops = par.stream["op"]
    sfms = np.flatnonzero(ops == Op.SFM)
    assert [int(par.stream["src"][k]) for k in sfms] == [0, 128 // L]
    np.testing.assert_array_equal(tl.issue[sfms], [178, 178 + sfm])  # one softmax unit
    mvgb = np.flatnonzero(ops == Op.MVGB)
    np.testing.assert_array_equal(tl.issue[mvgb], 178 + 2 * sfm + bus * np.arange(16))
    macs = tl.issue[ops == Op.MACAB]
    assert (macs[0], macs[15], macs[16], macs[31]) == (26, 116, 244, 334)
    assert par.counts == {"WRGB": 4, "ACTAB": 2, "MACAB": 32, "MVSB": 16 + 4, "PREA": 2,
                          "SFM": 2, "MVGB": 16, "RDSB": 2}  # fmt: skip
    assert par.cycles == tl.cycles == 349 + t.RL + bus == 370
    # --- serial (cores (1, 8, 1)): two rounds of one head on banks 0-7 (bank groups 0, 1)
    # round 0: 2 WRGBs (bank groups 0, 1) at 0, 2, landed at 10; ACTAB 3; MACABs 22 .. 112;
    # 8 MVSBs 118-130, 132-144 (landed 146); PREA 145; SFM 146 .. 154; 8 MVGBs 154 .. 168
    # (landed 170); ACTAB 169; MACABs 188 .. 278; 2 MVSBs 284, 286; RDSB 288; PREA 289
    # round 1 (K and V of head 1 in row 1): WRGBs 292 (tCCD_L after the RDSB in bank group
    # 0), 294; ACTAB 308 (PREA 289 + tRP); MACABs 327 .. 417; 8 MVSBs 423-435, 437-449; PREA
    # 450; SFM 451 .. 459; MVGBs 459 .. 473; ACTAB 474; MACABs 493 .. 583; MVSBs 589, 591;
    # RDSB 593, completing at 593 + RL + nBL = 614
    ser = lower_attention(ATT, (2, 128, 16), (1, 8, 1))
    tl_s = time_stream(ATT, ser.stream)
    np.testing.assert_array_equal(tl_s.issue[ser.stream["op"] == Op.SFM], [146, 451])
    assert ser.cycles == 593 + t.RL + bus == 614
    # the parallel round saves the second head's QK^T + SV chain but for its softmax (and
    # the serial rounds' WRGB / row turnaround): 614 - 370 = 244 cycles
    assert ser.cycles - par.cycles == 244
    assert par.counts["MACAB"] * 2 == ser.counts["MACAB"]


# ----------------------------------------------------------------------------- split softmax


def test_sfm_stats_entry_values_and_timing() -> None:
    """SFM with SfmMode.STATS leaves the probabilities as NORMALISE does and writes the max
    and the sum of exp(x - max) into lanes 0, 1 of entry ``dst`` (the rest zero); the unit is
    busy one vector (one cycle) longer; an entry among the scores' is refused."""
    L = ATT.core.lanes
    rng = np.random.default_rng(3)
    x = rng.standard_normal(100).astype(np.float16)
    runs = {}
    for mode in SfmMode:
        st_ = AttAccState.for_backend(ATT)
        st_.buf[0:7] = np.pad(x, (0, 7 * L - 100)).reshape(7, L)
        st_.buf[9] = 7  # overwritten whole by STATS
        s = np.array([command(Op.SFM, bank=0, src=0, n=100, dst=9, mode=int(mode)),
                      command(Op.RDSB, bank=0, src=9)], COMMAND_DTYPE)  # fmt: skip
        execute(ATT, s, np.zeros((0, L), np.uint16), st_)
        runs[mode] = (st_, time_stream(ATT, s), time_stream_reference(ATT, s))
    norm, stats = runs[SfmMode.NORMALISE][0], runs[SfmMode.STATS][0]
    np.testing.assert_array_equal(norm.buf[:7], stats.buf[:7])
    f = x.astype(np.float32)
    e = np.exp(f - f.max())
    want = np.zeros(L, np.float16)
    want[:2] = np.array([f.max(), e.sum()], np.float32).astype(np.float16)
    np.testing.assert_array_equal(stats.buf[9], want)
    np.testing.assert_array_equal(stats.reads[0], want)
    assert (norm.buf[9] == 7).all()
    # SFM at 0 busy ceil(100 / 16) = 7 cycles (STATS: 8); the RDSB waits for it: issue 7 / 8
    for mode, extra in ((SfmMode.NORMALISE, 0), (SfmMode.STATS, 1)):
        _, fast, ref = runs[mode]
        np.testing.assert_array_equal(fast.issue, [0, 7 + extra])
        np.testing.assert_array_equal(ref.issue, fast.issue)
    bad = np.array([command(Op.SFM, bank=0, src=0, n=100, dst=6, mode=int(SfmMode.STATS))],
                   COMMAND_DTYPE)  # fmt: skip
    with pytest.raises(AttAccError, match=r"statistics entry 6 must be one of the 256 .*0 \.\. 6"):
        execute(ATT, bad, np.zeros((0, L), np.uint16), AttAccState.for_backend(ATT))


def test_token_shares() -> None:
    assert token_shares(310, 3) == [(0, 104), (104, 104), (208, 102)]
    assert token_shares(512, 4) == [(0, 128), (128, 128), (256, 128), (384, 128)]
    assert token_shares(5, 4) == [(0, 2), (2, 2), (4, 1)]  # the fourth group holds nothing


@pytest.mark.parametrize(
    ("sizes", "cores", "groups"),
    [((1, 256, 16), (1, 8, 1), 2), ((2, 256, 64), (1, 4, 4), 2), ((3, 310, 32), (2, 1, 2), 3),
     ((2, 512, 128), (1, 8, 4), 4), ((4, 128, 16), (2, 4, 1), 2), ((1, 1000, 64), (1, 1, 4), 4),
     ((5, 192, 33), (4, 2, 2), 3)],
)  # fmt: skip
def test_attention_split_over_groups_close_to_numpy(sizes: tuple, cores: tuple, groups: int):
    """Every head's tokens over 2-4 groups (shorter last shares, heads over cores, odd d_h):
    each group's softmax over its tokens with its max and sum read back, the host's combine
    (combine_partials) equals numpy's softmax attention within FP16's error; adding the
    partial outputs without the rescale is far off."""
    H, T, D = sizes
    rng = np.random.default_rng(T + groups)
    a = {
        "Q": (rng.standard_normal((H, D)) / 2).astype(np.float16),
        "K": (rng.standard_normal((H, T, D)) / 2).astype(np.float16),
        "V": rng.standard_normal((H, T, D)).astype(np.float16),
    }
    got = run_attention_split(ATT, sizes, cores, groups, a)["O"].astype(np.float64)
    ref = _attention_numpy(a)
    assert np.max(np.abs(got - ref)) < 0.01 * np.max(np.abs(ref))
    parts = [
        run_attention(ATT, (H, n, D), cores,
                      {"Q": a["Q"], "K": a["K"][:, t0 : t0 + n], "V": a["V"][:, t0 : t0 + n]},
                      partial=True)
        for t0, n in token_shares(T, groups)
    ]  # fmt: skip
    flat = np.mean([p["O"].astype(np.float64) for p in parts], axis=0)
    assert np.max(np.abs(flat - ref)) > 0.02 * np.max(np.abs(ref))
    # each group's own statistics: its max score and sum of exp(score - max)
    t0, n = token_shares(T, groups)[-1]
    s = np.einsum("hd,htd->ht", a["Q"].astype(np.float32), a["K"][:, t0:].astype(np.float32))
    np.testing.assert_allclose(parts[-1]["m"], s.max(1), rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(
        parts[-1]["l"], np.exp(s - s.max(1, keepdims=True)).sum(1), rtol=5e-3
    )


def test_combine_partials_by_hand() -> None:
    """Two groups, one head, d_h 1: O_1 = 1 with (m, l) = (0, 1), O_2 = 3 with (ln 3, 2):
    w = (e^-ln3 x 1, 1 x 2) = (1/3, 2), O = (1/3 + 6) / (7/3) = 19 / 7."""
    o = combine_partials([np.array([[1.0]]), np.array([[3.0]])], [np.array([0.0]),
                         np.array([np.log(3.0)])], [np.array([1.0]), np.array([2.0])])  # fmt: skip
    assert float(o[0, 0]) == pytest.approx(19 / 7, rel=1e-3)


def test_partial_attention_program() -> None:
    """A partial share's program: every SFM in STATS mode into head core j's statistics entry
    after the scores and results, one RDSB of it per head after the round; the same stream
    built command by command; refused when the statistics entries do not fit the buffer."""
    sizes, cores = (3, 64, 64), (2, 4, 4)
    k = lower_attention(ATT, sizes, cores, partial=True)
    full = lower_attention(ATT, sizes, cores)
    assert k.stream.tobytes() == lower_attention_reference(ATT, sizes, cores, True).stream.tobytes()
    sfm = k.stream[k.stream["op"] == Op.SFM]
    # 2 head cores of 4 tokens x 16 = 4 entries each: scores 0-7; results from 0 (the
    # probabilities fit the GEMV buffers), 1 per d_h core and head core: 0-7; statistics 8, 9
    assert sfm["mode"].tolist() == [int(SfmMode.STATS)] * 3
    assert sfm["dst"].tolist() == [8, 9, 8]  # rounds: heads 0, 2 | head 1
    rd = k.stream["src"][k.stream["op"] == Op.RDSB]
    assert (rd >= 8).sum() == 3 and k.counts["RDSB"] == full.counts["RDSB"] + 3
    assert {o: n for o, n in k.counts.items() if o != "RDSB"} == {
        o: n for o, n in full.counts.items() if o != "RDSB"
    }
    with pytest.raises(AttAccLoweringError, match=r"and the softmax statistics 1 more from entry "
                       r"256; the buffer has 256"):  # fmt: skip
        lower_attention(ATT, (1, 4096, 128), (1, 16, 4), partial=True)
    lower_attention(ATT, (1, 4096, 128), (1, 16, 4))  # unsplit, it fits


# ----------------------------------------------------------------------------- compiled timing
# time_stream (numba) and access_stream (vectorised) against their plain-Python references.

_TIMING = [f.name for f in dataclasses.fields(PimTiming) if f.name != "freq_ghz"]


@st.composite
def _timed_backend(draw):
    """The preset, or its timing with every parameter random (so every rule can dominate)."""
    if not draw(st.booleans()):
        return ATT
    assert ATT.timing is not None
    spread = st.one_of(st.integers(1, 60), st.integers(100, 300))
    vals = {f: draw(spread) for f in _TIMING}
    return dataclasses.replace(ATT, timing=dataclasses.replace(ATT.timing, **vals))


@st.composite
def _lowered(draw):
    kernel = draw(st.sampled_from([*KERNEL_SIZES, "attn"]))
    if kernel == "attn":
        c_t = draw(st.sampled_from([1, 2, 4]))
        sizes = (
            draw(st.integers(1, 4)),
            16 * c_t * draw(st.integers(1, 4)),
            draw(st.integers(1, 64)),
        )
        cores = (draw(st.sampled_from([1, 2, 4])), c_t, draw(st.sampled_from([1, 2, 4])))
        return lower_attention(ATT, sizes, cores, draw(st.booleans())).stream  # partial or not
    sizes, cores, _ = draw(_cases(kernel))
    return lower_group(ATT, kernel, sizes, cores).stream


@st.composite
def _accesses(draw):
    n = draw(st.integers(1, 300))
    g = ATT.group
    addr = np.stack(
        [draw(arrays(np.int64, n, elements=st.integers(0, hi - 1)))
         for hi in (g.banks, 4, g.columns_per_row)], axis=1,
    )  # fmt: skip
    return access_stream(ATT, addr, draw(st.sampled_from([Op.RD, Op.WR])))


@st.composite
def _mix(draw):
    """Any commands in any order (rows and columns in range, banks of the group)."""
    n = draw(st.integers(1, 300))
    out = np.zeros(n, dtype=COMMAND_DTYPE)
    out["op"] = draw(arrays(np.uint8, n, elements=st.sampled_from([int(o) for o in Op])))
    out["bank"] = draw(arrays(np.uint16, n, elements=st.integers(0, ATT.group.banks - 1)))
    out["n"] = draw(arrays(np.uint32, n, elements=st.integers(0, 600)))
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=_timed_backend(), stream=st.one_of(_lowered(), _accesses(), _mix()))
def test_compiled_timing_equals_reference(cfg, stream) -> None:
    """Issue cycles, end and counts of every lowering's streams (attention included),
    rearrangement accesses and random command mixes, with the preset's and random timing."""
    fast, ref = time_stream(cfg, stream), time_stream_reference(cfg, stream)
    np.testing.assert_array_equal(fast.issue, ref.issue)
    assert (fast.cycles, fast.counts) == (ref.cycles, ref.counts)


@settings(max_examples=60, deadline=None)
@given(
    addr=arrays(np.int64, st.tuples(st.integers(1, 400), st.just(3)), elements=st.integers(0, 40)),
    op=st.sampled_from([Op.RD, Op.WR]),
)
def test_access_stream_equals_reference(addr, op) -> None:
    """Duplicates, any order, several rows and banks: the same stream, byte for byte."""
    g = ATT.group
    addr = addr % np.array([g.banks, 7, g.columns_per_row])
    fast, ref = access_stream(ATT, addr, op), access_stream_reference(ATT, addr, op)
    assert fast.tobytes() == ref.tobytes()


def test_timing_refuses_bad_commands() -> None:
    s = np.array([command(Op.ACTAB, row=0), command(Op.RD, bank=70, row=0)], COMMAND_DTYPE)
    for timer in (time_stream, time_stream_reference):
        with pytest.raises(AttAccError, match=r"command 1 \(RD bank=70 row=0 col=0\): bank 70 >="):
            timer(ATT, s)
    s["op"][1], s["bank"][1] = 40, 0
    for timer in (time_stream, time_stream_reference):
        with pytest.raises(AttAccError, match=r"command 1 \(op 40\): unknown op 40"):
            timer(ATT, s)
    tl = time_stream(ATT, s[:0])
    assert (tl.cycles, tl.issue.shape, tl.counts) == (0, (0,), dict.fromkeys(Op.__members__, 0))


# ----------------------------------------------------------------------------- ATTN as a kernel


def test_attn_group_lowering_runs_attention() -> None:
    """The contract's registry runs ``attn`` (sets h, t, d) as lower_attention, and run_group
    on values is softmax(K q) V within FP16's error."""
    sizes, cores = (2, 256, 128), (1, 16, 4)
    prog = GROUP_LOWERINGS[DccKernel.ATTN](ATT, sizes, cores)
    assert prog.stream.tobytes() == lower_attention(ATT, sizes, cores).stream.tobytes()
    assert set(prog.inputs) == {"K", "V"} and prog.outputs == {} and prog.host_ops == 0
    rng = np.random.default_rng(5)
    a = {
        "Q": (rng.standard_normal((2, 128)) / 4).astype(np.float16),
        "K": (rng.standard_normal((2, 256, 128)) / 4).astype(np.float16),
        "V": rng.standard_normal((2, 256, 128)).astype(np.float16),
    }
    got = run_group(ATT, DccKernel.ATTN, sizes, cores, a)["O"].astype(np.float64)
    ref = _attention_numpy(a)
    assert np.max(np.abs(got - ref)) < 0.01 * np.max(np.abs(ref))


def test_attn_default_draft_and_share_checks() -> None:
    """DCC V's default for attention: heads over the groups, tokens over the 16 bank groups,
    d_h over the 4 banks. The share check refuses exactly what the lowering refuses."""
    from pimphony.compiler.dcc.attacc_lowering import SHARE_CHECKS

    d = default_draft(ATT, DccKernel.ATTN, (32, 512, 128))
    assert [(p.groups, p.cores, p.dim) for p in d] == [(32, 1, "K0"), (1, 16, "K1"), (1, 4, "K2")]
    check = SHARE_CHECKS[DccKernel.ATTN]
    for sizes, cores in [((1, 512, 128), (1, 16, 4)), ((1, 100, 64), (1, 4, 4)),
                         ((2, 64, 64), (2, 4, 4)), ((1, 4096, 128), (1, 8, 8)),
                         ((1, 8192, 64), (1, 16, 4)), ((1, 4096, 128), (1, 16, 4)),
                         ((2, 4096, 128), (2, 16, 2)), ((16, 512, 64), (16, 2, 2)),
                         ((8, 512, 128), (8, 2, 4))]:  # fmt: skip
        try:
            lower_attention(ATT, sizes, cores)
            refused = ""
        except AttAccLoweringError as exc:
            refused = str(exc)
        if refused:
            with pytest.raises(AttAccLoweringError, match=re.escape(refused)):
                check(ATT, sizes, cores)
        else:
            check(ATT, sizes, cores)
