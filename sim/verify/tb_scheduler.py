"""cocotb testbench for the scheduler blocks (run by ``sim/verify/scheduler.py``, never imported
by tests).

Reads a job file (JSON, path in ``PIMPHONY_JOB``): a list of streams, each with the packed
command payloads, the idle cycles before offering each command and the output-ready pattern.
For each stream it resets the DUT, drives the input stream, records the issue cycle and
sequence number of every output transfer, and writes all results to ``PIMPHONY_RESULT``.
Cycle 0 is the first cycle after reset is released, as in the TLM.
"""

from __future__ import annotations

from cocotb.triggers import FallingEdge, RisingEdge
from pimphony.sim.verify.tb_common import GappedSource, field, job_test, reset

__all__ = ["run_job"]


async def _run_stream(dut, job: dict, spec: dict) -> dict:
    n = len(spec["payloads"])
    ready = spec["ready_pattern"] or [1]
    issue = [-1] * n
    await reset(dut, "i")
    src = GappedSource(dut, "i", spec["payloads"], spec["valid_gaps"])
    got, cycle, limit = 0, 0, spec["max_cycles"]
    while got < n:
        src.offer()
        out_ready = ready[cycle % len(ready)]
        dut.o__ready.value = out_ready
        await FallingEdge(dut.clk)
        src.sample()
        if out_ready and int(dut.o__valid.value):
            word = int(dut.o__payload.value)
            seq = field(word, job["seq_field"])
            if not 0 <= seq < n or issue[seq] >= 0:
                raise AssertionError(f"{spec['name']}: bad or repeated sequence number {seq}")
            issue[seq] = field(word, job["cycle_field"])
            got += 1
        await RisingEdge(dut.clk)
        cycle += 1
        if cycle > limit:
            raise AssertionError(
                f"{spec['name']}: only {got} of {n} commands issued after {limit} cycles"
            )
    src.stop()
    return {"issue": issue, "cycles_simulated": cycle}


run_job = job_test("streams", _run_stream, __name__)
