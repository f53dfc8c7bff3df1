"""DCC's coupled predictor (DCC, seed 003, IV-D and V): draft + back end -> end-to-end time.

Four pieces, on top of the schedule generator (:mod:`compiler.dcc.schedule`):

- :func:`draft_features`: a fixed-length vector (:data:`FEATURE_NAMES`) of a draft's
  configuration (per dimension set, padded to three sets), the kernel's sizes and tensors
  (bytes, replication over groups and cores), and the back end (``models.backends``).
- :func:`collect` and :func:`train_predictor`: "a diverse subset of drafts across different
  tensor sizes" (IV-D), pruned drafts sampled per shape, labelled by a callable
  ``label(cfg, kernel, sizes, draft) -> seconds`` (the simulator, ``compiler/dcc/cost.py``),
  and an XGBoost regressor fitted on log time with DCC's "5000 iterations with learning rate
  of 0.1" (V) as defaults. :func:`holdout` reports the error on shapes it was not trained on.
- :class:`LookupTable`: the best draft per (back end, kernel, sizes), filled offline from
  the predictor over all pruned drafts, extended at run time for a new size, saved as JSON
  with the provenance the caller gives and, beside it, the predictor that filled it
  (:meth:`Predictor.save` / :meth:`Predictor.load`, XGBoost's UBJSON, checked by SHA-256 and
  :data:`FEATURE_DIGEST`), so a new size is predicted by that same predictor. Ties (equal
  predicted time): DCC picks one at random; here the first in the generator's search order,
  so a table is reproducible.
- :func:`compare_search` / :func:`compare_shapes`: the exhaustive search (every draft, no
  pruning, no predictor, all labelled) against the pruned + predicted one (issue 17's
  acceptance).

A labeller may refuse a draft it cannot run (a :class:`~models.errors.PimphonyError`, e.g.
a share that does not fit a bank): such drafts are skipped and counted.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from pimphony.compiler.dcc.cost import Placement, draft_cost
from pimphony.compiler.dcc.cost import kernel_nest as cost_kernel_nest
from pimphony.compiler.dcc.files import model_path
from pimphony.compiler.dcc.schedule import (
    DccError,
    DccKernel,
    DimensionSet,
    Draft,
    Index,
    LoopNest,
    Part,
    dimension_sets,
    innermost_set,
    parse_index,
)
from pimphony.compiler.dcc.tune import SearchResult, generated_count, search
from pimphony.compiler.dcc.tune import kernel_drafts as tune_kernel_drafts
from pimphony.compiler.rearrange import Strategy
from pimphony.models.backends import BackendConfig, BackendKind
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import check_writable, write_atomic

__all__ = [
    "DEFAULT_LEARNING_RATE",
    "DEFAULT_N_ESTIMATORS",
    "FEATURE_DIGEST",
    "FEATURE_NAMES",
    "MAX_SETS",
    "MAX_TENSORS",
    "SEARCH_BUDGET",
    "SEARCH_VERIFY",
    "Entry",
    "HoldoutReport",
    "Label",
    "LookupTable",
    "LookupTableError",
    "PredictedSearch",
    "Predictor",
    "Samples",
    "SearchComparison",
    "SearchSummary",
    "collect",
    "compare_search",
    "compare_shapes",
    "draft_features",
    "holdout",
    "kernel_drafts",
    "kernel_nest",
    "label_drafts",
    "model_path",
    "predicted_search",
    "simulated_seconds",
    "train_predictor",
]

#: DCC V: "We trained the predictor with 5000 iterations with learning rate of 0.1".
DEFAULT_N_ESTIMATORS = 5000
DEFAULT_LEARNING_RATE = 0.1

#: DCC's search effort (IV-D) unless told otherwise: drafts the predictor labels by
#: simulation when more survive pruning, and best predicted drafts simulated before choosing.
SEARCH_BUDGET = 300
SEARCH_VERIFY = 10

#: Dimension sets and tensors a feature vector has room for (the kernels of
#: :data:`~compiler.dcc.schedule.DCC_KERNELS` have at most three sets and four tensors,
#: ATTN's Q, K, V, O); fewer are padded with zeros, more are refused.
MAX_SETS = 3
MAX_TENSORS = 4

#: ``label(cfg, kernel, sizes, draft) -> seconds``: the end-to-end time of a draft.
Label = Callable[[BackendConfig, DccKernel, tuple[int, ...], Draft], float]


class LookupTableError(DccError):
    """A lookup-table file that is not one (not JSON, a missing or wrong field, a draft that
    does not fit its kernel)."""


# --------------------------------------------------------------------------- the kernel


def _kernel(kernel: DccKernel | str) -> DccKernel:
    try:
        return DccKernel(kernel)
    except ValueError:
        allowed = ", ".join(k.value for k in DccKernel)
        raise DccError(f"kernel {kernel!r}: unknown; allowed: {allowed}") from None


def kernel_nest(
    kernel: DccKernel | str, sizes: Sequence[int], cfg: BackendConfig | None = None
) -> LoopNest:
    """The loop nest of ``kernel`` at ``sizes`` (:func:`compiler.dcc.cost.kernel_nest`), also
    refusing an unknown kernel, a size that is no integer, and tensors larger than ``cfg``'s
    PIM memory (:class:`DccError`)."""
    k = _kernel(kernel)
    sizes = tuple(sizes)
    for n in sizes:
        if isinstance(n, bool) or not isinstance(n, int | np.integer):
            raise DccError(f"kernel {k}: size {n!r} in {sizes}: sizes are integers")
    nest = cost_kernel_nest(k, tuple(int(n) for n in sizes))
    if cfg is not None:
        need = sum(math.prod(shape) for _, shape in nest.tensors) * cfg.core.element_bytes
        have = cfg.system.devices * cfg.system.device_bytes
        if need > have:
            raise DccError(
                f"kernel {k} {' x '.join(map(str, sizes))}: its tensors hold {need:,} B, more "
                f"than back end {cfg.name}'s {have:,} B ({cfg.system.devices} device(s) x "
                f"{cfg.system.device_bytes:,} B)"
            )
    return nest


def kernel_drafts(
    cfg: BackendConfig, kernel: DccKernel | str, sizes: Sequence[int], pruned: bool = True
) -> list[Draft]:
    """:func:`compiler.dcc.tune.kernel_drafts` after :func:`kernel_nest`'s checks, memoised
    (the features, the search and the lookup table ask for the same drafts)."""
    k = _kernel(kernel)
    kernel_nest(k, sizes, cfg)
    return list(_drafts(cfg, k, tuple(int(n) for n in sizes), pruned))


@lru_cache(maxsize=32)
def _drafts(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], pruned: bool
) -> tuple[Draft, ...]:
    return tuple(tune_kernel_drafts(cfg, kernel, sizes, pruned)[0])


def simulated_seconds(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], draft: Draft
) -> float:
    """The simulator as a :data:`Label`: :func:`compiler.dcc.cost.draft_cost`'s end-to-end
    ``total_s`` (its default strategy and placement)."""
    return draft_cost(cfg, kernel, sizes, draft).total_s


# --------------------------------------------------------------------------- features

_SET_FIELDS = (
    "present",
    "groups",
    "cores",
    "size",
    "group_len",
    "core_len",
    "pad_waste",
    "vectors",
    "aligned",
    "strided",
    "offset",
    "innermost",
    "member",
    "tensors",
)
_TENSOR_FIELDS = ("present", "bytes", "rep_groups", "rep_cores", "moved_bytes", "group_bytes")
_DRAFT_FIELDS = (
    "groups_used",
    "cores_used",
    "core_elements",
    "core_vectors",
    "moved_bytes",
    "group_bytes",
)
_BACKEND_FIELDS = (
    *(f"kind={k.value}" for k in BackendKind),
    "groups",
    "cores_per_group",
    "lanes",
    "element_bytes",
    "core_mhz",
    "banks_per_core",
    "broadcast",
    "group_bus_gbps",
    "bus_gbps",
    "internal_gbps",
    "host_gbps",
    "onchip_bytes",
    "buffer_bytes",
    "row_bytes",
)
_KERNEL_FIELDS = (
    *(f"kernel={k.value}" for k in DccKernel),
    *(f"size{j}" for j in range(MAX_SETS)),
    "iterations",
    "bytes",
    "sets",
)

#: The name of every feature, in vector order.
FEATURE_NAMES: tuple[str, ...] = (
    *(f"kernel.{f}" for f in _KERNEL_FIELDS),
    *(f"backend.{f}" for f in _BACKEND_FIELDS),
    *(f"set{k}.{f}" for k in range(MAX_SETS) for f in _SET_FIELDS),
    *(f"tensor{j}.{f}" for j in range(MAX_TENSORS) for f in _TENSOR_FIELDS),
    *(f"draft.{f}" for f in _DRAFT_FIELDS),
)

#: SHA-256 of :data:`FEATURE_NAMES` (newline-joined): the feature layout a saved predictor
#: was trained on, so one trained on another layout is refused.
FEATURE_DIGEST = hashlib.sha256("\n".join(FEATURE_NAMES).encode()).hexdigest()


@cache
def _backend_block(cfg: BackendConfig) -> tuple[float, ...]:
    host = cfg.host()
    return (
        *(float(cfg.kind == k) for k in BackendKind),
        cfg.groups,
        cfg.cores_per_group,
        cfg.core.lanes,
        cfg.core.element_bytes,
        cfg.core.freq_mhz,
        cfg.core.banks,
        float(cfg.group.broadcast),
        cfg.group.bus_gbps,
        cfg.bus_gbps,
        cfg.internal_gbps,
        host.memory.bandwidth_gbps * host.memory.efficiency,
        cfg.system.onchip_bytes,
        cfg.group.buffer_bytes,
        cfg.group.row_bytes,
    )


@dataclass(frozen=True)
class _Context:
    """What every draft of one (back end, kernel, sizes) shares."""

    head: tuple[float, ...]  # kernel and back-end blocks
    sets: tuple[DimensionSet, ...]
    inner: int | None
    tensor_bytes: tuple[int, ...]
    spans: tuple[tuple[int, ...], ...]  # per tensor, the sets it has a dimension in
    set_tensors: tuple[int, ...]  # per set, how many tensors span it
    lanes: int


@lru_cache(maxsize=256)
def _context(cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...]) -> _Context:
    nest = kernel_nest(kernel, sizes, cfg)
    sets = dimension_sets(nest)
    if len(sets) > MAX_SETS or len(nest.tensors) > MAX_TENSORS:
        raise DccError(
            f"{kernel}: {len(sets)} dimension sets and {len(nest.tensors)} tensors; features "
            f"have room for {MAX_SETS} and {MAX_TENSORS}"
        )
    where = {d: k for k, s in enumerate(sets) for d, _, _ in s.members}
    spans = tuple(
        tuple(sorted({where[f"{t}{d}"] for d in range(len(shape)) if f"{t}{d}" in where}))
        for t, shape in nest.tensors
    )
    eb = cfg.core.element_bytes
    tensor_bytes = tuple(math.prod(shape) * eb for _, shape in nest.tensors)
    padded = (*sizes, *([0] * (MAX_SETS - len(sizes))))
    head = (
        *(float(kernel == k) for k in DccKernel),
        *padded,
        math.prod(n for _, n in nest.loops),
        sum(tensor_bytes),
        len(sets),
        *_backend_block(cfg),
    )
    return _Context(
        head,
        tuple(sets),
        innermost_set(nest, sets),
        tensor_bytes,
        spans,
        tuple(sum(k in s for s in spans) for k in range(len(sets))),
        cfg.core.lanes,
    )


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _features(ctx: _Context, draft: Draft) -> list[float]:
    if len(draft) != len(ctx.sets):
        raise DccError(f"a draft of {len(draft)} part(s) for a kernel of {len(ctx.sets)} sets")
    out = list(ctx.head)
    core_len = []
    for k, (p, s) in enumerate(zip(draft, ctx.sets, strict=True)):
        members = [d for d, _, _ in s.members]
        if p.dim not in members:
            raise DccError(f"part {k} maps {p.dim}, not a dimension of set {k} ({members})")
        g_len = _ceil(p.size, p.groups)
        c_len = _ceil(g_len, p.cores)
        core_len.append(c_len)
        out += (
            1.0,
            p.groups,
            p.cores,
            p.size,
            g_len,
            c_len,
            (p.groups * p.cores * c_len - p.size) / p.size,
            _ceil(c_len, ctx.lanes),
            float(c_len % ctx.lanes == 0),
            float(p.function.scale != 1),
            p.function.offset,
            float(k == ctx.inner),
            members.index(p.dim),
            ctx.set_tensors[k],
        )
    out += [0.0] * (len(_SET_FIELDS) * (MAX_SETS - len(draft)))
    moved = group_total = 0
    for span, nbytes in zip(ctx.spans, ctx.tensor_bytes, strict=True):
        rep_g = math.prod(p.groups for k, p in enumerate(draft) if k not in span)
        rep_c = math.prod(p.cores for k, p in enumerate(draft) if k not in span)
        share = math.prod(
            _ceil(p.size, p.groups) / p.size for k, p in enumerate(draft) if k in span
        )
        g_bytes = nbytes * share
        moved += nbytes * rep_g
        group_total += g_bytes
        out += (1.0, nbytes, rep_g, rep_c, nbytes * rep_g, g_bytes)
    out += [0.0] * (len(_TENSOR_FIELDS) * (MAX_TENSORS - len(ctx.spans)))
    inner = ctx.inner
    vectors = math.prod(_ceil(c, ctx.lanes) if k == inner else c for k, c in enumerate(core_len))
    out += (
        math.prod(p.groups for p in draft),
        math.prod(p.cores for p in draft),
        math.prod(core_len),
        vectors,
        moved,
        group_total,
    )
    return out


def draft_features(
    kernel: DccKernel | str, sizes: Sequence[int], draft: Draft, cfg: BackendConfig
) -> np.ndarray:
    """The feature vector (:data:`FEATURE_NAMES`, float64) of ``draft`` of ``kernel`` at
    ``sizes`` on ``cfg``."""
    k = _kernel(kernel)
    return np.asarray(_features(_context(cfg, k, tuple(sizes)), draft), dtype=np.float64)


def _feature_matrix(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], ds: Sequence[Draft]
) -> np.ndarray:
    ctx = _context(cfg, kernel, sizes)
    x = np.empty((len(ds), len(FEATURE_NAMES)))
    for r, d in enumerate(ds):
        x[r] = _features(ctx, d)
    return x


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class Samples:
    """Labelled drafts: one row of ``x`` and one time in ``seconds`` per ``(backend, kernel,
    sizes, draft)`` of ``rows``; ``refused`` drafts the labeller could not run."""

    x: np.ndarray
    seconds: np.ndarray
    rows: tuple[tuple[str, DccKernel, tuple[int, ...], Draft], ...]
    refused: int = 0
    label_s: float = 0.0

    def __add__(self, other: Samples) -> Samples:
        return Samples(
            np.vstack([self.x, other.x]),
            np.concatenate([self.seconds, other.seconds]),
            self.rows + other.rows,
            self.refused + other.refused,
            self.label_s + other.label_s,
        )


def label_drafts(
    cfg: BackendConfig, kernel: DccKernel, sizes: tuple[int, ...], ds: Sequence[Draft], label
) -> tuple[list[Draft], list[float], int, str]:
    """Label each of ``ds``: the drafts the labeller runs, their times, how many it refused
    (a :class:`~models.errors.PimphonyError`) and its first refusal's message."""
    kept, times, refused, first = [], [], 0, ""
    for d in ds:
        try:
            t = float(label(cfg, kernel, sizes, d))
        except PimphonyError as e:
            refused += 1
            first = first or str(e)
            continue
        if not (t > 0 and math.isfinite(t)):
            raise DccError(f"label({kernel} {sizes}, {_show(d)}) = {t}; a time must be > 0")
        kept.append(d)
        times.append(t)
    return kept, times, refused, first


def collect(
    cfg: BackendConfig,
    kernel: DccKernel | str,
    shapes: Iterable[Sequence[int]],
    label: Label,
    per_shape: int,
    seed: int = 0,
) -> Samples:
    """Training samples: per shape, ``per_shape`` pruned drafts drawn without replacement
    (all of them if fewer), labelled by ``label``."""
    k = _kernel(kernel)
    if per_shape < 1:
        raise DccError(f"per_shape = {per_shape}; must be at least 1")
    rng = np.random.default_rng(seed)
    xs, ys, rows, refused, spent, why = [], [], [], 0, 0.0, ""
    for shape in shapes:
        sizes = tuple(int(n) for n in shape)
        pool = kernel_drafts(cfg, k, sizes)
        pick = sorted(rng.choice(len(pool), min(per_shape, len(pool)), replace=False))
        t0 = time.perf_counter()
        ds, ts, r, first = label_drafts(cfg, k, sizes, [pool[i] for i in pick], label)
        why = why or first
        spent += time.perf_counter() - t0
        refused += r
        if ds:
            xs.append(_feature_matrix(cfg, k, sizes, ds))
            ys += ts
            rows += [(cfg.name, k, sizes, d) for d in ds]
    if not rows:
        raise DccError(
            f"{k} on {cfg.name}: no draft could be labelled ({refused} refused; first: {why})"
        )
    return Samples(np.vstack(xs), np.asarray(ys), tuple(rows), refused, spent)


@dataclass
class Predictor:
    """A trained regressor: features -> log seconds. ``info`` says how it was trained."""

    model: Any  # xgboost.Booster
    info: dict[str, Any] = field(default_factory=dict)

    def predict_x(self, x: np.ndarray) -> np.ndarray:
        """Predicted seconds of feature rows ``x``."""
        import xgboost

        return np.exp(self.model.predict(xgboost.DMatrix(np.atleast_2d(x))).astype(np.float64))

    def predict(
        self,
        cfg: BackendConfig,
        kernel: DccKernel | str,
        sizes: Sequence[int],
        ds: Sequence[Draft],
    ) -> np.ndarray:
        """Predicted seconds of each of ``ds``."""
        k = _kernel(kernel)
        if not ds:
            return np.empty(0)
        return self.predict_x(_feature_matrix(cfg, k, tuple(sizes), ds))

    def best(
        self, cfg: BackendConfig, kernel: DccKernel | str, sizes: Sequence[int]
    ) -> tuple[Draft, float, int]:
        """The pruned draft with the lowest predicted time (the first in search order on a
        tie), that time, and how many drafts were predicted."""
        ds = kernel_drafts(cfg, kernel, sizes)
        t = self.predict(cfg, kernel, sizes, ds)
        i = int(np.argmin(t))  # argmin returns the first of equal minima
        return ds[i], float(t[i]), len(ds)

    def save(self, path: str | Path, overwrite: bool = False) -> dict[str, Any]:
        """Write the booster atomically in XGBoost's own UBJSON format (an existing file
        only with ``overwrite``); return its record: the file's name, SHA-256 and the
        feature layout (:data:`FEATURE_DIGEST`) :meth:`load` checks."""
        data = bytes(self.model.save_raw(raw_format="ubj"))
        path = write_atomic(path, data, overwrite=overwrite)
        return {"file": path.name, "format": _MODEL_FORMAT,
                "sha256": hashlib.sha256(data).hexdigest(),
                "features": len(FEATURE_NAMES), "features_sha256": FEATURE_DIGEST}  # fmt: skip

    @classmethod
    def load(cls, path: str | Path, record: dict[str, Any], info: dict | None = None) -> Predictor:
        """The predictor :meth:`save` wrote to ``path`` with ``record``;
        :class:`LookupTableError` in one line if the file is missing, its bytes are not the
        recorded ones, its feature layout is not this code's, or XGBoost cannot read it."""
        import xgboost

        path = Path(path)
        where = f"predictor {path}"
        if record.get("format") != _MODEL_FORMAT:
            raise LookupTableError(f"{where}: format {record.get('format')!r}, expected "
                                   f"{_MODEL_FORMAT!r}")  # fmt: skip
        if (record.get("features"), record.get("features_sha256")) != (
            len(FEATURE_NAMES), FEATURE_DIGEST
        ):  # fmt: skip
            raise LookupTableError(
                f"{where}: trained on {record.get('features')} features (layout "
                f"{str(record.get('features_sha256'))[:12]}), this code has {len(FEATURE_NAMES)} "
                f"(layout {FEATURE_DIGEST[:12]}); refill the table (pimphony dcc-lut --force)"
            )
        try:
            data = path.read_bytes()
        except OSError as e:
            raise LookupTableError(f"{where}: cannot read it ({e.strerror}); refill the "
                                   "table (pimphony dcc-lut --force)") from None  # fmt: skip
        digest = hashlib.sha256(data).hexdigest()
        if digest != record.get("sha256"):
            raise LookupTableError(
                f"{where}: its bytes digest to {digest[:12]}, the table records "
                f"{str(record.get('sha256'))[:12]}: not the model the table was filled with"
            )
        booster = xgboost.Booster()
        try:
            booster.load_model(bytearray(data))
        except xgboost.core.XGBoostError:
            raise LookupTableError(f"{where}: not an XGBoost model XGBoost "
                                   f"{xgboost.__version__} reads") from None  # fmt: skip
        if booster.num_features() != len(FEATURE_NAMES):
            raise LookupTableError(
                f"{where}: the model takes {booster.num_features()} features, this code has "
                f"{len(FEATURE_NAMES)}"
            )
        return cls(booster, dict(info or {}))


#: How :meth:`Predictor.save` writes the booster.
_MODEL_FORMAT = "xgboost-ubj"


def train_predictor(
    samples: Samples,
    n_estimators: int = DEFAULT_N_ESTIMATORS,
    learning_rate: float = DEFAULT_LEARNING_RATE,
    seed: int = 0,
    n_jobs: int = 1,
) -> Predictor:
    """XGBoost regression trees fitted on ``log(seconds)``: ``xgboost.train`` with squared
    error, ``n_estimators`` rounds at ``learning_rate`` (DCC V's 5000 and 0.1 by default),
    XGBoost's defaults otherwise (the paper gives no others). This is the model
    ``xgboost.XGBRegressor`` builds, without its scikit-learn dependency."""
    import xgboost

    if n_estimators < 1 or not 0 < learning_rate <= 1:
        raise DccError(
            f"n_estimators = {n_estimators}, learning_rate = {learning_rate}: need >= 1 and "
            "in (0, 1]"
        )
    params = {
        "objective": "reg:squarederror",
        "eta": learning_rate,
        "seed": seed,
        "nthread": n_jobs,
        "tree_method": "hist",
    }
    t0 = time.perf_counter()
    model = xgboost.train(params, xgboost.DMatrix(samples.x, np.log(samples.seconds)), n_estimators)
    info = {
        "model": f"xgboost {xgboost.__version__} gradient-boosted trees on log seconds",
        "n_estimators": n_estimators,
        "learning_rate": learning_rate,
        "seed": seed,
        "samples": len(samples.rows),
        "features": len(FEATURE_NAMES),
        "train_s": round(time.perf_counter() - t0, 3),
    }
    return Predictor(model, info)


def _mape(pred: np.ndarray, true: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - true) / true))


@dataclass(frozen=True)
class HoldoutReport:
    """Error on shapes the predictor never saw: ``mape`` over sampled drafts; per held-out
    shape, whether the predicted best of all pruned drafts is a labelled best (``agree``)
    and its labelled time over the labelled best (``ratio`` >= 1)."""

    mape: float
    agree: int
    shapes: int
    ratios: tuple[float, ...]
    train_samples: int
    test_samples: int
    train_s: float
    label_s: float

    @property
    def geomean_ratio(self) -> float:
        """Geometric mean of ``ratios``."""
        return float(np.exp(np.mean(np.log(self.ratios))))


def holdout(
    cfg: BackendConfig,
    kernel: DccKernel | str,
    train_shapes: Sequence[Sequence[int]],
    test_shapes: Sequence[Sequence[int]],
    label: Label,
    per_shape: int,
    seed: int = 0,
    **train: Any,
) -> tuple[Predictor, HoldoutReport]:
    """Train on ``train_shapes``, then measure on ``test_shapes``: MAPE over ``per_shape``
    sampled drafts each, and the best-draft agreement over all their pruned drafts."""
    k = _kernel(kernel)
    tr = collect(cfg, k, train_shapes, label, per_shape, seed)
    te = collect(cfg, k, test_shapes, label, per_shape, seed + 1)
    pred = train_predictor(tr, seed=seed, **train)
    mape = _mape(pred.predict_x(te.x), te.seconds)
    agree, ratios, spent = 0, [], tr.label_s + te.label_s
    for shape in test_shapes:
        sizes = tuple(shape)
        t0 = time.perf_counter()
        ds, ts, refused, first = label_drafts(cfg, k, sizes, kernel_drafts(cfg, k, sizes), label)
        spent += time.perf_counter() - t0
        if not ds:
            raise DccError(
                f"{k} {sizes} on {cfg.name}: the labeller refused all {refused} pruned drafts "
                f"(first: {first})"
            )
        p = pred.predict(cfg, k, sizes, ds)
        chosen, best = ts[int(np.argmin(p))], min(ts)
        agree += chosen == best
        ratios.append(chosen / best)
    report = HoldoutReport(
        mape,
        agree,
        len(test_shapes),
        tuple(ratios),
        len(tr.rows),
        len(te.rows),
        pred.info["train_s"],
        spent,
    )
    return pred, report


# --------------------------------------------------------------------------- search


@dataclass(frozen=True)
class SearchComparison:
    """One shape: the exhaustive best (every draft labelled) and the pruned + predicted pick
    (its labelled time). ``same_draft``: the very same draft; ``agree``: equal labelled time
    (a rule-1 twin of the best, with another representative dimension, also agrees).
    ``pruned_best_s``: the best labelled time among the pruned drafts, so a loss is told
    apart as pruning's (``pruned_best_s > exhaustive_s``) or the predictor's. Wall times:
    labelling every draft; generating, pruning and predicting (no labelling)."""

    sizes: tuple[int, ...]
    exhaustive: Draft
    exhaustive_s: float
    drafts: int
    refused: int
    predicted: Draft
    predicted_s: float  # the predictor's estimate
    predicted_label_s: float  # the labeller's time of the predicted pick
    pruned: int
    pruned_best_s: float
    exhaustive_wall_s: float
    predicted_wall_s: float

    @property
    def same_draft(self) -> bool:
        """The pick is the exhaustive best itself."""
        return self.predicted == self.exhaustive

    @property
    def agree(self) -> bool:
        """The pick is as fast (labelled) as the exhaustive best."""
        return self.predicted_label_s == self.exhaustive_s

    @property
    def ratio(self) -> float:
        """Labelled time of the pick over the exhaustive best (>= 1)."""
        return self.predicted_label_s / self.exhaustive_s


def compare_search(
    cfg: BackendConfig,
    kernel: DccKernel | str,
    sizes: Sequence[int],
    label: Label,
    predictor: Predictor,
) -> SearchComparison:
    """Exhaustive search vs pruned + predicted search for one shape. If the labeller refused
    the predicted pick, the next by predicted time is taken."""
    k = _kernel(kernel)
    sizes = tuple(sizes)
    t0 = time.perf_counter()
    every = kernel_drafts(cfg, k, sizes, pruned=False)
    ds, ts, refused, first = label_drafts(cfg, k, sizes, every, label)
    if not ds:
        raise DccError(
            f"{k} {sizes} on {cfg.name}: the labeller refused all {len(every)} drafts "
            f"(first: {first})"
        )
    i = int(np.argmin(ts))
    t1 = time.perf_counter()
    pool = kernel_drafts(cfg, k, sizes)
    p = predictor.predict(cfg, k, sizes, pool)
    t2 = time.perf_counter()
    labels = dict(zip(ds, ts, strict=True))
    order = [j for j in np.argsort(p, kind="stable") if pool[j] in labels]
    if not order:
        raise DccError(f"{k} {sizes} on {cfg.name}: the labeller refused every pruned draft")
    j = order[0]
    return SearchComparison(
        sizes, ds[i], ts[i], len(every), refused, pool[j], float(p[j]), labels[pool[j]],
        len(pool), min(labels[d] for d in pool if d in labels), t1 - t0, t2 - t1,
    )  # fmt: skip


@dataclass(frozen=True)
class SearchSummary:
    """:func:`compare_search` over several shapes."""

    rows: tuple[SearchComparison, ...]

    @property
    def agree(self) -> int:
        """Shapes whose pick is as fast as the exhaustive best."""
        return sum(r.agree for r in self.rows)

    @property
    def geomean_ratio(self) -> float:
        """Geometric mean of the labelled pick / best ratios."""
        return float(np.exp(np.mean([np.log(r.ratio) for r in self.rows])))

    @property
    def worst_ratio(self) -> float:
        """The largest labelled pick / best ratio."""
        return max(r.ratio for r in self.rows)


def compare_shapes(
    cfg: BackendConfig,
    kernel: DccKernel | str,
    shapes: Iterable[Sequence[int]],
    label: Label,
    predictor: Predictor,
) -> SearchSummary:
    """:func:`compare_search` for each of ``shapes``."""
    return SearchSummary(tuple(compare_search(cfg, kernel, s, label, predictor) for s in shapes))


# --------------------------------------------------------------------------- lookup table


def _show(d: Draft) -> str:
    return " ".join(map(str, d))


def _part_json(p: Part) -> dict[str, Any]:
    return {"groups": p.groups, "cores": p.cores, "dim": p.dim, "size": p.size,
            "function": str(p.function)}  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """The best draft of one (back end, kernel, sizes), its predicted time (None when every
    draft was simulated, no predictor), how many drafts were predicted or searched, whether
    it was filled ``offline`` or at ``runtime``, and its simulated time if it was simulated."""

    draft: Draft
    predicted_s: float | None
    drafts: int
    origin: str
    simulated_s: float | None = None


_FORMAT = "pimphony-dcc-lookup"
_VERSION = 1
_ORIGINS = ("offline", "runtime")


_MODEL_FIELDS = {"file": str, "format": str, "sha256": str, "features": int,
                 "features_sha256": str}  # fmt: skip


class LookupTable:
    """Best drafts per (back end name, kernel, sizes) (DCC IV-D). ``provenance``: what
    produced the table (the caller's record, e.g. ``sim.provenance``); ``predictor``: the
    ``info`` of the predictor that filled it; ``model``: the record of that predictor's saved
    file (:meth:`Predictor.save`; None in a table written without it); ``offline``: that
    predictor once :meth:`load_predictor` has read it (or the one :meth:`save` writes)."""

    def __init__(
        self, provenance: dict[str, Any] | None = None, predictor: dict[str, Any] | None = None
    ) -> None:
        self.provenance = dict(provenance or {})
        self.predictor = dict(predictor or {})
        self.entries: dict[tuple[str, DccKernel, tuple[int, ...]], Entry] = {}
        self.model: dict[str, Any] | None = None
        self.offline: Predictor | None = None

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, backend: str, kernel: DccKernel | str, sizes: Sequence[int]) -> Entry | None:
        """The recorded entry, or None."""
        return self.entries.get((backend, _kernel(kernel), tuple(sizes)))

    def _record(self, predictor, cfg, kernel, sizes, origin: str) -> Entry:
        draft, t, n = predictor.best(cfg, kernel, sizes)
        entry = Entry(draft, t, n, origin)
        self.entries[(cfg.name, _kernel(kernel), tuple(sizes))] = entry
        self.predictor = self.predictor or dict(predictor.info)
        return entry

    def fill(
        self,
        predictor: Predictor,
        cfg: BackendConfig,
        kernel: DccKernel | str,
        shapes: Iterable[Sequence[int]],
    ) -> None:
        """Offline: predict every pruned draft of each shape, record the best."""
        for s in shapes:
            self._record(predictor, cfg, kernel, tuple(s), "offline")

    def best(
        self,
        predictor: Predictor,
        cfg: BackendConfig,
        kernel: DccKernel | str,
        sizes: Sequence[int],
    ) -> Entry:
        """At run time: the recorded entry, or (a new size) predict, record and return it."""
        return self.get(cfg.name, kernel, sizes) or self._record(
            predictor, cfg, kernel, tuple(sizes), "runtime"
        )

    def to_json(self) -> dict[str, Any]:
        """The table as a JSON-able dict."""
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "provenance": self.provenance,
            "predictor": self.predictor,
            "model": self.model,
            "entries": [
                {"backend": b, "kernel": k.value, "sizes": list(s),
                 "draft": [_part_json(p) for p in e.draft], "predicted_s": e.predicted_s,
                 "drafts": e.drafts, "origin": e.origin, "simulated_s": e.simulated_s}
                for (b, k, s), e in self.entries.items()
            ],
        }  # fmt: skip

    def save(
        self, path: str | Path, overwrite: bool = False, predictor: Predictor | None = None
    ) -> Path:
        """Write the table atomically (an existing file only with ``overwrite``); with
        ``predictor``, first that predictor beside it (:func:`model_path`, also only with
        ``overwrite`` if it exists), recorded in ``model``."""
        if predictor is not None:
            check_writable(path, overwrite)  # neither file written if the table may not be
            self.model = predictor.save(model_path(path), overwrite=overwrite)
            self.offline = predictor
        text = json.dumps(self.to_json(), indent=1) + "\n"
        return write_atomic(path, text.encode(), overwrite=overwrite)

    def load_predictor(self, path: str | Path) -> Predictor | None:
        """The offline predictor saved beside the table in ``path`` (:meth:`Predictor.load`'s
        checks), kept as ``offline``; None if the table records none (an older file)."""
        if self.model is None:
            return None
        self.offline = Predictor.load(Path(path).parent / self.model["file"], self.model,
                                      self.predictor)  # fmt: skip
        return self.offline

    @classmethod
    def load(cls, path: str | Path) -> LookupTable:
        """Read a table written by :meth:`save`; :class:`LookupTableError` naming the file
        and the field if it is not one."""
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise LookupTableError(f"{path}: not a lookup table ({e})") from None
        return cls.from_json(raw, str(path))

    @classmethod
    def from_json(cls, raw: Any, where: str = "lookup table") -> LookupTable:
        """A table from :meth:`to_json`'s dict (checked field by field)."""

        def need(obj: Any, key: str, kind: type | tuple[type, ...], at: str) -> Any:
            if not isinstance(obj, dict) or key not in obj:
                raise LookupTableError(f"{where}: {at}: field {key!r} is missing")
            v = obj[key]
            if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
                raise LookupTableError(f"{where}: {at}.{key} = {v!r}: wrong type")
            return v

        if need(raw, "format", str, "top") != _FORMAT:
            raise LookupTableError(f"{where}: format = {raw['format']!r}, expected {_FORMAT!r}")
        if need(raw, "version", int, "top") != _VERSION:
            raise LookupTableError(f"{where}: version {raw['version']}, this reads {_VERSION}")
        table = cls(need(raw, "provenance", dict, "top"), need(raw, "predictor", dict, "top"))
        if raw.get("model") is not None:  # absent or null: a table without a saved predictor
            for key, kind in _MODEL_FIELDS.items():
                need(raw["model"], key, kind, "model")
            name = raw["model"]["file"]
            if not name or Path(name).name != name:
                raise LookupTableError(f"{where}: model.file = {name!r}: a file name beside "
                                       "the table")  # fmt: skip
            table.model = dict(raw["model"])
        for n, e in enumerate(need(raw, "entries", list, "top")):
            at = f"entries[{n}]"
            backend = need(e, "backend", str, at)
            try:
                kernel = _kernel(need(e, "kernel", str, at))
                sizes = tuple(need(e, "sizes", list, at))
                sets = dimension_sets(kernel_nest(kernel, sizes))
                draft = tuple(
                    _parse_part(p, s, where, f"{at}.draft[{i}]", need)
                    for i, (p, s) in enumerate(zip(need(e, "draft", list, at), sets, strict=True))
                )
            except LookupTableError:
                raise
            except ValueError as err:  # DccError is one; zip(strict) raises a plain one
                raise LookupTableError(f"{where}: {at}: {err}") from None
            origin = need(e, "origin", str, at)
            if origin not in _ORIGINS:
                raise LookupTableError(f"{where}: {at}.origin = {origin!r}; allowed {_ORIGINS}")
            timed = (int, float, type(None))
            t = need(e, "predicted_s", timed, at)
            sim = need(e, "simulated_s", timed, at) if "simulated_s" in e else None
            table.entries[(backend, kernel, sizes)] = Entry(
                draft, None if t is None else float(t), need(e, "drafts", int, at), origin,
                None if sim is None else float(sim),
            )  # fmt: skip
        return table


def _parse_part(p: Any, s: DimensionSet, where: str, at: str, need) -> Part:
    members = {d: (n, fs) for d, n, fs in s.members}
    dim = need(p, "dim", str, at)
    if dim not in members:
        raise LookupTableError(f"{where}: {at}.dim = {dim!r}: not in this set ({sorted(members)})")
    size, fs = members[dim]
    f: Index = parse_index(need(p, "function", str, at))
    if f not in fs:
        raise LookupTableError(
            f"{where}: {at}.function = {f}: {dim} is indexed by {list(map(str, fs))}"
        )
    if need(p, "size", int, at) != size:
        raise LookupTableError(f"{where}: {at}.size = {p['size']}: {dim} has {size}")
    g, c = need(p, "groups", int, at), need(p, "cores", int, at)
    if g < 1 or c < 1:
        raise LookupTableError(f"{where}: {at}: groups = {g}, cores = {c}; both must be >= 1")
    return Part(g, c, dim, size, f)


# --------------------------------------------------------------------------- the tuned search


@dataclass(frozen=True)
class PredictedSearch:
    """DCC's search at run time (IV-D): ``sampled`` drafts simulated to train the predictor,
    every candidate predicted, the ``verify`` best predicted simulated; the chosen draft is
    the best simulated of all that were."""

    result: SearchResult
    candidates: int
    sampled: int
    verified: int
    predicted_s: dict[Draft, float]
    info: dict[str, Any]


def predicted_search(
    cfg: BackendConfig,
    kernel: DccKernel | str,
    sizes: Sequence[int],
    budget: int = SEARCH_BUDGET,
    verify: int = SEARCH_VERIFY,
    strategy: Strategy | None = None,
    placement: Placement = Placement.RESIDENT,
    n_estimators: int = DEFAULT_N_ESTIMATORS,
    seed: int = 0,
) -> PredictedSearch:
    """Search ``kernel`` at ``sizes`` on ``cfg`` simulating at most ``budget + verify`` drafts:
    all of them if the pruned drafts are no more than ``budget``, else ``budget`` drawn at
    random (``seed``) to train a predictor, then the ``verify`` best predicted."""
    k = _kernel(kernel)
    sizes = tuple(int(n) for n in sizes)
    if budget < 1 or verify < 1:
        raise DccError(f"budget = {budget}, verify = {verify}: both must be at least 1")
    pool = kernel_drafts(cfg, k, sizes)
    sets = dimension_sets(kernel_nest(k, sizes, cfg))
    total = generated_count(sets, cfg.groups, cfg.cores_per_group)
    t0 = time.perf_counter()
    if len(pool) <= budget:
        res = search(cfg, k, sizes, strategy=strategy, candidates=pool, placement=placement)
        res = replace(res, generated=total, seconds=time.perf_counter() - t0)
        return PredictedSearch(res, len(pool), len(pool), 0, {}, {"predictor": "not needed"})

    def label(c: BackendConfig, kk: DccKernel, s: tuple[int, ...], d: Draft) -> float:
        return draft_cost(c, kk, s, d, strategy, placement).total_s

    samples = collect(cfg, k, [sizes], label, budget, seed)
    model = train_predictor(samples, n_estimators=n_estimators, seed=seed)
    predicted = model.predict(cfg, k, sizes, pool)
    order = np.argsort(predicted, kind="stable")[:verify]
    chosen = [pool[i] for i in order]
    sampled = {row[3] for row in samples.rows}
    res = search(
        cfg, k, sizes, strategy=strategy, placement=placement,
        candidates=[*chosen, *(d for d in pool if d in sampled and d not in set(chosen))],
    )  # fmt: skip
    res = replace(res, generated=total, seconds=time.perf_counter() - t0)
    info = dict(model.info, label_s=round(samples.label_s, 3), refused=samples.refused)
    return PredictedSearch(
        res, len(pool), len(samples.rows), len(chosen),
        {pool[i]: float(predicted[i]) for i in range(len(pool))}, info,
    )  # fmt: skip
