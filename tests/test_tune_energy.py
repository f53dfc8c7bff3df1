"""``pimphony tune --energy`` (``sim/tune_energy.py``): a draft's energy by phase (compute,
rearrangement, host, idle standby), every number of two small GEMVs by hand
(``docs/energy.md``)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from pimphony.compiler.dcc.cost import draft_cost
from pimphony.compiler.dcc.schedule import DccKernel
from pimphony.compiler.dcc.tune import default_draft
from pimphony.compiler.rearrange import access_stream
from pimphony.models.backends import load_backend
from pimphony.models.energy import EnergyConfigError
from pimphony.models.hbm_pim import Op, time_stream
from pimphony.models.xpu import VectorOp, vector_cost
from pimphony.sim.tune_energy import PHASES, draft_energy, energy_params

from tests.helpers import cli_process

GEMV = DccKernel.GEMV
# A100 [energy] (configs/xpu/a100-80gb.toml): pJ per FLOP, per DRAM byte
A100_FLOP, A100_BYTE = 1.282, 31.2


def _sum_exact(e) -> None:
    """The parts sum to the total exactly, and the JSON's phases cover :data:`PHASES` and sum
    to its total."""
    assert e.total.total == sum(e.total.parts.values())
    d = e.to_dict()
    assert set(d["phases_pj"]) == set(PHASES)
    assert d["pj"]["total"] == pytest.approx(sum(d["phases_pj"].values()), rel=1e-12)


def test_attacc_default_gemv_by_hand():
    """GEMV 64 x 128 on attacc's default mapping is one group's 163-cycle stream
    (tests/test_energy_attacc.py: 144,239.48 pJ); W is resident and x rides in the stream's
    WRGBs, the results leave by RDSB: no rearrangement, no host work. The other 79 groups of
    the 5 devices stand by precharged for the 163 cycles: 79 x 163 x 48 mW / 1.3 GHz."""
    cfg = load_backend("attacc")
    c = draft_cost(cfg, GEMV, (64, 128), default_draft(cfg, GEMV, (64, 128)))
    assert (c.cycles, c.share.groups, c.bytes_in, c.bytes_out, c.host_s) == (163, 1, 0, 0, 0.0)
    e = draft_energy(cfg, c, energy_params(cfg, None))
    assert e.compute.total == pytest.approx(144_239.483, abs=1e-3)
    assert e.rearrange.total == e.host.total == 0.0 and e.host_known
    assert cfg.groups == 80
    assert e.idle.background == pytest.approx(79 * 163 * 48.0 / 1.3, rel=1e-12)
    assert e.idle.total == e.idle.background
    _sum_exact(e)


def test_hbm_pim_gemv_by_hand():
    """GEMV 64 x 128 on one hbm-pim pseudo-channel, 8 units x 8 outputs (PIM-SHERPA
    Algorithm 1, the stream of `pim-gemv --channels 1`): compute 195,530.6 pJ
    (tests/test_energy_hbm_pim.py). The 64 outputs come back as 16-lane partial sums: 64
    single-bank RDs of 256 bit over the whole path (0.44 + 3.04 pJ/bit) from 8 banks' rows (8
    ACTs x 901.12 pJ), the host writes those 2,048 B to its memory and adds 64 x 15 lanes
    (the cost model's residual add: 960 FLOPs, 5,760 B)."""
    cfg = load_backend("hbm-pim")
    dd = default_draft(cfg, GEMV, (64, 128))
    draft = (dataclasses.replace(dd[0], cores=8), dataclasses.replace(dd[1], cores=1))
    c = draft_cost(cfg, GEMV, (64, 128), draft)
    assert (c.cycles, c.share.groups, c.bytes_in, c.bytes_out) == (733, 1, 0, 2048)
    params = energy_params(cfg, None)
    e = draft_energy(cfg, c, params)
    assert e.compute.total == pytest.approx(195_530.6)
    assert e.rearrange.io == pytest.approx(64 * 256 * (0.44 + 3.04))
    assert e.rearrange.activation == pytest.approx(8 * 8192 * 0.11)
    # the read-back stream: its banks open from its first command to its last PRE
    from pimphony.compiler.dcc.cost import lowerings

    prog = lowerings(cfg.kind)[GEMV](cfg, (64, 128), (8, 1))
    (outs,) = prog.outputs.values()
    stream = access_stream(cfg, outs, Op.RD)
    tl = time_stream(cfg, stream)
    last_pre = int(tl.issue[stream["op"] == Op.PRE].max())
    first_act = int(tl.issue[0])
    pre = first_act + tl.cycles - last_pre
    assert e.rearrange.background == pytest.approx(
        (33.0 * (tl.cycles - pre) + 24.0 * pre) / 1.2, rel=1e-12
    )
    add = vector_cost(cfg.host(), VectorOp.RESIDUAL, 64 * 15)
    assert (add.issued_flops, add.bytes) == (960, 5760)
    assert e.host.xpu == pytest.approx((2048 + 5760) * A100_BYTE + 960 * A100_FLOP)
    idle = cfg.groups * c.total_s * 1.2e9 - (733 + tl.cycles)
    assert e.idle.background == pytest.approx(24.0 * idle / 1.2, rel=1e-9)
    _sum_exact(e)


# aim-cent (configs/energy/aim-cent.toml, CENT's calculator): powers per chip of 2 channels,
# windows in ns; mW x ns = pJ. aim-16ch: 16 banks, 256-bit columns, 1 GHz (tCK = 1 ns).
CH_PER_CHIP = 2
ACT_MW, RD_MW, WR_MW = 132.6 / CH_PER_CHIP, 876.3 / CH_PER_CHIP, 1106.3 / CH_PER_CHIP
T_RC_NS, T_BL_NS, T_CCD_L_NS, MAC_RD_FACTOR = 44.5, 1.25, 1.0, 3
ACT_STBY_MW, PRE_STBY_MW = 527.5 / CH_PER_CHIP, 366.3 / CH_PER_CHIP
DQ_PJ = 5.5 * 256  # pJ/bit x bits of one column
AIM_TCK_NS = 1.0


def _aim_draft(kernel, shape):
    cfg = load_backend("aim")
    c = draft_cost(cfg, kernel, shape, default_draft(cfg, kernel, shape))
    return cfg, c, draft_energy(cfg, c, energy_params(cfg, None))


def test_aim_default_gemv_by_hand():
    """GEMV 64 x 128 on the aim back end's default mapping (one aim-16ch module, 16 channels):
    outputs over 4 channels in bank groups of 16, each channel 16 outputs x 128 inputs. The
    channel TLM (DCS) runs 8 WR_INP, 8 MAC, 1 RD_OUT and one all-bank row switch in 116
    cycles; one switch precharges nothing, so the channel is active all 116. W is resident
    and x rides in the WR_INPs: no rearrangement, no host work. The other 12 channels stand by
    precharged for the 116 cycles."""
    cfg, c, e = _aim_draft(GEMV, (64, 128))
    assert energy_params(cfg, None).name == "aim-cent"
    assert (c.cycles, c.share.groups, c.bytes_in, c.bytes_out, c.host_s) == (116, 4, 0, 0, 0.0)
    assert c.counts == {"WR_INP": 8, "MAC": 8, "RD_OUT": 1}
    assert cfg.groups == 16
    mac = MAC_RD_FACTOR * RD_MW * T_CCD_L_NS  # 1,314.45 pJ per all-bank MAC
    rd_out = RD_MW * T_BL_NS + DQ_PJ  # 1,955.6875 pJ
    row_switch = 16 * ACT_MW * T_RC_NS  # 47,205.6 pJ: 16 banks x ACT+PRE
    bg = ACT_STBY_MW * 116 * AIM_TCK_NS  # 30,595 pJ
    assert e.compute.mac == pytest.approx(4 * 8 * mac, rel=1e-12)
    assert e.compute.io == pytest.approx(4 * (8 * DQ_PJ + rd_out), rel=1e-12)
    assert e.compute.activation == pytest.approx(4 * row_switch, rel=1e-12)
    assert e.compute.background == pytest.approx(4 * bg, rel=1e-12)
    assert e.compute.total == pytest.approx(406_143.55, rel=1e-12)
    assert e.rearrange.total == e.host.total == 0.0 and e.host_known
    assert e.idle.background == pytest.approx(12 * 116 * PRE_STBY_MW * AIM_TCK_NS, rel=1e-12)
    assert e.idle.total == e.idle.background
    _sum_exact(e)


def test_aim_doubling_the_work_doubles_compute_dynamic_energy():
    """GEMV 128 x 128 spreads the same 16-output share over 8 channels instead of 4: exactly
    twice the MAC, I/O and ACT/PRE energy of 64 x 128 (and twice the busy background)."""
    _, c1, e1 = _aim_draft(GEMV, (64, 128))
    _, c2, e2 = _aim_draft(GEMV, (128, 128))
    assert (c1.share.sizes, c1.share.groups, c2.share.groups) == (c2.share.sizes, 4, 8)
    for part in ("mac", "io", "activation", "background"):
        assert getattr(e2.compute, part) == 2 * getattr(e1.compute, part)


def test_aim_rearrangement_by_hand():
    """RED 64 x 128: A is not resident, so each of the 4 channels is written its 16 x 128
    FP16 share first: 128 single-bank column writes and 16 single-bank ACTs (the counts of the
    access the timing times), each write a WR burst + the pins, each ACT one bank's ACT+PRE,
    the channel active for the access run's cycles. The host reads those 16,384 B from its
    memory (A100: 31.2 pJ/B); the other channels and the gaps stand by precharged."""
    from pimphony.compiler.dcc.cost import lowerings
    from pimphony.compiler.rearrange import group_access_cycles

    cfg, c, e = _aim_draft(DccKernel.RED, (64, 128))
    prog = lowerings(cfg.kind)[DccKernel.RED](cfg, c.share.sizes, c.share.cores)
    access, counts = group_access_cycles(cfg, prog.inputs["A"], Op.WR)
    assert counts == {"ACT": 16, "WR": 128} and c.bytes_in == 4 * 128 * 32
    wr = WR_MW * T_BL_NS + DQ_PJ  # 2,099.4375 pJ
    assert e.rearrange_in.io == pytest.approx(4 * 128 * wr, rel=1e-12)
    assert e.rearrange_in.activation == pytest.approx(4 * 16 * ACT_MW * T_RC_NS, rel=1e-12)
    assert e.rearrange_in.background == pytest.approx(
        4 * ACT_STBY_MW * access * AIM_TCK_NS, rel=1e-12
    )
    assert e.rearrange_out.total == 0.0
    assert e.host.xpu == pytest.approx(16_384 * A100_BYTE, rel=1e-12)
    idle = 16 * c.total_s * 1e9 / AIM_TCK_NS - 4 * (c.cycles + access)
    assert e.idle.background == pytest.approx(PRE_STBY_MW * idle * AIM_TCK_NS, rel=1e-9)
    _sum_exact(e)


def test_presets_are_checked_against_the_back_end(tmp_path):
    """A preset of another kind, or whose chip count does not fit the back end's hardware, is
    refused with what is allowed."""
    from pimphony.models.energy import ENERGY_DIR

    chips = tmp_path / "chips.toml"
    text = (ENERGY_DIR / "aim-cent.toml").read_text()
    chips.write_text(text.replace("[values]", "chips_per_module = 16\n[values]", 1))
    with pytest.raises(EnergyConfigError, match="chips_per_module = 16 .* allowed: 8"):
        energy_params(load_backend("aim"), str(chips))
    with pytest.raises(EnergyConfigError, match="needs kind 'attacc'"):
        energy_params(load_backend("attacc"), "hbm-pim")
    with pytest.raises(EnergyConfigError, match="is of kind 'aim'; back end hbm-pim"):
        energy_params(load_backend("hbm-pim"), "aim-cent")
    aim = load_backend("aim")
    with pytest.raises(
        EnergyConfigError, match="is of kind 'hbm'; back end aim .* needs kind 'aim'"
    ):
        energy_params(aim, "hbm-pim")
    hbm3 = load_backend("hbm-pim-hbm3")
    assert energy_params(hbm3, None).name == "hbm-pim-hbm3"
    assert energy_params(hbm3, "hbm-pim").chips(hbm3) == 2  # HBM2's stacks: allowed, odd


def test_cli_energy_column_leaves_the_times_alone():
    base = ["tune", "--kernel", "gemv", "--shape", "64,128", "--backend", "attacc", "--json"]
    runs = [cli_process(*base), cli_process(*base, "--energy")]
    for r in runs:
        assert r.returncode == 0, r.stderr
    plain, with_e = (json.loads(r.stdout) for r in runs)
    assert "energy" not in plain
    for key in ("top", "chosen", "default", "compute_centric", "speedup", "gpu_us"):
        assert with_e[key] == plain[key]
    e = with_e["energy"]
    assert e["preset"] == "attacc" and e["act_basis"] == "row"
    for name in ("chosen", "default"):
        pj = e[name]["pj"]
        assert pj["total"] == pytest.approx(sum(e[name]["phases_pj"].values()), rel=1e-12)
    assert e["default_over_chosen"] == pytest.approx(
        e["default"]["pj"]["total"] / e["chosen"]["pj"]["total"]
    )
    text = cli_process(*base[:-1], "--energy", "attacc")
    assert text.returncode == 0 and "default / chosen energy:" in text.stdout
    bad = cli_process(*base[:-1], "--energy", "hbm-pim")
    assert bad.returncode != 0 and "needs kind 'attacc'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_cli_aim_energy():
    """``tune --backend aim --energy`` runs (aim-cent by default) and prints the phases."""
    r = cli_process("tune", "--kernel", "gemv", "--shape", "64,128", "--backend", "aim", "--energy")
    assert r.returncode == 0, r.stderr
    assert "energy (aim-cent" in r.stdout and "default / chosen energy:" in r.stdout
    assert "+ in " in r.stdout and "+ out " in r.stdout and "+ idle " in r.stdout
