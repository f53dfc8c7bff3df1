"""One decode step of a batch on a multi-module PIM system (TP x PP), with its breakdown.

The timing contract is ``docs/decode.md``. In short, for one micro-batch on one TP module,
one layer takes, in sequence:

``qkv`` GEMV -> attention -> ``proj`` GEMV -> all-reduce -> ``ffn1`` -> EPU norms and
activation -> ``ffn2`` -> all-reduce (+ static-memory command transfer)

Each GEMV lasts as long as its slowest channel; attention is the task graph of
:mod:`models.module`; links, all-reduces and the pipeline period come from
:mod:`models.system`. The step's cycles (the partition each micro-batch uses, stage and link
cycles, the period, the micro-batch count) come from :class:`sim.systems.cycles.StepCycles`;
this module adds the report: the breakdown by op (which must sum to those cycles),
utilisation, MACs, HUB counts, admission, energy. Every layer of a stage and every TP module
of a stage are identical, so one layer of one module is broken down per micro-batch, and
identical channel kernels are simulated once (``memoize``); with ``memoize=False`` every
layer, module and kernel is simulated and ``tests/test_decode_step.py`` checks that the
report is the same.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pimphony.compiler.llm import GEMV_OPS, LayerOp
from pimphony.compiler.plan import LayerPlan, candidates, layer_plan, stage_layers
from pimphony.models.config import HardwareConfig
from pimphony.models.energy import ChannelActivity, Energy, EnergyParams, load_energy
from pimphony.models.hub import epu_cycles, hub_instruction_bytes, link_cycles
from pimphony.models.memory import MemoryPolicy
from pimphony.models.module import AttentionSchedule, AttentionTasks, makespan, schedule
from pimphony.models.system import allreduce_cycles
from pimphony.sim.systems.admission import admit, dpa_buffers
from pimphony.sim.systems.cycles import (
    StepCycles,
    StepTiming,
    decode_errors,
    epu_other_flops,
    gemv_op,
    hub_count,
    plan_tasks,
    tuned_module,
)
from pimphony.sim.systems.energy import energy_report, pim_phase_energy
from pimphony.sim.systems.kernels import KernelCache, KernelCaches, summed_activity
from pimphony.sim.systems.report import OP_KEYS, DecodeReport, context_stats
from pimphony.sim.systems.search import SplitSearch, best_split, valid_splits
from pimphony.sim.systems.setup import MICRO_BATCHES_AUTO, DecodeSetup, Mapping

__all__ = [
    "AttentionStep",
    "KernelCaches",
    "LayerTiming",
    "attention_cycles",
    "attention_schedule",
    "attention_step",
    "best_decode_split",
    "decode_errors",
    "epu_other_flops",
    "layer_timing",
    "plan_tasks",
    "run_decode",
]

_ATTN = (LayerOp.QK, LayerOp.SOFTMAX, LayerOp.SV)


def attention_schedule(
    plan: LayerPlan,
    cfg: HardwareConfig,
    run: Callable[[Any], Any],
    softmax: bool = True,
    reduction: bool = True,
) -> AttentionSchedule:
    """Event-driven makespan of one layer's attention on one module (:mod:`models.module`).

    ``run(job)`` gives kernel stats; ``softmax`` / ``reduction`` off give that EPU work zero
    duration (for marginal costs).
    """
    return schedule(plan_tasks(plan, cfg, run), softmax, reduction)


@dataclass(frozen=True)
class LayerTiming:
    """One layer of one micro-batch on one TP module."""

    cycles: dict[str, int]
    macs: dict[str, int]
    channel_busy: int
    commands: int
    hub_instructions: dict[str, int]
    attention: AttentionSchedule
    softmax_marginal: int
    reduction_marginal: int
    combine_marginal: int = 0
    partition: str = "tcp"
    score_tiles: int = 0  # attention units (pairs, or GPR score tiles of them)
    pairs: int = 0  # (request, KV head) pairs
    # Energy inputs (docs/energy.md): summed channel activity of the "fc" and "attention"
    # kernels of the layer on one module, and EPU FLOPs of "attention" and "other" work.
    activity: dict[str, ChannelActivity] = field(default_factory=dict)
    epu_flops: dict[str, float] = field(default_factory=dict)
    mapping: tuple[dict[str, Any], ...] = ()  # --mapping tuned: per op, fixed vs DCC's draft

    @property
    def total(self) -> int:
        """Cycles of the whole layer."""
        return sum(self.cycles.values())


def _once(cache: KernelCache) -> Callable[[Any], Any]:
    """``cache.run`` called at most once per job object of a layer plan (equal jobs on
    different channels are different objects, so with memoisation off each is still
    simulated); with memoisation on, ``cache.run`` itself (it returns a job's one result)."""
    if cache.memoize:
        return cache.run
    run = cache.run
    done: dict[int, tuple[Any, Any]] = {}

    def once(job: Any) -> Any:
        if id(job) not in done:
            done[id(job)] = (job, run(job))  # keep the job alive so its id stays unique
        return done[id(job)][1]

    return once


def _attention_split(
    plan: LayerPlan, cfg: HardwareConfig, run: Callable[[Any], Any]
) -> tuple[dict[str, int], AttentionTasks, AttentionSchedule]:
    """One layer's attention cycles split into ``qk``, ``sv`` and ``softmax``, with its task
    graph and schedule."""
    tasks = plan_tasks(plan, cfg, run)
    att = schedule(tasks, softmax=True, reduction=True)
    # Attention time split: the busiest channel's QK/SV share, the rest is exposed EPU time.
    peak = int(att.channel_busy.max()) if att.channel_busy.size else 0
    pim = att.qk_busy + att.sv_busy
    cycles = {"qk": round(peak * att.qk_busy / pim) if pim else 0}
    cycles["sv"] = peak - cycles["qk"]
    cycles["softmax"] = att.cycles - peak
    # DPA: the dispatcher decodes the first attention program's words before its first
    # command; later programs are decoded while the previous kernel runs.
    cycles["qk"] += max((run(j).dpa_startup for jobs in plan.qk for j in jobs[:1]), default=0)
    return cycles, tasks, att


@dataclass(frozen=True)
class AttentionStep:
    """One layer's attention (QK^T, softmax, SV) of a micro-batch on one TP module as the
    step times it: the ``partition`` used, its ``cycles`` (``qk``, ``sv``, ``softmax``), the
    ``transfer`` cycles of its instructions on the host link (static memory; 0 with lazy
    memory, DPA) and the summed channel ``activity`` of its kernels (what energy reads)."""

    partition: str
    cycles: dict[str, int]
    transfer: int
    activity: ChannelActivity


def attention_step(
    setup: DecodeSetup, lengths: tuple[int, ...], cache: KernelCache
) -> AttentionStep:
    """One layer's attention of micro-batch ``lengths`` on one TP module, exactly as
    :func:`layer_timing` times it, without the weight GEMVs. With ``--partition auto`` the
    candidate with the fewest attention cycles (ties: the first)."""
    best: tuple[LayerPlan, Callable[[Any], Any], dict[str, int], int] | None = None
    for partition in candidates(setup.partition):
        plan = layer_plan(setup.model, setup.hw, lengths, setup.tp, partition, setup.score_overflow)
        run = _once(cache)
        split = _attention_split(plan, setup.hw, run)[0]
        sent = 0
        if setup.memory == MemoryPolicy.STATIC:
            hub = hub_count(plan.qk, run) + hub_count(plan.sv, run)
            sent = link_cycles(setup.hw, hub * hub_instruction_bytes(setup.hw), "host")
        if best is None or sum(split.values()) + sent < sum(best[2].values()) + best[3]:
            best = (plan, run, split, sent)
    assert best is not None
    plan, run, split, sent = best
    activity = summed_activity(run(j) for jobs in (*plan.qk, *plan.sv) for j in jobs)
    return AttentionStep(plan.partition, split, sent, activity)


def attention_cycles(
    setup: DecodeSetup, lengths: tuple[int, ...], cache: KernelCache
) -> tuple[str, dict[str, int], int]:
    """:func:`attention_step` as ``(partition, {"qk", "sv", "softmax"} cycles,
    command-transfer cycles)``."""
    step = attention_step(setup, lengths, cache)
    return step.partition, step.cycles, step.transfer


def layer_timing(setup: DecodeSetup, lengths: tuple[int, ...], cache: KernelCache) -> LayerTiming:
    """One layer of micro-batch ``lengths`` on one TP module; with ``--partition auto`` the
    fastest of the candidate partitions (:func:`compiler.plan.candidates`; ties: the first)."""
    timings = [_layer_timing(setup, lengths, cache, p) for p in candidates(setup.partition)]
    return min(timings, key=lambda lt: lt.total)


def _layer_timing(
    setup: DecodeSetup, lengths: tuple[int, ...], cache: KernelCache, partition: str
) -> LayerTiming:
    spec, cfg = setup.model, setup.hw
    plan = layer_plan(spec, cfg, lengths, setup.tp, partition, setup.score_overflow)
    run = _once(cache)
    tuning = tuned_module().tune_gemvs(cfg, plan, run) if setup.mapping == Mapping.TUNED else None
    gemv = tuning.jobs if tuning else plan.gemv
    cycles: dict[str, int] = dict.fromkeys(OP_KEYS, 0)
    macs: dict[str, int] = dict.fromkeys(OP_KEYS, 0)
    hub: dict[str, int] = {}
    busy = commands = 0
    for op in GEMV_OPS:
        c, m, b, n, h = gemv_op(gemv[op], run)
        cycles[op], macs[op], hub[op] = c + (tuning.reduce_cycles[op] if tuning else 0), m, h
        busy += b
        commands += n
    activity = {
        "fc": summed_activity(run(j) for op in GEMV_OPS for jobs in gemv[op] for j in jobs),
        "attention": summed_activity(run(j) for jobs in (*plan.qk, *plan.sv) for j in jobs),
    }
    split, tasks, att = _attention_split(plan, cfg, run)
    cycles.update(split)
    for kind, jobs in (("qk", plan.qk), ("sv", plan.sv)):
        for channel_jobs in jobs:
            for j in channel_jobs:
                st = run(j)
                macs[kind] += st.macs
                commands += st.commands
        hub[kind] = hub_count(jobs, run)
    busy += int(att.channel_busy.sum())
    b = len(lengths)
    per_request = epu_other_flops(spec, setup.tp)
    cycles["epu_other"] = epu_cycles(cfg, b * per_request)
    att_epu = att.softmax_busy + att.reduction_busy + att.combine_busy
    epu_flops = {
        "attention": float(att_epu * cfg.module.epu_flops_per_cycle),
        "other": float(b * per_request + (tuning.reduce_flops if tuning else 0)),
    }
    vector = b * spec.hidden * spec.element_bytes
    cycles["allreduce"] = 2 * allreduce_cycles(cfg, vector, setup.tp)
    if setup.memory == MemoryPolicy.STATIC:
        sent = (hub["qk"] + hub["sv"]) * hub_instruction_bytes(cfg)
        cycles["cmd_transfer"] = link_cycles(cfg, sent, "host")
    zero = [0] * len(tasks.sv_parts)
    no_red = makespan(tasks, tasks.softmax_cost, zero)
    no_sm = makespan(tasks, zero, tasks.reduction_cost)
    no_comb = makespan(tasks, tasks.softmax_cost, tasks.reduction_cost, zero)
    return LayerTiming(
        cycles=cycles,
        macs=macs,
        channel_busy=busy,
        commands=commands,
        hub_instructions=hub,
        attention=att,
        softmax_marginal=att.cycles - no_sm,
        reduction_marginal=att.cycles - no_red,
        combine_marginal=att.cycles - no_comb,
        partition=plan.partition,
        score_tiles=len(plan.units),
        pairs=len({(u.request, u.kv_head) for u in plan.units}),
        activity=activity,
        epu_flops=epu_flops,
        mapping=tuning.rows if tuning else (),
    )


def _report(
    setup: DecodeSetup,
    timing: StepTiming,
    cache: KernelCache,
    memoize: bool,
    progress: Callable[[str], None] | None,
    energy: EnergyParams | None,
    memory: dict[str, Any],
    simulated_before: int,
    started: float,
) -> DecodeReport:
    """The report of one decode step whose cycles are ``timing`` (:class:`StepCycles`): each
    micro-batch's layers broken down by op (:func:`_layer_timing` in the partition the
    timing chose), summed over stages and modules; a breakdown that does not add up to the
    timing's stage cycles is an error."""
    tuned = setup.mapping == Mapping.TUNED
    cfg, spec = setup.hw, setup.model
    say = progress or (lambda _m: None)
    batches = timing.batches
    layers = stage_layers(spec.layers, setup.pp)
    n_ch = cfg.module.channels
    layer_memo: dict[tuple[int, ...], LayerTiming] = {}

    def layer_of(i: int) -> LayerTiming:
        mb = batches[i]
        if memoize and mb in layer_memo:
            return layer_memo[mb]
        lt = _layer_timing(setup, mb, cache, timing.partitions[i])
        if memoize:
            layer_memo[mb] = lt
        return lt

    vector_bytes = [len(mb) * spec.hidden * spec.element_bytes for mb in batches]
    op_cycles = dict.fromkeys(OP_KEYS, 0)
    op_macs = dict.fromkeys(OP_KEYS, 0)
    hub_total = dict.fromkeys((*GEMV_OPS, "qk", "sv"), 0)
    busy = commands = 0
    sm_marg = red_marg = attn_cycles = red_busy = comb_marg = comb_busy = 0
    chosen: dict[str, int] = {}  # layers (of the slowest module) per partition used
    mapping_rows: dict[tuple[str, int], dict[str, Any]] = {}  # --mapping tuned, per op, batch
    units = pairs = 0
    phase_activity = {"fc": ChannelActivity.zero(), "attention": ChannelActivity.zero()}
    phase_epu = {"attention": 0.0, "other": 0.0}
    link_bytes = {"host": 0, "internode": 0}
    for i, mb in enumerate(batches):
        say(f"micro-batch {i + 1}/{len(batches)}: {len(mb)} request(s)")
        for s, n_layers in enumerate(layers):
            # Every layer of a stage and every TP module of it is identical: with memoisation
            # one layer of one module stands for all; without, each is simulated on its own.
            if memoize:
                modules, weight = [[(layer_of(i), n_layers)]], setup.tp
            else:
                modules = [[(layer_of(i), 1) for _ in range(n_layers)] for _ in range(setup.tp)]
                weight = 1
            totals = [sum(lt.total * n for lt, n in mod) for mod in modules]
            if max(totals) != timing.stage[i, s]:
                raise AssertionError(
                    f"micro-batch {i}, stage {s}: the breakdown sums to {max(totals)} cycles, "
                    f"the step's cycle path to {timing.stage[i, s]}"
                )
            slowest = modules[int(np.argmax(totals))]
            for lt, n in slowest:
                for k in OP_KEYS:
                    op_cycles[k] += n * lt.cycles[k]
                sm_marg += n * lt.softmax_marginal
                red_marg += n * lt.reduction_marginal
                attn_cycles += n * lt.attention.cycles
                red_busy += n * lt.attention.reduction_busy
                comb_marg += n * lt.combine_marginal
                comb_busy += n * lt.attention.combine_busy
                chosen[lt.partition] = chosen.get(lt.partition, 0) + n
                mapping_rows.update({(r["op"], r["batch"]): r for r in lt.mapping})
                units += n * lt.score_tiles
                pairs += n * lt.pairs
            for mod in modules:
                for lt, n in mod:
                    for k in OP_KEYS:
                        op_macs[k] += weight * n * lt.macs[k]
                    for k in hub_total:
                        hub_total[k] += weight * n * lt.hub_instructions[k]
                    busy += weight * n * lt.channel_busy
                    commands += weight * n * lt.commands
                    for k, a in lt.activity.items():
                        phase_activity[k] += a.scaled(weight * n)
                    for k, f in lt.epu_flops.items():
                        phase_epu[k] += weight * n * f
            _add_link_bytes(link_bytes, setup, vector_bytes[i], s, n_layers)
    stage_time, link_time, pipe = timing.stage, timing.link, timing.pipeline
    busiest_stage, round_trip, period = pipe.busiest_stage, pipe.round_trip, pipe.cycles
    seconds = period / (cfg.module.freq_ghz * 1e9)
    total_channels = n_ch * setup.modules
    all_macs = sum(op_macs.values())
    stage_busy = int(stage_time.sum())
    attn = sum(op_cycles[k] for k in _ATTN)
    fc = sum(op_cycles[k] for k in GEMV_OPS)
    ops = {
        k: {
            "cycles": int(op_cycles[k]),
            "share": op_cycles[k] / stage_busy if stage_busy else 0.0,
            "mac_utilization": (
                op_macs[k] * cfg.timing.tCCD / (op_cycles[k] * n_ch * setup.tp)
                if op_cycles[k] and op_macs[k]
                else 0.0
            ),
        }
        for k in OP_KEYS
    }
    hub_bytes = hub_instruction_bytes(cfg)
    if setup.memory == MemoryPolicy.STATIC:
        link_bytes["host"] += int(hub_total["qk"] + hub_total["sv"]) * hub_bytes
    params = energy or load_energy()
    energy_block = _step_energy(
        setup, params, period, op_cycles, phase_activity, phase_epu, link_bytes
    )
    return DecodeReport(
        model=spec.name,
        preset=cfg.name,
        batch=len(setup.lengths),
        context_lengths=context_stats(setup.lengths),
        modules=setup.modules,
        tp=setup.tp,
        pp=setup.pp,
        micro_batches=len(batches),
        partition=setup.partition,
        partition_layers=dict(sorted(chosen.items())),
        sched=setup.sched,
        memory=setup.memory,
        cycles=period,
        step_seconds=seconds,
        tokens_per_s=len(setup.lengths) / seconds,
        mac_utilization=all_macs * cfg.timing.tCCD / (period * total_channels),
        channel_utilization=busy / (period * total_channels),
        capacity_utilization=memory["capacity_utilization"],
        attention_share=attn / stage_busy if stage_busy else 0.0,
        fc_share=fc / stage_busy if stage_busy else 0.0,
        other_share=(stage_busy - attn - fc) / stage_busy if stage_busy else 0.0,
        ops=ops,
        epu={
            "softmax_marginal_cycles": int(sm_marg),
            "sv_reduction_busy_cycles": int(red_busy),
            "sv_reduction_marginal_cycles": int(red_marg),
            "sv_reduction_share_of_attention": red_marg / attn_cycles if attn_cycles else 0.0,
            "score_tiles_per_pair": units / pairs if pairs else 0.0,
            "tile_combine_busy_cycles": int(comb_busy),
            "tile_combine_marginal_cycles": int(comb_marg),
        },
        pipeline={
            "stage_layers": layers,
            "stage_busy_cycles": [int(x) for x in stage_time.sum(axis=0)],
            "busiest_stage_cycles": busiest_stage,
            "round_trip_cycles": round_trip,
            "link_cycles": int(link_time.sum()),
            "bubble_fraction": 1 - stage_busy / (setup.pp * period) if period else 0.0,
        },
        hub={
            "instructions": {k: int(v) for k, v in hub_total.items()},
            "instruction_bytes": hub_bytes,
            "total_bytes": int(sum(hub_total.values()) * hub_bytes),
        },
        memory_detail=memory,
        dpa=dpa_buffers(setup, cache, memory),
        simulation={
            "channel_commands": int(commands),
            "kernels_simulated": cache.simulated - simulated_before,
            "memoize": memoize,
            "wall_seconds": time.perf_counter() - started,
        },
        energy=energy_block,
        mapping=(
            tuned_module().mapping_report(setup, list(mapping_rows.values())) if tuned else {}
        ),
    )


def _add_link_bytes(
    link_bytes: dict[str, int], setup: DecodeSetup, vector: int, stage: int, n_layers: int
) -> None:
    """Bytes one micro-batch moves over the links in ``stage`` (as :mod:`models.system` times
    them): per layer two all-reduces (each of ``tp`` modules sends ``vector`` up the host link
    and gets the sum back, and over the inter-node link past one node), then the stage hop."""
    cfg, tp = setup.hw, setup.tp
    if tp > 1:
        link_bytes["host"] += n_layers * 2 * tp * 2 * vector
        if tp > cfg.module.modules_per_node:
            link_bytes["internode"] += n_layers * 2 * tp * 2 * vector
    per_node = cfg.module.modules_per_node
    crosses = stage + 1 < setup.pp and (stage * tp) // per_node != ((stage + 1) * tp) // per_node
    link_bytes["host"] += 2 * vector
    if crosses:
        link_bytes["internode"] += vector


def _step_energy(
    setup: DecodeSetup,
    params: EnergyParams,
    period: int,
    op_cycles: dict[str, int],
    activity: dict[str, ChannelActivity],
    epu_flops: dict[str, float],
    link_bytes: dict[str, int],
) -> dict[str, Any]:
    """The report's ``energy`` block (``sim.systems.energy``): FC, attention and the rest
    of the step period on every channel of every module, EPU work and link traffic."""
    cfg = setup.hw
    chips = params.chips(cfg)
    n_ch = chips * params.channels_per_chip  # = cfg.module.channels, chips stated explicitly
    per_module = setup.tp * n_ch  # channels of one stage
    fc_cc = per_module * sum(op_cycles[k] for k in GEMV_OPS)
    att_cc = per_module * sum(op_cycles[k] for k in _ATTN)
    all_cc = setup.modules * n_ch * period
    phases = {
        "fc": pim_phase_energy(cfg, params, activity["fc"], fc_cc),
        "attention": pim_phase_energy(
            cfg, params, activity["attention"], att_cc, epu_flops["attention"]
        ),
        "other": pim_phase_energy(
            cfg, params, ChannelActivity.zero(), max(all_cc - fc_cc - att_cc, 0), epu_flops["other"]
        ),
    }
    links = params.link_pj(link_bytes["host"], "host") + params.link_pj(
        link_bytes["internode"], "internode"
    )
    phases["other"] = phases["other"] + Energy(links=links)
    return energy_report(
        phases,
        len(setup.lengths),
        params.name,
        chips_per_module=chips,
        link_bytes=dict(link_bytes),
    )


def run_decode(
    setup: DecodeSetup,
    memoize: bool = True,
    progress: Callable[[str], None] | None = None,
    caches: KernelCaches | None = None,
    energy: EnergyParams | None = None,
) -> DecodeReport:
    """Simulate one decode step of ``setup``; a kernel that cannot be mapped is a
    :class:`DecodeError` that says which choice would help.

    The cycles are :class:`StepCycles`'s; the report adds their breakdown. With
    ``micro_batches="auto"`` every count of :func:`micro_batch_candidates` is timed and the
    fastest reported (ties: fewer micro-batches); its ``pipeline`` holds
    ``micro_batch_sweep``, the tokens/s of each count tried. ``caches`` shares simulated
    kernels with other steps (exact: the same kernel always takes the same cycles).
    ``energy``: the energy preset of the report's ``energy`` block (default
    :data:`models.energy.DEFAULT_ENERGY`).
    """
    started = time.perf_counter()
    memory = admit(setup)
    steps = StepCycles(setup, caches or KernelCaches(memoize))
    cache = steps.kernel_cache(max(setup.lengths))
    simulated_before = cache.simulated
    timings = steps.timings(setup.lengths)
    best = min(timings, key=lambda t: (t.cycles, len(t.batches)))
    if progress and len(timings) > 1:
        progress(f"{len(best.batches)} micro-batch(es), the fastest of {len(timings)} counts:")
    with decode_errors():
        report = _report(
            setup, best, cache, memoize, progress, energy, memory, simulated_before, started
        )
    if setup.micro_batches != MICRO_BATCHES_AUTO:
        return report
    sweep = [
        {
            "micro_batches": len(t.batches),
            "tokens_per_s": len(setup.lengths) / (t.cycles / (setup.hw.module.freq_ghz * 1e9)),
        }
        for t in timings
    ]
    return dataclasses.replace(report, pipeline={**report.pipeline, "micro_batch_sweep": sweep})


#: :func:`best_decode_split`'s searches in this process, by their inputs.
_SPLIT_SEARCHES: dict[tuple[Any, ...], SplitSearch[DecodeReport]] = {}


def best_decode_split(
    setup: DecodeSetup, modules: int, caches: KernelCaches
) -> SplitSearch[DecodeReport]:
    """The best (TP, PP) split of ``modules`` for ``setup``'s step (its ``tp`` and ``pp``
    replaced by each of :func:`~sim.systems.search.valid_splits`), by tokens/s. Searched once
    per process for the same setup and module count: a PIM-only step reads no xPU or GPU
    preset, so an experiment run again under the other GPU cost model (the fidelity table's
    GPU rows) reuses it."""
    key = (setup, modules)
    if key not in _SPLIT_SEARCHES:

        def step(tp: int, pp: int) -> DecodeReport:
            return run_decode(dataclasses.replace(setup, tp=tp, pp=pp), caches=caches)

        _SPLIT_SEARCHES[key] = best_split(step, valid_splits(setup.model, modules))
    return _SPLIT_SEARCHES[key]
