"""``pimphony serve-fig4`` and ``serve-fig17`` (sim/serving/fig4.py, fig17.py): the figures'
serving runs as commands of the table."""

from __future__ import annotations

import pimphony.sim.serving.fig4 as fig4
import pimphony.sim.serving.fig17 as fig17

from tests.helpers import run_cli


def test_serve_fig4_passes_its_options(capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(fig4, "fig4_rows", lambda *a, **k: calls.append((a, k)))
    rc, out, err = run_cli(
        capsys, "serve-fig4", "--modules", "4", "8", "--workloads", "qmsum", "--output-tokens",
        "2", "--requests-per-slot", "5", "--system", "xpu+pim",
    )  # fmt: skip
    assert rc == 0, err
    assert calls == [(((4, 8), ("qmsum",), 5, 2), {"system": "xpu+pim"})]
    assert out.startswith("| workload | capacity | requests | static batch")
    rc, _, err = run_cli(capsys, "serve-fig4", "--modules", "0")
    assert rc == 2 and "0 is outside 1" in err


def test_serve_fig17_runs_the_parts_asked(capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(fig17, "fig17a_rows", lambda outputs: calls.append(("a", outputs)))
    monkeypatch.setattr(fig17, "fig17b_rows", lambda outputs: calls.append(("b", outputs)))
    rc, out, _ = run_cli(capsys, "serve-fig17", "--part", "b", "--outputs", "8")
    assert rc == 0 and calls == [("b", 8)] and out.startswith("\n| context | CENT batch")
    rc, _, err = run_cli(capsys, "serve-fig17", "--outputs", "0")
    assert rc == 2 and "0 is outside 1" in err


def test_serve_fig4_row_of_a_run_that_never_saturated():
    """A run where no request ever waited has no saturated batch: the row says ``n/a``
    (``--output-tokens 1 --requests-per-slot 1 --modules 4`` was a TypeError, issue 34)."""
    run = {"saturated_batch": None, "mean_batch": 3.0, "tokens_per_s": 10.0}
    row = {"workload": "qmsum", "capacity_gib": 64.0, "modules": 4, "requests": 7,
           "ideal_batch": 6.5, "static": {**run, "saturated_batch": 2.0}, "lazy": run}  # fmt: skip
    line = fig4._line(row)
    assert "| 2.00 | n/a | 6.5 | n/a |" in line and line.endswith("| 1.00x |")
