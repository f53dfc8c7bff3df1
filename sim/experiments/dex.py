"""The DEX experiment (LibraPIM 4.3, Fig. 16): PIM attention plus host weight reads, with and
without bank slicing.

One channel runs an attention PIM stream (QK^T then SV over the same context, from
``compiler.kernels``) while the host (xPU) streams weights out of the same banks at several
request rates. For each rate the TLM (:func:`models.bank_slice.run_bank_slice`) runs the
baseline (one row buffer per bank: PIM and host own the banks in turn) and DEX (KV and weight
partitions with their own rows). The table gives MAC utilisation and delivered host-read
bandwidth; the plot shows both against the offered host bandwidth.

``pimphony dex`` runs it (:func:`add_arguments`, :func:`run`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pimphony.compiler.kernels import compile_kernel
from pimphony.models.bank_slice import (
    SliceConfig,
    SliceError,
    empty_host_reads,
    run_bank_slice,
)
from pimphony.models.config import DEFAULT_PRESET, HardwareConfig, load_preset
from pimphony.models.fileio import BUILD_DIR, pyplot, write_figure
from pimphony.models.isa import Op
from pimphony.sim.cli import add_seed_option
from pimphony.sim.provenance import provenance
from pimphony.sim.report import parse_list, user_plot

__all__ = [
    "DEFAULT_PLOT",
    "DEFAULT_RATES",
    "add_arguments",
    "attention_stream",
    "dex_table",
    "experiment",
    "host_stream",
    "plot_dex",
    "run",
]

DEFAULT_RATES = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
"""Offered host read requests per cycle (x 32 B = offered bytes per cycle)."""
DEFAULT_PLOT = BUILD_DIR / "dex" / "dex.png"
PATTERNS = ("stream", "random")


def attention_stream(cfg: HardwareConfig, tokens: int, d_h: int) -> np.ndarray:
    """QK^T then SV for one head over ``tokens`` tokens; SV's V rows follow K's rows."""
    qk = compile_kernel(cfg, "qk", tokens=tokens, d_h=d_h).commands
    sv = compile_kernel(cfg, "sv", tokens=tokens, d_h=d_h).commands.copy()
    k_rows = int(qk["row"].max()) + 1
    is_mac = sv["op"] == Op.MAC
    sv["row"][is_mac] += k_rows
    return np.concatenate([qk, sv])


def host_stream(
    cfg: HardwareConfig,
    rate: float,
    horizon: int,
    pattern: str = "stream",
    seed: int = 0,
    rows: int = 4,
) -> np.ndarray:
    """Host reads arriving at ``rate`` per cycle (geometric gaps) over ``horizon`` cycles.

    ``stream``: consecutive 32 B weight tiles interleaved across banks (LibraPIM 5.3: bank
    ``i % banks``, then column, then row). ``random``: uniform bank and column, one of
    ``rows`` weight rows per bank (many row conflicts).
    """
    if not 0 < rate <= 1:
        raise SliceError(f"rate = {rate!r}: must be in (0, 1] requests per cycle")
    if pattern not in PATTERNS:
        raise SliceError(f"pattern {pattern!r} is unknown; allowed: {', '.join(PATTERNS)}")
    rng = np.random.default_rng(seed)
    n = max(1, int(round(rate * horizon)))
    ch = cfg.channel
    host = empty_host_reads(n)
    host["arrival"] = np.cumsum(rng.geometric(rate, n)) - 1
    if pattern == "stream":
        i = np.arange(n)
        host["bank"] = i % ch.banks
        host["col"] = (i // ch.banks) % ch.columns_per_row
        host["row"] = i // (ch.banks * ch.columns_per_row)
    else:
        host["bank"] = rng.integers(0, ch.banks, n)
        host["col"] = rng.integers(0, ch.columns_per_row, n)
        host["row"] = rng.integers(0, rows, n)
    return host


def experiment(
    cfg: HardwareConfig,
    rates: Sequence[float] = DEFAULT_RATES,
    tokens: int = 4096,
    d_h: int = 128,
    pattern: str = "stream",
    seed: int = 0,
    slicing: SliceConfig | None = None,
    progress=None,
) -> dict:
    """Run the baseline and DEX at every rate; return a JSON-ready result.

    ``progress(done, total, text)`` is called after every run if given.
    """
    slicing = slicing or SliceConfig()
    pim = attention_stream(cfg, tokens, d_h)
    alone = run_bank_slice(pim, empty_host_reads(0), cfg, slicing)
    horizon = alone.pim_cycles
    col = cfg.channel.column_bytes
    rows, total, done = [], 2 * len(rates), 0
    for rate in rates:
        host = host_stream(cfg, rate, horizon, pattern, seed)
        row: dict = {
            "rate": rate,
            "offered_bytes_per_cycle": rate * col,
            "host_reads": int(host.shape[0]),
        }
        for name, sliced in (("baseline", False), ("dex", True)):
            r = run_bank_slice(pim, host, cfg, slicing.replace(sliced=sliced))
            row[name] = r.to_dict()
            done += 1
            if progress:
                progress(done, total, f"rate {rate:g}/cycle, {name}")
        rows.append(row)
    return {
        "preset": cfg.name,
        "freq_ghz": cfg.module.freq_ghz,
        "workload": {
            "pim": f"attention QK^T + SV, T={tokens}, d_h={d_h}",
            "pim_commands": int(pim.shape[0]),
            "macs": alone.macs,
            "host_pattern": pattern,
            "seed": seed,
        },
        "slicing": slicing.to_dict(),
        "pim_alone": {"cycles": alone.pim_cycles, "mac_utilization": alone.mac_utilization},
        "rows": rows,
    }


def dex_table(result: dict) -> str:
    """Text table: per offered rate, MAC utilisation and host bandwidth, baseline vs DEX."""
    f = result["freq_ghz"]
    head = (
        f"{'offered':>12} |{'MAC util':>10}{'host GB/s':>11}{'lat':>8}{'PIM cyc':>9} |"
        f"{'MAC util':>10}{'host GB/s':>11}{'lat':>8}{'PIM cyc':>9}"
    )
    title = f"{'':>12} |{'baseline (no slicing)':^38} |{'DEX (bank slicing)':^38}"
    lines = [title, head, "-" * len(head)]
    for row in result["rows"]:
        cells = f"{row['offered_bytes_per_cycle'] * f:>7.2f} GB/s |"
        for name in ("baseline", "dex"):
            r = row[name]
            cells += (
                f"{100 * r['mac_utilization']:>9.1f}%{r['host_gbps']:>11.2f}"
                f"{r['host_latency_mean']:>8.0f}{r['pim_cycles']:>9}"
            )
            cells += " |" if name == "baseline" else ""
        lines.append(cells)
    return "\n".join(lines)


def plot_dex(result: dict, path: Path, force: bool = True) -> Path:
    """MAC utilisation and delivered host bandwidth vs offered bandwidth; PNG to ``path``."""
    plt = pyplot()

    f = result["freq_ghz"]
    x = [r["offered_bytes_per_cycle"] * f for r in result["rows"]]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    for name, label, style in (("baseline", "baseline (no slicing)", "s--"), ("dex", "DEX", "o-")):
        ax.plot(x, [100 * r[name]["mac_utilization"] for r in result["rows"]], style, label=label)
        bx.plot(x, [r[name]["host_gbps"] for r in result["rows"]], style, label=label)
    ax.axhline(
        100 * result["pim_alone"]["mac_utilization"],
        color="grey",
        lw=0.8,
        ls=":",
        label="PIM alone",
    )
    bx.plot(x, x, color="grey", lw=0.8, ls=":", label="offered")
    ax.set_xlabel("offered host read bandwidth (GB/s)")
    ax.set_ylabel("MAC utilisation (%)")
    ax.set_ylim(bottom=0)
    ax.set_title("PIM: MAC utilisation")
    bx.set_xlabel("offered host read bandwidth (GB/s)")
    bx.set_ylabel("delivered host read bandwidth (GB/s)")
    bx.set_title("host reads: bandwidth")
    for a in (ax, bx):
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.suptitle(f"DEX: {result['workload']['pim']} + host weight reads ({result['preset']})")
    fig.tight_layout()
    return write_figure(fig, path, overwrite=force)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``pimphony dex``."""
    parser.add_argument("--preset", default=DEFAULT_PRESET, help="hardware preset name or .toml")
    parser.add_argument(
        "--rates",
        default=",".join(f"{r:g}" for r in DEFAULT_RATES),
        help="comma-separated host read requests per cycle (each reads 32 B)",
    )
    parser.add_argument("--tokens", type=int, default=4096, help="attention context length T")
    parser.add_argument("--dh", type=int, default=128, help="attention head dimension d_h")
    parser.add_argument("--pattern", choices=PATTERNS, default="stream", help="host addresses")
    add_seed_option(parser, "seed of the host arrivals")
    parser.add_argument(
        "--kv-groups", type=int, default=4, help="subarray groups of the KV partition"
    )
    parser.add_argument(
        "--subarray-groups", type=int, default=8, help="subarray groups per bank (split unit)"
    )
    parser.add_argument("--host-queue", type=int, default=8, help="host read queue depth")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--plot", type=Path, default=None, help=f"plot file (PNG; default {DEFAULT_PLOT})"
    )
    parser.add_argument("--force", action="store_true", help="replace an existing --plot file")
    parser.add_argument(
        "--quiet", action="store_true", help="no progress line on stderr (shown on a terminal)"
    )


def run(args: argparse.Namespace) -> int:
    """Run the experiment for parsed ``args`` (user errors propagate to the CLI)."""
    cfg = load_preset(args.preset)
    rates = parse_list("--rates", args.rates, float, SliceError)
    slicing = SliceConfig(
        subarray_groups=args.subarray_groups,
        kv_groups=args.kv_groups,
        host_queue_depth=args.host_queue,
    )
    plot = user_plot(args.plot, DEFAULT_PLOT, args.force)

    show = not args.quiet and sys.stderr.isatty()

    def progress(done: int, total: int, text: str) -> None:
        if show:
            print(f"\r[{done}/{total}] {text:<40}", end="", file=sys.stderr, flush=True)
            if done == total:
                print(file=sys.stderr)

    result = experiment(
        cfg,
        rates,
        tokens=args.tokens,
        d_h=args.dh,
        pattern=args.pattern,
        seed=args.seed,
        slicing=slicing,
        progress=progress,
    )
    path = plot_dex(result, plot, force=True)
    result["plot"] = str(path)
    result["provenance"] = provenance(args, cfg)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        w = result["workload"]
        alone = result["pim_alone"]
        print(
            f"DEX experiment, one channel of {result['preset']}: {w['pim']} "
            f"({w['pim_commands']} commands, {w['macs']} MACs; alone {alone['cycles']} cycles, "
            f"MAC util {100 * alone['mac_utilization']:.1f}%), host '{w['host_pattern']}' "
            f"weight reads of 32 B"
        )
        print(dex_table(result))
        print("lat = mean host read latency (cycles); PIM cyc = cycles to the last PIM completion")
        print(f"plot: {path}")
    return 0
