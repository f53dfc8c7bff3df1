"""DCC kernels lowered to one AiM channel: the channel TLM as a DCC back end (issue 17).

Per the contract of :mod:`compiler.dcc.lowering`, ``GROUP_LOWERINGS[kernel](cfg, sizes,
cores)`` lowers one group's share (``sizes`` per dimension set, ``cores`` per set) to a
:class:`compiler.dcc.lowering.GroupProgram`; :func:`run_group` runs it on values. A group is
one AiM channel, a core one bank; the hardware is the back end's AiM preset
(``BackendConfig.hardware_config``: banks, rows, GBuf and OBuf entries, the GPR, timing).

AiM's command set (:mod:`models.isa`) is WR_INP (a 32 B tile from the HUB's GPR into a GBuf
entry), MAC (the same row and column of **every** bank times **one** GBuf entry, a 16-element
dot product per bank into its OBuf entry) and RD_OUT (an OBuf entry of every bank back to the
GPR). So every kernel is a matrix-vector product ``y = A x`` whose matrix lives in the banks
and whose vector goes through the GBuf, lowered by :func:`compiler.kernels.compile_gemv` (the
fixed compiler's own stream: GBuf / OBuf halves, input chunks, output blocks, row reuse):

========  ===============  ===================  ===========  =========  =========  =========
kernel    bank matrix      GBuf vector          result       banks on   reduced    one after
                                                                                   another
========  ===============  ===================  ===========  =========  =========  =========
gemv      W (o x i)        x                    y            o          i          --
b-gemv    W (o x i)        X[n] (row reuse)     Y[n]         o          i          --
qk        K[h] (t x d)     Q[h]                 S[h]         t          d          h
sv        V[h]^T (d x t)   P[h]                 O[h]         d          t          h
red       A (m x n)        ones                 r            m          n          --
b-red     A[b] (m x n)     ones                 r[b]         m          n          b
========  ===============  ===================  ===========  =========  =========  =========

**Cores.** Only the "banks on" set may be split over cores: a MAC reads one GBuf entry in
all banks, so banks can differ only in the matrix rows (outputs) they hold, never in the
input they multiply (a split of the reduced set, of the batch or of the heads over cores is
refused, naming the set). Core ``k`` of ``c`` holds the contiguous outputs ``k L .. k L +
L - 1``, ``L = ceil(o / c)`` (DCC's core tile), in bank ``k``; the stream is that of a GEMV of
``banks x L`` outputs, whose output ``j banks + k`` is bank ``k``'s ``j``-th: exactly the
fixed compiler's stream when ``c`` is the bank count (it deals outputs cyclically instead,
``o % banks``; both give every bank ``ceil(o / banks)`` output groups, the same commands).

**Several GEMVs in a group.** Heads (qk, sv) have their own matrices: one GEMV per head, the
head's matrix ``rows`` further down the banks, run one after another in one stream. A batch
whose inputs and outputs do not fit the GPR runs as several GEMVs of at most
:func:`compiler.kernels.gemv_max_batch` requests (as the decode step does, ``compiler.plan``),
here of equal size and one pass size, since the weight layout depends on the pass size and all
of them read one copy of the matrix. GPR addresses are offset per GEMV so that one functional
image holds them all; each GEMV alone fits the GPR. The channel is timed on
:func:`models.channel.run_channel` with :data:`SCHEDULER` (DCS, whose per-entry dependencies
keep the GBuf / OBuf reuse between consecutive GEMVs correct).

**Data.** ``inputs``: the bank matrix's column vectors (bank, row, column) that hold data
(padding excluded); the vector tensor is written into the GBuf by the stream (``[]``).
``outputs`` is empty and ``host_ops`` 0: RD_OUT moves every finished output (a bank's MAC tree
sums all 16 lanes) to the GPR inside the stream. VA and ReLU (batched or not) are refused: the
command set has no element-wise operation (:data:`UNSUPPORTED`).

:func:`default_draft` is AiM's fixed mapping as a DCC draft (``compiler.kernels`` and
``compiler.plan``: outputs over all banks; GEMV outputs over the channels, attention tokens
over the channels as PIMphony's TCP).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np
from pimphony.compiler.dcc.lowering import Extents, GroupProgram, Tensors
from pimphony.compiler.dcc.schedule import (
    DCC_KERNELS,
    DccError,
    DccKernel,
    Draft,
    Part,
    dimension_sets,
)
from pimphony.compiler.kernels import (
    CompileError,
    KernelProgram,
    compile_gemv,
    gemv_max_batch,
    gemv_pass_size,
)
from pimphony.models.backends import BackendConfig, BackendKind
from pimphony.models.channel import Scheduler, run_channel
from pimphony.models.config import HardwareConfig
from pimphony.models.functional import execute
from pimphony.models.isa import Op

__all__ = [
    "CHANNEL_SET",
    "FORMS",
    "GROUP_LOWERINGS",
    "SCHEDULER",
    "UNSUPPORTED",
    "AimLoweringError",
    "Form",
    "default_draft",
    "hardware",
    "lower_group",
    "run_group",
]

#: The channel scheduler a group program is timed with: PIMphony's DCS (the decode step's
#: default), whose dependency tables make back-to-back GEMVs in one stream safe.
SCHEDULER = Scheduler.DCS


class AimLoweringError(DccError):
    """A share AiM cannot run: a kernel without an operation, a core split of a set the
    all-bank MAC cannot split, a share beyond the banks' rows or the GPR."""


#: Kernels AiM has no command for (``models/isa.py``: WR_INP, MAC, RD_OUT only).
UNSUPPORTED: dict[DccKernel, str] = {
    DccKernel.VA: "vector addition needs an element-wise add, and the MAC is an all-bank dot "
    "product",
    DccKernel.RELU: "ReLU needs an element-wise max, and the MAC is an all-bank dot product",
    DccKernel.BATCHED_VA: "vector addition needs an element-wise add, and the MAC is an "
    "all-bank dot product",
    DccKernel.BATCHED_RELU: "ReLU needs an element-wise max, and the MAC is an all-bank dot "
    "product",
}


@dataclass(frozen=True)
class Form:
    """How a kernel's loop nest becomes matrix-vector products on a channel: set indices of
    the outputs (over banks), the reduced inputs, the heads (one matrix each, ``None``: one)
    and the batch (inputs sharing the matrix, ``None``: one); the bank matrix, GBuf vector and
    result tensors (``gbuf`` empty: a vector of ones)."""

    out_set: int
    in_set: int
    head_set: int | None
    batch_set: int | None
    bank: str
    gbuf: str
    result: str


#: Each kernel's :class:`Form` (set order as ``compiler.dcc.schedule.dimension_sets``).
FORMS: dict[DccKernel, Form] = {
    DccKernel.GEMV: Form(0, 1, None, None, "W", "x", "y"),
    DccKernel.BATCHED_GEMV: Form(1, 2, None, 0, "W", "X", "Y"),
    DccKernel.QK: Form(1, 2, 0, None, "K", "Q", "S"),  # sets h, t, d
    DccKernel.SV: Form(1, 2, 0, None, "V", "P", "O"),  # sets h, d, t
    DccKernel.RED: Form(0, 1, None, None, "A", "", "r"),
    DccKernel.BATCHED_RED: Form(1, 2, 0, None, "A", "", "r"),  # sets b, m, n: A[b] each
}


@cache
def hardware(cfg: BackendConfig) -> HardwareConfig:
    """The AiM hardware preset of back end ``cfg`` (refused for other kinds)."""
    if cfg.kind is not BackendKind.AIM or cfg.hardware_config is None:
        raise AimLoweringError(
            f"back end {cfg.name} (kind {cfg.kind.value}): the AiM lowering needs an 'aim' back "
            "end with its hardware preset"
        )
    return cfg.hardware_config


@cache
def _set_args(kernel: DccKernel) -> tuple[tuple[str, int], ...]:
    """Per dimension set, its loop variable and the :data:`DCC_KERNELS` argument giving its
    trip count (SV's sets are h, d, t; its builder takes heads, tokens, d_h)."""
    build = DCC_KERNELS[kernel]
    nest = build(*range(2, 2 + build.__code__.co_argcount))  # distinct trips: arg k is k + 2
    trips = dict(nest.loops)
    return tuple(
        (v, trips[v] - 2) for v in (ds.mappings()[0][2].var for ds in dimension_sets(nest))
    )


def _set_names(kernel: DccKernel) -> list[str]:
    return [v for v, _ in _set_args(kernel)]


def _kernel_sizes(kernel: DccKernel, set_sizes: tuple[int, ...]) -> tuple[int, ...]:
    """The :data:`DCC_KERNELS` arguments of a share given in dimension-set order."""
    out = [0] * len(set_sizes)
    for (_, arg), n in zip(_set_args(kernel), set_sizes, strict=True):
        out[arg] = n
    return tuple(out)


@dataclass(frozen=True)
class _Plan:
    """One group's share as GEMVs: per GEMV (head, first request, requests) and its program."""

    form: Form
    heads: int
    batch: int
    n_out: int
    n_in: int
    per_core: int  # L: outputs per active bank
    active: int  # banks holding outputs
    rows: int  # DRAM rows per head's matrix
    gemvs: tuple[tuple[int, int, int, KernelProgram], ...]
    gpr_base: tuple[int, ...]  # first GPR tile of each GEMV's image


def _check(cfg: BackendConfig, kernel: DccKernel, sizes, cores) -> tuple[Form, HardwareConfig]:
    kernel = DccKernel(kernel)
    if kernel in UNSUPPORTED:
        raise AimLoweringError(
            f"AiM cannot run {kernel} (models/isa.py has WR_INP, MAC, RD_OUT only): "
            f"{UNSUPPORTED[kernel]}"
        )
    hw = hardware(cfg)
    form = FORMS[kernel]
    names = _set_names(kernel)
    if len(sizes) != len(names) or len(cores) != len(names):
        raise AimLoweringError(
            f"kernel {kernel}: sizes {tuple(sizes)} and cores {tuple(cores)} must give one value "
            f"per dimension set ({', '.join(names)})"
        )
    for what, values in (("size", sizes), ("cores", cores)):
        for name, v in zip(names, values, strict=True):
            if int(v) < 1:
                raise AimLoweringError(f"kernel {kernel}: {what} of set {name} = {v}: must be >= 1")
    if math.prod(cores) > hw.channel.banks:
        raise AimLoweringError(
            f"kernel {kernel}: cores {tuple(cores)} = {math.prod(cores)} banks; an AiM channel "
            f"of {cfg.name} has {hw.channel.banks}"
        )
    for k, c in enumerate(cores):
        if k != form.out_set and c > 1:
            raise AimLoweringError(
                f"kernel {kernel}: set {names[k]} over {c} cores: AiM's MAC reads one GBuf entry "
                f"in every bank at once, so banks can differ only in the outputs they hold "
                f"(set {names[form.out_set]}); cores of set {names[k]} must be 1"
            )
    return form, hw


def _plan(cfg: BackendConfig, kernel: DccKernel, sizes, cores) -> _Plan:
    form, hw = _check(cfg, kernel, sizes, cores)
    sizes = tuple(int(s) for s in sizes)
    heads = sizes[form.head_set] if form.head_set is not None else 1
    batch = sizes[form.batch_set] if form.batch_set is not None else 1
    n_out, n_in = sizes[form.out_set], sizes[form.in_set]
    active = int(cores[form.out_set])
    per_core = -(-n_out // active)
    banks = hw.channel.banks
    try:
        # as few GEMVs as the GPR allows, of equal size (+-1), all with one pass size: the
        # weight layout depends on it, and every GEMV reads the same copy of the matrix
        most = max(1, min(batch, gemv_max_batch(hw, banks * per_core, n_in)))
        k = -(-batch // most)
        parts = [batch // k + (1 if j < batch % k else 0) for j in range(k)]
        chunks = [(sum(parts[:j]), n) for j, n in enumerate(parts)]
        small = min(parts)
        pass_size = min(small, gemv_pass_size(hw, banks * per_core, n_in, small))
        progs = {n: compile_gemv(hw, banks * per_core, n_in, n, pass_size) for n in set(parts)}
    except CompileError as exc:
        raise AimLoweringError(f"kernel {kernel} share {sizes} on {cfg.name}: {exc}") from None
    rows = progs[chunks[0][1]].plan.rows
    if heads * rows > hw.channel.rows_per_bank:
        raise AimLoweringError(
            f"kernel {kernel} share {sizes} on {cfg.name}: {heads} head(s) x {rows} DRAM rows per "
            f"bank = {heads * rows}; the channel has {hw.channel.rows_per_bank}"
        )
    gemvs, bases, base = [], [], 0
    for h in range(heads):
        for first, n in chunks:
            p = progs[n]
            gemvs.append((h, first, n, p))
            bases.append(base)
            base += p.plan.gpr_out_base + p.plan.heads * p.plan.groups
    return _Plan(form, heads, batch, n_out, n_in, per_core, active, rows, tuple(gemvs),
                 tuple(bases))  # fmt: skip


def _stream(plan: _Plan) -> np.ndarray:
    parts = []
    for (h, _first, _n, prog), base in zip(plan.gemvs, plan.gpr_base, strict=True):
        s = prog.commands.copy()
        s["row"][s["op"] == Op.MAC] += h * plan.rows
        io = s["op"] != Op.MAC
        s["gpr"][io] += base
        parts.append(s)
    return np.concatenate(parts)


def _order(plan: _Plan, banks: int) -> np.ndarray:
    """Index into the compiled GEMV's outputs (``j banks + k``) of DCC output ``k L + j``."""
    o = np.arange(plan.n_out)
    return (o % plan.per_core) * banks + o // plan.per_core


def _matrix(plan: _Plan, a: np.ndarray, banks: int) -> np.ndarray:
    """``a`` (n_out x n_in) in the compiled GEMV's output order (zero padding)."""
    out = np.zeros((banks * plan.per_core, plan.n_in), dtype=np.float16)
    out[_order(plan, banks)] = a
    return out


def _bank_vectors(plan: _Plan, cols: int) -> np.ndarray:
    """(bank, row, column) of every bank-matrix vector holding data: output group ``g`` of
    the compiled GEMV is in banks ``k`` with ``k L + g < n_out``; every input tile holds data."""
    g, _, a = plan.gemvs[0][3].tile_addresses()
    held = np.minimum(plan.active, -(-(plan.n_out - g) // plan.per_core))  # banks with data
    first = np.repeat(np.cumsum(held) - held, held)
    bank = np.arange(int(held.sum())) - first
    row, col = np.repeat(a // cols, held), np.repeat(a % cols, held)
    one = np.stack([bank, row, col], axis=1).astype(np.int64)
    return np.concatenate([one + np.array([0, h * plan.rows, 0]) for h in range(plan.heads)])


def lower_group(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> GroupProgram:
    """One channel's program for its share of ``kernel`` (module docstring)."""
    kernel = DccKernel(kernel)
    plan = _plan(cfg, kernel, sizes, cores)
    hw = hardware(cfg)
    stream = _stream(plan)
    res = run_channel(stream, hw, SCHEDULER, validate=False, record=False)
    bank_vectors = _bank_vectors(plan, hw.channel.columns_per_row)
    empty = np.zeros((0, 3), dtype=np.int64)
    inputs = {plan.form.bank: bank_vectors}
    if plan.form.gbuf:
        inputs[plan.form.gbuf] = empty
    op = stream["op"]
    counts = {o.name: int(np.count_nonzero(op == o)) for o in Op}
    return GroupProgram(stream, int(res.cycles), counts, inputs, {plan.form.result: empty}, 0)


def _gemv(kernel: DccKernel):
    return lambda cfg, sizes, cores: lower_group(cfg, kernel, sizes, cores)


#: The kernels an AiM channel runs (VA and ReLU: :data:`UNSUPPORTED`, refused by name).
GROUP_LOWERINGS: dict[DccKernel, Callable[..., GroupProgram]] = {
    k: _gemv(k) for k in (*FORMS, *UNSUPPORTED)
}


def _operands(kernel: DccKernel, plan: _Plan, arrays: dict[str, np.ndarray], sizes):
    """Per head, the bank matrix (n_out x n_in) and the vectors (batch x n_in)."""
    shapes = dict(DCC_KERNELS[kernel](*_kernel_sizes(kernel, sizes)).tensors)
    need = [t for t in (plan.form.bank, plan.form.gbuf) if t]
    missing = sorted(set(need) - set(arrays))
    if missing:
        raise AimLoweringError(f"run_group({kernel}) needs arrays {missing}")
    for t in need:
        if np.shape(arrays[t]) != shapes[t]:
            raise AimLoweringError(
                f"run_group({kernel}): {t} has shape {np.shape(arrays[t])}, the share's is "
                f"{shapes[t]}"
            )
    a = np.asarray(arrays[plan.form.bank], dtype=np.float16)
    x = (
        np.asarray(arrays[plan.form.gbuf], dtype=np.float16)
        if plan.form.gbuf
        else np.ones(plan.n_in, np.float16)
    )
    if kernel is DccKernel.QK:  # K[h] (t x d), Q[h]
        return [(a[h], x[h][None]) for h in range(plan.heads)]
    if kernel is DccKernel.BATCHED_RED:  # A[b] (m x n), ones
        return [(a[b], x[None]) for b in range(plan.heads)]
    if kernel is DccKernel.SV:  # V[h]^T (d x t), P[h]
        return [(a[h].T, x[h][None]) for h in range(plan.heads)]
    return [(a, np.atleast_2d(x))]


def run_group(
    cfg: BackendConfig, kernel: DccKernel, sizes: Extents, cores: Extents, arrays: Tensors
) -> Tensors:
    """The share's result on values: the bank matrices placed as the compiled GEMVs lay them
    out (each head ``rows`` further down), the vectors as their GPR tiles, the stream
    scheduled with :data:`SCHEDULER` and executed by :func:`models.functional.execute`, the
    RD_OUT tiles read back into the result tensor (FP16)."""
    kernel = DccKernel(kernel)
    plan = _plan(cfg, kernel, sizes, cores)
    hw = hardware(cfg)
    banks = hw.channel.banks
    ops = _operands(kernel, plan, arrays, tuple(int(s) for s in sizes))
    stream = _stream(plan)
    memory = np.concatenate(
        [plan.gemvs[0][3].matrix_image(_matrix(plan, a, banks)) for a, _ in ops]
    )
    gpr = np.concatenate(
        [p.gpr_image(ops[h][1][first : first + n]) for h, first, n, p in plan.gemvs]
    )
    out = execute(stream, run_channel(stream, hw, SCHEDULER, validate=False), hw, memory, gpr)
    order = _order(plan, banks)
    rows = np.zeros((plan.heads, plan.batch, plan.n_out), dtype=np.float16)
    for (h, first, n, p), base in zip(plan.gemvs, plan.gpr_base, strict=True):
        span = p.plan.gpr_out_base + p.plan.heads * p.plan.groups
        rows[h, first : first + n] = p.read_outputs(out[base : base + span])[:, order]
    if plan.form.head_set is not None:  # qk, sv, batched-red: one row per head
        result = rows[:, 0]
    elif kernel is DccKernel.BATCHED_GEMV:
        result = rows[0]
    else:
        result = rows[0, 0]
    return {plan.form.result: result}


#: The set AiM's fixed mapping spreads over channels and its unit: GEMV / RED outputs in
#: whole bank groups (``compiler.plan.split_evenly(d_out, channels, banks)``), QK^T tokens in
#: bank groups and SV tokens one at a time (PIMphony's TCP, ``compiler.plan._tcp``).
CHANNEL_SET: dict[DccKernel, tuple[int, bool]] = {
    DccKernel.GEMV: (0, True),
    DccKernel.BATCHED_GEMV: (1, True),
    DccKernel.QK: (1, True),
    DccKernel.SV: (2, False),
    DccKernel.RED: (0, True),
    DccKernel.BATCHED_RED: (1, True),
}


def default_draft(cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...]) -> Draft:
    """AiM's fixed mapping as a draft: the set of :data:`CHANNEL_SET` over as many groups as
    it has units (at most all), the output set over ``min(banks, its share)`` cores, every
    other set whole (the bank tensor's dimension as each part's representative)."""
    kernel = DccKernel(kernel)
    form, hw = _check(cfg, kernel, sizes, (1,) * len(sizes))
    banks = hw.channel.banks
    nest = DCC_KERNELS[kernel](*sizes)
    trips = dict(nest.loops)
    spread, in_banks = CHANNEL_SET[kernel]
    parts: list[Part] = []
    for k, ds in enumerate(dimension_sets(nest)):
        maps = ds.mappings()
        dim, size, f = next((m for m in maps if m[0].startswith(form.bank)), maps[0])
        trip = trips[f.var]
        groups = min(cfg.groups, -(-trip // banks) if in_banks else trip) if k == spread else 1
        share = -(-trip // groups)
        parts.append(Part(groups, min(banks, share) if k == form.out_set else 1, dim, size, f))
    return tuple(parts)
