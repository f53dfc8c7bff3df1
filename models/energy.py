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

A ``kind = "hbm"`` preset (:class:`HbmEnergyParams`, ``configs/energy/hbm-pim.toml``) states
energies per bit of the HBM data path (cells, column decoder -> bank-group mux -> global I/O
-> TSV -> interposer), per PIM MAC and the IDD standby currents; it converts AiM commands on
HBM2 (the same interface as :class:`EnergyParams`) and HBM-PIM command streams
(:func:`hbm_pim_activity`, :func:`hbm_pim_energy`). ``kind = "attacc"``
(:class:`AttAccEnergyParams`) adds AttAcc's softmax unit and buffer and converts AttAcc
streams (:func:`attacc_activity`, :func:`attacc_energy`); ``kind = "lpddr"``
(:class:`LpddrEnergyParams`) puts the package's data pins in place of TSV and interposer and
states standby powers per channel (LPDDR5X-PIM, PIM-SHERPA).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pimphony.models.config import (
    CONFIG_DIR,
    ConfigError,
    HardwareConfig,
    check_value,
    find_toml,
    reject_unknown_keys,
    require_key,
    resolve_extends,
)
from pimphony.models.isa import Op

if TYPE_CHECKING:
    from pimphony.models.backends import BackendConfig

__all__ = [
    "ATTACC_FIELDS",
    "DEFAULT_ENERGY",
    "ENERGY_DIR",
    "ENERGY_FIELDS",
    "FIELDS_OF",
    "HBM_FIELDS",
    "LPDDR_FIELDS",
    "PARTS",
    "UNITS",
    "UNIT_LIMITS",
    "ActBasis",
    "AttAccActivity",
    "AttAccEnergyParams",
    "ChannelActivity",
    "Energy",
    "EnergyConfigError",
    "EnergyKind",
    "EnergyParams",
    "HbmAccess",
    "HbmEnergyParams",
    "HbmPimActivity",
    "LpddrEnergyParams",
    "Part",
    "attacc_activity",
    "attacc_energy",
    "available_energy_presets",
    "background_energy",
    "channel_activity",
    "channel_energy",
    "run_energy",
    "dynamic_energy",
    "hbm_pim_activity",
    "hbm_pim_energy",
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
    "energy_per_bit": {"pJ/bit": 1.0, "fJ/bit": 1e-3, "nJ/bit": 1e3, "pJ/B": 0.125},
    "energy_per_flop": {"pJ/FLOP": 1.0, "fJ/FLOP": 1e-3, "nJ/FLOP": 1e3},
    "energy_per_mac": {"pJ/MAC": 1.0, "fJ/MAC": 1e-3, "nJ/MAC": 1e3},
    "current": {"mA": 1.0, "A": 1e3, "uA": 1e-3},
    "voltage": {"V": 1.0, "mV": 1e-3},
    "flops_per_element": {"FLOP": 1.0},
}

#: The largest value of each unit kind a preset may give, in its first unit (the base unit
#: above): two to four orders of magnitude above any DRAM, link or logic datasheet value
#: (a DRAM chip draws a few W at a few hundred mA to a few A and 1.1-1.5 V; tRC is ~45 ns;
#: off-chip I/O costs 1-20 pJ/bit and logic 0.1-100 pJ per FLOP), so a typo or 1e300 is
#: refused instead of giving ``inf`` J/token.
UNIT_LIMITS: dict[str, float] = {
    "power": 1e5,  # mW (100 W)
    "time": 1e4,  # ns (10 us)
    "ratio": 1e3,
    "energy_per_bit": 1e4,  # pJ/bit (10 nJ/bit)
    "energy_per_flop": 1e4,  # pJ/FLOP
    "energy_per_mac": 1e4,  # pJ/MAC
    "current": 1e5,  # mA (100 A)
    "voltage": 10.0,  # V
    "flops_per_element": 1e4,  # FLOP
}

#: What a unit's denominator says a value is per (``pJ/B`` is per byte): a ``per`` that
#: contradicts its own unit is refused.
_PER_OF_DENOMINATOR = {"B": "byte"}

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

#: The ``kind = "hbm"`` preset (``configs/energy/hbm-pim.toml``): energy per bit moved along an
#: HBM's data path (cells -> column decoder -> bank-group mux -> global I/O -> TSV ->
#: interposer), per PIM MAC, and the standby currents of a channel.
HBM_FIELDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "cell_act_energy": ("energy_per_bit", ("bit",), "ACT+PRE, per bit of the opened row"),
    "cell_column_energy": ("energy_per_bit", ("bit",), "cells <-> column decoder (RD/WR)"),
    "bank_to_bg_mux_energy": ("energy_per_bit", ("bit",), "column decoder -> bank-group mux"),
    "bg_mux_to_gio_energy": ("energy_per_bit", ("bit",), "bank-group mux -> global I/O mux"),
    "tsv_energy": ("energy_per_bit", ("bit",), "through-silicon vias"),
    "interposer_energy": ("energy_per_bit", ("bit",), "silicon interposer I/O"),
    "alu_energy": ("energy_per_mac", ("MAC",), "one FP16 MAC of a PIM lane"),
    "vdd": ("voltage", ("stack",), "supply of the IDD currents"),
    "idd3n": ("current", ("channel", "pseudo-channel"), "active standby current"),
    "idd2n": ("current", ("channel", "pseudo-channel"), "precharge standby current"),
    "host_link_energy": ("energy_per_bit", ("bit",), "device <-> host"),
    "internode_link_energy": ("energy_per_bit", ("bit",), "device <-> device"),
    "epu_energy": ("energy_per_flop", ("FLOP",), "extra processing unit arithmetic"),
}


#: The ``kind = "attacc"`` preset (``configs/energy/attacc.toml``): the HBM path plus AttAcc's
#: softmax unit and its buffer (the AttAcc simulator's softmax layer: FLOPs per element and
#: SRAM bytes).
ATTACC_FIELDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    **HBM_FIELDS,
    "softmax_flops": ("flops_per_element", ("element",), "softmax-unit FLOPs per element"),
    "buffer_energy": ("energy_per_bit", ("bit", "byte"), "softmax-buffer SRAM, read or written"),
}

_ON_DIE = ("cell_act_energy", "cell_column_energy", "bank_to_bg_mux_energy", "bg_mux_to_gio_energy")
#: The ``kind = "lpddr"`` preset (``configs/energy/lpddr5x-pim.toml``): the same on-die path
#: as HBM, the package's data pins instead of TSV + interposer, and standby powers per
#: channel (LPDDR has several supply rails: the preset sums VDD x IDD over them).
LPDDR_FIELDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    **{k: HBM_FIELDS[k] for k in _ON_DIE},
    "dq_energy": ("energy_per_bit", ("bit",), "global I/O -> the package's data pins -> host"),
    "alu_energy": HBM_FIELDS["alu_energy"],
    "act_standby_power": ("power", ("channel",), "background with a row open, all rails"),
    "pre_standby_power": ("power", ("channel",), "background with all banks closed, all rails"),
    **{k: HBM_FIELDS[k] for k in ("host_link_energy", "internode_link_energy", "epu_energy")},
}


class EnergyKind(StrEnum):
    """What an energy preset describes (its ``kind``; ``aim`` if not stated)."""

    AIM = "aim"  # powers x windows per command (CENT's calculator, GDDR6-PIM)
    HBM = "hbm"  # energies per bit of the HBM data path, IDD standby currents
    ATTACC = "attacc"  # the HBM path plus AttAcc's softmax unit and buffer
    LPDDR = "lpddr"  # the on-die path, package pins, standby powers per channel


_HBM_STRUCTURE = ("channels_per_stack", "pseudo_channels_per_channel", "stacks_per_device")
#: Each kind's ``[values]`` fields and its structure keys (besides name, source, kind, values).
FIELDS_OF: dict[EnergyKind, tuple[dict[str, tuple[str, tuple[str, ...], str]], tuple[str, ...]]]
FIELDS_OF = {
    EnergyKind.AIM: (ENERGY_FIELDS, ("channels_per_chip", "chips_per_module")),
    EnergyKind.HBM: (HBM_FIELDS, _HBM_STRUCTURE),
    EnergyKind.ATTACC: (ATTACC_FIELDS, _HBM_STRUCTURE),
    EnergyKind.LPDDR: (LPDDR_FIELDS, ("channels_per_package", "packages_per_device")),
}
_ENTRY_KEYS = ("value", "unit", "per", "source")


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

    kind = EnergyKind.AIM

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

    def bank_access(
        self, cfg: HardwareConfig, columns: int, activations: int, write: bool
    ) -> Energy:
        """The host writing (``write``) or reading ``columns`` 32 B columns of single banks
        over the normal path, with ``activations`` single-bank ACT+PREs, pJ (no background):
        I/O = columns x (``wr_pj`` or ``rd_pj`` + the pins), activation = activations x ACT+PRE
        per bank. A DCC draft's rearrangement on an AiM back end (``sim/tune_energy.py``)."""
        burst = self.wr_pj if write else self.rd_pj
        return Energy(
            io=columns * (burst + self.dq_pj(cfg)),
            activation=activations * self.act_pre_pj_per_bank,
        )

    def dq_pj(self, cfg: HardwareConfig) -> float:
        """One 32 B column over the pins, pJ: ``dq_energy`` x 8 x ``column_bytes``."""
        return self.values["dq_energy"] * 8 * cfg.channel.column_bytes

    def link_pj(self, nbytes: float, link: str) -> float:
        """``nbytes`` over the ``host`` or ``internode`` link, pJ."""
        return _link_pj(self.values, nbytes, link)

    def standby_mw(self, cfg: HardwareConfig) -> tuple[float, float]:
        """Active and precharged standby power of one channel of ``cfg``, mW."""
        return self.values["act_standby_power"], self.values["pre_standby_power"]


def _link_pj(values: Mapping[str, float], nbytes: float, link: str) -> float:
    key = {"host": "host_link_energy", "internode": "internode_link_energy"}.get(link)
    if key is None:
        raise ValueError(f"link {link!r} is unknown; allowed: host, internode")
    return values[key] * 8 * nbytes


class ActBasis(StrEnum):
    """How the per-bit activation energy of an ``hbm`` preset is charged."""

    ROW = "row"  # per ACT: the bits of the row it opens (our reading; default)
    ACCESSED = "accessed"  # per bit a column command moves to or from the cells (AttAcc's)


@dataclass(frozen=True)
class HbmEnergyParams:
    """A validated ``kind = "hbm"`` preset: energies per bit of the HBM data path (pJ/bit),
    per PIM MAC (pJ/MAC), ``vdd`` (V) and standby currents ``idd3n``/``idd2n`` (mA per
    *pseudo-channel*: a per-channel value is divided by ``pseudo_channels_per_channel``).

    A group of the hardware is a pseudo-channel (HBM-PIM back ends) or a channel (the AiM
    channel TLM on HBM2, e.g. ``librapim-hbm2``); :meth:`group_pchs` says which. Stacks per
    device = groups / (``channels_per_stack`` x pseudo-channels per group); a stated
    ``stacks_per_device`` must equal it.
    """

    name: str
    source: str
    channels_per_stack: int
    pseudo_channels_per_channel: int
    stacks_per_device: int | None
    values: dict[str, float]
    sources: dict[str, str]

    kind = EnergyKind.HBM
    unit_name = "stack"  # what ``channels_per_stack`` and ``chips`` count

    @property
    def device_io(self) -> float:
        """pJ/bit between the DRAM die's global I/O and the host: TSV + interposer."""
        return self.values["tsv_energy"] + self.values["interposer_energy"]

    @property
    def host_path(self) -> float:
        """pJ/bit from the column decoder to the host: BG mux, GIO, then :attr:`device_io`."""
        v = self.values
        return v["bank_to_bg_mux_energy"] + v["bg_mux_to_gio_energy"] + self.device_io

    def host_access(self, nbytes: float) -> Energy:
        """The host streaming ``nbytes`` to or from the cells over the normal path, pJ: I/O =
        bits x (column + :attr:`host_path`), activation = bits x ``cell_act_energy`` (whole
        rows are read or written, so the row and accessed readings of :class:`ActBasis`
        agree)."""
        v, bits = self.values, 8 * nbytes
        return Energy(
            io=bits * (v["cell_column_energy"] + self.host_path),
            activation=bits * v["cell_act_energy"],
        )

    @property
    def channels_per_chip(self) -> int:
        """Channels of one stack (the ``chip`` of the AiM presets' reports)."""
        return self.channels_per_stack

    def group_pchs(self, cfg: HardwareConfig | BackendConfig) -> int:
        """Pseudo-channels in one group of ``cfg``: a back end whose group is a pseudo-channel
        states how many JEDEC pseudo-channels it spans (``group.pseudo_channels``: 1 for
        HBM-PIM, 2 for AttAcc's 64-bit channel); a channel has
        ``pseudo_channels_per_channel``."""
        group = getattr(cfg, "group", None)
        if getattr(group, "kind", "channel") == "pseudo-channel":
            return int(group.pseudo_channels)
        return self.pseudo_channels_per_channel

    def _groups(self, cfg: HardwareConfig | BackendConfig) -> int:
        system = getattr(cfg, "system", None)
        return system.groups_per_device if system is not None else cfg.module.channels

    def chips(self, cfg: HardwareConfig | BackendConfig) -> int:
        """Stacks of one device (module) of ``cfg``; refuses a split that is not whole and a
        stated ``stacks_per_device`` that differs."""
        groups = self._groups(cfg)
        per_stack = self.channels_per_stack * self.pseudo_channels_per_channel
        per_stack //= self.group_pchs(cfg)
        u = self.unit_name
        if groups % per_stack:
            raise EnergyConfigError(
                f"energy preset {self.name}: a {u} holds {per_stack} groups "
                f"(channels_per_{u} = {self.channels_per_stack}), which does not divide the "
                f"{groups} groups of {cfg.name}; allowed: a {u} size dividing {groups}"
            )
        stacks = groups // per_stack
        if self.stacks_per_device is not None and self.stacks_per_device != stacks:
            raise EnergyConfigError(
                f"energy preset {self.name}: {u}s_per_device = {self.stacks_per_device} but "
                f"{cfg.name} has {groups} groups / {per_stack} per {u}; allowed: {stacks}"
            )
        return stacks

    def standby_mw(self, cfg: HardwareConfig | BackendConfig) -> tuple[float, float]:
        """Active (VDD x IDD3N) and precharged (VDD x IDD2N) standby power of one group of
        ``cfg``, mW (V x mA), per-pseudo-channel currents x the group's pseudo-channels."""
        v, n = self.values, self.group_pchs(cfg)
        return v["vdd"] * v["idd3n"] * n, v["vdd"] * v["idd2n"] * n

    def act_pre_pj_per_bank(self, row_bytes: int) -> float:
        """``E_ACT+PRE`` of one bank, pJ: ``cell_act_energy`` x the row's bits."""
        return self.values["cell_act_energy"] * 8 * row_bytes

    def row_switch_pj(self, cfg: HardwareConfig) -> float:
        """One all-bank row switch of an AiM channel, pJ: ``banks`` x ACT+PRE per bank."""
        return cfg.channel.banks * self.act_pre_pj_per_bank(cfg.channel.row_bytes)

    def op_pj(self, cfg: HardwareConfig) -> dict[str, float]:
        """AiM commands on HBM, pJ. MAC: every bank reads a column (cell energy; the unit
        sits at the bank, as the AttAcc simulator's bank-level PIM) and its lanes MAC once;
        WR_INP: host -> Global Buffer over the interposer and TSV; RD_OUT: output registers
        at the banks -> host over the whole path from the column decoder (no cell access)."""
        v, bits = self.values, 8 * cfg.channel.column_bytes
        lanes = cfg.channel.column_bytes // 2  # FP16 lanes of one column (AiM: 16)
        return {
            "MAC": cfg.channel.banks * (bits * v["cell_column_energy"] + lanes * v["alu_energy"]),
            "RD_OUT": bits * self.host_path,
            "WR_INP": bits * self.device_io,
        }

    def per_command(self, cfg: HardwareConfig) -> dict[str, Any]:
        """Per-command energies and per-channel powers on ``cfg`` (JSON-ready, for reports)."""
        act, pre = self.standby_mw(cfg)
        return {
            "preset": self.name,
            "stacks_per_module": self.chips(cfg),
            "act_pre_pj_per_bank": self.act_pre_pj_per_bank(cfg.channel.row_bytes),
            "row_switch_pj": self.row_switch_pj(cfg),
            **{f"{op.lower()}_pj": pj for op, pj in self.op_pj(cfg).items()},
            "act_standby_mw_per_channel": act,
            "pre_standby_mw_per_channel": pre,
        }

    def link_pj(self, nbytes: float, link: str) -> float:
        """``nbytes`` over the ``host`` or ``internode`` link, pJ."""
        return _link_pj(self.values, nbytes, link)


@dataclass(frozen=True)
class AttAccEnergyParams(HbmEnergyParams):
    """A validated ``kind = "attacc"`` preset: :class:`HbmEnergyParams` plus the softmax unit
    (``softmax_flops`` per element at ``epu_energy`` pJ/FLOP) and its buffer
    (``buffer_energy`` pJ/bit); :func:`attacc_energy` converts AttAcc streams with it."""

    kind = EnergyKind.ATTACC

    def softmax_pj(self, elements: int, element_bytes: int = 2) -> float:
        """The softmax unit on ``elements`` scores, pJ: their FLOPs x ``epu_energy`` plus each
        element read from and written back to the buffer (the AttAcc simulator's softmax
        layer: input and output of ``element_bytes`` each) x ``buffer_energy``."""
        v = self.values
        flops = v["softmax_flops"] * v["epu_energy"]
        return elements * (flops + 2 * 8 * element_bytes * v["buffer_energy"])


@dataclass(frozen=True)
class LpddrEnergyParams(HbmEnergyParams):
    """A validated ``kind = "lpddr"`` preset: the on-die path of :class:`HbmEnergyParams`,
    ``dq_energy`` for the package pins (no TSV or interposer), and standby powers per channel
    (``act_standby_power`` / ``pre_standby_power``, mW, all supply rails summed). A ``stack``
    here is a package of ``channels_per_package`` channels; a channel has no pseudo-channels.
    """

    kind = EnergyKind.LPDDR
    unit_name = "package"

    @property
    def device_io(self) -> float:
        """pJ/bit between the die's global I/O and the host: the package's data pins."""
        return self.values["dq_energy"]

    def standby_mw(self, cfg: HardwareConfig | BackendConfig) -> tuple[float, float]:
        """Active and precharged standby power of one group (channel) of ``cfg``, mW."""
        n = self.group_pchs(cfg)
        return self.values["act_standby_power"] * n, self.values["pre_standby_power"] * n


#: The parameter class of each per-bit preset kind.
_HBM_LIKE: dict[EnergyKind, type[HbmEnergyParams]] = {
    EnergyKind.HBM: HbmEnergyParams,
    EnergyKind.ATTACC: AttAccEnergyParams,
    EnergyKind.LPDDR: LpddrEnergyParams,
}


def load_energy(name: str | Path = DEFAULT_ENERGY) -> EnergyParams | HbmEnergyParams:
    """Load a shipped energy preset by name (``aim-cent``) or a path to a TOML file."""
    path = find_toml(str(name), ENERGY_DIR, EnergyConfigError, "energy preset", _available)
    return load_energy_config(path)


def _available() -> list[str]:
    return available_energy_presets()


def load_energy_config(path: str | Path) -> EnergyParams | HbmEnergyParams:
    """Load and validate an energy preset file (``extends`` resolved).

    Errors (:class:`EnergyConfigError`) name the file, the field, the value and what is
    allowed: an unknown or missing key, a unit of the wrong kind, a ``per`` the field cannot
    be, a value out of range, a missing source.
    """
    raw = resolve_extends(Path(path), ENERGY_DIR, EnergyConfigError, "energy preset", _available)
    return _from_raw(raw, str(path))


def _from_raw(raw: dict[str, Any], source: str) -> EnergyParams | HbmEnergyParams:
    head = f"{source}: "
    kind_raw = raw.get("kind", str(EnergyKind.AIM))
    try:
        kind = EnergyKind(kind_raw)
    except ValueError:
        raise EnergyConfigError(
            f"{head}kind = {kind_raw!r} is unknown; allowed: {', '.join(EnergyKind)}"
        ) from None
    table_of, structure = FIELDS_OF[kind]
    reject_unknown_keys(
        raw, ("name", "source", "kind", *structure, "values"), EnergyConfigError, head,
        " at top level",
    )  # fmt: skip
    name = check_value(
        f"{head}name = {raw.get('name')!r}", require_key(raw, "name", EnergyConfigError, head),
        str, EnergyConfigError,
    )  # fmt: skip
    src = require_key(raw, "source", EnergyConfigError, head)
    check_value(f"{head}source = {src!r}", src, str, EnergyConfigError)
    counts: dict[str, int | None] = {}
    *required, optional = structure  # the last structure key (a module total) is optional
    for key in structure:
        value = require_key(raw, key, EnergyConfigError, head) if key in required else None
        value = raw.get(optional) if key == optional else value
        if value is not None:
            check_value(f"{head}{key} = {value!r}", value, int, EnergyConfigError)
        counts[key] = value
    table = require_key(raw, "values", EnergyConfigError, head, section=True)
    if not isinstance(table, dict):
        raise EnergyConfigError(f"{head}[values] must be a table, got {type(table).__name__}")
    reject_unknown_keys(table, list(table_of), EnergyConfigError, f"{head}[values] ")
    # what a per-unit value is divided by to reach the canonical unit's ``per``
    divisor = {
        EnergyKind.AIM: {"chip": counts.get("channels_per_chip")},
        EnergyKind.HBM: {"channel": counts.get("pseudo_channels_per_channel")},
        EnergyKind.ATTACC: {"channel": counts.get("pseudo_channels_per_channel")},
        EnergyKind.LPDDR: {},
    }[kind]
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    for key, (unit_kind, pers, _meaning) in table_of.items():
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
        allowed = UNITS[unit_kind]
        if not isinstance(unit, str) or unit not in allowed:
            raise EnergyConfigError(
                f"{where}.unit = {unit!r}: not a unit of {unit_kind.replace('_', ' ')}; "
                f"allowed: {', '.join(allowed)}"
            )
        if not isinstance(per, str) or per not in pers:
            raise EnergyConfigError(
                f"{where}.per = {per!r}: {key} cannot be per that; allowed: {', '.join(pers)}"
            )
        denominator = unit.partition("/")[2]
        wants = _PER_OF_DENOMINATOR.get(denominator, denominator)
        if denominator and wants != per:
            fits = [u for u in allowed if _PER_OF_DENOMINATOR.get(u.partition("/")[2]) == per
                    or u.partition("/")[2] == per]  # fmt: skip
            raise EnergyConfigError(
                f"{where}.per = {per!r} contradicts unit {unit!r} (per {wants}); allowed: "
                f"per = {wants!r}" + (f", or a unit per {per} ({', '.join(fits)})" if fits else "")
            )
        check_value(f"{where}.source = {cite!r}", cite, str, EnergyConfigError)
        value = check_value(
            f"{where}.value = {entry['value']!r}", entry["value"], float, EnergyConfigError,
            zero_ok=True,
        )  # fmt: skip
        value *= allowed[unit]
        if value > UNIT_LIMITS[unit_kind]:
            base = next(iter(allowed))
            raise EnergyConfigError(
                f"{where}.value = {entry['value']!r} {unit}: outside the physical range 0 to "
                f"{UNIT_LIMITS[unit_kind]:g} {base}"
            )
        value /= divisor.get(per) or 1
        values[key] = value
        sources[key] = cite
    if kind is EnergyKind.LPDDR:  # a channel has no pseudo-channels
        counts = {
            "channels_per_stack": counts["channels_per_package"],
            "pseudo_channels_per_channel": 1,
            "stacks_per_device": counts["packages_per_device"],
        }
    if kind in _HBM_LIKE:
        return _HBM_LIKE[kind](
            name,
            src,
            int(counts["channels_per_stack"] or 0),
            int(counts["pseudo_channels_per_channel"] or 0),
            counts["stacks_per_device"],
            values,
            sources,
        )
    return EnergyParams(
        name, src, int(counts["channels_per_chip"] or 0), counts["chips_per_module"], values,
        sources,
    )  # fmt: skip


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


def dynamic_energy(
    act: ChannelActivity, cfg: HardwareConfig, params: EnergyParams | HbmEnergyParams
) -> Energy:
    """MAC, I/O and activation energy of ``act`` (pJ): counts x per-command energies."""
    c, pj = act.counts, params.op_pj(cfg)
    return Energy(
        mac=c.get("MAC", 0) * pj["MAC"],
        io=c.get("WR_INP", 0) * pj["WR_INP"] + c.get("RD_OUT", 0) * pj["RD_OUT"],
        activation=act.row_switches * params.row_switch_pj(cfg),
    )


def background_energy(
    active_cycles: float,
    precharged_cycles: float,
    cfg: HardwareConfig,
    params: EnergyParams | HbmEnergyParams,
) -> float:
    """Standby energy, pJ: (``act_standby_power`` x active + ``pre_standby_power`` x
    precharged channel-cycles) x tCK (mW x ns = pJ)."""
    if active_cycles < 0 or precharged_cycles < 0:
        raise ValueError(f"residency must be >= 0, got {active_cycles}, {precharged_cycles}")
    t_ck_ns = 1.0 / cfg.module.freq_ghz
    act, pre = params.standby_mw(cfg)
    return (act * active_cycles + pre * precharged_cycles) * t_ck_ns


def channel_energy(
    act: ChannelActivity, cfg: HardwareConfig, params: EnergyParams | HbmEnergyParams
) -> Energy:
    """Energy of channel activity ``act`` (pJ): dynamic parts plus its background."""
    bg = background_energy(act.active_cycles, act.precharged_cycles, cfg, params)
    d = dynamic_energy(act, cfg, params)
    return Energy(mac=d.mac, io=d.io, activation=d.activation, background=bg)


def run_energy(
    summary: Mapping[str, Any], cfg: HardwareConfig, params: EnergyParams | HbmEnergyParams
) -> Energy:
    """Energy of one channel run from its statistics (``ScheduleResult.to_dict()``), pJ:
    :func:`channel_energy` of its :func:`channel_activity`."""
    return channel_energy(channel_activity(summary, cfg), cfg, params)


class HbmAccess(StrEnum):
    """What one RD/WR of an HBM-PIM stream moves, for energy (:func:`hbm_pim_activity`)."""

    TRIGGER = "trigger"  # AB-PIM RD/WR of a bank row: each unit's column, cells <-> unit
    REGISTER = "register"  # RD/WR of the register row in AB modes: host <-> the units
    HOST = "host"  # SB RD/WR and mode-change writes: one bank's column <-> host
    BROADCAST = "broadcast"  # AB (PIM off) RD/WR of a bank row: host <-> every bank


@dataclass(frozen=True)
class HbmPimActivity:
    """What the energy model reads of one HBM-PIM stream run on ``groups`` pseudo-channels
    (each runs the same stream, :mod:`models.hbm_pim`): per group ``bank_activations`` (an
    all-bank ACT counts every bank), ``accesses`` per :class:`HbmAccess`, ``macs`` (MAC
    triggers; each MACs every lane of every unit), and the residency of ``cycles``."""

    groups: int
    bank_activations: int
    accesses: Mapping[str, int]
    macs: int
    active_cycles: int
    precharged_cycles: int

    @property
    def cycles(self) -> int:
        """Cycles of the run."""
        return self.active_cycles + self.precharged_cycles


def hbm_pim_activity(
    cfg: BackendConfig,
    stream: np.ndarray,
    payload: np.ndarray,
    issue: np.ndarray,
    cycles: int,
    macs: int,
    groups: int = 1,
) -> HbmPimActivity:
    """Classify ``stream`` (``models.hbm_pim.COMMAND_DTYPE``) for energy; ``issue`` and
    ``cycles`` are its :func:`models.hbm_pim.time_stream` timeline, ``payload`` the data its
    WRs name (the control word's PIM bit says whether AB-mode column commands trigger),
    ``macs`` its MAC triggers (from the kernel: which triggers MAC depends on the program).

    Residency: precharged from cycle 0 to the first ACT, and from every PRE that closes the
    last open bank to the next ACT (or the end); active otherwise.
    """
    from pimphony.models.hbm_pim import (
        AB_ENTRY_ROW,
        CTRL_COLUMN,
        MODE_COLUMN,
        SB_ENTRY_ROW,
        Mode,
        modes,
    )
    from pimphony.models.hbm_pim import Op as HbmOp

    g = cfg.group
    mode_of = modes(cfg, stream).tolist()
    ops, banks = stream["op"].tolist(), stream["bank"].tolist()
    rows, cols, data = stream["row"].tolist(), stream["col"].tolist(), stream["data"].tolist()
    # an ACT / PRE in an all-bank mode opens / closes every bank
    all_bank = {int(HbmOp.ACT): _ALL_ACT, int(HbmOp.PRE): _ALL_PRE}
    row_ops = [all_bank.get(op, op) if mode_of[k] != Mode.SB else op for k, op in enumerate(ops)]
    codes = (int(HbmOp.ACT), int(HbmOp.PRE), _ALL_ACT, _ALL_PRE)
    activations, precharged = _residency(row_ops, banks, issue, cycles, g.banks, codes)
    acc = dict.fromkeys((str(a) for a in HbmAccess), 0)
    pim_on = False
    for k, op in enumerate(ops):
        if op in (HbmOp.ACT, HbmOp.PRE):
            continue
        ab = mode_of[k] != Mode.SB
        row, col = rows[k], cols[k]
        if ab and row == g.register_row:
            if op == HbmOp.WR and col == CTRL_COLUMN:
                pim_on = bool(int(payload[data[k]][0]) & 1)
            kind = HbmAccess.REGISTER
        elif col == MODE_COLUMN and row in (AB_ENTRY_ROW, SB_ENTRY_ROW) and op == HbmOp.WR:
            kind = HbmAccess.HOST
        elif ab:
            kind = HbmAccess.TRIGGER if pim_on else HbmAccess.BROADCAST
        else:
            kind = HbmAccess.HOST
        acc[str(kind)] += 1
    return HbmPimActivity(groups, activations, acc, macs, cycles - precharged, precharged)


def hbm_pim_energy(
    act: HbmPimActivity,
    cfg: BackendConfig,
    params: HbmEnergyParams,
    basis: ActBasis = ActBasis.ROW,
) -> Energy:
    """Energy of ``act`` on back end ``cfg`` (pJ, all its groups), ``docs/energy.md``:

    - MAC: ``macs`` x units x lanes x ``alu_energy`` + triggers x units x column bits x
      ``cell_column_energy`` (each unit moves one column between its bank and itself);
    - I/O: register accesses x column bits x the host path (column decoder -> BG mux -> GIO
      -> TSV -> interposer), host accesses x column bits x (cell + host path), broadcasts x
      column bits x (host path + banks x cell);
    - activation: ``ROW``, bank activations x row bits x ``cell_act_energy``; ``ACCESSED``,
      every bit moved to or from the cells x ``cell_act_energy``;
    - background: (VDD IDD3N x active + VDD IDD2N x precharged) x tCK per group.
    """
    v, g, c = params.values, cfg.group, cfg.core
    assert cfg.timing is not None
    bits = 8 * g.column_bytes
    units = g.banks // c.banks
    a = act.accesses
    trig, reg, host, bcast = (a[str(k)] for k in HbmAccess)
    mac = (
        act.macs * units * c.lanes * v["alu_energy"] + trig * units * bits * v["cell_column_energy"]
    )
    io = bits * (
        reg * params.host_path
        + host * (v["cell_column_energy"] + params.host_path)
        + bcast * (params.host_path + g.banks * v["cell_column_energy"])
    )
    if basis is ActBasis.ROW:
        activation = act.bank_activations * params.act_pre_pj_per_bank(g.row_bytes)
    else:
        activation = bits * (trig * units + host + bcast * g.banks) * v["cell_act_energy"]
    p_act, p_pre = params.standby_mw(cfg)
    background = (p_act * act.active_cycles + p_pre * act.precharged_cycles) / cfg.timing.freq_ghz
    return Energy(mac=mac, io=io, activation=activation, background=background).scaled(act.groups)


@dataclass(frozen=True)
class AttAccActivity:
    """What the energy model reads of one AttAcc stream run on ``groups`` channels (each runs
    the same stream, :mod:`models.attacc`): per group the commands per opcode name,
    ``bank_activations`` (ACT 1, ACTAB every bank), ``softmax_elements`` (the ``n`` of every
    SFM) and the residency of the run's cycles."""

    groups: int
    counts: Mapping[str, int]
    bank_activations: int
    softmax_elements: int
    active_cycles: int
    precharged_cycles: int

    @property
    def cycles(self) -> int:
        """Cycles of the run."""
        return self.active_cycles + self.precharged_cycles


_ALL_ACT, _ALL_PRE = -1, -2  # all-bank ACT / PRE of a model whose ACT and PRE are per bank


def _residency(
    ops: list[int], banks: list[int], issue: np.ndarray, cycles: int, nbanks: int, codes: tuple
) -> tuple[int, int]:
    """(bank activations, precharged cycles) of a timed stream whose opcodes ``codes`` =
    (ACT, PRE, all-bank ACT, all-bank PRE): precharged from cycle 0 to the first activation
    and from every precharge that closes the last open bank to the next activation (or the
    end); a command not in ``codes`` changes no bank."""
    act, pre, act_all, pre_all = codes
    is_open = [False] * nbanks
    n_open = closed_since = precharged = activations = 0
    for k, op in enumerate(ops):
        if op not in codes:
            continue
        opens = op in (act, act_all)
        sel = range(nbanks) if op in (act_all, pre_all) else (banks[k],)
        if opens:
            activations += len(sel)
            if n_open == 0:
                precharged += int(issue[k]) - closed_since
        for b in sel:
            n_open += opens - is_open[b]
            is_open[b] = opens
        if not opens and n_open == 0:
            closed_since = int(issue[k])
    if n_open == 0:
        precharged += cycles - closed_since
    return activations, precharged


def attacc_activity(
    cfg: BackendConfig, stream: np.ndarray, issue: np.ndarray, cycles: int, groups: int = 1
) -> AttAccActivity:
    """Classify an AttAcc ``stream`` (``models.attacc.COMMAND_DTYPE``) for energy; ``issue``
    and ``cycles`` are its :func:`models.attacc.time_stream` timeline. Residency: precharged
    from cycle 0 to the first ACT/ACTAB and from every PRE/PREA that closes the last open
    bank to the next activation (or the end); active otherwise."""
    from pimphony.models.attacc import Op as AttOp

    ops = stream["op"].tolist()
    counts = {o.name: int(np.count_nonzero(stream["op"] == o)) for o in AttOp}
    codes = (int(AttOp.ACT), int(AttOp.PRE), int(AttOp.ACTAB), int(AttOp.PREA))
    activations, precharged = _residency(
        ops, stream["bank"].tolist(), issue, cycles, cfg.group.banks, codes
    )
    softmax = int(stream["n"][stream["op"] == AttOp.SFM].sum())
    return AttAccActivity(groups, counts, activations, softmax, cycles - precharged, precharged)


def attacc_energy(
    act: AttAccActivity,
    cfg: BackendConfig,
    params: AttAccEnergyParams,
    basis: ActBasis = ActBasis.ROW,
) -> Energy:
    """Energy of ``act`` on AttAcc back end ``cfg`` (pJ, all its groups), ``docs/energy.md``.
    With b = the bits of a column and B = the banks of a group:

    - MAC: MACAB x B x (b x ``cell_column_energy`` + lanes x ``alu_energy``): every bank's
      GEMV unit reads one column and MACs every lane;
    - I/O (the AttAcc simulator's traffic classes): WRGB x b x the whole host path (host ->
      interposer -> TSV -> GIO -> BG mux -> the banks' GEMV buffers; one column per command,
      broadcast or not, as the simulator counts it); MVSB and MVGB x b x (BG mux + GIO + TSV)
      (banks <-> the softmax buffer on the buffer die); RDSB x b x interposer (buffer die ->
      host); single-bank RD/WR x b x (cell column + host path);
    - activation: ``ROW``, bank activations x row bits x ``cell_act_energy``; ``ACCESSED``,
      every bit moved to or from the cells (MACAB x B + RD + WR columns) x it;
    - EPU: the softmax unit, :meth:`AttAccEnergyParams.softmax_pj` of the SFM elements;
    - background: (VDD IDD3N x active + VDD IDD2N x precharged) x tCK per group.
    """
    v, g, c = params.values, cfg.group, cfg.core
    assert cfg.timing is not None
    bits = 8 * g.column_bytes
    n = act.counts
    mac = n["MACAB"] * g.banks * (bits * v["cell_column_energy"] + c.lanes * v["alu_energy"])
    bank_side = v["bank_to_bg_mux_energy"] + v["bg_mux_to_gio_energy"] + v["tsv_energy"]
    io = bits * (
        n["WRGB"] * params.host_path
        + (n["MVSB"] + n["MVGB"]) * bank_side
        + n["RDSB"] * v["interposer_energy"]
        + (n["RD"] + n["WR"]) * (v["cell_column_energy"] + params.host_path)
    )
    if basis is ActBasis.ROW:
        activation = act.bank_activations * params.act_pre_pj_per_bank(g.row_bytes)
    else:
        columns = n["MACAB"] * g.banks + n["RD"] + n["WR"]
        activation = bits * columns * v["cell_act_energy"]
    p_act, p_pre = params.standby_mw(cfg)
    background = (p_act * act.active_cycles + p_pre * act.precharged_cycles) / cfg.timing.freq_ghz
    epu = params.softmax_pj(act.softmax_elements, c.element_bytes)
    e = Energy(mac=mac, io=io, activation=activation, background=background, epu=epu)
    return e.scaled(act.groups)
