"""``pimphony ablation``: PIMphony Fig. 13 -- throughput from HFP+static to TCP, +DCS, +DPA.

Each step adds one technique; for each, every (TP, PP) split of the modules is simulated and
the best is kept, as in the paper ("using optimal TP/PP settings"). The batch is what the
memory admits first-come-first-served from a workload's context lengths: static allocation
reserves the model's window per request, DPA's lazy allocation only what each request uses.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from compiler.llm import load_model
from models.config import load_preset
from models.fileio import BUILD_DIR, pyplot, write_figure
from sim.cli import SEED, bounded_int
from sim.decode_step.admission import fill_batch
from sim.decode_step.setup import DecodeSetup
from sim.decode_step.step import run_decode
from sim.provenance import provenance
from sim.report import user_plot
from sim.workloads import load_workload, sample_context_lengths

__all__ = [
    "ABLATION_PLOT",
    "STEPS",
    "ablation",
    "add_arguments",
    "format_ablation",
    "plot_ablation",
    "run",
]

ABLATION_PLOT = BUILD_DIR / "ablation" / "fig13.png"
#: (label, partition, scheduler, memory) of each cumulative step. From +DCS on the partition
#: is PIMphony's ``auto`` (per layer the faster of TCP and HFP).
STEPS = (
    ("HFP (baseline)", "hfp", "static", "static"),
    ("+TCP", "tcp", "static", "static"),
    ("+DCS", "auto", "dcs", "static"),
    ("+DPA", "auto", "dcs", "lazy"),
)


def _splits(modules: int, kv_heads: int, layers: int) -> list[tuple[int, int]]:
    return [
        (tp, modules // tp)
        for tp in range(modules, 0, -1)
        if modules % tp == 0 and kv_heads % tp == 0 and modules // tp <= layers
    ]


def ablation(
    model: str = "llm-7b",
    workload: str = "qmsum",
    preset: str = "aim-32ch",
    modules: int = 8,
    pool: int = 2048,
    seed: int = 0,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """One row per step: its best (TP, PP), batch, tokens/s and every split tried."""
    spec, hw = load_model(model), load_preset(preset)
    lengths = [int(t) for t in sample_context_lengths(load_workload(workload), pool, seed)]
    rows = []
    for label, partition, sched, memory in STEPS:
        batch = fill_batch(spec, hw, modules, memory, lengths)
        tried = []
        for tp, pp in _splits(modules, spec.kv_heads, spec.layers):
            setup = DecodeSetup(
                spec, hw, batch, tp=tp, pp=pp, partition=partition, sched=sched, memory=memory
            )
            step = run_decode(setup)
            tried.append(
                {
                    "tp": tp,
                    "pp": pp,
                    "tokens_per_s": step.tokens_per_s,
                    "mac_utilization": step.mac_utilization,
                    "bubble_fraction": step.pipeline["bubble_fraction"],
                    "capacity_utilization": step.capacity_utilization,
                }
            )
            if progress:
                progress(
                    f"{label}: TP {tp} x PP {pp}, batch {len(batch)}: {step.tokens_per_s:,.0f}"
                )
        best = max(tried, key=lambda t: t["tokens_per_s"])
        rows.append({"step": label, "batch": len(batch), **best, "splits": tried})
    base = rows[0]["tokens_per_s"]
    for row in rows:
        row["speedup"] = row["tokens_per_s"] / base
    return rows


def format_ablation(rows: list[dict[str, Any]]) -> str:
    """The ablation as a text table."""
    head = f"{'step':<16}{'TP x PP':>9}{'batch':>7}{'tokens/s':>11}{'speedup':>9}{'MAC util':>10}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['step']:<16}{r['tp']:>4} x {r['pp']:<2}{r['batch']:>7}{r['tokens_per_s']:>11,.0f}"
            f"{r['speedup']:>8.2f}x{100 * r['mac_utilization']:>9.1f}%"
        )
    return "\n".join(lines)


def plot_ablation(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Bar chart of normalised throughput per step (label: best TP x PP and batch)."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    colors = ["#adb5bd", "#8ecae6", "#2a9d8f", "#e76f51"]
    xs = range(len(rows))
    ax.bar(xs, [r["speedup"] for r in rows], color=colors[: len(rows)])
    for x, r in zip(xs, rows, strict=True):
        ax.text(
            x,
            r["speedup"],
            f"{r['speedup']:.2f}x\nTP{r['tp']}xPP{r['pp']}, B={r['batch']}",
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``ablation`` subcommand's options."""
    p.add_argument("--model", default="llm-7b")
    p.add_argument("--workload", default="qmsum")
    p.add_argument("--preset", default="aim-32ch", help="default: CENT-sized 16 GB modules")
    p.add_argument(
        "--modules", type=bounded_int(1, 1024), default=8, help="default 8 x 16 GB = 128 GB"
    )
    p.add_argument(
        "--pool", type=bounded_int(1, 100_000), default=2048, help="candidate requests drawn"
    )
    p.add_argument("--seed", type=SEED, default=0, help="seed of the context-length draws")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", type=Path, default=None, help=f"PNG (default {ABLATION_PLOT})")
    p.add_argument("--force", action="store_true", help="replace an existing --plot file")


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony ablation``."""
    plot = user_plot(args.plot, ABLATION_PLOT, args.force)
    progress = None if args.json else (lambda m: print(f"  {m}", flush=True))
    rows = ablation(
        args.model, args.workload, args.preset, args.modules, args.pool, args.seed, progress
    )
    title = (
        f"{args.model}, {args.workload}, {args.modules} x {args.preset}: "
        "cumulative techniques (PIMphony Fig. 13 shape)"
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
