"""The decode step mapped onto a multi-module PIM system: TP/PP and per-channel kernel jobs.

For one decoder layer and one micro-batch, :func:`layer_plan` lists what every channel of one
tensor-parallel module runs (``docs/decode.md``):

- **FC GEMVs** (LoL-PIM 4.1 / Megatron TP): ``qkv`` and ``ffn1`` split ``d_out`` by ``tp``;
  ``proj`` and ``ffn2`` split ``d_in`` by ``tp`` (their partial outputs are all-reduced).
  Inside a module a GEMV's output rows are dealt to channels in whole bank groups; every
  request of the micro-batch is one pass over the weights.
- **Attention**: the module holds ``kv_heads / tp`` KV heads of every request; QK^T and SV are
  partitioned over its channels by HFP or TCP (:func:`compiler.partition.partition_attention`).

All TP modules of a stage run identical plans; all layers of a stage are identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from compiler.llm import ModelSpec
from compiler.partition import PARTITIONS, ChannelJob, partition_attention, split_evenly
from models.config import HardwareConfig

__all__ = [
    "GEMV_OPS",
    "DecodeMappingError",
    "GemvJob",
    "LayerPlan",
    "Parallelism",
    "layer_plan",
    "micro_batches",
    "stage_layers",
]

GEMV_OPS = ("qkv", "proj", "ffn1", "ffn2")


class DecodeMappingError(ValueError):
    """A model, batch or parallelism choice cannot be mapped onto the system."""


@dataclass(frozen=True)
class GemvJob:
    """One FC GEMV pass (one request) on one channel."""

    d_out: int
    d_in: int
    request: int
    kind: str = "gemv"

    @property
    def shape(self) -> dict:
        """Keyword arguments of ``compiler.kernels.compile_kernel``."""
        return {"d_out": self.d_out, "d_in": self.d_in}


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


def stage_layers(layers: int, pp: int) -> list[int]:
    """Layers of each pipeline stage: contiguous, as even as possible, earlier stages first."""
    return split_evenly(layers, pp, 1)


def micro_batches(lengths: Sequence[int], count: int) -> list[tuple[int, ...]]:
    """Deal requests round-robin into ``count`` micro-batches (fewer if there are fewer)."""
    count = max(1, min(count, len(lengths)))
    return [tuple(lengths[i::count]) for i in range(count)]


def _gemv_jobs(cfg: HardwareConfig, d_out: int, d_in: int, batch: int) -> list[list[GemvJob]]:
    shares = split_evenly(d_out, cfg.module.channels, cfg.channel.banks)
    return [[GemvJob(s, d_in, r) for r in range(batch)] if s else [] for s in shares]


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
    gemv = {
        "qkv": _gemv_jobs(cfg, spec.qkv_dim // tp, spec.hidden, b),
        "proj": _gemv_jobs(cfg, spec.hidden, spec.heads * d_h // tp, b),
        "ffn1": _gemv_jobs(cfg, spec.ffn1_dim // tp, spec.hidden, b),
        "ffn2": _gemv_jobs(cfg, spec.hidden, spec.intermediate // tp, b),
    }
    g = spec.gqa_group
    qk = partition_attention(cfg, "qk", lengths, kvh, d_h, g, partition)
    sv = partition_attention(cfg, "sv", lengths, kvh, d_h, g, partition)
    return LayerPlan(gemv, qk, sv, kvh, g, d_h, lengths)
