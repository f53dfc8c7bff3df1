"""PIM back ends as data: DCC's multi-level abstraction (system, PIM group, PIM core).

DCC (seed 003, IV-A and Fig. 1) describes every near-bank PIM with three levels: a
**system** (a host xPU with its memory, beside some PIM devices), a **PIM group** (a channel
or pseudo-channel: group-level broadcast commands, optional group units such as a softmax
unit, group buffers, its own host bus) and a **PIM core** (a processing unit with its local
bank(s), SIMD width d and registers). A back end is a preset in ``configs/backends/`` that
fills the three in, loaded by the strict TOML helpers of :mod:`models.config`.

A back end of kind ``aim`` names a hardware preset (``hardware = "aim-16ch"``) and takes its
group and core from it, so no AiM number is stated twice; its command-level model is that
preset's channel TLM (``hardware_config``, :mod:`models.channel`); :func:`aim_backend` builds
one around any AiM preset (a decode step's module). The other kinds state ``[group]``,
``[core]`` and ``[timing]`` (their command-level models: ``hbm-pim`` :mod:`models.hbm_pim`,
``attacc`` :mod:`models.attacc`). A field with a default may be left out (``GroupSpec``'s
``pseudo_channels`` and ``ranks``, ``PimTiming``'s ``tCCD_AB``). ``docs/dcc.md`` cites every
value.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields, replace
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

from pimphony.models.config import (
    CONFIG_DIR,
    ConfigError,
    HardwareConfig,
    check_value,
    find_toml,
    load_preset,
    reject_unknown_keys,
    require_key,
    resolve_extends,
)
from pimphony.models.xpu_config import XpuConfig, kernel_costs_enabled, load_xpu

__all__ = [
    "BACKEND_DIR",
    "BACKEND_FIELD_RANGES",
    "BACKEND_SECTIONS",
    "BackendConfig",
    "BackendConfigError",
    "BackendKind",
    "CoreSpec",
    "CoreUnit",
    "DTYPE_BYTES",
    "GroupSpec",
    "HostAndDevices",
    "PimDtype",
    "PimTiming",
    "aim_backend",
    "available_backends",
    "load_backend",
    "load_backend_config",
]

BACKEND_DIR = CONFIG_DIR / "backends"


class BackendConfigError(ConfigError):
    """A back-end preset is malformed, out of range or inconsistent."""


class BackendKind(StrEnum):
    """The PIM architectures a back end can be."""

    AIM = "aim"
    HBM_PIM = "hbm-pim"
    ATTACC = "attacc"


class CoreUnit(StrEnum):
    """What a PIM core computes with."""

    MAC = "mac"  # AiM: a dot-product MAC tree per bank
    SIMD = "simd"  # HBM-PIM / LPDDR-PIM: a d-lane SIMD FPU run by a CRF program
    GEMV = "gemv"  # AttAcc: a fixed-function GEMV unit per bank


class PimDtype(StrEnum):
    """Number formats of a PIM core's datapath."""

    FP16 = "fp16"
    BF16 = "bf16"


#: Bytes per element of each PIM data type.
DTYPE_BYTES: dict[PimDtype, int] = {PimDtype.FP16: 2, PimDtype.BF16: 2}


@dataclass(frozen=True)
class HostAndDevices:
    """The system level: the host xPU (a ``configs/xpu/`` preset) and the PIM devices.

    ``onchip_bytes`` is the host's controllable on-chip memory (GPU shared memory), the
    staging buffer of DCC's rearrangement (IV-C); 0 means none (rearrange by direct copy).
    """

    host_xpu: str
    devices: int
    groups_per_device: int
    device_bytes: int
    onchip_bytes: int


@dataclass(frozen=True)
class GroupSpec:
    """One PIM group (a channel or pseudo-channel) and its host bus.

    ``banks`` banks in ``bank_groups`` bank groups, ``rows_per_bank`` rows of ``row_bytes``;
    the bus moves ``column_bytes`` per column command over ``bus_bits`` pins at ``pin_gbps``.
    ``broadcast``: group-level commands reach every core at once. ``units``: group-level
    compute units (e.g. ``softmax``); ``buffer_bytes``: group buffers (0: none).
    ``register_row``: the reserved row whose columns are the cores' registers and mode
    registers (command-level models only; 0 where there is none). ``pseudo_channels``: data
    buses of ``bus_bits / pseudo_channels`` pins each (an AttAcc channel has two JEDEC HBM3
    pseudo-channels); ``ranks``: ranks per pseudo-channel; the bank groups are split evenly
    over pseudo-channels x ranks (bank group ``g`` is in rank ``g // (bank_groups / (pseudo_
    channels x ranks))``).
    """

    kind: str
    banks: int
    bank_groups: int
    rows_per_bank: int
    row_bytes: int
    column_bytes: int
    bus_bits: int
    pin_gbps: float
    broadcast: bool
    units: tuple[str, ...]
    buffer_bytes: int
    register_row: int
    pseudo_channels: int = 1
    ranks: int = 1

    @property
    def columns_per_row(self) -> int:
        """Column commands per DRAM row."""
        return self.row_bytes // self.column_bytes

    @property
    def bus_gbps(self) -> float:
        """Peak bandwidth of the group's host bus in GB/s: pins x rate / 8."""
        return self.bus_bits * self.pin_gbps / 8


@dataclass(frozen=True)
class CoreSpec:
    """One PIM core: its unit, local banks, SIMD width d, registers and clock.

    ``input_regs`` / ``output_regs``: register entries of ``lanes`` elements (HBM-PIM GRF_A /
    GRF_B); ``crf_entries``: program memory (0: fixed function); ``pipeline_drain``: the
    triggering commands that must follow the last MAC before its result may be read (the
    dummy reads of PIM-SHERPA Algorithm 1).
    """

    unit: CoreUnit
    banks: int
    lanes: int
    dtype: PimDtype
    input_regs: int
    output_regs: int
    crf_entries: int
    pipeline_drain: int
    freq_mhz: float

    @property
    def element_bytes(self) -> int:
        """Bytes per element of the datapath."""
        return DTYPE_BYTES[self.dtype]

    @property
    def vector_bytes(self) -> int:
        """Bytes one SIMD operation consumes from a bank (one register entry)."""
        return self.lanes * self.element_bytes


@dataclass(frozen=True)
class PimTiming:
    """DRAM timing of a command-level back end, in command-clock cycles at ``freq_ghz``.

    JEDEC names; ``BL`` is the burst length in beats (a column occupies the bus ``BL / 2``
    cycles, double data rate), ``tRTRS`` the read-to-write bus turnaround. Read-to-write and
    write-to-read spacing follow DRAMSim2 (the controller PIMSimulator builds on):
    ``RL + BL/2 + tRTRS - WL`` and ``WL + BL/2 + tWTR_L``. ``tCCD_AB``: the spacing of
    all-bank MAC commands (AttAcc's power-constrained nCCDAB; 0 where there are none).
    """

    freq_ghz: float
    tCCD_S: int
    tCCD_L: int
    tRCD_RD: int
    tRCD_WR: int
    tRAS: int
    tRP: int
    tRC: int
    tRRD_S: int
    tRRD_L: int
    tFAW: int
    tRTP: int
    tWR: int
    tWTR_L: int
    RL: int
    WL: int
    BL: int
    tRTRS: int
    tCCD_AB: int = 0

    @property
    def burst_cycles(self) -> int:
        """Bus cycles of one column's data (``BL`` beats at double data rate)."""
        return self.BL // 2

    @property
    def read_to_write(self) -> int:
        """Cycles from a RD to the next WR (DRAMSim2's READ_TO_WRITE_DELAY)."""
        return self.RL + self.burst_cycles + self.tRTRS - self.WL

    @property
    def write_to_read(self) -> int:
        """Cycles from a WR to the next RD (DRAMSim2's WRITE_TO_READ_DELAY_B, same group)."""
        return self.WL + self.burst_cycles + self.tWTR_L

    @property
    def write_to_precharge(self) -> int:
        """Cycles from a WR to a PRE of its bank: data in, then write recovery tWR."""
        return self.WL + self.burst_cycles + self.tWR


@dataclass(frozen=True)
class BackendConfig:
    """A PIM back end: the three levels of DCC IV-A, and timing if it has a command model."""

    name: str
    kind: BackendKind
    source: str
    system: HostAndDevices
    group: GroupSpec
    core: CoreSpec
    timing: PimTiming | None = None
    hardware: str = ""
    hardware_config: HardwareConfig | None = None  # kind aim: the preset ``hardware`` names

    @property
    def clock_ghz(self) -> float | None:
        """The clock the back end's command-level model counts cycles in (GHz): ``[timing]``'s,
        or an AiM hardware preset's module clock (the channel TLM's); None without a model."""
        if self.timing is not None:
            return self.timing.freq_ghz
        if self.hardware_config is not None:
            return self.hardware_config.module.freq_ghz
        return None

    @property
    def cores_per_group(self) -> int:
        """PIM cores per group: its banks over each core's banks."""
        return self.group.banks // self.core.banks

    @property
    def groups(self) -> int:
        """PIM groups in the system."""
        return self.system.devices * self.system.groups_per_device

    @property
    def internal_gbps(self) -> float:
        """Bank-side bandwidth of the system in GB/s: every core reads one vector per core
        clock."""
        per_core = self.core.vector_bytes * self.core.freq_mhz / 1e3
        return per_core * self.cores_per_group * self.groups

    @property
    def bus_gbps(self) -> float:
        """Host-bus bandwidth of all groups together, GB/s."""
        return self.group.bus_gbps * self.groups

    def host(self) -> XpuConfig:
        """The host xPU preset (read once per name and cost model: a search asks for it per
        draft; :func:`~models.xpu_config.kernel_costs_enabled` may change between runs)."""
        return _host_xpu(self.system.host_xpu, kernel_costs_enabled())

    @property
    def host_gbps(self) -> float:
        """The bandwidth the host reads its memory at: peak x efficiency cap, GB/s."""
        mem = self.host().memory
        return mem.bandwidth_gbps * mem.efficiency


@cache
def _host_xpu(name: str, kernel_costs: bool) -> XpuConfig:
    return load_xpu(name)  # kernel_costs: the cache key of what load_xpu reads


#: Sections a back end of each kind states (an ``aim`` back end takes group and core from
#: its ``hardware`` preset).
BACKEND_SECTIONS: dict[BackendKind, tuple[str, ...]] = {
    BackendKind.AIM: ("system",),
    BackendKind.HBM_PIM: ("system", "group", "core", "timing"),
    BackendKind.ATTACC: ("system", "group", "core", "timing"),
}

_SECTION_CLASSES: dict[str, type] = {
    "system": HostAndDevices,
    "group": GroupSpec,
    "core": CoreSpec,
    "timing": PimTiming,
}

_CYC = (1, 10_000, "cycles")
#: The physical range of every back-end field: (lowest, highest, unit). ``docs/dcc.md``.
BACKEND_FIELD_RANGES: dict[str, dict[str, tuple[float, float, str]]] = {
    "system": {
        "devices": (1, 1024, "devices"),
        "groups_per_device": (1, 1024, "groups"),
        "device_bytes": (1 << 20, 1 << 40, "bytes"),
        "onchip_bytes": (0, 1 << 34, "bytes"),
    },
    "group": {
        "banks": (1, 1024, "banks"),
        "bank_groups": (1, 64, "bank groups"),
        "rows_per_bank": (1, 1 << 24, "rows"),
        "row_bytes": (32, 1 << 16, "bytes"),
        "column_bytes": (1, 1024, "bytes"),
        "bus_bits": (1, 4096, "pins"),
        "pin_gbps": (0.01, 100.0, "Gb/s per pin"),
        "buffer_bytes": (0, 1 << 30, "bytes"),
        "register_row": (0, (1 << 24) - 1, "row"),
        "pseudo_channels": (1, 16, "pseudo-channels"),
        "ranks": (1, 16, "ranks"),
    },
    "core": {
        "banks": (1, 64, "banks"),
        "lanes": (1, 1024, "lanes"),
        "input_regs": (0, 1 << 16, "entries"),
        "output_regs": (0, 1 << 16, "entries"),
        "crf_entries": (0, 4096, "instructions"),
        "pipeline_drain": (0, 64, "commands"),
        "freq_mhz": (1.0, 10_000.0, "MHz"),
    },
    "timing": {
        "freq_ghz": (0.05, 10.0, "GHz"),
        **{
            key: _CYC
            for key in (
                "tCCD_S", "tCCD_L", "tRCD_RD", "tRCD_WR", "tRAS", "tRP", "tRC", "tRRD_S",
                "tRRD_L", "tFAW", "tRTP", "tWR", "tWTR_L", "RL", "WL", "BL",
            )
        },
        "tRTRS": (0, 10_000, "cycles"),
        "tCCD_AB": (0, 10_000, "cycles"),
    },
}  # fmt: skip

_ENUMS: dict[str, type[StrEnum]] = {"unit": CoreUnit, "dtype": PimDtype}


def available_backends() -> list[str]:
    """Names of the back ends shipped in ``configs/backends/``."""
    return sorted(p.stem for p in BACKEND_DIR.glob("*.toml"))


def load_backend(name: str | Path) -> BackendConfig:
    """A shipped back end by name (``aim``, ``hbm-pim``, ``attacc``) or a ``.toml`` path."""
    path = find_toml(name, BACKEND_DIR, BackendConfigError, "back end", available_backends)
    return load_backend_config(path)


def load_backend_config(path: str | Path) -> BackendConfig:
    """Load and validate a back-end file (``extends`` resolved)."""
    raw = resolve_extends(
        Path(path), BACKEND_DIR, BackendConfigError, "back end", available_backends
    )
    return _from_raw(raw, str(path))


def _field(head: str, key: str, value: Any, kind: Any) -> Any:
    where = f"{head}{key} = {value!r}"
    if kind is bool:
        if not isinstance(value, bool):
            raise BackendConfigError(f"{where}: must be true or false")
        return value
    if isinstance(kind, type) and issubclass(kind, StrEnum):
        allowed = ", ".join(str(m) for m in kind)
        if not isinstance(value, str) or value not in {str(m) for m in kind}:
            raise BackendConfigError(f"{where}: unknown; allowed: {allowed}")
        return kind(value)
    if kind == "tuple[str, ...]":
        return tuple(check_value(where, value, list, BackendConfigError))
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise BackendConfigError(f"{where}: must be an integer, got {type(value).__name__}")
        return value
    if kind == "float":
        return check_value(where, value, float, BackendConfigError, zero_ok=True)
    return check_value(where, value, str, BackendConfigError)


def _build(source: str, section: str, table: Any, derived: dict[str, Any] | None = None) -> Any:
    """Section ``section`` of ``table``; ``derived`` keys come from elsewhere (stating them
    is an error)."""
    head = f"{source}: [{section}] "
    if not isinstance(table, dict):
        raise BackendConfigError(f"{source}: [{section}] must be a table")
    cls = _SECTION_CLASSES[section]
    derived = derived or {}
    names = [f.name for f in fields(cls) if f.name not in derived]
    reject_unknown_keys(table, names, BackendConfigError, head, " (the rest come from "
                        "'hardware')" if derived else "")  # fmt: skip
    values: dict[str, Any] = dict(derived)
    for f in fields(cls):
        if f.name in derived:
            continue
        if f.name not in table and f.default is not MISSING:
            values[f.name] = f.default
            continue
        value = require_key(table, f.name, BackendConfigError, head)
        kind = _ENUMS.get(f.name, bool if f.type == "bool" else f.type)
        values[f.name] = _field(head, f.name, value, kind)
    for key, (lo, hi, unit) in BACKEND_FIELD_RANGES[section].items():
        if not lo <= values[key] <= hi:
            raise BackendConfigError(
                f"{head}{key} = {values[key]!r}: outside the physical range {lo:,} to {hi:,} {unit}"
            )
    return cls(**values)


def _aim_levels(cfg: HardwareConfig) -> tuple[GroupSpec, CoreSpec]:
    """Group and core of an AiM hardware preset: a channel of ``banks`` one-bank MAC cores,
    the Global Buffer as the group buffer, OBuf entries as each core's output registers."""
    ch, module = cfg.channel, cfg.module
    group = GroupSpec(
        kind="channel",
        banks=ch.banks,
        bank_groups=1,
        rows_per_bank=ch.rows_per_bank,
        row_bytes=ch.row_bytes,
        column_bytes=ch.column_bytes,
        bus_bits=module.io_bytes_per_cycle * 8,
        pin_gbps=module.freq_ghz,  # io_bytes_per_cycle per channel clock
        broadcast=True,
        units=(),
        buffer_bytes=ch.gbuf_entries * ch.column_bytes,
        register_row=0,
    )
    core = CoreSpec(
        unit=CoreUnit.MAC,
        banks=1,
        lanes=ch.mac_elements,
        dtype=PimDtype.FP16,
        input_regs=0,
        output_regs=ch.obuf_entries,
        crf_entries=0,
        pipeline_drain=0,
        freq_mhz=module.freq_ghz * 1e3,
    )
    return group, core


def aim_backend(hw: HardwareConfig, base: str | Path = "aim") -> BackendConfig:
    """An AiM back end of hardware ``hw`` (e.g. a decode step's module): the ``system`` of
    back end ``base`` (host, devices, on-chip memory), group, core, ``groups_per_device`` and
    ``device_bytes`` from ``hw`` as :func:`load_backend` takes them from ``hardware``; named
    ``<base name>:<hw name>:<hw hash>`` so that different hardware never shares a name."""
    cfg = load_backend(base)
    if cfg.kind is not BackendKind.AIM:
        raise BackendConfigError(f"back end {cfg.name}: kind = {cfg.kind.value!r}, not 'aim'")
    group, core = _aim_levels(hw)
    system = replace(cfg.system, groups_per_device=hw.module.channels, device_bytes=hw.module_bytes)
    out = replace(
        cfg,
        name=f"{cfg.name}:{hw.name}:{hw.sha256()[:8]}",
        system=system,
        group=group,
        core=core,
        hardware=hw.name,
        hardware_config=hw,
    )
    _check_relations(out, f"back end {out.name}")
    return out


def _from_raw(raw: dict[str, Any], source: str) -> BackendConfig:
    top = ["name", "kind", "source", "hardware", *_SECTION_CLASSES]
    reject_unknown_keys(raw, top, BackendConfigError, f"{source}: ", " at top level")
    name = check_value(
        f"{source}: name = {raw.get('name')!r}", raw.get("name"), str, BackendConfigError
    )
    kind = _field(f"{source}: ", "kind", require_key(raw, "kind", BackendConfigError,
                                                       f"{source}: "), BackendKind)  # fmt: skip
    text = check_value(
        f"{source}: source = {raw.get('source')!r}", raw.get("source"), str, BackendConfigError
    )
    wanted = BACKEND_SECTIONS[kind]
    for section in _SECTION_CLASSES:
        if section in raw and section not in wanted:
            raise BackendConfigError(
                f"{source}: section [{section}] is not allowed for kind = {kind!r}; "
                f"allowed: {', '.join(f'[{s}]' for s in wanted)}"
            )
    hardware = ""
    hw_config: HardwareConfig | None = None
    derived: dict[str, Any] = {}
    levels: dict[str, Any] = {}
    if kind is BackendKind.AIM:
        hardware = check_value(
            f"{source}: hardware = {raw.get('hardware')!r}",
            require_key(raw, "hardware", BackendConfigError, f"{source}: "),
            str,
            BackendConfigError,
        )
        try:
            hw = load_preset(hardware)
        except ConfigError as exc:
            raise BackendConfigError(f"{source}: hardware: {exc}") from None
        levels["group"], levels["core"] = _aim_levels(hw)
        derived = {"groups_per_device": hw.module.channels, "device_bytes": hw.module_bytes}
        hw_config = hw
    elif "hardware" in raw:
        raise BackendConfigError(f"{source}: 'hardware' is only allowed for kind = 'aim'")
    built = {
        s: _build(
            source,
            s,
            require_key(raw, s, BackendConfigError, f"{source}: ", section=True),
            derived if s == "system" else None,
        )
        for s in wanted
    }
    built.update(levels)
    cfg = BackendConfig(
        name=name, kind=kind, source=text, hardware=hardware, hardware_config=hw_config, **built
    )
    _check_relations(cfg, source)
    return cfg


def _check_relations(cfg: BackendConfig, source: str) -> None:
    g, c, s, t = cfg.group, cfg.core, cfg.system, cfg.timing

    def fail(section: str, key: str, value: Any, why: str) -> None:
        raise BackendConfigError(f"{source}: [{section}] {key} = {value!r}: {why}")

    try:
        cfg.host()
    except ConfigError as exc:
        raise BackendConfigError(f"{source}: [system] host_xpu: {exc}") from None
    if g.banks % g.bank_groups:
        fail("group", "bank_groups", g.bank_groups, f"must divide banks = {g.banks}")
    if g.bank_groups % (g.pseudo_channels * g.ranks):
        fail("group", "bank_groups", g.bank_groups, f"must split evenly over pseudo_channels x "
             f"ranks = {g.pseudo_channels} x {g.ranks}")  # fmt: skip
    if g.bus_bits % g.pseudo_channels:
        fail("group", "pseudo_channels", g.pseudo_channels, f"must divide bus_bits = "
             f"{g.bus_bits}")  # fmt: skip
    if g.banks % c.banks:
        fail("core", "banks", c.banks, f"must divide the group's banks = {g.banks}")
    if g.row_bytes % g.column_bytes:
        fail("group", "row_bytes", g.row_bytes, f"must be a multiple of column_bytes = "
             f"{g.column_bytes}")  # fmt: skip
    if g.row_bytes % c.vector_bytes:
        fail(
            "core",
            "lanes",
            c.lanes,
            f"a SIMD vector of {c.lanes} x {c.element_bytes} B = {c.vector_bytes} B must divide "
            f"the row of {g.row_bytes} B",
        )
    if g.register_row >= g.rows_per_bank:
        fail("group", "register_row", g.register_row, f"must be < rows_per_bank = "
             f"{g.rows_per_bank}")  # fmt: skip
    bank_bytes = g.rows_per_bank * g.row_bytes
    if s.device_bytes < s.groups_per_device * g.banks * bank_bytes:
        need = s.groups_per_device * g.banks * bank_bytes
        fail(
            "system",
            "device_bytes",
            s.device_bytes,
            f"must hold groups_per_device x banks x rows x row_bytes = {need:,} bytes",
        )
    if c.unit is CoreUnit.SIMD and c.crf_entries == 0:
        fail("core", "crf_entries", 0, "a SIMD core runs a CRF program: must be >= 1")
    if t is None:
        return
    if c.vector_bytes != g.column_bytes:
        fail(
            "core",
            "lanes",
            c.lanes,
            f"one column command ({g.column_bytes} B) must feed exactly one SIMD vector "
            f"({c.vector_bytes} B) in a command-level model",
        )
    if t.tCCD_L < t.tCCD_S:
        fail("timing", "tCCD_L", t.tCCD_L, f"must be >= tCCD_S = {t.tCCD_S}")
    if t.tRC < t.tRAS:
        # JEDEC's tRC is tRAS + tRP; published cycle counts round it down by one
        # (Ramulator 2 HBM3_5.2Gbps: 63 < 45 + 19), harmless as ACT also waits PRE + tRP.
        fail("timing", "tRC", t.tRC, f"must be >= tRAS = {t.tRAS}")
    if t.BL % 2:
        fail("timing", "BL", t.BL, "must be even (two beats per clock)")
    if t.burst_cycles > t.tCCD_S:
        fail("timing", "BL", t.BL, f"a burst of BL/2 = {t.burst_cycles} cycles must fit in "
             f"tCCD_S = {t.tCCD_S}")  # fmt: skip
    timed = g.pseudo_channels * g.column_bytes * t.freq_ghz / t.burst_cycles
    if abs(timed - g.bus_gbps) > 1e-6 * timed:
        per = f"{g.pseudo_channels} x " if g.pseudo_channels > 1 else ""
        fail(
            "group",
            "pin_gbps",
            g.pin_gbps,
            f"the bus moves {g.bus_gbps:g} GB/s but the timing moves {per}{g.column_bytes} B per "
            f"BL/2 = {t.burst_cycles} cycles at {t.freq_ghz:g} GHz = {timed:g} GB/s",
        )
    if cfg.kind is BackendKind.ATTACC and t.tCCD_AB < 1:
        fail("timing", "tCCD_AB", t.tCCD_AB, "an AttAcc back end issues all-bank MACs: its "
             "spacing must be >= 1")  # fmt: skip
    if c.input_regs < 1 or c.output_regs < 1:
        fail("core", "input_regs", c.input_regs, "a command-level core needs >= 1 input and "
             "output register")  # fmt: skip
