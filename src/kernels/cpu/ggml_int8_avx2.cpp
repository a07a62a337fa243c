// AVX-2 int8-activation products of ggml's block formats (ggml_int8_isa.h; the definition: kernels.h,
// Activations::kInt8): ggml_int8_avx512.cpp's scheme 32 elements at a time — one 32-block or sub-block
// per ymm, codes unpacked to bytes in natural order — with vpmaddubsw + vpmaddwd for the integer dot:
// vpmaddubsw sums two u8·s8 products into an int16 that saturates past 32767, so unsigned codes must
// stay below 129. Codes up to 63 (Q4_0/Q4_1 nibbles, Q5's 5 bits, Q4_K/Q5_K, Q6_K's 6 bits) go in as
// they are stored — Q4_0/Q5_0/Q6_K's offset (8/16/32) taken out through the lane's −Σq as on AVX-512 —
// and the signed codes (Q8_0, the IQ4 and MXFP4 codebooks, |code| <= 128) as |code| against x with the
// code's sign (vpsignb; 2·128·127 fits). Each lane's int32 sum meets its (sub-)block's scale × x's d
// once (convert, multiply, FMA); one horizontal sum per row. Vectors: passes of at most 4 over a row,
// each vector's accumulators seeing the same operations whatever shares the pass (bit for bit alone).
// Rows one at a time, each streamed with a software prefetch 2 KB ahead (as on AVX-512's lone rows).
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/ggml_int8_isa.h"
#include "kernels/ggml_tiles.h"

#if defined(__x86_64__)
namespace sluice::kernels::cpu {
namespace {

#include "kernels/cpu/ggml_block_load.inc"

inline __m256i load32(const void* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// ---- x into its prepared form -------------------------------------------------------------------

void prepare(const float* x, int64_t cols, uint8_t* prep) {
    const int64_t blocks = cols / 32;
    auto* q = reinterpret_cast<int8_t*>(prep);
    auto* dl = reinterpret_cast<float*>(prep + ggml_i8_dl_at(cols));
    auto* nls = reinterpret_cast<int32_t*>(prep + ggml_i8_nls_at(cols));
    auto* d = reinterpret_cast<float*>(prep + ggml_i8_d_at(cols));
    auto* xsb = reinterpret_cast<float*>(prep + ggml_i8_xsb_at(cols));
    auto* qs = reinterpret_cast<int32_t*>(prep + ggml_i8_qs_at(cols));
    auto* qs16 = reinterpret_cast<int32_t*>(prep + ggml_i8_qs16_at(cols));
    const int64_t codes = ggml_i8_codes_bytes(cols), padded = ggml_i8_blocks_padded(cols);
    memset(q + cols, 0, static_cast<size_t>(codes - cols));
    memset(dl + cols / 4, 0, static_cast<size_t>(codes - cols));
    memset(nls + cols / 4, 0, static_cast<size_t>(codes - cols));
    memset(d + blocks, 0, static_cast<size_t>(4 * (padded - blocks)));
    memset(xsb + blocks, 0, static_cast<size_t>(4 * (padded - blocks)));
    memset(qs + blocks, 0, static_cast<size_t>(4 * (padded - blocks)));
    memset(qs16 + 2 * blocks, 0, static_cast<size_t>(8 * (padded - blocks)));
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < blocks; ++b) {
        const float* xb = x + 32 * b;
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < 4; ++i) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        const float db = amax / 127.0f;
        const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        __m256i qi[4];
        for (int i = 0; i < 4; ++i)
            qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));  // round to nearest even
        // Packing works within 128-bit lanes; the permute puts the 4-code groups back in order.
        const __m256i qb = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3])), order);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), qb);
        const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qb), ones16);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(nls + 8 * b),
                            _mm256_sub_epi32(_mm256_setzero_si256(), lanes));
        _mm256_storeu_ps(dl + 8 * b, _mm256_set1_ps(db));
        // Lanes 0-3 are the block's first 16 codes, 4-7 its last 16.
        __m128i lo = _mm256_castsi256_si128(lanes), hi = _mm256_extracti128_si256(lanes, 1);
        lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, 0x4E));
        lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, 0xB1));
        hi = _mm_add_epi32(hi, _mm_shuffle_epi32(hi, 0x4E));
        hi = _mm_add_epi32(hi, _mm_shuffle_epi32(hi, 0xB1));
        d[b] = db;
        qs16[2 * b] = _mm_cvtsi128_si32(lo);
        qs16[2 * b + 1] = _mm_cvtsi128_si32(hi);
        qs[b] = qs16[2 * b] + qs16[2 * b + 1];
        xsb[b] = db * static_cast<float>(qs[b]);
    }
}

// ---- unpacking ------------------------------------------------------------------------------------

// 16 nibble bytes as 32 codes in natural order: the low nibbles, then the high.
inline __m256i nibbles(__m128i v) {
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

// Q5's fifth bits (bit j of qh: element j) as 0x10 in byte j (llama.cpp's bytes_from_bits_32).
inline __m256i fifth_bits(const uint8_t* qh) {
    uint32_t bits;
    memcpy(&bits, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(static_cast<int>(bits)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
                                          _mm256_set1_epi64x(-1));
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

inline __m256i table(const int8_t* values) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)));
}

// 32 elements of a row: the unsigned bytes vpmaddubsw takes (a code, or |code| for signed types), the
// signed codes whose signs x takes (signed types), each lane's weight scale and bias.
struct Unit {
    __m256i w;
    __m256i sgn;
    __m256 ws;
    __m256 bs;
};
inline __m256i no_signs() {  // an unsigned type's sgn
    return _mm256_setzero_si256();
}
inline __m256 no_bias() {
    return _mm256_setzero_ps();
}

// kShift: log2 of the stored offset (0: none); kSigned: |code| against x·sign(code); kBias: a bias (per
// lane for the 32-block types, against x's block sums for the 256-block ones); kSuper: a 256-block type
// (its Block: the per-block setup).
struct Q4_0 {
    static constexpr int kBytes = 18, kShift = 3;
    static constexpr bool kSigned = false, kBias = false, kSuper = false;
    static Unit unit(const uint8_t* b) {
        return {nibbles(load16(b + 2)), no_signs(), _mm256_set1_ps(f16_at(b)), no_bias()};
    }
};

struct Q4_1 {
    static constexpr int kBytes = 20, kShift = 0;
    static constexpr bool kSigned = false, kBias = true, kSuper = false;
    static Unit unit(const uint8_t* b) {
        return {nibbles(load16(b + 4)), no_signs(), _mm256_set1_ps(f16_at(b)), _mm256_set1_ps(f16_at(b + 2))};
    }
};

struct Q5_0 {
    static constexpr int kBytes = 22, kShift = 4;
    static constexpr bool kSigned = false, kBias = false, kSuper = false;
    static Unit unit(const uint8_t* b) {
        return {_mm256_or_si256(nibbles(load16(b + 6)), fifth_bits(b + 2)), no_signs(),
                _mm256_set1_ps(f16_at(b)), no_bias()};
    }
};

struct Q5_1 {
    static constexpr int kBytes = 24, kShift = 0;
    static constexpr bool kSigned = false, kBias = true, kSuper = false;
    static Unit unit(const uint8_t* b) {
        return {_mm256_or_si256(nibbles(load16(b + 8)), fifth_bits(b + 4)), no_signs(),
                _mm256_set1_ps(f16_at(b)), _mm256_set1_ps(f16_at(b + 2))};
    }
};

struct Q8_0 {
    static constexpr int kBytes = 34, kShift = 0;
    static constexpr bool kSigned = true, kBias = false, kSuper = false;
    static Unit unit(const uint8_t* b) {
        const __m256i s = load32(b + 2);
        return {_mm256_abs_epi8(s), s, _mm256_set1_ps(f16_at(b)), no_bias()};
    }
};

struct Iq4Nl {
    static constexpr int kBytes = 18, kShift = 0;
    static constexpr bool kSigned = true, kBias = false, kSuper = false;
    static Unit unit(const uint8_t* b) {
        const __m256i s = _mm256_shuffle_epi8(table(kIq4nlValues), nibbles(load16(b + 2)));
        return {_mm256_abs_epi8(s), s, _mm256_set1_ps(f16_at(b)), no_bias()};
    }
};

struct Mxfp4 {
    static constexpr int kBytes = 17, kShift = 0;
    static constexpr bool kSigned = true, kBias = false, kSuper = false;
    static Unit unit(const uint8_t* b) {
        const __m256i s = _mm256_shuffle_epi8(table(kMxfp4Values), nibbles(load16(b + 1)));
        return {_mm256_abs_epi8(s), s, _mm256_set1_ps(e8m0_half(b[0])), no_bias()};
    }
};

// The 256-block types: setup once per block (scales as floats), then 8 units of 32.
struct K4Block {
    float scales[8];  // d·sc_s
    __m256 mins;      // dmin·m_s
    __m256i qh;       // Q5_K's 32 high-bit bytes
};

template <bool kFive>
struct Q45K {
    static constexpr int kBytes = kFive ? 176 : 144, kShift = 0;
    static constexpr bool kSigned = false, kBias = true, kSuper = true;
    using Block = K4Block;
    static void setup(const uint8_t* b, K4Block* k) {
        uint32_t u[4];
        memcpy(u, b + 4, 12);
        // llama.cpp's rearrangement of the 6-bit scales and mins: sc[0..7] in bytes 0..7, m in 8..15.
        const uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
        u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
        const uint32_t mins_lo = u[1] & m1;
        u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
        u[2] = mins_lo;
        u[0] &= m1;
        const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
        _mm256_storeu_ps(k->scales, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm)),
                                                  _mm256_set1_ps(f16_at(b))));
        k->mins = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))),
                                _mm256_set1_ps(f16_at(b + 2)));
        if constexpr (kFive) k->qh = load32(b + 16);
    }
    // Sub-block s: the low (s even) or high nibbles of qs[32·(s/2) ..], Q5_K's bit s of qh.
    static Unit unit(const uint8_t* b, const K4Block& k, int s) {
        const __m256i v = load32(b + (kFive ? 48 : 16) + 32 * (s / 2));
        __m256i codes = _mm256_and_si256(s % 2 == 0 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
        if constexpr (kFive) {
            const __m256i bit =
                _mm256_and_si256(_mm256_srl_epi16(k.qh, _mm_cvtsi32_si128(s)), _mm256_set1_epi8(1));
            codes = _mm256_or_si256(codes, _mm256_slli_epi16(bit, 4));
        }
        return {codes, no_signs(), _mm256_set1_ps(k.scales[s]), no_bias()};
    }
};

struct Q6KBlock {
    float scales[16];  // d·scales[s]
};

struct Q6K {
    static constexpr int kBytes = 210, kShift = 5;
    static constexpr bool kSigned = false, kBias = false, kSuper = true;
    using Block = Q6KBlock;
    static void setup(const uint8_t* b, Q6KBlock* k) {
        const __m256 d = _mm256_set1_ps(f16_at(b + 208));
        const __m128i sc = load16(b + 192);
        _mm256_storeu_ps(k->scales, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)), d));
        _mm256_storeu_ps(k->scales + 8,
                         _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))), d));
    }
    // Unit u = 4h + k: elements 128h + 32k + l take the low (k < 2) or high nibble of ql[64h + 32·(k % 2) +
    // l] and bits 2k..2k+1 of qh[32h + l] as bits 4..5 (ggml_quants.h); sub-blocks 2u and 2u + 1.
    static Unit unit(const uint8_t* b, const Q6KBlock& k, int u) {
        const int h = u / 4, kk = u % 4;
        const __m256i l = load32(b + 64 * h + 32 * (kk % 2));
        const __m256i nib = _mm256_and_si256(kk < 2 ? l : _mm256_srli_epi16(l, 4), _mm256_set1_epi8(0x0F));
        const __m256i qh = load32(b + 128 + 32 * h);
        __m256i top;
        switch (kk) {
            case 0: top = _mm256_slli_epi16(qh, 4); break;
            case 1: top = _mm256_slli_epi16(qh, 2); break;
            case 2: top = qh; break;
            default: top = _mm256_srli_epi16(qh, 2); break;
        }
        const __m256i codes = _mm256_or_si256(nib, _mm256_and_si256(top, _mm256_set1_epi8(0x30)));
        return {codes, no_signs(),
                _mm256_set_m128(_mm_set1_ps(k.scales[2 * u + 1]), _mm_set1_ps(k.scales[2 * u])), no_bias()};
    }
};

struct Iq4XsBlock {
    float scales[8];  // d·(ls_s − 32)
};

struct Iq4Xs {
    static constexpr int kBytes = 136, kShift = 0;
    static constexpr bool kSigned = true, kBias = false, kSuper = true;
    using Block = Iq4XsBlock;
    static void setup(const uint8_t* b, Iq4XsBlock* k) {
        const float d = f16_at(b);
        uint16_t scales_h;
        memcpy(&scales_h, b + 2, 2);
        for (int i = 0; i < 8; ++i) {
            const int ls = ((b[4 + i / 2] >> (4 * (i % 2))) & 0x0F) | (((scales_h >> (2 * i)) & 3) << 4);
            k->scales[i] = d * static_cast<float>(ls - 32);
        }
    }
    static Unit unit(const uint8_t* b, const Iq4XsBlock& k, int s) {
        const __m256i v = _mm256_shuffle_epi8(table(kIq4nlValues), nibbles(load16(b + 8 + 16 * s)));
        return {_mm256_abs_epi8(v), v, _mm256_set1_ps(k.scales[s]), no_bias()};
    }
};

// ---- the row loops ------------------------------------------------------------------------------

struct Prepared {
    const uint8_t* q;
    const float* dl;
    const int32_t* nls;
    const float* xsb;
};

inline Prepared prepared(const RowVectors& v, int64_t j, int64_t cols) {
    const uint8_t* p = static_cast<const uint8_t*>(v.x) + j * v.x_stride_bytes;
    return {p, reinterpret_cast<const float*>(p + ggml_i8_dl_at(cols)),
            reinterpret_cast<const int32_t*>(p + ggml_i8_nls_at(cols)),
            reinterpret_cast<const float*>(p + ggml_i8_xsb_at(cols))};
}

// The weight bytes kPrefetchBytes past [p, p + kBytes) into L1 ahead of their use (a decode streams its
// weights from DRAM; see ggml_int8_avx512.cpp).
constexpr int64_t kPrefetchBytes = 2048;

template <int kBytes>
inline void prefetch_ahead(const uint8_t* p) {
    for (int o = 0; o < kBytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + o), _MM_HINT_T0);
}

// Unit u (32 elements at 32·u) into a vector's accumulators (see ggml_int8_avx512.cpp, step).
template <int kShift, bool kSigned, bool kLaneBias>
inline void step(const Unit& un, const Prepared& p, int64_t u, __m256* acc, __m256* accb) {
    __m256i x = load32(p.q + 32 * u);
    if constexpr (kSigned) x = _mm256_sign_epi8(x, un.sgn);
    __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(un.w, x), _mm256_set1_epi16(1));
    const __m256i nls = load32(p.nls + 8 * u);
    if constexpr (kShift > 0) s = _mm256_add_epi32(s, _mm256_slli_epi32(nls, kShift));
    const __m256 dl = _mm256_loadu_ps(p.dl + 8 * u);
    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(un.ws, dl), *acc);
    if constexpr (kLaneBias)
        *accb = _mm256_fmadd_ps(_mm256_cvtepi32_ps(nls), _mm256_mul_ps(un.bs, dl), *accb);
}

// 32-block types: rows [r0, r1) × vectors [j0, j0 + kV); row r's result for vector j at y[j·ldy + r − r0].
template <typename T, int kV>
void rows_small(const WeightView& w, const RowVectors& v, int64_t j0, int64_t r0, int64_t r1, float* y) {
    const int64_t cols = w.cols, blocks = cols / 32;
    const size_t row_bytes = w.row_bytes();
    Prepared p[kV];
    for (int j = 0; j < kV; ++j) p[j] = prepared(v, j0 + j, cols);
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * row_bytes;
        __m256 acc[kV], accb[kV];
        for (int j = 0; j < kV; ++j) acc[j] = accb[j] = _mm256_setzero_ps();
        for (int64_t b = 0; b < blocks; ++b) {
            prefetch_ahead<T::kBytes>(row + b * T::kBytes);
            const Unit un = T::unit(row + b * T::kBytes);
            for (int j = 0; j < kV; ++j)
                step<T::kShift, T::kSigned, T::kBias>(un, p[j], b, &acc[j], &accb[j]);
        }
        for (int j = 0; j < kV; ++j) {
            float sum = hsum(acc[j]);
            if constexpr (T::kBias) sum -= hsum(accb[j]);
            y[(j0 + j) * v.ldy + (r - r0)] = sum;
        }
    }
}

// 256-block types: 8 units per block; Q4_K/Q5_K's mins against x's block sums (xsb).
template <typename T, int kV>
void rows_super(const WeightView& w, const RowVectors& v, int64_t j0, int64_t r0, int64_t r1, float* y) {
    const int64_t cols = w.cols, blocks = cols / 256;
    const size_t row_bytes = w.row_bytes();
    Prepared p[kV];
    for (int j = 0; j < kV; ++j) p[j] = prepared(v, j0 + j, cols);
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * row_bytes;
        __m256 acc[kV], accm[kV], no_bias[kV];
        for (int j = 0; j < kV; ++j) acc[j] = accm[j] = no_bias[j] = _mm256_setzero_ps();
        for (int64_t b = 0; b < blocks; ++b) {
            const uint8_t* blk = row + b * T::kBytes;
            prefetch_ahead<T::kBytes>(blk);
            typename T::Block k;
            T::setup(blk, &k);
            for (int u = 0; u < 8; ++u) {
                const Unit un = T::unit(blk, k, u);
                for (int j = 0; j < kV; ++j)
                    step<T::kShift, T::kSigned, false>(un, p[j], 8 * b + u, &acc[j], &no_bias[j]);
            }
            if constexpr (T::kBias)
                for (int j = 0; j < kV; ++j)
                    accm[j] = _mm256_fmadd_ps(k.mins, _mm256_loadu_ps(p[j].xsb + 8 * b), accm[j]);
        }
        for (int j = 0; j < kV; ++j) {
            float sum = hsum(acc[j]);
            if constexpr (T::kBias) sum -= hsum(accm[j]);
            y[(j0 + j) * v.ldy + (r - r0)] = sum;
        }
    }
}

template <typename T, int kV>
void pass(const WeightView& w, const RowVectors& v, int64_t j0, int64_t r0, int64_t r1, float* y) {
    if constexpr (T::kSuper) {
        rows_super<T, kV>(w, v, j0, r0, r1, y);
    } else {
        rows_small<T, kV>(w, v, j0, r0, r1, y);
    }
}

template <typename T>
void pass_of(int64_t n, const WeightView& w, const RowVectors& v, int64_t j0, int64_t r0, int64_t r1,
             float* y) {
    switch (n) {
        case 1: pass<T, 1>(w, v, j0, r0, r1, y); break;
        case 2: pass<T, 2>(w, v, j0, r0, r1, y); break;
        case 3: pass<T, 3>(w, v, j0, r0, r1, y); break;
        default: pass<T, 4>(w, v, j0, r0, r1, y); break;
    }
}

// Up to 4 vectors in one pass over the rows; 5..8 in two passes over each row in turn (the row in L1
// for the second).
template <typename T>
void rows(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    if (v.n <= 4) {
        pass_of<T>(v.n, w, v, 0, r0, r1, v.y);
        return;
    }
    const int64_t first = (v.n + 1) / 2;
    for (int64_t r = r0; r < r1; ++r) {
        pass_of<T>(first, w, v, 0, r, r + 1, v.y + (r - r0));
        pass_of<T>(v.n - first, w, v, first, r, r + 1, v.y + (r - r0));
    }
}

// ---- row tiles (ggml_tiles.h) ----------------------------------------------------------------------
//
// As on AVX-512 (ggml_int8_avx512.cpp), 8 rows to a ymm: a tile is two passes over its blocks, rows 0-7
// then 8-15 (the second half of each 64-byte chunk; the tile, 18–34 KB at 2048 inputs, is in L1/L2 for the
// second pass), vectors in passes of up to 4 (16 ymm registers). vpmaddubsw sums two u8·s8 products in
// an int16 that saturates past 32767, so each type adds up in int16 only what fits, then vpmaddwd makes
// each row's int32 sum; then the offset term, one convert and one FMA, as the portable twin in its order.
//   Q4_0: the 8 vpmaddubsw of a block's low and high nibbles (each at most 2·15·127) add up in int16:
//         30480 < 32767.
//   Q6_K: codes up to 63, so two vpmaddubsw (2·2·63·127 = 32004) per vpmaddwd, two per sub-block.
//   MXFP4: the codebook's values plus 12 (0..24) by vpshufb; the low and the high nibbles' four vpmaddubsw
//         each add up in int16 (4·2·24·127 = 24384), two vpmaddwd per block.
//   Q8_0: the stored code + 128 is taken back to the int8 code, its magnitude against x with the code's
//         sign (vpsignb; 2·128·127 fits), one vpmaddwd per chunk.

struct TileX {
    const int8_t* q;
    const float* d;
    const int32_t* qs;
    const int32_t* qs16;
};

inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

inline void prefetch_tile(const uint8_t* p, int bytes) {
    for (int o = 0; o < bytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + o), _MM_HINT_T0);
}

template <int kV>
void tile_half_q4_0(const uint8_t* tile, int64_t blocks, int half, const TileX* x, float* y, int64_t ldy) {
    __m256 acc[kV];
    for (int j = 0; j < kV; ++j) acc[j] = _mm256_setzero_ps();
    const __m256i low = _mm256_set1_epi8(0x0F), ones16 = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = tile + b * kQ4_0TileBlockBytes;
        if (half == 0) prefetch_tile(blk, kQ4_0TileBlockBytes);
        const __m256 dw = _mm256_cvtph_ps(load16(blk + 16 * half));
        __m256i p[kV];
        for (int j = 0; j < kV; ++j) p[j] = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k) {
            const __m256i c = load32(blk + 32 + 64 * k + 32 * half);
            const __m256i lo = _mm256_and_si256(c, low), hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low);
            for (int j = 0; j < kV; ++j) {
                const int8_t* xq = x[j].q + 32 * b;
                p[j] = _mm256_add_epi16(p[j],
                                        _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(xq + 4 * k)),
                                                         _mm256_maddubs_epi16(hi, bcast4(xq + 16 + 4 * k))));
            }
        }
        for (int j = 0; j < kV; ++j) {
            const __m256i s =
                _mm256_add_epi32(_mm256_madd_epi16(p[j], ones16), _mm256_set1_epi32(-8 * x[j].qs[b]));
            acc[j] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(x[j].d[b])), acc[j]);
        }
    }
    for (int j = 0; j < kV; ++j) _mm256_storeu_ps(y + j * ldy + 8 * half, acc[j]);
}

template <int kV>
void tile_half_q8_0(const uint8_t* tile, int64_t blocks, int half, const TileX* x, float* y, int64_t ldy) {
    __m256 acc[kV];
    for (int j = 0; j < kV; ++j) acc[j] = _mm256_setzero_ps();
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones16 = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = tile + b * kQ8_0TileBlockBytes;
        if (half == 0) prefetch_tile(blk, kQ8_0TileBlockBytes);
        const __m256 dw = _mm256_cvtph_ps(load16(blk + 16 * half));
        __m256i s[kV];
        for (int j = 0; j < kV; ++j) s[j] = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k) {
            const __m256i code = _mm256_xor_si256(load32(blk + 32 + 64 * k + 32 * half), flip);
            const __m256i mag = _mm256_abs_epi8(code);
            for (int j = 0; j < kV; ++j) {
                const __m256i xs = _mm256_sign_epi8(bcast4(x[j].q + 32 * b + 4 * k), code);
                s[j] = _mm256_add_epi32(s[j], _mm256_madd_epi16(_mm256_maddubs_epi16(mag, xs), ones16));
            }
        }
        // The codes were taken as they are (no +128), so no offset term.
        for (int j = 0; j < kV; ++j)
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j]), _mm256_mul_ps(dw, _mm256_set1_ps(x[j].d[b])),
                                     acc[j]);
    }
    for (int j = 0; j < kV; ++j) _mm256_storeu_ps(y + j * ldy + 8 * half, acc[j]);
}

template <int kV>
void tile_half_q6_k(const uint8_t* tile, int64_t blocks, int half, const TileX* x, float* y, int64_t ldy) {
    __m256 acc[kV];
    for (int j = 0; j < kV; ++j) acc[j] = _mm256_setzero_ps();
    const __m256i six = _mm256_set1_epi8(0x3F), ones16 = _mm256_set1_epi16(1);
    const __m256i m01 = _mm256_set1_epi8(0x03), m23 = _mm256_set1_epi8(0x0C), m45 = _mm256_set1_epi8(0x30);
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = tile + b * kQ6_KTileBlockBytes;
        if (half == 0) prefetch_tile(blk, kQ6_KTileCodesAt);
        const __m256 dw = _mm256_cvtph_ps(load16(blk + 16 * half));
        for (int s = 0; s < 16; ++s) {
            const uint8_t* ch = blk + kQ6_KTileCodesAt + 192 * s + 32 * half;
            if (half == 0) prefetch_tile(ch, 192);
            const __m256i a = load32(ch), bb = load32(ch + 64), c = load32(ch + 128);
            const __m256i top =
                _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 6), m01),
                                                _mm256_and_si256(_mm256_srli_epi16(bb, 4), m23)),
                                _mm256_and_si256(_mm256_srli_epi16(c, 2), m45));
            const __m256i op0 = _mm256_and_si256(a, six), op1 = _mm256_and_si256(bb, six),
                          op2 = _mm256_and_si256(c, six);
            __m128i sc8;
            {
                int64_t v;
                memcpy(&v, blk + 32 + 16 * s + 8 * half, 8);
                sc8 = _mm_cvtsi64_si128(v);
            }
            const __m256 ws = _mm256_mul_ps(dw, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc8)));
            const int64_t e0 = 256 * b + 16 * s;
            for (int j = 0; j < kV; ++j) {
                const int8_t* xq = x[j].q + e0;
                const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(op0, bcast4(xq)),
                                                     _mm256_maddubs_epi16(op1, bcast4(xq + 4)));
                const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(op2, bcast4(xq + 8)),
                                                     _mm256_maddubs_epi16(top, bcast4(xq + 12)));
                const __m256i sum = _mm256_add_epi32(
                    _mm256_add_epi32(_mm256_madd_epi16(p01, ones16), _mm256_madd_epi16(p23, ones16)),
                    _mm256_set1_epi32(-32 * x[j].qs16[e0 / 16]));
                acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum),
                                         _mm256_mul_ps(ws, _mm256_set1_ps(x[j].d[e0 / 32])), acc[j]);
            }
        }
    }
    for (int j = 0; j < kV; ++j) _mm256_storeu_ps(y + j * ldy + 8 * half, acc[j]);
}

// MXFP4: the 8 rows' scales 2^(e − 128) from their e8m0 bytes as f32 bit patterns (e < 2: subnormal, as
// e8m0_half); the nibbles through the codebook plus 12 (0..24, unsigned for vpmaddubsw) by vpshufb, the low
// and the high nibbles' four vpmaddubsw each in an int16 sum (4·2·24·127 = 24384), so the offset term is
// −12·qs_b.
inline __m256 e8m0_half8(const uint8_t* e) {
    const __m256i ei = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(ei, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), ei);
    return _mm256_castsi256_ps(
        _mm256_blendv_epi8(normal, tiny, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), ei)));
}

template <int kV>
void tile_half_mxfp4(const uint8_t* tile, int64_t blocks, int half, const TileX* x, float* y, int64_t ldy) {
    __m256 acc[kV];
    for (int j = 0; j < kV; ++j) acc[j] = _mm256_setzero_ps();
    const __m256i low = _mm256_set1_epi8(0x0F), ones16 = _mm256_set1_epi16(1);
    const __m256i table = _mm256_broadcastsi128_si256(
        _mm_add_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)), _mm_set1_epi8(12)));
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = tile + b * kMxfp4TileBlockBytes;
        if (half == 0) prefetch_tile(blk, kMxfp4TileBlockBytes);
        const __m256 ws = e8m0_half8(blk + 8 * half);
        __m256i plo[kV], phi[kV];
        for (int j = 0; j < kV; ++j) plo[j] = phi[j] = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k) {
            const __m256i c = load32(blk + 16 + 64 * k + 32 * half);
            const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(c, low));
            const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(c, 4), low));
            for (int j = 0; j < kV; ++j) {
                const int8_t* xq = x[j].q + 32 * b;
                plo[j] = _mm256_add_epi16(plo[j], _mm256_maddubs_epi16(lo, bcast4(xq + 4 * k)));
                phi[j] = _mm256_add_epi16(phi[j], _mm256_maddubs_epi16(hi, bcast4(xq + 16 + 4 * k)));
            }
        }
        for (int j = 0; j < kV; ++j) {
            const __m256i s = _mm256_add_epi32(
                _mm256_add_epi32(_mm256_madd_epi16(plo[j], ones16), _mm256_madd_epi16(phi[j], ones16)),
                _mm256_set1_epi32(-12 * x[j].qs[b]));
            acc[j] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(ws, _mm256_set1_ps(x[j].d[b])), acc[j]);
        }
    }
    for (int j = 0; j < kV; ++j) _mm256_storeu_ps(y + j * ldy + 8 * half, acc[j]);
}

// The tiled types: their elements per block and their half-tile loop for kV vectors.
struct Q4_0Tiles {
    static constexpr int64_t kElems = 32;
    template <int kV>
    static void half(const uint8_t* t, int64_t blocks, int h, const TileX* x, float* y, int64_t ldy) {
        tile_half_q4_0<kV>(t, blocks, h, x, y, ldy);
    }
};
struct Q8_0Tiles {
    static constexpr int64_t kElems = 32;
    template <int kV>
    static void half(const uint8_t* t, int64_t blocks, int h, const TileX* x, float* y, int64_t ldy) {
        tile_half_q8_0<kV>(t, blocks, h, x, y, ldy);
    }
};
struct Mxfp4Tiles {
    static constexpr int64_t kElems = 32;
    template <int kV>
    static void half(const uint8_t* t, int64_t blocks, int h, const TileX* x, float* y, int64_t ldy) {
        tile_half_mxfp4<kV>(t, blocks, h, x, y, ldy);
    }
};
struct Q6_KTiles {
    static constexpr int64_t kElems = 256;
    template <int kV>
    static void half(const uint8_t* t, int64_t blocks, int h, const TileX* x, float* y, int64_t ldy) {
        tile_half_q6_k<kV>(t, blocks, h, x, y, ldy);
    }
};

template <typename T>
void tile_of(const uint8_t* tile, int64_t blocks, const TileX* x, int64_t n, float* y, int64_t ldy) {
    for (int64_t j0 = 0; j0 < n; j0 += 4) {
        const int64_t k = n - j0 < 4 ? n - j0 : 4;
        for (int half = 0; half < 2; ++half) {
            switch (k) {
                case 1: T::template half<1>(tile, blocks, half, x + j0, y + j0 * ldy, ldy); break;
                case 2: T::template half<2>(tile, blocks, half, x + j0, y + j0 * ldy, ldy); break;
                case 3: T::template half<3>(tile, blocks, half, x + j0, y + j0 * ldy, ldy); break;
                default: T::template half<4>(tile, blocks, half, x + j0, y + j0 * ldy, ldy); break;
            }
        }
    }
}

template <typename T>
void rows_tiled(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    const int64_t cols = w.cols, blocks = cols / T::kElems;
    const size_t row_bytes = w.row_bytes();
    TileX x[kRowVectors];
    for (int64_t j = 0; j < v.n; ++j) {
        const uint8_t* p = static_cast<const uint8_t*>(v.x) + j * v.x_stride_bytes;
        x[j] = {reinterpret_cast<const int8_t*>(p), reinterpret_cast<const float*>(p + ggml_i8_d_at(cols)),
                reinterpret_cast<const int32_t*>(p + ggml_i8_qs_at(cols)),
                reinterpret_cast<const int32_t*>(p + ggml_i8_qs16_at(cols))};
    }
    for (int64_t t0 = r0; t0 < r1; t0 += kGgmlTileRows)
        tile_of<T>(static_cast<const uint8_t*>(w.data) + static_cast<size_t>(t0) * row_bytes, blocks, x, v.n,
                   v.y + (t0 - r0), v.ldy);
}

}  // namespace

const GgmlI8Table kGgmlI8Avx2 = {
    "avx2",
    prepare,
    rows<Q4_0>,
    rows<Q4_1>,
    rows<Q5_0>,
    rows<Q5_1>,
    rows<Q8_0>,
    rows<Q45K<false>>,
    rows<Q45K<true>>,
    rows<Q6K>,
    rows<Iq4Nl>,
    rows<Iq4Xs>,
    rows<Mxfp4>,
    rows_tiled<Q4_0Tiles>,
    rows_tiled<Q6_KTiles>,
    rows_tiled<Q8_0Tiles>,
    rows_tiled<Mxfp4Tiles>,
};

}  // namespace sluice::kernels::cpu
#endif
