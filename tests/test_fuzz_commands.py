"""Generated option vectors for the newer commands (hypothesis): ``serve``, ``sweep-run``,
``tune``, ``sherpa`` and ``librapim`` end in exit 0 or one ``error:`` line, never an internal
error, and leave the user's files as they were (issue 34).

Each command gets a fixed small base (a small model, two requests, a tiny sweep) so that a
vector the command accepts runs in seconds; the generated options are appended after it (the
last occurrence of an option wins). ``make test`` runs a few examples per command; the
``slow`` variant 400.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import run_cli
from tests.test_fuzz_cli import _check

QUICK = settings(
    max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), database=None
)
LONG = settings(
    max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None
)

TINY_SWEEP = """name = "tiny"
command = "run"
[base]
kernel = "gemv"
din = 64
[grid]
dout = [32, 64]
[outputs]
cycles = "cycles"
"""

#: command -> (fixed base argv, {option: values to draw from besides the generic ones}).
COMMANDS: dict[str, tuple[list[str], dict[str, list[str]]]] = {
    "serve": (
        ["--model", "llm-1.8b", "--requests", "2", "--output-tokens", "2"],
        {
            "--system": ["pim", "gpu", "xpu+pim", "neupims", "librapim", "nope"],
            "--rate": ["1", "0", "-1", "nan", "1e-12", "1e12"],
            "--requests": ["1", "0", "3", "x"],
            "--output-tokens": ["1", "0", "4", "1e9"],
            "--tp": ["1", "2", "3", "0"],
            "--pp": ["1", "2", "0"],
            "--memory": ["lazy", "static", "x"],
            "--max-context": ["128", "0", "100000000"],
            "--gpus": ["1", "2", "0"],
            "--gpu-memory-fraction": ["0.5", "0", "1.5", "nan"],
            "--workload": ["qmsum", "alpaca", "nope", "missing.jsonl"],
            "--seed": ["0", "-1", "x"],
        },
    ),
    "sweep-run": (
        ["SWEEP", "--serial"],
        {
            "--workers": ["1", "0", "-2", "x"],
            "--out": ["OUT", "SWEEP", ""],
            "--allow-failures": [],
        },
    ),
    "tune": (
        ["--kernel", "gemv", "--shape", "64,64", "--budget", "20", "--verify", "2"],
        {
            "--kernel": ["gemv", "qk", "red", "nope"],
            "--shape": ["64,64", "0,64", "1,2,3", "x", "64", "4,64,64", "99999999,64"],
            "--backend": ["hbm-pim", "attacc", "aim", "nope"],
            "--top": ["1", "0", "-1"],
            "--budget": ["1", "0", "20", "x"],
            "--verify": ["0", "1", "-1"],
            "--placement": ["resident", "every-call", "x"],
            "--strategy": ["staged", "direct", "x"],
        },
    ),
    "sherpa": (
        ["--sl", "64", "--out-len", "4"],
        {
            "--sl": ["64", "0", "64,128", "x", "1000000", "-5"],
            "--out-len": ["4", "0", "2,3", "1000000"],
            "--device-memory": ["8", "0", "-1", "inf", "0.001"],
            "--host": ["galaxy-s24plus", "nope"],
            "--strategy": ["owr", "ddb", "x"],
        },
    ),
    "librapim": (
        ["--model", "llm-1.8b", "--batch", "4", "--context", "128", "--tp", "1"],
        {
            "--batch": ["1", "4", "0", "5000"],
            "--context": ["1", "128", "0", "100000000"],
            "--groups": ["1", "2", "0", "9"],
            "--tp": ["1", "2", "3", "0"],
            "--system": ["npu+aim", "neupims", "librapim", "nope"],
            "--sched": ["static", "dcs", "x"],
            "--step": ["0", "3", "-1"],
            "--workload": ["alpaca", "nope"],
        },
    ),
}

generic = st.sampled_from(["0", "-1", "x", "", "nan", "inf", "1e9", "1"])


def _vector(command: str):
    options = COMMANDS[command][1]
    pair = st.sampled_from(sorted(options)).flatmap(
        lambda o: (
            (st.sampled_from(options[o]) | generic).map(lambda v: [o, v])
            if options[o]
            else st.just([o])
        )
    )
    return st.lists(pair, max_size=3).map(lambda pairs: [x for p in pairs for x in p])


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _run(command: str, tmp: Path, capsys, extra: list[str]) -> None:
    sweep = tmp / "tiny.toml"
    sweep.write_text(TINY_SWEEP)
    subs = {"SWEEP": str(sweep), "OUT": str(tmp / "out")}
    argv = [command, *(subs.get(a, a) for a in COMMANDS[command][0] + extra)]
    if command in ("serve", "tune", "librapim", "sherpa") and "--json" not in argv:
        argv.append("--json")
    if command == "serve":
        argv += ["--out", str(tmp / "serve.json"), "--force"]
    before = _digest(tmp)
    with contextlib.chdir(tmp):  # relative outputs (``--out x``, build/...) land in tmp
        rc, out, err = run_cli(capsys, *argv)
    _check(rc, out, err)
    after = _digest(tmp)
    for name, digest in before.items():  # what the user made is untouched
        assert after.get(name) == digest, (name, argv)


def _tests(command: str):
    def make(budget):
        @budget
        @given(extra=_vector(command))
        def test(tmp_path_factory, capsys, extra):
            _run(command, tmp_path_factory.mktemp(command.replace("-", "_")), capsys, extra)

        return test

    return make(QUICK), pytest.mark.slow(make(LONG))


test_serve_options, test_serve_options_long = _tests("serve")
test_sweep_run_options, test_sweep_run_options_long = _tests("sweep-run")
test_tune_options, test_tune_options_long = _tests("tune")
test_sherpa_options, test_sherpa_options_long = _tests("sherpa")
test_librapim_options, test_librapim_options_long = _tests("librapim")
