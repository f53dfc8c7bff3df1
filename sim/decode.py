"""``pimphony decode``: one decode step of an LLM batch on a PIM system, reported and plotted.

The batch's context lengths come from ``--context`` (all equal), ``--contexts FILE`` (one per
request) or ``--workload NAME`` (drawn from a paper's context statistics); ``--batch auto``
admits requests first-come-first-served until the memory is full. See ``docs/decode.md``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from compiler.llm import load_model
from compiler.partition import PARTITIONS
from models.channel import SCHEDULERS
from models.config import load_preset
from models.fileio import write_atomic, write_figure
from models.system import MEMORY_POLICIES, OP_KEYS, DecodeError, DecodeSetup, fill_batch, run_decode
from sim.report import user_output
from sim.workloads import load_workload, read_context_lengths, sample_context_lengths

__all__ = [
    "DECODE_DIR",
    "DECODE_PRESET",
    "add_arguments",
    "format_report",
    "plot_report",
    "report_stem",
    "run",
    "setup_from_args",
]

DECODE_DIR = Path("build/decode")
#: PIMphony Table IV's 32 GB module (32 channels), so that multi-request 32K batches fit.
DECODE_PRESET = "aim-32ch-32g"
_AUTO_POOL = 4096  # candidate requests drawn for --batch auto

_OP_TITLES = {
    "qkv": "QKV",
    "qk": "QK^T",
    "softmax": "softmax/EPU",
    "sv": "SV",
    "proj": "projection",
    "ffn1": "FFN1",
    "ffn2": "FFN2",
    "epu_other": "norm/act (EPU)",
    "allreduce": "TP all-reduce",
    "cmd_transfer": "host cmd transfer",
}
_OP_COLORS = {
    "qkv": "#8ecae6",
    "qk": "#2a9d8f",
    "softmax": "#e9c46a",
    "sv": "#52b788",
    "proj": "#219ebc",
    "ffn1": "#023047",
    "ffn2": "#3a5a80",
    "epu_other": "#f4a261",
    "allreduce": "#e76f51",
    "cmd_transfer": "#9d0208",
}


def _batch(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--batch {value!r}: give a positive int or 'auto'"
        ) from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"--batch {n}: must be >= 1 (or 'auto')")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``decode`` subcommand's options."""
    p.add_argument("--model", default="llm-7b", help="model preset, .toml or HF config.json")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--context", type=int, help="context length of every request")
    src.add_argument("--contexts", type=Path, help="file of per-request context lengths")
    src.add_argument("--workload", help="draw lengths from a workload (e.g. qmsum)")
    p.add_argument("--seed", type=int, default=0, help="seed for --workload sampling")
    p.add_argument("--batch", type=_batch, default=None, help="requests, or 'auto' (fill memory)")
    p.add_argument("--modules", type=int, help="modules (must equal tp * pp; default tp * pp)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel modules per stage")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages")
    p.add_argument("--micro-batches", type=int, default=None, help="default min(pp, batch)")
    p.add_argument("--partition", choices=PARTITIONS, default="tcp")
    p.add_argument("--sched", choices=SCHEDULERS, default="dcs")
    p.add_argument("--memory", choices=MEMORY_POLICIES, default="lazy", help="lazy = DPA")
    p.add_argument("--max-context", type=int, help="static reservation (default: model window)")
    p.add_argument(
        "--preset",
        default=DECODE_PRESET,
        help=f"hardware preset name or .toml (default {DECODE_PRESET}: 32 GiB modules)",
    )
    p.add_argument(
        "--ignore-capacity",
        action="store_true",
        help="time a batch even if it does not fit the memory (capacity check off)",
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--report", type=Path, help=f"JSON report path (default {DECODE_DIR}/...)")
    p.add_argument("--plot", type=Path, help=f"PNG breakdown path (default {DECODE_DIR}/...)")
    p.add_argument("--force", action="store_true", help="replace existing --report/--plot files")


def _lengths(args: argparse.Namespace, window: int) -> tuple[list[int], bool]:
    """Candidate lengths and whether they are a pool for ``--batch auto``."""
    auto = args.batch == "auto"
    if args.contexts is not None:
        lengths = [int(x) for x in read_context_lengths(args.contexts, window)]
        if isinstance(args.batch, int):
            if args.batch > len(lengths):
                raise DecodeError(
                    f"--batch {args.batch}: {args.contexts} has only {len(lengths)} lengths"
                )
            lengths = lengths[: args.batch]
        return lengths, auto
    if args.workload is not None:
        wl = load_workload(args.workload)
        n = _AUTO_POOL if auto else (args.batch or 1)
        return [int(x) for x in sample_context_lengths(wl, n, args.seed)], auto
    context = window if args.context is None else args.context
    if context < 1:
        raise DecodeError(f"--context {context}: must be >= 1")
    n = _AUTO_POOL if auto else (args.batch or 1)
    return [context] * n, auto


def setup_from_args(args: argparse.Namespace) -> DecodeSetup:
    """Validated :class:`DecodeSetup` from parsed ``decode`` options."""
    model = load_model(args.model)
    hw = load_preset(args.preset)
    if args.modules is not None and args.modules != args.tp * args.pp:
        raise DecodeError(
            f"--modules {args.modules} must equal --tp x --pp = {args.tp} x {args.pp} = "
            f"{args.tp * args.pp}"
        )
    lengths, auto = _lengths(args, model.context_window)
    if auto:
        lengths = list(
            fill_batch(model, hw, args.tp * args.pp, args.memory, lengths, args.max_context)
        )
    return DecodeSetup(
        model,
        hw,
        tuple(lengths),
        tp=args.tp,
        pp=args.pp,
        partition=args.partition,
        sched=args.sched,
        memory=args.memory,
        micro_batches=args.micro_batches,
        max_context=args.max_context,
        check_capacity=not args.ignore_capacity,
    )


def report_stem(report: dict[str, Any]) -> str:
    """File stem naming a report's configuration."""
    return (
        f"{report['model']}-B{report['batch']}-T{report['context_lengths']['max']}-"
        f"tp{report['tp']}pp{report['pp']}-{report['partition']}-{report['sched']}-"
        f"{report['memory']}"
    )


def format_report(r: dict[str, Any]) -> str:
    """The report as text: headline numbers and the per-op breakdown."""
    ctx = r["context_lengths"]
    lines = [
        f"{r['model']} decode step on {r['modules']} x {r['preset']} (TP {r['tp']} x PP "
        f"{r['pp']}, {r['micro_batches']} micro-batch(es)), {r['partition'].upper()}, "
        f"{r['sched']} scheduler, {r['memory']} memory",
        f"batch {r['batch']}, context min/mean/max {ctx['min']}/{ctx['mean']:.0f}/{ctx['max']}",
        f"cycles {r['cycles']:,}  ({1e3 * r['step_seconds']:.3f} ms)   "
        f"tokens/s {r['tokens_per_s']:,.1f}",
        f"MAC utilisation {100 * r['mac_utilization']:.1f}%   channel utilisation "
        f"{100 * r['channel_utilization']:.1f}%   capacity utilisation "
        + (
            f"{100 * r['capacity_utilization']:.1f}%"
            if r["capacity_utilization"] is not None
            else "n/a (does not fit; --ignore-capacity)"
        ),
        f"attention {100 * r['attention_share']:.1f}%   FC {100 * r['fc_share']:.1f}%   "
        f"other {100 * r['other_share']:.1f}%   pipeline bubble "
        f"{100 * r['pipeline']['bubble_fraction']:.1f}%",
        "",
        f"{'op':<18}{'cycles':>14}{'share':>8}{'MAC util':>10}",
    ]
    for k in OP_KEYS:
        op = r["ops"][k]
        if op["cycles"]:
            lines.append(
                f"{_OP_TITLES[k]:<18}{op['cycles']:>14,}{100 * op['share']:>7.1f}%"
                f"{100 * op['mac_utilization']:>9.1f}%"
            )
    e = r["epu"]
    lines += [
        "",
        f"SV cross-channel reduction: {e['sv_reduction_busy_cycles']:,} EPU cycles, "
        f"{e['sv_reduction_marginal_cycles']:,} on the critical path = "
        f"{100 * e['sv_reduction_share_of_attention']:.3f}% of attention time",
    ]
    hub = r["hub"]
    lines.append(
        f"HUB instructions per step: {sum(hub['instructions'].values()):,} "
        f"({hub['total_bytes'] / 2**20:.1f} MiB at {hub['instruction_bytes']} B)"
    )
    if r["dpa"]["enabled"]:
        d = r["dpa"]
        lines.append(
            f"DPA: programs {d['program_bytes']:,} B, VA2PA {d['va2pa_bytes_per_module']:,} B "
            "per module"
            + (f"; static fallback for {', '.join(d['refused'])}" if d["refused"] else "")
        )
    sim = r["simulation"]
    lines.append(
        f"simulated {sim['kernels_simulated']} distinct kernels standing for "
        f"{sim['channel_commands']:,} channel commands in {sim['wall_seconds']:.2f} s"
    )
    return "\n".join(lines)


def plot_report(r: dict[str, Any], path: Path) -> Path:
    """PNG: per-op share of stage time (stacked bar) and per-op MAC utilisation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in OP_KEYS if r["ops"][k]["cycles"]]
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(9.5, 4.0), gridspec_kw={"width_ratios": [1, 2.2]}
    )
    bottom = 0.0
    for k in keys:
        share = 100 * r["ops"][k]["share"]
        left.bar(["decode step"], [share], bottom=bottom, color=_OP_COLORS[k], label=_OP_TITLES[k])
        if share > 4:
            left.text(0, bottom + share / 2, f"{share:.0f}%", ha="center", va="center", fontsize=8)
        bottom += share
    left.set_ylabel("share of stage time (%)")
    left.set_ylim(0, 100)
    left.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    util_keys = [k for k in keys if r["ops"][k]["mac_utilization"] > 0]
    xs = np.arange(len(util_keys))
    right.bar(
        xs,
        [100 * r["ops"][k]["mac_utilization"] for k in util_keys],
        color=[_OP_COLORS[k] for k in util_keys],
    )
    right.set_xticks(xs, [_OP_TITLES[k] for k in util_keys], fontsize=8)
    right.set_ylabel("MAC utilisation (%)")
    right.axhline(100 * r["mac_utilization"], ls="--", color="k", lw=1, label="whole step")
    right.legend(fontsize=8)
    fig.suptitle(
        f"{r['model']} B={r['batch']} TP{r['tp']}xPP{r['pp']} {r['partition'].upper()} "
        f"{r['sched']} {r['memory']}: {r['tokens_per_s']:,.0f} tokens/s",
        fontsize=10,
    )
    fig.tight_layout()
    return write_figure(fig, path)


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony decode``; user errors propagate as :class:`DecodeError` and friends."""
    setup = setup_from_args(args)
    progress = None if args.json else (lambda msg: print(f"  {msg}", flush=True))
    report = run_decode(setup, progress=progress)
    stem = report_stem(report)
    json_path = user_output(args.report, DECODE_DIR / f"{stem}.json", args.force)
    png_path = user_output(args.plot, DECODE_DIR / f"{stem}.png", args.force)
    text = json.dumps(report, indent=2)
    write_atomic(json_path, (text + "\n").encode())
    plot_report(report, png_path)
    if args.json:
        print(text)
    else:
        print(format_report(report))
        print(f"report: {json_path}\nplot:   {png_path}")
    return 0
