"""The (TP, PP) split search (sim/systems/search.py)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from pimphony.compiler.llm import load_model
from pimphony.sim.systems.search import best_split, valid_splits


def test_valid_splits_hand_enumerated() -> None:
    # llama-3.1-8b: 8 KV heads, 32 heads, 14336 intermediate, 32 layers. Of 12 = TP x PP,
    # TP 12, 6 and 3 do not divide the 8 KV heads.
    assert valid_splits(load_model("llama-3.1-8b"), 12) == [(4, 3), (2, 6), (1, 12)]
    # 16 modules: TP 16 exceeds the KV heads.
    assert valid_splits(load_model("llama-3.1-8b"), 16) == [(8, 2), (4, 4), (2, 8), (1, 16)]
    # llm-7b (32 KV heads): every divisor of 8, most TP first.
    assert valid_splits(load_model("llm-7b"), 8) == [(8, 1), (4, 2), (2, 4), (1, 8)]
    assert valid_splits(load_model("llm-7b"), 1) == [(1, 1)]


def test_valid_splits_refuse_more_stages_than_layers() -> None:
    spec = dataclasses.replace(load_model("llm-7b"), layers=2)
    # PP 8 and PP 4 exceed 2 layers; TP 3 divides neither 32 heads nor 11008.
    assert valid_splits(spec, 8) == [(8, 1), (4, 2)]
    assert valid_splits(spec, 3) == []


def _step(tp: int, pp: int, speed: dict[tuple[int, int], float]) -> SimpleNamespace:
    return SimpleNamespace(tp=tp, pp=pp, tokens_per_s=speed[(tp, pp)], seconds=1 / speed[(tp, pp)])


def test_best_split_picks_the_largest_key_and_keeps_every_try() -> None:
    speed = {(8, 1): 10.0, (4, 2): 30.0, (2, 4): 20.0, (1, 8): 5.0}
    splits = list(speed)
    search = best_split(lambda tp, pp: _step(tp, pp, speed), splits)
    assert search.split == (4, 2) and search.best.tokens_per_s == 30.0
    assert [s for s, _ in search.tried] == splits
    assert [r.tokens_per_s for r in search.results] == [10.0, 30.0, 20.0, 5.0]
    # Another key: the largest negated step time is the fastest too; the smallest speed wins
    # under a negated key.
    assert best_split(lambda t, p: _step(t, p, speed), splits, key=lambda r: -r.seconds).split == (
        4,
        2,
    )
    assert best_split(
        lambda t, p: _step(t, p, speed), splits, key=lambda r: -r.tokens_per_s
    ).split == (
        1,
        8,
    )


def test_best_split_ties_go_to_the_first_tried() -> None:
    speed = {(8, 1): 10.0, (4, 2): 30.0, (2, 4): 30.0, (1, 8): 30.0}
    assert best_split(lambda tp, pp: _step(tp, pp, speed), list(speed)).split == (4, 2)
    assert best_split(lambda tp, pp: _step(tp, pp, speed), list(speed)[::-1]).split == (1, 8)


def test_best_split_runs_each_split_once_and_refuses_none() -> None:
    calls: list[tuple[int, int]] = []

    def run(tp: int, pp: int) -> SimpleNamespace:
        calls.append((tp, pp))
        return SimpleNamespace(tokens_per_s=float(tp))

    best_split(run, [(2, 1), (1, 2)])
    assert calls == [(2, 1), (1, 2)]
    with pytest.raises(ValueError, match="no split"):
        best_split(run, [])
