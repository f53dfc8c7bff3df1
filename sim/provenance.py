"""What produced a result: the tool, its version and commit, the command, the inputs.

Every JSON report carries :func:`provenance` under the key ``provenance`` (``docs/errors.md``),
so a number can be traced to the exact hardware values, model, lengths and options.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from pimphony.models.config import HardwareConfig
from pimphony.models.xpu_config import XpuConfig

__all__ = ["device_record", "inputs_digest", "preset_record", "provenance", "tool_record"]

_ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def _version() -> str:
    try:
        return metadata.version("pimphony")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


@functools.cache
def _commit() -> str | None:
    """The git commit of the source tree, with ``+dirty`` if it has changes; ``None`` outside
    a git checkout."""
    if not (_ROOT / ".git").exists():
        return None
    try:
        run = functools.partial(
            subprocess.run, cwd=_ROOT, capture_output=True, text=True, check=True, timeout=5
        )
        commit = run(["git", "rev-parse", "HEAD"]).stdout.strip()
        dirty = run(["git", "status", "--porcelain", "--untracked-files=no"]).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def _options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in sorted(vars(args).items())
        if not k.startswith("_") and k != "command"
    }


def inputs_digest(inputs: dict[str, Any]) -> str:
    """SHA-256 of ``inputs`` as canonical JSON (different inputs, different digests)."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def tool_record() -> dict[str, Any]:
    """The tool, its version and the git commit of the source tree (``None`` outside git)."""
    return {"tool": "pimphony", "version": _version(), "commit": _commit()}


def preset_record(cfg: HardwareConfig) -> dict[str, Any]:
    """A preset as provenance records it: name, hash and every value
    (``HardwareConfig.from_dict(record["values"])`` rebuilds it)."""
    return {"name": cfg.name, "sha256": cfg.sha256(), "values": cfg.to_dict()}


def device_record(device: XpuConfig) -> dict[str, Any]:
    """An xPU or GPU preset as a report's provenance records it: name, digest
    of its values, values."""
    values = device.to_dict()
    return {"name": device.name, "sha256": inputs_digest(values), "values": values}


def provenance(
    args: argparse.Namespace, cfg: HardwareConfig | None = None, **inputs: Any
) -> dict[str, Any]:
    """The provenance block of a report: tool, version, commit, the command and its options,
    the fully resolved hardware preset with its hash, and any further ``inputs`` (model,
    workload, seed, context lengths, ...)."""
    block: dict[str, Any] = {
        **tool_record(),
        "command": getattr(args, "_prog", "pimphony"),
        "options": _options(args),
    }
    if cfg is not None:
        block["preset"] = preset_record(cfg)
    block.update(inputs)
    return block
