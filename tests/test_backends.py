"""DCC back-end presets (models/backends.py): the three levels, derived numbers, bad files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pimphony.models.backends import (
    BACKEND_DIR,
    BackendConfigError,
    BackendKind,
    CoreUnit,
    available_backends,
    load_backend,
)
from pimphony.models.config import load_preset


def test_shipped_backends_load() -> None:
    assert available_backends() == ["aim", "attacc", "hbm-pim", "hbm-pim-hbm3", "lpddr5x-pim"]
    kinds = {n: load_backend(n).kind for n in available_backends()}
    assert kinds == {
        "aim": BackendKind.AIM,
        "attacc": BackendKind.ATTACC,
        "hbm-pim": BackendKind.HBM_PIM,
        "hbm-pim-hbm3": BackendKind.HBM_PIM,
        "lpddr5x-pim": BackendKind.HBM_PIM,
    }


def test_aim_levels_come_from_the_hardware_preset() -> None:
    b, hw = load_backend("aim"), load_preset("aim-16ch")
    assert b.hardware == "aim-16ch"
    assert b.system.groups_per_device == hw.module.channels == 16
    assert b.system.device_bytes == hw.module_bytes
    assert (b.group.banks, b.group.row_bytes, b.group.rows_per_bank) == (
        hw.channel.banks, hw.channel.row_bytes, hw.channel.rows_per_bank)  # fmt: skip
    assert b.core.lanes == hw.channel.mac_elements
    assert b.core.output_regs == hw.channel.obuf_entries
    assert b.group.buffer_bytes == hw.channel.gbuf_entries * hw.channel.column_bytes == 2048
    assert b.cores_per_group == 16 and b.core.unit is CoreUnit.MAC
    # 16 channels x 16 banks x 32 B per 1 GHz cycle = 8.192 TB/s inside one module
    assert b.internal_gbps == pytest.approx(16 * 16 * 32 * 1.0)
    assert b.timing is None


def test_hbm_pim_numbers() -> None:
    b = load_backend("hbm-pim")
    assert b.cores_per_group == 8  # a 16-lane FPU per two of 16 banks
    # ISSCC 2021: 1.2 TFLOPS per cube = 16 pCH x 8 units x 16 lanes x 2 flop x 300 MHz
    flops = b.system.groups_per_device * b.cores_per_group * b.core.lanes * 2 * 300e6
    assert flops == pytest.approx(1.2288e12)
    t = b.timing
    assert t is not None
    # tCCD_L at the 1.2 GHz command clock is the PCU's 300 MHz
    assert t.freq_ghz * 1e3 / t.tCCD_L == pytest.approx(b.core.freq_mhz)
    assert (t.read_to_write, t.write_to_read, t.write_to_precharge) == (
        20 + 2 + 1 - 8, 8 + 2 + 9, 8 + 2 + 16)  # fmt: skip
    assert b.group.bus_gbps == pytest.approx(64 * 2.4 / 8)  # 19.2 GB/s per pseudo-channel


def test_attacc_numbers() -> None:
    b = load_backend("attacc")
    assert b.groups == 5 * 16 and b.cores_per_group == 64
    assert b.group.units == ("softmax",)
    # HBM3 at 5.2 Gb/s x 1024 pins = 665.6 GB/s per device (16 channels of 64 DQ)
    assert b.group.bus_gbps * b.system.groups_per_device == pytest.approx(665.6)
    assert 5 * b.system.device_bytes == 80 * 2**30
    t = b.timing
    assert t is not None and t.tCCD_AB == 6
    # two pseudo-channels of 32 DQ: each moves 32 B per nBL = 2 cycles at 1.3 GHz
    assert b.group.pseudo_channels * b.group.column_bytes * t.freq_ghz / t.burst_cycles == (
        pytest.approx(b.group.bus_gbps)
    )
    # 16 bank groups = 2 pCH x 2 ranks x 4 bank groups of the simulator's channel
    assert (b.group.pseudo_channels, b.group.ranks, b.group.bank_groups) == (2, 2, 16)


def test_hbm_pim_hbm3_extends_hbm_pim() -> None:
    b, base = load_backend("hbm-pim-hbm3"), load_backend("hbm-pim")
    assert b.core == dataclasses.replace(base.core, freq_mhz=333.0)
    # 32 pCH x 32 banks: DCC's 16 x 64 banks, and its 512 PIM units per device
    assert b.cores_per_group * b.system.groups_per_device == 16 * 64 // 2
    assert b.group.banks * b.system.groups_per_device == load_backend("attacc").group.banks * 16
    assert b.group.bus_gbps * b.system.groups_per_device == pytest.approx(665.6)
    t = b.timing
    assert t is not None and t.freq_ghz == 1.3
    # the bus the timing implies equals the bus the group states: 32 B per BL/2 cycles
    assert b.group.column_bytes * t.freq_ghz / t.burst_cycles == pytest.approx(b.group.bus_gbps)
    assert (t.read_to_write, t.write_to_read) == (19 + 2 + 2 - 6, 6 + 2 + 11)


def _variant(tmp_path: Path, base: str, edit) -> Path:
    text = (BACKEND_DIR / f"{base}.toml").read_text()
    path = tmp_path / "variant.toml"
    path.write_text(edit(text))
    return path


def _drop(key: str):
    return lambda text: "\n".join(
        line for line in text.splitlines() if not line.startswith(f"{key} ")
    )


def _set(key: str, value: str):
    def edit(text: str) -> str:
        lines = text.splitlines()
        for k, line in enumerate(lines):
            if line.startswith(f"{key} "):
                lines[k] = f"{key} = {value}"
                return "\n".join(lines)
        raise AssertionError(key)

    return edit


@pytest.mark.parametrize(
    ("base", "edit", "message"),
    [
        ("hbm-pim", _drop("lanes"), "[core] missing key 'lanes'"),
        ("hbm-pim", _drop("tCCD_L"), "[timing] missing key 'tCCD_L'"),
        ("hbm-pim", _set("lanes", "24"), "a SIMD vector of 24 x 2 B = 48 B must divide the row"),
        ("hbm-pim", _set("lanes", "32"), "must feed exactly one SIMD vector (64 B)"),
        ("hbm-pim", _set("banks", "10"), "[group] bank_groups = 4: must divide banks = 10"),
        ("hbm-pim", _set("dtype", '"int3"'), "dtype = 'int3': unknown; allowed: fp16, bf16"),
        ("hbm-pim", _set("kind", '"upmem"'), "kind = 'upmem': unknown; allowed: aim, hbm-pim"),
        ("hbm-pim", _set("tRC", "30"), "[timing] tRC = 30: must be >= tRAS = 33"),
        ("hbm-pim", _set("tCCD_L", "1"), "tCCD_L = 1: must be >= tCCD_S = 2"),
        (
            "hbm-pim",
            _set("pin_gbps", "3.2"),
            "pin_gbps = 3.2: the bus moves 25.6 GB/s but the "
            "timing moves 32 B per BL/2 = 2 cycles at 1.2 GHz = 19.2 GB/s",
        ),  # fmt: skip
        ("hbm-pim", _set("host_xpu", '"nope"'), "[system] host_xpu: unknown xPU 'nope'"),
        ("hbm-pim", _set("pin_gbps", "0.0"), "pin_gbps = 0.0: outside the physical range"),
        ("hbm-pim", _set("device_bytes", "1048576"), "must hold groups_per_device x banks"),
        ("hbm-pim", _set("crf_entries", "0"), "a SIMD core runs a CRF program"),
        ("hbm-pim", _set("broadcast", "1"), "broadcast = 1: must be true or false"),
        ("hbm-pim", lambda t: t + "\nhardware = 'aim-16ch'\n", "unknown key 'hardware'"),
        ("aim", lambda t: t + "\n[timing]\nfreq_ghz = 1.0\n", "[timing] is not allowed"),
        ("attacc", _set("tCCD_AB", "0"), "tCCD_AB = 0: an AttAcc back end issues all-bank"),
        ("attacc", _set("ranks", "3"), "bank_groups = 16: must split evenly over pseudo_ch"),
        ("attacc", _set("pseudo_channels", "1"), "the bus moves 41.6 GB/s but the timing mo"),
        (
            "aim",
            lambda t: t.replace("[system]", "[system]\ndevice_bytes = 1"),
            "unknown key 'device_bytes' (the rest come from 'hardware')",
        ),  # fmt: skip
        ("aim", _set("hardware", '"aim-99ch"'), "hardware: unknown preset 'aim-99ch'"),
        ("aim", _drop("hardware"), "missing key 'hardware'"),
        (
            "attacc",
            lambda t: t.replace("[core]", "[core]\nwidth = 3"),
            "[core] unknown key 'width'",
        ),  # fmt: skip
    ],
)
def test_bad_backends_name_the_field(tmp_path: Path, base: str, edit, message: str) -> None:
    path = _variant(tmp_path, base, edit)
    with pytest.raises(BackendConfigError) as err:
        load_backend(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_unknown_backend_name() -> None:
    with pytest.raises(BackendConfigError, match="unknown back end 'hbm9'; available: aim"):
        load_backend("hbm9")


def test_host_gpu_follows_the_cost_model(monkeypatch):
    """The host preset is cached per name *and* cost model: a run without per-kernel costs in
    the same process times the GPU on the roofline (a GEMV 4096^2 loses its launch and DRAM
    latency, 0.58 us + 405.5 ns on the A100)."""
    from pimphony.compiler.dcc.cost import gpu_seconds
    from pimphony.models.xpu_config import KERNEL_COSTS_ENV

    monkeypatch.delenv(KERNEL_COSTS_ENV, raising=False)
    backend = load_backend("hbm-pim")
    with_costs = gpu_seconds(backend, "gemv", (4096, 4096))
    monkeypatch.setenv(KERNEL_COSTS_ENV, "0")
    roofline = gpu_seconds(backend, "gemv", (4096, 4096))
    assert with_costs - roofline == pytest.approx((0.58 + 0.4055) * 1e-6, rel=1e-6)
