"""Compiled kernels called with one specialisation per pattern of arguments.

numba compiles a kernel once per exact argument type: a command field read from a
structured stream is a strided array, the same field of a one-command or empty chunk is
contiguous, a field of a stream read from a file is read-only, and each combination is a
new specialisation (tens of seconds of compilation each for the schedulers' kernels).
:class:`Widened` compiles one specialisation per pattern of ``None`` arguments, its
command-field arguments typed as read-only arrays of any layout, and lets numba convert
every call to it (a contiguous or writable array converts to that type safely).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numba
from numba.core import types

__all__ = ["Widened"]


def _widen(t: types.Type) -> types.Type:
    """``t`` as a read-only array of any layout (``t`` itself if it is not an array)."""
    if isinstance(t, types.Array):
        return t.copy(layout="A", readonly=True)
    return t


class Widened:
    """``dispatcher`` (an ``@njit`` kernel) called with its parameters named in ``wide``
    typed as read-only arrays of any layout; one compilation (or cache load) per pattern of
    ``None`` arguments, none per layout or writability of those arrays."""

    def __init__(self, dispatcher: Any, wide: Sequence[str]):
        names = list(inspect.signature(dispatcher.py_func).parameters)
        unknown = set(wide) - set(names)
        if unknown:
            raise ValueError(f"{dispatcher.py_func.__name__} has no parameter {sorted(unknown)}")
        self.dispatcher = dispatcher
        self.wide = frozenset(names.index(n) for n in wide)
        self._patterns: set[tuple[bool, ...]] = set()

    def __call__(self, *args: Any) -> Any:
        pattern = tuple(a is None for a in args)
        if pattern not in self._patterns:
            sig = tuple(
                _widen(numba.typeof(a)) if i in self.wide else numba.typeof(a)
                for i, a in enumerate(args)
            )
            self.dispatcher.compile(sig)
            self._patterns.add(pattern)
        # With compilation off, numba converts the arguments to a compiled signature instead
        # of compiling an exact one; on again after, for compiled callers of the kernel.
        self.dispatcher.disable_compile(True)
        try:
            return self.dispatcher(*args)
        finally:
            self.dispatcher.disable_compile(False)
