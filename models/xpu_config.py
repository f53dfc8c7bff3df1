"""Compute devices (xPUs: GPUs, NPUs, near-memory processors, CPUs) as data.

A device preset is a TOML file in ``configs/xpu/`` with the top-level keys ``name``, ``kind``
and ``source`` and the sections ``[compute]``, ``[peak_tflops]``, ``[memory]`` and
``[links]``; a device with systolic arrays adds ``[systolic]``, one with vector units
``[vector]``, one that pays per kernel ``[kernel]`` (all keys of a section present are then
required). Every key is typed and ranged; errors name the file, the section, the key, the
value and what is allowed. A preset may ``extends = "other"`` another and state only what
differs. Loading shares the strict
helpers of :mod:`models.config`. The cost model is :mod:`models.xpu`; ``docs/xpu.md``
documents both.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from pimphony.models.config import (
    CONFIG_DIR,
    ConfigError,
    check_value,
    find_toml,
    reject_unknown_keys,
    require_key,
    resolve_extends,
)

__all__ = [
    "PRECISION_BYTES",
    "XPU_DIR",
    "XPU_FIELD_RANGES",
    "KERNEL_COSTS_ENV",
    "DeviceKind",
    "KernelCosts",
    "MemoryType",
    "PeakTflops",
    "Precision",
    "SystolicArrays",
    "VectorUnits",
    "XpuCompute",
    "XpuEnergy",
    "XpuConfig",
    "XpuConfigError",
    "XpuLinks",
    "XpuMemory",
    "available_xpus",
    "kernel_costs_enabled",
    "load_xpu",
    "load_xpu_config",
]

XPU_DIR = CONFIG_DIR / "xpu"

#: Environment variable that, set to ``0``, loads every preset without its ``[kernel]`` table
#: (the roofline of before per-kernel costs; ``pimphony --no-kernel-costs`` sets it). An
#: environment variable rather than a module flag so Ray workers and subprocesses inherit it.
KERNEL_COSTS_ENV = "PIMPHONY_KERNEL_COSTS"


class XpuConfigError(ConfigError):
    """A device preset file is malformed, out of range or inconsistent."""


class Precision(StrEnum):
    """Number formats a device's matrix engine computes in."""

    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    INT8 = "int8"


#: Bytes per element of each precision (weights, activations and KV are stored in it).
PRECISION_BYTES: dict[Precision, int] = {
    Precision.FP16: 2,
    Precision.BF16: 2,
    Precision.FP8: 1,
    Precision.INT8: 1,
}


class DeviceKind(StrEnum):
    """What a device is (which systems may use it: a GPU baseline takes a ``gpu``)."""

    GPU = "gpu"
    NPU = "npu"
    PNM = "pnm"
    CPU = "cpu"


class MemoryType(StrEnum):
    """The DRAM a device reads its weights and KV from (informative, checked)."""

    HBM2 = "hbm2"
    HBM2E = "hbm2e"
    HBM3 = "hbm3"
    GDDR6 = "gddr6"
    LPDDR5X = "lpddr5x"


@dataclass(frozen=True)
class XpuCompute:
    """Clock, default precision, vector peak and the compute efficiency cap.

    Attributes
    ----------
    precision : Precision
        The precision the device runs a 16-bit model in unless told otherwise; its
        ``[peak_tflops]`` entry must be non-zero.
    freq_ghz : float
        Clock of the compute engines (the systolic and vector geometry's peaks use it).
    vector_tflops : float
        Peak of the units that run element-wise work (softmax, norms, activations), TFLOP/s.
    efficiency : float
        Cap on the fraction of peak FLOP/s any operation reaches, in (0, 1].
    """

    precision: Precision
    freq_ghz: float
    vector_tflops: float
    efficiency: float


@dataclass(frozen=True)
class PeakTflops:
    """Dense peak of the matrix engine per precision, TFLOP/s (0: not supported/not stated)."""

    fp16: float
    bf16: float
    fp8: float
    int8: float

    def of(self, precision: Precision) -> float:
        """The peak at ``precision``, TFLOP/s."""
        return getattr(self, Precision(precision).value)


@dataclass(frozen=True)
class XpuMemory:
    """The device's DRAM and on-chip buffer.

    Attributes
    ----------
    type : MemoryType
        DRAM standard.
    bandwidth_gbps : float
        Peak DRAM bandwidth, GB/s (10^9 bytes per second, as the PIM presets' link fields).
    capacity_gib : float
        DRAM capacity, GiB.
    efficiency : float
        Cap on the fraction of peak bandwidth any operation reaches, in (0, 1].
    buffer_kib : int
        On-chip buffer (L2, scratchpad) that holds a GEMM's stationary operand, KiB.
    """

    type: MemoryType
    bandwidth_gbps: float
    capacity_gib: float
    efficiency: float
    buffer_kib: int


@dataclass(frozen=True)
class XpuLinks:
    """Link bandwidths, GB/s: to the host and between devices of one system (0: none)."""

    host_gbps: float
    device_gbps: float


@dataclass(frozen=True)
class SystolicArrays:
    """``arrays`` weight-stationary systolic arrays of ``rows`` x ``cols`` processing elements."""

    arrays: int
    rows: int
    cols: int


@dataclass(frozen=True)
class VectorUnits:
    """``units`` vector units of ``lanes`` lanes, one operation per lane per cycle."""

    units: int
    lanes: int


@dataclass(frozen=True)
class XpuEnergy:
    """Activity energy of the device (``docs/energy.md``): per issued FLOP of its engines and
    per byte of DRAM traffic, pJ. On-chip buffer traffic and static power are not modelled
    (the cost model counts neither)."""

    pj_per_flop: float
    pj_per_dram_byte: float


@dataclass(frozen=True)
class KernelCosts:
    """What every kernel pays beyond the roofline (``docs/xpu.md``, Per-kernel costs).

    Attributes
    ----------
    launch_us : float
        Launch and synchronisation time of one kernel after the one it depends on, us: the
        time a chain of dependent kernels adds per kernel beyond their work (0: none).
    dram_latency_ns : float
        Latency of one DRAM access as a dependent load sees it, ns: a kernel that reads from
        DRAM waits this long for its first bytes, then streams at the capped bandwidth
        (Little's law; 0: none).
    """

    launch_us: float
    dram_latency_ns: float


@dataclass(frozen=True)
class XpuConfig:
    """A validated device preset (``docs/xpu.md``)."""

    name: str
    kind: DeviceKind
    source: str
    compute: XpuCompute
    peak_tflops: PeakTflops
    memory: XpuMemory
    links: XpuLinks
    systolic: SystolicArrays | None = None
    vector: VectorUnits | None = None
    energy: XpuEnergy | None = None
    kernel: KernelCosts | None = None

    def peak_flops(self, precision: Precision | None = None) -> float:
        """Matrix-engine peak at ``precision`` (default: the device's), FLOP/s; refuses 0."""
        precision = Precision(precision or self.compute.precision)
        tflops = self.peak_tflops.of(precision)
        if tflops == 0:
            have = [p.value for p in Precision if self.peak_tflops.of(p) > 0]
            raise XpuConfigError(
                f"{self.name}: no {precision} peak ([peak_tflops] {precision} = 0: not "
                f"supported or not stated); it has: {', '.join(have)}"
            )
        return tflops * 1e12

    @property
    def vector_flops(self) -> float:
        """Element-wise peak, FLOP/s."""
        return self.compute.vector_tflops * 1e12

    @property
    def bandwidth(self) -> float:
        """Peak DRAM bandwidth, bytes/s."""
        return self.memory.bandwidth_gbps * 1e9

    @property
    def capacity_bytes(self) -> int:
        """DRAM capacity, bytes."""
        return round(self.memory.capacity_gib * 2**30)

    @property
    def buffer_bytes(self) -> int:
        """On-chip buffer, bytes."""
        return self.memory.buffer_kib * 1024

    @property
    def launch_seconds(self) -> float:
        """Launch and synchronisation time of one kernel, s (0 without ``[kernel]``)."""
        return self.kernel.launch_us * 1e-6 if self.kernel else 0.0

    @property
    def dram_latency_seconds(self) -> float:
        """DRAM access latency, s (0 without ``[kernel]``)."""
        return self.kernel.dram_latency_ns * 1e-9 if self.kernel else 0.0

    def roofline(self) -> XpuConfig:
        """This device without per-kernel costs (``kernel = None``): the pure roofline."""
        return replace(self, kernel=None)

    def to_dict(self) -> dict[str, Any]:
        """Every value as a dict (``dataclasses.asdict``); ``kernel`` only when set, so a
        preset without per-kernel costs records what it recorded before they existed."""
        values = asdict(self)
        if self.kernel is None:
            del values["kernel"]
        return values


_SECTIONS: dict[str, type] = {
    "compute": XpuCompute,
    "peak_tflops": PeakTflops,
    "memory": XpuMemory,
    "links": XpuLinks,
}
_OPTIONAL: dict[str, type] = {
    "systolic": SystolicArrays,
    "vector": VectorUnits,
    "energy": XpuEnergy,
    "kernel": KernelCosts,
}
_TOP = ("name", "kind", "source")
#: Fields that take a choice from an enum: (section, key) -> the enum.
_CHOICES: dict[tuple[str, str], type[StrEnum]] = {
    ("", "kind"): DeviceKind,
    ("compute", "precision"): Precision,
    ("memory", "type"): MemoryType,
}
#: Efficiency caps: a fraction of peak in (0, 1].
_CAPS = {("compute", "efficiency"), ("memory", "efficiency")}
_KINDS = {"int": int, "float": float}

_TFLOPS = (0, 100_000.0, "TFLOP/s")  # 0: not supported or not stated
_LINK = (0, 100_000.0, "GB/s")  # 0: no such link
_COUNT = (1, 1 << 16, "units")
#: The physical range of every numeric field: (lowest, highest, unit). A range starting at 0
#: admits 0 (its meaning is in the field's docstring); every other value must be positive.
XPU_FIELD_RANGES: dict[str, dict[str, tuple[float, float, str]]] = {
    "compute": {"freq_ghz": (0.01, 10.0, "GHz"), "vector_tflops": (1e-6, 100_000.0, "TFLOP/s")},
    "peak_tflops": {p.value: _TFLOPS for p in Precision},
    "memory": {
        "bandwidth_gbps": (0.001, 1_000_000.0, "GB/s"),
        "capacity_gib": (0.001, float(1 << 20), "GiB"),
        "buffer_kib": (1, 1 << 24, "KiB"),
    },
    "links": {"host_gbps": _LINK, "device_gbps": _LINK},
    "systolic": {"arrays": _COUNT, "rows": (1, 1 << 16, "PEs"), "cols": (1, 1 << 16, "PEs")},
    "vector": {"units": _COUNT, "lanes": (1, 1 << 20, "lanes")},
    "energy": {"pj_per_flop": (1e-4, 1e3, "pJ/FLOP"), "pj_per_dram_byte": (1e-3, 1e4, "pJ/B")},
    "kernel": {"launch_us": (0, 1e4, "us"), "dram_latency_ns": (0, 1e5, "ns")},
}


def available_xpus() -> list[str]:
    """Names of the device presets shipped in ``configs/xpu/``."""
    return sorted(p.stem for p in XPU_DIR.glob("*.toml"))


def load_xpu(name: str | Path) -> XpuConfig:
    """Load a shipped device preset by name (``a100-80gb``, ...) or a path to a TOML file."""
    return load_xpu_config(find_toml(str(name), XPU_DIR, XpuConfigError, "xPU", available_xpus))


def kernel_costs_enabled() -> bool:
    """False when :data:`KERNEL_COSTS_ENV` is ``0`` (presets load as pure rooflines)."""
    return os.environ.get(KERNEL_COSTS_ENV, "1") != "0"


def load_xpu_config(path: str | Path) -> XpuConfig:
    """Load and validate a device preset file (``extends`` resolved); without its
    ``[kernel]`` table when :func:`kernel_costs_enabled` is False."""
    raw = resolve_extends(Path(path), XPU_DIR, XpuConfigError, "xPU", available_xpus)
    cfg = _from_raw(raw, str(path))
    return cfg if kernel_costs_enabled() else cfg.roofline()


def _choice(where: str, value: Any, enum: type[StrEnum]) -> StrEnum:
    allowed = ", ".join(e.value for e in enum)
    if not isinstance(value, str) or value not in {e.value for e in enum}:
        raise XpuConfigError(f"{where}: not a known {enum.__name__}; allowed: {allowed}")
    return enum(value)


def _build(source: str, section: str, cls: type, table: Any) -> Any:
    head = f"{source}: [{section}] "
    if not isinstance(table, dict):
        raise XpuConfigError(f"{source}: [{section}] must be a table, got {type(table).__name__}")
    names = [f.name for f in fields(cls)]
    reject_unknown_keys(table, names, XpuConfigError, head)
    ranges = XPU_FIELD_RANGES.get(section, {})
    values = {}
    for f in fields(cls):
        value = require_key(table, f.name, XpuConfigError, head)
        where = f"{head}{f.name} = {value!r}"
        if (section, f.name) in _CHOICES:
            values[f.name] = _choice(where, value, _CHOICES[section, f.name])
            continue
        if (section, f.name) in _CAPS:
            ok = not isinstance(value, bool) and isinstance(value, int | float)
            if not ok or not 0 < value <= 1:
                raise XpuConfigError(
                    f"{where}: an efficiency cap must be a number in (0, 1] "
                    "(the largest fraction of peak an operation reaches)"
                )
            values[f.name] = float(value)
            continue
        lo, hi, unit = ranges[f.name]
        value = check_value(where, value, _KINDS[f.type], XpuConfigError, zero_ok=lo == 0)
        if not lo <= value <= hi:
            raise XpuConfigError(f"{where}: outside the physical range {lo:,} to {hi:,} {unit}")
        values[f.name] = value
    return cls(**values)


def _from_raw(raw: dict[str, Any], source: str) -> XpuConfig:
    head = f"{source}: "
    reject_unknown_keys(raw, [*_TOP, *_SECTIONS, *_OPTIONAL], XpuConfigError, head, " at top level")
    top = {}
    for key in _TOP:
        value = require_key(raw, key, XpuConfigError, head)
        where = f"{head}{key} = {value!r}"
        if ("", key) in _CHOICES:
            top[key] = _choice(where, value, _CHOICES["", key])
        else:
            top[key] = check_value(where, value, str, XpuConfigError)
    sections = {
        name: _build(source, name, cls, require_key(raw, name, XpuConfigError, head, section=True))
        for name, cls in _SECTIONS.items()
    }
    optional = {
        name: _build(source, name, cls, raw[name]) for name, cls in _OPTIONAL.items() if name in raw
    }
    cfg = XpuConfig(**top, **sections, **optional)
    _check_relations(cfg, source)
    return cfg


def _check_relations(cfg: XpuConfig, source: str) -> None:
    def fail(section: str, key: str, value: Any, why: str) -> None:
        raise XpuConfigError(f"{source}: [{section}] {key} = {value!r}: {why}")

    precision = cfg.compute.precision
    if cfg.peak_tflops.of(precision) == 0:
        have = [p.value for p in Precision if cfg.peak_tflops.of(p) > 0]
        fail(
            "compute",
            "precision",
            precision.value,
            f"its [peak_tflops] {precision} is 0; allowed: a precision with a peak "
            f"({', '.join(have) or 'none given'})",
        )
    freq = cfg.compute.freq_ghz
    if cfg.systolic is not None:
        sa = cfg.systolic
        # One multiply-accumulate (2 FLOP) per processing element per cycle at 16 bits.
        limit = 2 * sa.arrays * sa.rows * sa.cols * freq / 1000
        for p in (Precision.FP16, Precision.BF16):
            peak = cfg.peak_tflops.of(p)
            if peak > limit * (1 + 1e-9):
                fail(
                    "peak_tflops",
                    p.value,
                    peak,
                    f"exceeds what the arrays can do: 2 x {sa.arrays} x {sa.rows} x {sa.cols} "
                    f"x {freq:g} GHz = {limit:g} TFLOP/s",
                )
    if cfg.vector is not None:
        vu = cfg.vector
        limit = vu.units * vu.lanes * freq / 1000
        if cfg.compute.vector_tflops > limit * (1 + 1e-9):
            fail(
                "compute",
                "vector_tflops",
                cfg.compute.vector_tflops,
                f"exceeds what the vector units can do: {vu.units} x {vu.lanes} lanes x "
                f"{freq:g} GHz = {limit:g} TFLOP/s",
            )
    if cfg.capacity_bytes < cfg.buffer_bytes:
        fail(
            "memory",
            "buffer_kib",
            cfg.memory.buffer_kib,
            f"must not exceed the DRAM capacity ({cfg.memory.capacity_gib:g} GiB)",
        )
