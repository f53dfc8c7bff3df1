"""``pimphony librapim``: one decode step on the four systems of LibraPIM 6.1 (NPU+AiM, AttAcc-
like, NeuPIMs-like, LibraPIM), simulated beside Algorithm 1's prediction (``docs/librapim.md``).

The batch is ``--batch`` requests of ``--context`` tokens, or ``--batch`` prompts drawn from
``--workload`` (e.g. ``alpaca``) at generation step ``--step`` (each context = prompt + step).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from pimphony.compiler.llm import load_model
from pimphony.models.channel import SCHEDULERS
from pimphony.models.config import load_preset
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.cli import add_seed_option, bounded_int, choice_names
from pimphony.sim.experiments.librapim_energy import hbm_energy, system_energy
from pimphony.sim.systems.librapim import (
    DEFAULT_GROUPS,
    DEFAULT_TP,
    LIBRAPIM_PRESET,
    LIBRAPIM_SPECS,
    LIBRAPIM_XPU,
    OFFLOAD_READINGS,
    OffloadReading,
    add_offload_argument,
    format_inputs,
    format_librapim,
    librapim_cache,
    run_librapim,
    step_inputs,
)
from pimphony.sim.systems.setup import DecodeError
from pimphony.sim.workloads import generation_context_lengths, load_workload, sample_context_lengths

__all__ = ["add_arguments", "batch_lengths", "format_energy", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``pimphony librapim``."""
    parser.add_argument("--model", default="gpt3-175b-4k", help="model preset (LibraPIM Table 2)")
    parser.add_argument("--preset", default=LIBRAPIM_PRESET, help="PIM hardware preset")
    parser.add_argument("--xpu", default=LIBRAPIM_XPU, help="xPU preset")
    parser.add_argument("--batch", type=bounded_int(1, 4096), default=128, help="requests")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--context", type=int, default=None, help="tokens of every request")
    src.add_argument("--workload", help="draw prompt lengths from a workload (e.g. alpaca)")
    add_seed_option(parser, "seed of --workload draws")
    parser.add_argument(
        "--step", type=bounded_int(0, 1 << 20), default=0, help="generation step (--workload)"
    )
    parser.add_argument(
        "--groups", type=bounded_int(1, 4096), default=DEFAULT_GROUPS, help="LibraPIM batch groups"
    )
    parser.add_argument(
        "--tp",
        type=bounded_int(1, 1024),
        default=DEFAULT_TP,
        help=f"devices sharing every layer (default {DEFAULT_TP}, the NeuPIMs simulator's n_tp)",
    )
    parser.add_argument(
        "--system",
        action="append",
        choices=list(LIBRAPIM_SPECS),
        help="system to time (repeatable; default every registry row)",
    )
    parser.add_argument(
        "--no-dex",
        action="store_true",
        help="LibraPIM's banks exclusive (plain AiM) instead of sliced (bank-slice TLM)",
    )
    add_offload_argument(parser)
    parser.add_argument("--sched", choices=choice_names(SCHEDULERS), default="dcs")
    parser.add_argument(
        "--energy",
        nargs="?",
        const="hbm-pim",
        default=None,
        help="also each system's step energy by part and J/token (an HBM energy preset; "
        "hbm-pim if none is named; docs/energy.md)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def batch_lengths(args: argparse.Namespace, window: int) -> tuple[int, ...]:
    """The batch's context lengths from ``--context`` or ``--workload``/``--step``."""
    if args.workload:
        prompts = sample_context_lengths(load_workload(args.workload), args.batch, args.seed)
        steps = generation_context_lengths(prompts, args.step + 1, max_context=window)
        return tuple(int(t) for t in steps[args.step])
    context = 512 if args.context is None else args.context
    if context < 1 or context > window:
        raise DecodeError(f"--context {context}: allowed 1 to {window} (the model's window)")
    return (context,) * args.batch


def run(args: argparse.Namespace) -> int:
    """Print the systems' step times (or one JSON object)."""
    spec = load_model(args.model)
    lengths = batch_lengths(args, spec.context_window)
    hw, dev = load_preset(args.preset), load_xpu(args.xpu)
    params = hbm_energy(args.energy) if args.energy else None
    cache = librapim_cache(hw, args.sched, lengths)
    reading = OffloadReading(args.offload)
    systems = run_librapim(
        spec,
        hw,
        dev,
        lengths,
        args.groups,
        args.sched,
        args.tp,
        tuple(args.system) if args.system else None,
        slicing=not args.no_dex,
        cache=cache,
        offload=reading,
    )
    energy = None
    if params is not None:  # the kernels run_librapim timed, from its cache
        energy = {
            s: system_energy(spec, hw, dev, args.tp, lengths, r, params, cache, reading)
            for s, r in systems.items()
        }
    if args.json:
        out = {
            **step_inputs(spec, args.preset, args.xpu, lengths, args.tp),
            "systems": {k: dataclasses.asdict(v) for k, v in systems.items()},
        }
        if energy is not None:
            out["energy_preset"] = params.name
            out["energy"] = energy
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0
    print(format_inputs(spec, args.preset, args.xpu, lengths, args.tp))
    if reading != OffloadReading.PER_BANK:
        print(f"DBO's offloaded FFN: {reading} ({OFFLOAD_READINGS[reading].summary})")
    print(format_librapim(systems))
    if energy is not None:
        print(format_energy(energy, params.name))
    return 0


def format_energy(energy: dict[str, dict], preset: str) -> str:
    """Each system's step energy by part (J, all ``tp`` devices) and J per token."""
    parts = ("mac", "io", "activation", "background", "epu", "xpu", "links")
    head = f"{'energy (' + preset + ')':<20}" + "".join(f"{p:>11}" for p in parts)
    lines = [head + f"{'J/step':>11}{'J/token':>10}", "-" * (len(head) + 21)]
    for name, e in energy.items():
        j = e["parts_j"]
        lines.append(
            f"{name:<20}" + "".join(f"{j[p]:>11.4f}" for p in parts)
            + f"{e['joules_per_step']:>11.4f}{e['joules_per_token']:>10.4f}"
        )  # fmt: skip
    return "\n".join(lines)
