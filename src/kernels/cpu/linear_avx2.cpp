// AVX2 (+FMA, F16C) inner loops of the linear ops; the same scheme as linear_avx512.cpp with
// 8-word blocks: lane j holds word j, shifting by bits·k gives code k of every word, and
// prepare_x stores x in that stride order (xp[base + 8k + j] = x[base + per_word·j + k]).
// Per-block scales (1 or 2 per 8 words) are spread over the lanes with a blend; the bias term is
// Σ_g b_g·Σx_g once per row. Requirements as for AVX-512 (group_size a power of two >= 32).
// int8 activations (kernels.h): one 32-byte row load is 64 4-bit codes (32 8-bit ones); vpmaddubsw
// multiplies unsigned codes with the int8 x (a 4-bit pair sums to at most 2·15·127, no saturation),
// vpmaddwd sums pairs into 8 int32 lanes of 8 (4) consecutive codes each. 8-bit codes would saturate
// vpmaddubsw (2·255·127 > 32767), so they are taken as signed code − 128 (|·| <= 128 against the sign of
// x: 2·128·127 fits) and the 128·Σx they leave out is added per group with the scale. Every row kernel
// takes up to 8 vectors (isa_table.h, RowVectors) in passes of at most 4 per row (16 ymm registers): a
// row chunk is loaded and unpacked once per pass, and each vector's accumulator sees exactly the
// operations it sees alone; the scalar ends (bias terms, float tails) are functions shared by every
// vector count, their multiply-adds written as the fmaf the compiler fused them into before.
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/isa_table.h"

namespace sluice::kernels::cpu::avx2 {
namespace {

inline int64_t min_i64(int64_t a, int64_t b) {
    return a < b ? a : b;
}

inline float load_scale(const void* base, ScaleType type, int64_t index) {
    uint16_t h;
    switch (type) {
        case ScaleType::kF32: {
            float f;
            memcpy(&f, static_cast<const float*>(base) + index, 4);
            return f;
        }
        case ScaleType::kBF16: {
            memcpy(&h, static_cast<const uint16_t*>(base) + index, 2);
            const uint32_t bits = static_cast<uint32_t>(h) << 16;
            float f;
            memcpy(&f, &bits, 4);
            return f;
        }
        case ScaleType::kF16: memcpy(&h, static_cast<const uint16_t*>(base) + index, 2); return _cvtsh_ss(h);
    }
    return 0.0f;
}

// Mask vector selecting the first n (<= 8) int32 lanes.
inline __m256i lane_mask(int64_t n) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), iota);
}

// 8 float weights (full) starting at element index.
inline __m256 load_weights8(const void* base, WeightType type, int64_t index) {
    switch (type) {
        case WeightType::kF32: return _mm256_loadu_ps(static_cast<const float*>(base) + index);
        case WeightType::kBF16: {
            const __m128i h =
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + index));
            return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        }
        case WeightType::kF16:
            return _mm256_cvtph_ps(_mm_loadu_si128(
                reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + index)));
        default: return _mm256_setzero_ps();
    }
}

inline float load_weight1(const void* base, WeightType type, int64_t index) {
    uint16_t h;
    switch (type) {
        case WeightType::kF32: {
            float f;
            memcpy(&f, static_cast<const float*>(base) + index, 4);
            return f;
        }
        case WeightType::kBF16: return load_scale(base, ScaleType::kBF16, index);
        case WeightType::kF16: memcpy(&h, static_cast<const uint16_t*>(base) + index, 2); return _cvtsh_ss(h);
        default: return 0.0f;
    }
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

template <int kBits>
struct QuantLayout {
    static constexpr int kPerWord = 32 / kBits;
    static constexpr int kBlock = 8 * kPerWord;
    static constexpr uint32_t kMask = (1u << kBits) - 1u;
};

template <int kBits>
void prepare_x_impl(const WeightView& w, const float* x, float* xp) {
    using L = QuantLayout<kBits>;
    for (int64_t base = 0; base < w.cols; base += L::kBlock) {
        const int64_t nw = min_i64(8, (w.cols - base) / L::kPerWord);
        for (int k = 0; k < L::kPerWord; ++k)
            for (int64_t j = 0; j < 8; ++j)
                xp[base + 8 * k + j] = j < nw ? x[base + L::kPerWord * j + k] : 0.0f;
    }
}

// Σ_g b_g · xsum[g] of row r. The scalar ends of the row kernels (this, i8_tail, float_tail) spell
// their multiply-adds as fmaf, the fused form the compiler gave them before they were shared by every
// vector count: no caller's contraction choice can make one vector count round differently.
inline float bias_term(const WeightView& w, int64_t r, const float* xsum) {
    const int64_t groups = w.cols / w.group_size;
    float bias = 0.0f;
    for (int64_t g = 0; g < groups; ++g)
        bias = fmaf(load_scale(w.biases, w.scale_type, r * groups + g), xsum[g], bias);
    return bias;
}

// Row r × vectors [j0, j0 + kVecs) of v (y: row r's results of vector 0): each 8-word block loaded and
// its codes isolated and converted once for the kVecs vectors, each vector's chain the one it has alone.
template <int kBits, int kVecs>
inline void quant_row(const WeightView& w, const RowVectors& v, int64_t j0, int64_t r, float* y) {
    using L = QuantLayout<kBits>;
    const int64_t cols = w.cols, gs = w.group_size, groups = cols / gs;
    const int64_t words_per_row = cols / L::kPerWord;
    const bool two_scales = gs < L::kBlock;  // then exactly 2 groups per block (gs >= 32)
    // Lanes of the second group of a block when it holds two.
    const __m256 second = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, -1, -1, -1, -1));
    const __m256i mask = _mm256_set1_epi32(static_cast<int>(L::kMask));
    const float* xp[kVecs];
    for (int j = 0; j < kVecs; ++j)
        xp[j] =
            reinterpret_cast<const float*>(static_cast<const uint8_t*>(v.x) + (j0 + j) * v.x_stride_bytes);
    const uint32_t* words = static_cast<const uint32_t*>(w.data) + r * words_per_row;
    __m256 acc[kVecs];
    for (int j = 0; j < kVecs; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t base = 0; base < cols; base += L::kBlock) {
        const int64_t nw = min_i64(8, (cols - base) / L::kPerWord);
        const int* src = reinterpret_cast<const int*>(words + base / L::kPerWord);
        const __m256i wv = nw == 8 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))
                                   : _mm256_maskload_epi32(src, lane_mask(nw));
        __m256 t0[kVecs], t1[kVecs];
        {
            const __m256 c0 = _mm256_cvtepi32_ps(_mm256_and_si256(wv, mask));
            const __m256 c1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(wv, kBits), mask));
            for (int j = 0; j < kVecs; ++j) {
                t0[j] = _mm256_mul_ps(c0, _mm256_loadu_ps(xp[j] + base));
                t1[j] = _mm256_mul_ps(c1, _mm256_loadu_ps(xp[j] + base + 8));
            }
        }
        for (int k = 2; k < L::kPerWord; k += 2) {
            const __m256 c0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(wv, kBits * k), mask));
            const __m256 c1 =
                _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(wv, kBits * (k + 1)), mask));
            for (int j = 0; j < kVecs; ++j) {
                t0[j] = _mm256_fmadd_ps(c0, _mm256_loadu_ps(xp[j] + base + 8 * k), t0[j]);
                t1[j] = _mm256_fmadd_ps(c1, _mm256_loadu_ps(xp[j] + base + 8 * (k + 1)), t1[j]);
            }
        }
        const int64_t g0 = r * groups + base / gs;
        __m256 sv = _mm256_set1_ps(load_scale(w.scales, w.scale_type, g0));
        if (two_scales && nw > 4)
            sv = _mm256_blendv_ps(sv, _mm256_set1_ps(load_scale(w.scales, w.scale_type, g0 + 1)), second);
        for (int j = 0; j < kVecs; ++j) acc[j] = _mm256_fmadd_ps(_mm256_add_ps(t0[j], t1[j]), sv, acc[j]);
    }
    // Unrolled: the partial sums stay in registers (a loop indexing them would keep them in memory).
#pragma GCC unroll 4
    for (int j = 0; j < kVecs; ++j)
        y[(j0 + j) * v.ldy] = hsum(acc[j]) + bias_term(w, r, v.sums + (j0 + j) * v.sums_stride);
}

// Rows one at a time, their vectors in passes of at most 4 (kFirst, then kSecond: 3·4 ymm partial sums
// of the 16 registers per pass); the row stays in L1 between the passes.
template <int kBits, int kFirst, int kSecond>
void quant_rows_vecs(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        quant_row<kBits, kFirst>(w, v, 0, r, v.y + (r - r0));
        if constexpr (kSecond > 0) quant_row<kBits, kSecond>(w, v, kFirst, r, v.y + (r - r0));
    }
}

template <int kBits>
void matvec_quant_impl(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    switch (v.n) {
        case 1: quant_rows_vecs<kBits, 1, 0>(w, v, r0, r1); break;
        case 2: quant_rows_vecs<kBits, 2, 0>(w, v, r0, r1); break;
        case 3: quant_rows_vecs<kBits, 3, 0>(w, v, r0, r1); break;
        case 4: quant_rows_vecs<kBits, 4, 0>(w, v, r0, r1); break;
        case 5: quant_rows_vecs<kBits, 4, 1>(w, v, r0, r1); break;
        case 6: quant_rows_vecs<kBits, 4, 2>(w, v, r0, r1); break;
        case 7: quant_rows_vecs<kBits, 4, 3>(w, v, r0, r1); break;
        default: quant_rows_vecs<kBits, 4, 4>(w, v, r0, r1); break;
    }
}

// 8 codes starting at input i (a multiple of 8), natural order, as int32 lanes.
template <int kBits>
inline __m256i codes8(const uint32_t* words, int64_t i) {
    if constexpr (kBits == 4) {
        int word;  // a memcpy load: codes sit at the checkpoint's offsets, not always 4-byte aligned
        memcpy(&word, words + i / 8, 4);
        const __m128i bytes = _mm_cvtsi32_si128(word);
        const __m128i lo = _mm_and_si128(bytes, _mm_set1_epi8(0x0f));
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0f));
        return _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    } else {
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(words + i / 4)));
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
            const __m256 s = _mm256_set1_ps(load_scale(w.scales, w.scale_type, r * groups + g));
            const __m256 b = _mm256_set1_ps(load_scale(w.biases, w.scale_type, r * groups + g));
            for (int64_t i = g * gs; i < (g + 1) * gs; i += 8)
                _mm256_storeu_ps(out + i, _mm256_fmadd_ps(_mm256_cvtepi32_ps(codes8<kBits>(words, i)), s, b));
        }
    }
}

template <int R, int T>
inline void gemm_micro(const float* wt, int64_t ldw, const float* x, int64_t cols, float* y, int64_t ldy) {
    __m256 acc[R][T];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= cols; i += 8) {
        __m256 wv[R];
        for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(wt + r * ldw + i);
        for (int t = 0; t < T; ++t) {
            const __m256 xv = _mm256_loadu_ps(x + t * cols + i);
            for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) {
            float s = hsum(acc[r][t]);
            for (int64_t j = i; j < cols; ++j) s += wt[r * ldw + j] * x[t * cols + j];
            y[t * ldy + r] = s;
        }
}

template <int R>
inline void gemm_rows(const float* wt, int64_t ldw, const float* x, int64_t n, int64_t cols, float* y,
                      int64_t ldy) {
    int64_t t = 0;
    for (; t + 2 <= n; t += 2) gemm_micro<R, 2>(wt, ldw, x + t * cols, cols, y + t * ldy, ldy);
    if (t < n) gemm_micro<R, 1>(wt, ldw, x + t * cols, cols, y + t * ldy, ldy);
}

// ---- int8 activations -----------------------------------------------------------------------------
// Prepared x, per chunk of one 32-byte row load (kCodes codes): the int8 codes (Q4: even codes' x,
// then odd codes' x; Q8: natural order), then 8 f32 lane scales (lane L: row bytes 4L..4L+3).
template <int kBits>
struct I8Layout {
    static constexpr int64_t kCodes = kBits == 4 ? 64 : 32;
    static constexpr int64_t kChunkBytes = kCodes + 32;
    static constexpr int64_t kCodesPerLane = kCodes / 8;
};

template <int kBits>
void i8_prepare_impl(const WeightView& w, const float* x, uint8_t* prep, float* xs) {
    using L = I8Layout<kBits>;
    const int64_t cols = w.cols, per_group = w.group_size / 32;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int32_t q[64];
    float d[2];
    for (int64_t c0 = 0, ci = 0; c0 < cols; c0 += L::kCodes, ++ci) {
        const int64_t here = min_i64(L::kCodes, cols - c0);
        uint8_t* out = prep + ci * L::kChunkBytes;
        for (int64_t b = 0; b < L::kCodes / 32; ++b) {
            if (b * 32 >= here) {
                for (int i = 0; i < 32; ++i) q[b * 32 + i] = 0;
                d[b] = 0.0f;
                continue;
            }
            const float* xb = x + c0 + b * 32;
            __m256 m = _mm256_setzero_ps();
            for (int i = 0; i < 32; i += 8)
                m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)));
            __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
            h = _mm_max_ps(h, _mm_movehl_ps(h, h));
            h = _mm_max_ss(h, _mm_movehdup_ps(h));
            const float amax = _mm_cvtss_f32(h);
            d[b] = amax / 127.0f;
            const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
            int32_t sum = 0;
            for (int i = 0; i < 32; i += 8)
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * 32 + i),
                                    _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + i), id)));
            for (int i = 0; i < 32; ++i) sum += q[b * 32 + i];
            const int64_t g = (c0 + b * 32) / 32 / per_group;
            if ((c0 / 32 + b) % per_group == 0) xs[g] = 0.0f;
            xs[g] += d[b] * static_cast<float>(sum);
        }
        int8_t* o = reinterpret_cast<int8_t*>(out);
        if constexpr (kBits == 4) {
            for (int j = 0; j < 32; ++j) {
                o[j] = static_cast<int8_t>(q[2 * j]);
                o[32 + j] = static_cast<int8_t>(q[2 * j + 1]);
            }
        } else {
            for (int j = 0; j < 32; ++j) o[j] = static_cast<int8_t>(q[j]);
        }
        float* dl = reinterpret_cast<float*>(out + L::kCodes);
        for (int64_t lane = 0; lane < 8; ++lane) dl[lane] = d[lane * L::kCodesPerLane / 32];
    }
}

// Σ_g (b_g [+ 128·s_g for 8-bit codes]) · xs[g] of row r (fmaf: see bias_term).
template <int kBits>
inline float i8_tail(const WeightView& w, int64_t r, const float* xs) {
    const int64_t groups = w.cols / w.group_size;
    float tail = 0.0f;
    for (int64_t g = 0; g < groups; ++g) {
        float b = load_scale(w.biases, w.scale_type, r * groups + g);
        if constexpr (kBits == 8) b = fmaf(128.0f, load_scale(w.scales, w.scale_type, r * groups + g), b);
        tail = fmaf(b, xs[g], tail);
    }
    return tail;
}

// Row r × vectors [j0, j0 + kVecs) of v: each 32-byte chunk loaded and split once for the kVecs
// vectors; each vector's maddubs/madd sums (exact integers), FMA by d × scale in chunk order, reduction
// and tail are the ones it has alone.
template <int kBits, int kVecs>
inline void i8_row(const WeightView& w, const RowVectors& v, int64_t j0, int64_t r, float* y) {
    using L = I8Layout<kBits>;
    const int64_t cols = w.cols, gs = w.group_size, groups = cols / gs;
    const int64_t row_bytes = cols * kBits / 8;
    const bool two_scales = kBits == 4 && gs == 32;  // a 64-code chunk spans two groups
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const uint8_t* prep[kVecs];
    for (int j = 0; j < kVecs; ++j) prep[j] = static_cast<const uint8_t*>(v.x) + (j0 + j) * v.x_stride_bytes;
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * row_bytes;
    __m256 acc[kVecs];
    for (int j = 0; j < kVecs; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t at = 0, ci = 0; at < row_bytes; at += 32, ++ci) {
        const __m256i wv =
            row_bytes - at >= 32
                ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + at))
                : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + at)));
        const int64_t g0 = ci * L::kCodes / gs;
        const float s0 = load_scale(w.scales, w.scale_type, r * groups + g0);
        const float s1 =
            two_scales && g0 + 1 < groups ? load_scale(w.scales, w.scale_type, r * groups + g0 + 1) : s0;
        const __m256 sv = _mm256_set_m128(_mm_set1_ps(s1), _mm_set1_ps(s0));
        // Q4: the low and high nibbles; Q8: |code − 128| and the code − 128 whose sign x takes.
        __m256i wa, wb;
        if constexpr (kBits == 4) {
            wa = _mm256_and_si256(wv, low4);
            wb = _mm256_and_si256(_mm256_srli_epi16(wv, 4), low4);
        } else {
            wb = _mm256_xor_si256(wv, _mm256_set1_epi8(static_cast<char>(0x80)));
            wa = _mm256_abs_epi8(wb);
        }
        for (int j = 0; j < kVecs; ++j) {
            const uint8_t* xc = prep[j] + ci * L::kChunkBytes;
            __m256i p;
            if constexpr (kBits == 4) {
                p = _mm256_add_epi16(
                    _mm256_maddubs_epi16(wa, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc))),
                    _mm256_maddubs_epi16(wb, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + 32))));
            } else {
                p = _mm256_maddubs_epi16(
                    wa, _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc)), wb));
            }
            const __m256i s = _mm256_madd_epi16(p, ones);
            const __m256 dl = _mm256_loadu_ps(reinterpret_cast<const float*>(xc + L::kCodes));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dl, sv), acc[j]);
        }
    }
    // Unrolled: the partial sums stay in registers (a loop indexing them would keep them in memory).
#pragma GCC unroll 4
    for (int j = 0; j < kVecs; ++j)
        y[(j0 + j) * v.ldy] = hsum(acc[j]) + i8_tail<kBits>(w, r, v.sums + (j0 + j) * v.sums_stride);
}

// Rows one at a time, their vectors in passes of at most 4 (as quant_rows_vecs).
template <int kBits, int kFirst, int kSecond>
void i8_rows_vecs(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        i8_row<kBits, kFirst>(w, v, 0, r, v.y + (r - r0));
        if constexpr (kSecond > 0) i8_row<kBits, kSecond>(w, v, kFirst, r, v.y + (r - r0));
    }
}

template <int kBits>
void i8_matvec_impl(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    switch (v.n) {
        case 1: i8_rows_vecs<kBits, 1, 0>(w, v, r0, r1); break;
        case 2: i8_rows_vecs<kBits, 2, 0>(w, v, r0, r1); break;
        case 3: i8_rows_vecs<kBits, 3, 0>(w, v, r0, r1); break;
        case 4: i8_rows_vecs<kBits, 4, 0>(w, v, r0, r1); break;
        case 5: i8_rows_vecs<kBits, 3, 2>(w, v, r0, r1); break;
        case 6: i8_rows_vecs<kBits, 3, 3>(w, v, r0, r1); break;
        case 7: i8_rows_vecs<kBits, 4, 3>(w, v, r0, r1); break;
        default: i8_rows_vecs<kBits, 4, 4>(w, v, r0, r1); break;
    }
}

// The scalar end of a float row's dot product (columns past the last 8; fmaf: see bias_term).
inline float float_tail(const WeightView& w, int64_t r, int64_t i, const float* x, float s) {
    const int64_t cols = w.cols;
    for (; i < cols; ++i) s = fmaf(load_weight1(w.data, w.type, r * cols + i), x[i], s);
    return s;
}

// Float weights, row r × vectors [j0, j0 + kVecs): 8 weights loaded and widened once for the kVecs
// vectors; each vector's two FMA chains, reduction and scalar tail are the ones it has alone.
template <int kVecs>
inline void float_row(const WeightView& w, const RowVectors& v, int64_t j0, int64_t r, float* y) {
    const int64_t cols = w.cols;
    const float* x[kVecs];
    for (int j = 0; j < kVecs; ++j)
        x[j] = reinterpret_cast<const float*>(static_cast<const uint8_t*>(v.x) + (j0 + j) * v.x_stride_bytes);
    __m256 a0[kVecs], a1[kVecs];
    for (int j = 0; j < kVecs; ++j) a0[j] = a1[j] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= cols; i += 16) {
        const __m256 w0 = load_weights8(w.data, w.type, r * cols + i);
        const __m256 w1 = load_weights8(w.data, w.type, r * cols + i + 8);
        for (int j = 0; j < kVecs; ++j) {
            a0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[j] + i), a0[j]);
            a1[j] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[j] + i + 8), a1[j]);
        }
    }
    for (; i + 8 <= cols; i += 8) {
        const __m256 w0 = load_weights8(w.data, w.type, r * cols + i);
        for (int j = 0; j < kVecs; ++j) a0[j] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[j] + i), a0[j]);
    }
    // Unrolled: the partial sums stay in registers (a loop indexing them would keep them in memory).
#pragma GCC unroll 4
    for (int j = 0; j < kVecs; ++j)
        y[(j0 + j) * v.ldy] = float_tail(w, r, i, x[j], hsum(_mm256_add_ps(a0[j], a1[j])));
}

template <int kFirst, int kSecond>
void float_rows_vecs(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        float_row<kFirst>(w, v, 0, r, v.y + (r - r0));
        if constexpr (kSecond > 0) float_row<kSecond>(w, v, kFirst, r, v.y + (r - r0));
    }
}
}  // namespace

int64_t prepared_x_floats(const WeightView& w) {
    const int64_t block = w.type == WeightType::kQ4 ? 64 : 32;
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
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < gs; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + g * gs + i));
        xsum[g] = hsum(acc);
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
        case 1: float_rows_vecs<1, 0>(w, v, r0, r1); break;
        case 2: float_rows_vecs<2, 0>(w, v, r0, r1); break;
        case 3: float_rows_vecs<3, 0>(w, v, r0, r1); break;
        case 4: float_rows_vecs<4, 0>(w, v, r0, r1); break;
        case 5: float_rows_vecs<4, 1>(w, v, r0, r1); break;
        case 6: float_rows_vecs<4, 2>(w, v, r0, r1); break;
        case 7: float_rows_vecs<4, 3>(w, v, r0, r1); break;
        default: float_rows_vecs<4, 4>(w, v, r0, r1); break;
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
    for (int64_t r = r0; r < r1; ++r) {
        float* out = tile + (r - r0) * cols;
        int64_t i = 0;
        for (; i + 8 <= cols; i += 8) _mm256_storeu_ps(out + i, load_weights8(w.data, w.type, r * cols + i));
        for (; i < cols; ++i) out[i] = load_weight1(w.data, w.type, r * cols + i);
    }
}

int64_t i8_prepared_bytes(const WeightView& w) {
    const int64_t codes = w.type == WeightType::kQ4 ? I8Layout<4>::kCodes : I8Layout<8>::kCodes;
    const int64_t chunk = w.type == WeightType::kQ4 ? I8Layout<4>::kChunkBytes : I8Layout<8>::kChunkBytes;
    return ((w.cols + codes - 1) / codes * chunk + 63) / 64 * 64;
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

}  // namespace sluice::kernels::cpu::avx2
