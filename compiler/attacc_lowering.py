"""DCC kernels lowered to one AttAcc group (:mod:`models.attacc`).

Per the contract of :mod:`compiler.dcc_lowering`, ``GROUP_LOWERINGS[kernel](cfg, sizes,
cores)`` lowers one group's share (``sizes`` per dimension set, ``cores`` per set, product
<= 64) to a :class:`compiler.dcc_lowering.GroupProgram`; :func:`run_group` runs it on values.

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
* SV: the **MAC mode** (``MacMode.AXPY``, the trace's context GEMV): P's share is the GEMV
  buffer, each ``MACAB`` adds one token's 16-element row of V times its probability.
* Results leave through the softmax buffer (``RDSB``), inside the stream: ``outputs`` is
  empty and ``host_ops`` 0.
* Softmax and attention: :func:`lower_attention` chains QK^T (scores stay in the softmax
  buffer), ``SFM`` per head and ``MVGB`` of the probabilities into the GEMV buffers, and SV.

:func:`compiler.dcc_tune.default_draft` gives AttAcc's default mapping as a draft.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from compiler.dcc_lowering import GroupProgram
from compiler.dcc_schedule import (
    DCC_KERNELS,
    DccError,
    DccKernel,
)
from models.attacc import (
    COMMAND_DTYPE,
    AttAccError,
    AttAccState,
    Levels,
    MacMode,
    Op,
    Scope,
    check_backend,
    command,
    execute,
    interleave,
    time_stream,
)
from models.backends import BackendConfig

__all__ = [
    "CORE_ORDER",
    "GROUP_LOWERINGS",
    "UNSUPPORTED",
    "AttAccLoweringError",
    "lower_attention",
    "lower_group",
    "run_attention",
    "run_group",
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
}

#: Per kernel, the dimension sets in the order of the bank tensor's dimensions (cores are
#: numbered in this order, the last fastest): W[o][i], W with batch n outermost, K[h][t][d],
#: V[h][t][d] (sets h, d, t), A[m][n].
CORE_ORDER: dict[DccKernel, tuple[int, ...]] = {
    DccKernel.GEMV: (0, 1),
    DccKernel.BATCHED_GEMV: (0, 1, 2),
    DccKernel.QK: (0, 1, 2),
    DccKernel.SV: (0, 2, 1),
    DccKernel.RED: (0, 1),
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

    if kernel is DccKernel.GEMV:
        O, I = sizes  # noqa: E741
        lo, li = lens
        return _Job(
            MacMode.DOT,
            "W",
            "x",
            "y",
            stack(lambda s: _flat((O, I), s.idx[0][:, None], s.idx[1][None, :])[None], (1, lo, li)),
            stack(lambda s: s.idx[1][None], (1, li)),
            stack(lambda s: s.idx[0][None], (1, lo)),
            active,
        )
    if kernel is DccKernel.BATCHED_GEMV:
        N, O, I = sizes  # noqa: E741
        ln, lo, li = lens
        return _Job(
            MacMode.DOT,
            "W",
            "X",
            "Y",
            stack(lambda s: _flat((O, I), s.idx[1][:, None], s.idx[2][None, :])[None], (1, lo, li)),
            stack(lambda s: _flat((N, I), s.idx[0][:, None], s.idx[2][None, :]), (ln, li)),
            stack(lambda s: _flat((N, O), s.idx[0][:, None], s.idx[1][None, :]), (ln, lo)),
            active,
        )
    if kernel is DccKernel.QK:
        H, T, D = sizes
        lh, lt, ld = lens
        return _Job(
            MacMode.DOT,
            "K",
            "Q",
            "S",
            stack(
                lambda s: _flat(
                    (H, T, D),
                    s.idx[0][:, None, None],
                    s.idx[1][None, :, None],
                    s.idx[2][None, None, :],
                ),
                (lh, lt, ld),
            ),
            stack(lambda s: _flat((H, D), s.idx[0][:, None], s.idx[2][None, :]), (lh, ld)),
            stack(lambda s: _flat((H, T), s.idx[0][:, None], s.idx[1][None, :]), (lh, lt)),
            active,
        )
    if kernel is DccKernel.SV:
        H, D, T = sizes
        lh, ld, lt = lens
        return _Job(
            MacMode.AXPY,
            "V",
            "P",
            "O",
            stack(
                lambda s: _flat(
                    (H, T, D),
                    s.idx[0][:, None, None],
                    s.idx[2][None, :, None],
                    s.idx[1][None, None, :],
                ),
                (lh, lt, ld),
            ),
            stack(lambda s: _flat((H, T), s.idx[0][:, None], s.idx[2][None, :]), (lh, lt)),
            stack(lambda s: _flat((H, D), s.idx[0][:, None], s.idx[1][None, :]), (lh, ld)),
            active,
        )
    if kernel is DccKernel.RED:
        M, N = sizes
        lm, ln = lens
        return _Job(
            MacMode.DOT,
            "A",
            "",
            "r",
            stack(lambda s: _flat((M, N), s.idx[0][:, None], s.idx[1][None, :])[None], (1, lm, ln)),
            stack(lambda s: np.where(s.idx[1] >= 0, ONE, PAD)[None], (1, ln)),
            stack(lambda s: s.idx[0][None], (1, lm)),
            active,
        )
    raise AttAccLoweringError(f"kernel {kernel!s}: no AttAcc lowering")


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
    if dot:
        wv = _pad_lanes(job.weights, L)  # (banks, Sw, O, vr, L)
        outs = _pad_lanes(job.out, L)  # (banks, S, O/L, L)
    else:
        wv = _pad_lanes(job.weights, L)  # (banks, Sw, R, ob, L)
        outs = _pad_lanes(job.out, L)  # (banks, S, ob, L)
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
                if dot:
                    for e in entries:
                        for o in range(e * L, min(job.out.shape[2], (e + 1) * L)):
                            for v in vecs:
                                bld.mac(
                                    job.weight,
                                    (*key, sw, o, v),
                                    wv[:, sw, o, v],
                                    v - t * IR,
                                    e - p * OR,
                                    o % L,
                                    MacMode.DOT,
                                )
                else:
                    for v in vecs:
                        for r in range(v * L, min(job.gb.shape[2], (v + 1) * L)):
                            for e in entries:
                                bld.mac(
                                    job.weight,
                                    (*key, sw, r, e),
                                    wv[:, sw, r, e],
                                    v - t * IR,
                                    e - p * OR,
                                    r % L,
                                    MacMode.AXPY,
                                )
            slot = slot_base
            for e in entries:
                slot = bld.mvsb(e - p * OR, outs[:, s, e], slot, used[:, s], slot_of)
            if read_back:
                bld.read_slots(slot_base, slot)
    bld.close()


@dataclass(frozen=True)
class _Lowered:
    """A group program plus what :func:`run_group` needs to run it on values."""

    program: GroupProgram
    job: _Job
    payload: np.ndarray  # (n, lanes) gathers into job.gb_tensor (PAD zero, ONE one)
    placed: dict[str, tuple[np.ndarray, np.ndarray]]  # tensor -> ((n, 3) address, (n, lanes))
    reads: np.ndarray  # (n_reads, lanes) gathers into job.out_tensor


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
    payload = np.array(bld.payload, np.int64).reshape(-1, L)
    reads = np.array(bld.reads, np.int64).reshape(-1, L)
    return _Lowered(program, job, payload, placed, reads)


def _lower(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> _Lowered:
    kernel = DccKernel(kernel)
    sizes, cores = tuple(int(s) for s in sizes), tuple(int(c) for c in cores)
    _check(cfg, kernel, sizes, cores)
    job = _job(cfg, kernel, sizes, cores)
    bld = _Builder(cfg, Levels.of(cfg), job.active)
    _emit_job(bld, job)
    return _finish(cfg, bld, job)


def lower_group(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], cores: tuple[int, ...]
) -> GroupProgram:
    """One AttAcc group's program for its share ``sizes`` of ``kernel`` on ``cores``."""
    return _lower(cfg, kernel, sizes, cores).program


def _lowering(kernel: DccKernel) -> Callable[..., GroupProgram]:
    def lower(cfg: BackendConfig, sizes: tuple[int, ...], cores: tuple[int, ...]) -> GroupProgram:
        return lower_group(cfg, kernel, sizes, cores)

    lower.__name__ = f"lower_{str(kernel).replace('-', '_')}"
    lower.__doc__ = f"``{kernel}`` on one AttAcc group (:func:`lower_group`)."
    return lower


#: The contract's registry: ``GROUP_LOWERINGS[kernel](cfg, sizes, cores) -> GroupProgram``.
GROUP_LOWERINGS: dict[DccKernel, Callable[..., GroupProgram]] = {
    k: _lowering(k) for k in CORE_ORDER
}


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
) -> tuple[AttAccState, np.ndarray]:
    for name, shape in shapes.items():
        if name in arrays and tuple(arrays[name].shape) != shape:
            raise AttAccLoweringError(
                f"array {name!r} has shape {tuple(arrays[name].shape)}; the share's is {shape}"
            )
    st = AttAccState.for_backend(cfg)
    for name, (addr, gath) in low.placed.items():
        vals = _values(arrays[name], gath)
        for (b, r, c), v in zip(addr.tolist(), vals, strict=True):
            st.row(r)[b, c] = v
    gb_src = arrays[low.job.gb_tensor] if low.job.gb_tensor else np.zeros(0, np.float16)
    payload = _values(gb_src, low.payload).view(np.uint16)
    return st, payload


def run_group(
    cfg: BackendConfig,
    kernel: DccKernel,
    sizes: tuple[int, ...],
    cores: tuple[int, ...],
    arrays: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """The share's result on values: place the bank tensor as ``inputs`` says, run the
    stream on :func:`models.attacc.execute` with the GEMV-buffer tensor as payload, and
    scatter what the host read (``RDSB``) into the output tensor (FP16)."""
    low = _lower(cfg, kernel, sizes, cores)
    shapes = dict(_nest(DccKernel(kernel), sizes).tensors)
    missing = {low.job.weight, low.job.gb_tensor} - {""} - set(arrays)
    if missing:
        raise AttAccLoweringError(f"run_group({kernel!s}) needs arrays {sorted(missing)}")
    st, payload = _place(cfg, low, arrays, shapes)
    execute(cfg, low.program.stream, payload, st)
    return {low.job.out_tensor: _gather_reads(st, low.reads, shapes[low.job.out_tensor])}


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


def _attention(
    cfg: BackendConfig, sizes: tuple[int, int, int], cores: tuple[int, int, int]
) -> tuple[_Lowered, tuple[int, ...]]:
    """Attention of one group's share: per head, QK^T with the scores left in the softmax
    buffer (entry = token // lanes), SFM over them, MVGB of the probabilities into the GEMV
    buffers, SV, its results read back. ``sizes`` = (heads, tokens, d_h), ``cores`` =
    (heads, tokens, d_h) cores; the bank holding K[h][t-slice][d-slice] holds V's same slice."""
    H, T, D = (int(x) for x in sizes)
    c_h, c_t, c_d = (int(x) for x in cores)
    _check(cfg, DccKernel.QK, (H, T, D), (c_h, c_t, c_d))
    L = cfg.core.lanes
    slots = cfg.group.buffer_bytes // cfg.group.column_bytes
    if c_h != 1:
        raise AttAccLoweringError(
            f"attention cores = {tuple(cores)}: the channel's one softmax unit takes one head "
            "at a time, so heads are not split over cores (cores[0] must be 1; heads go to "
            "other groups)"
        )
    lt = -(-T // c_t)
    if c_t > 1 and lt % L:
        raise AttAccLoweringError(
            f"attention: tokens = {T} over {c_t} cores gives {lt} per core, not a multiple of "
            f"{L}: a core's probabilities must be whole softmax-buffer entries (MVGB moves one "
            "entry into a GEMV-buffer entry)"
        )
    p_slots = -(-T // L)
    # SV's results per pass: an accumulator's worth of d_h per core, c_d cores
    ld = -(-D // c_d)
    out_slots = min(-(-ld // L), cfg.core.output_regs) * c_d
    # the probabilities fit the GEMV buffers at once: all MVGBs precede the first result
    # move, which may then reuse their entries; else they must stay
    base = 0 if -(-lt // L) <= cfg.core.input_regs else p_slots
    if max(p_slots, base + out_slots) > slots:
        raise AttAccLoweringError(
            f"attention: {T} scores take {p_slots} softmax-buffer entries and SV's results "
            f"{out_slots} more from entry {base}; the buffer has {slots} (group.buffer_bytes "
            f"= {cfg.group.buffer_bytes})"
        )
    qk = _job(cfg, DccKernel.QK, (H, T, D), (1, c_t, c_d))
    sv = _job(cfg, DccKernel.SV, (H, D, T), (1, c_d, c_t))
    bld = _Builder(cfg, Levels.of(cfg), qk.active)
    pv = _pad_lanes(sv.gb, L)  # (banks, H, vectors, lanes): P indices h * T + t

    def head(job: _Job, h: int) -> _Job:
        return dataclasses.replace(
            job,
            weights=job.weights[:, h : h + 1],
            gb=job.gb[:, h : h + 1],
            out=job.out[:, h : h + 1],
        )

    for h in range(H):

        def score_slot(outs: np.ndarray, h: int = h) -> int:
            return int(outs[outs != PAD].min() - h * T) // L

        _emit_job(bld, head(qk, h), key=("qk", h), read_back=False, slot_of=score_slot)
        bld.slot_map.clear()
        bld.emit(Op.SFM, src=0, n=T)

        def from_buffer(s: int, v: int, entry: int, h: int = h) -> None:
            gathers = pv[:, h, v]
            for bank, scope, src in bld.plan(gathers):
                g = gathers[src]
                bld.emit(
                    Op.MVGB,
                    bank=bank,
                    src=int(g[g != PAD].min() - h * T) // L,
                    dst=entry,
                    mode=int(scope),
                )

        _emit_job(bld, head(sv, h), key=("sv", h), gb_from=from_buffer, slot_base=base)
    low = _finish(cfg, bld, sv)
    return dataclasses.replace(low, job=dataclasses.replace(sv, gb_tensor="Q")), (H, T, D)


def lower_attention(
    cfg: BackendConfig, sizes: tuple[int, int, int], cores: tuple[int, int, int]
) -> GroupProgram:
    """DCC's ATTN on one AttAcc group: QK^T, softmax on the channel's softmax unit, SV
    (:func:`run_attention`). ``sizes`` = (heads, tokens, d_h) of the group's share,
    ``cores`` per set as for QK^T (heads, tokens, d_h; heads must be 1)."""
    return _attention(cfg, sizes, cores)[0].program


def run_attention(
    cfg: BackendConfig,
    sizes: tuple[int, int, int],
    cores: tuple[int, int, int],
    arrays: dict[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """``O[h] = softmax(K[h] Q[h]) V[h]`` on values (no 1/sqrt(d_h) scale: the caller folds it
    into Q): K and V placed in the banks, Q written by WRGBs."""
    low, (H, T, D) = _attention(cfg, sizes, cores)
    shapes = {"Q": (H, D), "K": (H, T, D), "V": (H, T, D), "O": (H, D)}
    missing = {"Q", "K", "V"} - set(arrays)
    if missing:
        raise AttAccLoweringError(f"run_attention needs arrays {sorted(missing)}")
    st, payload = _place(cfg, low, arrays, shapes)
    execute(cfg, low.program.stream, payload, st)
    return {"O": _gather_reads(st, low.reads, shapes["O"])}
