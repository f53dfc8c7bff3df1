"""DCC's search over tiling drafts: the best draft end to end, the compute-centric choice, and
the back end's default mapping (DCC IV-B/D, V "Comparison Points").

:func:`search` generates a kernel's drafts on a back end (groups = all PIM groups of the
system, cores = the back end's cores per group), prunes them (rules 1-3, SIMD width = the
core's lanes along the innermost loop's set) unless asked not to, and simulates each with
:func:`compiler.dcc.cost.draft_cost`. Drafts a back end cannot run (a share beyond its rows,
more cores than a lowering supports) are skipped and counted, never silently: the result
says how many and why.

Choices (:class:`Objective`): ``end-to-end`` (DCC: rearrangement + compute + host) and
``compute`` (the compute-centric choice of a TVM-like flow, DCC II-B / Fig. 2: least compute
time, then its rearrangement is paid whatever it is).

The default mapping (:func:`default_draft`, DCC V): "distributes different batches or
attention heads across 16 channels, partitions the first tensor dimension across 16 bank
groups per channel, and partitions the second tensor dimension across 4 banks per bank
group" (AttAcc's; DCC gives HBM-PIM the same "data distribution and processing
assignment"). On a back end: the batch or head set (:data:`BATCH_SETS`) over the system's
groups (DCC V's "16 channels" are one device's; its system has five devices), the next set
over the bank groups' cores and the one after over the cores within a
bank group; a one-dimensional kernel (VA, ReLU) spreads its dimension over all the group's
cores. A kernel without a batch or head set uses one group: the mapping has nothing to
spread over channels.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache

from pimphony.compiler.dcc.cost import (
    CORE_LOCAL,
    GROUP_LOCAL,
    DraftCost,
    Placement,
    check_kernel,
    check_tail,
    draft_cost,
    group_share,
    kernel_nest,
    share_checks,
)
from pimphony.compiler.dcc.schedule import (
    DccError,
    DccKernel,
    DimensionSet,
    Draft,
    Part,
    dimension_sets,
    drafts,
    innermost_set,
    prune,
)
from pimphony.compiler.rearrange import Strategy
from pimphony.models.backends import BackendConfig, BackendKind
from pimphony.models.errors import PimphonyError

__all__ = [
    "BACKEND_DEFAULTS",
    "BANK_TENSOR",
    "BATCH_SETS",
    "Objective",
    "SearchResult",
    "best",
    "compact_drafts",
    "default_draft",
    "default_name",
    "generated_count",
    "kernel_drafts",
    "search",
]

#: The tensor each kernel keeps in the banks (the matrix of a GEMV, K or V, the reduced or
#: element-wise input): its dimension order is the "first" and "second tensor dimension" of
#: the default mapping.
BANK_TENSOR: dict[DccKernel, str] = {
    DccKernel.GEMV: "W",
    DccKernel.BATCHED_GEMV: "W",
    DccKernel.QK: "K",
    DccKernel.SV: "V",
    DccKernel.RED: "A",
    DccKernel.VA: "A",
    DccKernel.RELU: "X",
    DccKernel.BATCHED_RED: "A",
    DccKernel.BATCHED_VA: "A",
    DccKernel.BATCHED_RELU: "X",
    DccKernel.ATTN: "K",
}

#: The loop variable of each kernel that is a batch or attention heads (DCC V: the default
#: spreads it over one device's channels); kernels without one have none.
BATCH_SETS: dict[DccKernel, str] = {
    DccKernel.BATCHED_GEMV: "n",
    DccKernel.QK: "h",
    DccKernel.SV: "h",
    DccKernel.BATCHED_RED: "b",
    DccKernel.BATCHED_VA: "b",
    DccKernel.BATCHED_RELU: "b",
    DccKernel.ATTN: "h",
}


class Objective(StrEnum):
    """What a search minimises."""

    END_TO_END = "end-to-end"  # DCC: rearrangement + compute + host
    COMPUTE = "compute"  # compute-centric (DCC II-B, Fig. 2's TVM-based point)


#: The time each objective ranks drafts by.
OBJECTIVES = {
    Objective.END_TO_END: lambda c: c.total_s,
    Objective.COMPUTE: lambda c: (c.compute_s, c.total_s),
}


@dataclass(frozen=True)
class SearchResult:
    """Every simulated draft of one search, and what was skipped."""

    costs: tuple[DraftCost, ...]
    generated: int
    pruned: int
    skipped: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0


def _fewest(n: int, limit: int) -> list[int]:
    """Every ``k <= limit`` that is the fewest giving its share ``ceil(n / k)``."""
    return [k for k in range(1, min(n, limit) + 1) if k == 1 or -(-n // k) < -(-n // (k - 1))]


def compact_drafts(
    sets: list[DimensionSet],
    trips: list[int],
    groups: int,
    cores: int,
    rule1: bool = False,
    group_limits: list[int] | None = None,
    core_limits: list[int] | None = None,
):
    """The drafts of :func:`compiler.dcc.schedule.drafts` whose every part uses the fewest
    groups for its group share and the fewest cores for its core share (rule 3 applied per
    set while generating: more groups or cores for the same shares add resources, not
    parallelism), in the same search order. ``rule1``: of a set's mappings with the same
    size and index function only the first (rule 1 applied while generating: the drafts it
    keeps; 12x fewer on QK^T, whose sets have 3, 2 and 2 equivalent mappings).
    ``group_limits`` / ``core_limits``: at most that many groups / cores per set (1: the set
    stays in one group / core)."""
    maps = [s.mappings() for s in sets]
    if rule1:
        maps = [[m for k, m in enumerate(ms) if (m[1], m[2]) not in
                 {(n, f) for _, n, f in ms[:k]}] for ms in maps]  # fmt: skip

    def walk(i: int, g_left: int, c_left: int, head: tuple) -> Iterator[Draft]:
        if i == len(sets):
            yield head
            return
        limit = g_left if group_limits is None else min(g_left, group_limits[i])
        for g in _fewest(trips[i], limit):
            share = -(-trips[i] // g)
            c_limit = c_left if core_limits is None else min(c_left, core_limits[i])
            for c in _fewest(share, c_limit):
                for dim, size, f in maps[i]:
                    yield from walk(i + 1, g_left // g, c_left // c,
                                    (*head, Part(g, c, dim, size, f)))  # fmt: skip

    yield from walk(0, groups, cores, ())


@cache
def _count(n_sets: int, groups: int, cores: int) -> int:
    """How many allocations :func:`compiler.dcc.schedule.drafts` enumerates."""
    if n_sets == 0:
        return 1
    return sum(
        _count(n_sets - 1, groups // g, cores // c)
        for g in range(1, groups + 1)
        for c in range(1, cores + 1)
    )


def generated_count(sets: list[DimensionSet], groups: int, cores: int) -> int:
    """Drafts the full generator would enumerate (without enumerating them)."""
    return _count(len(sets), groups, cores) * math.prod(len(s.mappings()) for s in sets)


def kernel_drafts(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], pruned: bool = True
) -> tuple[list[Draft], int]:
    """(drafts to simulate, drafts the full generator enumerates) of ``kernel`` at ``sizes``
    on ``cfg``: every draft (``pruned=False``, the exhaustive search), or the compact
    generation (:func:`compact_drafts`) through pruning rules 1-3."""
    check_kernel(cfg, DccKernel(kernel))
    nest = kernel_nest(kernel, sizes)
    sets = dimension_sets(nest)
    total = generated_count(sets, cfg.groups, cfg.cores_per_group)
    if not pruned:
        return list(drafts(sets, cfg.groups, cfg.cores_per_group)), total
    trips = dict(nest.loops)
    set_trips = [trips[ds.mappings()[0][2].var] for ds in sets]
    k = DccKernel(kernel)
    g_local = GROUP_LOCAL.get(k, (frozenset(), ""))[0]
    c_local = CORE_LOCAL.get(k, (frozenset(), ""))[0]
    var = [ds.mappings()[0][2].var for ds in sets]
    compact = list(
        compact_drafts(
            sets, set_trips, cfg.groups, cfg.cores_per_group, True,
            [1 if v in g_local else cfg.groups for v in var],
            [1 if v in c_local else cfg.cores_per_group for v in var],
        )
    )  # fmt: skip
    kept, _ = prune(compact, simd=cfg.core.lanes, vector_set=innermost_set(nest, sets))
    check = share_checks(cfg.kind).get(k)
    if check is not None:  # drop what the back end's lowering refuses by a cheap rule
        kept = [d for d in kept if _runs(check, cfg, k, sizes, d)]
    return kept, total


def _runs(check, cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], d: Draft) -> bool:
    share = group_share(cfg, kernel, sizes, d)
    try:
        if share.partial:  # a share of a GROUP_COMBINED set: the partial program, the tail too
            check(cfg, share.sizes, share.cores, partial=True)
            check_tail(cfg, kernel, share)
        else:
            check(cfg, share.sizes, share.cores)
    except PimphonyError:
        return False
    return True


def search(
    cfg: BackendConfig,
    kernel: DccKernel,
    sizes: tuple[int, ...],
    pruned: bool = True,
    strategy: Strategy | None = None,
    candidates: list[Draft] | None = None,
    placement: Placement = Placement.RESIDENT,
) -> SearchResult:
    """Simulate every (pruned) draft of ``kernel`` at ``sizes``; drafts the back end refuses
    are counted in ``skipped`` by reason."""
    start = time.perf_counter()
    if candidates is None:
        candidates, generated = kernel_drafts(cfg, kernel, sizes, pruned)
    else:
        generated = len(candidates)
    costs = []
    skipped: Counter[str] = Counter()
    for d in candidates:
        try:
            costs.append(draft_cost(cfg, kernel, sizes, d, strategy, placement))
        except PimphonyError as exc:
            skipped[_reason(str(exc))] += 1
    if not costs:
        reasons = "; ".join(f"{n} x {r}" for r, n in skipped.most_common(3))
        raise DccError(
            f"kernel {kernel} {sizes} on {cfg.name}: none of {len(candidates)} drafts runs "
            f"({reasons})"
        )
    return SearchResult(
        tuple(costs), generated, len(candidates), dict(skipped), time.perf_counter() - start
    )


def _reason(message: str) -> str:
    """A refusal's message without its numbers, to count drafts by reason."""
    return "".join("#" if ch.isdigit() else ch for ch in message).split(":")[0][:80]


def best(result: SearchResult, objective: Objective = Objective.END_TO_END) -> DraftCost:
    """The draft ``objective`` picks (ties: the first in search order)."""
    return min(result.costs, key=OBJECTIVES[Objective(objective)])


def _aim_default(cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...]) -> Draft:
    from pimphony.compiler.dcc.aim_lowering import default_draft as aim_default

    return aim_default(cfg, kernel, sizes)


#: Back-end kinds whose default mapping is their own rather than DCC V's, with its name: AiM's
#: is the fixed mapping of ``compiler.kernels`` / ``compiler.plan`` (:func:`compiler.
#: aim_lowering.default_draft`; DCC V's would split the reduction over banks, which AiM's
#: all-bank MAC cannot).
BACKEND_DEFAULTS = {BackendKind.AIM: ("fixed", _aim_default)}


def default_name(cfg: BackendConfig) -> str:
    """What the back end's default mapping is called: ``DCC V`` or its own name."""
    return BACKEND_DEFAULTS[cfg.kind][0] if cfg.kind in BACKEND_DEFAULTS else "DCC V"


def default_draft(cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...]) -> Draft:
    """The back end's default mapping of ``kernel`` (DCC V, module docstring; a back end of
    :data:`BACKEND_DEFAULTS` its own) as a draft: one
    :class:`Part` per dimension set, the bank tensor's (:data:`BANK_TENSOR`) dimension as the
    representative; the batch / head set over ``min(size, groups)`` groups (every device's
    channels: DCC V's "16 channels" are one device's, and its system has five); the
    bank tensor's first other dimension over the bank groups' cores, its second over the
    cores within a bank group (a one-dimensional tensor: all the group's cores); a dimension
    of extent 1 is no dimension to spread (Fig. 7's RED of a length-N vector per batch row,
    ``batched-red`` (B, 1, N), spreads N as VA does)."""
    kernel = DccKernel(kernel)
    if cfg.kind in BACKEND_DEFAULTS:
        return BACKEND_DEFAULTS[cfg.kind][1](cfg, kernel, tuple(sizes))
    nest = kernel_nest(kernel, sizes)
    sets = dimension_sets(nest)
    trips = dict(nest.loops)
    g = cfg.group
    per_bg = max(1, g.banks // g.bank_groups // cfg.core.banks)  # cores within a bank group
    across_bg = cfg.cores_per_group // per_bg  # bank groups' worth of cores
    tensor, batch = BANK_TENSOR[kernel], BATCH_SETS.get(kernel)
    reps = [
        next(((d, n, f) for d, n, f in ds.mappings() if d.startswith(tensor)), ds.mappings()[0])
        for ds in sets
    ]
    # the bank tensor's dimensions in its own order (the "first" and "second" of DCC V); one
    # of extent 1 has nothing to spread and is skipped (A[b][1][n] is the tensor A[b][n])
    order = sorted(
        (k for k, (_, _, f) in enumerate(reps) if f.var != batch and trips[f.var] > 1),
        key=lambda k: reps[k][0],
    )
    spread = [across_bg, per_bg] if len(order) > 1 else [cfg.cores_per_group]
    cores = {k: spread[i] if i < len(spread) else 1 for i, k in enumerate(order)}
    parts: list[Part] = []
    for k, (dim, size, f) in enumerate(reps):
        if f.var == batch:
            parts.append(Part(min(cfg.groups, trips[f.var]), 1, dim, size, f))
        else:
            parts.append(Part(1, cores.get(k, 1), dim, size, f))
    return tuple(parts)
