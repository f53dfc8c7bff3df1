"""``pimphony pim-gemv`` (sim/pim_gemv.py): report, functional check, JSON, refusals."""

from __future__ import annotations

import json

import pytest

from tests.helpers import run_cli


def test_text_report_and_check(capsys) -> None:
    rc, out, err = run_cli(capsys, "pim-gemv", "--dout", "64", "--din", "128", "--channels",
                           "1", "--check")  # fmt: skip
    assert rc == 0, err
    assert "cycles: 733 " in out  # tests/test_hbm_pim.py derives it by hand
    assert "commands: ACT 10, PRE 9, RD 69, WR 25" in out
    # 64 MAC triggers x tCCD_L 4 / 733 cycles
    assert f"MAC utilisation {64 * 4 / 733:.1%}" in out
    assert "check: all 64 outputs equal numpy" in out


def test_json_report_carries_provenance(capsys) -> None:
    rc, out, err = run_cli(capsys, "pim-gemv", "--dout", "4096", "--din", "4096", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["shape"]["channels"] == 16 and r["mac_triggers"] == 4 * 32 * 64
    # 16 pCH x 8 units x 32 B per tCCD_L (4 cycles at 1.2 GHz) = 1228.8 GB/s
    assert r["peak_gbps"] == 1228.8
    assert r["weight_gbps"] == 4096 * 4096 * 2 / (r["cycles"] / 1.2e9) / 1e9
    assert r["provenance"]["command"] == "pimphony pim-gemv"
    assert r["provenance"]["backend"]["name"] == "hbm-pim"


def test_refusals_exit_2(capsys) -> None:
    rc, out, err = run_cli(capsys, "pim-gemv", "--backend", "attacc")
    assert (rc, out) == (2, "")
    assert (
        err == "pimphony pim-gemv: error: back end 'attacc' is of kind 'attacc', not an HBM-PIM "
        "back end with [timing]: it has its own command-level model (models/attacc.py): "
        "pimphony tune --backend attacc --kernel gemv --shape 1024,1024\n"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--backend", "aim"), "pimphony run --kernel gemv --preset aim-16ch"),
        (("--dout", "0"), "--dout: 0 is outside 1 to"),
        (("--channels", "100"), "channels = 100: the back end 'hbm-pim' has 80 groups"),
    ],
)
def test_refusal_messages(capsys, argv, message) -> None:
    rc, _, err = run_cli(capsys, "pim-gemv", *argv)
    assert rc == 2 and message in err


def test_rearrange_json(capsys) -> None:
    rc, out, err = run_cli(capsys, "pim-gemv", "--dout", "64", "--din", "128", "--channels",
                           "1", "--rearrange", "--json")  # fmt: skip
    assert rc == 0, err
    r = json.loads(out)["rearrange"]
    staged, direct = r["weights_staged"], r["weights_direct"]
    assert staged["bytes"] == direct["bytes"] == 64 * 128 * 2
    assert staged["total_us"] == staged["host_us"] + staged["channel_us"]
    # one channel: direct = max(host, 1 x channel)
    assert direct["total_us"] == max(direct["host_us"], direct["channel_us"])
    assert r["results_back"]["channel_commands"]["RD"] == 8 * 8  # 8 units x 8 outputs
