"""The compiled Verilator harness (``sim/verify/compiled.py``) against the TLM and cocotb.

Per scheduler block, one build per configuration (module-scoped fixtures; cached in
``build/sim/``) runs the streams of ``tests/test_cosim.py`` (compiler kernels including the
batched GEMVs, random streams, with input ``valid`` gaps and with output ``ready`` gaps):
every command issues in the TLM's cycle (the rules of ``check_schedule`` under ``ready``
gaps) and in the cocotb harness's cycle, also at a preset with ``t_MOD > 0``
(``aim-ramulator``). Then the file formats and the errors: a malformed stream file names the
stream and field, a missing tool is named. The campaign: a bounded sample over every block
(compiler streams mixed in), stopping at and shrinking an injected mismatch to its minimal
reproducer, ``--replay`` and the refusals; the longer random campaigns are ``slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from pimphony.models.channel import check_schedule, run_channel
from pimphony.models.config import load_preset
from pimphony.models.isa import Op, StreamError, load_stream
from pimphony.rtl.blocks import SCHEDULER_OF_BLOCK
from pimphony.rtl.common import command_layout
from pimphony.sim import parallel
from pimphony.sim.cli import main as cli_main
from pimphony.sim.verify import campaign, compiled
from pimphony.sim.verify.campaign import (
    PARTS_PER_WORKER,
    CampaignOptions,
    campaign_parts,
    campaign_stream,
    run_campaign,
)
from pimphony.sim.verify.compiled import (
    RECORD_HEADER,
    STREAM_HEADER,
    build_harness,
    encode_streams,
    format_header,
    read_results,
)
from pimphony.sim.verify.runner import CosimError, pack_fields, pack_words
from pimphony.sim.verify.scheduler import RtlStream, run_rtl
from pimphony.sim.verify.streams import (
    accepted_gaps,
    cosim_streams,
    kernel_streams,
    random_pingpong_stream,
    random_stream,
)

from tests.helpers import ROOT

BLOCKS = sorted(SCHEDULER_OF_BLOCK)
CFG = load_preset("aim-16ch")
RAM_CFG = load_preset("aim-ramulator")
STREAMS = {sched: cosim_streams(CFG, sched) for sched in SCHEDULER_OF_BLOCK.values()}
# What cocotb also runs (it simulates ~20K cycles/s): the random streams, with and without
# gaps, and a batched GEMV.
COCOTB_NAMES = ("gemv-b5-100x300", *(s.name for s in STREAMS["dcs"] if "random" in s.name))


def _tlm_problems(cfg, sched: str, streams: list[RtlStream], rtl: dict) -> list[str]:
    """Where the RTL leaves the TLM: cycles, or under ``ready`` gaps, the schedule rules."""
    problems = []
    for s in streams:
        got = rtl[s.name]
        if s.ready_pattern is not None:
            problems += [f"{s.name}: {p}" for p in check_schedule(s.commands, got, cfg, sched)]
            continue
        want = run_channel(s.commands, cfg, sched, valid_gaps=s.valid_gaps).issue
        diff = np.flatnonzero(want != got)
        if diff.size:
            k = int(diff[0])
            problems.append(f"{s.name}: command #{k} RTL {got[k]} vs TLM {want[k]}")
    return problems


def _differences(a: dict, b: dict) -> list[str]:
    return [name for name in a if not np.array_equal(a[name], b[name])]


@pytest.fixture(scope="module", params=BLOCKS)
def harness(request):
    return build_harness(request.param, CFG)


@pytest.fixture(scope="module")
def compiled_run(harness):
    return harness.run(STREAMS[SCHEDULER_OF_BLOCK[harness.block]])


def test_compiled_matches_tlm(harness, compiled_run):
    sched = SCHEDULER_OF_BLOCK[harness.block]
    problems = _tlm_problems(CFG, sched, STREAMS[sched], compiled_run.issue)
    assert not problems, "\n".join(problems)


def test_compiled_matches_cocotb(harness, compiled_run):
    streams = [s for s in STREAMS[SCHEDULER_OF_BLOCK[harness.block]] if s.name in COCOTB_NAMES]
    cocotb = run_rtl(harness.block, CFG, streams)
    assert _differences(cocotb, {s.name: compiled_run.issue[s.name] for s in streams}) == []


def test_compiled_run_reports_cycles(harness, compiled_run):
    streams = STREAMS[SCHEDULER_OF_BLOCK[harness.block]]
    for s in streams:
        # The last command issues in the last simulated cycle or the one before.
        assert compiled_run.cycles[s.name] >= int(compiled_run.issue[s.name].max()) + 1
    assert 0 < compiled_run.sim_seconds <= compiled_run.seconds
    assert compiled_run.cycles_per_s > 0


@pytest.mark.parametrize("block", BLOCKS)
def test_ramulator_conventions(block):
    """``t_MOD = 32``: compiled == TLM on kernels (batched GEMV too) and random streams with
    gaps; compiled == cocotb on the streams ``tests/test_cosim.py`` runs there, plus gaps."""
    sched = SCHEDULER_OF_BLOCK[block]
    kernels = kernel_streams(RAM_CFG)
    streams = [RtlStream(name, s) for name, s in kernels.items()]
    make = random_pingpong_stream if sched == "pingpong" else random_stream
    s = make(RAM_CFG, 300, 31)
    gaps = accepted_gaps(RAM_CFG, sched, s, np.random.default_rng(31), high=40)
    streams += [
        RtlStream("random-31", s),
        RtlStream("random-31-valid-gaps", s, valid_gaps=gaps),
        RtlStream("random-31-ready-gaps", s, ready_pattern=(1, 0, 0, 1, 1, 0, 1)),
    ]
    got = build_harness(block, RAM_CFG).run(streams).issue
    problems = _tlm_problems(RAM_CFG, sched, streams, got)
    assert not problems, "\n".join(problems)
    assert run_channel(s, RAM_CFG, sched, valid_gaps=gaps).extra["mode_switches"] > 0
    names = ("qk-T256-dh64", "sv-T512-dh64", "gemv-b5-100x300", "random-31", "random-31-valid-gaps")
    subset = [x for x in streams if x.name in names]
    assert _differences(run_rtl(block, RAM_CFG, subset), got) == []


# -- formats and errors --------------------------------------------------------------------


def test_pack_words_is_pack_fields():
    s = random_stream(CFG, 200, seed=3)
    layout = command_layout(CFG)
    assert pack_words(layout, s).tolist() == pack_fields(layout, s)


def test_header_carries_the_python_formats():
    text = format_header(CFG)
    # Literal values (the malformed-file tests rely on the same layout): a wrong generator
    # or a changed record format fails here, not only a header out of step with Python.
    assert "constexpr unsigned RECORD_HEADER_SIZE = 24;" in text
    assert "constexpr unsigned PAYLOAD_BITS = 34;" in text
    assert "#define IN_VALID i___05Fvalid" in text
    assert "STREAM_HEADER_STREAMS = 16;" in text
    assert RECORD_HEADER.itemsize == 24 and command_layout(CFG).size == 34


def test_encode_refuses_bad_streams():
    s = random_stream(CFG, 10, seed=1)
    with pytest.raises(StreamError, match=r"stream 'g': valid_gaps must be 10 values"):
        encode_streams(CFG, [RtlStream("g", s, valid_gaps=(1, 2))])
    with pytest.raises(StreamError, match=r"stream 'g': valid_gaps\[0\] = -1"):
        encode_streams(CFG, [RtlStream("g", s, valid_gaps=(-1,) + (0,) * 9)])
    with pytest.raises(StreamError, match=r"stream 'r': ready_pattern\[1\] = 2"):
        encode_streams(CFG, [RtlStream("r", s, ready_pattern=(1, 2))])
    with pytest.raises(StreamError, match=r"stream 'r': ready_pattern is never 1"):
        encode_streams(CFG, [RtlStream("r", s, ready_pattern=(0, 0))])
    bad = s.copy()
    k = int(np.flatnonzero(bad["op"] == Op.MAC)[0])
    bad["out"][k] = CFG.channel.obuf_entries
    with pytest.raises(StreamError, match=rf"stream 'o': command {k} \(MAC\): out = 64"):
        encode_streams(CFG, [RtlStream("o", bad)])


@pytest.fixture(scope="module")
def dcs_harness():
    return build_harness("dcs", CFG)


def _file(tmp_path, data: bytes):
    path = tmp_path / "streams.bin"
    path.write_bytes(data)
    return path


def test_malformed_stream_file_names_record_and_field(dcs_harness, tmp_path):
    s = random_stream(CFG, 10, seed=2)
    good = encode_streams(
        CFG, [RtlStream("a", s), RtlStream("b", s, valid_gaps=(1,) * 10, ready_pattern=(1, 0))]
    )
    issues, cycles, _ = dcs_harness.run_file(_file(tmp_path, good), tmp_path / "out.bin")
    assert len(issues) == 2 and issues[0].shape == (10,) and cycles[1] > cycles[0]
    head, rec = STREAM_HEADER.itemsize, RECORD_HEADER.itemsize
    second = head + rec + 80  # stream 1 starts after stream 0's header and 10 payloads
    cases = {
        "file header: wrong magic": b"X" + good[1:],
        "file header: file ends after 7 of 24 bytes": good[:7],
        "stream 1 valid gaps: file ends after 12 of 40 bytes": good[: second + rec + 80 + 12],
        "stream 1 header: file ends after 0 of 24 bytes": good[:second],
        r"stream 0, command 3: payload has bits set above the 34-bit": (
            good[: head + rec + 3 * 8 + 7] + b"\xff" + good[head + rec + 3 * 8 + 8 :]
        ),
        "stream 1: has_gaps = 7 must be 0 or 1": (
            good[: second + 16] + b"\x07" + good[second + 17 :]
        ),
        "stream 1, ready pattern cycle 1: 9 must be 0 or 1": good[:-1] + b"\x09",
        "bytes after the last of 2 streams": good + b"\0",
        "payload_bits = 35, but this harness was built for 34-bit": (
            good[:12] + b"\x23" + good[13:]
        ),
    }
    for message, data in cases.items():
        with pytest.raises(CosimError, match=f"bad input.*{message}"):
            dcs_harness.run_file(_file(tmp_path, data), tmp_path / "out.bin")
        assert not (tmp_path / "out.bin.tmp").exists()


def test_results_file_errors(tmp_path):
    path = tmp_path / "r.bin"
    path.write_bytes(b"PIMHRSLT")
    with pytest.raises(CosimError, match=r"header: file ends after 8 of 32 bytes"):
        read_results(path)
    path.write_bytes(b"NOTRESLT" + bytes(24))
    with pytest.raises(CosimError, match=r"wrong magic"):
        read_results(path)


def test_stream_that_never_completes_is_named(dcs_harness, tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "max_cycles", lambda n: 5)
    s = random_stream(CFG, 40, seed=4)
    with pytest.raises(CosimError, match=r"sim failed.*stream 1: only \d+ of 40 commands"):
        dcs_harness.run([RtlStream("ok", s[:0]), RtlStream("long", s)])


def test_missing_tools_are_named(tmp_path, monkeypatch):
    which = compiled.shutil.which
    monkeypatch.setattr(
        compiled.shutil, "which", lambda name: None if name in ("make", "c++") else which(name)
    )
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(CosimError, match=r"make \(Verilator --build runs it\); a C\+\+ compiler"):
        build_harness("dcs", CFG, build_root=tmp_path)
    monkeypatch.setattr(compiled, "verilator_env", _no_verilator)
    with pytest.raises(CosimError, match=r"`verilator` Python package"):
        build_harness("static_sched", CFG, build_root=tmp_path)
    with pytest.raises(CosimError, match=r"'dpa' is not a scheduler block"):
        build_harness("dpa", CFG, build_root=tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing half-built is left


def _no_verilator():
    raise ImportError("No module named 'verilator'")


# -- the campaign --------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pimphony.sim.cli", "verify", "campaign", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"},
    )


def test_campaign_command():
    """The bounded CI sample: every scheduler block, compiler streams mixed in (~20 s); the
    cocotb blocks' samples are ``tests/test_campaign_blocks.py``."""
    blocks = list(SCHEDULER_OF_BLOCK)
    args = ("--block", *blocks, "--streams", "400", "--seed", "5", "--kernels", "0.2", "--json")
    proc = _cli(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert [r["block"] for r in out["blocks"]] == list(SCHEDULER_OF_BLOCK)
    assert out["mismatches_total"] == 0
    for r in out["blocks"]:
        assert r["streams"] == 400 and r["mismatches"] == 0 and r["streams_per_s"] > 0
        assert r["exact"] + r["rules_only"] == 400 and r["rules_only"] > 0
        assert 50 <= r["kernels"] <= 110  # 20% of 400


TIMES = ("sim_seconds", "seconds", "build_seconds", "cycles_per_s", "streams_per_s")
"""The fields of a campaign's result that are times, not results."""


def test_campaign_workers_give_the_serial_results():
    """``--workers 2`` (a local Ray) runs each block's streams as tasks: the same results
    (every field but the times), in block order."""
    args = ("--block", "pingpong", "dcs", "--streams", "60", "--seed", "3", "--json")
    runs = []
    for extra in ((), ("--workers", "2")):
        proc = _cli(*args, *extra)
        assert proc.returncode == 0, proc.stderr[-2000:]
        blocks = json.loads(proc.stdout)["blocks"]
        runs.append([{k: v for k, v in r.items() if k not in TIMES} for r in blocks])
    assert runs[0] == runs[1] and [r["block"] for r in runs[0]] == ["pingpong", "dcs"]
    assert all(r["streams"] == 60 and r["cycles"] > 0 for r in runs[1])


def test_campaign_parts_split_the_streams_evenly():
    assert campaign_parts(10, 1) == [range(10)]
    parts = campaign_parts(1001, 2)
    assert len(parts) == 2 * PARTS_PER_WORKER and parts[0].start == 0 and parts[-1].stop == 1001
    assert all(a.stop == b.start for a, b in zip(parts, parts[1:], strict=False))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert campaign_parts(3, 4) == [range(0, 1), range(1, 2), range(2, 3)]


BAD_STREAMS = (13, 27)
"""The injected bug of the parts tests: these streams mismatch."""


@pytest.fixture()
def bad_streams(monkeypatch):
    real = campaign._check

    def broken(cfg, sched, cs, rtl):
        if cs.index in BAD_STREAMS:
            return f"stream {cs.describe()}: injected mismatch"
        return real(cfg, sched, cs, rtl)

    monkeypatch.setattr(campaign, "_check", broken)


def _same_result(a, b) -> None:
    """Campaign results ``a`` and ``b`` are equal but for their times."""
    skip = {*TIMES, "failure"}
    assert {k: v for k, v in a.to_dict().items() if k not in skip} == {
        k: v for k, v in b.to_dict().items() if k not in skip
    }
    assert a.mismatches == b.mismatches and a.failure.index == b.failure.index
    assert np.array_equal(a.failure.stream.commands, b.failure.stream.commands)


@pytest.mark.parametrize("keep_going", [False, True])
def test_campaign_parts_merge_to_the_serial_result(bad_streams, keep_going):
    """The parts of a campaign, run apart and absorbed in order up to the first mismatch
    (every part with ``keep_going``), count what one run counts: the same streams, cycles,
    mismatches and first failing stream."""
    opts = CampaignOptions(max_length=60, chunk=8, keep_going=keep_going)
    whole = run_campaign("static_sched", CFG, 40, 2, opts)
    assert whole.streams == (40 if keep_going else BAD_STREAMS[0] + 1)
    merged = None
    for part in campaign_parts(40, 2):  # 4 parts of 10: the first mismatch is in the second
        r = run_campaign("static_sched", CFG, part, 2, opts)
        assert r.streams <= len(part)
        if merged is None:
            merged = r
        elif not merged.stopped(keep_going):
            merged.absorb(r)
    _same_result(merged, whole)


def test_campaign_workers_stop_at_the_serial_first_mismatch(bad_streams, tmp_path, capsys,
                                                            monkeypatch):  # fmt: skip
    """``--workers 2`` with Ray's tasks run here instead (the injected bug does not reach
    Ray's workers): the output and the reproducer of a serial run, but for the times."""
    opts = ["--block", "static_sched", "dcs", "--streams", "40", "--seed", "2"]
    opts += ["--max-length", "60", "--quiet"]
    status, serial, err = _main(capsys, *opts, "--repro-dir", str(tmp_path / "serial"))
    assert status == 1 and "injected mismatch" in err
    monkeypatch.setattr(parallel, "uses_ray", lambda *a: False)
    status, parts, err_parts = _main(
        capsys, *opts, "--repro-dir", str(tmp_path / "parts"), "--workers", "2"
    )
    assert status == 1 and err_parts.replace("parts", "serial") == err

    def results(out: str, where: str) -> list[str]:  # the times: on the ``mismatches:`` line
        out = out.replace(str(tmp_path / where), "REPRO_DIR")
        return [x.split(";")[0] if x.startswith("mismatches:") else x for x in out.splitlines()]

    assert results(parts, "parts") == results(serial, "serial")
    assert f"static_sched at aim-16ch, seed 2: {BAD_STREAMS[0] + 1} streams" in serial
    assert "dcs at" not in serial  # stopped at the first block's mismatch
    (a,) = (tmp_path / "serial").glob("*.json")
    (b,) = (tmp_path / "parts").glob("*.json")
    assert a.name == b.name and a.name.endswith(f"stream{BAD_STREAMS[0]}.json")
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    assert {k: v for k, v in ra.items() if k != "replay"} == {
        k: v for k, v in rb.items() if k != "replay"
    }


def test_campaign_streams_are_reproducible():
    """Stream ``i`` is drawn from ``(seed, i)`` alone; ``--kernels`` picks compiler streams
    without shifting the random ones."""
    for sched in ("dcs", "pingpong"):
        kinds = []
        for i in range(30):
            a = campaign_stream(CFG, sched, 9, i, CampaignOptions(max_length=80, kernels=0.5))
            b = campaign_stream(CFG, sched, 9, i, CampaignOptions(max_length=80, kernels=0.5))
            assert np.array_equal(a.stream.commands, b.stream.commands) and a.source == b.source
            assert a.stream.valid_gaps == b.stream.valid_gaps
            plain = campaign_stream(CFG, sched, 9, i, CampaignOptions(max_length=80, kernels=0.0))
            if a.source == "random":
                assert np.array_equal(a.stream.commands, plain.stream.commands)
            else:
                kind = a.source.split()[0]
                assert kind in ("qk", "sv", "gemv") and a.stream.commands.shape[0] > 0
                run_channel(a.stream.commands, CFG, sched)  # the TLM accepts it
            kinds.append(a.source.split()[0])
        assert {"random", "qk", "sv", "gemv"} <= set(kinds)


MAC_OP, RD_OUT_OP = int(Op.MAC), int(Op.RD_OUT)
MACS, RD_OUTS = 4, 2
"""The injected bug: a stream with at least 4 MACs and 2 RD_OUTs "mismatches"."""


@pytest.fixture()
def injected_bug(monkeypatch):
    real = campaign._check

    def broken(cfg, sched, cs, rtl):
        op = cs.stream.commands["op"]
        if (op == MAC_OP).sum() >= MACS and (op == RD_OUT_OP).sum() >= RD_OUTS:
            return f"stream {cs.describe()}: injected mismatch"
        return real(cfg, sched, cs, rtl)

    monkeypatch.setattr(campaign, "_check", broken)


def _main(capsys, *args: str) -> tuple[int, str, str]:
    status = cli_main(["verify", "campaign", *args])
    out, err = capsys.readouterr()
    return status, out, err


def _first_hit(sched: str, seed: int, **kw) -> int:
    for i in range(100):
        op = campaign_stream(CFG, sched, seed, i, CampaignOptions(**kw)).stream.commands["op"]
        if (op == MAC_OP).sum() >= MACS and (op == RD_OUT_OP).sum() >= RD_OUTS:
            return i
    raise AssertionError("no stream hits the injected rule")


@pytest.mark.parametrize("block", ["dcs", "pingpong"])
def test_campaign_shrinks_the_first_mismatch(block, injected_bug, tmp_path, capsys):
    """Stops at the first failing stream, shrinks it to the injected rule's minimum (4 MACs
    and 2 RD_OUTs, nothing else), writes it, refuses to overwrite, and replays it."""
    opts = ["--block", block, "--streams", "40", "--seed", "3", "--max-length", "120"]
    opts += ["--kernels", "0.2", "--repro-dir", str(tmp_path), "--quiet"]
    status, out, err = _main(capsys, *opts)
    assert status == 1 and "injected mismatch" in err, err
    index = _first_hit(block, 3, max_length=120, kernels=0.2)
    assert f"{block} at aim-16ch, seed 3: {index + 1} streams" in out  # stopped there
    assert f"shrunk stream #{index} from " in out and " to 6 commands" in out
    js = tmp_path / f"{block}-aim-16ch-seed3-stream{index}.json"
    record = json.loads(js.read_text())
    assert record["block"] == block and record["seed"] == 3 and record["index"] == index
    assert record["commands"] == MACS + RD_OUTS and "injected mismatch" in record["mismatch"]
    assert record["original_commands"] > 3 * (MACS + RD_OUTS)  # it did shrink
    assert record["valid_gaps"] is None and record["ready_pattern"] is None  # not needed
    assert record["replay"] == f"pimphony verify campaign --replay {js}"
    commands, head = load_stream(tmp_path / record["stream"], CFG)
    assert sorted(commands["op"].tolist()) == [MAC_OP] * MACS + [RD_OUT_OP] * RD_OUTS
    assert head["preset"] == "aim-16ch"
    run_channel(commands, CFG, SCHEDULER_OF_BLOCK[block])  # legal for the scheduler
    # Never overwritten without --force: the mismatch is still reported (exit 1).
    before = js.read_bytes()
    status, _, err = _main(capsys, *opts)
    assert status == 1 and "reproducer not written" in err and "pass --force" in err
    assert js.read_bytes() == before
    assert _main(capsys, *opts, "--force")[0] == 1
    # Replay: still fails with the bug, passes without it.
    status, out, err = _main(capsys, "--replay", str(js))
    assert status == 1 and "mismatch reproduces" in out and "still fails" in err


def test_replay_without_the_bug_passes(injected_bug, tmp_path, capsys, monkeypatch):
    opts = ["--block", "static_sched", "--streams", "10", "--seed", "1", "--max-length", "60"]
    status, _, _ = _main(capsys, *opts, "--repro-dir", str(tmp_path), "--quiet")
    assert status == 1
    (js,) = tmp_path.glob("*.json")
    monkeypatch.undo()
    status, out, _ = _main(capsys, "--replay", str(js))
    assert status == 0 and "no mismatch" in out and "6 commands (exact)" in out


def test_keep_going_counts_every_mismatch(injected_bug, tmp_path, capsys):
    opts = ["--block", "static_sched", "--streams", "30", "--seed", "1", "--max-length", "60"]
    opts += ["--kernels", "0.1", "--keep-going", "--repro-dir", str(tmp_path)]
    status, out, err = _main(capsys, *opts)
    assert status == 1 and "30 streams" in out
    opts = CampaignOptions(max_length=60)
    ops = [campaign_stream(CFG, "static", 1, i, opts).stream.commands["op"] for i in range(30)]
    hits = sum((op == MAC_OP).sum() >= MACS and (op == RD_OUT_OP).sum() >= RD_OUTS for op in ops)
    assert hits > 1 and f"mismatches: {hits};" in out and f"{hits} stream(s) differ" in err
    assert list(tmp_path.iterdir()) == []  # no reproducer when keeping going


def test_campaign_refusals(tmp_path, capsys):
    status, _, err = _main(capsys, "--replay", str(tmp_path / "x.json"), "--block", "dcs")
    assert status == 2 and "--replay takes the block and preset" in err and "--block" in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"block": "nope", "preset": "aim-16ch", "index": 0}))
    status, _, err = _main(capsys, "--replay", str(bad))
    assert status == 2 and "block = 'nope' is not an RTL block; allowed: static_sched," in err
    bad.write_text(json.dumps({"block": "dcs", "index": 0}))
    status, _, err = _main(capsys, "--replay", str(bad))
    assert status == 2 and "field 'preset' is missing" in err
    bad.write_text("[1, 2")
    status, _, err = _main(capsys, "--replay", str(bad))
    assert status == 2 and "not a campaign reproducer" in err
    for block in ("dcs", "dpa"):  # the fuzzer's: a preset or stream the record names is bad
        bad.write_text(json.dumps({"block": block, "preset": "", "index": 0}))
        status, _, err = _main(capsys, "--replay", str(bad))
        assert status == 2 and f"{bad}: field 'preset': unknown preset ''" in err, err
    bad.write_text(json.dumps({"block": "dcs", "preset": "aim-16ch", "index": 0, "stream": "x"}))
    status, _, err = _main(capsys, "--replay", str(bad))
    assert status == 2 and f"{bad}: field 'stream': " in err and "x" in err, err
    status, _, err = _main(capsys, "--repro-dir", str(bad), "--streams", "1")
    assert status == 2 and f"--repro-dir {bad} is a file" in err
    with pytest.raises(SystemExit) as exc:
        _main(capsys, "--kernels", "1.5")
    assert exc.value.code == 2 and "--kernels: 1.5 is outside 0 to 1" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["aim-16ch", "aim-ramulator"])
@pytest.mark.parametrize("block", BLOCKS)
def test_random_campaign(block, preset):
    result = run_campaign(
        block, load_preset(preset), 400, 2024, CampaignOptions(kernels=0.1, keep_going=True)
    )
    assert result.mismatches == [], "\n".join(result.mismatches)
    assert result.exact > 300


@pytest.mark.slow
def test_dcs_wraparound_compiled():
    cfg = CFG.replace(**{"dcs.queue_depth": 4, "dcs.id_bits": 4, "dcs.timestamp_bits": 10})
    s = random_stream(cfg, 2500, seed=21)
    got = build_harness("dcs", cfg).run([RtlStream("wrap", s)]).issue["wrap"]
    assert np.array_equal(got, run_channel(s, cfg, "dcs").issue)
