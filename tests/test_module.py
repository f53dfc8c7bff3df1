"""One module's attention task graph and EPU costs (models/module.py), by hand."""

from __future__ import annotations

import math
import random

import numpy as np
from pimphony.models.module import (
    attention_tasks,
    channel_order,
    makespan,
    makespan_arrays,
    schedule,
    task_arrays,
)


def test_channel_order_runs_next_qk_before_this_sv():
    assert channel_order({0: 1, 1: 1}, {0: 1, 1: 1}) == [
        ("qk", 0),
        ("qk", 1),
        ("sv", 0),
        ("sv", 1),
    ]
    assert channel_order({}, {3: 1}) == [("sv", 3)]


def test_epu_costs_from_numbers(cfg):
    # One pair of 1000 tokens, GQA group 4, d_h 128, SV split over two channels.
    tasks = attention_tasks(cfg, [{0: 10}, {0: 12}], [{0: 5}, {0: 7}], [1000], 4, 128)
    rate = cfg.module.epu_flops_per_cycle
    assert tasks.softmax_cost == [math.ceil(5 * 4 * 1000 / rate)]  # 5 flops per score
    assert tasks.reduction_cost == [math.ceil((2 - 1) * 4 * 128 / rate)]
    assert tasks.sv_parts == [2]
    one_part = attention_tasks(cfg, [{0: 10}], [{0: 5}], [1000], 4, 128)
    assert one_part.reduction_cost == [0]


def test_makespan_by_hand(cfg):
    tasks = attention_tasks(cfg, [{0: 10}, {0: 12}], [{0: 5}, {0: 7}], [1000], 4, 128)
    # QK^T parts end at 10 and 12 -> softmax 12..32 -> SV parts 32..37 and 32..39 ->
    # reduction 39..43.
    assert makespan(tasks, [20], [4]) == 43
    assert makespan(tasks, [0], [0]) == 12 + 7
    s = schedule(tasks, softmax=False, reduction=True)
    assert (s.qk_busy, s.sv_busy, s.softmax_busy) == (22, 12, 0)
    assert list(s.channel_busy) == [15, 19]


def test_epu_overlaps_the_next_pairs_qk(cfg):
    # Two pairs on one channel: QK0 0..10, QK1 10..20 while softmax0 runs 10..30,
    # SV0 30..35, softmax1 30..50 (EPU busy until 30), SV1 50..55.
    tasks = attention_tasks(cfg, [{0: 10, 1: 10}], [{0: 5, 1: 5}], [1, 1], 1, 64)
    assert makespan(tasks, [20, 20], [0, 0]) == 55


def test_makespan_arrays_by_hand(cfg):
    # The two hand-checked graphs above, compiled.
    tasks = attention_tasks(cfg, [{0: 10}, {0: 12}], [{0: 5}, {0: 7}], [1000], 4, 128)
    assert makespan_arrays(*task_arrays(tasks, [20], [4])) == 43
    two = attention_tasks(cfg, [{0: 10, 1: 10}], [{0: 5, 1: 5}], [1, 1], 1, 64)
    qk, sv, _, post, after = task_arrays(two)
    assert qk.tolist() == [[10], [10]] and after.tolist() == [0, 0]
    assert makespan_arrays(qk, sv, np.array([20, 20]), post, after) == 55


def test_makespan_arrays_equals_makespan(cfg):
    """Random graphs: channels without parts of a unit, units without QK^T or SV parts,
    zero durations (ties), tiles (combination after SV), with and without reduction."""
    rng = random.Random(7)
    for _ in range(300):
        channels, n = rng.randint(1, 8), rng.randint(0, 12)
        qk_of: list[dict[int, int]] = [{} for _ in range(channels)]
        sv_of: list[dict[int, int]] = [{} for _ in range(channels)]
        for p in range(n):
            for c in range(channels):
                if rng.random() < 0.6:
                    qk_of[c][p] = rng.randint(0, 30)
                if rng.random() < 0.6:
                    sv_of[c][p] = rng.randint(0, 30)
        tasks = attention_tasks(
            cfg,
            qk_of,
            sv_of,
            [rng.randint(1, 3000) for _ in range(n)],
            rng.choice([1, 4]),
            128,
            tiles=[rng.randint(0, 2) for _ in range(n)],
            sv_reduction=rng.random() < 0.5,
        )
        sm = [rng.randint(0, 40) for _ in range(n)]
        red = [rng.randint(0, 10) for _ in range(n)]
        assert makespan_arrays(*task_arrays(tasks, sm, red)) == makespan(tasks, sm, red)
        own = makespan(tasks, tasks.softmax_cost, tasks.reduction_cost)
        assert makespan_arrays(*task_arrays(tasks)) == own


def test_makespan_arrays_beyond_int64_keys(cfg):
    # Durations too long for the compiled event keys: the reference simulation, same answer.
    tasks = attention_tasks(cfg, [{0: 2**55, 1: 3}], [{0: 5, 1: 2**54}], [1, 1], 1, 64)
    expected = makespan(tasks, tasks.softmax_cost, tasks.reduction_cost)
    assert expected > 2**55
    assert makespan_arrays(*task_arrays(tasks)) == expected
