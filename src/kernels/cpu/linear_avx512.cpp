// AVX-512 inner loops of the linear ops: quantized (MLX affine Q4/Q8) and float matvec, row
// dequantization and the f32 GEMM micro-kernel used by matmul.
//
// Quantized matvec without per-element shuffles: a 512-bit load takes 16 consecutive words of a
// row, and lane j holds word j. Masking every lane with 0xF << 4k (Q4) or 0xFF << 8k (Q8) isolates
// the k-th code of each word (inputs base + 8j + k: 16 codes with stride 8) still in place, i.e.
// as q·2^(bits·k), which converts to f32 exactly. prepare_x stores x in that order, pre-scaled by
// the exact factor 2^-(bits·k), once per input vector (xp[base + 16k + j] = x[base + 8j + k]·2^-4k),
// so the inner loop is AND, convert, FMA per 16 weights (no shifts). All codes of one word share a group
// (group sizes are multiples of 8), so lane j's partial sum Σ_k q·x is multiplied by its group's scale once
// per block (a permute spreads the block's 1–4 scales over the lanes), and the bias term is added once per
// row as Σ_g b_g·Σx_g with the per-group sums of x computed in prepare_x. Requirements (checked by
// dispatch.cpp): group_size a power of two >= 32, cols a multiple of it. This is the exact (f32
// activations) path; the int8-activation path (kernels.h, Activations::kInt8) is below: one 64-byte
// load of a row is 128 4-bit codes (or 64 8-bit ones), two (one) VNNI vpdpbusd multiply them with
// the int8 x prepared in the matching byte order, and each int32 lane — 8 (4) consecutive codes,
// inside one block of 32 — is converted once and scaled by its block's d times its group's scale.
// Both paths prefetch the same chunk of the next row set while they work on this one: a decode's
// weights come from DRAM, and the hardware prefetcher alone left one core at ~6 GB/s on a cold 4-bit
// matrix (15 GB/s with it, int8).
// Several vectors (isa_table.h, RowVectors: up to 8 — a verification of k + 1 tokens, a batched decode
// step): the row kernels are templates over the vector count, one vector being the plain decode kernel.
// A chunk of a row is loaded and unpacked once and multiplies each vector of a pass (at most 3 for int8,
// 2 for f32 activations, over sets of 4 rows: the set comes from memory in the first pass, from L1 in
// the others), and each (row, vector) accumulator sees exactly the operations it sees alone, so every
// token keeps its decode bits. The lane sums that end a row (its product's and its bias term's) are
// taken 16 at a time by a transposing tree that pairs the lanes as GCC's _mm512_reduce_add_ps, which
// the kernels used before, does (sum_lanes16: one vector's results are the earlier kernels' bit for
// bit); one by one they were about half the time of a 256-input row. Rejected: vectors in the lanes (the
// prefill GEMM's layout) — it sums in another order, so its results differ from decode's in the last bits.
// Those functions carry target("avx512vnni"): the table uses them only on CPUs with VNNI (the dispatch falls
// back to AVX2's vpmaddubsw path otherwise). GCC 12's _mm512_reduce_add_ps reads _mm256_undefined_pd() and
// trips -Wuninitialized (a false positive in the intrinsics header, fixed in later GCC).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/isa_table.h"

namespace sluice::kernels::cpu::avx512 {
namespace {

inline int64_t min_i64(int64_t a, int64_t b) {
    return a < b ? a : b;
}
inline __mmask16 first_lanes(int64_t n) {
    return n >= 16 ? static_cast<__mmask16>(0xffff) : (1u << n) - 1u;
}

// n (<= 16) scales of `type` starting at element `index`, as f32 in the low lanes.
inline __m512 load_scales(const void* base, ScaleType type, int64_t index, int64_t n) {
    const __mmask16 m = first_lanes(n);
    switch (type) {
        case ScaleType::kF32: return _mm512_maskz_loadu_ps(m, static_cast<const float*>(base) + index);
        case ScaleType::kBF16: {
            const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(base) + index);
            return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
        case ScaleType::kF16:
            return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(base) + index));
    }
    return _mm512_setzero_ps();
}

// 16 weights of a float matrix starting at element `index`, masked to n (<= 16).
inline __m512 load_weights(const void* base, WeightType type, int64_t index, int64_t n) {
    const __mmask16 m = first_lanes(n);
    switch (type) {
        case WeightType::kF32: return _mm512_maskz_loadu_ps(m, static_cast<const float*>(base) + index);
        case WeightType::kBF16: {
            const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(base) + index);
            return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
        case WeightType::kF16:
            return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(base) + index));
        default: return _mm512_setzero_ps();
    }
}

// The sum of v's 16 lanes, pairing lanes as GCC's _mm512_reduce_add_ps does (i with i + 8, then
// i + 4, i + 2, i + 1), spelled out so that sum_lanes16 below adds the same pairs whatever the compiler.
inline float sum_lanes(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_extractf32x8_ps(v, 1), _mm512_castps512_ps256(v));
    const __m128 q = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    const __m128 p = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

// out[k] = sum_lanes(a[k]) for 16 vectors at once, bit for bit: each level adds the same lane pairs of
// every vector as sum_lanes does of one (halves, quarters, pairs, the last two), with the vectors
// transposed into the lanes on the way — 15 adds for all 16 instead of 4 each. Inlined, so that the 16
// stay in registers.
__attribute__((always_inline)) inline void sum_lanes16(const __m512* a, float* out) {
    __m512 h[8], q[4], p[2];
    for (int k = 0; k < 8; ++k)  // [a[2k] halves summed | a[2k+1] halves summed], 8 lanes each
        h[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)),
                             _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)));
    for (int m = 0; m < 4; ++m)  // 128-bit lane j: the quarters of a[4m + j] summed
        q[m] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * m], h[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)),
                             _mm512_shuffle_f32x4(h[2 * m], h[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)));
    for (int t = 0; t < 2; ++t)  // lane j: a[8t + j]'s two pair sums, then a[8t + 4 + j]'s
        p[t] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * t], q[2 * t + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(q[2 * t], q[2 * t + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // Element 4j + c: the sum of a[4c + j].
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(p[0], p[1], _MM_SHUFFLE(3, 1, 3, 1)));
    alignas(64) float t[16];
    _mm512_store_ps(t, s);
    for (int k = 0; k < 16; ++k) out[k] = t[4 * (k % 4) + k / 4];
}

// Σ_g scale_type(b[g]) · xsum[g] over n groups, 16 lanes at a time (their sum: sum_lanes).
inline __m512 bias_lanes(const void* biases, ScaleType type, int64_t index, const float* xsum, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t g = 0; g < n; g += 16) {
        const int64_t len = min_i64(16, n - g);
        acc = _mm512_fmadd_ps(load_scales(biases, type, index + g, len),
                              _mm512_maskz_loadu_ps(first_lanes(len), xsum + g), acc);
    }
    return acc;
}

// The end of a quantized row kernel for kRows rows × kVecs vectors (row r first): y[j·ldy + i] = the
// lane sum of acc[i][j] + the lane sum of Σ_g b_g·xsum_j[g], those sums taken 16 at a time
// (sum_lanes16), the rest one by one (a batch of 8 padded to 16 measured no faster than 8 sums alone).
template <int kRows, int kVecs>
inline void finish_rows(const WeightView& w, const RowVectors& v, int64_t r,
                        const __m512 (&acc)[kRows][kVecs], float* y) {
    const int64_t groups = w.cols / w.group_size;
    constexpr int kSums =
        2 * kRows * kVecs;  // (row, vector) p: its product's lanes at 2p, its bias's at 2p + 1
    constexpr int kBy16 = kSums / 16 * 16;
    __m512 parts[kSums];
#pragma GCC unroll 8
    for (int j = 0; j < kVecs; ++j)
#pragma GCC unroll 4
        for (int i = 0; i < kRows; ++i) {
            parts[2 * (i * kVecs + j)] = acc[i][j];
            parts[2 * (i * kVecs + j) + 1] =
                bias_lanes(w.biases, w.scale_type, (r + i) * groups, v.sums + j * v.sums_stride, groups);
        }
    float sums[kSums];
    for (int b = 0; b < kBy16; b += 16) sum_lanes16(parts + b, sums + b);
#pragma GCC unroll 8
    for (int k = kBy16; k < kSums; ++k) sums[k] = sum_lanes(parts[k]);
    for (int j = 0; j < kVecs; ++j)
        for (int i = 0; i < kRows; ++i)
            y[j * v.ldy + i] = sums[2 * (i * kVecs + j)] + sums[2 * (i * kVecs + j) + 1];
}

// Vectors [j0, j0 + n) of v, as a call of their own (a pass of a row kernel over them).
inline RowVectors vector_pass(const RowVectors& v, int64_t j0, int64_t n) {
    return RowVectors{static_cast<const uint8_t*>(v.x) + j0 * v.x_stride_bytes,
                      v.x_stride_bytes,
                      v.sums + j0 * v.sums_stride,
                      v.sums_stride,
                      n,
                      v.y + j0 * v.ldy,
                      v.ldy};
}

template <int kBits>
struct QuantLayout {
    static constexpr int kPerWord = 32 / kBits;   // codes per uint32
    static constexpr int kBlock = 16 * kPerWord;  // codes per 16-word block
    static constexpr uint32_t kMask = (1u << kBits) - 1u;
};

template <int kBits>
void prepare_x_impl(const WeightView& w, const float* x, float* xp) {
    using L = QuantLayout<kBits>;
    for (int64_t base = 0; base < w.cols; base += L::kBlock) {
        const int64_t nw = min_i64(16, (w.cols - base) / L::kPerWord);
        for (int k = 0; k < L::kPerWord; ++k) {
            // Code k is used in place (masked, not shifted down): its value arrives multiplied by
            // 2^(bits·k), which this exact power-of-two factor cancels.
            const float unshift = 1.0f / static_cast<float>(1u << (kBits * k));
            for (int64_t j = 0; j < 16; ++j)
                xp[base + 16 * k + j] = j < nw ? x[base + L::kPerWord * j + k] * unshift : 0.0f;
        }
    }
}

// kRows consecutive rows × kVecs vectors at once: each 16-word block of a row is loaded and its codes
// isolated and converted once for every vector, and each vector's lane-order x once for all the rows
// (independent FMA chains). Vector v's chain for row i is the one it has alone (kVecs = 1): the same
// blocks in order, the same FMAs, the same reduction.
template <int kBits, int kRows, int kVecs>
inline void matvec_quant_rows_n(const WeightView& w, const RowVectors& v, int64_t r, __m512i scale_lane,
                                float* y) {
    using L = QuantLayout<kBits>;
    const int64_t cols = w.cols, gs = w.group_size, groups = cols / gs;
    const int64_t words_per_row = cols / L::kPerWord;
    const int64_t scales_per_block = gs < L::kBlock ? L::kBlock / gs : 1;
    const uint32_t* words = static_cast<const uint32_t*>(w.data) + r * words_per_row;
    const float* xp[kVecs];
    for (int j = 0; j < kVecs; ++j)
        xp[j] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(v.x) + j * v.x_stride_bytes);
    __m512 acc[kRows][kVecs];
    for (int i = 0; i < kRows; ++i)
        for (int j = 0; j < kVecs; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t base = 0; base < cols; base += L::kBlock) {
        const int64_t nw = min_i64(16, (cols - base) / L::kPerWord);
        __m512i wv[kRows];
        for (int i = 0; i < kRows; ++i) {
            const uint32_t* src = words + i * words_per_row + base / L::kPerWord;
            _mm_prefetch(reinterpret_cast<const char*>(src + kRows * words_per_row), _MM_HINT_T0);
            wv[i] = nw == 16 ? _mm512_loadu_si512(src) : _mm512_maskz_loadu_epi32(first_lanes(nw), src);
        }
        // Code k in place: (word & (mask << bits·k)) converted as unsigned is q·2^(bits·k), exact
        // in f32 (at most 8 significant bits); xp carries the 2^-(bits·k) factor. One AND and one
        // convert per 16 weights, one FMA per 16 weights and vector.
        __m512 t[kRows][kVecs];
        for (int i = 0; i < kRows; ++i)
            for (int j = 0; j < kVecs; ++j) t[i][j] = _mm512_setzero_ps();
        for (int k = 0; k < L::kPerWord; ++k) {
            const __m512i m = _mm512_set1_epi32(static_cast<int>(L::kMask << (kBits * k)));
            __m512 code[kRows];
            for (int i = 0; i < kRows; ++i) code[i] = _mm512_cvtepu32_ps(_mm512_and_si512(wv[i], m));
            for (int j = 0; j < kVecs; ++j) {
                const __m512 xv = _mm512_loadu_ps(xp[j] + base + 16 * k);
                for (int i = 0; i < kRows; ++i) t[i][j] = _mm512_fmadd_ps(code[i], xv, t[i][j]);
            }
        }
        const int64_t g0 = base / gs;
        for (int i = 0; i < kRows; ++i) {
            const __m512 sv =
                _mm512_permutexvar_ps(scale_lane, load_scales(w.scales, w.scale_type, (r + i) * groups + g0,
                                                              min_i64(scales_per_block, groups - g0)));
            for (int j = 0; j < kVecs; ++j) acc[i][j] = _mm512_fmadd_ps(t[i][j], sv, acc[i][j]);
        }
    }
    finish_rows<kRows, kVecs>(w, v, r, acc, y);
}

// Rows four at a time (singles at the end), the vectors in passes of at most 2 over each set of rows
// (2·rows·vectors of the 32 zmm registers hold the partial sums): the set comes from memory in the first
// pass and from L1 in the others. Measured on Zen 5 from DRAM: sets of 4 rows stream ~1.4× faster than
// pairs, and passes of more vectors over fewer rows lost the overlap of the weight stream and the
// arithmetic (slower than separate calls).
template <int kBits, int kRows>
inline void matvec_quant_set(const WeightView& w, const RowVectors& v, int64_t r, int64_t at,
                             __m512i scale_lane) {
    int64_t j0 = 0;
    for (; j0 + 2 <= v.n; j0 += 2) {
        const RowVectors p = vector_pass(v, j0, 2);
        matvec_quant_rows_n<kBits, kRows, 2>(w, p, r, scale_lane, p.y + at);
    }
    if (j0 < v.n) {
        const RowVectors p = vector_pass(v, j0, 1);
        matvec_quant_rows_n<kBits, kRows, 1>(w, p, r, scale_lane, p.y + at);
    }
}

template <int kBits>
void matvec_quant_impl(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    using L = QuantLayout<kBits>;
    alignas(64) int32_t idx[16];
    for (int j = 0; j < 16; ++j) idx[j] = static_cast<int32_t>((L::kPerWord * j) / w.group_size);
    const __m512i scale_lane = _mm512_load_si512(idx);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) matvec_quant_set<kBits, 4>(w, v, r, r - r0, scale_lane);
    for (; r < r1; ++r) matvec_quant_set<kBits, 1>(w, v, r, r - r0, scale_lane);
}

// Float weights, one row × kVecs vectors: each 16 weights loaded (and widened) once for every vector;
// a vector's two FMA chains, masked tail and reduction are the ones it has alone.
template <int kVecs>
void float_rows_n(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    const int64_t cols = w.cols;
    const float* x[kVecs];
    for (int j = 0; j < kVecs; ++j)
        x[j] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(v.x) + j * v.x_stride_bytes);
    for (int64_t r = r0; r < r1; ++r) {
        __m512 a0[kVecs], a1[kVecs];
        for (int j = 0; j < kVecs; ++j) a0[j] = a1[j] = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 32 <= cols; i += 32) {
            const __m512 w0 = load_weights(w.data, w.type, r * cols + i, 16);
            const __m512 w1 = load_weights(w.data, w.type, r * cols + i + 16, 16);
            for (int j = 0; j < kVecs; ++j) {
                a0[j] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[j] + i), a0[j]);
                a1[j] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[j] + i + 16), a1[j]);
            }
        }
        for (; i < cols; i += 16) {
            const int64_t len = min_i64(16, cols - i);
            const __m512 w0 = load_weights(w.data, w.type, r * cols + i, len);
            for (int j = 0; j < kVecs; ++j)
                a0[j] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(first_lanes(len), x[j] + i), a0[j]);
        }
#pragma GCC unroll 8
        for (int j = 0; j < kVecs; ++j)
            v.y[j * v.ldy + (r - r0)] = _mm512_reduce_add_ps(_mm512_add_ps(a0[j], a1[j]));
    }
}

// 16 codes of row `words` starting at input i (a multiple of 16), natural order, as int32 lanes.
template <int kBits>
inline __m512i codes16(const uint32_t* words, int64_t i) {
    if constexpr (kBits == 4) {
        const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(words + i / 8));
        const __m128i lo = _mm_and_si128(bytes, _mm_set1_epi8(0x0f));
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0f));
        return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    } else {
        return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words + i / 4)));
    }
}

template <int kBits>
void dequant_quant_impl(const WeightView& w, int64_t r0, int64_t r1, float* tile) {
    const int64_t cols = w.cols, gs = w.group_size, groups = cols / gs;
    const int64_t words_per_row = cols * kBits / 32;
    for (int64_t r = r0; r < r1; ++r) {
        const uint32_t* words = static_cast<const uint32_t*>(w.data) + r * words_per_row;
        float* out = tile + (r - r0) * cols;
        for (int64_t g = 0; g < groups; ++g) {
            const __m512 s = _mm512_permutexvar_ps(_mm512_setzero_si512(),
                                                   load_scales(w.scales, w.scale_type, r * groups + g, 1));
            const __m512 b = _mm512_permutexvar_ps(_mm512_setzero_si512(),
                                                   load_scales(w.biases, w.scale_type, r * groups + g, 1));
            for (int64_t i = g * gs; i < (g + 1) * gs; i += 16)
                _mm512_storeu_ps(out + i,
                                 _mm512_fmadd_ps(_mm512_cvtepi32_ps(codes16<kBits>(words, i)), s, b));
        }
    }
}

// y[t * ldy + r] for R rows × T tokens: R·T dot products over cols, one vector accumulator each
// (4×6 = 24 of the 32 zmm registers; per 16 columns 10 loads feed 24 FMAs).
template <int R, int T>
inline void gemm_micro(const float* wt, int64_t ldw, const float* x, int64_t cols, float* y, int64_t ldy) {
    __m512 acc[R][T];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= cols; i += 16) {
        __m512 wv[R];
        for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_ps(wt + r * ldw + i);
        for (int t = 0; t < T; ++t) {
            const __m512 xv = _mm512_loadu_ps(x + t * cols + i);
            for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    if (i < cols) {
        const __mmask16 m = first_lanes(cols - i);
        __m512 wv[R];
        for (int r = 0; r < R; ++r) wv[r] = _mm512_maskz_loadu_ps(m, wt + r * ldw + i);
        for (int t = 0; t < T; ++t) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, x + t * cols + i);
            for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <int R>
inline void gemm_rows(const float* wt, int64_t ldw, const float* x, int64_t n, int64_t cols, float* y,
                      int64_t ldy) {
    int64_t t = 0;
    for (; t + 6 <= n; t += 6) gemm_micro<R, 6>(wt, ldw, x + t * cols, cols, y + t * ldy, ldy);
    switch (n - t) {
        case 5: gemm_micro<R, 5>(wt, ldw, x + t * cols, cols, y + t * ldy, ldy); break;
        case 4: gemm_micro<R, 4>(wt, ldw, x + t * cols, cols, y + t * ldy, ldy); break;
        case 3: gemm_micro<R, 3>(wt, ldw, x + t * cols, cols, y + t * ldy, ldy); break;
        case 2: gemm_micro<R, 2>(wt, ldw, x + t * cols, cols, y + t * ldy, ldy); break;
        case 1: gemm_micro<R, 1>(wt, ldw, x + t * cols, cols, y + t * ldy, ldy); break;
        default: break;
    }
}

// ---- int8 activations (kernels.h, Activations::kInt8) ---------------------------------------------
// Prepared x, per chunk of one 64-byte row load (kCodes codes): the int8 codes — Q4: the even
// codes' x then the odd codes' x (the low and high nibbles of the 64 row bytes), Q8: natural order
// — then 16 f32 lane scales (lane L's block d; lane L of vpdpbusd sums row bytes 4L..4L+3).
template <int kBits>
struct I8Layout {
    static constexpr int64_t kCodes = kBits == 4 ? 128 : 64;
    static constexpr int64_t kChunkBytes = kCodes + 64;
    static constexpr int64_t kCodesPerLane = kCodes / 16;
};

template <int kBits>
void i8_prepare_impl(const WeightView& w, const float* x, uint8_t* prep, float* xs) {
    using L = I8Layout<kBits>;
    const int64_t cols = w.cols, per_group = w.group_size / 32;
    alignas(64) int8_t qn[128];
    float d[4];
    for (int64_t c0 = 0, ci = 0; c0 < cols; c0 += L::kCodes, ++ci) {
        const int64_t here = min_i64(L::kCodes, cols - c0);  // a multiple of 32
        uint8_t* out = prep + ci * L::kChunkBytes;
        for (int64_t b = 0; b < L::kCodes / 32; ++b) {
            if (b * 32 >= here) {
                _mm256_store_si256(reinterpret_cast<__m256i*>(qn + b * 32), _mm256_setzero_si256());
                d[b] = 0.0f;
                continue;
            }
            const float* xb = x + c0 + b * 32;
            const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            d[b] = amax / 127.0f;
            const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
            const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));  // round to nearest even
            const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
            _mm_store_si128(reinterpret_cast<__m128i*>(qn + b * 32), _mm512_cvtsepi32_epi8(q0));
            _mm_store_si128(reinterpret_cast<__m128i*>(qn + b * 32 + 16), _mm512_cvtsepi32_epi8(q1));
            const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
            const int64_t g = (c0 + b * 32) / 32 / per_group;
            if ((c0 / 32 + b) % per_group == 0) xs[g] = 0.0f;
            xs[g] += d[b] * static_cast<float>(sum);
        }
        if constexpr (kBits == 4) {
            // Deinterleave: byte 2j → the low-nibble half, byte 2j+1 → the high-nibble half.
            const __m512i a = _mm512_load_si512(qn), b = _mm512_load_si512(qn + 64);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi16_epi8(a));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32), _mm512_cvtepi16_epi8(b));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 64),
                                _mm512_cvtepi16_epi8(_mm512_srli_epi16(a, 8)));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 96),
                                _mm512_cvtepi16_epi8(_mm512_srli_epi16(b, 8)));
        } else {
            _mm512_storeu_si512(out, _mm512_load_si512(qn));
        }
        float* dl = reinterpret_cast<float*>(out + L::kCodes);
        for (int64_t lane = 0; lane < 16; ++lane) dl[lane] = d[lane * L::kCodesPerLane / 32];
    }
}

// kRows consecutive rows × kVecs vectors: each 64-byte chunk of a row is loaded (and its nibbles
// split) once for every vector, each vector's chunk of codes and lane scales read once per row from L1.
// Vector v's chain for row i is the one it has alone (kVecs = 1): the same vpdpbusd sums (exact
// integers), the same convert and FMA by d × scale per chunk in chunk order, the same reduction and
// bias term.
template <int kBits, int kRows, int kVecs>
__attribute__((target("avx512vnni"))) inline void i8_rows_n(const WeightView& w, const RowVectors& v,
                                                            int64_t r, __m512i scale_lane, float* y) {
    using L = I8Layout<kBits>;
    const int64_t cols = w.cols, gs = w.group_size, groups = cols / gs;
    const int gs_log2 = __builtin_ctzll(static_cast<unsigned long long>(gs));  // a power of two
    const int64_t row_bytes = cols * kBits / 8;
    const uint8_t* rows = static_cast<const uint8_t*>(w.data) + r * row_bytes;
    const uint8_t* prep[kVecs];
    for (int j = 0; j < kVecs; ++j) prep[j] = static_cast<const uint8_t*>(v.x) + j * v.x_stride_bytes;
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m512 acc[kRows][kVecs];
    // Each row's scales 16 groups at a time, converted once; a chunk's lanes take theirs from that
    // window with one permute (its 1, 2 or 4 groups never straddle a window: 16 is a multiple).
    __m512 window[kRows];
    int64_t window_g = -16;
    for (int i = 0; i < kRows; ++i)
        for (int j = 0; j < kVecs; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t at = 0, ci = 0; at < row_bytes; at += 64, ++ci) {
        const int64_t nb = min_i64(64, row_bytes - at);
        const __mmask64 m = nb == 64 ? ~__mmask64{0} : (__mmask64{1} << nb) - 1;
        const int64_t g0 = (ci * L::kCodes) >> gs_log2;
        if (g0 >= window_g + 16) {
            window_g = g0 / 16 * 16;
            for (int i = 0; i < kRows; ++i)
                window[i] = load_scales(w.scales, w.scale_type, (r + i) * groups + window_g,
                                        min_i64(16, groups - window_g));
        }
        const __m512i lane_group =
            _mm512_add_epi32(scale_lane, _mm512_set1_epi32(static_cast<int>(g0 - window_g)));
        __m512 dl[kVecs];
        for (int j = 0; j < kVecs; ++j)
            dl[j] =
                _mm512_loadu_ps(reinterpret_cast<const float*>(prep[j] + ci * L::kChunkBytes + L::kCodes));
        for (int i = 0; i < kRows; ++i) {
            _mm_prefetch(reinterpret_cast<const char*>(rows + (i + kRows) * row_bytes + at), _MM_HINT_T0);
            const __m512i wv = _mm512_maskz_loadu_epi8(m, rows + i * row_bytes + at);
            const __m512 sv = _mm512_permutexvar_ps(lane_group, window[i]);
            if constexpr (kBits == 4) {
                const __m512i lo = _mm512_and_si512(wv, low4);
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), low4);
                for (int j = 0; j < kVecs; ++j) {
                    const uint8_t* xc = prep[j] + ci * L::kChunkBytes;
                    const __m512i s = _mm512_dpbusd_epi32(
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xc)), hi,
                        _mm512_loadu_si512(xc + 64));
                    acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dl[j], sv), acc[i][j]);
                }
            } else {
                for (int j = 0; j < kVecs; ++j) {
                    const uint8_t* xc = prep[j] + ci * L::kChunkBytes;
                    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, _mm512_loadu_si512(xc));
                    acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dl[j], sv), acc[i][j]);
                }
            }
        }
    }
    finish_rows<kRows, kVecs>(w, v, r, acc, y);
}

// Rows four at a time (singles at the end), the vectors in passes of at most 3 over each set of rows:
// the set comes from memory in the first pass and from L1 in the others. Measured on Zen 5 (one core, a
// 4-bit 2048 × 2048 matrix): a pass of 2 or 3 vectors costs ~0.9 ns per vector and 64-byte chunk, one of
// 4 (16 accumulators) ~1.2 ns, and from DRAM a pass of 4 or more vectors fell to below the speed of n
// separate calls (the weight stream no longer overlapped the arithmetic), where passes of 2 or 3 stay at
// the single-vector kernel's time for 2 and 3 vectors.
template <int kBits, int kP0, int kP1, int kP2>
__attribute__((target("avx512vnni"))) void i8_matvec_passes(const WeightView& w, const RowVectors& v,
                                                            int64_t r0, int64_t r1, __m512i scale_lane) {
    const RowVectors p0 = vector_pass(v, 0, kP0), p1 = vector_pass(v, kP0, kP1),
                     p2 = vector_pass(v, kP0 + kP1, kP2);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
        i8_rows_n<kBits, 4, kP0>(w, p0, r, scale_lane, p0.y + (r - r0));
        if constexpr (kP1 > 0) i8_rows_n<kBits, 4, kP1>(w, p1, r, scale_lane, p1.y + (r - r0));
        if constexpr (kP2 > 0) i8_rows_n<kBits, 4, kP2>(w, p2, r, scale_lane, p2.y + (r - r0));
    }
    for (; r < r1; ++r) {
        i8_rows_n<kBits, 1, kP0>(w, p0, r, scale_lane, p0.y + (r - r0));
        if constexpr (kP1 > 0) i8_rows_n<kBits, 1, kP1>(w, p1, r, scale_lane, p1.y + (r - r0));
        if constexpr (kP2 > 0) i8_rows_n<kBits, 1, kP2>(w, p2, r, scale_lane, p2.y + (r - r0));
    }
}

template <int kBits>
__attribute__((target("avx512vnni"))) void i8_matvec_impl(const WeightView& w, const RowVectors& v,
                                                          int64_t r0, int64_t r1) {
    using L = I8Layout<kBits>;
    alignas(64) int32_t idx[16];
    for (int j = 0; j < 16; ++j) idx[j] = static_cast<int32_t>(L::kCodesPerLane * j / w.group_size);
    const __m512i scale_lane = _mm512_load_si512(idx);
    switch (v.n) {
        case 1: i8_matvec_passes<kBits, 1, 0, 0>(w, v, r0, r1, scale_lane); break;
        case 2: i8_matvec_passes<kBits, 2, 0, 0>(w, v, r0, r1, scale_lane); break;
        case 3: i8_matvec_passes<kBits, 3, 0, 0>(w, v, r0, r1, scale_lane); break;
        case 4: i8_matvec_passes<kBits, 2, 2, 0>(w, v, r0, r1, scale_lane); break;
        case 5: i8_matvec_passes<kBits, 3, 2, 0>(w, v, r0, r1, scale_lane); break;
        case 6: i8_matvec_passes<kBits, 3, 3, 0>(w, v, r0, r1, scale_lane); break;
        case 7: i8_matvec_passes<kBits, 3, 2, 2>(w, v, r0, r1, scale_lane); break;
        default: i8_matvec_passes<kBits, 3, 3, 2>(w, v, r0, r1, scale_lane); break;
    }
}

// ---- int8 activations: the prefill GEMM ---------------------------------------------------------
// Tokens in the vector lanes: a group of 16 tokens' int8 codes interleaved by 4 (for each 4
// consecutive inputs k, 64 bytes: token t's 4 codes at bytes 4t..4t+3), so one vpdpbusd takes a
// row's 4 codes broadcast against 16 tokens. A token's lane sees the same operations in the same
// order whatever else is in the group (padding lanes are zero), so its results do not depend on n.
// Per group of 16 tokens: codes [cols/4][64 B], then d per block [blocks][16 f32], then the
// quantised x sums per weight group [groups][16 f32].
constexpr int64_t kGemmTokens = 16;

inline int64_t gemm_group_bytes(const WeightView& w) {
    return w.cols * kGemmTokens + (w.cols / 32 + w.cols / w.group_size) * kGemmTokens * 4;
}

// Rows [r0, r1) of a 4-bit matrix unpacked to one code per byte, natural order, into out (cols each).
void unpack_q4_rows(const WeightView& w, int64_t r0, int64_t r1, uint8_t* out) {
    const int64_t cols = w.cols, row_bytes = cols / 2;
    const __m512i lo = _mm512_set1_epi16(0x000f), hi = _mm512_set1_epi16(0x00f0);
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* src = static_cast<const uint8_t*>(w.data) + r * row_bytes;
        uint8_t* dst = out + (r - r0) * cols;
        int64_t i = 0;
        for (; i + 32 <= row_bytes; i += 32) {
            const __m512i t =
                _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
            _mm512_storeu_si512(dst + 2 * i, _mm512_or_si512(_mm512_and_si512(t, lo),
                                                             _mm512_slli_epi16(_mm512_and_si512(t, hi), 4)));
        }
        for (; i < row_bytes; ++i) {
            dst[2 * i] = src[i] & 0x0f;
            dst[2 * i + 1] = src[i] >> 4;
        }
    }
}

template <int R, int TG>
__attribute__((target("avx512vnni"))) inline void i8_gemm_micro(const WeightView& w, const uint8_t* rows,
                                                                int64_t r, const uint8_t* group0,
                                                                int64_t gstride, float* out) {
    const int64_t cols = w.cols, gs = w.group_size, groups = cols / gs, bpg = gs / 32;
    const uint8_t* xg[TG];
    const float* dv[TG];
    const float* xsv[TG];
    for (int t = 0; t < TG; ++t) {
        xg[t] = group0 + t * gstride;
        dv[t] = reinterpret_cast<const float*>(xg[t] + cols * kGemmTokens);
        xsv[t] = dv[t] + (cols / 32) * kGemmTokens;
    }
    __m512 acc[R][TG];
    for (int i = 0; i < R; ++i)
        for (int t = 0; t < TG; ++t) acc[i][t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; ++g) {
        __m512 bs[R][TG];
        for (int i = 0; i < R; ++i)
            for (int t = 0; t < TG; ++t) bs[i][t] = _mm512_setzero_ps();
        for (int64_t b = g * bpg; b < (g + 1) * bpg; ++b) {
            __m512i ai[R][TG];
            for (int i = 0; i < R; ++i)
                for (int t = 0; t < TG; ++t) ai[i][t] = _mm512_setzero_si512();
            for (int64_t k = b * 32; k < b * 32 + 32; k += 4) {
                __m512i xv[TG];
                for (int t = 0; t < TG; ++t) xv[t] = _mm512_loadu_si512(xg[t] + k * kGemmTokens);
                for (int i = 0; i < R; ++i) {
                    int32_t four;
                    memcpy(&four, rows + i * cols + k, 4);
                    const __m512i wb = _mm512_set1_epi32(four);
                    for (int t = 0; t < TG; ++t) ai[i][t] = _mm512_dpbusd_epi32(ai[i][t], wb, xv[t]);
                }
            }
            for (int t = 0; t < TG; ++t) {
                const __m512 d = _mm512_loadu_ps(dv[t] + b * kGemmTokens);
                for (int i = 0; i < R; ++i)
                    bs[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai[i][t]), d, bs[i][t]);
            }
        }
        for (int i = 0; i < R; ++i) {
            const __m512 sv = _mm512_permutexvar_ps(
                _mm512_setzero_si512(), load_scales(w.scales, w.scale_type, (r + i) * groups + g, 1));
            const __m512 bv = _mm512_permutexvar_ps(
                _mm512_setzero_si512(), load_scales(w.biases, w.scale_type, (r + i) * groups + g, 1));
            for (int t = 0; t < TG; ++t) {
                acc[i][t] = _mm512_fmadd_ps(bs[i][t], sv, acc[i][t]);
                acc[i][t] = _mm512_fmadd_ps(_mm512_loadu_ps(xsv[t] + g * kGemmTokens), bv, acc[i][t]);
            }
        }
    }
    for (int i = 0; i < R; ++i)
        for (int t = 0; t < TG; ++t) _mm512_storeu_ps(out + (i * TG + t) * kGemmTokens, acc[i][t]);
}

// y[t·ldy + r] for the rows [r, r + R) (unpacked in `rows`) and every token: token groups in pairs.
template <int R>
__attribute__((target("avx512vnni"))) void i8_gemm_rows_r(const WeightView& w, const uint8_t* rows, int64_t r,
                                                          const uint8_t* prep, int64_t n, float* y,
                                                          int64_t ldy) {
    const int64_t gstride = gemm_group_bytes(w), ngroups = (n + kGemmTokens - 1) / kGemmTokens;
    alignas(64) float out[R * 2 * kGemmTokens];
    for (int64_t G = 0; G < ngroups; G += 2) {
        const int tg = G + 1 < ngroups ? 2 : 1;
        if (tg == 2) {
            i8_gemm_micro<R, 2>(w, rows, r, prep + G * gstride, gstride, out);
        } else {
            i8_gemm_micro<R, 1>(w, rows, r, prep + G * gstride, gstride, out);
        }
        for (int i = 0; i < R; ++i)
            for (int t = 0; t < tg; ++t)
                for (int64_t l = 0; l < kGemmTokens; ++l) {
                    const int64_t tok = (G + t) * kGemmTokens + l;
                    if (tok < n) y[tok * ldy + r + i] = out[(i * tg + t) * kGemmTokens + l];
                }
    }
}
}  // namespace

int64_t prepared_x_floats(const WeightView& w) {
    const int64_t block = w.type == WeightType::kQ4 ? 128 : 64;
    return (w.cols + block - 1) / block * block;
}

void prepare_x(const WeightView& w, const float* x, float* xp, float* xsum) {
    if (w.type == WeightType::kQ4) {
        prepare_x_impl<4>(w, x, xp);
    } else {
        prepare_x_impl<8>(w, x, xp);
    }
    const int64_t gs = w.group_size;
    for (int64_t g = 0; g < w.cols / gs; ++g) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < gs; i += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + g * gs + i));
        xsum[g] = _mm512_reduce_add_ps(acc);
    }
}

void matvec_quant_rows(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    if (w.type == WeightType::kQ4) {
        matvec_quant_impl<4>(w, v, r0, r1);
    } else {
        matvec_quant_impl<8>(w, v, r0, r1);
    }
}

void matvec_float_rows(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    switch (v.n) {
        case 1: float_rows_n<1>(w, v, r0, r1); break;
        case 2: float_rows_n<2>(w, v, r0, r1); break;
        case 3: float_rows_n<3>(w, v, r0, r1); break;
        case 4: float_rows_n<4>(w, v, r0, r1); break;
        case 5: float_rows_n<5>(w, v, r0, r1); break;
        case 6: float_rows_n<6>(w, v, r0, r1); break;
        case 7: float_rows_n<7>(w, v, r0, r1); break;
        default: float_rows_n<8>(w, v, r0, r1); break;
    }
}

void dequant_rows(const WeightView& w, int64_t r0, int64_t r1, float* tile) {
    if (w.type == WeightType::kQ4) {
        dequant_quant_impl<4>(w, r0, r1, tile);
        return;
    }
    if (w.type == WeightType::kQ8) {
        dequant_quant_impl<8>(w, r0, r1, tile);
        return;
    }
    const int64_t cols = w.cols;
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t i = 0; i < cols; i += 16) {
            const int64_t len = min_i64(16, cols - i);
            _mm512_mask_storeu_ps(tile + (r - r0) * cols + i, first_lanes(len),
                                  load_weights(w.data, w.type, r * cols + i, len));
        }
}

int64_t i8_prepared_bytes(const WeightView& w) {
    const int64_t codes = w.type == WeightType::kQ4 ? I8Layout<4>::kCodes : I8Layout<8>::kCodes;
    const int64_t chunk = w.type == WeightType::kQ4 ? I8Layout<4>::kChunkBytes : I8Layout<8>::kChunkBytes;
    return (w.cols + codes - 1) / codes * chunk;
}

void i8_prepare(const WeightView& w, const float* x, uint8_t* prep, float* xs) {
    if (w.type == WeightType::kQ4) {
        i8_prepare_impl<4>(w, x, prep, xs);
    } else {
        i8_prepare_impl<8>(w, x, prep, xs);
    }
}

void i8_matvec_rows(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    if (w.type == WeightType::kQ4) {
        i8_matvec_impl<4>(w, v, r0, r1);
    } else {
        i8_matvec_impl<8>(w, v, r0, r1);
    }
}

int64_t i8_gemm_prepared_bytes(const WeightView& w, int64_t n) {
    return (n + kGemmTokens - 1) / kGemmTokens * gemm_group_bytes(w);
}

void i8_gemm_prepare(const WeightView& w, const float* x, int64_t n, uint8_t* prep) {
    const int64_t cols = w.cols, blocks = cols / 32, groups = cols / w.group_size,
                  per_group = w.group_size / 32;
    const int64_t gstride = gemm_group_bytes(w);
    memset(prep, 0, static_cast<size_t>(i8_gemm_prepared_bytes(w, n)));
    alignas(64) int8_t q[32];
    for (int64_t tok = 0; tok < n; ++tok) {
        uint8_t* gb = prep + tok / kGemmTokens * gstride;
        const int64_t lane = tok % kGemmTokens;
        float* dv = reinterpret_cast<float*>(gb + cols * kGemmTokens);
        float* xsv = dv + blocks * kGemmTokens;
        const float* xt = x + tok * cols;
        for (int64_t b = 0; b < blocks; ++b) {
            const __m512 v0 = _mm512_loadu_ps(xt + b * 32), v1 = _mm512_loadu_ps(xt + b * 32 + 16);
            const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            const float d = amax / 127.0f;
            const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
            const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
            const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
            _mm_store_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(q0));
            _mm_store_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(q1));
            const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
            for (int64_t k4 = 0; k4 < 8; ++k4)
                memcpy(gb + ((b * 32 + k4 * 4) * kGemmTokens) + lane * 4, q + k4 * 4, 4);
            dv[b * kGemmTokens + lane] = d;
            const int64_t g = b / per_group;
            if (b % per_group == 0) xsv[g * kGemmTokens + lane] = 0.0f;
            xsv[g * kGemmTokens + lane] += d * static_cast<float>(sum);
        }
        (void)groups;
    }
}

int64_t i8_gemm_scratch_bytes(const WeightView& w, int64_t rows) {
    return w.type == WeightType::kQ4 ? rows * w.cols : 0;
}

void i8_gemm_rows(const WeightView& w, const uint8_t* prep, int64_t n, int64_t r0, int64_t r1, float* y,
                  int64_t ldy, uint8_t* scratch) {
    const uint8_t* rows;
    if (w.type == WeightType::kQ4) {
        unpack_q4_rows(w, r0, r1, scratch);
        rows = scratch;
    } else {
        rows = static_cast<const uint8_t*>(w.data) + r0 * w.cols;  // 8-bit codes are bytes in order already
    }
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) i8_gemm_rows_r<4>(w, rows + (r - r0) * w.cols, r, prep, n, y, ldy);
    for (; r < r1; ++r) i8_gemm_rows_r<1>(w, rows + (r - r0) * w.cols, r, prep, n, y, ldy);
}

void gemm_tile(const float* wt, int64_t nr, int64_t ldw, const float* x, int64_t n, int64_t cols, float* y,
               int64_t ldy) {
    int64_t r = 0;
    for (; r + 4 <= nr; r += 4) gemm_rows<4>(wt + r * ldw, ldw, x, n, cols, y + r, ldy);
    switch (nr - r) {
        case 3: gemm_rows<3>(wt + r * ldw, ldw, x, n, cols, y + r, ldy); break;
        case 2: gemm_rows<2>(wt + r * ldw, ldw, x, n, cols, y + r, ldy); break;
        case 1: gemm_rows<1>(wt + r * ldw, ldw, x, n, cols, y + r, ldy); break;
        default: break;
    }
}

}  // namespace sluice::kernels::cpu::avx512
