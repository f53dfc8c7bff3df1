"""What every system that runs an LLM decode step offers: the :class:`System` interface.

A system (PIM modules only, an xPU with PIM for attention, GPUs: the rows of
:data:`sim.systems.registry.SYSTEMS`) is built once from a :class:`SystemConfig` and then
asked, for a batch's context lengths, for its step with the full report (:meth:`System.step`,
``pimphony decode``), for the step's time alone (:meth:`System.cycles`, the fast path of
``pimphony serve``), for its KV memory (:meth:`System.pool`) and for the time of prefilling
prompts (:meth:`System.prefill`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pimphony.compiler.llm import ModelSpec
from pimphony.compiler.plan import ScoreOverflow
from pimphony.models.config import HardwareConfig
from pimphony.models.dbo import OffloadReading
from pimphony.models.energy import EnergyParams
from pimphony.models.memory import MemoryPolicy
from pimphony.models.xpu_config import XpuConfig

__all__ = [
    "Command",
    "KvPool",
    "PoolStats",
    "StepReport",
    "StepResult",
    "StepTime",
    "System",
    "SystemConfig",
    "SystemKind",
    "SystemRow",
]


class SystemKind(StrEnum):
    """What runs the decode step (``--system``): one member per row of
    :data:`sim.systems.registry.SYSTEMS`."""

    PIM = "pim"
    GPU = "gpu"
    XPU_PIM = "xpu+pim"
    # LoL-PIM 8.1's GPU+LoL-PIM: xpu+pim with LoL-PIM's GPU, modules and techniques
    GPU_LOLPIM = "gpu+lolpim"
    # LibraPIM 6.1's four systems and its analysis rows (sim/systems/librapim.py)
    NPU_AIM = "npu+aim"
    ATTACC = "attacc"
    NEUPIMS = "neupims"
    LIBRAPIM = "librapim"
    LIBRAPIM_BEST = "librapim-best"
    AIM_PIPELINED = "aim-pipelined"
    LIBRAPIM_NO_DBO = "librapim-no-dbo"
    LIBRAPIM_MEASURED = "librapim-measured"
    # DCC Fig. 8's AttAcc systems (a GPU with AttAcc PIM; its GPU baseline is GPU above):
    # sim.systems.attacc_gpu
    ATTACC_BASE = "attacc-base"
    ATTACC_BASE_DCC = "attacc-base+dcc"
    ATTACC_FULL = "attacc-full"
    ATTACC_FULL_DCC = "attacc-full+dcc"


@dataclass(frozen=True)
class SystemConfig:
    """Everything a system depends on besides the batch's lengths.

    ``hw`` is the PIM preset (PIM, xPU+PIM); ``xpu`` the xPU of xPU+PIM; ``gpu``, ``gpus``
    and ``gpu_memory_fraction`` the GPU system; ``gpus`` is also the count of xPU+PIM's
    tensor-parallel xPUs. ``tp``, ``pp``, ``partition``, ``sched``,
    ``memory``, ``micro_batches``, ``max_context``, ``sub_batches`` and ``mapping`` mean what
    they mean for ``pimphony decode`` (``docs/decode.md``); ``check_capacity`` off times a
    batch that does not fit; ``energy`` is the PIM energy preset (``None``: the default).
    ``groups`` (``None``: the system's default), ``slicing`` and ``offload`` are LibraPIM's
    batch groups, DEX bank slicing and DBO's offload reading (``--groups``, ``--no-dex``,
    ``--offload``). ``score_overflow`` is what the PIM system does with scores beyond the
    GPR (``--score-overflow``, ``compiler.plan.SCORE_OVERFLOWS``).
    ``backend``, ``table``, ``budget`` and ``verify`` are the AttAcc systems' PIM back end and
    DCC's lookup table and search effort (``None``: DCC Fig. 8's).
    A system reads only its own fields; all but ``model`` and ``hw`` are keyword-only.
    """

    model: ModelSpec
    hw: HardwareConfig | None = None
    _: KW_ONLY
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
    check_capacity: bool = True
    mapping: str = "fixed"
    energy: EnergyParams | None = None
    groups: int | None = None
    slicing: bool = True
    offload: OffloadReading = OffloadReading.PER_BANK
    score_overflow: str = ScoreOverflow.GPR_TILES.value
    backend: str | None = None
    table: Path | None = None
    budget: int | None = None
    verify: int | None = None

    @property
    def reservation(self) -> int:
        """Tokens a request may reach: the static reservation, else the model's window."""
        if self.memory == MemoryPolicy.STATIC:
            return self.max_context or self.model.context_window
        return self.model.context_window


class StepReport(Protocol):
    """A decode step's full report (``DecodeReport``, ``HeteroReport``, ``GpuReport``)."""

    step_seconds: float
    tokens_per_s: float
    energy: dict[str, Any]
    provenance: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The JSON report."""
        ...


@dataclass(frozen=True)
class StepResult:
    """One decode step with what later stages read of it, so that none re-plans it.

    ``cycles`` is the PIM clock's (``None`` on a system without PIM); ``partition_layers``
    the attention partition the step chose per layer (empty without PIM); ``activity`` each
    device's busy share as the report states it; ``link_bytes`` the bytes over each link;
    ``report`` the full report (``to_dict`` is the JSON of ``pimphony decode``).
    """

    seconds: float
    cycles: int | None
    tokens_per_s: float
    partition_layers: Mapping[str, int]
    activity: Mapping[str, Any]
    link_bytes: Mapping[str, int]
    report: StepReport


@dataclass(frozen=True)
class StepTime:
    """A decode step's time alone (the serving fast path): seconds and PIM cycles (``None``
    on a system without PIM)."""

    seconds: float
    cycles: int | None


@dataclass(frozen=True)
class PoolStats:
    """KV bytes in use (tokens) and held (chunks, slots or blocks) against the capacity."""

    used_bytes: int
    reserved_bytes: int
    capacity_bytes: int


@runtime_checkable
class KvPool(Protocol):
    """A system's KV memory as the serving loop admits, grows and releases requests in it."""

    def admit(self, rid: Any, tokens: int, *, raise_on_oom: bool = True) -> bool:
        """Take the memory of ``tokens`` tokens; ``False`` (or ``OutOfMemory``) if full."""
        ...

    def grow(self, rid: Any, tokens: int = 1) -> tuple[int, ...]:
        """``tokens`` more tokens (``OutOfMemory`` if full)."""
        ...

    def grow_each(self, rids: Iterable[Any]) -> int:
        """One more token for each of ``rids`` in order, as :meth:`grow` would, stopping
        before the first that does not fit (nothing grown for it); the count grown."""
        ...

    def release(self, rid: Any) -> tuple[int, ...]:
        """Free a request's memory."""
        ...

    def stats(self) -> Any:
        """Bytes used, held and the capacity (``used_bytes``, ``reserved_bytes``,
        ``capacity_bytes``)."""
        ...

    def usage(self) -> tuple[int, int]:
        """``stats()``'s ``used_bytes`` and ``reserved_bytes``, fast (every serving step)."""
        ...


@runtime_checkable
class System(Protocol):
    """One system running LLM decode steps (the rows of ``sim.systems.registry.SYSTEMS``)."""

    config: SystemConfig

    def setup(self, lengths: Sequence[int]) -> Any:
        """The validated setup of one step of ``lengths`` (what reports name and digest)."""
        ...

    def step(
        self, lengths: Sequence[int], progress: Callable[[str], None] | None = None
    ) -> StepResult:
        """One decode step of ``lengths`` with its full report (``pimphony decode``)."""
        ...

    def cycles(self, lengths: Sequence[int]) -> StepTime:
        """The same step's time alone, fast (``pimphony serve``)."""
        ...

    def pool(self) -> KvPool:
        """An empty KV memory of the system (admission)."""
        ...

    def fill_batch(self, candidates: Sequence[int]) -> tuple[int, ...]:
        """The longest prefix of ``candidates`` (context lengths, FCFS) the memory holds."""
        ...

    def prefill(self, prompts: Sequence[int]) -> float:
        """Seconds to prefill ``prompts`` (tokens each) and place their KV."""
        ...

    def provenance_inputs(self) -> dict[str, Any]:
        """The devices a report's provenance records beside the PIM preset (``gpu``,
        ``xpu``: name, digest, values)."""
        ...


class Command(StrEnum):
    """The commands that run any system."""

    DECODE = "decode"
    SERVE = "serve"


@dataclass(frozen=True)
class SystemRow:
    """One system: what it is (``--system`` help), how it is built, the options (``dest``
    names) each command reads for it, the options its ``decode`` report's provenance leaves
    out (so that reports stay what they were before those options existed), and its step
    report's file stem and inputs digest (of the system's ``setup``), text and figure.
    ``defaults``: the options (``dest``) whose default is the row's own."""

    summary: str
    build: Callable[[SystemConfig], System]
    options: dict[Command, tuple[str, ...]]
    provenance_omits: tuple[str, ...]
    stem: Callable[[Any], str]
    digest: Callable[[Any], str]
    text: Callable[[Any], str]
    plot: Callable[[Any, Path], Path]
    defaults: Mapping[str, Any] = field(default_factory=dict)
