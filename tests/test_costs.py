"""The per-layer xPU/GPU cost table (sim.systems.costs), the TP split and the KV-head rule
(compiler.plan.tp_shapes, KvHeads), checked against numbers worked by hand."""

from __future__ import annotations

import dataclasses

import pytest
from pimphony.compiler.llm import LayerOp, load_model
from pimphony.compiler.plan import DecodeMappingError, KvHeads, kv_heads_per_device, tp_shapes
from pimphony.models.hub import (
    NORM_FLOPS_PER_ELEMENT,
    RELU_FLOPS_PER_ELEMENT,
    RESIDUAL_FLOPS_PER_ELEMENT,
    SOFTMAX_FLOPS_PER_SCORE,
    SWIGLU_FLOPS_PER_ELEMENT,
)
from pimphony.models.xpu import VectorOp
from pimphony.sim.systems.costs import ATTENTION, layer_costs, op_cycles

# the tiny model (4 query heads in 2 KV groups, d_h 16, hidden 64, SwiGLU 128, FP16) and the
# A100's reached rates (FP16, 40 MiB buffer, no systolic or lane padding)
from tests.test_gpu_decode import A100, BW, PEAK, TINY, VEC


def test_tp_shapes_gpt3():
    s = tp_shapes(load_model("gpt3-175b"), 8)
    # Megatron: QKV/FFN1 split d_out, Proj/FFN2 split d_in; d = 12288, d_ff = 49152
    assert s[LayerOp.QKV] == (3 * 12288 // 8, 12288)
    assert s[LayerOp.PROJ] == (12288, 12288 // 8)
    assert s[LayerOp.FFN1] == (49152 // 8, 12288)
    assert s[LayerOp.FFN2] == (12288, 49152 // 8)


def test_tp_shapes_tiny_by_hand():
    # tp 2: 2 query heads + 1 KV head (K and V) of 16; SwiGLU FFN1 2 x 128 / 2 columns
    assert tp_shapes(TINY, 2) == {
        LayerOp.QKV: ((2 + 2 * 1) * 16, 64),
        LayerOp.PROJ: (64, 2 * 16),
        LayerOp.FFN1: (128, 64),
        LayerOp.FFN2: (64, 64),
    }
    assert tp_shapes(TINY, 1)[LayerOp.QKV] == ((4 + 2 * 2) * 16, 64)


def test_kv_head_rule_gpu_replicates_pim_refuses():
    m = load_model("llama-3.1-70b")  # 64 query heads, 8 KV heads, d_h 128
    for rule in KvHeads:
        assert kv_heads_per_device(m, 4, rule) == 2
    assert kv_heads_per_device(m, 16, KvHeads.REPLICATE) == 1
    with pytest.raises(DecodeMappingError, match=r"tp = 16: must divide .* kv_heads = 8"):
        kv_heads_per_device(m, 16)  # PIM (the default): a KV head is never copied
    with pytest.raises(DecodeMappingError, match="divide or be a multiple of"):
        kv_heads_per_device(m, 12, KvHeads.REPLICATE)
    # replicated: each of 16 GPUs computes 4 query heads and its copy of one K and one V head
    assert tp_shapes(m, 16, KvHeads.REPLICATE)[LayerOp.QKV] == ((4 + 2) * 128, 8192)
    with pytest.raises(DecodeMappingError):
        tp_shapes(m, 16)


def test_layer_costs_tiny_by_hand():
    # the roofline (per-kernel costs: tests/test_gpu_decode.py and tests/test_xpu.py)
    costs = layer_costs(TINY, A100.roofline(), 3, 2, contexts=(10, 20))
    assert list(costs) == ["qkv", "proj", "ffn1", "ffn2", ATTENTION, "norm", "residual", "swiglu"]
    counts = {k: n for k, (_, n) in costs.items()}
    assert counts == dict.fromkeys(costs, 1) | {"norm": 2, "residual": 2}
    flops = {k: c.flops for k, (c, _) in costs.items()}
    nbytes = {k: c.bytes for k, (c, _) in costs.items()}
    # GEMMs of 3 rows on one of 2 devices: 2 M K N FLOPs; activations, weights and outputs
    # read/written once (everything fits the buffer), 2 bytes each
    assert flops["qkv"] == 2 * 3 * 64 * 64 and nbytes["qkv"] == 2 * (3 * 64 + 64 * 64 + 3 * 64)
    assert flops["proj"] == 2 * 3 * 32 * 64 and nbytes["proj"] == 2 * (3 * 32 + 32 * 64 + 3 * 64)
    assert flops["ffn1"] == 2 * 3 * 64 * 128
    assert nbytes["ffn1"] == 2 * (3 * 64 + 64 * 128 + 3 * 128)
    assert flops["ffn2"] == 2 * 3 * 64 * 64
    # attention: 2 query heads over 1 KV head, 30 tokens: QK^T and SV 4 T d_h per head,
    # softmax per score; reads K and V once, the queries, writes the outputs
    assert flops[ATTENTION] == 4 * 30 * 16 * 2 + SOFTMAX_FLOPS_PER_SCORE * 30 * 2
    assert nbytes[ATTENTION] == 2 * (2 * 30 * 1 * 16) + 2 * (2 * 2 * 2 * 16)
    # norms and residuals over 3 x 64 (not split), SwiGLU over 3 x 128 / 2 (2 reads, 1 write)
    assert flops["norm"] == NORM_FLOPS_PER_ELEMENT * 192 and nbytes["norm"] == 2 * 2 * 192
    assert flops["residual"] == RESIDUAL_FLOPS_PER_ELEMENT * 192
    assert nbytes["residual"] == 3 * 2 * 192
    assert flops["swiglu"] == SWIGLU_FLOPS_PER_ELEMENT * 192 and nbytes["swiglu"] == 3 * 2 * 192
    # the roofline: QKV reads 8,960 B, memory bound; the norm 768 B
    qkv, norm = costs["qkv"][0], costs["norm"][0]
    assert qkv.seconds == pytest.approx(max(24576 / PEAK, 8960 / BW))
    assert norm.seconds == pytest.approx(max(NORM_FLOPS_PER_ELEMENT * 192 / VEC, 768 / BW))
    assert op_cycles(costs, 1.0)["qkv"] == 6  # 8,960 B / 1.733 TB/s = 5.17 ns, 1 GHz
    assert op_cycles(costs, 2.0)["qkv"] == 11


def test_layer_costs_replicated_kv_and_relu():
    relu = dataclasses.replace(TINY, name="tiny-relu", ffn="relu")
    assert relu.activation == VectorOp.RELU and TINY.activation == VectorOp.SWIGLU
    costs = layer_costs(relu, A100, 2, 4, contexts=(8,), kv=KvHeads.REPLICATE)
    # 4 devices, 2 KV heads: 1 query head and a copy of 1 KV head each
    assert costs["qkv"][0].flops == 2 * 2 * 64 * (1 + 2 * 1) * 16
    assert costs[ATTENTION][0].bytes == 2 * (2 * 8 * 1 * 16) + 2 * (2 * 1 * 1 * 16)
    # ReLU FFN1 has 128 / 4 columns; the activation 2 x 32 elements, 1 read 1 write
    assert costs["ffn1"][0].flops == 2 * 2 * 64 * 32
    assert "swiglu" not in costs
    assert costs["relu"][0].flops == RELU_FLOPS_PER_ELEMENT * 64
    assert costs["relu"][0].bytes == 2 * 2 * 64
    with pytest.raises(DecodeMappingError):
        layer_costs(relu, A100, 2, 4)  # PIM's rule: 4 devices cannot split 2 KV heads


def test_layer_costs_leaves_out_ops_without_work():
    costs = layer_costs(TINY, A100, 3, 2, ffn_batch=0)
    assert list(costs) == ["qkv", "proj", "norm", "residual"]  # FFN elsewhere, no attention
    only_attention = layer_costs(TINY, A100, 0, 2, ffn_batch=0, contexts=(5,))
    assert list(only_attention) == [ATTENTION]
    assert layer_costs(TINY, A100, 0) == {}
