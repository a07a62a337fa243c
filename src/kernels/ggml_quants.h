// ggml's weight formats — the block types GGUF files store — as kernels see them: each type's block
// layout and size, its exact scalar dequantisation (the definition, reference/ggml_quants.cpp), and a
// fast dot product of one stored row with f32 activations (cpu/ggml_dot*.cpp) whose scalar twin is
// "dequantize, then dot".
//
// A row of `cols` elements is cols / block_elems consecutive blocks of block_bytes; a tensor is rows
// of them back to back (GGUF's dims[0] is the row length: format/gguf.h). Layouts, all
// little-endian, f16 = IEEE half, and element j of a block is y[j]:
//   Q4_0   (32, 18):  f16 d | u8 qs[16]        y[j] = d·(lo(qs[j]) − 8), y[j+16] = d·(hi(qs[j]) − 8)
//   Q4_1   (32, 20):  f16 d, m | u8 qs[16]     y = d·q + m, q as in Q4_0 without the −8
//   Q5_0   (32, 22):  f16 d | u32 qh | u8 qs[16]
//                     q = nibble | (bit j, j+16 for the high half, of qh) << 4; y = d·(q − 16)
//   Q5_1   (32, 24):  f16 d, m | u32 qh | u8 qs[16]     y = d·q + m, q as in Q5_0
//   Q8_0   (32, 34):  f16 d | i8 qs[32]        y[j] = d·qs[j]
//   Q4_K  (256, 144): f16 d, dmin | u8 scales[12] | u8 qs[128]
//                     8 sub-blocks of 32 with 6-bit scale sc_s and min m_s packed in `scales`
//                     (s < 4: sc = scales[s] & 63, m = scales[s+4] & 63; s ≥ 4: sc = low nibble of
//                     scales[s+4] | (scales[s−4] >> 6) << 4, m = high nibble of scales[s+4] |
//                     (scales[s] >> 6) << 4);
//                     64-element chunk c holds sub-blocks 2c (low nibbles of qs[32c..32c+32)) and
//                     2c+1 (high nibbles); y = (d·sc_s)·q − (dmin·m_s)
//   Q5_K  (256, 176): f16 d, dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
//                     Q4_K plus a fifth bit: element l of sub-block s has bit s of qh[l]
//   Q6_K  (256, 210): u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
//                     per 128-element half h, l < 32: elements 128h + l + 32k (k = 0..3) take the low
//                     nibble of ql[64h+l], the low of ql[64h+32+l], the high of ql[64h+l], the high of
//                     ql[64h+32+l], each with bits 2k..2k+1 of qh[32h+l] as bits 4..5;
//                     y = (d·scales[e/16])·(q − 32) for element e
//   Q8_K  (256, 292): f32 d | i8 qs[256] | i16 bsums[16]   y[j] = d·qs[j] (ggml's activation type)
//   IQ4_NL (32, 18):  f16 d | u8 qs[16]             y = d·kIq4nl[nibble], nibbles as in Q4_0
//   IQ4_XS (256, 136): f16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128]
//                     8 sub-blocks of 32 with 6-bit scale ls_s (low 4 bits: nibble s of scales_l,
//                     high 2: bits 2s of scales_h); y = (d·(ls_s − 32))·kIq4nl[nibble], nibbles of
//                     sub-block s as in Q4_0 over qs[16s..16s+16)
//   MXFP4  (32, 17):  u8 e (E8M0) | u8 qs[16]      y = kMxfp4[nibble]·2^(e−128) (the e2m1 values doubled,
//                     the scale halved: ggml's convention, exact), nibbles as in Q4_0
//   F32, F16, BF16 (1 element per "block").
// Every product above is one f32 rounding as written (left to right, no fused multiply-add): the
// definition is bit for bit ggml's dequantize_row_* and gguf-py's dequantize (tests/unit/gguf_test.cpp).
//
// Thread safety: pure functions. No allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace sluice::kernels {

// The ggml types with kernels here, numbered as in ggml.h (and format::GgmlType).
enum class GgmlType : uint32_t {
    kF32 = 0,
    kF16 = 1,
    kQ4_0 = 2,
    kQ4_1 = 3,
    kQ5_0 = 6,
    kQ5_1 = 7,
    kQ8_0 = 8,
    kQ4_K = 12,
    kQ5_K = 13,
    kQ6_K = 14,
    kQ8_K = 15,
    kIQ4_NL = 20,
    kIQ4_XS = 23,
    kBF16 = 30,
    kMXFP4 = 39,
};

struct GgmlFormat {
    GgmlType type;
    const char* name;  // ggml's spelling: "q4_K"
    int block_elems;
    int block_bytes;
    bool fast_dot;  // ggml_vec_dot has SIMD kernels for it (else it runs the twin)
};

// Every type above, in enum order.
std::span<const GgmlFormat> ggml_formats();
// The format of ggml type number `ggml_type`, or null when sluice has no kernels for it.
const GgmlFormat* ggml_format(uint32_t ggml_type);
const GgmlFormat& ggml_format(GgmlType type);
// Bytes of a row of `cols` elements (cols a multiple of block_elems).
inline size_t ggml_row_bytes(const GgmlFormat& f, int64_t cols) {
    return static_cast<size_t>(cols / f.block_elems) * static_cast<size_t>(f.block_bytes);
}

// The e2m1 values of MXFP4 doubled, and IQ4_NL's non-linear 4-bit codebook.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// MXFP4's scale: 2^(e − 128) (half of E8M0's 2^(e − 127), as the doubled values want), exact for
// every e (e < 2: a subnormal f32).
float e8m0_to_f32_half(uint8_t e);

// The integer form of a block, which the int8-activation products read (kernels.h, Activations::kInt8):
// element e of a block is scale_s·code_e + bias_s with s = e / ggml_int8_sub_elems(type), in f32 exactly
// as the definition above rounds it (bit for bit the dequantised element). code is the integer the
// layout stores — Q4_0: nibble − 8; Q4_1: nibble; Q5_0: q − 16; Q5_1: q; Q8_0: the int8; Q4_K/Q5_K: the
// 4/5-bit unsigned q with scale d·sc_s and bias −dmin·m_s; Q6_K: q − 32 with scale d·scales[s];
// IQ4_NL/IQ4_XS: the codebook's int8 value (scale d, d·(ls_s − 32)); MXFP4: the doubled e2m1 value
// (scale 2^(e − 128)). bias is 0 but for Q4_1/Q5_1 (m) and Q4_K/Q5_K.
// Sub-blocks: 16 elements for Q6_K (its scales), 32 for every other block type; 0 for float types.
int ggml_int8_sub_elems(GgmlType type);

namespace reference {
// out[cols] = the row at `row` dequantized by the definition above (cols a multiple of the
// type's block_elems).
void ggml_dequantize_row(GgmlType type, const void* row, int64_t cols, float* out);
// The twin of ggml_vec_dot: Σ_i w_i·x_i over the dequantized row, summed in double.
float ggml_vec_dot(GgmlType type, const void* row, const float* x, int64_t cols);
// One block in integer form (above): codes[block_elems], scales and biases [block_elems / sub_elems].
void ggml_block_codes(GgmlType type, const void* block, int8_t* codes, float* scales, float* biases);
// The int8-activation product of one row with x quantised per block of 32 (q[cols], d[cols / 32]), by
// its definition (kernels.h, Activations::kInt8; written in reference/linear.cpp): per sub-block s of
// the row, scale_s·d_b·Σ code·q + bias_s·d_b·Σ q (d_b: x's block holding s), integers exact, the rest
// summed in double.
float ggml_vec_dot_int8(GgmlType type, const void* row, const int8_t* q, const float* d, int64_t cols);
}  // namespace reference

// The same dot product on the best ISA this CPU runs (the one kernels::cpu_kernel_isa() names, so
// testing::force_isa selects it too). Within rounding of the twin: each block's codes are dotted
// with x first and scaled after, in f32 (tests/unit/gguf_test.cpp states the bound). Types without
// SIMD kernels (fast_dot false) and the portable ISA run the twin.
using GgmlDotFn = float (*)(const void* row, const float* x, int64_t cols);
GgmlDotFn ggml_vec_dot_fn(GgmlType type);
inline float ggml_vec_dot(GgmlType type, const void* row, const float* x, int64_t cols) {
    return ggml_vec_dot_fn(type)(row, x, cols);
}

}  // namespace sluice::kernels
