"""DPA encoding, expansion and the on-module dispatcher (docs/dpa.md)."""

from __future__ import annotations

import numpy as np
import pytest
from pimphony.compiler.dpa import (
    DpaEncodeError,
    encode_kernel,
)
from pimphony.compiler.kernels import compile_qk, compile_sv
from pimphony.models.channel import run_channel
from pimphony.models.config import load_preset
from pimphony.models.dpa.dispatcher import (
    DecoderTiming,
    Dispatcher,
    decode_times,
    gaps_from_times,
    va2pa_entry_bytes,
)
from pimphony.models.dpa.format import (
    WORD_BYTES,
    Command,
    DpaCapacityError,
    DpaError,
    DynLoop,
    DynModi,
    Header,
    MappingError,
    Rule,
    Target,
    TranslationError,
    decode_word,
    encode_word,
)
from pimphony.models.dpa.program import DpaProgram, expand
from pimphony.models.isa import Op, validate_stream
from pimphony.sim.experiments.size_report import instruction_size_report, static_program_bytes

from tests.helpers import run_cli

CFG = load_preset("aim-16ch")
MAX_T = 8192
TOKENS = [1, 2, 15, 16, 17, 100, 127, 128, 129, 511, 512, 513, 1000, 1024, 4096, 5000, 8192]
RANDOM_TOKENS = [int(t) for t in np.random.default_rng(2024).integers(1, MAX_T + 1, size=12)]
COMPILE = {"qk": compile_qk, "sv": compile_sv}


def _static(kind: str, t: int, d_h: int, g: int, mapping: str = "row-reuse") -> np.ndarray:
    return COMPILE[kind](CFG, t, d_h, g, mapping).commands


@pytest.mark.parametrize("kind", ["qk", "sv"])
@pytest.mark.parametrize("d_h", [48, 64, 80, 128, 256])
@pytest.mark.parametrize("g", [1, 2, 4, 8])
def test_expand_equals_static_stream(kind: str, d_h: int, g: int) -> None:
    # Every GQA row-reuse shape, including those whose group runs would cross a DRAM row
    # without the compiler's row-aligned layout (QK^T d_h 48/80 with G 2, 4; SV d_h 128 with
    # G 2, d_h 48/80/256 with G >= 2): docs/mapping.md, "Row-aligned group runs".
    prog = encode_kernel(CFG, kind, d_h, g, MAX_T)
    perm = np.random.default_rng(d_h + g).permutation(CFG.channel.rows_per_bank)
    for t in TOKENS + RANDOM_TOKENS:
        ref = _static(kind, t, d_h, g)
        got = expand(prog, t, None)
        assert got.dtype == ref.dtype and np.array_equal(got, ref), (kind, d_h, g, t)
        ident = expand(prog, t, np.arange(CFG.channel.rows_per_bank))
        assert np.array_equal(ident, ref)
        mapped = expand(prog, t, perm)
        want = ref.copy()
        mac = want["op"] == Op.MAC
        want["row"][mac] = perm[ref["row"][mac]]
        assert np.array_equal(mapped, want), (kind, d_h, g, t)
    validate_stream(got, CFG.channel)


@pytest.mark.parametrize(
    ("kind", "d_h", "g", "mapping"),
    [
        ("qk", 128, 8, "row-reuse"),  # input streamed in chunks, 4-group OBuf blocks
        ("qk", 256, 4, "row-reuse"),
        ("qk", 48, 4, "head-serial"),  # tiles do not divide a row; one head per pass
        ("sv", 128, 8, "row-reuse"),  # two OBuf blocks per chunk
        ("sv", 64, 4, "head-serial"),
        ("sv", 48, 1, "row-reuse"),
    ],
)
def test_expand_other_shapes(kind: str, d_h: int, g: int, mapping: str) -> None:
    prog = encode_kernel(CFG, kind, d_h, g, 4096, mapping)
    for t in [1, 16, 17, 63, 129, 255, 257, 513, 1000, 2049, 4096]:
        assert np.array_equal(expand(prog, t), _static(kind, t, d_h, g, mapping)), t


@pytest.mark.parametrize("kind", ["qk", "sv"])
@pytest.mark.parametrize(("d_h", "g"), [(64, 1), (128, 1), (128, 4)])
def test_program_size_independent_of_tokens(kind: str, d_h: int, g: int) -> None:
    progs = [encode_kernel(CFG, kind, d_h, g, m) for m in (16, 1000, MAX_T, 60000)]
    assert len({p.nbytes for p in progs}) == 1
    # Only the header (which records max_tokens) differs.
    for p in progs[1:]:
        assert np.array_equal(p.words[1:], progs[0].words[1:])
    assert progs[0].nbytes == len(progs[0].words) * WORD_BYTES < 1024
    before = progs[-1].words.copy()
    for t in (1, 100, 5000, 60000):
        expand(progs[-1], t)
    assert np.array_equal(progs[-1].words, before)


def test_listing_matches_documented_loop_structure() -> None:
    text = encode_kernel(CFG, "qk", 128, 1, 4096).listing().splitlines()
    assert "RULE     R0 = floor((T-1)/512)" in text[1]
    assert "RULE     R1 = (floor((T-1)/16) mod 32) + 1" in text[2]
    assert sum("DYN_LOOP lb=R" in line for line in text) == 2
    assert sum(line.strip().endswith("MAC      gbuf=0 row=0 col=0 out=0") for line in text) == 2


def test_rule_evaluation() -> None:
    last = Rule(0, offset=-1, divisor=16, modulus=8, add=1)
    assert [last.evaluate(t) for t in (1, 16, 17, 128, 129, 145)] == [1, 1, 2, 8, 1, 2]
    resident = Rule(1, offset=15, divisor=16 * 9, negate=True, add=1, clamp=1)
    assert [resident.evaluate(t) for t in (1, 128, 129, 10_000)] == [1, 1, 0, 0]


def test_word_round_trip_and_overflow() -> None:
    ins = [
        Header(kernel=1, max_tokens=123_456),
        Rule(3, offset=-7, divisor=528, modulus=32, negate=True, add=-3, clamp=1),
        DynLoop(le=7, count=40_000),
        DynLoop(le=2, rule=5),
        DynModi(Target.COL, coef=-5, level=2, rule=3),
        DynModi(Target.GPR, coef=1 << 20),
        Command(Op.MAC, gbuf=63, row=16383, col=63, out=63),
        Command(Op.RD_OUT, out=5, gpr=(1 << 20) - 1),
    ]
    for i in ins:
        w = encode_word(i)
        assert 0 <= w < 1 << 64 and decode_word(w) == i
    with pytest.raises(DpaError, match="row = 70000 does not fit 16 bits"):
        encode_word(Command(Op.MAC, row=70_000))
    with pytest.raises(DpaError, match="coef"):
        encode_word(DynModi(Target.ROW, coef=1 << 23))
    prog = encode_kernel(CFG, "sv", 128, 4, 4096)
    back = DpaProgram.from_bytes(prog.to_bytes(), CFG)
    assert len(prog.to_bytes()) == prog.nbytes
    assert np.array_equal(expand(back, 777), expand(prog, 777))


def test_malformed_programs_refused() -> None:
    head = Header(kernel=0, max_tokens=100)
    with pytest.raises(DpaError, match="followed by a plain command"):
        DpaProgram.from_instructions(
            [head, DynModi(Target.ROW, 1), DynLoop(le=1, count=2), Command(Op.MAC)], CFG
        )
    with pytest.raises(DpaError, match="undefined rule"):
        DpaProgram.from_instructions([head, DynLoop(le=1, rule=0), Command(Op.MAC)], CFG)
    with pytest.raises(DpaError, match="level 1 but only 1 enclosing"):
        DpaProgram.from_instructions(
            [head, DynLoop(le=2, count=2), DynModi(Target.ROW, 1, level=1), Command(Op.MAC)], CFG
        )
    with pytest.raises(DpaError, match="exceeds the program's max_tokens"):
        expand(DpaProgram.from_instructions([head, Command(Op.MAC)], CFG), 101)


def test_row_aligned_runs_make_former_refusals_encodable() -> None:
    # QK^T d_h 48 (3 tiles), G = 4, T = 337: 22 groups. Before the row-aligned layout, group
    # 21's run covered columns 63-65 and the heads were interleaved per row segment at a
    # T-dependent point (refused). Now each 3-tile run is a 2-tile then a 1-tile segment:
    # block 0 (8 groups): 2-tile runs at columns 0..15, 1-tile runs at 16..23; every block
    # takes 24 columns, block 2 (groups 16..21, 6 groups) starts at 48: 2-tile runs 48..59,
    # 1-tile runs 60..65 -> group 21's 1-tile run is column 65 (row 1), no run crosses.
    ref = _static("qk", 337, 48, 4)
    mac = ref[ref["op"] == Op.MAC]
    addr = mac["row"].astype(np.int64) * 64 + mac["col"]
    assert addr.max() == 22 * 3 - 1  # no padding columns: 66 columns, 2 rows
    # Group 21, head 0 (OBuf entry (21 - 16) x 4 + 0 = 20 of half 0, block 2 at column 48):
    # its 2-tile run at 48 + 5 x 2 = 58..59 (row 0), its 1-tile run at 60 + 5 = 65 (row 1).
    assert addr[(mac["out"] == 20) & (addr >= 48)].tolist() == [58, 59, 65]
    prog = encode_kernel(CFG, "qk", 48, 4, 4096)
    assert np.array_equal(expand(prog, 337), ref)
    # SV d_h 128, G = 2, T = 129: 9 tiles, GBuf-resident (2 x 9 <= 32); each group's run sits
    # at a stride of (32 // 2) = 16 columns: 8 groups x 16 = 128 columns = 2 rows (unpadded:
    # 72 columns, group 7's run 63..71 crossed a row).
    sv = compile_sv(CFG, 129, 128, 2)
    assert sv.plan.run_stride == 16 and sv.plan.rows == 2
    assert np.array_equal(expand(encode_kernel(CFG, "sv", 128, 2, 4096), 129), sv.commands)


def test_refuses_inexpressible_row_reuse_shapes() -> None:
    # A GQA group that is not a power of two: QK^T d_h 128, G = 6 streams chunks of
    # 32 // 6 = 5 and 3 tiles (segments 4 + 1 and 2 + 1); the 2-tile runs start at block base
    # + 5 nb + 2 gi, odd when the last block's group count nb is odd: at T = 385 (25 groups,
    # last block 20..24) group 23's tiles 5..6 sit at columns 191..192 and cross a row.
    with pytest.raises(DpaEncodeError, match="crosses a DRAM row boundary"):
        encode_kernel(CFG, "qk", 128, 6, 4096)
    with pytest.raises(DpaEncodeError, match="head-serial"):
        encode_kernel(CFG, "qk", 256, 3, 4096)
    encode_kernel(CFG, "qk", 128, 6, 4096, mapping="head-serial")  # accepted
    with pytest.raises(DpaEncodeError, match="kernel 'gemv'"):
        encode_kernel(CFG, "gemv", 64)
    with pytest.raises(Exception, match="GPR"):
        encode_kernel(CFG, "sv", 128, 1, 400_000)  # the static layout does not fit at max_tokens


def test_noncontiguous_mapping_changes_exactly_the_rows() -> None:
    prog = encode_kernel(CFG, "qk", 128, 4, MAX_T)
    t = 1000  # ceil(1000 / 16) = 63 groups x 8 tiles = 504 columns = 8 rows
    ref = expand(prog, t)
    va2pa = [22, 7, 900, 33, 34, 16_000, 5, 1234]
    got = expand(prog, t, va2pa)
    assert ref["row"].max() == 7
    for name in ("op", "gbuf", "col", "out", "gpr"):
        assert np.array_equal(got[name], ref[name])
    mac = ref["op"] == Op.MAC
    assert np.array_equal(got["row"][mac], np.asarray(va2pa)[ref["row"][mac]])
    assert not np.array_equal(got["row"], ref["row"])
    assert (got["row"][~mac] == 0).all()


def test_translation_errors_name_request_and_virtual_row() -> None:
    prog = encode_kernel(CFG, "sv", 128, 1, MAX_T)
    with pytest.raises(TranslationError, match=r"request 9: virtual row 1 .*beyond the 1 mapped"):
        expand(prog, 1000, [4], request=9)
    with pytest.raises(TranslationError, match="virtual row 1 .*unmapped") as info:
        expand(prog, 1000, [4, -1, 6])
    assert info.value.virtual_row == 1
    d = Dispatcher(CFG)
    d.load_program("sv", prog)
    d.set_tokens(7, 1000)
    with pytest.raises(TranslationError, match=r"request 7 \(layer 0, V cache\): virtual row 0"):
        d.dispatch(7, "sv")  # nothing mapped: never silently row 0
    d.map_rows(7, range(11, 18), tensor="V")  # 8 groups x 63 tiles = 504 columns = 8 rows
    with pytest.raises(TranslationError, match="virtual row 7 "):
        d.dispatch(7, "sv")
    d.extend_rows(7, [3], tensor="V")
    s = d.dispatch(7, "sv")
    assert set(s["row"][s["op"] == Op.MAC].tolist()) == {*range(11, 18), 3}
    with pytest.raises(TranslationError, match="layer 3"):
        d.dispatch(7, "sv", layer=3)


def test_dispatcher_capacity_errors() -> None:
    prog = encode_kernel(CFG, "qk", 128, 1, MAX_T)
    small = CFG.replace(**{"module.dpa_command_buffer_bytes": prog.nbytes + 8})
    d = Dispatcher(small)
    d.load_program("qk", prog)
    d.load_program("qk", prog)  # replacing frees the old copy first
    sv_bytes = encode_kernel(CFG, "sv", 128).nbytes
    with pytest.raises(DpaCapacityError, match=rf"'sv' \({sv_bytes} B.*"):
        d.load_program("sv", encode_kernel(small, "sv", 128))
    tiny = CFG.replace(**{"module.dpa_address_map_bytes": 16})
    d = Dispatcher(tiny)
    assert d.entry_bytes == va2pa_entry_bytes(CFG.channel) == 2  # 16384 rows -> 14 bits
    d.map_rows(1, range(6))
    with pytest.raises(DpaCapacityError, match=r"needs 9 entries x 2 B; 12 of 16 B"):
        d.extend_rows(1, [6, 7, 8])
    d.extend_rows(1, [6, 7])
    assert d.map_bytes_used == 16
    assert d.release(1) == list(range(8)) and d.map_bytes_used == 0
    d2 = Dispatcher(CFG, max_requests=2)
    d2.set_tokens(0, 1)
    d2.set_tokens(1, 1)
    with pytest.raises(DpaCapacityError, match="configuration buffer full"):
        d2.set_tokens(2, 1)


def test_mapping_conflicts_and_lazy_growth() -> None:
    d = Dispatcher(CFG)
    d.load_program("qk", encode_kernel(CFG, "qk", 128, 1, MAX_T))
    d.set_tokens(1, 300)
    d.set_tokens(2, 300)
    d.map_rows(1, [22, 23, 24])
    d.map_rows(2, [33, 34, 35])  # LoL-PIM Fig. 6c: VA 0 -> 22 (request 1), 33 (request 2)
    with pytest.raises(MappingError, match="physical row 22 is already mapped by request 1"):
        d.map_rows(3, [22])
    with pytest.raises(MappingError, match="outside"):
        d.map_rows(3, [CFG.channel.rows_per_bank])
    for r, base in ((1, 22), (2, 33)):
        s = d.dispatch(r)
        want = _static("qk", 300, 128, 1).copy()
        mac = want["op"] == Op.MAC
        want["row"][mac] += base
        assert np.array_equal(s, want)
    assert d.advance(1, 212) == 512  # 32 groups x 8 tiles = 4 rows
    with pytest.raises(TranslationError, match="request 1 .*virtual row 3"):
        d.dispatch(1)
    d.extend_rows(1, [900])  # a new, non-adjacent row
    s = d.dispatch(1)
    assert sorted(set(s["row"][s["op"] == Op.MAC])) == [22, 23, 24, 900]
    d.select(2, layer=0)
    assert d.registers == {"request": 2, "t_cur": 300, "layer": 0}
    assert np.array_equal(d.dispatch(), d.dispatch(2))


def test_dispatcher_buffers_fit_lolpim_budget() -> None:
    for preset in ("aim-16ch", "aim-32ch"):
        d = Dispatcher(load_preset(preset))
        assert d.command_buffer_bytes == 96 * 1024 and d.address_map_bytes == 96 * 1024
        assert d.total_buffer_bytes < 200_000


def test_decode_timing_feeds_channel_gaps() -> None:
    times = decode_times(5, n_rules=2)
    assert times.tolist() == [6, 7, 8, 9, 10]  # 1 header + 2 rules + 3 pipeline, then 1/cycle
    assert gaps_from_times(times).tolist() == [6, 0, 0, 0, 0]
    half = decode_times(4, 0, DecoderTiming(rate=0.5, latency=2))
    assert half.tolist() == [3, 5, 7, 9] and gaps_from_times(half).tolist() == [3, 1, 1, 1]
    assert decode_times(4, 0, DecoderTiming(rate=2, latency=0)).tolist() == [1, 1, 2, 2]
    d = Dispatcher(CFG)
    d.load_program("qk", encode_kernel(CFG, "qk", 128, 1, MAX_T))
    d.set_tokens(0, 1024)
    d.map_rows(0, range(100, 108))
    stream, gaps = d.dispatch_with_gaps(0)
    prog = d.programs["qk"]
    n_rules = len(prog.rules)
    # 1 header + 1 per rule + 1 per other word (pre-decode pass) + 3 pipeline, then 1/cycle.
    assert prog.body_words == len(prog.words) - 1 - n_rules
    assert gaps[0] == len(prog.words) + 3 and not gaps[1:].any()
    assert np.array_equal(
        d.dispatch_times(0), decode_times(len(stream), n_rules, None, prog.body_words)
    )
    assert decode_times(2, 1, DecoderTiming(word_cycles=2), n_body_words=4).tolist() == [13, 14]
    base = run_channel(stream, CFG, "dcs").cycles
    fed = run_channel(stream, CFG, "dcs", valid_gaps=gaps).cycles
    assert base <= fed <= base + gaps[0]
    slow = Dispatcher(CFG, DecoderTiming(rate=0.25))
    slow.load_program("qk", d.programs["qk"])
    slow.set_tokens(0, 1024)
    slow.map_rows(0, range(100, 108))
    s2, g2 = slow.dispatch_with_gaps(0)
    assert run_channel(s2, CFG, "dcs", valid_gaps=g2).cycles >= 4 * len(s2)


def test_size_report_and_cli(tmp_path, capsys) -> None:
    rows = instruction_size_report(CFG, 128, [1024, 2048, 4096, 8192])
    static = [r.static_bytes for r in rows]
    assert static[0] == static_program_bytes(_static("qk", 1024, 128, 1)) + static_program_bytes(
        _static("sv", 1024, 128, 1)
    )
    assert 1.95 < static[-1] / static[-2] < 2.05 and 7.8 < static[-1] / static[0] < 8.2
    assert len({r.dpa_bytes for r in rows}) == 1 and rows[0].dpa_bytes < static[0] / 10
    out = tmp_path / "size.png"
    rc, text, _ = run_cli(
        capsys, "size-report", "--dh", "64", "--contexts", "1024,4096", "--plot", out
    )
    assert rc == 0
    assert "4096" in text and "DPA" in text and out.read_bytes()[:4] == b"\x89PNG"
    assert run_cli(capsys, "size-report", "--contexts", "0")[0] == 2
