"""The shared scheduler pieces of ``rtl/common.py`` on their own (the blocks that use them are
checked cycle-exact against their TLMs in ``test_rtl_schedulers.py``)."""

from __future__ import annotations

import pytest
from amaranth.sim import Simulator
from pimphony.models.config import load_preset
from pimphony.models.dram import execution_times
from pimphony.models.isa import OP_MAC, OP_RD_OUT, OP_WR_INP
from pimphony.rtl.common import MacFirstIssue, StaticGap


@pytest.fixture(scope="module")
def cfg():
    return load_preset("aim-16ch").replace(**{"timing.tCCD": 2})


def _run(dut, bench) -> list:
    sim = Simulator(dut)
    sim.add_clock(1e-9)
    out: list = []

    async def tb(ctx):
        await bench(ctx, out)

    sim.add_testbench(tb)
    sim.run()
    return out


def test_mac_first_issue_order_hold_and_tccd(cfg):
    # Both heads ready every cycle (rows open); the output stalls in cycle 3.
    dut = MacFirstIssue(cfg)
    ready = [1, 1, 1, 0, 1, 1, 1]

    async def bench(ctx, out):
        ctx.set(dut.mac.seq, 10)
        ctx.set(dut.io.seq, 20)
        for sig in (dut.mac_valid, dut.mac_ok, dut.io_valid, dut.io_ok, dut.rows.row_ok):
            ctx.set(sig, 1)
        for r in ready:
            ctx.set(dut.o.ready, r)
            valid, seq, im, ii, head = (
                ctx.get(dut.o.valid),
                ctx.get(dut.o.payload.seq),
                ctx.get(dut.issue_mac),
                ctx.get(dut.issue_io),
                ctx.get(dut.rows.head_valid),
            )
            out.append((valid, seq if valid else None, im, ii, head))
            await ctx.tick()

    got = _run(dut, bench)
    # MAC first; tCCD = 2 keeps MACs (and I/Os) a cycle apart, the other class fills the gap;
    # the I/O offered in the stalled cycle is held and issues before the ready MAC.
    assert [(v, s) for v, s, *_ in got] == [
        (1, 10),
        (1, 20),
        (1, 10),
        (1, 20),
        (1, 20),
        (1, 10),
        (1, 20),
    ]
    assert [(im, ii) for _, _, im, ii, _ in got] == [
        (1, 0),
        (0, 1),
        (1, 0),
        (0, 0),
        (0, 1),
        (1, 0),
        (0, 1),
    ]
    assert all(h == 1 for *_, h in got)  # the MAC head drives the row timer


def test_mac_first_issue_waits_for_the_row(cfg):
    dut = MacFirstIssue(cfg)

    async def bench(ctx, out):
        ctx.set(dut.mac_valid, 1)
        ctx.set(dut.mac_ok, 1)
        ctx.set(dut.o.ready, 1)
        for row_ok in (0, 0, 1):
            ctx.set(dut.rows.row_ok, row_ok)
            out.append(ctx.get(dut.issue_mac))
            await ctx.tick()

    assert _run(dut, bench) == [0, 0, 1]


@pytest.mark.parametrize(
    ("ops", "gap_after"),
    [((OP_MAC, OP_MAC), "ccd"), ((OP_WR_INP, OP_MAC), "exec"), ((OP_MAC, OP_RD_OUT), "exec")],
)
def test_static_gap(cfg, ops, gap_after):
    # The second command waits tCCD after its own opcode, else the first one's execution time.
    dut = StaticGap(cfg)
    first, second = ops
    want = cfg.timing.tCCD if gap_after == "ccd" else int(execution_times(cfg.timing)[first])

    async def bench(ctx, out):
        ctx.set(dut.op, first)
        out.append(ctx.get(dut.ok))  # nothing issued yet
        ctx.set(dut.issue, 1)
        await ctx.tick()
        ctx.set(dut.issue, 0)
        ctx.set(dut.op, second)
        for _ in range(want + 2):
            out.append(ctx.get(dut.ok))
            await ctx.tick()

    got = _run(dut, bench)
    assert got[0] == 1
    assert got[1:].index(1) + 1 == want
