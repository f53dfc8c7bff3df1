"""Shared pieces of the cocotb testbenches (``sim/verify/tb_*.py``; run by the
co-simulation runner :func:`sim.verify.runner.run_cocotb`, never imported by tests).

A testbench module defines ``run_one(dut, job, spec) -> dict`` for one entry of its job file
and exposes it with ``run_job = job_test("streams", run_one, __name__)``: cocotb discovers the
returned test object in the module's namespace. The job protocol: ``PIMPHONY_JOB`` names a JSON
file whose list under the given key holds one ``spec`` per run (each with a ``name``); the
results, ``{name: run_one(...)}``, are written atomically to ``PIMPHONY_RESULT``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Sequence

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

__all__ = ["GappedSource", "IssueLog", "field", "job_test", "reset"]

RunOne = Callable[[object, dict, dict], Awaitable[dict]]


def field(word: int, spec: Sequence[int]) -> int:
    """Field ``spec = [offset, mask]`` (:func:`sim.verify.runner.field_spec`) of ``word``."""
    off, mask = spec
    return (word >> off) & mask


async def reset(dut, *inputs: str) -> None:
    """Drop ``<input>__valid`` of every input stream and ``o__ready``, then hold ``rst`` for
    two cycles. Cycle 0 of a run is the first cycle after this returns."""
    for name in inputs:
        getattr(dut, f"{name}__valid").value = 0
    dut.o__ready.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0


class GappedSource:
    """Drives input stream ``name``: payload ``k`` is offered after ``gaps[k]`` idle cycles
    (counted from the acceptance of payload ``k - 1``) and held until accepted.

    Each cycle: :meth:`offer` before the falling edge, :meth:`sample` after it.
    """

    def __init__(self, dut, name: str, payloads: list[int], gaps: list[int] | None = None):
        self.valid = getattr(dut, f"{name}__valid")
        self.payload = getattr(dut, f"{name}__payload")
        self.ready = getattr(dut, f"{name}__ready")
        self.payloads = payloads
        self.gaps = gaps or [0] * len(payloads)
        self.k = 0
        self.gap_left = self.gaps[0] if payloads else 0
        self.offering = False

    @property
    def done(self) -> bool:
        """Every payload was accepted."""
        return self.k >= len(self.payloads)

    def offer(self) -> bool:
        """Drive ``valid`` (and the payload when offering) for this cycle."""
        self.offering = not self.done and self.gap_left == 0
        self.valid.value = int(self.offering)
        if self.offering:
            self.payload.value = self.payloads[self.k]
        return self.offering

    def sample(self) -> int | None:
        """After the falling edge: the index of the payload accepted this cycle, if any."""
        if self.offering and int(self.ready.value):
            self.k += 1
            self.gap_left = self.gaps[self.k] if not self.done else 0
            return self.k - 1
        if not self.offering and not self.done:
            self.gap_left -= 1
        return None

    def stop(self) -> None:
        """Drop ``valid``."""
        self.valid.value = 0


class IssueLog:
    """The issue cycle of every output transfer of a run, by source and sequence number (-1:
    not issued), the transfers counted and the cycle. A bad or repeated sequence number, or a
    run past ``spec["max_cycles"]`` cycles, fails the run.

    ``sizes`` maps each source to its count of ``what`` (for the message).
    """

    def __init__(self, spec: dict, sizes: dict[int, int], what: str):
        self.name, self.limit, self.what = spec["name"], spec["max_cycles"], what
        self.issue = {src: [-1] * n for src, n in sizes.items()}
        self.total = sum(sizes.values())
        self.got = 0
        self.cycle = 0

    @property
    def done(self) -> bool:
        """Every transfer was issued."""
        return self.got >= self.total

    def record(self, seq: int, at: int, src: int = 0, where: str = "") -> None:
        """Transfer ``seq`` of ``src`` issued in cycle ``at``; ``where`` ends the message."""
        done = self.issue.get(src, [])
        if not 0 <= seq < len(done) or done[seq] >= 0:
            raise AssertionError(f"{self.name}: bad or repeated sequence number {seq}{where}")
        done[seq] = at
        self.got += 1

    async def next_cycle(self, dut) -> None:
        """Wait for the rising edge; fail once the run is past its cycle limit."""
        await RisingEdge(dut.clk)
        self.cycle += 1
        if self.cycle > self.limit:
            raise AssertionError(
                f"{self.name}: only {self.got} of {self.total} {self.what} issued after "
                f"{self.limit} cycles"
            )


def job_test(key: str, run_one: RunOne, module: str):
    """The cocotb test of a testbench module: run ``run_one`` on every spec of ``job[key]``.

    ``module`` is the testbench's ``__name__`` (the test is reported under it).
    """

    async def run_job(dut) -> None:
        with open(os.environ["PIMPHONY_JOB"]) as f:
            job = json.load(f)
        cocotb.start_soon(Clock(dut.clk, 2, unit="ns").start())
        results = {}
        for spec in job[key]:
            results[spec["name"]] = await run_one(dut, job, spec)
        tmp = os.environ["PIMPHONY_RESULT"] + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f)
        os.replace(tmp, os.environ["PIMPHONY_RESULT"])

    run_job.__module__ = module
    run_job.__qualname__ = run_job.__name__
    run_job.__doc__ = f"Run every entry of the job file's {key!r} and write the results."
    return cocotb.test()(run_job)
