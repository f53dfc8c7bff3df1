"""Energy of a decode step (``docs/energy.md``): PIM modules, the xPU, links; per phase.

The PIM side adds, per phase (``fc``: the weight GEMVs; ``attention``: QK^T, softmax, SV;
``other``: everything else of the step period), the dynamic energy of every channel kernel
the step runs (:func:`models.energy.dynamic_energy` of their summed statistics) and the
background of every channel of every module over the phase's time. A phase lasts, on each of
its stage's ``tp`` modules, what the step report's ``ops`` cycles say (the critical path;
summed over stages and micro-batches); its channels are active for the active residency of
their kernels and precharged for the rest (idle channels close their rows: their last ACT's
PRE is charged with it). ``other`` is the rest of ``modules x channels x period``: EPU-only
work, all-reduces, command transfers, pipeline bubbles, all precharged standby.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from models.config import HardwareConfig
from models.energy import (
    ChannelActivity,
    Energy,
    EnergyParams,
    background_energy,
    dynamic_energy,
)
from models.xpu import XpuCost
from models.xpu_config import XpuConfig

__all__ = ["PHASES", "energy_report", "pim_phase_energy", "xpu_energy"]

#: The phases of a step's energy, as PIMphony Fig. 16 splits it (FC vs attention) plus the rest.
PHASES = ("fc", "attention", "other")


def pim_phase_energy(
    cfg: HardwareConfig,
    params: EnergyParams,
    activity: ChannelActivity,
    channel_cycles: int,
    epu_flops: float = 0.0,
) -> Energy:
    """One phase on PIM channels: dynamic energy of ``activity``, background of
    ``channel_cycles`` channel-cycles (its kernels' active residency active, the rest
    precharged) and ``epu_flops`` on the EPU."""
    precharged = channel_cycles - activity.active_cycles
    if precharged < 0:
        raise ValueError(
            f"phase of {channel_cycles} channel-cycles holds {activity.active_cycles} active ones"
        )
    d = dynamic_energy(activity, cfg, params)
    return Energy(
        mac=d.mac,
        io=d.io,
        activation=d.activation,
        background=background_energy(activity.active_cycles, precharged, cfg, params),
        epu=epu_flops * params.values["epu_energy"],
    )


def xpu_energy(device: XpuConfig, costs: Mapping[str, tuple[XpuCost, int]]) -> Energy | None:
    """xPU energy of ``costs`` (op -> (cost, count)), pJ: issued FLOPs x ``pj_per_flop`` + DRAM
    bytes x ``pj_per_dram_byte`` of the device's ``[energy]`` section; ``None`` without one."""
    e = device.energy
    if e is None:
        return None
    flops = sum(n * c.issued_flops for c, n in costs.values())
    nbytes = sum(n * c.bytes for c, n in costs.values())
    return Energy(xpu=flops * e.pj_per_flop + nbytes * e.pj_per_dram_byte)


def energy_report(
    phases: Mapping[str, Energy], batch: int, preset: str, **extra: Any
) -> dict[str, Any]:
    """The report's ``energy`` block: joules per phase and per part, per step and per token."""
    total = Energy()
    for e in phases.values():
        total = total + e
    att = phases.get("attention", Energy())
    parts = total.to_dict("J")
    return {
        "preset": preset,
        "unit": "J",
        "phases": {k: e.to_dict("J") for k, e in phases.items()},
        "parts": parts,
        "joules_per_step": parts["total"],
        "joules_per_token": parts["total"] / batch,
        "attention_background_share": att.background / att.total if att.total else 0.0,
        **extra,
    }
