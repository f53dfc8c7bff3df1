"""PIMphony Fig. 14 on xPU+PIM (``ablation --system xpu+pim``, sim/experiments/ablation.py):
the aggregate NPU of tensor-parallel devices, the cumulative steps on one small case, the CLI
and the plot."""

from __future__ import annotations

import json
import math

import pytest
from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.xpu import gemm_cost, ring_allreduce_seconds
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.experiments.ablation import (
    FIG14_CASES,
    format_hetero_ablation,
    hetero_ablation,
    plot_hetero_ablation,
    tensor_parallel_xpu,
)
from pimphony.sim.systems.admission import queue_batches
from pimphony.sim.systems.hetero import SUB_BATCHES_AUTO, HeteroSetup, run_hetero_decode
from pimphony.sim.systems.setup import DecodeSetup
from pimphony.sim.systems.techniques import STEPS
from pimphony.sim.workloads import load_workload, sample_context_lengths

from tests.helpers import figure_labels, run_cli

NPU = load_xpu("neupims-npu")


def test_tensor_parallel_xpu_scales_the_resources():
    four = tensor_parallel_xpu(NPU, 4)
    assert tensor_parallel_xpu(NPU, 1) is NPU
    assert four.peak_tflops.fp16 == 4 * 256.0
    assert four.memory.bandwidth_gbps == 4 * 1024.0
    assert four.memory.capacity_gib == 4 * 32.0
    assert four.systolic.arrays == 32 and four.systolic.rows == 128
    assert four.vector.units == 32 and four.compute.vector_tflops == 4 * 1.024
    assert four.compute.freq_ghz == NPU.compute.freq_ghz
    assert four.memory.efficiency == NPU.memory.efficiency
    assert four.links == NPU.links


def test_tensor_parallel_gemv_is_one_device_on_its_slice():
    """A decode GEMV (batch 8, 4096 x 11008, memory-bound) on 4 NPUs takes what one NPU takes
    on a quarter of the columns: both read 4096 x 2752 x 2 B per device at 1024 GB/s x 0.85."""
    whole = gemm_cost(tensor_parallel_xpu(NPU, 4), 8, 4096, 11008).seconds
    slice_ = gemm_cost(NPU, 8, 4096, 11008 // 4).seconds
    assert whole == pytest.approx(slice_, rel=0.01)
    weights = 4096 * 11008 * 2
    assert whole == pytest.approx(weights / (4 * 1024e9 * 0.85), rel=0.01)


@pytest.fixture(scope="module")
def rows():
    return hetero_ablation("llm-7b", "qmsum", modules=4, requests=24)


def test_every_step_serves_the_same_requests(rows):
    assert [r["step"] for r in rows] == [s[0] for s in STEPS]
    spec, hw = load_model("llm-7b"), load_preset("pimphony-neupims")
    queue = [int(t) for t in sample_context_lengths(load_workload("qmsum"), 24, 0)]
    for r, (_, _, _, memory) in zip(rows, STEPS, strict=True):
        # Weights and KV share the devices' memory, admitted as on the PIM-only system.
        assert r["batch_sizes"] == [len(b) for b in queue_batches(spec, hw, 4, memory, queue)]
        assert sum(r["batch_sizes"]) == 24
        assert r["tokens_per_s"] == pytest.approx(24 / r["seconds"])
        assert sum(r["sub_batches"].values()) == r["batches"]
    assert rows[0]["speedup"] == 1.0


def test_every_step_reports_its_energy(rows):
    """J by part summed over each batch's step (NPU + PIM), per token over the 24 requests."""
    for r in rows:
        e = r["energy_j"]
        assert e["total"] == pytest.approx(
            sum(v for k, v in e.items() if k not in ("unit", "total")), rel=1e-12
        )
        assert r["joules_per_token"] == e["total"] / 24
        assert e["xpu"] > 0 and e["mac"] > 0  # FC on the NPUs, attention on PIM
    assert "J/token" in format_hetero_ablation(rows)


def test_dpa_enlarges_the_batch_and_each_step_gains(rows):
    speeds = [r["tokens_per_s"] for r in rows]
    assert speeds == sorted(speeds)
    assert rows[3]["batch"] > 1.5 * rows[2]["batch"]
    # DPA's larger batch raises throughput more on xPU+PIM than the 7% it adds PIM-only
    # (docs/decode.md, Fig. 13a): the NPU's weight reads are shared by more requests.
    assert rows[3]["tokens_per_s"] > 1.2 * rows[2]["tokens_per_s"]


def test_every_batch_equals_its_own_decode_run(rows):
    """Kernels shared between the queue's batches change nothing: each batch's step is what
    ``decode --system xpu+pim --sub-batches auto`` gives for that batch alone. (With DPA the
    shared programs are encoded for the queue's longest context, not the batch's; the decode
    times of a program's first commands do not depend on the length it was encoded for.)"""
    spec, hw = load_model("llm-7b"), load_preset("pimphony-neupims")
    queue = [int(t) for t in sample_context_lengths(load_workload("qmsum"), 24, 0)]
    npus = tensor_parallel_xpu(NPU, 4)
    label, partition, sched, memory = STEPS[3]
    batches = queue_batches(spec, hw, 4, memory, queue)
    assert len(batches) > 1 and max(batches[-1]) < max(queue)
    alone = [
        run_hetero_decode(
            HeteroSetup(
                DecodeSetup(spec, hw, b, tp=4, partition=partition, sched=sched, memory=memory),
                npus,
                SUB_BATCHES_AUTO,
            )
        ).step_seconds
        for b in batches
    ]
    assert rows[3]["step"] == label
    assert rows[3]["seconds"] == pytest.approx(sum(alone), rel=1e-12)


def test_allreduce_sensitivity_by_hand(rows):
    """Two ring all-reduces per layer of batch x hidden x 2 B over 4 NPUs on 10 GB/s."""
    r = rows[0]
    spec = load_model("llm-7b")
    by_hand = sum(2 * 32 * 2 * 3 / 4 * b * 4096 * 2 / 10e9 for b in r["batch_sizes"])
    assert r["allreduce_ms_not_charged"] == pytest.approx(1e3 * by_hand)
    per_batch = ring_allreduce_seconds(NPU, r["batch_sizes"][0] * spec.hidden * 2, 4)
    assert per_batch == pytest.approx(1.5 * r["batch_sizes"][0] * 4096 * 2 / 10e9)
    assert r["tokens_per_s_allreduce_serial"] < r["tokens_per_s"]


def test_fig14_cases_are_memory_matched():
    """128 GB (4 x 32 GB) for the 7B models, 512 GB for 72B; 70B-GQA at 256 GB (its 8 KV
    heads cannot be split over 16 modules)."""
    gb = {(m, w): 32 * n for m, w, n, _ in FIG14_CASES}
    assert gb[("llm-7b", "qmsum")] == gb[("llama-3.1-8b", "multifieldqa")] == 128
    assert gb[("llm-72b", "qmsum")] == 512 and gb[("llama-3.1-70b", "multifieldqa")] == 256
    assert load_model("llama-3.1-70b").kv_heads % 16 != 0


def test_plot_labels(rows, tmp_path, monkeypatch):
    import pimphony.sim.experiments.ablation as ha

    seen = figure_labels(monkeypatch, ha)
    plot_hetero_ablation({"llm-7b qmsum, 4 dev": rows}, tmp_path / "f.png", "Fig. 14")
    assert seen["title"] == "Fig. 14" and "tokens/s" in seen["y"] and "GB" in seen["x"]
    assert seen["legend"] == [s[0] for s in STEPS]
    assert (tmp_path / "f.png").stat().st_size > 0


def test_cli_json(capsys, tmp_path):
    code, out, err = run_cli(
        capsys,
        *("ablation", "--system", "xpu+pim", "--requests", "8", "--json"),
        *("--plot", tmp_path / "a.png"),
    )
    assert code == 0, err
    doc = json.loads(out)
    (rows_,) = doc["cases"].values()
    assert [r["step"] for r in rows_] == [s[0] for s in STEPS]
    assert doc["provenance"]["xpu"] == "neupims-npu"
    assert math.isclose(rows_[0]["speedup"], 1.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--xpu", "neupims-npu"), "--xpu is an option of --system xpu+pim"),
        (("--fig14",), "--fig14 is an option of --system xpu+pim"),
        (("--system", "xpu+pim", "--fig14", "--model", "llm-72b"), "drop --model"),
        (("--system", "gpu"), "invalid choice: 'gpu'"),
        (("--system", "xpu+pim", "--micro-batches", "4"), "--micro-batches is an option of"),
    ],
)
def test_cli_refusals(capsys, tmp_path, argv, message):
    code, out, err = run_cli(capsys, "ablation", *argv, "--plot", tmp_path / "a.png")
    assert code == 2 and out == "" and message in err
