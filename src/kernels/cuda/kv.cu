// The KV cache on the GPU: storing rows in every KV type of kernels/kv_format.h, and attention
// read straight from the stored form — a key or value is decoded in registers as the softmax
// reaches it, never into a dequantised copy of the cache.
//
// Stores mirror kernels::reference::kv_store bit for bit (the same f32 operations in the same
// order, no contraction into FMAs; q3's sums in double by one lane, as the reference sums them),
// so a cache written on the GPU is byte-identical to the CPU's and a session file moves between
// backends unchanged. One warp stores one head.
//
// Attention: a block per (query, KV head, group of G query heads of that KV head), kAttnWarps warps
// each running an online softmax over its share of the keys with a lane holding head_dim/32 dims,
// merged through shared memory. Each key and value is loaded and decoded once for the G heads (GQA:
// the cache is read once per KV head rather than once per query head; G = 8, or 4 for q3 with a ring).
// For one query with split scratch the keys are split over many blocks and a combine kernel merges
// them — the form for head widths attention_decode.cu has no instance for; steps of up to 16
// queries at widths 32, 64, 128 and 256 take attention_decode.cu's kernel instead. q3 keys
// are rotated (y = H·D·x/√hd), so the queries are rotated once per block (q·k = q'·ŷ) and the
// weighted sums of the ŷ rotated back once at the end. With a --kv-window the ring's f16 rows replace
// a key's cache row inside the query's window (kernels::KvRing); for q3 they are in the plain
// domain, so a second accumulator sums their values and is added after the rotation back.
// attention_decode.cu's kernel checks tags only in tiles reaching into the window (measured on the
// H200, bench/results/kv/h200/: this kernel's per-key check costs q8/q4 a fifth of their decode).
// gpt-oss's sliding window and sinks (KvCache::sliding, sinks): a query's keys start at its window's first
// key (the split kernel's blocks before it exit, and the combine starts at its split), and a head's sink
// joins the max and the denominator where the output is normalised (softmax_out).
#include <cmath>

#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/device/kv_view.cuh"

namespace sluice::cuda {
namespace {

using kernels::KvType;

constexpr int kMaxHeadDimPerLane = 8;  // head_dim ≤ 256
constexpr int kMaxHeadDim = 32 * kMaxHeadDimPerLane;
constexpr int kSplitKeys = 64;  // keys per block of the split decode attention
constexpr int kAttnWarps = 4;

// Element e of a stored head (kernels::reference's load_head; q3: the rotated ŷ_e = s·L[c_e]).
template <KvType T>
__device__ __forceinline__ float kv_elem(const uint8_t* head, int64_t hd, int64_t e) {
    if constexpr (T == KvType::kF32) {
        return reinterpret_cast<const float*>(head)[e];
    } else if constexpr (T == KvType::kF16) {
        return half_at(head, e);
    } else if constexpr (T == KvType::kQ8) {
        return half_at(head + hd, e / kernels::kKvGroup) * static_cast<float>(static_cast<int8_t>(head[e]));
    } else if constexpr (T == KvType::kQ4) {
        const int64_t g = e / kernels::kKvGroup, j = e % kernels::kKvGroup;
        const uint8_t byte = head[g * kernels::kKvGroup / 2 + j % (kernels::kKvGroup / 2)];
        const int c = j < kernels::kKvGroup / 2 ? (byte & 15) : (byte >> 4);
        return half_at(head + hd / 2, g) * static_cast<float>(c - 8);
    } else {
        const int64_t bit = 3 * e;
        const int word = head[bit / 8] | (bit % 8 > 5 ? head[bit / 8 + 1] << 8 : 0);
        return q3_scale(head, hd) * kQ3Level[(word >> (bit % 8)) & 7];
    }
}

// x ← H·x in place by one warp (kv_store's blocks are one warp): the reference's butterflies, stage by
// stage; within a stage they are independent, so the result is the reference's bit for bit.
__device__ void hadamard_warp(float* x, int64_t n, int lane) {
    for (int64_t h = 1; h < n; h *= 2) {
        __syncwarp();
        for (int64_t i = lane; i < n / 2; i += 32) {
            const int64_t a = (i / h) * 2 * h + i % h;
            const float u = x[a], w = x[a + h];
            x[a] = __fadd_rn(u, w);
            x[a + h] = __fsub_rn(u, w);
        }
    }
    __syncwarp();
}

// x as an f16 at p, which may be odd (q3's scale at head_dim 8). Aligned: one 16-bit store. (Two byte
// stores of the half's register lost the low byte on sm_90: st.global.u8 of a .b16 register wrote 0.)
__device__ __forceinline__ void put_half(uint8_t* p, float x) {
    const __half h = __float2half_rn(x);
    if ((reinterpret_cast<uintptr_t>(p) & 1) == 0) {
        *reinterpret_cast<__half*>(p) = h;
        return;
    }
    const uint32_t bits = __half_as_ushort(h);  // each byte stored from a 32-bit register
    asm volatile("st.u8 [%0], %1;" ::"l"(p), "r"(bits & 0xffu) : "memory");
    asm volatile("st.u8 [%0], %1;" ::"l"(p + 1), "r"(bits >> 8) : "memory");
}

// The q3 code of t = y/σ: the nearest Lloyd–Max level, ties to the upper one (reference q3_code).
__device__ __forceinline__ int q3_code(float t) {
    int c = 0;
#pragma unroll
    for (int i = 0; i < 7; ++i)
        if (t >= 0.5f * (kQ3Level[i] + kQ3Level[i + 1])) c = i + 1;
    return c;
}

// One head of head_dim floats stored as T at dst, by one warp: reference store_head, bit for bit.
template <KvType T>
__device__ void store_head_warp(const float* x, int64_t hd, uint8_t* dst, int lane) {
    constexpr int64_t G = kernels::kKvGroup;
    // A scale past f16's range saturates (reference scale_f16). Local: a namespace-scope constexpr
    // float read 0 in this device code.
    constexpr float kMaxHalf = 65504.0f;
    if constexpr (T == KvType::kF32) {
        for (int64_t e = lane; e < hd; e += 32) reinterpret_cast<float*>(dst)[e] = x[e];
    } else if constexpr (T == KvType::kF16) {
        for (int64_t e = lane; e < hd; e += 32) reinterpret_cast<__half*>(dst)[e] = __float2half_rn(x[e]);
    } else if constexpr (T == KvType::kQ8) {
        for (int64_t g = 0; g < hd / G; ++g) {
            const float xv = x[g * G + lane];
            const float amax = warp_max(fabsf(xv));
            const float d = __fdiv_rn(amax, 127.0f);
            const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
            const float c = fminf(fmaxf(rintf(__fmul_rn(xv, id)), -127.0f), 127.0f);
            dst[g * G + lane] = static_cast<uint8_t>(static_cast<int8_t>(c));
            if (lane == 0) put_half(dst + hd + 2 * g, fminf(d, kMaxHalf));
        }
    } else if constexpr (T == KvType::kQ4) {
        for (int64_t g = 0; g < hd / G; ++g) {
            const float xv = x[g * G + lane];
            // The element of largest magnitude, the first of equals (0 when all are zero).
            float best = fabsf(xv);
            int at = lane;
            for (int o = 16; o > 0; o >>= 1) {
                const float ob = __shfl_xor_sync(0xffffffffu, best, o);
                const int oa = __shfl_xor_sync(0xffffffffu, at, o);
                if (ob > best || (ob == best && oa < at)) {
                    best = ob;
                    at = oa;
                }
            }
            const float m_at = __shfl_sync(0xffffffffu, xv, at);
            const float m = best > 0.0f ? m_at : 0.0f;
            const float d = __fdiv_rn(m, -8.0f);
            const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
            const float c = fminf(fmaxf(__fadd_rn(rintf(__fmul_rn(xv, id)), 8.0f), 0.0f), 15.0f);
            const auto code = static_cast<uint32_t>(c);
            const uint32_t high = __shfl_down_sync(0xffffffffu, code, 16);
            if (lane < 16) dst[g * G / 2 + lane] = static_cast<uint8_t>(code | (high << 4));
            if (lane == 0) put_half(dst + hd / 2 + 2 * g, fminf(fmaxf(d, -kMaxHalf), kMaxHalf));
        }
    } else {
        __shared__ float y[kernels::kKvMaxRotatedDim];
        __shared__ uint8_t codes[kernels::kKvMaxRotatedDim];
        for (int64_t e = lane; e < hd; e += 32) y[e] = __fmul_rn(x[e], kernels::kv_rotation_sign(e));
        hadamard_warp(y, hd, lane);
        const float norm = __fdiv_rn(1.0f, __fsqrt_rn(static_cast<float>(hd)));
        for (int64_t e = lane; e < hd; e += 32) y[e] = __fmul_rn(y[e], norm);
        __syncwarp();
        float sigma = 0.0f;
        if (lane == 0) {  // the reference's sum, in its order
            double sum_sq = 0.0;
            for (int64_t e = 0; e < hd; ++e) {
                const double ye = y[e];
                sum_sq = __dadd_rn(sum_sq, __dmul_rn(ye, ye));
            }
            sigma = static_cast<float>(__dsqrt_rn(__ddiv_rn(sum_sq, static_cast<double>(hd))));
        }
        sigma = __shfl_sync(0xffffffffu, sigma, 0);
        const float inv_sigma = sigma > 0.0f ? __fdiv_rn(1.0f, sigma) : 0.0f;
        for (int64_t e = lane; e < hd; e += 32)
            codes[e] = static_cast<uint8_t>(q3_code(__fmul_rn(y[e], inv_sigma)));
        __syncwarp();
        // Codes 8 to 3 bytes: little-endian 24 bits, code j at bit 3j.
        for (int64_t g = lane; g < hd / 8; g += 32) {
            uint32_t w = 0;
            for (int j = 0; j < 8; ++j) w |= static_cast<uint32_t>(codes[g * 8 + j]) << (3 * j);
            dst[3 * g] = static_cast<uint8_t>(w & 0xff);
            dst[3 * g + 1] = static_cast<uint8_t>((w >> 8) & 0xff);
            dst[3 * g + 2] = static_cast<uint8_t>(w >> 16);
        }
        if (lane == 0) {
            double yl = 0.0, ll = 0.0;
            for (int64_t e = 0; e < hd; ++e) {
                const double level = kQ3Level[codes[e]];
                yl = __dadd_rn(yl, __dmul_rn(static_cast<double>(y[e]), level));
                ll = __dadd_rn(ll, __dmul_rn(level, level));
            }
            const float s = sigma > 0.0f ? static_cast<float>(__ddiv_rn(yl, ll)) : 0.0f;
            put_half(dst + hd * 3 / 8, fminf(s, kMaxHalf));
        }
        __syncwarp();
    }
}

// Block (token t, kv head h, K or V): rows *pos0 + offset + t of the cache and, with a window, of
// the f16 ring (tagged with the position by K's block of head 0).
template <KvType T>
__global__ void kv_store_kernel(const float* k, const float* v, int64_t n_kv_heads, int64_t hd,
                                const int32_t* pos0, int64_t offset, KvView c) {
    const int64_t t = blockIdx.x, h = blockIdx.y;
    const bool is_v = blockIdx.z == 1;
    const int lane = static_cast<int>(threadIdx.x);
    const float* x = (is_v ? v : k) + (t * n_kv_heads + h) * hd;
    const int64_t pos = *pos0 + offset + t;
    store_head_warp<T>(x, hd, (is_v ? c.v : c.k) + pos * c.row_bytes + h * c.head_bytes, lane);
    if (c.window > 0) {
        const int64_t slot = pos % c.slots;
        auto* r = reinterpret_cast<__half*>((is_v ? c.ring_v : c.ring_k) + slot * c.ring_row) + h * hd;
        for (int64_t e = lane; e < hd; e += 32) r[e] = __float2half_rn(x[e]);
        if (!is_v && h == 0 && lane == 0) c.tags[slot] = pos;
    }
}

// ---- attention --------------------------------------------------------------------------------

// One warp's online softmax over the keys it has seen, for G query heads of one KV group at once:
// each key and value is loaded and decoded once for all G (GQA: the cache is read once per KV head,
// not once per query head). The queries as the cache's keys are (rotated for q3); for q3 with a
// ring also the plain queries and a second accumulator for the ring's plain-domain values.
template <KvType T, bool kRing, int G>
struct GroupSoftmax {
    static constexpr bool kRotated = T == KvType::kQ3;
    static constexpr bool kTwo = kRotated && kRing;
    static constexpr int GP = kTwo ? G : 1;
    float q[G][kMaxHeadDimPerLane], qp[GP][kMaxHeadDimPerLane];
    float acc[G][kMaxHeadDimPerLane], accp[GP][kMaxHeadDimPerLane];
    float m[G], l[G];

    // Key s for a query at position P.
    __device__ __forceinline__ void key(const KvView& c, int64_t kvh, int64_t hd, int64_t P, int64_t s,
                                        float scale, int lane) {
        const uint8_t* kr = nullptr;
        const uint8_t* vr = nullptr;
        if constexpr (kRing) {
            const int64_t slot = s % c.slots;
            if (P - s < c.window && c.tags[slot] == s) {
                kr = c.ring_k + slot * c.ring_row + kvh * hd * 2;
                vr = c.ring_v + slot * c.ring_row + kvh * hd * 2;
            }
        }
        const bool ring = kr != nullptr;
        float x[kMaxHeadDimPerLane];
        const uint8_t* kh = c.k + s * c.row_bytes + kvh * c.head_bytes;
#pragma unroll
        for (int j = 0; j < kMaxHeadDimPerLane; ++j) {
            const int64_t e = j * 32 + lane;
            x[j] = e >= hd ? 0.0f : ring ? half_at(kr, e) : kv_elem<T>(kh, hd, e);
        }
        float p[G], corr[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float dot = 0.0f;
#pragma unroll
            for (int j = 0; j < kMaxHeadDimPerLane; ++j) {
                if constexpr (kTwo) {
                    dot += (ring ? qp[g][j] : q[g][j]) * x[j];
                } else {
                    dot += q[g][j] * x[j];
                }
            }
            p[g] = dot;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
#pragma unroll
            for (int g = 0; g < G; ++g) p[g] += __shfl_xor_sync(0xffffffffu, p[g], o);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float score = p[g] * scale;
            const float m_new = fmaxf(m[g], score);
            corr[g] = expf(m[g] - m_new);  // 0 on the first key (m = -inf)
            p[g] = expf(score - m_new);
            l[g] = l[g] * corr[g] + p[g];
            m[g] = m_new;
        }
        const uint8_t* vh = c.v + s * c.row_bytes + kvh * c.head_bytes;
#pragma unroll
        for (int j = 0; j < kMaxHeadDimPerLane; ++j) {
            const int64_t e = j * 32 + lane;
            x[j] = e >= hd ? 0.0f : ring ? half_at(vr, e) : kv_elem<T>(vh, hd, e);
        }
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
            for (int j = 0; j < kMaxHeadDimPerLane; ++j) {
                if constexpr (kTwo) {
                    if (ring) {
                        accp[g][j] = accp[g][j] * corr[g] + p[g] * x[j];
                        acc[g][j] *= corr[g];
                    } else {
                        acc[g][j] = acc[g][j] * corr[g] + p[g] * x[j];
                        accp[g][j] *= corr[g];
                    }
                } else {
                    acc[g][j] = acc[g][j] * corr[g] + p[g] * x[j];
                }
            }
    }
};

// Shared memory of a block: the query rotation's scratch, then the warps' partial sums.
template <bool kTwo, int G>
struct AttnShared {
    float sacc[kAttnWarps][G][kMaxHeadDim];
    float saccp[kTwo ? kAttnWarps : 1][kTwo ? G : 1][kTwo ? kMaxHeadDim : 1];
    float sm[kAttnWarps][G], sl[kAttnWarps][G];
};

// Block over heads h0 .. h0 + G − 1 (one KV head's group) for the query at position P over keys
// [s0, s1): every warp's softmax, merged into sh.sacc[0][g] (plain domain, unnormalised) with the
// merged max and sum in m_all / l_all. qh: the query row of head h0.
template <KvType T, bool kRing, int G>
__device__ void attend_group(const float* qh, const KvView& c, int64_t kvh, int64_t hd, int64_t P, int64_t s0,
                             int64_t s1, float scale, AttnShared<GroupSoftmax<T, kRing, G>::kTwo, G>& sh,
                             float* m_all, float* l_all) {
    using W = GroupSoftmax<T, kRing, G>;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    W w;
    float* rq = &sh.sacc[0][0][0];  // scratch until the keys are done: G rows of kMaxHeadDim
    if constexpr (W::kRotated) {
        for (int64_t i = threadIdx.x; i < G * hd; i += blockDim.x)
            rq[(i / hd) * kMaxHeadDim + i % hd] = qh[i] * kernels::kv_rotation_sign(i % hd);
        hadamard_block_many(rq, hd, G, kMaxHeadDim);
    }
    const float norm = 1.0f / sqrtf(static_cast<float>(hd));
#pragma unroll
    for (int g = 0; g < G; ++g) {
        w.m[g] = -INFINITY;
        w.l[g] = 0.0f;
#pragma unroll
        for (int j = 0; j < kMaxHeadDimPerLane; ++j) {
            const int64_t e = j * 32 + lane;
            const float plain = e < hd ? qh[g * hd + e] : 0.0f;
            if constexpr (W::kRotated) {
                w.q[g][j] = e < hd ? rq[g * kMaxHeadDim + e] * norm : 0.0f;
            } else {
                w.q[g][j] = plain;
            }
            if constexpr (W::kTwo) {
                w.qp[g][j] = plain;
                w.accp[g][j] = 0.0f;
            }
            w.acc[g][j] = 0.0f;
        }
    }
    __syncthreads();  // rq is read before the warps overwrite it below
    for (int64_t s = s0 + warp; s < s1; s += kAttnWarps) w.key(c, kvh, hd, P, s, scale, lane);
        // Merge the warps.
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (lane == 0) {
            sh.sm[warp][g] = w.m[g];
            sh.sl[warp][g] = w.l[g];
        }
#pragma unroll
        for (int j = 0; j < kMaxHeadDimPerLane; ++j)
            if (j * 32 + lane < hd) {
                sh.sacc[warp][g][j * 32 + lane] = w.acc[g][j];
                if constexpr (W::kTwo) sh.saccp[warp][g][j * 32 + lane] = w.accp[g][j];
            }
    }
    __syncthreads();
    for (int g = 0; g < G; ++g) {
        float mx = -INFINITY;
        for (int i = 0; i < kAttnWarps; ++i) mx = fmaxf(mx, sh.sm[i][g]);
        float sum = 0.0f;
        for (int i = 0; i < kAttnWarps; ++i)
            sum += sh.sm[i][g] == -INFINITY ? 0.0f : sh.sl[i][g] * expf(sh.sm[i][g] - mx);
        m_all[g] = mx;
        l_all[g] = sum;
    }
    // Each (head, dim) is read across the warps and written to warp 0's row by one thread.
    for (int64_t i = threadIdx.x; i < G * hd; i += blockDim.x) {
        const int g = static_cast<int>(i / hd);
        const int64_t d = i % hd;
        float o = 0.0f, op = 0.0f;
        for (int k = 0; k < kAttnWarps; ++k) {
            if (sh.sm[k][g] == -INFINITY) continue;
            const float f = expf(sh.sm[k][g] - m_all[g]);
            o += sh.sacc[k][g][d] * f;
            if constexpr (W::kTwo) op += sh.saccp[k][g][d] * f;
        }
        sh.sacc[0][g][d] = o;
        if constexpr (W::kTwo) sh.saccp[0][g][d] = op;
    }
    if constexpr (W::kRotated) {  // back from the rotated domain: D·H·o/√hd (plus the ring's sum)
        hadamard_block_many(&sh.sacc[0][0][0], hd, G, kMaxHeadDim);
        for (int64_t i = threadIdx.x; i < G * hd; i += blockDim.x) {
            const int64_t g = i / hd, d = i % hd;
            float val = sh.sacc[0][g][d] * norm * kernels::kv_rotation_sign(d);
            if constexpr (W::kTwo) val += sh.saccp[0][g][d];
            sh.sacc[0][g][d] = val;
        }
    }
    __syncthreads();
}

// Heads per block for a GQA group of `rep` query heads: 8 (4 for q3 with a ring: twice the state),
// or the largest power of two dividing rep below that.
constexpr int group_heads(int64_t rep, bool two) {
    const int most = two ? 4 : 8;
    for (int g = most; g > 1; g /= 2)
        if (rep % g == 0) return g;
    return 1;
}

// Block (query t, KV head, head group): the whole softmax over keys [0, P], P = *pos0 + offset + t.
template <KvType T, bool kRing, int G>
__global__ void __launch_bounds__(32 * kAttnWarps)
    attention_kernel(const float* __restrict__ q, KvView c, const int32_t* pos0, int64_t offset,
                     int64_t n_heads, int64_t n_kv_heads, int64_t hd, float scale, const float* gate,
                     float* out) {
    const int64_t rep = n_heads / n_kv_heads, groups = rep / G;
    const int64_t per_query = n_kv_heads * groups;
    const int64_t t = blockIdx.x / per_query, kvh = (blockIdx.x % per_query) / groups;
    const int64_t h0 = kvh * rep + (blockIdx.x % groups) * G;
    const int64_t P = *pos0 + offset + t;
    __shared__ AttnShared<GroupSoftmax<T, kRing, G>::kTwo, G> sh;
    float m_all[G], l_all[G];
    attend_group<T, kRing, G>(q + (t * n_heads + h0) * hd, c, kvh, hd, P, first_key(c.sliding, P), P + 1,
                              scale, sh, m_all, l_all);
    for (int64_t i = threadIdx.x; i < G * hd; i += blockDim.x) {
        const int64_t g = i / hd, d = i % hd, at = (t * n_heads + h0 + g) * hd + d;
        float val = 0.0f;
#pragma unroll
        for (int k = 0; k < G; ++k)
            if (k == g) val = softmax_out<false>(sh.sacc[0][k][d], m_all[k], l_all[k], c.sinks, h0 + k);
        out[at] = gate != nullptr ? val * sigmoid_f(gate[at]) : val;  // mul_sigmoid's product
    }
}

// Decode split over the keys (flash-decoding): block (KV head · head group, split) runs the softmax
// over keys [split·kSplitKeys, …) and writes each head's partial (o in the plain domain,
// unnormalised; max; sum); attention_combine_kernel merges the splits. The grid covers the whole
// context capacity and blocks past the current length exit at once, so a captured graph stays
// valid as it grows.
template <KvType T, bool kRing, int G>
__global__ void __launch_bounds__(32 * kAttnWarps)
    attention_split_kernel(const float* __restrict__ q, KvView c, const int32_t* pos0, int64_t offset,
                           int64_t n_heads, int64_t n_kv_heads, int64_t hd, float scale, float* part,
                           int64_t max_splits) {
    const int64_t rep = n_heads / n_kv_heads, groups = rep / G;
    const int64_t kvh = blockIdx.x / groups, h0 = kvh * rep + (blockIdx.x % groups) * G;
    const int64_t split = blockIdx.y;
    const int64_t P = *pos0 + offset;
    const int64_t s0 = split * kSplitKeys, lo = first_key(c.sliding, P);
    if (s0 > P || s0 + kSplitKeys <= lo) return;  // past the last key, or before the sliding window
    __shared__ AttnShared<GroupSoftmax<T, kRing, G>::kTwo, G> sh;
    float m_all[G], l_all[G];
    attend_group<T, kRing, G>(q + h0 * hd, c, kvh, hd, P, max(s0, lo), min(P + 1, s0 + kSplitKeys), scale, sh,
                              m_all, l_all);
#pragma unroll
    for (int g = 0; g < G; ++g) {
        float* ph = part + ((h0 + g) * max_splits + split) * (hd + 2);
        if (threadIdx.x == 0) {
            ph[hd] = m_all[g];
            ph[hd + 1] = l_all[g];
        }
        for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) ph[d] = sh.sacc[0][g][d];
    }
}

// The splits merged are those with keys: from the one holding the query's first key (its sliding
// window's) to the one holding its own.
__global__ void attention_combine_kernel(const float* part, const int32_t* pos0, int64_t offset, int64_t hd,
                                         int64_t max_splits, int64_t sliding, const float* sinks,
                                         const float* gate, float* out) {
    allow_dependents();  // the next decode product may start loading its weights
    const int64_t h = blockIdx.x;
    const int64_t P = *pos0 + offset;
    const int64_t first = first_key(sliding, P) / kSplitKeys, n_splits = (P + kSplitKeys) / kSplitKeys;
    const float* ph = part + h * max_splits * (hd + 2);
    float m_all = -INFINITY;
    for (int64_t sp = first; sp < n_splits; ++sp) m_all = fmaxf(m_all, ph[sp * (hd + 2) + hd]);
    float l_all = 0.0f;
    for (int64_t sp = first; sp < n_splits; ++sp)
        l_all += ph[sp * (hd + 2) + hd + 1] * expf(ph[sp * (hd + 2) + hd] - m_all);
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int64_t sp = first; sp < n_splits; ++sp)
            o += ph[sp * (hd + 2) + d] * expf(ph[sp * (hd + 2) + hd] - m_all);
        const float val = softmax_out<false>(o, m_all, l_all, sinks, h);
        out[h * hd + d] = gate != nullptr ? val * sigmoid_f(gate[h * hd + d]) : val;
    }
}

template <KvType T>
void store_as(const float* k, const float* v, int64_t n, int64_t offset, const int32_t* pos0, int64_t nkv,
              int64_t hd, const KvView& c, cudaStream_t s) {
    kv_store_kernel<T><<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(nkv), 2), 32, 0, s>>>(
        k, v, nkv, hd, pos0, offset, c);
}

template <KvType T, bool kRing, int G>
void attend_as(const float* q, const KvView& c, int64_t n_q, int64_t offset, const int32_t* pos0, int64_t nh,
               int64_t nkv, int64_t hd, float scale, const float* gate, float* out, float* split_scratch,
               int64_t max_keys, cudaStream_t s) {
    const int64_t blocks = nh / G;  // (KV head, head group) pairs
    if (n_q == 1 && split_scratch != nullptr) {
        const int64_t max_splits = (max_keys + kSplitKeys - 1) / kSplitKeys;
        attention_split_kernel<T, kRing, G>
            <<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(max_splits)), 32 * kAttnWarps, 0,
               s>>>(q, c, pos0, offset, nh, nkv, hd, scale, split_scratch, max_splits);
        attention_combine_kernel<<<static_cast<unsigned>(nh), 128, 0, s>>>(
            split_scratch, pos0, offset, hd, max_splits, c.sliding, c.sinks, gate, out);
        return;
    }
    attention_kernel<T, kRing, G><<<static_cast<unsigned>(n_q * blocks), 32 * kAttnWarps, 0, s>>>(
        q, c, pos0, offset, nh, nkv, hd, scale, gate, out);
}

template <KvType T, bool kRing>
void attend_grouped(const float* q, const KvView& c, int64_t n_q, int64_t offset, const int32_t* pos0,
                    int64_t nh, int64_t nkv, int64_t hd, float scale, const float* gate, float* out,
                    float* split_scratch, int64_t max_keys, cudaStream_t s) {
    switch (group_heads(nh / nkv, T == KvType::kQ3 && kRing)) {
        case 8:
            if constexpr (!(T == KvType::kQ3 && kRing))
                attend_as<T, kRing, 8>(q, c, n_q, offset, pos0, nh, nkv, hd, scale, gate, out, split_scratch,
                                       max_keys, s);
            return;
        case 4:
            attend_as<T, kRing, 4>(q, c, n_q, offset, pos0, nh, nkv, hd, scale, gate, out, split_scratch,
                                   max_keys, s);
            return;
        case 2:
            attend_as<T, kRing, 2>(q, c, n_q, offset, pos0, nh, nkv, hd, scale, gate, out, split_scratch,
                                   max_keys, s);
            return;
        default:
            attend_as<T, kRing, 1>(q, c, n_q, offset, pos0, nh, nkv, hd, scale, gate, out, split_scratch,
                                   max_keys, s);
            return;
    }
}

template <KvType T>
void attend_with_ring(bool ring, const float* q, const KvView& c, int64_t n_q, int64_t offset,
                      const int32_t* pos0, int64_t nh, int64_t nkv, int64_t hd, float scale,
                      const float* gate, float* out, float* split_scratch, int64_t max_keys, cudaStream_t s) {
    if (ring)
        attend_grouped<T, true>(q, c, n_q, offset, pos0, nh, nkv, hd, scale, gate, out, split_scratch,
                                max_keys, s);
    else
        attend_grouped<T, false>(q, c, n_q, offset, pos0, nh, nkv, hd, scale, gate, out, split_scratch,
                                 max_keys, s);
}

}  // namespace

void kv_store(const float* k, const float* v, int64_t n, int64_t offset, const int32_t* pos0_dev,
              int64_t n_kv_heads, int64_t head_dim, const KvCache& cache, cudaStream_t s) {
    if (n == 0) return;
    const KvView c = kv_view(cache, n_kv_heads, head_dim);
    switch (cache.type) {
        case KvType::kF32:
            store_as<KvType::kF32>(k, v, n, offset, pos0_dev, n_kv_heads, head_dim, c, s);
            return;
        case KvType::kF16:
            store_as<KvType::kF16>(k, v, n, offset, pos0_dev, n_kv_heads, head_dim, c, s);
            return;
        case KvType::kQ8:
            store_as<KvType::kQ8>(k, v, n, offset, pos0_dev, n_kv_heads, head_dim, c, s);
            return;
        case KvType::kQ4:
            store_as<KvType::kQ4>(k, v, n, offset, pos0_dev, n_kv_heads, head_dim, c, s);
            return;
        case KvType::kQ3:
            store_as<KvType::kQ3>(k, v, n, offset, pos0_dev, n_kv_heads, head_dim, c, s);
            return;
    }
}

void attention_kv(const float* q, const KvCache& cache, int64_t n_q, int64_t offset, const int32_t* pos0_dev,
                  int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, const float* gate,
                  float* out, float* split_scratch, int64_t max_keys, cudaStream_t s) {
    if (n_q == 0) return;
    // Steps of a few queries with split scratch, at the head widths it has instances for.
    if (decode_attention_kv(q, cache, n_q, offset, pos0_dev, n_heads, n_kv_heads, head_dim, scale, gate, out,
                            split_scratch, max_keys, s))
        return;
    const KvView c = kv_view(cache, n_kv_heads, head_dim);
    const bool ring = c.window > 0;
    switch (cache.type) {
        case KvType::kF32:
            attend_grouped<KvType::kF32, false>(q, c, n_q, offset, pos0_dev, n_heads, n_kv_heads, head_dim,
                                                scale, gate, out, split_scratch, max_keys, s);
            return;
        case KvType::kF16:
            attend_grouped<KvType::kF16, false>(q, c, n_q, offset, pos0_dev, n_heads, n_kv_heads, head_dim,
                                                scale, gate, out, split_scratch, max_keys, s);
            return;
        case KvType::kQ8:
            attend_with_ring<KvType::kQ8>(ring, q, c, n_q, offset, pos0_dev, n_heads, n_kv_heads, head_dim,
                                          scale, gate, out, split_scratch, max_keys, s);
            return;
        case KvType::kQ4:
            attend_with_ring<KvType::kQ4>(ring, q, c, n_q, offset, pos0_dev, n_heads, n_kv_heads, head_dim,
                                          scale, gate, out, split_scratch, max_keys, s);
            return;
        case KvType::kQ3:
            attend_with_ring<KvType::kQ3>(ring, q, c, n_q, offset, pos0_dev, n_heads, n_kv_heads, head_dim,
                                          scale, gate, out, split_scratch, max_keys, s);
            return;
    }
}

void attention(const float* q, const float* k, const float* v, int64_t n_q, const int32_t* pos0_dev,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, const float* gate,
               float* out, float* split_scratch, int64_t max_keys, cudaStream_t s) {
    KvCache cache;
    cache.k = const_cast<float*>(k);
    cache.v = const_cast<float*>(v);
    attention_kv(q, cache, n_q, 0, pos0_dev, n_heads, n_kv_heads, head_dim, scale, gate, out, split_scratch,
                 max_keys, s);
}

int64_t attention_split_scratch_floats(int64_t n_heads, int64_t head_dim, int64_t max_keys) {
    return n_heads * ((max_keys + kSplitKeys - 1) / kSplitKeys) * (head_dim + 2);
}

}  // namespace sluice::cuda
