"""Workloads: the input-context statistics of benchmark tasks and per-request context lengths.

``configs/workloads/<name>.toml`` holds a task's input-context statistics (mean, std, min,
max; PIMphony Table II, LoL-PIM Table 2) and the model context window it is evaluated with.
:func:`load_workload` validates one like a hardware preset; :func:`sample_context_lengths`
draws per-request lengths reproducibly (an experiment's ``--requests``:
:func:`add_requests_option`) and :func:`read_context_lengths` reads explicit lengths from a
text or JSON file. See ``docs/memory.md``.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
from pimphony.models.config import CONFIG_DIR, ConfigError, find_toml, load_toml_table, typed_fields
from pimphony.models.fileio import read_utf8
from pimphony.sim.cli import bounded_int

__all__ = [
    "WORKLOAD_DIR",
    "Workload",
    "WorkloadError",
    "add_requests_option",
    "available_workloads",
    "generation_context_lengths",
    "load_workload",
    "read_context_lengths",
    "sample_context_lengths",
]

WORKLOAD_DIR = CONFIG_DIR / "workloads"

SampleMethod = Literal["truncate", "clip"]


class WorkloadError(ConfigError):
    """A workload file or a context-length file is malformed or out of range."""


@dataclass(frozen=True)
class Workload:
    """Input-context statistics of one benchmark task, in tokens.

    Attributes
    ----------
    name : str
        File stem in ``configs/workloads/``.
    task, benchmark, source : str
        Task name, benchmark suite and the paper table the numbers come from.
    context_window : int
        Context window of the models the task is evaluated with; static allocation
        reserves this many tokens per request.
    models : tuple of str
        The models the papers pair with the task (informational).
    mean, std : float
        Mean and standard deviation of the input context length.
    min, max : int
        Shortest and longest input context.
    """

    name: str
    task: str
    benchmark: str
    source: str
    context_window: int
    models: tuple[str, ...]
    mean: float
    std: float
    min: int
    max: int


_WORKLOAD_TOP = {
    "name": str,
    "task": str,
    "benchmark": str,
    "source": str,
    "context_window": int,
    "models": list,
    "context": dict,
}
_CONTEXT_KEYS = {"mean": float, "std": float, "min": int, "max": int}


def available_workloads() -> list[str]:
    """Names of the workloads shipped in ``configs/workloads/``."""
    return sorted(p.stem for p in WORKLOAD_DIR.glob("*.toml"))


def load_workload(name: str | Path) -> Workload:
    """Load and validate a workload by name (``qmsum``, ...) or a path to a TOML file."""
    path = find_toml(str(name), WORKLOAD_DIR, WorkloadError, "workload", available_workloads)
    raw = load_toml_table(path, WorkloadError, "workload")
    return _workload_from_raw(raw, source=str(path))


def _workload_from_raw(raw: dict[str, Any], source: str) -> Workload:
    head = f"{source}: "
    values = typed_fields(raw, _WORKLOAD_TOP, WorkloadError, head, note=" at top level")
    ctx = values.pop("context")
    values |= typed_fields(ctx, _CONTEXT_KEYS, WorkloadError, f"{head}[context] ", zero_ok=True)
    values["models"] = tuple(values["models"])
    wl = Workload(**values)
    stem = Path(source).stem
    if Path(source).suffix == ".toml" and wl.name != stem:
        raise WorkloadError(f"{source}: name = {wl.name!r} must match the file name {stem!r}")
    if not wl.min <= wl.mean <= wl.max:
        raise WorkloadError(
            f"{source}: [context] needs min <= mean <= max, got min {wl.min}, "
            f"mean {wl.mean:g}, max {wl.max}"
        )
    if wl.max > wl.context_window:
        raise WorkloadError(
            f"{source}: [context] max = {wl.max} exceeds context_window = {wl.context_window} "
            "(contexts are never truncated)"
        )
    if wl.std == 0 and wl.min != wl.max:
        raise WorkloadError(f"{source}: [context] std = 0 needs min == max")
    return wl


def _norm_mass(alpha: float, beta: float) -> float:
    """P(alpha <= Z <= beta) for a standard normal, accurate in both tails."""
    r2 = math.sqrt(2.0)
    if alpha > 0:
        return 0.5 * (math.erfc(alpha / r2) - math.erfc(beta / r2))
    if beta < 0:
        return 0.5 * (math.erfc(-beta / r2) - math.erfc(-alpha / r2))
    return 1.0 - 0.5 * (math.erfc(-alpha / r2) + math.erfc(beta / r2))


def _truncated_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    alpha, beta = (lo - mu) / sigma, (hi - mu) / sigma
    mass = _norm_mass(alpha, beta)
    pdf = NormalDist().pdf
    return mu + sigma * (pdf(alpha) - pdf(beta)) / mass


def _matched_location(mean: float, sigma: float, lo: float, hi: float) -> float:
    """Location ``mu`` whose normal(mu, sigma) truncated to [lo, hi] has mean ``mean``.

    The truncated mean increases monotonically with ``mu``, so bisection converges.
    """
    span = hi - lo
    a, b = lo - 8 * sigma - span, hi + 8 * sigma + span
    for _ in range(200):
        mid = 0.5 * (a + b)
        if _truncated_mean(mid, sigma, lo, hi) < mean:
            a = mid
        else:
            b = mid
    return 0.5 * (a + b)


def sample_context_lengths(
    workload: Workload | str, n: int, seed: int = 0, method: SampleMethod = "truncate"
) -> np.ndarray:
    """Draw ``n`` integer context lengths in ``[workload.min, workload.max]`` reproducibly.

    Parameters
    ----------
    workload : Workload or str
        The task (or its name).
    n : int
        Number of requests (>= 0).
    seed : int
        Seed of the NumPy generator; the same seed gives the same lengths.
    method : {"truncate", "clip"}
        ``"truncate"`` (default): a normal with scale ``std``, truncated to [min, max] (no
        probability mass outside, no spikes at the bounds), with its location solved so the
        truncated mean equals the stated mean; sampled by inverse CDF. Truncation narrows
        the spread, so the sample std is below the stated std when a bound is near the mean
        (Musique: max is 0.94 std above the mean). ``"clip"``: a normal(mean, std) with
        draws outside [min, max] clipped to the bound (spikes at min/max, mean slightly off).

    Returns
    -------
    numpy.ndarray
        ``int64`` array of ``n`` lengths, rounded to the nearest token.
    """
    wl = load_workload(workload) if isinstance(workload, str) else workload
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    rng = np.random.default_rng(seed)
    lo, hi = float(wl.min), float(wl.max)
    if wl.std == 0 or wl.min == wl.max:
        x = np.full(n, wl.mean)
    elif method == "clip":
        x = np.clip(rng.normal(wl.mean, wl.std, size=n), lo, hi)
    elif method == "truncate":
        mu = _matched_location(wl.mean, wl.std, lo, hi)
        dist = NormalDist(mu, wl.std)
        u_lo, u_hi = dist.cdf(lo), dist.cdf(hi)
        if not u_hi - u_lo > 1e-12:
            raise WorkloadError(
                f"workload {wl.name!r}: cannot sample a truncated normal with mean "
                f"{wl.mean:g} and std {wl.std:g} in [{wl.min}, {wl.max}]; use method='clip'"
            )
        u = rng.uniform(u_lo, u_hi, size=n)
        u = np.clip(u, np.nextafter(0.0, 1.0), np.nextafter(1.0, 0.0))
        x = np.array([dist.inv_cdf(float(v)) for v in u], dtype=float)
    else:
        raise ValueError(f"method must be 'truncate' or 'clip', got {method!r}")
    return np.clip(np.rint(x), wl.min, wl.max).astype(np.int64)


def add_requests_option(p: argparse.ArgumentParser, default: int, what: str) -> None:
    """An experiment's ``--requests``: how many context lengths it draws from a workload
    (1 to 100,000; ``default``), its help saying ``what`` they are."""
    p.add_argument("--requests", type=bounded_int(1, 100_000), default=default, help=what)


def read_context_lengths(path: str | Path, max_context: int | None = None) -> np.ndarray:
    """Read explicit per-request context lengths from a file.

    The file is a JSON list of integers (``.json`` files, or any file whose first
    non-blank character is ``[``), or text with one integer per line (blank lines and
    lines starting with ``#`` are skipped). Every length must be a positive integer and,
    if ``max_context`` is given, at most ``max_context``: lengths are never truncated.

    Returns
    -------
    numpy.ndarray
        ``int64`` array in file order.
    """
    path = Path(path)
    try:
        text = read_utf8(path, WorkloadError)
    except FileNotFoundError:
        raise WorkloadError(f"{path}: no such context-length file") from None
    items: list[tuple[str, Any]] = []
    if path.suffix == ".json" or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path}: not valid JSON: {exc}") from None
        if not isinstance(data, list):
            raise WorkloadError(
                f"{path}: JSON must be a list of integers, got {type(data).__name__}"
            )
        for i, v in enumerate(data):
            if isinstance(v, bool) or not isinstance(v, int):
                raise WorkloadError(f"{path}: item {i} = {v!r} is not an integer")
            items.append((f"item {i}", v))
    else:
        for lineno, line in enumerate(text.splitlines(), start=1):
            s = line.strip()
            if not s or s.startswith("#"):
                continue
            try:
                v = int(s, 10)
            except ValueError:
                raise WorkloadError(f"{path}: line {lineno}: {s!r} is not an integer") from None
            items.append((f"line {lineno}", v))
    if not items:
        raise WorkloadError(f"{path}: no context lengths (expected one integer per line)")
    for where, v in items:
        if v <= 0:
            raise WorkloadError(f"{path}: {where}: context length {v} must be >= 1")
        if max_context is not None and v > max_context:
            raise WorkloadError(
                f"{path}: {where}: context length {v} exceeds max_context = {max_context} "
                "(lengths are never truncated)"
            )
    return np.array([v for _, v in items], dtype=np.int64)


def generation_context_lengths(
    inputs: np.ndarray | list[int], new_tokens: int, max_context: int | None = None
) -> np.ndarray:
    """Per-request context lengths at every step of generating ``new_tokens`` tokens.

    Decode step ``t`` (0-based) of a request whose prompt has ``L`` tokens attends over
    ``L + t`` cached tokens (the prompt and the ``t`` tokens generated so far) and produces
    token ``t + 1``; every request generates ``new_tokens`` tokens (no early stop).

    Parameters
    ----------
    inputs : array of int
        Prompt lengths, each >= 1 (e.g. from :func:`sample_context_lengths`).
    new_tokens : int
        Output tokens per request, >= 1.
    max_context : int, optional
        The model's context window: the last step's ``L + new_tokens - 1`` may not exceed it.

    Returns
    -------
    numpy.ndarray
        ``int64`` array of shape ``(new_tokens, len(inputs))``; row ``t`` is step ``t``.
    """
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int | np.integer):
        raise WorkloadError(f"new_tokens = {new_tokens!r}: must be an integer >= 1")
    if new_tokens < 1:
        raise WorkloadError(f"new_tokens = {new_tokens}: must be >= 1 (tokens to generate)")
    lengths = np.asarray(inputs, dtype=np.int64).reshape(-1)
    if lengths.size == 0:
        raise WorkloadError("inputs: no prompt lengths (need at least one request)")
    if lengths.min() < 1:
        raise WorkloadError(f"inputs: prompt length {int(lengths.min())} must be >= 1")
    last = int(lengths.max()) + new_tokens - 1
    if max_context is not None and last > max_context:
        raise WorkloadError(
            f"new_tokens = {new_tokens}: the longest prompt ({int(lengths.max())} tokens) "
            f"reaches {last} tokens, beyond max_context = {max_context} "
            f"(allowed: new_tokens <= {max_context - int(lengths.max()) + 1})"
        )
    return lengths[None, :] + np.arange(new_tokens, dtype=np.int64)[:, None]
