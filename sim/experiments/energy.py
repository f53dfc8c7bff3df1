"""``pimphony energy``: PIMphony Fig. 16 -- decode energy of CENT vs CENT+PIMphony.

For each model (non-GQA at 32K on LongBench, GQA at 128K on LV-Eval in the paper; here a
fixed batch at one context length, ``docs/energy.md``) one decode step runs twice on
``pimphony-cent`` modules: the CENT baseline (HFP partition, static scheduling, static
memory) and PIMphony (per-layer TCP/HFP, DCS, DPA). Each step's energy report
(:mod:`sim.systems.energy`) gives joules per token by phase (FC, attention) and by part
(MAC, I/O, background, else = activation + EPU + links).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.energy import DEFAULT_ENERGY, load_energy
from pimphony.models.fileio import BUILD_DIR, pyplot, write_figure
from pimphony.sim.cli import bounded_int
from pimphony.sim.provenance import provenance
from pimphony.sim.report import user_plot
from pimphony.sim.systems.setup import DecodeSetup
from pimphony.sim.systems.step import run_decode
from pimphony.sim.systems.techniques import CENT, PIMPHONY

__all__ = [
    "ENERGY_PLOT",
    "ROWS",
    "SYSTEMS",
    "add_arguments",
    "energy_rows",
    "format_energy",
    "plot_energy",
    "run",
]

ENERGY_PLOT = BUILD_DIR / "energy" / "fig16.png"
#: (label, model, context, TP, PP): PIMphony Fig. 16's four models; 128 GB (8 x 16 GB modules)
#: for 7B, 512 GB (32 modules) for 72B (VIII-A). The GQA models are the Llama-3.1 presets
#: (group 4 and 8; the paper's "LLM-7B/72B-128K-GQA" do not state their group).
ROWS: tuple[tuple[str, str, int, int, int], ...] = (
    ("7B-32K", "llm-7b", 32768, 8, 1),
    ("72B-32K", "llm-72b", 32768, 8, 4),
    ("7B-128K-GQA", "llama-3.1-8b", 131072, 8, 1),
    ("72B-128K-GQA", "llama-3.1-70b", 131072, 8, 4),
)
#: (label, partition, scheduler, memory) of the two systems compared: the ablation's first
#: step (the CENT baseline) and its last (PIMphony).
SYSTEMS = (("CENT", *CENT), ("CENT+PIMphony", *PIMPHONY))
_ELSE = ("activation", "epu", "xpu", "links")


def energy_rows(
    rows: tuple[tuple[str, str, int, int, int], ...],
    batch: int,
    preset: str,
    energy: str,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """One record per (model row, system): tokens/s and the step's energy block."""
    hw = load_preset(preset)
    params = load_energy(energy)
    out = []
    for label, model, context, tp, pp in rows:
        spec = load_model(model)
        for system, partition, sched, memory in SYSTEMS:
            if progress:
                progress(f"{label} {system}")
            setup = DecodeSetup(
                spec,
                hw,
                (context,) * batch,
                tp=tp,
                pp=pp,
                partition=partition,
                sched=sched,
                memory=memory,
                max_context=context,
            )
            rep = run_decode(setup, energy=params)
            e = rep.energy
            att = e["phases"]["attention"]
            out.append(
                {
                    "row": label,
                    "model": model,
                    "context": context,
                    "batch": batch,
                    "tp": tp,
                    "pp": pp,
                    "system": system,
                    "tokens_per_s": rep.tokens_per_s,
                    "attention_cycles": sum(rep.ops[k]["cycles"] for k in ("qk", "softmax", "sv")),
                    "joules_per_token": e["joules_per_token"],
                    "fc_j_per_token": e["phases"]["fc"]["total"] / batch,
                    "attention_j_per_token": att["total"] / batch,
                    "attention_parts_j_per_token": {
                        "MAC": att["mac"] / batch,
                        "I/O": att["io"] / batch,
                        "background": att["background"] / batch,
                        "else": sum(att[k] for k in _ELSE) / batch,
                    },
                    "attention_background_share": e["attention_background_share"],
                }
            )
    by = {(r["row"], r["system"]): r for r in out}
    for r in out:
        base = by[(r["row"], SYSTEMS[0][0])]
        r["attention_energy_reduction"] = base["attention_j_per_token"] / r["attention_j_per_token"]
    return out


def format_energy(rows: list[dict[str, Any]]) -> str:
    """A text table of :func:`energy_rows`."""
    head = (
        f"{'model':<14}{'system':<15}{'tok/s':>9}{'J/token':>9}{'FC J':>8}{'attn J':>8}"
        f"{'bg share':>10}{'attn x':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['row']:<14}{r['system']:<15}{r['tokens_per_s']:>9.1f}"
            f"{r['joules_per_token']:>9.3f}{r['fc_j_per_token']:>8.3f}"
            f"{r['attention_j_per_token']:>8.3f}{100 * r['attention_background_share']:>9.1f}%"
            f"{r['attention_energy_reduction']:>7.2f}x"
        )
    return "\n".join(lines)


def plot_energy(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Fig. 16 shape: one column per model, its CENT and CENT+PIMphony bars; top row FC vs
    attention, bottom row the attention energy by MAC / I/O / background / else; J per token
    (each model on its own scale)."""
    plt = pyplot()
    models = list(dict.fromkeys(r["row"] for r in rows))
    fig, axes = plt.subplots(2, len(models), figsize=(2.6 * len(models) + 1.5, 6.4), squeeze=False)
    colors = {"MAC": "#2a9d8f", "I/O": "#e9c46a", "background": "#264653", "else": "#adb5bd"}
    for col, model in enumerate(models):
        mine = [r for r in rows if r["row"] == model]
        names = [r["system"].replace("CENT+", "+") for r in mine]
        top, bottom = axes[0][col], axes[1][col]
        fc = [r["fc_j_per_token"] for r in mine]
        att = [r["attention_j_per_token"] for r in mine]
        top.bar(names, fc, color="#219ebc", label="FC")
        top.bar(names, att, bottom=fc, color="#e76f51", label="Attention")
        top.set_title(model, fontsize=9)
        base = [0.0] * len(mine)
        for part, color in colors.items():
            vals = [r["attention_parts_j_per_token"][part] for r in mine]
            bottom.bar(names, vals, bottom=base, color=color, label=part)
            base = [b + v for b, v in zip(base, vals, strict=True)]
        for x, r in enumerate(mine):
            share = f"bg {100 * r['attention_background_share']:.0f}%"
            bottom.text(x, base[x], share, ha="center", va="bottom", fontsize=7)
        bottom.set_ylim(0, 1.12 * max(base))
        for ax in (top, bottom):
            ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("energy per token (J)")
    axes[1][0].set_ylabel("attention energy per token (J)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[1][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), title="attention")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return write_figure(fig, path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``energy`` subcommand's options."""
    p.add_argument(
        "--batch", type=bounded_int(1, 4096), default=4, help="requests per step (default 4)"
    )
    p.add_argument("--preset", default="pimphony-cent", help="hardware preset (16 GB modules)")
    p.add_argument("--energy", default=DEFAULT_ENERGY, help="energy preset (docs/energy.md)")
    p.add_argument(
        "--rows",
        default=",".join(r[0] for r in ROWS),
        help="comma-separated model rows (default all: " + ", ".join(r[0] for r in ROWS) + ")",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", type=Path, default=None, help=f"PNG (default {ENERGY_PLOT})")
    p.add_argument("--force", action="store_true", help="replace an existing --plot file")


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony energy``."""
    from pimphony.sim.systems.setup import DecodeError

    plot = user_plot(args.plot, ENERGY_PLOT, args.force)
    known = {r[0]: r for r in ROWS}
    names = [x.strip() for x in args.rows.split(",") if x.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise DecodeError(f"--rows {args.rows!r}: unknown row(s); allowed: {', '.join(known)}")
    progress = None if args.json else (lambda m: print(f"  {m}", flush=True))
    rows = energy_rows(
        tuple(known[n] for n in names), args.batch, args.preset, args.energy, progress
    )
    title = (
        f"Decode energy per token, {args.batch} requests, {args.preset} modules, "
        f"{args.energy} energy preset (PIMphony Fig. 16 shape)"
    )
    path = plot_energy(rows, plot, title)
    if args.json:
        block = provenance(args, load_preset(args.preset))
        out = {"rows": rows, "plot": str(path), "provenance": block}
        print(json.dumps(out, indent=2, default=str))
    else:
        print(format_energy(rows))
        print(f"plot: {path}")
    return 0
