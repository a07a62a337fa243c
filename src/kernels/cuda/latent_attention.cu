// Multi-head latent attention on the GPU (model/plan.h LatentAttentionPlan, model/latent_attention.cpp):
// the absorbed queries, the pair de-interleave of DeepSeek's RoPE, attention over the latent cache and
// the per-head value products — each the CPU forward's op, compared with it in tests/cuda/latent_test.cpp.
//
// kv_b (the absorption's W_UK and W_UV) is read in its stored format through weight_at, so the dense
// core keeps its one copy; its rows are reused across a block's tokens from registers and shared memory.
#include <algorithm>

#include "kernels/cuda/device/common.cuh"
#include "kernels/cuda/latent_attention.h"

namespace sluice::cuda {
namespace {

constexpr int kTokensPerBlock = 8;  // tokens sharing each kv_b row a block reads
constexpr int kAttnWarps = 4;
constexpr int kAttnHeads = 4;  // heads sharing each cache row a warp reads

// qabs[t, h, :L] = Σ_j q[t, h, j] · W_UK[h][j, :] for j < nope (W_UKᵀ q_nope), in j order: W_UK[h][j, c] is
// kv_b[h·unit + j, c], or embed_q[h·latent + c, j] (mlx-lm's per-head transpose).
__global__ void absorb_kernel(const float* q, MlaShape s, DevWeight kv_b, bool embed_q, int64_t n,
                              float* qabs) {
    extern __shared__ float q_s[];  // [kTokensPerBlock][nope]
    const int64_t h = blockIdx.x, t0 = static_cast<int64_t>(blockIdx.y) * kTokensPerBlock;
    const int64_t nt = (n - t0 < kTokensPerBlock ? n - t0 : int64_t{kTokensPerBlock});
    for (int64_t i = threadIdx.x; i < kTokensPerBlock * s.nope; i += blockDim.x) {
        const int64_t tt = i / s.nope, j = i % s.nope;
        q_s[i] = tt < nt ? q[((t0 + tt) * s.heads + h) * s.q_dim + j] : 0.0f;
    }
    __syncthreads();
    const int64_t unit = s.nope + s.v_dim;
    for (int64_t c = threadIdx.x; c < s.latent; c += blockDim.x) {
        float acc[kTokensPerBlock] = {};
        for (int64_t j = 0; j < s.nope; ++j) {
            const float w = embed_q ? weight_at(kv_b, h * s.latent + c, j) : weight_at(kv_b, h * unit + j, c);
#pragma unroll
            for (int tt = 0; tt < kTokensPerBlock; ++tt) acc[tt] = fmaf(q_s[tt * s.nope + j], w, acc[tt]);
        }
        for (int64_t tt = 0; tt < nt; ++tt) qabs[((t0 + tt) * s.heads + h) * s.cache_dim + c] = acc[tt];
    }
}

// out[t, h·v + r] = w[h·head_rows + row0 + r, :] · olat[t, h, :] (W_UV o_lat), one warp per row.
__global__ void unabsorb_kernel(const float* olat, MlaShape s, DevWeight kv_b, int64_t head_rows,
                                int64_t row0, int64_t n, float* out) {
    extern __shared__ float o_s[];  // [kTokensPerBlock][latent]
    const int64_t h = blockIdx.x, t0 = static_cast<int64_t>(blockIdx.y) * kTokensPerBlock;
    const int64_t nt = (n - t0 < kTokensPerBlock ? n - t0 : int64_t{kTokensPerBlock});
    for (int64_t i = threadIdx.x; i < kTokensPerBlock * s.latent; i += blockDim.x) {
        const int64_t tt = i / s.latent, c = i % s.latent;
        o_s[i] = tt < nt ? olat[((t0 + tt) * s.heads + h) * s.latent + c] : 0.0f;
    }
    __syncthreads();
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
    const int warps = static_cast<int>(blockDim.x / 32);
    for (int64_t r = warp; r < s.v_dim; r += warps) {
        float acc[kTokensPerBlock] = {};
        for (int64_t c = lane; c < s.latent; c += 32) {
            const float w = weight_at(kv_b, h * head_rows + row0 + r, c);
#pragma unroll
            for (int tt = 0; tt < kTokensPerBlock; ++tt) acc[tt] = fmaf(w, o_s[tt * s.latent + c], acc[tt]);
        }
#pragma unroll
        for (int tt = 0; tt < kTokensPerBlock; ++tt) acc[tt] = warp_sum(acc[tt]);
        if (lane == 0)
            for (int64_t tt = 0; tt < nt; ++tt) out[((t0 + tt) * s.heads + h) * s.v_dim + r] = acc[tt];
    }
}

// Row r (at x + r·stride) of dim values: pairs (2i, 2i+1) → halves (i, dim/2 + i), in place.
__global__ void deinterleave_kernel(float* x, int64_t stride, int64_t dim) {
    extern __shared__ float row[];
    float* xr = x + static_cast<int64_t>(blockIdx.x) * stride;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) row[i] = xr[i];
    __syncthreads();
    for (int64_t i = threadIdx.x; i < dim / 2; i += blockDim.x) {
        xr[i] = row[2 * i];
        xr[dim / 2 + i] = row[2 * i + 1];
    }
}

__device__ __forceinline__ float cache_at(const void* cache, bool f16, int64_t i) {
    return f16 ? __half2float(static_cast<const __half*>(cache)[i]) : static_cast<const float*>(cache)[i];
}

// One query row and up to kAttnHeads heads per block; each warp takes every kAttnWarps-th key, scores it
// against its heads (the cache row read once for all of them), and keeps an online softmax and its
// weighted sum of the key's first `latent` values (LPL per lane); the warps are merged at the end.
// Split (part != null, decode): block z takes keys [z·chunk, (z + 1)·chunk) and writes its unnormalised
// partial — max, sum of exponentials, weighted sum — to part [n_q, heads, splits, latent + 2] for
// combine_kernel; otherwise it takes every key and writes the output.
template <int LPL>
__global__ void attention_kernel(const float* qabs, const void* cache, bool f16, MlaShape s, int64_t offset,
                                 const int32_t* pos0_dev, float scale, float* olat, int64_t chunk,
                                 float* part) {
    extern __shared__ float sh[];
    float* q_s = sh;                               // [kAttnHeads][cache_dim]
    float* m_s = q_s + kAttnHeads * s.cache_dim;   // [kAttnWarps][kAttnHeads]
    float* l_s = m_s + kAttnWarps * kAttnHeads;    // [kAttnWarps][kAttnHeads]
    float* acc_s = l_s + kAttnWarps * kAttnHeads;  // [kAttnWarps][kAttnHeads][latent]
    const int64_t t = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kAttnHeads;
    const int hn = static_cast<int>(s.heads - h0 < kAttnHeads ? s.heads - h0 : int64_t{kAttnHeads});
    const int64_t pos = *pos0_dev + offset + t;
    for (int64_t i = threadIdx.x; i < kAttnHeads * s.cache_dim; i += blockDim.x) {
        const int64_t g = i / s.cache_dim, d = i % s.cache_dim;
        q_s[i] = g < hn ? qabs[(t * s.heads + h0 + g) * s.cache_dim + d] : 0.0f;
    }
    __syncthreads();
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
    float m[kAttnHeads], l[kAttnHeads], acc[kAttnHeads][LPL];
#pragma unroll
    for (int g = 0; g < kAttnHeads; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int j = 0; j < LPL; ++j) acc[g][j] = 0.0f;
    }
    const int64_t k0 = part != nullptr ? static_cast<int64_t>(blockIdx.z) * chunk : 0;
    const int64_t k1 = part != nullptr ? min(pos + 1, k0 + chunk) : pos + 1;
    for (int64_t key = k0 + warp; key < k1; key += kAttnWarps) {
        const int64_t row = key * s.cache_dim;
        float dot[kAttnHeads] = {};
        for (int64_t d = lane; d < s.cache_dim; d += 32) {
            const float kv = cache_at(cache, f16, row + d);
#pragma unroll
            for (int g = 0; g < kAttnHeads; ++g) dot[g] = fmaf(q_s[g * s.cache_dim + d], kv, dot[g]);
        }
        float v[LPL];
#pragma unroll
        for (int j = 0; j < LPL; ++j) {
            const int64_t d = lane + 32 * j;
            v[j] = d < s.latent ? cache_at(cache, f16, row + d) : 0.0f;
        }
#pragma unroll
        for (int g = 0; g < kAttnHeads; ++g) {
            const float score = warp_sum(dot[g]) * scale;
            const float m_new = fmaxf(m[g], score);
            const float corr = expf(m[g] - m_new), p = expf(score - m_new);
            l[g] = l[g] * corr + p;
#pragma unroll
            for (int j = 0; j < LPL; ++j) acc[g][j] = fmaf(p, v[j], acc[g][j] * corr);
            m[g] = m_new;
        }
    }
    if (lane == 0)
        for (int g = 0; g < kAttnHeads; ++g) {
            m_s[warp * kAttnHeads + g] = m[g];
            l_s[warp * kAttnHeads + g] = l[g];
        }
#pragma unroll
    for (int g = 0; g < kAttnHeads; ++g)
#pragma unroll
        for (int j = 0; j < LPL; ++j) {
            const int64_t d = lane + 32 * j;
            if (d < s.latent) acc_s[(warp * kAttnHeads + g) * s.latent + d] = acc[g][j];
        }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < hn * s.latent; i += blockDim.x) {
        const int g = static_cast<int>(i / s.latent);
        const int64_t d = i % s.latent;
        float mx = -INFINITY;
        for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, m_s[w * kAttnHeads + g]);
        float num = 0.0f, den = 0.0f;
        for (int w = 0; w < kAttnWarps; ++w) {
            const float mw = m_s[w * kAttnHeads + g];
            if (mw == -INFINITY) continue;  // a warp that saw no key
            const float f = expf(mw - mx);
            num += f * acc_s[(w * kAttnHeads + g) * s.latent + d];
            den += f * l_s[w * kAttnHeads + g];
        }
        if (part == nullptr) {
            olat[(t * s.heads + h0 + g) * s.latent + d] = num / den;
            continue;
        }
        float* p = part + ((t * s.heads + h0 + g) * gridDim.z + blockIdx.z) * (s.latent + 2);
        p[2 + d] = mx == -INFINITY ? 0.0f : num;
        if (d == 0) {
            p[0] = mx;
            p[1] = mx == -INFINITY ? 0.0f : den;
        }
    }
}

// The splits' partials of one (query, head) merged: the output of the unsplit kernel up to rounding.
__global__ void combine_kernel(const float* part, int64_t splits, int64_t latent, float* olat) {
    const float* p = part + static_cast<int64_t>(blockIdx.x) * splits * (latent + 2);
    float mx = -INFINITY;
    for (int64_t z = 0; z < splits; ++z) mx = fmaxf(mx, p[z * (latent + 2)]);
    float den = 0.0f;
    for (int64_t z = 0; z < splits; ++z) {
        const float m = p[z * (latent + 2)];
        if (m != -INFINITY) den += expf(m - mx) * p[z * (latent + 2) + 1];
    }
    for (int64_t d = threadIdx.x; d < latent; d += blockDim.x) {
        float num = 0.0f;
        for (int64_t z = 0; z < splits; ++z) {
            const float m = p[z * (latent + 2)];
            if (m != -INFINITY) num += expf(m - mx) * p[z * (latent + 2) + 2 + d];
        }
        olat[static_cast<int64_t>(blockIdx.x) * latent + d] = num / den;
    }
}

}  // namespace

const char* latent_attention_shape_error(const MlaShape& s) {
    if (s.latent <= 0 || s.latent > 32 * kMaxLatentPerLane) return "kv_lora_rank outside 1..512";
    if (s.cache_dim > 1024) return "kv_lora_rank + qk_rope_head_dim above 1024";
    if (s.nope > 1024 || s.v_dim > 4096) return "qk_nope_head_dim above 1024 or v_head_dim above 4096";
    return nullptr;
}

void latent_absorb(const float* q, const MlaShape& s, const DevWeight& w, bool embed_q, int64_t n,
                   float* qabs, cudaStream_t st) {
    if (n == 0) return;
    const dim3 grid(static_cast<unsigned>(s.heads), grid_for(n, kTokensPerBlock));
    const size_t smem = sizeof(float) * static_cast<size_t>(kTokensPerBlock * s.nope);
    absorb_kernel<<<grid, 256, smem, st>>>(q, s, w, embed_q, n, qabs);
}

void latent_unabsorb(const float* olat, const MlaShape& s, const DevWeight& w, bool unembed_out, int64_t n,
                     float* out, cudaStream_t st) {
    if (n == 0) return;
    const dim3 grid(static_cast<unsigned>(s.heads), grid_for(n, kTokensPerBlock));
    const size_t smem = sizeof(float) * static_cast<size_t>(kTokensPerBlock * s.latent);
    const int64_t head_rows = unembed_out ? s.v_dim : s.nope + s.v_dim, row0 = unembed_out ? 0 : s.nope;
    unabsorb_kernel<<<grid, 256, smem, st>>>(olat, s, w, head_rows, row0, n, out);
}

void deinterleave_pairs(float* x, int64_t rows, int64_t stride, int64_t dim, cudaStream_t st) {
    if (rows == 0) return;
    deinterleave_kernel<<<static_cast<unsigned>(rows), 64, sizeof(float) * static_cast<size_t>(dim), st>>>(
        x, stride, dim);
}

int64_t latent_split_keys(int64_t max_keys) {
    // At most kMaxSplits partials: longer contexts take longer chunks, not more scratch.
    constexpr int64_t kChunk = 256, kMaxSplits = 64;
    return std::max(kChunk, (max_keys + kMaxSplits - 1) / kMaxSplits);
}

int64_t latent_split_scratch_floats(const MlaShape& s, int64_t max_keys) {
    const int64_t chunk = latent_split_keys(max_keys);
    return s.heads * ((max_keys + chunk - 1) / chunk) * (s.latent + 2);
}

void latent_attention(const float* qabs, const void* cache, kernels::KvType type, const MlaShape& s,
                      int64_t n_q, int64_t offset, const int32_t* pos0_dev, float scale, float* olat,
                      cudaStream_t st, float* split_scratch, int64_t max_keys) {
    if (n_q == 0) return;
    const bool f16 = type == kernels::KvType::kF16;
    // One query (decode) over a context that spans several chunks: the keys split over blocks
    // (flash-decoding), so a step of V3's 128 heads fills the GPU instead of 32 blocks.
    const int64_t chunk = latent_split_keys(max_keys), splits = (max_keys + chunk - 1) / chunk;
    const bool split = n_q == 1 && split_scratch != nullptr && splits > 1;
    const dim3 grid(static_cast<unsigned>(n_q), grid_for(s.heads, kAttnHeads),
                    static_cast<unsigned>(split ? splits : 1));
    const size_t smem =
        sizeof(float) * static_cast<size_t>(kAttnHeads * s.cache_dim + 2 * kAttnWarps * kAttnHeads +
                                            kAttnWarps * kAttnHeads * s.latent);
    const int lpl = static_cast<int>((s.latent + 31) / 32);
    float* part = split ? split_scratch : nullptr;
    auto launch = [&](auto kernel) {
        if (smem > 48 * 1024)
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        kernel<<<grid, 32 * kAttnWarps, smem, st>>>(qabs, cache, f16, s, offset, pos0_dev, scale, olat, chunk,
                                                    part);
    };
    if (lpl <= 2)
        launch(attention_kernel<2>);
    else if (lpl <= 4)
        launch(attention_kernel<4>);
    else if (lpl <= 8)
        launch(attention_kernel<8>);
    else
        launch(attention_kernel<kMaxLatentPerLane>);
    if (split)
        combine_kernel<<<static_cast<unsigned>(n_q * s.heads), 128, 0, st>>>(part, splits, s.latent, olat);
}

}  // namespace sluice::cuda
