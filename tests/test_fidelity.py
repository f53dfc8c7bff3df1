"""The fidelity table (sim/fidelity): every claim re-measured, verdicts pinned.

A change that breaks a reproduced result (or turns a trend into a difference) fails here;
a change that improves one fails too, so the expectation and ``docs/fidelity.md`` are
updated on purpose (``pimphony fidelity --write --force``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pimphony.sim.fidelity import CLAIMS, Verdict, format_fidelity, measure_all

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = {
    "P-fig7": Verdict.TREND,
    "P-fig8": Verdict.REPRODUCED,
    "P-fig18": Verdict.TREND,
    "P-fig18-small": Verdict.REPRODUCED,
    "P-tcp-thresholds": Verdict.TREND,
    "P-sv-reduction": Verdict.REPRODUCED,
    "P-576B": Verdict.DERIVED,
    "P-dpa-200KB": Verdict.REPRODUCED,
    "P-fig19": Verdict.REPRODUCED,
    "P-fig13a": Verdict.REPRODUCED,
    "P-fig13b": Verdict.TREND,
    "P-fig14a": Verdict.TREND,
    "P-fig14b": Verdict.REPRODUCED,
    "P-fig17-1m": Verdict.TREND,
    "P-fig17-256": Verdict.TREND,
    "P-fig15": Verdict.TREND,
    "P-fig17a": Verdict.REPRODUCED,
    "P-fig16": Verdict.TREND,
    "P-fig20": Verdict.TREND,
    "L-fig4": Verdict.TREND,
    "L-fig11": Verdict.TREND,
    "L-fig9": Verdict.TREND,
    "L-fig7a": Verdict.TREND,
    "L-table8": Verdict.TREND,
    "LP-fig19": Verdict.DIFFERS,
    "LP-fig20": Verdict.DIFFERS,
    "LP-fig21": Verdict.TREND,
    "LP-fig22": Verdict.TREND,
    "D-fig7": Verdict.TREND,
    "D-fig6": Verdict.TREND,
    "D-fig2-attacc": Verdict.TREND,
    "D-fig9-attacc": Verdict.DIFFERS,
    "S-fig9": Verdict.REPRODUCED,
}


#: Rows that take minutes (figure runs): measured by the slow test below, not by ``make test``.
SLOW = [c.key for c in CLAIMS if c.slow]


@pytest.fixture(scope="module")
def results():
    return measure_all(tuple(c for c in CLAIMS if not c.slow))


def test_every_claim_has_an_expected_verdict():
    assert [c.key for c in CLAIMS] == list(EXPECTED)


@pytest.mark.parametrize("key", [k for k in EXPECTED if k not in SLOW])
def test_verdict_unchanged(results, key):
    claim, measured = next((c, m) for c, m in results if c.key == key)
    assert measured.verdict == EXPECTED[key], (claim.claim, measured.ours, measured.mechanism)
    if measured.verdict != Verdict.REPRODUCED:
        assert measured.mechanism, "every difference names its mechanism"


def test_docs_table_is_current(results):
    doc = (ROOT / "docs" / "fidelity.md").read_text()
    fresh = format_fidelity(results)
    # The header names the commit; every table row must match the fresh one exactly.
    rows = [line for line in fresh.splitlines() if line.startswith("| ") and "**" in line]
    assert len(rows) == len(CLAIMS) - len(SLOW)
    for row in rows:
        assert row in doc, (
            f"docs/fidelity.md is stale; run pimphony fidelity --write --force\n{row}"
        )


@pytest.mark.slow
@pytest.mark.parametrize("key", SLOW)
def test_slow_verdict_unchanged(key):
    """The figure-run rows (minutes each), measured one at a time."""
    claim = next(c for c in CLAIMS if c.key == key)
    measured = claim.measure()
    assert measured.verdict == EXPECTED[key], (claim.claim, measured.ours, measured.mechanism)
    if measured.verdict != Verdict.REPRODUCED:
        assert measured.mechanism, "every difference names its mechanism"


def test_closed_form_rows():
    values = {c.key: m.values for c, m in measure_all(tuple(c for c in CLAIMS if c.key in (
        "P-tcp-thresholds", "P-576B")))}  # fmt: skip
    # One token per bank of 16 x 16 for QK^T; 128 entries x (8 + 8 + 19 + 1) bits = 576 B.
    assert values["P-tcp-thresholds"] == {"qk": 256, "sv": 16}
    assert values["P-576B"] == {"bytes": 576}
