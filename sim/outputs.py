"""The one output rule at the command line's edge: no output may destroy an input or another
output of the same command (``docs/errors.md``).

Every ``pimphony`` option that names something the command writes has its destination in
:data:`OUTPUT_OPTIONS`; every other option whose value names an existing file is an input.
:func:`check_command_files` runs before any command does, so a refusal leaves every file as
it was. Replacing only regular files, and only with ``--force``, is
:func:`pimphony.models.fileio.check_writable`'s part, at every write.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pimphony.compiler.dcc.files import model_path
from pimphony.models.fileio import OutputError, check_outputs, file_kind

__all__ = ["OUTPUT_OPTIONS", "check_command_files", "command_files"]

OUTPUT_OPTIONS: frozenset[str] = frozenset(
    {"output", "write", "report", "plot", "csv", "timeline", "energy_plot", "out", "out_dir",
     "repro_dir", "figures"}
)  # fmt: skip
"""argparse destinations of the options that name an output file or folder."""


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def command_files(args: argparse.Namespace) -> tuple[dict[str, Path], dict[str, Path]]:
    """``(outputs, inputs)`` of parsed ``args``, keyed by option as the user writes it.

    Outputs: the options of :data:`OUTPUT_OPTIONS` given a value. Inputs: every other option
    (or positional argument) whose value names an existing file. A ``NAME.json`` brings its
    lookup table's predictor ``NAME.model.ubj`` to the same side (an input only if it
    exists), so that no output replaces a table's predictor."""
    outputs: dict[str, Path] = {}
    inputs: dict[str, Path] = {}
    for dest, value in vars(args).items():
        if dest.startswith("_") or not isinstance(value, str | Path) or value == "":
            continue
        flag, path = _flag(dest), Path(value)
        companion = model_path(path) if path.suffix == ".json" else None
        if dest in OUTPUT_OPTIONS:
            outputs[flag] = path
            if companion is not None:  # dcc-lut writes a table's predictor beside it
                outputs[f"{flag} (its predictor)"] = companion
        elif path.is_file():
            inputs[flag] = path
            if companion is not None and companion.is_file():  # a table reads its predictor
                inputs[f"{flag} (its predictor)"] = companion
    return outputs, inputs


def check_command_files(args: argparse.Namespace) -> None:
    """:class:`~pimphony.models.fileio.OutputError` if an output of ``args`` is one of its
    inputs (path, symbolic or hard link), two outputs name one file, an output names
    something no write may replace (a FIFO, socket, device or symbolic link) or lies in a
    folder that cannot be written, before the command runs."""
    outputs, inputs = command_files(args)
    for flag, path in outputs.items():
        _check_folder(flag, path)
        kind = file_kind(path)
        if kind not in (None, "regular file", "directory"):
            raise OutputError(
                f"{flag} {path} is a {kind}; only a regular file is ever replaced "
                "(--force included)"
            )
    check_outputs(outputs, inputs)


def _check_folder(flag: str, path: Path) -> None:
    """:class:`OutputError` if nothing can be written at ``path``: its nearest existing folder
    is a file, read-only or not ours to write (refused before the command runs, not after)."""
    folder = path if path.is_dir() else path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"{flag} {path}: {folder} is a {file_kind(folder)}, not a folder")
    if folder.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(
            f"{flag} {path}: the folder {folder} cannot be written (read-only or no permission)"
        )
