"""DCC kernels lowered to one AttAcc group (:mod:`models.attacc`).

Per the contract of :mod:`compiler.dcc.lowering`, ``GROUP_LOWERINGS[kernel](cfg, sizes,
cores)`` lowers one group's share (``sizes`` per dimension set, ``cores`` per set, product
<= 64) to a :class:`compiler.dcc.lowering.GroupProgram`; :func:`run_group` runs it on values.

Cores are banks. They are numbered in the order of the dimensions of the tensor that lives
in the banks (W, K, V, A), so its first split dimension spreads over bank groups and its
second over the banks of a group: AttAcc's default mapping (DCC V) lands as the simulator's
traces place data. Every core gets ``ceil(size / cores)`` of each set, zero-padded, so the
all-bank MACs address equal offsets in every bank (DCC IV-C).

* GEMV, batched GEMV, QK^T, RED: the GEMV unit's **adder-tree mode** (``MacMode.DOT``, the
  trace generator's score GEMV): the reduction dimension's share of the input vector is
  written into the GEMV buffer (``WRGB``; one broadcast per bank index when every bank group
  needs the same data, as the simulator's traces do, else one per bank), one ``MACAB`` per
  16-element weight vector adds a dot product into one lane of the accumulator, and every
  16 outputs ``MVSB`` moves them to the softmax buffer. Partial sums of a split reduction
  meet in the channel's **accumulator** (DCC II-B): one ``MVSB`` of a whole bank group
  through its adder tree where the split covers whole bank groups, else one adding
  ``MVSB`` per bank. RED is this path with a GEMV buffer of ones.
* Batched RED (sets b, m, n; ``A[b][m][n]``): RED with a core's batch rows folded into its
  outputs, batch row outermost (:func:`_batched_red_geometry`): a core holding b_c batch rows
  of m_c rows reduces b_c x m_c outputs, 16 to an accumulator, the ones written once.
* SV: the **MAC mode** (``MacMode.AXPY``, the trace's context GEMV): P's share is the GEMV
  buffer, each ``MACAB`` adds one token's 16-element row of V times its probability.
* Results leave through the softmax buffer (``RDSB``), inside the stream: ``outputs`` is
  empty and ``host_ops`` 0.
* Softmax and attention: :func:`lower_attention` chains QK^T (scores stay in the softmax
  buffer), ``SFM`` per head and ``MVGB`` of the probabilities into the GEMV buffers, and SV;
  it is the ``attn`` kernel's group lowering. Heads split over cores run in rounds of one
  head per head core: the round's QK^T and SV in parallel (all-bank MACs), its SFMs one head
  after another on the channel's one softmax unit. :data:`SHARE_CHECKS` refuses the attention
  shares it cannot run without lowering them (the search drops those drafts first).
* Tokens split over groups (``partial``): each group's SFM (``SfmMode.STATS``) also leaves
  its max and sum of exponentials in a statistics entry the host reads (``RDSB``) with the
  partial outputs; :func:`combine_partials` is the host's combine, :func:`run_attention_split`
  runs a split on values.

Streams are built as arrays (:func:`_lower`, :func:`_attention`); the command-by-command
builder they replace is kept as :func:`lower_group_reference` / :func:`lower_attention_reference`
(the same streams, ``tests/test_attacc_lowering.py``).

:func:`compiler.dcc.tune.default_draft` gives AttAcc's default mapping as a draft.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from pimphony.compiler.dcc.lowering import Extents, GroupProgram, Tensors
from pimphony.compiler.dcc.schedule import (
    DCC_KERNELS,
    DccError,
    DccKernel,
)
from pimphony.models.attacc import (
    COMMAND_DTYPE,
    AttAccError,
    AttAccState,
    Levels,
    MacMode,
    Op,
    Scope,
    SfmMode,
    check_backend,
    command,
    execute,
    interleave,
    time_stream,
)
from pimphony.models.backends import BackendConfig

__all__ = [
    "CORE_ORDER",
    "GROUP_LOWERINGS",
    "SHARE_CHECKS",
    "UNSUPPORTED",
    "AttAccLoweringError",
    "lower_attention",
    "lower_attention_reference",
    "lower_group",
    "lower_group_reference",
    "combine_partials",
    "run_attention",
    "run_attention_split",
    "run_group",
    "token_shares",
]

PAD, ONE = -1, -2
"""Gather indices: a padded element (0) and the constant 1.0 (RED's GEMV buffer)."""


class AttAccLoweringError(DccError, AttAccError):
    """A share AttAcc cannot run: a kernel without hardware, too many cores, too big."""


#: Kernels AttAcc has no unit for (DCC V: "AttAcc does not have near-bank compute units that
#: could support and run RELU and VA").
UNSUPPORTED: dict[DccKernel, str] = {
    DccKernel.VA: "vector addition needs a near-bank ALU; AttAcc's banks have GEMV units only",
    DccKernel.RELU: "ReLU needs a near-bank ALU; AttAcc's banks have GEMV units only",
    DccKernel.BATCHED_VA: "vector addition needs a near-bank ALU; AttAcc's banks have GEMV "
    "units only",
    DccKernel.BATCHED_RELU: "ReLU needs a near-bank ALU; AttAcc's banks have GEMV units only",
}

#: Per kernel, the dimension sets in the order of the bank tensor's dimensions (cores are
#: numbered in this order, the last fastest): W[o][i], W with batch n outermost, K[h][t][d],
#: V[h][t][d] (sets h, d, t), A[m][n], A[b][m][n].
CORE_ORDER: dict[DccKernel, tuple[int, ...]] = {
    DccKernel.GEMV: (0, 1),
    DccKernel.BATCHED_GEMV: (0, 1, 2),
    DccKernel.QK: (0, 1, 2),
    DccKernel.SV: (0, 2, 1),
    DccKernel.RED: (0, 1),
    DccKernel.BATCHED_RED: (0, 1, 2),
}


@dataclass(frozen=True)
class _Share:
    """One core's slice of every set: element indices, -1 where padded."""

    idx: tuple[np.ndarray, ...]


def _shares(
    kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...], banks: int
) -> list[_Share | None]:
    """Per bank, its core's slices (``None`` for an idle bank)."""
    order = CORE_ORDER[kernel]
    lens = [-(-s // c) for s, c in zip(sizes, cores, strict=True)]
    out: list[_Share | None] = [None] * banks
    for bank, ks in enumerate(np.ndindex(*(cores[k] for k in order))):
        k_of = dict(zip(order, ks, strict=True))
        idx = []
        for k, (size, n) in enumerate(zip(sizes, lens, strict=True)):
            r = k_of[k] * n + np.arange(n)
            idx.append(np.where(r < size, r, PAD))
        out[bank] = _Share(tuple(idx))
    return out


def _flat(shape: tuple[int, ...], *parts: np.ndarray) -> np.ndarray:
    """Flat indices of ``shape`` from broadcast index arrays, -1 where any part is -1."""
    parts_b = np.broadcast_arrays(*parts)
    bad = np.zeros(parts_b[0].shape, bool)
    for p in parts_b:
        bad |= p < 0
    flat = np.ravel_multi_index(tuple(np.maximum(p, 0) for p in parts_b), shape)
    return np.where(bad, PAD, flat)


@dataclass
class _Job:
    """What every bank computes, as gathers into the kernel's tensors.

    ``weights``: (banks, S_w, A, B) indices into the bank tensor: DOT: A outputs x B reduced
    elements; AXPY: A reduced tokens x B outputs. ``gb``: (banks, S, R) indices into the
    GEMV-buffer tensor (R reduced elements). ``out``: (banks, S, O) indices into the result.
    """

    mode: MacMode
    weight: str
    gb_tensor: str
    out_tensor: str
    weights: np.ndarray
    gb: np.ndarray
    out: np.ndarray
    active: int


@dataclass(frozen=True)
class _JobForm:
    """A kernel's :class:`_Job` as a table row: the MAC mode, the three tensors' names and,
    per gather (``weights``, ``gb``, ``out``), the dimension sets indexing the tensor's axes
    in order; ``ones``: the GEMV-buffer operand is all ones over ``gb``'s set (RED)."""

    mode: MacMode
    weight: str
    gb_tensor: str
    out_tensor: str
    weights: tuple[int, ...]
    gb: tuple[int, ...]
    out: tuple[int, ...]
    ones: bool = False


#: Every kernel's job but batched RED's (:func:`_batched_red_job`); ``sizes`` are in the
#: kernel's set order (SV's: ``(h, d, t)``, its bank tensor is ``V[h, t, d]``).
_JOB_FORMS: dict[DccKernel, _JobForm] = {
    DccKernel.GEMV: _JobForm(MacMode.DOT, "W", "x", "y", (0, 1), (1,), (0,)),
    DccKernel.BATCHED_GEMV: _JobForm(MacMode.DOT, "W", "X", "Y", (1, 2), (0, 2), (0, 1)),
    DccKernel.QK: _JobForm(MacMode.DOT, "K", "Q", "S", (0, 1, 2), (0, 2), (0, 1)),
    DccKernel.SV: _JobForm(MacMode.AXPY, "V", "P", "O", (0, 2, 1), (0, 2), (0, 1)),
    DccKernel.RED: _JobForm(MacMode.DOT, "A", "", "r", (0, 1), (1,), (0,), ones=True),
}


def _job(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> _Job:
    nb = cfg.group.banks
    shares = _shares(kernel, sizes, cores, nb)
    active = math.prod(cores)
    lens = [-(-s // c) for s, c in zip(sizes, cores, strict=True)]

    def stack(fn: Callable[[_Share], np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
        out = np.full((nb, *shape), PAD, np.int64)
        for b, sh in enumerate(shares):
            if sh is not None:
                out[b] = fn(sh)
        return out

    if kernel is DccKernel.BATCHED_RED:
        return _batched_red_job(sizes, lens, active, stack)
    form = _JOB_FORMS.get(kernel)
    if form is None:
        raise AttAccLoweringError(f"kernel {kernel!s}: no AttAcc lowering")

    def gather(sets: tuple[int, ...], rank: int, ones: bool = False) -> np.ndarray:
        """The gathers into the tensor whose axes are ``sets`` (padded to ``rank`` axes)."""
        shape, lead = tuple(sizes[k] for k in sets), (1,) * (rank - len(sets))

        def one(s: _Share) -> np.ndarray:
            if ones:
                return np.where(s.idx[sets[0]] >= 0, ONE, PAD).reshape(lead + (-1,))
            axes = [
                s.idx[k].reshape([-1 if j == i else 1 for j in range(len(sets))])
                for i, k in enumerate(sets)
            ]
            return _flat(shape, *axes).reshape(lead + tuple(lens[k] for k in sets))

        return stack(one, lead + tuple(lens[k] for k in sets))

    return _Job(
        form.mode,
        form.weight,
        form.gb_tensor,
        form.out_tensor,
        gather(form.weights, 3),
        gather(form.gb, 2, form.ones),
        gather(form.out, 2),
        active,
    )


def _batched_red_job(
    sizes: tuple[int, ...],
    lens: list[int],
    active: int,
    stack: Callable[[Callable[[_Share], np.ndarray], tuple[int, ...]], np.ndarray],
) -> _Job:
    """Batched RED's :class:`_Job`: RED's, a core's batch rows folded into its outputs
    (output ``j`` of a core: its batch row ``j // m_c``, row ``j % m_c``)."""
    B, M, N = sizes
    lb, lm, ln = lens

    def rows(s: _Share) -> np.ndarray:  # the core's (b, m) outputs as flat indices of r
        return _flat((B, M), s.idx[0][:, None], s.idx[1][None, :]).ravel()

    def weights(s: _Share) -> np.ndarray:
        return _flat((B * M, N), rows(s)[:, None], s.idx[2][None, :])[None]

    return _Job(
        MacMode.DOT,
        "A",
        "",
        "r",
        stack(weights, (1, lb * lm, ln)),
        stack(lambda s: np.where(s.idx[2] >= 0, ONE, PAD)[None], (1, ln)),
        stack(lambda s: rows(s)[None], (1, lb * lm)),
        active,
    )


@dataclass
class _Builder:
    """Accumulates one group's stream, its payload gathers, weight addresses and reads."""

    cfg: BackendConfig
    lv: Levels
    active: int
    cmds: list[tuple] = field(default_factory=list)
    payload: list[np.ndarray] = field(default_factory=list)  # (lanes,) gathers into gb_tensor
    vectors: dict[tuple, int] = field(default_factory=dict)  # weight key -> vector index
    placed: list[tuple[str, int, np.ndarray]] = field(default_factory=list)  # tensor, vector,
    #   (banks, lanes) gathers
    reads: list[np.ndarray] = field(default_factory=list)  # (lanes,) gathers into the output
    slot_map: dict[int, np.ndarray] = field(default_factory=dict)
    open_row: int = -1

    def emit(self, op: Op, **fields: int) -> None:
        self.cmds.append(command(op, **fields))

    def address(self, tensor: str, key: tuple, gather: np.ndarray) -> tuple[int, int]:
        """(row, column) of vector ``key`` of ``tensor`` (``gather``: (banks, lanes)), placed
        in the order the MACs first read it."""
        key = (tensor, *key)
        if key not in self.vectors:
            self.vectors[key] = len(self.vectors)
            self.placed.append((tensor, self.vectors[key], gather))
        v = self.vectors[key]
        cols = self.cfg.group.columns_per_row
        return v // cols, v % cols

    def mac(
        self,
        tensor: str,
        key: tuple,
        gather: np.ndarray,
        src: int,
        dst: int,
        lane: int,
        mode: MacMode,
    ) -> None:
        row, col = self.address(tensor, key, gather)
        if row != self.open_row:
            if self.open_row >= 0:
                self.emit(Op.PREA)
            self.emit(Op.ACTAB, row=row)
            self.open_row = row
        self.emit(Op.MACAB, row=row, col=col, src=src, dst=dst, lane=lane, mode=int(mode))

    def close(self) -> None:
        if self.open_row >= 0:
            self.emit(Op.PREA)
            self.open_row = -1

    def plan(self, gathers: np.ndarray) -> list[tuple[int, Scope, int]]:
        """How to give every active bank ``gathers[bank]`` (lanes) with the fewest commands:
        per bank index, one broadcast to that index in every bank group if they all need the
        same vector (the score GEMV's WRGBs), or per bank group, one broadcast to its banks
        (the context GEMV's MVGBs); else one command per bank. Banks with nothing to hold
        are free. Returns (address bank, scope, bank whose vector is sent)."""
        need = np.flatnonzero((gathers[: self.active] != PAD).any(axis=1)).tolist()
        if not need:
            return []
        per = self.lv.per_group
        plans: list[list[tuple[int, Scope, int]]] = []
        keys = (
            (Scope.INDEX, lambda b: b % per),
            (Scope.GROUP, lambda b: int(self.lv.bank_group[b])),
        )
        rows = {b: gathers[b].tobytes() for b in need}
        for scope, key in keys:
            plan: list[tuple[int, Scope, int]] = []
            sets: dict[int, list[int]] = {}
            for b in need:
                sets.setdefault(key(b), []).append(b)
            for banks in sets.values():
                if len({rows[b] for b in banks}) == 1:
                    plan.append((banks[0], scope, banks[0]))
                else:
                    plan.extend((b, Scope.BANK, b) for b in banks)
            plans.append(plan)
        return min(plans, key=len)

    def wrgb(self, entry: int, gathers: np.ndarray) -> None:
        """WRGBs of GEMV-buffer entry ``entry`` (:meth:`plan`), the data from the host."""
        for bank, scope, src in self.plan(gathers):
            self.payload.append(gathers[src])
            self.emit(Op.WRGB, bank=bank, dst=entry, data=len(self.payload) - 1, mode=int(scope))

    def mvsb(
        self,
        entry: int,
        outs: np.ndarray,
        slot: int,
        used: np.ndarray,
        slot_of: Callable[[np.ndarray], int] | None = None,
    ) -> int:
        """Move accumulator ``entry`` of every active bank (``outs[bank]``: the output
        indices of its lanes) to softmax-buffer slots from ``slot``: banks holding the same
        outputs are summed into one slot (a whole bank group through its adder tree, other
        banks added one by one; a bank whose reduction share is all padding, ``used[b]``
        false, has nothing to add; ``slot_of(outputs)``, if given, names the slot). Returns
        the next free slot."""
        groups: dict[bytes, list[int]] = {}
        for b in range(self.active):
            if (outs[b] != PAD).any() and used[b]:
                groups.setdefault(outs[b].tobytes(), []).append(b)
        slots = self.cfg.group.buffer_bytes // self.cfg.group.column_bytes
        for banks in groups.values():
            if slot_of is not None:
                slot = slot_of(outs[banks[0]])
            if slot >= slots:
                raise AttAccLoweringError(
                    f"the share needs more than the {slots} softmax-buffer entries "
                    f"(group.buffer_bytes = {self.cfg.group.buffer_bytes}) at once"
                )
            members = set(banks)
            first = True
            done: set[int] = set()
            for b in banks:
                if b in done:
                    continue
                bg = np.flatnonzero(self.lv.bank_group == self.lv.bank_group[b])
                # idle banks (beyond the cores) hold zero weights; a core idle in this set may
                # hold products of broadcast inputs, so it must not be summed
                whole = all(x in members or x >= self.active for x in bg.tolist())
                scope = Scope.GROUP if whole and len(bg) > 1 else Scope.BANK
                self.emit(
                    Op.MVSB, bank=b, src=entry, dst=slot, mode=int(scope), add=0 if first else 1
                )
                done.update(bg.tolist() if scope is Scope.GROUP else [b])
                first = False
            self.slot_map[slot] = outs[banks[0]]
            slot += 1
        return slot

    def read_slots(self, start: int, stop: int) -> None:
        """RDSB of slots ``start`` .. ``stop - 1``, their addresses spread over pseudo-channels
        and bank groups (:func:`models.attacc.interleave`) so the reads go one per cycle."""
        order = interleave(self.cfg)
        for s in range(start, stop):
            self.emit(Op.RDSB, bank=int(order[s % len(order)]), src=s)
            self.reads.append(self.slot_map[s])
        self.slot_map.clear()


def _pad_lanes(a: np.ndarray, lanes: int) -> np.ndarray:
    """The last axis padded with -1 to a multiple of ``lanes`` and split into vectors."""
    n = a.shape[-1]
    m = -(-n // lanes) * lanes
    out = np.full((*a.shape[:-1], m), PAD, np.int64)
    out[..., :n] = a
    return out.reshape(*a.shape[:-1], m // lanes, lanes)


def _emit_job(
    bld: _Builder,
    job: _Job,
    *,
    key: tuple = (),
    read_back: bool = True,
    gb_from: Callable[[int, int, int], None] | None = None,
    slot_of: Callable[[np.ndarray], int] | None = None,
    slot_base: int = 0,
) -> None:
    """The stream of ``job`` (DOT or AXPY), pass by pass: GEMV-buffer fills, MACs, moves to
    the softmax buffer from slot ``slot_base`` (or at ``slot_of``), reads (``read_back``).
    ``gb_from(s, v, entry)``, if given, fills entry ``entry`` with vector ``v`` of set ``s``
    instead of WRGBs (attention: MVGB); ``key`` keeps the weight vectors of jobs apart."""
    c = bld.cfg.core
    L, IR, OR = c.lanes, c.input_regs, c.output_regs
    gbv = _pad_lanes(job.gb, L)  # (banks, S, vr, L)
    S, vr = gbv.shape[1], gbv.shape[2]
    tiles = -(-vr // IR)
    dot = job.mode is MacMode.DOT
    wv = _pad_lanes(job.weights, L)  # DOT: (banks, Sw, O, vr, L); AXPY: (banks, Sw, R, ob, L)
    outs = _pad_lanes(job.out, L)  # DOT: (banks, S, O/L, L); AXPY: (banks, S, ob, L)
    n_out_vec = outs.shape[2]
    used = (job.gb != PAD).any(axis=2)  # (banks, S): the bank reduces something
    passes = -(-n_out_vec // OR)
    Sw = wv.shape[1]
    for s in range(S):
        sw = s if Sw > 1 else 0
        for p in range(passes):
            entries = range(p * OR, min(n_out_vec, (p + 1) * OR))
            for t in range(tiles):
                vecs = range(t * IR, min(vr, (t + 1) * IR))
                if tiles > 1 or p == 0:
                    for v in vecs:
                        if gb_from is not None:
                            gb_from(s, v, v - t * IR)
                        else:
                            bld.wrgb(v - t * IR, gbv[:, s, v])
                # DOT: per output entry a, its outputs i against the tile's vectors b;
                # AXPY: per vector a, its reduced rows i into every output entry b
                outer, inner, n = (
                    (entries, vecs, job.out.shape[2]) if dot else (vecs, entries, job.gb.shape[2])
                )
                for a in outer:
                    for i in range(a * L, min(n, (a + 1) * L)):
                        for b in inner:
                            v, e = (b, a) if dot else (a, b)
                            w, src, dst = (*key, sw, i, b), v - t * IR, e - p * OR
                            bld.mac(job.weight, w, wv[:, sw, i, b], src, dst, i % L, job.mode)
            slot = slot_base
            for e in entries:
                slot = bld.mvsb(e - p * OR, outs[:, s, e], slot, used[:, s], slot_of)
            if read_back:
                bld.read_slots(slot_base, slot)
    bld.close()


@dataclass(frozen=True)
class _Gathers:
    """Where a program's values come from, as indices into the kernel's tensors (PAD zero,
    ONE one), built only when values are run."""

    payload: np.ndarray  # (n, lanes): the WRGBs' data rows, into the GEMV-buffer tensor
    placed: dict[str, np.ndarray]  # tensor -> (n, lanes), row k at program.inputs[tensor][k]
    reads: np.ndarray  # (n_reads, lanes): what each RDSB reads, into the output tensor


@dataclass(frozen=True)
class _Lowered:
    """A group program plus what :func:`run_group` needs to run it on values."""

    program: GroupProgram
    gb_tensor: str  # the tensor the WRGBs write ("" for RED's ones)
    out_tensor: str
    gathers: Callable[[], _Gathers]


def _nest(kernel: DccKernel, sizes: tuple[int, ...]):
    """The share's loop nest from ``sizes`` in dimension-set order (SV's sets are h, d, t;
    its :data:`DCC_KERNELS` entry takes heads, tokens, d_h)."""
    if kernel is DccKernel.SV:
        h, d, t = sizes
        return DCC_KERNELS[kernel](h, t, d)
    return DCC_KERNELS[kernel](*sizes)


def _check(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> None:
    try:
        check_backend(cfg)
    except AttAccError as exc:
        raise AttAccLoweringError(str(exc)) from None
    if kernel in UNSUPPORTED:
        raise AttAccLoweringError(f"kernel {kernel!s} cannot run on AttAcc: {UNSUPPORTED[kernel]}")
    if kernel not in CORE_ORDER:
        raise AttAccLoweringError(f"kernel {kernel!s}: no AttAcc lowering")
    n = len(CORE_ORDER[kernel])
    if len(sizes) != n or len(cores) != n:
        raise AttAccLoweringError(
            f"kernel {kernel!s} has {n} dimension sets; got sizes = {tuple(sizes)}, "
            f"cores = {tuple(cores)}"
        )
    if min(sizes) < 1 or min(cores) < 1:
        raise AttAccLoweringError(
            f"sizes = {tuple(sizes)}, cores = {tuple(cores)}: every entry must be >= 1"
        )
    if math.prod(cores) > cfg.cores_per_group:
        raise AttAccLoweringError(
            f"cores = {tuple(cores)}: {math.prod(cores)} cores, more than the "
            f"{cfg.cores_per_group} GEMV units (banks) of a group"
        )


def _finish(cfg: BackendConfig, bld: _Builder, job: _Job) -> _Lowered:
    g = cfg.group
    rows = -(-len(bld.vectors) // g.columns_per_row)
    if rows > g.rows_per_bank:
        names = " and ".join(sorted({t for t, _, _ in bld.placed}))
        raise AttAccLoweringError(
            f"the share's {names} needs {rows:,} rows per bank "
            f"({len(bld.vectors):,} vectors of {g.column_bytes} B); a bank has "
            f"{g.rows_per_bank:,} (group.rows_per_bank)"
        )
    stream = np.array(bld.cmds, dtype=COMMAND_DTYPE)
    tl = time_stream(cfg, stream)
    cols, L = g.columns_per_row, cfg.core.lanes
    placed = {}
    for tensor in dict.fromkeys(t for t, _, _ in bld.placed):
        vec = np.array([v for t, v, _ in bld.placed if t == tensor], np.int64)
        gathers = np.stack([x for t, _, x in bld.placed if t == tensor])  # (n, banks, lanes)
        vi, bank = np.nonzero((gathers != PAD).any(axis=2))
        addr = np.stack([bank, vec[vi] // cols, vec[vi] % cols], axis=1).astype(np.int64)
        placed[tensor] = (addr, gathers[vi, bank].reshape(-1, L))
    program = GroupProgram(
        stream=stream,
        cycles=tl.cycles,
        counts={k: v for k, v in tl.counts.items() if v},
        inputs={t: a for t, (a, _) in placed.items()},
        outputs={},
        host_ops=0,
    )
    gathers = _Gathers(
        np.array(bld.payload, np.int64).reshape(-1, L),
        {t: g for t, (_, g) in placed.items()},
        np.array(bld.reads, np.int64).reshape(-1, L),
    )
    return _Lowered(program, job.gb_tensor, job.out_tensor, lambda: gathers)


def _lower_reference(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> _Lowered:
    """:func:`_lower` built command by command (:class:`_Builder`): the oracle the vectorised
    lowering is tested against."""
    kernel = DccKernel(kernel)
    sizes, cores = tuple(int(s) for s in sizes), tuple(int(c) for c in cores)
    _check(cfg, kernel, sizes, cores)
    job = _job(cfg, kernel, sizes, cores)
    bld = _Builder(cfg, Levels.of(cfg), job.active)
    _emit_job(bld, job)
    return _finish(cfg, bld, job)


# ----------------------------------------------------------------------------- vectorised path
# The programs of the reference builder above (`_lower_reference`, `_attention_reference`),
# built as arrays. A share's MACs form a regular grid: their order, weight addresses and
# row switches are closed forms of the pass, tile and element indices. What a bank needs in
# its GEMV buffer and which banks meet in a softmax-buffer entry depend on the bank only
# through its slice of each dimension set (its "class"), so they are computed per class, and
# the accumulator moves are planned once per distinct set of participating banks.


@dataclass(frozen=True)
class _Roles:
    """What each dimension set of a kernel is to the GEMV units, and its tensors' indices.

    ``w_flat(sizes, s, o, r)``, ``gb_flat(sizes, s, r)``, ``out_flat(sizes, s, o)``: flat
    indices (PAD where any part is PAD) of the bank tensor, the GEMV-buffer tensor (ONE for
    RED's ones) and the output tensor, from broadcast index arrays of the sets."""

    mode: MacMode
    s: int | None  # the set iterated outermost (batch / heads); None: the kernel has none
    o: int  # the set of outputs (DOT: one per MAC lane; AXPY: the accumulator's lanes)
    r: int  # the reduced set
    w_has_s: bool  # the bank tensor has the s dimension (else every s reuses its vectors)
    w_flat: Callable[..., np.ndarray]
    gb_flat: Callable[..., np.ndarray]
    out_flat: Callable[..., np.ndarray]


_ROLES: dict[DccKernel, _Roles] = {
    DccKernel.GEMV: _Roles(
        MacMode.DOT, None, 0, 1, False,
        lambda z, s, o, r: _flat(z, o, r),
        lambda z, s, r: _flat(z[1:], r),
        lambda z, s, o: _flat(z[:1], o),
    ),
    DccKernel.BATCHED_GEMV: _Roles(
        MacMode.DOT, 0, 1, 2, False,
        lambda z, s, o, r: _flat(z[1:], o, r),
        lambda z, s, r: _flat((z[0], z[2]), s, r),
        lambda z, s, o: _flat(z[:2], s, o),
    ),
    DccKernel.QK: _Roles(
        MacMode.DOT, 0, 1, 2, True,
        lambda z, s, o, r: _flat(z, s, o, r),
        lambda z, s, r: _flat((z[0], z[2]), s, r),
        lambda z, s, o: _flat(z[:2], s, o),
    ),
    DccKernel.SV: _Roles(  # sets (h, d, t); V[h][t][d], P[h][t], O[h][d]
        MacMode.AXPY, 0, 1, 2, True,
        lambda z, s, o, r: _flat((z[0], z[2], z[1]), s, r, o),
        lambda z, s, r: _flat((z[0], z[2]), s, r),
        lambda z, s, o: _flat(z[:2], s, o),
    ),
    DccKernel.RED: _Roles(
        MacMode.DOT, None, 0, 1, False,
        lambda z, s, o, r: _flat(z, o, r),
        lambda z, s, r: np.where(r >= 0, ONE, PAD),
        lambda z, s, o: _flat(z[:1], o),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class _Geometry:
    """One share's grid: per set its slices, per bank its class, the MACs of one s in order.

    MAC ``m`` of every s: ``a[m]`` (DOT: output, AXPY: reduced element) and ``b[m]`` (DOT:
    reduction vector, AXPY: output vector), its GEMV-buffer entry, accumulator and lane, and
    its block (pass x tiles + tile; blocks are contiguous runs of m)."""

    kernel: DccKernel
    roles: _Roles
    sizes: tuple[int, ...]
    active: int
    n_s: int  # s values per bank (1 without an s set)
    n_o: int  # outputs (DOT) / output elements (AXPY) per bank
    n_r: int  # reduced elements per bank
    vr: int  # GEMV-buffer vectors per s (the reduced elements' vectors)
    ne: int  # output vectors per s
    passes: int
    tiles: int
    nm: int  # MACs (= weight vectors) per s
    cs: np.ndarray  # (active,) each bank's slice of the s set, of the output set, of the
    co: np.ndarray  #   reduced set
    cr: np.ndarray
    sidx: np.ndarray  # (slices, n_s) / (slices, n_o) / (slices, n_r) element indices, PAD
    oidx: np.ndarray
    ridx: np.ndarray
    gb_rows: np.ndarray  # (s slices x r slices, n_s, vr, lanes) GEMV-buffer gathers
    out_rows: np.ndarray  # (s slices x o slices, n_s, ne, lanes) output gathers
    gcls: np.ndarray  # (active,) row of gb_rows / out_rows of each bank
    ocls: np.ndarray
    a: np.ndarray
    b: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    lane: np.ndarray
    block: np.ndarray
    block_start: np.ndarray  # first m of each block


def _pad_to(a: np.ndarray, n: int) -> np.ndarray:
    """The last axis padded with PAD to length ``n``."""
    out = np.full((*a.shape[:-1], n), PAD, np.int64)
    out[..., : a.shape[-1]] = a
    return out


def _geometry(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> _Geometry:
    """The share's :class:`_Geometry` (the reference's :func:`_job`, as slices and classes)."""
    if kernel is DccKernel.BATCHED_RED:
        return _batched_red_geometry(cfg, sizes, cores)
    ro = _ROLES[kernel]
    L, IR, OR = cfg.core.lanes, cfg.core.input_regs, cfg.core.output_regs
    lens = [-(-s // c) for s, c in zip(sizes, cores, strict=True)]
    order = CORE_ORDER[kernel]
    active = math.prod(cores)
    coord = dict(
        zip(order, np.unravel_index(np.arange(active), [cores[k] for k in order]), strict=True)
    )

    def slices(k: int | None) -> tuple[np.ndarray, np.ndarray]:
        if k is None:
            return np.zeros(active, np.int64), np.zeros((1, 1), np.int64)
        r = np.arange(cores[k])[:, None] * lens[k] + np.arange(lens[k])[None, :]
        return coord[k].astype(np.int64), np.where(r < sizes[k], r, PAD)

    cs, sidx = slices(ro.s)
    co, oidx = slices(ro.o)
    cr, ridx = slices(ro.r)
    n_s, n_o, n_r = sidx.shape[1], oidx.shape[1], ridx.shape[1]
    vr, ne = -(-n_r // L), -(-n_o // L)
    gb = ro.gb_flat(sizes, sidx[:, None, :, None], ridx[None, :, None, :])
    gb = np.broadcast_to(gb, (len(sidx), len(ridx), n_s, n_r))
    out = ro.out_flat(sizes, sidx[:, None, :, None], oidx[None, :, None, :])
    out = np.broadcast_to(out, (len(sidx), len(oidx), n_s, n_o))
    gb_rows = _pad_to(gb, vr * L).reshape(-1, n_s, vr, L)
    out_rows = _pad_to(out, ne * L).reshape(-1, n_s, ne, L)
    dot = ro.mode is MacMode.DOT
    passes = -(-ne // OR)
    tiles = -(-vr // IR)
    if dot:  # MACs: pass, tile, output, vector
        a, b = (x.ravel() for x in np.meshgrid(np.arange(n_o), np.arange(vr), indexing="ij"))
        p, t = a // L // OR, b // IR
        a0 = p * OR * L
        ac = np.minimum(n_o, a0 + OR * L) - a0
        b0 = t * IR
        bc = np.minimum(vr, b0 + IR) - b0
        f = a0 * vr + ac * b0 + (a - a0) * bc + (b - b0)
        src, dst, lane = b - b0, a // L - p * OR, a % L
    else:  # MACs: pass, tile, reduced element, output vector
        a, b = (x.ravel() for x in np.meshgrid(np.arange(n_r), np.arange(ne), indexing="ij"))
        p, t = b // OR, a // L // IR
        b0 = p * OR
        bc = np.minimum(ne, b0 + OR) - b0
        a0 = t * IR * L
        f = b0 * n_r + bc * a0 + (a - a0) * bc + (b - b0)
        src, dst, lane = a // L - t * IR, b - b0, a % L
    inv = np.empty_like(f)
    inv[f] = np.arange(len(f))
    block = (p * tiles + t)[inv]
    starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
    return _Geometry(
        kernel, ro, sizes, active, n_s, n_o, n_r, vr, ne, passes, tiles, len(f),
        cs, co, cr, sidx, oidx, ridx, gb_rows, out_rows,
        cs * len(ridx) + cr, cs * len(oidx) + co,
        a[inv], b[inv], src[inv], dst[inv], lane[inv], block, starts,
    )  # fmt: skip


def _batched_red_geometry(
    cfg: BackendConfig, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> _Geometry:
    """Batched RED's :class:`_Geometry`: RED's over ``c_b c_m`` row cores of ``b_c m_c``
    outputs each (``b_c``, ``m_c``: a core's batch rows and rows), whose output ``j`` is
    ``r[b][m]`` of its batch row ``j // m_c`` and row ``j % m_c``."""
    B, M, N = sizes
    c_b, c_m, c_n = cores
    lb, lm = -(-B // c_b), -(-M // c_m)
    k = np.arange(c_b * c_m)[:, None]
    j = np.arange(lb * lm)[None, :]
    b, m = k // c_m * lb + j // lm, k % c_m * lm + j % lm
    oidx = np.where((b < B) & (m < M), b * M + m, PAD)
    # RED of c_b c_m x (b_c m_c) rows, cores numbered (b, m), n as batched RED's (b, m, n)
    geo = _geometry(cfg, DccKernel.RED, (c_b * c_m * lb * lm, N), (c_b * c_m, c_n))
    L = cfg.core.lanes
    out_rows = _pad_to(oidx, geo.ne * L).reshape(len(oidx), 1, geo.ne, L)
    return dataclasses.replace(geo, kernel=DccKernel.BATCHED_RED, oidx=oidx, out_rows=out_rows)


@dataclass
class _Part:
    """Commands of one kind: their fields, s frame and position in it, and what their values
    come from (``meta``)."""

    cmds: np.ndarray
    s: np.ndarray
    pos: np.ndarray
    meta: dict[str, np.ndarray] = field(default_factory=dict)


def _cmds(count: int, op: Op, **fields: np.ndarray | int) -> np.ndarray:
    """``count`` commands ``op`` with ``fields`` (arrays or one value), unset fields 0, data -1."""
    out = np.zeros(count, COMMAND_DTYPE)
    out["op"] = int(op)
    out["data"] = -1
    for name, v in fields.items():
        out[name] = v
    return out


def _excl(a: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.cumsum(a, axis=axis) - a


def _plan_fills(lv: Levels, nb: int, ids: np.ndarray, need: np.ndarray):
    """:meth:`_Builder.plan` of N fills at once. ``ids``, ``need``: (active banks, N) content
    id of each bank's vector and whether it needs one. Returns (fill, bank, scope, rank) of
    every command, in the plan's order, and the commands per fill."""
    A, N = need.shape
    per = lv.per_group
    nbg = nb // per
    idf = np.full((nb, N), -1, np.int64)
    idf[:A] = ids
    nd = np.zeros((nb, N), bool)
    nd[:A] = need
    idf, nd = idf.reshape(nbg, per, N), nd.reshape(nbg, per, N)

    def sets(axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cnt = nd.sum(axis)
        first = nd.argmax(axis)
        fid = np.take_along_axis(idf, np.expand_dims(first, axis), axis)
        same = (~nd | (idf == fid)).all(axis)
        return first, same, np.where(cnt == 0, 0, np.where(same, 1, cnt)).sum(0)

    f_i, s_i, n_i = sets(0)  # per bank index: the same vector in every bank group
    f_g, s_g, n_g = sets(1)  # per bank group: the same vector in its banks
    bg = np.arange(nbg)[:, None, None]
    ii = np.arange(per)[None, :, None]
    bank = bg * per + ii
    use_i = (n_i <= n_g)[None, None, :]
    emit = np.where(
        use_i, nd & (~s_i[None] | (bg == f_i[None])), nd & (~s_g[:, None] | (ii == f_g[:, None]))
    )
    key = np.where(use_i, (f_i[None] * per + ii) * nb + bank, np.broadcast_to(bank, nd.shape))
    scope = np.where(
        use_i,
        np.where(s_i[None], int(Scope.INDEX), int(Scope.BANK)),
        np.where(s_g[:, None], int(Scope.GROUP), int(Scope.BANK)),
    )
    bb, nn = np.nonzero(emit.reshape(nb, N))
    k2 = key.reshape(nb, N)[bb, nn]
    order = np.lexsort((k2, nn))
    fill, bank_o = nn[order], bb[order]
    cnt = np.bincount(fill, minlength=N)
    rank = np.arange(len(fill)) - _excl(cnt)[fill]
    return fill, bank_o, scope.reshape(nb, N)[bb, nn][order], rank, cnt


def _move_plan(lv: Levels, active: int, members: np.ndarray, ocls: np.ndarray):
    """:meth:`_Builder.mvsb` for one set of participating banks (``members``, (active,)):
    rows (bank, scope, add, group, group's first bank) and the number of groups. Banks with
    the same output slice hold the same outputs (slices are disjoint)."""
    groups: dict[int, list[int]] = {}
    for b in np.flatnonzero(members).tolist():
        groups.setdefault(int(ocls[b]), []).append(b)
    per = lv.per_group
    rows = []
    for gi, banks in enumerate(groups.values()):
        inside = set(banks)
        done: set[int] = set()
        for b in banks:
            if b in done:
                continue
            bg = range(b // per * per, (b // per + 1) * per)
            whole = all(x in inside or x >= active for x in bg)
            scope = Scope.GROUP if whole and per > 1 else Scope.BANK
            rows.append((b, int(scope), int(b != banks[0]), gi, banks[0]))
            done.update(bg if scope is Scope.GROUP else (b,))
    return np.array(rows, np.int64).reshape(-1, 5), len(groups)


@dataclass
class _Emitted:
    """One job's commands as parts, the length of each s frame, and its weight vectors."""

    parts: list[_Part]
    frame: np.ndarray  # (n_s,) commands per s frame
    vectors: int  # weight vectors the job placed


def _emit(
    cfg: BackendConfig,
    geo: _Geometry,
    vbase: np.ndarray,
    *,
    close_per_s: bool,
    read_back: bool,
    fill_op: Op = Op.WRGB,
    fill_entry: Callable[[np.ndarray], np.ndarray] | None = None,
    slot_entry: Callable[[np.ndarray], np.ndarray] | None = None,
    slot_base: int = 0,
) -> _Emitted:
    """The commands of ``geo``'s job (:func:`_emit_job`), each s in its own frame: per pass,
    per tile the GEMV-buffer fills (``fill_op`` WRGB from the host, or MVGB from softmax-buffer
    entry ``fill_entry(first element)``) and the MACs (ACTAB / PREA where the row changes),
    then the moves to the softmax buffer (at consecutive entries from ``slot_base``, or at
    entry ``slot_entry(first output)``), then their reads (``read_back``). ``vbase[s]``: the
    first weight vector of frame s. ``close_per_s``: a PREA ends every frame (else only the
    last)."""
    g, c = cfg.group, cfg.core
    L, IR, OR, nb = c.lanes, c.input_regs, c.output_regs, g.banks
    cols, slots = g.columns_per_row, g.buffer_bytes // g.column_bytes
    lv = Levels.of(cfg)
    S, nm, P, T, vr, ne = geo.n_s, geo.nm, geo.passes, geo.tiles, geo.vr, geo.ne
    nblk = 2 * T + 2  # per pass: (fill, MACs) per tile, moves, reads
    parts: list[_Part] = []
    # --- MACs, with ACTAB (and PREA) where the row changes
    vec = vbase[:, None] + np.arange(nm)[None, :]
    row = vec // cols
    prev = np.empty_like(row)
    prev[:, 1:] = row[:, :-1]
    if close_per_s:
        prev[:, 0] = -1
    else:
        prev[1:, 0] = row[:-1, -1]
        prev[0, 0] = -1
    act = row != prev
    pre = act & (prev >= 0)
    size = 1 + act + pre
    ex = _excl(size, 1)
    rank = ex - ex[:, geo.block_start[geo.block]]  # within the MAC block (blocks 0, 1, ...)
    mac_cnt = np.add.reduceat(size, geo.block_start, axis=1)  # (S, blocks)
    blk = geo.block  # p * T + t
    bpos = (blk // T) * nblk + 2 * (blk % T) + 1  # the MAC block of (p, t)
    ss = np.repeat(np.arange(S), nm)
    parts.append(_Part(
        _cmds(S * nm, Op.MACAB, row=row.ravel(), col=(vec % cols).ravel(),
              src=np.tile(geo.src, S), dst=np.tile(geo.dst, S), lane=np.tile(geo.lane, S),
              mode=int(geo.roles.mode)),
        ss, (rank + pre + act).ravel(), {"bpos": np.tile(bpos, S)},
    ))  # fmt: skip
    sa, ma = np.nonzero(act)
    parts.append(_Part(_cmds(len(sa), Op.ACTAB, row=row[sa, ma]), sa, rank[sa, ma] + pre[sa, ma],
                       {"bpos": bpos[ma]}))  # fmt: skip
    sp, mp = np.nonzero(pre)
    parts.append(_Part(_cmds(len(sp), Op.PREA), sp, rank[sp, mp], {"bpos": bpos[mp]}))
    # --- GEMV-buffer fills: one plan per (s, vector), repeated per pass if tiles > 1
    gb_valid = geo.gb_rows != PAD
    need_c = gb_valid.any(-1)  # (classes, S, vr)
    _, ids_c = np.unique(geo.gb_rows.reshape(-1, L), axis=0, return_inverse=True)
    ids_c = ids_c.reshape(need_c.shape)
    need = need_c[geo.gcls].reshape(geo.active, S * vr)
    fill, fbank, fscope, frank, fcnt = _plan_fills(lv, nb, ids_c[geo.gcls].reshape(need.shape),
                                                   need)  # fmt: skip
    fs, fv = fill // vr, fill % vr
    ft = fv // IR
    cnt = fcnt.reshape(S, vr)
    ex = _excl(cnt, 1)
    within = (ex - ex[:, (np.arange(vr) // IR) * IR])[fs, fv] + frank
    fill_cnt = np.add.reduceat(cnt, np.arange(0, vr, IR), axis=1)  # (S, T)
    copies = np.arange(P) if T > 1 else np.zeros(1, np.int64)
    n_f, n_c = len(fill), len(copies)
    fp = np.repeat(copies, n_f)  # copy-major: pass, then the fill order
    fields: dict[str, np.ndarray | int] = {
        "bank": np.tile(fbank, n_c), "dst": np.tile(fv - ft * IR, n_c),
        "mode": np.tile(fscope, n_c),
    }  # fmt: skip
    meta = {"bpos": fp * nblk + np.tile(2 * ft, n_c), "s": np.tile(fs, n_c),
            "v": np.tile(fv, n_c), "bank": np.tile(fbank, n_c)}  # fmt: skip
    if fill_op is Op.MVGB:  # the probabilities' softmax-buffer entry: token // lanes
        first = np.where(geo.gb_rows != PAD, geo.gb_rows, np.iinfo(np.int64).max).min(-1)
        assert fill_entry is not None
        fields["src"] = np.tile(fill_entry(first[geo.gcls[fbank], fs, fv]), n_c)
    parts.append(_Part(_cmds(n_f * n_c, fill_op, **fields), np.tile(fs, n_c),
                       np.tile(within, n_c), meta))  # fmt: skip
    # --- moves to the softmax buffer: one plan per distinct set of participating banks
    out_valid = (geo.out_rows != PAD).any(-1)  # (classes, S, ne)
    used = need_c[geo.gcls].any(-1)  # (active, S)
    members = out_valid[geo.ocls] & used[:, :, None]  # (active, S, ne)
    packed = np.packbits(members.reshape(geo.active, S * ne), axis=0)
    key = np.zeros((S * ne, 8), np.uint8)
    key[:, : packed.shape[0]] = packed.T
    uniq, first_pair, inv = np.unique(key.view(np.uint64).ravel(), return_index=True,
                                      return_inverse=True)  # fmt: skip
    plans = [_move_plan(lv, geo.active, members.reshape(geo.active, -1)[:, n], geo.ocls)
             for n in first_pair.tolist()]  # fmt: skip
    nc = np.array([len(r) for r, _ in plans], np.int64)[inv].reshape(S, ne)
    ng = np.array([k for _, k in plans], np.int64)[inv].reshape(S, ne)
    pstart = (np.arange(ne) // OR) * OR
    cb, gbf = _excl(nc, 1), _excl(ng, 1)
    cb, gbf = cb - cb[:, pstart], gbf - gbf[:, pstart]
    pass_ends = np.minimum(np.arange(P) * OR + OR, ne) - 1
    move_cnt = cb[:, pass_ends] + nc[:, pass_ends]
    group_cnt = gbf[:, pass_ends] + ng[:, pass_ends]
    pieces = []
    for u, (rows, _) in enumerate(plans):
        pairs = np.flatnonzero(inv == u)
        if len(rows) and len(pairs):
            pieces.append((np.repeat(pairs, len(rows)), np.tile(np.arange(len(rows)), len(pairs)),
                           np.tile(rows, (len(pairs), 1))))  # fmt: skip
    if pieces:
        pair = np.concatenate([x[0] for x in pieces])
        j = np.concatenate([x[1] for x in pieces])
        rows = np.concatenate([x[2] for x in pieces])
    else:
        pair, j, rows = (np.zeros(0, np.int64),) * 2 + (np.zeros((0, 5), np.int64),)
    ms, me = pair // ne, pair % ne
    mpass = me // OR
    if slot_entry is None:
        slot = slot_base + gbf[ms, me] + rows[:, 3]
    else:
        firsts = np.where(geo.out_rows != PAD, geo.out_rows, np.iinfo(np.int64).max).min(-1)
        slot = slot_entry(firsts[geo.ocls[rows[:, 4]], ms, me])
    if len(slot) and slot.max() >= slots:
        raise AttAccLoweringError(
            f"the share needs more than the {slots} softmax-buffer entries "
            f"(group.buffer_bytes = {g.buffer_bytes}) at once"
        )
    parts.append(_Part(
        _cmds(len(pair), Op.MVSB, bank=rows[:, 0], src=me - mpass * OR, dst=slot,
              mode=rows[:, 1], add=rows[:, 2]),
        ms, cb[ms, me] + j, {"bpos": mpass * nblk + 2 * T},
    ))  # fmt: skip
    if read_back:
        assert slot_entry is None
        first = rows[:, 2] == 0
        rslot = slot[first]
        order = interleave(cfg)
        parts.append(_Part(
            _cmds(int(first.sum()), Op.RDSB, bank=order[rslot % nb], src=rslot),
            ms[first], rslot - slot_base,
            {"bpos": mpass[first] * nblk + 2 * T + 1, "s": ms[first], "e": me[first],
             "bank": rows[first, 4]},
        ))  # fmt: skip
    # --- block layout of every frame
    counts = np.zeros((S, P, nblk), np.int64)
    counts[:, :, 0 : 2 * T : 2] = fill_cnt[:, None, :]
    if T == 1:
        counts[:, 1:, 0] = 0
    counts[:, :, 1 : 2 * T : 2] = mac_cnt.reshape(S, P, T)
    counts[:, :, 2 * T] = move_cnt
    if read_back:
        counts[:, :, 2 * T + 1] = group_cnt
    boff = _excl(counts.reshape(S, -1), 1)
    for part in parts:
        part.pos = boff[part.s, part.meta.pop("bpos")] + part.pos
    frame = counts.reshape(S, -1).sum(1)
    if close_per_s:
        parts.append(_Part(_cmds(S, Op.PREA), np.arange(S), frame.copy()))
        frame = frame + 1
    else:
        parts.append(_Part(_cmds(1, Op.PREA), np.array([S - 1]), frame[-1:].copy()))
        frame[-1] += 1
    return _Emitted(parts, frame, int(vbase.max()) + nm)


def _weight_vectors(geo: _Geometry, vbase: np.ndarray, lanes: int):
    """Every (frame s, MAC m, bank) whose weight vector holds data, in vector order, and
    their vector numbers: what the bank tensor's ``inputs`` are."""
    ro = geo.roles
    n_w = geo.n_s if ro.w_has_s else 1
    s_ok = (geo.sidx[geo.cs] != PAD)[:, :n_w] if ro.w_has_s else np.ones((geo.active, 1), bool)
    o_ok = geo.oidx[geo.co] != PAD  # (active, n_o)
    r_ok = geo.ridx[geo.cr] != PAD  # (active, n_r)
    if ro.mode is MacMode.DOT:  # (output a, reduction vector b)
        rv = _pad_to(r_ok.astype(np.int64), geo.vr * lanes).reshape(geo.active, geo.vr, lanes)
        ok = o_ok[:, geo.a] & (rv == 1).any(-1)[:, geo.b]
    else:  # (reduced element a, output vector b)
        ov = _pad_to(o_ok.astype(np.int64), geo.ne * lanes).reshape(geo.active, geo.ne, lanes)
        ok = r_ok[:, geo.a] & (ov == 1).any(-1)[:, geo.b]
    valid = s_ok[:, :, None] & ok[:, None, :]  # (active, n_w, nm)
    s, m, bank = np.nonzero(valid.transpose(1, 2, 0))
    return s, m, bank, vbase[s] + m


def _weight_gathers(geo: _Geometry, s: np.ndarray, m: np.ndarray, bank: np.ndarray, lanes: int):
    """(n, lanes) bank-tensor indices of the weight vectors (frame s, MAC m, bank)."""
    lane = np.arange(lanes)[None, :]
    si = geo.sidx[geo.cs[bank], s][:, None]
    if geo.roles.mode is MacMode.DOT:
        o = geo.oidx[geo.co[bank], geo.a[m]][:, None]
        r = _pad_to(geo.ridx, geo.vr * lanes)[
            geo.cr[bank][:, None], geo.b[m][:, None] * lanes + lane
        ]
    else:
        r = geo.ridx[geo.cr[bank], geo.a[m]][:, None]
        o = _pad_to(geo.oidx, geo.ne * lanes)[
            geo.co[bank][:, None], geo.b[m][:, None] * lanes + lane
        ]
    return np.broadcast_to(geo.roles.w_flat(geo.sizes, si, o, r), (len(s), lanes))


def _assemble(parts: list[tuple[_Part, np.ndarray]], total: int) -> tuple[np.ndarray, np.ndarray]:
    """The stream of ``parts`` (each with its frames' first positions), WRGB ``data`` numbered
    in stream order; and the positions of the WRGBs (their payload rows' order)."""
    stream = np.zeros(total, COMMAND_DTYPE)
    filled = np.zeros(total, bool)
    for part, off in parts:
        at = off[part.s] + part.pos
        for name in COMMAND_DTYPE.names:  # field by field: ~4x faster than whole records
            stream[name][at] = part.cmds[name]
        filled[at] = True
    assert filled.all(), "vectorised lowering left a gap in the stream"
    wr = np.flatnonzero(stream["op"] == Op.WRGB)
    stream["data"][wr] = np.arange(len(wr))
    return stream, wr


def _rows_check(cfg: BackendConfig, names: list[str], vectors: int) -> None:
    g = cfg.group
    rows = -(-vectors // g.columns_per_row)
    if rows > g.rows_per_bank:
        raise AttAccLoweringError(
            f"the share's {' and '.join(sorted(names))} needs {rows:,} rows per bank "
            f"({vectors:,} vectors of {g.column_bytes} B); a bank has "
            f"{g.rows_per_bank:,} (group.rows_per_bank)"
        )


def _fill_gathers(geo: _Geometry, part: _Part) -> np.ndarray:
    """The GEMV-buffer rows the fills of ``part`` send (its meta: s, v, bank)."""
    return geo.gb_rows[geo.gcls[part.meta["bank"]], part.meta["s"], part.meta["v"]]


def _read_gathers(geo: _Geometry, part: _Part) -> np.ndarray:
    """The output rows the RDSBs of ``part`` read (its meta: s, e, the group's first bank)."""
    return geo.out_rows[geo.ocls[part.meta["bank"]], part.meta["s"], part.meta["e"]]


def _program(cfg: BackendConfig, stream: np.ndarray, inputs: dict[str, np.ndarray]):
    tl = time_stream(cfg, stream)
    return GroupProgram(
        stream=stream,
        cycles=tl.cycles,
        counts={k: v for k, v in tl.counts.items() if v},
        inputs=inputs,
        outputs={},
        host_ops=0,
    )


def _addresses(cfg: BackendConfig, bank: np.ndarray, vec: np.ndarray) -> np.ndarray:
    cols = cfg.group.columns_per_row
    return np.stack([bank, vec // cols, vec % cols], axis=1).astype(np.int64)


#: Each kernel's tensors: bank tensor, GEMV-buffer tensor ("" = ones), output.
_TENSORS: dict[DccKernel, tuple[str, str, str]] = {
    DccKernel.GEMV: ("W", "x", "y"),
    DccKernel.BATCHED_GEMV: ("W", "X", "Y"),
    DccKernel.QK: ("K", "Q", "S"),
    DccKernel.SV: ("V", "P", "O"),
    DccKernel.RED: ("A", "", "r"),
    DccKernel.BATCHED_RED: ("A", "", "r"),
}


def _lower(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> _Lowered:
    """One group's program for its share, built as arrays (:func:`_lower_reference`'s
    program, command for command)."""
    kernel = DccKernel(kernel)
    sizes, cores = tuple(int(s) for s in sizes), tuple(int(c) for c in cores)
    _check(cfg, kernel, sizes, cores)
    geo = _geometry(cfg, kernel, sizes, cores)
    L = cfg.core.lanes
    vbase = np.arange(geo.n_s) * geo.nm if geo.roles.w_has_s else np.zeros(geo.n_s, np.int64)
    em = _emit(cfg, geo, vbase, close_per_s=False, read_back=True)
    weight, gb_tensor, out_tensor = _TENSORS[kernel]
    _rows_check(cfg, [weight], em.vectors)
    off = _excl(em.frame)
    stream, wr = _assemble([(p, off) for p in em.parts], int(em.frame.sum()))
    ws, wm, wb, wv = _weight_vectors(geo, vbase, L)
    prog = _program(cfg, stream, {weight: _addresses(cfg, wb, wv)})
    fills, reads = em.parts[3], em.parts[5]

    def gathers() -> _Gathers:
        order = np.argsort(off[fills.s] + fills.pos)
        return _Gathers(
            _fill_gathers(geo, fills)[order],
            {weight: _weight_gathers(geo, ws, wm, wb, L)},
            _read_gathers(geo, reads)[np.argsort(off[reads.s] + reads.pos)],
        )

    return _Lowered(prog, gb_tensor, out_tensor, gathers)


def _score_entry(cfg: BackendConfig, sizes: tuple[int, int, int], c_h: int):
    """Softmax-buffer entry of score ``h * T + t`` (flat, numpy arrays or ints): head core
    ``h // heads per core`` keeps its head's scores in its own run of ceil(T / lanes) entries,
    token ``t`` at entry ``t // lanes`` of it (one head core: entry ``t // lanes``)."""
    H, T, _ = sizes
    lh, L = -(-H // c_h), cfg.core.lanes
    p_slots = -(-T // L)
    return lambda flat: (flat // T // lh) * p_slots + (flat % T) // L


def _attention(
    cfg: BackendConfig,
    sizes: tuple[int, int, int],
    cores: tuple[int, int, int],
    partial: bool = False,
) -> tuple[_Lowered, tuple[int, ...]]:
    """:func:`_attention_reference`'s program, built as arrays: per round (one head of every
    head core) the frame [QK^T of the round's heads (scores left in the softmax buffer), an
    SFM per head one after another, SV of the round's heads (probabilities moved in by
    MVGB), with ``partial`` the RDSBs of the round's statistics entries]."""
    base, stats, (H, T, D), (c_h, c_t, c_d), lh, p_slots, entry = _attention_check(
        cfg, sizes, cores, partial
    )
    L = cfg.core.lanes
    qk = _geometry(cfg, DccKernel.QK, (H, T, D), (c_h, c_t, c_d))
    sv = _geometry(cfg, DccKernel.SV, (H, D, T), (c_h, c_d, c_t))
    per_head = qk.nm + sv.nm
    vq = np.arange(lh) * per_head
    vs = vq + qk.nm
    eq = _emit(cfg, qk, vq, close_per_s=True, read_back=False, slot_entry=entry)
    es = _emit(
        cfg, sv, vs, close_per_s=True, read_back=True, fill_op=Op.MVGB, fill_entry=entry,
        slot_base=base,
    )  # fmt: skip
    _rows_check(cfg, ["K", "V"], lh * per_head)
    s_sfm, j_sfm = _sfm_rounds(H, c_h)
    n_sfm = np.bincount(s_sfm, minlength=lh)
    n_st = n_sfm if partial else np.zeros_like(n_sfm)  # the statistics' RDSBs per round
    head = _excl(eq.frame + n_sfm + es.frame + n_st)
    st_fields = {"dst": stats + j_sfm, "mode": int(SfmMode.STATS)} if partial else {}
    sfm = _Part(
        _cmds(len(s_sfm), Op.SFM, src=j_sfm * p_slots, n=T, **st_fields),
        s_sfm,
        eq.frame[s_sfm] + j_sfm,
    )
    roff = head + eq.frame + n_sfm
    parts = [(p, head) for p in (*eq.parts, sfm)] + [(p, roff) for p in es.parts]
    if partial:  # after the round's frame: head core j's statistics, read like any result
        st_bank = interleave(cfg)[(stats + j_sfm) % cfg.group.banks]
        rd = _cmds(len(s_sfm), Op.RDSB, bank=st_bank, src=stats + j_sfm)
        parts.append((_Part(rd, s_sfm, es.frame[s_sfm] + j_sfm), roff))
    stream, _ = _assemble(parts, int(roff[-1] + es.frame[-1] + n_st[-1]))
    kq = _weight_vectors(qk, vq, L)
    kv = _weight_vectors(sv, vs, L)
    prog = _program(
        cfg, stream, {"K": _addresses(cfg, kq[2], kq[3]), "V": _addresses(cfg, kv[2], kv[3])}
    )
    fills, reads = eq.parts[3], es.parts[5]

    def gathers() -> _Gathers:
        return _Gathers(
            _fill_gathers(qk, fills)[np.argsort(head[fills.s] + fills.pos)],
            {"K": _weight_gathers(qk, *kq[:3], L), "V": _weight_gathers(sv, *kv[:3], L)},
            _read_gathers(sv, reads)[np.argsort(roff[reads.s] + reads.pos)],
        )

    return _Lowered(prog, "Q", "O", gathers), (H, T, D)


def _sfm_rounds(H: int, c_h: int) -> tuple[np.ndarray, np.ndarray]:
    """Round ``s`` and head core ``j`` of every SFM (and statistics read) in stream order: in
    round s head core j runs head ``j * ceil(H / c_h) + s``, if it exists (a prefix of the
    cores)."""
    lh = -(-H // c_h)
    s, j = np.nonzero(np.arange(c_h)[None, :] * lh + np.arange(lh)[:, None] < H)
    return s, j


def lower_group(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> GroupProgram:
    """One AttAcc group's program for its share ``sizes`` of ``kernel`` on ``cores``."""
    return _lower(cfg, kernel, sizes, cores).program


def lower_group_reference(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> GroupProgram:
    """:func:`lower_group` built command by command in plain Python (the same program; kept
    to test the vectorised lowering against)."""
    return _lower_reference(cfg, kernel, sizes, cores).program


def _lowering(kernel: DccKernel) -> Callable[..., GroupProgram]:
    def lower(cfg: BackendConfig, sizes: tuple[int, ...], cores: tuple[int, ...]) -> GroupProgram:
        return lower_group(cfg, kernel, sizes, cores)

    lower.__name__ = f"lower_{str(kernel).replace('-', '_')}"
    lower.__doc__ = f"``{kernel}`` on one AttAcc group (:func:`lower_group`)."
    return lower


def _lower_attn(
    cfg: BackendConfig, sizes: tuple[int, ...], cores: tuple[int, ...], partial: bool = False
) -> GroupProgram:
    """``attn`` on one AttAcc group (:func:`lower_attention`; sets h, t, d); ``partial``: the
    group holds a share of every head's tokens (its softmax statistics read back too)."""
    if len(sizes) != 3 or len(cores) != 3:
        raise AttAccLoweringError(
            f"kernel attn has 3 dimension sets; got sizes = {tuple(sizes)}, cores = {tuple(cores)}"
        )
    return lower_attention(cfg, tuple(sizes), tuple(cores), partial)  # type: ignore[arg-type]


def _values(flat: np.ndarray, gathers: np.ndarray) -> np.ndarray:
    src = np.concatenate([flat.astype(np.float16).ravel(), np.array([1.0, 0.0], np.float16)])
    n = len(src)
    idx = np.where(gathers == ONE, n - 2, np.where(gathers == PAD, n - 1, gathers))
    return src[idx]


def _place(
    cfg: BackendConfig,
    low: _Lowered,
    arrays: dict[str, np.ndarray],
    shapes: dict[str, tuple[int, ...]],
) -> tuple[AttAccState, np.ndarray, np.ndarray]:
    for name, shape in shapes.items():
        if name in arrays and tuple(arrays[name].shape) != shape:
            raise AttAccLoweringError(
                f"array {name!r} has shape {tuple(arrays[name].shape)}; the share's is {shape}"
            )
    st = AttAccState.for_backend(cfg)
    gat = low.gathers()
    for name, gath in gat.placed.items():
        addr = low.program.inputs[name]
        vals = _values(arrays[name], gath)
        for r in np.unique(addr[:, 1]).tolist():
            here = addr[:, 1] == r
            st.row(r)[addr[here, 0], addr[here, 2]] = vals[here]
    gb_src = arrays[low.gb_tensor] if low.gb_tensor else np.zeros(0, np.float16)
    payload = _values(gb_src, gat.payload).view(np.uint16)
    return st, payload, gat.reads


def run_group(
    cfg: BackendConfig, kernel: DccKernel, sizes: Extents, cores: Extents, arrays: Tensors
) -> Tensors:
    """The share's result on values: place the bank tensor as ``inputs`` says, run the
    stream on :func:`models.attacc.execute` with the GEMV-buffer tensor as payload, and
    scatter what the host read (``RDSB``) into the output tensor (FP16). ``attn``:
    :func:`run_attention`."""
    if DccKernel(kernel) is DccKernel.ATTN:
        return run_attention(cfg, sizes, cores, arrays)  # type: ignore[arg-type]
    low = _lower(cfg, kernel, sizes, cores)
    shapes = dict(_nest(DccKernel(kernel), sizes).tensors)
    missing = ({low.gb_tensor} | set(low.program.inputs)) - {""} - set(arrays)
    if missing:
        raise AttAccLoweringError(f"run_group({kernel!s}) needs arrays {sorted(missing)}")
    st, payload, reads = _place(cfg, low, arrays, shapes)
    execute(cfg, low.program.stream, payload, st)
    return {low.out_tensor: _gather_reads(st, reads, shapes[low.out_tensor])}


def _gather_reads(st: AttAccState, reads: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    got = np.array(st.reads, np.float16).reshape(-1, reads.shape[1])
    if len(got) != len(reads):
        raise AttAccLoweringError(
            f"the stream read {len(got)} vectors, the lowering expects {len(reads)}"
        )
    out = np.zeros(math.prod(shape), np.float16)
    ok = reads != PAD
    out[reads[ok]] = got[ok]
    return out.reshape(shape)


def _attention_check(
    cfg: BackendConfig,
    sizes: tuple[int, int, int],
    cores: tuple[int, int, int],
    partial: bool = False,
) -> _AttnFrame:
    """Refuse an attention share the group cannot run; its frame (:class:`_AttnFrame`) with
    the softmax-buffer entries SV's results start at and (``partial``: a share of every head's
    tokens) the round's softmax statistics do, one entry per head core, after the scores and
    the results."""
    H, T, D = (int(x) for x in sizes)
    c_h, c_t, c_d = (int(x) for x in cores)
    _check(cfg, DccKernel.QK, (H, T, D), (c_h, c_t, c_d))
    L = cfg.core.lanes
    slots = cfg.group.buffer_bytes // cfg.group.column_bytes
    lt = -(-T // c_t)
    if c_t > 1 and lt % L:
        raise AttAccLoweringError(
            f"attention: tokens = {T} over {c_t} cores gives {lt} per core, not a multiple of "
            f"{L}: a core's probabilities must be whole softmax-buffer entries (MVGB moves one "
            "entry into a GEMV-buffer entry)"
        )
    p_slots = -(-T // L)
    # heads in a round: one per head core that has one (cores[0] = c_h, ceil(H / c_h) each)
    lh = -(-H // c_h)
    n_hc = -(-H // lh)
    scores = n_hc * p_slots
    # SV's results per pass: an accumulator's worth of d_h per core, c_d cores per head
    ld = -(-D // c_d)
    out_slots = min(-(-ld // L), cfg.core.output_regs) * c_d * n_hc
    # the probabilities fit the GEMV buffers at once: all MVGBs precede the first result
    # move, which may then reuse their entries; else they must stay
    base = 0 if -(-lt // L) <= cfg.core.input_regs else scores
    stats = max(scores, base + out_slots)
    if stats + (n_hc if partial else 0) > slots:
        what = (
            f"{T} scores"
            if n_hc == 1
            else f"{n_hc} heads' {T} scores (cores[0] = {c_h}: a round has one head per head "
            "core, their scores wait together for the one softmax unit)"
        )
        fit = "" if n_hc == 1 else f": at most {slots // p_slots} head(s) of {T} tokens per round"
        also = f" and the softmax statistics {n_hc} more from entry {stats}" if partial else ""
        raise AttAccLoweringError(
            f"attention: {what} take {scores} softmax-buffer entries and SV's results "
            f"{out_slots} more from entry {base}{also}; the buffer has {slots} "
            f"(group.buffer_bytes = {cfg.group.buffer_bytes}){fit}"
        )
    entry = _score_entry(cfg, (H, T, D), c_h)
    return _AttnFrame(base, stats, (H, T, D), (c_h, c_t, c_d), lh, p_slots, entry)


class _AttnFrame(NamedTuple):
    """An attention share's checked frame (:func:`_attention_check`): where SV's results and
    the statistics start, the sizes and cores as ints, heads per head core, softmax-buffer
    entries per head, the score entry of a flat score index."""

    base: int
    stats: int
    sizes: tuple[int, int, int]
    cores: tuple[int, int, int]
    lh: int
    p_slots: int
    entry: Callable


def _attention_reference(
    cfg: BackendConfig,
    sizes: tuple[int, int, int],
    cores: tuple[int, int, int],
    partial: bool = False,
) -> tuple[_Lowered, tuple[int, ...]]:
    """Attention of one group's share, round by round (a round: one head of every head core,
    ``cores[0]`` head cores of ceil(heads / cores[0]) heads each): QK^T of the round's heads
    in parallel, their scores left in the softmax buffer (head core j's from entry
    j x ceil(tokens / lanes), entry token // lanes of it), an SFM per head one after another
    on the one softmax unit, MVGB of the probabilities into the GEMV buffers, SV of the
    round's heads in parallel, its results read back. ``sizes`` = (heads, tokens, d_h),
    ``cores`` = (heads, tokens, d_h) cores; the bank holding K[h][t-slice][d-slice] holds V's
    same slice. ``partial`` (the group holds a share of every head's tokens): each SFM also
    leaves its max and sum in head core j's statistics entry, and the round ends with their
    RDSBs. Built command by command (:class:`_Builder`): the oracle of :func:`_attention`."""
    base, stats, (H, T, D), (c_h, c_t, c_d), lh, p_slots, entry = _attention_check(
        cfg, sizes, cores, partial
    )
    order = interleave(cfg)
    L = cfg.core.lanes
    qk = _job(cfg, DccKernel.QK, (H, T, D), (c_h, c_t, c_d))
    sv = _job(cfg, DccKernel.SV, (H, D, T), (c_h, c_d, c_t))
    bld = _Builder(cfg, Levels.of(cfg), qk.active)
    pv = _pad_lanes(sv.gb, L)  # (banks, rounds, vectors, lanes): P indices h * T + t

    def head(job: _Job, s: int) -> _Job:
        return dataclasses.replace(
            job,
            weights=job.weights[:, s : s + 1],
            gb=job.gb[:, s : s + 1],
            out=job.out[:, s : s + 1],
        )

    for s in range(lh):

        def score_slot(outs: np.ndarray) -> int:
            return int(entry(int(outs[outs != PAD].min())))

        _emit_job(bld, head(qk, s), key=("qk", s), read_back=False, slot_of=score_slot)
        bld.slot_map.clear()
        for j in range(c_h):  # the softmax unit takes the round's heads one at a time
            if j * lh + s < H:
                st = {"dst": stats + j, "mode": int(SfmMode.STATS)} if partial else {}
                bld.emit(Op.SFM, src=j * p_slots, n=T, **st)

        def from_buffer(_: int, v: int, dst: int, s: int = s) -> None:
            gathers = pv[:, s, v]
            for bank, scope, src in bld.plan(gathers):
                g = gathers[src]
                bld.emit(
                    Op.MVGB,
                    bank=bank,
                    src=int(entry(int(g[g != PAD].min()))),
                    dst=dst,
                    mode=int(scope),
                )

        _emit_job(bld, head(sv, s), key=("sv", s), gb_from=from_buffer, slot_base=base)
        for j in range(c_h) if partial else ():  # the round's statistics, read like results
            if j * lh + s < H:
                bld.emit(Op.RDSB, bank=int(order[(stats + j) % len(order)]), src=stats + j)
    low = _finish(cfg, bld, sv)
    return dataclasses.replace(low, gb_tensor="Q"), (H, T, D)


def lower_attention(
    cfg: BackendConfig,
    sizes: tuple[int, int, int],
    cores: tuple[int, int, int],
    partial: bool = False,
) -> GroupProgram:
    """DCC's ATTN on one AttAcc group: QK^T, softmax on the channel's softmax unit, SV
    (:func:`run_attention`). ``sizes`` = (heads, tokens, d_h) of the group's share,
    ``cores`` per set as for QK^T (heads, tokens, d_h): heads over cores run their QK^T and
    SV in parallel and their softmax one head after another. ``partial``: the share is a
    part of every head's tokens (tokens split over groups): each SFM also writes its max and
    sum of exponentials into a statistics entry (``SfmMode.STATS``) that the host reads with
    the partial outputs, for :func:`combine_partials`."""
    return _attention(cfg, sizes, cores, partial)[0].program


def lower_attention_reference(
    cfg: BackendConfig,
    sizes: tuple[int, int, int],
    cores: tuple[int, int, int],
    partial: bool = False,
) -> GroupProgram:
    """:func:`lower_attention` built command by command in plain Python (the same program;
    kept to test the vectorised lowering against)."""
    return _attention_reference(cfg, sizes, cores, partial)[0].program


def run_attention(
    cfg: BackendConfig,
    sizes: tuple[int, int, int],
    cores: tuple[int, int, int],
    arrays: dict[str, np.ndarray],
    partial: bool = False,
) -> dict[str, np.ndarray]:
    """``O[h] = softmax(K[h] Q[h]) V[h]`` on values (no 1/sqrt(d_h) scale: the caller folds it
    into Q): K and V placed in the banks, Q written by WRGBs. ``partial``: also ``m`` and
    ``l`` (heads,), each head's max score and sum of exp(score - max) as the host read them
    from the statistics entries (FP16)."""
    low, (H, T, D) = _attention(cfg, sizes, cores, partial)
    shapes = {"Q": (H, D), "K": (H, T, D), "V": (H, T, D), "O": (H, D)}
    missing = {"Q", "K", "V"} - set(arrays)
    if missing:
        raise AttAccLoweringError(f"run_attention needs arrays {sorted(missing)}")
    st, payload, reads = _place(cfg, low, arrays, shapes)
    execute(cfg, low.program.stream, payload, st)
    if not partial:
        return {"O": _gather_reads(st, reads, shapes["O"])}
    stream = low.program.stream
    stat_entries = stream["dst"][stream["op"] == Op.SFM]  # each SFM's statistics entry
    is_stat = np.isin(stream["src"][stream["op"] == Op.RDSB], stat_entries)
    got = st.reads
    st.reads = [v for v, x in zip(got, is_stat, strict=True) if not x]
    vals = np.array([v for v, x in zip(got, is_stat, strict=True) if x], np.float16)
    s_sfm, j_sfm = _sfm_rounds(H, int(cores[0]))
    heads = j_sfm * -(-H // int(cores[0])) + s_sfm
    m, l_sum = np.zeros(H, np.float16), np.zeros(H, np.float16)
    m[heads], l_sum[heads] = vals[:, 0], vals[:, 1]
    return {"O": _gather_reads(st, reads, shapes["O"]), "m": m, "l": l_sum}


def combine_partials(
    outputs: list[np.ndarray], maxes: list[np.ndarray], sums: list[np.ndarray]
) -> np.ndarray:
    """The host's combine of a softmax split over token groups (flash-decoding's): per head
    ``m = max_g m_g``, ``w_g = exp(m_g - m) l_g``, ``O = sum_g w_g O_g / sum_g w_g`` from the
    groups' partial outputs ``O_g`` (heads, d_h; each normalised by its own sum), maxima and
    sums (heads,); float32 inside, FP16 out."""
    o = np.stack([np.asarray(x, np.float32) for x in outputs])  # (groups, heads, d_h)
    mg = np.stack([np.asarray(x, np.float32) for x in maxes])  # (groups, heads)
    lg = np.stack([np.asarray(x, np.float32) for x in sums])
    w = np.exp(mg - mg.max(axis=0)) * lg
    return ((w[:, :, None] * o).sum(axis=0) / w.sum(axis=0)[:, None]).astype(np.float16)


def token_shares(tokens: int, groups: int) -> list[tuple[int, int]]:
    """(first token, tokens) of every non-empty group when ``tokens`` go over ``groups``
    groups, ``ceil(tokens / groups)`` each (the last may hold fewer)."""
    per = -(-tokens // groups)
    return [(g * per, min(per, tokens - g * per)) for g in range(groups) if g * per < tokens]


def run_attention_split(
    cfg: BackendConfig,
    sizes: tuple[int, int, int],
    cores: tuple[int, int, int],
    groups: int,
    arrays: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """Attention with every head's tokens split over ``groups`` groups on values: each group
    runs its token share (:func:`run_attention` with ``partial``; a shorter last share is
    lowered at its own size), the host combines the partial outputs
    (:func:`combine_partials`)."""
    H, T, D = (int(x) for x in sizes)
    outs, maxes, sums = [], [], []
    for t0, n in token_shares(T, groups):
        part = {
            "Q": arrays["Q"],
            "K": arrays["K"][:, t0 : t0 + n],
            "V": arrays["V"][:, t0 : t0 + n],
        }
        r = run_attention(cfg, (H, n, D), cores, part, partial=True)
        outs.append(r["O"])
        maxes.append(r["m"])
        sums.append(r["l"])
    return {"O": combine_partials(outs, maxes, sums)}


#: Shares a lowering refuses by a rule cheaper than lowering them (``check(cfg, sizes,
#: cores)`` raises the same refusal): the search drops those drafts before sampling.
SHARE_CHECKS: dict[DccKernel, Callable[..., object]] = {DccKernel.ATTN: _attention_check}

#: The contract's registry: ``GROUP_LOWERINGS[kernel](cfg, sizes, cores) -> GroupProgram``.
GROUP_LOWERINGS: dict[DccKernel, Callable[..., GroupProgram]] = {
    **{k: _lowering(k) for k in CORE_ORDER},
    DccKernel.ATTN: _lower_attn,
}
