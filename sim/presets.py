"""``pimphony presets``: the shipped hardware presets, one line each (loads no simulator)."""

from __future__ import annotations

import argparse

from models.config import available_presets, load_preset

__all__ = ["add_arguments", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``pimphony presets`` takes no options."""


def run(args: argparse.Namespace) -> int:
    """Print each preset's channels, banks and buffer sizes."""
    for name in available_presets():
        cfg = load_preset(name)
        print(
            f"{name}: {cfg.module.channels} channels x {cfg.channel.banks} banks, "
            f"GBuf {cfg.channel.gbuf_entries}, OBuf {cfg.channel.obuf_entries}"
        )
    return 0
