"""HBM-PIM back end (models/hbm_pim.py) and its GEMV lowering (compiler/pim_gemv.py):
cycles by hand, command counts in closed form, values against numpy, specific errors."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from pimphony.compiler.dcc.hbm_pim_lowering import GROUP_LOWERINGS
from pimphony.compiler.dcc.schedule import DccKernel
from pimphony.compiler.pim_gemv import (
    PIM_ROWS,
    Emitter,
    PimGemvError,
    gemv_layout,
    lower_gemv,
    place_weights,
    read_outputs,
)
from pimphony.compiler.rearrange import access_stream
from pimphony.models.backends import PimDtype, PimTiming, load_backend
from pimphony.models.hbm_pim import (
    AB_ENTRY_BANKS,
    AB_ENTRY_ROW,
    COMMAND_DTYPE,
    MODE_COLUMN,
    SB_ENTRY_BANKS,
    SB_ENTRY_ROW,
    Bank,
    HbmPimError,
    Instr,
    Mode,
    Op,
    PimState,
    decode_instr,
    encode_instr,
    execute,
    modes,
    time_stream,
)
from pimphony.models.reference import modes_reference

from tests.helpers import on_reference_engine

HBM = load_backend("hbm-pim")
time_stream_reference = on_reference_engine(time_stream)


def _stream(*cmds: tuple) -> np.ndarray:
    out = np.zeros(len(cmds), dtype=COMMAND_DTYPE)
    for k, c in enumerate(cmds):
        op, bank, row, col = (tuple(c) + (0, 0, 0))[:4]
        out[k] = (int(op), bank, row, col, -1)
    return out


def test_single_bank_rules_by_hand() -> None:
    t = HBM.timing
    assert t is not None
    # SB mode: banks 0, 1 share bank group 0; bank 4 is in bank group 1.
    s = _stream((Op.ACT, 0), (Op.ACT, 1), (Op.ACT, 4), (Op.RD, 0), (Op.RD, 1), (Op.RD, 4),
                (Op.PRE, 0), (Op.ACT, 0, 1))  # fmt: skip
    issue = time_stream(HBM, s).issue.tolist()
    a0 = 0
    a1 = a0 + t.tRRD_L  # same bank group
    a4 = a1 + t.tRRD_S  # other bank group
    r0 = max(a4 + 1, a0 + t.tRCD_RD)
    r1 = max(r0 + t.tCCD_L, a1 + t.tRCD_RD)
    r4 = max(r1 + t.tCCD_S, a4 + t.tRCD_RD)
    p0 = max(r4 + 1, a0 + t.tRAS, r0 + t.tRTP)
    a0b = max(p0 + t.tRP, a0 + t.tRC)
    assert issue == [a0, a1, a4, r0, r1, r4, p0, a0b]


def test_four_activate_window() -> None:
    t = HBM.timing
    assert t is not None
    # banks 0, 4, 8, 12 are in four bank groups: tRRD_S apart; the fifth waits tFAW
    s = _stream(*[(Op.ACT, b) for b in (0, 4, 8, 12, 1)])
    issue = time_stream(HBM, s).issue.tolist()
    assert issue[:4] == [0, t.tRRD_S, 2 * t.tRRD_S, 3 * t.tRRD_S]
    assert issue[4] == max(3 * t.tRRD_S + t.tRRD_S, 0 + t.tFAW)


def test_small_gemv_cycles_by_hand() -> None:
    """64 x 128 on one pseudo-channel: one output tile (8 units x 8 outputs), one input tile
    (8 GRF_A x 16 lanes), 64 MAC reads over two 32-column rows."""
    t = HBM.timing
    assert t is not None
    k = lower_gemv(HBM, 64, 128, channels=1)
    tl = time_stream(HBM, k.stream)
    wr_visit = t.tRCD_WR + t.write_to_precharge  # ACT .. WR .. PRE of one written row
    assert wr_visit >= t.tRAS
    # mode entry: four single-bank visits back to back (different banks: no tRP between)
    pre_entry = 3 * (wr_visit + 1) + wr_visit
    # register row: 1 CRF + 1 control + 8 GRF_A writes tCCD_L apart
    act_reg = pre_entry + t.tRP
    last_wr = act_reg + t.tRCD_WR + (1 + 1 + 8 - 1) * t.tCCD_L
    pre_reg = last_wr + t.write_to_precharge
    # two weight rows of 32 MAC reads; 5 dummy reads on the second
    act_w0 = pre_reg + t.tRP
    last_rd0 = act_w0 + t.tRCD_RD + 31 * t.tCCD_L
    pre_w0 = max(act_w0 + t.tRAS, last_rd0 + t.tRTP)
    act_w1 = pre_w0 + t.tRP
    last_rd1 = act_w1 + t.tRCD_RD + (31 + 5) * t.tCCD_L
    pre_w1 = max(act_w1 + t.tRAS, last_rd1 + t.tRTP)
    # result row: 8 MOV writes (read-to-write turnaround already covered by tRP + tRCD_WR)
    act_res = pre_w1 + t.tRP
    assert act_res + t.tRCD_WR >= last_rd1 + t.read_to_write
    last_mov = act_res + t.tRCD_WR + 7 * t.tCCD_L
    # register row: PIM off; then the SB-exit row: two writes
    act_off = last_mov + t.write_to_precharge + t.tRP
    wr_off = act_off + t.tRCD_WR
    act_exit = wr_off + t.write_to_precharge + t.tRP
    last = act_exit + t.tRCD_WR + t.tCCD_L
    assert tl.cycles == last + t.WL + t.burst_cycles == 733
    assert tl.counts == {"ACT": 10, "PRE": 9, "RD": 64 + 5, "WR": 4 + 1 + 1 + 8 + 8 + 1 + 2}


@pytest.mark.parametrize(
    ("dout", "din", "batch", "channels"),
    [(64, 128, 1, 1), (200, 300, 2, 2), (512, 1000, 1, 4), (64, 4096, 3, 1)],
)
def test_command_counts_closed_form(dout: int, din: int, batch: int, channels: int) -> None:
    c = HBM.core
    k = lower_gemv(HBM, dout, din, batch=batch, channels=channels)
    lay = k.layout
    J = -(-dout // (channels * 8 * c.output_regs))
    T = -(-din // (c.input_regs * c.lanes))
    assert (lay.out_tiles, lay.in_tiles) == (J, T)
    passes = J * batch
    tile = c.input_regs * c.output_regs  # 64 MAC reads per input tile = 2 rows of 32
    crf_writes = -(-len(k.program) // (c.lanes // 2))
    counts = time_stream(HBM, k.stream).counts
    assert counts["RD"] == passes * (T * tile + c.pipeline_drain)
    assert counts["WR"] == 4 + crf_writes + passes * (2 + T * c.input_regs + c.output_regs) + 2
    # per pass: a register-row visit per input tile but the first, two weight rows per tile,
    # the result row, the register row again; plus entry (4), first register row, exit row
    assert counts["ACT"] == 4 + 1 + passes * (3 * T + 1) + 1
    assert counts["PRE"] == counts["ACT"] - 1


@pytest.mark.parametrize(
    ("dout", "din", "batch", "channels"),
    [(64, 128, 1, 1), (200, 300, 2, 2), (1000, 513, 1, 16), (48, 4096, 2, 1)],
)
def test_gemv_values_equal_numpy(dout: int, din: int, batch: int, channels: int) -> None:
    rng = np.random.default_rng(dout * din)
    # small integers: every FP16 product and partial sum is exact, so any mapping error shows
    w = rng.integers(-3, 4, (dout, din)).astype(np.float16)
    x = rng.integers(-3, 4, (batch, din)).astype(np.float16)
    k = lower_gemv(HBM, dout, din, x, batch=batch, channels=channels)
    st = execute(HBM, k.stream, k.payload, place_weights(HBM, k.layout, w))
    y = read_outputs(k.layout, st)
    np.testing.assert_array_equal(y.astype(np.float64), x.astype(np.float64) @ w.T)
    assert st.macs == k.layout.out_tiles * batch * k.layout.in_tiles * 64


def test_gemv_random_fp16_close_to_numpy() -> None:
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((256, 512)) / 16).astype(np.float16)
    x = rng.standard_normal((1, 512)).astype(np.float16)
    k = lower_gemv(HBM, 256, 512, x, channels=2)
    y = read_outputs(k.layout, execute(HBM, k.stream, k.payload, place_weights(HBM, k.layout, w)))
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    # FP16 accumulation of 32 lane-wise terms then a 16-way adder tree: error well under 1%
    assert np.max(np.abs(y - ref)) < 0.01 * np.max(np.abs(ref))


def test_dummy_reads_are_needed() -> None:
    w = np.arange(64 * 128).reshape(64, 128).astype(np.float16) % 7
    x = np.ones((1, 128), np.float16)
    # a lowering that forgets the drain (no NOP, no dummy reads) on the real unit (drain 5)
    eager = dataclasses.replace(HBM, core=dataclasses.replace(HBM.core, pipeline_drain=0))
    k = lower_gemv(eager, 64, 128, x, channels=1)
    with pytest.raises(
        HbmPimError, match=r"MOV reads GRF_B 0 trigger.*pipeline_drain = 5 \(issue dummy"
    ):
        execute(HBM, k.stream, k.payload, place_weights(HBM, k.layout, w))
    # one dummy read fewer: the NOP swallows the first MOV, the last output is never moved
    k = lower_gemv(HBM, 64, 128, x, channels=1)
    rd = np.flatnonzero(k.stream["op"] == Op.RD)
    st = execute(HBM, np.delete(k.stream, rd[-1]), k.payload, place_weights(HBM, k.layout, w))
    y = read_outputs(k.layout, st)[0].astype(np.float64)
    assert not np.array_equal(y, w.astype(np.float64).sum(axis=1))


def test_column_command_to_a_closed_row() -> None:
    k = lower_gemv(HBM, 64, 128, channels=1)
    acts = np.flatnonzero(k.stream["op"] == Op.ACT)
    bad = np.delete(k.stream, acts[5])  # the first weight row's ACT (after 4 entry + reg)
    with pytest.raises(HbmPimError, match=r"RD bank=0 row=0 col=0\): row 0 is not open"):
        execute(HBM, bad, k.payload, PimState.for_backend(HBM, 1))


def test_crf_words_round_trip() -> None:
    word = encode_instr(Instr.MAC, Bank.GRF_B, Bank.ODD, Bank.GRF_A, aam=True)
    d = decode_instr(word)
    assert (d.op, d.dst, d.src0, d.src1, d.aam) == (Instr.MAC, Bank.GRF_B, Bank.ODD,
                                                    Bank.GRF_A, True)  # fmt: skip
    j = decode_instr(encode_instr(Instr.JUMP, imm0=1, imm1=2047))
    assert (j.op, j.imm0, j.imm1) == (Instr.JUMP, 1, 2047)
    with pytest.raises(HbmPimError, match="imm1 = 2048"):
        encode_instr(Instr.JUMP, imm0=1, imm1=2048)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dout": 0, "din": 128}, "dout = 0: must be a positive integer"),
        ({"dout": 64, "din": 128, "channels": 81}, "channels = 81: the back end 'hbm-pim' has 80"),
        ({"dout": 1 << 16, "din": 1 << 16, "channels": 1}, f"{PIM_ROWS:,} rows trigger PIM"),
        ({"dout": 64, "din": 200_000, "channels": 1}, "the CRF holds 32"),
    ],
)
def test_shapes_that_do_not_fit(kwargs: dict, message: str) -> None:
    with pytest.raises(PimGemvError, match=message):
        lower_gemv(HBM, **kwargs)


def test_backends_without_a_command_model_are_refused() -> None:
    with pytest.raises(PimGemvError, match="'attacc' is of kind 'attacc', not an HBM-PIM"):
        gemv_layout(load_backend("attacc"), 64, 64)
    no_drain = dataclasses.replace(HBM, core=dataclasses.replace(HBM.core, input_regs=0))
    with pytest.raises(PimGemvError, match="input_regs = 0"):
        gemv_layout(no_drain, 64, 64)


def test_wrong_input_shape() -> None:
    with pytest.raises(PimGemvError, match=r"inputs of shape \(1, 127\)"):
        lower_gemv(HBM, 64, 128, np.zeros(127, np.float16), channels=1)
    with pytest.raises(PimGemvError, match=r"inputs of shape \(\)"):
        lower_gemv(HBM, 64, 128, np.float16(1.0), channels=1)
    with pytest.raises(
        PimGemvError, match=r"inputs of shape \(2, 128\): expected \(batch, din\) = \(1, 128\)"
    ):
        lower_gemv(HBM, 64, 128, np.zeros((2, 128), np.float16), channels=1)


def _copy_kernel(exit_early: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """FILL GRF_B[0..7] from row 0 of each unit's first bank, MOV them to row 1."""
    from pimphony.models.hbm_pim import (
        AB_ENTRY_BANKS,
        AB_ENTRY_ROW,
        CRF_COLUMNS,
        CTRL_COLUMN,
        MODE_COLUMN,
        SB_ENTRY_ROW,
        instr_payload,
    )

    prog = [
        encode_instr(Instr.FILL, Bank.GRF_B, Bank.EVEN, aam=True),
        encode_instr(Instr.JUMP, imm0=1, imm1=7),
        encode_instr(Instr.MOV, Bank.EVEN, Bank.GRF_B, aam=True),
        encode_instr(Instr.JUMP, imm0=1, imm1=7),
        encode_instr(Instr.EXIT),
    ]
    crf = instr_payload(prog, 16)
    on = np.zeros((1, 16), np.uint16)
    on[0, 0] = 1
    payload = np.concatenate([np.zeros((1, 16), np.uint16), on, crf])
    reg = HBM.group.register_row
    cmds: list[tuple] = []
    for bg, b in AB_ENTRY_BANKS:
        cmds += [(Op.ACT, bg * 4 + b, AB_ENTRY_ROW), (Op.WR, bg * 4 + b, AB_ENTRY_ROW,
                 MODE_COLUMN, 0), (Op.PRE, bg * 4 + b)]  # fmt: skip
    cmds += [(Op.ACT, 0, reg), (Op.WR, 0, reg, CRF_COLUMNS.start, 2),
             (Op.WR, 0, reg, CTRL_COLUMN, 1), (Op.PRE, 0), (Op.ACT, 0, 0)]  # fmt: skip
    cmds += [(Op.RD, 0, 0, c) for c in range(8)] + [(Op.PRE, 0), (Op.ACT, 0, 1)]
    cmds += [(Op.WR, 0, 1, c, 0) for c in range(8)]
    if exit_early:
        cmds += [(Op.PRE, 0), (Op.ACT, 0, SB_ENTRY_ROW), (Op.WR, 0, SB_ENTRY_ROW, MODE_COLUMN, 0)]
    out = np.zeros(len(cmds), dtype=COMMAND_DTYPE)
    for k, c in enumerate(cmds):
        op, bank, row, col, data = (tuple(c) + (0, 0, 0, -1))[:5]
        out[k] = (int(op), bank, row, col, data)
    return out, payload


def test_fill_and_mov_copy_a_row_in_every_unit() -> None:
    stream, payload = _copy_kernel()
    st = PimState.for_backend(HBM, 2)
    rng = np.random.default_rng(3)
    src = rng.standard_normal((2, 16, 32, 16)).astype(np.float16)
    st.row(0)[...] = src
    execute(HBM, stream, payload, st)
    np.testing.assert_array_equal(st.row(1)[:, 0::2, :8], src[:, 0::2, :8])  # first banks
    assert not st.row(1)[:, 1::2].any() and not st.row(1)[:, :, 8:].any()
    np.testing.assert_array_equal(st.grf_b, src[:, 0::2, :8])
    assert st.macs == 0 and st.triggers == 16


def test_mode_exit_while_pim_is_on() -> None:
    stream, payload = _copy_kernel(exit_early=True)
    with pytest.raises(HbmPimError, match="mode-exit write while PIM is on"):
        execute(HBM, stream, payload, PimState.for_backend(HBM, 1))


@pytest.mark.parametrize(("banks", "regs"), [(1, 8), (2, 4), (1, 4)])
def test_other_core_shapes_run_exactly(banks: int, regs: int) -> None:
    """A unit per bank (LPDDR5X-PIM style, seed 004 2.2) or fewer registers: the same model
    and lowering, from preset data only."""
    core = dataclasses.replace(HBM.core, banks=banks, input_regs=regs, output_regs=regs)
    cfg = dataclasses.replace(HBM, core=core)
    rng = np.random.default_rng(banks * 10 + regs)
    w = rng.integers(-3, 4, (96, 200)).astype(np.float16)
    x = rng.integers(-3, 4, (2, 200)).astype(np.float16)
    k = lower_gemv(cfg, 96, 200, x, batch=2, channels=2)
    lay = k.layout
    assert lay.units == 16 // banks and lay.inputs_per_tile == regs * 16
    st = execute(cfg, k.stream, k.payload, place_weights(cfg, lay, w))
    np.testing.assert_array_equal(
        read_outputs(lay, st).astype(np.float64), x.astype(np.float64) @ w.T
    )
    counts = time_stream(cfg, k.stream).counts
    passes = lay.out_tiles * 2
    assert counts["RD"] == passes * (lay.in_tiles * regs * regs + 5)


def test_bf16_values_are_refused() -> None:
    cfg = dataclasses.replace(HBM, core=dataclasses.replace(HBM.core, dtype=PimDtype.BF16))
    k = lower_gemv(cfg, 64, 128, channels=1)
    assert time_stream(cfg, k.stream).cycles == 733
    with pytest.raises(HbmPimError, match="core.dtype = 'bf16': values are computed in FP16"):
        execute(cfg, k.stream, k.payload, PimState.for_backend(cfg, 1))


# ----------------------------------------------------------------------------- compiled timing
# time_stream / modes (numba) against their plain-Python references, on the streams every
# lowering emits, on random single-bank accesses and on random command mixes with mode
# changes, with the presets' timing and with random timing (every parameter must reach its rule).

_BACKENDS = [load_backend(n) for n in ("hbm-pim", "hbm-pim-hbm3", "lpddr5x-pim")]
_TIMING = [f.name for f in dataclasses.fields(PimTiming) if f.name != "freq_ghz"]
#: Small sizes per dimension set of each lowered kernel (streams the reference times quickly).
_SIZES = {
    DccKernel.GEMV: (200, 1200),
    DccKernel.BATCHED_GEMV: (3, 100, 600),
    DccKernel.QK: (3, 100, 200),
    DccKernel.SV: (3, 100, 200),
    DccKernel.RED: (100, 2000),
    DccKernel.VA: (20000,),
    DccKernel.RELU: (20000,),
    DccKernel.BATCHED_RED: (3, 40, 2000),
    DccKernel.BATCHED_VA: (3, 8000),
    DccKernel.BATCHED_RELU: (3, 8000),
}


@st.composite
def _backend(draw):
    cfg = draw(st.sampled_from(_BACKENDS))
    if draw(st.booleans()):
        assert cfg.timing is not None
        spread = st.one_of(st.integers(1, 60), st.integers(100, 300))  # some rules dominate
        vals = {f: draw(spread) for f in _TIMING}
        cfg = dataclasses.replace(cfg, timing=dataclasses.replace(cfg.timing, **vals))
    return cfg


@st.composite
def _lowered_stream(draw, cfg):
    kernel = draw(st.sampled_from(sorted(GROUP_LOWERINGS)))
    sizes = tuple(draw(st.integers(1, m)) for m in _SIZES[kernel])
    cores = [1] * len(sizes)
    for _ in range(draw(st.integers(0, 3))):
        cores[draw(st.integers(0, len(sizes) - 1))] *= 2
    assume(math.prod(cores) <= cfg.cores_per_group)
    return GROUP_LOWERINGS[kernel](cfg, sizes, tuple(cores)).stream


@st.composite
def _gemv_stream(draw, cfg):
    dout, din = draw(st.integers(1, 600)), draw(st.integers(1, 600))
    batch, channels = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    return lower_gemv(cfg, dout, din, batch=batch, channels=channels).stream


@st.composite
def _access_stream(draw, cfg):
    n = draw(st.integers(1, 300))
    g = cfg.group
    addr = np.stack([draw(arrays(np.int64, n, elements=st.integers(0, hi - 1)))
                     for hi in (g.banks, 4, g.columns_per_row)], axis=1)  # fmt: skip
    return access_stream(cfg, addr, draw(st.sampled_from([Op.RD, Op.WR])))


@st.composite
def _command_mix(draw, cfg):
    """Any commands, addresses drawn so that mode entry / exit writes (complete or partial,
    repeated banks, several entries) occur often."""
    n = draw(st.integers(1, 400))
    per_bg = cfg.group.banks // cfg.group.bank_groups
    mode_banks = sorted({bg * per_bg + b for bg, b in AB_ENTRY_BANKS + SB_ENTRY_BANKS})
    bank = st.one_of(st.sampled_from(mode_banks), st.integers(0, cfg.group.banks - 1))
    rows = [0, 1, AB_ENTRY_ROW, SB_ENTRY_ROW, cfg.group.register_row]
    out = np.zeros(n, dtype=COMMAND_DTYPE)
    out["op"] = draw(arrays(np.uint8, n, elements=st.sampled_from([int(o) for o in Op])))
    out["bank"] = draw(arrays(np.uint16, n, elements=bank))
    out["row"] = draw(arrays(np.uint32, n, elements=st.sampled_from(rows)))
    out["col"] = draw(arrays(np.uint16, n, elements=st.sampled_from([0, MODE_COLUMN])))
    return out


def _same_timing(cfg, stream) -> None:
    np.testing.assert_array_equal(modes(cfg, stream), modes_reference(cfg, stream))
    fast, ref = time_stream(cfg, stream), time_stream_reference(cfg, stream)
    np.testing.assert_array_equal(fast.issue, ref.issue)
    assert (fast.cycles, fast.counts) == (ref.cycles, ref.counts)


@st.composite
def _stream_of(draw, kinds):
    cfg = draw(_backend())
    return cfg, draw(draw(st.sampled_from(kinds))(cfg))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_stream_of([_lowered_stream, _gemv_stream]))
def test_compiled_timing_equals_reference_on_lowerings(case) -> None:
    """Every group lowering's stream and lower_gemv's (batch, channels)."""
    _same_timing(*case)


@settings(max_examples=150, deadline=None)
@given(_stream_of([_access_stream, _command_mix]))
def test_compiled_timing_equals_reference_on_accesses_and_mixes(case) -> None:
    """Rearrangement accesses (single-bank, many bank groups: tRRD_S/L, tFAW, tCCD_S/L) and
    random command mixes across mode changes."""
    _same_timing(*case)


def test_compiled_timing_mode_changes_and_empty() -> None:
    """Entry needs all four entry banks (a repeated bank does not count twice), afresh after
    an exit; modes change after the completing write; an empty stream takes no time."""
    per_bg = HBM.group.banks // HBM.group.bank_groups
    e = [bg * per_bg + b for bg, b in AB_ENTRY_BANKS]
    x = [bg * per_bg + b for bg, b in SB_ENTRY_BANKS]
    enter = [(Op.WR, b, AB_ENTRY_ROW, MODE_COLUMN) for b in (e[0], e[0], e[1], e[2], e[3])]
    leave = [(Op.WR, b, SB_ENTRY_ROW, MODE_COLUMN) for b in x]
    s = _stream(*enter, *leave, (Op.RD, 0), *enter[1:4], (Op.RD, 0), enter[4], (Op.RD, 0))
    sb, ab = Mode.SB, Mode.AB
    want = [sb] * 5 + [ab] * 2 + [sb] * 5 + [sb, ab]
    assert modes(HBM, s).tolist() == modes_reference(HBM, s).tolist() == want
    # the first all-bank ACT after single-bank ones spaces tRRD_L (AB modes: always "same")
    slow = dataclasses.replace(HBM.timing, tRC=1, tRRD_L=100, tRRD_S=1)
    cfg = dataclasses.replace(HBM, timing=slow)
    s = _stream((Op.ACT, 4), *enter[1:], (Op.ACT, 0))
    assert time_stream(cfg, s).issue[-1] == time_stream_reference(cfg, s).issue[-1] == 100
    tl = time_stream(HBM, s[:0])
    assert (tl.cycles, tl.issue.shape, tl.counts) == (0, (0,), dict.fromkeys(Op.__members__, 0))


def test_bank_outside_the_group_is_refused() -> None:
    with pytest.raises(HbmPimError, match=r"command 1 \(RD bank=16 row=0 col=0\): bank 16 >= "):
        time_stream(HBM, _stream((Op.ACT, 0), (Op.RD, 16)))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([Op.RD, Op.WR]), st.integers(0, 15), st.integers(0, 3),
                          st.integers(0, 31)), max_size=40),
       st.integers(0, 40), st.booleans())  # fmt: skip
def test_emitter_columns_equal_one_by_one(cmds, cut: int, opened: bool) -> None:
    """Emitter.columns (vectorised row switches) == Emitter.column per command, after single
    commands and with or without a row already open."""
    one, many = Emitter(), Emitter()
    for em in (one, many):
        em.cmd(Op.ACT, 3, 9)
        em.open = 9 if opened else -1
    for op, bank, row, col in cmds:
        one.column(op, bank, row, col, 7 if op is Op.WR else -1)
    head, tail = cmds[:cut], cmds[cut:]
    for part in (head, tail):
        if part:
            op, bank, row, col = (np.array([int(c[k]) for c in part]) for k in range(4))
            many.columns(op, bank, row, col, np.where(op == int(Op.WR), 7, -1))
    np.testing.assert_array_equal(many.array(), one.array())
    assert many.open == one.open


@pytest.mark.parametrize(
    ("kernel", "sizes", "cores", "cycles"),
    [
        (DccKernel.GEMV, (64, 1024), (4, 2), 3_807),
        (DccKernel.BATCHED_GEMV, (4, 64, 1024), (2, 4, 1), 13_903),
        (DccKernel.QK, (8, 512, 128), (1, 8, 1), 32_107),
        (DccKernel.SV, (8, 128, 512), (8, 1, 1), 28_783),
        (DccKernel.RED, (64, 2048), (1, 8), 6_101),
        (DccKernel.VA, (16_384,), (1,), 20_965),
        (DccKernel.RELU, (16_384,), (8,), 2_009),
    ],
)  # fmt: skip
def test_compiled_timing_on_the_documented_shares(kernel, sizes, cores, cycles) -> None:
    """The shares of docs/dcc.md's split table (thousands of commands each): compiled ==
    reference, and the documented cycles."""
    p = GROUP_LOWERINGS[kernel](HBM, sizes, cores)
    _same_timing(HBM, p.stream)
    assert p.cycles == cycles
