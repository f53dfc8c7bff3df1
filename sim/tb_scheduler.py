"""cocotb testbench for the scheduler blocks (run by ``sim/cosim.py``, never imported by tests).

Reads a job file (JSON, path in ``PIMPHONY_JOB``): a list of streams, each with the packed
command payloads, the idle cycles before offering each command and the output-ready pattern.
For each stream it resets the DUT, drives the input stream, records the issue cycle and
sequence number of every output transfer, and writes all results to ``PIMPHONY_RESULT``.
Cycle 0 is the first cycle after reset is released, as in the TLM.
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge


async def _run_stream(dut, job: dict, spec: dict) -> dict:
    payloads = spec["payloads"]
    gaps = spec["valid_gaps"] or [0] * len(payloads)
    ready = spec["ready_pattern"] or [1]
    seq_off, seq_mask = job["seq_field"]
    cyc_off, cyc_mask = job["cycle_field"]
    n = len(payloads)
    issue = [-1] * n
    dut.i__valid.value = 0
    dut.o__ready.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    k, gap_left, got, cycle = 0, gaps[0] if n else 0, 0, 0
    limit = spec["max_cycles"]
    while got < n:
        offering = k < n and gap_left == 0
        dut.i__valid.value = int(offering)
        if offering:
            dut.i__payload.value = payloads[k]
        out_ready = ready[cycle % len(ready)]
        dut.o__ready.value = out_ready
        await FallingEdge(dut.clk)
        if offering and int(dut.i__ready.value):
            k += 1
            gap_left = gaps[k] if k < n else 0
        elif not offering and k < n:
            gap_left -= 1
        if out_ready and int(dut.o__valid.value):
            word = int(dut.o__payload.value)
            seq = (word >> seq_off) & seq_mask
            if not 0 <= seq < n or issue[seq] >= 0:
                raise AssertionError(f"{spec['name']}: bad or repeated sequence number {seq}")
            issue[seq] = (word >> cyc_off) & cyc_mask
            got += 1
        await RisingEdge(dut.clk)
        cycle += 1
        if cycle > limit:
            raise AssertionError(
                f"{spec['name']}: only {got} of {n} commands issued after {limit} cycles"
            )
    dut.i__valid.value = 0
    return {"issue": issue, "cycles_simulated": cycle}


@cocotb.test()
async def run_job(dut):
    """Run every stream of the job file and write the issue cycles."""
    with open(os.environ["PIMPHONY_JOB"]) as f:
        job = json.load(f)
    cocotb.start_soon(Clock(dut.clk, 2, unit="ns").start())
    results = {}
    for spec in job["streams"]:
        results[spec["name"]] = await _run_stream(dut, job, spec)
    tmp = os.environ["PIMPHONY_RESULT"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f)
    os.replace(tmp, os.environ["PIMPHONY_RESULT"])
