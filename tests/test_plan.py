"""Attention partitioning on one module (HFP, TCP, ITPP, auto), GPR score tiling, the
bank-spill reading of scores beyond the GPR, and exact memoisation."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pimphony.compiler.kernels import compile_kernel
from pimphony.compiler.llm import load_model
from pimphony.compiler.plan import (
    PARTITIONS,
    ChannelJob,
    DecodeMappingError,
    LayerPlan,
    Partition,
    PartitionError,
    ScoreOverflow,
    ScoreSpill,
    _gemv_jobs,
    attention_units,
    candidates,
    layer_plan,
    partition_attention,
    score_spill,
    score_tile_tokens,
    spill_staging,
    split_evenly,
)
from pimphony.models.channel import run_channel
from pimphony.models.config import load_preset
from pimphony.sim.systems.kernels import KernelCache, run_module
from pimphony.sim.systems.step import attention_schedule, plan_tasks


@dataclass(frozen=True)
class _Stats:
    cycles: int


def test_split_is_even_in_whole_units():
    assert split_evenly(300, 16, 16) == [32, 32, 28] + [16] * 13
    assert split_evenly(255, 16, 16) == [16] * 15 + [15]
    assert sum(split_evenly(5000, 16, 16)) == 5000
    assert split_evenly(33, 16, 1) == [3] + [2] * 15


@pytest.mark.parametrize("t, full", [(255, False), (256, True), (257, True), (4096, True)])
def test_tcp_qk_activates_every_bank_from_256_tokens(cfg, t, full):
    jobs = partition_attention(cfg, "qk", [t], kv_heads=1, d_h=128)
    run = run_module(cfg, jobs, "dcs")
    assert run.active_channels == 16
    assert (run.active_bank_fraction == 1.0) == full


@pytest.mark.parametrize("t", [33, 64, 4096])
def test_tcp_sv_activates_every_bank_above_32_tokens(cfg, t):
    run = run_module(cfg, partition_attention(cfg, "sv", [t], kv_heads=1, d_h=128), "dcs")
    assert run.active_channels == 16 and run.active_bank_fraction == 1.0


def test_hfp_leaves_channels_idle_for_small_batches(cfg):
    # One request with 4 KV heads: HFP uses 4 of 16 channels, TCP all 16 and is faster.
    hfp = run_module(cfg, partition_attention(cfg, "qk", [8192], 4, 128, scheme="hfp"), "dcs")
    tcp = run_module(cfg, partition_attention(cfg, "qk", [8192], 4, 128, scheme="tcp"), "dcs")
    assert hfp.active_channels == 4 and tcp.active_channels == 16
    assert tcp.cycles < hfp.cycles / 3


def test_hfp_imbalance_with_unequal_contexts(cfg):
    lengths = [16384, 2048, 2048, 2048]  # 4 requests x 4 KV heads = 16 pairs, one per channel
    hfp = run_module(cfg, partition_attention(cfg, "qk", lengths, 4, 128, scheme="hfp"), "dcs")
    tcp = run_module(cfg, partition_attention(cfg, "qk", lengths, 4, 128, scheme="tcp"), "dcs")
    assert hfp.active_channels == 16
    assert hfp.channel_utilization < 0.5  # short requests' channels wait for the long one
    assert tcp.channel_utilization > 0.95
    assert tcp.cycles < hfp.cycles


@pytest.mark.parametrize("scheme", ["hfp", "tcp"])
@pytest.mark.parametrize("kind", ["qk", "sv"])
def test_memoisation_is_exact(cfg, scheme, kind):
    jobs = partition_attention(cfg, kind, [700, 300, 1200], 2, 64, gqa_group=2, scheme=scheme)
    fast = run_module(cfg, jobs, "dcs", memoize=True)
    slow = run_module(cfg, jobs, "dcs", memoize=False)
    assert fast.channel_cycles.tolist() == slow.channel_cycles.tolist()
    assert fast.simulated_kernels < slow.simulated_kernels == slow.jobs


def test_module_cycles_are_the_slowest_channel_sum(cfg):
    jobs = partition_attention(cfg, "qk", [300, 20], 1, 64, scheme="tcp")
    expected = []
    for channel_jobs in jobs:
        total = 0
        for j in channel_jobs:
            prog = compile_kernel(cfg, j.kind, **j.shape)
            total += run_channel(prog.commands, cfg, "static").cycles
        expected.append(total)
    run = run_module(cfg, jobs, "static", cache=KernelCache(cfg, "static"))
    assert run.channel_cycles.tolist() == expected and run.cycles == max(expected)


def test_bad_partition_arguments(cfg):
    with pytest.raises(PartitionError, match="unknown"):
        partition_attention(cfg, "qk", [10], 1, 64, scheme="rows")
    with pytest.raises(PartitionError, match="request 1"):
        partition_attention(cfg, "qk", [10, 0], 1, 64)
    with pytest.raises(ValueError, match="job lists"):
        run_module(cfg, [[]], "dcs")


# --- GPR tiling of attention scores (one rule for every partition) -------------------------


@pytest.mark.parametrize(
    "scheme, tokens",
    [
        # aim-16ch: 512 KB = 16384 GPR tiles of 32 B; 16 channels; d_h 128, G = 4.
        # HFP: 16384 / (2 x 16 streams) = 512; fixed 4 x (8 query + 1 x 8 out) = 64;
        # (512 - 64) // 4 = 112 groups x 16 = 1792 tokens.
        ("hfp", 1792),
        # TCP: 16384 / 2 = 8192; fixed 4 x (8 + 16 partials x 8) = 544; 1912 x 16 = 30592.
        ("tcp", 30592),
        # ITPP: 8192; fixed 4 x (8 + 8) = 64 (disjoint outputs); 2032 x 16 = 32512.
        ("itpp", 32512),
    ],
)
def test_score_tile_tokens_by_hand(cfg, scheme, tokens):
    assert score_tile_tokens(cfg, scheme, 128, 4) == tokens


def test_no_tiling_below_the_cap_keeps_the_old_jobs(cfg):
    # 1792 tokens fit one HFP tile at G = 4: one unit per pair, jobs as before tiling.
    units = attention_units(cfg, [1792, 500], 2, 128, 4, "hfp")
    assert [(u.request, u.kv_head, u.tile, u.tokens) for u in units] == [
        (0, 0, 0, 1792), (0, 1, 0, 1792), (1, 0, 0, 500), (1, 1, 0, 500),
    ]  # fmt: skip
    jobs = partition_attention(cfg, "qk", [1792, 500], 2, 128, 4, "hfp")
    assert [[(j.tokens, j.request, j.kv_head, j.tile) for j in c] for c in jobs[:4]] == [
        [(1792, 0, 0, 0)], [(1792, 0, 1, 0)], [(500, 1, 0, 0)], [(500, 1, 1, 0)],
    ]  # fmt: skip
    tcp = partition_attention(cfg, "sv", [30592], 1, 128, 4, "tcp")
    assert [len(c) for c in tcp] == [1] * 16 and {j.tile for c in tcp for j in c} == {0}


def test_tiles_split_a_long_pair_evenly_in_bank_groups(cfg):
    # 4000 tokens at HFP's 1792-token cap: 3 tiles, 250 groups of 16 -> 84/83/83 groups.
    units = attention_units(cfg, [4000], 1, 128, 4, "hfp")
    assert [u.tokens for u in units] == [1344, 1328, 1328]
    jobs = partition_attention(cfg, "qk", [4000], 1, 128, 4, "hfp")
    assert [(j.tokens, j.tile) for j in jobs[0]] == [(1344, 0), (1328, 1), (1328, 2)]
    # TCP: each tile over all channels; 40000 > 30592 tokens: 2 tiles of 20000.
    tcp = partition_attention(cfg, "qk", [40000], 1, 128, 4, "tcp")
    assert [sum(j.tokens for c in tcp for j in c if j.tile == k) for k in (0, 1)] == [20000] * 2


def test_tiling_cost_by_hand(cfg):
    # A GPR of 4096 B (128 tiles): HFP slot 128 / 32 = 4 tiles; d_h 16, G 1: fixed 1 + 1 = 2,
    # so 2 groups = 32 tokens per tile. A 64-token pair runs as two tiles on channel 0.
    small = cfg.replace(**{"module.gpr_bytes": 4096, "module.epu_flops_per_cycle": 16})
    assert score_tile_tokens(small, "hfp", 16) == 32
    qk = partition_attention(small, "qk", [64], 1, 16, scheme="hfp")
    sv = partition_attention(small, "sv", [64], 1, 16, scheme="hfp")
    assert [(j.tokens, j.tile) for j in qk[0]] == [(32, 0), (32, 1)]

    # Channel commands: untiled QK^T 1 WR_INP, 4 MAC, 4 RD_OUT; each tile 1, 2, 2: one more
    # WR_INP (the query again). Untiled SV 4 WR_INP, 4 MAC, 1 RD_OUT; each tile 2, 2, 1: one
    # more RD_OUT (a partial output).
    def counts(jobs):
        total = {"WR_INP": 0, "MAC": 0, "RD_OUT": 0}
        for j in jobs:
            c = compile_kernel(small, j.kind, **j.shape).counts
            total = {k: total[k] + c[k] for k in total}
        return total

    assert counts(qk[0]) == {"WR_INP": 2, "MAC": 4, "RD_OUT": 4}
    assert counts(sv[0]) == {"WR_INP": 4, "MAC": 4, "RD_OUT": 2}
    # Task graph, QK^T part = tokens cycles, SV part = 2 x tokens. Softmax of a 32-token tile
    # 5 * 32 / 16 = 10 cycles; combining tile 1 into tile 0: 3 * 16 / 16 = 3 cycles.
    # QK0 0-32 | QK1 32-64 | SV0 64-128 | SV1 128-192 (softmax0 32-42, softmax1 64-74) |
    # combine 192-195.
    plan = LayerPlan(
        {}, qk, sv, 1, 1, 16, (64,), "hfp", tuple(attention_units(small, [64], 1, 16, 1, "hfp"))
    )
    stub = lambda j: _Stats(j.tokens * (1 if j.kind == "qk" else 2))  # noqa: E731
    tiled = attention_schedule(plan, small, stub)
    assert (tiled.cycles, tiled.softmax_busy, tiled.combine_busy) == (195, 20, 3)
    # The same pair untiled (the full GPR): QK 0-64, softmax 20 cycles 64-84, SV 84-212.
    big = small.replace(**{"module.gpr_bytes": 524288})
    whole = LayerPlan(
        {},
        partition_attention(big, "qk", [64], 1, 16, scheme="hfp"),
        partition_attention(big, "sv", [64], 1, 16, scheme="hfp"),
        1, 1, 16, (64,), "hfp", tuple(attention_units(big, [64], 1, 16, 1, "hfp")),
    )  # fmt: skip
    assert attention_schedule(whole, big, stub).cycles == 212


def test_bank_spill_by_hand(cfg):
    # The 64-token pair of test_tiling_cost_by_hand (GPR 4096 B: 32-token HFP tiles) under
    # bank-spill: one unit, its scores through the bank array, no tile.
    small = cfg.replace(**{"module.gpr_bytes": 4096, "module.epu_flops_per_cycle": 16})
    spill = ScoreOverflow.BANK_SPILL
    units = attention_units(small, [64], 1, 16, 1, "hfp", spill)
    assert [(u.tile, u.tokens, u.spilled) for u in units] == [(0, 64, True)]
    qk = partition_attention(small, "qk", [64], 1, 16, scheme="hfp", overflow=spill)
    sv = partition_attention(small, "sv", [64], 1, 16, scheme="hfp", overflow=spill)
    assert [(j.tokens, j.tile, j.spill) for j in qk[0] + sv[0]] == [(64, 0, True)] * 2

    # Commands: the untiled kernels (QK^T 1 WR_INP: the query once; SV 1 RD_OUT: no partial
    # output to combine), plus 64 scores / 16 per 32 B column = 4 WR after QK^T and 4 RD
    # before SV, in one all-bank row (16 banks x 64 columns). aim-16ch: 4 ACT4s 6 cycles
    # apart, so a row costs tRP 16 + 18 + tRCD 28 = 62 cycles; 4 columns at tCCD 1: 66.
    def counts(j):
        return compile_kernel(spill_staging(small, j), j.kind, **j.shape).counts

    assert counts(qk[0][0]) == {"WR_INP": 1, "MAC": 4, "RD_OUT": 4}
    assert counts(sv[0][0]) == {"WR_INP": 4, "MAC": 4, "RD_OUT": 1}
    for j in (qk[0][0], sv[0][0]):
        assert score_spill(small, j) == ScoreSpill(columns=4, rows=1)
        assert score_spill(small, j).cycles(small) == 66
    # A 1M-token head at G = 4: 4 x 65,536 columns over 256 rows (1,024 columns each).
    head = ChannelJob("qk", 1 << 20, 128, 4, 0, 0, spill=True)
    assert score_spill(cfg, head) == ScoreSpill(columns=262144, rows=256)
    assert score_spill(cfg, head).cycles(cfg) == 262144 + 256 * 62
    assert score_spill(cfg, ChannelJob("qk", 1 << 20, 128, 4, 0, 0)) == ScoreSpill(0, 0)

    # The channel kernel's cycles are the TLM's plus the spill's; its commands likewise.
    cache = KernelCache(small, "static")
    for j in (qk[0][0], sv[0][0]):
        prog = compile_kernel(spill_staging(small, j), j.kind, **j.shape)
        tlm = run_channel(prog.commands, small, "static")
        assert cache.run(j).cycles == tlm.cycles + 66
        assert cache.run(j).commands == prog.commands.shape[0] + 4

    # Task graph (stub parts as in test_tiling_cost_by_hand): the untiled one, QK 0-64,
    # softmax 64-84, SV 84-212, and no combination (212, against 195 tiled).
    plan = LayerPlan(
        {}, qk, sv, 1, 1, 16, (64,), "hfp", tuple(units), score_overflow=spill.value
    )  # fmt: skip
    stub = lambda j: _Stats(j.tokens * (1 if j.kind == "qk" else 2))  # noqa: E731
    spilled = attention_schedule(plan, small, stub)
    assert (spilled.cycles, spilled.softmax_busy, spilled.combine_busy) == (212, 20, 0)


def test_readings_agree_when_the_scores_fit(cfg):
    # 1792 tokens fit one HFP tile at G = 4 on aim-16ch: the readings give the same plan.
    model = load_model("llama-3.1-8b")  # G = 4, d_h = 128
    plans = {
        o: layer_plan(model, cfg, [1792, 500], 4, "hfp", o) for o in ScoreOverflow
    }  # fmt: skip
    tiles, spill = plans.values()
    assert (tiles.qk, tiles.sv, tiles.units) == (spill.qk, spill.sv, spill.units)
    assert not any(u.spilled for u in spill.units)
    # One token more than the cap and they part: per KV head (8 / TP 4 = 2 on the module)
    # two tiles against one spilled unit.
    longer = {o: layer_plan(model, cfg, [1793], 4, "hfp", o).units for o in ScoreOverflow}
    assert [len(u) for u in longer.values()] == [4, 2]
    with pytest.raises(DecodeMappingError, match="score overflow 'host' is unknown"):
        layer_plan(model, cfg, [64], 4, "hfp", "host")


def test_too_small_a_gpr_is_a_clear_error(cfg):
    tiny = cfg.replace(**{"module.gpr_bytes": 1024})  # 32 tiles: HFP slot 1
    with pytest.raises(PartitionError, match="HFP cannot hold one tile of scores in the GPR"):
        partition_attention(tiny, "qk", [64], 1, 16, scheme="hfp")


# --- ITPP (LoL-PIM 4.3) and auto --------------------------------------------------------


def test_itpp_job_shapes(cfg):
    # K by tokens (as TCP); V by its head dimension: 2 pairs x 8 output groups of 16 dims
    # dealt round-robin over 16 channels -> channel c holds pair c // 8, group c % 8, reading
    # all 1000 tokens of that pair's scores.
    qk = partition_attention(cfg, "qk", [1000], 2, 128, scheme="itpp")
    assert qk == partition_attention(cfg, "qk", [1000], 2, 128, scheme="tcp")
    sv = partition_attention(cfg, "sv", [1000], 2, 128, scheme="itpp")
    assert [[(j.tokens, j.d_h, j.kv_head) for j in c] for c in sv] == [
        [(1000, 16, c // 8)] for c in range(16)
    ]
    # d_h 48 and one pair: 3 groups on channels 0-2; a d_h wider than 16 channels' groups
    # (512 = 32 groups) gives each channel two groups of the pair in one job.
    narrow = partition_attention(cfg, "sv", [64], 1, 48, 1, "itpp")
    assert [sum(j.d_h for j in c) for c in narrow] == [16, 16, 16, *[0] * 13]
    wide = partition_attention(cfg, "sv", [64], 1, 512, 1, "itpp")
    assert [[j.d_h for j in c] for c in wide] == [[32]] * 16


def test_itpp_has_no_sv_reduction(cfg):
    def tasks(scheme):
        plan = LayerPlan(
            {},
            partition_attention(cfg, "qk", [1000], 2, 128, scheme=scheme),
            partition_attention(cfg, "sv", [1000], 2, 128, scheme=scheme),
            2, 1, 128, (1000,), scheme,
            tuple(attention_units(cfg, [1000], 2, 128, 1, scheme)),
            PARTITIONS[Partition(scheme)].sv_reduction,
        )  # fmt: skip
        return plan_tasks(plan, cfg, lambda j: _Stats(10))

    itpp, tcp = tasks("itpp"), tasks("tcp")
    assert itpp.sv_parts == [8, 8] and itpp.reduction_cost == [0, 0]
    assert not any(itpp.after_sv())
    # TCP sums 16 partials of 128 outputs: 15 * 128 / 256 = 7.5 -> 8 EPU cycles per pair.
    assert tcp.sv_parts == [16, 16] and tcp.reduction_cost == [8, 8]


def test_auto_stands_for_tcp_and_hfp():
    assert candidates("auto") == (Partition.TCP, Partition.HFP)
    assert candidates("itpp") == (Partition.ITPP,)
    with pytest.raises(PartitionError, match="chooses per layer"):
        partition_attention(load_preset("aim-16ch"), "qk", [10], 1, 64, scheme="auto")


def test_gemv_jobs_batch_per_channel_split_by_the_gpr():
    # aim-16ch: 16 channels, 16 banks, a 16384-tile GPR. 512 x 4096 deals 32 rows (2 groups)
    # to each channel; one request needs 256 input tiles + 2 output tiles, so the GPR holds
    # 16384 // 258 = 63 requests: a batch of 130 runs as GEMVs of 63, 63 and 4 requests.
    cfg = load_preset("aim-16ch")
    jobs = _gemv_jobs(cfg, 512, 4096, 130)
    assert len(jobs) == 16
    assert all(
        [(j.d_out, j.d_in, j.batch) for j in c] == [(32, 4096, b) for b in (63, 63, 4)]
        for c in jobs
    )
    assert [[j.batch for j in c] for c in _gemv_jobs(cfg, 512, 4096, 5)] == [[5]] * 16
    # 40 rows over 16 channels: 16 each for two channels, 8 (a part group) for one, none else.
    shares = [[j.d_out for j in c] for c in _gemv_jobs(cfg, 40, 64, 3)]
    assert shares == [[16], [16], [8]] + [[]] * 13
