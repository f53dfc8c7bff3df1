"""Pieces shared by the scheduler RTL: stream payload layouts and the DRAM row timer.

Every width and timing value is derived from a :class:`models.config.HardwareConfig`; nothing
here declares an opcode or a timing constant of its own.
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from pimphony.models.config import HardwareConfig, Timing
from pimphony.models.dram import activation_offsets, execution_times
from pimphony.models.isa import HW_FIELDS, field_widths

__all__ = [
    "CYCLE_BITS",
    "SEQ_BITS",
    "MacFirstIssue",
    "ModeSwitch",
    "RowTimer",
    "StaticGap",
    "command_layout",
    "issued_layout",
    "open_row",
    "push_sequenced",
    "restart_down",
    "row_timer_signature",
    "sequenced_layout",
    "saturating_down",
    "scheduler_signature",
]

SEQ_BITS = 32
"""Width of the program-order sequence number tagged on every accepted command."""
CYCLE_BITS = 32
"""Width of the cycle counter tagged on every issued command."""


def command_layout(cfg: HardwareConfig) -> data.StructLayout:
    """Layout of one channel command (fields of :data:`models.isa.COMMAND_DTYPE` in hardware)."""
    w = field_widths(cfg.channel)
    return data.StructLayout({name: unsigned(w[name]) for name in HW_FIELDS})


def sequenced_layout(cfg: HardwareConfig) -> data.StructLayout:
    """Layout of a queued command: the command and its program-order sequence number."""
    return data.StructLayout({"cmd": command_layout(cfg), "seq": unsigned(SEQ_BITS)})


def issued_layout(cfg: HardwareConfig) -> data.StructLayout:
    """Layout of an issued command: the command, its sequence number and its issue cycle."""
    return data.StructLayout(
        {"cmd": command_layout(cfg), "seq": unsigned(SEQ_BITS), "cycle": unsigned(CYCLE_BITS)}
    )


def scheduler_signature(cfg: HardwareConfig) -> wiring.Signature:
    """Ports every scheduler block has: ``i`` (commands in), ``o`` (issued commands out,
    tagged with sequence number and issue cycle) and ``cycle`` (free-running, 0 after reset)."""
    return wiring.Signature(
        {
            "i": In(stream.Signature(command_layout(cfg))),
            "o": Out(stream.Signature(issued_layout(cfg))),
            "cycle": Out(CYCLE_BITS),
        }
    )


def row_timer_signature(cfg: HardwareConfig) -> wiring.Signature:
    """The ports of a :class:`RowTimer` as its user drives them: ``head_valid``, ``head_row``,
    ``mac_issue`` out, ``row_ok`` and ``switching`` in."""
    return wiring.Signature(
        {
            "head_valid": Out(1),
            "head_row": Out(field_widths(cfg.channel)["row"]),
            "mac_issue": Out(1),
            "row_ok": In(1),
            "switching": In(1),
        }
    )


def saturating_down(m: Module, counter: Signal) -> None:
    """Count ``counter`` down by one per cycle, stopping at zero (sync domain)."""
    m.d.sync += counter.eq(Mux(counter == 0, 0, counter - 1))


def restart_down(m: Module, event: Value, counter: Signal, cycles: int) -> None:
    """A wait of ``cycles`` after ``event``: ``counter`` (cycles left) restarts at
    ``cycles - 1`` in the cycle ``event`` holds, else counts down (:func:`saturating_down`)."""
    with m.If(event):
        m.d.sync += counter.eq(cycles - 1)
    with m.Else():
        saturating_down(m, counter)


def open_row(
    m: Module,
    tm: Timing,
    start: Value,
    to_last_act: Value,
    row: Signal,
    new_row: Value,
    valid: Value,
    row_wait: Signal,
    ras_wait: Signal,
) -> None:
    """A row switch (``models.dram``): on ``start``, ``new_row`` becomes the open ``row``
    (``valid`` set), usable ``tRCD_MAC`` after its last ACT, ``to_last_act`` cycles from now
    (``row_wait``), and closable ``tRAS`` after it (``ras_wait``); else both count down."""
    with m.If(start):
        m.d.sync += [
            row.eq(new_row),
            valid.eq(1),
            row_wait.eq(to_last_act + tm.tRCD_MAC - 1),
            ras_wait.eq(to_last_act + tm.tRAS - 1),
        ]
    with m.Else():
        saturating_down(m, row_wait)
        saturating_down(m, ras_wait)


def push_sequenced(m: Module, port, queue, entry: data.StructLayout, seq: Signal) -> None:
    """Push every command ``port`` offers into the FIFO ``queue`` as an ``entry``
    (:func:`sequenced_layout`) tagged with ``seq``, which counts the pushes."""
    pushed = data.View(entry, queue.w_data)
    m.d.comb += [
        pushed.cmd.eq(port.payload),
        pushed.seq.eq(seq),
        queue.w_en.eq(port.valid),
        port.ready.eq(queue.w_rdy),
    ]
    with m.If(port.valid & port.ready):
        m.d.sync += seq.eq(seq + 1)


class ModeSwitch:
    """The TMOD rule of ``models.dram.mode_switch``, shared by the scheduler blocks.

    A head of the other class (MAC: compute, WR_INP/RD_OUT: register) starts a TMOD in the
    cycle it is ready and the current mode holds the channel no longer (by default: no head
    of the current mode issues in that cycle); it then owns the channel until it issues,
    ``t_mod`` cycles later at the earliest. ``mac_go``/``io_go`` are the heads that may issue;
    call :meth:`start` once with the MAC head's readiness for a TMOD and :meth:`issued` with
    the block's issue handshake.
    """

    def __init__(self, t_mod: int, mac_ready, io_ready) -> None:
        self.t_mod = t_mod
        self.mode = Signal(name="mode")  # 0: compute (after reset), 1: register
        self.mod_wait = Signal(t_mod.bit_length(), name="mod_wait")
        self.owned = Signal(name="owned")  # a TMOD's command has not issued yet
        self.mac_go = mac_ready & ~self.mode & (self.mod_wait == 0)
        self.io_go = io_ready & self.mode & (self.mod_wait == 0)
        self._io_ready = io_ready

    def start(self, m: Module, mac_tmod_ready, hold_compute=None, hold_register=None) -> None:
        """Start a TMOD for the MAC head (``mac_tmod_ready``) or the I/O head.

        Parameters
        ----------
        m
            The block's module.
        mac_tmod_ready
            The MAC head may start its TMOD this cycle.
        hold_compute, hold_register
            While compute (register) mode is current, it keeps the channel -- no TMOD for
            the other head -- when this is asserted; by default, when its head issues in this
            cycle (``mac_go``/``io_go``). DCS holds a mode while its queue head can issue
            without the other queue (``models.dcs``), ping-pong while its queue head belongs
            to the running slot (``models.pingpong``).
        """
        hold_compute = self.mac_go if hold_compute is None else hold_compute
        hold_register = self.io_go if hold_register is None else hold_register
        tmod_mac = Signal(name="tmod_mac")
        tmod_io = Signal(name="tmod_io")
        m.d.comb += [
            tmod_mac.eq(~self.owned & mac_tmod_ready & self.mode & ~hold_register),
            tmod_io.eq(~self.owned & self._io_ready & ~self.mode & ~hold_compute),
        ]
        with m.If(tmod_mac | tmod_io):
            m.d.sync += [
                self.mode.eq(tmod_io),
                self.mod_wait.eq(self.t_mod - 1),
                self.owned.eq(1),
            ]
        with m.Else():
            saturating_down(m, self.mod_wait)

    def issued(self, m: Module, fire) -> None:
        """A command issued (``fire``): the TMOD that owned the channel is done."""
        with m.If(fire):
            m.d.sync += self.owned.eq(0)


class MacFirstIssue(wiring.Component):
    """Issue stage of the two-queue schedulers (DCS, ping-pong): MAC first, tCCD apart.

    At most one command issues per cycle: the compute-queue head when it may, else the
    I/O-queue head; an offered I/O command is held until ``o`` takes it. MACs issue ``tCCD``
    apart (the MAC pipeline) and so do I/O commands (the data bus); each wait is a
    down-counter of cycles left. The MAC head drives the block's :class:`RowTimer` (``rows``,
    connect with ``wiring.connect``). With ``t_MOD > 0`` a :class:`ModeSwitch` decides which
    class holds the channel (``models.dram.mode_switch``).

    Ports: ``mac``, ``io`` (the queue heads, :func:`sequenced_layout`); ``mac_valid``,
    ``io_valid`` (a command is at the head); ``mac_ok``, ``io_ok`` (the block's own rules let
    that head issue, tCCD and rows aside); ``hold_compute``, ``hold_register`` (the current
    mode keeps the channel, see :meth:`ModeSwitch.start`; read only with ``t_MOD > 0``);
    ``cycle`` (tagged on each issued command); ``rows`` (:func:`row_timer_signature`); ``o``
    (issued commands, :func:`issued_layout`); ``issue_mac``, ``issue_io`` (``o`` takes a MAC /
    an I/O command this cycle).
    """

    def __init__(self, cfg: HardwareConfig):
        self._t = cfg.timing
        head = sequenced_layout(cfg)
        super().__init__(
            {
                "mac": In(head),
                "mac_valid": In(1),
                "mac_ok": In(1),
                "io": In(head),
                "io_valid": In(1),
                "io_ok": In(1),
                "hold_compute": In(1),
                "hold_register": In(1),
                "cycle": In(CYCLE_BITS),
                "rows": Out(row_timer_signature(cfg)),
                "o": Out(stream.Signature(issued_layout(cfg))),
                "issue_mac": Out(1),
                "issue_io": Out(1),
            }
        )

    def elaborate(self, platform):
        m = Module()
        tm = self._t
        wait_bits = max(tm.tCCD, 1).bit_length()
        io_wait = Signal(wait_bits)  # data bus: tCCD between transfers
        mac_wait = Signal(wait_bits)  # MAC pipeline: tCCD between MACs
        mac_ready_no_row = Signal()
        mac_ready = Signal()
        io_ready = Signal()
        m.d.comb += [
            self.rows.head_valid.eq(self.mac_valid),
            self.rows.head_row.eq(self.mac.cmd.row),
            self.rows.mac_issue.eq(self.issue_mac),
            mac_ready_no_row.eq(self.mac_valid & self.mac_ok & (mac_wait == 0)),
            mac_ready.eq(mac_ready_no_row & self.rows.row_ok),
            io_ready.eq(self.io_valid & self.io_ok & (io_wait == 0)),
        ]
        mac_go, io_go = mac_ready, io_ready
        switch = None
        if tm.t_MOD > 0:
            # A MAC may start its TMOD without its row when the two overlap.
            switch = ModeSwitch(tm.t_MOD, mac_ready, io_ready)
            mac_go, io_go = switch.mac_go, switch.io_go
            switch.start(
                m,
                mac_ready_no_row if tm.mod_overlaps_row else mac_ready,
                hold_compute=self.hold_compute,
                hold_register=self.hold_register,
            )

        hold_io = Signal()
        sel_mac = mac_go & ~hold_io
        sel_io = io_go & (hold_io | ~mac_go)
        m.d.comb += [
            self.o.valid.eq(sel_mac | sel_io),
            self.o.payload.cmd.eq(Mux(sel_mac, self.mac.cmd, self.io.cmd)),
            self.o.payload.seq.eq(Mux(sel_mac, self.mac.seq, self.io.seq)),
            self.o.payload.cycle.eq(self.cycle),
        ]
        fire = self.o.valid & self.o.ready
        m.d.comb += [self.issue_mac.eq(fire & sel_mac), self.issue_io.eq(fire & sel_io)]
        m.d.sync += hold_io.eq(sel_io & ~self.o.ready)
        if switch is not None:
            switch.issued(m, fire)
        for issue, wait in ((self.issue_mac, mac_wait), (self.issue_io, io_wait)):
            restart_down(m, issue, wait, tm.tCCD)
        return m


class StaticGap(wiring.Component):
    """The gap rule of an in-order queue (``models.static_sched.static_gap``).

    The head issues ``tCCD`` after a command of its own opcode, else after the previous
    command's execution time; the first command waits for nothing. Both waits are
    down-counters of cycles left.

    Ports: ``op`` (the head's opcode), ``issue`` (the head issues this cycle), ``ok`` (its gap
    has passed).
    """

    def __init__(self, cfg: HardwareConfig):
        self._t = cfg.timing
        super().__init__({"op": In(field_widths(cfg.channel)["op"]), "issue": In(1), "ok": Out(1)})

    def elaborate(self, platform):
        m = Module()
        tm = self._t
        exec_time = execution_times(tm)
        last_op = Signal.like(self.op)
        any_issued = Signal()
        wait_bits = int(max(exec_time.max(), tm.tCCD)).bit_length()
        ccd_wait = Signal(wait_bits)
        exec_wait = Signal(wait_bits)
        m.d.comb += self.ok.eq(
            ~any_issued
            | ((self.op == last_op) & (ccd_wait == 0))
            | ((self.op != last_op) & (exec_wait == 0))
        )
        with m.If(self.issue):
            m.d.sync += [last_op.eq(self.op), any_issued.eq(1), ccd_wait.eq(tm.tCCD - 1)]
            with m.Switch(self.op):
                for op, t in enumerate(exec_time):
                    with m.Case(op):
                        m.d.sync += exec_wait.eq(int(t) - 1)
        with m.Else():
            saturating_down(m, ccd_wait)
            saturating_down(m, exec_wait)
        return m


class RowTimer(wiring.Component):
    """Open-row state and row-switch timing for all-bank MACs (``models.dram``).

    A switch starts in the first cycle a MAC for another row is at the head of its queue
    (``head_valid``); ``row_ok`` says the head MAC may use its row this cycle. All waits are
    down-counters of cycles left, so nothing wraps.

    Ports: ``head_valid`` (a MAC is at the queue head), ``head_row``, ``mac_issue`` (a MAC
    issues this cycle), ``row_ok``, ``switching`` (a precharge/activate is in progress).
    """

    def __init__(self, cfg: HardwareConfig):
        tm = cfg.timing
        self._span = activation_offsets(tm, cfg.channel.banks)[-1]
        self._t = tm
        longest = tm.tRAS + tm.tRTP + tm.tRP + self._span + max(tm.tRCD_MAC, tm.tRAS)
        self._wait_shape = unsigned(longest.bit_length())
        super().__init__(row_timer_signature(cfg).flip())

    def elaborate(self, platform):
        m = Module()
        tm, span = self._t, self._span
        row = Signal.like(self.head_row, name="open_row")
        row_open = Signal()
        row_wait = Signal(self._wait_shape)  # cycles until the open row is usable
        ras_wait = Signal(self._wait_shape)  # cycles until tRAS allows a precharge
        rtp_wait = Signal(self._wait_shape)  # cycles until tRTP allows a precharge
        pre_delay = Signal(self._wait_shape)
        m.d.comb += pre_delay.eq(Mux(ras_wait > rtp_wait, ras_wait, rtp_wait))

        start = Signal()
        m.d.comb += [
            start.eq(self.head_valid & (~row_open | (self.head_row != row))),
            self.row_ok.eq(row_open & (self.head_row == row) & (row_wait == 0)),
            self.switching.eq(row_wait != 0),
        ]
        # Cycles from now to the last ACT of the new activation.
        to_last_act = Mux(row_open, pre_delay + tm.tRP + span, span)
        open_row(m, tm, start, to_last_act, row, self.head_row, row_open, row_wait, ras_wait)
        restart_down(m, self.mac_issue, rtp_wait, tm.tRTP)
        return m
