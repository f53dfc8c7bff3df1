"""``pimphony verify campaign``: seeded random streams on a scheduler block's compiled harness
(:mod:`sim.verify.compiled`) against the TLM; the first mismatch is shrunk to a minimal
reproducer written to disk. The command line runs every block's campaign from the table
:data:`sim.verify.campaign_blocks.CAMPAIGNS` (which also holds the campaigns of the DPA and
bank-slice blocks on their cocotb harnesses); this module is the scheduler blocks' row.

Stream ``i`` of a campaign with seed ``S`` comes from numpy's generators seeded ``(S, i)``, so
any stream can be drawn again alone (:func:`campaign_stream`). A fraction ``kernels`` of the
streams (decided by the generator seeded ``(S, i, 1)``) are compiler streams: a ``qk``,
``sv`` or ``gemv`` kernel of a small random shape (:func:`kernel_shape`) lowered by
:func:`compiler.kernels.compile_kernel`; a shape the compiler refuses for the preset, or one
the TLM refuses, is drawn again. The others are random legal streams of 1 to ``max_length``
commands over 1-8 buffer entries per half and 1-4 rows
(:func:`sim.verify.streams.random_stream`; for ping-pong,
:func:`~sim.verify.streams.random_pingpong_stream`). Either kind gets, with probability
``gaps``, input ``valid`` gaps (each command idle with a drawn probability, for 1 to 2, 8 or
40 cycles), or with probability ``ready`` an output ``ready`` pattern (1-64 cycles, cycled).

A stream is *exact* when the TLM predicts its cycles: every command must issue in the TLM's
cycle (:func:`models.channel.run_channel` with the same gaps). Under a ``ready`` pattern, and
for ping-pong gaps the TLM refuses (a command late for its slot, which the RTL makes safe
rather than exact, ``docs/scheduling.md``), the stream is *rules-only*: the schedule must obey
:func:`models.channel.check_schedule`. Any departure is a mismatch; 0 are expected. A random
ping-pong stream the TLM refuses even without gaps (about 1% of them with few buffer entries:
it is outside the TLM's contract, and the schedule rules are then undefined) is drawn again
and counted in ``redrawn``.

Streams go to the harness in chunks, one testbench process at a time; the next chunk is drawn
and run on the TLM, and the previous one checked, while the testbench simulates the current
one. The campaign stops at the first mismatch (unless told to keep going);
:func:`shrink_stream` then cuts the failing stream down by delta debugging while the mismatch
persists, and :func:`write_reproducer` writes it (a stream file, and a JSON with its gaps,
ready pattern, the mismatch and the command that replays it: ``--replay``).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from pimphony.compiler.kernels import GQA_MAPPINGS, CompileError, compile_kernel
from pimphony.models.channel import check_schedule, run_channel
from pimphony.models.config import DEFAULT_PRESET, HardwareConfig, load_preset
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import BUILD_DIR, check_writable, read_utf8, write_atomic
from pimphony.models.isa import StreamError, load_stream, save_stream
from pimphony.models.pingpong import PingPongError
from pimphony.rtl import Block
from pimphony.rtl.blocks import SCHEDULER_OF_BLOCK
from pimphony.sim.cli import add_seed_option, bounded_int, choice_names
from pimphony.sim.parallel import ordered_map
from pimphony.sim.provenance import provenance
from pimphony.sim.verify.compiled import CompiledHarness, CompiledRun, build_harness, encode_streams
from pimphony.sim.verify.runner import CosimError
from pimphony.sim.verify.scheduler import RtlStream, expectation, first_difference
from pimphony.sim.verify.streams import random_pingpong_stream, random_stream

__all__ = [
    "ALL_BLOCKS",
    "KERNEL_KINDS",
    "PARTS_PER_WORKER",
    "REPRO_DIR",
    "CampaignOptions",
    "CampaignResult",
    "CampaignStream",
    "ReplayError",
    "Replayed",
    "Reproduction",
    "ReproTarget",
    "Shrunk",
    "add_arguments",
    "campaign_parts",
    "campaign_stream",
    "chunk_ranges",
    "compiler_item",
    "describe_item",
    "draw_gaps",
    "draw_ready",
    "format_rate",
    "indices_of",
    "kernel_shape",
    "pipelined",
    "record_field",
    "record_preset",
    "record_pattern",
    "replay",
    "repro_stem",
    "run",
    "run_campaign",
    "scheduler_replay",
    "scheduler_reproduce",
    "shrink_chunks",
    "shrink_stream",
    "summary",
    "write_reproducer",
]

B = TypeVar("B")  # a batch of streams or items
H = TypeVar("H")  # a running simulation
R = TypeVar("R")  # its result
F = TypeVar("F")  # the files a reproducer writer wrote

GAP_LENGTHS = (2, 8, 40)
"""Longest input gap of a stream with gaps (one drawn per stream)."""
GAP_TRIES = 20
"""Draws of ping-pong gaps before keeping refused ones (the stream is then rules-only)."""
REDRAWS = 100
"""Draws of a stream (or kernel shape) the TLM or the compiler refuses before giving up."""
KERNEL_KINDS = ("qk", "sv", "gemv")
"""The compiler kernels a campaign draws."""
KERNEL_TAG = 1
"""Third seed word of the generator that decides whether a stream is a compiler stream."""
REPRO_DIR = BUILD_DIR / "campaign"
"""Default directory of the reproducers."""
ALL_BLOCKS = "all"
"""``--block`` value that runs every block's campaign
(:data:`sim.verify.campaign_blocks.CAMPAIGNS`), one after the other."""
PARTS_PER_WORKER = 2
"""Tasks per worker a block's campaign is split into with ``--workers`` (the blocks' items
differ in cost: smaller tasks balance the workers)."""
SHRINK_BATCH_COMMANDS = 200_000
"""Commands per testbench run while shrinking (the candidates of a round are run together)."""


@dataclass(frozen=True)
class CampaignStream:
    """One campaign stream and what it is checked against.

    ``tlm_issue`` is the TLM's issue cycle of every command for an exact stream, else
    ``None`` (rules-only: :func:`models.channel.check_schedule`). ``redrawn`` counts the
    streams (or kernel shapes) drawn before it that were refused. ``source`` is ``random`` or
    the compiler kernel and shape (``gemv d_out=100 d_in=300``).
    """

    index: int
    stream: RtlStream
    tlm_issue: np.ndarray | None
    redrawn: int = 0
    source: str = "random"

    def describe(self) -> str:
        """``#12 (87 commands, valid gaps)``-style text."""
        s = self.stream
        return describe_item(
            self.index, [f"{s.commands.shape[0]} commands"], self.source, s.valid_gaps,
            s.ready_pattern,
        )  # fmt: skip


def describe_item(
    index: int,
    what: list[str],
    source: str,
    valid_gaps: object | None,
    ready_pattern: object | None,
) -> str:
    """``#12 (<what>, <source>, valid gaps, ready pattern of 9)``: a campaign item's text,
    its source named unless it was drawn at random."""
    what = list(what)
    if source != "random":
        what.append(source)
    if valid_gaps is not None:
        what.append("valid gaps")
    if ready_pattern is not None:
        what.append(f"ready pattern of {len(ready_pattern)}")  # type: ignore[arg-type]
    return f"#{index} ({', '.join(what)})"


def draw_gaps(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    """Input ``valid`` gaps of ``n`` commands: each idle with a drawn probability, for 1 to a
    drawn longest of :data:`GAP_LENGTHS` cycles."""
    p = rng.uniform(0.05, 0.6)
    longest = int(rng.choice(GAP_LENGTHS))
    gaps = np.where(rng.random(n) < p, rng.integers(1, longest + 1, n), 0)
    return tuple(int(g) for g in gaps)


def draw_ready(rng: np.random.Generator) -> tuple[int, ...]:
    """A ``ready`` pattern of 1 to 64 cycles, each ready with a drawn probability, at least
    one ready (something can issue)."""
    length = int(rng.integers(1, 65))
    pattern = rng.random(length) < rng.uniform(0.2, 0.9)
    pattern[rng.integers(length)] = True
    return tuple(int(r) for r in pattern)


def compiler_item(seed: int, index: int, kernels: float) -> bool:
    """Whether item ``index`` of a campaign with ``seed`` is a compiled kernel (probability
    ``kernels``), drawn from its own generator so the random items do not shift."""
    return kernels > 0 and np.random.default_rng([seed, index, KERNEL_TAG]).random() < kernels


def kernel_shape(rng: np.random.Generator) -> tuple[str, dict]:
    """A random small kernel ``(kind, shape)`` for :func:`compiler.kernels.compile_kernel`.

    ``gemv``: ``d_out`` 1-256, ``d_in`` 1-512, half of them batched (2-8 requests, a third
    of those with a random pass size); ``qk``/``sv``: 1-512 tokens, ``d_h`` 1-128, a GQA
    group of 1, 2 or 4 (either mapping). Shapes are not padded to the bank count or the MAC
    width on purpose; the preset may still refuse one (:class:`~compiler.kernels.CompileError`).
    """
    kind = str(rng.choice(KERNEL_KINDS))
    if kind == "gemv":
        shape = {"d_out": int(rng.integers(1, 257)), "d_in": int(rng.integers(1, 513))}
        if rng.random() < 0.5:
            shape["batch"] = int(rng.integers(2, 9))
            if rng.random() < 1 / 3:
                shape["pass_size"] = int(rng.integers(1, shape["batch"] + 1))
        return kind, shape
    shape = {"tokens": int(rng.integers(1, 513)), "d_h": int(rng.integers(1, 129))}
    group = int(rng.choice((1, 1, 2, 4)))
    if group > 1:
        shape["gqa_group"] = group
        shape["mapping"] = str(rng.choice(GQA_MAPPINGS))
    return kind, shape


def _kernel_commands(
    cfg: HardwareConfig, sched: str, rng: np.random.Generator, seed: int, index: int
) -> tuple[np.ndarray, np.ndarray, str, int]:
    """A compiler stream the TLM accepts: ``(commands, TLM issue, source, redrawn)``."""
    for redrawn in range(REDRAWS + 1):
        kind, shape = kernel_shape(rng)
        try:
            commands = compile_kernel(cfg, kind, **shape).commands
            plain = run_channel(commands, cfg, sched).issue
        except (CompileError, PingPongError):
            continue
        source = " ".join([kind, *(f"{k}={v}" for k, v in shape.items())])
        return commands, plain, source, redrawn
    raise CosimError(f"stream {index} of seed {seed}: {REDRAWS + 1} kernel shapes refused")


@dataclass(frozen=True)
class CampaignOptions:
    """The item options of a campaign: ``--max-length``, ``--gaps``, ``--ready``,
    ``--kernels``, ``--chunk`` and ``--keep-going``."""

    max_length: int = 600
    gaps: float = 0.5
    ready: float = 0.2
    kernels: float = 0.1
    chunk: int = 500
    keep_going: bool = False

    def flags(self) -> dict[str, object]:
        """The options that decide the items, as command-line flags (for reproducers)."""
        return {
            "--max-length": self.max_length,
            "--gaps": self.gaps,
            "--ready": self.ready,
            "--kernels": self.kernels,
        }


def campaign_stream(
    cfg: HardwareConfig, sched: str, seed: int, index: int, options: CampaignOptions
) -> CampaignStream:
    """Stream ``index`` of the campaign with ``seed`` and the stream ``options`` (see the
    module docstring).

    With ``options.kernels = 0`` the streams are those of a campaign without compiler streams:
    the choice is drawn from its own generator, so it does not shift the random streams.
    """
    rng = np.random.default_rng([seed, index])
    name = f"{seed}-{index}"
    redrawn, source = 0, "random"
    if compiler_item(seed, index, options.kernels):
        commands, plain, source, redrawn = _kernel_commands(cfg, sched, rng, seed, index)
    else:
        n = int(rng.integers(1, options.max_length + 1))
        entries, rows = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        make = random_pingpong_stream if sched == "pingpong" else random_stream
        while True:
            commands = make(cfg, n, int(rng.integers(2**32)), entries=entries, rows=rows)
            try:
                plain = run_channel(commands, cfg, sched).issue
                break
            except PingPongError:  # the TLM refuses it even without gaps: outside its contract
                redrawn += 1
                if redrawn > REDRAWS:
                    raise CosimError(
                        f"stream {index} of seed {seed}: {redrawn} draws refused by the TLM"
                    ) from None
    n = int(commands.shape[0])

    def made(stream: RtlStream, issue: np.ndarray | None) -> CampaignStream:
        return CampaignStream(index, stream, issue, redrawn, source)

    kind = rng.random()
    if kind < options.ready:
        return made(RtlStream(name, commands, ready_pattern=draw_ready(rng)), None)
    if kind >= options.ready + options.gaps:
        return made(RtlStream(name, commands), plain)
    for _ in range(GAP_TRIES):
        valid_gaps = draw_gaps(rng, n)
        try:
            issue = run_channel(commands, cfg, sched, valid_gaps=valid_gaps).issue
        except PingPongError:  # a command late for its slot: the RTL is safe, not exact
            continue
        return made(RtlStream(name, commands, valid_gaps), issue)
    return made(RtlStream(name, commands, valid_gaps), None)


def _check(cfg: HardwareConfig, sched: str, cs: CampaignStream, rtl: np.ndarray) -> str | None:
    """``None`` if the RTL schedule of ``cs`` is right, else a message naming what is not."""
    s = cs.stream
    if cs.tlm_issue is None:
        problems = check_schedule(s.commands, rtl, cfg, sched)
        return f"stream {cs.describe()}: {'; '.join(problems)}" if problems else None
    return first_difference(f"stream {cs.describe()}", s.commands, cs.tlm_issue, rtl)


@dataclass
class CampaignResult:
    """Outcome of :func:`run_campaign`.

    ``exact`` streams were compared with the TLM's cycles, ``rules_only`` ones with the
    scheduler's rules, ``kernels`` of them were compiler streams, ``redrawn`` counts streams
    drawn again (:func:`campaign_stream`); ``mismatches`` holds one message per failing
    stream and ``failure`` the first failing stream; ``cycles`` are those the testbench
    simulated for the checked streams. ``sim_seconds`` is the testbench's
    simulation time, ``seconds`` the whole campaign's (drawing streams and running the TLM
    included, the build excluded).
    """

    block: str
    preset: str
    seed: int
    streams: int = 0
    exact: int = 0
    rules_only: int = 0
    kernels: int = 0
    redrawn: int = 0
    commands: int = 0
    cycles: int = 0
    sim_seconds: float = 0.0
    seconds: float = 0.0
    build_seconds: float = 0.0
    mismatches: list[str] = field(default_factory=list)
    failure: CampaignStream | None = field(default=None, repr=False)

    def count(
        self, item: Any, message: str | None, exact: bool, source: str, redrawn: int, commands: int
    ) -> None:
        """Count one checked ``item`` (``commands`` long, compared with the TLM's cycles if
        ``exact``); ``message`` is its mismatch, if any (the first one's item is ``failure``)."""
        self.streams += 1
        self.exact += exact
        self.rules_only += not exact
        self.kernels += source != "random"
        self.redrawn += redrawn
        self.commands += commands
        if message:
            self.mismatches.append(message)
            if self.failure is None:
                self.failure = item

    def absorb(self, later: CampaignResult) -> None:
        """Add ``later``, the result of the items right after this one's (the same campaign,
        the next range of indices), as one run over both counts them: counts, cycles and
        times summed, mismatches in order, the first failure kept (``build_seconds``: the
        longer)."""
        for name in _SUMMED:
            setattr(self, name, getattr(self, name) + getattr(later, name))
        self.build_seconds = max(self.build_seconds, later.build_seconds)
        self.mismatches.extend(later.mismatches)
        if self.failure is None:
            self.failure = later.failure

    def stopped(self, keep_going: bool) -> bool:
        """Whether the campaign stops: it has a mismatch and does not ``keep_going``."""
        return self.failure is not None and not keep_going

    @property
    def cycles_per_s(self) -> float:
        """Simulated cycles per second of the compiled testbench."""
        return self.cycles / max(self.sim_seconds, 1e-9)

    @property
    def streams_per_s(self) -> float:
        """Streams checked per second of the campaign, end to end."""
        return self.streams / max(self.seconds, 1e-9)

    def to_dict(self) -> dict:
        """JSON-ready summary: the counts, rates and the first ten mismatch messages."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "failure"}
        d["mismatches"] = len(self.mismatches)
        d["first_mismatches"] = self.mismatches[:10]
        d["cycles_per_s"] = self.cycles_per_s
        d["streams_per_s"] = self.streams_per_s
        return d


_SUMMED = ("streams", "exact", "rules_only", "kernels", "redrawn", "commands", "cycles",
           "sim_seconds", "seconds")  # fmt: skip
"""The fields of :class:`CampaignResult` that :meth:`~CampaignResult.absorb` adds up."""


def indices_of(items: int | range) -> range:
    """The item indices of ``items``: a count (``0`` to ``items - 1``) or a range."""
    return items if isinstance(items, range) else range(items)


def chunk_ranges(total: int | range, size: int) -> Iterator[range]:
    """``total`` (a count or a range of indices) in consecutive ranges of ``size``."""
    indices = indices_of(total)
    for start in range(indices.start, indices.stop, size):
        yield range(start, min(start + size, indices.stop))


def campaign_parts(items: int, workers: int) -> list[range]:
    """The ranges of item indices a campaign of ``items`` runs as separate tasks on
    ``workers`` workers: the whole campaign on one, else :data:`PARTS_PER_WORKER` parts per
    worker of about equal length (each item is drawn from its own seed, so any split gives
    the items of one run)."""
    parts = min(items, 1 if workers <= 1 else PARTS_PER_WORKER * workers)
    return [range(items * k // parts, items * (k + 1) // parts) for k in range(parts)]


def _scheduler(block: str) -> str:
    if block not in SCHEDULER_OF_BLOCK:
        raise CosimError(
            f"block {block!r} is not a scheduler block; allowed: {', '.join(SCHEDULER_OF_BLOCK)}"
        )
    return SCHEDULER_OF_BLOCK[block]


_HARNESSES: dict[tuple[str, HardwareConfig], CompiledHarness] = {}
"""The harnesses :func:`_harness` found, by block and configuration."""


def _harness(block: str, cfg: HardwareConfig) -> CompiledHarness:
    """:func:`~sim.verify.compiled.build_harness`, looked up once per process (generating
    the Verilog that names the build takes most of a second; every range of a ``--workers``
    campaign needs it); a build removed since is built again."""
    known = _HARNESSES.get((block, cfg))
    if known is not None and known.binary.exists():
        return replace(known, build_seconds=0.0)
    harness = _HARNESSES[block, cfg] = build_harness(block, cfg)
    return harness


def run_campaign(
    block: str,
    cfg: HardwareConfig,
    streams: int | range,
    seed: int,
    options: CampaignOptions = CampaignOptions(),
    progress: Callable[[CampaignResult], None] | None = None,
) -> CampaignResult:
    """Run ``streams`` random streams (a count, or a range of stream indices) on scheduler
    ``block``'s compiled harness at ``cfg``.

    ``options.gaps`` and ``options.ready`` are the fractions of streams with input gaps and
    with an output ready pattern, ``options.kernels`` the fraction of compiler streams;
    ``options.chunk`` streams go to one testbench process. The campaign stops at the first
    mismatch (the streams after it in program order are not counted) unless
    ``options.keep_going``. ``progress(result)`` is called after every chunk.

    Raises
    ------
    CosimError
        ``block`` is not a scheduler block, the harness could not be built, or the testbench
        failed (a stream that never completed).
    """
    sched = _scheduler(block)
    harness = _harness(block, cfg)
    result = CampaignResult(block, cfg.name, seed, build_seconds=harness.build_seconds)
    started = time.perf_counter()

    def settle(batch: list[CampaignStream], run: CompiledRun) -> None:
        for cs in batch:
            msg = _check(cfg, sched, cs, run.issue[cs.stream.name])
            n = int(cs.stream.commands.shape[0])
            result.count(cs, msg, cs.tlm_issue is not None, cs.source, cs.redrawn, n)
            result.cycles += run.cycles[cs.stream.name]
            if result.stopped(options.keep_going):
                break
        result.sim_seconds += run.sim_seconds
        result.seconds = time.perf_counter() - started
        if progress:
            progress(result)

    # One testbench process at a time: chunk k + 1 is drawn (and run on the TLM) while chunk k
    # simulates, and chunk k is checked while chunk k + 1 simulates.
    batches = (
        [campaign_stream(cfg, sched, seed, i, options) for i in indices]
        for indices in chunk_ranges(streams, options.chunk)
    )
    pipelined(
        batches, lambda b: harness.start([cs.stream for cs in b]), lambda h: h.wait(), settle,
        lambda: result.stopped(options.keep_going),
    )  # fmt: skip
    return result


def pipelined(
    batches: Iterable[B],
    start: Callable[[B], H],
    wait: Callable[[H], R],
    settle: Callable[[B, R], None],
    stopped: Callable[[], bool],
) -> None:
    """Run ``batches`` one simulation at a time, each drawn while the one before simulates
    and settled (checked) while the one after simulates; stop drawing once ``stopped()``.
    ``start(batch)`` begins a simulation and returns a handle, ``wait(handle)`` its result."""
    pending: tuple[B, H] | None = None
    for batch in batches:
        done = (pending[0], wait(pending[1])) if pending is not None else None
        pending = (batch, start(batch))
        if done is not None:
            settle(*done)
        if stopped():
            break
    if pending is not None:
        out = wait(pending[1])
        if not stopped():
            settle(pending[0], out)


# -- shrinking and reproducers --------------------------------------------------------------


@dataclass(frozen=True)
class Shrunk:
    """A failing stream cut down by :func:`shrink_stream`: the stream, its mismatch message,
    the original length, and the candidates tried and testbench runs spent."""

    stream: CampaignStream
    message: str
    original_commands: int
    candidates: int
    runs: int


def _subset(cs: CampaignStream, keep: np.ndarray) -> RtlStream:
    s = cs.stream
    gaps = None if s.valid_gaps is None else tuple(s.valid_gaps[k] for k in keep)
    return RtlStream(s.name, s.commands[keep].copy(), gaps, s.ready_pattern)


W = TypeVar("W")  # a campaign item (a stream or an item)
C = TypeVar("C")  # a candidate built from one


def shrink_chunks(
    cur: W,
    msg: str,
    length: Callable[[W], int],
    keep: Callable[[W, np.ndarray], C | None],
    first_failing: Callable[[list[C]], tuple[W, str] | None],
) -> tuple[W, str]:
    """Delta debugging: ``cur`` (of ``length`` commands) without ever smaller chunks, while a
    candidate still fails. ``keep`` builds a candidate of the kept command indices (``None``:
    not a legal one); ``first_failing`` names the first failing candidate and its message."""
    n = 2
    while (total := length(cur)) >= 2:
        n = min(n, total)
        size = math.ceil(total / n)
        candidates = [
            c
            for lo in range(0, total, size)
            if (c := keep(cur, np.delete(np.arange(total), np.s_[lo : lo + size]))) is not None
        ]
        found = first_failing(candidates)
        if found:
            cur, msg = found
            n = max(n - 1, 2)
        elif n >= total:
            break
        else:
            n = min(2 * n, total)
    return cur, msg


def _first_failing(
    harness: CompiledHarness,
    cfg: HardwareConfig,
    sched: str,
    index: int,
    candidates: Sequence[RtlStream],
    counter: list[int],
) -> tuple[CampaignStream, str] | None:
    """The first of ``candidates`` that still mismatches, with its message, else ``None``.

    Candidates the TLM refuses even without gaps (an illegal ping-pong stream) are skipped;
    the rest run in as few testbench processes as :data:`SHRINK_BATCH_COMMANDS` allows, in
    order, stopping at the first process with a failing candidate.
    """
    legal: list[CampaignStream] = []
    for k, s in enumerate(candidates):
        if s.commands.shape[0] == 0:
            continue
        try:
            issue = expectation(cfg, sched, s)
        except PingPongError:
            continue
        legal.append(CampaignStream(index, RtlStream(f"c{k}", *_fields_of(s)), issue))
    start = 0
    while start < len(legal):
        end, total = start, 0
        while end < len(legal) and (end == start or total < SHRINK_BATCH_COMMANDS):
            total += legal[end].stream.commands.shape[0]
            end += 1
        batch = legal[start:end]
        run = harness.run([cs.stream for cs in batch])
        counter[0] += len(batch)
        counter[1] += 1
        for cs in batch:
            msg = _check(cfg, sched, cs, run.issue[cs.stream.name])
            if msg:
                return cs, msg
        start = end
    return None


def _fields_of(s: RtlStream) -> tuple:
    return s.commands, s.valid_gaps, s.ready_pattern


def _simpler_patterns(cs: CampaignStream) -> list[RtlStream]:
    """The stream without its gaps, without its ready pattern, and without both."""
    s = cs.stream
    out = []
    if s.valid_gaps is not None:
        out.append(RtlStream(s.name, s.commands, None, s.ready_pattern))
    if s.ready_pattern is not None:
        out.append(RtlStream(s.name, s.commands, s.valid_gaps, None))
    if len(out) == 2:
        out.insert(0, RtlStream(s.name, s.commands))
    return out


def shrink_stream(block: str, cfg: HardwareConfig, cs: CampaignStream, message: str) -> Shrunk:
    """Cut failing stream ``cs`` down while a mismatch persists (delta debugging).

    First the stream loses its gaps and ready pattern if it still fails without them. Then,
    with ``n`` chunks of commands (``n`` = 2 at first), every stream with one chunk dropped
    is a candidate; the first that still fails is kept (and ``n`` lowered by one), else
    ``n`` doubles, up to one command per chunk. Gaps belong to commands and are dropped with
    them; the ready pattern is per cycle and kept whole. Candidates the TLM refuses without
    gaps (ping-pong streams that are no longer legal) are skipped, so every step is a stream
    the campaign could have drawn. The result is 1-minimal: dropping any single command
    makes the mismatch go away. The candidates of one round run in one testbench process.
    """
    sched = _scheduler(block)
    harness = _harness(block, cfg)
    counter = [0, 0]
    original = int(cs.stream.commands.shape[0])
    cur, msg = cs, message
    found = _first_failing(harness, cfg, sched, cs.index, _simpler_patterns(cur), counter)
    if found:
        cur, msg = found
    cur, msg = shrink_chunks(
        cur,
        msg,
        lambda c: c.stream.commands.shape[0],
        _subset,
        lambda found: _first_failing(harness, cfg, sched, cs.index, found, counter),
    )
    found = _first_failing(harness, cfg, sched, cs.index, _simpler_patterns(cur), counter)
    if found:
        cur, msg = found
    final = CampaignStream(
        cs.index, RtlStream(cs.stream.name, *_fields_of(cur.stream)), cur.tlm_issue, 0, cs.source
    )
    msg = _check(cfg, sched, final, harness.run([final.stream]).issue[final.stream.name]) or msg
    return Shrunk(final, msg, original, counter[0], counter[1] + 1)


def repro_stem(block: str, preset: str, seed: int, index: int, what: str = "stream") -> str:
    """The file name (no suffix) of the reproducer of ``what`` ``index`` of a campaign."""
    return f"{block}-{Path(preset).stem}-seed{seed}-{what}{index}"


def write_reproducer(
    directory: str | Path,
    shrunk: Shrunk,
    *,
    block: str,
    cfg: HardwareConfig,
    preset: str,
    seed: int,
    options: dict[str, object] | None = None,
    overwrite: bool = False,
) -> tuple[Path, Path]:
    """Write ``shrunk`` as ``<block>-<preset>-seed<S>-stream<I>.npz`` (the stream,
    :func:`models.isa.save_stream`) and ``.json`` (its gaps and ready pattern, the mismatch,
    seed, index, block, preset, lengths and the command that replays it) in ``directory``.

    ``preset`` is the ``--preset`` as given (a name or a ``.toml`` path); ``options`` are
    the campaign's other stream options (``{"--kernels": 0.1, ...}``), so that the recorded
    campaign command draws the same streams. Neither file is written if either exists,
    unless ``overwrite``.

    Raises
    ------
    FileExistsError
        A file exists and ``overwrite`` is false.
    """
    directory = Path(directory)
    cs = shrunk.stream
    stem = repro_stem(block, preset, seed, cs.index)
    npz, js = directory / f"{stem}.npz", directory / f"{stem}.json"
    for path in (npz, js):
        check_writable(path, overwrite)
    replay_cmd = ["pimphony", "verify", "campaign", "--replay", str(js)]
    record = {
        "block": block,
        "preset": preset,
        "preset_name": cfg.name,
        "seed": seed,
        "index": cs.index,
        "source": cs.source,
        "stream": npz.name,
        "commands": int(cs.stream.commands.shape[0]),
        "original_commands": shrunk.original_commands,
        "check": "exact" if cs.tlm_issue is not None else "rules-only",
        "valid_gaps": None if cs.stream.valid_gaps is None else list(cs.stream.valid_gaps),
        "ready_pattern": (
            None if cs.stream.ready_pattern is None else list(cs.stream.ready_pattern)
        ),
        "mismatch": shrunk.message,
        "replay": shlex.join(replay_cmd),
        "campaign": shlex.join(
            ["pimphony", "verify", "campaign", "--block", block, "--preset", preset]
            + ["--seed", str(seed), "--streams", str(cs.index + 1)]
            + [str(x) for k, v in (options or {}).items() for x in (k, v)]
        ),
        "shrink": {"candidates": shrunk.candidates, "runs": shrunk.runs},
    }
    save_stream(npz, cs.stream.commands, cfg, meta={"campaign": stem}, overwrite=overwrite)
    write_atomic(js, (json.dumps(record, indent=2) + "\n").encode(), overwrite=overwrite)
    return npz, js


class ReplayError(PimphonyError, ValueError):
    """A reproducer file cannot be replayed (missing, malformed, or a field out of range)."""


def record_field(record: dict, path: Path, name: str, kind: type | tuple[type, ...]):
    """Field ``name`` of reproducer ``record`` (read from ``path``), of type ``kind``."""
    if name not in record:
        raise ReplayError(f"{path}: field {name!r} is missing")
    value = record[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ReplayError(f"{path}: field {name!r} = {value!r} has the wrong type")
    return value


def record_preset(record: dict, path: Path) -> HardwareConfig:
    """The hardware preset field ``preset`` of reproducer ``record`` (read from ``path``)
    names, loaded."""
    preset = record_field(record, path, "preset", str)
    try:
        return load_preset(preset)
    except PimphonyError as exc:
        raise ReplayError(f"{path}: field 'preset': {exc}") from None


def record_pattern(record: dict, path: Path, name: str) -> tuple[int, ...] | None:
    """Field ``name`` of reproducer ``record``: ``None`` or a list of integers."""
    value = record.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ReplayError(f"{path}: field {name!r} must be null or a list of integers")
    return tuple(value)


def replay(path: str | Path) -> tuple[CampaignStream, str, str | None]:
    """Run the reproducer ``path`` (a JSON :func:`write_reproducer` wrote) again.

    Returns ``(stream, block, mismatch message or None)``.

    Raises
    ------
    ReplayError
        The file cannot be read or is not JSON, a field is missing or of the wrong type, or
        the block is not a scheduler block.
    """
    path = Path(path)
    return _replay_record(path, _read_record(path))


def _replay_record(path: Path, record: dict) -> tuple[CampaignStream, str, str | None]:
    """:func:`replay` of the reproducer ``path`` whose JSON is ``record``."""
    block = record_field(record, path, "block", str)
    if block not in SCHEDULER_OF_BLOCK:
        raise ReplayError(
            f"{path}: block = {block!r} is not a scheduler block; allowed: "
            f"{', '.join(SCHEDULER_OF_BLOCK)}"
        )
    index = record_field(record, path, "index", int)
    cfg = record_preset(record, path)
    stream_file = path.parent / record_field(record, path, "stream", str)
    try:
        commands, _ = load_stream(stream_file, cfg)
    except (PimphonyError, OSError) as exc:
        raise ReplayError(f"{path}: field 'stream': {exc}") from None
    stream = RtlStream(
        path.stem,
        commands,
        record_pattern(record, path, "valid_gaps"),
        record_pattern(record, path, "ready_pattern"),
    )
    try:
        encode_streams(cfg, [stream])  # gaps and pattern: lengths and ranges
    except StreamError as exc:
        raise ReplayError(f"{path}: {exc}") from None
    sched = SCHEDULER_OF_BLOCK[block]
    try:
        issue = expectation(cfg, sched, stream)
    except PingPongError as exc:
        raise ReplayError(f"{path}: the TLM refuses the stream ({exc})") from None
    cs = CampaignStream(index, stream, issue, 0, str(record.get("source", "random")))
    rtl = build_harness(block, cfg).run([stream]).issue[stream.name]
    return cs, block, _check(cfg, sched, cs, rtl)


# -- what every block's campaign shares --------------------------------------------------


@dataclass(frozen=True)
class Reproduction:
    """What the CLI reports about a campaign's first mismatch once shrunk and written: the
    lines to print, the ``reproducer`` entry of ``--json``, why it was not written, and notes
    printed in either mode (shrinking stopped early)."""

    lines: tuple[str, ...]
    json: dict
    not_written: str | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReproTarget:
    """Where a campaign's first mismatch is written once shrunk: the hardware ``cfg`` and its
    ``preset`` name, the campaign's ``options``, the ``directory``, and whether an existing
    reproducer is replaced (``overwrite``)."""

    cfg: HardwareConfig
    preset: str
    options: CampaignOptions
    directory: Path
    overwrite: bool

    def write(
        self, writer: Callable[..., F], shrunk: object, failed: CampaignResult, options: object
    ) -> tuple[F | None, str | None]:
        """What ``writer`` (:func:`write_reproducer`, ``write_item``) wrote of ``shrunk``, the
        first mismatch of ``failed`` with the campaign's ``options``, or why it wrote
        nothing."""
        try:
            written = writer(
                self.directory, shrunk, block=failed.block, cfg=self.cfg, preset=self.preset,
                seed=failed.seed, options=options, overwrite=self.overwrite,
            )  # fmt: skip
        except (FileExistsError, PimphonyError) as exc:
            return None, str(exc)
        return written, None


@dataclass(frozen=True)
class Replayed:
    """Outcome of :func:`replay_item` (or :func:`scheduler_replay`): the block,
    what was run (``87 commands (exact)``), the JSON fields of ``--replay --json`` and the
    mismatch message (``None``: no mismatch)."""

    block: str
    what: str
    json: dict
    mismatch: str | None


# -- the scheduler blocks' row of the campaign table ----------------------------------------


def scheduler_reproduce(failed: CampaignResult, to: ReproTarget) -> Reproduction:
    """Shrink the first failing stream of ``failed`` (:func:`shrink_stream`) and write it
    (:func:`write_reproducer`) as ``to`` says."""
    notes: tuple[str, ...] = ()
    try:
        shrunk = shrink_stream(failed.block, to.cfg, failed.failure, failed.mismatches[0])
    except CosimError as exc:  # a candidate hung the testbench: keep the whole stream
        n = int(failed.failure.stream.commands.shape[0])
        shrunk = Shrunk(failed.failure, failed.mismatches[0], n, 0, 0)
        notes = (f"shrinking stopped ({exc}); the reproducer is the whole stream",)
    written, not_written = to.write(write_reproducer, shrunk, failed, to.options.flags())
    lines = [
        f"shrunk stream #{shrunk.stream.index} from {shrunk.original_commands} to "
        f"{shrunk.stream.stream.commands.shape[0]} commands ({shrunk.candidates} candidates "
        f"in {shrunk.runs} testbench runs): {shrunk.message}"
    ]
    if written:
        lines.append(
            f"reproducer: {written[1]} (+ {written[0].name}); replay: "
            f"pimphony verify campaign --replay {written[1]}"
        )
    js = {
        "commands": int(shrunk.stream.stream.commands.shape[0]),
        "original_commands": shrunk.original_commands,
        "mismatch": shrunk.message,
        "files": [str(p) for p in written] if written else None,
        "not_written": not_written,
    }
    return Reproduction(tuple(lines), js, not_written, notes)


def scheduler_replay(path: Path, record: dict) -> Replayed:
    """:func:`replay` of a scheduler block's reproducer, as the CLI reports it."""
    cs, block, msg = _replay_record(path, record)
    n = int(cs.stream.commands.shape[0])
    check = "exact" if cs.tlm_issue is not None else "rules-only"
    return Replayed(block, f"{n} commands ({check})", {"commands": n, "check": check}, msg)


# -- command line ---------------------------------------------------------------------------


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is outside 0 to 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``pimphony verify campaign``."""
    from pimphony.sim.verify.campaign_blocks import CAMPAIGNS

    parser.add_argument(
        "--block",
        nargs="+",
        choices=[*choice_names(CAMPAIGNS), ALL_BLOCKS],
        default=None,
        help=f"RTL block(s) (default dcs); {ALL_BLOCKS!r}: every block in turn",
    )
    parser.add_argument(
        "--preset", default=None, help=f"hardware preset name or .toml (default {DEFAULT_PRESET})"
    )
    parser.add_argument(
        "--streams",
        type=bounded_int(1, 10**8),
        default=1000,
        help="streams (items: one dispatch or bank_slice run) per block",
    )
    add_seed_option(parser, "campaign seed")
    parser.add_argument(
        "--max-length",
        type=bounded_int(1, 100_000),
        default=600,
        help="commands per random stream (DPA: per random program's dispatch), max",
    )
    parser.add_argument(
        "--gaps",
        type=_fraction,
        default=0.5,
        help="fraction of streams with input valid gaps (not DPA: host writes are back to back)",
    )
    parser.add_argument(
        "--ready",
        type=_fraction,
        default=0.2,
        help="fraction of streams with an output ready pattern (checked by the rules; "
        "not dpa_pipeline)",
    )
    parser.add_argument(
        "--kernels",
        type=_fraction,
        default=None,
        help="fraction of streams from the compiler (qk/sv/gemv of random small shapes; "
        "default 0.1, DPA blocks 0.5, bank_slice 0.2)",
    )
    parser.add_argument(
        "--chunk",
        type=bounded_int(1, 100_000),
        default=500,
        help="streams per testbench (simulator) run",
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="run every stream after a mismatch (no reproducer is written then)",
    )
    parser.add_argument(
        "--repro-dir",
        type=Path,
        default=REPRO_DIR,
        help="where the first mismatch's minimal reproducer is written",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing reproducer")
    parser.add_argument(
        "--replay",
        type=Path,
        default=None,
        metavar="JSON",
        help="run a reproducer (the .json a failing campaign wrote) again; exit 1 if it fails",
    )
    parser.add_argument(
        "--workers",
        type=bounded_int(1, 64),
        default=1,
        help="local Ray CPUs (with --address: the workers to split for): each block's "
        "streams run as tasks at once (the same results and output, without the progress "
        "line; 1: no Ray)",
    )
    parser.add_argument(
        "--address", default=None, help="an existing Ray cluster to run the tasks on"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--quiet", action="store_true", help="no progress line on stderr (shown on a terminal)"
    )


def _run_part(task: tuple[Block, HardwareConfig, range, int, Any]) -> CampaignResult:
    """One range of a block's campaign (:func:`campaign_parts`), a task of ``--workers``."""
    from pimphony.sim.verify.campaign_blocks import CAMPAIGNS

    block, cfg, part, seed, options = task
    return CAMPAIGNS[block].run(block, cfg, part, seed, options, None)


def _read_record(path: Path) -> dict:
    try:
        record = json.loads(read_utf8(path, ReplayError))
    except json.JSONDecodeError as exc:
        raise ReplayError(f"{path}: not a campaign reproducer (not JSON: {exc})") from None
    except OSError as exc:
        raise ReplayError(f"{path}: cannot be read ({exc.strerror})") from None
    if not isinstance(record, dict):
        raise ReplayError(f"{path}: not a campaign reproducer (a JSON object is expected)")
    return record


def _run_replay(args: argparse.Namespace) -> int:
    from pimphony.sim.verify.campaign_blocks import CAMPAIGNS

    given = [opt for opt in ("block", "preset") if getattr(args, opt) is not None]
    if given:
        raise PimphonyError(
            f"--replay takes the block and preset from the reproducer; drop "
            f"{', '.join('--' + g for g in given)}"
        )
    record = _read_record(args.replay)
    block = record_field(record, args.replay, "block", str)
    if block not in CAMPAIGNS:
        raise ReplayError(
            f"{args.replay}: block = {block!r} is not an RTL block; allowed: {', '.join(CAMPAIGNS)}"
        )
    done = CAMPAIGNS[Block(block)].replay(args.replay, record)
    msg = done.mismatch
    if args.json:
        out = {"replay": str(args.replay), "block": done.block, **done.json}
        print(json.dumps({**out, "mismatch": msg}, indent=2))
    else:
        verdict = f"mismatch reproduces: {msg}" if msg else "no mismatch (the RTL matches now)"
        print(f"{args.replay}: {done.block}, {done.what}: {verdict}")
    if msg:
        raise CosimError(f"reproducer {args.replay} still fails: {msg}")
    return 0


def format_rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def summary(r: CampaignResult) -> list[str]:
    """The printed lines of a scheduler block's campaign (counts, rates, first mismatches)."""
    lines = [
        f"{r.block} at {r.preset}, seed {r.seed}: {r.streams:,} streams ({r.exact:,} exact "
        f"vs the TLM's cycles, {r.rules_only:,} by the rules; {r.kernels:,} from the compiler; "
        f"{r.redrawn} redrawn), {r.commands:,} commands, {r.cycles:,} cycles",
        f"mismatches: {len(r.mismatches)}; testbench {r.cycles_per_s:,.0f} cycles/s; "
        f"campaign {format_rate(r.streams_per_s)} streams/s ({r.seconds:.1f} s, build "
        f"{r.build_seconds:.0f} s)",
    ]
    return lines + [f"  {msg}" for msg in r.mismatches[:10]]


def _blocks(given: list[str] | None) -> list[Block]:
    """The blocks of ``--block`` (``all``: every block of the campaign table)."""
    from pimphony.sim.verify.campaign_blocks import CAMPAIGNS

    given = given or [Block.DCS]
    if ALL_BLOCKS in given:
        if len(given) > 1:
            raise PimphonyError(f"--block {ALL_BLOCKS} runs every block; name no other block")
        return list(CAMPAIGNS)
    if len(set(given)) < len(given):
        raise PimphonyError(f"--block names a block twice: {' '.join(given)}")
    return [Block(b) for b in given]


def run(args: argparse.Namespace) -> int:
    """Run the campaign of every ``--block`` in turn (every block for ``all``) or ``--replay``
    one reproducer; print the summary (exit status 1 via :class:`CosimError` on a mismatch)."""
    from pimphony.sim.verify.campaign_blocks import CAMPAIGNS, CampaignOptions

    if args.replay is not None:
        return _run_replay(args)
    if args.gaps + args.ready > 1.0:
        raise PimphonyError(
            f"--gaps {args.gaps} plus --ready {args.ready} exceed 1 (they are fractions of "
            "the streams, and a stream has gaps or a ready pattern, not both)"
        )
    if args.repro_dir.exists() and not args.repro_dir.is_dir():
        raise PimphonyError(f"--repro-dir {args.repro_dir} is a file; name a directory")
    blocks = _blocks(args.block)
    preset = args.preset or DEFAULT_PRESET
    cfg = load_preset(preset)
    show = not args.quiet and sys.stderr.isatty()

    def options(block: Block) -> CampaignOptions:
        kernels = CAMPAIGNS[block].kernels if args.kernels is None else args.kernels
        return CampaignOptions(
            args.max_length, args.gaps, args.ready, kernels, args.chunk, args.keep_going
        )

    def progress(r: CampaignResult) -> None:
        if show:
            print(
                f"\r{r.block} [{r.streams}/{args.streams}] {len(r.mismatches)} mismatches, "
                f"{r.cycles_per_s:,.0f} cycles/s",
                end="\n" if r.streams == args.streams or r.mismatches else "",
                file=sys.stderr,
                flush=True,
            )

    results: list[CampaignResult] = []
    parts = campaign_parts(args.streams, args.workers)
    tasks = [(b, cfg, part, args.seed, options(b)) for b in blocks for part in parts]

    def here(task: tuple[Block, HardwareConfig, range, int, Any]) -> CampaignResult:
        b, _, part, *_ = task
        return CAMPAIGNS[b].run(b, cfg, part, args.seed, options(b), progress)

    with ordered_map(_run_part, tasks, args.workers, local=here, address=args.address) as done:
        for b in blocks:  # in block order, each block's parts in index order
            r = next(done)
            for _ in parts[1:]:
                if r.stopped(args.keep_going):
                    break
                r.absorb(next(done))
            results.append(r)
            if not args.json:
                print("\n".join(CAMPAIGNS[b].summary(r)), flush=True)
            if r.mismatches and not args.keep_going:
                break
    failed = next((r for r in results if r.mismatches), None)
    repro: Reproduction | None = None
    if failed is not None and not args.keep_going:
        b = Block(failed.block)
        to = ReproTarget(cfg, preset, options(b), args.repro_dir, args.force)
        repro = CAMPAIGNS[b].reproduce(failed, to)
        for note in repro.notes:
            print(note, flush=True)
    if args.json:
        out: dict = (
            results[0].to_dict() if len(blocks) == 1 else {"blocks": [r.to_dict() for r in results]}
        )
        out["mismatches_total"] = sum(len(r.mismatches) for r in results)
        if repro is not None:
            out["reproducer"] = repro.json
        print(json.dumps({**out, "provenance": provenance(args, cfg)}, indent=2))
    elif repro is not None:
        print("\n".join(repro.lines))
    if failed is not None:
        total = sum(len(r.mismatches) for r in results)
        unit = CAMPAIGNS[Block(failed.block)].unit
        why = repro.not_written if repro is not None else None
        where = f"; reproducer not written: {why}" if why else ""
        raise CosimError(
            f"{total} {unit}(s) differ from the TLM ({failed.block}); first: "
            f"{failed.mismatches[0]}{where}"
        )
    return 0
