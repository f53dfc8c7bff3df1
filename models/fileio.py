"""Where outputs go and how they are written: the build folder, atomic writes, plots."""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

from pimphony.models.errors import PimphonyError

__all__ = [
    "BUILD_DIR",
    "FIGURE_FORMATS",
    "OutputError",
    "check_writable",
    "figure_format",
    "pyplot",
    "write_atomic",
    "write_figure",
]

#: Root of every default output (reports, plots, Verilog, co-simulation builds, waves),
#: relative to the working directory so that a run leaves its files where it was started.
BUILD_DIR = Path("build")


def check_writable(path: str | Path, overwrite: bool) -> Path:
    """``path`` if a file may be written there: not a directory, and (unless ``overwrite``)
    not an existing file (:class:`FileExistsError`)."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{path} is a directory; name a file to write")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass --force (overwrite=True) to replace it")
    return path


def write_atomic(path: str | Path, data: bytes, overwrite: bool = True) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    The file gets the usual permissions (``0o666`` less the umask). With ``overwrite=False``
    an existing file is left alone and :class:`FileExistsError` is raised.
    """
    path = check_writable(path, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg back end, imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: Figure formats by file extension.
FIGURE_FORMATS = ("png", "pdf", "svg")


class OutputError(PimphonyError, ValueError):
    """An output file cannot be written as asked (e.g. an unknown figure extension)."""


def figure_format(path: str | Path) -> str:
    """The figure format ``path``'s extension names; :class:`OutputError` if none we write."""
    fmt = Path(path).suffix.lstrip(".").lower()
    if fmt not in FIGURE_FORMATS:
        raise OutputError(
            f"{path}: a plot is written as {', '.join('.' + f for f in FIGURE_FORMATS)}; "
            f"got {Path(path).suffix or 'no extension'!r}"
        )
    return fmt


def write_figure(fig, path: str | Path, overwrite: bool = True) -> Path:
    """Save a matplotlib figure atomically in the format its extension names (PNG at 110 dpi,
    PDF, SVG), then close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=figure_format(path), dpi=110)
    finally:
        plt.close(fig)
    return write_atomic(path, buf.getvalue(), overwrite=overwrite)
