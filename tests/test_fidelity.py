"""The fidelity table (sim/fidelity): every claim re-measured, verdicts pinned.

A change that breaks a reproduced result (or moves a close one out of 1.5x, or turns a
direction into a difference) fails here;
a change that improves one fails too, so the expectation and ``docs/fidelity.md`` are
updated on purpose (``pimphony fidelity --write --force``).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
from pimphony.sim.fidelity import (
    CLAIMS,
    Claim,
    Gap,
    Measured,
    Unit,
    Verdict,
    format_fidelity,
    measure_all,
    sized_verdict,
    tally,
    verdict_text,
)

ROOT = Path(__file__).resolve().parent.parent
EXPECTED = {
    "P-fig7": Verdict.CLOSE,
    "P-fig8": Verdict.REPRODUCED,
    "P-fig4": Verdict.CLOSE,
    "P-fig18": Verdict.DIRECTION_ONLY,
    "P-fig18-small": Verdict.REPRODUCED,
    "P-tcp-thresholds": Verdict.DIRECTION_ONLY,
    "P-sv-reduction": Verdict.REPRODUCED,
    "P-576B": Verdict.DERIVED,
    "P-dpa-200KB": Verdict.REPRODUCED,
    "P-fig19": Verdict.REPRODUCED,
    "P-fig13a": Verdict.REPRODUCED,
    "P-fig13b": Verdict.DIRECTION_ONLY,
    "P-fig9": Verdict.DIRECTION_ONLY,
    "P-dcs-gqa": Verdict.DIFFERS,
    "P-fig14a": Verdict.CLOSE,
    "P-fig14b": Verdict.REPRODUCED,
    "P-fig17-1m": Verdict.CLOSE,
    "P-fig17-neupims": Verdict.DIRECTION_ONLY,
    "P-fig17-256": Verdict.DIRECTION_ONLY,
    "P-fig15": Verdict.DIRECTION_ONLY,
    "P-fig17a": Verdict.REPRODUCED,
    "P-fig16": Verdict.DIRECTION_ONLY,
    "P-fig20": Verdict.DIRECTION_ONLY,
    "L-fig4": Verdict.DIRECTION_ONLY,
    "L-fig11": Verdict.DIRECTION_ONLY,
    "L-fig9": Verdict.DIRECTION_ONLY,
    "L-fig9-72b": Verdict.DIRECTION_ONLY,
    "L-gpu-pim": Verdict.DIRECTION_ONLY,
    "L-hetero": Verdict.DIFFERS,
    "L-fig7a": Verdict.DIRECTION_ONLY,
    "L-fig7a-dt": Verdict.CLOSE,
    "L-table8": Verdict.CLOSE,
    "LP-fig19": Verdict.DIFFERS,
    "LP-fig20": Verdict.DIFFERS,
    "LP-fig21": Verdict.DIRECTION_ONLY,
    "LP-fig22": Verdict.DIRECTION_ONLY,
    "D-fig7": Verdict.DIRECTION_ONLY,
    "D-fig6": Verdict.DIRECTION_ONLY,
    "D-over-gpu-hbm-pim": Verdict.DIRECTION_ONLY,
    "D-over-gpu-attacc": Verdict.CLOSE,
    "D-fig8": Verdict.DIRECTION_ONLY,
    "D-fig10": Verdict.DIRECTION_ONLY,
    "D-table2": Verdict.CLOSE,
    "D-fig2-attacc": Verdict.DIRECTION_ONLY,
    "D-fig9-attacc": Verdict.DIFFERS,
    "S-fig9": Verdict.REPRODUCED,
    "S-fig10": Verdict.CLOSE,
    "S-fig12": Verdict.DIRECTION_ONLY,
    "S-fig13": Verdict.DIRECTION_ONLY,
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
    lines = fresh.splitlines()
    table = lines[lines.index("|---|---|---|---|---|---|---|") + 1 :]  # the claims, not the tally
    rows = [line for line in table if line.startswith("| ")]
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


# ---- verdicts that carry size ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("gap", "factor", "close"),
    [
        # a speed-up by its gain over 1: 8.7% against 40%
        (Gap("", 1.087, 1.4), 0.4 / 0.087, False),
        (Gap("", 18.24, 11.3), 17.24 / 10.3, False),
        (Gap("", 55.6, 46.6), 54.6 / 45.6, True),
        (Gap("", 2.03, 2.1), 1.1 / 1.03, True),
        (Gap("", 0.9, 2.1), math.inf, False),  # a slow-down against a speed-up
        (Gap("", 1.4, 1.4), 1.0, True),
        # a percentage: 10 points or 1.5x
        (Gap("", 38.0, 29.0, Unit.PERCENT), 38 / 29, True),  # 9 points
        (Gap("", 46.0, 29.0, Unit.PERCENT), 46 / 29, False),  # 17 points, 1.59x
        (Gap("", 3.0, 12.0, Unit.PERCENT), 4.0, True),
        # a plain value by its ratio
        (Gap("", 16, 32, Unit.VALUE), 2.0, False),
        (Gap("", 700, 380, Unit.VALUE), 700 / 380, False),
        (Gap("", 4308, 3668, Unit.VALUE), 4308 / 3668, True),
    ],
)
def test_gap_factor_and_close(gap, factor, close):
    assert gap.factor == pytest.approx(factor)
    assert gap.close is close


def test_verdict_rule():
    near, far = Gap("a", 1.5, 1.55), Gap("b", 1.1, 1.4)
    assert sized_verdict(True, False, (far,)) == Verdict.REPRODUCED
    assert sized_verdict(False, False, (near,)) == Verdict.DIFFERS
    assert sized_verdict(False, True, (near,)) == Verdict.CLOSE
    assert sized_verdict(False, True, (near, far)) == Verdict.DIRECTION_ONLY
    assert sized_verdict(False, True, ()) == Verdict.DIRECTION_ONLY  # nothing to size it by


def test_verdict_cell_names_the_worst_gap():
    m = Measured("x", Verdict.DIRECTION_ONLY, "m", gaps=(Gap("a", 1.5, 1.55), Gap("b", 1.1, 1.4)))
    assert m.worst.label == "b"
    assert verdict_text(m) == "**direction only** (worst: b 1.10x vs 1.40x (4.00x off))"
    bare = Measured("x", Verdict.DIRECTION_ONLY, "m")
    assert verdict_text(bare) == "**direction only** (the paper gives no number to size it by)"
    assert verdict_text(Measured("x", Verdict.REPRODUCED)) == "**reproduced**"


def test_tally_by_paper():
    def claim(paper):
        return Claim("k", paper, "w", "c", "wl", "cmd", lambda: None)

    results = [
        (claim("A"), Measured("x", Verdict.REPRODUCED)),
        (claim("A"), Measured("x", Verdict.CLOSE)),
        (claim("B"), Measured("x", Verdict.CLOSE)),
    ]
    lines = tally(results)
    assert lines[0].startswith("| paper | reproduced | close | direction only | differs |")
    assert lines[2] == "| A | 1 | 1 | 0 | 0 | 0 | 0 | 2 |"
    assert lines[3] == "| B | 0 | 1 | 0 | 0 | 0 | 0 | 1 |"
    assert lines[4] == "| **all** | 1 | 2 | 0 | 0 | 0 | 0 | 3 |"


def test_every_sized_verdict_has_its_numbers(results):
    """A close verdict rests on gaps; a direction-only one without gaps is a claim whose
    paper gives no number (named here, so a row that forgot its gaps fails)."""
    unsized = {"P-fig9", "P-fig20", "LP-fig21"}
    for claim, m in results:
        if m.verdict == Verdict.CLOSE:
            assert m.gaps and all(g.close for g in m.gaps), claim.key
        if m.verdict == Verdict.DIRECTION_ONLY:
            assert bool(m.gaps) != (claim.key in unsized), claim.key


def test_dcc_over_gpu_names_the_kernels_the_gpu_wins():
    from pimphony.sim.fidelity import _dcc_over_gpu_judged

    values = {"best": 12.0, "best_point": "GEMV [1]", "geomean": 2.5, "points": 3,
              "per_kernel": {"ATTN": 9.0, "RED": 0.1}}  # fmt: skip
    paper = {"ATTN": 10.4, "RED": 1.78}
    m = _dcc_over_gpu_judged(values, 13.17, 5.75, paper)
    assert m.verdict == Verdict.DIRECTION_ONLY  # the geomean 1.5 / 4.75 gain: 3.2x off
    assert m.mechanism.startswith(
        "per kernel, ours (paper's geomean): ATTN 9.00x (10.40x), RED 0.10x (1.78x); "
        "RED slower than our GPU"
    )
    assert m.worst.label == "geomean"
    m = _dcc_over_gpu_judged({**values, "geomean": 0.5}, 13.17, 5.75, paper)
    assert m.verdict == Verdict.DIFFERS


def test_gpu_rows_are_measured_again_on_the_roofline(monkeypatch):
    """A ``gpu`` row is measured with and without per-kernel costs (the environment restored
    after); the cell shows both; other rows once."""
    from pimphony.models.xpu_config import KERNEL_COSTS_ENV, kernel_costs_enabled
    from pimphony.sim.fidelity import measure_claim, ours_text

    monkeypatch.delenv(KERNEL_COSTS_ENV, raising=False)

    def measure() -> Measured:
        return Measured(f"costs {kernel_costs_enabled()}", Verdict.CLOSE, "m")

    row = Claim("K", "P", "Fig. 0", "c", "w", "cmd", measure, gpu=True)
    m = measure_claim(row)
    assert (m.ours, m.roofline) == ("costs True", "costs False")
    assert ours_text(m) == "costs True. Without per-kernel costs (`--no-kernel-costs`): costs False"
    assert kernel_costs_enabled() and KERNEL_COSTS_ENV not in os.environ
    plain = measure_claim(Claim("K", "P", "Fig. 0", "c", "w", "cmd", measure))
    assert (plain.roofline, ours_text(plain)) == ("", "costs True")
    gpu_rows = {c.key for c in CLAIMS if c.gpu}
    assert {"P-fig20", "L-fig9", "D-over-gpu-hbm-pim", "D-over-gpu-attacc"} <= gpu_rows


#: One concrete run of a row's printed command (several when the row names alternatives),
#: for the rows whose command runs in seconds.
ROW_RUNS = {
    "P-fig8": [["sweep", "--kernel", "qk", "--preset", "pimphony-cent", "--dims",
                "32,64,128,256,512"]],
    "P-fig18": [["buffer-sweep"]],
    "P-fig18-small": [["buffer-sweep"]],
    "P-fig19": [["capacity", "--requests", "256"]],
    "S-fig9": [["sherpa", "--model", "llama-3.2-1b"], ["sherpa", "--model", "llama-3.2-3b"]],
    "S-fig13": [["sherpa", "--model", "llama-3.2-3b", "--sl", "64,96,128,160,192",
                 "--out-len", "1"]],
}  # fmt: skip


def _own_numbers(ours: str) -> list[str]:
    """The decimals of a row's ``ours`` outside parentheses (there: the paper's numbers or
    ones derived from ours)."""
    depth, kept = 0, []
    for ch in ours:
        depth += ch == "("
        kept.append(ch if depth == 0 else " ")
        depth -= ch == ")" and depth > 0
    return re.findall(r"\d[\d,]*\.\d+", "".join(kept))


@pytest.mark.parametrize("key", list(ROW_RUNS))
def test_a_rows_command_prints_its_numbers(key, capsys, tmp_path, monkeypatch):
    """Each of our numbers in the row appears, as printed, in its command's output."""
    from pimphony.sim.cli import main

    measured = next(c for c in CLAIMS if c.key == key).measure()
    monkeypatch.chdir(tmp_path)  # the commands' plots go to build/ here
    printed = ""
    for argv in ROW_RUNS[key]:
        assert main(argv) == 0
        printed += capsys.readouterr().out
    numbers = _own_numbers(measured.ours)
    assert numbers, measured.ours
    assert [n for n in numbers if n not in printed] == [], (measured.ours, printed)


def test_own_numbers_skip_parentheses():
    assert _own_numbers("a 1.5x (paper 2.0x), b 3.25% (4.1 (5.2)) c 6.0") == [
        "1.5", "3.25", "6.0",
    ]  # fmt: skip
