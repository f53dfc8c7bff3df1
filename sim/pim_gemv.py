"""``pimphony pim-gemv``: one GEMV on a command-level PIM back end (``docs/dcc.md``).

Lowers ``Y = W @ X`` (PIM-SHERPA Algorithm 1) onto ``--channels`` pseudo-channels of the back
end, times the command stream and prints cycles, command counts, MAC utilisation (MAC
triggers against one per tCCD_L) and the weight bandwidth achieved; ``--check`` runs the
stream on values (small integers, exact in FP16) and compares with numpy; ``--rearrange`` adds
the time to lay the weights out in PIM layout and to read the results back
(:mod:`compiler.rearrange`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

import numpy as np
from pimphony.compiler.pim_gemv import lower_gemv, place_weights, read_outputs
from pimphony.compiler.rearrange import (
    Strategy,
    gemv_output_addresses,
    gemv_weight_addresses,
    rearrangement_cost,
)
from pimphony.models.backends import available_backends, load_backend
from pimphony.models.energy import (
    ActBasis,
    HbmEnergyParams,
    hbm_pim_activity,
    hbm_pim_energy,
    load_energy,
)
from pimphony.models.errors import PimphonyError
from pimphony.models.hbm_pim import Op, execute, time_stream
from pimphony.sim.cli import add_seed_option, bounded_int
from pimphony.sim.provenance import provenance

__all__ = ["CheckError", "add_arguments", "gemv_report", "run"]


class CheckError(PimphonyError, RuntimeError):
    """The functional run of a stream disagrees with numpy."""

    exit_status = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony pim-gemv``."""
    p.add_argument(
        "--backend",
        default="hbm-pim",
        help=f"back end ({', '.join(available_backends())}) or a .toml path",
    )
    p.add_argument("--dout", type=bounded_int(1, 1 << 20), default=4096, help="output rows")
    p.add_argument("--din", type=bounded_int(1, 1 << 20), default=4096, help="inputs")
    p.add_argument("--batch", type=bounded_int(1, 1024), default=1, help="input vectors")
    p.add_argument(
        "--channels",
        type=bounded_int(1, 1 << 16),
        default=None,
        help="pseudo-channels used; none: one device's",
    )
    p.add_argument("--check", action="store_true", help="run on values and compare with numpy")
    p.add_argument(
        "--rearrange",
        action="store_true",
        help="also time host layout -> PIM layout of the weights and the results' read-back",
    )
    add_seed_option(p, "seed of --check's values")
    p.add_argument(
        "--energy",
        metavar="PRESET",
        help="also report energy with this kind = hbm preset (e.g. hbm-pim) or .toml path",
    )
    p.add_argument(
        "--act-basis",
        choices=[str(b) for b in ActBasis],
        default=str(ActBasis.ROW),
        help="charge activation per opened row (default) or per bit moved (AttAcc's reading)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def gemv_report(
    backend: str,
    dout: int,
    din: int,
    batch: int = 1,
    channels: int | None = None,
    rearrange: bool = False,
    energy: str | None = None,
    act_basis: str = str(ActBasis.ROW),
) -> dict[str, Any]:
    """Cycles, counts, utilisation and bandwidth of one lowered GEMV (no values); with
    ``rearrange``, the weights' layout (staged and direct) and the results' read-back; with
    ``energy`` (a ``kind = "hbm"`` preset), its energy by part (``docs/energy.md``)."""
    cfg = load_backend(backend)
    k = lower_gemv(cfg, dout, din, batch=batch, channels=channels)
    tl = time_stream(cfg, k.stream)
    t, lay = cfg.timing, k.layout
    assert t is not None
    seconds = tl.cycles / (t.freq_ghz * 1e9)
    macs = lay.mac_triggers
    weight_bytes = dout * din * cfg.core.element_bytes
    peak = lay.channels * lay.units * cfg.group.column_bytes * t.freq_ghz / t.tCCD_L
    report = {
        "backend": cfg.name,
        "shape": {"dout": dout, "din": din, "batch": batch, "channels": lay.channels},
        "tiles": {
            "output": lay.out_tiles,
            "input": lay.in_tiles,
            "dout_padded": lay.dout_pad,
            "din_padded": lay.din_pad,
        },  # fmt: skip
        "cycles": tl.cycles,
        "time_us": seconds * 1e6,
        "commands": tl.counts,
        "mac_triggers": macs,
        "mac_utilisation": macs * t.tCCD_L / tl.cycles,
        "useful_fraction": dout * din / (lay.dout_pad * lay.din_pad),
        "weight_gbps": weight_bytes * batch / seconds / 1e9,
        "peak_gbps": peak,
        "rows_per_bank": lay.weight_rows + lay.result_rows,
    }
    if energy is not None:
        report["energy"] = _energy(cfg, k, tl, macs, energy, ActBasis(act_basis))
    if rearrange:
        weights = gemv_weight_addresses(lay)
        moves = {
            f"weights_{s}": rearrangement_cost(cfg, weights, lay.channels, Op.WR, s)
            for s in Strategy
        }
        moves["results_back"] = rearrangement_cost(
            cfg, gemv_output_addresses(lay), lay.channels, Op.RD
        )
        report["rearrange"] = {
            name: {
                "strategy": str(c.strategy),
                "bytes": c.bytes,
                "host_us": c.host_s * 1e6,
                "channel_us": c.channel_s * 1e6,
                "total_us": c.total_s * 1e6,
                "rounds": c.rounds,
                "channel_commands": c.channel_commands,
            }  # fmt: skip
            for name, c in moves.items()
        }
    return report


def _energy(cfg, k, tl, macs: int, preset: str, basis: ActBasis) -> dict[str, Any]:
    params = load_energy(preset)
    if not isinstance(params, HbmEnergyParams):
        raise PimphonyError(
            f"--energy {preset}: a {params.name!r} preset is not of kind 'hbm'; allowed: an "
            "HBM preset such as hbm-pim"
        )
    stacks = params.chips(cfg)
    act = hbm_pim_activity(cfg, k.stream, k.payload, tl.issue, tl.cycles, macs, k.layout.channels)
    e = hbm_pim_energy(act, cfg, params, basis)
    return {
        "preset": params.name,
        "act_basis": str(basis),
        "stacks_per_device": stacks,
        "pseudo_channels": act.groups,
        "bank_activations_per_channel": act.bank_activations,
        "accesses_per_channel": dict(act.accesses),
        "active_cycles": act.active_cycles,
        "precharged_cycles": act.precharged_cycles,
        "pj": e.to_dict("pJ"),
        "pj_per_mac": e.total / (macs * act.groups * (cfg.group.banks // cfg.core.banks)
                                 * cfg.core.lanes),
    }  # fmt: skip


def _check(backend: str, dout: int, din: int, batch: int, channels: int | None, seed: int) -> int:
    cfg = load_backend(backend)
    rng = np.random.default_rng(seed)
    w = rng.integers(-3, 4, (dout, din)).astype(np.float16)
    x = rng.integers(-3, 4, (batch, din)).astype(np.float16)
    k = lower_gemv(cfg, dout, din, x, batch=batch, channels=channels)
    st = execute(cfg, k.stream, k.payload, place_weights(cfg, k.layout, w))
    y = read_outputs(k.layout, st).astype(np.float64)
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    wrong = int(np.count_nonzero(y != ref))
    if wrong:
        raise CheckError(f"functional check: {wrong} of {y.size} outputs differ from numpy")
    return st.macs


def run(args: argparse.Namespace) -> int:
    """Print the report (and the check's verdict)."""
    report = gemv_report(
        args.backend,
        args.dout,
        args.din,
        args.batch,
        args.channels,
        args.rearrange,
        args.energy,
        args.act_basis,
    )
    if args.check:
        macs = _check(args.backend, args.dout, args.din, args.batch, args.channels, args.seed)
        report["check"] = {"outputs": args.dout * args.batch, "equal_to_numpy": True,
                           "mac_triggers_run": macs, "seed": args.seed}  # fmt: skip
    if args.json:
        cfg = load_backend(args.backend)
        report["provenance"] = provenance(
            args, backend={"name": cfg.name, "values": dataclasses.asdict(cfg)}
        )
        print(json.dumps(report, indent=2, default=str))
        return 0
    r, s = report, report["shape"]
    print(f"GEMV {s['dout']} x {s['din']} (batch {s['batch']}) on {r['backend']}, "
          f"{s['channels']} pseudo-channel{'s' if s['channels'] != 1 else ''}")  # fmt: skip
    print(f"  tiles: {r['tiles']['output']} output x {r['tiles']['input']} input "
          f"(padded to {r['tiles']['dout_padded']} x {r['tiles']['din_padded']}), "
          f"{r['rows_per_bank']} rows per bank")  # fmt: skip
    print(f"  cycles: {r['cycles']:,} ({r['time_us']:.2f} us)")
    print("  commands: " + ", ".join(f"{k} {v:,}" for k, v in r["commands"].items()))
    print(f"  MAC triggers: {r['mac_triggers']:,}, MAC utilisation {r['mac_utilisation']:.1%} "
          f"(of one per tCCD_L), useful {r['useful_fraction']:.1%}")  # fmt: skip
    print(f"  weights: {r['weight_gbps']:.1f} GB/s achieved of {r['peak_gbps']:.1f} GB/s peak")
    if "energy" in r:
        e = r["energy"]["pj"]
        print(f"  energy ({r['energy']['preset']}, activation per {r['energy']['act_basis']}): "
              f"{e['total'] / 1e6:.3f} uJ = MAC {e['mac'] / 1e6:.3f} + I/O {e['io'] / 1e6:.3f} "
              f"+ ACT/PRE {e['activation'] / 1e6:.3f} + background "
              f"{e['background'] / 1e6:.3f} uJ; {r['energy']['pj_per_mac']:.3f} pJ per lane "
              "MAC")  # fmt: skip
    for name, m in r.get("rearrange", {}).items():
        print(f"  {name.replace('_', ' ')}: {m['total_us']:.2f} us ({m['strategy']}: host "
              f"{m['host_us']:.2f} us, one channel {m['channel_us']:.2f} us, "
              f"{m['bytes']:,} B)")  # fmt: skip
    if "check" in r:
        print(f"  check: all {r['check']['outputs']:,} outputs equal numpy (seed {args.seed})")
    return 0
