"""Dynamic PIM Access (DPA): the instruction words and the on-module dispatcher TLM.

A DPA program (LoL-PIM 5.2, PIMphony VI-B) is a sequence of fixed-size 8-byte words: a
``HEADER``, ``RULE`` words (loop-bound rules, functions of the request's current token count
``T_cur``), plain channel commands (the fields of :mod:`models.isa`), ``DYN_LOOP`` (repeat the
next ``le`` words a constant or rule-given number of times) and ``DYN_MODI`` (add
``coef [* rule] [* loop index]`` to one field of the next plain command). MAC rows produced
this way are *virtual* rows, translated through the request's VA2PA table at dispatch.

The word format and the decoder live here (hardware, imported by the compiler); the encoders
that turn kernels into DPA programs are in :mod:`compiler.dpa`. See ``docs/dpa.md``.

The :class:`Dispatcher` models the on-module dispatcher (LoL-PIM 5.3, PIMphony VI-C): a
command buffer, a VA2PA table per request, configuration registers, and a pipelined decoding
unit whose output times feed a channel scheduler as ``valid_gaps``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum
from fractions import Fraction
from functools import cached_property

import numpy as np

from models.config import ChannelGeometry, HardwareConfig
from models.isa import FIELDS, OPERAND_FIELDS, Op, empty_stream, field_widths

__all__ = [
    "CONFIG_ENTRY_BYTES",
    "CONFIG_FIELDS",
    "KIND_BITS",
    "KIND_LSB",
    "WORD_BITS",
    "FORMAT_VERSION",
    "KERNEL_CODES",
    "NO_LEVEL",
    "NO_RULE",
    "TENSOR_OF",
    "WORD_BYTES",
    "field_limit",
    "Command",
    "DecoderTiming",
    "Dispatcher",
    "DpaCapacityError",
    "DpaError",
    "DpaProgram",
    "DynLoop",
    "DynModi",
    "Header",
    "Kind",
    "MappingError",
    "Rule",
    "Target",
    "TranslationError",
    "decode_times",
    "decode_word",
    "encode_word",
    "expand",
    "gaps_from_times",
    "va2pa_entry_bytes",
    "word_fields",
]

WORD_BYTES = 8
"""Bytes per DPA word and per unrolled channel command (so sizes compare like for like)."""
FORMAT_VERSION = 1
NO_LEVEL = 15
"""``DYN_MODI.level`` value meaning "not scaled by a loop index"."""
NO_RULE = 31
"""``DYN_MODI.rule`` value meaning "not scaled by a rule value"."""
CONFIG_FIELDS = {"request": 2, "t_cur": 4, "layer": 1, "flags": 1}
"""Bytes of each field of a configuration-buffer entry (one per request)."""
CONFIG_ENTRY_BYTES = sum(CONFIG_FIELDS.values())
"""Configuration-buffer bytes per request: id (2), T_cur (4), layer (1), flags (1)."""
WORD_BITS = 8 * WORD_BYTES
KIND_BITS = 4
KIND_LSB = WORD_BITS - KIND_BITS
"""The kind occupies bits ``KIND_LSB + KIND_BITS - 1 .. KIND_LSB`` (63..60) of every word."""
KERNEL_CODES = {"qk": 0, "sv": 1, "gemv": 2}
TENSOR_OF = {"qk": "K", "sv": "V", "gemv": "W"}
"""Which VA2PA table (per request and layer) a kernel's virtual rows index."""


class Kind(IntEnum):
    """The 4-bit kind in bits 63..60 of every word (0-2 are the channel opcodes)."""

    WR_INP = Op.WR_INP
    MAC = Op.MAC
    RD_OUT = Op.RD_OUT
    DYN_LOOP = 8
    DYN_MODI = 9
    RULE = 10
    HEADER = 15


class Target(IntEnum):
    """Field a ``DYN_MODI`` adds to. ``ROW`` and ``COL`` both modify the linear column address
    ``row * C + col`` (``ROW`` adds ``coef * C``; a ``COL`` carry moves to the next row)."""

    GBUF = 0
    ROW = 1
    COL = 2
    OUT = 3
    GPR = 4


class DpaError(ValueError):
    """A DPA program, dispatch or table operation is invalid."""


class DpaCapacityError(DpaError):
    """A program or a VA2PA mapping does not fit the dispatcher's buffers."""


class TranslationError(DpaError):
    """A virtual row has no VA2PA mapping for the request being dispatched."""

    def __init__(self, message: str, request: int | None, virtual_row: int) -> None:
        super().__init__(message)
        self.request = request
        self.virtual_row = virtual_row


class MappingError(DpaError):
    """A VA2PA update names an illegal or already-owned physical row."""


# ---------------------------------------------------------------------------------------------
# Instructions and their 64-bit words
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Header:
    """First word of every program: format version, kernel code and the ``T_cur`` limit."""

    kernel: int
    max_tokens: int
    version: int = FORMAT_VERSION


@dataclass(frozen=True)
class Rule:
    """Loop-bound rule ``rule_id``: a function of ``T_cur`` the dispatcher evaluates once.

    ``q = floor((T_cur + offset) / divisor)``; ``q = q mod modulus`` if ``modulus``;
    ``v = add - q`` if ``negate`` else ``add + q``; ``v = max(v, 0)``; ``v = min(v, clamp)`` if
    ``clamp``.
    """

    rule_id: int
    offset: int = 0
    divisor: int = 1
    modulus: int = 0
    negate: bool = False
    add: int = 0
    clamp: int = 0

    def evaluate(self, t_cur: int) -> int:
        """The rule's value for ``T_cur``."""
        q = (int(t_cur) + self.offset) // self.divisor
        if self.modulus:
            q %= self.modulus
        v = max(self.add - q if self.negate else self.add + q, 0)
        return min(v, self.clamp) if self.clamp else v


@dataclass(frozen=True)
class DynLoop:
    """Repeat the next ``le`` words ``count`` times (constant) or ``rule``'s value times."""

    le: int
    count: int | None = None
    rule: int | None = None


@dataclass(frozen=True)
class DynModi:
    """Add ``coef * [rule value] * [index of loop `level`]`` to ``target`` of the next command.

    ``level`` counts enclosing loops from the innermost (0); ``None`` = not index-scaled.
    """

    target: Target
    coef: int
    level: int | None = None
    rule: int | None = None


@dataclass(frozen=True)
class Command:
    """A plain channel command (base values; ``row``/``col`` of a MAC are virtual)."""

    op: Op
    gbuf: int = 0
    row: int = 0
    col: int = 0
    out: int = 0
    gpr: int = 0


Instruction = Header | Rule | DynLoop | DynModi | Command

# Bit fields after the 4-bit kind, from bit 59 downwards: (name, width, signed).
_CMD_LAYOUT = (("gbuf", 8, False), ("row", 16, False), ("col", 8, False), ("out", 8, False))
_LAYOUTS: dict[Kind, tuple[tuple[str, int, bool], ...]] = {
    Kind.WR_INP: (*_CMD_LAYOUT, ("gpr", 20, False)),
    Kind.MAC: (*_CMD_LAYOUT, ("gpr", 20, False)),
    Kind.RD_OUT: (*_CMD_LAYOUT, ("gpr", 20, False)),
    Kind.DYN_LOOP: (("mode", 1, False), ("le", 16, False), ("bound", 16, False)),
    Kind.DYN_MODI: (
        ("target", 3, False),
        ("level", 4, False),
        ("rule", 5, False),
        ("coef", 24, True),
    ),
    Kind.RULE: (
        ("rule_id", 5, False),
        ("offset", 12, True),
        ("divisor", 16, False),
        ("modulus", 8, False),
        ("negate", 1, False),
        ("add", 7, True),
        ("clamp", 11, False),
    ),
    Kind.HEADER: (("version", 4, False), ("kernel", 2, False), ("max_tokens", 24, False)),
}


def word_fields(kind: Kind) -> dict[str, tuple[int, int, bool]]:
    """Bit fields of a ``kind`` word: ``{name: (lsb, width, signed)}`` (for the RTL decoder)."""
    out, shift = {}, KIND_LSB
    for name, width, signed in _LAYOUTS[Kind(kind)]:
        shift -= width
        out[name] = (shift, width, signed)
    return out


def field_limit(kind: Kind, name: str) -> int:
    """Number of values the ``name`` field of a ``kind`` word can hold (``2 ** width``)."""
    width = next((w for n, w, _ in _LAYOUTS[kind] if n == name), None)
    if width is None:
        raise KeyError(f"{kind.name} words have no field {name!r}")
    return 1 << width


def _fields_of(ins: Instruction) -> tuple[Kind, dict[str, int]]:
    if isinstance(ins, Command):
        kind = Kind(int(ins.op))
        return kind, {f: getattr(ins, f) for f in FIELDS[1:]}
    if isinstance(ins, DynLoop):
        if (ins.count is None) == (ins.rule is None):
            raise DpaError(f"{ins}: give exactly one of count and rule")
        mode, bound = (0, ins.count) if ins.rule is None else (1, ins.rule)
        return Kind.DYN_LOOP, {"mode": mode, "le": ins.le, "bound": bound}
    if isinstance(ins, DynModi):
        level = NO_LEVEL if ins.level is None else ins.level
        rule = NO_RULE if ins.rule is None else ins.rule
        if level == NO_LEVEL and ins.level is not None or rule == NO_RULE and ins.rule is not None:
            raise DpaError(f"{ins}: level < {NO_LEVEL} and rule < {NO_RULE} required")
        vals = {"target": int(ins.target), "level": level, "rule": rule, "coef": ins.coef}
        return Kind.DYN_MODI, vals
    if isinstance(ins, Rule):
        if ins.divisor < 1:
            raise DpaError(f"{ins}: divisor must be >= 1")
        vals = {
            "rule_id": ins.rule_id,
            "offset": ins.offset,
            "divisor": ins.divisor,
            "modulus": ins.modulus,
            "negate": int(ins.negate),
            "add": ins.add,
            "clamp": ins.clamp,
        }
        return Kind.RULE, vals
    if isinstance(ins, Header):
        vals = {"version": ins.version, "kernel": ins.kernel, "max_tokens": ins.max_tokens}
        return Kind.HEADER, vals
    raise DpaError(f"not a DPA instruction: {ins!r}")


def encode_word(ins: Instruction) -> int:
    """Pack one instruction into its 64-bit word; :class:`DpaError` if a field overflows."""
    kind, vals = _fields_of(ins)
    word, shift = int(kind) << KIND_LSB, KIND_LSB
    for name, width, signed in _LAYOUTS[kind]:
        shift -= width
        v = int(vals[name])
        lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
        if not lo <= v <= hi:
            raise DpaError(f"{kind.name}.{name} = {v} does not fit {width} bits ({lo}..{hi})")
        word |= (v & ((1 << width) - 1)) << shift
    return word


def decode_word(word: int) -> Instruction:
    """Unpack one 64-bit word (inverse of :func:`encode_word`)."""
    word = int(word)
    try:
        kind = Kind(word >> KIND_LSB)
    except ValueError:
        kind_value = word >> KIND_LSB
        raise DpaError(f"word {word:#018x}: kind {kind_value} is not a DPA word kind") from None
    vals, shift = {}, KIND_LSB
    for name, width, signed in _LAYOUTS[kind]:
        shift -= width
        v = (word >> shift) & ((1 << width) - 1)
        if signed and v >> (width - 1):
            v -= 1 << width
        vals[name] = v
    if kind in (Kind.WR_INP, Kind.MAC, Kind.RD_OUT):
        return Command(Op(int(kind)), **vals)
    if kind == Kind.DYN_LOOP:
        if vals["mode"]:
            return DynLoop(le=vals["le"], rule=vals["bound"])
        return DynLoop(le=vals["le"], count=vals["bound"])
    if kind == Kind.DYN_MODI:
        return DynModi(
            target=Target(vals["target"]),
            coef=vals["coef"],
            level=None if vals["level"] == NO_LEVEL else vals["level"],
            rule=None if vals["rule"] == NO_RULE else vals["rule"],
        )
    if kind == Kind.RULE:
        vals["negate"] = bool(vals["negate"])
        return Rule(**vals)
    return Header(**vals)


# ---------------------------------------------------------------------------------------------
# Programs and expansion
# ---------------------------------------------------------------------------------------------

# Modifiable fields, in this order, of an expanded command: GBuf, linear column address, OBuf,
# GPR tile.
_F_GBUF, _F_ADDR, _F_OUT, _F_GPR = range(4)
_FIELD_OF_TARGET = {
    Target.GBUF: _F_GBUF,
    Target.ROW: _F_ADDR,
    Target.COL: _F_ADDR,
    Target.OUT: _F_OUT,
    Target.GPR: _F_GPR,
}


@dataclass(frozen=True)
class _CmdNode:
    op: int
    base: tuple[int, int, int, int]
    terms: tuple[tuple[int, int, int, int], ...]  # (field, absolute level or -1, rule or -1, coef)


@dataclass(frozen=True)
class _LoopNode:
    count: int | None
    rule: int | None
    body: tuple


@dataclass(frozen=True, eq=False)
class DpaProgram:
    """A DPA program: 64-bit ``words`` (``uint64``) plus the hardware it was encoded for."""

    words: np.ndarray
    cfg: HardwareConfig
    shape: dict = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Program size in the command buffer (``len(words) * WORD_BYTES``)."""
        return int(self.words.shape[0]) * WORD_BYTES

    @property
    def header(self) -> Header:
        """The decoded header word."""
        return self._parsed[0]

    @property
    def kernel(self) -> str:
        """Kernel name (``qk``, ``sv``, ``gemv``)."""
        names = {v: k for k, v in KERNEL_CODES.items()}
        return names.get(self.header.kernel, "gemv")

    @property
    def tensor(self) -> str:
        """VA2PA table the program's virtual rows index (``K`` for QK^T, ``V`` for SV)."""
        return TENSOR_OF[self.kernel]

    @property
    def max_tokens(self) -> int:
        """Largest ``T_cur`` the program may be dispatched for."""
        return self.header.max_tokens

    @property
    def rules(self) -> dict[int, Rule]:
        """Loop-bound rules by id."""
        return dict(self._parsed[1])

    @property
    def body_words(self) -> int:
        """Words that are neither the header nor a rule (one pre-decode step each)."""
        return int(self.words.shape[0]) - 1 - len(self._parsed[1])

    def decode_times(self, n_commands: int, timing: DecoderTiming | None = None) -> np.ndarray:
        """:func:`decode_times` of ``n_commands`` expanded from this program."""
        return decode_times(n_commands, len(self.rules), timing, self.body_words)

    def instructions(self) -> list[Instruction]:
        """Decoded words, in order."""
        return [decode_word(w) for w in self.words]

    def listing(self) -> str:
        """Human-readable disassembly, one word per line, indented by loop depth."""
        lines, ends = [], []
        for i, ins in enumerate(self.instructions()):
            while ends and i > ends[-1]:
                ends.pop()
            lines.append(f"{i:5d}  {'  ' * len(ends)}{_format(ins)}")
            if isinstance(ins, DynLoop):
                ends.append(i + ins.le)
        return "\n".join(lines)

    def to_bytes(self) -> bytes:
        """Little-endian image of the words (what the host writes into the command buffer)."""
        return self.words.astype("<u8").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, cfg: HardwareConfig, shape: dict | None = None) -> DpaProgram:
        """Inverse of :meth:`to_bytes`."""
        if len(data) % WORD_BYTES:
            raise DpaError(f"{len(data)} bytes is not a whole number of {WORD_BYTES}-byte words")
        return cls(np.frombuffer(data, dtype="<u8").astype(np.uint64), cfg, dict(shape or {}))

    @classmethod
    def from_instructions(
        cls, instructions: list[Instruction], cfg: HardwareConfig, shape: dict | None = None
    ) -> DpaProgram:
        """Encode ``instructions`` (the first must be a :class:`Header`)."""
        words = np.array([encode_word(i) for i in instructions], dtype=np.uint64)
        prog = cls(words, cfg, dict(shape or {}))
        _ = prog._parsed  # validate the structure now
        return prog

    @cached_property
    def _parsed(self) -> tuple[Header, dict[int, Rule], tuple]:
        return _parse(self.words, self.cfg.channel)


def _format(ins: Instruction) -> str:
    if isinstance(ins, Command):
        op = Op(ins.op)
        names = OPERAND_FIELDS[op]
        return f"{op.name:<8} " + " ".join(f"{n}={getattr(ins, n)}" for n in names)
    if isinstance(ins, DynLoop):
        bound = f"R{ins.rule}" if ins.rule is not None else str(ins.count)
        return f"DYN_LOOP lb={bound} le={ins.le}"
    if isinstance(ins, DynModi):
        scale = "".join(
            [f" *R{ins.rule}" if ins.rule is not None else ""]
            + [f" *i{ins.level}" if ins.level is not None else ""]
        )
        return f"DYN_MODI {ins.target.name.lower()} += {ins.coef}{scale}"
    if isinstance(ins, Rule):
        q = f"floor((T{ins.offset:+d})/{ins.divisor})"
        if ins.modulus:
            q = f"({q} mod {ins.modulus})"
        v = f"{ins.add} - {q}" if ins.negate else (f"{q} + {ins.add}" if ins.add else q)
        v = f"max(0, {v})" if ins.negate or ins.add < 0 else v
        v = f"min({v}, {ins.clamp})" if ins.clamp else v
        return f"RULE     R{ins.rule_id} = {v}"
    return f"HEADER   v{ins.version} kernel={ins.kernel} max_tokens={ins.max_tokens}"


def _parse(words: np.ndarray, geom: ChannelGeometry) -> tuple[Header, dict[int, Rule], tuple]:
    """Check the program structure; return the header, the rules and the loop tree."""
    if not isinstance(words, np.ndarray) or words.ndim != 1 or words.dtype != np.uint64:
        raise DpaError("DPA words must be a 1-D uint64 array")
    ins = [decode_word(w) for w in words]
    if not ins or not isinstance(ins[0], Header):
        raise DpaError("a DPA program starts with a HEADER word")
    if ins[0].version != FORMAT_VERSION:
        raise DpaError(f"DPA format version {ins[0].version} is not supported ({FORMAT_VERSION})")
    rules: dict[int, Rule] = {}
    cols = geom.columns_per_row

    def block(lo: int, hi: int, depth: int) -> tuple:
        nodes: list = []
        pending: list[DynModi] = []
        i = lo
        while i < hi:
            x = ins[i]
            if isinstance(x, Header):
                raise DpaError(f"word {i}: HEADER only as the first word")
            if isinstance(x, Rule):
                if depth or pending:
                    raise DpaError(f"word {i}: RULE words must be at top level, outside loops")
                if x.rule_id in rules or x.rule_id == NO_RULE:
                    raise DpaError(f"word {i}: rule id {x.rule_id} redefined or reserved")
                rules[x.rule_id] = x
                i += 1
                continue
            if isinstance(x, DynModi):
                if x.rule is not None and x.rule not in rules:
                    raise DpaError(f"word {i}: DYN_MODI uses undefined rule R{x.rule}")
                if x.level is not None and x.level >= depth:
                    raise DpaError(
                        f"word {i}: DYN_MODI level {x.level} but only {depth} enclosing loops"
                    )
                pending.append(x)
                i += 1
                continue
            if pending and not isinstance(x, Command):
                raise DpaError(f"word {i}: DYN_MODI must be followed by a plain command")
            if isinstance(x, DynLoop):
                if x.rule is not None and x.rule not in rules:
                    raise DpaError(f"word {i}: DYN_LOOP uses undefined rule R{x.rule}")
                if x.le < 1 or i + x.le >= hi:
                    raise DpaError(f"word {i}: DYN_LOOP le={x.le} leaves its enclosing body")
                nodes.append(_LoopNode(x.count, x.rule, block(i + 1, i + 1 + x.le, depth + 1)))
                i += 1 + x.le
                continue
            terms = []
            for m in pending:
                coef = m.coef * cols if m.target == Target.ROW else m.coef
                level = -1 if m.level is None else depth - 1 - m.level
                rule = -1 if m.rule is None else m.rule
                terms.append((_FIELD_OF_TARGET[m.target], level, rule, coef))
            pending = []
            base = (x.gbuf, x.row * cols + x.col, x.out, x.gpr)
            nodes.append(_CmdNode(int(x.op), base, tuple(terms)))
            i += 1
        if pending:
            raise DpaError(f"word {hi - 1}: DYN_MODI at the end of a body modifies nothing")
        return tuple(nodes)

    tree = block(1, len(ins), 0)
    return ins[0], rules, tree


def _expand_nodes(
    nodes: tuple, depth: int, rv: dict[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ops (K,), values (K, 4), per-level coefficients (K, 4, depth))`` of a body."""
    ops, vals, coefs = [], [], []
    for node in nodes:
        if isinstance(node, _CmdNode):
            v = np.array(node.base, dtype=np.int64)
            c = np.zeros((4, depth), dtype=np.int64)
            for f, level, rule, coef in node.terms:
                k = coef * (rv[rule] if rule >= 0 else 1)
                if level < 0:
                    v[f] += k
                else:
                    c[f, level] += k
            ops.append(np.array([node.op], dtype=np.int64))
            vals.append(v[None])
            coefs.append(c[None])
            continue
        n = node.count if node.rule is None else rv[node.rule]
        if n <= 0:
            continue
        bo, bv, bc = _expand_nodes(node.body, depth + 1, rv)
        k = bo.shape[0]
        if k == 0:
            continue
        i = np.arange(n, dtype=np.int64)[:, None, None]
        vals.append((bv[None] + i * bc[None, :, :, depth]).reshape(n * k, 4))
        coefs.append(
            np.broadcast_to(bc[None, :, :, :depth], (n, k, 4, depth)).reshape(n * k, 4, depth)
        )
        ops.append(np.tile(bo, n))
    if not ops:
        return (
            np.zeros(0, dtype=np.int64),
            np.zeros((0, 4), dtype=np.int64),
            np.zeros((0, 4, depth), dtype=np.int64),
        )
    return np.concatenate(ops), np.concatenate(vals), np.concatenate(coefs)


def expand(
    program: DpaProgram,
    t_cur: int,
    va2pa: np.ndarray | list[int] | None = None,
    *,
    request: int | None = None,
    where: str = "",
) -> np.ndarray:
    """Unroll ``program`` for ``T_cur``; MAC rows are translated through ``va2pa``.

    ``va2pa[v]`` is the physical row of virtual row ``v`` (negative = unmapped); ``None``
    means the identity. GBuf and OBuf fields wrap modulo their entry counts. An unmapped
    virtual row raises :class:`TranslationError` (``request``/``where`` label the message).
    Returns a :data:`models.isa.COMMAND_DTYPE` stream.
    """
    if isinstance(t_cur, bool) or not isinstance(t_cur, int | np.integer) or t_cur < 1:
        raise DpaError(f"T_cur = {t_cur!r}: must be a positive integer")
    head, rules, tree = program._parsed
    if t_cur > head.max_tokens:
        raise DpaError(
            f"T_cur = {t_cur} exceeds the program's max_tokens = {head.max_tokens} "
            "(the layout was checked only up to it; re-encode with a larger max_tokens)"
        )
    rv = {rid: r.evaluate(int(t_cur)) for rid, r in rules.items()}
    ops, vals, _ = _expand_nodes(tree, 0, rv)
    geom = program.cfg.channel
    n = ops.shape[0]
    stream = empty_stream(n)
    if n == 0:
        return stream
    if (vals < 0).any():
        k = int(np.flatnonzero((vals < 0).any(axis=1))[0])
        raise DpaError(f"command {k}: a modified field is negative ({vals[k].tolist()})")
    stream["op"] = ops
    stream["gbuf"] = vals[:, _F_GBUF] % geom.gbuf_entries
    stream["out"] = vals[:, _F_OUT] % geom.obuf_entries
    stream["gpr"] = vals[:, _F_GPR]
    addr = vals[:, _F_ADDR]
    vrow, col = addr // geom.columns_per_row, addr % geom.columns_per_row
    stream["col"] = col
    mac = ops == Op.MAC
    row = vrow.copy()
    row[mac] = _translate(vrow[mac], np.flatnonzero(mac), va2pa, geom, request, where)
    stream["row"] = row
    return stream


def _translate(
    vrow: np.ndarray,
    index: np.ndarray,
    va2pa: np.ndarray | list[int] | None,
    geom: ChannelGeometry,
    request: int | None,
    where: str,
) -> np.ndarray:
    who = f"request {request}" if request is not None else "dispatch"
    if where:
        who += f" ({where})"
    if va2pa is None:
        table = None
        prow = vrow
    else:
        table = np.asarray(va2pa, dtype=np.int64).reshape(-1)
        inside = vrow < table.shape[0]
        prow = np.full(vrow.shape, -1, dtype=np.int64)
        prow[inside] = table[vrow[inside]]
    bad = np.flatnonzero(prow < 0)
    if bad.size:
        k = int(bad[0])
        v = int(vrow[k])
        n = 0 if table is None else table.shape[0]
        state = "is unmapped (hole)" if v < n else f"is beyond the {n} mapped virtual rows"
        raise TranslationError(
            f"{who}: virtual row {v} (MAC command {int(index[k])}) has no VA2PA mapping: it "
            f"{state}; map it before dispatching",
            request,
            v,
        )
    big = np.flatnonzero(prow >= geom.rows_per_bank)
    if big.size:
        k = int(big[0])
        raise DpaError(
            f"{who}: virtual row {int(vrow[k])} maps to physical row {int(prow[k])}, beyond "
            f"the {geom.rows_per_bank} rows per bank"
        )
    return prow


# ---------------------------------------------------------------------------------------------
# The on-module dispatcher
# ---------------------------------------------------------------------------------------------


def va2pa_entry_bytes(geom: ChannelGeometry) -> int:
    """Bytes per VA2PA entry: one physical row number, rounded up to whole bytes."""
    return math.ceil(field_widths(geom)["row"] / 8)


@dataclass(frozen=True)
class DecoderTiming:
    """Decoding-unit timing (``docs/dpa.md``, "Dispatcher timing"); ``rtl/dpa.py`` matches it.

    One cycle for the header, then a pre-decode pass over the rest of the program: each
    ``RULE`` word costs ``rule_cycles``, every other word ``word_cycles`` (it folds the
    ``DYN_MODI`` terms into their command, drops zero-trip loops and builds the decoded
    table). After ``latency`` pipeline cycles (walk, field modification, VA2PA lookup) the
    decoded table is expanded at ``rate`` commands per cycle with zero-overhead loops.
    """

    rate: float = 1.0
    latency: int = 3
    rule_cycles: int = 1
    word_cycles: int = 1

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise DpaError(f"decode rate {self.rate!r}: must be > 0 commands per cycle")
        if self.latency < 0 or self.rule_cycles < 0 or self.word_cycles < 0:
            raise DpaError("decoder latency, rule_cycles and word_cycles must be >= 0")


def decode_times(
    n_commands: int,
    n_rules: int,
    timing: DecoderTiming | None = None,
    n_body_words: int = 0,
) -> np.ndarray:
    """Cycle, counted from the dispatch start, at which each decoded command is available.

    ``t[k] = 1 + n_rules * rule_cycles + n_body_words * word_cycles + latency +
    floor(k / rate)``, where ``n_body_words`` counts the words that are neither the header
    nor a rule (:attr:`DpaProgram.body_words`).
    """
    tm = timing or DecoderTiming()
    rate = Fraction(tm.rate).limit_denominator(1 << 16)
    start = 1 + n_rules * tm.rule_cycles + int(n_body_words) * tm.word_cycles + tm.latency
    k = np.arange(n_commands, dtype=np.int64)
    return start + (k * rate.denominator) // rate.numerator


def gaps_from_times(times: np.ndarray) -> np.ndarray:
    """``valid_gaps`` for :func:`models.channel.run_channel` from availability cycles.

    Command ``k`` is offered ``gaps[k]`` idle cycles after the cycle following the acceptance
    of command ``k - 1``; assuming each command is accepted when offered, ``gaps[0] = t[0]``
    and ``gaps[k] = max(0, t[k] - t[k-1] - 1)``. Exact when ``rate >= 1`` (every gap after
    the first is 0); with ``rate < 1`` and back-pressure from the channel it is pessimistic
    (the decoder's output queue would have run ahead).
    """
    t = np.asarray(times, dtype=np.int64)
    gaps = np.empty_like(t)
    if t.size:
        gaps[0] = t[0]
        gaps[1:] = np.maximum(0, t[1:] - t[:-1] - 1)
    return gaps


@dataclass
class _Request:
    t_cur: int | None = None
    tables: dict[tuple[int, str], list[int]] = field(default_factory=dict)


class Dispatcher:
    """On-module DPA dispatcher TLM (LoL-PIM Fig. 6c, PIMphony Fig. 11a).

    Buffers: the command buffer (``cfg.module.dpa_command_buffer_bytes``) holds named
    programs; the VA2PA table (``cfg.module.dpa_address_map_bytes``) holds, per request, layer
    and tensor (``K``/``V``), a list of physical rows indexed by virtual row, each entry
    :func:`va2pa_entry_bytes` bytes; the configuration buffer holds ``CONFIG_ENTRY_BYTES`` per
    request (``max_requests`` of them). The configuration registers name the current request,
    its ``T_cur`` and the layer.
    """

    def __init__(
        self,
        cfg: HardwareConfig,
        timing: DecoderTiming | None = None,
        max_requests: int = 64,
    ) -> None:
        self.cfg = cfg
        self.timing = timing or DecoderTiming()
        self.max_requests = int(max_requests)
        self.entry_bytes = va2pa_entry_bytes(cfg.channel)
        self._programs: dict[str, DpaProgram] = {}
        self._requests: dict[int, _Request] = {}
        self._owner: dict[int, tuple[int, int, str]] = {}  # physical row -> (request, layer, T)
        self.request: int | None = None
        self.layer = 0

    # -- sizes --------------------------------------------------------------------------------
    @property
    def command_buffer_bytes(self) -> int:
        """Command-buffer capacity."""
        return self.cfg.module.dpa_command_buffer_bytes

    @property
    def address_map_bytes(self) -> int:
        """VA2PA-table capacity."""
        return self.cfg.module.dpa_address_map_bytes

    @property
    def config_buffer_bytes(self) -> int:
        """Configuration-buffer size (``max_requests * CONFIG_ENTRY_BYTES``)."""
        return self.max_requests * CONFIG_ENTRY_BYTES

    @property
    def total_buffer_bytes(self) -> int:
        """All dispatcher buffers (LoL-PIM / PIMphony: < 200 KB)."""
        return self.command_buffer_bytes + self.address_map_bytes + self.config_buffer_bytes

    @property
    def command_bytes_used(self) -> int:
        """Bytes of loaded programs."""
        return sum(p.nbytes for p in self._programs.values())

    @property
    def map_entries_used(self) -> int:
        """VA2PA entries in use over all requests."""
        return len(self._owner)

    @property
    def map_bytes_used(self) -> int:
        """VA2PA bytes in use over all requests."""
        return self.map_entries_used * self.entry_bytes

    # -- command buffer -------------------------------------------------------------------------
    def load_program(self, name: str, program: DpaProgram) -> None:
        """Store ``program`` under ``name`` (replacing a program of that name)."""
        if program.cfg.channel != self.cfg.channel:
            raise DpaError(f"program {name!r} was encoded for another channel geometry")
        others = self.command_bytes_used - (
            self._programs[name].nbytes if name in self._programs else 0
        )
        if others + program.nbytes > self.command_buffer_bytes:
            raise DpaCapacityError(
                f"program {name!r} ({program.nbytes} B = {program.words.shape[0]} words of "
                f"{WORD_BYTES} B) does not fit the {self.command_buffer_bytes} B command buffer "
                f"({others} B used by {len(self._programs) - (name in self._programs)} other "
                "program(s))"
            )
        self._programs[name] = program

    def unload_program(self, name: str) -> None:
        """Free the command-buffer space of program ``name``."""
        self._program(name)
        del self._programs[name]

    @property
    def programs(self) -> dict[str, DpaProgram]:
        """Loaded programs by name."""
        return dict(self._programs)

    def _program(self, name: str | None) -> DpaProgram:
        if name is None:
            if len(self._programs) != 1:
                raise DpaError(
                    f"{len(self._programs)} programs loaded ({', '.join(self._programs) or '-'})"
                    "; name the one to dispatch"
                )
            return next(iter(self._programs.values()))
        if name not in self._programs:
            raise DpaError(
                f"no program {name!r} in the command buffer; loaded: "
                f"{', '.join(self._programs) or 'none'}"
            )
        return self._programs[name]

    # -- configuration buffer --------------------------------------------------------------------
    def _req(self, request: int, create: bool = True) -> _Request:
        if isinstance(request, bool) or not isinstance(request, int | np.integer) or request < 0:
            raise DpaError(f"request id {request!r}: must be a non-negative integer")
        request = int(request)
        if request not in self._requests:
            if not create:
                raise DpaError(f"request {request} is not known to the dispatcher")
            if len(self._requests) >= self.max_requests:
                raise DpaCapacityError(
                    f"configuration buffer full: {self.max_requests} requests x "
                    f"{CONFIG_ENTRY_BYTES} B = {self.config_buffer_bytes} B; release one first"
                )
            self._requests[request] = _Request()
        return self._requests[request]

    def set_tokens(self, request: int, t_cur: int) -> None:
        """Set the request's current token count ``T_cur`` (host update)."""
        if isinstance(t_cur, bool) or not isinstance(t_cur, int | np.integer) or t_cur < 1:
            raise DpaError(f"T_cur = {t_cur!r}: must be a positive integer")
        self._req(request).t_cur = int(t_cur)

    def advance(self, request: int, steps: int = 1) -> int:
        """Increment ``T_cur`` after decoding steps (done on-module, no host traffic)."""
        r = self._req(request, create=False)
        if r.t_cur is None:
            raise DpaError(f"request {request} has no T_cur; call set_tokens first")
        r.t_cur += int(steps)
        return r.t_cur

    def tokens(self, request: int) -> int | None:
        """The request's ``T_cur`` (``None`` if never set)."""
        return self._req(request, create=False).t_cur

    def select(self, request: int, layer: int = 0) -> None:
        """Load the configuration registers: current request and layer."""
        self._req(request, create=False)
        if layer < 0:
            raise DpaError(f"layer {layer}: must be >= 0")
        self.request, self.layer = int(request), int(layer)

    @property
    def registers(self) -> dict[str, int | None]:
        """Configuration registers: ``request``, its ``t_cur`` and ``layer``."""
        t = self._requests[self.request].t_cur if self.request in self._requests else None
        return {"request": self.request, "t_cur": t, "layer": self.layer}

    # -- VA2PA table -----------------------------------------------------------------------------
    def _check_rows(self, key: tuple[int, int, str], rows: list[int]) -> None:
        nrows = self.cfg.channel.rows_per_bank
        seen: set[int] = set()
        for v, p in enumerate(rows):
            if not 0 <= p < nrows:
                raise MappingError(
                    f"request {key[0]} layer {key[1]} {key[2]}: physical row {p} (virtual "
                    f"row {v}) outside 0..{nrows - 1}"
                )
            owner = self._owner.get(p)
            if p in seen or (owner is not None and owner != key):
                who = "itself" if p in seen else f"request {owner[0]} layer {owner[1]} {owner[2]}"
                raise MappingError(
                    f"request {key[0]} layer {key[1]} {key[2]}: physical row {p} is already "
                    f"mapped by {who}"
                )
            seen.add(p)

    def _store(self, request: int, layer: int, tensor: str, rows: list[int], append: bool) -> None:
        r = self._req(request)
        key = (int(request), int(layer), str(tensor))
        old = r.tables.get((key[1], key[2]), [])
        new = (old + rows) if append else rows
        self._check_rows(key, new)
        grow = len(new) - len(old)
        if (self.map_entries_used + grow) * self.entry_bytes > self.address_map_bytes:
            raise DpaCapacityError(
                f"VA2PA table full: request {request} layer {layer} {tensor} needs {len(new)} "
                f"entries x {self.entry_bytes} B; {self.map_bytes_used} of "
                f"{self.address_map_bytes} B already in use"
            )
        for p in old:
            del self._owner[p]
        for p in new:
            self._owner[p] = key
        r.tables[(key[1], key[2])] = list(new)

    def map_rows(self, request: int, rows: list[int], layer: int = 0, tensor: str = "K") -> None:
        """Set VA2PA[request, layer, tensor] to ``rows`` (virtual row ``v`` -> ``rows[v]``)."""
        self._store(request, layer, tensor, [int(p) for p in rows], append=False)

    def extend_rows(self, request: int, rows: list[int], layer: int = 0, tensor: str = "K") -> None:
        """Append rows for the next virtual rows (lazy allocation as the KV cache grows)."""
        self._store(request, layer, tensor, [int(p) for p in rows], append=True)

    def table(self, request: int, layer: int = 0, tensor: str = "K") -> np.ndarray:
        """A copy of VA2PA[request, layer, tensor]."""
        r = self._req(request, create=False)
        return np.array(r.tables.get((int(layer), tensor), []), dtype=np.int64)

    def release(self, request: int) -> list[int]:
        """Forget a finished request; return the physical rows it freed."""
        r = self._req(request, create=False)
        freed = [p for rows in r.tables.values() for p in rows]
        for p in freed:
            del self._owner[p]
        del self._requests[int(request)]
        if self.request == request:
            self.request = None
        return freed

    # -- decoding ------------------------------------------------------------------------------
    def dispatch(
        self, request: int | None = None, program: str | None = None, layer: int | None = None
    ) -> np.ndarray:
        """Expand ``program`` for ``request`` (default: the configuration registers)."""
        request = self.request if request is None else request
        if request is None:
            raise DpaError("no request selected; pass request= or call select()")
        layer = self.layer if layer is None else int(layer)
        prog = self._program(program)
        r = self._req(request, create=False)
        if r.t_cur is None:
            raise DpaError(f"request {request} has no T_cur; call set_tokens first")
        table = r.tables.get((layer, prog.tensor), [])
        return expand(
            prog,
            r.t_cur,
            np.asarray(table, dtype=np.int64),
            request=int(request),
            where=f"layer {layer}, {prog.tensor} cache",
        )

    def dispatch_times(
        self, request: int | None = None, program: str | None = None, layer: int | None = None
    ) -> np.ndarray:
        """Cycle (from the dispatch start) at which each command of :meth:`dispatch` is ready."""
        n = self.dispatch(request, program, layer).shape[0]
        return self._program(program).decode_times(n, self.timing)

    def dispatch_with_gaps(
        self, request: int | None = None, program: str | None = None, layer: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(stream, valid_gaps)`` ready for :func:`models.channel.run_channel`."""
        stream = self.dispatch(request, program, layer)
        times = self._program(program).decode_times(stream.shape[0], self.timing)
        return stream, gaps_from_times(times)
