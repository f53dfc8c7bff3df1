"""PIMphony Fig. 13 shape: each technique raises LLM-7B-32K throughput (experiments/ablation)."""

from __future__ import annotations

import json

import pytest
from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.sim.experiments.ablation import ablation, format_ablation
from pimphony.sim.systems.admission import fill_batch, queue_batches
from pimphony.sim.systems.setup import DecodeSetup, micro_batch_candidates
from pimphony.sim.systems.step import run_decode
from pimphony.sim.systems.techniques import STEPS
from pimphony.sim.workloads import load_workload, sample_context_lengths

from tests.helpers import run_cli


@pytest.fixture(scope="module")
def rows():
    return ablation(requests=48)


def test_each_step_improves_throughput(rows):
    assert [r["step"] for r in rows] == [s[0] for s in STEPS]
    speeds = [r["tokens_per_s"] for r in rows]
    assert speeds == sorted(speeds) and speeds[-1] > 1.8 * speeds[0]
    # TCP and DCS gain from utilisation; DPA from the larger batch lazy allocation admits.
    assert rows[2]["mac_utilization"] > rows[1]["mac_utilization"] > rows[0]["mac_utilization"]
    assert rows[3]["batch"] > 1.5 * rows[2]["batch"]
    # Each batch runs at the best of every split; the row names the split most batches used.
    for r in rows:
        for b in r["per_batch"]:
            assert {(t["tp"], t["pp"]) for t in b["splits"]} == {(8, 1), (4, 2), (2, 4), (1, 8)}
        assert sum(r["splits_used"].values()) == r["batches"]
        assert r["splits_used"][f"{r['tp']}x{r['pp']}"] == max(r["splits_used"].values())
    assert "+DPA" in format_ablation(rows)


def test_every_step_serves_the_same_requests(rows):
    for r in rows:
        assert r["requests"] == 48 and sum(r["batch_sizes"]) == 48
        assert r["batch"] == 48 / r["batches"]
    # Static steps batch identically; lazy (DPA) admits larger batches of the same queue.
    assert rows[0]["batch_sizes"] == rows[1]["batch_sizes"] == rows[2]["batch_sizes"]
    assert len(rows[3]["batch_sizes"]) < len(rows[2]["batch_sizes"])


def test_every_step_reports_its_energy(rows):
    """J by part summed over each batch's chosen step; per token over the same requests; the
    parts sum to the total (floating sums, so to rounding)."""
    for r in rows:
        e = r["energy_j"]
        assert e["total"] == pytest.approx(
            sum(v for k, v in e.items() if k not in ("unit", "total")), rel=1e-12
        )
        assert r["joules_per_token"] == e["total"] / 48
    # faster steps stand by for less time: the last step's background is below the first's
    assert rows[-1]["energy_j"]["background"] < rows[0]["energy_j"]["background"]
    assert "J/token" in format_ablation(rows)


@pytest.mark.parametrize("memory", ["static", "lazy"])
def test_queue_batches_cover_the_queue_with_maximal_batches(memory):
    spec, hw = load_model("llm-7b"), load_preset("aim-32ch")
    queue = [int(t) for t in sample_context_lengths(load_workload("qmsum"), 60, 3)]
    batches = queue_batches(spec, hw, 8, memory, queue)
    assert [t for b in batches for t in b] == queue  # same requests, same order
    done = 0
    for b in batches[:-1]:  # each but the last is the longest prefix that fits
        rest = queue[done:]
        assert fill_batch(spec, hw, 8, memory, rest) == b
        done += len(b)


def test_micro_batch_candidates_and_auto_picks_the_fastest():
    assert micro_batch_candidates(1, 50) == [1]
    assert micro_batch_candidates(4, 10) == [4, 8, 10]
    assert micro_batch_candidates(2, 100) == [2, 4, 8]
    assert micro_batch_candidates(8, 3) == [3]
    spec, hw = load_model("llm-7b"), load_preset("aim-32ch")

    def step(m):
        return run_decode(DecodeSetup(spec, hw, (4096,) * 10, tp=2, pp=4, micro_batches=m))

    auto = step("auto")
    sweep = auto.pipeline["micro_batch_sweep"]
    assert [s["micro_batches"] for s in sweep] == [4, 8, 10]
    for s in sweep:
        assert step(s["micro_batches"]).tokens_per_s == s["tokens_per_s"]
    assert auto.tokens_per_s == max(s["tokens_per_s"] for s in sweep)
    assert auto.micro_batches == max(sweep, key=lambda s: s["tokens_per_s"])["micro_batches"]
    # One micro-batch over 4 stages leaves three quarters of the stages idle: not a candidate.
    assert step(1).tokens_per_s < 0.5 * auto.tokens_per_s


def test_score_overflow_option(tmp_path, capsys):
    """``--score-overflow`` reaches every step (as ``ablation(score_overflow=...)``), is recorded
    in the provenance only when given, and belongs to ``--system pim``."""
    argv = ("ablation", "--model", "llama-3.1-8b", "--workload", "multifieldqa", "--requests", "2")
    spill = ablation("llama-3.1-8b", "multifieldqa", requests=2, score_overflow="bank-spill")
    tiles = ablation("llama-3.1-8b", "multifieldqa", requests=2)
    assert [r["tokens_per_s"] for r in spill] != [r["tokens_per_s"] for r in tiles]
    for extra, rows, recorded in (
        (("--score-overflow", "bank-spill"), spill, True),
        ((), tiles, False),
    ):
        rc, out, err = run_cli(
            capsys, *argv, *extra, "--json", "--plot", tmp_path / "a.png", "--force"
        )
        assert rc == 0, err
        report = json.loads(out)
        assert [r["tokens_per_s"] for r in report["rows"]] == [r["tokens_per_s"] for r in rows]
        assert ("score_overflow" in report["provenance"]["options"]) == recorded
    rc, _, err = run_cli(
        capsys, "ablation", "--system", "xpu+pim", "--score-overflow", "bank-spill"
    )
    assert rc != 0 and "--score-overflow is an option of --system pim" in err
