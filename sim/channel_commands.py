"""The one-channel commands: ``pimphony demo``, ``run`` and ``compile``."""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from pimphony.compiler.kernels import (
    GQA_MAPPINGS,
    KERNELS,
    CompileError,
    KernelProgram,
    compile_kernel,
)
from pimphony.models.channel import SCHEDULERS, ChannelRun, run_channel
from pimphony.models.config import DEFAULT_PRESET, HardwareConfig, load_preset
from pimphony.models.energy import DEFAULT_ENERGY, load_energy, run_energy
from pimphony.models.fileio import BUILD_DIR, write_atomic
from pimphony.models.functional import DataflowCheck
from pimphony.models.isa import StreamError, StreamReader, save_stream
from pimphony.models.jit import interpreted
from pimphony.sim.cli import bounded_int, choice_names
from pimphony.sim.provenance import provenance
from pimphony.sim.report import (
    describe_kernel,
    energy_table,
    kernel_summary,
    plot_breakdowns,
    scheduler_table,
    user_plot,
)

__all__ = [
    "DEMO_KERNELS",
    "DEMO_PLOT",
    "add_compile_arguments",
    "add_demo_arguments",
    "add_run_arguments",
    "run_compile",
    "run_demo",
    "run_run",
]

DEMO_KERNELS: tuple[tuple[str, dict], ...] = (
    ("qk", {"tokens": 4096, "d_h": 128}),
    ("sv", {"tokens": 4096, "d_h": 128}),
    ("gemv", {"d_out": 4096, "d_in": 4096}),
)
DEMO_PLOT = BUILD_DIR / "demo" / "breakdown.png"


def _kernel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kernel", choices=choice_names(KERNELS), help="kernel to lower onto one channel"
    )
    p.add_argument("--dout", type=int, help="GEMV output dimension d_out")
    p.add_argument("--din", type=int, help="GEMV input dimension d_in")
    p.add_argument(
        "--batch", type=int, help="GEMV requests sharing the weights (row reuse; default 1)"
    )
    p.add_argument("--tokens", type=int, help="attention context length T")
    p.add_argument("--dh", type=int, help="attention head dimension d_h")
    p.add_argument("--gqa-group", type=int, default=None, help="query heads sharing K/V (GQA)")
    p.add_argument("--mapping", choices=GQA_MAPPINGS, default=None, help="GQA mapping")
    p.add_argument("--preset", default=DEFAULT_PRESET, help="hardware preset name or .toml path")


def add_demo_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony demo``."""
    p.add_argument("--preset", default=DEFAULT_PRESET)
    _energy_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--plot",
        type=Path,
        default=None,
        help=f"breakdown plot (PNG; default {DEMO_PLOT}, regenerated each run)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --plot file")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony run``."""
    _kernel_args(p)
    p.add_argument("--stream", type=Path, help="run a saved command stream instead")
    p.add_argument(
        "--no-check",
        action="store_true",
        help="run a --stream even if its data flow means nothing (a MAC on a GBuf entry never "
        "written, a RD_OUT of an entry never accumulated, results never read, no commands)",
    )
    p.add_argument("--sched", choices=choice_names(SCHEDULERS), default="dcs")
    _energy_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _energy_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--energy",
        default=DEFAULT_ENERGY,
        help=f"energy preset name or .toml path (default {DEFAULT_ENERGY}; docs/energy.md)",
    )


def add_compile_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony compile``."""
    _kernel_args(p)
    p.add_argument(
        "--format",
        choices=("static", "dpa"),
        default="static",
        help="static: unrolled stream (.npz); dpa: DPA program words (.bin, qk/sv only)",
    )
    p.add_argument(
        "--max-tokens",
        type=bounded_int(1, (1 << 24) - 1),  # the DPA header's 24-bit field
        default=131072,
        help="largest T_cur a DPA program serves",
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="output file")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")


def _shape_from_args(args: argparse.Namespace) -> tuple[str, dict]:
    if args.kernel is None:
        raise CompileError("--kernel is required (one of: " + ", ".join(KERNELS) + ")")
    given = {
        k
        for k in ("dout", "din", "batch", "tokens", "dh", "gqa_group", "mapping")
        if getattr(args, k) is not None
    }
    if args.kernel == "gemv":
        needed, allowed = {"dout", "din"}, {"dout", "din", "batch"}
    else:
        needed, allowed = {"tokens", "dh"}, {"tokens", "dh", "gqa_group", "mapping"}
    flag = {k: "--" + k.replace("_", "-") for k in given | needed}
    missing = needed - given
    if missing:
        raise CompileError(
            f"--kernel {args.kernel} needs " + " and ".join(sorted(flag[k] for k in missing))
        )
    extra = given - allowed
    if extra:
        raise CompileError(
            f"--kernel {args.kernel} does not take " + ", ".join(sorted(flag[k] for k in extra))
        )
    if args.kernel == "gemv":
        batch = {} if args.batch is None else {"batch": args.batch}
        return "gemv", {"d_out": args.dout, "d_in": args.din, **batch}
    group = 1 if args.gqa_group is None else args.gqa_group
    shape = {"tokens": args.tokens, "d_h": args.dh, "gqa_group": group}
    if args.mapping:
        shape["mapping"] = args.mapping
    return args.kernel, shape


def _compile(args: argparse.Namespace, cfg: HardwareConfig) -> KernelProgram:
    kind, shape = _shape_from_args(args)
    return compile_kernel(cfg, kind, **shape)


def run_demo(args: argparse.Namespace) -> int:
    """``pimphony demo``: QK^T, SV and FC GEMV under every scheduler, cycles and energy."""
    cfg = load_preset(args.preset)
    energy_params = load_energy(args.energy)
    energy_params.chips(cfg)  # refuses an energy preset that does not fit the hardware
    plot = user_plot(args.plot, DEMO_PLOT, args.force)
    runs, report = [], []
    for kind, shape in DEMO_KERNELS:
        prog = compile_kernel(cfg, kind, **shape)
        results = [run_channel(prog.commands, cfg, s) for s in SCHEDULERS]
        energies = [run_energy(r.to_dict(), cfg, energy_params) for r in results]
        runs.append((prog, results, energies))
    if args.json:
        for prog, results, energies in runs:
            base = results[0].cycles
            report.append(
                [
                    {**kernel_summary(prog, r, base), "energy": e.to_dict("pJ")}
                    for r, e in zip(results, energies, strict=True)
                ]
            )
        out = {"preset": cfg.name, "kernels": report, "provenance": provenance(args, cfg)}
        print(json.dumps(out, indent=2))
    else:
        print(
            f"pimphony demo: one channel of {cfg.name} "
            f"({cfg.channel.banks} banks, GBuf {cfg.channel.gbuf_entries} / "
            f"OBuf {cfg.channel.obuf_entries} entries, cycles at {cfg.module.freq_ghz:g} GHz)\n"
        )
        for prog, results, energies in runs:
            print(describe_kernel(prog))
            print(scheduler_table(results))
            print(energy_table(results, energies, energy_params.name))
            print()
    labels = [describe_kernel(p).split(":")[0] for p, _, _ in runs]
    path = plot_breakdowns(
        list(zip(labels, [r for _, r, _ in runs], strict=True)),
        plot,
        f"Cycle breakdown per scheduler ({cfg.name}, one channel)",
    )
    if not args.json:
        print(f"breakdown plot: {path}")
    return 0


#: Streams up to this many commands (a kernel or a stream file) are run by ``pimphony run``
#: as plain Python (:func:`models.jit.interpreted`) when numba is not loaded yet: loading it
#: and its cached kernels takes 0.4-0.5 s of CPU, while plain Python runs 30-50k commands/s under
#: DCS and ping-pong and 120-200k under static (QK^T, SV and GEMV streams, measured), so up to
#: 8,192 commands (0.2-0.3 s for the scheduler and the static baseline) is the faster way. The
#: cycles are the same: it is the kernels' own source (``tests/test_jit.py``).
INTERPRET_MAX_COMMANDS = 8192


def run_run(args: argparse.Namespace) -> int:
    """``pimphony run``: one kernel or saved stream under one scheduler."""
    cfg = load_preset(args.preset)
    energy_params = load_energy(args.energy)
    energy_params.chips(cfg)  # refuses an energy preset that does not fit the hardware
    if args.stream is not None:
        if args.kernel is not None:
            raise CompileError("give either --stream or --kernel, not both")
        static, result, head, sha = _run_stream_file(args, cfg)
        title = f"{args.stream}: {result.commands} commands"
        summary = {"stream": str(args.stream), "meta": head.get("meta", {}), "preset": cfg.name}
    else:
        prog = _compile(args, cfg)
        stream, title = prog.commands, describe_kernel(prog)
        summary = {"kernel": prog.kind, "shape": dict(prog.shape), "preset": cfg.name}
        sha = hashlib.sha256(stream.tobytes()).hexdigest()
        with interpreted(len(stream) <= INTERPRET_MAX_COMMANDS):
            result = run_channel(stream, cfg, args.sched, record=False)
            static = result
            if args.sched != "static":  # the stream was validated by the run above
                static = run_channel(stream, cfg, "static", validate=False, record=False)
    runs = [static, result] if result is not static else [result]
    energies = [run_energy(r.to_dict(), cfg, energy_params) for r in runs]
    if args.json:
        summary.update(result.to_dict())
        summary["speedup_vs_static"] = static.cycles / max(result.cycles, 1)
        summary["energy"] = {
            **energies[-1].to_dict("pJ"),
            "static_total": energies[0].total,
            "per_command": energy_params.per_command(cfg),
        }
        summary["provenance"] = provenance(args, cfg, stream_sha256=sha)
        print(json.dumps(summary, indent=2))
    else:
        print(title)
        print(scheduler_table(runs))
        print(energy_table(runs, energies, energy_params.name))
    return 0


def _run_stream_file(args: argparse.Namespace, cfg: HardwareConfig):
    """``(static, result, header, sha256)`` of a stream file, read once in chunks: the
    dataflow check, the hash and both channel runs carry their state across chunks, so memory
    does not grow with the stream."""
    reader = StreamReader(args.stream, cfg)
    digest = hashlib.sha256()
    with interpreted(reader.commands <= INTERPRET_MAX_COMMANDS):
        check = None
        if not args.no_check:
            ch = cfg.channel
            check = DataflowCheck(ch.gbuf_entries, ch.obuf_entries)
        schedulers = dict.fromkeys(("static", args.sched))
        runs = {s: ChannelRun(cfg, s, validate=False) for s in schedulers}
        for chunk in reader:
            digest.update(chunk.tobytes())
            if check is not None:
                check.feed(chunk)
            for run in runs.values():
                run.feed(chunk)
        if check is not None:
            try:
                check.finish()
            except StreamError as exc:
                raise StreamError(f"{args.stream}: {exc} (--no-check runs it anyway)") from None
        static = runs["static"].finish()
        result = static if args.sched == "static" else runs[args.sched].finish()
    return static, result, reader.header, digest.hexdigest()


def run_compile(args: argparse.Namespace) -> int:
    """``pimphony compile``: write a kernel's stream (or DPA program) to a file."""
    cfg = load_preset(args.preset)
    if args.format == "dpa":
        return _compile_dpa(args, cfg)
    prog = _compile(args, cfg)
    meta = {"kernel": prog.kind, "shape": prog.shape}
    path = save_stream(args.output, prog.commands, cfg, meta=meta, overwrite=args.force)
    print(f"wrote {path}: {describe_kernel(prog)}")
    return 0


def _compile_dpa(args: argparse.Namespace, cfg: HardwareConfig) -> int:
    from pimphony.compiler.dpa import encode_kernel

    kind, shape = _shape_from_args(args)
    if kind not in ("qk", "sv"):
        raise CompileError(f"--format dpa encodes qk and sv kernels, not {kind!r}")
    if shape["tokens"] > args.max_tokens:
        raise CompileError(
            f"--tokens {shape['tokens']} exceeds --max-tokens {args.max_tokens}, the largest "
            "T_cur the DPA program serves; raise --max-tokens"
        )
    if args.output.exists() and not args.force:
        raise FileExistsError(f"{args.output} exists; pass --force to replace it")
    prog = encode_kernel(
        cfg,
        kind,
        shape["d_h"],
        shape["gqa_group"],
        args.max_tokens,
        shape.get("mapping", "row-reuse"),
    )
    write_atomic(args.output, prog.to_bytes())
    static = compile_kernel(cfg, kind, **shape).commands.shape[0]
    print(
        f"wrote {args.output}: DPA program for {kind} d_h={shape['d_h']} "
        f"G={shape['gqa_group']}, any T_cur <= {args.max_tokens}: {prog.nbytes} B "
        f"({len(prog.instructions())} words); the static stream at T={shape['tokens']} has "
        f"{static} commands"
    )
    return 0
