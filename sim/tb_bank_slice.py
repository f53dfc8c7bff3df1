"""cocotb testbench for the bank-slice controller (run by ``sim/cosim_bank_slice.py``).

Reads a job file (JSON, path in ``PIMPHONY_JOB``): a list of runs, each with the packed PIM
command payloads and the idle cycles before offering each, the packed host read payloads
and their arrival cycles, and the output-ready pattern. For each run it resets the DUT,
drives both input streams (a host read is offered from its arrival cycle, at most one per
cycle, in order), records the issue cycle of every output transfer by source and sequence
number, and writes all results to ``PIMPHONY_RESULT``. Cycle 0 is the first cycle after
reset is released, as in the TLM.
"""

from __future__ import annotations

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge


def _field(word: int, spec: list[int]) -> int:
    off, mask = spec
    return (word >> off) & mask


async def _run(dut, job: dict, spec: dict) -> dict:
    pim, host, arrival = spec["pim"], spec["host"], spec["arrival"]
    gaps = spec["valid_gaps"] or [0] * len(pim)
    ready = spec["ready_pattern"] or [1]
    n_p, n_h = len(pim), len(host)
    src_pim, src_host = job["sources"]["pim"], job["sources"]["host"]
    issue = {src_pim: [-1] * n_p, src_host: [-1] * n_h}
    dut.pim__valid.value = 0
    dut.host__valid.value = 0
    dut.o__ready.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    k, gap_left = 0, gaps[0] if n_p else 0
    h, h_prev = 0, -1
    got, cycle, limit = 0, 0, spec["max_cycles"]
    while got < n_p + n_h:
        offer_p = k < n_p and gap_left == 0
        offer_h = h < n_h and cycle >= max(arrival[h], h_prev + 1)
        dut.pim__valid.value = int(offer_p)
        if offer_p:
            dut.pim__payload.value = pim[k]
        dut.host__valid.value = int(offer_h)
        if offer_h:
            dut.host__payload.value = host[h]
        out_ready = ready[cycle % len(ready)]
        dut.o__ready.value = out_ready
        await FallingEdge(dut.clk)
        if offer_p and int(dut.pim__ready.value):
            k += 1
            gap_left = gaps[k] if k < n_p else 0
        elif not offer_p and k < n_p:
            gap_left -= 1
        if offer_h and int(dut.host__ready.value):
            h += 1
            h_prev = cycle
        if out_ready and int(dut.o__valid.value):
            word = int(dut.o__payload.value)
            src = _field(word, job["src_field"])
            seq = _field(word, job["seq_field"])
            done = issue.get(src, [])
            if not 0 <= seq < len(done) or done[seq] >= 0:
                raise AssertionError(
                    f"{spec['name']}: bad or repeated sequence number {seq} (source {src})"
                )
            done[seq] = _field(word, job["cycle_field"])
            got += 1
        await RisingEdge(dut.clk)
        cycle += 1
        if cycle > limit:
            raise AssertionError(
                f"{spec['name']}: only {got} of {n_p + n_h} operations issued after {limit} cycles"
            )
    dut.pim__valid.value = 0
    dut.host__valid.value = 0
    return {"pim": issue[src_pim], "host": issue[src_host], "cycles_simulated": cycle}


@cocotb.test()
async def run_job(dut):
    """Run every run of the job file and write the issue cycles."""
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
