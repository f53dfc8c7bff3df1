"""Algorithm 1 with peak vs attainable throughputs: predicted beside simulated step times.

``librapim`` predicts with the presets' peak FLOP/s (:func:`~sim.systems.librapim.
dbo_throughput`); ``librapim-measured`` with the rates the xPU cost model and the channel TLM
attain at the batch group's load (:func:`~sim.systems.librapim.measured_throughput`).
Both are then simulated; the prediction is Algorithm 1's per-layer ``max(xPU, PIM)`` summed
over groups, times the layers (``docs/librapim.md``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pimphony.models.fileio import pyplot, write_figure

__all__ = ["dbo_summary", "format_dbo", "plot_dbo"]


def dbo_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per system: mean and worst ``predicted / simulated`` and the geometric-mean step."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(r["system"] for r in rows):
        sel = [r for r in rows if r["system"] == name]
        ratio = [r["predicted_ms"] / r["step_ms"] for r in sel]
        out[name] = {
            "predicted_over_simulated_mean": sum(ratio) / len(ratio),
            "predicted_over_simulated_min": min(ratio),
            "predicted_over_simulated_max": max(ratio),
            "step_ms_geomean": math.exp(sum(math.log(r["step_ms"]) for r in sel) / len(sel)),
        }
    return out


def format_dbo(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    """Per point and system: the split, predicted and simulated ms; then the summary."""
    lines = [f"{'system':18s} {'B':>4s} {'L':>5s} {'predicted ms':>13s} {'simulated ms':>13s}"
             f" {'pred/sim':>9s}  split per group"]  # fmt: skip
    for r in rows:
        split = " ".join(f"{g['case']}:m={g['m']},n={g['n']}" for g in r["groups"])
        lines.append(
            f"{r['system']:18s} {r['batch']:4d} {r['context']:5d} {r['predicted_ms']:13.2f} "
            f"{r['step_ms']:13.2f} {r['predicted_ms'] / r['step_ms']:9.2f}  {split}"
        )
    for name, s in summary.items():
        lines.append(
            f"{name}: predicted/simulated mean {s['predicted_over_simulated_mean']:.2f} "
            f"({s['predicted_over_simulated_min']:.2f}-{s['predicted_over_simulated_max']:.2f}),"
            f" geomean step {s['step_ms_geomean']:.1f} ms"
        )
    return "\n".join(lines)


def plot_dbo(rows: list[dict[str, Any]], path: Path) -> Path:
    """Predicted vs simulated step time, one marker series per variant, the diagonal."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 5.5))
    marks = ["o", "s", "^", "D"]
    for k, name in enumerate(dict.fromkeys(r["system"] for r in rows)):
        sel = [r for r in rows if r["system"] == name]
        ax.scatter([r["step_ms"] for r in sel], [r["predicted_ms"] for r in sel],
                   marker=marks[k % len(marks)], label=name, alpha=0.8)  # fmt: skip
    lo = min(min(r["step_ms"], r["predicted_ms"]) for r in rows)
    hi = max(max(r["step_ms"], r["predicted_ms"]) for r in rows)
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="predicted = simulated")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("simulated step (ms)")
    ax.set_ylabel("Algorithm 1's predicted step (ms)")
    ax.set_title(f"{rows[0]['model']}: DBO prediction, peak vs measured throughputs")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return write_figure(fig, path)
