"""Bad option values for every ``pimphony`` command, each run as a user runs it (issue 34).

The cases are drawn from each command's own parser (``pimphony CMD --help``), one bad value
per case on top of a small base invocation that runs in seconds: a wrong type, a value out of
range, NaN and infinities, an unknown choice, an input file that is missing, empty, a folder,
not UTF-8 or cut short, and an output onto the command's own input, onto a folder, into a
missing folder or into a read-only one. Each case runs in a fresh temporary folder as a
separate process under a timeout and is classified as :mod:`tests.fuzz_tally` classifies:
``ok`` (exit 0: printed for a person to judge), ``error`` (one clear ``error:`` line),
``vague``, ``traceback``, ``hang`` or ``lost`` (a file the user had, or a file of the
repository, changed). ``python -m tests.fuzz_tally --every`` runs them all.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pimphony.models.config import CONFIG_DIR

from tests.test_fuzz_commands import TINY_SWEEP

__all__ = ["BASES", "Case", "Outcome", "cases", "command_names", "run_case"]

ROOT = Path(__file__).resolve().parents[1]

#: A scheduler waveform of one issued command (``pimphony wave summary`` reads it).
TINY_VCD = """$timescale 1ns $end
$scope module top $end
$var wire 1 ! clk $end
$var wire 1 " o__valid $end
$var wire 1 # o__ready $end
$var wire 98 $ o__payload [97:0] $end
$upscope $end
$enddefinitions $end
#0
0!
1"
1#
b{} $
#1
1!
#2
0!
#3
1!
#4
0!
""".format("0" * 98)

#: command -> a small invocation that runs in seconds; each case adds one bad option to it.
#: ``IN:name`` is a file of that name made in the case's folder.
BASES: dict[str, str] = {
    "demo": "",
    "run": "--kernel gemv --dout 64 --din 64",
    "compile": "--kernel gemv --dout 64 --din 64 -o out.npz",
    "presets": "",
    "precompile": "--workers 1",
    "xpus": "",
    "sweep": "--kernel gemv --dims 64 --tokens 64",
    "fidelity": "",
    "buffer-sweep": "--tokens 64 --dh 64 --obuf 2 --groups 1",
    "size-report": "--contexts 1024",
    "capacity": "--requests 4",
    "decode": "--model llm-1.8b --context 1024",
    "serve": "--model llm-1.8b --requests 2 --output-tokens 2",
    "serve-fig4": "--output-tokens 1 --requests-per-slot 1 --modules 4 --workloads qmsum",
    "serve-fig17": "--outputs 1 --part a",
    "gpu-compare": "--model llm-1.8b --workloads qmsum --capacities 128",
    "gpu-fig20": "",
    "ablation": "--model llm-1.8b --requests 4",
    "energy": "--batch 1 --rows 7B-32K",
    "dex": "--rates 0.5 --tokens 256 --dh 64",
    "librapim": "--model llm-1.8b --batch 4 --context 128 --tp 1",
    "librapim-fig19": "--models gpt3-175b-4k --batches 32 --contexts 16",
    "librapim-energy": "--batches 32 --contexts 16",
    "attacc-energy": "",
    "librapim-figs": "--figure fig7",
    "sherpa": "--sl 64 --out-len 4",
    "pim-gemv": "--dout 64 --din 64",
    "tune": "--kernel gemv --shape 64,64 --budget 20 --verify 2",
    "dcc-figs": "--figure fig7 --panels GEMV",
    "dcc-fig8": "--models gpt3-13b-4k --batches 1 --points 2 --budget 20 --verify 2",
    "dcc-table2": "--test 1 --per-shape 10 --rounds 10",
    "dcc-lut": "--backend attacc --shape gemv:64,64 --per-shape 10 --rounds 10 --out lut.json",
    "sweep-run": "IN:tiny.toml --serial --out sweep-out",
    "rtl": "--out rtl-out",
    "area": "--blocks static_sched --out area-out",
    "wave summary": "IN:tiny.vcd",
    "wave record": "--block dcs --kernel gemv --dout 64 --din 64 --out-dir waves",
    "verify campaign": "--block dcs --streams 2 --repro-dir repro",
    "bench": "--dim 64 --repeat 1 --rtl-dim 64 --no-rtl --no-memory",
}

#: Options naming a preset of a registry: a shipped file of it, under ``configs/``.
REGISTRY_FILES: dict[str, str] = {
    "preset": "aim-16ch.toml", "energy": "energy/aim-cent.toml", "model": "models/llm-1.8b.toml",
    "xpu": "xpu/a100-80gb.toml", "gpu": "xpu/a100-80gb.toml", "workload": "workloads/qmsum.toml",
    "backend": "backends/attacc.toml", "layout": "layouts/lpddr5x-pim.toml",
    "host": "sherpa/galaxy-s24plus.toml",
}  # fmt: skip
#: Options (and positionals) whose value is a file the command reads, and a good one.
INPUT_FILES: dict[str, str] = {
    "stream": "stream.npz", "contexts": "lens.txt", "table": "table.json", "vcd": "tiny.vcd",
    "replay": "repro.json", "sweep": "tiny.toml",
}  # fmt: skip
BAD_NAMES = ["nope", ""]


@dataclass(frozen=True)
class Case:
    """One bad invocation: the command, what is bad (``--opt: why``) and the added argv."""

    command: str
    what: str
    argv: tuple[str, ...]
    read_only: str | None = None  # a folder of the case made read-only while it runs


@dataclass(frozen=True)
class Outcome:
    """How a case ended: its kind (``ok``, ``error``, ``vague``, ``traceback``, ``hang``,
    ``lost``), the last line of stderr and the seconds it took."""

    kind: str
    message: str
    seconds: float


def command_names() -> list[str]:
    """Every command of the ``pimphony`` table (a group's as ``wave summary``)."""
    from pimphony.sim.cli import COMMANDS

    names = []
    for c in COMMANDS:
        names += [f"{c.name} {s.name}" for s in c.subcommands] if c.subcommands else [c.name]
    return names


def _subparser(command: str) -> argparse.ArgumentParser:
    from pimphony.sim.cli import build_parser

    words = command.split()
    parser = build_parser(words)
    for word in words:
        parser = next(
            a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
        ).choices[word]
    return parser


def _int_bounds(action: argparse.Action) -> tuple[int, int] | None:
    name = getattr(action.type, "__name__", "")
    m = re.fullmatch(r"integer (-?[\d,]+) to (-?[\d,]+)", name)
    return (int(m[1].replace(",", "")), int(m[2].replace(",", ""))) if m else None


def _values(action: argparse.Action) -> list[tuple[str, str]]:
    """(why, value) of the bad values for an option taking one value."""
    from pimphony.sim.outputs import OUTPUT_OPTIONS

    dest = action.dest
    if dest in OUTPUT_OPTIONS:
        inside = dest not in ("out", "out_dir", "repro_dir")  # a file, not a folder
        return [  # (a missing folder is made: a good value)
            ("read-only folder", "RO/out.json"),
            ("a folder", "DIR") if inside else ("a file as the folder", "IN:empty.txt/x"),
            ("onto its own input", "OWN"),
        ]
    if action.choices is not None:
        return [("unknown choice", "nope")]
    bounds = _int_bounds(action)
    if bounds is not None:
        lo, hi = bounds
        return [("below range", str(lo - 1)), ("above range", str(hi + 1)), ("text", "x")]
    if action.type is int:
        return [("text", "x"), ("negative", "-1"), ("huge", "1000000000000")]
    if action.type is float:
        return [("text", "x"), ("nan", "nan"), ("inf", "inf"), ("negative", "-1")]
    if dest in REGISTRY_FILES:
        return [("unknown name", "nope"), ("a folder", "DIR"), ("non-UTF-8 file",
                "IN:latin1.toml"), ("truncated file", f"IN:cut-{dest}.toml")]  # fmt: skip
    if dest in INPUT_FILES:
        good = INPUT_FILES[dest]
        suffix = Path(good).suffix
        return [("missing file", f"missing{suffix}"), ("a folder", "DIR"),
                ("empty file", f"IN:empty{suffix}"), ("non-UTF-8 file", f"IN:latin1{suffix}"),
                ("truncated file", f"IN:cut-{good}")]  # fmt: skip
    # a list or a parsed value: comma-separated numbers or names
    return [("text", "x"), ("empty", ""), ("negative", "-1"), ("huge", "1000000000000")]


def cases(command: str) -> Iterator[Case]:
    """Every bad invocation of ``command``: an unknown option, then each option with each of
    its bad values."""
    yield Case(command, "unknown option", ("--no-such-option", "1"))
    parser = _subparser(command)
    inputs = [a for a in parser._actions if a.dest in REGISTRY_FILES or a.dest in INPUT_FILES]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flag = action.option_strings[-1] if action.option_strings else None
        if action.nargs == 0:
            yield Case(command, f"{flag}: given a value", (f"{flag}=x",))
            continue
        for why, value in _values(action):
            if value == "OWN":
                if not inputs:
                    continue
                src = inputs[0]
                src_flag = src.option_strings[-1] if src.option_strings else None
                own = f"IN:{INPUT_FILES.get(src.dest, f'own-{src.dest}.toml')}"
                argv = [*([src_flag] if src_flag else []), own, flag, own, "--force"]
                yield Case(command, f"{flag}: onto its input {src_flag or src.dest}",
                           tuple(argv))  # fmt: skip
                continue
            ro = "RO" if value.startswith("RO/") else None
            if flag is None:  # a positional: replaces the base's
                yield Case(command, f"{action.dest}: {why}", (value,), ro)
            else:
                yield Case(command, f"{flag}: {why}", (flag, value), ro)


def _make_inputs(tmp: Path) -> None:
    """The files a case may name (``IN:...``): good, empty, not UTF-8 and cut-short ones."""
    (tmp / "DIR").mkdir()
    (tmp / "RO").mkdir()
    (tmp / "tiny.toml").write_text(TINY_SWEEP)
    (tmp / "tiny.vcd").write_text(TINY_VCD)
    (tmp / "lens.txt").write_text("1024\n2048\n")
    for name in ("empty.toml", "empty.txt", "empty.npz", "empty.json", "empty.vcd"):
        (tmp / name).write_bytes(b"")
    latin = (CONFIG_DIR / "aim-16ch.toml").read_bytes().replace(b"#", b"\xe9#", 1)
    for suffix in (".toml", ".txt", ".npz", ".json", ".vcd"):
        (tmp / f"latin1{suffix}").write_bytes(latin if suffix == ".toml" else b"1\xe9\xff\n")
    for dest, shipped in REGISTRY_FILES.items():
        data = (CONFIG_DIR / shipped).read_bytes()
        (tmp / f"own-{dest}.toml").write_bytes(data)
        (tmp / f"cut-{dest}.toml").write_bytes(data[: len(data) // 2])
    for good in INPUT_FILES.values():
        path = tmp / good
        if not path.exists():
            _good_file(path)
        data = path.read_bytes()
        (tmp / f"cut-{good}").write_bytes(data[: len(data) // 2])


def _good_file(path: Path) -> None:
    """A valid input of ``path``'s kind (a command stream, a lookup table, a reproducer)."""
    import json

    from pimphony.compiler.kernels import compile_kernel
    from pimphony.models.config import load_preset
    from pimphony.models.isa import save_stream

    if path.suffix == ".npz":
        cfg = load_preset("aim-16ch")
        save_stream(path, compile_kernel(cfg, "gemv", d_out=64, d_in=64).commands, cfg)
    elif path.name == "table.json":
        from tests.test_fuzz_loaders import _table_file

        _table_file(path.parent).rename(path)
    elif path.name == "repro.json":
        if not (path.parent / "stream.npz").exists():
            _good_file(path.parent / "stream.npz")
        record = {"block": "dcs", "preset": "aim-16ch", "index": 0, "stream": "stream.npz",
                  "valid_gaps": None, "ready_pattern": None}  # fmt: skip
        path.write_text(json.dumps(record) + "\n")


_SKIP = {".git", "build", "__pycache__", ".hypothesis", ".venv", ".pytest_cache", ".ruff_cache"}


def _snapshot(folder: Path, skip: set[str] = _SKIP) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under ``folder`` (the repository: its folders of build
    and cache files left out)."""
    out = {}
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            p = os.path.join(root, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            out[os.path.relpath(p, folder)] = (st.st_size, st.st_mtime_ns)
    return out


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


#: A clear message names what was wrong (``tests/fuzz_tally.py``), or the value given.
_SPECIFIC = re.compile(r"\d|'|\"|--|=|\.toml|\.npz|\.txt|:\s*\S+\s*\(|must|allowed|expected")


def run_case(case: Case, timeout: float = 60, repo: Path = ROOT) -> Outcome:
    """Run ``case`` in a fresh temporary folder, as a separate process under ``timeout``
    seconds; the files made for it and the repository are compared before and after."""
    import time

    with tempfile.TemporaryDirectory(prefix="pimphony-fuzz-") as name:
        tmp = Path(name)
        _make_inputs(tmp)
        base = BASES[case.command].split()
        extra = list(case.argv)
        if extra and not extra[0].startswith("-") and base[:1] and base[0].startswith("IN:"):
            base = base[1:]  # a positional replaces the base's
        words = [*case.command.split(), *base]
        argv = [a.replace("IN:", "") for a in words + extra]
        before = _digest(tmp)
        repo_before = _snapshot(repo)
        python = [sys.executable, "-m", "pimphony.sim.cli", *argv]
        if case.read_only:
            ro = shlex.quote(str(tmp / case.read_only))
            python = ["unshare", "-m", "sh", "-c",
                      f"mount --bind {ro} {ro} && mount -o remount,ro,bind {ro} {ro} && "
                      'exec "$@"', "sh", *python]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(repo), "MPLBACKEND": "Agg"}
        env.pop("PIMPHONY_DEBUG", None)
        start = time.monotonic()
        try:
            done = subprocess.run(
                python, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout,
                errors="replace", start_new_session=True,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return Outcome("hang", f"over {timeout:g} s", timeout)
        seconds = time.monotonic() - start
        after = _digest(tmp)
        changed = [k for k, v in before.items() if after.get(k) != v]
        repo_after = _snapshot(repo)
        if repo_after != repo_before:
            moved = sorted(set(repo_after.items()) ^ set(repo_before.items()))[:3]
            return Outcome("lost", f"the repository changed: {moved}", seconds)
        if changed:
            return Outcome("lost", f"changed: {', '.join(changed)}", seconds)
        err = done.stderr.strip()
        last = err.splitlines()[-1] if err else ""
        if "Traceback" in err or "internal error" in err or done.returncode not in (0, 2):
            if done.returncode == 1 and "error: " in last and "internal" not in last:
                pass  # a failure the command reports (a reproducer that still fails)
            else:
                return Outcome("traceback", f"exit {done.returncode}: {err[-300:]}", seconds)
        if done.returncode == 0:
            return Outcome("ok", last, seconds)
        if "error: " not in last:
            return Outcome("vague", err[-200:], seconds)
        message = last.split("error: ", 1)[1]
        given = [a.replace("IN:", "") for a in case.argv if len(a) > 1 and not a.startswith("-")]
        clear = _SPECIFIC.search(message) or any(a in message for a in given)
        return Outcome("error" if clear else "vague", message, seconds)
