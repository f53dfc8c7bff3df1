"""LibraPIM bank slicing / Dual-Path Execution (DEX) controller in Amaranth.

Cycle-exact twin of :func:`models.bank_slice.run_bank_slice`; the rules are in
``docs/dex.md``. Two input streams (PIM channel commands, host read requests), one output
stream of issued operations tagged with their source, sequence number and issue cycle.

- **PIM path**: an in-order ``lib.fifo.SyncFIFO`` of ``dcs.queue_depth`` commands issued
  with the static-scheduler gaps (``rtl.common.StaticGap``); one all-bank KV row
  (precharge/activate timing of ``models.dram``).
- **Host path**: a shift-register queue of ``host_queue_depth`` requests, oldest in slot 0;
  per bank, the oldest queued request opens its weight row ahead of its turn (single-bank
  activate, tRCD_MAC before the read).
- **Shared**: one column command per cycle (PIM head first, then host head), one data bus
  (WR_INP, RD_OUT, host reads; tCCD apart).
- **Baseline** (``sliced=False``): one row buffer per bank; an ``owner`` bit hands the banks
  between PIM and host, precharging every open row of the previous owner.

Every wait is a saturating down-counter of the cycles left; every width and timing value
comes from ``models``. An operation offered on ``o`` and not taken is held until it is.
"""

from __future__ import annotations

from functools import reduce

from amaranth import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out
from pimphony.models.bank_slice import SOURCE_HOST, SOURCE_PIM, SliceConfig
from pimphony.models.config import HardwareConfig
from pimphony.models.dram import activation_offsets
from pimphony.models.isa import OP_MAC, field_widths
from pimphony.rtl.common import (
    CYCLE_BITS,
    SEQ_BITS,
    StaticGap,
    command_layout,
    open_row,
    push_sequenced,
    restart_down,
    saturating_down,
    sequenced_layout,
)

__all__ = [
    "BankSliceController",
    "host_read_layout",
    "slice_issued_layout",
    "slice_signature",
]


def host_read_layout(cfg: HardwareConfig) -> data.StructLayout:
    """Layout of one host read request (the arrival cycle is when it is offered)."""
    w = field_widths(cfg.channel)
    return data.StructLayout(
        {
            "bank": unsigned(max(1, (cfg.channel.banks - 1).bit_length())),
            "row": unsigned(w["row"]),
            "col": unsigned(w["col"]),
        }
    )


def slice_issued_layout(cfg: HardwareConfig) -> data.StructLayout:
    """An issued operation: source (``SOURCE_PIM``/``SOURCE_HOST``), bank (host reads),
    command (PIM; ``row``/``col`` of a host read), per-source sequence number, issue cycle."""
    return data.StructLayout(
        {
            "src": unsigned(1),
            "bank": host_read_layout(cfg)["bank"].shape,
            "cmd": command_layout(cfg),
            "seq": unsigned(SEQ_BITS),
            "cycle": unsigned(CYCLE_BITS),
        }
    )


def slice_signature(cfg: HardwareConfig) -> wiring.Signature:
    """Ports: ``pim`` and ``host`` in, ``o`` out, free-running ``cycle`` (0 after reset)."""
    return wiring.Signature(
        {
            "pim": In(stream.Signature(command_layout(cfg))),
            "host": In(stream.Signature(host_read_layout(cfg))),
            "o": Out(stream.Signature(slice_issued_layout(cfg))),
            "cycle": Out(CYCLE_BITS),
        }
    )


def _max(a, b):
    return Mux(a > b, a, b)


class BankSliceController(wiring.Component):
    """DEX (or baseline) channel controller for a PIM stream plus host reads.

    Parameters
    ----------
    cfg : HardwareConfig
        Hardware preset: geometry, timing, PIM queue depth (``dcs.queue_depth``).
    slicing : SliceConfig, optional
        ``sliced`` (DEX vs baseline), split ratio, host queue depth; default DEX.
    """

    def __init__(self, cfg: HardwareConfig, slicing: SliceConfig | None = None):
        self.cfg = cfg
        self.slicing = slicing or SliceConfig()
        self.slicing.check(cfg)
        tm = cfg.timing
        self._span = activation_offsets(tm, cfg.channel.banks)[-1]
        longest = 4 * (tm.tRAS + tm.tRTP + tm.tRP + self._span + tm.tRCD_MAC) + 16
        self._wait = unsigned(longest.bit_length())
        super().__init__(slice_signature(cfg))

    def elaborate(self, platform):
        m = Module()
        cfg, tm, ch = self.cfg, self.cfg.timing, self.cfg.channel
        sliced = bool(self.slicing.sliced)
        depth_q = self.slicing.host_queue_depth
        nb, span, wait = ch.banks, self._span, self._wait
        row_shape = unsigned(field_widths(ch)["row"])

        m.d.sync += self.cycle.eq(self.cycle + 1)

        # ---- PIM path: in-order FIFO ---------------------------------------------------
        p_entry = sequenced_layout(cfg)
        m.submodules.pim_queue = pq = fifo.SyncFIFO(width=p_entry.size, depth=cfg.dcs.queue_depth)
        m.submodules.pim_gap = pim_gap = StaticGap(cfg)
        p_seq = Signal(SEQ_BITS)
        push_sequenced(m, self.pim, pq, p_entry, p_seq)
        head = data.View(p_entry, pq.r_data)
        is_mac = head.cmd.op == OP_MAC
        head_mac = Signal()
        m.d.comb += head_mac.eq(pq.r_rdy & is_mac)

        # ---- Host path: shift-register queue, slot 0 oldest ------------------------------
        h_entry = data.StructLayout({"req": host_read_layout(cfg), "seq": unsigned(SEQ_BITS)})
        slots = [Signal(h_entry, name=f"hq{j}") for j in range(depth_q)]
        valid = Signal(depth_q)
        count = Signal(range(depth_q + 1))
        h_seq = Signal(SEQ_BITS)
        hq_nonempty = valid[0]
        h0 = slots[0]

        # ---- Shared state ----------------------------------------------------------------
        avail = Signal(wait)  # baseline: cycles until an ACT may follow the hand-over PRE
        io_wait = Signal(max(tm.tCCD, 1).bit_length())  # data bus
        hold_pim = Signal()
        hold_host = Signal()
        if sliced:
            pim_may, host_may = Const(1), Const(1)
        else:
            owner = Signal()  # 0: PIM owns the banks, 1: the host does
            pim_may = Signal()
            host_may = Signal()
            m.d.comb += [pim_may.eq(~owner & ~hq_nonempty), host_may.eq(owner)]

        # ---- PIM all-bank KV row -------------------------------------------------------
        pim_row = Signal(row_shape)
        pim_valid = Signal()
        pim_wait = Signal(wait)  # until the row is usable
        pim_ras = Signal(wait)  # until tRAS after the last ACT
        mac_rtp = Signal(wait)  # until tRTP after the last MAC
        pim_start = Signal()
        m.d.comb += pim_start.eq(head_mac & pim_may & ~(pim_valid & (pim_row == head.cmd.row)))
        to_last_act = Mux(pim_valid, _max(pim_ras, mac_rtp) + tm.tRP + span, avail + span)
        open_row(m, tm, pim_start, to_last_act, pim_row, head.cmd.row, pim_valid, pim_wait, pim_ras)

        # ---- Per-bank weight rows (the single row buffer in the baseline) ----------------
        brow = [Signal(row_shape, name=f"brow{b}") for b in range(nb)]
        bvalid = Signal(nb)
        bwait = [Signal(wait, name=f"bwait{b}") for b in range(nb)]
        bras = [Signal(wait, name=f"bras{b}") for b in range(nb)]
        brtp = [Signal(wait, name=f"brtp{b}") for b in range(nb)]
        # Slot j is the oldest queued request of its bank.
        oldest = []
        for j in range(depth_q):
            older = [valid[i] & (slots[i].req.bank == slots[j].req.bank) for i in range(j)]
            o = Signal(name=f"oldest{j}")
            m.d.comb += o.eq(valid[j] & ~reduce(lambda a, b: a | b, older, Const(0)))
            oldest.append(o)

        # ---- Issue: PIM head first, else host head; held until the output takes it -------
        pim_ok = Signal()
        m.d.comb += pim_gap.op.eq(head.cmd.op)
        m.d.comb += pim_ok.eq(
            pq.r_rdy
            & pim_gap.ok
            & Mux(
                is_mac,
                pim_may & pim_valid & (pim_row == head.cmd.row) & (pim_wait == 0),
                io_wait == 0,
            )
        )
        bank_ok = Cat(*[bvalid[b] & (brow[b] == h0.req.row) & (bwait[b] == 0) for b in range(nb)])
        host_ok = Signal()
        m.d.comb += host_ok.eq(
            hq_nonempty & host_may & bank_ok.bit_select(h0.req.bank, 1) & (io_wait == 0)
        )
        sel_pim = Signal()
        sel_host = Signal()
        m.d.comb += [
            sel_pim.eq(hold_pim | (~hold_host & pim_ok)),
            sel_host.eq(hold_host | (~hold_pim & ~pim_ok & host_ok)),
        ]
        issued = data.View(slice_issued_layout(cfg), self.o.payload)
        host_cmd = Signal(command_layout(cfg))
        m.d.comb += [
            host_cmd.row.eq(h0.req.row),
            host_cmd.col.eq(h0.req.col),
            self.o.valid.eq(sel_pim | sel_host),
            issued.src.eq(Mux(sel_host, SOURCE_HOST, SOURCE_PIM)),
            issued.bank.eq(Mux(sel_host, h0.req.bank, 0)),
            issued.cmd.eq(Mux(sel_host, host_cmd, head.cmd)),
            issued.seq.eq(Mux(sel_host, h0.seq, head.seq)),
            issued.cycle.eq(self.cycle),
        ]
        fire = self.o.valid & self.o.ready
        issue_pim = Signal()
        issue_host = Signal()
        m.d.comb += [
            issue_pim.eq(fire & sel_pim),
            issue_host.eq(fire & sel_host),
            pq.r_en.eq(issue_pim),
            pim_gap.issue.eq(issue_pim),
        ]
        m.d.sync += [
            hold_pim.eq(sel_pim & ~self.o.ready),
            hold_host.eq(sel_host & ~self.o.ready),
        ]
        restart_down(m, issue_pim & is_mac, mac_rtp, tm.tRTP)
        restart_down(m, (issue_pim & ~is_mac) | issue_host, io_wait, tm.tCCD)

        # ---- Host row preparation, per bank ----------------------------------------------
        for b in range(nb):
            sel = [oldest[j] & (slots[j].req.bank == b) for j in range(depth_q)]
            has = Signal(name=f"want{b}")
            want = Signal(row_shape, name=f"want_row{b}")
            m.d.comb += [
                has.eq(reduce(lambda a, c: a | c, sel)),
                want.eq(
                    reduce(
                        lambda a, c: a | c,
                        [Mux(s, slots[j].req.row, 0) for j, s in enumerate(sel)],
                    )
                ),
            ]
            start = Signal(name=f"bstart{b}")
            m.d.comb += start.eq(host_may & has & ~(bvalid[b] & (brow[b] == want)))
            to_act = Mux(bvalid[b], _max(bras[b], brtp[b]) + tm.tRP, avail)
            open_row(m, tm, start, to_act, brow[b], want, bvalid[b], bwait[b], bras[b])
            restart_down(m, issue_host & (h0.req.bank == b), brtp[b], tm.tRTP)

        # ---- Baseline hand-over ----------------------------------------------------------
        if sliced:
            m.d.comb += avail.eq(0)
        else:
            sw_host = Signal()
            sw_pim = Signal()
            m.d.comb += [
                sw_host.eq(~owner & hq_nonempty & ~hold_pim),
                sw_pim.eq(owner & ~hq_nonempty & head_mac),
            ]
            # Latest tRAS/tRTP bound over all banks, as a balanced tree of max stages.
            level = [_max(bras[b], brtp[b]) for b in range(nb)]
            stage = 0
            while len(level) > 1:
                nxt = []
                for i in range(0, len(level) - 1, 2):
                    s = Signal(wait, name=f"host_pre_{stage}_{i // 2}")
                    m.d.comb += s.eq(_max(level[i], level[i + 1]))
                    nxt.append(s)
                if len(level) % 2:
                    nxt.append(level[-1])
                level, stage = nxt, stage + 1
            host_pre = level[0]
            with m.If(sw_host):
                m.d.sync += [owner.eq(1), pim_valid.eq(0)]
                with m.If(pim_valid):
                    m.d.sync += avail.eq(_max(pim_ras, mac_rtp) + tm.tRP - 1)
                with m.Else():
                    saturating_down(m, avail)
            with m.Elif(sw_pim):
                m.d.sync += [owner.eq(0), bvalid.eq(0)]
                with m.If(bvalid.any()):
                    m.d.sync += avail.eq(host_pre + tm.tRP - 1)
                with m.Else():
                    saturating_down(m, avail)
            with m.Else():
                saturating_down(m, avail)

        # ---- Host queue: pop the head on issue, push at the first free slot --------------
        m.d.comb += self.host.ready.eq(count != depth_q)
        push = self.host.valid & self.host.ready
        pos = count - issue_host
        new = Signal(h_entry)
        m.d.comb += [new.req.eq(self.host.payload), new.seq.eq(h_seq)]
        for j in range(depth_q):
            with m.If(issue_host):
                if j + 1 < depth_q:
                    m.d.sync += [slots[j].eq(slots[j + 1]), valid[j].eq(valid[j + 1])]
                else:
                    m.d.sync += valid[j].eq(0)
            with m.If(push & (pos == j)):
                m.d.sync += [slots[j].eq(new), valid[j].eq(1)]
        m.d.sync += count.eq(count + push - issue_host)
        with m.If(push):
            m.d.sync += h_seq.eq(h_seq + 1)
        return m
