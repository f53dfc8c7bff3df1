"""The shapes DCC's evaluation asks for (sim/analysis/dcc_shapes.py): the train/test split."""

from __future__ import annotations

import pytest
from pimphony.sim.analysis.dcc_shapes import SplitError, split_configs

GRID = tuple((b, n) for b in (1, 2, 4, 8) for n in (512, 1024, 2048, 4096))


def test_split_is_disjoint_seeded_and_checked() -> None:
    train, test = split_configs(GRID, 5, seed=3)
    assert len(test) == 5 and len(train) == len(GRID) - 5
    assert set(train) | set(test) == set(GRID) and not set(train) & set(test)
    assert list(train) == sorted(train) and list(test) == sorted(test)
    assert split_configs(GRID, 5, seed=3) == (train, test)
    assert split_configs(GRID, 5, seed=4) != (train, test)
    with pytest.raises(SplitError, match="--test 16: a row has 16 configurations"):
        split_configs(GRID, 16, seed=0)
    with pytest.raises(SplitError, match="--test 0"):
        split_configs(GRID, 0, seed=0)
