"""Faults the ``pimphony`` command survives (issue 34): non-finite numbers, Ctrl-C / SIGTERM
and a full disk each end in one line, with no output half written and no input touched."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pimphony.sim.cli import main

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "argv, option",
    [
        (["serve", "--system", "gpu", "--gpu-memory-fraction", "nan"], "--gpu-memory-fraction"),
        (["serve", "--rate", "inf"], "--rate"),
        (["sherpa", "--device-memory", "inf"], "--device-memory"),
        (["sherpa", "--device-memory=-inf"], "--device-memory"),
        (["dcc-lut", "--backend", "aim", "--out", "x", "--holdout", "NaN"], "--holdout"),
    ],
)
def test_a_non_finite_float_option_is_refused_by_name(argv, option, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"error: argument {option}: " in err and "is not a finite number" in err


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pimphony.sim.cli", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sigterm_caught(pid: int) -> bool:
    """Whether ``pid`` has installed a SIGTERM handler (``SigCgt`` in ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize(
    "signum, word", [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated")]
)
def test_a_signal_mid_run_prints_one_line_and_writes_nothing(signum, word, tmp_path):
    """``serve`` of 50 requests runs for tens of seconds; the signal lands once the command
    runs (its SIGTERM handler is installed), and the report never appears."""
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        _cli("serve", "--requests", "50", "--out", str(out)),
        cwd=tmp_path,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # a foreground command's Ctrl-C: a test run started in the background (``make test
        # &``) ignores SIGINT, and a child would inherit that
        preexec_fn=_default_sigint,
    )
    deadline = time.monotonic() + 120
    while not _sigterm_caught(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(3)  # well into the run (imports and parsing take about 1 s)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum
    assert err.strip().splitlines() == [f"pimphony serve: {word}; no partial output was written"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))


def test_a_full_disk_keeps_the_previous_file_and_fails_in_one_line(tmp_path):
    """A write beyond ``RLIMIT_FSIZE`` (``EFBIG``, as a full disk's ``ENOSPC``) fails in one
    line naming the user's path; the file ``--force`` would replace is intact, no temporary
    file is left."""
    old = {"r.json": '{"old": 1}\n', "p.png": "old plot\n"}
    for name, text in old.items():
        (tmp_path / name).write_text(text)
    proc = subprocess.run(
        _cli(
            "decode",
            "--context",
            "128",
            "--batch",
            "2",
            "--report",
            "r.json",
            "--plot",
            "p.png",
            "--force",
        ),  # fmt: skip
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        preexec_fn=_limit_file_size,
        timeout=600,
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("pimphony decode: error: [Errno 27] cannot write ")
    assert line.split("cannot write ")[1] in ("r.json: File too large", "p.png: File too large")
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == old


def test_a_writer_killed_mid_write_leaves_the_old_file_and_its_orphan_is_removed(tmp_path):
    """SIGKILL during ``write_atomic`` of 400 MB: the target keeps its old content (the
    rename never happened); the next write to it removes the dead writer's temporary file."""
    from pimphony.models.fileio import write_atomic

    target = tmp_path / "r.json"
    target.write_text("old\n")
    code = (
        "import sys; from pimphony.models.fileio import write_atomic; "
        f"write_atomic({str(target)!r}, b'x' * (400 << 20))"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env())
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".r.json.*.tmp")):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    (orphan,) = tmp_path.glob(".r.json.*.tmp")
    assert orphan.name.startswith(f".r.json.{proc.pid}.")
    assert target.read_text() == "old\n"
    write_atomic(target, b"new\n")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_help_states_each_default_once(capsys):
    """``--help`` adds ``(default: X)`` only where the option's own help does not state it
    and there is one (no ``(default: None)`` or ``(default: False)``)."""
    with pytest.raises(SystemExit):
        main(["decode", "--help"])
    text = capsys.readouterr().out
    assert "(default: None)" not in text and "(default: False)" not in text
    assert "(default: 1)" in text  # --tp states none of its own
    block = text.split("\n  --max-context")[1].split("\n  --")[0]
    assert block.lower().count("default") == 1, block


def test_version_names_the_release_and_commit(capsys):
    import pimphony

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"pimphony {pimphony.__version__}")
