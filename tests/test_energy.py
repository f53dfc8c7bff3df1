"""The energy model (``models/energy.py``, ``docs/energy.md``): presets, conversions, sums,
scaling, idle background and a DRAMPower-style cross-check, every number by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pimphony.models.channel import run_channel
from pimphony.models.config import load_preset
from pimphony.models.energy import (
    ENERGY_DIR,
    PARTS,
    EnergyConfigError,
    background_energy,
    channel_activity,
    channel_energy,
    dynamic_energy,
    load_energy,
    load_energy_config,
)
from pimphony.models.isa import Op, make_stream

from tests.helpers import refused_edit

ROOT = Path(__file__).resolve().parents[1]


def _energy(stream, cfg, params, sched="static", gaps=None):
    result = run_channel(stream, cfg, sched, valid_gaps=gaps)
    # Statistics only: the summary without per-command arrays.
    return result, channel_energy(channel_activity(result.to_dict(), cfg), cfg, params)


def test_cent_conversion_by_hand():
    """CENT's ACT line: 132.6 mW per chip / 2 channels = 66.3 mW per channel; x tRC 44.5 ns
    = 2950.35 pJ per bank (mW x ns = pJ); a row switch opens 16 banks: 47,205.6 pJ."""
    p = load_energy("aim-cent")
    cfg = load_preset("aim-32ch")
    assert p.values["act_power"] == pytest.approx(66.3)
    assert p.act_pre_pj_per_bank == pytest.approx(2950.35)
    assert p.per_command(cfg)["row_switch_pj"] == pytest.approx(16 * 2950.35)
    # RD 876.3 / 2 = 438.15 mW x tBL 1.25 ns = 547.6875 pJ; MAC 3 x 438.15 x 1.0 = 1314.45 pJ
    assert p.rd_pj == pytest.approx(547.6875)
    assert p.mac_pj == pytest.approx(1314.45)
    assert p.wr_pj == pytest.approx(553.15 * 1.25)
    # 32 B over the pins: 256 bit x 5.5 pJ/bit = 1408 pJ
    assert p.dq_pj(cfg) == pytest.approx(1408.0)
    # standby per channel: 527.5 / 2 and 366.3 / 2 mW; 16 chips x 2 channels on aim-32ch
    assert p.values["act_standby_power"] == pytest.approx(263.75)
    assert p.values["pre_standby_power"] == pytest.approx(183.15)
    assert p.chips(cfg) == 16
    assert p.chips(load_preset("aim-16ch")) == 8
    assert p.per_command(cfg)["module_pre_standby_mw"] == pytest.approx(32 * 183.15)


def _tiny_stream():
    # Two rows: the first copy opens row 0 and switches to row 1; a second copy switches back.
    return make_stream([(Op.WR_INP, 0), (Op.MAC, 0, 0, 0, 0), (Op.MAC, 0, 1, 0, 0), (Op.RD_OUT, 0)])


@pytest.mark.parametrize("sched", ["static", "dcs"])
def test_parts_sum_to_total_exactly(sched):
    cfg, p = load_preset("aim-16ch"), load_energy()
    from pimphony.compiler.kernels import compile_kernel

    prog = compile_kernel(cfg, "qk", tokens=512, d_h=128, gqa_group=1)
    _, e = _energy(prog.commands, cfg, p, sched)
    assert sum(e.parts.values()) == e.total
    d = e.to_dict("J")
    assert sum(v for k, v in d.items() if k not in ("unit", "total")) == d["total"]
    assert list(e.parts) == [str(x) for x in PARTS]


def test_hand_channel_energy():
    """WR_INP, MAC row 0, MAC row 1, RD_OUT on aim-16ch, static: 2 row switches (one
    precharges: 16 precharged cycles), 1 WR_INP (1408 pJ), 2 MACs, 1 RD_OUT (547.6875 +
    1408 pJ)."""
    cfg, p = load_preset("aim-16ch"), load_energy()
    result, e = _energy(_tiny_stream(), cfg, p)
    assert result.to_dict()["row_switches"] == 2
    assert e.mac == pytest.approx(2 * 1314.45)
    assert e.io == pytest.approx(1408.0 + 547.6875 + 1408.0)
    assert e.activation == pytest.approx(2 * 16 * 2950.35)
    cycles = result.cycles
    assert e.background == pytest.approx((263.75 * (cycles - 16) + 183.15 * 16) * 1.0)


def test_doubling_a_stream_doubles_its_dynamic_energy():
    cfg, p = load_preset("aim-16ch"), load_energy()
    one = _tiny_stream()
    two = np.concatenate([one, one])
    for sched in ("static", "dcs"):
        r1 = run_channel(one, cfg, sched)
        r2 = run_channel(two, cfg, sched)
        d1 = dynamic_energy(channel_activity(r1.to_dict(), cfg), cfg, p)
        d2 = dynamic_energy(channel_activity(r2.to_dict(), cfg), cfg, p)
        assert d2.total == pytest.approx(2 * d1.total)
        for k in ("mac", "io", "activation"):
            assert getattr(d2, k) == pytest.approx(2 * getattr(d1, k))


def test_idle_interval_background_is_power_times_cycles_times_tck():
    """One WR_INP offered after 1000 idle cycles: no row opens, so the whole run (1000 + 1
    + t_WR_INP 4 = 1005 cycles) is precharged standby: 183.15 mW x 1005 x 1 ns."""
    cfg, p = load_preset("aim-16ch"), load_energy()
    result, e = _energy(make_stream([(Op.WR_INP, 0)]), cfg, p, gaps=np.array([1000]))
    assert result.cycles == 1005
    assert e.background == pytest.approx(183.15 * 1005 * 1.0)
    assert background_energy(0, 1005, cfg, p) == e.background
    # the same interval at 2 GHz lasts half as long
    fast = cfg.replace(**{"module.freq_ghz": 2.0})
    assert background_energy(0, 1005, fast, p) == pytest.approx(183.15 * 1005 * 0.5)
    assert background_energy(1005, 0, cfg, p) == pytest.approx(263.75 * 1005)


# DRAMPower cross-check. Micron 4Gb DDR4-2400 x8 (DRAMPower memspecs/
# MICRON_4Gb_DDR4-2400_8bit_A.json, github.com/tukl-msd/DRAMPower commit 5f0c8b16): clock
# 1200 MHz (tCK = 1/1.2 ns), RP 16, RAS 39 cycles, burst length 8 (tBL = 4 tCK), VDD 1.2 V,
# IDD0 60.75 mA, IDD2N 38.25 mA, IDD3N 44.0 mA, IDD4R 184.5 mA.
VDD_V = 1.2
IDD0_MA, IDD2N_MA, IDD3N_MA, IDD4R_MA = 60.75, 38.25, 44.0, 184.5
TCK_NS = 1 / 1.2
T_RAS_NS, T_RP_NS, T_BL_NS = 39 * TCK_NS, 16 * TCK_NS, 4 * TCK_NS


def _ddr4_preset(tmp_path: Path):
    """Our preset format holding the DDR4 part: ACT power over t_rc = tRAS + tRP such that
    power x window is DRAMPower's E_ACT+PRE; RD over tBL at IDD4R - IDD3N; a 'MAC' is one
    read burst (factor 1, window tBL); standby VDD x IDD3N and VDD x IDD2N."""
    t_rc = T_RAS_NS + T_RP_NS
    act_mw = VDD_V * (IDD0_MA * t_rc - IDD3N_MA * T_RAS_NS - IDD2N_MA * T_RP_NS) / t_rc
    rd_mw = VDD_V * (IDD4R_MA - IDD3N_MA)

    def entry(value, unit, per):
        return f'{{ value = {value!r}, unit = "{unit}", per = "{per}", source = "memspec" }}'

    text = f"""name = "ddr4-check"
source = "DRAMPower memspec MICRON_4Gb_DDR4-2400_8bit_A"
channels_per_chip = 1
[values]
act_power = {entry(act_mw, "mW", "channel")}
t_rc = {entry(t_rc, "ns", "command")}
rd_power = {entry(rd_mw, "mW", "channel")}
wr_power = {entry(rd_mw, "mW", "channel")}
t_bl = {entry(T_BL_NS, "ns", "command")}
mac_rd_factor = {entry(1.0, "x", "command")}
t_ccd_l = {entry(T_BL_NS, "ns", "command")}
act_standby_power = {entry(VDD_V * IDD3N_MA / 1000, "W", "channel")}
pre_standby_power = {entry(VDD_V * IDD2N_MA, "mW", "channel")}
dq_energy = {entry(0.0, "pJ/bit", "bit")}
host_link_energy = {entry(0.0, "pJ/bit", "bit")}
internode_link_energy = {entry(0.0, "pJ/bit", "bit")}
epu_energy = {entry(0.0, "pJ/FLOP", "FLOP")}
"""
    path = tmp_path / "ddr4.toml"
    path.write_text(text)
    return load_energy_config(path)


@pytest.mark.parametrize(
    ("pattern", "cycles", "switches"),
    [("row-hit", 82, 1), ("row-miss", 586, 8)],
)
def test_drampower_cross_check(tmp_path, pattern, cycles, switches):
    """8 reads (MACs) on one row, or each on a new row, on a 16-bank channel at DDR4-2400
    timing; our energy equals DRAMPower's IDD formulas evaluated by hand.

    Schedules (static, docs/scheduling.md): row hit: ACT4 x 4 at 1, 7, 13, 19, reads at
    47..54, done 54 + t_MAC 28 = 82. Row miss: the k-th precharge waits tRAS after the last
    ACT4 (at 58, 131, ...: period 73), reads at 47 + 73 k, done 558 + 28 = 586. Precharged
    residency: 7 x tRP = 112 cycles (row miss), 0 (row hit; the first ACT taken at cycle 0).
    """
    cfg = load_preset("aim-16ch").replace(
        **{"timing.tRP": 16, "timing.tRAS": 39, "module.freq_ghz": 1.2}
    )
    p = _ddr4_preset(tmp_path)
    if pattern == "row-hit":
        stream = make_stream([(Op.MAC, 0, 0, c, 0) for c in range(8)])
    else:
        stream = make_stream([(Op.MAC, 0, r, 0, 0) for r in range(8)])
    result, e = _energy(stream, cfg, p)
    assert result.cycles == cycles
    assert result.to_dict()["row_switches"] == switches
    # E_ACT+PRE per bank, pJ (V x mA x ns): VDD (IDD0 (tRAS + tRP) - IDD3N tRAS - IDD2N tRP)
    #   = 1.2 x (60.75 x 45.833 - 44.0 x 32.5 - 38.25 x 13.333) = 1.2 x 844.375 = 1013.25 pJ
    e_act_pre = VDD_V * (IDD0_MA * (T_RAS_NS + T_RP_NS) - IDD3N_MA * T_RAS_NS - IDD2N_MA * T_RP_NS)
    assert e_act_pre == pytest.approx(1013.25)
    # E_RD per burst, pJ: VDD (IDD4R - IDD3N) tBL = 1.2 x 140.5 x 3.333 = 562 pJ
    e_rd = VDD_V * (IDD4R_MA - IDD3N_MA) * T_BL_NS
    assert e_rd == pytest.approx(562.0)
    precharged = (switches - 1) * 16
    active = cycles - precharged
    # background, pJ: VDD IDD3N x active x tCK + VDD IDD2N x precharged x tCK
    e_bg = VDD_V * (IDD3N_MA * active + IDD2N_MA * precharged) * TCK_NS
    expected = switches * 16 * e_act_pre + 8 * e_rd + e_bg
    assert e.activation == pytest.approx(switches * 16 * e_act_pre)
    assert e.mac == pytest.approx(8 * e_rd)
    assert e.background == pytest.approx(e_bg)
    assert e.total == pytest.approx(expected)


def _preset_text() -> str:
    return (ENERGY_DIR / "aim-cent.toml").read_text()


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'unit = "ns", per = "command", source = "[C] tRC',
            'unit = "mW", per = "command", source = "[C] tRC',
            "[values] t_rc.unit = 'mW': not a unit of time; allowed: ns, ps, us",
        ),
        (
            'value = 5.5, unit = "pJ/bit", per = "bit"',
            'value = 5.5, unit = "pJ/bit", per = "chip"',
            "[values] dq_energy.per = 'chip': dq_energy cannot be per that; allowed: bit",
        ),
        (
            'value = 132.6, unit = "mW"',
            'value = 132.6, unit = "pJ"',
            "act_power.unit = 'pJ': not a unit of power; allowed: mW, W, uW",
        ),
        ("channels_per_chip = 2", "channels_per_chip = 0", "channels_per_chip = 0: must be a"),
        ('value = 132.6, unit = "mW"', 'value = -1, unit = "mW"', "act_power.value = -1: must"),
        ("[values]", "volts = 1.2\n[values]", "unknown key 'volts' at top level; allowed:"),
        (
            'value = 132.6, unit = "mW"',
            'value = 1e300, unit = "mW"',
            "act_power.value = 1e+300 mW: outside the physical range 0 to 100000 mW",
        ),
        (
            'value = 5.5, unit = "pJ/bit"',
            'value = 11, unit = "nJ/bit"',
            "dq_energy.value = 11 nJ/bit: outside the physical range 0 to 10000 pJ/bit",
        ),
    ],
)
def test_bad_preset_refused(tmp_path, old, new, message):
    text = _preset_text()
    assert message in refused_edit(tmp_path, text, old, new, load_energy_config, EnergyConfigError)


def test_missing_source_refused(tmp_path):
    text = _preset_text().replace(', source = "[C] tBL = 1.25 (window of one RD/WR burst)"', "")
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(EnergyConfigError, match=r"t_bl: missing key 'source'"):
        load_energy_config(path)


def test_chip_count_must_fit_the_hardware(tmp_path):
    path = tmp_path / "chips.toml"
    path.write_text(_preset_text().replace("[values]", "chips_per_module = 16\n[values]"))
    p = load_energy_config(path)
    assert p.chips(load_preset("aim-32ch")) == 16
    with pytest.raises(EnergyConfigError) as exc:
        p.chips(load_preset("aim-16ch"))
    assert "chips_per_module = 16 but hardware preset aim-16ch has 16 channels" in str(exc.value)
    assert "allowed: 8" in str(exc.value)
    odd = tmp_path / "odd.toml"
    odd.write_text(_preset_text().replace("channels_per_chip = 2", "channels_per_chip = 3"))
    with pytest.raises(EnergyConfigError, match="channels_per_chip = 3 does not divide the 16"):
        load_energy_config(odd).chips(load_preset("aim-16ch"))


def test_cli_bad_energy_preset_is_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "pimphony.sim.cli", "run", "--kernel", "qk", "--tokens", "64",
         "--dh", "64", "--energy", "nope"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "unknown energy preset 'nope'; available: aim-cent" in proc.stderr


# ------------------------------------------------------------------------------ decode steps


def _pim_step(**kw):
    from pimphony.compiler.llm import load_model
    from pimphony.sim.systems.setup import DecodeSetup
    from pimphony.sim.systems.step import run_decode

    hw = load_preset("aim-32ch-32g")
    setup = DecodeSetup(load_model("llm-7b"), hw, (4096,), **kw)
    return hw, run_decode(setup)


def test_pim_decode_energy_parts_and_idle_background():
    """Parts sum to each phase's total exactly; the 'other' phase is the rest of every
    channel's step time, precharged: 183.15 mW x (modules x 32 x cycles - FC and attention
    channel-cycles) x 1 ns."""
    hw, rep = _pim_step(tp=2)
    e = rep.energy
    for phase in (*e["phases"].values(), e["parts"]):
        assert sum(v for k, v in phase.items() if k not in ("unit", "total")) == phase["total"]
    assert e["joules_per_token"] == e["joules_per_step"] / rep.batch
    fc = sum(rep.ops[k]["cycles"] for k in ("qkv", "proj", "ffn1", "ffn2"))
    att = sum(rep.ops[k]["cycles"] for k in ("qk", "softmax", "sv"))
    idle = rep.modules * 32 * rep.cycles - 2 * 32 * (fc + att)
    assert idle > 0
    assert e["phases"]["other"]["background"] == pytest.approx(183.15 * idle * 1e-12)
    assert e["phases"]["other"]["mac"] == 0.0
    assert e["phases"]["attention"]["mac"] > 0 and e["phases"]["fc"]["mac"] > 0
    # TP all-reduce: 2 per layer x 2 modules x (up + down) x 4096 x 2 B, 32 layers, plus the
    # stage hop (up + down): 4.4 pJ/bit x 8 bit/B
    host = 32 * 2 * 2 * 2 * 8192 + 2 * 8192
    assert e["link_bytes"] == {"host": host, "internode": 0}
    assert e["phases"]["other"]["links"] == pytest.approx(host * 8 * 4.4e-12)


def test_pim_decode_mac_energy_is_mac_count_times_mac_energy():
    """Every MAC of the step costs 3 x 438.15 mW x 1 ns = 1314.45 pJ: the report's MAC
    energy is the decode step's MAC count (``ops`` MAC utilisation x cycles) x that."""
    hw, rep = _pim_step(tp=1)
    macs = 0
    for k in ("qkv", "proj", "ffn1", "ffn2", "qk", "sv"):
        op = rep.ops[k]
        macs += op["mac_utilization"] * op["cycles"] * 32
    assert rep.energy["parts"]["mac"] == pytest.approx(macs * 1314.45e-12, rel=1e-9)


def test_gpu_decode_energy_by_hand():
    """A100: pJ/FLOP 1.282 and 31.2 pJ/B; attention of one 4096-token request moves its KV,
    2 x 32 heads x 128 x 2 B x 4096 = 67,108,864 B per layer, and the step's attention energy
    is 32 layers x (issued FLOPs x 1.282 + bytes x 31.2) pJ."""
    from pimphony.compiler.llm import load_model
    from pimphony.models.xpu import attention_cost
    from pimphony.models.xpu_config import load_xpu
    from pimphony.sim.systems.gpu import GpuSetup, run_gpu_decode

    gpu = load_xpu("a100-80gb")
    rep = run_gpu_decode(GpuSetup(load_model("llm-7b"), gpu, 1, (4096,)))
    cost = attention_cost(gpu, [4096], 32, 32, 128)
    assert cost.traffic.kv == 67_108_864
    want = 32 * (cost.issued_flops * 1.282 + cost.bytes * 31.2) * 1e-12
    assert rep.energy["phases"]["attention"]["xpu"] == pytest.approx(want)
    assert rep.energy["parts"]["total"] == rep.energy["joules_per_step"]


def test_hetero_decode_energy():
    """xPU+PIM: FC on the NPU, attention on PIM; the PIM side's MAC energy equals the
    PIM-only step's attention MAC energy (same attention kernels) and the parts add up."""
    from pimphony.compiler.llm import load_model
    from pimphony.models.xpu_config import load_xpu
    from pimphony.sim.systems.hetero import HeteroSetup, run_hetero_decode
    from pimphony.sim.systems.setup import DecodeSetup

    hw = load_preset("aim-32ch-32g")
    spec = load_model("llm-7b")
    pim = DecodeSetup(spec, hw, (4096,), tp=2)
    rep = run_hetero_decode(HeteroSetup(pim, load_xpu("neupims-npu"), 1))
    e = rep.energy
    assert e["phases"]["fc"]["xpu"] > 0 and e["phases"]["fc"]["mac"] == 0
    _, pim_only = _pim_step(tp=2)
    assert e["phases"]["attention"]["mac"] == pytest.approx(
        pim_only.energy["phases"]["attention"]["mac"]
    )
    for phase in (*e["phases"].values(), e["parts"]):
        assert sum(v for k, v in phase.items() if k not in ("unit", "total")) == phase["total"]


def test_energy_experiment_fig16(tmp_path):
    """``pimphony energy``: CENT vs CENT+PIMphony on one row; PIMphony's attention takes less
    energy and less background share; the plot is written; a bad row is one line."""
    plot = tmp_path / "fig16.png"
    proc = subprocess.run(
        [sys.executable, "-m", "pimphony.sim.cli", "energy", "--rows", "7B-32K", "--json", "--plot",
         str(plot)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    import json

    rows = json.loads(proc.stdout)["rows"]
    base, ours = rows
    assert (base["system"], ours["system"]) == ("CENT", "CENT+PIMphony")
    assert ours["attention_j_per_token"] < base["attention_j_per_token"]
    assert ours["attention_background_share"] < base["attention_background_share"]
    assert ours["attention_energy_reduction"] == pytest.approx(
        base["attention_j_per_token"] / ours["attention_j_per_token"]
    )
    assert plot.stat().st_size > 0
    bad = subprocess.run(
        [sys.executable, "-m", "pimphony.sim.cli", "energy", "--rows", "9B"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--rows '9B': unknown row(s); allowed: 7B-32K" in bad.stderr
