"""A GPU with AttAcc PIM for attention: DCC Fig. 8's systems, one generation step costed per
phase, and its four AttAcc rows of :data:`sim.systems.registry.SYSTEMS`.

DCC V-B: "AttAccBase runs only attention layers on PIM, and AttAccFull runs attention layers
and a portion of the Feed-forward on the PIM side (See [20]), while the largest portion of
Feed-forward runs on GPU. For both AttAcc variants, QKV generation, projection and Other run
on GPU. However, with DCC's optimizations, we enable QKV generation and projection to be also
executed on the PIM side". The systems (:data:`FIG8_SPECS`, keyed by
:class:`~sim.systems.base.SystemKind`), per decoder layer of one generation step of ``B``
requests at context ``L``:

- ``gpu``: every part on the host GPU (:func:`sim.systems.gpu.run_gpu_decode`, one GPU);
- ``attacc-base``: attention (QK^T, softmax, SV: the ``attn`` kernel, ``B x heads`` heads of
  ``L`` tokens) on AttAcc with its default mapping (DCC V), K/V resident, plus the new token's
  K and V written into PIM; the rest on the GPU. The KV cache is kept in PIM layout padded to
  whole softmax-buffer entries across the bank groups (``bank_groups x lanes`` = 256 tokens on
  AttAcc: the default spreads the tokens over 16 bank groups, 16 per entry; padded scores are
  masked), so PIM attention is costed at the context rounded up to that;
- ``attacc-full``: also the FFN GEMMs shared between GPU and PIM. The AttAcc simulator's
  ``--ffopt`` (``System._ff_parallel``) splits them in proportion to the two devices'
  throughputs; we do the same with the two measured times, ``t = 1 / (1/t_gpu + 1/t_pim)``
  (each device takes the share of weight rows it finishes in ``t``);
- ``+dcc``: every PIM kernel on DCC's mapping (``pimphony tune``'s predicted search, the
  end-to-end objective), and QKV generation and projection on PIM (``batched-gemv``, weights
  resident) where that is faster than the GPU.

"Other" is the norms, residuals and activation, on the GPU in every system.
:func:`step_phases` costs one step; ``pimphony dcc-fig8`` (:mod:`sim.experiments.dcc_fig8`)
sums the steps of a run.

**The rows** (:data:`sim.systems.registry.FIG8_ROWS`, :class:`AttAccGpuSystem`): ``pimphony
decode`` and ``pimphony serve --system attacc-base`` (``attacc-base+dcc``, ``attacc-full``,
``attacc-full+dcc``). A decode step of ``lengths`` is :func:`step_phases` of ``len(lengths)``
requests at the longest length: Fig. 8 costs a uniform context, and a batch of mixed lengths
runs its attention as one batched ``attn`` kernel padded to the longest context (the layout
already pads every request to whole softmax entries; the GPU phases do not depend on the
context). The weights are on the GPU (the back end's host xPU, ``[system] host_xpu``: an A100
on ``attacc``); the KV cache lives in the back end's PIM memory, ``devices x device_bytes`` of
its ``[system]`` (``configs/backends/attacc.toml``: 5 x 16 GiB, DCC V's "5 PIM-enabled HBM
devices, corresponding to 80GB GPU memory"), allocated as PIMphony's allocators allocate a
module (:func:`kv_geometry`); prefill runs on the GPU ("the prefill runs on the GPU in every
system", :func:`sim.systems.costs.xpu_prefill_seconds`), then the prompts' KV is written into
PIM at the rate a step writes its new token's (:func:`kv_write_seconds`). Their options
(:func:`add_arguments`) are absent from the parsed options unless given, so that other rows'
reports stay as they were; unset, they are Fig. 8's: back end
:data:`~sim.analysis.dcc_shapes.FIG8_BACKEND`, DCC's default search effort
(:data:`~compiler.dcc.predictor.SEARCH_BUDGET`, ``SEARCH_VERIFY``), no lookup table.
DCC's search takes 15-30 s per new kernel shape on a
shared machine (GPT3-13B, batch 1: three shapes, 90 s for ``attacc-base+dcc``); about half of
that does not depend on ``--budget`` (enumerating, pruning and predicting the drafts), so a
lookup table holding the shapes (``--table``, filled by ``pimphony dcc-lut``) is what makes a
``+dcc`` step take seconds; the other rows search nothing. A context past what the back end's
softmax buffer holds (4,096 tokens on ``attacc``, ``group.buffer_bytes``) is refused by the
``attn`` kernel's cost, as in Fig. 8."""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pimphony.compiler.dcc.cost import DraftCost, Placement, draft_cost
from pimphony.compiler.dcc.predictor import SEARCH_BUDGET, SEARCH_VERIFY
from pimphony.compiler.dcc.schedule import DccKernel, Draft
from pimphony.compiler.dcc.tune import default_draft
from pimphony.compiler.llm import LayerOp, ModelSpec
from pimphony.models.backends import BackendConfig, load_backend
from pimphony.models.fileio import pyplot, write_figure
from pimphony.models.memory import ChunkGeometry, MemoryPolicy, OutOfMemory, make_allocator
from pimphony.sim.analysis.dcc_shapes import (
    ATTN_KERNEL,
    FC_KERNEL,
    FIG8_BACKEND,
    attention_sizes,
    fc_sizes,
)
from pimphony.sim.analysis.dcc_table import add_search_options
from pimphony.sim.provenance import inputs_digest
from pimphony.sim.systems.base import (
    StepResult,
    StepTime,
    SystemConfig,
    SystemKind,
)
from pimphony.sim.systems.costs import xpu_prefill_seconds
from pimphony.sim.systems.energy import xpu_energy
from pimphony.sim.systems.gpu import GpuSetup, gpu_op_costs
from pimphony.sim.systems.setup import DecodeError

if TYPE_CHECKING:
    from pimphony.compiler.dcc.predictor import LookupTable

__all__ = [
    "ENERGY_NOT_MODELLED",
    "FIG8_SPECS",
    "PHASE_COLOURS",
    "AttAccGpuSystem",
    "AttAccReport",
    "AttAccSetup",
    "Fig8Spec",
    "Fig8Step",
    "Phase",
    "PimTimes",
    "add_arguments",
    "attacc_report_stem",
    "attacc_setup_digest",
    "energy_block",
    "fc_default_draft",
    "format_attacc_report",
    "kv_geometry",
    "kv_write_seconds",
    "plot_attacc_report",
    "step_energy",
    "step_phases",
]


class Phase(StrEnum):
    """Fig. 8's phases."""

    ATTENTION = "attention"
    QKV = "qkv"
    PROJECTION = "projection"
    FFN = "ffn"
    OTHER = "other"


@dataclass(frozen=True)
class Fig8Spec:
    """Where a system runs each phase: attention on PIM, FFN shared with PIM, DCC mappings
    (which also move QKV and projection to PIM where faster)."""

    attention_on_pim: bool
    ffn_shared: bool
    dcc: bool


@dataclass(frozen=True)
class Fig8Step:
    """One generation step of ``batch`` requests at ``context`` tokens of ``spec`` on
    ``system``: ``host`` the GPU, ``pim`` the PIM back end's kernel times (None for the GPU)."""

    spec: ModelSpec
    host: Any
    batch: int
    context: int
    system: Fig8Spec
    pim: PimTimes | None


#: Where each of Fig. 8's systems runs each phase.
FIG8_SPECS: dict[SystemKind, Fig8Spec] = {
    SystemKind.GPU: Fig8Spec(False, False, False),
    SystemKind.ATTACC_BASE: Fig8Spec(True, False, False),
    SystemKind.ATTACC_BASE_DCC: Fig8Spec(True, False, True),
    SystemKind.ATTACC_FULL: Fig8Spec(True, True, False),
    SystemKind.ATTACC_FULL_DCC: Fig8Spec(True, True, True),
}


def fc_default_draft(cfg: BackendConfig, sizes: tuple[int, ...]) -> Draft:
    """AttAcc's FFN share on PIM (``attacc-full``) without DCC: DCC V's default with the weight
    rows, not the batch, over every channel (each request's GEMV in every channel).

    DCC V's default spreads "batches or attention heads across 16 channels", which puts a
    batch-1 GEMM in one channel; the AttAcc simulator behind AttAccFull (``_ff_parallel``)
    gives the PIM FFN share the bandwidth of every device, so its mapping uses every channel.
    Within a channel the default's bank-group x bank split of the weights is kept."""
    parts = default_draft(cfg, DccKernel.BATCHED_GEMV, sizes)
    batch, out = parts[0], parts[1]
    return (
        dataclasses.replace(batch, groups=1),
        dataclasses.replace(out, groups=min(cfg.groups, sizes[1])),
        *parts[2:],
    )


class PimTimes:
    """Seconds of a DCC kernel on the PIM back end, default mapping or DCC's, memoised per
    shape (DCC's lookup table of best drafts, filled as the run meets new sizes). With
    ``table`` (filled offline, ``pimphony dcc-lut``) a shape it holds takes its draft without
    a search, one it lacks is predicted by the table's offline predictor (searched if the
    table has none saved); ``looked_up`` counts shapes by how DCC's draft was found. With
    ``energy`` (an energy preset name, ``""`` for the back end's; :func:`sim.tune_energy.
    energy_params`) :meth:`energy` gives each draft's :func:`~sim.tune_energy.draft_energy`."""

    def __init__(
        self,
        cfg: BackendConfig,
        budget: int = SEARCH_BUDGET,
        verify: int = SEARCH_VERIFY,
        table: LookupTable | None = None,
        energy: str | None = None,
    ) -> None:
        self.cfg, self.budget, self.verify, self.table = cfg, budget, verify, table
        self.looked_up = {"table": 0, "predicted": 0, "searched": 0}
        self.energy_preset = energy
        self.params = None
        if energy is not None:
            from pimphony.sim.tune_energy import energy_params

            self.params = energy_params(cfg, energy)

    @functools.cache  # noqa: B019 -- one instance per run; the cache is the lookup table
    def default_cost(self, kernel: str, sizes: tuple[int, ...]) -> DraftCost:
        """The back end's default mapping (DCC V; FC GEMMs: :func:`fc_default_draft`),
        weights / KV resident."""
        k = DccKernel(kernel)
        if k is DccKernel.BATCHED_GEMV:
            draft = fc_default_draft(self.cfg, sizes)
        else:
            draft = default_draft(self.cfg, k, sizes)
        return draft_cost(self.cfg, k, sizes, draft, placement=Placement.RESIDENT)

    def default(self, kernel: str, sizes: tuple[int, ...]) -> float:
        """Seconds of :meth:`default_cost`."""
        return self.default_cost(kernel, sizes).total_s

    @functools.cache  # noqa: B019
    def _dcc_report(self, kernel: str, sizes: tuple[int, ...]) -> tuple[float, Any]:
        """(seconds, the chosen draft's energy block or None) of DCC's choice."""
        from pimphony.sim.tune import tune_report

        r = tune_report(self.cfg.name, kernel, sizes, top=1, budget=self.budget,
                        verify=self.verify, table=self.table,
                        energy=None if self.params is None else self.params.name,
                        energy_of=("chosen",))  # fmt: skip
        t = r.get("table", {})
        self.looked_up["table" if t.get("hit") else t.get("new_shape") or "searched"] += 1
        e = r["energy"]["chosen"] if "energy" in r else None
        return r["chosen"]["total_us"] * 1e-6, e

    def dcc(self, kernel: str, sizes: tuple[int, ...]) -> float:
        """DCC's choice: the predicted search's end-to-end best, weights / KV resident."""
        return self._dcc_report(kernel, sizes)[0]

    def time(self, kernel: str, sizes: tuple[int, ...], dcc: bool) -> float:
        """:meth:`dcc` or :meth:`default`."""
        return self.dcc(kernel, sizes) if dcc else self.default(kernel, sizes)

    @functools.cache  # noqa: B019
    def energy(self, kernel: str, sizes: tuple[int, ...], dcc: bool) -> dict[str, float]:
        """pJ by draft phase (:data:`sim.tune_energy.PHASES`) of the draft :meth:`time` times:
        DCC's chosen draft (``tune --energy``'s block) or :meth:`default_cost`'s."""
        from pimphony.sim.tune_energy import draft_energy

        if self.params is None:
            raise DecodeError("PimTimes was made without an energy preset")
        if dcc:
            block = self._dcc_report(kernel, sizes)[1]
        else:
            block = draft_energy(self.cfg, self.default_cost(kernel, sizes), self.params)
            block = block.to_dict()
        if not block["host_known"]:
            raise DecodeError(
                f"host xPU {self.cfg.host().name} of back end {self.cfg.name} has no [energy] "
                "section: the PIM kernels' host phase has no energy model"
            )
        return dict(block["phases_pj"])


def kv_write_seconds(cfg: BackendConfig, nbytes: float) -> float:
    """Seconds to write ``nbytes`` of KV into the PIM back end ``cfg``: at the rate its host
    reads its own memory (:attr:`~models.backends.BackendConfig.host_gbps`)."""
    return nbytes / (cfg.host_gbps * 1e9)


def _shared(t_gpu: float, t_pim: float) -> float:
    """Both devices on one GEMM's weight rows, split so they finish together."""
    return 1.0 / (1.0 / t_gpu + 1.0 / t_pim)


@dataclass(frozen=True)
class _Placed:
    """One phase of a layer as a system places it: its ``seconds``, the share of each GPU
    op's work the GPU runs (``gpu``) and the PIM kernels it runs with their shares
    (``pim``: kernel, sizes, on DCC's draft, share of the kernel's work)."""

    seconds: float
    gpu: dict[str, float]
    pim: tuple[tuple[str, tuple[int, ...], bool, float], ...] = ()


#: The GPU ops of each phase (the rest are :attr:`Phase.OTHER`'s).
_PHASE_OPS: dict[Phase, tuple[str, ...]] = {
    Phase.ATTENTION: ("attention",),
    Phase.QKV: (str(LayerOp.QKV),),
    Phase.PROJECTION: (str(LayerOp.PROJ),),
    Phase.FFN: (str(LayerOp.FFN1), str(LayerOp.FFN2)),
}


def _layer_placement(step: Fig8Step) -> tuple[dict[Phase, _Placed], dict[str, Any]]:
    """Where one layer of a generation step of ``batch`` requests at ``context`` tokens runs
    on ``system``, per phase, and the GPU's op costs (op -> (cost, count per layer)): the one
    placement :func:`step_phases` times and :func:`step_energy` charges."""
    spec, host, batch, context, system, pim = (
        step.spec, step.host, step.batch, step.context, step.system, step.pim
    )  # fmt: skip
    costs = gpu_op_costs(GpuSetup(spec, host, 1, (context,) * batch, check_capacity=False))
    sec = {k: n * c.seconds for k, (c, n) in costs.items()}
    other = [k for k in costs if not any(k in ops for ops in _PHASE_OPS.values())]
    layer = {
        p: _Placed(sum(sec[k] for k in ops), dict.fromkeys(ops, 1.0))
        for p, ops in (*_PHASE_OPS.items(), (Phase.OTHER, tuple(other)))
    }
    if system.attention_on_pim:
        if pim is None:
            raise DecodeError("a PIM system needs the PIM back end's kernel times")
        kv_bytes = 2 * batch * spec.kv_heads * spec.head_dim * spec.element_bytes
        attn = attention_sizes(spec, batch, context, pim.cfg)
        t = pim.time(ATTN_KERNEL, attn, system.dcc)
        layer[Phase.ATTENTION] = _Placed(
            t + kv_write_seconds(pim.cfg, kv_bytes), {}, ((ATTN_KERNEL, attn, system.dcc, 1.0),)
        )
        shapes = fc_sizes(spec, batch)
        if system.dcc:  # QKV and projection to PIM where faster
            for phase, op in ((Phase.QKV, LayerOp.QKV), (Phase.PROJECTION, LayerOp.PROJ)):
                t = pim.dcc(FC_KERNEL, shapes[op])
                if t < layer[phase].seconds:
                    layer[phase] = _Placed(t, {}, ((FC_KERNEL, shapes[op], True, 1.0),))
        if system.ffn_shared:  # each device runs the share of the weight rows it finishes
            seconds, gpu, on_pim = 0.0, {}, []
            for op in (LayerOp.FFN1, LayerOp.FFN2):
                t_gpu, t_pim = sec[str(op)], pim.time(FC_KERNEL, shapes[op], system.dcc)
                t = _shared(t_gpu, t_pim)
                seconds += t
                gpu[str(op)] = t / t_gpu
                on_pim.append((FC_KERNEL, shapes[op], system.dcc, t / t_pim))
            layer[Phase.FFN] = _Placed(seconds, gpu, tuple(on_pim))
    return layer, costs


def step_phases(step: Fig8Step) -> dict[Phase, float]:
    """Seconds of each phase of one generation step (every layer) of ``batch`` requests at
    ``context`` tokens on ``system``."""
    layer, _ = _layer_placement(step)
    return {p: step.spec.layers * placed.seconds for p, placed in layer.items()}


#: What the ``--energy`` breakdown does not charge (no energy model here; docs/energy.md).
ENERGY_NOT_MODELLED = (
    "the new token's K and V written into PIM (attacc systems; its time is counted)",
    "static / standby power of the GPU, and of the PIM devices while the GPU runs",
)


def step_energy(step: Fig8Step) -> dict[str, float]:
    """Joules of one generation step (every layer) on ``system``, placed as
    :func:`step_phases` places the time: ``gpu.<phase>`` the GPU's ops
    (:func:`sim.systems.energy.xpu_energy`, the decode GPU model's), ``pim.<phase>.<draft
    phase>`` the PIM kernels' drafts (:meth:`PimTimes.energy`). A shared FFN GEMM charges
    each device the share of its weight rows it runs (``t / t_device`` of its whole GEMM)."""
    from pimphony.sim.tune_energy import PHASES as DRAFT_PHASES

    spec, host, pim = step.spec, step.host, step.pim
    if host.energy is None:
        raise DecodeError(f"GPU preset {host.name} has no [energy] section: no GPU energy model")
    layer, costs = _layer_placement(step)
    out: dict[str, float] = {}
    for p, placed in layer.items():
        if placed.gpu:
            pj = sum(
                share * xpu_energy(host, {k: costs[k]}).total  # type: ignore[union-attr]
                for k, share in placed.gpu.items()
            )
            out[f"gpu.{p}"] = spec.layers * pj * 1e-12
    for p, placed in layer.items():
        if placed.pim:
            assert pim is not None
            acc = dict.fromkeys(DRAFT_PHASES, 0.0)
            for kernel, sizes, dcc, share in placed.pim:
                block = pim.energy(kernel, sizes, dcc)
                for k in DRAFT_PHASES:
                    acc[k] += share * block[k]
            out |= {f"pim.{p}.{k}": spec.layers * e * 1e-12 for k, e in acc.items()}
    return out


def energy_block(joules: dict[str, float], tokens: int) -> dict[str, Any]:
    """A system's ``energy`` of a run from :func:`step_energy`'s keys summed over its steps:
    J by GPU phase and by PIM phase and draft phase, the two sides' totals, the total and
    J/token (``tokens``: batch x Lout)."""
    gpu: dict[str, float] = {}
    pim: dict[str, dict[str, float]] = {}
    for key, e in joules.items():
        side, phase, *rest = key.split(".")
        if side == "gpu":
            gpu[phase] = e
        else:
            pim.setdefault(phase, {})[rest[0]] = e
    gpu_j = sum(gpu.values())
    pim_j = sum((sum(v.values()) for v in pim.values()), 0.0)
    return {
        "gpu_j": gpu, "pim_j": pim, "gpu_total_j": gpu_j, "pim_total_j": pim_j,
        "total_j": gpu_j + pim_j, "joules_per_token": (gpu_j + pim_j) / tokens,
    }  # fmt: skip


PHASE_COLOURS = {
    Phase.ATTENTION: "#2a9d8f",
    Phase.QKV: "#e9c46a",
    Phase.PROJECTION: "#f4a261",
    Phase.FFN: "#219ebc",
    Phase.OTHER: "#adb5bd",
}


# --------------------------------------------------------------------------- the rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The AttAcc rows' own options of ``pimphony decode`` and ``pimphony serve``: absent from
    the parsed options unless given (``argparse.SUPPRESS``; unset: Fig. 8's)."""
    p.add_argument(
        "--backend",
        default=argparse.SUPPRESS,
        help=f"--system attacc-*: the PIM back end (default {FIG8_BACKEND}; its host xPU is the "
        "GPU)",
    )
    p.add_argument(
        "--table",
        type=Path,
        default=argparse.SUPPRESS,
        help="--system attacc-*+dcc: DCC's lookup table filled offline (pimphony dcc-lut): "
        "shapes it holds are not searched",
    )
    add_search_options(p, only="--system attacc-*+dcc")


def kv_geometry(cfg: BackendConfig) -> ChunkGeometry:
    """The back end's PIM memory as PIMphony's allocators cut a set of modules: each of its
    ``devices`` a module of ``groups_per_device`` channels, chunks of one DRAM row in every
    bank of a device (1 MiB on ``attacc``: 16 x 64 banks x 1 KiB)."""
    g = cfg.group
    return ChunkGeometry(
        channels=cfg.system.groups_per_device,
        banks=g.banks,
        rows_per_bank=g.rows_per_bank,
        row_bytes=g.row_bytes,
        modules=cfg.system.devices,
        chunk_bytes=cfg.system.groups_per_device * g.banks * g.row_bytes,
    )


@dataclass(frozen=True)
class AttAccSetup:
    """Everything one decode step of an AttAcc row depends on; validated on construction:
    ``lengths`` each from 1 to the model's window. ``dcc`` the search's ``budget``,
    ``verify`` and lookup table (path and digest) when the row maps with DCC."""

    model: ModelSpec
    system: SystemKind
    backend: BackendConfig
    lengths: tuple[int, ...]
    dcc: dict[str, Any] | None
    check_capacity: bool = True

    def __post_init__(self) -> None:
        if not self.lengths:
            raise DecodeError("the batch has no requests")
        bad = [t for t in self.lengths if not 1 <= t <= self.model.context_window]
        if bad:
            raise DecodeError(
                f"context length {bad[0]}: must be from 1 to {self.model.name}'s context_window "
                f"{self.model.context_window}"
            )

    @property
    def batch(self) -> int:
        """Requests in the step."""
        return len(self.lengths)

    @property
    def context(self) -> int:
        """The longest context: the one the batched attention kernel is padded to."""
        return max(self.lengths)


def attacc_setup_digest(setup: AttAccSetup) -> str:
    """SHA-256 of everything an AttAcc row's decode step depends on."""
    from pimphony.sim.analysis.dcc_table import backend_record

    return inputs_digest(
        {
            "model": dataclasses.asdict(setup.model),
            "system": str(setup.system),
            "backend": backend_record(setup.backend),
            "gpu": setup.backend.host().to_dict(),
            "lengths": list(setup.lengths),
            "dcc": setup.dcc,
            "check_capacity": setup.check_capacity,
        }
    )


def attacc_report_stem(setup: AttAccSetup) -> str:
    """File stem naming an AttAcc row's step, ending in a short hash of every input."""
    return (
        f"{setup.model.name}-{setup.system.replace('+', '-')}-B{setup.batch}-T{setup.context}-"
        f"{setup.backend.name}-{attacc_setup_digest(setup)[:8]}"
    )


@dataclass(frozen=True)
class AttAccReport:
    """One decode step of an AttAcc row: seconds of each phase (every layer) and where it ran
    (``gpu``, ``pim`` or both: ``gpu+pim``), each device's busy seconds and share of the step,
    the KV in PIM memory, the step's energy (:func:`energy_block`, J) and how DCC's drafts
    were found."""

    system: str
    model: str
    backend: str
    gpu: str
    batch: int
    context: int
    phases: dict[str, float]
    placement: dict[str, str]
    devices: dict[str, dict[str, float]]
    step_seconds: float
    tokens_per_s: float
    memory: dict[str, Any]
    energy: dict[str, Any]
    dcc: dict[str, Any] | None
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON report."""
        return dataclasses.asdict(self)


class AttAccGpuSystem:
    """One of Fig. 8's AttAcc systems as a :class:`~sim.systems.base.System` (module
    docstring): a step is :func:`step_phases` at the batch's longest context; KV in the back
    end's PIM memory (:func:`kv_geometry`); prefill on the GPU."""

    def __init__(self, config: SystemConfig, kind: SystemKind):
        self.config, self.kind, self.spec = config, kind, FIG8_SPECS[kind]
        self.hw = None
        self.backend = load_backend(config.backend or FIG8_BACKEND)
        self.host = self.backend.host()
        table = None
        self.dcc: dict[str, Any] | None = None
        if self.spec.dcc:
            budget, verify = config.budget or SEARCH_BUDGET, config.verify or SEARCH_VERIFY
            self.dcc = {"budget": budget, "verify": verify, "table": None}
            if config.table is not None:
                from pimphony.sim.analysis.dcc_table import read_table, table_digest

                table = read_table(config.table, self.backend)
                self.dcc["table"] = {
                    "path": str(config.table),
                    "sha256": table_digest(config.table),
                }
        else:
            budget, verify = SEARCH_BUDGET, SEARCH_VERIFY
        self.times = PimTimes(self.backend, budget, verify, table, energy="")
        self._seconds: dict[tuple[int, int], dict[Phase, float]] = {}

    def setup(self, lengths: Sequence[int]) -> AttAccSetup:
        """The :class:`AttAccSetup` of one step of ``lengths``."""
        return AttAccSetup(
            self.config.model,
            self.kind,
            self.backend,
            tuple(int(t) for t in lengths),
            self.dcc,
            self.config.check_capacity,
        )

    def _step(self, setup: AttAccSetup) -> Fig8Step:
        return Fig8Step(setup.model, self.host, setup.batch, setup.context, self.spec, self.times)

    def _memory(self, setup: AttAccSetup) -> dict[str, Any]:
        """The batch's KV admitted into an empty PIM memory; the weights checked against
        the GPU's memory."""
        m, pool = setup.model, self.pool()
        where = (
            f"{self.backend.system.devices} PIM device(s) of {self.backend.name} "
            f"({pool.stats().capacity_bytes / 2**30:g} GiB of KV), {m.name}'s weights "
            f"{m.resident_weight_bytes / 2**30:.1f} GiB on one {self.host.name} "
            f"({self.host.capacity_bytes / 2**30:g} GiB)"
        )
        fits = m.resident_weight_bytes <= self.host.capacity_bytes
        try:
            for r, t in enumerate(setup.lengths):
                fits = fits and pool.admit(r, t, raise_on_oom=False)
        except ValueError as exc:  # a length past a static reservation
            raise DecodeError(str(exc)) from None
        if not fits and setup.check_capacity:
            raise DecodeError(
                f"the batch of {setup.batch} request(s) does not fit {where}; use a smaller "
                "batch (or --ignore-capacity)"
            )
        st = pool.stats()
        return {
            "fits": fits,
            "where": where,
            "kv_capacity_bytes": st.capacity_bytes,
            "kv_used_bytes": st.used_bytes,
            "kv_reserved_bytes": st.reserved_bytes,
        }

    def step(
        self, lengths: Sequence[int], progress: Callable[[str], None] | None = None
    ) -> StepResult:
        """One step: :func:`step_phases` and :func:`step_energy` of the batch at its longest
        context, with the KV admitted into the PIM memory."""
        setup = self.setup(lengths)
        memory = self._memory(setup)
        if progress and self.spec.dcc:
            progress(f"DCC's drafts of {setup.model.name} B={setup.batch} (a search per new shape)")
        step = self._step(setup)
        phases = step_phases(step)
        layer, _ = _layer_placement(step)
        placement = {
            str(p): "+".join(d for d, on in (("gpu", pl.gpu), ("pim", pl.pim)) if on)
            for p, pl in layer.items()
        }
        seconds = sum(phases.values())
        busy = {
            d: sum(t for p, t in phases.items() if d in placement[str(p)].split("+"))
            for d in ("gpu", "pim")
        }
        kv_bytes = 2 * setup.batch * setup.model.kv_heads * setup.model.head_dim
        kv_bytes *= setup.model.element_bytes * setup.model.layers
        dcc = None
        if self.dcc is not None:
            dcc = {**self.dcc, "drafts": dict(self.times.looked_up)}
        report = AttAccReport(
            system=str(self.kind),
            model=setup.model.name,
            backend=self.backend.name,
            gpu=self.host.name,
            batch=setup.batch,
            context=setup.context,
            phases={str(p): t for p, t in phases.items()},
            placement=placement,
            devices={d: {"busy_seconds": b, "share": b / seconds} for d, b in busy.items()},
            step_seconds=seconds,
            tokens_per_s=setup.batch / seconds,
            memory=memory,
            energy=energy_block(step_energy(step), setup.batch),
            dcc=dcc,
        )
        return StepResult(
            seconds=seconds,
            cycles=None,
            tokens_per_s=report.tokens_per_s,
            partition_layers={},
            activity={d: v["share"] for d, v in report.devices.items()},
            link_bytes={"to_pim": kv_bytes},
            report=report,
        )

    def cycles(self, lengths: Sequence[int]) -> StepTime:
        """The same step's seconds (no PIM clock: DCC's cost model gives seconds), memoised
        per batch size and longest context."""
        setup = self.setup(lengths)
        key = (setup.batch, setup.context)
        if key not in self._seconds:
            self._seconds[key] = step_phases(self._step(setup))
        return StepTime(sum(self._seconds[key].values()), None)

    def pool(self) -> Any:
        """An empty KV allocator over the back end's PIM memory (no weights in it)."""
        c = self.config
        limit = c.reservation if c.memory == MemoryPolicy.STATIC else c.model.context_window
        return make_allocator(
            c.memory, kv_geometry(self.backend), c.model.kv_bytes_per_token, max_context=limit
        )

    def fill_batch(self, candidates: Sequence[int]) -> tuple[int, ...]:
        """The longest prefix of ``candidates`` the PIM memory holds (every candidate
        fitting is an error: the batch would not be capacity-bound)."""
        pool, taken = self.pool(), 0
        try:
            while taken < len(candidates) and pool.admit(
                taken, int(candidates[taken]), raise_on_oom=False
            ):
                taken += 1
        except (OutOfMemory, ValueError) as exc:
            raise DecodeError(f"request {taken} (context {candidates[taken]}): {exc}") from None
        if not taken or taken == len(candidates):
            raise DecodeError(
                f"{taken} of {len(candidates)} candidate requests fit {self.backend.name}'s PIM "
                "memory: --batch auto needs a batch the memory bounds"
            )
        return tuple(int(t) for t in candidates[:taken])

    def prefill(self, prompts: Sequence[int]) -> float:
        """The prompts on the GPU, then their KV written into PIM."""
        m = self.config.model
        kv = int(sum(prompts)) * m.kv_bytes_per_token
        return xpu_prefill_seconds(self.host, m, prompts) + kv_write_seconds(self.backend, kv)

    def provenance_inputs(self) -> dict[str, Any]:
        """The back end (name, digest), the GPU (its host xPU) and DCC's search."""
        from pimphony.sim.analysis.dcc_table import backend_record

        values = self.host.to_dict()
        out: dict[str, Any] = {
            "backend": backend_record(self.backend),
            "gpu": {"name": self.host.name, "sha256": inputs_digest(values), "values": values},
        }
        if self.dcc is not None:
            out["dcc"] = self.dcc
        return out


def format_attacc_report(r: AttAccReport) -> str:
    """The step as text: each phase's seconds and where it ran, the step, memory, energy."""
    lines = [
        f"{r.system}: {r.model}, batch {r.batch}, longest context {r.context}; GPU {r.gpu}, "
        f"PIM back end {r.backend}",
        *(f"  {p:11s} {t * 1e3:10.4f} ms  on {r.placement[p]}" for p, t in r.phases.items()),
        f"step {r.step_seconds * 1e3:.4f} ms, {r.tokens_per_s:,.1f} tokens/s; busy: "
        + ", ".join(f"{d} {v['share']:.1%}" for d, v in r.devices.items()),
        f"KV {r.memory['kv_used_bytes'] / 2**30:.3f} GiB of {r.memory['where']}",
        f"energy {r.energy['joules_per_token']:.4f} J/token (GPU "
        f"{r.energy['gpu_total_j']:.4f} J, PIM {r.energy['pim_total_j']:.4f} J per step)",
    ]
    if r.dcc is not None:
        n = r.dcc["drafts"]
        lines.append(
            f"DCC drafts (budget {r.dcc['budget']}, verify {r.dcc['verify']}): "
            f"{n['table']} from the table, {n['predicted']} predicted, {n['searched']} searched"
        )
    return "\n".join(lines)


def plot_attacc_report(r: AttAccReport, path: Path) -> Path:
    """A stacked bar of the step's phases (ms), titled with the system and the batch."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 4.2))
    bottom = 0.0
    for p in Phase:
        h = r.phases[p] * 1e3
        ax.bar(r.system, h, bottom=bottom, color=PHASE_COLOURS[p], width=0.5,
               label=f"{p} ({r.placement[p]})")  # fmt: skip
        bottom += h
    ax.set_xlabel("system")
    ax.set_ylabel("decode step time (ms)")
    ax.set_title(f"{r.system} decode step: {r.model}, batch {r.batch}, longest context "
                 f"{r.context}\n{r.step_seconds * 1e3:.3f} ms", fontsize=9)  # fmt: skip
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), title="phase (on)")
    fig.tight_layout()
    return write_figure(fig, path)
