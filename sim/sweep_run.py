"""``pimphony sweep-run``: design-space sweeps as Ray tasks, cached per point, resumable.

A sweep file (``configs/sweeps/NAME.toml``, ``docs/sweeps.md``) names a ``pimphony`` command,
the options every point shares (``[base]``), a grid of options (``[grid]``) and a list of
points (``[[points]]``; the points are every grid combination with every listed point), the
headline outputs to tabulate (``[outputs]``: column = dotted path into the point's ``--json``
report) and an optional plot.
Every point is checked with the command's own parser before anything runs.

Each point runs ``pimphony COMMAND OPTIONS --json`` in a Ray task through
:mod:`sim.parallel` (a local Ray on this machine's cores by default, or the cluster at
``--address``; ``--serial``, or a single point to run, runs in this process). Its report is
cached under ``OUT/points/KEY.json``, ``KEY`` a hash of its fully resolved inputs: the
command and options, the contents of any file an option names, of ``configs/`` and of
pimphony's source, so an edited input or a code change reruns the point and nothing else
does.
A rerun or an interrupted sweep therefore resumes without recomputing. A failing point is
recorded with its error and does not stop the sweep (failures are not cached: a rerun tries
them again), but the command exits non-zero (:data:`EXIT_POINTS_FAILED`) unless
``--allow-failures`` is given and some point succeeded. A point whose Ray worker dies is
retried (:data:`WORKER_RETRIES`); a damaged cached point (not JSON, another key's) is rerun
and reported; an ``[outputs]`` path no report has is refused by name.
The results table ``OUT/results.parquet`` has one row per point: every option,
every output, ``status`` and ``error``; it is rebuilt from the cache on every run, so a
resumed sweep, a fresh one and a ``--serial`` one give identical tables.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pimphony.models.config import (
    CONFIG_DIR,
    PresetFolder,
    check_value,
    reject_unknown_keys,
    require_key,
)
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import BUILD_DIR, pyplot, write_atomic, write_figure
from pimphony.sim.parallel import WORKER_RETRIES, TaskFailed, unordered_map
from pimphony.sim.provenance import provenance

__all__ = [
    "SWEEP_DIR",
    "SweepError",
    "SweepFile",
    "EXIT_POINTS_FAILED",
    "WORKER_RETRIES",
    "add_arguments",
    "exit_status",
    "inputs_key",
    "load_sweep",
    "results_table",
    "run",
    "run_point",
    "run_sweep",
    "unknown_outputs",
]

ROOT = CONFIG_DIR.parent  # the repository, or the installed pimphony package
_SOURCE_PACKAGES = ("models", "compiler", "sim", "rtl")
_SCALAR = (str, int, float, bool)
#: Exit status when points failed (``--allow-failures`` makes it 0 unless all failed).
EXIT_POINTS_FAILED = 3


class SweepError(PimphonyError, ValueError):
    """A sweep file or a sweep's output directory is malformed."""


_SWEEPS = PresetFolder("sweeps", "sweep", SweepError)
SWEEP_DIR = _SWEEPS.folder


@dataclass(frozen=True)
class SweepFile:
    """A parsed sweep: its command, points (option dicts, in order), outputs and plot."""

    name: str
    command: str
    points: tuple[dict[str, Any], ...]
    outputs: dict[str, str]
    plot: dict[str, str] | None
    source: str


def _options_of(table: Any, where: str) -> dict[str, Any]:
    table = check_value(where, table, dict, SweepError)
    for k, v in table.items():
        if not isinstance(v, _SCALAR):
            raise SweepError(f"{where}.{k} = {v!r}: must be a string, number or boolean")
    return dict(table)


def argv_of(command: str, options: dict[str, Any]) -> list[str]:
    """``[command, --opt value, ...]``: ``true`` is a bare flag, ``false`` leaves it out."""
    argv = [command]
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            argv.append(flag)
        elif v is not False:
            argv += [flag, str(v)]
    return argv


def _check_point(command: str, options: dict[str, Any], label: str) -> None:
    """Parse the point's argv with the real parser; its message on failure."""
    from pimphony.sim.cli import build_parser

    argv = [*argv_of(command, options), "--json"]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            build_parser(argv).parse_args(argv)
    except SystemExit:
        msg = err.getvalue().strip().splitlines()
        raise SweepError(
            f"{label} ({' '.join(argv)}): {msg[-1] if msg else 'refused by the parser'}"
        ) from None


def available_sweeps() -> list[str]:
    """Names of the shipped sweep files."""
    return _SWEEPS.names()


def load_sweep(name_or_path: str | Path) -> SweepFile:
    """A sweep file by name (``configs/sweeps/``) or path, every point checked."""
    from pimphony.sim.cli import COMMANDS

    path, table = _SWEEPS.load(name_or_path)
    head = f"{path}: "
    reject_unknown_keys(
        table,
        ["name", "command", "description", "base", "grid", "points", "outputs", "plot"],
        SweepError,
        head,
    )
    name = check_value(f"{head}name", require_key(table, "name", SweepError, head), str, SweepError)
    command = require_key(table, "command", SweepError, head)
    known = [c.name for c in COMMANDS if not c.subcommands and c.name != "sweep-run"]
    if command not in known:
        raise SweepError(f"{head}command = {command!r}: unknown; allowed: {', '.join(known)}")
    base = _options_of(table.get("base", {}), f"{head}base")
    grid = check_value(f"{head}grid", table.get("grid", {}), dict, SweepError)
    axes = []
    for k, values in grid.items():
        if not isinstance(values, list) or not values:
            raise SweepError(f"{head}grid.{k} = {values!r}: must be a non-empty list")
        for v in values:
            _options_of({k: v}, f"{head}grid")
        if k in base:
            raise SweepError(f"{head}grid.{k}: also in [base]; give it in one place")
        axes.append([(k, v) for v in values])
    listed = table.get("points", [])
    if not isinstance(listed, list):
        raise SweepError(f"{head}points: must be an array of tables ([[points]])")
    listed = [_options_of(p, f"{head}points[{i}]") for i, p in enumerate(listed)] or [{}]
    for i, p in enumerate(listed):
        both = sorted(set(p) & (set(base) | set(grid)))
        if both:
            raise SweepError(f"{head}points[{i}].{both[0]}: also in [base] or [grid]")
    # Every grid combination with every listed point (no list: one empty point).
    points = [{**base, **dict(combo), **p} for combo in itertools.product(*axes) for p in listed]
    outputs = check_value(
        f"{head}outputs", require_key(table, "outputs", SweepError, head, section=True), dict,
        SweepError,
    )  # fmt: skip
    for col, where in outputs.items():
        check_value(f"{head}outputs.{col} = {where!r}", where, str, SweepError)
    plot = table.get("plot")
    if plot is not None:
        plot = check_value(f"{head}plot", plot, dict, SweepError)
        reject_unknown_keys(
            plot, ["x", "y", "hue", "reduce", "title", "xlabel", "ylabel"], SweepError,
            f"{head}[plot] ",
        )  # fmt: skip
        columns = {*outputs, *(k for p in points for k in p)}
        for key in ("x", "y", "title", "xlabel", "ylabel"):
            check_value(f"{head}plot.{key}", require_key(plot, key, SweepError, f"{head}[plot] "),
                        str, SweepError)  # fmt: skip
        for key in ("x", "y", "hue"):
            if key in plot and plot[key] not in columns:
                raise SweepError(
                    f"{head}plot.{key} = {plot[key]!r}: not a column; allowed: "
                    f"{', '.join(sorted(columns))}"
                )
        if plot.get("reduce", "max") not in ("max", "min"):
            raise SweepError(f"{head}plot.reduce = {plot['reduce']!r}: allowed: max, min")
    for i, p in enumerate(points):
        _check_point(command, p, f"{head}point {i}")
    return SweepFile(name, command, tuple(points), dict(outputs), plot, str(path))


def _digest(paths: Iterable[Path], root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def inputs_digest() -> str:
    """Hash of everything a point's result depends on besides its options: ``configs/`` and
    pimphony's source."""
    files = [p for p in CONFIG_DIR.rglob("*.toml")]
    for pkg in _SOURCE_PACKAGES:
        files += [p for p in (ROOT / pkg).rglob("*.py")]
    return _digest(files, ROOT)


def _named_files(options: dict[str, Any]) -> dict[str, str]:
    """SHA-256 of every file an option value names (a model's config.json, a contexts file,
    a preset given by path): editing one of them changes the point."""
    out = {}
    for key, value in options.items():
        if isinstance(value, str) and Path(value).is_file():
            out[key] = hashlib.sha256(Path(value).read_bytes()).hexdigest()
    return out


def inputs_key(command: str, options: dict[str, Any], digest: str) -> str:
    """The cache key of a point: its command, options, the contents of the files they name
    and the inputs digest (``configs/`` and pimphony's source)."""
    text = json.dumps(
        {"command": command, "options": options, "files": _named_files(options), "inputs": digest},
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def run_point(argv: list[str]) -> dict[str, Any]:
    """Run ``pimphony argv --json`` in this process: ``{"ok", "report" | "error", "seconds"}``."""
    from pimphony.sim.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--json"])
    seconds = time.perf_counter() - t0
    if code != 0:
        lines = err.getvalue().strip().splitlines()
        return {"ok": False, "error": lines[-1] if lines else f"exit status {code}",
                "seconds": seconds}  # fmt: skip
    try:
        return {"ok": True, "report": json.loads(out.getvalue()), "seconds": seconds}
    except json.JSONDecodeError as exc:
        return {"ok": False, "error": f"the report is not JSON: {exc}", "seconds": seconds}


#: What :func:`_lookup` returns for a path a report does not have.
_MISSING = object()


def _lookup(report: Any, path: str) -> Any:
    """The value at ``path`` (dotted keys and list indices) in ``report``, JSON-encoded when
    not a scalar; :data:`_MISSING` when the report has no such field."""
    for part in path.split("."):
        if isinstance(report, dict) and part in report:
            report = report[part]
        elif isinstance(report, list) and part.isdigit() and int(part) < len(report):
            report = report[int(part)]
        else:
            return _MISSING
    return report if isinstance(report, _SCALAR) or report is None else json.dumps(report)


def _cached_report(path: Path, key: str) -> dict[str, Any] | None:
    """The report cached at ``path`` for ``key``; ``None`` when there is none or it is
    damaged (not JSON, not a point's record, another key's), so that the point reruns."""
    try:
        body = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # unreadable, not UTF-8, not JSON
        return None
    if (
        not isinstance(body, dict)
        or body.get("key") != key
        or not isinstance(body.get("report"), dict)
    ):
        return None
    return body["report"]


def unknown_outputs(sweep: SweepFile, reports: Iterable[dict[str, Any]]) -> dict[str, str]:
    """The ``[outputs]`` (column -> path) that no report has (a misspelt field)."""
    reports = list(reports)
    return {
        col: path
        for col, path in sweep.outputs.items()
        if all(_lookup(r, path) is _MISSING for r in reports)
    }


def results_table(
    sweep: SweepFile,
    keys: list[str],
    reports: dict[str, dict[str, Any] | None],
    errors: dict[str, str],
):
    """The results as a ``pyarrow.Table``: one row per point, in the sweep's order
    (``reports``: each key's cached report, ``None`` when it failed)."""
    import pyarrow as pa

    option_names = list(dict.fromkeys(k for p in sweep.points for k in p))
    rows = []
    for i, (point, key) in enumerate(zip(sweep.points, keys, strict=True)):
        row: dict[str, Any] = {"point": i, "key": key}
        row.update({k: point.get(k) for k in option_names})
        report = reports[key]
        for c, p in sweep.outputs.items():
            value = _MISSING if report is None else _lookup(report, p)
            row[c] = None if value is _MISSING else value
        row["status"] = "ok" if report is not None else "failed"
        row["error"] = errors.get(key, "") if report is None else ""
        rows.append(row)
    return pa.Table.from_pylist(rows)


def _check_out(out: Path, sweep: SweepFile, force: bool) -> None:
    marker = out / "sweep.json"
    if marker.exists():
        owner = _marker_owner(marker)
        if owner is None and not force:
            raise SweepError(
                f"{marker} is damaged (not a sweep's marker), so {out} may hold another "
                f"sweep's results; pass --force to reuse it as {sweep.name!r}'s (its cached "
                "points are checked one by one and damaged ones rerun)"
            )
        if owner is not None and owner != sweep.name and not force:
            raise SweepError(
                f"{out} holds the results of sweep {owner!r}, not {sweep.name!r}; choose "
                "another --out or pass --force"
            )
    elif out.exists() and any(out.iterdir()) and not force:
        raise SweepError(f"{out} exists and is not a sweep's directory; pass --force to use it")


def _marker_owner(marker: Path) -> str | None:
    """The sweep name ``OUT/sweep.json`` records; ``None`` when the marker is damaged."""
    try:
        body = json.loads(marker.read_bytes())
    except (OSError, ValueError):
        return None
    name = body.get("name") if isinstance(body, dict) else None
    return name if isinstance(name, str) else None


def run_sweep(
    sweep: SweepFile,
    out: Path,
    *,
    serial: bool = False,
    address: str | None = None,
    workers: int | None = None,
    progress: Callable[[dict[str, int], float], None] | None = None,
) -> dict[str, Any]:
    """Run every point of ``sweep`` not cached under ``out``; return the summary (counts,
    failures, the table's path). ``progress(counts, elapsed)`` after each point."""
    (out / "points").mkdir(parents=True, exist_ok=True)
    write_atomic(
        out / "sweep.json", json.dumps({"name": sweep.name, "file": sweep.source}).encode()
    )
    digest = inputs_digest()
    keys = [inputs_key(sweep.command, p, digest) for p in sweep.points]
    todo = {}
    damaged = []
    for point, key in zip(sweep.points, keys, strict=True):
        cached = out / "points" / f"{key}.json"
        if key in todo or _cached_report(cached, key) is not None:
            continue
        if cached.exists():  # damaged: rerun the point
            damaged.append(key)
        todo[key] = argv_of(sweep.command, point)
    counts = {"points": len(keys), "cached": len(keys) - len(todo), "done": 0, "failed": 0,
              "recomputed": len(damaged)}  # fmt: skip
    errors: dict[str, str] = {}
    t0 = time.perf_counter()

    def record(key: str, result: dict[str, Any]) -> None:
        if result["ok"]:
            body = {"key": key, "argv": todo[key], "seconds": result["seconds"],
                    "report": result["report"]}  # fmt: skip
            write_atomic(out / "points" / f"{key}.json", json.dumps(body, indent=1).encode())
            counts["done"] += 1
        else:
            errors[key] = result["error"]
            counts["failed"] += 1
        if progress:
            progress(counts, time.perf_counter() - t0)

    argvs = list(todo.items())
    # Ray only when it helps (sim.parallel.uses_ray); --serial: in this process. A point
    # redirects this process's output, so none runs here in a thread while Ray starts.
    with unordered_map(
        run_point, [argv for _, argv in argvs], workers=1 if serial else workers,
        address=None if serial else address, overlap=False,
    ) as done:  # fmt: skip
        for i, result in done:
            if isinstance(result, TaskFailed):  # a worker that died: the point failed
                result = {"ok": False, "error": result.message, "seconds": 0.0}
            record(argvs[i][0], result)
    import pyarrow.parquet as pq

    reports = {k: _cached_report(out / "points" / f"{k}.json", k) for k in keys}
    ok = [r for r in reports.values() if r is not None]
    unknown = unknown_outputs(sweep, ok) if ok else {}
    if unknown:
        named = ", ".join(f"{c} = {p!r}" for c, p in unknown.items())
        raise SweepError(
            f"{sweep.source}: [outputs] {named}: no point's report has that field; fields at "
            f"the top of a report: {', '.join(sorted(ok[0]))} (the points are cached: fix the "
            "file and rerun)"
        )
    table = results_table(sweep, keys, reports, errors)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    write_atomic(out / "results.parquet", buf.getvalue())
    failures = [
        {"point": i, "argv": " ".join(argv_of(sweep.command, p)), "error": errors[k]}
        for i, (p, k) in enumerate(zip(sweep.points, keys, strict=True))
        if k in errors
    ]
    return {
        **counts,
        "seconds": time.perf_counter() - t0,
        "table": str(out / "results.parquet"),
        "failures": failures,
        "damaged": [
            {"point": keys.index(k), "file": str(out / "points" / f"{k}.json")} for k in damaged
        ],
    }


def plot_sweep(sweep: SweepFile, table, path: Path) -> Path:
    """``plot.y`` against ``plot.x`` (one line per ``plot.hue``; points sharing x and hue
    reduced by ``plot.reduce``, max by default)."""
    p = sweep.plot
    assert p is not None
    rows = [r for r in table.to_pylist() if r["status"] == "ok" and r.get(p["y"]) is not None]
    reduce = max if p.get("reduce", "max") == "max" else min
    series: dict[Any, dict[Any, float]] = {}
    for r in rows:
        s = series.setdefault(r.get(p["hue"]) if "hue" in p else None, {})
        x = r[p["x"]]
        s[x] = reduce(s[x], r[p["y"]]) if x in s else r[p["y"]]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for hue, s in sorted(series.items(), key=lambda kv: str(kv[0])):
        xs = sorted(s)
        label = f"{p['hue']} = {hue}" if hue is not None else p["y"]
        ax.plot(xs, [s[x] for x in xs], marker="o", label=label)
    ax.set_title(p["title"])
    ax.set_xlabel(p["xlabel"])
    ax.set_ylabel(p["ylabel"])
    ax.legend()
    return write_figure(fig, path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``sweep-run`` subcommand's options."""
    parser.add_argument("sweep", help="a sweep file (configs/sweeps/NAME.toml or a path)")
    parser.add_argument(
        "--out", type=Path, default=None, help="results directory (default build/sweeps/NAME)"
    )
    parser.add_argument(
        "--address", default=None, help="an existing Ray cluster (default: a local Ray)"
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="local Ray CPUs (default: all cores)"
    )
    parser.add_argument("--serial", action="store_true", help="run the points in this process")
    parser.add_argument("--force", action="store_true", help="use --out even if it is not ours")
    parser.add_argument(
        "--allow-failures",
        action="store_true",
        help=f"exit 0 when some points fail (not all); without it any failure exits "
        f"{EXIT_POINTS_FAILED}",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony sweep-run``."""
    sweep = load_sweep(args.sweep)
    if args.workers is not None and args.workers < 1:
        raise SweepError(f"--workers {args.workers}: must be at least 1")
    ray = {"--address": args.address, "--workers": args.workers}
    ray_only = [flag for flag, value in ray.items() if value is not None]
    if args.serial and ray_only:
        raise SweepError(f"{' and '.join(ray_only)} set up Ray; --serial runs without it: drop one")
    out = args.out or BUILD_DIR / "sweeps" / sweep.name
    _check_out(out, sweep, args.force)
    bars = []  # the progress bar, opened at the first finished point (after Ray has started)

    def progress(counts: dict[str, int], elapsed: float) -> None:
        if args.json:
            return
        if not bars:
            from tqdm import tqdm

            bars.append(tqdm(total=len(sweep.points), unit="point", desc=sweep.name))
        bar = bars[0]
        bar.n = counts["cached"] + counts["done"] + counts["failed"]
        bar.set_postfix(done=counts["done"], failed=counts["failed"], cached=counts["cached"])
        bar.refresh()

    summary = run_sweep(
        sweep, out, serial=args.serial, address=args.address, workers=args.workers,
        progress=progress,
    )  # fmt: skip
    for bar in bars:
        bar.close()
    if sweep.plot:
        import pyarrow.parquet as pq

        summary["plot"] = str(plot_sweep(sweep, pq.read_table(summary["table"]), out / "plot.png"))
    if args.json:
        print(json.dumps({**summary, "provenance": provenance(args)}, indent=2))
    else:
        print(
            f"{sweep.name}: {summary['points']} points: {summary['done']} run, "
            f"{summary['cached']} cached, {summary['failed']} failed in "
            f"{summary['seconds']:.1f} s; table {summary['table']}"
            + (f"; plot {summary['plot']}" if "plot" in summary else "")
        )
        for d in summary["damaged"]:
            print(f"  recomputed: point {d['point']} (its cached {d['file']} was damaged)")
        for f in summary["failures"]:
            print(f"  failed: point {f['point']} ({f['argv']}): {f['error']}")
    return exit_status(summary, args.allow_failures)


def exit_status(summary: dict[str, Any], allow_failures: bool) -> int:
    """0 when every point has a result; :data:`EXIT_POINTS_FAILED` when one failed (unless
    ``allow_failures``) or every point failed (always: the table holds no result)."""
    failed, total = summary["failed"], summary["points"]
    if failed and (failed == total or not allow_failures):
        print(
            f"sweep-run: {failed} of {total} points failed"
            + ("" if failed == total else "; --allow-failures accepts that"),
            file=sys.stderr,
        )
        return EXIT_POINTS_FAILED
    return 0
