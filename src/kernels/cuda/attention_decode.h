// Attention for steps of a few queries over the KV cache as stored (attention_decode.cu): the path
// attention_kv takes for steps of at most 16 queries when it is given split scratch and the head
// width has an instance (32, 64, 128 or 256). Internal to the kernels; callers use attention_kv.
#pragma once

#include <cstdint>

#include "kernels/cuda/ops.h"

namespace sluice::cuda {

// The key splits per query for n_q queries in attention_split_scratch_floats(n_heads, head_dim,
// max_keys) floats of scratch; 0 when this path does not take the step.
int decode_attention_splits(int64_t n_q, int64_t head_dim, int64_t max_keys);
// attention_kv's result for such a step (false, nothing launched, when it is not one).
bool decode_attention_kv(const float* q, const KvCache& cache, int64_t n_q, int64_t offset,
                         const int32_t* pos0_dev, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                         float scale, const float* gate, float* out, float* split_scratch, int64_t max_keys,
                         cudaStream_t s);

}  // namespace sluice::cuda
