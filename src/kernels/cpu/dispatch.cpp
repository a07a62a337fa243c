// The dispatched CPU kernels (kernels::*): run-time ISA selection and the op-level control flow
// around the per-ISA inner loops of isa_table.h.
//
// Selection: once, on first use, from __builtin_cpu_supports (AVX-512 F/BW/VL/DQ, else AVX2+FMA+
// F16C, else portable); testing::force_isa overrides it. Threading: matvec/matmul split rows into
// contiguous blocks over the pool; attention splits (query row, head) pairs; Gated DeltaNet splits
// value heads; conv1d splits channels. Memory: all scratch is thread_local and only grows, so the
// steady state (decode) allocates nothing. The quantized matvec prepares x (lane order + per-group
// sums) once on the calling thread; workers then only stream weights.
// Rejected alternative: ifunc/target_clones multiversioning — it cannot be overridden from tests,
// and it would multiversion whole ops instead of the few inner loops that matter.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "core/assert.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/ggml_int8_isa.h"
#include "kernels/cpu/isa_table.h"
#include "kernels/ggml_quants.h"
#include "kernels/ggml_tiles.h"
#include "kernels/kernels.h"
#include "kernels/weight_format.h"

namespace sluice::kernels {
namespace {

using cpu::IsaTable;
using cpu::RingHead;

#if defined(__x86_64__)
// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}
#endif

const IsaTable* detect_best() {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return &cpu::kAvx512Table;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c())
        return &cpu::kAvx2Table;
#endif
    return &cpu::kPortableTable;
}

std::vector<const IsaTable*> supported_tables() {
    std::vector<const IsaTable*> out = {&cpu::kPortableTable};
#if defined(__x86_64__)
    const IsaTable* best = detect_best();
    if (best == &cpu::kAvx2Table || best == &cpu::kAvx512Table) out.push_back(&cpu::kAvx2Table);
    if (best == &cpu::kAvx512Table) out.push_back(&cpu::kAvx512Table);
#endif
    return out;
}

std::atomic<const IsaTable*> g_forced{nullptr};

const IsaTable& isa() {
    static const IsaTable* const best = detect_best();
    const IsaTable* forced = g_forced.load(std::memory_order_relaxed);
    return forced ? *forced : *best;
}

#if defined(__x86_64__)
bool cpu_has_avx512_vnni() {
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512vnni") != 0;
    }();
    return has;
}
#endif

// The table whose int8-activation loops run: the current ISA's, except that AVX-512 without VNNI
// (Skylake-SP) takes AVX2's vpmaddubsw loops.
const IsaTable& int8_isa() {
    const IsaTable& t = isa();
#if defined(__x86_64__)
    if (&t == &cpu::kAvx512Table && !cpu_has_avx512_vnni()) return cpu::kAvx2Table;
#endif
    return t;
}

// An out-of-place DeltaNet step copies value head j's state [dk, dv] next to its own processing
// (the head's 64 KB is then in cache when the in-place kernel reads it, so going out of place costs
// no extra memory traffic) and runs the in-place kernel on the copy.
void copy_head_state(const float* in, float* out, int64_t j, int64_t floats) {
    if (in != out) std::memcpy(out + j * floats, in + j * floats, sizeof(float) * floats);
}

// Grows a thread_local buffer; returns its data. Never shrinks, so decode reuses it.
float* scratch(std::vector<float>& buf, int64_t floats) {
    if (static_cast<int64_t>(buf.size()) < floats) buf.resize(static_cast<size_t>(floats));
    return buf.data();
}

// Runs fn over [0, n) on the pool. The std::function handed to the pool wraps only a pointer to
// fn, so it fits std::function's inline storage: no heap allocation per call (a lambda capturing
// several references would not fit and would allocate on every decode-time kernel call).
template <typename F>
void run(ThreadPool* pool, int64_t n, int64_t grain, const F& fn) {
    if (pool == nullptr || pool->size() <= 1) {
        if (n > 0) fn(0, n);
        return;
    }
    const F* f = &fn;
    pool->parallel_for(
        n, [f](int64_t begin, int64_t end) { (*f)(begin, end); }, grain);
}

bool power_of_two(int64_t v) {
    return v > 0 && (v & (v - 1)) == 0;
}

// The AVX paths need group sizes that are powers of two >= 32 (MLX uses 32/64/128).
const IsaTable& linear_isa(const WeightView& w) {
    if (w.quantized() && !(power_of_two(w.group_size) && w.group_size >= 32)) return cpu::kPortableTable;
    return isa();
}

void check_view(const WeightView& w) {
    SLUICE_ASSERT(w.data != nullptr && w.rows >= 0);
    const WeightFormat& f = weight_format(w.type);
    SLUICE_ASSERT(f.cpu_kernels && f.shape_error(w.cols, w.group_size) == nullptr);
    if (f.quantized()) SLUICE_ASSERT(w.scales != nullptr && w.biases != nullptr);
    if (f.row_tiles()) SLUICE_ASSERT(w.rows % f.tile_rows == 0);
}

// Rows per task: enough work to amortise the dispatch, contiguous for the hardware prefetcher; whole
// row tiles (matvec_jobs' blocks of rows are never split).
constexpr int64_t kMatvecGrainRows = 16;
static_assert(kMatvecGrainRows % kQ4_0TileRows == 0);
// matmul: rows dequantized per tile, and tokens per block (the activations of one block stay in L2
// while every row tile of the thread's range passes over them).
constexpr int64_t kTileRows = 4;
constexpr int64_t kTokenBlock = 48;  // a multiple of the AVX-512 micro-kernel's 6 tokens

// The int8-activation products (kernels.h, Activations::kInt8): every vector quantised once, on the
// calling thread; then the row kernel over rows × vectors (matvec, matvec_batch: a row's result depends
// only on the row and its vector) or, for a matmul of 2+ tokens where the ISA has one, the GEMM with
// tokens in its lanes (a token's result depends only on itself, never on n or its neighbours, so a
// prefill chunk gets the same bits alone and batched). Without a GEMM, `blocked` (matmul of more than
// kRowVectors tokens) takes rows in blocks of kInt8BlockRows that stay in L2 while the vectors pass over
// them kRowVectors at a time; otherwise (decode vectors) each thread streams its whole range once per
// kRowVectors vectors.
constexpr int64_t kInt8BlockRows = 64;
// The prefill GEMM's rows per task: unpacked once (16 KB at 2048 inputs), then every token passes.
constexpr int64_t kInt8GemmRows = 16;

// Rows [r0, r1) of W times n vectors through one of t's row kernels (matvec_quant_rows,
// matvec_float_rows or i8_matvec_rows), kRowVectors vectors per call: vector v's input at
// x + v·x_stride_bytes (its sums at sums + v·sums_stride), its result y + v·ldy. Each weight chunk is
// loaded once per call for all its vectors, and each (row, vector) gets the bits of that vector alone.
using RowKernel = void (*)(const WeightView&, const cpu::RowVectors&, int64_t, int64_t);

void rows_times_vectors(RowKernel kernel, const WeightView& w, const void* x, int64_t x_stride_bytes,
                        const float* sums, int64_t sums_stride, int64_t n, int64_t r0, int64_t r1, float* y,
                        int64_t ldy) {
    for (int64_t v = 0; v < n; v += cpu::kRowVectors) {
        const cpu::RowVectors vecs{static_cast<const uint8_t*>(x) + v * x_stride_bytes,
                                   x_stride_bytes,
                                   sums + v * sums_stride,
                                   sums_stride,
                                   std::min(cpu::kRowVectors, n - v),
                                   y + v * ldy,
                                   ldy};
        kernel(w, vecs, r0, r1);
    }
}

// A ggml block format's int8-activation products (ggml_int8_isa.h): every vector prepared once on the
// calling thread, then the type's row kernel over rows × vectors — for matvec, matvec_batch and matmul
// alike (no GEMM: a token's result is its matvec's bits, whatever n), matmul's rows in blocks of
// kInt8BlockRows that stay in L2 while the tokens pass over them.
void linear_int8_ggml(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool,
                      bool blocked) {
    const cpu::GgmlI8Kernels k = cpu::ggml_i8_kernels(w.type, int8_isa().i8_name);
    const int64_t rows = w.rows, cols = w.cols, bytes = cpu::ggml_i8_prepared_bytes(cols);
    thread_local std::vector<uint8_t> prep_buf;
    if (static_cast<int64_t>(prep_buf.size()) < n * bytes) prep_buf.resize(static_cast<size_t>(n * bytes));
    uint8_t* prep = prep_buf.data();
    for (int64_t v = 0; v < n; ++v) k.prepare(x + v * cols, cols, prep + v * bytes);
    if (!blocked || n <= cpu::kRowVectors) {
        // Split in whole tiles (1 row where rows are not tiled).
        const int64_t unit = std::max(1, weight_format(w.type).tile_rows);
        run(pool, rows / unit, kMatvecGrainRows / unit, [&](int64_t u0, int64_t u1) {
            const int64_t r0 = u0 * unit, r1 = u1 * unit;
            rows_times_vectors(k.rows, w, prep, bytes, nullptr, 0, n, r0, r1, y + r0, rows);
        });
        return;
    }
    static_assert(kInt8BlockRows % kQ4_0TileRows == 0);
    run(pool, (rows + kInt8BlockRows - 1) / kInt8BlockRows, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t r0 = b * kInt8BlockRows, r1 = std::min(rows, r0 + kInt8BlockRows);
            rows_times_vectors(k.rows, w, prep, bytes, nullptr, 0, n, r0, r1, y + r0, rows);
        }
    });
}

void linear_int8(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool, bool blocked) {
    if (w.ggml_blocks()) {
        linear_int8_ggml(w, x, n, y, pool, blocked);
        return;
    }
    const IsaTable& t = int8_isa();
    const int64_t rows = w.rows, cols = w.cols, groups = cols / w.group_size;
    thread_local std::vector<uint8_t> prep_buf;
    if (blocked && n >= 2 && t.i8_gemm_rows != nullptr) {
        const int64_t gbytes = t.i8_gemm_prepared_bytes(w, n);
        if (static_cast<int64_t>(prep_buf.size()) < gbytes) prep_buf.resize(static_cast<size_t>(gbytes));
        uint8_t* gprep = prep_buf.data();
        t.i8_gemm_prepare(w, x, n, gprep);
        run(pool, (rows + kInt8GemmRows - 1) / kInt8GemmRows, 1, [&](int64_t b0, int64_t b1) {
            thread_local std::vector<uint8_t> unpacked;
            const int64_t need = t.i8_gemm_scratch_bytes(w, kInt8GemmRows);
            if (static_cast<int64_t>(unpacked.size()) < need) unpacked.resize(static_cast<size_t>(need));
            for (int64_t b = b0; b < b1; ++b) {
                const int64_t r0 = b * kInt8GemmRows, r1 = std::min(rows, r0 + kInt8GemmRows);
                t.i8_gemm_rows(w, gprep, n, r0, r1, y, rows, unpacked.data());
            }
        });
        return;
    }
    const int64_t bytes = t.i8_prepared_bytes(w);
    thread_local std::vector<float> xs_buf;
    if (static_cast<int64_t>(prep_buf.size()) < n * bytes) prep_buf.resize(static_cast<size_t>(n * bytes));
    uint8_t* prep = prep_buf.data();
    float* xs = scratch(xs_buf, n * groups);
    for (int64_t v = 0; v < n; ++v) t.i8_prepare(w, x + v * cols, prep + v * bytes, xs + v * groups);
    if (!blocked || n <= cpu::kRowVectors) {
        run(pool, rows, kMatvecGrainRows, [&](int64_t r0, int64_t r1) {
            rows_times_vectors(t.i8_matvec_rows, w, prep, bytes, xs, groups, n, r0, r1, y + r0, rows);
        });
        return;
    }
    run(pool, (rows + kInt8BlockRows - 1) / kInt8BlockRows, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            const int64_t r0 = b * kInt8BlockRows, r1 = std::min(rows, r0 + kInt8BlockRows);
            rows_times_vectors(t.i8_matvec_rows, w, prep, bytes, xs, groups, n, r0, r1, y + r0, rows);
        }
    });
}

// A ggml block format's rows [r0, r1) times n vectors (x + v·cols → y + v·ldy): each (row, vector) one
// ggml_vec_dot of this ISA, so a result depends only on its row and its vector (matvec_batch's and
// matvec_jobs' contract). The row's blocks stay in L1 while the vectors pass over them.
// Row r of a ggml block view in the natural layout: in place, or (row tiles) put back into a thread_local
// buffer — the f32 products and dequantisation of tiled weights (their int8 products have kernels).
const uint8_t* ggml_natural_row(const WeightView& w, int64_t r) {
    if (!weight_format(w.type).row_tiles())
        return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_bytes();
    thread_local std::vector<uint8_t> buf;
    if (buf.size() < w.row_bytes()) buf.resize(w.row_bytes());
    ggml_untile_row(w, r, buf.data());
    return buf.data();
}

void ggml_rows_times_vectors(const WeightView& w, const float* x, int64_t n, int64_t r0, int64_t r1, float* y,
                             int64_t ldy) {
    const GgmlDotFn dot = ggml_vec_dot_fn(weight_format(w.type).ggml);
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = ggml_natural_row(w, r);
        for (int64_t v = 0; v < n; ++v) y[v * ldy + r] = dot(row, x + v * w.cols, w.cols);
    }
}

// Rows [r0, r1) of a ggml block format dequantized into out[(r − r0)·cols] by the definition.
void ggml_dequant_rows(const WeightView& w, int64_t r0, int64_t r1, float* out) {
    const GgmlType type = weight_format(w.type).ggml;
    for (int64_t r = r0; r < r1; ++r)
        reference::ggml_dequantize_row(type, ggml_natural_row(w, r), w.cols, out + (r - r0) * w.cols);
}

}  // namespace

const char* cpu_kernel_isa() {
    return isa().name;
}

const char* cpu_int8_kernel_isa() {
    return int8_isa().i8_name;
}

void dequantize_row(const WeightView& w, int64_t row, float* out) {
    check_view(w);
    SLUICE_ASSERT(row >= 0 && row < w.rows);
    if (w.ggml_blocks()) {
        ggml_dequant_rows(w, row, row + 1, out);
        return;
    }
    linear_isa(w).dequant_rows(w, row, row + 1, out);
}

void matvec(const WeightView& w, const float* x, float* y, ThreadPool* pool) {
    matvec_batch(w, x, 1, y, pool);
}

// Every vector through the row kernels, up to kRowVectors in each call (matvec is the case of one
// vector): each chunk of a weight row is loaded once for all of them — a decode step of n sequences or
// the k + 1 rows of a speculative verification read the weights once, not n times — and each vector's
// arithmetic is the one it gets alone (the row kernels compute a (row, vector) the same way whatever
// vectors and range it comes with), so the results are matvec's bit for bit.
void matvec_batch(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
    check_view(w);
    if (w.int8_activations()) {
        linear_int8(w, x, n, y, pool, false);
        return;
    }
    if (w.ggml_blocks()) {
        run(pool, w.rows, kMatvecGrainRows,
            [&](int64_t r0, int64_t r1) { ggml_rows_times_vectors(w, x, n, r0, r1, y, w.rows); });
        return;
    }
    const IsaTable& t = linear_isa(w);
    const int64_t rows = w.rows, cols = w.cols;
    if (!w.quantized()) {
        run(pool, rows, kMatvecGrainRows, [&](int64_t r0, int64_t r1) {
            rows_times_vectors(t.matvec_float_rows, w, x, cols * static_cast<int64_t>(sizeof(float)), nullptr,
                               0, n, r0, r1, y + r0, rows);
        });
        return;
    }
    thread_local std::vector<float> xp_buf, xsum_buf;
    const int64_t xp_floats = t.prepared_x_floats(w), groups = cols / w.group_size;
    float* xp = scratch(xp_buf, n * xp_floats);
    float* xsum = scratch(xsum_buf, n * groups);
    for (int64_t v = 0; v < n; ++v) t.prepare_x(w, x + v * cols, xp + v * xp_floats, xsum + v * groups);
    run(pool, rows, kMatvecGrainRows, [&](int64_t r0, int64_t r1) {
        rows_times_vectors(t.matvec_quant_rows, w, xp, xp_floats * static_cast<int64_t>(sizeof(float)), xsum,
                           groups, n, r0, r1, y + r0, rows);
    });
}

// The jobs' rows as one space of blocks of kMatvecGrainRows (every block inside one job), split over
// the pool in contiguous ranges; each job's vectors prepared once on the calling thread — and once for
// several jobs whose weights take the same preparation of the same x (gate and up of one expert; q, k
// and v) — then the same row kernels as matvec_batch, so every job gets matvec_batch's bits.
void matvec_jobs(const MatvecJob* jobs, int64_t count, ThreadPool* pool) {
    enum class Path : uint8_t { kFloat, kQuant, kInt8, kGgml, kGgmlInt8 };
    struct Prepared {
        Path path;
        const IsaTable* t;
        cpu::GgmlI8Kernels g;  // kGgmlInt8: the type's kernels
        int64_t stride;        // bytes of one prepared vector (0: float weights read x as it is)
        int64_t groups;        // sums per vector
        size_t at, sum_at;     // where the job's first prepared vector and its sums are
        bool owner;            // prepares them (false: an earlier job of the same x did)
    };
    thread_local std::vector<Prepared> prepared;
    thread_local std::vector<int64_t> first_block;
    thread_local std::vector<uint8_t> buf;
    thread_local std::vector<float> sums;
    prepared.resize(static_cast<size_t>(count));
    first_block.resize(static_cast<size_t>(count) + 1);
    size_t bytes = 0, floats = 0;
    first_block[0] = 0;
    for (int64_t j = 0; j < count; ++j) {
        const WeightView& w = *jobs[j].w;
        check_view(w);
        Prepared& p = prepared[static_cast<size_t>(j)];
        p.groups = w.quantized() ? w.cols / w.group_size : 0;
        p.g = {};
        if (w.int8_activations() && w.ggml_blocks()) {
            p.path = Path::kGgmlInt8;
            p.t = &int8_isa();
            p.g = cpu::ggml_i8_kernels(w.type, p.t->i8_name);
            p.stride = cpu::ggml_i8_prepared_bytes(w.cols);
        } else if (w.int8_activations()) {
            p.path = Path::kInt8;
            p.t = &int8_isa();
            p.stride = (p.t->i8_prepared_bytes(w) + 63) / 64 * 64;
        } else if (w.quantized()) {
            p.path = Path::kQuant;
            p.t = &linear_isa(w);
            p.stride = (p.t->prepared_x_floats(w) * static_cast<int64_t>(sizeof(float)) + 63) / 64 * 64;
        } else {
            // Float and ggml block weights read x as it is.
            p.path = w.ggml_blocks() ? Path::kGgml : Path::kFloat;
            p.t = &linear_isa(w);
            p.stride = 0;
            p.groups = 0;
        }
        p.owner = true;
        for (int64_t i = 0; i < j && p.path != Path::kFloat && p.path != Path::kGgml; ++i) {
            const Prepared& q = prepared[static_cast<size_t>(i)];
            const WeightView& v = *jobs[i].w;
            // ggml's prepared x is the same for every block type (a Q4_K gate and a Q6_K down share it).
            const bool same_preparation = p.path == Path::kGgmlInt8
                                              ? q.g.prepare == p.g.prepare
                                              : v.type == w.type && v.group_size == w.group_size;
            if (q.owner && jobs[i].x == jobs[j].x && jobs[i].n == jobs[j].n && q.path == p.path &&
                q.t == p.t && v.cols == w.cols && same_preparation) {
                p.at = q.at;
                p.sum_at = q.sum_at;
                p.owner = false;
                break;
            }
        }
        if (p.owner) {
            p.at = bytes;
            p.sum_at = floats;
            bytes += static_cast<size_t>(jobs[j].n * p.stride);
            floats += static_cast<size_t>(jobs[j].n * p.groups);
        }
        first_block[static_cast<size_t>(j) + 1] =
            first_block[static_cast<size_t>(j)] + (w.rows + kMatvecGrainRows - 1) / kMatvecGrainRows;
    }
    if (buf.size() < bytes + 64) buf.resize(bytes + 64);
    if (sums.size() < floats) sums.resize(floats);
    uint8_t* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
    for (int64_t j = 0; j < count; ++j) {
        const MatvecJob& job = jobs[j];
        const Prepared& p = prepared[static_cast<size_t>(j)];
        if (!p.owner || p.path == Path::kFloat || p.path == Path::kGgml) continue;
        for (int64_t v = 0; v < job.n; ++v) {
            const float* xv = job.x + v * job.w->cols;
            uint8_t* dst = base + p.at + static_cast<size_t>(v * p.stride);
            float* xs = sums.data() + p.sum_at + static_cast<size_t>(v * p.groups);
            if (p.path == Path::kGgmlInt8) {
                p.g.prepare(xv, job.w->cols, dst);
            } else if (p.path == Path::kInt8) {
                p.t->i8_prepare(*job.w, xv, dst, xs);
            } else {
                p.t->prepare_x(*job.w, xv, reinterpret_cast<float*>(dst), xs);
            }
        }
    }
    // The workers see their own thread_locals: hand them the caller's.
    const Prepared* prep = prepared.data();
    const int64_t* first = first_block.data();
    const float* all_sums = sums.data();
    run(pool, first[count], 1, [&](int64_t b0, int64_t b1) {
        int64_t j = 0;
        for (int64_t b = b0; b < b1;) {
            while (first[j + 1] <= b) ++j;
            const MatvecJob& job = jobs[j];
            const WeightView& w = *job.w;
            const Prepared& p = prep[j];
            const int64_t end = std::min(b1, first[j + 1]);
            const int64_t r0 = (b - first[j]) * kMatvecGrainRows;
            const int64_t r1 = std::min(w.rows, (end - first[j]) * kMatvecGrainRows);
            if (p.path == Path::kGgml) {
                ggml_rows_times_vectors(w, job.x, job.n, r0, r1, job.y, w.rows);
            } else if (p.path == Path::kGgmlInt8) {
                rows_times_vectors(p.g.rows, w, base + p.at, p.stride, nullptr, 0, job.n, r0, r1, job.y + r0,
                                   w.rows);
            } else if (p.path == Path::kFloat) {
                rows_times_vectors(p.t->matvec_float_rows, w, job.x,
                                   w.cols * static_cast<int64_t>(sizeof(float)), nullptr, 0, job.n, r0, r1,
                                   job.y + r0, w.rows);
            } else {
                rows_times_vectors(p.path == Path::kInt8 ? p.t->i8_matvec_rows : p.t->matvec_quant_rows, w,
                                   base + p.at, p.stride, all_sums + p.sum_at, p.groups, job.n, r0, r1,
                                   job.y + r0, w.rows);
            }
            b = end;
        }
    });
}

void matmul(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
    check_view(w);
    if (w.int8_activations()) {
        linear_int8(w, x, n, y, pool, true);
        return;
    }
    if (n == 1) {
        matvec(w, x, y, pool);
        return;
    }
    const IsaTable& t = linear_isa(w);
    const int64_t cols = w.cols, rows = w.rows;
    run(pool, (rows + kTileRows - 1) / kTileRows, 1, [&](int64_t b0, int64_t b1) {
        thread_local std::vector<float> tile_buf;
        const int64_t r_begin = b0 * kTileRows, r_end = std::min(rows, b1 * kTileRows);
        // f32 weights are used in place only when 4-byte aligned (safetensors offsets need not be);
        // otherwise they are copied through the tile like every other type.
        const bool direct =
            w.type == WeightType::kF32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0;
        float* tile = direct ? nullptr : scratch(tile_buf, kTileRows * cols);
        for (int64_t t0 = 0; t0 < n; t0 += kTokenBlock) {
            const int64_t nt = std::min(kTokenBlock, n - t0);
            for (int64_t r = r_begin; r < r_end; r += kTileRows) {
                const int64_t nr = std::min(kTileRows, r_end - r);
                const float* wt;
                if (tile == nullptr) {
                    wt = static_cast<const float*>(w.data) + r * cols;
                } else {
                    if (w.ggml_blocks()) {
                        ggml_dequant_rows(w, r, r + nr, tile);
                    } else {
                        t.dequant_rows(w, r, r + nr, tile);
                    }
                    wt = tile;
                }
                t.gemm_tile(wt, nr, cols, x + t0 * cols, nt, cols, y + t0 * rows + r, rows);
            }
        }
    });
}

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y) {
    isa().rms_norm(x, weight, n, eps, y);
}

void rms_norm_gated(const float* x, const float* z, const float* weight, int64_t n, float eps, float* y) {
    isa().rms_norm_gated(x, z, weight, n, eps, y);
}

void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t position, float theta) {
    SLUICE_ASSERT(rot_dim % 2 == 0 && rot_dim <= head_dim);
    isa().rope_neox(x, n_heads, head_dim, rot_dim, position, theta);
}

// A few hundred elements per token and layer, only for scaled RoPE: the reference definition.
void rope_neox_table(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t position,
                     const float* inv_freq, float mscale) {
    reference::rope_neox_table(x, n_heads, head_dim, rot_dim, position, inv_freq, mscale);
}

namespace {

// Attention over a cache of `type` (f32 included), with its f16 ring when there is one. A query's
// keys are taken in chunks of kAttentionChunk, each chunk's softmax terms (max, sum, weighted
// values) merged into the running ones in chunk order — the online softmax, so no score row longer
// than a chunk exists and a long decode splits over the pool. Work items are (query row, KV head)
// — the GQA group of query heads sharing a KV head reads each key and value once; when those are
// too few for the pool (a decode) each chunk is an item of its own and the merge runs after, and
// a short query with too few groups takes (query row, head) items instead. Every path computes the same chunk
// terms and merges them in the same order, so a head's result depends on its position and the cache only: not
// on the pool, the batching, or the path taken, bit for bit.
// A sliding window (AttentionExtras) moves where a query's keys begin: its chunks start at its first
// key lo, chunk c covering [lo + c·kAttentionChunk, …) up to its own position, so a window of W keys is
// ceil(W / kAttentionChunk) chunks and keys before it are never read; no chunk is empty. Rejected:
// chunks on the absolute grid (c·kAttentionChunk) with the first cut at lo — one more chunk and merge
// whenever the window straddles a boundary, and gpt-oss's 128-key windows would straddle one in 1 decode
// step of 8. The sinks join the denominator once, when a head's terms are finished.
constexpr int64_t kAttentionChunk = 1024;

struct ChunkTerms {  // one chunk's (or the running) softmax terms of `heads` query heads
    float* acc;      // [heads, head_dim]
    float* m;        // [heads]
    float* l;        // [heads]
};

// running ← running ⊕ chunk: both rescaled to their common maximum.
void merge_terms(ChunkTerms run, ChunkTerms chunk, int64_t heads, int64_t head_dim) {
    for (int64_t r = 0; r < heads; ++r) {
        float* a = run.acc + r * head_dim;
        const float* c = chunk.acc + r * head_dim;
        const float mx = std::max(run.m[r], chunk.m[r]);
        const float alpha = std::exp(run.m[r] - mx), beta = std::exp(chunk.m[r] - mx);
        for (int64_t d = 0; d < head_dim; ++d) a[d] = a[d] * alpha + c[d] * beta;
        run.l[r] = run.l[r] * alpha + chunk.l[r] * beta;
        run.m[r] = mx;
    }
}

// out = acc / l, per head; with sinks [heads] (null: none) the head's sink logit also counts in l:
// both terms rescaled to M = max(m, sink), l gains exp(sink − M), and the sink brings no value.
void finish_terms(ChunkTerms run, int64_t heads, int64_t head_dim, const float* sinks, float* out) {
    for (int64_t r = 0; r < heads; ++r) {
        float inv = 1.0f / run.l[r];
        if (sinks != nullptr) {
            const float mx = std::max(run.m[r], sinks[r]);
            const float alpha = std::exp(run.m[r] - mx);
            inv = alpha / (run.l[r] * alpha + std::exp(sinks[r] - mx));
        }
        for (int64_t d = 0; d < head_dim; ++d) out[r * head_dim + d] = run.acc[r * head_dim + d] * inv;
    }
}

void attention_cache(KvType type, const float* q, const uint8_t* k, const uint8_t* v, const KvRing* ring,
                     int64_t n_q, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                     float scale, float* out, ThreadPool* pool, const AttentionExtras& extras) {
    const IsaTable& t = isa();
    const int64_t rep = n_heads / n_kv_heads;
    const int64_t head_bytes = kv_head_bytes(type, head_dim);
    const int64_t row_bytes = n_kv_heads * head_bytes;
    const int64_t ring_head_bytes = kv_head_bytes(KvType::kF16, head_dim);
    const bool has_ring = ring != nullptr && ring->window > 0;
    auto ring_head = [&](int64_t kvh) {
        return RingHead{static_cast<const uint8_t*>(ring->k) + kvh * ring_head_bytes,
                        static_cast<const uint8_t*>(ring->v) + kvh * ring_head_bytes,
                        ring->tags,
                        ring->slots,
                        ring->window,
                        n_kv_heads * ring_head_bytes};
    };
    const int64_t threads = pool != nullptr ? pool->size() : 1;
    // Query row `row` (position start_pos + row) attends to keys first_key(row)..start_pos + row, in
    // chunks_of(row) chunks; the last row has the most.
    const int64_t window = extras.window;
    auto first_key = [&](int64_t row) {
        return window > 0 ? std::max<int64_t>(0, start_pos + row - window + 1) : int64_t{0};
    };
    auto chunks_of = [&](int64_t row) {
        return (start_pos + row + 1 - first_key(row) + kAttentionChunk - 1) / kAttentionChunk;
    };
    const int64_t max_chunks = chunks_of(n_q - 1);
    // Grouped unless that leaves the pool idle and there are no chunks to spread instead.
    const bool grouped = rep > 1 && rep <= 64 && (n_q * n_kv_heads >= threads || max_chunks > 1);
    const int64_t hpi = grouped ? rep : 1;  // query heads per work item
    const int64_t groups = grouped ? n_kv_heads : n_heads;
    const int64_t terms_floats = hpi * (head_dim + 2);
    // The chunk terms of (row, group) over chunk c, into `terms` (scratch: the thread's).
    // queries_rotated: this thread's previous call was the same query's previous chunk.
    auto chunk_terms = [&](int64_t row, int64_t group, int64_t c, ChunkTerms terms, bool queries_rotated) {
        thread_local std::vector<float> scores_buf, tmp_buf;
        float* scores = scratch(scores_buf, hpi * kAttentionChunk);
        float* tmp = scratch(tmp_buf, (2 * hpi + 1) * head_dim);
        const int64_t h0 = grouped ? group * rep : group;
        const int64_t kvh = h0 / rep;
        const int64_t n_keys = start_pos + row + 1;
        const RingHead rh = has_ring ? ring_head(kvh) : RingHead{};
        const int64_t s0 = first_key(row) + c * kAttentionChunk, s1 = std::min(n_keys, s0 + kAttentionChunk);
        t.attention_group_kv(type, q + (row * n_heads + h0) * head_dim, hpi, k + kvh * head_bytes,
                             v + kvh * head_bytes, has_ring ? &rh : nullptr, n_keys, s0, s1, row_bytes,
                             head_dim, scale, queries_rotated, scores, tmp, terms.acc, terms.m, terms.l);
    };
    auto view = [&](float* base) {
        return ChunkTerms{base, base + hpi * head_dim, base + hpi * head_dim + hpi};
    };
    auto out_of = [&](int64_t row, int64_t group) {
        return out + (row * n_heads + (grouped ? group * rep : group)) * head_dim;
    };
    auto sinks_of = [&](int64_t group) {  // the item's heads' sinks, or null
        return extras.sinks != nullptr ? extras.sinks + (grouped ? group * rep : group) : nullptr;
    };
    if (n_q * groups >= threads || max_chunks == 1) {
        run(pool, n_q * groups, 1, [&](int64_t i0, int64_t i1) {
            thread_local std::vector<float> terms_buf;
            float* buf = scratch(terms_buf, 2 * terms_floats);
            const ChunkTerms running = view(buf), chunk = view(buf + terms_floats);
            for (int64_t i = i0; i < i1; ++i) {
                const int64_t row = i / groups, group = i % groups;
                const int64_t chunks = chunks_of(row);
                for (int64_t c = 0; c < chunks; ++c) {
                    chunk_terms(row, group, c, c == 0 ? running : chunk, c > 0);
                    if (c > 0) merge_terms(running, chunk, hpi, head_dim);
                }
                finish_terms(running, hpi, head_dim, sinks_of(group), out_of(row, group));
            }
        });
        return;
    }
    // Few (row, group) items and long rows (a decode): every chunk an item, merged after.
    thread_local std::vector<float> all_buf;
    float* all = scratch(all_buf, n_q * groups * max_chunks * terms_floats);
    auto terms_at = [&](int64_t row, int64_t group, int64_t c) {
        return view(all + ((row * groups + group) * max_chunks + c) * terms_floats);
    };
    run(pool, n_q * groups * max_chunks, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t c = i % max_chunks, rg = i / max_chunks, row = rg / groups, group = rg % groups;
            if (c < chunks_of(row)) chunk_terms(row, group, c, terms_at(row, group, c), false);
        }
    });
    run(pool, n_q * groups, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const int64_t row = i / groups, group = i % groups;
            const int64_t chunks = chunks_of(row);  // the items past them computed nothing
            const ChunkTerms running = terms_at(row, group, 0);
            for (int64_t c = 1; c < chunks; ++c) merge_terms(running, terms_at(row, group, c), hpi, head_dim);
            finish_terms(running, hpi, head_dim, sinks_of(group), out_of(row, group));
        }
    });
}

}  // namespace

void attention(const float* q, const float* k, const float* v, int64_t n_q, int64_t start_pos,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* out,
               ThreadPool* pool, const AttentionExtras& extras) {
    SLUICE_ASSERT(n_kv_heads > 0 && n_heads % n_kv_heads == 0 && extras.window >= 0);
    attention_cache(KvType::kF32, q, reinterpret_cast<const uint8_t*>(k), reinterpret_cast<const uint8_t*>(v),
                    nullptr, n_q, start_pos, n_heads, n_kv_heads, head_dim, scale, out, pool, extras);
}

// Storing is once per token and layer, a few hundred elements: the reference definition itself.
void kv_store(KvType type, const float* x, int64_t n, int64_t n_kv_heads, int64_t head_dim, void* dst) {
    reference::kv_store(type, x, n, n_kv_heads, head_dim, dst);
}

void kv_load(KvType type, const void* src, int64_t n, int64_t n_kv_heads, int64_t head_dim, float* x) {
    SLUICE_ASSERT(kv_shape_error(type, head_dim) == nullptr);
    const IsaTable& t = isa();
    const int64_t hb = kv_head_bytes(type, head_dim);
    const auto* in = static_cast<const uint8_t*>(src);
    for (int64_t r = 0; r < n * n_kv_heads; ++r)
        t.kv_load_head(type, in + r * hb, head_dim, x + r * head_dim);
}

void attention_kv(KvType type, const float* q, const void* k, const void* v, const KvRing* ring, int64_t n_q,
                  int64_t start_pos, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale,
                  float* out, ThreadPool* pool, const AttentionExtras& extras) {
    SLUICE_ASSERT(n_kv_heads > 0 && n_heads % n_kv_heads == 0 && kv_shape_error(type, head_dim) == nullptr &&
                  extras.window >= 0);
    SLUICE_ASSERT(ring == nullptr || ring->window <= 0 ||
                  (ring->slots >= ring->window && ring->tags != nullptr));
    attention_cache(type, q, static_cast<const uint8_t*>(k), static_cast<const uint8_t*>(v), ring, n_q,
                    start_pos, n_heads, n_kv_heads, head_dim, scale, out, pool, extras);
}

void conv1d_silu(const float* x, int64_t n, int64_t channels, int64_t kernel, const float* weight,
                 const float* state_in, float* state_out, float* y) {
    SLUICE_ASSERT(kernel >= 1);
    if (state_out != state_in) std::memcpy(state_out, state_in, sizeof(float) * (kernel - 1) * channels);
    isa().conv1d_silu_channels(x, n, channels, kernel, weight, state_out, y, 0, channels);
}

void gated_delta_recurrent(const float* q, const float* k, const float* v, const float* beta, const float* g,
                           int64_t n, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, const float* state_in,
                           float* state, float* out, ThreadPool* pool) {
    SLUICE_ASSERT(n_k > 0 && n_v % n_k == 0);
    const IsaTable& t = isa();
    const int64_t rep = n_v / n_k;
    run(pool, n_v, 1, [&](int64_t j0, int64_t j1) {
        thread_local std::vector<float> buf;
        float* s = scratch(buf, 2 * dv);
        for (int64_t j = j0; j < j1; ++j) {
            const int64_t m = j / rep;
            copy_head_state(state_in, state, j, dk * dv);
            t.delta_recurrent_head(q + m * dk, k + m * dk, n_k * dk, v + j * dv, n_v * dv, beta + j, g + j,
                                   n_v, n, dk, dv, state + j * dk * dv, out + j * dv, s);
        }
    });
}

void gated_delta_chunked(const float* q, const float* k, const float* v, const float* beta, const float* g,
                         int64_t n, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, const float* state_in,
                         float* state, float* out, ThreadPool* pool) {
    SLUICE_ASSERT(n_k > 0 && n_v % n_k == 0);
    const IsaTable& t = isa();
    const int64_t rep = n_v / n_k;
    run(pool, n_v, 1, [&](int64_t j0, int64_t j1) {
        thread_local std::vector<float> buf;
        float* s = scratch(buf, cpu::delta_chunk_scratch_floats(dk, dv));
        for (int64_t j = j0; j < j1; ++j) {
            const int64_t m = j / rep;
            copy_head_state(state_in, state, j, dk * dv);
            t.delta_chunked_head(q + m * dk, k + m * dk, n_k * dk, v + j * dv, n_v * dv, beta + j, g + j, n_v,
                                 n, dk, dv, state + j * dk * dv, out + j * dv, s);
        }
    });
}

namespace {

// k passes of an argmax over score[0, E) (k is small, <= ~10; strict > keeps the lower index on
// ties); the picked set is tracked in ids, so nothing is allocated.
template <typename Score>
void pick_top_k(int64_t E, int64_t k, Score score, int32_t* ids) {
    for (int64_t j = 0; j < k; ++j) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; ++e) {
            if (std::find(ids, ids + j, static_cast<int32_t>(e)) != ids + j) continue;
            if (best < 0 || score(e) > score(best)) best = e;
        }
        ids[j] = static_cast<int32_t>(best);
    }
}

}  // namespace

void router_topk(const float* logits, const RouterSpec& r, int32_t* ids, float* weights) {
    const int64_t E = r.n_experts, k = r.k;
    SLUICE_ASSERT(k >= 1 && k <= E);
    double selected = 0.0;
    if (r.scoring == RouterSpec::Scoring::kSoftmax) {
        // The softmax is monotone in the logits: pick on them, weigh by the normalised numerators.
        float max_logit = -INFINITY;
        for (int64_t e = 0; e < E; ++e) max_logit = std::max(max_logit, logits[e]);
        double sum = 0.0;
        for (int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(logits[e]) - max_logit);
        pick_top_k(
            E, k, [&](int64_t e) { return logits[e]; }, ids);
        for (int64_t j = 0; j < k; ++j) {
            const double p = std::exp(static_cast<double>(logits[ids[j]]) - max_logit) / sum;
            weights[j] = static_cast<float>(p);
            selected += p;
        }
    } else {
        thread_local std::vector<float> scratch;
        if (scratch.size() < static_cast<size_t>(2 * E)) scratch.resize(static_cast<size_t>(2 * E));
        float* s = scratch.data();
        float* choice = s + E;
        for (int64_t e = 0; e < E; ++e) {
            s[e] = 1.0f / (1.0f + std::exp(-logits[e]));
            choice[e] = s[e] + (r.bias != nullptr ? r.bias[e] : 0.0f);
        }
        if (r.groups > 1) {
            SLUICE_ASSERT(E % r.groups == 0 && E / r.groups >= 2 && r.topk_groups >= 1 &&
                          r.topk_groups <= r.groups);
            const int64_t per = E / r.groups;
            // Group g's score: the sum of its two largest choices.
            auto group_score = [&](int64_t g) {
                float a = -INFINITY, b = -INFINITY;
                for (int64_t e = g * per; e < (g + 1) * per; ++e) {
                    if (choice[e] > a) {
                        b = a;
                        a = choice[e];
                    } else if (choice[e] > b) {
                        b = choice[e];
                    }
                }
                return a + b;
            };
            thread_local std::vector<float> scores;
            thread_local std::vector<int32_t> kept;
            scores.resize(static_cast<size_t>(r.groups));
            kept.resize(static_cast<size_t>(r.topk_groups));
            for (int64_t g = 0; g < r.groups; ++g) scores[g] = group_score(g);
            pick_top_k(
                r.groups, r.topk_groups, [&](int64_t g) { return scores[g]; }, kept.data());
            for (int64_t g = 0; g < r.groups; ++g)
                if (std::find(kept.begin(), kept.end(), static_cast<int32_t>(g)) == kept.end())
                    std::fill(choice + g * per, choice + (g + 1) * per, -INFINITY);
        }
        pick_top_k(
            E, k, [&](int64_t e) { return choice[e]; }, ids);
        for (int64_t j = 0; j < k; ++j) {
            weights[j] = s[ids[j]];
            selected += s[ids[j]];
        }
        selected += 1e-20;
    }
    for (int64_t j = 0; j < k; ++j)
        weights[j] = static_cast<float>((r.renormalize ? weights[j] / selected : weights[j]) * r.scale);
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
    isa().swiglu(gate, up, n, out);
}

// Once per routed expert and token over I values, next to products over I·H weights: the reference
// definition itself.
void swiglu_clamped(const float* gate, const float* up, int64_t n, float alpha, float limit, float* out) {
    reference::swiglu_clamped(gate, up, n, alpha, limit, out);
}

void axpy(float a, const float* x, int64_t n, float* y) {
    isa().axpy(a, x, n, y);
}

namespace testing {

std::vector<std::string> supported_isas() {
    std::vector<std::string> out;
    for (const IsaTable* t : supported_tables()) out.emplace_back(t->name);
    return out;
}

bool force_isa(const std::string& name) {
    if (name.empty()) {
        g_forced.store(nullptr);
        return true;
    }
    for (const IsaTable* t : supported_tables()) {
        if (name == t->name) {
            g_forced.store(t);
            return true;
        }
    }
    return false;
}

}  // namespace testing
}  // namespace sluice::kernels
