// Device-side helpers shared by the CUDA kernels: 16-bit float decoding, one element of any
// weight type (the oracle-shaped slow path), warp reductions, launch checks.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/ops.h"

namespace sluice::cuda {

using kernels::ScaleType;
using kernels::WeightType;

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t v) {
    return __uint_as_float(v << 16);
}

__device__ __forceinline__ float f16_bits_to_f32(uint32_t v) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(v)));
}

__device__ __forceinline__ float load_scale(const void* base, ScaleType type, int64_t i) {
    switch (type) {
        case ScaleType::kF32: return static_cast<const float*>(base)[i];
        case ScaleType::kF16: return f16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
        case ScaleType::kBF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(base)[i]);
    }
    return 0.0f;
}

// W[r, i] for any weight type (models.md §5: w = s·q + b for the affine formats).
__device__ __forceinline__ float weight_at(const DevWeight& w, int64_t r, int64_t i) {
    switch (w.type) {
        case WeightType::kF32: return static_cast<const float*>(w.data)[r * w.cols + i];
        case WeightType::kF16: return f16_bits_to_f32(static_cast<const uint16_t*>(w.data)[r * w.cols + i]);
        case WeightType::kBF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(w.data)[r * w.cols + i]);
        case WeightType::kQ4:
        case WeightType::kQ8: {
            const int bits = w.type == WeightType::kQ4 ? 4 : 8;
            const int per_word = 32 / bits;
            const uint32_t word = static_cast<const uint32_t*>(w.data)[(r * w.cols + i) / per_word];
            const uint32_t code = (word >> (bits * (i % per_word))) & ((1u << bits) - 1u);
            const int64_t g = r * (w.cols / w.group_size) + i / w.group_size;
            return load_scale(w.scales, w.scale_type, g) * static_cast<float>(code) +
                   load_scale(w.biases, w.scale_type, g);
        }
    }
    return 0.0f;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float partial[32];
    v = warp_sum(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();  // partial may still be read by a previous call
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    const int n_warps = blockDim.x / 32;
    float total = lane < n_warps ? partial[lane] : 0.0f;
    return warp_sum(total);
}

__device__ __forceinline__ float silu_f(float x) {
    return x / (1.0f + expf(-x));
}

__device__ __forceinline__ float sigmoid_f(float x) {
    return 1.0f / (1.0f + expf(-x));
}

inline unsigned grid_for(int64_t n, int threads) {
    return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace sluice::cuda
