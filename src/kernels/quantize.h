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

namespace sluice::kernels {

// Quantizes one row of `cols` floats. words: cols·bits/32 uint32; scales, biases: cols/group_size
// bf16 values. cols must be a multiple of group_size and of 32/bits.
void quantize_row_affine(const float* row, int64_t cols, int bits, int group_size, uint32_t* words,
                         uint16_t* scales_bf16, uint16_t* biases_bf16);

}  // namespace sluice::kernels
