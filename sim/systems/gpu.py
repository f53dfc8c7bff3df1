"""One decode step of an LLM batch on N GPUs (tensor parallel), the GPU-only baseline.

The timing contract (``docs/decode.md``, GPU-only baseline): per layer, on every GPU, in
sequence,

``qkv`` GEMM -> attention (flash-decoding, paged KV) -> ``proj`` GEMM -> all-reduce ->
``ffn1`` GEMM -> norms, activation, residuals -> ``ffn2`` GEMM -> all-reduce

with every part costed by :mod:`models.xpu` on the GPU preset. The FC weights are split as
Megatron-LM does: QKV and FFN1 by output columns, projection and FFN2 by input rows, so a
GPU holds ``heads / N`` query heads and their KV heads. The step time is ``layers x`` the sum
of the parts (no overlap), like the PIM step, and neither step includes the LM head or the
embedding look-up (both hold their weights in memory).

Capacity: each GPU holds ``1/N`` of every weight (``ModelSpec.resident_weight_bytes / N``,
embeddings and LM head included, as the PIM admission counts them) and the KV of its heads in
blocks of :data:`KV_BLOCK_TOKENS` tokens (vLLM's paged attention); a request of ``T`` tokens
takes ``ceil(T / 16)`` blocks, and attention reads whole blocks.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import GEMV_OPS, ModelSpec
from pimphony.compiler.plan import DecodeMappingError, KvHeads, kv_heads_per_device
from pimphony.models.fileio import pyplot, write_figure
from pimphony.models.xpu import XpuCost, attention_cost
from pimphony.models.xpu_config import DeviceKind, XpuConfig
from pimphony.sim.provenance import inputs_digest
from pimphony.sim.systems import report as step_report
from pimphony.sim.systems.costs import ATTENTION, OpCosts, hidden_allreduce_seconds, layer_costs
from pimphony.sim.systems.energy import energy_line, gpu_energy
from pimphony.sim.systems.setup import DecodeError, checked_lengths

__all__ = [
    "GPU_PARTS",
    "PART_STYLE",
    "KV_BLOCK_TOKENS",
    "GpuPart",
    "GpuCycles",
    "GpuReport",
    "GpuSetup",
    "format_gpu_report",
    "gpu_fill_batch",
    "gpu_memory",
    "gpu_op_costs",
    "gpu_report_stem",
    "gpu_setup_digest",
    "kv_blocks",
    "plot_gpu_report",
    "run_gpu_decode",
]

#: Tokens per KV block of the paged cache (vLLM's default ``block_size`` 16, the issue's).
KV_BLOCK_TOKENS = 16


class GpuPart(StrEnum):
    """The four parts a GPU step's time is split into."""

    FC = "fc"
    ATTENTION = "attention"
    VECTOR = "vector"
    ALLREDUCE = "allreduce"


GPU_PARTS = tuple(GpuPart)


def kv_blocks(tokens: int, block: int = KV_BLOCK_TOKENS) -> int:
    """KV blocks of a request of ``tokens`` tokens: ``ceil(tokens / block)``."""
    return -(-tokens // block)


@dataclass(frozen=True)
class GpuSetup:
    """Everything one GPU decode step depends on; validated on construction.

    Parameters
    ----------
    model : ModelSpec
        The LLM.
    gpu : XpuConfig
        The GPU preset (``kind = "gpu"``).
    gpus : int
        GPUs in the tensor-parallel group, N.
    lengths : tuple of int
        Context length of each request (tokens its new query attends to).
    memory_fraction : float
        Fraction of each GPU's DRAM that weights and KV may use (vLLM's
        ``gpu_memory_utilization``; default 1.0, no reserve, as the PIM admission).
    check_capacity : bool
        Refuse batches that do not fit (default).
    """

    model: ModelSpec
    gpu: XpuConfig
    gpus: int
    lengths: tuple[int, ...]
    memory_fraction: float = 1.0
    check_capacity: bool = True

    def __post_init__(self) -> None:
        if self.gpu.kind != DeviceKind.GPU:
            raise DecodeError(
                f"--gpu {self.gpu.name}: kind {self.gpu.kind}, not a gpu; the GPU baseline "
                "takes a preset of kind gpu (pimphony xpus lists them)"
            )
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise DecodeError(f"--gpus {self.gpus!r}: must be a positive integer")
        if not 0 < self.memory_fraction <= 1:
            raise DecodeError(f"memory fraction {self.memory_fraction!r}: must be in (0, 1]")
        object.__setattr__(self, "lengths", checked_lengths(self.lengths))
        spec, n = self.model, self.gpus
        longest = max(self.lengths)
        if longest > spec.context_window:
            raise DecodeError(
                f"context length {longest} exceeds {spec.name}'s context_window "
                f"{spec.context_window}"
            )
        _kv_heads(spec, n)

    @property
    def kv_heads_per_gpu(self) -> int:
        """KV heads each GPU holds: ``kv_heads / N``, or 1 (replicated) when N > kv_heads
        (:class:`compiler.plan.KvHeads`)."""
        return _kv_heads(self.model, self.gpus)


def _kv_heads(spec: ModelSpec, gpus: int) -> int:
    """KV heads each of ``gpus`` GPUs holds (``KvHeads.REPLICATE``), once Megatron's split of
    ``spec`` over them is checked."""
    for what, size in (("heads", spec.heads), ("intermediate", spec.intermediate)):
        if size % gpus:
            raise DecodeError(
                f"--gpus {gpus}: must divide {spec.name}'s {what} = {size} (Megatron tensor "
                "parallelism splits them evenly)"
            )
    try:
        return kv_heads_per_device(spec, gpus, KvHeads.REPLICATE)
    except DecodeMappingError:
        raise DecodeError(
            f"--gpus {gpus}: {spec.name}'s kv_heads = {spec.kv_heads} must divide or be a "
            "multiple of the GPU count (KV heads are split, or replicated when fewer)"
        ) from None


def _block_bytes(spec: ModelSpec, kv_heads: int) -> int:
    """Bytes of one KV block on one GPU over all layers: ``16 x 2 L kv d_h e``."""
    return KV_BLOCK_TOKENS * 2 * spec.layers * kv_heads * spec.head_dim * spec.element_bytes


def _where(spec: ModelSpec, gpu: XpuConfig, gpus: int, fraction: float) -> str:
    return (
        f"{gpus} x {gpu.name} ({gpu.memory.capacity_gib:g} GiB each"
        + (f", {100 * fraction:g}% usable" if fraction < 1 else "")
        + f") with {spec.name} weights {spec.resident_weight_bytes / 2**30:.1f} GiB "
        f"({spec.resident_weight_bytes / gpus / 2**30:.2f} GiB per GPU)"
    )


def _kv_budget(spec: ModelSpec, gpu: XpuConfig, gpus: int, fraction: float) -> int:
    """KV blocks one GPU holds: ``floor((fraction x capacity - weights / N) / block_bytes)``;
    negative when the weights alone do not fit."""
    usable = math.floor(fraction * gpu.capacity_bytes)
    free = usable - math.ceil(spec.resident_weight_bytes / gpus)
    block = _block_bytes(spec, _kv_heads(spec, gpus))
    return free // block if free >= 0 else -1


def gpu_memory(setup: GpuSetup) -> dict[str, Any]:
    """The batch's paged-KV admission on every GPU: the memory part of the report."""
    spec, gpu, n = setup.model, setup.gpu, setup.gpus
    where = _where(spec, gpu, n, setup.memory_fraction)
    budget = _kv_budget(spec, gpu, n, setup.memory_fraction)
    if budget < 0 and setup.check_capacity:
        raise DecodeError(f"the weights alone do not fit: {where}; use more --gpus")
    blocks = sum(kv_blocks(t) for t in setup.lengths)
    fits = 0 <= blocks <= budget
    if not fits and setup.check_capacity:
        raise DecodeError(
            f"the batch of {len(setup.lengths)} request(s) needs {blocks:,} KV blocks of "
            f"{KV_BLOCK_TOKENS} tokens per GPU but {where} holds {max(budget, 0):,}; use more "
            "--gpus or a smaller batch"
        )
    block = _block_bytes(spec, setup.kv_heads_per_gpu)
    weight = math.ceil(spec.resident_weight_bytes / n)
    usable = math.floor(setup.memory_fraction * gpu.capacity_bytes)
    return {
        "fits": fits,
        "capacity_bytes_per_gpu": gpu.capacity_bytes,
        "usable_bytes_per_gpu": usable,
        "weight_bytes_per_gpu": weight,
        "kv_block_tokens": KV_BLOCK_TOKENS,
        "kv_block_bytes_per_gpu": block,
        "kv_blocks_per_gpu": blocks,
        "kv_block_capacity_per_gpu": max(budget, 0),
        "kv_bytes_per_gpu": blocks * block,
        "kv_padding_tokens": blocks * KV_BLOCK_TOKENS - sum(setup.lengths),
        "capacity_utilization": (weight + blocks * block) / usable if usable else 0.0,
        "kv_capacity_utilization": blocks / budget if budget > 0 else None,
    }


def gpu_fill_batch(
    model: ModelSpec,
    gpu: XpuConfig,
    gpus: int,
    candidates: Sequence[int],
    memory_fraction: float = 1.0,
    all_may_fit: bool = False,
) -> tuple[int, ...]:
    """The longest prefix of ``candidates`` (context lengths, FCFS) whose KV blocks fit every
    GPU: :func:`sim.systems.admission.fill_batch`'s queue semantics for paged KV.

    Unless ``all_may_fit``, every candidate fitting is an error (the batch would not be
    capacity-bound).
    """
    where = _where(model, gpu, gpus, memory_fraction)
    budget = _kv_budget(model, gpu, gpus, memory_fraction)
    if budget < 0:
        raise DecodeError(f"not even one request fits: the weights alone exceed {where}")
    used = 0
    taken: list[int] = []
    for t in candidates:
        used += kv_blocks(int(t))
        if used > budget:
            break
        taken.append(int(t))
    if not taken:
        raise DecodeError(
            f"not even one request fits: {where} holds {budget:,} KV blocks per GPU, the first "
            f"request needs {kv_blocks(int(candidates[0])) if candidates else 0:,}; use more "
            "--gpus"
        )
    if len(taken) == len(candidates) and not all_may_fit:
        raise DecodeError(
            f"all {len(taken)} candidate requests fit: the batch is not capacity-bound; "
            "give more requests (or a fixed --batch)"
        )
    return tuple(taken)


@dataclass(frozen=True)
class GpuReport:
    """What one GPU decode step measured; :meth:`to_dict` is the JSON report.

    ``parts`` holds, per :class:`GpuPart`, the seconds of the whole step and its share;
    ``ops`` the per-layer cost of every operation; ``memory_detail`` the paged-KV admission.
    """

    model: str
    gpu: str
    gpus: int
    batch: int
    context_lengths: dict[str, Any]
    step_seconds: float
    tokens_per_s: float
    compute_utilization: float
    memory_utilization: float
    capacity_utilization: float | None
    parts: dict[str, dict[str, float]]
    ops: dict[str, dict[str, Any]]
    allreduce: dict[str, Any]
    memory_detail: dict[str, Any]
    energy: dict[str, Any] = dataclasses.field(default_factory=dict)
    provenance: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The report as one JSON-ready dict, keys in field order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _op_record(cost: XpuCost, count: int = 1) -> dict[str, Any]:
    return {
        "seconds": count * cost.seconds,
        "flops": count * cost.flops,
        "bytes": count * cost.bytes,
        "bound": str(cost.bound),
        "utilization": cost.utilisation,
    }


def gpu_op_costs(setup: GpuSetup) -> OpCosts:
    """Each op of one layer on one GPU: op -> (cost, count per layer)
    (:func:`~sim.systems.costs.layer_costs`, KV heads replicated beyond ``kv_heads``)."""
    # Paged KV: attention reads every request's KV in whole blocks.
    padded = [kv_blocks(t) * KV_BLOCK_TOKENS for t in setup.lengths]
    spec, batch, n = setup.model, len(setup.lengths), setup.gpus
    return layer_costs(spec, setup.gpu, batch, n, contexts=padded, kv=KvHeads.REPLICATE)


#: The part of the step each op of :func:`gpu_op_costs` belongs to (the rest: vector).
_PART_OF = {str(op): GpuPart.FC for op in GEMV_OPS} | {ATTENTION: GpuPart.ATTENTION}


def _layer_parts(costs: OpCosts, one_reduce: float) -> dict[GpuPart, float]:
    """Seconds of each part of one layer: its ops' costs summed in table order, and the two
    all-reduces."""
    layer = dict.fromkeys(GPU_PARTS, 0.0)
    for key, (cost, count) in costs.items():
        layer[_PART_OF.get(key, GpuPart.VECTOR)] += count * cost.seconds
    layer[GpuPart.ALLREDUCE] = 2 * one_reduce
    return layer


def _step_parts(layer: dict[GpuPart, float], layers: int) -> tuple[dict[GpuPart, float], float]:
    """Serial composition: each part of the step is ``layers`` x the layer's, the step their
    sum."""
    parts = {p: layers * layer[p] for p in GPU_PARTS}
    return parts, sum(parts.values())


def run_gpu_decode(setup: GpuSetup) -> GpuReport:
    """Cost one decode step of ``setup`` (``docs/decode.md``, GPU-only baseline)."""
    spec, gpu, n = setup.model, setup.gpu, setup.gpus
    memory = gpu_memory(setup)
    b = len(setup.lengths)
    costs = gpu_op_costs(setup)
    vector_bytes = b * spec.hidden * spec.element_bytes  # reported beside the reduce
    one_reduce = hidden_allreduce_seconds(spec, gpu, b, n)
    flops = traffic = 0
    for cost, count in costs.values():
        flops += count * cost.flops
        traffic += count * cost.bytes
    parts, step = _step_parts(_layer_parts(costs, one_reduce), spec.layers)
    flops *= spec.layers
    traffic *= spec.layers
    return GpuReport(
        model=spec.name,
        gpu=gpu.name,
        gpus=n,
        batch=b,
        context_lengths=step_report.context_stats(setup.lengths),
        step_seconds=step,
        tokens_per_s=b / step,
        compute_utilization=flops / (gpu.peak_flops() * step),
        memory_utilization=traffic / (gpu.bandwidth * step),
        capacity_utilization=memory["capacity_utilization"] if memory["fits"] else None,
        parts={
            str(p): {"seconds": parts[p], "share": parts[p] / step if step else 0.0}
            for p in GPU_PARTS
        },
        ops={key: _op_record(cost, count) for key, (cost, count) in costs.items()},
        allreduce={
            "link": "device (NVLink)" if n > 1 else "none (1 GPU)",
            "link_gbps": gpu.links.device_gbps,
            "bytes": vector_bytes,
            "per_layer": 2,
            "seconds_each": one_reduce,
            "formula": "2 (N-1)/N x bytes / device_gbps",
        },
        memory_detail=memory,
        energy=gpu_energy(
            gpu,
            costs,
            {key: "fc" if p == GpuPart.FC else "attention" for key, p in _PART_OF.items()},
            spec.layers * n,  # every layer, on each of the n GPUs (costs are per GPU)
            b,
        ),
    )


class GpuCycles:
    """The seconds of :func:`run_gpu_decode` for any batch, without its report or admission
    (the serving fast path): one layer's FC, vector and all-reduce seconds are functions of
    the batch size alone and memoised on it; attention is costed per batch over its paged
    (whole-block) contexts. ``setup`` gives everything but the batch."""

    def __init__(self, setup: GpuSetup):
        self.setup = setup
        self._fixed: dict[int, dict[GpuPart, float]] = {}
        self._heads, self._kv_heads = setup.model.heads // setup.gpus, setup.kv_heads_per_gpu

    def seconds(self, lengths: Sequence[int]) -> float:
        """``run_gpu_decode(dataclasses.replace(setup, lengths=lengths)).step_seconds``."""
        s = self.setup
        spec, b = s.model, len(lengths)
        if b not in self._fixed:
            costs = layer_costs(spec, s.gpu, b, s.gpus, kv=KvHeads.REPLICATE)
            self._fixed[b] = _layer_parts(costs, hidden_allreduce_seconds(spec, s.gpu, b, s.gpus))
        padded = [kv_blocks(t) * KV_BLOCK_TOKENS for t in lengths]
        attention = attention_cost(s.gpu, padded, self._heads, self._kv_heads, spec.head_dim)
        layer = {**self._fixed[b], GpuPart.ATTENTION: 0.0 + attention.seconds}
        return _step_parts(layer, spec.layers)[1]


def gpu_setup_digest(setup: GpuSetup) -> str:
    """SHA-256 of everything a GPU decode step depends on."""
    return inputs_digest(step_report.digest_inputs(setup))


def gpu_report_stem(setup: GpuSetup) -> str:
    """File stem naming a GPU step, ending in a short hash of every input."""
    return (
        f"{setup.model.name}-B{len(setup.lengths)}-T{max(setup.lengths)}-{setup.gpus}x"
        f"{setup.gpu.name}-{gpu_setup_digest(setup)[:8]}"
    )


#: Each part's label and colour.
PART_STYLE: dict[str, tuple[str, str]] = {
    "fc": ("FC GEMMs", "#219ebc"),
    "attention": ("attention", "#2a9d8f"),
    "vector": ("norm/act/residual", "#f4a261"),
    "allreduce": ("TP all-reduce", "#e76f51"),
}


def format_gpu_report(report: GpuReport) -> str:
    """The GPU report as text: headline numbers and the step-time split."""
    r = report.to_dict()
    mem = r["memory_detail"]
    lines = [
        f"{r['model']} decode step on {r['gpus']} x {r['gpu']} (tensor parallel {r['gpus']}), "
        f"flash-decoding over paged KV ({mem['kv_block_tokens']}-token blocks)",
        f"batch {r['batch']}, {step_report.context_text(r['context_lengths'])}",
        f"step {1e3 * r['step_seconds']:.3f} ms   tokens/s {r['tokens_per_s']:,.1f}",
        f"per-GPU compute utilisation {100 * r['compute_utilization']:.1f}%   memory "
        f"bandwidth utilisation {100 * r['memory_utilization']:.1f}%   capacity utilisation "
        + step_report.capacity_text(r["capacity_utilization"]),
        f"per GPU: weights {mem['weight_bytes_per_gpu'] / 2**30:.2f} GiB, KV "
        f"{mem['kv_blocks_per_gpu']:,} of {mem['kv_block_capacity_per_gpu']:,} blocks "
        f"({mem['kv_bytes_per_gpu'] / 2**30:.2f} GiB)",
        "",
        *step_report.table_lines(
            (("part", 20), ("ms", 10), ("share", 8)),
            (
                (PART_STYLE[p][0], f"{1e3 * part['seconds']:.3f}", f"{100 * part['share']:.1f}%")
                for p in GPU_PARTS
                for part in (r["parts"][p],)
            ),
        ),
    ]
    a = r["allreduce"]
    if r["gpus"] > 1:
        lines.append(
            f"all-reduce: {a['per_layer']} per layer of {a['bytes']:,} B over the "
            f"{a['link']} link at {a['link_gbps']:g} GB/s, {1e6 * a['seconds_each']:.2f} us each "
            f"({a['formula']})"
        )
    lines.append(energy_line(r["energy"]))
    return "\n".join(lines)


def plot_gpu_report(report: GpuReport, path: Path) -> Path:
    """PNG: the step time split into its parts (stacked bar, milliseconds)."""
    r = report.to_dict()
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    bottom = 0.0
    for p in GPU_PARTS:
        ms = 1e3 * r["parts"][p]["seconds"]
        label, color = PART_STYLE[p]
        ax.bar(["decode step"], [ms], bottom=bottom, color=color, label=label)
        bottom += ms
    ax.set_ylabel("step time (ms)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(
        f"{r['model']} B={r['batch']} on {r['gpus']} x {r['gpu']}: "
        f"{r['tokens_per_s']:,.0f} tokens/s",
        fontsize=9,
    )
    fig.tight_layout()
    return write_figure(fig, path)
