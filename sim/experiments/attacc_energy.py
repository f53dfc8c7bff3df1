"""``pimphony attacc-energy``: energy of AttAcc kernels on one group (``docs/energy.md``).

Each kernel of DCC's AttAcc back end (GEMV, QK^T, SV, and the attention of one head: QK^T,
softmax, SV) is lowered to one group's stream on AttAcc's default mapping
(:mod:`compiler.dcc.attacc_lowering`), timed (:func:`models.attacc.time_stream`) and converted by
the ``attacc`` preset (:func:`models.energy.attacc_energy`), with both activation readings.
Beside it, the AttAcc simulator's own formula on the same command counts (its
``ramulator_wrapper`` traffic classes x its ``ENERGY_TABLE``, ``src/devices.py``: no
background, activation per bit accessed, the per-bit 'io' values multiplied by bytes), and the
sensitivity of each kernel's energy to the HBM3 standby currents (a choice: no public HBM3
IDD), scaled 0.25x to 4x.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from pimphony.compiler.dcc.attacc_lowering import lower_attention, lower_group
from pimphony.compiler.dcc.schedule import DccKernel
from pimphony.models.attacc import time_stream
from pimphony.models.backends import BackendConfig, load_backend
from pimphony.models.energy import (
    ActBasis,
    AttAccEnergyParams,
    EnergyConfigError,
    attacc_activity,
    attacc_energy,
    load_energy,
)
from pimphony.models.fileio import BUILD_DIR, pyplot, write_figure
from pimphony.sim.provenance import provenance
from pimphony.sim.report import ReportFiles, publish_json

__all__ = [
    "IDD_SCALES",
    "KERNELS",
    "add_arguments",
    "format_rows",
    "kernel_rows",
    "plot_sensitivity",
    "run",
    "simulator_formula",
]

OUT_DIR = BUILD_DIR / "energy"
#: (label, kernel, sizes, cores, useful MACs): one group's share on AttAcc's default mapping
#: (docs/dcc.md's table), ``None`` kernel = the attention of one head.
KERNELS: tuple[tuple[str, DccKernel | None, tuple[int, ...], tuple[int, ...], int], ...] = (
    ("GEMV 1024 x 4096", DccKernel.GEMV, (1024, 4096), (16, 4), 1024 * 4096),
    ("GEMV 4096 x 1024", DccKernel.GEMV, (4096, 1024), (16, 4), 4096 * 1024),
    ("QK^T 1 x 4096 x 128", DccKernel.QK, (1, 4096, 128), (1, 16, 4), 4096 * 128),
    ("SV 1 x 4096 x 128", DccKernel.SV, (1, 128, 4096), (1, 4, 16), 4096 * 128),
    ("ATTN 1 x 4096 x 128", None, (1, 4096, 128), (1, 16, 4), 2 * 4096 * 128),
)
#: Scales of the HBM3 standby currents swept.
IDD_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)


def simulator_formula(counts: dict[str, int], params: AttAccEnergyParams, macs: int) -> float:
    """The AttAcc simulator's energy of a bank-level PIM kernel from its command counts, pJ
    (``src/ramulator_wrapper.py`` and ``src/devices.py``, commit c1540de): traffic in bytes --
    interposer WRGB x 32, TSV / GIO / BG mux (WRGB + MVSB + MVGB) x 32, cells MAC x 32 x 64
    banks -- times ``io`` [0.3, 0.5, 1.23, 1.01] (pJ/bit values applied to bytes, as the code
    does) and ``mem`` = (0.11 + 0.44) x 8 pJ/B, plus useful MACs x ``alu``; no background, no
    RDSB (its traces end in the buffer)."""
    v = params.values
    moved = 32 * (counts["WRGB"] + counts["MVSB"] + counts["MVGB"])
    io = 32 * counts["WRGB"] * v["interposer_energy"] + moved * (
        v["tsv_energy"] + v["bg_mux_to_gio_energy"] + v["bank_to_bg_mux_energy"]
    )
    cells = counts["MACAB"] * 32 * 64 * (v["cell_act_energy"] + v["cell_column_energy"]) * 8
    return io + cells + macs * v["alu_energy"]


def _stream(cfg: BackendConfig, kernel, sizes, cores):
    if kernel is None:
        return lower_attention(cfg, sizes, cores).stream
    return lower_group(cfg, kernel, sizes, cores).stream


def kernel_rows(cfg: BackendConfig, params: AttAccEnergyParams) -> list[dict[str, Any]]:
    """One row per :data:`KERNELS` entry: cycles, energy by part (pJ) under both activation
    readings, pJ per useful MAC, the simulator's formula, and total energy at each of
    :data:`IDD_SCALES` (the standby currents scaled)."""
    assert cfg.timing is not None
    rows = []
    for label, kernel, sizes, cores, macs in KERNELS:
        stream = _stream(cfg, kernel, sizes, cores)
        tl = time_stream(cfg, stream)
        act = attacc_activity(cfg, stream, tl.issue, tl.cycles)
        row: dict[str, Any] = {"kernel": label, "cycles": tl.cycles,
                               "us": tl.cycles / cfg.timing.freq_ghz / 1e3,
                               "counts": dict(act.counts), "useful_macs": macs}  # fmt: skip
        for basis in ActBasis:
            e = attacc_energy(act, cfg, params, basis)
            row[str(basis)] = {"pj": e.to_dict("pJ"), "pj_per_mac": e.total / macs}
        row["simulator_pj"] = simulator_formula(act.counts, params, macs)
        scaled = {}
        for k in IDD_SCALES:
            values = {**params.values, "idd3n": params.values["idd3n"] * k,
                      "idd2n": params.values["idd2n"] * k}  # fmt: skip
            e = attacc_energy(act, cfg, dataclasses.replace(params, values=values))
            scaled[str(k)] = {"total": e.total, "background_share": e.background / e.total}
        row["idd_scale"] = scaled
        rows.append(row)
    return rows


def format_rows(rows: list[dict[str, Any]], preset: str) -> str:
    """A text table of :func:`kernel_rows` (nJ)."""
    lines = [
        f"AttAcc kernels on one group, energy preset {preset} (nJ; ACT/PRE per row | accessed)",
        f"{'kernel':<20} {'cycles':>7} {'MAC':>8} {'I/O':>7} {'ACT/PRE':>15} {'bg':>7} "
        f"{'EPU':>6} {'total':>17} {'pJ/MAC':>11} {'simulator':>9} {'bg x0.25..x4':>13}",
    ]
    for r in rows:
        a, b = r["row"]["pj"], r["accessed"]["pj"]
        s = r["idd_scale"]
        lines.append(
            f"{r['kernel']:<20} {r['cycles']:>7,} {a['mac'] / 1e3:>8.1f} {a['io'] / 1e3:>7.1f} "
            f"{a['activation'] / 1e3:>7.1f} |{b['activation'] / 1e3:>6.1f} "
            f"{a['background'] / 1e3:>7.1f} {a['epu'] / 1e3:>6.2f} {a['total'] / 1e3:>8.1f} |"
            f"{b['total'] / 1e3:>7.1f} {r['row']['pj_per_mac']:>5.2f} |"
            f"{r['accessed']['pj_per_mac']:>5.2f} {r['simulator_pj'] / 1e3:>9.1f} "
            f"{100 * s['0.25']['background_share']:>5.1f}-"
            f"{100 * s['4.0']['background_share']:.1f}%"
        )
    return "\n".join(lines)


def plot_sensitivity(rows: list[dict[str, Any]], path: Path) -> Path:
    """Each kernel's energy (relative to the preset's) and background share vs the scale of
    the HBM3 standby currents."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for r in rows:
        s = r["idd_scale"]
        base = s["1.0"]["total"]
        a.plot(IDD_SCALES, [s[str(k)]["total"] / base for k in IDD_SCALES], "o-", label=r["kernel"])
        b.plot(IDD_SCALES, [100 * s[str(k)]["background_share"] for k in IDD_SCALES], "o-",
               label=r["kernel"])  # fmt: skip
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("HBM3 IDD2N, IDD3N / preset value")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    a.set_ylabel("kernel energy / energy at the preset's currents")
    a.set_title("energy vs standby current")
    b.set_ylabel("background share of the kernel's energy (%)")
    b.set_title("background share")
    fig.suptitle("AttAcc kernels on one group: sensitivity to the HBM3 standby choice")
    fig.tight_layout()
    return write_figure(fig, path)


_FILES = ReportFiles(OUT_DIR / "attacc.json", OUT_DIR / "attacc-idd.png")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``attacc-energy`` subcommand's options."""
    p.add_argument("--backend", default="attacc", help="AttAcc back end name or .toml")
    p.add_argument("--energy", default="attacc", help="kind = attacc energy preset or .toml")
    _FILES.add_options(p)


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony attacc-energy``."""
    report, plot = _FILES.paths(args)
    cfg = load_backend(args.backend)
    params = load_energy(args.energy)
    if not isinstance(params, AttAccEnergyParams):
        raise EnergyConfigError(
            f"--energy {args.energy}: preset {params.name} is of kind {str(params.kind)!r}; "
            "allowed: kind 'attacc' (attacc)"
        )
    params.chips(cfg)
    rows = kernel_rows(cfg, params)
    doc = {"preset": params.name, "backend": cfg.name, "rows": rows,
           "provenance": provenance(args, backend=cfg.name, energy=params.name)}  # fmt: skip
    plot_sensitivity(rows, plot)
    files = {"report": report, "plot": plot}
    publish_json(doc, files, args.json, lambda: format_rows(rows, params.name))
    return 0
