"""``pimphony decode``: one decode step of an LLM batch on a PIM system, reported and plotted.

The batch's context lengths come from ``--context`` (all equal), ``--contexts FILE`` (one per
request) or ``--workload NAME`` (drawn from a paper's context statistics); ``--batch auto``
admits requests first-come-first-served until the memory is full. See ``docs/decode.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pimphony.compiler.plan import PARTITIONS, SCORE_OVERFLOWS, ScoreOverflow
from pimphony.models.channel import SCHEDULERS
from pimphony.models.energy import DEFAULT_ENERGY, available_energy_presets
from pimphony.models.fileio import BUILD_DIR
from pimphony.models.memory import MEMORY_POLICIES
from pimphony.sim.cli import add_seed_option, bounded_int, choice_names
from pimphony.sim.provenance import provenance
from pimphony.sim.report import publish_json, user_output, user_plot
from pimphony.sim.systems import attacc_gpu
from pimphony.sim.systems.hetero import SUB_BATCHES_AUTO
from pimphony.sim.systems.librapim import add_offload_argument
from pimphony.sim.systems.registry import (
    SYSTEMS,
    Command,
    SystemKind,
    foreign_options,
    system_config,
)
from pimphony.sim.systems.setup import MICRO_BATCHES_AUTO, DecodeError, Mapping
from pimphony.sim.workloads import load_workload, read_context_lengths, sample_context_lengths

__all__ = [
    "DECODE_DIR",
    "DECODE_GPU",
    "DECODE_PRESET",
    "DECODE_XPU",
    "SHARED_DEFAULTS",
    "add_arguments",
    "add_micro_batches_option",
    "add_score_overflow_option",
    "score_overflow_of",
    "add_row_arguments",
    "add_system_arguments",
    "micro_batches_arg",
    "output_paths",
    "publish",
    "row_options",
    "run",
    "sub_batches_arg",
    "system_help",
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
#: Options whose default a row of the registry may change (``SystemRow.defaults``): the
#: commands leave them unset, and a row without its own default gets these.
SHARED_DEFAULTS: dict[str, Any] = {"preset": DECODE_PRESET, "xpu": DECODE_XPU, "tp": 1}


def micro_batches_arg(value: str) -> int | str:
    """``--micro-batches``: an integer from 1 to :data:`MAX_BATCH`, or ``auto``."""
    if value == MICRO_BATCHES_AUTO:
        return value
    try:
        return bounded_int(1, MAX_BATCH)(value)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or 'auto')") from None


def add_micro_batches_option(p: argparse.ArgumentParser, default: int | str | None = None) -> None:
    """``--micro-batches`` (:func:`micro_batches_arg`) of a PIM decode step, ``default`` when
    not given (``None``: ``min(pp, batch)``)."""
    p.add_argument(
        "--micro-batches",
        type=micro_batches_arg,
        default=default,
        help="pipeline micro-batches per decode step, or 'auto' (try pp, 2pp, 4pp; keep the "
        "fastest)" + ("; default min(pp, batch)" if default is None else ""),
    )


def add_score_overflow_option(p: argparse.ArgumentParser) -> None:
    """``--score-overflow``: what a (request, KV head) pair whose scores overflow the GPR does
    (``compiler.plan.SCORE_OVERFLOWS``, ``docs/decode.md``); unset unless given (read it with
    :func:`score_overflow_of`), so that reports at the default record it as before it
    existed."""
    p.add_argument(
        "--score-overflow",
        choices=choice_names(SCORE_OVERFLOWS),
        default=argparse.SUPPRESS,
        help="scores beyond the GPR: gpr-tiles (default; online softmax over GPR-sized tiles) "
        "or bank-spill (written to the bank array after QK^T, read back for SV)",
    )


def score_overflow_of(args: argparse.Namespace) -> str:
    """``--score-overflow`` as given, else the default (``gpr-tiles``)."""
    return getattr(args, "score_overflow", ScoreOverflow.GPR_TILES.value)


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


def system_help() -> str:
    """``--system``'s help: each row of :data:`~sim.systems.registry.SYSTEMS` and its summary."""
    return "; ".join(f"{kind}: {row.summary}" for kind, row in SYSTEMS.items())


def add_system_arguments(p: argparse.ArgumentParser, docs: str) -> None:
    """The options ``pimphony decode`` and ``pimphony serve`` share: the ``--system`` of
    :data:`~sim.systems.registry.SYSTEMS` (its help pointing at ``docs``), the model and
    every row's hardware and split options."""
    p.add_argument(
        "--system",
        choices=choice_names(SYSTEMS),
        default=SystemKind.PIM.value,
        help=f"{system_help()} ({docs})",
    )
    p.add_argument("--model", default="llm-7b", help="model preset, .toml or HF config.json")
    p.add_argument(
        "--tp",
        type=bounded_int(1, 1024),
        default=argparse.SUPPRESS,
        help="tensor-parallel modules per stage (default: 1); LibraPIM rows: devices (8)",
    )
    p.add_argument("--pp", type=bounded_int(1, 1024), default=1, help="pipeline stages")
    add_micro_batches_option(p)
    p.add_argument(
        "--partition",
        choices=choice_names(PARTITIONS),
        default="auto",
        help="attention partitioning; auto (PIMphony): per layer the faster of tcp and hfp",
    )
    add_score_overflow_option(p)
    p.add_argument("--sched", choices=choice_names(SCHEDULERS), default="dcs")
    p.add_argument(
        "--memory", choices=choice_names(MEMORY_POLICIES), default="lazy", help="lazy = DPA"
    )
    p.add_argument("--max-context", type=int, help="static reservation (default: model window)")
    p.add_argument(
        "--preset",
        default=argparse.SUPPRESS,
        help=f"hardware preset name or .toml, 32 GiB modules (default: {DECODE_PRESET}); "
        "LibraPIM rows: librapim-hbm2",
    )
    p.add_argument(
        "--gpu", default=DECODE_GPU, help=f"--system gpu: GPU preset (default {DECODE_GPU})"
    )
    p.add_argument(
        "--gpus",
        type=bounded_int(1, 1024),
        default=1,
        help="--system gpu: tensor-parallel GPUs; xpu+pim, gpu+lolpim: tensor-parallel xPUs",
    )
    p.add_argument(
        "--gpu-memory-fraction",
        type=float,
        default=1.0,
        help="--system gpu: share of each GPU's DRAM weights + KV may use (vLLM's "
        "gpu_memory_utilization; default 1.0)",
    )
    p.add_argument(
        "--xpu",
        default=argparse.SUPPRESS,
        help=f"--system xpu+pim and LibraPIM rows: xPU preset (default: {DECODE_XPU}); "
        "LibraPIM rows: librapim-npu",
    )
    p.add_argument(
        "--sub-batches",
        type=sub_batches_arg,
        default=1,
        help="--system xpu+pim: sub-batches the xPU and PIM pipeline over (default 1: serial), "
        "or 'auto' (time K = 1..8 and powers of two up to the batch; keep the fastest)",
    )
    add_row_arguments(p)
    attacc_gpu.add_arguments(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``decode`` subcommand's options."""
    add_system_arguments(p, "docs/decode.md")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--context", type=int, help="context length of every request")
    src.add_argument("--contexts", type=Path, help="file of per-request context lengths")
    src.add_argument("--workload", help="draw lengths from a workload (e.g. qmsum)")
    add_seed_option(p, "seed for --workload sampling")
    p.add_argument("--batch", type=_batch, default=None, help="requests, or 'auto' (fill memory)")
    p.add_argument("--modules", type=int, help="modules (must equal tp * pp; default tp * pp)")
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


def add_row_arguments(p: argparse.ArgumentParser) -> None:
    """Options only some rows have (LibraPIM's): unset unless given, so that the other rows'
    reports do not record them."""
    p.add_argument(
        "--groups",
        type=bounded_int(1, 4096),
        default=argparse.SUPPRESS,
        help="LibraPIM's pipelined rows: batch groups, at most the batch (default: 2)",
    )
    p.add_argument(
        "--no-dex",
        action="store_true",
        default=argparse.SUPPRESS,
        help="LibraPIM's DEX rows: banks exclusive (plain AiM) instead of sliced",
    )
    add_offload_argument(p, argparse.SUPPRESS)


def row_options(
    args: argparse.Namespace,
    kind: SystemKind,
    command: Command,
    parser: argparse.ArgumentParser,
    error: type[Exception] = DecodeError,
) -> argparse.Namespace:
    """``args`` with every option left unset given ``kind``'s default (its row's
    ``defaults``, else :data:`SHARED_DEFAULTS`); ``error`` if ``args`` give an option of
    another row a value other than its default."""
    values = vars(args).copy()
    for dest, value in {**SHARED_DEFAULTS, **SYSTEMS[kind].defaults}.items():
        if values.get(dest) is None:
            values[dest] = value
    resolved = argparse.Namespace(**values)

    def default(dest: str) -> Any:
        value = SHARED_DEFAULTS.get(dest, parser.get_default(dest))
        return None if value == argparse.SUPPRESS else value

    refusal = foreign_options(resolved, kind, command, default)
    if refusal:
        raise error(refusal)
    return resolved


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


def output_paths(
    report: Path | None,
    plot: Path | None,
    default: Path,
    force: bool,
    flags: tuple[str, str] = ("--report", "--plot"),
    error: type[Exception] = DecodeError,
) -> tuple[Path, Path]:
    """The JSON report's and the figure's paths (``default`` + ``.json`` / ``.png`` unless
    given; a given file is replaced only with ``force``), checked before any work is done;
    ``error`` when both name one file."""
    json_path = user_output(report, Path(f"{default}.json"), force)
    png_path = user_plot(plot, Path(f"{default}.png"), force)
    if json_path.resolve() == png_path.resolve():
        raise error(f"{flags[0]} and {flags[1]} both name {json_path}; give two files")
    return json_path, png_path


def publish(
    report: dict[str, Any],
    paths: tuple[Path, Path],
    plot: Callable[[Path], Any],
    text: Callable[[], str],
    as_json: bool,
) -> None:
    """Write ``report`` as JSON and its figure (``plot(path)``) to ``paths``, then print the
    JSON (``as_json``) or ``text()`` and where both went."""
    json_path, png_path = paths
    plot(png_path)
    publish_json(report, {"report": json_path, "plot": png_path}, as_json, text)


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony decode`` on the ``--system`` of :data:`~sim.systems.registry.SYSTEMS`:
    one step through the :class:`~sim.systems.base.System` interface, its JSON report (with
    provenance) and plot written, the report printed; user errors propagate as
    :class:`DecodeError` and friends."""
    kind = SystemKind(args.system)
    row = SYSTEMS[kind]
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = row_options(args, kind, Command.DECODE, parser)
    # Reports' provenance leaves out what did not exist when their system's reports were
    # first saved (tests/golden): the row's omissions, the default mapping and energy preset.
    omit = set(row.provenance_omits)
    if args.mapping == Mapping.FIXED:
        omit.add("mapping")
    if args.energy == DEFAULT_ENERGY:
        omit.add("energy")
    system = row.build(system_config(args, kind, Command.DECODE))
    args = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in omit})
    model = system.config.model
    lengths, auto = _lengths(args, model.context_window)
    if auto:
        lengths = list(system.fill_batch(lengths))
    setup = system.setup(lengths)
    paths = output_paths(args.report, args.plot, DECODE_DIR / row.stem(setup), args.force)
    progress = None if args.json else (lambda msg: print(f"  {msg}", flush=True))
    result = system.step(lengths, progress=progress)
    report = dataclasses.replace(
        result.report,
        provenance=provenance(
            args,
            system.hw,
            **system.provenance_inputs(),
            model=dataclasses.asdict(model),
            workload=args.workload,
            seed=args.seed if args.workload else None,
            context_lengths=list(lengths),
            inputs_sha256=row.digest(setup),
        ),
    )
    publish(
        report.to_dict(),
        paths,
        lambda path: row.plot(report, path),
        lambda: row.text(report),
        args.json,
    )
    return 0
