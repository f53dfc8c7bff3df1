"""pimphony: DRAM processing-in-memory for long-context LLM inference.

The installed code lives under this one name: ``pimphony.models`` (the hardware, a leaf),
``pimphony.compiler`` (LLM work -> command streams), ``pimphony.rtl`` (Amaranth blocks) and
``pimphony.sim`` (the command line, systems, experiments, co-simulation). In a source
checkout these are the repository's top-level folders ``models/``, ``compiler/``, ``rtl/``
and ``sim/``; in a wheel they are installed inside this package. ``docs/api.md`` describes
the public functions re-exported by :mod:`pimphony.api`.
"""

from __future__ import annotations

from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "models" / "__init__.py").is_file():
    # A source checkout: pimphony.models is <checkout>/models, and so on.
    __path__.append(str(_CHECKOUT))  # noqa: F821 (a package's __path__)

__all__ = ["__version__", "decode", "run_kernel", "serve"]

_API = {"decode", "run_kernel", "serve"}


def __getattr__(name: str):  # noqa: ANN202 (module __getattr__, PEP 562)
    """The API functions and ``__version__``, loaded on first use (``import pimphony`` is
    light: the command line imports this package on every start)."""
    if name in _API:
        from pimphony import api

        return getattr(api, name)
    if name == "__version__":
        from importlib import metadata

        try:
            return metadata.version("pimphony")
        except metadata.PackageNotFoundError:
            return "unknown (not installed)"
    raise AttributeError(f"module 'pimphony' has no attribute {name!r}")
