"""Energy of PIM-SHERPA's prefill and decode on LPDDR5X-PIM (``pimphony sherpa --energy``,
``docs/energy.md``), beside its timing (:mod:`sim.sherpa_timing`).

PIM-SHERPA gives no energy; this charges what the timing runs with a ``kind = "lpddr"`` preset
(``configs/energy/lpddr5x-pim.toml``):

- **PIM GEMVs** (decode's weight matrices, the LM head): every slice's stream of
  :func:`compiler.pim_gemv.lower_gemv` classified and converted as an HBM-PIM stream
  (:func:`models.energy.hbm_pim_energy`: MAC triggers x units x lanes x ALU + each unit's
  column read, register and host I/O, bank activations, standby by residency);
- **host DRAM traffic** (prefill GEMMs and attention, decode attention, the host-only
  system's GEMVs, the swizzled copies): the cost model's DRAM bytes streamed over the normal
  path (:meth:`models.energy.HbmEnergyParams.host_access`: activation, cell column, on-die
  wires, package pins);
- **background** of the host phases: every channel active for the time its bus needs to move
  those bytes at peak bandwidth, precharged the rest of the phase;
- **xPU**: the host CPU's ``[energy]``; ``pimsherpa-cpu`` has none, so its compute energy is
  reported as unavailable and counted as 0 (the comparison PIM vs host-only is of DRAM
  energy; the CPU's GEMV FLOPs are the same work PIM does, so leaving them out favours the
  host-only system).

The swizzled copies (S-DDB, S-OWR) move all weights ``dram_transactions`` times per prefill
(the timing's SMC rule).
"""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pimphony.compiler.llm import ModelSpec, weight_matrices
from pimphony.compiler.pim_gemv import lower_gemv
from pimphony.models.backends import BackendConfig, load_backend
from pimphony.models.energy import (
    Energy,
    EnergyConfigError,
    HbmEnergyParams,
    hbm_pim_activity,
    hbm_pim_energy,
    load_energy,
)
from pimphony.models.fileio import pyplot, write_figure
from pimphony.models.hbm_pim import time_stream
from pimphony.models.xpu import XpuCost, attention_cost, gemm_cost, gemv_cost
from pimphony.models.xpu_config import XpuConfig, load_xpu
from pimphony.sim.sherpa_timing import (
    Prefill,
    SherpaHost,
    gemm_device,
    gemv_slices,
    load_sherpa_host,
)
from pimphony.sim.systems.energy import xpu_energy

if TYPE_CHECKING:  # annotations only
    from pimphony.models.energy import HbmPimActivity

__all__ = [
    "SWEPT",
    "decode_energy",
    "energy_rows",
    "format_energy",
    "host_phase_energy",
    "pim_gemv_energy",
    "plot_sensitivity",
    "prefill_energy",
    "sensitivity",
    "sherpa_params",
]

#: The preset values that are choices (no public LPDDR5X number), swept by
#: :func:`sensitivity`: label -> the ``[values]`` keys scaled together.
SWEPT: dict[str, tuple[str, ...]] = {
    "package I/O (dq_energy)": ("dq_energy",),
    "standby powers": ("act_standby_power", "pre_standby_power"),
    "on-die wires (BG mux, GIO)": ("bank_to_bg_mux_energy", "bg_mux_to_gio_energy"),
    "cell array (ACT, column)": ("cell_act_energy", "cell_column_energy"),
    "PIM MAC (alu_energy)": ("alu_energy",),
}


def sherpa_params(backend: BackendConfig, preset: str | None) -> HbmEnergyParams:
    """The preset for ``backend`` (default: the one named like it), refused if not a per-bit
    kind or if its package count does not fit the device."""
    params = load_energy(preset or backend.name)
    if not isinstance(params, HbmEnergyParams):
        raise EnergyConfigError(
            f"energy preset {params.name} is of kind {str(params.kind)!r}; the HBM-PIM-style "
            f"back end {backend.name} needs a per-bit kind ('lpddr' or 'hbm')"
        )
    params.chips(backend)
    return params


@cache
def _gemv_activity(backend: str, rows: int, din: int) -> tuple[HbmPimActivity, int]:
    """(activity over every channel the GEMV uses, its cycles) of one lowered slice."""
    cfg = load_backend(backend)
    k = lower_gemv(cfg, rows, din)
    tl = time_stream(cfg, k.stream)
    lay = k.layout
    act = hbm_pim_activity(
        cfg, k.stream, k.payload, tl.issue, tl.cycles, lay.mac_triggers, lay.channels
    )
    return act, tl.cycles


def pim_gemv_energy(
    backend: BackendConfig, dout: int, din: int, params: HbmEnergyParams
) -> tuple[Energy, float]:
    """(energy in pJ, seconds) of one decode GEMV ``(dout x din)`` on PIM: every slice of
    :func:`sim.sherpa_timing.gemv_slices` run on its channels; channels a slice leaves idle
    stand by precharged."""
    assert backend.timing is not None
    f = backend.timing.freq_ghz
    total, cycles = Energy(), 0
    for rows in gemv_slices(backend.name, dout, din):
        act, c = _gemv_activity(backend.name, rows, din)
        idle = (backend.groups - act.groups) * c * params.standby_mw(backend)[1] / f
        total = total + hbm_pim_energy(act, backend, params) + Energy(background=idle)
        cycles += c
    return total, cycles / (f * 1e9)


def host_phase_energy(
    backend: BackendConfig,
    params: HbmEnergyParams,
    device: XpuConfig,
    costs: dict[str, tuple[XpuCost, int]],
    seconds: float | None = None,
) -> Energy:
    """A phase of host work (op -> (cost, count)): its DRAM bytes over the normal path, the
    xPU's own energy (0 without ``[energy]``), and every channel's standby over ``seconds``
    (default the costs' time): active while the bus moves the bytes at the device's peak
    bandwidth, precharged the rest."""
    nbytes = sum(n * c.bytes for c, n in costs.values())
    secs = sum(n * c.seconds for c, n in costs.values()) if seconds is None else seconds
    busy = min(secs, nbytes / (device.memory.bandwidth_gbps * 1e9))
    p_act, p_pre = params.standby_mw(backend)
    ns = 1e9 * backend.groups
    background = ns * (p_act * busy + p_pre * (secs - busy))  # mW x ns = pJ
    xpu = xpu_energy(device, costs) or Energy()
    return params.host_access(nbytes) + xpu + Energy(background=background)


def decode_energy(
    spec: ModelSpec,
    device: XpuConfig,
    context: int,
    backend: BackendConfig,
    params: HbmEnergyParams,
    on_pim: bool,
) -> dict[str, Energy]:
    """One decode step at ``context`` tokens, pJ by phase: the weight GEMVs and the LM head
    (on PIM if ``on_pim``, else the host's DRAM reads) and the host's attention (the KV cache
    read), as :func:`sim.sherpa_timing.decode_seconds` times them."""
    mats = weight_matrices(spec)
    if on_pim:
        gemv = Energy()
        for o, i in mats.values():
            gemv = gemv + pim_gemv_energy(backend, o, i, params)[0]
        head = pim_gemv_energy(backend, spec.vocab_size, spec.hidden, params)[0]
    else:
        costs = {k: (gemv_cost(device, 1, i, o), 1) for k, (o, i) in mats.items()}
        gemv = host_phase_energy(backend, params, device, costs)
        head = host_phase_energy(
            backend, params, device, {"lm_head": (gemv_cost(device, 1, spec.hidden,
                                                              spec.vocab_size), 1)}
        )  # fmt: skip
    if not spec.vocab_size:
        head = Energy()
    attn = attention_cost(device, [context], spec.heads, spec.kv_heads, spec.head_dim)
    return {
        "gemv": gemv.scaled(spec.layers),
        "lm_head": head,
        "attention": host_phase_energy(backend, params, device, {"attention": (attn, 1)}).scaled(
            spec.layers
        ),
    }


def prefill_energy(
    way: Prefill,
    spec: ModelSpec,
    host: SherpaHost,
    sl: int,
    backend: BackendConfig,
    params: HbmEnergyParams,
    ttft_s: float,
    on_pim: bool,
) -> dict[str, Energy]:
    """Prefill of ``sl`` tokens (``ttft_s`` long), pJ by phase: the GEMMs and attention of
    every layer on the GEMM cores, the swizzled copies ``way`` needs (all weights x
    ``dram_transactions``), the LM head on the last token (PIM if ``on_pim``); standby of the
    channels over the host's part of the TTFT."""
    dev, full = gemm_device(host), load_xpu(host.host_xpu)
    mats = weight_matrices(spec)
    costs = {k: (gemm_cost(dev, sl, i, o), spec.layers) for k, (o, i) in mats.items()}
    hd = spec.head_dim
    costs["attention"] = (gemm_cost(dev, sl, hd, sl), spec.layers * spec.heads)
    costs["attention.sv"] = (gemm_cost(dev, sl, sl, hd), spec.layers * spec.heads)
    weight_bytes = spec.layers * sum(o * i for o, i in mats.values()) * spec.element_bytes
    copy_bytes = 0 if way is Prefill.DIRECT else host.dram_transactions * weight_bytes
    if spec.vocab_size and on_pim:
        head, head_s = pim_gemv_energy(backend, spec.vocab_size, spec.hidden, params)
    elif spec.vocab_size:
        cost = gemv_cost(full, 1, spec.hidden, spec.vocab_size)
        head, head_s = (
            host_phase_energy(backend, params, full, {"lm_head": (cost, 1)}),
            cost.seconds,
        )
    else:
        head, head_s = Energy(), 0.0
    host_s = ttft_s - head_s
    nbytes = sum(n * c.bytes for c, n in costs.values()) + copy_bytes
    busy = min(host_s, nbytes / (full.memory.bandwidth_gbps * 1e9))
    p_act, p_pre = params.standby_mw(backend)
    background = 1e9 * backend.groups * (p_act * busy + p_pre * (host_s - busy))
    return {
        "gemm": params.host_access(sum(n * c.bytes for c, n in costs.values()))
        + (xpu_energy(dev, costs) or Energy()),
        "copy": params.host_access(copy_bytes),
        "lm_head": head,
        "standby": Energy(background=background),
    }


def _total(phases: dict[str, Energy]) -> Energy:
    out = Energy()
    for e in phases.values():
        out = out + e
    return out


def _block(phases: dict[str, Energy], tokens: int = 1) -> dict[str, Any]:
    total = _total(phases)
    return {
        "parts_j": total.to_dict("J"),
        "phases_j": {k: e.total * 1e-12 for k, e in phases.items()},
        "joules_per_token": total.total * 1e-12 / tokens,
    }


def energy_rows(
    spec: ModelSpec,
    host_name: str,
    timed: dict[str, Any],
    params: HbmEnergyParams,
    ways: dict[str, Prefill],
) -> dict[str, Any]:
    """The ``energy`` block of the SHERPA timing report ``timed`` (``pimphony sherpa --sl``):
    per input length, each strategy's prefill (``ways``: strategy key -> how it prefills) and
    the host-only one (J, per prefill token), and one decode step at that context on PIM and
    on the host alone."""
    host = load_sherpa_host(host_name)
    backend, device = load_backend(host.backend), load_xpu(host.host_xpu)
    rows = []
    for row in timed["rows"]:
        sl = row["sl"]
        prefill = {
            key: _block(
                prefill_energy(ways[key], spec, host, sl, backend, params, r["ttft_s"],
                               on_pim=True),
                sl,
            )
            for key, r in row["strategies"].items()
        }  # fmt: skip
        base = prefill_energy(
            Prefill.DIRECT, spec, host, sl, backend, params, row["host_only"]["ttft_s"], False
        )
        rows.append({
            "sl": sl,
            "prefill": prefill,
            "host_only_prefill": _block(base, sl),
            "decode": {
                "pim": _block(decode_energy(spec, device, sl, backend, params, True)),
                "host": _block(decode_energy(spec, device, sl, backend, params, False)),
            },
        })  # fmt: skip
    why = None if device.energy else f"xPU preset {device.name} has no [energy] section"
    return {"preset": params.name, "xpu_unavailable": why, "rows": rows}


def format_energy(e: dict[str, Any], labels: dict[str, str]) -> str:
    """Text lines of :func:`energy_rows` (``labels``: strategy key -> name)."""
    note = f"; CPU compute energy n/a ({e['xpu_unavailable']})" if e["xpu_unavailable"] else ""
    lines = [f"energy ({e['preset']}{note}):", "prefill J (mJ per prompt token):"]
    keys = list(e["rows"][0]["prefill"])
    lines.append(f"{'SL':>5} " + " ".join(f"{labels[k]:>17}" for k in keys) + f" {'host-only':>17}")
    for r in e["rows"]:
        cells = [r["prefill"][k] for k in keys] + [r["host_only_prefill"]]
        lines.append(
            f"{r['sl']:>5} "
            + " ".join(
                f"{c['parts_j']['total']:>8.3f} ({1e3 * c['joules_per_token']:>6.2f})"
                for c in cells
            )
        )
    lines.append("decode mJ per token at context SL: MAC / I/O / ACT+PRE / background")
    for r in e["rows"]:
        p, h = r["decode"]["pim"]["parts_j"], r["decode"]["host"]["parts_j"]
        lines.append(
            f"{r['sl']:>5}  PIM {1e3 * p['total']:.2f} ({1e3 * p['mac']:.2f} / "
            f"{1e3 * p['io']:.2f} / {1e3 * p['activation']:.2f} / {1e3 * p['background']:.2f});"
            f" host-only {1e3 * h['total']:.2f} ({1e3 * h['mac']:.2f} / {1e3 * h['io']:.2f} / "
            f"{1e3 * h['activation']:.2f} / {1e3 * h['background']:.2f}): "
            f"{h['total'] / p['total']:.2f}x"
        )
    return "\n".join(lines)


def sensitivity(
    spec: ModelSpec,
    host_name: str,
    context: int,
    params: HbmEnergyParams,
    factors: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0),
) -> dict[str, Any]:
    """Decode J per token at ``context`` on PIM and on the host alone with each of
    :data:`SWEPT`'s choices scaled by each of ``factors`` (the others as the preset)."""
    host = load_sherpa_host(host_name)
    backend, device = load_backend(host.backend), load_xpu(host.host_xpu)
    out: dict[str, Any] = {"context": context, "factors": list(factors), "curves": {}}
    for label, keys in SWEPT.items():
        pim, alone = [], []
        for k in factors:
            values = {**params.values, **{key: params.values[key] * k for key in keys}}
            p = dataclasses.replace(params, values=values)
            pim.append(_total(decode_energy(spec, device, context, backend, p, True)).total)
            alone.append(_total(decode_energy(spec, device, context, backend, p, False)).total)
        out["curves"][label] = {
            "keys": list(keys),
            "pim_j": [x * 1e-12 for x in pim],
            "host_j": [x * 1e-12 for x in alone],
        }
    return out


def plot_sensitivity(s: dict[str, Any], title: str, path: Path) -> Path:
    """Decode energy per token on PIM and host-only, and their ratio, vs each choice's scale."""
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    x = s["factors"]
    for i, (label, c) in enumerate(s["curves"].items()):
        colour = f"C{i}"
        a.plot(x, [1e3 * v for v in c["pim_j"]], "o-", color=colour, label=f"{label}, PIM")
        a.plot(x, [1e3 * v for v in c["host_j"]], "s--", color=colour, label=f"{label}, host")
        b.plot(x, [h / p for h, p in zip(c["host_j"], c["pim_j"], strict=True)], "o-",
               color=colour, label=label)  # fmt: skip
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("value / preset value")
        ax.grid(alpha=0.3)
    a.set_ylabel("decode energy (mJ per token)")
    a.set_title(f"decode at context {s['context']}: PIM (solid) vs host-only (dashed)")
    a.legend(fontsize=6)
    b.set_ylabel("host-only / PIM energy per token")
    b.set_title("energy saving of PIM decode")
    b.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return write_figure(fig, path)
