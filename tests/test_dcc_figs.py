"""``pimphony dcc-figs`` (sim/experiments/dcc_figs.py): the figures' points are tune reports,
summaries are their geometric means, outputs are written once (``--force`` to replace)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from compiler.dcc_cost import Placement
from sim.experiments import dcc_figs
from sim.experiments.dcc_figs import FIGURES, Figure, summary
from sim.tune import tune_report
from tests.helpers import run_cli
from tests.test_dcc_cost import small_backend


def test_readings_of_the_paper_sizes() -> None:
    fig7 = FIGURES[Figure.FIG7]()
    assert len(fig7) == 8  # 4 sizes x batches 1 and 4
    backend, kernel, shape, placement, label = fig7[-1]
    assert (backend, kernel, shape, label) == ("hbm-pim", "qk", (256, 4096, 128),
                                               {"batch": 4, "size": "64x4096"})  # fmt: skip
    assert placement == Placement.RESIDENT
    fig2 = FIGURES[Figure.FIG2]()
    assert {c[1] for c in fig2} == {"red", "batched-gemv"}
    assert all(c[3] == Placement.EVERY_CALL for c in fig2)
    assert ("hbm-pim", "red", (16 * 256, 2048)) in {c[:3] for c in fig2}


def test_figure_run_writes_rows_and_summary(tmp_path: Path, capsys, monkeypatch) -> None:
    cfg = str(small_backend(tmp_path))
    cases = [(cfg, "qk", (b * 2, 64, 128), "resident", {"batch": b, "size": "2x64"})
             for b in (1, 2)]  # fmt: skip
    monkeypatch.setitem(FIGURES, Figure.FIG9, lambda: cases)
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
