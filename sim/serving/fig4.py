"""LoL-PIM Fig. 4(b) shape: average batch and decode throughput, static vs lazy KV memory,
over capacity, by serving a saturated queue (``docs/serving.md``).

``pimphony serve-fig4`` (minutes) prints the markdown table of the docs.
"""

from __future__ import annotations

import argparse
from typing import Any

from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.memory import ChunkGeometry
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.cli import bounded_int
from pimphony.sim.serving.engine import ServeConfig, serve
from pimphony.sim.serving.report import metrics
from pimphony.sim.serving.trace import workload_requests

__all__ = ["FIG4_MODULES", "FIG4_WORKLOADS", "add_arguments", "fig4_rows", "run"]

#: 16 GiB ``aim-32ch`` modules (CENT's module, PIMphony Table IV): 64, 128 and 256 GiB.
FIG4_MODULES = (4, 8, 16)
#: The LongBench tasks both papers run on the 32K models.
FIG4_WORKLOADS = ("qmsum", "musique")


def fig4_rows(
    modules: tuple[int, ...] = FIG4_MODULES,
    workloads: tuple[str, ...] = FIG4_WORKLOADS,
    requests_per_slot: int = 3,
    output_tokens: int = 32,
    seed: int = 0,
    system: str = "pim",
) -> list[dict[str, Any]]:
    """One row per (workload, capacity): mean batch and tokens/s of static and lazy memory,
    and the ideal batch (KV capacity over a request's mean KV). Every request arrives at 0
    (a saturated queue); each run serves ``requests_per_slot`` x the lazy pool's ideal batch
    requests, the same requests under both policies; prefill is skipped (decode only).
    ``system="xpu+pim"``: the weights sit on a ``neupims-npu`` xPU, the modules hold KV only."""
    model, hw = load_model("llm-7b"), load_preset("aim-32ch")
    xpu = load_xpu("neupims-npu") if system == "xpu+pim" else None
    weights = model.resident_weight_bytes if xpu is None else 0
    rows = []
    for wl in workloads:
        for n in modules:
            geom = ChunkGeometry.from_config(hw, n)
            kv_cap = geom.total_bytes - weights
            probe = workload_requests(wl, 4000, output_tokens, seed=seed)
            mean_kv = (
                sum(r.input_tokens for r in probe) / len(probe) + (output_tokens - 1) / 2
            ) * model.kv_bytes_per_token
            ideal = kv_cap / mean_kv
            reqs = workload_requests(wl, int(requests_per_slot * ideal), output_tokens, seed=seed)
            row: dict[str, Any] = {
                "system": system,
                "workload": wl,
                "modules": n,
                "capacity_gib": geom.total_bytes / 2**30,
                "requests": len(reqs),
                "ideal_batch": ideal,
            }
            for memory in ("static", "lazy"):
                cfg = ServeConfig(
                    system, model, hw, tp=n, partition="tcp", memory=memory, xpu=xpu, prefill=False
                )
                s = metrics(serve(cfg, reqs))["summary"]
                row[memory] = {
                    "mean_batch": s["mean_batch"],
                    "saturated_batch": s["saturated_mean_batch"],
                    "tokens_per_s": s["throughput_tokens_per_s"],
                    "kv_used": s["mean_kv_used_utilization"],
                }
            rows.append(row)
            print(_line(row), flush=True)
    return rows


def _line(r: dict[str, Any]) -> str:
    """The row's markdown line; ``n/a`` where a run never saturated (no request waited)."""
    st, lz = r["static"], r["lazy"]
    s_sat, l_sat = st["saturated_batch"], lz["saturated_batch"]
    gain = "n/a" if None in (s_sat, l_sat) else f"{100 * (l_sat / s_sat - 1):+.0f}%"
    return (
        f"| {r['workload']} | {r['capacity_gib']:.0f} GiB ({r['modules']} x 16) | {r['requests']} "
        f"| {_batch(s_sat)} | {_batch(l_sat)} | {r['ideal_batch']:.1f} "
        f"| {gain} "
        f"| {st['mean_batch']:.2f} | {lz['mean_batch']:.2f} "
        f"| {st['tokens_per_s']:,.0f} | {lz['tokens_per_s']:,.0f} "
        f"| {lz['tokens_per_s'] / st['tokens_per_s']:.2f}x |"
    )


def _batch(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony serve-fig4``."""
    p.add_argument("--output-tokens", type=bounded_int(1, 1 << 20), default=32)
    p.add_argument("--requests-per-slot", type=bounded_int(1, 1000), default=3)
    p.add_argument("--system", choices=("pim", "xpu+pim"), default="pim")
    p.add_argument("--modules", type=bounded_int(1, 1024), nargs="+", default=list(FIG4_MODULES))
    p.add_argument("--workloads", nargs="+", default=list(FIG4_WORKLOADS))


def run(a: argparse.Namespace) -> int:
    """Print the table, a row as each (workload, capacity) is served."""
    print(
        "| workload | capacity | requests | static batch | lazy batch | ideal | lazy vs static "
        "| static mean (all steps) | lazy mean (all steps) | static tok/s | lazy tok/s | speedup |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    fig4_rows(
        tuple(a.modules),
        tuple(a.workloads),
        a.requests_per_slot,
        a.output_tokens,
        system=a.system,
    )
    return 0
