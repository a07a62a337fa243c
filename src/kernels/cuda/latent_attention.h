// Multi-head latent attention's GPU ops (latent_attention.cu): the CUDA backend's form of
// model/latent_attention.cpp, op for op. Shapes as model::LatentAttentionPlan names them.
#pragma once

#include <cstdint>

#include "kernels/cuda/ops.h"

namespace sluice::cuda {

struct MlaShape {
    int64_t heads = 0;
    int64_t nope = 0, rope = 0, v_dim = 0;
    int64_t latent = 0;     // kv_lora_rank
    int64_t q_dim = 0;      // nope + rope: one head's q row
    int64_t cache_dim = 0;  // latent + rope: one cache row, one absorbed query head
};

constexpr int kMaxLatentPerLane = 16;  // the attention keeps latent / 32 outputs per lane: latent ≤ 512

// Null when the kernels take these shapes, else what they do not take.
const char* latent_attention_shape_error(const MlaShape& s);

// qabs[t, h, :latent] = Σ_j q[t, h, j] · kv_b[h·(nope + v) + j, :] over j < nope (q [n, heads, q_dim];
// qabs [n, heads, cache_dim], its rope part untouched); with embed_q, w is mlx-lm's embed_q [heads·latent,
// nope] (the same matrices transposed per head) and the term is w[h·latent + c, j].
void latent_absorb(const float* q, const MlaShape& s, const DevWeight& w, bool embed_q, int64_t n,
                   float* qabs, cudaStream_t st);
// out[t, h·v_dim + r] = kv_b[h·(nope + v) + nope + r, :] · olat[t, h, :] (olat [n, heads, latent]); with
// unembed_out, w is mlx-lm's unembed_out [heads·v, latent] and the row h·v + r.
void latent_unabsorb(const float* olat, const MlaShape& s, const DevWeight& w, bool unembed_out, int64_t n,
                     float* out, cudaStream_t st);
// For each of `rows` rows (at x + r·stride): dim values from pairs (2i, 2i+1) to halves (i, dim/2 + i).
void deinterleave_pairs(float* x, int64_t rows, int64_t stride, int64_t dim, cudaStream_t st);
// Causal attention of qabs [n_q, heads, cache_dim] (queries at positions *pos0_dev + offset + t) over the
// latent cache rows [positions, cache_dim] (f32 or f16): scores against whole rows, values their first
// `latent` entries; olat [n_q, heads, latent]. A single query with split_scratch (latent_split_scratch_floats
// of max_keys, the context's capacity) splits its keys over blocks and merges their partials.
void latent_attention(const float* qabs, const void* cache, kernels::KvType type, const MlaShape& s,
                      int64_t n_q, int64_t offset, const int32_t* pos0_dev, float scale, float* olat,
                      cudaStream_t st, float* split_scratch = nullptr, int64_t max_keys = 0);
// Keys per split for a context of max_keys, and the floats of scratch a split decode step needs.
int64_t latent_split_keys(int64_t max_keys);
int64_t latent_split_scratch_floats(const MlaShape& s, int64_t max_keys);

}  // namespace sluice::cuda
