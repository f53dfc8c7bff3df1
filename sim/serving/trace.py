"""Requests of a serving run: a trace file, or arrivals drawn from a workload's statistics.

A trace is JSONL (one object per line) or CSV (a header line) with exactly the columns
``arrival_s`` (seconds, >= 0, non-decreasing), ``input_tokens`` (>= 1) and ``output_tokens``
(>= 1). Errors name the file, the line and the field (:class:`TraceError`). See
``docs/serving.md``.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import read_utf8
from pimphony.sim.workloads import load_workload, sample_context_lengths

__all__ = [
    "LONG_PROMPTS",
    "MAX_ARRIVAL_S",
    "TRACE_COLUMNS",
    "Request",
    "TraceError",
    "long_context_requests",
    "read_trace",
    "workload_requests",
]

#: The columns of a trace, each required, no others allowed.
TRACE_COLUMNS = ("arrival_s", "input_tokens", "output_tokens")

#: The serving horizon: the latest arrival a run accepts (10^6 s, 11.6 days, beyond a week of
#: production trace). Times are float64 seconds; their spacing at 10^6 s is 1.2e-10 s, so a
#: 1 us decode step still adds exactly to 1 part in 10^4. At 1e300 s a step would vanish and
#: TTFT read 0 (issue 34).
MAX_ARRIVAL_S = 1e6


class TraceError(PimphonyError, ValueError):
    """A trace file or a request list is malformed or out of range."""


@dataclass(frozen=True)
class Request:
    """One request: when it arrives, its prompt and how many tokens it generates."""

    rid: int
    arrival_s: float
    input_tokens: int
    output_tokens: int


def _field(where: str, name: str, value: object) -> float | int:
    if name == "arrival_s":
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise TraceError(f"{where}: arrival_s = {value!r} is not a number") from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TraceError(f"{where}: arrival_s = {value!r} is not a number")
        if not math.isfinite(value) or not 0 <= value <= MAX_ARRIVAL_S:
            raise TraceError(
                f"{where}: arrival_s = {value!r}: allowed 0 to {MAX_ARRIVAL_S:g} s (the serving "
                "horizon, docs/serving.md)"
            )
        return float(value)
    if isinstance(value, str):
        try:
            value = int(value, 10)
        except ValueError:
            raise TraceError(f"{where}: {name} = {value!r} is not an integer") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where}: {name} = {value!r} is not an integer")
    if value < 1:
        raise TraceError(f"{where}: {name} = {value} must be >= 1 token")
    return value


def _csv_lines(path: Path, reader: Any) -> Iterator[list[str]]:
    """The cells of each line of ``reader``; :class:`TraceError` naming the line where the
    CSV is malformed (a stray carriage return or quote)."""
    try:
        yield from reader
    except csv.Error as exc:
        raise TraceError(f"{path}: line {reader.line_num}: not CSV ({exc})") from None


def _rows(path: Path, text: str) -> list[tuple[str, dict]]:
    """(where, record) of every data line of a JSONL or CSV trace."""
    rows: list[tuple[str, dict]] = []
    if path.suffix.lower() == ".csv":
        reader = csv.reader(io.StringIO(text, newline=""))
        header = None
        for lineno, cells in enumerate(_csv_lines(path, reader), start=1):
            if not cells or all(not c.strip() for c in cells):
                continue
            cells = [c.strip() for c in cells]
            if header is None:
                header = cells
                _check_columns(f"{path}: line {lineno} (header)", header)
                continue
            where = f"{path}: line {lineno}"
            if len(cells) != len(header):
                raise TraceError(f"{where}: {len(cells)} field(s), the header names {len(header)}")
            rows.append((where, dict(zip(header, cells, strict=True))))
        return rows
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}: line {lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: not a JSON object: {exc.msg}") from None
        if not isinstance(record, dict):
            raise TraceError(f"{where}: expected a JSON object, got {type(record).__name__}")
        _check_columns(where, list(record))
        rows.append((where, record))
    return rows


def _check_columns(where: str, names: list[str]) -> None:
    unknown = [n for n in names if n not in TRACE_COLUMNS]
    if unknown:
        raise TraceError(
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; a trace has exactly "
            f"{', '.join(TRACE_COLUMNS)}"
        )
    missing = [n for n in TRACE_COLUMNS if n not in names]
    if missing:
        raise TraceError(f"{where}: missing field(s) {', '.join(map(repr, missing))}")


def read_trace(path: str | Path) -> list[Request]:
    """Read a JSONL (``.jsonl``, ``.json``) or CSV (``.csv``) trace; every error names its
    line and field."""
    path = Path(path)
    try:
        text = read_utf8(path, TraceError)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such trace file") from None
    requests: list[Request] = []
    last = 0.0
    for where, record in _rows(path, text):
        vals = {name: _field(where, name, record[name]) for name in TRACE_COLUMNS}
        if vals["arrival_s"] < last:
            raise TraceError(
                f"{where}: arrival_s = {vals['arrival_s']!r} is earlier than the previous "
                f"request's {last!r}; arrivals must be sorted (non-decreasing)"
            )
        last = vals["arrival_s"]
        requests.append(Request(len(requests), **vals))  # type: ignore[arg-type]
    if not requests:
        raise TraceError(
            f"{path}: no requests (a trace needs at least one row of {', '.join(TRACE_COLUMNS)})"
        )
    return requests


def workload_requests(
    workload: str,
    n: int,
    output_tokens: int,
    rate: float | None = None,
    seed: int = 0,
) -> list[Request]:
    """``n`` requests whose prompts are drawn from ``workload``'s context statistics
    (:func:`sim.workloads.sample_context_lengths`, ``seed``), each generating ``output_tokens``
    tokens; Poisson arrivals at ``rate`` requests/s (exponential gaps from the generator seeded
    ``seed + 1``), or all at time 0 without a rate."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TraceError(f"--requests {n!r}: must be an integer >= 1")
    if isinstance(output_tokens, bool) or not isinstance(output_tokens, int) or output_tokens < 1:
        raise TraceError(f"--output-tokens {output_tokens!r}: must be an integer >= 1")
    wl = load_workload(workload)
    inputs = sample_context_lengths(wl, n, seed)
    if rate is None:
        arrivals = np.zeros(n)
    else:
        if not (math.isfinite(rate) and rate > 0):
            raise TraceError(f"--rate {rate!r}: must be a positive number of requests/s")
        gaps = np.random.default_rng(seed + 1).exponential(1.0 / rate, size=n)
        arrivals = np.cumsum(gaps) - gaps[0]  # the first request arrives at 0
        if arrivals[-1] > MAX_ARRIVAL_S:
            raise TraceError(
                f"--rate {rate!r}: {n} requests arrive over {arrivals[-1]:.3g} s, beyond the "
                f"serving horizon of {MAX_ARRIVAL_S:g} s; raise --rate or lower --requests"
            )
    return [Request(i, float(arrivals[i]), int(inputs[i]), output_tokens) for i in range(n)]


#: The prompt lengths of :func:`long_context_requests` (inclusive): with 1,000 outputs a
#: request stays within a 32K window.
LONG_PROMPTS = (30_000, 31_768)


def long_context_requests(n: int, output_tokens: int = 1000, seed: int = 0) -> list[Request]:
    """``n`` requests at t = 0 with prompts drawn uniformly from :data:`LONG_PROMPTS`
    (``numpy.random.default_rng(seed)``), each generating ``output_tokens`` tokens: the
    serving speed targets (``configs/traces/long32k-1000.jsonl`` is ``n = 1000``, seed 0)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise TraceError(f"requests {n!r}: must be an integer >= 1")
    low, high = LONG_PROMPTS
    prompts = np.random.default_rng(seed).integers(low, high + 1, n)
    return [Request(k, 0.0, int(t), output_tokens) for k, t in enumerate(prompts)]
