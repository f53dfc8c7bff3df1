"""``pimphony bench`` (sim/experiments/bench.py): its sizes are refused before any timing."""

from __future__ import annotations

import pytest

from tests.helpers import run_cli


@pytest.mark.parametrize(
    "option, value, message",
    [  # the fuzzer's (issue 34): each was accepted and ran until stopped
        ("--repeat", "1000000000000", "--repeat: 1000000000000 is outside 1 to 100"),
        ("--repeat", "0", "--repeat: 0 is outside 1 to 100"),
        ("--dim", "1000000000000", "--dim: 1000000000000 is outside 1 to 65,536"),
        ("--rtl-dim", "-1", "--rtl-dim: -1 is outside 1 to 65,536"),
    ],
)
def test_bench_refuses_bad_sizes(capsys, option, value, message):
    rc, out, err = run_cli(capsys, "bench", option, value)
    assert rc == 2 and message in err and out == "", err
