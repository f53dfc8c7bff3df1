"""Co-simulation of the DPA dispatcher (``rtl/dpa.py``) against the TLM
(``models/dpa/dispatcher.py``).

A :class:`DpaRun` is one dispatch: the host writes that load a program and a VA2PA table and
start it (:func:`rtl.dpa.host_writes`) plus an output ``ready`` pattern. Two back ends run it:

- :func:`simulate` — Amaranth's Python simulator (small buffers, fast tests);
- :func:`run_rtl_dpa` — the generated Verilog under cocotb + Verilator
  (``sim/verify/tb_dpa.py``), one build per configuration, cached in ``build/sim/``, every
  run in one simulator process.

Both return a :class:`DpaResult` per run: the commands and their cycles counted from the
cycle the host's ``START`` was accepted (the dispatcher's output cycles; for the pipeline the
DCS issue cycles, in program order). :func:`compare_dispatch` and :func:`compare_pipeline`
check them against :func:`models.dpa.program.expand` /
:func:`models.dpa.dispatcher.decode_times` and :func:`models.channel.run_channel` (through
:func:`models.dpa.dispatcher.run_pipeline`) and name the first differing command.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from amaranth.lib import data
from pimphony.models.config import DEFAULT_PRESET, HardwareConfig, load_preset
from pimphony.models.dpa.dispatcher import DecoderTiming, decode_times, run_pipeline
from pimphony.models.dpa.format import TranslationError
from pimphony.models.dpa.program import DpaProgram, expand
from pimphony.models.isa import HW_FIELDS, Op, describe_command, empty_stream
from pimphony.rtl import Block
from pimphony.rtl.blocks import BLOCKS, component_verilog
from pimphony.rtl.common import command_layout, issued_layout
from pimphony.rtl.dpa import DpaError, DpaPipeline, HostOp, host_writes, pack_host
from pimphony.sim.verify.runner import (
    BUILD_ROOT,
    CosimError,
    field_spec,
    is_built,
    run_amaranth,
    run_cocotb,
)

__all__ = [
    "DPA_BLOCKS",
    "DpaResult",
    "DpaRun",
    "compare_dispatch",
    "compare_pipeline",
    "dpa_built",
    "record_waves",
    "run_rtl_dpa",
    "simulate",
    "tlm_dispatch",
]

DPA_BLOCKS = (Block.DPA, Block.DPA_PIPELINE)
"""The blocks :func:`run_rtl_dpa` co-simulates (rows of :data:`rtl.blocks.BLOCKS`)."""
DRAIN_QUIET_CYCLES = 400
"""Pipeline runs end this many cycles after the DCS's last issue once the dispatcher is idle."""


@dataclass(frozen=True)
class DpaRun:
    """One dispatch: host writes (the last one is ``START``) and the output ``ready`` pattern."""

    name: str
    writes: tuple[tuple[int, int, int], ...]
    ready_pattern: tuple[int, ...] | None = None
    max_cycles: int = 200_000


@dataclass
class DpaResult:
    """RTL outcome of a run: commands (program order), their cycles from ``START``, errors,
    and the clock cycles the testbench simulated (host writes and, for the pipeline, the
    drain included; 0 if not counted)."""

    commands: np.ndarray
    cycles: np.ndarray
    error_code: int
    error_row: int
    done_cycle: int
    cycles_simulated: int = 0

    @property
    def error(self) -> DpaError:
        """The dispatcher's error code."""
        return DpaError(self.error_code)


def make_run(
    name: str,
    program: DpaProgram,
    t_cur: int,
    table: np.ndarray | list[int],
    ready_pattern: tuple[int, ...] | None = None,
    **kw,
) -> DpaRun:
    """A :class:`DpaRun` loading ``program`` and ``table`` and dispatching for ``T_cur``."""
    return DpaRun(name, tuple(host_writes(program, t_cur, table, **kw)), ready_pattern)


def tlm_dispatch(
    program: DpaProgram,
    t_cur: int,
    table: np.ndarray | list[int],
    timing: DecoderTiming | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The TLM's expanded stream and :func:`decode_times` for one dispatch."""
    stream = expand(program, t_cur, np.asarray(table, dtype=np.int64))
    times = decode_times(stream.shape[0], len(program.rules), timing, program.body_words)
    return stream, times


def _first_difference(want: np.ndarray, got: np.ndarray) -> int | None:
    n = min(want.shape[0], got.shape[0])
    for f in HW_FIELDS:
        d = np.flatnonzero(want[f][:n].astype(np.int64) != got[f][:n].astype(np.int64))
        if d.size:
            k = int(d[0])
            for f2 in HW_FIELDS:  # the earliest command differing in any field
                d2 = np.flatnonzero(want[f2][:k].astype(np.int64) != got[f2][:k].astype(np.int64))
                if d2.size:
                    k = min(k, int(d2[0]))
            return k
    return None if want.shape[0] == got.shape[0] else n


def compare_dispatch(
    name: str,
    program: DpaProgram,
    t_cur: int,
    table: np.ndarray | list[int],
    result: DpaResult,
    timing: DecoderTiming | None = None,
    check_cycles: bool = True,
) -> str | None:
    """``None`` if the RTL emitted the TLM's commands (at the predicted cycles), else a message
    naming the first differing command.

    Where the TLM's expansion stops at an unmapped virtual row (:class:`TranslationError`),
    the RTL must stop there too: the commands before the faulting MAC (at the predicted
    cycles), then error ``UNMAPPED`` naming the same virtual row.
    """
    try:
        want, times = tlm_dispatch(program, t_cur, table, timing)
    except TranslationError as exc:
        return _compare_unmapped(name, program, t_cur, table, exc, result, timing, check_cycles)
    return _compare_dispatched(name, want, times, result, check_cycles)


def _compare_unmapped(
    name: str,
    program: DpaProgram,
    t_cur: int,
    table: np.ndarray | list[int],
    exc: TranslationError,
    result: DpaResult,
    timing: DecoderTiming | None,
    check_cycles: bool,
) -> str | None:
    """:func:`compare_dispatch` of a dispatch the TLM refuses at the unmapped row of ``exc``."""
    k = exc.command  # the faulting MAC, as the TLM's expansion found it
    assert k is not None
    virtual = expand(program, t_cur, None)  # untranslated: MAC rows are virtual rows
    tab = np.asarray(table, dtype=np.int64).reshape(-1)
    vrow = virtual["row"][virtual["op"] == Op.MAC].astype(np.int64)
    if result.error != DpaError.UNMAPPED or result.error_row != exc.virtual_row:
        return (
            f"{name}: TLM stops at MAC command {k} (virtual row {exc.virtual_row} unmapped); "
            f"RTL error {result.error.name} (virtual row {result.error_row}) after "
            f"{result.commands.shape[0]} commands"
        )
    # The holes mapped anywhere (row 0): the commands before the faulting MAC never read them.
    filled = np.zeros(int(vrow.max()) + 1, dtype=np.int64)
    filled[: tab.shape[0]] = np.maximum(tab[: filled.shape[0]], 0)
    want, times = tlm_dispatch(program, t_cur, filled, timing)
    prefix = replace(result, error_code=0)
    return _compare_dispatched(name, want[:k], times[:k], prefix, check_cycles)


def _compare_dispatched(
    name: str, want: np.ndarray, times: np.ndarray, result: DpaResult, check_cycles: bool
) -> str | None:
    """:func:`compare_dispatch` given the TLM's stream ``want`` and its ``times``."""
    got = result.commands
    if result.error_code:
        return (
            f"{name}: RTL stopped with error {result.error.name} (virtual row "
            f"{result.error_row}) after {got.shape[0]} of {want.shape[0]} commands"
        )
    k = _first_difference(want, got)
    if k is not None:
        w = describe_command(want, k) if k < want.shape[0] else "nothing"
        r = describe_command(got, k) if k < got.shape[0] else "nothing"
        return (
            f"{name}: first differing command #{k}: TLM {w}, RTL {r} "
            f"(TLM {want.shape[0]} commands, RTL {got.shape[0]})"
        )
    if check_cycles:
        d = np.flatnonzero(times != result.cycles)
        if d.size:
            k = int(d[0])
            return (
                f"{name}: command #{k} ({describe_command(want, k)}) at RTL cycle "
                f"{int(result.cycles[k])}, TLM decode_times {int(times[k])}; "
                f"{d.size} of {times.size} commands differ"
            )
    return None


def compare_pipeline(
    name: str,
    cfg: HardwareConfig,
    program: DpaProgram,
    t_cur: int,
    table: np.ndarray | list[int],
    result: DpaResult,
    timing: DecoderTiming | None = None,
) -> str | None:
    """``None`` if dispatcher -> DCS issued every command in the TLM pipeline's cycle
    (:func:`models.dpa.dispatcher.run_pipeline`, the twin of :class:`rtl.dpa.DpaPipeline`)."""
    want, times, schedule = run_pipeline(cfg, program, t_cur, table, timing)
    msg = _compare_dispatched(name, want, times, result, check_cycles=False)
    if msg:
        return msg
    tlm = schedule.issue
    d = np.flatnonzero(tlm != result.cycles)
    if d.size == 0:
        return None
    k = int(d[0])
    return (
        f"{name}: pipeline command #{k} ({describe_command(want, k)}) issued at RTL cycle "
        f"{int(result.cycles[k])}, TLM cycle {int(tlm[k])}; {d.size} of {tlm.size} differ"
    )


# ---------------------------------------------------------------------------------------------
# Amaranth simulator
# ---------------------------------------------------------------------------------------------


def simulate(dut, run: DpaRun, vcd_path: str | None = None) -> DpaResult:
    """Run ``run`` on a :class:`DpaDispatcher` or :class:`DpaPipeline` in Amaranth's simulator."""
    pipeline = isinstance(dut, DpaPipeline)
    writes = list(run.writes)
    ready = run.ready_pattern or (1,)
    got: list[tuple[int, int, dict]] = []  # (order key, cycle, fields)
    outcome: dict[str, int] = {}
    o = dut.o.payload.cmd if pipeline else dut.o.payload

    async def bench(ctx):
        k, cycle, start, start_at, quiet = 0, 0, None, 0, 0
        while True:
            offering = k < len(writes)
            ctx.set(dut.host.valid, int(offering))
            if offering:
                op, addr, value = writes[k]
                ctx.set(dut.host.payload, {"op": op, "addr": addr, "data": value})
            r = ready[cycle % len(ready)]
            ctx.set(dut.o.ready, r)
            sampled = await ctx.tick().sample(
                dut.host.ready,
                dut.o.valid,
                *(getattr(o, f) for f in HW_FIELDS),
                dut.busy,
                dut.error_code,
                dut.error_row,
                *((dut.o.payload.seq, dut.o.payload.cycle, dut.cycle) if pipeline else ()),
            )
            h_ready, o_valid, *vals = sampled[2:]
            busy, ecode, erow = vals[5:8]
            if start is not None and o_valid and r:
                fields = dict(zip(HW_FIELDS, vals[:5], strict=True))
                if pipeline:
                    got.append((vals[8], vals[9] - start_at, fields))
                else:
                    got.append((len(got), cycle - start, fields))
            if start is not None and cycle > start and not busy and "done" not in outcome:
                outcome.update(code=ecode, row=erow, done=cycle - start)
            if "done" in outcome:
                if not pipeline:
                    return
                quiet = 0 if o_valid else quiet + 1  # the DCS drains after the dispatcher
                if quiet > DRAIN_QUIET_CYCLES:
                    return
            if offering and h_ready:
                if writes[k][0] == HostOp.START:
                    start, start_at = cycle, (vals[10] if pipeline else cycle)
                k += 1
            cycle += 1
            if cycle > run.max_cycles:
                raise AssertionError(f"{run.name}: not done after {run.max_cycles} cycles")

    run_amaranth(dut, bench, vcd_path=vcd_path)
    return _result(got, outcome)


def _result(got: list[tuple[int, int, dict]], outcome: dict[str, int]) -> DpaResult:
    got = sorted(got, key=lambda x: x[0])
    stream = empty_stream(len(got))
    for i, (_, _, fields) in enumerate(got):
        for f, v in fields.items():
            stream[f][i] = v
    cycles = np.array([c for _, c, _ in got], dtype=np.int64)
    return DpaResult(
        stream,
        cycles,
        int(outcome.get("code", 0)),
        int(outcome.get("row", 0)),
        int(outcome.get("done", -1)),
        int(outcome.get("cycles_simulated", 0)),
    )


# ---------------------------------------------------------------------------------------------
# cocotb + Verilator
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _verilog(
    block: Block, cfg: HardwareConfig, dispatcher_args: tuple[tuple[str, object], ...]
) -> tuple[str, data.StructLayout]:
    """The Verilog of ``block`` and its host-write layout (converted once per process: the
    preset-sized buffers take seconds to convert)."""
    dut = BLOCKS[block].build(cfg, **dict(dispatcher_args))
    return component_verilog(dut, block), dut.host_layout


def dpa_built(block: str, cfg: HardwareConfig, build_root: Path = BUILD_ROOT) -> bool:
    """Whether :func:`run_rtl_dpa` finds ``block`` built for ``cfg`` (Verilator, no waves)."""
    return is_built(block, _verilog(Block(block), cfg, ())[0], build_root=build_root)


def run_rtl_dpa(
    block: str,
    cfg: HardwareConfig,
    runs: list[DpaRun],
    simulator: str = "verilator",
    waves: bool = False,
    build_root: Path = BUILD_ROOT,
    **dispatcher_args,
) -> dict[str, DpaResult]:
    """Run every dispatch of ``runs`` on the generated Verilog of ``block`` (``dpa`` or
    ``dpa_pipeline``) under cocotb; ``{run name: DpaResult}``.

    With ``waves`` the simulator also writes a waveform into the build directory; its path is
    returned under the key ``"__waves__"``.
    """
    if block not in DPA_BLOCKS:
        raise CosimError(f"block {block!r} is unknown; allowed: {', '.join(DPA_BLOCKS)}")
    text, host = _verilog(Block(block), cfg, tuple(sorted(dispatcher_args.items())))
    pipeline = block == Block.DPA_PIPELINE
    out_layout = issued_layout(cfg) if pipeline else command_layout(cfg)
    cmd_off = out_layout["cmd"].offset if pipeline else 0
    job = {
        "pipeline": pipeline,
        "drain_quiet_cycles": DRAIN_QUIET_CYCLES,
        "cmd_fields": {n: field_spec(command_layout(cfg), n, cmd_off) for n in HW_FIELDS},
        "issued_fields": {n: field_spec(out_layout, n) for n in ("seq", "cycle")}
        if pipeline
        else {},
        "runs": [
            {
                "name": r.name,
                "writes": [pack_host(host, *w) for w in r.writes],
                "start": [i for i, w in enumerate(r.writes) if w[0] == HostOp.START][-1],
                "ready_pattern": list(r.ready_pattern) if r.ready_pattern else None,
                "max_cycles": r.max_cycles,
            }
            for r in runs
        ],
    }
    run = run_cocotb(
        block,
        text,
        "pimphony.sim.verify.tb_dpa",
        job,
        simulator=simulator,
        waves=waves,
        build_root=build_root,
    )
    out: dict = {}
    for name, r in run.result.items():
        got = [(key, cyc, dict(zip(HW_FIELDS, vals, strict=True))) for key, cyc, vals in r["got"]]
        out[name] = _result(got, r)
    if run.waves is not None:
        out["__waves__"] = run.waves
    return out


def record_waves(
    cfg: HardwareConfig | None = None,
    kernel: str = "qk",
    d_h: int = 64,
    t_cur: int = 40,
    simulator: str = "verilator",
) -> Path:
    """Dispatch a small compiler program on the ``dpa`` block with waves on; the path of the
    waveform in the build directory (``sim.eda.waves.record_block_waves`` copies it out).

    For ``make wave BLOCK=dpa``: QK^T (or SV) at ``d_h``, GQA group 1, ``T_cur`` tokens, with a
    shuffled VA2PA table; the dump holds the host writes, the pre-decode pass and the walk.
    The run is checked against the TLM (:func:`compare_dispatch`, cycles included) first;
    :class:`~sim.verify.runner.CosimError` if it differs.
    """
    from pimphony.compiler.dpa import encode_kernel

    cfg = cfg or load_preset(DEFAULT_PRESET)
    prog = encode_kernel(cfg, kernel, d_h, 1, 4096)
    stream = expand(prog, t_cur, None)
    rows = int(stream["row"][stream["op"] == Op.MAC].max()) + 1
    table = np.random.default_rng(7).permutation(cfg.channel.rows_per_bank)[:rows]
    run = make_run(f"{kernel}-d{d_h}-T{t_cur}", prog, t_cur, table)
    res = run_rtl_dpa(Block.DPA, cfg, [run], simulator=simulator, waves=True)
    msg = compare_dispatch(run.name, prog, t_cur, table, res[run.name])
    if msg:
        raise CosimError(msg)
    return Path(res["__waves__"])
