"""The serving loop: continuous batching of requests over time on one system.

Every iteration (``docs/serving.md``): requests that have arrived join the FCFS queue; queued
requests are admitted in order while the KV memory takes them (the existing allocators:
static max-context reservation or lazy 1 MiB chunks; admission never preempts and stops at
the first request that does not fit); the newly admitted are prefilled (on the xPU when the
system has one, as PIM GEMVs over the prompt tokens on a PIM-only system, or not at all with
``prefill=False``); the running batch takes one decode step, timed as ``pimphony decode``
times it (the system's :meth:`~sim.systems.base.System.cycles`, any row of
:data:`sim.systems.registry.SYSTEMS`; PIM only: :class:`sim.systems.cycles.StepCycles`,
exactly the cycles of :func:`sim.systems.step.run_decode` without its report);
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
from typing import Any

import numpy as np
from pimphony.compiler.llm import ModelSpec
from pimphony.models.config import HardwareConfig
from pimphony.models.errors import PimphonyError
from pimphony.models.memory import MemoryPolicy
from pimphony.sim.serving.trace import Request
from pimphony.sim.systems.base import StepTime, System, SystemConfig
from pimphony.sim.systems.registry import SYSTEMS, SystemKind, make_system

__all__ = [
    "ServeConfig",
    "ServeError",
    "ServeResult",
    "percentiles",
    "serve",
]


class ServeError(PimphonyError, ValueError):
    """A serving run cannot be set up or a request can never be served."""


@dataclass(frozen=True, init=False)
class ServeConfig(SystemConfig):
    """What a serving run depends on besides its requests: the served ``system`` (a row of
    :data:`sim.systems.registry.SYSTEMS`), its :class:`~sim.systems.base.SystemConfig` and
    the serving choices. ``prefill`` off skips prefill (decode-only studies). ``max_batch``
    caps the running batch (default: memory alone decides).

    ``ServeConfig(system, model, hw, **options)``: the options as keywords (``tp``,
    ``partition``, ``memory``, ``xpu``, ``gpus``, ...: :class:`SystemConfig`'s fields).
    """

    system: str = SystemKind.PIM.value
    prefill: bool = True
    max_batch: int | None = None

    def __init__(
        self,
        system: str,
        model: ModelSpec,
        hw: HardwareConfig | None = None,
        *,
        prefill: bool = True,
        max_batch: int | None = None,
        **options: Any,
    ):
        if system not in SYSTEMS:
            raise ServeError(f"system {system!r} is unknown; allowed: {', '.join(SYSTEMS)}")
        if max_batch is not None and max_batch < 1:
            raise ServeError(f"max_batch = {max_batch}: must be >= 1")
        super().__init__(model, hw, **options)
        object.__setattr__(self, "system", system)
        object.__setattr__(self, "prefill", prefill)
        object.__setattr__(self, "max_batch", max_batch)

    @classmethod
    def of(
        cls,
        system: str,
        config: SystemConfig,
        prefill: bool = True,
        max_batch: int | None = None,
    ) -> ServeConfig:
        """Serving ``config``'s system."""
        options = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        return cls(system, prefill=prefill, max_batch=max_batch, **options)


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
    system: System | None = None,
) -> ServeResult:
    """Serve ``requests`` (sorted by arrival) on ``cfg``'s system (``system``: one already
    built from it, the registry's otherwise); see the module docstring.

    ``record_lengths`` keeps every decode step's context lengths (for the exactness test).
    """
    started = time.perf_counter()
    _check_requests(cfg, requests)
    system = system or make_system(cfg.system, cfg)
    pool = system.pool()
    # A step is a function of its lengths: each distinct one is timed once.
    steps: dict[tuple[int, ...], StepTime] = {}
    n = len(requests)
    admitted = [math.nan] * n
    first = [math.nan] * n
    finished = [math.nan] * n
    preempt = [0] * n
    generated = [0] * n
    kv = [r.input_tokens for r in requests]  # KV tokens held (or to rebuild on admission)
    outputs = [r.output_tokens for r in requests]
    waiting: deque[int] = deque()
    batch = _Batch(kv, generated, outputs)
    running = batch.ids
    events: list = []
    lengths_log: list[tuple[int, ...]] = []
    now, nxt = 0.0, 0
    prefill_on = cfg.prefill
    # The head of the queue did not fit and nothing was released since: it still does not.
    blocked = False

    def release(r: int) -> None:
        nonlocal blocked
        pool.release(r)
        blocked = False

    while nxt < n or waiting or running:
        while nxt < n and requests[nxt].arrival_s <= now:
            waiting.append(nxt)
            nxt += 1
        if not waiting and not running:
            now = requests[nxt].arrival_s
            continue
        new: list[int] = []
        while (
            waiting
            and not blocked
            and (cfg.max_batch is None or len(running) + len(new) < cfg.max_batch)
        ):
            r = waiting[0]
            if not pool.admit(r, kv[r], raise_on_oom=False):
                blocked = True
                break
            waiting.popleft()
            new.append(r)
            if math.isnan(admitted[r]):
                admitted[r] = now
        if not running and not new:
            r = waiting[0]
            raise ServeError(
                f"request {r} ({kv[r]} KV tokens) does not fit the empty memory "
                f"({cfg.memory} allocation): it can never be served"
            )
        if new and prefill_on:
            dt = system.prefill([kv[r] for r in new])
            start = now
            now += dt
            done = 0
            for r in new:
                if generated[r] == 0:  # a recomputed request does not re-emit its token
                    generated[r] = 1
                    if math.isnan(first[r]):
                        first[r] = now
                    done += 1
            events.append(("prefill", start, dt, None, len(new), done, *pool.usage(), len(waiting)))
        # Requests that prefill already finished (one output token) leave before the step.
        for r in new:
            if generated[r] >= outputs[r]:
                release(r)
                finished[r] = now
            else:
                batch.join(r)
        if not running:
            continue
        lengths = batch.lengths()
        step = steps.get(lengths)
        if step is None:
            step = steps[lengths] = system.cycles(lengths)
        dt, cycles = step.seconds, step.cycles
        if record_lengths:
            lengths_log.append(lengths)
        start = now
        now += dt
        for r in batch.advance():  # its first token (a prefill emits the others')
            first[r] = now
        used, reserved = pool.usage()
        events.append(
            ("decode", start, dt, cycles, len(running), len(running), used, reserved, len(waiting))
        )
        for r in batch.finished():
            release(r)
            finished[r] = now
        # Grow every remaining request's KV by the token just decoded, oldest first; when
        # lazy memory runs out, preempt the most recently admitted request (recompute).
        i = pool.grow_each(running)
        while i < len(running):  # running[i] does not fit
            victim = batch.pop()  # its KV, not grown, is rebuilt with the new token
            release(victim)
            preempt[victim] += 1
            waiting.appendleft(victim)
            if i < len(running):
                i += pool.grow_each(running[i:])
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
        len(steps),
    )


class _Batch:
    """The running requests (``ids``, in admission order) as the decode steps advance them.

    A step adds one generated token and one KV token to every running request, so each is
    kept as an offset from the count of steps (``kv`` and ``generated`` hold the others'
    and are brought up to date when a request leaves): a step touches only the requests it
    finishes, found by the step they finish at.
    """

    def __init__(self, kv: list[int], generated: list[int], outputs: Sequence[int]):
        self.ids: list[int] = []
        self.kv, self.generated, self.outputs = kv, generated, outputs
        self.steps = 0
        self._kv = [0] * len(kv)  # a running request's KV tokens - steps
        self._generated = [0] * len(kv)  # its generated tokens - steps
        self._ends: dict[int, list[int]] = {}  # step -> requests it finishes
        self._fresh: list[int] = []  # joined without a token yet

    def join(self, r: int) -> None:
        """Request ``r`` runs from the next step (after those running)."""
        self.ids.append(r)
        self._kv[r] = self.kv[r] - self.steps
        g = self._generated[r] = self.generated[r] - self.steps
        self._ends.setdefault(self.outputs[r] - g, []).append(r)
        if self.generated[r] == 0:
            self._fresh.append(r)

    def lengths(self) -> tuple[int, ...]:
        """Context tokens of each running request."""
        s, kv = self.steps, self._kv
        return tuple([kv[r] + s for r in self.ids])

    def advance(self) -> list[int]:
        """One decode step; the requests that generated their first token."""
        self.steps += 1
        fresh, self._fresh = self._fresh, []
        return fresh

    def finished(self) -> list[int]:
        """Remove the requests with all their output tokens; them, in running order."""
        ends = self._ends.pop(self.steps, None)
        if not ends:
            return []
        gone = set(ends)
        done = [r for r in self.ids if r in gone]
        self.ids[:] = [r for r in self.ids if r not in gone]
        for r in done:
            self._leave(r)
        return done

    def pop(self) -> int:
        """Remove the last request (preempted) and return it."""
        r = self.ids.pop()
        self._ends[self.outputs[r] - self._generated[r]].remove(r)
        self._leave(r)
        return r

    def _leave(self, r: int) -> None:
        self.kv[r] = self._kv[r] + self.steps
        self.generated[r] = self._generated[r] + self.steps


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, P50, P90 and P99 (numpy's linear interpolation); ``None`` without values."""
    a = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    if a.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}
