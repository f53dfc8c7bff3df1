"""LibraPIM Fig. 21 shape: normalised performance for systolic arrays of 32 x 32 to 256 x 256
at input 512, LibraPIM with and without DBO (6.4; ``docs/librapim.md``).

The NPUs are Table 2's (``librapim-npu``: 8 arrays of 64 x 64, 8 vector units of 128 lanes)
with the array side changed (:func:`scaled_npu`): the matrix peak scales with the PEs,
``(size / 64)^2``; memory, clock and buffer stay. The paper does not say how its vector
units change with the arrays; ``width`` (default) keeps Table 2's ratio of 2 lanes per array
column (``lanes = 2 x size``), ``fixed`` keeps 128 lanes. Performance is tokens per second
over that of the smallest array without DBO, per batch.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pimphony.models.fileio import write_figure
from pimphony.models.xpu_config import XpuConfig, load_xpu
from pimphony.sim.experiments.librapim_figs.utilisation import batch_panels, sweep
from pimphony.sim.systems.base import SystemKind
from pimphony.sim.systems.librapim import OffloadReading
from pimphony.sim.systems.setup import DecodeError

__all__ = [
    "FIG21_PAPER",
    "VECTOR_SCALING",
    "fig21_summary",
    "format_fig21",
    "plot_fig21",
    "run_fig21",
    "scaled_npu",
]

#: How the vector lanes follow the array side (module docstring); Table 2: 128 lanes at 64.
VECTOR_SCALING: dict[str, Callable[[int, int, int], int]] = {
    "width": lambda lanes, size, base: lanes * size // base,
    "fixed": lambda lanes, size, base: lanes,
}

#: LibraPIM 6.4 gives the trends only (normalised to 32 x 32 without DBO).
FIG21_PAPER: dict[str, Any] = {
    "small_batch": "gains modest across array sizes; DBO's benefit minimal",
    "batch_256": "notable DBO gains at 32x32 and 64x64; at 128 and 256 the batch counts as "
    "small for the NPU, so little offloading",
}


def scaled_npu(base: XpuConfig, size: int, vector_scaling: str = "width") -> XpuConfig:
    """``base`` (an NPU with systolic arrays and vector units) with ``size x size`` arrays:
    the fp16 peak scales by ``(size / rows)^2``, the vector lanes as ``vector_scaling``
    says (:data:`VECTOR_SCALING`)."""
    sa, vu = base.systolic, base.vector
    if sa is None or vu is None:
        raise DecodeError(f"{base.name}: an NPU preset with [systolic] and [vector] is needed")
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise DecodeError(f"array size {size!r}: must be a positive integer (PEs per side)")
    if vector_scaling not in VECTOR_SCALING:
        raise DecodeError(f"vector scaling {vector_scaling!r}: allowed {', '.join(VECTOR_SCALING)}")
    lanes = max(1, VECTOR_SCALING[vector_scaling](vu.lanes, size, sa.cols))
    freq = base.compute.freq_ghz
    peak = 2 * sa.arrays * size * size * freq / 1e3  # TFLOP/s
    return dataclasses.replace(
        base,
        name=f"{base.name}-{size}x{size}",
        source=f"{base.source}; arrays {size}x{size}, vector lanes {lanes} ({vector_scaling})",
        compute=dataclasses.replace(base.compute, vector_tflops=vu.units * lanes * freq / 1e3),
        peak_tflops=dataclasses.replace(base.peak_tflops, fp16=peak),
        systolic=dataclasses.replace(sa, rows=size, cols=size),
        vector=dataclasses.replace(vu, lanes=lanes),
    )


def run_fig21(
    args: argparse.Namespace, progress: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """The sweep over ``args.sizes`` NPUs; each row gains ``array`` and ``normalised``:
    tokens/s over that of the first of ``args.systems`` (by default ``librapim-no-dbo``) on
    the smallest array at the same batch and input. DBO's offloaded FFN runs under
    ``args.offload`` (an :class:`OffloadReading`; absent: per bank)."""
    base = load_xpu("librapim-npu")
    npus = {s: scaled_npu(base, s, args.vector_scaling) for s in args.sizes}
    rows = sweep(
        args.model,
        args.batches,
        args.contexts,
        args.systems,
        xpus=list(npus.values()),
        groups=args.groups,
        tp=args.tp,
        progress=progress,
        offload=OffloadReading(getattr(args, "offload", OffloadReading.PER_BANK)),
    )
    size_of = {npu.name: s for s, npu in npus.items()}
    for r in rows:
        r["array"] = size_of[r["xpu"]]
    smallest = min(args.sizes)
    ref_system = args.systems[0]
    for r in rows:
        ref = [
            q
            for q in rows
            if (q["array"], q["system"], q["batch"], q["context"])
            == (smallest, ref_system, r["batch"], r["context"])
        ][0]
        r["normalised"] = r["tokens_per_s"] / ref["tokens_per_s"]
    return rows


def fig21_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per batch and array: normalised performance per system and DBO's gain."""
    out: dict[str, Any] = {}
    for r in rows:
        key = f"B{r['batch']}_L{r['context']}_{r['array']}"
        cell = out.setdefault(
            key, {"batch": r["batch"], "context": r["context"], "array": r["array"]}
        )
        cell[r["system"]] = r["normalised"]
        cell[f"{r['system']}_dbo"] = [(g["case"], g["m"], g["n"]) for g in r["groups"]]
    for cell in out.values():
        if SystemKind.LIBRAPIM in cell and SystemKind.LIBRAPIM_NO_DBO in cell:
            cell["dbo_gain"] = cell[SystemKind.LIBRAPIM] / cell[SystemKind.LIBRAPIM_NO_DBO]
    return out


def format_fig21(rows: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    """Per batch and array: normalised performance without / with DBO, the gain, DBO's
    split."""
    lines = [f"{'B':>4s} {'L':>5s} {'array':>8s} {'w/o DBO':>8s} {'w/ DBO':>8s} {'gain':>6s}  DBO"]
    for c in summary.values():
        split = " ".join(f"{k}:m={m},n={n}" for k, m, n in c.get(f"{SystemKind.LIBRAPIM}_dbo", []))
        lines.append(
            f"{c['batch']:4d} {c['context']:5d} {c['array']:>4d}x{c['array']:<3d} "
            f"{c.get(SystemKind.LIBRAPIM_NO_DBO, float('nan')):8.2f} "
            f"{c.get(SystemKind.LIBRAPIM, float('nan')):8.2f} "
            f"{c.get('dbo_gain', float('nan')):6.2f}"
            f"  {split}"
        )
    return "\n".join(lines)


def plot_fig21(rows: list[dict[str, Any]], path: Path) -> Path:
    """Per batch a panel of bars: normalised performance per array size, without and with
    DBO."""
    fig, panels = batch_panels(rows, 5)
    style = {
        SystemKind.LIBRAPIM_NO_DBO: ("#8ecae6", "w/o DBO"),
        SystemKind.LIBRAPIM: ("#e76f51", "w/ DBO"),
    }
    for ax, b in panels:
        sizes = sorted({r["array"] for r in rows if r["batch"] == b})
        for i, (name, (colour, label)) in enumerate(style.items()):
            vals = []
            for s in sizes:
                sel = [r for r in rows if (r["batch"], r["array"], r["system"]) == (b, s, name)]
                vals.append(sel[0]["normalised"] if sel else 0.0)
            ax.bar([k + (i - 0.5) * 0.38 for k in range(len(sizes))], vals, 0.38,
                   color=colour, label=label)  # fmt: skip
        ax.set_xticks(range(len(sizes)), [f"{s}x{s}" for s in sizes])
        ax.set_xlabel("systolic array size (PEs, 8 arrays)")
        ax.set_ylabel("performance (x, vs smallest array w/o DBO)")
        ax.set_title(f"B = {b}, input {rows[0]['context']}")
        ax.legend(fontsize=8)
    fig.suptitle(f"{rows[0]['model']}: NPU size sensitivity (LibraPIM Fig. 21 shape)")
    fig.tight_layout()
    return write_figure(fig, path)
