"""Waveforms of the scheduler RTL: record a kernel's VCD, a GTKWave view, and summarise a VCD.

``record_waves`` compiles a kernel, runs the matching RTL block under Verilator with waves on
(``sim.cosim.run_rtl``) and leaves ``build/waves/<kernel>-<shape>-<sched>.vcd`` plus a GTKWave
save file (``.gtkw``) grouping the key signals. ``summarize_vcd`` reads any such VCD back and
computes the TLM's headline numbers (``cycles``, ``mac_utilization``, per-opcode counts) from
the output stream alone, so a waveform can be checked against ``pimphony run``.

``make wave KERNEL=qk TOKENS=256 SCHED=dcs`` runs :func:`main`.
"""

from __future__ import annotations

import argparse
import bisect
import re
import sys
from collections.abc import Callable
from pathlib import Path

from compiler.kernels import KERNELS, CompileError, compile_kernel
from models.config import ConfigError, HardwareConfig, load_preset
from models.dram import execution_times
from models.fileio import write_atomic
from models.isa import Op
from rtl.blocks import BLOCK_OF_SCHEDULER, SCHEDULER_OF_BLOCK

__all__ = [
    "BLOCK_OF_SCHEDULER",
    "WAVES_DIR",
    "WaveformError",
    "format_summary",
    "main",
    "record_block_waves",
    "record_waves",
    "summarize_vcd",
    "wave_stem",
]

WAVES_DIR = Path("build/waves")

_RANGE = re.compile(r"\[(\d+):(\d+)\]$")
# A Verilog identifier as Yosys writes it: plain, or escaped (backslash ... whitespace).
_IDENT = r"(?:\\\S+\s|[A-Za-z_][\w$]*)"
_TABLE = re.compile(r"[ds]_table_\w+$")


class WaveformError(ValueError):
    """A VCD is missing, malformed or lacks the signals a summary needs; or the scheduler is
    unknown."""


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


# ---- VCD access ---------------------------------------------------------------------------


def _base(ref: str) -> str:
    """Reference without its ``[msb:lsb]`` suffix."""
    return _RANGE.sub("", ref)


def _width(ref: str) -> int:
    m = _RANGE.search(ref)
    return abs(int(m.group(1)) - int(m.group(2))) + 1 if m else 1


def _vcd_references(path: Path) -> dict[str, str]:
    """Signal references of the VCD at ``path`` (header only), each with its GTKWave name.

    References are vcdvcd's (``scope.name[msb:lsb]``). GTKWave escapes a variable name that
    contains its hierarchy delimiter: Verilator's ``o__payload.cmd.op`` in scope ``dcs`` is
    ``dcs.\\o__payload.cmd.op[1:0]`` there. Raises :class:`WaveformError` if unusable.
    """
    from vcdvcd import VCDVCD

    if not path.exists():
        raise WaveformError(f"{path}: no such file")
    if not path.is_file():
        raise WaveformError(f"{path}: not a file")
    with open(path, "rb") as f:
        head = f.read(4096)
    if not head.lstrip().startswith(b"$") or b"\0" in head:
        raise WaveformError(f"{path}: not a VCD file (no $-keyword header)")
    try:
        vcd = VCDVCD(str(path), only_sigs=True, store_scopes=True)
    except Exception as exc:  # vcdvcd raises bare exceptions on malformed input
        raise WaveformError(f"{path}: not a readable VCD file ({exc})") from None
    names = {ref: ref for ref in vcd.references_to_ids}
    for scope in vcd.scopes.values():
        for var, ref in scope.subElements.items():
            if isinstance(ref, str) and "." in _base(var):
                names[ref] = f"{scope.name}.\\{var}"
    if not names:
        raise WaveformError(f"{path}: not a VCD file (no $var declarations)")
    return names


def _find(refs: list[str], name: str, required: bool = True, path: Path | None = None) -> str:
    """The shallowest reference whose last component is ``name`` (any scope, any range)."""
    hits = [r for r in refs if _base(r) == name or _base(r).endswith("." + name)]
    if not hits:
        if required:
            raise WaveformError(
                f"{path}: no signal named {name!r} in the VCD; is this a pimphony scheduler "
                f"waveform (ports clk, o__valid, o__ready, o__payload)?"
            )
        return ""
    return min(hits, key=lambda r: (_base(r).count("."), r))


def _before(tv: tuple[list[int], list[str]], t: int) -> str:
    """Value of a signal just before time ``t`` (``x`` if it had none yet)."""
    times, values = tv
    k = bisect.bisect_left(times, t) - 1
    return values[k] if k >= 0 else "x"


def _as_int(value: str) -> int | None:
    try:
        return int(value, 2)
    except ValueError:  # x or z bits
        return None


# ---- summary ------------------------------------------------------------------------------


def summarize_vcd(path: str | Path, cfg: HardwareConfig) -> dict:
    """Cycles, MAC utilisation and issue statistics from a scheduler VCD.

    Samples ``o__valid``, ``o__ready`` and ``o__payload`` just before every rising edge of
    ``clk``; an edge where both handshake signals are 1 (and ``rst`` is 0) is one issued
    command, its issue cycle is the payload's ``cycle`` field. ``cycles`` is the latest issue
    plus execution time (``cfg.timing``), as in :func:`models.channel.run_channel`. If the
    DUT was reset between streams (``rst`` high, or the cycle field going backwards), only
    the last run is summarised and ``notes`` says so.

    Parameters
    ----------
    path
        VCD written by :func:`record_waves` or ``sim.cosim.run_rtl(..., waves=True)``.
    cfg
        The hardware configuration the RTL was built for (payload layout and timing).

    Returns
    -------
    dict
        ``cycles``, ``mac_utilization``, ``commands``, ``counts`` (per opcode name),
        ``first_issue``, ``last_issue``, ``longest_stall``, ``runs``, ``notes``, ``signals``.
    """
    from vcdvcd import VCDVCD

    from rtl.common import command_layout, issued_layout

    path = Path(path)
    refs = list(_vcd_references(path))
    names = {n: _find(refs, n, path=path) for n in ("clk", "o__valid", "o__ready", "o__payload")}
    rst = _find(refs, "rst", required=False)
    if rst:
        names["rst"] = rst
    layout, cmd = issued_layout(cfg), command_layout(cfg)
    width = _width(names["o__payload"])
    if width != layout.size:
        raise WaveformError(
            f"{path}: o__payload is {width} bits, preset {cfg.name} issues {layout.size}-bit "
            f"payloads; was the waveform recorded with another --preset?"
        )
    op_off = layout["cmd"].offset + cmd["op"].offset
    op_mask = (1 << cmd["op"].shape.width) - 1
    cyc_off = layout["cycle"].offset
    cyc_mask = (1 << layout["cycle"].shape.width) - 1
    try:
        vcd = VCDVCD(str(path), signals=sorted(set(names.values())))
    except Exception as exc:
        raise WaveformError(f"{path}: not a readable VCD file ({exc})") from None
    tvs = {}
    for key, ref in names.items():
        tv = vcd[ref].tv
        tvs[key] = ([t for t, _ in tv], [v for _, v in tv])
    clk_t, clk_v = tvs["clk"]
    rises = [clk_t[k] for k in range(1, len(clk_t)) if clk_v[k] == "1" and clk_v[k - 1] == "0"]

    runs: list[list[tuple[int, int]]] = [[]]  # per run: (issue cycle, op)
    for t in rises:
        if "rst" in tvs and _before(tvs["rst"], t) != "0":
            if runs[-1]:
                runs.append([])
            continue
        if _before(tvs["o__valid"], t) != "1" or _before(tvs["o__ready"], t) != "1":
            continue
        word = _as_int(_before(tvs["o__payload"], t))
        if word is None:
            raise WaveformError(f"{path}: o__payload has x/z bits at an issue (time {t})")
        cycle, op = (word >> cyc_off) & cyc_mask, (word >> op_off) & op_mask
        if op >= len(Op):
            raise WaveformError(f"{path}: issued opcode {op} at time {t} is not an opcode")
        if runs[-1] and cycle <= runs[-1][-1][0]:
            runs.append([])
        runs[-1].append((cycle, op))
    runs = [r for r in runs if r] or [[]]
    issued = runs[-1]
    notes = [] if issued else ["no command was issued (no o__valid & o__ready at a clock edge)"]
    if len(runs) > 1:
        notes.append(
            f"{len(runs)} runs in the VCD (the DUT was reset between streams); "
            f"summarised the last one ({len(issued)} commands)"
        )
    exec_time = execution_times(cfg.timing)
    counts = {o.name: sum(1 for _, op in issued if op == o) for o in Op}
    cycles = max((c + int(exec_time[op]) for c, op in issued), default=0)
    util = counts["MAC"] * cfg.timing.tCCD / cycles if cycles else 0.0
    issue = [c for c, _ in issued]
    stall = max((b - a - 1 for a, b in zip(issue, issue[1:], strict=False)), default=0)
    return {
        "vcd": str(path),
        "preset": cfg.name,
        "cycles": int(cycles),
        "commands": len(issued),
        "counts": counts,
        "mac_utilization": min(util, 1.0),
        "first_issue": issue[0] if issue else None,
        "last_issue": issue[-1] if issue else None,
        "longest_stall": int(stall),
        "runs": len(runs) if issued else 0,
        "notes": notes,
        "signals": names,
    }


def format_summary(summary: dict) -> str:
    """Human-readable lines for a :func:`summarize_vcd` result."""
    counts = ", ".join(f"{k} {v}" for k, v in summary["counts"].items())
    lines = [
        f"  cycles           {summary['cycles']}",
        f"  MAC utilization  {100 * summary['mac_utilization']:.1f}%",
        f"  issued           {summary['commands']} ({counts})",
        f"  first issue      cycle {summary['first_issue']}",
        f"  last issue       cycle {summary['last_issue']}",
        f"  longest stall    {summary['longest_stall']} cycles (between first and last issue)",
    ]
    lines += [f"  note: {n}" for n in summary["notes"]]
    return "\n".join(lines)


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
    from rtl.common import command_layout

    by_base = {_base(r): r for r in refs}
    scopes = sorted({b[: -len(".clk")] for b in by_base if b.endswith(".clk")})
    top = [s for s in scopes if s.rsplit(".", 1)[-1] == block]
    if not top:
        raise WaveformError(f"no scope named {block!r} in the VCD (scopes: {', '.join(scopes)})")
    dut = min(top, key=len)

    def local(*names: str) -> list[tuple[str, None]]:
        return [(by_base[f"{dut}.{n}"], None) for n in names if f"{dut}.{n}" in by_base]

    def port(*names: str) -> list[tuple[str, None]]:
        return [(r, None) for r in (_find(refs, n, required=False) for n in names) if r]

    fields = [name for name, _ in command_layout(cfg)]
    stream_in = port("i__valid", "i__ready", "i__payload")
    stream_in += local(*(f"i__payload.{f}" for f in fields))
    issue = port("o__valid", "o__ready", "o__payload")
    issue += local(*(f"o__payload.cmd.{f}" for f in fields), "o__payload.seq", "o__payload.cycle")
    issue += port("cycle") + local("io_ready", "mac_ready", "hold_io")
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


def _gtkw_text(
    vcd_path: Path, gtkw_path: Path, refs: dict[str, str], groups: list, title: str
) -> str:
    """Text of a GTKWave save file showing ``groups`` of the VCD at ``vcd_path``."""
    lines = [
        f"[*] {title}",
        "[*] generated by sim.waves (make wave); regenerating overwrites this file",
        f'[dumpfile] "{vcd_path.resolve()}"',
        f'[savefile] "{gtkw_path.resolve()}"',
        "[timestart] 0",
        "[sst_expanded] 1",
        "[signals_width] 320",
    ]

    def trace(ref: str, alias: str | None) -> None:
        w = _width(ref)
        last = _base(ref).rsplit(".", 1)[-1]
        if w == 1:
            flags = "28"  # binary, right-justified
        elif "payload" in last or w > 32:
            flags = "22"  # hex
        else:
            flags = "24"  # decimal
        lines.append(f"@{flags}")
        name = refs[ref]  # as GTKWave spells it
        lines.append(f"+{{{alias}}} {name}" if alias else name)

    def group(name: str, items: list) -> None:
        lines.extend(["@800200", f"-{name}"])
        for first, second in items:
            if isinstance(second, list):
                group(first, second)
            elif first is None:
                lines.extend(["@200", f"-{second}"])  # a comment line
            else:
                trace(first, second)
        lines.extend(["@1000200", f"-{name}"])

    for name in ("clk", "rst"):
        ref = _find(list(refs), name, required=False)
        if ref:
            trace(ref, None)
    for name, items in groups:
        group(name, items)
    return "\n".join(lines) + "\n"


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
    shared with ``sim.cosim``) is copied to ``out_dir/<kernel>-<shape>-<sched>.vcd`` and a
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
    from sim.cosim import RtlStream, run_rtl

    if sched not in BLOCK_OF_SCHEDULER:
        raise WaveformError(
            f"scheduler {sched!r} is unknown; waveforms exist for: {', '.join(BLOCK_OF_SCHEDULER)}"
        )
    block = BLOCK_OF_SCHEDULER[sched]
    say = log or (lambda _msg: None)
    prog = compile_kernel(cfg, kind, **shape)
    stem = wave_stem(kind, prog.shape, sched)
    say(f"building {block} under Verilator (cached in build/sim/; first build ~10-20 s) ...")
    out = run_rtl(block, cfg, [RtlStream(stem, prog.commands)], waves=True)
    src = Path(out["__waves__"])  # written in this run (checked by sim.cosim.run_cocotb)
    say(f"simulated {prog.commands.shape[0]} commands; copying {src}")
    out_dir = Path(out_dir)
    vcd_path = write_atomic(out_dir / f"{stem}.vcd", _gtkwave_safe(src.read_bytes()))
    gtkw_path = out_dir / f"{stem}.gtkw"
    verilog_src = src.parent / f"{block}.v"
    if verilog_src.exists():
        verilog_text = verilog_src.read_text()
    else:
        from rtl.blocks import COSIM_ARGS, generate_verilog

        verilog_text = generate_verilog(block, cfg, **COSIM_ARGS.get(block, {}))
    refs = _vcd_references(vcd_path)
    groups = _gtkw_groups(list(refs), block, cfg, verilog_text)
    title = f"pimphony {stem}: {block} RTL, preset {cfg.name}"
    write_atomic(gtkw_path, _gtkw_text(vcd_path, gtkw_path, refs, groups, title).encode())
    return vcd_path, gtkw_path


def record_block_waves(
    block: str, cfg: HardwareConfig, out_dir: str | Path = WAVES_DIR
) -> tuple[Path, Path]:
    """VCD and GTKWave save file of a non-scheduler block's built-in co-simulation run.

    ``dpa``: a QK^T program dispatched through a shuffled VA2PA table
    (``sim.cosim_dpa.record_waves``); ``bank_slice``: the mixed PIM + host-read run of
    ``sim.cosim_bank_slice.record_waves``. Both runs are checked against the TLM first; the
    VCD they leave in the build directory is copied to ``out_dir/<block>.vcd`` here, once
    (atomically, with ``:`` in variable names made GTKWave-safe). The save file groups the
    block's ports by stream (``host``, ``pim``, ``o``, ...).
    """
    if block == "dpa":
        from sim.cosim_dpa import record_waves as record
    elif block == "bank_slice":
        from sim.cosim_bank_slice import record_waves as record
    else:
        raise WaveformError(
            f"block {block!r} has no built-in waveform run; allowed: dpa, bank_slice"
        )
    src = Path(record(cfg))
    out_dir = Path(out_dir)
    vcd_path = write_atomic(out_dir / f"{block}.vcd", _gtkwave_safe(src.read_bytes()))
    refs = _vcd_references(vcd_path)
    from rtl.blocks import BLOCKS

    component = BLOCKS[block](cfg)
    component._MustUse__silence = True  # built only to read its port names
    ports = set(component.signature.members)
    top = [
        r
        for r in refs
        if _base(r).startswith(f"{block}.")
        and _base(r).count(".") == 1
        and _base(r).split(".")[-1].split("__")[0] in ports
    ]
    groups: dict[str, list] = {}
    for ref in sorted(top):
        port = _base(ref).split(".")[-1].split("__")[0]
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
    return need


def main(argv: list[str] | None = None) -> int:
    """``python -m sim.waves``: record a kernel's waveform and print its summary.

    Exit status 0 if the VCD's cycles and counts equal the TLM's, 1 if they differ or the
    simulation failed, 2 for bad arguments.
    """
    from models.channel import run_channel
    from sim.cosim import CosimError

    p = argparse.ArgumentParser(prog="python -m sim.waves", description=__doc__.split("\n")[0])
    p.add_argument(
        "--block",
        choices=("static_sched", "pingpong", "dcs", "dpa", "bank_slice"),
        help="record a block instead: schedulers run --kernel; dpa and bank_slice their own run",
    )
    p.add_argument("--kernel", choices=KERNELS, default="qk")
    p.add_argument("--tokens", type=int, help="attention context length T (qk, sv)")
    p.add_argument("--dh", type=int, help="attention head dimension d_h (qk, sv)")
    p.add_argument("--dout", type=int, help="GEMV output dimension (gemv)")
    p.add_argument("--din", type=int, help="GEMV input dimension (gemv)")
    p.add_argument("--sched", choices=("static", "pingpong", "dcs"), default="dcs")
    p.add_argument("--preset", default="aim-16ch")
    p.add_argument("--out-dir", type=Path, default=WAVES_DIR)
    args = p.parse_args(argv)
    if args.block in ("dpa", "bank_slice"):
        try:
            vcd, gtkw = record_block_waves(args.block, load_preset(args.preset), args.out_dir)
        except (ConfigError, WaveformError) as exc:
            print(f"sim.waves: error: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:  # a co-simulation mismatch or build failure
            print(f"sim.waves: simulation failed: {exc}", file=sys.stderr)
            return 1
        print(f"VCD:       {vcd} ({vcd.stat().st_size:,} bytes), checked against the TLM")
        print(f"GTKWave:   {gtkw}  (gtkwave {gtkw})")
        return 0
    if args.block is not None:
        args.sched = SCHEDULER_OF_BLOCK[args.block]
    try:
        cfg = load_preset(args.preset)
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
    except (CompileError, ConfigError, WaveformError) as exc:
        print(f"sim.waves: error: {exc}", file=sys.stderr)
        return 2
    except CosimError as exc:
        print(f"sim.waves: simulation failed: {exc}", file=sys.stderr)
        return 1
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


if __name__ == "__main__":
    sys.exit(main())
