// The int8-activation products of ggml's block formats (ggml_int8_isa.h): the portable path and the
// choice of table. The portable path is the definition itself — reference::ggml_vec_dot_int8 on the
// prepared codes and block scales — so a run on the portable ISA gives the reference's bits; the AVX-2
// and AVX-512 VNNI tables hold the fast loops. The table follows the int8 IsaTable the dispatch uses
// (kernels::cpu_int8_kernel_isa(): AVX-512 without VNNI takes AVX-2's), so testing::force_isa selects it.
// Row tiles (Q4_0x16, Q6_Kx16, Q8_0x16, MXFP4x16) are the exception: their portable path is the twin of the
// SIMD loops, the same operations in the same order (ggml_int8_isa.h), so every ISA gives the same bits.
#include <math.h>
#include <string.h>

#include "core/assert.h"
#include "kernels/cpu/ggml_int8_isa.h"
#include "kernels/ggml_quants.h"
#include "kernels/ggml_tiles.h"
#include "kernels/weight_format.h"

namespace sluice::kernels::cpu {
namespace {

// The definition's quantisation (reference/linear.cpp, quantize_int8), written into the prepared form.
void prepare_portable(const float* x, int64_t cols, uint8_t* prep) {
    memset(prep, 0, static_cast<size_t>(ggml_i8_prepared_bytes(cols)));
    auto* q = reinterpret_cast<int8_t*>(prep);
    auto* dl = reinterpret_cast<float*>(prep + ggml_i8_dl_at(cols));
    auto* nls = reinterpret_cast<int32_t*>(prep + ggml_i8_nls_at(cols));
    auto* d = reinterpret_cast<float*>(prep + ggml_i8_d_at(cols));
    auto* xsb = reinterpret_cast<float*>(prep + ggml_i8_xsb_at(cols));
    auto* qs = reinterpret_cast<int32_t*>(prep + ggml_i8_qs_at(cols));
    auto* qs16 = reinterpret_cast<int32_t*>(prep + ggml_i8_qs16_at(cols));
    for (int64_t b = 0; b < cols / 32; ++b) {
        float amax = 0.0f;
        for (int64_t i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        d[b] = amax / 127.0f;
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int64_t i = 0; i < 32; ++i) {
            const auto v = static_cast<int32_t>(nearbyintf(x[b * 32 + i] * id));
            q[b * 32 + i] = static_cast<int8_t>(v);
            nls[(b * 32 + i) / 4] -= v;
            qs16[(b * 32 + i) / 16] += v;
            sum += v;
        }
        for (int64_t lane = 8 * b; lane < 8 * b + 8; ++lane) dl[lane] = d[b];
        xsb[b] = d[b] * static_cast<float>(sum);
        qs[b] = sum;
    }
}

template <GgmlType T>
void rows_portable(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    const int64_t cols = w.cols;
    const size_t row_bytes = w.row_bytes();
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * row_bytes;
        for (int64_t j = 0; j < v.n; ++j) {
            const uint8_t* prep = static_cast<const uint8_t*>(v.x) + j * v.x_stride_bytes;
            v.y[j * v.ldy + (r - r0)] =
                reference::ggml_vec_dot_int8(T, row, reinterpret_cast<const int8_t*>(prep),
                                             reinterpret_cast<const float*>(prep + ggml_i8_d_at(cols)), cols);
        }
    }
}

// Row tiles (ggml_tiles.h): the twins of the AVX-2 and AVX-512 VNNI loops, their arithmetic written out
// (ggml_int8_isa.h) — per (row, vector) and (sub-)block, in element order, the exact integer Σ code·q,
// then one fmaf into the row's accumulator. A type is its Tile: the block column's bytes and elements,
// and per (sub-)block u of a block column the scale of row i and Σ code·q of row i with x's codes there.

// x's prepared arrays (ggml_int8_isa.h).
struct TileX {
    const int8_t* q;
    const float* d;
    const int32_t* qs;
    const int32_t* qs16;
};

float f16_at(const uint8_t* p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

struct Q4_0Tile {  // a unit: the block; Σ nibble·q − 8·qs_b
    static constexpr int64_t kBlockBytes = kQ4_0TileBlockBytes, kElems = 32, kUnits = 1;
    static float scale(const uint8_t* col, int64_t i, int64_t) { return f16_at(col + 2 * i); }
    static int32_t dot(const uint8_t* col, int64_t i, int64_t, const TileX& x, int64_t e0) {
        const int8_t* q = x.q + e0;
        int32_t s = -8 * x.qs[e0 / 32];
        for (int64_t k = 0; k < 4; ++k)
            for (int64_t e = 0; e < 4; ++e) {
                const uint8_t c = col[32 + 64 * k + 4 * i + e];
                s += (c & 0x0F) * q[4 * k + e] + (c >> 4) * q[16 + 4 * k + e];
            }
        return s;
    }
};

struct Q8_0Tile {  // a unit: the block; Σ (code + 128)·q − 128·qs_b
    static constexpr int64_t kBlockBytes = kQ8_0TileBlockBytes, kElems = 32, kUnits = 1;
    static float scale(const uint8_t* col, int64_t i, int64_t) { return f16_at(col + 2 * i); }
    static int32_t dot(const uint8_t* col, int64_t i, int64_t, const TileX& x, int64_t e0) {
        const int8_t* q = x.q + e0;
        int32_t s = -128 * x.qs[e0 / 32];
        for (int64_t k = 0; k < 8; ++k)
            for (int64_t e = 0; e < 4; ++e) s += col[32 + 64 * k + 4 * i + e] * q[4 * k + e];
        return s;
    }
};

struct Mxfp4Tile {  // a unit: the block; Σ value(nibble)·q (the codebook's doubled e2m1 values)
    static constexpr int64_t kBlockBytes = kMxfp4TileBlockBytes, kElems = 32, kUnits = 1;
    static float scale(const uint8_t* col, int64_t i, int64_t) { return e8m0_to_f32_half(col[i]); }
    static int32_t dot(const uint8_t* col, int64_t i, int64_t, const TileX& x, int64_t e0) {
        const int8_t* q = x.q + e0;
        int32_t s = 0;
        for (int64_t k = 0; k < 4; ++k)
            for (int64_t e = 0; e < 4; ++e) {
                const uint8_t c = col[16 + 64 * k + 4 * i + e];
                s += kMxfp4Values[c & 0x0F] * q[4 * k + e] + kMxfp4Values[c >> 4] * q[16 + 4 * k + e];
            }
        return s;
    }
};

struct Q6_KTile {  // a unit: sub-block s of 16; Σ (code + 32)·q − 32·qs16_s, scale d·sc_s
    static constexpr int64_t kBlockBytes = kQ6_KTileBlockBytes, kElems = 256, kUnits = 16;
    static float scale(const uint8_t* col, int64_t i, int64_t s) {
        return f16_at(col + 2 * i) * static_cast<float>(static_cast<int8_t>(col[32 + 16 * s + i]));
    }
    static int32_t dot(const uint8_t* col, int64_t i, int64_t s, const TileX& x, int64_t e0) {
        const uint8_t* ch = col + kQ6_KTileCodesAt + 192 * s + 4 * i;
        const int8_t* q = x.q + e0;
        int32_t sum = -32 * x.qs16[e0 / 16];
        for (int64_t e = 0; e < 4; ++e) {
            int top = 0;
            for (int64_t k = 0; k < 3; ++k) {
                sum += (ch[64 * k + e] & 0x3F) * q[4 * k + e];
                top |= (ch[64 * k + e] >> 6) << (2 * k);
            }
            sum += top * q[12 + e];
        }
        return sum;
    }
};

template <typename T>
void rows_tiled(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    const int64_t cols = w.cols, blocks = cols / T::kElems, unit_elems = T::kElems / T::kUnits;
    const size_t row_bytes = w.row_bytes();
    SLUICE_ASSERT(r0 % kGgmlTileRows == 0 && r1 % kGgmlTileRows == 0);
    for (int64_t t0 = r0; t0 < r1; t0 += kGgmlTileRows) {
        const uint8_t* tile = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(t0) * row_bytes;
        for (int64_t j = 0; j < v.n; ++j) {
            const uint8_t* prep = static_cast<const uint8_t*>(v.x) + j * v.x_stride_bytes;
            const TileX x{reinterpret_cast<const int8_t*>(prep),
                          reinterpret_cast<const float*>(prep + ggml_i8_d_at(cols)),
                          reinterpret_cast<const int32_t*>(prep + ggml_i8_qs_at(cols)),
                          reinterpret_cast<const int32_t*>(prep + ggml_i8_qs16_at(cols))};
            for (int64_t i = 0; i < kGgmlTileRows; ++i) {
                float acc = 0.0f;
                for (int64_t b = 0; b < blocks; ++b) {
                    const uint8_t* col = tile + b * T::kBlockBytes;
                    for (int64_t u = 0; u < T::kUnits; ++u) {
                        const int64_t e0 = b * T::kElems + u * unit_elems;
                        const int32_t s = T::dot(col, i, u, x, e0);
                        acc = fmaf(static_cast<float>(s), T::scale(col, i, u) * x.d[e0 / 32], acc);
                    }
                }
                v.y[j * v.ldy + (t0 - r0) + i] = acc;
            }
        }
    }
}

const GgmlI8Table kPortable = {
    "portable",
    prepare_portable,
    rows_portable<GgmlType::kQ4_0>,
    rows_portable<GgmlType::kQ4_1>,
    rows_portable<GgmlType::kQ5_0>,
    rows_portable<GgmlType::kQ5_1>,
    rows_portable<GgmlType::kQ8_0>,
    rows_portable<GgmlType::kQ4_K>,
    rows_portable<GgmlType::kQ5_K>,
    rows_portable<GgmlType::kQ6_K>,
    rows_portable<GgmlType::kIQ4_NL>,
    rows_portable<GgmlType::kIQ4_XS>,
    rows_portable<GgmlType::kMXFP4>,
    rows_tiled<Q4_0Tile>,
    rows_tiled<Q6_KTile>,
    rows_tiled<Q8_0Tile>,
    rows_tiled<Mxfp4Tile>,
};

const GgmlI8Table& table_named(const char* i8_name) {
#if defined(__x86_64__)
    if (strcmp(i8_name, kGgmlI8Avx512Vnni.i8_name) == 0) return kGgmlI8Avx512Vnni;
    if (strcmp(i8_name, kGgmlI8Avx2.i8_name) == 0) return kGgmlI8Avx2;
#endif
    return kPortable;
}

GgmlI8RowsFn rows_of(const GgmlI8Table& t, WeightType wt) {
    if (wt == WeightType::kGgmlQ4_0x16) return t.q4_0x16;
    if (wt == WeightType::kGgmlQ6_Kx16) return t.q6_kx16;
    if (wt == WeightType::kGgmlQ8_0x16) return t.q8_0x16;
    if (wt == WeightType::kGgmlMXFP4x16) return t.mxfp4x16;
    switch (weight_format(wt).ggml) {
        case GgmlType::kQ4_0: return t.q4_0;
        case GgmlType::kQ4_1: return t.q4_1;
        case GgmlType::kQ5_0: return t.q5_0;
        case GgmlType::kQ5_1: return t.q5_1;
        case GgmlType::kQ8_0: return t.q8_0;
        case GgmlType::kQ4_K: return t.q4_k;
        case GgmlType::kQ5_K: return t.q5_k;
        case GgmlType::kQ6_K: return t.q6_k;
        case GgmlType::kIQ4_NL: return t.iq4_nl;
        case GgmlType::kIQ4_XS: return t.iq4_xs;
        case GgmlType::kMXFP4: return t.mxfp4;
        default: return nullptr;
    }
}

}  // namespace

GgmlI8Kernels ggml_i8_kernels(WeightType type, const char* i8_name) {
    const GgmlI8Table& t = table_named(i8_name);
    const GgmlI8RowsFn rows = rows_of(t, type);
    SLUICE_ASSERT(rows != nullptr && "a ggml type without int8 kernels");
    return {t.prepare, rows};
}

}  // namespace sluice::kernels::cpu
