"""``pimphony sweep-run`` (sim/sweep_run.py): sweep files, the per-point cache,
failures that do not stop a sweep, and a local Ray run killed half-way and resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pimphony.compiler.kernels import compile_gemv
from pimphony.models.channel import run_channel
from pimphony.models.config import load_preset
from pimphony.sim.sweep_run import (
    SweepError,
    available_sweeps,
    inputs_key,
    load_sweep,
    run_sweep,
)

from tests.helpers import assert_equals_serial, ray_sweep_command, run_cli

TINY = """
name = "tiny"
command = "run"
[base]
kernel = "gemv"
din = 64
[grid]
sched = ["static", "dcs"]
[[points]]
dout = 32
[[points]]
dout = 128
[[points]]
dout = 64
preset = "{bad}"
[outputs]
cycles = "cycles"
macs = "counts.MAC"
"""


def _write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_points_are_grid_times_list_in_order(tmp_path):
    sweep = load_sweep(_write(tmp_path, TINY.format(bad="aim-16ch")))
    assert [(p["sched"], p["dout"]) for p in sweep.points] == [
        ("static", 32), ("static", 128), ("static", 64), ("dcs", 32), ("dcs", 128), ("dcs", 64),
    ]  # fmt: skip
    assert all(p["kernel"] == "gemv" and p["din"] == 64 for p in sweep.points)


def test_serial_sweep_values_cache_and_failures(tmp_path):
    sweep = load_sweep(_write(tmp_path, TINY.format(bad="no-such-preset")))
    out = tmp_path / "out"
    first = run_sweep(sweep, out, serial=True)
    assert (first["done"], first["failed"], first["cached"]) == (4, 2, 0)
    assert {f["point"] for f in first["failures"]} == {2, 5}
    assert "unknown preset 'no-such-preset'" in first["failures"][0]["error"]
    rows = pq.read_table(out / "results.parquet").to_pylist()
    cfg = load_preset("aim-16ch")
    for r in rows:
        if r["status"] == "ok":
            ref = run_channel(compile_gemv(cfg, r["dout"], 64).commands, cfg, r["sched"])
            assert (r["cycles"], r["macs"]) == (ref.cycles, ref.counts["MAC"])
        else:
            assert r["cycles"] is None and "no-such-preset" in r["error"]
    # A rerun computes nothing that succeeded and tries the failures again.
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "points").iterdir()}
    second = run_sweep(sweep, out, serial=True)
    assert (second["done"], second["failed"], second["cached"]) == (0, 2, 4)
    assert {p.name: p.stat().st_mtime_ns for p in (out / "points").iterdir()} == stamps
    assert pq.read_table(out / "results.parquet").equals(pq.read_table(out / "results.parquet"))
    assert pq.read_table(out / "results.parquet").to_pylist() == rows


def test_cache_key_covers_files_an_option_names(tmp_path):
    """A point naming a file (a model config, a contexts file) gets a new key when the file
    changes."""
    f = tmp_path / "lengths.txt"
    f.write_text("1024\n")
    a = inputs_key("decode", {"contexts": str(f)}, "d1")
    f.write_text("2048\n")
    assert inputs_key("decode", {"contexts": str(f)}, "d1") != a


def test_cache_key_covers_options_and_inputs():
    a = inputs_key("run", {"dout": 32}, "d1")
    assert a == inputs_key("run", {"dout": 32}, "d1")
    assert a != inputs_key("run", {"dout": 64}, "d1")
    assert a != inputs_key("run", {"dout": 32}, "d2")  # a preset or the code changed
    assert a != inputs_key("decode", {"dout": 32}, "d1")


@pytest.mark.parametrize(
    "text,message",
    [
        ('name = "x"\ncommand = "nope"\n[outputs]\nc = "cycles"\n', "command = 'nope': unknown"),
        ('name = "x"\ncommand = "run"\ncolour = 1\n[outputs]\nc = "c"\n', "unknown key 'colour'"),
        ('name = "x"\ncommand = "run"\n[grid]\ndout = []\n[outputs]\nc = "c"\n', "non-empty list"),
        ('name = "x"\ncommand = "run"\n', "missing section [outputs]"),
        (
            'name = "x"\ncommand = "run"\n[base]\nkernel = "gemv"\ndin = 64\ndout = "many"\n'
            '[outputs]\nc = "c"\n',
            "point 0 (run --kernel gemv --din 64 --dout many --json): ",
        ),
        (
            'name = "x"\ncommand = "run"\n[base]\nnope = 1\n[outputs]\nc = "c"\n',
            "unrecognized arguments: --nope 1",
        ),
        (
            'name = "x"\ncommand = "run"\n[base]\nkernel = "qk"\n[outputs]\nc = "cycles"\n'
            '[plot]\nx = "tokens"\ny = "cycles"\ntitle = "t"\nxlabel = "x"\nylabel = "y"\n',
            "plot.x = 'tokens': not a column",
        ),
        (
            'name = "x"\ncommand = "run"\n[base]\nkernel = "qk"\n[grid]\nkernel = ["sv"]\n'
            '[outputs]\nc = "c"\n',
            "grid.kernel: also in [base]",
        ),
    ],
)
def test_bad_sweep_files(tmp_path, text, message):
    with pytest.raises(SweepError) as exc:
        load_sweep(_write(tmp_path, text))
    assert message in str(exc.value)


def test_shipped_sweeps_load():
    assert {"pimphony-fig15", "pimphony-fig17", "lolpim-fig11"} <= set(available_sweeps())
    for name in available_sweeps():
        sweep = load_sweep(name)
        assert sweep.plot is not None and sweep.points


def test_cli_refuses_another_sweeps_directory(tmp_path, capsys):
    path = _write(tmp_path, TINY.format(bad="aim-16ch"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.json").write_text(json.dumps({"name": "other"}))
    code, _, err = run_cli(capsys, "sweep-run", str(path), "--out", str(out), "--serial")
    assert code == 2 and "holds the results of sweep 'other'" in err
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's file")
    code, _, err = run_cli(capsys, "sweep-run", str(path), "--out", str(mine), "--serial")
    assert code == 2 and "not a sweep's directory" in err


def test_ray_options_with_serial_are_refused(tmp_path, capsys):
    """Were ignored (issue 34's fuzzer: ``--serial --workers 10^12``, ``--address x``)."""
    path = _write(tmp_path, TINY.format(bad="aim-16ch"))
    for extra in (["--workers", "3"], ["--address", "x", "--workers", "2"]):
        code, _, err = run_cli(capsys, "sweep-run", str(path), "--serial", *extra)
        named = " and ".join(e for e in extra if e.startswith("--"))
        assert code == 2 and f"{named} set up Ray; --serial runs without it" in err, err
    assert not (tmp_path / "out").exists()


def test_unreachable_ray_address_is_refused_at_once(tmp_path, capsys):
    path = _write(tmp_path, TINY.format(bad="aim-16ch"))
    out = str(tmp_path / "out")
    code, _, err = run_cli(capsys, "sweep-run", str(path), "--out", out, "--address", "nonsense")
    assert code == 2 and "expected [ray://]HOST:PORT or 'auto'" in err
    code, _, err = run_cli(
        capsys, "sweep-run", str(path), "--out", out, "--address", "ray://127.0.0.1:1"
    )
    assert code == 2 and "no Ray cluster answers at 127.0.0.1:1" in err


RAY_SWEEP = """
name = "ray-resume"
command = "decode"
[base]
model = "llm-7b"
batch = 2
modules = 1
preset = "aim-32ch-32g"
[grid]
context = [1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192]
[outputs]
tokens_per_s = "tokens_per_s"
cycles = "cycles"
"""


def test_ray_sweep_killed_half_way_resumes_and_equals_serial(tmp_path):
    """A local Ray with 2 workers, killed once the first point is cached: the rerun computes
    only the rest, and its table equals a serial run's in a fresh directory."""
    path = _write(tmp_path, RAY_SWEEP)
    out = tmp_path / "ray"
    cmd, env = ray_sweep_command(path, out)
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    points = out / "points"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if points.is_dir() and any(points.glob("*.json")):
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    cached = {p.name: p.stat().st_mtime_ns for p in points.glob("*.json")}
    assert 1 <= len(cached) < 8, "the sweep was not stopped half-way"
    resumed = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["cached"] == len(cached) and summary["done"] == 8 - len(cached)
    assert summary["failed"] == 0
    for name, stamp in cached.items():  # no cached point recomputed
        assert (points / name).stat().st_mtime_ns == stamp
    assert_equals_serial(path, out, 8)
