"""DCC's kernels lowered to one HBM-PIM group (a pseudo-channel): the back end's group lowerings.

``GROUP_LOWERINGS[kernel](cfg, sizes, cores)`` gives the :class:`GroupProgram` of one group's
share (:mod:`compiler.dcc.lowering`): ``sizes`` per dimension set, ``cores`` PIM units per
set, each unit taking ``ceil(size / cores)`` of each set (unit ``u`` is core coordinate
``unravel_index(u, cores)``; the last coordinates may hold less or nothing). Every unit runs
the same broadcast stream on its own banks (padding where its share is short); units beyond
``prod(cores)`` and empty shares compute on whatever their banks hold and are not read.

- GEMV / batched GEMV (``n, o, i``): PIM-SHERPA Algorithm 1 per unit. When every unit uses
  the same inputs (``c_n = c_i = 1``) they are broadcast into GRF_A through the register row
  (:func:`compiler.pim_gemv.lower_gemv`, unchanged); otherwise each unit's input rows lie in
  its own banks and a bank-triggered ``FILL`` loads them, so units take different inputs.
  A split of ``i`` leaves partial sums the host adds, with the 16 lanes of each output.
- RED (``m, n``): rows resident in the unit's first bank; ``FILL`` the first vector of 8 rows
  into GRF_B, ``ADD`` the rest, ``MOV`` the 8 lane-vectors back; the host sums lanes and the
  ``n`` split's partials.
- VA (``n``): ``FILL`` A, ``ADD`` B, drain, ``MOV`` C, 8 vectors per round.
- RELU (``n``): ``FILL`` X, ``MOV`` Y with the ReLU flag, 8 vectors per round.
- Batched RED (``b, m, n``), VA and RELU (``b, n``): the same programs; a unit's batch rows
  fold into its rows (RED) or rounds (VA, RELU), batch row outermost.

:func:`run_group` places a share's tensors where ``inputs`` says, runs the stream on
:func:`models.hbm_pim.execute`, reads ``outputs`` and applies the host's adds. ``docs/dcc.md``
lists the CRF programs and a cycle count derived by hand.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pimphony.compiler.dcc.lowering import Extents, GroupProgram, Tensors
from pimphony.compiler.dcc.schedule import DCC_KERNELS, DccKernel
from pimphony.compiler.pim_gemv import (
    JUMP_MAX,
    PIM_ROWS,
    Emitter,
    PimGemvError,
    gemv_layout,
    gemv_passes,
    lower_gemv,
    mode_entry,
    mode_exit,
    result_address,
    weight_address,
)
from pimphony.models import hbm_pim
from pimphony.models.backends import BackendConfig
from pimphony.models.errors import PimphonyError
from pimphony.models.hbm_pim import CTRL_COLUMN, Bank, Instr, Op, encode_instr

__all__ = ["GROUP_LOWERINGS", "HbmPimLoweringError", "lower_group", "run_group"]


class HbmPimLoweringError(PimGemvError):
    """A DCC kernel share (sizes, core split) that one HBM-PIM group cannot run."""


@dataclass(frozen=True)
class _Lowered:
    """A group program with what running it needs: payload rows, and for every listed
    input/output vector the flat tensor index of each lane (-1: padding / not read)."""

    program: GroupProgram
    payload: np.ndarray
    gather: dict[str, np.ndarray]
    scatter: dict[str, np.ndarray]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _check(cfg: BackendConfig, kernel: DccKernel, sizes: tuple, cores: tuple) -> None:
    try:
        hbm_pim.check_backend(cfg)
    except PimphonyError as exc:
        raise HbmPimLoweringError(str(exc)) from None
    sets = len(inspect.signature(DCC_KERNELS[kernel]).parameters)
    for name, value in (("sizes", sizes), ("cores", cores)):
        if len(value) != sets or any(
            isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1 for v in value
        ):
            raise HbmPimLoweringError(
                f"{kernel}: {name} = {tuple(value)!r}: expected {sets} positive integer(s), one "
                "per dimension set"
            )
    units = cfg.cores_per_group
    if math.prod(cores) > units:
        raise HbmPimLoweringError(
            f"{kernel}: cores = {tuple(cores)!r} asks for {math.prod(cores)} PIM units; a group "
            f"of back end {cfg.name!r} has {units} ({cfg.group.banks} banks / "
            f"{cfg.core.banks} per unit)"
        )


def _units(cores: tuple[int, ...], shares: tuple[int, ...], sizes: tuple[int, ...]):
    """Per used unit: (unit, starts, real extents); a unit with an empty share is skipped."""
    for u in range(math.prod(cores)):
        coord = np.unravel_index(u, cores)
        starts = tuple(int(k) * s for k, s in zip(coord, shares, strict=True))
        real = tuple(max(0, min(s, n - a)) for a, s, n in zip(starts, shares, sizes, strict=True))
        if min(real) > 0:
            yield u, starts, real


def _jump(distance: int, extra: int) -> list[int]:
    """A JUMP repeating the previous ``distance`` instructions ``extra`` more times."""
    return [encode_instr(Instr.JUMP, imm0=distance, imm1=extra)] if extra else []


def _repeat(body: list[int], times: int) -> list[int]:
    """``body`` run ``times`` times: the body and a JUMP back, as often as JUMP_MAX needs."""
    out: list[int] = []
    while times:
        n = min(times, JUMP_MAX + 1)
        out += body + _jump(len(body), n - 1)
        times -= n
    return out


def _fits_crf(cfg: BackendConfig, kernel: DccKernel, prog: list[int], why: str) -> None:
    if len(prog) > cfg.core.crf_entries:
        raise HbmPimLoweringError(
            f"{kernel}: the program needs {len(prog)} CRF instructions ({why}); the CRF holds "
            f"{cfg.core.crf_entries}"
        )


def _fits_rows(kernel: DccKernel, rows: int, what: str) -> None:
    if rows > PIM_ROWS:
        raise HbmPimLoweringError(
            f"{kernel}: {what} needs {rows:,} rows of a bank; {PIM_ROWS:,} rows trigger PIM "
            "(use more cores or groups)"
        )


def _program(
    cfg: BackendConfig,
    stream: np.ndarray,
    payload: np.ndarray,
    gather: dict[str, tuple[np.ndarray, np.ndarray]],
    scatter: dict[str, tuple[np.ndarray, np.ndarray]],
) -> _Lowered:
    """Time ``stream``; inputs/outputs from the (addresses, lane indices) pairs; the host's
    adds are the read lanes beyond one per output element."""
    tl = hbm_pim.time_stream(cfg, stream)
    inputs = {k: a for k, (a, _) in gather.items()}
    outputs = {k: a for k, (a, _) in scatter.items()}
    host_ops = 0
    for _, idx in scatter.values():
        valid = idx[idx >= 0]
        if len(valid):  # distinct elements by a mark per index (np.unique sorts or hashes)
            seen = np.zeros(int(valid.max()) + 1, bool)
            seen[valid] = True
            host_ops += len(valid) - int(np.count_nonzero(seen))
    prog = GroupProgram(stream, tl.cycles, tl.counts, inputs, outputs, int(host_ops))
    return _Lowered(
        prog,
        payload,
        {k: i for k, (_, i) in gather.items()},
        {k: i for k, (_, i) in scatter.items()},
    )


def _addresses(bank: np.ndarray, row: np.ndarray, col: np.ndarray) -> np.ndarray:
    return np.stack([np.ravel(bank), np.ravel(row), np.ravel(col)], axis=1).astype(np.int64)


def _frame(cfg: BackendConfig, prog: list[int]) -> tuple[Emitter, np.ndarray, int, int]:
    """An emitter after mode entry and the CRF writes; the payload (zero, PIM-on, CRF rows)."""
    lanes = cfg.core.lanes
    crf = hbm_pim.instr_payload(prog, lanes)
    zero = np.zeros((1, lanes), np.uint16)
    on = zero.copy()
    on[0, :2] = 1  # PIM on, GRF_B zeroed
    em = Emitter()
    mode_entry(cfg, em, 0, range(2, 2 + len(crf)))
    return em, np.concatenate([zero, on, crf]), 0, 1


# ----------------------------------------------------------------------------- GEMV


def _lower_gemv_like(
    cfg: BackendConfig,
    kernel: DccKernel,
    sizes: tuple[int, int, int],
    cores: tuple[int, int, int],
    names: tuple[str, str, str],
    x: np.ndarray | None,
    w_flat: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> _Lowered:
    """``Y[n] = W @ X[n]`` with ``sizes = (n, o, i)`` and ``cores = (c_n, c_o, c_i)``; with
    ``w_flat`` (the flat index in the weight tensor of element (n, o, i)) every ``n`` has its
    own matrix ``W_n`` (attention's heads), held one after the other in the unit's banks."""
    n, o, i = sizes
    c = cfg.core
    U, bpu, L, A, R = cfg.cores_per_group, c.banks, c.lanes, c.input_regs, c.output_regs
    shares = tuple(_ceil(s, k) for s, k in zip(sizes, cores, strict=True))
    nsh, osh, ish = shares
    J, T, cols = _ceil(osh, R), _ceil(ish, A * L), cfg.group.columns_per_row
    slots = _ceil(T, bpu)
    broadcast = cores[0] == 1 and cores[2] == 1
    per_row = w_flat is not None
    w_rows = _ceil((nsh if per_row else 1) * J * slots * A * R, cols)
    r_rows = _ceil(J * nsh * R, cols)
    in_base = _ceil((w_rows + r_rows) * cols, A * R) * A * R
    in_end = in_base + _ceil(nsh * slots, R) * A * R
    rows = w_rows + r_rows if broadcast else _ceil(in_end, cols)
    _fits_rows(kernel, rows, f"a unit's share (n {nsh}, o {osh}, i {ish})")
    out_name, w_name, x_name = names
    if broadcast:
        xs = np.zeros((n, i), np.float16) if x is None else x.reshape(n, i)
        try:
            k = lower_gemv(cfg, U * osh, ish, xs, batch=n, channels=1, per_batch=per_row)
        except PimGemvError as exc:
            raise HbmPimLoweringError(f"{kernel}: {exc}") from None
        lay, payload, stream = k.layout, k.payload, k.stream
    else:
        lay = gemv_layout(cfg, U * osh, ish, nsh, channels=1, per_batch=per_row)
        prog: list[int] = []
        for pos in range(bpu):
            body = [encode_instr(Instr.FILL, Bank.GRF_A, Bank(pos), aam=True)] + _jump(1, A - 1)
            body += [encode_instr(Instr.MAC, Bank.GRF_B, Bank(pos), Bank.GRF_A, aam=True)]
            body += _jump(1, A * R - 1)
            prog += _repeat(body, len(range(pos, T, bpu)))
        if c.pipeline_drain:
            prog.append(encode_instr(Instr.NOP, imm1=c.pipeline_drain))
        prog += [encode_instr(Instr.MOV, Bank.EVEN, Bank.GRF_B, aam=True)] + _jump(1, R - 1)
        prog.append(encode_instr(Instr.EXIT))
        _fits_crf(cfg, kernel, prog, f"{T} input tiles over {bpu} bank positions")
        em, payload, zero, on = _frame(cfg, prog)
        b, t, a = np.arange(nsh)[:, None, None], np.arange(T)[:, None], np.arange(A)
        q = b * slots + t // bpu
        lin = in_base + q // R * A * R + a * R + q % R  # FILL GRF_A[a] from the unit's bank
        gemv_passes(cfg, lay, em, (int(Op.RD), t % bpu, lin // cols, lin % cols, -1), on, zero)
        mode_exit(cfg, em, zero)
        stream = em.array()
    lanes = np.arange(L)
    w_addr, w_idx, x_addr, x_idx, y_addr, y_idx = [], [], [], [], [], []
    # the same grids for every unit: weight vector v = a * R + e of (output tile j, input
    # tile t) is W[o_e, 16 a ...]; a unit keeps the vectors its real share touches
    j, t, v = (g.ravel() for g in np.meshgrid(np.arange(J), np.arange(T), np.arange(A * R),
                                              indexing="ij"))  # fmt: skip
    w_ol = j * R + v % R
    w_il = t[:, None] * A * L + (v // R)[:, None] * L + lanes
    w_pos, w_row, w_col = weight_address(lay, j, t, v)
    if not broadcast:  # every input vector of the unit's real batch rows (zeros pad)
        b, t, a = (g.ravel() for g in np.meshgrid(np.arange(nsh), np.arange(T), np.arange(A),
                                                  indexing="ij"))  # fmt: skip
        q = b * slots + t // bpu
        lin = in_base + q // R * A * R + a * R + q % R
        x_pos, x_row, x_col, x_b = t % bpu, lin // cols, lin % cols, b
        x_il = (t * A * L + a * L)[:, None] + lanes
    y_b, y_ol = np.meshgrid(np.arange(nsh), np.arange(osh), indexing="ij")
    y_row, y_col = result_address(lay, y_ol // R, y_b, y_ol % R)
    for u, (n0, o0, i0), (nr, orl, ir) in _units(cores, shares, sizes):
        real = (w_ol[:, None] < orl) & (w_il < ir)
        keep = real.any(axis=-1)
        if per_row:  # the unit's real batch rows, each its own matrix
            b = np.arange(nr)[:, None]
            lin = (w_row[keep] * cols + w_col[keep]) + b * lay.set_vectors
            w_addr.append(_addresses(np.broadcast_to(u * bpu + w_pos[keep], lin.shape),
                                     lin // cols, lin % cols))  # fmt: skip
            flat = w_flat(n0 + b[..., None], o0 + w_ol[keep][:, None], i0 + w_il[keep])
            w_idx.append(np.where(real[keep], flat, -1).reshape(-1, L))
        else:
            w_addr.append(_addresses(u * bpu + w_pos[keep], w_row[keep], w_col[keep]))
            flat = (o0 + w_ol[keep])[:, None] * i + i0 + w_il[keep]
            w_idx.append(np.where(real[keep], flat, -1))
        if not broadcast:
            m = nr * T * A  # the first nr batch rows
            x_addr.append(_addresses(u * bpu + x_pos[:m], x_row[:m], x_col[:m]))
            x_idx.append(np.where(x_il[:m] < ir, (n0 + x_b[:m])[:, None] * i + i0 + x_il[:m], -1))
        y_addr.append(_addresses(np.full(nr * orl, u * bpu), y_row[:nr, :orl], y_col[:nr, :orl]))
        flat = ((n0 + y_b[:nr, :orl]) * o + o0 + y_ol[:nr, :orl]).ravel()
        y_idx.append(np.repeat(flat[:, None], L, axis=1))
    gather = {w_name: (np.concatenate(w_addr), np.concatenate(w_idx))}
    if not broadcast:
        gather[x_name] = (np.concatenate(x_addr), np.concatenate(x_idx))
    scatter = {out_name: (np.concatenate(y_addr), np.concatenate(y_idx))}
    return _program(cfg, stream, payload, gather, scatter)


def _gemv(cfg, sizes, cores, arrays=None) -> _Lowered:
    _check(cfg, DccKernel.GEMV, sizes, cores)
    x = None if arrays is None else arrays["x"]
    return _lower_gemv_like(cfg, DccKernel.GEMV, (1, *sizes), (1, *cores), ("y", "W", "x"), x)


def _batched_gemv(cfg, sizes, cores, arrays=None) -> _Lowered:
    _check(cfg, DccKernel.BATCHED_GEMV, sizes, cores)
    x = None if arrays is None else arrays["X"]
    return _lower_gemv_like(cfg, DccKernel.BATCHED_GEMV, sizes, cores, ("Y", "W", "X"), x)


def _qk(cfg, sizes, cores, arrays=None) -> _Lowered:
    """``S[h][t] = sum_d Q[h][d] K[h][t][d]``: per head a GEMV of ``K_h`` (t x d) and
    ``q_h``; sets ``(h, t, d)`` are the batched GEMV's ``(n, o, i)``, K resident per head."""
    _check(cfg, DccKernel.QK, sizes, cores)
    h, t, d = sizes
    x = None if arrays is None else arrays["Q"]
    return _lower_gemv_like(cfg, DccKernel.QK, sizes, cores, ("S", "K", "Q"), x,
                            w_flat=lambda hh, tt, dd: (hh * t + tt) * d + dd)  # fmt: skip


def _sv(cfg, sizes, cores, arrays=None) -> _Lowered:
    """``O[h][d] = sum_t P[h][t] V[h][t][d]``: per head a GEMV of ``V_h^T`` (d x t) and
    ``p_h``; sets ``(h, d, t)`` are the batched GEMV's ``(n, o, i)``, V resident per head
    (its PIM layout is V_h^T's: the host's rearrangement transposes)."""
    _check(cfg, DccKernel.SV, sizes, cores)
    h, d, t = sizes
    x = None if arrays is None else arrays["P"]
    return _lower_gemv_like(cfg, DccKernel.SV, sizes, cores, ("O", "V", "P"), x,
                            w_flat=lambda hh, dd, tt: (hh * t + tt) * d + dd)  # fmt: skip


# ----------------------------------------------------------------------------- element-wise


def _elementwise(
    cfg: BackendConfig,
    kernel: DccKernel,
    sizes: tuple[int, ...],
    cores: tuple[int, ...],
    steps: list[tuple[str, Op, int]],
    prog_body: list[int],
    stride: int,
) -> _Lowered:
    """Rounds of ``R`` vectors per unit in the unit's first bank: step ``s`` of round ``c``
    addresses columns ``stride * c + s * R + e`` (e < R); a step is (tensor, RD/WR, drain
    reads after it). Inputs are the RD steps' tensors, the output the WR step's.

    ``sizes`` / ``cores`` are ``(n,)`` or, with a batch set, ``(b, n)``: the batch folds into
    the rounds (a unit's ``b_s`` batch rows, each its own ``ceil(n_s / lanes)`` vectors, one
    after the other: a vector never spans two batch rows, as SIMD runs along ``n``)."""
    batched = len(sizes) == 2
    (b, n), cb = (sizes if batched else (1, *sizes)), (cores if batched else (1, *cores))
    c = cfg.core
    R, L, bpu, cols = c.output_regs, c.lanes, c.banks, cfg.group.columns_per_row
    shares = (_ceil(b, cb[0]), _ceil(n, cb[1]))
    K = _ceil(shares[1], L)  # vectors per batch row
    rounds = _ceil(shares[0] * K, R)
    what = f"{shares[0]:,} x {shares[1]:,}" if batched else f"{shares[1]:,}"
    _fits_rows(kernel, _ceil(rounds * stride, cols), f"a unit's share of {what} elements")
    prog = _repeat(prog_body, rounds) + [encode_instr(Instr.EXIT)]
    _fits_crf(cfg, kernel, prog, f"{rounds:,} rounds of {R} vectors")
    em, payload, zero, on = _frame(cfg, prog)
    reg = cfg.group.register_row
    em.column(Op.WR, 0, reg, CTRL_COLUMN, on)
    # one round: per step its R vectors, then the drain's dummy reads of the last one
    ops = np.concatenate([[int(op)] * R + [int(Op.RD)] * drain for _, op, drain in steps])
    col_of = np.concatenate([s * R + np.minimum(np.arange(R + d), R - 1)
                             for s, (_, _, d) in enumerate(steps)])  # fmt: skip
    lin = stride * np.arange(rounds)[:, None] + col_of
    op_ = np.broadcast_to(ops, lin.shape)
    dat = np.where(op_ == int(Op.WR), zero, -1)
    em.columns(op_, 0, lin // cols, lin % cols, dat)
    em.column(Op.WR, 0, reg, CTRL_COLUMN, zero)
    mode_exit(cfg, em, zero)
    gather: dict[str, tuple[list, list]] = {name: ([], []) for name, _, _ in steps}
    for u, (b0, n0), (br, nr) in _units(cb, shares, (b, n)):
        bb, k = (g.ravel() for g in np.meshgrid(np.arange(br), np.arange(_ceil(nr, L)),
                                                indexing="ij"))  # fmt: skip
        v = bb * K + k  # the unit's vector of (batch row, vector of the row)
        idx = k[:, None] * L + np.arange(L)
        for s, (name, _, _) in enumerate(steps):
            lin = stride * (v // R) + s * R + v % R
            gather[name][0].append(_addresses(np.full(v.shape, u * bpu), lin // cols, lin % cols))
            gather[name][1].append(np.where(idx < nr, (b0 + bb)[:, None] * n + n0 + idx, -1))
    parts = {k: (np.concatenate(a), np.concatenate(i)) for k, (a, i) in gather.items()}
    out = next(name for name, op, _ in steps if op is Op.WR)
    scatter = {out: parts.pop(out)}
    return _program(cfg, em.array(), payload, parts, scatter)


def _va_like(kernel: DccKernel):
    """VA (``n``) or batched VA (``b, n``): FILL A, ADD B, drain, MOV C."""

    def lower(cfg, sizes, cores, arrays=None) -> _Lowered:
        _check(cfg, kernel, sizes, cores)
        c = cfg.core
        R, drain = c.output_regs, c.pipeline_drain
        body = [encode_instr(Instr.FILL, Bank.GRF_B, Bank.EVEN, aam=True)] + _jump(1, R - 1)
        body += [encode_instr(Instr.ADD, Bank.GRF_B, Bank.GRF_B, Bank.EVEN, aam=True)]
        body += _jump(1, R - 1) + ([encode_instr(Instr.NOP, imm1=drain)] if drain else [])
        body += [encode_instr(Instr.MOV, Bank.EVEN, Bank.GRF_B, aam=True)] + _jump(1, R - 1)
        steps = [("A", Op.RD, 0), ("B", Op.RD, drain), ("C", Op.WR, 0)]
        return _elementwise(cfg, kernel, sizes, cores, steps, body, 3 * R)

    return lower


def _relu_like(kernel: DccKernel):
    """RELU (``n``) or batched RELU (``b, n``): FILL X, MOV Y with the ReLU flag."""

    def lower(cfg, sizes, cores, arrays=None) -> _Lowered:
        _check(cfg, kernel, sizes, cores)
        R = cfg.core.output_regs
        body = [encode_instr(Instr.FILL, Bank.GRF_B, Bank.EVEN, aam=True)] + _jump(1, R - 1)
        body += [encode_instr(Instr.MOV, Bank.EVEN, Bank.GRF_B, aam=True, relu=True)]
        body += _jump(1, R - 1)
        steps = [("X", Op.RD, 0), ("Y", Op.WR, 0)]
        return _elementwise(cfg, kernel, sizes, cores, steps, body, 2 * R)

    return lower


# ----------------------------------------------------------------------------- RED


def _red_like(kernel: DccKernel):
    """RED ``r[m] = sum_n A[m][n]`` (sets ``m, n``) or batched RED ``r[b][m]`` (``b, m, n``):
    rounds of ``R`` rows (a unit's ``b_s x m_s`` rows, batch row outermost: the batch folds
    into the rows); row ``e``'s ``K`` vectors at columns ``R K c + R k + e`` (FILL the first,
    ADD the rest into GRF_B[e]), results after them.

    A unit with fewer than ``R`` rows would leave GRF_B entries (and their triggers) to
    padding rows: each row is then folded into ``f`` segments of ``ceil(K / f)`` vectors
    (``f = ceil(K / ceil(K / (R // rows)))``, every segment non-empty), one GRF_B entry each,
    and the host adds the ``f`` lane-vectors of a row with its lanes."""

    def lower(cfg, sizes, cores, arrays=None) -> _Lowered:
        _check(cfg, kernel, sizes, cores)
        batched = len(sizes) == 3
        b, m, n = sizes if batched else (1, *sizes)
        cb = cores if batched else (1, *cores)
        c = cfg.core
        R, L, bpu, cols, drain = c.output_regs, c.lanes, c.banks, cfg.group.columns_per_row, 0
        shares = (_ceil(b, cb[0]), _ceil(m, cb[1]), _ceil(n, cb[2]))
        rows_u = shares[0] * shares[1]
        K0 = _ceil(shares[2], L)  # vectors of a row
        fold = _ceil(K0, _ceil(K0, R // rows_u)) if rows_u < R else 1
        K = _ceil(K0, fold)  # vectors per GRF_B entry
        rounds = _ceil(rows_u * fold, R)
        res_base = rounds * R * K
        shown = shares if batched else shares[1:]
        _fits_rows(kernel, _ceil(res_base + rounds * R, cols), f"a unit's share {shown}")
        body = [encode_instr(Instr.FILL, Bank.GRF_B, Bank.EVEN, aam=True)] + _jump(1, R - 1)
        left = R * (K - 1)
        while left:
            k = min(left, JUMP_MAX + 1)
            body += [encode_instr(Instr.ADD, Bank.GRF_B, Bank.GRF_B, Bank.EVEN, aam=True)]
            body += _jump(1, k - 1)
            left -= k
        if K > 1 and c.pipeline_drain:
            drain = c.pipeline_drain
            body.append(encode_instr(Instr.NOP, imm1=drain))
        body += [encode_instr(Instr.MOV, Bank.EVEN, Bank.GRF_B, aam=True)] + _jump(1, R - 1)
        prog = _repeat(body, rounds) + [encode_instr(Instr.EXIT)]
        _fits_crf(cfg, kernel, prog, f"{K} vectors per row, {rounds} rounds of {R} rows")
        em, payload, zero, on = _frame(cfg, prog)
        reg = cfg.group.register_row
        em.column(Op.WR, 0, reg, CTRL_COLUMN, on)
        r = np.arange(rounds)[:, None]
        reads = r * R * K + np.minimum(np.arange(R * K + drain), R * K - 1)  # then the drain's
        lin = np.concatenate([reads, res_base + r * R + np.arange(R)], axis=1)
        op_ = np.repeat([int(Op.RD), int(Op.WR)], [R * K + drain, R])
        em.columns(np.broadcast_to(op_, lin.shape), 0, lin // cols, lin % cols,
                   np.broadcast_to(np.where(op_ == int(Op.WR), zero, -1), lin.shape))  # fmt: skip
        em.column(Op.WR, 0, reg, CTRL_COLUMN, zero)
        mode_exit(cfg, em, zero)
        a_addr, a_idx, r_addr, r_idx = [], [], [], []
        lanes = np.arange(L)
        for u, (b0, m0, n0), (br, mr, nr) in _units(cb, shares, (b, m, n)):
            bb, mm = (g.ravel() for g in np.meshgrid(np.arange(br), np.arange(mr),
                                                     indexing="ij"))  # fmt: skip
            rows = bb * shares[1] + mm  # the unit's row (batch row outermost)
            row = (b0 + bb) * m + m0 + mm  # its row of r (flat over b, m)
            # vector v of a row: segment v // K, its GRF_B entry (virtual row) e
            ml, v = (g.ravel() for g in np.meshgrid(rows, np.arange(fold * K), indexing="ij"))
            e, k = ml * fold + v // K, v % K
            fl = np.repeat(row, fold * K)
            lin = e // R * R * K + k * R + e % R
            a_addr.append(_addresses(np.full(lin.shape, u * bpu), lin // cols, lin % cols))
            nl = v[:, None] * L + lanes
            a_idx.append(np.where(nl < nr, fl[:, None] * n + n0 + nl, -1))
            lin = res_base + (rows[:, None] * fold + np.arange(fold)).ravel()
            r_addr.append(_addresses(np.full(lin.shape, u * bpu), lin // cols, lin % cols))
            r_idx.append(np.repeat(np.repeat(row, fold)[:, None], L, axis=1))
        gather = {"A": (np.concatenate(a_addr), np.concatenate(a_idx))}
        scatter = {"r": (np.concatenate(r_addr), np.concatenate(r_idx))}
        return _program(cfg, em.array(), payload, gather, scatter)

    return lower


_LOWER: dict[DccKernel, Callable[..., _Lowered]] = {
    DccKernel.GEMV: _gemv,
    DccKernel.BATCHED_GEMV: _batched_gemv,
    DccKernel.QK: _qk,
    DccKernel.SV: _sv,
    DccKernel.RED: _red_like(DccKernel.RED),
    DccKernel.VA: _va_like(DccKernel.VA),
    DccKernel.RELU: _relu_like(DccKernel.RELU),
    DccKernel.BATCHED_RED: _red_like(DccKernel.BATCHED_RED),
    DccKernel.BATCHED_VA: _va_like(DccKernel.BATCHED_VA),
    DccKernel.BATCHED_RELU: _relu_like(DccKernel.BATCHED_RELU),
}

GROUP_LOWERINGS: dict[
    DccKernel, Callable[[BackendConfig, tuple[int, ...], tuple[int, ...]], GroupProgram]
] = {
    kernel: (lambda cfg, sizes, cores, _f=f: _f(cfg, tuple(sizes), tuple(cores)).program)
    for kernel, f in _LOWER.items()
}
"""The HBM-PIM group lowering of each DCC kernel it runs: GEMV, batched GEMV, QK^T, SV, RED, VA,
RELU and the batched RED, VA and RELU."""


def lower_group(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> tuple[GroupProgram, np.ndarray]:
    """One HBM-PIM group's program for its share ``sizes`` of ``kernel`` on ``cores``, and the
    payload rows its WRs name (what :func:`models.hbm_pim.execute` and the energy model's
    access classification read besides the stream)."""
    kernel = DccKernel(kernel)
    if kernel not in _LOWER:
        raise HbmPimLoweringError(f"kernel {str(kernel)!r} has no HBM-PIM group lowering")
    low = _LOWER[kernel](cfg, tuple(sizes), tuple(cores))
    return low.program, low.payload


#: Which set's size each argument of ``DCC_KERNELS[kernel]`` takes, where the sets are not in
#: the builder's order: SV's sets are ``(h, d, t)``, its builder takes (heads, tokens, d_h).
_NEST_ARGS: dict[DccKernel, tuple[int, ...]] = {DccKernel.SV: (0, 2, 1)}


def run_group(
    cfg: BackendConfig,
    kernel: DccKernel,
    sizes: Extents,
    cores: Extents,
    arrays: Tensors,
    *,
    garbage: np.random.Generator | None = None,
) -> Tensors:
    """The share's output tensor computed on the functional model: ``arrays`` (the loop
    nest's input tensors of this share, FP16) placed where ``inputs`` says, the stream
    executed, ``outputs`` read back and the host's adds applied (in FP32, then FP16).

    With ``garbage``, every bank row the stream touches first holds random finite values, so
    a result equal to numpy shows ``inputs`` lists everything the program depends on.
    """
    if kernel not in _LOWER:
        raise HbmPimLoweringError(
            f"kernel {str(kernel)!r} has no HBM-PIM group lowering (lowered: "
            f"{', '.join(map(str, _LOWER))})"
        )
    sizes, cores = tuple(sizes), tuple(cores)
    _check(cfg, kernel, sizes, cores)
    nest = DCC_KERNELS[kernel](*(sizes[k] for k in _NEST_ARGS.get(kernel, range(len(sizes)))))
    shapes = dict(nest.tensors)
    out_name = nest.refs[0].tensor
    want = {k: v for k, v in shapes.items() if k != out_name}
    if set(arrays) != set(want):
        raise HbmPimLoweringError(
            f"{kernel}: arrays {sorted(arrays)} given; the share needs {sorted(want)}"
        )
    vals = {}
    for name, shape in want.items():
        a = np.asarray(arrays[name])
        if a.shape != tuple(shape):
            raise HbmPimLoweringError(
                f"{kernel}: {name} of shape {a.shape}: the share {sizes} needs {tuple(shape)}"
            )
        vals[name] = a.astype(np.float16)
    low = _LOWER[kernel](cfg, sizes, cores, vals)
    st = hbm_pim.PimState.for_backend(cfg, 1)
    if garbage is not None:
        rows = np.unique(low.program.stream["row"])
        for r in rows[rows < PIM_ROWS].tolist():
            st.row(r)[...] = garbage.integers(-4, 5, st.row(r).shape).astype(np.float16)
    for name, addr in low.program.inputs.items():
        flat = vals[name].ravel()
        idx = low.gather[name]
        vec = np.where(idx >= 0, flat[np.maximum(idx, 0)], np.float16(0)).astype(np.float16)
        for r in np.unique(addr[:, 1]).tolist():
            sel = addr[:, 1] == r
            st.row(r)[0, addr[sel, 0], addr[sel, 2], :] = vec[sel]
    hbm_pim.execute(cfg, low.program.stream, low.payload, st)
    (addr,) = low.program.outputs.values()
    idx = low.scatter[out_name]
    got = np.zeros((len(addr), cfg.core.lanes), np.float32)
    for r in np.unique(addr[:, 1]).tolist():
        sel = addr[:, 1] == r
        got[sel] = st.row(r)[0, addr[sel, 0], addr[sel, 2], :]
    out = np.zeros(math.prod(shapes[out_name]), np.float32)
    valid = idx >= 0
    np.add.at(out, idx[valid], got[valid])
    return {out_name: out.astype(np.float16).reshape(shapes[out_name])}
