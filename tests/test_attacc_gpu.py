"""A GPU with AttAcc PIM (sim/systems/attacc_gpu): DCC Fig. 8's phases composed as each system
places them, and the four AttAcc rows of the system registry (the same numbers two ways)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from pimphony.compiler.llm import LayerOp, gemv_shapes, load_model
from pimphony.models.backends import load_backend
from pimphony.sim.analysis.dcc_table import read_table, table_digest
from pimphony.sim.systems.attacc_gpu import (
    FIG8_SPECS,
    AttAccReport,
    Fig8Step,
    Phase,
    PimTimes,
    fc_default_draft,
    kv_geometry,
    kv_write_seconds,
    step_energy,
    step_phases,
)
from pimphony.sim.systems.base import SystemConfig, SystemKind
from pimphony.sim.systems.costs import xpu_prefill_seconds
from pimphony.sim.systems.gpu import GpuSetup, run_gpu_decode
from pimphony.sim.systems.registry import FIG8_ROWS, SYSTEMS, make_system
from pimphony.sim.systems.setup import DecodeError

from tests.helpers import run_cli

SPEC = load_model("gpt3-13b-4k")
CFG = load_backend("attacc")
HOST = CFG.host()


class FakePim(PimTimes):
    """Closed-form kernel times: default 1 ms + 1 ns per size unit, DCC half of it."""

    def __init__(self) -> None:
        super().__init__(CFG)
        self.calls: list[tuple[str, tuple[int, ...], bool]] = []

    def default(self, kernel, sizes):
        self.calls.append((kernel, sizes, False))
        return 1e-3 + 1e-9 * int(np.prod(sizes))

    def dcc(self, kernel, sizes):
        self.calls.append((kernel, sizes, True))
        return 0.5 * (1e-3 + 1e-9 * int(np.prod(sizes)))


def _gpu_ops(batch, context):
    r = run_gpu_decode(GpuSetup(SPEC, HOST, 1, (context,) * batch, check_capacity=False))
    return {k: v["seconds"] for k, v in r.ops.items()}, r


def test_gpu_phases_are_the_gpu_step_ops():
    ops, report = _gpu_ops(4, 1000)
    got = step_phases(Fig8Step(SPEC, HOST, 4, 1000, FIG8_SPECS[SystemKind.GPU], None))
    L = SPEC.layers
    assert got[Phase.ATTENTION] == pytest.approx(L * ops["attention"])
    assert got[Phase.QKV] == pytest.approx(L * ops["qkv"])
    assert got[Phase.PROJECTION] == pytest.approx(L * ops["proj"])
    assert got[Phase.FFN] == pytest.approx(L * (ops["ffn1"] + ops["ffn2"]))
    # one GPU: no all-reduce, so the phases add up to the GPU step
    assert sum(got.values()) == pytest.approx(report.step_seconds)


def test_attacc_systems_compose_by_hand():
    pim = FakePim()
    b, ctx = 4, 1000
    ops, _ = _gpu_ops(b, ctx)
    L, H, d = SPEC.layers, SPEC.heads, SPEC.head_dim
    kv_s = 2 * b * SPEC.kv_heads * d * 2 / (CFG.host_gbps * 1e9)
    attn = 1e-3 + 1e-9 * (b * H * 1024 * d)  # 1000 tokens padded to 4 x 256
    shapes = gemv_shapes(SPEC)  # (d_out, d_in) = (N, K) of a GEMM on one GPU

    base = step_phases(Fig8Step(SPEC, HOST, b, ctx, FIG8_SPECS[SystemKind.ATTACC_BASE], pim))
    assert base[Phase.ATTENTION] == pytest.approx(L * (attn + kv_s))
    assert base[Phase.QKV] == pytest.approx(L * ops["qkv"])  # stays on the GPU
    assert base[Phase.FFN] == pytest.approx(L * (ops["ffn1"] + ops["ffn2"]))

    base_dcc = step_phases(
        Fig8Step(SPEC, HOST, b, ctx, FIG8_SPECS[SystemKind.ATTACC_BASE_DCC], pim)
    )
    assert base_dcc[Phase.ATTENTION] == pytest.approx(L * (attn / 2 + kv_s))
    n, k = shapes[LayerOp.QKV]
    assert base_dcc[Phase.QKV] == pytest.approx(L * min(ops["qkv"], (1e-3 + 1e-9 * b * n * k) / 2))

    full = step_phases(Fig8Step(SPEC, HOST, b, ctx, FIG8_SPECS[SystemKind.ATTACC_FULL], pim))
    ffn = 0.0
    for op in (LayerOp.FFN1, LayerOp.FFN2):
        n, k = shapes[op]
        t_gpu, t_pim = ops[str(op)], 1e-3 + 1e-9 * b * n * k
        ffn += t_gpu * t_pim / (t_gpu + t_pim)
    assert full[Phase.FFN] == pytest.approx(L * ffn)
    assert full[Phase.OTHER] == base[Phase.OTHER] == pytest.approx(
        L * sum(v for key, v in ops.items() if key not in ("attention", "qkv", "proj", "ffn1",
                                                            "ffn2"))
    )  # fmt: skip


def test_fc_default_spreads_the_weight_rows_over_every_channel():
    d = fc_default_draft(CFG, (1, 5120, 5120))
    assert [(p.groups, p.cores) for p in d] == [(1, 1), (CFG.groups, 16), (1, 4)]
    assert CFG.groups == 80  # 5 devices x 16 channels (DCC V)


def test_energy_refuses_a_host_without_an_energy_model():
    import dataclasses

    from pimphony.sim.systems.attacc_gpu import step_energy

    bare = dataclasses.replace(HOST, energy=None)
    with pytest.raises(DecodeError, match="no \\[energy\\] section"):
        step_energy(Fig8Step(SPEC, bare, 1, 129, FIG8_SPECS[SystemKind.GPU], None))
    with pytest.raises(DecodeError, match="without an energy preset"):
        PimTimes(CFG).energy("attn", (40, 256, 128), False)


# --- the registry's rows: a decode step of ``lengths`` is Fig. 8's step at the longest one

SMALL = load_model("llm-1.8b")


def fig8_table(path, model=SMALL, batches=(1, 2, 3), contexts=(256, 512)):
    """A lookup table file holding every DCC shape of ``model``'s steps at ``batches`` and a
    longest context up to each of ``contexts`` (the back end's default drafts; FC GEMMs:
    :func:`fc_default_draft`), so that the ``+dcc`` rows search nothing (a search takes
    ~15 s per shape)."""
    from pimphony.compiler.dcc.predictor import Entry, LookupTable
    from pimphony.compiler.dcc.schedule import DccKernel
    from pimphony.compiler.dcc.tune import default_draft
    from pimphony.sim.analysis.dcc_shapes import attention_sizes, fc_sizes
    from pimphony.sim.analysis.dcc_table import backend_record

    table = LookupTable({"backend": backend_record(CFG)})
    for b in batches:
        k = DccKernel.ATTN
        for t in contexts:
            sizes = attention_sizes(model, b, t, CFG)
            table.entries[CFG.name, k, sizes] = Entry(
                default_draft(CFG, k, sizes), None, 1, "offline"
            )
        for sizes in fc_sizes(model, b).values():
            draft = fc_default_draft(CFG, sizes)
            table.entries[CFG.name, DccKernel.BATCHED_GEMV, sizes] = Entry(
                draft, None, 1, "offline"
            )
    return table.save(path)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    return fig8_table(tmp_path_factory.mktemp("lut") / "lut.json")


@pytest.fixture
def system(table):
    """The row of ``kind`` on llm-1.8b (the ``+dcc`` rows' drafts from :func:`table`)."""

    def make(kind: SystemKind, **options):
        dcc = {"table": table} if FIG8_SPECS[kind].dcc else {}
        return make_system(kind, SystemConfig(SMALL, **dcc, **options))

    return make


def test_the_rows_are_the_registry_rows_of_fig8s_attacc_systems():
    assert list(FIG8_ROWS) == [k for k in FIG8_SPECS if k != SystemKind.GPU]
    for kind, row in FIG8_ROWS.items():
        assert SYSTEMS[kind] is row
        assert FIG8_SPECS[kind].attention_on_pim


@pytest.mark.parametrize("kind", list(FIG8_ROWS))
def test_a_rows_step_is_fig8s_step_phases(kind, table):
    """The row's decode step at a uniform context is Fig. 8's step_phases, phase by phase,
    on kernel times of its own (DCC's drafts read from the same table)."""
    system = make_system(kind, SystemConfig(SMALL, table=table))
    step = system.step((300, 300, 300))
    pim = PimTimes(CFG, table=read_table(table, CFG))
    want = step_phases(Fig8Step(SMALL, HOST, 3, 300, FIG8_SPECS[kind], pim))
    assert step.report.phases == {str(p): t for p, t in want.items()}
    assert step.seconds == sum(want.values()) == system.cycles((300, 300, 300)).seconds
    assert step.tokens_per_s == 3 / step.seconds
    # energy: Fig. 8's step_energy of the same step
    joules = step_energy(Fig8Step(SMALL, HOST, 3, 300, FIG8_SPECS[kind], system.times))
    assert step.report.energy["total_j"] == pytest.approx(sum(joules.values()), rel=1e-12)
    assert step.report.energy["joules_per_token"] == pytest.approx(sum(joules.values()) / 3)


def test_mixed_lengths_are_padded_to_the_longest(system):
    system = system(SystemKind.ATTACC_BASE)
    mixed = system.step((100, 700, 300))
    uniform = system.step((700, 700, 700))
    assert mixed.seconds == uniform.seconds == system.cycles((300, 100, 700)).seconds
    assert mixed.report.context == 700 and mixed.report.batch == 3
    # the KV held is each request's own
    assert mixed.report.memory["kv_used_bytes"] == 1100 * SMALL.kv_bytes_per_token
    shorter = system.step((100, 100, 100))
    assert shorter.report.phases["attention"] < mixed.report.phases["attention"]
    assert shorter.report.phases["ffn"] == mixed.report.phases["ffn"]


def test_placement_and_devices_follow_the_spec(system):
    base = system(SystemKind.ATTACC_BASE).step((512,)).report
    full = system(SystemKind.ATTACC_FULL).step((512,)).report
    assert base.placement == {
        "attention": "pim", "qkv": "gpu", "projection": "gpu", "ffn": "gpu", "other": "gpu",
    }  # fmt: skip
    assert full.placement["ffn"] == "gpu+pim" and full.phases["ffn"] < base.phases["ffn"]
    for r in (base, full):
        assert r.devices["pim"]["busy_seconds"] == pytest.approx(
            sum(t for p, t in r.phases.items() if "pim" in r.placement[p])
        )
        assert r.step_seconds == pytest.approx(sum(r.phases.values()), rel=1e-12)


def test_kv_lives_in_the_backends_pim_memory(system):
    geom = kv_geometry(CFG)
    assert geom.total_bytes == CFG.system.devices * CFG.system.device_bytes == 80 * 2**30
    assert geom.chunk_bytes == 2**20  # one row in every bank of a device: PIMphony's 1 MiB
    system = system(SystemKind.ATTACC_BASE)
    pool = system.pool()
    assert pool.stats().capacity_bytes == geom.total_bytes  # the weights are on the GPU
    chunks = -(-SMALL.context_window * SMALL.kv_bytes_per_token // 2**20)  # per request
    n = 0
    while pool.admit(n, SMALL.context_window, raise_on_oom=False):
        n += 1
    assert n == geom.num_chunks // chunks
    pool.release(0)  # a released request's chunks take the next one
    assert pool.admit(n, SMALL.context_window, raise_on_oom=False)
    got = system.fill_batch([SMALL.context_window] * (n + 5))
    assert len(got) == n
    with pytest.raises(DecodeError, match="candidate requests fit"):
        system.fill_batch([100, 100])


def test_a_batch_past_the_pim_memory_is_refused_unless_asked():
    big = load_model("llama-33b-4k")
    lengths = (4096,) * 64  # 64 x 4,096 tokens x 1.6 MB = 400+ GiB of KV
    system = make_system(SystemKind.ATTACC_BASE, SystemConfig(big))
    with pytest.raises(DecodeError, match="does not fit 5 PIM device"):
        system.step(lengths)
    lax = make_system(SystemKind.ATTACC_BASE, SystemConfig(big, check_capacity=False))
    assert not lax.step(lengths).report.memory["fits"]


def test_prefill_runs_on_the_gpu_then_writes_the_kv(system):
    system = system(SystemKind.ATTACC_FULL)
    kv = 500 * SMALL.kv_bytes_per_token
    want = xpu_prefill_seconds(HOST, SMALL, [300, 200]) + kv_write_seconds(CFG, kv)
    assert system.prefill([300, 200]) == want > 0


def test_decode_report_digest_and_text_name_every_input(tmp_path, capsys, table):
    out = tmp_path / "r.json"
    rc, stdout, err = run_cli(
        capsys, "decode", "--system", "attacc-base+dcc", "--model", "llm-1.8b", "--context", 128,
        "--table", table, "--verify", 3, "--json", "--report", out, "--plot", tmp_path / "r.png",
    )  # fmt: skip
    assert rc == 0, err
    report = json.loads(stdout)
    assert set(report) == {f.name for f in dataclasses.fields(AttAccReport)}
    assert report["dcc"]["drafts"] == {"table": 3, "predicted": 0, "searched": 0}  # attn, qkv, proj
    prov = report["provenance"]
    assert prov["backend"]["name"] == "attacc" and prov["gpu"]["name"] == "a100-80gb"
    assert prov["dcc"]["budget"] == 300 and prov["dcc"]["verify"] == 3  # Fig. 8's, as given
    assert prov["dcc"]["table"] == {"path": str(table), "sha256": table_digest(table)}
    # other rows' options are not recorded; this row's are, as given
    assert {"tp", "preset", "gpu", "xpu", "energy"}.isdisjoint(prov["options"])
    assert prov["options"]["verify"] == 3 and "budget" not in prov["options"]
    row = SYSTEMS[SystemKind.ATTACC_BASE_DCC]
    system = make_system(SystemKind.ATTACC_BASE_DCC, SystemConfig(SMALL, table=table, verify=3))
    assert prov["inputs_sha256"] == row.digest(system.setup((128,)))
    for other in ({"table": table}, {"table": table, "verify": 3, "budget": 9}):
        again = make_system(SystemKind.ATTACC_BASE_DCC, SystemConfig(SMALL, **other))
        assert row.digest(again.setup((128,))) != prov["inputs_sha256"]
    assert row.stem(system.setup((128,))).startswith("llm-1.8b-attacc-base-dcc-B1-T128-attacc-")
    text = row.text(system.step((128,)).report)
    assert "  attention " in text and "on pim" in text
    assert "DCC drafts (budget 300, verify 3): 3 from the table, 0 predicted, 0 searched" in text


def test_a_plain_row_refuses_dccs_options(capsys):
    rc, _, err = run_cli(capsys, "decode", "--system", "attacc-base", "--budget", "5", "--json")
    assert rc != 0
    assert "--system attacc-base does not use --budget (--system attacc-base+dcc)" in err
