"""DCC's data-centric schedule generator (DCC, seed 003, section IV-B and Fig. 4).

A kernel is a loop nest over tensors (:class:`LoopNest`): tensor shapes, loop variables with
their ranges, and tensor references whose indices are affine in one loop variable
(``A[b+1][i*2]``). The generator:

1. **Dimension sets** (:func:`dimension_sets`): every tensor dimension gets the reference
   set of its index functions over all references (A0: {b, b+1}); dimensions whose
   reference sets share a loop variable are grouped into one (complex) dimension set.
2. **Data tiles** (:func:`drafts`): a memoised depth-first search gives every set, in
   order, ``[1, groups]`` PIM groups and ``[1, cores]`` cores per group of what the sets
   before it left (``available / allocated``); each allocation is combined with every
   representative mapping (a dimension of the set and one of its index functions) into
   tiling drafts, one part per set.
3. **Pruning** (:func:`prune`), in the paper's order: rule 1 drops drafts equal to an earlier
   one up to equivalent representative mappings (the same index function, so the same
   compute tile); rule 2 drops drafts whose per-core share of the innermost loop's set (the
   one SIMD instructions run along) is not a multiple of the back end's width ``d`` (skipped
   when no draft would survive it, or ``d`` is 1);
   rule 3 keeps, of drafts whose groups see the same worst per-core length in every set,
   the one that uses the fewest groups x cores.
4. **Core-level tiles** (:func:`core_tiles`): each (group, core) gets its slice of the
   representative dimension and the loop range that maps into it (``{b : F(b) in slice}``).

Which of two equivalent drafts rule 1 keeps, and which of equal-signature drafts rule 3
keeps, the paper leaves open; the choices here (the mapping listed first in the set; the
fewest resources) reproduce its Fig. 4 (``tests/test_dcc_schedule.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

from pimphony.compiler.kernels import CompileError

__all__ = [
    "DCC_KERNELS",
    "CoreTile",
    "DccError",
    "DccKernel",
    "DimensionSet",
    "Draft",
    "Index",
    "LoopNest",
    "Part",
    "Ref",
    "core_tiles",
    "dimension_sets",
    "innermost_set",
    "drafts",
    "parse_index",
    "prune",
]


class DccError(CompileError):
    """A loop nest the schedule generator cannot map."""


@dataclass(frozen=True, order=True)
class Index:
    """``scale * var + offset`` (an affine index function of one loop variable)."""

    var: str
    scale: int = 1
    offset: int = 0

    def __str__(self) -> str:
        s = self.var if self.scale == 1 else f"{self.var}*{self.scale}"
        return s if self.offset == 0 else f"{s}{self.offset:+d}"

    def __call__(self, value: int) -> int:
        return self.scale * value + self.offset


_INDEX = re.compile(
    r"^\s*(?:(?P<c1>\d+)\s*\*\s*)?(?P<var>[A-Za-z_]\w*)\s*(?:\*\s*(?P<c2>\d+))?"
    r"\s*(?:(?P<sign>[+-])\s*(?P<off>\d+))?\s*$"
)


def parse_index(text: str) -> Index:
    """``"b"``, ``"b+1"``, ``"i*2"``, ``"2*i-1"`` as an :class:`Index`."""
    m = _INDEX.match(text)
    if not m or (m["c1"] and m["c2"]):
        raise DccError(
            f"index {text!r}: only affine functions of one loop variable (a*v + c) are mapped"
        )
    scale = int(m["c1"] or m["c2"] or 1)
    if scale < 1:
        raise DccError(f"index {text!r}: the scale must be a positive integer")
    off = int(m["off"] or 0) * (-1 if m["sign"] == "-" else 1)
    return Index(m["var"], scale, off)


@dataclass(frozen=True)
class Ref:
    """A tensor reference ``T[f0][f1]...``."""

    tensor: str
    index: tuple[Index, ...]

    @staticmethod
    def parse(text: str) -> Ref:
        """``"A[b+1][i*2]"`` as a :class:`Ref`."""
        m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*((?:\[[^\]]+\])+)\s*", text)
        if not m:
            raise DccError(f"reference {text!r}: expected NAME[index][index]...")
        return Ref(m[1], tuple(parse_index(x) for x in re.findall(r"\[([^\]]+)\]", m[2])))


@dataclass(frozen=True)
class LoopNest:
    """A kernel: tensor shapes, loops (variable, trip count) and the references of its body."""

    tensors: tuple[tuple[str, tuple[int, ...]], ...]
    loops: tuple[tuple[str, int], ...]
    refs: tuple[Ref, ...]

    def __post_init__(self) -> None:
        shapes = dict(self.tensors)
        trips = dict(self.loops)
        for r in self.refs:
            if r.tensor not in shapes:
                raise DccError(f"reference to {r.tensor}: no such tensor")
            if len(r.index) != len(shapes[r.tensor]):
                raise DccError(
                    f"{r.tensor} has {len(shapes[r.tensor])} dimensions, a reference gives "
                    f"{len(r.index)}"
                )
            for d, f in enumerate(r.index):
                if f.var not in trips:
                    raise DccError(f"{r.tensor}[{f}]: {f.var} is not a loop variable")
                top = f(trips[f.var] - 1)
                if f(0) < 0 or top >= shapes[r.tensor][d]:
                    raise DccError(
                        f"{r.tensor}[{f}] reaches {f(0)}..{top}, outside dimension {d} of "
                        f"size {shapes[r.tensor][d]}"
                    )

    def dims(self) -> list[tuple[str, int]]:
        """Every tensor dimension as ``(name, size)``: ``A0``, ``A1``, ..."""
        return [(f"{t}{d}", n) for t, shape in self.tensors for d, n in enumerate(shape)]


@dataclass(frozen=True)
class DimensionSet:
    """Tensor dimensions sharing loop variables, each with its reference set."""

    members: tuple[tuple[str, int, tuple[Index, ...]], ...]  # (dimension, size, functions)

    def mappings(self) -> list[tuple[str, int, Index]]:
        """Every representative mapping: (dimension, its size, one of its functions)."""
        return [(d, n, f) for d, n, fs in self.members for f in fs]


def dimension_sets(nest: LoopNest) -> list[DimensionSet]:
    """Stage 1: the dimension sets of ``nest``, in the order of their first dimension."""
    refsets: dict[str, set[Index]] = {}
    for r in nest.refs:
        for d, f in enumerate(r.index):
            refsets.setdefault(f"{r.tensor}{d}", set()).add(f)
    sizes = dict(nest.dims())
    order = [d for d, _ in nest.dims() if d in refsets]
    parent = {d: d for d in order}

    def root(d: str) -> str:
        while parent[d] != d:
            d = parent[d]
        return d

    by_var: dict[str, str] = {}
    for d in order:
        for f in refsets[d]:
            if f.var in by_var:
                parent[root(d)] = root(by_var[f.var])
            else:
                by_var[f.var] = d
    groups: dict[str, list[str]] = {}
    for d in order:
        groups.setdefault(root(d), []).append(d)
    firsts = sorted(groups.values(), key=lambda ds: order.index(ds[0]))
    return [
        DimensionSet(tuple((d, sizes[d], tuple(sorted(refsets[d]))) for d in ds)) for ds in firsts
    ]


@dataclass(frozen=True)
class Part:
    """One dimension set's part of a draft: groups, cores per group, representative mapping."""

    groups: int
    cores: int
    dim: str
    size: int
    function: Index

    def __str__(self) -> str:
        return f"[{self.groups}, {self.cores}, {self.dim}^{self.function}]"


Draft = tuple[Part, ...]


@cache
def _allocations(n_sets: int, groups: int, cores: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Every (groups, cores) per set with the resources left by the sets before it."""
    if n_sets == 0:
        return ((),)
    out = []
    for g in range(1, groups + 1):
        for c in range(1, cores + 1):
            for rest in _allocations(n_sets - 1, groups // g, cores // c):
                out.append(((g, c), *rest))
    return tuple(out)


def drafts(sets: list[DimensionSet], groups: int, cores: int) -> Iterator[Draft]:
    """Stage 2: every tiling draft (allocation x representative mappings), in search order."""
    if groups < 1 or cores < 1:
        raise DccError(f"groups = {groups}, cores = {cores}: both must be at least 1")
    choices = [s.mappings() for s in sets]
    for alloc in _allocations(len(sets), groups, cores):
        yield from _with_mappings(alloc, choices, 0, ())


def _with_mappings(alloc, choices, i, head) -> Iterator[Draft]:
    if i == len(alloc):
        yield head
        return
    g, c = alloc[i]
    for dim, size, f in choices[i]:
        yield from _with_mappings(alloc, choices, i + 1, (*head, Part(g, c, dim, size, f)))


def _per_core(p: Part) -> float:
    return p.size / (p.groups * p.cores)


def innermost_set(nest: LoopNest, sets: list[DimensionSet]) -> int | None:
    """Index of the dimension set of the innermost loop's variable: the one d-way (SIMD)
    instructions run along (Fig. 4: (B1={k}, C1={k}) for ``B[i][k] x C[b][k]``)."""
    var = nest.loops[-1][0]
    for k, ds in enumerate(sets):
        if any(f.var == var for _, _, fs in ds.members for f in fs):
            return k
    return None


def prune(
    all_drafts: list[Draft], simd: int = 1, vector_set: int | None = None
) -> tuple[list[Draft], dict[int, list[int]]]:
    """Stage 3: the drafts that survive rules 1-3, and which draft indices each rule removed
    (``{1: [...], 2: [...], 3: [...]}``). Rule 2 checks the per-core length of set
    ``vector_set`` (:func:`innermost_set`) against the SIMD width ``simd``."""
    removed: dict[int, list[int]] = {1: [], 2: [], 3: []}
    alive = list(range(len(all_drafts)))
    # Rule 1: equal data tiles and equivalent mappings (same index function): keep the draft
    # whose mappings come first in their sets (the lowest index in search order).
    seen: dict[tuple, int] = {}
    for k in alive:
        key = tuple((p.groups, p.cores, p.size, p.function) for p in all_drafts[k])
        if key in seen:
            removed[1].append(k)
        else:
            seen[key] = k
    gone = set(removed[1])
    alive = [k for k in alive if k not in gone]
    # Rule 2: per-core length of every set a multiple of the SIMD width d (if any draft is).
    if simd > 1 and vector_set is not None:

        def aligned(k: int) -> bool:
            per = _per_core(all_drafts[k][vector_set])
            return per.is_integer() and int(per) % simd == 0

        keep = [k for k in alive if aligned(k)]
        if keep:
            kept = set(keep)
            removed[2] = [k for k in alive if k not in kept]
            alive = keep
    # Rule 3: the same worst per-core length per group in every set: keep the fewest
    # groups x cores (then the first).
    best: dict[tuple, int] = {}
    for k in alive:
        key = tuple((p.groups, round(_per_core(p)), p.function) for p in all_drafts[k])
        cost = sum(p.groups * p.cores for p in all_drafts[k])
        if key not in best:
            best[key] = k
        else:
            j = best[key]
            if cost < sum(p.groups * p.cores for p in all_drafts[j]):
                removed[3].append(j)
                best[key] = k
            else:
                removed[3].append(k)
    gone = set(removed[3])
    alive = [k for k in alive if k not in gone]
    for rule in removed:
        removed[rule].sort()
    return [all_drafts[k] for k in alive], removed


@dataclass(frozen=True)
class CoreTile:
    """One core's tile of a part: the contiguous slice of the representative dimension
    (Fig. 4's Mapping 1), the loop values whose index falls in it (the compute tile), and the
    elements those values touch (Mapping 2, for a non-contiguous index such as ``i*2``)."""

    data: range
    loop: tuple[int, ...]
    touched: tuple[int, ...]


def core_tiles(part: Part, trip: int) -> dict[tuple[int, int], CoreTile]:
    """Stage 4 for one part: per (group, core), its :class:`CoreTile` (slices of
    ``ceil(size / (groups x cores))``, the last ones shorter or empty), loop values ``< trip``."""
    n = part.groups * part.cores
    step = -(-part.size // n)
    out = {}
    for g in range(part.groups):
        for c in range(part.cores):
            k = g * part.cores + c
            lo, hi = min(k * step, part.size), min((k + 1) * step, part.size)
            loop = tuple(v for v in range(trip) if lo <= part.function(v) < hi)
            out[(g, c)] = CoreTile(range(lo, hi), loop, tuple(part.function(v) for v in loop))
    return out


def _nest(tensors: dict[str, tuple[int, ...]], loops: dict[str, int], refs: str) -> LoopNest:
    return LoopNest(
        tuple(tensors.items()), tuple(loops.items()), tuple(Ref.parse(r) for r in refs.split())
    )


class DccKernel(StrEnum):
    """The kernels of DCC's evaluation (V), written once as loop nests."""

    GEMV = "gemv"
    BATCHED_GEMV = "batched-gemv"
    QK = "qk"
    SV = "sv"
    RED = "red"
    VA = "va"
    RELU = "relu"
    BATCHED_RED = "batched-red"
    BATCHED_VA = "batched-va"
    BATCHED_RELU = "batched-relu"
    ATTN = "attn"


#: Each kernel's loop nest from its sizes (the body's references; the innermost loop last).
DCC_KERNELS: dict[DccKernel, Callable[..., LoopNest]] = {
    # y[o] += W[o][i] * x[i]
    DccKernel.GEMV: lambda d_out, d_in: _nest(
        {"y": (d_out,), "W": (d_out, d_in), "x": (d_in,)},
        {"o": d_out, "i": d_in},
        "y[o] W[o][i] x[i]",
    ),
    # Y[n][o] += W[o][i] * X[n][i]
    DccKernel.BATCHED_GEMV: lambda batch, d_out, d_in: _nest(
        {"Y": (batch, d_out), "W": (d_out, d_in), "X": (batch, d_in)},
        {"n": batch, "o": d_out, "i": d_in},
        "Y[n][o] W[o][i] X[n][i]",
    ),
    # S[h][t] += Q[h][d] * K[h][t][d]
    DccKernel.QK: lambda heads, tokens, d_h: _nest(
        {"S": (heads, tokens), "Q": (heads, d_h), "K": (heads, tokens, d_h)},
        {"h": heads, "t": tokens, "d": d_h},
        "S[h][t] Q[h][d] K[h][t][d]",
    ),
    # O[h][d] += P[h][t] * V[h][t][d]
    DccKernel.SV: lambda heads, tokens, d_h: _nest(
        {"O": (heads, d_h), "P": (heads, tokens), "V": (heads, tokens, d_h)},
        {"h": heads, "d": d_h, "t": tokens},
        "O[h][d] P[h][t] V[h][t][d]",
    ),
    # r[m] += A[m][n]
    DccKernel.RED: lambda rows, cols: _nest(
        {"r": (rows,), "A": (rows, cols)}, {"m": rows, "n": cols}, "r[m] A[m][n]"
    ),
    # C[n] = A[n] + B[n]
    DccKernel.VA: lambda n: _nest({"C": (n,), "A": (n,), "B": (n,)}, {"n": n}, "C[n] A[n] B[n]"),
    # Y[n] = max(X[n], 0)
    DccKernel.RELU: lambda n: _nest({"Y": (n,), "X": (n,)}, {"n": n}, "Y[n] X[n]"),
    # r[b][m] += A[b][m][n]: RED per batch row (DCC V, Fig. 7's "batch size")
    DccKernel.BATCHED_RED: lambda batch, rows, cols: _nest(
        {"r": (batch, rows), "A": (batch, rows, cols)},
        {"b": batch, "m": rows, "n": cols},
        "r[b][m] A[b][m][n]",
    ),
    # C[b][n] = A[b][n] + B[b][n]
    DccKernel.BATCHED_VA: lambda batch, n: _nest(
        {"C": (batch, n), "A": (batch, n), "B": (batch, n)},
        {"b": batch, "n": n},
        "C[b][n] A[b][n] B[b][n]",
    ),
    # Y[b][n] = max(X[b][n], 0)
    DccKernel.BATCHED_RELU: lambda batch, n: _nest(
        {"Y": (batch, n), "X": (batch, n)}, {"b": batch, "n": n}, "Y[b][n] X[b][n]"
    ),
    # O[h][d] = sum_t softmax_t(S[h][t]) V[h][t][d], S[h][t] = sum_d Q[h][d] K[h][t][d]: DCC's
    # ATTN (QK^T, softmax, SV as one kernel). One d indexes Q, K, V and O, so K's and V's d_h
    # columns are tiled together (the core holding K[h][t-slice][d-slice] holds V's); the
    # softmax between the two products is a step of the back end's lowering, not a loop.
    DccKernel.ATTN: lambda heads, tokens, d_h: _nest(
        {
            "K": (heads, tokens, d_h),
            "V": (heads, tokens, d_h),
            "Q": (heads, d_h),
            "O": (heads, d_h),
        },
        {"h": heads, "t": tokens, "d": d_h},
        "O[h][d] Q[h][d] K[h][t][d] V[h][t][d]",
    ),
}
