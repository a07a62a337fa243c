// AVX-512 (F/BW/VL/DQ) dot products of one ggml-quantized row with f32 x: ggml_dot_avx2.cpp's scheme
// with 16 lanes, so 16 unpacked codes (one xmm of bytes) widen to one zmm of f32 in one step — half
// the widening and multiply instructions per block. GCC 12's intrinsics read _mm512_undefined_*() and
// trip -Wuninitialized (a false positive in the header, as in linear_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/ggml_dot_isa.h"

#if defined(__x86_64__)
namespace sluice::kernels::cpu {
namespace {

#include "kernels/cpu/ggml_block_load.inc"

// 16 signed bytes as 16 floats.
inline __m512 ps16(__m128i v) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
}

inline __m128i low_nibbles(__m128i v) {
    return _mm_and_si128(v, _mm_set1_epi8(0x0F));
}
inline __m128i high_nibbles(__m128i v) {
    return _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0F));
}

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
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t i = 0; i < cols / 32; ++i, b += 34, x += 32) {
        __m512 s = _mm512_mul_ps(ps16(load16(b + 2)), _mm512_loadu_ps(x));
        s = _mm512_fmadd_ps(ps16(load16(b + 18)), _mm512_loadu_ps(x + 16), s);
        if (i & 1) {
            acc1 = _mm512_fmadd_ps(_mm512_set1_ps(f16_at(b)), s, acc1);
        } else {
            acc0 = _mm512_fmadd_ps(_mm512_set1_ps(f16_at(b)), s, acc0);
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

inline float dot_nibble_blocks(const uint8_t* b, const float* x, int64_t cols, int block_bytes, __m128i table,
                               bool e8m0_scale) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const int skip = e8m0_scale ? 1 : 2;
    for (int64_t i = 0; i < cols / 32; ++i, b += block_bytes, x += 32) {
        const __m128i v = load16(b + skip);
        __m512 s = _mm512_mul_ps(ps16(_mm_shuffle_epi8(table, low_nibbles(v))), _mm512_loadu_ps(x));
        s = _mm512_fmadd_ps(ps16(_mm_shuffle_epi8(table, high_nibbles(v))), _mm512_loadu_ps(x + 16), s);
        const float d = e8m0_scale ? e8m0_half(b[0]) : f16_at(b);
        if (i & 1) {
            acc1 = _mm512_fmadd_ps(_mm512_set1_ps(d), s, acc1);
        } else {
            acc0 = _mm512_fmadd_ps(_mm512_set1_ps(d), s, acc0);
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
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

inline float dot_k4(const uint8_t* b, const float* x, int64_t cols, bool five_bit) {
    __m512 acc = _mm512_setzero_ps(), accm = _mm512_setzero_ps();
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
            const __m512 x0 = _mm512_loadu_ps(xc), x1 = _mm512_loadu_ps(xc + 16);
            const __m512 x2 = _mm512_loadu_ps(xc + 32), x3 = _mm512_loadu_ps(xc + 48);
            const __m512 s_lo = _mm512_fmadd_ps(ps16(lo1), x1, _mm512_mul_ps(ps16(lo0), x0));
            const __m512 s_hi = _mm512_fmadd_ps(ps16(hi1), x3, _mm512_mul_ps(ps16(hi0), x2));
            acc = _mm512_fmadd_ps(_mm512_set1_ps(dsc[2 * c]), s_lo, acc);
            acc = _mm512_fmadd_ps(_mm512_set1_ps(dsc[2 * c + 1]), s_hi, acc);
            accm = _mm512_fmadd_ps(_mm512_set1_ps(dm[2 * c]), _mm512_add_ps(x0, x1), accm);
            accm = _mm512_fmadd_ps(_mm512_set1_ps(dm[2 * c + 1]), _mm512_add_ps(x2, x3), accm);
        }
    }
    return _mm512_reduce_add_ps(_mm512_sub_ps(acc, accm));
}

float dot_q4_k(const void* row, const float* x, int64_t cols) {
    return dot_k4(static_cast<const uint8_t*>(row), x, cols, false);
}

float dot_q5_k(const void* row, const float* x, int64_t cols) {
    return dot_k4(static_cast<const uint8_t*>(row), x, cols, true);
}

float dot_q6_k(const void* row, const float* x, int64_t cols) {
    const auto* b = static_cast<const uint8_t*>(row);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
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
                    const __m512 s = _mm512_mul_ps(ps16(_mm_sub_epi8(q[k], k32)),
                                                   _mm512_loadu_ps(x + 128 * h + 32 * k + 16 * g));
                    const __m512 dsc = _mm512_set1_ps(d * static_cast<float>(scales[8 * h + 2 * k + g]));
                    if (k & 1) {
                        acc1 = _mm512_fmadd_ps(dsc, s, acc1);
                    } else {
                        acc0 = _mm512_fmadd_ps(dsc, s, acc0);
                    }
                }
            }
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

float dot_iq4_xs(const void* row, const float* x, int64_t cols) {
    const auto* b = static_cast<const uint8_t*>(row);
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t i = 0; i < cols / 256; ++i, b += 136, x += 256) {
        const float d = f16_at(b);
        uint16_t scales_h;
        memcpy(&scales_h, b + 2, 2);
        for (int s = 0; s < 8; ++s) {
            const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0x0F) | (((scales_h >> (2 * s)) & 3) << 4);
            const __m128i v = load16(b + 8 + 16 * s);
            const float* xs = x + 32 * s;
            __m512 sum = _mm512_mul_ps(ps16(_mm_shuffle_epi8(table, low_nibbles(v))), _mm512_loadu_ps(xs));
            sum = _mm512_fmadd_ps(ps16(_mm_shuffle_epi8(table, high_nibbles(v))), _mm512_loadu_ps(xs + 16),
                                  sum);
            const __m512 dl = _mm512_set1_ps(d * static_cast<float>(ls - 32));
            if (s & 1) {
                acc1 = _mm512_fmadd_ps(dl, sum, acc1);
            } else {
                acc0 = _mm512_fmadd_ps(dl, sum, acc0);
            }
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

}  // namespace

const GgmlDotTable kGgmlDotAvx512 = {
    "avx512", dot_q4_0, dot_q8_0, dot_q4_k, dot_q5_k, dot_q6_k, dot_iq4_nl, dot_iq4_xs, dot_mxfp4,
};

}  // namespace sluice::kernels::cpu
#endif
