"""PIMphony Fig. 13 shape: each technique raises LLM-7B-32K throughput (experiments/ablation)."""

from __future__ import annotations

from sim.experiments.ablation import STEPS, ablation, format_ablation


def test_each_step_improves_throughput():
    rows = ablation(pool=1024)
    assert [r["step"] for r in rows] == [s[0] for s in STEPS]
    speeds = [r["tokens_per_s"] for r in rows]
    assert speeds == sorted(speeds) and speeds[-1] > 1.8 * speeds[0]
    # TCP and DCS gain from utilisation; DPA from the larger batch lazy allocation admits.
    assert rows[2]["mac_utilization"] > rows[1]["mac_utilization"] > rows[0]["mac_utilization"]
    assert rows[3]["batch"] > 2 * rows[2]["batch"]
    # The best split is the maximum over every split tried.
    for r in rows:
        assert r["tokens_per_s"] == max(t["tokens_per_s"] for t in r["splits"])
        assert {(t["tp"], t["pp"]) for t in r["splits"]} == {(8, 1), (4, 2), (2, 4), (1, 8)}
    assert "+DPA" in format_ablation(rows)
