"""``pimphony ablation --system xpu+pim``: PIMphony Fig. 14 -- HFP -> +TCP -> +DCS -> +DPA on
a NeuPIMs-style xPU+PIM system.

The system is ``modules`` NeuPIMs devices (PIMphony Table IV: 8 matrix units and 32 PIM
channels sharing 32 GB). Each device's memory is one PIM module (``pimphony-neupims``) that
holds its share of the weights and of the KV cache; its NPU (``neupims-npu``) reads the weights
through the same channels. So:

- **Capacity.** A batch is admitted as on the PIM-only system: weights and KV together in
  ``modules x 32 GiB`` (:func:`sim.systems.admission.queue_batches`), static memory
  reserving the model's window per request, DPA's lazy allocation what each request uses.
  That is where DPA helps here: it enlarges the batch the NPUs see.
- **FC on the NPUs.** The FC layers run tensor parallel over the ``modules`` NPUs (Megatron's
  split: each NPU reads ``1 / modules`` of every weight). They are costed as one device of
  ``modules`` times the NPU's arrays, vector units, peak, bandwidth, buffer and capacity
  (:func:`tensor_parallel_xpu`): the split GEMMs quantise to the same tiles up to rounding of
  the column split. The two all-reduces per layer between NPUs are **not** charged (NeuPIMs
  and PIMphony name no inter-device link); each row reports what they would add serially on
  the preset's 10 GB/s ``device_gbps`` (``allreduce_ms_not_charged``).
- **Attention on PIM.** Tensor parallel over the ``modules`` PIM modules (KV heads split),
  timed by :func:`sim.systems.hetero.run_hetero_decode` with the step's partition,
  scheduler and memory policy; ``--sub-batches auto`` per batch (NeuPIMs pipelines sub-batches,
  so every step, the baseline included, gets its best K).

Every step serves the same requests (``sim.experiments.ablation``); tokens/s is the requests
over the summed step times.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.fileio import pyplot, write_figure
from pimphony.models.xpu import ring_allreduce_seconds
from pimphony.models.xpu_config import XpuConfig, load_xpu
from pimphony.sim.experiments.ablation import STEP_COLOURS, STEPS, summed_energy
from pimphony.sim.systems.admission import queue_batches
from pimphony.sim.systems.hetero import SUB_BATCHES_AUTO, HeteroSetup, run_hetero_decode
from pimphony.sim.systems.kernels import KernelCache
from pimphony.sim.systems.setup import DecodeSetup
from pimphony.sim.workloads import load_workload, sample_context_lengths

__all__ = [
    "FIG14_CASES",
    "HETERO_MODULES",
    "HETERO_PRESET",
    "HETERO_XPU",
    "STEP_LABELS",
    "case_label",
    "format_hetero_ablation",
    "hetero_ablation",
    "plot_hetero_ablation",
    "tensor_parallel_xpu",
]

#: PIMphony's xPU+PIM system: NeuPIMs' NPU (``configs/xpu/neupims-npu.toml``) on its 32 GB
#: PIM module (``configs/pimphony-neupims.toml``), 4 of them = 128 GB for the 7B models
#: (PIMphony VIII-A: "128GB for 7B and 512GB for 72B").
HETERO_XPU = "neupims-npu"
HETERO_PRESET = "pimphony-neupims"
HETERO_MODULES = 4
#: The cumulative steps' labels, in order.
STEP_LABELS = tuple(step[0] for step in STEPS)


def tensor_parallel_xpu(xpu: XpuConfig, n: int) -> XpuConfig:
    """``n`` copies of ``xpu`` working tensor parallel, as one device: arrays, vector units,
    peaks, DRAM bandwidth, buffer and capacity times ``n``; clock, caps and links unchanged.

    Each of ``n`` devices runs ``1 / n`` of every GEMM's weight columns (or rows) and reads
    ``1 / n`` of the weights, so the GEMM's time is the one device's time of a ``1 / n`` slice,
    which is what this device costs up to the rounding of the slice to whole tiles. All-reduce
    between the devices is not included (the caller accounts for it).
    """
    if n == 1:
        return xpu
    peaks = {
        f.name: getattr(xpu.peak_tflops, f.name) * n for f in dataclasses.fields(xpu.peak_tflops)
    }
    return dataclasses.replace(
        xpu,
        name=f"{n}x{xpu.name}",
        source=f"{n} x {xpu.name}, tensor parallel (sim.experiments.hetero_ablation)",
        compute=dataclasses.replace(xpu.compute, vector_tflops=xpu.compute.vector_tflops * n),
        peak_tflops=dataclasses.replace(xpu.peak_tflops, **peaks),
        memory=dataclasses.replace(
            xpu.memory,
            bandwidth_gbps=xpu.memory.bandwidth_gbps * n,
            capacity_gib=xpu.memory.capacity_gib * n,
            buffer_kib=xpu.memory.buffer_kib * n,
        ),
        systolic=None
        if xpu.systolic is None
        else dataclasses.replace(xpu.systolic, arrays=xpu.systolic.arrays * n),
        vector=None
        if xpu.vector is None
        else dataclasses.replace(xpu.vector, units=xpu.vector.units * n),
    )


def hetero_ablation(
    model: str = "llm-7b",
    workload: str = "qmsum",
    preset: str = HETERO_PRESET,
    modules: int = HETERO_MODULES,
    requests: int = 32,
    seed: int = 0,
    xpu: str = HETERO_XPU,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per cumulative step (:data:`sim.experiments.ablation.STEPS`) on ``modules``
    NeuPIMs-style devices (module docstring): batches, tokens/s over the whole queue, the
    sub-batch counts chosen, the NPUs' and PIM's busy shares, speedup over the first step."""
    spec, hw = load_model(model), load_preset(preset)
    device = load_xpu(xpu)
    npus = tensor_parallel_xpu(device, modules)
    queue = [int(t) for t in sample_context_lengths(load_workload(workload), requests, seed)]
    caches: dict[tuple[str, str], KernelCache] = {}
    rows = []
    for label, partition, sched, memory in STEPS:
        batches = queue_batches(spec, hw, modules, memory, queue)
        cache = caches.setdefault(
            (sched, memory),
            KernelCache(hw, sched, True, dpa=memory == "lazy", dpa_max_tokens=max(queue)),
        )
        steps = []
        for i, batch in enumerate(batches, start=1):
            pim = DecodeSetup(
                spec, hw, batch, tp=modules, partition=partition, sched=sched, memory=memory
            )
            r = run_hetero_decode(HeteroSetup(pim, npus, SUB_BATCHES_AUTO), cache)
            steps.append(r)
            if progress:
                progress(
                    f"{label}: batch {i}/{len(batches)} of {len(batch)} requests: K "
                    f"{r.sub_batches}, {r.tokens_per_s:,.0f} tokens/s"
                )
        seconds = sum(st.step_seconds for st in steps)
        allreduce = sum(
            2
            * spec.layers
            * ring_allreduce_seconds(device, len(b) * spec.hidden * spec.element_bytes, modules)
            for b in batches
        )

        parts = summed_energy(steps)  # every batch's step, J by part (docs/energy.md)

        def busy(dev: str, steps=steps, seconds=seconds) -> float:
            return (
                sum(st.devices[dev]["busy_cycles"] / (st.freq_ghz * 1e9) for st in steps) / seconds
            )

        rows.append(
            {
                "step": label,
                "partition": partition,
                "sched": sched,
                "memory": memory,
                "requests": len(queue),
                "batches": len(batches),
                "batch": len(queue) / len(batches),
                "batch_sizes": [len(b) for b in batches],
                "sub_batches": dict(sorted(Counter(st.sub_batches for st in steps).items())),
                "tokens_per_s": len(queue) / seconds,
                "xpu_busy": busy("xpu"),
                "pim_busy": busy("pim"),
                "allreduce_ms_not_charged": 1e3 * allreduce,
                "seconds": seconds,
                "tokens_per_s_allreduce_serial": len(queue) / (seconds + allreduce),
                "energy_j": {"unit": "J", **parts},
                "joules_per_token": parts["total"] / len(queue),
            }
        )
    base = rows[0]["tokens_per_s"]
    base_ar = rows[0]["tokens_per_s_allreduce_serial"]
    for row in rows:
        row["speedup"] = row["tokens_per_s"] / base
        row["speedup_allreduce_serial"] = row["tokens_per_s_allreduce_serial"] / base_ar
    return rows


#: PIMphony Fig. 14's cases as run here: (model, workload, devices, requests). Non-GQA models
#: on LongBench, GQA models on LV-Eval (VIII-A); 4 devices = 128 GB for 7B, 16 = 512 GB for
#: 72B. LLM-72B-128K-wGQA (``llama-3.1-70b``, 8 KV heads) runs on 8 devices (256 GB): the
#: attention is tensor parallel over KV heads (``compiler.plan.Parallelism``), so 16 modules
#: cannot split 8 KV heads and the xPU+PIM step has no pipeline stages to put them in.
FIG14_CASES: tuple[tuple[str, str, int, int], ...] = (
    ("llm-7b", "qmsum", 4, 32),
    ("llm-72b", "qmsum", 16, 32),
    ("llama-3.1-8b", "multifieldqa", 4, 48),
    ("llama-3.1-8b", "loogle-sd", 4, 48),
    ("llama-3.1-70b", "multifieldqa", 8, 16),
)
#: Colours of the four steps (as ``sim.experiments.ablation.plot_ablation``).


def case_label(model: str, workload: str, modules: int) -> str:
    """``model workload, N x 32 GB`` -- a plot group and table row name."""
    return f"{model} {workload}, {modules} dev"


def format_hetero_ablation(rows: list[dict[str, Any]]) -> str:
    """One case's rows as a text table."""
    head = (
        f"{'step':<16}{'batches':>8}{'mean batch':>11}{'K chosen':>14}{'tokens/s':>10}"
        f"{'speedup':>9}{'NPU busy':>9}{'PIM busy':>9}{'J/token':>9}{'xPU share':>10}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ks = ",".join(f"{k}:{n}" for k, n in r["sub_batches"].items())
        lines.append(
            f"{r['step']:<16}{r['batches']:>8}{r['batch']:>11.1f}{ks:>14}"
            f"{r['tokens_per_s']:>10,.0f}{r['speedup']:>8.2f}x{100 * r['xpu_busy']:>8.0f}%"
            f"{100 * r['pim_busy']:>8.0f}%{r['joules_per_token']:>9.4f}"
            f"{100 * r['energy_j']['xpu'] / r['energy_j']['total']:>9.1f}%"
        )
    n = rows[0]["requests"] if rows else 0
    ar = rows[0]["allreduce_ms_not_charged"] if rows else 0.0
    lines.append(
        f"every step serves the same {n} requests; K chosen = sub-batch count: batches; "
        f"NPU all-reduces not charged ({ar:.2f} ms over the queue on the 10 GB/s device link)"
    )
    return "\n".join(lines)


def plot_hetero_ablation(cases: dict[str, list[dict[str, Any]]], path: Path, title: str) -> Path:
    """Grouped bars: per case, each step's throughput over the case's HFP baseline."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.9 * len(cases) + 1.5), 4.0))
    width = 0.8 / len(STEP_LABELS)
    for j, label in enumerate(STEP_LABELS):
        xs = [i + (j - (len(STEP_LABELS) - 1) / 2) * width for i in range(len(cases))]
        ys = [next(r["speedup"] for r in rows if r["step"] == label) for rows in cases.values()]
        ax.bar(xs, ys, width, color=STEP_COLOURS[j], label=label)
        for x, y in zip(xs, ys, strict=True):
            ax.text(x, y, f"{y:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(cases)), [c.replace(", ", "\n") for c in cases], fontsize=8)
    ax.set_ylabel("throughput (tokens/s) / HFP baseline's (x)")
    ax.set_xlabel("model, workload, NeuPIMs devices (32 GB each)")
    top = max(r["speedup"] for rows in cases.values() for r in rows)
    ax.set_ylim(0, top * 1.2)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return write_figure(fig, path)
