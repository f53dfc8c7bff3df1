"""The ``pimphony`` command line: one parser built from the :data:`COMMANDS` table.

Each command lives in the module its row names, as a pair of functions: one adds the
command's options to its parser, the other runs it and returns the exit code. A module is
imported only when its command runs (or shows its help), so light commands do not load the
RTL, co-simulation or plotting libraries.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pimphony.models.errors import PimphonyError

__all__ = [
    "COMMANDS",
    "DESCRIPTION",
    "Command",
    "SEED",
    "Terminated",
    "add_seed_option",
    "bounded_int",
    "bounded_ints",
    "build_parser",
    "choice_names",
    "main",
    "positive_ints",
]

DESCRIPTION = (
    "DRAM processing-in-memory for long-context LLM inference: channel and system models, "
    "compiler, RTL and experiments (docs/architecture.md)"
)


@dataclass(frozen=True)
class Command:
    """One ``pimphony`` command: its name, help line and where it lives.

    ``module`` (a module of :mod:`pimphony.sim`, named relative to it) holds ``add``
    (``add(parser) -> None``; ``""``: the command takes no options) and ``run``
    (``run(args) -> int``); a command with ``subcommands`` is a group (``pimphony wave
    summary``).
    """

    name: str
    help: str
    module: str = ""
    add: str = "add_arguments"
    run: str = "run"
    subcommands: tuple[Command, ...] = ()

    def function(self, which: str) -> Callable:
        """The command's ``add`` or ``run`` function (imports its module)."""
        module = importlib.import_module(f"pimphony.sim.{self.module}")
        return getattr(module, getattr(self, which))


def _channel(name: str, help: str) -> Command:
    return Command(name, help, "channel_commands", f"add_{name}_arguments", f"run_{name}")


COMMANDS: tuple[Command, ...] = (
    _channel("demo", "QK^T, SV and FC GEMV under every scheduler"),
    _channel("run", "one kernel under one scheduler"),
    _channel("compile", "write a kernel's command stream to a file"),
    Command("presets", "list the hardware presets", "presets", add=""),
    Command(
        "precompile",
        "compile the numba kernels into their on-disk cache, once (make setup runs it)",
        "precompile",
    ),
    Command("xpus", "list the compute-device (xPU) presets", "xpus", add=""),
    Command("sweep", "MAC utilisation vs kernel size (PIMphony Fig. 8)", "experiments.sweep"),
    Command(
        "fidelity",
        "the papers' claims beside pimphony's numbers (docs/fidelity.md)",
        "fidelity",
    ),
    Command(
        "buffer-sweep",
        "DCS vs ping-pong over OBuf size and timing convention (PIMphony Fig. 18)",
        "experiments.buffer_sweep",
    ),
    Command(
        "size-report",
        "static vs DPA instruction size over context (PIMphony Fig. 10c)",
        "experiments.size_report",
    ),
    Command(
        "capacity",
        "KV capacity utilisation, static vs lazy allocation (PIMphony Fig. 19)",
        "experiments.capacity",
    ),
    Command(
        "decode",
        "one LLM decode step on a multi-module PIM system (or N GPUs: --system gpu)",
        "systems.command",
    ),
    Command(
        "serve",
        "serve requests over time: arrivals, continuous batching, latency percentiles",
        "serving.command",
    ),
    Command(
        "serve-fig4",
        "static vs lazy KV memory served over capacity, a saturated queue (LoL-PIM Fig. 4 shape)",
        "serving.fig4",
    ),
    Command(
        "serve-fig17",
        "PIMphony throughput vs capacity and CENT vs PIMphony vs context, served (Fig. 17 shape)",
        "serving.fig17",
    ),
    Command(
        "gpu-compare",
        "PIM-only vs GPU-only throughput over capacity (LoL-PIM Fig. 9 shape)",
        "experiments.gpu_compare",
    ),
    Command(
        "gpu-fig20",
        "PIMphony (PIM-only) vs memory-matched A100s (PIMphony Fig. 20 shape)",
        "experiments.gpu_fig20",
    ),
    Command(
        "ablation",
        "throughput HFP -> +TCP -> +DCS -> +DPA (PIMphony Fig. 13; --system xpu+pim: Fig. 14)",
        "experiments.ablation",
    ),
    Command(
        "energy",
        "decode energy per token, CENT vs CENT+PIMphony (PIMphony Fig. 16 shape)",
        "experiments.energy",
    ),
    Command(
        "dex",
        "LibraPIM bank slicing: MAC utilisation and host-read bandwidth, with/without",
        "experiments.dex",
    ),
    Command(
        "librapim",
        "one decode step, NPU+AiM vs LibraPIM (batch pipelining + DBO), simulated vs predicted",
        "experiments.librapim",
    ),
    Command(
        "librapim-fig19",
        "LibraPIM Fig. 19 shape: four systems' speedup over NPU+AiM, batch x input length",
        "experiments.librapim_fig19",
    ),
    Command(
        "librapim-energy",
        "LibraPIM Fig. 22 shape: decode energy by part of the four systems (HBM energy preset)",
        "experiments.librapim_energy",
    ),
    Command(
        "attacc-energy",
        "AttAcc kernels' energy by part on one group, beside the AttAcc simulator's formula",
        "experiments.attacc_energy",
    ),
    Command(
        "librapim-figs",
        "LibraPIM Figs. 20, 7, 9, 21 and DBO on measured rates (--figure), JSON + PNG",
        "experiments.librapim_figs",
    ),
    Command(
        "sherpa",
        "PIM-SHERPA: DRAM capacity of WD, FACIL-O, S-DDB and S-OWR (Fig. 9)",
        "experiments.sherpa",
    ),
    Command(
        "pim-gemv",
        "one GEMV on a command-level PIM back end (HBM-PIM; docs/dcc.md)",
        "pim_gemv",
    ),
    Command(
        "tune",
        "DCC: the best mapping of a kernel on a PIM back end, vs its default and the GPU",
        "tune",
    ),
    Command(
        "dcc-figs",
        "DCC Figs. 2, 6, 7, 9 shapes: DCC vs default mapping, compute-centric and GPU",
        "experiments.dcc_figs",
    ),
    Command(
        "dcc-fig8",
        "DCC Fig. 8 shape: generation time by phase, GPU vs AttAcc Base/Full with and without DCC",
        "experiments.dcc_fig8",
    ),
    Command(
        "dcc-table2",
        "DCC Table II shape: the coupled predictor's pick vs the best draft per back end + kernel",
        "experiments.dcc_table2",
    ),
    Command(
        "dcc-lut",
        "DCC's lookup table of best drafts per shape, filled offline by one trained predictor",
        "experiments.dcc_lut",
    ),
    Command(
        "sweep-run",
        "a design-space sweep file, each point a Ray task, cached and resumable",
        "sweep_run",
    ),
    Command("rtl", "write the Verilog of every RTL block (build/rtl/)", "eda.verilog"),
    Command("area", "Yosys synthesis of every RTL block: cells, flip-flops", "eda.area"),
    Command(
        "wave",
        "RTL waveforms: record them, or summarise a VCD",
        subcommands=(
            Command("summary", "cycles and MAC utilisation from a VCD", "eda.vcd"),
            Command(
                "record",
                "VCD + GTKWave save file of a kernel on an RTL block (build/waves/)",
                "eda.waves",
            ),
        ),
    ),
    Command(
        "verify",
        "RTL-vs-TLM verification at native speed (compiled Verilator harness)",
        subcommands=(
            Command(
                "campaign",
                "random streams on any RTL block vs the TLM; reports mismatches and speed",
                "verify.campaign",
            ),
        ),
    ),
    Command(
        "bench",
        "simulation speed: CLI start-up, channel TLM, decode step, RTL",
        "experiments.bench",
    ),
)


def choice_names(registry: Iterable[str]) -> list[str]:
    """A registry's keys as plain strings, for ``choices=`` (argparse shows their repr)."""
    return [str(key) for key in registry]


def positive_ints(text: str) -> tuple[int, ...]:
    """An argparse ``type``: comma-separated integers, each >= 1."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be >= 1")
    return values


def bounded_ints(lo: int, hi: int) -> Callable[[str], tuple[int, ...]]:
    """An argparse ``type``: comma-separated integers, each from ``lo`` to ``hi``."""

    def parse(text: str) -> tuple[int, ...]:
        values = positive_ints(text) if lo >= 1 else ()
        bad = [v for v in values if not lo <= v <= hi]
        if bad:
            raise argparse.ArgumentTypeError(f"{bad[0]} is outside {lo:,} to {hi:,}")
        return values

    parse.__name__ = f"integers {lo:,} to {hi:,}"
    return parse


def bounded_int(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer from ``lo`` to ``hi``, else a message saying so."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is outside {lo:,} to {hi:,}")
        return value

    parse.__name__ = f"integer {lo:,} to {hi:,}"
    return parse


#: Seeds of numpy's random generators: non-negative 32-bit integers.
SEED = bounded_int(0, 2**32 - 1)


def add_seed_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--seed`` (a :data:`SEED`, default 0), its help saying ``what`` it seeds."""
    p.add_argument("--seed", type=SEED, default=0, help=what)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 with usage; keep that
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        """argparse's, then every float option checked finite (NaN and inf refused)."""
        namespace, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            value = getattr(namespace, action.dest, None)
            values = value if isinstance(value, list | tuple) else (value,)
            bad = [v for v in values if isinstance(v, float) and not math.isfinite(v)]
            if bad:
                name = "/".join(action.option_strings) or action.dest
                self.error(f"argument {name}: {bad[0]!r} is not a finite number")
        return namespace, extras


class _Version(argparse.Action):
    """``--version``: the version and the source's git commit (``tool_record``), then exit."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        from pimphony.sim.provenance import tool_record

        record = tool_record()
        commit = f" (commit {record['commit']})" if record["commit"] else ""
        print(f"pimphony {record['version']}{commit}")
        parser.exit(0)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Option help with its default value, unless the help already states it (``default``)
    or there is none to state (a flag, ``None``)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action) or text


def _first_word(argv: Sequence[str]) -> int | None:
    return next((k for k, a in enumerate(argv) if not a.startswith("-")), None)


def _add_commands(
    sub: argparse._SubParsersAction, commands: Sequence[Command], argv: Sequence[str]
) -> None:
    """Add ``commands``; only the one ``argv`` names gets its options (its module loaded)."""
    k = _first_word(argv)
    chosen = argv[k] if k is not None else None
    for cmd in commands:
        p = sub.add_parser(
            cmd.name, help=cmd.help, description=cmd.help, formatter_class=_HelpFormatter
        )
        p.set_defaults(_command=cmd, _prog=p.prog)
        if cmd.subcommands:
            nested = p.add_subparsers(
                dest=f"{cmd.name}_command", required=True, parser_class=_Parser
            )
            _add_commands(nested, cmd.subcommands, argv[k + 1 :] if cmd.name == chosen else [])
        elif cmd.name == chosen and cmd.add:
            cmd.function("add")(p)


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The ``pimphony`` parser, with the options of the command ``argv`` names."""
    parser = _Parser(prog="pimphony", description=DESCRIPTION, formatter_class=_HelpFormatter)
    parser.add_argument(
        "--version", action=_Version, nargs=0, default=argparse.SUPPRESS,
        help="print the version and exit",
    )  # fmt: skip
    parser.add_argument(
        "--no-kernel-costs", action="store_true", default=argparse.SUPPRESS,
        help="load every device preset without its [kernel] table: no launch or DRAM-latency "
        "cost per kernel, the pure roofline (docs/xpu.md, Per-kernel costs)",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_commands(sub, COMMANDS, argv)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pimphony`` command.

    Exit status: 0 done, 2 bad input (one line on stderr naming what is wrong), 1 an internal
    error (a bug: one line, and the traceback in a file; ``PIMPHONY_DEBUG=1`` re-raises),
    130 / 143 interrupted by Ctrl-C / SIGTERM (one line; every output is written atomically,
    so none is left half written).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    previous = _terminate_on_sigterm()
    k = _first_word(argv)
    prog = "pimphony" if k is None else f"pimphony {argv[k]}"  # until the parser names it
    try:
        args = build_parser(argv).parse_args(argv)
        prog = args._prog
        # Recorded in provenance only when given; an environment variable: Ray workers see it.
        if getattr(args, "no_kernel_costs", False):
            from pimphony.models.xpu_config import KERNEL_COSTS_ENV

            os.environ[KERNEL_COSTS_ENV] = "0"
        from pimphony.sim.outputs import check_command_files

        check_command_files(args)
        return args._command.function("run")(args)
    except (KeyboardInterrupt, Terminated) as exc:  # every writer is atomic: nothing partial
        signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
        print(
            f"{prog}: {'terminated' if isinstance(exc, Terminated) else 'interrupted'}; "
            "no partial output was written",
            file=sys.stderr,
        )
        return 128 + signum
    except BrokenPipeError:  # the reader left (``pimphony demo | head -1``): not an error
        _silence_stdout()
        return 0
    except (PimphonyError, OSError) as exc:  # OSError: files the user named (unreadable, ...)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_status if isinstance(exc, PimphonyError) else 2
    except Exception as exc:
        if os.environ.get("PIMPHONY_DEBUG"):
            raise
        where = _write_traceback()
        print(
            f"{prog}: internal error: {type(exc).__name__}: {exc} (a bug; please report "
            f"it with the traceback in {where})",
            file=sys.stderr,
        )
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like Ctrl-C (temporary files removed), exit status 143."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


def _terminate_on_sigterm() -> Any:
    """Turn SIGTERM into :class:`Terminated` (main thread only); the previous handler."""
    try:
        return signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread (a test runner's worker): leave it
        return None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (e.g. captured in tests)
        pass


def _write_traceback() -> str:
    """Write the current exception's traceback to a new temporary file; its path."""
    fd, path = tempfile.mkstemp(prefix="pimphony-traceback-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        traceback.print_exc(file=f)
    return path


if __name__ == "__main__":
    sys.exit(main())
