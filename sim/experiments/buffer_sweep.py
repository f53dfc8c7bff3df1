"""``pimphony buffer-sweep``: DCS over ping-pong vs the OBuf size and the row-activation rules.

PIMphony Fig. 18 compares DCS with ping-pong "with the same total buffer size" but gives no
size, and no paper gives the DRAM timing conventions its simulator used. So the ratio is
swept instead of picked: for each timing convention (a preset with optional overrides), each
OBuf size (entries per bank; ping-pong gets two halves of it, DCS all of it) and each GQA
group size, QK^T is compiled once and run under ping-pong and DCS. The ratio reported is
ping-pong cycles / DCS cycles (> 1: DCS is faster). A shape the buffers cannot hold (a GQA
group larger than half the OBuf under row reuse) is listed as refused, not guessed.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pimphony.compiler.kernels import CompileError, compile_qk
from pimphony.models.channel import run_channel
from pimphony.models.config import HardwareConfig, load_preset
from pimphony.models.fileio import BUILD_DIR, pyplot, write_figure
from pimphony.sim.cli import bounded_int
from pimphony.sim.provenance import provenance
from pimphony.sim.report import parse_list, user_plot

__all__ = [
    "BUFFER_SWEEP_PLOT",
    "CONVENTIONS",
    "Convention",
    "add_arguments",
    "buffer_sweep",
    "format_buffer_sweep",
    "plot_buffer_sweep",
    "run",
]

BUFFER_SWEEP_PLOT = BUILD_DIR / "buffer-sweep" / "dcs-vs-pingpong.png"
DEFAULT_OBUF = (2, 4, 8, 16, 32, 64, 128)
DEFAULT_GROUPS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Convention:
    """A row-activation/timing convention: a shipped preset plus dotted-key overrides."""

    label: str
    preset: str
    overrides: dict[str, Any] = field(default_factory=dict)

    def config(self, obuf_entries: int) -> HardwareConfig:
        """The convention's hardware with ``obuf_entries`` OBuf entries per bank."""
        return load_preset(self.preset).replace(
            **self.overrides, **{"channel.obuf_entries": obuf_entries}
        )


#: The conventions swept by default: pimphony's AiM timing with four-bank activates, the same
#: with one all-bank activate, and the public Ramulator-2 AiM simulator's rules with and
#: without its 32-cycle mode switch (``docs/scheduling.md``).
CONVENTIONS: dict[str, Convention] = {
    c.label: c
    for c in (
        Convention("ACT4 (aim-16ch)", "aim-16ch"),
        Convention("ACT16 (aim-16ch, act_banks 16)", "aim-16ch", {"timing.act_banks": 16}),
        Convention("aim-ramulator, no TMOD", "aim-ramulator", {"timing.t_MOD": 0}),
        Convention("aim-ramulator (TMOD 32)", "aim-ramulator"),
    )
}


def buffer_sweep(
    conventions: Sequence[Convention] = tuple(CONVENTIONS.values()),
    obuf: Sequence[int] = DEFAULT_OBUF,
    groups: Sequence[int] = DEFAULT_GROUPS,
    tokens: int = 4096,
    d_h: int = 128,
) -> list[dict[str, Any]]:
    """One row per (convention, OBuf entries, GQA group): cycles under ping-pong and DCS,
    their utilisations and ``ratio`` = ping-pong cycles / DCS cycles (``None`` if refused)."""
    rows = []
    for conv in conventions:
        for entries in obuf:
            cfg = conv.config(entries)
            for g in groups:
                row: dict[str, Any] = {
                    "convention": conv.label,
                    "obuf_entries": entries,
                    "gqa_group": g,
                }
                try:
                    prog = compile_qk(cfg, tokens, d_h, gqa_group=g)
                except CompileError as exc:
                    rows.append({**row, "ratio": None, "refused": str(exc)})
                    continue
                pp, dcs = (
                    run_channel(prog.commands, cfg, s, record=False) for s in ("pingpong", "dcs")
                )
                rows.append(
                    {
                        **row,
                        "pingpong_cycles": pp.cycles,
                        "dcs_cycles": dcs.cycles,
                        "pingpong_utilization": pp.mac_utilization,
                        "dcs_utilization": dcs.mac_utilization,
                        "ratio": pp.cycles / dcs.cycles,
                    }
                )
    return rows


def format_buffer_sweep(rows: list[dict[str, Any]]) -> str:
    """Text table: one line per (convention, OBuf size), the ratio per GQA group."""
    groups = sorted({r["gqa_group"] for r in rows})
    head = f"{'convention':<32}{'OBuf':>6}" + "".join(f"{'G=' + str(g):>9}" for g in groups)
    lines = [head, "-" * len(head)]
    keyed = {(r["convention"], r["obuf_entries"], r["gqa_group"]): r for r in rows}
    for conv in dict.fromkeys(r["convention"] for r in rows):
        for entries in sorted({r["obuf_entries"] for r in rows if r["convention"] == conv}):
            cells = []
            for g in groups:
                ratio = keyed[(conv, entries, g)]["ratio"]
                cells.append(f"{'refused':>9}" if ratio is None else f"{ratio:>8.3f}x")
            lines.append(f"{conv:<32}{entries:>6}" + "".join(cells))
    lines.append("ratio = ping-pong cycles / DCS cycles at the same total OBuf (QK^T)")
    return "\n".join(lines)


def plot_buffer_sweep(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """One panel per convention: DCS speed-up over ping-pong vs OBuf entries, a line per G."""
    plt = pyplot()
    convs = list(dict.fromkeys(r["convention"] for r in rows))
    fig, axes = plt.subplots(1, len(convs), figsize=(3.4 * len(convs), 3.4), sharey=False)
    axes = [axes] if len(convs) == 1 else list(axes)
    for ax, conv in zip(axes, convs, strict=True):
        for g in sorted({r["gqa_group"] for r in rows}):
            pts = [
                (r["obuf_entries"], r["ratio"])
                for r in rows
                if r["convention"] == conv and r["gqa_group"] == g and r["ratio"] is not None
            ]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=f"G = {g}")
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("OBuf entries per bank")
        ax.set_title(conv, fontsize=8)
    axes[0].set_ylabel("DCS speed-up over ping-pong (x)")
    axes[-1].legend(fontsize=7, title="GQA group", title_fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return write_figure(fig, path)


def _int_list(lo: int, hi: int):
    """An argparse ``type``: comma-separated integers, each from ``lo`` to ``hi``."""

    def parse(text: str) -> list[int]:
        values = parse_list("list", text, bounded_int(lo, hi), argparse.ArgumentTypeError)
        return sorted(set(values))

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony buffer-sweep``."""
    p.add_argument("--tokens", type=bounded_int(1, 1 << 20), default=4096, help="context T")
    p.add_argument("--dh", type=bounded_int(1, 4096), default=128, help="head dimension d_h")
    p.add_argument(
        "--obuf",
        type=_int_list(1, 1 << 12),
        default=list(DEFAULT_OBUF),
        help="OBuf entries per bank to sweep (comma-separated)",
    )
    p.add_argument(
        "--groups",
        type=_int_list(1, 64),
        default=list(DEFAULT_GROUPS),
        help="GQA group sizes (comma-separated; 1 = MHA)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", type=Path, help=f"plot path (default {BUFFER_SWEEP_PLOT})")
    p.add_argument("--force", action="store_true", help="replace an existing --plot file")


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony buffer-sweep``."""
    plot = user_plot(args.plot, BUFFER_SWEEP_PLOT, args.force)
    rows = buffer_sweep(obuf=args.obuf, groups=args.groups, tokens=args.tokens, d_h=args.dh)
    title = (
        f"QK^T T={args.tokens}, d_h={args.dh}: DCS vs ping-pong at the same total OBuf "
        "(PIMphony Fig. 18 sensitivity)"
    )
    path = plot_buffer_sweep(rows, plot, title)
    if args.json:
        block = provenance(
            args,
            conventions={
                c.label: {"preset": c.preset, "overrides": c.overrides}
                for c in CONVENTIONS.values()
            },
        )
        print(json.dumps({"rows": rows, "plot": str(path), "provenance": block}, indent=2))
    else:
        print(format_buffer_sweep(rows))
        print(f"plot: {path}")
    return 0
