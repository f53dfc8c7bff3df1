"""``pimphony decode --mapping tuned`` (sim/systems/tuned.py): DCC's drafts as channel
jobs, never slower than the fixed mapping, the lookup table, the search's bound, the report
and the command line."""

from __future__ import annotations

import json

import pytest
from pimphony.compiler.dcc.cost import draft_cost
from pimphony.compiler.dcc.schedule import DccKernel, Index, Part
from pimphony.compiler.plan import GemvJob, layer_plan
from pimphony.models.config import load_preset
from pimphony.models.hub import epu_cycles
from pimphony.sim.systems import tuned
from pimphony.sim.systems.cycles import StepCycles
from pimphony.sim.systems.setup import DecodeSetup
from pimphony.sim.systems.step import run_decode

from tests.helpers import run_cli
from tests.test_decode_step import TINY

HW = load_preset("aim-16ch")  # 16 channels x 16 banks


def step(lengths, tp=1, mapping="fixed", **kw):
    return run_decode(DecodeSetup(TINY, HW, tuple(lengths), tp=tp, mapping=mapping, **kw))


def draft_of(g_o: int, g_i: int, batch: int, d_out: int, d_in: int):
    """A batched-GEMV draft: batch whole, outputs over g_o channels x 16 banks, inputs over
    g_i channels."""
    return (
        Part(1, 1, "Y0", batch, Index("n")),
        Part(g_o, 16, "Y1", d_out, Index("o")),
        Part(g_i, 1, "W1", d_in, Index("i")),
    )


def test_draft_jobs_by_hand() -> None:
    # 8 x 2 channels: output shares of 1024 / 8 = 128 (8 bank groups), input shares of 256
    jobs = tuned.draft_jobs(HW, draft_of(8, 2, 4, 1024, 512), 4, 1024, 512)
    assert len(jobs) == 16
    assert all(c == [GemvJob(128, 256, 4)] for c in jobs)
    # 3 x 2 channels of 16: 40 outputs in bank groups (16, 16, 8), 100 inputs in MAC tiles
    # (3 + 3 tiles, the 4 left over with the first: 52, 48); channels 6-15 idle
    jobs = tuned.draft_jobs(HW, draft_of(3, 2, 1, 40, 100), 1, 40, 100)
    shapes = [[(j.d_out, j.d_in) for j in c] for c in jobs]
    assert shapes[:6] == [[(16, 52)], [(16, 48)], [(16, 52)], [(16, 48)], [(8, 52)], [(8, 48)]]
    assert shapes[6:] == [[]] * 10


@pytest.mark.parametrize("lengths, tp", [((512,), 1), ((512,) * 4, 2), ((300, 700, 64), 1)])
def test_tuned_is_never_slower_and_uses_dcc_only_when_faster(lengths, tp) -> None:
    fixed, tuned_r = step(lengths, tp), step(lengths, tp, "tuned")
    assert tuned_r.cycles <= fixed.cycles
    rows = tuned_r.mapping["gemv"]
    assert [r["op"] for r in rows] == ["qkv", "proj", "ffn1", "ffn2"]
    for r in rows:
        op = r["op"]
        assert r["fixed_cycles"] == fixed.ops[op]["cycles"] // TINY.layers
        used = min(r["fixed_cycles"], r["tuned_cycles"])
        assert tuned_r.ops[op]["cycles"] == used * TINY.layers
        assert r["used"] == ("tuned" if r["tuned_cycles"] < r["fixed_cycles"] else "fixed")
        # the EPU sums the partial outputs of an input split over channels
        g_i = r["channels"][1]
        assert r["reduce_cycles"] == epu_cycles(HW, r["batch"] * r["d_out"] * (g_i - 1))
    # attention is the fixed mapping's, cycle for cycle
    for op in ("qk", "sv", "softmax"):
        assert tuned_r.ops[op]["cycles"] == fixed.ops[op]["cycles"]


def test_tuned_wins_on_a_small_model() -> None:
    # TINY, one request: every weight GEMV of 512-1536 outputs leaves a channel 2-6 output
    # groups; splitting d_in over 2-4 channels gives each more of them (fewer row switches per
    # MAC) for a few EPU cycles of partial sums
    fixed, t = step((512,)), step((512,), mapping="tuned")
    assert t.cycles < fixed.cycles
    used = {r["op"]: r for r in t.mapping["gemv"] if r["used"] == "tuned"}
    assert "proj" in used and used["proj"]["channels"][1] > 1
    assert t.mapping["dcc_backend"] == tuned.module_backend(HW).name
    for r in t.mapping["gemv"]:  # every op's shape is in the lookup table now
        key = (r["batch"], r["d_out"], r["d_in"])
        assert tuned.TABLE.get(t.mapping["dcc_backend"], DccKernel.BATCHED_GEMV, key)


def test_a_slower_draft_is_not_used(monkeypatch) -> None:
    # a draft on 2 channels only: the step's model times it slower, so fixed jobs stay
    def bad(hw, batch, d_out, d_in):
        return draft_of(1, 2, batch, d_out, d_in), "searched"

    monkeypatch.setattr(tuned, "dcc_draft", bad)
    fixed, t = step((512,) * 2), step((512,) * 2, mapping="tuned")
    assert t.cycles == fixed.cycles
    assert all(r["used"] == "fixed" and r["tuned_cycles"] > r["fixed_cycles"]
               for r in t.mapping["gemv"])  # fmt: skip


def test_lookup_table_spares_the_second_search(monkeypatch) -> None:
    calls = []
    real = tuned.draft_cost
    monkeypatch.setattr(tuned, "draft_cost", lambda *a, **k: calls.append(a) or real(*a, **k))
    shape = (3, 640, 384)  # a shape no other test searches
    first = tuned.dcc_draft(HW, *shape)
    n = len(calls)
    assert first[1] == "searched" and n > 0
    again = tuned.dcc_draft(HW, *shape)
    assert again == (first[0], "lookup") and len(calls) == n
    entry = tuned.TABLE.get(tuned.module_backend(HW).name, DccKernel.BATCHED_GEMV, shape)
    assert entry is not None and entry.draft == first[0] and entry.origin == "runtime"


def test_the_bound_keeps_the_best_of_all_candidates() -> None:
    shape = (2, 1024, 512)
    draft, _ = tuned.dcc_draft(HW, *shape)
    cfg = tuned.module_backend(HW)
    drafts = tuned.kernel_drafts(cfg, DccKernel.BATCHED_GEMV, shape)[0]
    pool = [d for d in drafts if tuned._fills_banks(d, 16)]
    objective = {}
    for d in pool:
        c = draft_cost(cfg, DccKernel.BATCHED_GEMV, shape, d)
        objective[d] = c.compute_s + tuned._epu_seconds(HW, c)
        assert tuned._bound(HW, d, shape) <= objective[d] * (1 + 1e-12)  # a lower bound
    assert objective[draft] == min(objective.values())


def test_tuned_step_is_the_same_without_memoisation() -> None:
    setup = DecodeSetup(TINY, HW, (512, 200), mapping="tuned")
    a, b = run_decode(setup), run_decode(setup, memoize=False)
    assert a.cycles == b.cycles and a.ops == b.ops and a.mapping == b.mapping


def test_fixed_report_has_no_mapping_block() -> None:
    r = step((512,))
    assert "mapping" not in r.to_dict()
    assert "mapping" in step((512,), mapping="tuned").to_dict()


def test_plan_is_untouched_and_cycles_only_step_times_tuned() -> None:
    plan = layer_plan(TINY, HW, (512,))
    assert all(len(c) == 1 for c in plan.gemv["qkv"])  # the fixed plan: one job per channel
    setup = DecodeSetup(TINY, HW, (512, 200), mapping="tuned")
    assert StepCycles(setup).cycles(setup.lengths) == run_decode(setup).cycles


def test_cli(capsys, tmp_path) -> None:
    report = tmp_path / "r.json"
    rc, out, _ = run_cli(
        capsys, "decode", "--model", "llama-3.2-1b", "--context", "1024", "--batch", "2",
        "--preset", "aim-16ch", "--mapping", "tuned", "--report", report,
        "--plot", tmp_path / "r.png",
    )  # fmt: skip
    assert rc == 0
    assert "mapping: tuned (DCC on the module as an AiM back end; attention fixed)" in out
    data = json.loads(report.read_text())
    assert data["mapping"]["mapping"] == "tuned"
    assert data["provenance"]["options"]["mapping"] == "tuned"
    fixed = tmp_path / "f.json"
    rc, out, _ = run_cli(
        capsys, "decode", "--model", "llama-3.2-1b", "--context", "1024", "--batch", "2",
        "--preset", "aim-16ch", "--report", fixed, "--plot", tmp_path / "f.png",
    )  # fmt: skip
    data_f = json.loads(fixed.read_text())
    assert "mapping" not in data_f and "mapping" not in data_f["provenance"]["options"]
    assert data["cycles"] <= data_f["cycles"]
    rc, _, err = run_cli(capsys, "decode", "--system", "gpu", "--mapping", "tuned")
    assert rc != 0 and "--mapping (--system pim)" in err
