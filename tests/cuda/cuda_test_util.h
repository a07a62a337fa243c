// What the CUDA op tests share: a device check that skips without a GPU, device copies of host
// vectors, random inputs, the relative error they are judged by, and test weights of every format on
// both sides (a host WeightView for the reference, a DevWeight for the device). Header-only, included by
// ops_test.cpp and router_test.cpp.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "gguf_bytes.h"
#include "kernels/cuda/ops.h"
#include "kernels/kernels.h"
#include "kernels/quantize.h"
#include "kernels/weight_format.h"

namespace sluice::cuda {

inline bool has_gpu() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define REQUIRE_GPU() \
    if (!has_gpu()) GTEST_SKIP() << "no CUDA device"

// Device 0's launch context with the default switches (a test sets the ones it sweeps on its copy).
inline LaunchContext launch_context() {
    return make_launch_context(0, 0, true, true);
}

// A device copy of a host vector, copied back with get().
template <typename T>
class Dev {
 public:
    explicit Dev(const std::vector<T>& host) : n_(host.size()) {
        EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(n_, 1) * sizeof(T)), cudaSuccess);
        if (n_ > 0) {
            EXPECT_EQ(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
        }
    }
    explicit Dev(size_t n) : Dev(std::vector<T>(n)) {}
    ~Dev() { cudaFree(p_); }
    Dev(const Dev&) = delete;
    Dev& operator=(const Dev&) = delete;
    T* get() { return p_; }
    std::vector<T> host() const {
        std::vector<T> out(n_);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        if (n_ > 0) {
            EXPECT_EQ(cudaMemcpy(out.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
        }
        return out;
    }

 private:
    T* p_ = nullptr;
    size_t n_;
};

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// max |a - b| / max(1, max |b|).
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double diff = 0, mag = 1;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
        mag = std::max(mag, static_cast<double>(std::fabs(b[i])));
        if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    }
    return diff / mag;
}

// Each token's K distinct experts of E in a random order, weighted 0.1, 0.3, 0.5, …
struct Routing {
    std::vector<int32_t> ids;
    std::vector<float> weights;
};
inline Routing random_routing(int64_t n, int64_t K, int64_t E, uint32_t seed) {
    Routing r{std::vector<int32_t>(static_cast<size_t>(n * K)),
              std::vector<float>(static_cast<size_t>(n * K))};
    std::mt19937 rng(seed);
    for (int64_t t = 0; t < n; ++t) {
        std::vector<int32_t> perm(static_cast<size_t>(E));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        for (int64_t j = 0; j < K; ++j) {
            r.ids[static_cast<size_t>(t * K + j)] = perm[static_cast<size_t>(j)];
            r.weights[static_cast<size_t>(t * K + j)] = 0.1f + 0.2f * static_cast<float>(j);
        }
    }
    return r;
}

// A weight of any type with host storage and a device copy.
struct TestWeight {
    kernels::WeightView view;  // host
    std::vector<uint8_t> data, scales, biases;
    std::unique_ptr<Dev<uint8_t>> d_data, d_scales, d_biases;
    DevWeight dev;
};

inline std::unique_ptr<TestWeight> make_weight(kernels::WeightType type, int64_t rows, int64_t cols,
                                               int group, uint32_t seed) {
    auto w = std::make_unique<TestWeight>();
    std::vector<float> f = randn(static_cast<size_t>(rows * cols), seed, 0.05f);
    kernels::WeightView& v = w->view;
    v.type = type;
    v.rows = rows;
    v.cols = cols;
    if (type == kernels::WeightType::kF32) {
        w->data.resize(f.size() * 4);
        std::memcpy(w->data.data(), f.data(), w->data.size());
    } else if (type == kernels::WeightType::kBF16 || type == kernels::WeightType::kF16) {
        w->data.resize(f.size() * 2);
        auto* p = reinterpret_cast<uint16_t*>(w->data.data());
        for (size_t i = 0; i < f.size(); ++i)
            p[i] =
                type == kernels::WeightType::kBF16 ? kernels::f32_to_bf16(f[i]) : kernels::f32_to_f16(f[i]);
    } else if (kernels::weight_format(type).ggml_blocks()) {  // random valid blocks (GGUF)
        std::mt19937 rng(seed);
        for (int64_t r = 0; r < rows; ++r) {
            const auto row = testing::random_ggml_row(kernels::weight_format(type).ggml, cols, rng);
            w->data.insert(w->data.end(), row.begin(), row.end());
        }
    } else {
        const int bits = type == kernels::WeightType::kQ4 ? 4 : 8;
        v.group_size = group;
        v.scale_type = kernels::ScaleType::kBF16;
        const int64_t words = cols * bits / 32, groups = cols / group;
        w->data.resize(static_cast<size_t>(rows * words * 4));
        w->scales.resize(static_cast<size_t>(rows * groups * 2));
        w->biases.resize(static_cast<size_t>(rows * groups * 2));
        for (int64_t r = 0; r < rows; ++r)
            kernels::quantize_row_affine(f.data() + r * cols, cols, bits, group,
                                         reinterpret_cast<uint32_t*>(w->data.data()) + r * words,
                                         reinterpret_cast<uint16_t*>(w->scales.data()) + r * groups,
                                         reinterpret_cast<uint16_t*>(w->biases.data()) + r * groups);
    }
    w->d_data = std::make_unique<Dev<uint8_t>>(w->data);
    v.data = w->data.data();
    DevWeight& d = w->dev;
    d.type = type;
    d.rows = rows;
    d.cols = cols;
    d.data = w->d_data->get();
    if (v.quantized()) {
        w->d_scales = std::make_unique<Dev<uint8_t>>(w->scales);
        w->d_biases = std::make_unique<Dev<uint8_t>>(w->biases);
        v.scales = w->scales.data();
        v.biases = w->biases.data();
        d.scales = w->d_scales->get();
        d.biases = w->d_biases->get();
        d.group_size = group;
        d.scale_type = kernels::ScaleType::kBF16;
    }
    return w;
}

}  // namespace sluice::cuda
