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

bool ggml_as_mlx_affine(const WeightView& w, MlxAffineRows* out) {
    const bool q4_0 = w.type == WeightType::kGgmlQ4_0, q4_1 = w.type == WeightType::kGgmlQ4_1;
    if (!q4_0 && !q4_1 && w.type != WeightType::kGgmlQ8_0) return false;
    const int bits = q4_0 || q4_1 ? 4 : 8, block_bytes = q4_0 ? 18 : q4_1 ? 20 : 34;
    const int64_t blocks = w.cols / 32, rows = w.rows;
    const auto* data = static_cast<const uint8_t*>(w.data);
    auto f16 = [](const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); };
    // The biases first: refuse before writing anything when one does not fit f16.
    std::vector<uint16_t> biases(static_cast<size_t>(rows * blocks));
    for (int64_t b = 0; b < rows * blocks; ++b) {
        const uint8_t* block = data + b * block_bytes;
        if (q4_1) {
            biases[static_cast<size_t>(b)] = f16(block + 2);
            continue;
        }
        const float bias = -(q4_0 ? 8.0f : 128.0f) * f16_to_f32(f16(block));
        if (!std::isfinite(bias) || std::fabs(bias) > 65504.0f) return false;
        biases[static_cast<size_t>(b)] = f32_to_f16(bias);  // exact: a power of two times an f16
    }
    out->biases = std::move(biases);
    out->scales.resize(static_cast<size_t>(rows * blocks));
    out->words.assign(static_cast<size_t>(rows * w.cols * bits / 32), 0u);
    for (int64_t b = 0; b < rows * blocks; ++b) {
        const uint8_t* block = data + b * block_bytes;
        out->scales[static_cast<size_t>(b)] = f16(block);
        uint32_t* words = out->words.data() + b * (32 * bits / 32);
        for (int j = 0; j < 32; ++j) {
            uint32_t code;
            if (bits == 8) {
                code = static_cast<uint32_t>(static_cast<int>(static_cast<int8_t>(block[2 + j])) + 128);
            } else {
                const uint8_t* qs = block + (q4_1 ? 4 : 2);
                code = j < 16 ? (qs[j] & 0x0Fu) : (qs[j - 16] >> 4);
            }
            words[j * bits / 32] |= code << (bits * (j % (32 / bits)));
        }
    }
    WeightView& v = out->view;
    v = WeightView{};
    v.type = bits == 4 ? WeightType::kQ4 : WeightType::kQ8;
    v.rows = rows;
    v.cols = w.cols;
    v.data = out->words.data();
    v.scales = out->scales.data();
    v.biases = out->biases.data();
    v.scale_type = ScaleType::kF16;
    v.group_size = 32;
    v.activations = w.activations;
    return true;
}

}  // namespace sluice::kernels
