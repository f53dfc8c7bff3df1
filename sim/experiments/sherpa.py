"""PIM-SHERPA (seed 004): DRAM capacity of the four weight strategies (Fig. 9).

``pimphony sherpa --model llama-3.2-1b`` lays every weight matrix out as the strategies
need it (:mod:`models.layout`) and reports what each keeps in DRAM:

- **WD**, weight duplication: a host-friendly cacheable copy for prefill and a PIM-aware
  non-cacheable copy for decode (3.2);
- **FACIL-O**: one PIM-aware copy; an oracle memory controller presents it host-friendly
  (6: FACIL "under an oracle assumption");
- **S-DDB**: the PIM-aware copy and two cacheable buffers (4.1: "twice the weight size of
  the feed forward layer");
- **S-OWR**: the PIM-aware copy and one cacheable buffer (4.3: "H x 4H, corresponding to the
  FF layer weight size").

The PIM-aware copy pads each matrix on its own (``docs/sherpa.md``). With ``--sl 64,128,192``
the command also times the strategies (:mod:`sim.sherpa_timing`): TTFT and prefill tokens/s
per input length (Fig. 10), the SMC latencies, decode time per token on LPDDR5X-PIM, the
end-to-end time and speedup over a host-only LPDDR5X system for every input x output length
(Fig. 12), C-GEMM vs NC-GEMM (Fig. 13), and optionally plots: TTFT vs SL and the S-DDB
timeline of one decoder layer (Fig. 11).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pimphony.compiler.llm import ModelSpec, load_model, weight_matrices
from pimphony.models.backends import load_backend
from pimphony.models.fileio import pyplot, write_figure
from pimphony.models.layout import MemoryLayout, load_layout, pim_aware_shape
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.cli import choice_names
from pimphony.sim.provenance import provenance
from pimphony.sim.report import parse_list, user_plot
from pimphony.sim.sherpa_energy import (
    energy_rows,
    format_energy,
    plot_sensitivity,
    sensitivity,
    sherpa_params,
)
from pimphony.sim.sherpa_timing import (
    ATTENTION,
    Prefill,
    SherpaError,
    available_hosts,
    check_agreement,
    decode_seconds,
    end_to_end,
    gemm_device,
    load_sherpa_host,
    prefill,
    smc_seconds,
    table2,
)

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_LAYOUT",
    "PAPER",
    "STRATEGIES",
    "Strategy",
    "StrategySpec",
    "add_arguments",
    "capacity",
    "check_fits",
    "format_capacity",
    "format_timing",
    "plot_timeline",
    "plot_ttft",
    "run",
    "timing",
]

DEFAULT_LAYOUT = "lpddr5x-pim"
DEFAULT_HOST = "galaxy-s24plus"


class Strategy(StrEnum):
    """PIM-SHERPA's four ways to hold the weights (6)."""

    WD = "wd"
    FACIL = "facil"
    DDB = "ddb"
    OWR = "owr"


@dataclass(frozen=True)
class StrategySpec:
    """What a strategy keeps in DRAM besides the PIM-aware copy every strategy has."""

    label: str
    host_friendly_copy: bool
    buffers: int
    holds_qkvo: bool  # buffer 0 holds the layer's Q, K, V and O at once (DDB's preload)
    prefill: Prefill  # how prefill gets host-friendly cacheable weights (sim.sherpa_timing)


STRATEGIES: dict[Strategy, StrategySpec] = {
    Strategy.WD: StrategySpec("WD", True, 0, False, Prefill.DIRECT),
    Strategy.FACIL: StrategySpec("FACIL-O", False, 0, False, Prefill.DIRECT),
    Strategy.DDB: StrategySpec("S-DDB", False, 2, True, Prefill.DOUBLE_BUFFER),
    Strategy.OWR: StrategySpec("S-OWR", False, 1, False, Prefill.ONLINE),
}

#: The paper's numbers the report prints beside ours (seed 004, section 6): SMC latencies of
#: the whole model (S-DDB with 2 threads, S-OWR with 4), S-OWR's 16.7 TPS at SL 192 on 3B,
#: NC-GEMM's TTFT on 3B (Fig. 13).
PAPER: dict[str, dict[str, Any]] = {
    "llama-3.2-1b": {"smc_ddb_s": 0.89, "smc_owr_s": 0.6},
    "llama-3.2-3b": {"smc_ddb_s": 2.54, "smc_owr_s": 1.4, "owr_tps_192": 16.7,
                     "nc_gemm_s": {64: 148.0, 128: 332.0, 192: 458.0}},
}  # fmt: skip


def _buffer_bytes(spec: ModelSpec, holds_qkvo: bool) -> int:
    """One cacheable buffer: the largest weight matrix of a layer (the FF matrix for Llama
    3.2), and for DDB at least Q + K + V + O, which buffer 0 holds together (4.1, Fig. 5)."""
    mats = weight_matrices(spec)
    size = max(o * i for o, i in mats.values())
    if holds_qkvo:
        size = max(size, sum(o * i for k, (o, i) in mats.items() if k in ("q", "k", "v", "o")))
    return size * spec.element_bytes


def _check_element_size(spec: ModelSpec, layout: MemoryLayout) -> None:
    """Refuse a model whose weights are not the layout's element size."""
    if spec.element_bytes != layout.element_bytes:
        raise SherpaError(
            f"model {spec.name!r} has {spec.element_bytes}-byte weights; layout "
            f"{layout.name!r} holds {layout.element_bytes}-byte elements"
        )


def capacity(spec: ModelSpec, layout: MemoryLayout) -> dict[str, Any]:
    """DRAM bytes per strategy: host-friendly and PIM-aware weights, padding, buffers, and
    the saving against WD."""
    _check_element_size(spec, layout)
    eb = spec.element_bytes
    mats = {f"layer.{k}": v for k, v in weight_matrices(spec).items()}
    per_layer = {k: pim_aware_shape(layout, *v) for k, v in mats.items()}
    lm_head = pim_aware_shape(layout, spec.vocab_size, spec.hidden) if spec.vocab_size else None
    host = spec.resident_weight_bytes
    pim = spec.layers * sum(s.bytes for s in per_layer.values())
    padding = spec.layers * sum(s.padding_bytes for s in per_layer.values())
    if lm_head is not None:
        pim += lm_head.bytes
        padding += lm_head.padding_bytes
    # An untied embedding table is a lookup, not a GEMV: one host-friendly copy in every
    # strategy (WD's host-friendly copy already counts it).
    embedding = 0 if spec.tied_embeddings else spec.vocab_size * spec.hidden * eb
    rows = {}
    for strategy, s in STRATEGIES.items():
        buffers = s.buffers * _buffer_bytes(spec, s.holds_qkvo)
        total = pim + buffers + (host if s.host_friendly_copy else embedding)
        rows[strategy.value] = {
            "label": s.label,
            "host_friendly_bytes": host if s.host_friendly_copy else embedding,
            "pim_aware_bytes": pim,
            "buffer_bytes": buffers,
            "total_bytes": total,
        }
    wd = rows[Strategy.WD.value]["total_bytes"]
    for r in rows.values():
        r["saving_vs_wd"] = 1 - r["total_bytes"] / wd
    return {
        "model": spec.name,
        "layout": layout.name,
        "host_friendly_bytes": host,
        "pim_aware_bytes": pim,
        "padding_bytes": padding,
        "padding_by_matrix": {
            **{k: spec.layers * s.padding_bytes for k, s in per_layer.items()},
            **({"lm_head": lm_head.padding_bytes} if lm_head is not None else {}),
        },
        "strategies": rows,
    }


def format_capacity(result: dict[str, Any]) -> str:
    """A text table of :func:`capacity`."""
    gb = 1e9
    lines = [
        f"{result['model']} on {result['layout']}: host-friendly weights "
        f"{result['host_friendly_bytes'] / gb:.3f} GB, PIM-aware "
        f"{result['pim_aware_bytes'] / gb:.3f} GB (padding {result['padding_bytes'] / 1e6:.1f} MB)",
        f"{'strategy':<9} {'host-friendly GB':>16} {'PIM-aware GB':>13} {'buffers MB':>11} "
        f"{'total GB':>9} {'saving vs WD':>13}"
        + (f" {'fits ' + format(result['device_bytes'] / gb, '.2f') + ' GB':>13}"
           if "device_bytes" in result else ""),
    ]  # fmt: skip
    for r in result["strategies"].values():
        lines.append(
            f"{r['label']:<9} {r['host_friendly_bytes'] / gb:>16.3f} "
            f"{r['pim_aware_bytes'] / gb:>13.3f} {r['buffer_bytes'] / 1e6:>11.1f} "
            f"{r['total_bytes'] / gb:>9.3f} {100 * r['saving_vs_wd']:>12.1f}%"
            + (f" {'yes' if r['fits'] else 'NO':>13}" if "fits" in r else "")
        )
    return "\n".join(lines)


def check_fits(result: dict[str, Any], device_bytes: int, strategies: list[str]) -> None:
    """Mark every strategy of :func:`capacity`'s ``result`` with whether it fits
    ``device_bytes``; refuse (``SherpaError``, with the sizes) the first of ``strategies`` that
    does not."""
    result["device_bytes"] = device_bytes
    for r in result["strategies"].values():
        r["fits"] = r["total_bytes"] <= device_bytes
    for key in strategies:
        r = result["strategies"][key]
        if not r["fits"]:
            gb = 1e9
            raise SherpaError(
                f"{r['label']} does not fit: {result['model']} needs {r['total_bytes'] / gb:.3f}"
                f" GB (host-friendly {r['host_friendly_bytes'] / gb:.3f} + PIM-aware "
                f"{r['pim_aware_bytes'] / gb:.3f} + buffers {r['buffer_bytes'] / gb:.3f}); the "
                f"device memory is {device_bytes / gb:.3f} GB (--device-memory)"
            )


def _e2e(ttft: float, spec: ModelSpec, host_dev, backend, sl: int, out: int) -> float:
    steps = [decode_seconds(spec, host_dev, sl + t, backend)["total_s"] for t in range(1, out)]
    return end_to_end(ttft, steps)


def timing(
    spec: ModelSpec,
    host_name: str,
    sls: list[int],
    outs: list[int],
    strategies: list[Strategy] | None = None,
) -> dict[str, Any]:
    """TTFT, tokens/s, SMC latency, decode per token, end-to-end time and speedup over the
    host-only system, per strategy and input length ``sls`` (output lengths ``outs``)."""
    for flag, values in (("--sl", sls), ("--out-len", outs)):
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SherpaError(f"{flag} {v!r}: every length must be a positive integer")
    longest = max(sls) + max(outs)
    if longest > spec.context_window:
        raise SherpaError(
            f"--sl {max(sls)} + --out-len {max(outs)} = {longest} tokens: beyond "
            f"{spec.name}'s context window; allowed up to {spec.context_window} tokens in all"
        )
    host = load_sherpa_host(host_name)
    backend, layout = load_backend(host.backend), load_layout(host.layout)
    check_agreement(backend, layout)
    _check_element_size(spec, layout)
    host_dev = load_xpu(host.host_xpu)
    chosen = strategies or list(Strategy)
    peak = host_dev.memory.bandwidth_gbps
    weight_bytes = spec.layers * sum(o * i for o, i in weight_matrices(spec).values())
    weight_bytes *= spec.element_bytes
    gemm_cores = sum(c.gemm for c in host.cores)
    gemm_threads = host.gemm_thread_finish()
    paper = PAPER.get(spec.name, {})
    smc = {
        "weight_bytes": weight_bytes,
        "ddb_threads": host.ddb_threads,
        "ddb_s": smc_seconds(host, peak, weight_bytes, host.ddb_threads),
        "owr_threads": host.owr_threads,
        "owr_s": smc_seconds(host, peak, weight_bytes, host.owr_threads),
        "paper_ddb_s": paper.get("smc_ddb_s"),
        "paper_owr_s": paper.get("smc_owr_s"),
    }
    rows = []
    for sl in sls:
        row: dict[str, Any] = {"sl": sl, "strategies": {}}
        for st in chosen:
            r = prefill(STRATEGIES[st].prefill, spec, host, sl, backend)
            steps = r.pop("steps", None)
            row["strategies"][st.value] = {"label": STRATEGIES[st].label, **r}
            if steps is not None:
                row["ddb_layer"] = [
                    {"step": x.name, "compute_s": x.compute_s, "copy_s": x.copy_s,
                     "copies": x.copies, "critical": x.critical}
                    for x in steps
                ]  # fmt: skip
        base = prefill(Prefill.DIRECT, spec, host, sl, None)
        row["host_only"] = base
        nc = sl * weight_bytes / (host.copy_fraction(gemm_cores) * peak * 1e9)
        row["fig13"] = {
            "c_gemm_s": base["ttft_s"],
            "nc_gemm_s": nc + base["attention_s"] + base["lm_head_s"],
            "paper_nc_gemm_s": paper.get("nc_gemm_s", {}).get(sl),
        }
        fpb = host_dev.peak_flops(host_dev.compute.precision) / host_dev.bandwidth
        row["table2"] = {"flop_per_byte": fpb, **table2(sl, fpb)}
        facil = prefill(Prefill.DIRECT, spec, host, sl, backend)["ttft_s"]
        for key, way in (("owr_vs_facil", Prefill.ONLINE), ("ddb_vs_facil", Prefill.DOUBLE_BUFFER)):
            row["table2"][key] = prefill(way, spec, host, sl, backend)["ttft_s"] / facil
        row["decode"] = {
            "pim": decode_seconds(spec, host_dev, sl, backend),
            "host": decode_seconds(spec, host_dev, sl, None),
        }
        rows.append(row)
    e2e = []
    for row in rows:
        sl = row["sl"]
        for out in outs:
            base = _e2e(row["host_only"]["ttft_s"], spec, host_dev, None, sl, out)
            cell: dict[str, Any] = {"sl": sl, "out": out, "host_only_s": base}
            for key, r in row["strategies"].items():
                t = _e2e(r["ttft_s"], spec, host_dev, backend, sl, out)
                cell[key] = {"seconds": t, "speedup": base / t}
            e2e.append(cell)
    dev = gemm_device(host)
    return {
        "model": spec.name,
        "host": host.name,
        "backend": backend.name,
        "gemm_cores": gemm_cores,
        "gemm_threads": gemm_threads,
        "gemm_peak_gflops": dev.peak_flops(dev.compute.precision) / 1e9,
        "smc": smc,
        "rows": rows,
        "end_to_end": e2e,
        "paper": paper,
    }


def format_timing(t: dict[str, Any]) -> str:
    """Text tables of :func:`timing`."""
    smc = t["smc"]

    def vs(ours: float, theirs: float | None) -> str:
        return f"{ours:.3f} s" + (f" (paper {theirs:g} s)" if theirs else "")

    lines = [
        "",
        f"Timing on {t['backend']} with host {t['host']} ({t['gemm_cores']} GEMM cores, "
        f"{t['gemm_peak_gflops']:.0f} GFLOPS peak):",
        f"SMC of all layers' weights ({smc['weight_bytes'] / 1e9:.2f} GB): "
        f"{smc['ddb_threads']} threads {vs(smc['ddb_s'], smc['paper_ddb_s'])}, "
        f"{smc['owr_threads']} threads {vs(smc['owr_s'], smc['paper_owr_s'])}",
    ]
    keys = list(t["rows"][0]["strategies"])
    labels = [t["rows"][0]["strategies"][k]["label"] for k in keys]
    lines.append("TTFT s (prefill tokens/s):")
    lines.append(f"{'SL':>5} " + " ".join(f"{x:>16}" for x in [*labels, "host-only"]))
    for row in t["rows"]:
        cells = [row["strategies"][k] for k in keys] + [row["host_only"]]
        lines.append(
            f"{row['sl']:>5} "
            + " ".join(f"{c['ttft_s']:>8.3f} ({c['tokens_per_s']:>5.1f})" for c in cells)
        )
    lines.append("decode ms per token at context SL (PIM GEMVs + LM head + host attention):")
    for row in t["rows"]:
        p, h = row["decode"]["pim"], row["decode"]["host"]
        lines.append(
            f"{row['sl']:>5}  PIM {1e3 * p['total_s']:.2f} ms (GEMV {1e3 * p['gemv_s']:.2f}, "
            f"LM head {1e3 * p['lm_head_s']:.2f}, attention {1e3 * p['attention_s']:.3f}); "
            f"host-only {1e3 * h['total_s']:.2f} ms ({h['total_s'] / p['total_s']:.2f}x)"
        )
    lines.append("end-to-end s (speedup over host-only):")
    lines.append(f"{'in':>5} {'out':>5} {'host-only':>10} " + " ".join(f"{x:>17}" for x in labels))
    for c in t["end_to_end"]:
        lines.append(
            f"{c['sl']:>5} {c['out']:>5} {c['host_only_s']:>10.2f} "
            + " ".join(f"{c[k]['seconds']:>9.2f} ({c[k]['speedup']:>4.2f}x)" for k in keys)
        )
    fpb = t["rows"][0]["table2"]["flop_per_byte"]
    lines.append(
        f"Table 2 (analytic, FLOP/B {fpb:.2f}) beside the model: TTFT relative to GEMM alone"
    )
    lines.append(f"{'SL':>5} {'SUM':>7} {'S-OWR':>7} {'MAX':>7} {'S-DDB':>7}")
    for row in t["rows"]:
        x = row["table2"]
        lines.append(
            f"{row['sl']:>5} {x['sum_vs_gemm']:>7.0%} {x['owr_vs_facil']:>7.0%} "
            f"{x['max_vs_gemm']:>7.0%} {x['ddb_vs_facil']:>7.0%}"
        )
    lines.append("Fig. 13, one weight copy: C-GEMM vs NC-GEMM TTFT")
    for row in t["rows"]:
        f = row["fig13"]
        p = f" (paper {f['paper_nc_gemm_s']:g} s)" if f["paper_nc_gemm_s"] else ""
        lines.append(
            f"{row['sl']:>5}  C-GEMM {f['c_gemm_s']:.2f} s, NC-GEMM {f['nc_gemm_s']:.2f} s{p}"
        )
    if any("ddb_layer" in r for r in t["rows"]):
        lines.append("S-DDB, one decoder layer (ms): step  compute  copy  [copies]  critical")
        for row in t["rows"]:
            if "ddb_layer" not in row:
                continue
            lines.append(f"  SL {row['sl']}:")
            for x in row["ddb_layer"]:
                lines.append(
                    f"    {x['step']:<9} {1e3 * x['compute_s']:>8.2f} {1e3 * x['copy_s']:>8.2f}"
                    f"  [{x['copies']}]  {x['critical']}"
                )
    return "\n".join(lines)


def plot_ttft(t: dict[str, Any], path: Path) -> Path:
    """TTFT vs input length per strategy and the host-only system (Fig. 10 shape)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    sls = [r["sl"] for r in t["rows"]]
    for key in t["rows"][0]["strategies"]:
        label = t["rows"][0]["strategies"][key]["label"]
        ax.plot(sls, [r["strategies"][key]["ttft_s"] for r in t["rows"]], "o-", label=label)
    ax.plot(sls, [r["host_only"]["ttft_s"] for r in t["rows"]], "k:", label="host-only")
    ax.set_xlabel("input sequence length (tokens)")
    ax.set_ylabel("TTFT (s)")
    ax.set_title(f"PIM-SHERPA TTFT, {t['model']} on {t['backend']} ({t['host']})")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return write_figure(fig, path)


def plot_timeline(t: dict[str, Any], path: Path) -> Path:
    """S-DDB's copy and GEMM threads over one decoder layer, one panel per input length
    (Fig. 11 shape); the critical bar of each step (the slowest thread) is dark."""
    rows = [r for r in t["rows"] if "ddb_layer" in r]
    if not rows:
        raise SherpaError("--timeline needs the S-DDB strategy (--strategy ddb)")
    plt = pyplot()
    fig, axes = plt.subplots(len(rows), 1, figsize=(9, 1.8 + 2.2 * len(rows)), squeeze=False)
    colours = {"copy": ("#9ecae1", "#08519c"), "compute": ("#bcbddc", "#54278f")}
    # One bar row per thread: the copy threads share each copy equally; each GEMM thread
    # takes an equal part of each GEMM and finishes at its core's speed.
    threads = [("copy", f"copy T{k}", 1.0) for k in range(t["smc"]["ddb_threads"])]
    threads += [("compute", f"GEMM on {name}", f) for name, f in t["gemm_threads"].items()]
    for ax, row in zip(axes[:, 0], rows, strict=True):
        start = 0.0
        for x in row["ddb_layer"]:
            for y, (who, _, frac) in enumerate(threads):
                dur = 1e3 * x[f"{who}_s"] * frac
                colour = colours[who][x["critical"] == who and frac == 1.0]
                ax.barh(y, dur, left=start, color=colour, edgecolor="white")
            if x["step"] != ATTENTION:  # too short to label
                ax.text(start, len(threads) - 0.4, x["step"].upper(), fontsize=7)
            start += 1e3 * max(x["compute_s"], x["copy_s"])
        ax.set_yticks(range(len(threads)), [label for _, label, _ in threads], fontsize=7)
        ax.set_ylim(-0.6, len(threads) + 0.2)
        ax.set_title(f"SL {row['sl']}", fontsize=9)
        ax.set_xlabel("time in the layer (ms)")
    handles = [
        plt.Rectangle((0, 0), 1, 1, color=colours["copy"][1]),
        plt.Rectangle((0, 0), 1, 1, color=colours["compute"][1]),
        plt.Rectangle((0, 0), 1, 1, color=colours["copy"][0]),
    ]
    axes[0, 0].legend(handles, ["copy (critical)", "compute (critical)", "not critical"],
                      fontsize=7, loc="lower right")  # fmt: skip
    fig.suptitle(f"S-DDB timeline of one decoder layer, {t['model']} ({t['host']})")
    fig.tight_layout()
    return write_figure(fig, path)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``sherpa`` subcommand's options."""
    p.add_argument("--model", default="llama-3.2-1b", help="model preset (default llama-3.2-1b)")
    p.add_argument(
        "--layout", default=DEFAULT_LAYOUT, help=f"layout preset (default {DEFAULT_LAYOUT})"
    )
    p.add_argument(
        "--strategy",
        choices=choice_names(Strategy),
        action="append",
        help="report only these strategies (repeatable; default all)",
    )
    p.add_argument(
        "--sl", default=None, help="input lengths to time, comma-separated (e.g. 64,128,192)"
    )
    p.add_argument(
        "--out-len", default=None, help="output lengths for end-to-end time (default: --sl's)"
    )
    p.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"host preset ({', '.join(available_hosts())}) or a .toml path",
    )
    p.add_argument("--plot", type=Path, default=None, help="write TTFT vs SL here (with --sl)")
    p.add_argument(
        "--timeline", type=Path, default=None, help="write the S-DDB layer timeline here"
    )
    p.add_argument(
        "--device-memory",
        type=float,
        default=None,
        help="DRAM the weights and buffers may use, GB (default: the host preset's memory, "
        "12 GiB on the S24+); strategies that need more are refused for --sl",
    )
    p.add_argument(
        "--energy",
        nargs="?",
        const="",
        default=None,
        help="with --sl: prefill and decode energy, optionally the energy preset (default: the "
        "one named like the back end, lpddr5x-pim; docs/energy.md)",
    )
    p.add_argument(
        "--energy-plot",
        type=Path,
        default=None,
        help="with --sl: write decode energy per token vs the preset's choices, scaled (PNG)",
    )
    p.add_argument("--force", action="store_true", help="replace existing plot files")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony sherpa``."""
    spec, layout = load_model(args.model), load_layout(args.layout)
    result = capacity(spec, layout)
    if args.strategy:
        keep = set(args.strategy)
        result["strategies"] = {k: v for k, v in result["strategies"].items() if k in keep}
    if args.device_memory is not None and not args.device_memory > 0:
        raise SherpaError(f"--device-memory {args.device_memory}: must be a positive number of GB")
    if args.device_memory is not None:
        device_bytes = int(args.device_memory * 1e9)
    else:
        mem = load_xpu(load_sherpa_host(args.host).host_xpu).memory
        device_bytes = int(mem.capacity_gib * 2**30)
    check_fits(
        result, device_bytes,
        list(result["strategies"]) if args.sl is not None else [],
    )  # fmt: skip
    wants_energy = args.energy is not None or args.energy_plot is not None
    if args.sl is None and (args.out_len is not None or args.plot or args.timeline or wants_energy):
        raise SherpaError(
            "--out-len, --plot, --timeline, --energy and --energy-plot need --sl (the input "
            "lengths)"
        )
    plots = {}
    if args.plot is not None:
        plots["plot"] = user_plot(args.plot, args.plot, args.force)
    if args.timeline is not None:
        plots["timeline"] = user_plot(args.timeline, args.timeline, args.force)
    if args.energy_plot is not None:
        plots["energy_plot"] = user_plot(args.energy_plot, args.energy_plot, args.force)
    timed = None
    if args.sl is not None:
        sls = parse_list("--sl", args.sl, int, SherpaError)
        outs = (
            parse_list("--out-len", args.out_len, int, SherpaError)
            if args.out_len is not None
            else sls
        )
        chosen = [Strategy(s) for s in dict.fromkeys(args.strategy or [])] or None
        timed = timing(spec, args.host, sls, outs, chosen)
        if "plot" in plots:
            plots["plot"] = plot_ttft(timed, plots["plot"])
        if "timeline" in plots:
            plots["timeline"] = plot_timeline(timed, plots["timeline"])
        if wants_energy:  # docs/energy.md (sim/sherpa_energy.py)
            params = sherpa_params(load_backend(timed["backend"]), args.energy or None)
            ways = {k: STRATEGIES[Strategy(k)].prefill for k in timed["rows"][0]["strategies"]}
            timed["energy"] = energy_rows(spec, args.host, timed, params, ways)
        if "energy_plot" in plots:
            s = sensitivity(spec, args.host, sls[0], params)
            timed["energy"]["sensitivity"] = s
            title = f"PIM-SHERPA decode energy vs the {params.name} choices, {spec.name}"
            plots["energy_plot"] = plot_sensitivity(s, title, plots["energy_plot"])
    if args.json:
        extra: dict[str, Any] = {"model": asdict(spec), "layout": asdict(layout)}
        if timed is not None:
            host = load_sherpa_host(args.host)
            extra["host"] = asdict(host)
            extra["backend"] = asdict(load_backend(host.backend))
        out = {**result, "provenance": provenance(args, **extra)}
        if timed is not None:
            out["timing"] = timed
        out.update({k: str(v) for k, v in plots.items()})
        print(json.dumps(out, indent=2))
    else:
        print(format_capacity(result))
        if timed is not None:
            print(format_timing(timed))
            if "energy" in timed:
                labels = {k: v["label"] for k, v in timed["rows"][0]["strategies"].items()}
                print(format_energy(timed["energy"], labels))
        for k, v in plots.items():
            print(f"{k}: {v}")
    return 0
