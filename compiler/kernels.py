"""Lower one decode kernel on one channel to a command stream (see ``docs/mapping.md``).

Every kernel here is a matrix-vector product ``Y[h] = A @ X[h]`` for ``h`` in a group of
``G`` input vectors that share the matrix ``A`` (``n_out x n_in``):

=========  =====================  ===========================  =============================
kernel     ``A``                  ``X[h]``                     ``G``
=========  =====================  ===========================  =============================
``gemv``   weights (d_out, d_in)  activation of request h      batch ``B`` (row reuse)
``qk``     K cache (T, d_h)       query of head h (d_h)        1 (MHA) or GQA group size
``sv``     V^T (d_h, T)           scores of head h (T)         1 (MHA) or GQA group size
=========  =====================  ===========================  =============================

Output ``o`` lives in bank ``o % banks`` (output group ``o // banks``); input element ``i`` is
in input tile ``i // mac_elements``. Shapes that are not multiples of the bank count or the
MAC width are zero-padded; shapes that do not fit the channel are refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from pimphony.models.config import HardwareConfig
from pimphony.models.dram import activation_offsets
from pimphony.models.errors import PimphonyError
from pimphony.models.isa import COMMAND_DTYPE, Op, gpr_tiles

__all__ = [
    "attention_plan",
    "positive",
    "GQA_MAPPINGS",
    "KERNELS",
    "CompileError",
    "attention_max_tokens",
    "Kernel",
    "KernelProgram",
    "compile_gemv",
    "compile_kernel",
    "compile_qk",
    "compile_sv",
    "gemv_max_batch",
    "gpr_tiles_needed",
    "gemv_pass_size",
    "row_switch_estimate",
]

GQA_MAPPINGS = ("row-reuse", "head-serial")


class CompileError(PimphonyError, ValueError):
    """A kernel shape or option cannot be lowered onto the channel."""


@dataclass(frozen=True)
class GemvPlan:
    """Sizes and allocation of one lowered matrix-vector product."""

    n_out: int
    n_in: int
    heads: int
    groups: int  # output groups (n_out padded / banks)
    tiles: int  # input tiles (n_in padded / mac_elements)
    chunk_tiles: int  # input tiles per GBuf fill, per head
    block_groups: int  # output groups per OBuf block
    resident: bool  # the whole input stays in GBuf (loaded once)
    rows: int  # DRAM rows per bank used by the matrix
    gpr_out_base: int  # first GPR tile of the outputs
    mapping: str
    pass_size: int  # input vectors per pass over the matrix (the last pass may hold fewer)
    # GQA row-reuse layout of attention (docs/mapping.md, "Row-aligned group runs"):
    # run_stride > 0: every group run of a chunk occupies run_stride columns (SV);
    # pow2_segments: every chunk is split into power-of-two segments laid out one after
    # another (QK^T). Both keep every group run inside one DRAM row for every T.
    run_stride: int = 0
    pow2_segments: bool = False

    @property
    def passes(self) -> int:
        """Passes over the matrix: each reopens every row once."""
        return math.ceil(self.heads / self.pass_size)


@dataclass(frozen=True)
class KernelProgram:
    """A lowered kernel: the command stream and how operands map to banks and the GPR."""

    kind: str
    shape: dict
    commands: np.ndarray
    plan: GemvPlan
    cfg: HardwareConfig

    @property
    def counts(self) -> dict[str, int]:
        """Number of commands per opcode."""
        op = self.commands["op"]
        return {o.name: int(np.count_nonzero(op == o)) for o in Op}

    def matrix_image(self, a: np.ndarray) -> np.ndarray:
        """Bank memory holding ``A``: array ``(rows, banks, row_elements)`` of FP16."""
        p, ch = self.plan, self.cfg.channel
        a = _checked_array(a, (p.n_out, p.n_in), "matrix")
        padded = np.zeros((p.groups * ch.banks, p.tiles * ch.mac_elements), dtype=np.float16)
        padded[: p.n_out, : p.n_in] = a
        # tiles_by_gk[g, k, b, :] = A[g*banks + b, k*E:(k+1)*E]
        tiles = padded.reshape(p.groups, ch.banks, p.tiles, ch.mac_elements).transpose(0, 2, 1, 3)
        image = np.zeros((p.rows * ch.columns_per_row, ch.banks, ch.mac_elements), dtype=np.float16)
        g, k, addr = self._visit_order()  # padding columns of aligned runs stay zero
        image[addr] = tiles[g, k]
        return (
            image.reshape(p.rows, ch.columns_per_row, ch.banks, ch.mac_elements)
            .transpose(0, 2, 1, 3)
            .reshape(p.rows, ch.banks, ch.row_elements)
        )

    def gpr_image(self, x: np.ndarray) -> np.ndarray:
        """GPR tiles holding the inputs ``X`` (``(G, n_in)`` or ``(n_in,)``) as FP16."""
        p, ch = self.plan, self.cfg.channel
        x = _checked_array(np.atleast_2d(x), (p.heads, p.n_in), "input")
        padded = np.zeros((p.heads, p.tiles * ch.mac_elements), dtype=np.float16)
        padded[:, : p.n_in] = x
        gpr = np.zeros((p.gpr_out_base + p.heads * p.groups, ch.mac_elements), dtype=np.float16)
        gpr[: p.gpr_out_base] = padded.reshape(p.heads * p.tiles, ch.mac_elements)
        return gpr

    def read_outputs(self, gpr_out: np.ndarray) -> np.ndarray:
        """``Y`` (``(G, n_out)``) from the output tiles RD_OUT wrote (``(tiles, banks)``)."""
        p, ch = self.plan, self.cfg.channel
        tiles = gpr_out[p.gpr_out_base : p.gpr_out_base + p.heads * p.groups]
        y = tiles.reshape(p.heads, p.groups * ch.banks)
        return y[:, : p.n_out]

    def tile_addresses(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(g, k, address)`` of every matrix tile: output group, input tile and column
        address (``row * columns_per_row + column``, the same in every bank)."""
        return self._visit_order()

    def _visit_order(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(g, k, address)`` of every matrix tile, in column-address order."""
        g_list, k_list, a_list = [], [], []
        for _b0, _g_hi, _c, _k0, _k1, runs in _layout(self.plan):
            for g, lo, hi, first, _last in runs:
                g_list.append(np.full(hi - lo, g))
                k_list.append(np.arange(lo, hi))
                a_list.append(np.arange(first, first + hi - lo))
        return np.concatenate(g_list), np.concatenate(k_list), np.concatenate(a_list)


def _checked_array(a: np.ndarray, shape: tuple[int, ...], what: str) -> np.ndarray:
    a = np.asarray(a)
    if a.shape != shape:
        raise CompileError(f"{what} has shape {a.shape}, this kernel expects {shape}")
    return a.astype(np.float16)


def positive(name: str, value: int, error: type[Exception] = CompileError) -> int:
    """``value`` as an ``int``; ``error`` naming ``name`` unless it is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise error(f"{name} = {value!r}: must be a positive integer")
    return int(value)


def _plan(
    cfg: HardwareConfig,
    n_out: int,
    n_in: int,
    heads: int,
    mapping: str,
    pass_size: int | None = None,
    what: str = "GQA",
    attention: str | None = None,
) -> GemvPlan:
    """Sizes and allocation; ``pass_size`` (batched GEMV) splits the inputs into passes.

    ``attention`` (``"qk"`` or ``"sv"``) selects the row-aligned layout of GQA group runs
    when more than one head shares a pass (docs/mapping.md, "Row-aligned group runs").
    """
    ch = cfg.channel
    half_g, half_o = ch.gbuf_entries // 2, ch.obuf_entries // 2
    if mapping not in GQA_MAPPINGS:
        raise CompileError(f"mapping {mapping!r} is unknown; allowed: {', '.join(GQA_MAPPINGS)}")
    # head-serial runs one head at a time: each pass needs buffer room for one head only.
    # A batched GEMV runs passes of ``pass_size`` requests (at most a buffer half's worth).
    per_pass = heads if mapping == "row-reuse" else 1
    if pass_size is not None:
        per_pass = pass_size
    if per_pass > min(half_g, half_o):
        raise CompileError(
            f"GQA group {heads} does not fit: row-reuse keeps one input tile and one output "
            f"entry per head in a buffer half ({half_g} GBuf / {half_o} OBuf entries); "
            f"use a group <= {min(half_g, half_o)} or --mapping head-serial"
        )
    groups = math.ceil(n_out / ch.banks)
    tiles = math.ceil(n_in / ch.mac_elements)
    resident = per_pass * tiles <= half_g
    chunk = tiles if resident else half_g // per_pass
    block = half_o // per_pass
    run_stride, pow2_segments = 0, False
    if attention is not None and per_pass > 1:
        if attention == "sv":  # the token-dependent run length: pad every run to a stride
            run_stride = _aligned_stride(half_g // per_pass, ch.columns_per_row)
        else:  # the fixed run length: split it into power-of-two segments
            pow2_segments = True
    columns = groups * tiles
    if run_stride:
        columns = groups * math.ceil(tiles / chunk) * run_stride
    rows = math.ceil(columns / ch.columns_per_row)
    if rows > ch.rows_per_bank:
        raise CompileError(
            f"matrix {n_out}x{n_in} needs {rows} DRAM rows per bank; the channel has "
            f"{ch.rows_per_bank} (preset {cfg.name})"
        )
    gpr_size = gpr_tiles(cfg)
    gpr_out_base = heads * tiles
    need = gpr_tiles_needed(cfg, n_out, n_in, heads)
    if need > gpr_size:
        if what == "batch":
            fits = gemv_max_batch(cfg, n_out, n_in)
            raise CompileError(
                f"batch {heads}: inputs ({heads}x{n_in}) and outputs ({heads}x{n_out}) of the "
                f"whole batch need {need} GPR tiles of "
                f"{ch.column_bytes} B; the GPR holds {gpr_size}; use a batch <= {fits} per "
                "GEMV (run the rest as another GEMV) or split d_in/d_out over more channels"
            )
        raise CompileError(
            f"inputs ({heads}x{n_in}) and outputs ({heads}x{n_out}) need "
            f"{need} GPR tiles of {ch.column_bytes} B; the GPR holds "
            f"{gpr_size}"
        )
    return GemvPlan(
        n_out=n_out,
        n_in=n_in,
        heads=heads,
        groups=groups,
        tiles=tiles,
        chunk_tiles=chunk,
        block_groups=block,
        resident=resident,
        rows=rows,
        gpr_out_base=gpr_out_base,
        mapping=mapping,
        pass_size=per_pass,
        run_stride=run_stride,
        pow2_segments=pow2_segments,
    )


def _aligned_stride(n: int, cols: int) -> int:
    """Smallest divisor of ``cols`` that is ``>= n`` (a multiple of ``cols`` if ``n > cols``)."""
    if n > cols:
        return math.ceil(n / cols) * cols
    return min(d for d in range(n, cols + 1) if cols % d == 0)


def _pow2_parts(n: int) -> list[int]:
    """``n`` as distinct powers of two, largest first (``5 -> [4, 1]``)."""
    return [1 << e for e in range(n.bit_length() - 1, -1, -1) if n >> e & 1]


def _layout(p: GemvPlan) -> Iterator[tuple[int, int, int, int, int, list]]:
    """The matrix tiles in MAC visiting order, one (block, chunk) at a time.

    Yields ``(b0, g_hi, c, k0, k1, runs)`` per output block ``[b0, g_hi)`` and input chunk
    ``c`` (tiles ``[k0, k1)``); ``runs`` lists ``(g, lo, hi, first, last)``: group ``g``'s
    tiles ``[lo, hi)`` at column addresses ``first ..``, ``last`` if it is the group's last
    run of the chunk. Runs are laid out in order (segment, then group), each occupying
    ``run_stride`` columns if set, else its length.
    """
    n_chunks = math.ceil(p.tiles / p.chunk_tiles)
    addr = 0
    for b0 in range(0, p.groups, p.block_groups):
        g_hi = min(b0 + p.block_groups, p.groups)
        for c in range(n_chunks):
            k0, k1 = c * p.chunk_tiles, min((c + 1) * p.chunk_tiles, p.tiles)
            parts = _pow2_parts(k1 - k0) if p.pow2_segments else [k1 - k0]
            runs = []
            lo = k0
            for i, n in enumerate(parts):
                stride = p.run_stride or n
                for g in range(b0, g_hi):
                    runs.append((g, lo, lo + n, addr + (g - b0) * stride, i == len(parts) - 1))
                addr += (g_hi - b0) * stride
                lo += n
            yield b0, g_hi, c, k0, k1, runs


def _lower(cfg: HardwareConfig, p: GemvPlan) -> np.ndarray:
    """Emit the command stream for plan ``p`` (loop nest in ``docs/mapping.md``).

    The loop nest lists *blocks* (:data:`_BLOCK_FIELDS`), one per pass's heads at a time;
    :func:`_expand_blocks` writes their commands.
    """
    ch = cfg.channel
    half_g, half_o, cols = ch.gbuf_entries // 2, ch.obuf_entries // 2, ch.columns_per_row
    per_pass = p.pass_size
    n_chunks = math.ceil(p.tiles / p.chunk_tiles)
    slot = p.tiles if p.resident else p.chunk_tiles  # GBuf entries per head
    blocks: list[tuple[int, ...]] = []
    add = blocks.append
    wr, mac, rd = int(Op.WR_INP), int(Op.MAC), int(Op.RD_OUT)
    fill = 0  # GBuf fills so far: alternates the GBuf half
    block_count = 0  # output blocks so far: alternates the OBuf half
    for h0 in range(0, p.heads, per_pass):
        m = min(per_pass, p.heads - h0)  # the pass's heads h0 .. h0 + m - 1
        if p.resident:
            resident_half = (fill % 2) * half_g
            fill += 1
            add((wr, m, p.tiles, resident_half, 1, slot, 0, 0, 0, 0, h0 * p.tiles, 1, p.tiles))
        for b0, _g_hi, c, k0, k1, runs in _layout(p):  # column addresses restart per pass
            if c == 0:
                oh = (block_count % 2) * half_o
                block_count += 1
            gh = resident_half if p.resident else 0
            if not p.resident:
                gh = (fill % 2) * half_g
                fill += 1
                add((wr, m, k1 - k0, gh, 1, slot, 0, 0, 0, 0, h0 * p.tiles + k0, 1, p.tiles))
            for g, lo, hi, first, last in runs:
                out = oh + (g - b0) * per_pass
                # Split the run at DRAM-row boundaries: every head finishes a row segment before
                # the next row opens (row reuse across the GQA group). With the row-aligned layout
                # of attention runs this never splits (docs/mapping.md).
                seg_lo = lo
                while seg_lo < hi:
                    a_lo = first + (seg_lo - lo)
                    seg_hi = min(hi, seg_lo + cols - a_lo % cols)
                    gb = gh + (seg_lo if p.resident else seg_lo - k0)
                    add((mac, m, seg_hi - seg_lo, gb, 1, slot, a_lo, 1, out, 1, 0, 0, 0))
                    seg_lo = seg_hi
                if c == n_chunks - 1 and last:
                    gpr = p.gpr_out_base + h0 * p.groups + g
                    add((rd, m, 1, 0, 0, 0, 0, 0, out, 1, gpr, 0, p.groups))
    return _expand_blocks(blocks, cols)


#: A block of :func:`_lower`: ``heads`` runs of ``n`` commands of one opcode, one run per
#: head of a pass. Within a run the GBuf entry, column address (row x columns + column) and
#: GPR tile step by their ``_step``; from one head's run to the next, GBuf entry, OBuf entry
#: and GPR tile step by their ``_head``.
_BLOCK_FIELDS = (
    "op", "heads", "n", "gbuf", "gbuf_step", "gbuf_head", "addr", "addr_step", "out",
    "out_head", "gpr", "gpr_step", "gpr_head",
)  # fmt: skip


def _expand_blocks(blocks: list[tuple[int, ...]], cols: int) -> np.ndarray:
    """The commands of :func:`_lower`'s blocks, in order."""
    b = np.array(blocks, dtype=np.int64).reshape(-1, len(_BLOCK_FIELDS))
    heads = b[:, 1]
    j = np.arange(int(heads.sum()), dtype=np.int64) - np.repeat(np.cumsum(heads) - heads, heads)
    b = np.repeat(b, heads, axis=0)  # one row per head's run
    op, _, n, gbuf, gbuf_step, gbuf_head, addr, addr_step, out, out_head, gpr, gpr_step = b.T[:12]
    gpr_head = b[:, 12]
    gbuf, out, gpr = gbuf + j * gbuf_head, out + j * out_head, gpr + j * gpr_head
    total = int(n.sum())
    k = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    a = np.repeat(addr, n) + k * np.repeat(addr_step, n)
    fields = {
        "op": np.repeat(op, n),
        "gbuf": np.repeat(gbuf, n) + k * np.repeat(gbuf_step, n),
        "row": a // cols,
        "col": a % cols,
        "out": np.repeat(out, n),
        "gpr": np.repeat(gpr, n) + k * np.repeat(gpr_step, n),
    }
    cmds = np.zeros(total, dtype=COMMAND_DTYPE)
    for name, values in fields.items():
        if total and values.max() > np.iinfo(COMMAND_DTYPE[name]).max:
            raise OverflowError(f"command field {name} exceeds its width")
        cmds[name] = values
    return cmds


def compile_gemv(
    cfg: HardwareConfig, d_out: int, d_in: int, batch: int = 1, pass_size: int | None = None
) -> KernelProgram:
    """FC GEMV ``Y = X W^T`` for ``batch`` inputs ``X`` (``(B, d_in)``) sharing ``W``.

    Row reuse (``docs/mapping.md``): each opened weight row serves every request of a pass.
    A pass holds one input tile and one OBuf entry per request in a buffer half, so at most
    ``min(gbuf_entries, obuf_entries) // 2`` requests; the batch is split into passes of
    ``pass_size`` requests (the last pass holds the rest), each rereading ``W``. The default
    pass size is :func:`gemv_pass_size`. ``batch = 1`` is one pass over ``W``.
    """
    d_out, d_in = positive("d_out", d_out), positive("d_in", d_in)
    batch = positive("batch", batch)
    cap = _batch_cap(cfg, batch)
    chosen = gemv_pass_size(cfg, d_out, d_in, batch)
    pass_size = chosen if pass_size is None else positive("pass_size", pass_size)
    if pass_size > cap:
        ch = cfg.channel
        raise CompileError(
            f"pass_size = {pass_size}: a pass holds at most min(batch, buffer half) = {cap} "
            f"requests (batch {batch}; {ch.gbuf_entries // 2} GBuf / {ch.obuf_entries // 2} "
            f"OBuf entries per half, preset {cfg.name})"
        )
    plan = _plan(cfg, d_out, d_in, batch, "row-reuse", pass_size, what="batch")
    shape: dict = {"d_out": d_out, "d_in": d_in}
    if batch > 1:
        shape["batch"] = batch
    if pass_size != chosen:
        shape["pass_size"] = pass_size
    return KernelProgram("gemv", shape, _lower(cfg, plan), plan, cfg)


def _batch_cap(cfg: HardwareConfig, batch: int) -> int:
    """Most requests one pass can hold: ``batch``, and one buffer half's entries."""
    return min(batch, cfg.channel.gbuf_entries // 2, cfg.channel.obuf_entries // 2)


def row_switch_estimate(cfg: HardwareConfig) -> int:
    """Cycles of one row switch with nothing overlapped: tRP + the ACTs' span + tRCD_MAC."""
    tm = cfg.timing
    return tm.tRP + activation_offsets(tm, cfg.channel.banks)[-1] + tm.tRCD_MAC


def gemv_pass_size(cfg: HardwareConfig, d_out: int, d_in: int, batch: int) -> int:
    """The pass size (requests per pass) a batched GEMV uses by default.

    A larger pass reopens each weight row for more requests, but it leaves fewer OBuf
    entries per request, so each input tile is rewritten for more output blocks. The pass
    size ``P`` in ``1 .. min(batch, NG/2, NO/2)`` minimises the closed-form command-slot
    estimate (one command per cycle, no overlap; ties: the smaller ``P``, which balances
    the passes)::

        B*groups*tiles (MAC) + B*tiles*n_blocks(P) (WR_INP; 1 block if resident)
          + B*groups (RD_OUT) + ceil(B/P) * rows * row_switch_estimate

    ``docs/mapping.md`` compares it with the simulated best pass size.
    """
    d_out, d_in = positive("d_out", d_out), positive("d_in", d_in)
    batch = positive("batch", batch)
    ch = cfg.channel
    half_g, half_o = ch.gbuf_entries // 2, ch.obuf_entries // 2
    groups = math.ceil(d_out / ch.banks)
    tiles = math.ceil(d_in / ch.mac_elements)
    rows = math.ceil(groups * tiles / ch.columns_per_row)
    switch = row_switch_estimate(cfg)
    best, best_cost = 1, None
    for p in range(1, _batch_cap(cfg, batch) + 1):
        n_blocks = 1 if p * tiles <= half_g else math.ceil(groups / (half_o // p))
        cost = batch * tiles * (groups + n_blocks) + batch * groups
        cost += math.ceil(batch / p) * rows * switch
        if best_cost is None or cost < best_cost:
            best, best_cost = p, cost
    return best


def gemv_max_batch(cfg: HardwareConfig, d_out: int, d_in: int) -> int:
    """Largest batch whose inputs and outputs fit the GPR for a ``d_out x d_in`` GEMV."""
    return gpr_tiles(cfg) // gpr_tiles_needed(cfg, positive("d_out", d_out), positive("d_in", d_in))


def gpr_tiles_needed(cfg: HardwareConfig, n_out: int, n_in: int, heads: int = 1) -> int:
    """GPR tiles (``column_bytes`` each) a kernel's vectors occupy: per head its input
    (``ceil(n_in / mac_elements)`` tiles) and its output (``ceil(n_out / banks)``, one value
    per bank per RD_OUT)."""
    ch = cfg.channel
    return heads * (math.ceil(n_in / ch.mac_elements) + math.ceil(n_out / ch.banks))


def attention_plan(
    cfg: HardwareConfig, kind: str, tokens: int, d_h: int, gqa_group: int, mapping: str
) -> GemvPlan:
    """The plan of a ``qk``/``sv`` kernel of ``tokens`` (no stream lowered); a refusal that
    more tokens caused says how many fit."""
    n_out, n_in = (tokens, d_h) if kind == "qk" else (d_h, tokens)
    try:
        return _plan(cfg, n_out, n_in, gqa_group, mapping, attention=kind)
    except CompileError as exc:
        most = attention_max_tokens(cfg, kind, d_h, gqa_group, mapping)
        if 0 < most < tokens:
            raise CompileError(
                f"{exc}; at most {most:,} tokens fit one {kind} kernel of this shape (a decode "
                "step cuts longer contexts into GPR tiles, docs/decode.md)"
            ) from None
        raise


def _compile_attention(
    cfg: HardwareConfig, kind: str, tokens: int, d_h: int, gqa_group: int, mapping: str
) -> KernelProgram:
    """The ``qk`` or ``sv`` kernel of ``tokens`` tokens (``compile_qk`` / ``compile_sv``)."""
    tokens, d_h = positive("tokens", tokens), positive("d_h", d_h)
    gqa_group = positive("gqa_group", gqa_group)
    plan = attention_plan(cfg, kind, tokens, d_h, gqa_group, mapping)
    shape = {"tokens": tokens, "d_h": d_h, "gqa_group": gqa_group, "mapping": mapping}
    return KernelProgram(kind, shape, _lower(cfg, plan), plan, cfg)


def compile_qk(
    cfg: HardwareConfig, tokens: int, d_h: int, gqa_group: int = 1, mapping: str = "row-reuse"
) -> KernelProgram:
    """Attention scores ``K q_h`` for the ``gqa_group`` query heads sharing one K cache."""
    return _compile_attention(cfg, "qk", tokens, d_h, gqa_group, mapping)


def compile_sv(
    cfg: HardwareConfig, tokens: int, d_h: int, gqa_group: int = 1, mapping: str = "row-reuse"
) -> KernelProgram:
    """Attention output ``V^T s_h`` for the ``gqa_group`` heads sharing one V cache."""
    return _compile_attention(cfg, "sv", tokens, d_h, gqa_group, mapping)


def attention_max_tokens(
    cfg: HardwareConfig,
    kind: str,
    d_h: int,
    gqa_group: int = 1,
    mapping: str = "row-reuse",
    limit: int = 1 << 24,
) -> int:
    """Largest token count ``T <= limit`` whose ``qk``/``sv`` kernel fits one channel.

    Both limits the compiler checks (DRAM rows per bank and the GPR) grow with ``T``, so the
    accepted counts are ``1 .. attention_max_tokens``. A DPA program encoded for this many
    tokens serves every attention kernel the static compiler can lower at this shape.
    """
    if kind not in ("qk", "sv"):
        raise CompileError(f"kernel {kind!r}: attention_max_tokens covers 'qk' and 'sv'")
    d_h, gqa_group = positive("d_h", d_h), positive("gqa_group", gqa_group)
    limit = positive("limit", limit)

    def fits(t: int) -> bool:
        n_out, n_in = (t, d_h) if kind == "qk" else (d_h, t)
        try:
            _plan(cfg, n_out, n_in, gqa_group, mapping, attention=kind)
        except CompileError:
            return False
        return True

    # Refusals that do not depend on T (mapping, group size) propagate from here.
    _plan(cfg, *((1, d_h) if kind == "qk" else (d_h, 1)), gqa_group, mapping, attention=kind)
    lo, hi = 1, limit  # fits(lo); the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


class Kernel(StrEnum):
    """The one-channel kernels the compiler lowers."""

    GEMV = "gemv"
    QK = "qk"
    SV = "sv"


#: Each kernel's compiler (``compile(cfg, **shape)``).
KERNELS: dict[Kernel, Callable[..., KernelProgram]] = {
    Kernel.GEMV: compile_gemv,
    Kernel.QK: compile_qk,
    Kernel.SV: compile_sv,
}


def compile_kernel(cfg: HardwareConfig, kind: str, **shape: int | str) -> KernelProgram:
    """Lower kernel ``kind`` (a :class:`Kernel` name) of ``shape`` onto one channel."""
    if not isinstance(kind, str) or kind not in KERNELS:
        raise CompileError(f"kernel {kind!r} is unknown; allowed: {', '.join(KERNELS)}")
    return KERNELS[Kernel(kind)](cfg, **shape)
