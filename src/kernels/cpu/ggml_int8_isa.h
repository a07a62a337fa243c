// The int8-activation products of ggml's block formats (kernels.h, Activations::kInt8; internal to
// src/kernels/cpu/): x quantised once per vector into one prepared form that every type and ISA reads,
// and per ISA one row kernel per type. ggml_int8_avx512.cpp (VNNI vpdpbusd) and ggml_int8_avx2.cpp
// (vpmaddubsw) each fill one table; ggml_int8.cpp holds the portable path (the definition itself,
// reference::ggml_vec_dot_int8, on the same prepared x) and picks the table that
// kernels::cpu_int8_kernel_isa() names. The rules of isa_table.h hold for the ISA files.
//
// Prepared x of `cols` inputs (cols a multiple of 32; P = cols rounded up to 64, B = cols / 32 rounded
// up to 16), natural order, the padding zero:
//   q    int8 [P]        the codes
//   dl   f32  [P / 4]    d of the block holding codes 4L..4L+3 (one per lane of a 4-byte integer dot)
//   nls  int32[P / 4]    −(q[4L] + q[4L+1] + q[4L+2] + q[4L+3])
//   d    f32  [B]        d per block
//   xsb  f32  [B]        d_b · Σ_{i∈b} q_i, rounded to f32
//   qs   int32[B]        Σ_{i∈b} q_i (the row tiles' offset term, −8·Σq or −128·Σq, in integers)
//   qs16 int32[2B]       Σ q_i over each 16 inputs (Q6_K tiles' offset term per sub-block, −32·Σq)
// A row kernel takes each 4 codes' integer dot in a lane (vpdpbusd and vpmaddubsw + vpmaddwd both sum
// bytes 4L..4L+3 into lane L), so the per-lane arrays line up with the integer sums of either ISA.
// A code stored unsigned with an offset (Q4_0: nibble = code + 8) starts its lane at offset·nls, so the
// lane holds Σ code·q exactly; a per-block bias (Q4_1/Q5_1: m; Q4_K/Q5_K: −dmin·m_s) meets Σq through
// nls or xsb.
//
// Row tiles (ggml_tiles.h) have kernels of their own (`q4_0x16`, `q6_kx16`, `q8_0x16`, `mxfp4x16`): a
// tile's 16 rows in the lanes, each (sub-)block's integer sum Σ code·q exact (the stored codes' offset
// taken out through qs or qs16), then per (sub-)block, in element order, one f32 FMA per (row, vector):
//   Q4_0x16, Q8_0x16: per block b          acc = fma((float)Σ code·q, d_row · d_b, acc)
//   MXFP4x16: per block b                  acc = fma((float)Σ code·q, 2^(e_row − 128) · d_b, acc)
//                                          (code: the doubled e2m1 value, kMxfp4Values)
//   Q6_Kx16: per sub-block s (16 inputs)   acc = fma((float)Σ code·q, (d_row · (float)sc_s) · d_b, acc)
// — the same operations on every ISA, so the portable twin (ggml_int8.cpp) and the AVX-2 and AVX-512 VNNI
// loops give the same bits. Their rows [r0, r1) are whole tiles.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa_table.h"
#include "kernels/ggml_quants.h"

namespace sluice::kernels::cpu {

// Offsets into a prepared vector (static: every ISA file gets its own copy, see isa_table.h).
static inline int64_t ggml_i8_codes_bytes(int64_t cols) {
    return (cols + 63) / 64 * 64;
}
static inline int64_t ggml_i8_blocks_padded(int64_t cols) {
    return (cols / 32 + 15) / 16 * 16;
}
static inline int64_t ggml_i8_dl_at(int64_t cols) {
    return ggml_i8_codes_bytes(cols);
}
static inline int64_t ggml_i8_nls_at(int64_t cols) {
    return 2 * ggml_i8_codes_bytes(cols);
}
static inline int64_t ggml_i8_d_at(int64_t cols) {
    return 3 * ggml_i8_codes_bytes(cols);
}
static inline int64_t ggml_i8_xsb_at(int64_t cols) {
    return 3 * ggml_i8_codes_bytes(cols) + 4 * ggml_i8_blocks_padded(cols);
}
static inline int64_t ggml_i8_qs_at(int64_t cols) {
    return 3 * ggml_i8_codes_bytes(cols) + 8 * ggml_i8_blocks_padded(cols);
}
static inline int64_t ggml_i8_qs16_at(int64_t cols) {
    return 3 * ggml_i8_codes_bytes(cols) + 12 * ggml_i8_blocks_padded(cols);
}
// Bytes of one prepared vector (a multiple of 64).
static inline int64_t ggml_i8_prepared_bytes(int64_t cols) {
    return 3 * ggml_i8_codes_bytes(cols) + 20 * ggml_i8_blocks_padded(cols);
}

// Rows [r0, r1) of a ggml block view times each prepared vector (RowVectors: x the prepared vectors,
// sums unused); row r's result for vector j at v.y[j·ldy + r − r0]. Each (row, vector) is computed the
// same way whatever vectors and rows share the call (bit for bit the vector alone), as every row kernel
// of isa_table.h.
using GgmlI8RowsFn = void (*)(const WeightView& w, const RowVectors& v, int64_t r0, int64_t r1);
// x[cols] into its prepared form (above), exactly the definition's quantisation on every ISA.
using GgmlI8PrepareFn = void (*)(const float* x, int64_t cols, uint8_t* prep);

struct GgmlI8Table {
    const char* i8_name;  // the int8 IsaTable it goes with: "avx512-vnni", "avx2"
    GgmlI8PrepareFn prepare;
    GgmlI8RowsFn q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4;
    GgmlI8RowsFn q4_0x16, q6_kx16, q8_0x16, mxfp4x16;  // row tiles: rows [r0, r1) whole tiles
};

#if defined(__x86_64__)
extern const GgmlI8Table kGgmlI8Avx2;
extern const GgmlI8Table kGgmlI8Avx512Vnni;
#endif

// The prepare and rows functions of weight format `type` (a ggml block format) on the int8 ISA named
// i8_name (IsaTable::i8_name): its table's, or the portable path's (the definition; for row tiles their
// twin).
struct GgmlI8Kernels {
    GgmlI8PrepareFn prepare;
    GgmlI8RowsFn rows;
};
GgmlI8Kernels ggml_i8_kernels(WeightType type, const char* i8_name);

}  // namespace sluice::kernels::cpu
