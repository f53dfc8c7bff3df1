"""Generated Verilog under cocotb + Verilator, cycle for cycle against the TLM.

One simulator process per (block, configuration) runs every stream; each test then checks one
stream. Streams: compiler kernels (QK^T and SV at d_h 64 and 128, GQA row reuse, FC GEMVs,
batched FC GEMVs with row reuse over requests), seeded random legal streams (for ping-pong:
streams with legal buffer halves), the same with input ``valid`` gaps (still cycle-exact)
and with output ``ready`` gaps (order and dependencies checked), and a small configuration
whose IDs and timestamps wrap many times.
"""

from __future__ import annotations

import numpy as np
import pytest
from pimphony.models.channel import check_schedule, run_channel
from pimphony.models.config import load_preset
from pimphony.rtl.blocks import SCHEDULER_OF_BLOCK
from pimphony.sim.verify.runner import simulators
from pimphony.sim.verify.scheduler import RtlStream, compare_with_tlm, run_rtl
from pimphony.sim.verify.streams import (
    COSIM_RANDOM_LEN,
    accepted_gaps,
    cosim_streams,
    kernel_streams,
    random_pingpong_stream,
    random_stream,
)

from tests.test_scheduling import MODE_STREAM, PP_MODE_STREAM, pp_late_wr_gaps

CFG = load_preset("aim-16ch")
STREAMS = {
    sched: {s.name: s for s in cosim_streams(CFG, sched)} for sched in SCHEDULER_OF_BLOCK.values()
}
NAMES = list(STREAMS["dcs"])  # the same names for every scheduler
WRAP_CFG = CFG.replace(**{"dcs.queue_depth": 4, "dcs.id_bits": 4, "dcs.timestamp_bits": 10})
WRAP_STREAM = RtlStream("random-wrap", random_stream(WRAP_CFG, 2500, seed=21))


@pytest.fixture(scope="module", params=sorted(SCHEDULER_OF_BLOCK))
def block_run(request):
    block = request.param
    return block, run_rtl(block, CFG, list(STREAMS[SCHEDULER_OF_BLOCK[block]].values()))


@pytest.mark.parametrize("name", NAMES)
def test_rtl_matches_tlm(block_run, name):
    block, results = block_run
    sched = SCHEDULER_OF_BLOCK[block]
    stream = STREAMS[sched][name]
    rtl = results[name]
    if stream.ready_pattern is not None:
        # Output back-pressure: cycles differ from the TLM, the rules must still hold.
        assert check_schedule(stream.commands, rtl, CFG, sched) == []
        assert rtl.max() >= run_channel(stream.commands, CFG, sched).issue.max()
        return
    if stream.valid_gaps is not None:
        tlm = run_channel(stream.commands, CFG, sched, valid_gaps=np.array(stream.valid_gaps))
        diff = np.flatnonzero(tlm.issue != rtl)
        assert diff.size == 0, (
            f"{name}: command #{diff[0]} RTL {rtl[diff[0]]} vs TLM {tlm.issue[diff[0]]}"
        )
        return
    msg = compare_with_tlm(block, CFG, stream, rtl)
    assert msg is None, msg


def test_dcs_wraparound():
    tlm = run_channel(WRAP_STREAM.commands, WRAP_CFG, "dcs")
    assert tlm.cycles > 8 * 2**WRAP_CFG.dcs.timestamp_bits  # timestamps wrap >= 8 times
    per_entry = np.bincount(WRAP_STREAM.commands["gbuf"]).max()
    assert per_entry > 4 * 2**WRAP_CFG.dcs.id_bits  # per-entry IDs wrap too
    rtl = run_rtl("dcs", WRAP_CFG, [WRAP_STREAM])[WRAP_STREAM.name]
    msg = compare_with_tlm("dcs", WRAP_CFG, WRAP_STREAM, rtl)
    assert msg is None, msg


@pytest.mark.skipif("icarus" not in simulators(), reason="Icarus Verilog not installed")
@pytest.mark.parametrize("block", sorted(SCHEDULER_OF_BLOCK))
def test_icarus_agrees(block):
    stream = STREAMS[SCHEDULER_OF_BLOCK[block]]["qk-T256-dh64"]
    rtl = run_rtl(block, CFG, [stream], simulator="icarus")[stream.name]
    msg = compare_with_tlm(block, CFG, stream, rtl)
    assert msg is None, msg


# The Ramulator-2 AiM conventions (configs/aim-ramulator.toml: one ACT16, no MAC-result
# latency, a 32-cycle TMOD between MAC and I/O modes) in the generated Verilog, not only in
# Amaranth's simulator (tests/test_rtl_schedulers.py).
RAM_CFG = load_preset("aim-ramulator")


@pytest.mark.parametrize("block", sorted(SCHEDULER_OF_BLOCK))
def test_ramulator_conventions_under_verilator(block):
    sched = SCHEDULER_OF_BLOCK[block]
    kernels = kernel_streams(RAM_CFG)
    streams = [
        RtlStream(n, kernels[n]) for n in ("qk-T256-dh64", "sv-T512-dh64", "gemv-b5-100x300")
    ]
    make = random_pingpong_stream if sched == "pingpong" else random_stream
    streams.append(RtlStream("random-31", make(RAM_CFG, 300, 31)))
    results = run_rtl(block, RAM_CFG, streams)
    for stream in streams:
        msg = compare_with_tlm(block, RAM_CFG, stream, results[stream.name])
        assert msg is None, msg
    tlm = run_channel(streams[0].commands, RAM_CFG, sched)
    assert tlm.extra["mode_switches"] > 0  # the TMOD rule is exercised


def _assert_mode_policy(sched: str, cfg, streams: list[RtlStream]) -> None:
    """Every stream issues in the generated Verilog of ``sched`` cycle for cycle as in the TLM,
    and switches mode more than twice."""
    results = run_rtl(sched, cfg, streams)
    for stream in streams:
        gaps = None if stream.valid_gaps is None else np.array(stream.valid_gaps)
        tlm = run_channel(stream.commands, cfg, sched, valid_gaps=gaps)
        diff = np.flatnonzero(tlm.issue != results[stream.name])
        assert diff.size == 0, f"{stream.name}: first differing command #{diff[0]}"
        assert tlm.extra["mode_switches"] > 2


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides", [{}, {"timing.mod_overlaps_row": True}], ids=["serial", "overlap"]
)
def test_dcs_mode_policy_under_verilator(overrides):
    # DCS's mode-aware issue policy (docs/scheduling.md, "DCS") in the generated Verilog at
    # aim-ramulator timing: the hand-computed stream, then random streams with and without
    # input gaps, cycle for cycle.
    cfg = RAM_CFG.replace(**overrides)
    streams = [RtlStream("mode-example", MODE_STREAM)]
    for seed in (41, 42, 43):
        s = random_stream(cfg, COSIM_RANDOM_LEN, seed, entries=3, rows=2)
        gaps = tuple(int(g) for g in np.random.default_rng(seed).integers(0, 3, s.shape[0]))
        streams += [
            RtlStream(f"random-{seed}", s),
            RtlStream(f"random-{seed}-valid-gaps", s, valid_gaps=gaps),
        ]
    _assert_mode_policy("dcs", cfg, streams)


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides", [{}, {"timing.mod_overlaps_row": True}], ids=["serial", "overlap"]
)
def test_pingpong_mode_policy_under_verilator(overrides):
    # Ping-pong's mode-aware issue policy (docs/scheduling.md, "Ping-pong") in the generated
    # Verilog at aim-ramulator timing: the hand-computed stream (and its late input variants),
    # then random legal streams with and without input gaps, cycle for cycle.
    cfg = RAM_CFG.replace(**overrides)
    streams = [
        RtlStream("mode-example", PP_MODE_STREAM),
        RtlStream("mode-example-queued", PP_MODE_STREAM, valid_gaps=tuple(pp_late_wr_gaps(53))),
        RtlStream("mode-example-late", PP_MODE_STREAM, valid_gaps=tuple(pp_late_wr_gaps(54))),
    ]
    for seed in (41, 42, 43):
        s = random_pingpong_stream(cfg, COSIM_RANDOM_LEN, seed)
        streams += [
            RtlStream(f"random-{seed}", s),
            RtlStream(
                f"random-{seed}-valid-gaps",
                s,
                valid_gaps=accepted_gaps(cfg, "pingpong", s, np.random.default_rng(seed)),
            ),
        ]
    _assert_mode_policy("pingpong", cfg, streams)


def test_runs_of_one_build_hold_its_lock(tmp_path, monkeypatch):
    """While one run uses a build directory no other process can (pytest-xdist workers
    running the same block wait for each other); the lock is released after the run."""
    import fcntl

    from pimphony.sim.verify import runner

    seen = {}

    def locked(top, verilog_text, test_module, job, simulator, waves, build_dir):
        with open(build_dir / ".lock") as other:
            try:
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen["held"] = False
            except BlockingIOError:
                seen["held"] = True
        return "ran"

    monkeypatch.setattr(runner, "_run_locked", locked)
    assert runner.run_cocotb("top", "module top; endmodule", "tb", {}, build_root=tmp_path) == "ran"
    assert seen == {"held": True}
    (lock_file,) = tmp_path.glob("top-verilator-*/.lock")
    with open(lock_file) as after:
        fcntl.flock(after, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
