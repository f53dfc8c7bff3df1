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

The figures (:data:`FIGURES`; ``--backend`` picks one of :data:`FIGURE_BACKENDS`, the first
by default):

- ``fig2``: compute-centric (T) vs DCC (B): speedup of B over T, rearrangement's share of T's
  time (paper, on AttAcc: 1.26x geomean, 64.68%); HBM-PIM by default (the first run, before
  AttAcc's lowerings were fast), ``--backend attacc`` the paper's back end;
- ``fig6``: AttAcc's ATTN, GEMV and RED panels at the paper's sizes and batches 1 and 4:
  default and DCC speedup over the GPU (paper geomeans: ATTN 8.36 / 10.40, GEMV 5.96 / 7.65,
  RED 1.19 / 1.78; DCC over the default 1.24x, 1.28x, 1.50x). ATTN "H x T" at batch B is
  ``attn`` (B x H, T, 128), K and V resident; RED "N" at batch B is Fig. 7's reading
  (:data:`FIG7_ELEMENTWISE`), ``batched-red`` (B, 1, N): B rows of N reduced to one value
  each, the batch a set of its own, so the default mapping puts batch rows on channels (DCC
  V: "batches ... across 16 channels"), as the paper's does;
- ``fig7``: GEMV on HBM-PIM (paper geomeans 3.59 / 5.63) and Fig. 7's RED, VA and RELU panels
  (:data:`FIG7_ELEMENTWISE`: tensor sizes 1024, 2048, 4096 at batch 1, 2, 4; paper: DCC over
  the default 2.11x, 1.69x, 1.58x); ``--panels`` runs some of a figure's panels;
- ``fig9``: DCC's gain over the default on GEMV as the batch grows 1 -> 8 (paper: HBM-PIM
  1.33 -> 1.61x, AttAcc 1.14 -> 1.33x): HBM-PIM at 512 and 4,096 outputs (the first run),
  AttAcc (``--backend attacc``) at the paper's four, 512 to 4,096 (:data:`FIG9_OUTPUTS`).

``--table FILE`` (DCC IV-D's lookup table filled offline, ``pimphony dcc-lut``, read by
:func:`sim.analysis.dcc_table.read_table`): a point whose (back end, kernel, sizes) the
table holds takes the table's draft, simulated for the row's times, without a search
(:func:`sim.tune.tune_report` with ``table``); another point takes the draft the table's
offline predictor predicts best, simulated likewise, or, with a table written before the
predictor was saved beside it, is searched as without the option. Each row says where its
draft came from (``draft_source``: ``table``, ``predicted`` or ``search``). A tabled or
predicted point's compute-centric choice is not searched (the search is what the table
saves): its ``compute_centric_us``, ``dcc_over_compute_centric`` and
``rearrangement_share_T`` are None. Figs. 6, 7 and 9 do not use them (their summaries and
plots are speedups over the default and the GPU); Fig. 2 is about them and its points
rearrange every input per call, which a table does not hold, so ``fig2`` with ``--table``
is refused.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from pimphony.compiler.dcc.cost import clear_caches
from pimphony.compiler.dcc.predictor import LookupTable
from pimphony.models.backends import load_backend
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import BUILD_DIR, check_writable, pyplot, write_atomic, write_figure
from pimphony.sim.analysis.dcc_shapes import (
    FIGURE_BACKENDS,
    FIGURES,
    Case,
    Figure,
)
from pimphony.sim.cli import choice_names
from pimphony.sim.provenance import provenance
from pimphony.sim.tune import tune_report
from tqdm import tqdm

__all__ = [
    "PAPER",
    "FigureError",
    "add_arguments",
    "figure_cases",
    "figure_rows",
    "panel",
    "run",
]


class FigureError(PimphonyError, ValueError):
    """A figure option that does not fit the figure (a panel it does not have)."""


#: A row's ``draft_source`` for a point the table lacks, by the tune report's ``new_shape``.
_SOURCES = {"predicted": "predicted", "searched": "search"}

_FIG2_TABLE = (
    "--table: figure fig2's points rearrange every input per call (every-call placement); a "
    "table holds drafts chosen with weights / KV resident; drop --table"
)


#: The paper's numbers each figure is compared with (DCC V, Figs. 2, 6, 7, 9 and their text).
PAPER: dict[Figure, dict[str, float]] = {
    Figure.FIG2: {"speedup_geomean": 1.26, "rearrangement_share_T": 0.6468},
    # Fig. 6's bars' geomeans; DCC over the default: the text's averages (V-A)
    Figure.FIG6: {
        "ATTN_default_over_gpu_geomean": 8.36,
        "ATTN_dcc_over_gpu_geomean": 10.40,
        "ATTN_dcc_over_default_geomean": 1.24,
        "default_over_gpu_geomean": 5.96,
        "dcc_over_gpu_geomean": 7.65,
        "dcc_over_default_geomean": 1.28,
        "RED_default_over_gpu_geomean": 1.19,
        "RED_dcc_over_gpu_geomean": 1.78,
        "RED_dcc_over_default_geomean": 1.50,
    },
    # GEMV: the text's geomeans; RED / VA / RELU: the text's DCC-over-default averages and
    # the figure's geomean bars over the GPU
    Figure.FIG7: {
        "default_over_gpu_geomean": 3.59,
        "dcc_over_gpu_geomean": 5.63,
        "dcc_over_default_geomean": 1.57,
        "RED_default_over_gpu_geomean": 0.71,
        "RED_dcc_over_gpu_geomean": 1.51,
        "RED_dcc_over_default_geomean": 2.11,
        "VA_default_over_gpu_geomean": 1.36,
        "VA_dcc_over_gpu_geomean": 2.29,
        "VA_dcc_over_default_geomean": 1.69,
        "RELU_default_over_gpu_geomean": 1.88,
        "RELU_dcc_over_gpu_geomean": 2.96,
        "RELU_dcc_over_default_geomean": 1.58,
    },
    # the text's batch-1 and batch-8 averages; batch 2 and 4: geomeans of the figure's bars
    Figure.FIG9: {
        "hbm-pim_b1": 1.33,
        "hbm-pim_b2": 1.50,
        "hbm-pim_b4": 1.60,
        "hbm-pim_b8": 1.61,
        "attacc_b1": 1.14,
        "attacc_b2": 1.23,
        "attacc_b4": 1.28,
        "attacc_b8": 1.33,
    },
}


def _geomean(xs: list[float | None]) -> float:
    """Geometric mean of the values that exist (a default mapping that cannot run has none)."""
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def panel(case_or_row_label: dict[str, Any]) -> str:
    """The panel a point belongs to: its kernel label (GEMV when it has none)."""
    return str(case_or_row_label.get("kernel", "GEMV"))


def figure_cases(
    fig: Figure, panels: tuple[str, ...] | None = None, backend: str | None = None
) -> list[Case]:
    """The figure's points (of ``panels`` only, if given) on ``backend`` (the figure's
    default if None); :class:`FigureError` for a back end or panel the figure lacks."""
    fig = Figure(fig)
    allowed = FIGURE_BACKENDS[fig]
    backend = backend or allowed[0]
    if backend not in allowed:
        raise FigureError(f"--backend {backend}: figure {fig} runs on {', '.join(allowed)}")
    cases = FIGURES[fig](backend)
    if panels is not None:
        have = list(dict.fromkeys(panel(c[4]) for c in cases))
        bad = [p for p in panels if p not in have]
        if not panels:
            raise FigureError(f"--panels is empty; figure {fig} has panels {', '.join(have)}")
        if bad:
            raise FigureError(
                f"--panels {','.join(panels)}: figure {fig} has panels {', '.join(have)}; "
                f"{', '.join(bad)} is not one"
            )
        cases = [c for c in cases if panel(c[4]) in panels]
    return cases


def figure_rows(
    fig: Figure,
    panels: tuple[str, ...] | None = None,
    backend: str | None = None,
    table: LookupTable | None = None,
) -> list[dict[str, Any]]:
    """One row per point of :func:`figure_cases`: the case and the tune report's times and
    speedups. With ``table``, a point it holds takes its draft (the compute-centric values
    None, the module docstring) and every row has ``draft_source``."""
    fig = Figure(fig)
    if table is not None and fig is Figure.FIG2:
        raise FigureError(_FIG2_TABLE)
    rows = []
    cases = figure_cases(fig, panels, backend)
    for be, kernel, shape, placement, label in tqdm(cases, desc=f"dcc {fig}", unit="point"):
        r = tune_report(be, kernel, shape, top=1, placement=placement, table=table)
        clear_caches()  # each point's programs are its own (memory; costs unchanged)
        c, t = r["chosen"], r["compute_centric"]
        share = (t["rearrange_in_us"] + t["rearrange_out_us"]) / t["total_us"] if t else None
        row = {
            **label,
            "backend": r["backend"],
            "kernel_run": kernel,
            "shape": list(shape),
            "placement": placement,
            "dcc_us": c["total_us"],
            "default_us": r["default"]["total_us"] if r["default"] else None,
            "default_refused": r["default_refused"],
            "compute_centric_us": t["total_us"] if t else None,
            "gpu_us": r["gpu_us"],
            "dcc_over_default": r["speedup"]["over_default"],
            "dcc_over_compute_centric": r["speedup"]["over_compute_centric"],
            "dcc_over_gpu": r["speedup"]["over_gpu"],
            "default_over_gpu": r["speedup"]["default_over_gpu"],
            "rearrangement_share_T": share,
            "dcc_draft": c["draft"],
            "default_draft": r["default"]["draft"] if r["default"] else None,
        }
        if table is not None:
            t = r["table"]
            row["draft_source"] = "table" if t["hit"] else _SOURCES[t["new_shape"]]
        rows.append(row)
    return rows


def summary(fig: Figure, rows: list[dict[str, Any]]) -> dict[str, float]:
    """The figure's headline numbers, named as in :data:`PAPER`."""
    if fig is Figure.FIG2:
        return {
            "speedup_geomean": _geomean([r["dcc_over_compute_centric"] for r in rows]),
            "rearrangement_share_T": sum(r["rearrangement_share_T"] for r in rows) / len(rows),
        }
    if fig in (Figure.FIG6, Figure.FIG7):  # per panel; GEMV's names carry no prefix
        out = {}
        for name in dict.fromkeys(panel(r) for r in rows):
            sel = [r for r in rows if panel(r) == name]
            pre = "" if name == "GEMV" else f"{name}_"
            for key in ("default_over_gpu", "dcc_over_gpu", "dcc_over_default"):
                out[f"{pre}{key}_geomean"] = _geomean([r[key] for r in sel])
        return out
    out = {}
    for be in sorted({r["backend"] for r in rows}):
        for b in (1, 2, 4, 8):
            sel = [r["dcc_over_default"] for r in rows if r["backend"] == be and r["batch"] == b]
            if sel:
                out[f"{be}_b{b}"] = _geomean(sel)
    return out


def plot(fig: Figure, rows: list[dict[str, Any]], path: Path) -> Path:
    """Bars per point: the speedups the figure is about; Figs. 6-7 one panel per kernel, the
    speedups over the GPU on a log axis (they span 0.001x to 10x)."""
    plt = pyplot()
    by_panel = fig in (Figure.FIG6, Figure.FIG7)
    names = list(dict.fromkeys(panel(r) for r in rows)) if by_panel else [""]
    groups = [[r for r in rows if not by_panel or panel(r) == n] for n in names]
    ncols = min(2, len(names))
    nrows = -(-len(names) // ncols)
    width = max(6.0, 0.55 * max(len(g) for g in groups) * ncols + 1.5)
    f, axes = plt.subplots(nrows, ncols, figsize=(width, 4.0 * nrows), squeeze=False,
                           sharey=by_panel)  # fmt: skip
    flat = list(axes.ravel())
    for ax in flat[len(names) :]:
        ax.set_visible(False)
    if fig is Figure.FIG2:
        series = [("DCC over compute-centric", "dcc_over_compute_centric")]
        ylabel = "speedup (x)"
    elif fig is Figure.FIG9:
        series = [("DCC over default mapping", "dcc_over_default")]
        ylabel = "speedup (x)"
    else:
        series = [("default mapping", "default_over_gpu"), ("DCC", "dcc_over_gpu")]
        ylabel = "speedup over GPU (x, log)"
    w = 0.8 / len(series)
    for ax, name, sel in zip(flat[: len(names)], names, groups, strict=True):
        xs = range(len(sel))
        for i, (label, key) in enumerate(series):
            ax.bar([x + (i - (len(series) - 1) / 2) * w for x in xs],
                   [r[key] or 0 for r in sel], w, label=label)  # fmt: skip
        ax.axhline(1.0, color="grey", lw=0.8)
        ticks = [f"{r.get('kernel', '')} {r['size']} B{r['batch']} {r['backend']}" for r in sel]
        ax.set_xticks(list(xs), ticks, rotation=60, ha="right", fontsize=7)
        if by_panel:
            ax.set_yscale("log")
            ax.set_title(name, fontsize=9)
        ax.set_xlabel("kernel, size, batch, back end")
        ax.set_ylabel(ylabel)
    f.legend(*flat[0].get_legend_handles_labels(), loc="upper right", fontsize=8)
    backends = ", ".join(dict.fromkeys(str(r["backend"]) for r in rows))
    f.suptitle(f"DCC {fig.value.replace('fig', 'Fig. ')} shape on {backends} (pimphony dcc-figs)"
               "\nsizes: heads "
               "x outputs (GEMV), rows x cols, or elements per batch row", x=0.02, ha="left",
               fontsize=10)  # fmt: skip
    f.tight_layout(rect=(0, 0, 1, 0.93 if len(names) < 3 else 0.96))
    return write_figure(f, path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony dcc-figs``."""
    p.add_argument("--figure", required=True, choices=choice_names(Figure), help="which figure")
    p.add_argument(
        "--panels",
        type=lambda text: tuple(x.strip().upper() for x in text.split(",") if x.strip()),
        default=None,
        help="comma-separated panels to run (fig7: GEMV,RED,VA,RELU; default: all)",
    )
    p.add_argument(
        "--backend",
        default=None,
        help="back end: fig2 hbm-pim (default) or attacc; fig9 hbm-pim (default) or attacc; "
        "fig6 attacc; fig7 hbm-pim",
    )
    p.add_argument(
        "--table",
        type=Path,
        default=None,
        metavar="FILE",
        help="DCC's lookup table filled offline (pimphony dcc-lut) for the figure's back end: "
        "points it holds take its draft without a search (their compute-centric time is not "
        "searched), others are searched; not with fig2 (every-call placement)",
    )
    p.add_argument(
        "--report",
        default=None,
        help="JSON path (default build/dcc/FIG.json; FIG-BACKEND.json off the default back "
        "end; with --table FIG-table.json, FIG-BACKEND-table.json)",
    )
    p.add_argument("--plot", default=None, help="PNG path (default as --report, .png)")
    p.add_argument("--force", action="store_true", help="overwrite existing outputs")


def _read_table(args: argparse.Namespace, fig: Figure, backend: str) -> LookupTable:
    """``--table`` read for the back ends of the figure's points (one in a figure), refused
    with one line as :func:`sim.analysis.dcc_table.read_table` refuses it, and for fig2."""
    from pimphony.sim.analysis.dcc_table import read_table

    if fig is Figure.FIG2:
        raise FigureError(_FIG2_TABLE)
    names = dict.fromkeys(c[0] for c in figure_cases(fig, args.panels, backend)) or [backend]
    return [read_table(args.table, load_backend(name)) for name in names][-1]


def run(args: argparse.Namespace) -> int:
    """Run the figure's points, print the table and write JSON + PNG."""
    fig = Figure(args.figure)
    backend = args.backend or FIGURE_BACKENDS[fig][0]
    stem = str(fig) if backend == FIGURE_BACKENDS[fig][0] else f"{fig}-{backend}"
    stem += "" if args.table is None else "-table"
    report = Path(args.report or BUILD_DIR / "dcc" / f"{stem}.json")
    png = Path(args.plot or BUILD_DIR / "dcc" / f"{stem}.png")
    for p in (report, png):
        check_writable(p, args.force)
    table = None if args.table is None else _read_table(args, fig, backend)
    rows = figure_rows(fig, args.panels, backend, table)
    for r in rows:
        t = r["compute_centric_us"]
        centric = f"{'T not searched':<15}" if t is None else f"T {t:10.2f} us"
        print(f"{r.get('kernel', r['kernel_run']):>12} {r['size']:>9} B{r['batch']:<3} "
              f"{r['backend']:<8} DCC {r['dcc_us']:10.2f} us  default "
              f"{r['default_us'] or float('nan'):10.2f} us  "
              f"{centric}  GPU {r['gpu_us']:9.3f} us  "
              f"DCC/default {r['dcc_over_default'] or float('nan'):6.2f}x  "
              f"DCC/GPU {r['dcc_over_gpu']:6.3f}x")  # fmt: skip
    s = summary(fig, rows)
    paper = PAPER[fig]
    print("summary: " + ", ".join(
        f"{k} {v:.3f}" + (f" (paper {paper[k]})" if k in paper else "") for k, v in s.items()
    ))  # fmt: skip
    inputs: dict[str, Any] = {}
    if table is not None:
        from pimphony.sim.analysis.dcc_table import table_digest, untabled_line

        n = {s: sum(r["draft_source"] == s for r in rows) for s in ("table", "predicted", "search")}
        inputs["table"] = {"path": str(args.table), "sha256": table_digest(args.table),
                           "points": {"table": n["table"], "predicted": n["predicted"],
                                      "searched": n["search"]}}  # fmt: skip
        print(f"DCC drafts: {n['table']} point(s) from table {args.table} (not searched), "
              f"{untabled_line(table, n['predicted'], n['search'])}")  # fmt: skip
    else:  # reports' options stay as before --table existed
        args = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "table"})
    doc = {"figure": str(fig), "rows": rows, "summary": s, "paper": paper,
           "provenance": provenance(args, **inputs)}  # fmt: skip
    write_atomic(report, (json.dumps(doc, indent=2, default=str) + "\n").encode(), args.force)
    plot(fig, rows, png)
    print(f"report: {report}\nplot:   {png}")
    return 0
