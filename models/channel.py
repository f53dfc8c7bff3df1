"""One PIM channel: run a command stream under a scheduler and report cycles and utilisation.

The time breakdown gives every cycle of the run one cause, in this priority: ``mac_busy``
(a MAC issued in the last tCCD cycles), ``row_switch`` (precharge/activate in progress),
``io_transfer`` (a WR_INP or RD_OUT on the data bus), ``dependency_stall`` (everything else:
waiting for execution latencies, buffer hand-offs or the dispatcher). The four add up to
``cycles``, the completion cycle of the last command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

import numpy as np
from pimphony.models.config import HardwareConfig, Timing
from pimphony.models.dcs import (
    DCS_DEADLOCK,
    DCS_STUCK,
    dcs_room,
    dcs_run,
    dcs_schedule,
    entry_predecessors,
    new_dcs_state,
)
from pimphony.models.dram import execution_times, timing_vector
from pimphony.models.isa import DEFAULT_CHUNK, Op, describe_command, empty_stream, validate_stream
from pimphony.models.jit import Widened, njit
from pimphony.models.pingpong import (
    PP_FLIP,
    PP_HANDOFF,
    PP_LATE,
    PP_LATE_ACC,
    PP_PHASE,
    PingPongError,
    first_illegal,
    late_command_error,
    new_pingpong_state,
    pingpong_feed,
    pingpong_room,
    pingpong_schedule,
    pingpong_slots,
)
from pimphony.models.static_sched import new_static_state, static_run, static_schedule
from pimphony.models.tally import (
    TL_COUNTS,
    TL_LEN,
    TL_MODE_SWITCHES,
    TL_SWITCHES,
    new_tally,
    tally_lengths,
)

__all__ = [
    "BREAKDOWN_KEYS",
    "DEFAULT_CHUNK",
    "ChannelRun",
    "SCHEDULERS",
    "ScheduleResult",
    "Scheduler",
    "SchedulerSpec",
    "check_schedule",
    "mode_switch_count",
    "run_channel",
    "run_channel_reference",
    "run_channels",
    "static_gap_violations",
    "stream_chunks",
]

BREAKDOWN_KEYS = ("mac_busy", "io_transfer", "dependency_stall", "row_switch")

_PINGPONG_WHY = {
    1: "WR_INP to GBuf[{gbuf}] falls in a slot whose MACs read the same GBuf half",
    2: "WR_INP to GBuf[{gbuf}] cannot be prefetched before the MAC that reads it",
    3: "RD_OUT of OBuf[{out}] falls in a slot whose MACs write the same OBuf half",
    4: "RD_OUT of OBuf[{out}] overlaps the next MAC accumulating into that entry",
}


@dataclass(frozen=True)
class ScheduleResult:
    """The statistics of a channel run and, if recorded, every command's issue/completion
    cycle and every row switch (``None`` for a run that keeps statistics only)."""

    scheduler: str
    issue: np.ndarray | None
    completion: np.ndarray | None
    row_switches: np.ndarray | None  # (n, 2): start cycle, first usable cycle
    row_switch_count: int
    cycles: int
    commands: int
    counts: dict[str, int]
    mac_utilization: float
    breakdown: dict[str, int]
    extra: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready summary (no per-command arrays)."""
        return {
            "scheduler": self.scheduler,
            "cycles": self.cycles,
            "commands": self.commands,
            "counts": dict(self.counts),
            "mac_utilization": self.mac_utilization,
            "breakdown": dict(self.breakdown),
            "row_switches": self.row_switch_count,
            **self.extra,
        }


#: The schedulers' chunk kernels, compiled once per pattern of ``None`` arguments (recording
#: or not) whatever the layout of the command fields and input gaps
#: (:class:`models.jit.Widened`): no input gaps is an empty array, not ``None``, so the
#: many-channel kernels below call the same specialisation as a run without recording.
_STATIC_RUN = Widened(static_run, ("op", "row", "valid_gaps"))
_DCS_RUN = Widened(dcs_run, ("op", "gbuf", "row", "out", "valid_gaps"))
_PINGPONG_FEED = Widened(pingpong_feed, ("op", "gbuf", "row", "out", "valid_gaps"))
_NO_GAPS = np.zeros(0, dtype=np.int64)
"""``valid_gaps`` of a chunk offered without input gaps."""


class _StaticEngine:
    """The static scheduler's state across chunks (:func:`models.static_sched.static_run`)."""

    def __init__(self, cfg: HardwareConfig) -> None:
        self.state, self.history = new_static_state(cfg.dcs.queue_depth)

    def feed(self, run: ChannelRun, chunk: np.ndarray, gaps: np.ndarray) -> None:
        _STATIC_RUN(
            self.state, self.history, run.tally, chunk["op"], chunk["row"], gaps, run.tv,
            run.issue_out, run.sw_out,
        )  # fmt: skip

    def finish(self, run: ChannelRun) -> dict[str, int]:
        return {}


class _DcsEngine:
    """DCS's queues and tables across chunks (:func:`models.dcs.dcs_run`)."""

    def __init__(self, cfg: HardwareConfig) -> None:
        ch = cfg.channel
        self.n_gbuf = ch.gbuf_entries
        self.depth = cfg.dcs.queue_depth
        self.state = new_dcs_state(self.depth, ch.gbuf_entries, ch.obuf_entries)

    def _run(self, run: ChannelRun, chunk: np.ndarray, gaps: np.ndarray, final: bool) -> None:
        self.state = dcs_room(self.state, int(chunk.shape[0]))
        status = _DCS_RUN(
            *self.state, self.n_gbuf, run.tally, chunk["op"], chunk["gbuf"], chunk["row"],
            chunk["out"], gaps, run.tv, final, *run.recording,
        )  # fmt: skip
        if status == DCS_DEADLOCK:
            raise RuntimeError(DCS_STUCK)

    def feed(self, run: ChannelRun, chunk: np.ndarray, gaps: np.ndarray) -> None:
        self._run(run, chunk, gaps, False)

    def finish(self, run: ChannelRun) -> dict[str, int]:
        self._run(run, empty_stream(0), _NO_GAPS, True)
        return {}


def _check_scheduler(scheduler: object) -> None:
    """Refuse a scheduler name that is not in :data:`SCHEDULERS`."""
    if not isinstance(scheduler, str) or scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler {scheduler!r} is unknown; allowed: {', '.join(SCHEDULERS)}")


def _illegal_for_pingpong(index: int, op: int, gbuf: int, out: int, code: int) -> PingPongError:
    """The error for command ``index`` (opcode, GBuf and OBuf entry) breaking ping-pong
    legality rule ``code`` (:func:`models.pingpong.pingpong_illegal`)."""
    why = _PINGPONG_WHY[code].format(gbuf=gbuf, out=out)
    return PingPongError(
        f"stream is not ping-pong compatible at command {index} ({Op(op).name}): "
        f"{why}; allocate alternating buffer halves or use the dcs scheduler"
    )


def _concat_streams(*streams: np.ndarray) -> np.ndarray:
    """The command streams one after the other, copied as bytes (numpy copies records field
    by field otherwise, ~50x slower)."""
    out = empty_stream(sum(int(s.shape[0]) for s in streams))
    raw = out.view(np.uint8)
    at = 0
    for s in streams:
        b = np.ascontiguousarray(s).view(np.uint8)
        raw[at : at + b.size] = b
        at += b.size
    return out


class _PingPongEngine:
    """Ping-pong's slots across chunks (:func:`models.pingpong.pingpong_feed`): a slot runs
    once the next phase has started; its commands wait in a window until then, and each
    command's legality is known two phases after it."""

    def __init__(self, cfg: HardwareConfig) -> None:
        ch = cfg.channel
        self.n_gbuf, self.n_obuf = ch.gbuf_entries, ch.obuf_entries
        self.state = new_pingpong_state(ch.gbuf_entries, ch.obuf_entries)

    def _feed(self, run: ChannelRun, chunk: np.ndarray, gaps: np.ndarray, final: bool) -> None:
        self.state = pingpong_room(self.state, int(chunk.shape[0]))
        status = _PINGPONG_FEED(
            *self.state, self.n_gbuf, self.n_obuf, run.tally, chunk["op"], chunk["gbuf"],
            chunk["row"], chunk["out"], gaps, run.tv, final, *run.recording,
        )  # fmt: skip
        if status:
            raise _illegal_for_pingpong(*first_illegal(self.state))

    def feed(self, run: ChannelRun, chunk: np.ndarray, gaps: np.ndarray) -> None:
        self._feed(run, chunk, gaps, False)

    def finish(self, run: ChannelRun) -> dict[str, int]:
        if run.commands == 0:
            return {}
        self._feed(run, empty_stream(0), _NO_GAPS, True)
        st = self.state[0]
        if st[PP_LATE] >= 0:
            raise late_command_error(int(st[PP_LATE]), int(st[PP_LATE_ACC]), int(st[PP_FLIP]))
        return {"handoff_stall": int(st[PP_HANDOFF]), "phases": int(st[PP_PHASE]) + 1}


class ChannelRun:
    """One channel run fed a stream in chunks; :meth:`finish` gives the
    :class:`ScheduleResult`, equal to :func:`run_channel`'s on the whole stream wherever the
    chunks end.

    The scheduler's state (queues, tables, open row, mode, hand-off) and the statistics
    (:mod:`models.tally`) carry across chunks, so memory does not grow with the stream.
    With ``record`` (the number of commands of the whole stream) every command's issue and
    completion cycle and every row switch are kept; with ``None``, statistics only.
    """

    def __init__(
        self,
        cfg: HardwareConfig,
        scheduler: str = "dcs",
        record: int | None = None,
        validate: bool = True,
    ) -> None:
        _check_scheduler(scheduler)
        self.cfg = cfg
        self.scheduler = scheduler
        self.validate = validate
        self.tv = timing_vector(cfg)
        self.tally = new_tally()
        self.commands = 0
        self._record = record is not None
        cap = record or 0
        self.issue_out = np.full(cap, -1, dtype=np.int64)
        self.sw_out = np.zeros((cap, 2), dtype=np.int64)
        # What the DCS and ping-pong kernels write to: None keeps statistics only (compiled
        # without the writes).
        self.recording = (self.issue_out, self.sw_out) if self._record else (None, None)
        self._ops = np.zeros(cap, dtype=np.uint8)  # for the completion cycles
        self._engine = SCHEDULERS[Scheduler(scheduler)].engine(cfg)
        self._done = False

    def feed(self, chunk: np.ndarray, valid_gaps: np.ndarray | None = None) -> None:
        """Schedule the next ``chunk`` of the stream (``valid_gaps`` as in :func:`run_channel`,
        one per command of the chunk)."""
        if self._done:
            raise RuntimeError("this channel run has finished; start a new ChannelRun")
        if self.validate:
            validate_stream(chunk, self.cfg.channel, offset=self.commands)
        n = int(chunk.shape[0])
        if self._record and self.commands + n > self.issue_out.shape[0]:
            raise ValueError(f"more than the {self.issue_out.shape[0]} commands to record")
        gaps = _NO_GAPS
        if valid_gaps is not None:
            gaps = np.ascontiguousarray(valid_gaps, dtype=np.int64)
            if gaps.shape != (n,) or (gaps < 0).any():
                raise ValueError(f"valid_gaps must be {n} non-negative integers")
        if n:
            if self._ops.shape[0]:
                self._ops[self.commands : self.commands + n] = chunk["op"]
            self._engine.feed(self, chunk, gaps)
        self.commands += n

    def finish(self) -> ScheduleResult:
        """Schedule what is left and return the result."""
        if not self._done:
            self._extra = self._engine.finish(self)
            self._done = True
        result = _result(
            self.scheduler,
            self.cfg,
            self.tally,
            tally_lengths(self.tally),
            self.commands,
            self._extra,
        )
        if not self._record:
            return result
        n_sw = result.row_switch_count
        issue = self.issue_out[: self.commands]
        completion = issue + execution_times(self.cfg.timing)[self._ops[: self.commands]]
        switches = self.sw_out[:n_sw].copy()
        return replace(result, issue=issue, completion=completion, row_switches=switches)


def run_channel(
    stream: np.ndarray,
    cfg: HardwareConfig,
    scheduler: str = "dcs",
    valid_gaps: np.ndarray | None = None,
    validate: bool = True,
    record: bool = True,
) -> ScheduleResult:
    """Schedule ``stream`` on one channel of ``cfg`` with ``scheduler``.

    ``valid_gaps[k]`` idle cycles pass between accepting command ``k - 1`` (or cycle 0) and
    the input stream offering command ``k``; by default every command is offered at once.
    With ``record`` the result has every command's issue and completion cycle and every row
    switch; without, statistics only.
    """
    n = int(stream.shape[0]) if isinstance(stream, np.ndarray) else 0
    run = ChannelRun(cfg, scheduler, record=n if record else None, validate=validate)
    if valid_gaps is not None:
        valid_gaps = np.asarray(valid_gaps)
        if valid_gaps.shape != (n,):
            raise ValueError(f"valid_gaps must be {n} non-negative integers")
    for lo in range(0, n, DEFAULT_CHUNK) if n else (0,):
        gaps = None if valid_gaps is None else valid_gaps[lo : lo + DEFAULT_CHUNK]
        run.feed(stream[lo : lo + DEFAULT_CHUNK], gaps)
    return run.finish()


@njit(cache=True)
def _stats_row(tl, out, c, status):
    """Close channel ``c``'s tally into row ``c`` of ``out`` (:data:`_MANY_COLS` columns)."""
    cycles, m, mr, mri = tally_lengths(tl)
    out[c, : tl.shape[0]] = tl
    out[c, tl.shape[0]] = cycles
    out[c, tl.shape[0] + 1] = m
    out[c, tl.shape[0] + 2] = mr
    out[c, tl.shape[0] + 3] = mri
    out[c, tl.shape[0] + 4] = status


@njit(cache=True)
def _many_static(op, row, gaps, offsets, tv, depth, out):
    """Statistics of every channel's slice ``offsets[c]:offsets[c + 1]`` under static."""
    none = np.zeros(0, dtype=np.int64)
    none2 = np.zeros((0, 2), dtype=np.int64)
    for c in range(offsets.shape[0] - 1):
        lo, hi = offsets[c], offsets[c + 1]
        st, hist = new_static_state(depth)
        tl = new_tally()
        static_run(st, hist, tl, op[lo:hi], row[lo:hi], gaps[lo:hi], tv, none, none2)
        _stats_row(tl, out, c, 0)


@njit(cache=True)
def _many_dcs(op, gbuf, row, out_e, gaps, offsets, tv, depth, n_gbuf, n_obuf, final, out):
    """Statistics of every channel's slice under DCS (status 1: deadlock; ``final`` true)."""
    for c in range(offsets.shape[0] - 1):
        lo, hi = offsets[c], offsets[c + 1]
        st, queues, d_table, s_table, held = new_dcs_state(
            depth, n_gbuf, n_obuf, hi - lo + 2 * depth + 4
        )
        tl = new_tally()
        status = dcs_run(
            st, queues, d_table, s_table, held, n_gbuf, tl, op[lo:hi], gbuf[lo:hi], row[lo:hi],
            out_e[lo:hi], gaps[lo:hi], tv, final, None, None,
        )  # fmt: skip
        _stats_row(tl, out, c, status)


@njit(cache=True)
def _many_pingpong(op, gbuf, row, out_e, gaps, offsets, tv, n_gbuf, n_obuf, final, out, extra):
    """Statistics of every channel's slice under ping-pong (status 1: illegal stream, 2: a
    late command; ``extra[c]``: hand-off stall and phases; ``final`` true)."""
    for c in range(offsets.shape[0] - 1):
        lo, hi = offsets[c], offsets[c + 1]
        tl = new_tally()
        if hi == lo:
            _stats_row(tl, out, c, 0)
            continue
        state = new_pingpong_state(n_gbuf, n_obuf, hi - lo + 1)
        status = pingpong_feed(
            *state, n_gbuf, n_obuf, tl, op[lo:hi], gbuf[lo:hi], row[lo:hi], out_e[lo:hi],
            gaps[lo:hi], tv, final, None, None,
        )  # fmt: skip
        st = state[0]
        _stats_row(tl, out, c, 1 if status else (2 if st[PP_LATE] >= 0 else 0))
        extra[c, 0] = st[PP_HANDOFF]
        extra[c, 1] = st[PP_PHASE] + 1


_MANY_COLS = TL_LEN + 5
#: The many-channel kernels with their command fields and gaps typed as the chunk kernels'
#: (:data:`_DCS_RUN` and its twins), so each chunk kernel is compiled once for both callers.
_MANY_STATIC = Widened(_many_static, ("op", "row", "gaps"))
_MANY_DCS = Widened(_many_dcs, ("op", "gbuf", "row", "out_e", "gaps"))
_MANY_PINGPONG = Widened(_many_pingpong, ("op", "gbuf", "row", "out_e", "gaps"))


def run_channels(
    streams: Sequence[np.ndarray],
    cfg: HardwareConfig,
    scheduler: str = "dcs",
    valid_gaps: Sequence[np.ndarray] | None = None,
) -> list[ScheduleResult]:
    """Statistics of one run per stream (one channel each) in one compiled call: equal to
    ``run_channel(s, cfg, scheduler, record=False)`` for each, without a Python round per
    channel. A stream the scheduler refuses raises :func:`run_channel`'s error for it."""
    _check_scheduler(scheduler)
    sizes = [int(s.shape[0]) for s in streams]
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    for s in streams:
        validate_stream(s, cfg.channel)
    whole = _concat_streams(*streams)
    if valid_gaps is None:
        gaps = np.zeros(whole.shape[0], dtype=np.int64)
    else:
        if len(valid_gaps) != len(streams):
            raise ValueError(f"valid_gaps must hold one array per stream ({len(streams)})")
        gaps = np.concatenate([np.asarray(g, dtype=np.int64) for g in valid_gaps] or [[]])
        if gaps.shape != (whole.shape[0],) or (gaps < 0).any():
            raise ValueError("valid_gaps must be one non-negative integer per command")
    ch, tv = cfg.channel, timing_vector(cfg)
    out = np.zeros((len(sizes), _MANY_COLS), dtype=np.int64)
    extra = np.zeros((len(sizes), 2), dtype=np.int64)
    f = {k: whole[k] for k in ("op", "gbuf", "row", "out")}
    if scheduler == Scheduler.STATIC:
        _MANY_STATIC(f["op"], f["row"], gaps, offsets, tv, cfg.dcs.queue_depth, out)
    elif scheduler == Scheduler.DCS:
        _MANY_DCS(
            f["op"], f["gbuf"], f["row"], f["out"], gaps, offsets, tv, cfg.dcs.queue_depth,
            ch.gbuf_entries, ch.obuf_entries, True, out,
        )  # fmt: skip
    else:
        _MANY_PINGPONG(
            f["op"], f["gbuf"], f["row"], f["out"], gaps, offsets, tv, ch.gbuf_entries,
            ch.obuf_entries, True, out, extra,
        )  # fmt: skip
    results = []
    for c, n in enumerate(sizes):
        row = out[c]
        if row[TL_LEN + 4]:  # refused: raise the single-channel error
            g = None if valid_gaps is None else gaps[offsets[c] : offsets[c + 1]]
            run_channel(whole[offsets[c] : offsets[c + 1]], cfg, scheduler, g, record=False)
            raise AssertionError(f"channel {c} was refused in one call but not alone")
        x: dict[str, int] = {}
        if scheduler == Scheduler.PINGPONG and n:
            x = {"handoff_stall": int(extra[c, 0]), "phases": int(extra[c, 1])}
        results.append(_result(scheduler, cfg, row[:TL_LEN], row[TL_LEN : TL_LEN + 4], n, x))
    return results


def _result(
    scheduler: str, cfg: HardwareConfig, tl: np.ndarray, lengths, n: int, extra: dict
) -> ScheduleResult:
    """A statistics-only :class:`ScheduleResult` from a closed tally."""
    cycles, m, mr, mri = (int(x) for x in lengths)
    breakdown = {
        "mac_busy": m,
        "io_transfer": mri - mr,
        "dependency_stall": cycles - mri,
        "row_switch": mr - m,
    }
    counts = {o.name: int(tl[TL_COUNTS + o]) for o in Op}
    if cfg.timing.t_MOD > 0:
        extra = {**extra, "mode_switches": int(tl[TL_MODE_SWITCHES])}
    return _schedule_result(
        scheduler, cfg, n, cycles, counts, breakdown, int(tl[TL_SWITCHES]), extra
    )


def _schedule_result(
    scheduler: str,
    cfg: HardwareConfig,
    n: int,
    cycles: int,
    counts: dict[str, int],
    breakdown: dict[str, int],
    n_switches: int,
    extra: dict[str, int],
    recorded: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> ScheduleResult:
    """The :class:`ScheduleResult` of a run of ``n`` commands, with its MAC utilisation (the
    MACs' tCCD cycles over ``cycles``) and, if ``recorded``, its issue and completion cycles
    and row switches."""
    issue, completion, switches = recorded or (None, None, None)
    util = counts["MAC"] * cfg.timing.tCCD / cycles if cycles else 0.0
    return ScheduleResult(
        scheduler=scheduler,
        issue=issue,
        completion=completion,
        row_switches=switches,
        row_switch_count=n_switches,
        cycles=cycles,
        commands=n,
        counts=counts,
        mac_utilization=min(util, 1.0),
        breakdown=breakdown,
        extra=extra,
    )


def stream_chunks(stream: np.ndarray, chunk: int = DEFAULT_CHUNK):
    """``stream`` in consecutive slices of ``chunk`` commands (views, no copies)."""
    for lo in range(0, int(stream.shape[0]), chunk):
        yield stream[lo : lo + chunk]


def run_channel_reference(
    stream: np.ndarray,
    cfg: HardwareConfig,
    scheduler: str = "dcs",
    valid_gaps: np.ndarray | None = None,
    validate: bool = True,
) -> ScheduleResult:
    """:func:`run_channel` as whole-stream kernels and per-cycle breakdown arrays (the form
    before the streaming TLM), kept as the reference the equivalence tests and ``make bench``
    compare the streaming kernels with."""
    _check_scheduler(scheduler)
    if validate:
        validate_stream(stream, cfg.channel)
    n = int(stream.shape[0])
    op = stream["op"].astype(np.int64)
    row = stream["row"].astype(np.int64)
    gbuf = stream["gbuf"].astype(np.int64)
    out = stream["out"].astype(np.int64)
    tv = timing_vector(cfg)
    if valid_gaps is None:
        valid_gaps = np.zeros(n, dtype=np.int64)
    else:
        valid_gaps = np.asarray(valid_gaps, dtype=np.int64)
        if valid_gaps.shape != (n,) or (valid_gaps < 0).any():
            raise ValueError(f"valid_gaps must be {n} non-negative integers")
    n_mac = int(np.count_nonzero(op == Op.MAC))
    sw_start = np.empty(max(n_mac, 1), dtype=np.int64)
    sw_end = np.empty(max(n_mac, 1), dtype=np.int64)
    extra: dict[str, int] = {}
    if n == 0:
        issue, n_sw = np.empty(0, dtype=np.int64), 0
    else:
        issue, n_sw = SCHEDULERS[Scheduler(scheduler)].schedule(
            op, gbuf, row, out, valid_gaps, tv, cfg, sw_start, sw_end, extra
        )
    if cfg.timing.t_MOD > 0:
        extra["mode_switches"] = mode_switch_count(op, issue)
    exec_by_op = execution_times(cfg.timing)
    completion = issue + exec_by_op[op] if n else issue.copy()
    cycles = int(completion.max()) if n else 0
    switches = np.stack([sw_start[:n_sw], sw_end[:n_sw]], axis=1)
    breakdown = _breakdown(op, issue, switches, cycles, cfg.timing.tCCD)
    counts = {o.name: int(np.count_nonzero(op == o)) for o in Op}
    recorded = (issue, completion, switches)
    return _schedule_result(scheduler, cfg, n, cycles, counts, breakdown, n_sw, extra, recorded)


def _schedule_static(op, gbuf, row, out, gaps, tv, cfg, sw_start, sw_end, extra):
    """In program order with the static gaps (:mod:`models.static_sched`)."""
    return static_schedule(op, row, gaps, tv, cfg.dcs.queue_depth, sw_start, sw_end)


def _schedule_dcs(op, gbuf, row, out, gaps, tv, cfg, sw_start, sw_end, extra):
    """Dynamic command scheduling over per-entry dependencies (:mod:`models.dcs`)."""
    ch = cfg.channel
    issue, _, n_sw = dcs_schedule(
        op,
        gbuf,
        row,
        out,
        gaps,
        tv,
        cfg.dcs.queue_depth,
        ch.gbuf_entries,
        ch.obuf_entries,
        sw_start,
        sw_end,
    )
    return issue, n_sw


def _schedule_pingpong(op, gbuf, row, out, gaps, tv, cfg, sw_start, sw_end, extra):
    """LoL-PIM ping-pong buffer halves with hand-offs (:mod:`models.pingpong`)."""
    ch = cfg.channel
    slot, _, _, n_phases, bad, code = pingpong_slots(
        op, gbuf, out, ch.gbuf_entries, ch.obuf_entries
    )
    if bad >= 0:
        raise _illegal_for_pingpong(
            int(bad), int(op[bad]), int(gbuf[bad]), int(out[bad]), int(code)
        )
    issue, n_sw, handoff = pingpong_schedule(op, row, slot, n_phases, gaps, tv, sw_start, sw_end)
    extra["handoff_stall"] = int(handoff)
    extra["phases"] = int(n_phases)
    return issue, n_sw


def _coverage(starts: np.ndarray, ends: np.ndarray, cycles: int) -> np.ndarray:
    """Boolean mask of cycles in ``[0, cycles)`` covered by the half-open intervals."""
    diff = np.zeros(cycles + 1, dtype=np.int64)
    np.add.at(diff, np.clip(starts, 0, cycles), 1)
    np.add.at(diff, np.clip(ends, 0, cycles), -1)
    return np.cumsum(diff[:cycles]) > 0


def _breakdown(
    op: np.ndarray, issue: np.ndarray, switches: np.ndarray, cycles: int, tccd: int
) -> dict[str, int]:
    if cycles == 0:
        return dict.fromkeys(BREAKDOWN_KEYS, 0)
    is_mac = op == Op.MAC
    mac = _coverage(issue[is_mac], issue[is_mac] + tccd, cycles)
    io = _coverage(issue[~is_mac], issue[~is_mac] + tccd, cycles)
    row = _coverage(switches[:, 0], switches[:, 1], cycles)
    mac_busy = int(mac.sum())
    row_only = row & ~mac
    io_only = io & ~mac & ~row
    result = {
        "mac_busy": mac_busy,
        "io_transfer": int(io_only.sum()),
        "row_switch": int(row_only.sum()),
    }
    result["dependency_stall"] = cycles - sum(result.values())
    return {k: result[k] for k in BREAKDOWN_KEYS}


def mode_switch_count(op: np.ndarray, issue: np.ndarray) -> int:
    """TMODs a schedule needs: class changes (MAC vs WR_INP/RD_OUT) in issue order, from
    compute mode."""
    if op.size == 0:
        return 0
    cls = (op[np.argsort(issue, kind="stable")] != Op.MAC).astype(np.int64)
    return int(cls[0] + np.count_nonzero(np.diff(cls)))


def static_gap_violations(op: np.ndarray, issue: np.ndarray, timing: Timing) -> np.ndarray:
    """Mask of the commands issued too soon after their predecessor in program order.

    The static gap (``models.static_sched.static_gap``): tCCD after a command of the same
    opcode, else the predecessor's execution time. ``op`` and ``issue`` are int64 arrays.
    """
    late = np.zeros(op.size, dtype=bool)
    if op.size > 1:
        gap = np.where(op[1:] == op[:-1], timing.tCCD, execution_times(timing)[op[:-1]])
        late[1:] = issue[1:] < issue[:-1] + gap
    return late


def check_schedule(
    stream: np.ndarray, issue: np.ndarray, cfg: HardwareConfig, scheduler: str
) -> list[str]:
    """Rules an issue schedule breaks (empty if none), e.g. one recorded under back-pressure.

    Checks every scheduler's invariants: each command issued once, at most one per cycle, the
    data bus and MAC pipeline spacing. Then, per ``scheduler`` (rules of
    ``docs/scheduling.md``):

    - ``static``: program order and the static gaps;
    - ``pingpong``: no command issues before every command of an earlier slot has completed
      (hand-off); inside a slot the I/O commands issue in program order with the static gaps
      and the MACs in program order; and the per-entry dependencies the slots guarantee (MAC
      after the WR_INP of its GBuf entry, RD_OUT after the MAC writing its entry, and the
      reverse hazards);
    - ``dcs``: program order within each queue and every per-entry dependency (expirations,
      is-MAC).

    With ``t_MOD > 0``, a command whose class differs from the previously issued one's (the
    first: from compute mode) issues at least ``t_MOD + 1`` cycles after it (the TMOD takes a
    cycle of the command bus). Row timing is not checked here. Each returned line names the
    first offending command.
    """
    tm = cfg.timing
    op = stream["op"].astype(np.int64)
    issue = np.asarray(issue, dtype=np.int64)
    problems: list[str] = []

    def report(mask: np.ndarray, what: str) -> None:
        bad = np.flatnonzero(mask)
        if bad.size:
            k = int(bad[0])
            problems.append(
                f"{what}: first at command #{k} ({describe_command(stream, k)}, issued at "
                f"{int(issue[k])}), {bad.size} in all"
            )

    _check_scheduler(scheduler)
    report(issue < 0, "never issued")
    if problems or op.size == 0:
        return problems
    order = np.argsort(issue, kind="stable")
    same_cycle = np.zeros(op.size, dtype=bool)
    same_cycle[order[1:]] = np.diff(issue[order]) == 0
    report(same_cycle, "two commands in one cycle")
    is_mac = op == Op.MAC
    for mask, name in ((is_mac, "MAC pipeline"), (~is_mac, "data bus")):
        idx = np.flatnonzero(mask)
        t = np.sort(issue[idx])
        gap = np.zeros(idx.size, dtype=bool)
        gap[1:] = np.diff(t) < tm.tCCD
        report(np.isin(issue, t[gap]) & mask, f"{name} spacing below tCCD")
    if tm.t_MOD > 0:
        cls = (op != Op.MAC).astype(np.int64)
        c_ord, t_ord = cls[order], issue[order]
        prev_cls = np.concatenate([[0], c_ord[:-1]])
        prev_t = np.concatenate([[-1], t_ord[:-1]])
        early = np.zeros(op.size, dtype=bool)
        early[order] = (c_ord != prev_cls) & (t_ord < prev_t + 1 + tm.t_MOD)
        report(early, "mode switch shorter than t_MOD")
    SCHEDULERS[Scheduler(scheduler)].check(stream, issue, cfg, report)
    return problems


def _check_static(stream: np.ndarray, issue: np.ndarray, cfg: HardwareConfig, report) -> None:
    """The static rules of :func:`check_schedule`: program order and the static gaps."""
    op = stream["op"].astype(np.int64)
    report(static_gap_violations(op, issue, cfg.timing), "static gap or program order broken")


def _check_dcs(stream: np.ndarray, issue: np.ndarray, cfg: HardwareConfig, report) -> None:
    """The DCS rules of :func:`check_schedule`: queue order and per-entry dependencies."""
    tm, ch = cfg.timing, cfg.channel
    op = stream["op"].astype(np.int64)
    is_mac = op == Op.MAC
    for mask, name in ((is_mac, "compute queue"), (~is_mac, "I/O queue")):
        idx = np.flatnonzero(mask)
        out_of_order = np.zeros(op.size, dtype=bool)
        out_of_order[idx[1:]] = np.diff(issue[idx]) <= 0
        report(out_of_order, f"{name} out of program order")
    prev_g, prev_o = entry_predecessors(
        op,
        stream["gbuf"].astype(np.int64),
        stream["out"].astype(np.int64),
        ch.gbuf_entries,
        ch.obuf_entries,
    )
    has_g = prev_g >= 0
    g_exp = np.where(op[prev_g] == Op.WR_INP, tm.t_WR_INP, tm.tCCD)
    report(has_g & (issue < issue[prev_g] + g_exp), "GBuf dependency broken")
    has_o = prev_o >= 0
    o_exp = np.where(op[prev_o] == Op.MAC, np.where(is_mac, tm.tCCD, tm.t_MAC_result), tm.t_RD_OUT)
    report(has_o & (issue < issue[prev_o] + o_exp), "OBuf dependency broken")


def _check_pingpong(stream: np.ndarray, issue: np.ndarray, cfg: HardwareConfig, report) -> None:
    """The ping-pong rules of :func:`check_schedule`, reported through ``report``."""
    tm, ch = cfg.timing, cfg.channel
    op = stream["op"].astype(np.int64)
    gbuf = stream["gbuf"].astype(np.int64)
    out = stream["out"].astype(np.int64)
    is_mac = op == Op.MAC
    exec_by_op = execution_times(tm)
    completion = issue + exec_by_op[op]
    slot = pingpong_slots(op, gbuf, out, ch.gbuf_entries, ch.obuf_entries)[0] + 1
    # Hand-off: the latest completion of every slot before each command's slot.
    done = np.full(int(slot.max()) + 2, -1, dtype=np.int64)
    np.maximum.at(done, slot + 1, completion)
    report(issue < np.maximum.accumulate(done)[slot], "issued before the hand-off")
    for mask, name in ((is_mac, "compute queue"), (~is_mac, "I/O queue")):
        idx = np.flatnonzero(mask)
        idx = idx[np.argsort(slot[idx], kind="stable")]  # per slot, in program order
        same = slot[idx[:-1]] == slot[idx[1:]]
        late = np.zeros(op.size, dtype=bool)
        late[idx[1:][same & static_gap_violations(op[idx], issue[idx], tm)[1:]]] = True
        report(late, f"{name} order or static gap broken inside a slot")
    prev_g, prev_o = entry_predecessors(op, gbuf, out, ch.gbuf_entries, ch.obuf_entries)
    pg = np.where(prev_g >= 0, prev_g, 0)
    po = np.where(prev_o >= 0, prev_o, 0)
    raw_g = (prev_g >= 0) & is_mac & (op[pg] == Op.WR_INP)
    report(raw_g & (issue < issue[pg] + tm.t_WR_INP), "MAC before its GBuf tile was written")
    war_g = (prev_g >= 0) & (op == Op.WR_INP) & (op[pg] == Op.MAC)
    report(war_g & (issue < issue[pg] + tm.tCCD), "WR_INP overwrote a tile before its MAC")
    raw_o = (prev_o >= 0) & (op == Op.RD_OUT) & (op[po] == Op.MAC)
    report(raw_o & (issue < issue[po] + tm.t_MAC_result), "RD_OUT before its MAC result")
    war_o = (prev_o >= 0) & is_mac & (op[po] == Op.RD_OUT)
    report(war_o & (issue < issue[po] + tm.t_RD_OUT), "MAC into an entry still draining")


class Scheduler(StrEnum):
    """The channel command schedulers (``docs/scheduling.md``)."""

    STATIC = "static"
    PINGPONG = "pingpong"
    DCS = "dcs"


@dataclass(frozen=True)
class SchedulerSpec:
    """How one scheduler schedules a stream, and the extra rules its schedules obey."""

    schedule: Callable[..., tuple[np.ndarray, int]]
    check: Callable[..., None]
    engine: Callable[[HardwareConfig], object]


#: The schedulers, in the order reports list them (the baseline first).
SCHEDULERS: dict[Scheduler, SchedulerSpec] = {
    Scheduler.STATIC: SchedulerSpec(_schedule_static, _check_static, _StaticEngine),
    Scheduler.PINGPONG: SchedulerSpec(_schedule_pingpong, _check_pingpong, _PingPongEngine),
    Scheduler.DCS: SchedulerSpec(_schedule_dcs, _check_dcs, _DcsEngine),
}
