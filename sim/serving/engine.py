"""The serving loop: continuous batching of requests over time on one system.

Every iteration (``docs/serving.md``): requests that have arrived join the FCFS queue; queued
requests are admitted in order while the KV memory takes them (the existing allocators:
static max-context reservation or lazy 1 MiB chunks; admission never preempts and stops at
the first request that does not fit); the newly admitted are prefilled (on the xPU when the
system has one, as PIM GEMVs over the prompt tokens on a PIM-only system, or not at all with
``prefill=False``); the running batch takes one decode step, timed as ``pimphony decode``
times it (PIM only: :class:`sim.systems.cycles.StepCycles`, exactly the cycles of
:func:`sim.systems.step.run_decode` without its report;
:func:`sim.systems.hetero.run_hetero_decode`, :func:`sim.systems.gpu.run_gpu_decode`);
finished requests are released, and every other request's KV grows by one token. When lazy
growth finds no free chunk, the most recently admitted running request is preempted (its
memory freed, it returns to the head of the queue and its KV is recomputed on re-admission).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
from pimphony.compiler.kernels import gemv_max_batch
from pimphony.compiler.llm import ModelSpec
from pimphony.compiler.plan import GemvJob, KvHeads, split_evenly, tp_shapes
from pimphony.models.config import HardwareConfig
from pimphony.models.errors import PimphonyError
from pimphony.models.hub import epu_cycles, link_cycles
from pimphony.models.memory import MemoryPolicy, OutOfMemory
from pimphony.models.system import allreduce_cycles, stage_hop_cycles
from pimphony.models.xpu import gemm_cost, ring_allreduce_seconds
from pimphony.models.xpu_config import XpuConfig
from pimphony.sim.serving.trace import Request
from pimphony.sim.systems.admission import kv_allocator
from pimphony.sim.systems.costs import layer_costs
from pimphony.sim.systems.cycles import StepCycles
from pimphony.sim.systems.gpu import (
    KV_BLOCK_TOKENS,
    GpuSetup,
    _block_bytes,
    _kv_budget,
    kv_blocks,
    run_gpu_decode,
)
from pimphony.sim.systems.hetero import HeteroSetup, run_hetero_decode
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.setup import DecodeSetup
from pimphony.sim.systems.step import KernelCaches, epu_other_flops

__all__ = [
    "BACKENDS",
    "BlockPool",
    "ServeConfig",
    "ServeError",
    "ServeResult",
    "ServingCaches",
    "System",
    "make_backend",
    "percentiles",
    "pim_prefill_cycles",
    "serve",
    "xpu_prefill_seconds",
]


class ServeError(PimphonyError, ValueError):
    """A serving run cannot be set up or a request can never be served."""


class System(StrEnum):
    """The system that serves: PIM modules only, an xPU with PIM for attention, or GPUs."""

    PIM = "pim"
    XPU_PIM = "xpu+pim"
    GPU = "gpu"


@dataclass(frozen=True)
class ServeConfig:
    """What a serving run depends on besides its requests.

    ``hw`` is the PIM preset (``pim``, ``xpu+pim``); ``xpu`` the xPU of ``xpu+pim``; ``gpu``
    and ``gpus`` the GPU system. ``tp``, ``pp``, ``partition``, ``sched``, ``memory``,
    ``micro_batches``, ``max_context`` and ``sub_batches`` mean what they mean for
    ``pimphony decode``. ``prefill`` off skips prefill (decode-only studies).
    ``max_batch`` caps the running batch (default: memory alone decides).
    """

    system: str
    model: ModelSpec
    hw: HardwareConfig | None = None
    tp: int = 1
    pp: int = 1
    partition: str = "auto"
    sched: str = "dcs"
    memory: str = "lazy"
    micro_batches: int | str | None = None
    max_context: int | None = None
    xpu: XpuConfig | None = None
    sub_batches: int | str = 1
    gpu: XpuConfig | None = None
    gpus: int = 1
    gpu_memory_fraction: float = 1.0
    prefill: bool = True
    max_batch: int | None = None

    def __post_init__(self) -> None:
        if self.system not in BACKENDS:
            raise ServeError(f"system {self.system!r} is unknown; allowed: {', '.join(System)}")
        if self.max_batch is not None and self.max_batch < 1:
            raise ServeError(f"max_batch = {self.max_batch}: must be >= 1")

    @property
    def reservation(self) -> int:
        """Tokens a request may reach: the static reservation, else the model's window."""
        if self.memory == MemoryPolicy.STATIC:
            return self.max_context or self.model.context_window
        return self.model.context_window


# --------------------------------------------------------------------------- kernel caches


def _program_signature(prog: Any) -> tuple:
    """What a decode step reads of a DPA program: whether it exists, its rule and body word
    counts (``DpaProgram.decode_times`` depends on nothing else) and its size."""
    if prog is None:
        return (None,)
    return (len(prog.rules), prog.body_words, prog.nbytes)


@dataclass
class ServingCaches(KernelCaches):
    """Kernel caches shared by every step of a run, exactly as a fresh cache per step.

    ``KernelCaches`` keys a cache by the batch's longest context because DPA programs are
    encoded for it; a kernel's cycles depend on the program only through
    :func:`_program_signature`, so steps whose programs have the same signature share one
    cache (``tests/test_serving.py`` checks step cycles against fresh ``run_decode`` calls).
    """

    _signatures: dict = field(default_factory=dict)

    def for_setup(self, setup: DecodeSetup) -> KernelCache:
        """The cache ``setup``'s kernels may share."""
        longest = max(setup.lengths)
        if setup.memory != MemoryPolicy.LAZY:
            key: tuple = (setup.hw, setup.sched, setup.memory)
        else:
            sig_key = (setup.hw, setup.sched, setup.model.head_dim, setup.model.gqa_group, longest)
            if sig_key not in self._signatures:
                probe = KernelCache(setup.hw, setup.sched, dpa=True, dpa_max_tokens=longest)
                m = setup.model
                self._signatures[sig_key] = tuple(
                    _program_signature(probe.program(k, m.head_dim, m.gqa_group))
                    for k in ("qk", "sv")
                )
            key = (setup.hw, setup.sched, setup.memory, self._signatures[sig_key])
        if key not in self._caches:
            self._caches[key] = KernelCache(
                setup.hw,
                setup.sched,
                self.memoize,
                dpa=setup.memory == MemoryPolicy.LAZY,
                dpa_max_tokens=longest,
            )
        return self._caches[key]


# --------------------------------------------------------------------------- memory pools


@dataclass(frozen=True)
class PoolStats:
    """KV bytes in use (tokens) and held (chunks, slots or blocks) against the capacity."""

    used_bytes: int
    reserved_bytes: int
    capacity_bytes: int


class BlockPool:
    """Paged KV of a GPU system (vLLM blocks of 16 tokens, ``docs/decode.md``): ``lazy`` maps
    ``ceil(T / 16)`` blocks per request as it grows; ``static`` holds the blocks of
    ``max_context`` tokens from admission. Same interface as the PIM allocators."""

    def __init__(
        self,
        setup_model: ModelSpec,
        gpu: XpuConfig,
        gpus: int,
        fraction: float,
        memory: str,
        max_context: int,
    ):
        self.budget = _kv_budget(setup_model, gpu, gpus, fraction)
        if self.budget < 0:
            raise ServeError(
                f"the weights of {setup_model.name} alone do not fit {gpus} x {gpu.name}; "
                "use more --gpus"
            )
        self.block_bytes = _block_bytes(setup_model, max(1, setup_model.kv_heads // gpus))
        self.token_bytes = self.block_bytes // KV_BLOCK_TOKENS
        self.static = memory == MemoryPolicy.STATIC
        self.max_context = max_context
        self.tokens: dict[Any, int] = {}
        self.blocks: dict[Any, int] = {}
        self.used_blocks = 0

    def _need(self, tokens: int) -> int:
        return kv_blocks(self.max_context if self.static else tokens)

    def admit(self, rid: Any, tokens: int, *, raise_on_oom: bool = True) -> bool:
        """Take the blocks of ``tokens`` tokens (or of ``max_context`` when static)."""
        need = self._need(tokens)
        if self.used_blocks + need > self.budget:
            if raise_on_oom:
                raise OutOfMemory(
                    f"request {rid!r} needs {need} KV blocks, {self.budget - self.used_blocks} "
                    "free",
                    rid,
                    need * self.block_bytes,
                    (self.budget - self.used_blocks) * self.block_bytes,
                )
            return False
        self.tokens[rid], self.blocks[rid] = tokens, need
        self.used_blocks += need
        return True

    def grow(self, rid: Any, tokens: int = 1) -> tuple[int, ...]:
        """One more token; a new block when it crosses a block boundary."""
        new = self.tokens[rid] + tokens
        extra = self._need(new) - self.blocks[rid]
        if self.used_blocks + extra > self.budget:
            raise OutOfMemory(
                f"request {rid!r} growing to {new} tokens needs {extra} more KV block(s), "
                f"{self.budget - self.used_blocks} free",
                rid,
                extra * self.block_bytes,
                (self.budget - self.used_blocks) * self.block_bytes,
            )
        self.tokens[rid] = new
        self.blocks[rid] += extra
        self.used_blocks += extra
        return tuple(range(extra))

    def release(self, rid: Any) -> tuple[int, ...]:
        """Free a request's blocks."""
        del self.tokens[rid]
        self.used_blocks -= self.blocks.pop(rid)
        return ()

    def stats(self) -> PoolStats:
        """Bytes per GPU: tokens held, blocks held, the KV budget."""
        return PoolStats(
            sum(self.tokens.values()) * self.token_bytes,
            self.used_blocks * self.block_bytes,
            self.budget * self.block_bytes,
        )


# --------------------------------------------------------------------------- prefill costs


def pim_prefill_cycles(
    model: ModelSpec, hw: HardwareConfig, tokens: int, tp: int, pp: int, cache: KernelCache
) -> int:
    """Cycles of the FC work of prefilling ``tokens`` prompt tokens on a PIM-only system.

    Each weight GEMV runs as the decode step's batched GEMV with the prompt tokens as its
    batch (``compiler.plan``'s split: output rows dealt to channels in bank groups, passes of
    at most ``gemv_max_batch`` tokens); per layer the four GEMVs (slowest channel), the EPU's
    norms/residuals/activation over every token and the two all-reduces, times the layers,
    plus each stage hop. Prefill attention is not modelled (``docs/serving.md``).
    """
    spec, cfg = model, hw
    layer = 0
    for d_out, d_in in tp_shapes(spec, tp).values():
        slowest = 0
        for s in split_evenly(d_out, cfg.module.channels, cfg.channel.banks):
            if not s:
                continue
            most = max(1, min(tokens, gemv_max_batch(cfg, s, d_in)))
            c = (tokens // most) * cache.run(GemvJob(s, d_in, most)).cycles
            if tokens % most:
                c += cache.run(GemvJob(s, d_in, tokens % most)).cycles
            slowest = max(slowest, c)
        layer += slowest
    layer += epu_cycles(cfg, tokens * epu_other_flops(spec, tp))
    vector = tokens * spec.hidden * spec.element_bytes
    layer += 2 * allreduce_cycles(cfg, vector, tp)
    hops = sum(stage_hop_cycles(cfg, vector, s, pp, tp) for s in range(pp))
    return spec.layers * layer + hops


def xpu_prefill_seconds(
    device: XpuConfig, model: ModelSpec, prompts: Sequence[int], shards: int = 1
) -> float:
    """Seconds to prefill ``prompts`` (tokens each) on ``shards`` tensor-parallel devices of
    the xPU cost model (``docs/xpu.md``): per layer the cost table
    :func:`sim.systems.costs.layer_costs` over all prompt tokens (FC GEMMs, 2 norms, 2
    residual adds, the activation; KV heads replicated as on GPUs), each prompt's attention
    as two GEMMs per query head (``n x d_h x n`` and ``n x n x d_h``, the full square: no
    causal skipping) and, on more than one device, two ring all-reduces; times the layers."""
    spec, n = model, int(sum(prompts))
    layer = 0.0
    for cost, count in layer_costs(spec, device, n, shards, kv=KvHeads.REPLICATE).values():
        layer += count * cost.seconds
    heads, d_h = spec.heads // shards, spec.head_dim
    for t in prompts:
        layer += heads * (
            gemm_cost(device, t, d_h, t).seconds + gemm_cost(device, t, t, d_h).seconds
        )
    if shards > 1:
        layer += 2 * ring_allreduce_seconds(device, n * spec.hidden * spec.element_bytes, shards)
    return spec.layers * layer


# --------------------------------------------------------------------------- backends


class _Backend:
    """One system: its KV pool, its decode step and its prefill, in seconds."""

    def __init__(self, cfg: ServeConfig):
        self.cfg = cfg
        self._memo: dict[tuple[int, ...], tuple[float, int | None]] = {}
        self.step_calls = 0

    def step(self, lengths: tuple[int, ...]) -> tuple[float, int | None]:
        """(seconds, cycles or None) of one decode step of ``lengths``; memoised on the exact
        lengths (the step is a function of them)."""
        if lengths not in self._memo:
            self.step_calls += 1
            self._memo[lengths] = self._step(lengths)
        return self._memo[lengths]

    def _step(self, lengths: tuple[int, ...]) -> tuple[float, int | None]:
        raise NotImplementedError

    def pool(self) -> Any:
        raise NotImplementedError

    def prefill(self, prompts: Sequence[int]) -> float:
        raise NotImplementedError

    def freq_hz(self) -> float:
        assert self.cfg.hw is not None
        return self.cfg.hw.module.freq_ghz * 1e9


class _PimBackend(_Backend):
    """PIM modules only: ``run_decode``'s cycles (:class:`StepCycles`); prefill as PIM GEMVs
    (:func:`pim_prefill_cycles`)."""

    def __init__(self, cfg: ServeConfig):
        super().__init__(cfg)
        if cfg.hw is None:
            raise ServeError("the pim system needs a PIM preset")
        self.caches = ServingCaches()
        self.gemv_cache = KernelCache(cfg.hw, cfg.sched)
        self._cycles: StepCycles | None = None

    def decode_setup(self, lengths: tuple[int, ...]) -> DecodeSetup:
        """The ``DecodeSetup`` of one step (what ``pimphony decode`` would build)."""
        c = self.cfg
        assert c.hw is not None
        return DecodeSetup(
            c.model,
            c.hw,
            lengths,
            tp=c.tp,
            pp=c.pp,
            partition=c.partition,
            sched=c.sched,
            memory=c.memory,
            micro_batches=c.micro_batches,
            max_context=c.max_context,
        )

    def _step(self, lengths: tuple[int, ...]) -> tuple[float, int | None]:
        # The cycles-only step (sim.systems.cycles): run_decode's cycles without its
        # report, which serving does not read.
        if self._cycles is None:
            self._cycles = StepCycles(self.decode_setup(lengths), self.caches)
        cycles = self._cycles.cycles(lengths)
        return cycles / self.freq_hz(), cycles

    def pool(self) -> Any:
        c = self.cfg
        assert c.hw is not None
        alloc = kv_allocator(c.model, c.hw, c.tp * c.pp, c.memory, c.reservation)
        if alloc is None:
            raise ServeError(
                f"{c.model.name}'s weights alone exceed {c.tp * c.pp} module(s) of {c.hw.name}"
            )
        return alloc

    def prefill(self, prompts: Sequence[int]) -> float:
        c = self.cfg
        assert c.hw is not None
        cycles = pim_prefill_cycles(c.model, c.hw, int(sum(prompts)), c.tp, c.pp, self.gemv_cache)
        return cycles / self.freq_hz()


class _XpuPimBackend(_PimBackend):
    """xPU + PIM: ``run_hetero_decode``; prefill on the xPU, then the prompt's KV to PIM."""

    def __init__(self, cfg: ServeConfig):
        super().__init__(cfg)
        if cfg.xpu is None:
            raise ServeError("the xpu+pim system needs an xPU preset")

    def hetero_setup(self, lengths: tuple[int, ...]) -> HeteroSetup:
        """The ``HeteroSetup`` of one step."""
        assert self.cfg.xpu is not None
        pim = dataclasses.replace(self.decode_setup(lengths), micro_batches=None)
        return HeteroSetup(pim, self.cfg.xpu, self.cfg.sub_batches)

    def _step(self, lengths: tuple[int, ...]) -> tuple[float, int | None]:
        setup = self.hetero_setup(lengths)
        r = run_hetero_decode(setup, self.caches.for_setup(setup.pim))
        return r.cycles / self.freq_hz(), r.cycles

    def pool(self) -> Any:
        c = self.cfg
        assert c.hw is not None
        return kv_allocator(c.model, c.hw, c.tp, c.memory, c.reservation, weights=False)

    def prefill(self, prompts: Sequence[int]) -> float:
        c = self.cfg
        assert c.xpu is not None and c.hw is not None
        seconds = xpu_prefill_seconds(c.xpu, c.model, prompts)
        # Every module receives its KV heads' share of the prompt's KV over its own link.
        kv = int(sum(prompts)) * c.model.kv_bytes_per_token
        return seconds + link_cycles(c.hw, math.ceil(kv / c.tp), "host") / self.freq_hz()


class _GpuBackend(_Backend):
    """GPUs only: ``run_gpu_decode``; prefill on the GPUs; paged KV (:class:`BlockPool`)."""

    def __init__(self, cfg: ServeConfig):
        super().__init__(cfg)
        if cfg.gpu is None:
            raise ServeError("the gpu system needs a GPU preset")

    def gpu_setup(self, lengths: tuple[int, ...]) -> GpuSetup:
        """The ``GpuSetup`` of one step."""
        c = self.cfg
        assert c.gpu is not None
        return GpuSetup(c.model, c.gpu, c.gpus, lengths, c.gpu_memory_fraction)

    def _step(self, lengths: tuple[int, ...]) -> tuple[float, int | None]:
        return run_gpu_decode(self.gpu_setup(lengths)).step_seconds, None

    def pool(self) -> Any:
        c = self.cfg
        assert c.gpu is not None
        return BlockPool(c.model, c.gpu, c.gpus, c.gpu_memory_fraction, c.memory, c.reservation)

    def prefill(self, prompts: Sequence[int]) -> float:
        c = self.cfg
        assert c.gpu is not None
        return xpu_prefill_seconds(c.gpu, c.model, prompts, c.gpus)


#: The backend of each system.
BACKENDS: dict[System, type[_Backend]] = {
    System.PIM: _PimBackend,
    System.XPU_PIM: _XpuPimBackend,
    System.GPU: _GpuBackend,
}


def make_backend(cfg: ServeConfig) -> _Backend:
    """The backend of ``cfg.system``."""
    return BACKENDS[System(cfg.system)](cfg)


# --------------------------------------------------------------------------- the loop


@dataclass
class ServeResult:
    """Everything a run measured. Per request (index = request id): ``admitted_s`` (first
    admission), ``first_token_s``, ``finished_s``, ``preemptions``. Per event (a prefill or a
    decode step, in time order): ``events`` rows ``(kind, start_s, seconds, cycles, batch,
    tokens_out, kv_used_bytes, kv_reserved_bytes, queued)``, ``queued`` the requests left
    waiting (arrived, not admitted) when it ran."""

    requests: list[Request]
    capacity_bytes: int
    admitted_s: list[float]
    first_token_s: list[float]
    finished_s: list[float]
    preemptions: list[int]
    events: list[tuple[str, float, float, int | None, int, int, int, int, int]]
    step_lengths: list[tuple[int, ...]] = field(default_factory=list)
    wall_seconds: float = 0.0
    distinct_steps: int = 0


def _check_requests(cfg: ServeConfig, requests: Sequence[Request]) -> None:
    limit = cfg.reservation
    for k, r in enumerate(requests):
        if r.rid != k:
            raise ServeError(f"request {k} has id {r.rid}: ids must be 0, 1, ... in list order")
        if k and r.arrival_s < requests[k - 1].arrival_s:
            raise ServeError(f"request {k} arrives before request {k - 1}: sort by arrival")
        if r.input_tokens + r.output_tokens > limit:
            what = (
                f"the static reservation max_context = {limit}"
                if cfg.memory == MemoryPolicy.STATIC
                else f"{cfg.model.name}'s context_window = {limit}"
            )
            raise ServeError(
                f"request {r.rid}: input_tokens {r.input_tokens} + output_tokens "
                f"{r.output_tokens} = {r.input_tokens + r.output_tokens} exceeds {what}"
            )


def serve(
    cfg: ServeConfig,
    requests: Sequence[Request],
    progress: Callable[[str], None] | None = None,
    record_lengths: bool = False,
    backend: _Backend | None = None,
) -> ServeResult:
    """Serve ``requests`` (sorted by arrival) on ``cfg``'s system; see the module docstring.

    ``record_lengths`` keeps every decode step's context lengths (for the exactness test).
    """
    started = time.perf_counter()
    _check_requests(cfg, requests)
    backend = backend or make_backend(cfg)
    pool = backend.pool()
    n = len(requests)
    admitted = [math.nan] * n
    first = [math.nan] * n
    finished = [math.nan] * n
    preempt = [0] * n
    generated = [0] * n
    kv = [r.input_tokens for r in requests]  # KV tokens held (or to rebuild on admission)
    waiting: deque[int] = deque()
    running: list[int] = []
    events: list = []
    lengths_log: list[tuple[int, ...]] = []
    now, nxt = 0.0, 0
    prefill_on = cfg.prefill

    def mem() -> tuple[int, int]:
        st = pool.stats()
        return st.used_bytes, st.reserved_bytes

    def emit(r: int) -> None:
        generated[r] += 1
        if math.isnan(first[r]):
            first[r] = now

    while nxt < n or waiting or running:
        while nxt < n and requests[nxt].arrival_s <= now:
            waiting.append(nxt)
            nxt += 1
        if not waiting and not running:
            now = requests[nxt].arrival_s
            continue
        new: list[int] = []
        while waiting and (cfg.max_batch is None or len(running) < cfg.max_batch):
            r = waiting[0]
            if not pool.admit(r, kv[r], raise_on_oom=False):
                break
            waiting.popleft()
            running.append(r)
            new.append(r)
            if math.isnan(admitted[r]):
                admitted[r] = now
        if not running:
            r = waiting[0]
            raise ServeError(
                f"request {r} ({kv[r]} KV tokens) does not fit the empty memory "
                f"({cfg.memory} allocation): it can never be served"
            )
        if new and prefill_on:
            dt = backend.prefill([kv[r] for r in new])
            start = now
            now += dt
            done = 0
            for r in new:
                if generated[r] == 0:  # a recomputed request does not re-emit its token
                    emit(r)
                    done += 1
            events.append(("prefill", start, dt, None, len(new), done, *mem(), len(waiting)))
        # Requests that prefill already finished (one output token) leave before the step.
        _release_done(running, requests, generated, finished, pool, now)
        if not running:
            continue
        lengths = tuple(kv[r] for r in running)
        dt, cycles = backend.step(lengths)
        if record_lengths:
            lengths_log.append(lengths)
        start = now
        now += dt
        for r in running:
            emit(r)
        used, reserved = mem()
        events.append(
            ("decode", start, dt, cycles, len(running), len(running), used, reserved, len(waiting))
        )
        _release_done(running, requests, generated, finished, pool, now)
        # Grow every remaining request's KV by the token just decoded, oldest first; when
        # lazy memory runs out, preempt the most recently admitted request (recompute).
        i = 0
        while i < len(running):
            r = running[i]
            try:
                pool.grow(r)
                kv[r] += 1
                i += 1
            except OutOfMemory:
                victim = running.pop()
                pool.release(victim)
                kv[victim] += 1  # not grown yet: its KV is rebuilt with the new token
                preempt[victim] += 1
                waiting.appendleft(victim)
                if victim == r:
                    break
        if progress and len(events) % 1000 == 0:
            progress(f"t = {now:.3f} s: {nxt}/{n} arrived, {len(running)} running")
    return ServeResult(
        list(requests),
        pool.stats().capacity_bytes,
        admitted,
        first,
        finished,
        preempt,
        events,
        lengths_log,
        time.perf_counter() - started,
        backend.step_calls,
    )


def _release_done(
    running: list[int],
    requests: Sequence[Request],
    generated: list[int],
    finished: list[float],
    pool: Any,
    now: float,
) -> None:
    keep = []
    for r in running:
        if generated[r] >= requests[r].output_tokens:
            pool.release(r)
            finished[r] = now
        else:
            keep.append(r)
    running[:] = keep


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, P50, P90 and P99 (numpy's linear interpolation); ``None`` without values."""
    a = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    if a.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}
