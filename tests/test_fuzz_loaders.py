"""Every loader given damaged files (hypothesis): it loads, or refuses in one line naming the
file; never another exception (issue 34).

Each case starts from a shipped file (a preset of every kind, a sweep, a trace, a workload, a
lookup table, a campaign reproducer) and damages it: a field set to a generated value (of
another type, out of range, NaN, huge, text), a field deleted, an unknown field added, a
section made a scalar, the bytes cut short, a byte replaced by one that is not UTF-8, or
random bytes. ``make test`` runs a
bounded number of examples per loader; the ``slow`` variant runs 400.
"""

from __future__ import annotations

import argparse
import json
import math
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pimphony.compiler.dcc.predictor import Entry, LookupTable
from pimphony.compiler.dcc.schedule import DccKernel
from pimphony.compiler.dcc.tune import default_draft
from pimphony.compiler.llm import load_model
from pimphony.models.backends import load_backend, load_backend_config
from pimphony.models.config import CONFIG_DIR, load_config, load_preset
from pimphony.models.energy import load_energy_config
from pimphony.models.errors import PimphonyError
from pimphony.models.isa import save_stream
from pimphony.models.layout import load_layout
from pimphony.models.xpu_config import load_xpu_config
from pimphony.sim.analysis.dcc_table import backend_record, read_table
from pimphony.sim.serving.trace import read_trace
from pimphony.sim.sherpa_timing import load_sherpa_host
from pimphony.sim.sweep_run import load_sweep
from pimphony.sim.verify import campaign, campaign_blocks
from pimphony.sim.workloads import load_workload

from tests.test_fuzz_cli import values

QUICK = settings(
    max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None
)
LONG = settings(
    max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None
)


def _table_file(tmp: Path) -> Path:
    """A lookup table of one AttAcc attention draft (``pimphony dcc-lut``'s format)."""
    cfg = load_backend("attacc")
    sizes = (4, 256, 64)
    table = LookupTable({"backend": backend_record(cfg)})
    table.entries[cfg.name, DccKernel.ATTN, sizes] = Entry(
        default_draft(cfg, DccKernel.ATTN, sizes), None, 1, "offline"
    )
    return table.save(tmp / "table.json")


def _scheduler_reproducer(tmp: Path) -> Path:
    """A reproducer of the ``dcs`` block (``pimphony verify campaign``'s ``.json``) naming
    its stream, a compiled GEMV, by absolute path (so that a copy anywhere finds it)."""
    from pimphony.compiler.kernels import compile_kernel

    cfg = load_preset("aim-16ch")
    stream = save_stream(
        tmp / "stream.npz", compile_kernel(cfg, "gemv", d_out=64, d_in=64).commands, cfg,
        overwrite=True,
    )  # fmt: skip
    record = {"block": "dcs", "preset": "aim-16ch", "index": 0, "stream": str(stream),
              "valid_gaps": None, "ready_pattern": [1, 0, 1]}  # fmt: skip
    path = tmp / "dcs-repro.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def _dpa_reproducer(tmp: Path) -> Path:
    """A reproducer of the ``dpa`` block: one campaign item as ``write_item`` writes it."""
    cfg = load_preset("aim-16ch")
    item = campaign_blocks.dpa_item(cfg, "dpa", 4, 0, campaign_blocks.CampaignOptions())
    shrunk = campaign_blocks.ShrunkItem(item, "x", {"commands": item.commands}, 0, 0)
    return campaign_blocks.write_item(
        tmp, shrunk, block="dpa", cfg=cfg, preset="aim-16ch", seed=4, overwrite=True
    )


class _LoadedError(Exception):
    """The reproducer was read and checked; the RTL simulation it would start is skipped."""


def _stop(*args, **kwargs):
    raise _LoadedError


def load_reproducer(path: Path) -> Any:
    """What ``pimphony verify campaign --replay PATH`` does up to the RTL simulation: read the
    record, check its block and fields, load its preset and stream and expand it on the TLM."""
    with (
        mock.patch.object(campaign, "build_harness", _stop),
        mock.patch.object(campaign_blocks, "_simulate", _stop),
    ):
        try:
            return campaign.run(argparse.Namespace(
                replay=path, block=None, preset=None, json=True, quiet=True))  # fmt: skip
        except _LoadedError:
            return path


#: loader name -> (the shipped file it starts from, or a maker of one; the loader).
LOADERS: dict[str, tuple[Path | Callable[[Path], Path], Callable[[Path], Any]]] = {
    "pim-preset": (CONFIG_DIR / "aim-16ch.toml", load_config),
    "energy": (CONFIG_DIR / "energy" / "aim-cent.toml", load_energy_config),
    "hbm-energy": (CONFIG_DIR / "energy" / "hbm-pim.toml", load_energy_config),
    "xpu": (CONFIG_DIR / "xpu" / "a100-80gb.toml", load_xpu_config),
    "backend": (CONFIG_DIR / "backends" / "attacc.toml", load_backend_config),
    "layout": (CONFIG_DIR / "layouts" / "lpddr5x-pim.toml", load_layout),
    "sherpa-host": (CONFIG_DIR / "sherpa" / "galaxy-s24plus.toml", load_sherpa_host),
    "model": (CONFIG_DIR / "models" / "llm-7b.toml", load_model),
    "workload": (CONFIG_DIR / "workloads" / "qmsum.toml", load_workload),
    "sweep": (CONFIG_DIR / "sweeps" / "pimphony-fig15.toml", load_sweep),
    "trace-jsonl": (CONFIG_DIR / "traces" / "example.jsonl", read_trace),
    "trace-csv": (CONFIG_DIR / "traces" / "example.csv", read_trace),
    "table": (_table_file, lambda path: read_table(path, load_backend("attacc"))),
    "reproducer": (_scheduler_reproducer, load_reproducer),
    "reproducer-dpa": (_dpa_reproducer, load_reproducer),
}


# --------------------------------------------------------------------------- structured edits


def _toml_scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return {math.inf: "inf", -math.inf: "-inf"}.get(v, repr(v))
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string is a JSON string
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_scalar(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_toml_scalar(x) for x in v) + "]"
    return str(v)


def dump_toml(table: dict[str, Any], prefix: str = "") -> str:
    """``table`` as TOML (sections as ``[a.b]``, lists of tables inline)."""
    lines = [f"{json.dumps(k)} = {_toml_scalar(v)}" for k, v in table.items()
             if not isinstance(v, dict)]  # fmt: skip
    for k, v in table.items():
        if isinstance(v, dict):
            name = f"{prefix}{json.dumps(k)}"
            lines += ["", f"[{name}]", dump_toml(v, name + ".")]
    return "\n".join(lines)


def _paths(node: Any, at: tuple = ()) -> list[tuple]:
    """Every key path in a parsed document (dict keys and list indices)."""
    out = []
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for k, v in items:
        out.append((*at, k))
        if isinstance(v, dict | list):
            out += _paths(v, (*at, k))
    return out


def _edit(doc: Any, path: tuple, how: str, value: Any) -> Any:
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    last = path[-1]
    if how == "set":
        parent[last] = value
    elif how == "delete":
        del parent[last]
    elif how == "add" and isinstance(parent, dict):
        parent["unknown_field_x"] = value
    return doc


def _parse(path: Path, text: str) -> tuple[str, Any]:
    """(format, document) of a shipped file."""
    if path.suffix == ".toml":
        return "toml", tomllib.loads(text)
    if path.suffix == ".jsonl":
        return "jsonl", [json.loads(line) for line in text.splitlines() if line.strip()]
    if path.suffix == ".csv":
        rows = [line.split(",") for line in text.splitlines()]
        return "csv", [dict(zip(rows[0], r, strict=True)) for r in rows[1:]]
    return "json", json.loads(text)


def _render(fmt: str, doc: Any) -> str:
    if fmt == "toml":
        return dump_toml(doc) + "\n"
    if fmt == "jsonl":
        return "".join(json.dumps(r) + "\n" for r in doc)
    if fmt == "csv":
        rows = [r if isinstance(r, dict) else {"arrival_s": r} for r in doc]
        head = list(dict.fromkeys(k for r in rows for k in r))
        return "".join(",".join(map(str, row)) + "\n" for row in
                       [head, *[[r.get(k, "") for k in head] for r in rows]])  # fmt: skip
    return json.dumps(doc)


# A damage: ("edit", index into the key paths, how, value) or ("bytes", how, position, byte).
damages = st.one_of(
    st.tuples(
        st.just("edit"),
        st.integers(0, 10**6),
        st.sampled_from(["set", "set", "delete", "add"]),
        st.one_of(values, st.just({}), st.just([]), st.just({"value": -1})),
    ),
    st.tuples(
        st.just("bytes"),
        st.sampled_from(["cut", "replace", "garbage"]),
        st.integers(0, 10**6),
        st.integers(0x80, 0xFF),
    ),
)


def _damaged(source: Path, damage: tuple) -> bytes:
    raw = source.read_bytes()
    if damage[0] == "bytes":
        _, how, pos, byte = damage
        at = pos % max(1, len(raw))
        if how == "cut":
            return raw[:at]
        if how == "replace":
            return raw[:at] + bytes([byte]) + raw[at + 1 :]
        return bytes((pos * 7919 + k * byte) % 256 for k in range(pos % 512))
    _, index, how, value = damage
    fmt, doc = _parse(source, raw.decode())
    paths = _paths(doc)
    if paths:
        doc = _edit(doc, paths[index % len(paths)], how, value)
    return _render(fmt, doc).encode()


def _check_loader(name: str, tmp: Path, damage: tuple) -> str | None:
    """Load the damaged file: ``None`` if it loads, else the refusal's message (checked to be
    one line naming the file). Any other exception propagates."""
    source, loader = LOADERS[name]
    if callable(source):
        source = source(tmp)
    try:
        data = _damaged(source, damage)
    except (ValueError, TypeError, OverflowError):  # the edit cannot be written in the format
        return None
    path = tmp / "damaged" / source.name  # the name a preset must match
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    try:
        loader(path)
    except PimphonyError as exc:  # any other exception fails the test (hypothesis shrinks it)
        message = str(exc)
        assert len(message.strip().splitlines()) == 1, repr(message)  # \r, \x0b, ... too
        assert str(path) in message or path.name in message, message
        return message
    return None


@pytest.mark.parametrize("name", sorted(LOADERS))
@QUICK
@given(damage=damages)
def test_a_damaged_file_loads_or_is_refused_in_one_line(name, tmp_path_factory, damage):
    _check_loader(name, tmp_path_factory.mktemp(name), damage)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LOADERS))
@LONG
@given(damage=damages)
def test_a_damaged_file_loads_or_is_refused_in_one_line_long(name, tmp_path_factory, damage):
    _check_loader(name, tmp_path_factory.mktemp(name), damage)


def test_the_fuzzer_round_trips_every_shipped_file(tmp_path):
    """Without damage, every file rendered back from its parse loads: the edits test the
    loader, not the renderer."""
    for name, (source, loader) in LOADERS.items():
        if callable(source):
            source = source(tmp_path)
        fmt, doc = _parse(source, source.read_text())
        copy = tmp_path / name / source.name
        copy.parent.mkdir()
        copy.write_text(_render(fmt, doc))
        assert loader(copy) is not None, name


@pytest.mark.parametrize(
    "name, damage",
    [  # what the fuzzer found (each was a TypeError or csv.Error before)
        ("backend", ("edit", 1, "set", {})),  # a choice given a table
        ("energy", ("edit", 31, "set", {})),  # a unit given a table
        ("hbm-energy", ("edit", 312, "set", {})),
        ("trace-csv", ("bytes", "garbage", 15, 206)),  # a carriage return inside a field
        ("hbm-energy", ("edit", 14, "set", "Y\r")),  # a raw carriage return in the message
    ],
)
def test_what_the_fuzzer_found(name, damage, tmp_path):
    _check_loader(name, tmp_path, damage)
