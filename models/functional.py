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

from models.channel import ScheduleResult
from models.config import HardwareConfig
from models.isa import Op, StreamError, describe_command

__all__ = ["check_dataflow", "execute"]


def check_dataflow(stream: np.ndarray) -> None:
    """Raise :class:`~models.isa.StreamError` at the first command whose data means nothing.

    In program order: a stream has commands; a MAC reads a GBuf entry some earlier WR_INP
    wrote; a RD_OUT reads an OBuf entry a MAC accumulated into since it was last read; every
    accumulated entry is read out by a later RD_OUT (else the result is lost).
    """
    n = int(stream.shape[0])
    if n == 0:
        raise StreamError("the stream has no commands")
    op = stream["op"].astype(np.int64)
    idx = np.arange(n)
    problems: list[tuple[int, str]] = []
    writes = op == Op.WR_INP
    gbuf = stream["gbuf"].astype(np.int64)
    first_write = np.full(int(gbuf.max()) + 1, n, dtype=np.int64)
    np.minimum.at(first_write, gbuf[writes], idx[writes])
    bad = np.flatnonzero((op == Op.MAC) & (idx < first_write[gbuf]))
    if bad.size:
        problems.append((int(bad[0]), "reads a GBuf entry no earlier WR_INP wrote"))
    touch = np.flatnonzero((op == Op.MAC) | (op == Op.RD_OUT))
    if touch.size:
        out = stream["out"].astype(np.int64)[touch]
        order = touch[np.lexsort((touch, out))]  # per OBuf entry, in program order
        entry = stream["out"].astype(np.int64)[order]
        is_mac = op[order] == Op.MAC
        same = np.zeros(order.size, dtype=bool)
        same[1:] = entry[1:] == entry[:-1]
        prev_mac = np.zeros(order.size, dtype=bool)
        prev_mac[1:] = is_mac[:-1]
        empty_read = ~is_mac & ~(same & prev_mac)
        if empty_read.any():
            k = int(order[np.flatnonzero(empty_read)].min())
            problems.append((k, "reads an OBuf entry no MAC accumulated into since its last read"))
        last = np.ones(order.size, dtype=bool)
        last[:-1] = entry[1:] != entry[:-1]
        lost = is_mac & last
        if lost.any():
            k = int(order[np.flatnonzero(lost)].min())
            problems.append((k, "accumulates into an OBuf entry no later RD_OUT reads"))
    if problems:
        k, why = min(problems)
        raise StreamError(f"command {k} ({describe_command(stream, k)}) {why}")


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
