"""LibraPIM's systems as rows of the system registry (sim/systems/librapim_system.py): the
decode report is ``pimphony librapim``'s step, the rows read LibraPIM's options with its
defaults, and admission and prefill are the PIM devices' and the NPUs'."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from pimphony.compiler.llm import load_model
from pimphony.models.config import load_preset
from pimphony.models.hub import link_cycles
from pimphony.models.xpu_config import load_xpu
from pimphony.sim.systems import librapim_system
from pimphony.sim.systems.base import Command, SystemConfig, SystemKind
from pimphony.sim.systems.costs import xpu_prefill_seconds
from pimphony.sim.systems.librapim import (
    DEFAULT_TP,
    LIBRAPIM_PRESET,
    LIBRAPIM_SPECS,
    LIBRAPIM_XPU,
    Offload,
    OffloadReading,
)
from pimphony.sim.systems.librapim_system import librapim_report_stem, plot_librapim_report
from pimphony.sim.systems.registry import LIBRAPIM_ROWS
from pimphony.sim.systems.setup import DecodeError

from tests.helpers import figure_labels, run_cli

MODEL = "llm-1.8b"


def _system(kind: SystemKind, model: str = MODEL, **options):
    config = SystemConfig(
        load_model(model),
        load_preset(LIBRAPIM_PRESET),
        xpu=load_xpu(LIBRAPIM_XPU),
        tp=options.pop("tp", DEFAULT_TP),
        **options,
    )
    return LIBRAPIM_ROWS[kind].build(config)


def _text(values: dict) -> str:
    """JSON text (NaN, Algorithm 1's unused m* and n*, is not equal to itself)."""
    return json.dumps(values, sort_keys=True)


def test_decode_report_is_the_librapim_commands_step(tmp_path, capsys):
    """``decode --system K`` and ``librapim --system K`` (both with their defaults) time the
    same step, and the report states the same inputs."""
    common = ("--model", MODEL, "--context", "300", "--batch", "4")
    rc, out, err = run_cli(
        capsys, "decode", "--system", "librapim-no-dbo", *common, "--no-dex", "--json",
        "--report", tmp_path / "r.json", "--plot", tmp_path / "r.png",
    )  # fmt: skip
    assert rc == 0, err
    report = json.loads(out)
    rc, out, err = run_cli(capsys, "librapim", "--system", "librapim-no-dbo", *common,
                           "--no-dex", "--json")  # fmt: skip
    assert rc == 0, err
    direct = json.loads(out)
    step = direct.pop("systems")["librapim-no-dbo"]
    assert _text({k: report[k] for k in step}) == _text(step)
    assert {k: report[k] for k in direct} == direct
    assert (report["system"], report["slicing"], report["groups"]) == ("librapim-no-dbo", False, 2)
    options = report["provenance"]["options"]
    assert (options["preset"], options["xpu"], options["tp"]) == (
        LIBRAPIM_PRESET,
        LIBRAPIM_XPU,
        DEFAULT_TP,
    )
    assert options["no_dex"] is True and "gpus" not in options and "energy" not in options


def test_each_row_reads_the_options_its_system_has():
    for kind, row in LIBRAPIM_ROWS.items():
        reads = row.options[Command.DECODE]
        serial = kind in (SystemKind.NPU_AIM, SystemKind.ATTACC)
        assert ("groups" in reads) != serial, kind
        dex = kind.startswith("librapim")
        assert ("no_dex" in reads) == dex, kind
        assert ("offload" in reads) == (LIBRAPIM_SPECS[kind].offload != Offload.NONE), kind
        assert set(row.defaults) <= set(reads)
        assert row.defaults["preset"] == LIBRAPIM_PRESET and row.defaults["tp"] == DEFAULT_TP
        assert set(row.options[Command.SERVE]) - set(reads) == {"memory", "max_context"}


def test_offload_reading_reaches_the_step_and_names_the_report(tmp_path, capsys):
    """``--offload per-channel`` on ``decode --system librapim`` times what ``librapim
    --offload per-channel`` does and is stated in the report and its name; per bank (the
    default) leaves both as they were; a row without an FFN offload refuses the option."""
    common = ("--model", MODEL, "--context", "300", "--batch", "4", "--offload", "per-channel")
    files = ("--report", tmp_path / "r.json", "--plot", tmp_path / "r.png")
    rc, out, err = run_cli(capsys, "decode", "--system", "librapim", *common, "--json", *files)
    assert rc == 0, err
    report = json.loads(out)
    rc, out, err = run_cli(capsys, "librapim", "--system", "librapim", *common, "--json")
    assert rc == 0, err
    step = json.loads(out)["systems"]["librapim"]
    assert _text({k: report[k] for k in step}) == _text(step)
    assert report["offload"] == "per-channel"
    system = _system(SystemKind.LIBRAPIM)
    default = system.setup((300,) * 4)
    chan = dataclasses.replace(default, offload=OffloadReading.PER_CHANNEL)
    assert librapim_report_stem(chan) != librapim_report_stem(default)
    assert "offload" not in librapim_system.LibrapimReport(default, system._run(default)).to_dict()
    rc, out, err = run_cli(capsys, "decode", "--system", "neupims", *common, *files, "--force")
    assert rc != 0 and "--system neupims does not use --offload" in err
    with pytest.raises(DecodeError, match="offload reading 'per-row' is unknown"):
        dataclasses.replace(default, offload="per-row")


def test_groups_are_capped_at_the_batch_and_inputs_checked():
    system = _system(SystemKind.LIBRAPIM, groups=4)
    assert system.setup((100,)).groups == 1 and system.setup((100,) * 6).groups == 4
    assert system.cycles((100,)).cycles == system.step((100,)).cycles > 0
    with pytest.raises(DecodeError, match="divisor of llm-1.8b's kv_heads"):
        _system(SystemKind.LIBRAPIM, tp=3).setup((100,))
    with pytest.raises(DecodeError, match="not a LibraPIM system"):
        dataclasses.replace(system.setup((100,)), kind=SystemKind.PIM)


def test_prefill_runs_on_the_npus_and_moves_the_kv_to_pim():
    system = _system(SystemKind.NEUPIMS)
    model, hw = system.config.model, system.hw
    kv = math.ceil(500 * model.kv_bytes_per_token / DEFAULT_TP)
    want = xpu_prefill_seconds(system.xpu, model, [300, 200], DEFAULT_TP)
    want += link_cycles(hw, kv, "host") / (hw.module.freq_ghz * 1e9)
    assert system.prefill([300, 200]) == pytest.approx(want, rel=1e-12)


def test_the_pool_holds_the_weights_beside_the_kv():
    small = _system(SystemKind.LIBRAPIM).pool().stats().capacity_bytes
    assert 0 < small < DEFAULT_TP * load_preset(LIBRAPIM_PRESET).module_bytes
    with pytest.raises(DecodeError, match="weights alone exceed 1 module"):
        _system(SystemKind.LIBRAPIM, "gpt3-175b-4k", tp=1).pool()


def test_plot_is_titled_with_labelled_axes(tmp_path, monkeypatch):
    seen = figure_labels(monkeypatch, librapim_system)
    report = _system(SystemKind.ATTACC).step((200, 300)).report
    assert plot_librapim_report(report, tmp_path / "p.png").stat().st_size > 0
    assert "attacc" in seen["title"] and "tokens/s" in seen["title"]
    assert "(%)" in seen["y"] and "device" in seen["x"]
