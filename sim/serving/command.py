"""``pimphony serve``: serve requests over time on any system of the registry (PIM, xPU+PIM,
GPU, LibraPIM's; ``docs/serving.md``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from pimphony.models.fileio import BUILD_DIR
from pimphony.sim.cli import add_seed_option, bounded_int
from pimphony.sim.provenance import inputs_digest, provenance
from pimphony.sim.serving.engine import ServeConfig, ServeError, serve
from pimphony.sim.serving.report import format_summary, metrics, plot_result
from pimphony.sim.serving.trace import Request, read_trace, workload_requests
from pimphony.sim.systems.command import (
    add_system_arguments,
    output_paths,
    publish,
    row_options,
)
from pimphony.sim.systems.registry import Command, SystemKind, system_config
from pimphony.sim.workloads import available_workloads

__all__ = ["DEFAULT_OUTPUT_TOKENS", "DEFAULT_REQUESTS", "SERVE_DIR", "add_arguments", "run"]

SERVE_DIR = BUILD_DIR / "serve"
#: Requests drawn from a workload when --requests is not given (a choice).
DEFAULT_REQUESTS = 100
#: Output tokens per request drawn from a workload (a choice: the papers give none).
DEFAULT_OUTPUT_TOKENS = 256


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``serve`` subcommand's options."""
    add_system_arguments(p, "docs/serving.md")
    p.add_argument(
        "--workload",
        default="qmsum",
        help=f"a workload ({', '.join(available_workloads())}) whose context distribution "
        "gives the prompts, or a trace file (.jsonl/.csv: arrival_s, input_tokens, "
        "output_tokens)",
    )
    p.add_argument("--rate", type=float, help="Poisson arrivals, requests/s (default: all at 0)")
    p.add_argument(
        "--requests",
        type=bounded_int(1, 10**7),
        help=f"requests to draw from a workload (default {DEFAULT_REQUESTS}); with a trace, "
        "its first N",
    )
    p.add_argument(
        "--output-tokens",
        type=bounded_int(1, 10**7),
        help=f"tokens each workload request generates (default {DEFAULT_OUTPUT_TOKENS})",
    )
    add_seed_option(p, "seed of the prompts and arrivals")
    p.add_argument("--max-batch", type=bounded_int(1, 10**6), help="cap on the running batch")
    p.add_argument("--no-prefill", action="store_true", help="skip prefill (decode-only studies)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--out", type=Path, help=f"JSON report (default {SERVE_DIR}/...)")
    p.add_argument("--plot", type=Path, help=f"figure (default {SERVE_DIR}/...)")
    p.add_argument("--force", action="store_true", help="replace existing --out/--plot files")


def _is_trace(workload: str) -> bool:
    return Path(workload).suffix.lower() in (".jsonl", ".csv", ".json") or (
        "/" in workload and Path(workload).exists()
    )


def requests_from_args(args: argparse.Namespace) -> list[Request]:
    """The run's requests: a trace, or a workload's prompts with Poisson arrivals."""
    if _is_trace(args.workload):
        for flag, value in (("--rate", args.rate), ("--output-tokens", args.output_tokens)):
            if value is not None:
                raise ServeError(
                    f"{flag}: a trace ({args.workload}) gives arrivals and output tokens itself"
                )
        reqs = read_trace(args.workload)
        return reqs[: args.requests] if args.requests else reqs
    return workload_requests(
        args.workload,
        args.requests or DEFAULT_REQUESTS,
        args.output_tokens or DEFAULT_OUTPUT_TOKENS,
        args.rate,
        args.seed,
    )


def resolve_options(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with the ``--system`` row's defaults for the options left unset; another
    row's options (given a value other than their default) are refused, from the registry's
    table."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return row_options(args, SystemKind(args.system), Command.SERVE, parser, ServeError)


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    """The :class:`ServeConfig` the options (resolved by :func:`resolve_options`) describe."""
    kind = SystemKind(args.system)
    return ServeConfig.of(
        kind.value,
        system_config(args, kind, Command.SERVE),
        prefill=not args.no_prefill,
        max_batch=args.max_batch,
    )


def run(args: argparse.Namespace) -> int:
    """Simulate, write the JSON report and the figure, print a summary."""
    args = resolve_options(args)
    cfg = config_from_args(args)
    reqs = requests_from_args(args)
    inputs = {
        "requests": [[r.arrival_s, r.input_tokens, r.output_tokens] for r in reqs],
        "options": {k: str(v) for k, v in sorted(vars(args).items()) if not k.startswith("_")},
    }
    digest = inputs_digest(inputs)
    stem = (
        f"{cfg.model.name}-{cfg.system.replace('+', '-')}-{cfg.memory}-{len(reqs)}req-{digest[:10]}"
    )
    paths = output_paths(
        args.out, args.plot, SERVE_DIR / stem, args.force, ("--out", "--plot"), ServeError
    )
    say = None if args.json else (lambda m: print(f"  {m}", flush=True))
    res = serve(cfg, reqs, progress=say)
    report = {
        "system": cfg.system,
        "model": cfg.model.name,
        "preset": cfg.hw.name if cfg.hw else None,
        "xpu": cfg.xpu.name if cfg.xpu else None,
        "gpu": cfg.gpu.name if cfg.gpu else None,
        "memory": cfg.memory,
        "prefill": cfg.prefill,
        **metrics(res),
        "requests": {
            "columns": [
                "arrival_s",
                "input_tokens",
                "output_tokens",
                "admitted_s",
                "first_token_s",
                "finished_s",
                "preemptions",
            ],
            "rows": [
                [r.arrival_s, r.input_tokens, r.output_tokens, a, f, d, p]
                for r, a, f, d, p in zip(
                    res.requests,
                    res.admitted_s,
                    res.first_token_s,
                    res.finished_s,
                    res.preemptions,
                    strict=True,
                )
            ],
        },
        "simulation": {
            "wall_seconds": res.wall_seconds,
            "distinct_steps": res.distinct_steps,
            "preemption_policy": "preempt the most recently admitted request, recompute",
        },
        "provenance": provenance(
            args,
            cfg.hw,
            model=cfg.model.name,
            workload=args.workload,
            seed=args.seed,
            inputs_sha256=digest,
        ),
    }
    publish(
        report,
        paths,
        lambda path: plot_result(res, report, path),
        lambda: format_summary(report),
        args.json,
    )
    return 0
