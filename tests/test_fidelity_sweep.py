"""``pimphony fidelity --write`` through the sweep runner (sim/fidelity_sweep): row groups as
points, results equal to measuring in process, cached and resumed."""

from __future__ import annotations

import pytest
from pimphony.sim import sweep_run
from pimphony.sim.cli import main
from pimphony.sim.fidelity import (
    CLAIMS,
    claim_json,
    measure_all,
    measured_from_json,
    select_claims,
)
from pimphony.sim.fidelity_sweep import groups, measure_by_sweep

#: Two rows that measure in well under a second.
CHEAP = ("P-tcp-thresholds", "P-576B")


def test_groups_keep_the_tables_order():
    rows = {c.key: c for c in CLAIMS}
    picked = [rows[k] for k in ("P-fig13a", "P-fig7", "P-fig15", "P-fig14a", "P-fig13b")]
    assert [tuple(c.key for c in g) for g in groups(picked)] == [
        ("P-fig13a", "P-fig15", "P-fig13b"), ("P-fig7",), ("P-fig14a",),
    ]  # fmt: skip


def test_select_claims_refuses_unknown_rows():
    assert [c.key for c in select_claims("P-576B, P-tcp-thresholds")] == [
        c.key for c in CLAIMS if c.key in CHEAP
    ]
    with pytest.raises(ValueError, match=r"--rows 'P-fig99': unknown row P-fig99; allowed: P-"):
        select_claims("P-fig99")


def test_the_sweep_measures_what_the_process_does_and_resumes(tmp_path, monkeypatch):
    claims = select_claims(",".join(CHEAP))
    direct = measure_all(claims)
    swept = measure_by_sweep(claims, tmp_path, serial=True)
    assert [(c.key, claim_json(c, m)) for c, m in swept] == [
        (c.key, claim_json(c, m)) for c, m in direct
    ]
    # A rerun takes every row from the cache: no point runs.
    monkeypatch.setattr(sweep_run, "run_point", lambda argv: pytest.fail(f"ran {argv}"))
    again = measure_by_sweep(claims, tmp_path, serial=True)
    assert [claim_json(c, m) for c, m in again] == [claim_json(c, m) for c, m in direct]


def test_a_row_round_trips_through_json():
    claim = next(c for c in CLAIMS if c.key == "P-tcp-thresholds")
    m = claim.measure()
    back = measured_from_json(claim_json(claim, m))
    assert (back.ours, back.verdict, back.gaps, back.mechanism, back.roofline) == (
        m.ours, m.verdict, m.gaps, m.mechanism, m.roofline,
    )  # fmt: skip


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--rows", "P-fig99"], "unknown row P-fig99"),
        (["--rows", "P-fig7", "--write", "x.md"], "--rows measures part of the table"),
        (["--write", "x.md", "--workers", "0"], "--workers 0: must be at least 1"),
        (["--rows", "P-fig7", "--workers", "2"], "--address and --workers set up Ray"),
    ],
)
def test_cli_refusals(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["fidelity", *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()
