"""One PIM channel: run a command stream under a scheduler and report cycles and utilisation.

The time breakdown gives every cycle of the run one cause, in this priority: ``mac_busy``
(a MAC issued in the last tCCD cycles), ``row_switch`` (precharge/activate in progress),
``io_transfer`` (a WR_INP or RD_OUT on the data bus), ``dependency_stall`` (everything else:
waiting for execution latencies, buffer hand-offs or the dispatcher). The four add up to
``cycles``, the completion cycle of the last command.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from models.config import HardwareConfig, Timing
from models.dcs import dcs_schedule, entry_predecessors
from models.dram import execution_times, timing_vector
from models.isa import Op, describe_command, validate_stream
from models.pingpong import PingPongError, pingpong_schedule, pingpong_slots
from models.static_sched import static_schedule

__all__ = [
    "BREAKDOWN_KEYS",
    "SCHEDULERS",
    "ScheduleResult",
    "Scheduler",
    "SchedulerSpec",
    "check_schedule",
    "mode_switch_count",
    "run_channel",
    "static_gap_violations",
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
    """Issue/completion cycles of every command and the derived statistics."""

    scheduler: str
    issue: np.ndarray
    completion: np.ndarray
    row_switches: np.ndarray  # (n, 2): start cycle, first usable cycle
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
            "row_switches": int(self.row_switches.shape[0]),
            **self.extra,
        }


def run_channel(
    stream: np.ndarray,
    cfg: HardwareConfig,
    scheduler: str = "dcs",
    valid_gaps: np.ndarray | None = None,
    validate: bool = True,
) -> ScheduleResult:
    """Schedule ``stream`` on one channel of ``cfg`` with ``scheduler``.

    ``valid_gaps[k]`` idle cycles pass between accepting command ``k - 1`` (or cycle 0) and
    the input stream offering command ``k``; by default every command is offered at once.
    """
    if not isinstance(scheduler, str) or scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler {scheduler!r} is unknown; allowed: {', '.join(SCHEDULERS)}")
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
    util = n_mac * cfg.timing.tCCD / cycles if cycles else 0.0
    return ScheduleResult(
        scheduler=scheduler,
        issue=issue,
        completion=completion,
        row_switches=switches,
        cycles=cycles,
        commands=n,
        counts=counts,
        mac_utilization=min(util, 1.0),
        breakdown=breakdown,
        extra=extra,
    )


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
        why = _PINGPONG_WHY[int(code)].format(gbuf=int(gbuf[bad]), out=int(out[bad]))
        raise PingPongError(
            f"stream is not ping-pong compatible at command {bad} ({Op(op[bad]).name}): "
            f"{why}; allocate alternating buffer halves or use the dcs scheduler"
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

    if not isinstance(scheduler, str) or scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler {scheduler!r} is unknown; allowed: {', '.join(SCHEDULERS)}")
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


#: The schedulers, in the order reports list them (the baseline first).
SCHEDULERS: dict[Scheduler, SchedulerSpec] = {
    Scheduler.STATIC: SchedulerSpec(_schedule_static, _check_static),
    Scheduler.PINGPONG: SchedulerSpec(_schedule_pingpong, _check_pingpong),
    Scheduler.DCS: SchedulerSpec(_schedule_dcs, _check_dcs),
}
