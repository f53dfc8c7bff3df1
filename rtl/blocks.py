"""Registry of the RTL blocks and Verilog generation (``make rtl``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from amaranth.back import verilog
from amaranth.lib import wiring

from models.config import HardwareConfig, load_preset
from models.fileio import write_atomic
from rtl.bank_slice import BankSliceController
from rtl.dcs import DcsScheduler
from rtl.dpa import DpaDispatcher
from rtl.pingpong import PingPongScheduler
from rtl.static_sched import StaticScheduler

__all__ = [
    "BLOCKS",
    "BLOCK_OF_SCHEDULER",
    "COSIM_ARGS",
    "RTL_DIR",
    "SCHEDULER_OF_BLOCK",
    "generate_verilog",
    "main",
    "write_verilog",
]

BLOCKS: dict[str, Callable[[HardwareConfig], wiring.Component]] = {
    "static_sched": StaticScheduler,
    "pingpong": PingPongScheduler,
    "dcs": DcsScheduler,
    "dpa": DpaDispatcher,
    "bank_slice": BankSliceController,
}
"""Block name (also the Verilog module name) -> constructor taking a hardware config (and
optional keyword arguments, see :data:`COSIM_ARGS`). Built with the config alone, every block
has its hardware sizes (``make rtl``, ``make area``)."""

COSIM_ARGS: dict[str, dict] = {"pingpong": {"depth": 512}}
"""Constructor arguments the cycle-exact co-simulation builds use on top of the config.

``pingpong``: 512-entry queues. The TLM never back-pressures the input, so to match it cycle
for cycle the queues must hold every command accepted and not yet issued; the largest
co-simulated stream, a 256 x 1024 GEMV, keeps 504 MACs waiting. The hardware default is
``dcs.queue_depth`` (64 at the presets), with which long streams stall the input."""

SCHEDULER_OF_BLOCK = {"static_sched": "static", "pingpong": "pingpong", "dcs": "dcs"}
"""The TLM scheduler each scheduler block must match cycle for cycle."""
BLOCK_OF_SCHEDULER = {sched: block for block, sched in SCHEDULER_OF_BLOCK.items()}
"""The RTL block implementing each TLM scheduler."""

RTL_DIR = Path("build/rtl")


def generate_verilog(block: str, cfg: HardwareConfig, **kwargs) -> str:
    """Verilog text of ``block`` built for ``cfg``; the top module is named ``block``.

    ``kwargs`` go to the block's constructor (e.g. ``**COSIM_ARGS.get(block, {})``).
    """
    if block not in BLOCKS:
        raise ValueError(f"block {block!r} is unknown; allowed: {', '.join(BLOCKS)}")
    return verilog.convert(BLOCKS[block](cfg, **kwargs), name=block, emit_src=False)


def write_verilog(block: str, cfg: HardwareConfig, out_dir: Path = RTL_DIR) -> Path:
    """Write ``block``'s Verilog to ``out_dir/block.v`` (atomically) and return the path."""
    path = Path(out_dir) / f"{block}.v"
    write_atomic(path, generate_verilog(block, cfg).encode())
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m rtl.blocks``: write the Verilog of every block."""
    parser = argparse.ArgumentParser(prog="python -m rtl.blocks", description=__doc__)
    parser.add_argument("--preset", default="aim-16ch")
    parser.add_argument("--out", type=Path, default=RTL_DIR)
    args = parser.parse_args(argv)
    cfg = load_preset(args.preset)
    for block in BLOCKS:
        path = write_verilog(block, cfg, args.out)
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
