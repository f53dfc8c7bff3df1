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

from cocotb.triggers import FallingEdge, RisingEdge
from pimphony.sim.verify.tb_common import GappedSource, field, job_test, reset

__all__ = ["run_job"]


async def _run(dut, job: dict, spec: dict) -> dict:
    host, arrival = spec["host"], spec["arrival"]
    ready = spec["ready_pattern"] or [1]
    n_p, n_h = len(spec["pim"]), len(host)
    src_pim, src_host = job["sources"]["pim"], job["sources"]["host"]
    issue = {src_pim: [-1] * n_p, src_host: [-1] * n_h}
    await reset(dut, "pim", "host")
    pim = GappedSource(dut, "pim", spec["pim"], spec["valid_gaps"])
    h, h_prev = 0, -1
    got, cycle, limit = 0, 0, spec["max_cycles"]
    while got < n_p + n_h:
        pim.offer()
        offer_h = h < n_h and cycle >= max(arrival[h], h_prev + 1)
        dut.host__valid.value = int(offer_h)
        if offer_h:
            dut.host__payload.value = host[h]
        out_ready = ready[cycle % len(ready)]
        dut.o__ready.value = out_ready
        await FallingEdge(dut.clk)
        pim.sample()
        if offer_h and int(dut.host__ready.value):
            h += 1
            h_prev = cycle
        if out_ready and int(dut.o__valid.value):
            word = int(dut.o__payload.value)
            src = field(word, job["src_field"])
            seq = field(word, job["seq_field"])
            done = issue.get(src, [])
            if not 0 <= seq < len(done) or done[seq] >= 0:
                raise AssertionError(
                    f"{spec['name']}: bad or repeated sequence number {seq} (source {src})"
                )
            done[seq] = field(word, job["cycle_field"])
            got += 1
        await RisingEdge(dut.clk)
        cycle += 1
        if cycle > limit:
            raise AssertionError(
                f"{spec['name']}: only {got} of {n_p + n_h} operations issued after {limit} cycles"
            )
    pim.stop()
    dut.host__valid.value = 0
    return {"pim": issue[src_pim], "host": issue[src_host], "cycles_simulated": cycle}


run_job = job_test("runs", _run, __name__)
