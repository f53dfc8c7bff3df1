"""One PIM channel: run a command stream under a scheduler and report cycles and utilisation.

The time breakdown gives every cycle of the run one cause, in this priority: ``mac_busy``
(a MAC issued in the last tCCD cycles), ``row_switch`` (precharge/activate in progress),
``io_transfer`` (a WR_INP or RD_OUT on the data bus), ``dependency_stall`` (everything else:
waiting for execution latencies, buffer hand-offs or the dispatcher). The four add up to
``cycles``, the completion cycle of the last command.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.config import HardwareConfig
from models.dcs import dcs_schedule
from models.dram import timing_vector
from models.isa import Op, validate_stream
from models.pingpong import PingPongError, pingpong_schedule, pingpong_slots
from models.static_sched import static_schedule

__all__ = ["SCHEDULERS", "BREAKDOWN_KEYS", "ScheduleResult", "run_channel"]

SCHEDULERS = ("static", "pingpong", "dcs")
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
    arrival: np.ndarray | None = None,
    validate: bool = True,
) -> ScheduleResult:
    """Schedule ``stream`` on one channel of ``cfg`` with ``scheduler``.

    ``arrival`` optionally gives, per command, the first cycle the input stream offers it
    (``valid`` gaps); by default every command is offered as early as the dispatcher takes it.
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"scheduler {scheduler!r} is unknown; allowed: {', '.join(SCHEDULERS)}")
    if validate:
        validate_stream(stream, cfg.channel)
    n = int(stream.shape[0])
    op = stream["op"].astype(np.int64)
    row = stream["row"].astype(np.int64)
    gbuf = stream["gbuf"].astype(np.int64)
    out = stream["out"].astype(np.int64)
    tv = timing_vector(cfg)
    if arrival is None:
        arrival = np.zeros(n, dtype=np.int64)
    else:
        arrival = np.asarray(arrival, dtype=np.int64)
        if arrival.shape != (n,):
            raise ValueError(f"arrival has shape {arrival.shape}, expected ({n},)")
    n_mac = int(np.count_nonzero(op == Op.MAC))
    sw_start = np.empty(max(n_mac, 1), dtype=np.int64)
    sw_end = np.empty(max(n_mac, 1), dtype=np.int64)
    extra: dict[str, int] = {}
    depth = cfg.dcs.queue_depth
    ch = cfg.channel
    if n == 0:
        issue = np.empty(0, dtype=np.int64)
        n_sw = 0
    elif scheduler == "static":
        issue, n_sw = static_schedule(op, row, arrival, tv, depth, sw_start, sw_end)
    elif scheduler == "dcs":
        issue, _, n_sw = dcs_schedule(
            op,
            gbuf,
            row,
            out,
            arrival,
            tv,
            depth,
            ch.gbuf_entries,
            ch.obuf_entries,
            sw_start,
            sw_end,
        )
    else:
        slot, _, _, n_phases, bad, code = pingpong_slots(
            op, gbuf, out, ch.gbuf_entries, ch.obuf_entries
        )
        if bad >= 0:
            why = _PINGPONG_WHY[int(code)].format(gbuf=int(gbuf[bad]), out=int(out[bad]))
            raise PingPongError(
                f"stream is not ping-pong compatible at command {bad} ({Op(op[bad]).name}): "
                f"{why}; allocate alternating buffer halves or use the dcs scheduler"
            )
        issue, n_sw, handoff = pingpong_schedule(
            op, row, slot, n_phases, arrival, tv, sw_start, sw_end
        )
        extra["handoff_stall"] = int(handoff)
        extra["phases"] = int(n_phases)
    exec_by_op = np.array([cfg.timing.t_WR_INP, cfg.timing.t_MAC, cfg.timing.t_RD_OUT])
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
