"""``sim.eda.area``: Yosys synthesis puts the DCS tables in flip-flops, sized as the formula
says."""

from __future__ import annotations

import json

import pytest
from pimphony.models.config import load_preset
from pimphony.sim.eda.area import (
    DCS_PARTS,
    PIMPHONY_ENTRIES,
    PIMPHONY_ENTRY_BITS,
    PIMPHONY_TABLE_BYTES,
    area_report,
    dcs_table_bits,
    format_report,
    is_flip_flop,
)

from tests.helpers import run_cli

SMALL = {
    "channel.gbuf_entries": 8,
    "channel.obuf_entries": 8,
    "dcs.queue_depth": 4,
    "dcs.id_bits": 4,
    "dcs.timestamp_bits": 10,
}
"""A small DCS (full size takes ~30 s to synthesise; ``make area`` runs it)."""


@pytest.fixture(scope="module")
def small_cfg():
    return load_preset("aim-16ch").replace(**SMALL)


@pytest.fixture(scope="module")
def report(small_cfg, tmp_path_factory):
    out = tmp_path_factory.mktemp("area")
    return area_report(small_cfg, ["static_sched", "dcs"], out, progress=False), out


@pytest.fixture(scope="module")
def doubled(small_cfg, tmp_path_factory):
    cfg = small_cfg.replace(
        **{
            "channel.gbuf_entries": 2 * small_cfg.channel.gbuf_entries,
            "channel.obuf_entries": 2 * small_cfg.channel.obuf_entries,
        }
    )
    out = tmp_path_factory.mktemp("area2")
    return cfg, area_report(cfg, ["dcs"], out, progress=False)


def test_pimphony_figure_is_consistent():
    assert PIMPHONY_ENTRIES * PIMPHONY_ENTRY_BITS == PIMPHONY_TABLE_BYTES * 8


def test_formula_from_config():
    cfg = load_preset("aim-16ch")
    g, o = cfg.channel.gbuf_entries, cfg.channel.obuf_entries
    ids, ts = cfg.dcs.id_bits, cfg.dcs.timestamp_bits
    bits = dcs_table_bits(cfg)
    assert bits["D-Table"] == (g + o) * ids
    assert bits["S-Table"] == g * (ids + ts) + o * (ids + ts + 1) + (g + o)
    assert bits["S-Table live bits"] == g + o
    assert bits["total"] == bits["D-Table"] + bits["S-Table"]


def test_flip_flop_types():
    for t in ("$_DFF_P_", "$_DFFE_PP_", "$_SDFF_PP0_", "$_SDFFE_PP0P_", "$_SDFFCE_PP0P_", "$dff"):
        assert is_flip_flop(t)
    for t in ("$_AND_", "$_MUX_", "$scopeinfo", "$mem_v2"):
        assert not is_flip_flop(t)


def test_tables_are_in_flip_flops(report, small_cfg):
    rep, _ = report
    dcs = rep["blocks"]["dcs"]
    formula = dcs_table_bits(small_cfg)
    assert dcs["flip_flop_bits"] >= formula["total"]
    assert dcs["flip_flop_bits"] == dcs["flip_flop_cells"]  # generic cells are one bit each
    assert dcs["latch_cells"] == 0
    # Every table, queue and live vector is found by name among the flip-flops.
    parts = dcs["flip_flop_bits_by_part"]
    for names in DCS_PARTS.values():
        for name in names:
            assert parts.get(name, 0) > 0, name
    synth = rep["dcs_tables"]["synthesised_flip_flop_bits"]
    for row in ("D-Table", "S-Table words", "S-Table live bits", "S-Table", "total"):
        assert synth[row] == formula[row], row
    assert sum(dcs["flip_flop_bits_by_part"].values()) == dcs["flip_flop_bits"]
    # The memories were inferred before being mapped to flip-flops; none survive synthesis.
    assert dcs["memory_cells_after_synth"] == 0
    assert {"d_table_gbuf", "d_table_obuf", "s_table_gbuf", "s_table_obuf"} <= set(dcs["memories"])


def test_doubling_entries_grows_by_the_formula(report, doubled, small_cfg):
    rep, _ = report
    cfg2, rep2 = doubled
    grow = dcs_table_bits(cfg2)["total"] - dcs_table_bits(small_cfg)["total"]
    assert grow > 0
    delta = rep2["blocks"]["dcs"]["flip_flop_bits"] - rep["blocks"]["dcs"]["flip_flop_bits"]
    assert delta >= grow


def test_static_has_far_fewer_flops(report):
    rep, _ = report
    static = rep["blocks"]["static_sched"]["flip_flop_bits"]
    dcs = rep["blocks"]["dcs"]["flip_flop_bits"]
    assert 0 < static * 2 < dcs
    assert rep["blocks"]["static_sched"]["cells"] < rep["blocks"]["dcs"]["cells"]


def test_json_keys(report):
    rep, out = report
    on_disk = json.loads((out / "area.json").read_text())
    assert on_disk == json.loads(json.dumps(rep))
    assert set(on_disk) == {"preset", "yosys", "blocks", "dcs_tables"}
    assert on_disk["yosys"].startswith("Yosys")
    assert set(on_disk["blocks"]) == {"static_sched", "dcs"}
    for area in on_disk["blocks"].values():
        assert {
            "block",
            "seconds",
            "yosys",
            "cells",
            "flip_flop_cells",
            "flip_flop_bits",
            "latch_cells",
            "memory_bits",
            "memory_cells_after_synth",
            "memories",
            "flip_flop_bits_by_part",
            "flip_flop_bits_by_signal",
        } <= set(area)
    tables = on_disk["dcs_tables"]
    assert {
        "formula_bits",
        "formula_bytes",
        "synthesised_flip_flop_bits",
        "pimphony_bytes",
        "difference_bits",
    } <= set(tables)
    assert tables["pimphony_bytes"] == PIMPHONY_TABLE_BYTES
    for block in ("static_sched", "dcs"):
        for suffix in (".v", ".ys", ".log", ".stat.json"):
            assert (out / f"{block}{suffix}").is_file()


def test_text_report(report):
    rep, _ = report
    text = format_report(rep)
    assert "PIMphony: 576 B per controller (D-Table + S-Table)" in text
    for word in ("static_sched", "dcs", "D-Table", "S-Table", "flip-flop bits"):
        assert word in text


def test_unknown_block_is_a_clear_error(capsys):
    rc, _, err = run_cli(capsys, "area", "--blocks", "nope")
    assert rc == 2
    assert "unknown block(s) 'nope'" in err and "dcs" in err
    with pytest.raises(ValueError, match="unknown block"):
        area_report(load_preset("aim-16ch"), ["nope"])
