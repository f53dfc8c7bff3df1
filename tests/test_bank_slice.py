"""Bank slicing / Dual-Path Execution (DEX): TLM contract, RTL (Amaranth and Verilator) vs TLM,
and the experiment driver.

The worked example of ``docs/dex.md`` is checked cycle by cycle. The RTL runs in Amaranth's
simulator (small cases) and as generated Verilog under cocotb + Verilator (one build per
mode) on compiler PIM streams mixed with seeded random host reads, with input ``valid`` gaps
(still cycle-exact) and output ``ready`` gaps (legality and order checked).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from pimphony.compiler.kernels import compile_kernel
from pimphony.models.bank_slice import (
    HOST_READ_DTYPE,
    SliceConfig,
    SliceError,
    check_bank_slice,
    empty_host_reads,
    make_host_reads,
    run_bank_slice,
)
from pimphony.models.channel import run_channel
from pimphony.models.config import load_preset
from pimphony.models.isa import Op, make_stream
from pimphony.rtl.bank_slice import BankSliceController
from pimphony.sim.experiments import dex
from pimphony.sim.verify.bank_slice import (
    SliceRun,
    compare_with_tlm,
    mixed_workload,
    record_waves,
    run_slice_batch,
    simulate_amaranth,
)

from tests.helpers import run_cli

CFG = load_preset("aim-16ch")
DEX = SliceConfig(sliced=True)
BASE = SliceConfig(sliced=False)
MODES = {"dex": DEX, "baseline": BASE}

# ---- the worked example of docs/dex.md -----------------------------------------------------

EX_PIM = make_stream([(Op.WR_INP, 0), (Op.MAC, 0, 0, 0, 0), (Op.MAC, 0, 0, 1, 0), (Op.RD_OUT, 0)])
EX_HOST = make_host_reads([(3, 5, 0, 0), (3, 5, 1, 10), (7, 2, 0, 10), (3, 6, 0, 32)])
EX_EXPECT = {
    # mode: (PIM issue, host issue, pim_cycles, host_span, mode switches)
    "dex": ([1, 48, 49, 77], [29, 30, 40, 78], 103, 79, 0),
    "baseline": ([1, 141, 142, 170], [30, 31, 40, 77], 196, 78, 2),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_worked_example(mode):
    r = run_bank_slice(EX_PIM, EX_HOST, CFG, MODES[mode])
    pim, host, pim_cycles, span, switches = EX_EXPECT[mode]
    assert r.pim_issue.tolist() == pim
    assert r.host_issue.tolist() == host
    assert r.pim_cycles == pim_cycles
    assert r.host_span == span
    assert r.mode_switches == switches
    assert (r.pim_row_switches, r.host_row_switches) == (1, 3)
    assert r.mac_utilization == pytest.approx(2 / pim_cycles)
    assert r.host_bytes_per_cycle == pytest.approx(4 * 32 / span)
    assert r.host_gbps == pytest.approx(4 * 32 / span)  # 1 GHz
    assert check_bank_slice(EX_PIM, EX_HOST, r.pim_issue, r.host_issue, CFG) == []


@pytest.mark.parametrize("mode", list(MODES))
def test_worked_example_amaranth(mode):
    dut = BankSliceController(CFG, MODES[mode])
    pim, host = simulate_amaranth(dut, EX_PIM, EX_HOST)
    assert pim.tolist() == EX_EXPECT[mode][0]
    assert host.tolist() == EX_EXPECT[mode][1]


# ---- TLM properties ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(
    "kind,shape",
    [
        ("qk", {"tokens": 512, "d_h": 128}),
        ("sv", {"tokens": 1024, "d_h": 64}),
        ("gemv", {"d_out": 256, "d_in": 1024}),
    ],
)
def test_pim_alone_is_the_static_scheduler(mode, kind, shape):
    pim = compile_kernel(CFG, kind, **shape).commands
    gaps = np.random.default_rng(3).integers(0, 3, pim.shape[0])
    r = run_bank_slice(pim, empty_host_reads(0), CFG, MODES[mode], valid_gaps=gaps)
    static = run_channel(pim, CFG, "static", valid_gaps=gaps)
    np.testing.assert_array_equal(r.pim_issue, static.issue)
    assert r.pim_cycles == static.cycles


def _random_host(n: int, seed: int, rate: float = 0.15, banks: int = 6, rows: int = 3):
    rng = np.random.default_rng(seed)
    host = empty_host_reads(n)
    host["bank"] = rng.choice(CFG.channel.banks, banks, replace=False)[rng.integers(0, banks, n)]
    host["row"] = rng.integers(0, rows, n)
    host["col"] = rng.integers(0, CFG.channel.columns_per_row, n)
    host["arrival"] = np.cumsum(rng.geometric(rate, n)) - 1
    return host


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_tlm_schedules_are_legal(seed):
    pim = compile_kernel(CFG, "qk", tokens=256, d_h=64).commands
    host = _random_host(300, seed)
    for slicing in MODES.values():
        r = run_bank_slice(pim, host, CFG, slicing)
        assert check_bank_slice(pim, host, r.pim_issue, r.host_issue, CFG) == []


def test_dex_never_slows_pim_with_unit_tccd():
    """PIM goes first on the shared buses, so with tCCD = 1 host reads never delay it."""
    pim = compile_kernel(CFG, "gemv", d_out=256, d_in=512).commands
    alone = run_bank_slice(pim, empty_host_reads(0), CFG, DEX)
    mixed = run_bank_slice(pim, _random_host(400, 5, rate=0.3), CFG, DEX)
    np.testing.assert_array_equal(alone.pim_issue, mixed.pim_issue)
    base = run_bank_slice(pim, _random_host(400, 5, rate=0.3), CFG, BASE)
    assert base.pim_cycles > alone.pim_cycles
    assert base.mode_switches > 0


def test_split_ratio():
    s = SliceConfig(subarray_groups=8, kv_groups=6)
    assert s.kv_rows(CFG) == 12288 and s.weight_rows(CFG) == 4096
    assert SliceConfig().kv_rows(CFG) == 8192


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"kv_groups": 8}, r"kv_groups = 8: must be < subarray_groups = 8"),
        ({"kv_groups": 0}, r"kv_groups = 0: must be an integer >= 1"),
        ({"subarray_groups": 1}, r"subarray_groups = 1: must be an integer >= 2"),
        ({"host_queue_depth": 0}, r"host_queue_depth = 0"),
        ({"sliced": "yes"}, r"sliced = 'yes': must be True or False"),
    ],
)
def test_slice_config_errors(kwargs, match):
    with pytest.raises(SliceError, match=match):
        SliceConfig(**kwargs)


def test_split_must_divide_rows():
    with pytest.raises(SliceError, match=r"subarray_groups = 3: must divide rows_per_bank"):
        run_bank_slice(EX_PIM, EX_HOST, CFG, SliceConfig(subarray_groups=3, kv_groups=1))


@pytest.mark.parametrize(
    ("side", "field", "index", "value", "message"),
    [
        ("host", "bank", 2, 16, r"host read 2: bank = 16 must be < 16"),
        ("host", "row", 1, 8192, r"host read 1: row = 8192 must be < 8192 \(weight"),
        ("host", "arrival", 3, 5, r"host read 3: arrival = 5 is before request 2"),
        ("pim", "row", 2, 9000, r"PIM command 2 \(MAC\): row = 9000 must be < 8192"),
    ],
)
def test_field_errors(side, field, index, value, message):
    pim, host = EX_PIM.copy(), EX_HOST.copy()
    (host if side == "host" else pim)[field][index] = value
    with pytest.raises(SliceError, match=message):
        run_bank_slice(pim, host, CFG)


def test_input_errors():
    with pytest.raises(SliceError, match=r"host reads must be a 1-D numpy array of dtype"):
        run_bank_slice(EX_PIM, np.zeros(3), CFG)
    with pytest.raises(SliceError, match=r"valid_gaps must be 4 non-negative"):
        run_bank_slice(EX_PIM, EX_HOST, CFG, valid_gaps=[0, 1])
    with pytest.raises(SliceError, match=r"host read 0: row = -1 must be a non-negative"):
        make_host_reads([(0, -1, 0, 0)])
    assert make_host_reads([(1, 2, 3, 4)]).dtype == HOST_READ_DTYPE


# ---- Amaranth simulator vs TLM -------------------------------------------------------------


@pytest.mark.parametrize("mode", list(MODES))
def test_amaranth_matches_tlm_with_valid_gaps(mode):
    pim, host = mixed_workload(CFG, n_host=48, rate=0.12, seed=7)
    gaps = tuple(int(g) for g in np.random.default_rng(7).integers(0, 4, pim.shape[0]))
    run = SliceRun("mixed-gaps", pim, host, valid_gaps=gaps)
    dut = BankSliceController(CFG, MODES[mode])
    got = simulate_amaranth(dut, pim, host, valid_gaps=gaps)
    assert compare_with_tlm(CFG, MODES[mode], run, *got) is None


@pytest.mark.parametrize("mode", list(MODES))
def test_amaranth_backpressure_is_legal(mode):
    pim, host = mixed_workload(CFG, n_host=40, rate=0.2, seed=8)
    ready = tuple(int(r) for r in np.random.default_rng(8).integers(0, 2, 37))
    dut = BankSliceController(CFG, MODES[mode])
    p, h = simulate_amaranth(dut, pim, host, ready_pattern=ready)
    assert check_bank_slice(pim, host, p, h, CFG) == []
    tlm = run_bank_slice(pim, host, CFG, MODES[mode])
    assert max(p.max(), h.max()) >= min(tlm.pim_issue.max(), tlm.host_issue.max())


def test_wrong_rtl_timing_is_reported():
    """An RTL built with tRCD_MAC one cycle too long: the message names the first operation."""
    wrong = CFG.replace(**{"timing.tRCD_MAC": CFG.timing.tRCD_MAC + 1})
    run = SliceRun("example", EX_PIM, EX_HOST)
    got = simulate_amaranth(BankSliceController(wrong, DEX), EX_PIM, EX_HOST)
    msg = compare_with_tlm(CFG, DEX, run, *got)
    assert msg is not None
    assert msg.startswith(
        "run 'example' (DEX): first differing operation is host read #0 "
        "(bank=3 row=5 col=0, arrival 0): RTL issued at cycle 30, TLM at cycle 29;"
    ), msg


# ---- generated Verilog under cocotb + Verilator --------------------------------------------


def _cosim_runs() -> list[SliceRun]:
    runs = []
    kernels = [
        ("qk-T256-dh64", "qk", {"tokens": 256, "d_h": 64}),
        ("sv-T512-dh64", "sv", {"tokens": 512, "d_h": 64}),
        ("gemv-64x512", "gemv", {"d_out": 64, "d_in": 512}),
    ]
    runs.append(SliceRun("example", EX_PIM, EX_HOST))
    for i, (name, kind, shape) in enumerate(kernels):
        pim = compile_kernel(CFG, kind, **shape).commands
        for rate in (0.05, 0.3):
            seed = 100 + 10 * i + int(rate * 100)
            host = _random_host(int(rate * 1500), seed, rate=rate)
            runs.append(SliceRun(f"{name}-host{rate}", pim, host))
        rng = np.random.default_rng(i)
        host = _random_host(200, 200 + i, rate=0.1)
        gaps = tuple(int(g) for g in rng.integers(0, 3, pim.shape[0]))
        runs.append(SliceRun(f"{name}-valid-gaps", pim, host, valid_gaps=gaps))
        ready = tuple(int(r) for r in rng.integers(0, 2, 53))
        runs.append(SliceRun(f"{name}-ready-gaps", pim, host, ready_pattern=ready))
    return runs


RUNS = {r.name: r for r in _cosim_runs()}


@pytest.fixture(scope="module", params=list(MODES))
def verilator_run(request):
    slicing = MODES[request.param]
    return request.param, run_slice_batch(CFG, slicing, list(RUNS.values())).issue


@pytest.mark.parametrize("name", list(RUNS))
def test_verilator_matches_tlm(verilator_run, name):
    mode, results = verilator_run
    slicing = MODES[mode]
    run = RUNS[name]
    p, h = results[name]
    if run.ready_pattern is not None:
        assert check_bank_slice(run.pim, run.host, p, h, CFG) == []
        return
    msg = compare_with_tlm(CFG, slicing, run, p, h)
    assert msg is None, msg


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_verilator_dex_experiment_workload(mode):
    """The experiment's attention stream (T=1024) with streamed weight reads, cycle-exact."""
    pim = dex.attention_stream(CFG, 1024, 128)
    horizon = run_bank_slice(pim, empty_host_reads(0), CFG).pim_cycles
    host = dex.host_stream(CFG, 0.3, horizon, "stream", seed=1)
    run = SliceRun("dex-T1024", pim, host)
    p, h = run_slice_batch(CFG, MODES[mode], [run]).issue[run.name]
    msg = compare_with_tlm(CFG, MODES[mode], run, p, h)
    assert msg is None, msg


@pytest.mark.slow
def test_record_waves():
    """``make wave BLOCK=bank_slice``: a checked run with a VCD (its own Verilator build)."""
    path = record_waves(CFG, DEX)
    text = path.read_text()[:200_000]
    assert "$enddefinitions" in text and "o__valid" in text


# ---- the experiment driver -----------------------------------------------------------------


def _dex(capsys, tmp_path, *extra: str) -> tuple[int, str, str]:
    """``pimphony dex`` on a short workload: (exit status, stdout, stderr)."""
    return run_cli(
        capsys,
        "dex",
        *["--tokens", "512", "--rates", "0.05,0.5", "--plot", str(tmp_path / "d.png"), *extra],
    )


def test_dex_experiment(tmp_path, capsys):
    rc, out, _ = _dex(capsys, tmp_path, "--json")
    assert rc == 0
    result = json.loads(out)
    assert (tmp_path / "d.png").stat().st_size > 1000
    assert [r["rate"] for r in result["rows"]] == [0.05, 0.5]
    for row in result["rows"]:
        assert row["dex"]["mac_utilization"] == pytest.approx(
            result["pim_alone"]["mac_utilization"]
        )
        assert row["baseline"]["mac_utilization"] < row["dex"]["mac_utilization"]
    # An existing plot is not replaced without --force.
    rc, _, err = _dex(capsys, tmp_path)
    assert rc == 2
    assert "exists; pass --force" in err
    rc, out, _ = _dex(capsys, tmp_path, "--force")
    assert rc == 0
    assert "baseline (no slicing)" in out and "DEX (bank slicing)" in out


def test_dex_bad_arguments(tmp_path, capsys):
    rc, _, err = _dex(capsys, tmp_path, "--rates", "0.1,abc")
    assert rc == 2
    assert "--rates '0.1,abc'" in err
    rc, _, err = _dex(capsys, tmp_path, "--rates", "1.5")
    assert rc == 2
    assert "rate = 1.5: must be in (0, 1]" in err
    rc, _, err = _dex(capsys, tmp_path, "--kv-groups", "9")
    assert rc == 2
    assert "kv_groups = 9" in err
