"""Energy of the HBM presets (``kind = "hbm"``, ``configs/energy/hbm-pim.toml``): the
conversion of HBM-PIM command streams (``models.energy.hbm_pim_energy``) and of AiM commands
on HBM2 (LibraPIM's PIM), every number by hand (``docs/energy.md``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pimphony.compiler.pim_gemv import lower_gemv
from pimphony.models.backends import load_backend
from pimphony.models.config import load_preset
from pimphony.models.energy import (
    ENERGY_DIR,
    ActBasis,
    EnergyConfigError,
    HbmEnergyParams,
    HbmPimActivity,
    hbm_pim_activity,
    hbm_pim_energy,
    load_energy,
    load_energy_config,
)
from pimphony.models.hbm_pim import COMMAND_DTYPE, Op, time_stream

from tests.helpers import cli_process, refused_edit

# The preset's values, pJ/bit (AttAcc simulator src/config.py, FGDRAM).
CELL_ACT, CELL_COL, BANK_BG, BG_GIO, TSV, INTERPOSER, ALU = 0.11, 0.44, 1.01, 1.23, 0.5, 0.3, 0.32
HOST_PATH = BANK_BG + BG_GIO + TSV + INTERPOSER  # column decoder -> host: 3.04 pJ/bit


def _params() -> HbmEnergyParams:
    p = load_energy("hbm-pim")
    assert isinstance(p, HbmEnergyParams)
    return p


def _run(cfg, k, macs):
    tl = time_stream(cfg, k.stream)
    return hbm_pim_activity(cfg, k.stream, k.payload, tl.issue, tl.cycles, macs, k.layout.channels)


def test_preset_units_and_structure():
    """DRAMsim3's HBM2 IDDs are per 128-bit channel: per pseudo-channel 55 / 2 and 40 / 2 mA,
    x 1.2 V = 33 and 24 mW; hbm-pim's 16 pseudo-channels are one stack of 8 channels x 2,
    librapim-hbm2's 64 channels are 8 stacks (LibraPIM Table 2: "HBM2 / 8")."""
    p = _params()
    assert p.values["idd3n"] == pytest.approx(27.5)
    assert p.values["idd2n"] == pytest.approx(20.0)
    hbm = load_backend("hbm-pim")
    assert p.standby_mw(hbm) == pytest.approx((33.0, 24.0))
    assert p.chips(hbm) == 1
    aim = load_preset("librapim-hbm2")
    assert p.standby_mw(aim) == pytest.approx((66.0, 48.0))  # a whole channel
    assert p.chips(aim) == 8
    assert pytest.approx(p.host_path) == HOST_PATH


def test_aim_commands_on_hbm_by_hand():
    """librapim-hbm2 (16 banks, 1 KiB rows, 32 B columns): an all-bank MAC reads 16 columns
    from the cells and MACs 16 lanes in each bank: 16 x (256 x 0.44 + 16 x 0.32) = 1,884.16
    pJ; RD_OUT 256 bit x 3.04 = 778.24 pJ; WR_INP 256 x (0.5 + 0.3) = 204.8 pJ; a row switch
    16 banks x 8,192 bit x 0.11 = 14,417.92 pJ."""
    p, cfg = _params(), load_preset("librapim-hbm2")
    pj = p.op_pj(cfg)
    assert pj["MAC"] == pytest.approx(16 * (256 * CELL_COL + 16 * ALU)) == 1884.16
    assert pj["RD_OUT"] == pytest.approx(256 * HOST_PATH) == 778.24
    assert pj["WR_INP"] == pytest.approx(256 * (TSV + INTERPOSER)) == 204.8
    assert p.row_switch_pj(cfg) == pytest.approx(16 * 8192 * CELL_ACT) == 14417.92


def test_small_gemv_by_hand():
    """64 x 128 on one pseudo-channel (docs/dcc.md's worked example, 733 cycles).

    Commands: 4 single-bank entry ACTs + 6 all-bank ACTs (register row, weight rows 0 and 1,
    result row, register row, exit row) = 4 + 6 x 16 = 100 bank activations; 69 RD triggers
    (64 MACs + 5 dummy reads) + 8 MOV WR triggers = 77; 11 register WRs (CRF, control on,
    8 GRF_A, control off); 6 mode writes (4 entry, 2 exit), plain column writes.
    Residency from the worked example's PRE -> ACT gaps: three 1-cycle gaps between the entry
    visits (PRE at 36, 73, 110; next ACT one cycle later) and six of tRP = 14 (147 -> 161,
    233 -> 247, 390 -> 404, 567 -> 581, 645 -> 659, 695 -> 709); the exit row is open at the
    end: 87 precharged, 646 active cycles.
    """
    cfg, p = load_backend("hbm-pim"), _params()
    k = lower_gemv(cfg, 64, 128, channels=1)
    act = _run(cfg, k, 64)
    assert act.bank_activations == 4 + 6 * 16
    assert dict(act.accesses) == {"trigger": 77, "register": 11, "host": 6, "broadcast": 0}
    assert (act.precharged_cycles, act.active_cycles) == (3 * 1 + 6 * 14, 733 - 87)
    e = hbm_pim_energy(act, cfg, p)
    units, lanes, bits = 8, 16, 256
    mac = 64 * units * lanes * ALU + 77 * units * bits * CELL_COL  # 2,621.44 + 69,386.24
    io = 11 * bits * HOST_PATH + 6 * bits * (CELL_COL + HOST_PATH)  # 8,560.64 + 5,345.28
    activation = 100 * 8192 * CELL_ACT  # 90,112
    background = (1.2 * 27.5 * 646 + 1.2 * 20.0 * 87) / 1.2  # mW x cycles x (1 / 1.2 GHz) ns
    assert e.mac == pytest.approx(mac) == pytest.approx(72_007.68)
    assert e.io == pytest.approx(io) == pytest.approx(13_905.92)
    assert e.activation == pytest.approx(activation)
    assert e.background == pytest.approx(background) == pytest.approx(19_505.0)
    assert e.total == pytest.approx(195_530.6)
    # AttAcc's reading: 0.11 pJ per bit moved to or from the cells
    acc = hbm_pim_energy(act, cfg, p, ActBasis.ACCESSED)
    assert acc.activation == pytest.approx((77 * units + 6) * bits * CELL_ACT)  # 17,515.52
    assert (acc.mac, acc.io, acc.background) == (e.mac, e.io, e.background)


def test_parts_sum_to_total_and_channels_scale():
    cfg, p = load_backend("hbm-pim"), _params()
    k = lower_gemv(cfg, 512, 1024, channels=4)
    e = hbm_pim_energy(_run(cfg, k, 2 * 8 * 64), cfg, p)  # J = 2, T = 8 tiles
    assert sum(e.parts.values()) == e.total
    d = e.to_dict("pJ")
    assert sum(v for key, v in d.items() if key not in ("unit", "total")) == d["total"]
    one = hbm_pim_energy(_run(cfg, lower_gemv(cfg, 128, 1024, channels=1), 2 * 8 * 64), cfg, p)
    assert e.total == pytest.approx(4 * one.total)  # the same stream on 4 pseudo-channels


def _sb_stream(n_rows: int) -> np.ndarray:
    """Single-bank traffic: per row ACT, WR, RD, PRE on bank (row mod 16)."""
    cmds = []
    for r in range(n_rows):
        b = r % 16
        cmds += [
            (Op.ACT, b, r, 0, -1),
            (Op.WR, b, r, 0, 0),
            (Op.RD, b, r, 1, -1),
            (Op.PRE, b, 0, 0, -1),
        ]
    return np.array(cmds, dtype=COMMAND_DTYPE)


def test_doubling_a_stream_doubles_its_dynamic_energy():
    """A stream followed by itself: twice the activations and accesses, so exactly twice the
    MAC, I/O and activation energy (2 x 3 rows: 6 x 901.12 pJ activation, 12 host columns)."""
    cfg, p = load_backend("hbm-pim"), _params()
    payload = np.zeros((1, 16), dtype=np.uint16)

    def energy(stream):
        tl = time_stream(cfg, stream)
        a = hbm_pim_activity(cfg, stream, payload, tl.issue, tl.cycles, 0)
        return a, hbm_pim_energy(a, cfg, p)

    once_s = _sb_stream(3)
    a1, e1 = energy(once_s)
    a2, e2 = energy(np.concatenate([once_s, once_s]))
    assert a2.bank_activations == 2 * a1.bank_activations == 6
    assert a2.accesses["host"] == 2 * a1.accesses["host"] == 12
    for part in ("mac", "io", "activation"):
        assert getattr(e2, part) == pytest.approx(2 * getattr(e1, part))
    assert e1.activation == pytest.approx(3 * 8192 * CELL_ACT)
    assert e1.io == pytest.approx(6 * 256 * (CELL_COL + HOST_PATH))


def test_idle_background_is_power_times_cycles_times_tck():
    """1,000 idle cycles of one pseudo-channel: 24 mW (1.2 V x 20 mA) x 1,000 x tCK: 1/1.2 ns
    on hbm-pim (20,000 pJ), 1/1.3 ns on hbm-pim-hbm3; 8 groups idle 8x that."""
    p = _params()
    idle = HbmPimActivity(
        1, 0, {"trigger": 0, "register": 0, "host": 0, "broadcast": 0}, 0, 0, 1000
    )
    hbm = load_backend("hbm-pim")
    e = hbm_pim_energy(idle, hbm, p)
    assert e.background == pytest.approx(24.0 * 1000 / 1.2) == pytest.approx(20_000.0)
    assert e.total == e.background
    h3 = load_backend("hbm-pim-hbm3")
    assert hbm_pim_energy(idle, h3, p).background == pytest.approx(24.0 * 1000 / 1.3)
    eight = HbmPimActivity(8, 0, idle.accesses, 0, 0, 1000)
    assert hbm_pim_energy(eight, hbm, p).background == pytest.approx(8 * 20_000.0)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('value = 0.5, unit = "pJ/bit"', 'value = 0.5, unit = "mW"',
         "tsv_energy.unit = 'mW': not a unit of energy per bit; allowed: pJ/bit"),
        ('value = 55.0, unit = "mA", per = "channel"', 'value = 55.0, unit = "mA", per = "chip"',
         "idd3n.per = 'chip': idd3n cannot be per that; allowed: channel, pseudo-channel"),
        ('unit = "pJ/MAC"', 'unit = "pJ/FLOP"', "alu_energy.unit = 'pJ/FLOP': not a unit of "
         "energy per mac; allowed: pJ/MAC"),
        ('\nkind = "hbm"', '\nkind = "hbm2"', "kind = 'hbm2' is unknown; allowed: aim, hbm"),
        ("channels_per_stack = 8", "channels_per_chip = 8", "unknown key 'channels_per_chip'"),
    ],
)  # fmt: skip
def test_bad_hbm_preset_refused(tmp_path, old, new, message):
    text = (ENERGY_DIR / "hbm-pim.toml").read_text()
    assert message in refused_edit(tmp_path, text, old, new, load_energy_config, EnergyConfigError)


def test_a_unit_change_is_converted_not_misread(tmp_path):
    """The same current in A, or per pseudo-channel, loads to the same canonical value."""
    text = (ENERGY_DIR / "hbm-pim.toml").read_text()
    path = tmp_path / "a.toml"
    path.write_text(
        text.replace('value = 55.0, unit = "mA", per = "channel"', 'value = 0.0275, unit = "A", '
                     'per = "pseudo-channel"')
    )  # fmt: skip
    assert load_energy_config(path).values["idd3n"] == pytest.approx(27.5)


@pytest.mark.parametrize(
    ("edit", "hardware", "message"),
    [
        ("stacks_per_device = 2\n", "hbm-pim", "stacks_per_device = 2 but hbm-pim has 16 groups "
         "/ 16 per stack; allowed: 1"),
        ("", "hbm-pim", None),
    ],
)  # fmt: skip
def test_stack_count_must_fit_the_device(tmp_path, edit, hardware, message):
    text = (ENERGY_DIR / "hbm-pim.toml").read_text()
    path = tmp_path / "s.toml"
    path.write_text(text.replace("[values]", edit + "[values]", 1))
    p = load_energy_config(path)
    if message is None:
        assert p.chips(load_backend(hardware)) == 1
        return
    with pytest.raises(EnergyConfigError, match=message):
        p.chips(load_backend(hardware))
    text = text.replace("channels_per_stack = 8", "channels_per_stack = 3")
    path.write_text(text)
    with pytest.raises(EnergyConfigError, match="does not divide the 16 groups"):
        load_energy_config(path).chips(load_backend("hbm-pim"))


def test_pim_gemv_energy_cli():
    out = cli_process("pim-gemv", "--dout", "64", "--din", "128", "--channels", "1", "--energy",
               "hbm-pim", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    e = json.loads(out.stdout)["energy"]
    assert e["pj"]["total"] == pytest.approx(195_530.6)
    assert e["pj"]["activation"] == pytest.approx(90_112.0)
    bad = cli_process("pim-gemv", "--dout", "64", "--din", "128", "--energy", "aim-cent")
    assert bad.returncode != 0
    assert "not of kind 'hbm'" in bad.stderr and "Traceback" not in bad.stderr


def test_channel_run_on_hbm2_uses_the_hbm_preset():
    """`pimphony run --preset librapim-hbm2 --energy hbm-pim`: the AiM channel TLM's counts x
    the per-command energies above (MAC 1,884.16, WR_INP 204.8, RD_OUT 778.24 pJ)."""
    out = cli_process("run", "--kernel", "qk", "--tokens", "256", "--dh", "128", "--preset",
               "librapim-hbm2", "--energy", "hbm-pim", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    e, c = doc["energy"], doc["counts"]
    assert e["per_command"]["stacks_per_module"] == 8
    assert e["mac"] == pytest.approx(c["MAC"] * 1884.16)
    assert e["io"] == pytest.approx(c["WR_INP"] * 204.8 + c["RD_OUT"] * 778.24)
    assert e["activation"] == pytest.approx(doc["row_switches"] * 14417.92)
