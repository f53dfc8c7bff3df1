"""The ``pimphony`` command line, called in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pimphony.models.config import CONFIG_DIR
from pimphony.models.isa import load_stream

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
    cycles, energy = out.split("channel energy (aim-cent energy preset)")
    lines = [line for line in cycles.splitlines() if line.startswith("static")]
    assert len(lines) == 1
    assert "1.00x" in lines[0]  # static against itself
    assert len([line for line in energy.splitlines() if line.startswith("static")]) == 1
    assert "dcs" not in out
    assert err == ""


def test_run_batched_gemv(capsys):
    # 128 x 4096, batch 16 in passes of 4 (docs/mapping.md): 16 x 256 WR_INP, 16 x 8 x 256 MAC,
    # 16 x 8 RD_OUT, 4 passes x 32 rows = 128 row switches.
    rc, out, err = cli(
        capsys, "run", "--kernel", "gemv", "--dout", "128", "--din", "4096", "--batch", "16",
        "--sched", "dcs", "--json",
    )  # fmt: skip
    assert rc == 0, err
    r = json.loads(out)
    assert r["shape"] == {"d_out": 128, "d_in": 4096, "batch": 16}
    assert r["counts"] == {"WR_INP": 4096, "MAC": 32768, "RD_OUT": 128}
    assert r["row_switches"] == 128
    rc, _, err = cli(capsys, "run", *QK, "--batch", "2")
    assert rc == 2 and "--kernel qk does not take --batch" in err


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
        (("compile", *QK, "-o", "x.bin", "--max-tokens", "-1"), ["--max-tokens", "-1 is outside"]),
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
        # channel energy by part (aim-cent): the same commands and rows under every
        # scheduler, so equal dynamic parts; the parts sum to the total exactly
        for r in runs:
            e = r["energy"]
            assert e["unit"] == "pJ"
            assert e["total"] == sum(v for k, v in e.items() if k not in ("unit", "total"))
        for part in ("mac", "io", "activation"):
            assert len({r["energy"][part] for r in runs}) == 1
        assert runs[2]["energy"]["background"] <= runs[0]["energy"]["background"]
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


# ---- decode, compile --format dpa, size-report ----------------------------------------------

DECODE = (
    "decode", "--model", "llm-7b", "--context", "32768", "--batch", "4", "--modules", "4",
    "--tp", "2", "--pp", "2", "--partition", "tcp", "--sched", "dcs", "--memory", "lazy",
)  # fmt: skip


def test_decode_issue_example_json_report_and_plot(capsys, tmp_path):
    r = cli_json(capsys, *DECODE, "--json")
    for key in ("cycles", "tokens_per_s", "mac_utilization", "capacity_utilization"):
        assert r[key] > 0
    assert r["tokens_per_s"] == pytest.approx(4 / r["step_seconds"])
    assert set(r["ops"]) >= {"qkv", "qk", "softmax", "sv", "proj", "ffn1", "ffn2"}
    assert r["attention_share"] + r["fc_share"] + r["other_share"] == pytest.approx(1)
    stem = "llm-7b-B4-T32768-tp2pp2-tcp-dcs-lazy-" + r["provenance"]["inputs_sha256"][:8]
    saved = json.loads((tmp_path / "build/decode" / f"{stem}.json").read_text())
    assert saved["cycles"] == r["cycles"]
    png = (tmp_path / "build/decode" / f"{stem}.png").read_bytes()
    assert png.startswith(b"\x89PNG")


def test_decode_text_report_alternatives(capsys, tmp_path):
    argv = [*DECODE[:-5], "hfp", "--sched", "static", "--memory", "static"]
    rc, out, err = cli(capsys, *argv, "--report", tmp_path / "r.json", "--plot", tmp_path / "r.png")
    assert rc == 0, err
    assert "HFP, static scheduler, static memory" in out
    assert "tokens/s" in out and "SV cross-channel reduction" in out
    # A user's file is never replaced without --force.
    rc, _, err = cli(capsys, *DECODE, "--report", tmp_path / "r.json")
    assert rc == 2 and "r.json exists; pass --force" in err


def test_decode_lengths_from_file_and_workload(capsys, tmp_path):
    (tmp_path / "lens.txt").write_text("# per-request contexts\n1000\n20000\n300\n")
    r = cli_json(capsys, "decode", "--contexts", tmp_path / "lens.txt", "--json")
    assert r["batch"] == 3 and r["context_lengths"]["max"] == 20000
    auto = cli_json(capsys, "decode", "--workload", "qmsum", "--batch", "auto", "--tp", "2",
                    "--json")  # fmt: skip
    static = cli_json(capsys, "decode", "--workload", "qmsum", "--batch", "auto", "--tp", "2",
                      "--memory", "static", "--json")  # fmt: skip
    assert auto["batch"] > 2 * static["batch"] > 0  # lazy allocation admits more requests
    assert auto["capacity_utilization"] > static["capacity_utilization"]


@pytest.mark.parametrize(
    "args,pattern",
    [
        (("--modules", "3"), "--modules 3 must equal --tp x --pp = 2 x 2 = 4"),
        (("--model", "gpt-9"), "unknown model"),
        (("--tp", "3", "--modules", "6"), "tp = 3 does not divide"),
        (("--batch", "many"), "--batch 'many': give a positive int or 'auto'"),
        (("--batch", "64"), "does not fit 4 module"),
        (("--context", "40000"), "exceeds llm-7b's context_window 32768"),
        (("--workload", "nope"), "nope"),
    ],
)
def test_decode_bad_arguments(capsys, args, pattern):
    argv = list(DECODE)
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in argv:
            i = argv.index(flag)
            argv[i + 1] = value
        elif flag == "--workload":
            i = argv.index("--context")
            argv[i : i + 2] = [flag, value]
        else:
            argv += [flag, value]
    rc, _, err = cli(capsys, *argv)
    assert rc == 2
    assert pattern in err
    assert "Traceback" not in err


def test_compile_dpa_format(capsys, tmp_path):
    out = tmp_path / "qk.bin"
    rc, text, err = cli(capsys, "compile", *QK, "--format", "dpa", "-o", out)
    assert rc == 0, err
    from pimphony.models.config import load_preset
    from pimphony.models.dpa.program import DpaProgram

    prog = DpaProgram.from_bytes(out.read_bytes(), load_preset("aim-16ch"))
    assert prog.kernel == "qk" and f"{prog.nbytes} B" in text
    rc, _, err = cli(capsys, "compile", *QK, "--format", "dpa", "-o", out)
    assert rc == 2 and "exists; pass --force" in err
    rc, _, err = cli(capsys, "compile", "--kernel", "gemv", "--dout", "64", "--din", "64",
                     "--format", "dpa", "-o", tmp_path / "g.bin")  # fmt: skip
    assert rc == 2 and "--format dpa encodes qk and sv kernels" in err


def test_size_report_static_grows_dpa_constant(capsys):
    r = cli_json(capsys, "size-report", "--contexts", "1024,4096,16384", "--json")
    rows = r["rows"]
    assert [row["tokens"] for row in rows] == [1024, 4096, 16384]
    assert rows[0]["static_bytes"] < rows[1]["static_bytes"] < rows[2]["static_bytes"]
    assert rows[2]["static_bytes"] > 3.5 * rows[1]["static_bytes"]
    assert len({row["dpa_bytes"] for row in rows}) == 1


def test_dex_subcommand_keeps_pim_utilisation_with_slicing(capsys):
    r = cli_json(capsys, "dex", "--json")
    alone = r["pim_alone"]["mac_utilization"]
    for row in r["rows"]:
        assert row["dex"]["mac_utilization"] == pytest.approx(alone)
        assert row["baseline"]["mac_utilization"] < 0.6 * alone


def test_errors_name_the_command_and_exit_2(capsys):
    rc, out, err = run_cli(capsys, "run", "--kernel", "gemv", "--dout", "0", "--din", "64")
    assert (rc, out) == (2, "")
    assert err.startswith("pimphony run: error: ") and err.count("\n") == 1


def test_every_deliberate_error_is_a_pimphony_error():
    from pimphony.compiler.plan import PartitionError
    from pimphony.models.bank_slice import SliceError
    from pimphony.models.errors import PimphonyError
    from pimphony.models.hub import HubError
    from pimphony.sim.eda.area import YosysError
    from pimphony.sim.experiments.gpu_compare import CompareError
    from pimphony.sim.verify.runner import CosimError

    for cls in (PartitionError, SliceError, HubError, YosysError, CosimError, CompareError):
        assert issubclass(cls, PimphonyError), cls


def test_internal_errors_say_where_the_traceback_is(capsys, monkeypatch, tmp_path):
    import pimphony.sim.presets as sim_presets

    def broken(args):
        raise KeyError("boom")

    monkeypatch.setattr(sim_presets, "run", broken)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.delenv("PIMPHONY_DEBUG", raising=False)
    rc, out, err = run_cli(capsys, "presets")
    assert rc == 1 and "Traceback" not in err
    assert "pimphony presets: internal error: KeyError: 'boom'" in err
    (trace,) = tmp_path.glob("pimphony-traceback-*.txt")
    assert "KeyError: 'boom'" in trace.read_text() and str(trace) in err


def test_a_closed_pipe_is_not_an_error(capsys, monkeypatch):
    # ``pimphony demo | head -1``: the reader closes the pipe while the command still writes.
    import pimphony.sim.presets as sim_presets

    def writes_into_a_closed_pipe(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sim_presets, "run", writes_into_a_closed_pipe)
    rc, _, err = run_cli(capsys, "presets")
    assert (rc, err) == (0, "")


def test_help_shows_defaults(capsys):
    rc, out, _ = run_cli(capsys, "decode", "--help")
    assert rc == 0 and "(default: aim-32ch-32g)" in out


def _choice(value: str, allowed: str) -> str:
    """What argparse says of ``value`` given to an option that chooses one of ``allowed``."""
    return f"invalid choice: '{value}' (choose from {allowed})"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        # a choice: the allowed values are named
        pytest.param(["run", "--kernel", "gemv", "--sched", "foo"],
                     _choice("foo", "'static', 'pingpong', 'dcs'"), id="run-sched"),
        pytest.param(["run", "--kernel", "xx"], _choice("xx", "'gemv', 'qk', 'sv'"),
                     id="run-kernel"),
        pytest.param(["decode", "--partition", "foo"],
                     _choice("foo", "'hfp', 'tcp', 'itpp', 'auto'"), id="decode-partition"),
        pytest.param(["decode", "--memory", "foo"], _choice("foo", "'lazy', 'static'"),
                     id="decode-memory"),
        pytest.param(["sweep", "--kernel", "sv"], _choice("sv", "'gemv', 'qk'"),
                     id="sweep-kernel-of-attention"),
        # a number: it is bounded
        pytest.param(["decode", "--workload", "qmsum", "--seed", "-1"],
                     "--seed: -1 is outside 0 to", id="decode-seed"),
        pytest.param(["ablation", "--requests", "-1"], "--requests: -1 is outside 1 to 100,000",
                     id="ablation-requests-negative"),
        pytest.param(["ablation", "--requests", "0"], "--requests: 0 is outside 1 to 100,000",
                     id="ablation-requests-zero"),
        pytest.param(["decode", "--batch", "1000000000000"], "must be from 1 to 1024 requests",
                     id="decode-batch"),
        pytest.param(["decode", "--tp", "0"], "--tp: 0 is outside 1 to 1,024", id="decode-tp"),
        pytest.param(["capacity", "--requests", "0"], "--requests: 0 is outside 1 to 100,000",
                     id="capacity-requests"),
        pytest.param(["dex", "--seed", "x"], "--seed: 'x' is not an integer", id="dex-seed"),
        # dcc-fig8 (the fuzzer's, issue 34: a ValueError, a MemoryError, three endless runs)
        pytest.param(["dcc-fig8", "--models", ""], "--models is empty", id="dcc-fig8-models"),
        pytest.param(["dcc-fig8", "--batches", "1000000000000"],
                     "--batches: 1000000000000 is outside 1 to 4,096", id="dcc-fig8-batches"),
        pytest.param(["dcc-fig8", "--points", "1000000000000"],
                     "--points: 1000000000000 is outside 2 to 10,000", id="dcc-fig8-points"),
        pytest.param(["dcc-fig8", "--points", "1"], "--points: 1 is outside 2 to 10,000",
                     id="dcc-fig8-one-point"),
        pytest.param(["dcc-fig8", "--budget", "1000000000000"],
                     "--budget: 1000000000000 is outside 1 to 1,000,000", id="dcc-fig8-budget"),
        pytest.param(["dcc-fig8", "--verify", "1000000000000"],
                     "--verify: 1000000000000 is outside 1 to 1,000,000", id="dcc-fig8-verify"),
    ],
)  # fmt: skip
def test_a_bad_option_value_exits_2_saying_what_is_allowed(capsys, argv, says):
    rc, out, err = run_cli(capsys, *argv)
    assert (rc, out) == (2, "")
    assert says in err and "Traceback" not in err


def test_dpa_program_must_serve_the_tokens_asked_for(capsys, tmp_path):
    out = tmp_path / "p.bin"
    rc, _, err = run_cli(
        capsys, "compile", "--kernel", "qk", "--tokens", "4096", "--dh", "128",
        "--format", "dpa", "--max-tokens", "1024", "-o", out,
    )  # fmt: skip
    assert rc == 2 and "--tokens 4096 exceeds --max-tokens 1024" in err
    assert not out.exists()


def test_contexts_file_cut_by_batch_is_said(capsys, tmp_path):
    lengths = tmp_path / "four.txt"
    lengths.write_text("100\n200\n300\n400\n")
    rc, out, err = run_cli(
        capsys, "decode", "--model", "llm-1.8b", "--contexts", lengths, "--batch", "2",
        "--json", "--report", tmp_path / "r.json", "--plot", tmp_path / "r.png",
    )  # fmt: skip
    assert rc == 0 and json.loads(out)["batch"] == 2
    assert "takes the first 2 of the 4 context lengths" in err


def _decode(capsys, tmp_path, *extra):
    return run_cli(capsys, "decode", "--model", "llm-1.8b", *extra)


def test_different_inputs_never_share_a_report_name(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = []
    for lengths in ("100\n200\n", "100\n201\n"):
        (tmp_path / "lens.txt").write_text(lengths)
        rc, out, _ = _decode(capsys, tmp_path, "--contexts", "lens.txt")
        assert rc == 0
        names.append(out.split("report: ")[1].split()[0])
    assert names[0] != names[1] and all(Path(n).exists() for n in names)


def test_report_and_plot_must_differ(capsys, tmp_path):
    same = tmp_path / "x.png"
    rc, _, err = _decode(capsys, tmp_path, "--context", "64", "--report", same, "--plot", same)
    assert rc == 2 and "--report and --plot both name" in err and not same.exists()


def test_reports_record_what_produced_them(capsys, tmp_path):
    # A custom preset that calls itself aim-16ch but has another tRP is told apart by hash.
    text = (CONFIG_DIR / "aim-16ch.toml").read_text().replace("tRP = 16", "tRP = 20")
    custom = tmp_path / "custom.toml"
    custom.write_text(text)
    runs = {}
    for preset in ("aim-16ch", custom):
        rc, out, _ = run_cli(
            capsys, "run", "--kernel", "qk", "--tokens", "512", "--dh", "64", "--json",
            "--preset", preset,
        )  # fmt: skip
        assert rc == 0
        runs[str(preset)] = json.loads(out)["provenance"]
    shipped, mine = runs["aim-16ch"], runs[str(custom)]
    assert shipped["preset"]["name"] == mine["preset"]["name"] == "aim-16ch"
    assert shipped["preset"]["sha256"] != mine["preset"]["sha256"]
    assert mine["preset"]["values"]["timing"]["tRP"] == 20
    assert mine["options"]["preset"] == str(custom) and mine["tool"] == "pimphony"
    rc, out, _ = _decode(
        capsys, tmp_path, "--contexts", _lengths(tmp_path), "--json",
        "--report", tmp_path / "r.json", "--plot", tmp_path / "r.png",
    )  # fmt: skip
    block = json.loads(out)["provenance"]
    assert block["context_lengths"] == [100, 300] and block["model"]["name"] == "llm-1.8b"
    assert json.loads((tmp_path / "r.json").read_text())["provenance"] == block


def _lengths(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text("100\n300\n")
    return path


@pytest.mark.parametrize(
    "suffix,magic", [(".pdf", b"%PDF"), (".svg", b"<?xml"), (".png", b"\x89PNG")]
)
def test_plots_honour_the_extension(capsys, tmp_path, suffix, magic):
    plot = tmp_path / f"d{suffix}"
    rc, _, _ = run_cli(capsys, "sweep", "--dims", "64,128", "--plot", plot)
    assert rc == 0 and plot.read_bytes().startswith(magic)


def test_unknown_plot_extension_is_refused_before_any_work(capsys, tmp_path):
    rc, out, err = run_cli(capsys, "demo", "--plot", tmp_path / "d.jpg")
    assert (rc, out) == (2, "") and "a plot is written as .png, .pdf, .svg; got '.jpg'" in err


def test_output_onto_a_directory_is_a_clear_error(capsys, tmp_path):
    rc, _, err = run_cli(
        capsys, "compile", "--kernel", "qk", "--tokens", "256", "--dh", "64", "-o", tmp_path
    )
    assert rc == 2 and f"{tmp_path} is a directory; name a file to write" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["size-report", "--contexts", "1024,2048", "--json"],
        ["capacity", "--requests", "64", "--json"],
        ["dex", "--rates", "0.1", "--tokens", "512", "--dh", "64", "--json", "--quiet"],
    ],
    ids=["size-report", "capacity", "dex"],
)
def test_experiment_json_carries_provenance(capsys, argv):
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 0, err
    block = json.loads(out)["provenance"]
    assert block["tool"] == "pimphony" and block["command"] == f"pimphony {argv[0]}"
    assert "options" in block
