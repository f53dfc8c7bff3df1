"""Run a scheduler component in Amaranth's Python simulator and record issue cycles.

Fast enough for streams of a few thousand commands; the cocotb/Verilator flow in
``sim/cosim.py`` runs the generated Verilog for longer ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from amaranth.sim import Simulator

__all__ = ["simulate_scheduler"]


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
    fields = ("op", "gbuf", "row", "col", "out")
    rows = [{f: int(stream[f][k]) for f in fields} for k in range(n)]

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

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    sim.add_testbench(producer, background=True)
    sim.add_testbench(consumer)
    if vcd_path:
        with sim.write_vcd(vcd_path):
            sim.run()
    else:
        sim.run()
    return issue
