"""``pimphony dcc-figs``: DCC's result figures as shapes (``docs/dcc.md``, "Results").

Every point is one :func:`sim.tune.tune_report` (DCC's predicted search, the DCC V default
mapping, the compute-centric choice, the GPU roofline). Readings of the paper's sizes
(DCC V: "For GEMV and ATTN, we use input size 128"; Fig. 9: "an attention layer with head
count 32, input size 128 and various output sizes"):

- GEMV "H x T" at batch B: ``qk`` with B x H heads of T outputs x 128 inputs (every request
  has its own K: a batch multiplies the heads), K resident in PIM layout;
- Fig. 2's GEMV "256 x 2048" at batch B: ``batched-gemv`` (B, 256, 2048) and RED "256 x
  2048": ``red`` (B x 256, 2048), every input rearranged per call (the figure is about
  rearrangement).

The figures (:data:`FIGURES`):

- ``fig2``: compute-centric (T) vs DCC (B) (on HBM-PIM, :data:`FIG2_BACKEND`): speedup of B
  over T, rearrangement's share of T's time (paper: 1.26x geomean, 64.68%);
- ``fig6`` / ``fig7``: GEMV on AttAcc / HBM-PIM at the paper's sizes and batches 1 and 4:
  default and DCC speedup over the GPU (paper geomeans: AttAcc 5.96 / 7.65, HBM-PIM 3.59 /
  5.63);
- ``fig9``: DCC's gain over the default on GEMV as the batch grows 1 -> 8 on HBM-PIM
  (paper: 1.33 -> 1.61x; AttAcc 1.14 -> 1.33x, not run: see :data:`FIG2_BACKEND`).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

from tqdm import tqdm

from compiler.dcc_cost import Placement
from models.fileio import BUILD_DIR, check_writable, pyplot, write_atomic, write_figure
from sim.cli import choice_names
from sim.provenance import provenance
from sim.tune import tune_report

__all__ = ["FIGURES", "PAPER", "Figure", "add_arguments", "figure_rows", "run"]


class Figure(StrEnum):
    """DCC's result figures reproduced as shapes."""

    FIG2 = "fig2"
    FIG6 = "fig6"
    FIG7 = "fig7"
    FIG9 = "fig9"


#: Fig. 2's back end. The paper's is AttAcc [20]; our AttAcc lowerings build streams in Python
#: per MAC (~1 s per draft at these sizes, 53,305 pruned drafts for a 32 x 512 GEMV), too slow
#: for a figure run, so Fig. 2 runs on HBM-PIM (``docs/dcc.md`` says so beside the numbers).
FIG2_BACKEND = "hbm-pim"

GEMV_SIZES = ((32, 512), (32, 4096), (64, 512), (64, 4096))  # Figs. 6-7: heads x outputs

#: The paper's numbers each figure is compared with (DCC V, Figs. 2, 6, 7, 9 and their text).
PAPER: dict[Figure, dict[str, float]] = {
    Figure.FIG2: {"speedup_geomean": 1.26, "rearrangement_share_T": 0.6468},
    Figure.FIG6: {"default_over_gpu_geomean": 5.96, "dcc_over_gpu_geomean": 7.65},
    Figure.FIG7: {"default_over_gpu_geomean": 3.59, "dcc_over_gpu_geomean": 5.63},
    Figure.FIG9: {"hbm-pim_b1": 1.33, "hbm-pim_b8": 1.61, "attacc_b1": 1.14, "attacc_b8": 1.33},
}

Case = tuple[str, str, tuple[int, ...], str, dict[str, Any]]  # backend, kernel, shape, placement


def _gemv(backend: str, batches: tuple[int, ...], sizes=GEMV_SIZES) -> list[Case]:
    return [
        (backend, "qk", (b * h, t, 128), str(Placement.RESIDENT), {"batch": b, "size": f"{h}x{t}"})
        for b in batches
        for h, t in sizes
    ]


def _fig2() -> list[Case]:
    every = str(Placement.EVERY_CALL)
    out: list[Case] = []
    for b in (16, 28):
        for n in (2048, 4096):
            label = {"batch": b, "size": f"256x{n}"}
            out.append((FIG2_BACKEND, "red", (b * 256, n), every, {**label, "kernel": "RED"}))
            out.append(
                (FIG2_BACKEND, "batched-gemv", (b, 256, n), every, {**label, "kernel": "GEMV"})
            )
    return out


#: Each figure's points.
FIGURES: dict[Figure, Callable[[], list[Case]]] = {
    Figure.FIG2: _fig2,
    Figure.FIG6: lambda: _gemv("attacc", (1, 4)),
    Figure.FIG7: lambda: _gemv("hbm-pim", (1, 4)),
    Figure.FIG9: lambda: _gemv("hbm-pim", (1, 2, 4, 8), ((32, 512), (32, 4096))),
}


def _geomean(xs: list[float | None]) -> float:
    """Geometric mean of the values that exist (a default mapping that cannot run has none)."""
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def figure_rows(fig: Figure) -> list[dict[str, Any]]:
    """One row per point: the case and the tune report's times and speedups."""
    rows = []
    cases = FIGURES[Figure(fig)]()
    for backend, kernel, shape, placement, label in tqdm(cases, desc=f"dcc {fig}", unit="point"):
        r = tune_report(backend, kernel, shape, top=1, placement=placement)
        c, t = r["chosen"], r["compute_centric"]
        rows.append(
            {
                **label,
                "backend": r["backend"],
                "kernel_run": kernel,
                "shape": list(shape),
                "placement": placement,
                "dcc_us": c["total_us"],
                "default_us": r["default"]["total_us"] if r["default"] else None,
                "default_refused": r["default_refused"],
                "compute_centric_us": t["total_us"],
                "gpu_us": r["gpu_us"],
                "dcc_over_default": r["speedup"]["over_default"],
                "dcc_over_compute_centric": r["speedup"]["over_compute_centric"],
                "dcc_over_gpu": r["speedup"]["over_gpu"],
                "default_over_gpu": r["speedup"]["default_over_gpu"],
                "rearrangement_share_T": (t["rearrange_in_us"] + t["rearrange_out_us"])
                / t["total_us"],
                "dcc_draft": c["draft"],
                "default_draft": r["default"]["draft"] if r["default"] else None,
            }
        )
    return rows


def summary(fig: Figure, rows: list[dict[str, Any]]) -> dict[str, float]:
    """The figure's headline numbers, named as in :data:`PAPER`."""
    if fig is Figure.FIG2:
        return {
            "speedup_geomean": _geomean([r["dcc_over_compute_centric"] for r in rows]),
            "rearrangement_share_T": sum(r["rearrangement_share_T"] for r in rows) / len(rows),
        }
    if fig in (Figure.FIG6, Figure.FIG7):
        return {
            "default_over_gpu_geomean": _geomean([r["default_over_gpu"] for r in rows]),
            "dcc_over_gpu_geomean": _geomean([r["dcc_over_gpu"] for r in rows]),
            "dcc_over_default_geomean": _geomean([r["dcc_over_default"] for r in rows]),
        }
    out = {}
    for be in sorted({r["backend"] for r in rows}):
        for b in (1, 2, 4, 8):
            sel = [r["dcc_over_default"] for r in rows if r["backend"] == be and r["batch"] == b]
            if sel:
                out[f"{be}_b{b}"] = _geomean(sel)
    return out


def plot(fig: Figure, rows: list[dict[str, Any]], path: Path) -> Path:
    """Bars per point: the speedups the figure is about."""
    plt = pyplot()
    f, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(rows)), 3.8))
    names = [f"{r.get('kernel', '')} {r['size']} B{r['batch']} {r['backend']}" for r in rows]
    xs = range(len(rows))
    if fig is Figure.FIG2:
        series = [("DCC over compute-centric", "dcc_over_compute_centric")]
        ylabel = "speedup (x)"
    elif fig is Figure.FIG9:
        series = [("DCC over default mapping", "dcc_over_default")]
        ylabel = "speedup (x)"
    else:
        series = [("default mapping", "default_over_gpu"), ("DCC", "dcc_over_gpu")]
        ylabel = "speedup over GPU (x)"
    w = 0.8 / len(series)
    for i, (label, key) in enumerate(series):
        ax.bar([x + (i - (len(series) - 1) / 2) * w for x in xs], [r[key] or 0 for r in rows], w,
               label=label)  # fmt: skip
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(list(xs), names, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("kernel, size (heads x outputs or rows x cols), batch, back end")
    ax.set_title(f"DCC {fig.value.replace('fig', 'Fig. ')} shape (pimphony dcc-figs)")
    ax.legend()
    f.tight_layout()
    return write_figure(f, path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony dcc-figs``."""
    p.add_argument("--figure", required=True, choices=choice_names(Figure), help="which figure")
    p.add_argument("--report", default=None, help="JSON path (default build/dcc/FIG.json)")
    p.add_argument("--plot", default=None, help="PNG path (default build/dcc/FIG.png)")
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")


def run(args: argparse.Namespace) -> int:
    """Run the figure's points, print the table and write JSON + PNG."""
    fig = Figure(args.figure)
    report = Path(args.report or BUILD_DIR / "dcc" / f"{fig}.json")
    png = Path(args.plot or BUILD_DIR / "dcc" / f"{fig}.png")
    for p in (report, png):
        check_writable(p, args.force)
    rows = figure_rows(fig)
    for r in rows:
        print(f"{r.get('kernel', r['kernel_run']):>12} {r['size']:>9} B{r['batch']:<3} "
              f"{r['backend']:<8} DCC {r['dcc_us']:10.2f} us  default "
              f"{r['default_us'] or float('nan'):10.2f} us  "
              f"T {r['compute_centric_us']:10.2f} us  GPU {r['gpu_us']:9.2f} us  "
              f"DCC/default {r['dcc_over_default'] or float('nan'):6.2f}x  "
              f"DCC/GPU {r['dcc_over_gpu']:5.2f}x")  # fmt: skip
    s = summary(fig, rows)
    paper = PAPER[fig]
    print("summary: " + ", ".join(
        f"{k} {v:.3f}" + (f" (paper {paper[k]})" if k in paper else "") for k, v in s.items()
    ))  # fmt: skip
    doc = {"figure": str(fig), "rows": rows, "summary": s, "paper": paper,
           "provenance": provenance(args)}  # fmt: skip
    write_atomic(report, (json.dumps(doc, indent=2, default=str) + "\n").encode(), args.force)
    plot(fig, rows, png)
    print(f"report: {report}\nplot:   {png}")
    return 0
