"""HUB instructions: repetition and multicast encoding undone exactly by the sequencer."""

from __future__ import annotations

import numpy as np
import pytest
from pimphony.compiler.hub import (
    encode_kernels,
    encode_runs,
    encode_streams,
    multicast_first,
    multicast_groups,
    run_count,
)
from pimphony.compiler.kernels import compile_kernel
from pimphony.models.hub import (
    HUB_DTYPE,
    OP_SIZE_BITS,
    HubError,
    delivery_slots,
    epu_cycles,
    hub_instruction_bytes,
    link_cycles,
    sequence,
)
from pimphony.models.isa import Op, field_widths, make_stream
from pimphony.sim.verify.streams import random_stream


def test_runs_by_hand():
    s = make_stream(
        [(Op.WR_INP, g, 10 + g) for g in range(4)]  # gbuf and gpr step by 1: one run
        + [(Op.MAC, g, 7, g, 3) for g in range(8)]  # gbuf and col step: one run
        + [(Op.MAC, 0, 8, 0, 3)]  # new row: new run
        + [(Op.RD_OUT, 3, 50), (Op.RD_OUT, 4, 51), (Op.RD_OUT, 6, 52)]  # out 4 -> 6 breaks
    )
    prog = encode_runs(s)
    assert list(prog["op_size"]) == [4, 8, 1, 2, 1]
    assert run_count(s) == 5
    assert list(prog["gpr"]) == [10, 0, 0, 50, 52]
    assert np.array_equal(sequence(prog, 1)[0], s)


def test_op_size_limit_splits_long_runs():
    n = 1 << OP_SIZE_BITS  # one more than op_size can hold; GBuf indices still fit 16 bits
    s = np.zeros(n, dtype=make_stream([]).dtype)
    s["op"] = int(Op.WR_INP)
    s["gpr"] = np.arange(n)
    s["gbuf"] = np.arange(n)
    prog = encode_runs(s)
    assert list(prog["op_size"]) == [n - 1, 1]
    assert np.array_equal(sequence(prog, 1)[0], s)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_multicast_round_trip_random(cfg, seed):
    rng = np.random.default_rng(seed)
    pool = [random_stream(cfg, int(rng.integers(1, 200)), seed * 10 + k) for k in range(3)]
    streams = [pool[int(rng.integers(0, 3))] for _ in range(cfg.module.channels)]
    prog = encode_streams(streams)
    out = sequence(prog, cfg.module.channels)
    assert all(np.array_equal(a, b) for a, b in zip(out, streams, strict=True))
    # Each distinct stream is encoded once.
    distinct = {s.tobytes(): s for s in streams}
    assert len(prog) == sum(run_count(s) for s in distinct.values())


def test_tcp_like_module_costs_one_channel(cfg):
    qk = compile_kernel(cfg, "qk", tokens=2048, d_h=128).commands
    prog = encode_streams([qk] * cfg.module.channels)
    assert len(prog) == run_count(qk) < qk.shape[0] / 4
    assert delivery_slots(prog) == qk.shape[0]
    assert set(prog["ch_mask"]) == {(1 << cfg.module.channels) - 1}


def test_kernel_lists_multicast_per_position(cfg):
    a = compile_kernel(cfg, "qk", tokens=64, d_h=64).commands
    b = compile_kernel(cfg, "sv", tokens=64, d_h=64).commands
    kernels = [["a", "b"], ["a"], ["b", "a"], []]
    prog = encode_kernels(kernels, {"a": a, "b": b})
    out = sequence(prog, 4)
    want = [np.concatenate([a, b]), a, np.concatenate([b, a]), a[:0]]
    assert all(np.array_equal(x, y) for x, y in zip(out, want, strict=True))
    # Position 0: a -> {0, 1}, b -> {2}; position 1: b -> {0}, a -> {2}.
    assert len(prog) == 2 * run_count(a) + 2 * run_count(b)


def test_multicast_first_is_the_groups_of_the_compacted_columns():
    """Columns with gaps (-1) group by each channel's j-th kernel, as the lists do."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        kernels = rng.integers(-1, 3, size=(rng.integers(0, 6), rng.integers(1, 5)))
        lists = [[int(k) for k in col if k >= 0] for col in kernels.T]
        first = multicast_first(kernels)
        assert sorted(kernels[first].tolist()) == sorted(k for k, _ in multicast_groups(lists))
    # Position 0: a -> {0, 1}, b -> {2}; position 1: b -> {0}, a -> {2}.
    assert list(multicast_groups([["a", "b"], ["a"], ["b", "a"], []])) == [
        ("a", [0, 1]), ("b", [2]), ("b", [0]), ("a", [2]),
    ]  # fmt: skip


def test_instruction_bytes_formula(cfg):
    w = field_widths(cfg.channel, cfg.module.gpr_bytes)
    bits = cfg.module.channels + OP_SIZE_BITS + sum(w.values())
    assert hub_instruction_bytes(cfg) == -(-bits // 8)


def test_bad_programs_are_refused(cfg):
    prog = np.zeros(1, dtype=HUB_DTYPE)
    prog["op_size"] = 1
    prog["ch_mask"] = 1 << 4
    with pytest.raises(HubError, match="instruction 0: ch_mask 0x10 names a channel >= 4"):
        sequence(prog, 4)
    prog["ch_mask"], prog["op_size"] = 1, 0
    with pytest.raises(HubError, match="op_size must be >= 1"):
        sequence(prog, 4)
    with pytest.raises(HubError, match="dtype"):
        encode_runs(np.zeros(3))


def test_epu_and_link_cycles(cfg):
    assert epu_cycles(cfg, 0) == 0
    assert epu_cycles(cfg, cfg.module.epu_flops_per_cycle + 1) == 2
    # 64 GB/s at 1 GHz = 64 B per cycle; 10 GB/s = 10 B per cycle.
    assert link_cycles(cfg, 6400) == 100
    assert link_cycles(cfg, 6401, "internode") == 641
    with pytest.raises(ValueError, match="link 'pcie' is unknown"):
        link_cycles(cfg, 1, "pcie")
