"""The decode-step report: one frozen record, its text form, its plot and its file stem."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pimphony.compiler.llm import LayerOp
from pimphony.compiler.plan import ScoreOverflow
from pimphony.models.config import HardwareConfig
from pimphony.models.fileio import pyplot, write_figure
from pimphony.models.xpu_config import XpuConfig
from pimphony.sim.provenance import inputs_digest
from pimphony.sim.systems.energy import energy_line
from pimphony.sim.systems.setup import DecodeSetup

__all__ = [
    "LATER_FIELDS",
    "OP_KEYS",
    "OP_STYLE",
    "DecodeReport",
    "capacity_text",
    "context_stats",
    "context_text",
    "digest_inputs",
    "format_report",
    "plot_report",
    "report_stem",
    "setup_digest",
    "table_lines",
]

#: Report keys of a layer's parts, in execution order.
OP_KEYS = (*LayerOp, "epu_other", "allreduce", "cmd_transfer")


@dataclass(frozen=True)
class DecodeReport:
    """What one decode step measured; :meth:`to_dict` is the JSON report (``docs/decode.md``).

    Headline numbers are fields; the per-op breakdown (``ops``), EPU, pipeline, HUB, memory,
    DPA and simulation details are JSON-ready dicts; ``provenance`` says what produced it
    (:func:`sim.provenance.provenance`).
    """

    model: str
    preset: str
    batch: int
    context_lengths: dict[str, Any]
    modules: int
    tp: int
    pp: int
    micro_batches: int
    partition: str
    partition_layers: dict[str, int]
    sched: str
    memory: str
    cycles: int
    step_seconds: float
    tokens_per_s: float
    mac_utilization: float
    channel_utilization: float
    capacity_utilization: float | None
    attention_share: float
    fc_share: float
    other_share: float
    ops: dict[str, dict[str, Any]]
    epu: dict[str, Any]
    pipeline: dict[str, Any]
    hub: dict[str, Any]
    memory_detail: dict[str, Any]
    dpa: dict[str, Any]
    simulation: dict[str, Any]
    energy: dict[str, Any] = dataclasses.field(default_factory=dict)
    mapping: dict[str, Any] = dataclasses.field(default_factory=dict)  # --mapping tuned only
    provenance: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The report as one JSON-ready dict, keys in field order (``mapping`` only when the
        step was tuned, so a fixed step's report is what it was before the option)."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name != "mapping" or self.mapping
        }


#: Each report key's label and plot colour, in :data:`OP_KEYS` order.
OP_STYLE: dict[str, tuple[str, str]] = {
    "qkv": ("QKV", "#8ecae6"),
    "qk": ("QK^T", "#2a9d8f"),
    "softmax": ("softmax/EPU", "#e9c46a"),
    "sv": ("SV", "#52b788"),
    "proj": ("projection", "#219ebc"),
    "ffn1": ("FFN1", "#023047"),
    "ffn2": ("FFN2", "#3a5a80"),
    "epu_other": ("norm/act (EPU)", "#f4a261"),
    "allreduce": ("TP all-reduce", "#e76f51"),
    "cmd_transfer": ("host cmd transfer", "#9d0208"),
}


def context_stats(lengths: Sequence[int]) -> dict[str, Any]:
    """A batch's context lengths as the step reports state them: min, mean and max."""
    return {"min": min(lengths), "mean": float(np.mean(lengths)), "max": max(lengths)}


def context_text(ctx: dict[str, Any]) -> str:
    """:func:`context_stats` as the step reports' text gives them."""
    return f"context min/mean/max {ctx['min']}/{ctx['mean']:.0f}/{ctx['max']}"


def capacity_text(share: float | None) -> str:
    """A step's capacity utilisation as text (``None``: the batch did not fit)."""
    return f"{100 * share:.1f}%" if share is not None else "n/a (does not fit; --ignore-capacity)"


def table_lines(columns: Sequence[tuple[str, int]], rows: Iterable[Sequence[str]]) -> list[str]:
    """A text table of the step reports: the header of ``columns`` (name, width), then a line
    per row of formatted cells; the first column left-aligned, the others right-aligned."""
    widths = [w for _, w in columns]

    def line(cells: Sequence[str]) -> str:
        (first, w0), *rest = zip(cells, widths, strict=True)
        return f"{first:<{w0}}" + "".join(f"{c:>{w}}" for c, w in rest)

    return [line([name for name, _ in columns]), *(line(cells) for cells in rows)]


#: Setup fields added after digests were first published, each with the value at which a
#: digest leaves it out (so that digests at the default stay what they were).
LATER_FIELDS: dict[str, Any] = {"score_overflow": ScoreOverflow.GPR_TILES.value}


def digest_inputs(setup: Any, **extra: Any) -> dict[str, Any]:
    """A step setup's fields and ``extra`` as digest inputs: a PIM preset by its hash, the
    model and other devices in full; a :data:`LATER_FIELDS` field at its default left out."""
    inputs = {f.name: getattr(setup, f.name) for f in dataclasses.fields(setup)} | extra
    for k, default in LATER_FIELDS.items():
        if k in inputs and inputs[k] == default:
            del inputs[k]
    for k, v in inputs.items():
        if isinstance(v, HardwareConfig):
            inputs[k] = v.sha256()
        elif isinstance(v, XpuConfig):
            inputs[k] = v.to_dict()
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            inputs[k] = dataclasses.asdict(v)
    return inputs


def report_stem(setup: DecodeSetup) -> str:
    """File stem naming a step's configuration, ending in a short hash of every input (the
    hardware values, the model, each context length and every choice), so that different
    inputs never share a report name."""
    m = setup.model
    return (
        f"{m.name}-B{len(setup.lengths)}-T{max(setup.lengths)}-tp{setup.tp}pp{setup.pp}-"
        f"{setup.partition}-{setup.sched}-{setup.memory}-"
        f"{'tuned-' if setup.mapping == 'tuned' else ''}{setup_digest(setup)[:8]}"
    )


def setup_digest(setup: DecodeSetup) -> str:
    """SHA-256 of everything a decode step depends on."""
    inputs = digest_inputs(setup)
    if inputs["mapping"] == "fixed":  # added later: the default leaves digests as they were
        del inputs["mapping"]
    return inputs_digest(inputs)


def format_report(report: DecodeReport) -> str:
    """The report as text: headline numbers and the per-op breakdown."""
    r = report.to_dict()
    part = r["partition"].upper()
    if list(r["partition_layers"]) != [r["partition"]]:  # auto: which partition each layer ran
        used = ", ".join(f"{k.upper()} x {n}" for k, n in r["partition_layers"].items())
        part += f" ({used} layers)"
    lines = [
        f"{r['model']} decode step on {r['modules']} x {r['preset']} (TP {r['tp']} x PP "
        f"{r['pp']}, {r['micro_batches']} micro-batch(es)), {part}, "
        f"{r['sched']} scheduler, {r['memory']} memory",
        f"batch {r['batch']}, {context_text(r['context_lengths'])}",
        f"cycles {r['cycles']:,}  ({1e3 * r['step_seconds']:.3f} ms)   "
        f"tokens/s {r['tokens_per_s']:,.1f}",
        f"MAC utilisation {100 * r['mac_utilization']:.1f}%   channel utilisation "
        f"{100 * r['channel_utilization']:.1f}%   capacity utilisation "
        f"{capacity_text(r['capacity_utilization'])}",
        f"attention {100 * r['attention_share']:.1f}%   FC {100 * r['fc_share']:.1f}%   "
        f"other {100 * r['other_share']:.1f}%   pipeline bubble "
        f"{100 * r['pipeline']['bubble_fraction']:.1f}%",
        "",
        *table_lines(
            (("op", 18), ("cycles", 14), ("share", 8), ("MAC util", 10)),
            (
                (
                    OP_STYLE[k][0],
                    f"{op['cycles']:,}",
                    f"{100 * op['share']:.1f}%",
                    f"{100 * op['mac_utilization']:.1f}%",
                )
                for k in OP_KEYS
                if (op := r["ops"][k])["cycles"]
            ),
        ),
    ]
    e = r["epu"]
    lines += [
        "",
        f"SV cross-channel reduction: {e['sv_reduction_busy_cycles']:,} EPU cycles, "
        f"{e['sv_reduction_marginal_cycles']:,} on the critical path = "
        f"{100 * e['sv_reduction_share_of_attention']:.3f}% of attention time",
    ]
    hub = r["hub"]
    lines.append(
        f"HUB instructions per step: {sum(hub['instructions'].values()):,} "
        f"({hub['total_bytes'] / 2**20:.1f} MiB at {hub['instruction_bytes']} B)"
    )
    if r["dpa"]["enabled"]:
        d = r["dpa"]
        lines.append(
            f"DPA: programs {d['program_bytes']:,} B, VA2PA {d['va2pa_bytes_per_module']:,} B "
            "per module"
            + (f"; static fallback for {', '.join(d['refused'])}" if d["refused"] else "")
        )
    if r.get("energy"):
        lines.append(energy_line(r["energy"]))
    if r.get("mapping"):
        from pimphony.sim.systems.tuned import mapping_lines

        lines += mapping_lines(r["mapping"])
    sim = r["simulation"]
    lines.append(
        f"simulated {sim['kernels_simulated']} distinct kernels standing for "
        f"{sim['channel_commands']:,} channel commands in {sim['wall_seconds']:.2f} s"
    )
    return "\n".join(lines)


def plot_report(report: DecodeReport, path: Path) -> Path:
    """PNG: per-op share of stage time (stacked bar) and per-op MAC utilisation."""
    r = report.to_dict()
    plt = pyplot()
    keys = [k for k in OP_KEYS if r["ops"][k]["cycles"]]
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(9.5, 4.0), gridspec_kw={"width_ratios": [1, 2.2]}
    )
    bottom = 0.0
    for k in keys:
        share = 100 * r["ops"][k]["share"]
        left.bar(
            ["decode step"], [share], bottom=bottom, color=OP_STYLE[k][1], label=OP_STYLE[k][0]
        )
        if share > 4:
            left.text(0, bottom + share / 2, f"{share:.0f}%", ha="center", va="center", fontsize=8)
        bottom += share
    left.set_ylabel("share of stage time (%)")
    left.set_ylim(0, 100)
    left.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    util_keys = [k for k in keys if r["ops"][k]["mac_utilization"] > 0]
    xs = np.arange(len(util_keys))
    right.bar(
        xs,
        [100 * r["ops"][k]["mac_utilization"] for k in util_keys],
        color=[OP_STYLE[k][1] for k in util_keys],
    )
    right.set_xticks(xs, [OP_STYLE[k][0] for k in util_keys], fontsize=8)
    right.set_ylabel("MAC utilisation (%)")
    right.axhline(100 * r["mac_utilization"], ls="--", color="k", lw=1, label="whole step")
    right.legend(fontsize=8)
    fig.suptitle(
        f"{r['model']} B={r['batch']} TP{r['tp']}xPP{r['pp']} {r['partition'].upper()} "
        f"{r['sched']} {r['memory']}: {r['tokens_per_s']:,.0f} tokens/s",
        fontsize=10,
    )
    fig.tight_layout()
    return write_figure(fig, path)
