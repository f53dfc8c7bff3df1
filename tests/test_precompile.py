"""sim.precompile: each task compiles what a real run of its functions compiles."""

from __future__ import annotations

import pytest
from pimphony.models import dcs, jit, pingpong, static_sched
from pimphony.sim.cli import main
from pimphony.sim.precompile import TASKS, _run_task


@pytest.mark.parametrize(
    ("task", "kernel", "patterns"),
    [
        ("dcs", dcs.dcs_run, 2),  # statistics only and recording
        ("pingpong", pingpong.pingpong_feed, 2),
        ("static", static_sched.static_run, 1),  # records by the arrays' length
    ],
)
def test_a_scheduler_task_compiles_every_pattern_of_its_chunk_kernel(task, kernel, patterns):
    name, cpu = _run_task(task)
    assert name == task and cpu > 0
    assert jit.numba_loaded()
    assert len(kernel.signatures) == patterns


def test_every_task_is_named_and_workers_are_checked(capsys):
    assert list(TASKS) == ["pingpong", "dcs", "static", "system"]
    with pytest.raises(SystemExit) as exc:
        main(["precompile", "--workers", "0"])
    assert exc.value.code == 2
    assert "--workers: 0 is outside 1 to 64" in capsys.readouterr().err
