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
  - **ITPP** (LoL-PIM 4.3): each cache is split by its output dimension. QK^T splits the K
    cache by tokens as TCP does; SV splits the V cache by its head dimension ``d_h``: the
    output groups of ``banks`` dimensions of every pair are dealt to channels round-robin, so
    every channel reads all of a pair's scores and writes disjoint outputs (no reduction).
  - **auto**: per layer, whichever of HFP and TCP the decode step times faster
    (``sim.systems.step``); the plan itself is always one concrete partition.

**GPR tiling** (:func:`score_tile_tokens`): the EPU's softmax reads a pair's QK^T scores from
the HUB's GPR, so a pair whose scores do not fit is processed in contiguous token *tiles*
(online softmax: QK^T, softmax and SV per tile, the tiles' partial outputs combined on the
EPU). One rule for every partition: the GPR is shared by the units of work in flight, two
per stream (the tile whose QK^T is written and the tile whose SV reads, software
pipelining); HFP runs one stream per channel, TCP and ITPP one per module.

**Scores beyond the GPR** (:class:`ScoreOverflow`, :data:`SCORE_OVERFLOWS`): the papers do
not say what a baseline does with a pair whose scores overflow its GPR slot. ``gpr-tiles``
(the default) cuts it into the score tiles above; ``bank-spill`` keeps the pair one unit, its
QK^T writing the scores to DRAM rows of the channel and its SV reading them back
(:func:`score_spill`), with no query re-send and no EPU combination.

All TP modules of a stage run identical plans; all layers of a stage are identical.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from pimphony.compiler.kernels import gemv_max_batch, gpr_tiles_needed, row_switch_estimate
from pimphony.compiler.llm import GEMV_OPS, LayerOp, ModelSpec, gemv_shapes
from pimphony.models.config import HardwareConfig
from pimphony.models.errors import PimphonyError
from pimphony.models.isa import gpr_tiles

__all__ = [
    "GEMV_OPS",
    "PARTITIONS",
    "TP_SPLIT",
    "AttentionUnit",
    "ChannelJob",
    "DecodeMappingError",
    "GemvJob",
    "KV_HEAD_REPLICATION",
    "KvHeads",
    "LayerPlan",
    "Parallelism",
    "Partition",
    "PartitionError",
    "PartitionSpec",
    "SCORE_OVERFLOWS",
    "ScoreOverflow",
    "ScoreOverflowSpec",
    "ScoreSpill",
    "attention_units",
    "batch_jobs",
    "candidates",
    "kv_heads_per_device",
    "layer_plan",
    "micro_batches",
    "partition_attention",
    "score_spill",
    "score_tile_tokens",
    "spill_staging",
    "split_evenly",
    "stage_layers",
    "tp_shapes",
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


class KvHeads(StrEnum):
    """Where ``tp`` tensor-parallel devices put a model's KV heads (the one rule of both).

    Each device takes ``kv_heads / tp`` whole KV heads when ``tp`` divides ``kv_heads``.
    With more devices than KV heads the two kinds of system part:

    * ``SPLIT`` (PIM modules): a KV head is never copied, so ``tp`` must divide
      ``kv_heads`` (:meth:`Parallelism.check`, the LibraPIM systems refuse the rest);
    * ``REPLICATE`` (GPUs, as Megatron-LM and vLLM do): when ``tp`` is a multiple of
      ``kv_heads`` each device holds (and its QKV GEMM computes) one replicated KV head.
    """

    SPLIT = "split"
    REPLICATE = "replicate"


#: Whether each :class:`KvHeads` rule replicates a KV head on devices beyond ``kv_heads``.
KV_HEAD_REPLICATION: dict[KvHeads, bool] = {KvHeads.SPLIT: False, KvHeads.REPLICATE: True}


def kv_heads_per_device(spec: ModelSpec, tp: int, rule: KvHeads = KvHeads.SPLIT) -> int:
    """KV heads one of ``tp`` devices holds under ``rule`` (:class:`KvHeads`).

    >>> from pimphony.compiler.llm import load_model
    >>> m = load_model("llama-3.1-70b")  # 8 KV heads
    >>> kv_heads_per_device(m, 4), kv_heads_per_device(m, 16, KvHeads.REPLICATE)
    (2, 1)
    """
    if spec.kv_heads % tp == 0:
        return spec.kv_heads // tp
    if KV_HEAD_REPLICATION[rule] and tp % spec.kv_heads == 0:
        return 1
    allowed = "divide or be a multiple of" if KV_HEAD_REPLICATION[rule] else "divide"
    raise DecodeMappingError(
        f"tp = {tp}: must {allowed} {spec.name}'s kv_heads = {spec.kv_heads} "
        f"(KV heads: {rule.value})"
    )


def tp_shapes(
    spec: ModelSpec, tp: int, rule: KvHeads = KvHeads.SPLIT
) -> dict[LayerOp, tuple[int, int]]:
    """``(d_out, d_in)`` of each weight GEMV of one layer on one of ``tp`` devices: the one
    tensor-parallel split (Megatron-LM, :data:`TP_SPLIT`).

    ``qkv`` and ``ffn1`` keep ``1/tp`` of their output columns (``qkv``: the device's
    ``heads / tp`` query heads and its KV heads under ``rule``), ``proj`` and ``ffn2``
    ``1/tp`` of their input rows.
    """
    kv = kv_heads_per_device(spec, tp, rule)
    shapes = {}
    for op, (d_out, d_in) in gemv_shapes(spec).items():
        if op == LayerOp.QKV:
            d_out = (spec.heads // tp + 2 * kv) * spec.head_dim
        elif TP_SPLIT[op] == "d_out":
            d_out //= tp
        else:
            d_in //= tp
        shapes[op] = (d_out, d_in)
    return shapes


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


class ScoreOverflow(StrEnum):
    """What a pair whose scores do not fit its GPR slot does (``--score-overflow``)."""

    GPR_TILES = "gpr-tiles"  # online softmax over GPR-sized score tiles
    BANK_SPILL = "bank-spill"  # scores written to the bank array and read back


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
    partition: str = "tcp"
    units: tuple[AttentionUnit, ...] = ()  # score tiles of every pair (empty: one per pair)
    sv_reduction: bool = True  # SV parts of a unit on several channels are summed on the EPU
    score_overflow: str = ScoreOverflow.GPR_TILES.value  # pairs beyond the GPR: tiled, spilled


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
    tile: int = 0  # score tile of the (request, KV head) pair (GPR tiling)
    spill: bool = False  # its scores go to (qk) or come from (sv) the bank array

    @property
    def shape(self) -> dict:
        """Keyword arguments of ``compiler.kernels.compile_kernel``."""
        return {"tokens": self.tokens, "d_h": self.d_h, "gqa_group": self.gqa_group}


@dataclass(frozen=True)
class AttentionUnit:
    """One score tile of one (request, KV head) pair: QK^T, softmax and SV over ``tokens``
    contiguous tokens. ``pair`` numbers the module's pairs (request-major); ``spilled``: a
    whole pair beyond the GPR whose scores pass through the bank array (``bank-spill``)."""

    request: int
    kv_head: int
    tile: int
    tokens: int
    pair: int
    spilled: bool = False


@dataclass(frozen=True)
class ScoreOverflowSpec:
    """One row of :data:`SCORE_OVERFLOWS`: ``tiled``, such a pair runs as several units (score
    tiles, each re-sending its queries, combined on the EPU); otherwise it stays one unit whose
    kernels spill its scores (:func:`score_spill`)."""

    tiled: bool


#: The readings of scores beyond the GPR (``docs/decode.md``). The papers do not say which
#: CENT uses; ``gpr-tiles`` is the default.
SCORE_OVERFLOWS: dict[ScoreOverflow, ScoreOverflowSpec] = {
    ScoreOverflow.GPR_TILES: ScoreOverflowSpec(tiled=True),
    ScoreOverflow.BANK_SPILL: ScoreOverflowSpec(tiled=False),
}


def _overflow(reading: str) -> ScoreOverflow:
    """``reading`` as a :class:`ScoreOverflow`, or a :class:`PartitionError` listing the
    allowed."""
    if not isinstance(reading, str) or reading not in SCORE_OVERFLOWS:
        raise PartitionError(
            f"score overflow {reading!r} is unknown; allowed: {', '.join(SCORE_OVERFLOWS)}"
        )
    return ScoreOverflow(reading)


@dataclass(frozen=True)
class ScoreSpill:
    """One channel job's bank-array traffic under ``bank-spill``: ``columns`` 32 B column
    commands (WR of QK^T's scores, RD of SV's) over ``rows`` all-bank score rows."""

    columns: int
    rows: int

    def cycles(self, cfg: HardwareConfig) -> int:
        """Channel cycles of the traffic: a column per ``tCCD`` on the data bus, and per row a
        precharge, the all-bank activation and ``tRCD``
        (``compiler.kernels.row_switch_estimate``), paid in series with the job's kernel."""
        return self.columns * cfg.timing.tCCD + self.rows * row_switch_estimate(cfg)


def score_spill(cfg: HardwareConfig, job: ChannelJob) -> ScoreSpill:
    """The bank-array traffic of ``job`` (:class:`ScoreSpill`; zero unless ``job.spill``).

    Its ``G x tokens`` scores fill ``G * ceil(tokens / s)`` 32 B columns, ``s`` scores per
    column (``column_bytes / element_bytes``), written after QK^T and read before SV, over
    ``ceil(columns / (banks * columns_per_row))`` all-bank rows.

    >>> from pimphony.models.config import load_preset
    >>> job = ChannelJob("qk", 1 << 20, 128, 4, 0, 0, spill=True)
    >>> score_spill(load_preset("pimphony-cent"), job)
    ScoreSpill(columns=262144, rows=256)
    """
    if not job.spill:
        return ScoreSpill(0, 0)
    ch = cfg.channel
    columns = job.gqa_group * math.ceil(job.tokens / (ch.column_bytes // ch.element_bytes))
    return ScoreSpill(columns, math.ceil(columns / (ch.banks * ch.columns_per_row)))


def spill_staging(cfg: HardwareConfig, job: ChannelJob) -> HardwareConfig:
    """The hardware ``job``'s kernel is lowered for: ``cfg``, or for a spilled job ``cfg``
    with a GPR that holds its scores. A spilled kernel's scores pass through the GPR on their
    way to or from the bank array, so its GPR addresses wrap; they are functional only (the
    channel TLM's timing does not read them), so the kernel is lowered as if they fit."""
    if not job.spill:
        return cfg
    n_out, n_in = (job.tokens, job.d_h) if job.kind == "qk" else (job.d_h, job.tokens)
    need = gpr_tiles_needed(cfg, n_out, n_in, job.gqa_group) * cfg.channel.column_bytes
    if need <= cfg.module.gpr_bytes:
        return cfg
    return replace(cfg, module=replace(cfg.module, gpr_bytes=need))


def split_evenly(n: int, parts: int, unit: int) -> list[int]:
    """Split ``n`` items into ``parts`` shares of whole ``unit``s, as evenly as possible.

    The leftover ``n % unit`` items join the first share with the fewest whole units, so a
    share holds a partial unit only next to whole ones when there are enough units.
    """
    base, extra = divmod(n // unit, parts)
    shares = [(base + (1 if c < extra else 0)) * unit for c in range(parts)]
    shares[extra % parts] += n % unit
    return shares


def score_tile_tokens(cfg: HardwareConfig, scheme: str, d_h: int, gqa_group: int = 1) -> int:
    """Most tokens of one (request, KV head) pair whose scores one GPR slot holds.

    The module's GPR (``gpr_bytes``, in 32 B tiles) is split evenly over the units of work in
    flight: two per stream (QK^T of the next tile writes while SV of the current tile reads),
    one stream per channel under HFP and one per module under TCP and ITPP. A unit holds its
    ``G`` queries (``G * ceil(d_h / mac_elements)`` tiles), its ``G x L`` scores
    (``G * ceil(L / banks)`` tiles: one value per bank per RD_OUT) and its SV outputs
    (``G * ceil(d_h / banks)`` tiles per partial: one per channel when SV partials are
    reduced, else one). ``L`` is the largest multiple of ``banks`` that fits.
    """
    spec = PARTITIONS[_concrete(scheme)]
    ch, channels = cfg.channel, cfg.module.channels
    streams = channels if spec.stream_per_channel else 1
    slot = gpr_tiles(cfg) // (2 * streams)
    partials = channels if spec.sv_reduction else 1
    fixed = gqa_group * (math.ceil(d_h / ch.mac_elements) + partials * math.ceil(d_h / ch.banks))
    groups = (slot - fixed) // gqa_group
    if groups < 1:
        raise PartitionError(
            f"{scheme.upper()} cannot hold one tile of scores in the GPR: a slot of {slot} "
            f"32 B tiles ({cfg.module.gpr_bytes} B over {2 * streams} units in flight) is "
            f"less than the {fixed + gqa_group} a GQA group of {gqa_group} at d_h = {d_h} "
            "needs; use another --partition or a preset with a larger gpr_bytes"
        )
    return groups * ch.banks


def attention_units(
    cfg: HardwareConfig,
    context_lengths: Sequence[int],
    kv_heads: int,
    d_h: int,
    gqa_group: int = 1,
    scheme: str = "tcp",
    overflow: str = ScoreOverflow.GPR_TILES,
) -> list[AttentionUnit]:
    """Every (request, KV head) pair of a micro-batch cut into GPR-sized score tiles.

    A pair of ``T`` tokens becomes ``n = ceil(T / cap)`` contiguous tiles
    (:func:`score_tile_tokens` gives ``cap``), split as evenly as possible in whole groups of
    ``banks`` tokens; ``n = 1`` (no tiling) when its scores fit. Under an ``overflow``
    reading that does not tile (:data:`SCORE_OVERFLOWS`), a pair with ``n > 1`` is one
    spilled unit instead.
    """
    cap = score_tile_tokens(cfg, scheme, d_h, gqa_group)
    tiled = SCORE_OVERFLOWS[_overflow(overflow)].tiled
    units = []
    for r, t in enumerate(context_lengths):
        tiles = split_evenly(t, math.ceil(t / cap), cfg.channel.banks)
        for h in range(kv_heads):
            pair = r * kv_heads + h
            if not tiled and len(tiles) > 1:
                units.append(AttentionUnit(r, h, 0, t, pair, spilled=True))
                continue
            units += [AttentionUnit(r, h, k, n, pair) for k, n in enumerate(tiles) if n]
    return units


def partition_attention(
    cfg: HardwareConfig,
    kind: str,
    context_lengths: Sequence[int],
    kv_heads: int,
    d_h: int,
    gqa_group: int = 1,
    scheme: str = "tcp",
    overflow: str = ScoreOverflow.GPR_TILES,
) -> list[list[ChannelJob]]:
    """Per channel, the ``kind`` (``qk`` or ``sv``) jobs of one layer for a batch of requests
    (every pair beyond the GPR tiled or spilled as ``overflow`` says,
    :func:`attention_units`)."""
    _partition(scheme)
    if kind not in ("qk", "sv"):
        raise PartitionError(f"attention kernel {kind!r} is unknown; allowed: qk, sv")
    for i, t in enumerate(context_lengths):
        if isinstance(t, bool) or not isinstance(t, int) or t <= 0:
            raise PartitionError(f"context length of request {i} = {t!r}: must be a positive int")
    if kv_heads <= 0:
        raise PartitionError(f"kv_heads = {kv_heads}: must be positive")
    scheme = _concrete(scheme)
    units = attention_units(cfg, context_lengths, kv_heads, d_h, gqa_group, scheme, overflow)
    return _attention_jobs(cfg, kind, units, d_h, gqa_group, scheme)


def _attention_jobs(
    cfg: HardwareConfig, kind: str, units, d_h: int, gqa_group: int, scheme: Partition
) -> list[list[ChannelJob]]:
    """Per channel, the ``kind`` jobs of the attention ``units`` under ``scheme``."""
    jobs: list[list[ChannelJob]] = [[] for _ in range(cfg.module.channels)]
    PARTITIONS[scheme].jobs(cfg, kind, units, d_h, gqa_group, jobs)
    return jobs


def _job(kind: str, tokens: int, d_h: int, g: int, u: AttentionUnit) -> ChannelJob:
    return ChannelJob(kind, tokens, d_h, g, u.request, u.kv_head, u.tile, u.spilled)


def _hfp(cfg, kind, units, d_h, gqa_group, jobs) -> None:
    """Head-first: whole (request, KV head) pairs dealt to channels round-robin."""
    for u in units:
        jobs[u.pair % len(jobs)].append(_job(kind, u.tokens, d_h, gqa_group, u))


def _tcp(cfg, kind, units, d_h, gqa_group, jobs) -> None:
    """Token-centric: every tile's tokens split over all channels (QK^T in bank groups)."""
    unit = cfg.channel.banks if kind == "qk" else 1
    for u in units:
        for c, share in enumerate(split_evenly(u.tokens, len(jobs), unit)):
            if share:
                jobs[c].append(_job(kind, share, d_h, gqa_group, u))


def _itpp(cfg, kind, units, d_h, gqa_group, jobs) -> None:
    """LoL-PIM ITPP: K by tokens (as TCP); V by its output dimension, ``banks`` dimensions
    (one output group) at a time, the groups of all pairs dealt to channels round-robin."""
    if kind == "qk":
        _tcp(cfg, kind, units, d_h, gqa_group, jobs)
        return
    banks, channels = cfg.channel.banks, len(jobs)
    widths = [min(banks, d_h - o) for o in range(0, d_h, banks)]
    for u in units:
        share: dict[int, int] = {}
        for k, w in enumerate(widths):
            c = (u.pair * len(widths) + k) % channels
            share[c] = share.get(c, 0) + w
        for c in sorted(share):
            jobs[c].append(_job(kind, u.tokens, share[c], gqa_group, u))


class Partition(StrEnum):
    """Attention partitioning inside a module."""

    HFP = "hfp"
    TCP = "tcp"
    ITPP = "itpp"
    AUTO = "auto"


@dataclass(frozen=True)
class PartitionSpec:
    """One row of :data:`PARTITIONS`.

    ``jobs(cfg, kind, units, d_h, gqa_group, jobs)`` fills per-channel job lists in place;
    ``stream_per_channel``: every channel works on its own pairs (HFP), so the GPR holds a
    score tile per channel; ``sv_reduction``: a unit's SV parts are partial sums the EPU adds
    (TCP), not disjoint outputs; ``choices``: the partitions a per-layer choice picks from
    (empty for a concrete partition).
    """

    jobs: Callable[..., None] | None
    stream_per_channel: bool = False
    sv_reduction: bool = False
    choices: tuple[Partition, ...] = field(default=())


#: The partitioning schemes (``docs/decode.md``).
PARTITIONS: dict[Partition, PartitionSpec] = {
    Partition.HFP: PartitionSpec(_hfp, stream_per_channel=True),
    Partition.TCP: PartitionSpec(_tcp, sv_reduction=True),
    Partition.ITPP: PartitionSpec(_itpp),
    Partition.AUTO: PartitionSpec(None, choices=(Partition.TCP, Partition.HFP)),
}


def _partition(scheme: str) -> Partition:
    """``scheme`` as a :class:`Partition`, or a :class:`PartitionError` listing the allowed."""
    if not isinstance(scheme, str) or scheme not in PARTITIONS:
        raise PartitionError(f"partition {scheme!r} is unknown; allowed: {', '.join(PARTITIONS)}")
    return Partition(scheme)


def candidates(scheme: str) -> tuple[Partition, ...]:
    """The concrete partitions ``scheme`` stands for: itself, or the choices of ``auto``."""
    part = _partition(scheme)
    return PARTITIONS[part].choices or (part,)


def _concrete(scheme: str) -> Partition:
    if PARTITIONS[_partition(scheme)].jobs is None:
        raise PartitionError(
            f"partition {scheme!r} chooses per layer in the decode step; a layer plan needs one "
            f"of {', '.join(p for p, s in PARTITIONS.items() if s.jobs is not None)}"
        )
    return Partition(scheme)


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
    return [batch_jobs(cfg, s, d_in, batch) if s else [] for s in shares]


def batch_jobs(cfg: HardwareConfig, d_out: int, d_in: int, batch: int) -> list[GemvJob]:
    """One channel's batched GEMV of ``d_out x d_in`` for ``batch`` requests: one job, or
    several of at most ``gemv_max_batch`` requests (the last holds the rest) when the batch's
    inputs and outputs do not fit the GPR."""
    most = max(1, min(batch, gemv_max_batch(cfg, d_out, d_in)))
    sizes = [most] * (batch // most) + ([batch % most] if batch % most else [])
    return [GemvJob(d_out, d_in, b) for b in sizes]


def layer_plan(
    spec: ModelSpec,
    cfg: HardwareConfig,
    lengths: Sequence[int],
    tp: int = 1,
    partition: str = "tcp",
    overflow: str = ScoreOverflow.GPR_TILES,
) -> LayerPlan:
    """What each channel of one TP module runs for one layer of micro-batch ``lengths``
    (pairs beyond the GPR tiled or spilled as ``overflow`` says)."""
    Parallelism(tp, 1).check(spec)
    lengths = tuple(int(t) for t in lengths)
    b = len(lengths)
    if b == 0:
        raise DecodeMappingError("a micro-batch needs at least one request")
    d_h, kvh = spec.head_dim, kv_heads_per_device(spec, tp)
    gemv = {op: _gemv_jobs(cfg, *shape, b) for op, shape in tp_shapes(spec, tp).items()}
    g = spec.gqa_group
    try:
        scheme, reading = _concrete(partition), _overflow(overflow)
    except PartitionError as exc:
        raise DecodeMappingError(str(exc)) from None
    units = tuple(attention_units(cfg, lengths, kvh, d_h, g, scheme, reading))
    qk, sv = (_attention_jobs(cfg, kind, units, d_h, g, scheme) for kind in ("qk", "sv"))
    return LayerPlan(
        gemv, qk, sv, kvh, g, d_h, lengths, scheme.value, units,
        PARTITIONS[scheme].sv_reduction, reading.value,
    )  # fmt: skip
