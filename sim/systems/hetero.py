"""One decode step on a heterogeneous xPU+PIM system (NeuPIMs-style), serial or pipelined.

The timing contract (``docs/decode.md``, xPU+PIM): the FC layers (QKV, projection, FFN1,
FFN2) and the vector operations (norms, activation, residual adds) run on one xPU as GEMMs
over a sub-batch, weights read from the xPU's memory and costed by :mod:`models.xpu`;
attention (QK^T, softmax, SV) runs on the PIM modules, which hold only the KV cache, timed
exactly as the PIM-only step times it (:func:`sim.systems.step.attention_cycles`). Per
layer the Q/K/V vectors cross the PIM modules' host link to the modules and the attention
outputs cross it back.

All times are cycles of the PIM module clock; an xPU operation of ``t`` seconds takes
``ceil(t x freq)``. The batch is split into ``K`` sub-batches (requests dealt round-robin);
per sub-batch ``s`` the work is the chain

``X(0, s) -> in(0, s) -> A(0, s) -> out(0, s) -> X(1, s) -> ... -> A(L-1, s) -> out(L-1, s)
-> X(L, s)``

with ``X(0)`` = norm + QKV, ``X(l)`` = the rest of layer ``l-1`` (projection, residual, norm,
FFN1, activation, FFN2, residual) + norm + QKV of layer ``l``, ``X(L)`` the rest of the last
layer. Four resources (the xPU, the link to PIM, PIM, the link back) each run their tasks in
(layer, sub-batch) order, a task starting when its resource is free and its predecessor done
(:func:`pipeline_schedule`). ``K = 1`` is the serial mode: the step is exactly the sum of all
xPU, transfer and PIM cycles. ``K = "auto"`` times every candidate of
:func:`sub_batch_candidates` and keeps the fastest (the report lists every candidate's cycles).

**Several xPUs** (``xpus``, LoL-PIM 8.1's GPU+PIM): the FC layers run tensor parallel over
the xPUs as the GPU-only system splits them (:func:`~sim.systems.costs.layer_costs` of one of
``xpus`` devices, KV heads replicated beyond ``kv_heads``), and each layer pays the GPU
system's two ring all-reduces over the xPUs' device link (``allreduce``, on the xPU).

**Pipeline stages on PIM** (``pp``): the modules are ``pp`` stages of ``tp``; layer ``l``'s KV
cache and attention live on stage ``l x pp // L``, so the KV cache spreads over ``tp x pp``
modules while each layer's attention runs on ``tp`` of them, timed as with ``pp`` 1. The
stages share one PIM resource (and one link resource) in the schedule: exact in the serial
mode; with sub-batches it leaves out only the overlap of two stages at the ``pp - 1`` stage
boundaries of a step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import LayerOp, ModelSpec
from pimphony.compiler.plan import KvHeads, micro_batches
from pimphony.models.energy import ChannelActivity, EnergyParams
from pimphony.models.fileio import pyplot, write_figure
from pimphony.models.hub import link_cycles
from pimphony.models.xpu import VectorOp
from pimphony.models.xpu_config import XpuConfig
from pimphony.sim.provenance import inputs_digest
from pimphony.sim.systems import report as step_report
from pimphony.sim.systems.admission import admit
from pimphony.sim.systems.costs import hidden_allreduce_seconds, layer_costs, op_cycles
from pimphony.sim.systems.cycles import StepCycles, decode_errors
from pimphony.sim.systems.energy import energy_line, hetero_energy
from pimphony.sim.systems.kernels import KernelCache, KernelCaches
from pimphony.sim.systems.setup import DecodeError, DecodeSetup
from pimphony.sim.systems.step import attention_step

__all__ = [
    "DEVICES",
    "OP_STYLE",
    "HeteroCycles",
    "HeteroReport",
    "HeteroSetup",
    "SUB_BATCHES_AUTO",
    "SUB_BATCHES_EXHAUSTIVE",
    "Timeline",
    "format_hetero_report",
    "hetero_report_stem",
    "hetero_setup_digest",
    "pipeline_cycles",
    "pipeline_schedule",
    "plot_hetero_report",
    "run_hetero_decode",
    "sub_batch_candidates",
]

#: ``--sub-batches auto``: time the candidates of :func:`sub_batch_candidates`, keep the fastest.
SUB_BATCHES_AUTO = "auto"
#: ``auto`` tries every K from 1 to this many; above it only powers of two up to the batch (and
#: the batch itself). Each K costs one schedule of K sub-batches (about 1 s per candidate at a
#: batch of 256, so all 256 would take about 5 min); every K re-reads the weights on the xPU,
#: so K beyond a few is rarely the fastest.
SUB_BATCHES_EXHAUSTIVE = 8


def sub_batch_candidates(batch: int) -> list[int]:
    """The sub-batch counts ``--sub-batches auto`` times for a batch of ``batch`` requests:
    every K in ``1..min(batch, SUB_BATCHES_EXHAUSTIVE)``, then the powers of two below
    ``batch`` and ``batch`` itself (so a batch of at most 8 is searched exhaustively).

    >>> sub_batch_candidates(5)
    [1, 2, 3, 4, 5]
    >>> sub_batch_candidates(40)
    [1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 40]
    """
    if batch < 1:
        raise DecodeError(f"batch {batch}: must be at least 1 request")
    out = list(range(1, min(batch, SUB_BATCHES_EXHAUSTIVE) + 1))
    k = 2 * SUB_BATCHES_EXHAUSTIVE
    while k < batch:
        out.append(k)
        k *= 2
    if batch > out[-1]:
        out.append(batch)
    return out


#: The resources of the pipeline, in plot order.
DEVICES = ("xpu", "to_pim", "pim", "to_xpu")
_DEVICE_LABEL = {
    "xpu": "xPU",
    "to_pim": "link xPU->PIM",
    "pim": "PIM",
    "to_xpu": "link PIM->xPU",
}

#: Each op's label and colour (timeline plot).
OP_STYLE: dict[str, tuple[str, str]] = {
    "qkv": ("QKV GEMM", "#023047"),
    "proj": ("projection GEMM", "#219ebc"),
    "ffn1": ("FFN1 GEMM", "#8ecae6"),
    "ffn2": ("FFN2 GEMM", "#126782"),
    "vector": ("norm/act/residual", "#f4a261"),
    "allreduce": ("xPU all-reduce", "#6c757d"),
    "cmd_transfer": ("attention cmds to PIM (static memory)", "#9d0208"),
    "qkv_transfer": ("Q/K/V to PIM", "#9d4edd"),
    "qk": ("QK^T (PIM)", "#2a9d8f"),
    "softmax": ("softmax (PIM EPU)", "#e9c46a"),
    "sv": ("SV (PIM)", "#264653"),
    "out_transfer": ("attention out to xPU", "#e76f51"),
}


@dataclass(frozen=True)
class HeteroSetup:
    """Everything one xPU+PIM decode step depends on; validated on construction.

    Parameters
    ----------
    pim : DecodeSetup
        The PIM side: model, module preset, batch, ``tp x pp`` modules (``pp`` stages of
        ``tp``), the attention partition, scheduler and memory policy. The modules hold the
        KV cache only.
    xpu : XpuConfig
        The xPU preset; the ``xpus`` of them hold every weight in their memory.
    sub_batches : int or "auto"
        ``K``: 1 is the serial mode, more pipeline the xPU and PIM over sub-batches;
        ``"auto"`` times every K of :func:`sub_batch_candidates` and keeps the fastest.
    xpus : int
        xPUs running the FC layers tensor parallel (module docstring).
    """

    pim: DecodeSetup
    xpu: XpuConfig
    sub_batches: int | str = 1
    xpus: int = 1

    def __post_init__(self) -> None:
        k, b = self.sub_batches, len(self.pim.lengths)
        if k != SUB_BATCHES_AUTO and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise DecodeError(
                f"--sub-batches {k!r}: must be a positive integer (1: serial) up to the batch "
                f"of {b} request(s), or '{SUB_BATCHES_AUTO}'"
            )
        if k == SUB_BATCHES_AUTO:
            k = 1
        if k > b:
            raise DecodeError(
                f"--sub-batches {k} exceeds the batch of {b} request(s): every sub-batch needs "
                f"at least one request (allowed: 1 to {b}, or '{SUB_BATCHES_AUTO}')"
            )
        x = self.xpus
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise DecodeError(f"xpus = {x!r}: must be a positive integer")
        weights = self.pim.model.resident_weight_bytes
        if self.pim.check_capacity and weights > x * self.xpu.capacity_bytes:
            raise DecodeError(
                f"the weights do not fit the xPU: {self.pim.model.name} weights "
                f"{weights / 2**30:.1f} GiB > {x} x {self.xpu.name} memory "
                f"{self.xpu.memory.capacity_gib:g} GiB; use an xPU with more memory"
                + ("" if x == 1 else " or more xPUs")
            )

    @property
    def batches(self) -> list[tuple[int, ...]]:
        """The sub-batches' context lengths (requests dealt round-robin); a fixed K only."""
        if self.sub_batches == SUB_BATCHES_AUTO:
            raise DecodeError("--sub-batches auto: the sub-batches are chosen when the step runs")
        return micro_batches(self.pim.lengths, self.sub_batches)


@dataclass(frozen=True)
class Timeline:
    """A scheduled step: per device, its tasks as ``(start, cycles, op segments, label)``."""

    cycles: int
    tasks: dict[str, list[tuple[int, int, tuple[tuple[str, int], ...], str]]]

    def busy(self, device: str) -> int:
        """Cycles ``device`` works."""
        return sum(t[1] for t in self.tasks[device])


def pipeline_schedule(
    xpu: Sequence[Sequence[Sequence[tuple[str, int]]]],
    to_pim: Sequence[Sequence[Sequence[tuple[str, int]]]],
    pim: Sequence[Sequence[Sequence[tuple[str, int]]]],
    to_xpu: Sequence[Sequence[int]],
) -> Timeline:
    """Schedule the step's tasks on the four devices (module docstring).

    Parameters
    ----------
    xpu : per sub-batch, ``L + 1`` xPU tasks, each a list of ``(op, cycles)`` segments.
    to_pim : per sub-batch, ``L`` transfers to PIM as ``(op, cycles)`` segments (static
        memory's attention instructions, Q/K/V).
    to_xpu : per sub-batch, ``L`` transfer cycles (attention outputs).
    pim : per sub-batch, ``L`` attention tasks as ``(op, cycles)`` segments.

    Every device runs its tasks in (layer, sub-batch) order; a task starts at
    ``max(device free, predecessor of its sub-batch done)``.
    """
    k = len(xpu)
    layers = len(pim[0]) if k else 0
    free = dict.fromkeys(DEVICES, 0)
    done = [0] * k  # end of each sub-batch's last task
    tasks: dict[str, list] = {d: [] for d in DEVICES}

    def put(device: str, s: int, segments: tuple[tuple[str, int], ...], label: str) -> None:
        start = max(free[device], done[s])
        length = sum(c for _, c in segments)
        tasks[device].append((start, length, segments, label))
        free[device] = done[s] = start + length

    for layer in range(layers + 1):
        for s in range(k):
            put("xpu", s, tuple(xpu[s][layer]), f"X{layer}.{s}")
        if layer == layers:
            break
        for s in range(k):
            put("to_pim", s, tuple(to_pim[s][layer]), f"in{layer}.{s}")
            put("pim", s, tuple(pim[s][layer]), f"A{layer}.{s}")
            put("to_xpu", s, (("out_transfer", to_xpu[s][layer]),), f"out{layer}.{s}")
    return Timeline(max(free.values()), tasks)


def pipeline_cycles(
    xpu: Sequence[Sequence[int]],
    to_pim: Sequence[int],
    pim: Sequence[int],
    to_xpu: Sequence[int],
    layers: int,
) -> int:
    """:func:`pipeline_schedule`'s cycles from task lengths alone: per sub-batch its xPU
    tasks' cycles ``(first, middle, last)`` (``X(0)``, every ``X(l)`` between layers,
    ``X(L)``) and, the same every layer, its transfer to PIM, attention and transfer back."""
    k = len(xpu)
    if k == 1:  # serial: one chain, every task after the one before
        (first, middle, last), task = xpu[0], to_pim[0] + pim[0] + to_xpu[0]
        return first + (layers - 1) * middle + last + layers * task
    done = [0] * k
    x_free = in_free = pim_free = out_free = 0
    for layer in range(layers + 1):
        which = 0 if layer == 0 else 2 if layer == layers else 1
        for s in range(k):
            x_free = done[s] = max(x_free, done[s]) + xpu[s][which]
        if layer == layers:
            break
        for s in range(k):
            in_free = max(in_free, done[s]) + to_pim[s]
            pim_free = max(pim_free, in_free) + pim[s]
            out_free = done[s] = max(out_free, pim_free) + to_xpu[s]
    return max(x_free, in_free, pim_free, out_free)


def _xpu_ops(setup: HeteroSetup, batch: int) -> tuple[dict[str, int], dict[str, int]]:
    """Cycles of the pre-attention (norm + QKV) and post-attention ops of one layer for a
    sub-batch of ``batch`` requests (:func:`~sim.systems.costs.layer_costs` on one of the
    ``xpus``; with more than one, the two all-reduces of the GPU system after the projection
    and FFN2)."""
    spec, n, freq = setup.pim.model, setup.xpus, setup.pim.hw.module.freq_ghz
    c = op_cycles(layer_costs(spec, setup.xpu, batch, n, kv=KvHeads.REPLICATE), freq)
    norm = c[VectorOp.NORM]
    pre = {"vector": norm, "qkv": c[LayerOp.QKV]}
    post = {
        "proj": c[LayerOp.PROJ],
        "vector": 2 * c[VectorOp.RESIDUAL] + norm + c[spec.activation],
        "ffn1": c[LayerOp.FFN1],
        "ffn2": c[LayerOp.FFN2],
    }
    if n > 1:
        reduce = hidden_allreduce_seconds(spec, setup.xpu, batch, n)
        post["allreduce"] = 2 * math.ceil(reduce * freq * 1e9)
    return pre, post


def _transfer_bytes(spec: ModelSpec, batch: int) -> tuple[int, int]:
    """Bytes of one layer's Q/K/V vectors to PIM and attention outputs back, for a sub-batch
    of ``batch`` requests (all ``tp`` modules together)."""
    e = spec.element_bytes
    qkv = batch * (spec.heads + 2 * spec.kv_heads) * spec.head_dim * e
    return qkv, batch * spec.heads * spec.head_dim * e


class HeteroCycles:
    """The cycles of :func:`run_hetero_decode` for any batch, without its report, admission
    or energy (the serving fast path). A sub-batch's xPU ops and transfers are functions of
    its size alone, memoised on it; its attention is :meth:`StepCycles.attention
    <sim.systems.cycles.StepCycles.attention>` (blocks shared through ``caches``); the
    schedule is :func:`pipeline_cycles`. ``setup`` gives everything but the batch."""

    def __init__(self, setup: HeteroSetup, caches: KernelCaches | None = None):
        self.setup = setup
        self.steps = StepCycles(setup.pim, caches)
        self._sizes: dict[int, tuple[int, int, int, int]] = {}

    def cycles(self, lengths: Sequence[int]) -> int:
        """``run_hetero_decode`` of ``lengths``' cycles (with ``"auto"`` sub-batches, the
        fewest of every candidate K)."""
        return min(self.by_sub_batches(lengths).values())

    def by_sub_batches(
        self, lengths: Sequence[int], cache: KernelCache | None = None
    ) -> dict[int, int]:
        """The cycles of ``lengths`` with each sub-batch count K the setup tries (every
        candidate with ``"auto"``), by K; ``cache`` as ``run_hetero_decode``'s (default: the
        one :class:`StepCycles` keeps for the batch's longest context)."""
        lengths = tuple(lengths)
        self.steps.check(lengths)
        k = self.setup.sub_batches
        if k == SUB_BATCHES_AUTO:
            counts = sub_batch_candidates(len(lengths))
        else:
            if k > len(lengths):  # the setup's own error
                pim = dataclasses.replace(self.setup.pim, lengths=lengths)
                dataclasses.replace(self.setup, pim=pim)
            counts = [k]
        cache = cache or self.steps.kernel_cache(max(lengths))
        with decode_errors():
            return {k: self._cycles(cache, micro_batches(lengths, k)) for k in counts}

    def _cycles(self, cache: KernelCache, batches: list[tuple[int, ...]]) -> int:
        xpu, to_pim, pim, to_xpu = [], [], [], []
        for mb in batches:
            pre, post, qkv, out = self._size(len(mb))
            attention, transfer, _ = self.steps.attention(cache, mb)
            xpu.append((pre, post + pre, post))
            to_pim.append(transfer + qkv)
            pim.append(attention)
            to_xpu.append(out)
        return pipeline_cycles(xpu, to_pim, pim, to_xpu, self.setup.pim.model.layers)

    def _size(self, b: int) -> tuple[int, int, int, int]:
        """A sub-batch of ``b``: the xPU's cycles before and after attention, the Q/K/V
        transfer to a module and the outputs' back."""
        if b not in self._sizes:
            pre, post = _xpu_ops(self.setup, b)
            cfg, tp = self.setup.pim.hw, self.setup.pim.tp
            qkv, out = _transfer_bytes(self.setup.pim.model, b)
            self._sizes[b] = (
                sum(pre.values()),
                sum(post.values()),
                link_cycles(cfg, math.ceil(qkv / tp), "host"),
                link_cycles(cfg, math.ceil(out / tp), "host"),
            )
        return self._sizes[b]


@dataclass(frozen=True)
class HeteroReport:
    """What one xPU+PIM decode step measured; :meth:`to_dict` is the JSON report."""

    model: str
    xpu: str
    preset: str
    batch: int
    context_lengths: dict[str, Any]
    tp: int
    pp: int
    xpus: int
    sub_batches: int
    sub_batch_sizes: list[int]
    partition: str
    partition_layers: dict[str, int]
    sched: str
    memory: str
    freq_ghz: float
    cycles: int
    serial_cycles: int
    step_seconds: float
    tokens_per_s: float
    devices: dict[str, dict[str, Any]]
    ops: dict[str, int]
    link: dict[str, Any]
    memory_detail: dict[str, Any]
    energy: dict[str, Any] = field(default_factory=dict)
    sub_batch_search: dict[str, Any] = field(default_factory=dict)
    timeline: dict[str, list[list[Any]]] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The report as one JSON-ready dict, keys in field order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def run_hetero_decode(
    setup: HeteroSetup, cache: KernelCache | None = None, params: EnergyParams | None = None
) -> HeteroReport:
    """Time one xPU+PIM decode step of ``setup`` (``docs/decode.md``, xPU+PIM).

    With ``sub_batches="auto"`` every K of :func:`sub_batch_candidates` is timed and the report
    of the fewest cycles is returned (ties: the smaller K); its ``sub_batch_search`` lists the
    candidates' cycles. ``params``: the energy preset of the PIM side (default
    :data:`models.energy.DEFAULT_ENERGY`).
    """
    if setup.sub_batches != SUB_BATCHES_AUTO:
        return _run_fixed(setup, cache, params=params)
    pim = setup.pim
    cache = cache or _cache(pim)
    # Candidates are timed by the cycles-only step (equal to the full step's cycles, tested);
    # only the chosen K is run in full, with its energy.
    admit(pim, weights=False)  # the full step's refusals first
    cycles = HeteroCycles(setup).by_sub_batches(pim.lengths, cache)
    best = min(cycles, key=lambda k: (cycles[k], k))
    chosen = _run_fixed(dataclasses.replace(setup, sub_batches=best), cache, params=params)
    b, hz = len(pim.lengths), pim.hw.module.freq_ghz * 1e9
    search = {
        "rule": f"every K from 1 to {SUB_BATCHES_EXHAUSTIVE}, then powers of two and the batch",
        "chosen": best,
        "cycles": {str(k): c for k, c in cycles.items()},
        "tokens_per_s": {str(k): b / (c / hz) for k, c in cycles.items()},
    }
    return dataclasses.replace(chosen, sub_batch_search=search)


def _cache(pim: DecodeSetup) -> KernelCache:
    return KernelCache(
        pim.hw, pim.sched, True, dpa=pim.memory == "lazy", dpa_max_tokens=max(pim.lengths)
    )


def _run_fixed(
    setup: HeteroSetup,
    cache: KernelCache | None = None,
    energy: bool = True,
    params: EnergyParams | None = None,
) -> HeteroReport:
    """One step at the setup's fixed K (its energy block empty without ``energy``)."""
    pim_setup, spec = setup.pim, setup.pim.model
    cfg = pim_setup.hw
    memory = admit(pim_setup, weights=False)
    cache = cache or _cache(pim_setup)
    layers, tp = spec.layers, pim_setup.tp
    xpu_tasks, in_tasks, pim_tasks, out_tasks = [], [], [], []
    chosen: dict[str, int] = {}
    in_bytes = out_bytes = 0
    activity = ChannelActivity.zero()  # of the attention kernels, every layer and module
    for mb in setup.batches:
        pre, post = _xpu_ops(setup, len(mb))
        step = attention_step(pim_setup, mb, cache)
        partition, att, commands = step.partition, step.cycles, step.transfer
        activity += step.activity.scaled(layers * tp)
        chosen[partition] = chosen.get(partition, 0) + layers
        # Each of the tp modules receives its heads' Q/K/V and returns their outputs over its
        # own host link.
        qkv_b, out_b = _transfer_bytes(spec, len(mb))
        in_bytes += layers * qkv_b
        out_bytes += layers * out_b
        to_pim = link_cycles(cfg, math.ceil(qkv_b / tp), "host")
        to_xpu = link_cycles(cfg, math.ceil(out_b / tp), "host")
        post_pre = [(k, v) for k, v in post.items()] + [(k, v) for k, v in pre.items()]
        xpu_tasks.append([list(pre.items())] + [post_pre] * (layers - 1) + [list(post.items())])
        in_tasks.append([[("cmd_transfer", commands), ("qkv_transfer", to_pim)]] * layers)
        pim_tasks.append([[(k, att[k]) for k in ("qk", "softmax", "sv")]] * layers)
        out_tasks.append([to_xpu] * layers)
    tl = pipeline_schedule(xpu_tasks, in_tasks, pim_tasks, out_tasks)
    busy = {d: tl.busy(d) for d in DEVICES}
    serial = sum(busy.values())
    ops: dict[str, int] = dict.fromkeys(OP_STYLE, 0)
    for d in DEVICES:
        for _, _, segments, _ in tl.tasks[d]:
            for op, c in segments:
                ops[op] += c
    seconds = tl.cycles / (cfg.module.freq_ghz * 1e9)
    b = len(pim_setup.lengths)
    return HeteroReport(
        model=spec.name,
        xpu=setup.xpu.name,
        preset=cfg.name,
        batch=b,
        context_lengths=step_report.context_stats(pim_setup.lengths),
        tp=tp,
        pp=pim_setup.pp,
        xpus=setup.xpus,
        sub_batches=len(setup.batches),
        sub_batch_sizes=[len(mb) for mb in setup.batches],
        partition=pim_setup.partition,
        partition_layers=dict(sorted(chosen.items())),
        sched=pim_setup.sched,
        memory=pim_setup.memory,
        freq_ghz=cfg.module.freq_ghz,
        cycles=tl.cycles,
        serial_cycles=serial,
        step_seconds=seconds,
        tokens_per_s=b / seconds,
        devices={
            d: {
                "busy_cycles": busy[d],
                "idle_cycles": tl.cycles - busy[d],
                "utilization": busy[d] / tl.cycles if tl.cycles else 0.0,
            }
            for d in DEVICES
        },
        ops=ops,
        link={
            "which": f"the PIM preset's host link ({cfg.name} host_link_gbps), one per module",
            "gbps": cfg.module.host_link_gbps,
            "to_pim_bytes": in_bytes,
            "to_xpu_bytes": out_bytes,
        },
        memory_detail={
            **memory,
            "xpu_weight_bytes": spec.resident_weight_bytes,
            "xpu_capacity_bytes": setup.xpus * setup.xpu.capacity_bytes,
        },
        energy=hetero_energy(
            setup,
            activity,
            busy["pim"],
            tl.cycles,
            in_bytes + out_bytes,
            ops["cmd_transfer"],
            params,
        )
        if energy
        else {},
        timeline={
            d: [
                [start, length, label, [[op, c] for op, c in segs]]
                for start, length, segs, label in tl.tasks[d]
            ]
            for d in DEVICES
        },
    )


def hetero_setup_digest(setup: HeteroSetup) -> str:
    """SHA-256 of everything an xPU+PIM decode step depends on."""
    # one xPU's digest leaves ``xpus`` out, so that its reports keep their names
    more = {"xpus": setup.xpus} if setup.xpus > 1 else {}
    return inputs_digest(
        step_report.digest_inputs(setup.pim, xpu=setup.xpu, sub_batches=setup.sub_batches, **more)
    )


def hetero_report_stem(setup: HeteroSetup) -> str:
    """File stem naming an xPU+PIM step, ending in a short hash of every input."""
    p = setup.pim
    xpus = f"{setup.xpus}x" if setup.xpus > 1 else ""
    stages = f"{p.pp}x" if p.pp > 1 else ""
    return (
        f"{p.model.name}-B{len(p.lengths)}-T{max(p.lengths)}-{xpus}{setup.xpu.name}+{p.tp}x"
        f"{stages}{p.hw.name}-K{setup.sub_batches}-{hetero_setup_digest(setup)[:8]}"
    )


def format_hetero_report(report: HeteroReport) -> str:
    """The xPU+PIM report as text: headline numbers, devices and ops."""
    r = report.to_dict()
    f = r["freq_ghz"]
    mode = "serial" if r["sub_batches"] == 1 else f"{r['sub_batches']} sub-batches, pipelined"
    search = r["sub_batch_search"]
    if search:
        mode += " (chosen by --sub-batches auto)"
    sizes = "/".join(str(n) for n in r["sub_batch_sizes"])
    xpus = f"{r['xpus']} x " if r["xpus"] > 1 else ""
    stages = f" x {r['pp']} stages" if r["pp"] > 1 else ""
    lines = [
        f"{r['model']} decode step on {xpus}{r['xpu']} (FC) + {r['tp']}{stages} x {r['preset']} "
        "(attention, "
        f"{r['partition'].upper()}, {r['sched']}, {r['memory']}), {mode}",
        f"batch {r['batch']} (sub-batch sizes {sizes}), "
        + step_report.context_text(r["context_lengths"]),
        f"step {r['cycles']:,} cycles = {1e3 * r['step_seconds']:.3f} ms at {f:g} GHz   "
        f"tokens/s {r['tokens_per_s']:,.1f}   (no overlap: {r['serial_cycles']:,} cycles)",
    ]
    if search:
        tried = "  ".join(f"K={k}: {c:,}" for k, c in search["cycles"].items())
        lines.append(f"--sub-batches auto ({search['rule']}), cycles: {tried}")
    devices = (
        (
            _DEVICE_LABEL[d],
            f"{dev['busy_cycles']:,}",
            f"{dev['idle_cycles']:,}",
            f"{100 * dev['utilization']:.1f}%",
        )
        for d in DEVICES
        for dev in (r["devices"][d],)
    )
    columns = (("device", 16), ("busy cycles", 14), ("idle cycles", 14), ("util", 8))
    lines += ["", *step_report.table_lines(columns, devices), ""]
    lines += step_report.table_lines(
        (("op", 22), ("cycles", 14), ("ms", 10)),
        ((OP_STYLE[op][0], f"{c:,}", f"{c / (f * 1e6):.3f}") for op, c in r["ops"].items()),
    )
    lk = r["link"]
    lines.append(
        f"link: {lk['which']} at {lk['gbps']:g} GB/s; {lk['to_pim_bytes']:,} B to PIM, "
        f"{lk['to_xpu_bytes']:,} B back"
    )
    lines.append(energy_line(r["energy"]))
    return "\n".join(lines)


def plot_hetero_report(report: HeteroReport, path: Path) -> Path:
    """PNG: the step's timeline, one row per device, tasks coloured by op (microseconds)."""
    r = report.to_dict()
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 3.6))
    us = 1e-3 / r["freq_ghz"]  # microseconds per cycle
    seen: set[str] = set()
    rows = list(reversed(DEVICES))
    for y, d in enumerate(rows):
        for start, _length, _label, ops in r["timeline"][d]:
            t = start
            for op, c in ops:
                if c:
                    ax.broken_barh(
                        [(t * us, c * us)],
                        (y - 0.4, 0.8),
                        facecolors=OP_STYLE[op][1],
                        edgecolor="white",
                        linewidth=0.2,
                        label=None if op in seen else OP_STYLE[op][0],
                    )
                    seen.add(op)
                t += c
    ax.set_yticks(range(len(rows)), [_DEVICE_LABEL[d] for d in rows])
    ax.set_xlabel("time in the decode step (us)")
    ax.set_ylabel("device")
    handles, labels = ax.get_legend_handles_labels()
    order = [OP_STYLE[op][0] for op in OP_STYLE]
    pairs = sorted(zip(labels, handles, strict=True), key=lambda p: order.index(p[0]))
    ax.legend(
        [h for _, h in pairs],
        [lab for lab, _ in pairs],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
    )
    mode = "serial" if r["sub_batches"] == 1 else f"{r['sub_batches']} sub-batches"
    ax.set_title(
        f"{r['model']} B={r['batch']} T={r['context_lengths']['max']} on {r['xpu']} + "
        f"{r['tp']} x {r['preset']} ({mode}): {r['tokens_per_s']:,.0f} tokens/s",
        fontsize=9,
    )
    fig.tight_layout()
    return write_figure(fig, path)
