"""``pimphony presets``: the shipped hardware presets, one line each (loads no simulator)."""

from __future__ import annotations

import argparse

from pimphony.models.config import available_presets, load_preset

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Print each preset's channels, banks, capacity, clock and buffer sizes."""
    for name in available_presets():
        cfg = load_preset(name)
        ch = cfg.channel
        print(
            f"{name}: {cfg.module.channels} channels x {ch.banks} banks, "
            f"{cfg.module_bytes / 2**30:g} GiB per module, {cfg.module.freq_ghz:g} GHz, "
            f"GBuf {ch.gbuf_entries}, OBuf {ch.obuf_entries}"
        )
    return 0
