"""LibraPIM end to end (seed 002): four NPU+PIM systems' decode steps, with DBO.

Every system runs on the same device (``librapim-hbm2`` PIM, ``librapim-npu`` xPU by default)
and is timed with the xPU+PIM step's parts (:mod:`sim.systems.hetero`: the xPU cost
model, the PIM channel TLM through :func:`sim.systems.step.attention_cycles` and
:func:`~sim.systems.step.layer_timing`, the four-resource
:func:`~sim.systems.hetero.pipeline_schedule`). The :data:`LIBRAPIM_SPECS` table, keyed by
:class:`~sim.systems.base.SystemKind` (LibraPIM's rows of the one system registry,
:mod:`sim.systems.librapim_system`), holds what each system does (``docs/librapim.md``
quotes the paper):

* **npu+aim**: serial, one batch group, FC on the xPU, attention on PIM.
* **attacc**: serial flow, head-level pipelining of QKV generation / attention, FFN
  co-processing (part of the batch's FFN on PIM, concurrently).
* **neupims**: batch pipelining over ``groups`` groups (dual row buffers: xPU reads and PIM
  MACs concurrent), no offloading.
* **librapim**: batch pipelining plus Algorithm 1's split per group
  (:func:`models.dbo.dynamic_batch_offload`), PIM slowed by the bank-slice TLM's factor at
  the xPU's read load (DEX; ``slicing=False``: exclusive AiM banks).
* **librapim-best**: an analysis row, not a paper system: LibraPIM with the FFN offload that
  simulates fastest (how much any offloading rule could gain on this hardware).
* **aim-pipelined**: batch pipelining on plain AiM banks (exclusive access, LibraPIM 3.2 /
  Fig. 9's exclusive case), no offloading.
* **librapim-no-dbo**: LibraPIM without DBO (batch pipelining + DEX; Fig. 21's "w/o DBO").
* **librapim-measured**: LibraPIM with Algorithm 1 fed the attainable throughputs measured
  on the models at the group's load (:func:`measured_throughput`) instead of peak FLOP/s.

Each system's step also reports the devices' utilisation (:class:`LibrapimStep`): the
xPU's achieved matrix FLOP/s over its peak, PIM's MAC-issue utilisation (MAC commands the
channel TLM issued x ``tCCD`` over channels x step cycles) and PIM's useful FLOP/s over its
peak.

The system is ``tp`` such devices sharing every layer Megatron-style (each device: ``1/tp``
of the heads and of the FC matrices), as the NeuPIMs simulator LibraPIM builds on runs
GPT3-175B (``n_tp = 8``); the step of one device is reported.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
from pimphony.compiler.kernels import compile_kernel, gemv_max_batch
from pimphony.compiler.llm import LayerOp, ModelSpec
from pimphony.compiler.plan import (
    DecodeMappingError,
    GemvJob,
    PartitionError,
    batch_jobs,
    kv_heads_per_device,
    layer_plan,
    micro_batches,
    split_evenly,
    tp_shapes,
)
from pimphony.models.bank_slice import (
    HOST_READ_DTYPE,
    SliceConfig,
    empty_host_reads,
    run_bank_slice,
)
from pimphony.models.config import HardwareConfig
from pimphony.models.dbo import (
    DboDecision,
    DboModel,
    DboThroughput,
    OffloadReading,
    dynamic_batch_offload,
)
from pimphony.models.hub import link_cycles
from pimphony.models.xpu import VectorOp
from pimphony.models.xpu_config import XpuConfig
from pimphony.sim.systems.base import SystemKind
from pimphony.sim.systems.costs import ATTENTION, layer_costs, op_cycles
from pimphony.sim.systems.hetero import pipeline_schedule
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.setup import DecodeError, DecodeSetup
from pimphony.sim.systems.step import attention_cycles, layer_timing

__all__ = [
    "ATTENTION_PARTITIONS",
    "DEFAULT_GROUPS",
    "DEFAULT_TP",
    "LIBRAPIM_PRESET",
    "LIBRAPIM_XPU",
    "LIBRAPIM_SPECS",
    "OFFLOAD_READINGS",
    "BankAccess",
    "LibrapimStep",
    "librapim_cache",
    "Offload",
    "OffloadReading",
    "OffloadReadingSpec",
    "LibrapimSpec",
    "add_offload_argument",
    "dbo_model",
    "dbo_throughput",
    "check_step",
    "format_inputs",
    "format_librapim",
    "step_inputs",
    "measured_throughput",
    "offload_jobs",
    "offload_reading",
    "requests_per_pass",
    "run_librapim",
    "run_librapim_readings",
    "weights_per_device",
]

#: Attention partitions tried per batch group; the fastest the compiler maps is used. LibraPIM
#: 5.3 gathers "each K, V matrix ... in allocated bank" (whole (request, head) pairs: HFP);
#: TCP and ITPP are kept so that shapes HFP cannot tile still map.
ATTENTION_PARTITIONS = ("hfp", "tcp", "itpp")

#: Devices sharing each layer: the NeuPIMs simulator's GPT3-175B config (``n_tp: 8``,
#: casys-kaist/NeuPIMs ``configs/model_configs/gpt3-175B.json``); LibraPIM does not state it.
DEFAULT_TP = 8

#: LibraPIM's PIM (Table 2's HBM2-PIM) and NPU presets, the default of every LibraPIM command
#: and system row.
LIBRAPIM_PRESET = "librapim-hbm2"
LIBRAPIM_XPU = "librapim-npu"

#: Batch groups of the pipelined systems (``pimphony librapim --groups``; at most the batch).
DEFAULT_GROUPS = 2


class BankAccess(StrEnum):
    """How PIM's MACs and the xPU's weight reads share a bank when the two overlap."""

    EXCLUSIVE = "exclusive"  # AiM: "either ... PIM or serves read requests" (3.2)
    SLICED = "sliced"  # DEX: bank slicing (4.2), the bank-slice TLM's factor
    DUAL = "dual-row-buffer"  # NeuPIMs: reads and PIM concurrent, no conflict


#: The bank-slice TLM mode that slows a pipelined system's PIM (``None``: no conflict).
_SLICE_MODE: dict[BankAccess, bool | None] = {
    BankAccess.EXCLUSIVE: False,
    BankAccess.SLICED: True,
    BankAccess.DUAL: None,
}


class Offload(StrEnum):
    """How a pipelined system moves work between the devices."""

    NONE = "none"
    ALGORITHM_1 = "algorithm-1"  # DBO with the presets' peak throughputs
    MEASURED = "algorithm-1-measured"  # DBO with attainable throughputs (measured_throughput)
    BEST = "best"  # FFN offload chosen by simulation (analysis)


@dataclass(frozen=True)
class LibrapimSpec:
    """What one system does: serial or batch-pipelined, head-level pipelining, FFN
    co-processing, its offload rule, and how PIM and the xPU's weight reads share the banks
    (in a serial flow the two never overlap, so ``banks`` then costs nothing)."""

    serial: bool
    head_pipelining: bool
    ffn_coprocessing: bool
    offload: Offload
    banks: BankAccess
    summary: str

    @property
    def dbo(self) -> bool:
        """Whether Algorithm 1 chooses the split (peak or measured throughputs)."""
        return self.offload in (Offload.ALGORITHM_1, Offload.MEASURED)


_X, _S, _D = BankAccess.EXCLUSIVE, BankAccess.SLICED, BankAccess.DUAL

#: The registry (``docs/librapim.md`` quotes the paper for every row).
LIBRAPIM_SPECS: dict[SystemKind, LibrapimSpec] = {
    SystemKind.NPU_AIM: LibrapimSpec(
        True, False, False, Offload.NONE, _X, "serial, exclusive bank access"
    ),
    SystemKind.ATTACC: LibrapimSpec(
        True, True, True, Offload.NONE, _X, "serial flow, head-level pipelining, FFN co-processing"
    ),
    SystemKind.NEUPIMS: LibrapimSpec(
        False, False, False, Offload.NONE, _D, "batch pipelining, dual row buffers"
    ),
    SystemKind.LIBRAPIM: LibrapimSpec(
        False, False, False, Offload.ALGORITHM_1, _S, "batch pipelining + DEX + DBO"
    ),
    SystemKind.LIBRAPIM_BEST: LibrapimSpec(
        False, False, False, Offload.BEST, _S, "LibraPIM, FFN offload chosen by simulation"
    ),
    SystemKind.AIM_PIPELINED: LibrapimSpec(
        False, False, False, Offload.NONE, _X, "batch pipelining on exclusive AiM banks"
    ),
    SystemKind.LIBRAPIM_NO_DBO: LibrapimSpec(
        False, False, False, Offload.NONE, _S, "batch pipelining + DEX, no DBO"
    ),
    SystemKind.LIBRAPIM_MEASURED: LibrapimSpec(
        False,
        False,
        False,
        Offload.MEASURED,
        _S,
        "LibraPIM, Algorithm 1 fed measured throughputs",
    ),
}


def dbo_model(spec: ModelSpec) -> DboModel:
    """Algorithm 1's model parameters of ``spec``, as FLOPs per request (``models/dbo.py``).

    ``K_QKV = 2 qkv_dim / d_model`` (6 without GQA), ``K_Proj = 2 heads d_h / d_model``,
    ``K_FFN = 2 x`` FFN matrices (4 for GELU/ReLU, 6 for SwiGLU) and
    ``K_MHA = 4 heads d_h / d_model`` (QK^T and SV).
    """
    d, hd = spec.hidden, spec.heads * spec.head_dim
    return DboModel(
        d_model=d,
        d_ff=spec.intermediate,
        k_qkv=2 * spec.qkv_dim / d,
        k_proj=2 * hd / d,
        k_ffn=2.0 * (3 if spec.ffn == "swiglu" else 2),
        k_mha=4 * hd / d,
        context_window=spec.context_window,
    )


def dbo_throughput(
    xpu: XpuConfig, hw: HardwareConfig, element_bytes: int = 2, tp: int = 1
) -> DboThroughput:
    """The throughputs Algorithm 1 predicts with, from the presets, for ``tp`` devices.

    ``FLOPS_xPU``: the xPU's matrix peak x its compute efficiency cap. ``FLOPS_xPU_GEMV``:
    attention reads each K/V element once per multiply-accumulate, so 2 FLOPs per
    ``element_bytes`` at the capped bandwidth. ``FLOPS_PIM``: every bank's MAC unit
    (``mac_elements`` multiply-accumulates) once per ``tCCD`` on every channel. All three
    scale with ``tp`` (the devices share every layer); ``Channel_PIM`` is one device's.
    """
    ch, t = hw.channel, hw.timing
    pim = hw.module.channels * ch.banks * ch.mac_elements * 2 * hw.module.freq_ghz * 1e9
    return DboThroughput(
        xpu_flops=tp * xpu.peak_flops() * xpu.compute.efficiency,
        xpu_gemv_flops=tp * xpu.bandwidth * xpu.memory.efficiency * 2 / element_bytes,
        pim_flops=tp * pim / t.tCCD,
        pim_channels=hw.module.channels,
    )


#: What each channel runs, per FFN op, for ``m`` offloaded requests' FFN of one layer.
ChannelJobs = dict[LayerOp, list[list[GemvJob]]]


def _per_bank_jobs(spec: ModelSpec, hw: HardwareConfig, tp: int, m: int) -> ChannelJobs:
    """Fig. 14 mode: every channel holds the ``m`` inputs (one per bank) and streams its own
    share of the weight rows as the GEMV's vectors (as many per kernel as the GPR holds)."""
    jobs: ChannelJobs = {}
    for op in (LayerOp.FFN1, LayerOp.FFN2):
        d_out, d_in = tp_shapes(spec, tp)[op]
        most = max(1, gemv_max_batch(hw, m, d_in))
        sizes = [
            [most] * (rows // most) + ([rows % most] if rows % most else [])
            for rows in split_evenly(d_out, hw.module.channels, 1)
        ]
        jobs[op] = [[GemvJob(m, d_in, k) for k in ks] for ks in sizes]
    return jobs


def _per_channel_jobs(spec: ModelSpec, hw: HardwareConfig, tp: int, m: int) -> ChannelJobs:
    """Request ``i`` on channel ``i mod channels``, which runs every weight row of the op
    for its requests alone: AiM's GEMV (its banks read the weight rows, the inputs are the
    broadcast operand) over every channel's share of the rows in turn."""
    ch = hw.module.channels
    jobs: ChannelJobs = {}
    for op in (LayerOp.FFN1, LayerOp.FFN2):
        d_out, d_in = tp_shapes(spec, tp)[op]
        shares = [s for s in split_evenly(d_out, ch, hw.channel.banks) if s]
        whole = {  # a channel's requests: m // ch or one more
            r: [j for s in shares for j in batch_jobs(hw, s, d_in, r)]
            for r in {m // ch, -(-m // ch)}
            if r
        }
        jobs[op] = [whole.get(len(range(c, m, ch)), []) for c in range(ch)]
    return jobs


@dataclass(frozen=True)
class OffloadReadingSpec:
    """One reading of the offloaded FFN: requests one pass serves on ``hw``, what each
    channel runs for ``m`` requests, and the paper's words (``docs/librapim.md``)."""

    per_pass: Callable[[HardwareConfig], int]
    jobs: Callable[[ModelSpec, HardwareConfig, int, int], ChannelJobs]
    summary: str


#: The readings (``--offload``); ``docs/librapim.md``, "Offload readings", derives both.
OFFLOAD_READINGS: dict[OffloadReading, OffloadReadingSpec] = {
    OffloadReading.PER_BANK: OffloadReadingSpec(
        lambda hw: hw.channel.banks,
        _per_bank_jobs,
        "one request per bank, the weight rows broadcast from the Global Buffer (4.4, Fig. 14)",
    ),
    OffloadReading.PER_CHANNEL: OffloadReadingSpec(
        lambda hw: hw.module.channels,
        _per_channel_jobs,
        "one request per channel, each channel running its request's whole FFN alone (6.2)",
    ),
}


def offload_reading(value: OffloadReading | str) -> OffloadReading:
    """``value`` as an :class:`OffloadReading`; :class:`DecodeError` naming the allowed ones."""
    try:
        return OffloadReading(value)
    except ValueError:
        allowed = ", ".join(OFFLOAD_READINGS)
        raise DecodeError(f"offload reading {value!r} is unknown; allowed: {allowed}") from None


def add_offload_argument(
    p: argparse.ArgumentParser, default: Any = OffloadReading.PER_BANK
) -> None:
    """The ``--offload`` option of the LibraPIM commands and rows (``default``: the option's
    default, ``argparse.SUPPRESS`` where only some rows read it)."""
    p.add_argument(
        "--offload",
        choices=[str(r) for r in OFFLOAD_READINGS],
        default=default if default == argparse.SUPPRESS else str(default),
        help="LibraPIM's DBO offload: per-bank (16 requests per pass, Fig. 14; default) or "
        "per-channel (one request per channel, 64 in parallel, 6.2) (docs/librapim.md)",
    )


def requests_per_pass(hw: HardwareConfig, reading: OffloadReading) -> int:
    """Requests one pass of the offloaded FFN serves on ``hw`` under ``reading``."""
    return OFFLOAD_READINGS[reading].per_pass(hw)


def offload_jobs(
    spec: ModelSpec, hw: HardwareConfig, tp: int, m: int, reading: OffloadReading
) -> ChannelJobs:
    """The channel kernels of ``m`` requests' offloaded FFN of one layer on one of ``tp``
    devices under ``reading``: per FFN op, each channel's list (none for ``m = 0``)."""
    return OFFLOAD_READINGS[reading].jobs(spec, hw, tp, m) if m else {}


def weights_per_device(spec: ModelSpec, tp: int, pp: int = 1) -> float:
    """Bytes of weights one device holds when ``tp x pp`` devices share the model."""
    return spec.resident_weight_bytes / (tp * pp)


@dataclass
class _Parts:
    """The memoised simulated parts of one (model, hardware, xPU, tp) point."""

    spec: ModelSpec
    hw: HardwareConfig
    xpu: XpuConfig
    tp: int
    cache: KernelCache
    partitions: tuple[str, ...] = ATTENTION_PARTITIONS
    reading: OffloadReading = OffloadReading.PER_BANK
    _att: dict = field(default_factory=dict)
    _att_part: dict = field(default_factory=dict)
    _att_macs: dict = field(default_factory=dict)
    _dex: dict = field(default_factory=dict)
    _ffn: dict = field(default_factory=dict)
    _xpu: dict = field(default_factory=dict)

    @property
    def freq(self) -> float:
        return self.hw.module.freq_ghz

    def xpu_ops(
        self, batch: int, ffn_batch: int | None = None, att: tuple[int, ...] = ()
    ) -> dict[str, int]:
        """Cycles of one run of each xPU op of one layer on one device (the cost table
        :func:`~sim.systems.costs.layer_costs`; an op without work is absent)."""
        key = (batch, batch if ffn_batch is None else ffn_batch, att)
        if key not in self._xpu:
            costs = layer_costs(self.spec, self.xpu, batch, self.tp, ffn_batch=key[1], contexts=att)
            self._xpu[key] = op_cycles(costs, self.freq)
        return self._xpu[key]

    def gemm(self, op: LayerOp, m: int) -> int:
        return self.xpu_ops(m).get(op, 0)

    def gemm_flops(self, op: LayerOp, m: int) -> int:
        """Useful FLOPs of one FC GEMM of ``m`` requests on one device."""
        d_out, d_in = tp_shapes(self.spec, self.tp)[op]
        return 2 * m * d_in * d_out

    def ffn_flops(self, m: int) -> int:
        """Useful FLOPs of one layer's FFN GEMMs of ``m`` requests on one device."""
        return self.gemm_flops(LayerOp.FFN1, m) + self.gemm_flops(LayerOp.FFN2, m)

    def attention_flops(self, contexts: tuple[int, ...]) -> int:
        """Useful matrix FLOPs of one layer's attention (QK^T and SV, 2 per multiply-
        accumulate) for ``contexts`` on one device's ``heads / tp`` query heads."""
        s = self.spec
        return 4 * (s.heads // self.tp) * s.head_dim * sum(contexts)

    def xpu_ffn(self, m: int) -> int:
        c = self.xpu_ops(m)
        return c.get(self.spec.activation, 0) + c.get(LayerOp.FFN1, 0) + c.get(LayerOp.FFN2, 0)

    def attention(self, lengths: tuple[int, ...], chunks: int = 1) -> dict[str, int]:
        """PIM attention cycles of one layer of ``lengths`` for ``1/chunks`` of a device's
        KV heads (channel TLM): the fastest of ``partitions`` the compiler can map (the same
        for every system)."""
        key = (tuple(sorted(lengths)), chunks)
        if key not in self._att:
            best: dict[str, int] | None = None
            for part in self.partitions:
                try:
                    setup = DecodeSetup(
                        self.spec,
                        self.hw,
                        key[0],
                        tp=self.tp * chunks,
                        partition=part,
                        check_capacity=False,
                    )
                    _, att, _ = attention_cycles(setup, key[0], self.cache)
                except (PartitionError, DecodeMappingError):
                    continue  # e.g. HFP's score tile does not fit the GPR at GQA 8
                split = {k: att[k] for k in ("qk", "softmax", "sv")}
                if best is None or sum(split.values()) < sum(best.values()):
                    best = split
                    self._att_part[key] = part
            if best is None:
                raise DecodeError(f"no attention partition maps {self.spec.name} on this PIM")
            self._att[key] = best
        return self._att[key]

    def attention_macs(self, lengths: tuple[int, ...], chunks: int = 1) -> int:
        """MAC commands the channel TLM issues, over all channels, for :meth:`attention`'s
        layer (same partition)."""
        if not lengths:
            return 0
        key = (tuple(sorted(lengths)), chunks)
        if key not in self._att_macs:
            self.attention(lengths, chunks)
            plan = layer_plan(self.spec, self.hw, key[0], self.tp * chunks, self._att_part[key])
            self._att_macs[key] = sum(
                self.cache.run(j).macs for jobs in (*plan.qk, *plan.sv) for j in jobs
            )
        return self._att_macs[key]

    def pim_ffn(self, m: int) -> int:
        """PIM cycles of one layer's FFN GEMVs for ``m`` requests on one device (channel TLM,
        weight-stationary: every bank reads its share of the weights per request)."""
        return self._pim_ffn(m)[0]

    def pim_ffn_macs(self, m: int) -> int:
        """MAC commands, all channels, of :meth:`pim_ffn`."""
        return self._pim_ffn(m)[1]

    def _pim_ffn(self, m: int) -> tuple[int, int]:
        if not m:
            return 0, 0
        if m not in self._ffn:
            setup = DecodeSetup(self.spec, self.hw, (1,) * m, tp=self.tp, check_capacity=False)
            lt = layer_timing(setup, (1,) * m, self.cache)
            ops = (str(LayerOp.FFN1), str(LayerOp.FFN2))
            self._ffn[m] = (sum(lt.cycles[o] for o in ops), sum(lt.macs[o] for o in ops))
        return self._ffn[m]

    def pim_ffn_shared(self, m: int) -> int:
        """PIM cycles of one layer's FFN for ``m`` requests offloaded by DBO under
        ``reading`` (:func:`offload_jobs`); per op the busiest channel's sum. Per bank (4.4,
        Fig. 14): the weight rows stream through the Global Buffer to every bank's MAC unit,
        the banks hold the requests' input vectors; on the channel TLM a GEMV whose matrix is
        the ``m x d_in`` inputs and whose vectors are the channel's weight rows."""
        return self._pim_ffn_shared(m)[0]

    def pim_ffn_shared_macs(self, m: int) -> int:
        """MAC commands, all channels, of :meth:`pim_ffn_shared`."""
        return self._pim_ffn_shared(m)[1]

    def _pim_ffn_shared(self, m: int) -> tuple[int, int]:
        if not m:
            return 0, 0
        key = ("shared", self.reading, m)
        if key not in self._ffn:
            total = macs = 0
            for per_channel in offload_jobs(self.spec, self.hw, self.tp, m, self.reading).values():
                runs = [[self.cache.run(j) for j in jobs] for jobs in per_channel]
                total += max((sum(r.cycles for r in rs) for rs in runs), default=0)
                macs += sum(r.macs for rs in runs for r in rs)
            self._ffn[key] = (total, macs)
        return self._ffn[key]

    def dex_stretch(self, tokens: int, load: float, sliced: bool) -> float:
        """PIM slow-down when the xPU reads weights at ``load`` (fraction of the channel's bus)
        during a PIM attention kernel of ``tokens`` (at most 1024) tokens, from the bank-slice
        TLM (:func:`models.bank_slice.run_bank_slice`): the kernel's ``pim_cycles`` with the
        reads over its span divided by without. Reads arrive every ``tCCD / load`` cycles,
        interleaved over the banks (LibraPIM 5.3: weights "interleaved from the channel to
        the bank")."""
        load = round(min(1.0, max(0.0, load)), 2)
        key = (min(tokens, 1024), load, sliced)
        if key not in self._dex:
            if load == 0.0:
                self._dex[key] = 1.0
                return 1.0
            s = self.spec
            prog = compile_kernel(
                self.hw, "qk", tokens=key[0], d_h=s.head_dim, gqa_group=s.gqa_group
            )
            slicing = SliceConfig(sliced=sliced)
            alone = run_bank_slice(prog.commands, empty_host_reads(0), self.hw, slicing)
            spacing = self.hw.timing.tCCD / load
            n = max(1, math.ceil(alone.pim_cycles / spacing))
            k = np.arange(n)
            banks, cols = self.hw.channel.banks, self.hw.channel.row_bytes // 32
            reads = np.zeros(n, HOST_READ_DTYPE)
            reads["bank"] = k % banks
            reads["col"] = (k // banks) % cols
            reads["row"] = (k // (banks * cols)) % slicing.weight_rows(self.hw)
            reads["arrival"] = np.floor(k * spacing).astype(np.int64)
            both = run_bank_slice(prog.commands, reads, self.hw, slicing)
            self._dex[key] = both.pim_cycles / alone.pim_cycles
        return self._dex[key]

    def xpu_attention(self, contexts: tuple[int, ...]) -> int:
        return self.xpu_ops(0, 0, contexts).get(ATTENTION, 0)

    def link(self, nbytes: int) -> int:
        return link_cycles(self.hw, nbytes, "host")

    def pre_post(
        self, batch: int, ffn_batch: int, att: tuple[int, ...]
    ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        """Pre-attention (norm, QKV) and post-attention xPU ops of one layer for ``batch``
        requests, FFN for ``ffn_batch`` of them, attention for contexts ``att``."""
        c = self.xpu_ops(batch, ffn_batch, att)
        norm = c.get(VectorOp.NORM, 0)
        pre = [("vector", norm), ("qkv", c.get(LayerOp.QKV, 0))]
        post = [
            ("xpu_attention", c.get(ATTENTION, 0)),
            ("proj", c.get(LayerOp.PROJ, 0)),
            ("vector", 2 * c.get(VectorOp.RESIDUAL, 0) + norm),
            ("vector", c.get(self.spec.activation, 0)),
            ("ffn1", c.get(LayerOp.FFN1, 0)),
            ("ffn2", c.get(LayerOp.FFN2, 0)),
        ]
        return pre, post

    def qkv_bytes(self, n: int) -> int:
        s = self.spec
        return n * (s.heads + 2 * s.kv_heads) * s.head_dim * s.element_bytes // self.tp

    def out_bytes(self, n: int) -> int:
        s = self.spec
        return n * s.heads * s.head_dim * s.element_bytes // self.tp


@dataclass(frozen=True)
class LibrapimStep:
    """One system's simulated step beside Algorithm 1's prediction.

    ``busy``: fraction of the step each device works. ``work``: the step's useful xPU matrix
    FLOPs (``xpu_flops``: FC GEMMs and attention moved to the xPU), PIM MAC commands issued
    on all channels (``pim_macs``, from the channel TLM) and PIM's useful FLOPs
    (``pim_flops``). ``utilisation``: ``xpu`` = ``xpu_flops / (matrix peak x step)``,
    ``pim_mac_issue`` = ``pim_macs x tCCD / (channels x step cycles)`` (one all-bank MAC per
    ``tCCD`` per channel is the peak), ``pim_flops`` = ``pim_flops / (PIM peak x step)``
    (below ``pim_mac_issue`` by the padding of partly filled MACs).
    """

    name: str
    groups: int
    group_sizes: list[int]
    decisions: list[dict[str, Any]]
    cycles: int
    step_seconds: float
    predicted_seconds: float
    tokens_per_s: float
    busy: dict[str, float] = field(default_factory=dict)  # fraction of the step each works
    ops: dict[str, int] = field(default_factory=dict)
    work: dict[str, int] = field(default_factory=dict)
    utilisation: dict[str, float] = field(default_factory=dict)


def _decision_dict(d: DboDecision) -> dict[str, Any]:
    return {
        "case": str(d.case),
        "batch": d.batch,
        "seq_len": d.seq_len,
        "m": d.m,
        "n": d.n,
        "m_exact": d.m_exact,
        "n_exact": d.n_exact,
        "m_capped": d.m_capped,
        "xpu_seconds": d.xpu_seconds,
        "pim_seconds": d.pim_seconds,
    }


def _result(
    name: str,
    parts: _Parts,
    groups: int,
    sizes: list[int],
    decisions: list[dict[str, Any]],
    cycles: int,
    predicted: float,
    batch: int,
    busy: dict[str, int],
    ops: dict[str, int],
    work: dict[str, int],
) -> LibrapimStep:
    seconds = cycles / (parts.freq * 1e9)
    hw = parts.hw
    pim_peak = dbo_throughput(parts.xpu, hw, parts.spec.element_bytes).pim_flops
    return LibrapimStep(
        name=name,
        groups=groups,
        group_sizes=sizes,
        decisions=decisions,
        cycles=cycles,
        step_seconds=seconds,
        predicted_seconds=predicted,
        tokens_per_s=batch / seconds,
        busy={d: b / cycles for d, b in busy.items()},
        ops=ops,
        work=work,
        utilisation={
            "xpu": work["xpu_flops"] / (parts.xpu.peak_flops() * seconds),
            "pim_mac_issue": work["pim_macs"] * hw.timing.tCCD / (hw.module.channels * cycles),
            "pim_flops": work["pim_flops"] / (pim_peak * seconds),
        },
    )


def measured_throughput(parts: _Parts, lengths: tuple[int, ...]) -> DboThroughput:
    """Attainable throughputs of a batch group ``lengths`` for Algorithm 1, measured on the
    models at the group's load (``tp`` devices, as :func:`dbo_throughput`):

    * ``FLOPS_xPU``: the FC GEMMs' FLOPs of the whole group over their xPU cost-model time;
    * ``FLOPS_xPU_GEMV``: the group's attention FLOPs over the xPU's attention time;
    * ``FLOPS_PIM``: the group's attention FLOPs over its PIM time (channel TLM, no DEX
      stretch: sliced banks cost about 1%);
    * PIM's FFN rate: the FFN FLOPs of one full pass of the offload reading
      (:func:`requests_per_pass`: ``banks`` requests per bank, ``channels`` per channel) over
      its channel-TLM time (PIM's FFN time steps every pass, so a full pass is its best
      per-request rate).
    """
    b, hz, tp = len(lengths), parts.freq * 1e9, parts.tp
    fc = (LayerOp.QKV, LayerOp.PROJ, LayerOp.FFN1, LayerOp.FFN2)
    x_flops = sum(parts.gemm_flops(op, b) for op in fc)
    x_cycles = sum(parts.gemm(op, b) for op in fc)
    a_flops = parts.attention_flops(lengths)
    full = requests_per_pass(parts.hw, parts.reading)
    return DboThroughput(
        xpu_flops=tp * x_flops * hz / x_cycles,
        xpu_gemv_flops=tp * a_flops * hz / parts.xpu_attention(lengths),
        pim_flops=tp * a_flops * hz / sum(parts.attention(lengths).values()),
        pim_channels=parts.hw.module.channels,
        pim_ffn_flops=tp * parts.ffn_flops(full) * hz / parts.pim_ffn_shared(full),
    )


def _pipelined(
    name: str,
    parts: _Parts,
    lengths: tuple[int, ...],
    groups: int,
    offload: Offload,
    fixed_m: int | None = None,
    dex: bool | None = None,
) -> LibrapimStep:
    """NPU+AiM (``groups = 1``), the pipelined systems and LibraPIM: per group the layer
    chain on :func:`~sim.systems.hetero.pipeline_schedule`. ``offload``: Algorithm 1's
    split with peak (``ALGORITHM_1``) or measured (``MEASURED``) throughputs, or none;
    ``fixed_m`` instead puts ``min(fixed_m, group)`` requests' FFN on PIM in every group.
    ``dex``: ``None``, PIM and the xPU never conflict; ``True`` / ``False``, PIM's MAC-bound
    ops stretch by the bank-slice TLM's factor with / without slicing at the group's xPU read
    load."""
    spec, layers, e = parts.spec, parts.spec.layers, parts.spec.element_bytes
    model = dbo_model(spec)
    peak = dbo_throughput(parts.xpu, parts.hw, e, parts.tp)
    use_dbo = offload in (Offload.ALGORITHM_1, Offload.MEASURED)
    xpu_t, in_t, pim_t, out_t, decisions = [], [], [], [], []
    xpu_pred = pim_pred = 0.0  # Algorithm 1's per-layer busy seconds, summed over the groups
    work = dict.fromkeys(("xpu_flops", "pim_macs", "pim_flops"), 0)
    groups_mb = micro_batches(lengths, groups)
    for mb in groups_mb:
        thr = measured_throughput(parts, mb) if offload == Offload.MEASURED else peak
        d = dynamic_batch_offload(model, thr, len(mb), max(mb))
        decisions.append(_decision_dict(d))
        if offload == Offload.MEASURED:
            decisions[-1]["throughput"] = dataclasses.asdict(thr)
        m, n = (d.m, d.n) if use_dbo else (0, 0)
        if fixed_m is not None:
            m, n = min(fixed_m, len(mb)), 0
        if use_dbo:
            xpu_pred, pim_pred = xpu_pred + d.xpu_seconds, pim_pred + d.pim_seconds
        else:
            b = d.before
            xpu_pred += b["t_qkv_xpu"] + b["t_proj_xpu"] + b["t_ffn_xpu"]
            pim_pred += b["t_mha_pim"]
        # MHA offload: the n longest requests' attention moves to the xPU.
        order = sorted(range(len(mb)), key=lambda i: -mb[i])
        on_xpu = tuple(mb[i] for i in order[:n])
        on_pim = tuple(mb[i] for i in order[n:])
        pre, post = parts.pre_post(len(mb), len(mb) - m, on_xpu)
        fc = [(LayerOp.QKV, len(mb)), (LayerOp.PROJ, len(mb))]
        fc += [(LayerOp.FFN1, len(mb) - m), (LayerOp.FFN2, len(mb) - m)]
        work["xpu_flops"] += layers * (
            sum(parts.gemm_flops(op, k) for op, k in fc) + parts.attention_flops(on_xpu)
        )
        work["pim_macs"] += layers * (parts.attention_macs(on_pim) + parts.pim_ffn_shared_macs(m))
        work["pim_flops"] += layers * (parts.attention_flops(on_pim) + parts.ffn_flops(m))
        pim_ops: list[tuple[str, int]] = [("qk", 0), ("softmax", 0), ("sv", 0)]
        if on_pim:
            pim_ops = list(parts.attention(on_pim).items())
        if m:
            pim_ops.append(("pim_ffn", parts.pim_ffn_shared(m)))
        if dex is not None:
            xpu_cycles = sum(c for _, c in pre + post)
            read = [LayerOp.QKV, LayerOp.PROJ] + (
                [LayerOp.FFN1, LayerOp.FFN2] if m < len(mb) else []
            )
            shapes = tp_shapes(spec, parts.tp)
            wbytes = sum(shapes[op][0] * shapes[op][1] for op in read) * e  # what the xPU reads
            load = wbytes / parts.hw.module.channels / max(1, xpu_cycles)
            load /= parts.hw.module.io_bytes_per_cycle
            stretch = parts.dex_stretch(max(mb), load, dex)
            pim_ops = [
                (op, math.ceil(c * stretch) if op in ("qk", "sv", "pim_ffn") else c)
                for op, c in pim_ops
            ]
            decisions[-1].update(xpu_read_load=load, dex_stretch=stretch, sliced=dex)
        qkv_b = parts.qkv_bytes(len(on_pim)) + m * spec.hidden * e  # FFN inputs go too
        out_b = parts.out_bytes(len(on_pim)) + m * spec.hidden * e
        xpu_t.append([pre] + [post + pre] * (layers - 1) + [post])
        in_t.append([[("qkv_transfer", parts.link(qkv_b))]] * layers)
        pim_t.append([pim_ops] * layers)
        out_t.append([parts.link(out_b)] * layers)
    tl = pipeline_schedule(xpu_t, in_t, pim_t, out_t)
    # Prediction: serial, the two devices' sum; pipelined, the busier device bounds each layer.
    per_layer = max(xpu_pred, pim_pred) if groups > 1 else xpu_pred + pim_pred
    ops: dict[str, int] = {}
    for dev in tl.tasks.values():
        for _, _, segs, _ in dev:
            for op, c in segs:
                ops[op] = ops.get(op, 0) + c
    return _result(
        name,
        parts,
        groups,
        [len(mb) for mb in groups_mb],
        decisions,
        tl.cycles,
        per_layer * layers,
        len(lengths),
        {dv: tl.busy(dv) for dv in ("xpu", "pim")},
        ops,
        work,
    )


def _best_offload(
    name: str, parts: _Parts, lengths: tuple[int, ...], groups: int, dex: bool | None
) -> LibrapimStep:
    """LibraPIM with the FFN offload chosen by simulation: every ``m`` in multiples of the
    pass (:func:`requests_per_pass`) up to ``Channel_PIM`` (PIM's FFN time changes only at
    those steps while the xPU's falls with every request), and ``m = 0``; the fastest step."""
    full, cap = requests_per_pass(parts.hw, parts.reading), parts.hw.module.channels
    top = min(cap, max(len(g) for g in micro_batches(lengths, groups)))
    ms = sorted({0, top, *range(full, top + 1, full)})
    runs = [_pipelined(name, parts, lengths, groups, Offload.NONE, m, dex) for m in ms]
    best = min(range(len(ms)), key=lambda i: (runs[i].cycles, ms[i]))
    for d in runs[best].decisions:
        d.update(case="best-offload", m=min(ms[best], d["batch"]), n=0)
    return dataclasses.replace(runs[best], predicted_seconds=float("nan"))


def _flow(chunks: list[list[int]]) -> int:
    """Makespan of chunks through serial stages: ``chunks[c][s]`` cycles of stage ``s``;
    chunk ``c`` enters stage ``s`` when stage ``s`` is free and it has left stage ``s - 1``.

    >>> _flow([[2, 3], [2, 3]])
    8
    """
    free = [0] * len(chunks[0])
    for stages in chunks:
        done = 0
        for s, c in enumerate(stages):
            done = free[s] = max(free[s], done) + c
    return max(free)


def _coprocess_split(parts: _Parts, batch: int) -> int:
    """AttAcc's FFN co-processing split: the ``m`` (requests on PIM) minimising
    ``max(xPU FFN of batch - m, PIM FFN of m)``, both simulated (bisection on the crossing)."""
    lo, hi = 0, batch  # xPU time falls and PIM time rises with m
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if parts.pim_ffn(mid) < parts.xpu_ffn(batch - mid):
            lo = mid
        else:
            hi = mid
    return min((lo, hi), key=lambda m: (max(parts.pim_ffn(m), parts.xpu_ffn(batch - m)), m))


def _attacc(name: str, parts: _Parts, lengths: tuple[int, ...]) -> LibrapimStep:
    """AttAcc-like: one group, serial flow; per layer the QKV GEMM, the Q/K/V transfer, the
    PIM attention and the output transfer flow per head chunk (the device's KV heads, one
    chunk each), then projection and the FFN split between xPU and PIM (co-processing)."""
    spec, e = parts.spec, parts.spec.element_bytes
    b, kvh = len(lengths), kv_heads_per_device(spec, parts.tp)
    att = parts.attention(lengths, kvh)
    qkv = parts.gemm(LayerOp.QKV, b)
    chunk = [
        math.ceil(qkv / kvh),
        parts.link(parts.qkv_bytes(b) // kvh),
        sum(att.values()),
        parts.link(parts.out_bytes(b) // kvh),
    ]
    head_flow = _flow([chunk] * kvh)
    m = _coprocess_split(parts, b)
    xpu_ffn, pim_ffn = parts.xpu_ffn(b - m), parts.pim_ffn(m)
    vec = parts.xpu_ops(b)
    norm = vec[VectorOp.NORM]
    rest = (
        norm
        + parts.gemm(LayerOp.PROJ, b)
        + 2 * vec[VectorOp.RESIDUAL]
        + norm
        + parts.link(m * spec.hidden * e) * 2
        + max(xpu_ffn, pim_ffn)
    )
    per_layer = head_flow + rest
    cycles = spec.layers * per_layer
    xpu_busy = spec.layers * (qkv + rest - max(xpu_ffn, pim_ffn) + xpu_ffn)
    pim_busy = spec.layers * (kvh * sum(att.values()) + pim_ffn)
    ops = {"head_flow": spec.layers * head_flow, "pim_ffn": spec.layers * pim_ffn}
    dec = [{"case": "ffn-coprocessing", "batch": b, "m": m, "chunks": kvh}]
    fc = [(LayerOp.QKV, b), (LayerOp.PROJ, b), (LayerOp.FFN1, b - m), (LayerOp.FFN2, b - m)]
    work = {
        "xpu_flops": spec.layers * sum(parts.gemm_flops(op, k) for op, k in fc),
        "pim_macs": spec.layers
        * (kvh * parts.attention_macs(lengths, kvh) + parts.pim_ffn_macs(m)),
        "pim_flops": spec.layers * (parts.attention_flops(lengths) + parts.ffn_flops(m)),
    }
    busy = {"xpu": xpu_busy, "pim": pim_busy}
    return _result(name, parts, 1, [b], dec, cycles, float("nan"), b, busy, ops, work)


def librapim_cache(hw: HardwareConfig, sched: str, lengths: tuple[int, ...]) -> KernelCache:
    """The channel-kernel cache :func:`run_librapim` times a step's kernels with; pass the
    same one to ``run_librapim`` and to anything that reruns those kernels (their energy)."""
    return KernelCache(hw, sched, True, dpa=True, dpa_max_tokens=max(lengths))


def check_step(spec: ModelSpec, lengths: tuple[int, ...], groups: int, tp: int) -> None:
    """:class:`DecodeError` unless ``lengths`` is a batch of ``spec`` that ``groups`` batch
    groups split and ``tp`` devices share."""
    if not lengths:
        raise DecodeError("batch = 0: give at least one request")
    if max(lengths) > spec.context_window:
        raise DecodeError(
            f"context {max(lengths)}: beyond {spec.name}'s window; allowed 1 to "
            f"{spec.context_window}"
        )
    if isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= len(lengths):
        raise DecodeError(
            f"groups = {groups!r}: must be an integer from 1 to the batch ({len(lengths)})"
        )
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1 or spec.kv_heads % tp:
        raise DecodeError(
            f"tp = {tp!r}: must be a positive divisor of {spec.name}'s kv_heads ({spec.kv_heads})"
        )


def step_inputs(
    spec: ModelSpec, preset: str, xpu: str, lengths: tuple[int, ...], tp: int
) -> dict[str, Any]:
    """What a LibraPIM step's JSON report states of its inputs (model, presets, batch, its
    longest context, ``tp`` and each device's weight bytes)."""
    return {
        "model": spec.name,
        "preset": preset,
        "xpu": xpu,
        "batch": len(lengths),
        "max_context": max(lengths),
        "tp": tp,
        "weight_bytes_per_device": weights_per_device(spec, tp),
    }


def format_inputs(spec: ModelSpec, preset: str, xpu: str, lengths: tuple[int, ...], tp: int) -> str:
    """The line that heads a LibraPIM step's text: model, presets, devices and the batch."""
    return (
        f"{spec.name} on {preset} + {xpu}, one of {tp} devices "
        f"({weights_per_device(spec, tp) / 1e9:.1f} GB of weights each, not checked): "
        f"batch {len(lengths)}, contexts {min(lengths)}..{max(lengths)} tokens"
    )


def run_librapim(
    *args: Any, offload: OffloadReading | str = OffloadReading.PER_BANK, **kwargs: Any
) -> dict[str, LibrapimStep]:
    """Time one decode step of ``lengths`` on each of ``systems``: :func:`run_librapim_readings`
    (its arguments) under the one reading ``offload``, where DBO's offloaded FFN runs
    (:data:`OFFLOAD_READINGS`; AttAcc's co-processing is AiM's GEMV either way)."""
    reading = offload_reading(offload)
    return run_librapim_readings(*args, readings=(reading,), **kwargs)[reading]


def run_librapim_readings(
    spec: ModelSpec,
    hw: HardwareConfig,
    xpu: XpuConfig,
    lengths: tuple[int, ...],
    groups: int = DEFAULT_GROUPS,
    sched: str = "dcs",
    tp: int = 1,
    systems: tuple[str, ...] | None = None,
    partitions: tuple[str, ...] = ATTENTION_PARTITIONS,
    slicing: bool = True,
    cache: KernelCache | None = None,
    *,
    readings: tuple[OffloadReading | str, ...] = (OffloadReading.PER_BANK,),
) -> dict[OffloadReading, dict[str, LibrapimStep]]:
    """Time one decode step of ``lengths`` on each of ``systems`` (default all of
    :data:`LIBRAPIM_SPECS`) under each of ``readings`` (keys: the readings, then the system
    names), ``tp`` devices sharing every layer. PIM attention uses the fastest of
    ``partitions`` that maps. ``slicing``: the DEX systems' banks are sliced (default) or, for
    the comparison, exclusive as in plain AiM (``aim-pipelined`` is exclusive either way).
    The parts no reading changes (attention, the xPU's ops, DEX) are simulated once.

    Capacity is not checked (the paper's 16 GB does not hold the KV of its large points).
    """
    check_step(spec, lengths, groups, tp)
    chosen = []
    for name in systems or tuple(LIBRAPIM_SPECS):
        if name not in LIBRAPIM_SPECS:
            raise DecodeError(f"system {name!r} is unknown; allowed: {', '.join(LIBRAPIM_SPECS)}")
        chosen.append(SystemKind(name))
    cache = cache or librapim_cache(hw, sched, lengths)
    shared = _Parts(spec, hw, xpu, tp, cache, partitions)
    out: dict[OffloadReading, dict[str, LibrapimStep]] = {}
    for reading in map(offload_reading, readings):
        parts = dataclasses.replace(shared, reading=reading)  # the memo dicts stay shared
        out[reading] = {s: _run_row(s, parts, lengths, groups, slicing) for s in chosen}
    return out


def _run_row(
    s: SystemKind, parts: _Parts, lengths: tuple[int, ...], groups: int, slicing: bool
) -> LibrapimStep:
    """One registry row's step on ``parts``."""
    row = LIBRAPIM_SPECS[s]
    banks = row.banks
    if banks == BankAccess.SLICED and not slicing:
        banks = BankAccess.EXCLUSIVE
    dex = None if row.serial else _SLICE_MODE[banks]  # serial: reads and PIM never overlap
    if row.head_pipelining:
        return _attacc(str(s), parts, lengths)
    if row.offload == Offload.BEST:
        return _best_offload(str(s), parts, lengths, groups, dex)
    return _pipelined(str(s), parts, lengths, 1 if row.serial else groups, row.offload, None, dex)


def format_librapim(systems: dict[str, LibrapimStep]) -> str:
    """A text table: per system its step time, Algorithm 1's prediction, tokens/s, the
    devices' busy fractions and utilisation (xPU FLOP/s, PIM MAC issue) and the DBO decision
    of each LibraPIM batch group."""
    base = systems["npu+aim"].step_seconds if "npu+aim" in systems else None
    lines = [
        f"{'system':17s} {'groups':>6s} {'simulated ms':>13s} {'predicted ms':>13s} "
        f"{'tok/s':>9s} {'speedup':>8s} {'xPU busy':>9s} {'PIM busy':>9s} "
        f"{'xPU util':>9s} {'PIM MAC':>8s}"
    ]
    for s in systems.values():
        speed = f"{base / s.step_seconds:7.2f}x" if base else f"{'-':>8s}"
        lines.append(
            f"{s.name:17s} {s.groups:6d} {s.step_seconds * 1e3:13.3f} "
            f"{s.predicted_seconds * 1e3:13.3f} {s.tokens_per_s:9.1f} "
            f"{speed} {s.busy['xpu']:9.1%} {s.busy['pim']:9.1%} "
            f"{s.utilisation['xpu']:9.1%} {s.utilisation['pim_mac_issue']:8.1%}"
        )
    if "attacc" in systems:
        d = systems["attacc"].decisions[0]
        lines.append(f"AttAcc: {d['chunks']} head chunks, FFN of {d['m']} requests on PIM")
    for name in ("librapim", "librapim-measured"):
        if name not in systems:
            continue
        lines.append(f"DBO decisions ({name}, per batch group):")
        for i, d in enumerate(systems[name].decisions):
            lines.append(
                f"  group {i}: B={d['batch']} L={d['seq_len']} {d['case']}: m={d['m']} "
                f"n={d['n']} (eq.1 m*={d['m_exact']:.2f}, eq.2 n*={d['n_exact']:.2f}"
                f"{', m capped at the PIM channels' if d['m_capped'] else ''})"
            )
    return "\n".join(lines)
