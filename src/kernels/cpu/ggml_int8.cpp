// The int8-activation products of ggml's block formats (ggml_int8_isa.h): the portable path and the
// choice of table. The portable path is the definition itself — reference::ggml_vec_dot_int8 on the
// prepared codes and block scales — so a run on the portable ISA gives the reference's bits; the AVX-2
// and AVX-512 VNNI tables hold the fast loops. The table follows the int8 IsaTable the dispatch uses
// (kernels::cpu_int8_kernel_isa(): AVX-512 without VNNI takes AVX-2's), so testing::force_isa selects it.
// Row tiles (Q4_0x16) are the exception: their portable path is the twin of the SIMD loops, the same
// operations in the same order (ggml_int8_isa.h), so every ISA gives the same bits.
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

// Q4_0 row tiles (ggml_tiles.h): the twin of the AVX-2 and AVX-512 VNNI loops, their arithmetic written
// out — per (row, vector) and block, in block order, the exact Σ code·q = Σ nibble·q − 8·qs_b, then
// acc = fma((float)Σ, d_row · d_b, acc).
void rows_q4_0x16(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1) {
    const int64_t cols = w.cols, blocks = cols / 32;
    const size_t row_bytes = w.row_bytes();
    SLUICE_ASSERT(r0 % kQ4_0TileRows == 0 && r1 % kQ4_0TileRows == 0);
    for (int64_t t0 = r0; t0 < r1; t0 += kQ4_0TileRows) {
        const uint8_t* tile = static_cast<const uint8_t*>(w.data) + static_cast<size_t>(t0) * row_bytes;
        for (int64_t j = 0; j < v.n; ++j) {
            const uint8_t* prep = static_cast<const uint8_t*>(v.x) + j * v.x_stride_bytes;
            const auto* q = reinterpret_cast<const int8_t*>(prep);
            const auto* d = reinterpret_cast<const float*>(prep + ggml_i8_d_at(cols));
            const auto* qs = reinterpret_cast<const int32_t*>(prep + ggml_i8_qs_at(cols));
            for (int64_t i = 0; i < kQ4_0TileRows; ++i) {
                float acc = 0.0f;
                for (int64_t b = 0; b < blocks; ++b) {
                    const uint8_t* blk = tile + b * kQ4_0TileBlockBytes;
                    const int8_t* qb = q + 32 * b;
                    int32_t s = -8 * qs[b];
                    for (int64_t k = 0; k < 4; ++k)
                        for (int64_t e = 0; e < 4; ++e) {
                            const uint8_t c = blk[32 + 64 * k + 4 * i + e];
                            s += (c & 0x0F) * qb[4 * k + e] + (c >> 4) * qb[16 + 4 * k + e];
                        }
                    uint16_t h;
                    memcpy(&h, blk + 2 * i, 2);
                    acc = fmaf(static_cast<float>(s), f16_to_f32(h) * d[b], acc);
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
    rows_q4_0x16,
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
