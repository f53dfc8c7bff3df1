"""KV-cache memory management for PIM modules: workloads, chunk geometry, static vs lazy.

Three parts (see ``docs/memory.md``):

* **Workloads.** ``configs/workloads/<name>.toml`` holds a task's input-context statistics
  (mean, std, min, max; PIMphony Table II, LoL-PIM Table 2) and the model context window it
  is evaluated with. :func:`load_workload` validates one like a hardware preset;
  :func:`sample_context_lengths` draws per-request lengths reproducibly and
  :func:`read_context_lengths` reads explicit lengths from a text or JSON file.
* **Allocators.** Physical PIM memory is handed out in chunks (PIMphony VI-C: a chunk is
  channels x banks x rows, 1 MB). :class:`StaticAllocator` reserves the worst case
  (``max_context`` tokens) per admitted request up front; :class:`LazyAllocator` maps a new
  chunk into the request's VA2PA list only when its KV cache grows past the chunks it has.
* **Experiment.** :func:`capacity_utilization` forms first-come-first-served batches from a
  workload until the next request does not fit, for either policy, and reports capacity
  utilisation and batch size (the mechanism of PIMphony Fig. 19).

KV bytes are accounted as a byte stream: a request holding ``t`` tokens uses
``t * kv_bytes_per_token`` bytes and needs ``ceil(t * kv_bytes_per_token / chunk_bytes)``
chunks. For a set of modules the pool is the union of all modules' chunks (a request's KV is
split evenly over the modules by tensor parallelism, so pooling the counts is exact).
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal

import numpy as np

from models.config import CONFIG_DIR, ConfigError, HardwareConfig, load_preset

__all__ = [
    "CHUNK_BYTES",
    "GIB",
    "PAPER_SETUPS",
    "WORKLOAD_DIR",
    "CapacityResult",
    "CapacitySetup",
    "ChunkGeometry",
    "LazyAllocator",
    "MemoryStats",
    "OutOfMemory",
    "RequestInfo",
    "StaticAllocator",
    "Workload",
    "WorkloadError",
    "available_workloads",
    "capacity_utilization",
    "format_capacity_table",
    "kv_bytes_per_token",
    "load_workload",
    "make_allocator",
    "paper_comparison",
    "read_context_lengths",
    "sample_context_lengths",
]

WORKLOAD_DIR = CONFIG_DIR / "workloads"
CHUNK_BYTES = 1 << 20
"""Default allocation chunk: 1 MB (PIMphony VI-C), taken as 1 MiB."""
GIB = 1 << 30

Policy = Literal["static", "lazy"]
SampleMethod = Literal["truncate", "clip"]


# --------------------------------------------------------------------------- workloads


class WorkloadError(ConfigError):
    """A workload file or a context-length file is malformed or out of range."""


@dataclass(frozen=True)
class Workload:
    """Input-context statistics of one benchmark task, in tokens.

    Attributes
    ----------
    name : str
        File stem in ``configs/workloads/``.
    task, benchmark, source : str
        Task name, benchmark suite and the paper table the numbers come from.
    context_window : int
        Context window of the models the task is evaluated with; static allocation
        reserves this many tokens per request.
    models : tuple of str
        The models the papers pair with the task (informational).
    mean, std : float
        Mean and standard deviation of the input context length.
    min, max : int
        Shortest and longest input context.
    """

    name: str
    task: str
    benchmark: str
    source: str
    context_window: int
    models: tuple[str, ...]
    mean: float
    std: float
    min: int
    max: int


_WORKLOAD_TOP = {
    "name": str,
    "task": str,
    "benchmark": str,
    "source": str,
    "context_window": int,
    "models": list,
    "context": dict,
}
_CONTEXT_KEYS = {"mean": float, "std": float, "min": int, "max": int}


def available_workloads() -> list[str]:
    """Names of the workloads shipped in ``configs/workloads/``."""
    return sorted(p.stem for p in WORKLOAD_DIR.glob("*.toml"))


def load_workload(name: str | Path) -> Workload:
    """Load and validate a workload by name (``qmsum``, ...) or a path to a TOML file."""
    path = Path(name)
    if path.suffix != ".toml":
        path = WORKLOAD_DIR / f"{name}.toml"
        if not path.is_file():
            raise WorkloadError(
                f"unknown workload {str(name)!r}; available: {', '.join(available_workloads())} "
                "(or give a path to a .toml file)"
            )
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such workload file") from None
    except tomllib.TOMLDecodeError as exc:
        raise WorkloadError(f"{path}: not valid TOML: {exc}") from None
    return _workload_from_raw(raw, source=str(path))


def _check_type(where: str, value: Any, kind: type) -> Any:
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise WorkloadError(f"{where}: must be an integer, got {type(value).__name__}")
        if value <= 0:
            raise WorkloadError(f"{where}: must be a positive integer")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise WorkloadError(f"{where}: must be a number, got {type(value).__name__}")
        value = float(value)
        if not math.isfinite(value) or value < 0:
            raise WorkloadError(f"{where}: must be a finite number >= 0")
    elif kind is str:
        if not isinstance(value, str) or not value:
            raise WorkloadError(f"{where}: must be a non-empty string")
    elif kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise WorkloadError(f"{where}: must be a list of non-empty strings")
    elif kind is dict and not isinstance(value, dict):
        raise WorkloadError(f"{where}: must be a table, got {type(value).__name__}")
    return value


def _workload_from_raw(raw: dict[str, Any], source: str) -> Workload:
    for key in raw:
        if key not in _WORKLOAD_TOP:
            raise WorkloadError(
                f"{source}: unknown key {key!r} at top level; allowed: {', '.join(_WORKLOAD_TOP)}"
            )
    values: dict[str, Any] = {}
    for key, kind in _WORKLOAD_TOP.items():
        if key not in raw:
            what = f"section [{key}]" if kind is dict else f"key {key!r}"
            raise WorkloadError(f"{source}: missing {what}")
        values[key] = _check_type(f"{source}: {key} = {raw[key]!r}", raw[key], kind)
    ctx = values.pop("context")
    for key in ctx:
        if key not in _CONTEXT_KEYS:
            raise WorkloadError(
                f"{source}: [context] unknown key {key!r}; allowed: {', '.join(_CONTEXT_KEYS)}"
            )
    for key, kind in _CONTEXT_KEYS.items():
        if key not in ctx:
            raise WorkloadError(f"{source}: [context] missing key {key!r}")
        values[key] = _check_type(f"{source}: [context] {key} = {ctx[key]!r}", ctx[key], kind)
    values["models"] = tuple(values["models"])
    wl = Workload(**values)
    stem = Path(source).stem
    if Path(source).suffix == ".toml" and wl.name != stem:
        raise WorkloadError(f"{source}: name = {wl.name!r} must match the file name {stem!r}")
    if not wl.min <= wl.mean <= wl.max:
        raise WorkloadError(
            f"{source}: [context] needs min <= mean <= max, got min {wl.min}, "
            f"mean {wl.mean:g}, max {wl.max}"
        )
    if wl.max > wl.context_window:
        raise WorkloadError(
            f"{source}: [context] max = {wl.max} exceeds context_window = {wl.context_window} "
            "(contexts are never truncated)"
        )
    if wl.std == 0 and wl.min != wl.max:
        raise WorkloadError(f"{source}: [context] std = 0 needs min == max")
    return wl


def _norm_mass(alpha: float, beta: float) -> float:
    """P(alpha <= Z <= beta) for a standard normal, accurate in both tails."""
    r2 = math.sqrt(2.0)
    if alpha > 0:
        return 0.5 * (math.erfc(alpha / r2) - math.erfc(beta / r2))
    if beta < 0:
        return 0.5 * (math.erfc(-beta / r2) - math.erfc(-alpha / r2))
    return 1.0 - 0.5 * (math.erfc(-alpha / r2) + math.erfc(beta / r2))


def _truncated_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    alpha, beta = (lo - mu) / sigma, (hi - mu) / sigma
    mass = _norm_mass(alpha, beta)
    pdf = NormalDist().pdf
    return mu + sigma * (pdf(alpha) - pdf(beta)) / mass


def _matched_location(mean: float, sigma: float, lo: float, hi: float) -> float:
    """Location ``mu`` whose normal(mu, sigma) truncated to [lo, hi] has mean ``mean``.

    The truncated mean increases monotonically with ``mu``, so bisection converges.
    """
    span = hi - lo
    a, b = lo - 8 * sigma - span, hi + 8 * sigma + span
    for _ in range(200):
        mid = 0.5 * (a + b)
        if _truncated_mean(mid, sigma, lo, hi) < mean:
            a = mid
        else:
            b = mid
    return 0.5 * (a + b)


def sample_context_lengths(
    workload: Workload | str, n: int, seed: int = 0, method: SampleMethod = "truncate"
) -> np.ndarray:
    """Draw ``n`` integer context lengths in ``[workload.min, workload.max]`` reproducibly.

    Parameters
    ----------
    workload : Workload or str
        The task (or its name).
    n : int
        Number of requests (>= 0).
    seed : int
        Seed of the NumPy generator; the same seed gives the same lengths.
    method : {"truncate", "clip"}
        ``"truncate"`` (default): a normal with scale ``std``, truncated to [min, max] (no
        probability mass outside, no spikes at the bounds), with its location solved so the
        truncated mean equals the stated mean; sampled by inverse CDF. Truncation narrows
        the spread, so the sample std is below the stated std when a bound is near the mean
        (Musique: max is 0.94 std above the mean). ``"clip"``: a normal(mean, std) with
        draws outside [min, max] clipped to the bound (spikes at min/max, mean slightly off).

    Returns
    -------
    numpy.ndarray
        ``int64`` array of ``n`` lengths, rounded to the nearest token.
    """
    wl = load_workload(workload) if isinstance(workload, str) else workload
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    rng = np.random.default_rng(seed)
    lo, hi = float(wl.min), float(wl.max)
    if wl.std == 0 or wl.min == wl.max:
        x = np.full(n, wl.mean)
    elif method == "clip":
        x = np.clip(rng.normal(wl.mean, wl.std, size=n), lo, hi)
    elif method == "truncate":
        mu = _matched_location(wl.mean, wl.std, lo, hi)
        dist = NormalDist(mu, wl.std)
        u_lo, u_hi = dist.cdf(lo), dist.cdf(hi)
        if not u_hi - u_lo > 1e-12:
            raise WorkloadError(
                f"workload {wl.name!r}: cannot sample a truncated normal with mean "
                f"{wl.mean:g} and std {wl.std:g} in [{wl.min}, {wl.max}]; use method='clip'"
            )
        u = rng.uniform(u_lo, u_hi, size=n)
        u = np.clip(u, np.nextafter(0.0, 1.0), np.nextafter(1.0, 0.0))
        x = np.array([dist.inv_cdf(float(v)) for v in u], dtype=float)
    else:
        raise ValueError(f"method must be 'truncate' or 'clip', got {method!r}")
    return np.clip(np.rint(x), wl.min, wl.max).astype(np.int64)


def read_context_lengths(path: str | Path, max_context: int | None = None) -> np.ndarray:
    """Read explicit per-request context lengths from a file.

    The file is a JSON list of integers (``.json`` files, or any file whose first
    non-blank character is ``[``), or text with one integer per line (blank lines and
    lines starting with ``#`` are skipped). Every length must be a positive integer and,
    if ``max_context`` is given, at most ``max_context``: lengths are never truncated.

    Returns
    -------
    numpy.ndarray
        ``int64`` array in file order.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such context-length file") from None
    except UnicodeDecodeError:
        raise WorkloadError(f"{path}: not a text file") from None
    items: list[tuple[str, Any]] = []
    if path.suffix == ".json" or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}: not valid JSON: {exc}") from None
        if not isinstance(data, list):
            raise WorkloadError(
                f"{path}: JSON must be a list of integers, got {type(data).__name__}"
            )
        for i, v in enumerate(data):
            if isinstance(v, bool) or not isinstance(v, int):
                raise WorkloadError(f"{path}: item {i} = {v!r} is not an integer")
            items.append((f"item {i}", v))
    else:
        for lineno, line in enumerate(text.splitlines(), start=1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            try:
                v = int(s, 10)
            except ValueError:
                raise WorkloadError(f"{path}: line {lineno}: {s!r} is not an integer") from None
            items.append((f"line {lineno}", v))
    if not items:
        raise WorkloadError(f"{path}: no context lengths (expected one integer per line)")
    for where, v in items:
        if v <= 0:
            raise WorkloadError(f"{path}: {where}: context length {v} must be >= 1")
        if max_context is not None and v > max_context:
            raise WorkloadError(
                f"{path}: {where}: context length {v} exceeds max_context = {max_context} "
                "(lengths are never truncated)"
            )
    return np.array([v for _, v in items], dtype=np.int64)


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
        cfg: HardwareConfig | str = "aim-16ch",
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


class OutOfMemory(MemoryError):  # noqa: N818 (name fixed by the API)
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


@dataclass
class _Live:
    tokens: int
    chunks: list[int] | range = field(default_factory=list)  # VA2PA: virtual -> physical


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
        raise NotImplementedError

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
        raise NotImplementedError

    def grow(self, request_id: Any, tokens: int = 1) -> tuple[int, ...]:
        """Append ``tokens`` decoded tokens; returns the chunks newly mapped (maybe none)."""
        raise NotImplementedError

    def _check_grow(self, tokens: int) -> None:
        if isinstance(tokens, bool) or not isinstance(tokens, int | np.integer) or tokens < 1:
            raise ValueError(f"tokens must be an integer >= 1, got {tokens!r}")


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

    def admit(self, request_id: Any, context_len: int, *, raise_on_oom: bool = True) -> bool:
        """Reserve one ``max_context`` slot (see :meth:`_Allocator.admit`)."""
        self._check_new(request_id, context_len)
        if context_len > self.max_context:
            raise ValueError(
                f"request {request_id!r}: context_len {context_len} exceeds max_context "
                f"{self.max_context} (static reservations are never truncated)"
            )
        if not self._free_slots:
            if not raise_on_oom:
                return False
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
        self._live[request_id] = _Live(
            int(context_len), range(base, base + self.chunks_per_request)
        )
        self._chunks_used += self.chunks_per_request
        self._used_bytes += int(context_len) * self.kv_bytes_per_token
        return True

    def grow(self, request_id: Any, tokens: int = 1) -> tuple[int, ...]:
        """Append tokens inside the reservation; past ``max_context`` raises OutOfMemory."""
        self._check_grow(tokens)
        live = self._get(request_id)
        new_tokens = live.tokens + int(tokens)
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
        live.tokens += int(tokens)
        self._used_bytes += int(tokens) * self.kv_bytes_per_token
        return ()

    def _release(self, request_id: Any) -> _Live:
        live = self._get(request_id)
        del self._live[request_id]
        slot = self._slot_of.pop(request_id)
        # keep the stack sorted so the lowest free slot is reused first
        self._free_slots.append(slot)
        self._free_slots.sort(reverse=True)
        self._chunks_used -= len(live.chunks)
        self._used_bytes -= live.tokens * self.kv_bytes_per_token
        return live


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

    def admit(self, request_id: Any, context_len: int, *, raise_on_oom: bool = True) -> bool:
        """Map ``ceil(context_len * kv / chunk)`` chunks (see :meth:`_Allocator.admit`)."""
        self._check_new(request_id, context_len)
        self._check_window(request_id, context_len)
        need = self.chunks_for(int(context_len))
        if need > len(self._free):
            if not raise_on_oom:
                return False
            raise self._oom(request_id, f"(context {context_len} tokens)", need, len(self._free))
        self._live[request_id] = _Live(int(context_len), self._take(need))
        self._used_bytes += int(context_len) * self.kv_bytes_per_token
        return True

    def grow(self, request_id: Any, tokens: int = 1) -> tuple[int, ...]:
        """Append tokens; map a new chunk when the KV crosses into an unmapped chunk."""
        self._check_grow(tokens)
        live = self._get(request_id)
        new_tokens = live.tokens + int(tokens)
        self._check_window(request_id, new_tokens)
        need = self.chunks_for(new_tokens) - len(live.chunks)
        if need > len(self._free):
            raise self._oom(
                request_id, f"(growing {live.tokens} -> {new_tokens} tokens)", need, len(self._free)
            )
        new = self._take(need)
        live.chunks.extend(new)
        live.tokens = new_tokens
        self._used_bytes += int(tokens) * self.kv_bytes_per_token
        return tuple(new)

    def _release(self, request_id: Any) -> _Live:
        # unmap all chunks and push them on the free list (first chunk on top)
        live = self._get(request_id)
        del self._live[request_id]
        self._free.extend(reversed(live.chunks))
        self._chunks_used -= len(live.chunks)
        self._used_bytes -= live.tokens * self.kv_bytes_per_token
        return live


# --------------------------------------------------------------------------- experiment


@dataclass(frozen=True)
class CapacityResult:
    """Outcome of :func:`capacity_utilization` (means over capacity-bound batches).

    Attributes
    ----------
    workload, policy : str
        Task name and ``"static"`` / ``"lazy"``.
    kv_bytes_per_token, total_bytes, weight_bytes, capacity_bytes, chunk_bytes : int
        The set-up (``capacity_bytes`` = KV capacity = total - weights).
    max_context : int
        Static reservation in tokens.
    batch_sizes : tuple of int
        Requests per batch, one entry per batch closed by a request that did not fit.
    capacity_utilization : float
        Mean ``used / KV capacity`` at batch formation.
    total_utilization : float
        Mean ``used / total memory`` (weights included).
    reserved_utilization : float
        Mean ``used / reserved``.
    max_request_waste_bytes : int
        Largest ``reserved - used`` of any admitted request (lazy: < one chunk).
    """

    workload: str
    policy: str
    kv_bytes_per_token: int
    total_bytes: int
    weight_bytes: int
    capacity_bytes: int
    chunk_bytes: int
    max_context: int
    batch_sizes: tuple[int, ...]
    capacity_utilization: float
    total_utilization: float
    reserved_utilization: float
    max_request_waste_bytes: int

    @property
    def mean_batch_size(self) -> float:
        """Mean requests per batch."""
        return float(np.mean(self.batch_sizes))


def make_allocator(
    policy: Policy,
    geometry: ChunkGeometry,
    kv_bytes_per_token: int,
    *,
    weight_bytes: int = 0,
    max_context: int,
) -> _Allocator:
    """An empty allocator of ``policy``: ``static`` reserves ``max_context`` tokens per
    request, ``lazy`` maps chunks as tokens arrive (refusing contexts past ``max_context``)."""
    if policy == "static":
        return StaticAllocator(geometry, kv_bytes_per_token, max_context, weight_bytes)
    if policy == "lazy":
        return LazyAllocator(geometry, kv_bytes_per_token, weight_bytes, max_context)
    raise ValueError(f"policy must be 'static' or 'lazy', got {policy!r}")


def capacity_utilization(
    workload: Workload | str,
    kv_bytes_per_token: int,
    capacity_bytes: int,
    max_context: int | None = None,
    n_requests: int = 512,
    seed: int = 0,
    policy: Policy = "lazy",
    *,
    weight_bytes: int = 0,
    chunk_bytes: int = CHUNK_BYTES,
    preset: HardwareConfig | str = "aim-16ch",
    lengths: Sequence[int] | np.ndarray | None = None,
) -> CapacityResult:
    """FCFS batch formation under one allocation policy; capacity utilisation and batch size.

    ``n_requests`` context lengths are drawn from the workload (or given as ``lengths``) and
    admitted in order until the next one does not fit; that closes a batch, whose
    utilisation is recorded before all its requests are released, and the request that did
    not fit opens the next batch. The final batch, ended by running out of requests rather
    than memory, is not counted. Every batch snapshot also checks that a lazy request wastes
    less than one chunk (only its last chunk is partly empty).

    Parameters
    ----------
    workload : Workload or str
        Task whose context lengths are sampled.
    kv_bytes_per_token : int
        KV bytes one token adds over the whole memory (``2 * layers * kv_heads * head_dim *
        2`` for FP16).
    capacity_bytes : int
        Total memory (weights included): a whole number of ``preset`` modules.
    max_context : int, optional
        Static reservation in tokens; default the workload's ``context_window``.
    n_requests, seed : int
        Stream length and sampling seed.
    policy : {"static", "lazy"}
        Allocation policy.
    weight_bytes : int
        Memory held by model weights; KV capacity is ``capacity_bytes - weight_bytes``.
    chunk_bytes : int
        Allocation chunk (default 1 MiB).
    preset : HardwareConfig or str
        Module organisation the chunks are cut from.
    lengths : sequence of int, optional
        Explicit context lengths instead of sampling.
    """
    wl = load_workload(workload) if isinstance(workload, str) else workload
    max_ctx = wl.context_window if max_context is None else max_context
    geometry = ChunkGeometry.for_capacity(capacity_bytes, preset, chunk_bytes)
    alloc = make_allocator(
        policy, geometry, kv_bytes_per_token, weight_bytes=weight_bytes, max_context=max_ctx
    )
    if lengths is None:
        lens = sample_context_lengths(wl, n_requests, seed)
    else:
        lens = np.asarray(lengths, dtype=np.int64)
    sizes: list[int] = []
    cap_u: list[float] = []
    tot_u: list[float] = []
    res_u: list[float] = []
    max_waste = 0
    i = 0
    while i < len(lens):
        start = i
        while i < len(lens) and alloc.admit(i, int(lens[i]), raise_on_oom=False):
            i += 1
        if i == start:  # a single request does not fit an empty memory
            alloc.admit(i, int(lens[i]))  # raises OutOfMemory with the numbers
        if i == len(lens):
            break  # stream exhausted: not a capacity-bound batch
        st = alloc.stats()
        for r in alloc.requests:
            waste = alloc.request(r).waste_bytes
            if policy == "lazy" and not 0 <= waste < alloc.chunk_bytes:
                raise AssertionError(f"a lazy request wastes {waste} B >= one chunk")
            max_waste = max(max_waste, waste)
        sizes.append(st.requests)
        cap_u.append(st.capacity_utilization)
        tot_u.append(st.total_utilization)
        res_u.append(st.reserved_utilization)
        alloc.release_all()
    if not sizes:
        raise ValueError(
            f"all {len(lens)} requests fit in one batch ({policy}, {wl.name}); memory never "
            "filled up, so utilisation is not capacity-bound: use more requests"
        )
    return CapacityResult(
        workload=wl.name,
        policy=policy,
        kv_bytes_per_token=kv_bytes_per_token,
        total_bytes=geometry.total_bytes,
        weight_bytes=weight_bytes,
        capacity_bytes=alloc.capacity_bytes,
        chunk_bytes=chunk_bytes,
        max_context=max_ctx,
        batch_sizes=tuple(sizes),
        capacity_utilization=float(np.mean(cap_u)),
        total_utilization=float(np.mean(tot_u)),
        reserved_utilization=float(np.mean(res_u)),
        max_request_waste_bytes=max_waste,
    )


@dataclass(frozen=True)
class CapacitySetup:
    """A PIMphony evaluation set-up (Table I, VIII-A) for the capacity experiment.

    ``weight_bytes`` is the public parameter count x 2 B (FP16), embeddings and LM head
    included; it is approximate and only sets how much memory is left for KV.
    """

    label: str
    kv_bytes_per_token: int
    weight_bytes: int
    capacity_bytes: int
    workloads: tuple[str, ...]


_LONGBENCH = ("qmsum", "musique")
_LVEVAL = ("multifieldqa", "loogle-sd")
PAPER_SETUPS: tuple[CapacitySetup, ...] = (
    # LLM-7B-32K (Qwen1.5-7B: 32 layers, 32 KV heads, d_h 128; 7.72e9 params), 128 GB
    CapacitySetup("LLM-7B-32K, 128 GiB", kv_bytes_per_token(32, 32, 128), 15_440_000_000,
                  128 * GIB, _LONGBENCH),
    # LLM-72B-32K (Qwen1.5-72B: 80 layers, 64 KV heads, d_h 128; 72.3e9 params), 512 GB
    CapacitySetup("LLM-72B-32K, 512 GiB", kv_bytes_per_token(80, 64, 128), 144_600_000_000,
                  512 * GIB, _LONGBENCH),
    # LLM-7B-128K-GQA (Llama-3.1-8B: 32 layers, 8 KV heads, d_h 128; 8.03e9 params), 128 GB
    CapacitySetup("LLM-7B-128K-GQA, 128 GiB", kv_bytes_per_token(32, 8, 128), 16_060_000_000,
                  128 * GIB, _LVEVAL),
    # LLM-72B-128K-GQA (Llama-3.1-70B: 80 layers, 8 KV heads, d_h 128; 70.6e9 params), 512 GB
    CapacitySetup("LLM-72B-128K-GQA, 512 GiB", kv_bytes_per_token(80, 8, 128), 141_100_000_000,
                  512 * GIB, _LVEVAL),
)  # fmt: skip


def paper_comparison(
    n_requests: int = 1024, seed: int = 0, setups: Iterable[CapacitySetup] = PAPER_SETUPS
) -> list[tuple[CapacitySetup, CapacityResult, CapacityResult]]:
    """Static and lazy results for every (set-up, workload) pair of :data:`PAPER_SETUPS`."""
    rows = []
    for setup in setups:
        for name in setup.workloads:
            both = [
                capacity_utilization(
                    name,
                    setup.kv_bytes_per_token,
                    setup.capacity_bytes,
                    n_requests=n_requests,
                    seed=seed,
                    policy=p,
                    weight_bytes=setup.weight_bytes,
                )
                for p in ("static", "lazy")
            ]
            rows.append((setup, both[0], both[1]))
    return rows


def format_capacity_table(
    rows: Sequence[tuple[CapacitySetup, CapacityResult, CapacityResult]],
) -> str:
    """Markdown table of :func:`paper_comparison` rows with the paper's averages."""
    head = (
        "| set-up | workload | static util. (total) | lazy util. (total) | static util. (KV) "
        "| lazy util. (KV) | static batch | lazy batch |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for setup, s, z in rows:
        lines.append(
            f"| {setup.label} | {s.workload} | {s.total_utilization:.1%} | "
            f"{z.total_utilization:.1%} | {s.capacity_utilization:.1%} | "
            f"{z.capacity_utilization:.1%} | {s.mean_batch_size:.2f} | {z.mean_batch_size:.2f} |"
        )
    n = len(rows)
    mean = [
        sum(r[1].total_utilization for r in rows) / n,
        sum(r[2].total_utilization for r in rows) / n,
        sum(r[1].capacity_utilization for r in rows) / n,
        sum(r[2].capacity_utilization for r in rows) / n,
    ]
    lines.append(
        f"| **mean** | | **{mean[0]:.1%}** | **{mean[1]:.1%}** | {mean[2]:.1%} | {mean[3]:.1%} "
        "| | |"
    )
    lines.append("| PIMphony Fig. 19 | | 36.2% (31.0-40.5%) | 75.6% | | | | |")
    return head + "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - ``python -m models.memory`` prints the table
    print(format_capacity_table(paper_comparison()))
