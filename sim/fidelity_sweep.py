"""``pimphony fidelity --write`` through the sweep runner: each group of rows is one point.

A point runs ``pimphony fidelity --rows KEYS --serial --json`` (``sim.sweep_run``: a Ray task
on a local Ray by default or the cluster at ``--address``), so rows that share a figure run
(:attr:`sim.fidelity.Claim.group`) are measured in one process and the groups in parallel.
Each point's report is cached under ``build/fidelity/points/`` keyed by pimphony's source and
``configs/``: a rerun after an interruption measures only the groups not yet done, and a
code change measures again.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pimphony.models.fileio import BUILD_DIR
from pimphony.sim.fidelity import Claim, FidelityError, Measured, measured_from_json
from pimphony.sim.sweep_run import SweepFile, run_sweep

__all__ = ["FIDELITY_SWEEP_DIR", "groups", "measure_by_sweep"]

#: Where the row groups' reports are cached.
FIDELITY_SWEEP_DIR = BUILD_DIR / "fidelity"


def groups(claims: Sequence[Claim]) -> list[tuple[Claim, ...]]:
    """The rows of ``claims`` by group (a row without one alone), in the table's order of
    each group's first row; a group's rows keep the table's order."""
    out: dict[str, list[Claim]] = {}
    for c in claims:
        out.setdefault(c.group or c.key, []).append(c)
    return [tuple(g) for g in out.values()]


def measure_by_sweep(
    claims: Sequence[Claim],
    out: Path = FIDELITY_SWEEP_DIR,
    *,
    serial: bool = False,
    address: str | None = None,
    workers: int | None = None,
) -> list[tuple[Claim, Measured]]:
    """Every row of ``claims`` measured, one sweep point per group (cached under ``out``);
    a group that fails is refused with its error."""
    parts = groups(claims)
    sweep = SweepFile(
        name="fidelity",
        command="fidelity",
        points=tuple({"rows": ",".join(c.key for c in g), "serial": True} for g in parts),
        outputs={},
        plot=None,
        source="pimphony fidelity --write",
    )
    bars = []

    def progress(counts: dict[str, int], elapsed: float) -> None:
        if not bars:
            from tqdm import tqdm

            bars.append(tqdm(total=len(parts), unit="group", desc="fidelity", file=sys.stderr))
        bars[0].n = counts["cached"] + counts["done"] + counts["failed"]
        bars[0].set_postfix(cached=counts["cached"], failed=counts["failed"])
        bars[0].refresh()

    print(
        f"fidelity: {len(claims)} rows in {len(parts)} groups, as Ray tasks "
        f"(cached in {out}; the DCC figure groups take tens of minutes)",
        file=sys.stderr,
        flush=True,
    )
    try:
        summary = run_sweep(
            sweep, out, serial=serial, address=address, workers=workers, progress=progress
        )
    finally:
        for bar in bars:
            bar.close()
    if summary["failures"]:
        f = summary["failures"][0]
        raise FidelityError(
            f"{len(summary['failures'])} row group(s) failed; first: {f['argv']}: {f['error']}"
        )
    import pyarrow.parquet as pq

    measured: dict[str, Measured] = {}
    for key in pq.read_table(summary["table"]).column("key").to_pylist():
        body = json.loads((out / "points" / f"{key}.json").read_bytes())
        for row in body["report"]["claims"]:
            measured[row["key"]] = measured_from_json(row)
    return [(c, measured[c.key]) for c in claims]
