// Small helpers for the forward's scratch buffers (model/model.h Workspace).
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "kernels/kernels.h"

namespace sluice::model {

// Returns a pointer to at least `n` elements of `buf`, growing it only when it is too small, so
// steady-state decode never allocates.
template <typename T>
T* grow(std::vector<T>& buf, int64_t n) {
    if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
    return buf.data();
}

inline float sigmoid(float x) {
    return 1.0f / (1.0f + std::exp(-x));
}

// y[rows, n] += bias[n] per row (null: nothing).
inline void add_bias(float* y, int64_t rows, int64_t n, const float* bias) {
    if (bias == nullptr) return;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < n; ++i) y[r * n + i] += bias[i];
}

// PyTorch's softplus (beta 1, threshold 20): linear above the threshold.
inline float softplus(float x) {
    return x > 20.0f ? x : std::log1p(std::exp(x));
}

// Y[n, rows] = X[n, cols] · Wᵀ, taking the matvec path for a single token.
inline void linear(const kernels::WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
    if (n == 1) {
        kernels::matvec(w, x, y, pool);
    } else {
        kernels::matmul(w, x, n, y, pool);
    }
}

// Y[rows, out] = X[rows, in] · Wᵀ over a batch laid out as BatchLayout says: the first `singles` rows
// (each a step of one token) through matvec_batch — bit for bit matvec, vector by vector — and the
// rest through one matmul, whose every row is computed alone whatever rows it is with (the CPU
// GEMM gives each row × output its own accumulator over the columns in one order). So each row gets
// the result a forward of its own step gives it: matvec for a single token, matmul for a longer step.
inline void linear_rows(const kernels::WeightView& w, const float* x, int64_t rows, int64_t singles, float* y,
                        ThreadPool* pool) {
    if (singles > 0) kernels::matvec_batch(w, x, singles, y, pool);
    if (rows > singles) kernels::matmul(w, x + singles * w.cols, rows - singles, y + singles * w.rows, pool);
}

// Several linears of the same input rows (q, k and v; the DeltaNet input projections), each as
// linear_rows computes it: their single-token rows in one dispatch (kernels::matvec_jobs: each
// product's matvec_batch bits, x prepared once for all of them), the rest through each one's matmul.
inline void linear_rows_shared(std::initializer_list<std::pair<const kernels::WeightView*, float*>> outs,
                               const float* x, int64_t rows, int64_t singles, ThreadPool* pool) {
    if (singles > 0) {
        kernels::MatvecJob jobs[8];
        int64_t n = 0;
        for (const auto& [w, y] : outs) jobs[n++] = kernels::MatvecJob{w, x, singles, y};
        kernels::matvec_jobs(jobs, n, pool);
    }
    if (rows > singles)
        for (const auto& [w, y] : outs)
            kernels::matmul(*w, x + singles * w->cols, rows - singles, y + singles * w->rows, pool);
}

}  // namespace sluice::model
