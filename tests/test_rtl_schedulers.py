"""RTL schedulers in Amaranth's Python simulator against the TLM (Glasgow-style, fast).

The Verilator co-simulation (tests/test_cosim.py) repeats these checks on the generated
Verilog with longer streams.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, settings
from hypothesis import strategies as st
from pimphony.compiler.kernels import compile_qk, compile_sv
from pimphony.models.channel import check_schedule, run_channel
from pimphony.models.config import load_preset
from pimphony.models.pingpong import PingPongError
from pimphony.rtl.blocks import BLOCK_OF_SCHEDULER, BLOCKS
from pimphony.rtl.dcs import DcsScheduler
from pimphony.rtl.pingpong import PingPongScheduler, slot_bits
from pimphony.sim.verify.scheduler import RtlStream, compare_with_tlm, simulate_scheduler
from pimphony.sim.verify.streams import random_pingpong_stream, random_stream

from tests.helpers import quick_and_long, run_examples, stream_cases
from tests.test_scheduling import (
    CONVENTIONS,
    EXAMPLE,
    EXPECTED,
    MODE_EXPECTED,
    MODE_STREAM,
    PP_MODE_EXPECTED,
    PP_MODE_STREAM,
    TILE,
)

SCHEDS = list(BLOCK_OF_SCHEDULER)


def _dut(sched: str, cfg):
    """The block of ``sched`` at its co-simulation sizes (cycle-exact runs need ping-pong
    queues that never fill)."""
    spec = BLOCKS[BLOCK_OF_SCHEDULER[sched]]
    return spec.build(cfg, **spec.cosim_args)


def _rtl_matches(sched: str, cfg, stream: np.ndarray, gaps: np.ndarray | None, tlm) -> None:
    """The RTL of ``sched`` issues ``stream`` (input gaps ``gaps`` or none) at the TLM's
    issue cycles ``tlm``."""
    gaps_list = None if gaps is None else gaps.tolist()
    rtl = simulate_scheduler(_dut(sched, cfg), stream, valid_gaps=gaps_list)
    diff = np.flatnonzero(rtl != tlm)
    assert diff.size == 0, f"command #{diff[0]}: RTL {rtl[diff[0]]}, TLM {tlm[diff[0]]}"


def _random(cfg, sched: str, n: int, seed: int) -> np.ndarray:
    """A seeded random stream the scheduler accepts (ping-pong needs legal buffer halves)."""
    if sched == "pingpong":
        return random_pingpong_stream(cfg, n, seed)
    return random_stream(cfg, n, seed)


@pytest.fixture(scope="module")
def small_cfg():
    # 2-deep queues, 4-bit IDs and 10-bit timestamps: queues fill, IDs and timestamps wrap.
    return load_preset("aim-16ch").replace(
        **{"dcs.queue_depth": 2, "dcs.id_bits": 3, "dcs.timestamp_bits": 10}
    )


@pytest.mark.parametrize("sched", SCHEDS)
def test_worked_example_cycle_exact(cfg, sched):
    rtl = simulate_scheduler(_dut(sched, cfg), EXAMPLE)
    assert rtl.tolist() == EXPECTED[sched][0]


@pytest.mark.parametrize("sched", SCHEDS)
@pytest.mark.parametrize(
    "make",
    [lambda c: compile_qk(c, 128, 64), lambda c: compile_sv(c, 256, 128)],
    ids=["qk-T128-dh64", "sv-T256-dh128"],
)
def test_kernel_cycle_exact(cfg, sched, make):
    stream = make(cfg).commands
    rtl = simulate_scheduler(_dut(sched, cfg), stream)
    assert (
        compare_with_tlm(BLOCK_OF_SCHEDULER[sched], cfg, RtlStream("kernel", stream), rtl) is None
    )


@pytest.mark.parametrize("sched", ["static", "dcs"])
def test_random_stream_with_wraparound(small_cfg, sched):
    stream = random_stream(small_cfg, 400, seed=7)
    tlm = run_channel(stream, small_cfg, sched)
    assert tlm.cycles > 2**small_cfg.dcs.timestamp_bits  # timestamps wrap
    rtl = simulate_scheduler(_dut(sched, small_cfg), stream)
    assert (
        compare_with_tlm(BLOCK_OF_SCHEDULER[sched], small_cfg, RtlStream("random", stream), rtl)
        is None
    )


def test_compare_with_tlm_runs_the_tlm_under_the_streams_gaps(cfg):
    """An RTL run with input gaps is compared with the TLM under the same gaps: equal there,
    and a mismatch against the gapless TLM it would otherwise have been compared with."""
    stream = compile_qk(cfg, 64, 64).commands
    gaps = tuple(int(g) for g in np.random.default_rng(3).integers(0, 6, stream.shape[0]))
    rtl = simulate_scheduler(_dut("dcs", cfg), stream, valid_gaps=gaps)
    assert compare_with_tlm("dcs", cfg, RtlStream("gapped", stream, valid_gaps=gaps), rtl) is None
    msg = compare_with_tlm("dcs", cfg, RtlStream("plain", stream), rtl)
    assert msg is not None and "first differing command #" in msg
    # Under a ready pattern the schedule is checked against the rules, not exact cycles.
    pattern = (1, 0, 0)
    held = simulate_scheduler(_dut("dcs", cfg), stream, ready_pattern=pattern)
    assert (held != run_channel(stream, cfg, "dcs").issue).any()
    assert (
        compare_with_tlm("dcs", cfg, RtlStream("held", stream, ready_pattern=pattern), held) is None
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_pingpong_random_cycle_exact(cfg, seed):
    stream = random_pingpong_stream(cfg, 300, seed)
    tlm = run_channel(stream, cfg, "pingpong")
    assert tlm.extra["phases"] > 10  # many hand-offs
    rtl = simulate_scheduler(_dut("pingpong", cfg), stream)
    assert compare_with_tlm("pingpong", cfg, RtlStream("random", stream), rtl) is None


def test_pingpong_slot_wrap_and_full_queues_stay_safe(cfg):
    # 4-entry queues: the input stalls (so cycles depart from the TLM, which never
    # back-pressures) and 5-bit slot numbers wrap several times. Every buffer dependency must
    # still hold.
    depth = 4
    stream = random_pingpong_stream(cfg, 300, seed=5, switch=0.6)
    assert run_channel(stream, cfg, "pingpong").extra["phases"] > 3 * 2 ** slot_bits(depth)
    rtl = simulate_scheduler(PingPongScheduler(cfg, depth=depth), stream)
    problems = check_schedule(stream, rtl, cfg, "pingpong")
    # Stalled input may split a phase (a command arriving after its slot was handed off runs
    # in a later slot), so only the dependency and bus rules must hold here.
    assert [p for p in problems if "hand-off" not in p and "inside a slot" not in p] == []


@pytest.mark.parametrize("sched", SCHEDS)
def test_valid_gaps_cycle_exact(cfg, sched):
    stream = _random(cfg, sched, 200, seed=3)
    gaps = np.random.default_rng(3).integers(0, 4, stream.shape[0])
    rtl = simulate_scheduler(_dut(sched, cfg), stream, valid_gaps=gaps.tolist())
    assert rtl.tolist() == run_channel(stream, cfg, sched, valid_gaps=gaps).issue.tolist()


def test_pingpong_refuses_gaps_that_need_look_ahead(cfg):
    # Long input gaps let the controller hand a slot off before the slot's last command
    # arrives; the TLM refuses rather than assume the controller could have waited.
    stream = compile_qk(cfg, 256, 64).commands
    gaps = np.random.default_rng(2).integers(0, 23, stream.shape[0])
    with pytest.raises(PingPongError, match="after the controller handed its slot off"):
        run_channel(stream, cfg, "pingpong", valid_gaps=gaps)


@pytest.mark.parametrize("sched", SCHEDS)
def test_ready_backpressure_keeps_rules(cfg, sched):
    stream = _random(cfg, sched, 200, seed=5)
    ready = np.random.default_rng(5).integers(0, 2, 97).tolist()
    rtl = simulate_scheduler(_dut(sched, cfg), stream, ready_pattern=ready)
    assert check_schedule(stream, rtl, cfg, sched) == []
    assert rtl.max() > run_channel(stream, cfg, sched).issue.max()  # it did slow down


def test_broken_rtl_timing_is_reported(cfg):
    # The RTL built with t_MAC one cycle longer than the model must fail with a message naming
    # the stream, the first differing command and both cycles.
    stream = compile_qk(cfg, 64, 64).commands
    broken = DcsScheduler(cfg.replace(**{"timing.t_MAC": cfg.timing.t_MAC + 1}))
    rtl = simulate_scheduler(broken, stream)
    msg = compare_with_tlm("dcs", cfg, RtlStream("qk-T64-dh64", stream), rtl)
    assert msg is not None
    assert "stream 'qk-T64-dh64'" in msg and "first differing command #" in msg
    assert "RD_OUT" in msg  # the first command that waits t_MAC is a drain


def test_broken_pingpong_timing_is_reported(cfg):
    # Ping-pong built with t_MAC one cycle longer: the phase completes a cycle later, so the
    # hand-off to the epilogue and its first drain slip by one cycle.
    stream = compile_qk(cfg, 64, 64).commands
    broken = _dut("pingpong", cfg.replace(**{"timing.t_MAC": cfg.timing.t_MAC + 1}))
    rtl = simulate_scheduler(broken, stream)
    msg = compare_with_tlm("pingpong", cfg, RtlStream("qk-T64-dh64", stream), rtl)
    assert msg is not None
    assert "stream 'qk-T64-dh64', block pingpong vs TLM pingpong" in msg
    assert "first differing command #" in msg and "(RD_OUT " in msg
    k = int(msg.split("first differing command #")[1].split()[0])
    tlm = run_channel(stream, cfg, "pingpong").issue
    assert rtl[k] == tlm[k] + 1 and (rtl[:k] == tlm[:k]).all()
    assert f"RTL issued at cycle {rtl[k]}, TLM at cycle {tlm[k]}" in msg


@pytest.mark.parametrize("sched", SCHEDS)
@pytest.mark.parametrize("rule", list(CONVENTIONS))
def test_conventions_cycle_exact(rule, sched):
    # The hand-computed tiles of docs/scheduling.md's conventions, then a kernel and a random
    # stream under each convention: RTL == TLM.
    cfg = load_preset("aim-ramulator").replace(**CONVENTIONS[rule][0])
    assert simulate_scheduler(_dut(sched, cfg), TILE).tolist() == CONVENTIONS[rule][1][sched][0]
    for name, stream in (
        ("qk", compile_qk(cfg, 128, 64).commands),
        ("random", _random(cfg, sched, 120, 4)),
    ):
        rtl = simulate_scheduler(_dut(sched, cfg), stream)
        assert (
            compare_with_tlm(BLOCK_OF_SCHEDULER[sched], cfg, RtlStream(name, stream), rtl) is None
        )


# ---- DCS's mode-aware issue policy at aim-ramulator timing (docs/scheduling.md, "DCS").
@pytest.mark.parametrize("rule", list(MODE_EXPECTED))
def test_dcs_mode_aware_hand_computed_cycle_exact(rule):
    overrides, issue, _, _ = MODE_EXPECTED[rule]
    cfg = load_preset("aim-ramulator").replace(**overrides)
    assert simulate_scheduler(_dut("dcs", cfg), MODE_STREAM).tolist() == issue


#: aim-ramulator and variants of its mode switch: TMOD overlapping the row, short TMODs, and
#: 2-/4-deep queues with narrow IDs and timestamps (queues fill, IDs and timestamps wrap).
RAM_VARIANTS = {
    "aim-ramulator": {},
    "mod-overlaps-row": {"timing.mod_overlaps_row": True},
    "tmod-1": {"timing.t_MOD": 1},
    "tmod-5-q4": {"timing.t_MOD": 5, "dcs.queue_depth": 4},
    "q2-wrap": {"dcs.queue_depth": 2, "dcs.id_bits": 3, "dcs.timestamp_bits": 10},
}
RAM_CASES = {"variant": st.sampled_from(list(RAM_VARIANTS)), **stream_cases(120)}


def _dcs_random_cycle_exact(variant, seed, n, entries, rows, gaps) -> None:
    """RTL == TLM (DCS) on a random stream under one of :data:`RAM_VARIANTS`, with input
    gaps of 0-2 cycles or none."""
    cfg = load_preset("aim-ramulator").replace(**RAM_VARIANTS[variant])
    stream = random_stream(cfg, n, seed, entries=entries, rows=rows)
    g = np.random.default_rng(seed).integers(0, 3, n) if gaps else None
    _rtl_matches("dcs", cfg, stream, g, run_channel(stream, cfg, "dcs", valid_gaps=g).issue)


# ---- Ping-pong's mode-aware issue policy at aim-ramulator timing (docs/scheduling.md,
# "Ping-pong" rule 7).
@pytest.mark.parametrize("variant", list(PP_MODE_EXPECTED))
def test_pingpong_mode_aware_hand_computed_cycle_exact(variant):
    overrides, gaps, issue, _, _, _ = PP_MODE_EXPECTED[variant]
    cfg = load_preset("aim-ramulator").replace(**overrides)
    rtl = simulate_scheduler(_dut("pingpong", cfg), PP_MODE_STREAM, valid_gaps=gaps)
    assert rtl.tolist() == issue


#: aim-ramulator and variants of its mode switch for ping-pong (its queues never fill at the
#: co-simulation depth, so no queue variants): TMOD overlapping the row, short TMODs.
PP_RAM_VARIANTS = {
    "aim-ramulator": {},
    "mod-overlaps-row": {"timing.mod_overlaps_row": True},
    "tmod-1": {"timing.t_MOD": 1},
    "tmod-5": {"timing.t_MOD": 5},
}
PP_RAM_CASES = {
    "variant": st.sampled_from(list(PP_RAM_VARIANTS)),
    **stream_cases(120),
    "switch": st.sampled_from([0.05, 0.15, 0.5]),
}


def _pingpong_random_cycle_exact(variant, seed, n, entries, rows, switch, gaps) -> None:
    """RTL == TLM (ping-pong) on a random legal stream under one of :data:`PP_RAM_VARIANTS`,
    with input gaps of 0-2 cycles or none (gaps the TLM refuses for want of look-ahead are
    not drawn)."""
    cfg = load_preset("aim-ramulator").replace(**PP_RAM_VARIANTS[variant])
    stream = random_pingpong_stream(cfg, n, seed, entries=entries, rows=rows, switch=switch)
    g = np.random.default_rng(seed).integers(0, 3, n) if gaps else None
    try:
        tlm = run_channel(stream, cfg, "pingpong", valid_gaps=g).issue
    except PingPongError:
        assume(False)
    _rtl_matches("pingpong", cfg, stream, g, tlm)


#: Each scheduler's random RTL == TLM check and the cases it draws.
MODE_POLICY = {
    "dcs": (_dcs_random_cycle_exact, RAM_CASES),
    "pingpong": (_pingpong_random_cycle_exact, PP_RAM_CASES),
}
QUICK = settings(max_examples=6, deadline=None, database=None)
LONG = settings(max_examples=150, deadline=None, database=None)


@pytest.mark.parametrize(("sched", "budget"), quick_and_long(MODE_POLICY, QUICK, LONG))
def test_mode_policy_random_cycle_exact(sched, budget):
    """RTL == TLM on random streams under the scheduler's mode-switch variants."""
    check, cases = MODE_POLICY[sched]
    run_examples(check, cases, budget)
