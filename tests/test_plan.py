"""Head-first vs token-centric partitioning on one module, and exact memoisation."""

from __future__ import annotations

import pytest

from compiler.kernels import compile_kernel
from compiler.plan import PartitionError, _gemv_jobs, partition_attention, split_evenly
from models.channel import run_channel
from models.config import load_preset
from sim.decode_step.kernels import KernelCache, run_module


@pytest.fixture(scope="module")
def cfg():
    return load_preset("aim-16ch")


def test_split_is_even_in_whole_units():
    assert split_evenly(300, 16, 16) == [32, 32, 28] + [16] * 13
    assert split_evenly(255, 16, 16) == [16] * 15 + [15]
    assert sum(split_evenly(5000, 16, 16)) == 5000
    assert split_evenly(33, 16, 1) == [3] + [2] * 15


@pytest.mark.parametrize("t, full", [(255, False), (256, True), (257, True), (4096, True)])
def test_tcp_qk_activates_every_bank_from_256_tokens(cfg, t, full):
    jobs = partition_attention(cfg, "qk", [t], kv_heads=1, d_h=128)
    run = run_module(cfg, jobs, "dcs")
    assert run.active_channels == 16
    assert (run.active_bank_fraction == 1.0) == full


@pytest.mark.parametrize("t", [33, 64, 4096])
def test_tcp_sv_activates_every_bank_above_32_tokens(cfg, t):
    run = run_module(cfg, partition_attention(cfg, "sv", [t], kv_heads=1, d_h=128), "dcs")
    assert run.active_channels == 16 and run.active_bank_fraction == 1.0


def test_hfp_leaves_channels_idle_for_small_batches(cfg):
    # One request with 4 KV heads: HFP uses 4 of 16 channels, TCP all 16 and is faster.
    hfp = run_module(cfg, partition_attention(cfg, "qk", [8192], 4, 128, scheme="hfp"), "dcs")
    tcp = run_module(cfg, partition_attention(cfg, "qk", [8192], 4, 128, scheme="tcp"), "dcs")
    assert hfp.active_channels == 4 and tcp.active_channels == 16
    assert tcp.cycles < hfp.cycles / 3


def test_hfp_imbalance_with_unequal_contexts(cfg):
    lengths = [16384, 2048, 2048, 2048]  # 4 requests x 4 KV heads = 16 pairs, one per channel
    hfp = run_module(cfg, partition_attention(cfg, "qk", lengths, 4, 128, scheme="hfp"), "dcs")
    tcp = run_module(cfg, partition_attention(cfg, "qk", lengths, 4, 128, scheme="tcp"), "dcs")
    assert hfp.active_channels == 16
    assert hfp.channel_utilization < 0.5  # short requests' channels wait for the long one
    assert tcp.channel_utilization > 0.95
    assert tcp.cycles < hfp.cycles


@pytest.mark.parametrize("scheme", ["hfp", "tcp"])
@pytest.mark.parametrize("kind", ["qk", "sv"])
def test_memoisation_is_exact(cfg, scheme, kind):
    jobs = partition_attention(cfg, kind, [700, 300, 1200], 2, 64, gqa_group=2, scheme=scheme)
    fast = run_module(cfg, jobs, "dcs", memoize=True)
    slow = run_module(cfg, jobs, "dcs", memoize=False)
    assert fast.channel_cycles.tolist() == slow.channel_cycles.tolist()
    assert fast.simulated_kernels < slow.simulated_kernels == slow.jobs


def test_module_cycles_are_the_slowest_channel_sum(cfg):
    jobs = partition_attention(cfg, "qk", [300, 20], 1, 64, scheme="tcp")
    expected = []
    for channel_jobs in jobs:
        total = 0
        for j in channel_jobs:
            prog = compile_kernel(cfg, j.kind, **j.shape)
            total += run_channel(prog.commands, cfg, "static").cycles
        expected.append(total)
    run = run_module(cfg, jobs, "static", cache=KernelCache(cfg, "static"))
    assert run.channel_cycles.tolist() == expected and run.cycles == max(expected)


def test_bad_partition_arguments(cfg):
    with pytest.raises(PartitionError, match="unknown"):
        partition_attention(cfg, "qk", [10], 1, 64, scheme="rows")
    with pytest.raises(PartitionError, match="request 1"):
        partition_attention(cfg, "qk", [10, 0], 1, 64)
    with pytest.raises(ValueError, match="job lists"):
        run_module(cfg, [[]], "dcs")


def test_gemv_jobs_batch_per_channel_split_by_the_gpr():
    # aim-16ch: 16 channels, 16 banks, a 16384-tile GPR. 512 x 4096 deals 32 rows (2 groups)
    # to each channel; one request needs 256 input tiles + 2 output tiles, so the GPR holds
    # 16384 // 258 = 63 requests: a batch of 130 runs as GEMVs of 63, 63 and 4 requests.
    cfg = load_preset("aim-16ch")
    jobs = _gemv_jobs(cfg, 512, 4096, 130)
    assert len(jobs) == 16
    assert all(
        [(j.d_out, j.d_in, j.batch) for j in c] == [(32, 4096, b) for b in (63, 63, 4)]
        for c in jobs
    )
    assert [[j.batch for j in c] for c in _gemv_jobs(cfg, 512, 4096, 5)] == [[5]] * 16
    # 40 rows over 16 channels: 16 each for two channels, 8 (a part group) for one, none else.
    shares = [[j.d_out for j in c] for c in _gemv_jobs(cfg, 40, 64, 3)]
    assert shares == [[16], [16], [8]] + [[]] * 13
