"""LibraPIM Dual-Path Execution (DEX): bank slicing, as a cycle-exact transaction-level model.

Each bank is split by slicing logic (LibraPIM 4.2, 5.4) into a **KV partition**, which the
all-bank PIM MACs read, and a **weight partition**, which host (xPU) reads use. With slicing
(``sliced=True``) each partition has its own open row; the PIM row and the host rows never
disturb each other. The **baseline** (``sliced=False``) has one row buffer per bank, so PIM
and host reads own the banks exclusively: handing the banks over precharges every open row.

Inputs are two streams:

- a PIM command stream (:data:`models.isa.COMMAND_DTYPE`; e.g.
  ``compiler.kernels.compile_kernel(...).commands``), run with the static-scheduler rules of
  ``models/static_sched.py``; a MAC's ``row`` is a row of the KV partition;
- a host read stream (:data:`HOST_READ_DTYPE`): ``bank``, ``row`` (a row of that bank's
  weight partition), ``col`` (a 32 B column) and ``arrival`` (the first cycle the request is
  offered to the controller), in arrival order.

Both share one column command bus (one command per cycle) and one data bus (WR_INP, RD_OUT
and host reads each hold it for tCCD). The full per-cycle contract is in ``docs/dex.md``;
:func:`run_bank_slice` implements it and ``rtl/bank_slice.py`` matches it cycle for cycle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from pimphony.models.channel import static_gap_violations
from pimphony.models.config import HardwareConfig
from pimphony.models.dram import (
    NEVER,
    TV_CCD,
    TV_SPAN,
    execution_times,
    open_row,
    precharge_done,
    timing_vector,
)
from pimphony.models.errors import PimphonyError
from pimphony.models.isa import OP_MAC, Op, StreamError, validate_stream
from pimphony.models.jit import njit
from pimphony.models.static_sched import static_gap

__all__ = [
    "HOST_READ_DTYPE",
    "SOURCE_HOST",
    "SOURCE_PIM",
    "SliceConfig",
    "SliceError",
    "SliceResult",
    "check_bank_slice",
    "empty_host_reads",
    "make_host_reads",
    "run_bank_slice",
    "validate_host_reads",
]

HOST_READ_DTYPE = np.dtype([("bank", "u2"), ("row", "u4"), ("col", "u2"), ("arrival", "i8")])
"""One host read request: bank, weight-partition row, column, arrival cycle."""

SOURCE_PIM, SOURCE_HOST = 0, 1
"""Source tag of an issued operation (the RTL's ``src`` output field)."""

_MAX_CYCLES = 1 << 40


class SliceError(PimphonyError, ValueError):
    """A slicing configuration or a host read stream is invalid."""


@dataclass(frozen=True)
class SliceConfig:
    """Bank-slicing parameters (validated on construction).

    Parameters
    ----------
    sliced : bool
        ``True``: DEX, a KV and a weight partition with their own open rows. ``False``: the
        baseline, one row buffer per bank, PIM and host reads exclusive.
    subarray_groups : int
        Segments the segregation logic can cut a bank into (LibraPIM 5.4 fine-grained
        partitioning); must divide ``rows_per_bank``.
    kv_groups : int
        Segments given to the KV partition, ``1 .. subarray_groups - 1``; the split ratio is
        ``kv_groups : subarray_groups - kv_groups`` (default 4 : 4, equal halves).
    host_queue_depth : int
        Host read requests the controller holds; it activates rows for all of them ahead of
        their turn on the data bus (LibraPIM 4.3, inter-bank).
    """

    sliced: bool = True
    subarray_groups: int = 8
    kv_groups: int = 4
    host_queue_depth: int = 8

    def __post_init__(self) -> None:
        if not isinstance(self.sliced, bool | np.bool_):
            raise SliceError(f"sliced = {self.sliced!r}: must be True or False")
        for name, low in (("subarray_groups", 2), ("kv_groups", 1), ("host_queue_depth", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
                raise SliceError(f"{name} = {value!r}: must be an integer >= {low}")
        if self.kv_groups >= self.subarray_groups:
            raise SliceError(
                f"kv_groups = {self.kv_groups}: must be < subarray_groups = "
                f"{self.subarray_groups} (the weight partition needs at least one group)"
            )
        if self.host_queue_depth > 64:
            raise SliceError(
                f"host_queue_depth = {self.host_queue_depth}: must be <= 64 (every entry is "
                "compared with every other each cycle)"
            )

    def replace(self, **changes) -> SliceConfig:
        """A validated copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def check(self, cfg: HardwareConfig) -> None:
        """Raise :class:`SliceError` if the split does not fit ``cfg``'s banks."""
        rows = cfg.channel.rows_per_bank
        if rows % self.subarray_groups:
            raise SliceError(
                f"subarray_groups = {self.subarray_groups}: must divide rows_per_bank = {rows} "
                f"(preset {cfg.name})"
            )

    def kv_rows(self, cfg: HardwareConfig) -> int:
        """Rows per bank in the KV partition (MAC rows ``0 .. kv_rows - 1``)."""
        self.check(cfg)
        return cfg.channel.rows_per_bank // self.subarray_groups * self.kv_groups

    def weight_rows(self, cfg: HardwareConfig) -> int:
        """Rows per bank in the weight partition (host rows ``0 .. weight_rows - 1``)."""
        return cfg.channel.rows_per_bank - self.kv_rows(cfg)

    def to_dict(self) -> dict:
        """JSON-ready fields."""
        return dataclasses.asdict(self)


def empty_host_reads(n: int) -> np.ndarray:
    """A zeroed host read stream of ``n`` requests."""
    return np.zeros(n, dtype=HOST_READ_DTYPE)


def make_host_reads(requests: list[tuple[int, int, int, int]]) -> np.ndarray:
    """Host read stream from ``(bank, row, col, arrival)`` tuples."""
    s = empty_host_reads(len(requests))
    for i, req in enumerate(requests):
        if len(req) != 4:
            raise SliceError(
                f"host read {i}: expected (bank, row, col, arrival), got {tuple(req)!r}"
            )
        for name, value in zip(("bank", "row", "col", "arrival"), req, strict=True):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
                raise SliceError(
                    f"host read {i}: {name} = {value!r} must be a non-negative integer"
                )
            s[name][i] = value
    return s


def validate_host_reads(
    host: np.ndarray, cfg: HardwareConfig, slicing: SliceConfig | None = None
) -> None:
    """Raise :class:`SliceError` naming the first bad request and field."""
    slicing = slicing or SliceConfig()
    if not isinstance(host, np.ndarray) or host.dtype != HOST_READ_DTYPE or host.ndim != 1:
        raise SliceError(
            f"host reads must be a 1-D numpy array of dtype {HOST_READ_DTYPE}, got "
            f"{getattr(host, 'dtype', type(host).__name__)} (build one with make_host_reads)"
        )
    limits = {
        "bank": cfg.channel.banks,
        "row": slicing.weight_rows(cfg),
        "col": cfg.channel.columns_per_row,
    }
    for name, limit in limits.items():
        bad = np.flatnonzero(host[name] >= limit)
        if bad.size:
            i = int(bad[0])
            where = " (weight-partition rows)" if name == "row" else ""
            raise SliceError(
                f"host read {i}: {name} = {int(host[name][i])} must be < {limit}{where}"
            )
    arrival = host["arrival"]
    bad = np.flatnonzero(arrival < 0)
    if bad.size:
        i = int(bad[0])
        raise SliceError(f"host read {i}: arrival = {int(arrival[i])} must be >= 0")
    bad = np.flatnonzero(np.diff(arrival) < 0)
    if bad.size:
        i = int(bad[0]) + 1
        raise SliceError(
            f"host read {i}: arrival = {int(arrival[i])} is before request {i - 1}'s "
            f"({int(arrival[i - 1])}); requests must be in arrival order"
        )


def _validate_pim(pim: np.ndarray, cfg: HardwareConfig, slicing: SliceConfig) -> None:
    try:
        validate_stream(pim, cfg.channel)
    except StreamError as exc:
        raise SliceError(f"PIM stream: {exc}") from None
    kv = slicing.kv_rows(cfg)
    bad = np.flatnonzero((pim["op"] == Op.MAC) & (pim["row"] >= kv))
    if bad.size:
        i = int(bad[0])
        raise SliceError(
            f"PIM command {i} (MAC): row = {int(pim['row'][i])} must be < {kv} (KV-partition "
            f"rows: kv_groups {slicing.kv_groups} of {slicing.subarray_groups} subarray groups)"
        )


@dataclass(frozen=True)
class SliceResult:
    """Issue cycles and statistics of one bank-slicing run.

    ``mac_utilization`` is MACs x tCCD over ``pim_cycles`` (the last PIM completion);
    ``host_bytes_per_cycle`` is the bytes read over the host span (first arrival to last
    read completion); ``host_gbps`` the same at the preset clock.
    """

    sliced: bool
    pim_issue: np.ndarray
    host_issue: np.ndarray
    cycles: int
    pim_cycles: int
    host_span: int
    macs: int
    mac_utilization: float
    host_reads: int
    host_bytes: int
    host_bytes_per_cycle: float
    host_gbps: float
    host_latency_mean: float
    pim_row_switches: int
    host_row_switches: int
    mode_switches: int

    @property
    def row_switches(self) -> int:
        """All row openings: PIM all-bank activations plus host single-bank activations."""
        return self.pim_row_switches + self.host_row_switches

    def to_dict(self) -> dict:
        """JSON-ready summary (no per-command arrays)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del d["pim_issue"], d["host_issue"]
        d["row_switches"] = self.row_switches
        return d


@njit(cache=True)
def _slice_kernel(p_op, p_row, p_gaps, h_bank, h_row, h_arr, tv, depth, hq, n_banks, sliced):
    """The per-cycle contract of ``docs/dex.md``, skipping cycles in which nothing happens.

    Every decision in cycle ``t`` reads the state at the start of ``t``; its effects are
    visible from ``t + 1``. Returns issue cycles of both streams, the counters and a status
    (0 ok, 1 no progress possible).
    """
    n_p = p_op.shape[0]
    n_h = h_bank.shape[0]
    tccd = tv[TV_CCD]
    tv_bank = tv.copy()  # a host activation opens a row in one bank: one ACT, no span
    tv_bank[TV_SPAN] = 0
    p_acc = np.full(n_p, -1, dtype=np.int64)
    p_issue = np.full(n_p, -1, dtype=np.int64)
    h_issue = np.full(n_h, -1, dtype=np.int64)
    n_pa = 0  # PIM commands accepted
    n_pi = 0  # PIM commands issued (index of the FIFO head)
    p_prev = -1  # cycle of the last PIM accept
    last_op = -1
    last_pim = NEVER
    pim_row = -1  # open KV row in all banks (-1: closed)
    pim_ready = 0
    pim_act = NEVER
    last_mac = NEVER
    n_ha = 0  # host requests accepted
    n_hi = 0  # host requests issued (index of the queue head)
    h_prev = -1
    brow = np.full(n_banks, -1, dtype=np.int64)  # open weight row per bank
    bready = np.zeros(n_banks, dtype=np.int64)
    bact = np.full(n_banks, NEVER, dtype=np.int64)
    brd = np.full(n_banks, NEVER, dtype=np.int64)
    seen = np.full(n_banks, -1, dtype=np.int64)
    host_act_max = NEVER
    host_rd_max = NEVER
    avail = 0  # baseline: first cycle an ACT may follow the last hand-over precharge
    owner = 0  # baseline: 0 PIM owns the banks, 1 the host does
    last_xfer = NEVER
    n_pim_sw = 0
    n_host_sw = 0
    n_mode_sw = 0
    t = 0
    while n_pi < n_p or n_hi < n_h:
        if t > _MAX_CYCLES:
            return p_issue, h_issue, n_pim_sw, n_host_sw, n_mode_sw, 1
        acted = False
        hq_n = n_ha - n_hi
        p_level = n_pa - n_pi
        head_ok = n_pi < n_pa and p_acc[n_pi] < t
        head_mac = head_ok and p_op[n_pi] == OP_MAC
        if sliced:
            pim_may = True
            host_may = True
        else:
            pim_may = owner == 0 and hq_n == 0
            host_may = owner == 1
        sw_host = (not sliced) and owner == 0 and hq_n > 0
        sw_pim = (not sliced) and owner == 1 and hq_n == 0 and head_mac

        # Issue (one column command): the PIM head first, else the host head.
        pim_go = False
        if head_ok:
            k = n_pi
            ok = True
            if last_op >= 0:
                ok = t >= last_pim + static_gap(last_op, p_op[k], tv)
            if ok:
                if p_op[k] == OP_MAC:
                    ok = pim_may and pim_row == p_row[k] and t >= pim_ready
                else:
                    ok = t >= last_xfer + tccd
            pim_go = ok
        host_go = False
        if not pim_go and hq_n > 0 and host_may:
            b = h_bank[n_hi]
            host_go = brow[b] == h_row[n_hi] and t >= bready[b] and t >= last_xfer + tccd

        # Row preparation: the PIM head MAC's KV row in all banks.
        if head_mac and pim_may and pim_row != p_row[n_pi]:
            if pim_row >= 0:
                _, pim_act, pim_ready = open_row(t, pim_row, pim_act, last_mac, tv)
            else:
                _, pim_act, pim_ready = open_row(max(t, avail), -1, pim_act, last_mac, tv)
            pim_row = p_row[n_pi]
            n_pim_sw += 1
            acted = True
        # Row preparation: per bank, the oldest queued host request's weight row.
        if host_may:
            for j in range(n_hi, n_ha):
                b = h_bank[j]
                if seen[b] == t:
                    continue
                seen[b] = t
                if brow[b] != h_row[j]:
                    t_req = t if brow[b] >= 0 else max(t, avail)
                    _, bact[b], bready[b] = open_row(t_req, brow[b], bact[b], brd[b], tv_bank)
                    brow[b] = h_row[j]
                    host_act_max = max(host_act_max, bact[b])
                    n_host_sw += 1
                    acted = True
        # Baseline hand-over: precharge everything the other side has open.
        if sw_host:
            if pim_row >= 0:
                avail = precharge_done(t, pim_act, last_mac, tv)
            pim_row = -1
            owner = 1
            n_mode_sw += 1
            acted = True
        elif sw_pim:
            any_open = False
            for b in range(n_banks):
                if brow[b] >= 0:
                    any_open = True
                brow[b] = -1
            if any_open:
                avail = precharge_done(t, host_act_max, host_rd_max, tv)
            owner = 0
            n_mode_sw += 1
            acted = True

        if pim_go:
            k = n_pi
            p_issue[k] = t
            last_op = p_op[k]
            last_pim = t
            if p_op[k] == OP_MAC:
                last_mac = t
            else:
                last_xfer = t
            n_pi += 1
            acted = True
        elif host_go:
            b = h_bank[n_hi]
            h_issue[n_hi] = t
            brd[b] = t
            host_rd_max = t
            last_xfer = t
            n_hi += 1
            acted = True

        # Accept at most one command from each input stream.
        if n_pa < n_p and p_level < depth and t >= p_prev + 1 + p_gaps[n_pa]:
            p_acc[n_pa] = t
            p_prev = t
            n_pa += 1
            acted = True
        if n_ha < n_h and hq_n < hq and t >= max(h_arr[n_ha], h_prev + 1):
            h_prev = t
            n_ha += 1
            acted = True

        if acted:
            t += 1
            continue
        # Nothing happened: only time thresholds can change a decision. Jump to the next.
        nxt = _MAX_CYCLES + 1
        if n_pa < n_p and p_level < depth:
            nxt = min(nxt, p_prev + 1 + p_gaps[n_pa])
        if n_ha < n_h and hq_n < hq:
            nxt = min(nxt, max(h_arr[n_ha], h_prev + 1))
        if head_ok:
            k = n_pi
            if last_op >= 0:
                t_gap = last_pim + static_gap(last_op, p_op[k], tv)
                if t_gap > t:
                    nxt = min(nxt, t_gap)
            if pim_ready > t:
                nxt = min(nxt, pim_ready)
        if last_xfer + tccd > t:
            nxt = min(nxt, last_xfer + tccd)
        if hq_n > 0 and bready[h_bank[n_hi]] > t:
            nxt = min(nxt, bready[h_bank[n_hi]])
        if nxt <= t or nxt > _MAX_CYCLES:
            return p_issue, h_issue, n_pim_sw, n_host_sw, n_mode_sw, 1
        t = nxt
    return p_issue, h_issue, n_pim_sw, n_host_sw, n_mode_sw, 0


def run_bank_slice(
    pim: np.ndarray,
    host: np.ndarray,
    cfg: HardwareConfig,
    slicing: SliceConfig | None = None,
    valid_gaps: np.ndarray | None = None,
    validate: bool = True,
) -> SliceResult:
    """Run a PIM command stream and a host read stream on one channel.

    Parameters
    ----------
    pim : numpy.ndarray
        PIM commands (:data:`models.isa.COMMAND_DTYPE`); MAC rows are KV-partition rows.
    host : numpy.ndarray
        Host reads (:data:`HOST_READ_DTYPE`) in arrival order.
    cfg : HardwareConfig
        Hardware preset (timing, geometry, PIM queue depth ``dcs.queue_depth``).
    slicing : SliceConfig, optional
        DEX or baseline, split ratio, host queue depth (default: DEX, equal halves).
    valid_gaps : numpy.ndarray, optional
        ``valid_gaps[k]`` idle cycles between accepting PIM command ``k - 1`` (or cycle 0)
        and offering command ``k`` (as in :func:`models.channel.run_channel`).
    validate : bool
        Check both streams first (default).

    Returns
    -------
    SliceResult
        Issue cycle of every PIM command and host read, and the statistics.
    """
    slicing = slicing or SliceConfig()
    if not isinstance(slicing, SliceConfig):
        raise SliceError(f"slicing must be a SliceConfig, got {type(slicing).__name__}")
    slicing.check(cfg)
    if validate:
        _validate_pim(pim, cfg, slicing)
        validate_host_reads(host, cfg, slicing)
    n_p, n_h = int(pim.shape[0]), int(host.shape[0])
    if valid_gaps is None:
        gaps = np.zeros(n_p, dtype=np.int64)
    else:
        gaps = np.asarray(valid_gaps, dtype=np.int64)
        if gaps.shape != (n_p,) or (gaps < 0).any():
            raise SliceError(
                f"valid_gaps must be {n_p} non-negative integers (one per PIM command), got "
                f"shape {gaps.shape}"
            )
    op = pim["op"].astype(np.int64)
    p_issue, h_issue, n_pim_sw, n_host_sw, n_mode_sw, status = _slice_kernel(
        op,
        pim["row"].astype(np.int64),
        gaps,
        host["bank"].astype(np.int64),
        host["row"].astype(np.int64),
        host["arrival"].astype(np.int64),
        timing_vector(cfg),
        cfg.dcs.queue_depth,
        slicing.host_queue_depth,
        cfg.channel.banks,
        bool(slicing.sliced),
    )
    if status:
        raise RuntimeError("bank-slice model cannot make progress (please report this stream)")
    tm = cfg.timing
    p_done = p_issue + execution_times(tm)[op] if n_p else p_issue
    h_done = h_issue + tm.tCCD
    pim_cycles = int(p_done.max()) if n_p else 0
    host_end = int(h_done.max()) if n_h else 0
    host_span = host_end - int(host["arrival"][0]) if n_h else 0
    n_mac = int(np.count_nonzero(op == OP_MAC))
    nbytes = n_h * cfg.channel.column_bytes
    bpc = nbytes / host_span if host_span else 0.0
    latency = float((h_issue - host["arrival"]).mean()) if n_h else 0.0
    return SliceResult(
        sliced=bool(slicing.sliced),
        pim_issue=p_issue,
        host_issue=h_issue,
        cycles=max(pim_cycles, host_end),
        pim_cycles=pim_cycles,
        host_span=host_span,
        macs=n_mac,
        mac_utilization=min(1.0, n_mac * tm.tCCD / pim_cycles) if pim_cycles else 0.0,
        host_reads=n_h,
        host_bytes=nbytes,
        host_bytes_per_cycle=bpc,
        host_gbps=bpc * cfg.module.freq_ghz,
        host_latency_mean=latency,
        pim_row_switches=int(n_pim_sw),
        host_row_switches=int(n_host_sw),
        mode_switches=int(n_mode_sw),
    )


def check_bank_slice(
    pim: np.ndarray,
    host: np.ndarray,
    pim_issue: np.ndarray,
    host_issue: np.ndarray,
    cfg: HardwareConfig,
    valid_gaps: np.ndarray | None = None,
) -> list[str]:
    """Rules an issue schedule breaks (empty if none), e.g. one recorded under back-pressure.

    Checks: every command and read issued once; at most one operation per cycle (command
    bus); data-bus spacing of tCCD among WR_INP, RD_OUT and host reads; PIM program order
    with the static gaps; host reads in arrival order and after they arrived. Row timing is
    not checked here.
    """
    tm = cfg.timing
    op = pim["op"].astype(np.int64)
    pim_issue = np.asarray(pim_issue, dtype=np.int64)
    host_issue = np.asarray(host_issue, dtype=np.int64)
    problems: list[str] = []

    def report(mask: np.ndarray, issue: np.ndarray, what: str, name: str) -> None:
        bad = np.flatnonzero(mask)
        if bad.size:
            k = int(bad[0])
            problems.append(
                f"{what}: first at {name} #{k} (issued at {int(issue[k])}), {bad.size} in all"
            )

    report(pim_issue < 0, pim_issue, "never issued", "PIM command")
    report(host_issue < 0, host_issue, "never issued", "host read")
    if problems:
        return problems
    both = np.concatenate([pim_issue, host_issue])
    _, counts = np.unique(both, return_counts=True)
    if (counts > 1).any():
        problems.append(f"two operations in one cycle: {int((counts > 1).sum())} cycles")
    xfer = np.sort(np.concatenate([pim_issue[op != OP_MAC], host_issue]))
    if xfer.size > 1 and (np.diff(xfer) < tm.tCCD).any():
        k = int(np.flatnonzero(np.diff(xfer) < tm.tCCD)[0])
        problems.append(f"data bus spacing below tCCD at cycle {int(xfer[k + 1])}")
    late = static_gap_violations(op, pim_issue, tm)
    report(late, pim_issue, "static gap or program order broken", "PIM command")
    if valid_gaps is not None and op.size:
        earliest = np.cumsum(np.asarray(valid_gaps, dtype=np.int64) + 1)
        report(pim_issue < earliest, pim_issue, "issued before it was offered", "PIM command")
    if host_issue.size:
        report(host_issue <= host["arrival"], host_issue, "issued before arrival", "host read")
        order = np.zeros(host_issue.size, dtype=bool)
        order[1:] = np.diff(host_issue) <= 0
        report(order, host_issue, "host reads out of arrival order", "host read")
    return problems
