"""cocotb testbench for the DPA dispatcher blocks (run by ``sim/verify/dpa.py``, never
imported by tests).

Reads a job file (JSON, path in ``PIMPHONY_JOB``): packed host writes per run and the output
``ready`` pattern. For each run it resets the DUT, offers the host writes one per cycle,
records every output transfer (the dispatcher's commands with their cycle, or the pipeline's
issued commands with sequence number and DCS cycle) counted from the cycle ``START`` was
accepted, and the error registers once the dispatcher is idle; a pipeline run ends
``drain_quiet_cycles`` (from the job) cycles after the last issue. Results go to
``PIMPHONY_RESULT``. Same protocol as :func:`sim.verify.dpa.simulate`.
"""

from __future__ import annotations

from cocotb.triggers import FallingEdge, RisingEdge
from pimphony.models.isa import HW_FIELDS
from pimphony.sim.verify.tb_common import GappedSource, field, job_test, reset

__all__ = ["run_job"]


async def _run(dut, job: dict, spec: dict) -> dict:
    pipeline = job["pipeline"]
    ready = spec["ready_pattern"] or [1]
    cmd_fields = job["cmd_fields"]
    issued = job["issued_fields"]
    await reset(dut, "host")
    host = GappedSource(dut, "host", spec["writes"])
    got: list = []
    out: dict = {}
    cycle, start, start_at, quiet = 0, None, 0, 0
    while True:
        host.offer()
        r = ready[cycle % len(ready)]
        dut.o__ready.value = r
        await FallingEdge(dut.clk)
        o_valid = int(dut.o__valid.value)
        busy = int(dut.busy.value)
        if start is not None and o_valid and r:
            word = int(dut.o__payload.value)
            vals = [field(word, cmd_fields[f]) for f in HW_FIELDS]
            if pipeline:
                seq = field(word, issued["seq"])
                got.append([seq, field(word, issued["cycle"]) - start_at, vals])
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
            if quiet > job["drain_quiet_cycles"]:
                break
        if host.sample() == spec["start"]:
            start = cycle
            start_at = int(dut.cycle.value) if pipeline else cycle
        await RisingEdge(dut.clk)
        cycle += 1
        if cycle > spec["max_cycles"]:
            raise AssertionError(f"{spec['name']}: not done after {spec['max_cycles']} cycles")
    await RisingEdge(dut.clk)
    host.stop()
    out["got"] = got
    out["cycles_simulated"] = cycle + 1
    return out


run_job = job_test("runs", _run, __name__)
