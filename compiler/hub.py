"""Codegen from per-channel command streams to HUB instructions (ch_mask, op_size, gpr_addr).

Two compressions, both undone exactly by :func:`models.hub.sequence`:

- **repetition**: a run of commands of one opcode whose fields step as in
  :data:`models.hub.STRIDES` (e.g. MACs over consecutive columns and GBuf entries, WR_INPs
  over consecutive GBuf entries and GPR tiles) becomes one instruction with ``op_size`` = the
  run length;
- **multicast**: the ``j``-th kernel of every channel is compared across channels; channels
  running the same kernel share its instructions through ``ch_mask``.

Under TCP every channel runs the same kernel shapes, so a module's program is about as large
as one channel's; under HFP with unequal context lengths the channels diverge.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence

import numpy as np
from pimphony.models.hub import HUB_DTYPE, OP_SIZE_BITS, STRIDES, HubError
from pimphony.models.isa import COMMAND_DTYPE, FIELDS

__all__ = [
    "encode_kernels",
    "encode_runs",
    "encode_streams",
    "instruction_count",
    "multicast_first",
    "multicast_groups",
    "run_count",
]

_MAX_RUN = (1 << OP_SIZE_BITS) - 1


def _run_starts(stream: np.ndarray) -> np.ndarray:
    """Indices where a new HUB instruction must start (run boundaries, op_size limit)."""
    n = stream.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    op = stream["op"].astype(np.int64)
    cont = np.zeros(n, dtype=bool)
    cont[1:] = op[1:] == op[:-1]
    for f in FIELDS[1:]:
        v = stream[f].astype(np.int64)
        stride = np.zeros(n, dtype=np.int64)
        for o, fields in STRIDES.items():
            if f in fields:
                stride[op == o] = fields[f]
        cont[1:] &= v[1:] == v[:-1] + stride[1:]
    starts = np.flatnonzero(~cont)
    lengths = np.diff(np.append(starts, n))
    if lengths.max() <= _MAX_RUN:
        return starts
    split = [np.arange(s, s + ln, _MAX_RUN) for s, ln in zip(starts, lengths, strict=True)]
    return np.concatenate(split)


def encode_runs(stream: np.ndarray, ch_mask: int = 1) -> np.ndarray:
    """One channel's stream as HUB instructions for the channels in ``ch_mask``."""
    if not isinstance(stream, np.ndarray) or stream.dtype != COMMAND_DTYPE:
        raise HubError(f"a command stream must be a numpy array of dtype {COMMAND_DTYPE}")
    starts = _run_starts(stream)
    prog = np.zeros(starts.size, dtype=HUB_DTYPE)
    for f in FIELDS:
        prog[f] = stream[f][starts]
    prog["op_size"] = np.diff(np.append(starts, stream.shape[0]))
    prog["ch_mask"] = ch_mask
    return prog


def run_count(stream: np.ndarray) -> int:
    """Number of HUB instructions :func:`encode_runs` makes of ``stream``."""
    return int(_run_starts(stream).size)


def _mask(channels: Sequence[int]) -> int:
    return sum(1 << c for c in channels)


def encode_kernels(
    kernels: Sequence[Sequence[Hashable]], streams: dict[Hashable, np.ndarray]
) -> np.ndarray:
    """HUB program for per-channel kernel lists (``kernels[c][j]`` = key into ``streams``).

    The ``j``-th kernels of all channels are grouped by key; each group's stream is encoded
    once and multicast to the group's channels.
    """
    parts = [encode_runs(streams[key], _mask(chans)) for key, chans in multicast_groups(kernels)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=HUB_DTYPE)


def multicast_first(kernels: np.ndarray) -> np.ndarray:
    """Which entries of ``kernels[u, c]`` (a kernel id of channel ``c``, ``-1``: none) send
    their kernel's instructions, as a boolean array of its shape.

    The ``j``-th kernel of every channel (its ``j``-th id >= 0 down column ``c``) is one
    multicast step; within a step each distinct id is sent once, by its first entry in
    row-major order, and multicast to the other channels.
    """
    first = np.zeros(kernels.shape, dtype=bool)
    present = kernels >= 0
    if not present.any():
        return first
    position = np.cumsum(present, axis=0)[present] - 1
    keys = kernels[present]
    _, index = np.unique(position * (int(keys.max()) + 1) + keys, return_index=True)
    first.flat[np.flatnonzero(present)[index]] = True
    return first


def multicast_groups(
    kernels: Sequence[Sequence[Hashable]],
) -> Iterator[tuple[Hashable, list[int]]]:
    """``(key, channels)`` per multicast group (:func:`multicast_first`), in program order.

    Position ``j`` of every channel's kernel list is one step; within a step the channels
    whose ``j``-th kernel has the same key share one copy of its instructions.
    """
    ids: dict[Hashable, int] = {}
    depth = max((len(k) for k in kernels), default=0)
    matrix = np.full((depth, len(kernels)), -1, dtype=np.int64)
    for c, keys in enumerate(kernels):
        for j, key in enumerate(keys):
            matrix[j, c] = ids.setdefault(key, len(ids))
    names = list(ids)
    for j, c in zip(*np.nonzero(multicast_first(matrix)), strict=True):
        yield names[matrix[j, c]], np.flatnonzero(matrix[j] == matrix[j, c]).tolist()


def instruction_count(
    kernels: Sequence[Sequence[Hashable]], count_of: Callable[[Hashable], int]
) -> int:
    """HUB instructions :func:`encode_kernels` makes, from each key's :func:`run_count`."""
    return sum(count_of(key) for key, _ in multicast_groups(kernels))


def encode_streams(streams: Sequence[np.ndarray]) -> np.ndarray:
    """HUB program delivering ``streams[c]`` to channel ``c``; identical streams multicast."""
    keys: list[list[Hashable]] = []
    by_bytes: dict[bytes, int] = {}
    table: dict[Hashable, np.ndarray] = {}
    for s in streams:
        if not isinstance(s, np.ndarray) or s.dtype != COMMAND_DTYPE:
            raise HubError(f"a command stream must be a numpy array of dtype {COMMAND_DTYPE}")
        k = by_bytes.setdefault(s.tobytes(), len(by_bytes))
        table[k] = s
        keys.append([k])
    return encode_kernels(keys, table)
