// The definition of ggml's weight formats (kernels/ggml_quants.h): block by block, each element
// the f32 product(s) its layout names, in ggml's order — bit for bit ggml-quants.c's
// dequantize_row_* and gguf-py's quants.py dequantize, which tests/unit/gguf_test.cpp checks on
// tools/make_gguf_fixtures.py's fixtures. Written from the layouts, not translated.
//
// Exactness needs every multiply and add rounded on its own: the build compiles this file with
// -ffp-contract=off (CMakeLists.txt), so `d1 * q - m1` never becomes a fused multiply-add where
// the target has one (gguf-py rounds twice; a contracted form differs in the last bit).
// The twin dot product sums in double, so its own rounding is far below any fast path's.
#include "kernels/ggml_quants.h"

#include <cstring>

#include "core/assert.h"
#include "kernels/kernels.h"

namespace sluice::kernels {

namespace {

constexpr GgmlFormat kFormats[] = {
    {GgmlType::kF32, "f32", 1, 4, false},          {GgmlType::kF16, "f16", 1, 2, false},
    {GgmlType::kQ4_0, "q4_0", 32, 18, true},       {GgmlType::kQ4_1, "q4_1", 32, 20, false},
    {GgmlType::kQ5_0, "q5_0", 32, 22, false},      {GgmlType::kQ5_1, "q5_1", 32, 24, false},
    {GgmlType::kQ8_0, "q8_0", 32, 34, true},       {GgmlType::kQ4_K, "q4_K", 256, 144, true},
    {GgmlType::kQ5_K, "q5_K", 256, 176, true},     {GgmlType::kQ6_K, "q6_K", 256, 210, true},
    {GgmlType::kQ8_K, "q8_K", 256, 292, false},    {GgmlType::kIQ4_NL, "iq4_nl", 32, 18, true},
    {GgmlType::kIQ4_XS, "iq4_xs", 256, 136, true}, {GgmlType::kBF16, "bf16", 1, 2, false},
    {GgmlType::kMXFP4, "mxfp4", 32, 17, true},
};

float load_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}

// The 6-bit scale and min of sub-block s (0..7) of a Q4_K / Q5_K block's 12 packed bytes.
void k4_scale_min(const uint8_t* q, int s, int* sc, int* m) {
    if (s < 4) {
        *sc = q[s] & 63;
        *m = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 0x0F) | ((q[s - 4] >> 6) << 4);
        *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

// One block of each type into y[block_elems].
void block_q4_0(const uint8_t* b, float* y) {
    const float d = load_f16(b);
    for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>((b[2 + j] & 0x0F) - 8) * d;
        y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
    }
}

void block_q4_1(const uint8_t* b, float* y) {
    const float d = load_f16(b), m = load_f16(b + 2);
    for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>(b[4 + j] & 0x0F) * d + m;
        y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
    }
}

void block_q5_0(const uint8_t* b, float* y) {
    const float d = load_f16(b);
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    for (int j = 0; j < 16; ++j) {
        const int lo = (b[6 + j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (b[6 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        y[j] = static_cast<float>(lo - 16) * d;
        y[j + 16] = static_cast<float>(hi - 16) * d;
    }
}

void block_q5_1(const uint8_t* b, float* y) {
    const float d = load_f16(b), m = load_f16(b + 2);
    uint32_t qh;
    std::memcpy(&qh, b + 4, 4);
    for (int j = 0; j < 16; ++j) {
        const int lo = (b[8 + j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (b[8 + j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        y[j] = static_cast<float>(lo) * d + m;
        y[j + 16] = static_cast<float>(hi) * d + m;
    }
}

void block_q8_0(const uint8_t* b, float* y) {
    const float d = load_f16(b);
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void block_q4_k(const uint8_t* b, float* y) {
    const float d = load_f16(b), dmin = load_f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qs = b + 16;
    for (int c = 0; c < 4; ++c) {  // 64-element chunks: sub-blocks 2c (low nibbles), 2c+1 (high)
        int sc, m;
        k4_scale_min(scales, 2 * c, &sc, &m);
        const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
        k4_scale_min(scales, 2 * c + 1, &sc, &m);
        const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
            y[64 * c + l] = d1 * static_cast<float>(qs[32 * c + l] & 0x0F) - m1;
            y[64 * c + 32 + l] = d2 * static_cast<float>(qs[32 * c + l] >> 4) - m2;
        }
    }
}

void block_q5_k(const uint8_t* b, float* y) {
    const float d = load_f16(b), dmin = load_f16(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + 48;
    for (int c = 0; c < 4; ++c) {
        int sc, m;
        k4_scale_min(scales, 2 * c, &sc, &m);
        const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
        k4_scale_min(scales, 2 * c + 1, &sc, &m);
        const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
            const int lo = (qs[32 * c + l] & 0x0F) | (((qh[l] >> (2 * c)) & 1) << 4);
            const int hi = (qs[32 * c + l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
            y[64 * c + l] = d1 * static_cast<float>(lo) - m1;
            y[64 * c + 32 + l] = d2 * static_cast<float>(hi) - m2;
        }
    }
}

void block_q6_k(const uint8_t* b, float* y) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    const float d = load_f16(b + 208);
    for (int h = 0; h < 2; ++h) {  // 128-element halves
        for (int l = 0; l < 32; ++l) {
            const uint8_t lo = ql[64 * h + l], hi = ql[64 * h + l + 32], top = qh[32 * h + l];
            const int q[4] = {(lo & 0x0F) | ((top & 3) << 4), (hi & 0x0F) | (((top >> 2) & 3) << 4),
                              (lo >> 4) | (((top >> 4) & 3) << 4), (hi >> 4) | (((top >> 6) & 3) << 4)};
            for (int k = 0; k < 4; ++k) {
                const int e = 128 * h + 32 * k + l;
                y[e] = d * static_cast<float>(scales[e / 16]) * static_cast<float>(q[k] - 32);
            }
        }
    }
}

void block_q8_k(const uint8_t* b, float* y) {
    float d;
    std::memcpy(&d, b, 4);
    for (int j = 0; j < 256; ++j) y[j] = d * static_cast<float>(static_cast<int8_t>(b[4 + j]));
}

void block_iq4_nl(const uint8_t* b, float* y) {
    const float d = load_f16(b);
    for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>(kIq4nlValues[b[2 + j] & 0x0F]);
        y[j + 16] = d * static_cast<float>(kIq4nlValues[b[2 + j] >> 4]);
    }
}

void block_iq4_xs(const uint8_t* b, float* y) {
    const float d = load_f16(b);
    uint16_t scales_h;
    std::memcpy(&scales_h, b + 2, 2);
    const uint8_t* scales_l = b + 4;
    const uint8_t* qs = b + 8;
    for (int s = 0; s < 8; ++s) {
        const int ls = ((scales_l[s / 2] >> (4 * (s % 2))) & 0x0F) | (((scales_h >> (2 * s)) & 3) << 4);
        const float dl = d * static_cast<float>(ls - 32);
        for (int j = 0; j < 16; ++j) {
            y[32 * s + j] = dl * static_cast<float>(kIq4nlValues[qs[16 * s + j] & 0x0F]);
            y[32 * s + j + 16] = dl * static_cast<float>(kIq4nlValues[qs[16 * s + j] >> 4]);
        }
    }
}

void block_mxfp4(const uint8_t* b, float* y) {
    const float d = e8m0_to_f32_half(b[0]);
    for (int j = 0; j < 16; ++j) {
        y[j] = static_cast<float>(kMxfp4Values[b[1 + j] & 0x0F]) * d;
        y[j + 16] = static_cast<float>(kMxfp4Values[b[1 + j] >> 4]) * d;
    }
}

void block_f32(const uint8_t* b, float* y) {
    std::memcpy(y, b, 4);
}
void block_f16(const uint8_t* b, float* y) {
    *y = load_f16(b);
}
void block_bf16(const uint8_t* b, float* y) {
    uint16_t h;
    std::memcpy(&h, b, 2);
    *y = bf16_to_f32(h);
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(GgmlType type) {
    switch (type) {
        case GgmlType::kF32: return block_f32;
        case GgmlType::kF16: return block_f16;
        case GgmlType::kQ4_0: return block_q4_0;
        case GgmlType::kQ4_1: return block_q4_1;
        case GgmlType::kQ5_0: return block_q5_0;
        case GgmlType::kQ5_1: return block_q5_1;
        case GgmlType::kQ8_0: return block_q8_0;
        case GgmlType::kQ4_K: return block_q4_k;
        case GgmlType::kQ5_K: return block_q5_k;
        case GgmlType::kQ6_K: return block_q6_k;
        case GgmlType::kQ8_K: return block_q8_k;
        case GgmlType::kIQ4_NL: return block_iq4_nl;
        case GgmlType::kIQ4_XS: return block_iq4_xs;
        case GgmlType::kBF16: return block_bf16;
        case GgmlType::kMXFP4: return block_mxfp4;
    }
    SLUICE_ASSERT(false && "unknown ggml type");
    return nullptr;
}

// Each block type in integer form (ggml_quants.h, ggml_block_codes): the same fields as block_* above
// read the same way, the products left to the caller. codes[e] in natural element order.
void codes_nibbles(const uint8_t* qs, int offset, const int8_t* table, int8_t* codes) {
    for (int j = 0; j < 16; ++j) {
        const int lo = qs[j] & 0x0F, hi = qs[j] >> 4;
        codes[j] = static_cast<int8_t>(table != nullptr ? table[lo] : lo - offset);
        codes[j + 16] = static_cast<int8_t>(table != nullptr ? table[hi] : hi - offset);
    }
}

void codes_q5(const uint8_t* qh_bytes, const uint8_t* qs, int offset, int8_t* codes) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, 4);
    for (int j = 0; j < 16; ++j) {
        const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
        const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
        codes[j] = static_cast<int8_t>(lo - offset);
        codes[j + 16] = static_cast<int8_t>(hi - offset);
    }
}

// Q4_K / Q5_K (qh null for Q4_K): 8 sub-blocks, scale d·sc_s, bias −dmin·m_s.
void codes_k45(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, int8_t* codes, float* scales,
               float* biases) {
    const float d = load_f16(b), dmin = load_f16(b + 2);
    for (int s = 0; s < 8; ++s) {
        int sc, m;
        k4_scale_min(b + 4, s, &sc, &m);
        scales[s] = d * static_cast<float>(sc);
        biases[s] = -(dmin * static_cast<float>(m));
    }
    for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
            int lo = qs[32 * c + l] & 0x0F, hi = qs[32 * c + l] >> 4;
            if (qh != nullptr) {
                lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
            codes[64 * c + l] = static_cast<int8_t>(lo);
            codes[64 * c + 32 + l] = static_cast<int8_t>(hi);
        }
}

void codes_q6_k(const uint8_t* b, int8_t* codes, float* scales) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const float d = load_f16(b + 208);
    for (int s = 0; s < 16; ++s) scales[s] = d * static_cast<float>(static_cast<int8_t>(b[192 + s]));
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
            const uint8_t lo = ql[64 * h + l], hi = ql[64 * h + l + 32], top = qh[32 * h + l];
            const int q[4] = {(lo & 0x0F) | ((top & 3) << 4), (hi & 0x0F) | (((top >> 2) & 3) << 4),
                              (lo >> 4) | (((top >> 4) & 3) << 4), (hi >> 4) | (((top >> 6) & 3) << 4)};
            for (int k = 0; k < 4; ++k) codes[128 * h + 32 * k + l] = static_cast<int8_t>(q[k] - 32);
        }
}

void codes_iq4_xs(const uint8_t* b, int8_t* codes, float* scales) {
    const float d = load_f16(b);
    uint16_t scales_h;
    std::memcpy(&scales_h, b + 2, 2);
    for (int s = 0; s < 8; ++s) {
        const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0x0F) | (((scales_h >> (2 * s)) & 3) << 4);
        scales[s] = d * static_cast<float>(ls - 32);
        codes_nibbles(b + 8 + 16 * s, 0, kIq4nlValues, codes + 32 * s);
    }
}

}  // namespace

int ggml_int8_sub_elems(GgmlType type) {
    switch (type) {
        case GgmlType::kF32:
        case GgmlType::kF16:
        case GgmlType::kBF16: return 0;
        case GgmlType::kQ6_K: return 16;
        default: return 32;
    }
}

std::span<const GgmlFormat> ggml_formats() {
    return kFormats;
}

const GgmlFormat* ggml_format(uint32_t ggml_type) {
    for (const auto& f : kFormats)
        if (static_cast<uint32_t>(f.type) == ggml_type) return &f;
    return nullptr;
}

const GgmlFormat& ggml_format(GgmlType type) {
    const GgmlFormat* f = ggml_format(static_cast<uint32_t>(type));
    SLUICE_ASSERT(f != nullptr);
    return *f;
}

float e8m0_to_f32_half(uint8_t e) {
    const uint32_t bits = e < 2 ? uint32_t{0x00200000} << e : static_cast<uint32_t>(e - 1) << 23;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

namespace reference {

void ggml_dequantize_row(GgmlType type, const void* row, int64_t cols, float* out) {
    const GgmlFormat& f = ggml_format(type);
    SLUICE_ASSERT(cols >= 0 && cols % f.block_elems == 0);
    const BlockFn fn = block_fn(type);
    const auto* b = static_cast<const uint8_t*>(row);
    for (int64_t i = 0; i < cols / f.block_elems; ++i) fn(b + i * f.block_bytes, out + i * f.block_elems);
}

void ggml_block_codes(GgmlType type, const void* block, int8_t* codes, float* scales, float* biases) {
    const auto* b = static_cast<const uint8_t*>(block);
    const GgmlFormat& f = ggml_format(type);
    const int subs = ggml_int8_sub_elems(type) > 0 ? f.block_elems / ggml_int8_sub_elems(type) : 0;
    SLUICE_ASSERT(subs > 0);
    for (int s = 0; s < subs; ++s) biases[s] = 0.0f;
    switch (type) {
        case GgmlType::kQ4_0:
            scales[0] = load_f16(b);
            codes_nibbles(b + 2, 8, nullptr, codes);
            return;
        case GgmlType::kQ4_1:
            scales[0] = load_f16(b);
            biases[0] = load_f16(b + 2);
            codes_nibbles(b + 4, 0, nullptr, codes);
            return;
        case GgmlType::kQ5_0:
            scales[0] = load_f16(b);
            codes_q5(b + 2, b + 6, 16, codes);
            return;
        case GgmlType::kQ5_1:
            scales[0] = load_f16(b);
            biases[0] = load_f16(b + 2);
            codes_q5(b + 4, b + 8, 0, codes);
            return;
        case GgmlType::kQ8_0:
            scales[0] = load_f16(b);
            std::memcpy(codes, b + 2, 32);
            return;
        case GgmlType::kQ4_K: codes_k45(b, nullptr, b + 16, codes, scales, biases); return;
        case GgmlType::kQ5_K: codes_k45(b, b + 16, b + 48, codes, scales, biases); return;
        case GgmlType::kQ6_K: codes_q6_k(b, codes, scales); return;
        case GgmlType::kQ8_K: {
            std::memcpy(&scales[0], b, 4);
            for (int s = 1; s < 8; ++s) scales[s] = scales[0];
            std::memcpy(codes, b + 4, 256);
            return;
        }
        case GgmlType::kIQ4_NL:
            scales[0] = load_f16(b);
            codes_nibbles(b + 2, 0, kIq4nlValues, codes);
            return;
        case GgmlType::kIQ4_XS: codes_iq4_xs(b, codes, scales); return;
        case GgmlType::kMXFP4:
            scales[0] = e8m0_to_f32_half(b[0]);
            codes_nibbles(b + 1, 0, kMxfp4Values, codes);
            return;
        default: break;
    }
    SLUICE_ASSERT(false && "a float type has no integer form");
}

float ggml_vec_dot(GgmlType type, const void* row, const float* x, int64_t cols) {
    const GgmlFormat& f = ggml_format(type);
    SLUICE_ASSERT(cols >= 0 && cols % f.block_elems == 0);
    const BlockFn fn = block_fn(type);
    const auto* b = static_cast<const uint8_t*>(row);
    float w[256];  // one block
    double acc = 0.0;
    for (int64_t i = 0; i < cols / f.block_elems; ++i) {
        fn(b + i * f.block_bytes, w);
        for (int j = 0; j < f.block_elems; ++j)
            acc += static_cast<double>(w[j]) * static_cast<double>(x[i * f.block_elems + j]);
    }
    return static_cast<float>(acc);
}

}  // namespace reference
}  // namespace sluice::kernels
