"""DCC draft costs (compiler/dcc/cost.py): the worst group's share by hand, each part of the
end-to-end time recomputed from its definition, placement, refusals, the GPU roofline."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from pimphony.compiler.dcc.cost import (
    DraftCost,
    Placement,
    draft_cost,
    gpu_seconds,
    group_share,
    kernel_nest,
)
from pimphony.compiler.dcc.hbm_pim_lowering import GROUP_LOWERINGS
from pimphony.compiler.dcc.schedule import DccError, DccKernel, Index, Part
from pimphony.compiler.rearrange import Strategy, access_stream, rearrangement_seconds
from pimphony.models.backends import load_backend
from pimphony.models.hbm_pim import Op, time_stream
from pimphony.models.xpu import VectorOp, vector_cost

HBM = load_backend("hbm-pim")  # 5 devices x 16 pseudo-channels = 80 groups of 8 units


def small_backend(tmp_path: Path, groups: int = 2) -> Path:
    """hbm-pim with one device of ``groups`` pseudo-channels (searches stay small)."""
    path = tmp_path / "hbm-pim-small.toml"
    path.write_text(
        f'extends = "hbm-pim"\nname = "hbm-pim-small"\n[system]\ndevices = 1\n'
        f"groups_per_device = {groups}\n"
    )
    return path


def gemv_draft(g_o: int, c_o: int, g_i: int, c_i: int) -> tuple[Part, Part]:
    return (
        Part(g_o, c_o, "y0", 1024, Index("o")),
        Part(g_i, c_i, "W1", 1024, Index("i")),
    )


def test_group_share_by_hand() -> None:
    # o: 1024 over 20 groups -> 52 (51.2 rounded up) on 7 cores; i: 1024 over 4 groups -> 256
    s = group_share(HBM, DccKernel.GEMV, (1024, 1024), gemv_draft(20, 7, 4, 1))
    assert (s.sizes, s.cores, s.groups, s.reduction_groups) == ((52, 256), (7, 1), 80, 4)
    # batched GEMV: the batch set n is not a reduction; splitting it over groups leaves none
    nest = kernel_nest(DccKernel.BATCHED_GEMV, (8, 256, 512))
    assert [loop for loop, _ in nest.loops] == ["n", "o", "i"]
    d = (
        Part(4, 1, "Y0", 8, Index("n")),
        Part(2, 4, "Y1", 256, Index("o")),
        Part(1, 2, "W1", 512, Index("i")),
    )
    s = group_share(HBM, DccKernel.BATCHED_GEMV, (8, 256, 512), d)
    assert (s.sizes, s.cores, s.groups, s.reduction_groups) == ((2, 128, 512), (1, 4, 2), 8, 1)


def test_cost_parts_from_their_definitions() -> None:
    """Every-call placement, reduction split over 2 groups and 2 cores (FILL path)."""
    sizes, d = (256, 512), gemv_draft(4, 2, 2, 2)
    c = draft_cost(HBM, DccKernel.GEMV, sizes, d, Strategy.STAGED, Placement.EVERY_CALL)
    assert isinstance(c, DraftCost)
    share = c.share
    assert (share.sizes, share.cores, share.groups) == ((64, 256), (2, 2), 8)
    prog = GROUP_LOWERINGS[DccKernel.GEMV](HBM, (64, 256), (2, 2))
    f = HBM.timing.freq_ghz * 1e9
    assert c.cycles == prog.cycles and c.compute_s == pytest.approx(prog.cycles / f)
    # rearrangement in: one group's single-bank writes of W and x, staged over the 8 groups
    addr = np.unique(np.concatenate([a for a in prog.inputs.values() if len(a)]), axis=0)
    assert {"W", "x"} <= set(prog.inputs)
    cycles = time_stream(HBM, access_stream(HBM, addr, Op.WR)).cycles
    nbytes = len(addr) * HBM.group.column_bytes * 8
    mem = HBM.host().memory
    _, want, _ = rearrangement_seconds(
        Strategy.STAGED, nbytes, mem.bandwidth_gbps * mem.efficiency, cycles / f, 8,
        HBM.system.onchip_bytes,
    )  # fmt: skip
    assert c.rearrange_in_s == pytest.approx(want) and c.bytes_in == nbytes
    # host: the program's lane and core sums in each group, plus one partial per extra group
    adds = prog.host_ops * 8 + 256 * (2 - 1)
    assert c.host_s == pytest.approx(vector_cost(HBM.host(), VectorOp.RESIDUAL, adds).seconds)
    assert c.total_s == pytest.approx(c.rearrange_in_s + c.compute_s + c.rearrange_out_s + c.host_s)
    # resident placement: W is already in PIM layout, only x moves
    r = draft_cost(HBM, DccKernel.GEMV, sizes, d, Strategy.STAGED, Placement.RESIDENT)
    assert 0 < r.bytes_in < c.bytes_in
    x = np.unique(prog.inputs["x"], axis=0)
    assert r.bytes_in == len(x) * HBM.group.column_bytes * 8
    assert r.compute_s == c.compute_s and r.rearrange_out_s == c.rearrange_out_s


def test_broadcast_gemv_moves_no_inputs_when_resident() -> None:
    # c_i = 1: x is written into GRF_A by the stream itself, W is resident
    c = draft_cost(HBM, DccKernel.GEMV, (1024, 1024), gemv_draft(16, 8, 1, 1))
    assert c.bytes_in == 0 and c.rearrange_in_s == 0
    assert c.bytes_out > 0 and c.host_s > 0  # 16-lane partial sums come back and are added


def test_direct_is_slower_than_staged_for_many_groups() -> None:
    d = gemv_draft(16, 8, 1, 1)
    args = (HBM, DccKernel.GEMV, (1024, 1024), d)
    staged = draft_cost(*args, Strategy.STAGED, Placement.EVERY_CALL)
    direct = draft_cost(*args, Strategy.DIRECT, Placement.EVERY_CALL)
    assert direct.rearrange_in_s > staged.rearrange_in_s
    assert direct.compute_s == staged.compute_s


@pytest.mark.parametrize(
    "kernel, sizes, draft, message",
    [
        (DccKernel.GEMV, (1024, 1024), gemv_draft(81, 1, 1, 1), "uses 81 groups; back end"),
        (DccKernel.GEMV, (1024, 1024), gemv_draft(1, 3, 1, 3), "uses 9 cores per group"),
        (DccKernel.GEMV, (1024, 1024), gemv_draft(1, 1, 1, 1)[:1], "1 part"),
        (DccKernel.GEMV, (1024,), gemv_draft(1, 1, 1, 1), r"1 size\(s\) given, expected 2"),
        (DccKernel.VA, (0,), (Part(1, 1, "C0", 1, Index("n")),), "n = 0: must be at least 1"),
        (
            DccKernel.GEMV,
            (1024, 1024),
            (Part(1, 1, "y0", 1024, Index("o", 2)), Part(1, 1, "W1", 1024, Index("i"))),
            "index function o\\*2 is not the identity",
        ),
    ],
)
def test_refusals(kernel, sizes, draft, message) -> None:
    with pytest.raises(DccError, match=message):
        draft_cost(HBM, kernel, sizes, draft)


def test_back_end_without_timing_is_refused() -> None:
    # an aim back end times on its hardware preset's channel TLM; without one, nothing does
    bare = dataclasses.replace(load_backend("aim"), hardware_config=None)
    with pytest.raises(DccError, match="no \\[timing\\]"):
        draft_cost(bare, DccKernel.GEMV, (64, 64), gemv_draft(1, 1, 1, 1))


#: A memory-bound A100 kernel's fixed cost: its [kernel] launch 0.58 us + DRAM latency 405.5 ns
A100_KERNEL = 0.58e-6 + 405.5e-9


def test_gpu_roofline_by_hand() -> None:
    # a memory-bound GEMV: the weights' bytes at 2,039 GB/s x 0.85 (configs/xpu/a100-80gb),
    # after the kernel's launch and the DRAM latency
    t = gpu_seconds(HBM, DccKernel.GEMV, (4096, 4096)) - A100_KERNEL
    weights = 4096 * 4096 * 2
    assert weights / (2039e9 * 0.85) <= t < 1.01 * weights / (2039e9 * 0.85)
    # VA reads two vectors and writes one
    n = 1 << 20
    va = A100_KERNEL + 3 * n * 2 / (2039e9 * 0.85)
    assert gpu_seconds(HBM, DccKernel.VA, (n,)) == pytest.approx(va)
    # the batched kernels: the same bytes as their unbatched kernel over batch x rows
    assert gpu_seconds(HBM, DccKernel.BATCHED_VA, (4, n // 4)) == gpu_seconds(
        HBM, DccKernel.VA, (n,)
    )
    assert gpu_seconds(HBM, DccKernel.BATCHED_RELU, (2, 4096)) == pytest.approx(
        A100_KERNEL + 2 * 2 * 4096 * 2 / (2039e9 * 0.85)
    )
    assert gpu_seconds(HBM, DccKernel.BATCHED_RED, (4, 3, 1024)) == gpu_seconds(
        HBM, DccKernel.RED, (12, 1024)
    )


def test_kernel_without_a_lowering_is_refused_by_name() -> None:
    """AttAcc lowers neither VA nor ReLU, batched or not (no element-wise unit): a specific
    refusal naming what it lowers, not a KeyError."""
    from pimphony.compiler.dcc.tune import default_draft

    attacc = load_backend("attacc")
    lowered = r"\(kind attacc lowers only gemv, batched-gemv, qk, sv, red, batched-red, attn\)"
    for kernel, sizes in [
        (DccKernel.BATCHED_VA, (2, 64)),
        (DccKernel.BATCHED_RELU, (2, 64)),
        (DccKernel.VA, (64,)),
        (DccKernel.RELU, (64,)),
    ]:
        d = default_draft(attacc, kernel, sizes)
        with pytest.raises(DccError, match=rf"kernel {kernel} has no group lowering on back "
                           rf"end attacc {lowered}"):  # fmt: skip
            draft_cost(attacc, kernel, sizes, d)


def test_attn_gpu_is_flash_decoding() -> None:
    """ATTN on the GPU alone: every head reads its K and V once (models.xpu.attention_cost):
    32 heads x 512 tokens x 128 x 2 B x 2 = 8 MiB at the A100's 2,039 GB/s x 0.85, after
    the kernel's launch and DRAM latency."""
    att = load_backend("attacc")
    t = gpu_seconds(att, DccKernel.ATTN, (32, 512, 128))
    assert t == pytest.approx(A100_KERNEL + 2 * 32 * 512 * 128 * 2 / (2039e9 * 0.85), rel=0.01)


def test_clear_caches_keeps_costs(tmp_path) -> None:
    """clear_caches forgets the memoised programs (dcc-figs runs many shapes in one process);
    a draft costs the same before and after."""
    from pimphony.compiler.dcc import cost as dcc_cost
    from pimphony.compiler.dcc.tune import default_draft

    cfg = load_backend(str(small_backend(tmp_path)))
    shape = (2, 64, 128)
    d = default_draft(cfg, DccKernel.QK, shape)
    before = dcc_cost.draft_cost(cfg, DccKernel.QK, shape, d)
    assert dcc_cost._program.cache_info().currsize > 0
    dcc_cost.clear_caches()
    assert dcc_cost._program.cache_info().currsize == 0
    assert dcc_cost._channel_seconds.cache_info().currsize == 0
    assert dcc_cost.draft_cost(cfg, DccKernel.QK, shape, d) == before


def test_attn_tokens_over_groups_by_hand() -> None:
    """ATTN (1 head, 256 tokens, d_h 16) with its tokens over 2 groups of 8 token cores:
    each group runs 128 tokens as the partial program, the host combines the two partial
    outputs. Every number below is derived here from the [timing] fields and the A100 preset.

    Per group (cores (1, 8, 1): bank c of bank groups 0, 1 holds tokens 16c .. 16c + 15),
    the program is round 0 of ``tests/test_attacc.py::test_attention_heads_over_cores_
    cycles_by_hand``'s serial case up to its SFM at 146, which is now in STATS mode: busy
    128 / 16 + 1 = 9 cycles (the statistics entry is one more vector), to 155, so everything
    after moves one cycle: MVGBs 155 .. 169, ACTAB 170, MACABs 189 .. 279, MVSBs 285, 287,
    the result's RDSB 289 (entry 0, bank 0), PREA 290; then the extra read-back: RDSB of the
    statistics entry 8 (after the 8 score entries; its address bank interleave[8] = 8, bank
    group 2, pseudo-channel 0) at max(290 + 1, 289 + nBL) = 291, done 291 + RL + nBL = 312
    cycles, against 309 for the same 128 tokens unsplit (RDSB 288 + 21).

    Host combine (models.xpu.attention_combine_cost, H = 1, P = 2, d = 16): FLOPs 2 P d +
    5 P - 1 = 73 on 19.5 TFLOPS x 0.8 = 4.7 ps; bytes (P (d + 2) + d) x 2 B = 104 B at
    2,039 GB/s x 0.85 = 60.0 ps after the 405.5 ns DRAM latency, the larger; plus the 0.58 us
    launch (the A100's [kernel] table). K and V are resident and results leave by RDSB
    inside the stream: no rearrangement. Total = 312 / 1.3 GHz + 0.58 us + 405.5 ns + 60.0 ps."""
    from pimphony.compiler.dcc.attacc_lowering import lower_attention
    from pimphony.models.xpu import attention_combine_cost

    att = load_backend("attacc")
    t = att.timing
    assert t is not None and (t.RL, t.burst_cycles) == (19, 2)
    d = (Part(1, 1, "K0", 1, Index("h")), Part(2, 8, "K1", 256, Index("t")),
         Part(1, 1, "K2", 16, Index("d")))  # fmt: skip
    c = draft_cost(att, DccKernel.ATTN, (1, 256, 16), d)
    assert (c.share.sizes, c.share.partials, c.share.reduction_groups) == ((1, 128, 16), 2, 1)
    assert c.cycles == 291 + t.RL + t.burst_cycles == 312
    assert lower_attention(att, (1, 128, 16), (1, 8, 1)).cycles == 288 + 21 == 309
    assert c.counts["RDSB"] == 2 and c.counts["SFM"] == 1
    host = att.host()
    stream = 104 / (2039e9 * 0.85)
    assert stream == pytest.approx(60.0e-12, rel=1e-3)
    combine = 0.58e-6 + max(73 / (19.5e12 * 0.8), 405.5e-9 + stream)
    assert attention_combine_cost(host, 1, 2, 16).seconds == pytest.approx(combine)
    assert attention_combine_cost(host, 1, 2, 16).flops == 73
    assert (c.rearrange_in_s, c.rearrange_out_s) == (0.0, 0.0)
    assert c.host_s == pytest.approx(combine)
    assert c.total_s == pytest.approx(312 / 1.3e9 + combine)
    # tokens not split: no statistics, no combine (the default's cost is unchanged)
    one = draft_cost(att, DccKernel.ATTN, (1, 128, 16), (d[0], Part(1, 8, "K1", 128,
                     Index("t")), d[2]))  # fmt: skip
    assert (one.cycles, one.host_s, one.share.partials) == (309, 0.0, 1)


def test_attn_token_split_refusals() -> None:
    """d over groups stays refused; a shorter last token share the lowering refuses (not
    whole softmax-buffer entries per core) refuses the draft, naming it."""
    att = load_backend("attacc")
    h, dd = Part(1, 1, "K0", 1, Index("h")), Part(1, 4, "K2", 64, Index("d"))
    with pytest.raises(DccError, match=r"splits d over 2 groups: a score needs all of d_h"):
        draft_cost(
            att,
            DccKernel.ATTN,
            (1, 512, 64),
            (h, Part(1, 4, "K1", 512, Index("t")), Part(2, 4, "K2", 64, Index("d"))),
        )
    # 544 tokens over 3 groups: 182, 182, 180; the worst share's 182 over 2 cores, 91 each
    with pytest.raises(DccError, match=r"tokens = 182 over 2 cores gives 91 per core"):
        draft_cost(att, DccKernel.ATTN, (1, 544, 64), (h, Part(3, 2, "K1", 544, Index("t")), dd))
    # 126 tokens over 4 groups: 32, 32, 32, 30; the worst's 16 per core run, the last's 15 not
    with pytest.raises(DccError, match=r"the last group's share \(1, 30, 64\) \(of 4 groups\): "
                       r"attention: tokens = 30 over 2 cores gives 15 per core"):  # fmt: skip
        draft_cost(att, DccKernel.ATTN, (1, 126, 64), (h, Part(4, 2, "K1", 126, Index("t")), dd))
    # one token core: any shorter last share runs (310 over 3 groups: 104, 104, 102)
    c = draft_cost(att, DccKernel.ATTN, (1, 310, 64), (h, Part(3, 1, "K1", 310, Index("t")), dd))
    assert (c.share.sizes, c.share.tail, c.share.partials) == ((1, 104, 64), (1, 102, 64), 3)
