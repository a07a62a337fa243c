#include "kernels/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

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

namespace {

// Eight 4-bit values, one in the low nibble of each byte of x (little-endian), packed into 32 bits with
// byte i's at bits 4i..4i+3: MLX's order within a code word.
uint32_t pack_nibbles(uint64_t x) {
    x &= 0x0F0F0F0F0F0F0F0Full;
    x = (x | (x >> 4)) & 0x00FF00FF00FF00FFull;
    x = (x | (x >> 8)) & 0x0000FFFF0000FFFFull;
    return static_cast<uint32_t>(x | (x >> 16));
}

}  // namespace

// A block at a time, a word at a time: the upload of a GGUF model's resident experts to the GPU converts
// every one of them, and element by element this ran at 0.5 GB/s of Q4_0 (2 minutes of GLM-4.5-Air's
// 56 GB). Little-endian, as every block format's definition.
bool ggml_as_mlx_affine(const WeightView& w, MlxAffineRows* out) {
    static_assert(std::endian::native == std::endian::little, "GGUF blocks are little-endian");
    const bool q4_0 = w.type == WeightType::kGgmlQ4_0, q4_1 = w.type == WeightType::kGgmlQ4_1;
    if (!q4_0 && !q4_1 && w.type != WeightType::kGgmlQ8_0) return false;
    const int bits = q4_0 || q4_1 ? 4 : 8, block_bytes = q4_0 ? 18 : q4_1 ? 20 : 34;
    const int64_t n_blocks = w.cols / 32 * w.rows;
    const auto* data = static_cast<const uint8_t*>(w.data);
    auto f16 = [](const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); };
    // The biases first: refuse before writing anything when one does not fit f16.
    std::vector<uint16_t> biases(static_cast<size_t>(n_blocks));
    for (int64_t b = 0; b < n_blocks; ++b) {
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
    out->scales.resize(static_cast<size_t>(n_blocks));
    out->words.resize(static_cast<size_t>(n_blocks * bits));  // 32 codes of `bits` a block: `bits` words
    uint16_t* scales = out->scales.data();
    uint32_t* words = out->words.data();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* block = data + b * block_bytes;
        scales[b] = f16(block);
        uint32_t* wb = words + b * bits;
        if (bits == 8) {
            // Q8_0's int8 q is the code q + 128: its byte with the top bit flipped, four to a word.
            for (int k = 0; k < 8; ++k) {
                uint32_t v;
                std::memcpy(&v, block + 2 + 4 * k, 4);
                wb[k] = v ^ 0x80808080u;
            }
        } else {
            // Element j < 16 is qs[j]'s low nibble, j + 16 its high one; MLX's word k holds elements
            // 8k .. 8k + 7.
            uint64_t lo, hi;
            std::memcpy(&lo, block + (q4_1 ? 4 : 2), 8);
            std::memcpy(&hi, block + (q4_1 ? 12 : 10), 8);
            wb[0] = pack_nibbles(lo);
            wb[1] = pack_nibbles(hi);
            wb[2] = pack_nibbles(lo >> 4);
            wb[3] = pack_nibbles(hi >> 4);
        }
    }
    WeightView& v = out->view;
    v = WeightView{};
    v.type = bits == 4 ? WeightType::kQ4 : WeightType::kQ8;
    v.rows = w.rows;
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
