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
from pimphony.models.dram import (
    INF,
    MODE_COMPUTE,
    MODE_REGISTER,
    NEVER,
    TV_CCD,
    TV_MOD,
    exec_time,
    mode_switch,
    open_row,
    uix,
)
from pimphony.models.errors import PimphonyError
from pimphony.models.isa import OP_MAC, OP_RD_OUT, OP_WR_INP
from pimphony.models.jit import njit
from pimphony.models.static_sched import static_gap
from pimphony.models.tally import (
    TL_SWITCHES,
    t_io_count,
    t_io_interval,
    t_mac,
    t_mac_interval,
    t_macs_counted,
    t_macs_interval,
    t_row,
    tally_close,
    tally_open,
)

__all__ = [
    "PP_FLIP",
    "PP_HANDOFF",
    "PP_LATE",
    "PP_LATE_ACC",
    "PP_PHASE",
    "PingPongError",
    "first_illegal",
    "late_command_error",
    "new_pingpong_state",
    "pingpong_assign",
    "pingpong_feed",
    "pingpong_illegal",
    "pingpong_room",
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
def _io_gap(last_io_op, last_io, barrier, op, tv):
    """Cycles from the last WR_INP or RD_OUT to the I/O head ``op``: the static scheduler's
    gap after one of the running slot (issued at ``barrier`` or later), else tCCD."""
    if last_io_op >= 0 and last_io >= barrier:
        return static_gap(last_io_op, op, tv)
    return tv[TV_CCD]


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
                gap = _io_gap(last_io_op, last_io, barrier, op[k], tv)
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


# The streaming form, :func:`pingpong_feed`. Entries of its state vector: the run (barrier,
# last I/O issue and opcode, last MAC, last issue, open row, last ACT, row ready, hand-off
# stall, mode, first late command, its slot's hand-off and its acceptance), the dispatch
# (phase, its halves, last acceptance, commands so far), the window (program index of its
# first command, commands held, first region held, regions held, I/O listed, next slot to run,
# I/O intervals held back from the tally) and the legality rules (first illegal command found,
# its rule and phase; the current region's first WR_INP deferred to the next slot and first
# RD_OUT per OBuf half).
(_P_BARRIER, _P_IO, _P_IO_OP, _P_MAC, _P_ISSUE, _P_ROW, _P_ACT, _P_READY) = range(8)
(_P_HANDOFF, _P_MODE, _P_LATE, _P_FLIP, _P_LATE_ACC) = range(8, 13)
(_P_PHASE, _P_GH, _P_OH, _P_APREV, _P_N) = range(13, 18)
(_P_BASE, _P_WN, _P_REG_BASE, _P_NREG, _P_IO_N, _P_S_NEXT, _P_TIO_N) = range(18, 25)
(_P_BAD, _P_BAD_CODE, _P_BAD_PHASE, _P_WR_NEXT, _P_RD0, _P_RD1) = range(25, 31)
_P_LEN = 31
PP_HANDOFF, PP_LATE, PP_FLIP, PP_LATE_ACC, PP_PHASE = (
    _P_HANDOFF, _P_LATE, _P_FLIP, _P_LATE_ACC, _P_PHASE,
)  # fmt: skip
"""State entries a driver reads: hand-off stall so far, the first late command (program
index, -1 if none), its slot's hand-off and its acceptance cycle, the current phase."""
# Rows of the window (commands held, program order from ``_P_BASE``): slot * 4 + opcode, row,
# acceptance cycle, issue cycle, and of a WR_INP/RD_OUT its GBuf and OBuf entry (for messages).
_W_KIND, _W_ROW, _W_ACC, _W_ISS, _W_GBUF, _W_OUT = range(6)
_W_LEN = 6
# Columns of the regions (region c: the commands from the first MAC of phase c to the next
# phase's; region -1 before the first MAC): first command, its position in the I/O list, the
# region's first WR_INP/RD_OUT of slot c + 1 (program indices; INF if none).
_R_START, _R_IO, _R_NEXT = range(3)
# Rows of the legality trackers, per GBuf entry: the latest region with a WR_INP on it not
# yet followed by a MAC reading it, that region's first such WR_INP, its first one of slot
# c + 1, the previous region's first one of its slot c + 1; per OBuf entry: the latest region
# with a RD_OUT on it not yet followed by a MAC writing it, its first one, the previous
# region's first one.
_G_REG, _G_FIRST, _G_NEXT, _G_PREV = range(4)
_O_REG, _O_FIRST, _O_PREV = range(3)


@njit(cache=True)
def new_pingpong_state(n_gbuf: int, n_obuf: int, capacity: int = 256):
    """``(state, window, regions, io_list, track_g, track_o, held_io)`` of a channel before
    its first command under ping-pong (:func:`pingpong_feed`; ``capacity`` commands fit the
    window before :func:`pingpong_room` grows it)."""
    cap = max(capacity, 8)
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
    st[_P_LATE_ACC] = -1
    st[_P_PHASE] = -1
    st[_P_APREV] = -1
    st[_P_REG_BASE] = -1
    st[_P_NREG] = 1
    st[_P_S_NEXT] = -1
    st[_P_BAD] = -1
    st[_P_WR_NEXT] = INF
    st[_P_RD0] = INF
    st[_P_RD1] = INF
    regions = np.zeros((cap, 3), dtype=np.int64)
    regions[0, _R_NEXT] = INF  # region -1 starts at command 0
    track_g = np.full((4, n_gbuf), INF, dtype=np.int64)
    track_g[_G_REG] = NEVER
    track_o = np.full((3, n_obuf), INF, dtype=np.int64)
    track_o[_O_REG] = NEVER
    return (
        st,
        np.zeros((_W_LEN, cap), dtype=np.int64),
        regions,
        np.zeros(cap, dtype=np.int64),
        track_g,
        track_o,
        np.zeros((cap, 2), dtype=np.int64),
    )


@njit(cache=True, inline="always")
def _first_bad(bad, code, phase, k, k_code, k_phase):
    """The first illegal command so far after finding command ``k`` (INF: none) illegal by
    rule ``k_code``: the lower program index, and for one command rule 1 or 3 before 2 or 4
    (:func:`pingpong_illegal` checks them in that order)."""
    if k >= INF:
        return bad, code, phase
    if bad < 0 or k < bad:
        return k, k_code, k_phase
    if k == bad and (k_code == 1 or k_code == 3):
        return bad, k_code, phase
    return bad, code, phase


@njit(cache=True, inline="always")
def _waiting_bad(bad, code, phase, r, c, first, prev, first_next, k_code):
    """:func:`_first_bad` for the WR_INPs (RD_OUTs) waiting for a MAC of phase ``c`` on its
    GBuf (OBuf) entry, last registered in region ``r``: region ``c``'s first one and the
    previous region's first one of slot ``c`` when ``r == c``, else region ``c - 1``'s
    ``first_next`` (its first of slot ``c``). Each is illegal by rule ``k_code``."""
    if r == c:
        bad, code, phase = _first_bad(bad, code, phase, first, k_code, c)
        bad, code, phase = _first_bad(bad, code, phase, prev, k_code, c - 1)
    elif r == c - 1:
        bad, code, phase = _first_bad(bad, code, phase, first_next, k_code, c - 1)
    return bad, code, phase


@njit(cache=True)
def pingpong_feed(
    st, win, regions, io_list, track_g, track_o, held_io, n_gbuf, n_obuf, tl, op, gbuf, row,
    out, valid_gaps, tv, final, issue_out, sw_out,
):  # fmt: skip
    """Take the next chunk of commands under ping-pong, carrying on from the state of
    :func:`new_pingpong_state` and adding to the tally ``tl`` (:mod:`models.tally`): slots
    and acceptance, the legality rules, then every slot now complete runs.

    :func:`pingpong_slots`' slot and legality rules and ``_pingpong_kernel``'s schedule, as
    the commands arrive. A slot is complete once the next phase has started (its commands
    end there); the window holds the commands from the region before the next slot to run.
    An illegal command is known once two phases have started after it (its next MAC can
    come no later); the first one's program index and rule are left in the state and 1 is
    returned, before anything runs. With ``final`` the stream has ended: everything runs,
    through the epilogue. ``valid_gaps`` may be empty (no gaps). Unless ``issue_out`` and
    ``sw_out`` are None (compiled apart), the issue cycle of every command of the whole stream
    is written to ``issue_out`` and the row switches to ``sw_out``. :func:`pingpong_room` makes room
    for the chunk first.

    Within a slot the compute queue's commands are the MACs of its phase (one stretch of the
    window, I/O skipped) and the I/O queue's those of the I/O list from the previous region
    on whose slot it is. An I/O command that issues while no MAC of the slot is at the
    compute head is held back from the tally until one is (a row switch recorded then may
    start before it; :mod:`models.tally`).
    """
    tccd, tmod = tv[TV_CCD], tv[TV_MOD]
    twr, tmac, trd = exec_time(OP_WR_INP, tv), exec_time(OP_MAC, tv), exec_time(OP_RD_OUT, tv)
    gaps = valid_gaps.shape[0] > 0  # fixed for the call: the checks below are on a local
    half_g = n_gbuf // 2
    half_o = n_obuf // 2
    c = st[_P_PHASE]
    cur_gh = st[_P_GH]
    cur_oh = st[_P_OH]
    a_prev = st[_P_APREV]
    g0 = st[_P_N]
    base = st[_P_BASE]
    wn = st[_P_WN]
    reg_base = st[_P_REG_BASE]
    nreg = st[_P_NREG]
    io_n = st[_P_IO_N]
    bad = st[_P_BAD]
    bad_code = st[_P_BAD_CODE]
    bad_phase = st[_P_BAD_PHASE]
    wr_next = st[_P_WR_NEXT]
    rd0 = st[_P_RD0]
    rd1 = st[_P_RD1]
    # Dispatch, slots and the legality rules, command by command.
    n = op.shape[0]
    j = -1
    while j + 1 < n:
        j += 1
        # A stretch of MACs of the current phase: slot c, and no WR_INP or RD_OUT waits for
        # their entries; the general step below handles anything else.
        if c >= 0:
            kind = c * 4 + OP_MAC
            while op[uix(j)] == OP_MAC:
                ge = np.int64(gbuf[uix(j)])
                oe = np.int64(out[uix(j)])
                if (ge >= half_g) != (cur_gh == 1) or (oe >= half_o) != (cur_oh == 1):
                    break
                if track_g[_G_REG, uix(ge)] != NEVER or track_o[_O_REG, uix(oe)] != NEVER:
                    break
                a_prev += 1
                if gaps:
                    a_prev += valid_gaps[uix(j)]
                w = g0 + j - base
                win[_W_KIND, uix(w)] = kind
                win[_W_ROW, uix(w)] = np.int64(row[uix(j)])
                win[_W_ACC, uix(w)] = a_prev
                j += 1
                if j == n:
                    break
            if j == n:
                break
        g = g0 + j
        o = np.int64(op[uix(j)])
        ge = np.int64(gbuf[uix(j)])
        oe = np.int64(out[uix(j)])
        a_prev += 1
        if gaps:
            a_prev += valid_gaps[uix(j)]
        if o == OP_MAC:
            gh = 1 if ge >= half_g else 0
            oh = 1 if oe >= half_o else 0
            if c < 0 or gh != cur_gh or oh != cur_oh:
                # Phase c + 1 starts: region c's I/O deferred to slot c + 1 meet its halves.
                if c >= 0 and gh == cur_gh:
                    bad, bad_code, bad_phase = _first_bad(bad, bad_code, bad_phase, wr_next, 1, c)
                rd = rd1 if oh == 1 else rd0
                bad, bad_code, bad_phase = _first_bad(bad, bad_code, bad_phase, rd, 3, c)
                c += 1
                cur_gh = gh
                cur_oh = oh
                regions[nreg, _R_START] = g
                regions[nreg, _R_IO] = io_n
                regions[nreg, _R_NEXT] = INF
                nreg += 1
                wr_next = INF
                rd0 = INF
                rd1 = INF
            s = c
            # The WR_INPs and RD_OUTs waiting for this MAC's entries must be in earlier slots.
            e = uix(ge)
            r = track_g[_G_REG, e]
            if r != NEVER:
                first, prev, nxt = track_g[_G_FIRST, e], track_g[_G_PREV, e], track_g[_G_NEXT, e]
                bad, bad_code, bad_phase = _waiting_bad(
                    bad, bad_code, bad_phase, r, c, first, prev, nxt, 2
                )
                track_g[_G_REG, e] = NEVER
            e = uix(oe)
            r = track_o[_O_REG, e]
            if r != NEVER:
                first, prev = track_o[_O_FIRST, e], track_o[_O_PREV, e]
                bad, bad_code, bad_phase = _waiting_bad(
                    bad, bad_code, bad_phase, r, c, first, prev, first, 4
                )
                track_o[_O_REG, e] = NEVER
        else:
            if o == OP_WR_INP:
                gh = 1 if ge >= half_g else 0
                s = c if (c < 0 or cur_gh != gh) else c + 1
                if s != c and wr_next == INF:
                    wr_next = g
                if track_g[_G_REG, uix(ge)] != c:
                    r = track_g[_G_REG, uix(ge)]
                    track_g[_G_PREV, uix(ge)] = track_g[_G_NEXT, uix(ge)] if r == c - 1 else INF
                    track_g[_G_REG, uix(ge)] = c
                    track_g[_G_FIRST, uix(ge)] = g
                    track_g[_G_NEXT, uix(ge)] = INF
                if s != c and track_g[_G_NEXT, uix(ge)] == INF:
                    track_g[_G_NEXT, uix(ge)] = g
            else:
                s = c + 1
                if oe >= half_o:
                    rd1 = min(rd1, g)
                else:
                    rd0 = min(rd0, g)
                if track_o[_O_REG, uix(oe)] != c:
                    r = track_o[_O_REG, uix(oe)]
                    track_o[_O_PREV, uix(oe)] = track_o[_O_FIRST, uix(oe)] if r == c - 1 else INF
                    track_o[_O_REG, uix(oe)] = c
                    track_o[_O_FIRST, uix(oe)] = g
            if s != c and regions[nreg - 1, _R_NEXT] == INF:
                regions[nreg - 1, _R_NEXT] = g
            io_list[uix(io_n)] = g
            io_n += 1
            win[_W_GBUF, uix(g - base)] = ge
            win[_W_OUT, uix(g - base)] = oe
        w = g - base
        win[_W_KIND, uix(w)] = s * 4 + o
        win[_W_ROW, uix(w)] = np.int64(row[uix(j)])
        win[_W_ACC, uix(w)] = a_prev
    wn += n
    st[_P_PHASE] = c
    st[_P_GH] = cur_gh
    st[_P_OH] = cur_oh
    st[_P_APREV] = a_prev
    st[_P_N] = g0 + n
    st[_P_WN] = wn
    st[_P_NREG] = nreg
    st[_P_IO_N] = io_n
    st[_P_BAD] = bad
    st[_P_BAD_CODE] = bad_code
    st[_P_BAD_PHASE] = bad_phase
    st[_P_WR_NEXT] = wr_next
    st[_P_RD0] = rd0
    st[_P_RD1] = rd1
    if bad >= 0 and (final or bad_phase <= c - 2):
        return 1

    # Every slot now complete: up to the one of the phase before the current one, or through
    # the epilogue (slot c + 1) at the end.
    s_next = st[_P_S_NEXT]
    s_last = c + 1 if final else c - 1
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
    late_acc = st[_P_LATE_ACC]
    n_held = st[_P_TIO_N]
    tt = tally_open(tl)
    for s in range(s_next, s_last + 1):
        # The slot's MACs: phase s, region s (none in the prologue and epilogue).
        rs = s - reg_base  # region s's row in ``regions``
        if 0 <= s <= c:
            m_lo = regions[rs, _R_START] - base
            end_w = regions[rs + 1, _R_START] - base if s < c else wn
        else:
            m_lo = 0
            end_w = 0
        # Its I/O: from the I/O list of regions s - 1 and s, those of slot s.
        io_lo = regions[max(s - 1, -1) - reg_base, _R_IO]
        io_hi = regions[rs + 1, _R_IO] if s < c else io_n
        # The first command of a later slot (program order).
        later = INF
        if s <= c:
            later = regions[rs, _R_NEXT]
            if s < c:
                later = min(later, regions[rs + 1, _R_START])
        pi = io_lo
        while pi < io_hi and win[_W_KIND, uix(io_list[uix(pi)] - base)] >> 2 != s:
            pi += 1
        pc = m_lo
        while pc < end_w and win[_W_KIND, uix(pc)] & 3 != OP_MAC:
            pc += 1
        prepared = -1
        end_io = barrier
        end_c = barrier
        done_before = NEVER  # latest completion of the slot's commands before ``later``
        n_slot = 0
        while pi < io_hi or pc < end_w:
            if pc < end_w and prepared != pc:
                # A MAC reaches the compute head: its row opens if it must, and the I/O held
                # back go to the tally, in start order with the row switch.
                prepared = pc
                new_row = win[_W_ROW, uix(pc)] != cur_row
                if new_row:
                    head = max(last_mac + 1, win[_W_ACC, uix(pc)] + 1)
                    start, t_act_last, row_ready = open_row(head, cur_row, t_act_last, last_mac, tv)
                    cur_row = win[_W_ROW, uix(pc)]
                h = 0
                if new_row:
                    while h < n_held and held_io[h, 0] < start:
                        tt = t_io_interval(tt, held_io[h, 0], held_io[h, 1])
                        h += 1
                    tt = t_row(tt, start, row_ready)
                    if sw_out is not None:
                        n_sw = tt[TL_SWITCHES] - 1
                        sw_out[n_sw, 0] = start
                        sw_out[n_sw, 1] = row_ready
                while h < n_held:
                    tt = t_io_interval(tt, held_io[h, 0], held_io[h, 1])
                    h += 1
                n_held = 0
            # The I/O head's cycle but for the one issue per cycle (INF: none).
            ti_fixed = INF
            if pi < io_hi:
                k = io_list[uix(pi)] - base
                gap = _io_gap(last_io_op, last_io, barrier, win[_W_KIND, uix(k)] & 3, tv)
                ti_fixed = max(barrier, win[_W_ACC, uix(k)] + 1, last_io + gap)
            # A stretch of MACs: with the compute head prepared and no mode rule, MACs issue
            # while no later than the I/O head could; MACs leave the I/O head as it is but
            # for the last issue. Hands over at a row to open or the I/O head's turn.
            if tmod == 0 and pc < end_w and prepared == pc:
                n_mac = 0
                while True:
                    t = max(barrier, win[_W_ACC, uix(pc)] + 1, last_issue + 1, last_mac + tccd)
                    t = max(t, row_ready)
                    if max(ti_fixed, last_issue + 1) < t:
                        break
                    tt = t_mac_interval(tt, t, tccd)
                    last_mac = t
                    last_issue = t
                    done_before = _mac_issued(win, pc, t, base, later, done_before, tmac, issue_out)
                    n_mac += 1
                    pc += 1
                    while pc < end_w and win[_W_KIND, uix(pc)] & 3 != OP_MAC:
                        pc += 1
                    if pc >= end_w or win[_W_ROW, uix(pc)] != cur_row:
                        break
                    prepared = pc
                    # The MACs from here on the open row, each tCCD after the one before:
                    # taken at once while no later than their acceptance allows and, with
                    # tCCD > 1, than the I/O head (_mac_stretch).
                    w_end, k = _mac_stretch(win, pc, end_w, cur_row, t, tccd, ti_fixed)
                    if k == 0:
                        continue
                    tk = t
                    for w in range(pc, w_end):
                        if win[_W_KIND, uix(w)] & 3 != OP_MAC:
                            continue
                        tk += tccd
                        done_before = _mac_issued(
                            win, w, tk, base, later, done_before, tmac, issue_out
                        )
                    tt = t_macs_interval(tt, t + tccd, tk, tccd)
                    t = tk
                    last_mac = t
                    last_issue = t
                    n_mac += k
                    pc = w_end
                    while pc < end_w and win[_W_KIND, uix(pc)] & 3 != OP_MAC:
                        pc += 1
                    if pc >= end_w or win[_W_ROW, uix(pc)] != cur_row:
                        break
                    prepared = pc
                if n_mac:
                    mode = MODE_COMPUTE
                    tt = t_macs_counted(tt, n_mac, last_mac, tmac)
                    end_c = max(end_c, last_mac + tmac)
                    n_slot += n_mac
                    continue
            ti = max(ti_fixed, last_issue + 1)  # INF stays INF
            tc = INF
            tc_no_row = INF
            if pc < end_w:
                k = pc
                tc_no_row = max(barrier, win[_W_ACC, uix(k)] + 1, last_issue + 1, last_mac + tccd)
                tc = max(tc_no_row, row_ready)
            # ``xi``/``xc``: the heads' issue cycles; ``ti``/``tc`` the cycles the controller
            # commits to them (``_pingpong_kernel``'s mode rule).
            xi = ti
            xc = tc
            if tmod == 0:
                take_io = ti < tc
            elif mode == MODE_COMPUTE:
                take_io = pc >= end_w or (pi < io_hi and win[_W_ACC, uix(pc)] >= ti)
                if take_io:
                    ti, xi = mode_switch(ti, ti, tv)
            else:
                tmod_c, xc = mode_switch(tc, tc_no_row, tv)
                take_io = pi < io_hi and (
                    pc >= end_w or win[_W_ACC, uix(io_list[uix(pi)] - base)] < tmod_c
                )
                if not take_io:
                    tc = tmod_c
            if take_io:
                k = io_list[uix(pi)] - base
                o = win[_W_KIND, uix(k)] & 3
                t = xi
                ex = twr if o == OP_WR_INP else trd
                mode = MODE_REGISTER
                last_io = t
                last_io_op = o
                tt = t_io_count(tt, o, t, ex)
                if pc < end_w:
                    tt = t_io_interval(tt, t, t + tccd)
                else:
                    held_io[n_held, 0] = t
                    held_io[n_held, 1] = t + tccd
                    n_held += 1
                end_io = max(end_io, t + ex)
                pi += 1
                while pi < io_hi and win[_W_KIND, uix(io_list[uix(pi)] - base)] >> 2 != s:
                    pi += 1
            else:
                k = pc
                t = xc
                ex = tmac
                mode = MODE_COMPUTE
                last_mac = t
                tt = t_mac(tt, t, tccd, tmac)
                end_c = max(end_c, t + ex)
                pc += 1
                while pc < end_w and win[_W_KIND, uix(pc)] & 3 != OP_MAC:
                    pc += 1
            last_issue = t
            win[_W_ISS, uix(k)] = t
            if base + k < later:
                done_before = max(done_before, t + ex)
            n_slot += 1
            if issue_out is not None:
                issue_out[uix(base + k)] = t
        new_barrier = max(end_io, end_c)
        if end_io > barrier and end_c > barrier:
            handoff += new_barrier - min(end_io, end_c)
        barrier = new_barrier
        # Online hand-off: the first command of the slot, after a later slot's first one,
        # offered after every command of the slot before it has completed.
        if late < 0 and later < INF and n_slot > 0:
            t0 = win[_W_ACC, uix(later - base)] + 1
            done = done_before
            region_end = end_w if s <= c else wn
            if s < 0:
                region_end = regions[rs + 1, _R_START] - base if c >= 0 else wn
            for w in range(later - base + 1, region_end):
                if win[_W_KIND, uix(w)] >> 2 != s:
                    continue
                t = max(t0, done)
                if win[_W_ACC, uix(w)] > t:
                    late = base + w
                    flip_at = t
                    late_acc = win[_W_ACC, uix(w)]
                    break
                o = win[_W_KIND, uix(w)] & 3
                ex = twr if o == OP_WR_INP else (tmac if o == OP_MAC else trd)
                done = max(done, win[_W_ISS, uix(w)] + ex)
    if final:
        for h in range(n_held):
            tt = t_io_interval(tt, held_io[h, 0], held_io[h, 1])
        n_held = 0
    tally_close(tl, tt)
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
    st[_P_LATE_ACC] = late_acc
    st[_P_TIO_N] = n_held
    s_next = max(s_next, s_last + 1)
    st[_P_S_NEXT] = s_next
    # Drop what no slot to run needs: the regions before the one before the next slot.
    keep_reg = max(s_next - 1, -1)
    if not final and keep_reg > reg_base:
        r0 = keep_reg - reg_base
        keep_w = regions[r0, _R_START] - base
        keep_io = regions[r0, _R_IO]
        for row_ in range(_W_LEN):
            for w in range(keep_w, wn):
                win[row_, w - keep_w] = win[row_, w]
        for x in range(keep_io, io_n):
            io_list[x - keep_io] = io_list[x]
        for r in range(r0, nreg):
            regions[r - r0, _R_START] = regions[r, _R_START]
            regions[r - r0, _R_IO] = regions[r, _R_IO] - keep_io
            regions[r - r0, _R_NEXT] = regions[r, _R_NEXT]
        st[_P_BASE] = base + keep_w
        st[_P_WN] = wn - keep_w
        st[_P_IO_N] = io_n - keep_io
        st[_P_NREG] = nreg - r0
        st[_P_REG_BASE] = keep_reg
    return 0


@njit(cache=True, inline="always")
def _mac_issued(win, w, t, base, later, done_before, tmac, issue_out):
    """The MAC at window position ``w`` issued at ``t`` in a stretch: its issue cycle kept
    where the hand-off check reads it (after ``later``; before it, only the latest
    completion), and recorded if ``issue_out`` is given. Returns the new ``done_before``."""
    if base + w < later:
        done_before = max(done_before, t + tmac)
    else:
        win[_W_ISS, uix(w)] = t
    if issue_out is not None:
        issue_out[uix(base + w)] = t
    return done_before


@njit(cache=True, inline="always")
def _mac_stretch(win, pc, end_w, cur_row, t, tccd, ti_fixed):
    """``(end, k)``: the ``k`` MACs of window positions ``[pc, end)`` (the others I/O,
    skipped) that follow a MAC issued at ``t`` on ``cur_row``, no mode rule, in a stretch.

    The ``m``-th issues at ``t + m tCCD``: its slot's barrier and its row are no later than
    ``t`` and the last issue is ``t + (m - 1) tCCD``, so only its acceptance could hold it
    later, and with tCCD > 1 the I/O head could go first (``pingpong_feed``'s stretch).
    """
    w = pc
    k = 0
    tk = t
    while w < end_w:
        if win[_W_KIND, uix(w)] & 3 != OP_MAC:
            w += 1
            continue
        if win[_W_ROW, uix(w)] != cur_row:
            break
        tk += tccd
        if win[_W_ACC, uix(w)] + 1 > tk or (tccd > 1 and tk > ti_fixed):
            break
        k += 1
        w += 1
    return w, k


def first_illegal(state: tuple) -> tuple[int, int, int, int, int]:
    """``(index, opcode, GBuf entry, OBuf entry, rule)`` of the first illegal command after
    :func:`pingpong_feed` returned 1 (rules of :func:`pingpong_illegal`: 1, 2 for a WR_INP,
    3, 4 for a RD_OUT)."""
    st, win = state[0], state[1]
    bad, code = int(st[_P_BAD]), int(st[_P_BAD_CODE])
    w = bad - int(st[_P_BASE])
    return bad, int(win[_W_KIND, w] & 3), int(win[_W_GBUF, w]), int(win[_W_OUT, w]), code


def pingpong_room(state: tuple, n: int) -> tuple:
    """``state`` (:func:`new_pingpong_state`) with room for ``n`` more commands: the window,
    the I/O list, the regions and the held-back I/O grown (doubling) where short."""
    st, win, regions, io_list, track_g, track_o, held_io = state
    wn, nreg = int(st[_P_WN]), int(st[_P_NREG])
    win = _grown(win, wn + n, 1)
    regions = _grown(regions, nreg + n + 1, 0)
    io_list = _grown(io_list, int(st[_P_IO_N]) + n, 0)
    held_io = _grown(held_io, int(st[_P_TIO_N]) + wn + n, 0)
    return st, win, regions, io_list, track_g, track_o, held_io


def _grown(a: np.ndarray, need: int, axis: int) -> np.ndarray:
    """``a`` if its ``axis`` holds ``need`` entries, else a copy twice as long (or ``need``)."""
    size = a.shape[axis]
    if need <= size:
        return a
    shape = list(a.shape)
    shape[axis] = max(need, 2 * size)
    grown = np.zeros(shape, dtype=a.dtype)
    grown[tuple(slice(0, k) for k in a.shape)] = a
    return grown
