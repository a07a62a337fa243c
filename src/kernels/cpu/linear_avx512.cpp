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
// dispatch.cpp): group_size a power of two >= 32, cols a multiple of it. Rejected alternative: quantizing x
// to int8 and using VNNI — faster compute, but it changes the result beyond the f32 tolerance the model is
// validated with, and decode is memory-bound anyway. GCC 12's _mm512_reduce_add_ps reads
// _mm256_undefined_pd() and trips -Wuninitialized (a false positive in the intrinsics header, fixed in later
// GCC).
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

// Σ_g scale_type(b[g]) · xsum[g] over n groups.
inline float bias_dot(const void* biases, ScaleType type, int64_t index, const float* xsum, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t g = 0; g < n; g += 16) {
        const int64_t len = min_i64(16, n - g);
        acc = _mm512_fmadd_ps(load_scales(biases, type, index + g, len),
                              _mm512_maskz_loadu_ps(first_lanes(len), xsum + g), acc);
    }
    return _mm512_reduce_add_ps(acc);
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

// kRows consecutive rows at once (the lane-order x is loaded once per block for all of them, and
// the rows give independent FMA chains).
template <int kBits, int kRows>
inline void matvec_quant_rows_n(const WeightView& w, const float* xp, const float* xsum, int64_t r,
                                __m512i scale_lane, float* y) {
    using L = QuantLayout<kBits>;
    const int64_t cols = w.cols, gs = w.group_size, groups = cols / gs;
    const int64_t words_per_row = cols / L::kPerWord;
    const int64_t scales_per_block = gs < L::kBlock ? L::kBlock / gs : 1;
    const uint32_t* words = static_cast<const uint32_t*>(w.data) + r * words_per_row;
    __m512 acc[kRows];
    for (int i = 0; i < kRows; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t base = 0; base < cols; base += L::kBlock) {
        const int64_t nw = min_i64(16, (cols - base) / L::kPerWord);
        __m512i wv[kRows];
        for (int i = 0; i < kRows; ++i) {
            const uint32_t* src = words + i * words_per_row + base / L::kPerWord;
            wv[i] = nw == 16 ? _mm512_loadu_si512(src) : _mm512_maskz_loadu_epi32(first_lanes(nw), src);
        }
        const float* xb = xp + base;
        // Code k in place: (word & (mask << bits·k)) converted as unsigned is q·2^(bits·k), exact
        // in f32 (at most 8 significant bits); xp carries the 2^-(bits·k) factor. One AND, one
        // convert and one FMA per 16 weights.
        __m512 t[kRows];
        for (int i = 0; i < kRows; ++i) t[i] = _mm512_setzero_ps();
        for (int k = 0; k < L::kPerWord; ++k) {
            const __m512i m = _mm512_set1_epi32(static_cast<int>(L::kMask << (kBits * k)));
            const __m512 xv = _mm512_loadu_ps(xb + 16 * k);
            for (int i = 0; i < kRows; ++i)
                t[i] = _mm512_fmadd_ps(_mm512_cvtepu32_ps(_mm512_and_si512(wv[i], m)), xv, t[i]);
        }
        const int64_t g0 = base / gs;
        for (int i = 0; i < kRows; ++i) {
            const __m512 sv =
                _mm512_permutexvar_ps(scale_lane, load_scales(w.scales, w.scale_type, (r + i) * groups + g0,
                                                              min_i64(scales_per_block, groups - g0)));
            acc[i] = _mm512_fmadd_ps(t[i], sv, acc[i]);
        }
    }
    for (int i = 0; i < kRows; ++i)
        y[i] =
            _mm512_reduce_add_ps(acc[i]) + bias_dot(w.biases, w.scale_type, (r + i) * groups, xsum, groups);
}

template <int kBits>
void matvec_quant_impl(const WeightView& w, const float* xp, const float* xsum, int64_t r0, int64_t r1,
                       float* y) {
    using L = QuantLayout<kBits>;
    alignas(64) int32_t idx[16];
    for (int j = 0; j < 16; ++j) idx[j] = static_cast<int32_t>((L::kPerWord * j) / w.group_size);
    const __m512i scale_lane = _mm512_load_si512(idx);
    int64_t r = r0;
    for (; r + 2 <= r1; r += 2) matvec_quant_rows_n<kBits, 2>(w, xp, xsum, r, scale_lane, y + (r - r0));
    if (r < r1) matvec_quant_rows_n<kBits, 1>(w, xp, xsum, r, scale_lane, y + (r - r0));
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

void matvec_quant_rows(const WeightView& w, const float* xp, const float* xsum, int64_t r0, int64_t r1,
                       float* y) {
    if (w.type == WeightType::kQ4) {
        matvec_quant_impl<4>(w, xp, xsum, r0, r1, y);
    } else {
        matvec_quant_impl<8>(w, xp, xsum, r0, r1, y);
    }
}

void matvec_float_rows(const WeightView& w, const float* x, int64_t r0, int64_t r1, float* y) {
    const int64_t cols = w.cols;
    for (int64_t r = r0; r < r1; ++r) {
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 32 <= cols; i += 32) {
            a0 = _mm512_fmadd_ps(load_weights(w.data, w.type, r * cols + i, 16), _mm512_loadu_ps(x + i), a0);
            a1 = _mm512_fmadd_ps(load_weights(w.data, w.type, r * cols + i + 16, 16),
                                 _mm512_loadu_ps(x + i + 16), a1);
        }
        for (; i < cols; i += 16) {
            const int64_t len = min_i64(16, cols - i);
            a0 = _mm512_fmadd_ps(load_weights(w.data, w.type, r * cols + i, len),
                                 _mm512_maskz_loadu_ps(first_lanes(len), x + i), a0);
        }
        y[r - r0] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
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
