"""A function over tasks, in this process or in spawned worker processes, results in order.

``dcc-lut --workers`` and ``verify campaign --workers`` use :func:`ordered_map`; worker
processes are spawned (fresh interpreters: nothing of this process, numba's or XGBoost's
threads included, is forked into them).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["ordered_map"]

T = TypeVar("T")
R = TypeVar("R")


@contextmanager
def ordered_map(
    fn: Callable[[T], R],
    tasks: Sequence[T],
    workers: int,
    local: Callable[[T], R] | None = None,
) -> Iterator[Iterator[R]]:
    """The results of ``fn`` over ``tasks`` in task order: with ``workers`` > 1 (and more
    than one task) from that many spawned processes (``fn`` and the tasks picklable), else
    computed here one by one as they are read, by ``local`` if given (e.g. with progress)."""
    if workers <= 1 or len(tasks) <= 1:
        yield map(local or fn, tasks)
        return
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=spawn) as pool:
        results: Iterator[Any] = pool.map(fn, tasks)
        yield results
