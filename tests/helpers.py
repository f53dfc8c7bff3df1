"""Helpers shared by the test modules."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pimphony.compiler.llm import ModelSpec
from pimphony.models.reference import issue_reference
from pimphony.sim.cli import main
from pimphony.sim.sweep_run import load_sweep, run_sweep

__all__ = [
    "ROOT",
    "assert_equals_serial",
    "cli_process",
    "drop_key",
    "figure_labels",
    "on_reference_engine",
    "quick_and_long",
    "ray_sweep_command",
    "file_error",
    "refused_edit",
    "run_cli",
    "run_examples",
    "run_report",
    "set_key",
    "stream_cases",
    "tiny_model",
    "write_toml",
]

#: The checkout the tests run from.
ROOT = Path(__file__).resolve().parents[1]


def tiny_model(**shape: Any) -> ModelSpec:
    """A made-up SwiGLU FP16 model ``tiny`` with a 4096-token window, of ``shape`` (layers,
    heads, kv_heads, hidden, intermediate, head_dim)."""
    return ModelSpec(
        **{"name": "tiny", "ffn": "swiglu", "context_window": 4096, "element_bytes": 2, **shape}
    )


def stream_cases(max_n: int) -> dict[str, st.SearchStrategy]:
    """Hypothesis strategies of a random command stream (``sim/verify/streams.py``): its seed,
    1 to ``max_n`` commands, 1-6 GBUF entries, 1-3 rows, and input gaps or none."""
    return {
        "seed": st.integers(0, 2**32 - 1),
        "n": st.integers(1, max_n),
        "entries": st.integers(1, 6),
        "rows": st.integers(1, 3),
        "gaps": st.booleans(),
    }


def run_examples(
    check: Callable[..., None], cases: dict[str, st.SearchStrategy], budget: settings
) -> None:
    """Run ``check(**case)`` on the random cases that ``budget`` (Hypothesis settings) lets
    Hypothesis draw from ``cases`` (argument -> strategy); a failing case is shrunk and shown."""
    budget(given(**cases)(check))()


def quick_and_long(names: Iterable[str], quick: settings, long: settings) -> list[Any]:
    """Parameters ``(name, budget)``: each of ``names`` at the ``quick`` budget (id ``name``)
    and at the ``long`` one, marked ``slow`` (id ``name-long``)."""
    return [
        param
        for name in names
        for param in (
            pytest.param(name, quick, id=name),
            pytest.param(name, long, id=f"{name}-long", marks=pytest.mark.slow),
        )
    ]


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


def figure_labels(monkeypatch, module: Any) -> dict[str, Any]:
    """Patch ``module.write_figure`` to record the labels of the first axes of each figure it
    writes (``title``, ``x``, ``y``, ``rows``: the y tick labels, ``legend``), then write it;
    return the record."""
    seen: dict[str, Any] = {}
    real = module.write_figure

    def capture(fig, path):
        ax = fig.axes[0]
        legend = ax.get_legend()
        seen.update(
            title=ax.get_title(),
            x=ax.get_xlabel(),
            y=ax.get_ylabel(),
            rows=[t.get_text() for t in ax.get_yticklabels()],
            legend=[t.get_text() for t in legend.get_texts()] if legend else [],
        )
        return real(fig, path)

    monkeypatch.setattr(module, "write_figure", capture)
    return seen


def refused_edit(
    tmp_path: Path,
    text: str,
    old: str,
    new: str,
    load: Callable[[Path], Any],
    error: type[Exception],
) -> str:
    """The message of the ``error`` that ``load`` raises on a file of ``text`` with ``old``
    (which must be in it) replaced once by ``new``."""
    assert old in text
    path = tmp_path / "bad.toml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(error) as exc:
        load(path)
    return str(exc.value)


def on_reference_engine(time_stream: Callable[..., Any]) -> Callable[..., Any]:
    """A back-end model's ``time_stream(cfg, stream)`` on the bank-rule engine's plain-Python
    reference (:func:`models.reference.issue_reference`) instead of the compiled kernel."""
    return functools.partial(time_stream, engine=issue_reference)


def set_key(text: str, key: str, value: str) -> str:
    """Replace the value of the one line ``key = ...`` (comments dropped)."""
    new, n = re.subn(rf"^{re.escape(key)}\s*=.*$", f"{key} = {value}", text, flags=re.M)
    assert n == 1, f"expected exactly one line for {key!r}, found {n}"
    return new


def drop_key(text: str, key: str) -> str:
    """Remove the one line ``key = ...``."""
    new, n = re.subn(rf"^{re.escape(key)}\s*=.*\n", "", text, flags=re.M)
    assert n == 1, f"expected exactly one line for {key!r}, found {n}"
    return new


def write_toml(tmp_path: Path, text: str, name: str = "bad.toml") -> Path:
    """``text`` written to ``tmp_path / name``."""
    path = tmp_path / name
    path.write_text(text)
    return path


def file_error(path: Path, load: Callable[[Path], Any], error: type[Exception]) -> str:
    """The message of the ``error`` that ``load`` raises on ``path``; it names the file."""
    with pytest.raises(error) as info:
        load(path)
    msg = str(info.value)
    assert str(path) in msg  # every file error names the file
    return msg


def cli_process(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``python -m pimphony.sim.cli args`` in a fresh process run in ``cwd``, with only this
    checkout on its ``PYTHONPATH``; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "pimphony.sim.cli", *map(str, args)], capture_output=True,
        text=True, cwd=cwd, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def run_report(capsys, tmp_path: Path, *argv: str) -> tuple[str, dict[str, Any], Path]:
    """Run ``pimphony argv --report <tmp_path>/r.json --plot <tmp_path>/r.png``, check that it
    succeeded without a word on stderr; return its stdout, the report and the plot's path."""
    report, plot = tmp_path / "r.json", tmp_path / "r.png"
    rc, out, err = run_cli(capsys, *argv, "--report", report, "--plot", plot)
    assert (rc, err) == (0, "")
    return out, json.loads(report.read_text()), plot


def ray_sweep_command(path: Path, out: Path) -> tuple[list[str], dict[str, str]]:
    """``pimphony sweep-run path --out out --workers 2 --json`` for a child process (a local
    Ray): the command and its environment (this checkout on ``PYTHONPATH``, Ray's auth off)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    cmd = [sys.executable, "-m", "pimphony.sim.cli", "sweep-run", str(path), "--out", str(out),
           "--workers", "2", "--json"]  # fmt: skip
    return cmd, env


def assert_equals_serial(path: Path, out: Path, points: int) -> None:
    """A serial run of sweep file ``path`` (into ``serial`` next to ``out``) computes all
    ``points`` points and writes the same table as the run in ``out``."""
    serial = out.parent / "serial"
    assert run_sweep(load_sweep(path), serial, serial=True)["done"] == points
    a = pq.read_table(out / "results.parquet")
    assert a.equals(pq.read_table(serial / "results.parquet"))
