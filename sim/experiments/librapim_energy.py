"""``pimphony librapim-energy``: LibraPIM Fig. 22 shape -- energy of a decode step of the
LibraPIM systems (NPU+AiM, AttAcc, NeuPIMs, LibraPIM) by part (``docs/energy.md``).

Every point is one :func:`sim.systems.librapim.run_librapim` step (the systems' times and
decisions, not modified). Its energy is re-derived from what each system ran, per device and
layer, then x layers x ``tp`` devices:

* **PIM MAC / I/O / activation**: the channel kernels of the system's PIM work (attention of
  the requests left on PIM, in the partition :func:`~sim.systems.step.attention_cycles`
  picks, the fastest as the system's timing does; AttAcc's co-processed FFN GEMVs; LibraPIM's
  offloaded FFN in the Fig. 14 mode), their :class:`models.energy.ChannelActivity` from the
  kernel cache, converted with the HBM energy preset (``hbm-pim``: AiM commands on HBM2);
* **background**: every channel of every device over the step, active for its kernels'
  active residency and precharged for the rest;
* **EPU**: softmax FLOPs; **NPU**: issued FLOPs and DRAM bytes of every xPU op the system
  runs (QKV, projection, FFN of the requests not offloaded, vector ops, moved attention),
  at the preset's PIM ALU energy per MAC and its full-path DRAM energy per byte (the AttAcc
  simulator charges its GPU with the same two values); **links**: Q/K/V and attention
  outputs (and offloaded FFN inputs/outputs) at the preset's ``host_link_energy``.

The paper (6.5): energy at batch 128, Llama3-70B; "with DBO enabled, LibraPIM shows higher
energy consumption for shorter sequences ... an average overhead of approximately 20%" over
NeuPIMs.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import LayerOp, ModelSpec, load_model
from pimphony.compiler.plan import (
    DecodeMappingError,
    PartitionError,
    layer_plan,
    micro_batches,
)
from pimphony.models.config import HardwareConfig, load_preset
from pimphony.models.energy import (
    PARTS,
    ChannelActivity,
    Energy,
    HbmEnergyParams,
    background_energy,
    dynamic_energy,
    load_energy,
)
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import pyplot, write_figure
from pimphony.models.hub import SOFTMAX_FLOPS_PER_SCORE
from pimphony.models.xpu_config import XpuConfig, XpuEnergy, load_xpu
from pimphony.sim.analysis.librapim_grid import LIBRAPIM_CONTEXTS, LIBRAPIM_DIR
from pimphony.sim.cli import bounded_int, bounded_ints, positive_ints
from pimphony.sim.provenance import provenance
from pimphony.sim.report import ReportFiles, parse_list, publish_json
from pimphony.sim.systems.base import SystemKind
from pimphony.sim.systems.costs import OpCosts, layer_costs
from pimphony.sim.systems.energy import xpu_energy
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.librapim import (
    ATTENTION_PARTITIONS,
    DEFAULT_TP,
    LIBRAPIM_PRESET,
    LIBRAPIM_SPECS,
    LIBRAPIM_XPU,
    LibrapimStep,
    OffloadReading,
    add_offload_argument,
    librapim_cache,
    offload_jobs,
    offload_reading,
    run_librapim,
)
from pimphony.sim.systems.setup import DecodeError, DecodeSetup
from pimphony.sim.systems.step import attention_cycles

__all__ = [
    "FIG22_SYSTEMS",
    "FIG22_BATCH",
    "FIG22_MODEL",
    "PAPER_DBO_OVER_NEUPIMS",
    "add_arguments",
    "fig22",
    "format_fig22",
    "hbm_energy",
    "npu_energy_params",
    "plot_fig22",
    "run",
    "system_energy",
]

#: LibraPIM 6.5 / Fig. 22: "Energy consumption in Llama3-70B", "under the batch size of 128".
FIG22_MODEL = "llama-3.1-70b"
FIG22_BATCH = 128
#: 6.5: LibraPIM with DBO vs NeuPIMs, "an average overhead of approximately 20%".
PAPER_DBO_OVER_NEUPIMS = 1.20
#: The bars' parts, in stacking order (``Energy`` fields; ``xpu`` is the NPU).
BAR_PARTS = ("xpu", "mac", "io", "activation", "background", "epu", "links")
_LABELS = {
    "xpu": "NPU",
    "mac": "PIM MAC",
    "io": "PIM I/O",
    "activation": "ACT/PRE",
    "background": "background",
    "epu": "EPU (softmax)",
    "links": "links",
}


#: Fig. 22's systems (the four of Fig. 19) and LibraPIM without DBO, the paper's
#: "DBO costs ~20% more energy" comparison.
FIG22_SYSTEMS = (
    SystemKind.NPU_AIM,
    SystemKind.ATTACC,
    SystemKind.NEUPIMS,
    SystemKind.LIBRAPIM,
    SystemKind.LIBRAPIM_NO_DBO,
)


def npu_energy_params(params: HbmEnergyParams) -> XpuEnergy:
    """The NPU's activity energy from the HBM preset: ``alu_energy`` / 2 per FLOP and the
    full path per DRAM byte, 8 x (cell ACT + cell column + column decoder -> host), the two
    values the AttAcc simulator charges its GPU with (``ENERGY_TABLE['GPU']`` 'alu', 'mem');
    its L1/L2/register terms are not modelled (our cost model counts no on-chip traffic)."""
    v = params.values
    return XpuEnergy(
        pj_per_flop=v["alu_energy"] / 2,
        pj_per_dram_byte=8 * (v["cell_act_energy"] + v["cell_column_energy"] + params.host_path),
    )


def _attention_activity(
    spec: ModelSpec, hw: HardwareConfig, tp: int, lengths: tuple[int, ...], cache: KernelCache
) -> tuple[ChannelActivity, str]:
    """One layer's PIM attention of ``lengths`` on one (1/``tp``-of-the-heads) device: the
    fastest partition, as ``sim.systems.librapim`` picks it; its kernels' activity."""
    best: tuple[int, str] | None = None
    key = tuple(sorted(lengths))
    for part in ATTENTION_PARTITIONS:
        try:
            setup = DecodeSetup(spec, hw, key, tp=tp, partition=part, check_capacity=False)
            chosen, att, _ = attention_cycles(setup, key, cache)
        except (PartitionError, DecodeMappingError):
            continue
        total = sum(att[k] for k in ("qk", "softmax", "sv"))
        if best is None or total < best[0]:
            best = (total, chosen)
    if best is None:
        raise DecodeError(f"no attention partition maps {spec.name} on this PIM")
    plan = layer_plan(spec, hw, key, tp, best[1])
    act = ChannelActivity.zero()
    for jobs in (*plan.qk, *plan.sv):
        for j in jobs:
            act += cache.run(j).activity
    return act, best[1]


def _ffn_gemv_activity(
    spec: ModelSpec, hw: HardwareConfig, tp: int, m: int, cache: KernelCache
) -> ChannelActivity:
    """AttAcc's co-processed FFN of ``m`` requests on one device: the FFN GEMVs (each bank
    reads its weights per request), all channels."""
    act = ChannelActivity.zero()
    if m:
        plan = layer_plan(spec, hw, (1,) * m, tp)
        for op in (LayerOp.FFN1, LayerOp.FFN2):
            for jobs in plan.gemv[op]:
                for j in jobs:
                    act += cache.run(j).activity
    return act


def _ffn_shared_activity(
    spec: ModelSpec,
    hw: HardwareConfig,
    tp: int,
    m: int,
    cache: KernelCache,
    offload: OffloadReading = OffloadReading.PER_BANK,
) -> ChannelActivity:
    """LibraPIM's offloaded FFN of ``m`` requests on one device under ``offload``: the
    channel kernels ``sim.systems.librapim`` times (:func:`~sim.systems.librapim.offload_jobs`;
    per bank, the Fig. 14 mode), all channels."""
    act = ChannelActivity.zero()
    for per_channel in offload_jobs(spec, hw, tp, m, offload).values():
        for jobs in per_channel:
            for j in jobs:
                act += cache.run(j).activity
    return act


def _qkv_out_bytes(spec: ModelSpec, tp: int, n: int) -> int:
    """Q/K/V to PIM and attention outputs back for ``n`` requests on one device (bytes), as
    ``sim.systems.librapim`` sends them."""
    e = spec.element_bytes
    qkv = n * (spec.heads + 2 * spec.kv_heads) * spec.head_dim * e // tp
    return qkv + n * spec.heads * spec.head_dim * e // tp


def hbm_energy(name: str) -> HbmEnergyParams:
    """The energy preset ``name``, refused unless it is of kind ``hbm`` (LibraPIM's PIM is
    HBM2)."""
    params = load_energy(name)
    if not isinstance(params, HbmEnergyParams):
        raise DecodeError(
            f"energy preset {params.name!r} is not of kind 'hbm'; LibraPIM's PIM is HBM2: use "
            "an HBM preset such as hbm-pim"
        )
    return params


def system_energy(
    spec: ModelSpec,
    hw: HardwareConfig,
    xpu: XpuConfig,
    tp: int,
    lengths: tuple[int, ...],
    result: LibrapimStep,
    params: HbmEnergyParams,
    cache: KernelCache,
    offload: OffloadReading = OffloadReading.PER_BANK,
) -> dict[str, Any]:
    """Energy of one system's step (``result``) on ``tp`` devices: parts in J, J per token,
    the PIM activity's counts. ``cache`` must time kernels as ``run_librapim``'s does, and
    ``offload`` be the reading it ran with."""
    e_bytes = spec.element_bytes
    npu = dataclasses.replace(xpu, energy=npu_energy_params(params))
    pim = ChannelActivity.zero()
    costs: OpCosts = {}
    link_bytes = 0
    softmax_scores = 0
    if result.name == SystemKind.ATTACC:
        b = len(lengths)
        m = int(result.decisions[0]["m"])
        chunks = int(result.decisions[0]["chunks"])
        att, _ = _attention_activity(spec, hw, tp * chunks, lengths, cache)
        pim = att.scaled(chunks) + _ffn_gemv_activity(spec, hw, tp, m, cache)
        softmax_scores = sum(lengths)
        costs.update(layer_costs(spec, xpu, b, tp, ffn_batch=b - m))
        link_bytes = _qkv_out_bytes(spec, tp, b) + 2 * m * spec.hidden * e_bytes
    else:
        for i, mb in enumerate(micro_batches(lengths, result.groups)):
            d = result.decisions[i]
            use = LIBRAPIM_SPECS[SystemKind(result.name)].dbo
            m, n = (int(d["m"]), int(d["n"])) if use else (0, 0)
            order = sorted(range(len(mb)), key=lambda r: -mb[r])
            on_xpu = tuple(mb[r] for r in order[:n])
            on_pim = tuple(mb[r] for r in order[n:])
            if on_pim:
                pim += _attention_activity(spec, hw, tp, on_pim, cache)[0]
            pim += _ffn_shared_activity(spec, hw, tp, m, cache, offload)
            softmax_scores += sum(on_pim)
            group = layer_costs(spec, xpu, len(mb), tp, ffn_batch=len(mb) - m, contexts=on_xpu)
            costs.update({f"{k}.{i}": c for k, c in group.items()})
            link_bytes += _qkv_out_bytes(spec, tp, len(on_pim)) + 2 * m * spec.hidden * e_bytes
    layers = spec.layers
    pim = pim.scaled(layers)
    channel_cycles = hw.module.channels * result.cycles
    if pim.active_cycles > channel_cycles:
        raise DecodeError(
            f"{result.name}: {pim.active_cycles} active channel-cycles exceed the step's "
            f"{channel_cycles}"
        )
    dyn = dynamic_energy(pim, hw, params)
    npu_e = xpu_energy(npu, costs)
    assert npu_e is not None
    softmax_flops = SOFTMAX_FLOPS_PER_SCORE * (spec.heads // tp) * softmax_scores * layers
    device = Energy(
        mac=dyn.mac,
        io=dyn.io,
        activation=dyn.activation,
        background=background_energy(
            pim.active_cycles, channel_cycles - pim.active_cycles, hw, params
        ),
        epu=softmax_flops * params.values["epu_energy"],
        xpu=npu_e.xpu * layers,
        links=params.link_pj(link_bytes * layers, "host"),
    )
    total = device.scaled(tp)
    out = total.to_dict("J")
    return {
        "parts_j": out,
        "joules_per_step": out["total"],
        "joules_per_token": out["total"] / len(lengths),
        "pim_counts_per_device": {k: int(v) for k, v in pim.counts.items() if v},
        "row_switches_per_device": pim.row_switches,
        "pim_active_fraction": pim.active_cycles / channel_cycles,
        "step_ms": result.step_seconds * 1e3,
    }


def fig22(
    models: Sequence[str] = (FIG22_MODEL,),
    batches: Sequence[int] = (FIG22_BATCH,),
    contexts: Sequence[int] = LIBRAPIM_CONTEXTS,
    groups: int = 2,
    tp: int = DEFAULT_TP,
    energy: str = "hbm-pim",
    preset: str = LIBRAPIM_PRESET,
    xpu: str = LIBRAPIM_XPU,
    progress: Callable[[str], None] | None = None,
    offload: OffloadReading = OffloadReading.PER_BANK,
) -> list[dict[str, Any]]:
    """One row per (model, batch, context): each paper system's energy by part; LibraPIM's
    offloaded FFN under ``offload``."""
    hw, dev = load_preset(preset), load_xpu(xpu)
    params = hbm_energy(energy)
    offload = offload_reading(offload)
    stacks = params.chips(hw)
    names = list(FIG22_SYSTEMS)
    rows = []
    for name in models:
        spec = load_model(name)
        for b in batches:
            for ctx in contexts:
                lengths = (ctx,) * b
                cache = librapim_cache(hw, "dcs", lengths)
                systems = run_librapim(
                    spec, hw, dev, lengths, min(groups, b), "dcs", tp, names, cache=cache,
                    offload=offload,
                )  # fmt: skip
                row: dict[str, Any] = {
                    "model": spec.name, "batch": b, "context": ctx, "stacks_per_device": stacks,
                    "systems": {
                        s: system_energy(spec, hw, dev, tp, lengths, r, params, cache, offload)
                        for s, r in systems.items()
                    },
                    "dbo": [
                        {k: d[k] for k in ("case", "m", "n")}
                        for d in systems[SystemKind.LIBRAPIM].decisions
                    ],
                }  # fmt: skip
                base = row["systems"][SystemKind.NEUPIMS]["joules_per_step"]
                for e in row["systems"].values():
                    e["vs_neupims"] = e["joules_per_step"] / base
                rows.append(row)
                if progress:
                    progress(
                        f"{spec.name} B={b} L={ctx}: "
                        + " ".join(
                            f"{s} {e['joules_per_token']:.3f} J/tok"
                            for s, e in row["systems"].items()
                        )
                    )
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Mean over the rows of each system's energy relative to NeuPIMs."""
    systems = rows[0]["systems"]
    return {s: sum(r["systems"][s]["vs_neupims"] for r in rows) / len(rows) for s in systems}


def format_fig22(rows: list[dict[str, Any]]) -> str:
    """Per point and system: J per token by part, and the ratio to NeuPIMs."""
    head = f"{'model':14s} {'B':>4s} {'L':>5s} {'system':9s} {'J/token':>8s} " + " ".join(
        f"{_LABELS[p].split(' (')[0]:>10.10s}" for p in BAR_PARTS
    )
    lines = [head + "  vs NeuPIMs"]
    for r in rows:
        for s, e in r["systems"].items():
            parts = e["parts_j"]
            lines.append(
                f"{r['model']:14s} {r['batch']:4d} {r['context']:5d} {s:9s} "
                f"{e['joules_per_token']:8.4f} "
                + " ".join(f"{parts[p] / r['batch']:10.4f}" for p in BAR_PARTS)
                + f"  {e['vs_neupims']:.2f}x"
            )
    mean = summary(rows)
    lines.append(
        "mean energy vs NeuPIMs: "
        + ", ".join(f"{s} {v:.2f}x" for s, v in mean.items())
        + f" (paper: LibraPIM ~{PAPER_DBO_OVER_NEUPIMS:.2f}x)"
    )
    return "\n".join(lines)


_COLOURS = {
    "xpu": "#264653",
    "mac": "#e76f51",
    "io": "#f4a261",
    "activation": "#e9c46a",
    "background": "#8ecae6",
    "epu": "#2a9d8f",
    "links": "#adb5bd",
}


def plot_fig22(rows: list[dict[str, Any]], path: Path) -> Path:
    """Stacked bars: per point (x) the systems side by side, J per token by part."""
    plt = pyplot()
    systems = list(rows[0]["systems"])
    fig, ax = plt.subplots(figsize=(max(7.0, 1.6 * len(rows) * len(systems) / 2), 4.2))
    w = 0.8 / len(systems)
    for i, s in enumerate(systems):
        xs = [x + (i - (len(systems) - 1) / 2) * w for x in range(len(rows))]
        bottom = [0.0] * len(rows)
        for p in BAR_PARTS:
            h = [r["systems"][s]["parts_j"][p] / r["batch"] for r in rows]
            ax.bar(xs, h, w, bottom=bottom, color=_COLOURS[p], edgecolor="white", lw=0.3,
                   label=_LABELS[p] if i == 0 else None)  # fmt: skip
            bottom = [b + v for b, v in zip(bottom, h, strict=True)]
        for x, top in zip(xs, bottom, strict=True):
            ax.text(x, top, s, rotation=90, ha="center", va="bottom", fontsize=6)
    ax.set_xticks(
        list(range(len(rows))),
        [f"{r['model']}\nB {r['batch']}, L {r['context']}" for r in rows],
        fontsize=7,
    )
    ax.set_xlabel("model, batch size, input length (tokens)")
    ax.set_ylabel("energy per generated token (J)")
    ax.set_title("Decode-step energy by part (LibraPIM Fig. 22 shape; NPU+AiM, AttAcc, NeuPIMs, "
                 "LibraPIM)", fontsize=9)  # fmt: skip
    ax.legend(fontsize=7, ncol=4, loc="upper left")
    ax.margins(y=0.15)
    fig.tight_layout()
    return write_figure(fig, path)


_FILES = ReportFiles.named(LIBRAPIM_DIR, "fig22")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``librapim-energy`` subcommand's options."""
    p.add_argument("--models", default=FIG22_MODEL, help="comma-separated model presets")
    p.add_argument("--batches", type=bounded_ints(1, 4096), default=(FIG22_BATCH,), help="e.g. 128")
    p.add_argument("--contexts", type=positive_ints, default=LIBRAPIM_CONTEXTS, help="e.g. 16,4096")
    p.add_argument(
        "--groups", type=bounded_int(1, 4096), default=2, help="batch groups (NeuPIMs, LibraPIM)"
    )
    p.add_argument(
        "--tp", type=bounded_int(1, 1024), default=DEFAULT_TP, help="devices sharing every layer"
    )
    p.add_argument("--energy", default="hbm-pim", help="kind = hbm energy preset or .toml")
    add_offload_argument(p)
    _FILES.add_options(p)


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony librapim-energy``."""
    report, plot = _FILES.paths(args)
    progress = None if args.json else (lambda m: print(f"  {m}", flush=True))
    models = tuple(parse_list("--models", args.models, str, PimphonyError))
    rows = fig22(
        models, args.batches, args.contexts, args.groups, args.tp, args.energy,
        progress=progress, offload=OffloadReading(args.offload),
    )  # fmt: skip
    path = plot_fig22(rows, plot)
    block = provenance(args, load_preset(LIBRAPIM_PRESET), models=list(models))
    doc = {
        "rows": rows,
        "mean_vs_neupims": summary(rows),
        "paper": {"librapim_vs_neupims": PAPER_DBO_OVER_NEUPIMS},
        "parts": [str(p) for p in PARTS],
        "plot": str(path),
        "provenance": block,
    }
    publish_json(doc, {"report": report, "plot": plot}, args.json, lambda: format_fig22(rows))
    return 0
