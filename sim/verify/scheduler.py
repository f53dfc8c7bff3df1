"""RTL-vs-TLM checks of the scheduler blocks (static_sched, pingpong, dcs).

Two back ends run a scheduler block on command streams and return the RTL issue cycle of every
command: :func:`simulate_scheduler` drives a component in Amaranth's Python simulator (fast
enough for a few thousand commands); :func:`run_rtl` builds the generated Verilog for ``cfg``
(:func:`sim.verify.runner.run_cocotb`, cached per configuration in ``build/sim/``) and runs
``sim/verify/tb_scheduler.py`` on every stream in one simulator process. ``compare_with_tlm``
turns a mismatch into a message naming the stream, the first differing command and both
cycles (the TLM runs under the stream's input gaps, :func:`expectation`). A schedule recorded
under output back-pressure is checked against the scheduler's rules with
``models.channel.check_schedule``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pimphony.models.channel import check_schedule, run_channel
from pimphony.models.config import HardwareConfig
from pimphony.models.isa import HW_FIELDS, describe_command
from pimphony.models.pingpong import PingPongError
from pimphony.rtl.blocks import BLOCKS, SCHEDULER_OF_BLOCK, generate_verilog
from pimphony.rtl.common import command_layout, issued_layout
from pimphony.sim.verify.runner import (
    BUILD_ROOT,
    CosimError,
    check_cycle_budget,
    field_spec,
    pack_fields,
    record_issue,
    run_amaranth,
    run_cocotb,
)

__all__ = [
    "RtlStream",
    "compare_with_tlm",
    "expectation",
    "first_difference",
    "max_cycles",
    "run_rtl",
    "simulate_scheduler",
]


@dataclass(frozen=True)
class RtlStream:
    """One stream to run: commands, input ``valid`` gaps and output ``ready`` pattern."""

    name: str
    commands: np.ndarray
    valid_gaps: tuple[int, ...] | None = None
    ready_pattern: tuple[int, ...] | None = None


def max_cycles(n: int) -> int:
    """Cycles a harness lets a stream of ``n`` commands run before it gives up."""
    return 200 * n + 10_000


def simulate_scheduler(
    dut,
    stream: np.ndarray,
    valid_gaps: Sequence[int] | None = None,
    ready_pattern: Sequence[int] | None = None,
    max_cycles: int = 10_000_000,
    vcd_path: str | None = None,
) -> np.ndarray:
    """Issue cycle of every command of ``stream`` (indexed by program order).

    ``valid_gaps[k]`` idle cycles are inserted before offering command ``k``;
    ``ready_pattern[c]`` (cycled) is the output ``ready`` in cycle ``c``.
    """
    n = int(stream.shape[0])
    issue = np.full(n, -1, dtype=np.int64)
    rows = [{f: int(stream[f][k]) for f in HW_FIELDS} for k in range(n)]

    async def producer(ctx):
        for k in range(n):
            for _ in range(valid_gaps[k] if valid_gaps is not None else 0):
                await ctx.tick()
            ctx.set(dut.i.payload, rows[k])
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)

    async def consumer(ctx):
        got = 0
        cycle = 0
        while got < n:
            ready = 1 if ready_pattern is None else ready_pattern[cycle % len(ready_pattern)]
            ctx.set(dut.o.ready, ready)
            _, _, valid, seq, at = await ctx.tick().sample(
                dut.o.valid, dut.o.payload.seq, dut.o.payload.cycle
            )
            if valid and ready:
                record_issue(issue, seq, at, "command")
                got += 1
            cycle += 1
            check_cycle_budget(cycle, max_cycles, got, n, "commands")

    run_amaranth(dut, consumer, background=producer, vcd_path=vcd_path)
    return issue


def run_rtl(
    block: str,
    cfg: HardwareConfig,
    streams: list[RtlStream],
    simulator: str = "verilator",
    waves: bool = False,
    build_root: Path = BUILD_ROOT,
) -> dict[str, np.ndarray]:
    """RTL issue cycles (by program order) of every stream; ``{name: issue}``.

    With ``waves`` the simulator also writes a waveform into the build directory; its path
    (:attr:`CocotbRun.waves`) is returned under the key ``"__waves__"``.
    """
    if block not in SCHEDULER_OF_BLOCK:
        raise CosimError(
            f"block {block!r} is not a scheduler block; allowed: {', '.join(SCHEDULER_OF_BLOCK)}"
        )
    out_layout = issued_layout(cfg)
    job = {
        "seq_field": field_spec(out_layout, "seq"),
        "cycle_field": field_spec(out_layout, "cycle"),
        "streams": [
            {
                "name": s.name,
                "payloads": pack_fields(command_layout(cfg), s.commands),
                "valid_gaps": list(s.valid_gaps) if s.valid_gaps else None,
                "ready_pattern": list(s.ready_pattern) if s.ready_pattern else None,
                "max_cycles": max_cycles(int(s.commands.shape[0])),
            }
            for s in streams
        ],
    }
    text = generate_verilog(block, cfg, **BLOCKS[block].cosim_args)
    run = run_cocotb(
        block,
        text,
        "pimphony.sim.verify.tb_scheduler",
        job,
        simulator=simulator,
        waves=waves,
        build_root=build_root,
    )
    out: dict = {name: np.asarray(r["issue"], dtype=np.int64) for name, r in run.result.items()}
    if run.waves is not None:
        out["__waves__"] = run.waves
    return out


def expectation(cfg: HardwareConfig, sched: str, stream: RtlStream) -> np.ndarray | None:
    """What ``stream``'s RTL schedule is checked against: the TLM's issue cycles under the
    stream's input gaps (exact), or ``None`` under a ready pattern or ping-pong gaps the TLM
    refuses (then only ``models.channel.check_schedule``'s rules apply).

    Raises
    ------
    PingPongError
        The TLM refuses the stream even without gaps (outside its contract).
    """
    plain = run_channel(stream.commands, cfg, sched).issue
    if stream.ready_pattern is not None:
        return None
    if stream.valid_gaps is None:
        return plain
    try:
        return run_channel(stream.commands, cfg, sched, valid_gaps=stream.valid_gaps).issue
    except PingPongError:
        return None


def first_difference(
    label: str, commands: np.ndarray, tlm_issue: np.ndarray, rtl_issue: np.ndarray
) -> str | None:
    """``None`` if the RTL issued every command in the TLM's cycle, else a message naming the
    first differing command, both cycles and how many differ (``label`` names the stream)."""
    diff = np.flatnonzero(tlm_issue != rtl_issue)
    if diff.size == 0:
        return None
    k = int(diff[0])
    return (
        f"{label}: first differing command #{k} ({describe_command(commands, k)}): RTL issued "
        f"at cycle {int(rtl_issue[k])}, TLM at cycle {int(tlm_issue[k])}; {diff.size} of "
        f"{tlm_issue.size} commands differ"
    )


def compare_with_tlm(
    block: str, cfg: HardwareConfig, stream: RtlStream, rtl_issue: np.ndarray
) -> str | None:
    """``None`` if the RTL schedule of ``stream`` is right, else a readable message: the TLM's
    cycles under the stream's input gaps, or the scheduler's rules under a ready pattern
    (:func:`expectation`)."""
    sched = SCHEDULER_OF_BLOCK[block]
    label = f"stream {stream.name!r}, block {block} vs TLM {sched}"
    tlm = expectation(cfg, sched, stream)
    if tlm is None:
        problems = check_schedule(stream.commands, rtl_issue, cfg, sched)
        return f"{label}: {'; '.join(problems)}" if problems else None
    return first_difference(label, stream.commands, tlm, rtl_issue)
