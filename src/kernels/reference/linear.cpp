// Reference (oracle) linear ops: dequantize_row, matvec, matmul over every registered format (ggml's
// block formats included), and the int8-activation products' definition (kernels.h,
// Activations::kInt8) for MLX affine weights and ggml's block formats (ggml_vec_dot_int8).
// Element by element from the format's own definition, its registry entry's reference_element
// (kernels/weight_format.cpp; MLX affine per models.md §5.1–5.3). Sums are
// accumulated in double so the oracle's own rounding error is far below the test tolerance.
// Single-threaded (the pool argument is ignored); no allocation except matmul's one row buffer.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/assert.h"
#include "kernels/ggml_quants.h"
#include "kernels/ggml_tiles.h"
#include "kernels/kernels.h"
#include "kernels/weight_format.h"

namespace sluice::kernels::reference {
namespace {

void check_view(const WeightView& w) {
    SLUICE_ASSERT(w.data != nullptr && w.rows >= 0);
    const WeightFormat& f = weight_format(w.type);
    SLUICE_ASSERT(f.shape_error(w.cols, w.group_size) == nullptr);
    if (f.quantized()) SLUICE_ASSERT(w.scales != nullptr && w.biases != nullptr);
}

float load_scale(const void* base, ScaleType type, int64_t index) {
    uint16_t h;
    switch (type) {
        case ScaleType::kF32: {
            float v;
            std::memcpy(&v, static_cast<const char*>(base) + index * 4, 4);
            return v;
        }
        case ScaleType::kF16:
            std::memcpy(&h, static_cast<const char*>(base) + index * 2, 2);
            return f16_to_f32(h);
        case ScaleType::kBF16:
            std::memcpy(&h, static_cast<const char*>(base) + index * 2, 2);
            return bf16_to_f32(h);
    }
    return 0.0f;
}

// x quantised for the int8-activation products (kernels.h, Activations::kInt8): per block of 32,
// d = max|x| / 127 and q = round-to-nearest-even(x · (127 / max|x|)), both in f32.
void quantize_int8(const float* x, int64_t cols, int8_t* q, float* d) {
    for (int64_t b = 0; b < cols / 32; ++b) {
        float amax = 0.0f;
        for (int64_t i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[b * 32 + i]));
        d[b] = amax / 127.0f;
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int64_t i = 0; i < 32; ++i)
            q[b * 32 + i] = static_cast<int8_t>(std::nearbyint(x[b * 32 + i] * id));
    }
}

// The int8-activation product (kernels.h, Activations::kInt8) by its definition: x quantised per
// block of 32, codes read from the MLX affine words, sums in integers, the rest in double.
void matvec_int8(const WeightView& w, const float* x, float* y) {
    const int64_t cols = w.cols, groups = cols / w.group_size;
    const int bits = w.bits(), per_word = 32 / bits;
    std::vector<int8_t> q(static_cast<size_t>(cols));
    std::vector<float> d(static_cast<size_t>(cols / 32));
    quantize_int8(x, cols, q.data(), d.data());
    const int64_t words_per_row = cols / per_word;
    for (int64_t r = 0; r < w.rows; ++r) {
        double acc = 0.0;
        for (int64_t g = 0; g < groups; ++g) {
            double dot = 0.0, sum = 0.0;
            for (int64_t b = g * w.group_size / 32; b < (g + 1) * w.group_size / 32; ++b) {
                int64_t idot = 0, isum = 0;
                for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
                    uint32_t word;
                    std::memcpy(&word,
                                static_cast<const char*>(w.data) + (r * words_per_row + i / per_word) * 4, 4);
                    const int64_t code = (word >> (bits * (i % per_word))) & ((1u << bits) - 1u);
                    idot += code * q[static_cast<size_t>(i)];
                    isum += q[static_cast<size_t>(i)];
                }
                dot += static_cast<double>(d[b]) * static_cast<double>(idot);
                sum += static_cast<double>(d[b]) * static_cast<double>(isum);
            }
            acc += load_scale(w.scales, w.scale_type, r * groups + g) * dot +
                   load_scale(w.biases, w.scale_type, r * groups + g) * sum;
        }
        y[r] = static_cast<float>(acc);
    }
}

// Row r of a ggml block view in the natural layout: in place, or (row tiles) put back into `buf`.
const uint8_t* ggml_row(const WeightView& w, int64_t r, std::vector<uint8_t>& buf) {
    if (!weight_format(w.type).row_tiles())
        return static_cast<const uint8_t*>(w.data) + static_cast<size_t>(r) * w.row_bytes();
    buf.resize(w.row_bytes());
    ggml_untile_row(w, r, buf.data());
    return buf.data();
}

// A ggml block format's int8-activation product, each row by ggml_vec_dot_int8 (the definition).
void matvec_int8_ggml(const WeightView& w, const float* x, float* y) {
    std::vector<int8_t> q(static_cast<size_t>(w.cols));
    std::vector<float> d(static_cast<size_t>(w.cols / 32));
    std::vector<uint8_t> buf;
    quantize_int8(x, w.cols, q.data(), d.data());
    const GgmlType type = weight_format(w.type).ggml;
    for (int64_t r = 0; r < w.rows; ++r)
        y[r] = ggml_vec_dot_int8(type, ggml_row(w, r, buf), q.data(), d.data(), w.cols);
}

}  // namespace

// The int8-activation product of one ggml row (kernels.h, Activations::kInt8): the row's blocks in integer
// form (ggml_block_codes: element = scale_s·code + bias_s), and per sub-block s (32 elements; Q6_K's 16)
// inside x's block b, scale_s·d_b·Σ code·q + bias_s·d_b·Σ q — the integer sums exact, the products and
// the row's sum in double, sub-block after sub-block.
float ggml_vec_dot_int8(GgmlType type, const void* row, const int8_t* q, const float* d, int64_t cols) {
    const GgmlFormat& f = ggml_format(type);
    const int sub = ggml_int8_sub_elems(type);
    SLUICE_ASSERT(sub > 0 && cols % f.block_elems == 0);
    const auto* b = static_cast<const uint8_t*>(row);
    int8_t codes[256];
    float scales[16], biases[16];
    double acc = 0.0;
    for (int64_t i = 0; i < cols / f.block_elems; ++i) {
        ggml_block_codes(type, b + i * f.block_bytes, codes, scales, biases);
        for (int s = 0; s < f.block_elems / sub; ++s) {
            const int64_t e0 = i * f.block_elems + s * sub;
            int64_t idot = 0, isum = 0;
            for (int e = 0; e < sub; ++e) {
                idot += int64_t{codes[s * sub + e]} * q[e0 + e];
                isum += q[e0 + e];
            }
            const double dx = d[e0 / 32];
            acc += static_cast<double>(scales[s]) * dx * static_cast<double>(idot) +
                   static_cast<double>(biases[s]) * dx * static_cast<double>(isum);
        }
    }
    return static_cast<float>(acc);
}

void dequantize_row(const WeightView& w, int64_t row, float* out) {
    check_view(w);
    SLUICE_ASSERT(row >= 0 && row < w.rows);
    const WeightFormat& f = weight_format(w.type);
    if (f.ggml_blocks()) {  // the same definition as reference_element, a row at a time
        std::vector<uint8_t> buf;
        ggml_dequantize_row(f.ggml, ggml_row(w, row, buf), w.cols, out);
        return;
    }
    const auto element = f.reference_element;
    for (int64_t i = 0; i < w.cols; ++i) out[i] = element(w, row, i);
}

void matvec(const WeightView& w, const float* x, float* y, ThreadPool* /*pool*/) {
    reference::matmul(w, x, 1, y, nullptr);
}

void matvec_batch(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* /*pool*/) {
    for (int64_t t = 0; t < n; ++t) reference::matvec(w, x + t * w.cols, y + t * w.rows, nullptr);
}

void matvec_jobs(const MatvecJob* jobs, int64_t count, ThreadPool* /*pool*/) {
    for (int64_t j = 0; j < count; ++j)
        reference::matvec_batch(*jobs[j].w, jobs[j].x, jobs[j].n, jobs[j].y, nullptr);
}

void matmul(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* /*pool*/) {
    check_view(w);
    if (w.int8_activations()) {
        for (int64_t t = 0; t < n; ++t) {
            if (w.ggml_blocks()) {
                matvec_int8_ggml(w, x + t * w.cols, y + t * w.rows);
            } else {
                matvec_int8(w, x + t * w.cols, y + t * w.rows);
            }
        }
        return;
    }
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
