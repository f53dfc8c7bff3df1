"""GEMV (and batched GEMV) lowered to an HBM-PIM command stream (PIM-SHERPA Algorithm 1).

``Y[b] = W @ X[b]`` with ``W`` ``(dout, din)`` in FP16 on ``channels`` PIM groups of a
:class:`models.backends.BackendConfig` run by :mod:`models.hbm_pim`. The loop of Algorithm 1
(seed 004), per output tile and batch row: write the inputs to the register file (GRF_A),
one RD per weight column to trigger a MAC in every unit, dummy RDs to drain the pipeline,
WRs to move the outputs (GRF_B) back to the bank.

Mapping (Samsung PIMSimulator's GEMV, ``PIMKernel::executeGemv``): an **input tile** is
``input_regs x lanes`` inputs (128 on HBM-PIM); an **output tile** gives each unit
``output_regs`` outputs (8), so ``channels x units x output_regs`` outputs per tile. Each
unit holds, per (output tile, input tile), ``input_regs x output_regs`` 32 B weight vectors;
input tiles alternate over the unit's banks. A weight vector (a, e) is ``W[o_e, 16 a ...
16 a + 15]`` for the unit's output ``o_e``; the MAC adds its product with GRF_A[a]
lane-wise into GRF_B[e] (address-aligned mode), and the host sums the 16 lanes of each
output (PIMSimulator's adder tree). Shapes are zero-padded to whole tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from pimphony.models.backends import BackendConfig
from pimphony.models.errors import PimphonyError
from pimphony.models.hbm_pim import (
    AB_ENTRY_BANKS,
    AB_ENTRY_ROW,
    COMMAND_DTYPE,
    CRF_COLUMNS,
    CTRL_COLUMN,
    GRF_A_COLUMNS,
    MODE_COLUMN,
    SB_ENTRY_BANKS,
    SB_ENTRY_ROW,
    Bank,
    Instr,
    Op,
    PimState,
    check_backend,
    encode_instr,
    instr_payload,
)

__all__ = [
    "JUMP_MAX",
    "PIM_ROWS",
    "Emitter",
    "GemvLayout",
    "PimGemvError",
    "PimKernel",
    "gemv_layout",
    "gemv_passes",
    "gemv_program",
    "lane_tree_sum",
    "lower_gemv",
    "mode_entry",
    "mode_exit",
    "place_weights",
    "read_outputs",
    "result_address",
    "weight_address",
]

PIM_ROWS = 0x1000
"""Rows that trigger PIM operations: row address bit 12 clear (PIMSimulator
``PIMRank::isToggleCond``); weights and results are placed below it."""
JUMP_MAX = 2047
"""Largest JUMP repeat count of one CRF instruction (:func:`models.hbm_pim.encode_instr`)."""


class PimGemvError(PimphonyError, ValueError):
    """A GEMV shape that does not fit the back end, or a back end that cannot run it."""


@dataclass(frozen=True)
class GemvLayout:
    """Sizes of one lowered GEMV: tiles, padding and where weights and results live."""

    dout: int
    din: int
    batch: int
    channels: int
    units: int
    banks_per_unit: int
    lanes: int
    input_regs: int
    output_regs: int
    cols: int
    out_tiles: int
    in_tiles: int
    weight_rows: int
    result_rows: int
    weight_sets: int = 1  # weight matrices held: 1 (shared) or batch (one per batch row)

    @property
    def set_vectors(self) -> int:
        """Weight vectors of one matrix per bank position: out_tiles x slots x A x R."""
        return self.out_tiles * self.slots * self.tile_vectors

    @property
    def tile_vectors(self) -> int:
        """Weight vectors of one unit per (output tile, input tile): A x R."""
        return self.input_regs * self.output_regs

    @property
    def outputs_per_tile(self) -> int:
        """Outputs of one output tile over every unit of every channel."""
        return self.channels * self.units * self.output_regs

    @property
    def inputs_per_tile(self) -> int:
        """Inputs of one input tile: input_regs x lanes."""
        return self.input_regs * self.lanes

    @property
    def slots(self) -> int:
        """Input tiles per bank position, per output tile (the longer position)."""
        return -(-self.in_tiles // self.banks_per_unit)

    @property
    def dout_pad(self) -> int:
        """Output rows after padding to whole output tiles."""
        return self.out_tiles * self.outputs_per_tile

    @property
    def din_pad(self) -> int:
        """Inputs after padding to whole input tiles."""
        return self.in_tiles * self.inputs_per_tile

    @property
    def mac_triggers(self) -> int:
        """MAC triggers of the whole GEMV on one group: every (output tile, batch row, input
        tile) runs ``tile_vectors`` of them."""
        return self.out_tiles * self.batch * self.in_tiles * self.tile_vectors

    def macs_per_pass(self, position: int) -> int:
        """MAC triggers of bank position ``position`` per (output tile, batch row)."""
        return len(range(position, self.in_tiles, self.banks_per_unit)) * self.tile_vectors


@dataclass(frozen=True)
class PimKernel:
    """A lowered kernel: the command stream, its payloads and its layout."""

    layout: GemvLayout
    stream: np.ndarray
    payload: np.ndarray
    program: tuple[int, ...]


def gemv_layout(
    cfg: BackendConfig,
    dout: int,
    din: int,
    batch: int = 1,
    channels: int | None = None,
    *,
    per_batch: bool = False,
) -> GemvLayout:
    """Tile sizes and row use of ``(dout, din)`` x ``batch`` on ``channels`` groups (default:
    one device's); with ``per_batch`` each batch row has its own matrix (attention's
    per-head K or V), held one after the other. :class:`PimGemvError` if a size is not
    positive or the weights and results do not fit the PIM rows of a bank."""
    try:
        check_backend(cfg)
    except PimphonyError as exc:
        raise PimGemvError(str(exc)) from None
    g, c = cfg.group, cfg.core
    channels = cfg.system.groups_per_device if channels is None else channels
    for name, value in (("dout", dout), ("din", din), ("batch", batch), ("channels", channels)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PimGemvError(f"{name} = {value!r}: must be a positive integer")
    if channels > cfg.groups:
        raise PimGemvError(
            f"channels = {channels}: the back end {cfg.name!r} has {cfg.groups} groups "
            f"({cfg.system.devices} devices x {cfg.system.groups_per_device})"
        )
    cols = g.columns_per_row
    if cols % c.output_regs:
        raise PimGemvError(
            f"back end {cfg.name!r}: {cols} columns per row is not a multiple of "
            f"output_regs = {c.output_regs} (results could not be moved address-aligned)"
        )
    units = cfg.cores_per_group
    out_tiles = -(-dout // (channels * units * c.output_regs))
    in_tiles = -(-din // (c.input_regs * c.lanes))
    slots = -(-in_tiles // c.banks)
    weight_sets = batch if per_batch else 1
    weight_vectors = weight_sets * out_tiles * slots * c.input_regs * c.output_regs
    weight_rows = -(-weight_vectors // cols)
    result_rows = -(-(out_tiles * batch * c.output_regs) // cols)
    if weight_rows + result_rows > PIM_ROWS:
        per_bank = (weight_rows + result_rows) * g.row_bytes
        raise PimGemvError(
            f"GEMV {dout} x {din} (batch {batch}) on {channels} channels needs "
            f"{weight_rows + result_rows:,} rows ({per_bank:,} B) per bank; "
            f"{PIM_ROWS:,} rows trigger PIM (use more channels or split the matrix)"
        )
    return GemvLayout(
        dout, din, batch, channels, units, c.banks, c.lanes, c.input_regs, c.output_regs,
        cols, out_tiles, in_tiles, weight_rows, result_rows, weight_sets,
    )  # fmt: skip


def gemv_program(cfg: BackendConfig, lay: GemvLayout) -> list[int]:
    """The CRF program of one (output tile, batch row) pass: MAC loops per bank position,
    NOP for the drain, MOV of GRF_B to the bank, EXIT."""
    prog: list[int] = []
    for pos in range(lay.banks_per_unit):
        left = lay.macs_per_pass(pos)
        while left:
            n = min(left, JUMP_MAX + 1)
            prog.append(encode_instr(Instr.MAC, Bank.GRF_B, Bank(pos), Bank.GRF_A, aam=True))
            if n > 1:
                prog.append(encode_instr(Instr.JUMP, imm0=1, imm1=n - 1))
            left -= n
    if cfg.core.pipeline_drain:
        prog.append(encode_instr(Instr.NOP, imm1=cfg.core.pipeline_drain))
    prog.append(encode_instr(Instr.MOV, Bank.EVEN, Bank.GRF_B, aam=True))
    if lay.output_regs > 1:
        prog.append(encode_instr(Instr.JUMP, imm0=1, imm1=lay.output_regs - 1))
    prog.append(encode_instr(Instr.EXIT))
    if len(prog) > cfg.core.crf_entries:
        raise PimGemvError(
            f"the GEMV program needs {len(prog)} CRF instructions (din = {lay.din}: "
            f"{lay.macs_per_pass(0):,} MACs per pass in loops of {JUMP_MAX + 1}); the CRF holds "
            f"{cfg.core.crf_entries}"
        )
    return prog


def weight_address(lay: GemvLayout, j: int, i: int, t: int, s: int = 0) -> tuple[int, int, int]:
    """(bank position, row, column) of weight vector ``t`` of output tile ``j``, input tile
    ``i`` of matrix ``s`` (0 unless ``weight_sets > 1``): position ``i % banks_per_unit``,
    slot ``j x slots + i // banks_per_unit`` after ``s`` matrices."""
    lin = s * lay.set_vectors + (j * lay.slots + i // lay.banks_per_unit) * lay.tile_vectors + t
    return i % lay.banks_per_unit, lin // lay.cols, lin % lay.cols


def result_address(lay: GemvLayout, j: int, b: int, e: int) -> tuple[int, int]:
    """(row, column) of output ``e`` of output tile ``j``, batch row ``b`` in each unit's first
    bank: the rows after the weights, ``output_regs`` columns per (tile, batch row)."""
    lin = lay.weight_rows * lay.cols + (j * lay.batch + b) * lay.output_regs + e
    return lin // lay.cols, lin % lay.cols


class Emitter:
    """Commands with an open-page controller's row handling: PRE + ACT when a column command
    needs another row than the open one. Commands are kept as blocks of
    :data:`models.hbm_pim.COMMAND_DTYPE` (:meth:`columns` appends many at once)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int, int]] = []  # single commands not yet a block
        self.blocks: list[np.ndarray] = []
        self.open = -1

    def cmd(self, op: Op, bank: int = 0, row: int = 0, col: int = 0, data: int = -1) -> None:
        """Append one command as is."""
        self.rows.append((int(op), bank, row, col, data))

    def column(self, op: Op, bank: int, row: int, col: int, data: int = -1) -> None:
        """Append a column command, opening its row first if another one is open."""
        if self.open != row:
            if self.open >= 0:
                self.cmd(Op.PRE)
            self.cmd(Op.ACT, 0, row)
            self.open = row
        self.cmd(op, bank, row, col, data)

    def _flush(self) -> None:
        if self.rows:
            out = np.zeros(len(self.rows), dtype=COMMAND_DTYPE)
            cols = list(zip(*self.rows, strict=True))
            for name, values in zip(COMMAND_DTYPE.names, cols, strict=True):
                out[name] = values
            self.blocks.append(out)
            self.rows = []

    def columns(
        self, op: ArrayLike, bank: ArrayLike, row: ArrayLike, col: ArrayLike, data: ArrayLike = -1
    ) -> None:
        """Append column commands given as arrays (broadcast to one length), each handled as
        :meth:`column` would: a PRE (if a row is open) and an ACT before every row change."""
        op, bank, row, col, data = np.broadcast_arrays(
            *(np.ravel(a) for a in (op, bank, row, col, data))
        )
        n = len(row)
        if n == 0:
            return
        self._flush()
        before = np.empty(n, dtype=np.int64)
        before[0], before[1:] = self.open, row[:-1]
        switch = row != before
        pre = switch & (before >= 0)
        # place of each column command: after every PRE / ACT inserted up to it
        at = np.arange(n) + np.cumsum(switch) + np.cumsum(pre)
        out = np.zeros(n + int(switch.sum()) + int(pre.sum()), dtype=COMMAND_DTYPE)
        for name, values in zip(COMMAND_DTYPE.names, (op, bank, row, col, data), strict=True):
            out[name][at] = values
        acts = at[switch] - 1
        out["op"][acts] = int(Op.ACT)
        out["row"][acts] = row[switch]
        out["data"][acts] = -1
        pres = at[pre] - 2
        out["op"][pres] = int(Op.PRE)
        out["data"][pres] = -1
        self.blocks.append(out)
        self.open = int(row[-1])

    def array(self) -> np.ndarray:
        """The commands as a :data:`models.hbm_pim.COMMAND_DTYPE` array."""
        self._flush()
        if not self.blocks:
            return np.zeros(0, dtype=COMMAND_DTYPE)
        return np.concatenate(self.blocks)


def mode_entry(cfg: BackendConfig, em: Emitter, zero: int, crf: range) -> None:
    """SB -> AB (ACT, WR, PRE on each entry bank), then the CRF writes (payload rows
    ``crf``) on the register row; ``zero`` is an all-zero payload row."""
    per_bg = cfg.group.banks // cfg.group.bank_groups
    for bg, b in AB_ENTRY_BANKS:
        bank = bg * per_bg + b
        em.cmd(Op.ACT, bank, AB_ENTRY_ROW)
        em.cmd(Op.WR, bank, AB_ENTRY_ROW, MODE_COLUMN, zero)
        em.cmd(Op.PRE, bank)
    for k, src in enumerate(crf):
        em.column(Op.WR, 0, cfg.group.register_row, CRF_COLUMNS.start + k, src)


def mode_exit(cfg: BackendConfig, em: Emitter, zero: int) -> None:
    """Close the open row, then AB -> SB (the two exit-bank writes)."""
    per_bg = cfg.group.banks // cfg.group.bank_groups
    em.cmd(Op.PRE)
    em.open = -1
    for bg, b in SB_ENTRY_BANKS:
        em.column(Op.WR, bg * per_bg + b, SB_ENTRY_ROW, MODE_COLUMN, zero)


def lane_tree_sum(lanes: np.ndarray) -> np.ndarray:
    """The last axis summed by an FP16 adder tree (halves added pairwise, as PIMSimulator's
    host reduction)."""
    while lanes.shape[-1] > 1:
        half = lanes.shape[-1] // 2
        lanes = lanes[..., :half] + lanes[..., half : 2 * half]
    return lanes[..., 0]


def gemv_passes(
    cfg: BackendConfig, lay: GemvLayout, em: Emitter, inputs: tuple, on: int, off: int
) -> None:
    """Append Algorithm 1's loop to ``em``: per output tile and batch row, the control word
    (payload row ``on``: PIM on, GRF_B zeroed), per input tile (even bank's first) its
    ``input_regs`` input commands and ``input_regs x output_regs`` MAC reads, the drain's dummy
    reads, ``output_regs`` MOV writes to the result row, the control word ``off``.

    ``inputs``: (op, bank, row, col, data) of input command ``a`` of batch row ``b`` and input
    tile ``i``, each broadcastable to ``(batch, in_tiles, input_regs)`` (GRF_A writes through
    the register row, or bank reads that FILL GRF_A)."""
    J, B, T, A, R = lay.out_tiles, lay.batch, lay.in_tiles, lay.input_regs, lay.output_regs
    reg, drain = cfg.group.register_row, cfg.core.pipeline_drain
    order = np.array(sorted(range(T), key=lambda i: (i % lay.banks_per_unit, i)))
    j = np.arange(J)[:, None, None, None]
    s = np.arange(B)[:, None, None] if lay.weight_sets > 1 else 0  # batch row b's matrix
    tiles = (J, B, T, A * R)
    pos, row, col = weight_address(lay, j, order[:, None], np.arange(A * R), s)
    mac = (np.broadcast_to(v, tiles) for v in (int(Op.RD), pos, row, col, -1))
    inp = (np.broadcast_to(np.broadcast_to(v, (B, T, A))[:, order], (J, B, T, A)) for v in inputs)
    s_last = s[..., 0] if lay.weight_sets > 1 else 0
    last = weight_address(lay, j[..., 0], order[-1], A * R - 1, s_last)  # the dummy reads
    e = np.arange(R)
    res_row, res_col = result_address(lay, j[..., 0], np.arange(B)[:, None], e)
    segments = [
        ((J, B, 1), (int(Op.WR), 0, reg, CTRL_COLUMN, on)),
        ((J, B, T * (A + A * R)), tuple(
            np.concatenate([x, m], axis=3).reshape(J, B, -1) for x, m in zip(inp, mac, strict=True)
        )),
        ((J, B, drain), (int(Op.RD), *last, -1)),
        ((J, B, R), (int(Op.WR), 0, res_row, res_col, off)),
        ((J, B, 1), (int(Op.WR), 0, reg, CTRL_COLUMN, off)),
    ]  # fmt: skip
    fields = [
        np.concatenate([np.broadcast_to(seg[1][f], seg[0]) for seg in segments], axis=2)
        for f in range(5)
    ]
    em.columns(*fields)


def lower_gemv(
    cfg: BackendConfig,
    dout: int,
    din: int,
    x: np.ndarray | None = None,
    *,
    batch: int = 1,
    channels: int | None = None,
    per_batch: bool = False,
) -> PimKernel:
    """The command stream of ``Y = W @ X`` (``x``: ``(batch, din)``, zeros if None); with
    ``per_batch``, ``Y[b] = W_b @ X[b]``, each batch row's pass reading its own matrix.

    Order: SB -> AB (ACT, WR, PRE on each entry bank), CRF program, then per output tile
    and batch row: PIM on (GRF_B zeroed), per input tile ``input_regs`` GRF_A writes and its
    ``input_regs x output_regs`` MAC reads, ``pipeline_drain`` dummy reads, ``output_regs``
    MOV writes, PIM off; finally AB -> SB. Register writes need the register row open, so
    each input tile costs a row switch each way (as PIMSimulator issues them).
    """
    lay = gemv_layout(cfg, dout, din, batch, channels, per_batch=per_batch)
    g, c = cfg.group, cfg.core
    if x is None:
        x = np.zeros((batch, din), dtype=np.float16)
    x = np.asarray(x, dtype=np.float16)
    if x.ndim == 1:
        x = x[None, :]
    if x.shape != (batch, din):
        raise PimGemvError(f"inputs of shape {x.shape}: expected (batch, din) = ({batch}, {din})")
    xp = np.zeros((batch, lay.din_pad), dtype=np.float16)
    xp[:, :din] = x
    prog = gemv_program(cfg, lay)
    crf = instr_payload(prog, c.lanes)
    zero = np.zeros((1, c.lanes), np.uint16)
    on = zero.copy()
    on[0, :2] = 1  # PIM op mode on, GRF_B zeroed (PIMSimulator setCrf / controlPIM)
    grf_a = xp.reshape(batch, lay.in_tiles, lay.input_regs, c.lanes).view(np.uint16)
    payload = np.concatenate([zero, on, crf, grf_a.reshape(-1, c.lanes)])
    P_ZERO, P_ON, P_CRF, P_GRF = 0, 1, 2, 2 + len(crf)
    reg = g.register_row
    em = Emitter()
    mode_entry(cfg, em, P_ZERO, range(P_CRF, P_GRF))
    a = np.arange(lay.input_regs)
    grf = P_GRF + (np.arange(batch)[:, None, None] * lay.in_tiles
                   + np.arange(lay.in_tiles)[:, None]) * lay.input_regs + a  # fmt: skip
    gemv_passes(cfg, lay, em, (int(Op.WR), 0, reg, GRF_A_COLUMNS.start + a, grf), P_ON, P_ZERO)
    mode_exit(cfg, em, P_ZERO)
    return PimKernel(lay, em.array(), payload, tuple(prog))


def place_weights(cfg: BackendConfig, lay: GemvLayout, w: np.ndarray) -> PimState:
    """A state whose banks hold ``w`` (``(dout, din)``, FP16) in the PIM layout."""
    w = np.asarray(w)
    if lay.weight_sets != 1:
        raise PimGemvError(
            f"the layout holds {lay.weight_sets} matrices (one per batch row); place_weights "
            "places one"
        )
    if w.shape != (lay.dout, lay.din):
        raise PimGemvError(f"weights of shape {w.shape}: expected ({lay.dout}, {lay.din})")
    st = PimState.for_backend(cfg, lay.channels)
    wp = np.zeros((lay.dout_pad, lay.din_pad), dtype=np.float16)
    wp[: lay.dout, : lay.din] = w
    # Output o = j*(C*U*R) + ch*(U*R) + u*R + e; input = i*(A*L) + a*L + lane.
    C, U, R, A, L, T = (lay.channels, lay.units, lay.output_regs, lay.input_regs,
                        lay.lanes, lay.in_tiles)  # fmt: skip
    v = wp.reshape(lay.out_tiles, C, U, R, T, A, L)  # j ch u e i a lane
    j, i, a, e = np.meshgrid(
        np.arange(lay.out_tiles), np.arange(T), np.arange(A), np.arange(R), indexing="ij"
    )
    lin = (j * lay.slots + i // lay.banks_per_unit) * lay.tile_vectors + a * R + e
    pos = i % lay.banks_per_unit
    dense = np.zeros((C, cfg.group.banks, lay.weight_rows + lay.result_rows, lay.cols, L),
                     dtype=np.float16)  # fmt: skip
    for u in range(U):
        vals = v[j, :, u, e, i, a, :]  # (j, i, a, e, ch, lane)
        dense[:, u * lay.banks_per_unit + pos, lin // lay.cols, lin % lay.cols, :] = np.moveaxis(
            vals, 4, 0
        )
    st.rows = {r: dense[:, :, r] for r in range(dense.shape[2])}
    return st


def read_outputs(lay: GemvLayout, st: PimState) -> np.ndarray:
    """``Y`` ``(batch, dout)`` from the result rows: each output's lanes summed by an FP16
    adder tree (halves added pairwise, as PIMSimulator's host reduction)."""
    C, U, R = lay.channels, lay.units, lay.output_regs
    y = np.zeros((lay.batch, lay.dout_pad), dtype=np.float16)
    for j in range(lay.out_tiles):
        for b in range(lay.batch):
            for e in range(R):
                row, col = result_address(lay, j, b, e)
                lanes = st.row(row)[:, :: lay.banks_per_unit, col, :]  # (ch, u, lanes)
                o = j * C * U * R + np.arange(C)[:, None] * U * R + np.arange(U)[None, :] * R + e
                y[b, o.ravel()] = lane_tree_sum(lanes).ravel()
    return y[:, : lay.dout]
