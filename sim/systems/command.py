"""``pimphony decode``: one decode step of an LLM batch on a PIM system, reported and plotted.

The batch's context lengths come from ``--context`` (all equal), ``--contexts FILE`` (one per
request) or ``--workload NAME`` (drawn from a paper's context statistics); ``--batch auto``
admits requests first-come-first-served until the memory is full. See ``docs/decode.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import load_model
from pimphony.compiler.plan import PARTITIONS
from pimphony.models.channel import SCHEDULERS
from pimphony.models.config import load_preset
from pimphony.models.energy import DEFAULT_ENERGY, available_energy_presets, load_energy
from pimphony.models.fileio import BUILD_DIR, write_atomic
from pimphony.models.memory import MEMORY_POLICIES
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.cli import SEED, bounded_int, choice_names
from pimphony.sim.provenance import inputs_digest, provenance
from pimphony.sim.report import user_output, user_plot
from pimphony.sim.systems.admission import fill_batch
from pimphony.sim.systems.gpu import (
    GpuSetup,
    format_gpu_report,
    gpu_fill_batch,
    gpu_report_stem,
    gpu_setup_digest,
    plot_gpu_report,
    run_gpu_decode,
)
from pimphony.sim.systems.hetero import (
    SUB_BATCHES_AUTO,
    HeteroSetup,
    format_hetero_report,
    hetero_report_stem,
    hetero_setup_digest,
    plot_hetero_report,
    run_hetero_decode,
)
from pimphony.sim.systems.report import format_report, plot_report, report_stem, setup_digest
from pimphony.sim.systems.setup import MICRO_BATCHES_AUTO, DecodeError, DecodeSetup, Mapping
from pimphony.sim.systems.step import run_decode
from pimphony.sim.workloads import load_workload, read_context_lengths, sample_context_lengths

__all__ = [
    "DECODE_DIR",
    "DECODE_GPU",
    "DECODE_PRESET",
    "DECODE_XPU",
    "SYSTEMS",
    "System",
    "add_arguments",
    "micro_batches_arg",
    "run",
    "gpu_setup_from_args",
    "hetero_setup_from_args",
    "setup_from_args",
    "sub_batches_arg",
]

DECODE_DIR = BUILD_DIR / "decode"
#: PIMphony Table IV's 32 GB module (32 channels), so that multi-request 32K batches fit.
DECODE_PRESET = "aim-32ch-32g"
_AUTO_POOL = 4096  # candidate requests drawn for --batch auto
#: The largest --batch: larger ones exceed any modelled PIM system's memory at useful context
#: lengths (so they only run with --ignore-capacity) and take minutes to simulate (1,024
#: requests of 1K tokens: about 30 s). --batch auto admits what the memory holds from a pool
#: of 4,096 candidates.
MAX_BATCH = 1024
#: The GPU of ``--system gpu`` unless ``--gpu`` names another (PIMphony Fig. 20's A100).
DECODE_GPU = "a100-80gb"
#: The xPU of ``--system xpu+pim`` unless ``--xpu`` names another (PIMphony's NeuPIMs NPU).
DECODE_XPU = "neupims-npu"


class System(StrEnum):
    """What runs the decode step (``--system``)."""

    PIM = "pim"
    GPU = "gpu"
    XPU_PIM = "xpu+pim"


def micro_batches_arg(value: str) -> int | str:
    if value == MICRO_BATCHES_AUTO:
        return value
    try:
        return bounded_int(1, MAX_BATCH)(value)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or 'auto')") from None


def sub_batches_arg(value: str) -> int | str:
    """``--sub-batches``: an integer (its range against the batch is checked by
    :class:`~sim.systems.hetero.HeteroSetup`) or ``auto``."""
    if value == SUB_BATCHES_AUTO:
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--sub-batches {value!r}: must be a positive integer (1: serial) up to the batch, "
            f"or '{SUB_BATCHES_AUTO}'"
        ) from None


def _batch(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--batch {value!r}: give a positive int or 'auto'"
        ) from None
    if not 1 <= n <= MAX_BATCH:
        raise argparse.ArgumentTypeError(
            f"--batch {n}: must be from 1 to {MAX_BATCH} requests (or 'auto')"
        )
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``decode`` subcommand's options."""
    p.add_argument(
        "--system",
        choices=[s.value for s in System],
        default=System.PIM.value,
        help="pim: PIM modules only (default); gpu: N GPUs, tensor parallel; xpu+pim: FC "
        "layers on an xPU, attention on PIM modules (docs/decode.md)",
    )
    p.add_argument("--model", default="llm-7b", help="model preset, .toml or HF config.json")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--context", type=int, help="context length of every request")
    src.add_argument("--contexts", type=Path, help="file of per-request context lengths")
    src.add_argument("--workload", help="draw lengths from a workload (e.g. qmsum)")
    p.add_argument("--seed", type=SEED, default=0, help="seed for --workload sampling")
    p.add_argument("--batch", type=_batch, default=None, help="requests, or 'auto' (fill memory)")
    p.add_argument("--modules", type=int, help="modules (must equal tp * pp; default tp * pp)")
    p.add_argument(
        "--tp", type=bounded_int(1, 1024), default=1, help="tensor-parallel modules per stage"
    )
    p.add_argument("--pp", type=bounded_int(1, 1024), default=1, help="pipeline stages")
    p.add_argument(
        "--micro-batches",
        type=micro_batches_arg,
        default=None,
        help="pipeline micro-batches, or 'auto' (try pp, 2pp, 4pp; keep the fastest);"
        " default min(pp, batch)",
    )
    p.add_argument(
        "--partition",
        choices=choice_names(PARTITIONS),
        default="auto",
        help="attention partitioning; auto (PIMphony): per layer the faster of tcp and hfp",
    )
    p.add_argument("--sched", choices=choice_names(SCHEDULERS), default="dcs")
    p.add_argument(
        "--memory", choices=choice_names(MEMORY_POLICIES), default="lazy", help="lazy = DPA"
    )
    p.add_argument("--max-context", type=int, help="static reservation (default: model window)")
    p.add_argument(
        "--preset",
        default=DECODE_PRESET,
        help=f"hardware preset name or .toml (default {DECODE_PRESET}: 32 GiB modules)",
    )
    p.add_argument(
        "--mapping",
        choices=choice_names(Mapping),
        default=Mapping.FIXED.value,
        help="weight GEMVs: fixed (compiler.plan, default) or tuned (per op, DCC's best "
        "mapping when the step times it faster; docs/dcc.md)",
    )
    p.add_argument(
        "--ignore-capacity",
        action="store_true",
        help="time a batch even if it does not fit the memory (capacity check off)",
    )
    p.add_argument(
        "--gpu", default=DECODE_GPU, help=f"--system gpu: GPU preset (default {DECODE_GPU})"
    )
    p.add_argument(
        "--gpus", type=bounded_int(1, 1024), default=1, help="--system gpu: tensor-parallel GPUs"
    )
    p.add_argument(
        "--gpu-memory-fraction",
        type=float,
        default=1.0,
        help="--system gpu: share of each GPU's DRAM weights + KV may use (vLLM's "
        "gpu_memory_utilization; default 1.0)",
    )
    p.add_argument(
        "--xpu", default=DECODE_XPU, help=f"--system xpu+pim: xPU preset (default {DECODE_XPU})"
    )
    p.add_argument(
        "--sub-batches",
        type=sub_batches_arg,
        default=1,
        help="--system xpu+pim: sub-batches the xPU and PIM pipeline over (default 1: serial), "
        "or 'auto' (time K = 1..8 and powers of two up to the batch; keep the fastest)",
    )
    p.add_argument(
        "--energy",
        default=DEFAULT_ENERGY,
        help=f"--system pim / xpu+pim: energy preset of the PIM modules "
        f"({', '.join(available_energy_presets())}) or a .toml path (default {DEFAULT_ENERGY}; "
        "docs/energy.md)",
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
            if args.batch < len(lengths):
                print(
                    f"pimphony decode: note: --batch {args.batch} takes the first "
                    f"{args.batch} of the {len(lengths)} context lengths in {args.contexts}",
                    file=sys.stderr,
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
        mapping=getattr(args, "mapping", Mapping.FIXED.value),
    )


def gpu_setup_from_args(args: argparse.Namespace) -> GpuSetup:
    """Validated :class:`GpuSetup` from parsed ``decode --system gpu`` options."""
    model = load_model(args.model)
    gpu = load_xpu(args.gpu)
    lengths, auto = _lengths(args, model.context_window)
    if auto:
        lengths = list(gpu_fill_batch(model, gpu, args.gpus, lengths, args.gpu_memory_fraction))
    return GpuSetup(
        model,
        gpu,
        args.gpus,
        tuple(lengths),
        memory_fraction=args.gpu_memory_fraction,
        check_capacity=not args.ignore_capacity,
    )


def _run_gpu(args: argparse.Namespace) -> int:
    """``pimphony decode --system gpu``: cost, report (text or JSON) and plot one GPU step."""
    args = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in _XPU_PIM_ONLY})
    setup = gpu_setup_from_args(args)
    stem = gpu_report_stem(setup)
    json_path = user_output(args.report, DECODE_DIR / f"{stem}.json", args.force)
    png_path = user_plot(args.plot, DECODE_DIR / f"{stem}.png", args.force)
    if json_path.resolve() == png_path.resolve():
        raise DecodeError(f"--report and --plot both name {json_path}; give two files")
    report = dataclasses.replace(
        run_gpu_decode(setup),
        provenance=provenance(
            args,
            None,
            gpu={
                "name": setup.gpu.name,
                "sha256": inputs_digest(dataclasses.asdict(setup.gpu)),
                "values": dataclasses.asdict(setup.gpu),
            },
            model=dataclasses.asdict(setup.model),
            workload=args.workload,
            seed=args.seed if args.workload else None,
            context_lengths=list(setup.lengths),
            inputs_sha256=gpu_setup_digest(setup),
        ),
    )
    text = json.dumps(report.to_dict(), indent=2, default=str)
    write_atomic(json_path, (text + "\n").encode())
    plot_gpu_report(report, png_path)
    if args.json:
        print(text)
    else:
        print(format_gpu_report(report))
        print(f"report: {json_path}\nplot:   {png_path}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony decode`` on the ``--system`` of :data:`SYSTEMS`; user errors propagate
    as :class:`DecodeError` and friends."""
    system = System(args.system)
    _refuse_other_systems_options(args, system)
    if args.mapping == Mapping.FIXED:  # the default: reports' options stay as before it existed
        args = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "mapping"})
    return SYSTEMS[system](args)


#: Options that only one system reads (``dest`` names); the others refuse them.
_SYSTEM_OPTIONS: dict[System, tuple[str, ...]] = {
    System.PIM: (
        "modules", "tp", "pp", "micro_batches", "partition", "sched", "memory", "max_context",
        "preset", "ignore_capacity", "energy", "mapping",
    ),
    System.GPU: ("gpu", "gpus", "gpu_memory_fraction"),
    System.XPU_PIM: (
        "modules", "tp", "partition", "sched", "memory", "max_context", "preset",
        "ignore_capacity", "xpu", "sub_batches", "energy",
    ),
}  # fmt: skip


def _refuse_other_systems_options(args: argparse.Namespace, system: System) -> None:
    """:class:`DecodeError` naming the options of another ``--system`` given a value other
    than their default (they would be ignored silently)."""
    defaults = argparse.ArgumentParser()
    add_arguments(defaults)
    others = dict.fromkeys(
        dest
        for other, dests in _SYSTEM_OPTIONS.items()
        if other is not system
        for dest in dests
        if dest not in _SYSTEM_OPTIONS[system]
    )
    foreign = [
        f"--{dest.replace('_', '-')}"
        for dest in others
        if getattr(args, dest, None) != defaults.get_default(dest)
    ]
    if foreign:
        owner: dict[str, str] = {}
        for o, dests in _SYSTEM_OPTIONS.items():
            for d in dests:
                owner.setdefault(d, o.value)
        named = ", ".join(f"{f} (--system {owner[f[2:].replace('-', '_')]})" for f in foreign)
        raise DecodeError(f"--system {system.value} does not use {named}; drop them")


#: Options only ``--system gpu`` reads; a PIM report's provenance leaves them out, so that it
#: stays what it was before the GPU baseline existed (tests/golden).
_GPU_ONLY = ("system", "gpu", "gpus", "gpu_memory_fraction", "xpu", "sub_batches")


def _energy_params(args: argparse.Namespace, hw) -> tuple[Any, argparse.Namespace]:
    """The ``--energy`` preset, checked against the PIM hardware (its chip or stack count
    must fit: :class:`~models.energy.EnergyConfigError` otherwise), and ``args`` for the
    provenance: ``energy`` left out at its default, so that default reports stay what they
    were before the option existed (tests/golden; the report's energy block names the
    preset)."""
    params = load_energy(args.energy)
    params.chips(hw)
    if args.energy == DEFAULT_ENERGY:
        args = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "energy"})
    return params, args


#: Options a GPU step does not read (only ``--system xpu+pim``, or the PIM systems' energy
#: preset); a GPU report's provenance leaves them out.
_XPU_PIM_ONLY = ("xpu", "sub_batches", "energy")


def _run_pim(args: argparse.Namespace) -> int:
    """``pimphony decode`` on PIM modules (the default system)."""
    args = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in _GPU_ONLY})
    setup = setup_from_args(args)
    params, args = _energy_params(args, setup.hw)
    stem = report_stem(setup)
    json_path = user_output(args.report, DECODE_DIR / f"{stem}.json", args.force)
    png_path = user_plot(args.plot, DECODE_DIR / f"{stem}.png", args.force)
    if json_path.resolve() == png_path.resolve():
        raise DecodeError(f"--report and --plot both name {json_path}; give two files")
    progress = None if args.json else (lambda msg: print(f"  {msg}", flush=True))
    report = dataclasses.replace(
        run_decode(setup, progress=progress, energy=params),
        provenance=provenance(
            args,
            setup.hw,
            model=dataclasses.asdict(setup.model),
            workload=args.workload,
            seed=args.seed if args.workload else None,
            context_lengths=list(setup.lengths),
            inputs_sha256=setup_digest(setup),
        ),
    )
    text = json.dumps(report.to_dict(), indent=2)
    write_atomic(json_path, (text + "\n").encode())
    plot_report(report, png_path)
    if args.json:
        print(text)
    else:
        print(format_report(report))
        print(f"report: {json_path}\nplot:   {png_path}")
    return 0


def hetero_setup_from_args(args: argparse.Namespace) -> HeteroSetup:
    """Validated :class:`HeteroSetup` from parsed ``decode --system xpu+pim`` options; the
    PIM modules hold only the KV cache (``--batch auto`` fills them with it)."""
    model = load_model(args.model)
    hw = load_preset(args.preset)
    xpu = load_xpu(args.xpu)
    if args.modules is not None and args.modules != args.tp:
        raise DecodeError(f"--modules {args.modules} must equal --tp = {args.tp}")
    lengths, auto = _lengths(args, model.context_window)
    if auto:
        lengths = list(
            fill_batch(model, hw, args.tp, args.memory, lengths, args.max_context, weights=False)
        )
    pim = DecodeSetup(
        model,
        hw,
        tuple(lengths),
        tp=args.tp,
        partition=args.partition,
        sched=args.sched,
        memory=args.memory,
        max_context=args.max_context,
        check_capacity=not args.ignore_capacity,
    )
    return HeteroSetup(pim, xpu, args.sub_batches)


def _run_xpu_pim(args: argparse.Namespace) -> int:
    """``pimphony decode --system xpu+pim``: time, report and plot one heterogeneous step."""
    args = argparse.Namespace(
        **{k: v for k, v in vars(args).items() if k not in ("gpu", "gpus", "gpu_memory_fraction")}
    )
    setup = hetero_setup_from_args(args)
    params, args = _energy_params(args, setup.pim.hw)
    stem = hetero_report_stem(setup)
    json_path = user_output(args.report, DECODE_DIR / f"{stem}.json", args.force)
    png_path = user_plot(args.plot, DECODE_DIR / f"{stem}.png", args.force)
    if json_path.resolve() == png_path.resolve():
        raise DecodeError(f"--report and --plot both name {json_path}; give two files")
    report = dataclasses.replace(
        run_hetero_decode(setup, params=params),
        provenance=provenance(
            args,
            setup.pim.hw,
            xpu={
                "name": setup.xpu.name,
                "sha256": inputs_digest(dataclasses.asdict(setup.xpu)),
                "values": dataclasses.asdict(setup.xpu),
            },
            model=dataclasses.asdict(setup.pim.model),
            workload=args.workload,
            seed=args.seed if args.workload else None,
            context_lengths=list(setup.pim.lengths),
            inputs_sha256=hetero_setup_digest(setup),
        ),
    )
    text = json.dumps(report.to_dict(), indent=2, default=str)
    write_atomic(json_path, (text + "\n").encode())
    plot_hetero_report(report, png_path)
    if args.json:
        print(text)
    else:
        print(format_hetero_report(report))
        print(f"report: {json_path}\nplot:   {png_path}")
    return 0


#: ``--system`` -> the function that runs the step.
SYSTEMS: dict[System, Callable[[argparse.Namespace], int]] = {
    System.PIM: _run_pim,
    System.GPU: _run_gpu,
    System.XPU_PIM: _run_xpu_pim,
}
