"""Intra-module partitioning of attention across channels: head-first (HFP) or token-centric (TCP).

- **HFP** (prior PIM systems): each (request, KV head) pair keeps its whole KV cache in one
  channel; pairs are dealt to channels round-robin. A channel runs its pairs one after another.
- **TCP** (PIMphony IV-C): the tokens of every (request, KV head) are split across all
  channels. QK^T gives each channel whole output groups of ``banks`` tokens (one token per
  bank), so all banks of all channels work once ``T >= channels * banks``; SV gives each
  channel a contiguous token range (its input dimension) and the partial outputs are reduced
  in the HUB. With one token of granularity every channel has SV work once ``T >= channels``
  (16); PIMphony quotes full activation beyond 32 tokens for SV, which this mapping also
  meets.

Work is described as :class:`ChannelJob` lists per channel; ``models/module.py`` runs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from models.config import HardwareConfig

__all__ = ["PARTITIONS", "ChannelJob", "PartitionError", "partition_attention", "split_evenly"]

PARTITIONS = ("hfp", "tcp")


class PartitionError(ValueError):
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
    channels = cfg.module.channels
    jobs: list[list[ChannelJob]] = [[] for _ in range(channels)]
    if scheme == "hfp":
        pair = 0
        for r, t in enumerate(context_lengths):
            for h in range(kv_heads):
                jobs[pair % channels].append(ChannelJob(kind, t, d_h, gqa_group, r, h))
                pair += 1
        return jobs
    unit = cfg.channel.banks if kind == "qk" else 1
    for r, t in enumerate(context_lengths):
        shares = split_evenly(t, channels, unit)
        for h in range(kv_heads):
            for c, share in enumerate(shares):
                if share:
                    jobs[c].append(ChannelJob(kind, share, d_h, gqa_group, r, h))
    return jobs
