"""``pimphony bench`` (sim/experiments/bench.py): its sizes are refused before any timing."""

from __future__ import annotations

from tests.helpers import run_cli

#: The fuzzer's (issue 34): each was accepted and ran until stopped.
BAD = {
    ("--repeat", "1000000000000"): "outside 1 to 100",
    ("--repeat", "0"): "outside 1 to 100",
    ("--dim", "1000000000000"): "outside 1 to 65,536",
    ("--rtl-dim", "-1"): "outside 1 to 65,536",
}


def test_bench_refuses_bad_sizes(capsys):
    for (option, value), bound in BAD.items():
        rc, out, err = run_cli(capsys, "bench", option, value)
        assert (rc, out) == (2, "") and f"{option}: {value} is {bound}" in err, err
