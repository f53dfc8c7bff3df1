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

The PIM-aware copy pads each matrix on its own (``docs/sherpa.md``). Prefill/decode timing of
the strategies (TTFT, tokens/s, Fig. 10-13) is not modelled yet.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from compiler.llm import ModelSpec, load_model, weight_matrices
from models.layout import MemoryLayout, load_layout, pim_aware_shape
from sim.cli import choice_names
from sim.provenance import provenance

__all__ = [
    "DEFAULT_LAYOUT",
    "STRATEGIES",
    "Strategy",
    "StrategySpec",
    "add_arguments",
    "capacity",
    "format_capacity",
    "run",
]

DEFAULT_LAYOUT = "lpddr5x-pim"


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


STRATEGIES: dict[Strategy, StrategySpec] = {
    Strategy.WD: StrategySpec("WD", True, 0, False),
    Strategy.FACIL: StrategySpec("FACIL-O", False, 0, False),
    Strategy.DDB: StrategySpec("S-DDB", False, 2, True),
    Strategy.OWR: StrategySpec("S-OWR", False, 1, False),
}


def _buffer_bytes(spec: ModelSpec, holds_qkvo: bool) -> int:
    """One cacheable buffer: the largest weight matrix of a layer (the FF matrix for Llama
    3.2), and for DDB at least Q + K + V + O, which buffer 0 holds together (4.1, Fig. 5)."""
    mats = weight_matrices(spec)
    size = max(o * i for o, i in mats.values())
    if holds_qkvo:
        size = max(size, sum(o * i for k, (o, i) in mats.items() if k in ("q", "k", "v", "o")))
    return size * spec.element_bytes


def capacity(spec: ModelSpec, layout: MemoryLayout) -> dict[str, Any]:
    """DRAM bytes per strategy: host-friendly and PIM-aware weights, padding, buffers, and
    the saving against WD."""
    if spec.element_bytes != layout.element_bytes:
        raise ValueError(
            f"model {spec.name!r} has {spec.element_bytes}-byte weights; layout "
            f"{layout.name!r} holds {layout.element_bytes}-byte elements"
        )
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
        f"{'total GB':>9} {'saving vs WD':>13}",
    ]
    for r in result["strategies"].values():
        lines.append(
            f"{r['label']:<9} {r['host_friendly_bytes'] / gb:>16.3f} "
            f"{r['pim_aware_bytes'] / gb:>13.3f} {r['buffer_bytes'] / 1e6:>11.1f} "
            f"{r['total_bytes'] / gb:>9.3f} {100 * r['saving_vs_wd']:>12.1f}%"
        )
    return "\n".join(lines)


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
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    """Run ``pimphony sherpa``."""
    spec, layout = load_model(args.model), load_layout(args.layout)
    result = capacity(spec, layout)
    if args.strategy:
        keep = set(args.strategy)
        result["strategies"] = {k: v for k, v in result["strategies"].items() if k in keep}
    if args.json:
        print(
            json.dumps(
                {
                    **result,
                    "provenance": provenance(args, model=asdict(spec), layout=asdict(layout)),
                },
                indent=2,
            )
        )
    else:
        print(format_capacity(result))
    return 0
