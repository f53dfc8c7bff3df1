"""PIMphony Fig. 17 shape as serving runs: (a) throughput vs capacity at 64K context, (b)
CENT vs PIMphony as the context grows at 512 GB (``docs/serving.md``).

Every request arrives at 0 (a saturated queue of ``2 x`` what the memory admits at once) with
the figure's context and ``output_tokens`` outputs; prefill is skipped (decode only). The
paper's "3-sigma context variation" is not defined, so contexts are fixed, as in the decode
rows of ``docs/fidelity.md``. ``pimphony serve-fig17`` (minutes) prints the markdown tables of
the docs.
"""

from __future__ import annotations

import argparse
from typing import Any

from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.sim.cli import bounded_int
from pimphony.sim.serving.engine import ServeConfig, serve
from pimphony.sim.serving.report import metrics
from pimphony.sim.serving.trace import Request
from pimphony.sim.systems.admission import fill_batch
from pimphony.sim.systems.techniques import CENT, PIMPHONY

__all__ = [
    "FIG17A_MODULES",
    "FIG17B_CONTEXTS",
    "SYSTEMS",
    "add_arguments",
    "fig17a_rows",
    "fig17b_rows",
    "run",
]

PRESET = "pimphony-cent"  # CENT's 16 GB modules (PIMphony Table IV)
#: (a): 8-64 CENT modules = 128-1024 GB at 64K context.
FIG17A_MODULES = (8, 16, 32, 64)
#: (b): 4K to 1M at 512 GB (32 modules).
FIG17B_CONTEXTS = (4096, 16384, 65536, 262144, 1 << 20)
#: (label, partition, scheduler, memory): the CENT baseline and PIMphony (as the ablation).
SYSTEMS = (("CENT", *CENT), ("PIMphony", *PIMPHONY))


def _run(model: str, modules: int, tp: int, context: int, system: tuple, outputs: int) -> dict:
    spec, hw = load_model(model), load_preset(PRESET)
    _, partition, sched, memory = system
    admitted = len(
        fill_batch(spec, hw, modules, memory, [context] * 4096, context, all_may_fit=True)
    )
    reqs = [Request(i, 0.0, context - outputs, outputs) for i in range(2 * max(admitted, 1))]
    cfg = ServeConfig(
        "pim", spec, hw, tp=tp, pp=modules // tp, partition=partition, sched=sched,
        memory=memory, max_context=context, prefill=False,
    )  # fmt: skip
    s = metrics(serve(cfg, reqs))["summary"]
    return {
        "requests": len(reqs),
        "mean_batch": s["mean_batch"],
        "tokens_per_s": s["throughput_tokens_per_s"],
        "steps": s["decode_steps"],
    }


def fig17a_rows(modules=FIG17A_MODULES, outputs: int = 64, tp: int = 8) -> list[dict[str, Any]]:
    """(a): PIMphony at 64K context on each capacity (TP ``tp``, PP = modules / tp)."""
    rows = []
    for n in modules:
        r = _run("llama-3.1-8b", n, min(tp, n), 65536, SYSTEMS[1], outputs)
        rows.append({"modules": n, "capacity_gb": 16 * n, **r})
        print(f"| {16 * n} GB ({n} modules) | {r['requests']} | {r['mean_batch']:.1f} "
              f"| {r['tokens_per_s']:,.0f} |", flush=True)  # fmt: skip
    return rows


def fig17b_rows(contexts=FIG17B_CONTEXTS, outputs: int = 64, tp: int = 8) -> list[dict[str, Any]]:
    """(b): CENT and PIMphony at 512 GB (32 modules, TP ``tp``) for each context."""
    rows = []
    for ctx in contexts:
        model = "llama-3.1-8b" if ctx <= 131072 else "llama-3.1-8b-1m"
        row: dict[str, Any] = {"context": ctx}
        for system in SYSTEMS:
            row[system[0]] = _run(model, 32, tp, ctx, system, outputs)
        row["speedup"] = row["PIMphony"]["tokens_per_s"] / row["CENT"]["tokens_per_s"]
        c, p = row["CENT"], row["PIMphony"]
        print(f"| {ctx:,} | {c['mean_batch']:.1f} | {c['tokens_per_s']:,.1f} "
              f"| {p['mean_batch']:.1f} | {p['tokens_per_s']:,.1f} | {row['speedup']:.1f}x |",
              flush=True)  # fmt: skip
        rows.append(row)
    return rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony serve-fig17``."""
    p.add_argument("--outputs", type=bounded_int(1, 1 << 20), default=64)
    p.add_argument("--part", choices=("a", "b", "both"), default="both")


def run(a: argparse.Namespace) -> int:
    """Print the tables of ``--part``, a row as each point is served."""
    if a.part in ("a", "both"):
        print("| capacity | requests | mean batch | tokens/s |\n|---|---:|---:|---:|")
        fig17a_rows(outputs=a.outputs)
    if a.part in ("b", "both"):
        print("\n| context | CENT batch | CENT tok/s | PIMphony batch | PIMphony tok/s | speedup |")
        print("|---:|---:|---:|---:|---:|---:|")
        fig17b_rows(outputs=a.outputs)
    return 0
