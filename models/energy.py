"""Energy of PIM channel runs from their statistics, and the energy presets (``docs/energy.md``).

An energy preset (``configs/energy/*.toml``) states every value with its unit, what it is per
(``chip``, ``channel``, ``command``, ``bit``, ``FLOP``) and its source. Loading converts each to
one canonical unit: powers to mW per channel (a per-chip power divided by
``channels_per_chip``), windows to ns, energies to pJ per bit or per FLOP. A command's energy is
then power x window (mW x ns = pJ):

- ``E_ACT+PRE`` per bank = ``act_power`` x ``t_rc``; a row switch of a channel opens all
  ``banks`` banks, so it costs ``banks`` x that (the PRE of each ACT is in it);
- ``E_RD`` = ``rd_power`` x ``t_bl`` (a RD_OUT reads the banks' output registers: CENT charges
  its RDMAC16 as a column read);
- ``E_MAC`` = ``mac_rd_factor`` x ``rd_power`` x ``t_ccd_l`` (one all-bank MAC);
- I/O over the pins: ``dq_energy`` x the bits of one column (32 B = 256 bit) per WR_INP and
  per RD_OUT (a WR_INP writes the Global Buffer, not the cells: no ``wr_power`` term, as CENT
  charges its WRGB);
- background: ``act_standby_power`` x active residency + ``pre_standby_power`` x precharged
  residency, x tCK of the hardware preset.

The channel model keeps statistics only (counts per opcode, the number of row switches,
cycles, the time breakdown), so residency is derived from them (:func:`channel_activity`):
the channel is precharged for ``tRP`` after each row switch that precharges (every switch but
the first, which opens a closed channel) and before its first activation; it is active for
the rest of the run. The cycles before the first activation are not in the statistics: they
are taken as 0 (the first ACT at cycle 0), which overstates active standby by at most that
many cycles x (``act_standby_power`` - ``pre_standby_power``). The row left open at the end is
closed by the PRE already charged with its ACT; its residency ends with the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from models.config import (
    CONFIG_DIR,
    ConfigError,
    HardwareConfig,
    check_value,
    find_toml,
    reject_unknown_keys,
    require_key,
    resolve_extends,
)
from models.isa import Op

__all__ = [
    "DEFAULT_ENERGY",
    "ENERGY_DIR",
    "ENERGY_FIELDS",
    "PARTS",
    "UNITS",
    "ChannelActivity",
    "Energy",
    "EnergyConfigError",
    "EnergyParams",
    "Part",
    "available_energy_presets",
    "background_energy",
    "channel_activity",
    "channel_energy",
    "dynamic_energy",
    "load_energy",
    "load_energy_config",
]

ENERGY_DIR = CONFIG_DIR / "energy"
DEFAULT_ENERGY = "aim-cent"
"""The energy preset every report uses unless told otherwise (CENT's calculator values)."""


class EnergyConfigError(ConfigError):
    """An energy preset is malformed, in the wrong unit, or does not fit the hardware."""


class Part(StrEnum):
    """Where energy goes (the report's split, ``docs/energy.md``)."""

    MAC = "mac"  # all-bank MAC commands
    IO = "io"  # WR_INP / RD_OUT: the register read of RD_OUT and the DQ pins of both
    ACTIVATION = "activation"  # ACT+PRE pairs of row switches
    BACKGROUND = "background"  # active / precharged standby x residency
    EPU = "epu"  # the HUB's extra processing unit (softmax, reductions, norms)
    XPU = "xpu"  # the compute device of xPU+PIM or GPU systems
    LINKS = "links"  # host and inter-node links


PARTS: tuple[Part, ...] = tuple(Part)

#: Unit kinds: the units a value may be given in and the factor to the canonical unit (first).
UNITS: dict[str, dict[str, float]] = {
    "power": {"mW": 1.0, "W": 1e3, "uW": 1e-3},
    "time": {"ns": 1.0, "ps": 1e-3, "us": 1e3},
    "ratio": {"x": 1.0},
    "energy_per_bit": {"pJ/bit": 1.0, "fJ/bit": 1e-3, "nJ/bit": 1e3},
    "energy_per_flop": {"pJ/FLOP": 1.0, "fJ/FLOP": 1e-3, "nJ/FLOP": 1e3},
}

#: Every value of ``[values]``: (unit kind, what it may be per, meaning).
ENERGY_FIELDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "act_power": ("power", ("chip", "channel"), "one bank's ACT+PRE, held for t_rc"),
    "t_rc": ("time", ("command",), "window of act_power"),
    "rd_power": ("power", ("chip", "channel"), "a column read burst, held for t_bl"),
    "wr_power": ("power", ("chip", "channel"), "a column write burst, held for t_bl"),
    "t_bl": ("time", ("command",), "window of rd_power and wr_power"),
    "mac_rd_factor": ("ratio", ("command",), "an all-bank MAC in column reads"),
    "t_ccd_l": ("time", ("command",), "window of one all-bank MAC"),
    "act_standby_power": ("power", ("chip", "channel"), "background with a row open"),
    "pre_standby_power": ("power", ("chip", "channel"), "background with all banks closed"),
    "dq_energy": ("energy_per_bit", ("bit",), "off-chip data pins"),
    "host_link_energy": ("energy_per_bit", ("bit",), "module <-> host (CXL/PCIe)"),
    "internode_link_energy": ("energy_per_bit", ("bit",), "module <-> module"),
    "epu_energy": ("energy_per_flop", ("FLOP",), "HUB EPU arithmetic"),
}
_ENTRY_KEYS = ("value", "unit", "per", "source")
_TOP = ("name", "source", "channels_per_chip", "chips_per_module", "values")


def available_energy_presets() -> list[str]:
    """Names of the energy presets shipped in ``configs/energy/``."""
    return sorted(p.stem for p in ENERGY_DIR.glob("*.toml"))


@dataclass(frozen=True)
class EnergyParams:
    """A validated energy preset, every value in its canonical unit.

    Attributes
    ----------
    name, source : str
        Preset name and its sources.
    channels_per_chip : int
        Channels of one DRAM chip (per-chip powers are divided by it).
    chips_per_module : int or None
        Chips of one module if the preset states it (checked against the hardware by
        :meth:`chips`), else derived from the hardware's channels.
    values : dict
        ``ENERGY_FIELDS`` key -> value in mW per channel, ns, x, pJ/bit or pJ/FLOP.
    sources : dict
        ``ENERGY_FIELDS`` key -> its citation.
    """

    name: str
    source: str
    channels_per_chip: int
    chips_per_module: int | None
    values: dict[str, float]
    sources: dict[str, str]

    @property
    def act_pre_pj_per_bank(self) -> float:
        """``E_ACT+PRE`` of one bank, pJ: ``act_power`` (mW per channel) x ``t_rc`` (ns)."""
        return self.values["act_power"] * self.values["t_rc"]

    @property
    def rd_pj(self) -> float:
        """One column read burst (a RD_OUT's register read), pJ: ``rd_power`` x ``t_bl``."""
        return self.values["rd_power"] * self.values["t_bl"]

    @property
    def wr_pj(self) -> float:
        """One column write burst, pJ: ``wr_power`` x ``t_bl`` (no command of ours uses it)."""
        return self.values["wr_power"] * self.values["t_bl"]

    @property
    def mac_pj(self) -> float:
        """One all-bank MAC, pJ: ``mac_rd_factor`` x ``rd_power`` x ``t_ccd_l``."""
        v = self.values
        return v["mac_rd_factor"] * v["rd_power"] * v["t_ccd_l"]

    def chips(self, cfg: HardwareConfig) -> int:
        """Chips of one module of ``cfg``: ``channels / channels_per_chip``; refuses a split
        that is not whole and a stated ``chips_per_module`` that differs."""
        ch = cfg.module.channels
        if ch % self.channels_per_chip:
            raise EnergyConfigError(
                f"energy preset {self.name}: channels_per_chip = {self.channels_per_chip} does "
                f"not divide the {ch} channels of hardware preset {cfg.name}; allowed: a "
                f"divisor of {ch}"
            )
        chips = ch // self.channels_per_chip
        if self.chips_per_module is not None and self.chips_per_module != chips:
            raise EnergyConfigError(
                f"energy preset {self.name}: chips_per_module = {self.chips_per_module} but "
                f"hardware preset {cfg.name} has {ch} channels / channels_per_chip "
                f"{self.channels_per_chip}; allowed: {chips}"
            )
        return chips

    def per_command(self, cfg: HardwareConfig) -> dict[str, Any]:
        """Per-command energies and per-channel powers on ``cfg`` (JSON-ready, for reports)."""
        v = self.values
        chips = self.chips(cfg)
        return {
            "preset": self.name,
            "chips_per_module": chips,
            "channels_per_chip": self.channels_per_chip,
            "act_pre_pj_per_bank": self.act_pre_pj_per_bank,
            "row_switch_pj": self.row_switch_pj(cfg),
            **{f"{op.lower()}_pj": pj for op, pj in self.op_pj(cfg).items()},
            "act_standby_mw_per_channel": v["act_standby_power"],
            "pre_standby_mw_per_channel": v["pre_standby_power"],
            "module_pre_standby_mw": chips * self.channels_per_chip * v["pre_standby_power"],
        }

    def op_pj(self, cfg: HardwareConfig) -> dict[str, float]:
        """Energy of one command per opcode name, pJ: MAC; WR_INP = the pins; RD_OUT = the
        column read + the pins."""
        dq = self.dq_pj(cfg)
        return {"MAC": self.mac_pj, "RD_OUT": self.rd_pj + dq, "WR_INP": dq}

    def row_switch_pj(self, cfg: HardwareConfig) -> float:
        """One all-bank row switch, pJ: ``banks`` x ACT+PRE per bank."""
        return cfg.channel.banks * self.act_pre_pj_per_bank

    def dq_pj(self, cfg: HardwareConfig) -> float:
        """One 32 B column over the pins, pJ: ``dq_energy`` x 8 x ``column_bytes``."""
        return self.values["dq_energy"] * 8 * cfg.channel.column_bytes

    def link_pj(self, nbytes: float, link: str) -> float:
        """``nbytes`` over the ``host`` or ``internode`` link, pJ."""
        key = {"host": "host_link_energy", "internode": "internode_link_energy"}.get(link)
        if key is None:
            raise ValueError(f"link {link!r} is unknown; allowed: host, internode")
        return self.values[key] * 8 * nbytes


def load_energy(name: str | Path = DEFAULT_ENERGY) -> EnergyParams:
    """Load a shipped energy preset by name (``aim-cent``) or a path to a TOML file."""
    path = find_toml(str(name), ENERGY_DIR, EnergyConfigError, "energy preset", _available)
    return load_energy_config(path)


def _available() -> list[str]:
    return available_energy_presets()


def load_energy_config(path: str | Path) -> EnergyParams:
    """Load and validate an energy preset file (``extends`` resolved).

    Errors (:class:`EnergyConfigError`) name the file, the field, the value and what is
    allowed: an unknown or missing key, a unit of the wrong kind, a ``per`` the field cannot
    be, a value out of range, a missing source.
    """
    raw = resolve_extends(Path(path), ENERGY_DIR, EnergyConfigError, "energy preset", _available)
    return _from_raw(raw, str(path))


def _from_raw(raw: dict[str, Any], source: str) -> EnergyParams:
    head = f"{source}: "
    reject_unknown_keys(raw, _TOP, EnergyConfigError, head, " at top level")
    name = check_value(
        f"{head}name = {raw.get('name')!r}", require_key(raw, "name", EnergyConfigError, head),
        str, EnergyConfigError,
    )  # fmt: skip
    src = require_key(raw, "source", EnergyConfigError, head)
    check_value(f"{head}source = {src!r}", src, str, EnergyConfigError)
    cpc = require_key(raw, "channels_per_chip", EnergyConfigError, head)
    check_value(f"{head}channels_per_chip = {cpc!r}", cpc, int, EnergyConfigError)
    chips = raw.get("chips_per_module")
    if chips is not None:
        check_value(f"{head}chips_per_module = {chips!r}", chips, int, EnergyConfigError)
    table = require_key(raw, "values", EnergyConfigError, head, section=True)
    if not isinstance(table, dict):
        raise EnergyConfigError(f"{head}[values] must be a table, got {type(table).__name__}")
    reject_unknown_keys(table, list(ENERGY_FIELDS), EnergyConfigError, f"{head}[values] ")
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    for key, (kind, pers, _meaning) in ENERGY_FIELDS.items():
        entry = require_key(table, key, EnergyConfigError, f"{head}[values] ")
        where = f"{head}[values] {key}"
        if not isinstance(entry, dict):
            raise EnergyConfigError(
                f"{where} = {entry!r}: must be a table {{ value, unit, per, source }}"
            )
        reject_unknown_keys(entry, _ENTRY_KEYS, EnergyConfigError, f"{where}: ")
        for k in _ENTRY_KEYS:
            require_key(entry, k, EnergyConfigError, f"{where}: ")
        unit, per, cite = entry["unit"], entry["per"], entry["source"]
        allowed = UNITS[kind]
        if unit not in allowed:
            raise EnergyConfigError(
                f"{where}.unit = {unit!r}: not a unit of {kind.replace('_', ' ')}; "
                f"allowed: {', '.join(allowed)}"
            )
        if per not in pers:
            raise EnergyConfigError(
                f"{where}.per = {per!r}: {key} cannot be per {per}; allowed: {', '.join(pers)}"
            )
        check_value(f"{where}.source = {cite!r}", cite, str, EnergyConfigError)
        value = check_value(
            f"{where}.value = {entry['value']!r}", entry["value"], float, EnergyConfigError,
            zero_ok=True,
        )  # fmt: skip
        value *= allowed[unit]
        if per == "chip":
            value /= cpc
        values[key] = value
        sources[key] = cite
    return EnergyParams(name, src, cpc, chips, values, sources)


@dataclass(frozen=True)
class Energy:
    """Energy by :class:`Part`, in pJ; :attr:`total` is their sum in field order (exactly)."""

    mac: float = 0.0
    io: float = 0.0
    activation: float = 0.0
    background: float = 0.0
    epu: float = 0.0
    xpu: float = 0.0
    links: float = 0.0

    @property
    def parts(self) -> dict[str, float]:
        """Part name -> pJ, in :data:`PARTS` order."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def total(self) -> float:
        """All parts, pJ (summed in :data:`PARTS` order, so ``sum(parts.values()) == total``)."""
        return sum(self.parts.values())

    def __add__(self, other: Energy) -> Energy:
        return Energy(**{k: v + getattr(other, k) for k, v in self.parts.items()})

    def scaled(self, k: float) -> Energy:
        """Every part times ``k``."""
        return Energy(**{n: v * k for n, v in self.parts.items()})

    def to_dict(self, unit: str = "pJ") -> dict[str, Any]:
        """JSON-ready: ``{"unit", <part>: value, ..., "total"}`` in ``pJ`` or ``J``."""
        scale = {"pJ": 1.0, "J": 1e-12}.get(unit)
        if scale is None:
            raise ValueError(f"unit {unit!r} is unknown; allowed: pJ, J")
        out: dict[str, Any] = {"unit": unit}
        out.update({k: v * scale for k, v in self.parts.items()})
        out["total"] = sum(v for k, v in out.items() if k != "unit")
        return out


@dataclass(frozen=True)
class ChannelActivity:
    """What the energy model reads of one or more channel runs (statistics only).

    ``counts`` per opcode name, ``row_switches`` (activations, the first of a run included),
    ``precharged_cycles`` and ``active_cycles`` (residency, :func:`channel_activity`).
    Activities add (a channel running kernels one after another, or many channels).
    """

    counts: Mapping[str, int]
    row_switches: int
    active_cycles: int
    precharged_cycles: int

    @property
    def cycles(self) -> int:
        """Channel-cycles covered."""
        return self.active_cycles + self.precharged_cycles

    def __add__(self, other: ChannelActivity) -> ChannelActivity:
        names = dict.fromkeys([*self.counts, *other.counts])
        return ChannelActivity(
            {k: self.counts.get(k, 0) + other.counts.get(k, 0) for k in names},
            self.row_switches + other.row_switches,
            self.active_cycles + other.active_cycles,
            self.precharged_cycles + other.precharged_cycles,
        )

    def scaled(self, k: int) -> ChannelActivity:
        """``k`` identical runs."""
        return ChannelActivity(
            {n: k * v for n, v in self.counts.items()},
            k * self.row_switches,
            k * self.active_cycles,
            k * self.precharged_cycles,
        )

    @classmethod
    def zero(cls) -> ChannelActivity:
        """No activity."""
        return cls({o.name: 0 for o in Op}, 0, 0, 0)


def channel_activity(summary: Mapping[str, Any], cfg: HardwareConfig) -> ChannelActivity:
    """The activity of one run from its statistics (``ScheduleResult.to_dict()``: ``counts``,
    ``row_switches`` (a count), ``cycles``).

    Precharged residency = (row switches - 1) x tRP (every switch but the first precharges) +
    the cycles before the first activation, taken as 0 (not in the statistics); a run without
    a row switch is precharged throughout. Active residency = the rest of ``cycles``.
    """
    cycles = int(summary["cycles"])
    switches = int(summary["row_switches"])
    pre = cycles if switches == 0 else min(cycles, (switches - 1) * cfg.timing.tRP)
    counts = {o.name: int(summary["counts"].get(o.name, 0)) for o in Op}
    return ChannelActivity(counts, switches, cycles - pre, pre)


def dynamic_energy(act: ChannelActivity, cfg: HardwareConfig, params: EnergyParams) -> Energy:
    """MAC, I/O and activation energy of ``act`` (pJ): counts x per-command energies."""
    c, pj = act.counts, params.op_pj(cfg)
    return Energy(
        mac=c.get("MAC", 0) * pj["MAC"],
        io=c.get("WR_INP", 0) * pj["WR_INP"] + c.get("RD_OUT", 0) * pj["RD_OUT"],
        activation=act.row_switches * params.row_switch_pj(cfg),
    )


def background_energy(
    active_cycles: float, precharged_cycles: float, cfg: HardwareConfig, params: EnergyParams
) -> float:
    """Standby energy, pJ: (``act_standby_power`` x active + ``pre_standby_power`` x
    precharged channel-cycles) x tCK (mW x ns = pJ)."""
    if active_cycles < 0 or precharged_cycles < 0:
        raise ValueError(f"residency must be >= 0, got {active_cycles}, {precharged_cycles}")
    t_ck_ns = 1.0 / cfg.module.freq_ghz
    v = params.values
    return (
        v["act_standby_power"] * active_cycles + v["pre_standby_power"] * precharged_cycles
    ) * t_ck_ns


def channel_energy(act: ChannelActivity, cfg: HardwareConfig, params: EnergyParams) -> Energy:
    """Energy of channel activity ``act`` (pJ): dynamic parts plus its background."""
    bg = background_energy(act.active_cycles, act.precharged_cycles, cfg, params)
    d = dynamic_energy(act, cfg, params)
    return Energy(mac=d.mac, io=d.io, activation=d.activation, background=bg)
