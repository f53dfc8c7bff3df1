"""Amaranth descriptions of the PIM controller blocks.

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
