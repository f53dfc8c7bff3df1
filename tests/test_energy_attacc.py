"""Energy of the AttAcc back end (``kind = "attacc"``, ``configs/energy/attacc.toml``) and of
the HBM3 preset it extends (``configs/energy/hbm-pim-hbm3.toml``): AttAcc command streams ->
the breakdown parts (``models.energy.attacc_energy``), every number by hand
(``docs/energy.md``)."""

from __future__ import annotations

import numpy as np
import pytest
from pimphony.compiler.dcc.attacc_lowering import lower_group
from pimphony.compiler.dcc.schedule import DccKernel
from pimphony.models.attacc import COMMAND_DTYPE, MacMode, Op, Scope, command, time_stream
from pimphony.models.backends import load_backend
from pimphony.models.energy import (
    ENERGY_DIR,
    ActBasis,
    AttAccActivity,
    AttAccEnergyParams,
    EnergyConfigError,
    HbmEnergyParams,
    attacc_activity,
    attacc_energy,
    load_energy,
    load_energy_config,
)

from tests.helpers import refused_edit

ATT = load_backend("attacc")
# pJ/bit of the AttAcc simulator's ENERGY_TABLE (src/config.py, FGDRAM)
CELL_ACT, CELL_COL, BANK_BG, BG_GIO, TSV, INTERPOSER, ALU = 0.11, 0.44, 1.01, 1.23, 0.5, 0.3, 0.32
HOST_PATH = BANK_BG + BG_GIO + TSV + INTERPOSER  # 3.04: column decoder -> host
BANK_SIDE = BANK_BG + BG_GIO + TSV  # 2.74: a bank <-> the buffer die
BITS, BANKS, LANES, ROW_BITS = 256, 64, 16, 8192
# standby per group: 2 pseudo-channels x VDD 1.2 V x 27.5 / 20 mA = 66 / 48 mW
P_ACT, P_PRE, F_GHZ = 66.0, 48.0, 1.3


def _params() -> AttAccEnergyParams:
    p = load_energy("attacc")
    assert isinstance(p, AttAccEnergyParams)
    return p


def _activity(stream: np.ndarray, groups: int = 1) -> AttAccActivity:
    tl = time_stream(ATT, stream)
    return attacc_activity(ATT, stream, tl.issue, tl.cycles, groups)


def test_preset_structure():
    """attacc's 16 groups of 2 pseudo-channels are one HBM3 stack of 16 channels x 2; a
    group's standby is 2 pCH x 1.2 V x (27.5, 20) mA. hbm-pim-hbm3's 32 pseudo-channel
    groups are one stack too (the HBM2 preset makes them 2 stacks)."""
    p = _params()
    assert p.chips(ATT) == 1
    assert p.group_pchs(ATT) == 2
    assert p.standby_mw(ATT) == pytest.approx((P_ACT, P_PRE))
    assert p.host_path == pytest.approx(HOST_PATH)
    assert p.values["buffer_energy"] == pytest.approx(0.0034 / 8)  # pJ/B -> pJ/bit
    h3 = load_backend("hbm-pim-hbm3")
    hbm3 = load_energy("hbm-pim-hbm3")
    assert isinstance(hbm3, HbmEnergyParams) and not isinstance(hbm3, AttAccEnergyParams)
    assert hbm3.chips(h3) == 1 and load_energy("hbm-pim").chips(h3) == 2
    assert hbm3.standby_mw(h3) == pytest.approx((33.0, 24.0))


def test_small_gemv_by_hand():
    """GEMV 64 x 128 on the default mapping (docs/dcc.md's worked example, 163 cycles):
    WRGB 8, ACTAB 1 at cycle 29, MACAB 8, MVSB 16, RDSB 16, PREA 1 at cycle 143. Precharged:
    0-29 and 143-163 = 49 cycles; active 114."""
    k = lower_group(ATT, DccKernel.GEMV, (64, 128), (16, 4))
    tl = time_stream(ATT, k.stream)
    assert tl.cycles == 163
    ops = k.stream["op"]
    assert int(tl.issue[ops == Op.ACTAB][0]) == 29 and int(tl.issue[ops == Op.PREA][0]) == 143
    a = attacc_activity(ATT, k.stream, tl.issue, tl.cycles)
    assert (a.active_cycles, a.precharged_cycles) == (114, 49)
    assert a.bank_activations == 64 and a.softmax_elements == 0
    e = attacc_energy(a, ATT, _params())
    mac = 8 * BANKS * (BITS * CELL_COL + LANES * ALU)  # 8 x 7,536.64
    io = 8 * BITS * HOST_PATH + 16 * BITS * BANK_SIDE + 16 * BITS * INTERPOSER
    activation = BANKS * ROW_BITS * CELL_ACT  # one ACTAB: 64 x 901.12
    background = (P_ACT * 114 + P_PRE * 49) / F_GHZ  # mW x cycles / GHz = pJ
    assert mac == pytest.approx(60_293.12)
    assert io == pytest.approx(6_225.92 + 11_223.04 + 1_228.8)
    assert activation == pytest.approx(57_671.68)
    assert background == pytest.approx(9_876 / 1.3)
    assert e.mac == pytest.approx(mac)
    assert e.io == pytest.approx(io)
    assert e.activation == pytest.approx(activation)
    assert e.background == pytest.approx(background)
    assert e.epu == e.xpu == e.links == 0.0
    assert e.total == sum(e.parts.values())
    assert e.total == pytest.approx(144_239.483, abs=1e-3)
    # AttAcc's own reading of the activation energy: per bit moved to or from the cells
    acc = attacc_energy(a, ATT, _params(), ActBasis.ACCESSED)
    assert acc.activation == pytest.approx(8 * BANKS * BITS * CELL_ACT) == 14_417.92
    assert acc.mac == e.mac and acc.background == e.background


def test_softmax_and_moves_by_hand():
    """A hand-written stream through the softmax unit: SFM of 40 scores costs 40 x (5 FLOPs
    x 0.16 pJ + 2 x 16 bit x 0.0034 / 8 pJ); MVSB and MVGB cross BG mux, GIO and TSV; RDSB
    the interposer; the single-bank RD and WR the cells and the whole host path."""
    rows = [
        command(Op.ACTAB, row=0),
        command(Op.MACAB, row=0, col=0, src=0, dst=0, lane=0, mode=MacMode.DOT),
        command(Op.MVSB, bank=0, src=0, dst=0, mode=Scope.GROUP),
        command(Op.SFM, bank=0, src=0, n=40),
        command(Op.MVGB, bank=0, src=0, dst=0, mode=Scope.GROUP),
        command(Op.RDSB, bank=0, src=0),
        command(Op.PREA),
        command(Op.ACT, bank=5, row=3),
        command(Op.WR, bank=5, row=3, col=1, data=0),
        command(Op.RD, bank=5, row=3, col=1),
        command(Op.PRE, bank=5),
    ]
    stream = np.array(rows, dtype=COMMAND_DTYPE)
    tl = time_stream(ATT, stream)
    a = attacc_activity(ATT, stream, tl.issue, tl.cycles)
    assert a.softmax_elements == 40 and a.bank_activations == BANKS + 1
    # precharged: before the ACTAB, PREA -> ACT, after the PRE
    i = tl.issue
    precharged = int(i[0]) + int(i[7] - i[6]) + int(tl.cycles - i[10])
    assert a.precharged_cycles == precharged
    e = attacc_energy(a, ATT, _params())
    assert e.epu == pytest.approx(40 * (5 * 0.16 + 2 * 16 * 0.0034 / 8)) == 32.544
    assert e.io == pytest.approx(BITS * (2 * BANK_SIDE + INTERPOSER + 2 * (CELL_COL + HOST_PATH)))
    assert e.mac == pytest.approx(BANKS * (BITS * CELL_COL + LANES * ALU))
    assert e.activation == pytest.approx((BANKS + 1) * ROW_BITS * CELL_ACT)
    acc = attacc_energy(a, ATT, _params(), ActBasis.ACCESSED)
    assert acc.activation == pytest.approx((BANKS + 2) * BITS * CELL_ACT)


def test_doubling_a_stream_doubles_its_dynamic_energy():
    """The GEMV stream run twice: MAC, I/O, activation and EPU exactly twice; groups scale
    everything."""
    k = lower_group(ATT, DccKernel.GEMV, (64, 128), (16, 4))
    p = _params()
    one = attacc_energy(_activity(k.stream), ATT, p)
    two = attacc_energy(_activity(np.concatenate([k.stream, k.stream])), ATT, p)
    for part in ("mac", "io", "activation", "epu"):
        assert getattr(two, part) == pytest.approx(2 * getattr(one, part), rel=1e-12)
    three = attacc_energy(_activity(k.stream, groups=3), ATT, p)
    assert three.total == pytest.approx(3 * one.total, rel=1e-12)


def test_idle_background_is_power_times_cycles():
    """A stream that opens no row (one GEMV-buffer write) is precharged throughout:
    background = 48 mW x cycles / 1.3 GHz; its I/O is one column over the host path."""
    stream = np.array([command(Op.WRGB, bank=0, dst=0, data=0, mode=Scope.BANK)], COMMAND_DTYPE)
    a = _activity(stream)
    assert a.active_cycles == 0 and a.precharged_cycles == a.cycles > 0
    e = attacc_energy(a, ATT, _params())
    assert e.background == pytest.approx(P_PRE * a.cycles / F_GHZ, rel=1e-12)
    assert e.io == pytest.approx(BITS * HOST_PATH)
    assert e.total == sum(e.parts.values())


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('unit = "pJ/B", per = "byte"', 'unit = "pJ/B", per = "bit"',
         "buffer_energy.per = 'bit' contradicts unit 'pJ/B' (per byte)"),
        ('unit = "FLOP", per = "element"', 'unit = "pJ", per = "element"',
         "softmax_flops.unit = 'pJ': not a unit of flops per element; allowed: FLOP"),
        ('unit = "pJ/FLOP", per = "FLOP"', 'unit = "pJ/FLOP", per = "MAC"',
         "epu_energy.per = 'MAC': epu_energy cannot be per that; allowed: FLOP"),
    ],
)  # fmt: skip
def test_bad_attacc_preset_refused(tmp_path, old, new, message):
    text = (ENERGY_DIR / "attacc.toml").read_text()
    assert message in refused_edit(tmp_path, text, old, new, load_energy_config, EnergyConfigError)


def test_stack_count_is_checked_against_the_back_end(tmp_path):
    """A stated stack count that the device does not have is refused with the allowed one;
    so is a stack size that does not divide the device's channels."""
    text = (ENERGY_DIR / "attacc.toml").read_text()
    path = tmp_path / "s.toml"
    path.write_text(text.replace("[values]", "stacks_per_device = 2\n[values]", 1))
    with pytest.raises(EnergyConfigError, match="has 16 groups / 16 per stack; allowed: 1"):
        load_energy_config(path).chips(ATT)
    path.write_text(text.replace("[values]", "channels_per_stack = 12\n[values]", 1))
    with pytest.raises(EnergyConfigError, match="does not divide the 16 groups"):
        load_energy_config(path).chips(ATT)


def test_simulator_formula_by_hand():
    """The AttAcc simulator's own energy of the 64 x 128 GEMV's commands (WRGB 8, MVSB 16,
    MACAB 8; 8,192 useful MACs): bytes x its 'io' values, 8 x 32 B x 64 banks x (0.11 +
    0.44) x 8 pJ/B of cells, 8,192 x 0.32 -- against our dynamic energy under its own
    activation reading, which charges the same cells and MACs but I/O per bit (x 8) and the
    RDSBs that carry the results out."""
    from pimphony.sim.experiments.attacc_energy import simulator_formula

    k = lower_group(ATT, DccKernel.GEMV, (64, 128), (16, 4))
    a = _activity(k.stream)
    io = 32 * 8 * INTERPOSER + 32 * (8 + 16) * (TSV + BG_GIO + BANK_BG)
    cells = 8 * 32 * 64 * (CELL_ACT + CELL_COL) * 8
    assert simulator_formula(dict(a.counts), _params(), 64 * 128) == pytest.approx(
        io + cells + 8192 * ALU
    )
    ours = attacc_energy(a, ATT, _params(), ActBasis.ACCESSED)
    assert ours.mac + ours.activation == pytest.approx(cells + 8192 * ALU)
    assert ours.io == pytest.approx(8 * io + 16 * BITS * INTERPOSER)


def test_attacc_energy_command(tmp_path):
    """`pimphony attacc-energy`: docs/dcc.md's cycles, parts summing to each total, the
    scale-1 point of the standby sweep equal to the preset's total, background rising with
    the currents and nothing else moving."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-m", "pimphony.sim.cli", "attacc-energy", "--json"], capture_output=True,
        text=True, cwd=tmp_path, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = {r["kernel"]: r for r in json.loads(out.stdout)["rows"]}
    assert rows["ATTN 1 x 4096 x 128"]["cycles"] == 8866
    assert rows["GEMV 1024 x 4096"]["cycles"] == 33841
    for r in rows.values():
        pj = r["row"]["pj"]
        assert pj["total"] == pytest.approx(
            sum(v for k, v in pj.items() if k not in ("unit", "total")), rel=1e-12
        )
        s = r["idd_scale"]
        assert s["1.0"]["total"] == pytest.approx(pj["total"], rel=1e-12)
        low, high = s["0.25"], s["4.0"]
        assert low["background_share"] < high["background_share"]
        dynamic = pj["total"] - pj["background"]
        assert high["total"] - dynamic == pytest.approx(4 * pj["background"], rel=1e-9)
    assert rows["ATTN 1 x 4096 x 128"]["row"]["pj"]["epu"] == pytest.approx(
        4096 * (5 * 0.16 + 2 * 16 * 0.0034 / 8)
    )


def test_hbm3_preset_idle_and_stack_count(tmp_path):
    """hbm-pim-hbm3 on its back end: two idle pseudo-channels for 1,000 cycles cost 2 x 24 mW
    x 1,000 / 1.3 GHz; a stated stack count other than 1 is refused."""
    from pimphony.models.energy import HbmPimActivity, hbm_pim_energy

    h3, p = load_backend("hbm-pim-hbm3"), load_energy("hbm-pim-hbm3")
    zero = dict.fromkeys(("trigger", "register", "host", "broadcast"), 0)
    e = hbm_pim_energy(HbmPimActivity(2, 0, zero, 0, 0, 1000), h3, p)
    assert e.total == e.background == pytest.approx(2 * 24.0 * 1000 / 1.3, rel=1e-12)
    path = tmp_path / "s.toml"
    text = (ENERGY_DIR / "hbm-pim-hbm3.toml").read_text()
    path.write_text(text.replace("[values]", "stacks_per_device = 2\n[values]", 1))
    with pytest.raises(EnergyConfigError, match="has 32 groups / 32 per stack; allowed: 1"):
        load_energy_config(path).chips(h3)


def test_split_attention_draft_energy_counts_the_combine():
    """ATTN with tokens over 2 groups: the energy runs the partial program (its statistics
    RDSB included, as the cost does) and the host's energy includes the combine (the same
    xPU cost ``draft_cost`` charges), on top of the DRAM bytes moved (none here)."""
    from pimphony.compiler.dcc.cost import draft_cost, share_program
    from pimphony.compiler.dcc.schedule import Index, Part
    from pimphony.models.xpu import attention_combine_cost
    from pimphony.sim.systems.energy import xpu_energy
    from pimphony.sim.tune_energy import draft_energy, energy_params

    d = (Part(1, 1, "K0", 1, Index("h")), Part(2, 8, "K1", 256, Index("t")),
         Part(1, 1, "K2", 16, Index("d")))  # fmt: skip
    c = draft_cost(ATT, DccKernel.ATTN, (1, 256, 16), d)
    prog = share_program(ATT, DccKernel.ATTN, c.share)
    assert prog.counts["RDSB"] == 2 and prog.cycles == c.cycles
    e = draft_energy(ATT, c, energy_params(ATT, None))
    host = ATT.host()
    want = xpu_energy(host, {"combine": (attention_combine_cost(host, 1, 2, 16), 1)})
    assert want is not None and want.total > 0
    assert e.host.total == pytest.approx(want.total)
