"""DCC Fig. 8 (sim/experiments/dcc_fig8): runs summed over their steps, the paper's table, the
figure's energy; the step model is tests/test_attacc_gpu.py's."""

from __future__ import annotations

import argparse

import pytest
from pimphony.compiler.llm import LayerOp
from pimphony.sim.experiments.dcc_fig8 import PAPER, _runs, fig8, over_steps
from pimphony.sim.systems.attacc_gpu import (
    FIG8_SPECS,
    Fig8Step,
    Phase,
    PimTimes,
    fc_default_draft,
    step_phases,
)
from pimphony.sim.systems.base import SystemKind
from pimphony.sim.systems.gpu import GpuSetup, run_gpu_decode
from pimphony.sim.systems.setup import DecodeError

from tests.helpers import run_cli
from tests.test_attacc_gpu import CFG, HOST, SPEC


def test_run_integrates_every_step():
    system = FIG8_SPECS[SystemKind.GPU]
    lin, lout = 100, 37
    every = over_steps(step_phases, SPEC, HOST, 2, lin, lout, system, None, points=lout)
    brute = {p: 0.0 for p in Phase}
    for ctx in range(lin + 1, lin + lout + 1):
        for p, t in step_phases(Fig8Step(SPEC, HOST, 2, ctx, system, None)).items():
            brute[p] += t
    for p in Phase:
        assert every[p] == pytest.approx(brute[p], rel=1e-12)
    # Fig. 8's Lin 2048, Lout 128 at the default 5 points: attention is linear in the context
    # but for the 16-token KV blocks (1 in 128 steps here)
    every = over_steps(step_phases, SPEC, HOST, 2, 2048, 128, system, None, points=128)
    few = over_steps(step_phases, SPEC, HOST, 2, 2048, 128, system, None)
    assert few[Phase.ATTENTION] == pytest.approx(every[Phase.ATTENTION], rel=0.005)
    assert few[Phase.FFN] == pytest.approx(every[Phase.FFN], rel=1e-12)


def test_paper_table_is_complete():
    assert len(PAPER) == 12
    for base, base_dcc, full, full_dcc in PAPER.values():
        assert 1 < base < base_dcc and full < full_dcc  # every bar beats the GPU; DCC gains


def test_bad_runs_are_refused():
    with pytest.raises(argparse.ArgumentTypeError, match="Lin:Lout"):
        _runs("128-2048")
    with pytest.raises(argparse.ArgumentTypeError, match=">= 1"):
        _runs("0:5")
    with pytest.raises(DecodeError, match="exceeds gpt3-13b-4k's context_window 4096"):
        fig8(models=("gpt3-13b-4k",), batches=(1,), runs=((4000, 200),))


# --- --energy: the generation step's energy, GPU and PIM parts (docs/dcc.md, docs/energy.md)

TINY = (("gpt3-13b-4k",), (1,), ((128, 2),))  # two steps, costed at both (points=2)


def _tiny_table(fc_default: bool = True):
    """A table holding every shape the tiny run asks DCC for (no search): attention at the
    back end's default draft, the FC GEMMs at :func:`fc_default_draft` (not the tune's
    default, so the table's draft is what is read)."""
    from pimphony.compiler.dcc.predictor import Entry, LookupTable
    from pimphony.compiler.dcc.schedule import DccKernel
    from pimphony.compiler.dcc.tune import default_draft
    from pimphony.sim.analysis.dcc_shapes import dcc_shapes
    from pimphony.sim.analysis.dcc_table import backend_record

    table = LookupTable({"backend": backend_record(CFG)})
    for k, sizes in dcc_shapes(*TINY, points=2):
        kernel = DccKernel(k)
        draft = (
            fc_default_draft(CFG, sizes)
            if kernel is DccKernel.BATCHED_GEMV and fc_default
            else default_draft(CFG, kernel, sizes)
        )
        table.entries[CFG.name, kernel, sizes] = Entry(draft, None, 1, "offline")
    return table


@pytest.fixture(scope="module")
def energy_rows():
    pim = PimTimes(CFG, table=_tiny_table(), energy="")
    return pim, fig8(*TINY, points=2, pim=pim, energy="")


def test_energy_parts_sum_to_the_total(energy_rows):
    _, rows = energy_rows
    (row,) = rows
    for s, v in row["systems"].items():
        e = v["energy"]
        gpu = sum(e["gpu_j"].values())
        pim = sum(j for ph in e["pim_j"].values() for j in ph.values())
        assert gpu == pytest.approx(e["gpu_total_j"], rel=1e-12)
        assert pim == pytest.approx(e["pim_total_j"], rel=1e-12)
        assert e["total_j"] == pytest.approx(gpu + pim, rel=1e-12)
        assert e["joules_per_token"] == pytest.approx(e["total_j"] / (1 * 2), rel=1e-12)
        assert e["total_j"] > 0
        if s == SystemKind.GPU:
            assert e["pim_j"] == {} and e["over_gpu"] == 1.0
        else:  # attention always on PIM, never on the GPU
            assert "attention" in e["pim_j"] and "attention" not in e["gpu_j"]


def test_gpu_energy_is_the_decode_gpu_model(energy_rows):
    _, rows = energy_rows
    # the two steps at contexts 129 and 130, each the decode GPU step's energy block
    want = sum(
        run_gpu_decode(GpuSetup(SPEC, HOST, 1, (ctx,), check_capacity=False)).energy[
            "joules_per_step"
        ]
        for ctx in (129, 130)
    )
    assert rows[0]["systems"][SystemKind.GPU]["energy"]["total_j"] == pytest.approx(want, rel=1e-12)


def test_pim_kernel_energy_is_its_drafts(energy_rows):
    from pimphony.compiler.dcc.cost import Placement, draft_cost
    from pimphony.compiler.dcc.schedule import DccKernel
    from pimphony.compiler.dcc.tune import default_draft
    from pimphony.sim.analysis.dcc_shapes import attention_sizes
    from pimphony.sim.systems.attacc_gpu import step_energy
    from pimphony.sim.tune_energy import PHASES, draft_energy, energy_params

    pim, _ = energy_rows
    params = energy_params(CFG, "")
    sizes = attention_sizes(SPEC, 1, 129, CFG)
    k = DccKernel.ATTN
    want = draft_energy(
        CFG, draft_cost(CFG, k, sizes, default_draft(CFG, k, sizes), placement=Placement.RESIDENT),
        params,
    )  # fmt: skip
    step = step_energy(Fig8Step(SPEC, HOST, 1, 129, FIG8_SPECS[SystemKind.ATTACC_BASE], pim))
    for p in PHASES:
        assert step[f"pim.attention.{p}"] == pytest.approx(
            SPEC.layers * getattr(want, p).total * 1e-12, rel=1e-12
        )
    # DCC's draft: the table's (FC: fc_default_draft), through tune_report's energy block
    table = _tiny_table()
    for (_, kern, s), entry in table.entries.items():
        got = pim.energy(str(kern), s, True)
        cost = draft_cost(CFG, kern, s, entry.draft, placement=Placement.RESIDENT)
        assert pim.dcc(str(kern), s) == pytest.approx(cost.total_s)
        want = draft_energy(CFG, cost, params)
        for p in PHASES:
            assert got[p] == pytest.approx(getattr(want, p).total, rel=1e-12)


def test_full_moves_ffn_energy_from_gpu_to_pim(energy_rows):
    from pimphony.sim.analysis.dcc_shapes import FC_KERNEL, fc_sizes
    from pimphony.sim.systems.energy import xpu_energy
    from pimphony.sim.systems.gpu import gpu_op_costs

    pim, rows = energy_rows
    sy = rows[0]["systems"]
    gpu, base, full = (sy[s]["energy"] for s in (SystemKind.GPU, SystemKind.ATTACC_BASE,
                                                  SystemKind.ATTACC_FULL))  # fmt: skip
    assert base["gpu_j"]["ffn"] == pytest.approx(gpu["gpu_j"]["ffn"], rel=1e-12)
    assert "ffn" not in base["pim_j"] and "ffn" in full["pim_j"]
    assert full["gpu_j"]["ffn"] < base["gpu_j"]["ffn"]
    # the GPU keeps the share of rows it runs: t / t_gpu of its FFN GEMMs' energy
    t_full, t_base = (
        sy[s]["phases"][Phase.FFN] for s in (SystemKind.ATTACC_FULL, SystemKind.ATTACC_BASE)
    )
    assert t_full < t_base
    costs = gpu_op_costs(GpuSetup(SPEC, HOST, 1, (129,), check_capacity=False))
    kept = 0.0  # FFN times and energy do not depend on the context: both steps alike
    for op in ("ffn1", "ffn2"):
        t_gpu = costs[op][0].seconds
        t_pim = pim.default(FC_KERNEL, fc_sizes(SPEC, 1)[LayerOp(op)])
        share = 1 / (1 / t_gpu + 1 / t_pim) / t_gpu
        kept += share * xpu_energy(HOST, {op: costs[op]}).total * 1e-12
    assert full["gpu_j"]["ffn"] == pytest.approx(2 * SPEC.layers * kept, rel=1e-9)
    # the other phases are untouched
    for p in ("qkv", "projection", "other"):
        assert full["gpu_j"][p] == base["gpu_j"][p]


def test_cli_energy_leaves_the_report_without_it_unchanged(capsys, tmp_path):
    import json

    path = _tiny_table().save(tmp_path / "t.json")
    base = ("dcc-fig8", "--models", "gpt3-13b-4k", "--batches", "1", "--runs", "128:2",
            "--points", "2", "--table", path, "--plot", tmp_path / "p.png", "--force")  # fmt: skip
    rc, plain, err = run_cli(capsys, *base, "--report", tmp_path / "a.json")
    assert rc == 0, err
    rc, text, err = run_cli(capsys, *base, "--report", tmp_path / "b.json", "--energy")
    assert rc == 0, err
    a = json.loads((tmp_path / "a.json").read_text())
    b = json.loads((tmp_path / "b.json").read_text())
    assert '"energy' not in json.dumps(a)  # no energy key anywhere, no option recorded
    assert b["energy"]["presets"] == {"pim": "attacc", "gpu": "a100-80gb"}
    assert b["provenance"]["energy_presets"] == {"pim": "attacc", "gpu_xpu": "a100-80gb"}
    for r in b["rows"]:
        for v in r["systems"].values():
            assert v.pop("energy")["joules_per_token"] > 0
    assert a["rows"] == b["rows"] and a["summary"] == b["summary"]
    assert "J/token" not in plain and "energy, J/token (over the GPU's; PIM attacc" in text
    assert plain.splitlines()[:4] == text.splitlines()[:4]
