"""Links, all-reduce and the pipeline period of a multi-module system (models/system.py)."""

from __future__ import annotations

import numpy as np
from pimphony.models.hub import link_cycles
from pimphony.models.system import allreduce_cycles, pipeline_period, stage_hop_cycles


def test_allreduce_goes_up_and_down_the_host_link(cfg):
    host = link_cycles(cfg, 8192, "host")
    assert allreduce_cycles(cfg, 8192, 1) == 0
    assert allreduce_cycles(cfg, 8192, 2) == 2 * host
    per_node = cfg.module.modules_per_node
    inter = link_cycles(cfg, 8192, "internode")
    assert allreduce_cycles(cfg, 8192, 2 * per_node) == 2 * host + 2 * inter


def test_stage_hops_cross_nodes_only_between_nodes(cfg):
    per_node = cfg.module.modules_per_node
    host, inter = link_cycles(cfg, 4096, "host"), link_cycles(cfg, 4096, "internode")
    # Stages of per_node // 2 modules: stage 0 -> 1 stays in node 0, stage 1 -> 2 crosses.
    tp = per_node // 2
    assert stage_hop_cycles(cfg, 4096, 0, 4, tp) == 2 * host
    assert stage_hop_cycles(cfg, 4096, 1, 4, tp) == 2 * host + inter
    # The last stage returns to the host: no inter-node hop.
    assert stage_hop_cycles(cfg, 4096, 3, 4, tp) == 2 * host


def test_pipeline_period_is_the_larger_bound():
    stage = np.array([[3, 5], [4, 1]])
    links = np.ones((2, 2), dtype=np.int64)
    p = pipeline_period(stage, links)
    # Busiest stage: max(3 + 4, 5 + 1) = 7; slowest round trip: max(3+5+2, 4+1+2) = 10.
    assert (p.busiest_stage, p.round_trip, p.cycles) == (7, 10, 10)
    p = pipeline_period(np.array([[9, 1], [9, 1]]), np.zeros((2, 2), dtype=np.int64))
    assert (p.busiest_stage, p.round_trip, p.cycles) == (18, 10, 18)
