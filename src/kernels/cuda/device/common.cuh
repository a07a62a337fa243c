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

// ---- ggml's block formats (kernels/ggml_quants.h has the layouts) -------------------------------
// Bytes of one block, and its elements (32, or 256 for the k-quants and IQ4_XS).
__host__ __device__ __forceinline__ int ggml_block_bytes(WeightType t) {
    switch (t) {
        case WeightType::kGgmlQ4_0: return 18;
        case WeightType::kGgmlQ4_1: return 20;
        case WeightType::kGgmlQ5_0: return 22;
        case WeightType::kGgmlQ5_1: return 24;
        case WeightType::kGgmlQ8_0: return 34;
        case WeightType::kGgmlQ4_K: return 144;
        case WeightType::kGgmlQ5_K: return 176;
        case WeightType::kGgmlQ6_K: return 210;
        case WeightType::kGgmlIQ4_NL: return 18;
        case WeightType::kGgmlIQ4_XS: return 136;
        case WeightType::kGgmlMXFP4: return 17;
        default: return 0;
    }
}

__host__ __device__ __forceinline__ int ggml_block_elems(WeightType t) {
    switch (t) {
        case WeightType::kGgmlQ4_K:
        case WeightType::kGgmlQ5_K:
        case WeightType::kGgmlQ6_K:
        case WeightType::kGgmlIQ4_XS: return 256;
        default: return 32;
    }
}

__host__ __device__ __forceinline__ bool is_ggml(WeightType t) {
    return ggml_block_bytes(t) > 0;
}

__device__ __forceinline__ float ggml_f16(const uint8_t* p) {
    return f16_bits_to_f32(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8));
}

__device__ __forceinline__ void ggml_k4_scale_min(const uint8_t* q, int s, int* sc, int* m) {
    if (s < 4) {
        *sc = q[s] & 63;
        *m = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 0x0F) | ((q[s - 4] >> 6) << 4);
        *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}

__constant__ const int8_t kGgmlIq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
__constant__ const int8_t kGgmlMxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// MXFP4's block scale as ggml applies it to its doubled codes (kGgmlMxfp4): 2^(e − 128),
// e8m0_to_f32_half (subnormal for e < 2).
__device__ __forceinline__ float ggml_e8m0_half(uint8_t e) {
    return e >= 2 ? __uint_as_float(static_cast<uint32_t>(e - 1) << 23) : __uint_as_float(0x00200000u << e);
}

// Element j (< 32) of the 32-element sub-block `sb` of a ggml row: the sub-block is a whole block of the
// 32-element types; of a 256-element block, elements 32·(sb mod 8) … of block sb / 8. Formed exactly as
// the reference definition forms it (kernels/reference/ggml_quants.cpp: each product and sum rounded on
// its own, no fused multiply-add), so dequantized rows are the CPU's bit for bit.
__device__ __forceinline__ float ggml_value(WeightType t, const uint8_t* row, int64_t sb, int j) {
    const int bb = ggml_block_bytes(t);
    if (ggml_block_elems(t) == 32) {
        const uint8_t* b = row + sb * bb;
        switch (t) {
            case WeightType::kGgmlQ4_0: {
                const int q = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
                return __fmul_rn(static_cast<float>(q - 8), ggml_f16(b));
            }
            case WeightType::kGgmlQ4_1: {
                const int q = j < 16 ? (b[4 + j] & 0x0F) : (b[4 + j - 16] >> 4);
                return __fadd_rn(__fmul_rn(static_cast<float>(q), ggml_f16(b)), ggml_f16(b + 2));
            }
            case WeightType::kGgmlQ5_0:
            case WeightType::kGgmlQ5_1: {
                const bool one = t == WeightType::kGgmlQ5_1;
                const uint8_t* qhp = b + (one ? 4 : 2);
                const uint32_t qh = static_cast<uint32_t>(qhp[0]) | (static_cast<uint32_t>(qhp[1]) << 8) |
                                    (static_cast<uint32_t>(qhp[2]) << 16) |
                                    (static_cast<uint32_t>(qhp[3]) << 24);
                const uint8_t* qs = b + (one ? 8 : 6);
                const int q =
                    (j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4)) | static_cast<int>(((qh >> j) & 1u) << 4);
                if (one) return __fadd_rn(__fmul_rn(static_cast<float>(q), ggml_f16(b)), ggml_f16(b + 2));
                return __fmul_rn(static_cast<float>(q - 16), ggml_f16(b));
            }
            case WeightType::kGgmlQ8_0:
                return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + j])), ggml_f16(b));
            case WeightType::kGgmlIQ4_NL: {
                const int q = j < 16 ? (b[2 + j] & 0x0F) : (b[2 + j - 16] >> 4);
                return __fmul_rn(ggml_f16(b), static_cast<float>(kGgmlIq4nl[q]));
            }
            case WeightType::kGgmlMXFP4: {
                const int q = j < 16 ? (b[1 + j] & 0x0F) : (b[1 + j - 16] >> 4);
                return __fmul_rn(static_cast<float>(kGgmlMxfp4[q]), ggml_e8m0_half(b[0]));
            }
            default: return 0.0f;
        }
    }
    const uint8_t* b = row + (sb / 8) * bb;
    const int s = static_cast<int>(sb % 8);
    switch (t) {
        case WeightType::kGgmlQ4_K:
        case WeightType::kGgmlQ5_K: {
            int sc, m;
            ggml_k4_scale_min(b + 4, s, &sc, &m);
            const float d1 = __fmul_rn(ggml_f16(b), static_cast<float>(sc));
            const float m1 = __fmul_rn(ggml_f16(b + 2), static_cast<float>(m));
            const int c = s / 2;
            const uint8_t* qs = b + (t == WeightType::kGgmlQ5_K ? 48 : 16);
            int q = (s % 2 == 0) ? (qs[32 * c + j] & 0x0F) : (qs[32 * c + j] >> 4);
            if (t == WeightType::kGgmlQ5_K) q |= ((b[16 + j] >> s) & 1) << 4;
            return __fsub_rn(__fmul_rn(d1, static_cast<float>(q)), m1);
        }
        case WeightType::kGgmlQ6_K: {
            const int h = s / 4, k = s % 4;
            const uint8_t lo = b[64 * h + j + (k % 2 == 1 ? 32 : 0)];
            const uint8_t top = b[128 + 32 * h + j];
            const int q = ((k < 2 ? lo & 0x0F : lo >> 4) | (((top >> (2 * k)) & 3) << 4)) - 32;
            const int e = 128 * h + 32 * k + j;
            const float d = ggml_f16(b + 208);
            return __fmul_rn(__fmul_rn(d, static_cast<float>(static_cast<int8_t>(b[192 + e / 16]))),
                             static_cast<float>(q));
        }
        case WeightType::kGgmlIQ4_XS: {
            const uint32_t scales_h = static_cast<uint32_t>(b[2]) | (static_cast<uint32_t>(b[3]) << 8);
            const int ls =
                ((b[4 + s / 2] >> (4 * (s % 2))) & 0x0F) | static_cast<int>(((scales_h >> (2 * s)) & 3) << 4);
            const float dl = __fmul_rn(ggml_f16(b), static_cast<float>(ls - 32));
            const uint8_t* qs = b + 8 + 16 * s;
            const int q = j < 16 ? (qs[j] & 0x0F) : (qs[j - 16] >> 4);
            return __fmul_rn(dl, static_cast<float>(kGgmlIq4nl[q]));
        }
        default: return 0.0f;
    }
}

// Bytes of a ggml row of w.
__device__ __forceinline__ int64_t ggml_row_bytes(const DevWeight& w) {
    return w.cols / ggml_block_elems(w.type) * ggml_block_bytes(w.type);
}

// W[r, i] for any weight type (models.md §5: w = s·q + b for the affine formats).
__device__ __forceinline__ float weight_at(const DevWeight& w, int64_t r, int64_t i) {
    if (is_ggml(w.type))
        return ggml_value(w.type, static_cast<const uint8_t*>(w.data) + r * ggml_row_bytes(w), i / 32,
                          static_cast<int>(i % 32));
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
                                                   float scale, int32_t* ids, float* weights, bool uncached) {
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
        weights[lane] = (renorm ? my_weight / selected : my_weight) * scale;
    }
    if (lane == 0)
        for (int64_t r = 32; r < k; ++r) weights[r] = (renorm ? weights[r] / selected : weights[r]) * scale;
}

// kernels::router_topk's sigmoid scoring (RouterSpec) for one token, by one warp: s = σ(logit) and
// c = s + bias per expert (lane r holds experts i·32 + r); with groups > 1 each group's score is the
// sum of its two largest c (merged across lanes as top-two pairs), the topk_groups best groups kept
// and the others' c set to −∞; then k rounds of arg-max over c carrying s. Lane r writes pick r.
template <int kPerLane>
__device__ __forceinline__ void router_sigmoid_warp_n(const float* lt, kernels::RouterSpec r, int32_t* ids,
                                                      float* weights, bool uncached) {
    const int lane = threadIdx.x % 32;
    const int64_t n_experts = r.n_experts, k = r.k;
    float s[kPerLane], c[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int64_t e = i * 32 + lane;
        if (e < n_experts) {
            const float x = uncached ? __ldcg(lt + e) : lt[e];
            s[i] = 1.0f / (1.0f + expf(-x));
            c[i] = s[i] + (r.bias != nullptr ? r.bias[e] : 0.0f);
        } else {
            s[i] = 0.0f;
            c[i] = -INFINITY;
        }
    }
    if (r.groups > 1) {
        const int64_t per = n_experts / r.groups;
        float group_score = -INFINITY;  // lane g: group g's
        for (int64_t g = 0; g < r.groups; ++g) {
            float a = -INFINITY, b = -INFINITY;  // this lane's two largest c of group g
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) {
                const int64_t e = i * 32 + lane;
                if (e < n_experts && e / per == g) {
                    if (c[i] > a) {
                        b = a;
                        a = c[i];
                    } else if (c[i] > b) {
                        b = c[i];
                    }
                }
            }
            for (int o = 16; o > 0; o >>= 1) {
                const float oa = __shfl_xor_sync(0xffffffffu, a, o), ob = __shfl_xor_sync(0xffffffffu, b, o);
                b = fmaxf(fminf(a, oa), fmaxf(b, ob));
                a = fmaxf(a, oa);
            }
            if (lane == g) group_score = a + b;
        }
        unsigned kept = 0;
        for (int64_t j = 0; j < r.topk_groups; ++j) {
            float best = group_score;
            int best_g = lane;
            for (int o = 16; o > 0; o >>= 1) {
                const float ob = __shfl_xor_sync(0xffffffffu, best, o);
                const int og = __shfl_xor_sync(0xffffffffu, best_g, o);
                if (ob > best || (ob == best && og < best_g)) {
                    best = ob;
                    best_g = og;
                }
            }
            kept |= 1u << best_g;
            if (lane == best_g) group_score = -INFINITY;
        }
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int64_t e = i * 32 + lane;
            if (e < n_experts && !((kept >> (e / per)) & 1u)) c[i] = -INFINITY;
        }
    }
    float selected = 0.0f;
    int32_t my_id = 0;
    float my_weight = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
        float best = -INFINITY, best_s = 0.0f;
        int best_e = 0x7fffffff;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
            const int e = i * 32 + lane;
            if (c[i] > best) {  // strictly greater: the lower index of a tie within the lane wins
                best = c[i];
                best_s = s[i];
                best_e = e;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const float os = __shfl_xor_sync(0xffffffffu, best_s, o);
            const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
            if (ob > best || (ob == best && oe < best_e)) {
                best = ob;
                best_s = os;
                best_e = oe;
            }
        }
        if (j < 32 && lane == j) {
            my_id = best_e;
            my_weight = best_s;
        } else if (j >= 32 && lane == 0) {
            ids[j] = best_e;
            weights[j] = best_s;
        }
        selected += best_s;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i)
            if (i * 32 + lane == best_e) c[i] = -INFINITY;
    }
    const float norm = r.renormalize ? r.scale / (selected + 1e-20f) : r.scale;
    if (lane < k) {
        ids[lane] = my_id;
        weights[lane] = my_weight * norm;
    }
    if (lane == 0)
        for (int64_t j = 32; j < k; ++j) weights[j] *= norm;
}

// router_topk_warp_n (softmax) or router_sigmoid_warp_n with the fewest logits per lane that hold
// n_experts (E ≤ 1024): each of the k rounds scans every lane's share, and the fused top-k runs on
// the decode's critical path.
__device__ __forceinline__ void router_topk_warp(const float* lt, kernels::RouterSpec r, int32_t* ids,
                                                 float* weights, bool uncached) {
    const int64_t n_experts = r.n_experts, k = r.k;
    const bool renorm = r.renormalize;
    if (r.scoring == kernels::RouterSpec::Scoring::kSigmoid) {
        if (n_experts <= 64) {
            router_sigmoid_warp_n<2>(lt, r, ids, weights, uncached);
        } else if (n_experts <= 128) {
            router_sigmoid_warp_n<4>(lt, r, ids, weights, uncached);
        } else if (n_experts <= 256) {
            router_sigmoid_warp_n<8>(lt, r, ids, weights, uncached);
        } else if (n_experts <= 512) {
            router_sigmoid_warp_n<16>(lt, r, ids, weights, uncached);
        } else {
            router_sigmoid_warp_n<kMaxExpertsPerLane>(lt, r, ids, weights, uncached);
        }
        return;
    }
    if (n_experts <= 64) {
        router_topk_warp_n<2>(lt, n_experts, k, renorm, r.scale, ids, weights, uncached);
    } else if (n_experts <= 128) {
        router_topk_warp_n<4>(lt, n_experts, k, renorm, r.scale, ids, weights, uncached);
    } else if (n_experts <= 256) {
        router_topk_warp_n<8>(lt, n_experts, k, renorm, r.scale, ids, weights, uncached);
    } else if (n_experts <= 512) {
        router_topk_warp_n<16>(lt, n_experts, k, renorm, r.scale, ids, weights, uncached);
    } else {
        router_topk_warp_n<kMaxExpertsPerLane>(lt, n_experts, k, renorm, r.scale, ids, weights, uncached);
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
    // Past 48 KB of dynamic shared memory a kernel must opt in (a host-side attribute, kept across
    // launches; setting it again costs a driver call, which graph replays do not make).
    if (smem > 48 * 1024)
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

inline unsigned grid_for(int64_t n, int threads) {
    return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace sluice::cuda
