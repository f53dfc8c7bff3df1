"""``pimphony dcc-fig8``: DCC Fig. 8's shape, end-to-end generation on the GPU and on AttAcc with
and without DCC (``docs/dcc.md``, "Fig. 8").

The systems and the step model are :mod:`sim.systems.attacc_gpu`'s (:data:`FIG8_SPECS`,
keyed by :class:`~sim.systems.base.SystemKind`: ``gpu``, ``attacc-base``,
``attacc-base+dcc``, ``attacc-full``, ``attacc-full+dcc``; :func:`step_phases` costs one
generation step per phase); this module sums the steps of a run and draws the figure.

Fig. 8's phases are the generation stage's (the AttAcc simulator's ``g_time``: the prefill runs
on the GPU in every system and is not in the figure; the paper's speedups grow with the mean
generation context, 128 + 1024 < 2048 + 64 < 2048 + 1024, as the generation stage's do). A
run of ``Lout`` tokens is the sum of its steps at contexts ``Lin + 1 ... Lin + Lout``; each
phase is costed at :data:`SAMPLE_POINTS` evenly spaced contexts and integrated piecewise
linearly over the steps (attention is linear in ``L`` on both devices; the other phases do not
depend on it). The paper does not say how many PIM devices' capacity its GPU baseline has;
ours is one A100 (DCC V) holding weights and KV, capacity not checked (LLaMA-33B at batch 4
and 4,096 tokens needs 91 GB).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pimphony.compiler.dcc.predictor import SEARCH_BUDGET, SEARCH_VERIFY
from pimphony.compiler.llm import ModelSpec, load_model
from pimphony.models.backends import load_backend
from pimphony.models.fileio import BUILD_DIR, pyplot, write_atomic, write_figure
from pimphony.sim.analysis.dcc_shapes import (
    FIG8_BACKEND,
    FIG8_BATCHES,
    FIG8_MODELS,
    FIG8_RUNS,
    SAMPLE_POINTS,
    sample_contexts,
)
from pimphony.sim.analysis.dcc_table import add_search_options
from pimphony.sim.cli import bounded_int, bounded_ints
from pimphony.sim.provenance import provenance
from pimphony.sim.report import parse_list, user_output, user_plot
from pimphony.sim.systems.attacc_gpu import (
    ENERGY_NOT_MODELLED,
    FIG8_SPECS,
    PHASE_COLOURS,
    Fig8Spec,
    Fig8Step,
    Phase,
    PimTimes,
    energy_block,
    step_energy,
    step_phases,
)
from pimphony.sim.systems.base import SystemKind
from pimphony.sim.systems.setup import DecodeError

__all__ = [
    "FIG8_DIR",
    "PAPER",
    "add_arguments",
    "fig8",
    "format_energy",
    "format_fig8",
    "over_steps",
    "plot_fig8",
    "run",
    "summary",
]


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
    budget: int = SEARCH_BUDGET,
    verify: int = SEARCH_VERIFY,
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
                    for s, sys in FIG8_SPECS.items()
                }
                base = sum(systems[SystemKind.GPU]["phases"].values())
                for s in systems.values():
                    s["seconds"] = sum(s["phases"].values())
                    s["speedup_over_gpu"] = base / s["seconds"]
                if energy is not None:
                    for s, sys in FIG8_SPECS.items():
                        j = over_steps(step_energy, spec, host, b, lin, lout, sys, pim, points)
                        systems[s]["energy"] = energy_block(j, b * lout)
                    gpu_j = systems[SystemKind.GPU]["energy"]["joules_per_token"]
                    for s in systems.values():
                        s["energy"]["over_gpu"] = s["energy"]["joules_per_token"] / gpu_j
                paper = PAPER.get((spec.name, b, (lin, lout)))
                row = {
                    "model": spec.name, "batch": b, "lin": lin, "lout": lout,
                    "systems": systems,
                    "paper_speedup": dict(zip(list(FIG8_SPECS)[1:], paper, strict=True))
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
    for s in list(FIG8_SPECS)[1:]:
        out["speedup_over_gpu"][str(s)] = mean([r["systems"][s]["speedup_over_gpu"] for r in rows])
        out["paper_speedup_over_gpu"][str(s)] = mean(
            [r["paper_speedup"][s] for r in rows if r["paper_speedup"]]
        )
    out["dcc_gain"] = {
        "base": mean([r["systems"][SystemKind.ATTACC_BASE]["seconds"]
                      / r["systems"][SystemKind.ATTACC_BASE_DCC]["seconds"] for r in rows]),
        "full": mean([r["systems"][SystemKind.ATTACC_FULL]["seconds"]
                      / r["systems"][SystemKind.ATTACC_FULL_DCC]["seconds"] for r in rows]),
        "paper": {"base": 1.24, "full": 1.86},
    }  # fmt: skip
    return out


def format_fig8(rows: list[dict[str, Any]], summ: dict[str, Any]) -> str:
    """Per run: each system's speedup over the GPU (paper's in brackets) and phase split."""
    names = list(FIG8_SPECS)[1:]
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
    names = list(FIG8_SPECS)
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


def plot_fig8(rows: list[dict[str, Any]], path: Path) -> Path:
    """Stacked bars: each system's generation time over the GPU's, by phase, one panel per
    model and batch; the speedup over the GPU on top."""
    plt = pyplot()
    panels = list(dict.fromkeys((r["model"], r["batch"]) for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    names = list(FIG8_SPECS)
    for ax, (model, b) in zip(axes[0], panels, strict=True):
        sel = [r for r in rows if (r["model"], r["batch"]) == (model, b)]
        x, ticks, labels = 0.0, [], []
        for r in sel:
            gpu = r["systems"][SystemKind.GPU]["seconds"]
            for s in names:
                bottom = 0.0
                for p in Phase:
                    h = r["systems"][s]["phases"][p] / gpu
                    ax.bar(x, h, bottom=bottom, color=PHASE_COLOURS[p], width=0.8,
                           label=str(p) if (x == 0) else None)  # fmt: skip
                    bottom += h
                if s != SystemKind.GPU:
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
    p.add_argument("--batches", type=bounded_ints(1, 4096), default=FIG8_BATCHES, help="e.g. 1,4")
    p.add_argument("--runs", type=_runs, default=FIG8_RUNS,
                   help="Lin:Lout pairs, e.g. 128:2048,2048:128")  # fmt: skip
    p.add_argument("--backend", default=FIG8_BACKEND, help="PIM back end (with a softmax unit)")
    p.add_argument("--points", type=bounded_int(2, 10_000), default=SAMPLE_POINTS,
                   help="contexts each phase is costed at over a run (>= 2: its ends)")  # fmt: skip
    add_search_options(p)
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
        tuple(parse_list("--models", args.models, str, DecodeError)), args.batches, args.runs,
        args.backend, args.points, args.budget, args.verify, progress=say, pim=pim, energy=energy,
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
