"""``pimphony decode --mapping tuned``: a decode step's weight GEMVs on DCC-tuned mappings.

Under the fixed mapping (``compiler.plan``) a weight GEMV (``qkv``, ``proj``, ``ffn1``,
``ffn2``) of one TP module gives every channel ``d_out / channels`` outputs in whole bank
groups and the whole ``d_in``. Under ``tuned`` each op is a DCC batched GEMV ``(batch, d_out,
d_in)`` (its micro-batch, its TP share) on the module as an AiM back end
(:func:`models.backends.aim_backend`: the module's channels are DCC's groups, a channel's banks
its cores), lowered by :mod:`compiler.dcc.aim_lowering` and searched by
:func:`compiler.dcc.tune.search`:

- **candidates**: the pruned drafts (DCC IV-B) that keep one copy of the weights (the batch
  set on one group: the step's capacity counts the weights once per TP module) and fill the
  banks (a draft whose banks hold more outputs each than ``ceil(share / banks)`` runs the
  same GEMV with more output groups; AiM's MAC is all-bank, so it is never faster);
- **objective**: one channel's program on the channel TLM (:func:`compiler.dcc.cost.
  draft_cost`'s compute time) plus, when ``d_in`` is split over channels, the HUB EPU's sum of
  their partial outputs (:func:`models.hub.epu_cycles`): the PIM-only system's "host" is the
  HUB, not the DCC back end's host xPU. Drafts are simulated in the order of a lower bound
  (their worst channel's MACs at one per tCCD, plus the EPU sum) and the search stops when
  the bound reaches the best time found: the result is the best of all candidates, without
  simulating the ones that cannot win (few channels, many MACs each).

DCC's best draft per shape is kept in :data:`TABLE` (DCC IV-D's lookup table, filled at run
time), so a shape is searched once per process however many layers, steps or partitions ask.
The step's own model then times the draft as channel jobs -- batched GEMVs of its shares,
``d_out`` over ``g_o`` channel sets in whole bank groups and ``d_in`` over ``g_i`` in whole MAC
tiles (:func:`compiler.plan.split_evenly`), batches split by the GPR
(:func:`compiler.plan.batch_jobs`) -- plus the EPU sum, and uses them only if that is fewer
cycles than the fixed jobs; so a tuned step is never slower than a fixed one.

Attention kernels keep the fixed mapping: on one channel DCC's only freedom is how many banks
hold outputs (the all-bank MAC shares one GBuf input), which the fixed compiler already sets to
all of them, and how attention is spread over channels is the partition (``--partition auto``
picks TCP or HFP per layer on the full task graph with the EPU's softmax).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from pimphony.compiler.dcc.cost import DraftCost, draft_cost
from pimphony.compiler.dcc.predictor import Entry, LookupTable
from pimphony.compiler.dcc.schedule import DccKernel, Draft
from pimphony.compiler.dcc.tune import kernel_drafts
from pimphony.compiler.llm import GEMV_OPS
from pimphony.compiler.plan import GemvJob, LayerPlan, batch_jobs, split_evenly
from pimphony.models.backends import BackendConfig, aim_backend
from pimphony.models.config import HardwareConfig
from pimphony.models.errors import PimphonyError
from pimphony.models.hub import epu_cycles

__all__ = [
    "TABLE",
    "GemvTuning",
    "dcc_draft",
    "draft_jobs",
    "mapping_lines",
    "mapping_report",
    "module_backend",
    "tune_gemvs",
]

_KERNEL = DccKernel.BATCHED_GEMV

#: DCC's best draft per (back end, kernel, sizes), filled as decode steps ask (DCC IV-D).
TABLE = LookupTable(provenance={"filled_by": "pimphony decode --mapping tuned"})
_REFUSED: dict[tuple[str, tuple[int, ...]], str] = {}  # shapes no candidate draft runs


@cache
def module_backend(hw: HardwareConfig) -> BackendConfig:
    """One module of ``hw`` as an AiM back end (the ``aim`` preset's host and system)."""
    return aim_backend(hw)


def _fills_banks(draft: Draft, banks: int) -> bool:
    """One copy of the weights (batch set on one group, one core) and every bank's share of
    the outputs as small as the bank count allows."""
    n, o, i = draft
    share = -(-o.size // o.groups)
    return (
        n.groups == 1
        and n.cores == 1
        and i.cores == 1
        and (-(-share // o.cores) == -(-share // banks))
    )


def _epu_seconds(hw: HardwareConfig, cost: DraftCost) -> float:
    batch, d_out, _ = cost.sizes
    adds = batch * d_out * (cost.share.reduction_groups - 1)
    return epu_cycles(hw, adds) / (hw.module.freq_ghz * 1e9)


def dcc_draft(hw: HardwareConfig, batch: int, d_out: int, d_in: int) -> tuple[Draft | None, str]:
    """DCC's best draft of a ``batch x d_out x d_in`` GEMV on a module of ``hw`` (module
    docstring) and how it was found (``searched``, ``lookup``), or ``None`` and why not."""
    cfg = module_backend(hw)
    sizes = (batch, d_out, d_in)
    entry = TABLE.get(cfg.name, _KERNEL, sizes)
    if entry is not None:
        return entry.draft, "lookup"
    if (cfg.name, sizes) in _REFUSED:
        return None, _REFUSED[(cfg.name, sizes)]
    pool = [d for d in kernel_drafts(cfg, _KERNEL, sizes)[0] if _fills_banks(d, hw.channel.banks)]
    best: tuple[float, Draft] | None = None
    reasons: dict[str, int] = {}
    for bound, draft in sorted(((_bound(hw, d, sizes), d) for d in pool), key=lambda x: x[0]):
        if best is not None and bound >= best[0]:
            break  # no draft left can beat the best: its MACs alone take longer
        try:
            cost = draft_cost(cfg, _KERNEL, sizes, draft)
        except PimphonyError as exc:
            reasons[str(exc)] = reasons.get(str(exc), 0) + 1
            continue
        seconds = cost.compute_s + _epu_seconds(hw, cost)
        if best is None or seconds < best[0]:
            best = (seconds, draft)
    if best is None:
        why = f"none of {len(pool)} drafts runs ({'; '.join(reasons)})"
        _REFUSED[(cfg.name, sizes)] = why
        return None, why
    TABLE.entries[(cfg.name, _KERNEL, sizes)] = Entry(best[1], best[0], len(pool), "runtime")
    return best[1], "searched"


def _bound(hw: HardwareConfig, draft: Draft, sizes: tuple[int, ...]) -> float:
    """A lower bound of a draft's objective: its worst channel's MACs, one per tCCD on the
    command bus, plus its exact EPU sum."""
    batch, d_out, d_in = sizes
    g_o, g_i = draft[1].groups, draft[2].groups
    ch = hw.channel
    groups = math.ceil(math.ceil(d_out / g_o) / ch.banks)  # output groups of the worst share
    tiles = math.ceil(math.ceil(d_in / g_i) / ch.mac_elements)
    macs = batch * groups * tiles
    cycles = macs * hw.timing.tCCD + epu_cycles(hw, batch * d_out * (g_i - 1))
    return cycles / (hw.module.freq_ghz * 1e9)


def draft_jobs(
    hw: HardwareConfig, draft: Draft, batch: int, d_out: int, d_in: int
) -> list[list[GemvJob]]:
    """Per channel, the jobs of ``draft``'s shares (module docstring); channel ``a g_i + b``
    holds output share ``a`` and input share ``b``, the rest are idle."""
    g_o, g_i = draft[1].groups, draft[2].groups
    outs = split_evenly(d_out, g_o, hw.channel.banks)
    ins = split_evenly(d_in, g_i, hw.channel.mac_elements)
    jobs: list[list[GemvJob]] = [[] for _ in range(hw.module.channels)]
    for a, o in enumerate(outs):
        for b, i in enumerate(ins):
            if o and i:
                jobs[a * g_i + b] = batch_jobs(hw, o, i, batch)
    return jobs


def _cycles(jobs: Sequence[Sequence[Any]], run: Callable[[Any], Any]) -> int:
    """An op's cycles: its slowest channel's jobs one after another."""
    return max((sum(run(j).cycles for j in c) for c in jobs), default=0)


@dataclass(frozen=True)
class GemvTuning:
    """A layer's weight GEMVs under ``--mapping tuned``: the jobs used per op, the EPU cycles
    and flops of partial-output sums they add, and a report row per op."""

    jobs: dict[str, list[list[GemvJob]]]
    reduce_cycles: dict[str, int]
    reduce_flops: int
    rows: tuple[dict[str, Any], ...]


def tune_gemvs(hw: HardwareConfig, plan: LayerPlan, run: Callable[[Any], Any]) -> GemvTuning:
    """Each op of ``plan``: DCC's draft's jobs if the step's model (``run(job)``, plus the EPU
    sum) times them in fewer cycles than the fixed jobs, else the fixed jobs."""
    batch = len(plan.lengths)
    jobs, reduce, rows, flops = {}, {}, [], 0
    for op in GEMV_OPS:
        fixed = plan.gemv[op]
        d_out = sum(c[0].d_out for c in fixed if c)
        d_in = next(c[0].d_in for c in fixed if c)
        fixed_cycles = _cycles(fixed, run)
        draft, how = dcc_draft(hw, batch, d_out, d_in)
        row: dict[str, Any] = {
            "op": str(op), "batch": batch, "d_out": d_out, "d_in": d_in,
            "fixed_cycles": fixed_cycles, "dcc_draft": None, "channels": None,
            "tuned_cycles": None, "reduce_cycles": 0, "used": "fixed",
            "refused": how if draft is None else None,
        }  # fmt: skip
        jobs[op], reduce[op] = fixed, 0
        if draft is not None:
            g_o, g_i = draft[1].groups, draft[2].groups
            tuned = draft_jobs(hw, draft, batch, d_out, d_in)
            adds = batch * d_out * (g_i - 1)
            red = epu_cycles(hw, adds)
            cycles = _cycles(tuned, run) + red
            row.update(dcc_draft=" ".join(map(str, draft)), channels=[g_o, g_i],
                       tuned_cycles=cycles, reduce_cycles=red)  # fmt: skip
            if cycles < fixed_cycles:
                jobs[op], reduce[op] = tuned, red
                flops += adds
                row["used"] = "tuned"
        used = row["tuned_cycles"] if row["used"] == "tuned" else fixed_cycles
        row["speedup"] = fixed_cycles / used if used else 1.0
        rows.append(row)
    return GemvTuning(jobs, reduce, flops, tuple(rows))


def mapping_report(setup: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The report's ``mapping`` block of a tuned step: the rows of every op and micro-batch
    size (the same whether a shape was searched or looked up)."""
    return {
        "mapping": "tuned",
        "dcc_backend": module_backend(setup.hw).name,
        "gemv": sorted(rows, key=lambda r: (r["batch"], GEMV_OPS.index(r["op"]))),
        "attention": "fixed (see sim/systems/tuned.py)",
    }


def mapping_lines(block: dict[str, Any]) -> list[str]:
    """The ``mapping`` block as report text (nothing under ``fixed``)."""
    if not block:
        return []
    lines = ["mapping: tuned (DCC on the module as an AiM back end; attention fixed)"]
    for r in block["gemv"]:
        tuned = "-" if r["tuned_cycles"] is None else f"{r['tuned_cycles']:,}"
        ch = r["channels"]
        where = f"{ch[0]} x {ch[1]} channels" if ch else r["refused"]
        lines.append(
            f"  {r['op']:<5} B{r['batch']} {r['d_out']}x{r['d_in']}: fixed {r['fixed_cycles']:,}, "
            f"DCC {tuned} ({where}, d_out x d_in) -> {r['used']} {r['speedup']:.3f}x"
        )
    return lines
