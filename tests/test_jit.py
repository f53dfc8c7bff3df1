"""models.jit: numba loaded on a kernel's first compiled use (without SciPy), kernels run as
plain Python inside interpreted() before that with the compiled kernels' results, and Widened's
one compiled specialisation per pattern of None arguments."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from pimphony.compiler.kernels import compile_kernel
from pimphony.models.channel import run_channel
from pimphony.models.config import load_preset
from pimphony.models.isa import save_stream
from pimphony.models.jit import Widened, compiled


def _kernel(values, weights, out):
    """Sum of ``values`` (times ``weights`` unless None) into ``out[0]``."""
    total = 0
    for i in range(values.shape[0]):
        total += values[i] * (1 if weights is None else weights[i])
    out[0] = total
    return values.shape[0]


def _python(code: str) -> str:
    """Stdout of ``code`` in a fresh interpreter (nothing of this process loaded)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_one_specialisation_per_none_pattern():
    njit = compiled().njit  # numba's own (this module loads numba only when a test runs)
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
        Widened(compiled().njit(_kernel), ("nope",))


def test_numba_loads_without_scipy():
    pytest.importorskip("scipy")
    code = (
        "import sys, pimphony.models.jit as jit; jit.compiled();"
        "print('numba' in sys.modules, 'scipy' in sys.modules);"
        "import scipy.linalg; print('ok')"
    )
    assert _python(code).split() == ["True", "False", "ok"]


def test_first_compiled_call_loads_numba_and_swaps_the_kernels_in():
    code = """
import sys
import pimphony.models.dram as dram
from pimphony.models.jit import Kernel, interpreted, numba_loaded
assert isinstance(dram.mode_class, Kernel) and 'numba' not in sys.modules
with interpreted():
    a = dram.mode_class(dram.OP_MAC)
print(a, numba_loaded(), 'numba' in sys.modules)
b = dram.mode_class(dram.OP_MAC)  # outside interpreted(): compiled
print(b, numba_loaded(), type(dram.mode_class).__name__)
with interpreted():
    dram.mode_class(dram.OP_MAC)  # compiled now whatever the block says
"""
    first, second = _python(code).splitlines()
    assert first.split() == ["0", "False", "False"]
    assert second.split() == ["0", "True", "CPUDispatcher"]


def test_a_small_run_never_loads_numba(tmp_path):
    cfg = load_preset("aim-16ch")
    stream = save_stream(
        tmp_path / "qk.npz", compile_kernel(cfg, "qk", tokens=512, d_h=128).commands, cfg
    )
    code = (
        "import sys; from pimphony.sim.cli import main;"
        "rc = main(['run', '--kernel', 'qk', '--tokens', '256', '--dh', '128', '--sched', 'dcs']);"
        f"rc += main(['run', '--stream', '{stream}', '--sched', 'pingpong']);"
        "print(rc, 'numba' in sys.modules)"
    )
    assert _python(code).splitlines()[-1].split() == ["0", "False"]


#: (kernel, shape): streams of the three kinds, each under every scheduler.
_STREAMS = [
    ("qk", {"tokens": 256, "d_h": 128}),
    ("sv", {"tokens": 300, "d_h": 64}),
    ("gemv", {"d_out": 256, "d_in": 512}),
]


def _runs(cfg_name: str, gaps_seed: int) -> list[dict]:
    """Every stream of :data:`_STREAMS` under every scheduler, the second time with random
    input gaps: cycles, statistics, every command's issue cycle and every row switch."""
    cfg = load_preset(cfg_name)
    out = []
    for kind, shape in _STREAMS:
        stream = compile_kernel(cfg, kind, **shape).commands
        gaps = np.random.default_rng(gaps_seed).integers(0, 4, len(stream))
        for sched in ("static", "pingpong", "dcs"):
            for g in (None, gaps):
                r = run_channel(stream, cfg, sched, valid_gaps=g)
                out.append({
                    "run": f"{kind} {sched} gaps={g is not None}",
                    "stats": r.to_dict(),
                    "issue": r.issue.tolist(),
                    "switches": r.row_switches.tolist(),
                })  # fmt: skip
    return out


def test_interpreted_kernels_give_the_compiled_results():
    code = (
        "import json, sys; from tests.test_jit import _runs;"
        "from pimphony.models.jit import interpreted\n"
        "with interpreted():\n"
        "    runs = _runs('aim-16ch', 7)\n"
        "assert 'numba' not in sys.modules\n"
        "print(json.dumps(runs))"
    )
    interpreted_runs = json.loads(_python(code))
    compiled_runs = json.loads(json.dumps(_runs("aim-16ch", 7)))
    assert [r["run"] for r in interpreted_runs] == [r["run"] for r in compiled_runs]
    for a, b in zip(interpreted_runs, compiled_runs, strict=True):
        assert a == b, a["run"]
