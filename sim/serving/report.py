"""Metrics of a serving run: latency percentiles, batch and memory over time; its plots."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from pimphony.models.fileio import pyplot, write_figure
from pimphony.sim.serving.engine import ServeResult, percentiles

__all__ = ["SERIES_BINS", "format_summary", "metrics", "plot_result"]

#: Bins of the report's time series (equal widths over the run).
SERIES_BINS = 200


def _latencies(res: ServeResult) -> dict[str, list[float]]:
    arrival = np.array([r.arrival_s for r in res.requests])
    out = np.array([r.output_tokens for r in res.requests])
    first, done = np.array(res.first_token_s), np.array(res.finished_s)
    tpot = np.where(out > 1, (done - first) / np.maximum(out - 1, 1), math.nan)
    return {
        "ttft": list(first - arrival),
        "tpot": list(tpot),
        "e2e": list(done - arrival),
        "queueing": list(np.array(res.admitted_s) - arrival),
    }


def metrics(res: ServeResult, bins: int = SERIES_BINS) -> dict[str, Any]:
    """The report's ``summary``, ``latency_s`` and ``time_series`` blocks.

    Batch averages are over decode steps (``mean_batch``: each step counts once, LoL-PIM's
    "average batch size"; ``time_weighted_batch``: weighted by step duration;
    ``saturated_mean_batch``: over the steps taken while requests were waiting, i.e. what
    memory admits rather than what the queue offers). Time series
    average the batch and memory of the decode steps
    ending in a bin; ``tokens_per_s`` spreads each event's output tokens evenly over its
    duration.
    """
    ev = res.events
    decode = [e for e in ev if e[0] == "decode"]
    end = max((e[1] + e[2] for e in ev), default=0.0)
    tokens = sum(r.output_tokens for r in res.requests)
    batch = np.array([e[4] for e in decode], dtype=float)
    dts = np.array([e[2] for e in decode], dtype=float)
    queued = np.array([e[8] for e in decode], dtype=int)
    cap = res.capacity_bytes
    used = np.array([e[6] for e in decode], dtype=float) / cap if cap else np.zeros(len(decode))
    held = np.array([e[7] for e in decode], dtype=float) / cap if cap else np.zeros(len(decode))
    summary = {
        "requests": len(res.requests),
        "output_tokens": tokens,
        "duration_s": end,
        "throughput_tokens_per_s": tokens / end if end else None,
        "requests_per_s": len(res.requests) / end if end else None,
        "decode_steps": len(decode),
        "prefills": len(ev) - len(decode),
        "prefill_seconds": float(sum(e[2] for e in ev if e[0] == "prefill")),
        "decode_seconds": float(dts.sum()),
        "mean_batch": float(batch.mean()) if batch.size else 0.0,
        "time_weighted_batch": float((batch * dts).sum() / dts.sum()) if dts.sum() else 0.0,
        "saturated_mean_batch": float(batch[queued > 0].mean()) if (queued > 0).any() else None,
        "max_batch": int(batch.max()) if batch.size else 0,
        "preemptions": int(sum(res.preemptions)),
        "kv_capacity_bytes": cap,
        "mean_kv_used_utilization": float(used.mean()) if used.size else 0.0,
        "mean_kv_reserved_utilization": float(held.mean()) if held.size else 0.0,
    }
    latency = {k: percentiles(v) for k, v in _latencies(res).items()}
    width = end / bins if end else 1.0
    edges = np.arange(bins) * width
    tok = np.zeros(bins)
    for e in ev:  # an event's tokens spread evenly over its duration
        start, dt, out = e[1], e[2], e[5]
        if not out:
            continue
        if dt <= 0:
            tok[min(int(start / width), bins - 1)] += out
            continue
        b0, b1 = int(start / width), min(int((start + dt) / width), bins - 1)
        for b in range(b0, b1 + 1):
            lo, hi = max(start, b * width), min(start + dt, (b + 1) * width)
            tok[b] += out * max(hi - lo, 0.0) / dt
        if b1 == bins - 1 and start + dt > bins * width:  # float edge of the last bin
            tok[b1] += out * (start + dt - bins * width) / dt
    idx = np.minimum(((np.array([e[1] + e[2] for e in decode]) / width).astype(int)), bins - 1)

    def mean_in_bins(x: np.ndarray) -> list[float | None]:
        out: list[float | None] = []
        for b in range(bins):
            sel = x[idx == b] if x.size else x
            out.append(float(sel.mean()) if sel.size else None)
        return out

    series = {
        "bin_s": width,
        "t_s": [float(t) for t in edges],
        "tokens_per_s": [float(t / width) for t in tok],
        "batch": mean_in_bins(batch),
        "kv_used_utilization": mean_in_bins(used),
        "kv_reserved_utilization": mean_in_bins(held),
    }
    return {"summary": summary, "latency_s": latency, "time_series": series}


def format_summary(report: dict[str, Any]) -> str:
    """A few lines for the terminal."""
    s, lat = report["summary"], report["latency_s"]

    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x * 1e3:,.1f} ms"

    lines = [
        f"{report['system']} {report['model']}: {s['requests']} requests, "
        f"{s['output_tokens']:,} output tokens in {s['duration_s']:.3f} s simulated "
        f"({s['throughput_tokens_per_s'] or 0:,.1f} tokens/s)",
        f"  batch: mean {s['mean_batch']:.2f} (time-weighted {s['time_weighted_batch']:.2f}), "
        f"max {s['max_batch']}; preemptions {s['preemptions']}; mean KV memory used "
        f"{100 * s['mean_kv_used_utilization']:.1f}%, held "
        f"{100 * s['mean_kv_reserved_utilization']:.1f}%",
    ]
    for k in ("ttft", "tpot", "e2e", "queueing"):
        p = lat[k]
        lines.append(
            f"  {k:>8}: mean {ms(p['mean'])}, P50 {ms(p['p50'])}, P90 {ms(p['p90'])}, "
            f"P99 {ms(p['p99'])}"
        )
    sim = report["simulation"]
    lines.append(
        f"  simulated {s['decode_steps']:,} decode steps ({sim['distinct_steps']:,} distinct) "
        f"in {sim['wall_seconds']:.2f} s wall time"
    )
    return "\n".join(lines)


def plot_result(res: ServeResult, report: dict[str, Any], path: Path) -> Path:
    """Throughput, batch and KV memory over time, and the latency CDFs, in one figure."""
    plt = pyplot()
    ts = report["time_series"]
    t = np.array(ts["t_s"]) + ts["bin_s"] / 2
    fig, ax = plt.subplots(2, 2, figsize=(11, 7.5))
    title = (
        f"pimphony serve: {report['model']} on {report['system']} ({report['memory']} memory), "
        f"{report['summary']['requests']} requests"
    )
    fig.suptitle(title)
    ax[0, 0].plot(t, ts["tokens_per_s"], color="#023047", label="output tokens/s")
    ax[0, 0].set(title="Throughput over time", xlabel="time (s)", ylabel="tokens/s")
    decode = [e for e in res.events if e[0] == "decode"]
    t_end = np.array([e[1] + e[2] for e in decode])
    cap = res.capacity_bytes or 1
    ax[0, 1].step(t_end, [e[4] for e in decode], where="pre", color="#219ebc", label="per step")
    ax[0, 1].set(title="Running batch over time", xlabel="time (s)", ylabel="requests")
    for col, label, colour in (
        (6, "KV tokens (used)", "#2a9d8f"),
        (7, "held (chunks/slots/blocks)", "#e76f51"),
    ):
        y = [100 * e[col] / cap for e in decode]
        ax[1, 0].step(t_end, y, where="pre", color=colour, label=label)
    ax[1, 0].set(title="KV memory over time", xlabel="time (s)", ylabel="share of KV capacity (%)")
    lat = {
        "TTFT": np.array(res.first_token_s) - [r.arrival_s for r in res.requests],
        "E2E latency": np.array(res.finished_s) - [r.arrival_s for r in res.requests],
    }
    for (label, v), colour in zip(lat.items(), ("#9d4edd", "#264653"), strict=True):
        v = np.sort(v[~np.isnan(v)])
        ax[1, 1].step(v, np.arange(1, v.size + 1) / v.size, where="post", label=label, c=colour)
    ax[1, 1].set(title="Latency CDF", xlabel="latency (s)", ylabel="fraction of requests")
    for a in ax.flat:
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    return write_figure(fig, path)
