"""numba, imported once for the package, and kernels called with one specialisation per
pattern of arguments.

Every kernel module takes :func:`njit` from here: numba's array functions are loaded with
SciPy hidden (:func:`_import_numba_without_scipy`).

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
import sys
from collections.abc import Sequence
from typing import Any


def _import_numba_without_scipy() -> None:
    """Import numba's array functions with SciPy hidden: numba checks for a BLAS when it
    loads them by importing ``scipy.linalg``, 0.15-0.35 s of every command's start-up (SciPy
    is installed beside XGBoost), and no kernel of this package calls a BLAS routine. Nothing
    changes when numba or SciPy is already imported; SciPy imports as usual afterwards."""
    if "numba" in sys.modules or "scipy" in sys.modules:
        return
    sys.modules["scipy"] = None  # type: ignore[assignment]  # import scipy -> ImportError
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy"]


_import_numba_without_scipy()

import numba  # noqa: E402
from numba import njit  # noqa: E402
from numba.core import types  # noqa: E402

__all__ = ["Widened", "njit"]


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
