"""The systems that run an LLM decode step: one :class:`SystemKind` and one :data:`SYSTEMS` table.

Each row builds a :class:`~sim.systems.base.System` from a
:class:`~sim.systems.base.SystemConfig` and declares the options of ``pimphony decode`` and
``pimphony serve`` it reads; either command refuses another row's options (given a value
other than their default) from this table. ``pimphony decode --system K`` and
``pimphony serve --system K`` take every row.

* **pim** (:class:`PimSystem`): PIM modules only, ``tp x pp`` modules
  (:func:`sim.systems.step.run_decode`; its fast path :class:`sim.systems.cycles.StepCycles`).
* **gpu** (:class:`GpuSystem`): N GPUs, tensor parallel, on the xPU cost model
  (:func:`sim.systems.gpu.run_gpu_decode`); paged KV (:class:`BlockPool`).
* **xpu+pim** (:class:`XpuPimSystem`): FC layers on ``--gpus`` xPUs (tensor parallel),
  attention on ``tp x pp`` PIM modules (:func:`sim.systems.hetero.run_hetero_decode`).
* **gpu+lolpim** (:class:`GpuLolpimSystem`): LoL-PIM 8.1's GPU+LoL-PIM, xpu+pim with
  LoL-PIM's techniques (ITPP, ping-pong I/O buffering, DPA) and its defaults
  (``lolpim-gpu-gddr6`` GPUs, ``lolpim-aimx-io`` modules). LoL-PIM's GPU+PIM baseline is
  xpu+pim with ``--preset lolpim-aimx --partition hfp --sched static --memory static``.

* **npu+aim**, **attacc**, **neupims**, **librapim**, **librapim-best**, **aim-pipelined**,
  **librapim-no-dbo**, **librapim-measured** (:data:`LIBRAPIM_ROWS`,
  one :class:`~sim.systems.librapim_system.LibrapimRowSystem` each): LibraPIM 6.1's NPU+PIM
  systems and analysis rows (:func:`sim.systems.librapim.run_librapim`); their defaults are
  LibraPIM's (``librapim-hbm2``, ``librapim-npu``, ``--tp 8``, ``--groups 2``, DEX on).

* **attacc-base**, **attacc-base+dcc**, **attacc-full**, **attacc-full+dcc**
  (:class:`sim.systems.attacc_gpu.AttAccGpuSystem`, :data:`FIG8_ROWS`):
  DCC Fig. 8's GPU with AttAcc PIM, without and with DCC's mappings; Fig. 8's GPU baseline
  is **gpu**.

Every system is a row here.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from pimphony.compiler.kernels import gemv_max_batch
from pimphony.compiler.llm import ModelSpec, load_model
from pimphony.compiler.plan import (
    GemvJob,
    KvHeads,
    ScoreOverflow,
    kv_heads_per_device,
    split_evenly,
    tp_shapes,
)
from pimphony.models.config import HardwareConfig, load_preset
from pimphony.models.energy import load_energy
from pimphony.models.hub import epu_cycles, link_cycles
from pimphony.models.memory import MemoryPolicy, OutOfMemory
from pimphony.models.system import allreduce_cycles, stage_hop_cycles
from pimphony.models.xpu_config import XpuConfig, load_xpu
from pimphony.sim.provenance import device_record as _device_record
from pimphony.sim.systems.admission import fill_batch, kv_allocator, weights_kv_pool
from pimphony.sim.systems.attacc_gpu import (
    FIG8_SPECS,
    AttAccGpuSystem,
    attacc_report_stem,
    attacc_setup_digest,
    format_attacc_report,
    plot_attacc_report,
)
from pimphony.sim.systems.base import (
    Command,
    PoolStats,
    StepResult,
    StepTime,
    System,
    SystemConfig,
    SystemKind,
    SystemRow,
)
from pimphony.sim.systems.costs import xpu_prefill_seconds
from pimphony.sim.systems.cycles import StepCycles
from pimphony.sim.systems.gpu import (
    KV_BLOCK_TOKENS,
    GpuCycles,
    GpuReport,
    GpuSetup,
    _block_bytes,
    _kv_budget,
    format_gpu_report,
    gpu_fill_batch,
    gpu_report_stem,
    gpu_setup_digest,
    kv_blocks,
    plot_gpu_report,
    run_gpu_decode,
)
from pimphony.sim.systems.hetero import (
    HeteroCycles,
    HeteroReport,
    HeteroSetup,
    format_hetero_report,
    hetero_report_stem,
    hetero_setup_digest,
    plot_hetero_report,
    run_hetero_decode,
)
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.librapim import (
    DEFAULT_GROUPS,
    DEFAULT_TP,
    LIBRAPIM_PRESET,
    LIBRAPIM_SPECS,
    LIBRAPIM_XPU,
    BankAccess,
    Offload,
    OffloadReading,
)
from pimphony.sim.systems.librapim_system import (
    LibrapimRowSystem,
    format_librapim_report,
    librapim_report_stem,
    librapim_setup_digest,
    plot_librapim_report,
)
from pimphony.sim.systems.report import (
    DecodeReport,
    format_report,
    plot_report,
    report_stem,
    setup_digest,
)
from pimphony.sim.systems.setup import DecodeError, DecodeSetup, Mapping
from pimphony.sim.systems.step import KernelCaches, epu_other_flops, run_decode

__all__ = [
    "FIG8_ROWS",
    "LIBRAPIM_ROWS",
    "LOLPIM_GPU",
    "LOLPIM_HETERO_CHOICES",
    "LOLPIM_IO_PRESET",
    "SYSTEMS",
    "Command",
    "BlockPool",
    "GpuLolpimSystem",
    "GpuSystem",
    "PimSystem",
    "ServingCaches",
    "SystemKind",
    "SystemRow",
    "XpuPimSystem",
    "foreign_options",
    "make_system",
    "pim_prefill_cycles",
    "system_config",
]


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
            raise DecodeError(
                f"the weights of {setup_model.name} alone do not fit {gpus} x {gpu.name}; "
                "use more --gpus"
            )
        self.block_bytes = _block_bytes(
            setup_model, kv_heads_per_device(setup_model, gpus, KvHeads.REPLICATE)
        )
        self.token_bytes = self.block_bytes // KV_BLOCK_TOKENS
        self.static = memory == MemoryPolicy.STATIC
        self.max_context = max_context
        self.tokens: dict[Any, int] = {}
        self.blocks: dict[Any, int] = {}
        self.used_blocks = 0
        self.held_tokens = 0  # sum of tokens

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
        self.held_tokens += tokens
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
        self.held_tokens += tokens
        return tuple(range(extra))

    def grow_each(self, rids: Iterable[Any]) -> int:
        """One more token for each of ``rids`` in order, as :meth:`grow` would, stopping
        before the first that does not fit; the count grown."""
        tokens, blocks, need = self.tokens, self.blocks, self._need
        grown = 0
        for rid in rids:
            new = tokens[rid] + 1
            extra = need(new) - blocks[rid]
            if self.used_blocks + extra > self.budget:
                break
            tokens[rid] = new
            blocks[rid] += extra
            self.used_blocks += extra
            grown += 1
        self.held_tokens += grown
        return grown

    def release(self, rid: Any) -> tuple[int, ...]:
        """Free a request's blocks."""
        self.held_tokens -= self.tokens.pop(rid)
        self.used_blocks -= self.blocks.pop(rid)
        return ()

    def usage(self) -> tuple[int, int]:
        """Bytes per GPU of the tokens and of the blocks held."""
        return self.held_tokens * self.token_bytes, self.used_blocks * self.block_bytes

    def stats(self) -> PoolStats:
        """Bytes per GPU: tokens held, blocks held, the KV budget."""
        return PoolStats(*self.usage(), self.budget * self.block_bytes)


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


# --------------------------------------------------------------------------- the systems


class PimSystem:
    """PIM modules only: :func:`run_decode` (its fast path :class:`StepCycles`); KV in the
    PIM allocators beside the weights; prefill as PIM GEMVs (:func:`pim_prefill_cycles`)."""

    kind = SystemKind.PIM

    def __init__(self, config: SystemConfig):
        if config.hw is None:
            raise DecodeError(f"the {self.kind} system needs a PIM preset")
        self.config = config
        self.hw: HardwareConfig = config.hw
        self._step_cycles: StepCycles | None = None

    @cached_property
    def caches(self) -> ServingCaches:
        """Kernels shared by this system's :meth:`cycles` calls."""
        return ServingCaches()

    @cached_property
    def gemv_cache(self) -> KernelCache:
        """Kernels shared by this system's :meth:`prefill` calls."""
        return KernelCache(self.hw, self.config.sched)

    @property
    def freq_hz(self) -> float:
        """The PIM clock."""
        return self.hw.module.freq_ghz * 1e9

    def setup(self, lengths: Sequence[int]) -> DecodeSetup:
        """The :class:`DecodeSetup` of one step of ``lengths``."""
        c = self.config
        return DecodeSetup(
            c.model,
            self.hw,
            tuple(lengths),
            tp=c.tp,
            pp=c.pp,
            partition=c.partition,
            sched=c.sched,
            memory=c.memory,
            micro_batches=c.micro_batches,
            max_context=c.max_context,
            check_capacity=c.check_capacity,
            mapping=c.mapping,
            score_overflow=c.score_overflow,
        )

    def step(
        self, lengths: Sequence[int], progress: Callable[[str], None] | None = None
    ) -> StepResult:
        """One step of :func:`run_decode`."""
        r: DecodeReport = run_decode(
            self.setup(lengths), progress=progress, energy=self.config.energy
        )
        return StepResult(
            seconds=r.step_seconds,
            cycles=r.cycles,
            tokens_per_s=r.tokens_per_s,
            partition_layers=r.partition_layers,
            activity={
                "mac_utilization": r.mac_utilization,
                "channel_utilization": r.channel_utilization,
            },
            link_bytes=r.energy.get("link_bytes", {}),
            report=r,
        )

    def cycles(self, lengths: Sequence[int]) -> StepTime:
        """:class:`StepCycles`: exactly :func:`run_decode`'s cycles, without its report."""
        if self._step_cycles is None:
            self._step_cycles = StepCycles(self.setup(lengths), self.caches)
        cycles = self._step_cycles.cycles(lengths)
        return StepTime(cycles / self.freq_hz, cycles)

    def pool(self) -> Any:
        """The KV allocator of ``tp x pp`` modules beside the weights."""
        c = self.config
        return weights_kv_pool(c.model, self.hw, c.tp * c.pp, c.memory, c.reservation)

    def fill_batch(self, candidates: Sequence[int]) -> tuple[int, ...]:
        """:func:`sim.systems.admission.fill_batch` on ``tp x pp`` modules."""
        c = self.config
        return fill_batch(c.model, self.hw, c.tp * c.pp, c.memory, candidates, c.max_context)

    def prefill(self, prompts: Sequence[int]) -> float:
        """:func:`pim_prefill_cycles` of the prompts' tokens, in seconds."""
        c = self.config
        tokens = int(sum(prompts))
        cycles = pim_prefill_cycles(c.model, self.hw, tokens, c.tp, c.pp, self.gemv_cache)
        return cycles / self.freq_hz

    def provenance_inputs(self) -> dict[str, Any]:
        """No device besides the PIM preset."""
        return {}


class XpuPimSystem(PimSystem):
    """xPU + PIM: :func:`run_hetero_decode`; ``gpus`` xPUs hold the weights, ``tp x pp``
    modules the KV cache only; prefill on the xPUs, then the prompts' KV to the modules."""

    kind = SystemKind.XPU_PIM

    def __init__(self, config: SystemConfig):
        super().__init__(config)
        if config.xpu is None:
            raise DecodeError(f"the {self.kind} system needs an xPU preset")
        self.xpu: XpuConfig = config.xpu
        self._hetero_cycles: HeteroCycles | None = None

    def setup(self, lengths: Sequence[int]) -> HeteroSetup:  # type: ignore[override]
        """The :class:`HeteroSetup` of one step of ``lengths`` (no micro-batches, no tuned
        mapping: the xPU runs the FC layers)."""
        pim = dataclasses.replace(
            super().setup(lengths), micro_batches=None, mapping=Mapping.FIXED.value
        )
        return HeteroSetup(pim, self.xpu, self.config.sub_batches, self.config.gpus)

    def step(
        self, lengths: Sequence[int], progress: Callable[[str], None] | None = None
    ) -> StepResult:
        """One step of :func:`run_hetero_decode`."""
        r: HeteroReport = run_hetero_decode(self.setup(lengths), params=self.config.energy)
        return StepResult(
            seconds=r.step_seconds,
            cycles=r.cycles,
            tokens_per_s=r.tokens_per_s,
            partition_layers=r.partition_layers,
            activity={d: v["utilization"] for d, v in r.devices.items()},
            link_bytes={"to_pim": r.link["to_pim_bytes"], "to_xpu": r.link["to_xpu_bytes"]},
            report=r,
        )

    def cycles(self, lengths: Sequence[int]) -> StepTime:
        """:class:`HeteroCycles`: exactly :func:`run_hetero_decode`'s cycles, without its
        report, its kernels shared across calls."""
        if self._hetero_cycles is None:
            self._hetero_cycles = HeteroCycles(self.setup(lengths), self.caches)
        cycles = self._hetero_cycles.cycles(lengths)
        return StepTime(cycles / self.freq_hz, cycles)

    def pool(self) -> Any:
        """The KV allocator of ``tp x pp`` modules holding no weights."""
        c = self.config
        return kv_allocator(c.model, self.hw, c.tp * c.pp, c.memory, c.reservation, weights=False)

    def fill_batch(self, candidates: Sequence[int]) -> tuple[int, ...]:
        """:func:`sim.systems.admission.fill_batch` on ``tp x pp`` modules without weights."""
        c = self.config
        return fill_batch(
            c.model, self.hw, c.tp * c.pp, c.memory, candidates, c.max_context, weights=False
        )

    def prefill(self, prompts: Sequence[int]) -> float:
        """The prompts on the xPUs, then every module's share of their KV over its link."""
        c = self.config
        seconds = xpu_prefill_seconds(self.xpu, c.model, prompts, c.gpus)
        kv = int(sum(prompts)) * c.model.kv_bytes_per_token
        share = math.ceil(kv / (c.tp * c.pp))
        return seconds + link_cycles(self.hw, share, "host") / self.freq_hz

    def provenance_inputs(self) -> dict[str, Any]:
        """The xPU."""
        return {"xpu": _device_record(self.xpu)}


#: LoL-PIM 8.1's GPU+PIM GPU: Table 7's GPU-GDDR6 (64 GB at the PIM node's 4,096 GB/s).
LOLPIM_GPU = "lolpim-gpu-gddr6"
#: LoL-PIM's modules with the extra GB of I/O-aware buffering, (3).
LOLPIM_IO_PRESET = "lolpim-aimx-io"
#: LoL-PIM's techniques on the PIM side (partition, scheduler, memory): ITPP (1), DPA's lazy
#: memory (2), ping-pong I/O-aware buffering (3).
LOLPIM_HETERO_CHOICES = {"partition": "itpp", "sched": "pingpong", "memory": "lazy"}


class GpuLolpimSystem(XpuPimSystem):
    """LoL-PIM 8.1's GPU+LoL-PIM: :class:`XpuPimSystem` with LoL-PIM's techniques
    (:data:`LOLPIM_HETERO_CHOICES`) whatever the configuration says; GPUs run the FC layers,
    LoL-PIM modules the attention. LoL-PIM sizes it by "halving PIM capacity" (8.1): at a
    system capacity C, C / 2 of LoL-PIM modules (``pimphony gpu-compare --hetero``)."""

    kind = SystemKind.GPU_LOLPIM

    def __init__(self, config: SystemConfig):
        super().__init__(dataclasses.replace(config, **LOLPIM_HETERO_CHOICES))


class GpuSystem:
    """GPUs only: :func:`run_gpu_decode`; paged KV (:class:`BlockPool`); prefill on the
    GPUs."""

    kind = SystemKind.GPU

    def __init__(self, config: SystemConfig):
        if config.gpu is None:
            raise DecodeError(f"the {self.kind} system needs a GPU preset")
        self.config = config
        self.gpu: XpuConfig = config.gpu
        self.hw = None
        self._gpu_cycles: GpuCycles | None = None

    def setup(self, lengths: Sequence[int]) -> GpuSetup:
        """The :class:`GpuSetup` of one step of ``lengths``."""
        c = self.config
        return GpuSetup(
            c.model,
            self.gpu,
            c.gpus,
            tuple(lengths),
            memory_fraction=c.gpu_memory_fraction,
            check_capacity=c.check_capacity,
        )

    def step(
        self, lengths: Sequence[int], progress: Callable[[str], None] | None = None
    ) -> StepResult:
        """One step of :func:`run_gpu_decode`."""
        r: GpuReport = run_gpu_decode(self.setup(lengths))
        reduces = r.allreduce["per_layer"] * self.config.model.layers if r.gpus > 1 else 0
        return StepResult(
            seconds=r.step_seconds,
            cycles=None,
            tokens_per_s=r.tokens_per_s,
            partition_layers={},
            activity={
                "compute_utilization": r.compute_utilization,
                "memory_utilization": r.memory_utilization,
            },
            link_bytes={"device": reduces * r.allreduce["bytes"]},
            report=r,
        )

    def cycles(self, lengths: Sequence[int]) -> StepTime:
        """:class:`GpuCycles`: exactly :func:`run_gpu_decode`'s seconds, without its report
        (no PIM clock)."""
        if self._gpu_cycles is None:
            self._gpu_cycles = GpuCycles(self.setup(lengths))
        return StepTime(self._gpu_cycles.seconds(lengths), None)

    def pool(self) -> BlockPool:
        """Paged KV blocks on every GPU."""
        c = self.config
        return BlockPool(c.model, self.gpu, c.gpus, c.gpu_memory_fraction, c.memory, c.reservation)

    def fill_batch(self, candidates: Sequence[int]) -> tuple[int, ...]:
        """:func:`sim.systems.gpu.gpu_fill_batch`."""
        c = self.config
        return gpu_fill_batch(c.model, self.gpu, c.gpus, candidates, c.gpu_memory_fraction)

    def prefill(self, prompts: Sequence[int]) -> float:
        """The prompts on the GPUs, tensor parallel."""
        c = self.config
        return xpu_prefill_seconds(self.gpu, c.model, prompts, c.gpus)

    def provenance_inputs(self) -> dict[str, Any]:
        """The GPU."""
        return {"gpu": _device_record(self.gpu)}


# --------------------------------------------------------------------------- the registry


# --------------------------------------------------------------------------- LibraPIM, DCC Fig. 8

#: What each row reads: the batch-grouped systems their groups, the sliced ones ``--no-dex``.
_LIBRAPIM_READS = ("tp", "sched", "preset", "xpu")
_LIBRAPIM_SERVE = ("memory", "max_context")
#: Options of the other rows, left out of a LibraPIM step's provenance.
_LIBRAPIM_OMITS = (
    "modules", "pp", "micro_batches", "partition", "memory", "max_context", "ignore_capacity",
    "energy", "mapping", "gpu", "gpus", "gpu_memory_fraction", "sub_batches",
)  # fmt: skip


def _librapim_row(kind: SystemKind) -> SystemRow:
    spec = LIBRAPIM_SPECS[kind]
    reads = _LIBRAPIM_READS + (() if spec.serial else ("groups",))
    if not spec.serial and spec.banks == BankAccess.SLICED:
        reads += ("no_dex",)
    if spec.offload != Offload.NONE:  # DBO's FFN offload (or the best one) runs on PIM
        reads += ("offload",)
    defaults: dict[str, Any] = {"preset": LIBRAPIM_PRESET, "xpu": LIBRAPIM_XPU, "tp": DEFAULT_TP}
    defaults |= {"groups": DEFAULT_GROUPS, "no_dex": False}  # --offload unset: per bank
    return SystemRow(
        f"LibraPIM 6.1: {spec.summary} (docs/librapim.md)",
        lambda config: LibrapimRowSystem(kind, config),
        {Command.DECODE: reads, Command.SERVE: reads + _LIBRAPIM_SERVE},
        _LIBRAPIM_OMITS,
        librapim_report_stem,
        librapim_setup_digest,
        format_librapim_report,
        plot_librapim_report,
        {dest: value for dest, value in defaults.items() if dest in reads},
    )


#: LibraPIM's rows of :data:`sim.systems.registry.SYSTEMS`.
LIBRAPIM_ROWS: dict[SystemKind, SystemRow] = {kind: _librapim_row(kind) for kind in LIBRAPIM_SPECS}


def _attacc_row(kind: SystemKind, summary: str) -> SystemRow:
    dcc = ("table", "budget", "verify") if FIG8_SPECS[kind].dcc else ()
    return SystemRow(
        summary,
        functools.partial(AttAccGpuSystem, kind=kind),
        {
            Command.DECODE: ("backend", "ignore_capacity", *dcc),
            Command.SERVE: ("backend", "memory", "max_context", *dcc),
        },
        (
            "modules", "tp", "pp", "micro_batches", "partition", "sched", "memory",
            "max_context", "preset", "mapping", "energy", "gpu", "gpus",
            "gpu_memory_fraction", "xpu", "sub_batches",
        ),
        attacc_report_stem, attacc_setup_digest, format_attacc_report, plot_attacc_report,
    )  # fmt: skip


#: DCC Fig. 8's AttAcc systems as rows of :data:`sim.systems.registry.SYSTEMS`.
FIG8_ROWS: dict[SystemKind, SystemRow] = {
    SystemKind.ATTACC_BASE: _attacc_row(
        SystemKind.ATTACC_BASE, "DCC Fig. 8: a GPU, attention on AttAcc PIM"
    ),
    SystemKind.ATTACC_BASE_DCC: _attacc_row(
        SystemKind.ATTACC_BASE_DCC,
        "DCC Fig. 8: attacc-base on DCC's mappings, QKV and projection on PIM where faster",
    ),
    SystemKind.ATTACC_FULL: _attacc_row(
        SystemKind.ATTACC_FULL, "DCC Fig. 8: attacc-base with the FFN shared by GPU and PIM"
    ),
    SystemKind.ATTACC_FULL_DCC: _attacc_row(
        SystemKind.ATTACC_FULL_DCC, "DCC Fig. 8: attacc-full on DCC's mappings"
    ),
}


#: The registry: ``--system`` of ``pimphony decode`` and ``pimphony serve``.
SYSTEMS: dict[SystemKind, SystemRow] = {
    SystemKind.PIM: SystemRow(
        "PIM modules only (default)",
        PimSystem,
        {
            Command.DECODE: (
                "modules", "tp", "pp", "micro_batches", "partition", "sched", "memory",
                "max_context", "preset", "ignore_capacity", "energy", "mapping",
                "score_overflow",
            ),
            Command.SERVE: (
                "tp", "pp", "micro_batches", "partition", "sched", "memory", "max_context",
                "preset", "score_overflow",
            ),
        },
        ("system", "gpu", "gpus", "gpu_memory_fraction", "xpu", "sub_batches"),
        report_stem, setup_digest, format_report, plot_report,
    ),
    SystemKind.GPU: SystemRow(
        "N GPUs, tensor parallel",
        GpuSystem,
        {
            Command.DECODE: ("gpu", "gpus", "gpu_memory_fraction"),
            Command.SERVE: ("gpu", "gpus", "gpu_memory_fraction", "memory", "max_context"),
        },
        ("xpu", "sub_batches", "energy"),
        gpu_report_stem, gpu_setup_digest, format_gpu_report, plot_gpu_report,
    ),
    SystemKind.XPU_PIM: SystemRow(
        "FC layers on xPUs (--gpus of them, tensor parallel), attention on PIM modules",
        XpuPimSystem,
        {
            Command.DECODE: (
                "modules", "tp", "pp", "partition", "sched", "memory", "max_context", "preset",
                "ignore_capacity", "xpu", "gpus", "sub_batches", "energy",
            ),
            Command.SERVE: (
                "tp", "pp", "partition", "sched", "memory", "max_context", "preset", "xpu",
                "gpus", "sub_batches",
            ),
        },
        ("gpu", "gpu_memory_fraction"),
        hetero_report_stem, hetero_setup_digest, format_hetero_report, plot_hetero_report,
    ),
    SystemKind.GPU_LOLPIM: SystemRow(
        "LoL-PIM 8.1's GPU+LoL-PIM: xpu+pim with ITPP, ping-pong and DPA "
        f"(default {LOLPIM_GPU} GPUs, {LOLPIM_IO_PRESET} modules)",
        GpuLolpimSystem,
        {
            Command.DECODE: (
                "modules", "tp", "pp", "preset", "ignore_capacity", "xpu", "gpus",
                "sub_batches", "energy",
            ),
            Command.SERVE: ("tp", "pp", "preset", "xpu", "gpus", "sub_batches"),
        },
        ("gpu", "gpu_memory_fraction", "partition", "sched", "memory", "max_context"),
        hetero_report_stem, hetero_setup_digest, format_hetero_report, plot_hetero_report,
        {"preset": LOLPIM_IO_PRESET, "xpu": LOLPIM_GPU},
    ),
    **LIBRAPIM_ROWS,
    **FIG8_ROWS,
}  # fmt: skip


def make_system(kind: SystemKind | str, config: SystemConfig) -> System:
    """The system of ``kind`` built from ``config``."""
    return SYSTEMS[SystemKind(kind)].build(config)


def foreign_options(
    args: argparse.Namespace, kind: SystemKind, command: Command, default: Callable[[str], Any]
) -> str | None:
    """The options of another row that ``args`` gives a value other than their default
    (``default(dest)``: the command parser's), each with the first row that reads it, as
    ``--system K does not use ...; drop them``; ``None`` when there are none."""
    mine = SYSTEMS[kind].options[command]
    owner: dict[str, SystemKind] = {}
    for other, row in SYSTEMS.items():
        for dest in row.options[command]:
            owner.setdefault(dest, other)
    foreign = [
        dest for dest in owner if dest not in mine and getattr(args, dest, None) != default(dest)
    ]
    if not foreign:
        return None
    named = ", ".join(f"--{d.replace('_', '-')} (--system {owner[d]})" for d in foreign)
    return f"--system {kind} does not use {named}; drop them"


def system_config(args: argparse.Namespace, kind: SystemKind, command: Command) -> SystemConfig:
    """The :class:`SystemConfig` of ``kind`` that ``command``'s parsed options describe:
    the presets its row reads loaded, ``--modules`` checked against ``--tp`` (x ``--pp``),
    the ``--energy`` preset loaded and checked against the PIM hardware."""
    reads = SYSTEMS[kind].options[command]
    model = load_model(args.model)
    hw = load_preset(args.preset) if "preset" in reads else None
    xpu = load_xpu(args.xpu) if "xpu" in reads else None
    gpu = load_xpu(args.gpu) if "gpu" in reads else None
    modules = getattr(args, "modules", None)
    if "modules" in reads and modules is not None:
        if "pp" in reads and modules != args.tp * args.pp:
            raise DecodeError(
                f"--modules {modules} must equal --tp x --pp = {args.tp} x {args.pp} = "
                f"{args.tp * args.pp}"
            )
        if "pp" not in reads and modules != args.tp:
            raise DecodeError(f"--modules {modules} must equal --tp = {args.tp}")
    energy = None
    if "energy" in reads:
        energy = load_energy(args.energy)
        assert hw is not None
        energy.chips(hw)  # EnergyConfigError when the preset's chips do not fit hw
    return SystemConfig(
        model,
        hw,
        tp=args.tp,
        pp=args.pp,
        partition=args.partition,
        sched=args.sched,
        memory=args.memory,
        micro_batches=args.micro_batches,
        max_context=args.max_context,
        xpu=xpu,
        sub_batches=args.sub_batches,
        gpu=gpu,
        gpus=args.gpus,
        gpu_memory_fraction=args.gpu_memory_fraction,
        check_capacity=not getattr(args, "ignore_capacity", False),
        mapping=getattr(args, "mapping", Mapping.FIXED.value),
        energy=energy,
        groups=getattr(args, "groups", None),
        slicing=not getattr(args, "no_dex", False),
        offload=OffloadReading(getattr(args, "offload", OffloadReading.PER_BANK)),
        score_overflow=getattr(args, "score_overflow", ScoreOverflow.GPR_TILES.value),
        **{
            k: getattr(args, k, None)
            for k in ("backend", "table", "budget", "verify")
            if k in reads
        },
    )
