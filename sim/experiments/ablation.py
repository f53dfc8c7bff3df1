"""``pimphony ablation``: PIMphony Fig. 13 -- throughput from HFP+static to TCP, +DCS, +DPA.

Each step adds one technique. Every step serves the same request population: ``requests``
context lengths drawn from a workload, queued first-come-first-served, served as consecutive
batches of whatever the step's memory policy admits (static allocation reserves the model's
window per request, DPA's lazy allocation only what each request uses). A step's throughput
is the population's decode tokens over the summed step times of its batches, so static and
lazy are compared on the same requests, only batched differently. Each batch runs at the best
of every (TP, PP) split ("using optimal TP/PP settings"); the row names the split most batches
used. Pipeline micro-batches are ``auto`` (``sim.systems.setup``).

``--system xpu+pim``: PIMphony Fig. 14 -- the same steps on a NeuPIMs-style xPU+PIM system.

The system is ``modules`` NeuPIMs devices (PIMphony Table IV: 8 matrix units and 32 PIM
channels sharing 32 GB). Each device's memory is one PIM module (``pimphony-neupims``) that
holds its share of the weights and of the KV cache; its NPU (``neupims-npu``) reads the weights
through the same channels. So:

- **Capacity.** A batch is admitted as on the PIM-only system: weights and KV together in
  ``modules x 32 GiB`` (:func:`sim.systems.admission.queue_batches`), static memory
  reserving the model's window per request, DPA's lazy allocation what each request uses.
  That is where DPA helps here: it enlarges the batch the NPUs see.
- **FC on the NPUs.** The FC layers run tensor parallel over the ``modules`` NPUs (Megatron's
  split: each NPU reads ``1 / modules`` of every weight). They are costed as one device of
  ``modules`` times the NPU's arrays, vector units, peak, bandwidth, buffer and capacity
  (:func:`tensor_parallel_xpu`): the split GEMMs quantise to the same tiles up to rounding of
  the column split. The two all-reduces per layer between NPUs are **not** charged (NeuPIMs
  and PIMphony name no inter-device link); each row reports what they would add serially on
  the preset's 10 GB/s ``device_gbps`` (``allreduce_ms_not_charged``).
- **Attention on PIM.** Tensor parallel over the ``modules`` PIM modules (KV heads split),
  timed by :func:`sim.systems.hetero.run_hetero_decode` with the step's partition,
  scheduler and memory policy; ``--sub-batches auto`` per batch (NeuPIMs pipelines sub-batches,
  so every step, the baseline included, gets its best K).

Every step serves the same requests, as above; tokens/s is the requests over the summed step
times.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import load_model
from pimphony.compiler.plan import ScoreOverflow
from pimphony.models.config import load_preset
from pimphony.models.fileio import BUILD_DIR, pyplot, write_figure
from pimphony.models.xpu_config import XpuConfig, load_xpu
from pimphony.sim.cli import add_seed_option, bounded_int
from pimphony.sim.provenance import provenance
from pimphony.sim.report import user_plot
from pimphony.sim.systems.admission import queue_batches
from pimphony.sim.systems.command import (
    add_micro_batches_option,
    add_score_overflow_option,
    score_overflow_of,
)
from pimphony.sim.systems.costs import hidden_allreduce_seconds
from pimphony.sim.systems.hetero import SUB_BATCHES_AUTO, HeteroSetup, run_hetero_decode
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.search import best_split, valid_splits
from pimphony.sim.systems.setup import MICRO_BATCHES_AUTO, DecodeError, DecodeSetup
from pimphony.sim.systems.step import KernelCaches, run_decode
from pimphony.sim.systems.techniques import STEPS
from pimphony.sim.workloads import add_requests_option, load_workload, sample_context_lengths

__all__ = [
    "ABLATION_PLOT",
    "FIG14_CASES",
    "HETERO_ABLATION_PLOT",
    "HETERO_MODULES",
    "HETERO_PRESET",
    "HETERO_XPU",
    "STEP_COLOURS",
    "STEP_LABELS",
    "SYSTEM_DEFAULTS",
    "ablation",
    "add_arguments",
    "case_label",
    "format_ablation",
    "format_hetero_ablation",
    "hetero_ablation",
    "plot_ablation",
    "plot_hetero_ablation",
    "run",
    "summed_energy",
    "tensor_parallel_xpu",
]

ABLATION_PLOT = BUILD_DIR / "ablation" / "fig13.png"
HETERO_ABLATION_PLOT = BUILD_DIR / "ablation" / "fig14-xpu-pim.png"


def ablation(
    model: str = "llm-7b",
    workload: str = "qmsum",
    preset: str = "pimphony-cent",
    modules: int = 8,
    requests: int = 128,
    seed: int = 0,
    progress: Any = None,
    micro_batches: int | str = MICRO_BATCHES_AUTO,
    score_overflow: str = ScoreOverflow.GPR_TILES.value,
) -> list[dict[str, Any]]:
    """One row per step: its batches, tokens/s over the whole queue, the split most batches
    used and, per batch, every split tried (pairs beyond the GPR as ``score_overflow`` says,
    ``compiler.plan.SCORE_OVERFLOWS``)."""
    spec, hw = load_model(model), load_preset(preset)
    queue = [int(t) for t in sample_context_lengths(load_workload(workload), requests, seed)]
    splits = valid_splits(spec, modules)
    caches = KernelCaches()  # HFP and +TCP share their GEMVs, +DCS and +DPA theirs
    rows = []
    for label, partition, sched, memory in STEPS:
        batches = queue_batches(spec, hw, modules, memory, queue)

        def step_of(batch: tuple[int, ...], tp: int, pp: int, p=partition, s=sched, m=memory):
            setup = DecodeSetup(
                spec, hw, batch, tp=tp, pp=pp, partition=p, sched=s, memory=m,
                micro_batches=micro_batches, score_overflow=score_overflow,
            )  # fmt: skip
            return run_decode(setup, caches=caches)

        tried: list[dict[str, Any]] = []  # per batch, every split
        steps = []
        for k, batch in enumerate(batches, start=1):
            search = best_split(lambda tp, pp, b=batch: step_of(b, tp, pp), splits)
            reports = search.results
            tried.append(
                {
                    "batch": len(batch),
                    "splits": [
                        {
                            "tp": st.tp,
                            "pp": st.pp,
                            "micro_batches": st.micro_batches,
                            "tokens_per_s": st.tokens_per_s,
                            "mac_utilization": st.mac_utilization,
                            "bubble_fraction": st.pipeline["bubble_fraction"],
                        }
                        for st in reports
                    ],
                }
            )
            best = search.best
            steps.append(best)
            if progress:
                progress(
                    f"{label}: batch {k}/{len(batches)} of {len(batch)} requests: best TP "
                    f"{best.tp} x PP {best.pp}, {best.tokens_per_s:,.0f} tokens/s"
                )
        seconds = sum(st.step_seconds for st in steps)
        parts = summed_energy(steps)
        splits_used = Counter((st.tp, st.pp) for st in steps)
        (tp, pp), _ = splits_used.most_common(1)[0]
        rows.append(
            {
                "step": label,
                "tp": tp,
                "pp": pp,
                "splits_used": {f"{a}x{b}": n for (a, b), n in sorted(splits_used.items())},
                "requests": len(queue),
                "batches": len(batches),
                "batch": len(queue) / len(batches),
                "batch_sizes": [len(b) for b in batches],
                "tokens_per_s": len(queue) / seconds,
                "mac_utilization": sum(st.mac_utilization * st.step_seconds for st in steps)
                / seconds,
                "energy_j": {"unit": "J", **parts},
                "joules_per_token": parts["total"] / len(queue),
                "per_batch": tried,
            }
        )
    base = rows[0]["tokens_per_s"]
    for row in rows:
        row["speedup"] = row["tokens_per_s"] / base
    return rows


def summed_energy(steps: Sequence[Any]) -> dict[str, float]:
    """J by part of decode steps (their reports' ``energy`` blocks) added up, ``unit`` left
    out (``docs/energy.md``)."""
    parts: dict[str, float] = {}
    for st in steps:
        for k, v in st.energy["parts"].items():
            if k != "unit":
                parts[k] = parts.get(k, 0.0) + v
    return parts


def format_ablation(rows: list[dict[str, Any]]) -> str:
    """The ablation as a text table."""
    head = (
        f"{'step':<16}{'TP x PP':>9}{'batches':>9}{'mean batch':>12}{'tokens/s':>11}"
        f"{'speedup':>9}{'MAC util':>10}{'J/token':>9}{'bg share':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['step']:<16}{r['tp']:>4} x {r['pp']:<2}{r['batches']:>9}{r['batch']:>12.1f}"
            f"{r['tokens_per_s']:>11,.0f}{r['speedup']:>8.2f}x{100 * r['mac_utilization']:>9.1f}%"
            f"{r['joules_per_token']:>9.4f}"
            f"{100 * r['energy_j']['background'] / r['energy_j']['total']:>8.1f}%"
        )
    n = rows[0]["requests"] if rows else 0
    lines.append(f"every step serves the same {n} requests; tokens/s = {n} / summed step time; "
                 f"J/token = summed step energy / {n} (bg share: background of it)")  # fmt: skip
    return "\n".join(lines)


STEP_COLOURS = ("#adb5bd", "#8ecae6", "#2a9d8f", "#e76f51")
"""Bar colour of each of :data:`STEPS`, in order (every ablation plot)."""


def plot_ablation(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Bar chart of normalised throughput per step (label: best TP x PP and batch)."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    xs = range(len(rows))
    ax.bar(xs, [r["speedup"] for r in rows], color=STEP_COLOURS[: len(rows)])
    for x, r in zip(xs, rows, strict=True):
        ax.text(
            x,
            r["speedup"],
            f"{r['speedup']:.2f}x\nTP{r['tp']}xPP{r['pp']}, B={r['batch']:.1f}",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_xticks(list(xs), [r["step"] for r in rows])
    ax.set_ylabel("throughput relative to the first step (x)")
    ax.set_ylim(0, max(r["speedup"] for r in rows) * 1.3)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return write_figure(fig, path)


#: PIMphony's xPU+PIM system: NeuPIMs' NPU (``configs/xpu/neupims-npu.toml``) on its 32 GB
#: PIM module (``configs/pimphony-neupims.toml``), 4 of them = 128 GB for the 7B models
#: (PIMphony VIII-A: "128GB for 7B and 512GB for 72B").
HETERO_XPU = "neupims-npu"
HETERO_PRESET = "pimphony-neupims"
HETERO_MODULES = 4
#: The cumulative steps' labels, in order.
STEP_LABELS = tuple(step[0] for step in STEPS)


def tensor_parallel_xpu(xpu: XpuConfig, n: int) -> XpuConfig:
    """``n`` copies of ``xpu`` working tensor parallel, as one device: arrays, vector units,
    peaks, DRAM bandwidth, buffer and capacity times ``n``; clock, caps and links unchanged.

    Each of ``n`` devices runs ``1 / n`` of every GEMM's weight columns (or rows) and reads
    ``1 / n`` of the weights, so the GEMM's time is the one device's time of a ``1 / n`` slice,
    which is what this device costs up to the rounding of the slice to whole tiles. All-reduce
    between the devices is not included (the caller accounts for it).
    """
    if n == 1:
        return xpu
    peaks = {
        f.name: getattr(xpu.peak_tflops, f.name) * n for f in dataclasses.fields(xpu.peak_tflops)
    }
    return dataclasses.replace(
        xpu,
        name=f"{n}x{xpu.name}",
        source=f"{n} x {xpu.name}, tensor parallel (sim.experiments.ablation)",
        compute=dataclasses.replace(xpu.compute, vector_tflops=xpu.compute.vector_tflops * n),
        peak_tflops=dataclasses.replace(xpu.peak_tflops, **peaks),
        memory=dataclasses.replace(
            xpu.memory,
            bandwidth_gbps=xpu.memory.bandwidth_gbps * n,
            capacity_gib=xpu.memory.capacity_gib * n,
            buffer_kib=xpu.memory.buffer_kib * n,
        ),
        systolic=None
        if xpu.systolic is None
        else dataclasses.replace(xpu.systolic, arrays=xpu.systolic.arrays * n),
        vector=None
        if xpu.vector is None
        else dataclasses.replace(xpu.vector, units=xpu.vector.units * n),
    )


def hetero_ablation(
    model: str = "llm-7b",
    workload: str = "qmsum",
    preset: str = HETERO_PRESET,
    modules: int = HETERO_MODULES,
    requests: int = 32,
    seed: int = 0,
    xpu: str = HETERO_XPU,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per cumulative step (:data:`sim.systems.techniques.STEPS`) on ``modules``
    NeuPIMs-style devices (module docstring): batches, tokens/s over the whole queue, the
    sub-batch counts chosen, the NPUs' and PIM's busy shares, speedup over the first step."""
    spec, hw = load_model(model), load_preset(preset)
    device = load_xpu(xpu)
    npus = tensor_parallel_xpu(device, modules)
    queue = [int(t) for t in sample_context_lengths(load_workload(workload), requests, seed)]
    caches: dict[tuple[str, str], KernelCache] = {}
    rows = []
    for label, partition, sched, memory in STEPS:
        batches = queue_batches(spec, hw, modules, memory, queue)
        cache = caches.setdefault(
            (sched, memory),
            KernelCache(hw, sched, True, dpa=memory == "lazy", dpa_max_tokens=max(queue)),
        )
        steps = []
        for i, batch in enumerate(batches, start=1):
            pim = DecodeSetup(
                spec, hw, batch, tp=modules, partition=partition, sched=sched, memory=memory
            )
            r = run_hetero_decode(HeteroSetup(pim, npus, SUB_BATCHES_AUTO), cache)
            steps.append(r)
            if progress:
                progress(
                    f"{label}: batch {i}/{len(batches)} of {len(batch)} requests: K "
                    f"{r.sub_batches}, {r.tokens_per_s:,.0f} tokens/s"
                )
        seconds = sum(st.step_seconds for st in steps)
        allreduce = sum(
            2 * spec.layers * hidden_allreduce_seconds(spec, device, len(b), modules)
            for b in batches
        )

        parts = summed_energy(steps)  # every batch's step, J by part (docs/energy.md)

        def busy(dev: str, steps=steps, seconds=seconds) -> float:
            return (
                sum(st.devices[dev]["busy_cycles"] / (st.freq_ghz * 1e9) for st in steps) / seconds
            )

        rows.append(
            {
                "step": label,
                "partition": partition,
                "sched": sched,
                "memory": memory,
                "requests": len(queue),
                "batches": len(batches),
                "batch": len(queue) / len(batches),
                "batch_sizes": [len(b) for b in batches],
                "sub_batches": dict(sorted(Counter(st.sub_batches for st in steps).items())),
                "tokens_per_s": len(queue) / seconds,
                "xpu_busy": busy("xpu"),
                "pim_busy": busy("pim"),
                "allreduce_ms_not_charged": 1e3 * allreduce,
                "seconds": seconds,
                "tokens_per_s_allreduce_serial": len(queue) / (seconds + allreduce),
                "energy_j": {"unit": "J", **parts},
                "joules_per_token": parts["total"] / len(queue),
            }
        )
    base = rows[0]["tokens_per_s"]
    base_ar = rows[0]["tokens_per_s_allreduce_serial"]
    for row in rows:
        row["speedup"] = row["tokens_per_s"] / base
        row["speedup_allreduce_serial"] = row["tokens_per_s_allreduce_serial"] / base_ar
    return rows


#: PIMphony Fig. 14's cases as run here: (model, workload, devices, requests). Non-GQA models
#: on LongBench, GQA models on LV-Eval (VIII-A); 4 devices = 128 GB for 7B, 16 = 512 GB for
#: 72B. LLM-72B-128K-wGQA (``llama-3.1-70b``, 8 KV heads) runs on 8 devices (256 GB): the
#: attention is tensor parallel over KV heads (``compiler.plan.Parallelism``), so 16 modules
#: cannot split 8 KV heads and the xPU+PIM step has no pipeline stages to put them in.
FIG14_CASES: tuple[tuple[str, str, int, int], ...] = (
    ("llm-7b", "qmsum", 4, 32),
    ("llm-72b", "qmsum", 16, 32),
    ("llama-3.1-8b", "multifieldqa", 4, 48),
    ("llama-3.1-8b", "loogle-sd", 4, 48),
    ("llama-3.1-70b", "multifieldqa", 8, 16),
)


def case_label(model: str, workload: str, modules: int) -> str:
    """``model workload, N x 32 GB`` -- a plot group and table row name."""
    return f"{model} {workload}, {modules} dev"


def format_hetero_ablation(rows: list[dict[str, Any]]) -> str:
    """One case's rows as a text table."""
    head = (
        f"{'step':<16}{'batches':>8}{'mean batch':>11}{'K chosen':>14}{'tokens/s':>10}"
        f"{'speedup':>9}{'NPU busy':>9}{'PIM busy':>9}{'J/token':>9}{'xPU share':>10}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ks = ",".join(f"{k}:{n}" for k, n in r["sub_batches"].items())
        lines.append(
            f"{r['step']:<16}{r['batches']:>8}{r['batch']:>11.1f}{ks:>14}"
            f"{r['tokens_per_s']:>10,.0f}{r['speedup']:>8.2f}x{100 * r['xpu_busy']:>8.0f}%"
            f"{100 * r['pim_busy']:>8.0f}%{r['joules_per_token']:>9.4f}"
            f"{100 * r['energy_j']['xpu'] / r['energy_j']['total']:>9.1f}%"
        )
    n = rows[0]["requests"] if rows else 0
    ar = rows[0]["allreduce_ms_not_charged"] if rows else 0.0
    lines.append(
        f"every step serves the same {n} requests; K chosen = sub-batch count: batches; "
        f"NPU all-reduces not charged ({ar:.2f} ms over the queue on the 10 GB/s device link)"
    )
    return "\n".join(lines)


def plot_hetero_ablation(cases: dict[str, list[dict[str, Any]]], path: Path, title: str) -> Path:
    """Grouped bars: per case, each step's throughput over the case's HFP baseline."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.9 * len(cases) + 1.5), 4.0))
    width = 0.8 / len(STEP_LABELS)
    for j, label in enumerate(STEP_LABELS):
        xs = [i + (j - (len(STEP_LABELS) - 1) / 2) * width for i in range(len(cases))]
        ys = [next(r["speedup"] for r in rows if r["step"] == label) for rows in cases.values()]
        ax.bar(xs, ys, width, color=STEP_COLOURS[j], label=label)
        for x, y in zip(xs, ys, strict=True):
            ax.text(x, y, f"{y:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(cases)), [c.replace(", ", "\n") for c in cases], fontsize=8)
    ax.set_ylabel("throughput (tokens/s) / HFP baseline's (x)")
    ax.set_xlabel("model, workload, NeuPIMs devices (32 GB each)")
    top = max(r["speedup"] for rows in cases.values() for r in rows)
    ax.set_ylim(0, top * 1.2)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return write_figure(fig, path)


#: ``--system`` -> (default preset, default modules): PIMphony on CENT (8 x 16 GB) and on
#: NeuPIMs (4 x 32 GB), 128 GB each (PIMphony VIII-A).
SYSTEM_DEFAULTS = {"pim": ("pimphony-cent", 8), "xpu+pim": ("pimphony-neupims", 4)}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``ablation`` subcommand's options."""
    p.add_argument(
        "--system",
        choices=list(SYSTEM_DEFAULTS),
        default="pim",
        help="pim: PIM-only (Fig. 13, default); xpu+pim: NeuPIMs NPUs + PIM (Fig. 14)",
    )
    p.add_argument("--model", default="llm-7b")
    p.add_argument("--workload", default="qmsum")
    p.add_argument(
        "--preset",
        default=None,
        help="default: pimphony-cent (16 GB modules) for pim, pimphony-neupims (32 GB) for xpu+pim",
    )
    p.add_argument(
        "--modules",
        type=bounded_int(1, 1024),
        default=None,
        help="default 8 x 16 GB = 128 GB (pim), 4 x 32 GB = 128 GB (xpu+pim)",
    )
    p.add_argument(
        "--xpu",
        default=None,
        help="--system xpu+pim: the NPU of each device (default neupims-npu)",
    )
    p.add_argument(
        "--fig14",
        action="store_true",
        help="--system xpu+pim: run PIMphony Fig. 14's five cases (FIG14_CASES) "
        "instead of --model/--workload/--modules/--requests",
    )
    add_requests_option(p, 128, "requests drawn from the workload; every step serves all of them")
    add_micro_batches_option(p, MICRO_BATCHES_AUTO)
    add_score_overflow_option(p)
    add_seed_option(p, "seed of the context-length draws")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", type=Path, default=None, help=f"PNG (default {ABLATION_PLOT})")
    p.add_argument("--force", action="store_true", help="replace an existing --plot file")


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony ablation`` (``--system xpu+pim``: :func:`_run_hetero`)."""
    if args.system == "xpu+pim":
        return _run_hetero(args)
    for opt in ("xpu", "fig14"):
        if getattr(args, opt):
            raise DecodeError(f"--{opt} is an option of --system xpu+pim; drop it")
    overflow = score_overflow_of(args)
    args.preset = args.preset or SYSTEM_DEFAULTS["pim"][0]
    args.modules = args.modules or SYSTEM_DEFAULTS["pim"][1]
    # The PIM-only report's provenance stays what it was before --system existed.
    args = argparse.Namespace(
        **{k: v for k, v in vars(args).items() if k not in ("system", "xpu", "fig14")}
    )
    plot = user_plot(args.plot, ABLATION_PLOT, args.force)
    progress = None if args.json else (lambda m: print(f"  {m}", flush=True))
    rows = ablation(
        args.model,
        args.workload,
        args.preset,
        args.modules,
        args.requests,
        args.seed,
        progress,
        args.micro_batches,
        overflow,
    )
    title = (
        f"{args.model}, {args.workload}, {args.modules} x {args.preset}: "
        f"{args.requests} requests, cumulative techniques (PIMphony Fig. 13 shape)"
    )
    path = plot_ablation(rows, plot, title)
    if args.json:
        block = provenance(
            args,
            load_preset(args.preset),
            model=dataclasses.asdict(load_model(args.model)),
            workload=args.workload,
            seed=args.seed,
        )
        print(json.dumps({"rows": rows, "plot": str(path), "provenance": block}, indent=2))
    else:
        print(format_ablation(rows))
        print(f"plot: {path}")
    return 0


def _run_hetero(args: argparse.Namespace) -> int:
    """``pimphony ablation --system xpu+pim``: PIMphony Fig. 14 (one case or ``--fig14``)."""
    if _given(args, "micro_batches"):
        raise DecodeError(
            "--micro-batches is an option of --system pim (pipeline stages); --system xpu+pim "
            "chooses its sub-batches per batch (--sub-batches auto); drop it"
        )
    if score_overflow_of(args) != ScoreOverflow.GPR_TILES:
        raise DecodeError("--score-overflow is an option of --system pim; drop it")
    preset = args.preset or SYSTEM_DEFAULTS["xpu+pim"][0]
    xpu = args.xpu or HETERO_XPU
    if args.fig14:
        given = [f"--{o}" for o in ("model", "workload", "modules") if _given(args, o)]
        if given:
            raise DecodeError(f"--fig14 runs the paper's cases; drop {', '.join(given)}")
        cases = FIG14_CASES
    else:
        modules = args.modules or SYSTEM_DEFAULTS["xpu+pim"][1]
        cases = ((args.model, args.workload, modules, args.requests),)
    plot = user_plot(args.plot, HETERO_ABLATION_PLOT, args.force)
    progress = None if args.json else (lambda m: print(f"  {m}", flush=True))
    results = {}
    for model, workload, modules, requests in cases:
        results[case_label(model, workload, modules)] = hetero_ablation(
            model, workload, preset, modules, requests, args.seed, xpu, progress
        )
    title = (
        f"xPU+PIM ({xpu} + {preset} per device): HFP -> +TCP -> +DCS -> +DPA "
        "(PIMphony Fig. 14 shape)"
    )
    path = plot_hetero_ablation(results, plot, title)
    if args.json:
        block = provenance(args, load_preset(preset), xpu=xpu, cases=[list(c) for c in cases])
        print(json.dumps({"cases": results, "plot": str(path), "provenance": block}, indent=2))
    else:
        for (label, rows), case in zip(results.items(), cases, strict=True):
            print(f"{label} ({case[3]} requests):")
            print(format_hetero_ablation(rows))
            print()
        print(f"plot: {path}")
    return 0


def _given(args: argparse.Namespace, option: str) -> bool:
    defaults = argparse.ArgumentParser()
    add_arguments(defaults)
    return getattr(args, option) != defaults.get_default(option)
