"""``pimphony verify campaign``: seeded random streams on a scheduler block's compiled harness
(:mod:`sim.verify.compiled`) against the TLM.

Stream ``i`` of a campaign with seed ``S`` comes from numpy's generator seeded ``(S, i)``, so
any stream can be drawn again alone (:func:`campaign_stream`): a random legal stream of 1 to
``max_length`` commands over 1-8 buffer entries per half and 1-4 rows
(:func:`sim.verify.streams.random_stream`; for ping-pong,
:func:`~sim.verify.streams.random_pingpong_stream`), and with probability ``gaps`` input
``valid`` gaps (each command idle with a drawn probability, for 1 to 2, 8 or 40 cycles), or
with probability ``ready`` an output ``ready`` pattern (1-64 cycles, cycled).

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
one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from models.channel import check_schedule, run_channel
from models.config import HardwareConfig, load_preset
from models.errors import PimphonyError
from models.isa import describe_command
from models.pingpong import PingPongError
from rtl.blocks import SCHEDULER_OF_BLOCK
from sim.cli import SEED, bounded_int, choice_names
from sim.provenance import provenance
from sim.verify.compiled import CompiledRun, build_harness
from sim.verify.runner import CosimError
from sim.verify.scheduler import RtlStream
from sim.verify.streams import random_pingpong_stream, random_stream

__all__ = [
    "CampaignResult",
    "CampaignStream",
    "add_arguments",
    "campaign_stream",
    "run",
    "run_campaign",
]

GAP_LENGTHS = (2, 8, 40)
"""Longest input gap of a stream with gaps (one drawn per stream)."""
GAP_TRIES = 20
"""Draws of ping-pong gaps before keeping refused ones (the stream is then rules-only)."""
REDRAWS = 100
"""Draws of a ping-pong stream the TLM refuses without gaps before giving up."""


@dataclass(frozen=True)
class CampaignStream:
    """One campaign stream and what it is checked against.

    ``tlm_issue`` is the TLM's issue cycle of every command for an exact stream, else
    ``None`` (rules-only: :func:`models.channel.check_schedule`). ``redrawn`` counts the
    streams drawn before it that the TLM refused even without gaps.
    """

    index: int
    stream: RtlStream
    tlm_issue: np.ndarray | None
    redrawn: int = 0

    def describe(self) -> str:
        """``#12 (87 commands, valid gaps)``-style text."""
        s = self.stream
        what = [f"{s.commands.shape[0]} commands"]
        if s.valid_gaps is not None:
            what.append("valid gaps")
        if s.ready_pattern is not None:
            what.append(f"ready pattern of {len(s.ready_pattern)}")
        return f"#{self.index} ({', '.join(what)})"


def _draw_gaps(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    p = rng.uniform(0.05, 0.6)
    longest = int(rng.choice(GAP_LENGTHS))
    gaps = np.where(rng.random(n) < p, rng.integers(1, longest + 1, n), 0)
    return tuple(int(g) for g in gaps)


def campaign_stream(
    cfg: HardwareConfig,
    sched: str,
    seed: int,
    index: int,
    max_length: int = 600,
    gaps: float = 0.5,
    ready: float = 0.2,
) -> CampaignStream:
    """Stream ``index`` of the campaign with ``seed`` (see the module docstring)."""
    rng = np.random.default_rng([seed, index])
    n = int(rng.integers(1, max_length + 1))
    entries, rows = int(rng.integers(1, 9)), int(rng.integers(1, 5))
    make = random_pingpong_stream if sched == "pingpong" else random_stream
    redrawn = 0
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
    kind = rng.random()
    name = f"{seed}-{index}"
    if kind < ready:
        length = int(rng.integers(1, 65))
        pattern = rng.random(length) < rng.uniform(0.2, 0.9)
        pattern[rng.integers(length)] = True  # something can issue
        stream = RtlStream(name, commands, ready_pattern=tuple(int(r) for r in pattern))
        return CampaignStream(index, stream, None, redrawn)
    if kind >= ready + gaps:
        return CampaignStream(index, RtlStream(name, commands), plain, redrawn)
    for _ in range(GAP_TRIES):
        valid_gaps = _draw_gaps(rng, n)
        try:
            issue = run_channel(commands, cfg, sched, valid_gaps=valid_gaps).issue
        except PingPongError:  # a command late for its slot: the RTL is safe, not exact
            continue
        return CampaignStream(index, RtlStream(name, commands, valid_gaps), issue, redrawn)
    return CampaignStream(index, RtlStream(name, commands, valid_gaps), None, redrawn)


def _check(cfg: HardwareConfig, sched: str, cs: CampaignStream, rtl: np.ndarray) -> str | None:
    """``None`` if the RTL schedule of ``cs`` is right, else a message naming what is not."""
    s = cs.stream
    if cs.tlm_issue is None:
        problems = check_schedule(s.commands, rtl, cfg, sched)
        return f"stream {cs.describe()}: {'; '.join(problems)}" if problems else None
    diff = np.flatnonzero(cs.tlm_issue != rtl)
    if diff.size == 0:
        return None
    k = int(diff[0])
    return (
        f"stream {cs.describe()}: first differing command #{k} "
        f"({describe_command(s.commands, k)}): RTL issued at cycle {int(rtl[k])}, TLM at cycle "
        f"{int(cs.tlm_issue[k])}; {diff.size} of {cs.tlm_issue.size} commands differ"
    )


@dataclass
class CampaignResult:
    """Outcome of :func:`run_campaign`.

    ``exact`` streams were compared with the TLM's cycles, ``rules_only`` ones with the
    scheduler's rules, ``redrawn`` counts streams drawn again (:func:`campaign_stream`);
    ``mismatches`` holds one message per failing stream. ``sim_seconds`` is the testbench's
    simulation time, ``seconds`` the whole campaign's
    (drawing streams and running the TLM included, the build excluded).
    """

    block: str
    preset: str
    seed: int
    streams: int = 0
    exact: int = 0
    rules_only: int = 0
    redrawn: int = 0
    commands: int = 0
    cycles: int = 0
    sim_seconds: float = 0.0
    seconds: float = 0.0
    build_seconds: float = 0.0
    mismatches: list[str] = field(default_factory=list)

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
        d = asdict(self)
        d["mismatches"] = len(self.mismatches)
        d["first_mismatches"] = self.mismatches[:10]
        d["cycles_per_s"] = self.cycles_per_s
        d["streams_per_s"] = self.streams_per_s
        return d


def _chunks(total: int, size: int) -> Iterator[range]:
    for start in range(0, total, size):
        yield range(start, min(start + size, total))


def run_campaign(
    block: str,
    cfg: HardwareConfig,
    streams: int,
    seed: int,
    *,
    max_length: int = 600,
    gaps: float = 0.5,
    ready: float = 0.2,
    chunk: int = 500,
    progress: Callable[[CampaignResult], None] | None = None,
) -> CampaignResult:
    """Run ``streams`` random streams on scheduler ``block``'s compiled harness at ``cfg``.

    ``gaps`` and ``ready`` are the fractions of streams with input gaps and with an output
    ready pattern; ``chunk`` streams go to one testbench process. ``progress(result)`` is
    called after every chunk.

    Raises
    ------
    CosimError
        ``block`` is not a scheduler block, the harness could not be built, or the testbench
        failed (a stream that never completed).
    """
    if block not in SCHEDULER_OF_BLOCK:
        raise CosimError(
            f"block {block!r} is not a scheduler block; allowed: {', '.join(SCHEDULER_OF_BLOCK)}"
        )
    sched = SCHEDULER_OF_BLOCK[block]
    harness = build_harness(block, cfg)
    result = CampaignResult(block, cfg.name, seed, build_seconds=harness.build_seconds)
    started = time.perf_counter()

    def settle(batch: list[CampaignStream], run: CompiledRun) -> None:
        for cs in batch:
            rtl = run.issue[cs.stream.name]
            msg = _check(cfg, sched, cs, rtl)
            if msg:
                result.mismatches.append(msg)
            result.streams += 1
            result.exact += cs.tlm_issue is not None
            result.rules_only += cs.tlm_issue is None
            result.redrawn += cs.redrawn
            result.commands += int(cs.stream.commands.shape[0])
        result.cycles += run.total_cycles
        result.sim_seconds += run.sim_seconds
        result.seconds = time.perf_counter() - started
        if progress:
            progress(result)

    # One testbench process at a time: chunk k + 1 is drawn (and run on the TLM) while chunk k
    # simulates, and chunk k is checked while chunk k + 1 simulates.
    pending = None
    for indices in _chunks(streams, chunk):
        batch = [campaign_stream(cfg, sched, seed, i, max_length, gaps, ready) for i in indices]
        done = (pending[0], pending[1].wait()) if pending is not None else None
        pending = (batch, harness.start([cs.stream for cs in batch]))
        if done is not None:
            settle(*done)
    if pending is not None:
        settle(pending[0], pending[1].wait())
    return result


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
    parser.add_argument(
        "--block", choices=choice_names(SCHEDULER_OF_BLOCK), default="dcs", help="RTL block"
    )
    parser.add_argument("--preset", default="aim-16ch", help="hardware preset name or .toml")
    parser.add_argument(
        "--streams", type=bounded_int(1, 10**8), default=1000, help="random streams to run"
    )
    parser.add_argument("--seed", type=SEED, default=0, help="campaign seed")
    parser.add_argument(
        "--max-length", type=bounded_int(1, 100_000), default=600, help="commands per stream, max"
    )
    parser.add_argument(
        "--gaps", type=_fraction, default=0.5, help="fraction of streams with input valid gaps"
    )
    parser.add_argument(
        "--ready",
        type=_fraction,
        default=0.2,
        help="fraction of streams with an output ready pattern (checked by the rules)",
    )
    parser.add_argument(
        "--chunk", type=bounded_int(1, 100_000), default=500, help="streams per testbench run"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--quiet", action="store_true", help="no progress line on stderr (shown on a terminal)"
    )


def run(args: argparse.Namespace) -> int:
    """Run the campaign; print its summary (exit status 1 via :class:`CosimError` if any
    stream mismatched)."""
    if args.gaps + args.ready > 1.0:
        raise PimphonyError(
            f"--gaps {args.gaps} plus --ready {args.ready} exceed 1 (they are fractions of "
            "the streams, and a stream has gaps or a ready pattern, not both)"
        )
    cfg = load_preset(args.preset)
    show = not args.quiet and sys.stderr.isatty()

    def progress(r: CampaignResult) -> None:
        if show:
            print(
                f"\r[{r.streams}/{args.streams}] {len(r.mismatches)} mismatches, "
                f"{r.cycles_per_s:,.0f} cycles/s",
                end="\n" if r.streams == args.streams else "",
                file=sys.stderr,
                flush=True,
            )

    r = run_campaign(
        args.block,
        cfg,
        args.streams,
        args.seed,
        max_length=args.max_length,
        gaps=args.gaps,
        ready=args.ready,
        chunk=args.chunk,
        progress=progress,
    )
    if args.json:
        print(json.dumps({**r.to_dict(), "provenance": provenance(args, cfg)}, indent=2))
    else:
        print(
            f"{r.block} at {r.preset}, seed {r.seed}: {r.streams:,} streams ({r.exact:,} exact "
            f"vs the TLM's cycles, {r.rules_only:,} by the rules; {r.redrawn} redrawn), "
            f"{r.commands:,} commands, {r.cycles:,} cycles"
        )
        print(
            f"mismatches: {len(r.mismatches)}; testbench {r.cycles_per_s:,.0f} cycles/s; "
            f"campaign {r.streams_per_s:,.0f} streams/s ({r.seconds:.1f} s, build "
            f"{r.build_seconds:.0f} s)"
        )
        for msg in r.mismatches[:10]:
            print(f"  {msg}")
    if r.mismatches:
        raise CosimError(
            f"{len(r.mismatches)} of {r.streams} streams differ from the TLM; first: "
            f"{r.mismatches[0]}"
        )
    return 0
