"""Admission of a batch into PIM memory: KV allocation, batch filling, DPA buffer sizes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pimphony.compiler.llm import ModelSpec
from pimphony.models.config import HardwareConfig
from pimphony.models.dpa.dispatcher import va2pa_entry_bytes
from pimphony.models.dpa.format import CONFIG_ENTRY_BYTES
from pimphony.models.memory import (
    MEMORY_POLICIES,
    ChunkGeometry,
    MemoryPolicy,
    OutOfMemory,
    make_allocator,
)
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.setup import DecodeError, DecodeSetup

__all__ = ["admit", "dpa_buffers", "fill_batch", "kv_allocator", "queue_batches", "weights_kv_pool"]


def kv_allocator(
    model: ModelSpec,
    hw: HardwareConfig,
    modules: int,
    memory: str,
    max_context: int,
    weights: bool = True,
) -> Any:
    """An empty KV allocator of ``memory`` policy over ``modules`` modules (weights placed
    unless ``weights`` is off: an xPU holds them), or ``None`` when the weights alone exceed
    the modules; the one :func:`admit`, :func:`fill_batch` and the serving loop use."""
    geom = ChunkGeometry.from_config(hw, modules)
    weight_bytes = model.resident_weight_bytes if weights else 0
    if weight_bytes > geom.total_bytes:
        return None
    # A static reservation is max_context; lazy growth is bounded by the model's window.
    limit = max_context if memory == MemoryPolicy.STATIC else model.context_window
    return make_allocator(
        memory,
        geom,
        model.kv_bytes_per_token,
        weight_bytes=weight_bytes,
        max_context=limit,
    )


def weights_kv_pool(
    model: ModelSpec, hw: HardwareConfig, modules: int, memory: str, max_context: int
) -> Any:
    """:func:`kv_allocator` of ``modules`` modules beside the weights; :class:`DecodeError`
    when the weights alone exceed them."""
    alloc = kv_allocator(model, hw, modules, memory, max_context)
    if alloc is None:
        raise DecodeError(f"{model.name}'s weights alone exceed {modules} module(s) of {hw.name}")
    return alloc


def _where(model: ModelSpec, hw: HardwareConfig, modules: int, weights: bool = True) -> str:
    total = ChunkGeometry.from_config(hw, modules).total_bytes
    held = (
        f"with {model.name} weights {model.resident_weight_bytes / 2**30:.1f} GiB"
        if weights
        else f"holding {model.name}'s KV cache only (weights on the xPU)"
    )
    return f"{modules} module(s) = {total / 2**30:g} GiB of {hw.name} {held}"


def admit(setup: DecodeSetup, weights: bool = True) -> dict[str, Any]:
    """Allocate the batch's KV caches (beside the weights unless ``weights`` is off); the
    memory part of the report."""
    spec, cfg = setup.model, setup.hw
    alloc = kv_allocator(spec, cfg, setup.modules, setup.memory, setup.reservation, weights)
    where = _where(spec, cfg, setup.modules, weights)
    if alloc is None:
        if setup.check_capacity:
            raise DecodeError(f"the weights alone do not fit: {where}; use more modules")
        return {"policy": setup.memory, "fits": False, "capacity_utilization": None}
    fits = True
    try:
        for r, t in enumerate(setup.lengths):
            alloc.admit(r, t)
    except (OutOfMemory, ValueError) as exc:
        if setup.check_capacity:
            raise DecodeError(
                f"{exc}. The batch of {len(setup.lengths)} request(s) does not fit {where} "
                f"under {setup.memory} allocation; use more modules, a smaller batch"
                + (", or lazy (DPA) memory" if setup.memory == MemoryPolicy.STATIC else "")
            ) from None
        fits = False
    st = alloc.stats()
    entries = sum(math.ceil(len(alloc.va2pa(r)) / setup.modules) for r in alloc.requests)
    return {
        "policy": setup.memory,
        "fits": fits,
        "total_bytes": st.total_bytes,
        "weight_bytes": st.weight_bytes,
        "kv_capacity_bytes": st.capacity_bytes,
        "kv_used_bytes": st.used_bytes,
        "kv_reserved_bytes": st.reserved_bytes,
        "capacity_utilization": st.capacity_utilization if fits else None,
        "total_utilization": st.total_utilization,
        "va2pa_entries_per_module": entries,
    }


def fill_batch(
    model: ModelSpec,
    hw: HardwareConfig,
    modules: int,
    memory: str,
    candidates: Sequence[int],
    max_context: int | None = None,
    all_may_fit: bool = False,
    weights: bool = True,
) -> tuple[int, ...]:
    """The longest prefix of ``candidates`` (context lengths, FCFS) that fits the memory
    (beside the weights unless ``weights`` is off).

    Unless ``all_may_fit``, every candidate fitting is an error: the batch would not be
    capacity-bound, so more candidates are needed.
    """
    if memory not in MEMORY_POLICIES:
        raise DecodeError(f"memory {memory!r} is unknown; allowed: {', '.join(MEMORY_POLICIES)}")
    alloc = kv_allocator(model, hw, modules, memory, max_context or model.context_window, weights)
    where = _where(model, hw, modules, weights)
    if alloc is None:
        raise DecodeError(f"not even one request fits: the weights alone exceed {where}")
    taken: list[int] = []
    for r, t in enumerate(candidates):
        try:
            if not alloc.admit(r, int(t), raise_on_oom=False):
                break
        except (OutOfMemory, ValueError) as exc:
            raise DecodeError(f"request {r} (context {t}): {exc}") from None
        taken.append(int(t))
    if not taken:
        raise DecodeError(
            f"not even one request fits: {where} ({memory} allocation); use more modules"
        )
    if len(taken) == len(candidates) and not all_may_fit:
        raise DecodeError(
            f"all {len(taken)} candidate requests fit: the batch is not capacity-bound; "
            "give more requests (or a fixed --batch)"
        )
    return tuple(taken)


def queue_batches(
    model: ModelSpec,
    hw: HardwareConfig,
    modules: int,
    memory: str,
    queue: Sequence[int],
    max_context: int | None = None,
) -> list[tuple[int, ...]]:
    """The whole ``queue`` (context lengths, FCFS) served as consecutive batches, each the
    longest prefix of what is left that fits the memory (the last one takes the rest).

    Two memory policies given the same queue serve the same requests, in the same order, in
    batches of different sizes; no request is left out.
    """
    batches: list[tuple[int, ...]] = []
    rest = [int(t) for t in queue]
    while rest:
        batch = fill_batch(model, hw, modules, memory, rest, max_context, all_may_fit=True)
        batches.append(batch)
        rest = rest[len(batch) :]
    return batches


def dpa_buffers(setup: DecodeSetup, cache: KernelCache, memory: dict[str, Any]) -> dict[str, Any]:
    """DPA program and VA2PA bytes per module, checked against the dispatcher's buffers."""
    if setup.memory != MemoryPolicy.LAZY:
        return {"enabled": False}
    cfg, spec = setup.hw, setup.model
    programs = [cache.program(k, spec.head_dim, spec.gqa_group) for k in ("qk", "sv")]
    program_bytes = sum(p.nbytes for p in programs if p is not None)
    map_bytes = memory.get("va2pa_entries_per_module", 0) * va2pa_entry_bytes(cfg.channel)
    config_bytes = len(setup.lengths) * CONFIG_ENTRY_BYTES
    for what, used, cap in (
        ("command buffer (DPA programs)", program_bytes, cfg.module.dpa_command_buffer_bytes),
        ("VA2PA table", map_bytes, cfg.module.dpa_address_map_bytes),
    ):
        if used > cap and setup.check_capacity:
            raise DecodeError(
                f"the DPA dispatcher's {what} needs {used:,} B per module but holds {cap:,} B "
                f"({cfg.name}); use more modules or a smaller batch"
            )
    return {
        "enabled": True,
        "program_bytes": program_bytes,
        "va2pa_bytes_per_module": map_bytes,
        "config_bytes": config_bytes,
        "refused": {f"{k[0]} d_h={k[1]} G={k[2]}": v for k, v in cache.dpa_refused.items()},
    }
