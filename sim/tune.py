"""``pimphony tune``: DCC's best mapping of one kernel on a PIM back end (``docs/dcc.md``).

Generates the kernel's tiling drafts, prunes them, simulates each on the back end's
command-level model (compute) and its host bus (rearrangement) -- or, when more than
``--budget`` survive pruning, simulates ``--budget`` of them to train DCC's XGBoost predictor,
predicts all and simulates the ``--verify`` best predicted (DCC IV-D) -- and prints the best drafts
split into compute, rearrangement and host time; the chosen mapping; the back end's default
mapping (DCC V) and the compute-centric choice, each with DCC's speedup over it; and the host
GPU alone. ``--exhaustive`` simulates every draft without pruning and says whether the pruned
search found the same best.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

from pimphony.compiler.dcc.cost import DraftCost, Placement, draft_cost, gpu_seconds, kernel_nest
from pimphony.compiler.dcc.predictor import (
    SEARCH_BUDGET,
    SEARCH_VERIFY,
    Entry,
    LookupTable,
    LookupTableError,
    PredictedSearch,
    predicted_search,
)
from pimphony.compiler.dcc.schedule import DccKernel, dimension_sets
from pimphony.compiler.dcc.tune import (
    Objective,
    SearchResult,
    best,
    default_draft,
    default_name,
    generated_count,
    search,
)
from pimphony.compiler.rearrange import Strategy
from pimphony.models.backends import BackendConfig, available_backends, load_backend
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import check_writable, write_atomic
from pimphony.sim.analysis.dcc_table import add_search_options
from pimphony.sim.cli import bounded_int, choice_names
from pimphony.sim.provenance import provenance
from pimphony.sim.tune_energy import energy_lines, tune_energy

__all__ = ["add_arguments", "cost_row", "run", "tune_report"]


def _shape(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected comma-separated integers, e.g. 4096,4096"
        ) from None
    return values


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony tune``."""
    p.add_argument("--kernel", required=True, choices=choice_names(DccKernel), help="kernel")
    p.add_argument(
        "--shape",
        required=True,
        type=_shape,
        help="the kernel's sizes, comma-separated: gemv d_out,d_in; batched-gemv "
        "batch,d_out,d_in; qk / sv / attn heads,tokens,d_h; red rows,cols; va / relu n; "
        "batched-red batch,rows,cols; batched-va / batched-relu batch,n",
    )
    p.add_argument(
        "--backend",
        default="hbm-pim",
        help=f"back end ({', '.join(available_backends())}) or a .toml path",
    )
    p.add_argument("--top", type=bounded_int(1, 1000), default=5, help="drafts to list")
    p.add_argument(
        "--strategy",
        choices=choice_names(Strategy),
        default=None,
        help="rearrangement strategy (default: staged if the host has on-chip memory)",
    )
    p.add_argument(
        "--placement",
        choices=choice_names(Placement),
        default=str(Placement.RESIDENT),
        help="resident: weights / KV cache already in PIM layout (placed once); every-call: "
        "every input is rearranged per call",
    )
    add_search_options(p)
    p.add_argument(
        "--exhaustive",
        action="store_true",
        help="also simulate every draft without pruning and compare the best",
    )
    p.add_argument(
        "--energy",
        nargs="?",
        const="",
        default=None,
        help="also report the chosen and default drafts' energy; optionally the energy preset "
        "(default: the one named like the back end; docs/energy.md)",
    )
    p.add_argument(
        "--table",
        default=None,
        help="a lookup table filled offline (pimphony dcc-lut): a shape it holds takes its "
        "draft without a search; another is predicted by the table's offline predictor "
        "(searched if the table has none saved)",
    )
    p.add_argument(
        "--extend",
        action="store_true",
        help="with --table: record a new shape's draft in the table and write it back",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--out", default=None, help="also write the JSON report to this file")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")


def cost_row(c: DraftCost, predicted_s: float | None = None) -> dict[str, Any]:
    """One simulated draft as plain data (times in microseconds; the predictor's, if any)."""
    return {
        "predicted_us": None if predicted_s is None else predicted_s * 1e6,
        "draft": " ".join(str(p) for p in c.draft),
        "groups": c.share.groups,
        "group_share": list(c.share.sizes),
        "cores": list(c.share.cores),
        "compute_us": c.compute_s * 1e6,
        "rearrange_in_us": c.rearrange_in_s * 1e6,
        "rearrange_out_us": c.rearrange_out_s * 1e6,
        "host_us": c.host_s * 1e6,
        "total_us": c.total_s * 1e6,
        "bytes_in": c.bytes_in,
        "bytes_out": c.bytes_out,
        "cycles": c.cycles,
    }


def tune_report(
    backend: str,
    kernel: str,
    shape: tuple[int, ...],
    top: int = 5,
    strategy: str | None = None,
    exhaustive: bool = False,
    placement: str = Placement.RESIDENT,
    budget: int = SEARCH_BUDGET,
    verify: int = SEARCH_VERIFY,
    energy: str | None = None,
    table: LookupTable | None = None,
    extend: bool = False,
    energy_of: tuple[str, ...] = ("chosen", "default"),
) -> dict[str, Any]:
    """The search's results as plain data (see the module docstring). With ``table`` (read by
    :func:`sim.analysis.dcc_table.read_table`), a shape it holds is not searched: its draft
    is simulated as the choice (``report["table"]["hit"]``). Another shape is, if the table
    has its offline predictor (``table.offline``), predicted by it over the pruned drafts and
    the best predicted simulated (DCC IV-D; ``report["table"]["new_shape"] = "predicted"``),
    else searched as without a table (``"searched"``); with ``extend`` its draft is recorded
    in ``table`` (``origin = "runtime"``). ``energy_of``: the drafts whose energy ``energy``
    reports (a caller that needs only the chosen's spares the default's)."""
    cfg = load_backend(backend)
    k = DccKernel(kernel)
    kernel_nest(k, shape)
    strat = Strategy(strategy) if strategy else None
    place = Placement(placement)
    if table is not None and (strat is not None or place is not Placement.RESIDENT):
        raise LookupTableError(
            "--table holds drafts chosen with weights / KV resident and the default "
            "--strategy; drop --placement / --strategy or --table"
        )
    entry = None if table is None else table.get(cfg.name, k, shape)
    offline = None if table is None or entry is not None else table.offline
    if entry is not None or offline is not None:
        t0 = time.perf_counter()
        if entry is None:  # a new size: the offline predictor's pick, not recorded yet
            draft, t, n = offline.best(cfg, k, shape)
            picked = Entry(draft, t, n, "runtime")
        ps, centric = _table_search(cfg, k, shape, entry or picked), None
        if entry is None:
            sha = (table.model or {}).get("sha256")
            res = dataclasses.replace(ps.result, seconds=time.perf_counter() - t0)
            ps = dataclasses.replace(ps, result=res, info={
                "predictor": "the table's offline predictor", "model_sha256": sha})  # fmt: skip
        res = ps.result
        chosen = res.costs[0]
    else:
        ps = predicted_search(cfg, k, shape, budget, verify, strat, place)
        res = ps.result
        chosen = best(res, Objective.END_TO_END)
        centric = best(res, Objective.COMPUTE)
    ranked = sorted(res.costs, key=lambda c: c.total_s)
    dd = default_draft(cfg, k, shape)
    try:
        default: DraftCost | None = draft_cost(cfg, k, shape, dd, strat, place)
        refused = ""
    except PimphonyError as exc:  # the default mapping may not fit where DCC's does
        default, refused = None, f"{' '.join(str(p) for p in dd)}: {exc}"
    gpu = gpu_seconds(cfg, k, shape)
    nest = kernel_nest(k, shape)
    report: dict[str, Any] = {
        "backend": cfg.name,
        "kernel": str(k),
        "shape": list(shape),
        "placement": str(place),
        "system": {"groups": cfg.groups, "cores_per_group": cfg.cores_per_group},
        "dimension_sets": [[m[0] for m in ds.members] for ds in dimension_sets(nest)],
        "drafts": {
            "generated": res.generated,
            "after_pruning": ps.candidates,
            "simulated": len(res.costs),
            "sampled_for_predictor": ps.sampled if ps.verified else 0,
            "verified_predicted_best": ps.verified,
            "refused": res.skipped,
            "search_seconds": res.seconds,
        },
        "predictor": ps.info,
        "top": [cost_row(c, ps.predicted_s.get(c.draft)) for c in ranked[:top]],
        "chosen": cost_row(chosen),
        "default": cost_row(default) if default else None,
        "default_name": default_name(cfg),
        "default_refused": refused,
        "compute_centric": cost_row(centric) if centric else None,
        "gpu_us": gpu * 1e6,
        "speedup": {
            "over_default": default.total_s / chosen.total_s if default else None,
            "over_compute_centric": centric.total_s / chosen.total_s if centric else None,
            "over_gpu": gpu / chosen.total_s,
            "default_over_gpu": gpu / default.total_s if default else None,
        },
    }
    if table is not None:
        new = None if entry else "predicted" if offline else "searched"
        report["table"] = {"hit": entry is not None, "origin": entry.origin if entry else None,
                           "new_shape": new, "extended": extend and entry is None}  # fmt: skip
        if extend and entry is None:  # DCC IV-D: the table is extended at run time
            table.entries[cfg.name, k, tuple(shape)] = Entry(
                chosen.draft, ps.predicted_s.get(chosen.draft), ps.candidates, "runtime",
                chosen.total_s,
            )  # fmt: skip
    if energy is not None:  # docs/energy.md: the drafts' energy (sim/tune_energy.py)
        drafts = {"chosen": chosen, "default": default}
        report["energy"] = tune_energy(cfg, {n: drafts[n] for n in energy_of}, energy)
    if exhaustive:
        full = search(cfg, k, shape, pruned=False, strategy=strat, placement=place)
        fb = best(full, Objective.END_TO_END)
        report["exhaustive"] = {
            "generated": full.generated,
            "simulated": len(full.costs),
            "search_seconds": full.seconds,
            "best": cost_row(fb),
            "same_best_time": fb.total_s == chosen.total_s,
            "pruned_over_exhaustive": chosen.total_s / fb.total_s,
        }
    return report


def _table_search(
    cfg: BackendConfig, kernel: DccKernel, shape: tuple[int, ...], entry: Entry
) -> PredictedSearch:
    """The table's draft (or the offline predictor's pick) simulated as the one candidate:
    no search, no predictor trained."""
    t0 = time.perf_counter()
    cost = draft_cost(cfg, kernel, shape, entry.draft)
    sets = dimension_sets(kernel_nest(kernel, shape))
    total = generated_count(sets, cfg.groups, cfg.cores_per_group)
    res = SearchResult((cost,), total, entry.drafts, {}, time.perf_counter() - t0)
    predicted = {} if entry.predicted_s is None else {entry.draft: entry.predicted_s}
    return PredictedSearch(res, entry.drafts, 0, 0, predicted, {"predictor": "not run"})


#: How a table entry of each origin was chosen (``LookupTable``'s origins).
_ORIGIN_WORDS = {
    "offline": "the best predicted of",
    "runtime": "recorded at run time, the best found among",
}


def _line(name: str, r: dict[str, Any]) -> str:
    return (
        f"  {name:<16} {r['total_us']:>10.2f} us = in {r['rearrange_in_us']:.2f} + compute "
        f"{r['compute_us']:.2f} + out {r['rearrange_out_us']:.2f} + host {r['host_us']:.2f}  "
        f"{r['draft']}"
    )


def run(args: argparse.Namespace) -> int:
    """Print the report (or write it as JSON)."""
    if args.out:
        check_writable(args.out, args.force)  # refuse before the search, not after
    if args.extend and not args.table:
        raise LookupTableError("--extend records a searched shape in a table: give --table FILE")
    table = None
    if args.table:
        from pimphony.sim.analysis.dcc_table import read_table

        table = read_table(args.table, load_backend(args.backend))
    report = tune_report(
        args.backend,
        args.kernel,
        args.shape,
        args.top,
        args.strategy,
        args.exhaustive,
        args.placement,
        args.budget,
        args.verify,
        args.energy,
        table,
        args.extend,
    )
    cfg = load_backend(args.backend)
    if table is not None:
        from pimphony.sim.analysis.dcc_table import table_digest

        if report["table"]["extended"]:
            table.save(args.table, overwrite=True)
        report["table"].update(
            path=str(args.table),
            sha256=table_digest(args.table),
            backend_sha256=table.provenance["backend"]["sha256"],
        )
    if table is None:  # reports' options stay as before --table existed
        args = argparse.Namespace(
            **{k: v for k, v in vars(args).items() if k not in ("table", "extend")}
        )
    report["provenance"] = provenance(
        args, backend={"name": cfg.name, "values": dataclasses.asdict(cfg)}
    )
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        write_atomic(args.out, (text + "\n").encode(), overwrite=args.force)
    if args.json:
        print(text)
        return 0
    r, d = report, report["drafts"]
    print(f"tune {r['kernel']} {tuple(r['shape'])} on {r['backend']}: {r['system']['groups']} "
          f"groups x {r['system']['cores_per_group']} cores")  # fmt: skip
    refused = sum(d["refused"].values())
    hit = "table" in r and r["table"]["hit"]
    predicted = "table" in r and r["table"]["new_shape"] == "predicted"
    if hit:
        how = _ORIGIN_WORDS[r["table"]["origin"]]
        print(f"  draft: from table {args.table} ({r['table']['origin']}): {how} "
              f"{d['after_pruning']:,} pruned drafts; not searched, the draft simulated in "
              f"{d['search_seconds']:.1f} s")  # fmt: skip
    elif predicted:
        done = "; recorded in the table (runtime)" if r["table"]["extended"] else ""
        print(f"  draft: not in table {args.table}: predicted by the table's offline "
              f"predictor, the best of {d['after_pruning']:,} pruned drafts; not searched, "
              f"predicted and simulated in {d['search_seconds']:.1f} s{done}")  # fmt: skip
    else:
        print(f"  drafts: {d['generated']:,} generated, {d['after_pruning']:,} after pruning, "
              f"{d['simulated']:,} simulated ({refused:,} refused), "
              f"{d['search_seconds']:.1f} s")  # fmt: skip
    if "table" in r and not hit and not predicted:
        from pimphony.sim.analysis.dcc_table import NO_PREDICTOR

        done = "; its best recorded in the table (runtime)" if r["table"]["extended"] else ""
        print(f"  table: {r['kernel']} {tuple(r['shape'])} is not in {args.table}: searched"
              f" ({NO_PREDICTOR}){done}")  # fmt: skip
    if d["verified_predicted_best"]:
        p = r["predictor"]
        print(f"  predictor: {d['sampled_for_predictor']:,} drafts simulated to train "
              f"({p['n_estimators']} rounds, {p['train_s']:.1f} s), every draft predicted, "
              f"the {d['verified_predicted_best']} best predicted simulated")  # fmt: skip
    for i, row in enumerate(r["top"], 1):
        pred = f" (predicted {row['predicted_us']:.2f})" if row["predicted_us"] else ""
        print(_line(f"#{i}", row) + pred)
    print(_line("chosen (DCC)", r["chosen"]))
    name = f"default ({r['default_name']})"
    if r["default"]:
        print(_line(name, r["default"]))
    else:
        print(f"  {name:<16} cannot run: {r['default_refused']}")
    if r["compute_centric"]:
        print(_line("compute-centric", r["compute_centric"]))
    else:
        came = "the table's predictor" if predicted else "the table"
        print(f"  {'compute-centric':<16} not searched (the draft came from {came})")
    s = r["speedup"]
    print(f"  GPU alone: {r['gpu_us']:.2f} us")
    over = f"{s['over_default']:.2f}x" if s["over_default"] else "-"
    dg = f"{s['default_over_gpu']:.2f}x" if s["default_over_gpu"] else "-"
    cc = f"{s['over_compute_centric']:.2f}x" if s["over_compute_centric"] else "-"
    print(f"  speedup: {over} over default, {cc} "
          f"over compute-centric, {s['over_gpu']:.2f}x over GPU (default {dg})")  # fmt: skip
    if "energy" in r:
        print("\n".join(energy_lines(r["energy"])))
    if "exhaustive" in r:
        e = r["exhaustive"]
        print(f"  exhaustive: {e['simulated']:,} drafts in {e['search_seconds']:.1f} s; best "
              f"{e['best']['total_us']:.2f} us; pruned search "
              f"{'finds the same' if e['same_best_time'] else 'is'} "
              f"{e['pruned_over_exhaustive']:.3f}x of it")  # fmt: skip
    return 0
