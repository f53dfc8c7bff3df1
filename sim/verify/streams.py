"""Command streams for RTL-vs-TLM checks: compiler kernels and seeded random legal streams.

:func:`random_stream` mixes opcodes over both buffer halves freely (legal for the static and
DCS schedulers); :func:`random_pingpong_stream` builds streams that ping-pong buffering
accepts (``models.pingpong.pingpong_slots`` finds no illegal command). :func:`accepted_gaps`
draws input ``valid`` gaps the TLM accepts, and :func:`cosim_streams` is the stream set every
RTL harness is checked on (``tests/test_cosim.py``, ``tests/test_compiled_harness.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from pimphony.compiler.kernels import compile_kernel
from pimphony.models.channel import run_channel
from pimphony.models.config import HardwareConfig
from pimphony.models.isa import Op, empty_stream
from pimphony.models.pingpong import PingPongError, pingpong_slots

if TYPE_CHECKING:
    from pimphony.sim.verify.scheduler import RtlStream

__all__ = [
    "COSIM_KERNELS",
    "COSIM_RANDOM_LEN",
    "COSIM_RANDOM_SEEDS",
    "accepted_gaps",
    "cosim_streams",
    "kernel_streams",
    "random_pingpong_stream",
    "random_stream",
    "repeated_gemv_chunks",
]

COSIM_KERNELS: tuple[tuple[str, str, dict], ...] = (
    ("qk-T256-dh64", "qk", {"tokens": 256, "d_h": 64}),
    ("qk-T512-dh128", "qk", {"tokens": 512, "d_h": 128}),
    ("sv-T512-dh64", "sv", {"tokens": 512, "d_h": 64}),
    ("sv-T1024-dh128", "sv", {"tokens": 1024, "d_h": 128}),
    ("qk-gqa4-T256-dh128", "qk", {"tokens": 256, "d_h": 128, "gqa_group": 4}),
    ("sv-gqa4-T256-dh128", "sv", {"tokens": 256, "d_h": 128, "gqa_group": 4}),
    ("gemv-64x512", "gemv", {"d_out": 64, "d_in": 512}),
    ("gemv-100x300", "gemv", {"d_out": 100, "d_in": 300}),
    ("gemv-256x1024", "gemv", {"d_out": 256, "d_in": 1024}),
    # Batched FC GEMVs (row reuse over requests): one pass of 5; passes of 8 + 2 with two
    # output blocks, so every input tile is written twice and the last pass is partial.
    ("gemv-b5-100x300", "gemv", {"d_out": 100, "d_in": 300, "batch": 5}),
    ("gemv-b10-p8-128x256", "gemv", {"d_out": 128, "d_in": 256, "batch": 10, "pass_size": 8}),
)
"""Compiler-generated streams every co-simulation run checks (name, kernel, shape)."""


def kernel_streams(cfg: HardwareConfig) -> dict[str, np.ndarray]:
    """The :data:`COSIM_KERNELS` streams compiled for ``cfg``."""
    return {
        name: compile_kernel(cfg, kind, **shape).commands for name, kind, shape in COSIM_KERNELS
    }


def random_stream(
    cfg: HardwareConfig, n: int, seed: int, entries: int = 6, rows: int = 3
) -> np.ndarray:
    """A seeded random legal stream: any mix of opcodes over a few entries in both halves.

    Few entries and rows make dependencies, is-MAC chains, queue stalls and row switches
    frequent; every field is in range for ``cfg``.
    """
    rng = np.random.default_rng(seed)
    ch = cfg.channel
    s = empty_stream(n)
    op = rng.choice(3, n, p=[0.3, 0.5, 0.2])
    half_g, half_o = ch.gbuf_entries // 2, ch.obuf_entries // 2
    g = rng.integers(0, min(entries, half_g), n) + half_g * rng.integers(0, 2, n)
    o = rng.integers(0, min(entries, half_o), n) + half_o * rng.integers(0, 2, n)
    s["op"] = op
    s["gbuf"] = np.where(op != Op.RD_OUT, g, 0)
    s["out"] = np.where(op != Op.WR_INP, o, 0)
    s["row"] = np.where(op == Op.MAC, rng.integers(0, min(rows, ch.rows_per_bank), n), 0)
    s["col"] = np.where(op == Op.MAC, rng.integers(0, ch.columns_per_row, n), 0)
    return s


def random_pingpong_stream(
    cfg: HardwareConfig,
    n: int,
    seed: int,
    entries: int = 6,
    rows: int = 3,
    switch: float = 0.15,
    row_switch: float = 0.2,
) -> np.ndarray:
    """A seeded random stream that the ping-pong scheduler accepts, ``n`` commands long.

    MACs keep the (GBuf half, OBuf half) of the previous MAC and switch to other halves with
    probability ``switch``, so compute phases hold a few MACs each; WR_INP mostly prefetches
    into the GBuf half the current phase does not read and RD_OUT mostly drains the OBuf half
    it does not write, with some of each on the busy half (deferred to the next slot). Every
    command :func:`models.pingpong.pingpong_slots` finds illegal is dropped until none is
    left, then the stream is cut to ``n`` commands (a prefix of a legal stream is legal).

    Parameters
    ----------
    cfg
        Hardware configuration (buffer halves and field ranges).
    n
        Number of commands.
    seed
        Seed of the random generator.
    entries, rows
        Entries used per buffer half and rows used (few: frequent row switches and reuse).
    switch
        Probability that a MAC starts a new compute phase on other buffer halves.
    row_switch
        Probability that a MAC reads another row than the previous MAC.

    Returns
    -------
    numpy.ndarray
        Command stream (:data:`models.isa.COMMAND_DTYPE`).
    """
    rng = np.random.default_rng(seed)
    ch = cfg.channel
    half_g, half_o = ch.gbuf_entries // 2, ch.obuf_entries // 2
    e_g, e_o = min(entries, half_g), min(entries, half_o)
    total = 2 * n + 16
    s = empty_stream(total)
    gh = oh = row = 0
    n_rows = min(rows, ch.rows_per_bank)
    for k in range(total):
        kind = rng.choice(3, p=[0.3, 0.5, 0.2])
        if kind == Op.MAC:
            if rng.random() < switch:
                gh, oh = [(a, b) for a in (0, 1) for b in (0, 1) if (a, b) != (gh, oh)][
                    rng.integers(3)
                ]
            s[k]["op"] = Op.MAC
            s[k]["gbuf"] = gh * half_g + rng.integers(e_g)
            s[k]["out"] = oh * half_o + rng.integers(e_o)
            if rng.random() < row_switch:
                row = (row + 1 + rng.integers(max(n_rows - 1, 1))) % n_rows
            s[k]["row"] = row
            s[k]["col"] = rng.integers(ch.columns_per_row)
        elif kind == Op.WR_INP:
            half = gh if rng.random() < 0.15 else 1 - gh
            s[k]["op"] = Op.WR_INP
            s[k]["gbuf"] = half * half_g + rng.integers(e_g)
        else:
            half = oh if rng.random() < 0.3 else 1 - oh
            s[k]["op"] = Op.RD_OUT
            s[k]["out"] = half * half_o + rng.integers(e_o)
    while True:
        op = s["op"].astype(np.int64)
        bad = pingpong_slots(
            op,
            s["gbuf"].astype(np.int64),
            s["out"].astype(np.int64),
            ch.gbuf_entries,
            ch.obuf_entries,
        )[4]
        if bad < 0:
            break
        s = np.delete(s, bad)
    if s.shape[0] < n:
        raise ValueError(f"only {s.shape[0]} legal commands left of {total}; lower n")
    return s[:n].copy()


def repeated_gemv_chunks(cfg: HardwareConfig, total: int, chunk: int):
    """``total`` commands of a GEMV 512 x 512 and its twin on the other buffer halves, repeated
    (legal under every scheduler, ping-pong included, across the seams), yielded in chunks of
    about ``chunk`` commands: a stream of any length that is never held whole."""
    a = compile_kernel(cfg, "gemv", d_out=512, d_in=512).commands
    b = a.copy()
    half_g, half_o = cfg.channel.gbuf_entries // 2, cfg.channel.obuf_entries // 2
    b["gbuf"] = np.where(b["op"] != Op.RD_OUT, (b["gbuf"] + half_g) % (2 * half_g), 0)
    b["out"] = np.where(b["op"] != Op.WR_INP, (b["out"] + half_o) % (2 * half_o), 0)
    pair = np.concatenate([a, b])
    block = np.concatenate([pair] * max(1, chunk // pair.shape[0]))
    done = 0
    while done < total:
        part = block[: total - done]
        done += part.shape[0]
        yield part


def accepted_gaps(
    cfg: HardwareConfig,
    sched: str,
    s: np.ndarray,
    rng: np.random.Generator,
    high: int = 3,
    tries: int = 50,
) -> tuple[int, ...] | None:
    """Seeded input gaps of 0 to ``high - 1`` cycles that the TLM accepts for ``s``.

    Ping-pong refuses gaps after which a command would arrive for a slot already handed off
    (no look-ahead); draw again, up to ``tries`` times (``None`` if every draw is refused).
    """
    for _ in range(tries):
        gaps = rng.integers(0, high, s.shape[0])
        try:
            run_channel(s, cfg, sched, valid_gaps=gaps)
        except PingPongError:
            continue
        return tuple(int(g) for g in gaps)
    return None


COSIM_RANDOM_SEEDS = (11, 12, 13)
"""Seeds of the random streams of :func:`cosim_streams`."""
COSIM_RANDOM_LEN = 600
"""Commands per random stream of :func:`cosim_streams`."""


def cosim_streams(cfg: HardwareConfig, sched: str) -> list[RtlStream]:
    """The streams every RTL harness runs for TLM scheduler ``sched``: the
    :data:`COSIM_KERNELS`, and per seed of :data:`COSIM_RANDOM_SEEDS` a random legal stream
    as is (``random-<seed>``), with input gaps the TLM accepts (``-valid-gaps``) and with a
    61-cycle output ``ready`` pattern (``-ready-gaps``; the TLM cannot predict those cycles,
    only the rules, ``models.channel.check_schedule``)."""
    from pimphony.sim.verify.scheduler import RtlStream  # loads Amaranth; the random streams do not

    streams = [RtlStream(name, s) for name, s in kernel_streams(cfg).items()]
    make = random_pingpong_stream if sched == "pingpong" else random_stream
    for seed in COSIM_RANDOM_SEEDS:
        s = make(cfg, COSIM_RANDOM_LEN, seed)
        rng = np.random.default_rng(seed)
        streams.append(RtlStream(f"random-{seed}", s))
        gaps = accepted_gaps(cfg, sched, s, rng)
        if gaps is None:
            raise ValueError(f"no input gaps for random-{seed} that {sched} accepts")
        streams.append(RtlStream(f"random-{seed}-valid-gaps", s, valid_gaps=gaps))
        ready = tuple(int(r) for r in rng.integers(0, 2, 61))
        streams.append(RtlStream(f"random-{seed}-ready-gaps", s, ready_pattern=ready))
    return streams
