"""``pimphony dcc-lut`` (sim/experiments/dcc_lut.py) and the commands that read its table
(``tune --table [--extend]``, ``dcc-fig8 --table``): a small table filled offline is used
without a search, a shape it lacks is predicted by the offline predictor saved beside it
(searched with an older table without one) and (``--extend``) written back, a table or its
predictor is never overwritten without ``--force``, a stale or foreign table and a missing,
altered or mismatched predictor file are refused, each bad input with one line and exit
status 2."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from pimphony.compiler.dcc.cost import draft_cost
from pimphony.compiler.dcc.predictor import (
    FEATURE_DIGEST,
    FEATURE_NAMES,
    Entry,
    LookupTable,
    Predictor,
    kernel_drafts,
    model_path,
)
from pimphony.compiler.dcc.schedule import DccKernel
from pimphony.compiler.dcc.tune import default_draft
from pimphony.models.backends import load_backend
from pimphony.sim.analysis.dcc_shapes import FIGURE_BACKENDS, FIGURES, dcc_shapes
from pimphony.sim.analysis.dcc_table import backend_digest, backend_record, read_table
from pimphony.sim.cli import main
from pimphony.sim.experiments import dcc_fig8
from pimphony.sim.experiments.dcc_lut import ShapeSource, evaluation_shapes

from tests.helpers import run_cli
from tests.test_dcc_cost import small_backend

SHAPES = ("gemv:64,128", "gemv:64,256", "gemv:128,256", "va:512", "va:1024")


def _fill(capsys, backend: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    shapes = [a for s in SHAPES for a in ("--shape", s)]
    return run_cli(capsys, "dcc-lut", "--backend", backend, *shapes, "--per-shape", "20",
                   "--rounds", "50", "--out", out, *extra)  # fmt: skip


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> tuple[Path, Path]:
    """A table of five small shapes on a two-pseudo-channel hbm-pim (about two seconds)."""
    tmp = tmp_path_factory.mktemp("lut")
    backend = small_backend(tmp)
    out = tmp / "table.json"
    assert main(["dcc-lut", "--backend", str(backend), *[a for s in SHAPES for a in
                 ("--shape", s)], "--per-shape", "20", "--rounds", "50", "--out",
                 str(out)]) == 0  # fmt: skip
    return backend, out


@pytest.fixture
def table(filled, tmp_path) -> tuple[Path, Path]:
    """A copy of the filled table and its predictor file a test may change."""
    backend, out = filled
    shutil.copy(model_path(out), tmp_path / "table.model.ubj")
    return backend, Path(shutil.copy(out, tmp_path / "table.json"))


def _offline(out: Path) -> Predictor:
    table = LookupTable.load(out)
    return table.load_predictor(out)


def test_the_fill_writes_a_table_with_provenance_and_the_held_out_error(filled) -> None:
    backend, out = filled
    cfg = load_backend(backend)
    raw = json.loads(out.read_text())
    prov = raw["provenance"]
    assert prov["command"] == "pimphony dcc-lut"
    assert prov["backend"] == {"name": "hbm-pim-small", "sha256": backend_digest(cfg)}
    held = raw["predictor"]["holdout"]
    assert 0 < held["mape"] < 1 and set(held["per_kernel_mape"]) == {"gemv", "va"}
    assert len(held["test_shapes"]) == 2  # a fifth of each kernel's shapes, at least one
    assert raw["predictor"]["n_estimators"] == 50 and raw["predictor"]["per_shape"] == 20
    table = LookupTable.load(out)
    assert len(table) == len(SHAPES)
    for (name, k, sizes), e in table.entries.items():
        assert name == "hbm-pim-small" and e.origin == "offline"
        assert e.draft in kernel_drafts(cfg, k, sizes)  # one of the pruned drafts
        assert e.simulated_s == draft_cost(cfg, k, sizes, e.draft).total_s
        assert e.predicted_s > 0 and e.drafts == len(kernel_drafts(cfg, k, sizes))
    # the predictor that filled it, saved beside it and recorded by digest and feature layout
    model = out.with_name("table.model.ubj")
    assert raw["model"] == {"file": model.name, "format": "xgboost-ubj",
                            "sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
                            "features": len(FEATURE_NAMES),
                            "features_sha256": FEATURE_DIGEST}  # fmt: skip
    pred = table.load_predictor(out)
    assert pred is table.offline and pred.info == raw["predictor"]
    for (_, k, sizes), e in table.entries.items():  # the saved predictor fills the same table
        assert pred.best(cfg, k, sizes) == (e.draft, pytest.approx(e.predicted_s), e.drafts)


def test_workers_fill_the_same_table(filled, tmp_path) -> None:
    """A local Ray of two workers labelling, then filling, the shapes (``sim.parallel``;
    this test starts Ray) gives the entries and the predictor one worker gives."""
    backend, out = filled
    again = tmp_path / "table.json"
    assert main(["dcc-lut", "--backend", str(backend), *[a for s in SHAPES for a in
                 ("--shape", s)], "--per-shape", "20", "--rounds", "50", "--out",
                 str(again), "--workers", "2"]) == 0  # fmt: skip
    assert LookupTable.load(again).entries == LookupTable.load(out).entries
    raw, one = json.loads(again.read_text()), json.loads(out.read_text())
    held, held_one = raw["predictor"]["holdout"], one["predictor"]["holdout"]
    for key in ("mape", "per_kernel_mape", "test_shapes", "test_samples"):
        assert held[key] == held_one[key]
    assert raw["model"]["sha256"] == one["model"]["sha256"]
    assert raw["provenance"]["options"]["workers"] == 2


def test_a_table_is_not_overwritten_without_force(capsys, table) -> None:
    backend, out = table
    before = out.read_text()
    rc, _, err = _fill(capsys, backend, out)
    assert rc == 2 and "pass --force" in err and out.read_text() == before
    rc, text, _ = _fill(capsys, backend, out, "--force", "--seed", "1")
    assert rc == 0 and f"table: {out}" in text
    assert f"predictor: {model_path(out)} (sha256 " in text
    assert json.loads(out.read_text())["provenance"]["options"]["seed"] == 1


def test_a_predictor_file_is_not_overwritten_without_force(capsys, table) -> None:
    backend, out = table
    other = out.with_name("other.json")
    model = shutil.copy(model_path(out), model_path(other))
    before = Path(model).read_bytes()
    rc, _, err = _fill(capsys, backend, other)
    assert rc == 2 and f"{model} exists; pass --force" in err and not other.exists()
    assert Path(model).read_bytes() == before
    rc, _, err = _fill(capsys, backend, other, "--force", "--seed", "1")
    assert rc == 0, err
    raw = json.loads(other.read_text())
    assert raw["model"]["file"] == "other.model.ubj"
    assert raw["model"]["sha256"] == hashlib.sha256(Path(model).read_bytes()).hexdigest()


def _forbid_search(monkeypatch, why: str) -> None:
    """Make ``tune``'s searches fail with ``why``: a run that passes did not search."""
    import pimphony.sim.tune as sim_tune

    def no_search(*args, **kwargs):
        raise AssertionError(why)

    monkeypatch.setattr(sim_tune, "predicted_search", no_search)
    monkeypatch.setattr(sim_tune, "search", no_search)


def test_tune_takes_a_tabled_draft_without_searching(capsys, table, monkeypatch) -> None:
    backend, out = table
    _forbid_search(monkeypatch, "searched a shape the table holds")
    report = out.parent / "tune.json"
    rc, text, err = run_cli(capsys, "tune", "--kernel", "gemv", "--shape", "64,256",
                            "--backend", backend, "--table", out, "--out", report)  # fmt: skip
    assert rc == 0, err
    assert f"from table {out} (offline)" in text and "not searched" in text
    entry = LookupTable.load(out).get("hbm-pim-small", "gemv", (64, 256))
    r = json.loads(report.read_text())
    assert r["chosen"]["draft"] == " ".join(map(str, entry.draft))
    assert r["chosen"]["total_us"] == pytest.approx(entry.simulated_s * 1e6)
    assert r["compute_centric"] is None and r["drafts"]["simulated"] == 1
    t = r["table"]
    assert (t["hit"], t["origin"], t["extended"], t["path"]) == (True, "offline", False, str(out))
    assert len(t["sha256"]) == 64 and t["backend_sha256"] == backend_digest(load_backend(backend))
    assert r["provenance"]["options"]["table"] == str(out)


def test_tune_predicts_a_new_shape_with_the_saved_predictor(capsys, table, monkeypatch) -> None:
    backend, out = table
    _forbid_search(monkeypatch, "searched a shape the table's predictor predicts")
    before, model = out.read_text(), model_path(out).read_bytes()
    args = ("tune", "--kernel", "gemv", "--shape", "96,256", "--backend", backend, "--table", out)
    rc, text, err = run_cli(capsys, *args)
    assert rc == 0, err
    assert f"draft: not in table {out}: predicted by the table's offline predictor, the best " \
        "of 45 pruned drafts; not searched" in text  # fmt: skip
    assert "recorded" not in text and out.read_text() == before  # no --extend: unchanged
    cfg = load_backend(backend)
    draft, predicted, n = _offline(out).best(cfg, "gemv", (96, 256))
    rc, text, _ = run_cli(capsys, *args, "--extend", "--json")
    assert rc == 0
    r = json.loads(text)
    chosen = r["chosen"]
    assert chosen["draft"] == " ".join(map(str, draft))
    assert chosen["total_us"] == pytest.approx(draft_cost(cfg, "gemv", (96, 256), draft).total_s
                                               * 1e6)  # fmt: skip
    assert r["table"]["new_shape"] == "predicted" and r["table"]["extended"]
    assert r["predictor"]["model_sha256"] == hashlib.sha256(model).hexdigest()
    raw = json.loads(out.read_text())
    old = json.loads(before)
    assert raw["entries"][:-1] == old["entries"] and raw["model"] == old["model"]
    new = raw["entries"][-1]
    assert (new["backend"], new["kernel"], new["sizes"], new["origin"], new["drafts"]) == (
        "hbm-pim-small", "gemv", [96, 256], "runtime", n
    )  # fmt: skip
    assert new["predicted_s"] == pytest.approx(predicted)
    assert new["simulated_s"] == pytest.approx(chosen["total_us"] * 1e-6)
    assert model_path(out).read_bytes() == model  # the predictor is not rewritten
    names = sorted(p.name for p in out.parent.iterdir())
    assert names == ["table.json", "table.model.ubj"]  # atomic, no temp
    # now a run-time entry: looked up, not predicted again
    monkeypatch.setattr(Predictor, "best", lambda *a, **k: 1 / 0)
    rc, text, _ = run_cli(capsys, *args)
    assert rc == 0 and f"from table {out} (runtime)" in text


def test_an_older_table_without_a_predictor_searches_new_shapes(capsys, table) -> None:
    backend, out = table
    raw = json.loads(out.read_text())
    del raw["model"]  # as dcc-lut wrote tables before it saved the predictor
    out.write_text(json.dumps(raw))
    model_path(out).unlink()
    args = ("tune", "--kernel", "gemv", "--shape", "96,256", "--backend", backend, "--table", out)
    rc, text, err = run_cli(capsys, *args)
    assert rc == 0, err
    assert f"gemv (96, 256) is not in {out}: searched (the table has no saved predictor: an " \
        "older dcc-lut file; refill it to predict new shapes)" in text  # fmt: skip
    rc, text, _ = run_cli(capsys, *args, "--extend", "--json")
    assert rc == 0 and json.loads(text)["table"]["new_shape"] == "searched"
    chosen = json.loads(text)["chosen"]
    back = json.loads(out.read_text())
    assert back["model"] is None and len(back["entries"]) == len(SHAPES) + 1
    new = back["entries"][-1]
    assert (new["sizes"], new["origin"], new["predicted_s"]) == ([96, 256], "runtime", None)
    assert new["simulated_s"] == pytest.approx(chosen["total_us"] * 1e-6)
    rc, text, _ = run_cli(capsys, *args)  # the written-back older table reads again
    assert rc == 0 and f"from table {out} (runtime)" in text


def _break(out: Path, how: str) -> None:
    """Spoil a copied table's predictor ``how``."""
    raw = json.loads(out.read_text())
    model = model_path(out)
    if how == "missing":
        model.unlink()
    elif how == "altered":
        model.write_bytes(model.read_bytes()[:-1] + b"!")
    elif how == "not-xgboost":  # bytes and digest agree, but XGBoost cannot read them
        model.write_bytes(b"{not a model")
        raw["model"]["sha256"] = hashlib.sha256(b"{not a model").hexdigest()
    elif how == "digest":
        raw["model"]["sha256"] = "0" * 64
    elif how == "layout":
        raw["model"]["features"], raw["model"]["features_sha256"] = 99, "f" * 64
    elif how == "path":
        raw["model"]["file"] = "../table.model.ubj"
    out.write_text(json.dumps(raw))


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("missing", r"table.model.ubj: cannot read it \(No such file or directory\); refill"),
        ("altered", r"table.model.ubj: its bytes digest to \w{12}, the table records \w{12}: "
                    "not the model the table was filled with$"),
        ("not-xgboost", r"table.model.ubj: not an XGBoost model XGBoost \S+ reads$"),
        ("digest", r"its bytes digest to \w{12}, the table records 000000000000"),
        ("layout", r"table.model.ubj: trained on 99 features \(layout ffffffffffff\), this code "
                   rf"has {len(FEATURE_NAMES)} \(layout {FEATURE_DIGEST[:12]}\); refill the table"),
        ("path", r"model.file = '../table.model.ubj': a file name beside the table$"),
    ],
)  # fmt: skip
def test_a_bad_predictor_file_is_refused(capsys, table, how, message) -> None:
    backend, out = table
    _break(out, how)
    rc, _, err = run_cli(capsys, "tune", "--kernel", "gemv", "--shape", "96,256", "--backend",
                         backend, "--table", out)  # fmt: skip
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"pimphony tune: error: {'' if how == 'path' else '--table '}{out}")
    assert "Traceback" not in err and re.search(message, err.strip()), err


def _stale(backend: Path) -> Path:
    path = backend.with_name("hbm-pim-small-slow.toml")
    path.write_text(backend.read_text() + "[core]\nfreq_mhz = 250\n")
    return path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--table", "{dir}/none.json"], r"--table \S+none.json: no such file"),
        (["--table", "{dir}/bad.json"], r"bad.json: not a lookup table \(Expecting"),
        (["--table", "{table}", "--backend", "hbm-pim"],
         r"holds drafts for back end hbm-pim-small, not hbm-pim$"),
        (["--table", "{table}", "--backend", "{stale}"],
         r"is stale: filled for back end hbm-pim-small with digest \w{12}, the preset's values "
         r"now digest to \w{12}; refill"),
        (["--extend"], "--extend records a searched shape in a table: give --table FILE$"),
        (["--table", "{table}", "--placement", "every-call"],
         "--table holds drafts chosen with weights / KV resident"),
        (["--table", "{dir}/foreign.json"], r"provenance.backend \(name, sha256\) is missing"),
    ],
)  # fmt: skip
def test_tune_table_refusals(capsys, table, argv, message) -> None:
    backend, out = table
    (out.parent / "bad.json").write_text("{not json")
    LookupTable({"command": "hand-made"}).save(out.parent / "foreign.json")
    subs = {"dir": out.parent, "table": out, "stale": _stale(backend)}
    argv = [a.format(**subs) for a in argv]
    if "--backend" not in argv:
        argv += ["--backend", str(backend)]
    rc, _, err = run_cli(capsys, "tune", "--kernel", "gemv", "--shape", "64,256", *argv)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("pimphony tune: error: ") and "Traceback" not in err
    assert re.search(message, err.strip()), err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shape", "conv:64"], r"'conv:64': expected KERNEL:SIZES"),
        (["--shape", "gemv:64"], r"kernel gemv: 1 size\(s\) given, expected 2"),
        (["--backend", "attacc", "--shape", "va:512"],
         r"kernel va has no group lowering on back end attacc"),
        (["--backend", "hbm-pim", "--from", "dcc-fig8"], "no shapes to fill on back end hbm-pim"),
        (["--shape", "gemv:64,64", "--kernel", "gemv"], "--shape replaces the evaluation's"),
        (["--holdout", "1.5", "--shape", "gemv:64,64"], r"--holdout 1.5: a share"),
        (["--kernel", "conv"], r"invalid choice: 'conv'"),
    ],
)  # fmt: skip
def test_dcc_lut_refusals(capsys, tmp_path, argv, message) -> None:
    if "--backend" not in argv:
        argv = [*argv, "--backend", str(small_backend(tmp_path))]
    rc, _, err = run_cli(capsys, "dcc-lut", *argv, "--out", tmp_path / "t.json")
    assert rc == 2 and re.search(message, err), err
    assert "Traceback" not in err and not (tmp_path / "t.json").exists()


def test_the_default_shapes_are_the_evaluations() -> None:
    figs = {
        (DccKernel(k), tuple(s))
        for fig, backends in FIGURE_BACKENDS.items()
        if "attacc" in backends
        for _, k, s, placement, _ in FIGURES[fig]("attacc")
        if placement == "resident"
    }
    fig8 = {(DccKernel(k), s) for k, s in dcc_shapes()}
    shapes = evaluation_shapes("attacc")
    assert set(shapes) == figs | fig8 and len(shapes) == len(set(shapes))
    assert (DccKernel.BATCHED_GEMV, (1, 5120, 5120)) in shapes  # GPT3-13B's projection
    assert (DccKernel.RED, (4096, 2048)) not in shapes  # Fig. 2's, rearranged every call
    assert evaluation_shapes("attacc", [ShapeSource.DCC_FIG8]) == [
        (DccKernel(k), s) for k, s in dcc_shapes()
    ]
    assert {k for k, _ in evaluation_shapes("attacc", kernels=[DccKernel.ATTN])} == {"attn"}
    hbm = evaluation_shapes("hbm-pim")
    assert hbm and evaluation_shapes("hbm-pim", [ShapeSource.DCC_FIG8]) == []
    assert {k for k, _ in hbm} == {"qk", "batched-red", "batched-va", "batched-relu"}


def test_fig8_dcc_shapes_are_the_shapes_its_systems_ask_for(monkeypatch) -> None:
    import pimphony.sim.tune as sim_tune

    asked = []

    def fake(backend, kernel, sizes, **kwargs):
        asked.append((kernel, tuple(sizes)))
        return {"chosen": {"total_us": 1.0}}

    monkeypatch.setattr(sim_tune, "tune_report", fake)
    monkeypatch.setattr(dcc_fig8.PimTimes, "default", lambda self, k, s: 1e-6)
    args = (("gpt3-13b-4k",), (2,), ((128, 300),))
    dcc_fig8.fig8(*args, points=3)
    assert sorted(set(asked)) == sorted(dcc_shapes(*args, points=3))


def test_fig8_takes_tabled_drafts_without_searching(monkeypatch) -> None:
    import pimphony.sim.tune as sim_tune

    monkeypatch.setattr(sim_tune, "predicted_search", lambda *a, **k: 1 / 0)
    cfg = load_backend("attacc")
    sizes = (4, 256, 64)
    draft = default_draft(cfg, DccKernel.ATTN, sizes)
    table = LookupTable()
    table.entries[cfg.name, DccKernel.ATTN, sizes] = Entry(draft, None, 1, "offline")
    pim = dcc_fig8.PimTimes(cfg, table=table)
    assert pim.dcc("attn", sizes) == pytest.approx(
        draft_cost(cfg, DccKernel.ATTN, sizes, draft).total_s
    )
    assert pim.looked_up == {"table": 1, "predicted": 0, "searched": 0}


def test_fig8_command_reads_the_table_and_refuses_a_foreign_one(
    capsys, tmp_path, monkeypatch
) -> None:
    import pimphony.sim.tune as sim_tune

    cfg = load_backend("attacc")
    table = LookupTable({"backend": backend_record(cfg)})
    path = table.save(tmp_path / "attacc.json")

    def fake(backend, kernel, sizes, table=None, **kwargs):  # a table holds attention only
        looked_up = {} if table is None else {"table": {"hit": kernel == "attn"}}
        return {"chosen": {"total_us": 1.0}, **looked_up}

    monkeypatch.setattr(sim_tune, "tune_report", fake)
    monkeypatch.setattr(dcc_fig8.PimTimes, "default", lambda self, k, s: 1e-6)
    out = ("--report", tmp_path / "r.json", "--plot", tmp_path / "p.png")
    run = ("dcc-fig8", "--models", "gpt3-13b-4k", "--batches", "1", "--runs", "128:128",
           "--points", "2", *out)  # fmt: skip
    rc, out, err = run_cli(capsys, *run, "--table", path)
    assert rc == 0, err
    shapes = dcc_shapes(("gpt3-13b-4k",), (1,), ((128, 128),), points=2)
    attn = sum(k == "attn" for k, _ in shapes)
    assert f"DCC drafts: {attn} shape(s) from table {path} (not searched), " in out
    prov = json.loads((tmp_path / "r.json").read_text())["provenance"]
    assert prov["table"]["path"] == str(path) and len(prov["table"]["sha256"]) == 64
    assert prov["table"]["shapes"] == {
        "table": attn,
        "predicted": 0,
        "searched": len(shapes) - attn,
    }
    # without --table: no option, no line (reports as before the option existed)
    rc, out, _ = run_cli(capsys, *run, "--force")
    prov = json.loads((tmp_path / "r.json").read_text())["provenance"]
    assert rc == 0 and "DCC drafts" not in out and "table" not in prov["options"]
    # a table of another back end is refused before any work
    other = LookupTable({"backend": backend_record(load_backend("hbm-pim"))})
    rc, _, err = run_cli(capsys, *run, "--force", "--table", other.save(tmp_path / "h.json"))
    assert rc == 2 and "holds drafts for back end hbm-pim, not attacc" in err


def test_holdout_zero_and_single_shapes_hold_nothing_out(capsys, tmp_path) -> None:
    backend = small_backend(tmp_path)
    common = ("dcc-lut", "--backend", backend, "--per-shape", "5", "--rounds", "5")
    rc, out, _ = run_cli(capsys, *common, "--shape", "va:512", "--shape", "va:1024",
                         "--holdout", "0", "--out", tmp_path / "a.json")  # fmt: skip
    assert rc == 0 and "held-out error: none (--holdout 0: nothing held out)" in out
    rc, out, _ = run_cli(capsys, *common, "--shape", "va:512", "--out", tmp_path / "b.json")
    assert rc == 0 and "none (fewer than two shapes of any kernel: nothing held out)" in out
    assert json.loads((tmp_path / "b.json").read_text())["predictor"]["holdout"]["mape"] is None


def test_fig8_predicts_a_shape_the_table_lacks(table, monkeypatch) -> None:
    import pimphony.sim.tune as sim_tune

    backend, out = table
    monkeypatch.setattr(sim_tune, "predicted_search", lambda *a, **k: 1 / 0)
    cfg = load_backend(backend)
    monkeypatch.setattr(sim_tune, "load_backend", lambda name: cfg)  # PimTimes passes the name
    pim = dcc_fig8.PimTimes(cfg, table=read_table(out, cfg))
    draft = _offline(out).best(cfg, "gemv", (96, 256))[0]
    assert pim.dcc("gemv", (96, 256)) == pytest.approx(
        draft_cost(cfg, DccKernel.GEMV, (96, 256), draft).total_s
    )
    assert pim.looked_up == {"table": 0, "predicted": 1, "searched": 0}
    assert pim.table.get(cfg.name, "gemv", (96, 256)) is None  # not recorded without --extend
