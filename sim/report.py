"""Text tables, JSON summaries and plots for channel runs."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pimphony.compiler.kernels import KernelProgram
from pimphony.models.channel import BREAKDOWN_KEYS, ScheduleResult
from pimphony.models.energy import Energy
from pimphony.models.fileio import figure_format, pyplot, write_atomic, write_figure

T = TypeVar("T")

__all__ = [
    "OutputFile",
    "FORCE_REPORT_PLOT",
    "ReportFiles",
    "publish_json",
    "user_plot",
    "parse_list",
    "describe_kernel",
    "energy_table",
    "kernel_summary",
    "plot_breakdowns",
    "scheduler_table",
    "user_output",
    "write_atomic",
]

_BREAKDOWN_TITLES = {
    "mac_busy": "MAC busy",
    "io_transfer": "I/O xfer",
    "dependency_stall": "dep stall",
    "row_switch": "row switch",
}


def parse_list(
    flag: str, text: str, convert: Callable[[str], T], error: type[Exception]
) -> list[T]:
    """Comma-separated ``text`` of option ``flag`` as a non-empty list; ``error`` otherwise."""
    kind = "integers" if convert is int else "numbers"
    try:
        values = [convert(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise error(f"{flag} {text!r}: expected comma-separated {kind}") from None
    if not values:
        raise error(f"{flag} is empty")
    return values


def user_output(given: Path | None, default: Path, force: bool) -> Path:
    """The file to write: ``default`` (a build artefact, regenerated each run) or the user's
    ``given`` path, which is never replaced without ``force``."""
    if given is None:
        return default
    if given.exists() and not force:
        raise FileExistsError(f"{given} exists; pass --force to replace it")
    return given


def user_plot(given: Path | None, default: Path, force: bool) -> Path:
    """:func:`user_output` for a plot, whose extension must name a format we write (checked
    before any work is done)."""
    path = user_output(given, default, force)
    figure_format(path)
    return path


@dataclass(frozen=True)
class OutputFile:
    """A command's file option: its ``flag``, the format its help names (``JSON``, ``CSV``,
    ``PNG``) and the ``default`` path its help gives."""

    flag: str
    kind: str
    default: Path | str


#: ``--force``'s help: of most report commands, and where the files are --report and --plot.
FORCE_OUTPUTS = "replace existing output files"
FORCE_REPORT_PLOT = "replace existing --report/--plot files"


@dataclass(frozen=True)
class ReportFiles:
    """A report command's files: the JSON ``report`` and the figure ``plot`` (default paths),
    the ``more`` file options between them, and ``--force``'s help."""

    report: Path | str
    plot: Path | str
    more: tuple[OutputFile, ...] = ()
    force_help: str = FORCE_OUTPUTS

    @classmethod
    def named(cls, directory: Path, stem: str, force_help: str = FORCE_OUTPUTS) -> ReportFiles:
        """``<directory>/<stem>.json`` and ``<directory>/<stem>.png``."""
        return cls(directory / f"{stem}.json", directory / f"{stem}.png", force_help=force_help)

    def add_options(self, p: argparse.ArgumentParser) -> None:
        """``--json``, ``--report``, the ``more`` options, ``--plot`` and ``--force``."""
        p.add_argument("--json", action="store_true", help="print one JSON object")
        files = (
            OutputFile("--report", "JSON", self.report),
            *self.more,
            OutputFile("--plot", "PNG", self.plot),
        )
        for f in files:
            p.add_argument(f.flag, type=Path, help=f"{f.kind} path (default {f.default})")
        p.add_argument("--force", action="store_true", help=self.force_help)

    def paths(self, args: argparse.Namespace) -> tuple[Path, Path]:
        """The report's and the figure's paths (:func:`user_output`, :func:`user_plot`),
        checked before any work is done."""
        return (
            user_output(args.report, Path(self.report), args.force),
            user_plot(args.plot, Path(self.plot), args.force),
        )


def publish_json(
    doc: dict[str, Any], files: Mapping[str, Path], as_json: bool, text: Callable[[], str]
) -> None:
    """Write ``doc`` as JSON to ``files["report"]``, then print the JSON (``as_json``) or
    ``text()`` and where each of ``files`` went (``report: <path>``, ``plot:   <path>``)."""
    dumped = json.dumps(doc, indent=2, default=str)
    write_atomic(files["report"], (dumped + "\n").encode())
    if as_json:
        print(dumped)
    else:
        print(text())
        print("\n".join(f"{label + ':':<8}{path}" for label, path in files.items()))


def describe_kernel(prog: KernelProgram) -> str:
    """One line naming the kernel, its shape and its command counts."""
    s = prog.shape
    if prog.kind == "gemv":
        shape = f"FC GEMV {s['d_out']}x{s['d_in']}"
        if s.get("batch", 1) > 1:
            shape += f", batch {s['batch']} in passes of {prog.plan.pass_size} (row reuse)"
    else:
        name = "attention QK^T" if prog.kind == "qk" else "attention SV"
        group = "MHA" if s["gqa_group"] == 1 else f"GQA group {s['gqa_group']}, {s['mapping']}"
        shape = f"{name} T={s['tokens']} d_h={s['d_h']} ({group})"
    counts = ", ".join(f"{k} {v}" for k, v in prog.counts.items())
    return f"{shape}: {prog.commands.shape[0]} commands ({counts})"


def scheduler_table(results: Sequence[ScheduleResult]) -> str:
    """A table of cycles, utilisation, speedup vs static and the time breakdown."""
    base = next((r.cycles for r in results if r.scheduler == "static"), results[0].cycles)
    # Columns widen for runs of 10^7 cycles and more (streamed runs); 7 digits otherwise.
    w = max(7, *(len(str(r.breakdown[k])) + 1 for r in results for k in BREAKDOWN_KEYS))
    wc = max(10, *(len(str(r.cycles)) + 1 for r in results))
    head = f"{'scheduler':<10}{'cycles':>{wc}}{'MAC util':>10}{'speedup':>9}" + "".join(
        f"{_BREAKDOWN_TITLES[k]:>{w + 5}}" for k in BREAKDOWN_KEYS
    )
    lines = [head, "-" * len(head)]
    for r in results:
        speedup = base / r.cycles if r.cycles else 0.0
        cells = "".join(
            f"{r.breakdown[k]:>{w}} {100 * r.breakdown[k] / max(r.cycles, 1):3.0f}%"
            for k in BREAKDOWN_KEYS
        )
        lines.append(
            f"{r.scheduler:<10}{r.cycles:>{wc}}{100 * r.mac_utilization:>9.1f}%"
            f"{speedup:>8.2f}x{cells}"
        )
    return "\n".join(lines)


def energy_table(results: Sequence[ScheduleResult], energies: Sequence[Energy], preset: str) -> str:
    """A table of each run's channel energy (nJ) by part (``docs/energy.md``)."""
    keys = ("mac", "io", "activation", "background")
    head = f"{'energy nJ':<10}{'total':>10}" + "".join(f"{k:>12}" for k in keys)
    lines = [f"channel energy ({preset} energy preset)", head, "-" * len(head)]
    for r, e in zip(results, energies, strict=True):
        cells = "".join(
            f"{getattr(e, k) / 1e3:>7.0f} {100 * getattr(e, k) / max(e.total, 1e-30):3.0f}%"
            for k in keys
        )
        lines.append(f"{r.scheduler:<10}{e.total / 1e3:>10.0f}{cells}")
    return "\n".join(lines)


def kernel_summary(
    prog: KernelProgram, result: ScheduleResult, static_cycles: int | None = None
) -> dict:
    """JSON-ready summary of one kernel run."""
    summary = {
        "kernel": prog.kind,
        "shape": dict(prog.shape),
        "preset": prog.cfg.name,
        **result.to_dict(),
    }
    if static_cycles is not None and result.cycles:
        summary["speedup_vs_static"] = static_cycles / result.cycles
    return summary


def plot_breakdowns(
    runs: Sequence[tuple[str, Sequence[ScheduleResult]]], path: Path, title: str
) -> Path:
    """Stacked bars of the cycle breakdown, one group of bars per kernel; written to ``path``."""

    plt = pyplot()

    colors = {
        "mac_busy": "#2a9d8f",
        "io_transfer": "#e9c46a",
        "dependency_stall": "#e76f51",
        "row_switch": "#264653",
    }
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 4.2), squeeze=False)
    for ax, (label, results) in zip(axes[0], runs, strict=True):
        names = [r.scheduler for r in results]
        bottom = [0.0] * len(results)
        for key in BREAKDOWN_KEYS:
            vals = [r.breakdown[key] / 1e3 for r in results]
            ax.bar(names, vals, bottom=bottom, color=colors[key], label=_BREAKDOWN_TITLES[key])
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        for x, r in enumerate(results):
            ax.text(x, bottom[x], f"{100 * r.mac_utilization:.0f}%", ha="center", va="bottom")
        ax.set_title(label, fontsize=9)
        ax.set_ylabel("kilocycles (label: MAC utilisation)")
    axes[0][0].legend(loc="upper right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    write_figure(fig, path)
    return path
