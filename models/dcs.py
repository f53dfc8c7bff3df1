"""Dynamic Command Scheduling (PIMphony V-C): D-Table, S-Table, I/O and compute queues.

Contract (``docs/scheduling.md`` states it with a worked example):

- **Dispatch.** One command per cycle is accepted from the input stream in program order,
  if the queue it goes to (I/O queue for WR_INP and RD_OUT, compute queue for MAC) had a free
  entry at the start of the cycle. The D-Table hands it, for every GBuf/OBuf entry it touches,
  the ID of the last earlier command that touched that entry (its dependency ID, DID). An
  accepted command can reach its queue head and issue one cycle later at the earliest.
- **Issue.** Each cycle at most one command issues (one command bus). A queue head may
  issue when, for each entry it touches, the S-Table holds its DID (the predecessor has
  issued) and the cycle is at or past that entry's expiration; issuing writes the
  command's ID and its expiration (issue + execution time) into the S-Table. Expiration per
  entry: WR_INP on GBuf t_WR_INP; MAC on GBuf tCCD (the tile is read at issue); MAC on OBuf
  t_MAC; RD_OUT on OBuf t_RD_OUT. The is-MAC flag lets a MAC whose OBuf predecessor is a MAC
  issue without waiting for the expiration (only tCCD after it). WR_INP/RD_OUT also wait one
  tCCD on the data bus, MACs one tCCD on the MAC pipeline and for their row (``models.dram``).
  When both heads can issue, the MAC goes first: I/O commands fill the cycles the MAC
  pipeline cannot use (row switches, dependency waits), and the buffers give them slack.
- **Mode switch.** With ``t_MOD > 0`` the channel is in compute mode (MACs) or register
  mode (WR_INP, RD_OUT), and the issue policy is mode-aware: only the head of the current
  mode's queue issues as long as it can issue without the other queue, i.e. its queue is not
  empty and it does not wait for an unissued command of the other class. Otherwise the other
  queue's head pays the mode switch (``models.dram.mode_switch``): a TMOD in the cycle it is
  ready, the command ``t_MOD`` later. Each mode thus drains its own work before the channel
  switches, so a TMOD is paid per batch, not per command (``docs/scheduling.md``).

Here a dependency is the program-order predecessor on the same entry, and "the S-Table holds
its DID" is "that predecessor has issued": exactly what the RTL's wrap-around tables compute.
"""

from __future__ import annotations

import numpy as np
from pimphony.models import tally
from pimphony.models.dram import (
    INF,
    MODE_COMPUTE,
    MODE_REGISTER,
    NEVER,
    TV_CCD,
    TV_MAC,
    TV_MOD,
    TV_MOD_OVERLAP,
    TV_RD_OUT,
    TV_WR_INP,
    mode_switch_at,
    open_row,
    uix,
)
from pimphony.models.isa import OP_MAC, OP_RD_OUT, OP_WR_INP
from pimphony.models.jit import njit

__all__ = [
    "DCS_DEADLOCK",
    "DCS_STUCK",
    "dcs_room",
    "dcs_run",
    "dcs_schedule",
    "entry_predecessors",
    "new_dcs_state",
]

DCS_STUCK = "DCS cannot make progress (malformed stream or queue deadlock)"
"""The error when no command can ever issue (:data:`DCS_DEADLOCK`)."""


@njit(cache=True)
def entry_predecessors(op, gbuf, out, n_gbuf, n_obuf):
    """Per command, the index of the previous command touching its GBuf / OBuf entry (-1)."""
    n = op.shape[0]
    prev_g = np.full(n, -1, dtype=np.int64)
    prev_o = np.full(n, -1, dtype=np.int64)
    last_g = np.full(n_gbuf, -1, dtype=np.int64)
    last_o = np.full(n_obuf, -1, dtype=np.int64)
    for k in range(n):
        if op[k] != OP_RD_OUT:
            prev_g[k] = last_g[gbuf[k]]
            last_g[gbuf[k]] = k
        if op[k] != OP_WR_INP:
            prev_o[k] = last_o[out[k]]
            last_o[out[k]] = k
    return prev_g, prev_o


@njit(cache=True)
def _gbuf_expiry(d, op, issue, tv):
    """Cycle from which GBuf predecessor ``d`` no longer blocks (INF if not issued)."""
    if d < 0:
        return NEVER
    if issue[d] < 0:
        return INF
    if op[d] == OP_WR_INP:
        return issue[d] + tv[TV_WR_INP]
    return issue[d] + tv[TV_CCD]


@njit(cache=True)
def _obuf_expiry(d, op, issue, tv, is_mac):
    """Cycle from which OBuf predecessor ``d`` no longer blocks (INF if not issued)."""
    if d < 0:
        return NEVER
    if issue[d] < 0:
        return INF
    if op[d] == OP_MAC:
        if is_mac:
            return issue[d] + tv[TV_CCD]
        return issue[d] + tv[TV_MAC]
    return issue[d] + tv[TV_RD_OUT]


@njit(cache=True, inline="always")
def _mode_rule(mode, ti, tc, tc_no_row, t_mod, overlaps):
    """``(ti, xi, tc, xc)`` under the mode rule: ``ti``/``tc`` the cycle the controller commits
    to the I/O / compute head (INF: it does not compete), ``xi``/``xc`` its issue cycle. The
    current mode's head competes while its cycle is finite, else the other head, which pays
    the mode switch (:func:`models.dram.mode_switch_at`)."""
    xi = ti
    xc = tc
    if mode == MODE_COMPUTE:
        if tc < INF:
            return INF, xi, tc, xc
        if ti < INF:
            ti, xi = mode_switch_at(ti, ti, t_mod, overlaps)
        return ti, xi, tc, xc
    if ti < INF:
        return ti, xi, INF, xc
    if tc < INF:
        tc, xc = mode_switch_at(tc, tc_no_row, t_mod, overlaps)
    return ti, xi, tc, xc


@njit(cache=True)
def dcs_schedule(op, gbuf, row, out, valid_gaps, tv, depth, n_gbuf, n_obuf, sw_start, sw_end):
    """Issue and acceptance cycle of every command under DCS.

    Returns ``(issue, accept, n_switches)``; ``n_switches`` row switches are written to
    ``sw_start``/``sw_end``. Raises if the stream cannot make progress.
    """
    n = op.shape[0]
    prev_g, prev_o = entry_predecessors(op, gbuf, out, n_gbuf, n_obuf)
    is_io = op != OP_MAC
    n_io = 0
    for k in range(n):
        if is_io[k]:
            n_io += 1
    io_idx = np.empty(n_io, dtype=np.int64)
    c_idx = np.empty(n - n_io, dtype=np.int64)
    qpos = np.empty(n, dtype=np.int64)
    i_io = 0
    i_c = 0
    for k in range(n):
        if is_io[k]:
            io_idx[i_io] = k
            qpos[k] = i_io
            i_io += 1
        else:
            c_idx[i_c] = k
            qpos[k] = i_c
            i_c += 1
    n_c = n - n_io

    issue = np.full(n, -1, dtype=np.int64)
    accept = np.full(n, -1, dtype=np.int64)
    n_acc = 0
    a_prev = -1
    io_h = 0
    c_h = 0
    c_prepared = -1
    cur_row = -1
    t_act_last = NEVER
    t_last_mac = NEVER
    row_ready = 0
    last_io = NEVER
    last_issue = NEVER
    n_sw = 0
    issued = 0
    mode = MODE_COMPUTE
    while issued < n:
        # Dispatch candidate: the next command in program order.
        ta = INF
        if n_acc < n:
            k = n_acc
            ta = a_prev + 1 + valid_gaps[k]
            p = qpos[k]
            if p >= depth:
                j = io_idx[p - depth] if is_io[k] else c_idx[p - depth]
                ta = INF if issue[j] < 0 else max(ta, issue[j] + 1)
        # I/O queue head.
        ti = INF
        if io_h < n_io and io_idx[io_h] < n_acc:
            k = io_idx[io_h]
            ti = max(accept[k] + 1, last_issue + 1, last_io + tv[TV_CCD])
            if op[k] == OP_WR_INP:
                ti = max(ti, _gbuf_expiry(prev_g[k], op, issue, tv))
            else:
                ti = max(ti, _obuf_expiry(prev_o[k], op, issue, tv, False))
        # Compute queue head.
        tc = INF
        tc_no_row = INF
        if c_h < n_c and c_idx[c_h] < n_acc:
            k = c_idx[c_h]
            head = accept[k] + 1
            if c_h > 0:
                head = max(head, issue[c_idx[c_h - 1]] + 1)
            if c_prepared != c_h:
                c_prepared = c_h
                if row[k] != cur_row:
                    start, t_act_last, row_ready = open_row(
                        head, cur_row, t_act_last, t_last_mac, tv
                    )
                    sw_start[n_sw] = start
                    sw_end[n_sw] = row_ready
                    n_sw += 1
                    cur_row = row[k]
            tc = max(head, last_issue + 1, t_last_mac + tv[TV_CCD])
            tc = max(tc, _gbuf_expiry(prev_g[k], op, issue, tv))
            tc_no_row = max(tc, _obuf_expiry(prev_o[k], op, issue, tv, True))
            tc = max(tc_no_row, row_ready)
        # ``ti``/``tc``: the cycle the controller commits to a head (its TMOD's with a mode
        # switch); ``xi``/``xc``: its issue cycle. With a mode rule only one head competes:
        # the current mode's while its cycle is finite (its queue has an accepted head whose
        # predecessors have issued; INF marks an unissued one, of the other class), else the
        # other head, which pays the TMOD.
        xi, xc = ti, tc
        if tv[TV_MOD] > 0:
            ti, xi, tc, xc = _mode_rule(mode, ti, tc, tc_no_row, tv[TV_MOD], tv[TV_MOD_OVERLAP])
        t = min(ta, ti, tc)
        if t >= INF:
            raise RuntimeError(DCS_STUCK)
        if ta == t:
            accept[n_acc] = t
            a_prev = t
            n_acc += 1
        if tc == t:
            k = c_idx[c_h]
            issue[k] = xc
            t_last_mac = xc
            last_issue = xc
            mode = MODE_COMPUTE
            c_h += 1
            issued += 1
        elif ti == t:
            k = io_idx[io_h]
            issue[k] = xi
            last_io = xi
            last_issue = xi
            mode = MODE_REGISTER
            io_h += 1
            issued += 1
    return issue, accept, n_sw


# Indices into the state vector of :func:`dcs_run`.
(_D_NACC, _D_ACCEPT, _D_ROW, _D_ACT, _D_MAC, _D_READY, _D_IO, _D_ISSUE, _D_MODE, _D_PREP) = range(
    10
)
_D_IO_H, _D_IO_N, _D_C_H, _D_C_N, _D_HELD = range(10, 15)
_D_LEN = 15
# Columns of the queue rings. ``_Q_ID``: program index * 4 + which dependencies block it (1:
# GBuf, 2: OBuf; the I/O queue: 1); ``_Q_FIELDS``: row << 32 | OBuf entry << 16 | GBuf entry
# (the I/O queue: opcode << 32 | S-Table row); acceptance cycle; the dependencies, as positions
# in the other queue (the I/O queue: D-Table words); issue cycle.
_Q_ID, _Q_FIELDS, _Q_ACC, _Q_DG, _Q_DO, _Q_ISS = range(6)
_Q_LEN = 6
_LOW16, _LOW32 = 0xFFFF, 0xFFFFFFFF

DCS_DEADLOCK = 1
"""Status of :func:`dcs_run` when no command can ever issue (a malformed stream)."""


@njit(cache=True)
def new_dcs_state(
    depth: int, n_gbuf: int, n_obuf: int, capacity: int = 256
) -> tuple[np.ndarray, ...]:
    """``(state, queues, d_table, s_table, held_io)`` of a channel before its first command
    under DCS.

    ``queues`` holds the I/O and the compute queue (``depth`` entries each, as rings);
    ``d_table`` the last accepted command per GBuf then OBuf entry, as ``2 * position in its
    queue + is-MAC``; ``s_table`` the expiry of the last command issued on each entry;
    ``held_io`` the I/O intervals :func:`dcs_run` holds back from the tally (room for
    ``capacity``; :func:`dcs_room`).
    """
    st = np.zeros(_D_LEN, dtype=np.int64)
    st[_D_ACCEPT] = -1
    st[_D_ROW] = -1
    st[_D_ACT] = NEVER
    st[_D_MAC] = NEVER
    st[_D_IO] = NEVER
    st[_D_ISSUE] = NEVER
    st[_D_MODE] = MODE_COMPUTE
    queues = np.zeros((2, max(depth, 1), _Q_LEN), dtype=np.int64)
    d_table = np.full(n_gbuf + n_obuf, -1, dtype=np.int64)
    s_table = np.full(n_gbuf + n_obuf, NEVER, dtype=np.int64)
    return st, queues, d_table, s_table, np.zeros((max(capacity, 8), 2), dtype=np.int64)


def dcs_room(state: tuple, n: int) -> tuple:
    """``state`` (:func:`new_dcs_state`) with room to hold back the I/O of ``n`` more commands
    and of those queued."""
    st, queues, d_table, s_table, held_io = state
    need = int(st[_D_HELD]) + n + 2 * queues.shape[1] + 4
    if need > held_io.shape[0]:
        grown = np.zeros((max(need, 2 * held_io.shape[0]), 2), dtype=np.int64)
        grown[: held_io.shape[0]] = held_io
        held_io = grown
    return st, queues, d_table, s_table, held_io


@njit(cache=True, inline="always")
def _at(slot, col):
    """Index of column ``col`` of ring slot ``slot`` in a flat queue ring."""
    return np.uint64(slot * _Q_LEN + col)


@njit(cache=True, inline="always")
def _mac_slot(ta, c_n, c_h, depth, tail_issue):
    """``(acceptance candidate, full)`` of a MAC offered at ``ta`` to a compute queue that
    has accepted ``c_n`` and issued ``c_h`` (``tail_issue``: issue cycle of the MAC in the
    tail slot): while the queue is full, INF."""
    if c_n < depth:
        return ta, False
    if c_n - depth >= c_h:
        return INF, True
    return max(ta, tail_issue + 1), False


@njit(cache=True, inline="always")
def _offered(a_prev, gaps, valid_gaps, j):
    """The cycle command ``j`` of the chunk is offered, the previous one accepted at
    ``a_prev`` (``valid_gaps`` read only if ``gaps``)."""
    if not gaps:
        return a_prev + 1
    return a_prev + 1 + valid_gaps[uix(j)]


@njit(cache=True, inline="always")
def _accept_mac(qc, d_table, n_gbuf, depth, c_ns, c_n, n_acc, j, gbuf, out, row, ta):
    """The next command, MAC ``n_acc`` (``j`` in the chunk), accepted at ``ta`` into ring
    slot ``c_ns`` of the compute queue, position ``c_n``: its dependencies from the D-Table
    (only a WR_INP or RD_OUT can block a MAC), which then names it. Returns the queue's new
    ``(c_ns, c_n, n_acc)``."""
    g = np.int64(gbuf[uix(j)])
    oe = np.int64(out[uix(j)])
    h = c_ns
    blocked = 0
    d = d_table[uix(g)]
    if d >= 0 and d & 1 == 0:
        blocked = 1
        qc[_at(h, _Q_DG)] = d >> 1
    d = d_table[uix(n_gbuf + oe)]
    if d >= 0 and d & 1 == 0:
        blocked |= 2
        qc[_at(h, _Q_DO)] = d >> 1
    qc[_at(h, _Q_ID)] = n_acc << 2 | blocked
    qc[_at(h, _Q_FIELDS)] = np.int64(row[uix(j)]) << 32 | oe << 16 | g
    qc[_at(h, _Q_ACC)] = ta
    d_table[uix(g)] = 2 * c_n + 1
    d_table[uix(n_gbuf + oe)] = 2 * c_n + 1
    return (0 if c_ns + 1 == depth else c_ns + 1), c_n + 1, n_acc + 1


@njit(cache=True, inline="always")
def _issue_mac(qc, s_table, n_gbuf, h, xc, tccd, tmac):
    """The compute queue's head (ring slot ``h``) issued at ``xc``: its issue cycle, and its
    entries' S-Table expiries."""
    qc[_at(h, _Q_ISS)] = xc
    f = qc[_at(h, _Q_FIELDS)]
    s_table[uix(f & _LOW16)] = xc + tccd
    s_table[uix(n_gbuf + ((f >> 16) & _LOW16))] = xc + tmac


@njit(cache=True)
def dcs_run(
    st, queues, d_table, s_table, held_io, n_gbuf, tl, op, gbuf, row, out, valid_gaps, tv,
    final, issue_out, sw_out,
):  # fmt: skip
    """Schedule the next chunk of commands under DCS, carrying on from the state of
    :func:`new_dcs_state` and adding to the tally ``tl`` (:mod:`models.tally`).

    :func:`dcs_schedule`'s rules, with the queues, D-Table and S-Table the RTL holds instead
    of whole-stream arrays (rows ``n_gbuf`` and on of the tables are the OBuf entries). The
    run stops when it needs the next chunk's first command
    (``final`` false) or when every command has issued. ``valid_gaps`` may be empty (no
    gaps). Unless ``issue_out`` and ``sw_out`` are None (compiled apart), the issue cycle of
    every command of the whole stream is written to ``issue_out`` and the row switches to
    ``sw_out``. Returns 0, or :data:`DCS_DEADLOCK`.

    The same decisions, with less to store per command. A queue issues in order, so a
    dependency has issued once its queue's head has passed its position: the D-Table keeps
    queue positions, and the S-Table only the expiry of each entry's last issued command,
    which is the dependency's while the dependant waits (every command after it on the entry
    waits for the dependant). A MAC's dependency on an earlier MAC is left out: that MAC has
    issued, and expires (tCCD after its issue) no later than the MAC pipeline frees (tCCD
    after the last MAC); so for MACs the S-Table holds what a WR_INP or RD_OUT waits for.
    While no WR_INP or RD_OUT is queued and MACs arrive, a shorter loop takes the same steps
    (a MAC is issued and accepted in one place, which both loops reach); a MAC that waits
    for a full queue's slot, no WR_INP or RD_OUT queued, is accepted in the step that
    frees it. In it, a run of MACs on the open row is taken in closed form: while the head
    needs nothing but the MAC pipeline, each issues tCCD after the one before, after the
    acceptances due by then. The tally counts MACs in batches, at the next WR_INP or RD_OUT
    and at the end.

    The tally takes a row switch when it is recorded, after every command it has taken: each
    started before the cycle being decided. A WR_INP or RD_OUT that pays a mode switch
    issues ``t_MOD`` after that cycle, and a row switch recorded before then may start
    earlier, so while no prepared MAC is at the compute head such commands are held back
    (``held_io``, :func:`dcs_room` makes room) until the next row switch or MAC.
    """
    depth = queues.shape[1]
    tccd, twr, tmac, trd, tmod = tv[TV_CCD], tv[TV_WR_INP], tv[TV_MAC], tv[TV_RD_OUT], tv[TV_MOD]
    overlaps = tv[TV_MOD_OVERLAP]
    gaps = valid_gaps.shape[0] > 0  # fixed for the call: a check on a local
    # The rings flat, indexed by _at (unsigned, as ``uix``).
    qio = queues[0].reshape(depth * _Q_LEN)
    qc = queues[1].reshape(depth * _Q_LEN)
    n_acc = st[_D_NACC]
    base = n_acc
    end = base + op.shape[0]
    a_prev = st[_D_ACCEPT]
    cur_row = st[_D_ROW]
    t_act_last = st[_D_ACT]
    t_last_mac = st[_D_MAC]
    row_ready = st[_D_READY]
    last_io = st[_D_IO]
    last_issue = st[_D_ISSUE]
    mode = st[_D_MODE]
    prepared = st[_D_PREP]
    io_h = st[_D_IO_H]
    io_n = st[_D_IO_N]
    c_h = st[_D_C_H]
    c_n = st[_D_C_N]
    # Ring slots of the queue heads and tails (the positions modulo depth).
    io_hs = io_h % depth
    io_ns = io_n % depth
    c_hs = c_h % depth
    c_ns = c_n % depth
    n_held = st[_D_HELD]
    # The MACs issued before ``c_cnt`` are counted in the tally (:func:`tally.t_macs_counted`):
    # the count waits for the next WR_INP or RD_OUT, which changes the class, or the end.
    c_cnt = c_h
    tt = tally.tally_open(tl)
    status = 0
    while True:
        # Dispatch candidate: the next command in program order (``ta0``: offered).
        ta = INF
        ta0 = INF
        full = False  # it is a MAC and the compute queue is full
        mac_next = False
        if n_acc < end:
            j = n_acc - base
            ta0 = _offered(a_prev, gaps, valid_gaps, j)
            if op[uix(j)] == OP_MAC:
                mac_next = True
                ta, full = _mac_slot(ta0, c_n, c_h, depth, qc[_at(c_ns, _Q_ISS)])
            elif io_n >= depth:
                ta = INF if io_n - depth >= io_h else max(ta0, qio[_at(io_ns, _Q_ISS)] + 1)
            else:
                ta = ta0
        elif not final or (io_h == io_n and c_h == c_n):
            break
        # I/O queue head.
        ti = INF
        if io_h < io_n:
            h = io_hs
            ti = max(qio[_at(h, _Q_ACC)] + 1, last_issue + 1, last_io + tccd)
            if qio[_at(h, _Q_ID)] & 1:
                d = qio[_at(h, _Q_DG)]
                if (d >> 1) < (c_h if d & 1 else io_h):
                    ti = max(ti, s_table[uix(qio[_at(h, _Q_FIELDS)] & _LOW32)])
                else:
                    ti = INF
        # Compute queue head.
        tc = INF
        tc_no_row = INF
        if c_h < c_n:
            h = c_hs
            head = max(qc[_at(h, _Q_ACC)] + 1, t_last_mac + 1)
            if prepared == 0:
                prepared = 1
                r = qc[_at(h, _Q_FIELDS)] >> 32
                if r != cur_row:
                    start, t_act_last, row_ready = open_row(
                        head, cur_row, t_act_last, t_last_mac, tv
                    )
                    k = 0
                    while k < n_held and held_io[k, 0] < start:
                        tt = tally.t_io_interval(tt, held_io[k, 0], held_io[k, 1])
                        k += 1
                    tt = tally.t_row(tt, start, row_ready)
                    while k < n_held:
                        tt = tally.t_io_interval(tt, held_io[k, 0], held_io[k, 1])
                        k += 1
                    n_held = 0
                    if sw_out is not None:
                        n_sw = tt[tally.TL_SWITCHES] - 1
                        sw_out[n_sw, 0] = start
                        sw_out[n_sw, 1] = row_ready
                    cur_row = r
            tc = max(head, last_issue + 1, t_last_mac + tccd)
            # A dependency blocks until its S-Table expiry, and forever while unissued.
            blocked = qc[_at(h, _Q_ID)] & 3
            if blocked:
                f = qc[_at(h, _Q_FIELDS)]
                if blocked & 1:
                    tc = max(tc, s_table[uix(f & _LOW16)] if qc[_at(h, _Q_DG)] < io_h else INF)
                if blocked & 2:
                    e = n_gbuf + ((f >> 16) & _LOW16)
                    tc = max(tc, s_table[uix(e)] if qc[_at(h, _Q_DO)] < io_h else INF)
            tc_no_row = tc
            tc = max(tc_no_row, row_ready)
        # Mode rule (see dcs_schedule).
        xi, xc = ti, tc
        if tmod > 0:
            ti, xi, tc, xc = _mode_rule(mode, ti, tc, tc_no_row, tmod, overlaps)
        t = min(ta, ti, tc)
        if t >= INF:
            status = DCS_DEADLOCK
            break
        # The issue goes first (a command accepted in the same cycle takes another slot); a
        # MAC's issue and acceptance are below.
        accept = ta == t
        if tc == t:
            for k in range(n_held):
                tt = tally.t_io_interval(tt, held_io[k, 0], held_io[k, 1])
            n_held = 0
        elif ti == t:
            h = io_hs
            qio[_at(h, _Q_ISS)] = xi
            f = qio[_at(h, _Q_FIELDS)]
            o = f >> 32
            ex = twr if o == OP_WR_INP else trd
            s_table[uix(f & _LOW32)] = xi + ex
            last_io = xi
            last_issue = xi
            mode = MODE_REGISTER
            io_h += 1
            io_hs = 0 if io_hs + 1 == depth else io_hs + 1
            tt = tally.t_macs_counted(tt, c_h - c_cnt, t_last_mac, tmac)
            c_cnt = c_h
            tt = tally.t_io_count(tt, o, xi, ex)
            if n_held > 0 or (xi > t and not (c_h < c_n and prepared == 1)):
                held_io[n_held, 0] = xi
                held_io[n_held, 1] = xi + tccd
                n_held += 1
            else:
                tt = tally.t_io_interval(tt, xi, xi + tccd)
            if issue_out is not None:
                issue_out[uix(qio[_at(h, _Q_ID)] >> 2)] = xi
        if accept and not mac_next:
            j = n_acc - base
            o = np.int64(op[uix(j)])
            e = np.int64(gbuf[uix(j)]) if o == OP_WR_INP else n_gbuf + np.int64(out[uix(j)])
            d = d_table[uix(e)]
            h = io_ns
            qio[_at(h, _Q_ID)] = n_acc << 2 | (1 if d >= 0 else 0)
            qio[_at(h, _Q_FIELDS)] = o << 32 | e
            qio[_at(h, _Q_ACC)] = ta
            qio[_at(h, _Q_DG)] = d
            d_table[uix(e)] = 2 * io_n
            io_n += 1
            io_ns = 0 if io_ns + 1 == depth else io_ns + 1
            a_prev = ta
            n_acc += 1
            accept = False
        # With no WR_INP or RD_OUT queued or held and no mode switch due, the MACs' steps
        # (issue, acceptance) go on here while the next command is a MAC and the head's row
        # is open: the general step's other parts would stay idle.
        quiet = io_h == io_n and n_held == 0 and (tmod == 0 or mode == MODE_COMPUTE or tc == t)
        late = full and io_h == io_n
        while True:
            if tc == t:
                h = c_hs
                _issue_mac(qc, s_table, n_gbuf, h, xc, tccd, tmac)
                t_last_mac = xc
                last_issue = xc
                mode = MODE_COMPUTE
                c_h += 1
                c_hs = 0 if c_hs + 1 == depth else c_hs + 1
                prepared = 0
                tt = tally.t_mac_interval(tt, xc, tccd)
                if issue_out is not None:
                    issue_out[uix(qc[_at(h, _Q_ID)] >> 2)] = xc
                if late:
                    # The next MAC waited for this slot, and no WR_INP or RD_OUT is queued
                    # that could issue before it is accepted: it is accepted now, as soon as
                    # the slot allows (the steps between would take no other decision).
                    ta = max(ta0, xc + 1)
                    accept = True
            if accept:
                c_ns, c_n, n_acc = _accept_mac(
                    qc, d_table, n_gbuf, depth, c_ns, c_n, n_acc, n_acc - base, gbuf, out, row, ta
                )
                a_prev = ta
            if not quiet or n_acc == end or op[uix(n_acc - base)] != OP_MAC:
                break
            if c_h < c_n and prepared == 0:
                if qc[_at(c_hs, _Q_FIELDS)] >> 32 != cur_row:
                    break
                prepared = 1
            # A run of MACs on the open row, in closed form: while the head needs nothing but
            # the MAC pipeline it issues tCCD after the MAC before it, after the acceptances
            # due by then (_mac_slot's, in program order); it stops where a step could
            # decide otherwise (the head's acceptance, row or an S-Table dependency, or a
            # WR_INP, RD_OUT or the chunk's end due next).
            if c_h < c_n and last_issue == t_last_mac and row_ready <= t_last_mac + tccd:
                t_first = t_last_mac + tccd
                ta_first = a_prev
                while True:
                    t = t_last_mac + tccd
                    stop = False
                    while n_acc < end:
                        j = n_acc - base
                        ta = _offered(a_prev, gaps, valid_gaps, j)
                        if op[uix(j)] != OP_MAC:
                            stop = ta <= t
                            break
                        if c_n >= depth:
                            if c_n - depth >= c_h:
                                break
                            ta = max(ta, qc[_at(c_ns, _Q_ISS)] + 1)
                        if ta > t:
                            break
                        c_ns, c_n, n_acc = _accept_mac(
                            qc, d_table, n_gbuf, depth, c_ns, c_n, n_acc, j, gbuf, out, row, ta
                        )
                        a_prev = ta
                    h = c_hs
                    if stop or n_acc == end or c_h == c_n or qc[_at(h, _Q_ACC)] >= t:
                        break
                    if qc[_at(h, _Q_ID)] & 3 or qc[_at(h, _Q_FIELDS)] >> 32 != cur_row:
                        break
                    _issue_mac(qc, s_table, n_gbuf, h, t, tccd, tmac)
                    if issue_out is not None:
                        issue_out[uix(qc[_at(h, _Q_ID)] >> 2)] = t
                    t_last_mac = t
                    last_issue = t
                    c_h += 1
                    c_hs = 0 if c_hs + 1 == depth else c_hs + 1
                if a_prev != ta_first or t_last_mac >= t_first:
                    if t_last_mac >= t_first:
                        tt = tally.t_macs_interval(tt, t_first, t_last_mac, tccd)
                        mode = MODE_COMPUTE
                        prepared = 0
                    tc = INF  # nothing left of the step before: the checks above again
                    accept = False
                    continue
            # The next step: every WR_INP and RD_OUT has issued, the head's row is open.
            ta0 = _offered(a_prev, gaps, valid_gaps, n_acc - base)
            ta, late = _mac_slot(ta0, c_n, c_h, depth, qc[_at(c_ns, _Q_ISS)])
            tc = INF
            if c_h < c_n:
                h = c_hs
                tc = max(qc[_at(h, _Q_ACC)] + 1, last_issue + 1, t_last_mac + tccd, row_ready)
                blocked = qc[_at(h, _Q_ID)] & 3
                if blocked:
                    f = qc[_at(h, _Q_FIELDS)]
                    if blocked & 1:
                        tc = max(tc, s_table[uix(f & _LOW16)])
                    if blocked & 2:
                        tc = max(tc, s_table[uix(n_gbuf + ((f >> 16) & _LOW16))])
            xc = tc
            t = min(ta, tc)
            accept = ta == t
    tt = tally.t_macs_counted(tt, c_h - c_cnt, t_last_mac, tmac)
    if final and status == 0:
        for k in range(n_held):
            tt = tally.t_io_interval(tt, held_io[k, 0], held_io[k, 1])
        n_held = 0
    tally.tally_close(tl, tt)
    st[_D_HELD] = n_held
    st[_D_NACC] = n_acc
    st[_D_ACCEPT] = a_prev
    st[_D_ROW] = cur_row
    st[_D_ACT] = t_act_last
    st[_D_MAC] = t_last_mac
    st[_D_READY] = row_ready
    st[_D_IO] = last_io
    st[_D_ISSUE] = last_issue
    st[_D_MODE] = mode
    st[_D_PREP] = prepared
    st[_D_IO_H] = io_h
    st[_D_IO_N] = io_n
    st[_D_C_H] = c_h
    st[_D_C_N] = c_n
    return status
