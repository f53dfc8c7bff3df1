"""``pimphony sweep-run`` (sim/sweep_run.py) when things go wrong (issue 34): failed points
set the exit status, a misspelt ``[outputs]`` field is refused, a damaged cache is rerun, a
killed Ray worker is retried."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pimphony.sim.sweep_run import EXIT_POINTS_FAILED, load_sweep, run_sweep

from tests.helpers import assert_equals_serial, ray_sweep_command, run_cli

SWEEP = """
name = "faults"
command = "run"
[base]
kernel = "gemv"
din = 64
sched = "static"
[[points]]
dout = 32
preset = "{first}"
[[points]]
dout = 64
preset = "{second}"
[outputs]
cycles = "{field}"
"""


def _sweep(tmp_path: Path, first="aim-16ch", second="aim-16ch", field="cycles") -> Path:
    path = tmp_path / "s.toml"
    path.write_text(SWEEP.format(first=first, second=second, field=field))
    return path


@pytest.mark.parametrize(
    "second, allow, status",
    [
        ("aim-16ch", False, 0),
        ("no-such-preset", False, EXIT_POINTS_FAILED),
        ("no-such-preset", True, 0),
    ],
)
def test_failed_points_set_the_exit_status(tmp_path, capsys, second, allow, status):
    path = _sweep(tmp_path, second=second)
    argv = ["sweep-run", path, "--serial", "--out", tmp_path / "o"]
    rc, out, err = run_cli(capsys, *argv, *(["--allow-failures"] if allow else []))
    assert rc == status
    assert ("failed: point 1" in out) == (second != "aim-16ch")
    if status:
        assert err.strip().splitlines()[-1] == (
            "sweep-run: 1 of 2 points failed; --allow-failures accepts that"
        )


def test_a_sweep_whose_points_all_failed_exits_non_zero_even_when_failures_are_allowed(
    tmp_path, capsys
):
    path = _sweep(tmp_path, first="nope", second="nope")
    rc, _, err = run_cli(
        capsys, "sweep-run", path, "--serial", "--out", tmp_path / "o", "--allow-failures"
    )
    assert rc == EXIT_POINTS_FAILED
    assert err.strip().splitlines()[-1] == "sweep-run: 2 of 2 points failed"


def test_a_misspelt_output_is_refused_and_the_fixed_file_reruns_nothing(tmp_path, capsys):
    out = tmp_path / "o"
    rc, _, err = run_cli(
        capsys, "sweep-run", _sweep(tmp_path, field="cylces"), "--serial", "--out", out
    )
    assert rc == 2
    assert "[outputs] cycles = 'cylces': no point's report has that field" in err
    assert "cycles" in err.split("fields at the top of a report: ")[1]
    assert not (out / "results.parquet").exists()
    summary = run_sweep(load_sweep(_sweep(tmp_path)), out, serial=True)
    assert (summary["cached"], summary["done"]) == (2, 0)


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),  # truncated
        lambda p: p.write_bytes(b"\xff\xfe not json"),  # not UTF-8
        lambda p: p.write_text(json.dumps({"key": "another", "report": {}})),  # another point's
        lambda p: p.write_text("[]"),  # not a record
    ],
    ids=["truncated", "binary", "another-key", "not-a-record"],
)
def test_a_damaged_cached_point_is_rerun_and_reported(tmp_path, damage, capsys):
    path, out = _sweep(tmp_path), tmp_path / "o"
    run_sweep(load_sweep(path), out, serial=True)
    table = pq.read_table(out / "results.parquet")
    victim = sorted((out / "points").glob("*.json"))[0]
    damage(victim)
    rc, stdout, _ = run_cli(capsys, "sweep-run", path, "--serial", "--out", out)
    assert rc == 0
    point = [r["key"] for r in table.to_pylist()].index(victim.stem)
    assert f"recomputed: point {point} (its cached {victim} was damaged)" in stdout
    assert pq.read_table(out / "results.parquet").equals(table)


def test_a_damaged_sweep_marker_is_refused_without_force(tmp_path, capsys):
    path, out = _sweep(tmp_path), tmp_path / "o"
    run_sweep(load_sweep(path), out, serial=True)
    (out / "sweep.json").write_bytes(b"\x00garbage")
    rc, _, err = run_cli(capsys, "sweep-run", path, "--serial", "--out", out)
    assert rc == 2 and "sweep.json is damaged" in err and "--force" in err
    rc, _, _ = run_cli(capsys, "sweep-run", path, "--serial", "--out", out, "--force")
    assert rc == 0
    assert json.loads((out / "sweep.json").read_text())["name"] == "faults"


def _worker_pids() -> list[int]:
    """PIDs of Ray worker processes running a point (``ray::run_point``)."""
    found = subprocess.run(["pgrep", "-f", "ray::run_point"], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


@pytest.mark.slow
def test_a_killed_ray_worker_is_retried_and_the_table_equals_a_serial_run(tmp_path):
    """SIGKILL one local Ray worker while it runs a point: Ray reruns the task, nothing fails
    and the table equals a serial run's."""
    path = tmp_path / "ray.toml"
    path.write_text(
        'name = "killed"\ncommand = "decode"\n[base]\nmodel = "llm-7b"\nbatch = 4\n'
        '[grid]\ncontext = [1024, 2048, 4096, 8192]\n[outputs]\ncycles = "cycles"\n'
    )
    out = tmp_path / "ray"
    cmd, env = ray_sweep_command(path, out)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (pids := _worker_pids()):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(pids[0], 9)
    stdout, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0
    summary = json.loads(stdout)
    assert (summary["done"], summary["failed"]) == (4, 0)
    assert_equals_serial(path, out, 4)
