"""The RTL DPA dispatcher (rtl/dpa.py) against the TLM (models/dpa/dispatcher.py), docs/dpa.md.

Fast tests run the dispatcher with small buffers in Amaranth's simulator on hand-written and
compiler programs. The co-simulation tests run the generated Verilog (preset buffer sizes)
under cocotb + Verilator, one build per block, every dispatch in one simulator process:
expanded commands and their cycles vs ``expand`` / ``decode_times``, output back-pressure,
dispatcher -> DCS vs ``run_channel(..., valid_gaps=...)``, unmapped rows, a corrupted entry.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Fragment
from pimphony.compiler.dpa import encode_kernel
from pimphony.models.config import load_preset
from pimphony.models.dpa.dispatcher import Dispatcher
from pimphony.models.dpa.format import (
    Command,
    DynLoop,
    DynModi,
    Header,
    Kind,
    Rule,
    Target,
    TranslationError,
    word_fields,
)
from pimphony.models.dpa.program import DpaProgram, expand
from pimphony.models.isa import Op, field_widths
from pimphony.rtl.dpa import DpaDispatcher, DpaError, DpaPipeline, HostOp, buffer_bytes, host_writes
from pimphony.sim.verify.dpa import (
    DpaRun,
    compare_dispatch,
    compare_pipeline,
    make_run,
    run_rtl_dpa,
    simulate,
)

CFG = load_preset("aim-16ch")
SMALL = {"command_words": 256, "map_entries": 1024}
ROWS = CFG.channel.rows_per_bank


def _table(prog: DpaProgram, t: int, seed: int, pool: int = ROWS) -> np.ndarray:
    """A random VA2PA permutation covering every virtual row the dispatch touches."""
    s = expand(prog, t, None)
    mac = s["op"] == Op.MAC
    n = int(s["row"][mac].max()) + 1 if mac.any() else 1
    return np.random.default_rng(seed).permutation(pool)[:n]


def _channel_fields(stream: np.ndarray) -> np.ndarray:
    """The stream without ``gpr`` (the channel command layout carries no GPR address)."""
    out = stream.copy()
    out["gpr"] = 0
    return out


def _loop(body: list, count: int | None = None, rule: int | None = None) -> list:
    return [DynLoop(le=len(body), count=count, rule=rule), *body]


def _custom_program() -> DpaProgram:
    """Zero-trip loops, loops ending on the same word, a body of only a zero-trip loop,
    rule-scaled ROW/COL terms with carries, wrapping and negative terms, a GPR term,
    rules between loops."""
    body = [
        *_loop(
            [
                DynModi(Target.GBUF, 1, level=0),
                DynModi(Target.ROW, 1, level=1),
                DynModi(Target.COL, 5, level=0, rule=1),
                DynModi(Target.OUT, -1, level=0),
                DynModi(Target.GPR, 3, level=0),
                Command(Op.MAC, gbuf=62, row=0, col=60, out=10),
            ],
            rule=0,
        ),
        *_loop(_loop([Command(Op.WR_INP, gbuf=1)], rule=2), count=3),
        *_loop(
            _loop([DynModi(Target.OUT, 1, level=1), Command(Op.RD_OUT, out=5)], rule=1),
            count=2,
        ),
    ]
    words = [
        Header(kernel=0, max_tokens=100),
        Rule(0, offset=-1, divisor=16),  # floor((T-1)/16): 0 for T <= 16
        Rule(1, modulus=3),  # T mod 3: 0 for T = 3, 6, ...
        Rule(2, divisor=1000),  # always 0 here
        *_loop(body, count=2),
        Rule(3, offset=5, divisor=7, negate=True, add=20, clamp=9),
        *_loop([DynModi(Target.ROW, 2, rule=3), Command(Op.MAC, row=1, col=63, out=63)], count=1),
    ]
    return DpaProgram.from_instructions(words, CFG)


# ---------------------------------------------------------------------------------------------
# Amaranth simulator: small buffers, small programs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", [1, 3, 17, 35, 50, 100])
def test_amaranth_custom_program(t: int) -> None:
    prog = _custom_program()
    table = _table(prog, t, seed=t, pool=SMALL["map_entries"])
    res = simulate(DpaDispatcher(CFG, **SMALL), make_run(f"custom-{t}", prog, t, table))
    assert compare_dispatch(f"custom-{t}", prog, t, table, res) is None


@pytest.mark.parametrize(("kind", "d_h", "g"), [("qk", 64, 1), ("sv", 64, 1), ("qk", 32, 2)])
@pytest.mark.parametrize("t", [1, 20, 47])
def test_amaranth_compiler_programs(kind: str, d_h: int, g: int, t: int) -> None:
    prog = encode_kernel(CFG, kind, d_h, g, 1024)
    table = _table(prog, t, seed=d_h + t, pool=SMALL["map_entries"])
    run = make_run("x", prog, t, table, table_base=7)
    res = simulate(DpaDispatcher(CFG, **SMALL), run)
    assert compare_dispatch(f"{kind}-{d_h}-{g}-{t}", prog, t, table, res) is None


def test_amaranth_backpressure_and_pipeline() -> None:
    prog = encode_kernel(CFG, "qk", 64, 1, 1024)
    t = 40
    table = _table(prog, t, seed=5, pool=SMALL["map_entries"])
    ready = tuple(int(r) for r in np.random.default_rng(5).integers(0, 2, 23))
    res = simulate(DpaDispatcher(CFG, **SMALL), make_run("bp", prog, t, table, ready))
    assert compare_dispatch("bp", prog, t, table, res, check_cycles=False) is None
    res = simulate(DpaPipeline(CFG, **SMALL), make_run("pipe", prog, t, table))
    assert compare_pipeline("pipe", CFG, prog, t, table, res) is None


def test_amaranth_errors() -> None:
    prog = encode_kernel(CFG, "qk", 64, 1, 1024)
    dut = DpaDispatcher(CFG, **SMALL)
    table = _table(prog, 100, seed=1, pool=SMALL["map_entries"])
    # T_cur above max_tokens: no command, TOKENS.
    res = simulate(dut, make_run("big", prog, 2000, table))
    assert res.error == DpaError.TOKENS and res.commands.shape[0] == 0
    # Released request (T_cur = 0).
    writes = host_writes(prog, 100, table)
    run = DpaRun("released", (*writes[:-1], (HostOp.RELEASE, 0, 0), writes[-1]))
    assert simulate(dut, run).error == DpaError.TOKENS
    # More plain commands than the decoded table holds; loops deeper than the stack.
    res = simulate(DpaDispatcher(CFG, **SMALL, decoded_entries=2), make_run("f", prog, 9, table))
    assert res.error == DpaError.PROGRAM
    res = simulate(DpaDispatcher(CFG, **SMALL, max_depth=1), make_run("d", prog, 9, table))
    assert res.error == DpaError.PROGRAM
    # Unmapped virtual row: the commands before it, then UNMAPPED with the row.
    t = 700
    holed = _table(prog, t, seed=2, pool=SMALL["map_entries"])
    holed[2] = -1
    with pytest.raises(TranslationError) as info:
        expand(prog, t, holed)
    res = simulate(dut, make_run("hole", prog, t, holed))
    assert res.error == DpaError.UNMAPPED and res.error_row == info.value.virtual_row == 2
    full = holed.copy()
    full[2] = SMALL["map_entries"] - 1
    want = _channel_fields(expand(prog, t, full))
    assert np.array_equal(res.commands, want[: res.commands.shape[0]])


def test_host_registers() -> None:
    from amaranth.sim import Simulator

    dut = DpaDispatcher(CFG, **SMALL)
    seen = {}

    async def bench(ctx):
        for op, addr, value in [
            (HostOp.SET_REQUEST, 0, 7 | (3 << 16)),
            (HostOp.SET_TOKENS, 0, 41),
            (HostOp.ADVANCE, 0, 0),
            (HostOp.ADVANCE, 0, 0),
        ]:
            ctx.set(dut.host.payload, {"op": op, "addr": addr, "data": value})
            ctx.set(dut.host.valid, 1)
            await ctx.tick().until(dut.host.ready)
        ctx.set(dut.host.valid, 0)
        await ctx.tick()
        seen["regs"] = (ctx.get(dut.request), ctx.get(dut.t_cur), ctx.get(dut.layer))
        ctx.set(dut.host.payload, {"op": HostOp.RELEASE, "addr": 0, "data": 0})
        ctx.set(dut.host.valid, 1)
        await ctx.tick().until(dut.host.ready)
        ctx.set(dut.host.valid, 0)
        await ctx.tick()
        seen["released"] = (ctx.get(dut.request), ctx.get(dut.t_cur), ctx.get(dut.layer))

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(bench)
    sim.run()
    assert seen == {"regs": (7, 43, 3), "released": (0, 0, 0)}
    d = Dispatcher(CFG)  # the TLM's registers behave the same way
    d.set_tokens(7, 41)
    assert d.advance(7, 2) == 43


@pytest.mark.parametrize("preset", ["aim-16ch", "aim-32ch"])
def test_buffers_sized_from_preset(preset: str) -> None:
    cfg = load_preset(preset)
    sizes = buffer_bytes(cfg)
    assert sizes["command_buffer"] == cfg.module.dpa_command_buffer_bytes
    assert sizes["va2pa"] == Dispatcher(cfg).address_map_bytes
    assert sum(sizes.values()) < 200 * 1024  # LoL-PIM 5.3 / PIMphony VII-C
    # Widths come from models/: the command layout and the DPA word fields.
    dut = DpaDispatcher(cfg, **SMALL)
    Fragment.get(dut, None)
    assert dut.buffer_bytes()["command_buffer"] == SMALL["command_words"] * 8
    assert len(dut.error_row) == word_fields(Kind.MAC)["row"][1]
    assert len(dut.o.payload.row) == field_widths(cfg.channel)["row"]


# ---------------------------------------------------------------------------------------------
# cocotb + Verilator: preset buffer sizes
# ---------------------------------------------------------------------------------------------

SHAPES = [
    ("qk", 64, 1),
    ("qk", 128, 1),
    ("sv", 64, 1),
    ("sv", 128, 1),
    ("qk", 64, 4),  # GQA: accepted by the encoder (row reuse)
    ("sv", 64, 4),
    # GQA shapes the encoder refused before the compiler's row-aligned runs
    # (docs/mapping.md): QK^T power-of-two segments, SV strided runs; SV d_h 256, G 8 has
    # loop depth 6 (the RTL's max_depth).
    ("qk", 48, 4),
    ("qk", 80, 2),
    ("sv", 128, 2),
    ("sv", 256, 8),
]
TOKENS = [1, 16, 100, 529]
MAX_T = 8192
_rng = np.random.default_rng(2025)
CASES: dict[str, tuple] = {}
for _kind, _d, _g in SHAPES:
    _prog = encode_kernel(CFG, _kind, _d, _g, MAX_T)
    for _t in [*TOKENS, int(_rng.integers(17, 1200))]:
        _name = f"{_kind}-d{_d}-g{_g}-T{_t}"
        CASES[_name] = (_prog, _t, _table(_prog, _t, seed=_t + _d), int(_rng.integers(0, 4000)))
SLOW_CASES: dict[str, tuple] = {}
for _kind in ("qk", "sv"):
    _prog = encode_kernel(CFG, _kind, 128, 1, MAX_T)
    for _t in (4097, 8192):
        SLOW_CASES[f"{_kind}-d128-g1-T{_t}"] = (_prog, _t, _table(_prog, _t, seed=_t), 0)
READY = tuple(int(r) for r in _rng.integers(0, 2, 41))
BACKPRESSURE = ["qk-d128-g1-T529", "sv-d128-g1-T529", "qk-d64-g4-T100", "sv-d64-g4-T529"]
PIPELINE = ["qk-d64-g1-T100", "qk-d128-g1-T529", "sv-d128-g1-T529", "sv-d64-g4-T100"]
PIPELINE += [n for n in CASES if n.endswith("T16")][:2] + ["qk-d48-g4-T529", "sv-d128-g2-T100"]


def _runs(cases: dict[str, tuple], names: list[str], ready=None, suffix="") -> list[DpaRun]:
    out = []
    for name in names:
        prog, t, table, base = cases[name]
        out.append(make_run(name + suffix, prog, t, table, ready, table_base=base))
    return out


def _error_runs() -> tuple[list[DpaRun], dict]:
    prog = encode_kernel(CFG, "sv", 128, 1, MAX_T)
    t = 700
    table = _table(prog, t, seed=9)
    holed = table.copy()
    holed[3] = -1
    short = table[:2]
    corrupt = table.copy()
    corrupt[1] = (corrupt[1] + 1) % ROWS  # off-by-one physical row in one VA2PA entry
    cases = {"hole": holed, "short": short, "corrupt": corrupt}
    runs = [make_run(f"err-{n}", prog, t, tab) for n, tab in cases.items()]
    return runs, {"prog": prog, "t": t, "table": table, **cases}


ERROR_RUNS, ERRORS = _error_runs()


@pytest.fixture(scope="module")
def dpa_results():
    runs = _runs(CASES, list(CASES)) + _runs(CASES, BACKPRESSURE, READY, "-ready") + ERROR_RUNS
    return run_rtl_dpa("dpa", CFG, runs)


@pytest.fixture(scope="module")
def pipeline_results():
    return run_rtl_dpa("dpa_pipeline", CFG, _runs(CASES, PIPELINE))


@pytest.mark.parametrize("name", list(CASES))
def test_cosim_expansion_cycle_exact(dpa_results, name: str) -> None:
    prog, t, table, _ = CASES[name]
    res = dpa_results[name]
    msg = compare_dispatch(name, prog, t, table, res)
    assert msg is None, msg
    assert res.cycles[0] == len(prog.words) + 3  # header, rules, pre-decode, 3 pipeline


@pytest.mark.parametrize("name", BACKPRESSURE)
def test_cosim_backpressure_same_commands(dpa_results, name: str) -> None:
    prog, t, table, _ = CASES[name]
    res = dpa_results[name + "-ready"]
    msg = compare_dispatch(name, prog, t, table, res, check_cycles=False)
    assert msg is None, msg
    assert res.cycles[-1] > dpa_results[name].cycles[-1]  # the stalls really happened


@pytest.mark.parametrize("name", PIPELINE)
def test_cosim_pipeline_issue_cycles(pipeline_results, name: str) -> None:
    prog, t, table, _ = CASES[name]
    msg = compare_pipeline(name, CFG, prog, t, table, pipeline_results[name])
    assert msg is None, msg


@pytest.mark.parametrize("case", ["hole", "short"])
def test_cosim_unmapped_row_raises_error_flag(dpa_results, case: str) -> None:
    prog, t, table = ERRORS["prog"], ERRORS["t"], ERRORS[case]
    with pytest.raises(TranslationError) as info:
        expand(prog, t, table)
    res = dpa_results[f"err-{case}"]
    assert res.error == DpaError.UNMAPPED
    assert res.error_row == info.value.virtual_row
    # Everything before the faulting MAC is the TLM's stream.
    want = _channel_fields(expand(prog, t, ERRORS["table"]))
    n = res.commands.shape[0]
    assert n > 0 and np.array_equal(res.commands, want[:n])
    assert want["op"][n] == Op.MAC and f"MAC command {n})" in str(info.value)


def test_cosim_corrupted_entry_is_reported(dpa_results) -> None:
    prog, t, table = ERRORS["prog"], ERRORS["t"], ERRORS["table"]
    msg = compare_dispatch("err-corrupt", prog, t, table, dpa_results["err-corrupt"])
    want = expand(prog, t, table)
    k = int(np.flatnonzero((want["op"] == Op.MAC) & (want["row"] == table[1]))[0])
    assert msg is not None and f"first differing command #{k}:" in msg
    assert f"row={table[1]} " in msg and f"row={(table[1] + 1) % ROWS} " in msg


@pytest.mark.slow
def test_cosim_long_contexts() -> None:
    names = list(SLOW_CASES)
    res = run_rtl_dpa("dpa", CFG, _runs(SLOW_CASES, names))
    pipe = run_rtl_dpa("dpa_pipeline", CFG, _runs(SLOW_CASES, names))
    for name in names:
        prog, t, table, _ = SLOW_CASES[name]
        assert compare_dispatch(name, prog, t, table, res[name]) is None
        assert compare_pipeline(name, CFG, prog, t, table, pipe[name]) is None
