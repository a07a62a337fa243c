// Prefill attention on tensor cores: flash attention (FA2's schedule) over the KV cache as stored.
//
// A block holds 64 query rows — (token, head) pairs of one KV head's group of G query heads, G
// heads of each of 64/G consecutive tokens, so each key and value tile is decoded once for all G
// heads (GQA) — and walks the key tiles from position 0 to its last token's position. A tile of
// keys and values is decoded from its stored type (kernels/kv_format.h: f32, f16, q8, q4, q3) into
// f16 in shared memory, never into a dequantised copy of the cache in global memory. Each of the
// 4 warps owns 16 rows: S = Q·Kᵀ on mma.m16n8k16 (f16 in, f32 accumulate), the causal mask, the
// online softmax in f32 (base 2, the scale folded in), then O += P·V with P rounded to f16 in
// registers (the accumulator's layout is the next product's operand layout: P never leaves the
// registers). q3 keys are rotated (y = H·D·x/√hd): the queries are rotated as they are loaded and
// O rotated back in registers at the end (q·k = q'·ŷ; Σ p·ŷ rotated back once).
//
// Long contexts: the key tiles are split over several blocks when the rows alone would not fill
// the GPU (a 256-token chunk at 100K depth is 64 blocks); each split writes its rows' partial
// (O unnormalised, max, sum) and flash_combine_kernel merges them, as decode's flash-decoding does.
//
// With a --kv-window ring (steps of at most model::kKvRingSlack rows, as kv_store requires), the
// tiles that reach into a row's window read their tags and take two passes: the cache's rows for
// the keys outside each row's window, the ring's f16 rows (rotated into q3's domain on load) for
// those inside — the keys kernels::KvRing says each query reads.
//
// gpt-oss's sliding window (KvCache::sliding): a block starts at the tile of its first row's first
// key and the mask drops the keys before each row's window; its sinks (KvCache::sinks) join each row's
// denominator in the kernel's epilogue, or in the combine when the keys were split.
//
// Arithmetic: q, k, v and p are rounded to f16 and the products accumulate in f32, as llama.cpp's
// and FlashAttention's kernels do — within ~1e-3 of the f32 reference (attention_kv's kernels stay
// the exact path: --gpu-prefill f32, decode, and steps of at most 16 tokens).
#include <cmath>

#include "kernels/cuda/device/kv_view.cuh"

namespace sluice::cuda {
namespace {

using kernels::KvType;

constexpr int kFaWarps = 4;
constexpr int kFaRows = 16 * kFaWarps;  // query rows per block

template <int D>
struct FaShape {
    static constexpr int kKeys = D == 256 ? 32 : 64;  // keys per tile (D = 256: O takes 128 registers)
    static constexpr int kStride = D + 8;  // halves per shared row: ldmatrix rows hit distinct banks
    static constexpr size_t kSmemBytes = static_cast<size_t>(kFaRows + 2 * kKeys) * kStride * sizeof(__half);
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __half* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

// c += a·b on one m16n8k16 tile: a the 16×16 row-major f16 fragment, b0/b1 the 16×8 column one.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as an f16 pair, `lo` in the low half (the lower-indexed element of a fragment).
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}

// Four bytes at p, 4-byte aligned when kAligned, else 2-byte aligned (q8 and q4 heads of 32
// elements are 34 and 18 bytes).
template <bool kAligned>
__device__ __forceinline__ uint32_t load_u32(const uint8_t* p) {
    if constexpr (kAligned) {
        return *reinterpret_cast<const uint32_t*>(p);
    } else {
        const auto* h = reinterpret_cast<const uint16_t*>(p);
        return static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16);
    }
}

// Elements e0 .. e0 + 7 (e0 a multiple of 8) of a stored head of D elements, as four f16 pairs:
// kernels::reference's load_head rounded to f16 (q3: the rotated ŷ = s·L[c], the levels from
// `level`, a copy of kQ3Level in shared memory: constant memory serialises a warp's different
// addresses). q3 heads are read by bytes, q8 and q4 by 4 bytes when their heads keep that alignment.
template <KvType T, int D>
__device__ __forceinline__ uint4 decode8(const uint8_t* head, int e0, const float* level) {
    constexpr int kHeadBytes = T == KvType::kQ8 ? D + D / 16 : T == KvType::kQ4 ? D / 2 + D / 16 : 4;
    constexpr bool kAligned = kHeadBytes % 4 == 0;
    uint4 out;
    uint32_t* w = &out.x;
    if constexpr (T == KvType::kF32) {
        const auto* p = reinterpret_cast<const float4*>(head) + e0 / 4;
        const float4 a = p[0], b = p[1];
        w[0] = pack_half2(a.x, a.y);
        w[1] = pack_half2(a.z, a.w);
        w[2] = pack_half2(b.x, b.y);
        w[3] = pack_half2(b.z, b.w);
    } else if constexpr (T == KvType::kF16) {
        out = *reinterpret_cast<const uint4*>(head + 2 * e0);
    } else if constexpr (T == KvType::kQ8) {
        const float d = half_at(head + D, e0 / kernels::kKvGroup);
        const uint32_t lo = load_u32<kAligned>(head + e0), hi = load_u32<kAligned>(head + e0 + 4);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t word = i < 2 ? lo : hi;
            const int shift = 16 * (i % 2);
            const auto c0 = static_cast<int8_t>((word >> shift) & 0xffu);
            const auto c1 = static_cast<int8_t>((word >> (shift + 8)) & 0xffu);
            w[i] = pack_half2(d * static_cast<float>(c0), d * static_cast<float>(c1));
        }
    } else if constexpr (T == KvType::kQ4) {
        // Group g's byte j: element 32g + j (low nibble), 32g + 16 + j (high nibble).
        const int g = e0 / kernels::kKvGroup, j0 = e0 % kernels::kKvGroup;
        const uint8_t* p = head + g * kernels::kKvGroup / 2 + j0 % (kernels::kKvGroup / 2);
        const int nibble = j0 < kernels::kKvGroup / 2 ? 0 : 4;
        const float d = half_at(head + D / 2, g);
        const uint32_t lo = load_u32<kAligned>(p), hi = load_u32<kAligned>(p + 4);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t word = i < 2 ? lo : hi;
            const int shift = 16 * (i % 2) + nibble;
            const auto c0 = static_cast<int>((word >> shift) & 15u);
            const auto c1 = static_cast<int>((word >> (shift + 8)) & 15u);
            w[i] = pack_half2(d * static_cast<float>(c0 - 8), d * static_cast<float>(c1 - 8));
        }
    } else {
        const uint8_t* p = head + 3 * (e0 / 8);
        const uint32_t word = p[0] | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16);
        const float s = q3_scale(head, D);
#pragma unroll
        for (int i = 0; i < 4; ++i)
            w[i] = pack_half2(s * level[(word >> (6 * i)) & 7u], s * level[(word >> (6 * i + 3)) & 7u]);
    }
    return out;
}

// Keys and values s0 .. s0 + kKeys − 1 of KV head kvh into shared memory as f16 rows (zeros past
// n_keys, which the mask hides: a zero value keeps 0·v finite). from_ring: the rows of the f16 ring
// (kernels::KvRing) instead, zeros where ring_ok[key] is not set (the ring does not hold it).
template <KvType T, int D>
__device__ __forceinline__ void load_tile(const KvView& c, int64_t kvh, int64_t s0, int64_t n_keys,
                                          bool from_ring, const bool* ring_ok, __half* ks, __half* vs,
                                          const float* level) {
    using S = FaShape<D>;
    constexpr int kChunks = S::kKeys * D / 8;
    for (int i = static_cast<int>(threadIdx.x); i < kChunks; i += 32 * kFaWarps) {
        const int key = i / (D / 8), e0 = (i % (D / 8)) * 8;
        const int64_t s = s0 + key;
        uint4 kx = make_uint4(0, 0, 0, 0), vx = kx;
        if (from_ring) {
            if (ring_ok[key]) {
                const int64_t at = (s % c.slots) * c.ring_row + kvh * D * 2 + 2 * e0;
                kx = *reinterpret_cast<const uint4*>(c.ring_k + at);
                vx = *reinterpret_cast<const uint4*>(c.ring_v + at);
            }
        } else if (s < n_keys) {
            const int64_t at = s * c.row_bytes + kvh * c.head_bytes;
            kx = decode8<T, D>(c.k + at, e0, level);
            vx = decode8<T, D>(c.v + at, e0, level);
        }
        *reinterpret_cast<uint4*>(ks + key * S::kStride + e0) = kx;
        *reinterpret_cast<uint4*>(vs + key * S::kStride + e0) = vx;
    }
}

// x ← H·x for a vector of L·E floats held E consecutive ones per lane by lanes 0 .. L − 1 (element
// lane·E + j): butterflies of stride below E inside a lane, the others across lanes.
template <int E, int L>
__device__ __forceinline__ void hadamard_lanes(float (&x)[E], int lane) {
#pragma unroll
    for (int h = 1; h < E; h *= 2)
#pragma unroll
        for (int j = 0; j < E; ++j)
            if ((j & h) == 0) {
                const float u = x[j], w = x[j + h];
                x[j] = u + w;
                x[j + h] = u - w;
            }
#pragma unroll
    for (int h = 1; h < L; h *= 2)
#pragma unroll
        for (int j = 0; j < E; ++j) {
            const float o = __shfl_xor_sync(0xffffffffu, x[j], h);
            x[j] = (lane & h) != 0 ? o - x[j] : x[j] + o;
        }
}

// Rows of D halves in shared memory (stride kStride) into q3's rotated domain, y = H·D·x/√D, by
// the block's warps a row at a time: the ring's plain f16 rows meet the rotated queries and sum
// into the rotated O like the cache's rows (q·k = q'·k', Σ p·v' rotated back is Σ p·v).
template <int D>
__device__ __forceinline__ void rotate_rows(__half* rows, int n) {
    constexpr int E = D >= 64 ? D / 32 : 2, L = D / E;
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const float norm = rsqrtf(static_cast<float>(D));
    for (int r = warp; r < n; r += kFaWarps) {
        __half* row = rows + r * FaShape<D>::kStride + (lane < L ? lane : 0) * E;
        float x[E];
#pragma unroll
        for (int j = 0; j < E; ++j)
            x[j] = lane < L ? __half2float(row[j]) * kernels::kv_rotation_sign(lane * E + j) : 0.0f;
        hadamard_lanes<E, L>(x, lane);
        if (lane < L)
#pragma unroll
            for (int j = 0; j < E; ++j) row[j] = __float2half_rn(x[j] * norm);
    }
}

// The block's query rows into shared memory as f16: row r is token (row0 + r) / G, head
// h0 + (row0 + r) % G; rows past the last token are zeros. kRotate: q' = H·D·q/√D (q3 keys).
template <bool kRotate, int D>
__device__ __forceinline__ void load_queries(const float* q, int64_t n_q, int64_t nh, int64_t row0, int G,
                                             int64_t h0, __half* qs) {
    constexpr int E = D >= 64 ? D / 32 : 2, L = D / E;  // E per lane on L lanes (D = 32: 16 lanes)
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    for (int r = warp; r < kFaRows; r += kFaWarps) {
        const int64_t t = (row0 + r) / G;
        float x[E];
        if (t < n_q && lane < L) {
            const float* src = q + (t * nh + h0 + (row0 + r) % G) * D + lane * E;
#pragma unroll
            for (int j = 0; j < E; j += 2) {
                const float2 v = *reinterpret_cast<const float2*>(src + j);
                x[j] = v.x;
                x[j + 1] = v.y;
            }
        } else {
#pragma unroll
            for (int j = 0; j < E; ++j) x[j] = 0.0f;
        }
        if constexpr (kRotate) {
#pragma unroll
            for (int j = 0; j < E; ++j) x[j] *= kernels::kv_rotation_sign(lane * E + j);
            hadamard_lanes<E, L>(x, lane);
            const float norm = rsqrtf(static_cast<float>(D));
#pragma unroll
            for (int j = 0; j < E; ++j) x[j] *= norm;
        }
        if (lane >= L) continue;
#pragma unroll
        for (int j = 0; j < E; j += 2)
            *reinterpret_cast<uint32_t*>(qs + r * FaShape<D>::kStride + lane * E + j) =
                pack_half2(x[j], x[j + 1]);
    }
}

// o ← D·H·o/√D over each row of a warp's accumulator (the mma C layout: column 8·nt + 2·(lane % 4) + i
// of rows lane/4 and lane/4 + 8 in o[nt][i] and o[nt][2 + i]).
template <int D>
__device__ __forceinline__ void rotate_back(float (&o)[D / 8][4], int lane) {
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {  // column bit 0: the register pair
            const float u = o[nt][2 * r], w = o[nt][2 * r + 1];
            o[nt][2 * r] = u + w;
            o[nt][2 * r + 1] = u - w;
        }
#pragma unroll
    for (int m = 1; m <= 2; m *= 2)  // column bits 1, 2: the lanes of a quad
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float other = __shfl_xor_sync(0xffffffffu, o[nt][i], m);
                o[nt][i] = (lane & m) != 0 ? other - o[nt][i] : o[nt][i] + other;
            }
#pragma unroll
    for (int h = 1; h < D / 8; h *= 2)  // column bits 3 and up: the n-tiles
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt)
            if ((nt & h) == 0)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float u = o[nt][i], w = o[nt + h][i];
                    o[nt][i] = u + w;
                    o[nt + h][i] = u - w;
                }
    const float norm = rsqrtf(static_cast<float>(D));
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
            o[nt][i] *= norm * kernels::kv_rotation_sign(nt * 8 + 2 * (lane % 4) + i % 2);
}

// Grid: x the row blocks (the last tokens' first: they have the most keys), y KV head · head
// group, z the key splits. part: with splits > 1, each row's partial per split, [row · splits +
// split] × (D + 2) floats (O unnormalised, max in base 2, sum), row = t · nh + head.
template <KvType T, bool kRing, int D>
__global__ void __launch_bounds__(32 * kFaWarps, 2)
    flash_attention_kernel(const float* __restrict__ q, KvView c, const int32_t* pos0, int64_t offset,
                           int64_t n_q, int64_t nh, int64_t nkv, int G, float scale_log2, const float* gate,
                           float* out, float* part, int splits) {
    using S = FaShape<D>;
    constexpr int BN = S::kKeys;
    extern __shared__ __align__(16) unsigned char fa_smem[];
    __half* qs = reinterpret_cast<__half*>(fa_smem);
    __half* ks = qs + kFaRows * S::kStride;
    __half* vs = ks + BN * S::kStride;
    __shared__ float level[8];
    __shared__ bool ring_ok[BN];  // a window tile's keys the ring holds (kRing)
    if (threadIdx.x < 8) level[threadIdx.x] = kQ3Level[threadIdx.x];
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t rep = nh / nkv, groups = rep / G;
    const int64_t rb = gridDim.x - 1 - blockIdx.x;
    const int64_t kvh = blockIdx.y / groups, h0 = kvh * rep + (blockIdx.y % groups) * G;
    const int64_t row0 = rb * kFaRows;
    const int64_t base = *pos0 + offset;  // the position of token 0
    const int64_t n_keys = base + min(n_q - 1, (row0 + kFaRows - 1) / G) + 1;
    // From the tile of the first key the block's first row sees (its sliding window's, else key 0).
    const int64_t tiles = (n_keys + BN - 1) / BN, tile_lo = first_key(c.sliding, base + row0 / G) / BN;
    const int64_t per = (tiles - tile_lo + splits - 1) / splits;
    const int64_t tile0 = tile_lo + blockIdx.z * per, tile1 = min(tiles, tile0 + per);

    load_queries<T == KvType::kQ3, D>(q, n_q, nh, row0, G, h0, qs);
    // This lane's two rows: warp·16 + lane/4 and 8 below it; their positions (rows past the last
    // token take its position: computed, never stored).
    const int r_lo = warp * 16 + lane / 4;
    int P[2];  // positions fit an int (contexts below 2^31): the mask compares 32-bit
#pragma unroll
    for (int r = 0; r < 2; ++r) P[r] = static_cast<int>(base + min(n_q - 1, (row0 + r_lo + 8 * r) / G));

    float o[D / 8][4];
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) o[nt][i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's columns only

    // The block's rows lie at positions p_lo .. p_hi (a ring's window: kRing).
    const int64_t p_lo = base + row0 / G, p_hi = n_keys - 1;
    const int window = kRing ? static_cast<int>(c.window) : 0;
    const int sliding = static_cast<int>(c.sliding);  // a row at P sees keys P − sliding + 1 .. P (0: all)
    // A key s is inside the window of some row (some P in p_lo .. p_hi with s ≤ P < s + window) when
    // s ≤ p_hi and p_lo − s < window, and outside that of some row when p_hi − s ≥ window; tiles with
    // a key of the first kind read their tags, then take the cache's pass for the keys outside a
    // row's window (or not in the ring) and the ring's pass for those inside, skipping an empty one.
    for (int64_t kt = tile0; kt < tile1; ++kt) {
        int first = 0, last = 0;
        if (kRing && p_lo - (kt * BN + BN - 1) < window) {
            __syncthreads();  // the last pass's reads of ring_ok are done
            bool cache_keys = false, ring_keys = false;
            if (threadIdx.x < BN) {
                const int64_t sk = kt * BN + threadIdx.x;
                const bool ok = sk <= p_hi && c.tags[sk % c.slots] == sk;
                ring_ok[threadIdx.x] = ok;
                ring_keys = ok && p_lo - sk < window;
                cache_keys = sk <= p_hi && (!ok || p_hi - sk >= window);
            }
            ring_keys = __syncthreads_or(ring_keys) != 0;
            cache_keys = __syncthreads_or(cache_keys) != 0;
            first = cache_keys ? 1 : 2;
            last = ring_keys ? 2 : 1;
        }
        // One pass over a tile: its rows decoded into shared memory, S = Q·Kᵀ, the mask, the online
        // softmax, O += P·V. mode 0: the cache's rows, every key up to the row's position; with a
        // --kv-window ring, 1: the cache's rows for the keys outside the row's window (or not in the
        // ring), 2: the ring's rows for the keys inside it (kernels::KvRing: what a query reads depends
        // only on its position).
        for (int mode = first; mode <= last; ++mode) {
            __syncthreads();  // the queries and flags are in; the last pass's reads are done
            load_tile<T, D>(c, kvh, kt * BN, n_keys, mode == 2, ring_ok, ks, vs, level);
            if (T == KvType::kQ3 && mode == 2) {
                __syncthreads();
                rotate_rows<D>(ks, BN);
                rotate_rows<D>(vs, BN);
            }
            __syncthreads();
            float s[BN / 8][4];
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) s[nt][i] = 0.0f;
#pragma unroll
            for (int k0 = 0; k0 < D; k0 += 16) {
                uint32_t a[4];
                ldmatrix_x4(a, qs + (warp * 16 + lane % 16) * S::kStride + k0 + (lane / 16) * 8);
#pragma unroll
                for (int j = 0; j < BN / 16; ++j) {
                    uint32_t b[4];
                    ldmatrix_x4(b, ks + (16 * j + lane % 8 + (lane / 16) * 8) * S::kStride + k0 +
                                       ((lane / 8) % 2) * 8);
                    mma_f16(s[2 * j], a, b[0], b[1]);
                    mma_f16(s[2 * j + 1], a, b[2], b[3]);
                }
            }
            // Mask, then the online softmax (base 2: scale_log2 = scale·log2 e).
            const int key0 = static_cast<int>(kt) * BN + 2 * (lane % 4);
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int r = i / 2;
                    const int key = key0 + nt * 8 + i % 2;
                    bool keep = key <= P[r] && (sliding == 0 || P[r] - key < sliding);
                    if (mode != 0) {
                        const bool in_ring = ring_ok[key - static_cast<int>(kt) * BN] && P[r] - key < window;
                        keep = keep && in_ring == (mode == 2);
                    }
                    s[nt][i] = keep ? s[nt][i] * scale_log2 : -INFINITY;
                    mx[r] = fmaxf(mx[r], s[nt][i]);
                }
            float corr[2], mu[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                mu[r] = mx[r] == -INFINITY ? 0.0f : mx[r];  // a row with no key yet: every p is 0
                corr[r] = exp2f(m[r] - mu[r]);
                m[r] = mx[r];
                l[r] *= corr[r];
            }
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    s[nt][i] = exp2f(s[nt][i] - mu[i / 2]);
                    l[i / 2] += s[nt][i];
                }
#pragma unroll
            for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) o[nt][i] *= corr[i / 2];
                    // O += P·V: the scores' accumulator tiles 2kk, 2kk + 1 are the k16 operand of keys
                    // 16kk...
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                const uint32_t a[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]),
                                       pack_half2(s[2 * kk][2], s[2 * kk][3]),
                                       pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                       pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int nd = 0; nd < D / 16; ++nd) {
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, vs + (16 * kk + lane % 8 + ((lane / 8) % 2) * 8) * S::kStride +
                                             16 * nd + (lane / 16) * 8);
                    mma_f16(o[2 * nd], a, b[0], b[1]);
                    mma_f16(o[2 * nd + 1], a, b[2], b[3]);
                }
            }
        }
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    if constexpr (T == KvType::kQ3) rotate_back<D>(o, lane);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int64_t row = row0 + r_lo + 8 * r, t = row / G;
        if (t >= n_q) continue;
        const int64_t head_row = t * nh + h0 + row % G;
        if (splits == 1) {
            // 1 / l, or with a sink f / (l·f + f_sink) (softmax_out: o·inv is its output).
            const float inv = softmax_out<true>(1.0f, m[r], l[r], c.sinks, h0 + row % G);
#pragma unroll
            for (int nt = 0; nt < D / 8; ++nt) {
                const int64_t at = head_row * D + nt * 8 + 2 * (lane % 4);
                float2 val = make_float2(o[nt][2 * r] * inv, o[nt][2 * r + 1] * inv);
                if (gate != nullptr) {
                    val.x *= sigmoid_f(gate[at]);
                    val.y *= sigmoid_f(gate[at + 1]);
                }
                *reinterpret_cast<float2*>(out + at) = val;
            }
        } else {
            float* ph = part + (head_row * splits + blockIdx.z) * (D + 2);
#pragma unroll
            for (int nt = 0; nt < D / 8; ++nt)
                *reinterpret_cast<float2*>(ph + nt * 8 + 2 * (lane % 4)) =
                    make_float2(o[nt][2 * r], o[nt][2 * r + 1]);
            if (lane % 4 == 0) {
                ph[D] = m[r];
                ph[D + 1] = l[r];
            }
        }
    }
}

// Merges each row's splits (block per row t · nh + head): out = Σ O·2^(m − M) / Σ l·2^(m − M), the
// head's sink (sinks [nh], nullable) joining the denominator (softmax_out). A split before the row's
// sliding window has no keys (m = −∞) and adds nothing.
template <int D>
__global__ void flash_combine_kernel(const float* part, int splits, int64_t nh, const float* sinks,
                                     const float* gate, float* out) {
    const int64_t row = blockIdx.x;
    const float* ph = part + row * splits * (D + 2);
    float mx = -INFINITY;
    for (int sp = 0; sp < splits; ++sp) mx = fmaxf(mx, ph[sp * (D + 2) + D]);
    float l = 0.0f;
    for (int sp = 0; sp < splits; ++sp) {
        const float m = ph[sp * (D + 2) + D];
        if (m != -INFINITY) l += ph[sp * (D + 2) + D + 1] * exp2f(m - mx);
    }
    for (int d = static_cast<int>(threadIdx.x); d < D; d += static_cast<int>(blockDim.x)) {
        float o = 0.0f;
        for (int sp = 0; sp < splits; ++sp) {
            const float m = ph[sp * (D + 2) + D];
            if (m != -INFINITY) o += ph[sp * (D + 2) + d] * exp2f(m - mx);
        }
        const int64_t at = row * D + d;
        const float val = softmax_out<true>(o, mx, l, sinks, row % nh);
        out[at] = gate != nullptr ? val * sigmoid_f(gate[at]) : val;
    }
}

// Heads per block of one KV head's group: 8, or the largest power of two dividing rep below it.
int heads_per_block(int64_t rep) {
    for (int g = 8; g > 1; g /= 2)
        if (rep % g == 0) return g;
    return 1;
}

// One call's arguments, as flash_attention_kv received them (the view made).
struct FlashCall {
    const float* q;
    KvView c;
    int64_t n_q, offset;
    const int32_t* pos0;
    int64_t nh, nkv;
    float scale;
    const float* gate;
    float* out;
    float* scratch;
    int64_t scratch_floats, keys_hint;
    cudaStream_t s;
};

template <KvType T, bool kRing, int D>
void launch(const FlashCall& a) {
    const int G = heads_per_block(a.nh / a.nkv);
    const int64_t row_blocks = (a.n_q * G + kFaRows - 1) / kFaRows, groups = a.nh / a.nkv / G;
    const int64_t blocks = row_blocks * a.nkv * groups;
    // Split the keys while the blocks would not fill the GPU twice over, each split keeping at
    // least 8 tiles, as far as the scratch holds the partials.
    int device = 0, sms = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    const int64_t tiles = (a.keys_hint + FaShape<D>::kKeys - 1) / FaShape<D>::kKeys;
    int splits = 1;
    while (blocks * splits < 2 * sms && tiles / (2 * splits) >= 8 &&
           a.n_q * a.nh * 2 * splits * (D + 2) <= a.scratch_floats)
        splits *= 2;
    auto kernel = flash_attention_kernel<T, kRing, D>;
    constexpr size_t smem = FaShape<D>::kSmemBytes;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(a.nkv * groups),
                    static_cast<unsigned>(splits));
    const float scale_log2 = a.scale * 1.4426950408889634f;
    kernel<<<grid, 32 * kFaWarps, smem, a.s>>>(a.q, a.c, a.pos0, a.offset, a.n_q, a.nh, a.nkv, G, scale_log2,
                                               a.gate, a.out, a.scratch, splits);
    if (splits > 1)
        flash_combine_kernel<D><<<static_cast<unsigned>(a.n_q * a.nh), 128, 0, a.s>>>(
            a.scratch, splits, a.nh, a.c.sinks, a.gate, a.out);
}

template <KvType T, bool kRing>
void launch_dim(const FlashCall& a, int64_t head_dim) {
    switch (head_dim) {  // flash_attention_fits admitted one of these
        case 32: return launch<T, kRing, 32>(a);
        case 64: return launch<T, kRing, 64>(a);
        case 128: return launch<T, kRing, 128>(a);
        default: return launch<T, kRing, 256>(a);
    }
}

template <KvType T>
void launch_type(const FlashCall& a, int64_t head_dim) {
    if constexpr (T == KvType::kF32 || T == KvType::kF16) {  // never windowed (kv_window_applies)
        launch_dim<T, false>(a, head_dim);
    } else if (a.c.window > 0) {
        launch_dim<T, true>(a, head_dim);
    } else {
        launch_dim<T, false>(a, head_dim);
    }
}

}  // namespace

bool flash_attention_fits(const KvCache& /*cache*/, int64_t head_dim) {
    return head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

bool flash_attention_kv(const float* q, const KvCache& cache, int64_t n_q, int64_t offset,
                        const int32_t* pos0_dev, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                        float scale, const float* gate, float* out, float* scratch, int64_t scratch_floats,
                        int64_t keys_hint, cudaStream_t s) {
    if (!flash_attention_fits(cache, head_dim)) return false;
    if (n_q == 0) return true;
    const FlashCall a{.q = q,
                      .c = kv_view(cache, n_kv_heads, head_dim),
                      .n_q = n_q,
                      .offset = offset,
                      .pos0 = pos0_dev,
                      .nh = n_heads,
                      .nkv = n_kv_heads,
                      .scale = scale,
                      .gate = gate,
                      .out = out,
                      .scratch = scratch,
                      .scratch_floats = scratch_floats,
                      .keys_hint = keys_hint,
                      .s = s};
    switch (cache.type) {
        case KvType::kF32: launch_type<KvType::kF32>(a, head_dim); break;
        case KvType::kF16: launch_type<KvType::kF16>(a, head_dim); break;
        case KvType::kQ8: launch_type<KvType::kQ8>(a, head_dim); break;
        case KvType::kQ4: launch_type<KvType::kQ4>(a, head_dim); break;
        case KvType::kQ3: launch_type<KvType::kQ3>(a, head_dim); break;
    }
    return true;
}

}  // namespace sluice::cuda
