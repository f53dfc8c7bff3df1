"""Functional mode: execute a scheduled stream on numbers to check what the schedule computes.

Effects happen when the hardware would make them: a WR_INP writes its GBuf entry at
issue + t_WR_INP; a MAC reads its GBuf entry and row at issue and adds into its OBuf entry at
issue + t_MAC (tCCD with ``mac_result_latency`` off; FP32 accumulation per bank); a RD_OUT
reads and clears its OBuf entry at issue and writes the FP16 result to the GPR. Writes at a
cycle land before reads at the same cycle. A schedule that breaks a dependency therefore
produces a wrong number, not just wrong timing.
"""

from __future__ import annotations

import numpy as np
from pimphony.models.channel import ScheduleResult
from pimphony.models.config import HardwareConfig
from pimphony.models.isa import OP_MAC, OP_WR_INP, Op, StreamError, describe_command, empty_stream
from pimphony.models.jit import njit

__all__ = ["DataflowCheck", "check_dataflow", "execute"]


def check_dataflow(stream: np.ndarray) -> None:
    """Raise :class:`~models.isa.StreamError` at the first command whose data means nothing.

    In program order: a stream has commands; a MAC reads a GBuf entry some earlier WR_INP
    wrote; a RD_OUT reads an OBuf entry a MAC accumulated into since it was last read; every
    accumulated entry is read out by a later RD_OUT (else the result is lost).
    """
    if stream.shape[0] == 0:
        raise StreamError("the stream has no commands")
    check = DataflowCheck(int(stream["gbuf"].max()) + 1, int(stream["out"].max()) + 1)
    check.feed(stream)
    check.finish()


class DataflowCheck:
    """:func:`check_dataflow` over a stream fed in chunks: per-entry state only."""

    def __init__(self, gbuf_entries: int, obuf_entries: int) -> None:
        self.written = np.zeros(gbuf_entries, dtype=np.bool_)
        self.last = np.full(obuf_entries, -1, dtype=np.int64)  # last command on each entry
        self.last_mac = np.zeros(obuf_entries, dtype=np.bool_)  # ... and whether a MAC
        self.last_cmd = empty_stream(obuf_entries)  # ... and the command itself
        self.first = np.full(2, -1, dtype=np.int64)  # unwritten read, empty read
        self.first_cmd = empty_stream(2)
        self.commands = 0

    def feed(self, chunk: np.ndarray) -> None:
        """Check the next ``chunk`` of the stream."""
        base = self.commands
        found = self.first.copy()
        _dataflow_scan(
            chunk["op"], chunk["gbuf"], chunk["out"], base, self.written, self.last,
            self.last_mac, self.first,
        )  # fmt: skip
        for j in np.flatnonzero(self.first != found):
            self.first_cmd[j] = chunk[self.first[j] - base]
        touched = np.flatnonzero(self.last >= base)
        self.last_cmd[touched] = chunk[self.last[touched] - base]
        self.commands += int(chunk.shape[0])

    def finish(self) -> None:
        """Raise at the first problem of the whole stream, if any."""
        if self.commands == 0:
            raise StreamError("the stream has no commands")
        problems: list[tuple[int, str, np.ndarray]] = []
        whys = (
            "reads a GBuf entry no earlier WR_INP wrote",
            "reads an OBuf entry no MAC accumulated into since its last read",
        )
        for j, why in enumerate(whys):
            if self.first[j] >= 0:
                problems.append((int(self.first[j]), why, self.first_cmd[j : j + 1]))
        lost = np.flatnonzero(self.last_mac)
        if lost.size:
            e = lost[np.argmin(self.last[lost])]
            why = "accumulates into an OBuf entry no later RD_OUT reads"
            problems.append((int(self.last[e]), why, self.last_cmd[e : e + 1]))
        if problems:
            k, why, cmd = min(problems, key=lambda p: p[0])
            raise StreamError(f"command {k} ({describe_command(cmd, 0)}) {why}")


@njit(cache=True)
def _dataflow_scan(op, gbuf, out, base, written, last, last_mac, first):
    """One chunk of :class:`DataflowCheck` (``first[0]``: the first MAC of an unwritten
    entry, ``first[1]``: the first RD_OUT of an entry with nothing accumulated)."""
    for j in range(op.shape[0]):
        k = base + j
        o = op[j]
        if o == OP_WR_INP:
            written[gbuf[j]] = True
        elif o == OP_MAC:
            if not written[gbuf[j]] and first[0] < 0:
                first[0] = k
            last[out[j]] = k
            last_mac[out[j]] = True
        else:
            if not last_mac[out[j]] and first[1] < 0:
                first[1] = k
            last[out[j]] = k
            last_mac[out[j]] = False


def execute(
    stream: np.ndarray,
    schedule: ScheduleResult,
    cfg: HardwareConfig,
    memory: np.ndarray,
    gpr: np.ndarray,
) -> np.ndarray:
    """Run ``stream`` at the cycles of ``schedule``; return the GPR output tiles.

    ``memory`` is ``(rows, banks, row_elements)`` FP16, ``gpr`` the input tiles
    ``(tiles, mac_elements)``. The result has one ``banks``-wide FP16 tile per GPR address.
    """
    ch, tm = cfg.channel, cfg.timing
    e = ch.mac_elements
    gbuf = np.zeros((ch.gbuf_entries, e), dtype=np.float32)
    obuf = np.zeros((ch.obuf_entries, ch.banks), dtype=np.float32)
    out = np.zeros((gpr.shape[0], ch.banks), dtype=np.float16)
    op = stream["op"]
    issue = schedule.issue
    # Events: (cycle, phase, command); phase 0 = a write lands, 1 = a read at issue.
    w = np.flatnonzero(op == Op.WR_INP)
    m = np.flatnonzero(op == Op.MAC)
    r = np.flatnonzero(op == Op.RD_OUT)
    times = np.concatenate([issue[w] + tm.t_WR_INP, issue[m], issue[m] + tm.t_MAC_result, issue[r]])
    phase = np.concatenate([np.zeros_like(w), np.ones_like(m), np.zeros_like(m), np.ones_like(r)])
    kind = np.concatenate(
        [np.full(w.size, 0), np.full(m.size, 1), np.full(m.size, 2), np.full(r.size, 3)]
    )
    cmd = np.concatenate([w, m, m, r])
    order = np.lexsort((cmd, phase, times))
    pending: dict[int, np.ndarray] = {}
    for idx in order:
        k, c = int(kind[idx]), int(cmd[idx])
        if k == 0:
            gbuf[stream["gbuf"][c]] = gpr[stream["gpr"][c]].astype(np.float32)
        elif k == 1:
            col = int(stream["col"][c])
            weights = memory[stream["row"][c], :, col * e : (col + 1) * e].astype(np.float32)
            pending[c] = weights @ gbuf[stream["gbuf"][c]]
        elif k == 2:
            obuf[stream["out"][c]] += pending.pop(c)
        else:
            entry = stream["out"][c]
            out[stream["gpr"][c]] = obuf[entry].astype(np.float16)
            obuf[entry] = 0.0
    return out
