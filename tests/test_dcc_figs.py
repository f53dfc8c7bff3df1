"""``pimphony dcc-figs`` (sim/experiments/dcc_figs.py): the figures' points are tune reports,
summaries are their geometric means, outputs are written once (``--force`` to replace);
``--table`` takes a tabled point's draft without a search and searches the others."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pimphony.compiler.dcc.cost import Placement
from pimphony.compiler.dcc.predictor import LookupTable
from pimphony.models.backends import load_backend
from pimphony.sim.analysis.dcc_shapes import FIGURES, Figure
from pimphony.sim.analysis.dcc_table import backend_record, table_digest
from pimphony.sim.experiments import dcc_figs
from pimphony.sim.experiments.dcc_figs import summary
from pimphony.sim.tune import tune_report

from tests.helpers import run_cli
from tests.test_dcc_cost import small_backend


def test_readings_of_the_paper_sizes() -> None:
    fig7 = FIGURES[Figure.FIG7]("hbm-pim")
    # GEMV: 4 sizes x batches 1 and 4; RED, VA, RELU: 3 tensor sizes x batches 1, 2, 4
    assert [dcc_figs.panel(c[4]) for c in fig7] == ["GEMV"] * 8 + ["RED"] * 9 + ["VA"] * 9 + [
        "RELU"
    ] * 9
    backend, kernel, shape, placement, label = fig7[7]
    assert (backend, kernel, shape) == ("hbm-pim", "qk", (256, 4096, 128))
    assert label == {"batch": 4, "size": "64x4096", "kernel": "GEMV"}
    assert placement == Placement.RESIDENT
    cases = {(c[1], c[2]): c[4] for c in fig7}
    assert cases[("batched-red", (2, 1, 4096))] == {"batch": 2, "size": "4096", "kernel": "RED"}
    assert cases[("batched-va", (4, 1024))]["kernel"] == "VA"
    assert cases[("batched-relu", (1, 2048))]["kernel"] == "RELU"
    fig2 = FIGURES[Figure.FIG2]("hbm-pim")
    assert {c[1] for c in fig2} == {"red", "batched-gemv"}
    assert all(c[3] == Placement.EVERY_CALL for c in fig2)
    assert ("hbm-pim", "red", (16 * 256, 2048)) in {c[:3] for c in fig2}


def test_fig7_panels_and_their_summary(tmp_path: Path, capsys, monkeypatch) -> None:
    """--panels runs only the named panels; the summary has one set of geomeans per panel
    (GEMV's unprefixed, as the paper's text names them)."""
    cfg = str(small_backend(tmp_path))
    gemv = {"batch": 1, "size": "2x64", "kernel": "GEMV"}
    cases = [(cfg, "qk", (2, 64, 128), "resident", gemv)] + [
        (cfg, "batched-va", (b, 512), "resident", {"batch": b, "size": "512", "kernel": "VA"})
        for b in (2, 1)
    ]
    monkeypatch.setitem(FIGURES, Figure.FIG7, lambda backend: cases)
    report, png = tmp_path / "f.json", tmp_path / "f.png"
    rc, out, err = run_cli(capsys, "dcc-figs", "--figure", "fig7", "--panels", "va",
                           "--report", report, "--plot", png)  # fmt: skip
    assert rc == 0, err
    doc = json.loads(report.read_text())
    assert [r["kernel"] for r in doc["rows"]] == ["VA", "VA"]
    rc, _, err = run_cli(capsys, "dcc-figs", "--figure", "fig7", "--panels", ",")  # was a
    assert rc == 2 and "--panels is empty; figure fig7 has panels GEMV, VA" in err  # ZeroDivision
    s = doc["summary"]
    assert set(s) == {"VA_default_over_gpu_geomean", "VA_dcc_over_gpu_geomean",
                      "VA_dcc_over_default_geomean"}  # fmt: skip
    want = math.sqrt(doc["rows"][0]["dcc_over_default"] * doc["rows"][1]["dcc_over_default"])
    assert s["VA_dcc_over_default_geomean"] == pytest.approx(want)
    assert "VA_dcc_over_default_geomean" in out and "(paper 1.69)" in out
    rc, _, err = run_cli(capsys, "dcc-figs", "--figure", "fig7", "--panels", "GEMV,ATTN",
                         "--report", report, "--plot", png, "--force")  # fmt: skip
    assert rc == 2 and "--panels GEMV,ATTN: figure fig7 has panels GEMV, VA; ATTN is not one" in err
    full = summary(Figure.FIG7, [{**r, "kernel": "GEMV"} for r in doc["rows"]])
    assert set(full) == {"default_over_gpu_geomean", "dcc_over_gpu_geomean",
                         "dcc_over_default_geomean"}  # fmt: skip


def test_figure_run_writes_rows_and_summary(tmp_path: Path, capsys, monkeypatch) -> None:
    cfg = str(small_backend(tmp_path))
    cases = [(cfg, "qk", (b * 2, 64, 128), "resident", {"batch": b, "size": "2x64"})
             for b in (1, 2)]  # fmt: skip
    monkeypatch.setitem(FIGURES, Figure.FIG9, lambda backend: cases)
    report, png = tmp_path / "f.json", tmp_path / "f.png"
    args = ("dcc-figs", "--figure", "fig9", "--report", report, "--plot", png)
    rc, out, err = run_cli(capsys, *args)
    assert rc == 0 and "summary:" in out and png.stat().st_size > 0, err
    doc = json.loads(report.read_text())
    rows = doc["rows"]
    for row, (_, _, shape, _, _) in zip(rows, cases, strict=True):
        r = tune_report(cfg, "qk", shape, top=1)
        assert row["dcc_over_default"] == pytest.approx(r["speedup"]["over_default"])
    s = summary(Figure.FIG9, rows)
    assert s == pytest.approx(doc["summary"])
    assert doc["summary"]["hbm-pim-small_b1"] == pytest.approx(rows[0]["dcc_over_default"])
    assert math.isclose(doc["paper"]["hbm-pim_b8"], 1.61)
    rc, _, err = run_cli(capsys, *args)
    assert rc != 0 and "pass --force" in err
    assert dcc_figs.PAPER[Figure.FIG2]["speedup_geomean"] == 1.26


def test_attacc_figures() -> None:
    """Fig. 6's three panels on AttAcc (ATTN as attn, GEMV as qk, RED as Fig. 7's batched-red
    (B, 1, N)); Figs. 2 and 9 on either back end (AttAcc's Fig. 9 at the paper's four output
    sizes, HBM-PIM's too); a back end a figure does not run on is refused by name."""
    fig6 = FIGURES[Figure.FIG6]("attacc")
    assert [dcc_figs.panel(c[4]) for c in fig6] == ["ATTN"] * 8 + ["GEMV"] * 8 + ["RED"] * 6
    cases = {(c[1], c[2]): c[4] for c in fig6}
    assert cases[("attn", (256, 4096, 128))] == {"batch": 4, "size": "64x4096", "kernel": "ATTN"}
    assert cases[("qk", (32, 512, 128))] == {"batch": 1, "size": "32x512", "kernel": "GEMV"}
    assert cases[("batched-red", (4, 1, 2048))] == {"batch": 4, "size": "2048", "kernel": "RED"}
    assert not any(c[1] == "red" for c in fig6)
    assert {c[0] for c in fig6} == {"attacc"}
    fig9 = FIGURES[Figure.FIG9]("attacc")
    assert len(fig9) == 16 and {c[2][1] for c in fig9} == {512, 1024, 2048, 4096}
    assert ("attacc", "qk", (8 * 32, 1024, 128)) in {c[:3] for c in fig9}
    fig9h = FIGURES[Figure.FIG9]("hbm-pim")
    assert len(fig9h) == 16 and {c[2][1] for c in fig9h} == {512, 1024, 2048, 4096}
    assert {c[0] for c in FIGURES[Figure.FIG2]("attacc")} == {"attacc"}
    with pytest.raises(dcc_figs.FigureError, match="--backend attacc: figure fig7 runs on hbm-pim"):
        dcc_figs.figure_rows(Figure.FIG7, backend="attacc")
    paper = dcc_figs.PAPER[Figure.FIG6]
    assert (paper["ATTN_dcc_over_default_geomean"], paper["dcc_over_default_geomean"],
            paper["RED_dcc_over_default_geomean"]) == (1.24, 1.28, 1.50)  # fmt: skip


@pytest.fixture
def tabled(tmp_path: Path, capsys, monkeypatch) -> tuple[Path, Path, list]:
    """A table filled offline for one small point, and Fig. 9 as that point (tabled) and one
    the table lacks (searched)."""
    cfg = small_backend(tmp_path)
    path = tmp_path / "lut.json"
    rc, _, err = run_cli(capsys, "dcc-lut", "--backend", cfg, "--shape", "qk:2,64,128",
                         "--per-shape", "20", "--rounds", "20", "--out", path)  # fmt: skip
    assert rc == 0, err
    cases = [(str(cfg), "qk", (b * 2, 64, 128), "resident", {"batch": b, "size": "2x64"})
             for b in (1, 2)]  # fmt: skip
    monkeypatch.setitem(FIGURES, Figure.FIG9, lambda backend: cases)
    return cfg, path, cases


@pytest.mark.parametrize("older", [False, True])
def test_table_drafts_are_not_searched_and_rows_say_so(tabled, capsys, monkeypatch, older) -> None:
    """The point the table lacks is predicted by the table's saved predictor, or searched
    with an older table that has none."""
    import pimphony.sim.tune as sim_tune

    cfg, path, cases = tabled
    if older:  # as dcc-lut wrote tables before it saved the predictor
        raw = json.loads(path.read_text())
        del raw["model"]
        path.write_text(json.dumps(raw))
    searched = []
    search = sim_tune.predicted_search

    def only_untabled(c, kernel, shape, *args, **kwargs):
        assert tuple(shape) != (2, 64, 128), "searched a point the table holds"
        searched.append(tuple(shape))
        return search(c, kernel, shape, *args, **kwargs)

    monkeypatch.setattr(sim_tune, "predicted_search", only_untabled)
    monkeypatch.setattr(dcc_figs, "BUILD_DIR", path.parent / "build")
    rc, out, err = run_cli(capsys, "dcc-figs", "--figure", "fig9", "--table", path)
    assert rc == 0, err
    report = path.parent / "build" / "dcc" / "fig9-table.json"  # not the per-call run's
    assert report.with_suffix(".png").stat().st_size > 0
    assert searched == ([(4, 64, 128)] if older else [])
    doc = json.loads(report.read_text())
    tab, new = doc["rows"]
    entry = LookupTable.load(path).get("hbm-pim-small", "qk", (2, 64, 128))
    source = "search" if older else "predicted"
    assert (tab["draft_source"], new["draft_source"]) == ("table", source)
    assert tab["dcc_draft"] == " ".join(map(str, entry.draft))
    assert tab["dcc_us"] == pytest.approx(entry.simulated_s * 1e6)
    assert tab["compute_centric_us"] is None and tab["rearrangement_share_T"] is None
    assert (new["compute_centric_us"] is None) is not older and tab["dcc_over_default"] > 0
    assert doc["summary"]["hbm-pim-small_b1"] == pytest.approx(tab["dcc_over_default"])
    if older:
        assert f"DCC drafts: 1 point(s) from table {path} (not searched), 1 searched (the " \
            "table has no saved predictor: an older dcc-lut file" in out  # fmt: skip
    else:
        assert f"DCC drafts: 1 point(s) from table {path} (not searched), 1 predicted by its " \
            "offline predictor, 0 searched" in out  # fmt: skip
    assert "T not searched" in out
    t = doc["provenance"]["table"]
    assert (t["path"], t["sha256"]) == (str(path), table_digest(path))
    assert t["points"] == {"table": 1, "predicted": 0 if older else 1, "searched": int(older)}
    assert doc["provenance"]["options"]["table"] == str(path)


def test_without_table_the_report_is_as_before(tabled, capsys, tmp_path) -> None:
    report = tmp_path / "f.json"
    rc, out, err = run_cli(capsys, "dcc-figs", "--figure", "fig9", "--report", report,
                           "--plot", tmp_path / "f.png")  # fmt: skip
    assert rc == 0, err
    doc = json.loads(report.read_text())
    assert "table" not in doc["provenance"]["options"] and "table" not in doc["provenance"]
    assert all("draft_source" not in r and r["compute_centric_us"] > 0 for r in doc["rows"])
    assert "DCC drafts" not in out and "not searched" not in out


@pytest.mark.parametrize(
    ("figure", "other", "message"),
    [
        ("fig2", False, "--table: figure fig2's points rearrange every input per call "
         "(every-call placement); a table holds drafts chosen with weights / KV resident; "
         "drop --table"),
        ("fig9", True, "holds drafts for back end hbm-pim, not hbm-pim-small"),
    ],
)  # fmt: skip
def test_table_refusals(tabled, capsys, tmp_path, figure, other, message) -> None:
    _, path, _ = tabled
    if other:  # a table filled for another back end
        path = LookupTable({"backend": backend_record(load_backend("hbm-pim"))}).save(
            tmp_path / "other.json"
        )
    report = tmp_path / "r.json"
    rc, _, err = run_cli(capsys, "dcc-figs", "--figure", figure, "--table", path,
                         "--report", report, "--plot", tmp_path / "r.png")  # fmt: skip
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("pimphony dcc-figs: error: --table") and "Traceback" not in err
    assert err.strip().endswith(message) and not report.exists()
