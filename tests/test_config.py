"""Hardware presets: loading, immutability, overrides and every validation error."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest
from pimphony.models.config import (
    CONFIG_DIR,
    FIELD_RANGES,
    ConfigError,
    available_presets,
    load_config,
    load_preset,
)

from tests.helpers import drop_key, file_error, run_cli, set_key, write_toml

PRESET_16 = CONFIG_DIR / "aim-16ch.toml"
BASE_TEXT = PRESET_16.read_text()


def drop_section(text: str, section: str) -> str:
    new, n = re.subn(rf"^\[{section}\]\n(?:(?!\[).*\n?)*", "", text, flags=re.M)
    assert n == 1, f"section [{section}] not found"
    return new


def add_to_section(text: str, section: str, line: str) -> str:
    header = f"[{section}]\n"
    assert text.count(header) == 1
    return text.replace(header, header + line + "\n")


def config_error(path: Path) -> str:
    return file_error(path, load_config, ConfigError)


# --------------------------------------------------------------------------- shipped presets


def test_available_presets():
    names = available_presets()
    assert "aim-16ch" in names
    assert "aim-32ch" in names
    assert names == sorted(names)


def test_aim16_values(cfg):
    assert cfg.name == "aim-16ch"
    assert cfg.module.channels == 16
    assert cfg.module.freq_ghz == 1.0
    assert cfg.module.gpr_bytes == 524288
    assert cfg.module.host_link_gbps == 64.0
    assert cfg.channel.banks == 16
    assert cfg.channel.rows_per_bank == 16384
    assert cfg.channel.row_bytes == 2048
    assert cfg.channel.gbuf_entries == 64
    assert cfg.channel.obuf_entries == 64
    assert cfg.timing.t_MAC == 28
    assert cfg.timing.t_RD_OUT == 26
    assert cfg.timing.t_WR_INP == 4
    assert cfg.timing.tFAW == 21
    assert cfg.timing.act_banks == 4
    assert cfg.dcs.queue_depth == 64
    assert cfg.dcs.id_bits == 8
    assert cfg.dcs.timestamp_bits == 19


def test_aim16_derived_geometry(cfg):
    ch = cfg.channel
    assert ch.column_bytes == 32  # 16 FP16 elements
    assert ch.row_elements == 1024
    assert ch.columns_per_row == 64


def test_aim32_differs_only_in_channels(cfg):
    big = load_preset("aim-32ch")
    assert big.name == "aim-32ch"
    assert big.module.channels == 32
    assert big.channel == cfg.channel
    assert big.timing == cfg.timing
    assert big.dcs == cfg.dcs
    assert dataclasses.replace(big.module, channels=16) == cfg.module


@pytest.mark.parametrize("name", ["aim-16ch", "aim-32ch"])
def test_preset_matches_toml_file(name):
    raw = tomllib.loads((CONFIG_DIR / f"{name}.toml").read_text())
    cfg = load_preset(name)
    assert cfg.name == raw["name"]
    for section in ("module", "channel", "timing", "dcs"):
        loaded = cfg.to_dict()[section]  # conventions at their defaults are left out
        assert loaded == raw[section], section
    assert isinstance(cfg.module.freq_ghz, float)
    assert isinstance(cfg.channel.banks, int)


# --------------------------------------------------------------------------- extends


@pytest.mark.parametrize(
    ("child", "parent"), [("pimphony-cent", "aim-32ch"), ("pimphony-neupims", "aim-32ch-32g")]
)
def test_named_presets_are_their_hardware(child, parent):
    a, b = load_preset(child), load_preset(parent)
    assert a.name == child
    assert dataclasses.replace(a, name=parent) == b


def test_lolpim_io_adds_one_global_buffer():
    base, io = load_preset("lolpim-aimx"), load_preset("lolpim-aimx-io")
    assert base.channel.gbuf_entries * 32 == 2048  # LoL-PIM Table 5: one 2 KB GB
    assert io.channel.gbuf_entries == 2 * base.channel.gbuf_entries  # 4.4: an extra GB
    assert dataclasses.replace(io.channel, gbuf_entries=64) == base.channel
    assert (io.module, io.timing, io.dcs) == (base.module, base.timing, base.dcs)


def test_extends_overrides_key_by_key(tmp_path):
    path = write_toml(
        tmp_path, 'name = "mine"\nextends = "aim-16ch"\n[timing]\ntRP = 20\n', "mine.toml"
    )
    cfg = load_config(path)
    assert cfg.name == "mine"
    assert cfg.timing.tRP == 20
    assert cfg.replace(**{"timing.tRP": 16}) == dataclasses.replace(
        load_preset("aim-16ch"), name="mine"
    )


def test_extends_relative_path_chain(tmp_path):
    write_toml(
        tmp_path, 'name = "a"\nextends = "aim-16ch"\n[channel]\nobuf_entries = 8\n', "a.toml"
    )
    path = write_toml(tmp_path, 'name = "b"\nextends = "a.toml"\n[timing]\ntRP = 18\n', "b.toml")
    cfg = load_config(path)
    assert (cfg.name, cfg.channel.obuf_entries, cfg.timing.tRP) == ("b", 8, 18)


def test_extends_child_values_are_validated(tmp_path):
    path = write_toml(tmp_path, 'name = "x"\nextends = "aim-16ch"\n[timing]\ntRPP = 3\n', "x.toml")
    assert "tRPP" in config_error(path)
    path = write_toml(
        tmp_path, 'name = "y"\nextends = "aim-16ch"\n[channel]\nbanks = 0\n', "y.toml"
    )
    assert "banks" in config_error(path)


def test_extends_errors(tmp_path):
    path = write_toml(tmp_path, 'name = "x"\nextends = 3\n', "x.toml")
    assert "'extends' must name a preset" in config_error(path)
    path = write_toml(tmp_path, 'name = "x"\nextends = "no-such-preset"\n', "x.toml")
    assert "unknown preset 'no-such-preset'" in config_error(path)
    write_toml(tmp_path, 'name = "p"\nextends = "q.toml"\n', "p.toml")
    path = write_toml(tmp_path, 'name = "q"\nextends = "p.toml"\n', "q.toml")
    assert "'extends' forms a cycle: q -> p -> q" in config_error(path)


def test_load_preset_by_path(tmp_path):
    path = write_toml(tmp_path, BASE_TEXT, "copy.toml")
    assert load_preset(str(path)) == load_preset("aim-16ch")
    assert load_config(path) == load_preset("aim-16ch")


def test_float_field_accepts_integer(tmp_path):
    cfg = load_config(write_toml(tmp_path, set_key(BASE_TEXT, "freq_ghz", "2")))
    assert cfg.module.freq_ghz == 2.0
    assert isinstance(cfg.module.freq_ghz, float)


# --------------------------------------------------------------------------- immutability


def test_dataclasses_are_frozen(cfg):
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.name = "other"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.timing.t_MAC = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.channel.banks = 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.module.channels = 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.dcs.queue_depth = 8
    assert cfg.timing.t_MAC == 28


# --------------------------------------------------------------------------- replace


def test_replace_returns_modified_copy(cfg):
    new = cfg.replace(**{"timing.t_MAC": 30, "channel.gbuf_entries": 128})
    assert new.timing.t_MAC == 30
    assert new.channel.gbuf_entries == 128
    assert cfg.timing.t_MAC == 28  # original untouched
    assert cfg.channel.gbuf_entries == 64
    assert dataclasses.replace(new.timing, t_MAC=28) == cfg.timing
    assert new.module == cfg.module
    assert new.dcs == cfg.dcs
    assert new.name == cfg.name
    assert cfg.replace() == cfg


def test_replace_revalidates_relations(cfg):
    with pytest.raises(ConfigError, match=r"gbuf_entries = 48.*power of two"):
        cfg.replace(**{"channel.gbuf_entries": 48})
    with pytest.raises(ConfigError, match=r"tFAW = 44"):
        cfg.replace(**{"timing.tFAW": 44})
    # The same tFAW is fine once tRAS grows.
    ok = cfg.replace(**{"timing.tFAW": 44, "timing.tRAS": 28})
    assert ok.timing.tFAW == 44


def test_replace_revalidates_types(cfg):
    with pytest.raises(ConfigError, match=r"t_MAC = '30'.*must be an integer"):
        cfg.replace(**{"timing.t_MAC": "30"})
    with pytest.raises(ConfigError, match=r"t_MAC = 0.*positive"):
        cfg.replace(**{"timing.t_MAC": 0})


def test_replace_unknown_key(cfg):
    with pytest.raises(ConfigError, match=r"\[timing\] unknown key 't_FOO'"):
        cfg.replace(**{"timing.t_FOO": 3})


def test_replace_unknown_section(cfg):
    with pytest.raises(ConfigError) as info:
        cfg.replace(**{"bogus.t_MAC": 3})
    msg = str(info.value)
    assert "unknown section 'bogus'" in msg
    assert "timing" in msg  # lists what is allowed


def test_replace_needs_dotted_key(cfg):
    with pytest.raises(ConfigError, match="section.key"):
        cfg.replace(t_MAC=3)


# --------------------------------------------------------------------------- bad files


def test_unknown_key_in_section(tmp_path):
    path = write_toml(tmp_path, add_to_section(BASE_TEXT, "channel", "bankz = 16"))
    msg = config_error(path)
    assert "[channel]" in msg
    assert "unknown key 'bankz'" in msg
    assert "rows_per_bank" in msg  # names the allowed keys


def test_unknown_top_level_key(tmp_path):
    path = write_toml(
        tmp_path, BASE_TEXT.replace('name = "aim-16ch"\n', 'name = "aim-16ch"\nfoo = 1\n')
    )
    msg = config_error(path)
    assert "unknown key 'foo'" in msg
    assert "top level" in msg


def test_unknown_section_in_file(tmp_path):
    path = write_toml(tmp_path, BASE_TEXT + "\n[extra]\nx = 1\n")
    msg = config_error(path)
    assert "'extra'" in msg


@pytest.mark.parametrize(
    ("section", "key"),
    [("module", "channels"), ("channel", "obuf_entries"), ("timing", "tRP"), ("dcs", "id_bits")],
)
def test_missing_key(tmp_path, section, key):
    msg = config_error(write_toml(tmp_path, drop_key(BASE_TEXT, key)))
    assert f"[{section}]" in msg
    assert f"missing key {key!r}" in msg


@pytest.mark.parametrize("section", ["module", "channel", "timing", "dcs"])
def test_missing_section(tmp_path, section):
    text = drop_section(BASE_TEXT, section)
    assert f"[{section}]" not in text
    msg = config_error(write_toml(tmp_path, text))
    assert f"missing section [{section}]" in msg


def test_missing_name(tmp_path):
    msg = config_error(write_toml(tmp_path, drop_key(BASE_TEXT, "name")))
    assert "'name'" in msg


@pytest.mark.parametrize(
    ("key", "value", "shown", "type_name"),
    [
        ("banks", '"16"', "banks = '16'", "str"),
        ("t_MAC", "true", "t_MAC = True", "bool"),
        ("t_MAC", "28.0", "t_MAC = 28.0", "float"),
        ("queue_depth", "64.5", "queue_depth = 64.5", "float"),
        ("freq_ghz", '"1.0"', "freq_ghz = '1.0'", "str"),
        ("freq_ghz", "false", "freq_ghz = False", "bool"),
    ],
)
def test_wrong_type(tmp_path, key, value, shown, type_name):
    msg = config_error(write_toml(tmp_path, set_key(BASE_TEXT, key, value)))
    assert shown in msg
    assert f"got {type_name}" in msg


@pytest.mark.parametrize(
    ("key", "value", "section"),
    [
        ("rows_per_bank", "0", "channel"),
        ("banks", "-16", "channel"),
        ("tRP", "0", "timing"),
        ("queue_depth", "-1", "dcs"),
        ("gpr_bytes", "0", "module"),
        ("freq_ghz", "0.0", "module"),
        ("host_link_gbps", "-1.5", "module"),
        ("freq_ghz", "inf", "module"),
    ],
)
def test_non_positive_size(tmp_path, key, value, section):
    msg = config_error(write_toml(tmp_path, set_key(BASE_TEXT, key, value)))
    assert f"[{section}] {key} = " in msg
    assert "positive" in msg


@pytest.mark.parametrize(
    ("key", "value"),
    [("gbuf_entries", 48), ("obuf_entries", 48), ("gbuf_entries", 1), ("obuf_entries", 96)],
)
def test_buffer_entries_power_of_two(tmp_path, key, value):
    msg = config_error(write_toml(tmp_path, set_key(BASE_TEXT, key, str(value))))
    assert f"[channel] {key} = {value}" in msg
    assert "power of two" in msg


def test_buffer_entries_power_of_two_accepted(tmp_path):
    text = set_key(set_key(BASE_TEXT, "gbuf_entries", "128"), "obuf_entries", "32")
    cfg = load_config(write_toml(tmp_path, text))
    assert (cfg.channel.gbuf_entries, cfg.channel.obuf_entries) == (128, 32)


@pytest.mark.parametrize("value", [2000, 2040, 16])
def test_row_bytes_multiple_of_column(tmp_path, value):
    msg = config_error(write_toml(tmp_path, set_key(BASE_TEXT, "row_bytes", str(value))))
    assert f"[channel] row_bytes = {value}" in msg
    assert "multiple" in msg
    assert "32" in msg


@pytest.mark.parametrize("value", [3, 5, 32])
def test_act_banks_must_divide_banks(tmp_path, value):
    msg = config_error(write_toml(tmp_path, set_key(BASE_TEXT, "act_banks", str(value))))
    assert f"[timing] act_banks = {value}" in msg
    assert "divide banks = 16" in msg


def test_act_banks_dividing_banks_accepted(tmp_path):
    cfg = load_config(write_toml(tmp_path, set_key(BASE_TEXT, "act_banks", "8")))
    assert cfg.timing.act_banks == 8


def test_tfaw_bounded_by_tras_plus_trp(tmp_path):
    # tRAS + tRP = 27 + 16 = 43.
    msg = config_error(write_toml(tmp_path, set_key(BASE_TEXT, "tFAW", "44")))
    assert "[timing] tFAW = 44" in msg
    assert "43" in msg
    assert load_config(write_toml(tmp_path, set_key(BASE_TEXT, "tFAW", "43"), "ok.toml"))


def test_id_bits_too_small(tmp_path):
    # 2 * 64 + 2 = 130 IDs in flight need 8 bits.
    msg = config_error(write_toml(tmp_path, set_key(BASE_TEXT, "id_bits", "7")))
    assert "[dcs] id_bits = 7" in msg
    assert "queue_depth = 64" in msg


def test_id_bits_scale_with_queue_depth(tmp_path):
    text = set_key(BASE_TEXT, "queue_depth", "128")  # needs 9 bits; preset has 8
    msg = config_error(write_toml(tmp_path, text))
    assert "[dcs] id_bits = 8" in msg
    ok = load_config(write_toml(tmp_path, set_key(text, "id_bits", "9"), "ok.toml"))
    assert ok.dcs.queue_depth == 128


def test_timestamp_bits_too_small(tmp_path):
    # 8 bits: half the range (128) is below the scrub period alone (64 + 64 entries + 28).
    msg = config_error(write_toml(tmp_path, set_key(BASE_TEXT, "timestamp_bits", "8")))
    assert "[dcs] timestamp_bits = 8" in msg
    assert "scrub" in msg


def test_queue_depth_at_least_two(tmp_path):
    msg = config_error(write_toml(tmp_path, set_key(BASE_TEXT, "queue_depth", "1")))
    assert "[dcs] queue_depth = 1: outside the physical range 2 to 65,536 entries" in msg


def test_malformed_toml(tmp_path):
    path = write_toml(tmp_path, BASE_TEXT.replace("[timing]", "[timing"))
    msg = config_error(path)
    assert "not valid TOML" in msg


def test_duplicate_key_is_malformed(tmp_path):
    path = write_toml(tmp_path, add_to_section(BASE_TEXT, "timing", "t_MAC = 30"))
    assert "not valid TOML" in config_error(path)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    msg = config_error(path)
    assert "no such preset file" in msg
    with pytest.raises(ConfigError, match="no such preset file"):
        load_preset(str(path))


def test_unknown_preset_name():
    with pytest.raises(ConfigError) as info:
        load_preset("aim-99ch")
    msg = str(info.value)
    assert "unknown preset 'aim-99ch'" in msg
    assert "aim-16ch" in msg
    assert "aim-32ch" in msg


RANGED = [(s, k) for s, keys in FIELD_RANGES.items() for k in keys]


@pytest.mark.parametrize("section,key", RANGED, ids=[f"{s}.{k}" for s, k in RANGED])
def test_every_field_has_a_physical_range(section, key):
    cfg = load_preset("aim-16ch")
    assert set(FIELD_RANGES) == {"module", "channel", "timing", "dcs"}
    lo, hi, unit = FIELD_RANGES[section][key]
    assert lo <= getattr(getattr(cfg, section), key) <= hi  # the shipped value is inside
    kind = type(getattr(getattr(cfg, section), key))
    above = hi * 2 if kind is int else hi * 1.5
    with pytest.raises(ConfigError, match=rf"\[{section}\] {key} = .*outside the physical range"):
        cfg.replace(**{f"{section}.{key}": kind(above)})
    if lo > (1 if kind is int else 0):
        below = lo - 1 if kind is int else lo / 2
        with pytest.raises(ConfigError, match=rf"\[{section}\] {key} = .*{unit}"):
            cfg.replace(**{f"{section}.{key}": kind(below)})


def test_absurd_timing_is_refused_by_the_cli(tmp_path, capsys):
    # Issue example: tRP = 2^63 - 1 used to give 2,384 cycles at 85.9% (a wrap-around).
    text = (CONFIG_DIR / "aim-16ch.toml").read_text().replace("tRP = 16", f"tRP = {2**63 - 1}")
    preset = tmp_path / "bad.toml"
    preset.write_text(text)
    rc, out, err = run_cli(
        capsys, "run", "--kernel", "qk", "--tokens", "4096", "--dh", "128", "--preset", preset
    )
    assert (rc, out) == (2, "")
    assert "[timing] tRP = 9223372036854775807: outside the physical range 1 to 10,000" in err


def test_timing_conventions_are_checked():
    cfg = load_preset("aim-ramulator")
    assert (cfg.timing.mac_result_latency, cfg.timing.t_MOD) == (False, 32)
    assert cfg.timing.t_MAC_result == cfg.timing.tCCD
    with pytest.raises(ConfigError, match=r"\[timing\] t_MOD = -1: outside the physical range"):
        cfg.replace(**{"timing.t_MOD": -1})
    with pytest.raises(ConfigError, match=r"\[timing\] mac_result_latency = 1: must be true or"):
        cfg.replace(**{"timing.mac_result_latency": 1})
    with pytest.raises(ConfigError, match=r"\[timing\] t_MOD = 1.5: must be an integer"):
        cfg.replace(**{"timing.t_MOD": 1.5})
    assert cfg.replace(**{"timing.t_MOD": 0}).timing.t_MOD == 0
