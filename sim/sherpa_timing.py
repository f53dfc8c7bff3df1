"""PIM-SHERPA timing (seed 004, Figs. 10-13): prefill on the host, decode on LPDDR5X-PIM.

Three sources of time, each from a model of ours:

- **prefill GEMM** on the host's GEMM cores: :func:`models.xpu.gemm_cost` on the host preset
  with its peak scaled to the GEMM cores' share of the SIMD pipes (:class:`SherpaHost`);
- **swizzled memory copy** (SMC): ``dram_transactions x bytes / bandwidth``, the bandwidth
  ``min(threads x per-thread, non-cacheable ceiling) x peak`` from the paper's copy-speed
  measurements (``configs/sherpa/``);
- **decode GEMV** on PIM: each weight matrix lowered by :mod:`compiler.pim_gemv` (Algorithm 1)
  and timed command by command by :func:`models.hbm_pim.time_stream` on the LPDDR5X-PIM back
  end, one token at a time; a matrix whose weights exceed the PIM rows of a bank is run as
  the fewest equal output slices that fit.

The strategies differ only in how prefill gets its host-friendly cacheable weights
(:data:`PREFILL_MODELS`): directly (WD, FACIL-O), a per-layer double-buffered schedule of
copy and GEMM steps (S-DDB, Fig. 5, :data:`DDB_SCHEDULE`), or a copy before every GEMM
(S-OWR). ``docs/sherpa.md`` has the rules, the numbers and the paper's beside them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import ModelSpec, weight_matrices
from pimphony.compiler.pim_gemv import PimGemvError, gemv_layout, lower_gemv
from pimphony.models.backends import BackendConfig, load_backend
from pimphony.models.config import (
    PresetFolder,
    check_value,
    reject_unknown_keys,
    require_key,
    typed_fields,
)
from pimphony.models.errors import PimphonyError
from pimphony.models.hbm_pim import time_stream
from pimphony.models.layout import MemoryLayout
from pimphony.models.xpu import attention_cost, gemm_cost, gemv_cost
from pimphony.models.xpu_config import XpuConfig, load_xpu

__all__ = [
    "ATTENTION",
    "Core",
    "DDB_SCHEDULE",
    "PREFILL_MODELS",
    "SHERPA_DIR",
    "Prefill",
    "SherpaError",
    "SherpaHost",
    "Step",
    "available_hosts",
    "check_agreement",
    "ddb_layer",
    "decode_seconds",
    "end_to_end",
    "gemm_device",
    "gemv_slices",
    "layer_gemm_seconds",
    "lm_head_seconds",
    "load_sherpa_host",
    "pim_gemv_seconds",
    "prefill",
    "smc_seconds",
    "table2",
]

#: The step of a layer that is attention (scores, softmax, weighted sum) rather than a GEMM.
ATTENTION = "attention"


class SherpaError(PimphonyError, ValueError):
    """A PIM-SHERPA host preset, device or request that is malformed or inconsistent."""


_HOSTS = PresetFolder("sherpa", "sherpa host", SherpaError)
SHERPA_DIR = _HOSTS.folder


@dataclass(frozen=True)
class Core:
    """One CPU core: SIMD pipes (relative), clock, and whether it runs GEMM."""

    name: str
    simd: int
    ghz: float
    gemm: bool


@dataclass(frozen=True)
class SherpaHost:
    """The host side of PIM-SHERPA: cores, copy threads and measured copy speeds, and the
    names of the host xPU, PIM back end and layout presets it runs with."""

    name: str
    source: str
    host_xpu: str
    backend: str
    layout: str
    cores: tuple[Core, ...]
    ddb_threads: int
    owr_threads: int
    fraction_of_peak: float
    fraction_threads: int
    noncacheable_ratio: float
    dram_transactions: int

    @property
    def gemm_share(self) -> float:
        """The share of all cores' SIMD throughput (pipes x GHz) a GEMM gets from its threads:
        each GEMM core's thread takes an equal part of the work, so a GEMM ends when the
        slowest core finishes its part (PIM-SHERPA 6, Fig. 11: "Because the number of SIMD
        units on a Cortex-X4 is twice that of an A720, T5 finishes GEMM earlier"):
        ``threads x min(pipes x GHz) / sum over all cores``."""
        total = sum(c.simd * c.ghz for c in self.cores)
        rates = [c.simd * c.ghz for c in self.cores if c.gemm]
        return len(rates) * min(rates) / total

    def gemm_thread_finish(self) -> dict[str, float]:
        """Each GEMM core's finish time as a fraction of the GEMM's (its equal part at its
        own speed; the slowest core's is 1)."""
        rates = {c.name: c.simd * c.ghz for c in self.cores if c.gemm}
        slowest = min(rates.values())
        return {name: slowest / r for name, r in rates.items()}

    def copy_fraction(self, threads: int) -> float:
        """Fraction of the peak DRAM bandwidth ``threads`` copy threads reach: per thread
        ``fraction_of_peak / fraction_threads``, capped by the non-cacheable ceiling."""
        per_thread = self.fraction_of_peak / self.fraction_threads
        return min(threads * per_thread, self.noncacheable_ratio)


def available_hosts() -> list[str]:
    """Names of the host presets in ``configs/sherpa/``."""
    return _HOSTS.names()


def load_sherpa_host(name: str | Path) -> SherpaHost:
    """A host preset by name or ``.toml`` path, every key typed and ranged."""
    path, raw = _HOSTS.load(name)
    head = f"{path}: "
    top = typed_fields(
        {k: v for k, v in raw.items() if k not in ("cores", "copy")},
        {"name": str, "source": str, "host_xpu": str, "backend": str, "layout": str},
        SherpaError,
        head,
        note=" at top level (and [copy], cores)",
    )
    cores_raw = require_key(raw, "cores", SherpaError, head)
    if not isinstance(cores_raw, list) or not cores_raw:
        raise SherpaError(f"{head}cores: must be a non-empty list of tables")
    cores = []
    for i, c in enumerate(cores_raw):
        where = f"{head}cores[{i}] "
        check_value(f"{head}cores[{i}]", c, dict, SherpaError)
        reject_unknown_keys(c, ("name", "simd", "ghz", "gemm"), SherpaError, where)
        gemm = require_key(c, "gemm", SherpaError, where)
        if not isinstance(gemm, bool):
            raise SherpaError(f"{where}gemm = {gemm!r}: must be true or false")
        cores.append(
            Core(
                check_value(f"{where}name", require_key(c, "name", SherpaError, where), str,
                            SherpaError),
                check_value(f"{where}simd", require_key(c, "simd", SherpaError, where), int,
                            SherpaError),
                check_value(f"{where}ghz", require_key(c, "ghz", SherpaError, where), float,
                            SherpaError),
                gemm,
            )
        )  # fmt: skip
    if not any(c.gemm for c in cores):
        raise SherpaError(f"{head}cores: no core has gemm = true; prefill needs one")
    copy_kinds = {
        "ddb_threads": int, "owr_threads": int, "fraction_of_peak": float,
        "fraction_threads": int, "noncacheable_ratio": float, "dram_transactions": int,
    }  # fmt: skip
    copy = typed_fields(
        check_value(f"{head}[copy]", require_key(raw, "copy", SherpaError, head, section=True),
                    dict, SherpaError),
        copy_kinds, SherpaError, f"{head}[copy] ",
    )  # fmt: skip
    for key in ("fraction_of_peak", "noncacheable_ratio"):
        if copy[key] > 1:
            raise SherpaError(f"{head}[copy] {key} = {copy[key]!r}: a fraction of the peak, <= 1")
    return SherpaHost(cores=tuple(cores), **top, **copy)


def check_agreement(backend: BackendConfig, layout: MemoryLayout) -> None:
    """Refuse a back end and a layout that describe different devices: channels, banks, row
    and burst sizes, rows and element size must agree."""
    amap = layout.address_map
    pairs = [
        ("channels", backend.groups, "groups", amap.size("channel"), "channel"),
        ("banks per channel", backend.group.banks, "group.banks",
         amap.size("bank") * amap.size("rank"), "bank x rank"),
        ("burst bytes", backend.group.column_bytes, "group.column_bytes", amap.burst_bytes,
         "offset"),
        ("row bytes", backend.group.row_bytes, "group.row_bytes", amap.row_bytes,
         "offset x column"),
        ("rows per bank", backend.group.rows_per_bank, "group.rows_per_bank", amap.size("row"),
         "row"),
        ("element bytes", backend.core.element_bytes, "core.dtype", layout.element_bytes,
         "element_bytes"),
    ]  # fmt: skip
    for what, have, key, want, field in pairs:
        if have != want:
            raise SherpaError(
                f"back end {backend.name!r} and layout {layout.name!r} disagree on {what}: "
                f"{key} gives {have:,}, the layout's {field} gives {want:,}"
            )


def gemm_device(host: SherpaHost) -> XpuConfig:
    """The host xPU preset with its peak scaled to the GEMM cores' share
    (:attr:`SherpaHost.gemm_share`)."""
    dev = load_xpu(host.host_xpu)
    share = host.gemm_share
    peak = dev.peak_tflops
    scaled = replace(peak, **{f.name: getattr(peak, f.name) * share for f in fields(peak)})
    return replace(dev, peak_tflops=scaled)


def layer_gemm_seconds(dev: XpuConfig, spec: ModelSpec, sl: int) -> dict[str, float]:
    """Seconds of each GEMM of one layer on ``sl`` tokens, and of the layer's attention
    (``heads`` x (QK^T + SV) as GEMMs, no causal saving: a choice)."""
    out = {
        name: gemm_cost(dev, sl, din, dout).seconds
        for name, (dout, din) in weight_matrices(spec).items()
    }
    per_head = (
        gemm_cost(dev, sl, spec.head_dim, sl).seconds
        + gemm_cost(dev, sl, sl, spec.head_dim).seconds
    )
    out[ATTENTION] = spec.heads * per_head
    return out


def smc_seconds(host: SherpaHost, peak_gbps: float, nbytes: float, threads: int) -> float:
    """Seconds for ``threads`` copy threads to move ``nbytes`` of weights by SMC:
    ``dram_transactions x nbytes / (copy_fraction(threads) x peak)``."""
    return host.dram_transactions * nbytes / (host.copy_fraction(threads) * peak_gbps * 1e9)


@cache
def gemv_slices(backend: str, dout: int, din: int) -> tuple[int, ...]:
    """Output rows of each slice of ``W (dout x din) @ x`` on every channel of ``backend``:
    the fewest equal slices whose weights fit the PIM rows (the last one may be shorter)."""
    cfg = load_backend(backend)
    try:
        gemv_layout(cfg, 1, din)  # anything wrong but the size is wrong for every slice
    except PimGemvError as exc:
        raise SherpaError(str(exc)) from None
    for parts in range(1, dout + 1):
        rows = -(-dout // parts)
        try:
            gemv_layout(cfg, rows, din)
        except PimGemvError:
            continue  # too many weight rows per bank: one more slice
        return (rows,) * (parts - 1) + (dout - (parts - 1) * rows,)
    raise SherpaError(f"GEMV {dout} x {din} does not fit back end {backend!r}")  # pragma: no cover


@cache
def _gemv_cycles(backend: str, dout: int, din: int) -> tuple[int, int]:
    """(cycles, slices) of ``W (dout x din) @ x`` on every channel of ``backend``: each of
    :func:`gemv_slices`' streams timed."""
    cfg = load_backend(backend)
    slices = gemv_slices(backend, dout, din)
    timed = {r: time_stream(cfg, lower_gemv(cfg, r, din).stream).cycles for r in set(slices)}
    return sum(timed[r] for r in slices), len(slices)


def pim_gemv_seconds(backend: BackendConfig, dout: int, din: int) -> float:
    """Seconds of one decode GEMV ``(dout x din)`` on the PIM back end (Algorithm 1)."""
    t = backend.timing
    if t is None:
        raise SherpaError(f"back end {backend.name!r} has no [timing]: cannot time decode")
    return _gemv_cycles(backend.name, dout, din)[0] / (t.freq_ghz * 1e9)


def lm_head_seconds(spec: ModelSpec, host_dev: XpuConfig, backend: BackendConfig | None) -> float:
    """The LM head on one token: a GEMV on PIM if ``backend``, else on the host."""
    if not spec.vocab_size:
        return 0.0
    if backend is not None:
        return pim_gemv_seconds(backend, spec.vocab_size, spec.hidden)
    return gemv_cost(host_dev, 1, spec.hidden, spec.vocab_size).seconds


def decode_seconds(
    spec: ModelSpec, host_dev: XpuConfig, context: int, backend: BackendConfig | None
) -> dict[str, float]:
    """One decode step at ``context`` tokens: the weight GEMVs (on PIM if ``backend``, else
    on the host), the LM head, and attention on the host (the KV cache read, one request)."""
    mats = weight_matrices(spec)
    if backend is not None:
        gemv = sum(pim_gemv_seconds(backend, o, i) for o, i in mats.values())
    else:
        gemv = sum(gemv_cost(host_dev, 1, i, o).seconds for o, i in mats.values())
    head = lm_head_seconds(spec, host_dev, backend)
    attn = attention_cost(host_dev, [context], spec.heads, spec.kv_heads, spec.head_dim).seconds
    return {
        "gemv_s": spec.layers * gemv,
        "lm_head_s": head,
        "attention_s": spec.layers * attn,
        "total_s": spec.layers * (gemv + attn) + head,
    }


@dataclass(frozen=True)
class Step:
    """One step of a DDB layer: the GEMM (or attention) the compute threads run, what the
    copy threads copy meanwhile, and the step's time (both finish before the next)."""

    name: str
    compute_s: float
    copy_s: float
    copies: str

    @property
    def seconds(self) -> float:
        """The step's time: the longer of the two thread groups."""
        return max(self.compute_s, self.copy_s)

    @property
    def critical(self) -> str:
        """Which thread group is the critical path (Fig. 11's bold bars)."""
        return "copy" if self.copy_s > self.compute_s else "compute"


#: S-DDB's per-layer schedule (Fig. 5): each step's GEMM and the copies overlapped with it,
#: as (matrix, fraction, of the next layer). FF0 is copied in quarters over Q, K, V and O;
#: FF0 and FF1 copy the next FF matrix; FF2 preloads the next layer's Q, K, V and O. No copy
#: runs during attention (4.1: copies "are not issued during relatively memory bound layers
#: such as non-linear functions, normalization, and attention").
DDB_SCHEDULE: tuple[tuple[str, tuple[tuple[str, float, bool], ...]], ...] = (
    ("q", (("ff0", 0.25, False),)),
    ("k", (("ff0", 0.25, False),)),
    ("v", (("ff0", 0.25, False),)),
    (ATTENTION, ()),
    ("o", (("ff0", 0.25, False),)),
    ("ff0", (("ff1", 1.0, False),)),
    ("ff1", (("ff2", 1.0, False),)),
    ("ff2", (("q", 1.0, True), ("k", 1.0, True), ("v", 1.0, True), ("o", 1.0, True))),
)


def ddb_layer(compute: dict[str, float], copy: dict[str, float], last: bool) -> list[Step]:
    """The steps of one S-DDB layer (:data:`DDB_SCHEDULE`) from each GEMM's seconds
    (``compute``, with ``attention``) and each matrix's copy seconds (``copy``); the last
    layer has no next layer to preload."""
    steps = []
    for name, copies in DDB_SCHEDULE:
        done = [(m, f) for m, f, nxt in copies if not (nxt and last)]
        label = " + ".join(m.upper() if f == 1 else f"{f:g} {m.upper()}" for m, f in done)
        steps.append(Step(name, compute[name], sum(f * copy[m] for m, f in done), label or "-"))
    return steps


class Prefill(StrEnum):
    """How prefill gets host-friendly cacheable weights."""

    DIRECT = "direct"  # they are already there (WD) or an oracle shows them so (FACIL-O)
    DOUBLE_BUFFER = "double-buffer"  # S-DDB
    ONLINE = "online"  # S-OWR


def _direct(compute: dict[str, float], copy2: dict[str, float], copy4: dict[str, float],
            layers: int) -> dict[str, Any]:  # fmt: skip
    per_layer = sum(compute.values())
    return {"preload_s": 0.0, "copy_s": 0.0, "layers_s": layers * per_layer}


def _double_buffer(compute: dict[str, float], copy2: dict[str, float], copy4: dict[str, float],
                   layers: int) -> dict[str, Any]:  # fmt: skip
    preload = sum(copy2[m] for m in ("q", "k", "v", "o"))
    inner = ddb_layer(compute, copy2, last=False)
    last = ddb_layer(compute, copy2, last=True)
    total = (layers - 1) * sum(s.seconds for s in inner) + sum(s.seconds for s in last)
    copies = sum(copy2.values())
    return {"preload_s": preload, "copy_s": layers * copies, "layers_s": total, "steps": inner}


def _online(compute: dict[str, float], copy2: dict[str, float], copy4: dict[str, float],
            layers: int) -> dict[str, Any]:  # fmt: skip
    copies = sum(copy4.values())
    return {"preload_s": 0.0, "copy_s": layers * copies,
            "layers_s": layers * (sum(compute.values()) + copies)}  # fmt: skip


#: The prefill model of each way (the strategies' registry, ``sim/experiments/sherpa.py``,
#: names one per strategy).
PREFILL_MODELS = {
    Prefill.DIRECT: _direct,
    Prefill.DOUBLE_BUFFER: _double_buffer,
    Prefill.ONLINE: _online,
}


def prefill(
    way: Prefill,
    spec: ModelSpec,
    host: SherpaHost,
    sl: int,
    backend: BackendConfig | None,
) -> dict[str, Any]:
    """Prefill of ``sl`` tokens: GEMMs and attention of every layer, the weight copies
    ``way`` needs, and the LM head on the last token (a GEMV: on PIM if ``backend``, else on
    the host). Returns the parts and ``ttft_s``."""
    if isinstance(sl, bool) or not isinstance(sl, int) or sl < 1:
        raise SherpaError(f"sequence length {sl!r}: must be a positive integer")
    dev = gemm_device(host)
    full = load_xpu(host.host_xpu)
    compute = layer_gemm_seconds(dev, spec, sl)
    peak = full.memory.bandwidth_gbps
    nbytes = {k: o * i * spec.element_bytes for k, (o, i) in weight_matrices(spec).items()}
    copy2 = {k: smc_seconds(host, peak, b, host.ddb_threads) for k, b in nbytes.items()}
    copy4 = {k: smc_seconds(host, peak, b, host.owr_threads) for k, b in nbytes.items()}
    parts = PREFILL_MODELS[way](compute, copy2, copy4, spec.layers)
    head = lm_head_seconds(spec, full, backend)
    gemm = spec.layers * sum(v for k, v in compute.items() if k != ATTENTION)
    parts.update(
        gemm_s=gemm,
        attention_s=spec.layers * compute[ATTENTION],
        lm_head_s=head,
        ttft_s=parts["preload_s"] + parts["layers_s"] + head,
    )
    parts["tokens_per_s"] = sl / parts["ttft_s"]
    return parts


def table2(sl: int, flop_per_byte: float) -> dict[str, float]:
    """Table 2's analytic model (3.3), in units of ``t``, one read of the weights: GEMM
    ``max(1, SL / (FLOP/B)) t``, online rearrangement ``3 t``, and SUM (serial) and MAX
    (overlapped) relative to GEMM alone."""
    gemm = max(1.0, sl / flop_per_byte)
    return {"gemm_t": gemm, "online_t": 3.0, "sum_vs_gemm": (gemm + 3) / gemm,
            "max_vs_gemm": max(gemm, 3.0) / gemm}  # fmt: skip


def end_to_end(ttft: float, decode_step: list[float]) -> float:
    """TTFT (the first token) plus one decode step per further token."""
    return ttft + math.fsum(decode_step)
