"""The static (baseline) scheduler: strictly in order, fixed time gaps.

Command ``i`` issues at the earliest cycle that satisfies all of:

- it has been accepted (one command per cycle from the input stream, into a FIFO of
  ``queue_depth`` entries) and at least one cycle has passed since;
- ``issue(i-1) + gap``, where ``gap`` is tCCD when ``op(i) == op(i-1)`` and the execution
  time of command ``i-1`` (t_WR_INP, t_MAC or t_RD_OUT) otherwise;
- for a MAC: its row is open (``models.dram.open_row``; the switch starts when the MAC reaches
  the head of the queue, i.e. the cycle after ``issue(i-1)``);
- with ``t_MOD > 0``, when its class (MAC: compute; WR_INP, RD_OUT: register) differs from
  the previous command's (compute before the first): ``t_MOD`` after the TMOD
  (``models.dram.mode_switch``).
"""

from __future__ import annotations

import numpy as np
from pimphony.models.dram import (
    MODE_COMPUTE,
    NEVER,
    TV_CCD,
    exec_time,
    mode_class,
    mode_gate,
    open_row,
)
from pimphony.models.isa import OP_MAC
from pimphony.models.jit import njit
from pimphony.models.tally import (
    TL_SWITCHES,
    tally_in_order,
    tally_macs_in_order,
    tally_row_in_order,
)

__all__ = ["new_static_state", "static_gap", "static_run", "static_schedule"]


@njit(cache=True)
def static_gap(prev_op: int, op: int, tv: np.ndarray) -> int:
    """Cycles from issuing ``prev_op`` to issuing the next command ``op`` in program order.

    tCCD when the opcodes match, else the execution time of ``prev_op``. The numpy form for
    checking a schedule is ``models.channel.static_gap_violations``.
    """
    return tv[TV_CCD] if op == prev_op else exec_time(prev_op, tv)


@njit(cache=True)
def static_schedule(op, row, valid_gaps, tv, depth, sw_start, sw_end):
    """Issue cycle of every command; row switches written to ``sw_start``/``sw_end``.

    Returns ``(issue, n_switches)``.
    """
    n = op.shape[0]
    issue = np.empty(n, dtype=np.int64)
    cur_row = -1
    t_act_last = NEVER
    t_last_mac = NEVER
    row_ready = 0
    n_sw = 0
    a_prev = -1
    mode = MODE_COMPUTE
    for i in range(n):
        a = a_prev + 1 + valid_gaps[i]
        if i >= depth:
            a = max(a, issue[i - depth] + 1)
        a_prev = a
        head = a + 1
        t = head
        if i > 0:
            head = max(head, issue[i - 1] + 1)
            t = max(head, issue[i - 1] + static_gap(op[i - 1], op[i], tv))
        t_no_row = t
        if op[i] == OP_MAC:
            if row[i] != cur_row:
                start, t_act_last, row_ready = open_row(head, cur_row, t_act_last, t_last_mac, tv)
                sw_start[n_sw] = start
                sw_end[n_sw] = row_ready
                n_sw += 1
                cur_row = row[i]
            t = max(t, row_ready)
        t = mode_gate(t, t_no_row, mode_class(op[i]), mode, tv)[1]
        mode = mode_class(op[i])
        if op[i] == OP_MAC:
            t_last_mac = t
        issue[i] = t
    return issue, n_sw


# Indices into the state vector of :func:`static_run`.
_S_NEXT, _S_ACCEPT, _S_ROW, _S_ACT, _S_MAC, _S_READY, _S_MODE, _S_OP, _S_ISSUE = range(9)
_S_LEN = 9


@njit(cache=True)
def new_static_state(depth: int) -> tuple[np.ndarray, np.ndarray]:
    """``(state, history)`` of a channel before its first command under the static scheduler;
    ``history`` holds the issue cycles of the last ``depth`` commands (queue back-pressure)."""
    st = np.zeros(_S_LEN, dtype=np.int64)
    st[_S_ACCEPT] = -1
    st[_S_ROW] = -1
    st[_S_ACT] = NEVER
    st[_S_MAC] = NEVER
    st[_S_MODE] = MODE_COMPUTE
    st[_S_OP] = -1
    st[_S_ISSUE] = NEVER
    return st, np.zeros(max(depth, 1), dtype=np.int64)


@njit(cache=True)
def static_run(st, hist, tl, op, row, valid_gaps, tv, issue_out, sw_out):
    """Schedule the next chunk of commands (``op``, ``row``, ``valid_gaps``; empty: no gaps),
    carrying on from ``st``/``hist`` and adding to the tally ``tl`` (:mod:`models.tally`; in
    program order every interval comes in start order, so none is held back).

    :func:`static_schedule`'s rules, one command at a time but for runs of MACs on the open
    row, taken at once where the rules fix them (:func:`_mac_run`). If ``issue_out`` has an
    entry per command of the whole stream, issue cycles are written there (by global index),
    and row switches to ``sw_out`` likewise.
    """
    depth = hist.shape[0]
    tccd = tv[TV_CCD]
    record = issue_out.shape[0] > 0
    i = st[_S_NEXT]
    a_prev = st[_S_ACCEPT]
    cur_row = st[_S_ROW]
    t_act_last = st[_S_ACT]
    t_last_mac = st[_S_MAC]
    row_ready = st[_S_READY]
    mode = st[_S_MODE]
    prev_op = st[_S_OP]
    prev_issue = st[_S_ISSUE]
    slot = i % depth  # ring slot of command i - depth
    n = op.shape[0]
    j = 0
    while j < n:
        o = np.int64(op[j])
        a = a_prev + 1
        if valid_gaps.shape[0] > 0:
            a += valid_gaps[j]
        if i >= depth:
            a = max(a, hist[slot] + 1)
        a_prev = a
        head = a + 1
        t = head
        if i > 0:
            head = max(head, prev_issue + 1)
            t = max(head, prev_issue + static_gap(prev_op, o, tv))
        t_no_row = t
        if o == OP_MAC:
            r = np.int64(row[j])
            if r != cur_row:
                start, t_act_last, row_ready = open_row(head, cur_row, t_act_last, t_last_mac, tv)
                tally_row_in_order(tl, start, row_ready)
                if record:
                    n_sw = tl[TL_SWITCHES] - 1
                    sw_out[n_sw, 0] = start
                    sw_out[n_sw, 1] = row_ready
                cur_row = r
            t = max(t, row_ready)
        cls = mode_class(o)
        t = mode_gate(t, t_no_row, cls, mode, tv)[1]
        mode = cls
        if o == OP_MAC:
            t_last_mac = t
        tally_in_order(tl, o, t, tv)
        if record:
            issue_out[i] = t
        hist[slot] = t
        slot = 0 if slot + 1 == depth else slot + 1
        prev_op = o
        prev_issue = t
        i += 1
        j += 1
        if o == OP_MAC and depth + tccd >= 3 and a + 2 <= t + tccd:
            k = _mac_run(op, row, valid_gaps, j, cur_row)
            if k > 0:
                # Each issues tCCD after the one before (see _mac_run): the last at t_last.
                t_last = t + k * tccd
                last = i + k - 1  # its index; its acceptance waits for command last - depth
                a_prev = a + k
                if last >= depth:
                    w = last - depth
                    t_w = t + (w - i + 1) * tccd if w >= i else hist[last % depth]
                    a_prev = max(a_prev, t_w + 1)
                tally_macs_in_order(tl, k, t + tccd, t_last, tv)
                if record:
                    for m in range(k):
                        issue_out[i + m] = t + (m + 1) * tccd
                for m in range(max(0, k - depth), k):
                    hist[(i + m) % depth] = t + (m + 1) * tccd
                i += k
                j += k
                slot = i % depth
                t_last_mac = t_last
                prev_issue = t_last
    st[_S_NEXT] = i
    st[_S_ACCEPT] = a_prev
    st[_S_ROW] = cur_row
    st[_S_ACT] = t_act_last
    st[_S_MAC] = t_last_mac
    st[_S_READY] = row_ready
    st[_S_MODE] = mode
    st[_S_OP] = prev_op
    st[_S_ISSUE] = prev_issue


@njit(cache=True, inline="always")
def _mac_run(op, row, valid_gaps, j, cur_row):
    """MACs on ``cur_row`` from command ``j`` on, offered without a gap: how many in a row.

    Taken at once after a MAC issued at ``t`` on that row, accepted at ``a`` with
    ``a + 2 <= t + tCCD``: the ``m``-th of them is accepted at ``max(a + m, issue(m - depth)
    + 1)`` (issue cycles rise by one or more per command), so with ``depth + tCCD >= 3`` it
    reaches the head by ``t + (m - 1) tCCD + 1`` and issues at ``t + m tCCD``: its row is
    open, its mode is the MAC's, and the gap after a MAC is tCCD.
    """
    k = j
    while k < op.shape[0] and op[k] == OP_MAC and np.int64(row[k]) == cur_row:
        if valid_gaps.shape[0] > 0 and valid_gaps[k] != 0:
            break
        k += 1
    return k - j
