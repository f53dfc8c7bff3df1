"""The search over (TP, PP) splits of a module count: which splits map a model, and the best
of them by a key (default: decode tokens/s).

Every experiment that takes "the best TP x PP" calls :func:`best_split`; splits are tried in
the order of :func:`valid_splits` (most TP first) and the first of equal keys wins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pimphony.compiler.llm import ModelSpec
from pimphony.compiler.plan import DecodeMappingError, Parallelism

__all__ = ["Split", "SplitSearch", "best_split", "tokens_per_s", "valid_splits"]

R = TypeVar("R")
#: ``(tp, pp)``: tensor-parallel ways x pipeline stages.
Split = tuple[int, int]


def valid_splits(spec: ModelSpec, modules: int) -> list[Split]:
    """Every (TP, PP) with ``TP x PP = modules`` that the model can be mapped onto, most TP
    first."""
    out = []
    for tp in range(modules, 0, -1):
        if modules % tp:
            continue
        try:
            Parallelism(tp, modules // tp).check(spec)
        except DecodeMappingError:
            continue
        out.append((tp, modules // tp))
    return out


def tokens_per_s(result: Any) -> float:
    """The default key of :func:`best_split`: a result's ``tokens_per_s``."""
    return result.tokens_per_s


@dataclass(frozen=True)
class SplitSearch(Generic[R]):
    """What :func:`best_split` tried and chose.

    Attributes
    ----------
    tried
        ``(split, result)`` of every split, in the order tried.
    split
        The chosen split.
    best
        Its result.
    """

    tried: tuple[tuple[Split, R], ...]
    split: Split
    best: R

    @property
    def results(self) -> list[R]:
        """The result of every split tried, in order."""
        return [r for _, r in self.tried]


def best_split(
    run: Callable[[int, int], R],
    splits: Iterable[Split],
    key: Callable[[R], float] = tokens_per_s,
) -> SplitSearch[R]:
    """Run ``run(tp, pp)`` on every split of ``splits`` (usually :func:`valid_splits`) and
    choose the largest ``key``; of equal keys the first tried wins.

    Raises
    ------
    ValueError
        ``splits`` is empty.
    """
    tried = tuple((split, run(*split)) for split in splits)
    if not tried:
        raise ValueError("best_split: no split to try")
    split, best = tried[0]
    for s, r in tried[1:]:
        if key(r) > key(best):
            split, best = s, r
    return SplitSearch(tried, split, best)
