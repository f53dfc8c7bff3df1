"""DCS vs ping-pong over OBuf size and timing convention (sim/experiments/buffer_sweep)."""

from __future__ import annotations

import json

import pytest
from pimphony.compiler.kernels import CompileError, compile_qk
from pimphony.models.channel import run_channel
from pimphony.sim.experiments.buffer_sweep import CONVENTIONS, buffer_sweep, format_buffer_sweep

from tests.helpers import run_cli


@pytest.fixture(scope="module")
def rows():
    return buffer_sweep(obuf=(2, 4, 64), groups=(1, 2), tokens=512, d_h=64)


def test_rows_are_the_direct_runs(rows):
    assert len(rows) == len(CONVENTIONS) * 3 * 2
    for r in rows:
        cfg = CONVENTIONS[r["convention"]].config(r["obuf_entries"])
        assert cfg.channel.obuf_entries == r["obuf_entries"]
        if r["ratio"] is None:
            with pytest.raises(CompileError, match="does not fit"):
                compile_qk(cfg, 512, 64, gqa_group=r["gqa_group"])
            continue
        prog = compile_qk(cfg, 512, 64, gqa_group=r["gqa_group"])
        pp, dcs = (run_channel(prog.commands, cfg, s).cycles for s in ("pingpong", "dcs"))
        assert (r["pingpong_cycles"], r["dcs_cycles"]) == (pp, dcs)
        assert r["ratio"] == pp / dcs


def test_row_reuse_needs_an_obuf_half_per_head(rows):
    # OBuf 2 = halves of 1 entry: one head per half, so G = 2 is refused; OBuf 4 holds it.
    refused = {(r["obuf_entries"], r["gqa_group"]) for r in rows if r["ratio"] is None}
    assert refused == {(2, 2)}
    assert "refused" in format_buffer_sweep(rows)


def test_small_obuf_is_where_dcs_pulls_ahead():
    # The mechanism behind PIMphony Fig. 18: with small per-region buffers ping-pong's
    # hand-off stalls on the MAC-result latency, which DCS overlaps; large buffers hide it.
    rows = buffer_sweep(
        conventions=[CONVENTIONS["ACT4 (aim-16ch)"]], obuf=(4, 64), groups=(1,), tokens=4096
    )
    small, large = (r["ratio"] for r in rows)
    assert small > 1.25 and large < 1.02


def test_tmod_grid_compares_two_mode_aware_schedulers():
    # With aim-ramulator's 32-cycle TMOD both schedulers batch commands by mode
    # (docs/scheduling.md: DCS rule 6, ping-pong rule 7). QK^T G = 8 at 64 entries was 6.8x
    # while ping-pong switched mode greedily inside a slot (358,719 cycles, 10,117 TMODs).
    rows = buffer_sweep(
        conventions=[CONVENTIONS["aim-ramulator (TMOD 32)"]], obuf=(64,), groups=(8,)
    )
    assert (rows[0]["pingpong_cycles"], rows[0]["dcs_cycles"]) == (52_225, 53_025)


def test_cli_json_and_bad_list(capsys, tmp_path):
    rc, out, err = run_cli(
        capsys, "buffer-sweep", "--obuf", "4,8", "--groups", "1", "--tokens", "256",
        "--json", "--plot", tmp_path / "b.svg",
    )  # fmt: skip
    assert rc == 0, err
    doc = json.loads(out)
    assert len(doc["rows"]) == len(CONVENTIONS) * 2 and doc["provenance"]["tool"] == "pimphony"
    assert (tmp_path / "b.svg").read_bytes().lstrip().startswith(b"<?xml")
    rc, _, err = run_cli(capsys, "buffer-sweep", "--obuf", "4,0")
    assert rc == 2 and "--obuf" in err and "0 is outside 1 to 4,096" in err
