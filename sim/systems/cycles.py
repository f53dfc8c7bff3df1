"""The cycles of decode steps, fast: the one cycle path of the PIM decode step.

:class:`StepCycles` times a step (the partition each micro-batch's layers use, stage and
link cycles, the pipeline period, every micro-batch count tried) from the plans, channel
kernels and attention task graph; :func:`sim.systems.step.run_decode` takes its cycles from
it and adds only the report (the breakdown by op, utilisation, energy, MACs and activity,
HUB counts, admission), checking that its breakdown sums to these cycles. A serving run
times tens of thousands of decode steps and reads only each step's cycles
(``docs/serving.md``). Also here, the pieces both share: :func:`plan_tasks`,
:func:`gemv_op`, :func:`hub_count`, :func:`epu_other_flops`, :func:`decode_errors`.

What makes it fast, exactly:

- One layer of one micro-batch takes the weight GEMVs, the EPU's other vector work and the
  all-reduces, all functions of the micro-batch size ``b`` alone (``compiler.plan`` gives
  every channel the same batched GEMV jobs for any ``b`` requests), memoised on ``b``; plus
  the attention makespan, its DPA start-up and, with static memory, the command transfer.
- The attention task graph is a concatenation of per-request *blocks*: a request's units
  (every KV head's score tiles, ``compiler.plan.attention_units``) and their part cycles on
  every channel, their EPU costs and their kernels. A block depends on the request's tokens
  and on its first pair number only as :data:`PAIR_KEY` says, so it is built once per key
  (kept in the kernel cache, :attr:`KernelCache.blocks`) and a step costs one look-up per
  request instead of one per channel job.
- The makespan over the blocks runs compiled (:func:`models.module.makespan_arrays`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pimphony.compiler.hub import instruction_count, multicast_first
from pimphony.compiler.kernels import CompileError
from pimphony.compiler.llm import GEMV_OPS, ModelSpec
from pimphony.compiler.plan import (
    PARTITIONS,
    AttentionUnit,
    ChannelJob,
    LayerPlan,
    Partition,
    PartitionError,
    attention_units,
    candidates,
    layer_plan,
    micro_batches,
    stage_layers,
)
from pimphony.models.config import HardwareConfig
from pimphony.models.hub import (
    NORM_FLOPS_PER_ELEMENT,
    RESIDUAL_FLOPS_PER_ELEMENT,
    epu_cycles,
    hub_instruction_bytes,
    link_cycles,
)
from pimphony.models.jit import njit
from pimphony.models.memory import MemoryPolicy
from pimphony.models.module import AttentionTasks, attention_tasks, makespan_arrays, task_arrays
from pimphony.models.system import (
    PipelinePeriod,
    allreduce_cycles,
    pipeline_period,
    stage_hop_cycles,
)
from pimphony.models.xpu import VECTOR_OPS
from pimphony.sim.systems.kernels import KernelCache, KernelCaches, KernelStats, job_key
from pimphony.sim.systems.setup import (
    MICRO_BATCHES_AUTO,
    DecodeError,
    DecodeSetup,
    Mapping,
    micro_batch_candidates,
)

__all__ = [
    "PAIR_KEY",
    "AttentionBlock",
    "StepCycles",
    "StepTiming",
    "attention_makespan",
    "channel_bound_makespan",
    "decode_cycles",
    "decode_errors",
    "epu_other_flops",
    "gemv_op",
    "hub_count",
    "plan_tasks",
]


def plan_tasks(plan: LayerPlan, cfg: HardwareConfig, run: Callable[[Any], Any]) -> AttentionTasks:
    """The attention task graph of ``plan``, its part cycles from ``run(job)``: one task set
    per attention unit (a (request, KV head) pair, or one GPR score tile of it)."""
    channels = len(plan.qk)
    units = sorted({(j.request, j.kv_head, j.tile) for jobs in (*plan.qk, *plan.sv) for j in jobs})
    index = {u: k for k, u in enumerate(units)}
    qk_of: list[dict[int, int]] = [{} for _ in range(channels)]
    sv_of: list[dict[int, int]] = [{} for _ in range(channels)]
    for c in range(channels):
        for j in plan.qk[c]:
            qk_of[c][index[(j.request, j.kv_head, j.tile)]] = run(j).cycles
        for j in plan.sv[c]:
            sv_of[c][index[(j.request, j.kv_head, j.tile)]] = run(j).cycles
    tokens = {(u.request, u.kv_head, u.tile): u.tokens for u in plan.units}
    unit_tokens = [tokens.get(u, plan.lengths[u[0]]) for u in units]
    return attention_tasks(
        cfg,
        qk_of,
        sv_of,
        unit_tokens,
        plan.gqa_group,
        plan.head_dim,
        tiles=[u[2] for u in units],
        sv_reduction=plan.sv_reduction,
    )


def epu_other_flops(spec: ModelSpec, tp: int) -> int:
    """EPU flops of one token's non-attention vector work on one TP module of one layer: two
    RMSNorms, two residual adds and the activation over its ``intermediate / tp`` share."""
    return (
        2 * NORM_FLOPS_PER_ELEMENT * spec.hidden
        + 2 * RESIDUAL_FLOPS_PER_ELEMENT * spec.hidden
        + VECTOR_OPS[spec.activation].flops_per_element * spec.intermediate // tp
    )


def gemv_op(jobs: list[list[Any]], run: Callable[[Any], Any]) -> tuple[int, int, int, int, int]:
    """(cycles, MACs, busy channel-cycles, commands, HUB instructions) of one GEMV op."""
    per_channel = np.zeros(len(jobs), dtype=np.int64)
    macs = commands = 0
    for c, channel_jobs in enumerate(jobs):
        for j in channel_jobs:
            st = run(j)
            per_channel[c] += st.cycles
            macs += st.macs
            commands += st.commands
    return int(per_channel.max()), macs, int(per_channel.sum()), commands, hub_count(jobs, run)


def hub_count(jobs: list[list[Any]], run: Callable[[Any], Any]) -> int:
    """HUB instructions of per-channel job lists (:func:`compiler.hub.instruction_count`)."""
    keys = [[job_key(j) for j in channel_jobs] for channel_jobs in jobs]
    first: dict[tuple, Any] = {}
    for channel_jobs, channel_keys in zip(jobs, keys, strict=True):
        for j, key in zip(channel_jobs, channel_keys, strict=True):
            first.setdefault(key, j)
    return instruction_count(keys, lambda key: run(first[key]).hub_instructions)


def tuned_module() -> Any:
    """``sim.systems.tuned``, imported when a step is tuned (it loads the DCC compiler)."""
    from pimphony.sim.systems import tuned

    return tuned


@contextlib.contextmanager
def decode_errors() -> Iterator[None]:
    """Turn a kernel or partition that cannot be mapped into a :class:`DecodeError` that says
    which choice would help."""
    try:
        yield
    except CompileError as exc:
        hint = (
            "use more --tp (fewer KV heads per module), shorter contexts, another --partition, "
            "or a preset with a larger module (gpr_bytes, rows_per_bank)"
        )
        raise DecodeError(f"{exc}. {hint}") from None
    except PartitionError as exc:
        raise DecodeError(str(exc)) from None


def _exact_pair(first_pair: int, channels: int) -> int:
    return first_pair


#: What a request's attention jobs depend on besides its tokens, per partition: a function
#: of its first (request, KV head) pair number and the channels. ``compiler.plan``: TCP
#: splits every tile's tokens over all channels whatever its pair (``_tcp``); HFP deals pair
#: ``p`` to channel ``p % channels`` (``_hfp``); ITPP splits K as TCP and deals pair ``p``'s
#: V output groups to channels ``(p * groups + k) % channels`` (``_itpp``). A partition not
#: listed keys blocks by the pair itself (always exact, fewer reuses).
PAIR_KEY: dict[Partition, Callable[[int, int], int]] = {
    Partition.TCP: lambda first_pair, channels: 0,
    Partition.HFP: lambda first_pair, channels: first_pair % channels,
    Partition.ITPP: lambda first_pair, channels: first_pair % channels,
}


@dataclass(frozen=True)
class AttentionBlock:
    """One request's attention units on one module under one partition, one row per unit
    (its KV heads' score tiles, in plan order), as :func:`models.module.task_arrays` gives
    them, plus what the step adds: ``startup[u, c]``, the DPA start-up of unit ``u``'s QK^T
    kernel on channel ``c``, and, for HUB instruction counts (static memory), ``qk_kernel``
    / ``sv_kernel`` (a kernel's ``(tokens, d_h)`` as one int, -1: no part) and ``qk_hub`` /
    ``sv_hub``, the HUB instructions of that kernel."""

    qk: np.ndarray
    sv: np.ndarray
    softmax: np.ndarray
    post: np.ndarray
    after_sv: np.ndarray
    startup: np.ndarray
    qk_kernel: np.ndarray
    sv_kernel: np.ndarray
    qk_hub: np.ndarray
    sv_hub: np.ndarray


_MATRICES = ("qk", "sv", "startup", "qk_kernel", "sv_kernel", "qk_hub", "sv_hub")
_VECTORS = ("softmax", "post", "after_sv")


def _pack(block: AttentionBlock) -> np.ndarray:
    """``block`` as one int64 array, a row per unit (the unit memo keeps rows packed)."""
    return np.hstack(
        [getattr(block, f) for f in _MATRICES] + [getattr(block, f)[:, None] for f in _VECTORS]
    )


def _unpack(packed: np.ndarray, channels: int) -> AttentionBlock:
    """The :class:`AttentionBlock` (views) of a packed block of ``channels`` channels."""
    fields = {f: packed[:, k * channels : (k + 1) * channels] for k, f in enumerate(_MATRICES)}
    base = len(_MATRICES) * channels
    fields.update({f: packed[:, base + k] for k, f in enumerate(_VECTORS)})
    return AttentionBlock(**fields)


def _joined(packed: Sequence[np.ndarray]) -> np.ndarray:
    """Packed rows as one array (rows in order)."""
    return packed[0] if len(packed) == 1 else np.concatenate(packed)


def attention_makespan(tasks: np.ndarray, channels: int) -> int:
    """:func:`models.module.makespan_arrays` of packed task rows (``qk``, ``sv`` per channel,
    then ``softmax``, ``post``, ``after_sv``): :func:`channel_bound_makespan` where it
    applies, else the event simulation."""
    fast = channel_bound_makespan(tasks, channels)
    if fast is not None:
        return fast
    return makespan_arrays(
        tasks[:, :channels],
        tasks[:, channels : 2 * channels],
        tasks[:, 2 * channels],
        tasks[:, 2 * channels + 1],
        tasks[:, 2 * channels + 2],
    )


def channel_bound_makespan(tasks: np.ndarray, channels: int) -> int | None:
    """The makespan of packed task rows when no channel waits but for the last unit's
    softmax, else ``None``.

    Every unit with a QK^T and an SV part on every channel gives each channel the one order
    QK(0), QK(1), SV(0), QK(2), SV(1), ..., SV(n-1); while no SV part waits for its softmax,
    a channel's task ends are the prefix sums of that order, each EPU task is ready when its
    unit's last part ends, and the EPU, with every ready time distinct, serves its tasks in
    the order they become ready (:func:`models.module.makespan` pops the earliest). The
    last unit's SV parts start when their channel is free and its softmax done; every other
    unit's softmax end is checked against its SV starts (at the same cycle is no wait: the
    event simulation unblocks the channel at once). A wait, a missing part or two EPU tasks
    ready at one cycle (the simulation's event order would decide) give ``None``. Exact
    where it answers (``tests/test_cycles.py`` checks it against the simulation)."""
    end = _channel_bound_kernel(np.ascontiguousarray(tasks, dtype=np.int64), channels)
    return None if end < 0 else int(end)


@njit(cache=True)
def _channel_bound_kernel(tasks: np.ndarray, channels: int) -> int:  # noqa: C901, PLR0912
    """:func:`channel_bound_makespan` compiled; -1 for ``None``."""
    n = tasks.shape[0]
    for p in range(n):
        for c in range(2 * channels):
            if tasks[p, c] < 0:
                return -1
    qk_ready = np.zeros(n, dtype=np.int64)  # the last QK^T part of each unit ends
    sv_ready = np.zeros(n, dtype=np.int64)  # the last SV part ends
    sv_first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)  # the first SV starts
    last_start = np.zeros(channels, dtype=np.int64)  # each channel's SV(n-1) starts
    for c in range(channels):
        t = tasks[0, c]
        qk_ready[0] = max(qk_ready[0], t)
        for k in range(n):
            if k + 1 < n:
                t += tasks[k + 1, c]
                qk_ready[k + 1] = max(qk_ready[k + 1], t)
            sv_first[k] = min(sv_first[k], t)
            if k == n - 1:
                last_start[c] = t
            t += tasks[k, channels + c]
            sv_ready[k] = max(sv_ready[k], t)
    softmax_done = _epu_pass(tasks, channels, qk_ready, sv_ready)
    if softmax_done[0] < 0:
        return -1
    # The last unit's SV parts wait for its softmax (nothing follows them on a channel);
    # its reduction is then ready later, which may reorder the EPU's later tasks.
    waited = False
    end = 0
    for c in range(channels):
        start = max(last_start[c], softmax_done[n - 1])
        waited = waited or start > last_start[c]
        end = max(end, start + tasks[n - 1, channels + c])
    if waited:
        sv_ready[n - 1] = end
        softmax_done = _epu_pass(tasks, channels, qk_ready, sv_ready)
        if softmax_done[0] < 0:
            return -1
    for p in range(n - 1):
        if softmax_done[p] > sv_first[p]:
            return -1
    return max(end, softmax_done[n])


@njit(cache=True)
def _epu_pass(
    tasks: np.ndarray, channels: int, qk_ready: np.ndarray, sv_ready: np.ndarray
) -> np.ndarray:
    """The EPU's tasks served in order of readiness (``e_i = max(e_(i-1), r_i) + c_i``):
    each unit's softmax end, then (entry ``n``) the EPU's last end; entry 0 is -1 if two
    tasks are ready at one cycle."""
    n = tasks.shape[0]
    count = n
    for p in range(n):
        if tasks[p, 2 * channels + 2] != 0:
            count += 1
    ready = np.empty(count, dtype=np.int64)
    cost = np.empty(count, dtype=np.int64)
    ready[:n] = qk_ready
    cost[:n] = tasks[:, 2 * channels]
    k = n
    for p in range(n):
        if tasks[p, 2 * channels + 2] != 0:
            ready[k], cost[k] = sv_ready[p], tasks[p, 2 * channels + 1]
            k += 1
    order = np.argsort(ready)
    out = np.empty(n + 1, dtype=np.int64)
    e = 0
    for i in range(count):
        j = order[i]
        if i and ready[j] == ready[order[i - 1]]:
            out[0] = -1
            return out
        e = max(e, ready[j]) + cost[j]
        if j < n:
            out[j] = e
    out[n] = e
    return out


@dataclass(frozen=True)
class _RequestBlock:
    """What a step reads of a request's block: ``tasks``, the rows the makespan reads
    (``qk``, ``sv``, ``softmax``, ``post``, ``after_sv``, packed); ``hub``, the rows of the
    HUB count (``qk_kernel``, ``sv_kernel``, ``qk_hub``, ``sv_hub``, packed; kept only for
    static memory, the only policy whose step sends HUB instructions); per channel,
    whether the request has a QK^T part there (``has_qk``) and the DPA start-up of its
    first one (``first_startup``); ``uniform_startup``, that start-up if it is the same on
    every channel with a part (``None`` if not, or without parts)."""

    tasks: np.ndarray
    hub: np.ndarray | None
    has_qk: np.ndarray
    first_startup: np.ndarray
    uniform_startup: int | None

    @classmethod
    def of(cls, block: AttentionBlock, hub: bool = True) -> _RequestBlock:
        present = block.qk >= 0
        first = present.argmax(axis=0)
        columns = np.arange(present.shape[1])
        has = present[first, columns] if present.shape[0] else np.zeros(len(columns), bool)
        startup = np.where(has, block.startup[first, columns] if present.shape[0] else 0, 0)
        values = set(startup[has].tolist())
        return cls(
            np.hstack([block.qk, block.sv] + [getattr(block, f)[:, None] for f in _VECTORS]),
            np.hstack([block.qk_kernel, block.sv_kernel, block.qk_hub, block.sv_hub])
            if hub
            else None,
            has,
            startup,
            values.pop() if len(values) == 1 else None,
        )


def _first_startup(blocks: Sequence[_RequestBlock]) -> int:
    """The largest DPA start-up of each channel's first QK^T job (blocks in plan order)."""
    # When every block's first start-ups are one value, every channel's first job has it.
    uniform = {b.uniform_startup for b in blocks}
    if len(uniform) == 1 and None not in uniform:
        return uniform.pop()
    covered = np.zeros(blocks[0].has_qk.shape, dtype=bool)
    most = 0
    for b in blocks:
        new = b.has_qk & ~covered
        if new.any():
            most = max(most, int(b.first_startup[new].max()))
            covered |= new
            if covered.all():
                break
    return most


def _hub_instructions(kernel: np.ndarray, hub: np.ndarray) -> int:
    """:func:`compiler.hub.instruction_count` of per-channel kernel lists given as columns
    (``kernel[u, c]``: the kernel of unit ``u`` on channel ``c``, -1: none; ``hub[u, c]``
    its HUB instructions): :func:`compiler.hub.multicast_first`'s entries summed."""
    return int(hub[multicast_first(kernel)].sum())


@dataclass(frozen=True)
class StepTiming:
    """A decode step's cycles with one micro-batch count: ``batches`` (the micro-batches'
    context lengths), per micro-batch the ``partitions`` its layers use and ``layer_cycles``
    (one layer on one TP module), ``stage`` and ``link`` (cycles ``[micro-batch, stage]``,
    :func:`models.system.pipeline_period`'s inputs) and the ``pipeline`` period."""

    batches: tuple[tuple[int, ...], ...]
    partitions: tuple[Partition, ...]
    layer_cycles: tuple[int, ...]
    stage: np.ndarray
    link: np.ndarray
    pipeline: PipelinePeriod

    @property
    def cycles(self) -> int:
        """The step's cycles (the pipeline period)."""
        return self.pipeline.cycles


class StepCycles:
    """Decode-step cycles of one configuration for any batch: the cycle path of
    :func:`sim.systems.step.run_decode` (``run_decode(dataclasses.replace(setup,
    lengths=lengths)).cycles``), which adds only its report.

    ``setup`` gives everything but the batch (its ``lengths`` are not used); ``caches``
    shares kernels (and blocks) with other steps, as ``run_decode``'s. The batch is not
    re-admitted (``setup.check_capacity`` is not applied): the caller's allocator holds it.
    """

    def __init__(self, setup: DecodeSetup, caches: KernelCaches | None = None):
        self.setup = setup
        self.caches = caches or KernelCaches()
        spec, cfg = setup.model, setup.hw
        self._layers = stage_layers(spec.layers, setup.pp)
        self._limit = setup.reservation if setup.memory == MemoryPolicy.STATIC else None
        self._kv_heads = spec.kv_heads // setup.tp
        # What blocks depend on besides the cache's hardware, scheduler and memory (a cache
        # may be shared by steps of other models and TP splits): the module's heads.
        self._heads = (self._kv_heads, spec.head_dim, spec.gqa_group)
        # A request block's key after its scheme, tokens and pair key (also the overflow).
        self._key_tail = (*self._heads, setup.score_overflow)
        self._candidates = candidates(setup.partition)
        self._static = setup.memory == MemoryPolicy.STATIC
        self._hub_bytes = hub_instruction_bytes(cfg)
        self._token_bytes = spec.hidden * spec.element_bytes
        self._cache_of: dict[int, KernelCache] = {}  # keeps each cache (and its id) alive
        self._known: dict[tuple[int, Partition], dict[tuple[int, int], _RequestBlock]] = {}
        self._fixed: dict[int, int] = {}
        self._hops: dict[int, list[int]] = {}

    def cycles(self, lengths: Sequence[int]) -> int:
        """Cycles of one decode step of the batch ``lengths`` (context tokens per request)."""
        return min(t.cycles for t in self.timings(lengths))

    def timings(self, lengths: Sequence[int]) -> tuple[StepTiming, ...]:
        """The step of the batch ``lengths`` with each micro-batch count it tries: the
        setup's (default ``min(pp, batch)``), or with ``"auto"`` every count of
        :func:`sim.systems.setup.micro_batch_candidates`, in that order."""
        lengths = tuple(lengths)
        self.check(lengths)
        setup = self.setup
        cache = self.kernel_cache(max(lengths))
        if setup.micro_batches == MICRO_BATCHES_AUTO:
            counts = micro_batch_candidates(setup.pp, len(lengths))
        else:
            counts = [setup.micro_batches or min(setup.pp, len(lengths))]
        layer_memo: dict[tuple[int, ...], tuple[int, Partition]] = {}
        with decode_errors():
            return tuple(self._timing(cache, lengths, m, layer_memo) for m in counts)

    def check(self, lengths: tuple[int, ...]) -> None:
        """:class:`DecodeError` unless ``lengths`` is a batch of positive lengths within the
        model's window (and a static reservation)."""
        if not lengths:
            raise DecodeError("the batch is empty: give at least one context length")
        if min(lengths) < 1:
            raise DecodeError(f"context lengths {lengths}: each must be a positive int")
        window = self.setup.model.context_window
        if max(lengths) > window:
            raise DecodeError(
                f"context length {max(lengths)} exceeds {self.setup.model.name}'s "
                f"context_window {window}"
            )
        if self._limit is not None and max(lengths) > self._limit:
            raise DecodeError(
                f"context length {max(lengths)} exceeds the static reservation max_context = "
                f"{self._limit}"
            )

    def kernel_cache(self, longest: int) -> KernelCache:
        """The kernel cache of a batch whose longest context is ``longest`` (DPA programs
        are encoded for it)."""
        if longest not in self._cache_of:
            one = dataclasses.replace(self.setup, lengths=(longest,))
            self._cache_of[longest] = self.caches.for_setup(one)
        return self._cache_of[longest]

    def _timing(
        self,
        cache: KernelCache,
        lengths: tuple[int, ...],
        m: int,
        layer_memo: dict[tuple[int, ...], tuple[int, Partition]],
    ) -> StepTiming:
        """The step with ``m`` micro-batches: each stage runs its layers of each micro-batch
        on its ``tp`` identical modules, then hands the activations on."""
        setup = self.setup
        batches = tuple(micro_batches(lengths, m))
        stage = np.zeros((len(batches), setup.pp), dtype=np.int64)
        link = np.zeros((len(batches), setup.pp), dtype=np.int64)
        for i, mb in enumerate(batches):
            if mb not in layer_memo:
                layer_memo[mb] = self._layer(cache, mb)
            if len(mb) not in self._hops:  # each stage's hand-off of len(mb) vectors
                vector = len(mb) * self._token_bytes
                self._hops[len(mb)] = [
                    stage_hop_cycles(setup.hw, vector, s, setup.pp, setup.tp)
                    for s in range(setup.pp)
                ]
            stage[i] = [n_layers * layer_memo[mb][0] for n_layers in self._layers]
            link[i] = self._hops[len(mb)]
        return StepTiming(
            batches,
            tuple(layer_memo[mb][1] for mb in batches),
            tuple(layer_memo[mb][0] for mb in batches),
            stage,
            link,
            pipeline_period(stage, link),
        )

    def _layer(self, cache: KernelCache, mb: tuple[int, ...]) -> tuple[int, Partition]:
        """One layer of micro-batch ``mb`` on one TP module (``LayerTiming.total``) and its
        partition: with several candidates the fastest (ties: the first)."""
        if len(mb) not in self._fixed:
            self._fixed[len(mb)] = self._fixed_cycles(cache, mb)
        attention, transfer, partition = self.attention(cache, mb)
        return self._fixed[len(mb)] + attention + transfer, partition

    def attention(self, cache: KernelCache, mb: tuple[int, ...]) -> tuple[int, int, Partition]:
        """One layer's attention of micro-batch ``mb`` on one TP module, as
        :func:`sim.systems.step.attention_step` times it: its cycles (``qk + sv + softmax``),
        the command transfer (static memory; else 0) and the partition, with several
        candidates the one of the fewest cycles and transfer (ties: the first)."""
        best: tuple[int, int, Partition] | None = None
        for p in self._candidates:
            cycles, transfer = self._attention(cache, p, mb)
            if best is None or cycles + transfer < best[0] + best[1]:
                best = (cycles, transfer, p)
        assert best is not None
        return best

    def _fixed_cycles(self, cache: KernelCache, mb: tuple[int, ...]) -> int:
        """The weight GEMVs (slowest channel each; tuned: DCC's drafts where faster, with
        their EPU sums), the EPU's other work and the two all-reduces of one layer of a
        micro-batch of ``len(mb)`` requests."""
        setup, b = self.setup, len(mb)
        plan = layer_plan(setup.model, setup.hw, mb, setup.tp, self._candidates[0])
        if setup.mapping == Mapping.TUNED:
            tuning = tuned_module().tune_gemvs(setup.hw, plan, cache.run)
            gemv = sum(
                gemv_op(tuning.jobs[op], cache.run)[0] + tuning.reduce_cycles[op] for op in GEMV_OPS
            )
        else:
            gemv = sum(gemv_op(plan.gemv[op], cache.run)[0] for op in GEMV_OPS)
        other = epu_cycles(setup.hw, b * epu_other_flops(setup.model, setup.tp))
        allreduce = 2 * allreduce_cycles(setup.hw, b * self._token_bytes, setup.tp)
        return gemv + other + allreduce

    def _attention(
        self, cache: KernelCache, scheme: Partition, mb: tuple[int, ...]
    ) -> tuple[int, int]:
        """One layer's attention cycles (``qk + sv + softmax`` of ``LayerTiming``) and, with
        static memory, its command transfer (else 0), under ``scheme``."""
        kvh = self._kv_heads
        channels = self.setup.hw.module.channels
        pair_key = PAIR_KEY.get(scheme, _exact_pair)
        # This configuration's blocks of ``cache`` by (tokens, pair key): the look-up of
        # every request of every step (the cache's keys also name the heads and overflow).
        known = self._known.setdefault((id(cache), scheme), {})
        blocks = []
        for r, t in enumerate(mb):
            key = (t, pair_key(r * kvh, channels))
            block = known.get(key)
            if block is None:
                block = known[key] = self._block(cache, scheme, t, r * kvh)
            blocks.append(block)
        cycles = attention_makespan(_joined([b.tasks for b in blocks]), channels)
        # DPA: the first attention program of each channel is decoded before its first
        # command (the largest of those start-ups is exposed).
        cycles += _first_startup(blocks)
        if not self._static:
            return cycles, 0
        hub = _joined([b.hub for b in blocks])  # static: every block keeps its hub rows
        count = _hub_instructions(hub[:, :channels], hub[:, 2 * channels : 3 * channels])
        count += _hub_instructions(
            hub[:, channels : 2 * channels], hub[:, 3 * channels : 4 * channels]
        )
        return cycles, link_cycles(self.setup.hw, count * self._hub_bytes, "host")

    def _block(
        self, cache: KernelCache, scheme: Partition, tokens: int, first_pair: int
    ) -> _RequestBlock:
        """The block of a request of ``tokens`` tokens whose first pair is ``first_pair``:
        its units as ``compiler.plan.attention_units`` cuts them, one row each."""
        channels = self.setup.hw.module.channels
        pair_key = PAIR_KEY.get(scheme, _exact_pair)
        key = ("request", scheme, tokens, pair_key(first_pair, channels), *self._key_tail)
        block = cache.blocks.get(key)
        if block is None:
            spec, cfg = self.setup.model, self.setup.hw
            units = attention_units(
                cfg, (tokens,), self._kv_heads, spec.head_dim, spec.gqa_group, scheme,
                self.setup.score_overflow,
            )  # fmt: skip
            rows = [self._unit(cache, scheme, u, first_pair + u.pair) for u in units]
            block = _RequestBlock.of(_unpack(_joined(rows), cfg.module.channels), self._static)
            cache.blocks[key] = block
        return block

    def _unit(
        self, cache: KernelCache, scheme: Partition, u: AttentionUnit, pair: int
    ) -> np.ndarray:
        """The (packed) row of unit ``u`` (score tile ``u.tile`` of ``u.tokens`` tokens, or a
        spilled pair) as pair ``pair``: built once per ``(tokens, PAIR_KEY(pair), tile > 0,
        spilled)``, all a unit's jobs and EPU costs depend on (``compiler.plan``'s partitions
        deal each unit on its own; :func:`models.module.attention_tasks` costs a unit from its
        tokens, its SV parts and whether it is a pair's first tile)."""
        channels = self.setup.hw.module.channels
        pair_key = PAIR_KEY.get(scheme, _exact_pair)(pair, channels)
        key = ("unit", scheme, u.tokens, pair_key, u.tile > 0, u.spilled, *self._heads)
        row = cache.blocks.get(key)
        if row is None:
            unit = AttentionUnit(0, u.kv_head, u.tile, u.tokens, pair, u.spilled)
            row = _pack(self._build_unit(cache, scheme, unit))
            cache.blocks[key] = row
        return row

    def _build_unit(
        self, cache: KernelCache, scheme: Partition, unit: AttentionUnit
    ) -> AttentionBlock:
        """One unit's jobs exactly as ``compiler.plan.layer_plan`` makes them, timed by
        :func:`plan_tasks` (zero rows if it has no job)."""
        spec, cfg = self.setup.model, self.setup.hw
        d_h, g = spec.head_dim, spec.gqa_group
        spec_p = PARTITIONS[scheme]
        assert spec_p.jobs is not None
        jobs: dict[str, list[list[ChannelJob]]] = {}
        for kind in ("qk", "sv"):
            jobs[kind] = [[] for _ in range(cfg.module.channels)]
            spec_p.jobs(cfg, kind, (unit,), d_h, g, jobs[kind])
        plan = LayerPlan(
            {}, jobs["qk"], jobs["sv"], self._kv_heads, g, d_h, (unit.tokens,), scheme.value,
            (unit,), spec_p.sv_reduction,
        )  # fmt: skip
        stats: dict[tuple, KernelStats] = {}

        def run(job: ChannelJob) -> KernelStats:  # cache.run by the job's kind and shape
            shape = (job.kind, job.tokens, job.d_h, job.gqa_group, job.spill)
            if shape not in stats:
                stats[shape] = cache.run(job)
            return stats[shape]

        qk, sv, softmax, post, after_sv = task_arrays(plan_tasks(plan, cfg, run))
        extra = {
            name: np.full(qk.shape, -1 if "kernel" in name else 0, dtype=np.int64)
            for name in ("startup", "qk_kernel", "sv_kernel", "qk_hub", "sv_hub")
        }
        for kind in ("qk", "sv"):
            for c, channel_jobs in enumerate(jobs[kind]):
                for j in channel_jobs:
                    # One job per unit and channel (as the partitions make them) is what lets
                    # a row hold a unit's jobs; checked, not assumed.
                    if extra[f"{kind}_kernel"][0, c] >= 0:
                        raise AssertionError(f"two {kind} jobs of one unit on channel {c}")
                    st = run(j)
                    extra[f"{kind}_kernel"][0, c] = j.tokens * (d_h + 1) + j.d_h
                    extra[f"{kind}_hub"][0, c] = st.hub_instructions
                    if kind == "qk":
                        extra["startup"][0, c] = st.dpa_startup
        return AttentionBlock(qk, sv, softmax, post, after_sv, **extra)


def decode_cycles(setup: DecodeSetup, caches: KernelCaches | None = None) -> int:
    """``run_decode(setup).cycles`` without the report (:class:`StepCycles`)."""
    return StepCycles(setup, caches).cycles(setup.lengths)
