"""PIMphony Fig. 20 (sim/experiments/gpu_fig20.py): PIMphony vs memory-matched A100s."""

from __future__ import annotations

import json

import pytest
from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.experiments.gpu_fig20 import (
    FIG20_CASES,
    GPU,
    GPU_MATCHED_GB,
    MODULE_GB,
    PIM_PRESET,
    fig20,
    format_fig20,
    plot_fig20,
)

from tests.helpers import figure_labels, run_cli


def test_systems_are_memory_matched():
    """C / 16 CENT modules and C / 64 A100s using 64 of their 80 GB hold the same C GB."""
    module_gib = load_preset(PIM_PRESET).module_bytes / 2**30
    assert module_gib == MODULE_GB == 16
    assert GPU_MATCHED_GB / load_xpu(GPU).memory.capacity_gib == 0.8
    for model, _, gb in FIG20_CASES:
        assert (gb // MODULE_GB) * MODULE_GB == (gb // GPU_MATCHED_GB) * GPU_MATCHED_GB == gb
        # the GPU count splits the model's heads (tensor parallel)
        assert load_model(model).heads % (gb // GPU_MATCHED_GB) == 0
    assert {gb for _, _, gb in FIG20_CASES} == {128, 512}


@pytest.fixture(scope="module")
def rows():
    return fig20(cases=(("llm-7b", "qmsum", 128),))


def test_one_case(rows):
    (r,) = rows
    p, g, f = r["pimphony"], r["a100"], r["a100_full"]
    assert (p["devices"], g["devices"]) == (8, 2)
    assert r["speedup"] == pytest.approx(p["tokens_per_s"] / g["tokens_per_s"])
    assert g["memory_fraction"] == 0.8 and f["memory_fraction"] == 1.0
    # All 80 GB admit at least the matched batch; tokens/s = batch / step.
    assert f["batch"] >= g["batch"]
    assert g["tokens_per_s"] == pytest.approx(g["batch"] / g["step_seconds"])
    assert p["tokens_per_s"] == pytest.approx(p["batch"] / p["step_seconds"])
    # Long-context decode on the GPU is attention- (KV-read-) bound.
    assert g["parts"]["attention"] > 0.5
    assert "llm-7b" in format_fig20(rows) and "memory-matched" in format_fig20(rows)
    # energy per token of each system: its step's J / batch (docs/energy.md)
    for sys_ in (p, g, f):
        e = sys_["energy_j"]
        assert sys_["joules_per_token"] == pytest.approx(e["total"] / sys_["batch"], rel=1e-12)
    assert g["energy_j"]["xpu"] == g["energy_j"]["total"] > 0
    assert "J/token PIM / A100" in format_fig20(rows)


def test_plot_labels(rows, tmp_path, monkeypatch):
    import pimphony.sim.experiments.gpu_fig20 as mod

    seen = figure_labels(monkeypatch, mod)
    plot_fig20(rows, tmp_path / "f.png", "Fig. 20")
    assert seen["title"] == "Fig. 20" and "tokens/s" in seen["y"]
    assert seen["legend"][0].startswith("PIMphony") and len(seen["legend"]) == 3


@pytest.mark.slow
def test_cli_json(capsys, tmp_path):
    code, out, err = run_cli(
        capsys,
        *("gpu-fig20", "--json", "--report", tmp_path / "r.json", "--plot", tmp_path / "r.png"),
    )
    assert code == 0, err
    doc = json.loads(out)
    assert [(r["model"], r["workload"], r["capacity_gb"]) for r in doc["rows"]] == list(FIG20_CASES)
    assert all(r["speedup"] > 1 for r in doc["rows"])
