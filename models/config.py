"""Hardware configuration: frozen dataclasses loaded from preset files in ``configs/``.

A preset is a TOML file with a top-level ``name`` and the sections ``[module]``,
``[channel]``, ``[timing]`` and ``[dcs]``. Every key is required, typed and validated;
errors name the file, the section, the key, the value and what is allowed. A preset may
``extends = "other"`` another and state only the values that differ.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import read_utf8

__all__ = [
    "CONFIG_DIR",
    "DEFAULT_PRESET",
    "FIELD_RANGES",
    "ChannelGeometry",
    "ConfigError",
    "DcsParams",
    "HardwareConfig",
    "ModuleParams",
    "PresetFolder",
    "Timing",
    "available_presets",
    "check_value",
    "find_toml",
    "load_config",
    "load_preset",
    "load_toml_table",
    "reject_unknown_keys",
    "require_key",
    "resolve_extends",
    "typed_fields",
]

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
DEFAULT_PRESET = "aim-16ch"
"""The preset every command and function uses when none is given."""


class ConfigError(PimphonyError, ValueError):
    """A preset file or override is malformed or out of range."""


@dataclass(frozen=True)
class ModuleParams:
    """Module-level resources (LoL-PIM Table 5)."""

    channels: int
    freq_ghz: float
    gpr_bytes: int
    dpa_command_buffer_bytes: int
    dpa_address_map_bytes: int
    host_link_gbps: float
    internode_link_gbps: float
    io_bytes_per_cycle: int
    epu_flops_per_cycle: int
    modules_per_node: int


@dataclass(frozen=True)
class ChannelGeometry:
    """One PIM channel: banks, DRAM rows, MAC width and buffer sizes."""

    banks: int
    rows_per_bank: int
    row_bytes: int
    element_bytes: int
    mac_elements: int
    gbuf_entries: int
    obuf_entries: int

    @property
    def column_bytes(self) -> int:
        """Bytes one MAC reads per bank (one column, one GBuf entry)."""
        return self.mac_elements * self.element_bytes

    @property
    def row_elements(self) -> int:
        """Elements per DRAM row per bank."""
        return self.row_bytes // self.element_bytes

    @property
    def columns_per_row(self) -> int:
        """MAC-sized columns per DRAM row."""
        return self.row_bytes // self.column_bytes


@dataclass(frozen=True)
class Timing:
    """Timing parameters in channel clock cycles, and the row-activation conventions.

    The last three fields are conventions (``docs/scheduling.md``, "Activation and mode
    conventions") with defaults: a preset may omit them, and a preset at the defaults hashes
    and prints as before they existed. ``mac_result_latency``: a RD_OUT (and any command
    waiting on a MAC's completion) waits t_MAC after the MAC (True) or only tCCD, as in the
    Ramulator 2 AiM simulator (False). ``t_MOD``: cycles of the mode switch (TMOD) between
    the compute class (MAC) and the register class (WR_INP, RD_OUT); 0 = no mode switch.
    ``mod_overlaps_row``: a MAC's mode switch may overlap its row switch (True) or is paid in
    series with it, TMOD before the precharge/activate (False, Ramulator).
    """

    tCCD: int
    t_WR_INP: int
    t_MAC: int
    t_RD_OUT: int
    tRCD_MAC: int
    tRP: int
    tRAS: int
    tRRD: int
    tFAW: int
    tRTP: int
    act_banks: int
    mac_result_latency: bool = True
    t_MOD: int = 0
    mod_overlaps_row: bool = False

    @property
    def t_MAC_result(self) -> int:
        """Issue-to-completion time of a MAC under the ``mac_result_latency`` convention."""
        return self.t_MAC if self.mac_result_latency else self.tCCD


@dataclass(frozen=True)
class DcsParams:
    """Dynamic Command Scheduling controller sizes (PIMphony V-C)."""

    queue_depth: int
    id_bits: int
    timestamp_bits: int


@dataclass(frozen=True)
class HardwareConfig:
    """A complete hardware preset."""

    name: str
    module: ModuleParams
    channel: ChannelGeometry
    timing: Timing
    dcs: DcsParams

    @property
    def module_bytes(self) -> int:
        """DRAM capacity of one module: channels x banks x rows x row bytes."""
        ch = self.channel
        return self.module.channels * ch.banks * ch.rows_per_bank * ch.row_bytes

    def to_dict(self) -> dict[str, Any]:
        """Every value of the preset, as the TOML file holds it."""
        return _to_raw(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "a dictionary") -> HardwareConfig:
        """A validated preset from :meth:`to_dict`'s form (as a provenance block records it)."""
        return _from_raw(copy.deepcopy(raw), source)

    def sha256(self) -> str:
        """Hash of every value (not of the file's text): equal hashes, equal hardware."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def replace(self, **overrides: Any) -> HardwareConfig:
        """Return a validated copy with dotted-key overrides, e.g. ``{"timing.t_MAC": 30}``."""
        raw = _to_raw(self)
        for key, value in overrides.items():
            section, _, field = key.replace("__", ".").partition(".")
            if not field:
                raise ConfigError(f"override {key!r}: expected 'section.key'")
            if section not in raw or not isinstance(raw[section], dict):
                raise ConfigError(
                    f"override {key!r}: unknown section {section!r}; "
                    f"allowed: {', '.join(_SECTIONS)}"
                )
            raw[section][field] = value
        return _from_raw(raw, source=f"{self.name} (with overrides)")


_SECTIONS: dict[str, type] = {
    "module": ModuleParams,
    "channel": ChannelGeometry,
    "timing": Timing,
    "dcs": DcsParams,
}


def available_presets() -> list[str]:
    """Names of the presets shipped in ``configs/``."""
    return PresetFolder("", "preset", ConfigError).names()


def load_preset(name: str = DEFAULT_PRESET) -> HardwareConfig:
    """Load a shipped preset by name (``aim-16ch``, ``aim-32ch``) or a path to a TOML file."""
    return load_config(find_toml(name, CONFIG_DIR, ConfigError, "preset", available_presets))


def load_config(path: str | Path) -> HardwareConfig:
    """Load and validate a hardware preset file (``extends`` resolved, :func:`resolve_extends`)."""
    raw = resolve_extends(Path(path), CONFIG_DIR, ConfigError, "preset", available_presets)
    return _from_raw(raw, source=str(path))


def resolve_extends(
    path: Path,
    folder: Path,
    error: type[Exception],
    what: str,
    available: Callable[[], list[str]],
    chain: tuple[Path, ...] = (),
) -> dict[str, Any]:
    """The table of TOML file ``path`` with its ``extends`` chain merged in.

    ``extends = "other"`` (the name of a file shipped in ``folder`` or a ``.toml`` path,
    relative to the file) takes every value of that file; the file's own sections override it
    key by key. The merged table is validated by the caller as a whole, so the child needs
    only what differs. Errors (``error``) name the file: a bad ``extends`` value, an unknown
    parent, a cycle.
    """
    raw = load_toml_table(path, error, what)
    if "extends" not in raw:
        return raw
    parent = raw.pop("extends")
    if not isinstance(parent, str) or not parent:
        raise error(
            f"{path}: 'extends' must name a {what} (e.g. {available()[0]!r}) or a .toml path, "
            f"got {parent!r}"
        )
    if parent.endswith(".toml") and not Path(parent).is_absolute():
        parent = str(path.parent / parent)
    try:
        parent_path = find_toml(parent, folder, error, what, available)
    except error as exc:
        raise error(f"{path}: extends: {exc}") from None
    here = path.resolve()
    if parent_path.resolve() in (*chain, here):
        names = " -> ".join(p.stem for p in (*chain, here, parent_path.resolve()))
        top = chain[0] if chain else here
        raise error(f"{top}: 'extends' forms a cycle: {names} (in {path})")
    merged = resolve_extends(parent_path, folder, error, what, available, (*chain, here))
    for key, value in raw.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


# ---------------------------------------------------------------------------------------------
# Strict TOML loading, shared by presets, model specs (compiler.llm) and workloads
# (sim.workloads): unknown or missing keys and wrong types are errors naming file and field.
# ---------------------------------------------------------------------------------------------


def find_toml(
    name: str | Path,
    folder: Path,
    error: type[Exception],
    what: str,
    available: Callable[[], list[str]],
) -> Path:
    """``name`` if it is a ``.toml`` path, else ``folder / f"{name}.toml"``; ``error``
    ``"unknown {what} 'name'; available: ..."`` if no such file is shipped."""
    path = Path(name)
    if path.suffix != ".toml":
        path = folder / f"{name}.toml"
        if not path.is_file():
            raise error(
                f"unknown {what} {name!r}; available: {', '.join(available())} "
                "(or give a path to a .toml file)"
            )
    return path


def load_toml_table(path: str | Path, error: type[Exception], what: str) -> dict[str, Any]:
    """The top-level table of TOML file ``path``.

    Raises ``error`` with ``"{path}: no such {what} file"`` if it does not exist,
    ``"{path}: not UTF-8 text (...)"`` naming the first bad byte's line and column, and
    ``"{path}: not valid TOML: ..."`` if it does not parse.
    """
    path = Path(path)
    try:
        return tomllib.loads(read_utf8(path, error))
    except FileNotFoundError:
        raise error(f"{path}: no such {what} file") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None


@dataclass(frozen=True)
class PresetFolder:
    """The ``.toml`` files of one kind shipped in ``configs/SUBFOLDER``: what a message calls
    one, and the error a missing or malformed one raises."""

    subfolder: str
    what: str
    error: type[Exception]

    @property
    def folder(self) -> Path:
        """``configs/SUBFOLDER``."""
        return CONFIG_DIR / self.subfolder

    def names(self) -> list[str]:
        """Names of the shipped files, sorted."""
        return sorted(p.stem for p in self.folder.glob("*.toml"))

    def load(self, name: str | Path) -> tuple[Path, dict[str, Any]]:
        """The file ``name`` names (a shipped one or a ``.toml`` path, :func:`find_toml`) and
        its top-level table (:func:`load_toml_table`)."""
        path = find_toml(name, self.folder, self.error, self.what, self.names)
        return path, load_toml_table(path, self.error, self.what)


def reject_unknown_keys(
    table: Mapping[str, Any],
    allowed: Sequence[str],
    error: type[Exception],
    head: str,
    note: str = "",
) -> None:
    """Raise ``error`` ``"{head}unknown key 'k'{note}; allowed: ..."`` for the first key of
    ``table`` not in ``allowed`` (listed in the order given)."""
    for key in table:
        if key not in allowed:
            raise error(f"{head}unknown key {key!r}{note}; allowed: {', '.join(allowed)}")


def require_key(
    table: Mapping[str, Any],
    key: str,
    error: type[Exception],
    head: str,
    *,
    section: bool = False,
    note: str = "",
) -> Any:
    """``table[key]``; if absent, ``error`` ``"{head}missing key 'k'{note}"`` (or
    ``"{head}missing section [k]"`` with ``section``)."""
    if key not in table:
        what = f"section [{key}]" if section else f"key {key!r}{note}"
        raise error(f"{head}missing {what}")
    return table[key]


def check_value(
    where: str, value: Any, kind: type | None, error: type[Exception], zero_ok: bool = False
) -> Any:
    """``value`` checked against ``kind`` (``error`` ``"{where}: must be ..."`` if not).

    ``int``: a positive integer. ``float``: a finite number, > 0 (>= 0 with ``zero_ok``),
    returned as ``float``. ``str``: a non-empty string. ``list``: a list of non-empty
    strings. ``dict``: a table. ``None``: anything.
    """
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise error(f"{where}: must be an integer, got {type(value).__name__}")
        if value <= 0:
            raise error(f"{where}: must be a positive integer")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise error(f"{where}: must be a number, got {type(value).__name__}")
        value = float(value)
        if zero_ok and (not math.isfinite(value) or value < 0):
            raise error(f"{where}: must be a finite number >= 0")
        if not zero_ok and (not math.isfinite(value) or value <= 0):
            raise error(f"{where}: must be a positive finite number")
    elif kind is str:
        if not isinstance(value, str) or not value:
            raise error(f"{where}: must be a non-empty string")
    elif kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise error(f"{where}: must be a list of non-empty strings")
    elif kind is dict and not isinstance(value, dict):
        raise error(f"{where}: must be a table, got {type(value).__name__}")
    return value


def typed_fields(
    table: Mapping[str, Any],
    kinds: Mapping[str, type | None],
    error: type[Exception],
    head: str,
    *,
    note: str = "",
    zero_ok: bool = False,
) -> dict[str, Any]:
    """The values of ``kinds``' keys in ``table``, each checked by :func:`check_value`.

    Unknown keys are refused first (:func:`reject_unknown_keys` with ``note``); then, key by
    key in ``kinds`` order, a missing key (a missing section for ``dict`` kinds) or a wrong
    value raises ``error`` naming ``"{head}{key} = {value!r}"``.
    """
    reject_unknown_keys(table, list(kinds), error, head, note)
    values = {}
    for key, kind in kinds.items():
        value = require_key(table, key, error, head, section=kind is dict)
        values[key] = check_value(f"{head}{key} = {value!r}", value, kind, error, zero_ok)
    return values


def _to_raw(cfg: HardwareConfig) -> dict[str, Any]:
    raw: dict[str, Any] = {"name": cfg.name}
    for section, cls in _SECTIONS.items():
        values = dataclasses.asdict(getattr(cfg, section))
        # Conventions at their defaults are left out: a preset that does not use them keeps
        # the values (and hash) it had before they existed.
        for f in fields(cls):
            if f.default is not dataclasses.MISSING and values[f.name] == f.default:
                del values[f.name]
        raw[section] = values
    return raw


def _from_raw(raw: dict[str, Any], source: str) -> HardwareConfig:
    allowed_top = sorted({"name", *_SECTIONS})
    reject_unknown_keys(raw, allowed_top, ConfigError, f"{source}: ", " at top level")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{source}: 'name' must be a non-empty string, got {name!r}")
    sections = {}
    for section, cls in _SECTIONS.items():
        table = require_key(raw, section, ConfigError, f"{source}: ", section=True)
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: [{section}] must be a table, got {type(table).__name__}")
        sections[section] = _build_section(source, section, cls, table)
    cfg = HardwareConfig(name=name, **sections)
    _check_relations(cfg, source)
    return cfg


_KINDS = {"int": int, "float": float, "bool": bool}

_CYCLES = (1, 10_000, "cycles")  # 10 us at 1 GHz: far beyond any DRAM or PIM latency
#: The physical range of every preset field: (lowest, highest, unit). Values outside it are
#: refused; within it, cycle counts of streams of up to 2^32 commands fit the TLM's int64
#: times. The ranges are wide (any GDDR6/HBM-class PIM fits); docs/errors.md lists them.
FIELD_RANGES: dict[str, dict[str, tuple[float, float, str]]] = {
    "module": {
        "channels": (1, 1024, "channels"),
        "freq_ghz": (0.05, 10.0, "GHz"),
        "gpr_bytes": (32, 1 << 30, "bytes"),
        "dpa_command_buffer_bytes": (8, 1 << 30, "bytes"),
        "dpa_address_map_bytes": (8, 1 << 30, "bytes"),
        "host_link_gbps": (0.001, 100_000.0, "GB/s"),
        "internode_link_gbps": (0.001, 100_000.0, "GB/s"),
        "io_bytes_per_cycle": (1, 4096, "bytes per cycle"),
        "epu_flops_per_cycle": (1, 1 << 20, "flop per cycle"),
        "modules_per_node": (1, 1024, "modules"),
    },
    "channel": {
        "banks": (1, 256, "banks"),  # power of two >= 2: checked with the relations
        "rows_per_bank": (1, 1 << 24, "rows"),
        "row_bytes": (32, 1 << 16, "bytes"),
        "element_bytes": (1, 8, "bytes"),
        "mac_elements": (1, 1024, "elements"),
        "gbuf_entries": (1, 1 << 16, "entries"),
        "obuf_entries": (1, 1 << 16, "entries"),
    },
    "timing": {
        **{
            key: _CYCLES
            for key in (
                "tCCD", "t_WR_INP", "t_MAC", "t_RD_OUT", "tRCD_MAC", "tRP", "tRAS", "tRRD",
                "tFAW", "tRTP",
            )
        },
        "act_banks": (1, 256, "banks"),
        "t_MOD": (0, 10_000, "cycles"),  # 0: no mode switch
    },
    "dcs": {
        "queue_depth": (2, 1 << 16, "entries"),
        "id_bits": (1, 32, "bits"),
        "timestamp_bits": (1, 62, "bits"),
    },
}  # fmt: skip


def _build_section(source: str, section: str, cls: type, table: dict[str, Any]) -> Any:
    head = f"{source}: [{section}] "
    kinds = {f.name: _KINDS.get(f.type) for f in fields(cls)}
    # Fields with a default (the timing conventions) may be omitted; a bool must be a bool
    # and a count whose range starts at 0 may be 0.
    special = {
        f.name: f.default
        for f in fields(cls)
        if f.default is not dataclasses.MISSING
        or kinds[f.name] is bool
        or FIELD_RANGES[section].get(f.name, (1,))[0] == 0
    }
    reject_unknown_keys(table, list(kinds), ConfigError, head)
    plain = {k: v for k, v in table.items() if k not in special}
    values = typed_fields(
        plain, {k: v for k, v in kinds.items() if k not in special}, ConfigError, head
    )
    for key, default in special.items():
        value = table.get(key, default)
        if value is dataclasses.MISSING:
            require_key(table, key, ConfigError, head)
        where = f"{head}{key} = {value!r}"
        if kinds[key] is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{where}: must be true or false, got {type(value).__name__}")
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: must be an integer, got {type(value).__name__}")
        values[key] = value
    for key, (lo, hi, unit) in FIELD_RANGES[section].items():
        if not lo <= values[key] <= hi:
            raise ConfigError(
                f"{source}: [{section}] {key} = {values[key]!r}: outside the physical range "
                f"{lo:,} to {hi:,} {unit}"
            )
    return cls(**values)


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _check_relations(cfg: HardwareConfig, source: str) -> None:
    ch, tm, dcs = cfg.channel, cfg.timing, cfg.dcs

    def fail(section: str, key: str, value: Any, why: str) -> None:
        raise ConfigError(f"{source}: [{section}] {key} = {value!r}: {why}")

    for key in ("gbuf_entries", "obuf_entries", "banks"):
        value = getattr(ch, key)
        if not _is_pow2(value) or value < 2:
            fail("channel", key, value, "must be a power of two >= 2 (buffer halves, index bits)")
    if ch.row_bytes % ch.column_bytes:
        fail(
            "channel",
            "row_bytes",
            ch.row_bytes,
            f"must be a multiple of mac_elements * element_bytes = {ch.column_bytes}",
        )
    if tm.act_banks > ch.banks or ch.banks % tm.act_banks:
        fail("timing", "act_banks", tm.act_banks, f"must divide banks = {ch.banks}")
    if tm.tRAS + tm.tRP < tm.tFAW:
        fail(
            "timing",
            "tFAW",
            tm.tFAW,
            f"must be <= tRAS + tRP = {tm.tRAS + tm.tRP} (a row activation then never "
            "overlaps the previous one's four-activate window)",
        )
    # In-flight touchers of one buffer entry are bounded by both queues plus the dispatch stage.
    need_id = (2 * dcs.queue_depth + 2 - 1).bit_length()
    if dcs.id_bits < need_id:
        fail(
            "dcs",
            "id_bits",
            dcs.id_bits,
            f"must be >= {need_id} so IDs cannot alias with queue_depth = {dcs.queue_depth}",
        )
    max_exec = max(tm.t_WR_INP, tm.t_MAC, tm.t_RD_OUT, tm.tCCD)
    scrub = ch.gbuf_entries + ch.obuf_entries
    need_ts = (2 * (scrub + max_exec) + 1).bit_length() + 1
    if dcs.timestamp_bits < need_ts:
        fail(
            "dcs",
            "timestamp_bits",
            dcs.timestamp_bits,
            f"must be >= {need_ts}: half the timestamp range must exceed the S-Table scrub "
            f"period ({scrub} cycles) plus the longest execution time ({max_exec})",
        )
