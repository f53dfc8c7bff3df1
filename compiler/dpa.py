"""Encode attention kernels as DPA programs whose size does not depend on the token count.

``encode_kernel(cfg, "qk" | "sv", ...)`` emits, once per shape (``d_h``, GQA group,
mapping), a program that :func:`models.dpa.program.expand` unrolls for any
``T_cur <= max_tokens`` into exactly the stream ``compile_qk`` / ``compile_sv``
(``compiler/kernels.py``) would produce for ``T_cur`` tokens, with every MAC row replaced
by ``va2pa[row]``. The word format
(:mod:`models.dpa.format`) and the expansion (:mod:`models.dpa.program`) are hardware; this
module is the compiler side, the encoder only. See ``docs/dpa.md``.

How: the static loop nest of ``docs/mapping.md`` is re-emitted symbolically. The dimension
that grows with ``T`` (output groups for QK^T, input tiles for SV) is ``ceil(T / u)`` (``u`` =
banks or MAC width); every loop over it is split into "all parts but the last" (a
``DYN_LOOP`` whose bound is a rule of ``T_cur``) and "the last part" (whose length is another
rule); every field is an affine function of the loop indices whose coefficients may be
multiplied by one rule value, i.e. a stack of ``DYN_MODI`` words. GBuf/OBuf halves alternate
through modular wrap of the buffer fields. SV's resident-vs-streamed input choice is made at
run time by two guarded sections (loops whose bound is a 0/1 rule).

The static vs DPA size table (PIMphony Fig. 10c) is :mod:`sim.experiments.size_report`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from pimphony.compiler.kernels import (
    GQA_MAPPINGS,
    CompileError,
    _pow2_parts,
    attention_plan,
    positive,
)
from pimphony.models.config import HardwareConfig
from pimphony.models.dpa import format as dpa_format
from pimphony.models.dpa.format import NO_RULE, DynLoop, DynModi, Kind, Rule, Target, field_limit
from pimphony.models.dpa.program import DpaProgram
from pimphony.models.isa import Op, gpr_tiles

__all__ = [
    "DpaEncodeError",
    "encode_kernel",
    "positive",
]


class DpaEncodeError(CompileError):
    """A kernel shape cannot be expressed as a DPA program."""


# ---------------------------------------------------------------------------------------------
# Affine expressions over loop indices and rule values
# ---------------------------------------------------------------------------------------------

_Key = tuple[int | None, int | None]  # (rule id, loop id); (None, None) = constant


class _Expr:
    """``sum coef * [rule] * [loop index]``: at most one rule and one index per term."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[_Key, int] | None = None) -> None:
        self.terms = {k: v for k, v in (terms or {}).items() if v}

    @staticmethod
    def of(x: _Expr | int) -> _Expr:
        return x if isinstance(x, _Expr) else _Expr({(None, None): int(x)})

    def __add__(self, other: _Expr | int) -> _Expr:
        t = dict(self.terms)
        for k, v in _Expr.of(other).terms.items():
            t[k] = t.get(k, 0) + v
        return _Expr(t)

    __radd__ = __add__

    def __mul__(self, other: _Expr | int) -> _Expr:
        if not isinstance(other, _Expr):
            return _Expr({k: v * int(other) for k, v in self.terms.items()})
        t: dict[_Key, int] = {}
        for (r1, i1), a in self.terms.items():
            for (r2, i2), b in other.terms.items():
                if (r1 is not None and r2 is not None) or (i1 is not None and i2 is not None):
                    raise DpaEncodeError(
                        "not expressible in DPA: a field would need the product of two "
                        "token-dependent values or of two loop indices"
                    )
                k = (r1 if r1 is not None else r2, i1 if i1 is not None else i2)
                t[k] = t.get(k, 0) + a * b
        return _Expr(t)

    __rmul__ = __mul__

    @property
    def const(self) -> int:
        return self.terms.get((None, None), 0)

    def rule_only(self) -> int | None:
        """The rule id if this is exactly one rule value (a loop bound)."""
        if len(self.terms) == 1:
            (((r, i), v),) = self.terms.items()
            if r is not None and i is None and v == 1:
                return r
        return None


_Val = _Expr | int


class _Dim:
    """A loop extent: a constant ``n``, or ``ceil(T_cur / unit)`` (token-dependent)."""

    def __init__(self, b: _Builder, n: int | None = None, unit: int | None = None) -> None:
        self.b, self.n, self.unit = b, n, unit

    @property
    def dynamic(self) -> bool:
        return self.n is None

    def count(self) -> _Val:
        if self.n is not None:
            return self.n
        return self.b.rule(offset=self.unit - 1, divisor=self.unit)

    def before_last(self, s: int) -> _Val:
        """``ceil(N / s) - 1``: parts of ``s`` before the last one."""
        if self.n is not None:
            return (self.n - 1) // s
        return self.b.rule(offset=-1, divisor=self.unit * s)

    def parts(self, s: int) -> _Val:
        """``ceil(N / s)``."""
        if self.n is not None:
            return math.ceil(self.n / s)
        return self.b.rule(offset=-1, divisor=self.unit * s, add=1)

    def last_len(self, s: int) -> _Val:
        """Length of the last part: ``((N - 1) mod s) + 1``."""
        if self.n is not None:
            return (self.n - 1) % s + 1
        return self.b.rule(offset=-1, divisor=self.unit, modulus=s, add=1)

    def at_most(self, s: int) -> _Val:
        """1 if ``N <= s`` else 0."""
        if self.n is not None:
            return int(self.n <= s)
        return self.b.rule(
            offset=self.unit - 1, divisor=self.unit * (s + 1), negate=True, add=1, clamp=1
        )

    def more_than(self, s: int) -> _Val:
        """1 if ``N > s`` else 0."""
        if self.n is not None:
            return int(self.n > s)
        return self.b.rule(offset=self.unit - 1, divisor=self.unit * (s + 1), clamp=1)


class _Builder:
    """Emits DPA instructions: rules, loops (with static simplification) and commands."""

    def __init__(self, cfg: HardwareConfig) -> None:
        self.cfg = cfg
        self.rules: list[Rule] = []
        self.body: list = []
        self.stack: list[int] = []  # loop ids, outermost first
        self.next_loop = 0

    def rule(self, **params: int | bool) -> _Expr:
        """The value of the rule with ``params`` (defined once, then shared)."""
        for r in self.rules:
            if Rule(rule_id=r.rule_id, **params) == r:
                return _Expr({(r.rule_id, None): 1})
        rid = len(self.rules)
        if rid >= NO_RULE:
            raise DpaEncodeError(f"more than {NO_RULE} loop-bound rules")
        self.rules.append(Rule(rule_id=rid, **params))
        return _Expr({(rid, None): 1})

    def loop(self, count: _Val, fn: Callable[[_Expr], None]) -> None:
        """Emit ``fn(index)`` repeated ``count`` times (inlined when the count is 0 or 1)."""
        rule = None
        if isinstance(count, _Expr):
            if set(count.terms) <= {(None, None)}:
                count = count.const
            else:
                rule = count.rule_only()
                if rule is None:
                    raise DpaEncodeError("a loop bound must be a constant or a single rule value")
        if rule is None:
            if count <= 0:
                return
            if count == 1:
                fn(_Expr())
                return
        lid = self.next_loop
        self.next_loop += 1
        at = len(self.body)
        self.body.append(None)
        self.stack.append(lid)
        fn(_Expr({(None, lid): 1}))
        self.stack.pop()
        le = len(self.body) - at - 1
        if le == 0:
            self.body.pop()
            return
        self.body[at] = (
            DynLoop(le=le, rule=rule) if rule is not None else DynLoop(le=le, count=count)
        )

    def cmd(self, op: Op, **fields: _Val) -> None:
        """Emit the ``DYN_MODI`` words and the plain command for affine ``fields``."""
        ch = self.cfg.channel
        cols = ch.columns_per_row
        base = {"gbuf": 0, "addr": 0, "out": 0, "gpr": 0}
        wrap = {"gbuf": ch.gbuf_entries, "out": ch.obuf_entries}
        for name, value in fields.items():
            e = _Expr.of(value)
            for (rid, lid), coef in sorted(e.terms.items(), key=lambda kv: str(kv[0])):
                if name in wrap:
                    coef %= wrap[name]
                if rid is None and lid is None:
                    base[name] = coef
                    continue
                if coef == 0:
                    continue
                level = None if lid is None else len(self.stack) - 1 - self.stack.index(lid)
                if name == "addr":
                    target, coef = (
                        (Target.ROW, coef // cols) if coef % cols == 0 else (Target.COL, coef)
                    )
                else:
                    target = {"gbuf": Target.GBUF, "out": Target.OUT, "gpr": Target.GPR}[name]
                self.body.append(DynModi(target=target, coef=coef, level=level, rule=rid))
        if min(base.values()) < 0:
            raise DpaEncodeError(f"negative base field in {op.name}: {base}")
        self.body.append(
            dpa_format.Command(
                op,
                gbuf=base["gbuf"],
                row=base["addr"] // cols,
                col=base["addr"] % cols,
                out=base["out"],
                gpr=base["gpr"],
            )
        )


# ---------------------------------------------------------------------------------------------
# Kernel encoders
# ---------------------------------------------------------------------------------------------


def _check_row_runs(
    kind: str, b: _Builder, nt: _Dim, p: int, bk: int, ck: int, segments: bool, stride: int
) -> None:
    """Refuse GQA row-reuse shapes whose per-group MAC runs can cross a DRAM row.

    With ``P > 1`` heads per pass the static compiler splits a group's run of tiles at row
    boundaries and interleaves the heads per segment; the split points move with ``T``, which a
    DPA loop cannot follow. The compiler's row-aligned layout (docs/mapping.md) avoids this on
    the shapes of the default presets; this check enumerates every residue class of run starts
    of that layout and refuses what is left (e.g. a GQA group whose chunk does not divide a
    row).
    """
    c = b.cfg.channel.columns_per_row
    bad = None
    if not nt.dynamic:  # QK^T: the tile count is fixed, the number of groups grows with T
        n = nt.n
        if n <= ck:
            chunks = [(0, n)]
        else:
            nc = math.ceil(n / ck)
            chunks = [(i * ck, ck) for i in range(nc - 1)] + [((nc - 1) * ck, n - (nc - 1) * ck)]
        bases = sorted({(i * bk * n) % c for i in range(c)})
        for r in bases:
            for nb in range(1, bk + 1):
                for k0, lc in chunks:
                    off = 0
                    for part in _pow2_parts(lc) if segments else [lc]:
                        for gi in range(nb):
                            s = (r + nb * (k0 + off) + gi * part) % c
                            if s + part > c:
                                bad = part
                        off += part
    elif stride == 0 or c % stride or ck > stride:  # SV: runs of <= ck tiles at stride
        bad = ck
    if bad is not None:
        raise DpaEncodeError(
            f"{kind} with row-reuse GQA group {p}: at some token counts a group's {bad}-tile "
            f"MAC run crosses a DRAM row boundary ({c} columns per row); the static compiler "
            "then interleaves the heads per row segment at T-dependent split points, which a "
            "DPA loop cannot express. Use gqa_group=1 or mapping='head-serial'"
        )


def encode_kernel(
    cfg: HardwareConfig,
    kind: str,
    d_h: int,
    gqa_group: int = 1,
    max_tokens: int = 131072,
    mapping: str = "row-reuse",
) -> DpaProgram:
    """DPA program of the ``qk`` or ``sv`` kernel for any ``1 <= T_cur <= max_tokens``."""
    if kind not in ("qk", "sv"):
        raise DpaEncodeError(f"kernel {kind!r}: DPA encoding exists for 'qk' and 'sv'")
    d_h = positive("d_h", d_h, DpaEncodeError)
    g = positive("gqa_group", gqa_group, DpaEncodeError)
    max_tokens = positive("max_tokens", max_tokens, DpaEncodeError)
    if mapping not in GQA_MAPPINGS:
        raise DpaEncodeError(f"mapping {mapping!r} is unknown; allowed: {', '.join(GQA_MAPPINGS)}")
    token_limit = field_limit(Kind.HEADER, "max_tokens")
    if max_tokens >= token_limit:
        raise DpaEncodeError(
            f"max_tokens = {max_tokens}: the header holds at most {token_limit - 1}"
        )
    ch = cfg.channel
    for name, value, field in (
        ("gbuf_entries", ch.gbuf_entries, "gbuf"),
        ("obuf_entries", ch.obuf_entries, "out"),
        ("columns_per_row", ch.columns_per_row, "col"),
        ("rows_per_bank", ch.rows_per_bank, "row"),
        ("GPR tiles", gpr_tiles(cfg), "gpr"),
    ):
        limit = field_limit(Kind.MAC, field)
        if value > limit:
            raise DpaEncodeError(f"{name} = {value} exceeds the DPA word field ({limit})")
    # The static compiler at max_tokens checks rows per bank and the GPR (both grow with T).
    plan = attention_plan(cfg, kind, max_tokens, d_h, g, mapping)

    half_g, half_o = ch.gbuf_entries // 2, ch.obuf_entries // 2
    p, passes, bk = plan.pass_size, plan.passes, plan.block_groups
    ck = half_g // p  # a chunk of the non-resident layout (the plan keeps the resident one)
    if not plan.resident and plan.chunk_tiles != ck:
        raise DpaEncodeError(
            "compiler/kernels.py's blocking changed (block/chunk sizes differ from "
            "docs/mapping.md); update compiler/dpa.py"
        )
    b = _Builder(cfg)
    if kind == "qk":
        ng, nt = _Dim(b, unit=ch.banks), _Dim(b, n=math.ceil(d_h / ch.mac_elements))
    else:
        ng, nt = _Dim(b, n=math.ceil(d_h / ch.banks)), _Dim(b, unit=ch.mac_elements)
    segments, stride = plan.pow2_segments, plan.run_stride
    if p > 1:
        _check_row_runs(kind, b, nt, p, bk, ck, segments, stride)
    _emit(
        b,
        ng,
        nt,
        (g, p, passes),
        (bk, ck, half_g, half_o),
        row_reuse=mapping == "row-reuse",
        layout=(segments, stride),
    )
    rules, body = _compact_rules(b.rules, b.body)
    header = dpa_format.Header(kernel=dpa_format.KERNEL_CODES[kind], max_tokens=max_tokens)
    shape = {"kind": kind, "d_h": d_h, "gqa_group": g, "mapping": mapping, "max_tokens": max_tokens}
    try:
        return DpaProgram.from_instructions([header, *rules, *body], cfg, shape)
    except dpa_format.DpaError as exc:
        raise DpaEncodeError(f"{kind} d_h={d_h} G={g}: {exc}") from None


def _compact_rules(rules: list[Rule], body: list) -> tuple[list[Rule], list]:
    """Drop rules no word uses (e.g. multiplied by a zero index) and renumber the rest."""
    used = sorted(
        {ins.rule for ins in body if isinstance(ins, DynLoop | DynModi) and ins.rule is not None}
    )
    new_id = {old: new for new, old in enumerate(used)}
    kept = [replace(rules[old], rule_id=new_id[old]) for old in used]
    out = [
        replace(ins, rule=new_id[ins.rule])
        if isinstance(ins, DynLoop | DynModi) and ins.rule is not None
        else ins
        for ins in body
    ]
    return kept, out


def _emit(
    b: _Builder,
    ng: _Dim,
    nt: _Dim,
    heads: tuple[int, int, int],
    sizes: tuple[int, int, int, int],
    row_reuse: bool,
    layout: tuple[bool, int],
) -> None:
    """The loop nest of ``compiler.kernels._lower`` with symbolic extents (docs/dpa.md).

    ``heads`` = (GQA group, heads per pass, passes); ``sizes`` = (block groups, chunk tiles,
    GBuf half, OBuf half); ``layout`` = (power-of-two segments, run stride) of the compiler's
    row-aligned group runs (``GemvPlan.pow2_segments``, ``GemvPlan.run_stride``).
    """
    g, p, passes = heads
    bk, ck, half_g, half_o = sizes
    segments, col_stride = layout
    n_t, n_g = nt.count(), ng.count()
    n_blocks = ng.parts(bk)

    def pass_body(pi: _Expr) -> None:
        def head(j: _Expr) -> _Expr:
            return j if row_reuse else pi

        def regime(resident: bool) -> None:
            n_chunks = 1 if resident else nt.parts(ck)
            rh = half_g * pi  # resident input: one GBuf fill per pass
            if resident:
                b.loop(
                    p,
                    lambda j: b.loop(
                        n_t,
                        lambda k: b.cmd(Op.WR_INP, gbuf=rh + j * n_t + k, gpr=head(j) * n_t + k),
                    ),
                )

            def block(bi: _Val, nb: _Val) -> None:
                b0 = _Expr.of(bi) * bk
                oh = half_o * (pi * n_blocks + bi)  # OBuf half alternates per block

                def chunk(ci: _Val, lc: _Val, last: bool) -> None:
                    k0 = _Expr.of(ci) * ck
                    if resident:
                        gh, gstride = rh, n_t
                    else:
                        gh = half_g * (pi * n_blocks * n_chunks + _Expr.of(bi) * n_chunks + ci)
                        gstride = ck
                        b.loop(
                            p,
                            lambda j: b.loop(
                                lc,
                                lambda k: b.cmd(
                                    Op.WR_INP, gbuf=gh + j * ck + k, gpr=head(j) * n_t + k0 + k
                                ),
                            ),
                        )

                    def seg(base: _Expr, off: int, n: _Val, rd_out: bool) -> None:
                        width = col_stride or n  # columns between consecutive groups' runs

                        def group(gi: _Expr) -> None:
                            b.loop(
                                p,
                                lambda j: b.loop(
                                    n,
                                    lambda k: b.cmd(
                                        Op.MAC,
                                        gbuf=gh + j * gstride + off + k,
                                        addr=base + gi * width + k,
                                        out=oh + gi * p + j,
                                    ),
                                ),
                            )
                            if rd_out:
                                b.loop(
                                    p,
                                    lambda j: b.cmd(
                                        Op.RD_OUT,
                                        out=oh + gi * p + j,
                                        gpr=g * n_t + head(j) * n_g + b0 + gi,
                                    ),
                                )

                        b.loop(nb, group)

                    base = b0 * n_t + _Expr.of(nb) * k0
                    if col_stride:  # SV: every run occupies col_stride columns
                        base = b0 * n_chunks * col_stride + _Expr.of(nb) * ci * col_stride
                    # QK^T: the chunk's (constant) length as power-of-two segments in turn
                    parts = _pow2_parts(lc) if segments else [lc]
                    off = 0
                    for si, n in enumerate(parts):
                        seg(base + _Expr.of(nb) * off, off, n, last and si == len(parts) - 1)
                        off += n

                if resident:
                    chunk(0, n_t, True)
                else:
                    b.loop(nt.before_last(ck), lambda ci: chunk(ci, ck, False))
                    chunk(nt.before_last(ck), nt.last_len(ck), True)

            b.loop(ng.before_last(bk), lambda bi: block(bi, bk))
            block(ng.before_last(bk), ng.last_len(bk))

        b.loop(nt.at_most(ck), lambda _: regime(True))
        b.loop(nt.more_than(ck), lambda _: regime(False))

    b.loop(passes, pass_body)
