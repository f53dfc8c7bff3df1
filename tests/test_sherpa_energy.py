"""PIM-SHERPA energy (``sim/sherpa_energy.py``) and the LPDDR5X-PIM preset (``kind = "lpddr"``,
``configs/energy/lpddr5x-pim.toml``): a GEMV on LPDDR5X-PIM and a host phase by hand, the
acceptance checks of a preset, the report and the sensitivity sweep (``docs/energy.md``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pimphony.compiler.llm import load_model
from pimphony.compiler.pim_gemv import lower_gemv
from pimphony.models.backends import load_backend
from pimphony.models.energy import (
    ENERGY_DIR,
    EnergyConfigError,
    HbmPimActivity,
    LpddrEnergyParams,
    hbm_pim_activity,
    hbm_pim_energy,
    load_energy,
    load_energy_config,
)
from pimphony.models.hbm_pim import Op, time_stream
from pimphony.models.xpu import gemv_cost
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.sherpa_energy import SWEPT, host_phase_energy, pim_gemv_energy, sensitivity

from tests.helpers import cli_process

LP = load_backend("lpddr5x-pim")
CPU = load_xpu("pimsherpa-cpu")
# the preset, pJ/bit and mW per channel
CELL_ACT, CELL_COL, ON_DIE, DQ, ALU = 0.11, 0.44, 1.01 + 1.23, 0.66, 0.32
HOST_PATH = ON_DIE + DQ  # 2.90: column decoder -> SoC
P_ACT, P_PRE, F_GHZ = 37.875, 34.125, 1.066625


def _params() -> LpddrEnergyParams:
    p = load_energy("lpddr5x-pim")
    assert isinstance(p, LpddrEnergyParams)
    return p


def test_preset_structure():
    """Standby summed over LPDDR4's three rails (DRAMPower's Micron memspec): 1.8 x 2.25 + 1.1
    x 30 + 1.1 x 0.75 and 1.8 x 2.0 + 1.1 x 27 + 1.1 x 0.75 mW; the pins in place of TSV and
    interposer: 3.21 pJ/bit at VDDQ 1.1 V x (0.5 / 1.1)^2; 4 channels = 1 package."""
    p = _params()
    assert p.standby_mw(LP) == pytest.approx((P_ACT, P_PRE))
    rails = (1.8 * 2.25 + 1.1 * 30 + 1.1 * 0.75, 1.8 * 2.0 + 1.1 * 27 + 1.1 * 0.75)
    assert rails == pytest.approx((P_ACT, P_PRE))
    assert round(1.1 * (150 - 0.75) * 5 / 256 * (0.5 / 1.1) ** 2, 2) == DQ
    assert p.device_io == DQ and p.host_path == pytest.approx(HOST_PATH)
    assert p.chips(LP) == 1 and p.group_pchs(LP) == 1


def _gemv(dout: int, channels: int | None):
    k = lower_gemv(LP, dout, 128, channels=channels)
    tl = time_stream(LP, k.stream)
    return k, tl


def test_small_gemv_by_hand():
    """GEMV 16 x 128 on one channel (16 units of one bank, 8 outputs each, one input tile):
    64 MAC triggers; 77 triggers (64 MACs, 5 dummy RDs, 8 MOV WRs); 11 register and 6
    mode-change WRs; 84 bank activations (4 single-bank entry ACTs + 5 all-bank x 16 banks of
    2 KiB rows); precharged three 1-cycle gaps between the entry visits and five tRP = 20
    gaps: 103 of 1,031 cycles."""
    k, tl = _gemv(16, 1)
    assert (tl.cycles, k.layout.mac_triggers) == (1031, 64)
    a = hbm_pim_activity(LP, k.stream, k.payload, tl.issue, tl.cycles, 64, 1)
    assert dict(a.accesses) == {"trigger": 77, "register": 11, "host": 6, "broadcast": 0}
    acts = k.stream["op"] == Op.ACT
    assert int(acts.sum()) == 9 and a.bank_activations == 4 + 5 * 16
    assert (a.active_cycles, a.precharged_cycles) == (928, 3 + 5 * 20)
    e = hbm_pim_energy(a, LP, _params())
    assert e.mac == pytest.approx(64 * 16 * 16 * ALU + 77 * 16 * 256 * CELL_COL)
    assert e.io == pytest.approx(11 * 256 * HOST_PATH + 6 * 256 * (CELL_COL + HOST_PATH))
    assert e.activation == pytest.approx(84 * 16384 * CELL_ACT)
    assert e.background == pytest.approx((P_ACT * 928 + P_PRE * 103) / F_GHZ)
    assert e.total == sum(e.parts.values())
    assert e.total == pytest.approx(344_948.02, abs=0.01)
    # 64 x 128 over the 4 channels runs the same stream on each: 4 x the above
    k4, _ = _gemv(64, None)
    assert np.array_equal(k4.stream, k.stream) and k4.layout.channels == 4
    e4, secs = pim_gemv_energy(LP, 64, 128, _params())
    assert e4.total == pytest.approx(4 * e.total, rel=1e-12)
    assert secs == pytest.approx(1031 / (F_GHZ * 1e9))


def test_doubling_and_idle():
    """The GEMV stream run twice (128 MAC triggers): MAC, I/O, activation exactly twice; an
    idle channel for
    1,000 cycles: 34.125 mW x 1,000 / 1.066625 GHz."""
    k, _ = _gemv(16, 1)
    p = _params()

    def energy(stream, macs):
        tl = time_stream(LP, stream)
        return hbm_pim_energy(
            hbm_pim_activity(LP, stream, k.payload, tl.issue, tl.cycles, macs, 1), LP, p
        )

    one, two = energy(k.stream, 64), energy(np.concatenate([k.stream, k.stream]), 128)
    for part in ("mac", "io", "activation"):
        assert getattr(two, part) == pytest.approx(2 * getattr(one, part), rel=1e-12)
    idle = HbmPimActivity(1, 0, dict.fromkeys(("trigger", "register", "host", "broadcast"), 0),
                          0, 0, 1000)  # fmt: skip
    assert hbm_pim_energy(idle, LP, p).background == pytest.approx(P_PRE * 1000 / F_GHZ)


def test_host_phase_by_hand():
    """The host reading a 2048 x 2048 BF16 matrix for a GEMV: its DRAM bytes x 8 x (0.11 +
    0.44 + 2.90) pJ, and 4 channels active for bytes / 68.264 GB/s, precharged the rest of
    the op's time; the CPU has no [energy] (0)."""
    cost = gemv_cost(CPU, 1, 2048, 2048)
    e = host_phase_energy(LP, _params(), CPU, {"w": (cost, 1)})
    assert e.io == pytest.approx(8 * cost.bytes * (CELL_COL + HOST_PATH))
    assert e.activation == pytest.approx(8 * cost.bytes * CELL_ACT)
    busy = cost.bytes / 68.264e9
    assert busy < cost.seconds
    assert e.background == pytest.approx(
        4e9 * (P_ACT * busy + P_PRE * (cost.seconds - busy)), rel=1e-12
    )
    assert e.xpu == e.mac == 0.0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('value = 0.66, unit = "pJ/bit"', 'value = 0.66, unit = "mW"'),
         "dq_energy.unit = 'mW': not a unit of energy per bit"),
        (('value = 37.875, unit = "mW", per = "channel"',
          'value = 37.875, unit = "mW", per = "chip"'),
         "act_standby_power.per = 'chip': act_standby_power cannot be per that; allowed: "
         "channel"),
        (("packages_per_device = 1", "packages_per_device = 2"), None),
        (("channels_per_package = 4", "channels_per_stack = 4"),
         "unknown key 'channels_per_stack'"),
    ],
)  # fmt: skip
def test_bad_lpddr_preset_refused(tmp_path, edit, message):
    text = (ENERGY_DIR / "lpddr5x-pim.toml").read_text()
    assert edit[0] in text
    path = tmp_path / "bad.toml"
    path.write_text(text.replace(*edit, 1))
    if message is None:  # loads, but does not fit the device
        with pytest.raises(EnergyConfigError, match="packages_per_device = 2 .* allowed: 1"):
            load_energy_config(path).chips(LP)
        path.write_text(text.replace("channels_per_package = 4", "channels_per_package = 3"))
        with pytest.raises(EnergyConfigError, match="a package holds 3 groups"):
            load_energy_config(path).chips(LP)
        return
    with pytest.raises(EnergyConfigError) as exc:
        load_energy_config(path)
    assert message in str(exc.value)


def test_sensitivity_moves_only_what_each_choice_touches():
    """At scale 1 every curve is the preset's decode energy; the PIM MAC value leaves the
    host-only system unchanged; the package I/O and standby raise both."""
    spec = load_model("llama-3.2-1b")
    s = sensitivity(spec, "galaxy-s24plus", 64, _params(), (0.5, 1.0, 2.0))
    assert set(s["curves"]) == set(SWEPT)
    at_one = {(c["pim_j"][1], c["host_j"][1]) for c in s["curves"].values()}
    assert len(at_one) == 1
    alu = s["curves"]["PIM MAC (alu_energy)"]
    assert alu["host_j"][0] == alu["host_j"][2] and alu["pim_j"][0] < alu["pim_j"][2]
    for label in ("package I/O (dq_energy)", "standby powers"):
        c = s["curves"][label]
        assert c["pim_j"][0] < c["pim_j"][2] and c["host_j"][0] < c["host_j"][2]


def test_cli_energy_report(tmp_path):
    base = ["sherpa", "--model", "llama-3.2-1b", "--sl", "64"]
    out = cli_process(*base, "--energy", "--json", "--energy-plot", "s.png", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    t = json.loads(out.stdout)["timing"]
    e = t["energy"]
    assert e["preset"] == "lpddr5x-pim" and "pimsherpa-cpu" in e["xpu_unavailable"]
    row = e["rows"][0]
    pim, host = row["decode"]["pim"], row["decode"]["host"]
    for block in (pim, host, *row["prefill"].values(), row["host_only_prefill"]):
        parts = block["parts_j"]
        assert parts["total"] == pytest.approx(
            sum(v for k, v in parts.items() if k not in ("unit", "total")), rel=1e-12
        )
        assert parts["total"] == pytest.approx(sum(block["phases_j"].values()), rel=1e-12)
    assert pim["parts_j"]["total"] < host["parts_j"]["total"]
    assert host["parts_j"]["mac"] == 0.0 < pim["parts_j"]["mac"]
    # WD and FACIL-O prefill identically; the copying strategies cost more
    p = row["prefill"]
    assert p["wd"]["parts_j"]["total"] == p["facil"]["parts_j"]["total"]
    assert p["ddb"]["parts_j"]["total"] > p["wd"]["parts_j"]["total"]
    assert (tmp_path / "s.png").stat().st_size > 0
    text = cli_process(*base, "--energy", "lpddr5x-pim", cwd=tmp_path)
    assert text.returncode == 0 and "decode mJ per token" in text.stdout
    for bad_args, why in (
        (["sherpa", "--energy"], "need --sl"),
        ([*base, "--energy", "aim-cent"], "needs a per-bit kind"),
    ):
        bad = cli_process(*bad_args, cwd=tmp_path)
        assert bad.returncode != 0 and why in bad.stderr and "Traceback" not in bad.stderr
