"""The decode step mapped onto a multi-module PIM system: TP/PP, attention partitioning and
per-channel kernel jobs.

For one decoder layer and one micro-batch, :func:`layer_plan` lists what every channel of one
tensor-parallel module runs (``docs/decode.md``):

- **FC GEMVs** (LoL-PIM 4.1 / Megatron TP): ``qkv`` and ``ffn1`` split ``d_out`` by ``tp``;
  ``proj`` and ``ffn2`` split ``d_in`` by ``tp`` (their partial outputs are all-reduced).
  Inside a module a GEMV's output rows are dealt to channels in whole bank groups; each
  channel runs one batched GEMV for the whole micro-batch (row reuse: an opened weight row
  serves every request of a pass, ``compiler.kernels.compile_gemv``), split into several
  only when the batch's inputs and outputs do not fit the GPR.
- **Attention**: the module holds ``kv_heads / tp`` KV heads of every request; QK^T and SV are
  partitioned over its channels by HFP or TCP (:func:`partition_attention`):

  - **HFP** (prior PIM systems): each (request, KV head) pair keeps its whole KV cache in one
    channel; pairs are dealt to channels round-robin. A channel runs its pairs one after
    another.
  - **TCP** (PIMphony IV-C): the tokens of every (request, KV head) are split across all
    channels. QK^T gives each channel whole output groups of ``banks`` tokens (one token per
    bank), so all banks of all channels work once ``T >= channels * banks``; SV gives each
    channel a contiguous token range (its input dimension) and the partial outputs are
    reduced in the HUB. With one token of granularity every channel has SV work once
    ``T >= channels`` (16); PIMphony quotes full activation beyond 32 tokens for SV, which
    this mapping also meets.

All TP modules of a stage run identical plans; all layers of a stage are identical.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from compiler.kernels import gemv_max_batch
from compiler.llm import GEMV_OPS, LayerOp, ModelSpec, gemv_shapes
from models.config import HardwareConfig
from models.errors import PimphonyError

__all__ = [
    "GEMV_OPS",
    "PARTITIONS",
    "TP_SPLIT",
    "ChannelJob",
    "DecodeMappingError",
    "GemvJob",
    "LayerPlan",
    "Parallelism",
    "Partition",
    "PartitionError",
    "layer_plan",
    "micro_batches",
    "partition_attention",
    "split_evenly",
    "stage_layers",
]

#: Which GEMV dimension tensor parallelism splits (Megatron): column-parallel ``qkv``/``ffn1``
#: split ``d_out``; row-parallel ``proj``/``ffn2`` split ``d_in`` (then all-reduce).
TP_SPLIT: dict[LayerOp, str] = {
    LayerOp.QKV: "d_out",
    LayerOp.PROJ: "d_in",
    LayerOp.FFN1: "d_out",
    LayerOp.FFN2: "d_in",
}


class DecodeMappingError(PimphonyError, ValueError):
    """A model, batch or parallelism choice cannot be mapped onto the system."""


@dataclass(frozen=True)
class GemvJob:
    """One batched FC GEMV on one channel: ``batch`` requests' inputs share the weights."""

    d_out: int
    d_in: int
    batch: int = 1
    kind: str = "gemv"

    @property
    def shape(self) -> dict:
        """Keyword arguments of ``compiler.kernels.compile_kernel``."""
        return {"d_out": self.d_out, "d_in": self.d_in, "batch": self.batch}


@dataclass(frozen=True)
class Parallelism:
    """Tensor (``tp``) and pipeline (``pp``) parallel degrees over ``tp * pp`` modules."""

    tp: int = 1
    pp: int = 1

    def __post_init__(self) -> None:
        for name in ("tp", "pp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise DecodeMappingError(f"{name} = {v!r}: must be a positive integer")

    @property
    def modules(self) -> int:
        """Modules in the system."""
        return self.tp * self.pp

    def check(self, spec: ModelSpec) -> None:
        """Raise :class:`DecodeMappingError` if ``spec`` cannot be split this way."""
        if self.pp > spec.layers:
            raise DecodeMappingError(
                f"pp = {self.pp}: {spec.name} has only {spec.layers} layers (one per stage at most)"
            )
        for what, n in (
            ("kv_heads", spec.kv_heads),
            ("heads", spec.heads),
            ("intermediate", spec.intermediate),
        ):
            if n % self.tp:
                raise DecodeMappingError(
                    f"tp = {self.tp} does not divide {spec.name} {what} = {n}; "
                    "choose tp among the divisors of kv_heads"
                )


@dataclass(frozen=True)
class LayerPlan:
    """Per-channel jobs of one layer on one TP module for one micro-batch."""

    gemv: dict[str, list[list[GemvJob]]]
    qk: list[list[ChannelJob]]
    sv: list[list[ChannelJob]]
    kv_heads: int
    gqa_group: int
    head_dim: int
    lengths: tuple[int, ...]


class PartitionError(PimphonyError, ValueError):
    """Attention work cannot be partitioned as asked."""


@dataclass(frozen=True)
class ChannelJob:
    """One attention kernel on one channel: ``kind`` is ``qk`` or ``sv``."""

    kind: str
    tokens: int
    d_h: int
    gqa_group: int
    request: int
    kv_head: int

    @property
    def shape(self) -> dict:
        """Keyword arguments of ``compiler.kernels.compile_kernel``."""
        return {"tokens": self.tokens, "d_h": self.d_h, "gqa_group": self.gqa_group}


def split_evenly(n: int, parts: int, unit: int) -> list[int]:
    """Split ``n`` items into ``parts`` shares of whole ``unit``s, as evenly as possible.

    The leftover ``n % unit`` items join the first share with the fewest whole units, so a
    share holds a partial unit only next to whole ones when there are enough units.
    """
    base, extra = divmod(n // unit, parts)
    shares = [(base + (1 if c < extra else 0)) * unit for c in range(parts)]
    shares[extra % parts] += n % unit
    return shares


def partition_attention(
    cfg: HardwareConfig,
    kind: str,
    context_lengths: Sequence[int],
    kv_heads: int,
    d_h: int,
    gqa_group: int = 1,
    scheme: str = "tcp",
) -> list[list[ChannelJob]]:
    """Per channel, the ``kind`` (``qk`` or ``sv``) jobs of one layer for a batch of requests."""
    if scheme not in PARTITIONS:
        raise PartitionError(f"partition {scheme!r} is unknown; allowed: {', '.join(PARTITIONS)}")
    if kind not in ("qk", "sv"):
        raise PartitionError(f"attention kernel {kind!r} is unknown; allowed: qk, sv")
    for i, t in enumerate(context_lengths):
        if isinstance(t, bool) or not isinstance(t, int) or t <= 0:
            raise PartitionError(f"context length of request {i} = {t!r}: must be a positive int")
    if kv_heads <= 0:
        raise PartitionError(f"kv_heads = {kv_heads}: must be positive")
    jobs: list[list[ChannelJob]] = [[] for _ in range(cfg.module.channels)]
    PARTITIONS[Partition(scheme)](cfg, kind, context_lengths, kv_heads, d_h, gqa_group, jobs)
    return jobs


def _hfp(cfg, kind, context_lengths, kv_heads, d_h, gqa_group, jobs) -> None:
    """Head-first: whole (request, KV head) pairs dealt to channels round-robin."""
    channels = len(jobs)
    pair = 0
    for r, t in enumerate(context_lengths):
        for h in range(kv_heads):
            jobs[pair % channels].append(ChannelJob(kind, t, d_h, gqa_group, r, h))
            pair += 1


def _tcp(cfg, kind, context_lengths, kv_heads, d_h, gqa_group, jobs) -> None:
    """Token-centric: every pair's tokens split over all channels (QK^T in bank groups)."""
    unit = cfg.channel.banks if kind == "qk" else 1
    for r, t in enumerate(context_lengths):
        shares = split_evenly(t, len(jobs), unit)
        for h in range(kv_heads):
            for c, share in enumerate(shares):
                if share:
                    jobs[c].append(ChannelJob(kind, share, d_h, gqa_group, r, h))


class Partition(StrEnum):
    """Attention partitioning inside a module."""

    HFP = "hfp"
    TCP = "tcp"


#: The partitioning schemes: each fills per-channel job lists in place.
PARTITIONS: dict[Partition, Callable[..., None]] = {Partition.HFP: _hfp, Partition.TCP: _tcp}


def stage_layers(layers: int, pp: int) -> list[int]:
    """Layers of each pipeline stage: contiguous, as even as possible, earlier stages first."""
    return split_evenly(layers, pp, 1)


def micro_batches(lengths: Sequence[int], count: int) -> list[tuple[int, ...]]:
    """Deal requests round-robin into ``count`` micro-batches (fewer if there are fewer)."""
    count = max(1, min(count, len(lengths)))
    return [tuple(lengths[i::count]) for i in range(count)]


def _gemv_jobs(cfg: HardwareConfig, d_out: int, d_in: int, batch: int) -> list[list[GemvJob]]:
    """Per channel, one batched GEMV of its share of the output rows for the whole batch.

    A batch whose inputs and outputs do not fit the GPR runs as several GEMVs of at most
    ``gemv_max_batch`` requests (the last holds the rest); a shape that does not fit even
    one request is left to the compiler to refuse.
    """
    shares = split_evenly(d_out, cfg.module.channels, cfg.channel.banks)
    jobs: list[list[GemvJob]] = []
    for s in shares:
        if not s:
            jobs.append([])
            continue
        most = max(1, min(batch, gemv_max_batch(cfg, s, d_in)))
        sizes = [most] * (batch // most) + ([batch % most] if batch % most else [])
        jobs.append([GemvJob(s, d_in, b) for b in sizes])
    return jobs


def layer_plan(
    spec: ModelSpec,
    cfg: HardwareConfig,
    lengths: Sequence[int],
    tp: int = 1,
    partition: str = "tcp",
) -> LayerPlan:
    """What each channel of one TP module runs for one layer of micro-batch ``lengths``."""
    if partition not in PARTITIONS:
        raise DecodeMappingError(
            f"partition {partition!r} is unknown; allowed: {', '.join(PARTITIONS)}"
        )
    Parallelism(tp, 1).check(spec)
    lengths = tuple(int(t) for t in lengths)
    b = len(lengths)
    if b == 0:
        raise DecodeMappingError("a micro-batch needs at least one request")
    d_h, kvh = spec.head_dim, spec.kv_heads // tp
    gemv = {}
    for op, (d_out, d_in) in gemv_shapes(spec).items():
        if TP_SPLIT[op] == "d_out":
            d_out //= tp
        else:
            d_in //= tp
        gemv[op] = _gemv_jobs(cfg, d_out, d_in, b)
    g = spec.gqa_group
    qk = partition_attention(cfg, "qk", lengths, kvh, d_h, g, partition)
    sv = partition_attention(cfg, "sv", lengths, kvh, d_h, g, partition)
    return LayerPlan(gemv, qk, sv, kvh, g, d_h, lengths)
