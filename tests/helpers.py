"""Helpers shared by the test modules."""

from __future__ import annotations

from pimphony.sim.cli import main

__all__ = ["run_cli"]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """Run ``pimphony argv`` in-process; return (exit code, stdout, stderr).

    argparse errors raise ``SystemExit``; their code is returned like any other.
    """
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err
