"""The AttAcc back end: a command-level model of one PIM group (an HBM3 channel) with values.

AttAcc (Park et al., ASPLOS 2024; DCC seed 003, section V) puts a GEMV unit beside every bank
and a softmax unit (with an accumulator) per channel. DCC's "pseudo-channel" of 64 banks is
the AttAcc simulator's channel (``scale-snu/attacc_simulator``): 2 pseudo-channels x 2 ranks
x 4 bank groups x 4 banks, here 16 bank groups of 4 banks numbered pseudo-channel, rank, bank
group, bank (bank ``b`` is in bank group ``b // 4``). The commands are the simulator's
(``pim_ramulator_src/HBM3-PIM.cpp``: ``MACAB``, ``WRGB``, ``MVSB``, ``MVGB``, ``SFM`` and the
all-bank ``ACTAB`` / ``PREA``) plus plain single-bank ``ACT`` / ``PRE`` / ``RD`` / ``WR`` and
one of ours, ``RDSB`` (the host reads a softmax-buffer entry; the simulator's traces end in
the buffer). What each command does to values is our reading of the trace generator
(``trace_gen/gen_trace_attacc_bank.py``); ``docs/dcc.md`` has the table and the choices.

A stream is a numpy array of :data:`COMMAND_DTYPE`; :data:`OPERAND_FIELDS` says which fields
each op uses. :func:`time_stream` issues it in order with the ``[timing]`` of an ``attacc``
back end; :func:`execute` runs it on an :class:`AttAccState` in FP16; :func:`access_stream`
lowers single-bank reads or writes of ``(bank, row, column)`` vectors (the host's
rearrangement) to a stream.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from models.backends import BackendConfig, BackendKind, PimDtype
from models.errors import PimphonyError

__all__ = [
    "COMMAND_DTYPE",
    "OPERAND_FIELDS",
    "AttAccError",
    "AttAccState",
    "Levels",
    "MacMode",
    "Op",
    "Scope",
    "Timeline",
    "access_stream",
    "check_backend",
    "command",
    "execute",
    "interleave",
    "softmax_cycles",
    "time_stream",
]


class AttAccError(PimphonyError, ValueError):
    """A stream the AttAcc group cannot run, or a back end it cannot model."""


class Op(IntEnum):
    """Commands of an AttAcc channel (ACT..WR share their codes with :mod:`models.hbm_pim`)."""

    ACT = 0  # one bank opens a row
    PRE = 1  # one bank closes its row
    RD = 2  # host reads one bank's column
    WR = 3  # host writes one bank's column
    ACTAB = 4  # every bank opens the same row
    PREA = 5  # every bank closes its row
    MACAB = 6  # every bank's GEMV unit: one MAC on column `col` of its open row
    WRGB = 7  # host -> GEMV-buffer entry `dst` of the banks `mode` selects
    MVSB = 8  # accumulator `src` of the banks `mode` selects -> softmax-buffer entry `dst`
    SFM = 9  # softmax over the first `n` elements of buffer entries `src`, `src`+1, ...
    MVGB = 10  # softmax-buffer entry `src` -> GEMV-buffer entry `dst` of the selected banks
    RDSB = 11  # host reads softmax-buffer entry `src` (ours: how results leave the group)


class MacMode(IntEnum):
    """What a MACAB computes in every bank (the trace generator's two GEMV-unit modes)."""

    DOT = 0  # "adder tree mode": acc[dst][lane] += sum_k row[k] * gb[src][k]
    AXPY = 1  # "mac mode": acc[dst][k] += row[k] * gb[src][lane]


class Scope(IntEnum):
    """Which banks a WRGB / MVGB / MVSB addresses."""

    BANK = 0  # the one bank named
    INDEX = 1  # WRGB/MVGB: the bank's index (bank mod banks per group) in every bank group
    GROUP = 2  # WRGB/MVGB: every bank of the bank's bank group; MVSB: the same banks, their
    # accumulators summed by the bank group's adder tree


COMMAND_DTYPE = np.dtype(
    [
        ("op", "u1"),
        ("bank", "u2"),
        ("row", "u4"),
        ("col", "u2"),
        ("data", "i4"),
        ("src", "u2"),
        ("dst", "u2"),
        ("lane", "u1"),
        ("mode", "u1"),
        ("add", "u1"),
        ("n", "u4"),
    ]
)
OPERAND_FIELDS: dict[Op, tuple[str, ...]] = {
    Op.ACT: ("bank", "row"),
    Op.PRE: ("bank",),
    Op.RD: ("bank", "row", "col"),
    Op.WR: ("bank", "row", "col", "data"),
    Op.ACTAB: ("row",),
    Op.PREA: (),
    Op.MACAB: ("row", "col", "src", "dst", "lane", "mode"),
    Op.WRGB: ("bank", "dst", "data", "mode"),
    Op.MVSB: ("bank", "src", "dst", "mode", "add"),
    Op.SFM: ("bank", "src", "n"),
    Op.MVGB: ("bank", "src", "dst", "mode"),
    Op.RDSB: ("bank", "src"),
}
"""Fields each op uses. ``bank`` of SFM / RDSB (and of broadcast WRGB / MVGB / MVSB) is the
address the command carries: its pseudo-channel, rank and bank group set its bus spacing, as
in the simulator (whose broadcasts carry bank group 0)."""

#: Data-path commands: they use a pseudo-channel's data bus or the channel's internal one
#: and are spaced like column commands (HBM3-PIM.cpp: nBL per pCH, nCCDS per rank, nCCDL
#: per bank group).
DATA_OPS = frozenset({Op.RD, Op.WR, Op.WRGB, Op.MVSB, Op.SFM, Op.MVGB, Op.RDSB})


def command(op: Op, **fields: int) -> tuple:
    """One command as a tuple of :data:`COMMAND_DTYPE` (unset fields 0, ``data`` -1)."""
    bad = set(fields) - set(OPERAND_FIELDS[op])
    if bad:
        raise AttAccError(
            f"{op.name} has no operand(s) {sorted(bad)}; it uses {list(OPERAND_FIELDS[op])}"
        )
    values = {"data": -1, **fields, "op": int(op)}
    return tuple(values.get(name, 0) for name in COMMAND_DTYPE.names)


def check_backend(cfg: BackendConfig) -> None:
    """Refuse a back end this model cannot run (another kind, no timing, no buffers)."""
    c, g = cfg.core, cfg.group
    if cfg.kind is not BackendKind.ATTACC or cfg.timing is None:
        raise AttAccError(
            f"back end {cfg.name!r} is of kind {str(cfg.kind)!r}, not an AttAcc back end with "
            "[timing] (configs/backends/attacc.toml)"
        )
    if c.banks != 1 or c.input_regs < 1 or c.output_regs < 1 or g.buffer_bytes < g.column_bytes:
        raise AttAccError(
            f"back end {cfg.name!r}: the AttAcc model needs one bank per GEMV unit (core.banks "
            f"= {c.banks}), a GEMV buffer (input_regs = {c.input_regs}), an accumulator "
            f"(output_regs = {c.output_regs}) and a softmax buffer of at least one column "
            f"(group.buffer_bytes = {g.buffer_bytes})"
        )


@dataclass(frozen=True)
class Levels:
    """Bank group, rank and pseudo-channel of every bank of a group."""

    bank_group: np.ndarray
    rank: np.ndarray
    pseudo_channel: np.ndarray
    per_group: int

    @classmethod
    def of(cls, cfg: BackendConfig) -> Levels:
        """The levels of ``cfg``'s group (bank groups split evenly over pCH x ranks)."""
        g = cfg.group
        per_bg = g.banks // g.bank_groups
        bg = np.arange(g.banks) // per_bg
        rank = bg // (g.bank_groups // (g.pseudo_channels * g.ranks))
        return cls(bg, rank, rank // g.ranks, per_bg)


def interleave(cfg: BackendConfig) -> np.ndarray:
    """The group's banks in the order that spreads consecutive commands widest: pseudo-
    channel fastest, then rank, then bank group, then bank (consecutive data commands on
    different pseudo-channels go one per cycle)."""
    g = cfg.group
    lv = Levels.of(cfg)
    bg_in_rank = lv.bank_group % (g.bank_groups // (g.pseudo_channels * g.ranks))
    bank_in_bg = np.arange(g.banks) % lv.per_group
    return np.lexsort((lv.pseudo_channel, lv.rank % g.ranks, bg_in_rank, bank_in_bg))


@dataclass
class Timeline:
    """Issue cycle of every command and the cycle the last one completes."""

    issue: np.ndarray
    cycles: int
    counts: dict[str, int]


def softmax_cycles(cfg: BackendConfig, n: int) -> int:
    """Cycles the softmax unit is busy on ``n`` elements: one ``lanes``-wide vector per cycle
    (a choice from the trace generator's note "SFM: 16tCK (for L = 256)")."""
    return -(-n // cfg.core.lanes)


def _fail(k: int, cmd: np.void, why: str) -> AttAccError:
    op = Op(int(cmd["op"]))
    args = " ".join(f"{f}={int(cmd[f])}" for f in OPERAND_FIELDS[op])
    return AttAccError(f"command {k} ({op.name} {args}): {why}".replace(" )", ")"))


def time_stream(cfg: BackendConfig, stream: np.ndarray) -> Timeline:
    """Issue each command in order, one per cycle, at the first cycle every rule allows.

    Rules (HBM3-PIM.cpp's constraints; ``docs/dcc.md``): ACT waits its bank's PRE + tRP and
    ACT + tRC, the rank's last ACT + tRRD_S (same bank group tRRD_L) and its fourth-last +
    tFAW; ACTAB waits every bank's PRE + tRP and ACT + tRC; a row command waits 2 cycles
    after an ACT/ACTAB (two-cycle row commands). Data-path commands (RD, WR, WRGB, MVSB,
    MVGB, SFM, RDSB) wait nBL after the last one on their pseudo-channel, tCCD_S on their
    rank, tCCD_L in their bank group; RD/WR wait tRCD after their bank's ACT and the rank's
    read/write turnaround. MACAB waits every bank's ACT + tRCD_RD and the last MACAB +
    tCCD_AB. PRE/PREA wait tRAS, tRTP after a RD or MACAB, WL + BL/2 + tWR after a WR.
    Dependencies through buffers (choices): MACAB waits for the GEMV-buffer writes to land
    (WRGB + WL + BL/2, MVGB + BL/2); MVSB waits the last MACAB + tCCD_AB; SFM waits the last
    MVSB + BL/2; anything reading the softmax buffer waits for SFM to finish
    (:func:`softmax_cycles`). The kernel ends when the last command completes.
    """
    check_backend(cfg)
    t, g = cfg.timing, cfg.group
    assert t is not None
    lv = Levels.of(cfg)
    bgs, ranks, pchs = lv.bank_group.tolist(), lv.rank.tolist(), lv.pseudo_channel.tolist()
    nb, n_rank = g.banks, g.pseudo_channels * g.ranks
    never = -(1 << 40)
    act, pre, rd, wr = ([never] * nb for _ in range(4))
    bg_act = [never] * g.bank_groups
    rank_act = [never] * n_rank
    faw = [deque(maxlen=4) for _ in range(n_rank)]
    col_pch = [never] * g.pseudo_channels
    col_rank = [never] * n_rank
    col_bg = [never] * g.bank_groups
    rank_rd = [never] * n_rank
    rank_wr = [never] * n_rank
    last_row_act = last_mac = never
    gb_ready = acc_ready = sb_ready = sfm_done = never
    burst = t.burst_cycles
    ops, banks = stream["op"].tolist(), stream["bank"].tolist()
    ns = stream["n"].tolist()
    issue = np.empty(len(stream), dtype=np.int64)
    prev, end = -1, 0
    for k in range(len(stream)):
        op, b = ops[k], banks[k]
        if b >= nb:
            raise _fail(k, stream[k], f"bank {b} >= banks = {nb}")
        bg, rk, pc = bgs[b], ranks[b], pchs[b]
        at = prev + 1
        if op in (Op.ACT, Op.ACTAB, Op.PRE, Op.PREA):
            at = max(at, last_row_act + 2)
        if op == Op.ACT:
            at = max(
                at, pre[b] + t.tRP, act[b] + t.tRC, rank_act[rk] + t.tRRD_S, bg_act[bg] + t.tRRD_L
            )
            if len(faw[rk]) == 4:
                at = max(at, faw[rk][0] + t.tFAW)
            act[b] = bg_act[bg] = rank_act[rk] = last_row_act = at
            faw[rk].append(at)
            done = at + t.tRCD_RD
        elif op == Op.ACTAB:
            at = max(at, max(pre) + t.tRP, max(act) + t.tRC)
            act = [at] * nb
            last_row_act = at
            done = at + t.tRCD_RD
        elif op in (Op.PRE, Op.PREA):
            sel = range(nb) if op == Op.PREA else (b,)
            at = max(
                at,
                max(act[i] for i in sel) + t.tRAS,
                max(rd[i] for i in sel) + t.tRTP,
                max(wr[i] for i in sel) + t.write_to_precharge,
            )
            if op == Op.PREA:
                at = max(at, last_mac + t.tRTP)
                pre = [at] * nb
            else:
                pre[b] = at
            done = at + t.tRP
        elif op == Op.MACAB:
            at = max(at, max(act) + t.tRCD_RD, last_mac + t.tCCD_AB, gb_ready)
            last_mac = at
            acc_ready = at + t.tCCD_AB
            done = acc_ready
        else:  # data path
            at = max(at, col_pch[pc] + burst, col_rank[rk] + t.tCCD_S, col_bg[bg] + t.tCCD_L)
            if op == Op.RD:
                at = max(at, act[b] + t.tRCD_RD, rank_wr[rk] + t.write_to_read)
                rd[b] = rank_rd[rk] = at
                done = at + t.RL + burst
            elif op == Op.WR:
                at = max(at, act[b] + t.tRCD_WR, rank_rd[rk] + t.read_to_write)
                wr[b] = rank_wr[rk] = at
                done = at + t.WL + burst
            elif op == Op.WRGB:
                done = at + t.WL + burst
                gb_ready = max(gb_ready, done)
            elif op == Op.MVSB:
                at = max(at, acc_ready, sfm_done)
                done = at + burst
                sb_ready = max(sb_ready, done)
            elif op == Op.SFM:
                at = max(at, sb_ready, sfm_done)
                done = sfm_done = at + softmax_cycles(cfg, ns[k])
            elif op == Op.MVGB:
                at = max(at, sfm_done, sb_ready)
                done = at + burst
                gb_ready = max(gb_ready, done)
            elif op == Op.RDSB:
                at = max(at, sfm_done, sb_ready)
                done = at + t.RL + burst
            else:
                raise _fail(k, stream[k], f"unknown op {op}")
            col_pch[pc] = col_rank[rk] = col_bg[bg] = at
        issue[k] = at
        prev = at
        end = max(end, done)
    counts = {o.name: int(np.count_nonzero(stream["op"] == o)) for o in Op}
    return Timeline(issue=issue, cycles=int(end) if len(stream) else 0, counts=counts)


@dataclass
class AttAccState:
    """Values of one AttAcc group: bank rows (allocated on first use), every bank's GEMV
    buffer and accumulator, the softmax buffer, what the host read (RD / RDSB, in order)."""

    banks: int
    cols: int
    lanes: int
    input_regs: int
    output_regs: int
    slots: int
    rows: dict[int, np.ndarray] = field(default_factory=dict)
    gb: np.ndarray = field(init=False)
    acc: np.ndarray = field(init=False)
    buf: np.ndarray = field(init=False)
    reads: list[np.ndarray] = field(default_factory=list)
    macs: int = 0

    def __post_init__(self) -> None:
        self.gb = np.zeros((self.banks, self.input_regs, self.lanes), np.float16)
        self.acc = np.zeros((self.banks, self.output_regs, self.lanes), np.float16)
        self.buf = np.zeros((self.slots, self.lanes), np.float16)

    @classmethod
    def for_backend(cls, cfg: BackendConfig) -> AttAccState:
        """An empty state (all zero) of one group of back end ``cfg``."""
        g, c = cfg.group, cfg.core
        return cls(
            g.banks,
            g.columns_per_row,
            c.lanes,
            c.input_regs,
            c.output_regs,
            g.buffer_bytes // g.column_bytes,
        )

    def row(self, r: int) -> np.ndarray:
        """Row ``r`` of every bank: ``(banks, cols, lanes)`` FP16 (a view)."""
        if r not in self.rows:
            self.rows[r] = np.zeros((self.banks, self.cols, self.lanes), np.float16)
        return self.rows[r]


def _tree_sum(x: np.ndarray) -> np.ndarray:
    """Sum over the last axis by an FP16 adder tree (halves added pairwise)."""
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = np.concatenate([x, np.zeros_like(x[..., :1])], axis=-1)
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def _selected(cfg: BackendConfig, lv: Levels, k: int, cmd: np.void, scope: int) -> np.ndarray:
    bank = int(cmd["bank"])
    if scope == Scope.BANK:
        return np.array([bank])
    if scope == Scope.INDEX and Op(int(cmd["op"])) in (Op.WRGB, Op.MVGB):
        return np.flatnonzero(np.arange(cfg.group.banks) % lv.per_group == bank % lv.per_group)
    if scope == Scope.GROUP:
        return np.flatnonzero(lv.bank_group == lv.bank_group[bank])
    raise _fail(k, cmd, f"mode {scope} is not a scope of {Op(int(cmd['op'])).name}")


def execute(
    cfg: BackendConfig, stream: np.ndarray, payload: np.ndarray, state: AttAccState
) -> AttAccState:
    """Run ``stream`` on ``state`` (modified and returned). ``payload``: ``(n, lanes)`` uint16
    FP16 bit patterns, the ``data`` rows of WR / WRGB. Products and sums are FP16; a DOT's 16
    products are summed by an adder tree; the softmax is computed in float32 and stored in
    FP16. Errors name the command: a column command to a row that is not open, a register
    or buffer entry that does not exist, a payload row that is missing."""
    check_backend(cfg)
    g, c = cfg.group, cfg.core
    if c.dtype is not PimDtype.FP16:
        raise AttAccError(
            f"back end {cfg.name!r}: core.dtype = {str(c.dtype)!r}: values are "
            "computed in FP16 only; time_stream times any data type"
        )
    lv = Levels.of(cfg)
    open_row = np.full(g.banks, -1, dtype=np.int64)
    for k in range(len(stream)):
        cmd = stream[k]
        op = Op(int(cmd["op"]))
        bank, row, col = int(cmd["bank"]), int(cmd["row"]), int(cmd["col"])
        src, dst, lane, mode = (int(cmd[f]) for f in ("src", "dst", "lane", "mode"))
        if bank >= g.banks:
            raise _fail(k, cmd, f"bank {bank} >= banks = {g.banks}")
        if row >= g.rows_per_bank or col >= g.columns_per_row:
            raise _fail(k, cmd, f"outside {g.rows_per_bank} rows x {g.columns_per_row} columns")
        data = int(cmd["data"])
        if op in (Op.WR, Op.WRGB) and not 0 <= data < len(payload):
            raise _fail(k, cmd, f"data {data} is not a payload row (0 to {len(payload) - 1})")
        if op in (Op.ACT, Op.ACTAB):
            sel = slice(None) if op is Op.ACTAB else slice(bank, bank + 1)
            if (open_row[sel] >= 0).any():
                raise _fail(k, cmd, "ACT to a bank with an open row (precharge first)")
            open_row[sel] = row
        elif op in (Op.PRE, Op.PREA):
            open_row[slice(None) if op is Op.PREA else slice(bank, bank + 1)] = -1
        elif op in (Op.RD, Op.WR):
            if open_row[bank] != row:
                raise _fail(
                    k, cmd, f"row {row} is not open in bank {bank} (open: {int(open_row[bank])})"
                )
            if op is Op.RD:
                state.reads.append(state.row(row)[bank, col].copy())
            else:
                state.row(row)[bank, col] = payload[data].view(np.float16)
        elif op is Op.MACAB:
            if (open_row != row).any():
                closed = np.flatnonzero(open_row != row)
                raise _fail(
                    k,
                    cmd,
                    f"row {row} is not open in every bank (e.g. bank "
                    f"{int(closed[0])}: {int(open_row[closed[0]])}); ACTAB first",
                )
            if src >= c.input_regs or dst >= c.output_regs or lane >= c.lanes:
                raise _fail(
                    k,
                    cmd,
                    f"GEMV-buffer entry < {c.input_regs}, accumulator < "
                    f"{c.output_regs}, lane < {c.lanes}",
                )
            w = state.row(row)[:, col, :]
            if mode == MacMode.DOT:
                state.acc[:, dst, lane] += _tree_sum(w * state.gb[:, src, :])
            elif mode == MacMode.AXPY:
                state.acc[:, dst, :] += w * state.gb[:, src, lane][:, None]
            else:
                raise _fail(k, cmd, f"mode {mode} is no MacMode (DOT 0, AXPY 1)")
            state.macs += 1
        elif op in (Op.WRGB, Op.MVGB):
            if dst >= c.input_regs:
                raise _fail(k, cmd, f"GEMV-buffer entry {dst} >= core.input_regs = {c.input_regs}")
            if op is Op.MVGB and src >= state.slots:
                raise _fail(k, cmd, f"softmax-buffer entry {src} >= {state.slots}")
            vec = payload[data].view(np.float16) if op is Op.WRGB else state.buf[src]
            state.gb[_selected(cfg, lv, k, cmd, mode), dst, :] = vec
        elif op is Op.MVSB:
            if src >= c.output_regs or dst >= state.slots:
                raise _fail(
                    k,
                    cmd,
                    f"accumulator {src} (< {c.output_regs}) or softmax-buffer "
                    f"entry {dst} (< {state.slots}) out of range",
                )
            sel = _selected(cfg, lv, k, cmd, mode)
            vec = _tree_sum(state.acc[sel, src, :].T)
            state.acc[sel, src, :] = 0
            state.buf[dst] = state.buf[dst] + vec if int(cmd["add"]) else vec
        elif op is Op.SFM:
            n = int(cmd["n"])
            m = -(-n // c.lanes)
            if n < 1 or src + m > state.slots:
                raise _fail(
                    k,
                    cmd,
                    f"n = {n} elements from entry {src} must lie in the "
                    f"{state.slots} softmax-buffer entries",
                )
            x = state.buf[src : src + m].ravel().astype(np.float32)
            e = np.exp(x[:n] - x[:n].max())
            out = np.zeros(m * c.lanes, np.float32)
            out[:n] = e / e.sum()
            state.buf[src : src + m] = out.astype(np.float16).reshape(m, c.lanes)
        elif op is Op.RDSB:
            if src >= state.slots:
                raise _fail(k, cmd, f"softmax-buffer entry {src} >= {state.slots}")
            state.reads.append(state.buf[src].copy())
    return state


def access_stream(cfg: BackendConfig, addresses: np.ndarray, op: Op) -> np.ndarray:
    """Single-bank RDs or WRs of ``addresses`` (``(n, 3)``: bank, row, column) of one group, as
    an open-page controller issues them: rows in order; per row, an ACT for every bank with
    data there, the columns round-robin over those banks, then a PRE per bank. The order of
    :func:`compiler.rearrange.access_stream` (consecutive commands in different bank groups),
    taken one level up: banks are interleaved pseudo-channel first, then rank, then bank
    group (:func:`interleave`), so consecutive commands alternate pseudo-channels and both
    data buses fill."""
    if op not in (Op.RD, Op.WR):
        raise AttAccError(f"access_stream moves data with RD or WR, not {Op(op).name}")
    addr = np.unique(np.asarray(addresses, dtype=np.int64).reshape(-1, 3), axis=0)
    if len(addr) == 0:
        raise AttAccError("no addresses to move")
    g = cfg.group
    if (
        addr.min() < 0
        or addr[:, 0].max() >= g.banks
        or addr[:, 1].max() >= g.rows_per_bank
        or addr[:, 2].max() >= g.columns_per_row
    ):
        raise AttAccError(
            f"addresses outside {g.banks} banks x {g.rows_per_bank} rows x "
            f"{g.columns_per_row} columns"
        )
    order = interleave(cfg)
    rank_of = np.empty(g.banks, np.int64)
    rank_of[order] = np.arange(g.banks)
    out: list[tuple] = []
    data = 0 if op == Op.WR else -1
    for row in np.unique(addr[:, 1]):
        here = addr[addr[:, 1] == row]
        banks = sorted(set(here[:, 0].tolist()), key=lambda b: rank_of[b])
        cols = {b: here[here[:, 0] == b, 2].tolist() for b in banks}
        out.extend(command(Op.ACT, bank=b, row=int(row)) for b in banks)
        for k in range(max(len(v) for v in cols.values())):
            out.extend(
                command(
                    Op(op),
                    bank=b,
                    row=int(row),
                    col=cols[b][k],
                    **({"data": data} if op == Op.WR else {}),
                )
                for b in banks
                if k < len(cols[b])
            )
        out.extend(command(Op.PRE, bank=b) for b in banks)
    return np.array(out, dtype=COMMAND_DTYPE)
