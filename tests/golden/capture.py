"""Golden outputs: what pimphony prints for a fixed set of commands, kept to detect any change.

``python -m tests.golden.capture`` rewrites ``tests/golden/*.out`` from the current code;
``tests/test_golden.py`` reruns every case and diffs it against the saved file. A change that
moves a number must update the golden file on purpose (and say so in its commit).

Each case runs in a fresh temporary working directory (so default ``build/`` paths are the same
every time); wall-clock fields are masked; Verilog is kept as its SHA-256 (``dpa.v`` is 2 MB).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CASES", "GOLDEN_DIR", "GoldenCase", "capture", "main"]

GOLDEN_DIR = Path(__file__).resolve().parent
ROOT = GOLDEN_DIR.parents[1]
_WALL = re.compile(r'("wall_seconds"|"seconds"): [0-9.e+-]+')
_BUILD = re.compile(r'("version"|"commit"): ("[^"]*"|null)')  # which build produced it
_WALL_TEXT = re.compile(r"\b(in) [0-9]+\.[0-9]+ s$", re.MULTILINE)

_DECODE = "decode --model llm-7b"
_RTL = "rtl"


@dataclass(frozen=True)
class GoldenCase:
    """One saved output: ``argv`` for ``pimphony``; ``slow`` cases run under ``make test-all``."""

    name: str
    argv: tuple[str, ...]
    slow: bool = False


def _case(name: str, args: str, slow: bool = False) -> GoldenCase:
    return GoldenCase(name, tuple(args.split()), slow)


CASES: tuple[GoldenCase, ...] = (
    _case("demo", "demo"),
    _case("demo-json", "demo --json"),
    _case("run-qk-gqa4", "run --kernel qk --tokens 4096 --dh 128 --gqa-group 4 --sched dcs --json"),
    _case("run-gemv-pingpong", "run --kernel gemv --dout 2048 --din 1024 --sched pingpong --json"),
    _case("sweep-gemv", "sweep --json"),
    _case("sweep-qk", "sweep --kernel qk --dims 48,64,128,256 --json"),
    _case("presets", "presets"),
    _case(
        "decode-tcp-dcs-lazy-tp2pp2",
        f"{_DECODE} --context 32768 --batch 4 --modules 4 --tp 2 --pp 2 --partition tcp "
        "--sched dcs --memory lazy --json",
    ),
    _case(
        "decode-hfp-static-static",
        f"{_DECODE} --context 16384 --batch 2 --max-context 16384 --partition hfp --sched static "
        "--memory static --json",
    ),
    _case(
        "decode-qmsum-auto-pingpong",
        f"{_DECODE} --workload qmsum --batch auto --tp 4 --sched pingpong --json",
    ),
    _case("decode-text", f"{_DECODE} --context 8192 --batch 3 --tp 2"),
    _case("ablation-json", "ablation --json --requests 32"),
    _case("dex-json", "dex --json --quiet"),
    _case("size-report-json", "size-report --json"),
    _case("capacity", "capacity"),
    _case("rtl-verilog", _RTL),
    _case("area-json", "area --json", slow=True),
)


_LEGACY: dict[str, str] = {}


def _pimphony(argv: tuple[str, ...]) -> list[str]:
    if argv[0] in _LEGACY:  # before the move these were separate entry points
        return [sys.executable, "-m", _LEGACY[argv[0]], *argv[1:]]
    return [sys.executable, "-m", "pimphony.sim.cli", *argv]


def capture(case: GoldenCase) -> str:
    """Run ``case`` in a fresh directory; its output with wall-clock fields masked."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory(prefix="pimphony-golden-") as tmp:
        proc = subprocess.run(
            _pimphony(case.argv), cwd=tmp, env=env, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"golden case {case.name!r} exited {proc.returncode}:\n{proc.stderr[-2000:]}"
            )
        out = proc.stdout
        if case.argv[0] == _RTL:
            rtl = Path(tmp) / "build" / "rtl"
            out = "".join(
                f"{p.name} {hashlib.sha256(p.read_bytes()).hexdigest()}\n"
                for p in sorted(rtl.glob("*.v"))
            )
    out = _WALL_TEXT.sub(r"\1 <wall> s", out.replace(tmp, "<tmp>"))
    out = _BUILD.sub(r'\1: "<build>"', out)
    return _WALL.sub(r"\1: null", out)


def golden_path(case: GoldenCase) -> Path:
    """Where ``case``'s saved output lives."""
    return GOLDEN_DIR / f"{case.name}.out"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the golden files (all, or the named cases)."""
    names = set(argv if argv is not None else sys.argv[1:])
    for case in CASES:
        if names and case.name not in names:
            continue
        golden_path(case).write_text(capture(case))
        print(f"wrote {golden_path(case).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
