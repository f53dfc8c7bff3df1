"""DRAM row timing for all-bank MACs, and the timing vector the scheduler kernels read.

A MAC reads the same (row, column) in every bank, so the controller opens a row in all banks
at once. An all-bank activation is ``banks / act_banks`` ACT commands spaced by tRRD, with at
most four ACTs in any tFAW window; the first MAC may issue tRCD_MAC after the last ACT. A row
switch precharges all banks first: the precharge waits tRAS after the last ACT and tRTP after
the last MAC, and the first ACT follows tRP later. Row commands travel on the row-command
path (GDDR6 issues row and column commands separately), so they do not take a column
command-bus slot. The controller starts a row switch in the cycle the MAC that needs it
reaches the head of its queue (``docs/scheduling.md``).

Two conventions of the Ramulator 2 AiM simulator are rules here too (``Timing`` fields):
``mac_result_latency`` (off: a MAC completes tCCD after issue, so a RD_OUT waits tCCD, not
t_MAC) and the mode switch ``t_MOD`` between the compute class (MAC) and the register class
(WR_INP, RD_OUT), with ``mod_overlaps_row`` (:func:`mode_switch`).
"""

from __future__ import annotations

import numpy as np
from pimphony.models.config import HardwareConfig, Timing
from pimphony.models.isa import OP_MAC, OP_RD_OUT, OP_WR_INP, Op
from pimphony.models.jit import njit

__all__ = [
    "INF",
    "MODE_COMPUTE",
    "MODE_REGISTER",
    "NEVER",
    "TV_CCD",
    "TV_MAC",
    "TV_MOD",
    "TV_MOD_OVERLAP",
    "TV_RAS",
    "TV_RCD",
    "TV_RD_OUT",
    "TV_RP",
    "TV_RTP",
    "TV_SPAN",
    "TV_WR_INP",
    "activation_offsets",
    "execution_times",
    "exec_time",
    "mode_class",
    "mode_gate",
    "mode_switch",
    "mode_switch_at",
    "open_row",
    "precharge_done",
    "timing_vector",
    "uix",
]

INF = 1 << 62
"""A cycle that never comes (an unresolved dependency)."""
NEVER = -(1 << 40)
"""A cycle long before the start (no previous event)."""

# Indices into the int64 timing vector handed to the numba kernels.
TV_CCD, TV_WR_INP, TV_MAC, TV_RD_OUT, TV_RCD, TV_RP, TV_RAS, TV_RTP, TV_SPAN = range(9)
TV_MOD, TV_MOD_OVERLAP = 9, 10
_TV_LEN = 11


def activation_offsets(timing: Timing, banks: int) -> list[int]:
    """Cycle offsets of the ACT commands of one all-bank activation (first ACT at 0)."""
    groups = banks // timing.act_banks
    acts: list[int] = []
    for j in range(groups):
        t = 0 if j == 0 else acts[j - 1] + timing.tRRD
        if j >= 4:
            t = max(t, acts[j - 4] + timing.tFAW)
        acts.append(t)
    return acts


def execution_times(timing: Timing) -> np.ndarray:
    """Issue-to-completion time of each opcode, indexed by opcode value."""
    times = np.zeros(len(Op), dtype=np.int64)
    times[OP_WR_INP] = timing.t_WR_INP
    times[OP_MAC] = timing.t_MAC_result
    times[OP_RD_OUT] = timing.t_RD_OUT
    return times


def timing_vector(cfg: HardwareConfig) -> np.ndarray:
    """The int64 timing vector (``TV_*`` indices) for ``cfg``."""
    tm = cfg.timing
    tv = np.zeros(_TV_LEN, dtype=np.int64)
    tv[TV_CCD] = tm.tCCD
    tv[TV_WR_INP] = tm.t_WR_INP
    tv[TV_MAC] = tm.t_MAC_result
    tv[TV_RD_OUT] = tm.t_RD_OUT
    tv[TV_RCD] = tm.tRCD_MAC
    tv[TV_RP] = tm.tRP
    tv[TV_RAS] = tm.tRAS
    tv[TV_RTP] = tm.tRTP
    tv[TV_SPAN] = activation_offsets(tm, cfg.channel.banks)[-1]
    tv[TV_MOD] = tm.t_MOD
    tv[TV_MOD_OVERLAP] = 1 if tm.mod_overlaps_row else 0
    return tv


MODE_COMPUTE = 0
"""Mode class of MAC; channels start in it."""
MODE_REGISTER = 1
"""Mode class of WR_INP and RD_OUT."""


@njit(cache=True, inline="always")
def uix(i: int):
    """``i`` as an unsigned array index, for the kernels' hot loops: numba then leaves out its
    negative-index fix-up (a shift, an and and an add per access)."""
    return np.uint64(i)


@njit(cache=True)
def mode_class(op: int) -> int:
    """Mode a command needs: :data:`MODE_COMPUTE` (MAC) or :data:`MODE_REGISTER` (WR_INP,
    RD_OUT). Channels start in compute mode."""
    return MODE_COMPUTE if op == OP_MAC else MODE_REGISTER


@njit(cache=True)
def mode_gate(t_ready: int, t_no_row: int, cls: int, mode: int, tv: np.ndarray):
    """``(commit, issue)`` of a command of mode class ``cls`` in a channel in ``mode``: both
    ``t_ready`` without a mode rule or in the same mode, else :func:`mode_switch`'s."""
    if t_ready >= INF or tv[TV_MOD] == 0 or cls == mode:
        return t_ready, t_ready
    return mode_switch(t_ready, t_no_row, tv)


@njit(cache=True)
def mode_switch(t_ready: int, t_no_row: int, tv: np.ndarray):
    """``(tmod, issue)`` for a command whose class differs from the channel's mode.

    ``t_ready`` is the cycle it could issue under every other rule, ``t_no_row`` the same
    without waiting for its row (equal for WR_INP/RD_OUT and for a MAC on an open row). The
    TMOD issues at ``t_ready`` (in series with a row switch, as in Ramulator's AiM model,
    where TMOD precedes PREA/ACT16 and blocks them for nMODCH), or at ``t_no_row`` if
    ``mod_overlaps_row``; the command issues ``t_MOD`` after the TMOD at the earliest, and no
    other command issues in between (``docs/scheduling.md``).
    """
    return mode_switch_at(t_ready, t_no_row, tv[TV_MOD], tv[TV_MOD_OVERLAP])


@njit(cache=True, inline="always")
def mode_switch_at(t_ready: int, t_no_row: int, t_mod: int, overlaps: int):
    """:func:`mode_switch` with the timing vector's ``t_MOD`` and ``mod_overlaps_row`` given
    as scalars (for the schedulers' hot loops)."""
    tmod = t_no_row if overlaps != 0 else t_ready
    return tmod, max(t_ready, tmod + t_mod)


@njit(cache=True)
def exec_time(op: int, tv: np.ndarray) -> int:
    """Execution time of an opcode: issue to completion."""
    if op == OP_WR_INP:
        return tv[TV_WR_INP]
    if op == OP_MAC:
        return tv[TV_MAC]
    return tv[TV_RD_OUT]


@njit(cache=True)
def precharge_done(t: int, t_act_last: int, t_last_rd: int, tv: np.ndarray) -> int:
    """First cycle an ACT may follow a precharge requested at ``t``.

    The precharge waits tRAS after the last ACT (``t_act_last``) and tRTP after the last
    read of the open row (``t_last_rd``: a MAC or a host read); the ACT follows tRP later.
    """
    return max(t, t_act_last + tv[TV_RAS], t_last_rd + tv[TV_RTP]) + tv[TV_RP]


@njit(cache=True)
def open_row(t_head: int, current_row: int, t_act_last: int, t_last_mac: int, tv: np.ndarray):
    """Open a new row for a MAC that reached the queue head at ``t_head``.

    Returns ``(start, t_act_last, ready)``: the cycle the precharge (or first ACT) issues,
    the cycle of the last ACT, and the first cycle a MAC may use the row. With ``tv[TV_SPAN]``
    set to 0 it opens a row in one bank (one ACT).
    """
    if current_row < 0:
        first_act = t_head
        start = t_head
    else:
        first_act = precharge_done(t_head, t_act_last, t_last_mac, tv)
        start = first_act - tv[TV_RP]
    last_act = first_act + tv[TV_SPAN]
    return start, last_act, last_act + tv[TV_RCD]
