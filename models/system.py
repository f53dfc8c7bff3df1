"""One decode step of a batch on a multi-module PIM system (TP x PP), with its breakdown.

The timing contract is ``docs/decode.md``. In short, for one micro-batch on one TP module,
one layer takes, in sequence:

``qkv`` GEMV -> attention -> ``proj`` GEMV -> all-reduce -> ``ffn1`` -> EPU norms and
activation -> ``ffn2`` -> all-reduce (+ static-memory command transfer)

Each GEMV lasts as long as its slowest channel. Attention is a task graph: per (request,
KV head) pair, the QK^T parts on channels, softmax on the EPU, the SV parts on channels and
(TCP) the EPU's cross-channel reduction of SV partial outputs. Channels run their parts in
software-pipelined order (QK^T of the next pair before SV of this one) and the EPU serves
softmax and reductions in that order, so EPU work overlaps channel work.

Stages process micro-batches in turn; a decode step of the whole batch takes the cyclic
pipeline period ``max(busiest stage, slowest micro-batch round trip including links)``.
Every layer of a stage and every TP module of a stage are identical, so one layer of one
module is simulated per micro-batch, and identical channel kernels are simulated once
(``memoize``); with ``memoize=False`` every layer, module and kernel is simulated and
``tests/test_system.py`` checks that the report is the same.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.decode import (
    GEMV_OPS,
    DecodeMappingError,
    LayerPlan,
    Parallelism,
    layer_plan,
    micro_batches,
    stage_layers,
)
from compiler.llm import ModelSpec
from compiler.partition import PARTITIONS
from models.channel import SCHEDULERS
from models.config import HardwareConfig
from models.dpa.dispatcher import va2pa_entry_bytes
from models.dpa.format import CONFIG_ENTRY_BYTES
from models.hub import (
    NORM_FLOPS_PER_ELEMENT,
    RELU_FLOPS_PER_ELEMENT,
    RESIDUAL_FLOPS_PER_ELEMENT,
    SOFTMAX_FLOPS_PER_SCORE,
    SWIGLU_FLOPS_PER_ELEMENT,
    epu_cycles,
    hub_instruction_bytes,
    link_cycles,
)
from models.memory import ChunkGeometry, OutOfMemory, make_allocator
from models.module import KernelCache, job_key

__all__ = [
    "MEMORY_POLICIES",
    "OP_KEYS",
    "DecodeError",
    "DecodeSetup",
    "LayerTiming",
    "attention_schedule",
    "fill_batch",
    "run_decode",
]

MEMORY_POLICIES = ("lazy", "static")
#: Report keys of a layer's parts, in execution order.
OP_KEYS = ("qkv", "qk", "softmax", "sv", "proj", "ffn1", "ffn2", "epu_other", "allreduce",
           "cmd_transfer")  # fmt: skip
_ATTN = ("qk", "softmax", "sv")


class DecodeError(ValueError):
    """A decode-step set-up is invalid or does not fit the system."""


@dataclass(frozen=True)
class DecodeSetup:
    """Everything one decode step depends on; validated on construction.

    Parameters
    ----------
    model, hw : ModelSpec, HardwareConfig
        The LLM and the module preset.
    lengths : tuple of int
        Context length of each request of the batch (tokens its new query attends to).
    tp, pp : int
        Tensor- and pipeline-parallel degrees; the system has ``tp * pp`` modules.
    partition : {"tcp", "hfp"}
        Attention partitioning inside a module.
    sched : {"static", "pingpong", "dcs"}
        Channel command scheduler.
    memory : {"lazy", "static"}
        ``lazy``: DPA (virtual addresses, 1 MB chunks, on-module dispatcher); ``static``:
        maximum-context reservation and host-sent unrolled attention streams.
    micro_batches : int, optional
        Pipeline micro-batches (default ``min(pp, batch)``).
    max_context : int, optional
        Tokens a static reservation holds (default the model's ``context_window``).
    check_capacity : bool
        Refuse batches that do not fit (default); off only for timing studies.
    """

    model: ModelSpec
    hw: HardwareConfig
    lengths: tuple[int, ...]
    tp: int = 1
    pp: int = 1
    partition: str = "tcp"
    sched: str = "dcs"
    memory: str = "lazy"
    micro_batches: int | None = None
    max_context: int | None = None
    check_capacity: bool = True

    def __post_init__(self) -> None:
        if not self.lengths:
            raise DecodeError("the batch is empty: give at least one context length")
        for i, t in enumerate(self.lengths):
            if isinstance(t, bool) or not isinstance(t, int | np.integer) or t <= 0:
                raise DecodeError(f"context length of request {i} = {t!r}: must be a positive int")
        object.__setattr__(self, "lengths", tuple(int(t) for t in self.lengths))
        try:
            Parallelism(self.tp, self.pp).check(self.model)
        except DecodeMappingError as exc:
            raise DecodeError(str(exc)) from None
        for name, value, allowed in (
            ("partition", self.partition, PARTITIONS),
            ("sched", self.sched, SCHEDULERS),
            ("memory", self.memory, MEMORY_POLICIES),
        ):
            if value not in allowed:
                raise DecodeError(f"{name} {value!r} is unknown; allowed: {', '.join(allowed)}")
        if self.micro_batches is not None and (
            isinstance(self.micro_batches, bool)
            or not isinstance(self.micro_batches, int)
            or self.micro_batches < 1
        ):
            raise DecodeError(f"micro_batches = {self.micro_batches!r}: must be a positive int")
        longest = max(self.lengths)
        window = self.model.context_window
        if longest > window:
            raise DecodeError(
                f"context length {longest} exceeds {self.model.name}'s context_window {window}"
            )
        if self.max_context is not None and not self.max_context > 0:
            raise DecodeError(f"max_context = {self.max_context!r}: must be positive")
        if self.memory == "static" and longest > self.reservation:
            raise DecodeError(
                f"context length {longest} exceeds the static reservation max_context = "
                f"{self.reservation}"
            )

    @property
    def modules(self) -> int:
        """Modules in the system (``tp * pp``)."""
        return self.tp * self.pp

    @property
    def reservation(self) -> int:
        """Tokens reserved per request under static allocation."""
        return self.max_context or self.model.context_window


# ---------------------------------------------------------------------------- attention


@dataclass(frozen=True)
class AttentionSchedule:
    """Result of :func:`attention_schedule` for one layer on one module."""

    cycles: int
    channel_busy: np.ndarray
    qk_busy: int
    sv_busy: int
    softmax_busy: int
    reduction_busy: int


def _channel_order(qk: dict[int, int], sv: dict[int, int]) -> list[tuple[str, int]]:
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
class _AttentionTasks:
    """One layer's attention work on one module, built once and scheduled as often as needed."""

    qk_of: list[dict[int, int]]  # per channel: pair -> QK^T part cycles
    sv_of: list[dict[int, int]]  # per channel: pair -> SV part cycles
    order: list[list[tuple[str, int]]]  # per channel: its tasks in issue order
    sv_parts: list[int]  # per pair: channels holding an SV part
    softmax_cost: list[int]  # per pair: EPU cycles
    reduction_cost: list[int]  # per pair: EPU cycles (0 with one SV part)


def _attention_tasks(
    plan: LayerPlan, cfg: HardwareConfig, run: Callable[[Any], Any]
) -> _AttentionTasks:
    channels = len(plan.qk)
    pairs = sorted({(j.request, j.kv_head) for jobs in (*plan.qk, *plan.sv) for j in jobs})
    index = {p: k for k, p in enumerate(pairs)}
    qk_of: list[dict[int, int]] = [{} for _ in range(channels)]
    sv_of: list[dict[int, int]] = [{} for _ in range(channels)]
    for c in range(channels):
        for j in plan.qk[c]:
            qk_of[c][index[(j.request, j.kv_head)]] = run(j).cycles
        for j in plan.sv[c]:
            sv_of[c][index[(j.request, j.kv_head)]] = run(j).cycles
    n = len(pairs)
    sv_parts = [sum(p in d for d in sv_of) for p in range(n)]
    g, d_h = plan.gqa_group, plan.head_dim
    return _AttentionTasks(
        qk_of=qk_of,
        sv_of=sv_of,
        order=[_channel_order(qk_of[c], sv_of[c]) for c in range(channels)],
        sv_parts=sv_parts,
        softmax_cost=[
            epu_cycles(cfg, SOFTMAX_FLOPS_PER_SCORE * g * plan.lengths[pairs[p][0]])
            for p in range(n)
        ],
        reduction_cost=[
            epu_cycles(cfg, (sv_parts[p] - 1) * g * d_h) if sv_parts[p] > 1 else 0 for p in range(n)
        ],
    )


def _makespan(tasks: _AttentionTasks, sm_cost: list[int], red_cost: list[int]) -> int:
    """Event-driven end time of ``tasks`` with the given EPU costs per pair."""
    qk_of, sv_of, order, sv_parts = tasks.qk_of, tasks.sv_of, tasks.order, tasks.sv_parts
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
        d = sm_cost[p] if kind == 0 else red_cost[p]
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
                if sv_left[p] == 0 and sv_parts[p] > 1:
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


def _schedule(tasks: _AttentionTasks, softmax: bool, reduction: bool) -> AttentionSchedule:
    zero = [0] * len(tasks.sv_parts)
    sm = tasks.softmax_cost if softmax else zero
    red = tasks.reduction_cost if reduction else zero
    busy = np.array(
        [sum(q.values()) + sum(v.values()) for q, v in zip(tasks.qk_of, tasks.sv_of, strict=True)],
        dtype=np.int64,
    )
    return AttentionSchedule(
        cycles=_makespan(tasks, sm, red),
        channel_busy=busy,
        qk_busy=int(sum(sum(d.values()) for d in tasks.qk_of)),
        sv_busy=int(sum(sum(d.values()) for d in tasks.sv_of)),
        softmax_busy=int(sum(sm)),
        reduction_busy=int(sum(red)),
    )


def attention_schedule(
    plan: LayerPlan,
    cfg: HardwareConfig,
    run: Callable[[Any], Any],
    softmax: bool = True,
    reduction: bool = True,
) -> AttentionSchedule:
    """Event-driven makespan of one layer's attention on one module.

    Per (request, KV head) pair: QK^T parts on channels -> softmax on the EPU -> SV parts on
    channels -> (more than one SV part) cross-channel reduction on the EPU. Channels follow
    :func:`_channel_order`; the EPU serves ready tasks in order of readiness (ties: softmax
    before reduction, then pair order). ``run(job)`` gives kernel stats; ``softmax`` /
    ``reduction`` off give that EPU work zero duration (for marginal costs).
    """
    return _schedule(_attention_tasks(plan, cfg, run), softmax, reduction)


# ---------------------------------------------------------------------------- one layer


@dataclass(frozen=True)
class LayerTiming:
    """One layer of one micro-batch on one TP module."""

    cycles: dict[str, int]
    macs: dict[str, int]
    channel_busy: int
    commands: int
    hub_instructions: dict[str, int]
    attention: AttentionSchedule
    softmax_marginal: int
    reduction_marginal: int

    @property
    def total(self) -> int:
        """Cycles of the whole layer."""
        return sum(self.cycles.values())


def _once(run: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``run`` called at most once per job object of a layer plan (equal jobs on different
    channels are different objects, so with memoisation off each is still simulated)."""
    done: dict[int, tuple[Any, Any]] = {}

    def once(job: Any) -> Any:
        if id(job) not in done:
            done[id(job)] = (job, run(job))  # keep the job alive so its id stays unique
        return done[id(job)][1]

    return once


def _gemv_op(jobs: list[list[Any]], run: Callable[[Any], Any]) -> tuple[int, int, int, int, int]:
    """(cycles, MACs, busy channel-cycles, commands, HUB instructions) of one GEMV op."""
    per_channel = np.zeros(len(jobs), dtype=np.int64)
    macs = commands = 0
    for c, channel_jobs in enumerate(jobs):
        for j in channel_jobs:
            st = run(j)
            per_channel[c] += st.cycles
            macs += st.macs
            commands += st.commands
    return int(per_channel.max()), macs, int(per_channel.sum()), commands, _hub_count(jobs, run)


def _hub_count(jobs: list[list[Any]], run: Callable[[Any], Any]) -> int:
    """HUB instructions of per-channel job lists (``compiler.hub.encode_kernels``'s count)."""
    total = 0
    for k in range(max((len(j) for j in jobs), default=0)):
        seen = set()
        for channel_jobs in jobs:
            if k < len(channel_jobs):
                j = channel_jobs[k]
                key = job_key(j)
                if key not in seen:
                    seen.add(key)
                    total += run(j).hub_instructions
    return total


def _allreduce_cycles(cfg: HardwareConfig, nbytes: int, tp: int) -> int:
    """Partial sums up to the host and the sum back down, per all-reduce."""
    if tp == 1:
        return 0
    cycles = 2 * link_cycles(cfg, nbytes, "host")
    if tp > cfg.module.modules_per_node:
        cycles += 2 * link_cycles(cfg, nbytes, "internode")
    return cycles


def _layer(setup: DecodeSetup, lengths: tuple[int, ...], cache: KernelCache) -> LayerTiming:
    spec, cfg = setup.model, setup.hw
    plan = layer_plan(spec, cfg, lengths, setup.tp, setup.partition)
    run = _once(cache.run)
    cycles: dict[str, int] = dict.fromkeys(OP_KEYS, 0)
    macs: dict[str, int] = dict.fromkeys(OP_KEYS, 0)
    hub: dict[str, int] = {}
    busy = commands = 0
    for op in GEMV_OPS:
        c, m, b, n, h = _gemv_op(plan.gemv[op], run)
        cycles[op], macs[op], hub[op] = c, m, h
        busy += b
        commands += n
    tasks = _attention_tasks(plan, cfg, run)
    att = _schedule(tasks, softmax=True, reduction=True)
    # Attention time split: the busiest channel's QK/SV share, the rest is exposed EPU time.
    peak = int(att.channel_busy.max()) if att.channel_busy.size else 0
    pim = att.qk_busy + att.sv_busy
    cycles["qk"] = round(peak * att.qk_busy / pim) if pim else 0
    cycles["sv"] = peak - cycles["qk"]
    cycles["softmax"] = att.cycles - peak
    # DPA: the dispatcher decodes the first attention program's words before its first
    # command; later programs are decoded while the previous kernel runs.
    cycles["qk"] += max((run(j).dpa_startup for jobs in plan.qk for j in jobs[:1]), default=0)
    for kind, jobs in (("qk", plan.qk), ("sv", plan.sv)):
        for channel_jobs in jobs:
            for j in channel_jobs:
                st = run(j)
                macs[kind] += st.macs
                commands += st.commands
        hub[kind] = _hub_count(jobs, run)
    busy += int(att.channel_busy.sum())
    b = len(lengths)
    per_request = (
        2 * NORM_FLOPS_PER_ELEMENT * spec.hidden
        + 2 * RESIDUAL_FLOPS_PER_ELEMENT * spec.hidden
        + (SWIGLU_FLOPS_PER_ELEMENT if spec.ffn == "swiglu" else RELU_FLOPS_PER_ELEMENT)
        * spec.intermediate
        // setup.tp
    )
    cycles["epu_other"] = epu_cycles(cfg, b * per_request)
    vector = b * spec.hidden * spec.element_bytes
    cycles["allreduce"] = 2 * _allreduce_cycles(cfg, vector, setup.tp)
    if setup.memory == "static":
        sent = (hub["qk"] + hub["sv"]) * hub_instruction_bytes(cfg)
        cycles["cmd_transfer"] = link_cycles(cfg, sent, "host")
    no_red = _makespan(tasks, tasks.softmax_cost, [0] * len(tasks.sv_parts))
    no_sm = _makespan(tasks, [0] * len(tasks.sv_parts), tasks.reduction_cost)
    return LayerTiming(
        cycles=cycles,
        macs=macs,
        channel_busy=busy,
        commands=commands,
        hub_instructions=hub,
        attention=att,
        softmax_marginal=att.cycles - no_sm,
        reduction_marginal=att.cycles - no_red,
    )


# ---------------------------------------------------------------------------- memory


def _allocator(
    model: ModelSpec, hw: HardwareConfig, modules: int, memory: str, max_context: int
) -> Any:
    """An empty KV allocator of ``memory`` policy over ``modules`` modules (weights placed),
    or ``None`` when the weights alone exceed the modules."""
    geom = ChunkGeometry.from_config(hw, modules)
    if model.weight_bytes > geom.total_bytes:
        return None
    # A static reservation is max_context; lazy growth is bounded by the model's window.
    limit = max_context if memory == "static" else model.context_window
    return make_allocator(
        memory, geom, model.kv_bytes_per_token, weight_bytes=model.weight_bytes, max_context=limit
    )


def _where(model: ModelSpec, hw: HardwareConfig, modules: int) -> str:
    total = ChunkGeometry.from_config(hw, modules).total_bytes
    return (
        f"{modules} module(s) = {total / 2**30:g} GiB of {hw.name} with {model.name} weights "
        f"{model.weight_bytes / 2**30:.1f} GiB"
    )


def _admit(setup: DecodeSetup) -> dict[str, Any]:
    spec, cfg = setup.model, setup.hw
    alloc = _allocator(spec, cfg, setup.modules, setup.memory, setup.reservation)
    where = _where(spec, cfg, setup.modules)
    if alloc is None:
        if setup.check_capacity:
            raise DecodeError(f"the weights alone do not fit: {where}; use more modules")
        return {"policy": setup.memory, "fits": False, "capacity_utilization": None}
    fits = True
    try:
        for r, t in enumerate(setup.lengths):
            alloc.admit(r, t)
    except (OutOfMemory, ValueError) as exc:
        if setup.check_capacity:
            raise DecodeError(
                f"{exc}. The batch of {len(setup.lengths)} request(s) does not fit {where} "
                f"under {setup.memory} allocation; use more modules, a smaller batch"
                + (", or lazy (DPA) memory" if setup.memory == "static" else "")
            ) from None
        fits = False
    st = alloc.stats()
    entries = sum(math.ceil(len(alloc.va2pa(r)) / setup.modules) for r in alloc.requests)
    return {
        "policy": setup.memory,
        "fits": fits,
        "total_bytes": st.total_bytes,
        "weight_bytes": st.weight_bytes,
        "kv_capacity_bytes": st.capacity_bytes,
        "kv_used_bytes": st.used_bytes,
        "kv_reserved_bytes": st.reserved_bytes,
        "capacity_utilization": st.capacity_utilization if fits else None,
        "total_utilization": st.total_utilization,
        "va2pa_entries_per_module": entries,
    }


def fill_batch(
    model: ModelSpec,
    hw: HardwareConfig,
    modules: int,
    memory: str,
    candidates: Sequence[int],
    max_context: int | None = None,
) -> tuple[int, ...]:
    """The longest prefix of ``candidates`` (context lengths, FCFS) that fits the memory."""
    if memory not in MEMORY_POLICIES:
        raise DecodeError(f"memory {memory!r} is unknown; allowed: {', '.join(MEMORY_POLICIES)}")
    alloc = _allocator(model, hw, modules, memory, max_context or model.context_window)
    where = _where(model, hw, modules)
    if alloc is None:
        raise DecodeError(f"not even one request fits: the weights alone exceed {where}")
    taken: list[int] = []
    for r, t in enumerate(candidates):
        try:
            if not alloc.admit(r, int(t), raise_on_oom=False):
                break
        except (OutOfMemory, ValueError) as exc:
            raise DecodeError(f"request {r} (context {t}): {exc}") from None
        taken.append(int(t))
    if not taken:
        raise DecodeError(
            f"not even one request fits: {where} ({memory} allocation); use more modules"
        )
    if len(taken) == len(candidates):
        raise DecodeError(
            f"all {len(taken)} candidate requests fit: the batch is not capacity-bound; "
            "give more requests (or a fixed --batch)"
        )
    return tuple(taken)


def _dpa_report(setup: DecodeSetup, cache: KernelCache, memory: dict[str, Any]) -> dict[str, Any]:
    if setup.memory != "lazy":
        return {"enabled": False}
    cfg, spec = setup.hw, setup.model
    programs = [cache.program(k, spec.head_dim, spec.gqa_group) for k in ("qk", "sv")]
    program_bytes = sum(p.nbytes for p in programs if p is not None)
    map_bytes = memory.get("va2pa_entries_per_module", 0) * va2pa_entry_bytes(cfg.channel)
    config_bytes = len(setup.lengths) * CONFIG_ENTRY_BYTES
    for what, used, cap in (
        ("command buffer (DPA programs)", program_bytes, cfg.module.dpa_command_buffer_bytes),
        ("VA2PA table", map_bytes, cfg.module.dpa_address_map_bytes),
    ):
        if used > cap and setup.check_capacity:
            raise DecodeError(
                f"the DPA dispatcher's {what} needs {used:,} B per module but holds {cap:,} B "
                f"({cfg.name}); use more modules or a smaller batch"
            )
    return {
        "enabled": True,
        "program_bytes": program_bytes,
        "va2pa_bytes_per_module": map_bytes,
        "config_bytes": config_bytes,
        "refused": {f"{k[0]} d_h={k[1]} G={k[2]}": v for k, v in cache.dpa_refused.items()},
    }


# ---------------------------------------------------------------------------- the step


def run_decode(
    setup: DecodeSetup,
    memoize: bool = True,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Simulate one decode step of ``setup``; the report as a JSON-ready dict."""
    started = time.perf_counter()
    cfg, spec = setup.hw, setup.model
    say = progress or (lambda _m: None)
    memory = _admit(setup)
    cache = KernelCache(
        cfg, setup.sched, memoize, dpa=setup.memory == "lazy", dpa_max_tokens=max(setup.lengths)
    )
    m = setup.micro_batches or min(setup.pp, len(setup.lengths))
    batches = micro_batches(setup.lengths, m)
    layers = stage_layers(spec.layers, setup.pp)
    n_ch = cfg.module.channels
    layer_memo: dict[tuple[int, ...], LayerTiming] = {}

    def layer_of(lengths: tuple[int, ...]) -> LayerTiming:
        if memoize and lengths in layer_memo:
            return layer_memo[lengths]
        timing = _layer(setup, lengths, cache)
        if memoize:
            layer_memo[lengths] = timing
        return timing

    vector_bytes = [len(mb) * spec.hidden * spec.element_bytes for mb in batches]
    stage_time = np.zeros((len(batches), setup.pp), dtype=np.int64)
    link_time = np.zeros((len(batches), setup.pp), dtype=np.int64)
    op_cycles = dict.fromkeys(OP_KEYS, 0)
    op_macs = dict.fromkeys(OP_KEYS, 0)
    hub_total = dict.fromkeys((*GEMV_OPS, "qk", "sv"), 0)
    busy = commands = 0
    sm_marg = red_marg = attn_cycles = red_busy = 0
    per_node = cfg.module.modules_per_node
    for i, mb in enumerate(batches):
        say(f"micro-batch {i + 1}/{len(batches)}: {len(mb)} request(s)")
        for s, n_layers in enumerate(layers):
            # Every layer of a stage and every TP module of it is identical: with memoisation
            # one layer of one module stands for all; without, each is simulated on its own.
            if memoize:
                modules, weight = [[(layer_of(mb), n_layers)]], setup.tp
            else:
                modules = [[(layer_of(mb), 1) for _ in range(n_layers)] for _ in range(setup.tp)]
                weight = 1
            totals = [sum(lt.total * n for lt, n in mod) for mod in modules]
            slowest = modules[int(np.argmax(totals))]
            for lt, n in slowest:
                for k in OP_KEYS:
                    op_cycles[k] += n * lt.cycles[k]
                sm_marg += n * lt.softmax_marginal
                red_marg += n * lt.reduction_marginal
                attn_cycles += n * lt.attention.cycles
                red_busy += n * lt.attention.reduction_busy
            for mod in modules:
                for lt, n in mod:
                    for k in OP_KEYS:
                        op_macs[k] += weight * n * lt.macs[k]
                    for k in hub_total:
                        hub_total[k] += weight * n * lt.hub_instructions[k]
                    busy += weight * n * lt.channel_busy
                    commands += weight * n * lt.commands
            stage_cycles = max(totals)
            stage_time[i, s] = stage_cycles
            first_here, first_next = s * setup.tp, (s + 1) * setup.tp
            crosses = s + 1 == setup.pp or first_here // per_node != first_next // per_node
            hop = 2 * link_cycles(cfg, vector_bytes[i], "host")
            if crosses and s + 1 < setup.pp:
                hop += link_cycles(cfg, vector_bytes[i], "internode")
            link_time[i, s] = hop
    busiest_stage = int(stage_time.sum(axis=0).max())
    round_trip = int((stage_time + link_time).sum(axis=1).max())
    period = max(busiest_stage, round_trip)
    seconds = period / (cfg.module.freq_ghz * 1e9)
    total_channels = n_ch * setup.modules
    all_macs = sum(op_macs.values())
    stage_busy = int(stage_time.sum())
    attn = sum(op_cycles[k] for k in _ATTN)
    fc = sum(op_cycles[k] for k in GEMV_OPS)
    ops = {
        k: {
            "cycles": int(op_cycles[k]),
            "share": op_cycles[k] / stage_busy if stage_busy else 0.0,
            "mac_utilization": (
                op_macs[k] * cfg.timing.tCCD / (op_cycles[k] * n_ch * setup.tp)
                if op_cycles[k] and op_macs[k]
                else 0.0
            ),
        }
        for k in OP_KEYS
    }
    hub_bytes = hub_instruction_bytes(cfg)
    report: dict[str, Any] = {
        "model": spec.name,
        "preset": cfg.name,
        "batch": len(setup.lengths),
        "context_lengths": {
            "min": min(setup.lengths),
            "mean": float(np.mean(setup.lengths)),
            "max": max(setup.lengths),
        },
        "modules": setup.modules,
        "tp": setup.tp,
        "pp": setup.pp,
        "micro_batches": len(batches),
        "partition": setup.partition,
        "sched": setup.sched,
        "memory": setup.memory,
        "cycles": period,
        "step_seconds": seconds,
        "tokens_per_s": len(setup.lengths) / seconds,
        "mac_utilization": all_macs * cfg.timing.tCCD / (period * total_channels),
        "channel_utilization": busy / (period * total_channels),
        "capacity_utilization": memory["capacity_utilization"],
        "attention_share": attn / stage_busy if stage_busy else 0.0,
        "fc_share": fc / stage_busy if stage_busy else 0.0,
        "other_share": (stage_busy - attn - fc) / stage_busy if stage_busy else 0.0,
        "ops": ops,
        "epu": {
            "softmax_marginal_cycles": int(sm_marg),
            "sv_reduction_busy_cycles": int(red_busy),
            "sv_reduction_marginal_cycles": int(red_marg),
            "sv_reduction_share_of_attention": red_marg / attn_cycles if attn_cycles else 0.0,
        },
        "pipeline": {
            "stage_layers": layers,
            "stage_busy_cycles": [int(x) for x in stage_time.sum(axis=0)],
            "busiest_stage_cycles": busiest_stage,
            "round_trip_cycles": round_trip,
            "link_cycles": int(link_time.sum()),
            "bubble_fraction": 1 - stage_busy / (setup.pp * period) if period else 0.0,
        },
        "hub": {
            "instructions": {k: int(v) for k, v in hub_total.items()},
            "instruction_bytes": hub_bytes,
            "total_bytes": int(sum(hub_total.values()) * hub_bytes),
        },
        "memory_detail": memory,
        "dpa": _dpa_report(setup, cache, memory),
        "simulation": {
            "channel_commands": int(commands),
            "kernels_simulated": cache.simulated,
            "memoize": memoize,
            "wall_seconds": time.perf_counter() - started,
        },
    }
    return report
