"""DCC's lookup table of best drafts as a file (``pimphony dcc-lut`` writes it; ``pimphony
tune --table``, ``dcc-figs --table`` and ``dcc-fig8 --table`` read it): the back end's digest a
table records, the checks :func:`read_table` makes, and how a run reports the shapes a table
lacks (``docs/dcc.md``); and the options of a search the table does not answer
(:func:`add_search_options`).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
from pathlib import Path

from pimphony.compiler.dcc.predictor import (
    SEARCH_BUDGET,
    SEARCH_VERIFY,
    LookupTable,
    LookupTableError,
)
from pimphony.models.backends import BackendConfig
from pimphony.sim.cli import bounded_int
from pimphony.sim.provenance import inputs_digest

__all__ = [
    "NO_PREDICTOR",
    "SEARCH_EFFORT",
    "add_search_options",
    "backend_digest",
    "backend_record",
    "read_table",
    "table_digest",
    "untabled_line",
]


#: An argparse ``type``: ``--budget`` and ``--verify``, drafts simulated.
SEARCH_EFFORT = bounded_int(1, 10**6)


def add_search_options(p: argparse.ArgumentParser, *, only: str = "") -> None:
    """``--budget`` and ``--verify``: DCC's search effort (IV-D), defaults
    :data:`~compiler.dcc.predictor.SEARCH_BUDGET` and ``SEARCH_VERIFY``. With ``only`` (the
    ``--system`` rows that read them), the help starts with it
    and an option not given is absent from the parsed options (``argparse.SUPPRESS``)."""
    for flag, default, what in (
        (
            "--budget",
            SEARCH_BUDGET,
            "drafts simulated to train the predictor when more survive pruning (DCC IV-D)",
        ),
        ("--verify", SEARCH_VERIFY, "best predicted drafts simulated before choosing"),
    ):
        p.add_argument(
            flag,
            type=SEARCH_EFFORT,
            default=argparse.SUPPRESS if only else default,
            help=f"{only}: {what} (default {default})" if only else what,
        )


def backend_digest(cfg: BackendConfig) -> str:
    """SHA-256 of every value a draft's cost depends on: the back end's (its name and levels,
    timing, an AiM back end's hardware preset) and its host xPU's; not the file's path."""
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "source"}
    values = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v
              for k, v in values.items()}  # fmt: skip
    return inputs_digest({"backend": values, "host": dataclasses.asdict(cfg.host())})


def backend_record(cfg: BackendConfig) -> dict[str, str]:
    """What a table records of its back end: the name and :func:`backend_digest`."""
    return {"name": cfg.name, "sha256": backend_digest(cfg)}


def table_digest(path: str | Path) -> str:
    """SHA-256 of a table file's bytes (a report names the exact table it read)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_table(path: str | Path, cfg: BackendConfig) -> LookupTable:
    """The table in ``path``, if it was filled for ``cfg`` as it is now; else
    :class:`~compiler.dcc.predictor.LookupTableError` saying why not, in one line."""
    path = Path(path)
    if not path.is_file():
        raise LookupTableError(f"--table {path}: no such file (fill one with pimphony dcc-lut)")
    table = LookupTable.load(path)
    rec = table.provenance.get("backend")
    if not isinstance(rec, dict) or not {"name", "sha256"} <= rec.keys():
        raise LookupTableError(
            f"--table {path}: provenance.backend (name, sha256) is missing: not a table "
            "pimphony dcc-lut wrote"
        )
    if rec["name"] != cfg.name:
        raise LookupTableError(
            f"--table {path} holds drafts for back end {rec['name']}, not {cfg.name}"
        )
    now = backend_digest(cfg)
    if rec["sha256"] != now:
        raise LookupTableError(
            f"--table {path} is stale: filled for back end {cfg.name} with digest "
            f"{str(rec['sha256'])[:12]}, the preset's values now digest to {now[:12]}; refill "
            f"it (pimphony dcc-lut --out {path} --force)"
        )
    try:
        table.load_predictor(path)
    except LookupTableError as e:
        raise LookupTableError(f"--table {path}: {e}") from None
    return table


#: Why a table's new shapes are searched rather than predicted.
NO_PREDICTOR = (
    "the table has no saved predictor: an older dcc-lut file; refill it to predict new shapes"
)


def untabled_line(table: LookupTable, predicted: int, searched: int) -> str:
    """How a run did the shapes ``table`` lacks: ``predicted`` by its offline predictor,
    ``searched`` (all of them when the table has no saved predictor, said so)."""
    if table.offline is None:
        return f"{searched} searched ({NO_PREDICTOR})"
    return f"{predicted} predicted by its offline predictor, {searched} searched"
