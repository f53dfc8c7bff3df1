"""``pimphony gpu-compare``: PIM-only vs GPU-only as capacity grows (LoL-PIM Fig. 9(a) shape).

For each workload and each system capacity C (128 -> 1024 GB), one capacity-bound decode
batch is admitted first-come-first-served from the same pool of requests drawn from the
workload, on four systems (:data:`SERIES`):

- ``pim-aimx``: LoL-PIM's baseline PIM (AiMX): preset ``lolpim-aimx``, HFP partitioning,
  static scheduling, static (max-context) memory; ``C / 8 GB`` modules;
- ``lol-pim``: LoL-PIM (1)(2)(3): ``lolpim-aimx-io``, ITPP, ping-pong I/O buffering, lazy (DPA)
  memory; ``C / 8 GB`` modules;
- ``gpu-hbm`` and ``gpu-gddr6``: ``C / 64 GB`` GPUs of ``lolpim-gpu-hbm`` (80 GB each) and
  ``lolpim-gpu-gddr6`` (64 GB each), tensor parallel over NVLink
  (:mod:`sim.systems.gpu`).

The PIM systems take the fastest (TP, PP) of :func:`sim.systems.search.valid_splits`
(micro-batches ``auto``); the GPU count matches LoL-PIM's: one GPU per AiMX node of eight
8 GB modules (Table 7: a GPU-GDDR6 has the node's 64 GB and 4096 GB/s; 16 AiMX cards vs a
16-GPU DGX-A100 at 1024 GB). A fifth series, ``gpu-gddr6-10g``, reruns GPU-GDDR6 with its
all-reduces on the 10 GB/s link LoL-PIM 8.1 states for multi-node communication ("matched
across systems"). Throughput is ``batch / step time`` of the one batch. ``docs/results.md``
puts the numbers beside the paper's.

``--hetero`` adds LoL-PIM's heterogeneous systems (Figs. 9b / 10b, :data:`HETERO_SERIES`):
``gpu+pim`` (GPU-GDDR6s running the FC layers, the AiMX baseline's modules the attention:
HFP, static scheduling, static memory) and ``gpu+lol-pim`` (the same GPUs with LoL-PIM's
modules and techniques, the ``gpu+lolpim`` system). LoL-PIM 8.1 sizes them by "the hybrid
configuration halving PIM capacity": at capacity C, C / 2 GB of modules (``C / 16`` modules)
hold the KV cache and C / 2 GB of GPUs (``C / 128`` GPU-GDDR6s of 64 GB, so the external
bandwidth stays matched) hold the weights; a point whose weights exceed the GPUs is left out.
The modules take the fastest (TP, PP) split and the fastest sub-batch count (``auto``).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import ModelSpec, load_model
from pimphony.models.config import load_preset
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import BUILD_DIR, pyplot, write_figure
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.cli import add_seed_option
from pimphony.sim.provenance import provenance
from pimphony.sim.report import FORCE_REPORT_PLOT, ReportFiles, parse_list, publish_json
from pimphony.sim.systems.admission import fill_batch
from pimphony.sim.systems.base import SystemConfig
from pimphony.sim.systems.gpu import GpuSetup, gpu_fill_batch, run_gpu_decode
from pimphony.sim.systems.hetero import SUB_BATCHES_AUTO, HeteroReport, run_hetero_decode
from pimphony.sim.systems.registry import LOLPIM_GPU, SystemKind, make_system
from pimphony.sim.systems.search import best_split, valid_splits
from pimphony.sim.systems.setup import DecodeSetup
from pimphony.sim.systems.step import KernelCaches, best_decode_split
from pimphony.sim.workloads import load_workload, sample_context_lengths

__all__ = [
    "CAPACITIES_GB",
    "CompareError",
    "GPU_COMPARE_DIR",
    "GPU_NODE_GB",
    "HETERO_SERIES",
    "HYBRID_PIM_SHARE",
    "MAX_CAPACITY_GB",
    "MODULE_GB",
    "PAPER",
    "SERIES",
    "WORKLOADS",
    "CompareSeries",
    "add_arguments",
    "format_compare",
    "gpu_compare",
    "plot_compare",
    "run",
]

GPU_COMPARE_DIR = BUILD_DIR / "gpu-compare"
CAPACITIES_GB = (128, 256, 512, 1024)
WORKLOADS = ("qmsum", "hotpotqa", "musique")
MODULE_GB = 8  # one AiMX module: 8 x 1 GB AiM chips (LoL-PIM 8.1)
#: The largest system compared: 1,024 modules, the bound of every system size (``--tp``).
MAX_CAPACITY_GB = 1024 * MODULE_GB
#: The JSON report and the figure, their default paths.
_FILES = ReportFiles.named(GPU_COMPARE_DIR, "fig9", FORCE_REPORT_PLOT)
GPU_NODE_GB = 64  # one AiMX node = 8 modules = one GPU (Table 7's 64 GB columns)
_POOL = 4096  # candidate requests per workload; every system admits a prefix of the same pool
_SLOW_LINK_GBPS = 10.0  # LoL-PIM 8.1: "Multi-node communication ... 10GB/s ... matched"
#: LoL-PIM 8.1: "the hybrid configuration halving PIM capacity": the share of a GPU+PIM
#: system's capacity in PIM modules; the GPUs hold the rest.
HYBRID_PIM_SHARE = 0.5

#: LoL-PIM 8.2, Qwen1.5-7B (Fig. 9(a)): the ratios the text states.
PAPER = {
    "lol-pim/gpu-gddr6 at 1024 GB": 3.53,
    "lol-pim/pim-aimx at 1024 GB": 4.74,
    "pim-aimx > gpu at 128 GB": True,
}


@dataclass(frozen=True)
class CompareSeries:
    """One series: how it is built and how many devices a capacity gives it."""

    label: str
    kind: SystemKind
    preset: str
    per_device_gb: int
    partition: str = ""
    sched: str = ""
    memory: str = ""
    link_gbps: float | None = None  # GPU: override the device link (None: the preset's)
    gpu: str = ""  # GPU+PIM: the GPUs' preset (one per GPU_NODE_GB of their capacity share)


SERIES: tuple[CompareSeries, ...] = (
    CompareSeries("pim-aimx", SystemKind.PIM, "lolpim-aimx", MODULE_GB, "hfp", "static", "static"),
    CompareSeries(
        "lol-pim", SystemKind.PIM, "lolpim-aimx-io", MODULE_GB, "itpp", "pingpong", "lazy"
    ),
    CompareSeries("gpu-hbm", SystemKind.GPU, "lolpim-gpu-hbm", GPU_NODE_GB),
    CompareSeries("gpu-gddr6", SystemKind.GPU, "lolpim-gpu-gddr6", GPU_NODE_GB),
    CompareSeries(
        "gpu-gddr6-10g", SystemKind.GPU, "lolpim-gpu-gddr6", GPU_NODE_GB, link_gbps=_SLOW_LINK_GBPS
    ),
)


#: ``--hetero``: LoL-PIM's GPU+PIM and GPU+LoL-PIM (module docstring); one module per
#: ``MODULE_GB / HYBRID_PIM_SHARE`` GB of system capacity.
HETERO_SERIES: tuple[CompareSeries, ...] = tuple(
    CompareSeries(
        label, kind, preset, round(MODULE_GB / HYBRID_PIM_SHARE), *choices, gpu=LOLPIM_GPU
    )
    for label, kind, preset, choices in (
        ("gpu+pim", SystemKind.XPU_PIM, "lolpim-aimx", ("hfp", "static", "static")),
        ("gpu+lol-pim", SystemKind.GPU_LOLPIM, "lolpim-aimx-io", ("itpp", "pingpong", "lazy")),
    )
)


class CompareError(PimphonyError, ValueError):
    """The comparison cannot run as asked (a capacity that gives no whole device)."""


def _pim_point(
    sys_: CompareSeries, spec: ModelSpec, pool: Sequence[int], devices: int, caches: KernelCaches
) -> dict[str, Any]:
    hw = load_preset(sys_.preset)
    batch = fill_batch(spec, hw, devices, sys_.memory, pool)
    setup = DecodeSetup(
        spec, hw, batch, partition=sys_.partition, sched=sys_.sched, memory=sys_.memory,
        micro_batches="auto",
    )  # fmt: skip
    search = best_decode_split(setup, devices, caches)
    r = search.best
    return {
        "devices": devices,
        "batch": len(batch),
        "tokens_per_s": r.tokens_per_s,
        "step_seconds": r.step_seconds,
        "tp": r.tp,
        "pp": r.pp,
        "micro_batches": r.micro_batches,
        "capacity_utilization": r.capacity_utilization,
        "mac_utilization": r.mac_utilization,
        "bubble_fraction": r.pipeline["bubble_fraction"],
        "splits": {f"{tp}x{pp}": x.tokens_per_s for (tp, pp), x in search.tried},
        **_energy(r.energy),
    }


def _energy(block: dict[str, Any]) -> dict[str, Any]:
    """A step report's energy per token and by part (``docs/energy.md``; None if the device
    preset has no ``[energy]``)."""
    return {"joules_per_token": block.get("joules_per_token"), "energy_j": block.get("parts")}


def _gpu_point(
    sys_: CompareSeries, spec: ModelSpec, pool: Sequence[int], devices: int, _caches: Any
) -> dict[str, Any]:
    gpu = load_xpu(sys_.preset)
    if sys_.link_gbps is not None:
        gpu = dataclasses.replace(
            gpu, links=dataclasses.replace(gpu.links, device_gbps=sys_.link_gbps)
        )
    batch = gpu_fill_batch(spec, gpu, devices, pool)
    r = run_gpu_decode(GpuSetup(spec, gpu, devices, batch))
    return {
        "devices": devices,
        "batch": len(batch),
        "tokens_per_s": r.tokens_per_s,
        "step_seconds": r.step_seconds,
        "tp": devices,
        "pp": 1,
        "capacity_utilization": r.capacity_utilization,
        "compute_utilization": r.compute_utilization,
        "memory_utilization": r.memory_utilization,
        "parts": {k: v["share"] for k, v in r.parts.items()},
        "link_gbps": gpu.links.device_gbps,
        **_energy(r.energy),
    }


def _hetero_point(
    sys_: CompareSeries, spec: ModelSpec, pool: Sequence[int], devices: int, caches: KernelCaches
) -> dict[str, Any]:
    """A GPU+PIM point: ``devices`` modules hold the KV cache, the GPUs of the other half of
    the capacity the weights (``tokens_per_s`` None when they do not fit)."""
    hw, gpu = load_preset(sys_.preset), load_xpu(sys_.gpu)
    gpus = round(devices * MODULE_GB * (1 - HYBRID_PIM_SHARE) / HYBRID_PIM_SHARE / GPU_NODE_GB)
    head = {"devices": devices, "gpus": gpus}
    if spec.resident_weight_bytes > gpus * gpu.capacity_bytes:
        why = f"the weights exceed {gpus} x {gpu.name}"
        return {**head, "batch": 0, "tokens_per_s": None, "step_seconds": None, "why": why}
    batch = fill_batch(spec, hw, devices, sys_.memory, pool, weights=False)

    def step(tp: int, pp: int) -> HeteroReport:
        config = SystemConfig(
            spec, hw, tp=tp, pp=pp, partition=sys_.partition, sched=sys_.sched,
            memory=sys_.memory, xpu=gpu, gpus=gpus, sub_batches=SUB_BATCHES_AUTO,
        )  # fmt: skip
        setup = make_system(sys_.kind, config).setup(batch)
        return run_hetero_decode(setup, caches.for_setup(setup.pim))

    search = best_split(step, valid_splits(spec, devices))
    r = search.best
    return {
        **head,
        "batch": len(batch),
        "tokens_per_s": r.tokens_per_s,
        "step_seconds": r.step_seconds,
        "tp": r.tp,
        "pp": r.pp,
        "sub_batches": r.sub_batches,
        "capacity_utilization": r.memory_detail["capacity_utilization"],
        "busy": {d: v["utilization"] for d, v in r.devices.items()},
        "splits": {f"{tp}x{pp}": x.tokens_per_s for (tp, pp), x in search.tried},
        **_energy(r.energy),
    }


#: How a point of each kind of system is measured.
_POINTS: dict[SystemKind, Callable[..., dict[str, Any]]] = {
    SystemKind.PIM: _pim_point,
    SystemKind.GPU: _gpu_point,
    SystemKind.XPU_PIM: _hetero_point,
    SystemKind.GPU_LOLPIM: _hetero_point,
}


def gpu_compare(
    model: str = "llm-7b",
    workloads: Sequence[str] = WORKLOADS,
    capacities: Sequence[int] = CAPACITIES_GB,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    hetero: bool = False,
) -> list[dict[str, Any]]:
    """One row per (workload, capacity, system): the admitted batch, the best split (PIM) and
    tokens/s; each row also holds the ratios to the other systems at that point.
    ``hetero`` adds :data:`HETERO_SERIES`."""
    series = compared_series(hetero)
    for cap in capacities:  # every point checked before the first is run
        if not 0 < cap <= MAX_CAPACITY_GB:
            raise CompareError(
                f"capacity {cap} GB is outside 1 to {MAX_CAPACITY_GB:,} GB "
                f"({MAX_CAPACITY_GB // MODULE_GB:,} modules of {MODULE_GB} GB)"
            )
        for s in series:
            unit = s.per_device_gb * (GPU_NODE_GB // MODULE_GB if s.gpu else 1)
            if cap % unit:
                raise CompareError(
                    f"capacity {cap} GB is not a whole number of {unit} GB "
                    f"({s.label}: {s.per_device_gb} GB per device)"
                )
    spec = load_model(model)
    caches = KernelCaches()
    rows = []
    for wl in workloads:
        pool = [int(t) for t in sample_context_lengths(load_workload(wl), _POOL, seed)]
        for cap in capacities:
            point: dict[str, dict[str, Any]] = {}
            for s in series:
                devices = cap // s.per_device_gb
                started = time.perf_counter()
                res = _POINTS[s.kind](s, spec, pool, devices, caches)
                point[s.label] = res
                rows.append({"workload": wl, "capacity_gb": cap, "system": s.label, **res})
                if progress:
                    tps = res["tokens_per_s"]
                    progress(
                        f"{wl} {cap} GB {s.label}: {devices} devices, batch {res['batch']}, "
                        + (res["why"] if tps is None else f"{tps:,.0f} tokens/s")
                        + f" ({time.perf_counter() - started:.1f} s)"
                    )
    return rows


def compared_series(hetero: bool = False) -> tuple[CompareSeries, ...]:
    """:data:`SERIES`, and :data:`HETERO_SERIES` with ``hetero``."""
    return SERIES + (HETERO_SERIES if hetero else ())


def _series(rows: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, float]]:
    out: dict[tuple[str, int], dict[str, float]] = {}
    for r in rows:
        out.setdefault((r["workload"], r["capacity_gb"]), {})[r["system"]] = r["tokens_per_s"]
    return out


def _has_hetero(rows: list[dict[str, Any]]) -> bool:
    return any(r["system"] == HETERO_SERIES[0].label for r in rows)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{'n/a':>10}" if a is None or b is None else f"{a / b:>9.2f}x"


#: ``--hetero``'s extra ratio columns: (head, numerator, denominator).
_HETERO_RATIOS = (
    ("LoL/G+P", "lol-pim", "gpu+pim"),
    ("LoL/G+L", "lol-pim", "gpu+lol-pim"),
    ("G+L/G+P", "gpu+lol-pim", "gpu+pim"),
)


def format_compare(rows: list[dict[str, Any]]) -> str:
    """The comparison as a text table: tokens/s per system and LoL-PIM's ratios."""
    hetero = _has_hetero(rows)
    labels = [s.label for s in compared_series(hetero)]
    head = f"{'workload':<10}{'GB':>6}" + "".join(f"{x:>15}" for x in labels)
    head += f"{'LoL/GDDR':>10}{'LoL/AiMX':>10}{'AiMX/GPU':>10}"
    if hetero:
        head += "".join(f"{h:>10}" for h, _, _ in _HETERO_RATIOS)
    lines = ["tokens/s (batch) per system; ratios of LoL-PIM and of the PIM baseline", head]
    lines.append("-" * len(head))
    batch = {(r["workload"], r["capacity_gb"], r["system"]): r["batch"] for r in rows}
    for (wl, cap), tps in _series(rows).items():
        cells = "".join(
            f"{'n/a':>15}"
            if x in tps and tps[x] is None
            else f"{tps[x]:>9,.0f} ({batch[(wl, cap, x)]:>3})"
            if x in tps
            else f"{'-':>15}"
            for x in labels
        )
        best_gpu = max(tps["gpu-hbm"], tps["gpu-gddr6"])
        line = (
            f"{wl:<10}{cap:>6}{cells}{tps['lol-pim'] / tps['gpu-gddr6']:>9.2f}x"
            f"{tps['lol-pim'] / tps['pim-aimx']:>9.2f}x{tps['pim-aimx'] / best_gpu:>9.2f}x"
        )
        if hetero:
            line += "".join(_ratio(tps[a], tps[b]) for _, a, b in _HETERO_RATIOS)
        lines.append(line)
    lines.append(
        "paper (LoL-PIM 8.2, Qwen1.5-7B): at 1024 GB LoL-PIM 3.53x GPU-GDDR, 4.74x PIM-only; "
        "PIM-only above GPU-only at 128 GB"
    )
    if hetero:
        lines.append(
            "paper (LoL-PIM abstract, 8.2): up to 16.0x over GPU-PIM; GPU+LoL-PIM below "
            "LoL-PIM by less than 2x. GPU+PIM: C / 2 in modules, C / 2 in GPU-GDDR6s "
            "('halving PIM capacity')"
        )
    jpt = {(r["workload"], r["capacity_gb"], r["system"]): r.get("joules_per_token") for r in rows}
    lines.append("J/token per system (PIM: aim-cent; GPUs: activity model, no static power)")
    for wl, cap in _series(rows):
        cells = "".join(
            f"{'n/a' if jpt.get((wl, cap, x)) is None else f'{jpt[wl, cap, x]:.4f}':>15}"
            for x in labels
        )
        lines.append(f"{wl:<10}{cap:>6}{cells}")
    return "\n".join(lines)


_STYLE = {
    "pim-aimx": ("PIM-only (AiMX baseline)", "#adb5bd", "o"),
    "lol-pim": ("LoL-PIM (1)(2)(3)", "#e76f51", "s"),
    "gpu-hbm": ("GPU-HBM (A100, 80 GB)", "#219ebc", "^"),
    "gpu-gddr6": ("GPU-GDDR6 (64 GB)", "#023047", "v"),
    "gpu-gddr6-10g": ("GPU-GDDR6, 10 GB/s link", "#8ecae6", "x"),
    "gpu+pim": ("GPU + PIM (AiMX baseline, half capacity)", "#6c757d", "D"),
    "gpu+lol-pim": ("GPU + LoL-PIM (half capacity)", "#f4a261", "P"),
}


def plot_compare(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """PNG: tokens/s vs system capacity, one panel per workload, one line per system."""
    plt = pyplot()
    series = _series(rows)
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 3.8), sharey=True)
    axes = list(axes) if len(workloads) > 1 else [axes]
    for ax, wl in zip(axes, workloads, strict=True):
        caps = sorted(c for w, c in series if w == wl)
        for s in compared_series(_has_hetero(rows)):
            label, color, marker = _STYLE[s.label]
            values = [series[(wl, c)][s.label] for c in caps]
            ax.plot(
                caps,
                [math.nan if v is None else v for v in values],
                marker=marker,
                color=color,
                label=label,
                ls="--" if s.link_gbps else "-",
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(caps, [str(c) for c in caps])
        ax.set_xlabel("system memory capacity (GB)")
        ax.set_title(wl, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("decode throughput (tokens/s)")
    axes[-1].legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return write_figure(fig, path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``gpu-compare`` subcommand's options."""
    p.add_argument("--model", default="llm-7b", help="default llm-7b (Qwen1.5-7B)")
    p.add_argument(
        "--workloads", default=",".join(WORKLOADS), help="comma-separated workload names"
    )
    p.add_argument(
        "--capacities",
        default=",".join(map(str, CAPACITIES_GB)),
        help="comma-separated system capacities, GB (multiples of 64)",
    )
    p.add_argument(
        "--hetero",
        action="store_true",
        help="add LoL-PIM's GPU+PIM and GPU+LoL-PIM (Figs. 9b / 10b; half the capacity in "
        "modules, half in GPU-GDDR6s)",
    )
    add_seed_option(p, "seed of the context-length draws")
    _FILES.add_options(p)


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony gpu-compare``."""
    report, plot = _FILES.paths(args)
    workloads = parse_list("--workloads", args.workloads, str, CompareError)
    capacities = parse_list("--capacities", args.capacities, int, CompareError)
    progress = None if args.json else (lambda m: print(f"  {m}", flush=True))
    rows = gpu_compare(args.model, workloads, capacities, args.seed, progress, args.hetero)
    title = (
        f"{args.model}: PIM-only vs GPU-only decode throughput as capacity grows "
        "(LoL-PIM Fig. 9(a) shape)"
        if not args.hetero
        else f"{args.model}: standalone and GPU+PIM decode throughput as capacity grows "
        "(LoL-PIM Figs. 9 / 10)"
    )
    path = plot_compare(rows, plot, title)
    block = provenance(args, None, model=dataclasses.asdict(load_model(args.model)), seed=args.seed)
    doc = {"rows": rows, "paper": PAPER, "plot": str(path), "provenance": block}
    publish_json(doc, {"report": report, "plot": path}, args.json, lambda: format_compare(rows))
    return 0
