"""``pimphony tune --energy`` (``sim/tune_energy.py``): a draft's energy by phase (compute,
rearrangement, host, idle standby), every number of two small GEMVs by hand
(``docs/energy.md``)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.dcc_cost import draft_cost
from compiler.dcc_schedule import DccKernel
from compiler.dcc_tune import default_draft
from compiler.rearrange import access_stream
from models.backends import load_backend
from models.energy import EnergyConfigError
from models.hbm_pim import Op, time_stream
from models.xpu import VectorOp, vector_cost
from sim.tune_energy import PHASES, draft_energy, energy_params

ROOT = Path(__file__).resolve().parents[1]
GEMV = DccKernel.GEMV
# A100 [energy] (configs/xpu/a100-80gb.toml): pJ per FLOP, per DRAM byte
A100_FLOP, A100_BYTE = 1.282, 31.2


def _sum_exact(e) -> None:
    assert e.total.total == sum(e.total.parts.values())


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
    d = e.to_dict()
    assert set(d["phases_pj"]) == set(PHASES)
    assert d["pj"]["total"] == pytest.approx(sum(d["phases_pj"].values()), rel=1e-12)


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
    from compiler.dcc_cost import lowerings

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


def test_presets_are_checked_against_the_back_end():
    """A preset of another kind, or a back end without a stream energy model, is refused
    with what is allowed."""
    with pytest.raises(EnergyConfigError, match="needs kind 'attacc'"):
        energy_params(load_backend("attacc"), "hbm-pim")
    with pytest.raises(EnergyConfigError, match="is of kind 'aim'; back end hbm-pim"):
        energy_params(load_backend("hbm-pim"), "aim-cent")
    with pytest.raises(EnergyConfigError, match="no stream energy model; allowed kinds"):
        energy_params(load_backend("aim"), None)
    hbm3 = load_backend("hbm-pim-hbm3")
    assert energy_params(hbm3, None).name == "hbm-pim-hbm3"
    assert energy_params(hbm3, "hbm-pim").chips(hbm3) == 2  # HBM2's stacks: allowed, odd


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sim.cli", *args], capture_output=True, text=True, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_cli_energy_column_leaves_the_times_alone():
    base = ["tune", "--kernel", "gemv", "--shape", "64,128", "--backend", "attacc", "--json"]
    runs = [_cli(*base), _cli(*base, "--energy")]
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
    text = _cli(*base[:-1], "--energy", "attacc")
    assert text.returncode == 0 and "default / chosen energy:" in text.stdout
    bad = _cli(*base[:-1], "--energy", "hbm-pim")
    assert bad.returncode != 0 and "needs kind 'attacc'" in bad.stderr
    assert "Traceback" not in bad.stderr
