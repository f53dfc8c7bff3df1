"""The per-layer cost table of the xPU/GPU side of a step: one layer's ops on one device.

:func:`layer_costs` is the one place a step's xPU or GPU work is costed op by op on
:mod:`models.xpu` (``docs/xpu.md``): the four FC GEMMs of one of ``tp`` devices (the
tensor-parallel split :func:`compiler.plan.tp_shapes`), decode attention of the contexts
the device attends to, the two norms, the two residual adds and the FFN's activation
(:attr:`compiler.llm.ModelSpec.activation`). Every system builds on it: the GPU step
(:func:`sim.systems.gpu.gpu_op_costs`), the xPU+PIM step and its energy
(:mod:`sim.systems.hetero`, :func:`sim.systems.energy.hetero_energy`), the LibraPIM systems
and their energy, and the xPU prefill (:func:`xpu_prefill_seconds`).

Where KV heads go when ``tp`` exceeds them is the one rule :class:`compiler.plan.KvHeads`:
GPUs replicate a KV head (``KvHeads.REPLICATE``), PIM modules refuse (``KvHeads.SPLIT``,
the default). It lives beside the split in :mod:`compiler.plan` because the compiler's PIM
plan splits the same GEMVs and the compiler may not import ``sim``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pimphony.compiler.llm import LayerOp, ModelSpec
from pimphony.compiler.plan import KvHeads, kv_heads_per_device, tp_shapes
from pimphony.models.xpu import (
    VectorOp,
    XpuCost,
    attention_cost,
    gemm_cost,
    ring_allreduce_seconds,
    vector_cost,
)
from pimphony.models.xpu_config import XpuConfig

__all__ = [
    "ATTENTION",
    "OpCosts",
    "hidden_allreduce_seconds",
    "layer_costs",
    "op_cycles",
    "xpu_prefill_seconds",
]

#: An op's name -> (its cost on one device, how many times one layer runs it).
OpCosts = dict[str, tuple[XpuCost, int]]

#: The table's key of decode attention on the device.
ATTENTION = "attention"


def hidden_allreduce_seconds(spec: ModelSpec, device: XpuConfig, rows: int, shards: int) -> float:
    """One ring all-reduce of ``rows`` hidden vectors over ``shards`` devices (tensor
    parallelism's reduce after the projection and after FFN2: a layer pays two)."""
    return ring_allreduce_seconds(device, rows * spec.hidden * spec.element_bytes, shards)


def layer_costs(
    spec: ModelSpec,
    device: XpuConfig,
    batch: int,
    tp: int = 1,
    *,
    ffn_batch: int | None = None,
    contexts: Sequence[int] = (),
    kv: KvHeads = KvHeads.SPLIT,
) -> OpCosts:
    """One layer's ops on one of ``tp`` devices for ``batch`` rows (requests, or prompt
    tokens in prefill).

    Parameters
    ----------
    spec, device : the model and the device preset.
    batch : rows of the QKV and projection GEMMs, the norms and the residual adds.
    tp : devices sharing every layer (:func:`compiler.plan.tp_shapes`).
    ffn_batch : rows of FFN1, the activation and FFN2 (default ``batch``; fewer when the rest
        of the FFN runs elsewhere).
    contexts : context lengths of the requests whose attention runs on the device.
    kv : where KV heads go when ``tp`` exceeds them (:class:`compiler.plan.KvHeads`).

    Returns
    -------
    OpCosts
        In this order: ``qkv``, ``proj``, ``ffn1``, ``ffn2`` (count 1 each), ``attention``
        (1; the device's ``heads / tp`` query heads over its KV heads), ``norm`` (2),
        ``residual`` (2, each over ``batch x hidden``) and the activation, keyed by its
        :class:`~models.xpu.VectorOp` (1, over ``ffn_batch x intermediate / tp``). An op with
        no rows (or no contexts) is left out.
    """
    ffn = batch if ffn_batch is None else ffn_batch
    rows = {LayerOp.QKV: batch, LayerOp.PROJ: batch, LayerOp.FFN1: ffn, LayerOp.FFN2: ffn}
    costs: OpCosts = {}
    for op, (d_out, d_in) in tp_shapes(spec, tp, kv).items():
        if rows[op]:
            costs[str(op)] = (gemm_cost(device, rows[op], d_in, d_out), 1)
    if contexts:
        heads, kv_heads = spec.heads // tp, kv_heads_per_device(spec, tp, kv)
        att = attention_cost(device, list(contexts), heads, kv_heads, spec.head_dim)
        costs[ATTENTION] = (att, 1)
    if batch:
        for op in (VectorOp.NORM, VectorOp.RESIDUAL):
            costs[str(op)] = (vector_cost(device, op, batch * spec.hidden), 2)
    if ffn:
        act = spec.activation
        costs[str(act)] = (vector_cost(device, act, ffn * spec.intermediate // tp), 1)
    return costs


def op_cycles(costs: Mapping[str, tuple[XpuCost, int]], freq_ghz: float) -> dict[str, int]:
    """Cycles at ``freq_ghz`` of ONE run of each op of ``costs`` (counts not applied):
    ``ceil(seconds x freq)``."""
    return {key: math.ceil(cost.seconds * freq_ghz * 1e9) for key, (cost, _) in costs.items()}


def xpu_prefill_seconds(
    device: XpuConfig, model: ModelSpec, prompts: Sequence[int], shards: int = 1
) -> float:
    """Seconds to prefill ``prompts`` (tokens each) on ``shards`` tensor-parallel devices of
    the xPU cost model (``docs/xpu.md``): per layer the cost table
    :func:`layer_costs` over all prompt tokens (FC GEMMs, 2 norms, 2
    residual adds, the activation; KV heads replicated as on GPUs), each prompt's attention
    as two GEMMs per query head (``n x d_h x n`` and ``n x n x d_h``, the full square: no
    causal skipping) and, on more than one device, two ring all-reduces; times the layers."""
    spec, n = model, int(sum(prompts))
    layer = 0.0
    for cost, count in layer_costs(spec, device, n, shards, kv=KvHeads.REPLICATE).values():
        layer += count * cost.seconds
    heads, d_h = spec.heads // shards, spec.head_dim
    for t in prompts:
        layer += heads * (
            gemm_cost(device, t, d_h, t).seconds + gemm_cost(device, t, t, d_h).seconds
        )
    if shards > 1:
        layer += 2 * hidden_allreduce_seconds(spec, device, n, shards)
    return spec.layers * layer
