"""The streaming channel TLM (models.channel.ChannelRun, models.tally) against the whole-stream
reference (run_channel_reference): identical issue cycles, row switches, statistics and errors,
wherever the chunks end."""

from __future__ import annotations

import dataclasses
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pimphony.compiler.kernels import compile_gemv, compile_kernel, compile_qk
from pimphony.models.channel import (
    SCHEDULERS,
    ChannelRun,
    run_channel,
    run_channel_reference,
    run_channels,
    stream_chunks,
)
from pimphony.models.config import load_preset
from pimphony.models.isa import Op, StreamError, make_stream
from pimphony.models.pingpong import PingPongError
from pimphony.sim.verify.streams import random_pingpong_stream, random_stream, repeated_gemv_chunks

PRESETS = ("aim-16ch", "aim-ramulator", "lolpim-aimx-io")


def _same(a, b) -> None:
    """Every output of two runs is equal."""
    assert a.to_dict() == b.to_dict()
    for name in ("issue", "completion", "row_switches"):
        x, y = getattr(a, name), getattr(b, name)
        assert x is not None and y is not None
        np.testing.assert_array_equal(x, y, err_msg=name)


def _chunked(stream, cfg, sched, cuts, gaps=None):
    """``stream`` fed to a :class:`ChannelRun` cut at ``cuts``."""
    run = ChannelRun(cfg, sched, record=stream.shape[0])
    bounds = [0, *sorted(set(cuts)), stream.shape[0]]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        run.feed(stream[lo:hi], None if gaps is None else gaps[lo:hi])
    return run.finish()


def _kernels(cfg):
    group = min(4, cfg.channel.obuf_entries // 2)  # the largest row-reuse group up to 4
    return [
        compile_gemv(cfg, 256, 256).commands,
        compile_gemv(cfg, 1024, 512, batch=3).commands,
        compile_qk(cfg, 512, 128).commands,
        compile_qk(cfg, 640, 128, gqa_group=group).commands,
        compile_kernel(cfg, "sv", tokens=512, d_h=128).commands,
    ]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("sched", list(SCHEDULERS))
def test_compiler_kernels_equal_reference(preset, sched):
    cfg = load_preset(preset)
    for stream in _kernels(cfg):
        ref = run_channel_reference(stream, cfg, sched)
        _same(run_channel(stream, cfg, sched), ref)
        stats = run_channel(stream, cfg, sched, record=False)
        assert stats.to_dict() == ref.to_dict() and stats.issue is None


@pytest.mark.parametrize("sched", list(SCHEDULERS))
@pytest.mark.parametrize("which", ["kernel", "random"])
def test_every_chunk_boundary(sched, which):
    """Chunks of 1, 2, 3, 5 and 7 commands cut the stream at every command, so at every kind
    of command, inside every row switch and at every ping-pong hand-off."""
    cfg = load_preset("aim-ramulator")  # t_MOD > 0: the mode carries over chunks too
    if which == "kernel":
        stream = compile_qk(cfg, 512, 128, gqa_group=2).commands
    else:
        stream = random_pingpong_stream(cfg, 250, 5)  # legal under every scheduler
    ref = run_channel_reference(stream, cfg, sched)
    assert ref.row_switch_count > 2
    if sched == "pingpong":
        assert ref.extra["phases"] > (1 if which == "kernel" else 10)
        assert ref.extra["handoff_stall"] > 0
    for size in (1, 2, 3, 5, 7):
        _same(_chunked(stream, cfg, sched, range(size, stream.shape[0], size)), ref)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    sched=st.sampled_from(list(SCHEDULERS)),
    preset=st.sampled_from(PRESETS),
    cuts=st.lists(st.integers(0, 300), max_size=6),
    gap_high=st.sampled_from([1, 3]),
)
def test_random_streams_random_cuts(seed, sched, preset, cuts, gap_high):
    """Random legal streams, random input gaps, random chunk boundaries: equal to the
    reference, or the same error."""
    cfg = load_preset(preset)
    n = 300
    if sched == "pingpong":
        stream = random_pingpong_stream(cfg, n, seed)
    else:
        stream = random_stream(cfg, n, seed)
    gaps = np.random.default_rng(seed).integers(0, gap_high, n)
    try:
        ref = run_channel_reference(stream, cfg, sched, valid_gaps=gaps)
    except PingPongError as exc:
        with pytest.raises(PingPongError) as got:
            _chunked(stream, cfg, sched, cuts, gaps)
        assert str(got.value) == str(exc)
        return
    _same(_chunked(stream, cfg, sched, cuts, gaps), ref)
    _same(run_channel(stream, cfg, sched, valid_gaps=gaps), ref)


def test_pingpong_illegal_stream_named_as_before():
    """A stream ping-pong refuses is refused with the reference's message, wherever cut."""
    w, m, r = Op.WR_INP, Op.MAC, Op.RD_OUT
    # The WR_INP at 2 writes GBuf[1], in the half phase 0 reads, for a MAC of phase 0.
    stream = make_stream([(w, 0), (m, 0, 0, 0, 0), (w, 1), (m, 1, 0, 0, 1), (r, 0), (r, 1)])
    cfg = load_preset("aim-16ch")
    with pytest.raises(PingPongError) as ref:
        run_channel_reference(stream, cfg, "pingpong")
    for cuts in ([], [1], [2], [3], [1, 2, 3, 4, 5]):
        with pytest.raises(PingPongError) as got:
            _chunked(stream, cfg, "pingpong", cuts)
        assert str(got.value) == str(ref.value)
    assert "at command 2 (WR_INP)" in str(ref.value)


def test_dcs_deadlock_and_bad_fields_are_errors():
    cfg = load_preset("aim-16ch")
    bad = make_stream([(Op.MAC, 0, 0, 0, 0)])
    bad["row"][0] = cfg.channel.rows_per_bank
    run = ChannelRun(cfg, "dcs")
    run.feed(make_stream([(Op.WR_INP, 0)]))
    with pytest.raises(StreamError, match=r"command 1 \(MAC\): row = "):
        run.feed(bad)  # the index names the command in the whole stream
    with pytest.raises(ValueError, match="valid_gaps must be 2"):
        run_channel(make_stream([(Op.WR_INP, 0)] * 2), cfg, "dcs", valid_gaps=[0])


@pytest.mark.parametrize("sched", list(SCHEDULERS))
@pytest.mark.parametrize(("depth", "tccd"), [(1, 1), (1, 2), (2, 1), (3, 4), (64, 2)])
def test_mac_runs_in_closed_form_under_other_timing(sched, depth, tccd):
    """Runs of MACs on one row, taken in closed form by every kernel, under queue depths and
    tCCDs the presets do not have (the closed forms' conditions depend on both), with and
    without input gaps, cut into chunks: equal to the reference."""
    base = load_preset("aim-16ch")
    cfg = dataclasses.replace(
        base,
        dcs=dataclasses.replace(base.dcs, queue_depth=depth),
        timing=dataclasses.replace(base.timing, tCCD=tccd),
    )
    streams = [compile_gemv(cfg, 128, 256).commands, compile_qk(cfg, 256, 128).commands]
    for k, stream in enumerate(streams):
        n = stream.shape[0]
        rng = np.random.default_rng(k)
        for gaps in (None, rng.integers(0, 3, n) * (rng.random(n) < 0.2)):
            ref = run_channel_reference(stream, cfg, sched, valid_gaps=gaps)
            _same(run_channel(stream, cfg, sched, valid_gaps=gaps), ref)
            _same(_chunked(stream, cfg, sched, [n // 3, n // 3 + 1, 2 * n // 3], gaps), ref)


def test_run_channels_equals_one_call_per_channel():
    cfg = load_preset("aim-16ch")
    streams = [
        compile_gemv(cfg, 256, 256).commands,
        compile_qk(cfg, 128, 128).commands,
        random_stream(cfg, 200, 3),
    ]
    for sched in SCHEDULERS:
        if sched == "pingpong":
            streams = [streams[0], random_pingpong_stream(cfg, 200, 3), streams[0][:0]]
        gaps = [np.arange(s.shape[0]) % 3 for s in streams]
        many = run_channels(streams, cfg, sched, valid_gaps=gaps)
        for s, g, got in zip(streams, gaps, many, strict=True):
            assert got.to_dict() == run_channel_reference(s, cfg, sched, g).to_dict()
    bad = make_stream([(Op.WR_INP, 0), (Op.MAC, 0, 0, 0, 0), (Op.WR_INP, 1)])
    bad = np.concatenate([bad, make_stream([(Op.MAC, 1, 0, 0, 1), (Op.RD_OUT, 0)])])
    with pytest.raises(PingPongError, match="at command 2 "):
        run_channels([streams[0], bad], cfg, "pingpong")


@pytest.mark.parametrize("sched", list(SCHEDULERS))
def test_memory_does_not_grow_with_the_stream(sched):
    """Peak traced memory of a statistics-only run: the same for 4x the commands, and the
    statistics scale exactly (the stream repeats)."""
    cfg = load_preset("aim-16ch")
    chunk = 2 * compile_gemv(cfg, 512, 512).commands.shape[0] * 4
    peaks, results = [], []
    for total in (chunk * 4, chunk * 16):
        gen = repeated_gemv_chunks(cfg, total, chunk)
        first = next(gen)
        tracemalloc.start()
        run = ChannelRun(cfg, sched)
        run.feed(first)
        for block in gen:
            run.feed(block)
        results.append(run.finish())
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < peaks[0] * 1.1 + (1 << 20), peaks
    small, large = results
    assert large.counts == {k: 4 * v for k, v in small.counts.items()}
    assert large.row_switch_count == 4 * small.row_switch_count


def test_stream_chunks_are_views():
    cfg = load_preset("aim-16ch")
    stream = compile_gemv(cfg, 256, 256).commands
    parts = list(stream_chunks(stream, 100))
    assert sum(p.shape[0] for p in parts) == stream.shape[0]
    assert all(np.shares_memory(p, stream) for p in parts)
