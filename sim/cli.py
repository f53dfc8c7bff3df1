"""The ``pimphony`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from compiler.dpa import DpaEncodeError
from compiler.kernels import GQA_MAPPINGS, KERNELS, CompileError, KernelProgram, compile_kernel
from compiler.llm import ModelSpecError
from compiler.plan import DecodeMappingError
from models.channel import SCHEDULERS, run_channel
from models.config import ConfigError, HardwareConfig, available_presets, load_preset
from models.dpa.format import DpaError
from models.fileio import write_atomic
from models.isa import CommandFormatError, StreamError, load_stream, save_stream
from models.pingpong import PingPongError
from sim.decode_step import command as decode_cli
from sim.decode_step.setup import DecodeError
from sim.eda.vcd import WaveformError, format_summary, summarize_vcd
from sim.experiments import ablation as ablation_cli
from sim.experiments import capacity, size_report
from sim.experiments import dex as dex_cli
from sim.experiments.sweep import DEFAULT_DIMS, plot_sweep, sweep, sweep_table
from sim.report import (
    describe_kernel,
    kernel_summary,
    plot_breakdowns,
    scheduler_table,
    user_output,
)
from sim.workloads import WorkloadError

__all__ = ["DEMO_KERNELS", "main"]

DEMO_KERNELS: tuple[tuple[str, dict], ...] = (
    ("qk", {"tokens": 4096, "d_h": 128}),
    ("sv", {"tokens": 4096, "d_h": 128}),
    ("gemv", {"d_out": 4096, "d_in": 4096}),
)
DEMO_PLOT = Path("build/demo/breakdown.png")

_USER_ERRORS = (
    CompileError,
    ConfigError,
    StreamError,
    CommandFormatError,
    PingPongError,
    FileExistsError,
    WaveformError,
    DecodeError,
    DecodeMappingError,
    DpaEncodeError,
    DpaError,
    ModelSpecError,
    WorkloadError,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 with usage; keep that
        self.print_usage(sys.stderr)
        self.exit(2, f"pimphony: error: {message}\n")


def _kernel_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", choices=KERNELS, help="kernel to lower onto one channel")
    p.add_argument("--dout", type=int, help="GEMV output dimension d_out")
    p.add_argument("--din", type=int, help="GEMV input dimension d_in")
    p.add_argument("--tokens", type=int, help="attention context length T")
    p.add_argument("--dh", type=int, help="attention head dimension d_h")
    p.add_argument("--gqa-group", type=int, default=None, help="query heads sharing K/V (GQA)")
    p.add_argument("--mapping", choices=GQA_MAPPINGS, default=None, help="GQA mapping")
    p.add_argument("--preset", default="aim-16ch", help="hardware preset name or .toml path")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pimphony", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = sub.add_parser("demo", help="QK^T, SV and FC GEMV under every scheduler")
    demo.add_argument("--preset", default="aim-16ch")
    demo.add_argument("--json", action="store_true", help="print one JSON object")
    demo.add_argument(
        "--plot",
        type=Path,
        default=None,
        help=f"breakdown plot (PNG; default {DEMO_PLOT}, regenerated each run)",
    )
    demo.add_argument("--force", action="store_true", help="replace an existing --plot file")

    run = sub.add_parser("run", help="one kernel under one scheduler")
    _kernel_args(run)
    run.add_argument("--stream", type=Path, help="run a saved command stream instead")
    run.add_argument("--sched", choices=SCHEDULERS, default="dcs")
    run.add_argument("--json", action="store_true", help="print one JSON object")

    comp = sub.add_parser("compile", help="write a kernel's command stream to a file")
    _kernel_args(comp)
    comp.add_argument(
        "--format",
        choices=("static", "dpa"),
        default="static",
        help="static: unrolled stream (.npz); dpa: DPA program words (.bin, qk/sv only)",
    )
    comp.add_argument(
        "--max-tokens", type=int, default=131072, help="largest T_cur a DPA program serves"
    )
    comp.add_argument("-o", "--output", type=Path, required=True, help="output file")
    comp.add_argument("--force", action="store_true", help="overwrite an existing file")

    size = sub.add_parser(
        "size-report", help="static vs DPA instruction size over context (PIMphony Fig. 10c)"
    )
    size_report.add_arguments(size)

    cap = sub.add_parser(
        "capacity", help="KV capacity utilisation, static vs lazy allocation (PIMphony Fig. 19)"
    )
    capacity.add_arguments(cap)

    dec = sub.add_parser("decode", help="one LLM decode step on a multi-module PIM system")
    decode_cli.add_arguments(dec)

    abl = sub.add_parser(
        "ablation", help="throughput HFP -> +TCP -> +DCS -> +DPA (PIMphony Fig. 13 shape)"
    )
    ablation_cli.add_arguments(abl)

    dex = sub.add_parser(
        "dex", help="LibraPIM bank slicing: MAC utilisation and host-read bandwidth, with/without"
    )
    dex_cli.add_arguments(dex)

    sweep = sub.add_parser("sweep", help="MAC utilisation vs kernel size (PIMphony Fig. 8)")
    sweep.add_argument(
        "--kernel",
        choices=("gemv", "qk"),
        default="gemv",
        help="gemv: square d x d weights; qk: head dimension d_h at --tokens",
    )
    sweep.add_argument(
        "--dims", default=",".join(str(d) for d in DEFAULT_DIMS), help="comma-separated dimensions"
    )
    sweep.add_argument("--tokens", type=int, default=4096, help="tokens for --kernel qk")
    sweep.add_argument("--preset", default="aim-16ch")
    sweep.add_argument("--json", action="store_true", help="print one JSON object")
    sweep.add_argument(
        "--plot", type=Path, default=None, help="plot file (default build/sweep/<kernel>.png)"
    )
    sweep.add_argument("--force", action="store_true", help="replace an existing --plot file")

    sub.add_parser("presets", help="list the hardware presets")

    from sim.eda import area as area_cli
    from sim.eda import verilog as verilog_cli
    from sim.eda import waves as waves_cli

    rtl = sub.add_parser("rtl", help="write the Verilog of every RTL block (build/rtl/)")
    verilog_cli.add_arguments(rtl)

    area = sub.add_parser("area", help="Yosys synthesis of every RTL block: cells, flip-flops")
    area_cli.add_arguments(area)

    wave = sub.add_parser("wave", help="RTL waveforms (record them with `make wave`)")
    wave_sub = wave.add_subparsers(dest="wave_command", required=True, parser_class=_Parser)
    summary = wave_sub.add_parser("summary", help="cycles and MAC utilisation from a VCD")
    summary.add_argument("vcd", type=Path, metavar="FILE.vcd", help="scheduler waveform")
    summary.add_argument("--preset", default="aim-16ch", help="preset the RTL was built for")
    summary.add_argument("--json", action="store_true", help="print one JSON object")
    record = wave_sub.add_parser(
        "record", help="VCD + GTKWave save file of a kernel on an RTL block (build/waves/)"
    )
    waves_cli.add_arguments(record)
    return parser


def _shape_from_args(args: argparse.Namespace) -> tuple[str, dict]:
    if args.kernel is None:
        raise CompileError("--kernel is required (one of: " + ", ".join(KERNELS) + ")")
    given = {
        k
        for k in ("dout", "din", "tokens", "dh", "gqa_group", "mapping")
        if getattr(args, k) is not None
    }
    if args.kernel == "gemv":
        needed, allowed = {"dout", "din"}, {"dout", "din"}
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
        return "gemv", {"d_out": args.dout, "d_in": args.din}
    group = 1 if args.gqa_group is None else args.gqa_group
    shape = {"tokens": args.tokens, "d_h": args.dh, "gqa_group": group}
    if args.mapping:
        shape["mapping"] = args.mapping
    return args.kernel, shape


def _compile(args: argparse.Namespace, cfg: HardwareConfig) -> KernelProgram:
    kind, shape = _shape_from_args(args)
    return compile_kernel(cfg, kind, **shape)


def _cmd_demo(args: argparse.Namespace) -> int:
    cfg = load_preset(args.preset)
    runs, report = [], []
    for kind, shape in DEMO_KERNELS:
        prog = compile_kernel(cfg, kind, **shape)
        results = [run_channel(prog.commands, cfg, s) for s in SCHEDULERS]
        runs.append((prog, results))
    if args.json:
        for prog, results in runs:
            base = results[0].cycles
            report.append([kernel_summary(prog, r, base) for r in results])
        print(json.dumps({"preset": cfg.name, "kernels": report}, indent=2))
    else:
        print(
            f"pimphony demo: one channel of {cfg.name} "
            f"({cfg.channel.banks} banks, GBuf {cfg.channel.gbuf_entries} / "
            f"OBuf {cfg.channel.obuf_entries} entries, 1 GHz cycles)\n"
        )
        for prog, results in runs:
            print(describe_kernel(prog))
            print(scheduler_table(results))
            print()
    labels = [describe_kernel(p).split(":")[0] for p, _ in runs]
    path = plot_breakdowns(
        list(zip(labels, [r for _, r in runs], strict=True)),
        user_output(args.plot, DEMO_PLOT, args.force),
        f"Cycle breakdown per scheduler ({cfg.name}, one channel)",
    )
    if not args.json:
        print(f"breakdown plot: {path}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    cfg = load_preset(args.preset)
    if args.stream is not None:
        if args.kernel is not None:
            raise CompileError("give either --stream or --kernel, not both")
        stream, head = load_stream(args.stream, cfg)
        title = f"{args.stream}: {stream.shape[0]} commands"
        summary = {"stream": str(args.stream), "meta": head.get("meta", {}), "preset": cfg.name}
    else:
        prog = _compile(args, cfg)
        stream, title = prog.commands, describe_kernel(prog)
        summary = {"kernel": prog.kind, "shape": dict(prog.shape), "preset": cfg.name}
    result = run_channel(stream, cfg, args.sched)
    static = result if args.sched == "static" else run_channel(stream, cfg, "static")
    if args.json:
        summary.update(result.to_dict())
        summary["speedup_vs_static"] = static.cycles / max(result.cycles, 1)
        print(json.dumps(summary, indent=2))
    else:
        print(title)
        print(scheduler_table([static, result] if result is not static else [result]))
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    cfg = load_preset(args.preset)
    try:
        dims = [int(d) for d in args.dims.split(",") if d.strip()]
    except ValueError:
        raise CompileError(f"--dims {args.dims!r}: expected comma-separated integers") from None
    if not dims:
        raise CompileError("--dims is empty")
    rows = sweep(cfg, args.kernel, dims, tokens=args.tokens)
    plot = user_output(args.plot, Path(f"build/sweep/{args.kernel}.png"), args.force)
    what = "square GEMV d x d" if args.kernel == "gemv" else f"QK^T, T={args.tokens}, d = d_h"
    plot_sweep(rows, plot, f"MAC utilisation vs dimension: {what} ({cfg.name}, one channel)")
    if args.json:
        print(json.dumps({"kernel": args.kernel, "preset": cfg.name, "rows": rows}, indent=2))
    else:
        print(f"MAC utilisation, {what}, one channel of {cfg.name}")
        print(sweep_table(rows))
        print(f"plot: {plot}")
    return 0


def _cmd_compile(args: argparse.Namespace) -> int:
    cfg = load_preset(args.preset)
    if args.format == "dpa":
        return _compile_dpa(args, cfg)
    prog = _compile(args, cfg)
    meta = {"kernel": prog.kind, "shape": prog.shape}
    path = save_stream(args.output, prog.commands, cfg, meta=meta, overwrite=args.force)
    print(f"wrote {path}: {describe_kernel(prog)}")
    return 0


def _compile_dpa(args: argparse.Namespace, cfg: HardwareConfig) -> int:
    from compiler.dpa import encode_kernel

    kind, shape = _shape_from_args(args)
    if kind not in ("qk", "sv"):
        raise CompileError(f"--format dpa encodes qk and sv kernels, not {kind!r}")
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


def _cmd_wave(args: argparse.Namespace) -> int:
    cfg = load_preset(args.preset)
    summary = summarize_vcd(args.vcd, cfg)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{args.vcd}: issue stream of the RTL (preset {cfg.name})")
        print(format_summary(summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pimphony`` command."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            return _cmd_demo(args)
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "compile":
            return _cmd_compile(args)
        if args.command == "sweep":
            return _cmd_sweep(args)
        if args.command == "wave" and args.wave_command == "record":
            from sim.eda import waves as waves_cli

            return waves_cli.run(args)
        if args.command == "wave":
            return _cmd_wave(args)
        if args.command == "rtl":
            from sim.eda import verilog as verilog_cli

            return verilog_cli.run(args)
        if args.command == "area":
            from sim.eda import area as area_cli

            return area_cli.run(args)
        if args.command == "decode":
            return decode_cli.run(args)
        if args.command == "ablation":
            return ablation_cli.run(args)
        if args.command == "dex":
            return dex_cli.run(args)
        if args.command == "size-report":
            return size_report.run(args)
        if args.command == "capacity":
            return capacity.run(args)
        if args.command == "presets":
            for name in available_presets():
                cfg = load_preset(name)
                print(
                    f"{name}: {cfg.module.channels} channels x {cfg.channel.banks} banks, "
                    f"GBuf {cfg.channel.gbuf_entries}, OBuf {cfg.channel.obuf_entries}"
                )
            return 0
    except _USER_ERRORS as exc:
        print(f"pimphony: error: {exc}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
