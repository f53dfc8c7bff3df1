"""The heterogeneous xPU+PIM decode step (``sim/systems/hetero.py``, issue 14
deliverable 3): the pipeline schedule by hand, serial composition, bounds, reuse of the PIM
attention model, and refusals."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import pytest
from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.xpu import VectorOp, gemm_cost, ring_allreduce_seconds, vector_cost
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.provenance import inputs_digest
from pimphony.sim.systems import report as step_report
from pimphony.sim.systems.admission import fill_batch
from pimphony.sim.systems.hetero import (
    HeteroCycles,
    HeteroSetup,
    hetero_setup_digest,
    pipeline_cycles,
    pipeline_schedule,
    run_hetero_decode,
    sub_batch_candidates,
)
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.registry import ServingCaches
from pimphony.sim.systems.setup import DecodeError, DecodeSetup
from pimphony.sim.systems.step import attention_cycles, layer_timing

from tests.helpers import figure_labels, run_cli

LLM7B = load_model("llm-7b")
NEUPIMS = load_preset("pimphony-neupims")
NPU = load_xpu("neupims-npu")
LENGTHS = (2048, 1024, 3072, 512)


def _setup(k: int, lengths=LENGTHS, **kw) -> HeteroSetup:
    return HeteroSetup(DecodeSetup(LLM7B, NEUPIMS, lengths, **kw), NPU, k)


def test_two_sub_batch_pipeline_by_hand():
    """One layer, two sub-batches: xPU tasks X0 = 3, X1 = 2 cycles; Q/K/V in 1; attention 5;
    out 1 (the same for both sub-batches).

    xPU:  X0.0 [0,3)  X0.1 [3,6)  X1.0 [10,12)  X1.1 [15,17)
    in:   in0.0 [3,4)  in0.1 [6,7)
    PIM:  A0.0 [4,9)  A0.1 [9,14)
    out:  out0.0 [9,10)  out0.1 [14,15)
    step 17; xPU busy 10, idle 7; PIM busy 10, idle 7; serial 3+2+1+5+1 = 12 per sub-batch.
    """
    x = [[[("qkv", 3)], [("ffn1", 2)]]] * 2
    a = [[[("qk", 5)]]] * 2
    tl = pipeline_schedule(x, [[[("qkv_transfer", 1)]]] * 2, a, [[1]] * 2)
    starts = {d: [t[0] for t in tl.tasks[d]] for d in tl.tasks}
    assert starts == {"xpu": [0, 3, 10, 15], "to_pim": [3, 6], "pim": [4, 9], "to_xpu": [9, 14]}
    assert tl.cycles == 17
    assert (tl.busy("xpu"), tl.cycles - tl.busy("xpu")) == (10, 7)
    assert (tl.busy("pim"), tl.cycles - tl.busy("pim")) == (10, 7)
    serial = sum(tl.busy(d) for d in tl.tasks)
    assert serial == 24 and max(tl.busy("xpu"), tl.busy("pim")) <= tl.cycles <= serial


def test_one_sub_batch_is_a_chain():
    x = [[[("qkv", 3)], [("proj", 4), ("qkv", 3)], [("ffn2", 2)]]]
    into = [[[("qkv_transfer", 1)], [("cmd_transfer", 1), ("qkv_transfer", 1)]]]
    tl = pipeline_schedule(x, into, [[[("qk", 5)], [("sv", 6)]]], [[1, 1]])
    assert tl.cycles == 3 + 1 + 5 + 1 + 7 + 2 + 6 + 1 + 2


@pytest.fixture(scope="module")
def reports():
    return {k: run_hetero_decode(_setup(k, partition="tcp")) for k in (1, 2, 4)}


def test_serial_step_is_the_exact_sum(reports):
    r = reports[1]
    d = r.devices
    xpu, pim = d["xpu"]["busy_cycles"], d["pim"]["busy_cycles"]
    links = d["to_pim"]["busy_cycles"] + d["to_xpu"]["busy_cycles"]
    assert r.cycles == r.serial_cycles == xpu + pim + links
    assert sum(r.ops.values()) == r.cycles
    assert r.tokens_per_s == pytest.approx(len(LENGTHS) / r.step_seconds)


@pytest.mark.parametrize("k", [2, 4])
def test_pipelined_bounds(reports, k):
    r = reports[k]
    d = r.devices
    assert max(d["xpu"]["busy_cycles"], d["pim"]["busy_cycles"]) <= r.cycles <= r.serial_cycles
    for dev in d.values():
        assert dev["busy_cycles"] + dev["idle_cycles"] == r.cycles
        assert dev["utilization"] == pytest.approx(dev["busy_cycles"] / r.cycles)
    assert r.sub_batch_sizes == [len(LENGTHS) // k] * k


def test_attention_is_the_pim_models(reports):
    """The PIM side's attention equals the PIM-only step's QK^T + softmax + SV cycles."""
    setup = DecodeSetup(LLM7B, NEUPIMS, LENGTHS, partition="tcp")
    cache = KernelCache(NEUPIMS, "dcs", True, dpa=True, dpa_max_tokens=max(LENGTHS))
    lt = layer_timing(setup, LENGTHS, cache)
    partition, att, commands = attention_cycles(setup, LENGTHS, cache)
    assert (partition, commands) == ("tcp", 0)
    assert att == {k: lt.cycles[k] for k in ("qk", "sv", "softmax")}
    r = reports[1]
    assert r.ops["qk"] + r.ops["sv"] + r.ops["softmax"] == LLM7B.layers * sum(att.values())


def test_xpu_fc_is_the_cost_model(reports):
    """QKV on the xPU: a (batch x hidden) by (hidden x qkv_dim) GEMM per layer."""
    cost = gemm_cost(NPU, len(LENGTHS), LLM7B.hidden, LLM7B.qkv_dim)
    assert reports[1].ops["qkv"] == LLM7B.layers * math.ceil(cost.seconds * 1e9)


def test_transfer_bytes(reports):
    e, h, d = LLM7B.element_bytes, LLM7B.heads, LLM7B.head_dim
    link = reports[1].link
    assert link["to_pim_bytes"] == LLM7B.layers * len(LENGTHS) * (h + 2 * LLM7B.kv_heads) * d * e
    assert link["to_xpu_bytes"] == LLM7B.layers * len(LENGTHS) * h * d * e
    # 64 GB/s at 1 GHz: ceil(bytes / 64) cycles per transfer.
    per = math.ceil(len(LENGTHS) * (h + 2 * LLM7B.kv_heads) * d * e / 64)
    assert reports[1].ops["qkv_transfer"] == LLM7B.layers * per


@pytest.mark.parametrize(
    ("k", "message"),
    [
        (0, "--sub-batches 0: must be a positive integer"),
        (-1, "--sub-batches -1: must be a positive integer"),
        (5, "--sub-batches 5 exceeds the batch of 4 request(s)"),
    ],
)
def test_refuses_bad_sub_batches(k, message):
    with pytest.raises(DecodeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _setup(k)


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        (1, [1]),
        (4, [1, 2, 3, 4]),
        (8, [1, 2, 3, 4, 5, 6, 7, 8]),
        (9, [1, 2, 3, 4, 5, 6, 7, 8, 9]),
        (16, [1, 2, 3, 4, 5, 6, 7, 8, 16]),
        (40, [1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 40]),
        (64, [1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64]),
    ],
)
def test_sub_batch_candidates(batch, expected):
    assert sub_batch_candidates(batch) == expected


def test_auto_sub_batches_is_the_fastest_tried(reports):
    """auto times K = 1..4 (the batch of 4), returns the fewest cycles, and its search lists
    the fixed-K runs' cycles exactly."""
    auto = run_hetero_decode(_setup("auto", partition="tcp"))
    search = auto.sub_batch_search
    assert list(search["cycles"]) == ["1", "2", "3", "4"]
    for k in (1, 2, 4):
        assert search["cycles"][str(k)] == reports[k].cycles
        assert auto.cycles <= reports[k].cycles
    assert auto.cycles == min(search["cycles"].values())
    assert (
        auto.sub_batches == search["chosen"] == int(min(search["cycles"], key=search["cycles"].get))
    )
    assert reports[1].sub_batch_search == {}


def test_auto_picks_a_pipelined_k_when_it_pays():
    """docs/decode.md's case: Llama-3.1-8B, 16 requests at 128K on 8 modules, an H100 as the
    xPU: K = 2 beats serial by ~1.4x, so auto must not stay at K = 1."""
    spec = load_model("llama-3.1-8b")
    pim = DecodeSetup(spec, NEUPIMS, (131072,) * 16, tp=8, check_capacity=False)
    auto = run_hetero_decode(HeteroSetup(pim, load_xpu("h100-sxm"), "auto"))
    cycles = auto.sub_batch_search["cycles"]
    assert auto.sub_batches > 1
    assert auto.cycles < cycles["1"] / 1.2
    assert auto.cycles == min(cycles.values())


def test_refuses_weights_beyond_the_xpu():
    with pytest.raises(DecodeError, match="the weights do not fit the xPU: llm-72b weights"):
        HeteroSetup(DecodeSetup(load_model("llm-72b"), NEUPIMS, (1024,), tp=8), NPU, 1)


def test_refuses_kv_beyond_pim():
    with pytest.raises(DecodeError, match="holding llm-7b's KV cache only"):
        run_hetero_decode(_setup(1, lengths=(32768,) * 4))


def test_cli_json(capsys, tmp_path):
    code, out, err = run_cli(
        capsys,
        *("decode", "--system", "xpu+pim", "--preset", "pimphony-neupims", "--partition", "tcp"),
        *("--context", "1024", "--batch", "2", "--sub-batches", "2", "--json"),
        *("--report", tmp_path / "r.json", "--plot", tmp_path / "r.png"),
    )
    assert code == 0, err
    r = json.loads(out)
    assert r["xpu"] == "neupims-npu" and r["sub_batches"] == 2
    assert r["cycles"] <= r["serial_cycles"]
    assert (tmp_path / "r.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--sub-batches", "0"), "--sub-batches 0: must be a positive integer"),
        (("--sub-batches", "3"), "--sub-batches 3 exceeds the batch of 2"),
        (("--sub-batches", "3"), "(allowed: 1 to 2, or 'auto')"),
        (("--sub-batches", "1.5"), "--sub-batches '1.5': must be a positive integer"),
        (("--sub-batches", "two"), "--sub-batches 'two': must be a positive integer (1: serial)"),
        (("--sub-batches", "Auto"), "up to the batch, or 'auto'"),
        (("--micro-batches", "2"), "--system xpu+pim does not use --micro-batches"),
        (("--gpu-memory-fraction", "0.5"), "does not use --gpu-memory-fraction (--system gpu)"),
        (("--model", "llm-72b", "--tp", "8"), "the weights do not fit the xPU"),
    ],
)
def test_cli_refusals(capsys, tmp_path, argv, message):
    code, out, err = run_cli(
        capsys,
        *("decode", "--system", "xpu+pim", "--context", "1024", "--batch", "2", *argv),
        *("--report", tmp_path / "r.json", "--plot", tmp_path / "r.png"),
    )
    assert code != 0 and out == ""
    assert message in err


@pytest.mark.parametrize("k", ["2", "auto"])
def test_pim_system_refuses_xpu_options(capsys, k):
    code, _, err = run_cli(capsys, "decode", "--context", "1024", "--sub-batches", k)
    assert code == 2 and "--sub-batches (--system xpu+pim)" in err


def test_kv_only_admission_holds_more():
    """Without the weights a 32 GiB module holds two 16 GiB LLM-7B requests at 32K, not one."""
    pool = [32768] * 8
    assert len(fill_batch(LLM7B, NEUPIMS, 1, "lazy", pool)) == 1
    assert len(fill_batch(LLM7B, NEUPIMS, 1, "lazy", pool, weights=False)) == 2


def test_cli_modules_must_equal_tp(capsys, tmp_path):
    code, _, err = run_cli(
        capsys,
        *("decode", "--system", "xpu+pim", "--context", "1024", "--modules", "2"),
        *("--report", tmp_path / "r.json", "--plot", tmp_path / "r.png"),
    )
    assert code != 0 and "--modules 2 must equal --tp x --pp = 1 x 1 = 1" in err


def test_timeline_plot_labels(reports, tmp_path, monkeypatch):
    """The timeline has a title, axes with units, a legend of ops and one row per device."""
    import pimphony.sim.systems.hetero as hetero

    seen = figure_labels(monkeypatch, hetero)
    hetero.plot_hetero_report(reports[2], tmp_path / "t.png")
    assert "2 sub-batches" in seen["title"] and "tokens/s" in seen["title"]
    assert seen["x"].endswith("(us)")
    assert seen["rows"] == ["link PIM->xPU", "PIM", "link xPU->PIM", "xPU"]
    assert seen["legend"][0] == "QKV GEMM" and "QK^T (PIM)" in seen["legend"]


def test_bench_llm72b_128k_under_a_second():
    """``make bench``'s GPU and xPU+PIM decode steps of LLM-72B @ 128K."""
    from pimphony.sim.experiments.bench import bench_hetero_decode

    rows = bench_hetero_decode()
    assert [r["case"].split(",")[-1].split(" ")[-1] for r in rows] == ["GPU", "K=1", "K=2"]
    assert [r["batch"] for r in rows] == [4, 4, 4]
    assert all(0 < r["wall_seconds"] < float("inf") for r in rows)  # the figure: make bench


def test_static_memory_sends_the_attention_commands():
    """Static memory: the host sends each layer's unrolled attention streams over the PIM
    link, the PIM-only step's ``cmd_transfer`` cycles."""
    lengths = (1024, 512)
    setup = DecodeSetup(LLM7B, NEUPIMS, lengths, partition="tcp", memory="static")
    cache = KernelCache(NEUPIMS, "dcs", True, dpa=False, dpa_max_tokens=max(lengths))
    lt = layer_timing(setup, lengths, cache)
    _, att, commands = attention_cycles(setup, lengths, cache)
    assert att == {k: lt.cycles[k] for k in ("qk", "sv", "softmax")}
    assert commands == lt.cycles["cmd_transfer"] > 0
    r = run_hetero_decode(HeteroSetup(setup, NPU, 1))
    assert r.ops["cmd_transfer"] == LLM7B.layers * commands
    assert r.cycles == sum(d["busy_cycles"] for d in r.devices.values())


# ---- several xPUs, pipeline stages on PIM (LoL-PIM 8.1's GPU+PIM) ----------------------------

GDDR6_GPU = load_xpu("lolpim-gpu-gddr6")
LOLPIM_IO = load_preset("lolpim-aimx-io")
SMALL = (2048, 1024)


def _gpu_pim(pp: int, **kw) -> HeteroSetup:
    pim = DecodeSetup(
        LLM7B, LOLPIM_IO, SMALL, tp=4, pp=pp, partition="itpp", sched="pingpong", memory="lazy"
    )
    return HeteroSetup(pim, GDDR6_GPU, 1, **kw)


def test_gpu_pim_step_by_hand():
    """Serial GPU+PIM step, 2 GPUs and 4 x 2 LoL-PIM modules: the GPU FC and vector time of
    one of 2 tensor-parallel GPUs (each op ceil(seconds x 1 GHz) cycles) plus the two ring
    all-reduces, plus the PIM attention of 4 modules, plus the Q/K/V and output transfers
    (each module's share over its 64 GB/s host link at 1 GHz), all times the layers."""
    setup = _gpu_pim(2, xpus=2)
    r = run_hetero_decode(setup)
    f, n, b, e = 1e9 * LOLPIM_IO.module.freq_ghz, 2, len(SMALL), LLM7B.element_bytes
    assert f == 1e9 and LOLPIM_IO.module.host_link_gbps == 64

    def cyc(seconds: float) -> int:
        return math.ceil(seconds * f)

    h, hd, i = LLM7B.hidden, LLM7B.head_dim, LLM7B.intermediate
    fc = sum(
        cyc(gemm_cost(GDDR6_GPU, b, d_in, d_out).seconds)
        for d_in, d_out in (
            (h, LLM7B.qkv_dim // n),
            (h // n, h),
            (h, LLM7B.ffn1_dim // n),
            (i // n, h),
        )
    )
    vec = 2 * cyc(vector_cost(GDDR6_GPU, VectorOp.NORM, b * h).seconds)
    vec += 2 * cyc(vector_cost(GDDR6_GPU, VectorOp.RESIDUAL, b * h).seconds)
    vec += cyc(vector_cost(GDDR6_GPU, LLM7B.activation, b * i // n).seconds)
    reduce = 2 * cyc(ring_allreduce_seconds(GDDR6_GPU, b * h * e, n))
    cache = KernelCache(LOLPIM_IO, "pingpong", True, dpa=True, dpa_max_tokens=max(SMALL))
    _, att, commands = attention_cycles(setup.pim, SMALL, cache)
    assert commands == 0  # lazy memory: DPA sends no attention commands
    to_pim = math.ceil(b * (LLM7B.heads + 2 * LLM7B.kv_heads) * hd * e / 4 / 64)
    to_xpu = math.ceil(b * LLM7B.heads * hd * e / 4 / 64)
    layer = fc + vec + reduce + sum(att.values()) + to_pim + to_xpu
    assert r.cycles == r.serial_cycles == LLM7B.layers * layer
    assert r.ops["allreduce"] == LLM7B.layers * reduce
    assert (r.xpus, r.tp, r.pp) == (2, 4, 2)


def test_pim_stages_hold_more_kv_and_time_attention_on_tp():
    """pp 2 spreads the KV cache over twice the modules; each layer's attention still runs on
    ``tp`` of them, so the step's cycles are pp 1's."""
    one, two = run_hetero_decode(_gpu_pim(1)), run_hetero_decode(_gpu_pim(2))
    assert two.cycles == one.cycles
    kv = {r.pp: r.memory_detail["kv_capacity_bytes"] for r in (one, two)}
    assert kv[2] == 2 * kv[1]
    assert one.ops["allreduce"] == 0


def test_one_xpu_keeps_its_digest():
    """xpus 1 leaves the digest (and so the report names) as before xpus existed."""
    one = hetero_setup_digest(_gpu_pim(1))
    assert one == inputs_digest(
        step_report.digest_inputs(_gpu_pim(1).pim, xpu=GDDR6_GPU, sub_batches=1)
    )
    assert hetero_setup_digest(_gpu_pim(1, xpus=2)) != one


def test_refuses_weights_beyond_the_xpus():
    pim = DecodeSetup(load_model("llm-72b"), LOLPIM_IO, (1024,), tp=8)
    with pytest.raises(DecodeError, match="> 2 x lolpim-gpu-gddr6 memory 64 GiB; .* more xPUs"):
        HeteroSetup(pim, GDDR6_GPU, 1, xpus=2)
    assert HeteroSetup(pim, GDDR6_GPU, 1, xpus=3).xpus == 3


def test_pipeline_cycles_is_the_schedules():
    """Random task lengths: :func:`pipeline_cycles` ends where :func:`pipeline_schedule`
    does."""
    rng = random.Random(7)
    for _ in range(300):
        k, layers = rng.randint(1, 4), rng.randint(1, 4)
        pre = [rng.randint(0, 9) for _ in range(k)]
        post = [rng.randint(0, 9) for _ in range(k)]
        into, att, out = ([rng.randint(0, 9) for _ in range(k)] for _ in range(3))
        x = [
            [[("qkv", pre[s])]] + [[("proj", post[s]), ("qkv", pre[s])]] * (layers - 1)
            + [[("ffn2", post[s])]]
            for s in range(k)
        ]  # fmt: skip
        tl = pipeline_schedule(
            x,
            [[[("qkv_transfer", into[s])]] * layers for s in range(k)],
            [[[("qk", att[s])]] * layers for s in range(k)],
            [[out[s]] * layers for s in range(k)],
        )
        xpu = [(pre[s], post[s] + pre[s], post[s]) for s in range(k)]
        assert pipeline_cycles(xpu, into, att, out, layers) == tl.cycles


@pytest.mark.parametrize(
    ("k", "options"),
    [
        (1, {"partition": "auto"}),
        (2, {"partition": "tcp", "memory": "static", "max_context": 4096}),
        ("auto", {"partition": "hfp", "pp": 2}),
    ],
)
def test_hetero_cycles_equal_run_hetero_decode(k, options):
    """Random batches on one :class:`HeteroCycles` (kernels shared through ServingCaches)
    against a fresh ``run_hetero_decode`` each: the same cycles."""
    base = _setup(k, (4096, 4096), **options)
    fast = HeteroCycles(base, ServingCaches())
    rng = random.Random(f"hetero-{k}")
    for _ in range(3):
        lengths = tuple(rng.randint(1, 4096) for _ in range(rng.randint(2, 5)))
        setup = dataclasses.replace(base, pim=dataclasses.replace(base.pim, lengths=lengths))
        assert fast.cycles(lengths) == run_hetero_decode(setup).cycles, lengths
    if k == 2:
        with pytest.raises(DecodeError, match="--sub-batches 2 exceeds the batch of 1 request"):
            fast.cycles((100,))
