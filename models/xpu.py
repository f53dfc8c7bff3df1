"""The xPU cost model: time, FLOPs and DRAM traffic of one decode-step operation on a device.

Pure functions of a device (:class:`models.xpu_config.XpuConfig`) and an operation's shape:
GEMM and GEMV (a GEMM whose M is the batch), decode attention (flash-decoding over a paged KV
cache) and element-wise vector operations (softmax, RMSNorm, activations, residual adds). Each
is one kernel: a roofline with efficiency caps, plus what the preset's ``[kernel]`` table
charges every kernel (launch and synchronisation, and the DRAM latency before its first
bytes arrive), and on a device with systolic arrays the matrix work is charged in whole weight
tiles. ``docs/xpu.md`` states every formula with a worked example.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from pimphony.models.errors import PimphonyError
from pimphony.models.hub import (
    NORM_FLOPS_PER_ELEMENT,
    RELU_FLOPS_PER_ELEMENT,
    RESIDUAL_FLOPS_PER_ELEMENT,
    SOFTMAX_FLOPS_PER_SCORE,
    SWIGLU_FLOPS_PER_ELEMENT,
)
from pimphony.models.xpu_config import PRECISION_BYTES, Precision, SystolicArrays, XpuConfig

__all__ = [
    "VECTOR_OPS",
    "Bound",
    "Traffic",
    "VectorOp",
    "VectorOpSpec",
    "XpuCost",
    "XpuError",
    "attention_combine_cost",
    "attention_cost",
    "batched_cost",
    "gemm_cost",
    "gemm_traffic",
    "gemv_cost",
    "matrix_waves",
    "ring_allreduce_seconds",
    "vector_cost",
    "weight_tiles",
]


class XpuError(PimphonyError, ValueError):
    """An operation shape the xPU cost model cannot cost (a size of 0, heads not grouping)."""


class Bound(StrEnum):
    """Which roof an operation's time sits on."""

    COMPUTE = "compute"
    MEMORY = "memory"


class VectorOp(StrEnum):
    """Element-wise operations of a decoder layer, run on the vector units."""

    SOFTMAX = "softmax"
    NORM = "norm"
    SWIGLU = "swiglu"
    RELU = "relu"
    RESIDUAL = "residual"


@dataclass(frozen=True)
class VectorOpSpec:
    """Per output element: operations, and elements read from and written to DRAM."""

    flops_per_element: int
    reads: int
    writes: int


#: The vector operations; FLOP counts are the PIM EPU's (:mod:`models.hub`), so both sides of
#: a heterogeneous system count the same work.
VECTOR_OPS: dict[VectorOp, VectorOpSpec] = {
    VectorOp.SOFTMAX: VectorOpSpec(SOFTMAX_FLOPS_PER_SCORE, reads=1, writes=1),
    VectorOp.NORM: VectorOpSpec(NORM_FLOPS_PER_ELEMENT, reads=1, writes=1),
    VectorOp.SWIGLU: VectorOpSpec(SWIGLU_FLOPS_PER_ELEMENT, reads=2, writes=1),
    VectorOp.RELU: VectorOpSpec(RELU_FLOPS_PER_ELEMENT, reads=1, writes=1),
    VectorOp.RESIDUAL: VectorOpSpec(RESIDUAL_FLOPS_PER_ELEMENT, reads=2, writes=1),
}


@dataclass(frozen=True)
class Traffic:
    """DRAM bytes an operation moves: weights, activations (in and out) and KV cache."""

    weights: int = 0
    activations: int = 0
    kv: int = 0

    @property
    def total(self) -> int:
        """All bytes moved."""
        return self.weights + self.activations + self.kv


@dataclass(frozen=True)
class XpuCost:
    """Cost of one operation on one device.

    Attributes
    ----------
    seconds : float
        ``launch_seconds + max(compute_seconds, memory_seconds)``.
    flops : int
        Useful floating-point operations (a multiply-accumulate counts 2).
    issued_flops : int
        Operations the engines spend, whole tiles and lane groups included (``>= flops``).
    traffic : Traffic
        DRAM bytes by kind.
    compute_seconds, memory_seconds : float
        The two roofs: issued work at capped peak; the DRAM latency (if the operation moves
        bytes) plus its traffic at capped bandwidth.
    bound : Bound
        ``COMPUTE`` if ``compute_seconds >= memory_seconds``, else ``MEMORY``.
    utilisation : float
        ``flops / (peak * seconds)``: achieved fraction of the uncapped peak of the engine the
        operation runs on (the matrix engine at its precision; the vector units for vector
        operations).
    launch_seconds : float
        The kernel's launch and synchronisation time (``[kernel] launch_us``; 0 without it).
    """

    seconds: float
    flops: int
    issued_flops: int
    traffic: Traffic
    compute_seconds: float
    memory_seconds: float
    bound: Bound
    utilisation: float
    launch_seconds: float = 0.0

    @property
    def bytes(self) -> int:
        """All DRAM bytes moved."""
        return self.traffic.total


def _positive(op: str, **sizes: int) -> None:
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise XpuError(f"{op}: {key} = {value!r}: must be a positive integer")


def _precision(device: XpuConfig, precision: Precision | str | None) -> Precision:
    if precision is None:
        return device.compute.precision
    if precision not in {p.value for p in Precision}:
        allowed = ", ".join(p.value for p in Precision)
        raise XpuError(f"precision = {precision!r}: unknown; allowed: {allowed}")
    return Precision(precision)


def weight_tiles(sa: SystolicArrays, k: int, n: int) -> int:
    """Weight tiles of a K x N operand on ``rows`` x ``cols`` arrays: ceil(K/rows) ceil(N/cols)."""
    return math.ceil(k / sa.rows) * math.ceil(n / sa.cols)


def matrix_waves(sa: SystolicArrays, tiles: int) -> int:
    """Rounds in which ``arrays`` arrays take ``tiles`` whole tiles, one each: ceil(tiles/A)."""
    return math.ceil(tiles / sa.arrays)


def _issued_matrix(device: XpuConfig, m: int, tiles: int, flops: int) -> int:
    """Matrix FLOPs the engine spends: every wave keeps all arrays busy for M rows."""
    sa = device.systolic
    if sa is None:
        return flops
    return 2 * m * matrix_waves(sa, tiles) * sa.arrays * sa.rows * sa.cols


def _issued_vector(device: XpuConfig, elements: int, flops_per_element: int) -> int:
    """Vector FLOPs spent: the elements padded to whole groups of ``units x lanes``."""
    vu = device.vector
    if vu is not None:
        group = vu.units * vu.lanes
        elements = math.ceil(elements / group) * group
    return elements * flops_per_element


def _kernel_seconds(device: XpuConfig, compute: float, stream: float) -> tuple[float, float]:
    """``(memory_seconds, seconds)`` of one kernel doing ``compute`` seconds of work and
    ``stream`` seconds of DRAM traffic at capped bandwidth: the traffic waits one DRAM latency
    for its first bytes (Little's law), and the kernel pays its launch once."""
    memory = device.dram_latency_seconds + stream if stream else stream
    return memory, device.launch_seconds + max(compute, memory)


def _stream_seconds(device: XpuConfig, nbytes: int) -> float:
    """Seconds to move ``nbytes`` of DRAM traffic at the capped bandwidth."""
    return nbytes / (device.bandwidth * device.memory.efficiency)


def _cost(
    device: XpuConfig,
    flops: int,
    matrix: int,
    vector: int,
    traffic: Traffic,
    precision: Precision,
    on_vector: bool = False,
) -> XpuCost:
    eff = device.compute.efficiency
    compute = 0.0
    if matrix:
        compute += matrix / (device.peak_flops(precision) * eff)
    if vector:
        compute += vector / (device.vector_flops * eff)
    memory, seconds = _kernel_seconds(device, compute, _stream_seconds(device, traffic.total))
    peak = device.vector_flops if on_vector else device.peak_flops(precision)
    return XpuCost(
        seconds=seconds,
        flops=flops,
        issued_flops=matrix + vector,
        traffic=traffic,
        compute_seconds=compute,
        memory_seconds=memory,
        bound=Bound.COMPUTE if compute >= memory else Bound.MEMORY,
        utilisation=flops / (peak * seconds) if seconds else 0.0,
        launch_seconds=device.launch_seconds,
    )


def gemm_traffic(device: XpuConfig, m: int, k: int, n: int, element_bytes: int) -> Traffic:
    """DRAM traffic of an M x K by K x N GEMM (``docs/xpu.md``, Memory traffic).

    The smaller operand is held on chip in ``P = ceil(bytes / buffer)`` panels and the larger
    is streamed once per panel; the M x N output is written once.
    """
    act, wgt, out = m * k * element_bytes, k * n * element_bytes, m * n * element_bytes
    buffer = device.buffer_bytes
    if act <= wgt:
        return Traffic(weights=math.ceil(act / buffer) * wgt, activations=act + out)
    return Traffic(weights=wgt, activations=math.ceil(wgt / buffer) * act + out)


def gemm_cost(
    device: XpuConfig, m: int, k: int, n: int, precision: Precision | str | None = None
) -> XpuCost:
    """An M x K activation block times a K x N weight matrix (``docs/xpu.md``, GEMM).

    Parameters
    ----------
    device : XpuConfig
        The device.
    m, k, n : int
        Rows of activations (tokens of the batch), reduction length, output features.
    precision : Precision or str, optional
        Number format of operands and peak (default: the device's).
    """
    _positive("gemm", m=m, k=k, n=n)
    precision = _precision(device, precision)
    flops = 2 * m * k * n
    tiles = weight_tiles(device.systolic, k, n) if device.systolic else 0
    matrix = _issued_matrix(device, m, tiles, flops)
    traffic = gemm_traffic(device, m, k, n, PRECISION_BYTES[precision])
    return _cost(device, flops, matrix, 0, traffic, precision)


def gemv_cost(
    device: XpuConfig, batch: int, k: int, n: int, precision: Precision | str | None = None
) -> XpuCost:
    """A weight GEMV of a decode step over ``batch`` requests: :func:`gemm_cost` with M = batch."""
    return gemm_cost(device, batch, k, n, precision)


def attention_cost(
    device: XpuConfig,
    contexts: Sequence[int],
    heads: int,
    kv_heads: int,
    head_dim: int,
    precision: Precision | str | None = None,
) -> XpuCost:
    """One decode step's attention for a batch (``docs/xpu.md``, Attention).

    Flash-decoding over a paged KV cache: each request reads its K and V once (``T`` tokens of
    ``kv_heads x head_dim``), its query and writes its output; scores stay on chip. The
    ``heads / kv_heads`` query heads of a group share one pass over their KV head.

    Parameters
    ----------
    device : XpuConfig
        The device.
    contexts : sequence of int
        Context length (tokens in the KV cache, the new one included) of each request.
    heads, kv_heads, head_dim : int
        Query heads, KV heads (dividing ``heads``) and the per-head feature size.
    precision : Precision or str, optional
        Number format of Q, K, V and the peak (default: the device's).
    """
    _positive("attention", heads=heads, kv_heads=kv_heads, head_dim=head_dim)
    if not contexts:
        raise XpuError("attention: contexts is empty: needs one context length per request")
    for i, t in enumerate(contexts):
        _positive("attention", **{f"contexts[{i}]": t})
    if heads % kv_heads:
        raise XpuError(
            f"attention: kv_heads = {kv_heads}: must divide heads = {heads} "
            "(each KV head serves a whole group of query heads)"
        )
    precision = _precision(device, precision)
    b = PRECISION_BYTES[precision]
    tokens = sum(contexts)
    matmul = 4 * tokens * head_dim * heads
    scores = tokens * heads
    flops = matmul + SOFTMAX_FLOPS_PER_SCORE * scores
    group = heads // kv_heads
    sa = device.systolic
    tiles = (
        sum(
            kv_heads * (weight_tiles(sa, head_dim, t) + weight_tiles(sa, t, head_dim))
            for t in contexts
        )
        if sa
        else 0
    )
    matrix = _issued_matrix(device, group, tiles, matmul)
    vector = _issued_vector(device, scores, SOFTMAX_FLOPS_PER_SCORE)
    traffic = Traffic(
        activations=2 * len(contexts) * heads * head_dim * b,
        kv=2 * tokens * kv_heads * head_dim * b,
    )
    return _cost(device, flops, matrix, vector, traffic, precision)


def attention_combine_cost(
    device: XpuConfig,
    heads: int,
    partials: int,
    head_dim: int,
    precision: Precision | str | None = None,
) -> XpuCost:
    """Combining a softmax split over ``partials`` token groups (flash-decoding's reduction;
    ``docs/xpu.md``, Vector operations), per head: ``m = max_g m_g``, ``w_g = exp(m_g - m)
    l_g``, ``O = (sum_g w_g O_g) / sum_g w_g`` from the partial outputs ``O_g`` (``head_dim``
    each, normalised by their own sums), maxima ``m_g`` and sums ``l_g``.

    Per head ``5 P - 1`` scalar FLOPs (P - 1 compares, P subtracts, exps and multiplies,
    P - 1 adds, one reciprocal) and ``2 P head_dim`` on the outputs (P multiply-adds per
    element, less one add, and the scale by 1 / sum); reads ``P (head_dim + 2)`` elements,
    writes ``head_dim``; on the vector units, each part padded as :func:`vector_cost` pads.

    Parameters
    ----------
    device : XpuConfig
        The device.
    heads, partials, head_dim : int
        Heads combined, token groups per head (>= 1) and elements of a head's output.
    precision : Precision or str, optional
        Storage format of the partial results (default: the device's).
    """
    _positive("attention combine", heads=heads, partials=partials, head_dim=head_dim)
    precision = _precision(device, precision)
    b = PRECISION_BYTES[precision]
    outputs, scalars = 2 * partials, 5 * partials - 1
    flops = heads * (outputs * head_dim + scalars)
    vector = _issued_vector(device, heads * head_dim, outputs) + _issued_vector(
        device, heads, scalars
    )
    traffic = Traffic(activations=heads * (partials * (head_dim + 2) + head_dim) * b)
    return _cost(device, flops, 0, vector, traffic, precision, on_vector=True)


def vector_cost(
    device: XpuConfig,
    op: VectorOp | str,
    elements: int,
    precision: Precision | str | None = None,
) -> XpuCost:
    """An element-wise operation over ``elements`` output elements (``docs/xpu.md``, Vector).

    Parameters
    ----------
    device : XpuConfig
        The device.
    op : VectorOp or str
        A row of :data:`VECTOR_OPS`.
    elements : int
        Output elements (a norm over a batch of hidden vectors: batch x hidden).
    precision : Precision or str, optional
        Storage format of the elements (default: the device's).
    """
    _positive("vector", elements=elements)
    if op not in {v.value for v in VectorOp}:
        raise XpuError(f"vector: op = {op!r}: unknown; allowed: {', '.join(VECTOR_OPS)}")
    spec = VECTOR_OPS[VectorOp(op)]
    precision = _precision(device, precision)
    b = PRECISION_BYTES[precision]
    flops = spec.flops_per_element * elements
    vector = _issued_vector(device, elements, spec.flops_per_element)
    traffic = Traffic(activations=(spec.reads + spec.writes) * elements * b)
    return _cost(device, flops, 0, vector, traffic, precision, on_vector=True)


def batched_cost(device: XpuConfig, cost: XpuCost, count: int) -> XpuCost:
    """``count`` independent copies of the operation ``cost`` (on ``device``) run as one
    kernel, as a batched matmul runs one GEMV per head: work, traffic and both roofs times
    ``count``, one launch and one DRAM latency (``docs/xpu.md``, Per-kernel costs). Without
    ``[kernel]`` it is ``count x cost.seconds`` exactly."""
    _positive("batched", count=count)
    compute = count * cost.compute_seconds
    memory, seconds = _kernel_seconds(
        device, compute, count * _stream_seconds(device, cost.traffic.total)
    )
    t = cost.traffic
    return dataclasses.replace(
        cost,
        seconds=seconds,
        flops=count * cost.flops,
        issued_flops=count * cost.issued_flops,
        traffic=Traffic(count * t.weights, count * t.activations, count * t.kv),
        compute_seconds=compute,
        memory_seconds=memory,
        bound=Bound.COMPUTE if compute >= memory else Bound.MEMORY,
        utilisation=cost.utilisation * count * cost.seconds / seconds if seconds else 0.0,
        launch_seconds=device.launch_seconds,
    )


def ring_allreduce_seconds(device: XpuConfig, nbytes: int, n: int) -> float:
    """A ring all-reduce of ``nbytes`` over ``n`` devices on the device links (``docs/xpu.md``).

    ``launch + 2 (n - 1) / n x nbytes / device_link_bandwidth``: one kernel (``[kernel]
    launch_us``) running a reduce-scatter and an all-gather of ``n - 1`` steps each, every
    step moving ``nbytes / n`` per device over its link (``[links] device_gbps``; NVLink on a
    GPU). 0 for one device. The collective's own protocol latency is not charged (measured
    NCCL all-reduces of small vectors take about 6 us on 2 and 20-25 us on 8 H100s;
    ``docs/xpu.md``, Per-kernel costs).

    Parameters
    ----------
    device : XpuConfig
        The device (all ``n`` are equal).
    nbytes : int
        Bytes of the vector every device contributes (and receives summed), >= 0.
    n : int
        Devices in the ring, >= 1.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise XpuError(f"all-reduce: n = {n!r}: must be a positive integer")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise XpuError(f"all-reduce: nbytes = {nbytes!r}: must be a non-negative integer")
    if n == 1 or nbytes == 0:
        return 0.0
    link = device.links.device_gbps * 1e9
    if link <= 0:
        raise XpuError(
            f"all-reduce over {n} x {device.name}: [links] device_gbps = 0 (no device link)"
        )
    return device.launch_seconds + 2 * (n - 1) / n * nbytes / link
