"""RTL-vs-TLM checks of the scheduler blocks (static_sched, pingpong, dcs).

Two back ends run a scheduler block on command streams and return the RTL issue cycle of every
command: :func:`simulate_scheduler` drives a component in Amaranth's Python simulator (fast
enough for a few thousand commands); :func:`run_rtl` builds the generated Verilog for ``cfg``
(:func:`sim.verify.runner.run_cocotb`, cached per configuration in ``build/sim/``) and runs
``sim/verify/tb_scheduler.py`` on every stream in one simulator process. ``compare_with_tlm``
turns a mismatch into a message naming the stream, the first differing command and both
cycles. A schedule recorded under output back-pressure is checked against the scheduler's rules
with ``models.channel.check_schedule``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.channel import run_channel
from models.config import HardwareConfig
from models.isa import HW_FIELDS, describe_command
from rtl.blocks import BLOCKS, SCHEDULER_OF_BLOCK, generate_verilog
from rtl.common import command_layout, issued_layout
from sim.verify.runner import (
    BUILD_ROOT,
    CosimError,
    field_spec,
    pack_fields,
    run_amaranth,
    run_cocotb,
)

__all__ = ["RtlStream", "compare_with_tlm", "max_cycles", "run_rtl", "simulate_scheduler"]


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
                if issue[seq] >= 0:
                    raise AssertionError(f"command {seq} issued twice")
                issue[seq] = at
                got += 1
            cycle += 1
            if cycle > max_cycles:
                raise AssertionError(f"only {got} of {n} commands issued in {max_cycles} cycles")

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
        "sim.verify.tb_scheduler",
        job,
        simulator=simulator,
        waves=waves,
        build_root=build_root,
    )
    out: dict = {name: np.asarray(r["issue"], dtype=np.int64) for name, r in run.result.items()}
    if run.waves is not None:
        out["__waves__"] = run.waves
    return out


def compare_with_tlm(
    block: str, cfg: HardwareConfig, stream: RtlStream, rtl_issue: np.ndarray
) -> str | None:
    """``None`` if the RTL issued every command in the TLM's cycle, else a readable message."""
    sched = SCHEDULER_OF_BLOCK[block]
    tlm = run_channel(stream.commands, cfg, sched).issue
    diff = np.flatnonzero(tlm != rtl_issue)
    if diff.size == 0:
        return None
    k = int(diff[0])
    return (
        f"stream {stream.name!r}, block {block} vs TLM {sched}: first differing command #{k} "
        f"({describe_command(stream.commands, k)}): RTL issued at cycle {int(rtl_issue[k])}, "
        f"TLM at cycle {int(tlm[k])}; {diff.size} of {tlm.size} commands differ"
    )
