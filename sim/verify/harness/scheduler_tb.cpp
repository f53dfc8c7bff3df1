// Compiled testbench of the scheduler blocks (static_sched, pingpong, dcs): the C++ twin of
// sim/verify/tb_scheduler.py, built with Verilator by sim/verify/compiled.py.
//
//   scheduler_tb STREAMS_FILE RESULTS_FILE
//
// Reads every stream of STREAMS_FILE, runs each on the block (reset, then drive the input
// stream with its valid gaps and the output ready pattern, cycle for cycle as the cocotb
// testbench does), and writes the issue cycle of every command to RESULTS_FILE (through a
// temporary file and a rename). Both file formats, the payload layout and the exit codes are
// defined in Python (sim/verify/compiled.py) and reach this file as constants of the generated
// header harness_format.h; nothing here knows a field width.

#include <cerrno>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "Vtop.h"
#include "harness_format.h"
#include "verilated.h"

namespace {

[[noreturn]] void fail(int code, const std::string& message) {
    std::fprintf(stderr, "scheduler_tb: %s\n", message.c_str());
    std::exit(code);
}

std::string str(uint64_t v) { return std::to_string(v); }

// Little-endian unsigned integer of `bytes` bytes at `p`.
uint64_t le(const uint8_t* p, unsigned bytes) {
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    return v;
}

void put_le(uint8_t* p, uint64_t v, unsigned bytes) {
    for (unsigned i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

class Reader {
  public:
    explicit Reader(const char* path) : path_(path), f_(std::fopen(path, "rb")) {
        if (!f_) fail(EXIT_BAD_INPUT, path_ + ": cannot open (" + std::strerror(errno) + ")");
    }
    ~Reader() { std::fclose(f_); }
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;

    // Read exactly `n` bytes of `what` or fail naming it.
    void read(void* dst, size_t n, const std::string& what) {
        size_t got = n ? std::fread(dst, 1, n, f_) : 0;
        if (got != n)
            fail(EXIT_BAD_INPUT, path_ + ": " + what + ": file ends after " + str(got) + " of " +
                                     str(n) + " bytes");
        offset_ += n;
    }
    bool at_end() { return std::fgetc(f_) == EOF; }
    uint64_t offset() const { return offset_; }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
    FILE* f_;
    uint64_t offset_ = 0;
};

// Port access for any Verilator signal type: CData/SData/IData/QData, or VlWide<N>.
template <typename T>
inline void put(T& sig, uint64_t v) {
    sig = static_cast<T>(v);
}
template <std::size_t N>
inline void put(VlWide<N>& sig, uint64_t v) {
    sig[0] = static_cast<EData>(v);
    if (N > 1) sig[1] = static_cast<EData>(v >> 32);
    for (std::size_t i = 2; i < N; ++i) sig[i] = 0;
}
template <typename T>
inline uint64_t take(const T& sig, unsigned off, uint64_t mask) {
    return (static_cast<uint64_t>(sig) >> off) & mask;
}
template <std::size_t N>
inline uint64_t take(const VlWide<N>& sig, unsigned off, uint64_t mask) {
    const unsigned w = off / 32, b = off % 32;
    uint64_t v = static_cast<uint64_t>(sig[w]) >> b;
    if (w + 1 < N) v |= static_cast<uint64_t>(sig[w + 1]) << (32 - b);
    if (b && w + 2 < N) v |= static_cast<uint64_t>(sig[w + 2]) << (64 - b);
    return v & mask;
}

struct Stream {
    uint64_t index = 0;
    uint64_t max_cycles = 0;
    std::vector<uint64_t> payloads;
    std::vector<uint32_t> gaps;  // empty: no gaps
    std::vector<uint8_t> ready;  // empty: always ready
};

struct Result {
    uint64_t cycles = 0;
    std::vector<int64_t> issue;
};

void read_header(Reader& in, uint64_t* streams) {
    uint8_t head[STREAM_HEADER_SIZE];
    in.read(head, sizeof head, "file header");
    if (std::memcmp(head + STREAM_HEADER_MAGIC, STREAM_MAGIC, MAGIC_SIZE) != 0)
        fail(EXIT_BAD_INPUT,
             in.path() + ": file header: wrong magic; not a scheduler-harness stream file");
    uint64_t version = le(head + STREAM_HEADER_VERSION, STREAM_HEADER_VERSION_BYTES);
    if (version != FORMAT_VERSION)
        fail(EXIT_BAD_INPUT, in.path() + ": file header: version " + str(version) +
                                 " (this harness reads version " + str(FORMAT_VERSION) + ")");
    uint64_t bits = le(head + STREAM_HEADER_PAYLOAD_BITS, STREAM_HEADER_PAYLOAD_BITS_BYTES);
    if (bits != PAYLOAD_BITS)
        fail(EXIT_BAD_INPUT, in.path() + ": file header: payload_bits = " + str(bits) +
                                 ", but this harness was built for " + str(PAYLOAD_BITS) +
                                 "-bit commands (another configuration)");
    *streams = le(head + STREAM_HEADER_STREAMS, STREAM_HEADER_STREAMS_BYTES);
}

void read_stream(Reader& in, uint64_t index, Stream& s) {
    const std::string rec = "stream " + str(index);
    uint8_t head[RECORD_HEADER_SIZE];
    in.read(head, sizeof head, rec + " header");
    const uint64_t n = le(head + RECORD_HEADER_COMMANDS, RECORD_HEADER_COMMANDS_BYTES);
    const uint64_t has_gaps = le(head + RECORD_HEADER_HAS_GAPS, RECORD_HEADER_HAS_GAPS_BYTES);
    const uint64_t ready_len = le(head + RECORD_HEADER_READY_LEN, RECORD_HEADER_READY_LEN_BYTES);
    s.index = index;
    s.max_cycles = le(head + RECORD_HEADER_MAX_CYCLES, RECORD_HEADER_MAX_CYCLES_BYTES);
    if (n > MAX_COMMANDS)
        fail(EXIT_BAD_INPUT, in.path() + ": " + rec + ": commands = " + str(n) +
                                 " exceeds the sequence-number range (" + str(MAX_COMMANDS) +
                                 ")");
    if (has_gaps > 1)
        fail(EXIT_BAD_INPUT,
             in.path() + ": " + rec + ": has_gaps = " + str(has_gaps) + " must be 0 or 1");
    std::vector<uint8_t> buf(n * PAYLOAD_BYTES);
    in.read(buf.data(), buf.size(), rec + " payloads");
    s.payloads.resize(n);
    for (uint64_t k = 0; k < n; ++k) {
        const uint64_t p = le(buf.data() + k * PAYLOAD_BYTES, PAYLOAD_BYTES);
        if (PAYLOAD_BITS < 64 && (p >> PAYLOAD_BITS))
            fail(EXIT_BAD_INPUT, in.path() + ": " + rec + ", command " + str(k) +
                                     ": payload has bits set above the " + str(PAYLOAD_BITS) +
                                     "-bit command layout");
        s.payloads[k] = p;
    }
    const uint64_t n_gaps = has_gaps ? n : 0;
    buf.resize(n_gaps * GAP_BYTES);
    in.read(buf.data(), buf.size(), rec + " valid gaps");
    s.gaps.resize(n_gaps);
    for (uint64_t k = 0; k < n_gaps; ++k)
        s.gaps[k] = static_cast<uint32_t>(le(buf.data() + k * GAP_BYTES, GAP_BYTES));
    buf.resize(ready_len * READY_BYTES);
    in.read(buf.data(), buf.size(), rec + " ready pattern");
    s.ready.resize(ready_len);
    for (uint64_t c = 0; c < ready_len; ++c) {
        const uint64_t r = le(buf.data() + c * READY_BYTES, READY_BYTES);
        if (r > 1)
            fail(EXIT_BAD_INPUT, in.path() + ": " + rec + ", ready pattern cycle " + str(c) +
                                     ": " + str(r) + " must be 0 or 1");
        s.ready[c] = static_cast<uint8_t>(r);
    }
}

inline void tick(Vtop* top) {
    top->CLK = 0;
    top->eval();
    top->CLK = 1;
    top->eval();
}

// Reset as sim/verify/tb_common.reset: valid and ready low, rst held for two rising edges.
// Cycle 0 is the first cycle after.
void reset(Vtop* top) {
    top->IN_VALID = 0;
    top->OUT_READY = 0;
    top->RST = 1;
    tick(top);
    tick(top);
    top->RST = 0;
}

// One stream, cycle for cycle as sim/verify/tb_scheduler._run_stream with GappedSource.
Result run(Vtop* top, const Stream& s) {
    const uint64_t n = s.payloads.size();
    Result r;
    r.issue.assign(n, -1);
    reset(top);
    uint64_t k = 0;  // next command to offer
    uint64_t gap_left = n ? (s.gaps.empty() ? 0 : s.gaps[0]) : 0;
    uint64_t got = 0, cycle = 0;
    const uint64_t ready_len = s.ready.size();
    while (got < n) {
        const bool offering = k < n && gap_left == 0;
        top->IN_VALID = offering;
        if (offering) put(top->IN_PAYLOAD, s.payloads[k]);
        const bool out_ready = ready_len == 0 || s.ready[cycle % ready_len];
        top->OUT_READY = out_ready;
        top->CLK = 0;
        top->eval();
        if (offering && top->IN_READY) {
            ++k;
            gap_left = (k < n && !s.gaps.empty()) ? s.gaps[k] : 0;
        } else if (!offering && k < n) {
            --gap_left;
        }
        if (out_ready && top->OUT_VALID) {
            const uint64_t seq = take(top->OUT_PAYLOAD, SEQ_OFFSET, SEQ_MASK);
            if (seq >= n || r.issue[seq] >= 0)
                fail(EXIT_SIM_FAILED, "stream " + str(s.index) +
                                          ": bad or repeated sequence number " + str(seq));
            r.issue[seq] = static_cast<int64_t>(take(top->OUT_PAYLOAD, CYCLE_OFFSET, CYCLE_MASK));
            ++got;
        }
        top->CLK = 1;
        top->eval();
        ++cycle;
        if (cycle > s.max_cycles)
            fail(EXIT_SIM_FAILED, "stream " + str(s.index) + ": only " + str(got) + " of " +
                                      str(n) + " commands issued after " + str(s.max_cycles) +
                                      " cycles");
    }
    top->IN_VALID = 0;
    r.cycles = cycle;
    return r;
}

void write_results(const char* path, const std::vector<Result>& results, double seconds) {
    const std::string tmp = std::string(path) + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) fail(EXIT_WRITE_FAILED, tmp + ": cannot write (" + std::strerror(errno) + ")");
    bool ok = true;
    uint8_t head[RESULT_HEADER_SIZE] = {};
    std::memcpy(head + RESULT_HEADER_MAGIC, RESULT_MAGIC, MAGIC_SIZE);
    put_le(head + RESULT_HEADER_VERSION, FORMAT_VERSION, RESULT_HEADER_VERSION_BYTES);
    put_le(head + RESULT_HEADER_STREAMS, results.size(), RESULT_HEADER_STREAMS_BYTES);
    static_assert(sizeof(double) == RESULT_HEADER_SECONDS_BYTES, "seconds is an IEEE double");
    uint64_t bits;
    std::memcpy(&bits, &seconds, sizeof bits);
    put_le(head + RESULT_HEADER_SECONDS, bits, RESULT_HEADER_SECONDS_BYTES);
    ok = ok && std::fwrite(head, 1, sizeof head, f) == sizeof head;
    std::vector<uint8_t> buf;
    for (const Result& r : results) {
        uint8_t rec[RESULT_RECORD_SIZE] = {};
        put_le(rec + RESULT_RECORD_COMMANDS, r.issue.size(), RESULT_RECORD_COMMANDS_BYTES);
        put_le(rec + RESULT_RECORD_CYCLES, r.cycles, RESULT_RECORD_CYCLES_BYTES);
        ok = ok && std::fwrite(rec, 1, sizeof rec, f) == sizeof rec;
        buf.resize(r.issue.size() * ISSUE_BYTES);
        for (size_t k = 0; k < r.issue.size(); ++k)
            put_le(buf.data() + ISSUE_BYTES * k, static_cast<uint64_t>(r.issue[k]), ISSUE_BYTES);
        ok = ok && std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
    }
    ok = (std::fclose(f) == 0) && ok;
    if (!ok || std::rename(tmp.c_str(), path) != 0) {
        std::remove(tmp.c_str());
        fail(EXIT_WRITE_FAILED, std::string(path) + ": cannot write (" + std::strerror(errno) + ")");
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) fail(EXIT_BAD_INPUT, "usage: scheduler_tb STREAMS_FILE RESULTS_FILE");
    auto context = std::make_unique<VerilatedContext>();
    auto top = std::make_unique<Vtop>(context.get());
    Reader in(argv[1]);
    uint64_t n_streams = 0;
    read_header(in, &n_streams);
    std::vector<Result> results;
    results.reserve(n_streams < 1000000 ? n_streams : 1000000);
    double seconds = 0;
    Stream s;
    for (uint64_t i = 0; i < n_streams; ++i) {
        read_stream(in, i, s);
        const std::clock_t t0 = std::clock();  // CPU time: other processes' share not counted
        results.push_back(run(top.get(), s));
        seconds += static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC;
    }
    if (!in.at_end())
        fail(EXIT_BAD_INPUT, in.path() + ": bytes after the last of " + str(n_streams) +
                                 " streams (offset " + str(in.offset()) + ")");
    top->final();
    write_results(argv[2], results, seconds);
    return 0;
}
