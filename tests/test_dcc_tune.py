"""DCC's search (compiler/dcc/tune.py) and ``pimphony tune``: the pruned search finds the
exhaustive search's best on small shapes, the objectives pick what they say, the default
mapping is one of the generated drafts, and the command's output and refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pimphony.compiler.dcc.cost import draft_cost
from pimphony.compiler.dcc.schedule import DccError, DccKernel, Index, Part
from pimphony.compiler.dcc.tune import Objective, best, default_draft, kernel_drafts, search
from pimphony.models.backends import load_backend
from pimphony.sim.cli import main

from tests.helpers import run_cli
from tests.test_dcc_cost import small_backend

HBM = load_backend("hbm-pim")


@pytest.mark.parametrize(
    "kernel, sizes",
    [
        (DccKernel.GEMV, (64, 256)),
        (DccKernel.BATCHED_GEMV, (2, 32, 128)),
        (DccKernel.RED, (64, 128)),
        (DccKernel.VA, (512,)),
        (DccKernel.RELU, (300,)),
        (DccKernel.BATCHED_RED, (2, 3, 64)),
        (DccKernel.BATCHED_VA, (2, 200)),
        (DccKernel.BATCHED_RELU, (3, 100)),
    ],
)
def test_pruned_search_finds_the_exhaustive_best(tmp_path: Path, kernel, sizes) -> None:
    cfg = load_backend(small_backend(tmp_path))
    pruned = search(cfg, kernel, sizes, pruned=True)
    full = search(cfg, kernel, sizes, pruned=False)
    assert pruned.pruned < full.generated == pruned.generated
    assert best(pruned).total_s == best(full).total_s


def test_objectives(tmp_path: Path) -> None:
    cfg = load_backend(small_backend(tmp_path))
    res = search(cfg, DccKernel.GEMV, (64, 512), pruned=False)
    e2e, comp = best(res, Objective.END_TO_END), best(res, Objective.COMPUTE)
    assert e2e.total_s == min(c.total_s for c in res.costs)
    assert comp.compute_s == min(c.compute_s for c in res.costs)
    assert e2e.total_s <= comp.total_s and comp.compute_s <= e2e.compute_s


def test_default_draft_is_dcc_v_mapping() -> None:
    # hbm-pim: 4 bank groups x 4 banks, a unit per 2 banks -> first dimension over 4, second
    # over 2; batches over all 80 pseudo-channels (32 here)
    d = default_draft(HBM, DccKernel.GEMV, (1024, 1024))
    assert [(p.groups, p.cores, p.dim) for p in d] == [(1, 4, "W0"), (1, 2, "W1")]
    d = default_draft(HBM, DccKernel.BATCHED_GEMV, (32, 1024, 1024))
    assert [(p.groups, p.cores) for p in d] == [(32, 1), (1, 4), (1, 2)]
    attacc = load_backend("attacc")  # 16 bank groups x 4 banks, a GEMV unit per bank
    d = default_draft(attacc, DccKernel.BATCHED_GEMV, (4, 512, 128))
    assert [(p.groups, p.cores) for p in d] == [(4, 1), (1, 16), (1, 4)]
    d = default_draft(attacc, DccKernel.SV, (2, 256, 128))  # V[h][t][d]: t first, then d
    assert [(p.groups, p.cores, p.dim) for p in d] == [(2, 1, "V0"), (1, 4, "V2"), (1, 16, "V1")]
    d = default_draft(HBM, DccKernel.VA, (4096,))  # VA's n is not a batch
    assert [(p.groups, p.cores) for p in d] == [(1, 8)]
    every, _ = kernel_drafts(HBM, DccKernel.GEMV, (1024, 1024), pruned=False)
    assert default_draft(HBM, DccKernel.GEMV, (1024, 1024)) in every


def test_default_draft_of_the_batched_kernels() -> None:
    """Batches over the pseudo-channels (DCC V); then RED's A[b][m][n]: m over the bank groups'
    4 units, n over the 2 units of a bank group; VA / RELU's one dimension over all 8."""
    d = default_draft(HBM, DccKernel.BATCHED_RED, (4, 3, 1024))
    assert [(p.groups, p.cores, p.dim) for p in d] == [(4, 1, "A0"), (1, 4, "A1"), (1, 2, "A2")]
    # a row of one element per batch: A[b][1][n] is A[b][n], n over all 8 units as VA's
    d = default_draft(HBM, DccKernel.BATCHED_RED, (4, 1, 1024))
    assert [(p.groups, p.cores, p.dim) for p in d] == [(4, 1, "A0"), (1, 1, "A1"), (1, 8, "A2")]
    d = default_draft(HBM, DccKernel.RED, (1, 1024))
    assert [(p.groups, p.cores) for p in d] == [(1, 1), (1, 8)]
    for kernel, tensor in ((DccKernel.BATCHED_VA, "A"), (DccKernel.BATCHED_RELU, "X")):
        d = default_draft(HBM, kernel, (2, 4096))
        assert [(p.groups, p.cores, p.dim) for p in d] == [
            (2, 1, f"{tensor}0"),
            (1, 8, f"{tensor}1"),
        ]
    d = default_draft(HBM, DccKernel.BATCHED_VA, (100, 64))  # more batches than the 80 groups
    assert d[0].groups == 80
    every, _ = kernel_drafts(HBM, DccKernel.BATCHED_RED, (4, 1, 1024), pruned=False)
    assert default_draft(HBM, DccKernel.BATCHED_RED, (4, 1, 1024)) in every


def test_search_refuses_when_nothing_runs() -> None:
    too_many_rows = (Part(1, 1, "C0", 1 << 22, Index("n")),)  # 4M elements in one unit's bank
    with pytest.raises(DccError, match="none of 1 drafts runs"):
        search(HBM, DccKernel.VA, (1 << 22,), candidates=[too_many_rows])


def test_tune_command(tmp_path: Path, capsys) -> None:
    cfg = small_backend(tmp_path)
    out = tmp_path / "tune.json"
    args = ["tune", "--kernel", "gemv", "--shape", "64,256", "--backend", str(cfg)]
    assert main([*args, "--exhaustive", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "chosen (DCC)" in text and "default (DCC V)" in text
    assert "pruned search finds the same" in text
    report = json.loads(out.read_text())
    chosen = report["chosen"]
    assert chosen["total_us"] == pytest.approx(
        chosen["rearrange_in_us"] + chosen["compute_us"] + chosen["rearrange_out_us"]
        + chosen["host_us"]
    )  # fmt: skip
    assert report["speedup"]["over_default"] >= 1.0
    assert report["provenance"]["command"]
    # the same draft simulated directly costs the same
    d = default_draft(load_backend(cfg), DccKernel.GEMV, (64, 256))
    direct = draft_cost(load_backend(cfg), DccKernel.GEMV, (64, 256), d)
    assert report["default"]["total_us"] == pytest.approx(direct.total_s * 1e6)
    # an existing --out is refused before the search, and kept
    before = out.read_text()
    assert main([*args, "--out", str(out)]) != 0
    assert "pass --force" in capsys.readouterr().err
    assert out.read_text() == before


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--kernel", "gemv", "--shape", "64,x"], "expected comma-separated integers"),
        (["--kernel", "gemv", "--shape", "64"], r"1 size\(s\) given, expected 2"),
        (["--kernel", "conv", "--shape", "64"], "invalid choice: 'conv'"),
        (["--kernel", "va", "--shape", "64", "--backend", "aim"], r"AiM cannot run va \(models"),
    ],
)
def test_tune_refusals(extra, message, capsys) -> None:
    rc, _, err = run_cli(capsys, "tune", *extra)
    assert rc != 0 and re.search(message, err), err


def test_tune_batched_red(tmp_path: Path, capsys) -> None:
    cfg = small_backend(tmp_path)
    rc, out, err = run_cli(capsys, "tune", "--kernel", "batched-red", "--shape", "2,1,1024",
                           "--backend", str(cfg), "--json")  # fmt: skip
    assert rc == 0, err
    r = json.loads(out)
    assert r["dimension_sets"] == [["r0", "A0"], ["r1", "A1"], ["A2"]]
    assert r["default"]["draft"] == "[2, 1, A0^b] [1, 1, A1^m] [1, 8, A2^n]"
    assert r["speedup"]["over_default"] >= 1.0
    rc, _, err = run_cli(capsys, "tune", "--kernel", "batched-va", "--shape", "2,64",
                         "--backend", "attacc")  # fmt: skip
    assert rc == 2 and "kernel batched-va has no group lowering on back end attacc" in err


def test_tune_reports_a_default_that_cannot_run(capsys) -> None:
    """RED 4096 x 4096 on hbm-pim: the default puts all rows in one group (4 x 2 units), a
    unit's share needs more than the 4,096 PIM rows; DCC's mapping runs."""
    rc, out, _ = run_cli(capsys, "tune", "--kernel", "red", "--shape", "4096,4096",
                         "--budget", "20", "--verify", "2")  # fmt: skip
    assert rc == 0
    assert "default (DCC V)  cannot run: [1, 4, A0^m] [1, 2, A1^n]: red: a unit's share" in out
    assert "speedup: - over default" in out


@pytest.mark.parametrize(
    "backend, kernel, sizes",
    [("attacc", DccKernel.QK, (2, 16, 64)), ("hbm-pim", DccKernel.SV, (4, 128, 64)),
     ("attacc", DccKernel.BATCHED_GEMV, (2, 16, 64)), ("hbm-pim", DccKernel.RED, (64, 512))],
)  # fmt: skip
def test_rule1_while_generating_keeps_the_same_drafts(backend, kernel, sizes) -> None:
    """Generating only the first of equivalent mappings (rule 1 while generating) leaves
    exactly the drafts rules 1-3 keep of the full compact generation, in the same order."""
    from pimphony.compiler.dcc.cost import kernel_nest
    from pimphony.compiler.dcc.schedule import dimension_sets, innermost_set, prune
    from pimphony.compiler.dcc.tune import compact_drafts

    cfg = load_backend(backend)
    nest = kernel_nest(kernel, sizes)
    sets = dimension_sets(nest)
    trips = [dict(nest.loops)[ds.mappings()[0][2].var] for ds in sets]
    full = list(compact_drafts(sets, trips, cfg.groups, cfg.cores_per_group))
    fewer = list(compact_drafts(sets, trips, cfg.groups, cfg.cores_per_group, rule1=True))
    assert len(fewer) < len(full)
    rule2 = {"simd": cfg.core.lanes, "vector_set": innermost_set(nest, sets)}
    assert (
        prune(fewer, **rule2)[0] == prune(full, **rule2)[0] == kernel_drafts(cfg, kernel, sizes)[0]
    )


def test_attn_drafts_are_those_attacc_runs() -> None:
    """ATTN on attacc: d only over a group's cores, heads and tokens over groups and cores
    (tokens over groups: the split softmax, combined by the host), and only shares the
    lowering accepts (tokens per core whole softmax-buffer entries, the round's heads' scores,
    results and statistics within the buffer, a shorter last token share too) are kept;
    every kept draft runs."""
    from pimphony.compiler.dcc.cost import group_share

    att = load_backend("attacc")
    kept, _ = kernel_drafts(att, DccKernel.ATTN, (4, 512, 64))
    assert kept and all(d[2].groups == 1 for d in kept)
    assert any(d[0].cores > 1 for d in kept)  # heads over a group's banks
    assert any(d[1].groups > 1 for d in kept)  # tokens over groups
    assert default_draft(att, DccKernel.ATTN, (4, 512, 64)) in kept
    for d in kept:
        share = group_share(att, DccKernel.ATTN, (4, 512, 64), d)
        assert share.sizes[1] == -(-512 // d[1].groups)
        assert share.partials == d[1].groups  # compaction keeps the fewest groups per share
        c = draft_cost(att, DccKernel.ATTN, (4, 512, 64), d)  # runs
        assert (c.host_s > 0) == (d[1].groups > 1)
    # 4,096 tokens fill the softmax buffer with one head's scores: no head split over cores
    # unless the tokens are split over groups too
    long, _ = kernel_drafts(att, DccKernel.ATTN, (4, 4096, 64))
    assert long and all(d[0].cores == 1 for d in long if d[1].groups == 1)
    with pytest.raises(DccError, match=r"splits d over 2 groups: a score needs all of d_h"):
        group_share(att, DccKernel.ATTN, (4, 512, 64), (
            Part(2, 1, "K0", 4, Index("h")), Part(1, 16, "K1", 512, Index("t")),
            Part(2, 4, "K2", 64, Index("d"))))  # fmt: skip


def test_attn_is_refused_without_a_softmax_unit(capsys) -> None:
    rc, _, err = run_cli(capsys, "tune", "--kernel", "attn", "--shape", "4,64,64")
    assert rc != 0
    assert "kernel attn cannot run on back end hbm-pim: it needs a softmax unit per group and " \
           "group.units = []" in err  # fmt: skip


def test_tune_attn_on_attacc(capsys) -> None:
    rc, out, _ = run_cli(capsys, "tune", "--kernel", "attn", "--shape", "4,256,64",
                         "--backend", "attacc")  # fmt: skip
    assert rc == 0, out
    assert "default (DCC V)" in out and "[4, 1, K0^h] [1, 16, K1^t] [1, 4, K2^d]" in out
