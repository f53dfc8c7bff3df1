"""``pimphony librapim-fig19``: LibraPIM Fig. 19 shape -- each system's speedup over NPU+AiM
for GPT3-175B and Llama3-70B over batch x input length (``docs/librapim.md``).

Every point is one :func:`sim.systems.librapim.run_librapim` step (every system, the
same ``tp`` devices, every request at the same context). The report gives per point the step
times and the speedups, per model and system the arithmetic and geometric means beside the
paper's averages (6.2x LibraPIM over NPU+AiM, 4.4x over AttAcc, 2.1x over NeuPIMs; 6.2).
"""

from __future__ import annotations

import argparse
import csv
import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import pyplot, write_atomic, write_figure
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.analysis.librapim_grid import (
    LIBRAPIM_BATCHES,
    LIBRAPIM_CONTEXTS,
    LIBRAPIM_DIR,
    LIBRAPIM_MODELS,
)
from pimphony.sim.cli import bounded_int, bounded_ints, positive_ints
from pimphony.sim.provenance import provenance
from pimphony.sim.report import OutputFile, ReportFiles, parse_list, publish_json, user_output
from pimphony.sim.systems.base import SystemKind
from pimphony.sim.systems.librapim import (
    DEFAULT_TP,
    LIBRAPIM_PRESET,
    LIBRAPIM_XPU,
    OffloadReading,
    add_offload_argument,
    run_librapim_readings,
)
from pimphony.sim.systems.setup import DecodeError

__all__ = [
    "FIG19_SYSTEMS",
    "PAPER_SPEEDUP",
    "add_arguments",
    "fig19",
    "fig19_readings",
    "format_fig19",
    "means",
    "plot_fig19",
    "run",
]

#: The systems of Fig. 19 (6.1) and the best-offload analysis row; the other registry rows
#: belong to Figs. 9, 21 and the DBO variant (``pimphony librapim-figs``).
FIG19_SYSTEMS = (
    SystemKind.NPU_AIM,
    SystemKind.ATTACC,
    SystemKind.NEUPIMS,
    SystemKind.LIBRAPIM,
    SystemKind.LIBRAPIM_BEST,
)
#: Average speedup over NPU+AiM the paper reports or implies (6.2: LibraPIM 6.2x, and 4.4x
#: over AttAcc, 2.1x over NeuPIMs, so AttAcc 6.2 / 4.4 and NeuPIMs 6.2 / 2.1 over NPU+AiM).
PAPER_SPEEDUP: dict[str, float] = {
    SystemKind.ATTACC: 6.2 / 4.4,
    SystemKind.NEUPIMS: 6.2 / 2.1,
    SystemKind.LIBRAPIM: 6.2,
}


def fig19(
    *args: Any, offload: OffloadReading = OffloadReading.PER_BANK, **kwargs: Any
) -> list[dict[str, Any]]:
    """One row per (model, batch, context): every system's step ms and speedup over NPU+AiM;
    DBO's offloaded FFN under ``offload`` (the arguments of :func:`fig19_readings`)."""
    return fig19_readings((offload,), *args, **kwargs)[offload]


def fig19_readings(
    readings: Sequence[OffloadReading],
    models: Sequence[str] = LIBRAPIM_MODELS,
    batches: Sequence[int] = LIBRAPIM_BATCHES,
    contexts: Sequence[int] = LIBRAPIM_CONTEXTS,
    groups: int = 2,
    tp: int = DEFAULT_TP,
    preset: str = LIBRAPIM_PRESET,
    xpu: str = LIBRAPIM_XPU,
    progress: Callable[[str], None] | None = None,
) -> dict[OffloadReading, list[dict[str, Any]]]:
    """:func:`fig19` under each of ``readings``, each point's attention simulated once."""
    hw, dev = load_preset(preset), load_xpu(xpu)
    out: dict[OffloadReading, list[dict[str, Any]]] = {r: [] for r in readings}
    for name in models:
        spec = load_model(name)
        for ctx in contexts:
            if not 1 <= ctx <= spec.context_window:
                raise DecodeError(
                    f"context {ctx}: allowed 1 to {spec.context_window} ({spec.name}'s window)"
                )
        for b in batches:
            for ctx in contexts:
                steps = run_librapim_readings(
                    spec, hw, dev, (ctx,) * b, min(groups, b), "dcs", tp, FIG19_SYSTEMS,
                    readings=tuple(readings),
                )  # fmt: skip
                for reading, systems in steps.items():
                    base = systems[SystemKind.NPU_AIM].step_seconds
                    row: dict[str, Any] = {"model": spec.name, "batch": b, "context": ctx}
                    for s, r in systems.items():
                        row[f"{s}_ms"] = r.step_seconds * 1e3
                        row[f"{s}_speedup"] = base / r.step_seconds
                    row["dbo_case"] = systems[SystemKind.LIBRAPIM].decisions[0]["case"]
                    row["dbo_m"] = systems[SystemKind.LIBRAPIM].decisions[0]["m"]
                    row["dbo_n"] = systems[SystemKind.LIBRAPIM].decisions[0]["n"]
                    out[reading].append(row)
                    if progress:
                        progress(
                            f"{spec.name} B={b} L={ctx}"
                            + (f" ({reading})" if len(readings) > 1 else "")
                            + ": "
                            + " ".join(f"{s} {row[f'{s}_speedup']:.2f}x" for s in systems)
                        )
    return out


def means(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per model (and ``"all"``) and system: arithmetic and geometric mean speedup."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for model in [*dict.fromkeys(r["model"] for r in rows), "all"]:
        sel = [r for r in rows if model in ("all", r["model"])]
        out[model] = {}
        for s in FIG19_SYSTEMS:
            xs = [r[f"{s}_speedup"] for r in sel]
            out[model][str(s)] = {
                "mean": sum(xs) / len(xs),
                "geomean": math.exp(sum(math.log(x) for x in xs) / len(xs)),
            }
    return out


def format_fig19(rows: list[dict[str, Any]]) -> str:
    """The table, then the means beside the paper's averages."""
    names = [str(s) for s in FIG19_SYSTEMS if s != SystemKind.NPU_AIM]
    head = f"{'model':14s} {'B':>4s} {'L':>5s} {'NPU+AiM ms':>11s} " + " ".join(
        f"{n:>9s}" for n in names
    )
    lines = [head + "  DBO case"]
    for r in rows:
        lines.append(
            f"{r['model']:14s} {r['batch']:4d} {r['context']:5d} {r['npu+aim_ms']:11.2f} "
            + " ".join(f"{r[f'{n}_speedup']:8.2f}x" for n in names)
            + f"  {r['dbo_case']} m={r['dbo_m']} n={r['dbo_n']}"
        )
    lines.append("speedup over NPU+AiM: mean / geomean (paper's average)")
    for model, per in means(rows).items():
        lines.append(
            f"  {model:14s} "
            + "  ".join(
                f"{n} {per[n]['mean']:.2f}/{per[n]['geomean']:.2f}"
                + (f" ({PAPER_SPEEDUP[n]:.2f})" if n in PAPER_SPEEDUP else "")
                for n in names
            )
        )
    return "\n".join(lines)


def to_csv(rows: list[dict[str, Any]]) -> str:
    """The rows as CSV text (one header line)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


_COLOURS = {
    SystemKind.ATTACC: "#219ebc",
    SystemKind.NEUPIMS: "#8ecae6",
    SystemKind.LIBRAPIM: "#e76f51",
    SystemKind.LIBRAPIM_BEST: "#f4a261",
}


def plot_fig19(rows: list[dict[str, Any]], path: Path) -> Path:
    """Per model a panel of bars: speedup over NPU+AiM per (batch, input length), the paper's
    averages as dashed lines."""
    plt = pyplot()
    from matplotlib.ticker import ScalarFormatter

    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(len(models), 1, figsize=(11, 3.4 * len(models)), squeeze=False)
    w = 0.2
    for ax, model in zip(axes[:, 0], models, strict=True):
        sel = [r for r in rows if r["model"] == model]
        xs = range(len(sel))
        for i, (s, colour) in enumerate(_COLOURS.items()):
            ax.bar([x + (i - 1.5) * w for x in xs], [r[f"{s}_speedup"] for r in sel], w,
                   color=colour, label=f"{s} (ours)")  # fmt: skip
            if s in PAPER_SPEEDUP:
                ax.axhline(PAPER_SPEEDUP[s], color=colour, ls="--", lw=1,
                           label=f"{s} paper average {PAPER_SPEEDUP[s]:.2f}x")  # fmt: skip
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.tick_params(axis="y", which="minor", labelsize=6)
        ax.set_xticks(list(xs), [f"{r['batch']}\n{r['context']}" for r in sel], fontsize=7)
        ax.set_xlabel("batch size / input length (tokens)")
        ax.set_ylabel("speedup over NPU+AiM (x, log)")
        ax.set_title(f"{model}: decode step speedup over NPU+AiM (LibraPIM Fig. 19 shape)")
        ax.legend(fontsize=6, ncol=2, loc="upper left")
    fig.tight_layout()
    return write_figure(fig, path)


_CSV, _DIR = LIBRAPIM_DIR / "fig19.csv", LIBRAPIM_DIR
_FILES = ReportFiles(
    _DIR / "fig19.json", _DIR / "fig19.png", more=(OutputFile("--csv", "CSV", _CSV),)
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``librapim-fig19`` subcommand's options."""
    p.add_argument("--models", default=",".join(LIBRAPIM_MODELS), help="comma-separated presets")
    p.add_argument(
        "--batches", type=bounded_ints(1, 4096), default=LIBRAPIM_BATCHES, help="e.g. 32,64"
    )
    p.add_argument("--contexts", type=positive_ints, default=LIBRAPIM_CONTEXTS, help="e.g. 16,4096")
    p.add_argument(
        "--groups", type=bounded_int(1, 4096), default=2, help="batch groups (NeuPIMs, LibraPIM)"
    )
    p.add_argument(
        "--tp", type=bounded_int(1, 1024), default=DEFAULT_TP, help="devices sharing every layer"
    )
    add_offload_argument(p)
    _FILES.add_options(p)


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony librapim-fig19``."""
    report, plot = _FILES.paths(args)
    table = user_output(args.csv, _CSV, args.force)
    progress = None if args.json else (lambda m: print(f"  {m}", flush=True))
    models = tuple(parse_list("--models", args.models, str, PimphonyError))
    rows = fig19(
        models, args.batches, args.contexts, args.groups, args.tp, progress=progress,
        offload=OffloadReading(args.offload),
    )  # fmt: skip
    path = plot_fig19(rows, plot)
    block = provenance(args, load_preset(LIBRAPIM_PRESET), models=list(models))
    doc = {"rows": rows, "means": means(rows), "paper": PAPER_SPEEDUP, "plot": str(path)}
    doc["provenance"] = block
    write_atomic(table, to_csv(rows).encode())
    files = {"report": report, "table": table, "plot": plot}
    publish_json(doc, files, args.json, lambda: format_fig19(rows))
    return 0
