"""Functional mode: execute a scheduled stream on numbers to check what the schedule computes.

Effects happen when the hardware would make them: a WR_INP writes its GBuf entry at
issue + t_WR_INP; a MAC reads its GBuf entry and row at issue and adds into its OBuf entry at
issue + t_MAC (FP32 accumulation per bank); a RD_OUT reads and clears its OBuf entry at issue
and writes the FP16 result to the GPR. Writes at a cycle land before reads at the same cycle.
A schedule that breaks a dependency therefore produces a wrong number, not just wrong timing.
"""

from __future__ import annotations

import numpy as np

from models.channel import ScheduleResult
from models.config import HardwareConfig
from models.isa import Op

__all__ = ["execute"]


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
    times = np.concatenate([issue[w] + tm.t_WR_INP, issue[m], issue[m] + tm.t_MAC, issue[r]])
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
