#include "kernels/quantize.h"

#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"

namespace sluice::kernels {

void quantize_row_affine(const float* row, int64_t cols, int bits, int group_size, uint32_t* words,
                         uint16_t* scales_bf16, uint16_t* biases_bf16) {
    const int per_word = 32 / bits;
    const float n_bins = static_cast<float>((1 << bits) - 1);
    std::fill(words, words + cols / per_word, 0u);
    for (int64_t g = 0; g < cols / group_size; ++g) {
        const float* w = row + g * group_size;
        float lo = w[0], hi = w[0];
        for (int i = 1; i < group_size; ++i) {
            lo = std::min(lo, w[i]);
            hi = std::max(hi, w[i]);
        }
        const bool min_edge = std::fabs(lo) > std::fabs(hi);
        float scale = std::max((hi - lo) / n_bins, 1e-7f);
        if (!min_edge) scale = -scale;
        const float edge = min_edge ? lo : hi;
        const float q0 = std::nearbyint(edge / scale);
        float bias = 0.0f;
        if (q0 != 0.0f) {
            scale = edge / q0;
            bias = edge;
        }
        scales_bf16[g] = f32_to_bf16(scale);
        biases_bf16[g] = f32_to_bf16(bias);
        const float s = bf16_to_f32(scales_bf16[g]);
        const float b = bf16_to_f32(biases_bf16[g]);
        for (int i = 0; i < group_size; ++i) {
            float q = s != 0.0f ? std::nearbyint((w[i] - b) / s) : 0.0f;
            q = std::clamp(q, 0.0f, n_bins);
            const int64_t idx = g * group_size + i;
            words[idx / per_word] |= static_cast<uint32_t>(q) << (bits * (idx % per_word));
        }
    }
}

}  // namespace sluice::kernels
