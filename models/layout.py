"""Weight layouts in DRAM for a host with PIM banks: the address map, the host-friendly and
the PIM-aware layout, and the swizzled memory copy between them (PIM-SHERPA, seed 004).

An :class:`AddressMap` splits a physical byte address into fields (burst offset, channel,
rank, bank, column, row), least significant first, as data (``configs/layouts/``).
A weight matrix ``W`` (``rows`` outputs x ``cols`` inputs, ``y = W @ x``) is stored
column-major at the granularity of one burst: a 256-bit burst holds ``lanes`` consecutive
elements of one column (PIMnast, PIM-SHERPA 2.2 and Fig. 3).

- **Host-friendly** (Fig. 3b): the column-major bytes of ``W`` at consecutive physical
  addresses, so the address map interleaves consecutive bursts across channels and banks.
- **PIM-aware** (Fig. 3c): every bank holds whole matrix rows. Row group ``g`` (rows
  ``lanes g .. lanes g + lanes - 1``) goes to PIM unit ``g % units`` (one SIMD unit per bank,
  units numbered channel fastest, then bank, then rank); inside the bank its ``cols`` bursts
  are consecutive (bank burst ``(g // units) cols + c``, DRAM row = burst // columns per row).
  ``rows`` is padded to a multiple of ``lanes x units`` so that every unit holds the same
  number of groups (PIM-SHERPA 6: "to avoid misalignment, PIM-aware weights include
  additional padding in the K and V layers and in the LM head"), and the region is rounded up
  to whole DRAM rows of every bank so that it is one contiguous physical region (5: "a single
  physically contiguous memory region").
- **Swizzled memory copy** (SMC, 4.2, Fig. 6): for every element coordinate of the
  destination (host-friendly), the PIM-aware address of the burst that holds it is the
  source; :func:`swizzled_copy` is that gather.

:func:`pim_gemv` computes ``W @ x`` from a PIM-aware image the way the banks do: each unit
sees only the bursts its DRAM coordinates give it and derives the row group and column from
its own burst index, so a burst placed in the wrong bank gives a wrong result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pimphony.models.config import PresetFolder, check_value, reject_unknown_keys, require_key
from pimphony.models.errors import PimphonyError

__all__ = [
    "ADDRESS_FIELDS",
    "LAYOUT_DIR",
    "AddressMap",
    "LayoutError",
    "MemoryLayout",
    "PimAwareShape",
    "available_layouts",
    "host_friendly_image",
    "load_layout",
    "pim_aware_address",
    "pim_aware_image",
    "pim_aware_shape",
    "pim_gemv",
    "swizzled_copy",
]

#: The fields of a physical address.
ADDRESS_FIELDS = ("offset", "channel", "rank", "bank", "column", "row")


class LayoutError(PimphonyError, ValueError):
    """A layout preset is malformed, or a matrix does not fit the layout."""


_LAYOUTS = PresetFolder("layouts", "layout", LayoutError)
LAYOUT_DIR = _LAYOUTS.folder


@dataclass(frozen=True)
class AddressMap:
    """Physical address fields, least significant first, as a mixed-radix number: the
    address is ``offset + burst x (f1 + n1 x (f2 + n2 x ...))`` over the fields in ``order``
    (powers of two give the usual bit fields; PIM-SHERPA Fig. 3's toy has 3 columns).

    Parameters
    ----------
    order : tuple of str
        Every name of :data:`ADDRESS_FIELDS` once, least significant first; ``offset``
        first (the byte inside one burst).
    sizes : dict
        How many values each field takes (``offset``: bytes per burst; ``rank`` may be 1).
    """

    order: tuple[str, ...]
    sizes: dict[str, int]

    def __post_init__(self) -> None:
        if sorted(self.order) != sorted(ADDRESS_FIELDS):
            raise LayoutError(
                f"address_map.order = {list(self.order)!r}: must name each of "
                f"{', '.join(ADDRESS_FIELDS)} once"
            )
        if self.order[0] != "offset":
            raise LayoutError(
                f"address_map.order = {list(self.order)!r}: 'offset' (the byte in a burst) "
                "must be the least significant field"
            )
        for name in ADDRESS_FIELDS:
            n = self.sizes.get(name)
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 2**40:
                raise LayoutError(
                    f"address_map.{name} = {n!r}: must be the number of values the field "
                    "takes, an integer 1 to 2^40"
                )

    def size(self, name: str) -> int:
        """How many values field ``name`` takes."""
        return self.sizes[name]

    @property
    def burst_bytes(self) -> int:
        """Bytes of one burst (the ``offset`` field)."""
        return self.size("offset")

    @property
    def units(self) -> int:
        """Banks over all channels and ranks (one PIM unit each)."""
        return self.size("channel") * self.size("rank") * self.size("bank")

    @property
    def row_bytes(self) -> int:
        """Bytes of one DRAM row of one bank (columns x burst)."""
        return self.size("column") * self.burst_bytes

    @property
    def capacity_bytes(self) -> int:
        """Bytes the map addresses."""
        return math.prod(self.sizes[n] for n in ADDRESS_FIELDS)

    def _strides(self) -> dict[str, int]:
        stride, out = 1, {}
        for name in self.order:
            out[name] = stride
            stride *= self.sizes[name]
        return out

    def decode(self, address: np.ndarray) -> dict[str, np.ndarray]:
        """The fields of every byte address in ``address``."""
        a = np.asarray(address, dtype=np.int64)
        if (a < 0).any() or (a >= self.capacity_bytes).any():
            raise LayoutError(f"addresses must lie in [0, {self.capacity_bytes})")
        return {name: (a // stride) % self.sizes[name] for name, stride in self._strides().items()}

    def encode(self, **fields: Any) -> np.ndarray:
        """The byte addresses of the given fields (arrays broadcast; a missing field is 0)."""
        unknown = [k for k in fields if k not in ADDRESS_FIELDS]
        if unknown:
            raise LayoutError(f"unknown address field {unknown[0]!r}; allowed: {ADDRESS_FIELDS}")
        address = np.zeros((), dtype=np.int64)
        for name, stride in self._strides().items():
            v = np.asarray(fields.get(name, 0), dtype=np.int64)
            if (v < 0).any() or (v >= self.size(name)).any():
                raise LayoutError(
                    f"address field {name}: values must lie in [0, {self.size(name)})"
                )
            address = address + v * stride
        return address

    def unit_of(self, fields: dict[str, np.ndarray]) -> np.ndarray:
        """PIM unit of decoded fields: channel fastest, then bank, then rank."""
        return fields["channel"] + self.size("channel") * (
            fields["bank"] + self.size("bank") * fields["rank"]
        )

    def unit_fields(self, unit: np.ndarray) -> dict[str, np.ndarray]:
        """Channel, bank and rank of PIM unit numbers (inverse of :meth:`unit_of`)."""
        u = np.asarray(unit, dtype=np.int64)
        ch, rest = u % self.size("channel"), u // self.size("channel")
        return {"channel": ch, "bank": rest % self.size("bank"), "rank": rest // self.size("bank")}


@dataclass(frozen=True)
class MemoryLayout:
    """A layout preset: the address map and the element size of the weights."""

    name: str
    element_bytes: int
    address_map: AddressMap

    def __post_init__(self) -> None:
        if self.address_map.burst_bytes % self.element_bytes:
            raise LayoutError(
                f"{self.name}: element_bytes = {self.element_bytes} does not divide the "
                f"{self.address_map.burst_bytes}-byte burst"
            )

    @property
    def lanes(self) -> int:
        """Elements per burst: the rows one burst of a column holds (16 for BF16 in 256 bit)."""
        return self.address_map.burst_bytes // self.element_bytes


def available_layouts() -> list[str]:
    """Names of the shipped layout presets."""
    return _LAYOUTS.names()


def load_layout(name_or_path: str | Path) -> MemoryLayout:
    """A layout preset by name (``configs/layouts/NAME.toml``) or path, validated."""
    path, table = _LAYOUTS.load(name_or_path)
    head = f"{path}: "
    reject_unknown_keys(table, ["name", "element_bytes", "address_map"], LayoutError, head)
    name = check_value(
        f"{head}name = {table.get('name')!r}", require_key(table, "name", LayoutError, head),
        str, LayoutError,
    )  # fmt: skip
    eb = require_key(table, "element_bytes", LayoutError, head)
    eb = check_value(f"{head}element_bytes = {eb!r}", eb, int, LayoutError)
    amap = require_key(table, "address_map", LayoutError, head, section=True)
    amap = check_value(f"{head}address_map", amap, dict, LayoutError)
    reject_unknown_keys(amap, ["order", *ADDRESS_FIELDS], LayoutError, f"{head}[address_map] ")
    order = require_key(amap, "order", LayoutError, f"{head}[address_map] ")
    order = check_value(f"{head}address_map.order = {order!r}", order, list, LayoutError)
    sizes = {k: require_key(amap, k, LayoutError, f"{head}[address_map] ") for k in ADDRESS_FIELDS}
    try:
        return MemoryLayout(name, eb, AddressMap(tuple(order), sizes))
    except LayoutError as exc:
        raise LayoutError(f"{head}{exc}") from None


@dataclass(frozen=True)
class PimAwareShape:
    """Where a ``rows x cols`` matrix sits in the PIM-aware layout.

    ``padded_rows`` is ``rows`` rounded up to ``lanes x units``; each unit holds
    ``groups_per_unit`` row groups of ``cols`` bursts, ``bursts_per_unit`` in all, in
    ``dram_rows`` DRAM rows; ``bytes`` is the contiguous region (whole DRAM rows of every
    bank), ``padding_bytes`` what it adds to the matrix.
    """

    rows: int
    cols: int
    padded_rows: int
    groups_per_unit: int
    bursts_per_unit: int
    dram_rows: int
    bytes: int
    padding_bytes: int


def _check_matrix(rows: int, cols: int) -> None:
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise LayoutError(f"matrix {name} = {v!r}: must be a positive integer")


def pim_aware_shape(layout: MemoryLayout, rows: int, cols: int) -> PimAwareShape:
    """The padded geometry of a ``rows x cols`` matrix in the PIM-aware layout (closed form)."""
    _check_matrix(rows, cols)
    amap = layout.address_map
    step = layout.lanes * amap.units
    padded = math.ceil(rows / step) * step
    groups = padded // step
    bursts = groups * cols
    dram_rows = math.ceil(bursts / amap.size("column"))
    region = dram_rows * amap.units * amap.row_bytes
    if region > amap.capacity_bytes:
        raise LayoutError(
            f"a {rows} x {cols} matrix needs {region} bytes in the PIM-aware layout; the "
            f"address map holds {amap.capacity_bytes}"
        )
    return PimAwareShape(
        rows, cols, padded, groups, bursts, dram_rows, region,
        region - rows * cols * layout.element_bytes,
    )  # fmt: skip


def host_friendly_image(w: np.ndarray) -> np.ndarray:
    """The host-friendly image of ``w``: its column-major bytes (physical address = index)."""
    w = np.asarray(w)
    if w.ndim != 2:
        raise LayoutError(f"a weight matrix must be 2-D, got shape {w.shape}")
    return np.frombuffer(np.asfortranarray(w).tobytes(order="F"), dtype=np.uint8).copy()


def pim_aware_address(
    layout: MemoryLayout, shape: PimAwareShape, r: np.ndarray, c: np.ndarray
) -> np.ndarray:
    """Physical byte address of element ``(r, c)`` of the matrix of ``shape`` in the PIM-aware
    layout (arrays broadcast): row group ``r // lanes`` to unit ``group % units``, burst
    ``(group // units) cols + c`` of that bank, byte ``(r % lanes) element_bytes`` of it."""
    amap = layout.address_map
    r = np.asarray(r, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if (r < 0).any() or (r >= shape.padded_rows).any() or (c < 0).any() or (c >= shape.cols).any():
        raise LayoutError(
            f"element coordinates must lie in [0, {shape.padded_rows}) x [0, {shape.cols})"
        )
    g, lane = r // layout.lanes, r % layout.lanes
    unit, local = g % amap.units, g // amap.units
    burst = local * shape.cols + c
    cols_per_row = amap.size("column")
    return amap.encode(
        offset=lane * layout.element_bytes,
        column=burst % cols_per_row,
        row=burst // cols_per_row,
        **amap.unit_fields(unit),
    )


def _check_dtype(layout: MemoryLayout, dtype: np.dtype) -> np.dtype:
    """``dtype`` if its elements are the layout's size."""
    dtype = np.dtype(dtype)
    if dtype.itemsize != layout.element_bytes:
        raise LayoutError(
            f"elements of {dtype} are {dtype.itemsize} bytes; the layout {layout.name!r} holds "
            f"{layout.element_bytes}-byte elements"
        )
    return dtype


def _check_image(image: np.ndarray, shape: PimAwareShape) -> np.ndarray:
    """``image`` as bytes if it is the PIM-aware region of a matrix of ``shape``."""
    image = np.asarray(image, dtype=np.uint8)
    if image.shape != (shape.bytes,):
        raise LayoutError(
            f"a PIM-aware image of a {shape.rows} x {shape.cols} matrix must have {shape.bytes} "
            f"bytes, got {image.size}"
        )
    return image


def _element_view(w: np.ndarray, layout: MemoryLayout) -> np.ndarray:
    w = np.asarray(w)
    if w.ndim != 2:
        raise LayoutError(f"a weight matrix must be 2-D, got shape {w.shape}")
    _check_dtype(layout, w.dtype)
    return w


def pim_aware_image(w: np.ndarray, layout: MemoryLayout) -> np.ndarray:
    """The PIM-aware image of ``w`` (bytes of its contiguous region; padding is zero)."""
    w = _element_view(w, layout)
    rows, cols = w.shape
    shape = pim_aware_shape(layout, rows, cols)
    eb = layout.element_bytes
    image = np.zeros(shape.bytes // eb, dtype=w.dtype)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    image[pim_aware_address(layout, shape, r, c) // eb] = w
    return image.view(np.uint8)


def swizzled_copy(
    image: np.ndarray, layout: MemoryLayout, rows: int, cols: int, dtype: np.dtype | str
) -> np.ndarray:
    """The host-friendly image (column-major bytes) of the ``rows x cols`` matrix whose
    PIM-aware image is ``image``: for every destination element, in column-major order, the
    source is the PIM-aware address of its coordinates (PIM-SHERPA 4.2, Fig. 6)."""
    shape = pim_aware_shape(layout, rows, cols)
    dtype = _check_dtype(layout, dtype)
    src = _check_image(image, shape).view(dtype)
    c, r = np.divmod(np.arange(rows * cols, dtype=np.int64), rows)  # column-major order
    out = src[pim_aware_address(layout, shape, r, c) // layout.element_bytes]
    return out.view(np.uint8)


def pim_gemv(image: np.ndarray, layout: MemoryLayout, rows: int, cols: int, x: np.ndarray,
             dtype: np.dtype | str) -> np.ndarray:  # fmt: skip
    """``W @ x`` (float32 accumulation) from the PIM-aware image of ``W``, computed per bank:
    each burst's unit and bank burst index come from decoding its address, the unit's row
    group and the column from that index alone; lane ``l`` of a burst multiplies ``x[c]``
    into output row ``lanes g + l``."""
    shape = pim_aware_shape(layout, rows, cols)
    amap = layout.address_map
    x = np.asarray(x, dtype=np.float32)
    if x.shape != (cols,):
        raise LayoutError(f"x must have shape ({cols},), got {x.shape}")
    dtype = _check_dtype(layout, dtype)
    image = _check_image(image, shape)
    bursts = image.view(dtype).reshape(-1, layout.lanes).astype(np.float32)
    f = amap.decode(np.arange(bursts.shape[0], dtype=np.int64) * amap.burst_bytes)
    unit = amap.unit_of(f)
    index = f["row"] * amap.size("column") + f["column"]  # the bank's own burst number
    live = index < shape.bursts_per_unit  # the rest of the last DRAM row is padding
    local, col = np.divmod(index[live], cols)
    group = local * amap.units + unit[live]
    y = np.zeros((shape.padded_rows // layout.lanes, layout.lanes), dtype=np.float32)
    np.add.at(y, group, bursts[live] * x[col][:, None])
    return y.reshape(-1)[:rows]
