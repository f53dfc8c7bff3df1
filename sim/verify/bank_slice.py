"""Bank-slice (DEX) controller: RTL runs (cocotb + Verilator, or Amaranth's simulator) and the
cycle-for-cycle comparison with the TLM (:func:`models.bank_slice.run_bank_slice`).

``run_slice_batch(cfg, slicing, runs)`` generates the Verilog of
:class:`rtl.bank_slice.BankSliceController` (top module ``bank_slice``), builds it once per
configuration (cached in ``build/sim/``), runs ``sim/verify/tb_bank_slice.py`` on every run in
one simulator process and returns the RTL issue cycles of every PIM command and host read
and the cycles simulated per run.
``simulate_amaranth`` does the same in Amaranth's Python simulator (no build; small runs).
``compare_with_tlm`` names the first operation whose cycles differ. ``record_waves`` records a
checked VCD of a small mixed workload (``make wave BLOCK=bank_slice`` copies it out).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pimphony.models.bank_slice import (
    SOURCE_HOST,
    SOURCE_PIM,
    SliceConfig,
    empty_host_reads,
    run_bank_slice,
)
from pimphony.models.config import DEFAULT_PRESET, HardwareConfig, load_preset
from pimphony.models.isa import HW_FIELDS, describe_command
from pimphony.rtl import Block
from pimphony.rtl.bank_slice import BankSliceController, host_read_layout, slice_issued_layout
from pimphony.rtl.blocks import generate_verilog
from pimphony.rtl.common import command_layout
from pimphony.sim.verify.runner import (
    BUILD_ROOT,
    CosimError,
    check_cycle_budget,
    field_spec,
    is_built,
    pack_fields,
    record_issue,
    run_amaranth,
    run_cocotb,
)

__all__ = [
    "SliceBatch",
    "SliceRun",
    "compare_with_tlm",
    "describe_operation",
    "mixed_workload",
    "record_waves",
    "run_slice_batch",
    "simulate_amaranth",
    "slice_built",
]


@dataclass(frozen=True)
class SliceRun:
    """One run: PIM commands (and input ``valid`` gaps), host reads, output ``ready`` pattern."""

    name: str
    pim: np.ndarray
    host: np.ndarray
    valid_gaps: tuple[int, ...] | None = None
    ready_pattern: tuple[int, ...] | None = None


@functools.lru_cache(maxsize=8)
def _verilog(cfg: HardwareConfig, slicing: SliceConfig) -> str:
    """The controller's Verilog for ``cfg`` and ``slicing`` (converted once per process)."""
    return generate_verilog(Block.BANK_SLICE, cfg, slicing=slicing)


@dataclass(frozen=True)
class SliceBatch:
    """Outcome of :func:`run_slice_batch`: RTL issue cycles ``{name: (pim_issue, host_issue)}``
    (program order), clock cycles simulated per run, and the waveform (or ``None``)."""

    issue: dict[str, tuple[np.ndarray, np.ndarray]]
    cycles: dict[str, int]
    waves: Path | None = None


def slice_built(cfg: HardwareConfig, slicing: SliceConfig, build_root: Path = BUILD_ROOT) -> bool:
    """Whether :func:`run_slice_batch` finds the controller built for ``cfg`` and ``slicing``."""
    return is_built(Block.BANK_SLICE, _verilog(cfg, slicing), build_root=build_root)


def run_slice_batch(
    cfg: HardwareConfig,
    slicing: SliceConfig | None,
    runs: Sequence[SliceRun],
    simulator: str = "verilator",
    waves: bool = False,
    build_root: Path = BUILD_ROOT,
) -> SliceBatch:
    """Every run of ``runs`` on the generated Verilog in one simulator process.

    One build per configuration (cached by a hash of the Verilog); ``waves`` also records a
    waveform in the build directory.
    """
    out = slice_issued_layout(cfg)
    job = {
        "src_field": field_spec(out, "src"),
        "seq_field": field_spec(out, "seq"),
        "cycle_field": field_spec(out, "cycle"),
        "sources": {"pim": SOURCE_PIM, "host": SOURCE_HOST},
        "runs": [
            {
                "name": r.name,
                "pim": pack_fields(command_layout(cfg), r.pim),
                "valid_gaps": list(r.valid_gaps) if r.valid_gaps else None,
                "host": pack_fields(host_read_layout(cfg), r.host),
                "arrival": [int(a) for a in r.host["arrival"]],
                "ready_pattern": list(r.ready_pattern) if r.ready_pattern else None,
                "max_cycles": 400 * (r.pim.shape[0] + r.host.shape[0])
                + int(r.host["arrival"].max(initial=0))
                + 10_000,
            }
            for r in runs
        ],
    }
    text = _verilog(cfg, slicing or SliceConfig())
    run = run_cocotb(
        Block.BANK_SLICE,
        text,
        "pimphony.sim.verify.tb_bank_slice",
        job,
        simulator=simulator,
        waves=waves,
        build_root=build_root,
    )
    return SliceBatch(
        {
            name: (np.asarray(r["pim"], dtype=np.int64), np.asarray(r["host"], dtype=np.int64))
            for name, r in run.result.items()
        },
        {name: int(r["cycles_simulated"]) for name, r in run.result.items()},
        run.waves,
    )


def simulate_amaranth(
    dut: BankSliceController,
    pim: np.ndarray,
    host: np.ndarray,
    valid_gaps: Sequence[int] | None = None,
    ready_pattern: Sequence[int] | None = None,
    max_cycles: int = 1_000_000,
    vcd_path: str | Path | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(pim_issue, host_issue)`` of ``dut`` in Amaranth's simulator (same driving rules as
    ``sim/verify/tb_bank_slice.py``: cycle 0 is the first clock cycle)."""
    n_p, n_h = int(pim.shape[0]), int(host.shape[0])
    p_rows = [{f: int(pim[f][k]) for f in HW_FIELDS} for k in range(n_p)]
    h_rows = [{f: int(host[f][k]) for f in ("bank", "row", "col")} for k in range(n_h)]
    arrival = [int(a) for a in host["arrival"]]
    gaps = list(valid_gaps) if valid_gaps is not None else [0] * n_p
    issue = {
        SOURCE_PIM: np.full(n_p, -1, dtype=np.int64),
        SOURCE_HOST: np.full(n_h, -1, dtype=np.int64),
    }

    async def bench(ctx):
        k, gap_left = 0, gaps[0] if n_p else 0
        h, h_prev = 0, -1
        got, cycle = 0, 0
        while got < n_p + n_h:
            offer_p = k < n_p and gap_left == 0
            offer_h = h < n_h and cycle >= max(arrival[h], h_prev + 1)
            ctx.set(dut.pim.valid, offer_p)
            if offer_p:
                ctx.set(dut.pim.payload, p_rows[k])
            ctx.set(dut.host.valid, offer_h)
            if offer_h:
                ctx.set(dut.host.payload, h_rows[h])
            ready = 1 if ready_pattern is None else ready_pattern[cycle % len(ready_pattern)]
            ctx.set(dut.o.ready, ready)
            _, _, p_rdy, h_rdy, valid, src, seq, at = await ctx.tick().sample(
                dut.pim.ready,
                dut.host.ready,
                dut.o.valid,
                dut.o.payload.src,
                dut.o.payload.seq,
                dut.o.payload.cycle,
            )
            if offer_p and p_rdy:
                k += 1
                gap_left = gaps[k] if k < n_p else 0
            elif not offer_p and k < n_p:
                gap_left -= 1
            if offer_h and h_rdy:
                h += 1
                h_prev = cycle
            if valid and ready:
                record_issue(issue[int(src)], seq, at, f"source {src} operation")
                got += 1
            cycle += 1
            check_cycle_budget(cycle, max_cycles, got, n_p + n_h, "operations")

    run_amaranth(dut, bench, vcd_path=vcd_path)
    return issue[SOURCE_PIM], issue[SOURCE_HOST]


def describe_operation(pim: np.ndarray, host: np.ndarray, source: str, k: int) -> str:
    """``PIM command #4 (MAC gbuf=0 row=0 col=1 out=0)`` or ``host read #2 (bank 3 ...)``."""
    if source == "pim":
        return f"PIM command #{k} ({describe_command(pim, k)})"
    r = host[k]
    return (
        f"host read #{k} (bank={int(r['bank'])} row={int(r['row'])} col={int(r['col'])}, "
        f"arrival {int(r['arrival'])})"
    )


def compare_with_tlm(
    cfg: HardwareConfig,
    slicing: SliceConfig | None,
    run: SliceRun,
    pim_issue: np.ndarray,
    host_issue: np.ndarray,
) -> str | None:
    """``None`` if the RTL issued every operation in the TLM's cycle, else a message naming
    the first differing operation (earliest in TLM issue order) and both cycles."""
    slicing = slicing or SliceConfig()
    gaps = None if run.valid_gaps is None else np.asarray(run.valid_gaps, dtype=np.int64)
    tlm = run_bank_slice(run.pim, run.host, cfg, slicing, valid_gaps=gaps)
    diffs = []
    for source, want, got in (
        ("pim", tlm.pim_issue, np.asarray(pim_issue)),
        ("host", tlm.host_issue, np.asarray(host_issue)),
    ):
        for k in np.flatnonzero(want != got):
            diffs.append((int(min(want[k], got[k] if got[k] >= 0 else want[k])), source, int(k)))
    if not diffs:
        return None
    _, source, k = min(diffs)
    want = (tlm.pim_issue if source == "pim" else tlm.host_issue)[k]
    got = (pim_issue if source == "pim" else host_issue)[k]
    mode = "DEX" if slicing.sliced else "baseline"
    total = tlm.pim_issue.size + tlm.host_issue.size
    return (
        f"run {run.name!r} ({mode}): first differing operation is "
        f"{describe_operation(run.pim, run.host, source, k)}: RTL issued at cycle {int(got)}, "
        f"TLM at cycle {int(want)}; {len(diffs)} of {total} operations differ"
    )


def mixed_workload(
    cfg: HardwareConfig, n_host: int = 64, rate: float = 0.1, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """A small compiler PIM stream (QK^T, T=64, d_h=64) and seeded random host reads."""
    from pimphony.compiler.kernels import compile_kernel

    pim = compile_kernel(cfg, "qk", tokens=64, d_h=64).commands
    rng = np.random.default_rng(seed)
    host = empty_host_reads(n_host)
    host["bank"] = rng.integers(0, cfg.channel.banks, n_host)
    host["row"] = rng.integers(0, 3, n_host)
    host["col"] = rng.integers(0, cfg.channel.columns_per_row, n_host)
    host["arrival"] = np.cumsum(rng.geometric(rate, n_host)) - 1
    return pim, host


def record_waves(
    cfg: HardwareConfig | None = None,
    slicing: SliceConfig | None = None,
    simulator: str = "verilator",
) -> Path:
    """Run :func:`mixed_workload` on the generated Verilog with waves on, check it against the
    TLM (:class:`~sim.verify.runner.CosimError` if it differs) and return the path of the
    waveform in the build directory (``sim.eda.waves.record_block_waves`` copies it to
    ``build/waves/``)."""
    cfg = cfg or load_preset(DEFAULT_PRESET)
    slicing = slicing or SliceConfig()
    pim, host = mixed_workload(cfg)
    run = SliceRun("waves", pim, host)
    batch = run_slice_batch(cfg, slicing, [run], simulator=simulator, waves=True)
    msg = compare_with_tlm(cfg, slicing, run, *batch.issue[run.name])
    if msg:
        raise CosimError(msg)
    return Path(batch.waves)  # type: ignore[arg-type]
