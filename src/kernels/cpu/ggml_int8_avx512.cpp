// AVX-512 VNNI int8-activation products of ggml's block formats (ggml_int8_isa.h; the definition:
// kernels.h, Activations::kInt8). A row is taken 64 elements at a time — two 32-blocks, or one 64-element
// chunk of a 256-block — unpacked to one unsigned code byte per element in natural order (nibbles by mask
// and shift, Q5's and Q6_K's high bits or-ed in, IQ4/MXFP4 codebooks by vpshufb, Q8_0 by flipping the
// sign bit), so the prepared x (natural order) meets it in one vpdpbusd: 16 int32 lanes of 4 codes each,
// exact. A type whose codes are stored with an offset (Q4_0: nibble = code + 8; Q5_0 +16, Q6_K +32,
// Q8_0/IQ4/MXFP4 +128 as bytes) starts each lane at offset·nls (the lane's −Σq, a shift), so the lane
// holds Σ code·q itself. Each lane then meets its block's scale × x's d once (one convert, one multiply,
// one FMA per 64 elements and vector); biases (Q4_1/Q5_1: m per block; Q4_K/Q5_K: dmin·m_s) meet x's
// block sums. One horizontal sum per row.
//
// Vectors (RowVectors, up to 8): a unit is unpacked once and multiplies up to 3 vectors (2 for the types
// with a bias) in a pass; with 4+ vectors rows go in sets of 4, so each vector's unit of x is loaded once
// for 4 rows (64 tokens of a prefill through 768 × 2048 and 2048 × 768 matrices, one core: 1.1–1.6× the f32
// tile GEMM, Q6_K 3×, where one row at a time left it L2-bound on x at 0.85–1.2×); one to three vectors
// (decode) take rows one by one, which stream from DRAM faster (below). Each (row, vector) accumulator sees
// the same operations in the same order whatever rows and vectors share its pass, so every (row, vector) has
// its bits alone (matvec_batch's and matvec_jobs' contract, and matmul's: a token's result never depends on
// n). Rejected: llama.cpp's Q8_K activations for the K-quants (one d per 256, the sub-block sums scaled in
// integers) — a second activation format, and x rounded more coarsely wherever a block of 32 is quieter than
// its 256 (kernels.h).
//
// The functions that issue vpdpbusd carry target("avx512vnni"): the table is used only on CPUs with VNNI
// (the dispatch takes AVX-2's loops otherwise). GCC 12's intrinsics read _mm512_undefined_*() and trip
// -Wuninitialized (a false positive in the header, as in linear_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/ggml_int8_isa.h"
#include "kernels/ggml_tiles.h"

#if defined(__x86_64__)
#define SLUICE_VNNI __attribute__((target("avx512vnni")))

namespace sluice::kernels::cpu {
namespace {

#include "kernels/cpu/ggml_block_load.inc"

inline __m256i load32(const uint8_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

inline uint32_t u32_at(const uint8_t* p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

// ---- x into its prepared form -------------------------------------------------------------------

SLUICE_VNNI void prepare(const float* x, int64_t cols, uint8_t* prep) {
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
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < blocks; ++b) {
        const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float db = amax / 127.0f;
        const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));  // round to nearest even
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
        const __m256i qb = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtsepi32_epi8(q0)),
                                                   _mm512_cvtsepi32_epi8(q1), 1);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), qb);
        const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qb), ones16);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(nls + 8 * b),
                            _mm256_sub_epi32(_mm256_setzero_si256(), lanes));
        _mm256_storeu_ps(dl + 8 * b, _mm256_set1_ps(db));
        d[b] = db;
        qs16[2 * b] = _mm512_reduce_add_epi32(q0);
        qs16[2 * b + 1] = _mm512_reduce_add_epi32(q1);
        qs[b] = qs16[2 * b] + qs16[2 * b + 1];
        xsb[b] = db * static_cast<float>(qs[b]);
    }
}

// ---- unpacking ------------------------------------------------------------------------------------

// 16 nibble bytes of each of two sub-blocks ([v0 | v1]) as 64 codes in natural order: v0's low
// nibbles, v0's high, v1's low, v1's high.
inline __m512i nibbles(__m256i v01) {
    const __m512i z =
        _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(v01));
    return _mm512_and_si512(_mm512_srlv_epi64(z, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                            _mm512_set1_epi8(0x0F));
}

inline __m256i pair16(const uint8_t* a, const uint8_t* b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(load16(a)),
                                   b != nullptr ? load16(b) : _mm_setzero_si128(), 1);
}

// A codebook (int8 values) plus 128, as the unsigned bytes vpshufb looks up in every 128-bit lane.
inline __m512i table_plus_128(const int8_t* values) {
    return _mm512_broadcast_i32x4(_mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)),
                                                _mm_set1_epi8(static_cast<char>(0x80))));
}

inline __m512 two_scales(float a, float b) {
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

// One 64-element unit of a row: the codes as unsigned bytes, each lane's weight scale, and (types with
// a per-block bias) each lane's bias.
struct Unit {
    __m512i w;
    __m512 ws;
    __m512 bs;
};

inline __m512 no_bias() {
    return _mm512_setzero_ps();
}

// The 32-block types: a unit is blocks a and b (b null: a row's last, odd block; its lanes are zero).
// kShift: log2 of the offset the codes are stored with (0: none); kBias: a bias (per lane for the 32-block
// types, against x's block sums for the 256-block ones); kSuper: a 256-block type.
struct Q4_0 {
    static constexpr int kBytes = 18, kShift = 3;
    static constexpr bool kBias = false, kSuper = false;
    static Unit unit(const uint8_t* a, const uint8_t* b) {
        return {nibbles(pair16(a + 2, b ? b + 2 : nullptr)), two_scales(f16_at(a), b ? f16_at(b) : 0.0f),
                no_bias()};
    }
};

struct Q4_1 {
    static constexpr int kBytes = 20, kShift = 0;
    static constexpr bool kBias = true, kSuper = false;
    static Unit unit(const uint8_t* a, const uint8_t* b) {
        return {nibbles(pair16(a + 4, b ? b + 4 : nullptr)), two_scales(f16_at(a), b ? f16_at(b) : 0.0f),
                two_scales(f16_at(a + 2), b ? f16_at(b + 2) : 0.0f)};
    }
};

// Q5's fifth bits: bit j of a block's qh is element j's, so the 64 bits of two blocks are a byte mask.
inline __m512i fifth_bits(const uint8_t* qa, const uint8_t* qb) {
    const uint64_t m = u32_at(qa) | (qb != nullptr ? static_cast<uint64_t>(u32_at(qb)) << 32 : 0);
    return _mm512_maskz_mov_epi8(m, _mm512_set1_epi8(0x10));
}

struct Q5_0 {
    static constexpr int kBytes = 22, kShift = 4;
    static constexpr bool kBias = false, kSuper = false;
    static Unit unit(const uint8_t* a, const uint8_t* b) {
        const __m512i w = _mm512_or_si512(nibbles(pair16(a + 6, b ? b + 6 : nullptr)),
                                          fifth_bits(a + 2, b ? b + 2 : nullptr));
        return {w, two_scales(f16_at(a), b ? f16_at(b) : 0.0f), no_bias()};
    }
};

struct Q5_1 {
    static constexpr int kBytes = 24, kShift = 0;
    static constexpr bool kBias = true, kSuper = false;
    static Unit unit(const uint8_t* a, const uint8_t* b) {
        const __m512i w = _mm512_or_si512(nibbles(pair16(a + 8, b ? b + 8 : nullptr)),
                                          fifth_bits(a + 4, b ? b + 4 : nullptr));
        return {w, two_scales(f16_at(a), b ? f16_at(b) : 0.0f),
                two_scales(f16_at(a + 2), b ? f16_at(b + 2) : 0.0f)};
    }
};

struct Q8_0 {
    static constexpr int kBytes = 34, kShift = 7;
    static constexpr bool kBias = false, kSuper = false;
    static Unit unit(const uint8_t* a, const uint8_t* b) {
        const __m512i s = _mm512_inserti64x4(_mm512_castsi256_si512(load32(a + 2)),
                                             b ? load32(b + 2) : _mm256_setzero_si256(), 1);
        // code + 128 (the padding of a lone block: 128 against zero codes of x).
        return {_mm512_xor_si512(s, _mm512_set1_epi8(static_cast<char>(0x80))),
                two_scales(f16_at(a), b ? f16_at(b) : 0.0f), no_bias()};
    }
};

struct Iq4Nl {
    static constexpr int kBytes = 18, kShift = 7;
    static constexpr bool kBias = false, kSuper = false;
    static Unit unit(const uint8_t* a, const uint8_t* b) {
        const __m512i w =
            _mm512_shuffle_epi8(table_plus_128(kIq4nlValues), nibbles(pair16(a + 2, b ? b + 2 : nullptr)));
        return {w, two_scales(f16_at(a), b ? f16_at(b) : 0.0f), no_bias()};
    }
};

struct Mxfp4 {
    static constexpr int kBytes = 17, kShift = 7;
    static constexpr bool kBias = false, kSuper = false;
    static Unit unit(const uint8_t* a, const uint8_t* b) {
        const __m512i w =
            _mm512_shuffle_epi8(table_plus_128(kMxfp4Values), nibbles(pair16(a + 1, b ? b + 1 : nullptr)));
        return {w, two_scales(e8m0_half(a[0]), b ? e8m0_half(b[0]) : 0.0f), no_bias()};
    }
};

// The 256-block types: block setup once, then four 64-element chunks. Per-chunk lane scales come from
// the block's sub-block scales (in the low lanes of `scales`) by one permute.
inline __m512i lanes_of_two(int c) {  // lanes 0-7: sub-block 2c, lanes 8-15: 2c + 1
    return _mm512_add_epi32(_mm512_set1_epi32(2 * c),
                            _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
}

// Q4_K / Q5_K's 12 bytes of 6-bit scales and mins as 8 + 8 bytes (llama.cpp's rearrangement: the
// definition's k4_scale_min for every sub-block at once).
inline __m128i k4_scales_mins(const uint8_t* packed) {
    uint32_t u[4];
    memcpy(u, packed, 12);
    const uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
    u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
    const uint32_t mins_lo = u[1] & m1;
    u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
    u[2] = mins_lo;
    u[0] &= m1;
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
}

struct K4Block {
    __m512 scales;  // d·sc_s in lanes 0..7
    __m256 mins;    // dmin·m_s
};

template <bool kFive>
struct Q45K {
    static constexpr int kBytes = kFive ? 176 : 144, kShift = 0;
    static constexpr bool kBias = true, kSuper = true;
    static K4Block setup(const uint8_t* b) {
        const __m128i sm = k4_scales_mins(b + 4);
        K4Block k;
        k.scales = _mm512_castps256_ps512(
            _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm)), _mm256_set1_ps(f16_at(b))));
        k.mins = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8))),
                               _mm256_set1_ps(f16_at(b + 2)));
        return k;
    }
    static void chunk(const uint8_t* b, const K4Block& k, int c, __m512i* w, __m512* ws) {
        // 32 bytes: sub-block 2c in the low nibbles, 2c + 1 in the high.
        const __m512i v = _mm512_broadcast_i64x4(load32(b + (kFive ? 48 : 16) + 32 * c));
        __m512i codes = _mm512_and_si512(
            _mm512_srlv_epi16(v, _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1)),
            _mm512_set1_epi8(0x0F));
        if constexpr (kFive) {  // bit 2c (2c + 1) of qh[l]: element l of sub-block 2c (2c + 1)
            const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * c)),
                                                     _mm256_set1_epi16(static_cast<short>(2 * c + 1)), 1);
            const __m512i qh = _mm512_broadcast_i64x4(load32(b + 16));
            const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qh, shift), _mm512_set1_epi8(1));
            codes = _mm512_or_si512(codes, _mm512_slli_epi16(bit, 4));
        }
        *w = codes;
        *ws = _mm512_permutexvar_ps(lanes_of_two(c), k.scales);
    }
};

struct Q6KBlock {
    __m512 scales;  // d·scales[s], s = 0..15
};

struct Q6K {
    static constexpr int kBytes = 210, kShift = 5;
    static constexpr bool kBias = false, kSuper = true;
    static Q6KBlock setup(const uint8_t* b) {
        return {_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(b + 192))),
                              _mm512_set1_ps(f16_at(b + 208)))};
    }
    // Chunk c = 2h + k2: elements 128h + 64·k2 + (0..63). ggml_quants.h's layout: the low nibbles of
    // ql[64h .. 64h + 64) are elements 128h + 0..63, the high nibbles 128h + 64..127; their bits 4..5 are bit
    // pairs 0-1, 2-3 (k2 = 0) or 4-5, 6-7 (k2 = 1) of qh[32h + l], l = element % 32.
    static void chunk(const uint8_t* b, const Q6KBlock& k, int c, __m512i* w, __m512* ws) {
        const int h = c / 2;
        const __m512i l = _mm512_loadu_si512(b + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(load32(b + 128 + 32 * h));
        const __m512i two_then = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
        __m512i nib, top;
        if (c % 2 == 0) {
            nib = l;
            top = _mm512_sllv_epi16(qh, _mm512_sub_epi16(_mm512_set1_epi16(4), two_then));  // <<4, <<2
        } else {
            nib = _mm512_srli_epi16(l, 4);
            top = _mm512_srlv_epi16(qh, two_then);  // >>0, >>2
        }
        *w = _mm512_or_si512(_mm512_and_si512(nib, _mm512_set1_epi8(0x0F)),
                             _mm512_and_si512(top, _mm512_set1_epi8(0x30)));
        const __m512i four = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
        *ws = _mm512_permutexvar_ps(_mm512_add_epi32(four, _mm512_set1_epi32(4 * c)), k.scales);
    }
};

struct Iq4XsBlock {
    __m512 scales;  // d·(ls_s − 32) in lanes 0..7
};

struct Iq4Xs {
    static constexpr int kBytes = 136, kShift = 7;
    static constexpr bool kBias = false, kSuper = true;
    static Iq4XsBlock setup(const uint8_t* b) {
        const float d = f16_at(b);
        uint16_t scales_h;
        memcpy(&scales_h, b + 2, 2);
        alignas(32) float s[8];
        for (int i = 0; i < 8; ++i) {
            const int ls = ((b[4 + i / 2] >> (4 * (i % 2))) & 0x0F) | (((scales_h >> (2 * i)) & 3) << 4);
            s[i] = d * static_cast<float>(ls - 32);
        }
        return {_mm512_castps256_ps512(_mm256_load_ps(s))};
    }
    static void chunk(const uint8_t* b, const Iq4XsBlock& k, int c, __m512i* w, __m512* ws) {
        *w = _mm512_shuffle_epi8(table_plus_128(kIq4nlValues), nibbles(load32(b + 8 + 32 * c)));
        *ws = _mm512_permutexvar_ps(lanes_of_two(c), k.scales);
    }
};

// ---- the row loops ------------------------------------------------------------------------------
//
// Rows one by one, or in sets of 4 for 4+ vectors, the vectors in passes of at most 3 (2 for types with a
// bias) over each row or set: a vector's 64 codes, lane sums and lane d are loaded once per unit for the set,
// and each (row, vector) accumulator sees exactly the operations it sees alone (kR = kV = 1): the unit its
// row unpacks, the same integer dot, convert, scale product and FMA, in unit order, and the same reductions.

// The bytes `ahead` past [p, p + kBytes) into L1 ahead of their use: a decode's weights come from DRAM, and
// the hardware prefetcher alone left one core well below its streaming rate. A lone row streams 4 KB
// ahead of itself (1, 2 and 4 KB measured alike within ~10%); a set of 4 rows fetches the next set's bytes
// at the same place (ahead: 4 rows).
constexpr size_t kPrefetchBytes = 4096;

template <int kBytes>
inline void prefetch_ahead(const uint8_t* p, size_t ahead) {
    for (int o = 0; o < kBytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + ahead + o), _MM_HINT_T0);
}

// Vector j's prepared arrays (ggml_int8_isa.h).
struct Prepared {
    const uint8_t* q;
    const float* dl;
    const int32_t* nls;
    const float* xsb;
};

// One vector's unit u (64 elements at 64·u): its codes, the lanes' starting value offset·nls (nls is −Σq),
// their d, and nls itself (for a lane bias).
struct XUnit {
    __m512i q, start, nls;
    __m512 dl;
};

template <int kShift>
inline XUnit x_unit(const Prepared& p, int64_t u) {
    XUnit x;
    x.q = _mm512_loadu_si512(p.q + 64 * u);
    x.nls = _mm512_loadu_si512(p.nls + 16 * u);
    x.start = kShift > 0 ? _mm512_slli_epi32(x.nls, kShift) : _mm512_setzero_si512();
    x.dl = _mm512_loadu_ps(p.dl + 16 * u);
    return x;
}

// A unit of one row times a unit of one vector into that pair's accumulators: the exact integer dot, then
// × (weight scale × x's d) per lane; the lane bias against x's sums (accb gathers −Σ bias·d·Σq).
template <bool kLaneBias>
SLUICE_VNNI inline void accumulate(const Unit& un, const XUnit& x, __m512* acc, __m512* accb) {
    const __m512i s = _mm512_dpbusd_epi32(x.start, un.w, x.q);
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(un.ws, x.dl), *acc);
    if constexpr (kLaneBias)
        *accb = _mm512_fmadd_ps(_mm512_cvtepi32_ps(x.nls), _mm512_mul_ps(un.bs, x.dl), *accb);
}

inline float hsum8(__m256 s) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

// kR rows from `row0` (row_bytes apart) × kV vectors p[0..kV): row i's result for vector j at y[j·ldy + i].
// 32-block types: a unit is two blocks (a lone last block pairs with nothing).
template <typename T, int kR, int kV>
SLUICE_VNNI void set_small(const uint8_t* row0, size_t row_bytes, int64_t cols, const Prepared* p, float* y,
                           int64_t ldy) {
    const int64_t blocks = cols / 32;
    const size_t ahead = kR == 1 ? kPrefetchBytes : kR * row_bytes;
    __m512 acc[kR][kV], accb[kR][kV];
    for (int i = 0; i < kR; ++i)
        for (int j = 0; j < kV; ++j) acc[i][j] = accb[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; b += 2) {
        const bool pair = b + 1 < blocks;
        Unit un[kR];
        for (int i = 0; i < kR; ++i) {
            const uint8_t* at = row0 + i * row_bytes + b * T::kBytes;
            prefetch_ahead<2 * T::kBytes>(at, ahead);
            un[i] = T::unit(at, pair ? at + T::kBytes : nullptr);
        }
        for (int j = 0; j < kV; ++j) {
            const XUnit x = x_unit<T::kShift>(p[j], b / 2);
            for (int i = 0; i < kR; ++i) accumulate<T::kBias>(un[i], x, &acc[i][j], &accb[i][j]);
        }
    }
    for (int i = 0; i < kR; ++i)
        for (int j = 0; j < kV; ++j) {
            float sum = _mm512_reduce_add_ps(acc[i][j]);
            if constexpr (T::kBias) sum -= _mm512_reduce_add_ps(accb[i][j]);
            y[j * ldy + i] = sum;
        }
}

// 256-block types: each block's setup once per row, its four chunks as units; Q4_K/Q5_K's mins against
// x's block sums (xsb), 8 sub-blocks at a time.
template <typename T, int kR, int kV>
SLUICE_VNNI void set_super(const uint8_t* row0, size_t row_bytes, int64_t cols, const Prepared* p, float* y,
                           int64_t ldy) {
    const int64_t blocks = cols / 256;
    const size_t ahead = kR == 1 ? kPrefetchBytes : kR * row_bytes;
    __m512 acc[kR][kV], no_bias[kR][kV];
    __m256 accm[kR][kV];
    for (int i = 0; i < kR; ++i)
        for (int j = 0; j < kV; ++j) {
            acc[i][j] = no_bias[i][j] = _mm512_setzero_ps();
            accm[i][j] = _mm256_setzero_ps();
        }
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk[kR];
        decltype(T::setup(row0)) k[kR];
        for (int i = 0; i < kR; ++i) {
            blk[i] = row0 + i * row_bytes + b * T::kBytes;
            prefetch_ahead<T::kBytes>(blk[i], ahead);
            k[i] = T::setup(blk[i]);
        }
        for (int c = 0; c < 4; ++c) {
            Unit un[kR];
            for (int i = 0; i < kR; ++i) T::chunk(blk[i], k[i], c, &un[i].w, &un[i].ws);
            for (int j = 0; j < kV; ++j) {
                const XUnit x = x_unit<T::kShift>(p[j], 4 * b + c);
                for (int i = 0; i < kR; ++i) accumulate<false>(un[i], x, &acc[i][j], &no_bias[i][j]);
            }
        }
        if constexpr (T::kBias)
            for (int j = 0; j < kV; ++j) {
                const __m256 xsb = _mm256_loadu_ps(p[j].xsb + 8 * b);
                for (int i = 0; i < kR; ++i) accm[i][j] = _mm256_fmadd_ps(k[i].mins, xsb, accm[i][j]);
            }
    }
    for (int i = 0; i < kR; ++i)
        for (int j = 0; j < kV; ++j) {
            float sum = _mm512_reduce_add_ps(acc[i][j]);
            if constexpr (T::kBias) sum -= hsum8(accm[i][j]);
            y[j * ldy + i] = sum;
        }
}

template <typename T, int kR, int kV>
SLUICE_VNNI void set_of(const uint8_t* row0, size_t row_bytes, int64_t cols, const Prepared* p, float* y,
                        int64_t ldy) {
    if constexpr (T::kSuper) {
        set_super<T, kR, kV>(row0, row_bytes, cols, p, y, ldy);
    } else {
        set_small<T, kR, kV>(row0, row_bytes, cols, p, y, ldy);
    }
}

// Every vector over one set of kR rows, in passes of at most kMaxV.
template <typename T, int kR>
SLUICE_VNNI void passes(const uint8_t* row0, size_t row_bytes, int64_t cols, const Prepared* p, int64_t n,
                        float* y, int64_t ldy) {
    constexpr int64_t kMaxV = T::kBias ? 2 : 3;
    for (int64_t j0 = 0; j0 < n;) {
        const int64_t left = n - j0;
        // 4 as 2 + 2 (not 3 + 1), 7 as 3 + 2 + 2: no pass of one where two can share.
        const int64_t k = left <= kMaxV ? left : left == kMaxV + 1 ? (kMaxV + 1) / 2 : kMaxV;
        switch (k) {
            case 1: set_of<T, kR, 1>(row0, row_bytes, cols, p + j0, y + j0 * ldy, ldy); break;
            case 2: set_of<T, kR, 2>(row0, row_bytes, cols, p + j0, y + j0 * ldy, ldy); break;
            default:
                if constexpr (kMaxV >= 3) set_of<T, kR, 3>(row0, row_bytes, cols, p + j0, y + j0 * ldy, ldy);
                break;
        }
        j0 += k;
    }
}

template <typename T>
SLUICE_VNNI void rows(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    const int64_t cols = w.cols;
    const size_t row_bytes = w.row_bytes();
    Prepared p[kRowVectors];
    for (int64_t j = 0; j < v.n; ++j) {
        const uint8_t* x = static_cast<const uint8_t*>(v.x) + j * v.x_stride_bytes;
        p[j] = {x, reinterpret_cast<const float*>(x + ggml_i8_dl_at(cols)),
                reinterpret_cast<const int32_t*>(x + ggml_i8_nls_at(cols)),
                reinterpret_cast<const float*>(x + ggml_i8_xsb_at(cols))};
    }
    const uint8_t* base = static_cast<const uint8_t*>(w.data);
    int64_t r = r0;
    // Sets of 4 rows where 4+ vectors make the x loads they share count (a batch, a prefill block); a
    // decode's one to three vectors take rows one by one, one sequential stream (measured: 4 interleaved rows
    // streamed from DRAM at ~60% of one's rate on an AMD EPYC).
    for (; v.n >= 4 && r + 4 <= r1; r += 4)
        passes<T, 4>(base + r * row_bytes, row_bytes, cols, p, v.n, v.y + (r - r0), v.ldy);
    for (; r < r1; ++r) passes<T, 1>(base + r * row_bytes, row_bytes, cols, p, v.n, v.y + (r - r0), v.ldy);
}

// ---- row tiles (ggml_tiles.h) ----------------------------------------------------------------------
//
// A tile's 16 rows in the 16 lanes; per vector one vpdpbusd per 64-byte chunk of codes (16 rows × 4
// codes) against x's 4 codes of those elements broadcast to every lane, the chunks of a (sub-)block in two
// chains, one from the stored codes' offset term (−8·qs_b, −128·qs_b, −32·qs16_s); then one convert and
// one FMA with the rows' scales × x's d. Each (row, vector) lane sees the operations of the portable twin
// (ggml_int8.cpp), in its order. No horizontal sums: a tile's 16 results are one store. The chunks are
// unpacked once per tile and serve every vector (up to 8: decode's 1, a verification's or a batch's few).
//   Q4_0: 4 chunks of nibbles per block, the low and high by mask and shift (8 operands).
//   Q8_0: 8 chunks of code + 128 per block, as stored.
//   MXFP4: Q4_0's 4 chunks of nibbles per block, each through the codebook (plus 128) by vpshufb.
//   Q6_K: 3 chunks per sub-block of 16: elements 0..11 one AND each, 12..15 gathered from the chunks'
//         top bits (three shifts, two bit selects, one AND).

// Vector j's prepared arrays for the tiles.
struct TileX {
    const int8_t* q;
    const float* d;
    const int32_t* qs;
    const int32_t* qs16;
};

inline __m512i bcast4(const int8_t* p) {
    return _mm512_set1_epi32(static_cast<int>(u32_at(reinterpret_cast<const uint8_t*>(p))));
}

inline void prefetch_tile(const uint8_t* p, int bytes) {
    for (int o = 0; o < bytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + o), _MM_HINT_T0);
}

template <int kV>
SLUICE_VNNI void tile_q4_0(const uint8_t* tile, int64_t blocks, const TileX* x, float* y, int64_t ldy) {
    __m512 acc[kV];
    for (int j = 0; j < kV; ++j) acc[j] = _mm512_setzero_ps();
    const __m512i low = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = tile + b * kQ4_0TileBlockBytes;
        prefetch_tile(blk, kQ4_0TileBlockBytes);
        const __m512 dw = _mm512_cvtph_ps(load32(blk));
        __m512i lo[4], hi[4];
        for (int k = 0; k < 4; ++k) {
            const __m512i c = _mm512_loadu_si512(blk + 32 + 64 * k);
            lo[k] = _mm512_and_si512(c, low);
            hi[k] = _mm512_and_si512(_mm512_srli_epi16(c, 4), low);
        }
        for (int j = 0; j < kV; ++j) {
            const int8_t* xq = x[j].q + 32 * b;
            __m512i s0 = _mm512_set1_epi32(-8 * x[j].qs[b]), s1 = _mm512_setzero_si512();
            for (int k = 0; k < 4; ++k) {
                s0 = _mm512_dpbusd_epi32(s0, lo[k], bcast4(xq + 4 * k));
                s1 = _mm512_dpbusd_epi32(s1, hi[k], bcast4(xq + 16 + 4 * k));
            }
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                     _mm512_mul_ps(dw, _mm512_set1_ps(x[j].d[b])), acc[j]);
        }
    }
    for (int j = 0; j < kV; ++j) _mm512_storeu_ps(y + j * ldy, acc[j]);
}

template <int kV>
SLUICE_VNNI void tile_q8_0(const uint8_t* tile, int64_t blocks, const TileX* x, float* y, int64_t ldy) {
    __m512 acc[kV];
    for (int j = 0; j < kV; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = tile + b * kQ8_0TileBlockBytes;
        prefetch_tile(blk, kQ8_0TileBlockBytes);
        const __m512 dw = _mm512_cvtph_ps(load32(blk));
        __m512i c[8];
        for (int k = 0; k < 8; ++k) c[k] = _mm512_loadu_si512(blk + 32 + 64 * k);
        for (int j = 0; j < kV; ++j) {
            const int8_t* xq = x[j].q + 32 * b;
            __m512i s0 = _mm512_set1_epi32(-128 * x[j].qs[b]), s1 = _mm512_setzero_si512();
            for (int k = 0; k < 8; k += 2) {
                s0 = _mm512_dpbusd_epi32(s0, c[k], bcast4(xq + 4 * k));
                s1 = _mm512_dpbusd_epi32(s1, c[k + 1], bcast4(xq + 4 * k + 4));
            }
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                     _mm512_mul_ps(dw, _mm512_set1_ps(x[j].d[b])), acc[j]);
        }
    }
    for (int j = 0; j < kV; ++j) _mm512_storeu_ps(y + j * ldy, acc[j]);
}

// Q6_K: per sub-block s the chunks a, b, c hold elements 0..3, 4..7, 8..11 in bits 0..5 and the bit pairs
// 0-1, 2-3, 4-5 of elements 12..15 in bits 6..7. The fourth operand: (a >> 6) | (b >> 4) | (c >> 2), each
// piece's bits picked by a select against a constant mask (the 16-bit shifts carry the next byte's bits
// into the top; the selects and the last AND drop them).
template <int kV>
SLUICE_VNNI void tile_q6_k(const uint8_t* tile, int64_t blocks, const TileX* x, float* y, int64_t ldy) {
    __m512 acc[kV];
    for (int j = 0; j < kV; ++j) acc[j] = _mm512_setzero_ps();
    const __m512i six = _mm512_set1_epi8(0x3F), two = _mm512_set1_epi8(0x03), four = _mm512_set1_epi8(0x0F);
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = tile + b * kQ6_KTileBlockBytes;
        const __m512 dw = _mm512_cvtph_ps(load32(blk));
        prefetch_tile(blk, kQ6_KTileCodesAt);
        for (int s = 0; s < 16; ++s) {
            const uint8_t* ch = blk + kQ6_KTileCodesAt + 192 * s;
            prefetch_tile(ch, 192);
            const __m512i a = _mm512_loadu_si512(ch), bb = _mm512_loadu_si512(ch + 64),
                          c = _mm512_loadu_si512(ch + 128);
            // ternarylogic(x, y, mask, 0xE4) is the bit select mask ? x : y.
            const __m512i top01 =
                _mm512_ternarylogic_epi32(_mm512_srli_epi16(a, 6), _mm512_srli_epi16(bb, 4), two, 0xE4);
            const __m512i top =
                _mm512_and_si512(_mm512_ternarylogic_epi32(top01, _mm512_srli_epi16(c, 2), four, 0xE4), six);
            const __m512i op[4] = {_mm512_and_si512(a, six), _mm512_and_si512(bb, six),
                                   _mm512_and_si512(c, six), top};
            const __m512 ws =
                _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(blk + 32 + 16 * s))));
            const int64_t e0 = 256 * b + 16 * s;
            for (int j = 0; j < kV; ++j) {
                const int8_t* xq = x[j].q + e0;
                __m512i s0 = _mm512_set1_epi32(-32 * x[j].qs16[e0 / 16]), s1 = _mm512_setzero_si512();
                s0 = _mm512_dpbusd_epi32(s0, op[0], bcast4(xq));
                s1 = _mm512_dpbusd_epi32(s1, op[1], bcast4(xq + 4));
                s0 = _mm512_dpbusd_epi32(s0, op[2], bcast4(xq + 8));
                s1 = _mm512_dpbusd_epi32(s1, op[3], bcast4(xq + 12));
                acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                         _mm512_mul_ps(ws, _mm512_set1_ps(x[j].d[e0 / 32])), acc[j]);
            }
        }
    }
    for (int j = 0; j < kV; ++j) _mm512_storeu_ps(y + j * ldy, acc[j]);
}

// MXFP4: the 16 rows' scales 2^(e − 128) from their e8m0 bytes as f32 bit patterns (e < 2: subnormal, as
// e8m0_half); the nibbles through the codebook plus 128 by vpshufb (the low by an AND, the high by a shift
// and an AND), so the offset term is −128·qs_b as Q8_0's.
SLUICE_VNNI inline __m512 e8m0_half16(const uint8_t* e) {
    const __m512i ei = _mm512_cvtepu8_epi32(load16(e));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(ei, _mm512_set1_epi32(1)), 23);
    const __m512i tiny = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), ei);
    return _mm512_castsi512_ps(
        _mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(ei, _mm512_set1_epi32(2)), normal, tiny));
}

template <int kV>
SLUICE_VNNI void tile_mxfp4(const uint8_t* tile, int64_t blocks, const TileX* x, float* y, int64_t ldy) {
    __m512 acc[kV];
    for (int j = 0; j < kV; ++j) acc[j] = _mm512_setzero_ps();
    const __m512i low = _mm512_set1_epi8(0x0F), table = table_plus_128(kMxfp4Values);
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = tile + b * kMxfp4TileBlockBytes;
        prefetch_tile(blk, kMxfp4TileBlockBytes);
        const __m512 ws = e8m0_half16(blk);
        __m512i lo[4], hi[4];
        for (int k = 0; k < 4; ++k) {
            const __m512i c = _mm512_loadu_si512(blk + 16 + 64 * k);
            lo[k] = _mm512_shuffle_epi8(table, _mm512_and_si512(c, low));
            hi[k] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(c, 4), low));
        }
        for (int j = 0; j < kV; ++j) {
            const int8_t* xq = x[j].q + 32 * b;
            __m512i s0 = _mm512_set1_epi32(-128 * x[j].qs[b]), s1 = _mm512_setzero_si512();
            for (int k = 0; k < 4; ++k) {
                s0 = _mm512_dpbusd_epi32(s0, lo[k], bcast4(xq + 4 * k));
                s1 = _mm512_dpbusd_epi32(s1, hi[k], bcast4(xq + 16 + 4 * k));
            }
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                     _mm512_mul_ps(ws, _mm512_set1_ps(x[j].d[b])), acc[j]);
        }
    }
    for (int j = 0; j < kV; ++j) _mm512_storeu_ps(y + j * ldy, acc[j]);
}

// The tiled types: their elements per block and their tile loop for kV vectors.
struct Q4_0Tiles {
    static constexpr int64_t kElems = 32;
    template <int kV>
    SLUICE_VNNI static void tile(const uint8_t* t, int64_t blocks, const TileX* x, float* y, int64_t ldy) {
        tile_q4_0<kV>(t, blocks, x, y, ldy);
    }
};
struct Q8_0Tiles {
    static constexpr int64_t kElems = 32;
    template <int kV>
    SLUICE_VNNI static void tile(const uint8_t* t, int64_t blocks, const TileX* x, float* y, int64_t ldy) {
        tile_q8_0<kV>(t, blocks, x, y, ldy);
    }
};
struct Mxfp4Tiles {
    static constexpr int64_t kElems = 32;
    template <int kV>
    SLUICE_VNNI static void tile(const uint8_t* t, int64_t blocks, const TileX* x, float* y, int64_t ldy) {
        tile_mxfp4<kV>(t, blocks, x, y, ldy);
    }
};
struct Q6_KTiles {
    static constexpr int64_t kElems = 256;
    template <int kV>
    SLUICE_VNNI static void tile(const uint8_t* t, int64_t blocks, const TileX* x, float* y, int64_t ldy) {
        tile_q6_k<kV>(t, blocks, x, y, ldy);
    }
};

// Rows [r0, r1) (whole tiles) of a tiled view: every vector through each tile in turn.
template <typename T>
SLUICE_VNNI void rows_tiled(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    const int64_t cols = w.cols, blocks = cols / T::kElems;
    const size_t row_bytes = w.row_bytes();
    TileX x[kRowVectors];
    for (int64_t j = 0; j < v.n; ++j) {
        const uint8_t* p = static_cast<const uint8_t*>(v.x) + j * v.x_stride_bytes;
        x[j] = {reinterpret_cast<const int8_t*>(p), reinterpret_cast<const float*>(p + ggml_i8_d_at(cols)),
                reinterpret_cast<const int32_t*>(p + ggml_i8_qs_at(cols)),
                reinterpret_cast<const int32_t*>(p + ggml_i8_qs16_at(cols))};
    }
    for (int64_t t0 = r0; t0 < r1; t0 += kGgmlTileRows) {
        const uint8_t* tile = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(t0) * row_bytes;
        float* y = v.y + (t0 - r0);
        switch (v.n) {
            case 1: T::template tile<1>(tile, blocks, x, y, v.ldy); break;
            case 2: T::template tile<2>(tile, blocks, x, y, v.ldy); break;
            case 3: T::template tile<3>(tile, blocks, x, y, v.ldy); break;
            case 4: T::template tile<4>(tile, blocks, x, y, v.ldy); break;
            case 5: T::template tile<5>(tile, blocks, x, y, v.ldy); break;
            case 6: T::template tile<6>(tile, blocks, x, y, v.ldy); break;
            case 7: T::template tile<7>(tile, blocks, x, y, v.ldy); break;
            default: T::template tile<8>(tile, blocks, x, y, v.ldy); break;
        }
    }
}

}  // namespace

const GgmlI8Table kGgmlI8Avx512Vnni = {
    "avx512-vnni",
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
