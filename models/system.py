"""A multi-module PIM system: links between modules, TP all-reduce and the pipeline period.

Modules are grouped into nodes of ``module.modules_per_node``; inside a node they share the
host link (``module.host_link_gbps``), between nodes the inter-node link
(``module.internode_link_gbps``). Tensor-parallel partial sums go up to the host and back; a
pipeline stage hands its activation vector to the next stage through the host, adding the
inter-node link when the two stages sit in different nodes. Stages process micro-batches in
turn, so a decode step of the whole batch takes the cyclic pipeline period (``docs/decode.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pimphony.models.config import HardwareConfig
from pimphony.models.hub import link_cycles

__all__ = ["PipelinePeriod", "allreduce_cycles", "pipeline_period", "stage_hop_cycles"]


def allreduce_cycles(cfg: HardwareConfig, nbytes: int, tp: int) -> int:
    """Partial sums up to the host and the sum back down, per all-reduce."""
    if tp == 1:
        return 0
    cycles = 2 * link_cycles(cfg, nbytes, "host")
    if tp > cfg.module.modules_per_node:
        cycles += 2 * link_cycles(cfg, nbytes, "internode")
    return cycles


def stage_hop_cycles(cfg: HardwareConfig, nbytes: int, stage: int, pp: int, tp: int) -> int:
    """Cycles to hand ``nbytes`` from pipeline ``stage`` to the next (the last returns to the
    host): up and down the host link, plus the inter-node link between stages in two nodes."""
    per_node = cfg.module.modules_per_node
    first_here, first_next = stage * tp, (stage + 1) * tp
    crosses = stage + 1 == pp or first_here // per_node != first_next // per_node
    hop = 2 * link_cycles(cfg, nbytes, "host")
    if crosses and stage + 1 < pp:
        hop += link_cycles(cfg, nbytes, "internode")
    return hop


@dataclass(frozen=True)
class PipelinePeriod:
    """The cyclic period of a pipelined decode step and the two bounds it is the max of."""

    busiest_stage: int
    round_trip: int

    @property
    def cycles(self) -> int:
        """``max(busiest stage, slowest micro-batch round trip including links)``."""
        return max(self.busiest_stage, self.round_trip)


def pipeline_period(stage_time: np.ndarray, link_time: np.ndarray) -> PipelinePeriod:
    """Period of ``stage_time[micro_batch, stage]`` compute and ``link_time`` hand-offs."""
    return PipelinePeriod(
        busiest_stage=int(stage_time.sum(axis=0).max()),
        round_trip=int((stage_time + link_time).sum(axis=1).max()),
    )
