"""The on-module DPA dispatcher TLM (LoL-PIM 5.3, PIMphony VI-C), the twin of ``rtl/dpa.py``.

:class:`Dispatcher` models a command buffer, a VA2PA table per request, configuration
registers, and a pipelined decoding unit (:class:`DecoderTiming`, :func:`decode_times`) whose
output times feed a channel scheduler as ``valid_gaps`` (:func:`gaps_from_times`).
:func:`run_pipeline` is the twin of :class:`rtl.dpa.DpaPipeline`: one dispatch feeding the
DCS scheduler. See ``docs/dpa.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

import numpy as np
from pimphony.models.channel import ScheduleResult, run_channel
from pimphony.models.config import ChannelGeometry, HardwareConfig
from pimphony.models.dpa.format import (
    CONFIG_ENTRY_BYTES,
    WORD_BYTES,
    DpaCapacityError,
    DpaError,
    MappingError,
)
from pimphony.models.dpa.program import DpaProgram, expand
from pimphony.models.isa import field_widths

__all__ = [
    "DecoderTiming",
    "Dispatcher",
    "PipelineRun",
    "decode_times",
    "gaps_from_times",
    "run_pipeline",
    "va2pa_entry_bytes",
]


def va2pa_entry_bytes(geom: ChannelGeometry) -> int:
    """Bytes per VA2PA entry: one physical row number, rounded up to whole bytes."""
    return math.ceil(field_widths(geom)["row"] / 8)


@dataclass(frozen=True)
class DecoderTiming:
    """Decoding-unit timing (``docs/dpa.md``, "Dispatcher timing"); ``rtl/dpa.py`` matches it.

    One cycle for the header, then a pre-decode pass over the rest of the program: each
    ``RULE`` word costs ``rule_cycles``, every other word ``word_cycles`` (it folds the
    ``DYN_MODI`` terms into their command, drops zero-trip loops and builds the decoded
    table). After ``latency`` pipeline cycles (walk, field modification, VA2PA lookup) the
    decoded table is expanded at ``rate`` commands per cycle with zero-overhead loops.
    """

    rate: float = 1.0
    latency: int = 3
    rule_cycles: int = 1
    word_cycles: int = 1

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise DpaError(f"decode rate {self.rate!r}: must be > 0 commands per cycle")
        if self.latency < 0 or self.rule_cycles < 0 or self.word_cycles < 0:
            raise DpaError("decoder latency, rule_cycles and word_cycles must be >= 0")


def decode_times(
    n_commands: int,
    n_rules: int,
    timing: DecoderTiming | None = None,
    n_body_words: int = 0,
) -> np.ndarray:
    """Cycle, counted from the dispatch start, at which each decoded command is available.

    ``t[k] = 1 + n_rules * rule_cycles + n_body_words * word_cycles + latency +
    floor(k / rate)``, where ``n_body_words`` counts the words that are neither the header
    nor a rule (:attr:`DpaProgram.body_words`).
    """
    tm = timing or DecoderTiming()
    rate = Fraction(tm.rate).limit_denominator(1 << 16)
    start = 1 + n_rules * tm.rule_cycles + int(n_body_words) * tm.word_cycles + tm.latency
    k = np.arange(n_commands, dtype=np.int64)
    return start + (k * rate.denominator) // rate.numerator


def gaps_from_times(times: np.ndarray) -> np.ndarray:
    """``valid_gaps`` for :func:`models.channel.run_channel` from availability cycles.

    Command ``k`` is offered ``gaps[k]`` idle cycles after the cycle following the acceptance
    of command ``k - 1``; assuming each command is accepted when offered, ``gaps[0] = t[0]``
    and ``gaps[k] = max(0, t[k] - t[k-1] - 1)``. Exact when ``rate >= 1`` (every gap after
    the first is 0); with ``rate < 1`` and back-pressure from the channel it is pessimistic
    (the decoder's output queue would have run ahead).
    """
    t = np.asarray(times, dtype=np.int64)
    gaps = np.empty_like(t)
    if t.size:
        gaps[0] = t[0]
        gaps[1:] = np.maximum(0, t[1:] - t[:-1] - 1)
    return gaps


class PipelineRun(NamedTuple):
    """Outcome of :func:`run_pipeline`: the dispatched stream, its decode times, the schedule."""

    commands: np.ndarray
    """Expanded commands in program order (the dispatcher's output)."""
    times: np.ndarray
    """:func:`decode_times` of every command, from the dispatch start."""
    schedule: ScheduleResult
    """The DCS schedule of ``commands`` offered at ``times``."""


def run_pipeline(
    cfg: HardwareConfig,
    program: DpaProgram,
    t_cur: int,
    va2pa: np.ndarray | list[int] | None = None,
    timing: DecoderTiming | None = None,
) -> PipelineRun:
    """TLM twin of :class:`rtl.dpa.DpaPipeline`: one dispatch feeding the DCS scheduler.

    ``program`` is expanded for ``T_cur`` through ``va2pa`` (:func:`expand`), each command is
    offered at its :func:`decode_times` cycle (:func:`gaps_from_times`) and one channel of
    ``cfg`` schedules the stream with ``dcs`` (:func:`models.channel.run_channel`).
    """
    commands = expand(program, t_cur, va2pa)
    times = program.decode_times(commands.shape[0], timing)
    schedule = run_channel(commands, cfg, "dcs", valid_gaps=gaps_from_times(times))
    return PipelineRun(commands, times, schedule)


@dataclass
class _Request:
    t_cur: int | None = None
    tables: dict[tuple[int, str], list[int]] = field(default_factory=dict)


class Dispatcher:
    """On-module DPA dispatcher TLM (LoL-PIM Fig. 6c, PIMphony Fig. 11a).

    Buffers: the command buffer (``cfg.module.dpa_command_buffer_bytes``) holds named
    programs; the VA2PA table (``cfg.module.dpa_address_map_bytes``) holds, per request, layer
    and tensor (``K``/``V``), a list of physical rows indexed by virtual row, each entry
    :func:`va2pa_entry_bytes` bytes; the configuration buffer holds ``CONFIG_ENTRY_BYTES`` per
    request (``max_requests`` of them). The configuration registers name the current request,
    its ``T_cur`` and the layer.
    """

    def __init__(
        self,
        cfg: HardwareConfig,
        timing: DecoderTiming | None = None,
        max_requests: int = 64,
    ) -> None:
        self.cfg = cfg
        self.timing = timing or DecoderTiming()
        self.max_requests = int(max_requests)
        self.entry_bytes = va2pa_entry_bytes(cfg.channel)
        self._programs: dict[str, DpaProgram] = {}
        self._requests: dict[int, _Request] = {}
        self._owner: dict[int, tuple[int, int, str]] = {}  # physical row -> (request, layer, T)
        self.request: int | None = None
        self.layer = 0

    # -- sizes --------------------------------------------------------------------------------
    @property
    def command_buffer_bytes(self) -> int:
        """Command-buffer capacity."""
        return self.cfg.module.dpa_command_buffer_bytes

    @property
    def address_map_bytes(self) -> int:
        """VA2PA-table capacity."""
        return self.cfg.module.dpa_address_map_bytes

    @property
    def config_buffer_bytes(self) -> int:
        """Configuration-buffer size (``max_requests * CONFIG_ENTRY_BYTES``)."""
        return self.max_requests * CONFIG_ENTRY_BYTES

    @property
    def total_buffer_bytes(self) -> int:
        """All dispatcher buffers (LoL-PIM / PIMphony: < 200 KB)."""
        return self.command_buffer_bytes + self.address_map_bytes + self.config_buffer_bytes

    @property
    def command_bytes_used(self) -> int:
        """Bytes of loaded programs."""
        return sum(p.nbytes for p in self._programs.values())

    @property
    def map_entries_used(self) -> int:
        """VA2PA entries in use over all requests."""
        return len(self._owner)

    @property
    def map_bytes_used(self) -> int:
        """VA2PA bytes in use over all requests."""
        return self.map_entries_used * self.entry_bytes

    # -- command buffer -------------------------------------------------------------------------
    def load_program(self, name: str, program: DpaProgram) -> None:
        """Store ``program`` under ``name`` (replacing a program of that name)."""
        if program.cfg.channel != self.cfg.channel:
            raise DpaError(f"program {name!r} was encoded for another channel geometry")
        others = self.command_bytes_used - (
            self._programs[name].nbytes if name in self._programs else 0
        )
        if others + program.nbytes > self.command_buffer_bytes:
            raise DpaCapacityError(
                f"program {name!r} ({program.nbytes} B = {program.words.shape[0]} words of "
                f"{WORD_BYTES} B) does not fit the {self.command_buffer_bytes} B command buffer "
                f"({others} B used by {len(self._programs) - (name in self._programs)} other "
                "program(s))"
            )
        self._programs[name] = program

    def unload_program(self, name: str) -> None:
        """Free the command-buffer space of program ``name``."""
        self._program(name)
        del self._programs[name]

    @property
    def programs(self) -> dict[str, DpaProgram]:
        """Loaded programs by name."""
        return dict(self._programs)

    def _program(self, name: str | None) -> DpaProgram:
        if name is None:
            if len(self._programs) != 1:
                raise DpaError(
                    f"{len(self._programs)} programs loaded ({', '.join(self._programs) or '-'})"
                    "; name the one to dispatch"
                )
            return next(iter(self._programs.values()))
        if name not in self._programs:
            raise DpaError(
                f"no program {name!r} in the command buffer; loaded: "
                f"{', '.join(self._programs) or 'none'}"
            )
        return self._programs[name]

    # -- configuration buffer --------------------------------------------------------------------
    def _req(self, request: int, create: bool = True) -> _Request:
        if isinstance(request, bool) or not isinstance(request, int | np.integer) or request < 0:
            raise DpaError(f"request id {request!r}: must be a non-negative integer")
        request = int(request)
        if request not in self._requests:
            if not create:
                raise DpaError(f"request {request} is not known to the dispatcher")
            if len(self._requests) >= self.max_requests:
                raise DpaCapacityError(
                    f"configuration buffer full: {self.max_requests} requests x "
                    f"{CONFIG_ENTRY_BYTES} B = {self.config_buffer_bytes} B; release one first"
                )
            self._requests[request] = _Request()
        return self._requests[request]

    def set_tokens(self, request: int, t_cur: int) -> None:
        """Set the request's current token count ``T_cur`` (host update)."""
        if isinstance(t_cur, bool) or not isinstance(t_cur, int | np.integer) or t_cur < 1:
            raise DpaError(f"T_cur = {t_cur!r}: must be a positive integer")
        self._req(request).t_cur = int(t_cur)

    def advance(self, request: int, steps: int = 1) -> int:
        """Increment ``T_cur`` after decoding steps (done on-module, no host traffic)."""
        r = self._req(request, create=False)
        if r.t_cur is None:
            raise DpaError(f"request {request} has no T_cur; call set_tokens first")
        r.t_cur += int(steps)
        return r.t_cur

    def tokens(self, request: int) -> int | None:
        """The request's ``T_cur`` (``None`` if never set)."""
        return self._req(request, create=False).t_cur

    def select(self, request: int, layer: int = 0) -> None:
        """Load the configuration registers: current request and layer."""
        self._req(request, create=False)
        if layer < 0:
            raise DpaError(f"layer {layer}: must be >= 0")
        self.request, self.layer = int(request), int(layer)

    @property
    def registers(self) -> dict[str, int | None]:
        """Configuration registers: ``request``, its ``t_cur`` and ``layer``."""
        t = self._requests[self.request].t_cur if self.request in self._requests else None
        return {"request": self.request, "t_cur": t, "layer": self.layer}

    # -- VA2PA table -----------------------------------------------------------------------------
    def _check_rows(self, key: tuple[int, int, str], rows: list[int]) -> None:
        nrows = self.cfg.channel.rows_per_bank
        seen: set[int] = set()
        for v, p in enumerate(rows):
            if not 0 <= p < nrows:
                raise MappingError(
                    f"request {key[0]} layer {key[1]} {key[2]}: physical row {p} (virtual "
                    f"row {v}) outside 0..{nrows - 1}"
                )
            owner = self._owner.get(p)
            if p in seen or (owner is not None and owner != key):
                who = "itself" if p in seen else f"request {owner[0]} layer {owner[1]} {owner[2]}"
                raise MappingError(
                    f"request {key[0]} layer {key[1]} {key[2]}: physical row {p} is already "
                    f"mapped by {who}"
                )
            seen.add(p)

    def _store(self, request: int, layer: int, tensor: str, rows: list[int], append: bool) -> None:
        r = self._req(request)
        key = (int(request), int(layer), str(tensor))
        old = r.tables.get((key[1], key[2]), [])
        new = (old + rows) if append else rows
        self._check_rows(key, new)
        grow = len(new) - len(old)
        if (self.map_entries_used + grow) * self.entry_bytes > self.address_map_bytes:
            raise DpaCapacityError(
                f"VA2PA table full: request {request} layer {layer} {tensor} needs {len(new)} "
                f"entries x {self.entry_bytes} B; {self.map_bytes_used} of "
                f"{self.address_map_bytes} B already in use"
            )
        for p in old:
            del self._owner[p]
        for p in new:
            self._owner[p] = key
        r.tables[(key[1], key[2])] = list(new)

    def map_rows(self, request: int, rows: list[int], layer: int = 0, tensor: str = "K") -> None:
        """Set VA2PA[request, layer, tensor] to ``rows`` (virtual row ``v`` -> ``rows[v]``)."""
        self._store(request, layer, tensor, [int(p) for p in rows], append=False)

    def extend_rows(self, request: int, rows: list[int], layer: int = 0, tensor: str = "K") -> None:
        """Append rows for the next virtual rows (lazy allocation as the KV cache grows)."""
        self._store(request, layer, tensor, [int(p) for p in rows], append=True)

    def table(self, request: int, layer: int = 0, tensor: str = "K") -> np.ndarray:
        """A copy of VA2PA[request, layer, tensor]."""
        r = self._req(request, create=False)
        return np.array(r.tables.get((int(layer), tensor), []), dtype=np.int64)

    def release(self, request: int) -> list[int]:
        """Forget a finished request; return the physical rows it freed."""
        r = self._req(request, create=False)
        freed = [p for rows in r.tables.values() for p in rows]
        for p in freed:
            del self._owner[p]
        del self._requests[int(request)]
        if self.request == request:
            self.request = None
        return freed

    # -- decoding ------------------------------------------------------------------------------
    def dispatch(
        self, request: int | None = None, program: str | None = None, layer: int | None = None
    ) -> np.ndarray:
        """Expand ``program`` for ``request`` (default: the configuration registers)."""
        request = self.request if request is None else request
        if request is None:
            raise DpaError("no request selected; pass request= or call select()")
        layer = self.layer if layer is None else int(layer)
        prog = self._program(program)
        r = self._req(request, create=False)
        if r.t_cur is None:
            raise DpaError(f"request {request} has no T_cur; call set_tokens first")
        table = r.tables.get((layer, prog.tensor), [])
        return expand(
            prog,
            r.t_cur,
            np.asarray(table, dtype=np.int64),
            request=int(request),
            where=f"layer {layer}, {prog.tensor} cache",
        )

    def dispatch_times(
        self, request: int | None = None, program: str | None = None, layer: int | None = None
    ) -> np.ndarray:
        """Cycle (from the dispatch start) at which each command of :meth:`dispatch` is ready."""
        n = self.dispatch(request, program, layer).shape[0]
        return self._program(program).decode_times(n, self.timing)

    def dispatch_with_gaps(
        self, request: int | None = None, program: str | None = None, layer: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(stream, valid_gaps)`` ready for :func:`models.channel.run_channel`."""
        stream = self.dispatch(request, program, layer)
        times = self._program(program).decode_times(stream.shape[0], self.timing)
        return stream, gaps_from_times(times)
