"""One PIM module's attention timing, from numbers: the task graph and its EPU.

Per attention unit of one layer (a (request, KV head) pair, or one GPR score tile of it):
QK^T parts on channels -> softmax on the EPU -> SV parts on channels -> on the EPU, the
cross-channel reduction (more than one partial SV part) and, for a pair's second and later
tiles, the online-softmax combination with the pair's running output. Channels
run their parts in software-pipelined order (:func:`channel_order`: QK^T of the next pair
before SV of this one); the EPU serves ready tasks in order of readiness (ties: softmax
before reduction, then pair order), so EPU work overlaps channel work. The contract is
``docs/decode.md``; the channel part cycles come from the channel TLM.

:func:`makespan` is the reference event simulation over an :class:`AttentionTasks`;
:func:`makespan_arrays` is the same simulation compiled (numba) over per-unit part-cycle
arrays (:func:`task_arrays`), for callers that time many steps (``sim.systems.cycles``);
``tests/test_module.py`` checks that the two agree.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pimphony.models.config import HardwareConfig
from pimphony.models.hub import SOFTMAX_FLOPS_PER_SCORE, TILE_COMBINE_FLOPS_PER_ELEMENT, epu_cycles
from pimphony.models.jit import njit

__all__ = [
    "AttentionSchedule",
    "AttentionTasks",
    "attention_tasks",
    "channel_order",
    "makespan",
    "makespan_arrays",
    "schedule",
    "task_arrays",
]


@dataclass(frozen=True)
class AttentionSchedule:
    """Result of :func:`schedule` for one layer on one module."""

    cycles: int
    channel_busy: np.ndarray
    qk_busy: int
    sv_busy: int
    softmax_busy: int
    reduction_busy: int
    combine_busy: int = 0


def channel_order(qk: dict[int, int], sv: dict[int, int]) -> list[tuple[str, int]]:
    """A channel's tasks: QK^T of its next pair before SV of its current one."""
    mine = sorted(set(qk) | set(sv))
    seq: list[tuple[str, int]] = []
    for k, p in enumerate(mine):
        if k == 0 and p in qk:
            seq.append(("qk", p))
        if k + 1 < len(mine) and mine[k + 1] in qk:
            seq.append(("qk", mine[k + 1]))
        if p in sv:
            seq.append(("sv", p))
    return seq


@dataclass(frozen=True)
class AttentionTasks:
    """One layer's attention work on one module, built once and scheduled as often as needed."""

    qk_of: list[dict[int, int]]  # per channel: pair -> QK^T part cycles
    sv_of: list[dict[int, int]]  # per channel: pair -> SV part cycles
    order: list[list[tuple[str, int]]]  # per channel: its tasks in issue order
    sv_parts: list[int]  # per unit: channels holding an SV part
    softmax_cost: list[int]  # per unit: EPU cycles
    reduction_cost: list[int]  # per unit: EPU cycles (0 with one SV part or disjoint parts)
    combine_cost: list[int] | None = None  # per unit: EPU cycles (0 for a pair's first tile)
    post_sv: list[bool] | None = None  # per unit: the EPU works after its SV parts

    def combine(self) -> list[int]:
        """Per unit, the online-softmax combination cycles (all 0 without tiling)."""
        return self.combine_cost if self.combine_cost is not None else [0] * len(self.sv_parts)

    def after_sv(self) -> list[bool]:
        """Per unit, whether an EPU task follows its SV parts."""
        if self.post_sv is not None:
            return self.post_sv
        return [parts > 1 for parts in self.sv_parts]


def attention_tasks(
    cfg: HardwareConfig,
    qk_of: list[dict[int, int]],
    sv_of: list[dict[int, int]],
    pair_tokens: Sequence[int],
    gqa_group: int,
    head_dim: int,
    tiles: Sequence[int] | None = None,
    sv_reduction: bool = True,
) -> AttentionTasks:
    """One layer's attention tasks from per-channel part cycles (``qk_of[c][unit]``, ...).

    ``pair_tokens[u]`` is the token count of unit ``u`` (a pair, or one GPR score tile of
    it; ``tiles[u]`` its tile index, default 0); the EPU costs follow from it: softmax over
    ``gqa_group * tokens`` scores; with ``sv_reduction`` and more than one SV part, the
    cross-channel reduction of ``parts - 1`` partial outputs of ``gqa_group * head_dim``; for
    a tile after a pair's first, the online-softmax combination,
    ``TILE_COMBINE_FLOPS_PER_ELEMENT * gqa_group * head_dim``.
    """
    n = len(pair_tokens)
    tiles = [0] * n if tiles is None else list(tiles)
    sv_parts = [sum(p in d for d in sv_of) for p in range(n)]
    reduced = [sv_reduction and parts > 1 for parts in sv_parts]
    g = gqa_group
    return AttentionTasks(
        qk_of=qk_of,
        sv_of=sv_of,
        order=[channel_order(q, s) for q, s in zip(qk_of, sv_of, strict=True)],
        sv_parts=sv_parts,
        softmax_cost=[epu_cycles(cfg, SOFTMAX_FLOPS_PER_SCORE * g * t) for t in pair_tokens],
        reduction_cost=[
            epu_cycles(cfg, (sv_parts[p] - 1) * g * head_dim) if reduced[p] else 0 for p in range(n)
        ],
        combine_cost=[
            epu_cycles(cfg, TILE_COMBINE_FLOPS_PER_ELEMENT * g * head_dim) if k else 0
            for k in tiles
        ],
        post_sv=[reduced[p] or tiles[p] > 0 for p in range(n)],
    )


def makespan(
    tasks: AttentionTasks,
    sm_cost: list[int],
    red_cost: list[int],
    comb_cost: list[int] | None = None,
) -> int:
    """Event-driven end time of ``tasks`` with the given EPU costs per unit (``comb_cost``
    defaults to the tasks' own online-softmax combination costs)."""
    qk_of, sv_of, order, sv_parts = tasks.qk_of, tasks.sv_of, tasks.order, tasks.sv_parts
    comb = tasks.combine() if comb_cost is None else comb_cost
    post = tasks.after_sv()
    channels, n = len(order), len(sv_parts)
    qk_left = [sum(p in d for d in qk_of) for p in range(n)]
    sv_left = list(sv_parts)
    pos = [0] * channels
    sm_done = [-1] * n
    blocked: dict[int, list[int]] = {}
    epu_ready: list[tuple[int, int, int]] = []  # (ready time, 0 softmax / 1 reduction, pair)
    epu_busy_until = 0
    events: list[tuple[int, int, int, int]] = []  # (time, kind, a, b); kinds below
    CH_DONE, EPU_DONE = 0, 1  # noqa: N806
    end = 0

    def start_channel(c: int, t: int) -> None:
        if pos[c] == len(order[c]):
            return
        kind, p = order[c][pos[c]]
        if kind == "sv" and sm_done[p] < 0:
            blocked.setdefault(p, []).append(c)
            return
        d = qk_of[c][p] if kind == "qk" else sv_of[c][p]
        heapq.heappush(events, (t + d, CH_DONE, c, p * 2 + (kind == "sv")))
        pos[c] += 1

    def start_epu(t: int) -> None:
        nonlocal epu_busy_until
        if epu_busy_until > t or not epu_ready:
            return
        ready, kind, p = heapq.heappop(epu_ready)
        begin = max(t, ready)
        d = sm_cost[p] if kind == 0 else red_cost[p] + comb[p]
        epu_busy_until = begin + d
        heapq.heappush(events, (begin + d, EPU_DONE, kind, p))

    for p in range(n):
        if qk_left[p] == 0:
            heapq.heappush(epu_ready, (0, 0, p))
    for c in range(channels):
        start_channel(c, 0)
    start_epu(0)
    while events:
        t, kind, a, b = heapq.heappop(events)
        end = max(end, t)
        if kind == CH_DONE:
            c, p, is_sv = a, b // 2, b % 2
            if not is_sv:
                qk_left[p] -= 1
                if qk_left[p] == 0:
                    heapq.heappush(epu_ready, (t, 0, p))
            else:
                sv_left[p] -= 1
                if sv_left[p] == 0 and post[p]:
                    heapq.heappush(epu_ready, (t, 1, p))
            start_channel(c, t)
        elif a == 0:  # a softmax finished: its SV parts may start
            sm_done[b] = t
            for c in blocked.pop(b, []):
                start_channel(c, t)
        start_epu(t)
    if blocked or any(pos[c] < len(order[c]) for c in range(channels)):
        raise RuntimeError("attention schedule deadlocked (internal error)")
    return int(end)


def schedule(tasks: AttentionTasks, softmax: bool, reduction: bool) -> AttentionSchedule:
    zero = [0] * len(tasks.sv_parts)
    sm = tasks.softmax_cost if softmax else zero
    red = tasks.reduction_cost if reduction else zero
    busy = np.array(
        [sum(q.values()) + sum(v.values()) for q, v in zip(tasks.qk_of, tasks.sv_of, strict=True)],
        dtype=np.int64,
    )
    return AttentionSchedule(
        cycles=makespan(tasks, sm, red),
        channel_busy=busy,
        qk_busy=int(sum(sum(d.values()) for d in tasks.qk_of)),
        sv_busy=int(sum(sum(d.values()) for d in tasks.sv_of)),
        softmax_busy=int(sum(sm)),
        reduction_busy=int(sum(red)),
        combine_busy=int(sum(tasks.combine())),
    )


def task_arrays(
    tasks: AttentionTasks,
    sm_cost: Sequence[int] | None = None,
    red_cost: Sequence[int] | None = None,
    comb_cost: Sequence[int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``tasks`` as the arrays :func:`makespan_arrays` takes: ``(qk, sv, softmax, post,
    after_sv)``; ``qk[u, c]`` / ``sv[u, c]`` are unit ``u``'s part cycles on channel ``c``
    (-1: no part there), ``post[u]`` its EPU cycles after SV (reduction + combination),
    ``after_sv[u]`` 1 if that EPU task exists (:meth:`AttentionTasks.after_sv`). The
    EPU costs default to the tasks' own (as :func:`makespan`'s arguments override them)."""
    n, channels = len(tasks.sv_parts), len(tasks.qk_of)
    qk = np.full((n, channels), -1, dtype=np.int64)
    sv = np.full((n, channels), -1, dtype=np.int64)
    for c in range(channels):
        for u, d in tasks.qk_of[c].items():
            qk[u, c] = d
        for u, d in tasks.sv_of[c].items():
            sv[u, c] = d
    sm = np.asarray(tasks.softmax_cost if sm_cost is None else sm_cost, dtype=np.int64)
    red = np.asarray(tasks.reduction_cost if red_cost is None else red_cost, dtype=np.int64)
    comb = np.asarray(tasks.combine() if comb_cost is None else comb_cost, dtype=np.int64)
    post = np.asarray(tasks.after_sv(), dtype=np.int64)
    return qk, sv, sm.reshape(n), (red + comb).reshape(n), post.reshape(n)


def makespan_arrays(
    qk: np.ndarray, sv: np.ndarray, sm_cost: np.ndarray, post_cost: np.ndarray, post: np.ndarray
) -> int:
    """:func:`makespan` over arrays (:func:`task_arrays`), compiled: the same task graph (each
    channel's tasks in :func:`channel_order`), the same event order and EPU policy, so the
    same end time. Units are numbered by row; a channel's tasks follow the row order. The
    arrays may be views (columns of one packed array): they are not copied."""
    arrays = [np.asarray(a, dtype=np.int64) for a in (qk, sv, sm_cost, post_cost, post)]
    end = _makespan_kernel(*arrays)
    if end == _TOO_LONG:  # event keys would overflow int64: the reference simulation
        qk, sv, sm, post_cost, post = arrays
        n, channels = qk.shape
        qk_of = [{p: int(qk[p, c]) for p in range(n) if qk[p, c] >= 0} for c in range(channels)]
        sv_of = [{p: int(sv[p, c]) for p in range(n) if sv[p, c] >= 0} for c in range(channels)]
        tasks = AttentionTasks(
            qk_of,
            sv_of,
            [channel_order(q, v) for q, v in zip(qk_of, sv_of, strict=True)],
            [sum(p in d for d in sv_of) for p in range(n)],
            sm.tolist(),
            post_cost.tolist(),
            [0] * n,
            [bool(x) for x in post],
        )
        return makespan(tasks, tasks.softmax_cost, tasks.reduction_cost)
    if end < 0:
        raise RuntimeError("attention schedule deadlocked (internal error)")
    return int(end)


_TOO_LONG = -2


@njit(cache=True)
def _bits(x: int) -> int:
    """Bits of the non-negative ``x`` (``int.bit_length``)."""
    b = 0
    while x > 0:
        x >>= 1
        b += 1
    return b


@njit(cache=True, inline="always")
def _heap_push(h: np.ndarray, size: int, key: int) -> int:
    """Push ``key`` onto the min-heap ``h[:size]``; the new size."""
    i = size
    while i > 0:
        parent = (i - 1) // 2
        if h[parent] <= key:
            break
        h[i] = h[parent]
        i = parent
    h[i] = key
    return size + 1


@njit(cache=True, inline="always")
def _heap_pop(h: np.ndarray, size: int) -> int:
    """Remove the least key of the min-heap ``h[:size]`` (the caller read ``h[0]``); the new
    size."""
    size -= 1
    last = h[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and h[child + 1] < h[child]:
            child += 1
        if last <= h[child]:
            break
        h[i] = h[child]
        i = child
    h[i] = last
    return size


@njit(cache=True, inline="always")
def _start_channel(c, t, pos, olen, order, qk, sv, sm_done, blocked_on, ev, n_ev, a_bits, b_bits):
    """:func:`makespan`'s ``start_channel``: issue channel ``c``'s next task at ``t`` unless
    it is an SV waiting for its softmax; the new event-heap size."""
    if pos[c] == olen[c]:
        return n_ev
    task = order[c, pos[c]]  # unit * 2 + (1 if SV)
    p, is_sv = task // 2, task % 2
    if is_sv == 1 and sm_done[p] < 0:
        blocked_on[c] = p
        return n_ev
    d = sv[p, c] if is_sv == 1 else qk[p, c]
    pos[c] += 1
    # Event (time, kind 0 = channel, channel, task) as one ordered int64 key.
    return _heap_push(ev, n_ev, ((((t + d) << 1) << a_bits | c) << b_bits) | task)


@njit(cache=True)
def _makespan_kernel(qk, sv, sm_cost, post_cost, post):  # noqa: C901, PLR0912, PLR0915
    """:func:`makespan`, event for event; -1 if the schedule deadlocks, ``_TOO_LONG`` if
    its event keys could overflow.

    Events ``(time, kind, a, b)`` and EPU-ready entries ``(time, kind, unit)`` are ordered
    as :func:`makespan` orders its tuples, encoded as int64 keys (bit fields: ``a <
    channels + 2``, ``b < 2 n + 2``); the makespan is at most the sum of all task durations
    (time only advances to the end of a running task), which bounds the keys.
    """
    n, channels = qk.shape
    a_bits, b_bits, r_bits = _bits(channels + 1), _bits(2 * n + 1), _bits(n)
    bound = 0
    for p in range(n):
        bound += sm_cost[p] + post_cost[p]
        for c in range(channels):
            bound += max(qk[p, c], 0) + max(sv[p, c], 0)
    if _bits(bound) + 1 + a_bits + b_bits >= 62:
        return _TOO_LONG
    # Each channel's tasks in channel_order: QK^T of its next unit before SV of this one.
    order = np.empty((channels, 2 * n + 1), dtype=np.int64)  # olen[c] entries used
    olen = np.zeros(channels, dtype=np.int64)
    mine = np.empty(n, dtype=np.int64)
    for c in range(channels):
        m = 0
        for p in range(n):
            if qk[p, c] >= 0 or sv[p, c] >= 0:
                mine[m] = p
                m += 1
        k_len = 0
        for k in range(m):
            p = mine[k]
            if k == 0 and qk[p, c] >= 0:
                order[c, k_len] = 2 * p
                k_len += 1
            if k + 1 < m and qk[mine[k + 1], c] >= 0:
                order[c, k_len] = 2 * mine[k + 1]
                k_len += 1
            if sv[p, c] >= 0:
                order[c, k_len] = 2 * p + 1
                k_len += 1
        olen[c] = k_len
    qk_left = np.zeros(n, dtype=np.int64)
    sv_left = np.zeros(n, dtype=np.int64)
    for p in range(n):
        for c in range(channels):
            if qk[p, c] >= 0:
                qk_left[p] += 1
            if sv[p, c] >= 0:
                sv_left[p] += 1
    pos = np.zeros(channels, dtype=np.int64)
    sm_done = np.full(n, -1, dtype=np.int64)
    blocked_on = np.full(channels, -1, dtype=np.int64)
    # At most one event per channel and one of the EPU in flight; each unit is ready on the
    # EPU at most twice (softmax, then reduction/combination).
    ev = np.empty(channels + 2, dtype=np.int64)
    n_ev = 0
    ready = np.empty(2 * n + 1, dtype=np.int64)
    n_ready = 0
    epu_busy_until = 0
    end = 0
    for p in range(n):
        if qk_left[p] == 0:
            n_ready = _heap_push(ready, n_ready, p)  # (0, softmax, p)
    for c in range(channels):
        n_ev = _start_channel(
            c, 0, pos, olen, order, qk, sv, sm_done, blocked_on, ev, n_ev, a_bits, b_bits
        )
    t = 0
    while True:
        # start_epu(t): the EPU takes the earliest ready task when it is free.
        if epu_busy_until <= t and n_ready > 0:
            key = ready[0]
            n_ready = _heap_pop(ready, n_ready)
            p = key & ((1 << r_bits) - 1)
            kind = (key >> r_bits) & 1
            begin = max(t, key >> (r_bits + 1))
            epu_busy_until = begin + (sm_cost[p] if kind == 0 else post_cost[p])
            n_ev = _heap_push(
                ev, n_ev, ((((epu_busy_until << 1) | 1) << a_bits | kind) << b_bits) | p
            )
        if n_ev == 0:
            break
        key = ev[0]
        n_ev = _heap_pop(ev, n_ev)
        b = key & ((1 << b_bits) - 1)
        a = (key >> b_bits) & ((1 << a_bits) - 1)
        is_epu = (key >> (b_bits + a_bits)) & 1
        t = key >> (b_bits + a_bits + 1)
        end = max(end, t)
        if is_epu == 0:
            c, p, is_sv = a, b // 2, b % 2
            if is_sv == 0:
                qk_left[p] -= 1
                if qk_left[p] == 0:
                    n_ready = _heap_push(ready, n_ready, (t << (r_bits + 1)) | p)
            else:
                sv_left[p] -= 1
                if sv_left[p] == 0 and post[p] != 0:
                    n_ready = _heap_push(ready, n_ready, (((t << 1) | 1) << r_bits) | p)
            n_ev = _start_channel(
                c, t, pos, olen, order, qk, sv, sm_done, blocked_on, ev, n_ev, a_bits, b_bits
            )
        elif a == 0:  # a softmax finished: its SV parts may start
            sm_done[b] = t
            for c in range(channels):
                if blocked_on[c] == b:
                    blocked_on[c] = -1
                    n_ev = _start_channel(
                        c, t, pos, olen, order, qk, sv, sm_done, blocked_on, ev, n_ev, a_bits,
                        b_bits,
                    )  # fmt: skip
    for c in range(channels):
        if blocked_on[c] >= 0 or pos[c] < olen[c]:
            return -1
    return end
