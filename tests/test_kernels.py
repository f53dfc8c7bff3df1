"""The kernel compiler: command counts, row locality, refusals and functional correctness."""

from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np
import pytest
from pimphony.compiler.kernels import (
    CompileError,
    attention_max_tokens,
    compile_gemv,
    compile_kernel,
    compile_qk,
    compile_sv,
    gemv_max_batch,
    gemv_pass_size,
    row_switch_estimate,
)
from pimphony.models.channel import SCHEDULERS, run_channel
from pimphony.models.config import load_preset
from pimphony.models.functional import execute
from pimphony.models.isa import Op, validate_stream

BANKS, ELEMS, COLS, HALF = 16, 16, 64, 32  # aim-16ch: B, E, C, NG/2 = NO/2


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def expected_counts(n_out: int, n_in: int, heads: int, mapping: str) -> dict[str, int]:
    """Closed-form counts of docs/mapping.md, "Loop nest and command counts"."""
    groups = cdiv(n_out, BANKS)
    tiles = cdiv(n_in, ELEMS)
    per_pass = heads if mapping == "row-reuse" else 1
    resident = per_pass * tiles <= HALF
    n_blocks = cdiv(groups, HALF // per_pass)
    return {
        "WR_INP": heads * tiles * (1 if resident else n_blocks),
        "MAC": heads * groups * tiles,
        "RD_OUT": heads * groups,
    }


def expected_rows(n_out: int, n_in: int, sv_heads: int = 1) -> int:
    """DRAM rows of the matrix; ``sv_heads`` = heads per pass of a row-reuse SV kernel.

    SV with ``P > 1`` heads per pass lays each group's run of a chunk at a stride of
    ``S = HALF // P`` columns (a power of two here, so it divides a row; docs/mapping.md,
    "Row-aligned group runs"): ``groups x chunks x S`` columns, chunks of ``S`` tiles (one
    chunk if the input is resident). Otherwise ``groups x tiles`` columns.
    """
    groups, tiles = cdiv(n_out, BANKS), cdiv(n_in, ELEMS)
    if sv_heads == 1:
        return cdiv(groups * tiles, COLS)
    stride = HALF // sv_heads
    return cdiv(groups * cdiv(tiles, stride) * stride, COLS)


def sv_heads(kind: str, group: int, mapping: str) -> int:
    return group if kind == "sv" and mapping == "row-reuse" else 1


GEMV_SHAPES = [(4096, 4096), (100, 300), (17, 1), (1, 17), (1000, 5000)]
ATTN_CASES = [
    (kind, tokens, d_h, group, mapping)
    for kind in ("qk", "sv")
    for tokens in (1, 100, 4096, 5000)
    for d_h in (64, 128, 80, 48)
    for group in (1, 2, 4, 8)
    for mapping in ("row-reuse", "head-serial")
]


def _compile_case(cfg, kind, tokens, d_h, group, mapping):
    if kind == "qk":
        prog = compile_qk(cfg, tokens, d_h, gqa_group=group, mapping=mapping)
        return prog, (tokens, d_h)
    prog = compile_sv(cfg, tokens, d_h, gqa_group=group, mapping=mapping)
    return prog, (d_h, tokens)


def mac_row_opens(commands: np.ndarray) -> int:
    """Row activations a MAC-only walk needs: 1 + changes of row between consecutive MACs."""
    rows = commands["row"][commands["op"] == Op.MAC].astype(np.int64)
    return 1 + int(np.count_nonzero(rows[1:] != rows[:-1])) if rows.size else 0


def check_structure(cfg, prog, n_out, n_in, heads, mapping, sv_p=1):
    validate_stream(prog.commands, cfg.channel)
    assert prog.counts == expected_counts(n_out, n_in, heads, mapping)
    plan = prog.plan
    groups, tiles = cdiv(n_out, BANKS), cdiv(n_in, ELEMS)
    assert (plan.groups, plan.tiles, plan.heads) == (groups, tiles, heads)
    assert plan.rows == expected_rows(n_out, n_in, sv_p)
    if sv_p == 1:
        assert plan.rows == math.ceil(groups * tiles / COLS)
    mac = prog.commands[prog.commands["op"] == Op.MAC]
    rows_used = np.unique(mac["row"])
    assert rows_used.tolist() == list(range(plan.rows))  # rows 0 .. rows-1, no gaps
    # Each matrix tile (column address) is read once per head; padding columns never.
    addr = mac["row"].astype(np.int64) * COLS + mac["col"]
    counts = np.bincount(addr)
    assert np.count_nonzero(counts) == groups * tiles
    assert set(counts[counts > 0].tolist()) == {heads}
    if sv_p == 1:
        assert counts.size == groups * tiles  # packed: no padding columns


@pytest.mark.parametrize(("d_out", "d_in"), GEMV_SHAPES)
def test_gemv_counts_and_structure(cfg, d_out, d_in):
    prog = compile_gemv(cfg, d_out, d_in)
    assert prog.kind == "gemv"
    check_structure(cfg, prog, d_out, d_in, 1, "row-reuse")


@pytest.mark.parametrize(("kind", "tokens", "d_h", "group", "mapping"), ATTN_CASES)
def test_attention_counts_and_structure(cfg, kind, tokens, d_h, group, mapping):
    prog, (n_out, n_in) = _compile_case(cfg, kind, tokens, d_h, group, mapping)
    assert prog.kind == kind
    assert prog.plan.mapping == mapping
    check_structure(cfg, prog, n_out, n_in, group, mapping, sv_heads(kind, group, mapping))


# Row-reuse GQA with tile runs that do not divide the 64 columns of a row (5 tiles at
# d_h = 80, 3 at d_h = 48, the token-dependent runs of SV): the row-aligned layout keeps every
# run in one row, and all heads finish a row before the next opens (each row once per pass).
ROW_OPEN_CASES = [
    (kind, tokens, d_h, group, mapping) for kind, tokens, d_h, group, mapping in ATTN_CASES
]


@pytest.mark.parametrize(("d_out", "d_in"), GEMV_SHAPES)
def test_gemv_opens_each_row_once(cfg, d_out, d_in):
    mac = compile_gemv(cfg, d_out, d_in).commands
    assert mac_row_opens(mac) == expected_rows(d_out, d_in)


@pytest.mark.parametrize(("kind", "tokens", "d_h", "group", "mapping"), ROW_OPEN_CASES)
def test_attention_opens_each_row_once_per_pass(cfg, kind, tokens, d_h, group, mapping):
    prog, (n_out, n_in) = _compile_case(cfg, kind, tokens, d_h, group, mapping)
    rows = expected_rows(n_out, n_in, sv_heads(kind, group, mapping))
    mac = prog.commands[prog.commands["op"] == Op.MAC]
    assert np.unique(mac["row"]).size == rows
    # Row-reuse: all G heads share each opened row. Head-serial: one pass per head, each
    # reopening every row (a single-row matrix stays open from one pass to the next).
    passes = 1 if mapping == "row-reuse" or rows == 1 else group
    assert mac_row_opens(prog.commands) == passes * rows


def test_row_reuse_qk_runs_split_into_power_of_two_segments(cfg):
    # QK^T T=257, d_h=80, G=4: 17 groups x 5 tiles, resident (4 x 5 <= 32), blocks of
    # 32 // 4 = 8 groups. Each 5-tile run is a 4-tile then a 1-tile segment: block 0 puts the
    # 4-tile runs at columns 0..31 and the 1-tile runs at 32..39; block 1 (groups 8..15) at
    # 40..71 and 72..79; block 2 (group 16) at 80..83 and 84. 85 columns, 2 rows, no padding.
    # Group 12 (before: columns 60..64, straddling rows 0 and 1) is at 56..59 and 76.
    prog = compile_qk(cfg, 257, 80, gqa_group=4)
    assert prog.plan.pow2_segments and prog.plan.rows == 2
    mac = prog.commands[prog.commands["op"] == Op.MAC]
    addr = mac["row"].astype(np.int64) * COLS + mac["col"]
    assert addr.max() == 84
    # Group 12 = block 1, gi 4, head 0: OBuf half 1, entry 32 + 4 x 4 + 0 = 48.
    assert addr[mac["out"] == 48].tolist() == [56, 57, 58, 59, 76]
    # After block 0's 8 x 5 x 4 = 160 MACs, head 0 of group 8 (entry 32) then heads 1..3
    # (33..35) read columns 40..43 in turn.
    assert addr[160:164].tolist() == [40, 41, 42, 43]
    assert mac["out"][160:176].tolist() == [32] * 4 + [33] * 4 + [34] * 4 + [35] * 4
    assert run_channel(prog.commands, cfg, "dcs").row_switches.shape[0] == 2
    assert mac_row_opens(prog.commands) == 2
    assert prog.counts == {"WR_INP": 20, "MAC": 4 * 17 * 5, "RD_OUT": 4 * 17}


def test_row_reuse_sv_runs_padded_to_the_chunk_stride(cfg):
    # SV T=1000, d_h=128, G=2: 63 tiles, streamed (2 x 63 > 32) in chunks of 32 // 2 = 16
    # tiles (16, 16, 16, 15); 8 groups in one block. Each group's run of a chunk sits at a
    # stride of 16 columns: 8 x 4 x 16 = 512 columns = 8 rows (packed: 504, also 8 rows).
    # Packed, group 4's last-chunk run was 384 + 4 x 15 = 444..458 and crossed column 448;
    # now it is 384 + 4 x 16 = 448..462.
    prog = compile_sv(cfg, 1000, 128, gqa_group=2)
    p = prog.plan
    assert (p.resident, p.chunk_tiles, p.run_stride, p.rows) == (False, 16, 16, 8)
    assert prog.counts == {"WR_INP": 2 * 63, "MAC": 2 * 8 * 63, "RD_OUT": 2 * 8}
    mac = prog.commands[prog.commands["op"] == Op.MAC]
    addr = mac["row"].astype(np.int64) * COLS + mac["col"]
    head0_g4 = addr[mac["out"] == 4 * 2]  # group 4, head 0: OBuf entry 4 x 2 + 0
    assert head0_g4[-15:].tolist() == list(range(448, 463))
    assert np.count_nonzero(np.bincount(addr)) == 8 * 63  # 8 padding columns (x 1 chunk)
    assert mac_row_opens(prog.commands) == 8
    # Resident (T = 129: 9 tiles, 2 x 9 <= 32): runs at a stride of 16, 8 x 16 = 2 rows.
    assert compile_sv(cfg, 129, 128, gqa_group=2).plan.rows == 2


def test_documented_examples(cfg):
    # docs/mapping.md: "Examples on aim-16ch".
    assert compile_qk(cfg, 4096, 128).counts == {"WR_INP": 8, "MAC": 2048, "RD_OUT": 256}
    assert compile_sv(cfg, 4096, 128).counts == {"WR_INP": 256, "MAC": 2048, "RD_OUT": 8}
    assert compile_gemv(cfg, 4096, 4096).counts == {"WR_INP": 2048, "MAC": 65536, "RD_OUT": 256}


def test_resident_threshold(cfg):
    # 32 tiles fit one GBuf half; 33 do not.
    assert compile_gemv(cfg, 64, 32 * ELEMS).plan.resident
    assert not compile_gemv(cfg, 64, 32 * ELEMS + 1).plan.resident
    # Row-reuse with G = 4: 8 tiles per head fill the half, 9 do not.
    assert compile_qk(cfg, 64, 128, gqa_group=4).plan.resident
    assert not compile_qk(cfg, 64, 144, gqa_group=4).plan.resident
    assert compile_qk(cfg, 64, 144, gqa_group=4, mapping="head-serial").plan.resident


def test_compile_kernel_dispatch(cfg):
    a = compile_kernel(cfg, "qk", tokens=100, d_h=64, gqa_group=4, mapping="head-serial")
    b = compile_qk(cfg, 100, 64, gqa_group=4, mapping="head-serial")
    assert np.array_equal(a.commands, b.commands)
    assert np.array_equal(
        compile_kernel(cfg, "gemv", d_out=100, d_in=300).commands,
        compile_gemv(cfg, 100, 300).commands,
    )
    assert compile_kernel(cfg, "sv", tokens=100, d_h=64).kind == "sv"


@pytest.mark.parametrize(
    ("kind", "shape"),
    [
        ("gemv", {"d_out": 4096, "d_in": 4096}),
        ("qk", {"tokens": 1000, "d_h": 80, "gqa_group": 8}),
        ("sv", {"tokens": 1000, "d_h": 128, "gqa_group": 8}),
        ("sv", {"tokens": 300, "d_h": 64, "gqa_group": 4, "mapping": "head-serial"}),
    ],
)
def test_compiled_streams_run_under_every_scheduler(cfg, kind, shape):
    # docs/mapping.md: every compiled stream is ping-pong legal and runs under all three.
    prog = compile_kernel(cfg, kind, **shape)
    for sched in SCHEDULERS:
        r = run_channel(prog.commands, cfg, sched)
        assert r.counts == prog.counts
        assert r.cycles > 0


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda c: compile_gemv(c, 0, 16), "d_out = 0"),
        (lambda c: compile_gemv(c, 16, -3), "d_in = -3"),
        (lambda c: compile_qk(c, 0, 128), "tokens = 0"),
        (lambda c: compile_sv(c, 100, 0), "d_h = 0"),
        (lambda c: compile_qk(c, 100, 128, gqa_group=0), "gqa_group = 0"),
        (lambda c: compile_sv(c, 100, 128, gqa_group=-2), "gqa_group = -2"),
    ],
)
def test_refuses_non_positive_sizes(cfg, call, fragment):
    with pytest.raises(CompileError) as info:
        call(cfg)
    assert fragment in str(info.value)
    assert "positive integer" in str(info.value)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda c: compile_gemv(c, 64.0, 16), "d_out = 64.0"),
        (lambda c: compile_gemv(c, 64, "16"), "d_in = '16'"),
        (lambda c: compile_qk(c, True, 128), "tokens = True"),
        (lambda c: compile_sv(c, 100, 64.5), "d_h = 64.5"),
        (lambda c: compile_qk(c, 100, 128, gqa_group=2.0), "gqa_group = 2.0"),
    ],
)
def test_refuses_non_integer_sizes(cfg, call, fragment):
    with pytest.raises(CompileError) as info:
        call(cfg)
    assert fragment in str(info.value)


def test_accepts_numpy_integers(cfg):
    prog = compile_gemv(cfg, np.int64(100), np.int32(300))
    assert prog.counts == compile_gemv(cfg, 100, 300).counts


@pytest.mark.parametrize("kind", ["qk", "sv"])
def test_gqa_group_too_large_for_row_reuse(cfg, kind):
    with pytest.raises(CompileError) as info:
        compile_kernel(cfg, kind, tokens=256, d_h=64, gqa_group=33)
    msg = str(info.value)
    assert "33" in msg
    assert "head-serial" in msg
    prog = compile_kernel(cfg, kind, tokens=256, d_h=64, gqa_group=33, mapping="head-serial")
    validate_stream(prog.commands, cfg.channel)
    assert prog.plan.heads == 33
    # 32 heads still fit row-reuse.
    assert compile_kernel(cfg, kind, tokens=256, d_h=64, gqa_group=32).plan.heads == 32


def test_refuses_matrix_larger_than_bank(cfg):
    with pytest.raises(CompileError) as info:
        compile_gemv(cfg, 65536, 65536)
    msg = str(info.value)
    assert "65536x65536" in msg
    assert "262144" in msg  # rows needed
    assert "16384" in msg  # rows available


def test_row_limit_boundary(cfg):
    # 16384 rows x 64 columns: 1024 groups x 1024 tiles fills the bank exactly.
    assert compile_gemv(cfg, 1024 * BANKS, 1024 * ELEMS).plan.rows == 16384
    with pytest.raises(CompileError, match="16400 DRAM rows"):
        compile_gemv(cfg, 1024 * BANKS + 1, 1024 * ELEMS)


def test_refuses_gpr_overflow(cfg):
    # 16384 input tiles + 1 output tile > 16384 GPR tiles (512 KB / 32 B).
    with pytest.raises(CompileError) as info:
        compile_gemv(cfg, 16, 16384 * ELEMS)
    msg = str(info.value)
    assert "16385 GPR tiles" in msg
    assert "16384" in msg
    # Head-serial GQA: 32 * (8 + 512) = 16640 tiles.
    with pytest.raises(CompileError, match="GPR"):
        compile_qk(cfg, 8192, 128, gqa_group=32, mapping="head-serial")
    assert compile_gemv(cfg, 16, 16383 * ELEMS).plan.gpr_out_base == 16383


def test_refuses_unknown_mapping(cfg):
    with pytest.raises(CompileError) as info:
        compile_qk(cfg, 100, 64, gqa_group=2, mapping="zigzag")
    msg = str(info.value)
    assert "'zigzag'" in msg
    assert "row-reuse" in msg
    assert "head-serial" in msg


def test_refuses_unknown_kernel(cfg):
    with pytest.raises(CompileError) as info:
        compile_kernel(cfg, "conv", d_out=4, d_in=4)
    msg = str(info.value)
    assert "'conv'" in msg
    assert "gemv" in msg


def test_operand_shape_checked(cfg):
    prog = compile_gemv(cfg, 100, 300)
    with pytest.raises(CompileError, match="shape"):
        prog.matrix_image(np.zeros((300, 100)))
    with pytest.raises(CompileError, match="shape"):
        prog.gpr_image(np.zeros(299))


# --------------------------------------------------------------------------- functional


FUNCTIONAL_CASES = [
    ("gemv", {"d_out": 100, "d_in": 300}),
    ("gemv", {"d_out": 64, "d_in": 1000}),  # streamed input: 63 tiles in two chunks
    ("qk", {"tokens": 300, "d_h": 128}),
    ("qk", {"tokens": 257, "d_h": 80, "gqa_group": 4, "mapping": "row-reuse"}),
    ("qk", {"tokens": 257, "d_h": 80, "gqa_group": 4, "mapping": "head-serial"}),
    ("qk", {"tokens": 337, "d_h": 48, "gqa_group": 2}),  # 2 + 1 tile segments
    ("sv", {"tokens": 1000, "d_h": 128, "gqa_group": 2}),  # runs at a 16-column stride
    ("sv", {"tokens": 777, "d_h": 256, "gqa_group": 4}),
    ("sv", {"tokens": 1000, "d_h": 64}),
    ("sv", {"tokens": 520, "d_h": 128, "gqa_group": 8}),
]


def operands(prog, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random FP16 ``A`` (``n_out x n_in``) and ``X`` (``G x n_in``) for ``prog``.

    For QK^T ``A`` is K (T x d_h) and ``X`` the G queries; for SV ``A`` is V^T (d_h x T) and
    ``X`` the G score vectors.
    """
    rng = np.random.default_rng(seed)
    p = prog.plan
    a = rng.standard_normal((p.n_out, p.n_in)).astype(np.float16)
    x = rng.standard_normal((p.heads, p.n_in)).astype(np.float16)
    return a, x


def simulate(prog, cfg, result, a, x) -> np.ndarray:
    out = execute(prog.commands, result, cfg, prog.matrix_image(a), prog.gpr_image(x))
    return prog.read_outputs(out)


def assert_close(y: np.ndarray, a: np.ndarray, x: np.ndarray) -> None:
    a32, x32 = a.astype(np.float32), x.astype(np.float32)
    ref = x32 @ a32.T  # Y[h] = A @ X[h]
    # Tolerance: FP16 rounding of the output (2^-10 relative, half an ulp is 2^-11) plus
    # FP32 accumulation-order error, bounded relative to sum |A||X|.
    tol = 2.0**-10 * np.abs(ref) + 1e-4 * (np.abs(x32) @ np.abs(a32).T)
    assert y.shape == ref.shape
    assert y.dtype == np.float16
    err = np.abs(y.astype(np.float32) - ref)
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert np.all(err <= tol), f"worst at {worst}: {y[worst]} vs {ref[worst]}"


@pytest.mark.parametrize("sched", SCHEDULERS)
@pytest.mark.parametrize(
    ("kind", "shape"), FUNCTIONAL_CASES, ids=[f"{k}-{s}" for k, s in FUNCTIONAL_CASES]
)
def test_functional_matches_numpy(cfg, kind, shape, sched):
    prog = compile_kernel(cfg, kind, **shape)
    a, x = operands(prog, seed=1234)
    result = run_channel(prog.commands, cfg, sched)
    assert_close(simulate(prog, cfg, result, a, x), a, x)


def test_streamed_case_really_streams(cfg):
    # Guard the functional cases above: they cover both resident and streamed inputs.
    assert not compile_gemv(cfg, 64, 1000).plan.resident
    assert compile_gemv(cfg, 64, 1000).counts["WR_INP"] == 63
    assert not compile_sv(cfg, 520, 128, gqa_group=8).plan.resident
    assert compile_qk(cfg, 300, 128).plan.resident


def test_functional_detects_broken_schedule(cfg):
    prog = compile_qk(cfg, 300, 128)  # 8 MACs accumulate into each output
    a, x = operands(prog, seed=7)
    good = run_channel(prog.commands, cfg, "dcs")
    y_good = simulate(prog, cfg, good, a, x)
    assert_close(y_good, a, x)

    cmds = prog.commands
    rd = int(np.flatnonzero(cmds["op"] == Op.RD_OUT)[3])
    macs = np.flatnonzero((cmds["op"] == Op.MAC) & (cmds["out"] == cmds["out"][rd]))
    last_mac = int(macs[macs < rd][-1])
    assert good.issue[rd] >= good.completion[last_mac]  # the correct schedule waits
    issue = good.issue.copy()
    issue[rd] = good.completion[last_mac] - 1  # drain one cycle before the last MAC lands
    broken = dataclasses.replace(good, issue=issue)

    out_good = execute(cmds, good, cfg, prog.matrix_image(a), prog.gpr_image(x))
    out_bad = execute(cmds, broken, cfg, prog.matrix_image(a), prog.gpr_image(x))
    tile = int(cmds["gpr"][rd])
    assert not np.array_equal(out_bad[tile], out_good[tile])
    assert not np.array_equal(prog.read_outputs(out_bad), y_good)


# --------------------------------------------------------------------------- batched GEMV


def expected_batch(d_out: int, d_in: int, batch: int, pass_size: int) -> dict[str, int]:
    """Closed-form counts of a batched GEMV (docs/mapping.md, "Batched FC GEMV").

    ``ACT`` is the number of row activations: every pass reopens each of the ``rows`` rows
    (a one-row matrix stays open from one pass to the next).
    """
    groups, tiles = cdiv(d_out, BANKS), cdiv(d_in, ELEMS)
    resident = pass_size * tiles <= HALF
    n_blocks = cdiv(groups, HALF // pass_size)
    rows = expected_rows(d_out, d_in)
    passes = cdiv(batch, pass_size)
    return {
        "WR_INP": batch * tiles * (1 if resident else n_blocks),
        "MAC": batch * groups * tiles,
        "RD_OUT": batch * groups,
        "ACT": passes * rows if rows > 1 else 1,
    }


# (d_out, d_in, batch, pass_size): resident and streamed inputs, one and several output
# blocks, batches that are not a multiple of the pass size, a one-row matrix, a full half.
BATCH_CASES = [
    (100, 300, 5, 2),  # 3 passes (2, 2, 1), streamed, one block
    (100, 300, 5, 5),
    (64, 1000, 7, 3),  # 3 passes (3, 3, 1), 63 tiles streamed in chunks of 10
    (128, 4096, 16, 4),  # one block of 8 groups per pass
    (128, 4096, 10, 8),  # 2 blocks of 4 groups: every input tile written twice
    (48, 200, 40, 32),  # a full buffer half, then a pass of 8
    (17, 1, 33, 32),  # one row: it stays open across passes
    (32, 32, 9, 4),  # 2 tiles: resident, 3 passes
    (1000, 5000, 3, 3),
]


@pytest.mark.parametrize(("d_out", "d_in", "batch", "pass_size"), BATCH_CASES)
def test_batched_gemv_closed_form_counts(cfg, d_out, d_in, batch, pass_size):
    prog = compile_gemv(cfg, d_out, d_in, batch, pass_size)
    validate_stream(prog.commands, cfg.channel)
    want = expected_batch(d_out, d_in, batch, pass_size)
    assert prog.counts == {k: want[k] for k in ("WR_INP", "MAC", "RD_OUT")}
    assert (prog.plan.heads, prog.plan.pass_size) == (batch, pass_size)
    assert mac_row_opens(prog.commands) == want["ACT"]
    # The scheduler opens rows where the MAC walk changes row, under every scheduler.
    for sched in SCHEDULERS:
        assert run_channel(prog.commands, cfg, sched).row_switches.shape[0] == want["ACT"]
    # Every weight tile is read once per request, and each pass opens every row once.
    mac = prog.commands[prog.commands["op"] == Op.MAC]
    addr = mac["row"].astype(np.int64) * COLS + mac["col"]
    groups, tiles = cdiv(d_out, BANKS), cdiv(d_in, ELEMS)
    assert np.array_equal(np.bincount(addr), np.full(groups * tiles, batch))


def test_batched_gemv_hand_computed_example(cfg):
    # 128 x 4096, B = 16, P = 4: 8 groups, 256 tiles, 32 rows. 4 x 256 tiles > 32: streamed
    # in chunks of 8 tiles; a block of 32 // 4 = 8 groups holds all 8, so each input tile is
    # written once: WR_INP 16 x 256 = 4096; MAC 16 x 8 x 256 = 32768; RD_OUT 16 x 8 = 128;
    # 4 passes x 32 rows = 128 activations (B = 1 passes: 16 x 32 = 512).
    prog = compile_gemv(cfg, 128, 4096, 16)
    assert prog.plan.pass_size == 4
    assert prog.counts == {"WR_INP": 4096, "MAC": 32768, "RD_OUT": 128}
    assert mac_row_opens(prog.commands) == 128


def test_default_pass_size_hand_computed(cfg):
    # Row switch estimate: tRP 16 + ACT span 3 x tRRD 6 = 18 + tRCD_MAC 28 = 62 cycles.
    # cost(P) = B*tiles*(groups + n_blocks(P)) + B*groups + ceil(B/P)*rows*62.
    # 128 x 4096, B = 16 (groups 8, tiles 256, rows 32; 4096 = 16 x 256):
    #   P=3: 4096*9 + 128 + 6*1984 = 48896; P=4: 4096*9 + 128 + 4*1984 = 44928;
    #   P=8: 4096*10 + 128 + 2*1984 = 45056 (n_blocks 2); P=16: 4096*12 + 128 + 1984 = 51264.
    # 48 x 4096, B = 16 (groups 3, rows 12): n_blocks 1 up to P = 10, so ceil(16/P) = 2 from
    # P = 8 to 10: the tie goes to the smaller P = 8 (passes 8 + 8, not 10 + 6).
    assert row_switch_estimate(cfg) == 62
    assert gemv_pass_size(cfg, 128, 4096, 16) == 4
    assert gemv_pass_size(cfg, 48, 4096, 16) == 8
    assert gemv_pass_size(cfg, 16, 4096, 16) == 16  # one group: WR_INP never repeats
    assert gemv_pass_size(cfg, 100, 300, 1) == 1
    assert compile_gemv(cfg, 48, 4096, 16).plan.pass_size == 8


# SHA-256 prefixes of compile_gemv(cfg, d_out, d_in).commands before batching existed.
B1_STREAMS = {
    (4096, 4096): "ff96c32ab61b3878",
    (100, 300): "d9c126a3a5c057dc",
    (17, 1): "1babeb31b1391c1d",
    (1, 17): "09e571916a301696",
    (1000, 5000): "564f57ccddfd78b8",
    (64, 1000): "4e0991b4b01593b6",
}


@pytest.mark.parametrize(("d_out", "d_in"), B1_STREAMS)
def test_batch_one_stream_is_unchanged(cfg, d_out, d_in):
    prog = compile_gemv(cfg, d_out, d_in, batch=1)
    digest = hashlib.sha256(prog.commands.tobytes()).hexdigest()[:16]
    assert digest == B1_STREAMS[(d_out, d_in)]
    assert prog.shape == {"d_out": d_out, "d_in": d_in}
    assert np.array_equal(prog.commands, compile_gemv(cfg, d_out, d_in).commands)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda c: compile_gemv(c, 64, 64, 0), "batch = 0"),
        (lambda c: compile_gemv(c, 64, 64, 4, 0), "pass_size = 0"),
        (lambda c: compile_gemv(c, 64, 64, 4, 5), "pass_size = 5: a pass holds at most"),
        (lambda c: compile_gemv(c, 64, 64, 40, 33), r"min\(batch, buffer half\) = 32"),
    ],
)
def test_batched_gemv_refusals(cfg, call, fragment):
    with pytest.raises(CompileError, match=fragment):
        call(cfg)


def test_batched_gemv_gpr_refusal_names_the_batch(cfg):
    # 4096 x 4096: 256 input tiles + 256 output groups per request; the GPR holds 16384
    # tiles, so at most 32 requests.
    assert gemv_max_batch(cfg, 4096, 4096) == 32
    compile_gemv(cfg, 16, 4096, 32)  # 32 x (256 + 1) = 8224 tiles fit
    with pytest.raises(CompileError, match=r"batch 33: .* use a batch <= 32 per GEMV"):
        compile_gemv(cfg, 4096, 4096, 33)


BATCH_FUNCTIONAL = [
    (100, 300, 5, None),
    (64, 1000, 7, 3),  # streamed, last pass of 1
    (48, 200, 40, 32),  # a full buffer half then 8
    (128, 4096, 6, 4),  # 2 passes (4, 2) over 32 rows
]


@pytest.mark.parametrize("sched", SCHEDULERS)
@pytest.mark.parametrize(("d_out", "d_in", "batch", "pass_size"), BATCH_FUNCTIONAL)
def test_batched_gemv_functional_matches_numpy(cfg, d_out, d_in, batch, pass_size, sched):
    prog = compile_gemv(cfg, d_out, d_in, batch, pass_size)
    w, x = operands(prog, seed=99)
    assert (w.shape, x.shape) == ((d_out, d_in), (batch, d_in))
    y = simulate(prog, cfg, run_channel(prog.commands, cfg, sched), w, x)
    assert y.shape == (batch, d_out)
    assert_close(y, w, x)  # Y == X @ W.T


def test_dcs_overlaps_the_extra_wr_inp(cfg):
    # 128 x 4096, B = 16 in 4 passes: 4096 WR_INP, 32768 MAC, 128 row opens. Opening a row
    # takes 3 x tRRD 6 = 18 (ACT span) + tRCD_MAC 28 = 46 cycles the first time and
    # tRP 16 + 46 = 62 after (tRAS and tRTP already met): 46 + 127 x 62 = 7920 cycles.
    prog = compile_gemv(cfg, 128, 4096, 16)
    static, dcs = (run_channel(prog.commands, cfg, s) for s in ("static", "dcs"))
    for r in (static, dcs):
        assert r.breakdown["mac_busy"] == 32768
        assert r.breakdown["row_switch"] == 7920
    # The static scheduler issues every WR_INP in program order on the one command bus: none
    # of the 4096 hides. DCS issues them in the cycles the MAC pipeline waits for a row:
    # fewer than 5% stay exposed, and it saves at least the 4096 WR_INP cycles.
    assert static.breakdown["io_transfer"] >= 4096
    assert dcs.breakdown["io_transfer"] < 0.05 * 4096
    assert static.cycles - dcs.cycles > 4096
    # Row reuse: per request, 16 single-request GEMVs cost more than one batched GEMV.
    one = run_channel(compile_gemv(cfg, 128, 4096).commands, cfg, "dcs")
    assert one.breakdown["row_switch"] == 46 + 31 * 62  # 32 rows
    assert 16 * one.cycles > 1.5 * dcs.cycles


def test_too_many_tokens_says_how_many_fit():
    # aim-16ch GPR: 16384 tiles of 32 B. QK^T at G = 4, d_h 128: 4 x 8 input tiles plus
    # 4 x ceil(T / 16) output tiles, so T <= (16384 - 32) / 4 x 16 = 65,408 tokens.
    cfg = load_preset("aim-16ch")
    assert attention_max_tokens(cfg, "qk", 128, 4) == 65408
    with pytest.raises(CompileError, match=r"at most 65,408 tokens fit one qk kernel"):
        compile_qk(cfg, 65409, 128, gqa_group=4)
