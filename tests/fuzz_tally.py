"""Tally of generated bad inputs: how many became clear errors, tracebacks, hangs or wrong output.

``python -m tests.fuzz_tally --examples 100`` draws that many cases from each strategy of
``tests/test_fuzz_cli.py`` (presets, model files, damaged stream files, context files, option
vectors), ``tests/test_fuzz_loaders.py`` (``load:NAME``: 13 loaders' damaged files) and
``tests/test_fuzz_commands.py`` (``cmd:NAME``: option vectors of serve, sweep-run, tune,
sherpa, librapim), runs each through the command line in-process and prints one row per
strategy: ``ok`` (exit 0, sane output), ``error`` (exit 2 with one ``pimphony <cmd>: error:``
line that names a value or field), ``vague`` (exit 2, but the message names neither), ``traceback``
(any other exit or a Python traceback), ``hang`` (over ``--timeout`` seconds) and ``wrong``
(exit 0 but a check on the output or on the user's files failed). Vague, traceback, hang and
wrong should all be 0; the messages of vague cases are printed so a person can judge them.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings

from tests import fuzz_every_command as every
from tests import test_fuzz_cli as fuzz
from tests import test_fuzz_commands as commands
from tests import test_fuzz_loaders as loaders

__all__ = ["STRATEGIES", "main", "tally", "tally_command"]


def _loader_case(name: str):
    """A damaged file through loader ``name`` (``tests/test_fuzz_loaders.py``), reported as a
    command reports it: a refusal as one ``error:`` line on stderr, any other exception as a
    traceback."""

    def case(tmp: Path, capsys, damage) -> None:
        try:
            message = loaders._check_loader(name, tmp, damage)
        except AssertionError:
            raise
        except Exception as exc:
            raise AssertionError(f"Traceback: {type(exc).__name__}: {exc}") from exc
        if message is not None:
            print(f"pimphony load: error: {message}", file=sys.stderr)
        capsys.readouterr()

    return case


STRATEGIES = {
    "preset": (fuzz.presets, fuzz._preset_case),
    "model": (fuzz.models, fuzz._model_case),
    "stream": (fuzz.damage, fuzz._stream_case),
    "contexts": (fuzz.lines, fuzz._contexts_case),
    "options": (fuzz.argvs, fuzz._argv_case),
    **{f"load:{n}": (loaders.damages, _loader_case(n)) for n in loaders.LOADERS},
    **{
        f"cmd:{c}": (
            commands._vector(c),
            lambda tmp, capsys, extra, c=c: commands._run(c, tmp, capsys, extra),
        )
        for c in commands.COMMANDS
    },
}
# A clear message names what was wrong: a value, a field or option, a file, or a bound.
_SPECIFIC = re.compile(r"\d|'|\"|--|=|\.toml|\.npz|\.txt|:\s*\S+\s*\(|must|allowed|expected")


class _Capsys:
    """Stand-in for pytest's ``capsys``: what the last command printed."""

    def __init__(self, out: io.StringIO, err: io.StringIO) -> None:
        self.out, self.err, self.last = out, err, ("", "")

    def readouterr(self) -> tuple[str, str]:
        self.last = (self.out.getvalue(), self.err.getvalue())
        self.out.seek(0), self.out.truncate(), self.err.seek(0), self.err.truncate()
        return self.last


class _HangError(Exception):
    pass


def _alarm(_signum, _frame):
    raise _HangError


def tally(name: str, examples: int, timeout: int = 60) -> tuple[Counter, list[str], list[str]]:
    """Outcome counts of ``examples`` generated cases of strategy ``name``, the vague
    messages and every error message."""
    strategy, case = STRATEGIES[name]
    counts: Counter = Counter()
    vague: list[str] = []
    messages: list[str] = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(value=strategy)
    def probe(value) -> None:
        out, err = io.StringIO(), io.StringIO()
        capsys = _Capsys(out, err)
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(timeout)
        try:
            with (
                tempfile.TemporaryDirectory() as tmp,
                contextlib.redirect_stdout(out),
                contextlib.redirect_stderr(err),
            ):
                case(Path(tmp), capsys, value)
        except _HangError:
            counts["hang"] += 1
            return
        except AssertionError as exc:
            text = str(exc)
            bad_exit = text.startswith("exit ") or "Traceback" in text or "internal" in text
            counts["traceback" if bad_exit else "wrong"] += 1
            return
        finally:
            signal.alarm(0)
        stdout, stderr = capsys.last
        if "error: " not in stderr:
            counts["ok"] += 1
            return
        lines = stderr.strip().splitlines()
        if "error: " not in lines[-1]:  # the message broken over lines: vague at best
            counts["vague"] += 1
            vague.append(repr(stderr.strip()[-200:]))
            return
        message = lines[-1].split("error: ", 1)[1]
        messages.append(message)
        if _SPECIFIC.search(message):
            counts["error"] += 1
        else:
            counts["vague"] += 1
            vague.append(message)

    probe()
    return counts, vague, messages


def tally_command(
    command: str, timeout: float = 60, jobs: int = 1
) -> tuple[Counter, list[tuple[every.Case, every.Outcome]]]:
    """Outcome counts of every bad invocation of ``command`` (``tests/fuzz_every_command.py``),
    and each case with its outcome."""
    from concurrent.futures import ThreadPoolExecutor

    todo = list(every.cases(command))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        outcomes = list(pool.map(lambda c: every.run_case(c, timeout), todo))
    return Counter(o.kind for o in outcomes), list(zip(todo, outcomes, strict=True))


def _every(args: argparse.Namespace) -> int:
    """``--every``: the table of every command's bad invocations."""
    kinds = ("ok", "error", "vague", "traceback", "hang", "wrong", "lost")
    print(f"{'command':<18}{'cases':>7}" + "".join(f"{k:>10}" for k in kinds), flush=True)
    total: Counter = Counter()
    for command in args.command or every.command_names():
        counts, done = tally_command(command, args.timeout, args.jobs)
        total.update(counts)
        n = sum(counts.values())
        print(f"{command:<18}{n:>7}" + "".join(f"{counts[k]:>10}" for k in kinds), flush=True)
        for case, outcome in done:
            bad = outcome.kind not in ("error",) and case.what != "base"
            if bad or (case.what == "base" and outcome.kind != "ok") or args.verbose:
                shown = " ".join(case.argv)
                print(f"    {outcome.kind}: {case.what} [{shown}] -> {outcome.message[-160:]}")
    n = sum(total.values())
    print(f"{'all':<18}{n:>7}" + "".join(f"{total[k]:>10}" for k in kinds))
    return 0 if not any(total[k] for k in kinds[2:]) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz_tally", description=__doc__)
    parser.add_argument("--examples", type=int, default=100, help="cases per strategy")
    parser.add_argument("--timeout", type=int, default=60, help="seconds before a case hangs")
    parser.add_argument("--only", choices=sorted(STRATEGIES), action="append")
    parser.add_argument("--messages", type=Path, help="write every distinct error message here")
    parser.add_argument(
        "--every", action="store_true",
        help="instead: bad values for every option of every command (tests/fuzz_every_command.py)",
    )  # fmt: skip
    parser.add_argument("--command", action="append", help="with --every: only this command")
    parser.add_argument("--jobs", type=int, default=1, help="with --every: cases run at once")
    parser.add_argument("--verbose", action="store_true", help="with --every: print every case")
    args = parser.parse_args(argv)
    if args.every:
        return _every(args)
    kinds = ("ok", "error", "vague", "traceback", "hang", "wrong")
    print(f"{'strategy':<18}{'cases':>7}" + "".join(f"{k:>11}" for k in kinds))
    total: Counter = Counter()
    seen: set[str] = set()
    for name in args.only or STRATEGIES:
        counts, vague, messages = tally(name, args.examples, args.timeout)
        seen.update(f"{name}: {m}" for m in messages)
        total.update(counts)
        n = sum(counts.values())
        print(f"{name:<18}{n:>7}" + "".join(f"{counts[k]:>11}" for k in kinds), flush=True)
        for message in sorted(set(vague))[:10]:
            print(f"    vague: {message}")
    n = sum(total.values())
    print(f"{'all':<18}{n:>7}" + "".join(f"{total[k]:>11}" for k in kinds))
    if args.messages:
        args.messages.write_text("\n".join(sorted(seen)) + "\n")
    return 0 if not (total["traceback"] or total["hang"] or total["wrong"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
