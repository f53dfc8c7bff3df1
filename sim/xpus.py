"""``pimphony xpus``: the shipped compute-device presets, one line each (``docs/xpu.md``)."""

from __future__ import annotations

import argparse

from pimphony.models.xpu_config import available_xpus, load_xpu

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Print each device's kind, peak, DRAM, arrays, caps and per-kernel costs."""
    for name in available_xpus():
        dev = load_xpu(name)
        sa = dev.systolic
        arrays = f", {sa.arrays} x {sa.rows}x{sa.cols} arrays" if sa else ""
        print(
            f"{name}: {dev.kind}, {dev.peak_flops() / 1e12:g} TFLOPS {dev.compute.precision}"
            f"{arrays}, {dev.memory.type} {dev.memory.bandwidth_gbps:g} GB/s "
            f"{dev.memory.capacity_gib:g} GiB, caps {dev.compute.efficiency:g}/"
            f"{dev.memory.efficiency:g}"
            + (
                f", per kernel {dev.kernel.launch_us:g} us launch + "
                f"{dev.kernel.dram_latency_ns:g} ns DRAM latency"
                if dev.kernel
                else ""
            )
        )
    return 0
