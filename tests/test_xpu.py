"""Compute devices (``models/xpu_config.py``) and the xPU cost model (``models/xpu.py``).

Every expected number is computed by hand in the test (or in ``docs/xpu.md``'s worked example,
which these tests check line by line).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pimphony.models.xpu import (
    VECTOR_OPS,
    Bound,
    Traffic,
    VectorOp,
    XpuError,
    attention_combine_cost,
    attention_cost,
    batched_cost,
    gemm_cost,
    gemm_traffic,
    gemv_cost,
    ring_allreduce_seconds,
    vector_cost,
)
from pimphony.models.xpu_config import (
    KERNEL_COSTS_ENV,
    PRECISION_BYTES,
    XPU_DIR,
    XPU_FIELD_RANGES,
    KernelCosts,
    PeakTflops,
    Precision,
    XpuConfig,
    XpuConfigError,
    available_xpus,
    load_xpu,
    load_xpu_config,
)

from tests.helpers import drop_key, file_error, run_cli, set_key, write_toml

A100 = XPU_DIR / "a100-80gb.toml"
NEUPIMS = XPU_DIR / "neupims-npu.toml"
SHERPA = XPU_DIR / "pimsherpa-cpu.toml"


@pytest.fixture(scope="module")
def a100() -> XpuConfig:
    """The A100's roofline (its ``[kernel]`` costs are tested at the end of the file)."""
    return load_xpu("a100-80gb").roofline()


@pytest.fixture(scope="module")
def libra() -> XpuConfig:
    return load_xpu("librapim-npu")


@pytest.fixture(scope="module")
def neupims() -> XpuConfig:
    return load_xpu("neupims-npu")


# ------------------------------------------------------------------------------ the presets


def test_every_shipped_preset_loads_and_is_named_after_its_file():
    names = available_xpus()
    assert names == sorted(names)
    assert {
        "neupims-npu",
        "librapim-npu",
        "a100-80gb",
        "h100-sxm",
        "cent-pnm",
        "pimsherpa-cpu",
        "lolpim-gpu-hbm",
        "lolpim-gpu-gddr6",
    } <= set(names)
    for name in names:
        dev = load_xpu(name)
        assert dev.name == name
        assert dev.peak_flops() > 0
        assert load_xpu(XPU_DIR / f"{name}.toml") == dev


_EXEMPT = {"name", "extends", "source", "kind"}


@pytest.mark.parametrize("name", available_xpus())
def test_every_preset_value_cites_a_source(name):
    """Each ``key = value`` line (but the identifying ones) carries a comment."""
    for line in (XPU_DIR / f"{name}.toml").read_text().splitlines():
        m = re.match(r"^(\w+)\s*=", line)
        if m and m.group(1) not in _EXEMPT:
            assert "#" in line, f"{name}: no source comment on {line!r}"


def test_preset_values_from_their_sources(a100, libra, neupims):
    # NVIDIA A100 datasheet (80GB SXM).
    assert a100.peak_flops() == 312e12
    assert a100.peak_flops("int8") == 624e12
    assert a100.bandwidth == 2039e9
    assert a100.capacity_bytes == 80 * 2**30
    assert (a100.links.host_gbps, a100.links.device_gbps) == (64.0, 600.0)
    # H100 SXM: datasheet sparse peaks halved.
    h100 = load_xpu("h100-sxm")
    assert h100.peak_flops("bf16") == pytest.approx(1979e12 / 2, rel=1e-3)
    assert h100.bandwidth == 3.35e12
    # PIMphony Table IV: 8 matrix units, 256 TFLOPS; CENT PNM 3 TFLOPS, 16 GB.
    assert neupims.peak_flops() == 256e12
    assert (neupims.systolic.arrays, neupims.systolic.rows, neupims.systolic.cols) == (8, 128, 128)
    assert neupims.capacity_bytes == 32 * 2**30
    cent = load_xpu("cent-pnm")
    assert (cent.peak_flops(), cent.capacity_bytes) == (3e12, 16 * 2**30)
    # LibraPIM Table 2: 8 arrays of 64 x 64, 8 vector units of 128 lanes; peak at 1 GHz.
    assert (libra.systolic.arrays, libra.systolic.rows, libra.systolic.cols) == (8, 64, 64)
    assert (libra.vector.units, libra.vector.lanes) == (8, 128)
    assert libra.peak_flops() == pytest.approx(2 * 8 * 64 * 64 * 1e9)
    assert libra.vector_flops == pytest.approx(8 * 128 * 1e9)
    # PIM-SHERPA Table 3: 321 GFLOPS BF16, 68.264 GB/s (LPDDR5X-8533 x 4 channels x 16 bits).
    cpu = load_xpu("pimsherpa-cpu")
    assert cpu.compute.precision == Precision.BF16
    assert cpu.peak_flops() == pytest.approx(321e9)
    assert cpu.bandwidth == pytest.approx(8533e6 * 4 * 16 / 8)


def test_lolpim_gpus_differ_from_each_other_only_in_memory():
    hbm, gddr = load_xpu("lolpim-gpu-hbm"), load_xpu("lolpim-gpu-gddr6")
    # LoL-PIM Table 7: 1.4 GHz, 312 TFLOPS; HBM3 3352 GB/s 80 GB; GDDR6 4096 GB/s 64 GB.
    assert (hbm.compute.freq_ghz, hbm.peak_flops()) == (1.4, 312e12)
    assert (hbm.memory.type, hbm.memory.bandwidth_gbps, hbm.memory.capacity_gib) == (
        "hbm3",
        3352.0,
        80.0,
    )
    assert (gddr.memory.type, gddr.memory.bandwidth_gbps, gddr.memory.capacity_gib) == (
        "gddr6",
        4096.0,
        64.0,
    )
    assert (gddr.compute, gddr.peak_tflops, gddr.links) == (hbm.compute, hbm.peak_tflops, hbm.links)


def test_config_is_frozen(a100):
    with pytest.raises(dataclasses.FrozenInstanceError):
        a100.compute.efficiency = 1.0  # type: ignore[misc]


def test_peak_fields_are_the_precisions():
    assert [f.name for f in dataclasses.fields(PeakTflops)] == [p.value for p in Precision]
    assert set(PRECISION_BYTES) == set(Precision)
    assert set(XPU_FIELD_RANGES["peak_tflops"]) == {p.value for p in Precision}


def test_unknown_xpu_name():
    with pytest.raises(XpuConfigError, match=r"unknown xPU 'tpu-v9'; available: a100-80gb"):
        load_xpu("tpu-v9")


def test_pimphony_xpus_lists_every_preset(capsys):
    rc, out, err = run_cli(capsys, "xpus")
    assert (rc, err) == (0, "")
    lines = {line.split(":")[0]: line for line in out.splitlines()}
    assert sorted(lines) == available_xpus()
    assert "8 x 128x128 arrays" in lines["neupims-npu"]
    assert "0.321 TFLOPS bf16" in lines["pimsherpa-cpu"]


# ------------------------------------------------------------------------------ bad presets


def error(path: Path) -> str:
    return file_error(path, load_xpu_config, XpuConfigError)


def test_unknown_key(tmp_path):
    text = A100.read_text().replace("[links]\n", "[links]\nspeed = 3.0\n")
    msg = error(write_toml(tmp_path, text))
    assert "[links] unknown key 'speed'; allowed: host_gbps, device_gbps" in msg


def test_unknown_top_level_key_and_section(tmp_path):
    msg = error(write_toml(tmp_path, 'colour = "green"\n' + A100.read_text()))
    assert "unknown key 'colour' at top level; allowed: name, kind, source, compute" in msg
    msg = error(write_toml(tmp_path, A100.read_text() + "\n[cache]\nl2 = 1\n"))
    assert "unknown key 'cache' at top level" in msg


def test_missing_key(tmp_path):
    text = drop_key(A100.read_text(), "bandwidth_gbps")
    assert "[memory] missing key 'bandwidth_gbps'" in error(write_toml(tmp_path, text))


def test_missing_section(tmp_path):
    text = A100.read_text().split("[links]")[0]
    assert "missing section [links]" in error(write_toml(tmp_path, text))


def test_optional_section_needs_all_its_keys(tmp_path):
    text = drop_key(NEUPIMS.read_text(), "cols")
    assert "[systolic] missing key 'cols'" in error(write_toml(tmp_path, text))


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        # the wrong type
        ("bandwidth_gbps", '"fast"', "[memory] bandwidth_gbps = 'fast': must be a number, got str"),
        ("buffer_kib", "1.5", "[memory] buffer_kib = 1.5: must be an integer, got float"),
        ("freq_ghz", "true", "[compute] freq_ghz = True: must be a number, got bool"),
        ("source", "3", "source = 3: must be a non-empty string"),
        # out of range
        (
            "freq_ghz",
            "50.0",
            "[compute] freq_ghz = 50.0: outside the physical range 0.01 to 10.0 GHz",
        ),
        ("bandwidth_gbps", "-1.0", "[memory] bandwidth_gbps = -1.0: must be a positive finite"),
        ("fp16", "1e9", "[peak_tflops] fp16 = 1000000000.0: outside the physical range 0 to"),
        ("host_gbps", "-2.0", "[links] host_gbps = -2.0: must be a finite number >= 0"),
        # not one of the choices
        ("kind", '"tpu"', "kind = 'tpu': not a known DeviceKind; allowed: gpu, npu, pnm, cpu"),
        ("type", '"ddr4"', "[memory] type = 'ddr4': not a known MemoryType; allowed: hbm2,"),
        ("precision", '"fp4"', "[compute] precision = 'fp4': not a known Precision; allowed:"),
    ],
)
def test_bad_value(tmp_path, key, value, expected):
    assert expected in error(write_toml(tmp_path, set_key(A100.read_text(), key, value)))


@pytest.mark.parametrize(("key", "value"), [("rows", "0"), ("cols", "-4"), ("arrays", "0")])
def test_non_positive_array_size(tmp_path, key, value):
    msg = error(write_toml(tmp_path, set_key(NEUPIMS.read_text(), key, value)))
    assert f"[systolic] {key} = {value}: must be a positive integer" in msg


@pytest.mark.parametrize("value", ["0.0", "1.2", "-0.1", "true", '"high"'])
@pytest.mark.parametrize("section", ["compute", "memory"])
def test_efficiency_cap_outside_zero_one(tmp_path, section, value):
    text = A100.read_text()
    head, _, tail = text.partition(f"[{section}]")
    tail = re.sub(r"^efficiency\s*=.*$", f"efficiency = {value}", tail, count=1, flags=re.M)
    msg = error(write_toml(tmp_path, head + f"[{section}]" + tail))
    assert f"[{section}] efficiency = " in msg
    assert "an efficiency cap must be a number in (0, 1]" in msg


def test_efficiency_cap_of_one_is_allowed(tmp_path):
    text = A100.read_text().replace("efficiency = 0.8 ", "efficiency = 1 ")
    assert load_xpu_config(write_toml(tmp_path, text)).compute.efficiency == 1.0


def test_default_precision_needs_a_peak(tmp_path):
    msg = error(write_toml(tmp_path, set_key(SHERPA.read_text(), "precision", '"fp16"')))
    assert "[compute] precision = 'fp16': its [peak_tflops] fp16 is 0; allowed: a precision" in msg
    assert "(bf16)" in msg


def test_peak_cannot_exceed_the_arrays(tmp_path):
    msg = error(write_toml(tmp_path, set_key(NEUPIMS.read_text(), "fp16", "300.0")))
    assert "[peak_tflops] fp16 = 300.0: exceeds what the arrays can do: 2 x 8 x 128 x 128" in msg
    assert "= 262.144 TFLOP/s" in msg


def test_vector_peak_cannot_exceed_the_units(tmp_path):
    msg = error(write_toml(tmp_path, set_key(NEUPIMS.read_text(), "vector_tflops", "2.0")))
    assert "[compute] vector_tflops = 2.0: exceeds what the vector units can do: 8 x 128" in msg


def test_buffer_must_fit_in_dram(tmp_path):
    text = set_key(SHERPA.read_text(), "capacity_gib", "0.001")  # 1,073,742 B
    text = set_key(text, "buffer_kib", "2048")  # 2,097,152 B
    msg = error(write_toml(tmp_path, text))
    assert "[memory] buffer_kib = 2048: must not exceed the DRAM capacity (0.001 GiB)" in msg


def test_extends_overrides_and_validates(tmp_path):
    path = write_toml(
        tmp_path, 'name = "mine"\nextends = "a100-80gb"\n[memory]\nbandwidth_gbps = 1000.0\n'
    )
    mine = load_xpu_config(path)
    assert (mine.name, mine.bandwidth, mine.peak_flops()) == ("mine", 1e12, 312e12)
    bad = write_toml(
        tmp_path, 'name = "x"\nextends = "a100-80gb"\n[memory]\nefficiency = 2\n', "x.toml"
    )
    assert "an efficiency cap must be a number in (0, 1]" in error(bad)
    bad = write_toml(tmp_path, 'name = "y"\nextends = "no-such"\n', "y.toml")
    assert "unknown xPU 'no-such'" in error(bad)


def test_zero_peak_precision_refused_when_costing():
    cpu = load_xpu("pimsherpa-cpu")
    with pytest.raises(XpuConfigError, match=r"pimsherpa-cpu: no fp16 peak .*it has: bf16"):
        gemm_cost(cpu, 1, 64, 64, precision="fp16")


# ------------------------------------------------------------------------------ the cost model


def test_gemm_that_quantises_badly(libra):
    """docs/xpu.md worked example: K = N = 65 on 8 arrays of 64 x 64 (4 tiles, 1 wave)."""
    c = gemm_cost(libra, 1024, 65, 65)
    assert c.flops == 2 * 1024 * 65 * 65 == 8_652_800
    assert c.issued_flops == 2 * 1024 * 1 * 8 * 64 * 64 == 67_108_864
    assert c.compute_seconds == pytest.approx(67_108_864 / 65.536e12) == 1.024e-6
    assert c.traffic == Traffic(weights=8_450, activations=133_120 + 133_120)
    assert c.memory_seconds == pytest.approx(274_690 / (2048e9 * 0.85))
    assert c.bound == Bound.COMPUTE
    assert c.seconds == pytest.approx(1.024e-6)
    assert c.utilisation == pytest.approx(8_450 / 65_536)  # 12.9%
    # One tile (64 x 64) costs the same wave; nine tiles (129 x 129) take two.
    assert gemm_cost(libra, 1024, 64, 64).compute_seconds == pytest.approx(1.024e-6)
    assert gemm_cost(libra, 1024, 129, 129).compute_seconds == pytest.approx(2.048e-6)


def test_gemm_that_quantises_badly_at_batch_one_is_memory_bound(libra):
    c = gemv_cost(libra, 1, 65, 65)
    assert (c.flops, c.issued_flops, c.bytes) == (8_450, 65_536, 130 + 8_450 + 130)
    assert c.compute_seconds == pytest.approx(1e-9)
    assert c.memory_seconds == pytest.approx(8_710 / 1.7408e12)  # 5.003 ns
    assert c.bound == Bound.MEMORY
    assert c.utilisation == pytest.approx(8_450 / (65.536e12 * 8_710 / 1.7408e12))


def test_memory_bound_gemv(a100):
    """docs/xpu.md: a 4096 x 4096 weight over a batch of 8 on the A100."""
    c = gemv_cost(a100, 8, 4096, 4096)
    assert c.flops == c.issued_flops == 268_435_456
    assert c.traffic == Traffic(weights=33_554_432, activations=65_536 * 2)
    assert c.compute_seconds == pytest.approx(268_435_456 / (312e12 * 0.8))  # 1.0755 us
    assert c.memory_seconds == pytest.approx(33_685_504 / (2039e9 * 0.85))  # 19.436 us
    assert c.seconds == c.memory_seconds
    assert c.bound == Bound.MEMORY
    assert c.utilisation == pytest.approx(268_435_456 / (312e12 * c.memory_seconds))
    assert c.utilisation == pytest.approx(0.04427, abs=1e-5)


def test_attention_step(a100, neupims):
    """docs/xpu.md: 1,000 + 3,000 tokens, 32 heads, 8 KV heads, d = 128."""
    c = attention_cost(a100, [1000, 3000], heads=32, kv_heads=8, head_dim=128)
    matmul, softmax = 4 * 4000 * 128 * 32, 5 * 4000 * 32
    assert (matmul, softmax) == (65_536_000, 640_000)
    assert c.flops == c.issued_flops == matmul + softmax
    assert c.traffic == Traffic(activations=2 * 2 * 32 * 128 * 2, kv=2 * 4000 * 8 * 128 * 2)
    assert c.traffic.kv == 16_384_000
    assert c.compute_seconds == pytest.approx(matmul / (312e12 * 0.8) + softmax / (19.5e12 * 0.8))
    assert c.memory_seconds == pytest.approx(16_416_768 / (2039e9 * 0.85))  # 9.472 us
    assert c.bound == Bound.MEMORY
    # On 128 x 128 arrays: per KV head QK^T and SV tiles ceil(T/128) each; groups of 4 rows.
    n = attention_cost(neupims, [1000, 3000], heads=32, kv_heads=8, head_dim=128)
    tiles = 8 * (8 + 8) + 8 * (24 + 24)
    assert tiles == 512
    matrix = 2 * 4 * (tiles // 8) * 8 * 128 * 128
    assert matrix == 67_108_864
    assert n.issued_flops == matrix + 128_000 * 5  # 128,000 scores fill 125 groups of 1,024
    assert n.compute_seconds == pytest.approx(matrix / 256e12 + 640_000 / 1.024e12)
    assert n.traffic == c.traffic


def test_compute_bound_large_gemm(a100):
    c = gemm_cost(a100, 4096, 8192, 8192)
    assert c.flops == 2 * 4096 * 8192 * 8192 == 549_755_813_888
    # Activations (64 MiB) are the smaller operand: two panels of the 40 MiB L2.
    assert c.traffic == Traffic(weights=2 * 128 * 2**20, activations=2 * 64 * 2**20)
    assert c.compute_seconds == pytest.approx(549_755_813_888 / (312e12 * 0.8))  # 2.2025 ms
    assert c.memory_seconds == pytest.approx(384 * 2**20 / (2039e9 * 0.85))
    assert c.bound == Bound.COMPUTE
    assert c.utilisation == pytest.approx(0.8)


def test_gemm_traffic_streams_the_larger_operand_once_per_panel(a100):
    tiny = dataclasses.replace(a100, memory=dataclasses.replace(a100.memory, buffer_kib=1))
    # a = 4 x 1000 x 2 = 8,000 B in ceil(8000/1024) = 8 panels; w = 1000 x 100 x 2 = 200,000 B.
    assert gemm_traffic(tiny, 4, 1000, 100, 2) == Traffic(
        weights=8 * 200_000, activations=8_000 + 800
    )
    # M large: the weights are the smaller operand and stay; activations stream per panel.
    assert gemm_traffic(tiny, 1000, 10, 10, 2) == Traffic(weights=200, activations=20_000 + 20_000)


def test_vector_ops(libra):
    c = vector_cost(libra, VectorOp.SOFTMAX, 1000)
    assert c.flops == 5_000
    assert c.issued_flops == 1024 * 5  # 1,000 elements fill one group of 8 x 128 lanes
    assert c.compute_seconds == pytest.approx(5_120 / 1.024e12)
    assert c.traffic == Traffic(activations=2 * 1000 * 2)
    assert c.bound == Bound.COMPUTE
    assert c.utilisation == pytest.approx(5_000 / 5_120)
    swiglu = vector_cost(load_xpu("a100-80gb"), "swiglu", 14336)
    assert swiglu.flops == VECTOR_OPS[VectorOp.SWIGLU].flops_per_element * 14336
    assert swiglu.traffic.activations == 3 * 14336 * 2


def test_attention_combine_cost(libra):
    """The split softmax's combine: 32 heads, 4 partials, d 128 on LibraPIM's NPU (vector
    units of 8 x 128 lanes, 1.024 TFLOPS): outputs 2 P = 8 FLOPs per element over 4,096
    elements (4 whole groups), scalars 5 P - 1 = 19 per head over 32 (padded to 1,024);
    bytes 32 x (4 x 130 + 128) x 2 = 41,472."""
    c = attention_combine_cost(libra, 32, 4, 128)
    assert c.flops == 32 * (8 * 128 + 19) == 33_376
    assert c.issued_flops == 4096 * 8 + 1024 * 19
    assert c.compute_seconds == pytest.approx((4096 * 8 + 1024 * 19) / 1.024e12)
    assert c.traffic == Traffic(activations=41_472)
    with pytest.raises(XpuError, match="attention combine: partials = 0: must be a positive"):
        attention_combine_cost(libra, 32, 0, 128)


def test_precision_sets_element_bytes(a100):
    fp16 = gemv_cost(a100, 1, 4096, 4096)
    int8 = gemv_cost(a100, 1, 4096, 4096, precision=Precision.INT8)
    assert int8.bytes * 2 == fp16.bytes
    assert int8.compute_seconds * 2 == pytest.approx(fp16.compute_seconds)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda d: gemm_cost(d, 0, 4, 4), "gemm: m = 0: must be a positive integer"),
        (lambda d: gemv_cost(d, 2, 4, -1), "gemm: n = -1: must be a positive integer"),
        (lambda d: attention_cost(d, [], 8, 8, 64), "attention: contexts is empty"),
        (lambda d: attention_cost(d, [5, 0], 8, 8, 64), "attention: contexts[1] = 0: must be"),
        (lambda d: attention_cost(d, [5], 8, 3, 64), "kv_heads = 3: must divide heads = 8"),
        (lambda d: vector_cost(d, "norm", 0), "vector: elements = 0: must be a positive integer"),
        (lambda d: gemm_cost(d, 1, 4, 4, "fp4"), "precision = 'fp4': unknown; allowed: fp16,"),
        (lambda d: vector_cost(d, "gelu", 4), "op = 'gelu': unknown; allowed: softmax, norm,"),
    ],
)
def test_bad_shapes(a100, call, expected):
    with pytest.raises(XpuError, match=re.escape(expected)):
        call(a100)


# ------------------------------------------------------------------------------ properties

DEVICES = [load_xpu(n) for n in ("librapim-npu", "neupims-npu", "a100-80gb", "pimsherpa-cpu")]
SIZE = st.integers(1, 3000)
MORE = st.integers(0, 3000)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(DEVICES), SIZE, SIZE, SIZE, st.sampled_from("mkn"), MORE)
def test_gemm_time_is_monotone(device, m, k, n, which, more):
    base = gemm_cost(device, m, k, n)
    bigger = {"m": m, "k": k, "n": n}
    bigger[which] += more
    assert gemm_cost(device, **bigger).seconds >= base.seconds


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(DEVICES),
    st.lists(st.integers(1, 200_000), min_size=1, max_size=4),
    st.integers(0, 3),
    st.integers(0, 50_000),
    st.sampled_from([(32, 32), (32, 8), (64, 8)]),
)
def test_attention_time_is_monotone_in_context(device, contexts, i, more, heads):
    i %= len(contexts)
    longer = list(contexts)
    longer[i] += more
    h, kv = heads
    base = attention_cost(device, contexts, h, kv, 128)
    assert attention_cost(device, longer, h, kv, 128).seconds >= base.seconds


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(DEVICES), SIZE, SIZE, SIZE)
def test_roofline_is_never_beaten(device, m, k, n):
    """time >= max(flops / peak, bytes / bandwidth), uncapped, for every kind of operation."""
    matrix, vector = device.peak_flops(), device.vector_flops
    for c, peak in (
        (gemm_cost(device, m, k, n), matrix),
        (attention_cost(device, [k, n], 8, 2, 64), max(matrix, vector)),
        (vector_cost(device, "residual", m * k), vector),
    ):
        floor = max(c.bytes / device.bandwidth, c.flops / peak)
        assert c.seconds >= floor * (1 - 1e-12)
        assert c.issued_flops >= c.flops
        assert 0 < c.utilisation <= 1


# ------------------------------------------------------------------------------ the docs stay true

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_docs_list_every_preset_and_range():
    presets = re.findall(
        r"^\| `([\w-]+)` \| (?:gpu|npu|pnm|cpu) \|", (DOCS / "xpu.md").read_text(), re.M
    )
    assert sorted(presets) == available_xpus()
    errors = (DOCS / "errors.md").read_text().split("compute-device (xPU) preset fields")[1]
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \|", errors, re.M)
    assert rows == [(s, k) for s, keys in XPU_FIELD_RANGES.items() for k in keys]


def test_energy_section_units_are_refused_when_inconsistent(tmp_path):
    """The xPU ``[energy]`` carries its units in its keys (pJ per FLOP, pJ per DRAM byte): a
    per-bit key is refused by name, and a value three orders off (1,282 fJ written as pJ)
    falls outside the physical range."""
    text = A100.read_text().replace("pj_per_dram_byte =", "pj_per_dram_bit =")
    msg = error(write_toml(tmp_path, text))
    assert "[energy] unknown key 'pj_per_dram_bit'; allowed: pj_per_flop, pj_per_dram_byte" in msg
    msg = error(write_toml(tmp_path, set_key(A100.read_text(), "pj_per_flop", "1282.0")))
    assert "[energy] pj_per_flop = 1282.0: outside the physical range" in msg


# ------------------------------------------------------------- per-kernel costs (``[kernel]``)


def _with_kernel(device: XpuConfig, launch_us: float, latency_ns: float) -> XpuConfig:
    return dataclasses.replace(device.roofline(), kernel=KernelCosts(launch_us, latency_ns))


def test_kernel_costs_one_small_kernel_by_hand(a100):
    """A residual add of 1,024 FP16 elements on an A100 paying 2 us per launch and 500 ns of
    DRAM latency: launch + latency + bytes / (bandwidth x cap), its compute roof far below.
    bytes = (2 reads + 1 write) x 1,024 x 2 B = 6,144 B; 6,144 / (2,039e9 x 0.85) = 3.545 ns;
    compute = 1,024 FLOP / (19.5e12 x 0.8) = 0.066 ns; seconds = 2 us + 500 ns + 3.545 ns."""
    dev = _with_kernel(a100, 2.0, 500.0)
    c = vector_cost(dev, "residual", 1024)
    stream = 6144 / (2039e9 * 0.85)
    assert c.bytes == 6144
    assert c.compute_seconds == pytest.approx(1024 / (19.5e12 * 0.8), rel=1e-12)
    assert c.memory_seconds == pytest.approx(500e-9 + stream, rel=1e-12)
    assert c.launch_seconds == pytest.approx(2e-6, rel=1e-12)
    assert c.seconds == pytest.approx(2e-6 + 500e-9 + stream, rel=1e-12)
    assert c.bound is Bound.MEMORY
    assert vector_cost(a100.roofline(), "residual", 1024).seconds == pytest.approx(stream)


def test_zero_kernel_costs_are_the_roofline_exactly(a100):
    """A ``[kernel]`` table of zeros changes no bit of any cost."""
    bare, zero = a100.roofline(), _with_kernel(a100, 0.0, 0.0)
    for make in (
        lambda d: gemm_cost(d, 3, 4096, 11008),
        lambda d: gemm_cost(d, 4096, 4096, 4096),
        lambda d: attention_cost(d, [100, 7000], 32, 8, 128),
        lambda d: vector_cost(d, "norm", 4096),
        lambda d: attention_combine_cost(d, 32, 4, 128),
    ):
        assert make(zero) == make(bare)
    assert ring_allreduce_seconds(zero, 8192, 8) == ring_allreduce_seconds(bare, 8192, 8)


def test_kernel_costs_add_once_per_kernel_and_once_per_allreduce(a100):
    """A memory-bound GEMV pays launch + latency on top of its stream; a compute-bound GEMM
    hides the latency under its compute and pays the launch only; an all-reduce over 8 GPUs
    is one kernel launch on top of its link time, over 1 GPU nothing."""
    dev, bare = _with_kernel(a100, 1.0, 400.0), a100.roofline()
    gemv, gemv0 = gemm_cost(dev, 1, 8192, 28672), gemm_cost(bare, 1, 8192, 28672)
    assert gemv.seconds - gemv0.seconds == pytest.approx(1.4e-6, rel=1e-6)
    gemm, gemm0 = gemm_cost(dev, 8192, 8192, 8192), gemm_cost(bare, 8192, 8192, 8192)
    assert gemm0.bound is Bound.COMPUTE
    assert gemm.seconds - gemm0.seconds == pytest.approx(1e-6, rel=1e-6)
    ring, ring0 = ring_allreduce_seconds(dev, 8192, 8), ring_allreduce_seconds(bare, 8192, 8)
    assert ring - ring0 == pytest.approx(1e-6, rel=1e-6)
    assert ring_allreduce_seconds(dev, 8192, 1) == 0.0


def test_kernel_table_is_ranged_and_the_switch_drops_it(tmp_path, monkeypatch):
    """``[kernel]`` is validated like every section; with ``PIMPHONY_KERNEL_COSTS=0`` a
    preset loads without it, and then records exactly what a preset without it records."""
    monkeypatch.delenv(KERNEL_COSTS_ENV, raising=False)
    base = A100.read_text().split("\n[kernel]")[0]
    path = write_toml(tmp_path, base + "\n[kernel]\nlaunch_us = 1.5\ndram_latency_ns = 300.0\n")
    dev = load_xpu_config(path)
    assert dev.kernel == KernelCosts(1.5, 300.0)
    assert dev.launch_seconds == pytest.approx(1.5e-6)
    assert dev.dram_latency_seconds == pytest.approx(3e-7)
    assert dev.to_dict()["kernel"] == {"launch_us": 1.5, "dram_latency_ns": 300.0}
    assert "[kernel] launch_us = -1.0" in error(
        write_toml(tmp_path, set_key(path.read_text(), "launch_us", "-1.0"), "neg.toml")
    )
    assert "[kernel] missing key 'dram_latency_ns'" in error(
        write_toml(tmp_path, drop_key(path.read_text(), "dram_latency_ns"), "drop.toml")
    )
    monkeypatch.setenv(KERNEL_COSTS_ENV, "0")
    off = load_xpu_config(path)
    assert off == dev.roofline()
    assert off.kernel is None and off.launch_seconds == off.dram_latency_seconds == 0.0
    assert off.to_dict() == load_xpu_config(write_toml(tmp_path, base, "base.toml")).to_dict()
    assert "kernel" not in off.to_dict()


def test_pimphony_xpus_shows_kernel_costs_unless_switched_off(capsys, monkeypatch):
    monkeypatch.setenv(KERNEL_COSTS_ENV, "1")  # restored after main() sets it
    lines = dict(line.split(":", 1) for line in run_cli(capsys, "xpus")[1].splitlines())
    assert lines["a100-80gb"].endswith(", per kernel 0.58 us launch + 405.5 ns DRAM latency")
    assert "per kernel" not in lines["neupims-npu"]
    lines = dict(
        line.split(":", 1) for line in run_cli(capsys, "--no-kernel-costs", "xpus")[1].splitlines()
    )
    assert "per kernel" not in lines["a100-80gb"]


def test_batched_kernel_pays_one_launch_for_all_copies(a100):
    """32 heads' GEMVs (K of 512 x 128 times q) in one batched kernel: 32 x the roofline's
    time exactly without per-kernel costs; with them, one launch and one DRAM latency on top
    of 32 x the stream (not 32 of each)."""
    one = gemv_cost(a100, 1, 128, 512)
    assert batched_cost(a100, one, 32).seconds == 32 * one.seconds
    dev = _with_kernel(a100, 1.0, 400.0)
    c = batched_cost(dev, gemv_cost(dev, 1, 128, 512), 32)
    stream = 32 * one.bytes / (2039e9 * 0.85)
    assert c.bytes == 32 * one.bytes and c.flops == 32 * one.flops
    assert c.seconds == pytest.approx(1e-6 + 400e-9 + stream, rel=1e-12)
