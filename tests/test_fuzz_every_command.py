"""Bad option values for every command (``tests/fuzz_every_command.py``): each ends in one
clear ``error:`` line or a run, never an internal error, a hang or a changed file (issue 34).

``make test`` checks that every command of the table has a base invocation and cases, and
runs a few light cases; the ``slow`` variant runs every case of every
command (``python -m tests.fuzz_tally --every`` prints the same as a table).
"""

from __future__ import annotations

import pytest

from tests.fuzz_every_command import BASES, cases, command_names, run_case


def test_every_command_has_a_base_and_bad_values():
    names = command_names()
    assert sorted(BASES) == sorted(names)
    assert {c.command for name in names for c in cases(name)} == set(names)
    assert sum(1 for name in names for _ in cases(name)) >= 500


def _check(command: str, what: str | None = None) -> None:
    bad = []
    for case in cases(command):
        if what is not None and not case.what.endswith(what):
            continue
        outcome = run_case(case)
        if outcome.kind not in ("ok", "error"):
            bad.append(f"{outcome.kind}: {case.what} {' '.join(case.argv)}: {outcome.message}")
    assert not bad, "\n".join(bad)


def test_a_light_commands_bad_values():
    _check("capacity")


def test_a_non_utf8_file_for_every_file_option_of_decode():
    _check("decode", "non-UTF-8 file")


@pytest.mark.slow
@pytest.mark.parametrize("command", command_names())
def test_every_bad_value_of_every_command(command):
    _check(command)
