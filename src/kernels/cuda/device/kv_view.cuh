// The KV cache as device code reads it: byte pointers and strides (KvView) and the scalar pieces
// of the stored types (kernels/kv_format.h), shared by the cache's store and attention kernels
// (kv.cu) and the tensor-core prefill attention (flash_attention.cu).
#pragma once

#include "kernels/cuda/device/common.cuh"
#include "kernels/kv_format.h"

namespace sluice::cuda {
namespace {

__constant__ float kQ3Level[8] = {kernels::kKvQ3Levels[0], kernels::kKvQ3Levels[1], kernels::kKvQ3Levels[2],
                                  kernels::kKvQ3Levels[3], kernels::kKvQ3Levels[4], kernels::kKvQ3Levels[5],
                                  kernels::kKvQ3Levels[6], kernels::kKvQ3Levels[7]};

// The device view of a KvCache: byte pointers and the strides the kernels step by.
struct KvView {
    uint8_t* k;
    uint8_t* v;
    int64_t head_bytes, row_bytes;  // one head, one position (n_kv_heads heads)
    int64_t window, slots, ring_row;
    uint8_t* ring_k;
    uint8_t* ring_v;
    int64_t* tags;
    int64_t sliding;     // KvCache::sliding: a query at P sees keys P − sliding + 1 .. P (0: all)
    const float* sinks;  // KvCache::sinks: [n_heads] sink logits, or null
};

// The first key a query at position P sees: its sliding window's (KvCache::sliding), else 0.
__device__ __forceinline__ int64_t first_key(int64_t sliding, int64_t P) {
    return sliding > 0 && P + 1 - sliding > 0 ? P + 1 - sliding : 0;
}

// A head's softmax output from its unnormalised sum o, max m and sum l (in base 2 when kBase2, the
// scores then scaled by log2 e): o / l, or with a sink logit (kernels::AttentionExtras: one more
// term of the denominator, its weight dropped) o·f / (l·f + f_sink), f = e^(m − M), f_sink =
// e^(sink − M), M = max(m, sink) — kernels::reference::attention's max over the scores and the sink.
template <bool kBase2>
__device__ __forceinline__ float softmax_out(float o, float m, float l, const float* sinks, int64_t head) {
    if (sinks == nullptr) return o / l;
    const float sink = kBase2 ? sinks[head] * 1.4426950408889634f : sinks[head];
    const float mx = fmaxf(m, sink);
    const float f = kBase2 ? exp2f(m - mx) : expf(m - mx);
    const float f_sink = kBase2 ? exp2f(sink - mx) : expf(sink - mx);
    return o * f / (l * f + f_sink);
}

inline KvView kv_view(const KvCache& c, int64_t n_kv_heads, int64_t head_dim) {
    KvView v{};
    v.k = static_cast<uint8_t*>(c.k);
    v.v = static_cast<uint8_t*>(c.v);
    v.head_bytes = kernels::kv_head_bytes(c.type, head_dim);
    v.row_bytes = n_kv_heads * v.head_bytes;
    v.window = c.ring != nullptr ? c.window : 0;
    v.slots = c.slots;
    v.ring_row = n_kv_heads * head_dim * 2;
    v.ring_k = static_cast<uint8_t*>(c.ring);
    v.ring_v = v.ring_k != nullptr ? v.ring_k + c.slots * v.ring_row : nullptr;
    v.tags = v.ring_v != nullptr ? reinterpret_cast<int64_t*>(v.ring_v + c.slots * v.ring_row) : nullptr;
    v.sliding = c.sliding;
    v.sinks = c.sinks;
    return v;
}

__device__ __forceinline__ float half_at(const uint8_t* p, int64_t i) {
    return __half2float(reinterpret_cast<const __half*>(p)[i]);
}

// q3's scale: two bytes that may sit at an odd address (head_dim 8: 5-byte heads).
__device__ __forceinline__ float q3_scale(const uint8_t* head, int64_t hd) {
    const uint8_t* p = head + hd * 3 / 8;
    return f16_bits_to_f32(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8));
}

// x ← H·x for `count` vectors of n floats at the given stride, by all threads of the block (x in
// shared memory): the reference's butterflies stage by stage (independent within a stage), so the
// same bits as kernels::reference's transform.
__device__ void hadamard_block_many(float* x, int64_t n, int count, int64_t stride) {
    for (int64_t h = 1; h < n; h *= 2) {
        __syncthreads();
        for (int64_t i = threadIdx.x; i < count * n / 2; i += blockDim.x) {
            float* v = x + (i / (n / 2)) * stride;
            const int64_t k = i % (n / 2);
            const int64_t a = (k / h) * 2 * h + k % h;
            const float u = v[a], w = v[a + h];
            v[a] = __fadd_rn(u, w);
            v[a + h] = __fsub_rn(u, w);
        }
    }
    __syncthreads();
}

}  // namespace
}  // namespace sluice::cuda
