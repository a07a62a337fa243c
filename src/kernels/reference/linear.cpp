// Reference (oracle) linear ops: dequantize_row, matvec, matmul over every WeightType.
// Element by element straight from the format definition (models.md §5.1–5.3): w = s·q + b with
// the code of input i at bits 4·(i%8) of word i/8 (Q4) or 8·(i%4) of word i/4 (Q8). Sums are
// accumulated in double so the oracle's own rounding error is far below the test tolerance.
// Single-threaded (the pool argument is ignored); no allocation except matmul's one row buffer.
#include <cstring>
#include <vector>

#include "core/assert.h"
#include "kernels/kernels.h"

namespace sluice::kernels::reference {
namespace {

uint16_t load_u16(const void* base, int64_t index) {
    uint16_t v;
    std::memcpy(&v, static_cast<const char*>(base) + index * 2, 2);
    return v;
}

float load_scale(const void* base, ScaleType type, int64_t index) {
    switch (type) {
        case ScaleType::kF32: {
            float v;
            std::memcpy(&v, static_cast<const char*>(base) + index * 4, 4);
            return v;
        }
        case ScaleType::kF16: return f16_to_f32(load_u16(base, index));
        case ScaleType::kBF16: return bf16_to_f32(load_u16(base, index));
    }
    return 0.0f;
}

float weight_at(const WeightView& w, int64_t r, int64_t i) {
    switch (w.type) {
        case WeightType::kF32: {
            float v;
            std::memcpy(&v, static_cast<const char*>(w.data) + (r * w.cols + i) * 4, 4);
            return v;
        }
        case WeightType::kF16: return f16_to_f32(load_u16(w.data, r * w.cols + i));
        case WeightType::kBF16: return bf16_to_f32(load_u16(w.data, r * w.cols + i));
        case WeightType::kQ4:
        case WeightType::kQ8: {
            const int bits = w.bits();
            const int per_word = 32 / bits;
            const int64_t words_per_row = w.cols / per_word;
            uint32_t word;
            std::memcpy(&word, static_cast<const char*>(w.data) + (r * words_per_row + i / per_word) * 4, 4);
            const uint32_t code = (word >> (bits * (i % per_word))) & ((1u << bits) - 1u);
            const int64_t g = r * (w.cols / w.group_size) + i / w.group_size;
            const float s = load_scale(w.scales, w.scale_type, g);
            const float b = load_scale(w.biases, w.scale_type, g);
            return s * static_cast<float>(code) + b;
        }
    }
    return 0.0f;
}

void check_view(const WeightView& w) {
    SLUICE_ASSERT(w.data != nullptr && w.rows >= 0 && w.cols >= 0);
    if (w.quantized()) {
        SLUICE_ASSERT(w.group_size > 0 && w.cols % w.group_size == 0 && w.group_size % (32 / w.bits()) == 0);
        SLUICE_ASSERT(w.scales != nullptr && w.biases != nullptr);
    }
}

}  // namespace

void dequantize_row(const WeightView& w, int64_t row, float* out) {
    check_view(w);
    SLUICE_ASSERT(row >= 0 && row < w.rows);
    for (int64_t i = 0; i < w.cols; ++i) out[i] = weight_at(w, row, i);
}

void matvec(const WeightView& w, const float* x, float* y, ThreadPool* /*pool*/) {
    reference::matmul(w, x, 1, y, nullptr);
}

void matvec_batch(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* /*pool*/) {
    for (int64_t t = 0; t < n; ++t) reference::matvec(w, x + t * w.cols, y + t * w.rows, nullptr);
}

void matmul(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* /*pool*/) {
    check_view(w);
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) {
        reference::dequantize_row(w, r, row.data());
        for (int64_t t = 0; t < n; ++t) {
            const float* xt = x + t * w.cols;
            double acc = 0.0;
            for (int64_t i = 0; i < w.cols; ++i) acc += static_cast<double>(row[i]) * xt[i];
            y[t * w.rows + r] = static_cast<float>(acc);
        }
    }
}

}  // namespace sluice::kernels::reference
