"""Weight layouts (models/layout.py): the address map, the host-friendly and PIM-aware
images, the swizzled memory copy and the per-bank GEMV, on random numpy matrices."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pimphony.models.layout import (
    AddressMap,
    LayoutError,
    MemoryLayout,
    host_friendly_image,
    load_layout,
    pim_aware_address,
    pim_aware_image,
    pim_aware_shape,
    pim_gemv,
    swizzled_copy,
)

LP = load_layout("lpddr5x-pim")


def _layout(name: str, **sizes: int) -> MemoryLayout:
    """A layout of 2-byte elements whose address fields are ``sizes`` (how many values each
    takes), least significant first in the order given."""
    return MemoryLayout(name, 2, AddressMap(tuple(sizes), sizes))


#: A small map (2 channels, 4 banks, 4 bursts of 8 B per DRAM row) so shapes stay tiny.
SMALL = _layout("small", offset=8, channel=2, bank=4, column=4, rank=1, row=1024)


def test_preset_geometry():
    amap = LP.address_map
    assert LP.lanes == 16  # BF16 in a 256-bit burst
    assert (amap.size("channel"), amap.size("bank"), amap.size("rank")) == (4, 16, 1)
    assert amap.units == 64 and amap.row_bytes == 2048 and amap.burst_bytes == 32


def test_address_fields_by_hand():
    # offset 32 | channel 4 | bank 16 | column 64 | rank 1 | row
    a = 3 + 32 * (2 + 4 * (9 + 16 * (40 + 64 * 5)))
    f = LP.address_map.decode(np.array([a]))
    assert {k: int(v[0]) for k, v in f.items()} == {
        "offset": 3, "channel": 2, "bank": 9, "column": 40, "rank": 0, "row": 5,
    }  # fmt: skip
    assert int(LP.address_map.encode(offset=3, channel=2, bank=9, column=40, row=5)) == a
    # Consecutive bursts of the host's address space go to channel 0, 1, 2, 3, then bank 1.
    bursts = LP.address_map.decode(np.arange(6) * 32)
    assert bursts["channel"].tolist() == [0, 1, 2, 3, 0, 1]
    assert bursts["bank"].tolist() == [0, 0, 0, 0, 1, 1]


#: PIM-SHERPA Fig. 3's toy: one channel, one rank, four banks, one DRAM row, three columns of
#: 16-element bursts; consecutive bursts fill a bank's columns before the next bank (the
#: order is the toy's choice: with banks fastest its host-friendly and PIM-aware layouts of
#: the only matrix that fits would coincide).
TOY = _layout("fig3", offset=32, column=3, bank=4, channel=1, rank=1, row=1)


def test_fig3_toy_by_hand():
    """A 64 x 3 matrix: 4 row groups (g) x 3 columns (c) = 12 bursts, all of the toy's DRAM.
    Host-friendly: column-major burst b = 4c + g at bank b // 3, column b % 3. PIM-aware:
    group g in bank g (a whole matrix row per bank), column c at column c. SMC moves each
    burst from the second place to the first."""
    rows, cols = 64, 3
    shape = pim_aware_shape(TOY, rows, cols)
    assert (shape.padded_rows, shape.bytes, shape.padding_bytes) == (64, 12 * 32, 0)
    w = np.arange(rows * cols, dtype=np.int16).reshape(rows, cols)
    host = host_friendly_image(w).view(np.int16).reshape(12, 16)  # burst b = address // 32
    pim = pim_aware_image(w, TOY).view(np.int16).reshape(12, 16)
    amap = TOY.address_map
    for g in range(4):
        for c in range(cols):
            block = w[16 * g : 16 * g + 16, c]
            b = 4 * c + g
            assert np.array_equal(host[b], block)
            f = amap.decode(np.array([b * 32]))
            assert (int(f["bank"][0]), int(f["column"][0])) == (b // 3, b % 3)
            # PIM-aware: bank g holds group g; column c of that bank is burst 3 g + c.
            assert np.array_equal(pim[3 * g + c], block)
            f = amap.decode(np.array([(3 * g + c) * 32]))
            assert (int(f["bank"][0]), int(f["column"][0])) == (g, c)
    assert not np.array_equal(host, pim)
    out = swizzled_copy(pim.view(np.uint8).reshape(-1), TOY, rows, cols, np.int16)
    assert np.array_equal(out, host_friendly_image(w))
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    wf = (w % 7).astype(np.float16)
    y = pim_gemv(pim_aware_image(wf, TOY), TOY, rows, cols, x, np.float16)
    assert np.array_equal(y, wf.astype(np.float32) @ x)


def test_pim_aware_placement_by_hand():
    """SMALL: 8 units of 4 lanes, 4 bursts per DRAM row; a 40 x 3 matrix pads to 64 rows
    (2 groups per unit)."""
    shape = pim_aware_shape(SMALL, 40, 3)
    assert (shape.padded_rows, shape.groups_per_unit, shape.bursts_per_unit) == (64, 2, 6)
    assert shape.dram_rows == 2 and shape.bytes == 2 * 8 * 32
    assert shape.padding_bytes == shape.bytes - 40 * 3 * 2
    # Row 37, column 2: group 9 -> unit 1 (channel 1, bank 0), its local group 1, bank burst
    # 1 * 3 + 2 = 5 -> DRAM row 1, column 1; lane 1 -> byte 2.
    a = int(pim_aware_address(SMALL, shape, 37, 2))
    f = SMALL.address_map.decode(np.array([a]))
    assert {k: int(v[0]) for k, v in f.items()} == {
        "offset": 2, "channel": 1, "bank": 0, "column": 1, "rank": 0, "row": 1,
    }  # fmt: skip


@pytest.mark.parametrize("rows,cols", [(512, 2048), (100, 70), (1, 1), (1024, 3), (37, 65)])
def test_smc_and_gemv_on_the_preset(rows, cols):
    rng = np.random.default_rng(rows * 7 + cols)
    w = rng.standard_normal((rows, cols)).astype(np.float16)
    image = pim_aware_image(w, LP)
    assert image.size == pim_aware_shape(LP, rows, cols).bytes
    assert np.array_equal(swizzled_copy(image, LP, rows, cols, np.float16), host_friendly_image(w))
    x = rng.standard_normal(cols).astype(np.float32)
    np.testing.assert_allclose(
        pim_gemv(image, LP, rows, cols, x, np.float16), w.astype(np.float32) @ x, rtol=1e-4,
        atol=1e-3,
    )  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 80), cols=st.integers(1, 20), seed=st.integers(0, 2**16))
def test_smc_reproduces_the_host_friendly_bytes(rows, cols, seed):
    rng = np.random.default_rng(seed)
    w = rng.integers(-(2**15), 2**15, (rows, cols)).astype(np.int16)  # every bit pattern
    image = pim_aware_image(w, SMALL)
    assert np.array_equal(swizzled_copy(image, SMALL, rows, cols, np.int16), host_friendly_image(w))
    # Every element sits in the bank of its row group, once.
    shape = pim_aware_shape(SMALL, rows, cols)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    addr = pim_aware_address(SMALL, shape, r, c)
    assert np.unique(addr).size == rows * cols
    f = SMALL.address_map.decode(addr)
    assert np.array_equal(SMALL.address_map.unit_of(f), (r // 4) % 8)


def test_gemv_sees_a_misplaced_burst():
    """The GEMV reads each bank's own bursts: swapping two bursts of different banks in the
    image changes the result."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 4)).astype(np.float16)
    image = pim_aware_image(w, SMALL).copy()
    x = np.ones(4, dtype=np.float32)
    a, b = image[0:8].copy(), image[8:16].copy()  # burst 0 (channel 0) and 1 (channel 1)
    image[0:8], image[8:16] = b, a
    assert not np.allclose(pim_gemv(image, SMALL, 64, 4, x, np.float16), w.astype(np.float32) @ x)


def test_padding_closed_form_llama_3_2_1b():
    """K/V (512 x 2048) pad to 1024 rows (16 lanes x 64 banks); the LM head's 128,256 rows to
    129,024; 2048-row matrices need none."""
    assert pim_aware_shape(LP, 512, 2048).padding_bytes == 512 * 2048 * 2
    assert pim_aware_shape(LP, 128256, 2048).padding_bytes == (129024 - 128256) * 2048 * 2
    for shape in ((2048, 2048), (8192, 2048), (2048, 8192)):
        assert pim_aware_shape(LP, *shape).padding_bytes == 0


def test_bad_inputs(tmp_path):
    with pytest.raises(LayoutError, match=r"rows = 0: must be a positive integer"):
        pim_aware_shape(LP, 0, 4)
    with pytest.raises(LayoutError, match="holds 2-byte elements"):
        pim_aware_image(np.zeros((4, 4), dtype=np.float32), LP)
    with pytest.raises(LayoutError, match=r"must have 131072 bytes"):
        pim_gemv(np.zeros(10, np.uint8), LP, 4, 4, np.zeros(4), np.float16)
    with pytest.raises(LayoutError, match=r"address_map.bank = 0: must be the number of values"):
        dataclasses.replace(LP.address_map, sizes={**LP.address_map.sizes, "bank": 0})
    with pytest.raises(LayoutError, match="must name each of"):
        AddressMap(("offset", "channel"), LP.address_map.sizes)
    with pytest.raises(LayoutError, match="unknown layout 'nope'; available: lpddr5x-pim"):
        load_layout("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "bad"\nelement_bytes = 2\n[address_map]\n'
        'order = ["offset", "channel", "bank", "column", "rank", "row"]\n'
        "offset = 32\nchannel = 4\nbank = 16\ncolumn = 64\nrank = 1\nrow = 1024\ncolour = 1\n"
    )
    with pytest.raises(LayoutError, match=r"\[address_map\] unknown key 'colour'"):
        load_layout(bad)
    bad.write_text('name = "bad"\nelement_bytes = 3\n' + LP_MAP)
    with pytest.raises(LayoutError, match="element_bytes = 3 does not divide the 32-byte burst"):
        load_layout(bad)


LP_MAP = (
    '[address_map]\norder = ["offset", "channel", "bank", "column", "rank", "row"]\n'
    "offset = 32\nchannel = 4\nbank = 16\ncolumn = 64\nrank = 1\nrow = 1024\n"
)
