"""One DRAM bank-rule engine for the command-level back ends, driven by a constraint table.

As Ramulator 2 drives every DRAM standard from one table of (command -> command, level,
latency) constraints, each command-level model (:mod:`models.hbm_pim`, :mod:`models.attacc`)
states its ACT / PRE / RD / WR rules (and its buffer dependencies) as a :class:`BankRules`
table, and :func:`issue` times a stream by it: commands issue in order, one per cycle, each
at the first cycle every :class:`Constraint` whose ``next`` holds its op allows.

A constraint waits ``latency`` cycles after a prerequisite (an earlier command whose op is in
``prev``) in the same node of the bank hierarchy at ``level`` (:class:`Level`: the bank, its
bank group, rank, pseudo-channel, or the whole channel), counted from the prerequisite's issue
or completion (:class:`Since`). With ``window = w > 1`` it waits after the ``w``-th newest
(tFAW: 4); with ``window = 1`` after every one. :class:`Match` picks which prerequisites count:
those in the command's node (Ramulator's rule), or only the channel's newest one, if it is in
the same node or in another (HBM-PIM's tRRD / tCCD, which look at the last ACT / column
command only). An *all-bank* command (an op in ``BankRules.wide`` or a command flagged wide:
HBM-PIM's AB modes) is in every node below the channel: it waits for all of them and counts in
all of them; for a ``Match.NEWEST_*`` rule it is in the same node as any earlier command, and
a later command is in another node than it.

A command completes ``completion[op]`` cycles after its issue (plus its own ``extra``: the
softmax unit's busy time); a stream ends when its last command completes. :func:`issue` is
compiled (numba); its plain-Python twin, which reads the table directly, is
:func:`models.reference.issue_reference`, and the tests hold the two equal on random tables
and streams.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from typing import NamedTuple

import numpy as np
from numba import njit
from pimphony.models.errors import PimphonyError

__all__ = [
    "NEVER",
    "BankRuleError",
    "BankRules",
    "Commands",
    "Compiled",
    "Constraint",
    "Engine",
    "Level",
    "Match",
    "Since",
    "Timeline",
    "issue",
    "node_table",
]

#: The time of a prerequisite that never happened: far enough back that no rule binds.
NEVER = -(1 << 40)


class BankRuleError(PimphonyError, ValueError):
    """A constraint table the engine cannot run (an op out of range, a bad window)."""


class Level(IntEnum):
    """The levels of the bank hierarchy a constraint is scoped to (rows of a node table)."""

    BANK = 0
    BANK_GROUP = 1
    RANK = 2
    PSEUDO_CHANNEL = 3
    CHANNEL = 4


class Match(IntEnum):
    """Which prerequisites a constraint counts."""

    EACH = 0  # every one in the command's node (Ramulator's rule)
    NEWEST_SAME = 1  # only the channel's newest, if it is in the command's node
    NEWEST_OTHER = 2  # only the channel's newest, if it is in another node


class Since(IntEnum):
    """Where a constraint's latency counts from."""

    ISSUE = 0  # the prerequisite's issue cycle
    DONE = 1  # its completion (a buffer dependency: the data must have landed)


@dataclass(frozen=True)
class Constraint:
    """``next`` commands wait ``latency`` cycles after ``prev`` commands in the same node at
    ``level`` (:class:`Match`, :class:`Since`); ``window``: after the ``window``-th newest."""

    prev: frozenset[int]
    next: frozenset[int]
    level: Level
    latency: int
    window: int = 1
    match: Match = Match.EACH
    since: Since = Since.ISSUE


class Compiled(NamedTuple):
    """A :class:`BankRules` table as the arrays the kernel reads. Constraints sharing their
    (prev, level, window, match kind, since) share one history, a *slot*; per op, the checks
    it makes (``chk_*``, CSR by ``chk_ptr``: slot, its kind, level, window, the latency if the
    newest prerequisite is in the same node and if it is in another) and the slots it records
    in (``rec_*``: slot, kind, level, window, whether it records its completion)."""

    completion: np.ndarray
    chk_ptr: np.ndarray
    chk_slot: np.ndarray
    chk_kind: np.ndarray
    chk_level: np.ndarray
    chk_win: np.ndarray
    chk_lat: np.ndarray
    chk_lat2: np.ndarray
    rec_ptr: np.ndarray
    rec_slot: np.ndarray
    rec_kind: np.ndarray
    rec_level: np.ndarray
    rec_win: np.ndarray
    rec_done: np.ndarray
    wide_op: np.ndarray


# slot kinds: the channel's newest prerequisite only, every one (window 1), a ring of `window`
_NEWEST, _LAST, _RING = 0, 1, 2


@dataclass(frozen=True)
class BankRules:
    """A back end's constraint table: ``ops`` op codes (0 .. ops - 1), the constraints, each
    op's ``completion`` (cycles from issue) and the ops that address every bank (``wide``)."""

    ops: int
    constraints: tuple[Constraint, ...]
    completion: tuple[int, ...]
    wide: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if len(self.completion) != self.ops:
            raise BankRuleError(f"completion has {len(self.completion)} entries for {self.ops} ops")
        for c in self.constraints:
            ops = c.prev | c.next
            if not c.prev or not c.next or min(ops) < 0 or max(ops) >= self.ops:
                raise BankRuleError(f"{c}: prev and next must be op codes 0 to {self.ops - 1}")
            if c.window < 1:
                raise BankRuleError(f"{c}: the window counts at least the newest (1)")
            if c.window > 1 and (c.match is not Match.EACH or c.since is not Since.ISSUE):
                raise BankRuleError(f"{c}: a window counts issued commands of each node only")
        if not set(self.wide) <= set(range(self.ops)):
            raise BankRuleError(f"wide ops {sorted(self.wide)} are not op codes")

    @cached_property
    def compiled(self) -> Compiled:
        """The table as the kernel's arrays (built once per table)."""
        slots: dict[tuple, int] = {}
        kinds: list[int] = []
        # per op, per slot: [latency same, latency other] (NEVER: the rule does not apply)
        checks: list[dict[int, list[int]]] = [{} for _ in range(self.ops)]
        for c in self.constraints:
            kind = _NEWEST if c.match is not Match.EACH else _LAST if c.window == 1 else _RING
            key = (c.prev, c.level, c.window, kind, c.since)
            if key not in slots:
                slots[key] = len(slots)
                kinds.append(kind)
            s = slots[key]
            for o in c.next:
                lat = checks[o].setdefault(s, [NEVER, NEVER])
                sides = (0, 1) if c.match is Match.EACH else (int(c.match is Match.NEWEST_OTHER),)
                for side in sides:
                    lat[side] = max(lat[side], c.latency)
        keys = list(slots)
        chk = [(s, *lat) for o in range(self.ops) for s, lat in sorted(checks[o].items())]
        rec = [s for o in range(self.ops) for s in range(len(keys)) if o in keys[s][0]]
        chk_ptr = np.cumsum([0] + [len(checks[o]) for o in range(self.ops)])
        rec_ptr = np.cumsum([0] + [sum(o in k[0] for k in keys) for o in range(self.ops)])
        i64 = np.int64
        cs = np.array([x[0] for x in chk], i64)
        rs = np.array(rec, i64)
        level = np.array([int(k[1]) for k in keys], i64)
        window = np.array([k[2] for k in keys], i64)
        kind = np.array(kinds, i64)
        done = np.array([k[4] is Since.DONE for k in keys], np.bool_)
        return Compiled(
            np.array(self.completion, i64),
            chk_ptr.astype(i64), cs, kind[cs], level[cs], window[cs],
            np.array([x[1] for x in chk], i64), np.array([x[2] for x in chk], i64),
            rec_ptr.astype(i64), rs, kind[rs], level[rs], window[rs], done[rs],
            np.isin(np.arange(self.ops), sorted(self.wide)),
        )  # fmt: skip


@dataclass
class Timeline:
    """Issue cycle of every command, the cycle the last one completes, commands per op."""

    issue: np.ndarray
    cycles: int
    counts: dict[str, int]


class Commands(NamedTuple):
    """A stream as the engine reads it, per command: op code, bank, whether it addresses every
    bank (besides the ops of ``BankRules.wide``), cycles added to its completion."""

    op: np.ndarray
    bank: np.ndarray
    wide: np.ndarray
    extra: np.ndarray

    @classmethod
    def of(
        cls,
        op: np.ndarray,
        bank: np.ndarray,
        wide: np.ndarray | None = None,
        extra: np.ndarray | None = None,
    ) -> Commands:
        """The arrays as the kernel takes them (``wide``, ``extra``: none by default)."""
        n = len(op)
        return cls(
            np.asarray(op, np.int64),
            np.asarray(bank, np.int64),
            np.zeros(n, np.bool_) if wide is None else np.asarray(wide, np.bool_),
            np.zeros(n, np.int64) if extra is None else np.asarray(extra, np.int64),
        )


#: What times a stream by a table: :func:`issue`, or its plain-Python twin
#: (``models.reference.issue_reference``).
Engine = Callable[[BankRules, np.ndarray, Commands], tuple[np.ndarray, int]]


def node_table(
    banks: int, bank_group: np.ndarray, rank: np.ndarray, pseudo_channel: np.ndarray
) -> np.ndarray:
    """``(len(Level), banks)``: each bank's node at every level (the channel is node 0)."""
    out = np.zeros((len(Level), banks), dtype=np.int64)
    out[Level.BANK] = np.arange(banks)
    out[Level.BANK_GROUP] = bank_group
    out[Level.RANK] = rank
    out[Level.PSEUDO_CHANNEL] = pseudo_channel
    return out


@njit(cache=True)
def _issue_kernel(op, bank, wide_cmd, extra, nodes, completion, chk_ptr, chk_slot, chk_kind,
                  chk_level, chk_win, chk_lat, chk_lat2, rec_ptr, rec_slot, rec_kind, rec_level,
                  rec_win, rec_done, wide_op):  # fmt: skip
    """Issue cycles and the end cycle (:func:`issue`). Per slot ``s``: ``hist[s, node]`` holds
    each node's maximum recorded (window 1) or a ring of ``window`` issue cycles, ``cnt`` each
    node's count; an all-bank record of a window-1 slot goes to ``spread[s]`` (every node's
    floor) instead of to every node; ``top[s]`` is the maximum over nodes, or for a
    newest-only slot its newest value, and ``last[s]`` the node of that (-1: all-bank)."""
    n_lvl, nb = nodes.shape
    channel = n_lvl - 1
    size = np.empty(n_lvl, dtype=np.int64)
    for lv in range(n_lvl):
        size[lv] = nodes[lv].max() + 1
    n_slot = 1 + max(chk_slot.max() if chk_slot.size else 0, rec_slot.max() if rec_slot.size else 0)
    win = max(chk_win.max() if chk_win.size else 1, rec_win.max() if rec_win.size else 1)
    stride = nb * win
    hist = np.full(n_slot * stride, NEVER, dtype=np.int64)
    cnt = np.zeros(n_slot * nb, dtype=np.int64)
    spread = np.full(n_slot, NEVER, dtype=np.int64)
    top = np.full(n_slot, NEVER, dtype=np.int64)
    last = np.full(n_slot, -1, dtype=np.int64)
    n = op.shape[0]
    out = np.empty(n, dtype=np.int64)
    prev, end = -1, 0
    for k in range(n):
        o = op[k]
        wide = wide_cmd[k] or wide_op[o]
        b = 0 if wide else bank[k]  # an all-bank command's bank is not read
        at = prev + 1
        for i in range(chk_ptr[o], chk_ptr[o + 1]):
            s, lv, kind = chk_slot[i], chk_level[i], chk_kind[i]
            if kind == _NEWEST:
                same = wide or last[s] == nodes[lv, b]
                t = top[s] + (chk_lat[i] if same else chk_lat2[i])
            elif kind == _LAST:
                if wide and lv != channel:
                    t = top[s] + chk_lat[i]
                else:
                    t = max(hist[s * stride + nodes[lv, b]], spread[s]) + chk_lat[i]
            else:
                w = chk_win[i]
                lo, hi = nodes[lv, b], nodes[lv, b] + 1
                if wide and lv != channel:
                    lo, hi = 0, size[lv]
                t = NEVER
                for node in range(lo, hi):
                    c = cnt[s * nb + node]
                    if c >= w:
                        t = max(t, hist[s * stride + node * w + c % w] + chk_lat[i])
            if t > at:
                at = t
        done = at + completion[o] + extra[k]
        for i in range(rec_ptr[o], rec_ptr[o + 1]):
            s, lv, kind = rec_slot[i], rec_level[i], rec_kind[i]
            v = done if rec_done[i] else at
            if kind == _NEWEST:
                top[s] = v
                last[s] = -1 if wide and lv != channel else nodes[lv, b]
            elif kind == _LAST:
                top[s] = max(top[s], v)
                if wide and lv != channel:
                    spread[s] = max(spread[s], v)
                else:
                    j = s * stride + nodes[lv, b]
                    hist[j] = max(hist[j], v)
            else:
                w = rec_win[i]
                lo, hi = nodes[lv, b], nodes[lv, b] + 1
                if wide and lv != channel:
                    lo, hi = 0, size[lv]
                for node in range(lo, hi):
                    c = cnt[s * nb + node]
                    hist[s * stride + node * w + c % w] = v
                    cnt[s * nb + node] = c + 1
        out[k] = at
        prev = at
        end = max(end, done)
    return out, end


def issue(rules: BankRules, nodes: np.ndarray, cmds: Commands) -> tuple[np.ndarray, int]:
    """Issue cycles (int64) and end cycle of ``cmds`` under ``rules`` (``nodes``:
    :func:`node_table`). The caller has checked that ops and the banks of single-bank
    commands are in range. Compiled (numba)."""
    if len(cmds.op) == 0:
        return np.empty(0, dtype=np.int64), 0
    issued, end = _issue_kernel(*cmds, nodes, *rules.compiled)
    return issued, int(end)
