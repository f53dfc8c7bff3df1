"""models.jit.Widened: one compiled specialisation per pattern of None arguments; and numba
loaded without SciPy."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from numba import njit
from pimphony.models.jit import Widened


def _kernel(values, weights, out):
    """Sum of ``values`` (times ``weights`` unless None) into ``out[0]``."""
    total = 0
    for i in range(values.shape[0]):
        total += values[i] * (1 if weights is None else weights[i])
    out[0] = total
    return values.shape[0]


def test_one_specialisation_per_none_pattern():
    kernel = njit(_kernel)  # uncached: a fresh dispatcher
    call = Widened(kernel, ("values",))
    records = np.zeros(5, dtype=[("a", "u1"), ("b", "u4")])
    records["a"] = [1, 2, 3, 4, 5]
    frozen = np.arange(4, dtype=np.uint8)
    frozen.setflags(write=False)
    out = np.zeros(1, dtype=np.int64)
    inputs = [
        records["a"],  # strided
        np.arange(3, dtype=np.uint8),  # contiguous
        records["a"][:0],  # empty: contiguous
        frozen,  # read-only
    ]
    for values in inputs:
        assert call(values, None, out) == values.shape[0]
        assert out[0] == int(values.astype(np.int64).sum())
    assert len(kernel.signatures) == 1
    assert call(records["a"], np.full(5, 2, dtype=np.int64), out) == 5
    assert out[0] == 30
    assert len(kernel.signatures) == 2  # weights given: a second pattern
    # compiled callers of the kernel still compile their own specialisation
    caller = njit(lambda v, o: kernel(v, None, o))
    assert caller(np.arange(3, dtype=np.int16), out) == 3 and out[0] == 3


def test_unknown_parameter_is_refused():
    with pytest.raises(ValueError, match="no parameter"):
        Widened(njit(_kernel), ("nope",))


def test_numba_loads_without_scipy():
    pytest.importorskip("scipy")
    code = (
        "import sys, pimphony.models.jit, numba.np.arraymath;"
        "print('scipy' in sys.modules);"
        "import scipy.linalg; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "ok"]
