// Reference (oracle) linear ops: dequantize_row, matvec, matmul over every registered format.
// Element by element from the format's own definition, its registry entry's reference_element
// (kernels/weight_format.cpp; MLX affine per models.md §5.1–5.3). Sums are
// accumulated in double so the oracle's own rounding error is far below the test tolerance.
// Single-threaded (the pool argument is ignored); no allocation except matmul's one row buffer.
#include <cstring>
#include <vector>

#include "core/assert.h"
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

}  // namespace

void dequantize_row(const WeightView& w, int64_t row, float* out) {
    check_view(w);
    SLUICE_ASSERT(row >= 0 && row < w.rows);
    const auto element = weight_format(w.type).reference_element;
    for (int64_t i = 0; i < w.cols; ++i) out[i] = element(w, row, i);
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
