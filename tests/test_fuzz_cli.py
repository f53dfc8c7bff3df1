"""Bad input thrown at the command line (hypothesis): never a traceback, never a wrong number.

Each case runs ``pimphony`` in-process on generated presets, stream files, context files,
model files and option vectors and asserts: exit status 0 or 2 (2 with one ``error:`` line),
no internal error, and files the user made unchanged. ``make test`` runs a bounded number of
examples; the ``slow`` variants run many more (``make test-all``).
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pimphony.compiler.kernels import compile_kernel
from pimphony.models.config import CONFIG_DIR, load_preset
from pimphony.models.isa import save_stream

from tests.helpers import run_cli

QUICK = settings(
    max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None
)
LONG = settings(
    max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None
)

PRESET = tomllib.loads((CONFIG_DIR / "aim-16ch.toml").read_text())
FIELDS = [(s, k) for s, table in PRESET.items() if isinstance(table, dict) for k in table]

values = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([0, 1, 2, 3, 63, 64, 65, 1024, 2**31, 2**62, 2**63 - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=5),
)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(v, "nan" if v != v else repr(v))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(v)


def _check(rc: int, out: str, err: str) -> None:
    assert rc in (0, 2), f"exit {rc}: {err[-500:]}"
    assert "Traceback" not in err and "internal error" not in err, err[-800:]
    if rc == 2:
        assert re.search(r"^pimphony[\w -]*: error: ", err, re.M), err[-300:]


def _preset_case(tmp_path: Path, capsys, changes: dict) -> None:
    text = (CONFIG_DIR / "aim-16ch.toml").read_text()
    for (section, key), value in changes.items():
        text = re.sub(
            rf"(\[{section}\][^\[]*?^{key}\s*=)[^\n#]*",
            lambda m, v=value: m.group(1) + " " + _toml_value(v) + " ",
            text,
            count=1,
            flags=re.M | re.S,
        )
    preset = tmp_path / "p.toml"
    preset.write_text(text)
    before = preset.read_bytes()
    rc, out, err = run_cli(
        capsys, "run", "--kernel", "qk", "--tokens", "256", "--dh", "64", "--json",
        "--preset", preset,
    )  # fmt: skip
    _check(rc, out, err)
    assert preset.read_bytes() == before
    if rc == 0:  # a preset accepted is a physical one: the numbers are sane
        cfg = load_preset(preset)
        assert '"cycles"' in out
        assert cfg.timing.tRP <= 10_000


presets = st.dictionaries(st.sampled_from(FIELDS), values, min_size=1, max_size=3)


def _stream_bytes() -> bytes:
    path = Path(__file__).parent / ".fuzz-stream.npz"
    cfg = load_preset("aim-16ch")
    save_stream(path, compile_kernel(cfg, "gemv", d_out=64, d_in=64).commands, cfg)
    data = path.read_bytes()
    path.unlink()
    return data


STREAM = _stream_bytes()
damage = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, len(STREAM) - 1), st.just(0)),
    st.tuples(st.just("flip"), st.integers(0, len(STREAM) - 1), st.integers(0, 7)),
    st.tuples(st.just("random"), st.integers(0, 4096), st.integers(0, 2**31)),
)


def _stream_case(tmp_path: Path, capsys, how: tuple) -> None:
    kind, a, b = how
    if kind == "truncate":
        data = STREAM[:a]
    elif kind == "flip":
        data = bytearray(STREAM)
        data[a] ^= 1 << b
        data = bytes(data)
    else:
        import random

        data = random.Random(b).randbytes(a)
    path = tmp_path / "s.npz"
    path.write_bytes(data)
    rc, out, err = run_cli(capsys, "run", "--stream", path, "--json")
    _check(rc, out, err)
    assert path.read_bytes() == data


def _zip_field_flips() -> list[tuple[str, int, int]]:
    """Single-bit flips of every zip header's flags (bit 0: "encrypted") and compression
    method, in the local and central headers of the stream file."""
    out = []
    for i in range(len(STREAM) - 3):
        sig = STREAM[i : i + 4]
        if sig in (b"PK\x03\x04", b"PK\x01\x02"):
            flags = i + (6 if sig == b"PK\x03\x04" else 8)
            out += [("flip", flags, 0)] + [("flip", flags + 2, bit) for bit in range(4)]
    return out


@pytest.mark.parametrize("how", _zip_field_flips(), ids=str)
def test_damaged_zip_headers(tmp_path, capsys, how):
    """A flipped zip header field (an "encrypted" member, an unknown compression method, a
    member that is no longer stored) is a damaged file, exit 2, not an internal error
    (hypothesis found ``('flip', 990, 0)``: RuntimeError "File 'header.npy' is encrypted")."""
    _stream_case(tmp_path, capsys, how)


lines = st.lists(
    st.one_of(
        st.integers(-5, 40000).map(str),
        st.sampled_from(["", "# note", "1e3", "abc", "12 34", "0", "-1", "99999999999"]),
        st.text(max_size=6),
    ),
    max_size=6,
)


def _contexts_case(tmp_path: Path, capsys, text_lines: list[str]) -> None:
    path = tmp_path / "lens.txt"
    path.write_text("\n".join(text_lines))
    rc, out, err = run_cli(
        capsys, "decode", "--model", "llm-1.8b", "--contexts", path, "--json",
        "--report", tmp_path / "r.json", "--plot", tmp_path / "r.png",
    )  # fmt: skip
    _check(rc, out, err)


MODEL_TEXT = (CONFIG_DIR / "models" / "llm-1.8b.toml").read_text()
MODEL_FIELDS = sorted(tomllib.loads(MODEL_TEXT))
models = st.dictionaries(
    st.sampled_from(MODEL_FIELDS),
    st.one_of(values, st.sampled_from(["swiglu", "gelu", "relu", "", "llm-7b"])),
    min_size=1,
    max_size=3,
)


def _model_case(tmp_path: Path, capsys, changes: dict) -> None:
    text = MODEL_TEXT
    for key, value in changes.items():
        text = re.sub(
            rf"^{key}\s*=[^\n#]*", f"{key} = {_toml_value(value)} ", text, count=1, flags=re.M
        )
    model = tmp_path / "m.toml"
    model.write_text(text)
    before = model.read_bytes()
    rc, out, err = run_cli(
        capsys, "decode", "--model", model, "--context", "1024", "--json",
        "--report", tmp_path / "r.json", "--plot", tmp_path / "r.png", "--force",
    )  # fmt: skip
    _check(rc, out, err)
    assert model.read_bytes() == before
    if rc == 0:  # an accepted model gives a finite, positive throughput
        report = json.loads(out)
        assert 0 < report["tokens_per_s"] < float("inf")
        assert report["provenance"]["model"]["layers"] == tomllib.loads(text)["layers"]


OPTIONS = {
    "run": ["--kernel", "--tokens", "--dh", "--dout", "--din", "--gqa-group", "--sched"],
    "compile": ["--kernel", "--tokens", "--dh", "--format", "--max-tokens", "--gqa-group"],
    "decode": ["--context", "--batch", "--tp", "--pp", "--partition", "--sched", "--memory"],
    "sweep": ["--kernel", "--dims", "--tokens"],
    # decode --system xpu+pim (argv[0] is replaced by the command and the system)
    "xpu+pim": ["--context", "--batch", "--tp", "--sub-batches", "--partition", "--memory"],
}
option_values = st.one_of(
    st.integers(-3, 300).map(str),
    st.sampled_from(["0", "-1", "1e9", "x", "", "qk", "sv", "gemv", "dcs", "tcp", "dpa", "auto"]),
)
argvs = st.sampled_from(sorted(OPTIONS)).flatmap(
    lambda cmd: st.lists(st.tuples(st.sampled_from(OPTIONS[cmd]), option_values), max_size=4).map(
        lambda opts: [cmd, *[x for pair in opts for x in pair]]
    )
)


def _argv_case(tmp_path: Path, capsys, argv: list[str]) -> None:
    if argv[0] == "compile":
        argv = [*argv, "-o", str(tmp_path / "out.bin")]
    if argv[0] == "xpu+pim":
        argv = ["decode", "--system", "xpu+pim", "--preset", "pimphony-neupims", *argv[1:]]
    if argv[0] == "decode":
        argv = [*argv, "--model", "llm-1.8b", "--report", str(tmp_path / "r.json")]
        argv += ["--plot", str(tmp_path / "r.png"), "--force"]
    rc, out, err = run_cli(capsys, *argv)
    _check(rc, out, err)


def _quick_and_long(name: str, strategy, case):
    """A bounded test for ``make test`` and a long ``slow`` one, both running ``case``."""

    def make(budget):
        @budget
        @given(value=strategy)
        def test(tmp_path_factory, capsys, value):
            case(tmp_path_factory.mktemp(name), capsys, value)

        return test

    return make(QUICK), pytest.mark.slow(make(LONG))


test_generated_presets, test_generated_presets_long = _quick_and_long(
    "preset", presets, _preset_case
)
test_damaged_stream_files, test_damaged_stream_files_long = _quick_and_long(
    "stream", damage, _stream_case
)
test_generated_context_files, test_generated_context_files_long = _quick_and_long(
    "ctx", lines, _contexts_case
)
test_generated_option_vectors, test_generated_option_vectors_long = _quick_and_long(
    "argv", argvs, _argv_case
)
test_generated_models, test_generated_models_long = _quick_and_long("model", models, _model_case)
