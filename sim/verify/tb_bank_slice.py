"""cocotb testbench for the bank-slice controller (run by ``sim/verify/bank_slice.py``).

Reads a job file (JSON, path in ``PIMPHONY_JOB``): a list of runs, each with the packed PIM
command payloads and the idle cycles before offering each, the packed host read payloads
and their arrival cycles, and the output-ready pattern. For each run it resets the DUT,
drives both input streams (a host read is offered from its arrival cycle, at most one per
cycle, in order), records the issue cycle of every output transfer by source and sequence
number, and writes all results to ``PIMPHONY_RESULT``. Cycle 0 is the first cycle after
reset is released, as in the TLM.
"""

from __future__ import annotations

from cocotb.triggers import FallingEdge
from pimphony.sim.verify.tb_common import GappedSource, IssueLog, field, job_test, reset

__all__ = ["run_job"]


async def _run(dut, job: dict, spec: dict) -> dict:
    host, arrival = spec["host"], spec["arrival"]
    ready = spec["ready_pattern"] or [1]
    n_h = len(host)
    src_pim, src_host = job["sources"]["pim"], job["sources"]["host"]
    log = IssueLog(spec, {src_pim: len(spec["pim"]), src_host: n_h}, "operations")
    await reset(dut, "pim", "host")
    pim = GappedSource(dut, "pim", spec["pim"], spec["valid_gaps"])
    h, h_prev = 0, -1
    while not log.done:
        pim.offer()
        offer_h = h < n_h and log.cycle >= max(arrival[h], h_prev + 1)
        dut.host__valid.value = int(offer_h)
        if offer_h:
            dut.host__payload.value = host[h]
        out_ready = ready[log.cycle % len(ready)]
        dut.o__ready.value = out_ready
        await FallingEdge(dut.clk)
        pim.sample()
        if offer_h and int(dut.host__ready.value):
            h += 1
            h_prev = log.cycle
        if out_ready and int(dut.o__valid.value):
            word = int(dut.o__payload.value)
            src = field(word, job["src_field"])
            seq = field(word, job["seq_field"])
            log.record(seq, field(word, job["cycle_field"]), src, f" (source {src})")
        await log.next_cycle(dut)
    pim.stop()
    dut.host__valid.value = 0
    return {"pim": log.issue[src_pim], "host": log.issue[src_host], "cycles_simulated": log.cycle}


run_job = job_test("runs", _run, __name__)
