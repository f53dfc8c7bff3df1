"""The plain-Python reference oracles of the command-level back ends, in one place.

Each is the slow, obvious form of a compiled or vectorised production function, the same
result by another route, kept only for the tests to hold the fast form against (nothing in
``models/``, ``compiler/`` or ``sim/`` calls them):

- :func:`issue_reference`: :func:`models.dram_rules.issue` (the bank-rule engine, numba),
  read straight from the constraint table, constraint by constraint; pass it as ``engine``
  to :func:`models.hbm_pim.time_stream` or :func:`models.attacc.time_stream`.
- :func:`modes_reference`: :func:`models.hbm_pim.modes` (numba).
- :func:`access_stream_reference`: :func:`models.attacc.access_stream` (vectorised).
"""

from __future__ import annotations

from collections import deque

import numpy as np
from pimphony.models.attacc import COMMAND_DTYPE, access_addresses, command, interleave
from pimphony.models.attacc import Op as AttAccOp
from pimphony.models.backends import BackendConfig
from pimphony.models.dram_rules import BankRules, Commands, Level, Match, Since
from pimphony.models.hbm_pim import AB_ENTRY_ROW, MODE_COLUMN, SB_ENTRY_ROW, Mode, mode_banks
from pimphony.models.hbm_pim import Op as HbmPimOp

__all__ = ["access_stream_reference", "issue_reference", "modes_reference"]


def _node(nodes: np.ndarray, level: Level, bank: int, every: bool) -> int | None:
    """The node of ``bank`` at ``level``; None for an all-bank command below the channel."""
    return 0 if level is Level.CHANNEL else None if every else int(nodes[level, bank])


def _reach(
    nodes: np.ndarray, sizes: dict[Level, int], level: Level, bank: int, every: bool
) -> list[int]:
    """The nodes at ``level`` a command to ``bank`` (all banks if ``every``) is in."""
    one = _node(nodes, level, bank, every)
    return list(range(sizes[level])) if one is None else [one]


def issue_reference(rules: BankRules, nodes: np.ndarray, cmds: Commands) -> tuple[np.ndarray, int]:
    """:func:`models.dram_rules.issue` in plain Python: every constraint keeps, per node, the
    maximum of its prerequisites' times (window 1) or their last ``window`` issue cycles,
    and an all-bank prerequisite is recorded in every node."""
    op, bank, wide, extra = (a.tolist() for a in cmds)
    sizes = {lv: int(nodes[lv].max()) + 1 for lv in Level}
    hist = [
        [deque(maxlen=c.window) if c.window > 1 else None for _ in range(sizes[c.level])]
        for c in rules.constraints
    ]
    newest: list[tuple[int, int | None] | None] = [None] * len(rules.constraints)
    issued = np.empty(len(op), dtype=np.int64)
    prev, end = -1, 0
    for k in range(len(op)):
        o, b = op[k], bank[k]
        every = wide[k] or o in rules.wide
        at = prev + 1
        for i, c in enumerate(rules.constraints):
            if o not in c.next:
                continue
            if c.match is Match.EACH:
                for where in _reach(nodes, sizes, c.level, b, every):
                    h = hist[i][where]
                    if c.window == 1 and h is not None:
                        at = max(at, h + c.latency)
                    elif c.window > 1 and len(h) == c.window:
                        at = max(at, h[0] + c.latency)
            elif newest[i] is not None:
                t, where = newest[i]
                same = every or (where is not None and where == _node(nodes, c.level, b, every))
                if same == (c.match is Match.NEWEST_SAME):
                    at = max(at, t + c.latency)
        done = at + rules.completion[o] + extra[k]
        for i, c in enumerate(rules.constraints):
            if o not in c.prev:
                continue
            v = done if c.since is Since.DONE else at
            if c.match is not Match.EACH:
                newest[i] = (v, _node(nodes, c.level, b, every))
                continue
            for where in _reach(nodes, sizes, c.level, b, every):
                if c.window > 1:
                    hist[i][where].append(v)
                else:
                    h = hist[i][where]
                    hist[i][where] = v if h is None else max(h, v)
        issued[k] = prev = at
        end = max(end, done)
    return issued, end


def modes_reference(cfg: BackendConfig, stream: np.ndarray) -> np.ndarray:
    """:func:`models.hbm_pim.modes` command by command: the mode each command is issued in
    (mode changes take effect after their command)."""
    entry, exit_ = mode_banks(cfg)
    mode, marks = Mode.SB, set()
    out = np.empty(len(stream), dtype=np.uint8)
    for k in range(len(stream)):
        out[k] = mode
        op, bank, row, col = (int(stream[f][k]) for f in ("op", "bank", "row", "col"))
        if op != HbmPimOp.WR:
            continue
        if mode is Mode.SB and (row, col) == (AB_ENTRY_ROW, MODE_COLUMN) and bank in entry:
            marks.add(bank)
            if marks == entry:
                mode, marks = Mode.AB, set()
        elif mode is Mode.AB and (row, col) == (SB_ENTRY_ROW, MODE_COLUMN) and bank in exit_:
            marks.add(bank)
            if marks == exit_:
                mode, marks = Mode.SB, set()
    return out


def access_stream_reference(cfg: BackendConfig, addresses: np.ndarray, op: AttAccOp) -> np.ndarray:
    """:func:`models.attacc.access_stream` loop by loop: per row in order, an ACT for every
    bank with data there (in :func:`models.attacc.interleave` order), the columns round-robin
    over those banks, a PRE per bank."""
    addr = access_addresses(cfg, addresses, op)
    g = cfg.group
    order = interleave(cfg)
    rank_of = np.empty(g.banks, np.int64)
    rank_of[order] = np.arange(g.banks)
    out: list[tuple] = []
    data = 0 if op == AttAccOp.WR else -1
    for row in np.unique(addr[:, 1]):
        here = addr[addr[:, 1] == row]
        banks = sorted(set(here[:, 0].tolist()), key=lambda b: rank_of[b])
        cols = {b: here[here[:, 0] == b, 2].tolist() for b in banks}
        out.extend(command(AttAccOp.ACT, bank=b, row=int(row)) for b in banks)
        for k in range(max(len(v) for v in cols.values())):
            out.extend(
                command(
                    AttAccOp(op),
                    bank=b,
                    row=int(row),
                    col=cols[b][k],
                    **({"data": data} if op == AttAccOp.WR else {}),
                )
                for b in banks
                if k < len(cols[b])
            )
        out.extend(command(AttAccOp.PRE, bank=b) for b in banks)
    return np.array(out, dtype=COMMAND_DTYPE)
