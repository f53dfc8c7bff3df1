"""The HBM-PIM back end: a command-level model of one PIM group (pseudo-channel) with values.

Samsung's HBM-PIM (FIMDRAM, Lee et al. ISCA 2021) is driven by ordinary DRAM commands. A
pseudo-channel has three modes: single-bank (SB, plain DRAM), all-bank (AB: every command
reaches all banks) and all-bank PIM (AB-PIM: a column command to a bank row *triggers* the
next instruction of the CRF program in every PIM unit). Registers sit at the reserved
``register_row``: column 0 is the PIM control word, 4-7 the CRF (8 instructions per 32 B
write), 8-15 GRF_A and 24-31 GRF_B (the addresses of Samsung's PIMSimulator,
``src/PIMRank.cpp``). Mode entry/exit are writes to reserved rows of fixed banks
(``PIMKernel::changePIMMode``). Everything here is parameterised by a
:class:`models.backends.BackendConfig` (banks, units of ``core.banks`` banks, ``lanes``,
register counts, CRF size, pipeline drain, timing), so an LPDDR-PIM preset reuses it.

A stream is a numpy array of :data:`COMMAND_DTYPE` (``op``, ``bank``, ``row``, ``col``,
``data``: a row of the payload array, -1 for none); payloads are ``(n, lanes)`` uint16 (FP16
bit patterns, or two uint16 per 32-bit CRF instruction). :func:`time_stream` gives each
command's issue cycle; :func:`execute` runs it on values. ``docs/dcc.md`` has the rules and
a worked example.
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
    Match,
    Timeline,
    node_table,
)
from pimphony.models.errors import PimphonyError
from pimphony.models.jit import njit

__all__ = [
    "AB_ENTRY_BANKS",
    "AB_ENTRY_ROW",
    "COMMAND_DTYPE",
    "CRF_COLUMNS",
    "FPU_OPS",
    "CTRL_COLUMN",
    "GRF_A_COLUMNS",
    "GRF_B_COLUMNS",
    "MODE_COLUMN",
    "OPERAND_FIELDS",
    "OTHER_MODELS",
    "SB_ENTRY_BANKS",
    "SB_ENTRY_ROW",
    "Bank",
    "Decoded",
    "HbmPimError",
    "Instr",
    "Mode",
    "Op",
    "PimState",
    "Timeline",
    "bank_rules",
    "check_backend",
    "decode_instr",
    "encode_instr",
    "execute",
    "instr_payload",
    "mode_banks",
    "modes",
    "time_stream",
]


class HbmPimError(PimphonyError, ValueError):
    """A stream the HBM-PIM group cannot run, or a back end it cannot model."""


class Op(IntEnum):
    """DRAM commands of a pseudo-channel."""

    ACT = 0
    PRE = 1
    RD = 2
    WR = 3


class Mode(IntEnum):
    """Operating modes of a pseudo-channel (PIMSimulator ``dramMode``)."""

    SB = 0
    AB = 1
    AB_PIM = 2


class Instr(IntEnum):
    """CRF instruction opcodes: the subset the kernels here use of FIMDRAM's ADD, MUL, MAC,
    MAD, MOV, FILL, NOP, JUMP, EXIT (Lee et al. ISCA 2021; PIMSimulator ``src/PIMCmd.h``).
    The encoding is ours (:func:`encode_instr`). Semantics as PIMSimulator's
    ``PIMBlock``/``PIMRank::doPIMBlock``: ``ADD dst, src0, src1`` is a lane-wise FP16 sum;
    ``MOV``/``FILL`` copy a vector and, with the ReLU flag, zero every lane whose sign bit is
    set."""

    NOP = 0
    MAC = 1
    MOV = 2  # register -> bank, triggered by a WR
    FILL = 3  # bank -> register, triggered by a RD
    JUMP = 4
    EXIT = 5
    ADD = 6  # dst = src0 + src1 (a bank operand: triggered by a RD)


class Bank(IntEnum):
    """CRF operand codes: a unit's banks by position (``EVEN`` = its first, ``ODD`` = its
    second) and its two register files."""

    EVEN = 0
    ODD = 1
    GRF_A = 2
    GRF_B = 3


COMMAND_DTYPE = np.dtype(
    [("op", "u1"), ("bank", "u2"), ("row", "u4"), ("col", "u2"), ("data", "i4")]
)
OPERAND_FIELDS: dict[Op, tuple[str, ...]] = {
    Op.ACT: ("bank", "row"),
    Op.PRE: ("bank",),
    Op.RD: ("bank", "row", "col"),
    Op.WR: ("bank", "row", "col", "data"),
}
"""Fields each command uses (``bank`` is ignored in AB modes except for its position bit)."""

# The register map of the reserved row (PIMSimulator src/PIMRank.cpp writeHab).
CTRL_COLUMN = 0
CRF_COLUMNS = range(4, 8)
GRF_A_COLUMNS = range(8, 16)
GRF_B_COLUMNS = range(24, 32)
# Mode changes (PIMSimulator src/tests/PIMKernel.cpp changePIMMode): SB -> AB is a write to
# row 0x17ff, column 0x1f of banks (bank group, bank) (0,0), (0,1), (2,0), (2,1); AB -> SB a
# write to row 0x1fff, column 0x1f of (0,0), (0,1).
AB_ENTRY_ROW = 0x17FF
SB_ENTRY_ROW = 0x1FFF
MODE_COLUMN = 0x1F
AB_ENTRY_BANKS = ((0, 0), (0, 1), (2, 0), (2, 1))
SB_ENTRY_BANKS = ((0, 0), (0, 1))

_OPC_SHIFT, _DST_SHIFT, _SRC0_SHIFT, _SRC1_SHIFT, _AAM_SHIFT = 28, 25, 22, 19, 18
_IMM0_BITS, _IMM1_BITS = 7, 11
_RELU_BIT = 12  # PIMSimulator PIMCmd::fromInt: isRelu_ is bit 12 of a FILL or MOV word
_RELU_OPS = (Instr.MOV, Instr.FILL)
#: Instructions that run through the FPU pipeline (their results need core.pipeline_drain
#: triggers before a MOV reads them; PIMSimulator's kernels put NOPs after MAC and ADD).
FPU_OPS = (Instr.MAC, Instr.ADD)


def encode_instr(
    op: Instr,
    dst: Bank = Bank.EVEN,
    src0: Bank = Bank.EVEN,
    src1: Bank = Bank.EVEN,
    *,
    aam: bool = False,
    imm0: int = 0,
    imm1: int = 0,
    relu: bool = False,
) -> int:
    """A 32-bit CRF word: opcode [31:28], dst [27:25], src0 [24:22], src1 [21:19], AAM [18],
    imm0 [17:11] (JUMP: how far back), imm1 [10:0] (JUMP: extra iterations, NOP: count);
    for FILL and MOV, bit 12 is the ReLU flag (PIMSimulator's position)."""
    if not 0 <= imm0 < 1 << _IMM0_BITS or not 0 <= imm1 < 1 << _IMM1_BITS:
        raise HbmPimError(
            f"{op.name}: imm0 = {imm0} (0 to {(1 << _IMM0_BITS) - 1}) or imm1 = {imm1} "
            f"(0 to {(1 << _IMM1_BITS) - 1}) out of range"
        )
    if relu and (op not in _RELU_OPS or imm0 or imm1):
        raise HbmPimError(f"{op.name}: the ReLU flag exists on FILL and MOV (without imm) only")
    return (
        int(op) << _OPC_SHIFT
        | int(dst) << _DST_SHIFT
        | int(src0) << _SRC0_SHIFT
        | int(src1) << _SRC1_SHIFT
        | int(aam) << _AAM_SHIFT
        | imm0 << (_IMM1_BITS)
        | imm1
        | int(relu) << _RELU_BIT
    )


@dataclass(frozen=True)
class Decoded:
    """One decoded CRF instruction."""

    op: Instr
    dst: Bank
    src0: Bank
    src1: Bank
    aam: bool
    imm0: int
    imm1: int
    relu: bool = False


def decode_instr(word: int) -> Decoded:
    """The fields of CRF word ``word`` (:func:`encode_instr`'s layout)."""
    try:
        op = Instr(word >> _OPC_SHIFT & 0xF)
        relu = op in _RELU_OPS and bool(word >> _RELU_BIT & 1)
        return Decoded(
            op,
            Bank(word >> _DST_SHIFT & 7),
            Bank(word >> _SRC0_SHIFT & 7),
            Bank(word >> _SRC1_SHIFT & 7),
            bool(word >> _AAM_SHIFT & 1),
            0 if relu else word >> _IMM1_BITS & ((1 << _IMM0_BITS) - 1),
            0 if relu else word & ((1 << _IMM1_BITS) - 1),
            relu,
        )
    except ValueError:
        raise HbmPimError(f"CRF word {word:#010x}: unknown opcode or operand") from None


def instr_payload(words: list[int], lanes: int) -> np.ndarray:
    """``words`` packed into 32 B CRF write payloads: ``(ceil(n / per), lanes)`` uint16,
    ``per = lanes / 2`` instructions each (low half first); unused slots are EXIT."""
    per = lanes // 2
    n = -(-len(words) // per)
    full = list(words) + [encode_instr(Instr.EXIT)] * (n * per - len(words))
    w = np.asarray(full, dtype=np.uint32).reshape(n, per)
    out = np.empty((n, lanes), dtype=np.uint16)
    out[:, 0::2] = w & 0xFFFF
    out[:, 1::2] = w >> 16
    return out


#: Where the back ends this model does not run are modelled (``check_backend``'s message).
OTHER_MODELS: dict[BackendKind, str] = {
    BackendKind.AIM: "it runs on the AiM channel TLM (models/channel.py): "
    "pimphony run --kernel gemv --preset {cfg.hardware}",
    BackendKind.ATTACC: "it has its own command-level model (models/attacc.py): "
    "pimphony tune --backend attacc --kernel gemv --shape 1024,1024",
}


def check_backend(cfg: BackendConfig) -> None:
    """Refuse a back end this model cannot run (no timing, no CRF, reserved rows missing)."""
    g, c = cfg.group, cfg.core
    if cfg.kind is not BackendKind.HBM_PIM or cfg.timing is None:
        where = OTHER_MODELS.get(cfg.kind, "no command-level model yet").format(cfg=cfg)
        raise HbmPimError(
            f"back end {cfg.name!r} is of kind {str(cfg.kind)!r}, not an HBM-PIM back end "
            f"with [timing]: {where}"
        )
    if c.crf_entries == 0 or c.input_regs == 0 or c.output_regs == 0:
        raise HbmPimError(
            f"back end {cfg.name!r}: the HBM-PIM model needs a CRF and GRF_A/GRF_B registers "
            f"(core.crf_entries = {c.crf_entries}, input_regs = {c.input_regs}, "
            f"output_regs = {c.output_regs})"
        )
    if c.input_regs > len(GRF_A_COLUMNS) or c.output_regs > len(GRF_B_COLUMNS):
        raise HbmPimError(
            f"back end {cfg.name!r}: the register row addresses {len(GRF_A_COLUMNS)} GRF_A and "
            f"{len(GRF_B_COLUMNS)} GRF_B entries; core has {c.input_regs} and {c.output_regs}"
        )
    if c.crf_entries > len(CRF_COLUMNS) * c.lanes // 2:
        raise HbmPimError(
            f"back end {cfg.name!r}: core.crf_entries = {c.crf_entries} exceeds the "
            f"{len(CRF_COLUMNS)} CRF columns x {c.lanes // 2} instructions"
        )
    need_rows = max(AB_ENTRY_ROW, SB_ENTRY_ROW, g.register_row) + 1
    if g.rows_per_bank < need_rows or g.columns_per_row <= max(MODE_COLUMN, *GRF_B_COLUMNS):
        raise HbmPimError(
            f"back end {cfg.name!r}: the reserved rows/columns (row {need_rows - 1:#x}, column "
            f"{MODE_COLUMN:#x}) do not exist in {g.rows_per_bank} rows x "
            f"{g.columns_per_row} columns"
        )
    if g.bank_groups < 3 or g.banks // g.bank_groups < 2:
        raise HbmPimError(
            f"back end {cfg.name!r}: mode entry writes bank groups 0 and 2, banks 0 and 1; "
            f"the group has {g.bank_groups} bank groups of {g.banks // g.bank_groups} banks"
        )


def mode_banks(cfg: BackendConfig) -> tuple[frozenset[int], frozenset[int]]:
    """The banks whose writes enter AB mode (:data:`AB_ENTRY_BANKS`) and leave it
    (:data:`SB_ENTRY_BANKS`), as bank indices of ``cfg``'s group."""
    per_bg = cfg.group.banks // cfg.group.bank_groups
    enter = frozenset(bg * per_bg + b for bg, b in AB_ENTRY_BANKS)
    return enter, frozenset(bg * per_bg + b for bg, b in SB_ENTRY_BANKS)


def _fail(k: int, cmd: np.void, why: str) -> HbmPimError:
    op = Op(int(cmd["op"]))
    args = " ".join(f"{f}={int(cmd[f])}" for f in OPERAND_FIELDS[op])
    return HbmPimError(f"command {k} ({op.name} {args}): {why}")


# ----------------------------------------------------------------------------- compiled path
# modes and time_stream are compiled by numba (`pimphony tune` times thousands of streams);
# their plain-Python twins are in models/reference.py, held equal by the tests.

_WR = int(Op.WR)


@njit(cache=True)
def _modes_kernel(op, bank, row, col, entry, exit_, ab_row, sb_row, mode_col):
    """Per command the mode it issues in; ``entry`` / ``exit_``: per bank, is it a mode bank."""
    n, nb = op.shape[0], entry.shape[0]
    n_entry, n_exit = entry.sum(), exit_.sum()
    out = np.empty(n, dtype=np.uint8)
    marks = np.zeros(nb, dtype=np.bool_)
    marked, mode = 0, 0
    for k in range(n):
        out[k] = mode
        b = bank[k]
        if op[k] != _WR or col[k] != mode_col or b >= nb:
            continue
        # The writes that leave the current mode: to its row, in its mode banks.
        if mode == 0:
            want_row, banks, needed = ab_row, entry, n_entry
        else:
            want_row, banks, needed = sb_row, exit_, n_exit
        if row[k] != want_row or not banks[b]:
            continue
        if not marks[b]:
            marks[b] = True
            marked += 1
        if marked == needed:
            mode, marked = 1 - mode, 0
            marks[:] = False
    return out


def modes(cfg: BackendConfig, stream: np.ndarray) -> np.ndarray:
    """The mode (:class:`Mode` value, uint8) each command is issued in; mode changes take
    effect after their command."""
    nb = cfg.group.banks
    entry, exit_ = np.zeros(nb, dtype=np.bool_), np.zeros(nb, dtype=np.bool_)
    enter, leave = mode_banks(cfg)
    entry[sorted(enter)], exit_[sorted(leave)] = True, True
    if len(stream) == 0:
        return np.empty(0, dtype=np.uint8)
    return _modes_kernel(
        stream["op"].astype(np.int64), stream["bank"].astype(np.int64),
        stream["row"].astype(np.int64), stream["col"].astype(np.int64),
        entry, exit_, AB_ENTRY_ROW, SB_ENTRY_ROW, MODE_COLUMN,
    )  # fmt: skip


@lru_cache(maxsize=64)
def bank_rules(t: PimTiming) -> BankRules:
    """The constraint table of a pseudo-channel with timing ``t`` (:func:`time_stream`'s
    rules; bank group is the only level below the channel)."""
    act, pre, rd, wr = (frozenset({int(o)}) for o in Op)
    col = rd | wr
    bank, bg, channel = Level.BANK, Level.BANK_GROUP, Level.CHANNEL
    same, other = Match.NEWEST_SAME, Match.NEWEST_OTHER
    c = Constraint
    return BankRules(
        ops=len(Op),
        constraints=(
            c(pre, act, bank, t.tRP),
            c(act, act, bank, t.tRC),
            c(act, act, bg, t.tRRD_L, match=same),
            c(act, act, bg, t.tRRD_S, match=other),
            c(act, act, channel, t.tFAW, window=4),
            c(act, pre, bank, t.tRAS),
            c(rd, pre, bank, t.tRTP),
            c(wr, pre, bank, t.write_to_precharge),
            c(col, col, bg, t.tCCD_L, match=same),
            c(col, col, bg, t.tCCD_S, match=other),
            c(act, rd, bank, t.tRCD_RD),
            c(act, wr, bank, t.tRCD_WR),
            c(wr, rd, channel, t.write_to_read),
            c(rd, wr, channel, t.read_to_write),
        ),
        completion=(t.tRCD_RD, t.tRP, t.RL + t.burst_cycles, t.WL + t.burst_cycles),
    )


@lru_cache(maxsize=64)
def _nodes(g: GroupSpec) -> np.ndarray:
    zero = np.zeros(g.banks, np.int64)
    return node_table(g.banks, np.arange(g.banks) // (g.banks // g.bank_groups), zero, zero)


def time_stream(
    cfg: BackendConfig, stream: np.ndarray, engine: Engine = dram_rules.issue
) -> Timeline:
    """Issue each command in order at the first cycle every rule allows.

    Rules (``docs/dcc.md``): one command per cycle, in stream order; ACT waits tRP after its
    bank's PRE, tRC after its previous ACT, tRRD_S/L after any ACT (same bank group: L) and
    tFAW after the fourth-last; RD/WR wait tRCD_RD/tRCD_WR after the ACT, tCCD_L after the
    previous column command (tCCD_S in SB mode across bank groups; AB modes always L), a RD
    WL + BL/2 + tWTR_L after a WR and a WR RL + BL/2 + tRTRS - WL after a RD; PRE waits tRAS,
    tRTP after a RD and WL + BL/2 + tWR after a WR. In AB modes ACT/PRE/RD/WR address every
    bank; an all-bank ACT counts once for tRRD/tFAW. The kernel ends when the last command
    completes: a RD RL + BL/2, a WR WL + BL/2, an ACT tRCD_RD and a PRE tRP after issue.
    The rules are :func:`bank_rules`' table, run by ``engine`` (the compiled
    :func:`models.dram_rules.issue`).
    """
    check_backend(cfg)
    g = cfg.group
    op = stream["op"].astype(np.int64)
    if len(stream) == 0:
        return Timeline.of(Op, op)
    mode = modes(cfg, stream)
    bank = stream["bank"].astype(np.int64)
    all_banks = mode != int(Mode.SB)
    bad = np.flatnonzero(~all_banks & (bank >= g.banks))
    if len(bad):
        raise _fail(int(bad[0]), stream[bad[0]], f"bank {int(bank[bad[0]])} >= banks = {g.banks}")
    cmds = Commands.of(op, bank, wide=all_banks)
    return Timeline.of(Op, op, engine(bank_rules(cfg.timing), _nodes(g), cmds))


@dataclass
class PimState:
    """Values of one PIM group replicated over ``channels`` pseudo-channels (the same stream
    runs on each; data differ): bank rows (allocated on first use), GRF_A, GRF_B, CRF, and
    what ran."""

    channels: int
    banks: int
    cols: int
    lanes: int
    units: int
    input_regs: int
    output_regs: int
    rows: dict[int, np.ndarray] = field(default_factory=dict)
    grf_a: np.ndarray = field(init=False)
    grf_b: np.ndarray = field(init=False)
    crf: list[int] = field(default_factory=list)
    macs: int = 0
    triggers: int = 0

    def __post_init__(self) -> None:
        self.grf_a = np.zeros((self.channels, self.units, self.input_regs, self.lanes), np.float16)
        self.grf_b = np.zeros((self.channels, self.units, self.output_regs, self.lanes), np.float16)

    @classmethod
    def for_backend(cls, cfg: BackendConfig, channels: int) -> PimState:
        """An empty state (all banks zero) of ``channels`` groups of back end ``cfg``."""
        g, c = cfg.group, cfg.core
        return cls(channels, g.banks, g.columns_per_row, c.lanes, cfg.cores_per_group,
                   c.input_regs, c.output_regs)  # fmt: skip

    def row(self, r: int) -> np.ndarray:
        """Row ``r`` of every bank: ``(channels, banks, cols, lanes)`` FP16 (a view)."""
        if r not in self.rows:
            self.rows[r] = np.zeros((self.channels, self.banks, self.cols, self.lanes), np.float16)
        return self.rows[r]


class _Unit:
    """The CRF sequencer shared by every unit of a group (they run in lockstep).

    Each JUMP keeps its own repeat counter (keyed by its CRF slot), so loops nest: an outer
    JUMP re-enters an inner loop with a fresh count, as PIMSimulator's kernels rely on (an
    outer JUMP around the element-wise body). The FPU drain is tracked per register file:
    a MOV out of GRF_A or GRF_B waits ``pipeline_drain`` triggers after the last MAC/ADD that
    wrote that file."""

    def __init__(self, cfg: BackendConfig, st: PimState) -> None:
        self.cfg, self.st = cfg, st
        self.per = cfg.core.banks
        self.reset()

    def reset(self) -> None:
        self.pc, self.nop_left = 0, -1
        self.loops: dict[int, int] = {}
        self.drain: dict[Bank, tuple[int, Instr]] = {}

    def _resolve(self, k: int, cmd: np.void) -> Decoded:
        for _ in range(self.cfg.core.crf_entries + 1):
            if self.pc >= len(self.st.crf):
                raise _fail(k, cmd, f"CRF program counter {self.pc} past the program")
            ins = decode_instr(self.st.crf[self.pc])
            if ins.op is Instr.JUMP:
                left = self.loops.get(self.pc, ins.imm1)
                if left > 0:
                    self.loops[self.pc] = left - 1
                    self.pc -= ins.imm0
                else:
                    self.loops.pop(self.pc, None)
                    self.pc += 1
                continue
            if ins.op is Instr.EXIT:
                raise _fail(k, cmd, "a PIM trigger after the CRF program's EXIT")
            return ins
        raise _fail(k, cmd, "the CRF program jumps without executing (a JUMP loop)")

    def _regs(self, which: Bank) -> np.ndarray:
        return self.st.grf_a if which is Bank.GRF_A else self.st.grf_b

    def _bank_slice(self, k: int, cmd: np.void, operand: Bank) -> np.ndarray:
        pos = int(operand)
        if pos >= self.per:
            raise _fail(k, cmd, f"operand {operand.name}: a unit has {self.per} bank(s)")
        if int(cmd["bank"]) % self.per != pos:
            raise _fail(
                k, cmd, f"the command addresses bank position {int(cmd['bank']) % self.per} but "
                f"the CRF instruction uses {operand.name}"
            )  # fmt: skip
        return self.st.row(int(cmd["row"]))[:, pos :: self.per, int(cmd["col"]), :]

    def _operand(self, k: int, cmd: np.void, which: Bank, a: int, b: int) -> np.ndarray:
        """A view of operand ``which``: a register entry (index from AAM) or the bank vector."""
        if which is Bank.GRF_A:
            return self.st.grf_a[:, :, a, :]
        if which is Bank.GRF_B:
            return self.st.grf_b[:, :, b, :]
        return self._bank_slice(k, cmd, which)

    def _aam(self, cmd: np.void) -> tuple[int, int]:
        """(GRF_A, GRF_B) indices from the address (address-aligned mode): GRF_B from the
        column's low bits, GRF_A from the bits above, row bits included."""
        lin = int(cmd["row"]) * self.st.cols + int(cmd["col"])
        b = lin % self.st.output_regs
        return (lin // self.st.output_regs) % self.st.input_regs, b

    def trigger(self, k: int, cmd: np.void, is_read: bool) -> None:
        ins = self._resolve(k, cmd)
        self.st.triggers += 1
        drain = self.drain
        self.drain = {f: (n - 1, op) for f, (n, op) in drain.items() if n > 1}
        if ins.op is Instr.NOP:
            if self.nop_left < 0:
                self.nop_left = max(1, ins.imm1)
            self.nop_left -= 1
            if self.nop_left == 0:
                self.nop_left = -1
                self.pc += 1
            return
        a, b = self._aam(cmd) if ins.aam else (0, 0)
        if ins.op in (Instr.MAC, Instr.FILL, Instr.ADD) and not is_read:
            raise _fail(k, cmd, f"{ins.op.name} is triggered by a RD, not a WR")
        if ins.op is Instr.MOV and is_read:
            raise _fail(k, cmd, "MOV (register to bank) is triggered by a WR, not a RD")
        if ins.op is Instr.MAC:
            w = self._bank_slice(k, cmd, ins.src0)
            acc = self.st.grf_b[:, :, b, :]
            self.st.grf_b[:, :, b, :] = acc + w * self.st.grf_a[:, :, a, :]
            self.st.macs += 1
        elif ins.op is Instr.ADD:
            total = self._operand(k, cmd, ins.src0, a, b) + self._operand(k, cmd, ins.src1, a, b)
            self._operand(k, cmd, ins.dst, a, b)[...] = total
        elif ins.op in _RELU_OPS:
            if ins.op is Instr.MOV and ins.src0 in drain:
                left, last = drain[ins.src0]
                raise _fail(
                    k, cmd, f"MOV reads {ins.src0.name} {self.cfg.core.pipeline_drain - left} "
                    f"trigger(s) after the last {last.name}; the FPU pipeline needs "
                    f"core.pipeline_drain = {self.cfg.core.pipeline_drain} (issue dummy reads)"
                )  # fmt: skip
            vec = self._operand(k, cmd, ins.src0, a, b).copy()
            if ins.relu:  # PIMSimulator doPIMBlock: a lane with its sign bit set becomes 0
                vec[vec.view(np.uint16) >= 0x8000] = 0
            self._operand(k, cmd, ins.dst, a, b)[...] = vec
        if ins.op in FPU_OPS and self.cfg.core.pipeline_drain:
            self.drain[ins.dst] = (self.cfg.core.pipeline_drain, ins.op)
        self.pc += 1


def execute(
    cfg: BackendConfig, stream: np.ndarray, payload: np.ndarray, state: PimState
) -> PimState:
    """Run ``stream`` on ``state`` (modified and returned): modes, open rows, register
    writes, CRF triggers. Errors name the command: a column command to a row that is not
    open, an unknown register column, a trigger without a program, a MOV before the drain."""
    check_backend(cfg)
    g, c = cfg.group, cfg.core
    if c.dtype is not PimDtype.FP16:
        raise HbmPimError(
            f"back end {cfg.name!r}: core.dtype = {str(c.dtype)!r}: values are computed in FP16 "
            "only (numpy has no bfloat16); time_stream times any data type"
        )
    issued_in = modes(cfg, stream)
    open_row = np.full(g.banks, -1, dtype=np.int64)
    unit = _Unit(cfg, state)
    pim_on = False
    for k in range(len(stream)):
        cmd = stream[k]
        op, bank, row, col = Op(int(cmd["op"])), int(cmd["bank"]), int(cmd["row"]), int(cmd["col"])
        mode = Mode(int(issued_in[k]))
        if mode is not Mode.SB and pim_on:
            mode = Mode.AB_PIM
        sel = slice(None) if mode is not Mode.SB else slice(bank, bank + 1)
        if bank >= g.banks:
            raise _fail(k, cmd, f"bank {bank} >= banks = {g.banks}")
        if row >= g.rows_per_bank or col >= g.columns_per_row:
            raise _fail(k, cmd, f"outside {g.rows_per_bank} rows x {g.columns_per_row} columns")
        if op is Op.ACT:
            if (open_row[sel] >= 0).any():
                raise _fail(k, cmd, "ACT to a bank with an open row (precharge first)")
            open_row[sel] = row
            continue
        if op is Op.PRE:
            open_row[sel] = -1
            continue
        if (open_row[sel] != row).any():
            raise _fail(k, cmd, f"row {row} is not open (open rows: {sorted(set(open_row[sel]))})")
        data = int(cmd["data"])
        if op is Op.WR and not 0 <= data < len(payload):
            raise _fail(k, cmd, f"data {data} is not a payload row (0 to {len(payload) - 1})")
        vec = payload[data] if op is Op.WR else None
        if mode is not Mode.SB and row == g.register_row:
            if op is Op.RD:
                continue  # register reads return values to the host; nothing changes
            assert vec is not None
            if col == CTRL_COLUMN:
                pim_on = bool(vec[0] & 1)
                unit.reset()
                if vec[1] & 1:
                    state.grf_b[...] = 0
            elif col in CRF_COLUMNS:
                words = (vec[0::2].astype(np.uint32) | vec[1::2].astype(np.uint32) << 16).tolist()
                base = (col - CRF_COLUMNS.start) * len(words)
                state.crf.extend([0] * max(0, base + len(words) - len(state.crf)))
                state.crf[base : base + len(words)] = words
                del state.crf[c.crf_entries :]
            elif col - GRF_A_COLUMNS.start in range(c.input_regs):
                state.grf_a[:, :, col - GRF_A_COLUMNS.start, :] = vec.view(np.float16)
            elif col - GRF_B_COLUMNS.start in range(c.output_regs):
                state.grf_b[:, :, col - GRF_B_COLUMNS.start, :] = vec.view(np.float16)
            else:
                raise _fail(k, cmd, f"column {col} of the register row is no register")
            continue
        if mode is Mode.AB_PIM:
            if op is Op.WR and (row, col) == (SB_ENTRY_ROW, MODE_COLUMN):
                raise _fail(k, cmd, "the mode-exit write while PIM is on (write the control "
                            "word's PIM bit 0 first)")  # fmt: skip
            unit.trigger(k, cmd, is_read=op is Op.RD)
        elif op is Op.WR and (row, col) not in ((AB_ENTRY_ROW, MODE_COLUMN),
                                                (SB_ENTRY_ROW, MODE_COLUMN)):  # fmt: skip
            assert vec is not None
            state.row(row)[:, sel, col, :] = vec.view(np.float16)
    return state
