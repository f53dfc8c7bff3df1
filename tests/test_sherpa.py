"""PIM-SHERPA (sim/experiments/sherpa.py, sim/sherpa_timing.py): capacity by hand (Fig. 9),
the LPDDR5X-PIM and host presets, one GEMV's cycles by hand, the S-DDB layer schedule, S-OWR
and FACIL-O on toy numbers, decode as the sum of PIM GEMVs, the CLI and its refusals."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from pimphony.compiler.llm import ModelSpec, load_model, weight_matrices
from pimphony.compiler.pim_gemv import lower_gemv
from pimphony.models.backends import load_backend
from pimphony.models.config import CONFIG_DIR
from pimphony.models.hbm_pim import time_stream
from pimphony.models.layout import AddressMap, load_layout
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.experiments.sherpa import STRATEGIES, Strategy, capacity
from pimphony.sim.sherpa_timing import (
    ATTENTION,
    PREFILL_MODELS,
    Prefill,
    SherpaError,
    check_agreement,
    ddb_layer,
    decode_seconds,
    load_sherpa_host,
    pim_gemv_seconds,
    smc_seconds,
    table2,
)

from tests.helpers import run_cli

LP = load_layout("lpddr5x-pim")
LP_MODEL_DIR = CONFIG_DIR / "models"


def test_weight_matrices_sum_to_the_layer():
    spec = load_model("llama-3.2-1b")
    mats = weight_matrices(spec)
    assert mats == {
        "q": (2048, 2048), "k": (512, 2048), "v": (512, 2048), "o": (2048, 2048),
        "ff0": (8192, 2048), "ff1": (8192, 2048), "ff2": (2048, 8192),
    }  # fmt: skip
    assert sum(o * i for o, i in mats.values()) == spec.layer_weight_elements


def test_llama_3_2_1b_by_hand():
    spec = load_model("llama-3.2-1b")
    r = capacity(spec, LP)
    layer = 2 * 2048 * 2048 + 2 * 512 * 2048 + 3 * 8192 * 2048
    host = (16 * layer + 128256 * 2048) * 2  # tied: one table
    assert r["host_friendly_bytes"] == host == 2_471_493_632  # the paper's 2.47 GB
    # K and V pad from 512 to 1024 rows, the LM head from 128,256 to 129,024.
    padding = 16 * 2 * 512 * 2048 * 2 + 768 * 2048 * 2
    assert r["padding_bytes"] == padding
    assert r["pim_aware_bytes"] == host + padding
    buffer = 8192 * 2048 * 2  # "32 MB (2048 x 8192 x 2 B)"
    s = r["strategies"]
    assert s["wd"]["total_bytes"] == 2 * host + padding
    assert s["facil"]["total_bytes"] == host + padding
    assert s["ddb"]["total_bytes"] == host + padding + 2 * buffer
    assert s["owr"]["total_bytes"] == host + padding + buffer
    for v in s.values():
        assert v["saving_vs_wd"] == pytest.approx(1 - v["total_bytes"] / (2 * host + padding))
    # The paper's Fig. 9 savings: 49.2 (FACIL-O), 47.8 (S-DDB), 48.5% (S-OWR).
    assert [round(100 * s[k]["saving_vs_wd"], 1) for k in ("facil", "ddb", "owr")] == [
        49.3, 48.0, 48.6,
    ]  # fmt: skip


def test_ddb_buffer_holds_qkvo():
    """Buffer 0 holds Q, K, V and O at once (Fig. 5): for Llama 3.2 3B that is exactly the
    3072 x 8192 FF matrix (2 x 3072^2 + 2 x 1024 x 3072 = 25,165,824 elements)."""
    spec = load_model("llama-3.2-3b")
    mats = weight_matrices(spec)
    qkvo = sum(o * i for k, (o, i) in mats.items() if k in "qkvo")
    assert qkvo == 3072 * 8192 == 25_165_824
    r = capacity(spec, LP)["strategies"]
    assert r["ddb"]["buffer_bytes"] == 2 * qkvo * 2
    assert r["owr"]["buffer_bytes"] == 3072 * 8192 * 2


def test_registry_and_cli(capsys):
    assert set(STRATEGIES) == set(Strategy)
    code, out, _ = run_cli(capsys, "sherpa", "--model", "llama-3.2-1b", "--json")
    assert code == 0
    d = json.loads(out)
    assert d["strategies"]["ddb"]["label"] == "S-DDB"
    assert d["provenance"]["model"]["hidden"] == 2048
    assert d["provenance"]["layout"]["address_map"]["sizes"]["bank"] == 16
    code, out, _ = run_cli(capsys, "sherpa", "--strategy", "owr")
    assert code == 0 and "S-OWR" in out and "S-DDB" not in out


def test_cli_refusals(capsys):
    code, _, err = run_cli(capsys, "sherpa", "--model", "nope")
    assert code != 0 and "unknown model 'nope'" in err
    code, _, err = run_cli(capsys, "sherpa", "--layout", "nope")
    assert code != 0 and "unknown layout 'nope'" in err
    code, _, err = run_cli(capsys, "sherpa", "--strategy", "dup")
    assert code != 0 and "invalid choice" in err


# --- timing (sim/sherpa_timing.py): the LPDDR5X-PIM device, the host, the four strategies ---

LP5X = load_backend("lpddr5x-pim")
HOST = load_sherpa_host("galaxy-s24plus")


def test_lpddr5x_pim_preset_by_hand():
    """Table 3's bandwidth, 8x inside the banks, and every core timing = ramulator2's
    LPDDR5_6400 cycles x 1.25 ns re-rounded up at 0.9375 ns: ceil(n x 4 / 3)."""
    assert LP5X.bus_gbps == pytest.approx(68.264)
    assert LP5X.internal_gbps == pytest.approx(8 * 68.264)
    assert LP5X.cores_per_group == 16 and LP5X.groups == 4
    t = LP5X.timing
    ram2 = {"tRCD_RD": 15, "tRAS": 34, "tRP": 15, "tRRD_S": 4, "tFAW": 16, "tRTP": 4,
            "tWR": 28, "tWTR_L": 10, "RL": 20, "WL": 11}  # fmt: skip
    for key, n in ram2.items():
        assert getattr(t, key) == math.ceil(n * 4 / 3), key
    assert t.tRC == math.ceil((34 + 15) * 4 / 3)
    check_agreement(LP5X, LP)  # the back end and the layout describe one device


def test_layout_disagreement_is_refused():
    bad = replace(LP, address_map=AddressMap(LP.address_map.order,
                                             {**LP.address_map.sizes, "bank": 8}))  # fmt: skip
    with pytest.raises(SherpaError, match=r"banks per channel: group.banks gives 16, .* gives 8"):
        check_agreement(LP5X, bad)
    with pytest.raises(SherpaError, match="element bytes"):
        check_agreement(LP5X, replace(LP, element_bytes=1))


def test_small_gemv_cycles_by_hand():
    """512 x 128 on 4 channels: one output tile (4 ch x 16 units x 8), one input tile (8 x 16)
    -> 64 MAC reads + 5 drain reads, traced through every gap of the stream."""
    t = LP5X.timing
    wr_pre = t.WL + t.BL // 2 + t.tWR  # 55: WR -> PRE of the bank
    entry = 3 * (t.tRCD_WR + wr_pre + 1) + t.tRCD_WR + wr_pre  # 4 x (ACT, WR, PRE), SB mode
    first_wr = entry + t.tRP + t.tRCD_WR  # register row open: CRF, control, 8 GRF_A writes
    last_wr = first_wr + 9 * t.tCCD_L
    first_rd = last_wr + wr_pre + t.tRP + t.tRCD_RD  # weight row 0 open
    last_rd = first_rd + (64 + 5 - 1) * t.tCCD_L
    mov = last_rd + t.tRTP + t.tRP + t.tRCD_WR  # result row: 8 MOV writes
    ctrl = mov + 7 * t.tCCD_L + wr_pre + t.tRP + t.tRCD_WR  # PIM off (register row)
    exit_ = ctrl + wr_pre + t.tRP + t.tRCD_WR  # two mode-exit writes
    end = exit_ + t.tCCD_L + t.WL + t.BL // 2
    assert end == 1031
    assert time_stream(LP5X, lower_gemv(LP5X, 512, 128).stream).cycles == end
    assert pim_gemv_seconds(LP5X, 512, 128) == pytest.approx(end / 1.066625e9)


def test_host_preset_by_hand():
    # Four GEMM threads with equal parts end with the slowest core (an A720 at 2.7 GHz, one
    # pipe); the X4 (two pipes, 3.08 GHz) finishes its part at 2.7 / 6.16 of the time.
    total = 2 * 3.08 + 2 * 2.9 + 3 * 2.7
    assert HOST.gemm_share == pytest.approx(4 * 2.7 / total)
    assert HOST.gemm_thread_finish() == pytest.approx(
        {"X4": 2.7 / 6.16, "A720-2.7a": 1.0, "A720-2.7b": 1.0, "A720-2.7c": 1.0}
    )
    assert HOST.copy_fraction(2) == 0.25 and HOST.copy_fraction(4) == 0.5  # capped by 1/2
    assert HOST.copy_fraction(1) == 0.125
    # Llama 3.2 1B, all 16 layers' weights, two copy threads: 3 x bytes / (68.264 GB/s / 4).
    nbytes = 16 * (2 * 2048 * 2048 + 2 * 512 * 2048 + 3 * 8192 * 2048) * 2
    assert smc_seconds(HOST, 68.264, nbytes, 2) == pytest.approx(3 * nbytes / 17.066e9)


TOY_COMPUTE = {"q": 1.0, "k": 0.25, "v": 0.25, ATTENTION: 0.1, "o": 1.0,
               "ff0": 4.0, "ff1": 4.0, "ff2": 4.0}  # fmt: skip
TOY_COPY = {"q": 2.0, "k": 0.5, "v": 0.5, "o": 2.0, "ff0": 8.0, "ff1": 8.0, "ff2": 8.0}


def test_ddb_layer_by_hand():
    """Fig. 5 on toy numbers: FF0 (8) copied in quarters (2) under Q, K, V, O; nothing under
    attention; FF1 under FF0, FF2 under FF1; Q + K + V + O (5) under FF2."""
    steps = ddb_layer(TOY_COMPUTE, TOY_COPY, last=False)
    assert [(s.name, s.copy_s, s.seconds, s.critical) for s in steps] == [
        ("q", 2.0, 2.0, "copy"), ("k", 2.0, 2.0, "copy"), ("v", 2.0, 2.0, "copy"),
        (ATTENTION, 0.0, 0.1, "compute"), ("o", 2.0, 2.0, "copy"),
        ("ff0", 8.0, 8.0, "copy"), ("ff1", 8.0, 8.0, "copy"), ("ff2", 5.0, 5.0, "copy"),
    ]  # fmt: skip
    assert steps[-1].copies == "Q + K + V + O" and steps[0].copies == "0.25 FF0"
    last = ddb_layer(TOY_COMPUTE, TOY_COPY, last=True)
    assert last[-1].copy_s == 0 and last[-1].seconds == 4.0
    r = PREFILL_MODELS[Prefill.DOUBLE_BUFFER](TOY_COMPUTE, TOY_COPY, {}, 2)
    # preload Q + K + V + O (5), then 29.1 and (last layer) 28.1
    assert r["preload_s"] == 5.0
    assert r["layers_s"] == pytest.approx(29.1 + 28.1)


def test_owr_and_facil_by_hand():
    copy4 = {k: v / 2 for k, v in TOY_COPY.items()}
    owr = PREFILL_MODELS[Prefill.ONLINE](TOY_COMPUTE, TOY_COPY, copy4, 3)
    assert owr["layers_s"] == pytest.approx(3 * (14.6 + 14.5))  # copy then GEMM, serially
    direct = PREFILL_MODELS[Prefill.DIRECT](TOY_COMPUTE, TOY_COPY, copy4, 3)
    assert direct["layers_s"] == pytest.approx(3 * 14.6) and direct["copy_s"] == 0


def test_decode_is_the_sum_of_pim_gemvs():
    spec = ModelSpec("toy", layers=3, heads=4, kv_heads=2, hidden=256, intermediate=512,
                     head_dim=64, ffn="swiglu", context_window=1024, element_bytes=2)  # fmt: skip
    mats = weight_matrices(spec)
    cycles = sum(time_stream(LP5X, lower_gemv(LP5X, o, i).stream).cycles for o, i in mats.values())
    d = decode_seconds(spec, load_xpu("pimsherpa-cpu"), 100, LP5X)
    assert d["gemv_s"] == pytest.approx(3 * cycles / 1.066625e9)
    assert d["lm_head_s"] == 0
    assert d["total_s"] == pytest.approx(d["gemv_s"] + d["attention_s"])


def test_timing_cli(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "sherpa", "--sl", "64,128", "--out-len", "64",
                           "--strategy", "ddb", "--strategy", "facil", "--strategy", "owr",
                           "--plot", tmp_path / "t.png", "--timeline", tmp_path / "l.png",
                           "--json")  # fmt: skip
    assert code == 0
    d = json.loads(out)["timing"]
    r64, r128 = d["rows"]
    for r in (r64, r128):
        s = r["strategies"]
        # FACIL-O = GEMM + attention + LM head; S-OWR adds the 4-thread SMC of every layer
        assert s["facil"]["ttft_s"] == pytest.approx(
            s["facil"]["gemm_s"] + s["facil"]["attention_s"] + s["facil"]["lm_head_s"]
        )
        assert s["owr"]["ttft_s"] == pytest.approx(s["facil"]["ttft_s"] + d["smc"]["owr_s"])
        assert s["facil"]["ttft_s"] <= s["ddb"]["ttft_s"] <= s["owr"]["ttft_s"]
    assert d["smc"]["owr_s"] == pytest.approx(d["smc"]["ddb_s"] / 2)
    cell = d["end_to_end"][0]
    assert cell["sl"] == 64 and cell["out"] == 64 and cell["facil"]["speedup"] > 1
    assert (tmp_path / "t.png").stat().st_size > 0 and (tmp_path / "l.png").stat().st_size > 0


def test_timing_refusals(capsys, tmp_path):
    code, _, err = run_cli(capsys, "sherpa", "--sl", "0")
    assert code == 2 and "--sl 0: every length must be a positive integer" in err
    code, _, err = run_cli(capsys, "sherpa", "--sl", "1000000000")  # ~68 million years once
    assert (
        code == 2
        and (
            "--sl 1000000000 + --out-len 1000000000 = 2000000000 tokens: beyond llama-3.2-1b's "
            "context window; allowed up to 131072 tokens in all"
        )
        in err
    )
    code, _, err = run_cli(capsys, "sherpa", "--sl", "a,b")
    assert code == 2 and "expected comma-separated integers" in err
    code, _, err = run_cli(capsys, "sherpa", "--out-len", "64")
    assert code == 2 and "need --sl" in err
    code, _, err = run_cli(capsys, "sherpa", "--sl", "64", "--out-len", "")  # was --sl's
    assert code == 2 and "--out-len is empty" in err
    code, _, err = run_cli(capsys, "sherpa", "--sl", "64", "--strategy", "owr",
                           "--timeline", tmp_path / "x.png")  # fmt: skip
    assert code == 2 and "needs the S-DDB strategy" in err
    one_byte = tmp_path / "int8.toml"
    text = (LP_MODEL_DIR / "llama-3.2-1b.toml").read_text()
    one_byte.write_text(text.replace("element_bytes = 2", "element_bytes = 1"))
    code, _, err = run_cli(capsys, "sherpa", "--model", one_byte)
    assert code == 2 and "1-byte weights; layout 'lpddr5x-pim' holds 2-byte elements" in err


def test_host_preset_refusals(tmp_path):
    good = (CONFIG_DIR / "sherpa" / "galaxy-s24plus.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(good.replace("fraction_of_peak = 0.25", "fraction_of_peak = 2.5"))
    with pytest.raises(SherpaError, match=r"\[copy\] fraction_of_peak = 2.5: a fraction"):
        load_sherpa_host(bad)
    bad.write_text(good.replace("ddb_threads = 2", "ddb_threads = 2\nspeed = 1"))
    with pytest.raises(SherpaError, match="unknown key 'speed'"):
        load_sherpa_host(bad)
    bad.write_text(good.replace("gemm = true", "gemm = false"))
    with pytest.raises(SherpaError, match="no core has gemm = true"):
        load_sherpa_host(bad)
    with pytest.raises(SherpaError, match="unknown sherpa host 'nope'"):
        load_sherpa_host("nope")


def test_table2_is_the_papers():
    """At FLOP/B = 4, Table 2's SUM and MAX rows: 400/300% (SL 1-4), 250/150 (8), 175/100 (16),
    138 (32), 119 (64), 109 (128), 106% (192)."""
    got = [(round(100 * table2(sl, 4)["sum_vs_gemm"]), round(100 * table2(sl, 4)["max_vs_gemm"]))
           for sl in (1, 4, 8, 16, 32, 64, 128, 192)]  # fmt: skip
    assert got == [(400, 300), (400, 300), (250, 150), (175, 100), (138, 100), (119, 100),
                   (109, 100), (106, 100)]  # fmt: skip


def test_a_gemv_too_big_for_the_pim_rows_runs_in_slices():
    """Llama 3.2 3B's LM head needs 6,056 rows per bank (> 4,096 PIM rows): two GEMVs of
    64,128 rows, each fitting, timed one after the other."""
    from pimphony.compiler.pim_gemv import PimGemvError, gemv_layout
    from pimphony.sim.sherpa_timing import _gemv_cycles

    with pytest.raises(PimGemvError, match="6,056 rows"):
        gemv_layout(LP5X, 128256, 3072)
    cycles, parts = _gemv_cycles("lpddr5x-pim", 128256, 3072)
    assert parts == 2
    assert cycles == 2 * _gemv_cycles("lpddr5x-pim", 64128, 3072)[0]


def test_end_to_end_is_ttft_plus_decode_steps(capsys):
    """End-to-end = TTFT + one decode step per further token at its context, and the speedup
    is the host-only system's end-to-end over the strategy's."""
    code, out, _ = run_cli(capsys, "sherpa", "--sl", "16", "--out-len", "4", "--strategy",
                           "facil", "--json")  # fmt: skip
    assert code == 0
    d = json.loads(out)["timing"]
    spec, dev = load_model("llama-3.2-1b"), load_xpu("pimsherpa-cpu")
    row, cell = d["rows"][0], d["end_to_end"][0]
    pim = sum(decode_seconds(spec, dev, 16 + t, LP5X)["total_s"] for t in (1, 2, 3))
    host = sum(decode_seconds(spec, dev, 16 + t, None)["total_s"] for t in (1, 2, 3))
    assert cell["facil"]["seconds"] == pytest.approx(row["strategies"]["facil"]["ttft_s"] + pim)
    assert cell["host_only_s"] == pytest.approx(row["host_only"]["ttft_s"] + host)
    assert cell["facil"]["speedup"] == pytest.approx(cell["host_only_s"] / cell["facil"]["seconds"])


def test_a_strategy_that_does_not_fit_is_refused_with_the_sizes(capsys):
    """Llama 3.2 3B duplicated needs 12.855 GB: refused on a 12 GB device when timed, while
    the single-copy strategies run; the capacity report marks what fits."""
    code, _, err = run_cli(
        capsys, "sherpa", "--model", "llama-3.2-3b", "--sl", "64", "--device-memory", "12"
    )
    assert code == 2
    assert "WD does not fit: llama-3.2-3b needs 12.855 GB (host-friendly 6.425 + PIM-aware " in err
    assert "the device memory is 12.000 GB" in err
    code, out, _ = run_cli(
        capsys, "sherpa", "--model", "llama-3.2-3b", "--device-memory", "12", "--json"
    )
    assert code == 0
    fits = {k: v["fits"] for k, v in json.loads(out)["strategies"].items()}
    assert fits == {"wd": False, "facil": True, "ddb": True, "owr": True}
    code, _, _ = run_cli(
        capsys, "sherpa", "--model", "llama-3.2-3b", "--sl", "64", "--device-memory", "12",
        "--strategy", "owr",
    )  # fmt: skip
    assert code == 0
    code, _, err = run_cli(capsys, "sherpa", "--device-memory", "0")
    assert code == 2 and "--device-memory 0.0: must be a positive number of GB" in err
