"""cocotb testbench for the DPA dispatcher blocks (run by ``sim/cosim_dpa.py``, never imported
by tests).

Reads a job file (JSON, path in ``PIMPHONY_JOB``): packed host writes per run and the output
``ready`` pattern. For each run it resets the DUT, offers the host writes one per cycle,
records every output transfer (the dispatcher's commands with their cycle, or the pipeline's
issued commands with sequence number and DCS cycle) counted from the cycle ``START`` was
accepted, and the error registers once the dispatcher is idle. Results go to
``PIMPHONY_RESULT``. Same protocol as :func:`sim.cosim_dpa.simulate`.
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge

DRAIN_QUIET_CYCLES = 400


def _get(word: int, field: list[int]) -> int:
    return (word >> field[0]) & field[1]


async def _run(dut, job: dict, spec: dict) -> dict:
    pipeline = job["pipeline"]
    writes = spec["writes"]
    ready = spec["ready_pattern"] or [1]
    cmd_fields = job["cmd_fields"]
    issued = job["issued_fields"]
    dut.host__valid.value = 0
    dut.o__ready.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    got: list = []
    out: dict = {}
    k, cycle, start, start_at, quiet = 0, 0, None, 0, 0
    while True:
        offering = k < len(writes)
        dut.host__valid.value = int(offering)
        if offering:
            dut.host__payload.value = writes[k]
        r = ready[cycle % len(ready)]
        dut.o__ready.value = r
        await FallingEdge(dut.clk)
        o_valid = int(dut.o__valid.value)
        busy = int(dut.busy.value)
        if start is not None and o_valid and r:
            word = int(dut.o__payload.value)
            vals = [_get(word, cmd_fields[f]) for f in ("op", "gbuf", "row", "col", "out")]
            if pipeline:
                seq = _get(word, issued["seq"])
                got.append([seq, _get(word, issued["cycle"]) - start_at, vals])
            else:
                got.append([len(got), cycle - start, vals])
        if start is not None and cycle > start and not busy and "done" not in out:
            out.update(
                code=int(dut.error_code.value), row=int(dut.error_row.value), done=cycle - start
            )
        if "done" in out:
            if not pipeline:
                break
            quiet = 0 if o_valid else quiet + 1
            if quiet > DRAIN_QUIET_CYCLES:
                break
        if offering and int(dut.host__ready.value):
            if k == spec["start"]:
                start = cycle
                start_at = int(dut.cycle.value) if pipeline else cycle
            k += 1
        await RisingEdge(dut.clk)
        cycle += 1
        if cycle > spec["max_cycles"]:
            raise AssertionError(f"{spec['name']}: not done after {spec['max_cycles']} cycles")
    await RisingEdge(dut.clk)
    dut.host__valid.value = 0
    out["got"] = got
    return out


@cocotb.test()
async def run_job(dut):
    """Run every dispatch of the job file and write the results."""
    with open(os.environ["PIMPHONY_JOB"]) as f:
        job = json.load(f)
    cocotb.start_soon(Clock(dut.clk, 2, unit="ns").start())
    results = {}
    for spec in job["runs"]:
        results[spec["name"]] = await _run(dut, job, spec)
    tmp = os.environ["PIMPHONY_RESULT"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f)
    os.replace(tmp, os.environ["PIMPHONY_RESULT"])
