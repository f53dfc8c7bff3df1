"""``pimphony dcc-lut``: DCC's lookup table of best drafts, filled offline (DCC IV-D;
``docs/dcc.md``, "The lookup table filled offline").

For one back end, the shapes (kernel, sizes) of the evaluation -- by default every shape the
``dcc-figs`` figures and ``dcc-fig8`` ask DCC's mapping for on that back end
(:data:`SHAPE_SOURCES`), with weights / KV resident -- or the ``--shape`` s given:

1. ``--per-shape`` pruned drafts of each shape are labelled by the simulator
   (:func:`compiler.dcc.predictor.collect` with
   :func:`~compiler.dcc.predictor.simulated_seconds`, as ``dcc-table2`` does);
2. the held-out error: one XGBoost predictor is trained on every kernel's shapes but a share
   held out per kernel (:func:`sim.analysis.dcc_shapes.split_configs`), and its MAPE on
   the held-out shapes' labelled drafts is recorded;
3. one predictor trained on all the labels (across kernels: the features name the kernel and
   the back end) predicts every pruned draft of each shape; the best predicted goes in the
   table (:meth:`compiler.dcc.predictor.LookupTable.fill`), simulated once to record its time;
4. the table is written atomically (an existing file only with ``--force``) with the
   provenance and the back end's name and :func:`sim.analysis.dcc_table.backend_digest`;
   beside it, the predictor of step 3 in XGBoost's own format (``NAME.model.ubj``,
   :func:`compiler.dcc.predictor.model_path`, also only replaced with ``--force``), which the
   table records by name, SHA-256 and feature layout, so that a run meeting a shape the table
   lacks predicts it with the very predictor that filled the table (DCC IV-D).

:func:`sim.analysis.dcc_table.read_table` is how a command reads it back (``pimphony tune
--table``, ``pimphony dcc-fig8 --table``, ``pimphony dcc-figs --table``): a missing file, a
file that is not a table, one filled for another back end or for the same name with other
values (a stale table), one whose saved predictor is missing, altered or of another feature
layout is refused with one line. A table written before the predictor was saved (no
``model`` record) is still read; its new shapes are searched as without a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
from pimphony.compiler.dcc.cost import Placement, check_lowered
from pimphony.compiler.dcc.predictor import (
    DEFAULT_N_ESTIMATORS,
    Entry,
    LookupTable,
    LookupTableError,
    Predictor,
    Samples,
    collect,
    kernel_nest,
    model_path,
    simulated_seconds,
    train_predictor,
)
from pimphony.compiler.dcc.schedule import DccError, DccKernel
from pimphony.models.backends import BackendConfig, load_backend
from pimphony.models.fileio import check_writable
from pimphony.sim.analysis.dcc_shapes import (
    FIG8_BACKEND,
    FIGURE_BACKENDS,
    FIGURES,
    dcc_shapes,
    split_configs,
)
from pimphony.sim.analysis.dcc_table import backend_digest, backend_record
from pimphony.sim.cli import add_seed_option, bounded_int, choice_names
from pimphony.sim.parallel import ordered_map, shared_ray
from pimphony.sim.provenance import provenance
from tqdm import tqdm

__all__ = [
    "SHAPE_SOURCES",
    "Shape",
    "ShapeSource",
    "add_arguments",
    "evaluation_shapes",
    "fill_table",
    "run",
]

#: One table row's key besides the back end: the kernel and its sizes.
Shape = tuple[DccKernel, tuple[int, ...]]


class ShapeSource(StrEnum):
    """Where the default shapes come from: the experiments that ask DCC for mappings."""

    DCC_FIGS = "dcc-figs"
    DCC_FIG8 = "dcc-fig8"


def _figs_shapes(backend: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every point of the ``dcc-figs`` figures that run on ``backend`` with weights / KV
    resident (Fig. 2's points rearrange every input per call: another cost, not tabled)."""
    return [
        (kernel, tuple(shape))
        for fig, backends in FIGURE_BACKENDS.items()
        if backend in backends
        for _, kernel, shape, placement, _ in FIGURES[fig](backend)
        if placement == Placement.RESIDENT
    ]


def _fig8_shapes(backend: str) -> list[tuple[str, tuple[int, ...]]]:
    """``dcc-fig8``'s default run's DCC kernels, on its back end only."""
    return dcc_shapes() if backend == FIG8_BACKEND else []


#: Each source's shapes on a back end (by name; none if it does not run there).
SHAPE_SOURCES: dict[ShapeSource, Callable[[str], list[tuple[str, tuple[int, ...]]]]] = {
    ShapeSource.DCC_FIGS: _figs_shapes,
    ShapeSource.DCC_FIG8: _fig8_shapes,
}


def evaluation_shapes(
    backend: str,
    sources: Sequence[ShapeSource] = tuple(ShapeSource),
    kernels: Sequence[DccKernel] | None = None,
) -> list[Shape]:
    """The evaluation's shapes on ``backend`` from ``sources`` (of ``kernels`` only, if
    given), each once, in first-asked order."""
    out: dict[Shape, None] = {}
    for source in sources:
        for kernel, sizes in SHAPE_SOURCES[ShapeSource(source)](backend):
            k = DccKernel(kernel)
            if kernels is None or k in kernels:
                out[k, tuple(sizes)] = None
    return list(out)


def _check_shapes(cfg: BackendConfig, shapes: Sequence[Shape]) -> None:
    if not shapes:
        raise LookupTableError(f"no shapes to fill on back end {cfg.name}")
    for k, sizes in shapes:
        try:
            check_lowered(cfg, k)
        except DccError as exc:
            raise LookupTableError(str(exc)) from None
        kernel_nest(k, sizes, cfg)


def _held_out(
    samples: dict[Shape, Samples], holdout_share: float, n_estimators: int, seed: int
) -> dict[str, Any]:
    """Train on all but ``holdout_share`` of each kernel's shapes; MAPE on the rest."""
    by_kernel: dict[DccKernel, list[tuple[int, ...]]] = {}
    for k, sizes in samples:
        by_kernel.setdefault(k, []).append(sizes)
    test: list[Shape] = []
    for k, shapes in by_kernel.items():
        n = max(1, round(holdout_share * len(shapes))) if len(shapes) > 1 else 0
        n = min(n, len(shapes) - 1) if holdout_share > 0 else 0
        if n:
            test += [(k, s) for s in split_configs(shapes, n, seed)[1]]
    if not test or len(test) == len(samples):
        why = "--holdout 0" if holdout_share == 0 else "fewer than two shapes of any kernel"
        return {"mape": None, "why": f"{why}: nothing held out"}
    train = [s for s in samples if s not in test]
    pred = train_predictor(
        sum((samples[s] for s in train[1:]), samples[train[0]]), n_estimators, seed=seed
    )
    per_kernel: dict[str, list[float]] = {}
    for s in test:
        p, t = pred.predict_x(samples[s].x), samples[s].seconds
        per_kernel.setdefault(str(s[0]), []).extend(np.abs(p - t) / t)
    return {
        "mape": float(np.mean(np.concatenate(list(per_kernel.values())))),
        "per_kernel_mape": {k: float(np.mean(v)) for k, v in per_kernel.items()},
        "test_shapes": [[str(k), list(s)] for k, s in test],
        "train_shapes": len(train),
        "test_samples": int(sum(len(samples[s].rows) for s in test)),
        "train_s": pred.info["train_s"],
    }


def fill_table(
    cfg: BackendConfig,
    shapes: Sequence[Shape],
    per_shape: int = 300,
    n_estimators: int = DEFAULT_N_ESTIMATORS,
    holdout_share: float = 0.2,
    seed: int = 0,
    label: Callable[..., float] = simulated_seconds,
    progress: bool = True,
    workers: int = 1,
    address: str | None = None,
) -> tuple[LookupTable, dict[str, Any]]:
    """Label, measure the held-out error, train on everything and fill (module docstring);
    with ``workers`` > 1 (or a Ray cluster's ``address``) the shapes are labelled, and then
    filled, as Ray tasks (:mod:`sim.parallel`; the same table as one worker: each shape has
    its own seed). The table's ``predictor`` record holds the training and the held-out
    error, its ``offline`` the trained predictor
    (:meth:`~compiler.dcc.predictor.LookupTable.save` with it writes both); the second value
    is what the fill took (seconds per stage)."""
    _check_shapes(cfg, shapes)
    with shared_ray():  # one Ray for both stages
        t0 = time.perf_counter()
        order = _largest_first(shapes)  # the workers' last tasks are short ones
        tasks = [(cfg, *shapes[i], label, per_shape, seed + i) for i in order]
        with ordered_map(_label_shape, tasks, workers, address=address) as labelled:
            bar = tqdm(labelled, desc=f"dcc-lut {cfg.name}: labelling", unit="shape",
                       total=len(tasks), disable=not progress)  # fmt: skip
            got = dict(zip(order, bar, strict=True))
        samples: dict[Shape, Samples] = {shapes[i]: got[i] for i in range(len(shapes))}
        t1 = time.perf_counter()
        held = _held_out(samples, holdout_share, n_estimators, seed)
        t2 = time.perf_counter()
        every = list(samples.values())
        pred = train_predictor(sum(every[1:], every[0]), n_estimators, seed=seed)
        t3 = time.perf_counter()
        record = {**pred.info, "per_shape": per_shape, "holdout": held,
                  "label": "compiler.dcc_predictor.simulated_seconds"}  # fmt: skip
        table = LookupTable(predictor=record)
        table.offline = pred
        fill = functools.partial(_fill_shape, cfg, pred, label, record)
        with ordered_map(fill, [shapes[i] for i in order], workers, address=address) as filled:
            bar = tqdm(filled, desc=f"dcc-lut {cfg.name}: filling", unit="shape",
                       total=len(shapes), disable=not progress)  # fmt: skip
            entries = dict(zip(order, bar, strict=True))
        for i, (k, sizes) in enumerate(shapes):  # in the shapes' order
            table.entries[cfg.name, k, sizes] = entries[i]
        t4 = time.perf_counter()
    timing = {"label_s": t1 - t0, "holdout_s": t2 - t1, "train_s": t3 - t2, "fill_s": t4 - t3,
              "total_s": t4 - t0}  # fmt: skip
    return table, timing


def _largest_first(shapes: Sequence[Shape]) -> list[int]:
    """The indices of ``shapes``, largest (product of the sizes: the longest to label and
    fill) first."""
    return sorted(range(len(shapes)), key=lambda i: -math.prod(shapes[i][1]))


def _label_shape(task: tuple[Any, ...]) -> Samples:
    """One shape's labelled drafts (:func:`compiler.dcc.predictor.collect`)."""
    cfg, kernel, sizes, label, per_shape, seed = task
    return collect(cfg, kernel, [sizes], label, per_shape, seed)


def _fill_shape(
    cfg: BackendConfig,
    pred: Predictor,
    label: Callable[..., float],
    record: dict[str, Any],
    shape: Shape,
) -> Entry:
    """The table entry of one shape: the best draft ``pred`` predicts
    (:meth:`~compiler.dcc.predictor.LookupTable.fill`), with its time by ``label``."""
    k, sizes = shape
    one = LookupTable(predictor=record)
    one.fill(pred, cfg, k, [sizes])
    entry = one.entries[cfg.name, k, sizes]
    return dataclasses.replace(entry, simulated_s=label(cfg, k, sizes, entry.draft))


def _shape_arg(text: str) -> Shape:
    kernel, _, sizes = text.partition(":")
    try:
        k = DccKernel(kernel.strip())
        values = tuple(int(x) for x in sizes.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected KERNEL:SIZES, e.g. gemv:1024,1024 (kernels: "
            f"{', '.join(choice_names(DccKernel))})"
        ) from None
    return k, values


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony dcc-lut``."""
    p.add_argument("--backend", required=True, help="back end preset name or a .toml path")
    p.add_argument("--out", required=True, type=Path,
                   help="the table JSON (its predictor beside it: NAME.model.ubj)")  # fmt: skip
    p.add_argument("--force", action="store_true",
                   help="overwrite --out and its predictor file if they exist")  # fmt: skip
    p.add_argument("--from", dest="sources", action="append", default=None,
                   choices=choice_names(ShapeSource),
                   help="experiments whose shapes fill the table (repeatable; default: all "
                   "that run on the back end)")  # fmt: skip
    p.add_argument("--kernel", dest="kernels", action="append", default=None,
                   choices=choice_names(DccKernel),
                   help="only the evaluation's shapes of this kernel (repeatable)")  # fmt: skip
    p.add_argument("--shape", dest="shapes", action="append", type=_shape_arg, default=None,
                   metavar="KERNEL:SIZES",
                   help="KERNEL:SIZES to fill instead of the evaluation's, e.g. gemv:64,256 "
                   "(repeatable)")  # fmt: skip
    p.add_argument("--per-shape", type=bounded_int(1, 100_000), default=300,
                   help="labelled pruned drafts per shape (tune's --budget)")  # fmt: skip
    p.add_argument("--rounds", type=bounded_int(1, 100_000), default=DEFAULT_N_ESTIMATORS,
                   help="XGBoost rounds (DCC V: 5000)")  # fmt: skip
    p.add_argument("--holdout", type=float, default=0.2,
                   help="share of each kernel's shapes held out to measure the error")  # fmt: skip
    p.add_argument("--workers", type=bounded_int(1, 256), default=1,
                   help="local Ray CPUs labelling and filling shapes at once (the same table as "
                   "one; 1: no Ray)")  # fmt: skip
    p.add_argument("--address", default=None,
                   help="an existing Ray cluster to label and fill on (default: a local Ray "
                   "when --workers > 1)")  # fmt: skip
    add_seed_option(p, "sampling and hold-out seed")


def run(args: argparse.Namespace) -> int:
    """Fill the table, print its entries and the held-out error, write it."""
    check_writable(args.out, args.force)  # refuse before the work, not after
    check_writable(model_path(args.out), args.force)
    if not 0 <= args.holdout < 1:
        raise LookupTableError(f"--holdout {args.holdout}: a share from 0 to below 1")
    if args.shapes and (args.kernels or args.sources):
        raise LookupTableError("--shape replaces the evaluation's shapes: not with --kernel/--from")
    cfg = load_backend(args.backend)
    shapes = list(dict.fromkeys(args.shapes)) if args.shapes else evaluation_shapes(
        cfg.name, args.sources or tuple(ShapeSource),
        None if args.kernels is None else [DccKernel(k) for k in args.kernels],
    )  # fmt: skip
    table, timing = fill_table(
        cfg, shapes, args.per_shape, args.rounds, args.holdout, args.seed, workers=args.workers,
        address=args.address,
    )  # fmt: skip
    table.provenance = provenance(args, backend=backend_record(cfg), timing=timing)
    path = table.save(args.out, overwrite=args.force, predictor=table.offline)
    print(f"dcc-lut {cfg.name}: {len(table)} shapes, {args.per_shape} labelled drafts each, "
          f"{table.predictor['samples']:,} samples")  # fmt: skip
    for (_, k, sizes), e in table.entries.items():
        print(f"  {k!s:<13} {','.join(map(str, sizes)):<16} predicted {e.predicted_s * 1e6:9.3f} "
              f"us  simulated {e.simulated_s * 1e6:9.3f} us  of {e.drafts:>7,} drafts  "
              f"{' '.join(map(str, e.draft))}")  # fmt: skip
    held = table.predictor["holdout"]
    if held["mape"] is None:
        print(f"  held-out error: none ({held['why']})")
    else:
        kernels = ", ".join(f"{k} {100 * v:.1f}%" for k, v in held["per_kernel_mape"].items())
        print(f"  held-out error: MAPE {100 * held['mape']:.1f}% on {len(held['test_shapes'])} "
              f"shapes ({held['test_samples']:,} drafts) trained on {held['train_shapes']}; "
              f"per kernel: {kernels}")  # fmt: skip
    print(f"  time: labelling {timing['label_s']:.1f} s, held-out {timing['holdout_s']:.1f} s, "
          f"training {timing['train_s']:.1f} s, filling {timing['fill_s']:.1f} s; "
          f"total {timing['total_s']:.1f} s")  # fmt: skip
    print(f"table: {path} (back end {cfg.name}, digest {backend_digest(cfg)[:12]})")
    m = table.model
    print(f"predictor: {path.parent / m['file']} (sha256 {m['sha256'][:12]}, {m['features']} "
          f"features, layout {m['features_sha256'][:12]}): predicts new shapes at run "
          "time")  # fmt: skip
    return 0
