"""Registry of the RTL blocks: constructor, TLM twin and build sizes of every :class:`Block`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from amaranth.back import verilog
from amaranth.lib import wiring
from pimphony.models.channel import SCHEDULERS
from pimphony.models.config import HardwareConfig
from pimphony.rtl import EMITTED, Block
from pimphony.rtl.bank_slice import BankSliceController
from pimphony.rtl.dcs import DcsScheduler
from pimphony.rtl.dpa import DpaDispatcher, DpaPipeline
from pimphony.rtl.pingpong import PingPongScheduler
from pimphony.rtl.static_sched import StaticScheduler

__all__ = [
    "BLOCKS",
    "BLOCK_OF_SCHEDULER",
    "DPA_AREA_ENTRIES",
    "EMITTED",
    "SCHEDULER_OF_BLOCK",
    "Block",
    "BlockSpec",
    "component_verilog",
    "generate_verilog",
]

DPA_AREA_ENTRIES = 256
"""Command-buffer words and VA2PA entries the DPA block is synthesised with: its two 96 KB
buffers are SRAM macros, counted in bytes at the preset's size (``dpa_buffers``), not
turned into flip-flops."""


@dataclass(frozen=True)
class BlockSpec:
    """One RTL block: how to build it and what it is checked against.

    ``build(cfg, **kwargs)`` is the Amaranth component; built with the config alone it has
    its hardware sizes (``pimphony rtl``). ``twin`` is the TLM it must match: the
    :func:`models.channel.run_channel` scheduler name of a scheduler block, else the models
    function. ``cosim_args`` and ``area_args`` are the constructor arguments, on top of the
    config, of the co-simulation build and of the synthesis build (``pimphony area``).
    """

    name: Block
    build: Callable[..., wiring.Component]
    twin: str
    cosim_args: Mapping[str, Any] = field(default_factory=dict)
    area_args: Mapping[str, Any] = field(default_factory=dict)


BLOCKS: dict[Block, BlockSpec] = {
    spec.name: spec
    for spec in (
        BlockSpec(Block.STATIC_SCHED, StaticScheduler, "static"),
        # 512-entry queues for co-simulation. The TLM never back-pressures the input, so to
        # match it cycle for cycle the queues must hold every command accepted and not yet
        # issued; the largest co-simulated stream, a 256 x 1024 GEMV, keeps 504 MACs waiting.
        # The hardware default is ``dcs.queue_depth`` (64 at the presets), with which long
        # streams stall the input.
        BlockSpec(Block.PINGPONG, PingPongScheduler, "pingpong", cosim_args={"depth": 512}),
        BlockSpec(Block.DCS, DcsScheduler, "dcs"),
        BlockSpec(
            Block.DPA,
            DpaDispatcher,
            "pimphony.models.dpa.dispatcher.Dispatcher",
            area_args={"command_words": DPA_AREA_ENTRIES, "map_entries": DPA_AREA_ENTRIES},
        ),
        BlockSpec(
            Block.BANK_SLICE, BankSliceController, "pimphony.models.bank_slice.run_bank_slice"
        ),
        BlockSpec(Block.DPA_PIPELINE, DpaPipeline, "pimphony.models.dpa.dispatcher.run_pipeline"),
    )
}
"""Every block, in :class:`Block` order (:data:`EMITTED` are the ones written and synthesised)."""

SCHEDULER_OF_BLOCK: dict[Block, str] = {
    b: spec.twin for b, spec in BLOCKS.items() if spec.twin in SCHEDULERS
}
"""The TLM scheduler each scheduler block must match cycle for cycle."""
BLOCK_OF_SCHEDULER: dict[str, Block] = {sched: b for b, sched in SCHEDULER_OF_BLOCK.items()}
"""The RTL block implementing each TLM scheduler."""


def component_verilog(component: wiring.Component, block: str) -> str:
    """Verilog text of ``component`` with top module ``block`` (no source locations)."""
    return verilog.convert(component, name=str(block), emit_src=False)


def generate_verilog(block: str, cfg: HardwareConfig, **kwargs) -> str:
    """Verilog text of ``block`` built for ``cfg``; the top module is named ``block``.

    ``kwargs`` go to the block's constructor (e.g. ``**BLOCKS[block].cosim_args``).
    """
    if block not in BLOCKS:
        raise ValueError(f"block {block!r} is unknown; allowed: {', '.join(BLOCKS)}")
    return component_verilog(BLOCKS[Block(block)].build(cfg, **kwargs), block)
