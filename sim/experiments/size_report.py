"""Static vs DPA instruction size over context (PIMphony Fig. 10c).

For each context ``T``, the bytes of the unrolled QK^T + SV command streams of one attention
head group on one channel (``compiler.kernels``, ``WORD_BYTES`` per command) against their
DPA programs (``compiler.dpa``, encoded once for the largest ``T``). Prints the table and
writes a log-log plot (default ``build/dpa/instruction-size.png``).

``pimphony size-report`` runs it (:func:`add_arguments`, :func:`run`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from pimphony.compiler.dpa import DpaEncodeError, encode_kernel, positive
from pimphony.compiler.kernels import CompileError, compile_qk, compile_sv
from pimphony.models.config import DEFAULT_PRESET, HardwareConfig, load_preset
from pimphony.models.dpa.format import WORD_BYTES
from pimphony.models.fileio import BUILD_DIR, pyplot, write_figure
from pimphony.sim.provenance import provenance
from pimphony.sim.report import parse_list, user_plot

__all__ = [
    "DEFAULT_PLOT",
    "SizeRow",
    "add_arguments",
    "format_size_report",
    "instruction_size_report",
    "plot_size_report",
    "run",
    "static_program_bytes",
]

DEFAULT_PLOT = BUILD_DIR / "dpa" / "instruction-size.png"


def static_program_bytes(stream: np.ndarray) -> int:
    """Bytes of an unrolled command stream at ``WORD_BYTES`` per command."""
    return int(np.asarray(stream).shape[0]) * WORD_BYTES


class SizeRow(NamedTuple):
    """One row of :func:`instruction_size_report`."""

    tokens: int
    static_bytes: int
    dpa_bytes: int


def instruction_size_report(
    cfg: HardwareConfig,
    d_h: int,
    contexts: Sequence[int],
    gqa_group: int = 1,
    kernels: Sequence[str] = ("qk", "sv"),
) -> list[SizeRow]:
    """Per context ``T``: bytes of the unrolled ``kernels`` streams vs their DPA programs.

    Both cover one attention head group on one channel; the DPA programs are encoded once
    with ``max_tokens = max(contexts)``.
    """
    contexts = [positive("context", t) for t in contexts]
    if not contexts:
        raise DpaEncodeError("no contexts given")
    top = max(contexts)
    dpa = sum(encode_kernel(cfg, k, d_h, gqa_group, top).nbytes for k in kernels)
    rows = []
    for t in contexts:
        static = 0
        for k in kernels:
            fn = compile_qk if k == "qk" else compile_sv
            static += static_program_bytes(fn(cfg, t, d_h, gqa_group).commands)
        rows.append(SizeRow(t, static, dpa))
    return rows


def format_size_report(rows: Sequence[SizeRow], capacity: int) -> str:
    """The report as a text table (``capacity`` = command-buffer bytes)."""
    head = (
        f"{'T':>8}  {'static B':>11}  {'DPA B':>7}  {'static/DPA':>10}  static fits {capacity} B?"
    )
    lines = [head]
    for r in rows:
        fits = "yes" if r.static_bytes <= capacity else "no"
        lines.append(
            f"{r.tokens:>8}  {r.static_bytes:>11,}  {r.dpa_bytes:>7,}  "
            f"{r.static_bytes / r.dpa_bytes:>9.0f}x  {fits}"
        )
    return "\n".join(lines)


def plot_size_report(rows: Sequence[SizeRow], path: Path, title: str, capacity: int) -> Path:
    """Log-log plot of static vs DPA program bytes over context, written atomically."""
    plt = pyplot()
    t = [r.tokens for r in rows]
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    ax.plot(
        t, [r.static_bytes / 1024 for r in rows], "o-", color="#e76f51", label="static (unrolled)"
    )
    ax.plot(t, [r.dpa_bytes / 1024 for r in rows], "s-", color="#2a9d8f", label="DPA-encoded")
    ax.axhline(capacity / 1024, ls="--", color="#264653", lw=1, label="DPA command buffer")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length T (tokens per channel)")
    ax.set_ylabel("instruction size (KB)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return write_figure(fig, path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``pimphony size-report``."""
    parser.add_argument("--dh", type=int, default=128)
    parser.add_argument("--gqa-group", type=int, default=1)
    parser.add_argument(
        "--contexts",
        default=",".join(str(1024 << i) for i in range(8)),
        help="comma-separated token counts",
    )
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--plot", type=Path, default=None, help="PNG (default build/dpa/...)")
    parser.add_argument("--force", action="store_true", help="replace an existing --plot file")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    """Print the size table and write the plot; user errors propagate (``CompileError``,
    ``ConfigError``, ``FileExistsError``)."""
    cfg = load_preset(args.preset)
    contexts = parse_list("--contexts", args.contexts, int, CompileError)
    rows = instruction_size_report(cfg, args.dh, contexts, args.gqa_group)
    plot = user_plot(args.plot, DEFAULT_PLOT, args.force)
    cap = cfg.module.dpa_command_buffer_bytes
    title = f"QK$^T$+SV instruction size, d_h={args.dh}, G={args.gqa_group} ({cfg.name})"
    plot_size_report(rows, plot, title, cap)
    if args.json:
        out = {"rows": [r._asdict() for r in rows], "plot": str(plot)}
        print(json.dumps({**out, "provenance": provenance(args, cfg)}, indent=2))
    else:
        print(f"QK^T + SV, d_h {args.dh}, GQA group {args.gqa_group}, one channel of {cfg.name}")
        print(format_size_report(rows, cap))
        print(f"plot: {plot}")
    return 0
