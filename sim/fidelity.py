"""``pimphony fidelity``: the papers' quantitative claims beside pimphony's numbers.

Each :class:`Claim` names the paper, the figure or section, the claim with the paper's
number, the paper's workload, the ``pimphony`` command that measures it here, and a function
that runs the measurement and returns our number, a verdict and, for every difference, the
mechanism behind it. ``pimphony fidelity`` prints the table (Markdown) or writes
``docs/fidelity.md``; ``tests/test_fidelity.py`` re-runs every claim and fails when a verdict
changes, so a change that breaks a reproduced trend fails CI.

Verdicts, decided by code with the tolerance stated in each row:

- ``reproduced``: the number is within the stated tolerance of the paper's;
- ``close``: the direction holds and every compared number (a :class:`Gap`) is within
  1.5x of the paper's, or within 10 points for a percentage;
- ``direction only``: the direction holds, a compared number is further off (the row
  states the worst one), or the paper gives no number to size it by;
- ``differs``: the direction does not hold; the mechanism column says why;
- ``derived``: the value was derived from the paper's number (a consistency check only);
- ``not reproducible``: the claim rests on a vendor tool or silicon.

A speed-up or ratio (:attr:`Unit.TIMES`) is sized by its gain over 1: 1.087x against
1.4x is a 8.7% gain against 40%, 4.6x off, although 1.087 is within 1.3x of 1.4.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import itertools
import json
import math
import os
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pimphony.compiler.kernels import compile_kernel, compile_qk
from pimphony.compiler.llm import load_model
from pimphony.compiler.plan import ScoreOverflow, partition_attention
from pimphony.models.channel import run_channel
from pimphony.models.config import load_preset
from pimphony.models.dbo import OffloadReading
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import write_atomic
from pimphony.models.memory import MemoryPolicy
from pimphony.models.xpu_config import KERNEL_COSTS_ENV, kernel_costs_enabled
from pimphony.sim.fidelity_figures import FIGURE_DIR, figure_path, write_figures
from pimphony.sim.provenance import tool_record
from pimphony.sim.report import user_output

__all__ = [
    "CLAIMS",
    "FIDELITY_DOC",
    "FidelityError",
    "Claim",
    "Gap",
    "Measured",
    "Unit",
    "Verdict",
    "add_arguments",
    "claim_json",
    "format_fidelity",
    "measure_all",
    "measure_claim",
    "measured_from_json",
    "ours_text",
    "roofline_xpus",
    "run",
    "select_claims",
    "sized_verdict",
    "tally",
    "verdict_text",
]

FIDELITY_DOC = Path("docs") / "fidelity.md"
PIMPHONY_PRESET = "pimphony-cent"  # PIMphony on CENT (docs/presets.md)
LOLPIM_PRESET = "lolpim-aimx"
LOLPIM_IO_PRESET = "lolpim-aimx-io"  # with the extra GB of I/O-aware buffering, (3)


class FidelityError(PimphonyError, ValueError):
    """An option of ``pimphony fidelity`` is out of range (the message names it)."""


class Verdict(StrEnum):
    """How our number compares with the paper's."""

    REPRODUCED = "reproduced"
    CLOSE = "close"
    DIRECTION_ONLY = "direction only"
    DIFFERS = "differs"
    DERIVED = "derived"
    NOT_REPRODUCIBLE = "not reproducible"


class Unit(StrEnum):
    """How a :class:`Gap` measures how far off our number is."""

    #: a speed-up or ratio: compared by the gain over 1 (``(ours - 1) / (paper - 1)``)
    TIMES = "times"
    #: a share in percent: close within 10 points too
    PERCENT = "percent"
    #: any other quantity (tokens/s, a threshold, a percent change): compared by ratio
    VALUE = "value"


#: A compared number is close within this factor of the paper's ...
CLOSE_FACTOR = 1.5
#: ... or, for a percentage, within this many points.
CLOSE_POINTS = 10.0


@dataclass(frozen=True)
class Gap:
    """One of our numbers beside the paper's, to size a verdict by."""

    label: str
    ours: float
    paper: float
    unit: Unit = Unit.TIMES

    @property
    def factor(self) -> float:
        """How many times off, at least 1 (inf when the two lie on opposite sides)."""
        shift = 1.0 if self.unit == Unit.TIMES else 0.0
        a, b = self.ours - shift, self.paper - shift
        if a == b:
            return 1.0
        if a * b <= 0:
            return math.inf
        return max(a / b, b / a)

    @property
    def close(self) -> bool:
        """Within :data:`CLOSE_FACTOR`, or :data:`CLOSE_POINTS` for a percentage."""
        if self.unit == Unit.PERCENT and abs(self.ours - self.paper) <= CLOSE_POINTS:
            return True
        return self.factor <= CLOSE_FACTOR

    def text(self) -> str:
        """``label ours vs paper (N.NNx off)``, in the gap's unit."""
        fmt = {Unit.TIMES: "{:.2f}x", Unit.PERCENT: "{:.1f}%", Unit.VALUE: "{:,.4g}"}[self.unit]
        off = "opposite sides" if math.isinf(self.factor) else f"{self.factor:.2f}x off"
        label = f"{self.label} " if self.label else ""
        return f"{label}{fmt.format(self.ours)} vs {fmt.format(self.paper)} ({off})"


def _range_gap(label: str, ours: float, low: float, high: float) -> Gap:
    """``ours`` beside the nearer end of the paper's range ``low``-``high`` (itself, so 1.00x
    off, when inside it)."""
    return Gap(label, ours, min(max(ours, low), high))


@dataclass(frozen=True)
class Measured:
    """Our number (text), the verdict, the gaps that size it and, unless reproduced, the
    mechanism."""

    ours: str
    verdict: Verdict
    mechanism: str = ""
    values: dict[str, Any] | None = None
    gaps: tuple[Gap, ...] = ()
    #: a row that rests on an xPU's cost model: ``ours`` with every preset a pure roofline
    #: (``pimphony --no-kernel-costs``), so the per-kernel costs' share is on the row
    roofline: str = ""

    @property
    def worst(self) -> Gap | None:
        """The compared number furthest from the paper's (None without gaps)."""
        return max(self.gaps, key=lambda g: (not g.close, g.factor), default=None)


@dataclass(frozen=True)
class Claim:
    """One quantitative claim of a paper and how pimphony measures it."""

    key: str
    paper: str
    where: str
    claim: str
    workload: str
    command: str
    measure: Callable[[], Measured]
    #: minutes to measure (a figure run): ``tests/test_fidelity.py`` measures it in a test
    #: marked slow, out of ``make test``
    slow: bool = False
    #: the row compares with a GPU (or another xPU preset with per-kernel costs):
    #: :func:`measure_claim` measures it a second time on the roofline
    gpu: bool = False
    #: rows of one group share a figure run (a cached helper) and are measured in one task
    #: by ``pimphony fidelity --write`` (``sim.fidelity_sweep``); empty: a group of its own
    group: str = ""


def _per_cost_model(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``functools.cache`` of ``fn`` keyed also by whether xPU presets carry per-kernel costs
    (:func:`roofline_xpus` measures a row again without them)."""

    @functools.cache
    def keyed(kernel_costs: bool, *args: Any) -> Any:
        return fn(*args)

    @functools.wraps(fn)
    def cached(*args: Any) -> Any:
        return keyed(kernel_costs_enabled(), *args)

    return cached


def _within(ours: float, paper: float, rel: float) -> bool:
    return abs(ours - paper) <= rel * abs(paper)


def sized_verdict(reproduced: bool, holds: bool, gaps: tuple[Gap, ...]) -> Verdict:
    """REPRODUCED when the paper's number is met; else, when its direction holds, CLOSE if
    every gap is close and DIRECTION_ONLY if one is not (or there is none); else DIFFERS."""
    if reproduced:
        return Verdict.REPRODUCED
    if not holds:
        return Verdict.DIFFERS
    return Verdict.CLOSE if gaps and all(g.close for g in gaps) else Verdict.DIRECTION_ONLY


def _judged(
    ours: str,
    values: Any,
    reproduced: bool,
    holds: bool,
    mechanism: str,
    gaps: tuple[Gap, ...] = (),
) -> Measured:
    """The verdict rule (:func:`sized_verdict`); a difference carries its ``mechanism``."""
    verdict = sized_verdict(reproduced, holds, gaps)
    if verdict == Verdict.REPRODUCED:
        return Measured(ours, verdict, values=values, gaps=gaps)
    return Measured(ours, verdict, mechanism, values, gaps)


# ---- PIMphony (seed 000) --------------------------------------------------------------------


#: PIMphony Fig. 7's example as the compiler emits it: a GEMV of one output group over six
#: input tiles (W0..W5 in the figure), a GBuf of 4 entries (the smallest power of two that
#: holds the figure's GB 0/1/2) and the AiM pair of output registers.
_FIG7_EXAMPLE = {"d_out": 16, "d_in": 96, "gbuf_entries": 4, "obuf_entries": 2}


def _fig7() -> Measured:
    ex = _FIG7_EXAMPLE
    cfg = load_preset(PIMPHONY_PRESET).replace(
        **{"channel.gbuf_entries": ex["gbuf_entries"], "channel.obuf_entries": ex["obuf_entries"]}
    )
    cmds = compile_kernel(cfg, "gemv", d_out=ex["d_out"], d_in=ex["d_in"]).commands
    static, dcs = (run_channel(cmds, cfg, sched).cycles for sched in ("static", "dcs"))
    ours = f"{static} -> {dcs} cycles ({static / dcs:.2f}x; paper 34 -> 22, {34 / 22:.2f}x)"
    return _judged(
        ours,
        {"static": static, "dcs": dcs},
        False,
        dcs < static,
        "a diagram count: the example's command stack, GEMV size and latencies are not given, "
        "so only the direction is checked; ours includes the row activation the diagram "
        "leaves out",
        (Gap("static / DCS", static / dcs, 34 / 22),),
    )


def _fig8() -> Measured:
    cfg = load_preset(PIMPHONY_PRESET)
    utils = {
        d: run_channel(compile_qk(cfg, 4096, d).commands, cfg, "static").mac_utilization
        for d in (32, 64, 128, 256, 512)
    }
    at128 = 100 * utils[128]
    falls = all(utils[a] <= utils[b] for a, b in zip(list(utils), list(utils)[1:], strict=False))
    ours = f"{at128:.1f}% at d_h 128; " + ", ".join(
        f"{d}: {100 * u:.1f}%" for d, u in utils.items()
    )
    return _judged(
        ours,
        {"util_128": at128},
        abs(at128 - 14.7) <= 3 and falls,
        falls,
        "row switches (4 x ACT4 + tRCD per 64-MAC row) and WR_INP/RD_OUT latencies the static "
        "scheduler does not overlap; the paper gives neither its timing nor the other dimension",
        (Gap("at d_h 128", at128, 14.7, Unit.PERCENT),),
    )


def _fig18_ratios(obuf: int | None = None) -> dict[int, float]:
    """DCS over ping-pong on QK^T (T 4096, d_h 128) per GQA group that fits, on the
    PIMphony preset with ``obuf`` OBuf entries (default the preset's)."""
    from pimphony.sim.experiments.buffer_sweep import Convention, buffer_sweep

    entries = obuf or load_preset(PIMPHONY_PRESET).channel.obuf_entries
    rows = buffer_sweep([Convention(PIMPHONY_PRESET, PIMPHONY_PRESET)], obuf=[entries])
    return {r["gqa_group"]: r["ratio"] for r in rows if r["ratio"] is not None}


def _fig18_preset() -> Measured:
    ratios = _fig18_ratios()
    best = max(ratios.values())
    ours = "DCS/ping-pong " + ", ".join(f"G={g}: {r:.3f}x" for g, r in ratios.items())
    return _judged(
        ours,
        {"best": best},
        _within(best, 1.4, 0.15),
        best > 1.0,
        "at the preset's 64-entry OBuf ping-pong's 32-entry halves hide the MAC-result latency "
        "at every hand-off, so DCS has little left to overlap; the paper does not give its "
        "buffer size (see the next row and docs/presets.md)",
        (Gap("best", best, 1.4),),
    )


def _fig18_small() -> Measured:
    sweep = {o: _fig18_ratios(o) for o in (4, 8)}
    best = max(r for ratios in sweep.values() for r in ratios.values())
    ours = "; ".join(
        f"OBuf {o}: " + ", ".join(f"G={g} {r:.2f}x" for g, r in ratios.items())
        for o, ratios in sweep.items()
    )
    return _judged(
        ours,
        {"best": best},
        _within(best, 1.4, 0.15),
        True,
        "smaller than the paper's gain",
        (Gap("best", best, 1.4),),
    )


def _sv_reduction() -> Measured:
    from pimphony.sim.systems.setup import DecodeSetup
    from pimphony.sim.systems.step import run_decode

    spec, cfg = load_model("llm-7b"), load_preset(PIMPHONY_PRESET)
    share = {}
    for tp in (1, 8):  # all 32 heads on one module (timing only), or 4 per module
        setup = DecodeSetup(spec, cfg, (16384,), tp=tp, partition="tcp", check_capacity=False)
        share[tp] = 100 * run_decode(setup).epu["sv_reduction_share_of_attention"]
    ours = f"{share[1]:.3f}% of attention time with 32 heads per module, {share[8]:.3f}% with 4"
    values = {"share_tp1": share[1], "share_tp8": share[8]}
    if share[1] < 0.2:
        return Measured(
            ours,
            Verdict.REPRODUCED,
            "only the last head's reduction is exposed (the EPU reduces a head while the "
            "channels run the next head's SV), so the share grows as fewer heads share a module",
            values,
        )
    return Measured(ours, Verdict.DIFFERS, "the reduction's exposed EPU time", values)


def _threshold(kind: str) -> int:
    """Smallest T at which TCP gives every bank of every channel of aim-16ch work (one
    head)."""
    from pimphony.sim.systems.kernels import active_banks

    cfg = load_preset("aim-16ch")
    banks, channels = cfg.channel.banks, cfg.module.channels
    for t in range(1, 4097):
        jobs = partition_attention(cfg, kind, [t], 1, 128, scheme="tcp")
        active = sum(max((active_banks(j, banks) for j in c), default=0) for c in jobs)
        if active == banks * channels:
            return t
    return -1


def _tcp_thresholds() -> Measured:
    qk, sv = _threshold("qk"), _threshold("sv")
    ours = f"QK^T from T = {qk}, SV from T = {sv}"
    return _judged(
        ours,
        {"qk": qk, "sv": sv},
        (qk, sv) == (256, 32),
        qk == 256,
        "QK^T puts one token per bank (16 x 16 = 256, as the paper); our SV gives each channel "
        "a token range and every bank an output dimension, so all banks work once every "
        "channel has a token (T = 16); the paper does not derive its 32",
        (Gap("QK^T T", qk, 256, Unit.VALUE), Gap("SV T", sv, 32, Unit.VALUE)),
    )


def _dstable() -> Measured:
    cfg = load_preset(PIMPHONY_PRESET)
    ch, d = cfg.channel, cfg.dcs
    bits = (ch.gbuf_entries + ch.obuf_entries) * (2 * d.id_bits + d.timestamp_bits + 1)
    return Measured(
        f"{bits // 8} B = ({ch.gbuf_entries} + {ch.obuf_entries}) entries x "
        f"{2 * d.id_bits + d.timestamp_bits + 1} bits",
        Verdict.DERIVED,
        "the preset's OBuf size and ID/timestamp widths were chosen so that the tables hold "
        "576 B; not an independent check",
        {"bytes": bits // 8},
    )


def _dpa_buffers() -> Measured:
    from pimphony.sim.systems.admission import fill_batch
    from pimphony.sim.systems.setup import DecodeSetup
    from pimphony.sim.systems.step import run_decode
    from pimphony.sim.workloads import load_workload, sample_context_lengths

    spec, cfg = load_model("llm-7b"), load_preset(PIMPHONY_PRESET)
    pool = [int(t) for t in sample_context_lengths(load_workload("qmsum"), 256, 0)]
    batch = fill_batch(spec, cfg, 8, MemoryPolicy.LAZY, pool)
    report = run_decode(DecodeSetup(spec, cfg, batch, tp=8, memory="lazy"))
    dpa = report.dpa
    total = dpa["program_bytes"] + dpa["va2pa_bytes_per_module"] + dpa["config_bytes"]
    ours = (
        f"{total / 1024:.1f} KB per module (programs {dpa['program_bytes']} B, VA2PA "
        f"{dpa['va2pa_bytes_per_module']} B, configuration {dpa['config_bytes']} B; batch "
        f"{len(batch)})"
    )
    if total < 200 * 1024:
        return Measured(ours, Verdict.REPRODUCED, values={"bytes": total})
    return Measured(ours, Verdict.DIFFERS, "VA2PA entries grow with the batch", {"bytes": total})


def _fig19() -> Measured:
    from pimphony.sim.experiments.capacity import paper_comparison

    rows = paper_comparison(n_requests=256)
    static = 100 * sum(r[1].total_utilization for r in rows) / len(rows)
    lazy = 100 * sum(r[2].total_utilization for r in rows) / len(rows)
    ours = f"static {static:.1f}%, lazy {lazy:.1f}% (mean of {len(rows)} set-ups x workloads)"
    values = {"static": static, "lazy": lazy}
    return _judged(
        ours,
        values,
        abs(static - 36.2) <= 5 and abs(lazy - 75.6) <= 5,
        lazy > 2 * static,
        "the paper defines neither the utilisation's denominator nor its batch formation "
        "(docs/memory.md)",
        (Gap("static", static, 36.2, Unit.PERCENT), Gap("lazy", lazy, 75.6, Unit.PERCENT)),
    )


@functools.cache
def _ablation(
    model: str,
    workload: str,
    modules: int,
    requests: int,
    overflow: str = ScoreOverflow.GPR_TILES.value,
) -> list[dict[str, Any]]:
    """``pimphony ablation`` rows on the PIMphony preset, run once per process."""
    from pimphony.sim.experiments.ablation import ablation

    return ablation(model, workload, PIMPHONY_PRESET, modules, requests, score_overflow=overflow)


def _pp_gain(rows: list[dict[str, Any]]) -> tuple[float, str]:
    """Best split over TP-only (PP 1) on the last step's first batch, and the best split."""
    from pimphony.sim.systems.search import best_split

    tried = {(t["tp"], t["pp"]): t for t in rows[-1]["per_batch"][0]["splits"]}

    def search(splits):
        return best_split(lambda tp, pp: tried[tp, pp], splits, key=lambda t: t["tokens_per_s"])

    top = search(tried)
    tp_only = search([s for s in tried if s[1] == 1]).best["tokens_per_s"]
    return top.best["tokens_per_s"] / tp_only, f"TP {top.split[0]} x PP {top.split[1]}"


def _fig15() -> Measured:
    gain_a, split_a = _pp_gain(_ablation("llm-7b", "qmsum", 8, 32))
    gain_b, split_b = _pp_gain(_ablation("llama-3.1-8b", "multifieldqa", 8, 16))
    ours = (
        f"(a) LLM-7B-32K QMSum, +DPA: best {split_a}, {100 * (gain_a - 1):+.1f}% over TP only; "
        f"(b) LLM-7B-128K-GQA multifieldqa, +DPA: best {split_b}, {100 * (gain_b - 1):+.1f}%"
    )
    values = {"gain_a": gain_a, "gain_b": gain_b}
    marginal_a = 1.0 <= gain_a < 1.10
    return _judged(
        ours,
        values,
        marginal_a and _within(gain_b - 1, 0.20, 0.5),
        marginal_a or gain_b > gain_a,
        "PP's gain comes from micro-batches that keep every stage busy while TP pays the "
        "all-reduce per layer; with our batches (what 128 GB admits) the GQA model's larger "
        "batch gains less from PP than the paper's 20% (its batches are not given)",
        (Gap("(b) PP over TP only", gain_b, 1.20),),
    )


def _fig17a() -> Measured:
    from pimphony.sim.systems.admission import fill_batch

    spec, hw = load_model("llama-3.1-8b"), load_preset(PIMPHONY_PRESET)
    speeds = {}
    for modules in (8, 16, 32, 64):
        batch = fill_batch(spec, hw, modules, "lazy", [65536] * 256, all_may_fit=True)
        step = _best_step(spec, hw, modules, batch, partition="auto", sched="dcs", memory="lazy")
        speeds[modules * 16] = step.tokens_per_s
    ours = ", ".join(f"{gb} GB: {v:,.0f} tok/s" for gb, v in speeds.items())
    rising = all(a < b for a, b in zip(speeds.values(), list(speeds.values())[1:], strict=False))
    return _judged(ours, speeds, rising, False, "throughput does not rise with capacity")


def _fig13a() -> Measured:
    rows = _ablation("llm-7b", "qmsum", 8, 32)
    speed = rows[-1]["speedup"]
    steps = ", ".join(f"{r['step']} {r['speedup']:.2f}x" for r in rows)
    return _judged(
        steps,
        {"speedup": speed},
        2.1 <= speed <= 4.5,
        speed > 1,
        "outside the paper's range",
        (_range_gap("+DPA", speed, 2.1, 4.5),),
    )


def _overflow_readings(speed: dict[str, float], paper: float, cent_only: float) -> tuple[str, str]:
    """A speed-up under each reading of scores beyond the GPR (``--score-overflow``,
    ``compiler.plan.SCORE_OVERFLOWS``; both systems under it) as ``"18.2x (gpr-tiles) /
    12.1x (bank-spill)"``, and a clause giving ``cent_only`` (bank-spill for the CENT
    baseline alone) and naming the reading closer to the paper's ``paper``."""
    text = " / ".join(f"{v:.1f}x ({k})" for k, v in speed.items())
    closer = min(speed, key=lambda k: Gap(k, speed[k], paper).factor)
    return text, (
        f"with bank-spill for the CENT baseline alone (PIMphony on gpr-tiles) {cent_only:.1f}x; "
        f"of the two readings, {closer} is closer to {paper}x"
    )


def _fig13b() -> Measured:

    cases = (
        ("llama-3.1-8b", "multifieldqa", 8, 16),
        ("llama-3.1-8b", "loogle-sd", 8, 16),
        ("llama-3.1-70b", "multifieldqa", 32, 8),
    )
    speed, spill, cent_only = {}, {}, {}  # gpr-tiles (default), bank-spill, bank-spill CENT
    for model, workload, modules, requests in cases:
        label = f"{model} {workload}"
        rows = _ablation(model, workload, modules, requests)
        spilled = _ablation(model, workload, modules, requests, ScoreOverflow.BANK_SPILL.value)
        speed[label], spill[label] = rows[-1]["speedup"], spilled[-1]["speedup"]
        cent_only[label] = rows[-1]["tokens_per_s"] / spilled[0]["tokens_per_s"]
    best = max(speed.values())
    top = max(speed, key=speed.__getitem__)
    readings, closer = _overflow_readings(
        {ScoreOverflow.GPR_TILES.value: best, ScoreOverflow.BANK_SPILL.value: spill[top]},
        11.3,
        cent_only[top],
    )
    ours = (
        ", ".join(f"{k}: {v:.2f}x / {spill[k]:.2f}x" for k, v in speed.items())
        + f" (gpr-tiles / bank-spill); up to {readings}"
    )
    return _judged(
        ours,
        {"gpr-tiles": speed, "bank-spill": spill, "bank-spill-cent-only": cent_only},
        _within(best, 11.3, 0.15),
        best > 4.5,
        "verdict on the default reading (gpr-tiles): the 7B cases land within 3% of 11.3x; "
        "72B (G = 8) overshoots: its HFP baseline must cut every head's scores into 256-token "
        "GPR tiles (the module's 512 KB shared by 32 channel streams), each re-sending queries "
        "and combined on the EPU; bank-spill instead writes a head's scores to DRAM rows after "
        "QK^T and reads them back for SV (docs/decode.md), and overshoots as much; the paper "
        f"does not say how CENT handles scores beyond the GPR; {top}: {closer}",
        tuple(Gap(k, v, 11.3) for k, v in speed.items() if v == best),
    )


#: PIMphony Fig. 9's kernels: LLM-72B-128K-GQA's attention (G = 8, d_h 128) on one channel;
#: the figure's token count is not given.
_P_FIG9_TOKENS = 4096


def _pimphony_fig9() -> Measured:
    """QK^T and SV of a GQA group under both mappings and schedulers: DT-GBuf's share and
    what row reuse gains under each scheduler."""
    from pimphony.compiler.kernels import GQA_MAPPINGS

    cfg = load_preset(PIMPHONY_PRESET)
    cycles, io = {}, {}
    for kind in ("qk", "sv"):
        for mapping in GQA_MAPPINGS:
            prog = compile_kernel(
                cfg, kind, tokens=_P_FIG9_TOKENS, d_h=128, gqa_group=8, mapping=mapping
            )
            for sched in ("static", "dcs"):
                r = run_channel(prog.commands, cfg, sched).to_dict()
                cycles[(kind, mapping, sched)] = r["cycles"]
                io[(kind, mapping, sched)] = 100 * r["breakdown"]["io_transfer"] / r["cycles"]
    gain = {  # row reuse over head-serial
        (kind, sched): cycles[(kind, "head-serial", sched)] / cycles[(kind, "row-reuse", sched)]
        for kind in ("qk", "sv")
        for sched in ("static", "dcs")
    }
    dcs = {
        k: cycles[(k, "row-reuse", "static")] / cycles[(k, "row-reuse", "dcs")]
        for k in ("qk", "sv")
    }
    parts = []
    for k in ("qk", "sv"):
        before, after = io[(k, "head-serial", "static")], io[(k, "row-reuse", "static")]
        parts.append(
            f"{'QK^T' if k == 'qk' else 'SV'}: static I/O share {before:.1f}% head-serial -> "
            f"{after:.1f}% row-reuse; DCS {dcs[k]:.2f}x faster with row reuse; row reuse "
            f"gains {gain[(k, 'static')]:.2f}x static, {gain[(k, 'dcs')]:.2f}x with DCS"
        )
    ours = "; ".join(parts)
    raised = all(io[(k, "row-reuse", "static")] > io[(k, "head-serial", "static")] for k in dcs)
    return _judged(
        ours + f" (G 8, d_h 128, {_P_FIG9_TOKENS} tokens, pimphony-cent)",
        {
            "cycles": {"/".join(k): v for k, v in cycles.items()},
            "io_share": {"/".join(k): v for k, v in io.items()},
        },
        False,
        raised and all(d > 1 for d in dcs.values()) and all(g > 1 for g in gain.values()),
        "row reuse raises the Global Buffer's transfer share under static scheduling and DCS "
        "hides it, as in the paper; but here row reuse already pays under static scheduling "
        "(its ACT/PRE savings outweigh the extra WR_INP), where the paper implies it pays "
        "only with DCS: the same difference as the P-dcs-gqa row; Fig. 9's token count and "
        "breakdown values are not in the text",
    )


def _dcs_gqa() -> Measured:
    """DCS's step of the ablation (+DCS over +TCP) on the MHA and the GQA models."""
    cases = {
        "llm-7b qmsum (MHA)": ("llm-7b", "qmsum", 8, 32),
        "llama-3.1-8b multifieldqa (GQA 4)": ("llama-3.1-8b", "multifieldqa", 8, 16),
        "llama-3.1-8b loogle-sd (GQA 4)": ("llama-3.1-8b", "loogle-sd", 8, 16),
    }
    gain, util = {}, {}
    for label, args in cases.items():
        step = {r["step"]: r for r in _ablation(*args)}
        gain[label] = step["+DCS"]["speedup"] / step["+TCP"]["speedup"]
        util[label] = tuple(100 * step[s]["mac_utilization"] for s in ("+TCP", "+DCS"))
    mha, *gqa = gain.values()
    ours = "+DCS over +TCP: " + ", ".join(f"{k} {v:.2f}x" for k, v in gain.items())
    return _judged(
        ours,
        {"gain": gain, "mac_utilization_tcp_dcs": util},
        False,
        all(g > mha for g in gqa),
        "the paper states the direction only (no DCS-step numbers in its text). Ours: the "
        "+TCP step already maps each GQA group with row reuse under static scheduling and "
        "reaches "
        + ", ".join(
            f"{k.split(' (')[0].split()[-1]} {u[0]:.0f}% -> {u[1]:.0f}%" for k, u in util.items()
        )  # fmt: skip
        + " MAC utilisation (+TCP -> +DCS): row reuse already pays under static scheduling, "
        "so DCS adds as many points on GQA as on MHA from a higher start, a smaller ratio; "
        "the paper's claim needs static scheduling to lose row reuse's ACT/PRE savings to the "
        "extra WR_INP",
    )


@functools.cache
def _fig14_rows() -> dict[tuple[str, str, int], list[dict[str, Any]]]:
    """``pimphony ablation --system xpu+pim --fig14``: every case's rows, run once."""
    from pimphony.sim.experiments.ablation import FIG14_CASES, hetero_ablation

    return {(m, w, n): hetero_ablation(m, w, modules=n, requests=r) for m, w, n, r in FIG14_CASES}


def _fig14_speedups(gqa: bool) -> dict[str, float]:
    out = {}
    for (model, workload, n), rows in _fig14_rows().items():
        spec = load_model(model)
        if (spec.kv_heads < spec.heads) == gqa:
            out[f"{model} {workload} ({32 * n} GB)"] = rows[-1]["speedup"]
    return out


def _fig14a() -> Measured:
    speed = _fig14_speedups(gqa=False)
    ours = ", ".join(f"{k}: {v:.2f}x" for k, v in speed.items())
    rows = _fig14_rows()[("llm-7b", "qmsum", 4)]
    return _judged(
        ours,
        speed,
        all(2.1 <= v <= 4.5 for v in speed.values()),
        all(v > 1 for v in speed.values()),
        "outside the paper's 2.1-4.5x where the NPUs already bound the baseline: LLM-7B-32K's "
        f"HFP step keeps the NPUs {100 * rows[0]['xpu_busy']:.0f}% busy (FC of one sub-batch "
        "overlaps the other's attention), so TCP and DCS, which speed up attention only, add "
        f"{rows[2]['speedup']:.2f}x; DPA's larger batch ({rows[2]['batch']:.1f} -> "
        f"{rows[3]['batch']:.1f}) shares the weight reads and gives the rest. The paper gives "
        "Fig. 14's bars without its batches (docs/results.md)",
        tuple(_range_gap(k, v, 2.1, 4.5) for k, v in speed.items() if not 2.1 <= v <= 4.5),
    )


def _fig14b() -> Measured:
    speed = _fig14_speedups(gqa=True)
    best = max(speed.values())
    ours = ", ".join(f"{k}: {v:.2f}x" for k, v in speed.items()) + f"; up to {best:.1f}x"
    if _within(best, 8.4, 0.15):
        return Measured(
            ours,
            Verdict.REPRODUCED,
            "llama-3.1-70b runs on 256 GB (8 devices): its 8 KV heads cannot be split over the "
            "paper's 16 (docs/results.md); the cases at the paper's capacity reach "
            f"{max(v for k, v in speed.items() if '256 GB' not in k):.1f}x",
            speed,
        )
    return _judged(
        ours,
        speed,
        False,
        best > 4.5,
        "outside 15% of 8.4x; llama-3.1-70b runs on 256 GB (8 devices): its 8 KV heads cannot "
        "be split over the paper's 16",
        (Gap("best", best, 8.4),),
    )


@_per_cost_model
def _fig20_rows() -> list[dict[str, Any]]:
    from pimphony.sim.experiments.gpu_fig20 import fig20

    return fig20()


def _fig20() -> Measured:
    rows = {(r["model"], r["workload"]): r for r in _fig20_rows()}
    speed = {f"{m} {w}": r["speedup"] for (m, w), r in rows.items()}
    ours = ", ".join(f"{k}: {v:.2f}x" for k, v in speed.items())
    s7, s72 = speed["llm-7b qmsum"], speed["llm-72b qmsum"]
    g7, g72 = speed["llama-3.1-8b multifieldqa"], speed["llama-3.1-70b multifieldqa"]
    holds = min(speed.values()) > 1 and s7 > g7 and s72 > g72 and s72 < s7 and g72 < g7
    fc = {
        m: (r["pimphony"]["tokens_per_s"], r["a100"]["parts"]["fc"]) for (m, _), r in rows.items()
    }
    return _judged(
        ours,
        {"speedup": speed, "fc": fc},
        False,
        holds,
        "the paper's text gives no Fig. 20 numbers, so only its statements are checked (every "
        "case faster, non-GQA above GQA, 72B below 7B): with GQA the GPUs read each KV head "
        "once per group while PIM re-sends the queries (the paper's reason); at 72B the FC "
        "layers, where PIM gains least, take a larger share of PIMphony's step (docs/results.md)"
        + ("" if holds else "; a statement does not hold"),
    )


@functools.cache
def _fig16_rows() -> list[dict[str, Any]]:
    from pimphony.models.energy import DEFAULT_ENERGY
    from pimphony.sim.experiments.energy import ROWS, energy_rows

    return energy_rows(ROWS, 4, PIMPHONY_PRESET, DEFAULT_ENERGY)


def _fig16() -> Measured:
    rows = _fig16_rows()
    share = {s: [r["attention_background_share"] for r in rows if r["system"] == s] for s in
             ("CENT", "CENT+PIMphony")}  # fmt: skip
    base, ours_share = share["CENT"], share["CENT+PIMphony"]
    red = {r["row"]: r["attention_energy_reduction"] for r in rows if r["system"] != "CENT"}
    mean_base, mean_ours = sum(base) / len(base), sum(ours_share) / len(ours_share)
    best = max(red.values())
    ours = (
        f"background share of attention energy CENT {100 * min(base):.1f}-{100 * max(base):.1f}% "
        f"(mean {100 * mean_base:.1f}%), PIMphony {100 * min(ours_share):.1f}-"
        f"{100 * max(ours_share):.1f}% (mean {100 * mean_ours:.1f}%); attention energy "
        "reduction " + ", ".join(f"{k}: {v:.2f}x" for k, v in red.items())
    )
    values = {"share": share, "reduction": red}
    close = (
        _within(mean_base, 0.715, 0.15)
        and _within(mean_ours, 0.130, 0.15)
        and _within(best, 3.46, 0.15)
    )
    holds = min(red.values()) > 1 and max(ours_share) < 0.5 < min(base)
    return _judged(
        ours,
        values,
        close,
        holds,
        "the mechanism is the paper's (attention MAC and I/O energy nearly unchanged; background, "
        "proportional to runtime, falls), the sizes differ: 4 requests at the full context "
        "instead of LongBench/LV-Eval batches (attention's share is larger), TP 8 for both "
        "systems (72B-128K-GQA: HFP uses 4 of 32 channels, 87% background, 6.4x), and row "
        "switches on aim-32ch timing keep PIMphony's residual background at 16-19% "
        "(docs/energy.md)" + ("" if holds else "; a statement does not hold"),
        (
            Gap("CENT background share", 100 * mean_base, 71.5, Unit.PERCENT),
            Gap("PIMphony background share", 100 * mean_ours, 13.0, Unit.PERCENT),
            Gap("best attention energy reduction", best, 3.46),
        ),
    )


def _fig17(
    context: int, model: str, overflow: str = ScoreOverflow.GPR_TILES.value
) -> dict[str, Any]:
    from pimphony.sim.systems.admission import fill_batch

    spec, hw = load_model(model), load_preset(PIMPHONY_PRESET)
    out: dict[str, Any] = {}
    for label, partition, sched, memory in (
        ("CENT", "hfp", "static", "static"),
        ("PIMphony", "auto", "dcs", "lazy"),
    ):
        batch = fill_batch(spec, hw, 32, memory, [context] * 256, all_may_fit=True)
        step = _best_step(
            spec, hw, 32, batch, partition=partition, sched=sched, memory=memory,
            score_overflow=overflow,
        )  # fmt: skip
        out[label] = {
            "tokens_per_s": step.tokens_per_s,
            "util": 100 * step.mac_utilization,
            "batch": len(batch),
            "split": f"{step.tp}x{step.pp}",
        }
    out["speedup"] = out["PIMphony"]["tokens_per_s"] / out["CENT"]["tokens_per_s"]
    return out


def _fig17_text(r: dict[str, Any]) -> str:
    return f"{r['speedup']:.1f}x; " + ", ".join(
        f"{k} {v['tokens_per_s']:,.1f} tok/s at {v['util']:.1f}% (batch {v['batch']}, "
        f"TP x PP {v['split']})"
        for k, v in r.items()
        if k != "speedup"
    )


def _fig17_1m() -> Measured:
    r = _fig17(1 << 20, "llama-3.1-8b-1m")
    spill = _fig17(1 << 20, "llama-3.1-8b-1m", ScoreOverflow.BANK_SPILL.value)
    cent_only = r["PIMphony"]["tokens_per_s"] / spill["CENT"]["tokens_per_s"]
    readings, closer = _overflow_readings(
        {o.value: x["speedup"] for o, x in zip(ScoreOverflow, (r, spill), strict=True)},
        46.6,
        cent_only,
    )
    return _judged(
        f"{readings}; "
        + "; ".join(
            f"{o}: {_fig17_text(x).split('; ', 1)[1]}"
            for o, x in zip(ScoreOverflow, (r, spill), strict=True)
        ),
        {"gpr-tiles": r, "bank-spill": spill, "bank-spill-cent-only": cent_only},
        _within(r["speedup"], 46.6, 0.15),
        r["speedup"] > 10,
        "verdict on the default reading (gpr-tiles). CENT collapses as in the paper (its 2% "
        "utilisation; ours lower): HFP puts a whole 1M-token head on one channel and, under "
        "gpr-tiles, cuts it into 768-token GPR tiles; under bank-spill it writes the head's "
        "scores to DRAM rows and reads them back (docs/decode.md), as slow; bank-spill costs "
        "PIMphony more, its TCP tiles no longer hiding the softmax of a 1M-token head; the "
        f"paper does not describe its handling of scores beyond the GPR; {closer}; contexts "
        "are fixed at 1M (the paper's 3-sigma variation is not defined)",
        (Gap("PIMphony over CENT", r["speedup"], 46.6),),
    )


#: PIMphony Fig. 17b's NeuPIMs at 512 GB: 16 devices of 32 GB (Table IV).
_NEUPIMS_512GB = 16


def _fig17_neupims(context: int, model: str) -> dict[str, Any]:
    """Fig. 17b's NeuPIMs pair on ``pimphony ablation --system xpu+pim``'s system (16
    NeuPIMs devices, NPUs tensor parallel): the baseline (HFP, static, static memory) and
    NeuPIMs + PIMphony (auto, DCS, DPA), each at its best TP x PP and sub-batch count."""
    from pimphony.models.xpu_config import load_xpu
    from pimphony.sim.experiments.ablation import HETERO_PRESET, HETERO_XPU, tensor_parallel_xpu
    from pimphony.sim.systems.admission import fill_batch
    from pimphony.sim.systems.hetero import SUB_BATCHES_AUTO, HeteroSetup, run_hetero_decode
    from pimphony.sim.systems.search import best_split, valid_splits
    from pimphony.sim.systems.setup import DecodeSetup

    n = _NEUPIMS_512GB
    spec, hw = load_model(model), load_preset(HETERO_PRESET)
    npus = tensor_parallel_xpu(load_xpu(HETERO_XPU), n)
    out: dict[str, Any] = {}
    for label, partition, sched, memory in (
        ("NeuPIMs", "hfp", "static", "static"),
        ("NeuPIMs + PIMphony", "auto", "dcs", "lazy"),
    ):
        batch = fill_batch(spec, hw, n, memory, [context] * 256, all_may_fit=True)

        def step(tp: int, pp: int, batch=batch, choices=(partition, sched, memory)):
            p, sc, me = choices
            pim = DecodeSetup(spec, hw, batch, tp=tp, pp=pp, partition=p, sched=sc, memory=me)
            setup = HeteroSetup(pim, npus, SUB_BATCHES_AUTO)
            return run_hetero_decode(setup, _caches().for_setup(pim))

        r = best_split(step, valid_splits(spec, n)).best
        out[label] = {
            "tokens_per_s": r.tokens_per_s,
            "batch": len(batch),
            "split": f"{r.tp}x{r.pp}",
            "sub_batches": r.sub_batches,
            "pim_busy": 100 * r.devices["pim"]["utilization"],
        }
    out["speedup"] = out["NeuPIMs + PIMphony"]["tokens_per_s"] / out["NeuPIMs"]["tokens_per_s"]
    return out


def _fig17b_neupims() -> Measured:
    r = _fig17_neupims(1 << 20, "llama-3.1-8b-1m")
    ours = f"{r['speedup']:.1f}x; " + ", ".join(
        f"{k} {v['tokens_per_s']:,.2f} tok/s (batch {v['batch']}, TP x PP {v['split']}, "
        f"K {v['sub_batches']}, PIM busy {v['pim_busy']:.0f}%)"
        for k, v in r.items()
        if k != "speedup"
    )
    return _judged(
        ours,
        r,
        _within(r["speedup"], 5.0, 0.15),
        r["speedup"] > 1,
        "512 GB holds 3 requests of 1M tokens; HFP keeps each (request, KV head) pair's KV "
        "in one channel, so with one KV head per module (TP 8: 8 KV heads cannot be split "
        "over 16 modules, the other 2x is PP across PIM stages) the baseline's attention uses "
        "3 of a module's 32 channels and PIMphony's TCP all 32, plus DCS; the paper's NeuPIMs "
        "baseline ('scales more stably via tensor parallelism') is not described at this "
        "scale (split, batch and the 3-sigma context variation not given). NPUs as in "
        "P-fig14 (tensor parallel, all-reduces not charged)",
        (Gap("NeuPIMs + PIMphony over NeuPIMs", r["speedup"], 5.0),),
    )


def _fig17_256() -> Measured:
    r = _fig17(256, "llama-3.1-8b")
    spill = _fig17(256, "llama-3.1-8b", ScoreOverflow.BANK_SPILL.value)
    agree = spill == r
    return _judged(
        f"{r['speedup']:.1f}x (gpr-tiles) / {spill['speedup']:.1f}x (bank-spill); "
        + _fig17_text(r).split("; ", 1)[1],
        {"gpr-tiles": r, "bank-spill": spill},
        _within(r["speedup"], 2.1, 0.15),
        r["speedup"] > 1,
        "verdict on the default reading (gpr-tiles). At 256 tokens attention is short and FC "
        "layers dominate, which PIMphony's techniques speed up less; "
        + (
            "every head's scores fit the GPR, so the two readings of scores beyond it agree"
            if agree
            else "the two readings of scores beyond the GPR differ"
        )
        + "; the batches (capped at 256 requests here) and the baseline are not given by the "
        "paper",
        (Gap("PIMphony over CENT", r["speedup"], 2.1),),
    )


# ---- LoL-PIM (seed 001) ---------------------------------------------------------------------

#: LoL-PIM Fig. 7a's operations (layer op of the decode plan) and their latency cuts (%).
_FIG7A_PAPER = {"QK^T": ("qk", 40), "SV": ("sv", 44), "FFN1": ("ffn1", 29), "FFN2": ("ffn2", 28)}


def _fig7a_shapes(cfg) -> dict[str, tuple[str, dict]]:
    """Channel 0's kernel of each Fig. 7a operation in the decode step's own plan: one
    Qwen1.5-7B request at Musique's mean context (16,362 tokens, LoL-PIM Table 2) on one
    module under ITPP (K split by tokens, V by head dimension), TP 1."""
    from pimphony.compiler.plan import layer_plan
    from pimphony.sim.workloads import load_workload

    mean = round(load_workload("musique").mean)
    plan = layer_plan(load_model("llm-7b"), cfg, [mean], tp=1, partition="itpp")
    jobs = {
        "qk": plan.qk[0][0],
        "sv": plan.sv[0][0],
        **{op.value: plan.gemv[op][0][0] for op in plan.gemv},
    }
    return {name: (jobs[key].kind, jobs[key].shape) for name, (key, _) in _FIG7A_PAPER.items()}


@functools.cache
def _fig7a() -> Measured:
    """Static on the AiMX's one GB against ping-pong with the extra GB of (3)."""
    base_cfg, io_cfg = load_preset(LOLPIM_PRESET), load_preset(LOLPIM_IO_PRESET)
    cuts, shapes = {}, _fig7a_shapes(base_cfg)
    for op, (kind, shape) in shapes.items():
        cycles = {
            sched: run_channel(compile_kernel(cfg, kind, **shape).commands, cfg, sched).cycles
            for sched, cfg in (("static", base_cfg), ("pingpong", io_cfg))
        }
        cuts[op] = 100 * (1 - cycles["pingpong"] / cycles["static"])
    ours = ", ".join(f"{op} {c:.0f}%" for op, c in cuts.items())
    close = {op: abs(c - _FIG7A_PAPER[op][1]) <= 10 for op, c in cuts.items()}
    off = ", ".join(op for op, ok in close.items() if not ok)
    return _judged(
        ours,
        cuts,
        all(close.values()),
        all(c > 0 for c in cuts.values()),
        f"{off} outside 10 points. With 2 output registers per bank our FC GEMV rewrites each "
        "input tile for every output group, and ping-pong hides those writes behind the MACs; "
        "the paper gives neither its FC mapping nor shapes or DRAM timing for Fig. 7a",
        tuple(Gap(op, c, _FIG7A_PAPER[op][1], Unit.PERCENT) for op, c in cuts.items()),
    )


def _fig7a_transfer() -> Measured:
    """The share of QK^T's and SV's static time that is not MAC issue or row switching."""
    cfg = load_preset(LOLPIM_PRESET)
    share, parts = {}, {}
    for op, (kind, shape) in _fig7a_shapes(cfg).items():
        if kind not in ("qk", "sv"):
            continue
        r = run_channel(compile_kernel(cfg, kind, **shape).commands, cfg, "static").to_dict()
        b = r["breakdown"]
        share[op] = 100 * (b["io_transfer"] + b["dependency_stall"]) / r["cycles"]
        parts[op] = {k: 100 * v / r["cycles"] for k, v in b.items()}
    ours = ", ".join(
        f"{op} {s:.1f}% (bus {parts[op]['io_transfer']:.1f}%, waiting "
        f"{parts[op]['dependency_stall']:.1f}%)"
        for op, s in share.items()
    )
    return _judged(
        ours + " of static cycles",
        {"transfer_share": share, "breakdown": parts},
        all(s > 50 for s in share.values()),
        all(s > 40 for s in share.values()),
        "static scheduling waits out every GB write and Out-Reg read (QK^T: a read-out after "
        "every output group, so waiting dominates); SV spends the other half of its cycles on "
        "MACs and row switches, so it sits at the paper's bound; the paper gives neither "
        "shapes nor timing for Fig. 7a, and 'data transfer latency' is read here as every "
        "cycle that is neither a MAC nor a row switch (models/channel.py's breakdown)",
        tuple(
            Gap(f"{op} transfer share (paper: over)", s, 50.0, Unit.PERCENT)
            for op, s in share.items()
            if s <= 50
        ),
    )


def _fig9() -> Measured:
    """LoL-PIM Fig. 9(a) at its two ends (128 and 1024 GB), the text's three numbers."""
    from pimphony.sim.experiments.gpu_compare import WORKLOADS, gpu_compare

    rows = gpu_compare("llm-7b", WORKLOADS, (128, 1024))
    tps: dict[tuple[str, int], dict[str, float]] = {}
    for r in rows:
        tps.setdefault((r["workload"], r["capacity_gb"]), {})[r["system"]] = r["tokens_per_s"]
    over_gddr = {wl: tps[(wl, 1024)]["lol-pim"] / tps[(wl, 1024)]["gpu-gddr6"] for wl in WORKLOADS}
    over_pim = {wl: tps[(wl, 1024)]["lol-pim"] / tps[(wl, 1024)]["pim-aimx"] for wl in WORKLOADS}
    slow = {wl: tps[(wl, 1024)]["lol-pim"] / tps[(wl, 1024)]["gpu-gddr6-10g"] for wl in WORKLOADS}
    pim_first = {
        wl: tps[(wl, 128)]["pim-aimx"] / max(tps[(wl, 128)]["gpu-hbm"], tps[(wl, 128)]["gpu-gddr6"])
        for wl in WORKLOADS
    }

    def each(d: dict[str, float]) -> str:
        return " / ".join(f"{v:.2f}x" for v in d.values())

    ours = (
        f"at 1024 GB LoL-PIM over GPU-GDDR {each(over_gddr)}, over PIM-only {each(over_pim)}; "
        f"PIM-only over the faster GPU at 128 GB {each(pim_first)} ({' / '.join(WORKLOADS)})"
    )
    values = {"over_gddr": over_gddr, "over_pim": over_pim, "pim_over_gpu_128": pim_first}
    close = all(_within(v, 3.53, 0.15) for v in over_gddr.values()) and all(
        _within(v, 4.74, 0.15) for v in over_pim.values()
    )
    trend = all(v > 1 for d in values.values() for v in d.values())
    return _judged(
        ours,
        values,
        close and trend,
        trend,
        "LoL-PIM leads both baselines at 1024 GB and PIM-only beats the GPUs at 128 GB, but by "
        "less: over GPU-GDDR the ratio depends on the GPUs' all-reduce link (NVLink here; on "
        f"the 10 GB/s link of LoL-PIM 8.1 it is {each(slow)}), which the paper does not "
        "state; over PIM-only, our baseline takes its best TP x PP split, which the paper "
        "does not give (at the most-TP split the ratio is higher; docs/results.md)",
        tuple(Gap(f"over GPU-GDDR {wl}", v, 3.53) for wl, v in over_gddr.items())
        + tuple(Gap(f"over PIM-only {wl}", v, 4.74) for wl, v in over_pim.items()),
    )


#: LoL-PIM 8.1's 72B capacities (128 GB cannot hold the model's weights on PIM).
_FIG9_72B_GB = (256, 512, 1024)


def _fig9_72b() -> Measured:
    """LoL-PIM Fig. 9(b): LLM-72B over the GPU-GDDR and PIM-only baselines, 256-1024 GB."""
    from pimphony.sim.experiments.gpu_compare import WORKLOADS, gpu_compare

    rows = gpu_compare("llm-72b", WORKLOADS, _FIG9_72B_GB)
    tps: dict[tuple[str, int], dict[str, float]] = {}
    for r in rows:
        tps.setdefault((r["workload"], r["capacity_gb"]), {})[r["system"]] = r["tokens_per_s"]
    ratio = {
        base: [t["lol-pim"] / t[base] for t in tps.values()] for base in ("gpu-gddr6", "pim-aimx")
    }
    mean = {base: statistics.geometric_mean(v) for base, v in ratio.items()}
    paper = {"gpu-gddr6": 8.54, "pim-aimx": 2.65}
    ours = (
        "; ".join(
            f"over {base} geomean {mean[base]:.2f}x ({min(v):.2f}-{max(v):.2f}x)"
            for base, v in ratio.items()
        )
        + f" over {len(tps)} points ({' / '.join(WORKLOADS)} x {_FIG9_72B_GB} GB)"
    )
    return _judged(
        ours,
        {"geomean": mean, "range": {b: (min(v), max(v)) for b, v in ratio.items()}},
        all(_within(mean[b], v, 0.15) for b, v in paper.items()),
        all(v > 1 for r in ratio.values() for v in r),
        "LoL-PIM leads both baselines at every point; over the GPU by less, for the L-fig9 "
        "row's reason (the GPUs' all-reduce link); "
        "over PIM-only by more, where the paper's ratio falls from 7B to 72B (4.74x -> 2.65x) "
        "and ours rises (L-fig9: 1.85-2.44x at 1024 GB): our PIM-only baseline takes its best "
        "TP x PP split and batch, neither of which the paper gives",
        tuple(Gap(f"over {b}", mean[b], v) for b, v in paper.items()),
    )


#: LoL-PIM's heterogeneous runs (Figs. 9b / 10b): 7B at 128-1024 GB; 72B at 512 and 1024 GB
#: (at 256 GB its weights exceed the hybrid's two 64 GB GPUs, at 128 GB PIM-only's modules).
_HETERO_CAPACITIES = {"llm-7b": (128, 256, 512, 1024), "llm-72b": (512, 1024)}


@_per_cost_model
def _hetero_tps() -> dict[str, dict[str, float]]:
    """``pimphony gpu-compare --hetero`` for 7B and 72B: per system, ``model workload C GB``
    -> tokens/s (points where a system cannot run left out)."""
    from pimphony.sim.experiments.gpu_compare import WORKLOADS, gpu_compare

    out: dict[str, dict[str, float]] = {}
    for model, caps in _HETERO_CAPACITIES.items():
        for r in gpu_compare(model, WORKLOADS, caps, hetero=True):
            if r["tokens_per_s"] is not None:
                point = f"{model} {r['workload']} {r['capacity_gb']} GB"
                out.setdefault(r["system"], {})[point] = r["tokens_per_s"]
    return out


def _hetero_ratio(num: str, den: str) -> dict[str, float]:
    """``num``'s tokens/s over ``den``'s at every point both run."""
    tps = _hetero_tps()
    return {p: v / tps[den][p] for p, v in tps[num].items() if p in tps[den]}


def _extreme(ratios: dict[str, float], pick=max) -> str:
    point = pick(ratios, key=ratios.__getitem__)
    return f"{ratios[point]:.2f}x ({point})"


def _gpu_pim() -> Measured:
    """LoL-PIM's abstract: up to 16.0x over GPU-PIM, read as standalone LoL-PIM over the
    GPU+PIM baseline (GPU-GDDR6s + AiMX-baseline modules, half the capacity in each)."""
    over = _hetero_ratio("lol-pim", "gpu+pim")
    hybrid = _hetero_ratio("gpu+lol-pim", "gpu+pim")
    best, mean = max(over.values()), statistics.geometric_mean(list(over.values()))
    ours = (
        f"LoL-PIM over GPU+PIM up to {_extreme(over)}, geomean {mean:.2f}x "
        f"over {len(over)} points, least {_extreme(over, min)}; the other reading, GPU+LoL-PIM "
        f"over GPU+PIM, up to {_extreme(hybrid)}"
    )
    return _judged(
        ours,
        {"lol_pim_over_gpu_pim": over, "gpu_lol_pim_over_gpu_pim": hybrid},
        _within(best, 16.0, 0.15),
        all(v > 1 for v in over.values()),
        "LoL-PIM leads GPU+PIM at every point, by less than 16.0x. GPU+PIM's step is the "
        "AiMX baseline's attention (HFP; 43-88% of the step at the points checked) and the "
        "GPUs' FC at the small batches its static memory admits (3-32 requests); ours runs "
        "at its best TP x PP split and sub-batch count (the paper gives neither); the paper "
        "says neither which pairing its 16.0x is (read here as standalone LoL-PIM over the "
        "GPU+PIM baseline) nor at which point",
        (Gap("best LoL-PIM over GPU+PIM", best, 16.0),),
    )


def _hetero_gap() -> Measured:
    """LoL-PIM 8.2: GPU+LoL-PIM below standalone LoL-PIM, by less than the 2x internal
    bandwidth gap."""
    gap = _hetero_ratio("lol-pim", "gpu+lol-pim")
    worst = max(gap.values())
    ours = (
        f"LoL-PIM over GPU+LoL-PIM {_extreme(gap, min)} to {_extreme(gap)}, geomean "
        f"{statistics.geometric_mean(list(gap.values())):.2f}x over {len(gap)} points"
    )
    below = all(v > 1 for v in gap.values())
    return _judged(
        ours,
        gap,
        below and worst < 2,
        below,
        "where every hybrid module works on each layer (7B at 256 / 512 GB: TP = modules) "
        "GPU+LoL-PIM nearly matches LoL-PIM (0.97-1.20x, above it at one point), with half "
        "the modules but no FC on them and none of PIM-only's pipeline bubbles; the gap "
        "reaches 2x where the hybrid cannot use its modules (7B at 1024 GB: TP is at most "
        "the 32 KV heads, and xpu+pim's PIM stages add capacity, not concurrent attention; "
        "7B at 128 GB: 8 modules against 16) and exceeds it at 72B, where the GPUs' FC "
        "GEMMs at batches of 6-16 read the weights at the GPUs' external bandwidth (GPUs "
        "63-76% busy) while LoL-PIM runs them at the modules' internal bandwidth; the paper "
        "gives the hybrid's split, batch and sub-batching for no point",
        (Gap("largest LoL-PIM over GPU+LoL-PIM", worst, 2.0),) if worst >= 2 else (),
    )


#: LoL-PIM Table 8 (Musique): (model, nodes of 8 modules) -> per system (tokens/s, util %).
_TABLE8 = {
    ("llm-7b", 4): ((1833, 15.1), (2455, 20.2), (3668, 30.1)),
    ("llm-14b", 5): ((1309, 15.4), (1737, 20.5), (2553, 30.1)),
    ("llm-72b", 16): ((737, 12.8), (1211, 21.1), (1740, 30.3)),
}
#: Table 8's systems: the AiMX baseline (head-first, static memory and scheduling), LoL-PIM
#: with ITPP + PP and DPA (1, 2), and with I/O-aware ping-pong buffering and its extra GB too
#: (1, 2, 3): (label, partition, scheduler, memory, preset).
_TABLE8_SYSTEMS = (
    ("PIM", "hfp", "static", "static", LOLPIM_PRESET),
    ("LoL-PIM (1)(2)", "itpp", "static", "lazy", LOLPIM_PRESET),
    ("LoL-PIM (1)(2)(3)", "itpp", "pingpong", "lazy", LOLPIM_IO_PRESET),
)


@functools.cache
def _caches():
    """Kernel caches shared by every decode step of one fidelity run (exact)."""
    from pimphony.sim.systems.step import KernelCaches

    return KernelCaches()


def _best_step(spec, hw, modules: int, batch, **choices):
    """The fastest decode step over every valid (TP, PP) split of ``modules``."""
    from pimphony.sim.systems.search import best_split, valid_splits
    from pimphony.sim.systems.setup import MICRO_BATCHES_AUTO, DecodeSetup
    from pimphony.sim.systems.step import run_decode

    def step(tp: int, pp: int):
        setup = DecodeSetup(
            spec, hw, batch, tp=tp, pp=pp, micro_batches=MICRO_BATCHES_AUTO, **choices
        )
        return run_decode(setup, caches=_caches())

    return best_split(step, valid_splits(spec, modules)).best


#: Contexts of the PIMphony Fig. 4 row: 1K to 32K (LLM-7B-32K's window).
_P_FIG4_CONTEXTS = (1024, 2048, 4096, 8192, 16384, 32768)


def _pimphony_fig4() -> Measured:
    from pimphony.sim.systems.admission import fill_batch

    spec, hw = load_model("llm-7b"), load_preset(PIMPHONY_PRESET)
    util = {}
    for ctx in _P_FIG4_CONTEXTS:
        batch = fill_batch(spec, hw, 8, "static", [ctx] * 256, all_may_fit=True)
        step = _best_step(spec, hw, 8, batch, partition="hfp", sched="static", memory="static")
        util[ctx] = 100 * step.mac_utilization
    drop = {ctx: 100 * (1 - util[_P_FIG4_CONTEXTS[-1]] / util[ctx]) for ctx in (1024, 2048, 4096)}
    ours = (
        "CENT MAC utilisation "
        + ", ".join(f"{ctx // 1024}K {u:.1f}%" for ctx, u in util.items())
        + f": down {drop[1024]:.0f}% at 32K from 1K ({drop[2048]:.0f}% from 2K, "
        f"{drop[4096]:.0f}% from 4K)"
    )
    return _judged(
        ours,
        {
            "util": {str(k): v for k, v in util.items()},
            "drop_from": {str(k): v for k, v in drop.items()},
        },
        False,
        all(a > b for a, b in itertools.pairwise(util.values())) and drop[1024] > 25,
        "utilisation falls with context as in the paper: static memory sizes every request's KV "
        "for the 32K window (batch 7 at every context), so the weight GEMVs stay at batch 7 "
        "while HFP's attention, one head per channel under static scheduling, grows with the "
        "context; the paper's Fig. 4 is not in its text, so the context the drop is measured "
        "from is a reading (the shortest here; the cell gives three)",
        (Gap("drop at 32K from 1K", drop[1024], 48.0, Unit.PERCENT),),
    )


def _fig4() -> Measured:
    from pimphony.sim.systems.admission import fill_batch

    hw, spec = load_preset(LOLPIM_PRESET), load_model("llm-7b")
    gain = {}
    for n in range(1, 9):  # 80 GB x N = 10 N modules of 8 GB; every request 4K x N tokens
        modules, pool = 10 * n, [4096 * n] * 4096
        static, lazy = (
            len(fill_batch(spec, hw, modules, m, pool, all_may_fit=True))
            for m in ("static", "lazy")
        )
        gain[n] = 100 * (lazy / static - 1)
    best = max(gain.values())
    ours = "lazy over static batch: " + ", ".join(f"N={n} {g:+.0f}%" for n, g in gain.items())
    return _judged(
        ours,
        gain,
        _within(best, 380, 0.15),
        best > 0,
        "with every request at exactly 4K x N tokens a static reservation of the 32K window "
        "holds 32K / (4K x N) times fewer requests, so the gain is largest at N = 1; the paper "
        "does not say how contexts vary within each N, which sets the number",
        (Gap("best batch gain (%)", best, 380, Unit.VALUE),),
    )


def _fig11() -> Measured:
    from pimphony.sim.systems.admission import fill_batch
    from pimphony.sim.systems.search import valid_splits
    from pimphony.sim.systems.setup import DecodeSetup
    from pimphony.sim.systems.step import run_decode
    from pimphony.sim.workloads import load_workload, sample_context_lengths

    hw, spec, modules = load_preset(LOLPIM_PRESET), load_model("llm-7b"), 32
    pool = [int(t) for t in sample_context_lengths(load_workload("musique"), 2048, 0)]
    speed: dict[str, dict[str, float]] = {"static": {}, "lazy": {}}
    for memory in speed:
        batch = fill_batch(spec, hw, modules, memory, pool)
        for tp, pp in valid_splits(spec, modules):
            setup = DecodeSetup(
                spec, hw, batch, tp=tp, pp=pp, partition="itpp", sched="static",
                memory=memory, micro_batches="auto",
            )  # fmt: skip
            speed[memory][f"{tp}x{pp}"] = run_decode(setup).tokens_per_s
    dpa_gain = max(speed["lazy"][k] / speed["static"][k] for k in speed["lazy"])
    spread = max(speed["lazy"].values()) / min(speed["lazy"].values())
    ours = (
        f"DPA at a fixed split: up to {dpa_gain:.2f}x; spread over splits with DPA: {spread:.2f}x"
    )
    values = {"dpa_gain": dpa_gain, "spread": spread}
    return _judged(
        ours,
        values,
        _within(dpa_gain, 1.3, 0.15) and _within(spread, 1.73, 0.15),
        dpa_gain > 1 and spread > 1,
        "the paper's system scales and TP x PP points are not given; here 4 nodes (32 "
        "modules), every valid split. Here DPA gains only where the static batch cannot fill "
        "the pipeline (the deepest PP: 2x); at splits it fills, a larger batch adds ~0%: "
        "with the AiM pair of output registers a batched FC GEMV pass holds one request "
        "(docs/mapping.md), so the FC layers gain no row reuse from the batch, and the "
        "paper's 1.3x at a shallower split is not seen",
        (Gap("DPA at a fixed split", dpa_gain, 1.3), Gap("spread over splits", spread, 1.73)),
    )


def _table8() -> Measured:
    from pimphony.sim.systems.admission import fill_batch
    from pimphony.sim.systems.search import valid_splits
    from pimphony.sim.systems.setup import MICRO_BATCHES_AUTO, DecodeSetup
    from pimphony.sim.systems.step import run_decode
    from pimphony.sim.workloads import load_workload, sample_context_lengths

    presets = {name: load_preset(name) for name in (LOLPIM_PRESET, LOLPIM_IO_PRESET)}
    nodes_of = presets[LOLPIM_PRESET].module.modules_per_node
    pool = [int(t) for t in sample_context_lengths(load_workload("musique"), 2048, 0)]
    cells, close, ordered, gaps = [], [], [], []
    values: dict[str, Any] = {}
    for (model, nodes), paper in _TABLE8.items():
        spec, modules = load_model(model), nodes * nodes_of
        speeds = []
        for (label, partition, sched, memory, preset), (p_tok, p_util) in zip(
            _TABLE8_SYSTEMS, paper, strict=True
        ):
            hw = presets[preset]
            batch = fill_batch(spec, hw, modules, memory, pool)
            step = _best_step(spec, hw, modules, batch, partition=partition, sched=sched,
                              memory=memory)  # fmt: skip
            tok, util = step.tokens_per_s, 100 * step.mac_utilization
            speeds.append(tok)
            close.append(_within(tok, p_tok, 0.15) and abs(util - p_util) <= 3)
            gaps += [Gap(f"{model} {label} tok/s", tok, p_tok, Unit.VALUE),
                     Gap(f"{model} {label} utilisation", util, p_util, Unit.PERCENT)]  # fmt: skip
            cells.append(f"{model} {label}: {tok:,.0f} ({p_tok:,}) tok/s, {util:.1f}% ({p_util}%)")
            values[f"{model} {label}"] = {"tokens_per_s": tok, "util": util, "batch": len(batch)}
        ordered.append(speeds == sorted(speeds))
    ours = "; ".join(cells) + " -- ours (paper)"
    n = sum(close)
    ffn = _fig7a().values
    most_tp = []  # the PIM column at the split with the most TP instead of the best
    for (model, nodes), paper in _TABLE8.items():
        spec, hw, modules = load_model(model), presets[LOLPIM_PRESET], nodes * nodes_of
        tp, pp = max(valid_splits(spec, modules))
        batch = fill_batch(spec, hw, modules, "static", pool)
        setup = DecodeSetup(
            spec, hw, batch, tp=tp, pp=pp, micro_batches=MICRO_BATCHES_AUTO, partition="hfp",
            sched="static", memory="static",
        )  # fmt: skip
        tok = run_decode(setup, caches=_caches()).tokens_per_s
        most_tp.append(
            f"{model} TP {tp} x PP {pp} {tok:,.0f} ({100 * (tok / paper[0][0] - 1):+.0f}%)"
        )
    labels = [system[0] for system in _TABLE8_SYSTEMS]
    parts = []
    for (model, _), paper in _TABLE8.items():
        mid, pp = (values[f"{model} {label}"]["tokens_per_s"] for label in labels[1:])
        parts.append(
            f"{model} {100 * (pp / paper[2][0] - 1):+.0f}% = (1)(2) "
            f"{100 * (mid / paper[1][0] - 1):+.0f}% x ping-pong gain {pp / mid:.2f}x "
            f"(paper {paper[2][0] / paper[1][0]:.2f}x)"
        )
    return _judged(
        ours,
        values,
        all(close),
        all(ordered),
        f"{n} of 9 cells within 15% and 3 points; every model gains in the paper's order. The "
        f"ping-pong column's offsets split as {'; '.join(parts)}. Our ping-pong gain is larger "
        "because our FC layers (half a step or more) gain more from it than LoL-PIM's (the "
        f"Fig. 7a row: FFN1 {ffn['FFN1']:.0f}% and FFN2 {ffn['FFN2']:.0f}% against 29% and "
        "28%): with 2 output registers per bank our FC GEMV rewrites each input tile for every "
        "output group, and ping-pong hides those writes; LoL-PIM gives neither its FC mapping "
        "nor its DRAM timing (here aim-16ch's), which set that share. The PIM column is at "
        "each system's best split; LoL-PIM does not give the baseline's split, and 4.2 calls "
        "PP 'less favorable' under HFA: at the split with the most TP it would be "
        f"{'; '.join(most_tp)}",
        tuple(gaps),
    )


# ---- LibraPIM (seed 002) and PIM-SHERPA (seed 004) ---------------------------------------

#: The corners and middle of LibraPIM 6.1's grid (batch 32-384 x input 16-4096): 9 of the 25
#: points per model, so the row runs in about a minute (`pimphony librapim-fig19` runs all 25).
_LP_FIG19_BATCHES = (32, 128, 384)
_LP_FIG19_CONTEXTS = (16, 256, 4096)
#: Both readings of DBO's offloaded FFN (``--offload``); rows judge the default, per bank,
#: and state the other.
_OFFLOAD_READINGS = tuple(OffloadReading)
#: Fig. 20 and 21's model (6.1's GPT3-175B; the paper does not name Fig. 20's) and the array
#: sides of the Fig. 21 row (256 x 256 behaves as 128 x 128: the NPU is memory-bound there).
_LP_FIG20_MODEL = "gpt3-175b-4k"
_LP_FIG21_SIZES = (32, 64, 128)


def _lp_fig19() -> Measured:
    from pimphony.sim.experiments.librapim_fig19 import PAPER_SPEEDUP, fig19_readings, means

    by_reading = fig19_readings(
        _OFFLOAD_READINGS, batches=_LP_FIG19_BATCHES, contexts=_LP_FIG19_CONTEXTS
    )
    rows, other = by_reading[OffloadReading.PER_BANK], by_reading[OffloadReading.PER_CHANNEL]
    m = means(rows)["all"]
    speed = {str(k): m[str(k)]["mean"] for k in PAPER_SPEEDUP}
    lo = min(r["librapim_speedup"] for r in rows)
    hi = max(r["librapim_speedup"] for r in rows)
    per_channel = means(other)["all"]["librapim"]["mean"]
    ours = (
        ", ".join(f"{k} {v:.2f}x" for k, v in speed.items())
        + f" (means over NPU+AiM; LibraPIM {lo:.2f}-{hi:.2f}x); --offload per-channel: "
        f"LibraPIM {per_channel:.2f}x"
    )
    values = {
        "mean_speedup": speed,
        "paper": {str(k): v for k, v in PAPER_SPEEDUP.items()},
        "librapim_per_channel": per_channel,
    }
    ordered = speed["librapim"] >= speed["neupims"] >= speed["attacc"] >= 1.0
    return _judged(
        ours,
        values,
        all(_within(speed[str(k)], v, 0.15) for k, v in PAPER_SPEEDUP.items()),
        ordered and speed["librapim"] > 1.5,
        "on Table 2's hardware the NPU's FC work dominates every grid point (NPU and PIM "
        "balance only at L = 1.5 d = 18,432 tokens for GPT-3), so overlapping NPU and PIM can "
        "gain at most (X + P) / max(X, P) <= 2x over a serial NPU+AiM and offloading ~1.25x "
        "more; the paper's NeuPIMs 2.95x already exceeds the pipelining bound, so its "
        "baseline or throughput ratio differs from what Table 2 implies; Algorithm 1's "
        "peak-FLOP/s split over-offloads FFN to PIM at small batches (docs/librapim.md). Ours "
        "is the per-bank reading of the offload (4.4 / Fig. 14: one request per bank, a pass "
        "serves 16); the per-channel reading (6.2's 'up to 64 ... in parallel': one request "
        "per channel, each running the layer's whole FFN) makes a pass 6.9x dearer (GPT3-175B, "
        f"tp 8), LibraPIM {per_channel:.2f}x: neither reading closes the gap "
        "(docs/librapim.md, 'Offload readings')",
        tuple(Gap(f"{k} over NPU+AiM", speed[str(k)], v) for k, v in PAPER_SPEEDUP.items()),
    )


def _lp_fig20() -> Measured:
    from pimphony.sim.experiments.librapim_figs.utilisation import FIG20_PAPER, sweep
    from pimphony.sim.systems.base import SystemKind

    paper = FIG20_PAPER["at_longest"]
    got, lib_other = {}, {}
    for reading in _OFFLOAD_READINGS:
        rows = sweep(_LP_FIG20_MODEL, (128,), (4096,), tuple(paper), offload=reading)
        util = {r["system"]: {"pim": r["util_pim_mac"], "npu": r["util_xpu"]} for r in rows}
        if reading == OffloadReading.PER_BANK:
            got = util
        else:
            lib_other = util[SystemKind.LIBRAPIM]
    ours = (
        ", ".join(
            f"{s} PIM {100 * got[s]['pim']:.1f}% / NPU {100 * got[s]['npu']:.1f}% "
            f"({100 * p['pim']:.0f}% / {100 * p['npu']:.0f}%)"
            for s, p in paper.items()
        )
        + f" -- ours (paper); --offload per-channel: librapim PIM {100 * lib_other['pim']:.1f}% "
        f"/ NPU {100 * lib_other['npu']:.1f}%"
    )
    values = {str(s): v for s, v in got.items()} | {"librapim_per_channel": lib_other}
    lib, others = got[SystemKind.LIBRAPIM], [got[s] for s in paper if s != SystemKind.LIBRAPIM]
    # Within 5 points of every one of the six utilisations.
    busiest = all(lib[k] > o[k] for o in others for k in ("pim", "npu"))
    return _judged(
        ours,
        values,
        all(abs(got[s][k] - p[k]) <= 0.05 for s, p in paper.items() for k in ("pim", "npu")),
        busiest,
        "LibraPIM's PIM is the busiest of the three, as in the paper, but its NPU is not: on "
        "Table 2's peak rates the NPU is the bottleneck of every system (NPU and PIM balance "
        "only at about 18,400 tokens), so NeuPIMs' NPU is busy 97% and batch pipelining hides "
        "its PIM; Algorithm 1 sizes DBO's offload with PIM's peak while the shared-weight FFN "
        "costs a whole pass per 16 requests, so LibraPIM's PIM is overloaded (80%) and its NPU "
        "waits; our AttAcc co-processes FFN GEMVs on conflict-free banks, keeping both devices "
        "busy where the paper's AttAcc NPU idles (13%) (docs/librapim.md, Fig. 20); the "
        "per-channel offload reading moves only LibraPIM's pair",
        tuple(
            Gap(f"{s} {k.upper()}", 100 * got[s][k], 100 * p[k], Unit.PERCENT)
            for s, p in paper.items()
            for k in ("pim", "npu")
        ),
    )


def _lp_fig21() -> Measured:
    import argparse

    from pimphony.sim.experiments.librapim_figs.fig21 import fig21_summary, run_fig21
    from pimphony.sim.systems.base import SystemKind

    gains = {}
    for reading in _OFFLOAD_READINGS:
        args = argparse.Namespace(
            model=_LP_FIG20_MODEL, batches=(256,), contexts=(512,),
            systems=(SystemKind.LIBRAPIM_NO_DBO, SystemKind.LIBRAPIM), sizes=_LP_FIG21_SIZES,
            vector_scaling="width", groups=2, tp=8, offload=reading,
        )  # fmt: skip
        cells = fig21_summary(run_fig21(args))
        gains[reading] = {c["array"]: c["dbo_gain"] for c in cells.values()}
    gain, other = gains[OffloadReading.PER_BANK], gains[OffloadReading.PER_CHANNEL]
    ours = (
        ", ".join(f"{a}x{a} {g:.2f}x" for a, g in gain.items())
        + " (DBO gain, batch 256); --offload per-channel: "
        + ", ".join(f"{a}x{a} {g:.2f}x" for a, g in other.items())
    )
    values = {str(a): g for a, g in gain.items()} | {
        "per_channel": {str(a): g for a, g in other.items()}
    }
    small, large = gain[_LP_FIG21_SIZES[0]], gain[_LP_FIG21_SIZES[-1]]
    # "Notable" gains at 32 and 64 (above 10%), little at 128 (within 10% of none).
    return _judged(
        ours,
        values,
        gain[32] > 1.1 and gain[64] > 1.1 and abs(large - 1) <= 0.1,
        small > 1.1 and large < small,
        "DBO helps most on the slowest NPU (32 x 32, where PIM's 16.4 TFLOP/s is a real "
        "addition), but from 64 x 64 up it costs 12-18%: Algorithm 1 sizes m with peak rates "
        "as if PIM's FFN time grew per request, while in the Fig. 14 mode it grows per pass "
        "of 16 requests, so even m = 1 costs a full pass and makes PIM the bottleneck; the "
        "paper's 'insufficient for offloading' at 128/256 suggests its DBO then moves nothing, "
        "a threshold Algorithm 1 as printed does not have (docs/librapim.md, Fig. 21); the "
        "per-channel reading makes every offload dearer still",
    )


def _lp_fig22() -> Measured:
    from pimphony.sim.experiments.librapim_energy import fig22, summary
    from pimphony.sim.systems.base import SystemKind

    rows = fig22()
    mean = summary(rows)
    other = summary(fig22(offload=OffloadReading.PER_CHANNEL))[SystemKind.LIBRAPIM]
    ratio = [r["systems"][SystemKind.LIBRAPIM]["vs_neupims"] for r in rows]
    lib, no_dbo = mean[SystemKind.LIBRAPIM], mean[SystemKind.LIBRAPIM_NO_DBO]
    ours = (
        f"LibraPIM {lib:.2f}x NeuPIMs' energy on average ({ratio[0]:.2f}x at "
        f"{rows[0]['context']} -> {ratio[-1]:.2f}x at {rows[-1]['context']}); without DBO "
        f"{no_dbo:.2f}x; --offload per-channel: LibraPIM {other:.2f}x"
    )
    values = {
        "mean_vs_neupims": {str(s): v for s, v in mean.items()},
        "per_context": ratio,
        "librapim_per_channel": other,
    }
    similar, shrinking = abs(no_dbo - 1) <= 0.05, ratio[-1] < ratio[0]
    return _judged(
        ours,
        values,
        _within(lib - 1, 0.20, 0.25) and similar and shrinking,
        lib > 1 and similar and shrinking,
        "the direction, the equality without DBO and the shrinking overhead are the paper's; "
        "the size is 5x: an all-bank MAC of the Fig. 14 mode reads a column of each of 16 "
        "banks for 16 x m useful MACs (7.85 pJ per MAC at m = 15, against the NPU's 0.32) and "
        "the offload saves the NPU no DRAM traffic; DBO over-offloads for the reason of the "
        "LP-fig20 row; the paper gives no per-operation energy (docs/energy.md, Fig. 22); "
        "the per-channel reading runs each request's whole FFN on one channel, dearer again",
        (
            Gap("LibraPIM over NeuPIMs, mean", lib, 1.20),
            Gap("without DBO", no_dbo, 1.00, Unit.VALUE),
        ),
    )


@_per_cost_model
def _dcc_rows(figure: str, panels: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """``pimphony dcc-figs`` rows of one figure (its default back end), run once."""
    from pimphony.sim.experiments.dcc_figs import Figure, figure_rows

    return figure_rows(Figure(figure), panels)


#: DCC Fig. 7's element-wise panels (the row of DCC over the default).
_FIG7_ELEMENTWISE = ("RED", "VA", "RELU")


def _dcc_fig7_elementwise() -> Measured:
    from pimphony.sim.experiments.dcc_figs import PAPER, Figure, summary

    panels = _FIG7_ELEMENTWISE
    got = summary(Figure.FIG7, _dcc_rows(Figure.FIG7, panels))
    paper = PAPER[Figure.FIG7]
    key = "{}_dcc_over_default_geomean"
    ours = (
        ", ".join(f"{p} {got[key.format(p)]:.2f}x ({paper[key.format(p)]:.2f}x)" for p in panels)
        + " -- DCC over the default mapping, geomean of 9 points each, ours (paper)"
    )
    values = {p: {k: got[f"{p}_{k}"] for k in ("dcc_over_default_geomean",
              "dcc_over_gpu_geomean", "default_over_gpu_geomean")} for p in panels}  # fmt: skip
    return _judged(
        ours,
        values,
        all(_within(got[key.format(p)], paper[key.format(p)], 0.15) for p in panels),
        all(got[key.format(p)] > 1 for p in panels),
        "DCC beats HBM-PIM's default on every kernel, by other amounts: DCC spreads a tensor "
        "over 64 pseudo-channels, one round per unit, so its time is mostly the fixed cost "
        "of starting a PIM kernel (414-466 cycles), while the default keeps each batch row on "
        "one pseudo-channel (DCC V: batches across channels), whose rounds and 19.2 GB/s bus "
        "grow with the tensor; the paper's default instead scales with the batch (its "
        "speedup over the GPU is the same at batch 1, 2 and 4). Over our GPU (a launch and a "
        "DRAM latency per kernel, docs/xpu.md) DCC gives "
        + ", ".join(
            f"{p} {got[f'{p}_dcc_over_gpu_geomean']:.2f}x "
            f"({paper[f'{p}_dcc_over_gpu_geomean']:.2f}x)"
            for p in panels
        )
        + " -- ours (paper) (docs/dcc.md, Fig. 7)",
        tuple(Gap(p, got[key.format(p)], paper[key.format(p)]) for p in panels),
    )


def _dcc_fig6() -> Measured:
    from pimphony.sim.experiments.dcc_figs import PAPER, Figure, panel, summary

    rows = _dcc_rows(Figure.FIG6)
    got = summary(Figure.FIG6, rows)
    paper = PAPER[Figure.FIG6]
    names = {"ATTN": "ATTN_", "GEMV": "", "RED": "RED_"}
    key = "{}dcc_over_default_geomean"
    ours = (
        ", ".join(f"{p} {got[key.format(k)]:.2f}x ({paper[key.format(k)]:.2f}x)"
                  for p, k in names.items())
        + " -- DCC over AttAcc's default mapping, geomean of 8 / 8 / 6 points, ours (paper)"
    )  # fmt: skip
    values = {p: {q: got[f"{k}{q}"] for q in ("dcc_over_default_geomean",
              "dcc_over_gpu_geomean", "default_over_gpu_geomean")}
              for p, k in names.items()}  # fmt: skip
    return _judged(
        ours,
        values,
        all(_within(got[key.format(k)], paper[key.format(k)], 0.15) for k in names.values()),
        all(got[key.format(k)] > 1.005 for k in names.values()),
        "DCC beats the default on average on every kernel, by less than the paper (per point "
        + ", ".join(
            f"{p} {_spread([r for r in rows if panel(r) == p], 'dcc_over_default')}" for p in names
        )
        + "): at batch 1 the default leaves 48 of 80 channels idle and DCC spreads a head's "
        "outputs (GEMV) or tokens (ATTN, the split softmax combined by the host) over them; "
        "where every channel works the all-bank MACs leave only the bank split, and the "
        "predicted search at budget 300 can miss the default's draft; RED spreads a row's N "
        "over 64 channels against the default's one channel of 64 banks. Both mappings' host "
        "steps pay the GPU's launch and DRAM latency per kernel (docs/xpu.md), a fixed cost "
        "that dilutes every gain (compare `pimphony --no-kernel-costs dcc-figs --figure "
        "fig6`; docs/dcc.md, Fig. 6)",
        tuple(Gap(p, got[key.format(k)], paper[key.format(k)]) for p, k in names.items()),
    )


def _dcc_fig2_attacc() -> Measured:
    from pimphony.sim.experiments.dcc_figs import PAPER, Figure, figure_rows, summary

    rows = figure_rows(Figure.FIG2, backend="attacc")
    got = summary(Figure.FIG2, rows)
    paper = PAPER[Figure.FIG2]
    per = {
        k: statistics.geometric_mean(
            [r["dcc_over_compute_centric"] for r in rows if r["kernel"] == k]
        )
        for k in ("RED", "GEMV")
    }
    ours = (
        f"B over T {got['speedup_geomean']:.2f}x ({paper['speedup_geomean']:.2f}x), "
        f"rearrangement {got['rearrangement_share_T']:.1%} of T's time "
        f"({paper['rearrangement_share_T']:.2%}); RED {per['RED']:.2f}x, GEMV "
        f"{per['GEMV']:.2f}x -- ours (paper), geomean of 4 points each"
    )
    values = {**got, "RED_speedup_geomean": per["RED"], "GEMV_speedup_geomean": per["GEMV"]}
    return _judged(
        ours,
        values,
        _within(got["speedup_geomean"], paper["speedup_geomean"], 0.15)
        and _within(got["rearrangement_share_T"], paper["rearrangement_share_T"], 0.15),
        got["speedup_geomean"] > 1 and got["rearrangement_share_T"] > 0.5,
        "rearrangement dominates the compute-centric choice and the end-to-end choice beats "
        "it, as in the paper, but on GEMV only: at batch 16 the fastest compute splits the "
        "batch over 8 channels and so copies W 8 times (per point "
        f"{_spread(rows, 'dcc_over_compute_centric', kernel='GEMV')}), while every RED draft "
        "moves its one input once over all channels (per point "
        f"{_spread(rows, 'dcc_over_compute_centric', kernel='RED')}; the paper's 1.04-1.62x "
        "is not explained by its text); AttAcc's compute is a small part of RED's time, so "
        "rearrangement is a larger share than the paper's (docs/dcc.md, Fig. 2 on AttAcc)",
        (
            Gap("B over T", got["speedup_geomean"], paper["speedup_geomean"]),
            Gap(
                "rearrangement share of T",
                100 * got["rearrangement_share_T"],
                100 * paper["rearrangement_share_T"],
                Unit.PERCENT,
            ),
        ),
    )


def _spread(rows: list[dict[str, Any]], key: str, **match: Any) -> str:
    """``lo-hi x``: the range of ``key`` over the rows whose fields equal ``match``."""
    xs = [r[key] for r in rows if all(r.get(k) == v for k, v in match.items()) and r[key]]
    return f"{min(xs):.2f}-{max(xs):.2f}x"


def _dcc_over_gpu(figure: str, rows: list[dict[str, Any]], best: float, mean: float) -> Measured:
    """DCC's headline over the GPU on one back end: the best point and the geomean over every
    point of its figure (the paper's 'average': its figure's bars give it); per kernel, the
    figure's own summary and the paper's."""
    from pimphony.sim.experiments.dcc_figs import PAPER, Figure, panel, summary

    fig = Figure(figure)
    got = summary(fig, rows)
    top = max(rows, key=lambda r: r["dcc_over_gpu"])
    kernels = list(dict.fromkeys(panel(r) for r in rows))
    key = {p: f"{'' if p == 'GEMV' else p + '_'}dcc_over_gpu_geomean" for p in kernels}
    values = {
        "best": top["dcc_over_gpu"],
        "best_point": f"{panel(top)} {top['shape']}",
        "geomean": statistics.geometric_mean([r["dcc_over_gpu"] for r in rows]),
        "points": len(rows),
        "per_kernel": {p: got[key[p]] for p in kernels},
    }
    return _dcc_over_gpu_judged(values, best, mean, {p: PAPER[fig][key[p]] for p in kernels})


def _dcc_over_gpu_judged(
    values: dict[str, Any], best: float, mean: float, paper: dict[str, float]
) -> Measured:
    """:func:`_dcc_over_gpu`'s verdict from its values; ``paper``: the paper's geomean over
    the GPU per kernel."""
    per = values["per_kernel"]
    slow = [p for p, v in per.items() if v < 1]
    ours = (
        f"up to {values['best']:.2f}x ({values['best_point']}), geomean "
        f"{values['geomean']:.2f}x over {values['points']} points; per kernel "
        + ", ".join(f"{p} {v:.2f}x" for p, v in per.items())
    )
    return _judged(
        ours,
        values,
        _within(values["best"], best, 0.15) and _within(values["geomean"], mean, 0.15),
        values["geomean"] > 1,
        "per kernel, ours (paper's geomean): "
        + ", ".join(f"{p} {v:.2f}x ({paper[p]:.2f}x)" for p, v in per.items())
        + (
            f"; {', '.join(slow)} slower than our GPU (a launch and a DRAM latency per kernel, "
            "docs/xpu.md): their inputs are rearranged per call, and reading them once at "
            "host bandwidth costs about what the GPU kernel does (docs/dcc.md, Fig. 7)"
            if slow
            else ""
        ),
        (Gap("best", values["best"], best), Gap("geomean", values["geomean"], mean)),
    )


def _dcc_over_gpu_hbm_pim() -> Measured:
    from pimphony.sim.experiments.dcc_figs import Figure

    rows = _dcc_rows(Figure.FIG7, ("GEMV",)) + _dcc_rows(Figure.FIG7, _FIG7_ELEMENTWISE)
    return _dcc_over_gpu(Figure.FIG7, rows, 7.68, 2.7)


def _dcc_over_gpu_attacc() -> Measured:
    from pimphony.sim.experiments.dcc_figs import Figure

    return _dcc_over_gpu(Figure.FIG6, _dcc_rows(Figure.FIG6), 13.17, 5.75)


@functools.cache
def _fig8_pim():
    """DCC Fig. 8's PIM kernel times on the ``attacc`` back end (searched per shape as the run
    meets it, ~30 min). Deliberately one for both cost models: the row's second measurement
    without per-kernel costs moves the GPU, not DCC's drafts."""
    from pimphony.models.backends import load_backend
    from pimphony.sim.experiments.dcc_fig8 import FIG8_BACKEND
    from pimphony.sim.systems.attacc_gpu import PimTimes

    return PimTimes(load_backend(FIG8_BACKEND))


#: Why the D-fig8 row differs (docs/dcc.md, Fig. 8).
_DCC_FIG8_MECHANISM = (
    "every AttAcc system beats the GPU at every run and Full + DCC is the fastest, as in "
    "the paper; Full + DCC overshoots most at batch 1: with DCC, QKV and projection run on "
    "PIM, where our AttAcc GEMV at batch 1 is ~12x the GPU (80 channels x 64 banks of MAC "
    "bandwidth, 35.5 TB/s, against the A100's 1.73 TB/s) and the paper reports 3.2-3.6x "
    "(DCC V-B; docs/dcc.md, Fig. 8); the paper's 4.88x is the geomean of its 12 Full + "
    "DCC bars"
)


def _dcc_fig8() -> Measured:
    from pimphony.sim.experiments.dcc_fig8 import PAPER, fig8, summary
    from pimphony.sim.systems.base import SystemKind

    rows = fig8(pim=_fig8_pim())
    full = [r["systems"][SystemKind.ATTACC_FULL_DCC]["speedup_over_gpu"] for r in rows]
    paper_full = [p[3] for p in PAPER.values()]
    best, mean = max(full), statistics.geometric_mean(full)
    means = summary(rows)["speedup_over_gpu"]
    lowest = min(r["systems"][s]["speedup_over_gpu"] for r in rows for s in list(means))
    ours = (
        f"AttAcc Full + DCC over the GPU: up to {best:.2f}x, geomean {mean:.2f}x over the 12 "
        f"runs; means: " + ", ".join(f"{s} {v:.2f}x" for s, v in means.items())
    )
    return _judged(
        ours,
        {"full_dcc_over_gpu": full, "best": best, "geomean": mean, "means": means},
        _within(best, max(paper_full), 0.15) and _within(mean, 4.88, 0.15),
        lowest > 1.0
        and all(
            r["systems"][SystemKind.ATTACC_FULL_DCC]["seconds"]
            < min(r["systems"][s]["seconds"] for s in means if s != SystemKind.ATTACC_FULL_DCC)
            for r in rows
        ),
        _DCC_FIG8_MECHANISM,
        (Gap("up to", best, 7.71), Gap("geomean", mean, 4.88)),
    )


def _dcc_fig10() -> Measured:
    from pimphony.sim.experiments.dcc_figs import Figure, panel

    # the same runs as the D-fig6, D-fig7 and D-over-gpu rows (cached)
    rows = [
        *_dcc_rows(Figure.FIG6),
        *_dcc_rows(Figure.FIG7, ("GEMV",)),
        *_dcc_rows(Figure.FIG7, _FIG7_ELEMENTWISE),
    ]
    gain = {}
    for label, kernels in (
        ("VA / RED / RELU", ("VA", "RED", "RELU")),
        ("GEMV / ATTN", ("GEMV", "ATTN")),
    ):
        xs = [r["dcc_over_default"] for r in rows if panel(r) in kernels and r["dcc_over_default"]]
        gain[label] = statistics.geometric_mean(xs)
    heavy, light = gain["VA / RED / RELU"], gain["GEMV / ATTN"]
    ours = (
        f"DCC over the default: VA / RED / RELU {heavy:.2f}x, GEMV / ATTN {light:.2f}x "
        "(geomean over every Fig. 6 and 7 point, both back ends)"
    )
    return _judged(
        ours,
        gain,
        _within(heavy, 1.70, 0.15) and _within(light, 1.18, 0.15),
        heavy > light > 1.0,
        "the paper's Fig. 10 takes two batch sizes of each kernel and gives no sizes; ours "
        "is every point of Figs. 6 and 7 (the D-fig6 and D-fig7 rows give the per-kernel "
        "gains and why RED's exceeds the paper's); the compute / rearrangement split of "
        "DCC's gain (1.73x / 1.79x) is not separated by our reports",
        (
            Gap("VA / RED / RELU", heavy, 1.70),
            Gap("GEMV / ATTN", light, 1.18),
        ),
    )


def _dcc_table2() -> Measured:
    from pimphony.sim.experiments.dcc_table2 import PAPER_OVERALL, Table2Row, evaluate, overall

    results, _ = evaluate(tuple(Table2Row), progress=False)
    total = overall(results)
    acc = 100 * total["accuracy"]
    sub = 100 * (total["suboptimal"] or 1.0)
    tested = sum(r.total for r in results)
    ours = (
        f"the predictor picks the best draft in {acc:.1f}% of {tested} test configurations; "
        f"its other picks run at {sub:.2f}% of the best (geomean)"
    )
    p_acc, p_sub = 100 * PAPER_OVERALL["accuracy"], 100 * PAPER_OVERALL["suboptimal"]
    return _judged(
        ours,
        {"accuracy": acc, "suboptimal": sub, "rows": [r.to_json() for r in results]},
        abs(acc - p_acc) <= 5 and abs(sub - p_sub) <= 2,
        acc >= 50 and sub >= 90,
        "8 test configurations per row (56) where the paper has 167-304, so one near-tie is "
        "12.5 points of a row; the reference is the best pruned draft, not the exhaustive "
        "best; most misses are within 1% of the best (drafts a regressor with a 1.5-5% error "
        "cannot rank); the training-draft count is swept in docs/dcc.md (Table II shape)",
        (
            Gap("picks the best", acc, p_acc, Unit.PERCENT),
            Gap("suboptimal picks, of the best", sub, p_sub, Unit.PERCENT),
        ),
    )


def _dcc_fig9_attacc() -> Measured:
    from pimphony.sim.experiments.dcc_figs import PAPER, Figure, figure_rows, summary

    rows = figure_rows(Figure.FIG9, backend="attacc")
    got = summary(Figure.FIG9, rows)
    paper = PAPER[Figure.FIG9]
    keys = [f"attacc_b{b}" for b in (1, 2, 4, 8)]
    ours = (
        " -> ".join(f"B{k[-1]} {got[k]:.2f}x" for k in keys)
        + f" (paper {' -> '.join(f'{paper[k]:.2f}x' for k in keys)}) -- DCC over AttAcc's "
        "default on GEMV, 32 heads, geomean over 512-4,096 outputs"
    )
    values = {k: got[k] for k in keys}
    return _judged(
        ours,
        values,
        all(_within(got[k], paper[k], 0.15) for k in keys),
        got[keys[-1]] > got[keys[0]] and all(got[k] > 1 for k in keys),
        "our gain is largest at batch 1, where the default puts 32 heads on 32 of 80 "
        "channels and DCC spreads the outputs over the idle ones; at batch 2 (64 heads) the "
        "predicted search can miss the default's draft (per point "
        f"{_spread(rows, 'dcc_over_default', batch=2)}); from batch 4 every channel works "
        "under both and the gain is the bank split's (per point "
        f"{_spread(rows, 'dcc_over_default', batch=4)} at batch 4, "
        f"{_spread(rows, 'dcc_over_default', batch=8)} at 8); the paper's grows with the "
        "batch and falls with the outputs: its bars fit 1 + c/T within 0.023 with c = 151 -> "
        "378 token-equivalents from batch 1 to 8, a fixed per-head cost of its default "
        "(docs/dcc.md, Fig. 9)",
        tuple(Gap(f"batch {k[-1]}", got[k], paper[k]) for k in keys),
    )


#: PIM-SHERPA's host and input lengths of Figs. 10 and 12 (the grid of Fig. 12: input and
#: output 64-192).
_SHERPA_HOST = "galaxy-s24plus"
_SHERPA_SLS = (64, 96, 128, 160, 192)
_SHERPA_OUTS = (64, 128, 192)


@functools.cache
def _sherpa_timing(model: str, outs: tuple[int, ...] = (1,)) -> dict[str, Any]:
    """``pimphony sherpa --model MODEL --sl 64,96,128,160,192 --out-len OUTS`` (seconds)."""
    from pimphony.compiler.llm import load_model
    from pimphony.sim.experiments.sherpa import timing

    return timing(load_model(model), _SHERPA_HOST, list(_SHERPA_SLS), list(outs))


def _sherpa_fig10() -> Measured:
    ratio = {}  # (model, strategy, SL) -> TTFT over FACIL-O's
    for model in ("llama-3.2-1b", "llama-3.2-3b"):
        for row in _sherpa_timing(model)["rows"]:
            st = row["strategies"]
            for k in ("ddb", "owr"):
                ratio[(model, k, row["sl"])] = st[k]["ttft_s"] / st["facil"]["ttft_s"]
    tps = 192 / _sherpa_timing("llama-3.2-3b")["rows"][-1]["strategies"]["owr"]["ttft_s"]
    ddb_long = max(ratio[(m, "ddb", sl)] for m, _, sl in ratio if sl >= 128)
    owr = {
        m: [ratio[(m, "owr", sl)] for sl in _SHERPA_SLS] for m in ("llama-3.2-1b", "llama-3.2-3b")
    }
    ours = (
        f"S-DDB / FACIL-O TTFT at SL 128-192: at most {ddb_long:.3f} (1B and 3B); S-OWR / "
        "FACIL-O over SL 64-192: "
        + "; ".join(f"{m} " + " -> ".join(f"{x:.2f}" for x in xs) for m, xs in owr.items())
        + f"; 3B S-OWR at SL 192 {tps:.1f} TPS"
    )
    falling = all(a > b for xs in owr.values() for a, b in itertools.pairwise(xs))
    return _judged(
        ours,
        {f"{m} {k} {sl}": v for (m, k, sl), v in ratio.items()} | {"owr_tps_3b_192": tps},
        ddb_long <= 1.02 and falling and _within(tps, 16.7, 0.15),
        ddb_long <= 1.05 and falling,
        "S-DDB within 2% of FACIL-O from SL 128 and S-OWR approaching as SL grows are the "
        "paper's; the absolute TTFT is faster than measured (our GEMM at 80% of the four "
        "threads' peak, the paper's at 84-107 GFLOP/s; SMC 0.34 s against the measured 0.89 "
        "s for 1B), hence S-OWR's 3B rate above 16.7 TPS (docs/sherpa.md, TTFT)",
        (Gap("3B S-OWR tokens/s at SL 192", tps, 16.7, Unit.VALUE),),
    )


def _sherpa_fig12() -> Measured:
    t = _sherpa_timing("llama-3.2-1b", _SHERPA_OUTS)["end_to_end"]
    owr_best = max(c["owr"]["speedup"] for c in t)
    gap = {  # S-DDB below FACIL-O, percent, by input length
        sl: max(100 * (1 - c["ddb"]["speedup"] / c["facil"]["speedup"]) for c in t if c["sl"] == sl)
        for sl in _SHERPA_SLS
    }
    long_gap = max(v for sl, v in gap.items() if sl > 128)
    short = (min(gap[64], gap[96]), max(gap[64], gap[96]))
    ours = (
        f"S-OWR up to {owr_best:.2f}x over host-only; S-DDB below FACIL-O by at most "
        f"{long_gap:.1f}% for input > 128 and {short[0]:.1f}-{short[1]:.1f}% at input 64-96 "
        "(Llama 3.2 1B, output 64-192)"
    )
    return _judged(
        ours,
        {"owr_best": owr_best, "ddb_below_facil_pct": {str(k): v for k, v in gap.items()}},
        _within(owr_best, 3.3, 0.15) and long_gap <= 1.0 and _within(short[1], 19, 0.5),
        owr_best > 1 and long_gap <= 1.0 and short[1] > long_gap,
        "the shape is the paper's (nearly identical for input > 128, S-DDB's gap larger at "
        "64-96, S-OWR's gap narrowing); S-DDB's short-input gap is smaller because our SMC "
        "is 2.6x faster than measured, and the speed-ups higher because our PIM decode is "
        "5.5x the host's (docs/sherpa.md, Fig. 12)",
        (
            Gap("S-OWR up to", owr_best, 3.3),
            Gap("S-DDB below FACIL-O at input 64-96, up to", short[1], 19.0, Unit.PERCENT),
        ),
    )


def _sherpa_fig13() -> Measured:
    rows = _sherpa_timing("llama-3.2-3b")["rows"]
    nc = {r["sl"]: r["fig13"] for r in rows if r["fig13"]["paper_nc_gemm_s"]}
    tps = {sl: sl / f["nc_gemm_s"] for sl, f in nc.items()}
    ours = (
        ", ".join(
            f"SL {sl}: NC-GEMM {f['nc_gemm_s']:.2f} s (paper {f['paper_nc_gemm_s']:.0f} s), "
            "C-GEMM "
            f"{f['c_gemm_s']:.2f} s"
            for sl, f in nc.items()
        )
        + f" (so NC-GEMM {min(tps.values()):.1f}-{max(tps.values()):.1f} TPS; paper about 0.4)"
    )
    steady = max(tps.values()) / min(tps.values()) <= 1.1
    slower = all(f["nc_gemm_s"] > f["c_gemm_s"] for f in nc.values())
    return _judged(
        ours,
        {str(sl): f for sl, f in nc.items()},
        all(_within(f["nc_gemm_s"], f["paper_nc_gemm_s"], 0.15) for f in nc.values()),
        steady and slower,
        "NC-GEMM's time proportional to SL at a constant rate, far above C-GEMM, is the "
        "paper's; the level is 14x off: the paper's NC-GEMM reads 2.2-2.4 GB/s, latency-bound "
        "uncached loads, while our copy-speed model describes streaming copies (the core's "
        "outstanding misses and load latency are not given; docs/sherpa.md, Fig. 13)",
        tuple(
            Gap(f"NC-GEMM s at SL {sl}", f["nc_gemm_s"], f["paper_nc_gemm_s"], Unit.VALUE)
            for sl, f in nc.items()
        ),
    )


def _sherpa_fig9() -> Measured:
    from pimphony.compiler.llm import load_model
    from pimphony.models.layout import load_layout
    from pimphony.sim.experiments.sherpa import capacity

    layout = load_layout("lpddr5x-pim")
    paper = {
        ("llama-3.2-1b", "facil"): 49.2, ("llama-3.2-1b", "ddb"): 47.8,
        ("llama-3.2-1b", "owr"): 48.5, ("llama-3.2-3b", "ddb"): 49.4,
        ("llama-3.2-3b", "owr"): 49.7,
    }  # fmt: skip
    got = {}
    for model in ("llama-3.2-1b", "llama-3.2-3b"):
        r = capacity(load_model(model), layout)["strategies"]
        for m, k in paper:
            if m == model:
                got[(m, k)] = 100 * r[k]["saving_vs_wd"]
    ours = ", ".join(f"{m} {k}: {v:.1f}% (paper {paper[(m, k)]}%)" for (m, k), v in got.items())
    values = {f"{m} {k}": v for (m, k), v in got.items()}
    # Within half a percentage point of every saving the paper states.
    return _judged(
        ours,
        values,
        all(abs(got[k] - paper[k]) <= 0.5 for k in paper),
        False,
        "the PIM-aware padding (K/V and LM head to 1,024-row multiples: 70 MB for 1B vs the "
        "paper's 80 MB) or the buffer rule differ (docs/sherpa.md)",
        tuple(Gap(f"{m} {k}", v, paper[(m, k)], Unit.PERCENT) for (m, k), v in got.items()),
    )


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "P-fig7", "PIMphony", "Fig. 7",
        "DCS issues MACs ahead of unrelated I/O: the example takes 34 cycles statically and 22 "
        "with DCS",
        "a GEMV command stack through GB entries 0/1/2 (size and latencies not given)",
        "pimphony run --kernel gemv --dout 16 --din 96 --sched static|dcs --preset X.toml "
        "(extends = \"pimphony-cent\"; gbuf_entries 4, obuf_entries 2)", _fig7,
    ),
    Claim(
        "P-fig8", "PIMphony", "Fig. 8",
        "static scheduling: MAC utilisation drops to 14.7% at dimension 128, and falls as "
        "the dimension falls",
        "a GEMV sweep over dimensions (the other dimension and timing not given)",
        "pimphony sweep --kernel qk --preset pimphony-cent --dims 32,64,128,256,512  (QK^T, "
        "T 4096, static)", _fig8,
    ),
    Claim(
        "P-fig4", "PIMphony", "Fig. 4 / II",
        "conventional PIM systems are underutilised: MAC utilisation drops by 48% at a 32K "
        "context",
        "the baseline (CENT: HFP, static scheduling and memory); context range not given",
        "pimphony decode --model llm-7b --context 1024|...|32768 --batch auto --partition hfp "
        "--sched static --memory static --preset pimphony-cent --modules 8, best --tp x --pp",
        _pimphony_fig4,
    ),
    Claim(
        "P-fig18", "PIMphony", "Fig. 18",
        "DCS over ping-pong: up to 1.4x MAC utilisation at the same total buffer size",
        "attention, MHA and GQA g = 2, 4, 8, row-reuse mapping (size, model, T not given)",
        "pimphony run --kernel qk --tokens 4096 --dh 128 --gqa-group G --sched pingpong|dcs "
        "--preset pimphony-cent", _fig18_preset,
    ),
    Claim(
        "P-fig18-small", "PIMphony", "Fig. 18 (sensitivity)",
        "the same, with 'smaller per-region buffers' for ping-pong",
        "as above",
        "pimphony buffer-sweep  (OBuf 4 and 8 entries per bank)", _fig18_small,
    ),
    Claim(
        "P-tcp-thresholds", "PIMphony", "IV-C",
        "TCP activates every channel once T exceeds 256 for QK^T and 32 for SV",
        "16 channels x 16 banks",
        "compiler.plan.partition_attention(..., scheme='tcp') on aim-16ch", _tcp_thresholds,
    ),
    Claim(
        "P-sv-reduction", "PIMphony", "IV-C",
        "SV's cross-channel reduction costs below 0.2% of attention latency",
        "LLM-7B, 16K tokens",
        "pimphony decode --model llm-7b --context 16384 --partition tcp --tp 1|8 --preset "
        "pimphony-cent --ignore-capacity",
        _sv_reduction,
    ),
    Claim(
        "P-576B", "PIMphony", "VII-C",
        "a per-controller 576 B D-Table + S-Table",
        "per PIM controller (channel)",
        "preset pimphony-cent: (gbuf + obuf entries) x (2 IDs + timestamp + is-MAC)", _dstable,
    ),
    Claim(
        "P-dpa-200KB", "PIMphony", "VII-C",
        "the DPA dispatcher needs less than 200 KB for all its buffers",
        "LLM-7B-32K on QMSum, 8 CENT modules",
        "pimphony decode --model llm-7b --workload qmsum --batch auto --tp 8 --memory lazy "
        "--preset pimphony-cent", _dpa_buffers,
    ),
    Claim(
        "P-fig19", "PIMphony", "Fig. 19",
        "capacity utilisation 36.2% static (31.0-40.5%) -> 75.6% with DPA",
        "7B/72B, LongBench and LV-Eval, 128/512 GB",
        "pimphony capacity --requests 256", _fig19,
    ),
    Claim(
        "P-fig13a", "PIMphony", "Fig. 13a",
        "2.1-4.5x throughput with TCP + DCS + DPA over the baseline (non-GQA models)",
        "LLM-7B-32K / 72B-32K, LongBench, 128 / 512 GB, optimal TP/PP",
        "pimphony ablation --requests 32  (LLM-7B-32K, QMSum, 8 x 16 GB)", _fig13a,
        group="ablation",
    ),
    Claim(
        "P-fig13b", "PIMphony", "Fig. 13b",
        "up to 11.3x throughput with TCP + DCS + DPA on the GQA models (LV-Eval)",
        "LLM-7B-128K (g 4) and LLM-72B-128K (g 8), multifieldqa and Loogle-SD, 128 / 512 GB",
        "pimphony ablation --model llama-3.1-8b|llama-3.1-70b --workload multifieldqa|loogle-sd "
        "--modules 8|32 --requests 16|8 --score-overflow gpr-tiles|bank-spill", _fig13b,
        group="ablation",
    ),
    Claim(
        "P-fig9", "PIMphony", "Fig. 9 / V",
        "on GQA, the row-reuse mapping raises DT-GBuf under static scheduling; DCS overlaps "
        "those transfers with MACs, so row reuse yields gains",
        "LLM-72B attention (QK^T and SV), without and with DCS, row-reuse mapping",
        "pimphony run --kernel qk|sv --tokens 4096 --dh 128 --gqa-group 8 --sched static|dcs "
        "--mapping row-reuse|head-serial --preset pimphony-cent",
        _pimphony_fig9,
    ),
    Claim(
        "P-dcs-gqa", "PIMphony", "VIII-B",
        "DCS's gain is especially impactful for GQA models, where it unlocks row-reuse mapping "
        "by overlapping the extra WR_INP with MACs",
        "LLM-7B-32K QMSum (MHA) against LLM-7B-128K-GQA multifieldqa / loogle-sd",
        "pimphony ablation --model llm-7b|llama-3.1-8b --workload qmsum|multifieldqa|loogle-sd "
        "--modules 8 --requests 32|16  (+DCS over +TCP)",
        _dcs_gqa,
        group="ablation",
    ),
    Claim(
        "P-fig14a", "PIMphony", "Fig. 14a",
        "2.1-4.5x throughput with TCP + DCS + DPA on xPU+PIM (non-GQA models)",
        "NeuPIMs (NPU + 32 GB PIM per device), LLM-7B-32K / 72B-32K, LongBench, 128 / 512 GB",
        "pimphony ablation --system xpu+pim --fig14  (llm-7b / llm-72b, QMSum, 4 / 16 x "
        "(neupims-npu + pimphony-neupims), 32 requests)", _fig14a,
        group="fig14",
    ),
    Claim(
        "P-fig14b", "PIMphony", "Fig. 14b",
        "up to 8.4x throughput with TCP + DCS + DPA on xPU+PIM (GQA models, LV-Eval)",
        "NeuPIMs, LLM-7B-128K (g 4) / 72B-128K (g 8), multifieldqa and Loogle-SD, 128 / 512 GB",
        "pimphony ablation --system xpu+pim --fig14  (llama-3.1-8b multifieldqa|loogle-sd on "
        "4 devices, 48 requests; llama-3.1-70b multifieldqa on 8, 16 requests)", _fig14b,
        group="fig14",
    ),
    Claim(
        "P-fig17-1m", "PIMphony", "Fig. 17b",
        "46.6x over CENT at 1M tokens (CENT at 2% utilisation)",
        "LLM-7B-128K-wGQA, 512 GB (32 CENT modules), context 1M",
        "pimphony decode --model llama-3.1-8b-1m --context 1048576 --batch auto --preset "
        "pimphony-cent --partition hfp|auto --sched static|dcs --memory static|lazy "
        "--score-overflow gpr-tiles|bank-spill, best --tp x --pp",
        _fig17_1m,
    ),
    Claim(
        "P-fig17-neupims", "PIMphony", "Fig. 17b",
        "NeuPIMs scales more stably via tensor parallelism, yet PIMphony still delivers 5.0x "
        "at 1M tokens",
        "LLM-7B-128K-wGQA, 512 GB (16 NeuPIMs devices of 32 GB), context 1M",
        "pimphony decode --system xpu+pim --model llama-3.1-8b-1m --context 1048576 --batch "
        "auto --preset pimphony-neupims --partition hfp|auto --sched static|dcs --memory "
        "static|lazy --sub-batches auto, best --tp x --pp of 16 (NPUs: 16 x neupims-npu "
        "tensor parallel, as pimphony ablation --system xpu+pim)",
        _fig17b_neupims, slow=True,
    ),
    Claim(
        "P-fig17-256", "PIMphony", "Fig. 17",
        "2.1x over the baselines even at 256 tokens",
        "LLM-7B-128K-wGQA, 512 GB (system and batch not named)",
        "as above with --model llama-3.1-8b --context 256", _fig17_256,
    ),
    Claim(
        "P-fig15", "PIMphony", "Fig. 15",
        "(a) no GQA: DPA lets PP deliver marginally higher throughput; (b) GQA + DPA: PP "
        "achieves 20% higher throughput",
        "CENT, 128 GB; (a) LLM-7B-32K QMSum, (b) LLM-7B-128K-GQA multifieldqa",
        "pimphony ablation (as Fig. 13a/13b rows): the +DPA step's best split vs TP only",
        _fig15,
        group="ablation",
    ),
    Claim(
        "P-fig17a", "PIMphony", "Fig. 17a",
        "throughput scales with capacity (128-1024 GB)",
        "LLM-7B-128K-wGQA at 64K context, 8-64 CENT modules",
        "pimphony decode --model llama-3.1-8b --context 65536 --batch auto --preset pimphony-cent "
        "--modules 8|16|32|64, best --tp x --pp", _fig17a,
    ),
    Claim(
        "P-fig16", "PIMphony", "Fig. 16 / VIII-C",
        "background energy is 71.5% of the baseline's attention energy and 13.0% with PIMphony; "
        "attention energy falls by up to 3.46x",
        "LLM-7B/72B-32K and -128K-GQA, 128 / 512 GB CENT modules",
        "pimphony energy  (4 requests at the full context, TP 8 x PP 1|4; CENT = HFP + static + "
        "static memory, CENT+PIMphony = auto + DCS + DPA; energy preset aim-cent)", _fig16,
    ),
    Claim(
        "P-fig20", "PIMphony", "Fig. 20",
        "PIMphony beats A100s with flash-decoding + paged attention at the same capacity, "
        "most on non-GQA models; the GPU's FC advantage narrows the gain at 72B; GQA still gains",
        "LLM-7B/72B with and without GQA, 128 / 512 GB, memory-matched A100s",
        "pimphony gpu-fig20  (PIM: 8 / 32 x pimphony-cent, auto + DCS + DPA, best --tp x --pp; "
        "GPU: 2 / 8 x a100-80gb using 64 GB each; QMSum / multifieldqa)", _fig20, gpu=True,
    ),
    Claim(
        "L-fig4", "LoL-PIM", "Fig. 4",
        "DPA raises the average batch by up to 380% over static allocation",
        "Qwen1.5-7B, capacity 80 GB x N with context 4K x N (N = 1-8; assignment not given)",
        "pimphony decode --model llm-7b --context 4096N --batch auto --memory static|lazy "
        "--preset lolpim-aimx --modules 10N", _fig4,
    ),
    Claim(
        "L-fig11", "LoL-PIM", "Fig. 11",
        "DPA improves throughput by up to 1.3x at a fixed TP x PP; splits differ by up to "
        "1.73x with DPA",
        "Qwen1.5-7B on Musique, LoL-PIM (1) with and without (2), several scales",
        "pimphony decode --model llm-7b --workload musique --batch auto --preset lolpim-aimx "
        "--partition itpp --memory static|lazy --tp T --pp P (32 modules)", _fig11,
    ),
    Claim(
        "L-fig9", "LoL-PIM", "Fig. 9(a)",
        "at 1024 GB LoL-PIM outperforms GPU-GDDR by 3.53x and PIM-only by 4.74x (Qwen1.5-7B); "
        "PIM-only beats the GPU-only system at 128 GB",
        "Qwen1.5-7B on QMSum, HotpotQA, Musique; 128-1024 GB; GPUs of Table 7",
        "pimphony gpu-compare --capacities 128,1024  (PIM: lolpim-aimx hfp static | "
        "lolpim-aimx-io itpp pingpong lazy, best --tp x --pp; GPUs: lolpim-gpu-hbm | "
        "lolpim-gpu-gddr6, one per 64 GB)", _fig9, gpu=True,
    ),
    Claim(
        "L-fig9-72b", "LoL-PIM", "Fig. 9(b) / 8.1",
        "at 72B, for capacities 256-1024 GB, LoL-PIM outperforms GPU-GDDR by 8.54x and "
        "PIM-only by 2.65x (the abstract's 'up to 8.54x over multi-GPU')",
        "LLM-72B, qmsum / hotpotqa / musique, 256 / 512 / 1024 GB",
        "pimphony gpu-compare --model llm-72b --capacities 256,512,1024",
        _fig9_72b, slow=True, gpu=True,
    ),
    Claim(
        "L-gpu-pim", "LoL-PIM", "abstract / Figs. 9b, 10b",
        "LoL-PIM outperforms GPU-PIM systems by up to 16.0x (read as standalone LoL-PIM over "
        "the GPU+PIM baseline)",
        "Qwen1.5-7B (128-1024 GB) and 72B (512, 1024 GB), QMSum / HotpotQA / Musique; GPU+PIM "
        "'halving PIM capacity': C / 2 of AiMX modules, C / 2 of GPU-GDDR6s",
        "pimphony gpu-compare --hetero  (and --model llm-72b --capacities 512,1024; gpu+pim: "
        "xpu+pim with lolpim-gpu-gddr6 GPUs and lolpim-aimx modules, hfp static static; best "
        "--tp x --pp, --sub-batches auto)",
        _gpu_pim, slow=True, gpu=True, group="lolpim-hetero",
    ),
    Claim(
        "L-hetero", "LoL-PIM", "8.2 / Figs. 9b, 10b",
        "GPU+LoL-PIM achieves lower throughput than standalone LoL-PIM, but by less than the 2x "
        "internal bandwidth gap",
        "as L-gpu-pim; GPU+LoL-PIM = GPU-GDDR6s + C / 2 of LoL-PIM modules (ITPP, ping-pong, "
        "DPA)",
        "pimphony gpu-compare --hetero  (as L-gpu-pim; gpu+lol-pim is --system gpu+lolpim)",
        _hetero_gap, slow=True, gpu=True, group="lolpim-hetero",
    ),
    Claim(
        "L-fig7a", "LoL-PIM", "Fig. 7a",
        "I/O-aware (ping-pong) buffering cuts latency by 40% (QK^T), 44% (SV), 29% (FFN1), "
        "28% (FFN2)",
        "AiMX, ping-pong with an extra 2 KB GB (model and context not given)",
        "pimphony run --kernel qk|sv|gemv ... --sched static --preset lolpim-aimx | --sched "
        "pingpong --preset lolpim-aimx-io (channel 0's kernels in the decode plan of one "
        "Qwen1.5-7B request at Musique's mean "
        "16,362 tokens, ITPP, TP 1: QK^T 1,024 tokens x d_h 128, SV 16,362 tokens x 16 head "
        "dimensions, FFN1 1,376 x 4,096, FFN2 256 x 11,008)", _fig7a,
    ),
    Claim(
        "L-fig7a-dt", "LoL-PIM", "Fig. 7a / 5",
        "data transfer for the Out-Reg (DT-Out) and the GB (DT-GB) is over 50% of QK^T's and "
        "SV's latency (static, before I/O-aware buffering)",
        "AiMX, static; model and context not given",
        "pimphony run --kernel qk|sv ... --sched static --preset lolpim-aimx  (the L-fig7a "
        "row's QK^T and SV; the breakdown's io_transfer + dependency_stall over cycles)",
        _fig7a_transfer,
    ),
    Claim(
        "L-table8", "LoL-PIM", "Table 8",
        "tokens/s and utilisation of PIM / LoL-PIM (1)(2) / (1)(2)(3): 7B 1833/2455/3668, "
        "15.1/20.2/30.1%; 14B 1309/1737/2553, 15.4/20.5/30.1%; 72B 737/1211/1740, "
        "12.8/21.1/30.3%",
        "Qwen1.5 7B/14B/72B on Musique, 4/5/16 nodes of 8 AiMX modules",
        "pimphony decode --model llm-7b|llm-14b|llm-72b --workload musique --batch auto "
        "--partition hfp|itpp --memory static|lazy --micro-batches auto --sched static "
        "--preset lolpim-aimx | --sched pingpong --preset lolpim-aimx-io, best --tp x --pp",
        _table8,
    ),
    Claim(
        "LP-fig19", "LibraPIM", "Fig. 19 / 6.2",
        "LibraPIM averages 6.2x over NPU+AiM, 4.4x over AttAcc and 2.1x over NeuPIMs "
        "(so AttAcc 1.41x and NeuPIMs 2.95x over NPU+AiM)",
        "GPT3-175B and Llama3-70B, batch 32-384, input 16-4096, Table 2's NPU + HBM2-PIM",
        "pimphony librapim-fig19 --batches 32,128,384 --contexts 16,256,4096  (9 of the 25 "
        "points per model; tp 8, 2 batch groups, dcs), and again with --offload per-channel",
        _lp_fig19,
    ),
    Claim(
        "LP-fig20", "LibraPIM", "Fig. 20 / 6.3",
        "at input 4,096 (batch 128) LibraPIM keeps PIM 38% and the NPU 77% busy, against "
        "NeuPIMs' 21% / 62% and AttAcc's 6% / 13%",
        "batch 128, input 16-4096, Table 2's NPU + HBM2-PIM (model not named)",
        "pimphony librapim-figs --figure fig20 --contexts 4096  (GPT3-175B, tp 8, 2 batch "
        "groups; PIM = MAC-issue utilisation, NPU = useful FLOP/s over peak), and again with "
        "--offload per-channel", _lp_fig20,
    ),
    Claim(
        "LP-fig21", "LibraPIM", "Fig. 21 / 6.4",
        "at batch 256 DBO gives notable gains with 32x32 and 64x64 systolic arrays and little "
        "at 128x128 and 256x256",
        "batch 256 (and small batches), input 512, 8 arrays of 32-256 per NPU",
        "pimphony librapim-figs --figure fig21 --batches 256 --sizes 32,64,128  (GPT3-175B, "
        "tp 8; vector lanes scale with the array width), and again with --offload per-channel",
        _lp_fig21,
    ),
    Claim(
        "LP-fig22", "LibraPIM", "Fig. 22 / 6.5",
        "with DBO LibraPIM uses ~20% more energy than NeuPIMs on average, most at short "
        "inputs; without DBO about the same",
        "Llama3-70B, batch 128, input lengths 16-4096 (DRAM energy per JEDEC, values not given)",
        "pimphony librapim-energy  (batch 128, input 16, 64, 256, 1024, 4096; energy preset "
        "hbm-pim on librapim-hbm2; NPU 0.16 pJ/FLOP), and again with --offload per-channel",
        _lp_fig22,
    ),
    Claim(
        "D-fig7", "DCC", "Fig. 7 / V-A",
        "DCC improves HBM-PIM over its default mapping by 2.11x (RED), 1.69x (VA) and 1.58x "
        "(ReLU) on average",
        "HBM-PIM (AttAcc's data distribution as the default), tensor size 1024-4096, batch "
        "1-4, FP16",
        "pimphony dcc-figs --figure fig7 --panels RED,VA,RELU  (batched-red (B, 1, N), "
        "batched-va / batched-relu (B, N) on hbm-pim; DCC's predicted search)",
        _dcc_fig7_elementwise,
        group="dcc-figs",
    ),
    Claim(
        "D-fig6", "DCC", "Fig. 6 / V-A",
        "DCC improves AttAcc over its default mapping by 1.24x (ATTN), 1.28x (GEMV) and 1.50x "
        "(RED) on average",
        "AttAcc (5 HBM3 devices, 16 channels of 64 banks); ATTN / GEMV 32-64 heads x "
        "512-4,096 outputs, input 128; RED 1024-4096 elements; batch 1 and 4; FP16",
        "pimphony dcc-figs --figure fig6  (attn (B x H, T, 128), qk (B x H, T, 128) with K/V "
        "resident; batched-red (B, 1, N) rearranged per call; DCC's predicted search)",
        _dcc_fig6, slow=True,
        group="dcc-figs",
    ),
    Claim(
        "D-over-gpu-hbm-pim", "DCC", "abstract / Fig. 7",
        "DCC on HBM-PIM: up to 7.68x (2.7x average) over GPU-only execution across kernels",
        "HBM-PIM, Fig. 7's GEMV (32/64 x 512/4096, batch 1/4) and RED / VA / ReLU (1024-4096, "
        "batch 1-4); the paper's 2.7x is the geomean over every point (its bars give 2.70)",
        "pimphony dcc-figs --figure fig7  (every panel; dcc_over_gpu)",
        _dcc_over_gpu_hbm_pim, slow=True, gpu=True,
        group="dcc-figs",
    ),
    Claim(
        "D-over-gpu-attacc", "DCC", "abstract / Fig. 6",
        "DCC on AttAcc: up to 13.17x (5.75x average) over GPU-only execution across kernels",
        "AttAcc, Fig. 6's ATTN / GEMV / RED points; the paper's 5.75x is the geomean over "
        "every point (its panel geomeans 10.40 / 7.65 / 1.78 over 8 / 8 / 6 points give 5.75)",
        "pimphony dcc-figs --figure fig6  (dcc_over_gpu)",
        _dcc_over_gpu_attacc, slow=True, gpu=True,
        group="dcc-figs",
    ),
    Claim(
        "D-fig8", "DCC", "abstract / Fig. 8",
        "DCC on AttAcc accelerates end-to-end LLM inference up to 7.71x (4.88x average) over "
        "the GPU",
        "GPT-3 13B and LLaMA 33B, batch 1 and 4, (Lin, Lout) = (128, 2048), (2048, 128), "
        "(2048, 2048); one A100 + AttAcc (5 HBM3 PIM devices)",
        "pimphony dcc-fig8  (both models, batches 1,4, the three runs, 5 contexts per run; "
        "DCC's drafts searched per shape; attacc-full+dcc over gpu)",
        _dcc_fig8, slow=True, gpu=True,
    ),
    Claim(
        "D-fig10", "DCC", "Fig. 10 / V-C",
        "DCC accelerates the rearrangement-heavy VA, RED and RELU by 1.70x on average and the "
        "compute-heavy GEMV and ATTN by 1.18x",
        "both back ends, two batch sizes per kernel (sizes not given)",
        "pimphony dcc-figs --figure fig6 and --figure fig7  (dcc_over_default, geomean by "
        "kernel class)",
        _dcc_fig10, slow=True,
        group="dcc-figs",
    ),
    Claim(
        "D-table2", "DCC", "Table II / V-D",
        "the coupled predictor picks the true best draft in 89.28% of configurations; when it "
        "does not, its pick reaches 96.25% of the best",
        "AttAcc + ATTN / GEMV / RED, HBM-PIM + GEMV / RED / VA / RELU; 167-304 configurations "
        "per row (1,548)",
        "pimphony dcc-table2 --test 8 --per-shape 1000  (one predictor across rows, seed 0)",
        _dcc_table2, slow=True,
    ),
    Claim(
        "D-fig2-attacc", "DCC", "Fig. 2 / II",
        "the compute-centric (TVM-based) choice is 1.26x slower than the best end-to-end one "
        "on average; rearrangement is 64.68% of its time",
        "RED and GEMV, 256 x 2048 / 4096, batch 16 and 28, on AttAcc [20], inputs "
        "rearranged per call",
        "pimphony dcc-figs --figure fig2 --backend attacc  (red (B x 256, N), batched-gemv "
        "(B, 256, N), every-call placement; T = the least-compute draft simulated)",
        _dcc_fig2_attacc, slow=True,
    ),
    Claim(
        "D-fig9-attacc", "DCC", "Fig. 9 / V-A",
        "DCC's gain over AttAcc's default on GEMV grows with the batch, 1.14x at batch 1 to "
        "1.33x at batch 8",
        "an attention layer's GEMV: 32 heads, input 128, outputs 512-4,096, batch 1-8",
        "pimphony dcc-figs --figure fig9 --backend attacc  (qk (B x 32, T, 128), K resident)",
        _dcc_fig9_attacc, slow=True,
    ),
    Claim(
        "S-fig9", "PIM-SHERPA", "Fig. 9 / 6",
        "DRAM saved against weight duplication: Llama 3.2 1B FACIL-O 49.2%, S-DDB 47.8%, "
        "S-OWR 48.5%; 3B S-DDB 49.4%, S-OWR 49.7%",
        "Llama 3.2 1B / 3B, BF16, LPDDR5X-PIM (4 channels x 16 banks)",
        "pimphony sherpa --model llama-3.2-1b|llama-3.2-3b", _sherpa_fig9,
    ),
    Claim(
        "S-fig10", "PIM-SHERPA", "Fig. 10 / 7 / conclusion",
        "S-DDB's TTFT is comparable to FACIL-O for input SL 128-192; S-OWR gradually "
        "approaches it (16.7 TPS at SL 192 on 3B, nearly matching)",
        "Llama 3.2 1B / 3B on the Galaxy S24+ (LPDDR5X-PIM), input SL 64-192",
        "pimphony sherpa --model llama-3.2-1b|llama-3.2-3b --sl 64,96,128,160,192 --out-len 1",
        _sherpa_fig10,
    ),
    Claim(
        "S-fig12", "PIM-SHERPA", "Fig. 12 / 7",
        "S-DDB and FACIL-O nearly identical end to end for input SL > 128, 2.5-19% apart at "
        "64-96; S-OWR up to 3.3x over the non-PIM baseline",
        "Llama 3.2 1B, input and output SL 64-192, Galaxy S24+",
        "pimphony sherpa --model llama-3.2-1b --sl 64,96,128,160,192 --out-len 64,128,192",
        _sherpa_fig12,
    ),
    Claim(
        "S-fig13", "PIM-SHERPA", "Fig. 13 / 7",
        "with one weight copy, NC-GEMM's prefill grows with SL: 148 / 332 / 458 s at SL 64 / "
        "128 / 192, about 0.4 TPS",
        "Llama 3.2 3B on the Galaxy S24+, C-GEMM vs NC-GEMM",
        "pimphony sherpa --model llama-3.2-3b --sl 64,96,128,160,192 --out-len 1  (fig13)",
        _sherpa_fig13,
    ),
)  # fmt: skip


@contextlib.contextmanager
def roofline_xpus() -> Iterator[None]:
    """Within: every xPU preset loads without its per-kernel costs (``--no-kernel-costs``)."""
    before = os.environ.get(KERNEL_COSTS_ENV)
    os.environ[KERNEL_COSTS_ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ[KERNEL_COSTS_ENV]
        else:
            os.environ[KERNEL_COSTS_ENV] = before


def measure_claim(claim: Claim) -> Measured:
    """``claim`` measured; a :attr:`Claim.gpu` row again on the roofline, in ``roofline``."""
    measured = claim.measure()
    if not claim.gpu:
        return measured
    with roofline_xpus():
        roofline = claim.measure()
    return dataclasses.replace(measured, roofline=roofline.ours)


def measure_all(
    claims: tuple[Claim, ...] = CLAIMS, progress: Callable[[str], None] | None = None
) -> list[tuple[Claim, Measured]]:
    """Every claim measured, in order."""
    out = []
    for claim in claims:
        if progress:
            progress(f"{claim.key}: {claim.paper} {claim.where}")
        out.append((claim, measure_claim(claim)))
    return out


def claim_json(c: Claim, m: Measured) -> dict[str, Any]:
    """One row of ``pimphony fidelity --json``: the claim and its measurement."""
    return {
        "key": c.key,
        "paper": c.paper,
        "where": c.where,
        "claim": c.claim,
        "command": c.command,
        "ours": m.ours,
        "roofline": m.roofline,
        "verdict": str(m.verdict),
        "gaps": [{**dataclasses.asdict(g), "factor": g.factor, "close": g.close} for g in m.gaps],
        "mechanism": m.mechanism,
        "values": m.values,
    }


def measured_from_json(row: dict[str, Any]) -> Measured:
    """The :class:`Measured` of a :func:`claim_json` row (its ``values`` as JSON gives them)."""
    return Measured(
        row["ours"],
        Verdict(row["verdict"]),
        row["mechanism"],
        row["values"],
        tuple(Gap(g["label"], g["ours"], g["paper"], Unit(g["unit"])) for g in row["gaps"]),
        row["roofline"],
    )


def select_claims(keys: str | None) -> tuple[Claim, ...]:
    """The rows named in ``keys`` (comma-separated, in the table's order); every row if None."""
    if keys is None:
        return CLAIMS
    wanted = [k.strip() for k in keys.split(",") if k.strip()]
    known = {c.key for c in CLAIMS}
    unknown = [k for k in wanted if k not in known]
    if unknown or not wanted:
        raise FidelityError(
            f"--rows {keys!r}: unknown row {', '.join(unknown) or '(none given)'}; allowed: "
            + ", ".join(c.key for c in CLAIMS)
        )
    return tuple(c for c in CLAIMS if c.key in wanted)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _plot_link(claim: Claim, m: Measured, doc: Path, figures: Path) -> str:
    """`` ([plot](...))`` for a row with gaps to plot, relative to ``doc``; else empty."""
    if not m.gaps:
        return ""
    rel = os.path.relpath(figure_path(claim.key, figures), doc.parent)
    return f" ([plot]({Path(rel).as_posix()}))"


def ours_text(m: Measured) -> str:
    """The ours cell: our numbers and, for a row on an xPU's costs, those on the roofline."""
    if not m.roofline:
        return m.ours
    return f"{m.ours}. Without per-kernel costs (`--no-kernel-costs`): {m.roofline}"


def verdict_text(m: Measured) -> str:
    """The verdict cell: the verdict and, unless reproduced, the worst gap (how far off)."""
    worst = m.worst
    if m.verdict in (Verdict.REPRODUCED, Verdict.DERIVED):
        return f"**{m.verdict}**"
    if worst is None:
        if m.verdict == Verdict.DIFFERS:
            return f"**{m.verdict}**"
        return f"**{m.verdict}** (the paper gives no number to size it by)"
    return f"**{m.verdict}** (worst: {worst.text()})"


def tally(results: list[tuple[Claim, Measured]]) -> list[str]:
    """A Markdown table of the verdicts' counts by paper, with a total row."""
    papers = list(dict.fromkeys(c.paper for c, _ in results))
    head = ["paper", *map(str, Verdict), "rows"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for paper in (*papers, None):
        ms = [m for c, m in results if paper in (None, c.paper)]
        counts = [sum(m.verdict == v for m in ms) for v in Verdict]
        name = paper or "**all**"
        lines.append("| " + " | ".join([name, *map(str, counts), str(len(ms))]) + " |")
    return lines


def format_fidelity(
    results: list[tuple[Claim, Measured]],
    doc: Path = FIDELITY_DOC,
    figures: Path = FIGURE_DIR,
) -> str:
    """``docs/fidelity.md``: the tally by paper and verdict, then one row per claim; a row
    with numbers to plot links its plot in ``figures`` (relative to ``doc``)."""
    tool = tool_record()
    lines = [
        "# Fidelity: the papers' claims beside pimphony's numbers",
        "",
        "Generated by `pimphony fidelity --write` (do not edit by hand); "
        f"pimphony {tool['version']}, commit {tool['commit'] or 'unknown'}. "
        "`tests/test_fidelity.py` re-runs every row and fails when a verdict changes.",
        "Verdicts: reproduced (within the row's tolerance); close (the direction holds and "
        f"every compared number is within {CLOSE_FACTOR}x of the paper's, or "
        f"{CLOSE_POINTS:.0f} points for a percentage); direction only (the direction holds, "
        "a number is further off: the cell gives the worst); differs (the direction does not "
        "hold); derived (taken from the paper's number; not a check); not reproducible "
        "(vendor tool or silicon). A speed-up is sized by its gain over 1: 1.09x against "
        "1.4x is 4.6x off. A row with the paper's numbers links a plot of them beside ours "
        "(`pimphony fidelity --figures`); a row that compares with a GPU also gives ours "
        "without per-kernel costs (`docs/xpu.md`). Presets: `docs/presets.md`.",
        "",
        *tally(results),
        "",
        "| claim | paper | paper's workload | our command | ours | verdict | mechanism |",
        "|---|---|---|---|---|---|---|",
    ]
    for c, m in results:
        lines.append(
            f"| {_cell(c.claim)} | {c.paper} {c.where} | {_cell(c.workload)} | "
            f"`{_cell(c.command)}` | {_cell(ours_text(m))}{_plot_link(c, m, doc, figures)} | "
            f"{_cell(verdict_text(m))} | "
            f"{_cell(m.mechanism)} |"
        )
    return "\n".join(lines) + "\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony fidelity``."""
    p.add_argument(
        "--write",
        nargs="?",
        const=FIDELITY_DOC,
        type=Path,
        help=f"write the table to this file (default {FIDELITY_DOC}) instead of printing it",
    )
    p.add_argument(
        "--figures",
        nargs="?",
        const=FIGURE_DIR,
        type=Path,
        help=f"write one plot per row, the paper's numbers beside ours, to this folder "
        f"(default {FIGURE_DIR}); --write writes them beside its file (img/fidelity/)",
    )
    p.add_argument("--force", action="store_true", help="replace an existing --write file or plots")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--rows", default=None, help="measure only these rows (comma-separated keys, e.g. P-fig7)"
    )
    p.add_argument(
        "--serial",
        action="store_true",
        help="measure in this process; default with --write / --figures: the rows' groups as "
        "Ray tasks through the sweep runner (cached per row group under build/fidelity, resumed)",
    )
    p.add_argument("--address", default=None, help="an existing Ray cluster (default: a local Ray)")
    p.add_argument("--workers", type=int, default=None, help="local Ray CPUs (default: all cores)")


def run(args: argparse.Namespace) -> int:
    """Measure every claim; print the table, its JSON, or write it."""
    if args.write is not None:
        args.write = user_output(args.write, FIDELITY_DOC, args.force)
    # --write puts the plots beside the table (docs/fidelity.md: docs/img/fidelity)
    beside = args.write.parent / FIGURE_DIR.relative_to(FIDELITY_DOC.parent) if args.write else None
    figures = args.figures or beside
    if figures is not None:
        _check_figures(figures, args.force)
    claims = select_claims(args.rows)
    if args.rows is not None and args.write is not None:
        raise FidelityError("--rows measures part of the table; --write writes all of it: drop one")
    if args.workers is not None and args.workers < 1:
        raise FidelityError(f"--workers {args.workers}: must be at least 1")
    say = functools.partial(print, file=sys.stderr, flush=True) if args.write or figures else None
    if say and not args.serial:
        from pimphony.sim.fidelity_sweep import measure_by_sweep

        results = measure_by_sweep(claims, address=args.address, workers=args.workers)
    else:
        if args.address is not None or args.workers is not None:
            raise FidelityError("--address and --workers set up Ray; measuring here runs without")
        results = measure_all(claims, progress=(lambda m: say(f"  {m}")) if say else None)
    if figures is not None:
        written = write_figures(results, figures, overwrite=args.force)
        print(f"wrote {len(written)} plots to {figures}", file=sys.stderr if args.json else None)
    if args.json:
        claims_json = [claim_json(c, m) for c, m in results]
        print(json.dumps({"claims": claims_json, "provenance": tool_record()}, indent=2))
        return 0
    text = format_fidelity(results, args.write or FIDELITY_DOC, figures or FIGURE_DIR)
    if args.write is not None:
        write_atomic(args.write, text.encode())
        print(f"wrote {args.write}")
    elif figures is None:
        print(text, end="")
    return 0


def _check_figures(directory: Path, force: bool) -> None:
    """Refuse, before measuring, plots that exist in ``directory`` unless ``force``; and a
    ``directory`` that is a file."""
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"--figures {directory}: is a file; give a folder")
    existing = [figure_path(c.key, directory) for c in CLAIMS]
    existing = [p for p in existing if p.exists()]
    if existing and not force:
        raise FileExistsError(
            f"{existing[0]} exists ({len(existing)} plots in {directory}); pass --force to "
            "replace them"
        )
