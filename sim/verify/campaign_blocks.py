# amaranth: UnusedElaboratable=no
"""Random campaigns of the blocks the cocotb harnesses run (``dpa``, ``dpa_pipeline``,
``bank_slice``), and :data:`CAMPAIGNS`, the table of every block's campaign that
``pimphony verify campaign`` dispatches on.

Item ``i`` of a campaign with seed ``S`` is drawn from numpy's generators seeded ``(S, i)``
(and ``(S, i, 1)`` for the choice of a compiler item, as :func:`sim.verify.campaign.campaign_stream`
does), so any item can be drawn again alone (:func:`dpa_item`, :func:`slice_item`).

- **DPA** (``dpa``, ``dpa_pipeline``): one dispatch. A fraction ``kernels`` of the programs
  are compiler programs (:func:`compiler.dpa.encode_kernel`: QK^T or SV, ``d_h`` 1-128, a GQA
  group of 1, 2 or 4 with either mapping, ``T_cur`` 1-512 under a ``max_tokens`` up to
  4,096); the others are random programs (:func:`random_program`: up to four rules, loops
  nested up to four deep with constant or rule bounds, zero-trip ones included,
  ``DYN_MODI`` terms on every field scaled by loop indices and rules). A program is loaded
  at a random command-buffer address with a random VA2PA permutation at a random table base.
  On ``dpa``, a tenth of the dispatches have an unmapped virtual row (a hole or a short
  table) and a fraction ``ready`` an output ``ready`` pattern. Checks:
  :func:`sim.verify.dpa.compare_dispatch` (exact: commands and cycles; under a ``ready``
  pattern, rules-only: commands and order; unmapped: the commands before the faulting MAC,
  then the error flag and row) and :func:`sim.verify.dpa.compare_pipeline` (every command
  issued by the DCS in the TLM pipeline's cycle).
- **bank_slice**: PIM commands from the compiler (a fraction ``kernels``, shapes of
  :func:`sim.verify.campaign.kernel_shape`) or random
  (:func:`sim.verify.streams.random_stream`, 1 to ``max_length`` commands), with random host
  reads (0-256 over 1-16 banks and 1-4 rows, arriving at a rate of 0.05-0.6 per cycle), in
  DEX or baseline mode (half each), with input ``valid`` gaps (fraction ``gaps``) or an
  output ``ready`` pattern (fraction ``ready``). Checks:
  :func:`sim.verify.bank_slice.compare_with_tlm` (exact), or under a ``ready`` pattern
  :func:`models.bank_slice.check_bank_slice` (rules-only).

Items outside the RTL's build (more plain commands than its decoded table, deeper loops, a
negative field, a stream the TLM refuses) are drawn again (``redrawn``). Items go to the
harness in chunks, one simulator process per chunk (and mode), in a background thread while
the next chunk is drawn. The campaign stops at the first mismatch unless told to keep going;
:func:`shrink_item` then cuts it down (DPA: no ready pattern, the smallest failing ``T_cur``,
zero bases; bank_slice: delta debugging over the PIM commands and host reads) and
:func:`write_item` writes it as one JSON file that ``--replay`` runs again.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from pimphony.compiler.dpa import encode_kernel
from pimphony.compiler.kernels import GQA_MAPPINGS, CompileError, compile_kernel
from pimphony.models.bank_slice import (
    HOST_READ_DTYPE,
    SliceConfig,
    SliceError,
    check_bank_slice,
    empty_host_reads,
    run_bank_slice,
)
from pimphony.models.config import HardwareConfig
from pimphony.models.dpa.format import (
    Command,
    DpaError,
    DynLoop,
    DynModi,
    Header,
    Rule,
    Target,
)
from pimphony.models.dpa.program import DpaProgram, expand
from pimphony.models.fileio import check_writable, write_atomic
from pimphony.models.isa import COMMAND_DTYPE, Op, StreamError, gpr_tiles, validate_stream
from pimphony.rtl import Block
from pimphony.rtl.blocks import SCHEDULER_OF_BLOCK
from pimphony.rtl.dpa import DpaDispatcher
from pimphony.sim.verify import campaign as sched_campaign
from pimphony.sim.verify.bank_slice import SliceRun, compare_with_tlm, run_slice_batch, slice_built
from pimphony.sim.verify.campaign import (
    REDRAWS,
    CampaignOptions,
    CampaignResult,
    Replayed,
    ReplayError,
    Reproduction,
    ReproTarget,
    chunk_ranges,
    compiler_item,
    describe_item,
    draw_gaps,
    draw_ready,
    format_rate,
    kernel_shape,
    shrink_chunks,
)
from pimphony.sim.verify.dpa import (
    DpaResult,
    DpaRun,
    compare_dispatch,
    compare_pipeline,
    dpa_built,
    make_run,
)
from pimphony.sim.verify.dpa import run_rtl_dpa as _run_rtl_dpa
from pimphony.sim.verify.runner import CosimError
from pimphony.sim.verify.streams import random_stream

__all__ = [
    "CAMPAIGNS",
    "UNMAPPED_FRACTION",
    "BlockCampaign",
    "BlockResult",
    "DpaItem",
    "ShrunkItem",
    "SliceItem",
    "dpa_item",
    "expanded_length",
    "random_program",
    "replay_item",
    "run_block_campaign",
    "shrink_item",
    "slice_item",
    "write_item",
]

UNMAPPED_FRACTION = 0.1
"""Fraction of ``dpa`` dispatches with an unmapped virtual row (a hole or a short table)."""
DPA_T_MAX = 512
"""Largest ``T_cur`` of a compiler DPA program."""
DPA_MAX_TOKENS = 4096
"""Largest ``max_tokens`` a DPA program is encoded for."""
DPA_COMMANDS_MAX = 20_000
"""Most commands of a compiler DPA item or a shrinking candidate (random programs: at most
``max_length``)."""
HOST_READS_MAX = 256
"""Most host reads of a bank_slice item."""
SHRINK_BATCH_OPERATIONS = 100_000
"""PIM commands and host reads per simulator process while shrinking a bank_slice item."""


@dataclass
class BlockResult(CampaignResult):
    """:class:`~sim.verify.campaign.CampaignResult` of a cocotb block: ``streams`` counts the
    items, ``details`` the kinds of items (unmapped rows, DEX vs baseline, host reads)."""

    details: dict[str, int] = field(default_factory=dict)

    def absorb(self, later: CampaignResult) -> None:
        """:meth:`CampaignResult.absorb`, the kinds of items added up too."""
        super().absorb(later)
        for kind, n in (later.details if isinstance(later, BlockResult) else {}).items():
            self.details[kind] = self.details.get(kind, 0) + n


# -- DPA items ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class DpaItem:
    """One dispatch of a DPA campaign: the program, ``T_cur``, VA2PA table, where they are
    loaded, the output ``ready`` pattern (``None``: always ready), the TLM's command count
    and whether the TLM stops at an unmapped virtual row."""

    index: int
    program: DpaProgram
    t_cur: int
    table: tuple[int, ...]
    table_base: int = 0
    program_base: int = 0
    request: int = 0
    layer: int = 0
    ready_pattern: tuple[int, ...] | None = None
    commands: int = 0
    unmapped: bool = False
    source: str = "random"
    redrawn: int = 0
    alias: str = ""

    @property
    def name(self) -> str:
        """The run's name in the simulator's job file (``alias`` if given)."""
        return self.alias or f"item{self.index}"

    @property
    def exact(self) -> bool:
        """Checked against the TLM's cycles (no ``ready`` pattern)."""
        return self.ready_pattern is None

    def run(self) -> DpaRun:
        """The host writes of this dispatch (:func:`sim.verify.dpa.make_run`)."""
        return make_run(
            self.name,
            self.program,
            self.t_cur,
            list(self.table),
            self.ready_pattern,
            request=self.request,
            layer=self.layer,
            program_base=self.program_base,
            table_base=self.table_base,
        )

    def describe(self) -> str:
        """``#12 (87 commands, qk d_h=64 ..., T_cur 40, ready pattern of 9)``-style text."""
        what = [f"{self.commands} commands", self.source, f"T_cur {self.t_cur}"]
        if self.unmapped:
            what.append("unmapped row")
        if self.ready_pattern is not None:
            what.append(f"ready pattern of {len(self.ready_pattern)}")
        return f"#{self.index} ({', '.join(what)})"


def _rules(rng: np.random.Generator) -> list[Rule]:
    out = []
    for rid in range(int(rng.integers(0, 5))):
        negate = bool(rng.random() < 0.25)
        out.append(
            Rule(
                rid,
                offset=int(rng.integers(-8, 33)),
                divisor=int(rng.choice((1, int(rng.integers(1, 9)), int(rng.integers(1, 257))))),
                modulus=int(rng.integers(1, 9)) if rng.random() < 0.3 else 0,
                negate=negate,
                add=int(rng.integers(0, 41)) if negate else int(rng.integers(-4, 9)),
                clamp=int(rng.integers(1, 13)) if rng.random() < 0.7 else 0,
            )
        )
    return out


_TARGETS = {
    Op.WR_INP: (Target.GBUF, Target.GPR),
    Op.MAC: (Target.GBUF, Target.ROW, Target.COL, Target.OUT),
    Op.RD_OUT: (Target.OUT, Target.GPR),
}
"""``DYN_MODI`` targets of each opcode: its operands (:data:`models.isa.OPERAND_FIELDS`)."""


def random_program(
    cfg: HardwareConfig, rng: np.random.Generator, max_commands: int = 12, max_depth: int = 4
) -> DpaProgram:
    """A random DPA program: up to four rules, then up to ``max_commands`` plain commands in
    loops nested up to ``max_depth`` deep (constant bounds 0-4 or rule bounds), each command
    with 0-3 ``DYN_MODI`` terms (scaled by an enclosing loop's index and/or a rule).

    Every command sets and modifies only its operands (:data:`models.isa.OPERAND_FIELDS`:
    only MACs carry rows and columns). Fields may still come out negative (:func:`expand`
    refuses those).
    """
    ch = cfg.channel
    rules = _rules(rng)
    left = [int(rng.integers(1, max_commands + 1))]

    def command(depth: int) -> list:
        op = Op(int(rng.choice(3, p=[0.3, 0.5, 0.2])))
        words: list = []
        for _ in range(int(rng.integers(0, 4))):
            level = int(rng.integers(0, depth)) if depth and rng.random() < 0.8 else None
            rule = int(rng.integers(0, len(rules))) if rules and rng.random() < 0.3 else None
            coef = int(rng.integers(-2, 9)) if rng.random() < 0.9 else int(rng.integers(9, 70))
            words.append(DynModi(Target(rng.choice(_TARGETS[op])), coef, level, rule))
        mac = op == Op.MAC
        words.append(
            Command(
                op,
                gbuf=int(rng.integers(0, ch.gbuf_entries)) if op != Op.RD_OUT else 0,
                row=int(rng.integers(0, 8)) if mac else 0,
                col=int(rng.integers(0, ch.columns_per_row)) if mac else 0,
                out=int(rng.integers(0, ch.obuf_entries)) if op != Op.WR_INP else 0,
                gpr=int(rng.integers(0, 16)) if not mac else 0,
            )
        )
        left[0] -= 1
        return words

    def body(depth: int) -> list:
        words: list = []
        for _ in range(int(rng.integers(1, 4))):
            if left[0] <= 0:
                break
            if depth < max_depth and rng.random() < 0.4:
                inner = body(depth + 1)
                if not inner:
                    continue
                if rules and rng.random() < 0.4:
                    loop = DynLoop(le=len(inner), rule=int(rng.integers(0, len(rules))))
                else:
                    loop = DynLoop(le=len(inner), count=int(rng.integers(0, 5)))
                words += [loop, *inner]
            else:
                words += command(depth)
        return words

    words = body(0)
    while left[0] > 0 or not words:
        words += command(0)
    header = Header(kernel=int(rng.integers(0, 3)), max_tokens=int(rng.integers(1, 4097)))
    return DpaProgram.from_instructions([header, *rules, *words], cfg, {"kind": "random"})


def expanded_length(program: DpaProgram, t_cur: int) -> int:
    """Commands :func:`models.dpa.program.expand` would emit for ``T_cur``, counted without
    expanding (a random program's nested rule-bound loops can run to billions)."""
    ins = program.instructions()
    values = {r.rule_id: r.evaluate(t_cur) for r in ins if isinstance(r, Rule)}

    def body(lo: int, hi: int) -> int:
        total, i = 0, lo
        while i < hi:
            x = ins[i]
            if isinstance(x, DynLoop):
                trips = x.count if x.rule is None else values[x.rule]
                total += trips * body(i + 1, i + 1 + x.le) if trips > 0 else 0
                i += 1 + x.le
            else:
                total += isinstance(x, Command)
                i += 1
        return total

    return body(1, len(ins))


def _nesting(program: DpaProgram) -> int:
    """The deepest loop nesting of ``program``."""
    ends: list[int] = []
    deepest = 0
    for i, ins in enumerate(program.instructions()):
        while ends and i > ends[-1]:
            ends.pop()
        if isinstance(ins, DynLoop):
            ends.append(i + ins.le)
            deepest = max(deepest, len(ends))
    return deepest


def _builds(cfg: HardwareConfig) -> DpaDispatcher:
    """The dispatcher as co-simulated (its sizes bound what a campaign may draw; never
    elaborated here, hence the ``UnusedElaboratable=no`` linter option of this file)."""
    return DpaDispatcher(cfg)


def dpa_item(
    cfg: HardwareConfig,
    block: str,
    seed: int,
    index: int,
    options: CampaignOptions | None = None,
    dispatcher: DpaDispatcher | None = None,
) -> DpaItem:
    """Dispatch ``index`` of the ``dpa`` or ``dpa_pipeline`` campaign with ``seed`` (see the
    module docstring). ``dispatcher`` (built for ``cfg`` if not given) bounds the program
    size, loop depth, plain commands and table."""
    opts = options or CampaignOptions()
    g = (dispatcher or _builds(cfg)).geom
    pipeline = block == Block.DPA_PIPELINE
    rng = np.random.default_rng([seed, index])
    compiler = compiler_item(seed, index, opts.kernels)
    for redrawn in range(REDRAWS + 1):
        if compiler:
            kind = str(rng.choice(("qk", "sv")))
            d_h, group = int(rng.integers(1, 129)), int(rng.choice((1, 1, 2, 4)))
            mapping = str(rng.choice(GQA_MAPPINGS)) if group > 1 else GQA_MAPPINGS[0]
            t_cur = int(rng.integers(1, DPA_T_MAX + 1))
            max_tokens = int(rng.integers(t_cur, DPA_MAX_TOKENS + 1))
            source = f"{kind} d_h={d_h} gqa_group={group} mapping={mapping} max_tokens={max_tokens}"
            try:
                program = encode_kernel(cfg, kind, d_h, group, max_tokens, mapping)
            except CompileError:
                continue
        else:
            program = random_program(cfg, rng)
            t_cur = int(rng.integers(1, program.max_tokens + 1))
            source = "random"
        ins = program.instructions()
        if (
            sum(isinstance(i, Command) for i in ins) > g.decoded_entries
            or _nesting(program) > g.depth
            or len(ins) > g.command_words
        ):
            continue
        length = expanded_length(program, t_cur)
        if length > (DPA_COMMANDS_MAX if compiler else opts.max_length):
            continue
        try:
            virtual = expand(program, t_cur, None)
            validate_stream(virtual, cfg.channel, gpr_tiles(cfg))
        except (DpaError, StreamError):  # a negative field, or not a channel stream
            continue
        n = int(virtual.shape[0])
        if not compiler and n > opts.max_length or pipeline and n == 0:
            continue
        mac = virtual["op"] == Op.MAC
        rows = int(virtual["row"][mac].max()) + 1 if mac.any() else 0
        size = rows + int(rng.integers(0, 4))
        if size > g.map_entries:
            continue
        table = rng.choice(cfg.channel.rows_per_bank, size, replace=False).astype(np.int64)
        unmapped = not pipeline and mac.any() and rng.random() < UNMAPPED_FRACTION
        if unmapped:
            row = int(rng.choice(np.unique(virtual["row"][mac])))
            if row and rng.random() < 0.5:
                table = table[:row]
            else:
                table[row] = -1
        ready = None
        if not pipeline and rng.random() < opts.ready:
            ready = draw_ready(rng)
        return DpaItem(
            index,
            program,
            t_cur,
            tuple(int(v) for v in table),
            table_base=int(rng.integers(0, g.map_entries - table.shape[0] + 1)),
            program_base=int(rng.integers(0, g.command_words - len(ins) + 1)),
            request=int(rng.integers(0, 1 << 16)),
            layer=int(rng.integers(0, 256)),
            ready_pattern=ready,
            commands=n,
            unmapped=bool(unmapped),
            source=source,
            redrawn=redrawn,
        )
    raise CosimError(f"item {index} of seed {seed}: {REDRAWS + 1} DPA programs refused")


def _dpa_check(block: str, cfg: HardwareConfig, item: DpaItem, result: DpaResult) -> str | None:
    name = f"{block} item {item.describe()}"
    if block == Block.DPA_PIPELINE:
        return compare_pipeline(name, cfg, item.program, item.t_cur, list(item.table), result)
    return compare_dispatch(
        name, item.program, item.t_cur, list(item.table), result, check_cycles=item.exact
    )


# -- bank_slice items -----------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SliceItem:
    """One bank_slice run (PIM commands, host reads, gaps or ready pattern) and its mode."""

    index: int
    run: SliceRun
    sliced: bool
    source: str = "random"
    redrawn: int = 0

    @property
    def name(self) -> str:
        """The run's name in the simulator's job file."""
        return self.run.name

    @property
    def exact(self) -> bool:
        """Checked against the TLM's cycles (no ``ready`` pattern)."""
        return self.run.ready_pattern is None

    @property
    def commands(self) -> int:
        """PIM commands plus host reads."""
        return int(self.run.pim.shape[0] + self.run.host.shape[0])

    @property
    def slicing(self) -> SliceConfig:
        """The controller's mode."""
        return SliceConfig(sliced=self.sliced)

    def describe(self) -> str:
        """``#12 (DEX, 87 PIM commands, 40 host reads, valid gaps)``-style text."""
        r = self.run
        what = ["DEX" if self.sliced else "baseline", f"{r.pim.shape[0]} PIM commands"]
        what.append(f"{r.host.shape[0]} host reads")
        return describe_item(self.index, what, self.source, r.valid_gaps, r.ready_pattern)


def _host_reads(cfg: HardwareConfig, rng: np.random.Generator, n: int) -> np.ndarray:
    ch = cfg.channel
    host = empty_host_reads(n)
    banks = rng.choice(ch.banks, int(rng.integers(1, ch.banks + 1)), replace=False)
    host["bank"] = banks[rng.integers(0, banks.shape[0], n)]
    host["row"] = rng.integers(0, int(rng.integers(1, 5)), n)
    host["col"] = rng.integers(0, ch.columns_per_row, n)
    host["arrival"] = np.cumsum(rng.geometric(rng.uniform(0.05, 0.6), n)) - 1
    return host


def slice_item(
    cfg: HardwareConfig, seed: int, index: int, options: CampaignOptions | None = None
) -> SliceItem:
    """Run ``index`` of the bank_slice campaign with ``seed`` (see the module docstring)."""
    opts = options or CampaignOptions()
    rng = np.random.default_rng([seed, index])
    sliced = bool(rng.random() < 0.5)
    compiler = compiler_item(seed, index, opts.kernels)
    for redrawn in range(REDRAWS + 1):
        source = "random"
        if compiler:
            kind, shape = kernel_shape(rng)
            try:
                pim = compile_kernel(cfg, kind, **shape).commands
            except CompileError:
                continue
            source = " ".join([kind, *(f"{k}={v}" for k, v in shape.items())])
        else:
            n = int(rng.integers(1, opts.max_length + 1))
            entries, rows = int(rng.integers(1, 9)), int(rng.integers(1, 5))
            pim = random_stream(cfg, n, int(rng.integers(2**32)), entries=entries, rows=rows)
        n_host = int(rng.integers(0, min(HOST_READS_MAX, max(8, pim.shape[0])) + 1))
        host = _host_reads(cfg, rng, n_host)
        try:
            run_bank_slice(pim, host, cfg, SliceConfig(sliced=sliced))
        except SliceError:
            continue
        name = f"item{index}"
        kind = rng.random()
        if kind < opts.ready:
            run = SliceRun(name, pim, host, ready_pattern=draw_ready(rng))
        elif kind < opts.ready + opts.gaps:
            run = SliceRun(name, pim, host, valid_gaps=draw_gaps(rng, int(pim.shape[0])))
        else:
            run = SliceRun(name, pim, host)
        return SliceItem(index, run, sliced, source, redrawn)
    raise CosimError(f"item {index} of seed {seed}: {REDRAWS + 1} bank_slice runs refused")


def _slice_check(cfg: HardwareConfig, item: SliceItem, issue: tuple) -> str | None:
    pim_issue, host_issue = issue
    if item.exact:
        return compare_with_tlm(cfg, item.slicing, item.run, pim_issue, host_issue)
    problems = check_bank_slice(item.run.pim, item.run.host, pim_issue, host_issue, cfg)
    if not problems:
        return None
    mode = "DEX" if item.sliced else "baseline"
    return f"run {item.name!r} ({mode}) {item.describe()}: {'; '.join(problems)}"


# -- running items --------------------------------------------------------------------------

Item = DpaItem | SliceItem
Outcome = tuple[dict[str, object], dict[str, int]]
"""A batch's results by item name and the cycles each simulated."""


def _simulate_dpa(block: str, cfg: HardwareConfig, items: Sequence[DpaItem]) -> Outcome:
    res = _run_rtl_dpa(block, cfg, [it.run() for it in items])
    return dict(res), {name: r.cycles_simulated for name, r in res.items()}


def _simulate_slice(_block: str, cfg: HardwareConfig, items: Sequence[SliceItem]) -> Outcome:
    issue: dict[str, object] = {}
    cycles: dict[str, int] = {}
    for sliced in (True, False):
        runs = [it.run for it in items if it.sliced == sliced]
        if runs or not items:  # no items: build (or find) both modes
            batch = run_slice_batch(cfg, SliceConfig(sliced=sliced), runs)
            issue.update(batch.issue)
            cycles.update(batch.cycles)
    return issue, cycles


@dataclass(frozen=True)
class _ItemKind:
    """How a cocotb block's items are drawn (``draw(cfg, block, seed, index, options,
    dispatcher)``, as :func:`dpa_item`), simulated (one process per batch and mode) and
    checked, and whether its simulator builds are cached (``built(block, cfg)``)."""

    draw: Callable[..., Item]
    simulate: Callable[[str, HardwareConfig, Sequence[Item]], Outcome]
    check: Callable[[str, HardwareConfig, Item, object], str | None]
    built: Callable[[str, HardwareConfig], bool]
    dispatcher: bool


_DPA_KIND = _ItemKind(dpa_item, _simulate_dpa, _dpa_check, dpa_built, True)
_ITEM_KINDS: dict[Block, _ItemKind] = {
    Block.DPA: _DPA_KIND,
    Block.DPA_PIPELINE: _DPA_KIND,
    Block.BANK_SLICE: _ItemKind(
        lambda cfg, _block, seed, i, opts, _dut: slice_item(cfg, seed, i, opts),
        _simulate_slice,
        lambda _b, cfg, item, res: _slice_check(cfg, item, res),
        lambda _b, cfg: all(slice_built(cfg, SliceConfig(sliced=s)) for s in (True, False)),
        False,
    ),
}
"""The item kind of every cocotb block."""
COCOTB_BLOCKS = tuple(_ITEM_KINDS)
"""The blocks :func:`run_block_campaign` runs (on their cocotb harnesses)."""


def _simulate(block: str, cfg: HardwareConfig, items: Sequence[Item]) -> Outcome:
    """Every item on ``block``'s cocotb harness: one process (one per mode for bank_slice)."""
    return _ITEM_KINDS[Block(block)].simulate(block, cfg, items)


def _check(block: str, cfg: HardwareConfig, item: Item, result) -> str | None:
    return _ITEM_KINDS[Block(block)].check(block, cfg, item, result)


def _tally(r: BlockResult, item: Item) -> None:
    d = r.details
    if isinstance(item, DpaItem):
        d["unmapped"] = d.get("unmapped", 0) + item.unmapped
    else:
        mode = "dex" if item.sliced else "baseline"
        d[mode] = d.get(mode, 0) + 1
        d["host_reads"] = d.get("host_reads", 0) + int(item.run.host.shape[0])


def run_block_campaign(
    block: str,
    cfg: HardwareConfig,
    items: int | range,
    seed: int,
    options: CampaignOptions | None = None,
    progress: Callable[[CampaignResult], None] | None = None,
) -> BlockResult:
    """Run ``items`` random items (a count, or a range of item indices) on ``block``'s
    cocotb harness (``dpa``, ``dpa_pipeline`` or ``bank_slice``) at ``cfg``; stop at the
    first mismatch unless ``options.keep_going``.

    ``options.chunk`` items go to one simulator process; the next chunk is drawn while it
    runs. ``progress(result)`` is called after every chunk. ``sim_seconds`` is the time spent
    in the simulator processes (start-up included), ``build_seconds`` that of converting the
    Verilog and, if it is not cached, of an empty first run that builds it.

    Raises
    ------
    CosimError
        ``block`` has no cocotb campaign, the build failed, or a run did not complete.
    """
    if block not in COCOTB_BLOCKS:
        raise CosimError(
            f"block {block!r} has no cocotb campaign; allowed: {', '.join(COCOTB_BLOCKS)}"
        )
    opts = options or CampaignOptions()
    kind = _ITEM_KINDS[Block(block)]
    dut = _builds(cfg) if kind.dispatcher else None
    t0 = time.perf_counter()
    if not kind.built(block, cfg):  # build first, so that the rates leave the build out
        _simulate(block, cfg, [])
    result = BlockResult(block, cfg.name, seed, build_seconds=time.perf_counter() - t0)
    started = time.perf_counter()

    def simulate(batch: list[Item]) -> tuple[Outcome, float]:
        t = time.perf_counter()
        out = _simulate(block, cfg, batch)
        return out, time.perf_counter() - t

    def settle(batch: list[Item], outcome: tuple[Outcome, float]) -> None:
        (res, cycles), seconds = outcome
        for item in batch:
            msg = _check(block, cfg, item, res[item.name])
            result.count(item, msg, item.exact, item.source, item.redrawn, item.commands)
            result.cycles += cycles[item.name]
            _tally(result, item)
            if result.stopped(opts.keep_going):
                break
        result.sim_seconds += seconds
        result.seconds = time.perf_counter() - started
        if progress:
            progress(result)

    batches = (
        [kind.draw(cfg, block, seed, i, opts, dut) for i in indices]
        for indices in chunk_ranges(items, opts.chunk)
    )
    with ThreadPoolExecutor(max_workers=1) as pool:
        sched_campaign.pipelined(
            batches,
            lambda b: pool.submit(simulate, b),
            lambda f: f.result(),
            settle,
            lambda: result.stopped(opts.keep_going),
        )
    return result


# -- shrinking ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ShrunkItem:
    """A failing item cut down by :func:`shrink_item`: the item, its mismatch message, its
    size before (commands; for DPA also ``T_cur``), and the candidates and processes spent."""

    item: Item
    message: str
    original: dict[str, int]
    candidates: int
    runs: int


def _first_failing(
    block: str, cfg: HardwareConfig, candidates: Sequence[Item], counter: list[int]
) -> tuple[Item, str] | None:
    """The first of ``candidates`` that still mismatches (run in as few processes as
    :data:`SHRINK_BATCH_OPERATIONS` allows), with its message, else ``None``."""
    start = 0
    while start < len(candidates):
        end, total = start, 0
        while end < len(candidates) and (end == start or total < SHRINK_BATCH_OPERATIONS):
            total += candidates[end].commands
            end += 1
        batch = list(candidates[start:end])
        res, _ = _simulate(block, cfg, batch)
        counter[0] += len(batch)
        counter[1] += 1
        for item in batch:
            msg = _check(block, cfg, item, res[item.name])
            if msg:
                return _unnamed(item), msg
        start = end
    return None


def _smaller_t(block: str, item: DpaItem) -> list[DpaItem]:
    """``item`` at each ``T_cur`` of 1, 2, 4, ... and half of it below its own, ascending,
    where the program expands to a dispatch the campaign could have drawn for ``block``."""
    out = []
    ts = sorted({1 << k for k in range(item.t_cur.bit_length())} | {item.t_cur // 2})
    for t in (t for t in ts if 1 <= t < item.t_cur):
        if expanded_length(item.program, t) > max(item.commands, DPA_COMMANDS_MAX):
            continue
        try:
            n = int(expand(item.program, t, None).shape[0])
        except DpaError:
            continue
        try:
            expand(item.program, t, list(item.table))
            unmapped = False
        except DpaError:
            unmapped = True
        if block == Block.DPA_PIPELINE and (unmapped or n == 0):
            continue
        out.append(replace(item, t_cur=t, commands=n, unmapped=unmapped))
    return out


def _dpa_candidates(block: str, item: DpaItem) -> list[DpaItem]:
    """Simpler dispatches, simplest first: without the ready pattern and at zero bases
    (request and layer 0) at a smaller ``T_cur`` (:func:`_smaller_t`) and at its own; then
    each simplification alone; then ``item`` at a smaller ``T_cur``."""
    simple = replace(item, ready_pattern=None, table_base=0, program_base=0, request=0, layer=0)
    out = [*_smaller_t(block, simple), simple]
    if item.ready_pattern is not None:
        out.append(replace(item, ready_pattern=None))
    bases = replace(item, table_base=0, program_base=0, request=0, layer=0)
    out += [bases, *_smaller_t(block, item)]
    same = {"ready_pattern", "table_base", "program_base", "request", "layer", "t_cur"}
    return [c for c in out if any(getattr(c, f) != getattr(item, f) for f in same)]


def _named(items: Sequence[Item]) -> list[Item]:
    """``items`` under distinct run names (shrinking candidates share an index)."""
    return [
        replace(it, run=replace(it.run, name=f"c{k}"))
        if isinstance(it, SliceItem)
        else replace(it, alias=f"c{k}")
        for k, it in enumerate(items)
    ]


def _unnamed(item: Item) -> Item:
    """``item`` under its campaign name again."""
    if isinstance(item, SliceItem):
        return replace(item, run=replace(item.run, name=f"item{item.index}"))
    return replace(item, alias="")


def _slice_subset(item: SliceItem, keep_pim: np.ndarray, keep_host: np.ndarray) -> SliceItem:
    r = item.run
    gaps = None if r.valid_gaps is None else tuple(r.valid_gaps[k] for k in keep_pim)
    run = SliceRun(r.name, r.pim[keep_pim].copy(), r.host[keep_host].copy(), gaps, r.ready_pattern)
    return replace(item, run=run)


def _legal(cfg: HardwareConfig, item: SliceItem) -> bool:
    if item.run.pim.shape[0] + item.run.host.shape[0] == 0:
        return False
    try:
        run_bank_slice(item.run.pim, item.run.host, cfg, item.slicing)
    except SliceError:
        return False
    return True


def _slice_simpler(item: SliceItem) -> list[SliceItem]:
    r = item.run
    out = []
    if r.valid_gaps is not None:
        out.append(replace(item, run=replace(r, valid_gaps=None)))
    if r.ready_pattern is not None:
        out.append(replace(item, run=replace(r, ready_pattern=None)))
    return out


def shrink_item(block: str, cfg: HardwareConfig, item: Item, message: str) -> ShrunkItem:
    """Cut failing ``item`` down while a mismatch persists; every candidate is an item the
    campaign could have drawn, checked the same way.

    DPA: the dispatch without its ready pattern, at zero bases, then at the smallest failing
    ``T_cur`` among 1, 2, 4, ... and half of it, until none fails (the program and table
    are kept). bank_slice: without gaps or
    ready pattern, then delta debugging over the PIM commands and host reads together
    (chunks dropped while the mismatch persists, down to single operations: 1-minimal).
    The candidates of a round run in one simulator process.
    """
    counter = [0, 0]
    original = {"commands": item.commands}
    cur, msg = item, message
    if isinstance(item, DpaItem):
        original["t_cur"] = item.t_cur
        # Every step drops the ready pattern or the bases or lowers T_cur: it ends.
        while found := _first_failing(block, cfg, _named(_dpa_candidates(block, cur)), counter):
            cur, msg = found
        return ShrunkItem(cur, msg, original, counter[0], counter[1])
    for candidate in _slice_simpler(cur):
        found = _first_failing(block, cfg, _named([candidate]), counter)
        if found:
            cur, msg = found

    def keep(item: SliceItem, kept: np.ndarray) -> SliceItem | None:
        n_pim = int(item.run.pim.shape[0])
        c = _slice_subset(item, kept[kept < n_pim], kept[kept >= n_pim] - n_pim)
        return c if _legal(cfg, c) else None

    cur, msg = shrink_chunks(
        cur,
        msg,
        lambda c: c.commands,
        keep,
        lambda found: _first_failing(block, cfg, _named(found), counter),
    )
    return ShrunkItem(cur, msg, original, counter[0], counter[1])


# -- reproducers ----------------------------------------------------------------------------


def _array_record(arr: np.ndarray) -> dict[str, list[int]]:
    return {name: [int(v) for v in arr[name]] for name in arr.dtype.names}


def _item_record(item: Item) -> dict:
    if isinstance(item, DpaItem):
        return {
            "program": [int(w) for w in item.program.words],
            "t_cur": item.t_cur,
            "table": list(item.table),
            "table_base": item.table_base,
            "program_base": item.program_base,
            "request": item.request,
            "layer": item.layer,
            "ready_pattern": None if item.ready_pattern is None else list(item.ready_pattern),
            "unmapped": item.unmapped,
        }
    r = item.run
    return {
        "sliced": item.sliced,
        "pim": _array_record(r.pim),
        "host": _array_record(r.host),
        "valid_gaps": None if r.valid_gaps is None else list(r.valid_gaps),
        "ready_pattern": None if r.ready_pattern is None else list(r.ready_pattern),
    }


def write_item(
    directory: str | Path,
    shrunk: ShrunkItem,
    *,
    block: str,
    cfg: HardwareConfig,
    preset: str,
    seed: int,
    options: CampaignOptions | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``shrunk`` as ``<block>-<preset>-seed<S>-item<I>.json`` in ``directory``: the
    item (DPA: program words, ``T_cur``, table, bases, ready pattern; bank_slice: mode, PIM
    commands and host reads field by field, gaps, ready pattern), the mismatch, where it
    came from and the commands that replay it and draw it again. Written atomically
    (:func:`models.fileio.write_atomic`); an existing file is kept unless ``overwrite``.

    Raises
    ------
    FileExistsError
        The file exists and ``overwrite`` is false.
    """
    item = shrunk.item
    stem = sched_campaign.repro_stem(block, preset, seed, item.index, "item")
    path = check_writable(Path(directory) / f"{stem}.json", overwrite)
    record = {
        "block": str(block),
        "preset": preset,
        "preset_name": cfg.name,
        "seed": seed,
        "index": item.index,
        "source": item.source,
        "check": "exact" if item.exact else "rules-only",
        "commands": item.commands,
        "original": shrunk.original,
        **_item_record(item),
        "mismatch": shrunk.message,
        "replay": shlex.join(["pimphony", "verify", "campaign", "--replay", str(path)]),
        "campaign": shlex.join(
            ["pimphony", "verify", "campaign", "--block", str(block), "--preset", preset]
            + ["--seed", str(seed), "--streams", str(item.index + 1)]
            + [str(x) for k, v in (options or CampaignOptions()).flags().items() for x in (k, v)]
        ),
        "shrink": {"candidates": shrunk.candidates, "runs": shrunk.runs},
    }
    write_atomic(path, (json.dumps(record, indent=2) + "\n").encode(), overwrite=overwrite)
    return path


def _ints(record: dict, path: Path, name: str, allow_none: bool = False) -> list[int] | None:
    value = record.get(name)
    if value is None and allow_none and name in record:
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ReplayError(f"{path}: field {name!r} must be a list of integers")
    return value


def _int(record: dict, path: Path, name: str) -> int:
    return sched_campaign.record_field(record, path, name, int)


def _array(record: dict, path: Path, name: str, dtype: np.dtype) -> np.ndarray:
    value = record.get(name)
    if not isinstance(value, dict) or set(value) != set(dtype.names):
        raise ReplayError(f"{path}: field {name!r} must hold the fields {', '.join(dtype.names)}")
    cols = {k: _ints(value, path, k) for k in dtype.names}
    lengths = {len(c) for c in cols.values()}
    if len(lengths) > 1:
        raise ReplayError(f"{path}: the fields of {name!r} differ in length")
    arr = np.zeros(lengths.pop(), dtype=dtype)
    for k, c in cols.items():
        try:
            arr[k] = np.asarray(c, dtype=np.int64)
        except OverflowError:
            raise ReplayError(f"{path}: {name}.{k} has values out of range") from None
        if (arr[k].astype(np.int64) != np.asarray(c, dtype=np.int64)).any():
            raise ReplayError(f"{path}: {name}.{k} has values out of range")
    return arr


def _item_of(block: str, cfg: HardwareConfig, record: dict, path: Path) -> Item:
    index = _int(record, path, "index")
    source = str(record.get("source", "random"))
    ready = sched_campaign.record_pattern(record, path, "ready_pattern")
    if ready is not None and (not ready or not any(ready)):
        raise ReplayError(f"{path}: field 'ready_pattern' is never 1")
    if block == Block.BANK_SLICE:
        sliced = record.get("sliced")
        if not isinstance(sliced, bool):
            raise ReplayError(f"{path}: field 'sliced' must be true or false")
        pim = _array(record, path, "pim", COMMAND_DTYPE)
        host = _array(record, path, "host", HOST_READ_DTYPE)
        gaps = sched_campaign.record_pattern(record, path, "valid_gaps")
        if gaps is not None and len(gaps) != pim.shape[0]:
            raise ReplayError(f"{path}: {len(gaps)} valid gaps for {pim.shape[0]} PIM commands")
        item = SliceItem(index, SliceRun(f"item{index}", pim, host, gaps, ready), sliced, source)
        try:
            run_bank_slice(pim, host, cfg, item.slicing, valid_gaps=gaps)
        except SliceError as exc:
            raise ReplayError(f"{path}: the TLM refuses the run ({exc})") from None
        return item
    words = _ints(record, path, "program")
    try:
        program = DpaProgram(np.array(words, dtype=np.uint64), cfg)
        t_cur = _int(record, path, "t_cur")
        commands = int(expand(program, t_cur, None).shape[0])
    except (DpaError, OverflowError, ValueError) as exc:
        raise ReplayError(f"{path}: not a DPA program the TLM expands ({exc})") from None
    table = tuple(_ints(record, path, "table"))
    vals = {k: _int(record, path, k) for k in ("table_base", "program_base", "request", "layer")}
    try:
        expand(program, t_cur, list(table))
        unmapped = False
    except DpaError:
        unmapped = True
    return DpaItem(
        index,
        program,
        t_cur,
        table,
        **vals,
        ready_pattern=ready,
        commands=commands,
        unmapped=unmapped,
        source=source,
    )


def replay_item(path: Path, record: dict) -> Replayed:
    """Run the reproducer ``record`` (read from ``path``, a JSON :func:`write_item` wrote)
    again on its block's harness and check it as the campaign did.

    Raises
    ------
    ReplayError
        A field is missing, of the wrong type or out of range, or the TLM refuses the item.
    """
    block = sched_campaign.record_field(record, path, "block", str)
    cfg = sched_campaign.record_preset(record, path)
    item = _item_of(block, cfg, record, path)
    res, _ = _simulate(block, cfg, [item])
    msg = _check(block, cfg, item, res[item.name])
    check = "exact" if item.exact else "rules-only"
    out = {"block": block, "commands": item.commands, "check": check}
    return Replayed(block, f"{item.describe()} ({check})", out, msg)


# -- the registry ---------------------------------------------------------------------------


Progress = Callable[[CampaignResult], None]
COCOTB_KERNELS = {Block.DPA: 0.5, Block.DPA_PIPELINE: 0.5, Block.BANK_SLICE: 0.2}
"""Default ``--kernels`` of the cocotb blocks: half compiler programs (DPA), a fifth
compiler PIM streams (bank_slice, whose compiler streams are the longest items)."""


@dataclass(frozen=True)
class BlockCampaign:
    """One row of :data:`CAMPAIGNS`: how ``pimphony verify campaign`` runs a block.

    ``harness`` names the simulator flow, ``unit`` what one random input is (``stream``,
    ``item``), ``kernels`` the default fraction of compiler inputs. ``run(block, cfg, n, seed,
    options, progress)`` runs the campaign (``n`` items, or a range of item indices),
    ``summary(result)`` gives its printed lines, ``reproduce(result, target)`` shrinks the
    first mismatch and writes it where :class:`ReproTarget` says, ``replay(path, record)``
    runs a reproducer again.
    """

    block: Block
    harness: str
    unit: str
    kernels: float
    run: Callable[
        [str, HardwareConfig, int | range, int, CampaignOptions, Progress | None], object
    ]
    summary: Callable[[CampaignResult], list[str]]
    reproduce: Callable[[CampaignResult, ReproTarget], Reproduction]
    replay: Callable[[Path, dict], Replayed]


def _block_summary(r: CampaignResult) -> list[str]:
    """Printed lines of a cocotb block's campaign."""
    details = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in r.details.items())
    lines = [
        f"{r.block} at {r.preset}, seed {r.seed}: {r.streams:,} items ({r.exact:,} exact vs "
        f"the TLM, {r.rules_only:,} by the rules; {r.kernels:,} from the compiler; "
        f"{r.redrawn} redrawn; {details}), {r.commands:,} commands, {r.cycles:,} cycles",
        f"mismatches: {len(r.mismatches)}; cocotb {r.cycles_per_s:,.0f} cycles/s; campaign "
        f"{format_rate(r.streams_per_s)} items/s ({r.seconds:.1f} s, Verilog and build "
        f"{r.build_seconds:.0f} s)",
    ]
    return lines + [f"  {msg}" for msg in r.mismatches[:10]]


def _block_run(block, cfg, n, seed, options, progress):
    return run_block_campaign(block, cfg, n, seed, options, progress)


def _block_reproduce(result: CampaignResult, to: ReproTarget) -> Reproduction:
    """Shrink the first failing item of ``result`` and write it as ``to`` says."""
    item = result.failure
    try:
        shrunk = shrink_item(result.block, to.cfg, item, result.mismatches[0])
        stopped = None
    except CosimError as exc:  # a candidate did not complete: keep the whole item
        shrunk = ShrunkItem(item, result.mismatches[0], {"commands": item.commands}, 0, 0)
        stopped = f"shrinking stopped ({exc}); the reproducer is the whole item"
    written, not_written = to.write(write_item, shrunk, result, to.options)
    before = ", ".join(f"{k} {v}" for k, v in shrunk.original.items())
    after = f"commands {shrunk.item.commands}"
    if isinstance(shrunk.item, DpaItem):
        after += f", t_cur {shrunk.item.t_cur}"
    lines = [
        f"shrunk item #{item.index} from {before} to {after} ({shrunk.candidates} candidates "
        f"in {shrunk.runs} simulator runs): {shrunk.message}"
    ]
    if written:
        lines.append(f"reproducer: {written}; replay: pimphony verify campaign --replay {written}")
    js = {
        "commands": shrunk.item.commands,
        "original": shrunk.original,
        "mismatch": shrunk.message,
        "files": [str(written)] if written else None,
        "not_written": not_written,
    }
    return Reproduction(tuple(lines), js, not_written, (stopped,) if stopped else ())


_ROWS: dict[Block, BlockCampaign] = {
    **{
        b: BlockCampaign(
            b,
            "compiled Verilator",
            "stream",
            0.1,
            sched_campaign.run_campaign,
            sched_campaign.summary,
            sched_campaign.scheduler_reproduce,
            sched_campaign.scheduler_replay,
        )
        for b in SCHEDULER_OF_BLOCK
    },
    **{
        b: BlockCampaign(
            b,
            "cocotb + Verilator",
            "item",
            COCOTB_KERNELS[b],
            _block_run,
            _block_summary,
            _block_reproduce,
            replay_item,
        )
        for b in COCOTB_BLOCKS
    },
}
CAMPAIGNS: dict[Block, BlockCampaign] = {b: _ROWS[b] for b in Block}
"""Every block's campaign, in :class:`rtl.Block` order (``--block all`` runs them in turn)."""
