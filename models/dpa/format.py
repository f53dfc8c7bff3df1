"""The DPA program word format: instruction kinds, fields and the 64-bit words.

A DPA program (LoL-PIM 5.2, PIMphony VI-B) is a sequence of fixed-size 8-byte words: a
``HEADER``, ``RULE`` words (loop-bound rules, functions of the request's current token count
``T_cur``), plain channel commands (the fields of :mod:`models.isa`), ``DYN_LOOP`` (repeat the
next ``le`` words a constant or rule-given number of times) and ``DYN_MODI`` (add
``coef [* rule] [* loop index]`` to one field of the next plain command). MAC rows produced
this way are *virtual* rows, translated through the request's VA2PA table at dispatch
(:mod:`models.dpa.program`).

This module holds the instructions, their bit fields (:func:`word_fields`, read by the RTL
decoder ``rtl/dpa.py``), :func:`encode_word` / :func:`decode_word`, the configuration-buffer
entry layout and the DPA error classes. See ``docs/dpa.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from pimphony.models.errors import PimphonyError
from pimphony.models.isa import FIELDS, Op

__all__ = [
    "CONFIG_ENTRY_BYTES",
    "CONFIG_FIELDS",
    "FORMAT_VERSION",
    "KERNEL_CODES",
    "KIND_BITS",
    "KIND_LSB",
    "NO_LEVEL",
    "NO_RULE",
    "TENSOR_OF",
    "WORD_BITS",
    "WORD_BYTES",
    "Command",
    "DpaCapacityError",
    "DpaError",
    "DynLoop",
    "DynModi",
    "Header",
    "Instruction",
    "Kind",
    "MappingError",
    "Rule",
    "Target",
    "TranslationError",
    "decode_word",
    "encode_word",
    "field_limit",
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


class DpaError(PimphonyError, ValueError):
    """A DPA program, dispatch or table operation is invalid."""


class DpaCapacityError(DpaError):
    """A program or a VA2PA mapping does not fit the dispatcher's buffers."""


class TranslationError(DpaError):
    """A virtual row has no VA2PA mapping for the request being dispatched; ``command`` is the
    expanded stream's index of the MAC that reads it (None if not known)."""

    def __init__(
        self, message: str, request: int | None, virtual_row: int, command: int | None = None
    ) -> None:
        super().__init__(message)
        self.request = request
        self.virtual_row = virtual_row
        self.command = command


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
