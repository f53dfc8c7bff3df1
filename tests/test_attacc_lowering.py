"""The vectorised AttAcc lowerings (compiler/dcc/attacc_lowering.py) against the command-by-command
reference builder they replace: the same stream byte for byte, the same cycles, counts and
weight addresses, the same payload, placement and read-back gathers (so the same values);
the same refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pimphony.compiler.dcc.attacc_lowering import (
    AttAccLoweringError,
    _attention,
    _attention_reference,
    _lower,
    _lower_reference,
    lower_attention,
    lower_attention_reference,
    lower_group,
    lower_group_reference,
)
from pimphony.compiler.dcc.schedule import DccKernel
from pimphony.models.backends import load_backend

ATT = load_backend("attacc")
KERNELS = [
    DccKernel.GEMV,
    DccKernel.BATCHED_GEMV,
    DccKernel.QK,
    DccKernel.SV,
    DccKernel.RED,
    DccKernel.BATCHED_RED,
]
#: Per dimension set, the largest size drawn (several passes and GEMV-buffer tiles, padding).
_MAX = {2: (90, 600), 3: (4, 70, 300)}


def _same(fast, ref) -> None:
    a, b = fast.program, ref.program
    assert a.stream.tobytes() == b.stream.tobytes()
    assert (a.cycles, a.counts, a.outputs, a.host_ops) == (
        b.cycles,
        b.counts,
        b.outputs,
        b.host_ops,
    )
    assert list(a.inputs) == list(b.inputs)
    for name in b.inputs:
        np.testing.assert_array_equal(a.inputs[name], b.inputs[name])
    ga, gb = fast.gathers(), ref.gathers()
    np.testing.assert_array_equal(ga.payload, gb.payload)
    np.testing.assert_array_equal(ga.reads, gb.reads)
    assert list(ga.placed) == list(gb.placed)
    for name in gb.placed:
        np.testing.assert_array_equal(ga.placed[name], gb.placed[name])
    assert (fast.gb_tensor, fast.out_tensor) == (ref.gb_tensor, ref.out_tensor)


@st.composite
def _config(draw):
    """The preset, or GEMV buffers / accumulators of other sizes (tiles and passes change)."""
    if draw(st.booleans()):
        return ATT
    core = dataclasses.replace(
        ATT.core,
        input_regs=draw(st.sampled_from([1, 3, 16])),
        output_regs=draw(st.sampled_from([1, 2, 3])),
    )
    return dataclasses.replace(ATT, core=core)


@st.composite
def _share(draw):
    kernel = draw(st.sampled_from(KERNELS))
    n = 2 if kernel in (DccKernel.GEMV, DccKernel.RED) else 3
    sizes = tuple(draw(st.integers(1, m)) for m in _MAX[n])
    cores, left = [], ATT.cores_per_group
    for _ in range(n):
        cores.append(draw(st.integers(1, min(left, 20))))
        left //= cores[-1]
    return kernel, sizes, tuple(cores)


@settings(max_examples=80, deadline=None)
@given(cfg=_config(), share=_share())
def test_lowering_equals_reference(cfg, share) -> None:
    kernel, sizes, cores = share
    _same(_lower(cfg, kernel, sizes, cores), _lower_reference(cfg, kernel, sizes, cores))


@settings(max_examples=40, deadline=None)
@given(
    cfg=_config(),
    heads=st.integers(1, 5),
    c_h=st.sampled_from([1, 1, 2, 4]),
    c_t=st.sampled_from([1, 2, 4, 8, 16]),
    per_core=st.integers(1, 5),
    odd=st.integers(0, 15),
    d_h=st.integers(1, 140),
    c_d=st.sampled_from([1, 2, 4]),
    partial=st.booleans(),
)
def test_attention_equals_reference(cfg, heads, c_h, c_t, per_core, odd, d_h, c_d, partial):
    """Tokens a multiple of 16 per core when split (else any count), d_h any, heads over
    cores or not (padded head cores included), a partial share (tokens split over groups:
    statistics entries and their reads) or not."""
    assume(c_h * c_t * c_d <= ATT.cores_per_group)
    tokens = 16 * c_t * per_core if c_t > 1 else 16 * per_core + odd
    sizes, cores = (heads, tokens, d_h), (c_h, c_t, c_d)
    try:
        ref, _ = _attention_reference(cfg, sizes, cores, partial)
    except AttAccLoweringError as exc:  # a buffer too small for this share: the same refusal
        with pytest.raises(AttAccLoweringError, match=str(exc)[:60]):
            _attention(cfg, sizes, cores, partial)
        return
    _same(_attention(cfg, sizes, cores, partial)[0], ref)


@pytest.mark.parametrize(
    ("kernel", "sizes", "cores"),
    [
        (DccKernel.GEMV, (1024, 4096), (16, 4)),  # 16 tiles of the GEMV buffer, 4 passes
        (DccKernel.QK, (8, 512, 128), (1, 16, 4)),  # the default mapping's share
        (DccKernel.SV, (8, 128, 512), (2, 4, 8)),
        (DccKernel.RED, (512, 2048), (1, 1)),  # one bank: 64 row switches
        (DccKernel.BATCHED_GEMV, (4, 256, 2048), (2, 8, 4)),
        (DccKernel.BATCHED_RED, (40, 3, 4096), (4, 2, 8)),  # 10 x 2 outputs per bank, 16 tiles
    ],
)
def test_larger_shares_equal_reference(kernel, sizes, cores) -> None:
    a, b = lower_group(ATT, kernel, sizes, cores), lower_group_reference(ATT, kernel, sizes, cores)
    assert a.stream.tobytes() == b.stream.tobytes() and a.cycles == b.cycles


def test_attention_default_mapping_equals_reference() -> None:
    """One head of 4,096 tokens (docs/dcc.md: 8,866 cycles) and two heads."""
    a = lower_attention(ATT, (1, 4096, 128), (1, 16, 4))
    b = lower_attention_reference(ATT, (1, 4096, 128), (1, 16, 4))
    assert a.stream.tobytes() == b.stream.tobytes() and a.cycles == b.cycles == 8_866
    a = lower_attention(ATT, (2, 4096, 128), (1, 16, 4))
    b = lower_attention_reference(ATT, (2, 4096, 128), (1, 16, 4))
    assert a.stream.tobytes() == b.stream.tobytes() and a.cycles == b.cycles


@pytest.mark.parametrize(
    ("cfg_change", "kernel", "sizes", "cores", "message"),
    [
        ({"rows_per_bank": 2}, DccKernel.GEMV, (48, 1024), (1, 1), "W needs 96 rows per bank"),
        ({"buffer_bytes": 64}, DccKernel.GEMV, (64, 64), (16, 4), "more than the 2 softmax"),
        ({}, DccKernel.GEMV, (64, 64), (16, 8), "128 cores, more than the 64"),
    ],
)
def test_same_refusals(cfg_change, kernel, sizes, cores, message) -> None:
    cfg = dataclasses.replace(ATT, group=dataclasses.replace(ATT.group, **cfg_change))
    for lower in (lower_group, lower_group_reference):
        with pytest.raises(AttAccLoweringError, match=message):
            lower(cfg, kernel, sizes, cores)
