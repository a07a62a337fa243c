// Decode dot products of ggml's block formats (GGUF) on the device: one row against x, a lane per
// 32-element sub-block (the generic product form row_dot takes for them; linear.cu). Each block's scale is
// read once per sub-block and the codes summed against x before it multiplies (Q4_0, Q8_0, Q4_K, Q6_K,
// MXFP4);
// the other types form each weight by the definition (ggml_value, common.cuh).
#pragma once

#include "kernels/cuda/device/common.cuh"

namespace sluice::cuda {

// Σ_j code_j · x_j over 32 4-bit codes packed as ggml packs them (byte j: element j in its low
// nibble, element j + 16 in its high one), 16 bytes read as 8 aligned 16-bit words; `bias` is
// subtracted from every code (Q4_0's 8).
__device__ __forceinline__ float ggml_nibbles_dot(const uint8_t* qs, const float* __restrict__ x, int bias) {
    const uint16_t* q16 = reinterpret_cast<const uint16_t*>(qs);
    float lo = 0.0f, hi = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const uint32_t v = q16[i];
        lo += static_cast<float>(static_cast<int>(v & 0x0F) - bias) * x[2 * i];
        lo += static_cast<float>(static_cast<int>((v >> 8) & 0x0F) - bias) * x[2 * i + 1];
        hi += static_cast<float>(static_cast<int>((v >> 4) & 0x0F) - bias) * x[16 + 2 * i];
        hi += static_cast<float>(static_cast<int>(v >> 12) - bias) * x[16 + 2 * i + 1];
    }
    return lo + hi;
}

// An MXFP4 (e2m1) code as ggml's doubled value, kGgmlMxfp4[q], without a table read (the lanes of a warp
// read different codes, which constant memory serialises): the magnitudes 0, 1, 2, 3, 4, 6, 8, 12 are the
// nibbles of 0xC8643210, bit 3 the sign.
__device__ __forceinline__ float mxfp4_code(uint32_t q) {
    const float mag = static_cast<float>((0xC8643210u >> (4 * (q & 7u))) & 0x0Fu);
    return (q & 8u) != 0 ? -mag : mag;
}

// Σ_j w_j · x_j over the 32-element sub-block sb of a ggml row, its scale read once: the fast forms
// (Q4_0, Q8_0, Q4_K, Q6_K: the formats GGUF MoE files carry most; MXFP4: gpt-oss's experts) sum code·x and
// scale after, the others form each weight by the definition (ggml_value). Within f32 rounding of the
// definition's dot product.
__device__ __forceinline__ float ggml_sub32_dot(WeightType t, const uint8_t* row, int64_t sb,
                                                const float* __restrict__ x) {
    switch (t) {
        case WeightType::kGgmlQ4_0: {  // blocks of 18 bytes: 2-byte aligned
            const uint8_t* b = row + sb * 18;
            return ggml_f16(b) * ggml_nibbles_dot(b + 2, x, 8);
        }
        case WeightType::kGgmlQ8_0: {  // blocks of 34 bytes: 2-byte aligned
            const uint8_t* b = row + sb * 34;
            const uint16_t* q16 = reinterpret_cast<const uint16_t*>(b + 2);
            float acc = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const uint32_t v = q16[i];
                acc += static_cast<float>(static_cast<int8_t>(v & 0xFF)) * x[2 * i];
                acc += static_cast<float>(static_cast<int8_t>(v >> 8)) * x[2 * i + 1];
            }
            return ggml_f16(b) * acc;
        }
        case WeightType::kGgmlQ4_K: {  // sub-block s of a 144-byte block: d·sc·Σq·x − dmin·m·Σx
            const uint8_t* b = row + (sb / 8) * 144;
            const int s = static_cast<int>(sb % 8);
            int sc, m;
            ggml_k4_scale_min(b + 4, s, &sc, &m);
            const uint16_t* q16 = reinterpret_cast<const uint16_t*>(b + 16 + 32 * (s / 2));
            const int shift = 4 * (s % 2);
            float qx = 0.0f, sx = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const uint32_t v = q16[i] >> shift;
                qx += static_cast<float>(v & 0x0F) * x[2 * i] +
                      static_cast<float>((v >> 8) & 0x0F) * x[2 * i + 1];
                sx += x[2 * i] + x[2 * i + 1];
            }
            return ggml_f16(b) * static_cast<float>(sc) * qx - ggml_f16(b + 2) * static_cast<float>(m) * sx;
        }
        case WeightType::kGgmlQ6_K: {  // 32 elements of one quarter k of half h: two 16-element scales
            const uint8_t* b = row + (sb / 8) * 210;
            const int s = static_cast<int>(sb % 8), h = s / 4, k = s % 4;
            const uint16_t* lo16 = reinterpret_cast<const uint16_t*>(b + 64 * h + (k % 2 == 1 ? 32 : 0));
            const uint16_t* hi16 = reinterpret_cast<const uint16_t*>(b + 128 + 32 * h);
            const int lshift = k < 2 ? 0 : 4, hshift = 2 * k;
            float part[2] = {0.0f, 0.0f};
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const uint32_t l = lo16[i] >> lshift, t = hi16[i] >> hshift;
                const int q0 = static_cast<int>((l & 0x0F) | ((t & 3) << 4)) - 32;
                const int q1 = static_cast<int>(((l >> 8) & 0x0F) | (((t >> 8) & 3) << 4)) - 32;
                part[i / 8] += static_cast<float>(q0) * x[2 * i] + static_cast<float>(q1) * x[2 * i + 1];
            }
            const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
            const int e0 = 128 * h + 32 * k;
            return ggml_f16(b + 208) * (static_cast<float>(scales[e0 / 16]) * part[0] +
                                        static_cast<float>(scales[e0 / 16 + 1]) * part[1]);
        }
        case WeightType::kGgmlMXFP4: {  // blocks of 17 bytes (byte-aligned): the e8m0 scale, 16 code bytes
            const uint8_t* b = row + sb * 17;
            float lo = 0.0f, hi = 0.0f;
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const uint32_t v = b[1 + i];
                lo += mxfp4_code(v & 0x0F) * x[i];
                hi += mxfp4_code(v >> 4) * x[16 + i];
            }
            return ggml_e8m0_half(b[0]) * (lo + hi);
        }
        default: {
            float acc = 0.0f;
#pragma unroll 4
            for (int j = 0; j < 32; ++j) acc += ggml_value(t, row, sb, j) * x[j];
            return acc;
        }
    }
}

// A ggml block-format row: lane j takes 32-element sub-blocks j, j + 32, … (a whole block of the
// 32-element types, an eighth of a k-quant's).
template <bool kReduce = true>
__device__ float row_dot_ggml(const DevWeight& w, int64_t r, const float* __restrict__ x, int lane) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * ggml_row_bytes(w);
    float acc = 0.0f;
    for (int64_t sb = lane; sb < w.cols / 32; sb += 32) acc += ggml_sub32_dot(w.type, row, sb, x + sb * 32);
    return kReduce ? warp_sum(acc) : acc;
}

// ---- R rows at once (the decode products of GGUF experts) ----
// row_dot_ggml reads one row at a time: a lane's few sub-blocks are one DRAM round trip in flight per
// warp, and x is read again for every row (gpt-oss-120b's MXFP4 experts decoded at 194 GB/s of the H100's
// 3 TB/s, GLM-4.5-Air's Q4_0 at 200: bench/results/families_gpu). ggml_rows_dot takes R rows of one
// shape together: every row's loads are issued before any arithmetic, and a sub-block of x serves all R.

// The 17 bytes of an MXFP4 block at p (byte-aligned: blocks are 17 bytes) as five 32-bit words from the
// aligned words covering it: byte j of the block is byte j % 4 of out[j / 4]. Each word read holds a
// byte of the block, so no load leaves the weight's allocation (the arena and the expert slots are
// 256-byte granular).
__device__ __forceinline__ void mxfp4_block_words(const uint8_t* p, uint32_t (&out)[5]) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~static_cast<uintptr_t>(3));
    const uint32_t sh = static_cast<uint32_t>(a & 3u) * 8u;
    uint32_t raw[5];
#pragma unroll
    for (int k = 0; k < 5; ++k) raw[k] = __ldg(w + k);
#pragma unroll
    for (int k = 0; k < 4; ++k) out[k] = __funnelshift_r(raw[k], raw[k + 1], sh);
    out[4] = raw[4] >> sh;
}

// Σ_j w_j · x_j over an MXFP4 block held as mxfp4_block_words, x (32 floats) in registers: the same
// products and order as ggml_sub32_dot's MXFP4 case.
__device__ __forceinline__ float mxfp4_words_dot(const uint32_t (&b)[5], const float (&x)[32]) {
    float lo = 0.0f, hi = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        const uint32_t v = (b[(i + 1) / 4] >> (8 * ((i + 1) % 4))) & 0xFFu;
        lo += mxfp4_code(v & 0x0F) * x[i];
        hi += mxfp4_code(v >> 4) * x[16 + i];
    }
    return ggml_e8m0_half(static_cast<uint8_t>(b[0] & 0xFFu)) * (lo + hi);
}

// This lane's partial sums of R rows of ggml matrices of type t and n_sub 32-element sub-blocks each
// (rows[i]: row i's first byte) against x, over the sub-blocks lane, lane + 32, …;
// the caller reduces across the warp.
template <int R>
__device__ __forceinline__ void ggml_rows_dot(WeightType t, const uint8_t* const (&rows)[R], int64_t n_sub,
                                              const float* __restrict__ x, int lane, float (&acc)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0.0f;
    if (t == WeightType::kGgmlMXFP4) {
        const bool x_aligned = (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
        for (int64_t sb = lane; sb < n_sub; sb += 32) {
            uint32_t b[R][5];
#pragma unroll
            for (int i = 0; i < R; ++i) mxfp4_block_words(rows[i] + sb * 17, b[i]);
            float xs[32];
            if (x_aligned) {
                const float4* x4 = reinterpret_cast<const float4*>(x + sb * 32);
#pragma unroll
                for (int c = 0; c < 8; ++c) {
                    const float4 v = x4[c];
                    xs[4 * c] = v.x;
                    xs[4 * c + 1] = v.y;
                    xs[4 * c + 2] = v.z;
                    xs[4 * c + 3] = v.w;
                }
            } else {
#pragma unroll
                for (int j = 0; j < 32; ++j) xs[j] = x[sb * 32 + j];
            }
#pragma unroll
            for (int i = 0; i < R; ++i) acc[i] += mxfp4_words_dot(b[i], xs);
        }
        return;
    }
    for (int64_t sb = lane; sb < n_sub; sb += 32)
#pragma unroll
        for (int i = 0; i < R; ++i) acc[i] += ggml_sub32_dot(t, rows[i], sb, x + sb * 32);
}

}  // namespace sluice::cuda
