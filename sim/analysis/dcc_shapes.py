"""The shapes (kernel, sizes) DCC's evaluation asks for: the points of ``pimphony dcc-figs``'s
figures, the DCC kernels of ``pimphony dcc-fig8``'s systems, and the split of a set of sizes
into training and test shapes for a predictor (``dcc-table2``, ``dcc-lut``; ``docs/dcc.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Any

import numpy as np
from pimphony.compiler.dcc.cost import Placement
from pimphony.compiler.llm import LayerOp, ModelSpec, gemv_shapes, load_model
from pimphony.models.backends import BackendConfig, load_backend
from pimphony.models.errors import PimphonyError

__all__ = [
    "ATTN_KERNEL",
    "FC_KERNEL",
    "FC_OPS",
    "FIG7_BATCHES",
    "FIG7_ELEMENTWISE",
    "FIG7_TENSOR_SIZES",
    "FIG8_BACKEND",
    "FIG8_BATCHES",
    "FIG8_MODELS",
    "FIG8_RUNS",
    "FIG9_OUTPUTS",
    "FIGURES",
    "FIGURE_BACKENDS",
    "GEMV_SIZES",
    "SAMPLE_POINTS",
    "Case",
    "Figure",
    "SplitError",
    "attention_sizes",
    "dcc_shapes",
    "fc_sizes",
    "sample_contexts",
    "split_configs",
]


class SplitError(PimphonyError, ValueError):
    """A test share that leaves no shape to train on (or none to test)."""


class Figure(StrEnum):
    """DCC's result figures reproduced as shapes."""

    FIG2 = "fig2"
    FIG6 = "fig6"
    FIG7 = "fig7"
    FIG9 = "fig9"


GEMV_SIZES = ((32, 512), (32, 4096), (64, 512), (64, 4096))  # Figs. 6-7: heads x outputs

#: Fig. 7's RED, VA and RELU panels (its x axes: "tensor size" 1024, 2048, 4096 at batch
#: size 1, 2, 4). Reading: each batch row is one tensor of that many elements (a length-N
#: vector reduced to one value, added to another, or rectified), so the kernels are
#: ``batched-red`` (B, 1, N), ``batched-va`` (B, N), ``batched-relu`` (B, N); the paper gives
#: no other dimension for these kernels (``docs/dcc.md``, Results, says why this reading).
FIG7_ELEMENTWISE: dict[str, tuple[str, Callable[[int, int], tuple[int, ...]]]] = {
    "RED": ("batched-red", lambda b, n: (b, 1, n)),
    "VA": ("batched-va", lambda b, n: (b, n)),
    "RELU": ("batched-relu", lambda b, n: (b, n)),
}
FIG7_TENSOR_SIZES = (1024, 2048, 4096)
FIG7_BATCHES = (1, 2, 4)

Case = tuple[str, str, tuple[int, ...], str, dict[str, Any]]  # backend, kernel, shape, placement


def _gemv(backend: str, batches: tuple[int, ...], sizes=GEMV_SIZES, kernel="qk") -> list[Case]:
    return [
        (backend, kernel, (b * h, t, 128), str(Placement.RESIDENT),
         {"batch": b, "size": f"{h}x{t}"})
        for b in batches
        for h, t in sizes
    ]  # fmt: skip


def _fig6(backend: str) -> list[Case]:
    """Fig. 6's points: ATTN and GEMV as :func:`_gemv`; RED "N" at batch B as Fig. 7's RED
    panel reads it (``batched-red`` (B, 1, N), :data:`FIG7_ELEMENTWISE`), batch rows a set the
    default mapping spreads over channels."""
    out = [(*c[:4], {**c[4], "kernel": "ATTN"}) for c in _gemv(backend, (1, 4), kernel="attn")]
    out += [(*c[:4], {**c[4], "kernel": "GEMV"}) for c in _gemv(backend, (1, 4))]
    kernel, shape = FIG7_ELEMENTWISE["RED"]
    out += [
        (backend, kernel, shape(b, n), str(Placement.RESIDENT),
         {"batch": b, "size": str(n), "kernel": "RED"})
        for b in (1, 4)
        for n in FIG7_TENSOR_SIZES
    ]  # fmt: skip
    return out


def _fig7(backend: str) -> list[Case]:
    out = [(*c[:4], {**c[4], "kernel": "GEMV"}) for c in _gemv(backend, (1, 4))]
    for panel, (kernel, shape) in FIG7_ELEMENTWISE.items():
        out += [
            (backend, kernel, shape(b, n), str(Placement.RESIDENT),
             {"batch": b, "size": str(n), "kernel": panel})
            for b in FIG7_BATCHES
            for n in FIG7_TENSOR_SIZES
        ]  # fmt: skip
    return out


def _fig2(backend: str) -> list[Case]:
    every = str(Placement.EVERY_CALL)
    out: list[Case] = []
    for b in (16, 28):
        for n in (2048, 4096):
            label = {"batch": b, "size": f"256x{n}"}
            out.append((backend, "red", (b * 256, n), every, {**label, "kernel": "RED"}))
            out.append((backend, "batched-gemv", (b, 256, n), every, {**label, "kernel": "GEMV"}))
    return out


#: Fig. 9's output sizes per back end (32 heads, input 128): the paper's 512, 1024, 2048 and
#: 4096 on both.
FIG9_OUTPUTS: dict[str, tuple[int, ...]] = {
    "hbm-pim": (512, 1024, 2048, 4096),
    "attacc": (512, 1024, 2048, 4096),
}


def _fig9(backend: str) -> list[Case]:
    return _gemv(backend, (1, 2, 4, 8), tuple((32, t) for t in FIG9_OUTPUTS[backend]))


#: Each figure's points on a back end.
FIGURES: dict[Figure, Callable[[str], list[Case]]] = {
    Figure.FIG2: _fig2,
    Figure.FIG6: _fig6,
    Figure.FIG7: _fig7,
    Figure.FIG9: _fig9,
}

#: The back ends each figure runs on (``--backend``), its default first. Fig. 2 is the
#: paper's on AttAcc; it ran first on HBM-PIM, which stays its default so that reports of
#: that run reproduce. Fig. 6 is AttAcc's, Fig. 7 HBM-PIM's, Fig. 9 has a panel of each.
FIGURE_BACKENDS: dict[Figure, tuple[str, ...]] = {
    Figure.FIG2: ("hbm-pim", "attacc"),
    Figure.FIG6: ("attacc",),
    Figure.FIG7: ("hbm-pim",),
    Figure.FIG9: ("hbm-pim", "attacc"),
}


#: ``pimphony dcc-fig8``'s runs (DCC Fig. 8).
FIG8_BACKEND = "attacc"
FIG8_MODELS = ("gpt3-13b-4k", "llama-33b-4k")
FIG8_BATCHES = (1, 4)
FIG8_RUNS = ((128, 2048), (2048, 128), (2048, 2048))  # (Lin, Lout), Fig. 8's three groups
#: Contexts each phase is costed at over a run's steps (a choice: attention is linear in the
#: context on both devices, so the integral is exact up to the KV-block and tiling steps; the
#: test compares 5 points with every step).
SAMPLE_POINTS = 5
ATTN_KERNEL = "attn"
FC_KERNEL = "batched-gemv"
FC_OPS = (LayerOp.QKV, LayerOp.PROJ, LayerOp.FFN1, LayerOp.FFN2)


def sample_contexts(lin: int, lout: int, points: int = SAMPLE_POINTS) -> list[int]:
    """The contexts a run of ``lout`` steps after ``lin`` tokens is costed at: ``points``
    evenly spaced from ``lin + 1`` to ``lin + lout`` (fewer if ``lout`` is smaller)."""
    xs = np.linspace(lin + 1, lin + lout, min(points, lout)).round().astype(int)
    return [int(x) for x in np.unique(xs)]


def attention_sizes(
    spec: ModelSpec, batch: int, context: int, cfg: BackendConfig
) -> tuple[int, int, int]:
    """The ``attn`` kernel's sizes of one layer: ``batch x heads`` heads, the context padded to
    whole softmax-buffer entries (``bank_groups x lanes`` tokens), ``head_dim``."""
    quantum = cfg.group.bank_groups * cfg.core.lanes
    return batch * spec.heads, -(-context // quantum) * quantum, spec.head_dim


def fc_sizes(spec: ModelSpec, batch: int) -> dict[LayerOp, tuple[int, int, int]]:
    """The ``batched-gemv`` sizes (batch, outputs, inputs) of each weight GEMM of a layer."""
    shapes = gemv_shapes(spec)
    return {op: (batch, *shapes[op]) for op in FC_OPS}


def dcc_shapes(
    models: Sequence[str] = FIG8_MODELS,
    batches: Sequence[int] = FIG8_BATCHES,
    runs: Sequence[tuple[int, int]] = FIG8_RUNS,
    backend: str = FIG8_BACKEND,
    points: int = SAMPLE_POINTS,
) -> list[tuple[str, tuple[int, ...]]]:
    """Every (kernel, sizes) whose DCC mapping the ``+dcc`` systems ask for, in first-asked
    order: attention at each sampled context, the four weight GEMMs per model and batch."""
    cfg = load_backend(backend)
    out: dict[tuple[str, tuple[int, ...]], None] = {}
    for name in models:
        spec = load_model(name)
        for b in batches:
            for lin, lout in runs:
                for x in sample_contexts(lin, lout, points):
                    out[ATTN_KERNEL, attention_sizes(spec, b, x, cfg)] = None
            for sizes in fc_sizes(spec, b).values():
                out[FC_KERNEL, sizes] = None
    return list(out)


def split_configs(
    configs: Sequence[tuple[int, ...]], test: int, seed: int
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """``configs`` shuffled by ``seed`` into (training, test); ``test`` of them are tested,
    the rest trained on (at least one of each)."""
    if not 1 <= test < len(configs):
        raise SplitError(
            f"--test {test}: a row has {len(configs)} configurations; test 1 to "
            f"{len(configs) - 1} of them so that at least one is left to train on"
        )
    order = np.random.default_rng(seed).permutation(len(configs))
    picked = [tuple(configs[i]) for i in order]
    return tuple(sorted(picked[test:])), tuple(sorted(picked[:test]))
