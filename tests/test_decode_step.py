"""The decode step on a multi-module system (sim/systems/, models/module.py, models/system.py,
compiler/plan.py)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pytest
from pimphony.compiler.dpa import encode_kernel
from pimphony.compiler.llm import load_model
from pimphony.compiler.plan import (
    ChannelJob,
    DecodeMappingError,
    LayerPlan,
    Parallelism,
    layer_plan,
    micro_batches,
    stage_layers,
)
from pimphony.models.config import load_preset
from pimphony.models.dpa.dispatcher import decode_times
from pimphony.models.hub import (
    NORM_FLOPS_PER_ELEMENT,
    RESIDUAL_FLOPS_PER_ELEMENT,
    SWIGLU_FLOPS_PER_ELEMENT,
    epu_cycles,
    hub_instruction_bytes,
    link_cycles,
)
from pimphony.sim.systems.admission import fill_batch
from pimphony.sim.systems.report import OP_KEYS, OP_STYLE
from pimphony.sim.systems.setup import DecodeError, DecodeSetup
from pimphony.sim.systems.step import attention_schedule, run_decode

from tests.helpers import tiny_model

TINY = tiny_model(layers=3, heads=8, kv_heads=4, hidden=512, intermediate=768, head_dim=64)


@dataclass(frozen=True)
class _Stats:
    cycles: int


def _plan(qk: list[list[ChannelJob]], sv: list[list[ChannelJob]], lengths, d_h=16) -> LayerPlan:
    return LayerPlan({}, qk, sv, kv_heads=2, gqa_group=1, head_dim=d_h, lengths=lengths)


def test_attention_pipeline_by_hand(cfg):
    # Two channels, one request, two KV heads; QK^T parts take 10 cycles, SV parts 20.
    # EPU at 16 flop/cycle: softmax of 32 scores = 5 * 32 / 16 = 10 cycles, reduction of
    # 2 partial 16-vectors = 16 adds = 1 cycle.
    small = cfg.replace(**{"module.epu_flops_per_cycle": 16})
    qk = [[ChannelJob("qk", 16, 16, 1, 0, h) for h in (0, 1)] for _ in range(2)]
    sv = [[ChannelJob("sv", 16, 16, 1, 0, h) for h in (0, 1)] for _ in range(2)]
    plan = _plan(qk, sv, (32,))

    def run(j):
        return _Stats(10 if j.kind == "qk" else 20)

    # QK0 0-10, QK1 10-20 | softmax0 10-20, softmax1 20-30 | SV0 20-40, SV1 40-60 |
    # reduction0 40-41, reduction1 60-61.
    full = attention_schedule(plan, small, run)
    assert full.cycles == 61
    assert (full.qk_busy, full.sv_busy, full.softmax_busy, full.reduction_busy) == (40, 80, 20, 2)
    assert list(full.channel_busy) == [60, 60]
    assert attention_schedule(plan, small, run, reduction=False).cycles == 60
    # Without softmax cost SV0 could start at 20 anyway (after QK1): no marginal cost.
    assert attention_schedule(plan, small, run, softmax=False).cycles == 61


def test_epu_serves_in_readiness_order(cfg):
    # HFP-like: channel 0 holds pair 0 (slow QK^T), channel 1 pair 1 (fast). The EPU must do
    # softmax 1 first: SV1 runs 20-40 and SV0 110-130. A fixed pair order would give 140.
    small = cfg.replace(**{"module.epu_flops_per_cycle": 16})
    qk = [[ChannelJob("qk", 100, 16, 1, 0, 0)], [ChannelJob("qk", 10, 16, 1, 0, 1)]]
    sv = [[ChannelJob("sv", 100, 16, 1, 0, 0)], [ChannelJob("sv", 10, 16, 1, 0, 1)]]
    plan = _plan(qk, sv, (32,))
    cost = {("qk", 100): 100, ("qk", 10): 10, ("sv", 100): 20, ("sv", 10): 20}
    out = attention_schedule(plan, small, lambda j: _Stats(cost[(j.kind, j.tokens)]))
    assert out.cycles == 130
    assert out.reduction_busy == 0  # one SV part per pair: nothing to reduce


def test_mapping_helpers():
    assert stage_layers(32, 3) == [11, 11, 10]
    assert micro_batches([5, 6, 7, 8, 9], 2) == [(5, 7, 9), (6, 8)]
    assert micro_batches([5], 4) == [(5,)]
    with pytest.raises(DecodeMappingError, match="tp = 3 does not divide tiny kv_heads = 4"):
        Parallelism(3, 1).check(TINY)
    with pytest.raises(DecodeMappingError, match="pp = 4: tiny has only 3 layers"):
        Parallelism(1, 4).check(TINY)
    with pytest.raises(DecodeMappingError, match="tp = 0: must be a positive integer"):
        Parallelism(0, 1)


def test_layer_plan_splits_by_tp_and_channels(cfg):
    plan = layer_plan(TINY, cfg, (100, 300), tp=2, partition="tcp")
    # qkv d_out (8 + 2*4) * 64 / 2 = 512 rows: 32 per channel; ffn1 2*768/2 = 768: 48 each.
    assert [j[0].d_out for j in plan.gemv["qkv"]] == [32] * 16
    assert [j[0].d_out for j in plan.gemv["ffn1"]] == [48] * 16
    assert {j[0].d_in for j in plan.gemv["ffn2"]} == {384}
    assert {j[0].d_in for j in plan.gemv["proj"]} == {8 * 64 // 2}
    # One batched GEMV per channel share for both requests (row reuse), not one per request.
    assert all([(j.batch, j.shape["batch"]) for j in jobs] == [(2, 2)] for jobs in plan.gemv["qkv"])
    assert plan.kv_heads == 2
    # TCP: every request's tokens over all channels, for each of the module's 2 KV heads.
    assert sum(j.tokens for jobs in plan.qk for j in jobs if j.request == 1) == 2 * 300
    hfp = layer_plan(TINY, cfg, (100, 300), tp=2, partition="hfp")
    assert sum(bool(j) for j in hfp.qk) == 4  # 2 requests x 2 KV heads: 12 channels idle


@pytest.mark.parametrize(
    "partition,sched,memory",
    [("tcp", "dcs", "lazy"), ("hfp", "static", "static"), ("tcp", "pingpong", "static")],
)
def test_memoisation_is_exact(cfg, partition, sched, memory):
    setup = DecodeSetup(
        TINY,
        cfg,
        (300, 77, 1000),
        tp=2,
        pp=2,
        partition=partition,
        sched=sched,
        memory=memory,
        micro_batches=2,
    )
    fast = run_decode(setup)
    slow = run_decode(setup, memoize=False)
    sim_fast, sim_slow = fast.simulation, slow.simulation
    assert dataclasses.replace(fast, simulation={}) == dataclasses.replace(slow, simulation={})
    assert sim_fast["channel_commands"] == sim_slow["channel_commands"]
    assert sim_fast["kernels_simulated"] < sim_slow["kernels_simulated"]


def test_step_formulas(cfg):
    lengths = (300, 77, 1000)
    setup = DecodeSetup(TINY, cfg, lengths, tp=2, pp=1, memory="static")
    r = run_decode(setup)
    layers, b = TINY.layers, len(lengths)
    vector = b * TINY.hidden * 2
    # Two all-reduces per layer, each up to the host and back at 64 B/cycle.
    assert r.ops["allreduce"]["cycles"] == layers * 2 * 2 * math.ceil(vector / 64)
    flops = b * (
        2 * NORM_FLOPS_PER_ELEMENT * TINY.hidden
        + 2 * RESIDUAL_FLOPS_PER_ELEMENT * TINY.hidden
        + SWIGLU_FLOPS_PER_ELEMENT * TINY.intermediate // 2
    )
    assert r.ops["epu_other"]["cycles"] == layers * epu_cycles(cfg, flops)
    # Static memory: the attention instructions go over the host link every step.
    sent = (r.hub["instructions"]["qk"] + r.hub["instructions"]["sv"]) // 2  # per module
    per_layer = sent // layers * hub_instruction_bytes(cfg)
    assert r.ops["cmd_transfer"]["cycles"] == layers * link_cycles(cfg, per_layer)
    # One stage, one micro-batch: the step is the stage plus the host hop of the output.
    stage = sum(op["cycles"] for op in r.ops.values())
    assert r.cycles == stage + 2 * link_cycles(cfg, vector)
    assert r.tokens_per_s == pytest.approx(b / (r.cycles * 1e-9))
    lazy = run_decode(DecodeSetup(TINY, cfg, lengths, tp=2, pp=1, memory="lazy"))
    assert lazy.ops["cmd_transfer"]["cycles"] == 0
    assert lazy.dpa["enabled"] and lazy.dpa["program_bytes"] > 0
    # The dispatcher streams at one command per cycle, so DPA only adds the first QK^T
    # program's start-up (header, rules, body words, pipeline) once per layer.
    prog = encode_kernel(cfg, "qk", TINY.head_dim, TINY.gqa_group, max(lengths))
    startup = int(decode_times(1, len(prog.rules), None, prog.body_words)[0])
    assert startup == len(prog.instructions()) + 3
    assert lazy.ops["qk"]["cycles"] == r.ops["qk"]["cycles"] + layers * startup


def test_pipeline_period_and_bubbles(cfg):
    # pp 3 with one request: one micro-batch, two of three stages always idle.
    one = run_decode(DecodeSetup(TINY, cfg, (500,), pp=3))
    assert one.micro_batches == 1
    assert one.cycles == one.pipeline["round_trip_cycles"]
    assert one.pipeline["bubble_fraction"] > 0.6
    three = run_decode(DecodeSetup(TINY, cfg, (500, 500, 500), pp=3))
    assert three.micro_batches == 3
    assert three.pipeline["bubble_fraction"] < one.pipeline["bubble_fraction"]
    p = three.pipeline
    assert three.cycles == max(p["busiest_stage_cycles"], p["round_trip_cycles"])


def test_tcp_keeps_channels_busy_where_hfp_idles():
    spec, hw = load_model("llm-7b"), load_preset("aim-16ch")
    kw = {"tp": 4, "check_capacity": False}
    tcp = run_decode(DecodeSetup(spec, hw, (32768, 4096), partition="tcp", **kw))
    hfp = run_decode(DecodeSetup(spec, hw, (32768, 4096), partition="hfp", **kw))
    assert tcp.channel_utilization > 0.95
    assert hfp.channel_utilization < 0.75
    assert hfp.ops["qk"]["mac_utilization"] < 0.7 * tcp.ops["qk"]["mac_utilization"]
    assert tcp.tokens_per_s > 1.3 * hfp.tokens_per_s


def test_sv_reduction_is_a_small_share_of_attention():
    # PIMphony IV-C: < 0.2% of attention time for LLM-7B at 16K tokens.
    spec, hw = load_model("llm-7b"), load_preset("aim-16ch")
    r = run_decode(DecodeSetup(spec, hw, (16384,), check_capacity=False))
    assert r.epu["sv_reduction_busy_cycles"] > 0
    assert 0 < r.epu["sv_reduction_share_of_attention"] < 0.002


def test_capacity_errors_and_fill(cfg):
    spec = load_model("llm-7b")
    hw = load_preset("aim-32ch-32g")
    with pytest.raises(DecodeError, match=r"does not fit 1 module\(s\) = 32 GiB .* lazy"):
        run_decode(DecodeSetup(spec, hw, (32768,) * 2))
    static = fill_batch(spec, hw, 4, "static", [4096] * 100)
    lazy = fill_batch(spec, hw, 4, "lazy", [4096] * 100)
    # Static reserves the 32K window per request; lazy only the 4K used (1 MB chunks).
    kv_gib = 4 * 32 - spec.resident_weight_bytes / 2**30
    assert len(static) == int(kv_gib * 2**30 // (32768 * spec.kv_bytes_per_token))
    assert len(lazy) == int(kv_gib * 2**30 // (4096 * spec.kv_bytes_per_token))
    with pytest.raises(DecodeError, match="not even one request fits"):
        fill_batch(load_model("llm-72b"), hw, 1, "lazy", [1024])


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"lengths": ()}, "batch is empty"),
        ({"lengths": (0,)}, "context length of request 0 = 0"),
        ({"lengths": (5000,)}, "context length 5000 exceeds tiny's context_window 4096"),
        ({"partition": "xyz"}, "partition 'xyz' is unknown; allowed: hfp, tcp"),
        ({"sched": "fifo"}, "sched 'fifo' is unknown"),
        ({"memory": "paged"}, "memory 'paged' is unknown; allowed: lazy, static"),
        ({"tp": 3}, "tp = 3 does not divide"),
        ({"micro_batches": 0}, "micro_batches = 0"),
        ({"memory": "static", "max_context": 100}, "exceeds the static reservation"),
    ],
)
def test_bad_setups(cfg, kwargs, pattern):
    base = {"lengths": (200,)}
    with pytest.raises(DecodeError, match=pattern):
        DecodeSetup(TINY, cfg, **{**base, **kwargs})


def test_every_report_key_has_a_label_and_colour():
    assert tuple(OP_STYLE) == OP_KEYS


def test_hfp_at_128k_is_tiled_through_the_gpr_instead_of_refused():
    # Before GPR tiling this HFP shape (G = 8 x 131072 scores on one channel) was refused.
    spec, hw = load_model("llama-3.1-70b"), load_preset("aim-32ch-32g")
    setup = DecodeSetup(spec, hw, (131072,), tp=8, partition="hfp", check_capacity=False)
    report = run_decode(setup)
    # HFP slot: 16384 GPR tiles / (2 x 32 channels) = 256; G * (8 + 8) = 128 fixed; 16 groups
    # of 16 tokens = 256 tokens per tile: 131072 / 256 = 512 tiles per pair.
    assert report.epu["score_tiles_per_pair"] == 512
    assert report.epu["tile_combine_busy_cycles"] == 80 * 511 * math.ceil(3 * 8 * 128 / 256)


def test_unmappable_partition_names_the_gpr_and_a_remedy():
    spec = load_model("llama-3.1-70b")
    hw = load_preset("aim-32ch-32g").replace(**{"module.gpr_bytes": 8192})
    setup = DecodeSetup(spec, hw, (4096,), tp=8, partition="hfp", check_capacity=False)
    with pytest.raises(DecodeError, match=r"HFP cannot hold one tile of scores in the GPR.*--part"):
        run_decode(setup)


@pytest.mark.parametrize(
    "lengths, pick",
    [((256,) * 32, "hfp"), ((4096,), "tcp"), ((4096,) + (256,) * 31, None)],
)
def test_auto_picks_the_faster_partition_per_layer(cfg, lengths, pick):
    # 256 tokens x 32 requests: HFP's 64 whole pairs keep all 16 channels busy, while TCP cuts
    # each 256-token pair 16 ways (PIMphony Fig. 17b's short-context case). One 4096-token
    # request: HFP leaves 12 of 16 channels idle. Mixed: per layer whichever is faster.
    runs = {
        p: run_decode(DecodeSetup(TINY, cfg, lengths, partition=p, check_capacity=False))
        for p in ("hfp", "tcp", "auto")
    }
    auto = runs["auto"]
    if pick is not None:
        assert auto.partition_layers == {pick: TINY.layers}
        assert auto.cycles == runs[pick].cycles
    assert auto.cycles <= min(runs["hfp"].cycles, runs["tcp"].cycles)
    assert sum(auto.partition_layers.values()) == TINY.layers


@pytest.mark.parametrize(
    ("model", "lengths", "partition"),
    [
        ("llama-3.1-8b", (32768, 4000), "auto"),  # G = 4
        ("llama-3.1-70b", (32768,), "auto"),  # G = 8: the GPR limits one kernel's T
        ("llama-3.1-70b", (4000, 1234), "tcp"),
        ("llama-3.1-70b", (4000,), "itpp"),
    ],
)
def test_gqa_decode_step_never_falls_back_to_static_streams(model, lengths, partition):
    # issue 12: every GQA row-reuse shape is DPA-encodable (docs/dpa.md), and the programs are
    # encoded for the most tokens one channel kernel can hold (before: llama-3.1-70b at 32K
    # listed qk/sv d_h=128 G=8 as refused because the static layout at max_tokens = 32768
    # needs 16448 GPR tiles of 16384).
    spec, hw = load_model(model), load_preset("aim-16ch")
    setup = DecodeSetup(
        spec, hw, lengths, tp=8, memory="lazy", partition=partition, check_capacity=False
    )
    report = run_decode(setup)
    assert report.dpa["enabled"]
    assert report.dpa["refused"] == {}
    assert report.dpa["program_bytes"] > 0
