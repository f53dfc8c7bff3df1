"""The system registry (sim/systems/registry.py): every row decodes and serves through the
one :class:`~sim.systems.base.System` interface, and each command refuses another row's
options from the table."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.systems.attacc_gpu import FIG8_SPECS
from pimphony.sim.systems.base import StepResult, System, SystemConfig
from pimphony.sim.systems.command import DECODE_GPU, SHARED_DEFAULTS
from pimphony.sim.systems.registry import (
    FIG8_ROWS,
    LIBRAPIM_ROWS,
    SYSTEMS,
    Command,
    SystemKind,
    make_system,
)

from tests.helpers import run_cli
from tests.test_attacc_gpu import fig8_table

MODEL = "llm-1.8b"
CONTEXT = 512
BATCH = 2

#: A value other than the default for every option some row reads (``dest`` -> argv).
OTHER_VALUE: dict[str, tuple[str, ...]] = {
    "modules": ("--modules", "2"),
    "tp": ("--tp", "2"),
    "pp": ("--pp", "2"),
    "micro_batches": ("--micro-batches", "2"),
    "partition": ("--partition", "tcp"),
    "sched": ("--sched", "static"),
    "memory": ("--memory", "static"),
    "max_context": ("--max-context", "4096"),
    "preset": ("--preset", "aim-16ch"),
    "ignore_capacity": ("--ignore-capacity",),
    "energy": ("--energy", "hbm-pim"),
    "mapping": ("--mapping", "tuned"),
    "gpu": ("--gpu", "h100-80gb"),
    "gpus": ("--gpus", "2"),
    "gpu_memory_fraction": ("--gpu-memory-fraction", "0.5"),
    "xpu": ("--xpu", "a100-80gb"),
    "sub_batches": ("--sub-batches", "2"),
    "groups": ("--groups", "3"),
    "no_dex": ("--no-dex",),
    "offload": ("--offload", "per-channel"),
    "score_overflow": ("--score-overflow", "bank-spill"),
    "backend": ("--backend", "hbm-pim"),
    "table": ("--table", "lut.json"),
    "budget": ("--budget", "50"),
    "verify": ("--verify", "3"),
}


@pytest.fixture(scope="module")
def row_options(tmp_path_factory) -> dict[SystemKind, dict[str, Any]]:
    """Options (``dest`` -> value) a row is run with here beyond the defaults: the ``+dcc``
    rows' DCC drafts from a lookup table (a search takes about 15 s per kernel shape)."""
    table = fig8_table(tmp_path_factory.mktemp("lut") / "lut.json")
    return {k: {"table": table} for k in FIG8_ROWS if FIG8_SPECS[k].dcc}


def _argv(options: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(x for d, v in options.items() for x in (f"--{d.replace('_', '-')}", v))


def _config(kind: SystemKind, options: dict[str, Any]) -> SystemConfig:
    """The configuration ``decode --system kind`` builds by default."""
    model = load_model(MODEL)
    default = {**SHARED_DEFAULTS, **SYSTEMS[kind].defaults}
    reads = SYSTEMS[kind].options[Command.DECODE]
    return SystemConfig(
        model,
        load_preset(default["preset"]) if kind != SystemKind.GPU else None,
        tp=default["tp"] if "tp" in reads else 1,
        xpu=load_xpu(default["xpu"]) if "xpu" in reads else None,
        gpu=load_xpu(DECODE_GPU) if kind == SystemKind.GPU else None,
        **options,
    )


def test_the_decode_and_serve_choices_are_the_registry():
    assert [str(k) for k in SYSTEMS] == [str(k) for k in SystemKind]
    for row in SYSTEMS.values():
        assert set(row.options) == set(Command)
        for command, dests in row.options.items():
            assert set(dests) <= set(OTHER_VALUE), (command, dests)


@pytest.mark.parametrize("kind", list(SYSTEMS))
def test_every_row_decodes(kind, tmp_path, capsys, row_options):
    """``pimphony decode --system K`` for every row; its report is the interface's step, and
    the fast path (``cycles``) times the step as the full step does."""
    out, png, extra = tmp_path / "r.json", tmp_path / "r.png", row_options.get(kind, {})
    rc, stdout, err = run_cli(
        capsys, "decode", "--system", kind, "--model", MODEL, "--context", CONTEXT,
        "--batch", BATCH, "--json", "--report", out, "--plot", png, *_argv(extra),
    )  # fmt: skip
    assert rc == 0, err
    report = json.loads(stdout)
    assert report == json.loads(out.read_text()) and png.stat().st_size > 0
    assert report["batch"] == BATCH

    system = make_system(kind, _config(kind, extra))
    assert isinstance(system, System)
    lengths = (CONTEXT,) * BATCH
    step = system.step(lengths)
    assert isinstance(step, StepResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.seconds = 0.0  # type: ignore[misc]
    assert step.seconds == report["step_seconds"] == step.report.step_seconds
    assert step.tokens_per_s == report["tokens_per_s"]
    fast = system.cycles(lengths)
    assert fast.seconds == pytest.approx(step.seconds, rel=1e-12) and fast.cycles == step.cycles
    if kind == SystemKind.GPU or kind in FIG8_ROWS:  # no PIM clock, no partition
        assert step.cycles is None and not step.partition_layers
    elif kind in LIBRAPIM_ROWS:
        # The report is the step's, and is run_librapim's system of that name.
        def text(r: dict) -> str:  # NaN (Algorithm 1's unused m*, n*) is not equal to itself
            return json.dumps({**r, "provenance": None}, sort_keys=True)

        assert text(step.report.to_dict()) == text(report)
        assert report["system"] == report["name"] == kind and report["tp"] == 8
        assert step.cycles == report["cycles"] > 0 and step.partition_layers == {}
        assert step.activity == {
            **{f"busy_{d}": v for d, v in report["busy"].items()},
            **{f"utilisation_{k}": v for k, v in report["utilisation"].items()},
        }
        assert report["provenance"]["xpu"]["name"] == "librapim-npu"
        assert report["provenance"]["preset"]["name"] == "librapim-hbm2"
    else:
        assert step.cycles == report["cycles"] > 0
        assert step.partition_layers == report["partition_layers"]
        assert sum(step.partition_layers.values()) > 0
    assert step.activity and all(v >= 0 for v in step.activity.values())
    if kind not in LIBRAPIM_ROWS:  # a LibraPIM step does not state its links' bytes
        assert set(step.link_bytes) and all(v >= 0 for v in step.link_bytes.values())


@pytest.mark.parametrize("kind", list(SYSTEMS))
def test_every_row_serves(kind, tmp_path, capsys, row_options):
    """``pimphony serve --system K`` for every row: every request finishes."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"arrival_s": 0, "input_tokens": 300, "output_tokens": 2}\n'
        '{"arrival_s": 0.001, "input_tokens": 200, "output_tokens": 3}\n'
    )
    out, png, extra = tmp_path / "s.json", tmp_path / "s.png", row_options.get(kind, {})
    rc, stdout, err = run_cli(
        capsys, "serve", "--system", kind, "--model", MODEL, "--workload", trace,
        "--json", "--out", out, "--plot", png, *_argv(extra),
    )  # fmt: skip
    assert rc == 0, err
    report = json.loads(stdout)
    assert report["system"] == kind
    rows = report["requests"]["rows"]
    assert len(rows) == 2 and all(r[5] is not None and r[5] > 0 for r in rows)
    assert [r[:3] for r in rows] == [[0, 300, 2], [0.001, 200, 3]]
    assert report["simulation"]["distinct_steps"] >= 1

    system = make_system(kind, _config(kind, extra))
    assert system.prefill([300, 200]) > 0
    pool = system.pool()
    assert pool.admit(0, 300, raise_on_oom=False)
    pool.grow(0)
    pool.release(0)
    assert pool.stats().used_bytes == 0


@pytest.mark.parametrize("command", list(Command))
@pytest.mark.parametrize("kind", list(SYSTEMS))
def test_other_rows_options_are_refused_from_the_table(kind, command, tmp_path, capsys):
    """Each option another row reads (and this one does not) is refused by name, with the
    row that reads it."""
    mine = SYSTEMS[kind].options[command]
    foreign = {d for row in SYSTEMS.values() for d in row.options[command] if d not in mine}
    assert foreign, f"{kind} reads every {command} option"
    for dest in sorted(foreign):
        first = next(k for k, row in SYSTEMS.items() if dest in row.options[command])
        rc, _, err = run_cli(
            capsys, command, "--system", kind, "--model", MODEL, *OTHER_VALUE[dest],
            "--json", "--force",
        )  # fmt: skip
        flag = OTHER_VALUE[dest][0]
        assert rc != 0
        assert f"--system {kind} does not use {flag} (--system {first})" in err, err


def test_gpu_lolpim_row_is_xpu_pim_with_lolpim_choices(tmp_path, capsys):
    """``gpu+lolpim``: LoL-PIM's GPU and modules by default and its techniques always; the
    same step as ``xpu+pim`` given them, on 2 GPUs and 2 x 2 modules."""
    common = ("--model", MODEL, "--context", CONTEXT, "--batch", BATCH, "--json")
    split = ("--gpus", "2", "--tp", "2", "--pp", "2")
    rc, out, err = run_cli(
        capsys, "decode", "--system", "gpu+lolpim", *common, *split,
        "--report", tmp_path / "a.json", "--plot", tmp_path / "a.png",
    )  # fmt: skip
    assert rc == 0, err
    lol = json.loads(out)
    assert (lol["xpu"], lol["preset"]) == ("lolpim-gpu-gddr6", "lolpim-aimx-io")
    assert (lol["partition"], lol["sched"], lol["memory"]) == ("itpp", "pingpong", "lazy")
    assert (lol["xpus"], lol["tp"], lol["pp"]) == (2, 2, 2)
    rc, out, err = run_cli(
        capsys, "decode", "--system", "xpu+pim", *common, *split,
        "--xpu", "lolpim-gpu-gddr6", "--preset", "lolpim-aimx-io", "--partition", "itpp",
        "--sched", "pingpong", "--memory", "lazy",
        "--report", tmp_path / "b.json", "--plot", tmp_path / "b.png",
    )  # fmt: skip
    assert rc == 0, err
    assert json.loads(out)["cycles"] == lol["cycles"]
    rc, _, err = run_cli(
        capsys, "decode", "--system", "gpu+lolpim", *common, "--partition", "hfp",
        "--report", tmp_path / "c.json", "--plot", tmp_path / "c.png",
    )  # fmt: skip
    assert rc != 0 and "--system gpu+lolpim does not use --partition" in err
