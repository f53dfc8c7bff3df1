"""The capacity experiment (PIMphony Fig. 19): KV-cache capacity utilisation and batch size
of static vs lazy allocation.

:func:`capacity_utilization` forms first-come-first-served batches from a workload until the
next request does not fit, for either policy (:func:`models.memory.make_allocator`), and
reports capacity utilisation and batch size; :func:`paper_comparison` runs it for every
set-up of :data:`PAPER_SETUPS` and :func:`format_capacity_table` prints the table of
``docs/memory.md``.

``pimphony capacity`` runs it (:func:`add_arguments`, :func:`run`).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from pimphony.compiler.llm import ModelSpec, load_model
from pimphony.models.config import DEFAULT_PRESET, HardwareConfig
from pimphony.models.errors import PimphonyError
from pimphony.models.memory import (
    CHUNK_BYTES,
    GIB,
    ChunkGeometry,
    MemoryPolicy,
    make_allocator,
)
from pimphony.sim.cli import add_seed_option
from pimphony.sim.provenance import provenance
from pimphony.sim.workloads import (
    Workload,
    add_requests_option,
    load_workload,
    sample_context_lengths,
)

__all__ = [
    "CapacityError",
    "PAPER_SETUPS",
    "CapacityResult",
    "CapacitySetup",
    "add_arguments",
    "capacity_utilization",
    "format_capacity_table",
    "paper_comparison",
    "run",
]


class CapacityError(PimphonyError, ValueError):
    """The experiment cannot measure capacity-bound batches as asked."""


@dataclass(frozen=True)
class CapacityResult:
    """Outcome of :func:`capacity_utilization` (means over capacity-bound batches).

    Attributes
    ----------
    workload, policy : str
        Task name and ``"static"`` / ``"lazy"``.
    kv_bytes_per_token, total_bytes, weight_bytes, capacity_bytes, chunk_bytes : int
        The set-up (``capacity_bytes`` = KV capacity = total - weights).
    max_context : int
        Static reservation in tokens.
    batch_sizes : tuple of int
        Requests per batch, one entry per batch closed by a request that did not fit.
    capacity_utilization : float
        Mean ``used / KV capacity`` at batch formation.
    total_utilization : float
        Mean ``used / total memory`` (weights included).
    reserved_utilization : float
        Mean ``used / reserved``.
    max_request_waste_bytes : int
        Largest ``reserved - used`` of any admitted request (lazy: < one chunk).
    """

    workload: str
    policy: str
    kv_bytes_per_token: int
    total_bytes: int
    weight_bytes: int
    capacity_bytes: int
    chunk_bytes: int
    max_context: int
    batch_sizes: tuple[int, ...]
    capacity_utilization: float
    total_utilization: float
    reserved_utilization: float
    max_request_waste_bytes: int

    @property
    def mean_batch_size(self) -> float:
        """Mean requests per batch."""
        return float(np.mean(self.batch_sizes))


def capacity_utilization(
    workload: Workload | str,
    kv_bytes_per_token: int,
    capacity_bytes: int,
    max_context: int | None = None,
    n_requests: int = 512,
    seed: int = 0,
    policy: MemoryPolicy | str = "lazy",
    *,
    weight_bytes: int = 0,
    chunk_bytes: int = CHUNK_BYTES,
    preset: HardwareConfig | str = DEFAULT_PRESET,
    lengths: Sequence[int] | np.ndarray | None = None,
) -> CapacityResult:
    """FCFS batch formation under one allocation policy; capacity utilisation and batch size.

    ``n_requests`` context lengths are drawn from the workload (or given as ``lengths``) and
    admitted in order until the next one does not fit; that closes a batch, whose
    utilisation is recorded before all its requests are released, and the request that did
    not fit opens the next batch. The final batch, ended by running out of requests rather
    than memory, is not counted. Every batch snapshot also checks that a lazy request wastes
    less than one chunk (only its last chunk is partly empty).

    Parameters
    ----------
    workload : Workload or str
        Task whose context lengths are sampled.
    kv_bytes_per_token : int
        KV bytes one token adds over the whole memory (``2 * layers * kv_heads * head_dim *
        2`` for FP16).
    capacity_bytes : int
        Total memory (weights included): a whole number of ``preset`` modules.
    max_context : int, optional
        Static reservation in tokens; default the workload's ``context_window``.
    n_requests, seed : int
        Stream length and sampling seed.
    policy : {"static", "lazy"}
        Allocation policy.
    weight_bytes : int
        Memory held by model weights; KV capacity is ``capacity_bytes - weight_bytes``.
    chunk_bytes : int
        Allocation chunk (default 1 MiB).
    preset : HardwareConfig or str
        Module organisation the chunks are cut from.
    lengths : sequence of int, optional
        Explicit context lengths instead of sampling.
    """
    wl = load_workload(workload) if isinstance(workload, str) else workload
    max_ctx = wl.context_window if max_context is None else max_context
    geometry = ChunkGeometry.for_capacity(capacity_bytes, preset, chunk_bytes)
    alloc = make_allocator(
        policy, geometry, kv_bytes_per_token, weight_bytes=weight_bytes, max_context=max_ctx
    )
    if lengths is None:
        lens = sample_context_lengths(wl, n_requests, seed)
    else:
        lens = np.asarray(lengths, dtype=np.int64)
    sizes: list[int] = []
    cap_u: list[float] = []
    tot_u: list[float] = []
    res_u: list[float] = []
    max_waste = 0
    i = 0
    while i < len(lens):
        start = i
        while i < len(lens) and alloc.admit(i, int(lens[i]), raise_on_oom=False):
            i += 1
        if i == start:  # a single request does not fit an empty memory
            alloc.admit(i, int(lens[i]))  # raises OutOfMemory with the numbers
        if i == len(lens):
            break  # stream exhausted: not a capacity-bound batch
        st = alloc.stats()
        for r in alloc.requests:
            waste = alloc.request(r).waste_bytes
            if policy == MemoryPolicy.LAZY and not 0 <= waste < alloc.chunk_bytes:
                raise AssertionError(f"a lazy request wastes {waste} B >= one chunk")
            max_waste = max(max_waste, waste)
        sizes.append(st.requests)
        cap_u.append(st.capacity_utilization)
        tot_u.append(st.total_utilization)
        res_u.append(st.reserved_utilization)
        alloc.release_all()
    if not sizes:
        raise CapacityError(
            f"all {len(lens)} requests fit in one batch ({policy}, {wl.name}); memory never "
            "filled up, so utilisation is not capacity-bound: use more requests"
        )
    return CapacityResult(
        workload=wl.name,
        policy=policy,
        kv_bytes_per_token=kv_bytes_per_token,
        total_bytes=geometry.total_bytes,
        weight_bytes=weight_bytes,
        capacity_bytes=alloc.capacity_bytes,
        chunk_bytes=chunk_bytes,
        max_context=max_ctx,
        batch_sizes=tuple(sizes),
        capacity_utilization=float(np.mean(cap_u)),
        total_utilization=float(np.mean(tot_u)),
        reserved_utilization=float(np.mean(res_u)),
        max_request_waste_bytes=max_waste,
    )


@dataclass(frozen=True)
class CapacitySetup:
    """A PIMphony evaluation set-up (Table I, VIII-A) for the capacity experiment.

    The model's KV bytes per token and resident weights (decoder layers, embeddings and LM
    head) come from its spec in ``configs/models/`` (:func:`compiler.llm.load_model`), the
    same numbers ``pimphony decode`` admits batches with.
    """

    label: str
    model: str
    capacity_bytes: int
    workloads: tuple[str, ...]

    @functools.cached_property
    def spec(self) -> ModelSpec:
        """The model's specification (loaded once)."""
        return load_model(self.model)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token adds (all layers)."""
        return self.spec.kv_bytes_per_token

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights resident in PIM memory."""
        return self.spec.resident_weight_bytes


_LONGBENCH = ("qmsum", "musique")
_LVEVAL = ("multifieldqa", "loogle-sd")
#: PIMphony VIII-A: LongBench on the 32K MHA models, LV-Eval on the 128K GQA models; 7B-class
#: models on 128 GB, 72B-class on 512 GB.
PAPER_SETUPS: tuple[CapacitySetup, ...] = (
    CapacitySetup("LLM-7B-32K, 128 GiB", "llm-7b", 128 * GIB, _LONGBENCH),
    CapacitySetup("LLM-72B-32K, 512 GiB", "llm-72b", 512 * GIB, _LONGBENCH),
    CapacitySetup("LLM-7B-128K-GQA, 128 GiB", "llama-3.1-8b", 128 * GIB, _LVEVAL),
    CapacitySetup("LLM-72B-128K-GQA, 512 GiB", "llama-3.1-70b", 512 * GIB, _LVEVAL),
)


def paper_comparison(
    n_requests: int = 1024, seed: int = 0, setups: Iterable[CapacitySetup] = PAPER_SETUPS
) -> list[tuple[CapacitySetup, CapacityResult, CapacityResult]]:
    """Static and lazy results for every (set-up, workload) pair of :data:`PAPER_SETUPS`."""
    rows = []
    for setup in setups:
        for name in setup.workloads:
            both = [
                capacity_utilization(
                    name,
                    setup.kv_bytes_per_token,
                    setup.capacity_bytes,
                    n_requests=n_requests,
                    seed=seed,
                    policy=p,
                    weight_bytes=setup.weight_bytes,
                )
                for p in (MemoryPolicy.STATIC, MemoryPolicy.LAZY)
            ]
            rows.append((setup, both[0], both[1]))
    return rows


def format_capacity_table(
    rows: Sequence[tuple[CapacitySetup, CapacityResult, CapacityResult]],
) -> str:
    """Markdown table of :func:`paper_comparison` rows with the paper's averages."""
    head = (
        "| set-up | workload | static util. (total) | lazy util. (total) | static util. (KV) "
        "| lazy util. (KV) | static batch | lazy batch |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for setup, s, z in rows:
        lines.append(
            f"| {setup.label} | {s.workload} | {s.total_utilization:.1%} | "
            f"{z.total_utilization:.1%} | {s.capacity_utilization:.1%} | "
            f"{z.capacity_utilization:.1%} | {s.mean_batch_size:.2f} | {z.mean_batch_size:.2f} |"
        )
    n = len(rows)
    mean = [
        sum(r[1].total_utilization for r in rows) / n,
        sum(r[2].total_utilization for r in rows) / n,
        sum(r[1].capacity_utilization for r in rows) / n,
        sum(r[2].capacity_utilization for r in rows) / n,
    ]
    lines.append(
        f"| **mean** | | **{mean[0]:.1%}** | **{mean[1]:.1%}** | {mean[2]:.1%} | {mean[3]:.1%} "
        "| | |"
    )
    lines.append("| PIMphony Fig. 19 | | 36.2% (31.0-40.5%) | 75.6% | | | | |")
    return head + "\n".join(lines) + "\n"


def _result_dict(r: CapacityResult) -> dict:
    return {**asdict(r), "mean_batch_size": r.mean_batch_size}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``pimphony capacity``."""
    add_requests_option(parser, 1024, "context lengths drawn per workload")
    add_seed_option(parser, "seed of the context-length draws")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    """Print the Fig. 19 table (or its rows as JSON)."""
    rows = paper_comparison(n_requests=args.requests, seed=args.seed)
    if args.json:
        out = {
            "requests": args.requests,
            "seed": args.seed,
            "rows": [
                {
                    "setup": setup.label,
                    "workload": s.workload,
                    "static": _result_dict(s),
                    "lazy": _result_dict(z),
                }
                for setup, s, z in rows
            ],
        }
        out["provenance"] = provenance(
            args,
            setups=[
                {"label": s.label, "model": dataclasses.asdict(s.spec), "bytes": s.capacity_bytes}
                for s in PAPER_SETUPS
            ],
        )
        print(json.dumps(out, indent=2))
    else:
        print(format_capacity_table(rows))
    return 0
