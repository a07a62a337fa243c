// AVX2 (+FMA, F16C) dot products of one ggml-quantized row with f32 x (kernels/ggml_quants.h).
// Scheme, every type: a block's codes are unpacked to bytes (nibbles by mask and shift, Q5_K's and
// Q6_K's high bits or-ed in, IQ4/MXFP4 codebooks by pshufb), widened 8 at a time to f32 and
// multiplied with x into a per-(sub-)block vector sum; that sum meets its scale once
// (acc += d·Σq·x), and K-quant mins their Σx (accm += dmin·m·Σx). One horizontal sum per row.
// Against the twin (dequantize then dot) only the rounding differs: the weights are never formed,
// and the sums run in lanes. Rejected: quantizing x to int8 as ggml does (vpmaddubsw) — faster, but
// a different product (x's rounding), which is the int8-activation path's job (kernels.h).
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/ggml_dot_isa.h"

#if defined(__x86_64__)
namespace sluice::kernels::cpu {
namespace {

#include "kernels/cpu/ggml_block_load.inc"

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// kernels::e8m0_to_f32_half, inlined.
// Bytes 0..7 / 8..15 of v (signed) as 8 floats.
inline __m256 lo8_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}
inline __m256 hi8_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v)));
}

// Σ over 16 int8 codes q (one xmm) times x[0..16), as 8 lanes, added to s.
inline __m256 dot16(__m128i q, const float* x, __m256 s) {
    s = _mm256_fmadd_ps(lo8_ps(q), _mm256_loadu_ps(x), s);
    return _mm256_fmadd_ps(hi8_ps(q), _mm256_loadu_ps(x + 8), s);
}

inline __m256 sum16(const float* x, __m256 s) {
    return _mm256_add_ps(s, _mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)));
}

inline __m128i low_nibbles(__m128i v) {
    return _mm_and_si128(v, _mm_set1_epi8(0x0F));
}
inline __m128i high_nibbles(__m128i v) {
    return _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F));
}

// The 6-bit scales and mins of a Q4_K / Q5_K block, times d and dmin.
inline void k4_scales(const uint8_t* block, float* dsc, float* dm) {
    const float d = f16_at(block), dmin = f16_at(block + 2);
    const uint8_t* q = block + 4;
    for (int s = 0; s < 8; ++s) {
        int sc, m;
        if (s < 4) {
            sc = q[s] & 63;
            m = q[s + 4] & 63;
        } else {
            sc = (q[s + 4] & 0x0F) | ((q[s - 4] >> 6) << 4);
            m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
        }
        dsc[s] = d * static_cast<float>(sc);
        dm[s] = dmin * static_cast<float>(m);
    }
}

float dot_q8_0(const void* row, const float* x, int64_t cols) {
    const auto* b = static_cast<const uint8_t*>(row);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const int64_t nb = cols / 32;
    for (int64_t i = 0; i < nb; ++i, b += 34, x += 32) {
        __m256 s = _mm256_mul_ps(lo8_ps(load16(b + 2)), _mm256_loadu_ps(x));
        s = _mm256_fmadd_ps(hi8_ps(load16(b + 2)), _mm256_loadu_ps(x + 8), s);
        s = dot16(load16(b + 18), x + 16, s);
        if (i & 1) {
            acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(b)), s, acc1);
        } else {
            acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16_at(b)), s, acc0);
        }
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

// Q4_0, IQ4_NL and MXFP4 share a layout: a scale, then 16 bytes of nibbles (elements j, j + 16).
// `table` maps a nibble to its value (Q4_0: q − 8).
inline float dot_nibble_blocks(const uint8_t* b, const float* x, int64_t cols, int block_bytes, __m128i table,
                               bool e8m0_scale) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const int64_t nb = cols / 32;
    const int skip = e8m0_scale ? 1 : 2;
    for (int64_t i = 0; i < nb; ++i, b += block_bytes, x += 32) {
        const __m128i v = load16(b + skip);
        const __m128i lo = _mm_shuffle_epi8(table, low_nibbles(v));
        const __m128i hi = _mm_shuffle_epi8(table, high_nibbles(v));
        __m256 s = _mm256_mul_ps(lo8_ps(lo), _mm256_loadu_ps(x));
        s = _mm256_fmadd_ps(hi8_ps(lo), _mm256_loadu_ps(x + 8), s);
        s = dot16(hi, x + 16, s);
        const float d = e8m0_scale ? e8m0_half(b[0]) : f16_at(b);
        if (i & 1) {
            acc1 = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc1);
        } else {
            acc0 = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc0);
        }
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

float dot_q4_0(const void* row, const float* x, int64_t cols) {
    const __m128i table = _mm_setr_epi8(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    return dot_nibble_blocks(static_cast<const uint8_t*>(row), x, cols, 18, table, false);
}

float dot_iq4_nl(const void* row, const float* x, int64_t cols) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
    return dot_nibble_blocks(static_cast<const uint8_t*>(row), x, cols, 18, table, false);
}

float dot_mxfp4(const void* row, const float* x, int64_t cols) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
    return dot_nibble_blocks(static_cast<const uint8_t*>(row), x, cols, 17, table, true);
}

// Q4_K / Q5_K: per 64-element chunk c, sub-block 2c is the low nibbles of qs[32c..32c+32) and
// 2c+1 the high ones; Q5_K ors in bit 2c / 2c+1 of qh[l] as 16.
inline float dot_k4(const uint8_t* b, const float* x, int64_t cols, bool five_bit) {
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    const int block_bytes = five_bit ? 176 : 144;
    const __m128i sixteen = _mm_set1_epi8(16);
    for (int64_t i = 0; i < cols / 256; ++i, b += block_bytes, x += 256) {
        float dsc[8], dm[8];
        k4_scales(b, dsc, dm);
        const uint8_t* qh = b + 16;
        const uint8_t* qs = b + (five_bit ? 48 : 16);
        const __m128i h0 = load16(qh), h1 = load16(qh + 16);
        for (int c = 0; c < 4; ++c) {
            const __m128i v0 = load16(qs + 32 * c), v1 = load16(qs + 32 * c + 16);
            __m128i lo0 = low_nibbles(v0), lo1 = low_nibbles(v1);
            __m128i hi0 = high_nibbles(v0), hi1 = high_nibbles(v1);
            if (five_bit) {
                const __m128i m_lo = _mm_set1_epi8(static_cast<char>(1 << (2 * c)));
                const __m128i m_hi = _mm_set1_epi8(static_cast<char>(2 << (2 * c)));
                lo0 =
                    _mm_or_si128(lo0, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h0, m_lo), m_lo), sixteen));
                lo1 =
                    _mm_or_si128(lo1, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h1, m_lo), m_lo), sixteen));
                hi0 =
                    _mm_or_si128(hi0, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h0, m_hi), m_hi), sixteen));
                hi1 =
                    _mm_or_si128(hi1, _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(h1, m_hi), m_hi), sixteen));
            }
            const float* xc = x + 64 * c;
            __m256 s_lo = _mm256_mul_ps(lo8_ps(lo0), _mm256_loadu_ps(xc));
            s_lo = _mm256_fmadd_ps(hi8_ps(lo0), _mm256_loadu_ps(xc + 8), s_lo);
            s_lo = dot16(lo1, xc + 16, s_lo);
            __m256 s_hi = _mm256_mul_ps(lo8_ps(hi0), _mm256_loadu_ps(xc + 32));
            s_hi = _mm256_fmadd_ps(hi8_ps(hi0), _mm256_loadu_ps(xc + 40), s_hi);
            s_hi = dot16(hi1, xc + 48, s_hi);
            const __m256 x_lo = sum16(xc + 16, _mm256_add_ps(_mm256_loadu_ps(xc), _mm256_loadu_ps(xc + 8)));
            const __m256 x_hi =
                sum16(xc + 48, _mm256_add_ps(_mm256_loadu_ps(xc + 32), _mm256_loadu_ps(xc + 40)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dsc[2 * c]), s_lo, acc);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dsc[2 * c + 1]), s_hi, acc);
            accm = _mm256_fmadd_ps(_mm256_set1_ps(dm[2 * c]), x_lo, accm);
            accm = _mm256_fmadd_ps(_mm256_set1_ps(dm[2 * c + 1]), x_hi, accm);
        }
    }
    return hsum(_mm256_sub_ps(acc, accm));
}

float dot_q4_k(const void* row, const float* x, int64_t cols) {
    return dot_k4(static_cast<const uint8_t*>(row), x, cols, false);
}

float dot_q5_k(const void* row, const float* x, int64_t cols) {
    return dot_k4(static_cast<const uint8_t*>(row), x, cols, true);
}

// Q6_K: per 128-element half h and 16-element group g, the codes of elements 32k + 16g + (0..16)
// (k = 0..3: sub-block 8h + 2k + g) from ql[64h + 16g], ql[64h + 32 + 16g] and qh[32h + 16g].
float dot_q6_k(const void* row, const float* x, int64_t cols) {
    const auto* b = static_cast<const uint8_t*>(row);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    const __m128i m4 = _mm_set1_epi8(0x0F), m30 = _mm_set1_epi8(0x30), k32 = _mm_set1_epi8(32);
    for (int64_t i = 0; i < cols / 256; ++i, b += 210, x += 256) {
        const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
        const float d = f16_at(b + 208);
        for (int h = 0; h < 2; ++h) {
            for (int g = 0; g < 2; ++g) {
                const __m128i vlo = load16(b + 64 * h + 16 * g);
                const __m128i vhi = load16(b + 64 * h + 32 + 16 * g);
                const __m128i top = load16(b + 128 + 32 * h + 16 * g);
                __m128i q[4];
                q[0] = _mm_or_si128(_mm_and_si128(vlo, m4), _mm_and_si128(_mm_slli_epi16(top, 4), m30));
                q[1] = _mm_or_si128(_mm_and_si128(vhi, m4), _mm_and_si128(_mm_slli_epi16(top, 2), m30));
                q[2] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(vlo, 4), m4), _mm_and_si128(top, m30));
                q[3] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(vhi, 4), m4),
                                    _mm_and_si128(_mm_srli_epi16(top, 2), m30));
                for (int k = 0; k < 4; ++k) {
                    const __m128i qk = _mm_sub_epi8(q[k], k32);
                    const float* xk = x + 128 * h + 32 * k + 16 * g;
                    __m256 s = _mm256_mul_ps(lo8_ps(qk), _mm256_loadu_ps(xk));
                    s = _mm256_fmadd_ps(hi8_ps(qk), _mm256_loadu_ps(xk + 8), s);
                    const __m256 dsc = _mm256_set1_ps(d * static_cast<float>(scales[8 * h + 2 * k + g]));
                    if (k & 1) {
                        acc1 = _mm256_fmadd_ps(dsc, s, acc1);
                    } else {
                        acc0 = _mm256_fmadd_ps(dsc, s, acc0);
                    }
                }
            }
        }
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

// IQ4_XS: 8 sub-blocks of 32, scale d·(ls − 32), the IQ4_NL codebook over 16 bytes each.
float dot_iq4_xs(const void* row, const float* x, int64_t cols) {
    const auto* b = static_cast<const uint8_t*>(row);
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < cols / 256; ++i, b += 136, x += 256) {
        const float d = f16_at(b);
        uint16_t scales_h;
        memcpy(&scales_h, b + 2, 2);
        for (int s = 0; s < 8; ++s) {
            const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0x0F) | (((scales_h >> (2 * s)) & 3) << 4);
            const __m128i v = load16(b + 8 + 16 * s);
            const __m128i lo = _mm_shuffle_epi8(table, low_nibbles(v));
            const __m128i hi = _mm_shuffle_epi8(table, high_nibbles(v));
            const float* xs = x + 32 * s;
            __m256 sum = _mm256_mul_ps(lo8_ps(lo), _mm256_loadu_ps(xs));
            sum = _mm256_fmadd_ps(hi8_ps(lo), _mm256_loadu_ps(xs + 8), sum);
            sum = dot16(hi, xs + 16, sum);
            const __m256 dl = _mm256_set1_ps(d * static_cast<float>(ls - 32));
            if (s & 1) {
                acc1 = _mm256_fmadd_ps(dl, sum, acc1);
            } else {
                acc0 = _mm256_fmadd_ps(dl, sum, acc0);
            }
        }
    }
    return hsum(_mm256_add_ps(acc0, acc1));
}

}  // namespace

const GgmlDotTable kGgmlDotAvx2 = {
    "avx2", dot_q4_0, dot_q8_0, dot_q4_k, dot_q5_k, dot_q6_k, dot_iq4_nl, dot_iq4_xs, dot_mxfp4,
};

}  // namespace sluice::kernels::cpu
#endif
