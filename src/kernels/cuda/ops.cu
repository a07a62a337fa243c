// Non-linear kernels of the GPU forward: norms, RoPE, f32 KV writes, the attention prep, the DeltaNet
// conv and recurrence, the router and the elementwise glue (the KV cache's stores and attention are
// in kv.cu). Each mirrors an op of kernels/reference/ and is compared with it in tests/cuda/ops_test.cpp.
//
// The DeltaNet recurrence: a value column's dk state entries in the registers of 4 lanes for the
// whole token batch (prefill), or of one warp's lanes (the fused decode step); no global scratch.
#include <cmath>

#include "kernels/cuda/device/common.cuh"

namespace sluice::cuda {
namespace {

constexpr int kMaxHeadDimPerLane = 8;  // head_dim ≤ 256
constexpr int kMaxDkPerLane = 8;       // DeltaNet dk ≤ 256

__global__ void row_norm_kernel(const float* x, const float* weight, HeadLayout L, float eps, bool l2,
                                float scale, float* y) {
    allow_dependents();  // the next decode product may start loading its weights
    const int64_t t = blockIdx.x / L.n_heads, h = blockIdx.x % L.n_heads;
    const float* xr = x + t * L.in_token_stride + h * L.in_head_stride;
    float* yr = y + t * L.out_token_stride + h * L.out_head_stride;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < L.dim; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss);
    if (l2) {
        const float inv = scale / sqrtf(ss + eps);
        for (int64_t i = threadIdx.x; i < L.dim; i += blockDim.x) yr[i] = xr[i] * inv;
    } else {
        const float inv = rsqrtf(ss / static_cast<float>(L.dim) + eps);
        for (int64_t i = threadIdx.x; i < L.dim; i += blockDim.x) yr[i] = xr[i] * inv * weight[i];
    }
}

__global__ void rms_norm_gated_kernel(const float* x, const float* z, const float* weight, int64_t dim,
                                      float eps, float* y) {
    const int64_t row = blockIdx.x;
    const float* xr = x + row * dim;
    const float* zr = z + row * dim;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss);
    const float inv = rsqrtf(ss / static_cast<float>(dim) + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
        y[row * dim + i] = xr[i] * inv * weight[i] * silu_f(zr[i]);
}

__global__ void copy_heads_kernel(const float* x, HeadLayout L, float* y) {
    const int64_t t = blockIdx.x / L.n_heads, h = blockIdx.x % L.n_heads;
    const float* xr = x + t * L.in_token_stride + h * L.in_head_stride;
    float* yr = y + t * L.out_token_stride + h * L.out_head_stride;
    const int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
    if (i < L.dim) yr[i] = xr[i];
}

// Angles as the reference: inv_freq = 1/f32(theta^(2i/R)) in f32, angle = f32(pos)·inv_freq,
// cos/sin of that f32 angle in double.
// cos and sin of dim pair i at `position`: from theta (plain RoPE, as kernels::rope_neox), or from
// the given frequencies with cos and sin scaled in f32 (YaRN, as kernels::rope_neox_table).
__device__ inline void rope_cos_sin(const RopeParams& rope, int64_t i, int64_t rot_dim, int64_t position,
                                    double* cs, double* sn) {
    float inv_freq;
    if (rope.inv_freq != nullptr) {
        inv_freq = rope.inv_freq[i];
    } else {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(rot_dim);
        inv_freq =
            1.0f / static_cast<float>(pow(static_cast<double>(rope.theta), static_cast<double>(exponent)));
    }
    const float angle = static_cast<float>(position) * inv_freq;
    sincos(static_cast<double>(angle), sn, cs);
    if (rope.inv_freq != nullptr) {
        *cs = static_cast<float>(*cs) * rope.mscale;
        *sn = static_cast<float>(*sn) * rope.mscale;
    }
}

__global__ void rope_kernel(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, const int32_t* pos0,
                            RopeParams rope) {
    const int64_t t = blockIdx.x;
    const int64_t half = rot_dim / 2;
    const int64_t position = *pos0 + t;
    for (int64_t e = threadIdx.x; e < n_heads * half; e += blockDim.x) {
        const int64_t h = e / half, i = e % half;
        double sn, cs;
        rope_cos_sin(rope, i, rot_dim, position, &cs, &sn);
        float* v = x + (t * n_heads + h) * head_dim;
        const double a = v[i], b = v[i + half];
        v[i] = static_cast<float>(a * cs - b * sn);
        v[i + half] = static_cast<float>(b * cs + a * sn);
    }
}

__global__ void write_rows_kernel(const float* x, int64_t row_elems, const int32_t* pos0, float* cache) {
    const int64_t t = blockIdx.x;
    float* dst = cache + (*pos0 + t) * row_elems;
    for (int64_t i = threadIdx.x; i < row_elems; i += blockDim.x) dst[i] = x[t * row_elems + i];
}

// Attention prep, fused: block (token t, slot) with slot < n_heads a query head, else key/value
// head slot - n_heads. The head is RMS-normed into shared memory (the sum as row_norm_kernel's
// with the same 256 threads), rotated (rope_kernel's angle arithmetic) and written out: queries
// to q_out (and the gate half to gate_out), keys and values into the caches at row *pos0 + t (row t
// when !at_positions: staged for kv_store, and then k_cache may be k itself — a block reads its head
// into shared memory before it writes it back).
constexpr int kPrepThreads = 256;

__global__ void __launch_bounds__(kPrepThreads)
    attention_prep_kernel(const float* __restrict__ qg, const float* k, const float* v, PrepWeights w,
                          int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t rot_dim, bool gated,
                          float eps, const int32_t* pos0, RopeParams rope, float* q_out, float* gate_out,
                          float* k_cache, float* v_cache, bool at_positions) {
    const int64_t slots = n_heads + n_kv_heads;
    const int64_t t = blockIdx.x / slots, slot = blockIdx.x % slots;
    const bool is_q = slot < n_heads;
    const int64_t h = is_q ? slot : slot - n_heads;
    const int64_t q_head_stride = head_dim * (gated ? 2 : 1);
    const float* xr = is_q ? qg + (t * n_heads + h) * q_head_stride : k + (t * n_kv_heads + h) * head_dim;
    const int64_t position = *pos0 + t, row = at_positions ? position : t;
    const float* weight = is_q ? w.q_norm : w.k_norm;
    const float* bias = is_q ? w.q_bias : w.k_bias;
    if (bias != nullptr) bias += h * head_dim;
    __shared__ float normed[32 * kMaxHeadDimPerLane];
    // The head plus its bias (Qwen2), then its norm (every family but Qwen2); weight and bias are the
    // same for every thread of the block, so block_sum is reached by all or none.
    for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x)
        normed[i] = bias != nullptr ? xr[i] + bias[i] : xr[i];
    if (weight != nullptr) {
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) ss += normed[i] * normed[i];
        ss = block_sum(ss);
        const float inv = rsqrtf(ss / static_cast<float>(head_dim) + eps);
        for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) normed[i] = normed[i] * inv * weight[i];
    }
    __syncthreads();
    const int64_t half = rot_dim / 2;
    float* dst =
        is_q ? q_out + (t * n_heads + h) * head_dim : k_cache + row * n_kv_heads * head_dim + h * head_dim;
    for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) {
        if (i < rot_dim) {
            const int64_t pair = i < half ? i : i - half;
            double sn, cs;
            rope_cos_sin(rope, pair, rot_dim, position, &cs, &sn);
            const double a = normed[pair], b = normed[pair + half];
            dst[i] = i < half ? static_cast<float>(a * cs - b * sn) : static_cast<float>(b * cs + a * sn);
        } else {
            dst[i] = normed[i];
        }
    }
    if (is_q) {
        if (gated) {
            const float* gr = xr + head_dim;
            float* gd = gate_out + (t * n_heads + h) * head_dim;
            for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x) gd[i] = gr[i];
        }
    } else {
        const float* vr = v + (t * n_kv_heads + h) * head_dim;
        float* vd = v_cache + row * n_kv_heads * head_dim + h * head_dim;
        const float* vb = w.v_bias != nullptr ? w.v_bias + h * head_dim : nullptr;
        for (int64_t i = threadIdx.x; i < head_dim; i += blockDim.x)
            vd[i] = vb != nullptr ? vr[i] + vb[i] : vr[i];
    }
}

__global__ void add_bias_rows_kernel(float* x, const float* bias, int64_t cols) {
    const int64_t i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
    if (i < cols) x[blockIdx.x * cols + i] += bias[i];
}

// x += add; y = x / sqrt(mean(x²) + eps) · weight (the residual add fused with the next norm).
__global__ void add_rms_norm_kernel(const float* x, const float* add, const float* weight, int64_t dim,
                                    float eps, float* x_out, float* y) {
    allow_dependents();  // the next decode product may start loading its weights
    const int64_t row = blockIdx.x;
    float* xr = x_out + row * dim;  // each thread reads x before writing x_out at the same indices
    const float* ar = add + row * dim;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
        const float val = x[row * dim + i] + ar[i];
        xr[i] = val;
        ss += val * val;
    }
    ss = block_sum(ss);
    const float inv = rsqrtf(ss / static_cast<float>(dim) + eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) y[row * dim + i] = xr[i] * inv * weight[i];
}

// Thread = (channel c, a tile of kConvTokens consecutive tokens): its window of `kernel` inputs slides
// over the tile; tokens before the batch come from the carried state (the last kernel − 1 inputs,
// oldest first). The first tile's threads write the new state, read from the batch's end. One
// thread per channel over every token left 32 blocks on the GPU for a 4096-token prompt (2.3 ms per
// 35B layer; ncu, H100, session 16).
constexpr int kConvTokens = 16;
constexpr int kMaxConvKernel = 8;

// parts (null: one sequence, the arguments as given): sequence blockIdx.z's rows and state instead.
__global__ void conv1d_silu_kernel(const float* x, int64_t n, int64_t channels, int64_t kernel,
                                   const float* weight, const float* state, float* state_out, float* y,
                                   const DeltaPart* parts) {
    if (parts != nullptr) {
        const DeltaPart p = parts[blockIdx.z];
        x += p.row0 * channels;
        y += p.row0 * channels;
        n = p.n;
        state = p.conv_state;
        state_out = p.conv_state_out;
        if (static_cast<int64_t>(blockIdx.y) * kConvTokens >= n) return;  // past this sequence's rows
    }
    const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    const int64_t hist = kernel - 1;
    // Input at position tau of the batch (negative: the carried state).
    auto input = [&](int64_t tau) {
        return tau >= 0 ? x[tau * channels + c] : state[(hist + tau) * channels + c];
    };
    float wt[kMaxConvKernel];
#pragma unroll
    for (int i = 0; i < kMaxConvKernel; ++i) wt[i] = i < kernel ? weight[c * kernel + i] : 0.0f;
    const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kConvTokens;
    float win[kMaxConvKernel];  // win[i]: input at t − hist + i; win[hist] = token t
#pragma unroll
    for (int i = 0; i < kMaxConvKernel; ++i) win[i] = i < hist ? input(t0 - hist + i) : 0.0f;
    for (int64_t t = t0; t < t0 + kConvTokens && t < n; ++t) {
        win[hist] = x[t * channels + c];
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < kMaxConvKernel; ++i)
            if (i < kernel) acc += wt[i] * win[i];
        y[t * channels + c] = silu_f(acc);
#pragma unroll
        for (int i = 0; i + 1 < kMaxConvKernel; ++i)
            if (i < hist) win[i] = win[i + 1];
    }
    if (blockIdx.y == 0)
        for (int64_t i = 0; i < hist; ++i) state_out[i * channels + c] = input(n - hist + i);
}

// The recurrence over a batch of tokens. One block per (value head j, 32 value columns); each column's
// state rows are split over 4 lanes of one warp (lane = 4·column + quarter; quarter u holds rows
// u·R … u·R + R − 1 in registers), so a token's two dot products over the rows are an FMA chain per
// lane and two shuffles, with no block barrier; k, q, v, β and g of kChunk tokens are copied to
// shared memory (cp.async) while the chunk before them is computed. (Four warps each holding rows of
// all 32 columns, the dot products meeting in shared memory, took four barriers per token: 9.3 ms per
// 4096-token 35B layer; staging each chunk with plain loads after the chunk before it, 3.6 ms; ncu,
// H100, session 16.)
constexpr int kDeltaCols = 32;
constexpr int kDeltaQuarters = 4;

template <int R>  // state rows per lane: dk ≤ 4·R
__global__ void __launch_bounds__(kDeltaCols* kDeltaQuarters)
    gated_delta_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                       const float* __restrict__ beta, const float* __restrict__ g, int64_t n, int64_t n_k,
                       int64_t n_v, int64_t dk, int64_t dv, const float* state, float* state_out, float* out,
                       bool v_tiled) {
    constexpr int kChunk = R <= 32 ? 16 : 8;  // tokens per stage (two stages: shared memory ≤ 48 KB)
    constexpr int kStride = R + 4;  // floats per quarter of a staged row: the 4 quarters' float4 reads
                                    // hit distinct banks
    constexpr int kRow = kDeltaQuarters * R;
    __shared__ __align__(16) float ks[2][kChunk][kDeltaQuarters * kStride];
    __shared__ __align__(16) float qs[2][kChunk][kDeltaQuarters * kStride];
    __shared__ float vs[2][kChunk][kDeltaCols], bs[2][kChunk], gs[2][kChunk];
    const int64_t j = blockIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int quarter = lane % kDeltaQuarters;
    const int cb = warp * (32 / kDeltaQuarters) + lane / kDeltaQuarters;  // column within the block
    const int64_t d = static_cast<int64_t>(blockIdx.y) * kDeltaCols + cb;
    const bool col = d < dv;
    const int64_t kh = v_tiled ? j % n_k : j / (n_v / n_k);  // DeltaNetPlan::v_heads_tiled
    const float* S = state + j * dk * dv;
    float* S_out = state_out + j * dk * dv;
    // Chunk c's inputs into buffer buf (rows past dk and columns past dv zero-filled).
    auto stage = [&](int64_t c, int buf) {
        const int64_t t0 = c * kChunk;
        const int tn = static_cast<int>(n - t0 < kChunk ? n - t0 : kChunk);
        for (int e = threadIdx.x; e < tn * kRow; e += blockDim.x) {
            const int tt = e / kRow, i = e % kRow;
            const int at = (i / R) * kStride + i % R;
            const bool in = i < dk;
            const int64_t src = ((t0 + tt) * n_k + kh) * dk + (in ? i : 0);
            cp_async4(&ks[buf][tt][at], k + src, in);
            cp_async4(&qs[buf][tt][at], q + src, in);
        }
        for (int e = threadIdx.x; e < tn * kDeltaCols; e += blockDim.x) {
            const int tt = e / kDeltaCols, c2 = e % kDeltaCols;
            const int64_t dd = static_cast<int64_t>(blockIdx.y) * kDeltaCols + c2;
            cp_async4(&vs[buf][tt][c2], v + ((t0 + tt) * n_v + j) * dv + (dd < dv ? dd : 0), dd < dv);
        }
        if (threadIdx.x < tn) {
            cp_async4(&bs[buf][threadIdx.x], beta + (t0 + threadIdx.x) * n_v + j, true);
            cp_async4(&gs[buf][threadIdx.x], g + (t0 + threadIdx.x) * n_v + j, true);
        }
        cp_async_commit();
    };
    float s[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int64_t i = quarter * R + r;
        s[r] = (col && i < dk) ? S[i * dv + d] : 0.0f;
    }
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    if (chunks > 0) stage(0, 0);
    for (int64_t c = 0; c < chunks; ++c) {
        const int buf = static_cast<int>(c % 2);
        if (c + 1 < chunks) {
            stage(c + 1, buf ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int64_t t0 = c * kChunk;
        const int tn = static_cast<int>(n - t0 < kChunk ? n - t0 : kChunk);
        for (int tt = 0; tt < tn; ++tt) {
            const float alpha = expf(gs[buf][tt]);
            const float* kr = &ks[buf][tt][quarter * kStride];
            const float* qr = &qs[buf][tt][quarter * kStride];
            float dot[4] = {};
#pragma unroll
            for (int r = 0; r < R; r += 4) {
                const float4 kk = *reinterpret_cast<const float4*>(kr + r);
                s[r] *= alpha;
                s[r + 1] *= alpha;
                s[r + 2] *= alpha;
                s[r + 3] *= alpha;
                dot[0] += s[r] * kk.x;
                dot[1] += s[r + 1] * kk.y;
                dot[2] += s[r + 2] * kk.z;
                dot[3] += s[r + 3] * kk.w;
            }
            float kv = (dot[0] + dot[1]) + (dot[2] + dot[3]);
            kv += __shfl_xor_sync(0xffffffffu, kv, 1);
            kv += __shfl_xor_sync(0xffffffffu, kv, 2);
            const float delta = col ? bs[buf][tt] * (vs[buf][tt][cb] - kv) : 0.0f;
            float o[4] = {};
#pragma unroll
            for (int r = 0; r < R; r += 4) {
                const float4 kk = *reinterpret_cast<const float4*>(kr + r);
                const float4 qq = *reinterpret_cast<const float4*>(qr + r);
                s[r] += kk.x * delta;
                s[r + 1] += kk.y * delta;
                s[r + 2] += kk.z * delta;
                s[r + 3] += kk.w * delta;
                o[0] += s[r] * qq.x;
                o[1] += s[r + 1] * qq.y;
                o[2] += s[r + 2] * qq.z;
                o[3] += s[r + 3] * qq.w;
            }
            float oc = (o[0] + o[1]) + (o[2] + o[3]);
            oc += __shfl_xor_sync(0xffffffffu, oc, 1);
            oc += __shfl_xor_sync(0xffffffffu, oc, 2);
            if (quarter == 0 && col) out[((t0 + tt) * n_v + j) * dv + d] = oc;
        }
        __syncthreads();  // buffer buf is consumed: chunk c + 2 is staged into it next
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int64_t i = quarter * R + r;
        if (col && i < dk) S_out[i * dv + d] = s[r];
    }
}

// The DeltaNet step after the conv, fused: the l2 norms of the q and k heads (k head = j / (n_v /
// n_k)), the gates as deltanet_gates_kernel, the recurrence as gated_delta_kernel and the gated RMS
// norm as rms_norm_gated_kernel. One block per (value head j, 32 value columns): lane = column,
// warp w holds state rows w + kFusedDeltaWarps·r. A head's state is spread over dv / 32 SMs (one
// block per head left 100 of 132 SMs idle and each loading 64 KB of state alone: 15 µs per 35B layer,
// ncu session 4). The output norm runs over all dv columns, so the blocks write the raw outputs to
// `raw`, and the last of a head's blocks to finish (counted on counters[j], which it resets)
// normalises them into y.
constexpr int kFusedDeltaWarps = 8;
constexpr int kFusedDkRowsPerThread = kMaxDkPerLane * 32 / kFusedDeltaWarps;  // dk ≤ 256

__global__ void __launch_bounds__(32 * kFusedDeltaWarps)
    deltanet_fused_kernel(const float* __restrict__ conv_out, const float* __restrict__ b_in,
                          const float* __restrict__ a_in, const float* __restrict__ z, const float* neg_a,
                          const float* dt_bias, const float* norm_weight, int64_t n, int64_t n_k, int64_t n_v,
                          int64_t dk, int64_t dv, float l2_eps, float q_scale, float norm_eps,
                          const float* state, float* state_out, float* raw, unsigned* counters, float* y,
                          bool v_tiled, const DeltaPart* parts) {
    allow_dependents();      // the next decode product may start loading its weights
    if (parts != nullptr) {  // sequence blockIdx.z's rows and state (deltanet_fused_parts)
        const DeltaPart p = parts[blockIdx.z];
        const int64_t cd_ = 2 * n_k * dk + n_v * dv;
        conv_out += p.row0 * cd_;
        b_in += p.row0 * n_v;
        a_in += p.row0 * n_v;
        z += p.row0 * n_v * dv;
        raw += p.row0 * n_v * dv;
        y += p.row0 * n_v * dv;
        n = p.n;
        state = p.state;
        state_out = p.state_out;
        counters += static_cast<int64_t>(blockIdx.z) * n_v;
    }
    const int64_t j = blockIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t d = static_cast<int64_t>(blockIdx.y) * 32 + lane;
    const bool col = d < dv;
    const int64_t kh = v_tiled ? j % n_k : j / (n_v / n_k);  // DeltaNetPlan::v_heads_tiled
    const int64_t kd = n_k * dk, cd = 2 * kd + n_v * dv;
    const float* S = state + j * dk * dv;
    float* S_out = state_out + j * dk * dv;
    __shared__ float ks[kMaxDkPerLane * 32], qs[kMaxDkPerLane * 32];
    __shared__ float red[kFusedDeltaWarps][32];
    __shared__ float inv_s[2];  // q and k l2 factors
    __shared__ bool last;
    float s[kFusedDkRowsPerThread];
#pragma unroll
    for (int r = 0; r < kFusedDkRowsPerThread; ++r) {
        const int64_t i = warp + kFusedDeltaWarps * r;
        s[r] = (col && i < dk) ? S[i * dv + d] : 0.0f;
    }
    for (int64_t t = 0; t < n; ++t) {
        const float* row = conv_out + t * cd;  // [q | k | v] of token t
        __syncthreads();                       // the previous token's shared values are consumed
        if (warp < 2) {                        // warp 0: q, warp 1: k
            const float* src = row + warp * kd + kh * dk;
            float ss = 0.0f;
            for (int64_t i = lane; i < dk; i += 32) ss += src[i] * src[i];
            ss = warp_sum(ss);
            if (lane == 0) inv_s[warp] = (warp == 0 ? q_scale : 1.0f) / sqrtf(ss + l2_eps);
        }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < dk; i += blockDim.x) {
            qs[i] = row[kh * dk + i] * inv_s[0];
            ks[i] = row[kd + kh * dk + i] * inv_s[1];
        }
        __syncthreads();
        const float b = sigmoid_f(b_in[t * n_v + j]);
        const float xg = a_in[t * n_v + j] + dt_bias[j];
        const float alpha = expf(neg_a[j] * (xg > 20.0f ? xg : log1pf(expf(xg))));
        float dot = 0.0f;
#pragma unroll
        for (int r = 0; r < kFusedDkRowsPerThread; ++r) {
            const int64_t i = warp + kFusedDeltaWarps * r;
            if (i < dk) {
                s[r] *= alpha;
                dot += s[r] * ks[i];
            }
        }
        red[warp][lane] = dot;
        __syncthreads();
        float kv = 0.0f;
#pragma unroll
        for (int w = 0; w < kFusedDeltaWarps; ++w) kv += red[w][lane];
        const float delta = col ? b * (row[2 * kd + j * dv + d] - kv) : 0.0f;
        float o = 0.0f;
#pragma unroll
        for (int r = 0; r < kFusedDkRowsPerThread; ++r) {
            const int64_t i = warp + kFusedDeltaWarps * r;
            if (i < dk) {
                s[r] += ks[i] * delta;
                o += s[r] * qs[i];
            }
        }
        __syncthreads();  // every warp has read red
        red[warp][lane] = o;
        __syncthreads();
        if (warp == 0 && col) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < kFusedDeltaWarps; ++w) sum += red[w][lane];
            raw[(t * n_v + j) * dv + d] = sum;
        }
    }
#pragma unroll
    for (int r = 0; r < kFusedDkRowsPerThread; ++r) {
        const int64_t i = warp + kFusedDeltaWarps * r;
        if (col && i < dk) S_out[i * dv + d] = s[r];
    }
    // The head's last block: y = rms_norm(raw) · norm_weight ⊙ silu(z), per token.
    __threadfence();  // this block's raw outputs are visible before it is counted
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(counters + j, 1u) == gridDim.y - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int64_t t = 0; t < n; ++t) {
        const int64_t at = (t * n_v + j) * dv;
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < dv; i += blockDim.x) {
            const float v = __ldcg(raw + at + i);
            ss += v * v;
        }
        const float inv = rsqrtf(block_sum(ss) / static_cast<float>(dv) + norm_eps);
        for (int64_t i = threadIdx.x; i < dv; i += blockDim.x)
            y[at + i] = __ldcg(raw + at + i) * inv * norm_weight[i] * silu_f(z[at + i]);
    }
    if (threadIdx.x == 0) counters[j] = 0;
}

// One warp per token: the scores in f32, then k rounds of arg-max (ties: lower index).
__global__ void router_topk_kernel(const float* logits, int64_t n, kernels::RouterSpec r, int32_t* ids,
                                   float* weights) {
    const int64_t t = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (t >= n) return;
    router_topk_warp(logits + t * r.n_experts, r, ids + t * r.k, weights + t * r.k, false);
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float* out) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = silu_f(gate[i]) * up[i];
}

__global__ void axpy_kernel(float a, const float* x, int64_t n, float* y) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

__global__ void mul_sigmoid_kernel(float* x, const float* gate, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= sigmoid_f(gate[i]);
}

__global__ void add_gated_rows_kernel(const float* out, const float* gate_logit, int64_t n, int64_t dim,
                                      float* mix) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n * dim) mix[i] += sigmoid_f(gate_logit[i / dim]) * out[i];
}

__global__ void deltanet_gates_kernel(float* b, float* a, const float* neg_a, const float* dt_bias, int64_t n,
                                      int64_t nv) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n * nv) return;
    const int64_t j = i % nv;
    b[i] = sigmoid_f(b[i]);
    const float x = a[i] + dt_bias[j];
    a[i] = neg_a[j] * (x > 20.0f ? x : log1pf(expf(x)));
}

__global__ void split_qkvz_kernel(const float* p, const float* ba, int64_t n, int64_t nk, int64_t dk,
                                  int64_t r, int64_t dv, float* u, float* z, float* b, float* a) {
    const int64_t block = 2 * dk + 2 * r * dv, qkvz = nk * block;
    const int64_t kd = nk * dk, vd = nk * r * dv, cd = 2 * kd + vd, nv = nk * r;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n * qkvz) {
        const int64_t t = i / qkvz, rem = i % qkvz, g = rem / block, e = rem % block;
        const float val = p[i];
        float* ut = u + t * cd;
        if (e < dk) {
            ut[g * dk + e] = val;
        } else if (e < 2 * dk) {
            ut[kd + g * dk + (e - dk)] = val;
        } else if (e < 2 * dk + r * dv) {
            ut[2 * kd + g * r * dv + (e - 2 * dk)] = val;
        } else {
            z[t * vd + g * r * dv + (e - 2 * dk - r * dv)] = val;
        }
    }
    if (i < n * 2 * nv) {
        const int64_t t = i / (2 * nv), rem = i % (2 * nv), g = rem / (2 * r), e = rem % (2 * r);
        if (e < r) {
            b[t * nv + g * r + e] = ba[i];
        } else {
            a[t * nv + g * r + (e - r)] = ba[i];
        }
    }
}

// gpt-oss's routed experts (model/moe.cpp ExpertExtras): row r's expert e = ids[order[r]] (or ids[r]),
// its gate and up biases added, then kernels::swiglu_clamped (limit > 0) or silu(g)·u.
__global__ void expert_swiglu_kernel(const float* gate, const float* up, const int32_t* ids,
                                     const int32_t* order, const float* gate_bias, const float* up_bias,
                                     int64_t cols, float alpha, float limit, float* act) {
    const int64_t r = blockIdx.x, i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
    if (i >= cols) return;
    const int64_t e = ids[order != nullptr ? order[r] : r], at = r * cols + i;
    float g = gate[at], u = up[at];
    if (gate_bias != nullptr) g += gate_bias[e * cols + i];
    if (up_bias != nullptr) u += up_bias[e * cols + i];
    if (limit > 0.0f) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
        act[at] = (u + 1.0f) * (g / (1.0f + expf(-alpha * g)));
    } else {
        act[at] = silu_f(g) * u;
    }
}

// mix[t, i] += Σ_j weights[t·k + j] · bias[ids[t·k + j], i], j ascending.
__global__ void moe_add_expert_bias_kernel(const int32_t* ids, const float* weights, const float* bias,
                                           int64_t k, int64_t dim, float* mix) {
    const int64_t t = blockIdx.x, i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
    if (i >= dim) return;
    float acc = mix[t * dim + i];
    for (int64_t j = 0; j < k; ++j)
        acc += weights[t * k + j] * bias[static_cast<int64_t>(ids[t * k + j]) * dim + i];
    mix[t * dim + i] = acc;
}

constexpr int kThreads = 256;

}  // namespace

void expert_swiglu(const float* gate, const float* up, const int32_t* ids, const int32_t* order,
                   const float* gate_bias, const float* up_bias, int64_t rows, int64_t cols, float alpha,
                   float limit, float* act, cudaStream_t s) {
    if (rows == 0) return;
    const dim3 grid(static_cast<unsigned>(rows), grid_for(cols, kThreads));
    expert_swiglu_kernel<<<grid, kThreads, 0, s>>>(gate, up, ids, order, gate_bias, up_bias, cols, alpha,
                                                   limit, act);
}

void moe_add_expert_bias(const int32_t* ids, const float* weights, const float* bias, int64_t n, int64_t k,
                         int64_t dim, float* mix, cudaStream_t s) {
    if (n == 0 || bias == nullptr) return;
    const dim3 grid(static_cast<unsigned>(n), grid_for(dim, kThreads));
    moe_add_expert_bias_kernel<<<grid, kThreads, 0, s>>>(ids, weights, bias, k, dim, mix);
}

void row_norm(const float* x, const float* weight, const HeadLayout& layout, float eps, bool l2, float scale,
              float* y, cudaStream_t s) {
    if (layout.n_tokens == 0) return;
    row_norm_kernel<<<static_cast<unsigned>(layout.n_tokens * layout.n_heads),
                      layout.dim >= 1024 ? 1024 : 256, 0, s>>>(x, weight, layout, eps, l2, scale, y);
}

void rms_norm_gated(const float* x, const float* z, const float* weight, int64_t rows, int64_t dim, float eps,
                    float* y, cudaStream_t s) {
    if (rows == 0) return;
    rms_norm_gated_kernel<<<static_cast<unsigned>(rows), 128, 0, s>>>(x, z, weight, dim, eps, y);
}

void copy_heads(const float* x, const HeadLayout& layout, float* y, cudaStream_t s) {
    if (layout.n_tokens == 0) return;
    const dim3 grid(static_cast<unsigned>(layout.n_tokens * layout.n_heads), grid_for(layout.dim, 128));
    copy_heads_kernel<<<grid, 128, 0, s>>>(x, layout, y);
}

void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rot_dim,
               const int32_t* pos0_dev, const RopeParams& rope, cudaStream_t s) {
    if (n_tokens == 0) return;
    rope_kernel<<<static_cast<unsigned>(n_tokens), 256, 0, s>>>(x, n_heads, head_dim, rot_dim, pos0_dev,
                                                                rope);
}

void write_rows_at(const float* x, int64_t n, int64_t row_elems, const int32_t* pos0_dev, float* cache,
                   cudaStream_t s) {
    if (n == 0) return;
    write_rows_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(x, row_elems, pos0_dev, cache);
}

void attention_prep(const float* qg, const float* k, const float* v, const PrepWeights& w, int64_t n,
                    int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t rot_dim, bool gated,
                    float eps, const int32_t* pos0_dev, const RopeParams& rope, float* q_out, float* gate_out,
                    float* k_cache, float* v_cache, cudaStream_t s, bool at_positions) {
    if (n == 0) return;
    attention_prep_kernel<<<static_cast<unsigned>(n * (n_heads + n_kv_heads)), kPrepThreads, 0, s>>>(
        qg, k, v, w, n_heads, n_kv_heads, head_dim, rot_dim, gated, eps, pos0_dev, rope, q_out, gate_out,
        k_cache, v_cache, at_positions);
}

void add_bias_rows(float* x, const float* bias, int64_t rows, int64_t cols, cudaStream_t s) {
    if (rows == 0) return;
    const dim3 grid(static_cast<unsigned>(rows), grid_for(cols, 256));
    add_bias_rows_kernel<<<grid, 256, 0, s>>>(x, bias, cols);
}

void add_rms_norm(float* x, const float* add, const float* weight, int64_t rows, int64_t dim, float eps,
                  float* y, cudaStream_t s) {
    add_rms_norm_to(x, add, weight, rows, dim, eps, x, y, s);
}

void add_rms_norm_to(const float* x, const float* add, const float* weight, int64_t rows, int64_t dim,
                     float eps, float* x_out, float* y, cudaStream_t s) {
    if (rows == 0) return;
    add_rms_norm_kernel<<<static_cast<unsigned>(rows), dim >= 1024 ? 1024 : 256, 0, s>>>(x, add, weight, dim,
                                                                                         eps, x_out, y);
}

void conv1d_silu(const float* x, int64_t n, int64_t channels, int64_t kernel, const float* weight,
                 const float* state, float* state_out, float* y, cudaStream_t s) {
    if (n == 0) return;
    const dim3 grid(grid_for(channels, kThreads), grid_for(n, kConvTokens));
    conv1d_silu_kernel<<<grid, kThreads, 0, s>>>(x, n, channels, kernel, weight, state, state_out, y,
                                                 nullptr);
}

void conv1d_silu_parts(const float* x, const DeltaPart* parts, int64_t n_parts, int64_t max_rows,
                       int64_t channels, int64_t kernel, const float* weight, float* y, cudaStream_t s) {
    if (n_parts == 0 || max_rows == 0) return;
    const dim3 grid(grid_for(channels, kThreads), grid_for(max_rows, kConvTokens),
                    static_cast<unsigned>(n_parts));
    conv1d_silu_kernel<<<grid, kThreads, 0, s>>>(x, 0, channels, kernel, weight, nullptr, nullptr, y, parts);
}

void gated_delta(const float* q, const float* k, const float* v, const float* beta, const float* g, int64_t n,
                 int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, const float* state, float* state_out,
                 float* out, cudaStream_t s, bool v_heads_tiled) {
    const dim3 grid(static_cast<unsigned>(n_v), grid_for(dv, kDeltaCols));
    const dim3 block(kDeltaCols * kDeltaQuarters);
    if (dk <= 4 * 8) {
        gated_delta_kernel<8><<<grid, block, 0, s>>>(q, k, v, beta, g, n, n_k, n_v, dk, dv, state, state_out,
                                                     out, v_heads_tiled);
    } else if (dk <= 4 * 16) {
        gated_delta_kernel<16><<<grid, block, 0, s>>>(q, k, v, beta, g, n, n_k, n_v, dk, dv, state, state_out,
                                                      out, v_heads_tiled);
    } else if (dk <= 4 * 32) {
        gated_delta_kernel<32><<<grid, block, 0, s>>>(q, k, v, beta, g, n, n_k, n_v, dk, dv, state, state_out,
                                                      out, v_heads_tiled);
    } else {
        gated_delta_kernel<64><<<grid, block, 0, s>>>(q, k, v, beta, g, n, n_k, n_v, dk, dv, state, state_out,
                                                      out, v_heads_tiled);
    }
}

bool deltanet_fused_fits(int64_t dk, int64_t dv) {
    (void)dv;
    return dk <= 32 * kMaxDkPerLane;
}

void deltanet_fused(const float* conv_out, const float* b, const float* a, const float* z, const float* neg_a,
                    const float* dt_bias, const float* norm_weight, int64_t n, int64_t n_k, int64_t n_v,
                    int64_t dk, int64_t dv, float l2_eps, float q_scale, float norm_eps, const float* state,
                    float* state_out, float* raw, unsigned* counters, float* y, cudaStream_t s,
                    bool v_heads_tiled) {
    if (n == 0) return;
    const dim3 grid(static_cast<unsigned>(n_v), grid_for(dv, 32));
    deltanet_fused_kernel<<<grid, 32 * kFusedDeltaWarps, 0, s>>>(
        conv_out, b, a, z, neg_a, dt_bias, norm_weight, n, n_k, n_v, dk, dv, l2_eps, q_scale, norm_eps, state,
        state_out, raw, counters, y, v_heads_tiled, nullptr);
}

void deltanet_fused_parts(const float* conv_out, const float* b, const float* a, const float* z,
                          const float* neg_a, const float* dt_bias, const float* norm_weight,
                          const DeltaPart* parts, int64_t n_parts, int64_t n_k, int64_t n_v, int64_t dk,
                          int64_t dv, float l2_eps, float q_scale, float norm_eps, float* raw,
                          unsigned* counters, float* y, cudaStream_t s, bool v_heads_tiled) {
    if (n_parts == 0) return;
    const dim3 grid(static_cast<unsigned>(n_v), grid_for(dv, 32), static_cast<unsigned>(n_parts));
    deltanet_fused_kernel<<<grid, 32 * kFusedDeltaWarps, 0, s>>>(
        conv_out, b, a, z, neg_a, dt_bias, norm_weight, 0, n_k, n_v, dk, dv, l2_eps, q_scale, norm_eps,
        nullptr, nullptr, raw, counters, y, v_heads_tiled, parts);
}

void router_topk(const float* logits, int64_t n, const kernels::RouterSpec& r, int32_t* ids, float* weights,
                 cudaStream_t s) {
    if (n == 0) return;
    router_topk_kernel<<<grid_for(n, 4), 128, 0, s>>>(logits, n, r, ids, weights);
}

void swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s) {
    if (n == 0) return;
    swiglu_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(gate, up, n, out);
}

void axpy(float a, const float* x, int64_t n, float* y, cudaStream_t s) {
    if (n == 0) return;
    axpy_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(a, x, n, y);
}

void mul_sigmoid(float* x, const float* gate, int64_t n, cudaStream_t s) {
    if (n == 0) return;
    mul_sigmoid_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, gate, n);
}

void add_gated_rows(const float* out, const float* gate_logit, int64_t n, int64_t dim, float* mix,
                    cudaStream_t s) {
    if (n == 0) return;
    add_gated_rows_kernel<<<grid_for(n * dim, kThreads), kThreads, 0, s>>>(out, gate_logit, n, dim, mix);
}

void deltanet_gates(float* b, float* a, const float* neg_a, const float* dt_bias, int64_t n, int64_t nv,
                    cudaStream_t s) {
    if (n == 0) return;
    deltanet_gates_kernel<<<grid_for(n * nv, kThreads), kThreads, 0, s>>>(b, a, neg_a, dt_bias, n, nv);
}

void split_qkvz(const float* p, const float* ba, int64_t n, int64_t nk, int64_t dk, int64_t r, int64_t dv,
                float* u, float* z, float* b, float* a, cudaStream_t s) {
    if (n == 0) return;
    const int64_t total = n * nk * (2 * dk + 2 * r * dv);
    split_qkvz_kernel<<<grid_for(total, kThreads), kThreads, 0, s>>>(p, ba, n, nk, dk, r, dv, u, z, b, a);
}

}  // namespace sluice::cuda
