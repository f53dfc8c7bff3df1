"""Channel kernels of the decode step, run through the channel TLM; a module's job lists.

Each channel runs its jobs one after another (no overlap between kernels); the module takes
as long as its slowest channel. Identical jobs (same kernel, shape, scheduler and hardware)
are simulated once and reused (``memoize``); the result is exactly what simulating every
job gives, which ``tests/test_plan.py`` checks with memoisation off.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pimphony.compiler.dpa import encode_kernel
from pimphony.compiler.hub import run_count
from pimphony.compiler.kernels import CompileError, attention_max_tokens, compile_kernel
from pimphony.compiler.plan import ChannelJob, ScoreSpill, score_spill, spill_staging
from pimphony.models.channel import run_channel
from pimphony.models.config import HardwareConfig
from pimphony.models.dpa.dispatcher import gaps_from_times
from pimphony.models.energy import ChannelActivity, channel_activity
from pimphony.models.memory import MemoryPolicy
from pimphony.sim.systems.setup import DecodeSetup

__all__ = [
    "KernelCache",
    "KernelCaches",
    "KernelStats",
    "ModuleRun",
    "active_banks",
    "job_key",
    "kernel_cache",
    "run_module",
    "summed_activity",
]


def job_key(job) -> tuple:
    """What makes two channel jobs the same kernel: kind and shape (and a spill of scores).
    An attention job's fields as they are (a decode step looks up millions of them)."""
    if type(job) is ChannelJob:
        return (job.kind, job.tokens, job.d_h, job.gqa_group, job.spill)
    key = (job.kind, tuple(sorted(job.shape.items())))
    return (*key, "spill") if _spilled(job) else key


def summed_activity(stats: Iterable[KernelStats]) -> ChannelActivity:
    """The activities of ``stats`` added up, each distinct result once times its count (a
    memoised kernel's runs share one :class:`KernelStats`); equal to adding them one by one."""
    seen: dict[int, KernelStats] = {}
    count: Counter[int] = Counter()
    for st in stats:
        seen[id(st)] = st
        count[id(st)] += 1
    total = ChannelActivity.zero()
    for key, st in seen.items():
        total += st.activity if count[key] == 1 else st.activity.scaled(count[key])
    return total


def _spilled(job) -> bool:
    """Whether ``job`` is an attention job whose scores pass through the bank array."""
    return isinstance(job, ChannelJob) and job.spill


@dataclass(frozen=True)
class KernelStats:
    """What the module model keeps of one channel kernel run.

    ``hub_instructions`` is the kernel's size as HUB instructions (``compiler.hub``). A kernel
    fed by the DPA dispatcher runs with the decoder's valid gaps (``DpaProgram.decode_times``)
    except its start-up (program words before the first command, ``dpa_startup`` cycles,
    0 for host-sent static streams), which overlaps the previous kernel on the channel; the
    module model charges it once per attention block. ``activity`` is what the energy model
    reads of the run (``models.energy.channel_activity``: counts, row switches, residency).
    """

    cycles: int
    macs: int
    commands: int
    hub_instructions: int
    dpa_startup: int = 0
    activity: ChannelActivity | None = None


@dataclass
class KernelCache:
    """Channel kernel results keyed by (kind, shape, DPA); one per hardware config and scheduler.

    With ``dpa`` set, attention kernels (``qk``, ``sv``) are fed through the DPA decoder's
    timing, their programs encoded for ``dpa_max_tokens`` tokens, or for the most tokens one
    channel kernel of the shape can hold (:func:`compiler.kernels.attention_max_tokens`: GPR
    and rows) if that is fewer (score tiling keeps every kernel within it); shapes the DPA
    encoder refuses run as static streams and are listed in ``dpa_refused``.
    """

    cfg: HardwareConfig
    sched: str
    memoize: bool = True
    dpa: bool = False
    dpa_max_tokens: int = 131072
    simulated: int = 0
    _memo: dict = field(default_factory=dict)
    _programs: dict = field(default_factory=dict)
    dpa_refused: dict = field(default_factory=dict)
    #: Per-request attention blocks of the cycles-only step (``sim.systems.cycles``),
    #: built from this cache's kernels and so valid only with it.
    blocks: dict = field(default_factory=dict)

    def program(self, kind: str, d_h: int, gqa_group: int):
        """The DPA program of an attention kernel, or ``None`` if the encoder refuses it."""
        key = (kind, d_h, gqa_group)
        if key not in self._programs:
            try:
                top = attention_max_tokens(self.cfg, kind, d_h, gqa_group)
                self._programs[key] = encode_kernel(
                    self.cfg, kind, d_h, gqa_group, min(self.dpa_max_tokens, top)
                )
            except CompileError as exc:  # DpaEncodeError is a CompileError
                self._programs[key] = None
                self.dpa_refused[key] = str(exc)
        return self._programs[key]

    def run(self, job) -> KernelStats:
        """Cycles and MACs of ``job`` (a ``ChannelJob`` or a batched ``compiler.plan.GemvJob``)."""
        key = job_key(job)
        if self.memoize and key in self._memo:
            return self._memo[key]
        spilled = _spilled(job)
        try:
            cfg = spill_staging(self.cfg, job) if spilled else self.cfg
            prog = compile_kernel(cfg, job.kind, **job.shape)
        except CompileError as exc:
            shape = ", ".join(f"{k}={v}" for k, v in job.shape.items())
            raise CompileError(f"{job.kind} kernel ({shape}) on one channel: {exc}") from None
        gaps, startup = None, 0
        if self.dpa and job.kind in ("qk", "sv"):
            dpa_prog = self.program(job.kind, job.d_h, job.gqa_group)
            if dpa_prog is not None:
                n = prog.commands.shape[0]
                gaps = gaps_from_times(dpa_prog.decode_times(n))
                startup, gaps[0] = int(gaps[0]), 0
        result = run_channel(
            prog.commands, self.cfg, self.sched, valid_gaps=gaps, validate=False, record=False
        )
        self.simulated += 1
        spill = score_spill(self.cfg, job) if spilled else ScoreSpill(0, 0)
        stats = KernelStats(
            result.cycles + spill.cycles(self.cfg),
            result.counts["MAC"],
            int(prog.commands.shape[0]) + spill.columns,
            run_count(prog.commands),
            startup,
            channel_activity(result.to_dict(), self.cfg),
        )
        if self.memoize:
            self._memo[key] = stats
        return stats


def kernel_cache(setup: DecodeSetup, memoize: bool = True) -> KernelCache:
    """The channel-kernel cache of ``setup``'s hardware, scheduler and memory policy."""
    return KernelCache(
        setup.hw,
        setup.sched,
        memoize,
        dpa=setup.memory == MemoryPolicy.LAZY,
        dpa_max_tokens=max(setup.lengths),
    )


@dataclass
class KernelCaches:
    """Channel-kernel caches shared by many decode steps (splits, batches, partitions of an
    experiment): one per hardware, scheduler, memory policy and longest context (the DPA
    programs' length), the inputs a kernel's cycles depend on besides its shape."""

    memoize: bool = True
    _caches: dict = field(default_factory=dict)

    def for_setup(self, setup: DecodeSetup) -> KernelCache:
        """The cache ``setup``'s kernels may share."""
        key = (setup.hw, setup.sched, setup.memory, max(setup.lengths))
        if key not in self._caches:
            self._caches[key] = kernel_cache(setup, self.memoize)
        return self._caches[key]


@dataclass(frozen=True)
class ModuleRun:
    """Per-channel and module-level results of running one set of jobs."""

    channel_cycles: np.ndarray
    cycles: int
    mac_utilization: float
    channel_utilization: float
    active_channels: int
    active_bank_fraction: float
    jobs: int
    simulated_kernels: int


def active_banks(job, banks: int) -> int:
    """Banks a channel job gives work to."""
    # QK^T puts token t of a channel's share on bank t % banks; SV puts output d on bank
    # d % banks; a GEMV puts output row o on bank o % banks.
    if job.kind == "gemv":
        return min(banks, job.d_out)
    return min(banks, job.tokens if job.kind == "qk" else job.d_h)


def run_module(
    cfg: HardwareConfig,
    jobs: Sequence[Sequence[ChannelJob]],
    sched: str,
    cache: KernelCache | None = None,
    memoize: bool = True,
) -> ModuleRun:
    """Run every channel's job list; the module finishes with its slowest channel."""
    if len(jobs) != cfg.module.channels:
        raise ValueError(f"{len(jobs)} job lists for a module of {cfg.module.channels} channels")
    cache = cache or KernelCache(cfg, sched, memoize)
    banks = cfg.channel.banks
    cycles = np.zeros(len(jobs), dtype=np.int64)
    macs = 0
    active = np.zeros(len(jobs), dtype=np.int64)
    before = cache.simulated
    for c, channel_jobs in enumerate(jobs):
        for job in channel_jobs:
            stats = cache.run(job)
            cycles[c] += stats.cycles
            macs += stats.macs
            active[c] = max(active[c], active_banks(job, banks))
    total = int(cycles.max()) if len(jobs) else 0
    n_ch = len(jobs)
    return ModuleRun(
        channel_cycles=cycles,
        cycles=total,
        mac_utilization=macs * cfg.timing.tCCD / (total * n_ch) if total else 0.0,
        channel_utilization=float(cycles.sum() / (total * n_ch)) if total else 0.0,
        active_channels=int(np.count_nonzero(cycles)),
        active_bank_fraction=float(active.sum() / (banks * n_ch)),
        jobs=sum(len(j) for j in jobs),
        simulated_kernels=cache.simulated - before,
    )
