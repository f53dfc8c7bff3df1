"""``pimphony decode --energy PRESET``: the decode step's energy from a chosen preset of the
registry (``configs/energy/``), checked against the per-command energies computed by hand
(``docs/energy.md``)."""

from __future__ import annotations

import json

import pytest
from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.energy import ENERGY_DIR, load_energy
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.systems.hetero import HeteroSetup, run_hetero_decode
from pimphony.sim.systems.setup import DecodeSetup
from pimphony.sim.systems.step import run_decode

from tests.helpers import cli_process

LLM7B = load_model("llm-7b")
# Per command on an AiM channel (16 banks, 2 KiB rows, 32 B columns), pJ:
# aim-cent (CENT calculator, per channel = per chip / 2): MAC 3 x 438.15 mW x 1 ns; ACT+PRE
# per bank 66.3 mW x 44.5 ns; links 4.4 pJ/bit. hbm-pim (per bit, AttAcc/FGDRAM): MAC 16 banks
# x (256 bit x 0.44 + 16 lanes x 0.32); ACT+PRE per bank 0.11 x 16,384 bit; links 1.3 pJ/bit.
CENT_MAC, CENT_ACT = 3 * 438.15 * 1.0, 66.3 * 44.5
HBM_MAC, HBM_ACT = 16 * (256 * 0.44 + 16 * 0.32), 0.11 * 8 * 2048


@pytest.fixture(scope="module")
def pim_reports():
    setup = DecodeSetup(LLM7B, load_preset("aim-32ch-32g"), (4096, 4096))
    return {n: run_decode(setup, energy=load_energy(n)).energy for n in ("aim-cent", "hbm-pim")}


def test_a_different_preset_changes_the_numbers_by_hand(pim_reports):
    """The same step (same commands, rows, residency) under two presets: every dynamic part
    scales by the ratio of the per-command energies computed by hand; the EPU (0.75 pJ/FLOP in
    both) is unchanged; the parts still sum to the total."""
    cent, hbm = pim_reports["aim-cent"], pim_reports["hbm-pim"]
    assert (cent["preset"], hbm["preset"]) == ("aim-cent", "hbm-pim")
    per_mac = (CENT_MAC, HBM_MAC)
    assert per_mac == pytest.approx((1314.45, 1884.16))
    c, h = cent["parts"], hbm["parts"]
    assert c["mac"] > 0 and c["activation"] > 0 and c["links"] > 0
    assert h["mac"] / c["mac"] == pytest.approx(HBM_MAC / CENT_MAC, rel=1e-12)
    assert h["activation"] / c["activation"] == pytest.approx(HBM_ACT / CENT_ACT, rel=1e-12)
    assert h["links"] / c["links"] == pytest.approx(1.3 / 4.4, rel=1e-12)
    assert h["epu"] == pytest.approx(c["epu"], rel=1e-12)
    for e in (cent, hbm):
        assert e["parts"]["total"] == pytest.approx(sum(
            v for k, v in e["parts"].items() if k not in ("unit", "total")
        ), rel=1e-15)  # fmt: skip
        assert e["joules_per_token"] == pytest.approx(e["joules_per_step"] / 2)


def test_xpu_pim_takes_the_preset_for_its_pim_side():
    """xPU+PIM: the xPU's energy is its own preset's; the PIM attention's MACs scale as above."""
    pim = DecodeSetup(LLM7B, load_preset("pimphony-neupims"), (2048, 1024), partition="tcp")
    setup = HeteroSetup(pim, load_xpu("neupims-npu"), 1)
    cent = run_hetero_decode(setup, params=load_energy("aim-cent")).energy
    hbm = run_hetero_decode(setup, params=load_energy("hbm-pim")).energy
    assert hbm["preset"] == "hbm-pim + neupims-npu"
    assert hbm["parts"]["xpu"] == cent["parts"]["xpu"] > 0
    ratio = hbm["parts"]["mac"] / cent["parts"]["mac"]
    assert ratio == pytest.approx(HBM_MAC / CENT_MAC, rel=1e-12)


def test_cli_energy_option(tmp_path):
    """A preset file with both standby powers doubled doubles the step's background and
    nothing else; the report names the preset and its provenance the option; an unknown name,
    a preset that does not fit the hardware and --system gpu are refused."""
    text = (ENERGY_DIR / "aim-cent.toml").read_text()
    for old, new in (("527.5", "1055.0"), ("366.3", "732.6")):
        assert f"value = {old}," in text
        text = text.replace(f"value = {old},", f"value = {new},")
    doubled = tmp_path / "doubled.toml"
    doubled.write_text(text)
    base = ["decode", "--model", "llm-7b", "--context", "1024", "--batch", "2", "--json"]
    runs = {}
    for name, preset in (("cent", "aim-cent"), ("doubled", str(doubled))):
        out = cli_process(*base, "--energy", preset, "--report", f"{name}.json", "--plot",
                   f"{name}.png", cwd=tmp_path)  # fmt: skip
        assert out.returncode == 0, out.stderr
        runs[name] = json.loads(out.stdout)
    a, b = runs["cent"]["energy"]["parts"], runs["doubled"]["energy"]["parts"]
    assert b["background"] == pytest.approx(2 * a["background"], rel=1e-12)
    for part in ("mac", "io", "activation", "epu", "links"):
        assert b[part] == a[part]
    assert runs["doubled"]["energy"]["preset"] == "aim-cent"  # the file keeps the name
    assert runs["doubled"]["provenance"]["options"]["energy"] == str(doubled)
    assert "energy" not in runs["cent"]["provenance"]["options"]  # the default is implied
    bad = cli_process(*base, "--energy", "nope", cwd=tmp_path)
    assert bad.returncode != 0 and "unknown energy preset 'nope'; available:" in bad.stderr
    assert "Traceback" not in bad.stderr
    odd = tmp_path / "odd.toml"
    odd.write_text((ENERGY_DIR / "aim-cent.toml").read_text().replace(
        "channels_per_chip = 2", "channels_per_chip = 2\nchips_per_module = 3"
    ))  # fmt: skip
    bad = cli_process(*base, "--energy", str(odd), cwd=tmp_path)
    assert bad.returncode != 0 and "chips_per_module = 3" in bad.stderr
    assert "allowed: 16" in bad.stderr and "Traceback" not in bad.stderr
    gpu = cli_process("decode", "--system", "gpu", "--energy", "hbm-pim", "--context", "128",
               cwd=tmp_path)  # fmt: skip
    assert gpu.returncode != 0 and "--system gpu does not use --energy" in gpu.stderr


def test_text_line_lists_every_part():
    """The text report's energy lines: phases, then every part (J per step); a part the
    block says is not modelled is named."""
    from pimphony.models.energy import Energy
    from pimphony.sim.systems.energy import energy_line, energy_report

    phases = {
        "fc": Energy(mac=1e12, io=2e12),
        "attention": Energy(activation=3e12, background=4e12),
        "other": Energy(epu=5e12, xpu=6e12, links=7e12),
    }
    block = energy_report(phases, 4, "p")
    head, parts = energy_line(block).split("\n")
    assert "7 J/token, 28 J/step" in head
    expect = "MAC 1, I/O 2, ACT/PRE 3, background 4, EPU 5, xPU 6, links 7"
    assert parts == f"  by part, J/step: {expect}"
    block["links"] = "NVLink energy not modelled"
    assert energy_line(block).endswith("links 7 (NVLink energy not modelled)")
