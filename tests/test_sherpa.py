"""PIM-SHERPA capacity (sim/experiments/sherpa.py, Fig. 9): every strategy's bytes by hand
for Llama 3.2 1B, the savings against WD, the CLI and its refusals."""

from __future__ import annotations

import json

import pytest

from compiler.llm import load_model, weight_matrices
from models.layout import load_layout
from sim.experiments.sherpa import STRATEGIES, Strategy, capacity
from tests.helpers import run_cli

LP = load_layout("lpddr5x-pim")


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
    assert d["provenance"]["layout"]["address_map"]["bits"]["bank"] == 4
    code, out, _ = run_cli(capsys, "sherpa", "--strategy", "owr")
    assert code == 0 and "S-OWR" in out and "S-DDB" not in out


def test_cli_refusals(capsys):
    code, _, err = run_cli(capsys, "sherpa", "--model", "nope")
    assert code != 0 and "unknown model 'nope'" in err
    code, _, err = run_cli(capsys, "sherpa", "--layout", "nope")
    assert code != 0 and "unknown layout 'nope'" in err
    code, _, err = run_cli(capsys, "sherpa", "--strategy", "dup")
    assert code != 0 and "invalid choice" in err
