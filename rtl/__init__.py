"""Amaranth descriptions of the PIM controller blocks; imports only :mod:`pimphony.models`.

Each block is the twin of a :mod:`pimphony.models` file and is checked cycle for cycle
against it by :mod:`pimphony.sim.verify`: ``static_sched``, ``pingpong``, ``dcs``, ``dpa``
(the DPA dispatcher), ``bank_slice`` (LibraPIM's dual-path execution); ``common`` shared
layouts and helpers; ``blocks`` the one ``BLOCKS`` table (builder, TLM twin, co-simulation
and area arguments).

:class:`Block` names them; importing this package loads no Amaranth (the command line reads
the names to build its options). The table of blocks is :data:`rtl.blocks.BLOCKS`.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["EMITTED", "Block"]


class Block(StrEnum):
    """Name of an RTL block, also its Verilog top-module name."""

    STATIC_SCHED = "static_sched"
    PINGPONG = "pingpong"
    DCS = "dcs"
    DPA = "dpa"
    BANK_SLICE = "bank_slice"
    DPA_PIPELINE = "dpa_pipeline"


EMITTED: tuple[Block, ...] = tuple(b for b in Block if b is not Block.DPA_PIPELINE)
"""Blocks ``pimphony rtl`` writes and ``pimphony area`` synthesises, in that order; the DPA
pipeline (dispatcher feeding a DCS) is a composite built for co-simulation only."""
