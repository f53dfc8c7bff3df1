"""DPA programs: :class:`DpaProgram` (words plus the hardware they were encoded for), their
structure check and listing, and :func:`expand`, the unrolling for one ``T_cur`` with MAC
rows translated through a VA2PA table.

The word format is :mod:`models.dpa.format`; the dispatcher that holds programs and tables
and times the expansion is :mod:`models.dpa.dispatcher`. See ``docs/dpa.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
from pimphony.models.config import ChannelGeometry, HardwareConfig
from pimphony.models.dpa.format import (
    FORMAT_VERSION,
    KERNEL_CODES,
    NO_RULE,
    TENSOR_OF,
    WORD_BYTES,
    Command,
    DpaError,
    DynLoop,
    DynModi,
    Header,
    Instruction,
    Rule,
    Target,
    TranslationError,
    decode_word,
    encode_word,
)
from pimphony.models.isa import OPERAND_FIELDS, Op, empty_stream

if TYPE_CHECKING:
    from pimphony.models.dpa.dispatcher import DecoderTiming

__all__ = ["DpaProgram", "expand"]

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
        """:func:`models.dpa.dispatcher.decode_times` of ``n_commands`` expanded from this
        program."""
        from pimphony.models.dpa.dispatcher import (
            decode_times,  # the dispatcher module imports this one
        )

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
            int(index[k]),
        )
    big = np.flatnonzero(prow >= geom.rows_per_bank)
    if big.size:
        k = int(big[0])
        raise DpaError(
            f"{who}: virtual row {int(vrow[k])} maps to physical row {int(prow[k])}, beyond "
            f"the {geom.rows_per_bank} rows per bank"
        )
    return prow
