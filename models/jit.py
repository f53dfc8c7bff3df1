"""numba, loaded on first compiled use, and kernels called with one specialisation per pattern
of arguments.

Every kernel module takes :func:`njit` from here. Until some kernel is needed compiled, a
kernel is a :class:`Kernel`: its Python function plus numba's options, and numba is not
imported (0.25-0.3 s of start-up, and 0.15-0.25 s more to set up its CPU target at the first
kernel loaded). Inside :func:`interpreted` a kernel that is not compiled yet runs as plain
Python (the same source, so the same result): a command whose work is a few hundred
commands (``pimphony run`` of a small kernel) then never loads numba. The first compiled use of
any kernel loads numba (with SciPy hidden: :func:`_import_numba_without_scipy`), makes every
kernel a numba dispatcher and puts the dispatchers in place of the :class:`Kernel` objects in
this package's modules, where compiled callers look them up.

numba compiles a kernel once per exact argument type: a command field read from a
structured stream is a strided array, the same field of a one-command or empty chunk is
contiguous, a field of a stream read from a file is read-only, and each combination is a
new specialisation (tens of seconds of compilation each for the schedulers' kernels).
:class:`Widened` compiles one specialisation per pattern of ``None`` arguments, its
command-field arguments typed as read-only arrays of any layout, and lets numba convert
every call to it (a contiguous or writable array converts to that type safely).
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

__all__ = ["Kernel", "Widened", "compiled", "interpreted", "njit", "numba_loaded"]

_PACKAGE = __name__.split(".", 1)[0]  # "pimphony": the modules whose kernels are swapped
_KERNELS: list[Kernel] = []  # every Kernel made before numba was loaded
_numba: Any = None  # the numba module once loaded
_interpreting = 0  # depth of interpreted() blocks asking for plain Python


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


def numba_loaded() -> bool:
    """Whether the kernels are numba dispatchers (numba imported by :func:`compiled`)."""
    return _numba is not None


def compiled() -> Any:
    """Load numba (once), make every :class:`Kernel` a dispatcher and put each dispatcher in
    place of its :class:`Kernel` in this package's modules; return the numba module."""
    global _numba
    if _numba is not None:
        return _numba
    _import_numba_without_scipy()
    import numba

    for kernel in _KERNELS:
        kernel._dispatcher = numba.njit(**kernel._options)(kernel.py_func)
    _numba = numba
    for name, module in list(sys.modules.items()):
        if module is None or not (name == _PACKAGE or name.startswith(_PACKAGE + ".")):
            continue
        space = vars(module)
        for attr, value in list(space.items()):
            if isinstance(value, Kernel):
                space[attr] = value._dispatcher
    _KERNELS.clear()
    return numba


@contextmanager
def interpreted(when: bool = True) -> Iterator[None]:
    """Within the block (if ``when``), kernels not compiled yet run as plain Python and numba
    stays unloaded; once numba is loaded, kernels run compiled whatever the block says."""
    global _interpreting
    if not when:
        yield
        return
    _interpreting += 1
    try:
        yield
    finally:
        _interpreting -= 1


class Kernel:
    """An ``@njit`` kernel before numba is loaded: :attr:`py_func` and numba's options.
    Called, it runs as plain Python inside :func:`interpreted` and compiled otherwise; any
    other attribute is the dispatcher's (loading numba)."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]) -> None:
        self.py_func = fn
        self._options = options
        self._dispatcher: Any = None
        functools.update_wrapper(self, fn)
        _KERNELS.append(self)

    @property
    def dispatcher(self) -> Any:
        """The numba dispatcher (numba loaded by :func:`compiled` if it is not yet)."""
        if self._dispatcher is None:
            compiled()
        return self._dispatcher

    def __call__(self, *args: Any) -> Any:
        if self._dispatcher is None and _interpreting:
            return self.py_func(*args)
        return self.dispatcher(*args)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_dispatcher", "_options", "py_func"):
            raise AttributeError(name)
        return getattr(self.dispatcher, name)


def njit(fn: Callable[..., Any] | None = None, **options: Any) -> Any:
    """numba's ``njit`` (``@njit`` or ``@njit(cache=True, ...)``): a :class:`Kernel` until
    numba is loaded, a dispatcher after."""

    def wrap(f: Callable[..., Any]) -> Any:
        if _numba is not None:
            return _numba.njit(**options)(f)
        return Kernel(f, options)

    return wrap(fn) if fn is not None else wrap


def _widen(t: Any) -> Any:
    """``t`` as a read-only array of any layout (``t`` itself if it is not an array)."""
    from numba.core import types

    if isinstance(t, types.Array):
        return t.copy(layout="A", readonly=True)
    return t


class Widened:
    """``dispatcher`` (an ``@njit`` kernel) called with its parameters named in ``wide``
    typed as read-only arrays of any layout; one compilation (or cache load) per pattern of
    ``None`` arguments, none per layout or writability of those arrays. Inside
    :func:`interpreted`, before numba is loaded, the kernel runs as plain Python."""

    def __init__(self, dispatcher: Any, wide: Sequence[str]):
        names = list(inspect.signature(dispatcher.py_func).parameters)
        unknown = set(wide) - set(names)
        if unknown:
            raise ValueError(f"{dispatcher.py_func.__name__} has no parameter {sorted(unknown)}")
        self.kernel = dispatcher
        self.wide = frozenset(names.index(n) for n in wide)
        self._patterns: set[tuple[bool, ...]] = set()

    def __call__(self, *args: Any) -> Any:
        kernel = self.kernel
        if isinstance(kernel, Kernel):
            if kernel._dispatcher is None and _interpreting:
                return kernel.py_func(*args)
            kernel = kernel.dispatcher
        pattern = tuple(a is None for a in args)
        if pattern not in self._patterns:
            numba = compiled()
            sig = tuple(
                _widen(numba.typeof(a)) if i in self.wide else numba.typeof(a)
                for i, a in enumerate(args)
            )
            kernel.compile(sig)
            self._patterns.add(pattern)
        # With compilation off, numba converts the arguments to a compiled signature instead
        # of compiling an exact one; on again after, for compiled callers of the kernel.
        kernel.disable_compile(True)
        try:
            return kernel(*args)
        finally:
            kernel.disable_compile(False)
