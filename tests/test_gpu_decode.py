"""The GPU-only decode step (``sim/systems/gpu.py``, issue 14 deliverable 4).

Every expected time is computed by hand here from the A100 preset's numbers (312 TFLOPS FP16
at 0.8, 19.5 TFLOPS vector at 0.8, 2039 GB/s at 0.85, 600 GB/s NVLink, and per kernel 0.58 us
launch and 405.5 ns DRAM latency), not with ``models.xpu``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
from pimphony.compiler.llm import load_model
from pimphony.models.xpu import ring_allreduce_seconds
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.systems.gpu import (
    KV_BLOCK_TOKENS,
    GpuCycles,
    GpuSetup,
    gpu_fill_batch,
    gpu_memory,
    kv_blocks,
    run_gpu_decode,
)
from pimphony.sim.systems.setup import DecodeError

from tests.helpers import run_cli, tiny_model

A100 = load_xpu("a100-80gb")
PEAK = 312e12 * 0.8  # matrix FLOP/s reached
VEC = 19.5e12 * 0.8  # vector FLOP/s reached
BW = 2039e9 * 0.85  # DRAM bytes/s reached
NVLINK = 600e9
LAUNCH = 0.58e-6  # [kernel] launch_us: every kernel, the all-reduce included
LATENCY = 405.5e-9  # [kernel] dram_latency_ns: before a kernel's first DRAM bytes

#: 2 layers, 4 query heads in 2 KV groups, d_h 16, hidden 64, SwiGLU 128, FP16.
TINY = tiny_model(layers=2, heads=4, kv_heads=2, hidden=64, intermediate=128, head_dim=16)
LENGTHS = (20, 33)  # 2 and 3 blocks: attention reads 32 and 48 tokens


def _roof(matrix_flops: int, vector_flops: int, nbytes: int) -> float:
    """One kernel: launch + max(compute, DRAM latency + bytes at the capped bandwidth)."""
    return LAUNCH + max(matrix_flops / PEAK + vector_flops / VEC, LATENCY + nbytes / BW)


def _hand_step(n: int) -> dict[str, float]:
    """Seconds of each part of TINY's step on ``n`` A100s, from the formulas of the docs."""
    b, e, h, d = 2, 2, 64, 16
    heads, kv = 4 // n, 2 // n
    fc = 0.0
    # (K, N) per GPU: QKV and FFN1 column-split, proj and FFN2 row-split.
    for k, out in ((h, (heads + 2 * kv) * d), (heads * d, h), (h, 256 // n), (128 // n, h)):
        fc += _roof(2 * b * k * out, 0, (b * k + k * out + b * out) * e)
    tokens = 32 + 48
    attention = _roof(
        4 * tokens * d * heads, 5 * tokens * heads, (2 * b * heads * d + 2 * tokens * kv * d) * e
    )
    vector = 2 * _roof(0, 4 * b * h, 2 * b * h * e)  # two RMSNorms: 4 FLOPs, 1 read 1 write
    vector += 2 * _roof(0, 1 * b * h, 3 * b * h * e)  # two residual adds: 2 reads 1 write
    vector += _roof(0, 5 * b * 128 // n, 3 * b * 128 // n * e)  # SwiGLU: 2 reads 1 write
    allreduce = 2 * (LAUNCH + 2 * (n - 1) / n * b * h * e / NVLINK) if n > 1 else 0.0
    return {
        "fc": 2 * fc,
        "attention": 2 * attention,
        "vector": 2 * vector,
        "allreduce": 2 * allreduce,
    }


@pytest.mark.parametrize("n", [1, 2])
def test_small_step_by_hand(n):
    report = run_gpu_decode(GpuSetup(TINY, A100, n, LENGTHS))
    want = _hand_step(n)
    for part, seconds in want.items():
        assert report.parts[part]["seconds"] == pytest.approx(seconds, rel=1e-12), part
    assert report.step_seconds == pytest.approx(sum(want.values()), rel=1e-12)
    assert report.tokens_per_s == pytest.approx(2 / sum(want.values()), rel=1e-12)
    assert (report.parts["allreduce"]["seconds"] == 0) == (n == 1)


def test_allreduce_formula():
    assert ring_allreduce_seconds(A100, 1000, 1) == 0
    want = LAUNCH + 2 * 3 / 4 * 1000 / NVLINK
    assert ring_allreduce_seconds(A100, 1000, 4) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("lengths", [(20, 33), (1, 16, 17, 32768), (4096,) * 3])
def test_serial_composition(lengths):
    spec = load_model("llm-7b")
    report = run_gpu_decode(GpuSetup(spec, A100, 4, lengths))
    parts = [p["seconds"] for p in report.parts.values()]
    assert report.step_seconds == pytest.approx(sum(parts), rel=1e-12)
    ops = sum(op["seconds"] for op in report.ops.values())
    one = report.allreduce["per_layer"] * report.allreduce["seconds_each"]
    assert report.step_seconds == pytest.approx(spec.layers * (ops + one), rel=1e-12)


@pytest.mark.parametrize("t", [1, 15, 16, 17, 31, 32, 33, 32768])
def test_kv_block_rounding(t):
    assert kv_blocks(t) == (t + KV_BLOCK_TOKENS - 1) // KV_BLOCK_TOKENS
    assert (kv_blocks(t) - 1) * KV_BLOCK_TOKENS < t <= kv_blocks(t) * KV_BLOCK_TOKENS


def test_capacity_closed_form():
    spec = load_model("llm-7b")
    lengths = (100, 8192, 30000)
    mem = gpu_memory(GpuSetup(spec, A100, 2, lengths))
    block = 16 * 2 * 32 * 16 * 128 * 2  # 16 tokens x K,V x 32 layers x 16 KV heads x 128 x 2 B
    assert mem["kv_block_bytes_per_gpu"] == block
    weights = math.ceil(spec.resident_weight_bytes / 2)
    assert mem["kv_block_capacity_per_gpu"] == (80 * 2**30 - weights) // block
    assert mem["kv_blocks_per_gpu"] == 7 + 512 + 1875
    assert mem["kv_padding_tokens"] == 16 * (7 + 512 + 1875) - sum(lengths)


def test_fill_batch_is_longest_fitting_prefix():
    spec = load_model("llm-7b")
    budget = gpu_memory(GpuSetup(spec, A100, 1, (16,)))["kv_block_capacity_per_gpu"]
    per = kv_blocks(16000)
    want = budget // per
    got = gpu_fill_batch(spec, A100, 1, [16000] * (want + 5))
    assert got == (16000,) * want
    GpuSetup(spec, A100, 1, got)  # fits
    with pytest.raises(DecodeError, match="needs .* KV blocks"):
        gpu_memory(GpuSetup(spec, A100, 1, got + (16000,)))


def test_refusals():
    big = load_model("llm-72b")
    with pytest.raises(DecodeError, match="the weights alone do not fit: 1 x a100-80gb"):
        run_gpu_decode(GpuSetup(big, A100, 1, (1024,)))
    with pytest.raises(DecodeError, match="not even one request fits: the weights alone"):
        gpu_fill_batch(big, A100, 1, [1024] * 10)
    spec = load_model("llm-7b")
    with pytest.raises(DecodeError, match="all 3 candidate requests fit"):
        gpu_fill_batch(spec, A100, 1, [1024] * 3)
    with pytest.raises(DecodeError, match="not a gpu"):
        GpuSetup(spec, load_xpu("neupims-npu"), 1, (1024,))
    with pytest.raises(DecodeError, match="--gpus 3: must divide llm-7b's heads = 32"):
        GpuSetup(spec, A100, 3, (1024,))
    with pytest.raises(DecodeError, match="the batch is empty"):
        GpuSetup(spec, A100, 1, ())
    with pytest.raises(DecodeError, match="exceeds llm-7b's context_window"):
        GpuSetup(spec, A100, 1, (40000,))


def test_cli_json(capsys, tmp_path):
    code, out, _ = run_cli(
        capsys,
        "decode",
        "--system",
        "gpu",
        "--gpus",
        "2",
        "--context",
        "4096",
        "--batch",
        "2",
        "--json",
        "--report",
        str(tmp_path / "r.json"),
        "--plot",
        str(tmp_path / "r.png"),
    )
    assert code == 0
    report = json.loads(out)
    assert report["gpus"] == 2 and report["batch"] == 2
    assert set(report["parts"]) == {"fc", "attention", "vector", "allreduce"}
    prov = report["provenance"]
    assert prov["gpu"]["name"] == "a100-80gb" and prov["context_lengths"] == [4096, 4096]
    assert (tmp_path / "r.png").exists()


def test_cli_refuses_impossible_system(capsys, tmp_path):
    code, _, err = run_cli(
        capsys, "decode", "--system", "gpu", "--model", "llm-72b", "--context", "1024"
    )
    assert code != 0 and "the weights alone do not fit" in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("--system", "gpu", "--tp", "4", "--sched", "static"), "--tp (--system pim), --sched"),
        (("--system", "gpu", "--preset", "aim-16ch"), "--preset (--system pim)"),
        (
            (
                "--gpus",
                "4",
            ),
            "--system pim does not use --gpus (--system gpu)",
        ),
        (("--system", "pim", "--gpu", "h100-sxm"), "--gpu (--system gpu)"),
    ],
)
def test_cli_refuses_the_other_systems_options(capsys, argv, named):
    code, out, err = run_cli(capsys, "decode", "--context", "1024", "--batch", "1", *argv)
    assert (code, out) == (2, "")
    assert named in err and err.rstrip().endswith("drop them")


def test_gpu_compare_one_point(capsys, tmp_path):
    """One workload at 128 GB: every system measured, GPU counts matched as LoL-PIM's."""
    from pimphony.sim.experiments.gpu_compare import SERIES, format_compare, gpu_compare

    rows = gpu_compare("llm-7b", ["qmsum"], [128])
    by = {r["system"]: r for r in rows}
    assert set(by) == {s.label for s in SERIES}
    assert by["pim-aimx"]["devices"] == by["lol-pim"]["devices"] == 16  # 128 GB / 8 GB
    assert by["gpu-hbm"]["devices"] == by["gpu-gddr6"]["devices"] == 2  # 128 GB / 64 GB
    # GPU-GDDR6's 64 GB per GPU and paged KV admit what LoL-PIM's lazy 8 x 8 GB node admits.
    assert by["gpu-gddr6"]["batch"] <= by["gpu-hbm"]["batch"]
    assert by["lol-pim"]["tokens_per_s"] > by["pim-aimx"]["tokens_per_s"]
    assert by["gpu-gddr6-10g"]["tokens_per_s"] < by["gpu-gddr6"]["tokens_per_s"]
    assert "LoL/GDDR" in format_compare(rows)
    # every system's energy per token (all presets here have [energy]): its step's J / batch
    for r in rows:
        assert r["joules_per_token"] == pytest.approx(
            r["energy_j"]["total"] / r["batch"], rel=1e-12
        )
    assert "J/token per system" in format_compare(rows)


def test_gpu_compare_hetero_halves_pim_capacity():
    """``--hetero`` at 128 GB: LoL-PIM 8.1's "halving PIM capacity", 8 modules of 8 GB hold the
    KV cache and one 64 GB GPU-GDDR6 the weights; GPU+LoL-PIM below standalone LoL-PIM and
    above GPU+PIM; a model whose weights exceed the GPUs is left out."""
    from pimphony.compiler.llm import load_model
    from pimphony.sim.experiments.gpu_compare import (
        HETERO_SERIES,
        _hetero_point,
        format_compare,
        gpu_compare,
    )

    rows = gpu_compare("llm-7b", ["qmsum"], [128], hetero=True)
    by = {r["system"]: r for r in rows}
    for s in HETERO_SERIES:
        assert (by[s.label]["devices"], by[s.label]["gpus"]) == (8, 1)
    assert by["gpu+lol-pim"]["tp"] * by["gpu+lol-pim"]["pp"] == 8
    lol, hybrid, base = (by[x]["tokens_per_s"] for x in ("lol-pim", "gpu+lol-pim", "gpu+pim"))
    assert lol > hybrid > base
    assert "LoL/G+L" in format_compare(rows) and "LoL/G+L" not in format_compare(rows[:5])
    out = _hetero_point(HETERO_SERIES[1], load_model("llm-72b"), [1024], 16, None)
    assert (out["gpus"], out["tokens_per_s"]) == (2, None)
    assert out["why"] == "the weights exceed 2 x lolpim-gpu-gddr6"


def test_gpu_compare_refuses_partial_device():
    from pimphony.sim.experiments.gpu_compare import CompareError, gpu_compare

    with pytest.raises(CompareError, match="100 GB is not a whole number of 8 GB"):
        gpu_compare("llm-7b", ["qmsum"], [100])
    # too large: refused before any point runs (10^12 GB was a MemoryError; issue 34)
    with pytest.raises(CompareError, match="capacity 8200 GB is outside 1 to 8,192 GB"):
        gpu_compare("llm-7b", ["qmsum"], [128, 8200])


def test_kernels_per_layer_and_the_switch(capsys, tmp_path, monkeypatch):
    """One layer launches 10 kernels (4 FC GEMMs, attention, 2 norms, 2 residual adds, the
    activation; ``docs/xpu.md``, Per-kernel costs) and 2 all-reduces on more than one GPU;
    ``pimphony --no-kernel-costs`` times the same step on the pure roofline."""
    from pimphony.models.xpu_config import KERNEL_COSTS_ENV
    from pimphony.sim.systems.gpu import gpu_op_costs

    monkeypatch.setenv(KERNEL_COSTS_ENV, "1")  # restored after main() sets it
    spec = load_model("llm-7b")
    setup = GpuSetup(spec, A100, 2, (4096, 4096))
    assert sum(count for _, count in gpu_op_costs(setup).values()) == 10
    with_costs = run_gpu_decode(setup).step_seconds
    roof = run_gpu_decode(GpuSetup(spec, A100.roofline(), 2, (4096, 4096))).step_seconds
    assert with_costs > roof
    argv = ["decode", "--system", "gpu", "--gpus", "2", "--context", "4096", "--batch", "2"]
    argv += ["--json", "--report", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")]
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and json.loads(out)["step_seconds"] == pytest.approx(with_costs, rel=1e-12)
    code, out, _ = run_cli(capsys, "--no-kernel-costs", *argv, "--force")
    assert code == 0 and json.loads(out)["step_seconds"] == pytest.approx(roof, rel=1e-12)
    assert "kernel" not in json.loads(out)["provenance"]["gpu"]["values"]


@pytest.mark.parametrize(("model", "n"), [(TINY, 1), (TINY, 2), (load_model("llm-7b"), 8)])
def test_gpu_cycles_equal_run_gpu_decode(model, n):
    """Random batches on one :class:`GpuCycles` (per-batch-size costs memoised) against a
    fresh ``run_gpu_decode`` each: the same seconds (``==``)."""
    base = GpuSetup(model, A100, n, (1,), check_capacity=False)
    fast = GpuCycles(base)
    rng = random.Random(f"gpu-{model.name}-{n}")
    for _ in range(8):
        lengths = tuple(rng.randint(1, 3000) for _ in range(rng.choice((1, 2, 3, 40))))
        step = run_gpu_decode(dataclasses.replace(base, lengths=lengths))
        assert fast.seconds(lengths) == step.step_seconds, lengths
