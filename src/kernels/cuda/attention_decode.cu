// Attention for steps of a few queries over a long cache — decode, and the verification steps of
// speculative decoding — straight from the KV cache as stored (flash-decoding), in f32.
//
// The keys of each query are split over `splits` blocks (a fixed grid, so a captured graph stays
// valid as the context grows: each block derives its range from the position it reads on the
// device, and blocks past the last key exit at once). A block is one KV head's group of G query
// heads (GQA: every key and value is read once for the G heads) and kDecWarps warps; each warp
// walks tiles of 32 keys:
//   scores   lane i takes key i of the tile and computes its G dot products over the whole head,
//            decoding the stored row itself (no cross-lane reduction per key); the queries sit in
//            shared memory, pre-scaled by scale·log2 e (the softmax runs in base 2);
//   softmax  one max and one correction per tile for the warp (not one per key);
//   values   lane i takes dims [i·D/32, (i+1)·D/32) and sums the tile's value rows, each row one
//            coalesced read, weighted by the tile's p (a broadcast read from shared memory).
// The warps merge in a fixed order and each block writes its partial (O unnormalised, max, sum);
// decode_combine_kernel merges the splits. Nothing depends on timing: the result is the same bits
// on every run.
//
// q3 keys are rotated (y = H·D·x/√D, kernels/kv_format.h): the queries are rotated on load, and the
// weighted sum rotated back once per block. With a --kv-window, a key inside the query's window
// whose ring row still holds it is read from the f16 ring (kernels::KvRing); only tiles reaching
// into the window check tags. For q3 the ring's rows are in the plain domain: they meet the plain
// queries and sum into a second accumulator, added after the rotation back.
//
// With a window the keys are two launches into one set of partials: the keys older than every
// query's window straight from the cache (no tag to check; for q3 one accumulator, so 8 heads per
// block and each key decoded once per KV head) and the window's at most W keys through the ring
// (for q3 4 heads per block: two accumulators). The combine merges both launches' partials.
//
// gpt-oss's sliding window (KvCache::sliding) narrows every launch's key range to the query's window
// (key_range: the splits spread over the window's keys only), and its sinks join the combine's max and
// denominator.
//
// Measured against attention_kv's first split kernel (one key per warp step, 64 keys per block, a
// serial combine over up to 2048 partials): bench/results/kv/ (session 19).
#include <algorithm>
#include <cmath>

#include "kernels/cuda/attention_decode.h"
#include "kernels/cuda/device/kv_view.cuh"

namespace sluice::cuda {
namespace {

using kernels::KvType;

constexpr int kDecWarps = 4;
constexpr int kTile = 32;                      // keys per warp tile: one per lane
constexpr int kRoundKeys = kDecWarps * kTile;  // keys per block per round of its warps
constexpr int kMaxSplits = 256;                // blocks per (query, head group)
constexpr int kMaxQueries = 16;                // a step of more queries takes the prefill kernels
constexpr int kScratchSplitKeys = 64;          // attention_split_scratch_floats' keys per partial

// The keys of split `split` for a query with `keys` keys: chunks of whole rounds, as many as the
// splits need; the same arithmetic in the attention and the combine kernels.
__device__ __forceinline__ int64_t split_chunk(int64_t keys, int splits) {
    const int64_t per = (keys + splits - 1) / splits;
    return (per + kRoundKeys - 1) / kRoundKeys * kRoundKeys;
}

// Which of a query's keys a launch covers: all of them, those older than its window (kOld), or
// those inside it (kWindow).
enum class Keys { kAll, kOld, kWindow };

// The keys [lo, hi) of `which` for the query at position P with a ring window of `window` keys,
// from the first key its sliding window (KvCache::sliding; 0: none) lets it see.
__device__ __forceinline__ void key_range(Keys which, int64_t P, int64_t window, int64_t sliding, int64_t* lo,
                                          int64_t* hi) {
    const int64_t edge = P + 1 - window > 0 ? P + 1 - window : 0;  // the window's first key
    const int64_t seen = first_key(sliding, P);
    *lo = which == Keys::kWindow ? (edge > seen ? edge : seen) : seen;
    *hi = which == Keys::kOld ? edge : P + 1;
}

// The splits of `which` that hold keys for the query at P.
__device__ __forceinline__ int splits_with_keys(Keys which, int64_t P, int64_t window, int64_t sliding,
                                                int splits) {
    int64_t lo = 0, hi = 0;
    key_range(which, P, window, sliding, &lo, &hi);
    if (hi <= lo) return 0;
    const int64_t chunk = split_chunk(hi - lo, splits);
    return static_cast<int>((hi - lo + chunk - 1) / chunk);
}

// Where a launch's partials go: per (query · nh + head) row, `total` partials of D + 2 floats, this
// launch's `splits` from index `first`.
struct PartLayout {
    Keys which;
    int first, splits, total;
};

// Bytes a head of D elements of type T is aligned to in the cache (every head starts at a
// multiple of its size from a 256-byte aligned base): the lowest set bit of its size, at most 16.
template <KvType T, int D>
constexpr int head_align() {
    const int64_t bytes = T == KvType::kF32   ? 4 * D
                          : T == KvType::kF16 ? 2 * D
                          : T == KvType::kQ8  ? D + D / 16
                          : T == KvType::kQ4  ? D / 2 + D / 16
                                              : 3 * D / 8 + 2;
    const int64_t low = bytes & -bytes;
    return low > 16 ? 16 : static_cast<int>(low);
}

// N bytes (1, 2, 4 or 8) at p, little-endian, p aligned to A bytes: as few loads as that allows.
template <int N, int A>
__device__ __forceinline__ uint64_t load_le(const uint8_t* p) {
    if constexpr (N == 1) {
        return *p;
    } else if constexpr (A >= N) {
        if constexpr (N == 2) return *reinterpret_cast<const uint16_t*>(p);
        if constexpr (N == 4) return *reinterpret_cast<const uint32_t*>(p);
        return *reinterpret_cast<const uint64_t*>(p);
    } else {
        constexpr int H = N / 2;
        return load_le<H, A>(p) | (load_le<H, A>(p + H) << (8 * H));
    }
}

// Elements e0 .. e0 + E − 1 of a stored head of D elements as floats: kernels::reference's
// load_head (q3: the rotated ŷ = s·L[c]; `level` a copy of the levels in shared memory). E is 1, 2,
// 4 or 8 and e0 a multiple of E, so the elements lie in one group of 32 (q8, q4).
template <KvType T, int D, int E>
__device__ __forceinline__ void load_elems(const uint8_t* head, int e0, const float* level, float (&x)[E]) {
    constexpr int A = head_align<T, D>();
    if constexpr (T == KvType::kF32) {
        const float* p = reinterpret_cast<const float*>(head) + e0;
        if constexpr (E >= 4) {
#pragma unroll
            for (int i = 0; i < E; i += 4) {
                const float4 f = *reinterpret_cast<const float4*>(p + i);
                x[i] = f.x;
                x[i + 1] = f.y;
                x[i + 2] = f.z;
                x[i + 3] = f.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < E; ++i) x[i] = p[i];
        }
    } else if constexpr (T == KvType::kF16) {
        if constexpr (E == 8) {
            const uint4 w = *reinterpret_cast<const uint4*>(head + 2 * e0);
            const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
                x[2 * i] = f.x;
                x[2 * i + 1] = f.y;
            }
        } else {
            const uint64_t w = load_le<2 * E, (A < 2 * E ? A : 2 * E)>(head + 2 * e0);
#pragma unroll
            for (int i = 0; i < E; ++i)
                x[i] = f16_bits_to_f32(static_cast<uint32_t>((w >> (16 * i)) & 0xffffu));
        }
    } else if constexpr (T == KvType::kQ8) {
        const float d = half_at(head + D, e0 / kernels::kKvGroup);
        const uint64_t w = load_le<E, (A < E ? A : E)>(head + e0);
#pragma unroll
        for (int i = 0; i < E; ++i)
            x[i] = d * static_cast<float>(static_cast<int8_t>((w >> (8 * i)) & 0xffu));
    } else if constexpr (T == KvType::kQ4) {
        // Group g's byte j: element 32g + j (low nibble), 32g + 16 + j (high nibble).
        const int g = e0 / kernels::kKvGroup, j0 = e0 % kernels::kKvGroup;
        const int nibble = j0 < kernels::kKvGroup / 2 ? 0 : 4;
        const float d = half_at(head + D / 2, g);
        constexpr int N = E > 1 ? E : 1;
        const uint64_t w =
            load_le<N, (A < N ? A : N)>(head + g * kernels::kKvGroup / 2 + j0 % (kernels::kKvGroup / 2));
#pragma unroll
        for (int i = 0; i < E; ++i)
            x[i] = d * static_cast<float>(static_cast<int>((w >> (8 * i + nibble)) & 15u) - 8);
    } else {
        // Codes 8 to 3 bytes, code j at bit 3j: E codes from bit 3·e0 (E = 8: three whole bytes;
        // fewer: within two bytes, the second at most the scale's first).
        const int bit = 3 * e0;
        const uint8_t* p = head + bit / 8;
        const uint32_t word =
            E == 8 ? (p[0] | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16))
                   : ((p[0] | (static_cast<uint32_t>(p[1]) << 8)) >> (bit % 8));
        const float s = q3_scale(head, D);
#pragma unroll
        for (int i = 0; i < E; ++i) x[i] = s * level[(word >> (3 * i)) & 7u];
    }
}

// Σ over the head of q[g]·k for G query rows (shared memory, [G][D]) and the stored key at `head`.
template <KvType T, int D, int G>
__device__ __forceinline__ void dot_key(const uint8_t* head, const float (*qs)[D], const float* level,
                                        float (&sc)[G]) {
#pragma unroll 4
    for (int e0 = 0; e0 < D; e0 += 8) {
        float x[8];
        load_elems<T, D, 8>(head, e0, level, x);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float4 a = *reinterpret_cast<const float4*>(&qs[g][e0]);
            const float4 b = *reinterpret_cast<const float4*>(&qs[g][e0 + 4]);
            sc[g] += a.x * x[0] + a.y * x[1] + a.z * x[2] + a.w * x[3] + b.x * x[4] + b.y * x[5] +
                     b.z * x[6] + b.w * x[7];
        }
    }
}

template <KvType T, bool kRing, int G, int D>
struct DecodeShared {
    static constexpr bool kTwo = T == KvType::kQ3 && kRing;  // the ring's plain-domain queries and sums
    static constexpr int GP = kTwo ? G : 1, DP = kTwo ? D : 1;
    float q[G][D];  // as the cache's keys are (rotated for q3), times scale·log2 e
    float qp[GP][DP];
    float p[kDecWarps][kTile][G];  // a tile's softmax weights, key-major
    float acc[G][D];               // the warps' merged sum (rotated domain for q3)
    float accp[GP][DP];
    float m[kDecWarps][G], l[kDecWarps][G];
    float level[8];
};

// Grid: x KV head · head group, y the split, z the query (position *pos0 + offset + z). part: the
// partials (O unnormalised, max in base 2, sum) as `layout` places them. A launch of kOld keys reads
// the cache alone (kRing false); kRing reads the ring's rows for keys inside the window.
template <KvType T, bool kRing, int G, int D>
__global__ void __launch_bounds__(32 * kDecWarps)
    decode_attention_kernel(const float* __restrict__ q, KvView c, const int32_t* pos0, int64_t offset,
                            int64_t nh, int64_t nkv, float scale_log2, float* part, PartLayout layout) {
    using Sh = DecodeShared<T, kRing, G, D>;
    constexpr bool kRot = T == KvType::kQ3, kTwo = Sh::kTwo;
    constexpr int E = D / 32;  // value dims per lane
    const int64_t rep = nh / nkv, groups = rep / G;
    const int64_t kvh = blockIdx.x / groups, h0 = kvh * rep + (blockIdx.x % groups) * G;
    const int split = static_cast<int>(blockIdx.y);
    const int64_t t = blockIdx.z, P = *pos0 + offset + t;
    int64_t lo = 0, hi = 0;
    key_range(layout.which, P, c.window, c.sliding, &lo, &hi);
    if (hi <= lo) return;
    const int64_t chunk = split_chunk(hi - lo, layout.splits), k0 = lo + split * chunk;
    if (k0 >= hi) return;
    const int64_t k1 = min(hi, k0 + chunk);
    __shared__ Sh sh;
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;

    if (threadIdx.x < 8) sh.level[threadIdx.x] = kQ3Level[threadIdx.x];
    const float* qh = q + (t * nh + h0) * D;
    for (int i = static_cast<int>(threadIdx.x); i < G * D; i += blockDim.x) {
        const float x = qh[i];
        if constexpr (kRot) {
            sh.q[i / D][i % D] = x * kernels::kv_rotation_sign(i % D);
            if constexpr (kTwo) sh.qp[i / D][i % D] = x * scale_log2;
        } else {
            sh.q[i / D][i % D] = x * scale_log2;
        }
    }
    if constexpr (kRot) {
        hadamard_block_many(&sh.q[0][0], D, G, D);
        const float norm = scale_log2 / sqrtf(static_cast<float>(D));
        for (int i = static_cast<int>(threadIdx.x); i < G * D; i += blockDim.x) sh.q[i / D][i % D] *= norm;
    }
    __syncthreads();

    float m[G], l[G], acc[G][E], accp[Sh::GP][kTwo ? E : 1];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;  // this lane's keys' share, reduced at the end
#pragma unroll
        for (int j = 0; j < E; ++j) acc[g][j] = 0.0f;
    }
    if constexpr (kTwo)
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
            for (int j = 0; j < E; ++j) accp[g][j] = 0.0f;

    for (int64_t s0 = k0 + warp * kTile; s0 < k1; s0 += kRoundKeys) {
        const int64_t s = s0 + lane;
        const bool valid = s < k1;
        bool ring = false;
        const uint8_t* kr = nullptr;
        if constexpr (kRing) {
            // Keys older than the window never need their tag (P − s ≥ window for every lane).
            if (P - s0 - (kTile - 1) < c.window && valid && P - s < c.window) {
                const int64_t slot = s % c.slots;
                if (c.tags[slot] == s) {
                    ring = true;
                    kr = c.ring_k + slot * c.ring_row + kvh * D * 2;
                }
            }
        }
        float sc[G];
#pragma unroll
        for (int g = 0; g < G; ++g) sc[g] = 0.0f;
        if (valid) {
            if (ring) {
                if constexpr (kTwo) {
                    dot_key<KvType::kF16, D, G>(kr, sh.qp, sh.level, sc);
                } else {
                    dot_key<KvType::kF16, D, G>(kr, sh.q, sh.level, sc);
                }
            } else {
                dot_key<T, D, G>(c.k + s * c.row_bytes + kvh * c.head_bytes, sh.q, sh.level, sc);
            }
        }
        // One max and one correction per tile: lane 0's key is always valid, so the max is finite.
        float corr[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float x = valid ? sc[g] : -INFINITY;
            const float m_new = fmaxf(m[g], warp_max(x));
            corr[g] = exp2f(m[g] - m_new);  // 0 on the first tile (m = −∞)
            const float p = exp2f(x - m_new);
            l[g] = l[g] * corr[g] + p;
            m[g] = m_new;
            sh.p[warp][lane][g] = p;
        }
        const unsigned ring_mask = kRing ? __ballot_sync(0xffffffffu, ring) : 0u;
        __syncwarp();
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
            for (int j = 0; j < E; ++j) {
                acc[g][j] *= corr[g];
                if constexpr (kTwo) accp[g][j] *= corr[g];
            }
        const int n = static_cast<int>(k1 - s0 < kTile ? k1 - s0 : kTile);
#pragma unroll 4
        for (int k = 0; k < n; ++k) {
            const int64_t sk = s0 + k;
            float x[E], p[G];
#pragma unroll
            for (int g = 0; g < G; ++g) p[g] = sh.p[warp][k][g];
            if (kRing && ((ring_mask >> k) & 1u) != 0) {
                load_elems<KvType::kF16, D, E>(c.ring_v + (sk % c.slots) * c.ring_row + kvh * D * 2, lane * E,
                                               sh.level, x);
#pragma unroll
                for (int g = 0; g < G; ++g)
#pragma unroll
                    for (int j = 0; j < E; ++j) {
                        if constexpr (kTwo) {
                            accp[g][j] += p[g] * x[j];
                        } else {
                            acc[g][j] += p[g] * x[j];
                        }
                    }
            } else {
                load_elems<T, D, E>(c.v + sk * c.row_bytes + kvh * c.head_bytes, lane * E, sh.level, x);
#pragma unroll
                for (int g = 0; g < G; ++g)
#pragma unroll
                    for (int j = 0; j < E; ++j) acc[g][j] += p[g] * x[j];
            }
        }
        __syncwarp();  // the tile's p are read before the next tile's are written
    }

    // Merge the warps in a fixed order (the same bits on every run).
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const float lw = warp_sum(l[g]);
        if (lane == 0) {
            sh.m[warp][g] = m[g];
            sh.l[warp][g] = lw;
        }
    }
    for (int i = static_cast<int>(threadIdx.x); i < G * D; i += blockDim.x) {
        sh.acc[i / D][i % D] = 0.0f;
        if constexpr (kTwo) sh.accp[i / D][i % D] = 0.0f;
    }
    __syncthreads();
    float mx[G], f[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        mx[g] = -INFINITY;
        for (int w = 0; w < kDecWarps; ++w) mx[g] = fmaxf(mx[g], sh.m[w][g]);
        f[g] = m[g] == -INFINITY ? 0.0f : exp2f(m[g] - mx[g]);  // a warp with no keys adds nothing
    }
    for (int w = 0; w < kDecWarps; ++w) {
        if (warp == w)
#pragma unroll
            for (int g = 0; g < G; ++g)
#pragma unroll
                for (int j = 0; j < E; ++j) {
                    sh.acc[g][lane * E + j] += acc[g][j] * f[g];
                    if constexpr (kTwo) sh.accp[g][lane * E + j] += accp[g][j] * f[g];
                }
        __syncthreads();
    }
    if constexpr (kRot) {  // back from the rotated domain: D·H·o/√D, plus the ring's plain sum
        hadamard_block_many(&sh.acc[0][0], D, G, D);
        const float norm = 1.0f / sqrtf(static_cast<float>(D));
        for (int i = static_cast<int>(threadIdx.x); i < G * D; i += blockDim.x) {
            float val = sh.acc[i / D][i % D] * norm * kernels::kv_rotation_sign(i % D);
            if constexpr (kTwo) val += sh.accp[i / D][i % D];
            sh.acc[i / D][i % D] = val;
        }
        __syncthreads();
    }
    for (int i = static_cast<int>(threadIdx.x); i < G * (D + 2); i += blockDim.x) {
        const int g = i / (D + 2), d = i % (D + 2);
        float val = 0.0f;
        if (d < D) {
            val = sh.acc[g][d];
        } else {
            float mg = -INFINITY;
            for (int w = 0; w < kDecWarps; ++w) mg = fmaxf(mg, sh.m[w][g]);
            if (d == D) {
                val = mg;
            } else {
                for (int w = 0; w < kDecWarps; ++w)
                    if (sh.m[w][g] != -INFINITY) val += sh.l[w][g] * exp2f(sh.m[w][g] - mg);
            }
        }
        part[((t * nh + h0 + g) * layout.total + layout.first + split) * (D + 2) + d] = val;
    }
}

// Block per (query · nh + head) row: out = Σ O·2^(m − M) / Σ l·2^(m − M) over the splits that had
// keys — those of `a` and, when b.splits > 0, of `b` — gated by sigmoid(gate) when there is one. With
// sinks ([nh], unscaled logits) the head's sink joins the max M and adds 2^(sink·log2 e − M) to the
// denominator.
template <int D>
__global__ void __launch_bounds__(256)
    decode_combine_kernel(const float* part, const int32_t* pos0, int64_t offset, int64_t nh, int64_t window,
                          int64_t sliding, const float* sinks, PartLayout a, PartLayout b, const float* gate,
                          float* out) {
    allow_dependents();  // the next decode product may start loading its weights
    const int64_t row = blockIdx.x, t = row / nh, P = *pos0 + offset + t;
    const int na = splits_with_keys(a.which, P, window, sliding, a.splits);
    const int nb = b.splits > 0 ? splits_with_keys(b.which, P, window, sliding, b.splits) : 0;
    const int n = na + nb;  // partials with keys: a's first na, then b's first nb
    const float* ph = part + row * a.total * (D + 2);
    const auto at = [&](int i) { return ph + (i < na ? i : b.first + i - na) * (D + 2); };
    __shared__ float w[kMaxSplits];
    __shared__ float mx_all, inv_l;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    if (threadIdx.x < 32) {
        float mx = -INFINITY;
        for (int i = lane; i < n; i += 32) mx = fmaxf(mx, at(i)[D]);
        mx = warp_max(mx);
        if (sinks != nullptr) mx = fmaxf(mx, sinks[row % nh] * 1.4426950408889634f);
        if (lane == 0) mx_all = mx;
    }
    __syncthreads();
    for (int i = static_cast<int>(threadIdx.x); i < n; i += blockDim.x) w[i] = exp2f(at(i)[D] - mx_all);
    __syncthreads();
    if (threadIdx.x < 32) {
        float sum = 0.0f;
        for (int i = lane; i < n; i += 32) sum += at(i)[D + 1] * w[i];
        sum = warp_sum(sum);
        if (sinks != nullptr) sum += exp2f(sinks[row % nh] * 1.4426950408889634f - mx_all);
        if (lane == 0) inv_l = 1.0f / sum;
    }
    __syncthreads();
    for (int d = static_cast<int>(threadIdx.x); d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int i = 0; i < n; ++i) o += at(i)[d] * w[i];
        const int64_t at = row * D + d;
        const float val = o * inv_l;
        out[at] = gate != nullptr ? val * sigmoid_f(gate[at]) : val;
    }
}

struct DecodeCall {
    const float* q;
    KvView c;
    int64_t n_q, offset;
    const int32_t* pos0;
    int64_t nh, nkv;
    float scale;
    const float* gate;
    float* out;
    float* part;
    int splits;
    cudaStream_t s;
};

// Splits for the window's keys when a call's keys are two launches: a round of keys each, at most 8.
constexpr int kMaxWindowSplits = 8;
int window_splits(int64_t window) {
    return static_cast<int>(std::clamp<int64_t>((window + kRoundKeys - 1) / kRoundKeys, 1, kMaxWindowSplits));
}

template <KvType T, bool kRing, int G, int D>
void launch_keys(const DecodeCall& a, const PartLayout& layout) {
    const int64_t blocks = a.nh / G;  // (KV head, head group) pairs
    const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(layout.splits),
                    static_cast<unsigned>(a.n_q));
    decode_attention_kernel<T, kRing, G, D><<<grid, 32 * kDecWarps, 0, a.s>>>(
        a.q, a.c, a.pos0, a.offset, a.nh, a.nkv, a.scale * 1.4426950408889634f, a.part, layout);
}

// The launch for `layout`'s keys with as many heads per block as the accumulators allow: 8 (4 for
// q3 reading the ring: two accumulators), or the largest power of two dividing the GQA group below.
template <KvType T, bool kRing, int D>
void launch_groups(const DecodeCall& a, const PartLayout& layout) {
    constexpr bool kTwo = T == KvType::kQ3 && kRing;
    const int64_t rep = a.nh / a.nkv;
    int g = kTwo ? 4 : 8;
    while (g > 1 && rep % g != 0) g /= 2;
    switch (g) {
        case 8:
            if constexpr (!kTwo) launch_keys<T, kRing, 8, D>(a, layout);
            return;
        case 4: return launch_keys<T, kRing, 4, D>(a, layout);
        case 2: return launch_keys<T, kRing, 2, D>(a, layout);
        default: return launch_keys<T, kRing, 1, D>(a, layout);
    }
}

// Every key in one launch, or — with a window and splits enough — the keys older than the window
// from the cache alone and the window's through the ring; then the combine.
template <KvType T, int D>
void launch(const DecodeCall& a) {
    PartLayout first{.which = Keys::kAll, .first = 0, .splits = a.splits, .total = a.splits};
    PartLayout second{.which = Keys::kWindow, .first = 0, .splits = 0, .total = a.splits};
    constexpr bool kHasRing = T == KvType::kQ8 || T == KvType::kQ4 || T == KvType::kQ3;
    if (!kHasRing || a.c.window <= 0) {
        launch_groups<T, false, D>(a, first);
    } else if (const int ws = window_splits(a.c.window); a.splits <= ws) {
        launch_groups<T, true, D>(a, first);
    } else {
        first.which = Keys::kOld;
        first.splits = a.splits - ws;
        second.first = first.splits;
        second.splits = ws;
        launch_groups<T, false, D>(a, first);
        launch_groups<T, true, D>(a, second);
    }
    constexpr int kCombineThreads = D < 128 ? 128 : D;  // a thread per dim, at least four warps
    const unsigned rows = static_cast<unsigned>(a.n_q * a.nh);
    decode_combine_kernel<D><<<rows, kCombineThreads, 0, a.s>>>(
        a.part, a.pos0, a.offset, a.nh, a.c.window, a.c.sliding, a.c.sinks, first, second, a.gate, a.out);
}

template <KvType T>
void launch_dim(const DecodeCall& a, int64_t head_dim) {
    switch (head_dim) {  // decode_attention_fits admitted one of these
        case 32: return launch<T, 32>(a);
        case 64: return launch<T, 64>(a);
        case 128: return launch<T, 128>(a);
        default: return launch<T, 256>(a);
    }
}

}  // namespace

int decode_attention_splits(int64_t n_q, int64_t head_dim, int64_t max_keys) {
    if (n_q < 1 || n_q > kMaxQueries) return 0;
    if (head_dim != 32 && head_dim != 64 && head_dim != 128 && head_dim != 256) return 0;
    // What attention_split_scratch_floats holds per row (one partial per 64 keys of max_keys), and
    // no more splits than rounds of keys.
    const int64_t held = (max_keys + kScratchSplitKeys - 1) / kScratchSplitKeys / n_q;
    const int64_t rounds = (max_keys + kRoundKeys - 1) / kRoundKeys;
    return static_cast<int>(std::max<int64_t>(0, std::min<int64_t>({held, rounds, kMaxSplits})));
}

bool decode_attention_kv(const float* q, const KvCache& cache, int64_t n_q, int64_t offset,
                         const int32_t* pos0_dev, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                         float scale, const float* gate, float* out, float* split_scratch, int64_t max_keys,
                         cudaStream_t s) {
    const int splits = split_scratch != nullptr ? decode_attention_splits(n_q, head_dim, max_keys) : 0;
    if (splits < 1) return false;
    const DecodeCall a{.q = q,
                       .c = kv_view(cache, n_kv_heads, head_dim),
                       .n_q = n_q,
                       .offset = offset,
                       .pos0 = pos0_dev,
                       .nh = n_heads,
                       .nkv = n_kv_heads,
                       .scale = scale,
                       .gate = gate,
                       .out = out,
                       .part = split_scratch,
                       .splits = splits,
                       .s = s};
    switch (cache.type) {
        case KvType::kF32: launch_dim<KvType::kF32>(a, head_dim); break;
        case KvType::kF16: launch_dim<KvType::kF16>(a, head_dim); break;
        case KvType::kQ8: launch_dim<KvType::kQ8>(a, head_dim); break;
        case KvType::kQ4: launch_dim<KvType::kQ4>(a, head_dim); break;
        case KvType::kQ3: launch_dim<KvType::kQ3>(a, head_dim); break;
    }
    return true;
}

}  // namespace sluice::cuda
