"""LibraPIM Fig. 22 shape (``sim/experiments/librapim_energy.py``): every system's step energy
by part, checked against the preset's per-command values and the step's own numbers."""

from __future__ import annotations

import json

import pytest
from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.energy import HbmEnergyParams, load_energy
from pimphony.sim.experiments.librapim_energy import BAR_PARTS, fig22, npu_energy_params

from tests.helpers import run_cli, run_report


@pytest.fixture(scope="module")
def rows():
    # llm-1.8b, 8 requests of 64 tokens, one device: every system, fast
    return fig22(models=("llm-1.8b",), batches=(8,), contexts=(64,), tp=1)


def test_npu_values_derive_from_the_preset():
    """The AttAcc simulator's GPU: alu 0.32 pJ per MAC = 0.16 pJ/FLOP; mem (0.11 + 0.44 + 1.01
    + 1.23 + 0.5 + 0.3) x 8 = 28.72 pJ/B."""
    p = load_energy("hbm-pim")
    assert isinstance(p, HbmEnergyParams)
    e = npu_energy_params(p)
    assert e.pj_per_flop == pytest.approx(0.16)
    assert e.pj_per_dram_byte == pytest.approx(28.72)


def test_parts_sum_and_pim_dynamic_energy_is_counts_times_command_energy(rows):
    """Per system: the parts sum to the total; PIM MAC = MACs x 1,884.16 pJ and ACT/PRE = row
    switches x 14,417.92 pJ (x layers, counted per device; tp = 1)."""
    p, hw = load_energy("hbm-pim"), load_preset("librapim-hbm2")
    assert isinstance(p, HbmEnergyParams)
    spec = load_model("llm-1.8b")
    (row,) = rows
    assert set(row["systems"]) == {"npu+aim", "attacc", "neupims", "librapim", "librapim-no-dbo"}
    for s, e in row["systems"].items():
        parts = e["parts_j"]
        assert sum(parts[k] for k in BAR_PARTS) == pytest.approx(parts["total"], rel=1e-12), s
        c = e["pim_counts_per_device"]
        assert parts["mac"] == pytest.approx(c["MAC"] * 1884.16e-12)
        assert parts["activation"] == pytest.approx(e["row_switches_per_device"] * 14417.92e-12)
        assert parts["io"] == pytest.approx(
            (c.get("WR_INP", 0) * 204.8 + c.get("RD_OUT", 0) * 778.24) * 1e-12
        )
        assert e["joules_per_token"] == pytest.approx(parts["total"] / 8)
        assert 0.0 < e["pim_active_fraction"] <= 1.0
        # background lies between all channels precharged and all active over the step
        cc = hw.module.channels * e["step_ms"] * 1e-3 * 1e9  # channel-ns at 1 GHz
        assert 48.0 * cc * 1e-12 * 0.999 <= parts["background"] <= 66.0 * cc * 1e-12 * 1.001
        assert c["MAC"] % spec.layers == 0


def test_dbo_offload_adds_pim_work_over_neupims(rows):
    """The mechanism of the paper's ~20%: LibraPIM's offloaded FFN adds PIM MACs and GB writes
    while the NPU still does the rest; NPU+AiM and NeuPIMs run the same attention kernels."""
    (row,) = rows
    s = row["systems"]
    assert any(d["m"] > 0 for d in row["dbo"])
    assert s["librapim"]["parts_j"]["mac"] > s["neupims"]["parts_j"]["mac"]
    assert s["librapim"]["parts_j"]["xpu"] < s["neupims"]["parts_j"]["xpu"]
    assert s["neupims"]["vs_neupims"] == 1.0


def test_cli_writes_report_and_plot(capsys, tmp_path):
    out, doc, plot = run_report(
        capsys, tmp_path,
        *("librapim-energy", "--models", "llm-1.8b", "--batches", "8", "--contexts", "64"),
        *("--tp", "1"),
    )  # fmt: skip
    report = plot.with_suffix(".json")
    assert doc["provenance"] and doc["paper"]["librapim_vs_neupims"] == 1.2
    assert set(doc["mean_vs_neupims"]) == {
        "npu+aim",
        "attacc",
        "neupims",
        "librapim",
        "librapim-no-dbo",
    }
    assert plot.stat().st_size > 0 and "vs NeuPIMs" in out
    rc, _, err = run_cli(
        capsys, "librapim-energy", "--models", "llm-1.8b", "--batches", "8", "--contexts", "64",
        "--tp", "1", "--energy", "aim-cent", "--report", str(report), "--plot", str(plot),
        "--force",
    )  # fmt: skip
    assert rc != 0 and "not of kind 'hbm'" in err and "Traceback" not in err


def test_librapim_energy_option_equals_fig22(capsys, rows):
    """``pimphony librapim --energy`` prints each system's energy, the same numbers as Fig. 22's
    run of the same step; the parts sum to the total; a non-HBM preset is refused by name."""
    args = ("librapim", "--model", "llm-1.8b", "--batch", "8", "--context", "64", "--tp", "1")
    rc, out, err = run_cli(capsys, *args, "--energy", "--json")
    assert (rc, err) == (0, "")
    doc = json.loads(out)
    assert doc["energy_preset"] == "hbm-pim"
    fig = rows[0]["systems"]
    for name, e in fig.items():
        got = {k: v for k, v in doc["energy"][name]["parts_j"].items() if k != "unit"}
        assert got == pytest.approx({k: v for k, v in e["parts_j"].items() if k != "unit"})
    for e in doc["energy"].values():
        parts = {k: v for k, v in e["parts_j"].items() if k not in ("unit", "total")}
        assert sum(parts.values()) == pytest.approx(e["parts_j"]["total"], rel=1e-12)
        assert e["joules_per_token"] == pytest.approx(e["joules_per_step"] / 8)
    rc, text, err = run_cli(capsys, *args, "--energy")
    assert rc == 0 and "energy (hbm-pim)" in text and "J/token" in text
    rc, plain, _ = run_cli(capsys, *args, "--json")  # without the option: no energy block
    assert rc == 0 and "energy" not in json.loads(plain)
    rc, _, err = run_cli(capsys, *args, "--energy", "aim-cent")
    assert rc == 2 and "not of kind 'hbm'" in err and "Traceback" not in err


def test_per_channel_offload_charges_its_own_kernels(rows):
    """``offload=per-channel``: LibraPIM's offloaded FFN issues one request's whole FFN per
    request (llm-1.8b: (11008 x 2048 + 2048 x 5504) / 256 = 132,096 all-bank MACs) instead
    of a Fig. 14 pass per group (11008 x 2048 / 16 + 2048 x 5504 / 16 = 2,113,536); every
    other system's energy is unchanged."""
    (chan,) = fig22(models=("llm-1.8b",), batches=(8,), contexts=(64,), tp=1, offload="per-channel")
    (bank,) = rows
    layers = load_model("llm-1.8b").layers
    assert [d["m"] for d in chan["dbo"]] == [d["m"] for d in bank["dbo"]] == [4, 4]
    macs = {k: r["systems"]["librapim"]["pim_counts_per_device"]["MAC"] for k, r in
            (("bank", bank), ("chan", chan))}  # fmt: skip
    assert macs["bank"] - macs["chan"] == layers * 2 * (2_113_536 - 4 * 132_096)
    for s in ("npu+aim", "attacc", "neupims", "librapim-no-dbo"):
        assert chan["systems"][s]["parts_j"] == bank["systems"][s]["parts_j"], s
