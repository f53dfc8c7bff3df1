"""DCC Fig. 8's systems (sim/experiments/dcc_fig8): phases composed as each system places them."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from compiler.llm import LayerOp, load_model
from models.backends import load_backend
from sim.decode_step.gpu import GpuSetup, gpu_fc_shapes, run_gpu_decode
from sim.decode_step.setup import DecodeError
from sim.experiments.dcc_fig8 import (
    PAPER,
    SYSTEMS,
    Fig8System,
    Phase,
    PimTimes,
    _runs,
    fc_default_draft,
    fig8,
    run_phases,
    step_phases,
)

SPEC = load_model("gpt3-13b-4k")
CFG = load_backend("attacc")
HOST = CFG.host()


class FakePim(PimTimes):
    """Closed-form kernel times: default 1 ms + 1 ns per size unit, DCC half of it."""

    def __init__(self) -> None:
        super().__init__(CFG)
        self.calls: list[tuple[str, tuple[int, ...], bool]] = []

    def default(self, kernel, sizes):
        self.calls.append((kernel, sizes, False))
        return 1e-3 + 1e-9 * int(np.prod(sizes))

    def dcc(self, kernel, sizes):
        self.calls.append((kernel, sizes, True))
        return 0.5 * (1e-3 + 1e-9 * int(np.prod(sizes)))


def _gpu_ops(batch, context):
    r = run_gpu_decode(GpuSetup(SPEC, HOST, 1, (context,) * batch, check_capacity=False))
    return {k: v["seconds"] for k, v in r.ops.items()}, r


def test_gpu_phases_are_the_gpu_step_ops():
    ops, report = _gpu_ops(4, 1000)
    got = step_phases(SPEC, HOST, 4, 1000, SYSTEMS[Fig8System.GPU], None)
    L = SPEC.layers
    assert got[Phase.ATTENTION] == pytest.approx(L * ops["attention"])
    assert got[Phase.QKV] == pytest.approx(L * ops["qkv"])
    assert got[Phase.PROJECTION] == pytest.approx(L * ops["proj"])
    assert got[Phase.FFN] == pytest.approx(L * (ops["ffn1"] + ops["ffn2"]))
    # one GPU: no all-reduce, so the phases add up to the GPU step
    assert sum(got.values()) == pytest.approx(report.step_seconds)


def test_attacc_systems_compose_by_hand():
    pim = FakePim()
    b, ctx = 4, 1000
    ops, _ = _gpu_ops(b, ctx)
    L, H, d = SPEC.layers, SPEC.heads, SPEC.head_dim
    kv_s = 2 * b * SPEC.kv_heads * d * 2 / (CFG.host_gbps * 1e9)
    attn = 1e-3 + 1e-9 * (b * H * 1024 * d)  # 1000 tokens padded to 4 x 256
    shapes = gpu_fc_shapes(SPEC, 1)

    base = step_phases(SPEC, HOST, b, ctx, SYSTEMS[Fig8System.BASE], pim)
    assert base[Phase.ATTENTION] == pytest.approx(L * (attn + kv_s))
    assert base[Phase.QKV] == pytest.approx(L * ops["qkv"])  # stays on the GPU
    assert base[Phase.FFN] == pytest.approx(L * (ops["ffn1"] + ops["ffn2"]))

    base_dcc = step_phases(SPEC, HOST, b, ctx, SYSTEMS[Fig8System.BASE_DCC], pim)
    assert base_dcc[Phase.ATTENTION] == pytest.approx(L * (attn / 2 + kv_s))
    k, n = shapes[LayerOp.QKV]
    assert base_dcc[Phase.QKV] == pytest.approx(L * min(ops["qkv"], (1e-3 + 1e-9 * b * n * k) / 2))

    full = step_phases(SPEC, HOST, b, ctx, SYSTEMS[Fig8System.FULL], pim)
    ffn = 0.0
    for op in (LayerOp.FFN1, LayerOp.FFN2):
        k, n = shapes[op]
        t_gpu, t_pim = ops[str(op)], 1e-3 + 1e-9 * b * n * k
        ffn += t_gpu * t_pim / (t_gpu + t_pim)
    assert full[Phase.FFN] == pytest.approx(L * ffn)
    assert full[Phase.OTHER] == base[Phase.OTHER] == pytest.approx(
        L * sum(v for key, v in ops.items() if key not in ("attention", "qkv", "proj", "ffn1",
                                                            "ffn2"))
    )  # fmt: skip


def test_run_integrates_every_step():
    system = SYSTEMS[Fig8System.GPU]
    lin, lout = 100, 37
    every = run_phases(SPEC, HOST, 2, lin, lout, system, None, points=lout)
    brute = {p: 0.0 for p in Phase}
    for ctx in range(lin + 1, lin + lout + 1):
        for p, t in step_phases(SPEC, HOST, 2, ctx, system, None).items():
            brute[p] += t
    for p in Phase:
        assert every[p] == pytest.approx(brute[p], rel=1e-12)
    # Fig. 8's Lin 2048, Lout 128 at the default 5 points: attention is linear in the context
    # but for the 16-token KV blocks (1 in 128 steps here)
    every = run_phases(SPEC, HOST, 2, 2048, 128, system, None, points=128)
    few = run_phases(SPEC, HOST, 2, 2048, 128, system, None)
    assert few[Phase.ATTENTION] == pytest.approx(every[Phase.ATTENTION], rel=0.005)
    assert few[Phase.FFN] == pytest.approx(every[Phase.FFN], rel=1e-12)


def test_fc_default_spreads_the_weight_rows_over_every_channel():
    d = fc_default_draft(CFG, (1, 5120, 5120))
    assert [(p.groups, p.cores) for p in d] == [(1, 1), (CFG.groups, 16), (1, 4)]
    assert CFG.groups == 80  # 5 devices x 16 channels (DCC V)


def test_paper_table_is_complete():
    assert len(PAPER) == 12
    for base, base_dcc, full, full_dcc in PAPER.values():
        assert 1 < base < base_dcc and full < full_dcc  # every bar beats the GPU; DCC gains


def test_bad_runs_are_refused():
    with pytest.raises(argparse.ArgumentTypeError, match="Lin:Lout"):
        _runs("128-2048")
    with pytest.raises(argparse.ArgumentTypeError, match=">= 1"):
        _runs("0:5")
    with pytest.raises(DecodeError, match="exceeds gpt3-13b-4k's context_window 4096"):
        fig8(models=("gpt3-13b-4k",), batches=(1,), runs=((4000, 200),))
