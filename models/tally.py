"""What a scheduler kernel counts while it runs, without per-command or per-cycle arrays.

The statistics of :class:`models.channel.ScheduleResult`: commands per opcode, the
completion cycle of the last command, row switches, mode switches (class changes in issue
order, from compute mode) and the time breakdown. The breakdown gives every cycle in
``[0, cycles)`` one cause: ``mac_busy`` (inside a MAC's tCCD), ``row_switch`` (inside a row
switch, outside every MAC's tCCD), ``io_transfer`` (inside a WR_INP's or RD_OUT's tCCD,
outside both), ``dependency_stall`` (the rest). With M, R and I the unions of those
intervals: ``mac_busy = |M|``, ``row_switch = |M + R| - |M|``, ``io_transfer = |M + R + I| -
|M + R|``.

The length of a union is one sweep over its intervals in start order, keeping the open
merged interval. Every kernel issues commands in increasing cycle order (one per cycle), so
MAC and I/O intervals each come in start order. A row switch is recorded when its MAC
reaches the head of the compute queue: after the MAC before it (it starts tRTP after that
MAC at the earliest) and before the MAC that needs it, so M and M + R are swept at once. A
row switch may start before or after I/O commands that issue after it is recorded (DCS and
ping-pong fill it with I/O), so M + R + I holds it back (one pending row switch) until a
command issues at or after its start. That is the whole order, given what the kernels
guarantee: when a row switch is recorded, no command that already went into M + R + I
started after it (under DCS it starts after the last issue; ping-pong holds back the I/O
commands that issue while no MAC of the slot is at the compute head, the only ones a later
row switch can start before, and hands them over when the next MAC reaches it).

MACs are the bulk of a stream and one tCCD apart at the closest (the MAC pipeline), so their
intervals never overlap and a run of back-to-back MACs is one interval. A MAC only extends
M's open interval; the MACs since the last other event stay one pending segment (its start;
its end is M's) that enters M + R and M + R + I as one interval when anything else is
recorded or M's interval closes.

The state is a vector (``tl``), so a kernel can stop at the end of a chunk and carry on with
the next: the result does not depend on where chunks end. A kernel's loop keeps it in locals
(:func:`tally_open`, the ``t_*`` functions, :func:`tally_close`), which the compiler holds
in registers; as an array it would be reloaded at every step (it might alias the kernel's
other arrays). The ``t_*`` functions take no array: numba would count references to an
array handed to an inlined function at every call.

Every interval starts before ``cycles`` (a command completes at least a cycle after its
issue; a row switch ends before its MAC issues), so only the open merged interval of each
union can reach past ``cycles``: :func:`tally_lengths` clips it.
"""

from __future__ import annotations

import numpy as np
from pimphony.models.dram import MODE_COMPUTE, MODE_REGISTER, TV_CCD, exec_time, mode_class
from pimphony.models.isa import OP_MAC, OP_RD_OUT, OP_WR_INP
from pimphony.models.jit import njit

__all__ = [
    "NONE",
    "TL_CLASS",
    "TL_COUNTS",
    "TL_CYCLES",
    "TL_LEN",
    "TL_MAC_END",
    "TL_MODE_SWITCHES",
    "TL_SWITCHES",
    "new_tally",
    "t_io",
    "t_io_count",
    "t_io_interval",
    "t_mac",
    "t_mac_interval",
    "t_macs_interval",
    "t_macs_counted",
    "t_row",
    "tally_close",
    "tally_in_order",
    "tally_lengths",
    "tally_macs_in_order",
    "tally_open",
    "tally_row_in_order",
]

# Indices into the int64 tally vector ``tl``.
TL_CYCLES = 0  # latest completion so far
TL_SWITCHES = 1  # row switches
TL_MODE_SWITCHES = 2  # class changes in issue order, from compute mode
TL_CLASS = 3  # mode class of the last issued command
TL_COUNTS = 4  # issued commands per opcode (3 entries)
_TL_ROW = 7  # the row switch not yet in M + R + I: (start, ready), start NONE if none
_U_M, _U_MR, _U_MRI = 9, 12, 15  # three unions, each (start, end, closed length)
TL_MAC_END = _U_M + 1  # end of M's open interval: a MAC issued there extends it
_TL_SEG = 18  # start of the MACs not yet in M + R and M + R + I (NONE: none)
TL_LEN = 19
NONE = -1
"""No pending row switch or MAC segment (cycles are never negative)."""

assert (OP_WR_INP, OP_MAC, OP_RD_OUT) == (0, 1, 2)  # the counts' order in the tuple form


@njit(cache=True)
def new_tally() -> np.ndarray:
    """A fresh tally vector: nothing issued, the channel in compute mode."""
    tl = np.zeros(TL_LEN, dtype=np.int64)
    tl[TL_CLASS] = MODE_COMPUTE
    tl[_TL_ROW] = NONE
    tl[_TL_SEG] = NONE
    return tl


@njit(cache=True, inline="always")
def _union_add(tl, u, s, e):
    """Add ``[s, e)`` (no earlier start than any before it) to union ``u``."""
    if s > tl[u + 1]:
        tl[u + 2] += tl[u + 1] - tl[u]
        tl[u] = s
        tl[u + 1] = e
    elif e > tl[u + 1]:
        tl[u + 1] = e


@njit(cache=True, inline="always")
def _count(tl, op, t, tv):
    """Count one issued command (opcode, completion, class change)."""
    tl[TL_COUNTS + op] += 1
    done = t + exec_time(op, tv)
    if done > tl[TL_CYCLES]:
        tl[TL_CYCLES] = done
    cls = mode_class(op)
    if cls != tl[TL_CLASS]:
        tl[TL_MODE_SWITCHES] += 1
        tl[TL_CLASS] = cls


@njit(cache=True, inline="always")
def tally_in_order(tl, op, t, tv):
    """A command issued at ``t`` by a kernel whose intervals all come in start order (the
    static scheduler: a row switch starts after the command before its MAC), so M + R + I
    takes it at once. Row switches then go through :func:`tally_row_in_order`."""
    _count(tl, op, t, tv)
    e = t + tv[TV_CCD]
    if op == OP_MAC:
        _union_add(tl, _U_M, t, e)
        _union_add(tl, _U_MR, t, e)
    _union_add(tl, _U_MRI, t, e)


@njit(cache=True, inline="always")
def tally_macs_in_order(tl, k, t_first, t_last, tv):
    """``k`` MACs issued tCCD apart from ``t_first`` to ``t_last`` by an in-order kernel:
    :func:`tally_in_order` of each at once (their intervals join into one)."""
    tl[TL_COUNTS + OP_MAC] += k
    done = t_last + exec_time(OP_MAC, tv)
    if done > tl[TL_CYCLES]:
        tl[TL_CYCLES] = done
    if tl[TL_CLASS] != MODE_COMPUTE:
        tl[TL_MODE_SWITCHES] += 1
        tl[TL_CLASS] = MODE_COMPUTE
    e = t_last + tv[TV_CCD]
    _union_add(tl, _U_M, t_first, e)
    _union_add(tl, _U_MR, t_first, e)
    _union_add(tl, _U_MRI, t_first, e)


@njit(cache=True, inline="always")
def tally_row_in_order(tl, start, ready):
    """A row switch (:func:`t_row`) for a kernel whose intervals all come in start order."""
    tl[TL_SWITCHES] += 1
    _union_add(tl, _U_MR, start, ready)
    _union_add(tl, _U_MRI, start, ready)


# A kernel's loop holds the vector as a tuple of locals, in ``tl``'s order: cycles, row
# switches, mode switches, class, counts by opcode (n0..n2), the pending row switch (p0, p1),
# the three unions (m*, r*, a*: start, end, closed length), the pending MAC segment's start.


@njit(cache=True, inline="always")
def tally_open(tl):
    """The tally vector as a tuple of locals for a kernel's loop (:func:`tally_close`)."""
    return (
        tl[0], tl[1], tl[2], tl[3], tl[4], tl[5], tl[6], tl[7], tl[8], tl[9],
        tl[10], tl[11], tl[12], tl[13], tl[14], tl[15], tl[16], tl[17], tl[18],
    )  # fmt: skip


@njit(cache=True, inline="always")
def tally_close(tl, tt):
    """Write the tuple of :func:`tally_open` back into ``tl``."""
    (
        tl[0], tl[1], tl[2], tl[3], tl[4], tl[5], tl[6], tl[7], tl[8], tl[9],
        tl[10], tl[11], tl[12], tl[13], tl[14], tl[15], tl[16], tl[17], tl[18],
    ) = tt  # fmt: skip


@njit(cache=True, inline="always")
def _uadd(s0, e0, ln, s, e):
    """``(start, end, closed length)`` of a union after adding ``[s, e)`` (no earlier start
    than its open interval's)."""
    if s > e0:
        return s, e, ln + e0 - s0
    if e > e0:
        return s0, e, ln
    return s0, e0, ln


@njit(cache=True, inline="always")
def _completed(cy, msw, cls, done, mode):
    """``(cycles, mode switches, class)`` after a command of class ``mode`` that completes at
    ``done`` (the locals' form of :func:`_count`)."""
    if done > cy:
        cy = done
    if cls != mode:
        msw += 1
        cls = mode
    return cy, msw, cls


@njit(cache=True, inline="always")
def _segment(tt):
    """The pending row switch and MAC segment moved into M + R + I (the segment into M + R
    too): the row switch was recorded before the segment's first MAC, so it comes first."""
    cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg = tt
    if sg != NONE:
        if p0 != NONE:
            a0, a1, a2 = _uadd(a0, a1, a2, p0, p1)
            p0 = NONE
        r0, r1, r2 = _uadd(r0, r1, r2, sg, m1)
        a0, a1, a2 = _uadd(a0, a1, a2, sg, m1)
        sg = NONE
    return cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg


@njit(cache=True, inline="always")
def t_mac_interval(tt, t, tccd):
    """The interval of a MAC issued at ``t``, no earlier than tCCD after the last MAC (the MAC
    pipeline), so ``[t, t + tccd)`` overlaps no other MAC's: it extends M's open interval
    and the pending segment, or closes them and opens new ones. The MAC is counted by
    :func:`t_macs_counted`."""
    if t != tt[TL_MAC_END]:  # a gap: M's open interval closes, and the segment with it
        tt = _segment(tt)
    cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg = tt
    if t != m1:
        m2 += m1 - m0
        m0 = t
    if sg == NONE:
        sg = t
    return cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, t + tccd, m2, r0, r1, r2, a0, a1, a2, sg


@njit(cache=True, inline="always")
def t_macs_interval(tt, t_first, t_last, tccd):
    """The intervals of MACs issued tCCD apart from ``t_first`` to ``t_last``:
    :func:`t_mac_interval` of each at once (they join into one)."""
    cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg = t_mac_interval(
        tt, t_first, tccd
    )
    m1 = t_last + tccd
    return cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg


@njit(cache=True, inline="always")
def t_macs_counted(tt, k, t_last, tmac):
    """``k`` MACs issued one after the other, the last at ``t_last``, counted (``tmac``: a
    MAC's execution time): their count, completion and the class change before them."""
    cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg = tt
    if k > 0:
        n1 += k
        cy, msw, cls = _completed(cy, msw, cls, t_last + tmac, MODE_COMPUTE)
    return cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg


@njit(cache=True, inline="always")
def t_mac(tt, t, tccd, tmac):
    """A MAC issued at ``t``: :func:`t_mac_interval` and :func:`t_macs_counted`."""
    return t_macs_counted(t_mac_interval(tt, t, tccd), 1, t, tmac)


@njit(cache=True, inline="always")
def t_row(tt, start, ready):
    """A row switch from ``start`` to ``ready`` (the first cycle a MAC may use the row), no
    later than a command already in M + R + I starts (module docstring)."""
    cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg = _segment(tt)
    if p0 != NONE:
        a0, a1, a2 = _uadd(a0, a1, a2, p0, p1)
    sw += 1
    r0, r1, r2 = _uadd(r0, r1, r2, start, ready)
    return cy, sw, msw, cls, n0, n1, n2, start, ready, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg


@njit(cache=True, inline="always")
def t_io_count(tt, op, t, ex):
    """A WR_INP or RD_OUT issued at ``t`` counted (``ex``: its execution time), its interval
    left to :func:`t_io_interval`."""
    cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg = tt
    if op == OP_WR_INP:
        n0 += 1
    else:
        n2 += 1
    cy, msw, cls = _completed(cy, msw, cls, t + ex, MODE_REGISTER)
    return cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg


@njit(cache=True, inline="always")
def t_io_interval(tt, s, e):
    """The interval ``[s, e)`` of a WR_INP or RD_OUT into M + R + I, no later row switch
    starting before ``s`` (module docstring)."""
    cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg = _segment(tt)
    if p0 != NONE and p0 <= s:
        a0, a1, a2 = _uadd(a0, a1, a2, p0, p1)
        p0 = NONE
    a0, a1, a2 = _uadd(a0, a1, a2, s, e)
    return cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg


@njit(cache=True, inline="always")
def t_io(tt, op, t, tccd, ex):
    """A WR_INP or RD_OUT issued at ``t``: :func:`t_io_count` and :func:`t_io_interval`."""
    return t_io_interval(t_io_count(tt, op, t, ex), t, t + tccd)


@njit(cache=True)
def tally_lengths(tl):
    """``(cycles, |M|, |M + R|, |M + R + I|)`` once every command has issued."""
    tt = _segment(tally_open(tl))
    cy, sw, msw, cls, n0, n1, n2, p0, p1, m0, m1, m2, r0, r1, r2, a0, a1, a2, sg = tt
    if p0 != NONE:
        a0, a1, a2 = _uadd(a0, a1, a2, p0, p1)
    return (
        cy,
        m2 + max(0, min(m1, cy) - m0),
        r2 + max(0, min(r1, cy) - r0),
        a2 + max(0, min(a1, cy) - a0),
    )
