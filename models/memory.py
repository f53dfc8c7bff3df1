"""KV-cache memory management for PIM modules: chunk geometry, static vs lazy allocation.

Physical PIM memory is handed out in chunks (PIMphony VI-C: a chunk is channels x banks x
rows, 1 MB; :class:`ChunkGeometry`). :class:`StaticAllocator` reserves the worst case
(``max_context`` tokens) per admitted request up front; :class:`LazyAllocator` maps a new
chunk into the request's VA2PA list only when its KV cache grows past the chunks it has. See
``docs/memory.md``; the workloads (context-length statistics) are :mod:`sim.workloads` and
the capacity experiment (PIMphony Fig. 19) is :mod:`sim.experiments.capacity`.

KV bytes are accounted as a byte stream: a request holding ``t`` tokens uses
``t * kv_bytes_per_token`` bytes and needs ``ceil(t * kv_bytes_per_token / chunk_bytes)``
chunks. For a set of modules the pool is the union of all modules' chunks (a request's KV is
split evenly over the modules by tensor parallelism, so pooling the counts is exact).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
from pimphony.models.config import DEFAULT_PRESET, ConfigError, HardwareConfig, load_preset
from pimphony.models.errors import PimphonyError

__all__ = [
    "ALLOCATORS",
    "MEMORY_POLICIES",
    "MemoryPolicy",
    "CHUNK_BYTES",
    "GIB",
    "ChunkGeometry",
    "LazyAllocator",
    "MemoryStats",
    "OutOfMemory",
    "RequestInfo",
    "StaticAllocator",
    "kv_bytes_per_token",
    "make_allocator",
]

CHUNK_BYTES = 1 << 20
"""Default allocation chunk: 1 MB (PIMphony VI-C), taken as 1 MiB."""
GIB = 1 << 30


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, element_bytes: int = 2) -> int:
    """KV-cache bytes one token adds: K and V for every layer and KV head."""
    return 2 * layers * kv_heads * head_dim * element_bytes


# --------------------------------------------------------------------------- geometry


@dataclass(frozen=True)
class ChunkGeometry:
    """How a set of PIM modules is cut into allocation chunks.

    A chunk spans every channel and bank of one module and ``rows_per_chunk`` consecutive
    DRAM rows in each bank (PIMphony VI-C: channels x banks x rows). One *row slice* is one
    row in every bank of the module, ``channels * banks * row_bytes`` bytes; the chunk size
    must be a whole number of row slices and divide the module.

    Attributes
    ----------
    channels, banks, rows_per_bank, row_bytes : int
        Module organisation (from a hardware preset).
    modules : int
        Modules in the set; physical chunk ``p`` lives in module ``p // chunks_per_module``.
    chunk_bytes : int
        Allocation granularity (default 1 MiB).
    """

    channels: int
    banks: int
    rows_per_bank: int
    row_bytes: int
    modules: int = 1
    chunk_bytes: int = CHUNK_BYTES

    def __post_init__(self) -> None:
        for key in ("channels", "banks", "rows_per_bank", "row_bytes", "modules", "chunk_bytes"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"ChunkGeometry.{key} = {value!r}: must be a positive integer")
        if self.chunk_bytes % self.row_slice_bytes:
            raise ConfigError(
                f"chunk size {self.chunk_bytes} B is not a multiple of one row slice "
                f"(channels {self.channels} x banks {self.banks} x row {self.row_bytes} B = "
                f"{self.row_slice_bytes} B); use a multiple of {self.row_slice_bytes} B"
            )
        if self.rows_per_bank % self.rows_per_chunk:
            raise ConfigError(
                f"chunk size {self.chunk_bytes} B = {self.rows_per_chunk} rows per bank does not "
                f"divide the {self.rows_per_bank} rows of a bank"
            )

    @classmethod
    def from_config(
        cls, cfg: HardwareConfig | str, modules: int = 1, chunk_bytes: int = CHUNK_BYTES
    ) -> ChunkGeometry:
        """Geometry of ``modules`` modules of a preset (object or name, e.g. ``aim-16ch``)."""
        cfg = load_preset(cfg) if isinstance(cfg, str) else cfg
        ch = cfg.channel
        return cls(
            channels=cfg.module.channels,
            banks=ch.banks,
            rows_per_bank=ch.rows_per_bank,
            row_bytes=ch.row_bytes,
            modules=modules,
            chunk_bytes=chunk_bytes,
        )

    @classmethod
    def for_capacity(
        cls,
        capacity_bytes: int,
        cfg: HardwareConfig | str = DEFAULT_PRESET,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> ChunkGeometry:
        """Enough modules of a preset for exactly ``capacity_bytes`` of memory."""
        one = cls.from_config(cfg, 1, chunk_bytes)
        if capacity_bytes <= 0 or capacity_bytes % one.module_bytes:
            raise ConfigError(
                f"capacity {capacity_bytes} B is not a positive multiple of the "
                f"{one.module_bytes} B module ({one.module_bytes / GIB:g} GiB)"
            )
        return cls.from_config(cfg, capacity_bytes // one.module_bytes, chunk_bytes)

    @property
    def row_slice_bytes(self) -> int:
        """One DRAM row in every bank of a module."""
        return self.channels * self.banks * self.row_bytes

    @property
    def rows_per_chunk(self) -> int:
        """DRAM rows per bank one chunk occupies."""
        return self.chunk_bytes // self.row_slice_bytes

    @property
    def module_bytes(self) -> int:
        """Capacity of one module: channels x banks x rows x row bytes."""
        return self.row_slice_bytes * self.rows_per_bank

    @property
    def total_bytes(self) -> int:
        """Capacity of all modules."""
        return self.module_bytes * self.modules

    @property
    def chunks_per_module(self) -> int:
        """Chunks in one module."""
        return self.rows_per_bank // self.rows_per_chunk

    @property
    def num_chunks(self) -> int:
        """Chunks in all modules."""
        return self.chunks_per_module * self.modules

    def chunk_location(self, chunk: int) -> tuple[int, int]:
        """``(module, first_row)`` of physical chunk ``chunk`` (same rows in every bank)."""
        if not 0 <= chunk < self.num_chunks:
            raise ValueError(f"chunk {chunk} out of range 0..{self.num_chunks - 1}")
        module, index = divmod(chunk, self.chunks_per_module)
        return module, index * self.rows_per_chunk


# --------------------------------------------------------------------------- allocators


class OutOfMemory(PimphonyError, MemoryError):  # noqa: N818 (name fixed by the API)
    """An admission or growth does not fit; nothing was allocated.

    Attributes
    ----------
    request_id : object
        The request.
    requested_bytes, free_bytes : int
        Bytes the operation needed (whole chunks) and bytes free for it.
    """

    def __init__(self, message: str, request_id: Any, requested_bytes: int, free_bytes: int):
        super().__init__(message)
        self.request_id = request_id
        self.requested_bytes = requested_bytes
        self.free_bytes = free_bytes


@dataclass(frozen=True)
class RequestInfo:
    """One live request: its tokens and the physical chunks mapped to it (VA2PA order)."""

    request_id: Any
    tokens: int
    chunks: tuple[int, ...]
    chunk_bytes: int
    kv_bytes_per_token: int

    @property
    def used_bytes(self) -> int:
        """KV bytes of its tokens."""
        return self.tokens * self.kv_bytes_per_token

    @property
    def reserved_bytes(self) -> int:
        """Bytes of its chunks."""
        return len(self.chunks) * self.chunk_bytes

    @property
    def waste_bytes(self) -> int:
        """Reserved but unused bytes (internal fragmentation)."""
        return self.reserved_bytes - self.used_bytes


@dataclass(frozen=True)
class MemoryStats:
    """Snapshot of an allocator.

    Attributes
    ----------
    policy : str
        ``"static"`` or ``"lazy"``.
    total_bytes : int
        Capacity of the modules (weights included).
    weight_bytes : int
        Bytes held by model weights.
    capacity_bytes : int
        Capacity available for KV: ``total_bytes - weight_bytes``.
    chunk_bytes, chunks_total, chunks_used, chunks_free : int
        Chunk size and KV chunk counts (``chunks_total = capacity_bytes // chunk_bytes``).
    reserved_bytes : int
        Bytes of chunks held by live requests.
    used_bytes : int
        Actual KV bytes of live tokens.
    requests, tokens : int
        Live requests and their tokens.
    """

    policy: str
    total_bytes: int
    weight_bytes: int
    capacity_bytes: int
    chunk_bytes: int
    chunks_total: int
    chunks_used: int
    chunks_free: int
    reserved_bytes: int
    used_bytes: int
    requests: int
    tokens: int

    @property
    def capacity_utilization(self) -> float:
        """``used / capacity_bytes``: live KV over the memory available for KV."""
        return self.used_bytes / self.capacity_bytes if self.capacity_bytes else 0.0

    @property
    def total_utilization(self) -> float:
        """``used / total_bytes``: live KV over the whole memory (weights included)."""
        return self.used_bytes / self.total_bytes

    @property
    def reserved_utilization(self) -> float:
        """``used / reserved`` (1.0 when nothing is reserved: nothing is wasted)."""
        return self.used_bytes / self.reserved_bytes if self.reserved_bytes else 1.0

    @property
    def fragmentation_bytes(self) -> int:
        """Reserved but unused bytes: ``reserved - used``."""
        return self.reserved_bytes - self.used_bytes

    @property
    def free_bytes(self) -> int:
        """Bytes of free KV chunks."""
        return self.chunks_free * self.chunk_bytes


@dataclass(slots=True)
class _Live:
    tokens: int
    chunks: list[int] | range = field(default_factory=list)  # VA2PA: virtual -> physical
    room: int = 0  # tokens it may reach before a growth maps memory or fails


class _Allocator:
    """Shared bookkeeping: chunk pool, live requests, stats."""

    policy = ""

    def __init__(self, geometry: ChunkGeometry, kv_bytes_per_token: int, weight_bytes: int = 0):
        if isinstance(kv_bytes_per_token, bool) or not isinstance(kv_bytes_per_token, int):
            raise TypeError(f"kv_bytes_per_token must be an int, got {kv_bytes_per_token!r}")
        if kv_bytes_per_token <= 0:
            raise ValueError(f"kv_bytes_per_token must be >= 1, got {kv_bytes_per_token}")
        if isinstance(weight_bytes, bool) or not isinstance(weight_bytes, int):
            raise TypeError(f"weight_bytes must be an int, got {weight_bytes!r}")
        if not 0 <= weight_bytes <= geometry.total_bytes:
            raise ValueError(
                f"weight_bytes = {weight_bytes} must be in 0..{geometry.total_bytes} "
                "(the modules' capacity)"
            )
        self.geometry = geometry
        self.kv_bytes_per_token = kv_bytes_per_token
        self.weight_bytes = weight_bytes
        self.capacity_bytes = geometry.total_bytes - weight_bytes
        # Weights occupy the highest chunks (bookkeeping only); KV chunks are 0..chunks_total-1.
        self.chunks_total = self.capacity_bytes // geometry.chunk_bytes
        self._live: dict[Any, _Live] = {}
        self._used_bytes = 0
        self._chunks_used = 0

    # -- helpers
    @property
    def chunk_bytes(self) -> int:
        """Allocation granularity in bytes."""
        return self.geometry.chunk_bytes

    def chunks_for(self, tokens: int) -> int:
        """Chunks that hold ``tokens`` tokens of KV: ``ceil(tokens * kv / chunk)``."""
        return -(-tokens * self.kv_bytes_per_token // self.chunk_bytes)

    def _check_new(self, request_id: Any, context_len: int) -> None:
        if request_id in self._live:
            raise ValueError(f"request {request_id!r} is already admitted")
        if isinstance(context_len, bool) or not isinstance(context_len, int | np.integer):
            raise TypeError(f"context_len must be an int, got {context_len!r}")
        if context_len < 1:
            raise ValueError(f"request {request_id!r}: context_len {context_len} must be >= 1")

    def _get(self, request_id: Any) -> _Live:
        try:
            return self._live[request_id]
        except KeyError:
            raise KeyError(f"request {request_id!r} is not admitted") from None

    def _oom(self, request_id: Any, what: str, chunks: int, free_chunks: int) -> OutOfMemory:
        c = self.chunk_bytes
        return OutOfMemory(
            f"out of PIM memory ({self.policy}): request {request_id!r} {what} needs "
            f"{chunks} chunk(s) = {chunks * c:,} B requested, but only {free_chunks} chunk(s) "
            f"= {free_chunks * c:,} B free (KV capacity {self.capacity_bytes:,} B, "
            f"chunk {c:,} B); nothing was allocated or truncated",
            request_id,
            chunks * c,
            free_chunks * c,
        )

    # -- public API
    def __contains__(self, request_id: Any) -> bool:
        return request_id in self._live

    def __len__(self) -> int:
        return len(self._live)

    @property
    def requests(self) -> list[Any]:
        """Live request ids in admission order."""
        return list(self._live)

    def request(self, request_id: Any) -> RequestInfo:
        """Tokens and VA2PA chunk list of a live request."""
        live = self._get(request_id)
        return RequestInfo(
            request_id, live.tokens, tuple(live.chunks), self.chunk_bytes, self.kv_bytes_per_token
        )

    def va2pa(self, request_id: Any) -> tuple[int, ...]:
        """Physical chunk of each virtual chunk index of a live request."""
        return tuple(self._get(request_id).chunks)

    def translate(self, request_id: Any, byte_offset: int) -> tuple[int, int]:
        """Virtual KV byte offset of a request -> ``(physical chunk, offset in chunk)``."""
        live = self._get(request_id)
        vchunk, off = divmod(byte_offset, self.chunk_bytes)
        if byte_offset < 0 or vchunk >= len(live.chunks):
            raise ValueError(
                f"request {request_id!r}: byte offset {byte_offset} outside its "
                f"{len(live.chunks)} mapped chunk(s)"
            )
        return live.chunks[vchunk], off

    def release_all(self) -> None:
        """Release every live request."""
        for rid in list(self._live):
            self._release(rid)

    def release(self, request_id: Any) -> tuple[int, ...]:
        """Free all chunks of a finished request; returns them (VA2PA order)."""
        return tuple(self._release(request_id).chunks)

    def _release(self, request_id: Any) -> _Live:
        live = self._get(request_id)
        del self._live[request_id]
        self._unmap(request_id, live)
        self._chunks_used -= len(live.chunks)
        self._used_bytes -= live.tokens * self.kv_bytes_per_token
        return live

    def usage(self) -> tuple[int, int]:
        """KV bytes of live tokens and of held chunks (``stats()``'s ``used_bytes`` and
        ``reserved_bytes``)."""
        return self._used_bytes, self._chunks_used * self.geometry.chunk_bytes

    def stats(self) -> MemoryStats:
        """Current capacity, reservation and use."""
        return MemoryStats(
            policy=self.policy,
            total_bytes=self.geometry.total_bytes,
            weight_bytes=self.weight_bytes,
            capacity_bytes=self.capacity_bytes,
            chunk_bytes=self.chunk_bytes,
            chunks_total=self.chunks_total,
            chunks_used=self._chunks_used,
            chunks_free=self.chunks_total - self._chunks_used,
            reserved_bytes=self._chunks_used * self.chunk_bytes,
            used_bytes=self._used_bytes,
            requests=len(self._live),
            tokens=self._used_bytes // self.kv_bytes_per_token,
        )

    def admit(self, request_id: Any, context_len: int, *, raise_on_oom: bool = True) -> bool:
        """Admit a request whose KV cache holds ``context_len`` tokens.

        Returns True when admitted. When it does not fit, raises :class:`OutOfMemory`
        (message names requested and free bytes), or returns False with
        ``raise_on_oom=False``; either way nothing is allocated.
        """
        self._check_new(request_id, context_len)
        chunks = self._map(request_id, context_len, raise_on_oom)
        if chunks is None:
            return False
        self._live[request_id] = _Live(int(context_len), chunks, self._room(len(chunks)))
        self._used_bytes += int(context_len) * self.kv_bytes_per_token
        return True

    def grow(self, request_id: Any, tokens: int = 1) -> tuple[int, ...]:
        """Append ``tokens`` decoded tokens; returns the chunks newly mapped (maybe none)."""
        if isinstance(tokens, bool) or not isinstance(tokens, int | np.integer) or tokens < 1:
            raise ValueError(f"tokens must be an integer >= 1, got {tokens!r}")
        live = self._get(request_id)
        new_tokens = live.tokens + int(tokens)
        new = self._map_more(request_id, live, new_tokens) if new_tokens > live.room else ()
        live.tokens = new_tokens
        self._used_bytes += int(tokens) * self.kv_bytes_per_token
        return new

    def grow_each(self, request_ids: Iterable[Any]) -> int:
        """Append one token to each request of ``request_ids`` in order, as :meth:`grow`
        would, stopping before the first that does not fit; the count grown.

        The serving loop's step: a request within its mapped memory costs a counter."""
        live_of = self._live
        grown = 0
        try:
            for rid in request_ids:
                live = live_of[rid]
                tokens = live.tokens + 1
                if tokens > live.room:
                    self._map_more(rid, live, tokens)
                live.tokens = tokens
                grown += 1
        except OutOfMemory:
            pass
        except KeyError:
            self._get(rid)
            raise
        finally:
            self._used_bytes += grown * self.kv_bytes_per_token
        return grown

    # -- what a policy decides
    def _room(self, chunks: int) -> int:
        """Tokens a request holding ``chunks`` chunks may reach before growing maps more."""
        raise NotImplementedError

    def _map(
        self, request_id: Any, context_len: int, raise_on_oom: bool
    ) -> list[int] | range | None:
        """The chunks of a new request (``None``: they do not fit and ``raise_on_oom`` is
        false), counted in ``_chunks_used``."""
        raise NotImplementedError

    def _map_more(self, request_id: Any, live: _Live, new_tokens: int) -> tuple[int, ...]:
        """The chunks newly mapped for ``live`` to hold ``new_tokens`` tokens (added to it
        and counted)."""
        raise NotImplementedError

    def _unmap(self, request_id: Any, live: _Live) -> None:
        """Return the chunks of ``live``, a released request, to the free pool."""
        raise NotImplementedError


class StaticAllocator(_Allocator):
    """Worst-case reservation: every request gets ``max_context`` tokens' chunks up front.

    The KV capacity is cut into fixed slots of ``ceil(max_context * kv / chunk)`` contiguous
    chunks (pre-compiled PIM commands embed fixed physical addresses, PIMphony VI-A); an
    admitted request takes the lowest free slot and keeps it until released.
    """

    policy = "static"

    def __init__(
        self,
        geometry: ChunkGeometry,
        kv_bytes_per_token: int,
        max_context: int,
        weight_bytes: int = 0,
    ):
        super().__init__(geometry, kv_bytes_per_token, weight_bytes)
        if isinstance(max_context, bool) or not isinstance(max_context, int) or max_context < 1:
            raise ValueError(f"max_context must be an integer >= 1, got {max_context!r}")
        self.max_context = max_context
        self.chunks_per_request = self.chunks_for(max_context)
        self.slots = self.chunks_total // self.chunks_per_request
        self._free_slots = list(range(self.slots - 1, -1, -1))  # stack, lowest on top
        self._slot_of: dict[Any, int] = {}

    def _room(self, chunks: int) -> int:
        """The reservation: ``max_context`` tokens."""
        return self.max_context

    def _map(self, request_id: Any, context_len: int, raise_on_oom: bool) -> range | None:
        """One ``max_context`` slot, the lowest free one."""
        if context_len > self.max_context:
            raise ValueError(
                f"request {request_id!r}: context_len {context_len} exceeds max_context "
                f"{self.max_context} (static reservations are never truncated)"
            )
        if not self._free_slots:
            if not raise_on_oom:
                return None
            free = self.chunks_total - self._chunks_used
            raise self._oom(
                request_id,
                f"(context {context_len}, reservation max_context {self.max_context} tokens)",
                self.chunks_per_request,
                free,
            )
        slot = self._free_slots.pop()
        base = slot * self.chunks_per_request
        self._slot_of[request_id] = slot
        self._chunks_used += self.chunks_per_request
        return range(base, base + self.chunks_per_request)

    def _map_more(self, request_id: Any, live: _Live, new_tokens: int) -> tuple[int, ...]:
        """No chunk: the tokens stay inside the reservation; past ``max_context`` raises
        OutOfMemory."""
        if new_tokens > self.max_context:
            want = new_tokens * self.kv_bytes_per_token
            raise OutOfMemory(
                f"out of PIM memory (static): request {request_id!r} grows to {new_tokens} "
                f"tokens = {want:,} B requested, beyond its reservation of max_context "
                f"{self.max_context} tokens; 0 B free in the reservation (a static slot cannot "
                "be extended)",
                request_id,
                want,
                0,
            )
        return ()

    def _unmap(self, request_id: Any, live: _Live) -> None:
        slot = self._slot_of.pop(request_id)
        # keep the stack sorted so the lowest free slot is reused first
        self._free_slots.append(slot)
        self._free_slots.sort(reverse=True)


class LazyAllocator(_Allocator):
    """On-demand allocation (PIMphony VI-C, LoL-PIM 5.4): a chunk per ``chunk_bytes`` of KV.

    Each request has a VA2PA list: virtual chunk ``v`` (KV bytes ``[v*chunk, (v+1)*chunk)``)
    maps to any free physical chunk, so a request's chunks need not be contiguous. Free
    chunks sit on a LIFO free list that starts in ascending order; released chunks are
    pushed back so the next allocation reuses them lowest-virtual-first. Only each
    request's last chunk can be partly empty.

    Parameters
    ----------
    max_context : int, optional
        If given, admission and growth past it raise ValueError (the model's window).
    """

    policy = "lazy"

    def __init__(
        self,
        geometry: ChunkGeometry,
        kv_bytes_per_token: int,
        weight_bytes: int = 0,
        max_context: int | None = None,
    ):
        super().__init__(geometry, kv_bytes_per_token, weight_bytes)
        self.max_context = max_context
        self._free = list(range(self.chunks_total - 1, -1, -1))  # stack, chunk 0 on top

    def _room(self, chunks: int) -> int:
        """What ``chunks`` chunks hold, at most ``max_context``."""
        room = chunks * self.chunk_bytes // self.kv_bytes_per_token
        return room if self.max_context is None else min(room, self.max_context)

    def free_chunks(self) -> tuple[int, ...]:
        """The free list, next-allocated first."""
        return tuple(reversed(self._free))

    def _take(self, k: int) -> list[int]:
        if k == 0:
            return []
        got = self._free[-k:]
        del self._free[-k:]
        got.reverse()
        self._chunks_used += k
        return got

    def _check_window(self, request_id: Any, tokens: int) -> None:
        if self.max_context is not None and tokens > self.max_context:
            raise ValueError(
                f"request {request_id!r}: {tokens} tokens exceed max_context {self.max_context}"
            )

    def _map(self, request_id: Any, context_len: int, raise_on_oom: bool) -> list[int] | None:
        """``ceil(context_len * kv / chunk)`` chunks from the free list."""
        self._check_window(request_id, context_len)
        need = self.chunks_for(int(context_len))
        if need > len(self._free):
            if not raise_on_oom:
                return None
            raise self._oom(request_id, f"(context {context_len} tokens)", need, len(self._free))
        return self._take(need)

    def _map_more(self, request_id: Any, live: _Live, new_tokens: int) -> tuple[int, ...]:
        """A new chunk whenever the KV crosses into an unmapped one."""
        self._check_window(request_id, new_tokens)
        need = self.chunks_for(new_tokens) - len(live.chunks)
        if not need:  # within its last chunk (most tokens)
            return ()
        if need > len(self._free):
            raise self._oom(
                request_id, f"(growing {live.tokens} -> {new_tokens} tokens)", need, len(self._free)
            )
        new = self._take(need)
        live.chunks.extend(new)
        live.room = self._room(len(live.chunks))
        return tuple(new)

    def grow_each(self, request_ids: Iterable[Any]) -> int:
        """:meth:`_Allocator.grow_each` with :meth:`_map_more` inline (a request crosses
        into a new chunk as often as every token)."""
        live_of, free = self._live, self._free
        kv, chunk = self.kv_bytes_per_token, self.chunk_bytes
        window = sys.maxsize if self.max_context is None else self.max_context
        one = kv <= chunk  # a token crosses into one chunk at most
        grown = taken = 0
        try:
            for rid in request_ids:
                live = live_of[rid]
                tokens = live.tokens + 1
                if tokens > live.room:
                    if tokens > window:
                        self._check_window(rid, tokens)
                    chunks = live.chunks
                    need = 1 if one else -(-tokens * kv // chunk) - len(chunks)
                    if need > len(free):
                        break
                    for _ in range(need):  # as _take: the top of the free list first
                        chunks.append(free.pop())
                    taken += need
                    live.room = self._room(len(chunks))
                live.tokens = tokens
                grown += 1
        except KeyError:
            self._get(rid)
            raise
        finally:
            self._used_bytes += grown * kv
            self._chunks_used += taken
        return grown

    def _unmap(self, request_id: Any, live: _Live) -> None:
        # push the chunks on the free list (first chunk on top)
        self._free.extend(reversed(live.chunks))


def make_allocator(
    policy: MemoryPolicy | str,
    geometry: ChunkGeometry,
    kv_bytes_per_token: int,
    *,
    weight_bytes: int = 0,
    max_context: int,
) -> _Allocator:
    """An empty allocator of ``policy``: ``static`` reserves ``max_context`` tokens per
    request, ``lazy`` maps chunks as tokens arrive (refusing contexts past ``max_context``)."""
    if not isinstance(policy, str) or policy not in ALLOCATORS:
        raise ValueError(f"policy must be 'static' or 'lazy', got {policy!r}")
    return ALLOCATORS[MemoryPolicy(policy)](
        geometry, kv_bytes_per_token, weight_bytes=weight_bytes, max_context=max_context
    )


class MemoryPolicy(StrEnum):
    """How KV memory is managed (PIMphony VI): ``lazy`` is DPA, ``static`` reserves up front."""

    LAZY = "lazy"
    STATIC = "static"


MEMORY_POLICIES = tuple(MemoryPolicy)
#: The allocator of each policy.
ALLOCATORS: dict[MemoryPolicy, type[_Allocator]] = {
    MemoryPolicy.LAZY: LazyAllocator,
    MemoryPolicy.STATIC: StaticAllocator,
}
