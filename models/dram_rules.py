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
all of them; for a ``Match.NEWEST_*`` rule below the channel it is in the same node as any
earlier command, and a later command is in another node than it (HBM-PIM's rule).

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
from pimphony.models.errors import PimphonyError
from pimphony.models.jit import njit

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
    (prev, level, window, match kind, since) share one history, a *slot*. Per op (a row of
    ``per_op``): where its checks and its records start and end, grouped by the slot's kind
    (newest-only, window 1 over the channel, window 1 per node, ring; columns 0-4 and 5-9),
    its completion and whether it is all-bank. ``checks``: rows slot, level, window, the
    latency if the newest prerequisite is in the same node and if it is in another;
    ``records``: rows slot, level, window, whether it records the completion."""

    per_op: np.ndarray
    checks: np.ndarray
    records: np.ndarray
    slots: int
    window: int


# slot kinds: the channel's newest prerequisite only; every one (window 1) in the channel or
# per node below it; a ring of `window` per node
_NEWEST, _TOP, _LAST, _RING = 0, 1, 2, 3


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
            if c.match is not Match.EACH:
                kind = _NEWEST
            elif c.window > 1:
                kind = _RING
            else:
                kind = _TOP if c.level is Level.CHANNEL else _LAST
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
        # per op its entries by kind; ptr[o, k] .. ptr[o, k + 1]: those of kind k
        chk = [sorted(checks[o], key=lambda s: (kinds[s], s)) for o in range(self.ops)]
        rec = [
            sorted((s for s in range(len(keys)) if o in keys[s][0]), key=lambda s: (kinds[s], s))
            for o in range(self.ops)
        ]

        def ptr(per_op: list[list[int]]) -> np.ndarray:
            out = np.zeros((self.ops, 5), np.int64)
            start = 0
            for o, entries in enumerate(per_op):
                out[o] = start + np.searchsorted([kinds[s] for s in entries], [0, 1, 2, 3, 4])
                start += len(entries)
            return out

        cs = [s for x in chk for s in x]
        rs = [s for x in rec for s in x]
        lat = [checks[o][s] for o in range(self.ops) for s in chk[o]]
        per_op = np.concatenate(
            [
                ptr(chk),
                ptr(rec),
                np.array([self.completion, [o in self.wide for o in range(self.ops)]]).T,
            ],
            axis=1,
        )
        return Compiled(
            per_op.astype(np.int64),
            np.array([cs, [keys[s][1] for s in cs], [keys[s][2] for s in cs],
                      [x[0] for x in lat], [x[1] for x in lat]], np.int64).reshape(5, -1),
            np.array([rs, [keys[s][1] for s in rs], [keys[s][2] for s in rs],
                      [keys[s][4] is Since.DONE for s in rs]], np.int64).reshape(4, -1),
            len(keys),
            max([1, *(k[2] for k in keys)]),
        )  # fmt: skip


@dataclass
class Timeline:
    """Issue cycle of every command, the cycle the last one completes, commands per op."""

    issue: np.ndarray
    cycles: int
    counts: dict[str, int]

    @classmethod
    def of(
        cls, ops: type[IntEnum], op: np.ndarray, timed: tuple[np.ndarray, int] | None = None
    ) -> Timeline:
        """The timeline of the op codes ``op`` (of ``ops``, counted by name), ``timed`` as
        :data:`Engine` gives it: issue cycles and end (``None``: the stream is empty)."""
        counts = dict(
            zip(
                (o.name for o in ops),
                np.bincount(op, minlength=len(ops))[: len(ops)].tolist(),
                strict=True,
            )
        )
        issue, cycles = (np.empty(0, dtype=np.int64), 0) if timed is None else timed
        return cls(issue=issue, cycles=cycles, counts=counts)


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


@njit(cache=True, inline="always")
def _span(nodes, size, lv, b, wide):
    """The nodes at level ``lv`` a command to bank ``b`` is in: (first, end)."""
    if wide and lv != nodes.shape[0] - 1:
        return 0, size[lv]
    return nodes[lv, b], nodes[lv, b] + 1


@njit(cache=True)
def _issue_kernel(op, bank, wide_cmd, extra, nodes, per_op, checks, records, n_slot, win):
    """Issue cycles and the end cycle (:func:`issue`; the table as :class:`Compiled`). Per slot
    ``s``: ``top[s]`` is the maximum recorded over all nodes (a newest-only slot: its newest
    value, ``last[s]`` that one's node, -1 for all-bank); below the channel, ``hist[s, node]``
    holds each node's maximum (window 1) or a ring of ``window`` issue cycles (``cnt``: each
    node's count), and an all-bank record of a window-1 slot goes to ``spread[s]``, every
    node's floor."""
    chk_slot, chk_level, chk_win, chk_lat, chk_lat2 = checks
    rec_slot, rec_level, rec_win, rec_done = records
    n_lvl, nb = nodes.shape
    channel = n_lvl - 1
    size = np.empty(n_lvl, dtype=np.int64)
    for lv in range(n_lvl):
        size[lv] = nodes[lv].max() + 1
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
        wide = wide_cmd[k] or per_op[o, 11] != 0
        b = 0 if wide else bank[k]  # an all-bank command's bank is not read
        at = prev + 1
        # per_op[o]: its checks by kind from columns 0 to 4, its records from 5 to 9
        for i in range(per_op[o, 0], per_op[o, 1]):  # newest-only
            s, lv = chk_slot[i], chk_level[i]
            same = wide or last[s] == nodes[lv, b]
            at = max(at, top[s] + (chk_lat[i] if same else chk_lat2[i]))
        for i in range(per_op[o, 1], per_op[o, 2]):  # window 1 over the channel
            at = max(at, top[chk_slot[i]] + chk_lat[i])
        if wide:  # window 1 per node: an all-bank command waits for every node
            for i in range(per_op[o, 2], per_op[o, 3]):
                at = max(at, top[chk_slot[i]] + chk_lat[i])
        else:
            for i in range(per_op[o, 2], per_op[o, 3]):
                s = chk_slot[i]
                t = max(hist[s * stride + nodes[chk_level[i], b]], spread[s])
                at = max(at, t + chk_lat[i])
        for i in range(per_op[o, 3], per_op[o, 4]):  # ring
            s, w = chk_slot[i], chk_win[i]
            for node in range(*_span(nodes, size, chk_level[i], b, wide)):
                c = cnt[s * nb + node]
                if c >= w:
                    at = max(at, hist[s * stride + node * w + c % w] + chk_lat[i])
        done = at + per_op[o, 10] + extra[k]
        for i in range(per_op[o, 5], per_op[o, 6]):
            s, lv = rec_slot[i], rec_level[i]
            top[s] = done if rec_done[i] else at
            last[s] = -1 if wide and lv != channel else nodes[lv, b]
        for i in range(per_op[o, 6], per_op[o, 7]):
            s = rec_slot[i]
            top[s] = max(top[s], done if rec_done[i] else at)
        if wide:  # to every node: the floor of all
            for i in range(per_op[o, 7], per_op[o, 8]):
                s = rec_slot[i]
                v = done if rec_done[i] else at
                top[s] = max(top[s], v)
                spread[s] = max(spread[s], v)
        else:
            for i in range(per_op[o, 7], per_op[o, 8]):
                s = rec_slot[i]
                v = done if rec_done[i] else at
                top[s] = max(top[s], v)
                j = s * stride + nodes[rec_level[i], b]
                hist[j] = max(hist[j], v)
        for i in range(per_op[o, 8], per_op[o, 9]):
            s, w = rec_slot[i], rec_win[i]
            for node in range(*_span(nodes, size, rec_level[i], b, wide)):
                c = cnt[s * nb + node]
                hist[s * stride + node * w + c % w] = at
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
