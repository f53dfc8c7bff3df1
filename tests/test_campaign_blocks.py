"""The campaigns of the cocotb blocks (``sim/verify/campaign_blocks.py``, ~26 s): ``dpa``,
``dpa_pipeline`` and ``bank_slice`` items drawn again alone from ``(seed, index)``, small
campaigns on every block (no mismatch), and an injected TLM bug (decode times one cycle late
from the ninth command; a MAC activation one cycle longer) that the campaign stops at,
shrinks, writes and replays. The registry and the ``--block`` choices come from one table.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
from pimphony.models.bank_slice import run_bank_slice
from pimphony.models.config import load_preset
from pimphony.models.dpa.format import Command, DpaError, DynLoop, Header, Rule, TranslationError
from pimphony.models.dpa.program import DpaProgram, expand
from pimphony.models.isa import Op, validate_stream
from pimphony.rtl import Block
from pimphony.sim.verify import bank_slice as bank_slice_harness
from pimphony.sim.verify import dpa as dpa_harness
from pimphony.sim.verify.campaign_blocks import (
    CAMPAIGNS,
    COCOTB_BLOCKS,
    BlockResult,
    CampaignOptions,
    ShrunkItem,
    dpa_item,
    expanded_length,
    run_block_campaign,
    slice_item,
    write_item,
)

from tests.helpers import run_cli

CFG = load_preset("aim-16ch")


def test_registry_covers_every_block():
    assert list(CAMPAIGNS) == list(Block)
    assert set(COCOTB_BLOCKS) == {Block.DPA, Block.DPA_PIPELINE, Block.BANK_SLICE}
    for block, row in CAMPAIGNS.items():
        assert row.block is block and 0 < row.kernels < 1


@pytest.mark.parametrize("block", ["dpa", "dpa_pipeline"])
def test_dpa_items_are_reproducible_and_legal(block):
    opts = CampaignOptions(kernels=0.5)
    kinds = set()
    for i in range(60):
        a = dpa_item(CFG, block, 4, i, opts)
        b = dpa_item(CFG, block, 4, i, opts)
        assert np.array_equal(a.program.words, b.program.words) and a.table == b.table
        assert (a.t_cur, a.table_base, a.ready_pattern) == (b.t_cur, b.table_base, b.ready_pattern)
        virtual = expand(a.program, a.t_cur, None)
        validate_stream(virtual, CFG.channel)  # a channel stream: operands only
        assert virtual.shape[0] == a.commands == expanded_length(a.program, a.t_cur)
        assert 1 <= a.t_cur <= a.program.max_tokens
        try:
            expand(a.program, a.t_cur, list(a.table))
            assert not a.unmapped
        except TranslationError:
            assert a.unmapped
        kinds.add(a.source.split()[0])
        kinds |= {"unmapped"} if a.unmapped else set()
        kinds |= {"ready"} if a.ready_pattern is not None else set()
    assert {"random", "qk", "sv"} <= kinds
    if block == "dpa":
        assert {"unmapped", "ready"} <= kinds
    else:  # the pipeline is checked cycle-exact only, on streams the DCS runs
        assert not kinds & {"unmapped", "ready"}
    # --kernels 0: only random programs.
    assert {dpa_item(CFG, block, 4, i, CampaignOptions(kernels=0)).source for i in range(10)} == {
        "random"
    }


def test_slice_items_are_reproducible_and_legal():
    opts = CampaignOptions(kernels=0.3, max_length=80)
    seen = set()
    for i in range(40):
        a, b = slice_item(CFG, 2, i, opts), slice_item(CFG, 2, i, opts)
        assert np.array_equal(a.run.pim, b.run.pim) and np.array_equal(a.run.host, b.run.host)
        assert (a.sliced, a.run.valid_gaps, a.run.ready_pattern) == (
            b.sliced,
            b.run.valid_gaps,
            b.run.ready_pattern,
        )
        run_bank_slice(a.run.pim, a.run.host, CFG, a.slicing, valid_gaps=a.run.valid_gaps)
        if a.source == "random":
            assert a.run.pim.shape[0] <= 80
        seen |= {("dex" if a.sliced else "baseline"), a.source.split()[0]}
        seen |= {"gaps"} if a.run.valid_gaps is not None else set()
        seen |= {"ready"} if a.run.ready_pattern is not None else set()
    assert {"dex", "baseline", "random", "gaps", "ready"} <= seen and seen & {"qk", "sv", "gemv"}


@pytest.mark.parametrize(
    ("block", "items", "kernels"),
    [("dpa", 24, 0.5), ("dpa_pipeline", 12, 0.5), ("bank_slice", 16, 0.2)],
)
def test_small_campaign(block, items, kernels):
    """A few seconds per block: every item matches the TLM."""
    opts = CampaignOptions(kernels=kernels, max_length=200, keep_going=True, chunk=items)
    r = run_block_campaign(block, CFG, items, 11, opts)
    assert r.mismatches == [], "\n".join(r.mismatches)
    assert r.streams == items and r.exact + r.rules_only == items
    assert r.cycles > 0 and r.sim_seconds > 0 and r.commands > 0 and 0 < r.kernels < items
    if block == "bank_slice":
        assert r.details["dex"] + r.details["baseline"] == items and r.details["host_reads"] > 0
    if block == "dpa_pipeline":
        assert r.rules_only == 0


def test_parts_of_a_campaign_absorb_in_order():
    """``--workers``: the results of consecutive ranges of items add up as one run counts
    them: counts and the kinds of items summed (new kinds after the known ones), mismatches
    in order, the first failure kept."""
    first = BlockResult("bank_slice", "aim-16ch", 1, streams=3, exact=2, rules_only=1,
                        commands=40, cycles=900, details={"dex": 3, "host_reads": 7})  # fmt: skip
    later = BlockResult("bank_slice", "aim-16ch", 1, streams=2, exact=2, kernels=1, redrawn=1,
                        commands=10, cycles=100, mismatches=["#4 differs"], failure="#4",
                        details={"baseline": 2, "host_reads": 1})  # fmt: skip
    last = BlockResult("bank_slice", "aim-16ch", 1, streams=1, exact=1, mismatches=["#5"],
                       failure="#5", details={"dex": 1})  # fmt: skip
    first.absorb(later)
    assert not first.stopped(keep_going=True) and first.stopped(keep_going=False)
    first.absorb(last)
    assert (first.streams, first.exact, first.rules_only, first.kernels, first.redrawn) == (
        6, 5, 1, 1, 1
    )  # fmt: skip
    assert (first.commands, first.cycles) == (50, 1000)
    assert first.mismatches == ["#4 differs", "#5"] and first.failure == "#4"
    assert list(first.details.items()) == [("dex", 4), ("host_reads", 8), ("baseline", 2)]


def test_cli_refusals(tmp_path, capsys):
    status, _, err = run_cli(capsys, "verify", "campaign", "--block", "all", "dcs")
    assert status == 2 and "--block all runs every block; name no other block" in err
    status, _, err = run_cli(capsys, "verify", "campaign", "--block", "dpa", "dpa")
    assert status == 2 and "--block names a block twice: dpa dpa" in err
    status, _, err = run_cli(capsys, "verify", "campaign", "--block", "nope")
    assert status == 2 and "invalid choice: 'nope'" in err and "bank_slice" in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"block": "dpa", "preset": "aim-16ch", "index": 0}))
    status, _, err = run_cli(capsys, "verify", "campaign", "--replay", str(bad))
    assert status == 2 and "field 'program' must be a list of integers" in err
    bad.write_text(json.dumps({"block": "bank_slice", "preset": "aim-16ch", "index": 0}))
    status, _, err = run_cli(capsys, "verify", "campaign", "--replay", str(bad))
    assert status == 2 and "field 'sliced' must be true or false" in err


# -- injected bugs ----------------------------------------------------------------------------

LATE_FROM = 8
"""The injected DPA bug: the TLM's decode times are one cycle late from command 8 on."""


@pytest.fixture()
def late_decoder(monkeypatch):
    real = dpa_harness.decode_times

    def late(n, n_rules, timing=None, n_body_words=0):
        t = real(n, n_rules, timing, n_body_words)
        return t + (np.arange(t.shape[0]) >= LATE_FROM)

    monkeypatch.setattr(dpa_harness, "decode_times", late)


def _first_hit(seed: int, opts: CampaignOptions) -> int:
    for i in range(200):
        item = dpa_item(CFG, "dpa", seed, i, opts)
        if item.exact and not item.unmapped and item.commands > LATE_FROM:
            return i
        if item.unmapped:  # the prefix before the faulting MAC is checked with the same times
            virtual = expand(item.program, item.t_cur, None)
            try:
                expand(item.program, item.t_cur, list(item.table))
            except TranslationError as exc:
                mac = np.flatnonzero(
                    (virtual["op"] == Op.MAC) & (virtual["row"] == exc.virtual_row)
                )
                if item.exact and int(mac[0]) > LATE_FROM:
                    return i
    raise AssertionError("no item hits the injected bug")


def test_dpa_campaign_stops_shrinks_and_replays(late_decoder, tmp_path, capsys, monkeypatch):
    opts = ["--block", "dpa", "--streams", "40", "--seed", "6", "--chunk", "40"]
    opts += ["--kernels", "0.5", "--repro-dir", str(tmp_path), "--quiet"]
    status, out, err = run_cli(capsys, "verify", "campaign", *opts)
    assert status == 1 and "1 item(s) differ from the TLM (dpa)" in err, err
    index = _first_hit(6, CampaignOptions(kernels=0.5))
    assert f"dpa at aim-16ch, seed 6: {index + 1} items" in out  # stopped there
    js = tmp_path / f"dpa-aim-16ch-seed6-item{index}.json"
    record = json.loads(js.read_text())
    original = dpa_item(CFG, "dpa", 6, index, CampaignOptions(kernels=0.5))
    assert record["index"] == index and record["original"]["t_cur"] == original.t_cur
    assert record["check"] == "exact" and record["ready_pattern"] is None
    assert record["t_cur"] <= original.t_cur and record["commands"] > LATE_FROM
    assert record["table_base"] == 0 and record["program_base"] == 0
    assert f"command #{LATE_FROM} " in record["mismatch"]
    assert record["program"] == [int(w) for w in original.program.words]
    assert record["replay"] == f"pimphony verify campaign --replay {js}"
    assert "--kernels 0.5" in record["campaign"] and "--streams" in record["campaign"]
    # Shrunk as far as T_cur goes: at half of it (if the program expands there) and at
    # every power of two below it, the dispatch has too few commands to hit the bug.
    t = record["t_cur"]
    for lower in {t // 2} | {1 << k for k in range(t.bit_length())}:
        if 1 <= lower < t:
            with contextlib.suppress(DpaError):  # no expansion at that T_cur
                assert expand(original.program, lower, None).shape[0] <= LATE_FROM
    # Never overwritten without --force.
    before = js.read_bytes()
    shrunk = ShrunkItem(original, "x", {"commands": original.commands}, 0, 0)
    kw = {"block": "dpa", "cfg": CFG, "preset": "aim-16ch", "seed": 6}
    with pytest.raises(FileExistsError, match="pass --force"):
        write_item(tmp_path, shrunk, **kw)
    assert js.read_bytes() == before
    assert (
        json.loads(write_item(tmp_path, shrunk, **kw, overwrite=True).read_text())["mismatch"]
        == "x"
    )
    js.write_bytes(before)
    # Replay: fails with the bug, passes without it.
    status, out, err = run_cli(capsys, "verify", "campaign", "--replay", str(js))
    assert status == 1 and "mismatch reproduces" in out and "still fails" in err
    monkeypatch.undo()
    status, out, _ = run_cli(capsys, "verify", "campaign", "--replay", str(js), "--json")
    assert status == 0 and json.loads(out)["mismatch"] is None


def test_bank_slice_campaign_shrinks_to_one_operation(tmp_path, capsys, monkeypatch):
    """A TLM whose row activation takes one cycle longer (``tRCD_MAC``, which host reads
    wait for too): the first item fails, and delta debugging leaves one operation."""
    real = bank_slice_harness.run_bank_slice

    def slow_mac(pim, host, cfg, *args, **kw):
        wrong = cfg.replace(**{"timing.tRCD_MAC": cfg.timing.tRCD_MAC + 1})
        return real(pim, host, wrong, *args, **kw)

    monkeypatch.setattr(bank_slice_harness, "run_bank_slice", slow_mac)
    opts = ["--block", "bank_slice", "--streams", "6", "--seed", "3", "--max-length", "12"]
    opts += ["--kernels", "0", "--repro-dir", str(tmp_path), "--quiet"]
    status, out, err = run_cli(capsys, "verify", "campaign", *opts)
    assert status == 1 and "differ from the TLM (bank_slice)" in err, err
    (js,) = tmp_path.glob("bank_slice-aim-16ch-seed3-item*.json")
    record = json.loads(js.read_text())
    assert record["commands"] == 1 and record["ready_pattern"] is None
    assert len(record["pim"]["op"]) + len(record["host"]["bank"]) == 1
    assert record["pim"]["op"] in ([], [int(Op.MAC)])  # a WR_INP or RD_OUT opens no row
    assert record["original"]["commands"] > 1
    status, out, _ = run_cli(capsys, "verify", "campaign", "--replay", str(js))
    assert status == 1 and "mismatch reproduces" in out
    monkeypatch.undo()
    status, out, _ = run_cli(capsys, "verify", "campaign", "--replay", str(js))
    assert status == 0 and "no mismatch" in out


def test_expanded_length_counts_without_expanding():
    """Nested rule-bound loops: 4,000 x 4,000 WR_INPs plus one MAC, counted, not built."""
    words = [
        Header(kernel=0, max_tokens=5000),
        Rule(0),
        DynLoop(le=2, rule=0),
        DynLoop(le=1, rule=0),
        Command(Op.WR_INP),
        DynLoop(le=1, count=0),  # zero-trip
        Command(Op.RD_OUT),
        Command(Op.MAC, row=1),
    ]
    prog = DpaProgram.from_instructions(words, CFG)
    assert expanded_length(prog, 4000) == 4000 * 4000 + 1
    assert expanded_length(prog, 3) == expand(prog, 3, None).shape[0] == 10
