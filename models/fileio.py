"""Where outputs go and how they are written: the build folder, atomic writes, plots."""

from __future__ import annotations

import glob
import io
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pimphony.models.errors import PimphonyError

__all__ = [
    "BUILD_DIR",
    "FIGURE_FORMATS",
    "OutputError",
    "check_outputs",
    "check_writable",
    "file_kind",
    "figure_format",
    "pyplot",
    "read_utf8",
    "write_atomic",
    "write_figure",
]

#: Root of every default output (reports, plots, Verilog, co-simulation builds, waves),
#: relative to the working directory so that a run leaves its files where it was started.
BUILD_DIR = Path("build")


_KINDS = (
    (stat.S_ISREG, "regular file"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISLNK, "symbolic link"),
    (stat.S_ISFIFO, "FIFO"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
)


def file_kind(path: str | Path) -> str | None:
    """What is at ``path`` itself (a symbolic link is not followed): ``"regular file"``,
    ``"directory"``, ``"symbolic link"``, ``"FIFO"``, ``"socket"``, ``"character device"``,
    ``"block device"``; ``None`` if nothing is."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "special file")


def check_writable(path: str | Path, overwrite: bool) -> Path:
    """``path`` if a file may be written there: nothing there yet, or (with ``overwrite``) a
    regular file. A directory, symbolic link, FIFO, socket or device is refused whatever
    ``overwrite`` says (:class:`OutputError` naming its kind); an existing file without
    ``overwrite`` is :class:`FileExistsError`."""
    path = Path(path)
    kind = file_kind(path)
    if kind == "directory":
        raise OutputError(f"{path} is a directory; name a file to write")
    if kind not in (None, "regular file"):
        raise OutputError(
            f"{path} is a {kind}; only a regular file is ever replaced (--force included)"
        )
    if kind is not None and not overwrite:
        raise FileExistsError(f"{path} exists; pass --force (overwrite=True) to replace it")
    return path


def _same_file(a: Path, b: Path) -> bool:
    """``a`` and ``b`` name one file: the same resolved path, or (both existing) the same
    inode, which also catches hard links."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_outputs(
    outputs: Mapping[str, str | Path], inputs: Mapping[str, str | Path] | None = None
) -> None:
    """Refuse a command's outputs that would destroy what it reads or each other.

    ``outputs`` and ``inputs`` map an option name (as the user wrote it, ``--report``) to a
    path. An output that is the same file as an input (same path, symbolic link or hard link)
    is refused, ``--force`` or not; so are two outputs naming one file. :class:`OutputError`
    names both options and the user's path.
    """
    outs = [(name, Path(p)) for name, p in outputs.items()]
    for name, path in outs:
        for in_name, in_path in (inputs or {}).items():
            if _same_file(path, Path(in_path)):
                raise OutputError(
                    f"{name} {path} is the file {in_name} reads; writing it would destroy "
                    "the input (--force does not override this): name another file"
                )
    for k, (name, path) in enumerate(outs):
        for other, other_path in outs[k + 1 :]:
            if _same_file(path, other_path):
                raise OutputError(
                    f"{name} and {other} both name {path}; give each output its own file"
                )


def _remove_orphans(path: Path) -> None:
    """Remove temporary files of ``path`` left by a writer that was killed (SIGKILL, power
    loss) mid-write: ``.NAME.PID.*.tmp`` whose process no longer exists."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 :].split(".", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except OSError:  # alive but not ours (EPERM): leave it
            pass


def write_atomic(path: str | Path, data: bytes, overwrite: bool = True) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    The file gets the usual permissions (``0o666`` less the umask). With ``overwrite=False``
    an existing file is left alone and :class:`FileExistsError` is raised. The temporary
    file is ``.NAME.PID.*.tmp`` beside ``path``; one a killed writer left is removed when
    the file is next replaced.
    """
    path = check_writable(path, overwrite)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():  # a killed writer's orphan is cleared when its file is replaced;
            _remove_orphans(path)  # a first write (a sweep's new point) lists no folder
        prefix = f".{path.name}.{os.getpid()}."
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:  # name the user's path, not the temporary file
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror}") from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_utf8(path: str | Path, error: type[Exception]) -> str:
    """The text of ``path``; ``error`` naming the file, line and column of the first byte
    that is not UTF-8. A missing file is :class:`FileNotFoundError`, for the caller to name."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}, column {column})"
        ) from None


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
