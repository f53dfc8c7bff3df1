"""What a DCC tiling draft costs on a back end: compute from the command-level model, plus the
data rearrangement it implies (DCC IV-B/C/D, the simulator that labels drafts).

A draft (:mod:`compiler.dcc.schedule`) gives every dimension set ``groups`` PIM groups and
``cores`` cores per group. The worst group's share (:func:`group_share`: per set ``ceil(trip /
groups)`` loop values over ``cores`` cores) is lowered by the back end's group lowering
(``GROUP_LOWERINGS`` of :mod:`compiler.dcc.hbm_pim_lowering`, :mod:`compiler.dcc.attacc_lowering` or
:mod:`compiler.dcc.aim_lowering`) into one group's command stream and timed on the back end's
command-level model; groups run in parallel on their own buses, so that is the kernel's compute
time. Around it (:class:`DraftCost`):

- **rearrangement in**: the data the program needs in its banks (``GroupProgram.inputs``)
  moved from host layout by :func:`compiler.rearrange.rearrangement_cost` (single-bank writes
  timed on the model, host reads at the host's memory bandwidth, staged through on-chip
  memory or direct), to every group the draft uses: a tensor without a dimension in a set
  split over groups is copied to each of them (it is in each group's ``inputs``);
- **rearrangement out**: the results read back (``GroupProgram.outputs``);
- **host**: the additions the host does afterwards, within a group (``host_ops``: lane sums,
  partial sums of a reduction split over cores) and across groups (a reduction set split over
  groups leaves one partial result per group), as the host xPU's element-wise add; a set of
  :data:`GROUP_COMBINED` split over groups (ATTN's tokens) leaves partial softmax results the
  host combines (:func:`models.xpu.attention_combine_cost`), and each group's program is then
  lowered ``partial`` (it also leaves what the combine needs: ATTN's softmax statistics).

The end-to-end time is their sum (DCC II-B: steps 1-3 of Fig. 1 run one after the other).
Programs and channel-side rearrangement times are memoised per (back end, kernel, share).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from functools import cache, lru_cache

import numpy as np
from pimphony.compiler.dcc.lowering import Extents, GroupProgram
from pimphony.compiler.dcc.schedule import (
    DCC_KERNELS,
    DccError,
    DccKernel,
    Draft,
    LoopNest,
    dimension_sets,
)
from pimphony.compiler.rearrange import Strategy, group_access_cycles, rearrangement_seconds
from pimphony.models.backends import BackendConfig, BackendKind
from pimphony.models.errors import PimphonyError
from pimphony.models.hbm_pim import Op
from pimphony.models.xpu import (
    VectorOp,
    XpuCost,
    attention_combine_cost,
    attention_cost,
    batched_cost,
    gemv_cost,
    vector_cost,
)

__all__ = [
    "BACKEND_LOWERINGS",
    "GPU_KERNELS",
    "CORE_LOCAL",
    "GROUP_COMBINED",
    "GROUP_LOCAL",
    "GROUP_UNITS",
    "DraftCost",
    "GroupShare",
    "Placement",
    "RESIDENT",
    "BACKEND_SHARE_CHECKS",
    "check_kernel",
    "check_lowered",
    "check_tail",
    "clear_caches",
    "draft_cost",
    "gpu_seconds",
    "group_share",
    "host_costs",
    "kernel_nest",
    "lowerings",
    "share_checks",
    "share_program",
]

Lowering = Callable[[BackendConfig, tuple[int, ...], tuple[int, ...]], GroupProgram]


def lowerings(kind: BackendKind) -> dict[DccKernel, Lowering]:
    """The group lowerings of back-end ``kind`` (imported on first use)."""
    if kind not in BACKEND_LOWERINGS:
        allowed = ", ".join(k.value for k in BACKEND_LOWERINGS)
        raise DccError(f"back end kind {kind.value!r} has no DCC lowerings; allowed: {allowed}")
    return BACKEND_LOWERINGS[kind]()


def _hbm_pim() -> dict[DccKernel, Lowering]:
    from pimphony.compiler.dcc.hbm_pim_lowering import GROUP_LOWERINGS

    return GROUP_LOWERINGS


def _attacc() -> dict[DccKernel, Lowering]:
    from pimphony.compiler.dcc.attacc_lowering import GROUP_LOWERINGS

    return GROUP_LOWERINGS


def _aim() -> dict[DccKernel, Lowering]:
    from pimphony.compiler.dcc.aim_lowering import GROUP_LOWERINGS

    return GROUP_LOWERINGS


#: Where each back-end kind's group lowerings live.
BACKEND_LOWERINGS: dict[BackendKind, Callable[[], dict[DccKernel, Lowering]]] = {
    BackendKind.HBM_PIM: _hbm_pim,
    BackendKind.ATTACC: _attacc,
    BackendKind.AIM: _aim,
}

ShareCheck = Callable[[BackendConfig, tuple[int, ...], tuple[int, ...]], object]


def _attacc_checks() -> dict[DccKernel, ShareCheck]:
    from pimphony.compiler.dcc.attacc_lowering import SHARE_CHECKS

    return SHARE_CHECKS


#: Back ends whose lowerings refuse some shares by rules cheaper than lowering them: per
#: kernel a check raising the lowering's refusal (the search drops those drafts before
#: sampling, so the predictor trains on drafts that run).
BACKEND_SHARE_CHECKS: dict[BackendKind, Callable[[], dict[DccKernel, ShareCheck]]] = {
    BackendKind.ATTACC: _attacc_checks,
}


def share_checks(kind: BackendKind) -> dict[DccKernel, ShareCheck]:
    """The cheap share checks of back-end ``kind`` (:data:`BACKEND_SHARE_CHECKS`; none: {})."""
    return BACKEND_SHARE_CHECKS[kind]() if kind in BACKEND_SHARE_CHECKS else {}


@cache
def kernel_nest(kernel: DccKernel, sizes: tuple[int, ...]) -> LoopNest:
    """The loop nest of ``kernel`` at ``sizes`` (refused with the kernel's size names)."""
    build = DCC_KERNELS[DccKernel(kernel)]
    names = build.__code__.co_varnames[: build.__code__.co_argcount]
    if len(sizes) != len(names):
        raise DccError(
            f"kernel {kernel}: {len(sizes)} size(s) given, expected {len(names)} "
            f"({', '.join(names)})"
        )
    for name, n in zip(names, sizes, strict=True):
        if n < 1:
            raise DccError(f"kernel {kernel}: {name} = {n}: must be at least 1")
    return build(*sizes)


@dataclass(frozen=True)
class GroupShare:
    """The worst group's share of a draft: loop values per set, cores per set, and the
    groups the draft uses (with how many of them a reduction is split over and combined by
    adding; ``partials``: how many hold a part of a :data:`GROUP_COMBINED` set, 1 if it is
    not split, with ``tail`` the last such group's share when it holds fewer)."""

    sizes: tuple[int, ...]
    cores: tuple[int, ...]
    groups: int
    reduction_groups: int
    partials: int = 1
    tail: tuple[int, ...] | None = None

    @property
    def partial(self) -> bool:
        """Whether every group computes a partial result for the host to combine."""
        return self.partials > 1


def _set_vars(nest: LoopNest) -> list[str]:
    """The loop variable of each dimension set (every DCC kernel's set has one)."""
    out = []
    for ds in dimension_sets(nest):
        names = {f.var for _, _, fs in ds.members for f in fs}
        if len(names) != 1:
            raise DccError(
                f"dimension set with loop variables {sorted(names)}: only one is lowered"
            )
        out.append(names.pop())
    return out


def _output_tensor(nest: LoopNest) -> str:
    """The tensor the body writes: the first reference (``y[o] += ...``)."""
    return nest.refs[0].tensor


#: Group-level units a kernel needs (unit, why): the back end's groups must list it in
#: ``group.units``.
GROUP_UNITS: dict[DccKernel, tuple[str, str]] = {
    DccKernel.ATTN: (
        "softmax",
        "attention's softmax runs on a group's softmax unit (DCC V: \"Attention requires a "
        'softmax unit which only exists on AttAcc")',
    ),
}

#: Loop variables of a kernel whose sets a draft may not split over groups, and why.
GROUP_LOCAL: dict[DccKernel, tuple[frozenset[str], str]] = {
    DccKernel.ATTN: (
        frozenset({"d"}),
        "a score needs all of d_h (summed in one group before its softmax); heads (h) and "
        "tokens (t, the softmax combined by the host) may be split over groups",
    ),
}

#: The loop variable of a kernel whose set split over groups leaves partial results the host
#: combines by a rule of its own rather than adding (:func:`host_costs`), and that rule.
GROUP_COMBINED: dict[DccKernel, tuple[str, str]] = {
    DccKernel.ATTN: (
        "t",
        "split softmax: each group's softmax over its tokens, its output normalised by its "
        "own sum, its max and sum read back; the host rescales and adds (flash-decoding)",
    ),
}

#: Loop variables of a kernel whose sets a draft may not split over a group's cores, and why.
#: None at present: ATTN's heads may go over a group's cores (the AttAcc lowering runs their
#: QK^T and SV in parallel and serialises their softmax on the group's one unit).
CORE_LOCAL: dict[DccKernel, tuple[frozenset[str], str]] = {}


def check_lowered(cfg: BackendConfig, kernel: DccKernel) -> None:
    """Refuse a kernel the back end's kind has no group lowering for."""
    table = lowerings(cfg.kind)
    if kernel not in table:
        raise DccError(
            f"kernel {kernel} has no group lowering on back end {cfg.name} (kind "
            f"{cfg.kind.value} lowers only {', '.join(map(str, table))})"
        )


def check_kernel(cfg: BackendConfig, kernel: DccKernel) -> None:
    """Refuse a kernel whose group units (:data:`GROUP_UNITS`) the back end lacks."""
    if kernel in GROUP_UNITS:
        unit, why = GROUP_UNITS[kernel]
        if unit not in cfg.group.units:
            raise DccError(
                f"kernel {kernel} cannot run on back end {cfg.name}: it needs a {unit} unit "
                f"per group and group.units = {list(cfg.group.units)}: {why}"
            )


def group_share(cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], draft: Draft):
    """:class:`GroupShare` of ``draft`` for ``kernel`` at ``sizes`` on ``cfg``; refuses drafts
    that do not fit the back end, use a non-identity index function or split a group-local
    set (:data:`GROUP_LOCAL`) over groups."""
    nest = kernel_nest(kernel, sizes)
    variables = _set_vars(nest)
    if len(draft) != len(variables):
        raise DccError(
            f"draft has {len(draft)} part(s); kernel {kernel} has {len(variables)} dimension sets"
        )
    local, why = GROUP_LOCAL.get(DccKernel(kernel), (frozenset(), ""))
    one_core, why_core = CORE_LOCAL.get(DccKernel(kernel), (frozenset(), ""))
    for v, p in zip(variables, draft, strict=True):
        if v in local and p.groups > 1:
            raise DccError(f"kernel {kernel}: part {p} splits {v} over {p.groups} groups: {why}")
        if v in one_core and p.cores > 1:
            raise DccError(f"kernel {kernel}: part {p} splits {v} over {p.cores} cores: {why_core}")
    trips = dict(nest.loops)
    out_vars = {f.var for r in nest.refs[:1] for f in r.index}
    groups = math.prod(p.groups for p in draft)
    cores = math.prod(p.cores for p in draft)
    if groups > cfg.groups:
        raise DccError(f"draft uses {groups} groups; back end {cfg.name} has {cfg.groups}")
    if cores > cfg.cores_per_group:
        raise DccError(
            f"draft uses {cores} cores per group; back end {cfg.name} has {cfg.cores_per_group}"
        )
    for p in draft:
        if p.function.scale != 1 or p.function.offset != 0:
            raise DccError(
                f"part {p}: index function {p.function} is not the identity; only identity "
                "mappings are lowered"
            )
    share = tuple(-(-trips[v] // p.groups) for v, p in zip(variables, draft, strict=True))
    combined = GROUP_COMBINED.get(DccKernel(kernel), ("", ""))[0]
    red = math.prod(
        p.groups
        for v, p in zip(variables, draft, strict=True)
        if v not in out_vars and v != combined
    )
    partials, tail = 1, None
    if combined in variables:
        k = variables.index(combined)
        partials = -(-trips[combined] // share[k])  # the non-empty groups
        last = trips[combined] - (partials - 1) * share[k]
        if partials > 1 and last < share[k]:
            tail = share[:k] + (last,) + share[k + 1 :]
    return GroupShare(share, tuple(p.cores for p in draft), groups, red, partials, tail)


@lru_cache(maxsize=4)
def _program(
    cfg: BackendConfig, kernel: DccKernel, sizes: Extents, cores: Extents, partial: bool = False
) -> GroupProgram:
    """One group's lowered program (``partial``: of a share of a :data:`GROUP_COMBINED` set).
    Only the last few are kept: a program holds its stream and address arrays (megabytes at
    figure sizes), and a search lowers thousands of shares; what a draft's cost needs of it
    is kept by :func:`_program_summary` and :func:`_channel_seconds`."""
    table = lowerings(cfg.kind)
    check_lowered(cfg, kernel)
    if partial:  # only a GROUP_COMBINED kernel's lowering takes it
        return table[kernel](cfg, sizes, cores, partial=True)  # type: ignore[call-arg]
    return table[kernel](cfg, sizes, cores)


def share_program(cfg: BackendConfig, kernel: DccKernel, share: GroupShare) -> GroupProgram:
    """The program of the worst group's ``share`` of ``kernel`` (lowered ``partial`` when a
    :data:`GROUP_COMBINED` set is split over groups)."""
    return _program(cfg, DccKernel(kernel), share.sizes, share.cores, share.partial)


@cache
def _program_summary(
    cfg: BackendConfig, kernel: DccKernel, sizes: Extents, cores: Extents, partial: bool = False
) -> tuple[int, tuple[tuple[str, int], ...], int]:
    """(cycles, command counts, host operations) of one group's program."""
    prog = _program(cfg, kernel, sizes, cores, partial)
    return prog.cycles, tuple(prog.counts.items()), prog.host_ops


@cache
def _channel_seconds(
    cfg: BackendConfig,
    kernel: DccKernel,
    sizes: Extents,
    cores: Extents,
    op: Op,
    skip: frozenset[str],
    partial: bool = False,
) -> tuple[float, int]:
    """(seconds, bytes) of one group's single-bank accesses to the vectors its program needs
    in its banks (``op`` WR: ``inputs``) or leaves there (RD: ``outputs``), but for the
    tensors in ``skip``."""
    prog = _program(cfg, kernel, sizes, cores, partial)
    tensors = prog.inputs if op is Op.WR else prog.outputs
    arrays = [a for name, a in tensors.items() if len(a) and name not in skip]
    if not arrays:
        return 0.0, 0
    addresses = _unique_rows(np.concatenate(arrays))
    cycles, _ = group_access_cycles(cfg, addresses, op)
    assert cfg.clock_ghz is not None
    return cycles / (cfg.clock_ghz * 1e9), len(addresses) * cfg.group.column_bytes


def clear_caches() -> None:
    """Forget the memoised group programs, their summaries and access times. They are pure
    functions of their arguments, memoised for one search (the default and the chosen draft
    re-costed); a run over many shapes (``pimphony dcc-figs``) clears them between shapes.
    Only the last few programs themselves are kept (their streams and address arrays once
    reached 24 GB in AttAcc's Fig. 6), so what this frees is small. Costs are unchanged."""
    _program.cache_clear()
    _program_summary.cache_clear()
    _channel_seconds.cache_clear()


def _unique_rows(a: np.ndarray) -> np.ndarray:
    """``np.unique(a, axis=0)`` of non-negative (bank, row, column) rows, through one int64
    key per row (the same rows in the same order; ``axis=0`` sorts row views, ~10x slower)."""
    span = a.max(axis=0).astype(np.int64) + 1
    key = np.unique((a[:, 0] * span[1] + a[:, 1]) * span[2] + a[:, 2])
    return np.stack([key // (span[1] * span[2]), key // span[2] % span[1], key % span[2]], 1)


def _move_seconds(
    cfg: BackendConfig,
    share: GroupShare,
    kernel: DccKernel,
    op: Op,
    strategy: Strategy,
    skip: frozenset[str],
) -> tuple[float, int]:
    """(seconds, bytes) of moving one direction's vectors between host and every group the
    draft uses (each group's share alike), but for the tensors in ``skip``."""
    channel_s, group_bytes = _channel_seconds(
        cfg, kernel, share.sizes, share.cores, op, skip, share.partial
    )
    if not group_bytes:
        return 0.0, 0
    _, total, _ = rearrangement_seconds(
        strategy,
        group_bytes * share.groups,
        cfg.host_gbps,
        channel_s,
        share.groups,
        cfg.system.onchip_bytes,
    )
    return total, group_bytes * share.groups


class Placement(StrEnum):
    """Which inputs a kernel call rearranges from host layout."""

    RESIDENT = "resident"  # weights / KV cache already in PIM layout (placed once); the rest
    EVERY_CALL = "every-call"  # every input, weights included


#: Tensors of each kernel that live in PIM memory between calls (an LLM's weights and KV
#: cache: placed in the draft's layout once, when loaded or written), not moved per call
#: under ``Placement.RESIDENT``.
RESIDENT: dict[DccKernel, frozenset[str]] = {
    DccKernel.GEMV: frozenset({"W"}),
    DccKernel.BATCHED_GEMV: frozenset({"W"}),
    DccKernel.QK: frozenset({"K"}),
    DccKernel.SV: frozenset({"V"}),
    DccKernel.RED: frozenset(),
    DccKernel.VA: frozenset(),
    DccKernel.RELU: frozenset(),
    DccKernel.BATCHED_RED: frozenset(),
    DccKernel.BATCHED_VA: frozenset(),
    DccKernel.BATCHED_RELU: frozenset(),
    DccKernel.ATTN: frozenset({"K", "V"}),
}


@dataclass(frozen=True)
class DraftCost:
    """End-to-end seconds of one draft and what they are made of."""

    backend: str
    kernel: DccKernel
    sizes: tuple[int, ...]
    draft: Draft
    share: GroupShare
    strategy: Strategy
    placement: Placement
    compute_s: float
    rearrange_in_s: float
    rearrange_out_s: float
    host_s: float
    bytes_in: int
    bytes_out: int
    cycles: int
    counts: dict[str, int]

    @property
    def rearrange_s(self) -> float:
        """Both rearrangements."""
        return self.rearrange_in_s + self.rearrange_out_s

    @property
    def total_s(self) -> float:
        """Rearrangement in + compute + rearrangement out + host additions."""
        return self.rearrange_in_s + self.compute_s + self.rearrange_out_s + self.host_s


def draft_cost(
    cfg: BackendConfig,
    kernel: DccKernel,
    sizes: tuple[int, ...],
    draft: Draft,
    strategy: Strategy | None = None,
    placement: Placement = Placement.RESIDENT,
) -> DraftCost:
    """Simulate ``draft`` of ``kernel`` at ``sizes`` on ``cfg`` (:class:`DraftCost`);
    ``placement`` says whether the kernel's weights / KV cache are already in PIM layout."""
    if cfg.clock_ghz is None:
        raise DccError(f"back end {cfg.name} has no [timing]: no command-level model to time")
    kernel = DccKernel(kernel)
    check_kernel(cfg, kernel)
    sizes = tuple(int(s) for s in sizes)
    share = group_share(cfg, kernel, sizes, draft)
    cycles, counts, host_ops = _program_summary(
        cfg, kernel, share.sizes, share.cores, share.partial
    )
    check_tail(cfg, kernel, share)
    strategy = strategy or (Strategy.STAGED if cfg.system.onchip_bytes else Strategy.DIRECT)
    placement = Placement(placement)
    resident = RESIDENT[kernel] if placement is Placement.RESIDENT else frozenset()
    in_s, in_b = _move_seconds(cfg, share, kernel, Op.WR, strategy, resident)
    out_s, out_b = _move_seconds(cfg, share, kernel, Op.RD, strategy, frozenset())
    host_s = sum(c.seconds for c in host_costs(cfg, kernel, sizes, share, host_ops).values())
    compute_s = cycles / (cfg.clock_ghz * 1e9)
    return DraftCost(
        cfg.name, kernel, sizes, draft, share, strategy, placement, compute_s,
        in_s, out_s, host_s, in_b, out_b, cycles, dict(counts),
    )  # fmt: skip


def check_tail(cfg: BackendConfig, kernel: DccKernel, share: GroupShare) -> None:
    """Refuse a draft whose last group's shorter share of a :data:`GROUP_COMBINED` set
    (``share.tail``) the back end's cheap share check refuses (the worst share is lowered and
    timed; the last one runs too, at its own size)."""
    check = share_checks(cfg.kind).get(DccKernel(kernel)) if share.tail else None
    if check is None:
        return
    try:
        check(cfg, share.tail, share.cores, partial=True)
    except PimphonyError as exc:
        raise DccError(
            f"kernel {kernel}: the last group's share {share.tail} (of {share.partials} "
            f"groups): {exc}"
        ) from None


def host_costs(
    cfg: BackendConfig,
    kernel: DccKernel,
    sizes: tuple[int, ...],
    share: GroupShare,
    host_ops: int,
) -> dict[str, XpuCost]:
    """What the host xPU does after the groups (none: {}): ``adds``, the element-wise adds of
    ``host_ops`` per group and of one partial result per extra group of a reduction split
    over groups; ``combine``, the split softmax's combine of ``share.partials`` partial
    outputs per head (:data:`GROUP_COMBINED`, :func:`models.xpu.attention_combine_cost`)."""
    nest = kernel_nest(DccKernel(kernel), tuple(sizes))
    out_elems = math.prod(dict(nest.tensors)[_output_tensor(nest)])
    adds = host_ops * share.groups + out_elems * (share.reduction_groups - 1)
    host = cfg.host()
    out: dict[str, XpuCost] = {}
    if adds:
        out["adds"] = vector_cost(host, VectorOp.RESIDUAL, adds)
    if share.partial:
        heads, _, head_dim = sizes  # ATTN, the one GROUP_COMBINED kernel: (h, t, d)
        out["combine"] = attention_combine_cost(host, heads, share.partials, head_dim)
    return out


def _gpu_red(host, rows: int, cols: int) -> float:
    # r = A @ ones: the GPU reads A once, exactly a GEMV's traffic
    return gemv_cost(host, 1, cols, rows).seconds


#: Each kernel's time on the host GPU alone (the xPU roofline of ``models/xpu.py``), from the
#: kernel's sizes.
GPU_KERNELS: dict[DccKernel, Callable[..., float]] = {
    DccKernel.GEMV: lambda h, d_out, d_in: gemv_cost(h, 1, d_in, d_out).seconds,
    DccKernel.BATCHED_GEMV: lambda h, b, d_out, d_in: gemv_cost(h, b, d_in, d_out).seconds,
    # one GEMV per head, all heads in one batched kernel: K (t x d) times q, or V^T (d x t) p
    DccKernel.QK: lambda h, heads, t, d: batched_cost(h, gemv_cost(h, 1, d, t), heads).seconds,
    DccKernel.SV: lambda h, heads, t, d: batched_cost(h, gemv_cost(h, 1, t, d), heads).seconds,
    DccKernel.RED: _gpu_red,
    DccKernel.VA: lambda h, n: vector_cost(h, VectorOp.RESIDUAL, n).seconds,
    DccKernel.RELU: lambda h, n: vector_cost(h, VectorOp.RELU, n).seconds,
    DccKernel.BATCHED_RED: lambda h, b, rows, cols: _gpu_red(h, b * rows, cols),
    DccKernel.BATCHED_VA: lambda h, b, n: vector_cost(h, VectorOp.RESIDUAL, b * n).seconds,
    DccKernel.BATCHED_RELU: lambda h, b, n: vector_cost(h, VectorOp.RELU, b * n).seconds,
    # flash-decoding: every head reads its K and V once, scores stay on chip
    DccKernel.ATTN: lambda h, heads, t, d: attention_cost(h, [t], heads, heads, d).seconds,
}


def gpu_seconds(cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...]) -> float:
    """Seconds of ``kernel`` at ``sizes`` on the back end's host GPU (no PIM)."""
    kernel_nest(kernel, tuple(sizes))  # validates the sizes
    return GPU_KERNELS[DccKernel(kernel)](cfg.host(), *sizes)
