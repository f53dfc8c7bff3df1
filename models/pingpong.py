"""Ping-pong I/O-aware buffering (LoL-PIM section 6): two buffer halves, dual queues, hand-off.

GBuf and OBuf are each split into a low and a high half. Contract (``docs/scheduling.md``):

- **Phases.** The MACs, in program order, form compute phases: a new phase starts whenever a
  MAC's (GBuf half, OBuf half) differs from the previous MAC's. Phase ``p`` runs in slot ``p``.
- **Slots for I/O.** Each I/O command runs in one slot, next to one compute phase, on the
  half that phase does not use. With ``c`` the phase of the last MAC before it in program
  order (-1 if none): a WR_INP goes to slot ``c`` if phase ``c`` does not read its GBuf half,
  else to ``c + 1``; a RD_OUT goes to slot ``c + 1``. Slot -1 is a prologue (inputs for the
  first phase), slot P (after the last phase) an epilogue.
- **Legality.** A WR_INP's slot must not use its GBuf half and must come before the phase of
  the next MAC reading its entry; a RD_OUT's slot must not use its OBuf half and must come
  before the next MAC writing its entry. Streams that break this are refused
  (:class:`PingPongError`), since ping-pong has no per-entry dependency tracking.
- **Dispatch.** Commands are accepted one per cycle in program order into the two queues,
  which hold a whole phase (no back-pressure); a command issues one cycle after acceptance at
  the earliest.
- **Execution.** Within a slot the I/O queue and the compute queue each run in order with the
  static scheduler's gaps (tCCD for the same opcode, the previous command's execution time on
  an opcode change); one command issues per cycle, the MAC first on a tie (as under DCS).
  A MAC's row switch starts when it reaches the head of the compute queue.
- **Mode switch.** With ``t_MOD > 0`` the issue policy is mode-aware, as DCS's: the current
  mode (compute: MACs; register: WR_INP, RD_OUT) holds the channel while its queue holds a
  head of the running slot, i.e. a command of the slot accepted before the cycle; inside a
  slot nothing but its own queue's gaps and its row delays that head, so it issues without
  the other queue. Otherwise the other queue's head of the slot pays the mode switch
  (``models.dram.mode_switch``): a TMOD in the cycle it is ready, the command ``t_MOD`` later.
  The mode carries over a hand-off. It cannot deadlock: the held queue drains by itself, and
  a slot ends only when both queues have.
- **Hand-off.** The next slot starts (the ping-pong bit flips) only once every command of the
  current slot has completed (issue + execution time): both halves idle. The cycles the
  earlier-finishing queue waits for that are the hand-off stall.
- **No look-ahead.** Slots are decided online from earlier commands, but whether a slot has
  received its last command is not: a controller (``rtl/pingpong.py``) hands the slot off as
  soon as everything it has accepted for the slot has completed and a command of a later slot
  is waiting. With input gaps (``valid_gaps``) a command of the slot could still arrive after
  that; such runs are refused (:class:`PingPongError`) instead of assuming look-ahead. Without
  gaps this never happens for the compiler's kernels.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from models.dram import (
    INF,
    MODE_COMPUTE,
    MODE_REGISTER,
    NEVER,
    TV_CCD,
    TV_MOD,
    exec_time,
    mode_switch,
    open_row,
)
from models.errors import PimphonyError
from models.isa import OP_MAC, OP_WR_INP
from models.static_sched import static_gap
from models.tally import (
    TL_SWITCHES,
    tally_flush,
    tally_io,
    tally_mac,
    tally_row,
)

__all__ = [
    "PP_FLIP",
    "PP_HANDOFF",
    "PP_LATE",
    "PingPongError",
    "late_command_error",
    "new_pingpong_state",
    "pingpong_assign",
    "pingpong_illegal",
    "pingpong_run",
    "pingpong_schedule",
    "pingpong_slots",
]


class PingPongError(PimphonyError, ValueError):
    """The stream cannot run under ping-pong buffering without breaking a dependency."""


@njit(cache=True)
def pingpong_slots(op, gbuf, out, n_gbuf, n_obuf):
    """Slot (phase index, -1 for the prologue) of every command, and per-phase halves.

    Returns ``(slot, phase_gh, phase_oh, n_phases, bad_cmd, bad_code)``; ``bad_cmd >= 0``
    names the first command that breaks the legality rules (``bad_code`` says which). The
    whole-stream form of :func:`pingpong_assign` and :func:`pingpong_illegal`.
    """
    n = op.shape[0]
    slot, _, phase_gh, phase_oh, last = pingpong_assign(op, gbuf, out, n_gbuf, n_obuf, -1, 0, 0)
    n_phases = last + 1
    bad_cmd, bad_code = pingpong_illegal(
        op, gbuf, out, slot, 0, n, n_gbuf, n_obuf, phase_gh, phase_oh, 0, n_phases
    )
    return slot, phase_gh, phase_oh, n_phases, bad_cmd, bad_code


def pingpong_schedule(op, row, slot, n_phases, valid_gaps, tv, sw_start, sw_end):
    """Issue cycle of every command under ping-pong, given its slot.

    Returns ``(issue, n_switches, handoff_stall)``. Raises :class:`PingPongError` if a command
    arrives after an online controller would already have handed its slot off (only possible
    with ``valid_gaps``; see the module docstring).
    """
    issue, n_sw, handoff, late, flip_at = _pingpong_kernel(
        op, row, slot, n_phases, valid_gaps, tv, sw_start, sw_end
    )
    if late >= 0:
        raise late_command_error(late, int(np.sum(valid_gaps[: late + 1]) + late), flip_at)
    return issue, n_sw, handoff


def late_command_error(late: int, accepted: int, flip_at: int) -> PingPongError:
    """The error of a command offered after its slot was handed off (module docstring)."""
    return PingPongError(
        f"command {late} is offered at cycle {accepted}, after the controller handed its "
        f"slot off at cycle {flip_at} (every earlier command of the slot had completed and "
        f"a later slot's command was waiting); ping-pong needs a phase's commands to "
        f"arrive without such input gaps -- use the dcs scheduler"
    )


@njit(cache=True)
def _pingpong_kernel(op, row, slot, n_phases, valid_gaps, tv, sw_start, sw_end):
    """:func:`pingpong_schedule` plus the first late command (-1 if none) and its hand-off."""
    n = op.shape[0]
    # Dispatch: one command per cycle in program order, into queues that hold a whole phase.
    accept = np.empty(n, dtype=np.int64)
    a_prev = -1
    for k in range(n):
        a_prev = a_prev + 1 + valid_gaps[k]
        accept[k] = a_prev
    n_slots = n_phases + 2  # prologue, phases, epilogue
    # Bucket commands by slot, keeping program order inside each bucket.
    count = np.zeros(n_slots + 1, dtype=np.int64)
    for k in range(n):
        count[slot[k] + 2] += 1
    start_of = np.cumsum(count)
    fill = start_of.copy()
    order = np.empty(n, dtype=np.int64)
    for k in range(n):
        order[fill[slot[k] + 1]] = k
        fill[slot[k] + 1] += 1

    # First command (program order) of each slot or a later one: its acceptance lets an
    # online controller know that a later slot is waiting.
    first_after = np.full(n_slots + 1, n, dtype=np.int64)
    for k in range(n - 1, -1, -1):
        first_after[slot[k] + 1] = k
    for s in range(n_slots - 1, -1, -1):
        first_after[s] = min(first_after[s], first_after[s + 1])
    late = -1
    flip_at = -1

    issue = np.empty(n, dtype=np.int64)
    barrier = 1
    last_io = NEVER
    last_io_op = -1
    last_mac = NEVER
    last_issue = NEVER
    cur_row = -1
    t_act_last = NEVER
    row_ready = 0
    n_sw = 0
    handoff = 0
    mode = MODE_COMPUTE
    for s in range(n_slots):
        lo = start_of[s]
        hi = start_of[s + 1]
        # Two cursors over the bucket: one for I/O commands, one for MACs.
        pi = lo
        pc = lo
        while pi < hi and op[order[pi]] == OP_MAC:
            pi += 1
        while pc < hi and op[order[pc]] != OP_MAC:
            pc += 1
        prepared = -1
        end_io = barrier
        end_c = barrier
        while pi < hi or pc < hi:
            ti = INF
            if pi < hi:
                k = order[pi]
                gap = tv[TV_CCD]
                if last_io_op >= 0 and last_io >= barrier:
                    gap = static_gap(last_io_op, op[k], tv)
                ti = max(barrier, accept[k] + 1, last_issue + 1, last_io + gap)
            tc = INF
            tc_no_row = INF
            if pc < hi:
                k = order[pc]
                if prepared != pc:
                    prepared = pc
                    if row[k] != cur_row:
                        head = max(last_mac + 1, accept[k] + 1)
                        st, t_act_last, row_ready = open_row(
                            head, cur_row, t_act_last, last_mac, tv
                        )
                        sw_start[n_sw] = st
                        sw_end[n_sw] = row_ready
                        n_sw += 1
                        cur_row = row[k]
                tc_no_row = max(barrier, accept[k] + 1, last_issue + 1, last_mac + tv[TV_CCD])
                tc = max(tc_no_row, row_ready)
            # ``xi``/``xc``: the heads' issue cycles; ``ti``/``tc`` stay the cycles the
            # controller commits to them. Without a mode rule the earlier head goes, the MAC
            # on a tie. With one, the current mode holds the channel while its head of the
            # slot is queued (accepted before the cycle the other head would start its TMOD):
            # inside a slot nothing else blocks it. Otherwise the other head pays the TMOD.
            xi = ti
            xc = tc
            if tv[TV_MOD] == 0:
                take_io = ti < tc
            elif mode == MODE_COMPUTE:
                take_io = pc >= hi or (pi < hi and accept[order[pc]] >= ti)
                if take_io:
                    ti, xi = mode_switch(ti, ti, tv)
            else:
                tmod_c, xc = mode_switch(tc, tc_no_row, tv)
                take_io = pi < hi and (pc >= hi or accept[order[pi]] < tmod_c)
                if not take_io:
                    tc = tmod_c
            if take_io:
                k = order[pi]
                ti = xi
                mode = MODE_REGISTER
                issue[k] = ti
                last_io = ti
                last_io_op = op[k]
                last_issue = ti
                end_io = max(end_io, ti + exec_time(op[k], tv))
                pi += 1
                while pi < hi and op[order[pi]] == OP_MAC:
                    pi += 1
            else:
                k = order[pc]
                tc = xc
                mode = MODE_COMPUTE
                issue[k] = tc
                last_mac = tc
                last_issue = tc
                end_c = max(end_c, tc + exec_time(OP_MAC, tv))
                pc += 1
                while pc < hi and op[order[pc]] != OP_MAC:
                    pc += 1
        new_barrier = max(end_io, end_c)
        if end_io > barrier and end_c > barrier:
            handoff += new_barrier - min(end_io, end_c)
        barrier = new_barrier
        # Online hand-off: the first cycle t after a later slot's command was accepted at
        # which every command of this slot accepted by t has completed. A command of the
        # slot accepted after t arrives too late.
        later = first_after[s + 1]
        if late < 0 and later < n and lo < hi:
            t = accept[later] + 1
            j = lo
            done = NEVER
            while True:
                while j < hi and accept[order[j]] <= t:
                    done = max(done, issue[order[j]] + exec_time(op[order[j]], tv))
                    j += 1
                if done <= t:
                    break
                t = done
            if j < hi:
                late = order[j]
                flip_at = t
    return issue, n_sw, handoff, late, flip_at


# Indices into the state vector of :func:`pingpong_run`.
(_P_BARRIER, _P_IO, _P_IO_OP, _P_MAC, _P_ISSUE, _P_ROW, _P_ACT, _P_READY) = range(8)
_P_HANDOFF, _P_MODE, _P_LATE, _P_FLIP = range(8, 12)
_P_LEN = 12
PP_HANDOFF, PP_LATE, PP_FLIP = _P_HANDOFF, _P_LATE, _P_FLIP
"""State entries a driver reads: hand-off stall so far, the first late command (program
index, -1 if none) and the cycle its slot was handed off."""


@njit(cache=True)
def new_pingpong_state():
    """The state vector of a channel before its first slot under ping-pong."""
    st = np.zeros(_P_LEN, dtype=np.int64)
    st[_P_BARRIER] = 1
    st[_P_IO] = NEVER
    st[_P_IO_OP] = -1
    st[_P_MAC] = NEVER
    st[_P_ISSUE] = NEVER
    st[_P_ROW] = -1
    st[_P_ACT] = NEVER
    st[_P_MODE] = MODE_COMPUTE
    st[_P_LATE] = -1
    st[_P_FLIP] = -1
    return st


@njit(cache=True)
def pingpong_assign(op, gbuf, out, n_gbuf, n_obuf, c, cur_gh, cur_oh):
    """:func:`pingpong_slots`' slot rule, online: carry on from phase ``c`` (-1 before the
    first MAC) whose halves are ``cur_gh``/``cur_oh``.

    Returns ``(slot, phase, new_gh, new_oh, c)``: per command its slot and the phase of the
    last MAC up to it, the halves of the phases that start in this chunk, and the phase at its
    end.
    """
    n = op.shape[0]
    half_g = n_gbuf // 2
    half_o = n_obuf // 2
    slot = np.empty(n, dtype=np.int64)
    phase = np.empty(n, dtype=np.int64)
    new_gh = np.empty(n, dtype=np.int64)
    new_oh = np.empty(n, dtype=np.int64)
    n_new = 0
    for k in range(n):
        o = op[k]
        if o == OP_MAC:
            gh = 1 if gbuf[k] >= half_g else 0
            oh = 1 if out[k] >= half_o else 0
            if c < 0 or gh != cur_gh or oh != cur_oh:
                c += 1
                cur_gh = gh
                cur_oh = oh
                new_gh[n_new] = gh
                new_oh[n_new] = oh
                n_new += 1
            slot[k] = c
        elif o == OP_WR_INP:
            gh = 1 if gbuf[k] >= half_g else 0
            slot[k] = c if (c < 0 or cur_gh != gh) else c + 1
        else:
            slot[k] = c + 1
        phase[k] = c
    return slot, phase, new_gh[:n_new], new_oh[:n_new], c


@njit(cache=True)
def pingpong_illegal(op, gbuf, out, slot, lo, hi, n_gbuf, n_obuf, phase_gh, phase_oh, base, n_ph):
    """First command in ``[lo, hi)`` that breaks :func:`pingpong_slots`' legality rules, given
    every command after it whose slot could matter (the rest of the arrays), the halves of
    phases ``base`` on and the number of phases (or any larger number while it is unknown).

    Returns ``(index, code)``, index -1 if none.
    """
    n = op.shape[0]
    half_g = n_gbuf // 2
    half_o = n_obuf // 2
    next_g = np.full(n_gbuf, INF, dtype=np.int64)
    next_o = np.full(n_obuf, INF, dtype=np.int64)
    bad_cmd = -1
    bad_code = 0
    for k in range(n - 1, lo - 1, -1):
        s = slot[k]
        if op[k] == OP_MAC:
            next_g[gbuf[k]] = s
            next_o[out[k]] = s
            continue
        if k >= hi:
            continue
        if op[k] == OP_WR_INP:
            gh = 1 if gbuf[k] >= half_g else 0
            if 0 <= s < n_ph and phase_gh[s - base] == gh:
                bad_cmd, bad_code = k, 1
            elif next_g[gbuf[k]] <= s:
                bad_cmd, bad_code = k, 2
        else:
            oh = 1 if out[k] >= half_o else 0
            if s < n_ph and phase_oh[s - base] == oh:
                bad_cmd, bad_code = k, 3
            elif next_o[out[k]] <= s:
                bad_cmd, bad_code = k, 4
    return bad_cmd, bad_code


@njit(cache=True)
def pingpong_run(st, tl, pend, op, row, slot, accept, base, s_lo, s_hi, tv, issue_out, sw_out):
    """Run slots ``s_lo..s_hi`` of the commands held (``op``, ``row``, ``slot`` and acceptance
    cycle of each; consecutive in program order from index ``base``), carrying on from ``st``
    and adding to the tally ``tl``/``pend`` (:mod:`models.tally`).

    ``_pingpong_kernel``'s rules, a slot at a time; the commands held include every command
    of those slots and, unless ``s_hi`` is the epilogue, the first command of a later slot
    (the online hand-off needs its acceptance). If ``issue_out`` has an entry per command of
    the whole stream, issue cycles are written there, and row switches to ``sw_out``.
    ``pend`` has room for two intervals per command held (:func:`models.tally.tally_reserve`).
    """
    n = op.shape[0]
    record = issue_out.shape[0] > 0
    n_slots = s_hi - s_lo + 1
    count = np.zeros(n_slots + 1, dtype=np.int64)
    for k in range(n):
        if s_lo <= slot[k] <= s_hi:
            count[slot[k] - s_lo + 1] += 1
    start_of = np.cumsum(count)
    fill = start_of.copy()
    order = np.empty(start_of[n_slots], dtype=np.int64)
    for k in range(n):
        if s_lo <= slot[k] <= s_hi:
            b = slot[k] - s_lo
            order[fill[b]] = k
            fill[b] += 1
    # first_after[x]: the first held command of slot s_lo + x or a later one (n: none).
    first_after = np.full(n_slots + 1, n, dtype=np.int64)
    for k in range(n - 1, -1, -1):
        if slot[k] > s_lo:
            first_after[min(slot[k] - s_lo, n_slots)] = k
    for x in range(n_slots - 1, -1, -1):
        first_after[x] = min(first_after[x], first_after[x + 1])
    issue = np.empty(n, dtype=np.int64)

    barrier = st[_P_BARRIER]
    last_io = st[_P_IO]
    last_io_op = st[_P_IO_OP]
    last_mac = st[_P_MAC]
    last_issue = st[_P_ISSUE]
    cur_row = st[_P_ROW]
    t_act_last = st[_P_ACT]
    row_ready = st[_P_READY]
    handoff = st[_P_HANDOFF]
    mode = st[_P_MODE]
    late = st[_P_LATE]
    flip_at = st[_P_FLIP]
    for b in range(n_slots):
        lo = start_of[b]
        hi = start_of[b + 1]
        pi = lo
        pc = lo
        while pi < hi and op[order[pi]] == OP_MAC:
            pi += 1
        while pc < hi and op[order[pc]] != OP_MAC:
            pc += 1
        prepared = -1
        end_io = barrier
        end_c = barrier
        while pi < hi or pc < hi:
            ti = INF
            if pi < hi:
                k = order[pi]
                gap = tv[TV_CCD]
                if last_io_op >= 0 and last_io >= barrier:
                    gap = static_gap(last_io_op, op[k], tv)
                ti = max(barrier, accept[k] + 1, last_issue + 1, last_io + gap)
            tc = INF
            tc_no_row = INF
            if pc < hi:
                k = order[pc]
                if prepared != pc:
                    prepared = pc
                    if row[k] != cur_row:
                        head = max(last_mac + 1, accept[k] + 1)
                        st_, t_act_last, row_ready = open_row(
                            head, cur_row, t_act_last, last_mac, tv
                        )
                        tally_row(tl, pend, st_, row_ready)
                        if record:
                            n_sw = tl[TL_SWITCHES] - 1
                            sw_out[n_sw, 0] = st_
                            sw_out[n_sw, 1] = row_ready
                        cur_row = row[k]
                tc_no_row = max(barrier, accept[k] + 1, last_issue + 1, last_mac + tv[TV_CCD])
                tc = max(tc_no_row, row_ready)
            xi = ti
            xc = tc
            if tv[TV_MOD] == 0:
                take_io = ti < tc
            elif mode == MODE_COMPUTE:
                take_io = pc >= hi or (pi < hi and accept[order[pc]] >= ti)
                if take_io:
                    ti, xi = mode_switch(ti, ti, tv)
            else:
                tmod_c, xc = mode_switch(tc, tc_no_row, tv)
                take_io = pi < hi and (pc >= hi or accept[order[pi]] < tmod_c)
                if not take_io:
                    tc = tmod_c
            if take_io:
                k = order[pi]
                ti = xi
                mode = MODE_REGISTER
                issue[k] = ti
                last_io = ti
                last_io_op = op[k]
                last_issue = ti
                end_io = max(end_io, ti + exec_time(op[k], tv))
                tally_io(tl, pend, np.int64(op[k]), ti, tv)
                # No row switch starts before the next MAC reaches its queue head.
                tally_flush(tl, pend, last_issue + 1, last_mac + 1)
                pi += 1
                while pi < hi and op[order[pi]] == OP_MAC:
                    pi += 1
            else:
                k = order[pc]
                tc = xc
                mode = MODE_COMPUTE
                issue[k] = tc
                last_mac = tc
                last_issue = tc
                end_c = max(end_c, tc + exec_time(OP_MAC, tv))
                tally_mac(tl, pend, tc, tv)
                tally_flush(tl, pend, last_issue + 1, last_mac + 1)
                pc += 1
                while pc < hi and op[order[pc]] != OP_MAC:
                    pc += 1
            if record:
                issue_out[base + k] = issue[k]
        new_barrier = max(end_io, end_c)
        if end_io > barrier and end_c > barrier:
            handoff += new_barrier - min(end_io, end_c)
        barrier = new_barrier
        later = first_after[b + 1]
        if late < 0 and later < n and lo < hi:
            t = accept[later] + 1
            j = lo
            done = NEVER
            while True:
                while j < hi and accept[order[j]] <= t:
                    done = max(done, issue[order[j]] + exec_time(op[order[j]], tv))
                    j += 1
                if done <= t:
                    break
                t = done
            if j < hi:
                late = base + order[j]
                flip_at = t
    st[_P_BARRIER] = barrier
    st[_P_IO] = last_io
    st[_P_IO_OP] = last_io_op
    st[_P_MAC] = last_mac
    st[_P_ISSUE] = last_issue
    st[_P_ROW] = cur_row
    st[_P_ACT] = t_act_last
    st[_P_READY] = row_ready
    st[_P_HANDOFF] = handoff
    st[_P_MODE] = mode
    st[_P_LATE] = late
    st[_P_FLIP] = flip_at
