"""The cycles-only decode step (sim/systems/cycles.py) equals ``run_decode``'s cycles, and
every row of the system registry's fast path equals its full step."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from pimphony.compiler.plan import PARTITIONS, Partition, ScoreOverflow, layer_plan
from pimphony.models.module import makespan_arrays
from pimphony.sim.systems.base import SystemKind
from pimphony.sim.systems.cycles import (
    PAIR_KEY,
    AttentionBlock,
    StepCycles,
    _first_startup,
    _RequestBlock,
    attention_makespan,
    channel_bound_makespan,
    decode_cycles,
)
from pimphony.sim.systems.registry import FIG8_ROWS, ServingCaches, make_system
from pimphony.sim.systems.setup import DecodeError, DecodeSetup
from pimphony.sim.systems.step import KernelCaches, run_decode

from tests.test_decode_step import TINY

#: TINY without GQA (one query head per KV head).
TINY_MHA = dataclasses.replace(TINY, name="tiny-mha", kv_heads=8)


@pytest.fixture(scope="module")
def tiled(cfg):
    # A 32 KiB GPR: score tiles of at most 3008 (TCP), 3968 (ITPP) and 128 (HFP) tokens at
    # GQA 2 (7104, 8064, 384 without GQA), so pairs are cut into several tiles
    # (online-softmax combination on the EPU).
    return cfg.replace(**{"module.gpr_bytes": 32768})


# (model, hardware fixture, partition, memory, tp, pp, micro_batches)
CONFIGS = [
    (TINY, "cfg", "tcp", "lazy", 1, 1, None),
    (TINY, "cfg", "hfp", "lazy", 2, 1, None),
    (TINY, "cfg", "auto", "static", 2, 1, None),
    (TINY, "cfg", "itpp", "lazy", 1, 2, "auto"),
    (TINY, "tiled", "auto", "lazy", 1, 1, None),
    (TINY, "tiled", "tcp", "static", 2, 3, "auto"),
    (TINY, "tiled", "hfp", "static", 1, 2, 2),
    (TINY_MHA, "cfg", "tcp", "lazy", 2, 1, None),
    (TINY_MHA, "cfg", "auto", "lazy", 1, 3, None),
    (TINY_MHA, "tiled", "hfp", "lazy", 1, 1, None),
    (TINY_MHA, "tiled", "itpp", "static", 2, 1, None),
]


@pytest.mark.parametrize(("model", "hw", "partition", "memory", "tp", "pp", "mbs"), CONFIGS)
def test_step_cycles_equal_run_decode(request, model, hw, partition, memory, tp, pp, mbs):
    """Random batches, one shared StepCycles (blocks reused at other batch positions and
    across steps) against a fresh ``run_decode`` each."""
    hw = request.getfixturevalue(hw)
    rng = random.Random(f"{model.name}-{hw.module.gpr_bytes}-{partition}-{memory}-{tp}-{pp}")
    pool = [rng.randint(1, 4000) for _ in range(5)] + [1, 16, 17, 4000]
    base = DecodeSetup(model, hw, (1,), tp, pp, partition, memory=memory, micro_batches=mbs)
    steps = StepCycles(base, ServingCaches())
    for _ in range(6):
        lengths = tuple(rng.choice(pool) + rng.randint(0, 2) for _ in range(rng.randint(1, 7)))
        lengths = tuple(min(t, model.context_window) for t in lengths)
        setup = dataclasses.replace(base, lengths=lengths)
        assert steps.cycles(lengths) == run_decode(setup).cycles, lengths


@pytest.mark.parametrize("partition", ["hfp", "tcp", "itpp", "auto"])
def test_bank_spill_cycles_equal_run_decode(tiled, partition):
    """Pairs beyond the (tiled) GPR spilled: the fast path equals ``run_decode`` with caches
    shared by both readings of scores beyond the GPR, and the readings differ."""
    lengths, caches, cycles = (4000, 33, 2048), ServingCaches(), {}
    for reading in ScoreOverflow:
        setup = DecodeSetup(TINY, tiled, lengths, 1, 2, partition, score_overflow=reading.value)
        cycles[reading] = StepCycles(setup, caches).cycles(lengths)
        assert cycles[reading] == run_decode(setup).cycles, reading
    assert cycles[ScoreOverflow.GPR_TILES] != cycles[ScoreOverflow.BANK_SPILL]
    with pytest.raises(DecodeError, match="score_overflow 'host' is unknown"):
        DecodeSetup(TINY, tiled, lengths, partition=partition, score_overflow="host")


def test_decode_cycles_is_run_decode(cfg):
    setup = DecodeSetup(TINY, cfg, (700, 33, 2048), tp=2, partition="auto")
    assert decode_cycles(setup) == run_decode(setup).cycles
    caches = KernelCaches()
    assert decode_cycles(setup, caches) == run_decode(setup, caches=caches).cycles


def test_run_decode_reports_the_timings(cfg):
    """The report's micro-batch sweep, stage cycles and partitions are StepCycles' timings."""
    setup = DecodeSetup(
        TINY, cfg, (700, 33, 2048, 5, 90), tp=1, pp=2, partition="auto", micro_batches="auto"
    )
    timings = StepCycles(setup).timings(setup.lengths)
    report = run_decode(setup)
    sweep = report.pipeline["micro_batch_sweep"]
    assert [s["micro_batches"] for s in sweep] == [len(t.batches) for t in timings]
    assert len(timings) > 1
    best = min(timings, key=lambda t: (t.cycles, len(t.batches)))
    assert report.cycles == best.cycles == min(t.cycles for t in timings)
    assert report.pipeline["stage_busy_cycles"] == best.stage.sum(axis=0).tolist()
    layers: dict[str, int] = {}
    for p in best.partitions:
        layers[p.value] = layers.get(p.value, 0) + TINY.layers
    assert report.partition_layers == dict(sorted(layers.items()))


def test_caches_shared_by_models_and_splits(cfg):
    """One KernelCaches across models and TP splits (as experiments share it): blocks are
    kept per module heads, so every step equals a fresh one."""
    caches = KernelCaches()
    for model, tp in [(TINY, 1), (TINY, 2), (TINY_MHA, 2), (TINY_MHA, 1)]:
        setup = DecodeSetup(model, cfg, (700, 33, 2048), tp=tp, partition="auto")
        assert run_decode(setup, caches=caches).cycles == run_decode(setup).cycles


def test_blocks_are_reused_by_token_count(cfg):
    """TCP: one unit row and one request block per token count, whatever the request's
    position; HFP: per token count and first pair modulo the channels."""
    base = DecodeSetup(TINY, cfg, (1,), tp=1, partition="tcp")
    steps = StepCycles(base)
    for lengths in [(500, 900), (900, 500, 500), (500,), (900, 900, 900, 500)]:
        steps.cycles(lengths)
    # KernelCaches key by the longest context: three batches share the cache of 900.
    blocks = steps.kernel_cache(900).blocks
    assert sorted(k[2] for k in blocks if k[0] == "request") == [500, 900]
    assert sorted(k[2] for k in blocks if k[0] == "unit") == [500, 900]  # 4 KV heads, 1 row
    assert [k[2] for k in steps.kernel_cache(500).blocks if k[0] == "request"] == [500]
    hfp = StepCycles(dataclasses.replace(base, partition="hfp"))
    hfp.cycles((500,) * 5)  # 4 KV heads each: first pairs 0, 4, 8, 12, 16 on 16 channels
    keys = {k for k in hfp.kernel_cache(500).blocks if k[0] == "request"}
    heads = (TINY.kv_heads, TINY.head_dim, TINY.gqa_group)
    tiles = ScoreOverflow.GPR_TILES
    assert keys == {("request", Partition.HFP, 500, p, *heads, tiles) for p in (0, 4, 8, 12)}


@pytest.mark.parametrize("scheme", [Partition.TCP, Partition.HFP, Partition.ITPP])
def test_pair_key_is_what_a_requests_jobs_depend_on(cfg, scheme):
    """In one layer plan, two requests with the same tokens and the same PAIR_KEY of their
    first pair get the same jobs on every channel; under HFP another key moves them."""
    channels, kvh = cfg.module.channels, TINY.kv_heads
    n = channels + 3  # request n - 1 starts at pair (n - 1) * kvh, congruent mod channels?
    plan = layer_plan(TINY, cfg, (1000,) * n, tp=1, partition=scheme.value)

    def jobs_of(r: int) -> list[list[tuple]]:
        return [
            [(j.kind, j.tokens, j.d_h, j.kv_head, j.tile) for j in (*qk, *sv) if j.request == r]
            for qk, sv in zip(plan.qk, plan.sv, strict=True)
        ]

    key = PAIR_KEY[scheme]
    same = [r for r in range(1, n) if key(r * kvh, channels) == key(0, channels)]
    other = [r for r in range(1, n) if key(r * kvh, channels) != key(0, channels)]
    assert same
    for r in same:
        assert jobs_of(r) == jobs_of(0)
    if scheme == Partition.HFP:
        assert other and all(jobs_of(r) != jobs_of(0) for r in other)
    assert set(PAIR_KEY) == {p for p, s in PARTITIONS.items() if s.jobs is not None}


def test_step_cycles_errors(cfg):
    steps = StepCycles(DecodeSetup(TINY, cfg, (1,), memory="static", max_context=2000))
    with pytest.raises(DecodeError, match="the batch is empty"):
        steps.cycles(())
    with pytest.raises(DecodeError, match="context length 5000 exceeds tiny's context_window"):
        steps.cycles((10, 5000))
    with pytest.raises(DecodeError, match="exceeds the static reservation max_context = 2000"):
        steps.cycles((2001,))
    with pytest.raises(DecodeError, match="each must be a positive int"):
        steps.cycles((0, 3))
    small = cfg.replace(**{"module.gpr_bytes": 2048})
    with pytest.raises(DecodeError, match="cannot hold one tile of scores in the GPR"):
        StepCycles(DecodeSetup(TINY, small, (1,), partition="hfp")).cycles((100,))


def test_first_startup_is_each_channels_first_qk_job():
    """Per channel the first QK^T job of the joined blocks (request order) sets the DPA
    start-up; the largest counts: checked on random blocks against the joined rows."""
    rng = np.random.default_rng(3)
    channels = 6
    for _ in range(200):
        blocks, rows = [], []
        for _ in range(rng.integers(1, 5)):
            n = int(rng.integers(1, 4))
            qk = np.where(rng.random((n, channels)) < 0.4, 5, -1)
            startup = np.where(qk >= 0, rng.choice([3, 3, 7], (n, channels)), 0)
            zeros = np.zeros((n, channels), dtype=np.int64)
            vec = np.zeros(n, dtype=np.int64)
            block = AttentionBlock(qk, qk, vec, vec, vec, startup, zeros, zeros, zeros, zeros)
            blocks.append(_RequestBlock.of(block))
            rows.append((qk, startup))
        qk = np.concatenate([q for q, _ in rows])
        startup = np.concatenate([s for _, s in rows])
        firsts = [
            startup[np.flatnonzero(qk[:, c] >= 0)[0], c]
            for c in range(channels)
            if (qk[:, c] >= 0).any()
        ]
        assert _first_startup(blocks) == max(firsts, default=0)


# --- every row of the registry: its fast path (``System.cycles``) is its full step


@pytest.fixture(scope="module")
def fig8_options(tmp_path_factory) -> dict:
    """The ``+dcc`` rows' drafts from a lookup table (no search)."""
    from pimphony.sim.systems.attacc_gpu import FIG8_SPECS
    from pimphony.sim.systems.registry import FIG8_ROWS

    from tests.test_attacc_gpu import fig8_table

    table = fig8_table(tmp_path_factory.mktemp("lut") / "lut.json")
    return {k: {"table": table} for k in FIG8_ROWS if FIG8_SPECS[k].dcc}


@pytest.mark.parametrize("kind", list(SystemKind))
def test_every_rows_cycles_are_its_step(kind, fig8_options):
    """Random batches on one system's ``cycles`` (its memos shared by every batch) against
    a fresh system's full ``step`` each: equal seconds and cycles (``==``). Fig. 8's rows
    take batches of 1 to 3 with a longest context of 256 or 512 (the lookup table's)."""
    from tests.test_registry import _config

    config = _config(kind, fig8_options.get(kind, {}))
    fast = make_system(kind, config)
    rng = random.Random(f"rows-{kind}")
    for _ in range(4):
        if kind in FIG8_ROWS:
            rest = (rng.randint(1, 256) for _ in range(rng.randint(0, 2)))
            lengths = (rng.choice((256, 512)), *rest)
        else:
            lengths = tuple(rng.randint(1, 1500) for _ in range(rng.randint(1, 6)))
        time = fast.cycles(lengths)
        step = make_system(kind, config).step(lengths)
        assert (time.seconds, time.cycles) == (step.seconds, step.cycles), lengths


def test_channel_bound_makespan_is_the_simulation():
    """Random task rows (every part present, or some missing): where the closed form answers
    it equals the event simulation, and ``attention_makespan`` always does; the closed form
    answers often (a last unit that waits included) and declines waits, gaps and ties."""
    rng = np.random.default_rng(11)
    answered = declined = 0
    for _ in range(3000):
        n, channels = int(rng.integers(1, 8)), int(rng.integers(1, 5))
        hi = int(rng.choice([3, 20, 1000]))
        qk, sv = rng.integers(0, hi, (n, channels)), rng.integers(0, hi, (n, channels))
        if rng.random() < 0.1:
            qk[rng.integers(n), rng.integers(channels)] = -1
        sm = rng.integers(0, int(rng.choice([2, 10, hi])), n)
        post, after = rng.integers(0, 20, n), rng.integers(0, 2, n)
        tasks = np.hstack([qk, sv, sm[:, None], post[:, None], after[:, None]])
        simulated = makespan_arrays(qk, sv, sm, post, after)
        fast = channel_bound_makespan(tasks, channels)
        if fast is None:
            declined += 1
        else:
            answered += 1
            assert fast == simulated, tasks
        assert attention_makespan(tasks, channels) == simulated
    assert answered > 500 and declined > 500
