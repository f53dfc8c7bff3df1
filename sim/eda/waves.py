"""Waveforms of the RTL: record a kernel's VCD on a scheduler block, and a GTKWave view of it.

``record_waves`` compiles a kernel, runs the matching RTL block under Verilator with waves on
(``sim.verify.scheduler.run_rtl``) and leaves ``build/waves/<kernel>-<shape>-<sched>.vcd`` plus
a GTKWave save file (``.gtkw``) grouping the key signals; ``record_block_waves`` does the same
for the DPA and bank-slice blocks' own runs. ``sim.eda.vcd.summarize_vcd`` reads such a VCD
back. ``pimphony wave record`` (``make wave KERNEL=qk TOKENS=256 SCHED=dcs``) runs :func:`run`.
Importing this module loads no Amaranth or RTL module (the command line builds its options).
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import re
from collections.abc import Callable
from pathlib import Path

from pimphony.compiler.kernels import KERNELS, CompileError, compile_kernel
from pimphony.models.channel import SCHEDULERS, run_channel
from pimphony.models.config import DEFAULT_PRESET, HardwareConfig, load_preset
from pimphony.models.fileio import BUILD_DIR, write_atomic
from pimphony.rtl import EMITTED, Block
from pimphony.sim.cli import choice_names
from pimphony.sim.eda.vcd import (
    WaveformError,
    find_signal,
    format_summary,
    signal_base,
    signal_width,
    stamp_vcd,
    summarize_vcd,
    vcd_references,
)
from pimphony.sim.provenance import preset_record, tool_record
from vcd.gtkw import GTKWSave

__all__ = [
    "OWN_RUN",
    "WAVES_DIR",
    "add_arguments",
    "record_block_waves",
    "record_waves",
    "run",
    "wave_stem",
]

WAVES_DIR = BUILD_DIR / "waves"
OWN_RUN = (Block.DPA, Block.BANK_SLICE)
"""Blocks recorded on their own checked run (``sim.verify.<block>.record_waves``), not on a
kernel."""

# A Verilog identifier as Yosys writes it: plain, or escaped (backslash ... whitespace).
_IDENT = r"(?:\\\S+\s|[A-Za-z_][\w$]*)"
_TABLE = re.compile(r"[ds]_table_\w+$")


def wave_stem(kind: str, shape: dict, sched: str) -> str:
    """File stem ``<kernel>-<shape>-<sched>``, e.g. ``qk-T256-dh128-dcs``."""
    if kind == "gemv":
        tag = f"dout{shape['d_out']}-din{shape['d_in']}"
    else:
        tag = f"T{shape['tokens']}-dh{shape['d_h']}"
        group = int(shape.get("gqa_group", 1))
        if group > 1:
            tag += f"-g{group}-{shape.get('mapping', 'row-reuse')}"
    return f"{kind}-{tag}-{sched}"


# ---- GTKWave save file ----------------------------------------------------------------------


def _clean(ident: str) -> str:
    """Verilog identifier as it appears in the VCD (escape and trailing space removed)."""
    return ident.strip().removeprefix("\\")


def _table_ports(verilog_text: str) -> dict[str, list[tuple[str, str, list[tuple[str, str]]]]]:
    """Per D/S-Table memory, its ports: ``(port label, note, [(field, identifier), ...])``.

    Yosys inlines ``lib.memory`` into the parent module and names the port wires
    ``write__en$39``, ``$signature__data$51`` and so on, so the ports are found from the
    memory statements themselves: ``if (EN) MEM[ADDR] <= DATA;`` and ``assign D = MEM[A];``.
    An address or data expression is shown through a wire assigned exactly that expression;
    the note says where a read address comes from (``mac_queue.r_data[7:2]``: the MAC head).
    """

    def key(expr: str) -> str:
        return re.sub(r"\s+", "", expr)

    aliases: dict[str, list[str]] = {}
    for m in re.finditer(rf"assign\s+({_IDENT})\s*=\s*([^;\n]+?)\s*;", verilog_text):
        aliases.setdefault(key(m.group(2)), []).append(_clean(m.group(1)))
    # Wires connected to a submodule port: "r_data$46" -> "mac_queue.r_data".
    wired: dict[str, str] = {}
    inst = None
    for line in verilog_text.splitlines():
        head = re.fullmatch(r"\s*(?:\\\S+|\w+)\s+(\w+)\s*\(", line)
        if head:
            inst = head.group(1)
        elif inst and line.strip() == ");":
            inst = None
        elif inst:
            conn = re.fullmatch(r"\s*\.(\w+)\(\s*(\\\S+|[A-Za-z_][\w$]*)\s*\),?", line)
            if conn:
                wired.setdefault(_clean(conn.group(2)), f"{inst}.{conn.group(1)}")

    def resolve(expr: str) -> str:
        expr = expr.strip()
        if re.fullmatch(r"\\\S+|[A-Za-z_][\w$]*", expr):
            return _clean(expr)
        names = aliases.get(key(expr), [])
        if names:
            return min(names, key=lambda n: (n.startswith("$"), names.index(n)))
        head = re.match(_IDENT, expr + " ")
        return _clean(head.group(0)) if head else expr

    def describe(expr: str) -> str:
        m = re.match(rf"\s*({_IDENT})(.*)$", expr + " ")
        if not m:
            return key(expr)
        base = _clean(m.group(1))
        return wired.get(base, base) + key(m.group(2))

    mems = [
        _clean(m.group(1))
        for m in re.finditer(
            rf"^\s*reg\s+(?:\[\d+:\d+\]\s*)?({_IDENT})\s*\[\d+:\d+\]\s*;", verilog_text, re.M
        )
    ]
    ports: dict[str, list] = {m: [] for m in sorted(mems) if _TABLE.match(m)}
    for m in re.finditer(
        rf"if\s*\(\s*({_IDENT})\s*\)\s*({_IDENT})\s*\[([^\n]*)\]\s*<=\s*([^;\n]+);",
        verilog_text,
    ):
        mem = _clean(m.group(2))
        if mem in ports:
            sigs = [
                ("en", _clean(m.group(1))),
                ("addr", resolve(m.group(3))),
                ("data", resolve(m.group(4))),
            ]
            ports[mem].append(("wr", f"write port, addr = {describe(m.group(3))}", sigs))
    reads = dict.fromkeys(ports, 0)
    for m in re.finditer(rf"assign\s+({_IDENT})\s*=\s*({_IDENT})\s*\[([^\n]*)\]\s*;", verilog_text):
        mem = _clean(m.group(2))
        if mem in ports:
            k = reads[mem]
            reads[mem] += 1
            sigs = [("addr", resolve(m.group(3))), ("data", _clean(m.group(1)))]
            ports[mem].append((f"rd{k}", f"read port {k}, addr = {describe(m.group(3))}", sigs))
    return ports


def _gtkw_groups(
    refs: list[str], block: str, cfg: HardwareConfig, verilog_text: str
) -> list[tuple[str, list]]:
    """Signal groups of the save file: ``[(group name, items)]``.

    An item is a trace ``(reference, alias or None)``, a comment ``(None, text)`` or a nested
    group ``(name, items)``. Signals the VCD lacks are left out, and so are empty groups.
    """
    from pimphony.rtl.common import command_layout

    by_base = {signal_base(r): r for r in refs}
    scopes = sorted({b[: -len(".clk")] for b in by_base if b.endswith(".clk")})
    top = [s for s in scopes if s.rsplit(".", 1)[-1] == block]
    if not top:
        raise WaveformError(f"no scope named {block!r} in the VCD (scopes: {', '.join(scopes)})")
    dut = min(top, key=len)

    def local(*names: str) -> list[tuple[str, None]]:
        return [(by_base[f"{dut}.{n}"], None) for n in names if f"{dut}.{n}" in by_base]

    def port(*names: str) -> list[tuple[str, None]]:
        return [(r, None) for r in (find_signal(refs, n, required=False) for n in names) if r]

    fields = [name for name, _ in command_layout(cfg)]
    stream_in = port("i__valid", "i__ready", "i__payload")
    stream_in += local(*(f"i__payload.{f}" for f in fields))
    issue = port("o__valid", "o__ready", "o__payload")
    issue += local(*(f"o__payload.cmd.{f}" for f in fields), "o__payload.seq", "o__payload.cycle")
    # The issue stage of DCS and ping-pong (rtl.common.MacFirstIssue).
    issue += port("cycle") + local(*(f"issue.{n}" for n in ("io_ready", "mac_ready", "hold_io")))
    queues = []
    for s in scopes:
        sub = s[len(dut) + 1 :] if s.startswith(dut + ".") else ""
        if "queue" in sub:
            queues += local(*(f"{sub}.{n}" for n in ("level", "w_en", "w_rdy", "r_en", "r_rdy")))
    tables = []
    for mem, ports in _table_ports(verilog_text).items():
        items: list = []
        for label, note, sigs in ports:
            traces = []
            for field, ident in sigs:
                whole = f"{dut}.{ident}"
                subs = [b for b in by_base if b.startswith(whole + ".")]  # struct fields
                for b in subs or ([whole] if whole in by_base else []):
                    traces.append((by_base[b], f"{mem}.{label}.{field}{b[len(whole) :]}"))
            if traces:
                items += [(None, note), *traces]
        if items:
            tables.append((mem, items))
    rows = local(
        *(f"rows.{n}" for n in ("row_ok", "switching", "row_open", "open_row", "head_row"))
    )
    # Ping-pong block: the bit and hand-off, the slot at each queue head, the dispatcher's
    # phase (rtl/pingpong.py).
    pingpong = local("ping_pong", "cur", "cur_eff", "flip", "busy", "io_in_slot")
    if pingpong:
        pingpong += [(None, "dispatch: slot of the latest compute phase and its halves")]
        pingpong += local("phase", "have_phase", "phase_gh", "phase_oh")
        fifo_ports = ("level", "w_en", "w_rdy", "r_en", "r_rdy")
        pingpong_queues = [
            (f"{label} queue", local(f"head_slot_{tag}", *(f"{q}.{n}" for n in fifo_ports)))
            for label, tag, q in (
                ("compute", "mac", "mac_queue"),
                ("I/O, ping-pong bit 0", "io0", "io_queue_0"),
                ("I/O, ping-pong bit 1", "io1", "io_queue_1"),
            )
        ]
        queues = [(name, items) for name, items in pingpong_queues if items]
    groups = [
        ("stream in", stream_in),
        ("issue", issue),
        ("ping-pong bit and hand-off", pingpong),
        ("queues", queues),
        ("D/S-Table entry under access", tables),
        ("rows", rows),
    ]
    return [(name, items) for name, items in groups if items]


def _trace_format(ref: str) -> str:
    """GTKWave display format of ``ref``: binary for a bit, hex for a payload or a word wider
    than 32 bits, decimal otherwise."""
    w = signal_width(ref)
    if w == 1:
        return "bin"
    if "payload" in signal_base(ref).rsplit(".", 1)[-1] or w > 32:
        return "hex"
    return "dec"


def _gtkw_text(
    vcd_path: Path, gtkw_path: Path, refs: dict[str, str], groups: list, title: str
) -> str:
    """Text of a GTKWave save file showing ``groups`` of the VCD at ``vcd_path``.

    Written through pyvcd's :class:`vcd.gtkw.GTKWSave`. ``[dumpfile]`` and ``[savefile]`` are
    relative (the VCD from the save file's folder; the save file by its name), so the pair
    opens from wherever it is moved or copied together: ``gtkwave FILE.gtkw`` takes the
    dump file's path relative to the recorded ``[savefile]``'s folder and puts it under the
    opened save file's real folder (GTKWave 3.3 ``src/savefile.c``,
    ``extract_dumpname_from_save_file`` -> ``find_dumpfile``, whose ``"/././"`` retry is
    what handles a relative pair), and falls back to ``[dumpfile]`` as given, relative to
    the working directory.
    """
    folder = gtkw_path.parent.resolve()
    out = io.StringIO()
    save = GTKWSave(out)
    save.comment(
        title,
        "generated by pimphony wave record (make wave); regenerating overwrites this file",
    )
    save.dumpfile(os.path.relpath(vcd_path.resolve(), folder), abspath=False)
    save.savefile(gtkw_path.name, abspath=False)
    save.timestart(0)
    save.sst_expanded(True)
    save.signals_width(320)

    def trace(ref: str, alias: str | None) -> None:
        # refs[ref] is the name as GTKWave spells it; right-justified, as GTKWSave's default.
        save.trace(refs[ref], alias, datafmt=_trace_format(ref))

    def group(name: str, items: list) -> None:
        with save.group(name):
            for first, second in items:
                if isinstance(second, list):
                    group(first, second)
                elif first is None:
                    save.blank(second)  # a comment line
                else:
                    trace(first, second)

    for name in ("clk", "rst"):
        ref = find_signal(list(refs), name, required=False)
        if ref:
            trace(ref, None)
    for name, items in groups:
        group(name, items)
    return out.getvalue()


def _gtkwave_safe(raw: bytes) -> bytes:
    """``raw`` VCD with ``:`` in variable names replaced by ``_``.

    Yosys emits dummy wires named ``$auto$verilog_backend.cc:2355:dump_module$1`` that
    Verilator traces; GTKWave 3.3 cannot parse the colons ("$VAR parse error") and refuses
    the whole file. Only the header is touched; no value changes.
    """
    end = raw.find(b"$enddefinitions")
    if end < 0:
        return raw
    head = raw[:end].decode("latin-1")
    head = re.sub(
        r"^(\s*\$var\s+\S+\s+\S+\s+\S+\s+)(\S*:\S*)",
        lambda m: m.group(1) + m.group(2).replace(":", "_"),
        head,
        flags=re.M,
    )
    return head.encode("latin-1") + raw[end:]


# ---- recording ------------------------------------------------------------------------------


def _stamp(block: str, cfg: HardwareConfig, **run: object) -> dict:
    """What produced a recorded VCD (``sim.eda.vcd.stamp_vcd``): tool, block, the kernel run
    (``kernel``, ``shape``, ``sched``; absent for a block's own run) and every preset value."""
    return {**tool_record(), "block": str(block), **run, "preset": preset_record(cfg)}


def record_waves(
    kind: str,
    shape: dict,
    sched: str,
    cfg: HardwareConfig,
    out_dir: str | Path = WAVES_DIR,
    log: Callable[[str], None] | None = None,
) -> tuple[Path, Path]:
    """Run ``kind`` (``shape``) on the RTL of ``sched`` with waves; return (VCD, .gtkw) paths.

    The VCD Verilator writes into the cached build directory (``build/sim/<block>-...``,
    shared with ``sim.verify``) is copied to ``out_dir/<kernel>-<shape>-<sched>.vcd`` and a
    GTKWave save file with the same stem is written next to it (open it with
    ``gtkwave FILE.gtkw``). Both are generated artefacts: an existing file of the same name
    is overwritten (atomically). Runs sharing a build directory must not overlap. In the
    copy, ``:`` in variable names becomes ``_`` so that GTKWave can load it (see
    :func:`_gtkwave_safe`); values are untouched.

    Parameters
    ----------
    kind, shape
        Kernel and its shape, as for :func:`compiler.kernels.compile_kernel`.
    sched
        ``"static"``, ``"pingpong"`` or ``"dcs"`` (the block of
        :data:`rtl.blocks.BLOCK_OF_SCHEDULER`).
    cfg
        Hardware configuration to build the RTL for.
    out_dir
        Where the VCD and the save file go (default ``build/waves``).
    log
        Called with progress messages (the first Verilator build takes ~10-20 s).
    """
    from pimphony.rtl.blocks import BLOCK_OF_SCHEDULER, BLOCKS, generate_verilog
    from pimphony.sim.verify.scheduler import RtlStream, run_rtl

    if sched not in BLOCK_OF_SCHEDULER:
        raise WaveformError(
            f"scheduler {sched!r} is unknown; waveforms exist for: {', '.join(BLOCK_OF_SCHEDULER)}"
        )
    block = BLOCK_OF_SCHEDULER[sched]
    say = log or (lambda _msg: None)
    prog = compile_kernel(cfg, kind, **shape)
    stem = wave_stem(kind, prog.shape, sched)
    say(f"simulating {stem} on the {block} RTL under Verilator ...")
    out = run_rtl(block, cfg, [RtlStream(stem, prog.commands)], waves=True)
    src = Path(out["__waves__"])  # written in this run (checked by sim.verify.runner.run_cocotb)
    say(f"simulated {prog.commands.shape[0]} commands; copying {src}")
    out_dir = Path(out_dir)
    record = _stamp(
        block, cfg, kernel=kind, shape=prog.shape, sched=sched, commands=int(prog.commands.shape[0])
    )
    raw = stamp_vcd(_gtkwave_safe(src.read_bytes()), record)
    vcd_path = write_atomic(out_dir / f"{stem}.vcd", raw)
    gtkw_path = out_dir / f"{stem}.gtkw"
    verilog_src = src.parent / f"{block}.v"
    if verilog_src.exists():
        verilog_text = verilog_src.read_text()
    else:
        verilog_text = generate_verilog(block, cfg, **BLOCKS[block].cosim_args)
    refs = vcd_references(vcd_path)
    groups = _gtkw_groups(list(refs), block, cfg, verilog_text)
    title = f"pimphony {stem}: {block} RTL, preset {cfg.name}"
    write_atomic(gtkw_path, _gtkw_text(vcd_path, gtkw_path, refs, groups, title).encode())
    return vcd_path, gtkw_path


def record_block_waves(
    block: str, cfg: HardwareConfig, out_dir: str | Path = WAVES_DIR
) -> tuple[Path, Path]:
    """VCD and GTKWave save file of a non-scheduler block's built-in co-simulation run.

    ``dpa``: a QK^T program dispatched through a shuffled VA2PA table
    (``sim.verify.dpa.record_waves``); ``bank_slice``: the mixed PIM + host-read run of
    ``sim.verify.bank_slice.record_waves``. Both runs are checked against the TLM first; the
    VCD they leave in the build directory is copied to ``out_dir/<block>.vcd`` here, once
    (atomically, with ``:`` in variable names made GTKWave-safe). The save file groups the
    block's ports by stream (``host``, ``pim``, ``o``, ...).
    """
    if block not in OWN_RUN:
        raise WaveformError(
            f"block {block!r} has no built-in waveform run; allowed: {', '.join(OWN_RUN)}"
        )
    src = Path(importlib.import_module(f"pimphony.sim.verify.{block}").record_waves(cfg))
    out_dir = Path(out_dir)
    raw = stamp_vcd(_gtkwave_safe(src.read_bytes()), _stamp(block, cfg))
    vcd_path = write_atomic(out_dir / f"{block}.vcd", raw)
    refs = vcd_references(vcd_path)
    from pimphony.rtl.blocks import BLOCKS

    component = BLOCKS[block].build(cfg)
    component._MustUse__silence = True  # built only to read its port names
    ports = set(component.signature.members)
    top = [
        r
        for r in refs
        if signal_base(r).startswith(f"{block}.")
        and signal_base(r).count(".") == 1
        and signal_base(r).split(".")[-1].split("__")[0] in ports
    ]
    groups: dict[str, list] = {}
    for ref in sorted(top):
        port = signal_base(ref).split(".")[-1].split("__")[0]
        groups.setdefault(port, []).append((ref, None))
    gtkw_path = out_dir / f"{block}.gtkw"
    title = f"pimphony {block}: RTL ports, preset {cfg.name}"
    text = _gtkw_text(vcd_path, gtkw_path, refs, list(groups.items()), title)
    write_atomic(gtkw_path, text.encode())
    return vcd_path, gtkw_path


def _shape(args: argparse.Namespace) -> dict:
    if args.kernel == "gemv":
        need = {"d_out": args.dout, "d_in": args.din}
        flags = {"d_out": "--dout", "d_in": "--din"}
    else:
        need = {"tokens": args.tokens, "d_h": args.dh}
        flags = {"tokens": "--tokens", "d_h": "--dh"}
    missing = [flags[k] for k, v in need.items() if v is None]
    if missing:
        raise CompileError(f"--kernel {args.kernel} needs {' and '.join(missing)}")
    others = {"--tokens": args.tokens, "--dh": args.dh, "--dout": args.dout, "--din": args.din}
    extra = [f for f, v in others.items() if v is not None and f not in flags.values()]
    if extra:
        raise CompileError(
            f"{' and '.join(extra)} {'does' if len(extra) == 1 else 'do'} not apply to "
            f"--kernel {args.kernel} (it takes "
            f"{' and '.join(flags.values())})"
        )
    return need


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``pimphony wave record``."""
    parser.add_argument(
        "--block",
        choices=choice_names(EMITTED),
        help="record a block instead: schedulers run --kernel; dpa and bank_slice their own run",
    )
    parser.add_argument("--kernel", choices=choice_names(KERNELS), default="qk")
    parser.add_argument("--tokens", type=int, help="attention context length T (qk, sv)")
    parser.add_argument("--dh", type=int, help="attention head dimension d_h (qk, sv)")
    parser.add_argument("--dout", type=int, help="GEMV output dimension (gemv)")
    parser.add_argument("--din", type=int, help="GEMV input dimension (gemv)")
    parser.add_argument("--sched", choices=choice_names(SCHEDULERS), default="dcs")
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--out-dir", type=Path, default=WAVES_DIR)


def run(args: argparse.Namespace) -> int:
    """Record a kernel's (or a block's) waveform and print its summary.

    Exit status 0 if the VCD's cycles and counts equal the TLM's, 1 if they differ or the
    simulation failed, 2 for bad arguments.
    """
    from pimphony.rtl.blocks import SCHEDULER_OF_BLOCK

    cfg = load_preset(args.preset)
    if args.block in OWN_RUN:
        vcd, gtkw = record_block_waves(args.block, cfg, args.out_dir)
        print(f"VCD:       {vcd} ({vcd.stat().st_size:,} bytes), checked against the TLM")
        print(f"GTKWave:   {gtkw}  (gtkwave {gtkw})")
        return 0
    if args.block is not None:
        args.sched = SCHEDULER_OF_BLOCK[args.block]
    shape = _shape(args)
    vcd, gtkw = record_waves(
        args.kernel,
        shape,
        args.sched,
        cfg,
        args.out_dir,
        log=lambda msg: print(msg, flush=True),
    )
    summary = summarize_vcd(vcd, cfg)
    print(f"VCD:       {vcd} ({vcd.stat().st_size:,} bytes)")
    print(f"GTKWave:   {gtkw}  (gtkwave {gtkw})")
    print("summary of the VCD:")
    print(format_summary(summary))
    prog = compile_kernel(cfg, args.kernel, **shape)
    tlm = run_channel(prog.commands, cfg, args.sched)
    same = (tlm.cycles, tlm.counts) == (summary["cycles"], summary["counts"])
    print(
        f"TLM ({args.sched}): cycles {tlm.cycles}, MAC utilization "
        f"{100 * tlm.mac_utilization:.1f}% -- " + ("matches the RTL" if same else "DIFFERS")
    )
    return 0 if same else 1
