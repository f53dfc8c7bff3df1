"""RTL waveforms: record a VCD under Verilator, summarise it, and compare with the TLM."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from pimphony.compiler.kernels import compile_kernel
from pimphony.models.channel import run_channel
from pimphony.models.config import load_preset
from pimphony.models.isa import Op
from pimphony.rtl.common import command_layout, issued_layout
from pimphony.sim.eda.vcd import (
    WaveformError,
    read_stamp,
    signal_width,
    stamp_vcd,
    summarize_vcd,
    vcd_references,
)
from pimphony.sim.eda.waves import _gtkw_text, record_waves
from vcdvcd import VCDVCD

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent
CFG = load_preset("aim-16ch")
SHAPE = {"tokens": 64, "d_h": 64}


@pytest.fixture(scope="module")
def in_repo():
    # Verilator builds are cached under build/sim/ relative to the working directory.
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        yield


@pytest.fixture(scope="module", params=["dcs", "static", "pingpong"])
def recorded(request, in_repo):
    """(scheduler, VCD path, .gtkw path, TLM result) for qk T=64 d_h=64."""
    sched = request.param
    vcd, gtkw = record_waves("qk", SHAPE, sched, CFG)
    tlm = run_channel(compile_kernel(CFG, "qk", **SHAPE).commands, CFG, sched)
    return sched, vcd, gtkw, tlm


cli = run_cli


def test_summary_matches_tlm(recorded):
    sched, vcd, _, tlm = recorded
    assert vcd == Path("build/waves") / f"qk-T64-dh64-{sched}.vcd"
    s = summarize_vcd(vcd, CFG)
    assert s["cycles"] == tlm.cycles
    assert s["mac_utilization"] == tlm.mac_utilization
    assert s["counts"] == tlm.counts
    assert s["commands"] == tlm.commands
    issue = np.sort(tlm.issue)
    assert (s["first_issue"], s["last_issue"]) == (int(issue[0]), int(issue[-1]))
    assert s["longest_stall"] == int(np.max(np.diff(issue) - 1))
    assert (s["runs"], s["notes"]) == (1, [])


def _gtkw_lines(text: str) -> list[tuple[int, str]]:
    """(flags in force, line) of each trace, group or comment line of a save file: a
    ``@flags`` line holds until the next (GTKWSave writes one only when the flags change)."""
    flags, out = None, []
    for line in text.splitlines():
        if line.startswith("@"):
            flags = int(line[1:], 16)
        elif line and line[0] not in "[*":
            out.append((flags, line))
    return out


def _gtkw_traces(text: str) -> list[tuple[int, str]]:
    return [(f, line) for f, line in _gtkw_lines(text) if not line.startswith("-")]


def _gtkw_groups(text: str) -> set[str]:
    return {line[1:] for f, line in _gtkw_lines(text) if f == 0x800200 and line[0] == "-"}


def test_gtkw_names_signals_in_the_vcd(recorded):
    sched, vcd, gtkw, _ = recorded
    assert gtkw == vcd.with_suffix(".gtkw") and gtkw.exists()
    text = gtkw.read_text()
    # The pair names each other by relative paths only (GTKWave relocates them together).
    assert f'[dumpfile] "{vcd.name}"' in text and f'[savefile] "{gtkw.name}"' in text
    assert '"/' not in text and str(ROOT) not in text
    refs = set(VCDVCD(str(vcd), only_sigs=True).references_to_ids)
    traces = [re.sub(r"^\+\{[^}]*\} ", "", line) for _, line in _gtkw_traces(text)]
    assert len(traces) > 20
    for name in traces:
        # GTKWave spells a variable whose name holds a '.' as scope.\var.
        assert name.replace("\\", "") in refs, name
    groups = _gtkw_groups(text)
    assert {"stream in", "issue", "queues", "rows"} <= groups
    joined = "\n".join(traces)
    for sig in ("i__valid", "o__payload", "queue.level", "rows.row_ok", "rows.switching"):
        assert sig in joined, sig
    if sched == "pingpong":
        assert {"ping-pong bit and hand-off", "compute queue"} <= groups
        assert {"I/O, ping-pong bit 0 queue", "I/O, ping-pong bit 1 queue"} <= groups
        for sig in ("ping_pong", "cur_eff", "flip", "busy", "phase_gh", "head_slot_io1"):
            assert f"pingpong.{sig}" in joined, sig
        for q in ("mac_queue", "io_queue_0", "io_queue_1"):
            assert f"{q}.level" in joined, q
    else:
        assert "ping-pong bit and hand-off" not in groups
    if sched == "dcs":
        assert "D/S-Table entry under access" in groups
        for table in ("d_table_gbuf", "d_table_obuf", "s_table_gbuf", "s_table_obuf"):
            assert f"+{{{table}.wr.en}}" in text and f"+{{{table}.rd0.addr}}" in text


def _gtkw_dumpfile(gtkw: Path) -> Path:
    """The VCD ``gtkwave FILE.gtkw`` opens: ``[dumpfile]`` taken relative to the recorded
    ``[savefile]``'s folder and put under ``gtkw``'s real folder (GTKWave's
    ``src/savefile.c``: ``extract_dumpname_from_save_file`` -> ``find_dumpfile``)."""
    head = dict(re.findall(r'^\[(dumpfile|savefile)\] "(.*)"$', gtkw.read_text(), re.M))
    dump, save = Path(head["dumpfile"]), Path(head["savefile"])
    assert not dump.is_absolute() and not save.is_absolute()
    return Path(gtkw.resolve().parent, save.parent, dump).resolve()


def test_gtkw_pair_opens_after_moving(recorded, tmp_path):
    sched, vcd, gtkw, _ = recorded
    assert _gtkw_dumpfile(gtkw) == vcd.resolve()
    moved = tmp_path / "elsewhere" / "deeper"
    moved.mkdir(parents=True)
    for f in (vcd, gtkw):
        shutil.copy(f, moved / f.name)
    assert _gtkw_dumpfile(moved / gtkw.name) == (moved / vcd.name).resolve()
    # Same traces, each shown as before: binary for a bit, hex for a payload or a wide word.
    refs = vcd_references(moved / vcd.name)
    by_name = {name: ref for ref, name in refs.items()}
    traces = _gtkw_traces((moved / gtkw.name).read_text())
    assert len(traces) > 20
    for flags, line in traces:
        ref = by_name[re.sub(r"^\+\{[^}]*\} ", "", line)]
        if signal_width(ref) == 1:
            assert flags == 0x28, line
        else:
            assert flags in (0x22, 0x24), line


def test_gtkw_names_a_vcd_in_another_folder_relatively(tmp_path):
    layout = issued_layout(CFG)
    vcd = _vcd(tmp_path / "w.vcd", [(1, 1, 0)], layout.size)
    refs = vcd_references(vcd)
    gtkw = tmp_path / "views" / "w.gtkw"
    gtkw.parent.mkdir()
    ports = [(r, None) for r in refs if "o__" in r]
    text = _gtkw_text(vcd, gtkw, refs, [("issue", [(None, "a note"), *ports])], "title")
    gtkw.write_text(text)
    assert text.splitlines()[:7] == [
        "[*] title",
        "[*] generated by pimphony wave record (make wave); regenerating overwrites this file",
        '[dumpfile] "../w.vcd"',
        '[savefile] "w.gtkw"',
        "[timestart] 0",
        "[sst_expanded] 1",
        "[signals_width] 320",
    ]
    assert _gtkw_dumpfile(gtkw) == vcd.resolve()
    assert re.search(r"^@800200\n-issue\n@200\n-a note\n@28\n", text, re.M)
    assert text.endswith("@1000200\n-issue\n")
    assert [f for f, _ in _gtkw_traces(text)] == [0x28, 0x28, 0x28, 0x22]


def test_cli_wave_summary_json(recorded, capsys):
    sched, vcd, _, tlm = recorded
    rc, out, err = cli(capsys, "wave", "summary", vcd, "--json")
    assert rc == 0, err
    s = json.loads(out)
    assert (s["cycles"], s["mac_utilization"], s["counts"]) == (
        tlm.cycles,
        tlm.mac_utilization,
        tlm.counts,
    )
    rc, out, err = cli(
        capsys, "run", "--kernel", "qk", "--tokens", 64, "--dh", 64, "--sched", sched, "--json"
    )
    assert rc == 0, err
    run = json.loads(out)
    assert (s["cycles"], s["mac_utilization"]) == (run["cycles"], run["mac_utilization"])
    rc, out, _ = cli(capsys, "wave", "summary", vcd)
    assert rc == 0 and f"cycles           {tlm.cycles}" in out


def test_reset_between_streams_summarises_the_last(in_repo):
    from pimphony.sim.verify.scheduler import RtlStream, run_rtl

    a = compile_kernel(CFG, "qk", tokens=32, d_h=32).commands
    b = compile_kernel(CFG, "gemv", d_out=32, d_in=64).commands
    out = run_rtl("dcs", CFG, [RtlStream("a", a), RtlStream("b", b)], waves=True)
    s = summarize_vcd(out["__waves__"], CFG)
    tlm = run_channel(b, CFG, "dcs")
    assert s["runs"] == 2 and "last" in s["notes"][0]
    assert (s["cycles"], s["counts"]) == (tlm.cycles, tlm.counts)


def _vcd(path: Path, steps: list[tuple[int, int, int]], width: int) -> Path:
    """Synthetic VCD: after rising edge k the bench drives (valid, ready, payload) = steps[k]."""
    lines = [
        "$timescale 1ps $end",
        "$scope module $rootio $end",
        "$var wire 1 ! clk $end",
        "$var wire 1 # o__valid $end",
        "$var wire 1 $ o__ready $end",
        f"$var wire {width} % o__payload [{width - 1}:0] $end",
        "$upscope $end",
        "$enddefinitions $end",
    ]
    for k, (valid, ready, word) in enumerate([*steps, (0, 0, 0)]):
        lines += [f"#{2000 * k}", "1!", f"{valid}#", f"{ready}$", f"b{word:b} %"]
        lines += [f"#{2000 * k + 1000}", "0!"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_summary_samples_just_before_the_rising_edge(tmp_path):
    layout, cmd = issued_layout(CFG), command_layout(CFG)

    def word(cycle: int, op: Op) -> int:
        return (cycle << layout["cycle"].offset) | (op << (layout["cmd"].offset + cmd["op"].offset))

    steps = [
        (1, 1, word(0, Op.WR_INP)),
        (1, 0, word(1, Op.MAC)),  # not taken: ready low
        (1, 1, word(2, Op.MAC)),
        (0, 1, word(3, Op.MAC)),  # not offered
        (0, 1, word(4, Op.MAC)),
        (1, 1, word(5, Op.RD_OUT)),
    ]
    s = summarize_vcd(_vcd(tmp_path / "w.vcd", steps, layout.size), CFG)
    assert s["counts"] == {"WR_INP": 1, "MAC": 1, "RD_OUT": 1}
    assert (s["first_issue"], s["last_issue"], s["longest_stall"]) == (0, 5, 2)
    assert s["cycles"] == 5 + CFG.timing.t_RD_OUT
    assert s["mac_utilization"] == CFG.timing.tCCD / s["cycles"]
    with pytest.raises(WaveformError, match="bits"):
        summarize_vcd(_vcd(tmp_path / "narrow.vcd", steps[:1], 10), CFG)


def test_unknown_scheduler_has_no_waves():
    with pytest.raises(WaveformError, match="unknown; waveforms exist for: .*pingpong"):
        record_waves("qk", SHAPE, "nope", CFG)


@pytest.mark.parametrize(
    "content",
    [
        None,
        "hello, not a waveform\n",
        b"\x89PNG\r\n\x1a\n\0\0",
        "",
        "$date today $end\n",
        "$scope module top $end\n$var wire 1 ! a $end\n$upscope $end\n$enddefinitions $end\n",
    ],
    ids=["missing", "text", "binary", "empty", "no-vars", "no-clk"],
)
def test_bad_files_exit_2(tmp_path, capsys, content):
    path = tmp_path / "bad.vcd"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    rc, out, err = cli(capsys, "wave", "summary", path, "--json")
    assert rc == 2
    assert out == ""
    assert err.startswith("pimphony wave summary: error: ") and "Traceback" not in err


# ---- what produced a VCD: the stamp, and summaries refusing another preset ----------------


def test_recorded_vcd_says_what_produced_it(recorded):
    sched, vcd, _, _ = recorded
    stamp = read_stamp(vcd)
    assert (stamp["tool"], stamp["kernel"], stamp["sched"]) == ("pimphony", "qk", sched)
    assert stamp["preset"]["values"] == CFG.to_dict()
    assert stamp["preset"]["sha256"] == CFG.sha256()
    assert VCDVCD(str(vcd), only_sigs=True).references_to_ids  # still a readable VCD


def test_summary_refuses_a_preset_other_than_the_recorded_one(recorded, capsys, tmp_path):
    _, vcd, _, tlm = recorded
    rc, _, err = cli(capsys, "wave", "summary", vcd, "--preset", "aim-32ch")
    assert rc == 2
    assert "recorded with preset aim-16ch" in err and "module.channels 16 vs 32" in err
    # Same name, one value changed: still refused, naming the value.
    text = (ROOT / "configs" / "aim-16ch.toml").read_text()
    mine = tmp_path / "mine.toml"
    mine.write_text(re.sub(r"(?m)^tRP = 16\b", "tRP = 20", text))
    rc, _, err = cli(capsys, "wave", "summary", vcd, "--preset", mine)
    assert rc == 2 and "timing.tRP 16 vs 20" in err
    # The same values under another path are accepted.
    same = tmp_path / "same.toml"
    same.write_text(text)
    rc, out, err = cli(capsys, "wave", "summary", vcd, "--preset", same, "--json")
    assert rc == 0, err
    assert json.loads(out)["cycles"] == tlm.cycles


def _issued_steps(cfg) -> list[tuple[int, int, int]]:
    layout, cmd = issued_layout(cfg), command_layout(cfg)
    op_at = layout["cmd"].offset + cmd["op"].offset
    return [(1, 1, (5 << layout["cycle"].offset) | (Op.RD_OUT << op_at))]


def test_summary_retimes_with_the_recorded_preset(tmp_path, capsys):
    slow = CFG.replace(**{"timing.t_RD_OUT": 40})
    vcd = _vcd(tmp_path / "w.vcd", _issued_steps(slow), issued_layout(slow).size)
    record = {"block": "dcs", "kernel": "qk", "preset": {"values": slow.to_dict()}}
    vcd.write_bytes(stamp_vcd(vcd.read_bytes(), record))
    rc, out, err = cli(capsys, "wave", "summary", vcd, "--json")
    assert rc == 0, err
    s = json.loads(out)
    assert s["cycles"] == 5 + 40  # the recorded t_RD_OUT, not aim-16ch's 26
    assert s["preset_sha256"] == slow.sha256() and "recorded in the VCD" in s["notes"][0]
    # Unstamped: the default preset, and the note says it was assumed.
    plain = _vcd(tmp_path / "p.vcd", _issued_steps(CFG), issued_layout(CFG).size)
    rc, out, _ = cli(capsys, "wave", "summary", plain, "--json")
    s = json.loads(out)
    assert s["cycles"] == 5 + CFG.timing.t_RD_OUT and "records no preset" in s["notes"][0]


def test_summary_of_a_non_scheduler_block_says_so(tmp_path, capsys):
    vcd = _vcd(tmp_path / "dpa.vcd", _issued_steps(CFG), issued_layout(CFG).size)
    vcd.write_bytes(stamp_vcd(vcd.read_bytes(), {"block": "dpa", "preset": {}}))
    rc, _, err = cli(capsys, "wave", "summary", vcd)
    assert rc == 2 and "waveform of the dpa block" in err and "gtkwave" in err
    assert "another --preset" not in err
    # Unstamped, recognised by its scope.
    raw = _vcd(tmp_path / "b.vcd", _issued_steps(CFG), 34).read_text()
    (tmp_path / "b.vcd").write_text(raw.replace("module $rootio", "module bank_slice"))
    rc, _, err = cli(capsys, "wave", "summary", tmp_path / "b.vcd")
    assert rc == 2 and "waveform of the bank_slice block" in err


def test_stamp_round_trips_any_text(tmp_path):
    record = {"preset": {"name": "odd $end name\n"}, "block": "dcs"}
    raw = b"$timescale 1ps $end\n"
    once = stamp_vcd(raw, record)
    assert once.count(b"\n") == 2 and once.endswith(raw)
    assert stamp_vcd(once, record) == once  # re-stamping replaces, not repeats
    (tmp_path / "s.vcd").write_bytes(once)
    assert read_stamp(tmp_path / "s.vcd") == record
    (tmp_path / "u.vcd").write_bytes(raw)
    assert read_stamp(tmp_path / "u.vcd") is None


def test_a_truncated_vcd_says_so(recorded, tmp_path, capsys):
    """Cut mid-line, the last line is unfinished; cut at a line break half-way, the stamp's
    command count shows the missing issues. Either way ``wave summary`` fails in one line."""
    sched, vcd, _, tlm = recorded
    raw = vcd.read_bytes()
    half = raw.index(b"\n", len(raw) // 2) + 1
    cut_line, cut_mid = tmp_path / "line.vcd", tmp_path / "mid.vcd"
    cut_line.write_bytes(raw[:half])
    cut_mid.write_bytes(raw[: half + 3])
    with pytest.raises(WaveformError, match=r"line\.vcd: truncated: it issues (\d+) of the"):
        summarize_vcd(cut_line, CFG)
    assert read_stamp(cut_line)["commands"] == tlm.commands
    code, _, err = cli(capsys, "wave", "summary", cut_mid)
    assert code == 2
    assert err.strip().splitlines() == [
        f"pimphony wave summary: error: {cut_mid}: truncated (its last line is unfinished, "
        f"{half + 3} bytes); re-record it"
    ]


def test_an_unstamped_vcd_cut_mid_line_is_refused(tmp_path):
    layout = issued_layout(CFG)
    path = _vcd(tmp_path / "w.vcd", [(1, 1, 0)], layout.size)
    path.write_bytes(path.read_bytes()[:-2])  # "0!\n" cut to "0"
    with pytest.raises(WaveformError, match="truncated \\(its last line is unfinished"):
        summarize_vcd(path, CFG)


@pytest.mark.parametrize(
    "extra, message",
    [  # the fuzzer's (issue 34): ignored, the recording ran on
        (("--tokens", "-1"), "--tokens does not apply to --kernel gemv (it takes --dout and"),
        (("--dh", "64", "--tokens", "9"), "--tokens and --dh do not apply to --kernel gemv"),
    ],
)
def test_record_refuses_the_other_kernels_options(capsys, tmp_path, extra, message):
    rc, _, err = run_cli(capsys, "wave", "record", "--kernel", "gemv", "--dout", "64", "--din",
                         "64", "--out-dir", tmp_path, *extra)  # fmt: skip
    assert rc == 2 and message in err, err
    rc, _, err = run_cli(capsys, "wave", "record", "--kernel", "qk", "--tokens", "64", "--dh",
                         "64", "--dout", "8", "--out-dir", tmp_path)  # fmt: skip
    assert rc == 2 and "--dout does not apply to --kernel qk (it takes --tokens and --dh)" in err
    assert list(tmp_path.iterdir()) == []
