"""One PIM module's attention timing, from numbers: the task graph and its EPU.

Per attention unit of one layer (a (request, KV head) pair, or one GPR score tile of it):
QK^T parts on channels -> softmax on the EPU -> SV parts on channels -> on the EPU, the
cross-channel reduction (more than one partial SV part) and, for a pair's second and later
tiles, the online-softmax combination with the pair's running output. Channels
run their parts in software-pipelined order (:func:`channel_order`: QK^T of the next pair
before SV of this one); the EPU serves ready tasks in order of readiness (ties: softmax
before reduction, then pair order), so EPU work overlaps channel work. The contract is
``docs/decode.md``; the channel part cycles come from the channel TLM.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from models.config import HardwareConfig
from models.hub import SOFTMAX_FLOPS_PER_SCORE, TILE_COMBINE_FLOPS_PER_ELEMENT, epu_cycles

__all__ = [
    "AttentionSchedule",
    "AttentionTasks",
    "attention_tasks",
    "channel_order",
    "makespan",
    "schedule",
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
