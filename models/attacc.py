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
(``trace_gen/gen_trace_attacc_bank.py``); ``docs/dcc.md`` has the table and the choices. An
SFM in ``SfmMode.STATS`` (ours) also writes its max and sum into a buffer entry, for a
softmax split over channels that the host combines.

A stream is a numpy array of :data:`COMMAND_DTYPE`; :data:`OPERAND_FIELDS` says which fields
each op uses. :func:`time_stream` issues it in order with the ``[timing]`` of an ``attacc``
back end; :func:`execute` runs it on an :class:`AttAccState` in FP16; :func:`access_stream`
lowers single-bank reads or writes of ``(bank, row, column)`` vectors (the host's
rearrangement) to a stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from functools import lru_cache

import numpy as np
from pimphony.models import dram_rules
from pimphony.models.backends import BackendConfig, BackendKind, GroupSpec, PimDtype, PimTiming
from pimphony.models.dram_rules import (
    BankRules,
    Commands,
    Constraint,
    Engine,
    Level,
    Since,
    Timeline,
    node_table,
)
from pimphony.models.errors import PimphonyError

__all__ = [
    "COMMAND_DTYPE",
    "OPERAND_FIELDS",
    "AttAccError",
    "AttAccState",
    "Levels",
    "MacMode",
    "Op",
    "Scope",
    "SfmMode",
    "Timeline",
    "access_addresses",
    "access_stream",
    "bank_rules",
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
    #   (mode STATS: also its max and sum of exponentials into entry `dst`)
    MVGB = 10  # softmax-buffer entry `src` -> GEMV-buffer entry `dst` of the selected banks
    RDSB = 11  # host reads softmax-buffer entry `src` (ours: how results leave the group)


class MacMode(IntEnum):
    """What a MACAB computes in every bank (the trace generator's two GEMV-unit modes)."""

    DOT = 0  # "adder tree mode": acc[dst][lane] += sum_k row[k] * gb[src][k]
    AXPY = 1  # "mac mode": acc[dst][k] += row[k] * gb[src][lane]


class SfmMode(IntEnum):
    """What an SFM leaves besides the probabilities (ours: the split softmax's statistics)."""

    NORMALISE = 0  # the probabilities only
    STATS = 1  # also the max m and the sum l of exp(x - m) into lanes 0 and 1 of entry `dst`
    #   (the rest zero), for the host to combine a head's softmax split over groups


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
    Op.SFM: ("bank", "src", "n", "dst", "mode"),
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
        return cls.of_group(cfg.group)

    @classmethod
    def of_group(cls, g: GroupSpec) -> Levels:
        """The levels of group ``g``."""
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


def softmax_cycles(
    cfg: BackendConfig, n: int | np.ndarray, mode: int | np.ndarray = SfmMode.NORMALISE
) -> int | np.ndarray:
    """Cycles the softmax unit is busy on ``n`` elements: one ``lanes``-wide vector per cycle
    (a choice from the trace generator's note "SFM: 16tCK (for L = 256)"); with
    ``SfmMode.STATS`` one vector more, the entry holding its max and sum, at the same rate
    (``n`` and ``mode`` ints, or numpy arrays of them for a whole stream.)"""
    return -(-n // cfg.core.lanes) + (np.asarray(mode) == SfmMode.STATS).astype(np.int64)


def _fail(k: int, cmd: np.void, why: str) -> AttAccError:
    code = int(cmd["op"])
    if code not in Op._value2member_map_:
        return AttAccError(f"command {k} (op {code}): {why}")
    op = Op(code)
    args = " ".join(f"{f}={int(cmd[f])}" for f in OPERAND_FIELDS[op])
    return AttAccError(f"command {k} ({op.name} {args}): {why}".replace(" )", ")"))


@lru_cache(maxsize=64)
def bank_rules(t: PimTiming) -> BankRules:
    """The constraint table of a channel with timing ``t`` (HBM3-PIM.cpp's constraints;
    ``docs/dcc.md``). ACT waits its bank's PRE + tRP and ACT + tRC, the rank's last ACT +
    tRRD_S (same bank group tRRD_L) and its fourth-last + tFAW; ACTAB waits every bank's PRE +
    tRP and ACT + tRC; a row command waits 2 cycles after an ACT/ACTAB (two-cycle row
    commands). Data-path commands (:data:`DATA_OPS`) wait nBL after the last one on their
    pseudo-channel, tCCD_S on their rank, tCCD_L in their bank group; RD/WR wait tRCD after
    their bank's ACT and the rank's read/write turnaround. MACAB waits every bank's ACT +
    tRCD_RD and the last MACAB + tCCD_AB. PRE/PREA wait tRAS, tRTP after a RD (PREA: or a
    MACAB), WL + BL/2 + tWR after a WR. Dependencies through buffers (choices), from the
    prerequisite's completion: MACAB waits for the GEMV-buffer writes (WRGB + WL + BL/2,
    MVGB + BL/2) and MVSB for the last MACAB (+ tCCD_AB); SFM waits the MVSBs (+ BL/2);
    anything reading the softmax buffer waits for SFM to finish (:func:`softmax_cycles`, a
    command's ``extra``) and for the MVSBs."""
    (act, pre, rd, wr, actab, prea, mac, wrgb, mvsb, sfm, mvgb, rdsb) = (
        frozenset({int(o)}) for o in Op
    )
    acts, data = act | actab, frozenset(int(o) for o in DATA_OPS)
    bank, bg, rank = Level.BANK, Level.BANK_GROUP, Level.RANK
    pch, channel, done = Level.PSEUDO_CHANNEL, Level.CHANNEL, Since.DONE
    sfm_readers = mvsb | sfm | mvgb | rdsb
    c, burst = Constraint, t.burst_cycles
    return BankRules(
        ops=len(Op),
        constraints=(
            c(acts, acts | pre | prea, channel, 2),
            c(pre | prea, acts, bank, t.tRP),
            c(acts, acts, bank, t.tRC),
            c(act, act, rank, t.tRRD_S),
            c(act, act, bg, t.tRRD_L),
            c(act, act, rank, t.tFAW, window=4),
            c(acts, pre | prea, bank, t.tRAS),
            c(rd, pre | prea, bank, t.tRTP),
            c(wr, pre | prea, bank, t.write_to_precharge),
            c(mac, prea, channel, t.tRTP),
            c(acts, mac | rd, bank, t.tRCD_RD),
            c(acts, wr, bank, t.tRCD_WR),
            c(mac, mac, channel, t.tCCD_AB),
            c(wrgb | mvgb, mac, channel, 0, since=done),
            c(data, data, pch, burst),
            c(data, data, rank, t.tCCD_S),
            c(data, data, bg, t.tCCD_L),
            c(wr, rd, rank, t.write_to_read),
            c(rd, wr, rank, t.read_to_write),
            c(mac, mvsb, channel, 0, since=done),
            c(sfm, sfm_readers, channel, 0, since=done),
            c(mvsb, sfm_readers - mvsb, channel, 0, since=done),
        ),
        completion=tuple(
            {
                Op.ACT: t.tRCD_RD,
                Op.ACTAB: t.tRCD_RD,
                Op.PRE: t.tRP,
                Op.PREA: t.tRP,
                Op.MACAB: t.tCCD_AB,
                Op.RD: t.RL + burst,
                Op.WR: t.WL + burst,
                Op.WRGB: t.WL + burst,
                Op.MVSB: burst,
                Op.SFM: 0,
                Op.MVGB: burst,
                Op.RDSB: t.RL + burst,
            }[o]
            for o in Op
        ),
        wide=actab | prea | mac,
    )


@lru_cache(maxsize=64)
def _nodes(g: GroupSpec) -> np.ndarray:
    lv = Levels.of_group(g)
    return node_table(g.banks, lv.bank_group, lv.rank, lv.pseudo_channel)


def time_stream(
    cfg: BackendConfig, stream: np.ndarray, engine: Engine = dram_rules.issue
) -> Timeline:
    """Issue each command in order, one per cycle, at the first cycle every rule allows (the
    rules: :func:`bank_rules`, run by ``engine``, the compiled :func:`models.dram_rules.issue`
    by default); the kernel ends when the last command completes."""
    check_backend(cfg)
    g = cfg.group
    op = stream["op"].astype(np.int64)
    if len(stream) == 0:
        return Timeline.of(Op, op)
    bank = stream["bank"].astype(np.int64)
    bad_bank, bad_op = bank >= g.banks, op >= len(Op)
    if bad_bank.any() or bad_op.any():
        k = int(np.flatnonzero(bad_bank | bad_op)[0])
        why = f"bank {int(bank[k])} >= banks = {g.banks}" if bad_bank[k] else f"unknown op {op[k]}"
        raise _fail(k, stream[k], why)
    sfm = np.zeros(len(stream), np.int64)  # the softmax unit's busy cycles, SFMs only
    at = np.flatnonzero(op == Op.SFM)
    sfm[at] = softmax_cycles(cfg, stream["n"][at].astype(np.int64), stream["mode"][at])
    cmds = Commands.of(op, bank, extra=sfm)
    return Timeline.of(Op, op, engine(bank_rules(cfg.timing), _nodes(g), cmds))


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
            if mode not in (SfmMode.NORMALISE, SfmMode.STATS):
                raise _fail(k, cmd, f"mode {mode} is no SfmMode (NORMALISE 0, STATS 1)")
            if mode == SfmMode.STATS and (dst >= state.slots or src <= dst < src + m):
                raise _fail(
                    k,
                    cmd,
                    f"statistics entry {dst} must be one of the {state.slots} softmax-buffer "
                    f"entries outside the scores' entries {src} .. {src + m - 1}",
                )
            x = state.buf[src : src + m].ravel().astype(np.float32)
            top = x[:n].max()
            e = np.exp(x[:n] - top)
            out = np.zeros(m * c.lanes, np.float32)
            out[:n] = e / e.sum()
            state.buf[src : src + m] = out.astype(np.float16).reshape(m, c.lanes)
            if mode == SfmMode.STATS:
                state.buf[dst] = 0
                state.buf[dst, :2] = np.array([top, e.sum()], np.float32).astype(np.float16)
        elif op is Op.RDSB:
            if src >= state.slots:
                raise _fail(k, cmd, f"softmax-buffer entry {src} >= {state.slots}")
            state.reads.append(state.buf[src].copy())
    return state


def access_addresses(cfg: BackendConfig, addresses: np.ndarray, op: Op) -> np.ndarray:
    """The distinct ``(bank, row, column)`` rows of ``addresses``, sorted; refused if ``op``
    moves no data, there are none, or one lies outside the group."""
    if op not in (Op.RD, Op.WR):
        raise AttAccError(f"access_stream moves data with RD or WR, not {Op(op).name}")
    addr = np.asarray(addresses, dtype=np.int64).reshape(-1, 3)
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
    # one integer per address, ordered as (bank, row, column): sort and deduplicate at once
    dims = (g.banks, g.rows_per_bank, g.columns_per_row)
    flat = np.sort(np.ravel_multi_index((addr[:, 0], addr[:, 1], addr[:, 2]), dims))
    flat = flat[np.r_[True, flat[1:] != flat[:-1]]]  # (np.unique hashes first: ~20x slower)
    return np.stack(np.unravel_index(flat, dims), axis=1).astype(np.int64)


def access_stream(cfg: BackendConfig, addresses: np.ndarray, op: Op) -> np.ndarray:
    """Single-bank RDs or WRs of ``addresses`` (``(n, 3)``: bank, row, column) of one group, as
    an open-page controller issues them: rows in order; per row, an ACT for every bank with
    data there, the columns round-robin over those banks, then a PRE per bank. The order of
    :func:`compiler.rearrange.access_stream` (consecutive commands in different bank groups),
    taken one level up: banks are interleaved pseudo-channel first, then rank, then bank
    group (:func:`interleave`), so consecutive commands alternate pseudo-channels and both
    data buses fill. Vectorised; ``models.reference.access_stream_reference`` is the same loop
    by loop."""
    addr = access_addresses(cfg, addresses, op)
    g = cfg.group
    rank_of = np.empty(g.banks, np.int64)
    rank_of[interleave(cfg)] = np.arange(g.banks)
    bank, row, col = addr[:, 0], addr[:, 1], addr[:, 2]
    # addr is sorted by (bank, row, column): the k-th column of each (row, bank) pair
    start = np.ones(len(addr), bool)
    start[1:] = (bank[1:] != bank[:-1]) | (row[1:] != row[:-1])
    first = np.flatnonzero(start)
    k = np.arange(len(addr)) - np.repeat(first, np.diff(np.append(first, len(addr))))
    pb, pr = bank[first], row[first]  # every (bank, row) visit
    n_pairs, n_cols = len(first), len(addr)
    # one record per command: (row, phase: ACT 0 / column 1 / PRE 2, k, bank's rank)
    rows_ = np.concatenate([pr, row, pr])
    phase = np.repeat(np.array([0, 1, 2]), [n_pairs, n_cols, n_pairs])
    kk = np.concatenate([np.zeros(n_pairs, np.int64), k, np.zeros(n_pairs, np.int64)])
    banks = np.concatenate([pb, bank, pb])
    order = np.lexsort((rank_of[banks], kk, phase, rows_))
    out = np.zeros(len(order), dtype=COMMAND_DTYPE)
    ph = phase[order]
    out["op"] = np.array([int(Op.ACT), int(op), int(Op.PRE)], np.uint8)[ph]
    out["bank"] = banks[order]
    out["row"] = np.where(ph == 2, 0, rows_[order])
    out["col"] = np.where(
        ph == 1,
        np.concatenate([np.zeros(n_pairs, np.int64), col, np.zeros(n_pairs, np.int64)])[order],
        0,
    )
    out["data"] = np.where((ph == 1) & (op == Op.WR), 0, -1)
    return out
