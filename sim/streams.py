"""Command streams for RTL-vs-TLM checks: compiler kernels and seeded random legal streams."""

from __future__ import annotations

import numpy as np

from compiler.kernels import compile_kernel
from models.config import HardwareConfig
from models.isa import Op, empty_stream

__all__ = ["COSIM_KERNELS", "kernel_streams", "random_stream"]

COSIM_KERNELS: tuple[tuple[str, str, dict], ...] = (
    ("qk-T256-dh64", "qk", {"tokens": 256, "d_h": 64}),
    ("qk-T512-dh128", "qk", {"tokens": 512, "d_h": 128}),
    ("sv-T512-dh64", "sv", {"tokens": 512, "d_h": 64}),
    ("sv-T1024-dh128", "sv", {"tokens": 1024, "d_h": 128}),
    ("qk-gqa4-T256-dh128", "qk", {"tokens": 256, "d_h": 128, "gqa_group": 4}),
    ("sv-gqa4-T256-dh128", "sv", {"tokens": 256, "d_h": 128, "gqa_group": 4}),
    ("gemv-64x512", "gemv", {"d_out": 64, "d_in": 512}),
    ("gemv-100x300", "gemv", {"d_out": 100, "d_in": 300}),
    ("gemv-256x1024", "gemv", {"d_out": 256, "d_in": 1024}),
)
"""Compiler-generated streams every co-simulation run checks (name, kernel, shape)."""


def kernel_streams(cfg: HardwareConfig) -> dict[str, np.ndarray]:
    """The :data:`COSIM_KERNELS` streams compiled for ``cfg``."""
    return {
        name: compile_kernel(cfg, kind, **shape).commands for name, kind, shape in COSIM_KERNELS
    }


def random_stream(
    cfg: HardwareConfig, n: int, seed: int, entries: int = 6, rows: int = 3
) -> np.ndarray:
    """A seeded random legal stream: any mix of opcodes over a few entries in both halves.

    Few entries and rows make dependencies, is-MAC chains, queue stalls and row switches
    frequent; every field is in range for ``cfg``.
    """
    rng = np.random.default_rng(seed)
    ch = cfg.channel
    s = empty_stream(n)
    op = rng.choice(3, n, p=[0.3, 0.5, 0.2])
    half_g, half_o = ch.gbuf_entries // 2, ch.obuf_entries // 2
    g = rng.integers(0, min(entries, half_g), n) + half_g * rng.integers(0, 2, n)
    o = rng.integers(0, min(entries, half_o), n) + half_o * rng.integers(0, 2, n)
    s["op"] = op
    s["gbuf"] = np.where(op != Op.RD_OUT, g, 0)
    s["out"] = np.where(op != Op.WR_INP, o, 0)
    s["row"] = np.where(op == Op.MAC, rng.integers(0, min(rows, ch.rows_per_bank), n), 0)
    s["col"] = np.where(op == Op.MAC, rng.integers(0, ch.columns_per_row, n), 0)
    return s
