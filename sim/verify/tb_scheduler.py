"""cocotb testbench for the scheduler blocks (run by ``sim/verify/scheduler.py``, never imported
by tests).

Reads a job file (JSON, path in ``PIMPHONY_JOB``): a list of streams, each with the packed
command payloads, the idle cycles before offering each command and the output-ready pattern.
For each stream it resets the DUT, drives the input stream, records the issue cycle and
sequence number of every output transfer, and writes all results to ``PIMPHONY_RESULT``.
Cycle 0 is the first cycle after reset is released, as in the TLM.
"""

from __future__ import annotations

from cocotb.triggers import FallingEdge
from pimphony.sim.verify.tb_common import GappedSource, IssueLog, field, job_test, reset

__all__ = ["run_job"]


async def _run_stream(dut, job: dict, spec: dict) -> dict:
    ready = spec["ready_pattern"] or [1]
    log = IssueLog(spec, {0: len(spec["payloads"])}, "commands")
    await reset(dut, "i")
    src = GappedSource(dut, "i", spec["payloads"], spec["valid_gaps"])
    while not log.done:
        src.offer()
        out_ready = ready[log.cycle % len(ready)]
        dut.o__ready.value = out_ready
        await FallingEdge(dut.clk)
        src.sample()
        if out_ready and int(dut.o__valid.value):
            word = int(dut.o__payload.value)
            log.record(field(word, job["seq_field"]), field(word, job["cycle_field"]))
        await log.next_cycle(dut)
    src.stop()
    return {"issue": log.issue[0], "cycles_simulated": log.cycle}


run_job = job_test("streams", _run_stream, __name__)
