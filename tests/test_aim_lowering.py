"""AiM as a DCC back end (compiler/dcc/aim_lowering.py): hand-checked cycles and addresses of a
small GEMV, results == numpy for every kernel AiM runs, the refusals, the fixed mapping as
the default draft, the AiM host-access timing of a rearrangement, and ``tune --backend aim``."""

from __future__ import annotations

import numpy as np
import pytest
from pimphony.compiler.dcc.aim_lowering import GROUP_LOWERINGS, lower_group, run_group
from pimphony.compiler.dcc.cost import draft_cost
from pimphony.compiler.dcc.schedule import DccError, DccKernel
from pimphony.compiler.dcc.tune import best, default_draft, default_name, search
from pimphony.compiler.kernels import compile_gemv, gemv_pass_size
from pimphony.compiler.rearrange import group_access_cycles
from pimphony.models.backends import aim_backend, load_backend
from pimphony.models.channel import run_channel
from pimphony.models.config import load_preset
from pimphony.models.hbm_pim import Op

from tests.helpers import run_cli
from tests.test_kernels import assert_close

AIM = load_backend("aim")  # aim-16ch: 16 channels x 16 banks, GBuf / OBuf 64 entries
HW = AIM.hardware_config
RNG = np.random.default_rng(7)


def fp16(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float16)


# --------------------------------------------------------------------------- hand-checked


def test_gemv_16x32_on_one_channel_by_hand() -> None:
    # y (16) = W (16 x 32) x: 16 outputs on 16 banks, two 16-element input tiles.
    # Stream: WR_INP g0, WR_INP g1, MAC g0 r0 c0 o0, MAC g1 r0 c1 o0, RD_OUT o0.
    # DCS (docs/scheduling.md), accepted at 0..4: WR_INPs issue at 1 and 2. The first MAC
    # reaches its queue head at 3 and opens row 0: 4 ACT4s at 3, 9, 15, 21 (tRRD 6), usable
    # 21 + tRCD_MAC 28 = 49; MACs at 49 and 50 (is-MAC chain); RD_OUT waits 50 + t_MAC 28 =
    # 78 and completes 78 + t_RD_OUT 26 = 104.
    prog = lower_group(AIM, DccKernel.GEMV, (16, 32), (16, 1))
    assert prog.cycles == 104
    assert prog.counts == {"WR_INP": 2, "MAC": 2, "RD_OUT": 1}
    issue = run_channel(prog.stream, HW, "dcs").issue.tolist()
    assert issue == [1, 2, 49, 50, 78]
    # the fixed compiler's stream, command for command
    assert np.array_equal(prog.stream, compile_gemv(HW, 16, 32).commands)
    # W's vectors: bank b (output b), row 0, columns 0 and 1; x and y through GBuf / GPR
    assert sorted(map(tuple, prog.inputs["W"].tolist())) == [
        (b, 0, c) for b in range(16) for c in range(2)
    ]
    assert prog.inputs["x"].shape == (0, 3) and prog.outputs["y"].shape == (0, 3)
    assert prog.host_ops == 0
    w, x = fp16(16, 32), fp16(32)
    y = run_group(AIM, DccKernel.GEMV, (16, 32), (16, 1), {"W": w, "x": x})["y"]
    assert_close(y[None], w, x[None])


def test_gemv_16x32_on_four_banks_by_hand() -> None:
    # 4 cores: bank k holds outputs 4k..4k+3 in 4 output groups (columns 2j, 2j+1). MACs
    # 49..56 (row 0 from 49, as above; different OBuf entries, no chain needed); the
    # in-order RD_OUTs wait their group's last MAC + 28: 78, 80, 82, 84; end 84 + 26 = 110.
    prog = lower_group(AIM, DccKernel.GEMV, (16, 32), (4, 1))
    assert prog.cycles == 110
    assert prog.counts == {"WR_INP": 2, "MAC": 8, "RD_OUT": 4}
    assert run_channel(prog.stream, HW, "dcs").issue.tolist() == [
        1, 2, 49, 50, 78, 51, 52, 80, 53, 54, 82, 55, 56, 84,
    ]  # fmt: skip
    assert sorted(map(tuple, prog.inputs["W"].tolist())) == [
        (b, 0, c) for b in range(4) for c in range(8)
    ]
    w, x = fp16(16, 32), fp16(32)
    y = run_group(AIM, DccKernel.GEMV, (16, 32), (4, 1), {"W": w, "x": x})["y"]
    assert_close(y[None], w, x[None])


def test_bank_vectors_by_hand() -> None:
    # 60 x 100 on 7 cores: 9 outputs a bank (bank 6 holds the last 6), compiled as a GEMV of
    # 16 x 9 = 144 outputs: 9 output groups x 7 input tiles, group g's tiles at columns
    # 7g .. 7g + 6 of row 0. Banks 0-5 hold 63 vectors, bank 6 the 42 of groups 0-5.
    w = lower_group(AIM, DccKernel.GEMV, (60, 100), (7, 1)).inputs["W"]
    assert len(w) == 60 * 7
    for b in range(7):
        mine = sorted(map(tuple, w[w[:, 0] == b].tolist()))
        assert mine == [(b, 0, c) for c in range(63 if b < 6 else 42)]
    # three heads of K (50 tokens x 40 on 16 banks): a head's matrix is 4 output groups x 3
    # input tiles = 12 columns of one row, head h in row h; 50 tokens x 3 vectors a head
    k = lower_group(AIM, DccKernel.QK, (3, 50, 40), (1, 16, 1)).inputs["K"]
    assert len(k) == 3 * 50 * 3
    assert sorted(set(k[:, 1].tolist())) == [0, 1, 2]


def test_rearrangement_writes_by_hand() -> None:
    # 32 vectors (banks 0-15, row 0, columns 0-1) in (row, column, bank) order on
    # models/bank_slice's single-bank path: requests accepted at 0..31, the host owns the
    # banks from 2 (hand-over at 1), bank k opens at max(2, k + 1) and is usable tRCD_MAC =
    # 28 later; one column per cycle from 30 on the data bus: the 32nd ends at 62.
    addr = np.array([(b, 0, c) for b in range(16) for c in range(2)])
    assert group_access_cycles(AIM, addr, Op.WR) == (62, {"ACT": 16, "WR": 32})
    # three rows of one bank: read at 30; precharge at max(31, 2 + tRAS 27, 30 + tRTP 2) = 32,
    # ACT 48 (tRP 16), read 76; precharge 78, ACT 94, read 122, done 123
    rows = np.array([(0, r, 0) for r in range(3)])
    assert group_access_cycles(AIM, rows, Op.RD)[0] == 123


# --------------------------------------------------------------------------- values


@pytest.mark.parametrize(
    "kernel, sizes, cores",
    [
        (DccKernel.GEMV, (60, 100), (16, 1)),
        (DccKernel.GEMV, (60, 1000), (5, 1)),  # streamed input (63 tiles), 12 outputs a bank
        (DccKernel.BATCHED_GEMV, (5, 60, 100), (1, 7, 1)),
        (DccKernel.QK, (3, 50, 40), (1, 16, 1)),  # three heads, three matrices
        (DccKernel.SV, (3, 40, 50), (1, 9, 1)),  # sets h, d, t
        (DccKernel.RED, (60, 100), (16, 1)),
        (DccKernel.BATCHED_RED, (3, 60, 100), (1, 16, 1)),  # a matrix per batch row
    ],
)
def test_results_equal_numpy(kernel, sizes, cores) -> None:
    if kernel is DccKernel.GEMV:
        a, x = fp16(*sizes), fp16(sizes[1])
        got = run_group(AIM, kernel, sizes, cores, {"W": a, "x": x})["y"]
        assert_close(got[None], a, x[None])
    elif kernel is DccKernel.BATCHED_GEMV:
        n, o, i = sizes
        a, x = fp16(o, i), fp16(n, i)
        assert_close(run_group(AIM, kernel, sizes, cores, {"W": a, "X": x})["Y"], a, x)
    elif kernel is DccKernel.QK:
        h, t, d = sizes
        k, q = fp16(h, t, d), fp16(h, d)
        s = run_group(AIM, kernel, sizes, cores, {"K": k, "Q": q})["S"]
        for j in range(h):
            assert_close(s[j][None], k[j], q[j][None])
    elif kernel is DccKernel.SV:
        h, d, t = sizes
        v, p = fp16(h, t, d), fp16(h, t)
        o = run_group(AIM, kernel, sizes, cores, {"V": v, "P": p})["O"]
        for j in range(h):
            assert_close(o[j][None], v[j].T, p[j][None])
    elif kernel is DccKernel.RED:
        a = fp16(*sizes)
        r = run_group(AIM, kernel, sizes, cores, {"A": a})["r"]
        assert_close(r[None], a, np.ones((1, sizes[1]), np.float16))
    else:
        a = fp16(*sizes)
        r = run_group(AIM, kernel, sizes, cores, {"A": a})["r"]
        for b in range(sizes[0]):
            assert_close(r[b][None], a[b], np.ones((1, sizes[2]), np.float16))


def test_batch_beyond_the_gpr_runs_as_several_gemvs() -> None:
    # a 64 KiB GPR (2048 tiles): 64 x 1024 needs 64 + 4 tiles a request -> 30 at a time, so
    # 70 requests run as GEMVs of 24, 23 and 23, all with the pass size of 23 (one layout)
    cfg = aim_backend(load_preset("aim-16ch").replace(**{"module.gpr_bytes": 65536}))
    hw = cfg.hardware_config
    prog = lower_group(cfg, DccKernel.BATCHED_GEMV, (70, 64, 1024), (1, 16, 1))
    p = gemv_pass_size(hw, 64, 1024, 23)
    one, two = (compile_gemv(hw, 64, 1024, n, p).counts for n in (24, 23))
    assert prog.counts == {k: one[k] + 2 * two[k] for k in one}
    a, x = fp16(64, 1024), fp16(70, 1024)
    got = run_group(cfg, DccKernel.BATCHED_GEMV, (70, 64, 1024), (1, 16, 1), {"W": a, "X": x})
    assert_close(got["Y"], a, x)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "kernel, sizes, cores, match",
    [
        (DccKernel.VA, (64,), (16,), r"AiM cannot run va .*element-wise add"),
        (DccKernel.RELU, (64,), (16,), r"AiM cannot run relu .*element-wise max"),
        (DccKernel.BATCHED_VA, (2, 64), (1, 16), r"AiM cannot run batched-va .*element-wise"),
        (DccKernel.GEMV, (64, 128), (4, 2), r"set i over 2 cores: AiM's MAC reads one GBuf"),
        (DccKernel.BATCHED_GEMV, (4, 64, 128), (2, 8, 1), r"set n over 2 cores"),
        (DccKernel.QK, (2, 64, 128), (2, 8, 1), r"set h over 2 cores"),
        (DccKernel.GEMV, (64, 128), (17, 1), r"cores \(17, 1\) = 17 banks; .* has 16"),
        # 2 heads x 16 output groups x 1024 tiles = 16,384 columns = 256 rows each; 16K rows
        (DccKernel.QK, (65, 256, 16384), (1, 16, 1), r"65 head\(s\) x 256 DRAM rows"),
        (DccKernel.GEMV, (64, 0), (16, 1), r"size of set i = 0"),
    ],
)
def test_refusals_name_the_value_and_the_limit(kernel, sizes, cores, match) -> None:
    with pytest.raises(DccError, match=match):
        GROUP_LOWERINGS[kernel](AIM, sizes, cores)


def test_refuses_a_back_end_of_another_kind() -> None:
    with pytest.raises(DccError, match="needs an 'aim' back end"):
        lower_group(load_backend("hbm-pim"), DccKernel.GEMV, (16, 32), (16, 1))


# --------------------------------------------------------------------------- the fixed mapping


def test_default_draft_is_the_fixed_mapping() -> None:
    assert default_name(AIM) == "fixed"
    # GEMV 512 x 512: outputs over the 16 channels (32 each) and their 16 banks
    d = default_draft(AIM, DccKernel.GEMV, (512, 512))
    assert [(p.groups, p.cores, p.dim) for p in d] == [(16, 16, "W0"), (1, 1, "W1")]
    cost = draft_cost(AIM, DccKernel.GEMV, (512, 512), d)
    fixed = compile_gemv(HW, 32, 512)  # compiler.plan's share of one channel
    assert cost.cycles == run_channel(fixed.commands, HW, "dcs").cycles
    # 40 outputs fill 3 channels' banks (whole bank groups, as compiler.plan deals them)
    d = default_draft(AIM, DccKernel.GEMV, (40, 512))
    assert [(p.groups, p.cores) for p in d] == [(3, 14), (1, 1)]
    # attention as PIMphony's TCP: QK^T tokens in bank groups, SV tokens one by one
    d = default_draft(AIM, DccKernel.QK, (8, 512, 128))
    assert [(p.groups, p.cores, p.dim) for p in d] == [(1, 1, "K0"), (16, 16, "K1"), (1, 1, "K2")]
    d = default_draft(AIM, DccKernel.SV, (8, 10, 128))
    assert [(p.groups, p.cores, p.dim) for p in d] == [(1, 1, "V0"), (1, 16, "V2"), (10, 1, "V1")]


def test_pruned_search_finds_the_exhaustive_best_on_two_channels() -> None:
    cfg = aim_backend(load_preset("aim-16ch").replace(**{"module.channels": 2}))
    for kernel, sizes in ((DccKernel.GEMV, (48, 256)), (DccKernel.SV, (2, 32, 64))):
        pruned = search(cfg, kernel, sizes, pruned=True)
        full = search(cfg, kernel, sizes, pruned=False)
        assert best(pruned).total_s == best(full).total_s
        assert full.skipped  # core splits of the reduced set are refused, and counted


def test_tune_cli_on_aim(capsys) -> None:
    rc, out, _ = run_cli(
        capsys, "tune", "--kernel", "gemv", "--shape", "512,512", "--backend", "aim"
    )
    assert rc == 0
    assert "on aim: 16 groups x 16 cores" in out
    assert "chosen (DCC)" in out and "default (fixed)" in out and "speedup:" in out
    rc, _, err = run_cli(capsys, "tune", "--kernel", "relu", "--shape", "512", "--backend", "aim")
    assert rc != 0 and "AiM cannot run relu (models/isa.py has WR_INP, MAC, RD_OUT only)" in err
