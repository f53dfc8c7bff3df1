"""Where DCC's files sit beside each other (no heavy imports: the command line's output rule
reads it before every command)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["model_path"]


def model_path(table: str | Path) -> Path:
    """Where a table's offline predictor is saved: beside it, ``NAME.model.ubj`` for
    ``NAME.json``."""
    table = Path(table)
    return table.with_name(f"{table.stem}.model.ubj")
