"""The scheduling contract: hand-computed cycles from docs/scheduling.md and focused cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, settings
from hypothesis import strategies as st
from pimphony.models.channel import check_schedule, run_channel
from pimphony.models.config import load_preset
from pimphony.models.dcs import dcs_schedule, entry_predecessors
from pimphony.models.dram import activation_offsets, timing_vector
from pimphony.models.isa import Op, make_stream
from pimphony.models.pingpong import PingPongError, pingpong_slots
from pimphony.sim.verify.streams import random_pingpong_stream, random_stream

from tests.helpers import quick_and_long, run_examples, stream_cases

W, M, R = Op.WR_INP, Op.MAC, Op.RD_OUT

EXAMPLE = make_stream(
    [
        (W, 0), (W, 1), (W, 32),
        (M, 0, 0, 0, 0), (M, 1, 0, 1, 0), (R, 0),
        (M, 32, 0, 2, 32), (M, 32, 1, 0, 32), (R, 32),
        (W, 0), (M, 0, 1, 1, 1), (R, 1),
    ]
)  # fmt: skip

# docs/scheduling.md, "Worked example".
EXPECTED = {
    "static": ([1, 2, 3, 50, 51, 79, 105, 169, 197, 223, 227, 255], 281, [(4, 50), (107, 169)]),
    "pingpong": ([1, 2, 3, 50, 51, 80, 79, 143, 172, 106, 171, 199], 225, [(4, 50), (81, 143)]),
    "dcs": ([1, 2, 3, 50, 51, 79, 52, 116, 144, 145, 149, 177], 203, [(4, 50), (54, 116)]),
}


@pytest.mark.parametrize("sched", list(EXPECTED))
def test_worked_example(cfg, sched):
    issue, cycles, switches = EXPECTED[sched]
    r = run_channel(EXAMPLE, cfg, sched)
    assert r.issue.tolist() == issue
    assert r.cycles == cycles
    assert [tuple(s) for s in r.row_switches.tolist()] == switches
    assert sum(r.breakdown.values()) == cycles
    assert r.breakdown["mac_busy"] == 5
    assert r.breakdown["row_switch"] == (50 - 4) + (switches[1][1] - switches[1][0])


def test_dcs_issues_mac_before_earlier_rd_out(cfg):
    r = run_channel(EXAMPLE, cfg, "dcs")
    assert r.issue[6] < r.issue[5]  # MAC #6 overtakes RD_OUT #5


def test_is_mac_chain_issues_tccd_apart(cfg):
    r = run_channel(EXAMPLE, cfg, "dcs")
    assert r.issue[4] - r.issue[3] == cfg.timing.tCCD
    # Without the is-MAC flag the second MAC would wait t_MAC; a RD_OUT does wait it.
    assert r.issue[5] == r.issue[4] + cfg.timing.t_MAC


def test_pingpong_handoff_stall(cfg):
    r = run_channel(EXAMPLE, cfg, "pingpong")
    assert r.extra["handoff_stall"] == 62
    assert r.extra["phases"] == 3
    # Slot 1 (#5, #6, #7, #9) cannot start before slot 0's MACs completed: 51 + t_MAC.
    assert min(r.issue[[5, 6, 9]]) == 51 + cfg.timing.t_MAC


def test_row_switch_timing(cfg):
    tm = cfg.timing
    acts = activation_offsets(tm, cfg.channel.banks)
    assert acts == [0, 6, 12, 18]
    r = run_channel(EXAMPLE, cfg, "static")
    # Precharge waits tRTP after the last MAC on the old row, then tRP, ACTs, tRCD_MAC.
    assert r.row_switches[1, 0] == r.issue[6] + tm.tRTP
    assert r.issue[7] == r.issue[6] + tm.tRTP + tm.tRP + acts[-1] + tm.tRCD_MAC


def test_tfaw_limits_activations(cfg):
    # With 2-bank ACTs 8 ACTs are needed; tRRD 2 would put the 5th at 8 but tFAW pushes it
    # to 21 (four ACTs in any 21-cycle window).
    tight = cfg.replace(**{"timing.act_banks": 2, "timing.tRRD": 2})
    assert activation_offsets(tight.timing, 16) == [0, 2, 4, 6, 21, 23, 25, 27]
    r = run_channel(make_stream([(M, 0, 0, 0, 0)]), tight, "static")
    assert r.issue[0] == 1 + 27 + tight.timing.tRCD_MAC


def test_tras_delays_precharge(cfg):
    # Two MACs on different rows right after the first activation: the precharge must wait
    # tRAS after the last ACT, not just tRTP after the MAC.
    s = make_stream([(M, 0, 0, 0, 0), (M, 0, 1, 0, 1)])
    slow = cfg.replace(**{"timing.tRAS": 60, "timing.tFAW": 21})
    r = run_channel(s, slow, "static")
    last_act = 1 + 18
    assert r.row_switches[1, 0] == last_act + 60
    assert r.issue[1] == last_act + 60 + 16 + 18 + 28


def test_static_gaps(cfg):
    tm = cfg.timing
    s = make_stream([(W, 0), (W, 1), (M, 0, 0, 0, 0), (M, 1, 0, 1, 0), (R, 0), (W, 2), (R, 1)])
    r = run_channel(s, cfg, "static")
    i = r.issue
    assert i[1] - i[0] == tm.tCCD
    assert i[3] - i[2] == tm.tCCD
    assert i[4] - i[3] == tm.t_MAC
    assert i[5] - i[4] == tm.t_RD_OUT
    assert i[6] - i[5] == tm.t_WR_INP


def test_dcs_queue_depth_stalls_dispatch(cfg):
    # 3 MACs into a 2-deep compute queue behind a 46-cycle activation: the third is accepted
    # only when the first leaves, so the WR_INP after it is accepted late too.
    small = cfg.replace(**{"dcs.queue_depth": 2})
    s = make_stream([(M, 0, 0, 0, 0), (M, 0, 0, 1, 1), (M, 0, 0, 2, 2), (W, 5)])
    r = run_channel(s, small, "dcs")
    # Row 0 usable at 1 + 18 + 28 = 47. MAC #2 is accepted at 48 (the cycle after #0 left),
    # the WR_INP at 49 (one per cycle), so it issues at 50 instead of 4.
    assert r.issue.tolist() == [47, 48, 49, 50]
    deep = run_channel(s, cfg, "dcs")
    assert deep.issue.tolist() == [47, 48, 49, 4]


# ---- Activation and mode conventions (docs/scheduling.md, "Activation and mode conventions")
# One tile through the channel: WR_INP g0, MAC g0 row0 col0 o0, RD_OUT o0, on aim-ramulator
# (tCCD 2, t_WR_INP 3, t_RD_OUT 2, tRCD_MAC 56, act_banks 16: a first activation is one
# ACT16, usable 56 cycles later).
TILE = make_stream([(W, 0), (M, 0, 0, 0, 0), (R, 0)])

# rule -> (overrides of aim-ramulator, {scheduler: (issue cycles, cycles)}), hand-computed.
CONVENTIONS = {
    # 1. MAC-result latency. Without a mode switch, the ACT16 goes when the MAC reaches the
    # head (cycle 2), the MAC issues at 2 + 56 = 58 and the RD_OUT waits t_MAC 28 (86) ...
    "mac-latency-on": (
        {"timing.t_MOD": 0, "timing.mac_result_latency": True},
        dict.fromkeys(("static", "pingpong", "dcs"), ([1, 58, 86], 88)),
    ),
    # ... or only tCCD 2 without it (60): Ramulator's MAC16 -> RDMAC16 is nCCDL.
    "mac-latency-off": (
        {"timing.t_MOD": 0},
        dict.fromkeys(("static", "pingpong", "dcs"), ([1, 58, 60], 62)),
    ),
    # 2. Mode switch t_MOD 32 in series with the row switch (the preset). Static: WR_INP
    # ready at 1 in compute mode -> TMOD at 1, issue 33. MAC head 34, ACT16 at 34, row at
    # 90 -> TMOD at 90, issue 122. RD_OUT ready 124 -> TMOD, issue 156; done 158.
    # DCS and ping-pong open the row from the MAC's head at 2 (row at 58); the MAC is ready
    # at 58 -> TMOD, issue 90; RD_OUT ready 92 -> issue 124; done 126.
    "mod-serial": (
        {},
        {"static": ([33, 122, 156], 158), "pingpong": ([33, 90, 124], 126),
         "dcs": ([33, 90, 124], 126)},
    ),
    # 3. The same with mod_overlaps_row: the MAC's TMOD goes when it is ready but for its row
    # (static 36 = 33 + t_WR_INP; DCS/ping-pong 36 too), so it issues at max(row, 36 + 32) =
    # 90 (static) or max(58, 68) = 68; the RD_OUT is ready 2 later, issues 32 after that.
    "mod-overlap": (
        {"timing.mod_overlaps_row": True},
        {"static": ([33, 90, 124], 126), "pingpong": ([33, 68, 102], 104),
         "dcs": ([33, 68, 102], 104)},
    ),
}  # fmt: skip


@pytest.mark.parametrize("sched", ["static", "pingpong", "dcs"])
@pytest.mark.parametrize("rule", list(CONVENTIONS))
def test_convention_hand_computed(rule, sched):
    overrides, expected = CONVENTIONS[rule]
    cfg = load_preset("aim-ramulator").replace(**overrides)
    issue, cycles = expected[sched]
    r = run_channel(TILE, cfg, sched)
    assert (r.issue.tolist(), r.cycles) == (issue, cycles)
    assert r.extra.get("mode_switches", 0) == (3 if cfg.timing.t_MOD else 0)


def test_conventions_default_to_the_old_model():
    tm = load_preset("aim-16ch").timing
    assert (tm.mac_result_latency, tm.t_MOD, tm.mod_overlaps_row) == (True, 0, False)
    assert tm.t_MAC_result == tm.t_MAC
    assert "t_MOD" not in load_preset("aim-16ch").to_dict()["timing"]


# ---- DCS's mode-aware issue policy (docs/scheduling.md, "DCS" rule 6 and "Mode-aware DCS
# example"). Two tiles accumulate into o0 (row 0) and o1 (row 1), then a third tile is
# written, read from row 1 and drained. Accepted at cycles 0..10; aim-ramulator timing
# (tCCD 2, t_WR_INP 3, t_MAC_result = tCCD 2, t_RD_OUT 2, tRP 32, tRAS 54, tRTP 12, one ACT16,
# tRCD_MAC 56, t_MOD 32).
MODE_STREAM = make_stream(
    [
        (W, 0), (W, 1),
        (M, 0, 0, 0, 0), (M, 1, 0, 1, 0), (R, 0),
        (M, 0, 1, 0, 1), (M, 1, 1, 1, 1), (R, 1),
        (W, 2), (M, 2, 1, 2, 2), (R, 2),
    ]
)  # fmt: skip

# overrides of aim-ramulator -> (issue cycles, cycles, row switches), hand-computed:
# - serial (the preset): #0 is ready at 1 with the compute queue empty: TMOD 1, issue 33;
#   #1 at 35 (register mode holds: the I/O head can issue). #4 waits for the unissued MAC #3,
#   so the MAC head #2 (row 0 opened from its head at 3, usable 59) takes the channel: TMOD
#   59, issue 91; #3 at 93. #5 opens row 1 from its head at 94: precharge at
#   max(94, 3 + tRAS, 93 + tRTP) = 105, ACT16 137, usable 193. RD_OUT #4 is ready at 95, but
#   the MAC head can issue without the I/O queue, so compute mode holds: #5 at 193, #6 at 195
#   (the greedy rule would TMOD at 95 for #4 and issue #5 at 225). #9 waits for the unissued
#   WR_INP #8: TMOD 196 for #4, issue 228; #7 at 230, #8 at 232. #10 waits for #9: TMOD at
#   235 (#8's data valid 232 + 3), #9 at 267. The compute queue is empty: TMOD 269, #10 at
#   301, done 303. Five TMODs.
# - overlap (mod_overlaps_row): the MACs' TMODs go when they are ready but for their row:
#   #2's at 36 (after #0's 33 + 3), issue max(59, 68) = 68, #3 70; row 1: precharge
#   max(71, 57, 82) = 82, usable 170, #5 170, #6 172; #4 TMOD 173, issue 205, #7 207, #8 209;
#   #9's TMOD at 212, issue 244; #10 TMOD 246, issue 278, done 280.
MODE_EXPECTED = {
    "serial": ({}, [33, 35, 91, 93, 228, 193, 195, 230, 232, 267, 301], 303, [(3, 59), (105, 193)]),
    "overlap": (
        {"timing.mod_overlaps_row": True},
        [33, 35, 68, 70, 205, 170, 172, 207, 209, 244, 278],
        280,
        [(3, 59), (82, 170)],
    ),
}


@pytest.mark.parametrize("rule", list(MODE_EXPECTED))
def test_dcs_mode_aware_hand_computed(rule):
    overrides, issue, cycles, switches = MODE_EXPECTED[rule]
    cfg = load_preset("aim-ramulator").replace(**overrides)
    r = run_channel(MODE_STREAM, cfg, "dcs")
    assert (r.issue.tolist(), r.cycles) == (issue, cycles)
    assert [tuple(s) for s in r.row_switches.tolist()] == switches
    assert r.extra["mode_switches"] == 5
    assert check_schedule(MODE_STREAM, r.issue, cfg, "dcs") == []
    # Compute mode holds through row 1's activation although RD_OUT #4 was ready at 95.
    assert r.issue[5] < r.issue[4]


def test_dcs_mode_policy_is_inert_without_tmod():
    # t_MOD 0: DCS is the greedy scheduler of rules 1-5 (MAC first on a tie), not batched.
    cfg = load_preset("aim-ramulator").replace(**{"timing.t_MOD": 0})
    r = run_channel(MODE_STREAM, cfg, "dcs")
    assert r.issue.tolist() == [1, 3, 59, 61, 63, 161, 163, 165, 167, 170, 172]
    assert "mode_switches" not in r.extra


def _dcs_with_accept(stream, cfg, gaps):
    """DCS issue and acceptance cycles (``models.dcs.dcs_schedule``) of ``stream``."""
    n = stream.shape[0]
    sw = np.empty(max(n, 1), dtype=np.int64)
    issue, accept, _ = dcs_schedule(
        *(stream[f].astype(np.int64) for f in ("op", "gbuf", "row", "out")),
        gaps,
        timing_vector(cfg),
        cfg.dcs.queue_depth,
        cfg.channel.gbuf_entries,
        cfg.channel.obuf_entries,
        sw,
        sw.copy(),
    )
    return issue, accept


def _switches_while_held(stream, cfg, issue, accept) -> list[int]:
    """Commands whose TMOD (``t_MOD`` before them, mode switch in series) started while the
    old mode's queue head could still issue without the other queue: it had been accepted
    before the TMOD's cycle and each of its buffer predecessors had issued."""
    op = stream["op"].astype(np.int64)
    cls = op != Op.MAC
    prev_g, prev_o = entry_predecessors(
        op,
        stream["gbuf"].astype(np.int64),
        stream["out"].astype(np.int64),
        cfg.channel.gbuf_entries,
        cfg.channel.obuf_entries,
    )
    order = np.argsort(issue, kind="stable")
    bad = []
    mode = False  # compute
    for k in order:
        if cls[k] == mode:
            continue
        s = issue[k] - cfg.timing.t_MOD  # the TMOD's cycle
        waiting = np.flatnonzero((cls == mode) & (issue > issue[k]))
        if waiting.size:
            h = waiting[0]  # the old mode's queue head at s
            preds = [p for p in (prev_g[h], prev_o[h]) if p >= 0]
            if accept[h] < s and all(issue[p] < s for p in preds):
                bad.append(int(k))
        mode = cls[k]
    return bad


QUICK = settings(max_examples=60, deadline=None, database=None)
LONG = settings(max_examples=2000, deadline=None, database=None)
#: A random stream and ``t_MOD``: the cases both mode-policy properties draw.
STREAM_CASES = {**stream_cases(200), "t_mod": st.sampled_from([1, 5, 32])}
MODE_CASES = {**STREAM_CASES, "depth": st.sampled_from([2, 4, 64])}


def _check_mode_policy(seed, n, entries, rows, t_mod, depth, gaps) -> None:
    """A random stream at aim-ramulator timing (``t_MOD`` in series, queue ``depth``, input
    gaps of 0-3 cycles or none): its DCS schedule keeps the rules, and no TMOD starts while
    the current mode's queue head could still issue on its own."""
    cfg = load_preset("aim-ramulator").replace(**{"timing.t_MOD": t_mod, "dcs.queue_depth": depth})
    stream = random_stream(cfg, n, seed, entries=entries, rows=rows)
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 4, n) if gaps else np.zeros(n, dtype=np.int64)
    issue, accept = _dcs_with_accept(stream, cfg, g)
    assert check_schedule(stream, issue, cfg, "dcs") == []
    assert _switches_while_held(stream, cfg, issue, accept) == []
    assert run_channel(stream, cfg, "dcs", valid_gaps=g).issue.tolist() == issue.tolist()


# ---- Ping-pong's mode-aware issue policy (docs/scheduling.md, "Ping-pong" rule 7 and
# "Mode-aware ping-pong"). Prologue: g0, g1. Phase 0 (slot 0, low halves): two MACs into o0
# on row 0, with the prefetches of g32, g33 for phase 1 in its I/O queue. Slot 1: the drain of
# o0 next to phase 1 (high halves), which reads row 0 into o32, then row 1 into o33. Epilogue:
# drains of o32 and o33. Aim-ramulator timing as MODE_STREAM's.
PP_MODE_STREAM = make_stream(
    [
        (W, 0), (W, 1),
        (M, 0, 0, 0, 0), (W, 32), (M, 1, 0, 1, 0), (W, 33),
        (R, 0),
        (M, 32, 0, 2, 32), (M, 33, 0, 3, 32), (M, 32, 1, 0, 33), (M, 33, 1, 1, 33),
        (R, 32), (R, 33),
    ]
)  # fmt: skip


def pp_late_wr_gaps(gap: int) -> list[int]:
    """Input gaps of :data:`PP_MODE_STREAM` that hold WR_INP #5 back by ``gap`` cycles."""
    return [gap if k == 5 else 0 for k in range(PP_MODE_STREAM.shape[0])]


# variant -> (overrides of aim-ramulator, input gaps, issue cycles, cycles, TMODs, row
# switches), hand-computed. Slots: #0-#1 prologue (-1), #2-#5 slot 0, #6-#10 slot 1,
# #11-#12 epilogue (slot 2). Accepted at cycle k without gaps.
# - serial (the preset): prologue in compute mode, no MAC: TMOD 1, #0 at 33, #1 at 35
#   (register mode holds: its I/O head is queued); done 38. Slot 0 starts at 38 in register
#   mode: #3 at 38, #5 at 40 (the I/O queue holds a queued head; the MAC head #2 could start
#   its TMOD at 59, when row 0, opened from its head at 3, is usable). I/O queue of the slot
#   empty: TMOD 59, #2 at 91, #4 at 93; done 95. Slot 1 starts at 95 in compute mode: #7 at 95
#   and #8 at 97 (row 0 open); #9 reaches the head at 98 and needs row 1: precharge at
#   max(98, 3 + tRAS, 97 + tRTP) = 109, ACT16 141, usable 197. RD_OUT #6 was ready at 95, but
#   the MAC head is queued, so compute mode holds through the activation: #9 at 197, #10 at
#   199. Then #6: TMOD 200, issue 232; done 234. Epilogue in register mode: #11 at 234, #12
#   at 236; done 238. Three TMODs. (The greedy rule: #6's TMOD at 96, issue 128; #8's TMOD
#   at 129, issue 161; #9's row switch starts at its head 162: usable 261; 301 cycles, five
#   TMODs.)
# - overlap (mod_overlaps_row): #2's TMOD at 41 (ready but for its row after #5 at 40),
#   issue max(59, 73) = 73, #4 75; slot 1 at 77: #7 77, #8 79, row 1 precharge
#   max(80, 57, 91) = 91, usable 179: #9 179, #10 181, #6 TMOD 182 issue 214; #11 216,
#   #12 218; 220 cycles.
# - queued (WR_INP #5 accepted at 58 after a 53-cycle input gap): queued at 59, the cycle
#   #2's TMOD would start, so register mode holds: #5 at 59 (4 + 1 + 53 + 1), #2's TMOD at 60,
#   issue 92, #4 94; slot 1 at 96: #7 96, #8 98, row 1 precharge max(99, 57, 110) = 110,
#   usable 198, #9 198, #10 200, #6 TMOD 201 issue 233; #11 235, #12 237; 239 cycles.
# - late (a 54-cycle gap: #5 accepted at 59, queued only from 60): at 59 the I/O queue holds
#   no queued head, so #2 takes the channel: TMOD 59, #2 at 91, #4 at 93 (compute mode
#   holds); then #5: TMOD 94, issue 126; done 129. Slot 1 starts in register mode: #6 at 129;
#   #7's TMOD at 130, issue 162, #8 164; row 1 precharge max(165, 57, 176) = 176, usable
#   264: #9 264, #10 266; done 268. Epilogue in compute mode: #11's TMOD at 268, issue 300,
#   #12 302; 304 cycles, five TMODs.
PP_MODE_EXPECTED = {
    "serial": (
        {}, None,
        [33, 35, 91, 38, 93, 40, 232, 95, 97, 197, 199, 234, 236], 238, 3, [(3, 59), (109, 197)],
    ),
    "overlap": (
        {"timing.mod_overlaps_row": True}, None,
        [33, 35, 73, 38, 75, 40, 214, 77, 79, 179, 181, 216, 218], 220, 3, [(3, 59), (91, 179)],
    ),
    "queued": (
        {}, pp_late_wr_gaps(53),
        [33, 35, 92, 38, 94, 59, 233, 96, 98, 198, 200, 235, 237], 239, 3, [(3, 59), (110, 198)],
    ),
    "late": (
        {}, pp_late_wr_gaps(54),
        [33, 35, 91, 38, 93, 126, 129, 162, 164, 264, 266, 300, 302], 304, 5,
        [(3, 59), (176, 264)],
    ),
}  # fmt: skip


@pytest.mark.parametrize("variant", list(PP_MODE_EXPECTED))
def test_pingpong_mode_aware_hand_computed(variant):
    overrides, gaps, issue, cycles, tmods, switches = PP_MODE_EXPECTED[variant]
    cfg = load_preset("aim-ramulator").replace(**overrides)
    g = None if gaps is None else np.array(gaps)
    r = run_channel(PP_MODE_STREAM, cfg, "pingpong", valid_gaps=g)
    assert (r.issue.tolist(), r.cycles) == (issue, cycles)
    assert [tuple(s) for s in r.row_switches.tolist()] == switches
    assert r.extra["mode_switches"] == tmods
    assert r.extra["phases"] == 2
    assert check_schedule(PP_MODE_STREAM, r.issue, cfg, "pingpong") == []


def test_pingpong_holds_the_mode_inside_a_slot():
    r = run_channel(PP_MODE_STREAM, load_preset("aim-ramulator"), "pingpong")
    # Compute mode holds through row 1's activation although RD_OUT #6 was ready at 95 ...
    assert r.issue[6] > r.issue[10]
    # ... and the mode carries over a hand-off: the epilogue's drains need no TMOD.
    assert r.issue[11] == 234 and r.extra["handoff_stall"] == (95 - 43) + (234 - 201)


def test_pingpong_mode_policy_is_inert_without_tmod():
    # t_MOD 0: within a slot the earlier head issues, the MAC first on a tie (rule 4).
    cfg = load_preset("aim-ramulator").replace(**{"timing.t_MOD": 0})
    r = run_channel(PP_MODE_STREAM, cfg, "pingpong")
    assert r.issue.tolist() == [1, 3, 59, 6, 61, 8, 64, 63, 65, 165, 167, 169, 171]
    assert "mode_switches" not in r.extra


def _pp_accept(gaps: np.ndarray) -> np.ndarray:
    """Acceptance cycles under ping-pong: one command per cycle after its input gap."""
    return np.cumsum(gaps + 1) - 1


def _pp_switches_while_held(stream, cfg, issue, accept) -> list[int]:
    """Commands whose TMOD (``t_MOD`` before them, mode switch in series) started while the
    old mode's queue held a head of the same slot: a command of the old class in that slot,
    accepted before the TMOD's cycle and not yet issued."""
    op = stream["op"].astype(np.int64)
    slot = pingpong_slots(
        op,
        stream["gbuf"].astype(np.int64),
        stream["out"].astype(np.int64),
        cfg.channel.gbuf_entries,
        cfg.channel.obuf_entries,
    )[0]
    cls = op != Op.MAC
    bad = []
    mode = False  # compute
    for k in np.argsort(issue, kind="stable"):
        if cls[k] == mode:
            continue
        s = issue[k] - cfg.timing.t_MOD  # the TMOD's cycle
        waiting = np.flatnonzero((cls == mode) & (slot == slot[k]) & (issue > issue[k]))
        if waiting.size and accept[waiting[0]] < s:
            bad.append(int(k))
        mode = cls[k]
    return bad


def test_pingpong_property_catches_a_greedy_switch():
    # The check itself: the greedy rule's schedule is reported for #6's TMOD at 96, while
    # MAC #8 of its slot was queued (#8's own TMOD at 129 is fine: slot 1 has no I/O left).
    cfg = load_preset("aim-ramulator")
    greedy = np.array([33, 35, 91, 38, 93, 40, 128, 95, 161, 261, 263, 297, 299])
    accept = _pp_accept(np.zeros(13, dtype=np.int64))
    assert _pp_switches_while_held(PP_MODE_STREAM, cfg, greedy, accept) == [6]


PP_MODE_CASES = {**STREAM_CASES, "switch": st.sampled_from([0.05, 0.15, 0.5])}


def _check_pingpong_mode_policy(seed, n, entries, rows, switch, t_mod, gaps) -> None:
    """A random ping-pong stream at aim-ramulator timing (``t_MOD`` in series, input gaps of
    0-2 cycles or none): its schedule keeps the rules, and no TMOD starts while the current
    mode's queue holds a queued head of the running slot."""
    cfg = load_preset("aim-ramulator").replace(**{"timing.t_MOD": t_mod})
    stream = random_pingpong_stream(cfg, n, seed, entries=entries, rows=rows, switch=switch)
    g = np.random.default_rng(seed).integers(0, 3, n) if gaps else np.zeros(n, dtype=np.int64)
    try:
        r = run_channel(stream, cfg, "pingpong", valid_gaps=g)
    except PingPongError:
        assume(False)  # gaps that need look-ahead (rule 6): refused, not scheduled
    assert check_schedule(stream, r.issue, cfg, "pingpong") == []
    assert _pp_switches_while_held(stream, cfg, r.issue, _pp_accept(g)) == []


#: Each scheduler's mode-policy property and the random cases it draws.
MODE_POLICY = {
    "dcs": (_check_mode_policy, MODE_CASES),
    "pingpong": (_check_pingpong_mode_policy, PP_MODE_CASES),
}


@pytest.mark.parametrize(("sched", "budget"), quick_and_long(MODE_POLICY, QUICK, LONG))
def test_switches_mode_only_when_the_running_mode_is_held(sched, budget):
    """DCS switches only when the current mode's queue head cannot issue; ping-pong only when
    its running slot's queue is drained."""
    check, cases = MODE_POLICY[sched]
    run_examples(check, cases, budget)
