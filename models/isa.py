"""The channel command set: opcodes, fields, widths, compact encoding and on-disk format.

This module is the single definition of the command set. The compiler, the TLM, the RTL
generators and the testbenches import it; nothing else declares an opcode or a field.

A command stream is a numpy structured array of :data:`COMMAND_DTYPE`. Field meaning:

========  ===========================================================================
``op``    :class:`Op` (WR_INP, MAC, RD_OUT)
``gbuf``  GBuf entry written by WR_INP or read by MAC
``row``   DRAM row a MAC reads in all banks
``col``   column (group of ``mac_elements``) a MAC reads in that row
``out``   OBuf entry a MAC accumulates into or RD_OUT drains
``gpr``   GPR tile (32 B) a WR_INP reads or a RD_OUT writes (functional mode only)
========  ===========================================================================

Fields a command does not use are zero. Files are ``.npz`` archives holding a JSON header
(``magic``, ``format_version``, geometry) and the ``commands`` array; see
``docs/command-format.md``.
"""

from __future__ import annotations

import io
import json
import zipfile
import zlib
from enum import IntEnum
from pathlib import Path

import numpy as np
from pimphony.models.config import ChannelGeometry, HardwareConfig
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import check_writable, write_atomic
from pimphony.models.jit import Widened, njit

__all__ = [
    "DEFAULT_CHUNK",
    "COMMAND_DTYPE",
    "FIELDS",
    "FORMAT_MAGIC",
    "FORMAT_VERSION",
    "HW_FIELDS",
    "IO_OPS",
    "OPERAND_FIELDS",
    "OP_MAC",
    "OP_RD_OUT",
    "OP_WR_INP",
    "CommandFormatError",
    "Op",
    "StreamError",
    "StreamReader",
    "describe_command",
    "empty_stream",
    "field_widths",
    "gpr_tiles",
    "load_stream",
    "make_stream",
    "save_stream",
    "validate_stream",
]


class Op(IntEnum):
    """Channel command opcodes."""

    WR_INP = 0
    MAC = 1
    RD_OUT = 2


OP_WR_INP, OP_MAC, OP_RD_OUT = int(Op.WR_INP), int(Op.MAC), int(Op.RD_OUT)
"""The opcodes as plain ints, for numba kernels and Amaranth comparisons."""

IO_OPS = (Op.WR_INP, Op.RD_OUT)
"""Opcodes that move data over the channel data bus (the I/O queue under DCS)."""

FIELDS = ("op", "gbuf", "row", "col", "out", "gpr")
HW_FIELDS = tuple(f for f in FIELDS if f != "gpr")
"""The fields the RTL command layout carries (:data:`FIELDS` less ``gpr``, which only matters
functionally), in layout order."""
COMMAND_DTYPE = np.dtype(
    [("op", "u1"), ("gbuf", "u2"), ("row", "u4"), ("col", "u2"), ("out", "u2"), ("gpr", "u4")]
)
DEFAULT_CHUNK = 1 << 16
"""Commands per chunk of a streamed run or file (``models.channel.ChannelRun``,
:class:`StreamReader`): 1 MiB of commands, small enough to stay in cache."""

FORMAT_MAGIC = "pimphony-command-stream"
FORMAT_VERSION = 1

OPERAND_FIELDS = {
    Op.WR_INP: ("gbuf", "gpr"),
    Op.MAC: ("gbuf", "row", "col", "out"),
    Op.RD_OUT: ("out", "gpr"),
}
"""Fields each opcode uses; the others must be zero."""


class StreamError(PimphonyError, ValueError):
    """A command stream holds an illegal command for the given geometry."""


class CommandFormatError(PimphonyError, ValueError):
    """A command-stream file is malformed, of another format or of another version."""


def describe_command(stream: np.ndarray, k: int) -> str:
    """``MAC gbuf=3 row=0 col=17 out=2``-style text for command ``k`` of ``stream``."""
    op = Op(int(stream["op"][k]))
    shown = [f for f in OPERAND_FIELDS[op] if f != "gpr"]  # gpr only matters functionally
    return op.name + " " + " ".join(f"{f}={int(stream[f][k])}" for f in shown)


def _bits(n: int) -> int:
    """Bits to index ``n`` distinct values (at least 1)."""
    return max(1, (n - 1).bit_length())


def field_widths(geom: ChannelGeometry, gpr_bytes: int | None = None) -> dict[str, int]:
    """Hardware field widths in bits for ``geom`` (used by the RTL payload layout)."""
    widths = {
        "op": _bits(len(Op)),
        "gbuf": _bits(geom.gbuf_entries),
        "row": _bits(geom.rows_per_bank),
        "col": _bits(geom.columns_per_row),
        "out": _bits(geom.obuf_entries),
    }
    if gpr_bytes is not None:
        widths["gpr"] = _bits(gpr_bytes // geom.column_bytes)
    return widths


def gpr_tiles(cfg: HardwareConfig) -> int:
    """GPR size in 32 B tiles (the unit of the ``gpr`` field)."""
    return cfg.module.gpr_bytes // cfg.channel.column_bytes


def empty_stream(n: int) -> np.ndarray:
    """A zeroed stream of ``n`` commands."""
    return np.zeros(n, dtype=COMMAND_DTYPE)


def make_stream(commands: list[tuple]) -> np.ndarray:
    """Build a stream from ``(op, **fields)``-style tuples: ``(Op.MAC, gbuf, row, col, out)``.

    Tuples per opcode: ``(WR_INP, gbuf[, gpr])``, ``(MAC, gbuf, row, col, out)``,
    ``(RD_OUT, out[, gpr])``.
    """
    s = empty_stream(len(commands))
    for i, cmd in enumerate(commands):
        op = Op(cmd[0])
        s["op"][i] = op
        names = OPERAND_FIELDS[op]
        if len(cmd) - 1 > len(names) or (op == Op.MAC and len(cmd) != 5):
            raise StreamError(f"command {i}: {op.name} takes fields {names}, got {cmd[1:]!r}")
        for name, value in zip(names, cmd[1:], strict=False):
            s[name][i] = value
    return s


def validate_stream(
    stream: np.ndarray, geom: ChannelGeometry, gpr_tiles: int | None = None, offset: int = 0
) -> None:
    """Raise :class:`StreamError` naming the first illegal command and field.

    ``gpr_tiles`` (the GPR size in 32 B tiles), if given, also bounds the ``gpr`` field.
    ``offset`` is the index of the first command in the whole stream (a chunk's messages
    name whole-stream indices).
    """
    if not isinstance(stream, np.ndarray) or stream.dtype != COMMAND_DTYPE or stream.ndim != 1:
        raise StreamError(
            f"a command stream must be a 1-D numpy array of dtype {COMMAND_DTYPE}, "
            f"got {getattr(stream, 'dtype', type(stream))}"
        )
    limits = {
        "gbuf": geom.gbuf_entries,
        "row": geom.rows_per_bank,
        "col": geom.columns_per_row,
        "out": geom.obuf_entries,
        "gpr": gpr_tiles if gpr_tiles is not None else np.iinfo(np.uint32).max + 1,
    }
    # A field's bound per opcode: its limit for an operand, 1 (it must be 0) otherwise.
    bound = np.array(
        [[limits[f] if f in OPERAND_FIELDS[o] else 1 for f in limits] for o in Op], dtype=np.int64
    )
    if _FIRST_INVALID(*(stream[f] for f in FIELDS), bound) < 0:
        return
    op = stream["op"].astype(np.int64)
    bad = np.flatnonzero((op < 0) | (op >= len(Op)))
    if bad.size:
        i = int(bad[0])
        raise StreamError(
            f"command {i + offset}: op = {int(op[i])} is not an opcode; allowed: "
            + ", ".join(f"{o.value} ({o.name})" for o in Op)
        )
    for o in Op:
        mask = op == o
        if not mask.any():
            continue
        for name, limit in limits.items():
            values = stream[name]
            if name in OPERAND_FIELDS[o]:
                bad = np.flatnonzero(mask & (values >= limit))
                why = f"must be < {limit}"
            else:
                bad = np.flatnonzero(mask & (values != 0))
                why = f"is not used by {o.name} and must be 0"
            if bad.size:
                i = int(bad[0])
                raise StreamError(
                    f"command {i + offset} ({o.name}): {name} = {int(values[i])} {why}"
                )


@njit(cache=True)
def _first_invalid(op, gbuf, row, col, out, gpr, bound):
    """Index of the first command with an unknown opcode or a field at or past its bound
    (``bound[op, field]``, fields in :data:`FIELDS` order after ``op``), else -1."""
    n_ops = bound.shape[0]
    for i in range(op.shape[0]):
        o = np.int64(op[i])
        if o >= n_ops:
            return i
        if (
            np.int64(gbuf[i]) >= bound[o, 0]
            or np.int64(row[i]) >= bound[o, 1]
            or np.int64(col[i]) >= bound[o, 2]
            or np.int64(out[i]) >= bound[o, 3]
            or np.int64(gpr[i]) >= bound[o, 4]
        ):
            return i
    return -1


#: :func:`_first_invalid` compiled once whatever the fields' layout or writability.
_FIRST_INVALID = Widened(_first_invalid, FIELDS)


def _header(cfg: HardwareConfig | None, extra: dict | None) -> dict:
    head: dict = {"magic": FORMAT_MAGIC, "format_version": FORMAT_VERSION}
    if cfg is not None:
        g = cfg.channel
        head["geometry"] = {
            "gbuf_entries": g.gbuf_entries,
            "obuf_entries": g.obuf_entries,
            "rows_per_bank": g.rows_per_bank,
            "columns_per_row": g.columns_per_row,
        }
        head["preset"] = cfg.name
    if extra:
        head["meta"] = extra
    return head


def save_stream(
    path: str | Path,
    stream: np.ndarray,
    cfg: HardwareConfig | None = None,
    meta: dict | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``stream`` atomically to ``path`` (``.npz``); refuse to overwrite unless asked."""
    path = check_writable(path, overwrite)
    if cfg is not None:
        validate_stream(stream, cfg.channel, gpr_tiles=gpr_tiles(cfg))
    head = json.dumps(_header(cfg, meta)).encode()
    buf = io.BytesIO()
    np.savez(buf, header=np.frombuffer(head, dtype=np.uint8), commands=stream)
    return write_atomic(path, buf.getvalue(), overwrite=overwrite)


#: What reading a damaged ``.npz`` member raises: zipfile's own errors, a flipped flag bit
#: ("encrypted": RuntimeError; an unknown compression method: NotImplementedError) and a
#: corrupt deflate stream (zlib.error).
_DAMAGED = (zipfile.BadZipFile, EOFError, OSError, RuntimeError, NotImplementedError, zlib.error)


def _open_archive(path: Path):
    """The opened ``.npz`` of a stream file and its checked header."""
    what = "not a pimphony command-stream file (the .npz `pimphony compile` writes)"
    try:
        archive = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise CommandFormatError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CommandFormatError(f"{path}: is a directory, not a stream file") from None
    except EOFError:
        raise CommandFormatError(f"{path}: empty file; {what}") from None
    except ValueError as exc:
        if "pickle" in str(exc):  # numpy's reading of bytes that are no .npy/.npz
            raise CommandFormatError(
                f"{path}: {what}; it is neither .npz nor .npy (a DPA program written by "
                "`compile --format dpa` is not a command stream)"
            ) from None
        raise CommandFormatError(f"{path}: {what} ({exc})") from None
    except _DAMAGED as exc:
        raise CommandFormatError(f"{path}: {what} ({exc})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise CommandFormatError(f"{path}: not a pimphony command-stream file (plain .npy array)")
    try:
        missing = {"header", "commands"} - set(archive.files)
        if missing:
            raise CommandFormatError(f"{path}: missing member(s) {sorted(missing)}")
        try:
            head = json.loads(archive["header"].tobytes().decode())
        except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
            raise CommandFormatError(f"{path}: header is not JSON ({exc})") from None
        except _DAMAGED as exc:  # a damaged member
            raise CommandFormatError(f"{path}: damaged file, header unreadable ({exc})") from None
        if not isinstance(head, dict) or head.get("magic") != FORMAT_MAGIC:
            raise CommandFormatError(f"{path}: wrong magic; not a pimphony command stream")
        version = head.get("format_version")
        if type(version) is not int or version != FORMAT_VERSION:
            raise CommandFormatError(
                f"{path}: format_version {version!r} is not supported (this pimphony reads "
                f"version {FORMAT_VERSION})"
            )
    except BaseException:
        archive.close()
        raise
    return archive, head


def load_stream(path: str | Path, cfg: HardwareConfig | None = None) -> tuple[np.ndarray, dict]:
    """Read a stream file; return ``(commands, header)``. Validate against ``cfg`` if given."""
    path = Path(path)
    archive, head = _open_archive(path)
    with archive:
        try:
            commands = archive["commands"]
        except (ValueError, *_DAMAGED) as exc:
            raise CommandFormatError(f"{path}: damaged file, commands unreadable ({exc})") from None
    if commands.dtype != COMMAND_DTYPE:
        raise CommandFormatError(
            f"{path}: commands have dtype {commands.dtype}, expected {COMMAND_DTYPE}"
        )
    if cfg is not None:
        try:
            validate_stream(commands, cfg.channel, gpr_tiles=gpr_tiles(cfg))
        except StreamError as exc:
            raise CommandFormatError(f"{path}: {exc}") from None
    return commands, head


class StreamReader:
    """A stream file read in chunks of ``chunk`` commands, so a run of any length holds one
    chunk at a time; the same checks and messages as :func:`load_stream`.

    ``header`` and ``commands`` (the count) are known once opened; iterating yields the
    chunks (validated against ``cfg`` if given, naming whole-stream indices) and checks the
    member's CRC at the end.
    """

    def __init__(
        self, path: str | Path, cfg: HardwareConfig | None = None, chunk: int = DEFAULT_CHUNK
    ):
        self.path = Path(path)
        self.cfg = cfg
        self.chunk = chunk
        archive, self.header = _open_archive(self.path)
        self._zip = archive.zip
        try:
            self._member = self._zip.open("commands.npy")
            version = np.lib.format.read_magic(self._member)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(self._member)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(self._member)
            else:
                raise ValueError(f".npy format version {version} is not supported")
        except (ValueError, KeyError, *_DAMAGED) as exc:
            archive.close()
            raise CommandFormatError(
                f"{self.path}: damaged file, commands unreadable ({exc})"
            ) from None
        self._archive = archive
        if dtype != COMMAND_DTYPE:
            archive.close()
            raise CommandFormatError(
                f"{self.path}: commands have dtype {dtype}, expected {COMMAND_DTYPE}"
            )
        if len(shape) != 1 or fortran:
            archive.close()
            raise CommandFormatError(f"{self.path}: commands are not a 1-D array")
        self.commands = int(shape[0])

    def __iter__(self):
        size = COMMAND_DTYPE.itemsize
        done = 0
        try:
            while done < self.commands:
                n = min(self.chunk, self.commands - done)
                raw = self._member.read(n * size)
                if len(raw) != n * size:
                    raise EOFError(f"{done + len(raw) // size} of {self.commands} commands")
                part = np.frombuffer(raw, dtype=COMMAND_DTYPE)
                if self.cfg is not None:
                    try:
                        validate_stream(part, self.cfg.channel, gpr_tiles(self.cfg), offset=done)
                    except StreamError as exc:
                        raise CommandFormatError(f"{self.path}: {exc}") from None
                done += n
                yield part
            self._member.read()  # to the end: the CRC check
        except (ValueError, *_DAMAGED) as exc:
            raise CommandFormatError(
                f"{self.path}: damaged file, commands unreadable ({exc})"
            ) from None
        finally:
            self.close()

    def close(self) -> None:
        """Release the file."""
        self._member.close()
        self._archive.close()
