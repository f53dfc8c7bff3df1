"""Utilisation sweeps over kernel size (the shape of PIMphony Fig. 8) with a plot."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from pimphony.compiler.kernels import CompileError, Kernel, compile_gemv, compile_qk
from pimphony.models.channel import BREAKDOWN_KEYS, SCHEDULERS, run_channel
from pimphony.models.config import DEFAULT_PRESET, HardwareConfig, load_preset
from pimphony.models.energy import (
    DEFAULT_ENERGY,
    EnergyParams,
    HbmEnergyParams,
    load_energy,
    run_energy,
)
from pimphony.models.fileio import BUILD_DIR, pyplot, write_figure
from pimphony.sim.cli import bounded_int, choice_names
from pimphony.sim.provenance import provenance
from pimphony.sim.report import parse_list, user_plot

__all__ = [
    "DEFAULT_DIMS",
    "add_arguments",
    "plot_sweep",
    "run",
    "sweep",
    "sweep_table",
]

DEFAULT_DIMS = (64, 128, 256, 512, 1024, 2048, 4096)


def sweep(
    cfg: HardwareConfig,
    kind: str = "gemv",
    dims: Sequence[int] = DEFAULT_DIMS,
    tokens: int = 4096,
    energy: EnergyParams | HbmEnergyParams | None = None,
) -> list[dict]:
    """One row per (dimension, scheduler): cycles, MAC utilisation, breakdown and the channel
    energy by part (pJ, ``energy``: default ``aim-cent``; ``docs/energy.md``).

    ``gemv`` sweeps square ``d x d`` weights; ``qk`` sweeps the head dimension ``d_h`` at
    ``tokens`` tokens (the attention case of Fig. 8: small ``d`` means little reuse).
    """
    params = energy if energy is not None else load_energy(DEFAULT_ENERGY)
    params.chips(cfg)
    rows = []
    for d in dims:
        prog = compile_gemv(cfg, d, d) if kind == "gemv" else compile_qk(cfg, tokens, d)
        for s in SCHEDULERS:
            r = run_channel(prog.commands, cfg, s, record=False)
            rows.append(
                {
                    "kernel": kind,
                    "dim": d,
                    "scheduler": s,
                    "cycles": r.cycles,
                    "mac_utilization": r.mac_utilization,
                    "breakdown": r.breakdown,
                    "energy": run_energy(r.to_dict(), cfg, params).to_dict("pJ"),
                }
            )
    return rows


def sweep_table(rows: list[dict]) -> str:
    """Text table: MAC utilisation per dimension (rows) and scheduler (columns), then the
    channel energy (nJ) of each scheduler and DCS's background share."""
    dims = sorted({r["dim"] for r in rows})
    util = {(r["dim"], r["scheduler"]): r["mac_utilization"] for r in rows}
    energy = {(r["dim"], r["scheduler"]): r["energy"] for r in rows}
    head = (
        f"{'dim':>6}" + "".join(f"{s:>11}" for s in SCHEDULERS) + f"{'dcs/static':>12}"
        + "".join(f"{s + ' nJ':>13}" for s in SCHEDULERS) + f"{'dcs bg':>8}"
    )  # fmt: skip
    lines = [head, "-" * len(head)]
    for d in dims:
        cells = "".join(f"{100 * util[d, s]:>10.1f}%" for s in SCHEDULERS)
        nj = "".join(f"{energy[d, s]['total'] / 1e3:>13.1f}" for s in SCHEDULERS)
        dcs = energy[d, "dcs"]
        bg = 100 * dcs["background"] / dcs["total"] if dcs["total"] else 0.0
        lines.append(f"{d:>6}{cells}{util[d, 'dcs'] / util[d, 'static']:>11.2f}x{nj}{bg:>7.1f}%")
    return "\n".join(lines)


def plot_sweep(rows: list[dict], path: Path, title: str) -> Path:
    """MAC utilisation vs dimension per scheduler, and the static breakdown; PNG to ``path``."""
    plt = pyplot()

    dims = sorted({r["dim"] for r in rows})
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    for s, style in zip(SCHEDULERS, ("o-", "s--", "^-"), strict=True):
        ys = [
            100 * r["mac_utilization"]
            for d in dims
            for r in rows
            if r["dim"] == d and r["scheduler"] == s
        ]
        ax.plot(dims, ys, style, label=s)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("dimension d")
    ax.set_ylabel("MAC utilisation (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("MAC utilisation")
    static = [next(r for r in rows if r["dim"] == d and r["scheduler"] == "static") for d in dims]
    bottom = [0.0] * len(dims)
    for key in BREAKDOWN_KEYS:
        share = [100 * r["breakdown"][key] / r["cycles"] for r in static]
        bx.bar([str(d) for d in dims], share, bottom=bottom, label=key.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, share, strict=True)]
    bx.set_xlabel("dimension d")
    bx.set_ylabel("share of cycles (%)")
    bx.set_title("static scheduler: where the cycles go")
    bx.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(title)
    fig.tight_layout()
    return write_figure(fig, path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony sweep``."""
    p.add_argument(
        "--kernel",
        choices=choice_names((Kernel.GEMV, Kernel.QK)),
        default="gemv",
        help="gemv: square d x d weights; qk: head dimension d_h at --tokens",
    )
    p.add_argument(
        "--dims", default=",".join(str(d) for d in DEFAULT_DIMS), help="comma-separated dimensions"
    )
    p.add_argument(
        "--tokens", type=bounded_int(1, 1 << 20), default=4096, help="tokens for --kernel qk"
    )
    p.add_argument("--preset", default=DEFAULT_PRESET)
    p.add_argument(
        "--energy",
        default=DEFAULT_ENERGY,
        help=f"energy preset name or .toml path (default {DEFAULT_ENERGY}; docs/energy.md)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--plot", type=Path, default=None, help="plot file (default build/sweep/<kernel>.png)"
    )
    p.add_argument("--force", action="store_true", help="replace an existing --plot file")


def run(args: argparse.Namespace) -> int:
    """``pimphony sweep``: the table (or JSON) and the plot."""
    cfg = load_preset(args.preset)
    dims = parse_list("--dims", args.dims, int, CompileError)
    rows = sweep(cfg, args.kernel, dims, tokens=args.tokens, energy=load_energy(args.energy))
    plot = user_plot(args.plot, BUILD_DIR / "sweep" / f"{args.kernel}.png", args.force)
    what = "square GEMV d x d" if args.kernel == "gemv" else f"QK^T, T={args.tokens}, d = d_h"
    plot_sweep(rows, plot, f"MAC utilisation vs dimension: {what} ({cfg.name}, one channel)")
    if args.json:
        out = {"kernel": args.kernel, "preset": cfg.name, "rows": rows}
        print(json.dumps({**out, "provenance": provenance(args, cfg)}, indent=2))
    else:
        print(f"MAC utilisation and channel energy ({args.energy}), {what}, one channel of "
              f"{cfg.name}")  # fmt: skip
        print(sweep_table(rows))
        print(f"plot: {plot}")
    return 0
