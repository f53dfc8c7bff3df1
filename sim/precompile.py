"""Compile the numba kernels into their on-disk cache, the work split over processes.

A fresh install compiles each kernel the first time a command uses it: about a minute of
CPU for the three schedulers' chunk kernels alone, paid again by each process that starts
while the cache is cold (every worker of a parallel test run or sweep). ``make setup`` runs
``pimphony precompile``: each :data:`TASKS` entry runs in its own spawned
process, so the work is shared by the cores and later runs load the kernels from the cache
(tenths of a second). Each task calls the package's own functions on small inputs; what it
compiles is what a real run of that function compiles (the same argument types).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from pimphony.sim.cli import bounded_int

__all__ = ["TASKS", "add_arguments", "precompile", "run"]


def _channel(scheduler: str) -> None:
    """A scheduler's chunk kernel (statistics only and recording, with and without input
    gaps), its many-channel kernel and its whole-stream reference."""
    import numpy as np
    from pimphony.compiler.kernels import compile_kernel
    from pimphony.models.channel import run_channel, run_channel_reference, run_channels
    from pimphony.models.config import load_preset

    cfg = load_preset("aim-16ch")
    stream = compile_kernel(cfg, "qk", tokens=512, d_h=128).commands
    gaps = np.arange(len(stream)) % 3
    for record in (False, True):
        run_channel(stream, cfg, scheduler, record=record)
        run_channel(stream, cfg, scheduler, valid_gaps=gaps, record=record)
    run_channels([stream, stream], cfg, scheduler)
    run_channel_reference(stream, cfg, scheduler, valid_gaps=gaps)


def _system() -> None:
    """The decode step's kernels (a module's makespan, the stream checks, the dataflow
    check) and the serving fast path's."""
    from pimphony.sim.serving.trace import Request

    from pimphony.api import decode, serve

    decode(context=[1024, 3000], tp=2)
    serve([Request(i, 0.0, 2048 + 512 * i, 4) for i in range(4)], prefill=False)


#: What :func:`precompile` runs, one spawned process each (the longest first).
TASKS: dict[str, Callable[[], None]] = {
    "pingpong": lambda: _channel("pingpong"),
    "dcs": lambda: _channel("dcs"),
    "static": lambda: _channel("static"),
    "system": _system,
}


def _run_task(name: str) -> tuple[str, float]:
    """Run task ``name`` (in a worker process); its CPU seconds."""
    started = time.process_time()
    TASKS[name]()
    return name, time.process_time() - started


def precompile(workers: int) -> list[tuple[str, float]]:
    """Run every task of :data:`TASKS` on ``workers`` spawned processes (here with one);
    ``(task, CPU seconds)``. A plain process pool, not Ray: Ray's start-up (seconds) and its
    workers' imports would cost more than the smaller tasks."""
    if workers <= 1:
        return [_run_task(name) for name in TASKS]
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        return list(pool.map(_run_task, TASKS))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``precompile`` command's options."""
    parser.add_argument(
        "--workers", type=bounded_int(1, 64), default=min(os.cpu_count() or 1, len(TASKS)),
        help="processes (default: one per core, at most one per task)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony precompile``: every task, a line on stderr before and after."""
    print(
        f"compiling the numba kernels into their cache, once ({args.workers} processes; "
        "about a minute of CPU when the cache is cold, a few seconds when warm) ...",
        file=sys.stderr,
        flush=True,
    )
    started = time.perf_counter()
    done = precompile(args.workers)
    cpu = ", ".join(f"{name} {s:.1f} s" for name, s in done)
    print(
        f"compiled in {time.perf_counter() - started:.0f} s (CPU per task: {cpu})",
        file=sys.stderr,
    )
    return 0
