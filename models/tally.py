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
MAC and I/O intervals each come in start order; a row switch is recorded after the MAC
before it (it starts tRTP after that MAC at the earliest) and before the MAC that needs it,
so M and M + R are swept at once. A row switch may start before or after I/O commands that
issue after it is recorded (DCS and ping-pong fill it with I/O), so M + R + I merges two
FIFOs (``pend``), I/O and MAC/row, in start order, as far as the kernel says no earlier
interval will come (:func:`tally_flush`). The state is a vector (``tl``) and the FIFOs, so
a kernel can stop at the end of a chunk and carry on with the next: the result does not
depend on where chunks end.

Every interval starts before ``cycles`` (a command completes at least a cycle after its
issue; a row switch ends before its MAC issues), so only the open merged interval of each
union can reach past ``cycles``: :func:`tally_lengths` clips it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from models.dram import INF, MODE_COMPUTE, TV_CCD, exec_time, mode_class
from models.isa import OP_MAC

__all__ = [
    "TL_CLASS",
    "TL_COUNTS",
    "TL_CYCLES",
    "TL_LEN",
    "TL_MODE_SWITCHES",
    "TL_SWITCHES",
    "new_pending",
    "new_tally",
    "tally_flush",
    "tally_in_order",
    "tally_io",
    "tally_lengths",
    "tally_mac",
    "tally_reserve",
    "tally_row",
    "tally_row_in_order",
]

# Indices into the int64 tally vector ``tl``.
TL_CYCLES = 0  # latest completion so far
TL_SWITCHES = 1  # row switches
TL_MODE_SWITCHES = 2  # class changes in issue order, from compute mode
TL_CLASS = 3  # mode class of the last issued command
TL_COUNTS = 4  # issued commands per opcode (3 entries)
_TL_FIFO = 7  # (head, tail) of the waiting I/O, then of the waiting MAC/row intervals
_U_M, _U_MR, _U_MRI = 11, 14, 17  # three unions, each (start, end, closed length)
TL_LEN = 20
_IO, _MR = 0, 1  # the two FIFOs of ``pend``


@njit(cache=True)
def new_tally() -> np.ndarray:
    """A fresh tally vector: nothing issued, the channel in compute mode."""
    tl = np.zeros(TL_LEN, dtype=np.int64)
    tl[TL_CLASS] = MODE_COMPUTE
    return tl


@njit(cache=True)
def new_pending(capacity: int = 256) -> np.ndarray:
    """Two empty FIFOs of intervals waiting for M + R + I: I/O, and MAC or row switch (grown
    by the kernels when full)."""
    return np.empty((2, max(capacity, 8), 2), dtype=np.int64)


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
def _push(tl, pend, f, s, e):
    """Append ``[s, e)`` to FIFO ``f`` (:func:`tally_reserve` made room for it)."""
    tail = tl[_TL_FIFO + 2 * f + 1]
    pend[f, tail, 0] = s
    pend[f, tail, 1] = e
    tl[_TL_FIFO + 2 * f + 1] = tail + 1


@njit(cache=True)
def tally_reserve(tl, pend, k):
    """``pend`` with room for ``k`` more intervals in each FIFO: the waiting intervals moved to
    the front, and a larger copy if that is not enough. A kernel pushes at most one interval
    per issued command and one per row switch, so its caller reserves for that many before
    it runs (the kernels never grow ``pend`` themselves)."""
    for f in range(2):
        h = tl[_TL_FIFO + 2 * f]
        tail = tl[_TL_FIFO + 2 * f + 1]
        if h > 0:
            for j in range(tail - h):
                pend[f, j, 0] = pend[f, h + j, 0]
                pend[f, j, 1] = pend[f, h + j, 1]
            tl[_TL_FIFO + 2 * f] = 0
            tl[_TL_FIFO + 2 * f + 1] = tail - h
    need = max(tl[_TL_FIFO + 1], tl[_TL_FIFO + 3]) + k
    if need <= pend.shape[1]:
        return pend
    grown = np.empty((2, max(need, 2 * pend.shape[1]), 2), dtype=np.int64)
    grown[:, : pend.shape[1]] = pend
    return grown


@njit(cache=True, inline="always")
def tally_flush(tl, pend, next_io, next_mr):
    """Merge the waiting intervals into M + R + I in start order, as far as it is known: no
    I/O command will issue before ``next_io``, no MAC issue or row switch start before
    ``next_mr``."""
    hi, ti = tl[_TL_FIFO], tl[_TL_FIFO + 1]
    hm, tm = tl[_TL_FIFO + 2], tl[_TL_FIFO + 3]
    while True:
        s_io = pend[_IO, hi, 0] if hi < ti else INF
        s_mr = pend[_MR, hm, 0] if hm < tm else INF
        if s_io <= s_mr:  # the I/O head goes first unless a MAC or row switch may still
            if hi == ti or (hm == tm and s_io > next_mr):  # come before it
                break
            _union_add(tl, _U_MRI, s_io, pend[_IO, hi, 1])
            hi += 1
        else:
            if hi == ti and s_mr > next_io:
                break
            _union_add(tl, _U_MRI, s_mr, pend[_MR, hm, 1])
            hm += 1
    if hi == ti:
        hi = 0
        ti = 0
    if hm == tm:
        hm = 0
        tm = 0
    tl[_TL_FIFO], tl[_TL_FIFO + 1] = hi, ti
    tl[_TL_FIFO + 2], tl[_TL_FIFO + 3] = hm, tm


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
def tally_mac(tl, pend, t, tv):
    """A MAC issued at ``t``. Each of ``tally_mac``, ``tally_row`` and ``tally_io`` takes
    room for one interval in ``pend`` (:func:`tally_reserve`)."""
    _count(tl, OP_MAC, t, tv)
    e = t + tv[TV_CCD]
    _union_add(tl, _U_M, t, e)
    _union_add(tl, _U_MR, t, e)
    if tl[_TL_FIFO] == tl[_TL_FIFO + 1] and tl[_TL_FIFO + 2] == tl[_TL_FIFO + 3]:
        _union_add(tl, _U_MRI, t, e)  # nothing waits, and no I/O issues before t + 1
    else:
        _push(tl, pend, _MR, t, e)


@njit(cache=True, inline="always")
def tally_row(tl, pend, start, ready):
    """A row switch from ``start`` to ``ready`` (the first cycle a MAC may use the row)."""
    tl[TL_SWITCHES] += 1
    _union_add(tl, _U_MR, start, ready)
    _push(tl, pend, _MR, start, ready)


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
def tally_row_in_order(tl, start, ready):
    """:func:`tally_row` for a kernel whose intervals all come in start order."""
    tl[TL_SWITCHES] += 1
    _union_add(tl, _U_MR, start, ready)
    _union_add(tl, _U_MRI, start, ready)


@njit(cache=True, inline="always")
def tally_io(tl, pend, op, t, tv):
    """A WR_INP or RD_OUT issued at ``t``."""
    _count(tl, op, t, tv)
    _push(tl, pend, _IO, t, t + tv[TV_CCD])


@njit(cache=True)
def tally_lengths(tl, pend):
    """``(cycles, |M|, |M + R|, |M + R + I|)`` once every command has issued."""
    tally_flush(tl, pend, INF, INF)
    cycles = tl[TL_CYCLES]
    lengths = np.zeros(3, dtype=np.int64)
    for k, u in enumerate((_U_M, _U_MR, _U_MRI)):
        lengths[k] = tl[u + 2] + max(0, min(tl[u + 1], cycles) - tl[u])
    return cycles, lengths[0], lengths[1], lengths[2]
