"""LibraPIM end to end (seed 002), first part: NPU+AiM vs LibraPIM decode steps with DBO.

Two systems on the same hardware (``librapim-hbm2`` PIM, ``librapim-npu`` xPU by default),
timed with the xPU+PIM step's parts (:mod:`sim.decode_step.hetero`: the xPU cost model,
the PIM channel TLM through :func:`sim.decode_step.step.attention_cycles`, the four-resource
:func:`~sim.decode_step.hetero.pipeline_schedule`):

* **NPU+AiM**: serial, one batch group (``K = 1``), FC on the xPU, attention on PIM.
* **pipelined**: batch pipelining over ``groups`` groups without offloading (what DBO adds
  is the difference to the next row).
* **LibraPIM**: batch pipelining over ``groups`` batch groups, and per group the split
  Algorithm 1 (:func:`models.dbo.dynamic_batch_offload`) chooses: ``m`` requests' FFN run on
  PIM after the group's attention (PIM FFN timed as the PIM-only step times FC GEMVs,
  :func:`sim.decode_step.step.layer_timing`), or ``n`` requests' attention run on the xPU
  (:func:`models.xpu.attention_cost`).

The report puts Algorithm 1's prediction (FLOPs over throughput, ``layers x`` the per-layer
time) beside the simulated step. What is not modelled (DEX's shared-bus conflicts at system
level, the AttAcc- and NeuPIMs-like systems, Figs. 19-22) is listed in ``docs/librapim.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from compiler.llm import LayerOp, ModelSpec, gemv_shapes
from compiler.plan import micro_batches
from models.config import HardwareConfig
from models.dbo import DboDecision, DboModel, DboThroughput, dynamic_batch_offload
from models.hub import link_cycles
from models.xpu import VectorOp, attention_cost, gemm_cost, vector_cost
from models.xpu_config import XpuConfig
from sim.decode_step.hetero import pipeline_schedule
from sim.decode_step.kernels import KernelCache
from sim.decode_step.setup import DecodeError, DecodeSetup
from sim.decode_step.step import attention_cycles, layer_timing

__all__ = [
    "LibrapimSystem",
    "dbo_model",
    "dbo_throughput",
    "format_librapim",
    "run_librapim",
]


def dbo_model(spec: ModelSpec) -> DboModel:
    """Algorithm 1's model parameters of ``spec``, as FLOPs per request (``models/dbo.py``).

    ``K_QKV = 2 qkv_dim / d_model`` (6 without GQA), ``K_Proj = 2 heads d_h / d_model``,
    ``K_FFN = 2 x`` FFN matrices (4 for GELU/ReLU, 6 for SwiGLU) and
    ``K_MHA = 4 heads d_h / d_model`` (QK^T and SV).
    """
    d, hd = spec.hidden, spec.heads * spec.head_dim
    return DboModel(
        d_model=d,
        d_ff=spec.intermediate,
        k_qkv=2 * spec.qkv_dim / d,
        k_proj=2 * hd / d,
        k_ffn=2.0 * (3 if spec.ffn == "swiglu" else 2),
        k_mha=4 * hd / d,
        context_window=spec.context_window,
    )


def dbo_throughput(xpu: XpuConfig, hw: HardwareConfig, element_bytes: int = 2) -> DboThroughput:
    """The throughputs Algorithm 1 predicts with, from the presets.

    ``FLOPS_xPU``: the xPU's matrix peak x its compute efficiency cap. ``FLOPS_xPU_GEMV``:
    attention reads each K/V element once per multiply-accumulate, so 2 FLOPs per
    ``element_bytes`` at the capped bandwidth. ``FLOPS_PIM``: every bank's MAC unit
    (``mac_elements`` multiply-accumulates) once per ``tCCD`` on every channel.
    """
    ch, t = hw.channel, hw.timing
    pim = hw.module.channels * ch.banks * ch.mac_elements * 2 * hw.module.freq_ghz * 1e9
    return DboThroughput(
        xpu_flops=xpu.peak_flops() * xpu.compute.efficiency,
        xpu_gemv_flops=xpu.bandwidth * xpu.memory.efficiency * 2 / element_bytes,
        pim_flops=pim / t.tCCD,
        pim_channels=hw.module.channels,
    )


def _cycles(seconds: float, freq_ghz: float) -> int:
    return math.ceil(seconds * freq_ghz * 1e9)


def _xpu_layer(
    spec: ModelSpec, xpu: XpuConfig, freq: float, batch: int, ffn_batch: int, att: tuple[int, ...]
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Pre-attention (norm, QKV) and post-attention ops of one layer on the xPU for ``batch``
    requests, FFN only for ``ffn_batch`` of them, plus attention for contexts ``att``."""

    def gemm(op: LayerOp, m: int) -> int:
        d_out, d_in = gemv_shapes(spec)[op]
        return _cycles(gemm_cost(xpu, m, d_in, d_out).seconds, freq) if m else 0

    def vec(op: VectorOp, n: int) -> int:
        return _cycles(vector_cost(xpu, op, n).seconds, freq) if n else 0

    act = VectorOp.SWIGLU if spec.ffn == "swiglu" else VectorOp.RELU
    norm = vec(VectorOp.NORM, batch * spec.hidden)
    pre = [("vector", norm), ("qkv", gemm(LayerOp.QKV, batch))]
    post = [
        ("xpu_attention", _attention_cycles_xpu(spec, xpu, freq, att)),
        ("proj", gemm(LayerOp.PROJ, batch)),
        ("vector", 2 * vec(VectorOp.RESIDUAL, batch * spec.hidden) + norm),
        ("vector", vec(act, ffn_batch * spec.intermediate)),
        ("ffn1", gemm(LayerOp.FFN1, ffn_batch)),
        ("ffn2", gemm(LayerOp.FFN2, ffn_batch)),
    ]
    return pre, post


def _attention_cycles_xpu(
    spec: ModelSpec, xpu: XpuConfig, freq: float, contexts: tuple[int, ...]
) -> int:
    if not contexts:
        return 0
    cost = attention_cost(xpu, list(contexts), spec.heads, spec.kv_heads, spec.head_dim)
    return _cycles(cost.seconds, freq)


@dataclass(frozen=True)
class LibrapimSystem:
    """One system's simulated step beside Algorithm 1's prediction."""

    name: str
    groups: int
    group_sizes: list[int]
    decisions: list[dict[str, Any]]
    cycles: int
    step_seconds: float
    predicted_seconds: float
    tokens_per_s: float
    busy: dict[str, float] = field(default_factory=dict)  # fraction of the step each works
    ops: dict[str, int] = field(default_factory=dict)


def _decision_dict(d: DboDecision) -> dict[str, Any]:
    return {
        "case": str(d.case),
        "batch": d.batch,
        "seq_len": d.seq_len,
        "m": d.m,
        "n": d.n,
        "m_exact": d.m_exact,
        "n_exact": d.n_exact,
        "m_capped": d.m_capped,
        "xpu_seconds": d.xpu_seconds,
        "pim_seconds": d.pim_seconds,
    }


def _system(
    name: str,
    spec: ModelSpec,
    hw: HardwareConfig,
    xpu: XpuConfig,
    lengths: tuple[int, ...],
    groups: int,
    use_dbo: bool,
    cache: KernelCache,
) -> LibrapimSystem:
    freq, layers, e = hw.module.freq_ghz, spec.layers, spec.element_bytes
    model, thr = dbo_model(spec), dbo_throughput(xpu, hw, e)
    xpu_t, in_t, pim_t, out_t, decisions = [], [], [], [], []
    xpu_pred = pim_pred = 0.0  # Algorithm 1's per-layer busy seconds, summed over the groups
    for mb in micro_batches(lengths, groups):
        d = dynamic_batch_offload(model, thr, len(mb), max(mb))
        decisions.append(_decision_dict(d))
        m, n = (d.m, d.n) if use_dbo else (0, 0)
        if use_dbo:
            xpu_pred, pim_pred = xpu_pred + d.xpu_seconds, pim_pred + d.pim_seconds
        else:
            b = d.before
            xpu_pred += b["t_qkv_xpu"] + b["t_proj_xpu"] + b["t_ffn_xpu"]
            pim_pred += b["t_mha_pim"]
        # MHA offload: the n longest requests' attention moves to the xPU.
        order = sorted(range(len(mb)), key=lambda i: -mb[i])
        on_xpu = tuple(mb[i] for i in order[:n])
        on_pim = tuple(mb[i] for i in order[n:])
        pim_setup = DecodeSetup(spec, hw, mb, check_capacity=False)
        pre, post = _xpu_layer(spec, xpu, freq, len(mb), len(mb) - m, on_xpu)
        pim_ops: list[tuple[str, int]] = [("qk", 0), ("softmax", 0), ("sv", 0)]
        if on_pim:
            _, att, _ = attention_cycles(pim_setup, on_pim, cache)
            pim_ops = [(k, att[k]) for k in ("qk", "softmax", "sv")]
        if m:
            fc = layer_timing(pim_setup, tuple(mb[:m]), cache).cycles
            pim_ops.append(("pim_ffn", fc[str(LayerOp.FFN1)] + fc[str(LayerOp.FFN2)]))
        qkv_b = len(on_pim) * (spec.heads + 2 * spec.kv_heads) * spec.head_dim * e
        out_b = len(on_pim) * spec.heads * spec.head_dim * e + m * spec.hidden * e
        if m:  # the offloaded requests' FFN input goes to PIM too
            qkv_b += m * spec.hidden * e
        xpu_t.append([pre] + [post + pre] * (layers - 1) + [post])
        in_t.append([[("qkv_transfer", link_cycles(hw, qkv_b, "host"))]] * layers)
        pim_t.append([pim_ops] * layers)
        out_t.append([link_cycles(hw, out_b, "host")] * layers)
    tl = pipeline_schedule(xpu_t, in_t, pim_t, out_t)
    # Prediction: serial, the two devices' sum; pipelined, the busier device bounds each layer.
    per_layer = max(xpu_pred, pim_pred) if groups > 1 else xpu_pred + pim_pred
    ops: dict[str, int] = {}
    for dev in tl.tasks.values():
        for _, _, segs, _ in dev:
            for op, c in segs:
                ops[op] = ops.get(op, 0) + c
    seconds = tl.cycles / (freq * 1e9)
    return LibrapimSystem(
        name=name,
        groups=groups,
        group_sizes=[len(mb) for mb in micro_batches(lengths, groups)],
        decisions=decisions,
        cycles=tl.cycles,
        step_seconds=seconds,
        predicted_seconds=per_layer * layers,
        tokens_per_s=len(lengths) / seconds,
        busy={d: tl.busy(d) / tl.cycles for d in ("xpu", "pim")},
        ops=ops,
    )


def run_librapim(
    spec: ModelSpec,
    hw: HardwareConfig,
    xpu: XpuConfig,
    lengths: tuple[int, ...],
    groups: int = 2,
    sched: str = "dcs",
) -> dict[str, LibrapimSystem]:
    """Time one decode step of ``lengths`` on NPU+AiM (serial), with batch pipelining alone
    (``groups`` groups, no offloading) and on LibraPIM (pipelining + DBO); keys
    ``"npu+aim"``, ``"pipelined"``, ``"librapim"``.

    Capacity is not checked (the paper's 16 GB does not hold GPT-3's weights either).
    """
    if isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= len(lengths):
        raise DecodeError(
            f"groups = {groups!r}: must be an integer from 1 to the batch ({len(lengths)})"
        )
    cache = KernelCache(hw, sched, True, dpa=True, dpa_max_tokens=max(lengths))
    return {
        "npu+aim": _system("npu+aim", spec, hw, xpu, lengths, 1, False, cache),
        "pipelined": _system("pipelined", spec, hw, xpu, lengths, groups, False, cache),
        "librapim": _system("librapim", spec, hw, xpu, lengths, groups, True, cache),
    }


def format_librapim(systems: dict[str, LibrapimSystem]) -> str:
    """A text table: per system its step time, Algorithm 1's prediction, tokens/s, the
    devices' utilisation and the DBO decision of each batch group."""
    base = systems["npu+aim"].step_seconds
    lines = [
        f"{'system':10s} {'groups':>6s} {'simulated ms':>13s} {'predicted ms':>13s} "
        f"{'tok/s':>9s} {'speedup':>8s} {'xPU busy':>9s} {'PIM busy':>9s}"
    ]
    for s in systems.values():
        lines.append(
            f"{s.name:10s} {s.groups:6d} {s.step_seconds * 1e3:13.3f} "
            f"{s.predicted_seconds * 1e3:13.3f} {s.tokens_per_s:9.1f} "
            f"{base / s.step_seconds:7.2f}x {s.busy['xpu']:9.1%} {s.busy['pim']:9.1%}"
        )
    lines.append("DBO decisions (LibraPIM, per batch group):")
    for i, d in enumerate(systems["librapim"].decisions):
        lines.append(
            f"  group {i}: B={d['batch']} L={d['seq_len']} {d['case']}: m={d['m']} n={d['n']} "
            f"(eq.1 m*={d['m_exact']:.2f}, eq.2 n*={d['n_exact']:.2f}"
            f"{', m capped at the PIM channels' if d['m_capped'] else ''})"
        )
    return "\n".join(lines)
