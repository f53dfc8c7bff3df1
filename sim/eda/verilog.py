"""``pimphony rtl``: write the Verilog of every RTL block (``make rtl``).

Importing this module loads no Amaranth or RTL module.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pimphony.models.config import DEFAULT_PRESET, HardwareConfig, load_preset
from pimphony.models.fileio import BUILD_DIR, write_atomic
from pimphony.rtl import EMITTED

__all__ = ["RTL_DIR", "add_arguments", "run", "write_verilog"]

RTL_DIR = BUILD_DIR / "rtl"


def write_verilog(block: str, cfg: HardwareConfig, out_dir: Path = RTL_DIR) -> Path:
    """Write ``block``'s Verilog to ``out_dir/block.v`` (atomically) and return the path."""
    from pimphony.rtl.blocks import generate_verilog

    path = Path(out_dir) / f"{block}.v"
    write_atomic(path, generate_verilog(block, cfg).encode())
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``pimphony rtl``."""
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--out", type=Path, default=RTL_DIR)


def run(args: argparse.Namespace) -> int:
    """Write the Verilog of every block of :data:`rtl.EMITTED`; exit status 0."""
    cfg = load_preset(args.preset)
    for block in EMITTED:
        path = write_verilog(block, cfg, args.out)
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0
