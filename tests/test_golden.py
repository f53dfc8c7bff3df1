"""Every golden case prints exactly what ``tests/golden/`` saved (see ``tests/golden/capture.py``).

A failure here means a number or a line the tool prints changed. If the change is intended,
rerun ``python -m tests.golden.capture NAME`` and commit the new file with the reason.
"""

from __future__ import annotations

import difflib

import pytest

from tests.golden.capture import CASES, capture, golden_path


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.name, marks=[pytest.mark.slow] if c.slow else []) for c in CASES],
)
def test_output_matches_golden(case):
    want = golden_path(case).read_text()
    got = capture(case)
    if got != want:
        diff = "".join(
            difflib.unified_diff(want.splitlines(True), got.splitlines(True), "golden", "now", n=1)
        )
        pytest.fail(f"{case.name}: output changed\n{diff[:4000]}")


def test_every_case_has_a_golden_file():
    missing = [c.name for c in CASES if not golden_path(c).exists()]
    assert not missing, f"no golden file for {missing}; run python -m tests.golden.capture"
