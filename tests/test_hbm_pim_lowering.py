"""HBM-PIM group lowerings of DCC's kernels (compiler/dcc/hbm_pim_lowering.py): values against
numpy over shapes and core splits, a VA cycle count by hand, closed-form counts, refusals."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pimphony.compiler.dcc.hbm_pim_lowering import GROUP_LOWERINGS, HbmPimLoweringError, run_group
from pimphony.compiler.dcc.lowering import GroupProgram
from pimphony.compiler.dcc.schedule import DccKernel
from pimphony.compiler.pim_gemv import PIM_ROWS, lower_gemv
from pimphony.models.backends import load_backend
from pimphony.models.hbm_pim import (
    Bank,
    HbmPimError,
    Instr,
    PimState,
    decode_instr,
    encode_instr,
    time_stream,
)

HBM = load_backend("hbm-pim")
U, L, A, R, D = 8, 16, 8, 8, 5  # units per pseudo-channel, lanes, GRF_A, GRF_B, drain


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _ints(rng: np.random.Generator, *shape: int) -> np.ndarray:
    # small integers: every FP16 product and sum is exact, so any mapping error shows
    return rng.integers(-3, 4, shape).astype(np.float16)


def _cores(draw, sets: int) -> tuple[int, ...]:
    cores = [1] * sets
    for k in range(sets):
        cores[k] = draw(st.integers(1, U // math.prod(cores)))
    return tuple(draw(st.permutations(cores)))


@st.composite
def _case(draw, *highs: int):
    """(sizes, cores, seed) of a share: ``sizes[k]`` in ``1..highs[k]``, cores over U units."""
    sizes = tuple(draw(st.integers(1, h)) for h in highs)
    return sizes, _cores(draw, len(highs)), draw(st.integers(0, 2**32 - 1))


FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(_case(40, 300))
def test_gemv_equals_numpy(case) -> None:
    sizes, cores, seed = case
    rng = np.random.default_rng(seed)
    w, x = _ints(rng, *sizes), _ints(rng, sizes[1])
    # garbage: every row the stream touches starts random, so `inputs` must list all it needs
    y = run_group(HBM, DccKernel.GEMV, sizes, cores, {"W": w, "x": x}, garbage=rng)["y"]
    np.testing.assert_array_equal(y.astype(np.float64), w.astype(np.float64) @ x)


@FAST
@given(_case(4, 24, 200))
def test_batched_gemv_equals_numpy(case) -> None:
    sizes, cores, seed = case
    rng = np.random.default_rng(seed)
    n, o, i = sizes
    w, x = _ints(rng, o, i), _ints(rng, n, i)
    y = run_group(HBM, DccKernel.BATCHED_GEMV, sizes, cores, {"W": w, "X": x}, garbage=rng)["Y"]
    np.testing.assert_array_equal(y.astype(np.float64), x.astype(np.float64) @ w.T)


@FAST
@given(_case(40, 300))
def test_red_equals_numpy(case) -> None:
    _check_red(DccKernel.RED, case)


def _check_red(kernel: DccKernel, case) -> None:
    """``kernel`` (RED or BATCHED_RED) sums ``A`` over its last axis, as numpy does."""
    sizes, cores, seed = case
    rng = np.random.default_rng(seed)
    a = _ints(rng, *sizes)
    r = run_group(HBM, kernel, sizes, cores, {"A": a}, garbage=rng)["r"]
    np.testing.assert_array_equal(r.astype(np.float64), a.astype(np.float64).sum(axis=-1))


@FAST
@given(_case(3000))
def test_va_and_relu_equal_numpy(case) -> None:
    _check_va_relu(DccKernel.VA, DccKernel.RELU, case)


def _check_va_relu(va: DccKernel, relu: DccKernel, case) -> None:
    """``va`` adds as numpy's one FP16 add does; ``relu`` clamps as numpy does."""
    sizes, cores, seed = case
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal(sizes) * 4).astype(np.float16), _ints(rng, *sizes)
    c = run_group(HBM, va, sizes, cores, {"A": a, "B": b}, garbage=rng)["C"]
    np.testing.assert_array_equal(c, a + b)
    y = run_group(HBM, relu, sizes, cores, {"X": a}, garbage=rng)["Y"]
    np.testing.assert_array_equal(y, np.maximum(a, 0))
    assert not np.signbit(y).any()  # the ReLU flag zeroes the sign bit, -0.0 included


def test_va_cycles_by_hand() -> None:
    """VA of 100 elements over 8 units: 13 per unit, one vector, one round of 8 vectors
    (A at columns 0-7, B 8-15, C 16-23 of row 0). Program: FILL, JUMP, ADD, JUMP, NOP 5, MOV,
    JUMP, EXIT = 8 instructions, one CRF write."""
    t = HBM.timing
    assert t is not None
    p = GROUP_LOWERINGS[DccKernel.VA](HBM, (100,), (8,))
    wr_visit = t.tRCD_WR + t.write_to_precharge  # ACT .. WR .. PRE of one written row
    pre_entry = 3 * (wr_visit + 1) + wr_visit  # four entry banks back to back
    act_reg = pre_entry + t.tRP
    wr_on = act_reg + t.tRCD_WR + t.tCCD_L  # CRF write, then the control word (PIM on)
    act_data = wr_on + t.write_to_precharge + t.tRP
    fill0 = max(act_data + t.tRCD_RD, wr_on + t.write_to_read)
    last_rd = fill0 + (8 + 8 + D - 1) * t.tCCD_L  # 8 FILL, 8 ADD, 5 dummy reads
    mov0 = max(last_rd + t.tCCD_L, last_rd + t.read_to_write)
    last_mov = mov0 + 7 * t.tCCD_L
    act_off = last_mov + t.write_to_precharge + t.tRP
    wr_off = act_off + t.tRCD_WR  # control word: PIM off
    act_exit = wr_off + t.write_to_precharge + t.tRP
    last = act_exit + t.tRCD_WR + t.tCCD_L
    assert p.cycles == last + t.WL + t.burst_cycles == 466
    assert time_stream(HBM, p.stream).cycles == p.cycles
    assert p.counts == {"ACT": 8, "PRE": 7, "RD": 21, "WR": 17} and p.host_ops == 0


@pytest.mark.parametrize(("n", "c"), [(100, 8), (1000, 3), (16 * 8 * 5, 1), (40_000, 8)])
def test_va_relu_counts_closed_form(n: int, c: int) -> None:
    share = -(-n // c)
    rounds = _ceil(_ceil(share, L), R)
    data_rows = {DccKernel.VA: -(-rounds * 3 * R // 32), DccKernel.RELU: -(-rounds * 2 * R // 32)}
    for kernel, reads, instrs in ((DccKernel.VA, 2 * R + D, 7), (DccKernel.RELU, R, 4)):
        p = GROUP_LOWERINGS[kernel](HBM, (n,), (c,))
        crf = -(-(instrs + (rounds > 1) + 1) // 8)  # the body, the round loop, EXIT
        assert p.counts["RD"] == rounds * reads
        assert p.counts["WR"] == 4 + crf + 2 + rounds * R + 2
        assert p.counts["ACT"] == 4 + 1 + data_rows[kernel] + 1 + 1
        assert p.counts["PRE"] == p.counts["ACT"] - 1


@pytest.mark.parametrize(("sizes", "cores"), [((20, 100), (8, 1)), ((30, 70), (2, 4)),
                                              ((9, 16), (1, 1)), ((5, 600), (1, 8))])  # fmt: skip
def test_red_counts_closed_form(sizes: tuple[int, int], cores: tuple[int, int]) -> None:
    m, n = sizes
    msh, nsh = -(-m // cores[0]), -(-n // cores[1])
    f = _fold(msh, _ceil(nsh, L))
    rounds, k = _ceil(msh * f, R), _ceil(_ceil(nsh, L), f)
    p = GROUP_LOWERINGS[DccKernel.RED](HBM, sizes, cores)
    body = 4 + (3 if k > 1 else 0)  # FILL, JUMP, [ADD, JUMP, NOP], MOV, JUMP
    crf = -(-(body + (rounds > 1) + 1) // 8)
    assert p.counts["RD"] == rounds * (R * k + (D if k > 1 else 0))
    assert p.counts["WR"] == 4 + crf + 2 + rounds * R + 2
    # every row: its 16 lanes of each segment from each of the non-empty column shares
    assert p.host_ops == m * (L * f * -(-n // nsh) - 1)
    # every vector of every real row's segments in each column share (zeros pad); a lane
    # vector per row, segment and column share back
    assert len(p.inputs["A"]) == m * f * k * -(-n // nsh)
    assert len(p.outputs["r"]) == m * f * -(-n // nsh)


def _fold(rows: int, k: int) -> int:
    """Segments a RED row of ``k`` vectors is folded into on a unit holding ``rows`` < R rows."""
    return _ceil(k, _ceil(k, R // rows)) if rows < R else 1


def test_red_short_rows_fold_over_the_registers() -> None:
    """One row of 128 elements on one unit: 8 vectors, one per GRF_B entry (8 FILLs; no ADD,
    no drain), 8 lane-vectors back, the host adds 8 x 16 lanes. Without the fold the round
    would read 8 rows x 8 vectors, 7 of the rows padding."""
    p = GROUP_LOWERINGS[DccKernel.RED](HBM, (1, 128), (1, 1))
    assert p.counts["RD"] == R and p.host_ops == R * L - 1 and len(p.outputs["r"]) == R
    # the same triggers as VA's FILL / MOV round without its ADDs: the 414-cycle frame
    assert p.cycles == GROUP_LOWERINGS[DccKernel.RED](HBM, (8, 16), (1, 1)).cycles
    # 3 rows of 7 vectors: R // 3 = 2 segments of 4 vectors (the second ends in padding)
    p = GROUP_LOWERINGS[DccKernel.RED](HBM, (3, 100), (1, 1))
    assert p.counts["RD"] == R * 4 + D and len(p.inputs["A"]) == 3 * 2 * 4
    rng = np.random.default_rng(3)
    a = _ints(rng, 3, 100)
    r = run_group(HBM, DccKernel.RED, (3, 100), (1, 1), {"A": a}, garbage=rng)["r"]
    np.testing.assert_array_equal(r.astype(np.float64), a.astype(np.float64).sum(axis=1))


def test_gemv_without_input_split_is_pim_sherpa_algorithm_1() -> None:
    """c_i = 1: inputs broadcast into GRF_A through the register row, exactly lower_gemv's
    stream (the 64 x 128 one derived by hand in test_hbm_pim.py: 733 cycles)."""
    p = GROUP_LOWERINGS[DccKernel.GEMV](HBM, (64, 128), (8, 1))
    assert isinstance(p, GroupProgram)
    assert np.array_equal(p.stream, lower_gemv(HBM, 64, 128, channels=1).stream)
    assert p.cycles == 733 and set(p.inputs) == {"W"}  # x goes through registers
    assert p.host_ops == 64 * (L - 1)
    # fewer output cores: the same stream, units 4-7 compute padding that is not read
    q = GROUP_LOWERINGS[DccKernel.GEMV](HBM, (32, 128), (4, 1))
    assert np.array_equal(q.stream, p.stream)
    assert set(q.outputs["y"][:, 0].tolist()) == {0, 2, 4, 6}  # first banks of units 0-3


def _real(size: int, cores: int) -> list[int]:
    """Real extent of each core's share of ``size``."""
    share = -(-size // cores)
    return [max(0, min(share, size - k * share)) for k in range(cores)]


@pytest.mark.parametrize(
    ("sizes", "cores"),
    [((3, 20, 300), (2, 2, 2)), ((1, 16, 512), (1, 2, 4)), ((4, 9, 40), (4, 1, 1)),
     ((5, 3, 700), (3, 1, 2))],
)  # fmt: skip
def test_fill_path_counts_closed_form(sizes, cores) -> None:
    """Units with different inputs: per (output tile, batch row) pass, per input tile 8 FILL
    reads and 64 MAC reads; 5 dummy reads; 8 MOV writes; PIM on/off."""
    n, o, i = sizes
    nsh, osh, ish = (-(-s // c) for s, c in zip(sizes, cores, strict=True))
    j, t = -(-osh // R), -(-ish // (A * L))
    p = GROUP_LOWERINGS[DccKernel.BATCHED_GEMV](HBM, sizes, cores)
    passes = j * nsh
    per_pos = [len(range(pos, t, 2)) for pos in range(2)]
    instrs = sum(4 + (k > 1) for k in per_pos if k) + 4  # FILL/MAC loops; NOP, MOV, JUMP, EXIT
    assert p.counts["RD"] == passes * (t * (A + A * R) + D)
    assert p.counts["WR"] == 4 + -(-instrs // 8) + passes * (2 + R) + 2
    units = [(nr, orl, ir) for nr in _real(n, cores[0]) for orl in _real(o, cores[1])
             for ir in _real(i, cores[2]) if min(nr, orl, ir) > 0]  # fmt: skip
    # each unit holds its real batch rows' inputs (all t x 8 vectors, zeros pad) and its W
    # block; a block is replicated in the units of every batch share
    assert len(p.inputs["X"]) == sum(nr * t * A for nr, _, _ in units)
    assert len(p.inputs["W"]) == sum(orl * -(-ir // L) for _, orl, ir in units)
    assert len(p.outputs["Y"]) == sum(nr * orl for nr, orl, _ in units)
    assert p.host_ops == n * o * (L * -(-i // ish) - 1)


def test_batch_split_replicates_weights() -> None:
    one = GROUP_LOWERINGS[DccKernel.BATCHED_GEMV](HBM, (4, 16, 128), (1, 2, 1))
    two = GROUP_LOWERINGS[DccKernel.BATCHED_GEMV](HBM, (4, 16, 128), (2, 2, 1))
    # 16 outputs x 8 vectors of 16 inputs, once per batch share
    assert len(one.inputs["W"]) == 16 * 8 and len(two.inputs["W"]) == 2 * 16 * 8
    assert "X" not in one.inputs and len(two.inputs["X"]) == 2 * 2 * 2 * A  # units x rows x A
    banks = {tuple(b) for b in two.inputs["W"][:, :1].tolist()}
    assert banks == {(0,), (2,), (4,), (6,)}  # units 0-3; one input tile: first banks only


def test_relu_and_add_instructions() -> None:
    word = encode_instr(Instr.MOV, Bank.EVEN, Bank.GRF_B, aam=True, relu=True)
    d = decode_instr(word)
    assert (d.op, d.relu, d.imm0, d.imm1) == (Instr.MOV, True, 0, 0)
    assert word >> 12 & 1  # PIMSimulator's ReLU bit
    assert decode_instr(encode_instr(Instr.ADD, Bank.GRF_B, Bank.GRF_B, Bank.EVEN)).op is Instr.ADD
    with pytest.raises(HbmPimError, match="ReLU flag exists on FILL and MOV"):
        encode_instr(Instr.ADD, relu=True)


def test_va_needs_the_drain() -> None:
    """VA lowered for a unit without pipeline drain (no NOP, no dummy reads) and run on the
    real one: the first MOV reads GRF_B right after the last ADD; the model refuses it."""
    from pimphony.compiler.dcc.hbm_pim_lowering import _LOWER
    from pimphony.models.hbm_pim import execute

    eager = dataclasses.replace(HBM, core=dataclasses.replace(HBM.core, pipeline_drain=0))
    low = _LOWER[DccKernel.VA](eager, (100,), (8,))
    assert low.program.counts["RD"] == 2 * R
    with pytest.raises(HbmPimError, match=r"MOV reads GRF_B 0 trigger\(s\) after the last ADD"):
        execute(HBM, low.program.stream, low.payload, PimState.for_backend(HBM, 1))


@pytest.mark.parametrize(
    ("kernel", "sizes", "cores", "message"),
    [
        (DccKernel.GEMV, (64, 128), (4, 4), r"cores = \(4, 4\) asks for 16 PIM units; a group of "
         r"back end 'hbm-pim' has 8 \(16 banks / 2 per unit\)"),
        (DccKernel.GEMV, (64,), (1,), r"sizes = \(64,\): expected 2 positive integer"),
        (DccKernel.VA, (100,), (0,), r"cores = \(0,\): expected 1 positive integer"),
        (DccKernel.VA, (800_000,), (1,), r"va: a unit's share of 800,000 elements needs 4,688 "
         f"rows of a bank; {PIM_ROWS:,} rows trigger PIM"),
        # 8 x 3,399 ADDs in 14 loops of <= 2,048: 2 + 28 + NOP + MOV, JUMP + EXIT
        (DccKernel.RED, (8, 54_400), (1, 1), r"red: the program needs 34 CRF instructions "
         r"\(3400 vectors per row, 1 rounds of 8 rows\); the CRF holds 32"),
        (DccKernel.GEMV, (64, 200_000), (8, 1), r"gemv: the GEMV program needs .* CRF holds 32"),
        # 64 output tiles x 137 slots x 64 weight vectors / 32 columns = 17,536 rows
        (DccKernel.BATCHED_GEMV, (1, 512, 70_000), (1, 1, 2), r"batched-gemv: a unit's share "
         r"\(n 1, o 512, i 35000\) needs 17,\d{3} rows of a bank"),
    ],
)  # fmt: skip
def test_refusals(kernel, sizes, cores, message) -> None:
    with pytest.raises(HbmPimLoweringError, match=message):
        GROUP_LOWERINGS[kernel](HBM, sizes, cores)


def test_run_group_refusals() -> None:
    with pytest.raises(HbmPimLoweringError, match="kernel 'softmax' has no HBM-PIM group"):
        run_group(HBM, "softmax", (1, 8, 16), (1, 1, 1), {})  # type: ignore[arg-type]
    with pytest.raises(HbmPimLoweringError, match=r"W of shape \(3, 4\): the share \(4, 4\) "
                       r"needs \(4, 4\)"):  # fmt: skip
        run_group(HBM, DccKernel.GEMV, (4, 4), (1, 1), {"W": np.zeros((3, 4)), "x": np.zeros(4)})
    with pytest.raises(HbmPimLoweringError, match=r"arrays \['W'\] given; the share needs"):
        run_group(HBM, DccKernel.GEMV, (4, 4), (1, 1), {"W": np.zeros((4, 4))})
    with pytest.raises(HbmPimLoweringError, match="'attacc' is of kind 'attacc'"):
        GROUP_LOWERINGS[DccKernel.VA](load_backend("attacc"), (16,), (1,))


# ----------------------------------------------------------------------------- QK and SV


@st.composite
def _attn_case(draw):
    sizes = (draw(st.integers(1, 4)), draw(st.integers(1, 40)), draw(st.integers(1, 260)))
    return sizes, _cores(draw, 3), draw(st.integers(0, 2**32 - 1))


@pytest.mark.parametrize("kernel", [DccKernel.QK, DccKernel.SV])
@FAST
@given(case=_attn_case())
def test_attention_equals_numpy(kernel: DccKernel, case) -> None:
    """QK: S[h][t] = sum_d Q[h][d] K[h][t][d], sets (h, t, d); SV: O[h][d] = sum_t P[h][t]
    V[h][t][d], sets (h, d, t)."""
    (h, t, d), cores, seed = case
    rng = np.random.default_rng(seed)
    if kernel is DccKernel.QK:
        sizes, spec, out = (h, t, d), "hd,htd->ht", "S"
        arrays = {"Q": _ints(rng, h, d), "K": _ints(rng, h, t, d)}
    else:
        sizes, spec, out = (h, d, t), "ht,htd->hd", "O"
        arrays = {"P": _ints(rng, h, t), "V": _ints(rng, h, t, d)}
    got = run_group(HBM, kernel, sizes, cores, arrays, garbage=rng)[out]
    want = np.einsum(spec, *(x.astype(np.float64) for x in arrays.values()))
    np.testing.assert_array_equal(got.astype(np.float64), want)


def test_qk_heads_over_the_register_row_counts_closed_form() -> None:
    """QK of 4 heads x 256 tokens x 128 over 8 token cores: every unit uses the same head's
    q at a time, so q_h goes through the register row (Algorithm 1 per head, heads looped):
    P = J x h passes of one input tile, K_h's 64 vectors per (tile, unit) after K_(h-1)'s."""
    h, t, d = 4, 256, 128
    p = GROUP_LOWERINGS[DccKernel.QK](HBM, (h, t, d), (1, 8, 1))
    j, tiles = _ceil(t // 8, R), _ceil(d, A * L)  # 4 output tiles, 1 input tile
    passes = j * h
    assert p.counts["RD"] == passes * (A * R * tiles + D)
    assert p.counts["WR"] == 4 + 1 + passes * (2 + A * tiles + R) + 2
    assert p.counts["ACT"] == 4 + 1 + passes * (3 * tiles + 1) + 1
    assert p.counts["PRE"] == p.counts["ACT"] - 1
    assert set(p.inputs) == {"K"}  # Q is written into GRF_A by the stream
    assert len(p.inputs["K"]) == h * t * d // L  # every K vector once, no padding
    assert len(np.unique(p.inputs["K"], axis=0)) == len(p.inputs["K"])  # a place per head
    assert len(p.outputs["S"]) == h * t and p.host_ops == h * t * (L - 1)
    # the same counts as a batched GEMV of h rows sharing one matrix: only addresses differ
    shared = GROUP_LOWERINGS[DccKernel.BATCHED_GEMV](HBM, (h, t, d), (1, 8, 1))
    assert shared.counts == p.counts and not np.array_equal(shared.stream, p.stream)


def test_sv_heads_over_units_counts_closed_form() -> None:
    """SV of 4 heads x 300 tokens x 64 with 2 head cores x 4 d_h cores: units take different
    heads, so p_h lies in their banks and a FILL loads it per input tile (the FILL path)."""
    h, t, d = 4, 300, 64
    p = GROUP_LOWERINGS[DccKernel.SV](HBM, (h, d, t), (2, 4, 1))
    nsh, dsh = 2, 16
    j, tiles = _ceil(dsh, R), _ceil(t, A * L)  # 2 output tiles, 3 input tiles
    passes = j * nsh
    per_pos = [len(range(pos, tiles, 2)) for pos in range(2)]  # [2, 1]
    instrs = sum(4 + (k > 1) for k in per_pos if k) + 4
    assert p.counts["RD"] == passes * (tiles * (A + A * R) + D)
    assert p.counts["WR"] == 4 + _ceil(instrs, 8) + passes * (2 + R) + 2
    assert set(p.inputs) == {"V", "P"}
    # each unit: its 2 heads' 16 x ceil(300 / 16) V^T vectors; its heads' p (3 tiles x 8)
    assert len(p.inputs["V"]) == 8 * nsh * dsh * _ceil(t, L)
    assert len(p.inputs["P"]) == 8 * nsh * tiles * A
    assert len(p.outputs["O"]) == h * d and p.host_ops == h * d * (L - 1)


@pytest.mark.parametrize(
    ("kernel", "sizes", "cores", "message"),
    [
        (DccKernel.QK, (2, 64, 128), (2, 2, 4), r"qk: cores = \(2, 2, 4\) asks for 16 PIM units"),
        # 32 heads x 64 output tiles x 64 vectors / 32 columns + 512 result rows
        (DccKernel.QK, (32, 4096, 128), (1, 8, 1), r"qk: a unit's share \(n 32, o 512, i 128\) "
         r"needs 4,608 rows of a bank"),
        (DccKernel.SV, (1, 64, 300_000), (1, 8, 1), r"sv: the GEMV program needs .* CRF holds"),
        (DccKernel.SV, (2, 64), (1, 1), r"sv: sizes = \(2, 64\): expected 3 positive"),
    ],
)  # fmt: skip
def test_attention_refusals(kernel, sizes, cores, message) -> None:
    with pytest.raises(HbmPimLoweringError, match=message):
        GROUP_LOWERINGS[kernel](HBM, sizes, cores)


# --------------------------------------------------------------------- batched RED, VA, RELU


@FAST
@given(_case(5, 12, 200))
def test_batched_red_equals_numpy(case) -> None:
    _check_red(DccKernel.BATCHED_RED, case)


@FAST
@given(_case(6, 700))
def test_batched_va_and_relu_equal_numpy(case) -> None:
    _check_va_relu(DccKernel.BATCHED_VA, DccKernel.BATCHED_RELU, case)


def test_batched_va_cycles_by_hand() -> None:
    """Batched VA of 5 rows x 200 over (1, 8) units: each unit 5 rows x 25 elements = 2 vectors
    per row, 10 vectors: two rounds of 8 (stride 24 columns: round 0 in columns 0-23 of row 0;
    round 1's A in columns 24-31 of row 0, its B and C in columns 0-15 of row 1, so a row
    switch between its FILLs and ADDs). Program 9 instructions (the round loop's JUMP): two CRF
    writes. The same frame as ``test_va_cycles_by_hand``."""
    t = HBM.timing
    assert t is not None
    sizes, cores = (5, 200), (1, 8)
    p = GROUP_LOWERINGS[DccKernel.BATCHED_VA](HBM, sizes, cores)
    wr_visit = t.tRCD_WR + t.write_to_precharge
    pre_entry = 3 * (wr_visit + 1) + wr_visit  # 147
    act_reg = pre_entry + t.tRP
    wr_on = act_reg + t.tRCD_WR + 2 * t.tCCD_L  # two CRF writes, then PIM on
    act_row0 = wr_on + t.write_to_precharge + t.tRP
    fill0 = max(act_row0 + t.tRCD_RD, wr_on + t.write_to_read)
    last_rd = fill0 + (8 + 8 + D - 1) * t.tCCD_L  # round 0: FILL, ADD, drain
    mov0 = max(last_rd + t.tCCD_L, last_rd + t.read_to_write)
    last_mov = mov0 + 7 * t.tCCD_L
    fill1 = max(last_mov + t.tCCD_L, last_mov + t.write_to_read)  # round 1, still row 0
    last_fill1 = fill1 + 7 * t.tCCD_L
    pre_row0 = max(last_fill1 + t.tRTP, act_row0 + t.tRAS, last_mov + t.write_to_precharge)
    act_row1 = pre_row0 + t.tRP
    add1 = act_row1 + t.tRCD_RD
    last_rd1 = add1 + (8 + D - 1) * t.tCCD_L
    mov1 = last_rd1 + t.read_to_write
    last_mov1 = mov1 + 7 * t.tCCD_L
    act_off = last_mov1 + t.write_to_precharge + t.tRP
    wr_off = act_off + t.tRCD_WR
    act_exit = wr_off + t.write_to_precharge + t.tRP
    last = act_exit + t.tRCD_WR + t.tCCD_L
    assert p.cycles == last + t.WL + t.burst_cycles == 641
    assert time_stream(HBM, p.stream).cycles == p.cycles
    assert p.counts == {"ACT": 9, "PRE": 8, "RD": 2 * (2 * R + D), "WR": 4 + 2 + 2 + 2 * R + 2}
    # every unit: 5 rows x 2 vectors of A and B, C read back the same; no host adds
    assert [len(p.inputs[k]) for k in "AB"] == [U * 5 * 2] * 2 and len(p.outputs["C"]) == 80
    assert p.host_ops == 0
    rng = np.random.default_rng(7)
    a, b = _ints(rng, *sizes), _ints(rng, *sizes)
    got = run_group(HBM, DccKernel.BATCHED_VA, sizes, cores, {"A": a, "B": b}, garbage=rng)
    np.testing.assert_array_equal(got["C"], a + b)


@pytest.mark.parametrize(
    ("kernel", "batched", "sizes", "cores"),
    [
        (DccKernel.RED, DccKernel.BATCHED_RED, (30, 70), (2, 4)),
        (DccKernel.RED, DccKernel.BATCHED_RED, (5, 600), (1, 8)),
        (DccKernel.VA, DccKernel.BATCHED_VA, (1000,), (3,)),
        (DccKernel.RELU, DccKernel.BATCHED_RELU, (40_000,), (8,)),
    ],
)
def test_batch_of_one_is_the_unbatched_program(kernel, batched, sizes, cores) -> None:
    one = GROUP_LOWERINGS[kernel](HBM, sizes, cores)
    b1 = GROUP_LOWERINGS[batched](HBM, (1, *sizes), (1, *cores))
    np.testing.assert_array_equal(one.stream, b1.stream)
    assert (one.cycles, one.counts, one.host_ops) == (b1.cycles, b1.counts, b1.host_ops)
    for mine, theirs in ((one.inputs, b1.inputs), (one.outputs, b1.outputs)):
        assert mine.keys() == theirs.keys()
        for k in mine:
            np.testing.assert_array_equal(mine[k], theirs[k])


@pytest.mark.parametrize(("sizes", "cores"), [((3, 20, 100), (1, 8, 1)), ((4, 9, 70), (2, 2, 2)),
                                              ((2, 1, 1000), (2, 1, 4))])  # fmt: skip
def test_batched_red_counts_closed_form(sizes, cores) -> None:
    """The batch folds into the rows: R_m = ceil(b_s m_s / 8) rounds of RED's program."""
    b, m, n = sizes
    bs, ms, ns = (_ceil(s, c) for s, c in zip(sizes, cores, strict=True))
    f = _fold(bs * ms, _ceil(ns, L))
    rounds, k = _ceil(bs * ms * f, R), _ceil(_ceil(ns, L), f)
    p = GROUP_LOWERINGS[DccKernel.BATCHED_RED](HBM, sizes, cores)
    assert p.counts["RD"] == rounds * (R * k + (D if k > 1 else 0))
    crf = _ceil(4 + (3 if k > 1 else 0) + (rounds > 1) + 1, 8)
    assert p.counts["WR"] == 4 + crf + 2 + rounds * R + 2
    shares = _ceil(n, ns)  # non-empty column shares
    assert p.host_ops == b * m * (L * f * shares - 1)
    assert len(p.inputs["A"]) == b * m * f * k * shares
    assert len(p.outputs["r"]) == b * m * f * shares


def test_batched_elementwise_pads_each_batch_row() -> None:
    """A vector never spans two batch rows: 3 rows of 20 on one unit are 3 x 2 vectors (not
    ceil(60 / 16) = 4), so a share not a multiple of 16 wastes lanes in every row."""
    p = GROUP_LOWERINGS[DccKernel.BATCHED_RELU](HBM, (3, 20), (1, 1))
    assert len(p.inputs["X"]) == 6 and p.counts["RD"] == R  # one round of 8 FILLs
    p = GROUP_LOWERINGS[DccKernel.BATCHED_RELU](HBM, (3, 32), (1, 1))
    assert len(p.inputs["X"]) == 6


@pytest.mark.parametrize(
    ("kernel", "sizes", "cores", "message"),
    [
        (DccKernel.BATCHED_VA, (2, 400_000), (1, 1), r"batched-va: a unit's share of 2 x "
         r"400,000 elements needs 4,688 rows of a bank"),
        (DccKernel.BATCHED_RED, (2, 4, 64), (2, 2, 4), r"cores = \(2, 2, 4\) asks for 16 PIM"),
        (DccKernel.BATCHED_RELU, (4,), (1,), r"sizes = \(4,\): expected 2 positive integer"),
    ],
)  # fmt: skip
def test_batched_refusals(kernel, sizes, cores, message) -> None:
    with pytest.raises(HbmPimLoweringError, match=message):
        GROUP_LOWERINGS[kernel](HBM, sizes, cores)
