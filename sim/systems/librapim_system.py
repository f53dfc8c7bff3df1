"""LibraPIM's eight systems (:data:`~sim.systems.librapim.LIBRAPIM_SPECS`) as rows of the
system registry: :data:`sim.systems.registry.LIBRAPIM_ROWS`, one :class:`LibrapimRowSystem` each.

A row's step is :func:`~sim.systems.librapim.run_librapim` of that one system on ``tp``
devices (``librapim-hbm2`` PIM and a ``librapim-npu`` NPU each unless ``--preset`` /
``--xpu`` name others), so ``pimphony decode --system librapim`` states exactly what
``pimphony librapim --system librapim`` does for the same batch; ``pimphony serve`` times its
steps the same way. Each device holds ``1/tp`` of the weights and the KV (the PIM memory
admits requests as the PIM-only system's does); prefill runs on the NPUs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import ModelSpec
from pimphony.models.config import HardwareConfig
from pimphony.models.fileio import pyplot, write_figure
from pimphony.models.hub import link_cycles
from pimphony.models.xpu_config import XpuConfig
from pimphony.sim.provenance import device_record, inputs_digest
from pimphony.sim.systems.admission import fill_batch, weights_kv_pool
from pimphony.sim.systems.base import (
    StepResult,
    StepTime,
    SystemConfig,
    SystemKind,
)
from pimphony.sim.systems.costs import xpu_prefill_seconds
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.librapim import (
    DEFAULT_GROUPS,
    DEFAULT_TP,
    LIBRAPIM_SPECS,
    OFFLOAD_READINGS,
    LibrapimStep,
    OffloadReading,
    check_step,
    format_inputs,
    format_librapim,
    librapim_cache,
    offload_reading,
    run_librapim,
    step_inputs,
)
from pimphony.sim.systems.report import digest_inputs
from pimphony.sim.systems.setup import DecodeError

__all__ = [
    "LibrapimReport",
    "LibrapimRowSystem",
    "LibrapimSetup",
    "format_librapim_report",
    "librapim_report_stem",
    "librapim_setup_digest",
    "plot_librapim_report",
]


@dataclass(frozen=True)
class LibrapimSetup:
    """One step of LibraPIM system ``kind``: ``lengths`` on ``tp`` devices of PIM ``hw`` and
    NPU ``xpu``, ``groups`` batch groups (at most the batch), ``sched`` the PIM scheduler,
    ``slicing`` the DEX banks sliced (else exclusive), ``offload`` where DBO's offloaded FFN
    runs (``OFFLOAD_READINGS``); checked on construction."""

    kind: SystemKind
    model: ModelSpec
    hw: HardwareConfig
    xpu: XpuConfig
    lengths: tuple[int, ...]
    tp: int = DEFAULT_TP
    groups: int = DEFAULT_GROUPS
    sched: str = "dcs"
    slicing: bool = True
    offload: OffloadReading = OffloadReading.PER_BANK

    def __post_init__(self) -> None:
        if self.kind not in LIBRAPIM_SPECS:
            raise DecodeError(f"{self.kind} is not a LibraPIM system")
        check_step(self.model, self.lengths, self.groups, self.tp)
        object.__setattr__(self, "offload", offload_reading(self.offload))


@dataclass(frozen=True)
class LibrapimReport:
    """One LibraPIM system's decode step: its inputs and its :class:`LibrapimStep`;
    :meth:`to_dict` is the JSON report (the inputs, ``dataclasses.asdict`` of the step,
    provenance)."""

    setup: LibrapimSetup
    result: LibrapimStep
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def step_seconds(self) -> float:
        """The simulated step."""
        return self.result.step_seconds

    @property
    def tokens_per_s(self) -> float:
        """Requests over the step."""
        return self.result.tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        """The report as one JSON-ready dict."""
        s = self.setup
        return {
            "system": str(s.kind),
            **step_inputs(s.model, s.hw.name, s.xpu.name, s.lengths, s.tp),
            "sched": s.sched,
            "slicing": s.slicing,
            **({} if s.offload == OffloadReading.PER_BANK else {"offload": str(s.offload)}),
            **dataclasses.asdict(self.result),
            "provenance": self.provenance,
        }


def librapim_setup_digest(setup: LibrapimSetup) -> str:
    """SHA-256 of everything a LibraPIM step depends on."""
    inputs = digest_inputs(setup)
    if inputs["offload"] == OffloadReading.PER_BANK:  # added later: digests stay as they were
        del inputs["offload"]
    return inputs_digest(inputs)


def librapim_report_stem(setup: LibrapimSetup) -> str:
    """File stem naming a LibraPIM step, ending in a short hash of every input."""
    s = setup
    return (
        f"{s.model.name}-B{len(s.lengths)}-T{max(s.lengths)}-{s.kind}-{s.xpu.name}+{s.tp}x"
        f"{s.hw.name}-g{s.groups}-{librapim_setup_digest(s)[:8]}"
    )


def format_librapim_report(report: LibrapimReport) -> str:
    """The step as text: its inputs, then :func:`format_librapim` of the one system."""
    s = report.setup
    lines = [format_inputs(s.model, s.hw.name, s.xpu.name, s.lengths, s.tp)]
    if s.offload != OffloadReading.PER_BANK:
        lines.append(f"DBO's offloaded FFN: {s.offload} ({OFFLOAD_READINGS[s.offload].summary})")
    return "\n".join([*lines, format_librapim({str(s.kind): report.result})])


#: The bars of :func:`plot_librapim_report`: (label, "busy" or "utilisation", key).
_BARS = (
    ("NPU busy", "busy", "xpu"),
    ("PIM busy", "busy", "pim"),
    ("NPU FLOP/s", "utilisation", "xpu"),
    ("PIM MAC issue", "utilisation", "pim_mac_issue"),
    ("PIM FLOP/s", "utilisation", "pim_flops"),
)


def plot_librapim_report(report: LibrapimReport, path: Path) -> Path:
    """PNG: each device's busy share of the step and its utilisation (per cent)."""
    r, s = report.result, report.setup
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    values = [100 * getattr(r, group)[key] for _, group, key in _BARS]
    colours = ["#264653" if group == "busy" else "#e76f51" for _, group, _ in _BARS]
    bars = ax.bar([label for label, _, _ in _BARS], values, color=colours)
    ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xlabel("device: busy share (dark) and utilisation (light) of the step")
    ax.set_ylabel("share of the step (%)")
    ax.set_ylim(0, max(100.0, *values) * 1.08)
    ax.set_title(
        f"{s.model.name} B={len(s.lengths)} T={max(s.lengths)} on {s.kind} ({s.tp} x "
        f"{s.xpu.name} + {s.hw.name}, {r.groups} group(s))\n"
        f"{r.step_seconds * 1e3:.3f} ms per step, {r.tokens_per_s:,.0f} tokens/s",
        fontsize=9,
    )
    fig.tight_layout()
    return write_figure(fig, path)


class LibrapimRowSystem:
    """LibraPIM system ``kind`` behind the :class:`~sim.systems.base.System` interface.

    Step and fast path are the same :func:`run_librapim` (memoised per batch, its kernels
    shared by steps of the same longest context); capacity is not checked by a step (as in
    ``pimphony librapim``), only by admission: :meth:`pool` is the PIM allocator of ``tp``
    devices beside their weights. Prefill (a choice: LibraPIM times decode only) runs on the
    ``tp`` NPUs (:func:`~sim.systems.costs.xpu_prefill_seconds`), then each device's share
    of the prompts' KV crosses its host link to PIM, as on the xPU+PIM system.
    """

    def __init__(self, kind: SystemKind, config: SystemConfig):
        if config.hw is None or config.xpu is None:
            raise DecodeError(f"the {kind} system needs a PIM and an xPU preset")
        self.kind = kind
        self.config = config
        self.hw: HardwareConfig = config.hw
        self.xpu: XpuConfig = config.xpu
        self._steps: dict[tuple[int, ...], LibrapimStep] = {}
        # librapim_cache per longest context (the size its DPA programs are encoded for)
        self._caches: dict[int, KernelCache] = {}

    @property
    def freq_hz(self) -> float:
        """The PIM clock."""
        return self.hw.module.freq_ghz * 1e9

    def setup(self, lengths: Sequence[int]) -> LibrapimSetup:
        """The :class:`LibrapimSetup` of one step of ``lengths`` (``groups`` capped at the
        batch)."""
        c = self.config
        groups = min(c.groups or DEFAULT_GROUPS, len(lengths)) if lengths else 1
        return LibrapimSetup(
            self.kind, c.model, self.hw, self.xpu, tuple(lengths), c.tp, groups, c.sched,
            c.slicing, c.offload,
        )  # fmt: skip

    def _run(self, setup: LibrapimSetup) -> LibrapimStep:
        if setup.lengths not in self._steps:
            longest = max(setup.lengths)
            if longest not in self._caches:
                self._caches[longest] = librapim_cache(self.hw, setup.sched, setup.lengths)
            s = setup
            self._steps[s.lengths] = run_librapim(
                s.model, s.hw, s.xpu, s.lengths, s.groups, s.sched, s.tp, (s.kind,),
                slicing=s.slicing, cache=self._caches[longest], offload=s.offload,
            )[s.kind]  # fmt: skip
        return self._steps[setup.lengths]

    def step(
        self, lengths: Sequence[int], progress: Callable[[str], None] | None = None
    ) -> StepResult:
        """One step of :func:`run_librapim` (no partition per layer, no link bytes: the
        step does not state them)."""
        setup = self.setup(lengths)
        r = self._run(setup)
        return StepResult(
            seconds=r.step_seconds,
            cycles=r.cycles,
            tokens_per_s=r.tokens_per_s,
            partition_layers={},
            activity={
                **{f"busy_{d}": v for d, v in r.busy.items()},
                **{f"utilisation_{k}": v for k, v in r.utilisation.items()},
            },
            link_bytes={},
            report=LibrapimReport(setup, r),
        )

    def cycles(self, lengths: Sequence[int]) -> StepTime:
        """The same :func:`run_librapim` step's time."""
        r = self._run(self.setup(lengths))
        return StepTime(r.step_seconds, r.cycles)

    def pool(self) -> Any:
        """The KV allocator of ``tp`` PIM devices beside their share of the weights."""
        c = self.config
        return weights_kv_pool(c.model, self.hw, c.tp, c.memory, c.reservation)

    def fill_batch(self, candidates: Sequence[int]) -> tuple[int, ...]:
        """:func:`sim.systems.admission.fill_batch` on ``tp`` devices beside the weights."""
        c = self.config
        return fill_batch(c.model, self.hw, c.tp, c.memory, candidates, c.max_context)

    def prefill(self, prompts: Sequence[int]) -> float:
        """The prompts on the ``tp`` NPUs, then each device's share of their KV over its
        host link."""
        c = self.config
        seconds = xpu_prefill_seconds(self.xpu, c.model, prompts, c.tp)
        kv = int(sum(prompts)) * c.model.kv_bytes_per_token
        return seconds + link_cycles(self.hw, math.ceil(kv / c.tp), "host") / self.freq_hz

    def provenance_inputs(self) -> dict[str, Any]:
        """The NPU."""
        return {"xpu": device_record(self.xpu)}
