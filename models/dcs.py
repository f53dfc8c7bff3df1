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
from numba import njit

from models.dram import (
    INF,
    MODE_COMPUTE,
    MODE_REGISTER,
    NEVER,
    TV_CCD,
    TV_MAC,
    TV_MOD,
    TV_RD_OUT,
    TV_WR_INP,
    mode_switch,
    open_row,
)
from models.isa import OP_MAC, OP_RD_OUT, OP_WR_INP

__all__ = ["dcs_schedule", "entry_predecessors"]


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
        xi = ti
        xc = tc
        if tv[TV_MOD] > 0:
            if mode == MODE_COMPUTE:
                if tc < INF:
                    ti = INF
                elif ti < INF:
                    ti, xi = mode_switch(ti, ti, tv)
            elif ti < INF:
                tc = INF
            elif tc < INF:
                tc, xc = mode_switch(tc, tc_no_row, tv)
        t = min(ta, ti, tc)
        if t >= INF:
            raise RuntimeError("DCS cannot make progress (malformed stream or queue deadlock)")
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
