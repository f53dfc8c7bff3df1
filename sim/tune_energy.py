"""Energy of a DCC draft (``pimphony tune --energy``, ``docs/energy.md``).

A draft's time (:class:`compiler.dcc.cost.DraftCost`) is rearrangement in + compute +
rearrangement out + host additions. Its energy has the same phases, each from the streams the
timing runs, converted by the back end's energy preset (:mod:`models.energy`):

- **compute**: the worst group's share lowered to one group's stream (the timing's
  convention: every group the draft uses runs it), its commands, activations and residency
  -> energy (HBM-PIM: :func:`~models.energy.hbm_pim_energy`, MAC triggers counted by running
  the stream on zero data; AttAcc: :func:`~models.energy.attacc_energy`; AiM: the channel
  TLM's statistics of the stream, :func:`~models.energy.run_energy`, the conversion of
  ``pimphony run --energy``), x the groups used;
- **rearrange_in** / **rearrange_out**: the single-bank writes that lay the non-resident
  inputs out in each used group and the reads of the results (the access streams the timing
  times), converted alike (AiM: :meth:`~models.energy.EnergyParams.bank_access` on the counts
  of :func:`compiler.rearrange.group_access_cycles`, the channel counted active throughout);
- **host**: the host xPU reading the host-layout inputs from its memory and writing the
  results back (bytes x ``pj_per_dram_byte``) and its additions (issued FLOPs x
  ``pj_per_flop`` + their DRAM bytes), from the ``[energy]`` of the back end's host preset
  (absent: reported as unavailable, counted as 0);
- **idle**: precharged standby of every group-cycle of the system (all devices) over the
  draft's end-to-end time that no stream above covers.

No link energy: DCC's PIM devices are the host GPU's own memory (DCC V), so host <-> PIM
traffic crosses the devices' interposer, which the per-bit path already charges.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from pimphony.compiler.dcc.cost import RESIDENT, DraftCost, Placement, host_costs, share_program
from pimphony.compiler.dcc.lowering import GroupProgram
from pimphony.models.backends import BackendConfig, BackendKind, PimDtype
from pimphony.models.config import HardwareConfig
from pimphony.models.energy import (
    DEFAULT_ENERGY,
    ActBasis,
    AttAccEnergyParams,
    Energy,
    EnergyConfigError,
    EnergyParams,
    HbmEnergyParams,
    available_energy_presets,
    background_energy,
    load_energy,
    run_energy,
)
from pimphony.sim.systems.energy import xpu_energy

__all__ = [
    "ENERGY_OF",
    "PHASES",
    "DraftEnergy",
    "draft_energy",
    "energy_lines",
    "energy_params",
    "tune_energy",
]

#: The phases of a draft's energy: those of its time (:class:`compiler.dcc.cost.DraftCost`:
#: compute, rearrangement in and out, host additions) plus idle standby.
PHASES = ("compute", "rearrange_in", "rearrange_out", "host", "idle")


@dataclass(frozen=True)
class DraftEnergy:
    """Energy of one draft by phase (:data:`PHASES`), pJ; ``host_known`` is False when the
    host xPU preset has no ``[energy]`` (its phase is then 0)."""

    compute: Energy
    rearrange_in: Energy
    rearrange_out: Energy
    host: Energy
    idle: Energy
    host_known: bool

    @property
    def rearrange(self) -> Energy:
        """Both rearrangements."""
        return self.rearrange_in + self.rearrange_out

    @property
    def total(self) -> Energy:
        """Every phase added, by part (in :data:`PHASES` order)."""
        total = Energy()
        for p in PHASES:
            total = total + getattr(self, p)
        return total

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: pJ by part (``total`` their sum), pJ by phase, ``host_known``."""
        return {
            "pj": self.total.to_dict("pJ"),
            "phases_pj": {p: getattr(self, p).total for p in PHASES},
            "host_known": self.host_known,
        }


def _zero_payload(cfg: BackendConfig) -> np.ndarray:
    return np.zeros((1, cfg.core.lanes), np.uint16)


def _hbm_pim_run(
    cfg: BackendConfig, stream: np.ndarray, payload: np.ndarray, params: Any, basis: ActBasis
) -> tuple[Energy, int]:
    """(energy, cycles) of one HBM-PIM group running ``stream``; MAC triggers counted by
    executing it on zero data (values do not change which triggers MAC; a BF16 back end runs
    as FP16, which :func:`models.hbm_pim.execute` supports)."""
    from pimphony.models.energy import hbm_pim_activity, hbm_pim_energy
    from pimphony.models.hbm_pim import PimState, execute, time_stream

    tl = time_stream(cfg, stream)
    fp16 = cfg
    if cfg.core.dtype is not PimDtype.FP16:
        fp16 = dataclasses.replace(cfg, core=dataclasses.replace(cfg.core, dtype=PimDtype.FP16))
    macs = execute(fp16, stream, payload, PimState.for_backend(fp16, 1)).macs
    act = hbm_pim_activity(cfg, stream, payload, tl.issue, tl.cycles, macs)
    return hbm_pim_energy(act, cfg, params, basis), tl.cycles


def _hbm_pim_compute(cfg, c: DraftCost, prog, params, basis) -> tuple[Energy, int]:
    from pimphony.compiler.dcc.hbm_pim_lowering import lower_group

    _, payload = lower_group(cfg, c.kernel, c.share.sizes, c.share.cores)  # the WRs' data
    return _hbm_pim_run(cfg, prog.stream, payload, params, basis)


def _hbm_pim_access(cfg, addresses, write, params, basis) -> tuple[Energy, int]:
    from pimphony.compiler.rearrange import access_stream
    from pimphony.models.hbm_pim import Op

    stream = access_stream(cfg, addresses, Op.WR if write else Op.RD)
    return _hbm_pim_run(cfg, stream, _zero_payload(cfg), params, basis)


def _attacc_run(cfg, stream, params, basis) -> tuple[Energy, int]:
    from pimphony.models.attacc import time_stream
    from pimphony.models.energy import attacc_activity, attacc_energy

    tl = time_stream(cfg, stream)
    act = attacc_activity(cfg, stream, tl.issue, tl.cycles)
    return attacc_energy(act, cfg, params, basis), tl.cycles


def _attacc_compute(cfg, c: DraftCost, prog, params, basis) -> tuple[Energy, int]:
    return _attacc_run(cfg, prog.stream, params, basis)


def _attacc_access(cfg, addresses, write, params, basis) -> tuple[Energy, int]:
    from pimphony.models import attacc

    op = attacc.Op.WR if write else attacc.Op.RD
    return _attacc_run(cfg, attacc.access_stream(cfg, addresses, op), params, basis)


def _aim_hardware(cfg: BackendConfig) -> HardwareConfig:
    from pimphony.compiler.dcc.aim_lowering import hardware

    return hardware(cfg)


def _aim_compute(cfg, c: DraftCost, prog, params, basis) -> tuple[Energy, int]:
    """One AiM channel running the group's stream: the channel TLM's statistics (the run
    :func:`compiler.dcc.aim_lowering.lower_group` times, same scheduler) converted as ``pimphony
    run --energy`` converts a channel run (:func:`~models.energy.run_energy`)."""
    from pimphony.compiler.dcc.aim_lowering import SCHEDULER
    from pimphony.models.channel import run_channel

    hw = _aim_hardware(cfg)
    res = run_channel(prog.stream, hw, SCHEDULER, validate=False, record=False)
    assert res.cycles == prog.cycles, (res.cycles, prog.cycles)
    return run_energy(res.to_dict(), hw, params), res.cycles


def _aim_access(cfg, addresses, write, params, basis) -> tuple[Energy, int]:
    """One AiM channel's single-bank host accesses as the timing times them
    (:func:`compiler.rearrange.group_access_cycles`: columns and single-bank ACTs): each
    column a write or read burst plus the pins, each ACT one bank's ACT+PRE; the channel is
    counted in active standby for the whole run (a bank is open while its row's columns
    stream; bank_slice keeps no residency), which overstates by at most (active - precharged
    standby) x the run."""
    from pimphony.compiler.rearrange import group_access_cycles
    from pimphony.models.hbm_pim import Op

    hw = _aim_hardware(cfg)
    op = Op.WR if write else Op.RD
    cycles, counts = group_access_cycles(cfg, addresses, op)
    e = params.bank_access(hw, counts[op.name], counts["ACT"], write)
    return e + Energy(background=background_energy(cycles, 0, hw, params)), cycles


@dataclass(frozen=True)
class _KindEnergy:
    """How one back-end kind's streams become energy: the preset class it needs, one group's
    compute stream, one group's single-bank accesses, the preset used when none is named
    (``None``: the one named like the back end)."""

    params: type[EnergyParams] | type[HbmEnergyParams]
    compute: Callable[..., tuple[Energy, int]]
    access: Callable[..., tuple[Energy, int]]
    default: str | None = None


#: Each back-end kind with a command-level model and DCC lowerings. AiM's default preset is
#: ``pimphony run``'s (CENT's GDDR6-PIM powers) unless a preset is named like the back end.
ENERGY_OF: dict[BackendKind, _KindEnergy] = {
    BackendKind.HBM_PIM: _KindEnergy(HbmEnergyParams, _hbm_pim_compute, _hbm_pim_access),
    BackendKind.ATTACC: _KindEnergy(AttAccEnergyParams, _attacc_compute, _attacc_access),
    BackendKind.AIM: _KindEnergy(EnergyParams, _aim_compute, _aim_access, DEFAULT_ENERGY),
}


def _unit_cfg(cfg: BackendConfig) -> BackendConfig | HardwareConfig:
    """What the preset's per-group values and chip counts are taken on: an AiM back end's
    hardware preset (a group is one of its channels), else the back end."""
    return _aim_hardware(cfg) if cfg.kind is BackendKind.AIM else cfg


def energy_params(cfg: BackendConfig, preset: str | None) -> EnergyParams | HbmEnergyParams:
    """The energy preset for back end ``cfg``: ``preset`` (a name or ``.toml``), or the preset
    named like the back end (AiM: else ``aim-cent``); refused
    (:class:`~models.energy.EnergyConfigError`, with what is allowed) if it is of the wrong
    kind or does not fit the device's stacks or chips."""
    if cfg.kind not in ENERGY_OF:
        allowed = ", ".join(k.value for k in ENERGY_OF)
        raise EnergyConfigError(
            f"back end {cfg.name} ({cfg.kind.value}): no stream energy model; allowed kinds: "
            f"{allowed}"
        )
    kind = ENERGY_OF[cfg.kind]
    if not preset:
        if cfg.name in available_energy_presets():
            preset = cfg.name
        elif kind.default is not None:
            preset = kind.default
        else:
            raise EnergyConfigError(
                f"back end {cfg.name}: no energy preset of the same name; give --energy NAME "
                f"({', '.join(available_energy_presets())}) or a .toml path"
            )
    params: EnergyParams | HbmEnergyParams = load_energy(preset)
    want = kind.params
    if not isinstance(params, want):
        raise EnergyConfigError(
            f"energy preset {params.name} is of kind {str(params.kind)!r}; back end {cfg.name} "
            f"({cfg.kind.value}) needs kind {str(want.kind)!r}"
        )
    params.chips(_unit_cfg(cfg))
    return params


def _moved(prog: GroupProgram, c: DraftCost, write: bool) -> np.ndarray:
    """One group's addresses the timing moves in (``write``: the non-resident inputs) or out
    (the results), as :func:`compiler.dcc.cost.draft_cost` selects them."""
    skip = RESIDENT[c.kernel] if c.placement is Placement.RESIDENT else frozenset()
    tensors = prog.inputs if write else prog.outputs
    arrays = [a for name, a in tensors.items() if len(a) and name not in skip]
    return np.unique(np.concatenate(arrays), axis=0) if arrays else np.zeros((0, 3), np.int64)


def draft_energy(
    cfg: BackendConfig,
    c: DraftCost,
    params: EnergyParams | HbmEnergyParams,
    basis: ActBasis = ActBasis.ROW,
) -> DraftEnergy:
    """Energy of draft cost ``c`` on back end ``cfg`` by phase (module docstring)."""
    kind = ENERGY_OF[cfg.kind]
    assert cfg.clock_ghz is not None
    groups = c.share.groups
    prog = share_program(cfg, c.kernel, c.share)
    per_group, used = kind.compute(cfg, c, prog, params, basis)
    compute = per_group.scaled(groups)
    moved = {}
    for write in (True, False):
        addresses = _moved(prog, c, write)
        e = Energy()
        if len(addresses):
            e, cycles = kind.access(cfg, addresses, write, params, basis)
            used += cycles
        moved[write] = e.scaled(groups)
    host_dev = cfg.host()
    costs = {
        k: (x, 1) for k, x in host_costs(cfg, c.kernel, c.sizes, c.share, prog.host_ops).items()
    }
    host_known = host_dev.energy is not None
    host = Energy()
    if host_known:
        assert host_dev.energy is not None
        dram = (c.bytes_in + c.bytes_out) * host_dev.energy.pj_per_dram_byte
        host = Energy(xpu=dram) + (xpu_energy(host_dev, costs) or Energy())
    f = cfg.clock_ghz
    idle_cycles = cfg.groups * c.total_s * f * 1e9 - groups * used
    pre_mw = params.standby_mw(_unit_cfg(cfg))[1]
    idle = Energy(background=pre_mw * max(idle_cycles, 0.0) / f)
    return DraftEnergy(compute, moved[True], moved[False], host, idle, host_known)


def tune_energy(
    cfg: BackendConfig,
    drafts: dict[str, DraftCost | None],
    preset: str | None,
    basis: ActBasis = ActBasis.ROW,
) -> dict[str, Any]:
    """The ``energy`` block of ``pimphony tune``: each named draft's :class:`DraftEnergy`
    (``None`` for a draft that cannot run) and the default's energy over the chosen's."""
    params = energy_params(cfg, preset)
    out: dict[str, Any] = {"preset": params.name, "act_basis": str(basis)}
    for name, c in drafts.items():
        out[name] = draft_energy(cfg, c, params, basis).to_dict() if c is not None else None
    if out.get("chosen") and out.get("default"):
        out["default_over_chosen"] = out["default"]["pj"]["total"] / out["chosen"]["pj"]["total"]
    return out


def energy_lines(block: dict[str, Any]) -> list[str]:
    """Text lines of :func:`tune_energy`'s block (microjoules)."""
    lines = [f"  energy ({block['preset']}, ACT/PRE per {block['act_basis']}):"]
    for name in ("chosen", "default"):
        d = block.get(name)
        if d is None:
            continue
        ph, pj = d["phases_pj"], d["pj"]
        host = "" if d["host_known"] else " (host xPU energy n/a)"
        lines.append(
            f"    {name:<8} {pj['total'] / 1e6:>10.3f} uJ = compute {ph['compute'] / 1e6:.3f} + "
            f"in {ph['rearrange_in'] / 1e6:.3f} + out {ph['rearrange_out'] / 1e6:.3f} + host "
            f"{ph['host'] / 1e6:.3f} + idle {ph['idle'] / 1e6:.3f}{host}; "
            f"MAC {pj['mac'] / 1e6:.3f}, I/O {pj['io'] / 1e6:.3f}, "
            f"ACT/PRE {pj['activation'] / 1e6:.3f}, background {pj['background'] / 1e6:.3f}, "
            f"EPU {pj['epu'] / 1e6:.3f}, xPU {pj['xpu'] / 1e6:.3f}"
        )
    if "default_over_chosen" in block:
        lines.append(f"    default / chosen energy: {block['default_over_chosen']:.2f}x")
    return lines
