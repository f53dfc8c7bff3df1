"""Data rearrangement between the host layout and the PIM layout, timed (DCC II-A, IV-C).

The host keeps a tensor in its own layout (consecutive elements interleaved over channels and
banks); PIM cores need each core's data in its own bank. Moving a tensor into PIM layout is
a host read of the tensor plus, on every PIM group, the single-bank writes that lay it out
(and the reverse for results). The group side is timed on the command-level model: the
writes (or reads) are lowered to a single-bank stream (:func:`access_stream`) and
:func:`models.hbm_pim.time_stream` gives its cycles. The host side is the tensor's bytes at
the host xPU's memory bandwidth (peak x efficiency cap, ``configs/xpu/``).

Two strategies (DCC IV-C): **staged** through the host's controllable on-chip memory (GPU
shared memory) of ``M`` bytes, "serially reads N blocks of size B = M / N ... followed by
parallel write operations" to the N channels, round after round (a round's read and writes do
not overlap); **direct** (no on-chip memory): a copy that reads contiguous host data and so
writes one PIM channel at a time (DCC IV-C, case (i)), the reads overlapping the writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from pimphony.compiler.pim_gemv import GemvLayout, result_address, weight_address
from pimphony.models.backends import BackendConfig, BackendKind
from pimphony.models.errors import PimphonyError
from pimphony.models.hbm_pim import COMMAND_DTYPE, Op, check_backend, time_stream

__all__ = [
    "REARRANGEMENTS",
    "RearrangeCost",
    "RearrangeError",
    "Strategy",
    "access_stream",
    "access_stream_reference",
    "gemv_output_addresses",
    "gemv_weight_addresses",
    "group_access_cycles",
    "rearrangement_cost",
    "rearrangement_seconds",
]


class RearrangeError(PimphonyError, ValueError):
    """A rearrangement that cannot be costed (no addresses, bad sizes)."""


class Strategy(StrEnum):
    """How data moves between host layout and PIM layout (DCC IV-C)."""

    STAGED = "staged"  # through host on-chip memory, parallel channel writes
    DIRECT = "direct"  # no on-chip memory: one channel at a time


@dataclass(frozen=True)
class RearrangeCost:
    """Seconds of one rearrangement and what they are made of."""

    strategy: Strategy
    bytes: int
    channels: int
    host_s: float
    channel_s: float
    rounds: int
    total_s: float
    channel_cycles: int
    channel_commands: dict[str, int]


def _staged(host_s: float, channel_s: float, channels: int, rounds: int) -> float:
    """Rounds of (read a block of every channel's data, write them in parallel): the reads
    add up to the whole tensor, the parallel writes to one channel's share."""
    return host_s + channel_s


def _direct(host_s: float, channel_s: float, channels: int, rounds: int) -> float:
    """Contiguous reads overlapped with writes that reach one channel at a time."""
    return max(host_s, channels * channel_s)


#: Total time of each strategy from (host seconds, one channel's seconds, channels, rounds).
REARRANGEMENTS = {Strategy.STAGED: _staged, Strategy.DIRECT: _direct}


def rearrangement_seconds(
    strategy: Strategy, nbytes: int, host_gbps: float, channel_s: float, channels: int,
    onchip_bytes: int,
) -> tuple[float, float, int]:  # fmt: skip
    """(host seconds, total seconds, rounds) of moving ``nbytes`` over ``channels`` groups
    that each take ``channel_s`` for their share, the host reading at ``host_gbps``."""
    if nbytes < 1 or channels < 1 or host_gbps <= 0 or channel_s < 0:
        raise RearrangeError(
            f"bytes = {nbytes}, channels = {channels}, host_gbps = {host_gbps}, "
            f"channel_s = {channel_s}: sizes must be positive"
        )
    if strategy is Strategy.STAGED and onchip_bytes < channels:
        raise RearrangeError(
            f"staged rearrangement needs on-chip memory of at least one byte per channel "
            f"(onchip_bytes = {onchip_bytes}, channels = {channels}); use direct"
        )
    host_s = nbytes / (host_gbps * 1e9)
    rounds = -(-nbytes // onchip_bytes) if strategy is Strategy.STAGED else 1
    return host_s, REARRANGEMENTS[strategy](host_s, channel_s, channels, rounds), rounds


def access_stream(cfg: BackendConfig, addresses: np.ndarray, op: Op) -> np.ndarray:
    """Single-bank (SB mode) RDs or WRs of ``addresses`` (``(n, 3)``: bank, row, column) of
    one group, as a controller with open rows would issue them: rows in order; within a row,
    every bank that has data there opened (bank groups interleaved), its columns issued
    round-robin over those banks (consecutive commands in different bank groups), then the
    banks precharged."""
    if len(addresses) == 0:
        raise RearrangeError("no addresses to move")
    g = cfg.group
    per_bg = g.banks // g.bank_groups
    addr = np.asarray(addresses, dtype=np.int64)
    addr = addr[np.lexsort((addr[:, 2], addr[:, 1], addr[:, 0]))]  # by bank, row, column
    addr = addr[np.append(True, (addr[1:] != addr[:-1]).any(axis=1))]  # each address once
    bank, row, col = addr[:, 0], addr[:, 1], addr[:, 2]
    # bank-group interleaved order of banks: 0, per_bg, 2 per_bg, ..., 1, per_bg + 1, ...
    rank = np.empty(g.banks, dtype=np.int64)
    rank[np.arange(g.banks).reshape(g.bank_groups, per_bg).T.ravel()] = np.arange(g.banks)
    # k: a column's place among its (bank, row)'s columns (addr is sorted by bank, row, col)
    first = np.ones(len(addr), dtype=bool)
    first[1:] = (bank[1:] != bank[:-1]) | (row[1:] != row[:-1])
    starts = np.flatnonzero(first)
    k = np.arange(len(addr)) - np.repeat(starts, np.diff(np.append(starts, len(addr))))
    # per row: the ACTs of its banks (phase 0), its columns by (k, bank rank) (1), PREs (2)
    ob, orow = bank[starts], row[starts]
    n_open = len(starts)
    key_row = np.concatenate([orow, row, orow])
    key_phase = np.repeat([0, 1, 2], [n_open, len(addr), n_open])
    key_k = np.concatenate([np.zeros(n_open, np.int64), k, np.zeros(n_open, np.int64)])
    all_bank = np.concatenate([ob, bank, ob])
    order = np.lexsort((rank[all_bank], key_k, key_phase, key_row))
    phase = key_phase[order]
    out = np.zeros(len(order), dtype=COMMAND_DTYPE)
    out["op"] = np.array([int(Op.ACT), int(op), int(Op.PRE)])[phase]
    out["bank"] = all_bank[order]
    out["row"] = np.where(phase == 2, 0, key_row[order])
    out["col"] = np.where(phase == 1, np.concatenate([ob * 0, col, ob * 0])[order], 0)
    out["data"] = np.where(phase == 1, 0 if op is Op.WR else -1, -1)
    return out


def access_stream_reference(cfg: BackendConfig, addresses: np.ndarray, op: Op) -> np.ndarray:
    """Single-bank (SB mode) RDs or WRs of ``addresses`` (``(n, 3)``: bank, row, column) of
    one group, as a controller with open rows would issue them: rows in order; within a row,
    every bank that has data there opened (bank groups interleaved), its columns issued
    round-robin over those banks (consecutive commands in different bank groups), then the
    banks precharged. The plain-Python reference of :func:`access_stream` (same stream)."""
    if len(addresses) == 0:
        raise RearrangeError("no addresses to move")
    g = cfg.group
    per_bg = g.banks // g.bank_groups
    addr = np.unique(np.asarray(addresses, dtype=np.int64), axis=0)
    # bank-group interleaved order of banks: 0, per_bg, 2 per_bg, ..., 1, per_bg + 1, ...
    rank = np.empty(g.banks, dtype=np.int64)
    rank[np.arange(g.banks).reshape(g.bank_groups, per_bg).T.ravel()] = np.arange(g.banks)
    rows: list[tuple[int, int, int, int, int]] = []
    data = 0 if op is Op.WR else -1
    for row in np.unique(addr[:, 1]):
        here = addr[addr[:, 1] == row]
        banks = sorted(set(here[:, 0].tolist()), key=lambda b: rank[b])
        cols = {b: sorted(here[here[:, 0] == b, 2].tolist()) for b in banks}
        rows.extend((int(Op.ACT), b, int(row), 0, -1) for b in banks)
        for k in range(max(len(c) for c in cols.values())):
            rows.extend((int(op), b, int(row), cols[b][k], data) for b in banks if k < len(cols[b]))
        rows.extend((int(Op.PRE), b, 0, 0, -1) for b in banks)
    out = np.zeros(len(rows), dtype=COMMAND_DTYPE)
    for name, values in zip(COMMAND_DTYPE.names, zip(*rows, strict=True), strict=True):
        out[name] = values
    return out


def _hbm_pim_access(cfg: BackendConfig, addresses: np.ndarray, op: Op) -> tuple[int, dict]:
    try:
        check_backend(cfg)
    except PimphonyError as exc:
        raise RearrangeError(str(exc)) from None
    tl = time_stream(cfg, access_stream(cfg, addresses, op))
    return tl.cycles, tl.counts


def _attacc_access(cfg: BackendConfig, addresses: np.ndarray, op: Op) -> tuple[int, dict]:
    from pimphony.models import attacc

    tl = attacc.time_stream(cfg, attacc.access_stream(cfg, addresses, attacc.Op(int(op))))
    return tl.cycles, tl.counts


def _aim_access(cfg: BackendConfig, addresses: np.ndarray, op: Op) -> tuple[int, dict]:
    """An AiM channel's host accesses on :mod:`models.bank_slice`'s single-bank path (a
    conventional bank: ``sliced=False``), the preset's own timing. That model has host reads
    only (the AiM presets state no write recovery or write latency), so a write is timed as a
    read: one 32 B column per tCCD on the data bus, a single-bank ACT (tRCD_MAC), PRE (tRAS,
    tRTP, tRP). Columns go in (row, column, bank) order, so a row's banks open while earlier
    columns stream; the host queue is the preset's controller queue (``dcs.queue_depth``, the
    depth of its PIM command queues), not bank_slice's 8-entry xPU read queue."""
    from pimphony.models.bank_slice import HOST_READ_DTYPE, SliceConfig, run_bank_slice
    from pimphony.models.isa import empty_stream

    hw = cfg.hardware_config
    if hw is None:
        raise RearrangeError(f"back end {cfg.name}: an aim back end without its hardware preset")
    depth = min(hw.dcs.queue_depth, 64)  # the controller's queue (bank_slice holds <= 64)
    addr = np.unique(np.asarray(addresses, dtype=np.int64), axis=0)
    addr = addr[np.lexsort((addr[:, 0], addr[:, 2], addr[:, 1]))]  # by row, column, bank
    host = np.zeros(len(addr), dtype=HOST_READ_DTYPE)
    host["bank"], host["row"], host["col"] = addr[:, 0], addr[:, 1], addr[:, 2]
    res = run_bank_slice(
        empty_stream(0), host, hw, SliceConfig(sliced=False, host_queue_depth=depth), validate=False
    )
    return res.cycles, {"ACT": res.host_row_switches, op.name: len(addr)}


#: How each back-end kind times one group's single-bank host accesses.
GROUP_ACCESS = {
    BackendKind.HBM_PIM: _hbm_pim_access,
    BackendKind.ATTACC: _attacc_access,
    BackendKind.AIM: _aim_access,
}


def group_access_cycles(cfg: BackendConfig, addresses: np.ndarray, op: Op) -> tuple[int, dict]:
    """(cycles, commands per op) of one group's single-bank ``op`` (WR: lay data out, RD: read
    results back) of the vectors at ``addresses`` (``(n, 3)``: bank, row, column), on the back
    end's command-level model."""
    if cfg.kind not in GROUP_ACCESS:
        allowed = ", ".join(k.value for k in GROUP_ACCESS)
        raise RearrangeError(
            f"back end {cfg.name} ({cfg.kind.value}): no command-level host access model; "
            f"allowed kinds: {allowed}"
        )
    return GROUP_ACCESS[cfg.kind](cfg, addresses, op)


def gemv_weight_addresses(lay: GemvLayout) -> np.ndarray:
    """(bank, row, column) of every weight vector one group holds in the GEMV's PIM layout."""
    out = []
    for u in range(lay.units):
        for j in range(lay.out_tiles):
            for i in range(lay.in_tiles):
                for t in range(lay.tile_vectors):
                    pos, row, col = weight_address(lay, j, i, t)
                    out.append((u * lay.banks_per_unit + pos, row, col))
    return np.array(out, dtype=np.int64)


def gemv_output_addresses(lay: GemvLayout) -> np.ndarray:
    """(bank, row, column) of every result vector (16 lanes) one group holds after the GEMV."""
    out = [
        (u * lay.banks_per_unit, *result_address(lay, j, b, e))
        for u in range(lay.units)
        for j in range(lay.out_tiles)
        for b in range(lay.batch)
        for e in range(lay.output_regs)
    ]
    return np.array(out, dtype=np.int64)


def rearrangement_cost(
    cfg: BackendConfig,
    addresses: np.ndarray,
    channels: int,
    op: Op = Op.WR,
    strategy: Strategy | None = None,
) -> RearrangeCost:
    """Cost of moving the vectors at ``addresses`` (the same in each of ``channels`` groups)
    between host and PIM layout: ``op`` WR lays data out in the banks, RD reads results back.
    ``strategy`` defaults to staged if the host has on-chip memory, else direct."""
    if len(addresses) == 0:
        raise RearrangeError("no addresses to move")
    cycles, counts = group_access_cycles(cfg, addresses, op)
    assert cfg.clock_ghz is not None
    onchip = cfg.system.onchip_bytes
    strategy = strategy or (Strategy.STAGED if onchip else Strategy.DIRECT)
    channel_s = cycles / (cfg.clock_ghz * 1e9)
    nbytes = len(np.unique(addresses, axis=0)) * cfg.group.column_bytes * channels
    host_s, total_s, rounds = rearrangement_seconds(
        strategy, nbytes, cfg.host_gbps, channel_s, channels, onchip
    )
    return RearrangeCost(strategy, nbytes, channels, host_s, channel_s, rounds, total_s,
                         cycles, counts)  # fmt: skip
