// MLX affine quantization (models.md §5.1–5.2): the converter's side of the Q4/Q8 formats that
// the kernels read. Used by `sluice pack` (bf16 → 4/8-bit) and `sluice synth`.
//
// Per group of `group_size` consecutive inputs: the edge with the larger magnitude (min or max)
// becomes the bias and is exactly representable, scale = ±(max − min)/(2^bits − 1) (as
// mlx::core::affine_quantize chooses them); scales and biases are stored as bf16, and the codes
// are chosen against the rounded bf16 values so dequantisation error is minimal for what is
// stored. Computation is in f32 (MLX computes in the weight dtype, so MLX-made and sluice-made
// codes can differ by one step on ties; both are valid encodings).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace sluice::kernels {

// Quantizes one row of `cols` floats. words: cols·bits/32 uint32; scales, biases: cols/group_size
// bf16 values. cols must be a multiple of group_size and of 32/bits.
void quantize_row_affine(const float* row, int64_t cols, int bits, int group_size, uint32_t* words,
                         uint16_t* scales_bf16, uint16_t* biases_bf16);

// GGUF's Q4_0, Q4_1 and Q8_0 are MLX affine 4/8-bit with groups of 32, exactly: Q4_0's
// d·(q − 8) is s = d, b = −8·d over the same nibbles; Q4_1's d·q + m is s = d, b = m; Q8_0's d·q is the
// code q + 128 with s = d, b = −128·d — f16 scales and biases, every weight the same f32 value by either
// definition (each product and sum is exact in f32: an f16 times an integer below 2^8). So a backend's
// fast paths for MLX's formats serve these GGUF types (the CUDA upload uses it).
struct MlxAffineRows {
    std::vector<uint32_t> words;   // rows × cols·bits/32
    std::vector<uint16_t> scales;  // rows × cols/32, f16
    std::vector<uint16_t> biases;
    WeightView view;  // kQ4 / kQ8, group 32, f16 scales, into the vectors above
};
// Converts `w` (a view of one of the three types) into `out`; false, nothing converted, for another
// type or a block whose bias −8·d / −128·d does not fit f16.
bool ggml_as_mlx_affine(const WeightView& w, MlxAffineRows* out);

}  // namespace sluice::kernels
