"""The data-flow check of a command stream (models/functional.py): what a legal stream means."""

from __future__ import annotations

import numpy as np
import pytest
from pimphony.compiler.kernels import compile_kernel
from pimphony.models.config import load_preset
from pimphony.models.functional import check_dataflow
from pimphony.models.isa import Op, StreamError, empty_stream, save_stream

from tests.helpers import run_cli

CFG = load_preset("aim-16ch")


def _stream(*commands: tuple) -> np.ndarray:
    """Commands as (op, gbuf, row, col, out)."""
    s = empty_stream(len(commands))
    for k, (op, gbuf, row, col, out) in enumerate(commands):
        s[k]["op"], s[k]["gbuf"], s[k]["row"], s[k]["col"], s[k]["out"] = op, gbuf, row, col, out
    return s


W, M, R = Op.WR_INP, Op.MAC, Op.RD_OUT
GOOD = ((W, 0, 0, 0, 0), (M, 0, 0, 0, 1), (M, 0, 0, 1, 1), (R, 0, 0, 0, 1))


@pytest.mark.parametrize(
    "kind,shape",
    [
        ("gemv", {"d_out": 256, "d_in": 300}),
        ("gemv", {"d_out": 4096, "d_in": 4096}),
        ("qk", {"tokens": 1000, "d_h": 128, "gqa_group": 4}),
        ("qk", {"tokens": 4096, "d_h": 48, "gqa_group": 1, "mapping": "head-serial"}),
        ("sv", {"tokens": 777, "d_h": 64, "gqa_group": 8}),
    ],
)
def test_compiled_kernels_are_legal(kind, shape):
    check_dataflow(compile_kernel(CFG, kind, **shape).commands)


def test_a_legal_hand_stream_passes():
    check_dataflow(_stream(*GOOD))


@pytest.mark.parametrize(
    "commands,where,why",
    [
        ((), None, "the stream has no commands"),
        (((M, 0, 0, 0, 1), *GOOD), 0, "reads a GBuf entry no earlier WR_INP wrote"),
        (((W, 0, 0, 0, 0), (R, 0, 0, 0, 3), *GOOD[1:]), 1, "no MAC accumulated into"),
        ((*GOOD, (R, 0, 0, 0, 1)), 4, "no MAC accumulated into since its last read"),
        ((*GOOD, (M, 0, 0, 2, 5)), 4, "no later RD_OUT reads"),
    ],
    ids=["empty", "mac-before-write", "read-never-written", "read-twice", "result-lost"],
)
def test_meaningless_streams_name_the_first_bad_command(commands, where, why):
    with pytest.raises(StreamError, match=why) as info:
        check_dataflow(_stream(*commands))
    if where is not None:
        assert str(info.value).startswith(f"command {where} (")


def test_cli_refuses_a_meaningless_stream_unless_told(capsys, tmp_path):
    path = tmp_path / "bad.npz"
    save_stream(path, _stream((M, 0, 0, 0, 1), *GOOD), CFG)
    rc, out, err = run_cli(capsys, "run", "--stream", path, "--json")
    assert (rc, out) == (2, "")
    assert "command 0 (MAC gbuf=0 row=0 col=0 out=1) reads a GBuf entry" in err
    assert "--no-check" in err
    rc, out, _ = run_cli(capsys, "run", "--stream", path, "--json", "--no-check")
    assert rc == 0 and '"cycles"' in out
