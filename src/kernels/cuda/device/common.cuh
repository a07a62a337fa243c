// Device-side helpers shared by the CUDA kernels: 16-bit float decoding, one element of any
// weight type (the oracle-shaped slow path), warp reductions, launch checks.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "kernels/cuda/ops.h"

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

// Asynchronous global → shared copies (sm_80+): with valid false the destination is zero-filled and
// nothing is read (gmem must still be a valid address).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0)
                 : "memory");
}

__device__ __forceinline__ void cp_async4(void* smem, const void* gmem, bool valid) {
    const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 4 : 0)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
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

constexpr int kMaxExpertsPerLane = 32;  // router top-k: E ≤ 1024

// kernels::router_topk for one token's logits lt[n_experts ≤ 32·kPerLane], by one warp (lane r
// writes ids[r] and weights[r]). `uncached` reads the logits past L1 (__ldcg): the caller is the
// last block of the launch that wrote them (matvec_multi's fused top-k), and other blocks' writes
// are only ordered by their __threadfence().
template <int kPerLane>
__device__ __forceinline__ void router_topk_warp_n(const float* lt, int64_t n_experts, int64_t k, bool renorm,
                                                   int32_t* ids, float* weights, bool uncached) {
    const int lane = threadIdx.x % 32;
    float p[kPerLane];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int64_t e = i * 32 + lane;
        p[i] = e < n_experts ? (uncached ? __ldcg(lt + e) : lt[e]) : -INFINITY;
        mx = fmaxf(mx, p[i]);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int64_t e = i * 32 + lane;
        p[i] = e < n_experts ? expf(p[i] - mx) : -1.0f;
        if (e < n_experts) sum += p[i];
    }
    sum = warp_sum(sum);
    float selected = 0.0f;
    // Lane r keeps the r-th pick, so the k results are stored at once at the end: storing each pick
    // and dividing them back in place (renormalisation) chained 2k round trips to memory on the
    // decode's critical path (ncu, session 5: the router's last block took 13 of its 18 µs).
    int32_t my_id = 0;
    float my_weight = 0.0f;
    for (int64_t r = 0; r < k; ++r) {
        float best = -1.0f;
        int best_e = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int e = i * 32 + lane;
            if (p[i] > best) {  // strictly greater: the lower index of a tie within the lane wins
                best = p[i];
                best_e = e;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
            if (ob > best || (ob == best && oe < best_e)) {
                best = ob;
                best_e = oe;
            }
        }
        if (r < 32 && lane == r) {
            my_id = best_e;
            my_weight = best / sum;
        } else if (r >= 32 && lane == 0) {
            ids[r] = best_e;
            weights[r] = best / sum;
        }
        selected += best / sum;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i)
            if (i * 32 + lane == best_e) p[i] = -1.0f;
    }
    if (lane < k) {
        ids[lane] = my_id;
        weights[lane] = renorm ? my_weight / selected : my_weight;
    }
    if (renorm && lane == 0)
        for (int64_t r = 32; r < k; ++r) weights[r] /= selected;
}

// router_topk_warp_n with the fewest logits per lane that hold n_experts (E ≤ 1024): each of the k
// rounds scans every lane's share, and the fused top-k runs on the decode's critical path.
__device__ __forceinline__ void router_topk_warp(const float* lt, int64_t n_experts, int64_t k, bool renorm,
                                                 int32_t* ids, float* weights, bool uncached) {
    if (n_experts <= 64) {
        router_topk_warp_n<2>(lt, n_experts, k, renorm, ids, weights, uncached);
    } else if (n_experts <= 128) {
        router_topk_warp_n<4>(lt, n_experts, k, renorm, ids, weights, uncached);
    } else if (n_experts <= 256) {
        router_topk_warp_n<8>(lt, n_experts, k, renorm, ids, weights, uncached);
    } else if (n_experts <= 512) {
        router_topk_warp_n<16>(lt, n_experts, k, renorm, ids, weights, uncached);
    } else {
        router_topk_warp_n<kMaxExpertsPerLane>(lt, n_experts, k, renorm, ids, weights, uncached);
    }
}

// Programmatic dependent launch (sm_90+; no-ops below). A kernel launched with
// launch_dependent() may start while the kernel before it on the stream still runs: it calls
// grid_dependency_wait() before it reads anything an earlier kernel wrote or writes anything one
// reads, and may only load constant data (weights) before that. allow_dependents() lets the next
// such kernel start as soon as every block of this one has called it.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches kernel<<<grid, block, smem, s>>>(args...), with programmatic stream serialization when
// `dependent` (LaunchContext::dependent_launch; the kernel must follow grid_dependency_wait()'s rule).
template <typename... Params, typename... Args>
void launch_dependent(bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t s, Args&&... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = dependent ? 1 : 0;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

inline unsigned grid_for(int64_t n, int threads) {
    return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace sluice::cuda
