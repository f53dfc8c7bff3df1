"""The serving loop (sim/serving/): traces, admission, preemption, exactness against the decode
step, latencies computed by hand, the ``pimphony serve`` command."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from pimphony.compiler.plan import layer_plan
from pimphony.models.errors import PimphonyError
from pimphony.models.hub import epu_cycles
from pimphony.models.memory import OutOfMemory
from pimphony.models.system import stage_hop_cycles
from pimphony.sim.serving.engine import ServeConfig, ServeError, serve
from pimphony.sim.serving.report import metrics
from pimphony.sim.serving.trace import Request, TraceError, read_trace, workload_requests
from pimphony.sim.systems.cycles import gemv_op
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.registry import make_system, pim_prefill_cycles
from pimphony.sim.systems.setup import DecodeSetup
from pimphony.sim.systems.step import epu_other_flops, run_decode

from tests.helpers import run_cli
from tests.test_decode_step import TINY


@pytest.fixture(scope="module")
def small(cfg):
    # 32 rows per bank: one 16 MiB module; TINY's weights (11,796,480 B) leave 4 KV chunks of
    # 1 MiB, each 341.3 tokens of TINY's 3,072 B/token.
    return cfg.replace(**{"channel.rows_per_bank": 32})


def _step_s(hw, lengths, memory="lazy", **kw) -> float:
    """One decode step in seconds, from the function ``pimphony decode`` uses."""
    setup = DecodeSetup(TINY, hw, tuple(lengths), partition="tcp", memory=memory, **kw)
    return run_decode(setup).cycles / (hw.module.freq_ghz * 1e9)


# --------------------------------------------------------------------------- traces


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        (
            '{"arrival_s": -1, "input_tokens": 5, "output_tokens": 2}\n',
            ".jsonl",
            r"line 1: arrival_s = -1: allowed 0 to 1e\+06 s \(the serving horizon",
        ),
        (
            '{"arrival_s": 1e300, "input_tokens": 5, "output_tokens": 2}\n',
            ".jsonl",
            r"line 1: arrival_s = 1e\+300: allowed 0 to 1e\+06 s \(the serving horizon",
        ),
        (
            '{"arrival_s": 2, "input_tokens": 5, "output_tokens": 2}\n'
            '{"arrival_s": 1, "input_tokens": 5, "output_tokens": 2}\n',
            ".jsonl",
            r"line 2: arrival_s = 1.0 is earlier than the previous request's 2.0",
        ),
        (
            '{"arrival_s": 0, "input_tokens": 5, "output_tokens": 0}\n',
            ".jsonl",
            r"line 1: output_tokens = 0 must be >= 1 token",
        ),
        (
            '{"arrival_s": 0, "input_tokens": 5, "output_tokens": 2, "prio": 1}\n',
            ".jsonl",
            r"line 1: unknown field\(s\) 'prio'",
        ),
        (
            '{"arrival_s": 0, "input_tokens": 5}\n',
            ".jsonl",
            r"line 1: missing field\(s\) 'output_tokens'",
        ),
        (
            '{"arrival_s": 0, "input_tokens": 2.5, "output_tokens": 2}\n',
            ".jsonl",
            r"line 1: input_tokens = 2.5 is not an integer",
        ),
        (
            "arrival_s,input_tokens,output_tokens,user\n0,5,2,x\n",
            ".csv",
            r"line 1 \(header\): unknown field\(s\) 'user'",
        ),
        ("arrival_s,input_tokens\n0,5\n", ".csv", r"missing field\(s\) 'output_tokens'"),
        (
            "arrival_s,input_tokens,output_tokens\n0,5,2\n0.5,x,2\n",
            ".csv",
            r"line 3: input_tokens = 'x' is not an integer",
        ),
        (
            "arrival_s,input_tokens,output_tokens\n0,5\n",
            ".csv",
            r"line 2: 2 field\(s\), the header names 3",
        ),
        ("", ".jsonl", "no requests"),
        ("[1, 2]\n", ".jsonl", "line 1: expected a JSON object, got list"),
    ],
)
def test_bad_traces_name_line_and_field(tmp_path, text, suffix, message):
    path = tmp_path / f"t{suffix}"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        read_trace(path)


def test_trace_formats_agree(tmp_path):
    rows = [(0.0, 100, 3), (0.25, 20, 1), (0.25, 7, 9)]
    jl = tmp_path / "t.jsonl"
    jl.write_text(
        "".join(
            json.dumps({"arrival_s": a, "input_tokens": i, "output_tokens": o}) + "\n\n"
            for a, i, o in rows
        )
    )
    cs = tmp_path / "t.csv"
    cs.write_text(
        "arrival_s,input_tokens,output_tokens\n" + "".join(f"{a},{i},{o}\n" for a, i, o in rows)
    )
    want = [Request(k, *r) for k, r in enumerate(rows)]
    assert read_trace(jl) == read_trace(cs) == want


def test_poisson_arrivals():
    reqs = workload_requests("qmsum", 4000, 8, rate=5.0, seed=3)
    gaps = np.diff([r.arrival_s for r in reqs])
    assert reqs[0].arrival_s == 0.0 and (gaps >= 0).all()
    assert abs(gaps.mean() - 0.2) < 0.2 * 4 / np.sqrt(4000)  # exponential, mean 1/rate
    assert {r.output_tokens for r in reqs} == {8}
    assert min(r.input_tokens for r in reqs) >= 2651 and max(r.input_tokens for r in reqs) <= 30456
    assert workload_requests("qmsum", 5, 8, seed=3) == workload_requests("qmsum", 5, 8, seed=3)
    assert {r.arrival_s for r in workload_requests("qmsum", 5, 8)} == {0.0}


# --------------------------------------------------------------------------- by hand


def test_three_requests_by_hand_no_prefill(cfg):
    # A (100 in, 3 out) and B (200 in, 2 out) arrive at 0; C (50 in, 2 out) arrives during the
    # first step; at most 2 requests run. Step times come from the decode step itself.
    d1 = _step_s(cfg, (100, 200))
    reqs = [Request(0, 0.0, 100, 3), Request(1, 0.0, 200, 2), Request(2, d1 / 2, 50, 2)]
    scfg = ServeConfig("pim", TINY, cfg, partition="tcp", prefill=False, max_batch=2)
    res = serve(scfg, reqs, record_lengths=True)
    # By hand: step 1 (100, 200); step 2 (101, 201): B done; C admitted at t2; step 3
    # (102, 50): A done; step 4 (51,): C done.
    assert res.step_lengths == [(100, 200), (101, 201), (102, 50), (51,)]
    d2, d3, d4 = _step_s(cfg, (101, 201)), _step_s(cfg, (102, 50)), _step_s(cfg, (51,))
    t1, t2 = d1, d1 + d2
    t3 = t2 + d3
    t4 = t3 + d4
    assert res.admitted_s == [0.0, 0.0, t2]
    assert res.first_token_s == [t1, t1, t3]
    assert res.finished_s == [t3, t2, t4]
    m = metrics(res)
    lat = m["latency_s"]
    e2e = [t3, t2, t4 - d1 / 2]
    assert lat["e2e"]["mean"] == pytest.approx(sum(e2e) / 3, rel=1e-12)
    assert lat["e2e"]["p50"] == pytest.approx(t3, rel=1e-12)
    assert lat["ttft"]["p50"] == pytest.approx(t1, rel=1e-12)
    tpot = [(t3 - t1) / 2, t2 - t1, t4 - t3]
    assert lat["tpot"]["mean"] == pytest.approx(sum(tpot) / 3, rel=1e-12)
    assert lat["queueing"]["mean"] == pytest.approx((t2 - d1 / 2) / 3, rel=1e-12)
    s = m["summary"]
    assert s["duration_s"] == pytest.approx(t4, rel=1e-12)
    assert s["output_tokens"] == 7 and s["decode_steps"] == 4 and s["mean_batch"] == 1.75
    assert s["throughput_tokens_per_s"] == pytest.approx(7 / t4, rel=1e-12)
    ts = m["time_series"]
    assert sum(ts["tokens_per_s"]) * ts["bin_s"] == pytest.approx(7, rel=1e-9)
    # the first bin lies inside step 1 (2 tokens over d1), the last inside step 4 (1 over d4)
    assert ts["tokens_per_s"][0] == pytest.approx(2 / d1, rel=1e-9)
    assert ts["tokens_per_s"][-1] == pytest.approx(1 / d4, rel=1e-9)
    assert ts["batch"][0] is None and ts["batch"][-1] == 1.0


def test_three_requests_by_hand_with_prefill(cfg):
    f = cfg.module.freq_ghz * 1e9
    cache = KernelCache(cfg, "dcs")
    p1 = pim_prefill_cycles(TINY, cfg, 300, 1, 1, cache) / f
    d1 = _step_s(cfg, (100, 200))
    p2 = pim_prefill_cycles(TINY, cfg, 50, 1, 1, cache) / f
    d2 = _step_s(cfg, (101, 50))
    reqs = [Request(0, 0.0, 100, 3), Request(1, 0.0, 200, 2), Request(2, 0.0, 50, 2)]
    scfg = ServeConfig("pim", TINY, cfg, partition="tcp", max_batch=2)
    res = serve(scfg, reqs, record_lengths=True)
    # Prefill of A+B (300 tokens) emits their first tokens; step (100, 200) ends B; C is
    # admitted and prefilled (50 tokens, its first token); step (101, 50) ends A and C.
    assert res.step_lengths == [(100, 200), (101, 50)]
    assert res.first_token_s == [p1, p1, p1 + d1 + p2]
    assert res.finished_s == [p1 + d1 + p2 + d2, p1 + d1, p1 + d1 + p2 + d2]
    assert res.admitted_s == [0.0, 0.0, p1 + d1]
    assert [e[0] for e in res.events] == ["prefill", "decode", "prefill", "decode"]


def test_pim_prefill_is_the_decode_steps_batched_gemvs(cfg):
    # Prefill FC of n tokens = the decode step's GEMVs for a batch of n, per layer, plus the
    # EPU vector work of n tokens, times the layers, plus the hop back to the host.
    cache = KernelCache(cfg, "dcs")
    for n in (1, 7, 40):
        plan = layer_plan(TINY, cfg, (16,) * n, 1, "tcp")
        fc = sum(gemv_op(jobs, cache.run)[0] for jobs in plan.gemv.values())
        layer = fc + epu_cycles(cfg, n * epu_other_flops(TINY, 1))
        hop = stage_hop_cycles(cfg, n * TINY.hidden * 2, 0, 1, 1)
        assert pim_prefill_cycles(TINY, cfg, n, 1, 1, cache) == TINY.layers * layer + hop


# --------------------------------------------------------------------------- memory policies


def test_static_memory_admits_by_slot(small):
    # Static max_context 700 reserves ceil(700 * 3072 / 1 MiB) = 3 chunks: one slot in 4, so
    # B waits for A although their KV would fit lazily.
    reqs = [Request(0, 0.0, 300, 2), Request(1, 0.0, 300, 2)]
    scfg = ServeConfig(
        "pim", TINY, small, partition="tcp", memory="static", max_context=700, prefill=False
    )
    res = serve(scfg, reqs, record_lengths=True)
    assert res.step_lengths == [(300,), (301,), (300,), (301,)]
    assert res.admitted_s[1] == res.finished_s[0]
    assert [e[8] for e in res.events] == [1, 1, 0, 0]  # B waited during A's two steps
    s = metrics(res)["summary"]
    assert s["saturated_mean_batch"] == 1.0 and s["mean_batch"] == 1.0
    lazy = serve(
        ServeConfig("pim", TINY, small, partition="tcp", prefill=False), reqs, record_lengths=True
    )
    assert lazy.step_lengths == [(300, 300), (301, 301)]


def test_lazy_growth_preempts_the_latest_request(small):
    # A and B hold 680 tokens = 2 chunks each (2,088,960 B), the whole 4-chunk pool. Token 683
    # crosses into a third chunk: A's growth after the step at 682 tokens preempts B (the
    # latest admitted), which waits with 683 tokens to recompute (3 chunks) until A is done.
    reqs = [Request(0, 0.0, 680, 5), Request(1, 0.0, 680, 5)]
    scfg = ServeConfig("pim", TINY, small, partition="tcp", prefill=False)
    res = serve(scfg, reqs, record_lengths=True)
    assert res.preemptions == [0, 1]
    assert res.step_lengths == [(680, 680), (681, 681), (682, 682), (683,), (684,), (683,), (684,)]
    assert res.first_token_s[1] == res.first_token_s[0]  # not re-emitted after recompute
    assert res.admitted_s[1] == 0.0  # first admission


def test_a_request_that_can_never_fit_is_refused(small):
    reqs = [Request(0, 0.0, 1500, 2)]  # 5 chunks > 4
    with pytest.raises(ServeError, match="request 0 .1500 KV tokens. does not fit the empty"):
        serve(ServeConfig("pim", TINY, small, partition="tcp", prefill=False), reqs)
    with pytest.raises(ServeError, match="exceeds tiny's context_window = 4096"):
        serve(ServeConfig("pim", TINY, small, prefill=False), [Request(0, 0.0, 4000, 100)])
    unsorted = [Request(0, 1.0, 10, 2), Request(1, 0.5, 10, 2)]
    with pytest.raises(ServeError, match="request 1 arrives before request 0"):
        serve(ServeConfig("pim", TINY, small, prefill=False), unsorted)


# --------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("memory", ["lazy", "static"])
def test_steps_equal_independent_decode_runs(cfg, memory):
    reqs = workload_requests("alpaca", 12, 6, rate=2e4, seed=1)
    reqs = [Request(r.rid, r.arrival_s, r.input_tokens * 20, r.output_tokens) for r in reqs]
    scfg = ServeConfig("pim", TINY, cfg, tp=2, partition="auto", memory=memory, max_batch=5)
    res = serve(scfg, reqs, record_lengths=True)
    decode = [e for e in res.events if e[0] == "decode"]
    assert len(decode) == len(res.step_lengths) > 5
    for lengths, e in zip(res.step_lengths, decode, strict=True):
        fresh = run_decode(DecodeSetup(TINY, cfg, lengths, tp=2, partition="auto", memory=memory))
        assert e[3] == fresh.cycles


class _OneByOne:
    """A system whose pool grows requests one ``grow`` at a time (the serving loop's former
    path) or, with ``batched``, by its ``grow_each``; ``states`` is the pool after each."""

    def __init__(self, system, batched: bool):
        self.system, self.batched, self.states = system, batched, []

    def __getattr__(self, name):
        return getattr(self.system, name)

    def pool(self):
        pool, states, batched = self.system.pool(), self.states, self.batched

        def grow_each(rids):
            rids = list(rids)
            grown = len(rids)
            if batched:
                grown = type(pool).grow_each(pool, rids)
            else:
                for k, rid in enumerate(rids):
                    try:
                        pool.grow(rid)
                    except OutOfMemory:
                        grown = k
                        break
            states.append(copy.deepcopy({k: v for k, v in vars(pool).items() if k != "grow_each"}))
            return grown

        pool.grow_each = grow_each
        return pool


def _random_trace(rng, n: int, per: int) -> list[Request]:
    """``n`` requests arriving 0.2 ms apart on average, prompts just short of one or two
    ``per`` tokens (where memory runs out), 1-15 outputs."""
    arrivals = np.cumsum(rng.exponential(2e-4, n)) - 2e-4
    return [
        Request(k, max(0.0, float(t)), int(rng.integers(1, 3) * per - rng.integers(6)), int(o))
        for k, (t, o) in enumerate(zip(arrivals, rng.integers(1, 16, n), strict=True))
    ]


@pytest.mark.parametrize("seed", range(3))
def test_batched_growth_serves_as_growth_one_by_one(small, seed):
    from pimphony.models.xpu_config import load_xpu

    rng = np.random.default_rng(seed)
    a100 = load_xpu("a100-80gb")
    # GPU memory for TINY's weights and 30 blocks of 16 tokens (49,152 B each)
    fraction = (TINY.resident_weight_bytes + 30 * 49_152) / a100.capacity_bytes
    configs = [  # prompts near 341 tokens: a chunk of `small`
        (ServeConfig("pim", TINY, small, partition="tcp"), 341),
        (ServeConfig("pim", TINY, small, partition="tcp", memory="static", max_context=700), 341),
        (ServeConfig("xpu+pim", TINY, small, partition="tcp", xpu=load_xpu("neupims-npu")), 341),
        (ServeConfig("gpu", TINY, gpu=a100, gpu_memory_fraction=fraction, prefill=False), 160),
    ]
    preempted = []
    for scfg, per in configs:
        reqs = _random_trace(rng, 16, per)
        system = make_system(scfg.system, scfg)
        runs = []
        for batched in (False, True):
            wrapped = _OneByOne(system, batched)
            res = serve(scfg, reqs, record_lengths=True, system=wrapped)
            runs.append(({**vars(res), "wall_seconds": 0}, wrapped.states))
        assert runs[0] == runs[1]
        preempted.append(sum(res.preemptions))
    assert preempted[0] and preempted[3]  # lazy growth preempted on PIM and on the GPU


# --------------------------------------------------------------------------- command


def test_serve_command(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"arrival_s": 0, "input_tokens": 900, "output_tokens": 2}\n'
        '{"arrival_s": 0.001, "input_tokens": 500, "output_tokens": 3}\n'
    )
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    argv = (
        "serve",
        "--model",
        "llm-1.8b",
        "--workload",
        trace,
        "--no-prefill",
        "--out",
        out,
        "--plot",
        png,
    )
    rc, text, err = run_cli(capsys, *argv)
    assert rc == 0, err
    rep = json.loads(out.read_text())
    assert rep["summary"]["output_tokens"] == 5 and rep["summary"]["requests"] == 2
    assert rep["provenance"]["inputs_sha256"] and png.stat().st_size > 0
    assert set(rep["latency_s"]) == {"ttft", "tpot", "e2e", "queueing"}
    rows = rep["requests"]["rows"]
    assert [r[:3] for r in rows] == [[0.0, 900, 2], [0.001, 500, 3]]
    assert rows[0][5] - rows[0][0] == pytest.approx(
        rep["latency_s"]["e2e"]["p50"] * 2 - (rows[1][5] - rows[1][0])
    )
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 2 and "exists; pass --force" in err
    rc, _, err = run_cli(capsys, *argv, "--rate", "3", "--force")
    assert rc == 2 and err.startswith("pimphony serve: error: --rate: a trace")
    assert err.count("\n") == 1
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,input_tokens,output_tokens\n0,5,0\n")
    rc, _, err = run_cli(capsys, "serve", "--workload", bad, "--out", tmp_path / "b.json")
    assert rc == 2 and "bad.csv: line 2: output_tokens = 0 must be >= 1 token" in err
    assert issubclass(TraceError, PimphonyError) and issubclass(ServeError, PimphonyError)


def test_xpu_pim_and_gpu_steps_equal_their_decode_runs(cfg):
    from pimphony.models.xpu_config import load_xpu
    from pimphony.sim.systems.gpu import GpuSetup, run_gpu_decode
    from pimphony.sim.systems.hetero import HeteroSetup, run_hetero_decode

    reqs = [Request(k, 0.0002 * k, 300 + 97 * k, 3 + k % 3) for k in range(6)]
    npu = load_xpu("neupims-npu")
    hcfg = ServeConfig("xpu+pim", TINY, cfg, tp=2, partition="tcp", xpu=npu, max_batch=4)
    res = serve(hcfg, reqs, record_lengths=True)
    decode = [e for e in res.events if e[0] == "decode"]
    assert len(decode) == len(res.step_lengths) >= 5
    for lengths, e in zip(res.step_lengths, decode, strict=True):
        pim = DecodeSetup(TINY, cfg, lengths, tp=2, partition="tcp")
        assert e[3] == run_hetero_decode(HeteroSetup(pim, npu)).cycles
    a100 = load_xpu("a100-80gb")
    gcfg = ServeConfig("gpu", TINY, gpu=a100, gpus=2, max_batch=4)
    res = serve(gcfg, reqs, record_lengths=True)
    decode = [e for e in res.events if e[0] == "decode"]
    for lengths, e in zip(res.step_lengths, decode, strict=True):
        assert e[2] == run_gpu_decode(GpuSetup(TINY, a100, 2, lengths)).step_seconds
    # GPU memory is paged in 16-token blocks: at each step the pool holds sum(ceil(T / 16))
    # blocks of the running contexts (per GPU: 2 of TINY's 4 KV heads).
    block = 16 * 2 * TINY.layers * (TINY.kv_heads // 2) * TINY.head_dim * 2
    for lengths, e in zip(res.step_lengths, decode, strict=True):
        assert e[7] == sum(-(-t // 16) for t in lengths) * block
        assert e[6] == sum(lengths) * block // 16


def test_bench_serving_row():
    from pimphony.sim.experiments.bench import bench_serving

    rows = bench_serving(requests=4, outputs=3, reference_steps=2)
    assert [r["partition"] for r in rows] == ["tcp", "auto"]
    for r in rows:
        # Four ~32K requests fit the 8 modules together: one batch, three decode steps.
        assert (r["decode_steps"], r["output_tokens"]) == (3, 12)
        assert r["steps_per_s"] == pytest.approx(3 / r["wall_seconds"])
        assert r["full_step_seconds"] > 0


def test_bench_serving_systems_rows():
    """Each system of the targets serves its requests (two here, three outputs each); the
    target beside it is the issue's size in 60 s."""
    from pimphony.sim.experiments.bench import SERVING_TARGETS, bench_serving_systems

    rows = bench_serving_systems(dict.fromkeys(SERVING_TARGETS, 2), outputs=3)
    assert [r["system"] for r in rows] == ["pim", "xpu+pim", "gpu"]
    for r in rows:
        assert r["decode_tokens"] == 6 and r["decode_steps"] >= 3
        assert r["tokens_per_s"] == pytest.approx(6 / r["cpu_seconds"])
    assert [r["target_tokens"] for r in rows] == [10**7, 10**6, 10**6]
    assert [r["target_tokens_per_s"] for r in rows] == pytest.approx([1e7 / 60, 1e6 / 60, 1e6 / 60])


def test_long_context_requests_are_the_shipped_target_trace():
    from pimphony.models.config import CONFIG_DIR
    from pimphony.sim.serving.trace import long_context_requests

    assert long_context_requests(1000) == read_trace(CONFIG_DIR / "traces" / "long32k-1000.jsonl")
    assert long_context_requests(20, 50)[0].output_tokens == 50
    with pytest.raises(TraceError, match="requests 0: must be an integer >= 1"):
        long_context_requests(0)


def test_fig17_serving_shape_small():
    """PIMphony Fig. 17 as serving runs, on a small slice: (a) throughput rises with the
    capacity, the queue is twice what the memory admits; (b) PIMphony beats CENT more at the
    longer context."""
    from pimphony.sim.serving.fig17 import fig17a_rows, fig17b_rows

    a = fig17a_rows(modules=(8, 16), outputs=4)
    assert a[1]["tokens_per_s"] > 1.8 * a[0]["tokens_per_s"]
    assert [r["requests"] for r in a] == [2 * round(r["mean_batch"]) for r in a]
    b = fig17b_rows(contexts=(4096, 65536), outputs=4)
    assert 1 < b[0]["speedup"] < b[1]["speedup"]


def test_poisson_arrivals_beyond_the_serving_horizon_are_refused():
    from pimphony.sim.serving.trace import TraceError, workload_requests

    with pytest.raises(TraceError, match=r"--rate 1e-09: 3 requests arrive over 5\.68e\+09 s"):
        workload_requests("qmsum", 3, 2, rate=1e-9)
