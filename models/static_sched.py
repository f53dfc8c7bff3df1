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
from numba import njit

from models.dram import MODE_COMPUTE, NEVER, TV_CCD, exec_time, mode_class, mode_gate, open_row
from models.isa import OP_MAC

__all__ = ["static_gap", "static_schedule"]


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
