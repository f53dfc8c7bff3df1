"""LibraPIM's result figures (Figs. 20, 7, 9, 21, DBO on measured rates): utilisation and idle
time by hand, the exclusive-bank pipelined system, NPU scaling, the measured-rate Algorithm 1
(docs/librapim.md)."""

from __future__ import annotations

import math

import pytest
from pimphony.compiler.llm import LayerOp, gemv_shapes, load_model
from pimphony.models.config import load_preset
from pimphony.models.dbo import DboThroughput, solve_ffn_offload, solve_mha_offload
from pimphony.models.xpu import gemm_cost
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.experiments.librapim_figs.fig21 import scaled_npu
from pimphony.sim.experiments.librapim_figs.utilisation import step_row, sweep
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.librapim import (
    _Parts,
    dbo_model,
    measured_throughput,
    run_librapim,
)
from pimphony.sim.systems.setup import DecodeError

from tests.helpers import run_cli, run_report

SPEC = "llm-1.8b"


@pytest.fixture(scope="module")
def hw2():
    """Table 2's PIM with 2 channels (small, fast steps)."""
    return load_preset("librapim-hbm2").replace(**{"module.channels": 2})


@pytest.fixture(scope="module")
def npu():
    return load_xpu("librapim-npu")


def test_utilisation_of_a_hand_sized_step(hw2, npu):
    """NPU+AiM, HFP attention, 4 requests of 64 tokens, one device: the NPU's FLOPs are the
    four FC GEMMs' 2 x B x d_in x d_out per layer; PIM's MAC commands per (request, head)
    are ceil(T / 16) x ceil(d_h / 16) for QK^T plus ceil(d_h / 16) x ceil(T / 16) for SV
    (docs/mapping.md: MAC = G x groups x tiles), each one all-bank MAC per tCCD at peak."""
    spec = load_model(SPEC)
    b, t = 4, 64
    r = run_librapim(spec, hw2, npu, (t,) * b, systems=("npu+aim",), partitions=("hfp",))["npu+aim"]
    fc = sum(2 * b * d_out * d_in for d_out, d_in in gemv_shapes(spec).values())
    assert r.work["xpu_flops"] == spec.layers * fc
    assert r.utilisation["xpu"] == pytest.approx(
        spec.layers * fc / (65.536e12 * r.step_seconds), rel=1e-12
    )
    per_pair = 2 * math.ceil(t / 16) * math.ceil(spec.head_dim / 16)
    macs = spec.layers * b * spec.kv_heads * per_pair
    assert r.work["pim_macs"] == macs
    assert r.utilisation["pim_mac_issue"] == pytest.approx(macs * 2 / (2 * r.cycles), rel=1e-12)
    # no padding here (T and d_h are multiples of 16): useful FLOPs = issued MACs x 512
    assert r.work["pim_flops"] == macs * 16 * 16 * 2
    assert r.utilisation["pim_flops"] == pytest.approx(r.utilisation["pim_mac_issue"])


def test_idle_is_one_minus_busy_by_hand(hw2, npu):
    """NPU+AiM is serial: the step is the xPU's ops plus the links plus PIM's attention, so
    PIM's idle fraction is 1 - layers x attention cycles / step."""
    spec = load_model(SPEC)
    lengths = (256,) * 8
    r = run_librapim(spec, hw2, npu, lengths, systems=("npu+aim",), partitions=("hfp",))["npu+aim"]
    parts = _Parts(spec, hw2, npu, 1, KernelCache(hw2, "dcs", True, dpa=True, dpa_max_tokens=256))
    parts.partitions = ("hfp",)
    pim = spec.layers * sum(parts.attention(lengths).values())
    assert r.ops["qk"] + r.ops["softmax"] + r.ops["sv"] == pim
    row = step_row(spec.name, npu.name, 8, 256, r)
    assert row["idle_pim"] == pytest.approx(1 - pim / r.cycles, rel=1e-12)
    xpu = sum(c for op, c in r.ops.items() if op not in ("qk", "softmax", "sv"))
    xpu -= r.ops["qkv_transfer"] + r.ops["out_transfer"]
    assert row["idle_xpu"] == pytest.approx(1 - xpu / r.cycles, rel=1e-12)
    assert r.cycles == xpu + pim + r.ops["qkv_transfer"] + r.ops["out_transfer"]


def test_exclusive_pipelined_system_stretches_pim_by_the_bank_slice_factor(hw2, npu):
    """aim-pipelined is NeuPIMs' schedule with exclusive banks: every group's QK^T and SV
    take the bank-slice TLM's exclusive factor at the group's read load; MACs are the same,
    so PIM's MAC-issue utilisation falls by the step's growth."""
    spec = load_model(SPEC)
    lengths = (1024,) * 8
    out = run_librapim(spec, hw2, npu, lengths, systems=("neupims", "aim-pipelined"))
    ideal, excl = out["neupims"], out["aim-pipelined"]
    assert excl.work == ideal.work
    parts = _Parts(spec, hw2, npu, 1, KernelCache(hw2, "dcs", True, dpa=True, dpa_max_tokens=1024))
    qk = 0
    for d in excl.decisions:
        assert d["sliced"] is False and d["dex_stretch"] > 1.8
        assert d["dex_stretch"] == parts.dex_stretch(1024, d["xpu_read_load"], False)
        qk += math.ceil(parts.attention((1024,) * d["batch"])["qk"] * d["dex_stretch"])
    assert excl.ops["qk"] == spec.layers * qk
    assert excl.cycles > ideal.cycles
    ratio = excl.utilisation["pim_mac_issue"] / ideal.utilisation["pim_mac_issue"]
    assert ratio == pytest.approx(ideal.cycles / excl.cycles, rel=1e-12)


def test_measured_dbo_solves_equations_1_and_2_with_its_rates(hw2, npu):
    """The measured rates are the models' FLOPs over simulated time, and Algorithm 1's m / n
    (equations 1 and 2) solve with them: both sides equal at m* (n*)."""
    spec = load_model(SPEC)
    model = dbo_model(spec)
    for lengths in ((1024,) * 8, (16,) * 8):
        r = run_librapim(spec, hw2, npu, lengths, systems=("librapim-measured",))[
            "librapim-measured"
        ]
        parts = _Parts(
            spec, hw2, npu, 1, KernelCache(hw2, "dcs", True, dpa=True, dpa_max_tokens=max(lengths))
        )
        mb = lengths[: len(lengths) // 2]
        thr = measured_throughput(parts, mb)
        for d in r.decisions:
            assert DboThroughput(**d["throughput"]) == thr
        hz = 1e9
        assert thr.pim_flops == pytest.approx(
            parts.attention_flops(mb) * hz / sum(parts.attention(mb).values())
        )
        fc = (LayerOp.QKV, LayerOp.PROJ, LayerOp.FFN1, LayerOp.FFN2)
        assert thr.xpu_flops == pytest.approx(
            sum(parts.gemm_flops(op, 4) for op in fc) * hz / sum(parts.gemm(op, 4) for op in fc)
        )
        assert thr.ffn_pim_flops == pytest.approx(
            parts.ffn_flops(16) * hz / parts.pim_ffn_shared(16)
        )
        b, L = 4, max(mb)
        d_m, f = model.d_model, model.k_ffn * model.d_model * model.d_ff
        a = (model.k_qkv + model.k_proj) * d_m * d_m * b / thr.xpu_flops
        t_mha = model.k_mha * d_m * b * L / thr.pim_flops
        m, _, _ = solve_ffn_offload(model, thr, b, L)
        assert a + f * (b - m) / thr.xpu_flops == pytest.approx(t_mha + f * m / thr.ffn_pim_flops)
        n, _, _ = solve_mha_offload(model, thr, b, L)
        h, tot = model.k_mha * d_m * L, a + f * b / thr.xpu_flops
        assert tot + h * n / thr.xpu_gemv_flops == pytest.approx(h * (b - n) / thr.pim_flops)
        d = r.decisions[0]
        exact = d["n_exact"] if d["case"] == "longer-mha" else d["m_exact"]
        if d["case"] in ("longer-mha", "longer-ffn"):
            assert exact == pytest.approx(n if d["case"] == "longer-mha" else m)


def test_fig20_cli_writes_json_and_png(capsys, tmp_path):
    out, doc, png = run_report(
        capsys, tmp_path,
        *("librapim-figs", "--figure", "fig20", "--model", SPEC, "--batches", "4"),
        *("--contexts", "64,256", "--tp", "1"),
    )  # fmt: skip
    assert png.stat().st_size > 0 and "provenance" in doc and doc["figure"] == "fig20"
    assert {r["system"] for r in doc["rows"]} == {"npu+aim", "attacc", "neupims", "librapim"}
    for r in doc["rows"]:
        assert 0 <= r["util_pim_flops"] <= r["util_pim_mac"] <= r["busy_pim"] + 1e-12
        assert 0 < r["util_xpu"] <= r["busy_xpu"] + 1e-12
    assert "paper 38% 77%" in out
    again = ("librapim-figs", "--figure", "fig20", "--report", png.with_suffix(".json"))
    rc, _, err = run_cli(capsys, *again)
    assert rc != 0 and "--force" in err
    rc, _, err = run_cli(capsys, "librapim-figs", "--figure", "fig20", "--systems", "tpu")
    assert rc == 2 and "unknown system(s) tpu" in err


@pytest.mark.parametrize(
    "option, value",
    [("--batches", "1000000000000"), ("--sizes", "1000000000000"), ("--groups", "5000"),
     ("--tp", "0")],
)  # fmt: skip
def test_grid_options_are_bounded(capsys, option, value):
    """The fuzzer's (issue 34): a MemoryError (--batches) and runs that never ended."""
    rc, _, err = run_cli(capsys, "librapim-figs", "--figure", "fig21", option, value)
    assert rc == 2 and f"{option}: {value} is outside 1 to " in err, err


@pytest.mark.parametrize("figure", ["fig7", "fig9"])
def test_fig7_and_fig9_cli(capsys, tmp_path, figure):
    out, doc, png = run_report(
        capsys, tmp_path,
        *("librapim-figs", "--figure", figure, "--model", SPEC, "--batches", "2,4"),
        *("--contexts", "16,64", "--tp", "1"),
    )  # fmt: skip
    assert png.stat().st_size > 0 and doc["provenance"]["model"] == SPEC
    assert len(doc["rows"]) == 4 * (1 if figure == "fig7" else 2)
    for r in doc["rows"]:
        assert r["idle_pim"] == pytest.approx(1 - r["busy_pim"])
    if figure == "fig7":
        assert "PIM idle fraction" in out and doc["summary"]["small_short"]["batch"] == 2
    else:
        for s in doc["summary"].values():  # exclusive banks: PIM busy longer, same MACs
            assert s["busy_pim_exclusive"] > s["busy_pim_ideal"]
            assert s["step_ms_exclusive"] >= s["step_ms_ideal"]


def test_fig21_npus_scale_the_array_and_the_flop_ratio_sets_compute_bound_time(npu):
    """scaled_npu: peak 2 x 8 x size^2 x 1 GHz, lanes 2 x size (width) or 128 (fixed); a
    compute-bound GEMM whose shape tiles both arrays exactly takes (64 / 32)^2 = 4x longer
    on 32 x 32 arrays, the FLOP ratio; a memory-bound one takes the same time."""
    small, base, big = (scaled_npu(npu, s) for s in (32, 64, 256))
    assert small.peak_flops() == 2 * 8 * 32 * 32 * 1e9
    assert base.peak_flops() == npu.peak_flops() and base.vector == npu.vector
    assert big.peak_flops() == 2 * 8 * 256 * 256 * 1e9
    assert (small.vector.lanes, big.vector.lanes) == (64, 512)
    assert big.vector_flops == 8 * 512 * 1e9
    assert scaled_npu(npu, 256, "fixed").vector.lanes == 128
    c32, c64 = (gemm_cost(d, 4096, 4096, 4096) for d in (small, base))
    assert c32.bound == c64.bound == "compute"
    assert c32.seconds == pytest.approx(4 * c64.seconds, rel=1e-12)
    m32, m64 = (gemm_cost(d, 1, 4096, 4096) for d in (small, base))
    assert m32.bound == m64.bound == "memory" and m32.seconds == m64.seconds
    with pytest.raises(DecodeError, match="array size 0"):
        scaled_npu(npu, 0)
    with pytest.raises(DecodeError, match="vector scaling 'x'"):
        scaled_npu(npu, 32, "x")


def test_fig21_cli_normalises_to_the_smallest_array_without_dbo(capsys, tmp_path):
    out, doc, png = run_report(
        capsys, tmp_path,
        *("librapim-figs", "--figure", "fig21", "--model", SPEC, "--batches", "4"),
        *("--contexts", "64", "--sizes", "32,64", "--tp", "1"),
    )  # fmt: skip
    rows = doc["rows"]
    assert {(r["array"], r["system"]) for r in rows} == {
        (a, s) for a in (32, 64) for s in ("librapim-no-dbo", "librapim")
    }
    ref = [r for r in rows if (r["array"], r["system"]) == (32, "librapim-no-dbo")][0]
    assert ref["normalised"] == 1.0
    for r in rows:
        assert r["normalised"] == pytest.approx(r["tokens_per_s"] / ref["tokens_per_s"])
    assert "w/o DBO" in out


def test_dbo_cli_reports_predicted_and_simulated_for_both_variants(capsys, tmp_path):
    out, doc, png = run_report(
        capsys, tmp_path,
        *("librapim-figs", "--figure", "dbo", "--model", SPEC, "--batches", "8"),
        *("--contexts", "1024", "--tp", "1"),
    )  # fmt: skip
    assert {r["system"] for r in doc["rows"]} == {"librapim", "librapim-measured"}
    for r in doc["rows"]:
        assert r["predicted_ms"] > 0 and r["step_ms"] > 0
    for name, s in doc["summary"].items():
        ratio = [r["predicted_ms"] / r["step_ms"] for r in doc["rows"] if r["system"] == name]
        assert s["predicted_over_simulated_mean"] == pytest.approx(sum(ratio) / len(ratio))
    assert "predicted/simulated mean" in out


def test_fig21_step_gemm_time_follows_the_flop_ratio(hw2, npu):
    """In a step: at 256 requests both NPUs are compute-bound, so the QKV GEMM (3072 x 2048,
    whole tiles on both) takes 4x the cycles on 32 x 32 arrays (ceil per op: within 1e-4)."""
    spec = load_model(SPEC)
    ops = {
        s: run_librapim(spec, hw2, scaled_npu(npu, s), (16,) * 256, systems=("npu+aim",))[
            "npu+aim"
        ].ops
        for s in (32, 64)
    }
    assert ops[32]["qkv"] == pytest.approx(4 * ops[64]["qkv"], rel=1e-4)


def test_paper_directions_that_hold_on_gpt3():
    """GPT3-175B, the claims our model reproduces: NPU+AiM's PIM idles > 80% at B = 32,
    L = 16 (Fig. 7) and LibraPIM's PIM is > 25% utilised at B = 128, L = 16, NeuPIMs' is
    not (Fig. 20)."""
    rows = sweep("gpt3-175b-4k", (32,), (16,), ("npu+aim",))
    assert rows[0]["idle_pim"] > 0.8
    rows = {r["system"]: r for r in sweep("gpt3-175b-4k", (128,), (16,), ("neupims", "librapim"))}
    assert rows["librapim"]["util_pim_mac"] > 0.25 > rows["neupims"]["util_pim_mac"]
