"""Fixtures shared by the test modules, and a guard: no test may leave a file in the
repository (outside the ignored ``build/``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pimphony.models.config import HardwareConfig, load_preset

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cfg() -> HardwareConfig:
    """The aim-16ch hardware preset, the default configuration of most tests."""
    return load_preset("aim-16ch")


def _repository_status() -> str | None:
    """``git status`` of the repository (every untracked file listed); ``None`` outside git."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STATUS] = _repository_status()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test created, changed or deleted a file of the repository (a
    relative output path, a fixture written in place): issue 34's "no file outside the
    command's declared outputs changes"."""
    before = session.config.stash.get(_STATUS, None)
    after = _repository_status()
    if before is None or after is None or after == before:
        return
    new = sorted(set(after.splitlines()) - set(before.splitlines()))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            "the tests changed the repository (git status): " + "; ".join(new[:10]), red=True
        )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


_STATUS = pytest.StashKey[str | None]()
