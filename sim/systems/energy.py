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

from pimphony.models.config import HardwareConfig
from pimphony.models.energy import (
    ChannelActivity,
    Energy,
    EnergyParams,
    background_energy,
    dynamic_energy,
)
from pimphony.models.xpu import XpuCost
from pimphony.models.xpu_config import XpuConfig

__all__ = [
    "PHASES",
    "energy_line",
    "energy_report",
    "gpu_energy",
    "hetero_energy",
    "pim_phase_energy",
    "xpu_energy",
]

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


def gpu_energy(
    device: XpuConfig,
    costs: Mapping[str, tuple[XpuCost, int]],
    phase_of: Mapping[str, str],
    scale: int,
    batch: int,
) -> dict[str, Any]:
    """The GPU step's ``energy`` block: ``scale`` (layers x GPUs) x each op's
    :func:`xpu_energy`, by phase (``phase_of[op]``, default ``other``); NVLink energy is not
    modelled."""
    if device.energy is None:
        return {"available": False, "why": f"xPU preset {device.name} has no [energy] section"}
    phases = {p: Energy() for p in PHASES}
    for key, (cost, count) in costs.items():
        e = xpu_energy(device, {key: (cost, count)})
        assert e is not None
        phase = phase_of.get(key, "other")
        phases[phase] = phases[phase] + e.scaled(scale)
    return energy_report(phases, batch, device.name, links="NVLink energy not modelled")


def hetero_energy(
    setup: Any,
    attention: ChannelActivity,
    pim_busy: int,
    cycles: int,
    link_bytes: int,
    cmd_cycles: int,
    params: EnergyParams | None = None,
) -> dict[str, Any]:
    """The xPU+PIM step's ``energy`` block (``setup`` a ``HeteroSetup``): FC GEMMs and vector
    ops on the xPU (:func:`xpu_energy`); attention kernels on the PIM modules (``attention``,
    their channel activity over every layer and module), background of every PIM
    channel over the step (attention for ``pim_busy`` cycles on each module, idle and
    precharged the rest of ``cycles``), softmax FLOPs on the EPU; Q/K/V and outputs
    (``link_bytes``) and static-memory commands (``cmd_cycles`` of host link) over the host
    link."""
    from pimphony.compiler.llm import GEMV_OPS
    from pimphony.compiler.plan import KvHeads
    from pimphony.models.energy import load_energy
    from pimphony.models.hub import SOFTMAX_FLOPS_PER_SCORE
    from pimphony.sim.systems.costs import layer_costs

    pim, dev = setup.pim, setup.xpu
    cfg, spec = pim.hw, pim.model
    params = params or load_energy()
    if dev.energy is None:
        return {"available": False, "why": f"xPU preset {dev.name} has no [energy] section"}
    chips = params.chips(cfg)
    n_ch = chips * params.channels_per_chip
    fc: dict[str, tuple[XpuCost, int]] = {}
    vec: dict[str, tuple[XpuCost, int]] = {}
    for i, mb in enumerate(setup.batches):
        # each xPU's ops of a layer (sim.systems.costs), every layer and xPU: GEMMs to fc
        n = setup.xpus
        for key, (cost, count) in layer_costs(spec, dev, len(mb), n, kv=KvHeads.REPLICATE).items():
            (fc if key in GEMV_OPS else vec)[f"{key}.{i}"] = (cost, count * spec.layers * n)
    softmax_flops = SOFTMAX_FLOPS_PER_SCORE * spec.heads * sum(pim.lengths) * spec.layers
    att_cc = pim.tp * n_ch * pim_busy
    all_cc = pim.modules * n_ch * cycles
    xfc = xpu_energy(dev, fc)
    xvec = xpu_energy(dev, vec)
    assert xfc is not None and xvec is not None
    host = link_bytes + cmd_cycles * cfg.module.host_link_gbps / cfg.module.freq_ghz
    phases = {
        "fc": xfc,
        "attention": pim_phase_energy(cfg, params, attention, att_cc, softmax_flops),
        "other": pim_phase_energy(cfg, params, ChannelActivity.zero(), all_cc - att_cc)
        + xvec
        + Energy(links=params.link_pj(host, "host")),
    }
    return energy_report(
        phases, len(pim.lengths), f"{params.name} + {dev.name}", chips_per_module=chips
    )


def energy_line(block: Mapping[str, Any]) -> str:
    """One text line of a report's ``energy`` block (or why there is none)."""
    if not block:
        return "energy: not computed"
    if not block.get("available", True):
        return f"energy: n/a ({block['why']})"
    ph, pt = block["phases"], block["parts"]
    parts = ", ".join(f"{name} {pt[key]:.4g}" for key, name in _PART_NAMES)
    if isinstance(block.get("links"), str):  # a part not modelled (GPU: NVLink)
        parts += f" ({block['links']})"
    return (
        f"energy ({block['preset']}): {block['joules_per_token']:.4g} J/token, "
        f"{block['joules_per_step']:.4g} J/step: FC {ph['fc']['total']:.4g} J, attention "
        f"{ph['attention']['total']:.4g} J (background "
        f"{100 * block['attention_background_share']:.1f}%), other {ph['other']['total']:.4g} J\n"
        f"  by part, J/step: {parts}"
    )


#: The parts of an energy block as the text report names them.
_PART_NAMES = (
    ("mac", "MAC"),
    ("io", "I/O"),
    ("activation", "ACT/PRE"),
    ("background", "background"),
    ("epu", "EPU"),
    ("xpu", "xPU"),
    ("links", "links"),
)
