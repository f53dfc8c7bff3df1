"""The command set: opcodes, field widths, stream validation and the on-disk file format."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from pimphony.models.config import load_preset
from pimphony.models.isa import (
    COMMAND_DTYPE,
    FORMAT_MAGIC,
    FORMAT_VERSION,
    IO_OPS,
    CommandFormatError,
    Op,
    StreamError,
    empty_stream,
    field_widths,
    load_stream,
    make_stream,
    save_stream,
    validate_stream,
)

W, M, R = Op.WR_INP, Op.MAC, Op.RD_OUT


@pytest.fixture()
def stream():
    return make_stream(
        [(W, 0, 0), (W, 33, 1), (M, 0, 0, 0, 0), (M, 33, 16383, 63, 63), (R, 0, 2), (R, 63, 3)]
    )


# --------------------------------------------------------------------------- opcodes, widths


def test_op_values():
    assert (Op.WR_INP, Op.MAC, Op.RD_OUT) == (0, 1, 2)
    assert len(Op) == 3
    assert set(IO_OPS) == {Op.WR_INP, Op.RD_OUT}


def test_field_widths_aim16(cfg):
    widths = field_widths(cfg.channel)
    assert widths == {"op": 2, "gbuf": 6, "out": 6, "col": 6, "row": 14}


def test_field_widths_gpr(cfg):
    # 512 KB of 32-byte tiles = 16384 tiles = 14 bits.
    assert field_widths(cfg.channel, cfg.module.gpr_bytes)["gpr"] == 14


def test_field_widths_follow_geometry(cfg):
    geom = cfg.replace(
        **{"channel.gbuf_entries": 128, "channel.obuf_entries": 32, "channel.rows_per_bank": 1000}
    ).channel
    widths = field_widths(geom)
    assert widths["gbuf"] == 7
    assert widths["out"] == 5
    assert widths["row"] == 10  # 1000 rows need 10 bits


# --------------------------------------------------------------------------- make_stream


def test_make_stream_records():
    s = make_stream([(W, 5, 17), (M, 3, 100, 7, 9), (R, 9, 42), (W, 6), (R, 8)])
    assert s.dtype == COMMAND_DTYPE
    assert s.shape == (5,)
    assert s["op"].tolist() == [0, 1, 2, 0, 2]
    assert s["gbuf"].tolist() == [5, 3, 0, 6, 0]
    assert s["row"].tolist() == [0, 100, 0, 0, 0]
    assert s["col"].tolist() == [0, 7, 0, 0, 0]
    assert s["out"].tolist() == [0, 9, 9, 0, 8]
    assert s["gpr"].tolist() == [17, 0, 42, 0, 0]


def test_make_stream_accepts_plain_ints():
    assert np.array_equal(make_stream([(1, 2, 3, 4, 5)]), make_stream([(M, 2, 3, 4, 5)]))


@pytest.mark.parametrize("cmd", [(M, 1, 2, 3), (M, 1, 2, 3, 4, 5), (W, 1, 2, 3), (R, 1, 2, 3)])
def test_make_stream_wrong_arity(cmd):
    with pytest.raises(StreamError, match="command 1"):
        make_stream([(W, 0), cmd])


def test_empty_stream():
    s = empty_stream(4)
    assert s.dtype == COMMAND_DTYPE
    assert s.shape == (4,)
    assert not any(s[f].any() for f in COMMAND_DTYPE.names)


# --------------------------------------------------------------------------- validate_stream


def test_valid_stream_passes(cfg, stream):
    validate_stream(stream, cfg.channel)
    validate_stream(empty_stream(0), cfg.channel)


def _stream_error(stream, cfg) -> str:
    with pytest.raises(StreamError) as info:
        validate_stream(stream, cfg.channel)
    return str(info.value)


def test_bad_opcode(cfg, stream):
    stream["op"][4] = 3
    msg = _stream_error(stream, cfg)
    assert "command 4" in msg
    assert "op = 3" in msg


@pytest.mark.parametrize(
    ("index", "field", "value", "limit"),
    [
        (2, "gbuf", 64, 64),  # MAC reads a GBuf entry
        (0, "gbuf", 100, 64),  # WR_INP writes one
        (3, "out", 64, 64),  # MAC accumulates into an OBuf entry
        (5, "out", 1000, 64),  # RD_OUT drains one
        (3, "row", 16384, 16384),
        (2, "col", 64, 64),
    ],
)
def test_field_out_of_range(cfg, stream, index, field, value, limit):
    stream[field][index] = value
    msg = _stream_error(stream, cfg)
    assert f"command {index}" in msg
    assert f"{field} = {value}" in msg
    assert f"< {limit}" in msg


def test_limits_follow_geometry(cfg, stream):
    small = cfg.replace(**{"channel.rows_per_bank": 16384 - 1})
    with pytest.raises(StreamError, match="command 3 .*row = 16383"):
        validate_stream(stream, small.channel)


@pytest.mark.parametrize(
    ("index", "field", "op_name"),
    [
        (0, "row", "WR_INP"),
        (1, "col", "WR_INP"),
        (0, "out", "WR_INP"),
        (4, "gbuf", "RD_OUT"),
        (5, "row", "RD_OUT"),
        (4, "col", "RD_OUT"),
    ],
)
def test_unused_field_must_be_zero(cfg, stream, index, field, op_name):
    stream[field][index] = 5
    msg = _stream_error(stream, cfg)
    assert f"command {index}" in msg
    assert f"{field} = 5" in msg
    assert op_name in msg
    assert "must be 0" in msg


def test_mac_gpr_must_be_zero(cfg, stream):
    stream["gpr"][2] = 7
    msg = _stream_error(stream, cfg)
    assert "command 2" in msg
    assert "gpr = 7" in msg


def test_first_bad_command_is_named(cfg, stream):
    stream["col"][3] = 99
    stream["col"][2] = 98
    msg = _stream_error(stream, cfg)
    assert "command 2" in msg
    assert "col = 98" in msg


@pytest.mark.parametrize(
    "bad",
    [
        [(0, 0, 0, 0, 0, 0)],
        np.zeros(3, dtype=np.int64),
        np.zeros(3, dtype=[("op", "u1"), ("gbuf", "u2")]),
        np.zeros((2, 3), dtype=COMMAND_DTYPE),
    ],
    ids=["list", "int-array", "other-struct", "2-d"],
)
def test_not_a_stream(cfg, bad):
    with pytest.raises(StreamError, match="1-D numpy array"):
        validate_stream(bad, cfg.channel)


# --------------------------------------------------------------------------- file format


def test_round_trip(tmp_path, cfg, stream):
    path = tmp_path / "k.npz"
    meta = {"kernel": "qk", "shape": {"tokens": 4, "d_h": 16}}
    assert save_stream(path, stream, cfg, meta=meta) == path
    commands, head = load_stream(path, cfg)
    assert commands.dtype == COMMAND_DTYPE
    assert np.array_equal(commands, stream)
    assert head["magic"] == FORMAT_MAGIC == "pimphony-command-stream"
    assert head["format_version"] == FORMAT_VERSION == 1
    assert head["preset"] == "aim-16ch"
    assert head["meta"] == meta
    assert head["geometry"]["gbuf_entries"] == 64
    assert head["geometry"]["rows_per_bank"] == 16384


def test_round_trip_without_cfg(tmp_path, stream):
    path = tmp_path / "sub" / "dir" / "k.npz"
    save_stream(path, stream)
    commands, head = load_stream(path)
    assert np.array_equal(commands, stream)
    assert head["magic"] == FORMAT_MAGIC
    assert "preset" not in head


def test_refuses_to_overwrite(tmp_path, stream):
    path = tmp_path / "k.npz"
    save_stream(path, stream)
    before = path.read_bytes()
    with pytest.raises(FileExistsError, match="overwrite"):
        save_stream(path, stream[:2])
    assert path.read_bytes() == before
    save_stream(path, stream[:2], overwrite=True)
    commands, _ = load_stream(path)
    assert np.array_equal(commands, stream[:2])


def test_write_leaves_no_temp_files(tmp_path, stream):
    save_stream(tmp_path / "a.npz", stream)
    save_stream(tmp_path / "a.npz", stream[:3], overwrite=True)
    save_stream(tmp_path / "b.npz", stream)
    assert sorted(os.listdir(tmp_path)) == ["a.npz", "b.npz"]


def test_invalid_stream_not_written(tmp_path, cfg, stream):
    stream["row"][3] = 20000
    with pytest.raises(StreamError, match="command 3"):
        save_stream(tmp_path / "k.npz", stream, cfg)
    assert os.listdir(tmp_path) == []


def test_saved_file_respects_umask(tmp_path, stream):
    mask = os.umask(0o022)
    try:
        path = save_stream(tmp_path / "k.npz", stream)
    finally:
        os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o644


def _npz(path: Path, **members) -> Path:
    buf = io.BytesIO()
    np.savez(buf, **members)
    path.write_bytes(buf.getvalue())
    return path


def _header(**changes) -> np.ndarray:
    head = {"magic": FORMAT_MAGIC, "format_version": FORMAT_VERSION, **changes}
    return np.frombuffer(json.dumps(head).encode(), dtype=np.uint8)


def _format_error(path: Path, cfg=None) -> str:
    with pytest.raises(CommandFormatError) as info:
        load_stream(path, cfg)
    msg = str(info.value)
    assert str(path) in msg
    return msg


def test_hand_built_file_loads(tmp_path, stream):
    # The layout the error cases below break: a valid file built by hand.
    path = _npz(tmp_path / "ok.npz", header=_header(), commands=stream)
    commands, head = load_stream(path)
    assert np.array_equal(commands, stream)
    assert head == {"magic": FORMAT_MAGIC, "format_version": 1}


def test_load_missing_file(tmp_path):
    assert "no such file" in _format_error(tmp_path / "missing.npz")


def test_load_random_bytes(tmp_path):
    path = tmp_path / "junk.npz"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    assert "not a pimphony command-stream file" in _format_error(path)


def test_load_plain_npy(tmp_path, stream):
    path = tmp_path / "plain.npy"
    np.save(path, stream)
    assert "plain .npy" in _format_error(path)


def test_load_plain_zip(tmp_path):
    path = tmp_path / "x.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "hello")
    msg = _format_error(path)
    assert "missing member" in msg


def test_load_missing_commands(tmp_path):
    msg = _format_error(_npz(tmp_path / "x.npz", header=_header()))
    assert "missing member" in msg
    assert "commands" in msg


def test_load_missing_header(tmp_path, stream):
    msg = _format_error(_npz(tmp_path / "x.npz", commands=stream))
    assert "header" in msg


def test_load_header_not_json(tmp_path, stream):
    bad = np.frombuffer(b"{not json", dtype=np.uint8)
    msg = _format_error(_npz(tmp_path / "x.npz", header=bad, commands=stream))
    assert "not JSON" in msg


def test_load_wrong_magic(tmp_path, stream):
    path = _npz(tmp_path / "x.npz", header=_header(magic="something-else"), commands=stream)
    assert "wrong magic" in _format_error(path)


def test_load_header_not_object(tmp_path, stream):
    head = np.frombuffer(json.dumps([FORMAT_MAGIC, 1]).encode(), dtype=np.uint8)
    path = _npz(tmp_path / "x.npz", header=head, commands=stream)
    assert "wrong magic" in _format_error(path)


@pytest.mark.parametrize("version", [2, 0, None, "1"])
def test_load_other_format_version(tmp_path, stream, version):
    path = _npz(tmp_path / "x.npz", header=_header(format_version=version), commands=stream)
    msg = _format_error(path)
    assert f"format_version {version!r}" in msg
    assert "not supported" in msg


@pytest.mark.parametrize(
    "commands",
    [
        np.zeros(4, dtype=np.int64),
        np.zeros(4, dtype=[("op", "u1"), ("gbuf", "u2"), ("row", "u4")]),
        np.zeros(4, dtype=COMMAND_DTYPE.newbyteorder(">")),
    ],
    ids=["int64", "other-struct", "big-endian"],
)
def test_load_other_dtype(tmp_path, commands):
    path = _npz(tmp_path / "x.npz", header=_header(), commands=commands)
    msg = _format_error(path)
    assert "dtype" in msg


def test_load_object_commands(tmp_path):
    path = _npz(tmp_path / "x.npz", header=_header(), commands=np.array([{"a": 1}], dtype=object))
    _format_error(path)


def test_load_out_of_range_with_cfg(tmp_path, cfg, stream):
    stream["gbuf"][2] = 64
    path = _npz(tmp_path / "x.npz", header=_header(), commands=stream)
    commands, _ = load_stream(path)  # without a geometry the file is well formed
    assert commands["gbuf"][2] == 64
    msg = _format_error(path, cfg)
    assert "command 2" in msg
    assert "gbuf = 64" in msg


def test_load_empty_file_and_directory(tmp_path):
    empty = tmp_path / "empty.npz"
    empty.write_bytes(b"")
    assert "empty file" in _format_error(empty)
    assert "is a directory" in _format_error(tmp_path)


def test_load_random_bytes_names_no_pickle(tmp_path):
    path = tmp_path / "prog.bin"
    path.write_bytes(bytes(range(256)) * 8)
    msg = _format_error(path)
    assert "pickle" not in msg and "neither .npz nor .npy" in msg


def test_every_flipped_bit_is_a_clear_error_or_a_valid_stream(tmp_path, stream):
    cfg = load_preset("aim-16ch")
    good = tmp_path / "good.npz"
    save_stream(good, stream, cfg)
    data = good.read_bytes()
    rng = np.random.default_rng(7)
    for k in rng.choice(len(data), size=60, replace=False):
        bad = bytearray(data)
        bad[k] ^= 1 << int(rng.integers(8))
        path = tmp_path / "bad.npz"
        path.write_bytes(bytes(bad))
        try:  # a flip in padding or in a zip field numpy does not check still loads
            commands, _ = load_stream(path, cfg)
        except CommandFormatError as exc:
            assert str(path) in str(exc)
        else:
            assert commands.dtype == stream.dtype
