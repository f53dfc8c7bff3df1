"""LibraPIM end to end: presets, models, workload, the DBO adapters, the four systems'
steps and the Fig. 19 sweep (docs/librapim.md). Algorithm 1 itself: tests/test_dbo.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from pimphony.compiler.kernels import compile_kernel
from pimphony.compiler.llm import LayerOp, load_model
from pimphony.compiler.plan import layer_plan, tp_shapes
from pimphony.models.channel import run_channel
from pimphony.models.config import load_preset
from pimphony.models.dbo import DboCase
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.systems.base import SystemKind
from pimphony.sim.systems.hetero import HeteroSetup, run_hetero_decode
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.librapim import (
    LIBRAPIM_SPECS,
    BankAccess,
    Offload,
    OffloadReading,
    _flow,
    _Parts,
    _pipelined,
    dbo_model,
    dbo_throughput,
    format_librapim,
    measured_throughput,
    requests_per_pass,
    run_librapim,
    run_librapim_readings,
)
from pimphony.sim.systems.setup import DecodeError, DecodeSetup
from pimphony.sim.systems.step import attention_cycles
from pimphony.sim.workloads import (
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


def test_dbo_throughputs_scale_with_the_devices(hbm2):
    one = dbo_throughput(load_xpu("librapim-npu"), hbm2)
    eight = dbo_throughput(load_xpu("librapim-npu"), hbm2, tp=8)
    assert eight.xpu_flops == 8 * one.xpu_flops and eight.pim_flops == 8 * one.pim_flops
    assert eight.pim_channels == 64  # Channel_PIM is one device's


def test_registry_has_the_four_systems_of_6_1():
    assert list(LIBRAPIM_SPECS)[:4] == ["npu+aim", "attacc", "neupims", "librapim"]
    flags = {
        s: (r.serial, r.head_pipelining, r.ffn_coprocessing, r.offload, r.banks)
        for s, r in LIBRAPIM_SPECS.items()
    }
    x, sl, d = BankAccess.EXCLUSIVE, BankAccess.SLICED, BankAccess.DUAL
    assert flags == {
        SystemKind.NPU_AIM: (True, False, False, Offload.NONE, x),
        SystemKind.ATTACC: (True, True, True, Offload.NONE, x),
        SystemKind.NEUPIMS: (False, False, False, Offload.NONE, d),
        SystemKind.LIBRAPIM: (False, False, False, Offload.ALGORITHM_1, sl),
        SystemKind.LIBRAPIM_BEST: (False, False, False, Offload.BEST, sl),
        SystemKind.AIM_PIPELINED: (False, False, False, Offload.NONE, x),
        SystemKind.LIBRAPIM_NO_DBO: (False, False, False, Offload.NONE, sl),
        SystemKind.LIBRAPIM_MEASURED: (False, False, False, Offload.MEASURED, sl),
    }
    assert [s for s, r in LIBRAPIM_SPECS.items() if r.dbo] == ["librapim", "librapim-measured"]


def test_flow_is_a_stage_pipeline():
    assert _flow([[2, 3], [2, 3]]) == 2 + 3 + 3  # the second chunk waits for stage 1
    assert _flow([[5, 1], [5, 1], [5, 1]]) == 15 + 1  # stage 0 bound
    assert _flow([[1, 2, 3]]) == 6  # one chunk: serial


def test_npu_aim_and_neupims_are_the_hetero_steps_and_librapim_moves_attention(hbm2):
    """With one device and TCP, NPU+AiM and NeuPIMs must be exactly the existing serial and
    2-sub-batch xPU+PIM steps; with 2 PIM channels and 1024-token contexts PIM is the slower
    device, so each LibraPIM group moves attention to the xPU."""
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    hw = hbm2.replace(**{"module.channels": 2})  # B = 4 per group is not a "small batch"
    lengths = (1024,) * 8
    systems = run_librapim(spec, hw, xpu, lengths, groups=2, partitions=("tcp",))
    setup = DecodeSetup(spec, hw, lengths, check_capacity=False)
    assert systems["npu+aim"].cycles == run_hetero_decode(HeteroSetup(setup, xpu, 1)).cycles
    assert systems["neupims"].cycles == run_hetero_decode(HeteroSetup(setup, xpu, 2)).cycles
    lib = systems["librapim"]
    assert lib.group_sizes == [4, 4]
    assert lib.cycles < systems["neupims"].cycles  # moving attention helps here
    for d in lib.decisions:
        assert d["case"] == DboCase.LONGER_MHA and 1 <= d["n"] <= 4
    assert lib.ops["xpu_attention"] > 0 and "pim_ffn" not in lib.ops
    assert "longer-mha" in format_librapim(systems)


def test_attention_with_tp_devices_is_the_channel_model_of_one_device(hbm2):
    """Each of tp devices runs the attention of kv_heads / tp heads on its own 64 channels."""
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    cache = KernelCache(hbm2, "dcs", True)
    lengths = (256,) * 8
    for tp in (1, 4):
        parts = _Parts(spec, hbm2, xpu, tp, cache, ("hfp",))
        setup = DecodeSetup(spec, hbm2, lengths, tp=tp, partition="hfp", check_capacity=False)
        assert parts.attention(lengths) == attention_cycles(setup, lengths, cache)[1]
    # HFP places whole (request, head) pairs: 8 x 16 = 128 pairs on 64 channels take two
    # pair-kernels per channel, 8 x 4 = 32 pairs one: the busiest channel halves.
    full = sum(_Parts(spec, hbm2, xpu, 1, cache, ("hfp",)).attention(lengths).values())
    quarter = sum(_Parts(spec, hbm2, xpu, 4, cache, ("hfp",)).attention(lengths).values())
    assert quarter < full <= 2 * quarter + 64


def test_shared_weight_ffn_is_one_pass_per_bank_of_requests(hbm2):
    """Fig. 14 mode: each bank holds one request's inputs and the weight rows stream through
    the Global Buffer, so 1 to 16 requests cost one pass and 17 cost two."""
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    cache = KernelCache(hbm2, "dcs", True)
    parts = _Parts(spec, hbm2, xpu, 1, cache)
    one = parts.pim_ffn_shared(1)
    assert one == parts.pim_ffn_shared(16)
    assert 1.8 * one < parts.pim_ffn_shared(17) <= 2.2 * one
    # MAC bound, by hand: llm-1.8b's FFN1 (SwiGLU: 2 x 5504 rows of 2048) puts 172 weight
    # rows on the busiest of 64 channels, FFN2 (2048 rows of 5504) 32; every row costs
    # d_in / 16 all-bank MACs at tCCD = 2.
    assert tp_shapes(spec, 1)[LayerOp.FFN1] == (2 * 5504, 2048)
    macs = 172 * 2048 // 16 + 32 * 5504 // 16
    assert 2 * macs <= one <= 1.05 * 2 * macs


# llm-1.8b, tp 1: FFN1 11008 x 2048 (SwiGLU), FFN2 2048 x 5504; Table 2: 64 channels of 16
# banks of 16 MAC lanes, one all-bank MAC per tCCD = 2. All-bank MACs of one request's FFN:
# d_out x d_in / 16 lanes, over 16 banks.
_ONE_REQUEST_MACS = (11008 * 2048 + 2048 * 5504) // (16 * 16)  # 132,096


def test_offload_readings_price_a_pass_by_hand(hbm2):
    """The per-pass cost at m = 1, 16, 17, 64 under both readings (docs/librapim.md, "Offload
    readings"). Per bank: a pass of 16 requests issues every weight element once per
    channel (d_out x d_in / 16 all-bank MACs in all); per channel: a pass of 64 requests, each
    channel issuing its request's whole FFN (132,096 all-bank MACs)."""
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    cache = KernelCache(hbm2, "dcs", True)
    bank = _Parts(spec, hbm2, xpu, 1, cache)
    chan = _Parts(spec, hbm2, xpu, 1, cache, reading=OffloadReading.PER_CHANNEL)
    assert requests_per_pass(hbm2, OffloadReading.PER_BANK) == 16
    assert requests_per_pass(hbm2, OffloadReading.PER_CHANNEL) == 64
    # MAC commands: passes x one pass's; per channel, m x one request's.
    per_pass = 11008 * 2048 // 16 + 2048 * 5504 // 16  # 2,113,536
    for m, passes in ((1, 1), (16, 1), (17, 2), (64, 4)):
        assert bank.pim_ffn_shared_macs(m) == passes * per_pass
        assert chan.pim_ffn_shared_macs(m) == m * _ONE_REQUEST_MACS
    assert bank.pim_ffn_shared_macs(64) == chan.pim_ffn_shared_macs(64)  # same work, 64 requests
    # Per bank, cycles: the busiest channel holds 172 FFN1 rows and 32 FFN2 rows, each
    # d_in / 16 MACs at tCCD = 2 per pass.
    pass_bound = 2 * (172 * 2048 // 16 + 32 * 5504 // 16)  # 66,048
    one = bank.pim_ffn_shared(1)
    assert one == bank.pim_ffn_shared(16)
    assert pass_bound <= one <= 1.05 * pass_bound
    assert 2 * pass_bound <= bank.pim_ffn_shared(17) <= 1.06 * 2 * pass_bound
    assert 4 * pass_bound <= bank.pim_ffn_shared(64) <= 1.15 * 4 * pass_bound
    # Per channel: one pass whatever m <= 64, the AiM GEMV of one request over every channel's
    # share of the rows in turn (layer_plan's kernels of a batch of 1, summed over channels).
    whole = chan.pim_ffn_shared(1)
    assert [chan.pim_ffn_shared(m) for m in (16, 17, 64)] == [whole] * 3
    plan = layer_plan(spec, hbm2, (1,), 1)
    jobs = [j for op in (LayerOp.FFN1, LayerOp.FFN2) for js in plan.gemv[op] for j in js]
    assert whole == sum(cache.run(j).cycles for j in jobs)
    # MAC bound, plus tRP + tRCD at each all-bank row visit (a 1 KB row: 32 MACs per bank)
    mac_bound = 2 * _ONE_REQUEST_MACS  # 264,192
    t = hbm2.timing
    assert mac_bound + _ONE_REQUEST_MACS // 32 * (t.tRP + t.tRCD_MAC) <= whole <= 2 * mac_bound
    assert bank.pim_ffn_shared(64) < whole  # the per-channel pass is the dearer even when full


def test_per_channel_offload_changes_only_the_offloading_rows(hbm2):
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    lengths = (64,) * 8
    bank = run_librapim(spec, hbm2, xpu, lengths, groups=2)
    chan = run_librapim(spec, hbm2, xpu, lengths, groups=2, offload="per-channel")
    for s, row in LIBRAPIM_SPECS.items():  # librapim-best: m = 0 is fastest either way here
        assert (chan[s].cycles == bank[s].cycles) == (not row.dbo), s
    # Both readings in one call share the simulated parts, not the offload's price.
    both = run_librapim_readings(spec, hbm2, xpu, lengths, 2, readings=tuple(OffloadReading))
    for reading, alone in ((OffloadReading.PER_BANK, bank), (OffloadReading.PER_CHANNEL, chan)):
        for s in LIBRAPIM_SPECS:
            assert (both[reading][s].cycles, both[reading][s].ops) == (
                alone[s].cycles, alone[s].ops,
            ), (reading, s)  # fmt: skip
    lib = chan["librapim"]  # small batch: both groups' 4 requests on PIM, one pass each
    assert [(d["case"], d["m"]) for d in lib.decisions] == [(DboCase.SMALL_BATCH, 4)] * 2
    cache = KernelCache(hbm2, "dcs", True)
    parts = _Parts(spec, hbm2, xpu, 1, cache, reading=OffloadReading.PER_CHANNEL)
    ffn = [math.ceil(parts.pim_ffn_shared(4) * d["dex_stretch"]) for d in lib.decisions]
    assert lib.ops["pim_ffn"] == spec.layers * sum(ffn)
    # measured rates: PIM's FFN rate is a full pass of 64 requests over its time
    thr = measured_throughput(parts, lengths)
    assert thr.pim_ffn_flops == pytest.approx(parts.ffn_flops(64) * 1e9 / parts.pim_ffn_shared(64))
    with pytest.raises(DecodeError, match=r"offload reading 'per-row' is unknown; allowed: "):
        run_librapim(spec, hbm2, xpu, lengths, offload="per-row")


def test_attacc_coprocessing_split_is_the_best_integer(hbm2):
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    systems = run_librapim(spec, hbm2, xpu, (64,) * 8, systems=("attacc",))
    d = systems["attacc"].decisions[0]
    parts = _Parts(spec, hbm2, xpu, 1, KernelCache(hbm2, "dcs", True))
    cost = [max(parts.pim_ffn(m), parts.xpu_ffn(8 - m)) for m in range(9)]
    assert d["m"] == cost.index(min(cost))
    assert d["chunks"] == spec.kv_heads  # head-level pipelining over the device's KV heads


def test_small_batch_groups_run_their_ffn_on_pim(hbm2):
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    systems = run_librapim(spec, hbm2, xpu, (64,) * 8, groups=2)  # 4 < 64 channels
    lib = systems["librapim"]
    assert [(d["case"], d["m"]) for d in lib.decisions] == [(DboCase.SMALL_BATCH, 4)] * 2
    parts = _Parts(spec, hbm2, xpu, 1, KernelCache(hbm2, "dcs", True))
    # DEX: the offloaded FFN stretches by the bank-slice TLM's factor at the xPU's read load
    ffn = [math.ceil(parts.pim_ffn_shared(4) * d["dex_stretch"]) for d in lib.decisions]
    assert lib.ops["pim_ffn"] == spec.layers * sum(ffn)
    assert lib.ops["ffn1"] == lib.ops["ffn2"] == 0  # no FFN left on the xPU


def test_best_offload_is_never_slower_than_no_offload(hbm2):
    """m = 0 (no offload, DEX banks) is one of librapim-best's candidates: 0, 16, 32 at
    groups of 32."""
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    lengths = (512,) * 64
    best = run_librapim(spec, hbm2, xpu, lengths, systems=("librapim-best",))["librapim-best"]
    cache = KernelCache(hbm2, "dcs", True, dpa=True, dpa_max_tokens=512)
    parts = _Parts(spec, hbm2, xpu, 1, cache)
    for m in (0, 16, 32):
        assert best.cycles <= _pipelined("x", parts, lengths, 2, Offload.NONE, m, True).cycles
    assert {d["case"] for d in best.decisions} == {"best-offload"}
    assert best.decisions[0]["m"] in (0, 16, 32)


def test_bad_inputs_are_specific_errors(hbm2):
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    with pytest.raises(DecodeError, match=r"batch = 0: give at least one request"):
        run_librapim(spec, hbm2, xpu, ())
    w = spec.context_window
    with pytest.raises(DecodeError, match=rf"context {w + 1}: beyond .* window; allowed 1 to {w}$"):
        run_librapim(spec, hbm2, xpu, (w + 1,), groups=1)
    with pytest.raises(DecodeError, match=r"system 'tpu' is unknown; allowed: npu\+aim, attacc"):
        run_librapim(spec, hbm2, xpu, (8,), groups=1, systems=("tpu",))
    with pytest.raises(DecodeError, match=r"tp = 3: must be a positive divisor of .* \(16\)"):
        run_librapim(spec, hbm2, xpu, (8,), groups=1, tp=3)
    with pytest.raises(DecodeError, match=r"groups = 9: must be an integer from 1 to the batch"):
        run_librapim(spec, hbm2, xpu, (8,) * 8, groups=9)


def test_cli_refuses_a_context_beyond_the_window(capsys):
    rc, _, err = run_cli(capsys, "librapim", "--model", "gpt3-175b", "--context", "4096")
    assert rc == 2
    assert "--context 4096: allowed 1 to 2048" in err
    rc, _, err = run_cli(capsys, "librapim", "--system", "tpu")
    assert rc == 2 and "invalid choice: 'tpu'" in err


def test_cli_workload_step_json(capsys):
    rc, out, err = run_cli(
        capsys,
        *("librapim", "--model", "llm-1.8b", "--batch", "8", "--workload", "alpaca"),
        *("--step", "5", "--seed", "3", "--tp", "1", "--json"),
    )
    assert (rc, err) == (0, "")
    report = json.loads(out)
    prompts = sample_context_lengths(load_workload("alpaca"), 8, seed=3)
    assert report["max_context"] == int(prompts.max()) + 5  # prompt + 5 generated tokens
    assert set(report["systems"]) == set(LIBRAPIM_SPECS)
    assert [d["case"] for d in report["systems"]["librapim"]["decisions"]] == ["small-batch"] * 2


def test_fig19_tiny_grid(capsys, tmp_path):
    paths = {k: tmp_path / f"f.{k}" for k in ("json", "csv", "png")}
    rc, out, err = run_cli(
        capsys,
        *("librapim-fig19", "--models", "llm-1.8b", "--batches", "4,8", "--contexts", "64"),
        *("--tp", "1", "--report", str(paths["json"]), "--csv", str(paths["csv"])),
        *("--plot", str(paths["png"])),
    )
    assert (rc, err) == (0, "")
    doc = json.loads(paths["json"].read_text())
    assert [(r["batch"], r["context"]) for r in doc["rows"]] == [(4, 64), (8, 64)]
    for r in doc["rows"]:
        assert r["npu+aim_speedup"] == 1.0
        assert r["librapim_speedup"] == pytest.approx(r["npu+aim_ms"] / r["librapim_ms"])
    lib = [r["librapim_speedup"] for r in doc["rows"]]
    assert doc["means"]["all"]["librapim"]["mean"] == pytest.approx(sum(lib) / 2)
    csv_lines = paths["csv"].read_text().splitlines()
    assert csv_lines[0].startswith("model,batch,context,npu+aim_ms") and len(csv_lines) == 3
    assert paths["png"].stat().st_size > 0
    assert "librapim" in out
    rc, _, err = run_cli(capsys, "librapim-fig19", "--models", "llm-1.8b", "--contexts", "0")
    assert rc == 2 and "every value must be >= 1" in err
    rc, _, err = run_cli(
        capsys, "librapim-fig19", "--models", "gpt3-175b", "--batches", "4", "--contexts", "4096",
        "--report", str(paths["json"]),
    )  # fmt: skip
    assert rc != 0 and "exists; pass --force" in err


def test_paper_ordering_where_our_model_reproduces_it():
    """Llama3-70B, B = 128, L = 1024 on 8 devices is one of the four Fig. 19 points where our
    model gives the paper's LibraPIM >= NeuPIMs >= AttAcc >= NPU+AiM (docs/librapim.md)."""
    systems = run_librapim(
        load_model("llama-3.1-70b"),
        load_preset("librapim-hbm2"),
        load_xpu("librapim-npu"),
        (1024,) * 128,
        tp=8,
        systems=("npu+aim", "attacc", "neupims", "librapim"),
    )
    c = {k: v.cycles for k, v in systems.items()}
    assert c["librapim"] <= c["neupims"] <= c["attacc"] <= c["npu+aim"]
    assert [d["case"] for d in systems["librapim"].decisions] == ["longer-ffn"] * 2


def test_dex_stretch_comes_from_the_bank_slice_tlm(hbm2):
    """Sliced banks: MACs and the xPU's weight reads proceed together (the PIM head issues
    first, reads use the other partition); exclusive banks: MACs pause while any read is
    pending, so a window of steady reads as long as the kernel doubles its time."""
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    parts = _Parts(spec, hbm2, xpu, 1, KernelCache(hbm2, "dcs", True))
    assert parts.dex_stretch(256, 0.0, False) == 1.0
    for load in (0.2, 0.85):
        assert 1.0 <= parts.dex_stretch(256, load, True) < 1.03
        assert 1.9 < parts.dex_stretch(256, load, False) < 2.2


def test_slice_mode_changes_the_librapim_step_as_the_channel_model_predicts(hbm2):
    spec, xpu = load_model("llm-1.8b"), load_xpu("librapim-npu")
    hw = hbm2.replace(**{"module.channels": 2})
    lengths = (1024,) * 8
    runs = {
        sliced: run_librapim(spec, hw, xpu, lengths, systems=("librapim",), slicing=sliced)[
            "librapim"
        ]
        for sliced in (True, False)
    }
    parts = _Parts(spec, hw, xpu, 1, KernelCache(hw, "dcs", True, dpa=True, dpa_max_tokens=1024))
    for sliced, run in runs.items():
        qk = 0
        for d in run.decisions:
            assert d["sliced"] is sliced
            assert d["dex_stretch"] == parts.dex_stretch(1024, d["xpu_read_load"], sliced)
            on_pim = (1024,) * (d["batch"] - d["n"])
            qk += math.ceil(parts.attention(on_pim)["qk"] * d["dex_stretch"])
        assert run.ops["qk"] == spec.layers * qk
    assert runs[False].cycles > runs[True].cycles  # exclusive banks: PIM twice as slow
    assert runs[False].ops["qk"] > 1.8 * runs[True].ops["qk"]


@pytest.mark.parametrize("command", ["librapim-fig19", "librapim-energy"])
@pytest.mark.parametrize(
    "option, value, message",
    [  # the fuzzer's (issue 34): a ValueError / IndexError, a MemoryError, a grid of 10^12
        ("--models", "", "--models is empty"),
        ("--batches", "1000000000000", "--batches: 1000000000000 is outside 1 to 4,096"),
        ("--groups", "1000000000000", "--groups: 1000000000000 is outside 1 to 4,096"),
        ("--tp", "0", "--tp: 0 is outside 1 to 1,024"),
    ],
)
def test_fig19_and_fig22_refuse_bad_grids(capsys, command, option, value, message):
    rc, _, err = run_cli(capsys, command, option, value)
    assert rc == 2 and message in err and "internal error" not in err, err
