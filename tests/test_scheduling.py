"""The scheduling contract: hand-computed cycles from docs/scheduling.md and focused cases."""

from __future__ import annotations

import pytest

from models.channel import run_channel
from models.config import load_preset
from models.dram import activation_offsets
from models.isa import Op, make_stream

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


@pytest.fixture(scope="module")
def cfg():
    return load_preset("aim-16ch")


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
