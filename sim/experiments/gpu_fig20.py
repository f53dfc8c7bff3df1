"""``pimphony gpu-fig20``: PIMphony Fig. 20 -- PIMphony (PIM-only) vs A100 GPUs, memory-matched.

For each case (:data:`FIG20_CASES`: LLM-7B/72B without GQA on LongBench QMSum, with GQA on
LV-Eval multifieldqa; 128 GB for 7B, 512 GB for 72B, PIMphony VIII-A) one capacity-bound
decode batch is admitted first-come-first-served from the same 4,096-request pool on:

- ``pimphony``: PIMphony on CENT, ``C / 16 GB`` modules of ``pimphony-cent``, partition
  ``auto`` (TCP/HFP per layer), DCS, lazy (DPA) memory, the fastest (TP, PP) of
  :func:`sim.systems.search.valid_splits` with micro-batches ``auto``;
- ``a100``: ``C / 64 GB`` A100-80GB (``configs/xpu/a100-80gb.toml``), tensor parallel on
  NVLink, each letting weights and paged KV use 64 of its 80 GB (``--gpu-memory-fraction
  0.8``), so both systems hold the same ``C`` GB. Flash-decoding and paged attention are what
  the GPU step models (:mod:`sim.systems.gpu`): attention reads the paged KV in whole
  16-token blocks at the roofline's capped bandwidth, which flash-decoding's split over the
  sequence is what reaches at batch sizes too small to fill the SMs by heads alone;
- ``a100-full``: the same GPUs with all 80 GB each (more capacity than PIM: a sensitivity).

Throughput is ``batch / step time``; the speedup is PIMphony's over ``a100``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import ModelSpec, load_model
from pimphony.models.config import load_preset
from pimphony.models.fileio import BUILD_DIR, pyplot, write_figure
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.cli import add_seed_option
from pimphony.sim.provenance import provenance
from pimphony.sim.report import FORCE_REPORT_PLOT, ReportFiles, publish_json
from pimphony.sim.systems.admission import fill_batch
from pimphony.sim.systems.gpu import GpuSetup, gpu_fill_batch, run_gpu_decode
from pimphony.sim.systems.setup import DecodeSetup
from pimphony.sim.systems.step import KernelCaches, best_decode_split
from pimphony.sim.workloads import load_workload, sample_context_lengths

__all__ = [
    "FIG20_CASES",
    "FIG20_DIR",
    "GPU",
    "GPU_MATCHED_GB",
    "MODULE_GB",
    "PIM_PRESET",
    "add_arguments",
    "fig20",
    "format_fig20",
    "plot_fig20",
    "run",
]

FIG20_DIR = BUILD_DIR / "gpu-fig20"
#: The JSON report and the figure, their default paths.
_FILES = ReportFiles.named(FIG20_DIR, "fig20", FORCE_REPORT_PLOT)
#: (model, workload, capacity GB): non-GQA models on LongBench, GQA on LV-Eval (VIII-A).
FIG20_CASES: tuple[tuple[str, str, int], ...] = (
    ("llm-7b", "qmsum", 128),
    ("llm-72b", "qmsum", 512),
    ("llama-3.1-8b", "multifieldqa", 128),
    ("llama-3.1-70b", "multifieldqa", 512),
)
PIM_PRESET = "pimphony-cent"
MODULE_GB = 16  # one CENT module (PIMphony Table IV)
GPU = "a100-80gb"  # PIMphony VIII-C: "A100s with flash-decoding (FD) and paged-attention (PA)"
#: GB of each A100 the matched system lets weights + KV use: 128 GB is 1.6 A100-80GB, so the
#: GPU count is C / 64 (2 at 128 GB, 8 at 512 GB: both divide the models' heads) and each GPU
#: uses 64 of its 80 GB, making the totals equal ("memory-matched", Fig. 20).
GPU_MATCHED_GB = 64
_POOL = 4096


def _pim(spec: ModelSpec, pool: Sequence[int], modules: int, caches: KernelCaches) -> dict:
    hw = load_preset(PIM_PRESET)
    batch = fill_batch(spec, hw, modules, "lazy", pool)
    setup = DecodeSetup(
        spec, hw, batch, partition="auto", sched="dcs", memory="lazy", micro_batches="auto"
    )
    best = best_decode_split(setup, modules, caches).best
    return {
        "devices": modules,
        "batch": len(batch),
        "tokens_per_s": best.tokens_per_s,
        "step_seconds": best.step_seconds,
        "split": f"TP {best.tp} x PP {best.pp}",
        "mac_utilization": best.mac_utilization,
        "joules_per_token": best.energy["joules_per_token"],  # docs/energy.md
        "energy_j": best.energy["parts"],
    }


def _gpu(spec: ModelSpec, pool: Sequence[int], gpus: int, fraction: float) -> dict:
    gpu = load_xpu(GPU)
    batch = gpu_fill_batch(spec, gpu, gpus, pool, fraction)
    r = run_gpu_decode(GpuSetup(spec, gpu, gpus, batch, memory_fraction=fraction))
    return {
        "devices": gpus,
        "batch": len(batch),
        "tokens_per_s": r.tokens_per_s,
        "step_seconds": r.step_seconds,
        "memory_fraction": fraction,
        "parts": {k: v["share"] for k, v in r.parts.items()},
        "joules_per_token": r.energy["joules_per_token"],  # the xPU activity model
        "energy_j": r.energy["parts"],
    }


def fig20(
    cases: Sequence[tuple[str, str, int]] = FIG20_CASES,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per case: PIMphony's and the A100s' batch and tokens/s, and the speedups."""
    gpu = load_xpu(GPU)
    fraction = GPU_MATCHED_GB / gpu.memory.capacity_gib
    caches = KernelCaches()
    rows = []
    for model, workload, gb in cases:
        spec = load_model(model)
        pool = [int(t) for t in sample_context_lengths(load_workload(workload), _POOL, seed)]
        pim = _pim(spec, pool, gb // MODULE_GB, caches)
        a100 = _gpu(spec, pool, gb // GPU_MATCHED_GB, fraction)
        full = _gpu(spec, pool, gb // GPU_MATCHED_GB, 1.0)
        row = {
            "model": model,
            "gqa": spec.kv_heads < spec.heads,
            "workload": workload,
            "capacity_gb": gb,
            "pimphony": pim,
            "a100": a100,
            "a100_full": full,
            "speedup": pim["tokens_per_s"] / a100["tokens_per_s"],
            "speedup_full": pim["tokens_per_s"] / full["tokens_per_s"],
        }
        rows.append(row)
        if progress:
            progress(
                f"{model} {workload} {gb} GB: PIMphony {pim['tokens_per_s']:,.0f} tokens/s "
                f"(batch {pim['batch']}), {a100['devices']} A100 {a100['tokens_per_s']:,.0f} "
                f"(batch {a100['batch']}): {row['speedup']:.2f}x"
            )
    return rows


def format_fig20(rows: list[dict[str, Any]]) -> str:
    """The comparison as a text table."""
    head = (
        f"{'model':<15}{'workload':<14}{'GB':>5}{'PIMphony tok/s (B)':>21}"
        f"{'A100 tok/s (B)':>20}{'speedup':>9}{'A100 80 GB':>12}{'J/token PIM / A100':>20}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        p, g = r["pimphony"], r["a100"]
        lines.append(
            f"{r['model']:<15}{r['workload']:<14}{r['capacity_gb']:>5}"
            f"{p['tokens_per_s']:>15,.0f} ({p['batch']:>3})"
            f"{g['tokens_per_s']:>11,.0f} ({g['batch']:>3}) x{g['devices']}"
            f"{r['speedup']:>8.2f}x{r['speedup_full']:>11.2f}x"
            f"{p['joules_per_token']:>11.4f} / {g['joules_per_token']:.4f}"
        )
    lines.append(
        f"PIMphony: {PIM_PRESET} modules of {MODULE_GB} GB, auto/DCS/DPA, best TP x PP; A100: "
        f"{GPU_MATCHED_GB} of 80 GB each (memory-matched); A100 80 GB: speedup over A100s with "
        "all 80 GB; J/token: the PIM step's energy (aim-cent) and the A100s' activity energy "
        "(no static power, no NVLink)"
    )
    return "\n".join(lines)


def plot_fig20(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Grouped bars per case: tokens/s of PIMphony and the A100s (log scale), speedup above."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    xs = range(len(rows))
    w = 0.27
    series = (
        ("PIMphony (PIM-only, CENT modules)", "pimphony", "#e76f51", -w),
        ("A100 FD+PA, memory-matched", "a100", "#219ebc", 0.0),
        ("A100 FD+PA, all 80 GB", "a100_full", "#8ecae6", w),
    )
    for label, key, colour, dx in series:
        ax.bar([x + dx for x in xs], [r[key]["tokens_per_s"] for r in rows], w, color=colour,
               label=label)  # fmt: skip
    for x, r in zip(xs, rows, strict=True):
        ax.text(x, r["pimphony"]["tokens_per_s"] * 1.15, f"{r['speedup']:.2f}x", ha="center",
                fontsize=8)  # fmt: skip
    ax.set_yscale("log")
    ax.set_xticks(
        list(xs),
        [f"{r['model']}\n{r['workload']}, {r['capacity_gb']} GB" for r in rows],
        fontsize=8,
    )
    ax.set_ylabel("decode throughput (tokens/s, log)")
    ax.set_xlabel("model, workload, system capacity")
    ax.legend(fontsize=7, loc="upper right")
    top = max(r[k]["tokens_per_s"] for r in rows for k in ("pimphony", "a100", "a100_full"))
    ax.set_ylim(top=top * 4)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return write_figure(fig, path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``gpu-fig20`` subcommand's options."""
    add_seed_option(p, "seed of the context-length draws")
    _FILES.add_options(p)


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony gpu-fig20``."""
    report, plot = _FILES.paths(args)
    progress = None if args.json else (lambda m: print(f"  {m}", flush=True))
    rows = fig20(seed=args.seed, progress=progress)
    title = "PIMphony (PIM-only) vs A100s with flash-decoding + paged attention (Fig. 20 shape)"
    path = plot_fig20(rows, plot, title)
    block = provenance(args, load_preset(PIM_PRESET), gpu=GPU, cases=[list(c) for c in FIG20_CASES])
    doc = {"rows": rows, "plot": str(path), "provenance": block}
    publish_json(doc, {"report": report, "plot": path}, args.json, lambda: format_fig20(rows))
    return 0
