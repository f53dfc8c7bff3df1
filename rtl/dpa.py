"""The on-module DPA dispatcher in Amaranth (LoL-PIM 5.3, PIMphony VI-C).

Cycle-exact twin of :class:`models.dpa.dispatcher.Dispatcher` with
:class:`models.dpa.dispatcher.DecoderTiming` (``docs/dpa.md``, "The RTL dispatcher"). Every
word field comes from :func:`models.dpa.format.word_fields`, every command field width from
:func:`models.isa.field_widths`.

- **Buffers** (``lib.memory.Memory``): the command buffer (64-bit DPA words,
  ``module.dpa_command_buffer_bytes``), the VA2PA table (a physical row and a valid bit per
  entry, ``module.dpa_address_map_bytes``) and the small decoded table (one entry per plain
  command of the running program).
- **Host interface** ``host``: a stream of ``(op, addr, data)`` writes (:class:`HostOp`):
  load a program word, write a VA2PA entry, set the request / ``T_cur`` / table registers,
  advance ``T_cur``, release the request, start a dispatch.
- **Decoding unit**: a pre-decode pass reads the program once, one word per cycle, evaluates
  the rules for ``T_cur``, folds every ``DYN_MODI`` into the per-loop-level coefficients of
  its command and drops zero-trip loops; the walker then expands the decoded table at one
  command per cycle with a hardware loop stack (zero-overhead loops), followed by field
  modification and the VA2PA lookup. Output: ``o``, a ``lib.stream`` of
  :func:`rtl.common.command_layout` commands.
- **Errors**: ``error`` / ``error_code`` / ``error_row`` (sticky until the next start): a MAC
  whose virtual row has no VA2PA entry (the TLM raises ``TranslationError``), ``T_cur`` out
  of range, or a program the decoded table cannot hold.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np
from amaranth import Array, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out
from pimphony.models.config import HardwareConfig
from pimphony.models.dpa.dispatcher import va2pa_entry_bytes
from pimphony.models.dpa.format import (
    CONFIG_FIELDS,
    FORMAT_VERSION,
    KIND_BITS,
    KIND_LSB,
    NO_LEVEL,
    NO_RULE,
    WORD_BITS,
    WORD_BYTES,
    Kind,
    Target,
    word_fields,
)
from pimphony.models.dpa.program import DpaProgram
from pimphony.models.isa import OP_MAC, field_widths
from pimphony.rtl.common import CYCLE_BITS, command_layout, issued_layout
from pimphony.rtl.dcs import DcsScheduler

__all__ = [
    "DpaDispatcher",
    "DpaError",
    "DpaPipeline",
    "HostOp",
    "buffer_bytes",
    "decoded_entry_layout",
    "host_layout",
    "host_writes",
    "pack_host",
]


class HostOp(IntEnum):
    """Host-interface operations (the ``op`` field of a ``host`` transfer)."""

    LOAD_WORD = 0
    """``command_buffer[addr] = data`` (one 64-bit DPA word)."""
    MAP = 1
    """``va2pa[addr] = data``: physical row in the low bits, valid bit above it."""
    SET_REQUEST = 2
    """``request = data[0:16]``, ``layer = data[16:24]`` (configuration registers)."""
    SET_TOKENS = 3
    """``T_cur = data`` (host update)."""
    ADVANCE = 4
    """``T_cur += 1`` (after a decoding step, on-module)."""
    SET_TABLE = 5
    """The request's VA2PA table: ``table_base = addr``, ``table_len = data`` entries."""
    RELEASE = 6
    """Forget the request: request, ``T_cur``, layer and table length return to 0."""
    START = 7
    """Dispatch the program of ``data`` words at command-buffer word ``addr``."""


class DpaError(IntEnum):
    """``error_code`` values."""

    NONE = 0
    UNMAPPED = 1
    """A MAC's virtual row is beyond the table or its entry is not valid (``error_row``)."""
    TOKENS = 2
    """``T_cur`` is 0 or above the program's ``max_tokens``."""
    PROGRAM = 3
    """Malformed program, loops nested deeper than ``max_depth``, or more plain commands
    than ``decoded_entries``."""


def _bits(n: int) -> int:
    return max(1, (int(n) - 1).bit_length())


def _cfg_bits(name: str) -> int:
    return 8 * CONFIG_FIELDS[name]


class _Geometry:
    """Widths and sizes of a dispatcher instance (all derived from ``models``)."""

    def __init__(
        self,
        cfg: HardwareConfig,
        command_words: int | None,
        map_entries: int | None,
        decoded_entries: int,
        max_depth: int,
    ) -> None:
        ch = cfg.channel
        w = field_widths(ch)
        for what, n in (
            ("GBuf entries", ch.gbuf_entries),
            ("OBuf entries", ch.obuf_entries),
            ("columns per row", ch.columns_per_row),
        ):
            if n & (n - 1):
                raise ValueError(f"the RTL dispatcher needs a power-of-two number of {what}: {n}")
        self.entry_bytes = va2pa_entry_bytes(ch)
        self.command_words = int(command_words or cfg.module.dpa_command_buffer_bytes // WORD_BYTES)
        self.map_entries = int(map_entries or cfg.module.dpa_address_map_bytes // self.entry_bytes)
        self.decoded_entries = int(decoded_entries)
        self.depth = int(max_depth)
        if not 1 <= self.depth < NO_LEVEL:
            raise ValueError(f"max_depth {max_depth}: must be 1..{NO_LEVEL - 1}")
        self.row_bits = w["row"]
        if self.row_bits + 1 > 8 * self.entry_bytes:
            raise ValueError("a VA2PA entry has no room for its valid bit")
        self.gbuf_bits, self.out_bits, self.col_bits = w["gbuf"], w["out"], w["col"]
        self.op_bits = w["op"]
        self.rule_id_bits = word_fields(Kind.RULE)["rule_id"][1]
        mac = word_fields(Kind.MAC)
        self.vrow_bits = mac["row"][1]
        self.addr_bits = self.vrow_bits + self.col_bits  # linear column address
        self.tok_bits = word_fields(Kind.HEADER)["max_tokens"][1]
        self.value_bits = self.tok_bits + 1  # rule values and loop counters
        self.cmd_addr_bits = _bits(self.command_words)
        self.map_addr_bits = _bits(self.map_entries)
        self.host_addr_bits = max(self.cmd_addr_bits, self.map_addr_bits)
        le_bits = word_fields(Kind.DYN_LOOP)["le"][1]
        self.word_index_bits = max(self.cmd_addr_bits, le_bits) + 1
        self.columns = ch.columns_per_row


def decoded_entry_layout(g: _Geometry) -> data.StructLayout:
    """One decoded-table entry: a plain command with its rule-folded per-level coefficients.

    ``depth`` enclosing (non-zero-trip) loops; loops ``begin_lo .. depth-1`` begin just before
    it with bounds ``bnd``; field = base + sum over levels ``l`` of ``c*[l] * index[l]``.
    """
    lvl = unsigned(_bits(g.depth + 1))
    return data.StructLayout(
        {
            "op": unsigned(g.op_bits),
            "depth": lvl,
            "begin_lo": lvl,
            "gbuf": unsigned(g.gbuf_bits),
            "addr": unsigned(g.addr_bits),
            "out": unsigned(g.out_bits),
            "cg": data.ArrayLayout(unsigned(g.gbuf_bits), g.depth),
            "ca": data.ArrayLayout(unsigned(g.addr_bits), g.depth),
            "co": data.ArrayLayout(unsigned(g.out_bits), g.depth),
            "bnd": data.ArrayLayout(unsigned(g.value_bits), g.depth),
        }
    )


def host_layout(g: _Geometry) -> data.StructLayout:
    """Payload of a host write: ``op`` (:class:`HostOp`), ``addr`` and a 64-bit ``data``."""
    return data.StructLayout(
        {
            "op": unsigned(_bits(len(HostOp))),
            "addr": unsigned(g.host_addr_bits),
            "data": unsigned(WORD_BITS),
        }
    )


def pack_host(layout: data.StructLayout, op: int, addr: int = 0, value: int = 0) -> int:
    """The integer payload of one host write (for testbenches)."""
    out = 0
    for name, v in (("op", op), ("addr", addr), ("data", value)):
        f = layout[name]
        out |= (int(v) & ((1 << f.shape.width) - 1)) << f.offset
    return out


def host_writes(
    program: DpaProgram,
    t_cur: int,
    table: np.ndarray | list[int],
    *,
    request: int = 0,
    layer: int = 0,
    program_base: int = 0,
    table_base: int = 0,
    row_bits: int | None = None,
) -> list[tuple[int, int, int]]:
    """Host writes ``(op, addr, data)`` that load ``program`` and ``table`` and start a dispatch.

    ``table[v]`` is the physical row of virtual row ``v``; negative entries are holes (written
    with the valid bit clear).
    """
    rb = row_bits if row_bits is not None else field_widths(program.cfg.channel)["row"]
    writes = [(HostOp.LOAD_WORD, program_base + i, int(w)) for i, w in enumerate(program.words)]
    for v, p in enumerate(np.asarray(table, dtype=np.int64).tolist()):
        writes.append((HostOp.MAP, table_base + v, 0 if p < 0 else (1 << rb) | p))
    writes += [
        (HostOp.SET_REQUEST, 0, int(request) | (int(layer) << _cfg_bits("request"))),
        (HostOp.SET_TOKENS, 0, int(t_cur)),
        (HostOp.SET_TABLE, table_base, len(table)),
        (HostOp.START, program_base, int(program.words.shape[0])),
    ]
    return [(int(op), int(a), int(d)) for op, a, d in writes]


def _field(word, kind: Kind, name: str):
    lsb, width, is_signed = word_fields(kind)[name]
    v = word[lsb : lsb + width]
    return v.as_signed() if is_signed else v


def buffer_bytes(cfg: HardwareConfig, **dispatcher_args) -> dict[str, int]:
    """Bytes of each buffer of a :class:`DpaDispatcher` built with ``dispatcher_args``.

    Memories count whole bytes per entry; ``registers`` sums the rule values, the loop
    stacks, the ``DYN_MODI`` sums, the per-entry loop-end counts and the configuration
    registers.
    """
    args = {"command_words": None, "map_entries": None, "decoded_entries": 32, "max_depth": 6}
    args.update(dispatcher_args)
    return _buffer_bytes(_Geometry(cfg, **args))


def _buffer_bytes(g: _Geometry) -> dict[str, int]:
    entry = decoded_entry_layout(g).size
    regs = (
        NO_RULE * g.value_bits  # rule values
        + g.depth * (2 * g.value_bits + g.word_index_bits + _bits(g.decoded_entries + 1))
        + (g.depth + 1) * (g.gbuf_bits + g.addr_bits + g.out_bits)  # DYN_MODI sums
        + g.decoded_entries * _bits(g.depth + 1)  # loop ends per entry
        + sum(8 * b for b in CONFIG_FIELDS.values())
        + 2 * g.map_addr_bits
    )
    return {
        "command_buffer": g.command_words * WORD_BYTES,
        "va2pa": g.map_entries * g.entry_bytes,
        "decoded_table": g.decoded_entries * -(-entry // 8),
        "registers": -(-regs // 8),
    }


class DpaDispatcher(wiring.Component):
    """The on-module DPA dispatcher.

    Parameters
    ----------
    cfg : HardwareConfig
        Preset; buffer sizes default to ``cfg.module``'s.
    command_words, map_entries : int, optional
        Smaller command-buffer / VA2PA depths for fast simulation.
    decoded_entries : int
        Plain commands a program may hold (decoded-table depth).
    max_depth : int
        Loop-stack depth (nesting levels).

    Ports: ``host`` (host writes in), ``o`` (channel commands out), ``busy``, ``error``,
    ``error_code`` (:class:`DpaError`), ``error_row`` (the unmapped virtual row) and the
    configuration registers ``request``, ``t_cur``, ``layer``.
    """

    def __init__(
        self,
        cfg: HardwareConfig,
        *,
        command_words: int | None = None,
        map_entries: int | None = None,
        decoded_entries: int = 32,
        max_depth: int = 6,
    ) -> None:
        self.cfg = cfg
        self.geom = g = _Geometry(cfg, command_words, map_entries, decoded_entries, max_depth)
        super().__init__(
            {
                "host": In(stream.Signature(host_layout(g))),
                "o": Out(stream.Signature(command_layout(cfg))),
                "busy": Out(1),
                "error": Out(1),
                "error_code": Out(2),
                "error_row": Out(g.vrow_bits),
                "request": Out(_cfg_bits("request")),
                "t_cur": Out(_cfg_bits("t_cur")),
                "layer": Out(_cfg_bits("layer")),
            }
        )

    @property
    def host_layout(self) -> data.StructLayout:
        """Layout of a ``host`` payload."""
        return host_layout(self.geom)

    def buffer_bytes(self) -> dict[str, int]:
        """Storage of each buffer in bytes (see :func:`buffer_bytes`)."""
        return _buffer_bytes(self.geom)

    def elaborate(self, platform):
        m = Module()
        g = self.geom
        D = g.depth
        lvl_shape = unsigned(_bits(D + 1))
        entry_layout = decoded_entry_layout(g)

        # ---- memories ---------------------------------------------------------------------
        m.submodules.command_buffer = cbuf = memory.Memory(
            shape=unsigned(WORD_BITS), depth=g.command_words, init=[]
        )
        m.submodules.va2pa = vmap = memory.Memory(
            shape=unsigned(g.row_bits + 1), depth=g.map_entries, init=[]
        )
        m.submodules.decoded = dec = memory.Memory(
            shape=entry_layout, depth=g.decoded_entries, init=[]
        )
        c_wr, c_rd = cbuf.write_port(), cbuf.read_port()
        v_wr, v_rd = vmap.write_port(), vmap.read_port()
        d_wr, d_rd = dec.write_port(), dec.read_port(domain="comb")

        # ---- configuration registers and host interface -----------------------------------
        in_prepass = Signal()  # the sequencing FSM (below) is in PREPASS
        in_walk = Signal()  # ... in WALK
        t_cur, request, layer = self.t_cur, self.request, self.layer
        table_base = Signal(g.map_addr_bits)
        table_len = Signal(g.map_addr_bits + 1)
        base = Signal(g.cmd_addr_bits)
        nwords = Signal(g.word_index_bits)
        s1_valid, s2_valid = Signal(), Signal()
        busy = Signal()
        m.d.comb += self.busy.eq(busy)
        h = self.host.payload
        m.d.comb += self.host.ready.eq(~busy)
        hfire = self.host.valid & ~busy
        m.d.comb += [
            c_wr.addr.eq(h.addr),
            c_wr.data.eq(h.data),
            c_wr.en.eq(hfire & (h.op == HostOp.LOAD_WORD)),
        ]
        err = Signal()
        err_code = Signal(2)
        err_row = Signal(g.vrow_bits)
        m.d.comb += [self.error.eq(err), self.error_code.eq(err_code), self.error_row.eq(err_row)]

        # ---- pre-decode state ---------------------------------------------------------------
        j = Signal(g.word_index_bits)  # program word being processed
        depth = Signal(lvl_shape)  # open (non-zero-trip) loops
        committed = Signal(lvl_shape)  # levels that already hold a decoded entry
        n = Signal(range(g.decoded_entries + 1))  # decoded entries written
        skipping = Signal()
        skip_end = Signal(g.word_index_bits)
        end_word = [Signal(g.word_index_bits, name=f"end_word{a}") for a in range(D)]
        bnd_pend = [Signal(g.value_bits, name=f"bnd_pend{a}") for a in range(D)]
        rule_val = Array(Signal(g.value_bits, name=f"rule{r}") for r in range(NO_RULE))
        acc_g = [Signal(g.gbuf_bits, name=f"acc_g{a}") for a in range(D + 1)]
        acc_a = [Signal(g.addr_bits, name=f"acc_a{a}") for a in range(D + 1)]
        acc_o = [Signal(g.out_bits, name=f"acc_o{a}") for a in range(D + 1)]
        ends = Array(Signal(lvl_shape, name=f"ends{e}") for e in range(g.decoded_entries))

        m.d.comb += c_rd.addr.eq(Mux(in_prepass, base + j + 1, h.addr))
        word = c_rd.data
        kind = word[KIND_LSB : KIND_LSB + KIND_BITS]

        # Loops ending at this word (a suffix of the open levels).
        ending = [Signal(name=f"ending{a}") for a in range(D)]
        npop = Signal(lvl_shape)
        m.d.comb += [ending[a].eq((a < depth) & (end_word[a] == j)) for a in range(D)]
        m.d.comb += npop.eq(sum(ending))
        after_pop = Signal(lvl_shape)
        m.d.comb += after_pop.eq(depth - npop)

        # Rule evaluation (one RULE word per cycle).
        t_tok = t_cur[: g.tok_bits]
        num = Signal(signed(g.tok_bits + 2))
        q = Signal(signed(g.tok_bits + 2))
        qm = Signal(signed(g.tok_bits + 2))
        v = Signal(signed(g.tok_bits + 3))
        v_pos = Signal(g.value_bits)
        divisor = _field(word, Kind.RULE, "divisor")
        modulus = _field(word, Kind.RULE, "modulus")
        clamp = _field(word, Kind.RULE, "clamp")
        add = _field(word, Kind.RULE, "add")
        m.d.comb += [
            num.eq(t_tok + _field(word, Kind.RULE, "offset")),
            q.eq(num // divisor),
            qm.eq(Mux(modulus != 0, q % modulus, q)),
            v.eq(Mux(_field(word, Kind.RULE, "negate"), add - qm, add + qm)),
            v_pos.eq(Mux(v < 0, 0, Mux((clamp != 0) & (v > clamp), clamp, v))),
        ]

        # DYN_MODI term: coef [* rule value] [* C for ROW], into one accumulator slot.
        m_target = _field(word, Kind.DYN_MODI, "target")
        m_level = _field(word, Kind.DYN_MODI, "level")
        m_rule = _field(word, Kind.DYN_MODI, "rule")
        prod = Signal(signed(g.addr_bits + 1))
        m.d.comb += prod.eq(
            _field(word, Kind.DYN_MODI, "coef")
            * Mux(m_rule == NO_RULE, 1, rule_val[m_rule])
            * Mux(m_target == Target.ROW, g.columns, 1)
        )
        slot = Signal(range(D + 1))
        m.d.comb += slot.eq(Mux(m_level == NO_LEVEL, D, depth - 1 - m_level))

        # DYN_LOOP bound.
        l_bound = _field(word, Kind.DYN_LOOP, "bound")
        bound = Signal(g.value_bits)
        m.d.comb += bound.eq(
            Mux(_field(word, Kind.DYN_LOOP, "mode"), rule_val[l_bound[: g.rule_id_bits]], l_bound)
        )
        l_end = Signal(g.word_index_bits)
        m.d.comb += l_end.eq(j + _field(word, Kind.DYN_LOOP, "le"))

        # Plain command -> decoded entry.
        new = Signal(entry_layout)
        m.d.comb += [
            new.op.eq(kind),
            new.depth.eq(depth),
            new.begin_lo.eq(committed),
            new.gbuf.eq(_field(word, Kind.MAC, "gbuf") + acc_g[D]),
            new.addr.eq(
                _field(word, Kind.MAC, "row") * g.columns + _field(word, Kind.MAC, "col") + acc_a[D]
            ),
            new.out.eq(_field(word, Kind.MAC, "out") + acc_o[D]),
        ]
        for a in range(D):
            m.d.comb += [
                new.cg[a].eq(acc_g[a]),
                new.ca[a].eq(acc_a[a]),
                new.co[a].eq(acc_o[a]),
                new.bnd[a].eq(bnd_pend[a]),
            ]
        emit = Signal()  # a plain command word is decoded into entry n this cycle
        m.d.comb += [d_wr.addr.eq(n), d_wr.data.eq(new), d_wr.en.eq(emit)]

        failing = Signal()
        fail_code = Signal(2)

        def fail(code: DpaError) -> None:
            m.d.comb += [failing.eq(1), fail_code.eq(code)]

        # ---- walker -------------------------------------------------------------------------
        pc = Signal(range(g.decoded_entries + 1))
        looped = Signal()
        lb_level = Signal(lvl_shape)
        cnt = [Signal(g.value_bits, name=f"cnt{a}") for a in range(D)]
        bnd = [Signal(g.value_bits, name=f"bnd{a}") for a in range(D)]
        start = [Signal(range(g.decoded_entries + 1), name=f"start{a}") for a in range(D)]
        m.d.comb += d_rd.addr.eq(pc)
        e = d_rd.data
        e_ends = ends[pc]
        rst = Signal(lvl_shape)
        m.d.comb += rst.eq(Mux(looped, lb_level + 1, e.begin_lo))
        idx = [Signal(g.value_bits, name=f"idx{a}") for a in range(D)]
        bnd_eff = [Signal(g.value_bits, name=f"bnd_eff{a}") for a in range(D)]
        start_eff = [Signal.like(pc, name=f"start_eff{a}") for a in range(D)]
        for a in range(D):
            fresh = a >= rst
            m.d.comb += [
                idx[a].eq(Mux(fresh, 0, cnt[a])),
                bnd_eff[a].eq(Mux(fresh, e.bnd[a], bnd[a])),
                start_eff[a].eq(Mux(fresh, pc, start[a])),
            ]
        found = Signal()
        back_level = Signal(lvl_shape)
        target = Signal.like(pc)
        for a in range(D):  # ascending: the innermost candidate wins
            with m.If((a < e.depth) & (a + e_ends >= e.depth) & (idx[a] + 1 < bnd_eff[a])):
                m.d.comb += [found.eq(1), back_level.eq(a), target.eq(start_eff[a])]

        # Field modification (walk stage) -> stage 1 register.
        f_gbuf = Signal(g.gbuf_bits)
        f_addr = Signal(g.addr_bits)
        f_out = Signal(g.out_bits)
        m.d.comb += [
            f_gbuf.eq(e.gbuf + sum(e.cg[a] * idx[a] for a in range(D))),
            f_addr.eq(e.addr + sum(e.ca[a] * idx[a] for a in range(D))),
            f_out.eq(e.out + sum(e.co[a] * idx[a] for a in range(D))),
        ]
        cmd = command_layout(self.cfg)
        s1 = Signal(cmd)  # row = virtual row (truncated), translated in stage 2
        s1_vrow = Signal(g.vrow_bits)
        s2 = Signal(cmd)
        s2_vrow = Signal(g.vrow_bits)
        s2_inside = Signal()
        adv = Signal()
        m.d.comb += adv.eq(~s2_valid | self.o.ready)
        walk = in_walk & adv

        # Stage 1 -> VA2PA read (synchronous) -> stage 2.
        v_index = Signal(g.map_addr_bits + 1)
        m.d.comb += [
            v_index.eq(table_base + s1_vrow),
            v_rd.addr.eq(v_index),
            v_rd.en.eq(adv),
            v_wr.addr.eq(h.addr),
            v_wr.data.eq(h.data),
            v_wr.en.eq(hfire & (h.op == HostOp.MAP)),
        ]
        mapped_row = v_rd.data[: g.row_bits]
        mapped_ok = v_rd.data[g.row_bits]
        is_mac = s2.op == OP_MAC
        bad = Signal()
        m.d.comb += [
            bad.eq(s2_valid & is_mac & ~(s2_inside & mapped_ok)),
            self.o.valid.eq(s2_valid & ~bad),
            self.o.payload.eq(s2),
            self.o.payload.row.eq(Mux(is_mac, mapped_row, s2.row)),
        ]
        with m.If(adv):
            m.d.sync += [
                s1_valid.eq(walk),
                s2_valid.eq(s1_valid),
                s2.eq(s1),
                s2_vrow.eq(s1_vrow),
                s2_inside.eq((s1_vrow < table_len) & (v_index < g.map_entries)),
            ]

        # ---- sequencing ----------------------------------------------------------------------
        # IDLE: host writes (served only while idle with the output pipeline empty). PREPASS:
        # the pre-decode pass, word j of the program per cycle. WALK: the walker expands the
        # decoded table, one command per cycle the output pipeline advances. An error (a failing
        # check, an unmapped MAC row) returns to IDLE.
        with m.FSM() as fsm:
            with m.State("IDLE"), m.If(hfire), m.Switch(h.op):
                with m.Case(HostOp.SET_REQUEST):
                    m.d.sync += [
                        request.eq(h.data[: len(request)]),
                        layer.eq(h.data[len(request) : len(request) + len(layer)]),
                    ]
                with m.Case(HostOp.SET_TOKENS):
                    m.d.sync += t_cur.eq(h.data)
                with m.Case(HostOp.ADVANCE):
                    m.d.sync += t_cur.eq(t_cur + 1)
                with m.Case(HostOp.SET_TABLE):
                    m.d.sync += [table_base.eq(h.addr), table_len.eq(h.data)]
                with m.Case(HostOp.RELEASE):
                    m.d.sync += [request.eq(0), t_cur.eq(0), layer.eq(0), table_len.eq(0)]
                with m.Case(HostOp.START):
                    m.d.sync += [
                        err.eq(0),
                        err_code.eq(DpaError.NONE),
                        err_row.eq(0),
                        base.eq(h.addr),
                        nwords.eq(h.data),
                        j.eq(0),
                        depth.eq(0),
                        committed.eq(0),
                        n.eq(0),
                        skipping.eq(0),
                        pc.eq(0),
                        looped.eq(0),
                    ]
                    m.d.sync += [x.eq(0) for x in acc_g + acc_a + acc_o]
                    with m.If(h.data == 0):
                        fail(DpaError.PROGRAM)
                    with m.Else():
                        m.next = "PREPASS"

            with m.State("PREPASS"):
                m.d.sync += j.eq(j + 1)
                last = j + 1 >= nwords
                pops_kept = Signal(lvl_shape)  # popped levels that hold entries
                m.d.comb += pops_kept.eq(Mux(committed > after_pop, committed - after_pop, 0))
                new_depth = Signal(lvl_shape)
                new_committed = Signal(lvl_shape)
                m.d.comb += [
                    new_depth.eq(after_pop),
                    new_committed.eq(Mux(committed < after_pop, committed, after_pop)),
                ]
                with m.If(j == 0):
                    max_tokens = _field(word, Kind.HEADER, "max_tokens")
                    with m.If(
                        (kind != Kind.HEADER)
                        | (_field(word, Kind.HEADER, "version") != FORMAT_VERSION)
                    ):
                        fail(DpaError.PROGRAM)
                    with m.Elif((t_cur == 0) | (t_cur > max_tokens)):
                        fail(DpaError.TOKENS)
                with m.Elif(skipping), m.If(j == skip_end):
                    m.d.sync += skipping.eq(0)
                with m.Else(), m.Switch(kind):
                    with m.Case(Kind.RULE):
                        with m.If(divisor == 0):
                            fail(DpaError.PROGRAM)
                        rid = _field(word, Kind.RULE, "rule_id")
                        m.d.sync += rule_val[rid].eq(v_pos)
                    with m.Case(Kind.DYN_LOOP):
                        with m.If(bound == 0):
                            m.d.sync += [skipping.eq(1), skip_end.eq(l_end)]
                        with m.Elif(depth >= D):
                            fail(DpaError.PROGRAM)
                        with m.Else():
                            for a in range(D):
                                with m.If(depth == a):
                                    m.d.sync += [end_word[a].eq(l_end), bnd_pend[a].eq(bound)]
                            m.d.comb += new_depth.eq(depth + 1)
                    with m.Case(Kind.DYN_MODI):
                        with m.If((m_level != NO_LEVEL) & (m_level >= depth)):
                            fail(DpaError.PROGRAM)
                        for a in range(D + 1):
                            with m.If(slot == a), m.Switch(m_target):
                                with m.Case(Target.GBUF):
                                    m.d.sync += acc_g[a].eq(acc_g[a] + prod)
                                with m.Case(Target.ROW, Target.COL):
                                    m.d.sync += acc_a[a].eq(acc_a[a] + prod)
                                with m.Case(Target.OUT):
                                    m.d.sync += acc_o[a].eq(acc_o[a] + prod)
                    with m.Case(Kind.WR_INP, Kind.MAC, Kind.RD_OUT):
                        with m.If(n >= g.decoded_entries):
                            fail(DpaError.PROGRAM)
                        with m.Else():
                            m.d.comb += [emit.eq(1), new_committed.eq(after_pop)]
                            m.d.sync += n.eq(n + 1)
                            m.d.sync += [x.eq(0) for x in acc_g + acc_a + acc_o]
                    with m.Default():
                        fail(DpaError.PROGRAM)
                m.d.sync += [depth.eq(new_depth), committed.eq(new_committed)]
                with m.If(emit):
                    m.d.sync += ends[n].eq(npop)
                with m.Elif(pops_kept != 0):
                    m.d.sync += ends[n - 1].eq(ends[n - 1] + pops_kept)
                with m.If(last):
                    with m.If((n != 0) | emit):
                        m.next = "WALK"
                    with m.Else():
                        m.next = "IDLE"
                with m.If(failing):
                    m.next = "IDLE"

            with m.State("WALK"):
                with m.If(adv):
                    m.d.sync += [
                        s1.op.eq(e.op),
                        s1.gbuf.eq(f_gbuf),
                        s1.col.eq(f_addr[: g.col_bits]),
                        s1.row.eq(f_addr[g.col_bits :]),
                        s1.out.eq(f_out),
                        s1_vrow.eq(f_addr[g.col_bits :]),
                        pc.eq(Mux(found, target, pc + 1)),
                        looped.eq(found),
                        lb_level.eq(back_level),
                    ]
                    for a in range(D):
                        m.d.sync += [
                            cnt[a].eq(Mux(found & (back_level == a), idx[a] + 1, idx[a])),
                            bnd[a].eq(bnd_eff[a]),
                            start[a].eq(start_eff[a]),
                        ]
                    with m.If(~found & (pc + 1 >= n)):
                        m.next = "IDLE"
                with m.If(bad):
                    m.next = "IDLE"
        m.d.comb += [
            busy.eq(~fsm.ongoing("IDLE") | s1_valid | s2_valid),
            in_prepass.eq(fsm.ongoing("PREPASS")),
            in_walk.eq(fsm.ongoing("WALK")),
        ]

        with m.If(failing):
            m.d.sync += [err.eq(1), err_code.eq(fail_code)]

        # A MAC whose virtual row has no mapping stops the dispatch with the row.
        with m.If(bad):
            m.d.sync += [
                err.eq(1),
                err_code.eq(DpaError.UNMAPPED),
                err_row.eq(s2_vrow),
                s1_valid.eq(0),
                s2_valid.eq(0),
            ]
        return m


class DpaPipeline(wiring.Component):
    """The dispatcher feeding a :class:`rtl.dcs.DcsScheduler` (end-to-end check).

    Ports: ``host`` (as :class:`DpaDispatcher`), ``o`` and ``cycle`` (the DCS's issued stream
    and cycle counter), ``busy``, ``error``, ``error_code``, ``error_row``.
    """

    def __init__(self, cfg: HardwareConfig, **dispatcher_args) -> None:
        self.cfg = cfg
        self.dispatcher = DpaDispatcher(cfg, **dispatcher_args)
        g = self.dispatcher.geom
        super().__init__(
            {
                "host": In(stream.Signature(host_layout(g))),
                "o": Out(stream.Signature(issued_layout(cfg))),
                "cycle": Out(CYCLE_BITS),
                "busy": Out(1),
                "error": Out(1),
                "error_code": Out(2),
                "error_row": Out(g.vrow_bits),
            }
        )

    @property
    def host_layout(self) -> data.StructLayout:
        """Layout of a ``host`` payload."""
        return self.dispatcher.host_layout

    def elaborate(self, platform):
        m = Module()
        m.submodules.dispatcher = disp = self.dispatcher
        m.submodules.dcs = dcs = DcsScheduler(self.cfg)
        wiring.connect(m, wiring.flipped(self.host), disp.host)
        wiring.connect(m, disp.o, dcs.i)
        wiring.connect(m, dcs.o, wiring.flipped(self.o))
        m.d.comb += [
            self.cycle.eq(dcs.cycle),
            self.busy.eq(disp.busy),
            self.error.eq(disp.error),
            self.error_code.eq(disp.error_code),
            self.error_row.eq(disp.error_row),
        ]
        return m
