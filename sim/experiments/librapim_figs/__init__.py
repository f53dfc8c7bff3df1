"""``pimphony librapim-figs``: LibraPIM's result figures beyond Fig. 19 (``docs/librapim.md``).

``--figure`` picks one row of :data:`FIGURES`:

* ``fig20``: PIM and NPU utilisation vs input length at batch 128 (6.3, Fig. 20);
* ``fig7``: idle fraction of the NPU and PIM of NPU+AiM over batch x input length (3.1);
* ``fig9``: utilisation with ideal batch pipelining (dual row buffers) vs exclusive bank
  access, B = 32 and 256 (3.3);
* ``fig21``: normalised performance for systolic arrays of 32 to 256, input 512, with and
  without DBO (6.4; :mod:`sim.experiments.librapim_figs.fig21`);
* ``dbo``: Algorithm 1's predicted step beside the simulated one, peak vs measured
  throughputs (:mod:`sim.experiments.librapim_figs.dbo`).

Every figure is a sweep of :func:`sim.systems.librapim.run_librapim` steps (one row per
model, xPU, system, batch and input length; every request at the same length). Utilisation
is the step's (:class:`~sim.systems.librapim.LibrapimStep`): the NPU's useful matrix
FLOP/s over its peak; PIM's MAC commands, counted by the channel TLM, x ``tCCD`` over
channels x step cycles. Idle is ``1 - busy``, busy the fraction of the step a device works.
Each run writes a JSON report with provenance and a PNG under ``build/librapim/``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from pimphony.models.config import load_preset
from pimphony.sim.analysis.librapim_grid import LIBRAPIM_DIR
from pimphony.sim.cli import bounded_int, bounded_ints, choice_names, positive_ints
from pimphony.sim.experiments.librapim_figs import dbo, fig21, utilisation
from pimphony.sim.experiments.librapim_figs.utilisation import sweep
from pimphony.sim.provenance import provenance
from pimphony.sim.report import ReportFiles, publish_json
from pimphony.sim.systems.base import SystemKind
from pimphony.sim.systems.librapim import (
    DEFAULT_TP,
    LIBRAPIM_PRESET,
    LIBRAPIM_SPECS,
    OffloadReading,
    add_offload_argument,
)

__all__ = ["FIGURES", "Figure", "FigureSpec", "add_arguments", "run"]


class Figure(StrEnum):
    """The figures ``pimphony librapim-figs`` makes."""

    FIG20 = "fig20"
    FIG7 = "fig7"
    FIG9 = "fig9"
    FIG21 = "fig21"
    DBO = "dbo"


@dataclass(frozen=True)
class FigureSpec:
    """One figure: its default sweep, how to run it, summarise it, print and plot it.

    ``run(args, progress)`` returns the rows; ``summary(rows)`` the numbers set beside the
    paper's (JSON-ready); ``format(rows, summary)`` the text; ``plot(rows, path)`` the PNG.
    """

    title: str
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    systems: tuple[str, ...]
    run: Callable[[argparse.Namespace, Callable[[str], None] | None], list[dict[str, Any]]]
    summary: Callable[[list[dict[str, Any]]], dict[str, Any]]
    format: Callable[[list[dict[str, Any]], dict[str, Any]], str]
    plot: Callable[[list[dict[str, Any]], Path], Path]
    paper: dict[str, Any] = field(default_factory=dict)


def _sweep_args(
    args: argparse.Namespace, progress: Callable[[str], None] | None
) -> list[dict[str, Any]]:
    """The sweep of a figure whose rows only vary batch, context and system."""
    return sweep(
        args.model,
        args.batches,
        args.contexts,
        args.systems,
        groups=args.groups,
        tp=args.tp,
        progress=progress,
        offload=OffloadReading(args.offload),
    )


_S = SystemKind

#: The registry of figures.
FIGURES: dict[Figure, FigureSpec] = {
    Figure.FIG20: FigureSpec(
        "PIM and NPU utilisation vs input length, batch 128 (Fig. 20)",
        (128,),
        (16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
        (_S.NPU_AIM, _S.ATTACC, _S.NEUPIMS, _S.LIBRAPIM),
        _sweep_args,
        utilisation.fig20_summary,
        utilisation.format_fig20,
        utilisation.plot_fig20,
        utilisation.FIG20_PAPER,
    ),
    Figure.FIG7: FigureSpec(
        "idle fraction of NPU and PIM, NPU+AiM, batch x input length (Fig. 7)",
        (32, 64, 128, 256, 384),
        (16, 64, 256, 1024, 4096),
        (_S.NPU_AIM,),
        _sweep_args,
        utilisation.fig7_summary,
        utilisation.format_fig7,
        utilisation.plot_fig7,
        utilisation.FIG7_PAPER,
    ),
    Figure.FIG9: FigureSpec(
        "utilisation, ideal pipelining vs exclusive bank access (Fig. 9)",
        (32, 256),
        (16, 64, 256, 512, 1024, 2048, 4096),
        (_S.NEUPIMS, _S.AIM_PIPELINED),
        _sweep_args,
        utilisation.fig9_summary,
        utilisation.format_fig9,
        utilisation.plot_fig9,
        utilisation.FIG9_PAPER,
    ),
    Figure.FIG21: FigureSpec(
        "normalised performance vs systolic array size, input 512 (Fig. 21)",
        (32, 256),
        (512,),
        (_S.LIBRAPIM_NO_DBO, _S.LIBRAPIM),
        fig21.run_fig21,
        fig21.fig21_summary,
        fig21.format_fig21,
        fig21.plot_fig21,
        fig21.FIG21_PAPER,
    ),
    Figure.DBO: FigureSpec(
        "Algorithm 1 predicted vs simulated step, peak vs measured throughputs",
        (32, 128, 384),
        (16, 256, 4096),
        (_S.LIBRAPIM, _S.LIBRAPIM_MEASURED),
        _sweep_args,
        dbo.dbo_summary,
        dbo.format_dbo,
        dbo.plot_dbo,
    ),
}


def _systems(text: str) -> tuple[str, ...]:
    names = tuple(x for x in text.split(",") if x)
    bad = [n for n in names if n not in LIBRAPIM_SPECS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"{text!r}: unknown system(s) {', '.join(bad) or '(none given)'}; allowed: "
            f"{', '.join(LIBRAPIM_SPECS)}"
        )
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``librapim-figs`` subcommand's options."""
    p.add_argument("--figure", required=True, choices=choice_names(Figure), help="which figure")
    p.add_argument("--model", default="gpt3-175b-4k", help="model preset (default GPT3-175B)")
    p.add_argument(
        "--batches", type=bounded_ints(1, 4096), help="e.g. 32,256 (default: the figure's)"
    )
    p.add_argument("--contexts", type=positive_ints, help="input lengths (default: the figure's)")
    p.add_argument("--systems", type=_systems, help="comma-separated (default: the figure's)")
    p.add_argument(
        "--sizes",
        type=bounded_ints(1, 4096),
        default=(32, 64, 128, 256),
        help="fig21: systolic array sizes",
    )
    p.add_argument(
        "--vector-scaling",
        choices=["width", "fixed"],
        default="width",
        help="fig21: vector lanes scale with the array width (default) or stay Table 2's",
    )
    p.add_argument(
        "--groups", type=bounded_int(1, 4096), default=2, help="batch groups of pipelined systems"
    )
    p.add_argument(
        "--tp", type=bounded_int(1, 1024), default=DEFAULT_TP, help="devices sharing every layer"
    )
    add_offload_argument(p)
    ReportFiles(f"{LIBRAPIM_DIR}/<figure>.json", f"{LIBRAPIM_DIR}/<figure>.png").add_options(p)


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony librapim-figs``."""
    fig = Figure(args.figure)
    spec = FIGURES[fig]
    report, plot = ReportFiles.named(LIBRAPIM_DIR, str(fig)).paths(args)
    args.batches = args.batches or spec.batches
    args.contexts = args.contexts or spec.contexts
    args.systems = args.systems or spec.systems
    progress = None if args.json else (lambda m: print(f"  {m}", flush=True))
    rows = spec.run(args, progress)
    summary = spec.summary(rows)
    path = spec.plot(rows, plot)
    doc = {
        "figure": str(fig),
        "title": spec.title,
        "rows": rows,
        "summary": summary,
        "paper": spec.paper,
        "plot": str(path),
        "provenance": provenance(args, load_preset(LIBRAPIM_PRESET), model=args.model),
    }
    files = {"report": report, "plot": plot}
    publish_json(doc, files, args.json, lambda: spec.format(rows, summary))
    return 0
