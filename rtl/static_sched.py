"""The static (baseline) channel scheduler in Amaranth: in order, fixed gaps.

Cycle-exact twin of :func:`models.static_sched.static_schedule`, row-activation and mode
conventions included; the rules are in ``docs/scheduling.md``.
"""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, fifo, wiring
from pimphony.models.config import HardwareConfig
from pimphony.models.isa import OP_MAC
from pimphony.rtl.common import (
    SEQ_BITS,
    RowTimer,
    StaticGap,
    issued_layout,
    push_sequenced,
    saturating_down,
    scheduler_signature,
    sequenced_layout,
)

__all__ = ["StaticScheduler"]


class StaticScheduler(wiring.Component):
    """In-order scheduler with static gaps and all-bank row handling.

    Ports: ``i`` takes commands (``rtl.common.command_layout``); ``o`` emits each issued
    command with its sequence number and issue cycle (``rtl.common.issued_layout``). ``cycle``
    is the free-running cycle counter (0 in the first cycle after reset).
    """

    def __init__(self, cfg: HardwareConfig):
        self.cfg = cfg
        super().__init__(scheduler_signature(cfg))

    def elaborate(self, platform):
        m = Module()
        cfg, tm = self.cfg, self.cfg.timing
        entry = sequenced_layout(cfg)
        m.submodules.queue = queue = fifo.SyncFIFO(width=entry.size, depth=cfg.dcs.queue_depth)
        m.submodules.rows = rows = RowTimer(cfg)
        m.submodules.gap = gap = StaticGap(cfg)

        m.d.sync += self.cycle.eq(self.cycle + 1)

        # Dispatch: one command per cycle into the FIFO, tagged with its sequence number.
        seq = Signal(SEQ_BITS)
        push_sequenced(m, self.i, queue, entry, seq)

        # Issue: the head waits tCCD after a command of its own opcode, else the previous
        # command's execution time (StaticGap).
        head = data.View(entry, queue.r_data)
        is_mac = head.cmd.op == OP_MAC
        m.d.comb += gap.op.eq(head.cmd.op)
        ready_no_row = queue.r_rdy & gap.ok
        ready = ready_no_row & (~is_mac | rows.row_ok)
        # Mode switch (models.dram.mode_switch): a head of the other class (MAC: compute,
        # WR_INP/RD_OUT: register) starts a TMOD in the cycle it is ready (without its row with
        # mod_overlaps_row); it issues t_MOD cycles later at the earliest.
        valid = ready
        if tm.t_MOD > 0:
            mode = Signal()  # 0: compute (after reset), 1: register
            mod_wait = Signal(tm.t_MOD.bit_length())
            head_cls = ~is_mac
            valid = ready & (head_cls == mode) & (mod_wait == 0)
            tmod = (head_cls != mode) & (ready_no_row if tm.mod_overlaps_row else ready)
            with m.If(tmod):
                m.d.sync += [mode.eq(head_cls), mod_wait.eq(tm.t_MOD - 1)]
            with m.Else():
                saturating_down(m, mod_wait)
        issued = data.View(issued_layout(cfg), self.o.payload)
        m.d.comb += [
            rows.head_valid.eq(queue.r_rdy & is_mac),
            rows.head_row.eq(head.cmd.row),
            self.o.valid.eq(valid),
            issued.cmd.eq(head.cmd),
            issued.seq.eq(head.seq),
            issued.cycle.eq(self.cycle),
        ]
        fire = self.o.valid & self.o.ready
        m.d.comb += [queue.r_en.eq(fire), rows.mac_issue.eq(fire & is_mac), gap.issue.eq(fire)]
        return m
