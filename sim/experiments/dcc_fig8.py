"""``pimphony dcc-fig8``: DCC Fig. 8's shape, end-to-end generation on the GPU and on AttAcc with
and without DCC (``docs/dcc.md``, "Fig. 8").

DCC V-B: "AttAccBase runs only attention layers on PIM, and AttAccFull runs attention layers
and a portion of the Feed-forward on the PIM side (See [20]), while the largest portion of
Feed-forward runs on GPU. For both AttAcc variants, QKV generation, projection and Other run
on GPU. However, with DCC's optimizations, we enable QKV generation and projection to be also
executed on the PIM side". The systems (:data:`SYSTEMS`), per decoder layer of one generation
step of ``B`` requests at context ``L``:

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

"Other" is the norms, residuals and activation, on the GPU in every system. Fig. 8's phases
are the generation stage's (the AttAcc simulator's ``g_time``: the prefill runs on the GPU in
every system and is not in the figure; the paper's speedups grow with the mean generation
context, 128 + 1024 < 2048 + 64 < 2048 + 1024, as the generation stage's do). A run of
``Lout`` tokens is the sum of its steps at contexts ``Lin + 1 ... Lin + Lout``; each phase is
costed at :data:`SAMPLE_POINTS` evenly spaced contexts and integrated piecewise linearly over
the steps (attention is linear in ``L`` on both devices; the other phases do not depend on
it). The paper does not say how many PIM devices' capacity its GPU baseline has; ours is one
A100 (DCC V) holding weights and KV, capacity not checked (LLaMA-33B at batch 4 and 4,096
tokens needs 91 GB).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
from pimphony.compiler.dcc.cost import DraftCost, Placement, draft_cost
from pimphony.compiler.dcc.predictor import LookupTable
from pimphony.compiler.dcc.schedule import DccKernel, Draft
from pimphony.compiler.dcc.tune import default_draft
from pimphony.compiler.llm import LayerOp, ModelSpec, load_model
from pimphony.models.backends import BackendConfig, load_backend
from pimphony.models.fileio import BUILD_DIR, pyplot, write_atomic, write_figure
from pimphony.sim.analysis.dcc_shapes import (
    ATTN_KERNEL,
    FC_KERNEL,
    FIG8_BACKEND,
    FIG8_BATCHES,
    FIG8_MODELS,
    FIG8_RUNS,
    SAMPLE_POINTS,
    attention_sizes,
    fc_sizes,
    sample_contexts,
)
from pimphony.sim.cli import positive_ints
from pimphony.sim.provenance import provenance
from pimphony.sim.report import user_output, user_plot
from pimphony.sim.systems.energy import xpu_energy
from pimphony.sim.systems.gpu import GpuSetup, gpu_op_costs
from pimphony.sim.systems.setup import DecodeError

__all__ = [
    "PAPER",
    "SYSTEMS",
    "Fig8System",
    "Phase",
    "PimTimes",
    "Fig8Spec",
    "Fig8Step",
    "add_arguments",
    "ENERGY_NOT_MODELLED",
    "energy_block",
    "fc_default_draft",
    "fig8",
    "over_steps",
    "run",
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


class Fig8System(StrEnum):
    """Fig. 8's systems."""

    GPU = "gpu"
    BASE = "attacc-base"
    BASE_DCC = "attacc-base+dcc"
    FULL = "attacc-full"
    FULL_DCC = "attacc-full+dcc"


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


SYSTEMS: dict[Fig8System, Fig8Spec] = {
    Fig8System.GPU: Fig8Spec(False, False, False),
    Fig8System.BASE: Fig8Spec(True, False, False),
    Fig8System.BASE_DCC: Fig8Spec(True, False, True),
    Fig8System.FULL: Fig8Spec(True, True, False),
    Fig8System.FULL_DCC: Fig8Spec(True, True, True),
}

#: The paper's speedups over the GPU (numbers on Fig. 8's bars): model, batch, (Lin, Lout) ->
#: Base, Base+DCC, Full, Full+DCC.
# fmt: off
PAPER: dict[tuple[str, int, tuple[int, int]], tuple[float, float, float, float]] = dict(
    zip(
        (
            (model, batch, lin_lout)
            for batch in (1, 4)
            for model in ("gpt3-13b-4k", "llama-33b-4k")
            for lin_lout in ((128, 2048), (2048, 128), (2048, 2048))
        ),
        (  # per (model, batch): Lin/Lout 128/2048, 2048/128, 2048/2048
            (1.09, 1.47, 2.56, 6.54), (1.16, 1.56, 2.74, 7.00), (1.23, 1.66, 2.92, 7.45),
            (1.05, 1.42, 2.59, 7.11), (1.09, 1.47, 2.70, 7.41), (1.13, 1.53, 2.82, 7.71),
            (1.16, 1.34, 2.30, 3.11), (1.30, 1.50, 2.60, 3.51), (1.43, 1.65, 2.89, 3.90),
            (1.09, 1.21, 2.30, 2.92), (1.16, 1.29, 2.47, 3.14), (1.24, 1.37, 2.65, 3.36),
        ),
        strict=True,
    )
)
# fmt: on


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
        budget: int = 300,
        verify: int = 10,
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
            t + kv_bytes / (pim.cfg.host_gbps * 1e9), {}, ((ATTN_KERNEL, attn, system.dcc, 1.0),)
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


def over_steps(
    cost: Callable[..., dict[Any, float]],
    spec: ModelSpec,
    host: Any,
    batch: int,
    lin: int,
    lout: int,
    system: Fig8Spec,
    pim: PimTimes | None,
    points: int = SAMPLE_POINTS,
) -> dict[Any, float]:
    """Each key of ``cost`` (:func:`step_phases`: seconds per phase; :func:`step_energy`:
    joules) summed over the ``lout`` generation steps at contexts ``lin + 1`` to
    ``lin + lout``: costed at ``points`` contexts, integrated piecewise linearly."""
    xs = sample_contexts(lin, lout, points)
    at = [cost(Fig8Step(spec, host, batch, x, system, pim)) for x in xs]
    steps = np.arange(lin + 1, lin + lout + 1)
    return {
        p: float(np.interp(steps, xs, [a[p] for a in at]).sum()) if len(xs) > 1 else
        at[0][p] * lout
        for p in at[0]
    }  # fmt: skip


def fig8(
    models: Sequence[str] = FIG8_MODELS,
    batches: Sequence[int] = FIG8_BATCHES,
    runs: Sequence[tuple[int, int]] = FIG8_RUNS,
    backend: str = FIG8_BACKEND,
    points: int = SAMPLE_POINTS,
    budget: int = 300,
    verify: int = 10,
    progress: Callable[[str], None] | None = None,
    pim: PimTimes | None = None,
    energy: str | None = None,
) -> list[dict[str, Any]]:
    """One row per (model, batch, Lin, Lout): every system's phase seconds, its generation
    time over the GPU's and the paper's speedups. ``pim``: the kernel times (e.g. with a
    lookup table); a new :class:`PimTimes` on ``backend`` if None. ``energy`` (an energy
    preset, ``""`` for the back end's; None: none): each system also gets an ``energy`` block
    (:func:`energy_block`; a given ``pim`` must have been made with the preset)."""
    cfg = load_backend(backend) if pim is None else pim.cfg
    host = cfg.host()
    pim = pim or PimTimes(cfg, budget, verify, energy=energy)
    if energy is not None and pim.params is None:
        raise DecodeError("energy asked for but the PIM kernel times have no energy preset")
    rows = []
    for name in models:
        spec = load_model(name)
        for b in batches:
            for lin, lout in runs:
                if lin + lout > spec.context_window:
                    raise DecodeError(
                        f"Lin {lin} + Lout {lout} = {lin + lout} exceeds {spec.name}'s "
                        f"context_window {spec.context_window}"
                    )
                systems = {
                    str(s): {
                        "phases": {
                            str(p): t
                            for p, t in over_steps(
                                step_phases, spec, host, b, lin, lout, sys, pim, points
                            ).items()
                        }
                    }
                    for s, sys in SYSTEMS.items()
                }
                base = sum(systems[Fig8System.GPU]["phases"].values())
                for s in systems.values():
                    s["seconds"] = sum(s["phases"].values())
                    s["speedup_over_gpu"] = base / s["seconds"]
                if energy is not None:
                    for s, sys in SYSTEMS.items():
                        j = over_steps(step_energy, spec, host, b, lin, lout, sys, pim, points)
                        systems[s]["energy"] = energy_block(j, b * lout)
                    gpu_j = systems[Fig8System.GPU]["energy"]["joules_per_token"]
                    for s in systems.values():
                        s["energy"]["over_gpu"] = s["energy"]["joules_per_token"] / gpu_j
                paper = PAPER.get((spec.name, b, (lin, lout)))
                row = {
                    "model": spec.name, "batch": b, "lin": lin, "lout": lout,
                    "systems": systems,
                    "paper_speedup": dict(zip(list(SYSTEMS)[1:], paper, strict=True))
                    if paper else None,
                }  # fmt: skip
                rows.append(row)
                if progress:
                    progress(
                        f"{spec.name} B={b} Lin={lin} Lout={lout}: "
                        + " ".join(f"{s} {v['speedup_over_gpu']:.2f}x" for s, v in systems.items())
                    )
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean speedups over the GPU per system (ours and the paper's), and DCC's gain on each
    AttAcc variant (the paper: 1.24x Base, 1.86x Full on average)."""

    def mean(xs: list[float]) -> float:
        return float(np.mean(xs)) if xs else float("nan")

    out: dict[str, Any] = {"speedup_over_gpu": {}, "paper_speedup_over_gpu": {}}
    for s in list(SYSTEMS)[1:]:
        out["speedup_over_gpu"][str(s)] = mean([r["systems"][s]["speedup_over_gpu"] for r in rows])
        out["paper_speedup_over_gpu"][str(s)] = mean(
            [r["paper_speedup"][s] for r in rows if r["paper_speedup"]]
        )
    out["dcc_gain"] = {
        "base": mean([r["systems"][Fig8System.BASE]["seconds"]
                      / r["systems"][Fig8System.BASE_DCC]["seconds"] for r in rows]),
        "full": mean([r["systems"][Fig8System.FULL]["seconds"]
                      / r["systems"][Fig8System.FULL_DCC]["seconds"] for r in rows]),
        "paper": {"base": 1.24, "full": 1.86},
    }  # fmt: skip
    return out


def format_fig8(rows: list[dict[str, Any]], summ: dict[str, Any]) -> str:
    """Per run: each system's speedup over the GPU (paper's in brackets) and phase split."""
    names = list(SYSTEMS)[1:]
    lines = [
        f"{'model':14s} {'B':>2s} {'Lin':>5s} {'Lout':>5s} " + " ".join(f"{s:>18s}" for s in names)
    ]
    for r in rows:
        cells = []
        for s in names:
            p = r["paper_speedup"][s] if r["paper_speedup"] else float("nan")
            cells.append(f"{r['systems'][s]['speedup_over_gpu']:7.2f}x ({p:5.2f}x)")
        lines.append(
            f"{r['model']:14s} {r['batch']:2d} {r['lin']:5d} {r['lout']:5d} "
            + " ".join(f"{c:>18s}" for c in cells)
        )
    lines.append("mean speedup over the GPU, ours (paper): " + ", ".join(
        f"{s} {summ['speedup_over_gpu'][s]:.2f}x ({summ['paper_speedup_over_gpu'][s]:.2f}x)"
        for s in names
    ))  # fmt: skip
    g = summ["dcc_gain"]
    lines.append(
        f"DCC over AttAcc: Base {g['base']:.2f}x (paper {g['paper']['base']}x), Full "
        f"{g['full']:.2f}x (paper {g['paper']['full']}x)"
    )
    return "\n".join(lines)


def format_energy(rows: list[dict[str, Any]], presets: dict[str, str]) -> str:
    """Per run: each system's generation energy per token (J) and its ratio to the GPU's."""
    names = list(SYSTEMS)
    lines = [
        f"energy, J/token (over the GPU's; PIM {presets['pim']}, GPU {presets['gpu']}):",
        f"{'model':14s} {'B':>2s} {'Lin':>5s} {'Lout':>5s} " + " ".join(f"{s:>18s}" for s in names),
    ]
    for r in rows:
        cells = []
        for s in names:
            e = r["systems"][s]["energy"]
            cells.append(f"{e['joules_per_token']:8.4f} ({e['over_gpu']:5.2f}x)")
        lines.append(
            f"{r['model']:14s} {r['batch']:2d} {r['lin']:5d} {r['lout']:5d} "
            + " ".join(f"{c:>18s}" for c in cells)
        )
    mean = {s: float(np.mean([r["systems"][s]["energy"]["over_gpu"] for r in rows]))
            for s in names[1:]}  # fmt: skip
    lines.append("mean energy over the GPU's: " + ", ".join(f"{s} {v:.2f}x" for s, v in
                                                              mean.items()))  # fmt: skip
    return "\n".join(lines)


PHASE_COLOURS = {
    Phase.ATTENTION: "#2a9d8f",
    Phase.QKV: "#e9c46a",
    Phase.PROJECTION: "#f4a261",
    Phase.FFN: "#219ebc",
    Phase.OTHER: "#adb5bd",
}


def plot_fig8(rows: list[dict[str, Any]], path: Path) -> Path:
    """Stacked bars: each system's generation time over the GPU's, by phase, one panel per
    model and batch; the speedup over the GPU on top."""
    plt = pyplot()
    panels = list(dict.fromkeys((r["model"], r["batch"]) for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    names = list(SYSTEMS)
    for ax, (model, b) in zip(axes[0], panels, strict=True):
        sel = [r for r in rows if (r["model"], r["batch"]) == (model, b)]
        x, ticks, labels = 0.0, [], []
        for r in sel:
            gpu = r["systems"][Fig8System.GPU]["seconds"]
            for s in names:
                bottom = 0.0
                for p in Phase:
                    h = r["systems"][s]["phases"][p] / gpu
                    ax.bar(x, h, bottom=bottom, color=PHASE_COLOURS[p], width=0.8,
                           label=str(p) if (x == 0) else None)  # fmt: skip
                    bottom += h
                if s != Fig8System.GPU:
                    ax.text(x, bottom + 0.01, f"{r['systems'][s]['speedup_over_gpu']:.2f}",
                            ha="center", fontsize=6)  # fmt: skip
                ticks.append(x)
                labels.append(s.replace("attacc-", ""))
                x += 1
            x += 1
        ax.set_xticks(ticks, labels, rotation=90, fontsize=6)
        ax.set_title(f"{model}, batch {b}: " + ", ".join(
            f"Lin {r['lin']} Lout {r['lout']}" for r in sel), fontsize=8)  # fmt: skip
        ax.set_ylabel("generation time / GPU's")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("DCC Fig. 8 shape: generation time by phase, GPU vs AttAcc (+DCC)")
    fig.tight_layout()
    return write_figure(fig, path)


def _runs(text: str) -> tuple[tuple[int, int], ...]:
    out = []
    for item in text.split(","):
        try:
            lin, lout = (int(v) for v in item.split(":"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--runs {text!r}: expected Lin:Lout pairs, comma-separated (e.g. 128:2048)"
            ) from None
        if lin < 1 or lout < 1:
            raise argparse.ArgumentTypeError(f"--runs {item!r}: Lin and Lout must be >= 1")
        out.append((lin, lout))
    return tuple(out)


FIG8_DIR = BUILD_DIR / "dcc"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony dcc-fig8``."""
    p.add_argument("--models", default=",".join(FIG8_MODELS),
                   help="comma-separated model presets")  # fmt: skip
    p.add_argument("--batches", type=positive_ints, default=FIG8_BATCHES, help="e.g. 1,4")
    p.add_argument("--runs", type=_runs, default=FIG8_RUNS,
                   help="Lin:Lout pairs, e.g. 128:2048,2048:128")  # fmt: skip
    p.add_argument("--backend", default=FIG8_BACKEND, help="PIM back end (with a softmax unit)")
    p.add_argument("--points", type=int, default=SAMPLE_POINTS,
                   help="contexts each phase is costed at over a run")  # fmt: skip
    p.add_argument("--budget", type=int, default=300, help="DCC predictor's simulated drafts")
    p.add_argument("--verify", type=int, default=10, help="best predicted drafts simulated")
    p.add_argument("--table", type=Path, default=None,
                   help="DCC's lookup table filled offline (pimphony dcc-lut): shapes it "
                   "holds are not searched")  # fmt: skip
    p.add_argument("--energy", nargs="?", const="", default=None,
                   help="also each system's generation energy (GPU and PIM parts, J/token); "
                   "optionally the PIM energy preset (default: the one named like the back "
                   "end; docs/energy.md)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--report", type=Path, help="JSON path (default build/dcc/fig8.json)")
    p.add_argument("--plot", type=Path, help="PNG path (default build/dcc/fig8.png)")
    p.add_argument("--force", action="store_true", help="replace existing output files")


def run(args: argparse.Namespace) -> int:
    """Run the Fig. 8 sweep; write the JSON report and the plot."""
    if args.points < 2:
        raise DecodeError(f"--points {args.points}: must be >= 2 (the ends of a run)")
    report_path = user_output(args.report, FIG8_DIR / "fig8.json", args.force)
    plot_path = user_plot(args.plot, FIG8_DIR / "fig8.png", args.force)
    say = None if args.json else functools.partial(print, flush=True)
    pim, inputs = None, {}
    energy = getattr(args, "energy", None)
    if args.table is not None:
        from pimphony.sim.analysis.dcc_table import read_table, table_digest

        cfg = load_backend(args.backend)
        pim = PimTimes(cfg, args.budget, args.verify, read_table(args.table, cfg), energy)
        inputs = {"table": {"path": str(args.table), "sha256": table_digest(args.table)}}
    elif energy is not None:
        pim = PimTimes(load_backend(args.backend), args.budget, args.verify, energy=energy)
    rows = fig8(
        tuple(m for m in args.models.split(",") if m), args.batches, args.runs, args.backend,
        args.points, args.budget, args.verify, progress=say, pim=pim, energy=energy,
    )  # fmt: skip
    summ = summary(rows)
    if args.table is not None:
        inputs["table"]["shapes"] = dict(pim.looked_up)
    # reports' options stay as before --table and --energy existed
    drop = {k for k in ("table", "energy") if getattr(args, k, None) is None}
    args = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in drop})
    presets = None
    if energy is not None:
        presets = {"pim": pim.params.name, "gpu": pim.cfg.host().name}
        inputs["energy_presets"] = {"pim": presets["pim"], "gpu_xpu": presets["gpu"]}
    report = {
        "rows": rows, "summary": summ, "paper": {str(k): v for k, v in PAPER.items()},
        "provenance": provenance(args, backend=args.backend, models=args.models, **inputs),
    }  # fmt: skip
    if presets is not None:
        report["energy"] = {
            "presets": presets, "act_basis": "row", "unit": "J",
            "not_modelled": list(ENERGY_NOT_MODELLED),
        }  # fmt: skip
    write_atomic(report_path, json.dumps(report, indent=2, default=str).encode())
    plot_fig8(rows, plot_path)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(format_fig8(rows, summ))
        if presets is not None:
            print(format_energy(rows, presets))
            print("energy not modelled: " + "; ".join(ENERGY_NOT_MODELLED))
        if pim is not None:
            n = pim.looked_up
            from pimphony.sim.analysis.dcc_table import untabled_line

            print(f"DCC drafts: {n['table']} shape(s) from table {args.table} (not searched), "
                  f"{untabled_line(pim.table, n['predicted'], n['searched'])}")  # fmt: skip
        print(f"report: {report_path}\nplot:   {plot_path}")
    return 0
