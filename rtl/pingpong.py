"""LoL-PIM ping-pong I/O-aware buffering in Amaranth: ping-pong bit, dual queues, hand-off.

Cycle-exact twin of :func:`models.pingpong.pingpong_schedule`; the rules are in
``docs/scheduling.md`` ("Ping-pong" and "The ping-pong RTL block").

- **Slots online.** The dispatcher assigns every accepted command its slot from the commands
  before it (``models.pingpong.pingpong_slots`` needs no look-ahead for this): it keeps the
  slot of the current compute phase and that phase's (GBuf half, OBuf half). A MAC on other
  halves opens the next phase; a WR_INP goes next to the current phase if that phase does not
  read its GBuf half, else one slot later; a RD_OUT always one slot later. Slots are numbered
  from 0 (the TLM's prologue slot -1) in ``slot_bits`` and compared modulo ``2 ** slot_bits``.
- **Queues** (``lib.fifo``, ``depth`` entries each): one compute queue (MACs, slots in
  program order) and a dual I/O queue indexed by slot parity -- the ping-pong bit. I/O slots
  are the current phase or the next one, so each parity queue sees non-decreasing slots and
  the I/O of the running slot is always at the head of queue ``cur % 2``, even when the
  program interleaves drains for the next slot with prefetches for the current one.
- **Hand-off.** ``cur`` is the running slot; only heads of slot ``cur`` issue. The slot is
  handed off (the ping-pong bit flips) in the first cycle in which no head belongs to it, no
  command of it is being accepted, everything issued has completed (``busy`` counts down to
  the latest completion) and a command of a later slot waits; ``cur`` then jumps to the
  earliest waiting slot and its heads may issue in the same cycle.
- **Issue.** Inside a slot each queue keeps the static gaps among its own commands (tCCD, or
  the previous I/O's execution time on an opcode change); one command per cycle, the MAC
  first; an offered command is held until the output stream takes it
  (``rtl.common.MacFirstIssue``, shared with DCS). Rows: ``RowTimer`` with the compute-queue
  head (which may belong to a later slot).
- **Mode switch** (``t_MOD > 0`` only): the current mode keeps the channel while its queue's
  head belongs to the running slot (the compute queue's, or the I/O queue ``cur % 2``'s);
  otherwise the other head of the slot starts a TMOD once it is ready (``ModeSwitch``).

The TLM's queues never fill; ``depth`` (default ``dcs.queue_depth``, as DCS) must hold every
accepted command not yet issued, or the input stalls and the timing departs from the TLM (the
parity split keeps it deadlock free). The co-simulation builds it with 512-entry queues
(``cosim_args`` of ``rtl.blocks.BLOCKS``). A command arriving for a slot already handed off
(the TLM refuses such runs) is made safe, not exact: a late MAC opens a new phase after the
running slot, a late I/O joins the running slot (which holds no MAC then) and ends the phase.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import data, fifo, wiring
from pimphony.models.config import HardwareConfig
from pimphony.models.dram import execution_times
from pimphony.models.isa import OP_MAC, OP_WR_INP
from pimphony.rtl.common import (
    SEQ_BITS,
    MacFirstIssue,
    RowTimer,
    command_layout,
    saturating_down,
    scheduler_signature,
)

__all__ = ["PingPongScheduler", "pingpong_entry_layout", "slot_bits"]


def slot_bits(depth: int) -> int:
    """Width of a slot number: waiting slots span at most the three queues' contents, so
    comparisons modulo ``2 ** slot_bits`` (half the range either way) never alias."""
    return (3 * depth + 2).bit_length() + 1


def pingpong_entry_layout(cfg: HardwareConfig, depth: int):
    """A queued command: the command, its sequence number and its slot."""
    return data.StructLayout(
        {"cmd": command_layout(cfg), "seq": unsigned(SEQ_BITS), "slot": unsigned(slot_bits(depth))}
    )


class PingPongScheduler(wiring.Component):
    """The ping-pong channel controller (LoL-PIM I/O-aware buffering).

    Ports: ``i`` takes commands (``rtl.common.command_layout``); ``o`` emits each issued
    command with its sequence number and issue cycle (``rtl.common.issued_layout``); ``cycle``
    is the free-running cycle counter (0 in the first cycle after reset).

    Parameters
    ----------
    cfg
        Hardware configuration: buffer halves, field widths and timing.
    depth
        Entries of the compute queue and of each of the two I/O queues; ``None`` (the default)
        takes ``cfg.dcs.queue_depth``, the DCS queue depth. Cycle-exact comparison with the TLM
        needs queues that never fill: the co-simulation uses the ``cosim_args`` of
        ``rtl.blocks.BLOCKS``.
    """

    def __init__(self, cfg: HardwareConfig, depth: int | None = None):
        self.cfg = cfg
        self.depth = cfg.dcs.queue_depth if depth is None else depth
        super().__init__(scheduler_signature(cfg))

    def elaborate(self, platform):
        m = Module()
        cfg, tm, ch = self.cfg, self.cfg.timing, self.cfg.channel
        entry = pingpong_entry_layout(cfg, self.depth)
        sbits = slot_bits(self.depth)
        exec_time = execution_times(tm)

        m.d.sync += self.cycle.eq(self.cycle + 1)

        def after(a, b):
            """``a`` is a later slot than ``b`` (modulo ``2 ** sbits``)."""
            d = Signal(sbits)
            m.d.comb += d.eq(b - a)
            return d[sbits - 1]

        m.submodules.mac_queue = c_q = fifo.SyncFIFO(width=entry.size, depth=self.depth)
        m.submodules.io_queue_0 = io_q0 = fifo.SyncFIFO(width=entry.size, depth=self.depth)
        m.submodules.io_queue_1 = io_q1 = fifo.SyncFIFO(width=entry.size, depth=self.depth)
        m.submodules.rows = rows = RowTimer(cfg)
        m.submodules.issue = issue = MacFirstIssue(cfg)
        io_qs = (io_q0, io_q1)

        cur = Signal(sbits)  # running slot; cur[0] is the ping-pong bit
        cur_eff = Signal(sbits)  # the slot running in this cycle (after a hand-off)

        # ---- Dispatch: slot of each command from the commands before it --------------------
        cmd_in = self.i.payload
        in_mac = cmd_in.op == OP_MAC
        in_wr = cmd_in.op == OP_WR_INP
        in_gh = cmd_in.gbuf >= ch.gbuf_entries // 2
        in_oh = cmd_in.out >= ch.obuf_entries // 2
        phase = Signal(sbits)  # slot of the latest compute phase
        have_phase = Signal()
        phase_gh = Signal()
        phase_oh = Signal()
        new_phase = ~have_phase | (in_gh != phase_gh) | (in_oh != phase_oh)
        rule_slot = Signal(sbits)
        with m.If(in_mac):
            m.d.comb += rule_slot.eq(Mux(new_phase, phase + 1, phase))
        with m.Elif(in_wr):
            m.d.comb += rule_slot.eq(Mux(~have_phase | (phase_gh != in_gh), phase, phase + 1))
        with m.Else():
            m.d.comb += rule_slot.eq(phase + 1)
        # A command of a slot already handed off arrives late (the TLM refuses such runs; they
        # need input gaps or full queues). It must not join a slot with MACs it could race:
        # a late MAC opens a new phase after the running slot; a late I/O joins the running
        # slot, which then holds no MAC, and ends the phase so later MACs come after it.
        late = after(cur, rule_slot)
        in_slot = Signal(sbits)
        m.d.comb += in_slot.eq(Mux(late, Mux(in_mac, cur + 1, cur), rule_slot))
        seq = Signal(SEQ_BITS)
        pushed = Signal(entry)
        m.d.comb += [pushed.cmd.eq(cmd_in), pushed.seq.eq(seq), pushed.slot.eq(in_slot)]
        for q in (c_q, *io_qs):
            m.d.comb += q.w_data.eq(pushed)
        m.d.comb += self.i.ready.eq(
            Mux(in_mac, c_q.w_rdy, Mux(in_slot[0], io_q1.w_rdy, io_q0.w_rdy))
        )
        accept = self.i.valid & self.i.ready
        m.d.comb += [
            c_q.w_en.eq(accept & in_mac),
            io_q0.w_en.eq(accept & ~in_mac & ~in_slot[0]),
            io_q1.w_en.eq(accept & ~in_mac & in_slot[0]),
        ]
        with m.If(accept):
            m.d.sync += seq.eq(seq + 1)
            with m.If(in_mac):
                m.d.sync += [
                    phase.eq(in_slot),
                    have_phase.eq(1),
                    phase_gh.eq(in_gh),
                    phase_oh.eq(in_oh),
                ]
            with m.Elif(late):
                m.d.sync += [phase.eq(cur), have_phase.eq(0)]

        # ---- Hand-off: the ping-pong bit flips when the running slot is done ---------------
        mac = data.View(entry, c_q.r_data)
        io_heads = [data.View(entry, q.r_data) for q in io_qs]
        busy_bits = int(exec_time.max()).bit_length()
        busy = Signal(busy_bits)  # cycles until every issued command has completed
        cur_io_rdy = Mux(cur[0], io_q1.r_rdy, io_q0.r_rdy)
        cur_io_slot = Mux(cur[0], io_heads[1].slot, io_heads[0].slot)
        flip = Signal()
        m.d.comb += flip.eq(
            (busy == 0)
            & ~(c_q.r_rdy & (mac.slot == cur))
            & ~(cur_io_rdy & (cur_io_slot == cur))
            & ~(accept & (in_slot == cur))
            & (c_q.r_rdy | io_q0.r_rdy | io_q1.r_rdy)
        )
        # Next slot: the earliest one waiting (queue heads, or the command being accepted).
        cands = [(c_q.r_rdy, mac.slot), (accept, in_slot)]
        cands += [(q.r_rdy, h.slot) for q, h in zip(io_qs, io_heads, strict=True)]
        nxt, have = cands[0][1], cands[0][0]
        for i, (valid, slot) in enumerate(cands[1:], start=1):
            take = valid & (~have | after(nxt, slot))
            best = Signal(sbits, name=f"next_slot_{i}")
            best_valid = Signal(name=f"next_valid_{i}")
            m.d.comb += [best.eq(Mux(take, slot, nxt)), best_valid.eq(have | valid)]
            nxt, have = best, best_valid
        m.d.comb += cur_eff.eq(Mux(flip, nxt, cur))
        m.d.sync += cur.eq(cur_eff)
        # Named copies for waveforms: the ping-pong bit and the slot at each queue head.
        ping_pong = Signal()
        head_slot_mac = Signal(sbits)
        head_slot_io0 = Signal(sbits)
        head_slot_io1 = Signal(sbits)
        m.d.comb += [
            ping_pong.eq(cur_eff[0]),
            head_slot_mac.eq(mac.slot),
            head_slot_io0.eq(io_heads[0].slot),
            head_slot_io1.eq(io_heads[1].slot),
        ]

        # ---- Readiness of the heads of the running slot -------------------------------------
        io_rdy = Mux(cur_eff[0], io_q1.r_rdy, io_q0.r_rdy)
        io = data.View(entry, Mux(cur_eff[0], io_q1.r_data, io_q0.r_data))
        exec_wait = Signal(busy_bits)  # I/O queue: the previous I/O's execution time
        last_io_op = Signal.like(io.cmd.op)
        io_in_slot = Signal()  # an I/O of the running slot has issued
        gap_ok = (io.cmd.op == last_io_op) | ~(io_in_slot & ~flip) | (exec_wait == 0)
        m.d.comb += [
            issue.mac.cmd.eq(mac.cmd),
            issue.mac.seq.eq(mac.seq),
            issue.mac_valid.eq(c_q.r_rdy),
            issue.mac_ok.eq(mac.slot == cur_eff),
            issue.io.cmd.eq(io.cmd),
            issue.io.seq.eq(io.seq),
            issue.io_valid.eq(io_rdy),
            issue.io_ok.eq((io.slot == cur_eff) & gap_ok),
            # Mode switch (t_MOD > 0; models.dram.mode_switch, models.pingpong): the current
            # mode keeps the channel while its queue holds a head of the running slot (inside
            # a slot nothing but its own queue's gaps and rows delays it).
            issue.hold_compute.eq(c_q.r_rdy & (mac.slot == cur_eff)),
            issue.hold_register.eq(io_rdy & (io.slot == cur_eff)),
            issue.cycle.eq(self.cycle),
        ]

        # ---- Issue: MAC first, tCCD apart (rtl.common.MacFirstIssue) ------------------------
        wiring.connect(m, issue.rows, rows)
        wiring.connect(m, issue.o, wiring.flipped(self.o))
        issue_mac, issue_io = issue.issue_mac, issue.issue_io
        m.d.comb += [
            c_q.r_en.eq(issue_mac),
            io_q0.r_en.eq(issue_io & ~cur_eff[0]),
            io_q1.r_en.eq(issue_io & cur_eff[0]),
        ]

        # Completion tracking and gaps.
        issued_exec = Signal(busy_bits)
        with m.Switch(Mux(issue_mac, OP_MAC, io.cmd.op)):
            for op, t in enumerate(exec_time):
                with m.Case(op):
                    m.d.comb += issued_exec.eq(int(t))
        with m.If((issue_mac | issue_io) & (issued_exec > busy)):
            m.d.sync += busy.eq(issued_exec - 1)
        with m.Else():
            saturating_down(m, busy)
        with m.If(issue_io):
            m.d.sync += [
                exec_wait.eq(issued_exec - 1),
                last_io_op.eq(io.cmd.op),
                io_in_slot.eq(1),
            ]
        with m.Else():
            saturating_down(m, exec_wait)
            with m.If(flip):
                m.d.sync += io_in_slot.eq(0)
        return m
