"""LibraPIM's utilisation and idle-time figures (Figs. 20, 7 and 9) from system steps.

:func:`sweep` runs :func:`sim.systems.librapim.run_librapim` over batch x input length and
keeps per step :func:`step_row`: time, Algorithm 1's prediction, busy / idle fractions and
the utilisation the step reports (NPU: useful matrix FLOP/s over peak; PIM: MAC commands the
channel TLM issued x ``tCCD`` over channels x step cycles, and useful FLOP/s over peak).
The figures' summaries put our numbers beside the paper's (``docs/librapim.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.fileio import pyplot, write_figure
from pimphony.models.xpu_config import XpuConfig, load_xpu
from pimphony.sim.systems.base import SystemKind
from pimphony.sim.systems.librapim import DEFAULT_TP, OffloadReading, run_librapim
from pimphony.sim.systems.setup import DecodeError

__all__ = [
    "FIG7_PAPER",
    "FIG9_PAPER",
    "FIG20_PAPER",
    "batch_panels",
    "fig7_summary",
    "fig9_summary",
    "fig20_summary",
    "format_fig7",
    "format_fig9",
    "format_fig20",
    "plot_fig7",
    "plot_fig9",
    "plot_fig20",
    "step_row",
    "sweep",
]

Row = dict[str, Any]


def step_row(model: str, xpu: str, batch: int, context: int, r: Any) -> Row:
    """One report row of a system's step ``r`` (a ``LibrapimStep``)."""
    return {
        "model": model,
        "xpu": xpu,
        "system": r.name,
        "batch": batch,
        "context": context,
        "step_ms": r.step_seconds * 1e3,
        "predicted_ms": r.predicted_seconds * 1e3,
        "tokens_per_s": r.tokens_per_s,
        "busy_xpu": r.busy["xpu"],
        "busy_pim": r.busy["pim"],
        "idle_xpu": 1.0 - r.busy["xpu"],
        "idle_pim": 1.0 - r.busy["pim"],
        "util_xpu": r.utilisation["xpu"],
        "util_pim_mac": r.utilisation["pim_mac_issue"],
        "util_pim_flops": r.utilisation["pim_flops"],
        "groups": [
            {k: d.get(k) for k in ("case", "batch", "m", "n", "m_exact", "n_exact")}
            for d in r.decisions
        ],
    }


def sweep(
    model: str,
    batches: Sequence[int],
    contexts: Sequence[int],
    systems: Sequence[str],
    xpus: Sequence[XpuConfig] | None = None,
    groups: int = 2,
    tp: int = DEFAULT_TP,
    preset: str = "librapim-hbm2",
    progress: Callable[[str], None] | None = None,
    offload: OffloadReading = OffloadReading.PER_BANK,
) -> list[Row]:
    """One :func:`step_row` per (xPU, batch, context, system); default xPU ``librapim-npu``;
    DBO's offloaded FFN under ``offload``."""
    spec, hw = load_model(model), load_preset(preset)
    for ctx in contexts:
        if not 1 <= ctx <= spec.context_window:
            raise DecodeError(
                f"context {ctx}: allowed 1 to {spec.context_window} ({spec.name}'s window)"
            )
    rows = []
    for dev in xpus or [load_xpu("librapim-npu")]:
        for b in batches:
            for ctx in contexts:
                out = run_librapim(
                    spec, hw, dev, (ctx,) * b, min(groups, b), "dcs", tp, tuple(systems),
                    offload=offload,
                )  # fmt: skip
                rows.extend(step_row(spec.name, dev.name, b, ctx, r) for r in out.values())
                if progress:
                    progress(
                        f"{dev.name} B={b} L={ctx}: "
                        + " ".join(f"{r.name} {r.step_seconds * 1e3:.1f} ms" for r in out.values())
                    )
    return rows


def _pick(rows: list[Row], **match: Any) -> list[Row]:
    return [r for r in rows if all(r[k] == v for k, v in match.items())]


_COLOURS = {
    SystemKind.NPU_AIM: "#6c757d",
    SystemKind.ATTACC: "#219ebc",
    SystemKind.NEUPIMS: "#8ecae6",
    SystemKind.LIBRAPIM: "#e76f51",
    SystemKind.LIBRAPIM_BEST: "#f4a261",
    SystemKind.AIM_PIPELINED: "#e9c46a",
    SystemKind.LIBRAPIM_NO_DBO: "#264653",
    SystemKind.LIBRAPIM_MEASURED: "#9d0208",
}

# ---------------------------------------------------------------- Fig. 20

#: LibraPIM 1 and 6.3 at batch 128: PIM / NPU utilisation at input 4096, and LibraPIM's PIM
#: "over 25% utilization even for short inputs".
FIG20_PAPER: dict[str, Any] = {
    "at_longest": {
        SystemKind.ATTACC: {"pim": 0.06, "npu": 0.13},
        SystemKind.NEUPIMS: {"pim": 0.21, "npu": 0.62},
        SystemKind.LIBRAPIM: {"pim": 0.38, "npu": 0.77},
    },
    "librapim_pim_min": 0.25,
}


def fig20_summary(rows: list[Row]) -> dict[str, Any]:
    """Per system: PIM (MAC issue and useful FLOPs) and NPU utilisation at the shortest and
    longest input, and the range of PIM MAC-issue utilisation."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(r["system"] for r in rows):
        sel = sorted(_pick(rows, system=name), key=lambda r: (r["batch"], r["context"]))
        lo, hi = sel[0], sel[-1]
        out[name] = {
            "shortest": {
                k: lo[k] for k in ("context", "util_pim_mac", "util_pim_flops", "util_xpu")
            },
            "longest": {
                k: hi[k] for k in ("context", "util_pim_mac", "util_pim_flops", "util_xpu")
            },
            "pim_mac_min": min(r["util_pim_mac"] for r in sel),
            "pim_mac_max": max(r["util_pim_mac"] for r in sel),
        }
    return out


def format_fig20(rows: list[Row], summary: dict[str, Any]) -> str:
    """Per input length and system: PIM MAC-issue / useful-FLOP utilisation and NPU
    utilisation; then the longest point beside the paper's."""
    names = list(summary)
    lines = [f"{'L':>5s} " + " ".join(f"{n:>26s}" for n in names)]
    lines.append(f"{'':5s} " + " ".join(f"{'PIM mac/flop   NPU':>26s}" for _ in names))
    for ctx in sorted({r["context"] for r in rows}):
        cells = []
        for n in names:
            r = _pick(rows, system=n, context=ctx)[0]
            cells.append(
                f"{r['util_pim_mac']:8.1%}/{r['util_pim_flops']:6.1%} {r['util_xpu']:9.1%}"
            )
        lines.append(f"{ctx:5d} " + " ".join(f"{c:>26s}" for c in cells))
    lines.append("at the longest input, ours (PIM MAC issue, NPU) vs paper (PIM, NPU):")
    for n, p in FIG20_PAPER["at_longest"].items():
        if n in summary:
            s = summary[n]["longest"]
            lines.append(
                f"  {n:10s} {s['util_pim_mac']:6.1%} {s['util_xpu']:6.1%}   paper "
                f"{p['pim']:.0%} {p['npu']:.0%}"
            )
    if SystemKind.LIBRAPIM in summary:
        lines.append(
            f"  librapim PIM minimum {summary[SystemKind.LIBRAPIM]['pim_mac_min']:.1%} "
            f"(paper: over {FIG20_PAPER['librapim_pim_min']:.0%} even at short inputs)"
        )
    return "\n".join(lines)


def plot_fig20(rows: list[Row], path: Path) -> Path:
    """(a) PIM utilisation, (b) NPU utilisation vs input length, one line per system; the
    paper's values at 4096 as stars."""
    plt = pyplot()
    fig, (ax_p, ax_n) = plt.subplots(1, 2, figsize=(11, 4))
    b = rows[0]["batch"]
    for name in dict.fromkeys(r["system"] for r in rows):
        sel = sorted(_pick(rows, system=name), key=lambda r: r["context"])
        xs = [r["context"] for r in sel]
        c = _COLOURS.get(name, "black")
        ax_p.plot(xs, [100 * r["util_pim_mac"] for r in sel], "o-", color=c,
                  label=f"{name} MAC issue")  # fmt: skip
        ax_p.plot(xs, [100 * r["util_pim_flops"] for r in sel], ":", color=c,
                  label=f"{name} useful FLOPs")  # fmt: skip
        ax_n.plot(xs, [100 * r["util_xpu"] for r in sel], "o-", color=c, label=name)
        p = FIG20_PAPER["at_longest"].get(name)
        if p:
            ax_p.plot([4096], [100 * p["pim"]], "*", ms=12, color=c, mec="black",
                      label=f"{name} paper")  # fmt: skip
            ax_n.plot([4096], [100 * p["npu"]], "*", ms=12, color=c, mec="black",
                      label=f"{name} paper")  # fmt: skip
    for ax, what in ((ax_p, "PIM"), (ax_n, "NPU")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("input length (tokens)")
        ax.set_ylabel(f"{what} utilisation (%)")
        ax.set_ylim(0, 105)
        ax.legend(fontsize=6)
    ax_p.set_title(f"(a) PIM: MAC commands x tCCD / (channels x step), B={b}")
    ax_n.set_title(f"(b) NPU: matrix FLOP/s / peak, B={b}")
    fig.suptitle(f"{rows[0]['model']}: device utilisation (LibraPIM Fig. 20 shape)")
    fig.tight_layout()
    return write_figure(fig, path)


# ---------------------------------------------------------------- Fig. 7

#: LibraPIM 3.1 on NPU+AiM, GPT3-175B: PIM idle "more than 80% of total processing time" for
#: small batches and short sequences; NPU "actives only 10-20%" (idle 80-90%) for large
#: batches and long sequences.
FIG7_PAPER: dict[str, Any] = {
    "pim_idle_small_short": "> 0.80",
    "npu_idle_large_long": [0.80, 0.90],
}


def _grid(rows: list[Row], key: str) -> tuple[list[int], list[int], list[list[float]]]:
    bs = sorted({r["batch"] for r in rows})
    ls = sorted({r["context"] for r in rows})
    by = {(r["batch"], r["context"]): r[key] for r in rows}
    return bs, ls, [[by[(b, x)] for x in ls] for b in bs]


def fig7_summary(rows: list[Row]) -> dict[str, Any]:
    """Idle fractions at the small/short and large/long corners and over the grid."""
    bs, ls, _ = _grid(rows, "idle_pim")
    corner = {(bs[0], ls[0]): "small_short", (bs[-1], ls[-1]): "large_long"}
    out: dict[str, Any] = {}
    for (b, x), label in corner.items():
        r = _pick(rows, batch=b, context=x)[0]
        out[label] = {
            "batch": b,
            "context": x,
            "idle_npu": r["idle_xpu"],
            "idle_pim": r["idle_pim"],
        }
    out["idle_pim_range"] = [min(r["idle_pim"] for r in rows), max(r["idle_pim"] for r in rows)]
    out["idle_npu_range"] = [min(r["idle_xpu"] for r in rows), max(r["idle_xpu"] for r in rows)]
    return out


def format_fig7(rows: list[Row], summary: dict[str, Any]) -> str:
    """The two idle maps as tables (rows: batch, columns: input length)."""
    lines = []
    for key, what in (("idle_xpu", "NPU"), ("idle_pim", "PIM")):
        bs, ls, grid = _grid(rows, key)
        lines.append(f"{what} idle fraction (NPU+AiM), B \\ L")
        lines.append(f"{'':>5s}" + "".join(f"{x:>8d}" for x in ls))
        for b, vals in zip(bs, grid, strict=True):
            lines.append(f"{b:5d}" + "".join(f"{v:8.1%}" for v in vals))
    ss, ll = summary["small_short"], summary["large_long"]
    lines.append(
        f"small/short (B={ss['batch']}, L={ss['context']}): PIM idle {ss['idle_pim']:.1%} "
        f"(paper > 80%); large/long (B={ll['batch']}, L={ll['context']}): NPU idle "
        f"{ll['idle_npu']:.1%} (paper 80-90%), PIM idle {ll['idle_pim']:.1%} (paper ~0%)"
    )
    return "\n".join(lines)


def plot_fig7(rows: list[Row], path: Path) -> Path:
    """Two heat maps, NPU and PIM idle fraction over batch x input length."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, (key, what) in zip(axes, (("idle_xpu", "NPU"), ("idle_pim", "PIM")), strict=True):
        bs, ls, grid = _grid(rows, key)
        im = ax.imshow([[100 * v for v in g] for g in grid], vmin=0, vmax=100, cmap="Reds",
                       origin="lower", aspect="auto")  # fmt: skip
        for i, g in enumerate(grid):
            for j, v in enumerate(g):
                ax.text(j, i, f"{100 * v:.0f}", ha="center", va="center", fontsize=8,
                        color="white" if v > 0.6 else "black")  # fmt: skip
        ax.set_xticks(range(len(ls)), [str(x) for x in ls])
        ax.set_yticks(range(len(bs)), [str(b) for b in bs])
        ax.set_xlabel("input length (tokens)")
        ax.set_ylabel("batch size (requests)")
        ax.set_title(f"{what} idle time (% of the step)")
        fig.colorbar(im, ax=ax, label="idle (%)")
    fig.suptitle(f"{rows[0]['model']}, NPU+AiM: idle time (LibraPIM Fig. 7 shape)")
    fig.tight_layout()
    return write_figure(fig, path)


# ---------------------------------------------------------------- Fig. 9

#: LibraPIM 3.3 gives no numbers: with exclusive access "PIM utilization declines
#: significantly", more so at small batches, and drops sharply beyond input 512.
FIG9_PAPER: dict[str, Any] = {
    "claim": "exclusive access lowers PIM utilisation vs ideal pipelining; sharp drop past 512",
}


def fig9_summary(rows: list[Row]) -> dict[str, Any]:
    """Per (batch, input): ideal (NeuPIMs, dual row buffers) vs exclusive (aim-pipelined)
    utilisation, busy fractions and step time."""
    out: dict[str, Any] = {}
    for b in sorted({r["batch"] for r in rows}):
        for x in sorted({r["context"] for r in rows}):
            ideal = _pick(rows, batch=b, context=x, system=SystemKind.NEUPIMS)
            excl = _pick(rows, batch=b, context=x, system=SystemKind.AIM_PIPELINED)
            if not (ideal and excl):
                continue
            i, e = ideal[0], excl[0]
            out[f"B{b}_L{x}"] = {
                "batch": b,
                "context": x,
                **{
                    f"{k}_{tag}": r[k]
                    for tag, r in (("ideal", i), ("exclusive", e))
                    for k in ("util_pim_mac", "util_xpu", "busy_pim", "step_ms")
                },  # fmt: skip
            }
    return out


def format_fig9(rows: list[Row], summary: dict[str, Any]) -> str:
    """Ideal vs exclusive per point: PIM MAC-issue and NPU utilisation, PIM busy, step."""
    lines = [
        f"{'B':>4s} {'L':>5s}  {'PIM util ideal/excl':>20s}  {'NPU util ideal/excl':>20s}  "
        f"{'PIM busy ideal/excl':>20s}  {'step ms ideal/excl':>20s}"
    ]
    for s in summary.values():
        lines.append(
            f"{s['batch']:4d} {s['context']:5d}  "
            f"{s['util_pim_mac_ideal']:9.1%}/{s['util_pim_mac_exclusive']:<9.1%}  "
            f"{s['util_xpu_ideal']:9.1%}/{s['util_xpu_exclusive']:<9.1%}  "
            f"{s['busy_pim_ideal']:9.1%}/{s['busy_pim_exclusive']:<9.1%}  "
            f"{s['step_ms_ideal']:9.1f}/{s['step_ms_exclusive']:<9.1f}"
        )
    return "\n".join(lines)


def batch_panels(rows: Sequence[Row], width: float) -> tuple[Any, list[tuple[Any, int]]]:
    """A figure of one panel per batch of ``rows``, ``width`` x 4 inches each: the figure and
    its ``(axes, batch)`` pairs in batch order."""
    plt = pyplot()
    bs = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(1, len(bs), figsize=(width * len(bs), 4), squeeze=False)
    return fig, list(zip(axes[0], bs, strict=True))


def plot_fig9(rows: list[Row], path: Path) -> Path:
    """Per batch a panel: PIM and NPU utilisation and PIM's busy share vs input length,
    ideal pipelining (solid) vs exclusive bank access (dashed)."""
    fig, panels = batch_panels(rows, 5.5)
    style = {
        SystemKind.NEUPIMS: ("-", "ideal pipelining"),
        SystemKind.AIM_PIPELINED: ("--", "exclusive"),
    }
    for ax, b in panels:
        for name, (ls, label) in style.items():
            sel = sorted(_pick(rows, batch=b, system=name), key=lambda r: r["context"])
            xs = [r["context"] for r in sel]
            ax.plot(xs, [100 * r["util_pim_mac"] for r in sel], "o" + ls, color="#2a9d8f",
                    label=f"PIM, {label}")  # fmt: skip
            ax.plot(xs, [100 * r["util_xpu"] for r in sel], "s" + ls, color="#023047",
                    label=f"NPU, {label}")  # fmt: skip
            ax.plot(xs, [100 * r["busy_pim"] for r in sel], "^" + ls, color="#e76f51",
                    label=f"PIM busy (time share), {label}")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 105)
        ax.set_xlabel("input length (tokens)")
        ax.set_ylabel("utilisation (%)")
        ax.set_title(f"B = {b}")
        ax.legend(fontsize=7)
    fig.suptitle(
        f"{rows[0]['model']}: batch pipelining, dual row buffers vs exclusive AiM banks "
        "(LibraPIM Fig. 9 shape)"
    )
    fig.tight_layout()
    return write_figure(fig, path)
