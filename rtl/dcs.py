"""Dynamic Command Scheduling (PIMphony V-C) in Amaranth: D-Table, S-Table, two queues.

Cycle-exact twin of :func:`models.dcs.dcs_schedule`; the rules are in ``docs/scheduling.md``.

- **D-Table** (one ``id_bits`` word per GBuf and per OBuf entry, ``lib.memory.Memory``): the
  ID handed to the last accepted command on that entry. A command's ID on an entry is its
  sequence number among the commands touching that entry, modulo ``2 ** id_bits``.
- **S-Table** (per entry: ID of the last *issued* command, expiration timestamp, is-MAC for
  OBuf entries; ``lib.memory.Memory``) plus a ``live`` bit per entry. A head may issue when
  the S-Table ID equals its DID and the entry is expired (or is-MAC lets a MAC through).
  Timestamps are ``timestamp_bits`` wide and compared modulo their range; a scrubber visits
  one entry per cycle and clears ``live`` once expired, so stale timestamps never wrap into
  the future.
- **Queues**: in-order I/O queue (WR_INP, RD_OUT) and compute queue (MAC), ``lib.fifo``.
- **Issue** (``rtl.common.MacFirstIssue``, shared with ping-pong): at most one command per
  cycle, the MAC first, tCCD apart per queue; an offered I/O command is held until the
  output stream takes it.
- **Mode switch** (``t_MOD > 0`` only): the current mode keeps the channel while its queue
  head can issue without the other queue (the queue is not empty and the S-Table holds the
  head's DIDs); otherwise the other head starts a TMOD once it is ready (``ModeSwitch``).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, memory, wiring
from pimphony.models.config import HardwareConfig
from pimphony.models.isa import OP_MAC, OP_RD_OUT, OP_WR_INP
from pimphony.rtl.common import (
    SEQ_BITS,
    MacFirstIssue,
    RowTimer,
    command_layout,
    scheduler_signature,
)

__all__ = ["DcsScheduler", "queue_entry_layout", "s_table_layout"]


def queue_entry_layout(cfg: HardwareConfig) -> data.StructLayout:
    """A queued command with its dependency IDs and sequence number."""
    return data.StructLayout(
        {
            "cmd": command_layout(cfg),
            "did_g": unsigned(cfg.dcs.id_bits),
            "did_o": unsigned(cfg.dcs.id_bits),
            "seq": unsigned(SEQ_BITS),
        }
    )


def s_table_layout(cfg: HardwareConfig) -> data.StructLayout:
    """One S-Table entry: last issued ID, expiration timestamp, is-MAC flag."""
    return data.StructLayout(
        {
            "id": unsigned(cfg.dcs.id_bits),
            "exp": unsigned(cfg.dcs.timestamp_bits),
            "is_mac": unsigned(1),
        }
    )


class _Table:
    """An S-Table or D-Table bank: a Memory with comb read ports and one write port."""

    def __init__(self, m: Module, name: str, shape, depth: int, reads: int):
        self.mem = memory.Memory(shape=shape, depth=depth, init=[])
        m.submodules[name] = self.mem
        self.reads = [self.mem.read_port(domain="comb") for _ in range(reads)]
        self.write = self.mem.write_port()


class DcsScheduler(wiring.Component):
    """The DCS channel controller.

    Ports: ``i`` takes commands, ``o`` emits each issued command with its sequence number and
    issue cycle, ``cycle`` is the free-running cycle counter. Every parameter comes from the
    ``models`` configuration.
    """

    def __init__(self, cfg: HardwareConfig):
        self.cfg = cfg
        super().__init__(scheduler_signature(cfg))

    def elaborate(self, platform):
        m = Module()
        cfg, tm, dcs, ch = self.cfg, self.cfg.timing, self.cfg.dcs, self.cfg.channel
        ts_bits = dcs.timestamp_bits
        entry = queue_entry_layout(cfg)
        s_layout = s_table_layout(cfg)

        m.d.sync += self.cycle.eq(self.cycle + 1)
        now = Signal(ts_bits)
        m.d.comb += now.eq(self.cycle[:ts_bits])

        def expired(exp):
            # now >= exp, modulo 2 ** ts_bits (valid within half the range; see scrubber).
            return ~(now - exp)[ts_bits - 1]

        m.submodules.io_queue = io_q = fifo.SyncFIFO(width=entry.size, depth=dcs.queue_depth)
        m.submodules.mac_queue = c_q = fifo.SyncFIFO(width=entry.size, depth=dcs.queue_depth)
        m.submodules.rows = rows = RowTimer(cfg)
        m.submodules.issue = issue = MacFirstIssue(cfg)

        # D-Table: read at dispatch, written with the incremented ID.
        d_g = _Table(m, "d_table_gbuf", unsigned(dcs.id_bits), ch.gbuf_entries, reads=1)
        d_o = _Table(m, "d_table_obuf", unsigned(dcs.id_bits), ch.obuf_entries, reads=1)
        # S-Table: read for the I/O head, the compute head and the scrubber.
        s_g = _Table(m, "s_table_gbuf", s_layout, ch.gbuf_entries, reads=3)
        s_o = _Table(m, "s_table_obuf", s_layout, ch.obuf_entries, reads=3)
        live_g = Signal(ch.gbuf_entries)
        live_o = Signal(ch.obuf_entries)

        # ---- Dispatch -----------------------------------------------------------------
        cmd_in = self.i.payload
        in_mac = cmd_in.op == OP_MAC
        uses_g = cmd_in.op != OP_RD_OUT
        uses_o = cmd_in.op != OP_WR_INP
        seq = Signal(SEQ_BITS)
        pushed = Signal(entry)
        m.d.comb += [
            d_g.reads[0].addr.eq(cmd_in.gbuf),
            d_o.reads[0].addr.eq(cmd_in.out),
            pushed.cmd.eq(cmd_in),
            pushed.did_g.eq(d_g.reads[0].data),
            pushed.did_o.eq(d_o.reads[0].data),
            pushed.seq.eq(seq),
            io_q.w_data.eq(pushed),
            c_q.w_data.eq(pushed),
            self.i.ready.eq(Mux(in_mac, c_q.w_rdy, io_q.w_rdy)),
        ]
        accept = self.i.valid & self.i.ready
        m.d.comb += [
            io_q.w_en.eq(accept & ~in_mac),
            c_q.w_en.eq(accept & in_mac),
            d_g.write.addr.eq(cmd_in.gbuf),
            d_g.write.data.eq(d_g.reads[0].data + 1),
            d_g.write.en.eq(accept & uses_g),
            d_o.write.addr.eq(cmd_in.out),
            d_o.write.data.eq(d_o.reads[0].data + 1),
            d_o.write.en.eq(accept & uses_o),
        ]
        with m.If(accept):
            m.d.sync += seq.eq(seq + 1)

        # ---- Readiness of the two queue heads -------------------------------------------
        io = data.View(entry, io_q.r_data)
        mac = data.View(entry, c_q.r_data)
        io_s_g, mac_s_g, scrub_s_g = (p.data for p in s_g.reads)
        io_s_o, mac_s_o, scrub_s_o = (p.data for p in s_o.reads)
        m.d.comb += [
            s_g.reads[0].addr.eq(io.cmd.gbuf),
            s_g.reads[1].addr.eq(mac.cmd.gbuf),
            s_o.reads[0].addr.eq(io.cmd.out),
            s_o.reads[1].addr.eq(mac.cmd.out),
        ]

        def resolved(s_entry, live, index, did, bypass=0):
            return (s_entry.id == did) & (
                ~live.bit_select(index, 1) | expired(s_entry.exp) | bypass
            )

        io_is_w = io.cmd.op == OP_WR_INP
        m.d.comb += [
            issue.mac.cmd.eq(mac.cmd),
            issue.mac.seq.eq(mac.seq),
            issue.mac_valid.eq(c_q.r_rdy),
            issue.mac_ok.eq(
                resolved(mac_s_g, live_g, mac.cmd.gbuf, mac.did_g)
                & resolved(mac_s_o, live_o, mac.cmd.out, mac.did_o, bypass=mac_s_o.is_mac)
            ),
            issue.io.cmd.eq(io.cmd),
            issue.io.seq.eq(io.seq),
            issue.io_valid.eq(io_q.r_rdy),
            issue.io_ok.eq(
                Mux(
                    io_is_w,
                    resolved(io_s_g, live_g, io.cmd.gbuf, io.did_g),
                    resolved(io_s_o, live_o, io.cmd.out, io.did_o),
                )
            ),
            # Mode switch (t_MOD > 0; models.dram.mode_switch, models.dcs): the current mode
            # keeps the channel while its queue head can issue without the other queue -- the
            # queue is not empty and the S-Table holds the head's DIDs (the head waits at most
            # for expirations, buses or its row).
            issue.hold_compute.eq(
                c_q.r_rdy & (mac_s_g.id == mac.did_g) & (mac_s_o.id == mac.did_o)
            ),
            issue.hold_register.eq(
                io_q.r_rdy & Mux(io_is_w, io_s_g.id == io.did_g, io_s_o.id == io.did_o)
            ),
            issue.cycle.eq(self.cycle),
        ]

        # ---- Issue: MAC first, tCCD apart (rtl.common.MacFirstIssue) ------------------------
        wiring.connect(m, issue.rows, rows)
        wiring.connect(m, issue.o, wiring.flipped(self.o))
        issue_mac, issue_io = issue.issue_mac, issue.issue_io
        m.d.comb += [c_q.r_en.eq(issue_mac), io_q.r_en.eq(issue_io)]

        # S-Table writes: one per table per cycle (one command issues per cycle).
        g_entry = Signal(s_layout)
        o_entry = Signal(s_layout)
        m.d.comb += [
            s_g.write.addr.eq(Mux(issue_mac, mac.cmd.gbuf, io.cmd.gbuf)),
            g_entry.id.eq(Mux(issue_mac, mac.did_g, io.did_g) + 1),
            g_entry.exp.eq(now + Mux(issue_mac, tm.tCCD, tm.t_WR_INP)),
            s_g.write.data.eq(g_entry),
            s_g.write.en.eq(issue_mac | (issue_io & io_is_w)),
            s_o.write.addr.eq(Mux(issue_mac, mac.cmd.out, io.cmd.out)),
            o_entry.id.eq(Mux(issue_mac, mac.did_o, io.did_o) + 1),
            o_entry.exp.eq(now + Mux(issue_mac, tm.t_MAC_result, tm.t_RD_OUT)),
            o_entry.is_mac.eq(issue_mac),
            s_o.write.data.eq(o_entry),
            s_o.write.en.eq(issue_mac | (issue_io & ~io_is_w)),
        ]

        # ---- live bits and the scrubber ---------------------------------------------------
        for table, live, reads_data, n in (
            (s_g, live_g, scrub_s_g, ch.gbuf_entries),
            (s_o, live_o, scrub_s_o, ch.obuf_entries),
        ):
            scrub = Signal(range(n))
            m.d.sync += scrub.eq(Mux(scrub == n - 1, 0, scrub + 1))
            m.d.comb += table.reads[2].addr.eq(scrub)
            for e in range(n):
                set_live = table.write.en & (table.write.addr == e)
                clear = (scrub == e) & expired(reads_data.exp)
                with m.If(set_live):
                    m.d.sync += live[e].eq(1)
                with m.Elif(clear):
                    m.d.sync += live[e].eq(0)
        return m
