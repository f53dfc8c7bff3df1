"""The one output rule: no output destroys an input or another output; only regular files are
replaced (``sim/outputs.py``, ``models/fileio.py``)."""

from __future__ import annotations

import argparse
import errno
import hashlib
import os
import resource
import socket
from pathlib import Path

import pytest
from pimphony.models.fileio import (
    OutputError,
    check_outputs,
    check_writable,
    file_kind,
    write_atomic,
)
from pimphony.sim.cli import COMMANDS, build_parser, main
from pimphony.sim.outputs import OUTPUT_OPTIONS

# ----------------------------------------------------------------------------- the rule


def test_file_kind_names_what_is_there(tmp_path):
    (tmp_path / "f").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "f", tmp_path / "link")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock"))
        kinds = {p: file_kind(tmp_path / p) for p in ("f", "fifo", "link", "dangling", "sock")}
    assert kinds == {
        "f": "regular file", "fifo": "FIFO", "link": "symbolic link",
        "dangling": "symbolic link", "sock": "socket",
    }  # fmt: skip
    assert file_kind(tmp_path) == "directory" and file_kind(tmp_path / "none") is None
    assert file_kind("/dev/null") == "character device"


@pytest.mark.parametrize("kind", ["fifo", "link", "device"])
def test_force_replaces_only_regular_files(tmp_path, kind):
    target = tmp_path / "t"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "link":
        (tmp_path / "real").write_text("keep")
        os.symlink(tmp_path / "real", target)
    else:
        target = Path("/dev/null")
    with pytest.raises(OutputError, match=f"{target} is a .*only a regular file"):
        write_atomic(target, b"report", overwrite=True)
    if kind == "link":
        assert target.is_symlink() and (tmp_path / "real").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_a_regular_file_is_replaced_only_when_asked(tmp_path):
    f = tmp_path / "r.json"
    f.write_text("old")
    with pytest.raises(FileExistsError):
        check_writable(f, overwrite=False)
    write_atomic(f, b"new", overwrite=True)
    assert f.read_text() == "new"


def test_an_output_may_not_be_an_input_by_path_link_or_hard_link(tmp_path):
    src = tmp_path / "trace.jsonl"
    src.write_text("{}")
    os.link(src, tmp_path / "hard.jsonl")
    os.symlink(src, tmp_path / "soft.jsonl")
    for same in (src, tmp_path / "." / "trace.jsonl", tmp_path / "hard.jsonl",
                 tmp_path / "soft.jsonl"):  # fmt: skip
        with pytest.raises(OutputError, match="--out .* is the file --workload reads"):
            check_outputs({"--out": same}, {"--workload": src})
    check_outputs({"--out": tmp_path / "other.json"}, {"--workload": src})  # no refusal


def test_two_outputs_may_not_name_one_file(tmp_path):
    with pytest.raises(OutputError, match="--plot and --timeline both name"):
        check_outputs({"--plot": tmp_path / "a.png", "--timeline": tmp_path / "x/../a.png"})


def test_a_failed_write_names_the_users_path_and_keeps_the_old_file(tmp_path):
    f = tmp_path / "r.json"
    f.write_text("previous")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    pid = os.fork()
    if pid == 0:  # a child with a 4-byte file-size limit: the disk is "full"
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4, hard))
        try:
            write_atomic(f, b"a longer report", overwrite=True)
        except OSError as exc:
            os._exit(0 if exc.errno == errno.EFBIG and str(f) in str(exc) else 3)
        os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert f.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left


# ------------------------------------------------------------------ every command, walked


def _leaves(commands, prefix=()):
    for cmd in commands:
        if cmd.subcommands:
            yield from _leaves(cmd.subcommands, (*prefix, cmd.name))
        else:
            yield (*prefix, cmd.name)


def _options(words: tuple[str, ...]) -> list[argparse.Action]:
    parser = build_parser(list(words))
    for word in words:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser._actions


PATH_OPTIONS = [
    (words, action)
    for words in _leaves(COMMANDS)
    for action in _options(words)
    if action.type is Path or action.dest in OUTPUT_OPTIONS
]

INPUT_OPTIONS = {"contexts", "stream", "table", "vcd", "replay", "workload"}
"""Destinations of options naming a file that a command reads (``workload``: a trace)."""


def test_every_path_option_is_an_output_or_an_input():
    unknown = [
        f"pimphony {' '.join(w)} {a.option_strings or a.dest}"
        for w, a in PATH_OPTIONS
        if a.dest not in OUTPUT_OPTIONS | INPUT_OPTIONS
    ]
    assert not unknown, f"classify these in sim.outputs.OUTPUT_OPTIONS or here: {unknown}"


REQUIRED = {
    ("wave", "summary"): ["x.vcd"],
    ("sweep-run",): ["nope"],
    ("dcc-figs",): ["--figure", "fig7"],
    ("librapim-figs",): ["--figure", "fig7"],
    ("dcc-lut",): ["--backend", "attacc"],
    ("tune",): ["--kernel", "qk", "--shape", "32,512,128"],
}
"""Arguments a command cannot parse without (a refusal comes before they are read)."""

OUTPUTS = [(w, a) for w, a in PATH_OPTIONS if a.dest in OUTPUT_OPTIONS and a.option_strings]


def _input_flag(words: tuple[str, ...]) -> str | None:
    """An option of the command that names a file it reads: one typed ``Path`` (or a table
    name) of :data:`INPUT_OPTIONS`, else ``--model`` (a model may be a .toml path)."""
    actions = _options(words)
    for a in actions:
        if a.dest in INPUT_OPTIONS and a.option_strings and a.type in (Path, None):
            return a.option_strings[-1]
    return "--model" if any(a.dest == "model" for a in actions) else None


AIMED_AT_INPUT = [(w, a, _input_flag(w)) for w, a in OUTPUTS if _input_flag(w)]


@pytest.mark.parametrize(
    "words,action,in_flag",
    AIMED_AT_INPUT,
    ids=[f"{' '.join(w)}:{a.dest}<-{i}" for w, a, i in AIMED_AT_INPUT],
)
def test_every_output_refuses_the_commands_input(words, action, in_flag, tmp_path, capsys):
    src = tmp_path / "input.txt"
    src.write_bytes(b"1024\n2048\n")
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    flag = action.option_strings[-1]
    argv = [*words, *REQUIRED.get(words, []), flag, str(src), in_flag, str(src)]
    if "--force" in {s for a in _options(words) for s in a.option_strings}:
        argv.append("--force")
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and f"is the file {in_flag} reads" in err, err
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest


def test_the_walk_covers_the_commands_that_read_files():
    walked = {" ".join(w) for w, _, _ in AIMED_AT_INPUT}
    assert {"decode", "serve", "tune", "dcc-fig8", "sherpa", "verify campaign"} <= walked
    assert len(AIMED_AT_INPUT) >= 19


@pytest.mark.parametrize(
    "words,action", OUTPUTS, ids=[f"{' '.join(w)}:{a.dest}" for w, a in OUTPUTS]
)
def test_every_output_refuses_a_fifo_before_running(words, action, tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    argv = [*words, *REQUIRED.get(words, []), action.option_strings[-1], str(fifo)]
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and "is a FIFO; only a regular file is ever replaced" in err, err
    assert file_kind(fifo) == "FIFO"


@pytest.mark.parametrize(
    "words,action", OUTPUTS, ids=[f"{' '.join(w)}:{a.dest}" for w, a in OUTPUTS]
)
def test_every_output_refuses_a_folder_it_cannot_write_before_running(
    words, action, tmp_path, capsys
):
    """A file where a folder should be, or a read-only folder, is refused before the
    command runs (``fidelity --write ro/x.md`` ran for minutes, then failed; issue 34)."""
    (tmp_path / "f").write_text("keep")
    flag = action.option_strings[-1]
    rc = main([*words, *REQUIRED.get(words, []), flag, str(tmp_path / "f" / "x" / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and f"{tmp_path / 'f'} is a regular file, not a folder" in err, err
    assert flag in err and (tmp_path / "f").read_text() == "keep"


def test_a_read_only_folder_is_refused_before_running(tmp_path, capsys, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != ro and access(p, mode))
    rc = main(["fidelity", "--write", str(ro / "new" / "f.md")])
    err = capsys.readouterr().err
    assert rc == 2 and f"--write {ro}/new/f.md: the folder {ro} cannot be written" in err, err


def test_a_tables_predictor_is_an_input_too(tmp_path, capsys):
    """``--table t.json`` also reads ``t.model.ubj``: an output aimed at it is refused."""
    table, predictor = tmp_path / "t.json", tmp_path / "t.model.ubj"
    table.write_text("{}")
    predictor.write_bytes(b"model")
    rc = main(["tune", "--kernel", "gemv", "--shape", "64,64", "--table", str(table),
               "--out", str(predictor), "--force"])  # fmt: skip
    assert rc == 2
    assert f"--out {predictor} is the file --table (its predictor) reads" in capsys.readouterr().err
    assert predictor.read_bytes() == b"model"
