"""LibraPIM end to end, first part: presets, models, workload, the DBO adapters and the
NPU+AiM vs LibraPIM step (docs/librapim.md). Algorithm 1 itself: tests/test_dbo.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from compiler.kernels import compile_kernel
from compiler.llm import load_model
from models.channel import run_channel
from models.config import load_preset
from models.dbo import DboCase
from models.xpu_config import load_xpu
from sim.decode_step.hetero import HeteroSetup, run_hetero_decode
from sim.decode_step.librapim import dbo_model, dbo_throughput, format_librapim, run_librapim
from sim.decode_step.setup import DecodeError, DecodeSetup
from sim.workloads import (
    WorkloadError,
    generation_context_lengths,
    load_workload,
    sample_context_lengths,
)
from tests.helpers import run_cli


@pytest.fixture(scope="module")
def hbm2():
    return load_preset("librapim-hbm2")


def test_hbm2_preset_is_table_2(hbm2):
    assert hbm2.module.channels == 64
    assert hbm2.module_bytes == 16 * 2**30  # "Channel / Capacity 64 / 16 GB"
    assert hbm2.channel.banks == 16  # 4 bank groups x 4 banks
    assert hbm2.channel.mac_elements == 16  # 16 MAC units per bank
    assert hbm2.channel.row_bytes == 1024
    t = hbm2.timing
    assert (t.tRCD_MAC, t.tRP) == (14, 14)  # tCL-tRCD-tRP 14-14-14
    # bank groups: the same-group (_L) values of DRAMsim3's HBM2 preset
    assert (t.tCCD, t.tRRD, t.tRTP, t.tFAW, t.tRAS) == (2, 6, 6, 30, 34)
    assert t.t_RD_OUT == 14 + 2 and t.t_WR_INP == 4 + 2  # CL / CWL + BL/2


@pytest.mark.parametrize("sched", ["static", "pingpong", "dcs"])
def test_channel_tlm_runs_aim_kernels_on_the_hbm2_geometry(hbm2, sched):
    k = compile_kernel(hbm2, "gemv", d_out=1024, d_in=4096)
    # 1024 rows over 16 banks, 4096 / 16 elements per MAC: 16384 MACs
    assert k.counts["MAC"] == 1024 * 4096 // (16 * 16)
    r = run_channel(k.commands, hbm2, sched, record=False)
    assert r.counts["MAC"] == 16384
    assert r.cycles >= 16384 * hbm2.timing.tCCD  # MACs at most one per tCCD


def test_gpt3_and_llama3_shapes():
    g = load_model("gpt3-175b")
    assert (g.layers, g.heads, g.hidden, g.context_window) == (96, 96, 12288, 2048)
    params = g.resident_weight_bytes / g.element_bytes
    assert 174.0e9 < params < 176.0e9  # "175.0B" (Brown et al. Table 2.1)
    assert load_model("gpt3-175b-4k").context_window == 4096
    ll = load_model("llama-3.1-70b")  # LibraPIM's Llama3-70B: same shapes, 8K window
    assert (ll.layers, ll.heads, ll.kv_heads) == (80, 64, 8)


def test_alpaca_workload_and_generation():
    wl = load_workload("alpaca")
    assert (wl.mean, wl.min, wl.max, wl.context_window) == (19.31, 1, 512, 2048)
    x = sample_context_lengths(wl, 4000, seed=1)
    assert abs(x.mean() - 19.31) < 1.0  # the truncated sampler keeps the stated mean
    steps = generation_context_lengths(np.array([3, 7]), 4, max_context=10)
    assert steps.tolist() == [[3, 7], [4, 8], [5, 9], [6, 10]]
    with pytest.raises(WorkloadError, match=r"new_tokens = 5: .* 11 tokens, beyond max_context"):
        generation_context_lengths([3, 7], 5, max_context=10)
    with pytest.raises(WorkloadError, match=r"new_tokens = 0: must be >= 1"):
        generation_context_lengths([3], 0)
    with pytest.raises(WorkloadError, match=r"prompt length 0 must be >= 1"):
        generation_context_lengths([0, 3], 2)


def test_dbo_constants_are_flops_per_request():
    g = dbo_model(load_model("gpt3-175b"))
    assert (g.k_qkv, g.k_proj, g.k_ffn, g.k_mha) == (6.0, 2.0, 4.0, 4.0)
    assert g.k_ffn * g.d_ff / g.d_model == 16.0  # the paper's "K = 16 in GPT3's FFN"
    ll = dbo_model(load_model("llama-3.1-70b"))
    assert ll.k_qkv == 2 * (64 + 16) * 128 / 8192  # GQA: 2.5
    assert ll.k_ffn == 6.0  # SwiGLU: gate, up, down


def test_dbo_throughputs_from_the_presets(hbm2):
    t = dbo_throughput(load_xpu("librapim-npu"), hbm2)
    assert t.pim_flops == 64 * 16 * 16 * 2 * 1e9 / 2  # 16.384 TFLOP/s at tCCD 2
    assert t.xpu_flops == pytest.approx(65.536e12)
    assert t.xpu_gemv_flops == pytest.approx(2048e9 * 0.85)
    assert t.pim_channels == 64


def test_npu_aim_is_the_serial_hetero_step_and_librapim_moves_attention(hbm2):
    """NPU+AiM must be exactly the existing serial xPU+PIM step; with 2 PIM channels and
    1024-token contexts PIM is the slower device, so each group moves attention to the xPU."""
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    hw = hbm2.replace(**{"module.channels": 2})  # B = 4 per group is not a "small batch"
    lengths = (1024,) * 8
    systems = run_librapim(spec, hw, xpu, lengths, groups=2)
    hetero = run_hetero_decode(
        HeteroSetup(DecodeSetup(spec, hw, lengths, check_capacity=False), xpu, 1)
    )
    assert systems["npu+aim"].cycles == hetero.cycles
    pipelined = run_hetero_decode(
        HeteroSetup(DecodeSetup(spec, hw, lengths, check_capacity=False), xpu, 2)
    )
    assert systems["pipelined"].cycles == pipelined.cycles
    lib = systems["librapim"]
    assert lib.group_sizes == [4, 4]
    assert lib.cycles < systems["pipelined"].cycles  # moving attention helps here
    for d in lib.decisions:
        assert d["case"] == DboCase.LONGER_MHA and 1 <= d["n"] <= 4
    assert lib.ops["xpu_attention"] > 0 and "pim_ffn" not in lib.ops
    assert "longer-mha" in format_librapim(systems)
    with pytest.raises(DecodeError, match=r"groups = 9: must be an integer from 1 to the batch"):
        run_librapim(spec, hw, xpu, lengths, groups=9)


def test_small_batch_groups_run_their_ffn_on_pim(hbm2):
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    systems = run_librapim(spec, hbm2, xpu, (64,) * 8, groups=2)  # 4 < 64 channels
    lib = systems["librapim"]
    assert [(d["case"], d["m"]) for d in lib.decisions] == [(DboCase.SMALL_BATCH, 4)] * 2
    assert lib.ops["pim_ffn"] > 0
    assert lib.ops["ffn1"] == lib.ops["ffn2"] == 0  # no FFN left on the xPU


def test_cli_refuses_a_context_beyond_the_window(capsys):
    rc, _, err = run_cli(capsys, "librapim", "--model", "gpt3-175b", "--context", "4096")
    assert rc == 2
    assert "--context 4096: allowed 1 to 2048" in err


def test_cli_workload_step_json(capsys):
    rc, out, err = run_cli(
        capsys,
        *("librapim", "--model", "llm-1.8b", "--batch", "8", "--workload", "alpaca"),
        *("--step", "5", "--seed", "3", "--json"),
    )
    assert (rc, err) == (0, "")
    report = json.loads(out)
    prompts = sample_context_lengths(load_workload("alpaca"), 8, seed=3)
    assert report["max_context"] == int(prompts.max()) + 5  # prompt + 5 generated tokens
    assert set(report["systems"]) == {"npu+aim", "pipelined", "librapim"}
    assert [d["case"] for d in report["systems"]["librapim"]["decisions"]] == ["small-batch"] * 2
