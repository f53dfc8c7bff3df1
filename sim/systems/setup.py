"""What one decode step depends on: the model, the hardware, the batch and every choice."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from pimphony.compiler.llm import ModelSpec
from pimphony.compiler.plan import (
    PARTITIONS,
    SCORE_OVERFLOWS,
    DecodeMappingError,
    Parallelism,
    ScoreOverflow,
)
from pimphony.models.channel import SCHEDULERS
from pimphony.models.config import HardwareConfig
from pimphony.models.errors import PimphonyError
from pimphony.models.memory import MEMORY_POLICIES, MemoryPolicy

__all__ = [
    "MICRO_BATCHES_AUTO",
    "DecodeError",
    "DecodeSetup",
    "Mapping",
    "checked_lengths",
    "micro_batch_candidates",
]

MICRO_BATCHES_AUTO = "auto"


def checked_lengths(lengths: Sequence[int]) -> tuple[int, ...]:
    """The batch's context lengths as plain ints; :class:`DecodeError` for an empty batch or a
    length that is not a positive int."""
    if not lengths:
        raise DecodeError("the batch is empty: give at least one context length")
    for i, t in enumerate(lengths):
        if isinstance(t, bool) or not isinstance(t, int | np.integer) or t <= 0:
            raise DecodeError(f"context length of request {i} = {t!r}: must be a positive int")
    return tuple(int(t) for t in lengths)


class Mapping(StrEnum):
    """How the weight GEMVs are mapped onto a module's channels (``--mapping``)."""

    FIXED = "fixed"  # compiler.plan: outputs over every channel, in whole bank groups
    TUNED = "tuned"  # per op, DCC's best draft if the step's model times it faster


def micro_batch_candidates(pp: int, batch: int) -> list[int]:
    """Micro-batch counts ``micro_batches="auto"`` tries: ``pp``, ``2 pp`` and ``4 pp``, each
    at most ``batch`` (fewer than ``pp`` micro-batches leave stages idle, more cost extra
    passes over the weights); only 1 without pipelining (``pp`` 1)."""
    if pp == 1:
        return [1]
    return sorted({min(batch, pp * k) for k in (1, 2, 4)})


class DecodeError(PimphonyError, ValueError):
    """A decode-step set-up is invalid or does not fit the system."""


@dataclass(frozen=True)
class DecodeSetup:
    """Everything one decode step depends on; validated on construction.

    Parameters
    ----------
    model, hw : ModelSpec, HardwareConfig
        The LLM and the module preset.
    lengths : tuple of int
        Context length of each request of the batch (tokens its new query attends to).
    tp, pp : int
        Tensor- and pipeline-parallel degrees; the system has ``tp * pp`` modules.
    partition : {"tcp", "hfp", "itpp", "auto"}
        Attention partitioning inside a module (``compiler.plan.PARTITIONS``); ``auto``
        picks per layer the faster of TCP and HFP.
    sched : {"static", "pingpong", "dcs"}
        Channel command scheduler.
    memory : {"lazy", "static"}
        ``lazy``: DPA (virtual addresses, 1 MB chunks, on-module dispatcher); ``static``:
        maximum-context reservation and host-sent unrolled attention streams.
    micro_batches : int or "auto", optional
        Pipeline micro-batches (default ``min(pp, batch)``); ``"auto"`` simulates the
        candidates of :func:`micro_batch_candidates` and keeps the fastest.
    max_context : int, optional
        Tokens a static reservation holds (default the model's ``context_window``).
    check_capacity : bool
        Refuse batches that do not fit (default); off only for timing studies.
    mapping : {"fixed", "tuned"}
        The weight GEMVs' mapping (:class:`Mapping`, ``sim.systems.tuned``).
    score_overflow : {"gpr-tiles", "bank-spill"}
        What a pair whose scores overflow the GPR does (``compiler.plan.SCORE_OVERFLOWS``).
    """

    model: ModelSpec
    hw: HardwareConfig
    lengths: tuple[int, ...]
    tp: int = 1
    pp: int = 1
    partition: str = "tcp"
    sched: str = "dcs"
    memory: str = "lazy"
    micro_batches: int | str | None = None
    max_context: int | None = None
    check_capacity: bool = True
    mapping: str = Mapping.FIXED.value
    score_overflow: str = ScoreOverflow.GPR_TILES.value

    def __post_init__(self) -> None:
        object.__setattr__(self, "lengths", checked_lengths(self.lengths))
        try:
            Parallelism(self.tp, self.pp).check(self.model)
        except DecodeMappingError as exc:
            raise DecodeError(str(exc)) from None
        for name, value, allowed in (
            ("partition", self.partition, PARTITIONS),
            ("sched", self.sched, SCHEDULERS),
            ("memory", self.memory, MEMORY_POLICIES),
            ("mapping", self.mapping, list(Mapping)),
            ("score_overflow", self.score_overflow, SCORE_OVERFLOWS),
        ):
            if value not in allowed:
                raise DecodeError(f"{name} {value!r} is unknown; allowed: {', '.join(allowed)}")
        if self.micro_batches not in (None, MICRO_BATCHES_AUTO) and (
            isinstance(self.micro_batches, bool)
            or not isinstance(self.micro_batches, int)
            or self.micro_batches < 1
        ):
            raise DecodeError(
                f"micro_batches = {self.micro_batches!r}: must be a positive int or 'auto'"
            )
        longest = max(self.lengths)
        window = self.model.context_window
        if longest > window:
            raise DecodeError(
                f"context length {longest} exceeds {self.model.name}'s context_window {window}"
            )
        if self.max_context is not None and not self.max_context > 0:
            raise DecodeError(f"max_context = {self.max_context!r}: must be positive")
        if self.memory == MemoryPolicy.STATIC and longest > self.reservation:
            raise DecodeError(
                f"context length {longest} exceeds the static reservation max_context = "
                f"{self.reservation}"
            )

    @property
    def modules(self) -> int:
        """Modules in the system (``tp * pp``)."""
        return self.tp * self.pp

    @property
    def reservation(self) -> int:
        """Tokens reserved per request under static allocation."""
        return self.max_context or self.model.context_window
