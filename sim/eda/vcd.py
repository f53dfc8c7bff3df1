"""Reading a recorded VCD back: the TLM's headline numbers from a scheduler waveform.

``summarize_vcd`` computes ``cycles``, ``mac_utilization`` and per-opcode counts from the output
stream alone, so a waveform can be checked against ``pimphony run`` (``pimphony wave
summary``). A VCD that ``pimphony wave record`` wrote carries what produced it (block, kernel,
shape, every preset value) in a ``$comment`` line of its header (:func:`stamp_vcd`,
:func:`read_stamp`), so the summary re-times it with the preset it was recorded with.
Importing this module loads no Amaranth, cocotb or RTL module.
"""

from __future__ import annotations

import argparse
import bisect
import json
import re
from pathlib import Path

from pimphony.models.config import DEFAULT_PRESET, ConfigError, HardwareConfig, load_preset
from pimphony.models.dram import execution_times
from pimphony.models.errors import PimphonyError
from pimphony.models.isa import Op
from pimphony.rtl import Block

__all__ = [
    "STAMP_TAG",
    "add_arguments",
    "run",
    "WaveformError",
    "find_signal",
    "format_summary",
    "read_stamp",
    "signal_base",
    "signal_width",
    "stamp_vcd",
    "summarize_vcd",
    "vcd_references",
]

STAMP_TAG = "pimphony-provenance"
"""First word of the ``$comment`` that records what produced a VCD (:func:`stamp_vcd`)."""

_RANGE = re.compile(r"\[(\d+):(\d+)\]$")
_SCHEDULER_BLOCKS = tuple(str(b) for b in (Block.STATIC_SCHED, Block.PINGPONG, Block.DCS))
_OTHER_BLOCKS = tuple(str(b) for b in Block if str(b) not in _SCHEDULER_BLOCKS)


class WaveformError(PimphonyError, ValueError):
    """A VCD is missing, malformed or lacks the signals a summary needs; or the scheduler is
    unknown."""


# ---- VCD access ---------------------------------------------------------------------------


def signal_base(ref: str) -> str:
    """Reference without its ``[msb:lsb]`` suffix."""
    return _RANGE.sub("", ref)


def signal_width(ref: str) -> int:
    """Bits of a reference: from its ``[msb:lsb]`` suffix, 1 without one."""
    m = _RANGE.search(ref)
    return abs(int(m.group(1)) - int(m.group(2))) + 1 if m else 1


def vcd_references(path: Path) -> dict[str, str]:
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
            if isinstance(ref, str) and "." in signal_base(var):
                names[ref] = f"{scope.name}.\\{var}"
    if not names:
        raise WaveformError(f"{path}: not a VCD file (no $var declarations)")
    return names


def find_signal(refs: list[str], name: str, required: bool = True, path: Path | None = None) -> str:
    """The shallowest reference whose last component is ``name`` (any scope, any range)."""
    hits = [r for r in refs if signal_base(r) == name or signal_base(r).endswith("." + name)]
    if not hits:
        if required:
            raise WaveformError(
                f"{path}: no signal named {name!r} in the VCD; is this a pimphony scheduler "
                f"waveform (ports clk, o__valid, o__ready, o__payload)?"
            )
        return ""
    return min(hits, key=lambda r: (signal_base(r).count("."), r))


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


# ---- provenance stamp ---------------------------------------------------------------------


def stamp_vcd(raw: bytes, record: dict) -> bytes:
    """``raw`` VCD with ``record`` (JSON, one line) as a ``$comment`` before its header.

    VCD readers skip comments (GTKWave, vcdvcd); :func:`read_stamp` reads it back. An earlier
    stamp is replaced, not repeated.
    """
    text = json.dumps(record, sort_keys=True, separators=(",", ":"))
    text = text.replace("$", "\\u0024")  # a "$end" inside would end the comment early
    line = f"$comment {STAMP_TAG} {text} $end\n".encode()
    if raw.startswith(b"$comment " + STAMP_TAG.encode()):
        raw = raw[raw.index(b"\n") + 1 :]
    return line + raw


def read_stamp(path: Path) -> dict | None:
    """The record :func:`stamp_vcd` put in the VCD at ``path``, or ``None`` if it has none."""
    prefix = f"$comment {STAMP_TAG} ".encode()
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
    except OSError as exc:
        raise WaveformError(f"{path}: cannot read ({exc.strerror})") from None
    if not first.startswith(prefix):
        return None
    body = first[len(prefix) :].rstrip().removesuffix(b"$end").strip()
    try:
        record = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise WaveformError(f"{path}: its {STAMP_TAG} comment is not valid JSON") from None
    if not isinstance(record, dict):
        raise WaveformError(f"{path}: its {STAMP_TAG} comment is not a JSON object")
    return record


def recorded_preset(path: Path, record: dict) -> HardwareConfig:
    """The preset a stamped VCD was recorded with, rebuilt and validated from its values."""
    preset = record.get("preset")
    values = preset.get("values") if isinstance(preset, dict) else None
    if not isinstance(values, dict):
        raise WaveformError(f"{path}: its {STAMP_TAG} comment records no preset values")
    try:
        return HardwareConfig.from_dict(values, f"{path} (recorded preset)")
    except ConfigError as exc:
        raise WaveformError(str(exc)) from None


def _differences(a: HardwareConfig, b: HardwareConfig) -> list[str]:
    """``section.key a-value vs b-value`` for every value that differs (name included)."""
    da, db = a.to_dict(), b.to_dict()
    out = [f"name {da['name']!r} vs {db['name']!r}"] if da["name"] != db["name"] else []
    for section, table in da.items():
        if isinstance(table, dict):
            out += [
                f"{section}.{k} {v} vs {db[section][k]}"
                for k, v in table.items()
                if db[section].get(k) != v
            ]
    return out


def summary_preset(
    path: Path, preset: str | None, default: str = DEFAULT_PRESET
) -> tuple[HardwareConfig, list[str]]:
    """The preset to re-time the VCD at ``path`` with, and notes on where it came from.

    A stamped VCD brings its own preset; ``preset`` (a name or TOML path) must then have the
    same values, else :class:`WaveformError` lists the values that differ. An unstamped VCD
    is re-timed with ``preset`` (default ``default``) and the note says so. A stamped VCD of
    a block that is not a scheduler (``dpa``, ``bank_slice``) is refused with what to do.
    """
    path = Path(path)
    if not path.is_file():
        raise WaveformError(f"{path}: {'not a file' if path.exists() else 'no such file'}")
    record = read_stamp(path)
    if record is None:
        cfg = load_preset(preset or default)
        how = "given by --preset" if preset else "the default; pass --preset if it was another"
        return cfg, [f"the VCD records no preset; re-timed with preset {cfg.name} ({how})"]
    block = record.get("block")
    if record.get("kernel") is None:
        raise WaveformError(
            f"{path} is a waveform of the {block} block (pimphony wave record --block {block}); "
            f"wave summary reads scheduler waveforms only (blocks {', '.join(_SCHEDULER_BLOCKS)}); "
            f"open it in GTKWave instead: gtkwave {path.with_suffix('.gtkw')}"
        )
    cfg = recorded_preset(path, record)
    if preset is not None:
        given = load_preset(preset)
        if given.sha256() != cfg.sha256():
            diff = "; ".join(_differences(cfg, given)[:6])
            raise WaveformError(
                f"{path} was recorded with preset {cfg.name} (sha256 {cfg.sha256()[:12]}); "
                f"--preset {preset} differs ({diff}); omit --preset to use the recorded values"
            )
    return cfg, [f"re-timed with the preset recorded in the VCD: {cfg.name} ({cfg.sha256()[:12]})"]


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
        VCD written by :func:`record_waves` or ``sim.verify.scheduler.run_rtl(..., waves=True)``.
    cfg
        The hardware configuration the RTL was built for (payload layout and timing).

    Returns
    -------
    dict
        ``cycles``, ``mac_utilization``, ``commands``, ``counts`` (per opcode name),
        ``first_issue``, ``last_issue``, ``longest_stall``, ``runs``, ``notes``, ``signals``.
    """
    from pimphony.rtl.common import command_layout, issued_layout
    from vcdvcd import VCDVCD

    path = Path(path)
    _check_finished(path)
    refs = list(vcd_references(path))
    scopes = {part for r in refs for part in signal_base(r).split(".")[:-1]}
    blocks = [b for b in _OTHER_BLOCKS if b in scopes]
    if blocks and not scopes & set(_SCHEDULER_BLOCKS):
        raise WaveformError(
            f"{path} is a waveform of the {blocks[0]} block; wave summary reads scheduler "
            f"waveforms only (blocks {', '.join(_SCHEDULER_BLOCKS)}); open it in GTKWave"
        )
    names = {
        n: find_signal(refs, n, path=path) for n in ("clk", "o__valid", "o__ready", "o__payload")
    }
    rst = find_signal(refs, "rst", required=False)
    if rst:
        names["rst"] = rst
    layout, cmd = issued_layout(cfg), command_layout(cfg)
    width = signal_width(names["o__payload"])
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
    _check_all_issued(path, len(issued))
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


def _check_finished(path: Path) -> None:
    """Refuse a VCD whose last line is unfinished (a dump stopped mid-write)."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - 1))
        last = f.read(1)
    if size and last != b"\n":
        raise WaveformError(
            f"{path}: truncated (its last line is unfinished, {size} bytes); re-record it"
        )


def _check_all_issued(path: Path, issued: int) -> None:
    """Refuse a stamped VCD (:func:`record_waves`) that issues fewer commands than its run
    had: cut short at a line break."""
    record = read_stamp(path) or {}
    expected = record.get("commands")
    if isinstance(expected, int) and issued < expected:
        raise WaveformError(
            f"{path}: truncated: it issues {issued} of the {expected} commands its run had "
            "(the stamp records them); re-record it"
        )


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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``pimphony wave summary``."""
    p.add_argument("vcd", type=Path, metavar="FILE.vcd", help="scheduler waveform")
    p.add_argument(
        "--preset",
        help="preset the RTL was built for (default: the one recorded in the VCD, else aim-16ch);"
        " refused if it differs from the recorded one",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    """``pimphony wave summary``: cycles and MAC utilisation read back from a VCD."""
    cfg, notes = summary_preset(args.vcd, args.preset)
    summary = summarize_vcd(args.vcd, cfg)
    summary["notes"] = notes + summary["notes"]
    summary["preset_sha256"] = cfg.sha256()
    summary["recorded"] = read_stamp(args.vcd)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"{args.vcd}: issue stream of the RTL (preset {cfg.name})")
        print(format_summary(summary))
    return 0
