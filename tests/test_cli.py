"""The ``pimphony`` command line, called in-process."""

from __future__ import annotations

import json

import pytest

from models.isa import load_stream
from tests.helpers import run_cli


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    # Any relative output path (e.g. a default plot location) lands in tmp_path.
    monkeypatch.chdir(tmp_path)


cli = run_cli


def cli_json(capsys, *argv: str) -> dict:
    rc, out, err = cli(capsys, *argv)
    assert rc == 0, err
    return json.loads(out)  # exactly one JSON document, nothing else on stdout


QK = ("--kernel", "qk", "--tokens", "256", "--dh", "128")


def check_summary(summary: dict) -> None:
    assert isinstance(summary["cycles"], int)
    assert isinstance(summary["commands"], int)
    assert summary["cycles"] > 0
    assert 0.0 <= summary["mac_utilization"] <= 1.0
    assert sum(summary["breakdown"].values()) == summary["cycles"]
    assert set(summary["breakdown"]) == {
        "mac_busy",
        "io_transfer",
        "dependency_stall",
        "row_switch",
    }


def test_run_json(capsys):
    s = cli_json(capsys, "run", *QK, "--sched", "dcs", "--json")
    check_summary(s)
    assert s["scheduler"] == "dcs"
    assert s["kernel"] == "qk"
    assert s["shape"]["tokens"] == 256
    assert s["shape"]["d_h"] == 128
    # QK^T T=256 d_h=128: 8 WR_INP + 16 groups x 8 tiles MAC + 16 RD_OUT.
    assert s["counts"] == {"WR_INP": 8, "MAC": 128, "RD_OUT": 16}
    assert s["commands"] == 152
    assert s["mac_utilization"] == pytest.approx(128 / s["cycles"])
    assert s["speedup_vs_static"] >= 1.0


def test_run_json_gqa(capsys):
    mha = cli_json(capsys, "run", *QK, "--sched", "dcs", "--json")
    s = cli_json(capsys, "run", *QK, "--gqa-group", "4", "--sched", "dcs", "--json")
    check_summary(s)
    assert s["shape"]["gqa_group"] == 4
    assert s["counts"] == {"WR_INP": 32, "MAC": 512, "RD_OUT": 64}
    assert s["commands"] == 4 * mha["commands"]


def test_gqa_group_zero_refused(capsys):
    rc, out, err = cli(capsys, "run", *QK, "--gqa-group", "0", "--json")
    assert rc == 2
    assert "gqa_group = 0" in err


def test_run_mapping_head_serial(capsys):
    s = cli_json(capsys, "run", *QK, "--gqa-group", "4", "--mapping", "head-serial", "--json")
    assert s["shape"]["mapping"] == "head-serial"
    assert s["counts"]["MAC"] == 512


def test_run_table(capsys):
    rc, out, err = cli(
        capsys, "run", "--kernel", "gemv", "--dout", "256", "--din", "256", "--sched", "static"
    )
    assert rc == 0, err
    assert "FC GEMV 256x256" in out
    lines = [line for line in out.splitlines() if line.startswith("static")]
    assert len(lines) == 1
    assert "1.00x" in lines[0]  # static against itself
    assert "dcs" not in out
    assert err == ""


def test_run_table_compares_with_static(capsys):
    rc, out, _ = cli(capsys, "run", *QK, "--sched", "pingpong")
    assert rc == 0
    assert any(line.startswith("static") for line in out.splitlines())
    assert any(line.startswith("pingpong") for line in out.splitlines())


@pytest.mark.parametrize("sched", ["static", "pingpong", "dcs"])
def test_compile_then_run_stream(capsys, tmp_path, sched):
    path = tmp_path / "qk.npz"
    rc, out, err = cli(capsys, "compile", *QK, "-o", path)
    assert rc == 0, err
    assert path.is_file()
    assert str(path) in out
    commands, head = load_stream(path)
    assert commands.shape == (152,)
    assert head["meta"]["kernel"] == "qk"
    assert head["preset"] == "aim-16ch"

    from_stream = cli_json(capsys, "run", "--stream", path, "--sched", sched, "--json")
    from_kernel = cli_json(capsys, "run", *QK, "--sched", sched, "--json")
    check_summary(from_stream)
    assert from_stream["cycles"] == from_kernel["cycles"]
    assert from_stream["commands"] == from_kernel["commands"]
    assert from_stream["breakdown"] == from_kernel["breakdown"]
    assert from_stream["meta"]["kernel"] == "qk"


def test_compile_refuses_overwrite_without_force(capsys, tmp_path):
    path = tmp_path / "k.npz"
    assert cli(capsys, "compile", *QK, "-o", path)[0] == 0
    before = path.read_bytes()

    gemv = ("--kernel", "gemv", "--dout", "32", "--din", "32")
    rc, out, err = cli(capsys, "compile", *gemv, "-o", path)
    assert rc == 2
    assert "--force" in err
    assert str(path) in err
    assert path.read_bytes() == before  # untouched

    rc, out, err = cli(capsys, "compile", *gemv, "-o", path, "--force")
    assert rc == 0, err
    commands, head = load_stream(path)
    assert head["meta"]["kernel"] == "gemv"
    assert commands.shape == (8,)  # gemv 32x32: 2 WR_INP, 4 MAC, 2 RD_OUT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.npz"]  # no temp files left


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (("run", "--kernel", "gemv", "--dout", "64"), ["--din"]),
        (("compile", "--kernel", "gemv", "--din", "64", "-o", "x.npz"), ["--dout"]),
        (("run", *QK, "--dout", "64"), ["--dout", "qk"]),
        (("run", "--kernel", "gemv", "--dout", "64", "--din", "64", "--tokens", "4"), ["--tokens"]),
        (("run", "--kernel", "qk", "--tokens", "0", "--dh", "128"), ["tokens = 0"]),
        (("run", "--kernel", "sv", "--tokens", "64", "--dh", "-1"), ["d_h = -1"]),
        (("run", "--dout", "64"), ["--kernel"]),
        (("run", *QK, "--sched", "bogus"), ["bogus", "--sched"]),
        (("run", "--kernel", "conv"), ["conv"]),
        (("run", *QK, "--tokens", "many"), ["many"]),
        (("run", *QK, "--preset", "nope"), ["nope", "aim-16ch"]),
        (("run", *QK, "--gqa-group", "33"), ["33", "head-serial"]),
        (("run", "--kernel", "gemv", "--dout", "65536", "--din", "65536"), ["DRAM rows"]),
        (("run", "--stream", "missing.npz"), ["missing.npz", "no such file"]),
        (("compile", *QK), ["-o"]),
        (("frobnicate",), ["frobnicate"]),
    ],
)
def test_bad_arguments(capsys, argv, fragments):
    rc, out, err = cli(capsys, *argv)
    assert rc == 2
    assert out == ""
    for fragment in fragments:
        assert fragment in err


def test_stream_and_kernel_together(capsys, tmp_path):
    path = tmp_path / "qk.npz"
    assert cli(capsys, "compile", *QK, "-o", path)[0] == 0
    rc, out, err = cli(capsys, "run", "--stream", path, *QK)
    assert rc == 2
    assert "--stream" in err
    assert "--kernel" in err


def test_run_stream_not_a_stream(capsys, tmp_path):
    path = tmp_path / "junk.npz"
    path.write_bytes(b"definitely not a zip archive")
    rc, out, err = cli(capsys, "run", "--stream", path, "--json")
    assert rc == 2
    assert "not a pimphony command-stream file" in err


def test_bad_preset_file(capsys, tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text('name = "broken"\n')
    rc, out, err = cli(capsys, "run", *QK, "--preset", path)
    assert rc == 2
    assert "missing section [module]" in err


def test_demo_json_and_plot(capsys, tmp_path):
    plot = tmp_path / "x.png"
    report = cli_json(capsys, "demo", "--json", "--plot", plot)
    assert report["preset"] == "aim-16ch"
    kernels = report["kernels"]
    assert len(kernels) == 3
    assert sorted(runs[0]["kernel"] for runs in kernels) == ["gemv", "qk", "sv"]
    for runs in kernels:
        assert [r["scheduler"] for r in runs] == ["static", "pingpong", "dcs"]
        assert len({r["kernel"] for r in runs}) == 1
        for r in runs:
            check_summary(r)
        static, pingpong, dcs = (r["cycles"] for r in runs)
        assert dcs <= pingpong <= static, runs[0]["kernel"]
        assert runs[0]["speedup_vs_static"] == pytest.approx(1.0)
        assert runs[2]["speedup_vs_static"] == pytest.approx(static / dcs)
        assert len({r["commands"] for r in runs}) == 1  # the same stream under each
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.png"]


def test_presets(capsys):
    rc, out, err = cli(capsys, "presets")
    assert rc == 0
    lines = out.splitlines()
    by_name = {line.split(":")[0]: line for line in lines}
    assert "aim-16ch" in by_name
    assert "aim-32ch" in by_name
    assert "16 channels" in by_name["aim-16ch"]
    assert "32 channels" in by_name["aim-32ch"]
