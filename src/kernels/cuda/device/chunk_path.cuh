// The decode products' chunk path, shared by linear.cu (one activation row: matvec, the MoE decode
// launches) and matvec_rows.cu (several rows per weight read): row sets of 4 output rows, their 16-byte
// code chunks loaded one ahead and summed against x staged in shared memory, the column split S of a
// row group over warps, and the host-side rules that pick S and the path. Included by .cu files only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device/common.cuh"

namespace sluice::cuda {

// The code-word layout of the decode kernels: 4/8-bit codes whose rows and groups are whole chunks
// of 4 code words (32 or 16 columns), so a chunk is one 16-byte load inside one group.
__host__ __device__ inline bool quant_vector_layout(const DevWeight& w) {
    if (w.type != WeightType::kQ4 && w.type != WeightType::kQ8) return false;
    const int chunk_cols = w.type == WeightType::kQ4 ? 32 : 16;
    return w.cols % chunk_cols == 0 && w.group_size >= chunk_cols && w.group_size % chunk_cols == 0;
}

// ---- decode matrix-vector products ----------------------------------------------------------------
// Blocks of kWarps warps form row groups of kGroupRows rows. A group is served by S warps that split
// its columns: on the chunk path lane j of warp i takes the 16-byte chunks (i·32 + j) + t·32·S of
// each row (rowset_dot_chunks), on the word path (the MoE down projection) the 32-bit words at the
// same indices (rowset_dot). S is chosen per launch (split_for): the most warps per group that keep
// the launch in one wave of resident blocks. The 248k-row lm_head runs with S = 1 (many chunks per
// lane, no cross-warp reduction); the 8192-row DeltaNet inputs lost 2× with S = 8 (session 3, ncu).
constexpr int kWarps = 8;      // 256 threads per block
constexpr int kGroupRows = 4;  // rows per group: each x load serves 4 rows

// R rows of at most two quantized matrices of one shape (cols, group size, code width, scale type):
// rows i < kFirst from matrix a (rows of one weight), the rest from b (gate and up rows of one
// expert). Per-row pointers cost registers, and registers bound these kernels' occupancy.
template <int R, int kFirst = R>
struct RowSet {
    const uint32_t* data[R];  // the row's first code word
    int64_t group0[R];        // the row's first group in its matrix's scales / biases
    const void* scales[2];    // a, b
    const void* biases[2];
};

// A quantized matrix's code words and groups per row (a 64-bit division each, so computed once per
// matrix, not per row).
struct RowShape {
    int64_t words, groups;
};

__device__ __forceinline__ RowShape row_shape(const DevWeight& w) {
    return {w.cols >> (w.type == WeightType::kQ4 ? 3 : 2), w.cols / w.group_size};
}

// Row r of w into slot i of rs (r clamped to the last row: its result is dropped by the caller).
template <int R, int kFirst>
__device__ __forceinline__ void set_row(RowSet<R, kFirst>& rs, int i, const DevWeight& w, RowShape shape,
                                        int64_t r) {
    r = r < w.rows ? r : w.rows - 1;
    rs.data[i] = static_cast<const uint32_t*>(w.data) + r * shape.words;
    rs.group0[i] = r * shape.groups;
    rs.scales[i < kFirst ? 0 : 1] = w.scales;
    rs.biases[i < kFirst ? 0 : 1] = w.biases;
}

// This lane's partial sums of the R rows of rs against x over the code words v0, v0 + step, …
// (the affine bias folded per word as s·Σq·x + b·Σx), x in global memory: the word path of the down
// projections, whose 512-column rows have too few 16-byte chunks for a warp. Requires
// quant_vector_layout. kUnroll: loop iterations in flight.
template <int kBits, int R, int kFirst, int kUnroll>
__device__ void rowset_dot(const RowSet<R, kFirst>& rs, int64_t cols, int64_t group_size, ScaleType st,
                           const float* __restrict__ x, int64_t v0, int64_t step, float (&acc)[R]) {
    constexpr int kPerWord = 32 / kBits;
    constexpr uint32_t kMask = (1u << kBits) - 1u;
    const int64_t words = cols / kPerWord;
    const int64_t words_per_group = group_size / kPerWord;
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0.0f;
#pragma unroll kUnroll
    for (int64_t v = v0; v < words; v += step) {
        const float4* x4 = reinterpret_cast<const float4*>(x + v * kPerWord);
        float xs[kPerWord];
        float sx = 0.0f;
#pragma unroll
        for (int c4 = 0; c4 < kPerWord / 4; ++c4) {
            const float4 xv = x4[c4];
            xs[4 * c4] = xv.x;
            xs[4 * c4 + 1] = xv.y;
            xs[4 * c4 + 2] = xv.z;
            xs[4 * c4 + 3] = xv.w;
            sx += (xv.x + xv.y) + (xv.z + xv.w);
        }
        const int64_t g = v / words_per_group;
        // Every row's word and scales are loaded before any arithmetic, so R loads are in flight.
        uint32_t q[R];
        float sc[R], bi[R];
#pragma unroll
        for (int i = 0; i < R; ++i) {
            q[i] = rs.data[i][v];
            sc[i] = load_scale(rs.scales[i < kFirst ? 0 : 1], st, rs.group0[i] + g);
            bi[i] = load_scale(rs.biases[i < kFirst ? 0 : 1], st, rs.group0[i] + g);
        }
#pragma unroll
        for (int i = 0; i < R; ++i) {
            float qx = 0.0f;
#pragma unroll
            for (int c = 0; c < kPerWord; ++c)
                qx += static_cast<float>((q[i] >> (kBits * c)) & kMask) * xs[c];
            acc[i] += sc[i] * qx + bi[i] * sx;
        }
    }
}

template <int kUnroll, int R, int kFirst>
__device__ __forceinline__ void rowset_dot_any(const RowSet<R, kFirst>& rs, const DevWeight& shape,
                                               const float* x, int64_t v0, int64_t step, float (&acc)[R]) {
    if (shape.type == WeightType::kQ4) {
        rowset_dot<4, R, kFirst, kUnroll>(rs, shape.cols, shape.group_size, shape.scale_type, x, v0, step,
                                          acc);
    } else {
        rowset_dot<8, R, kFirst, kUnroll>(rs, shape.cols, shape.group_size, shape.scale_type, x, v0, step,
                                          acc);
    }
}

// ---- the chunk path: 16-byte code loads against x staged in shared memory ----
// A lane takes chunks of 4 code words (32 4-bit or 16 8-bit columns, inside one group): one 16-byte
// load per row, so a warp has a row's 512 bytes in flight at once, where 4-byte words needed a
// round trip per 128 bytes (session 5, ncu: the 4096-column out projection spent 67% of its 15
// cycles per instruction waiting on loads). x is staged in shared memory with 4 floats of padding
// per 32 (float i at staged_at(i)), so the float4 reads of lanes on consecutive chunks hit distinct
// banks; the copy is asynchronous (cp.async) and overlaps the first chunk's weight loads.
__host__ __device__ constexpr int64_t staged_floats(int64_t cols) {
    return cols + cols / 32 * 4;
}

__device__ __forceinline__ int64_t staged_at(int64_t i) {
    return i + (i >> 5) * 4;
}

// Starts copying x[cols] (cols a multiple of 4, x 16-byte aligned) into xs; staged_wait() completes it.
__device__ __forceinline__ void stage_async(float* xs, const float* x, int64_t cols) {
    for (int64_t i = threadIdx.x * 4; i < cols; i += blockDim.x * 4) {
        const auto dst = static_cast<unsigned>(__cvta_generic_to_shared(xs + staged_at(i)));
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(x + i) : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Every thread of the block calls it once after stage_async.
__device__ __forceinline__ void staged_wait() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
}

// How the chunk path's x becomes ready, called by every thread once the first chunk's loads are in
// flight: the stage_async copy completes, or nothing is left to do (StagedNorm ran first).
struct StagedCopy {
    __device__ void operator()() const { staged_wait(); }
};

// StagedCopy for a launch_dependent() kernel: the copy of x starts after the grid dependency, the
// first chunk's weight loads before it.
struct StagedCopyAfterWait {
    const float* x;
    float* xs;
    int64_t cols;
    __device__ void operator()() const {
        grid_dependency_wait();
        allow_dependents();
        stage_async(xs, x, cols);
        staged_wait();
    }
};

struct StagedAlready {
    __device__ void operator()() const {}
};

// The residual add and RMS norm of a NormIn computed into the staged x by every block of a launch (the
// first block also writes resid_out and norm_out), before the block's products start: run inside
// ready() it kept the first chunk's registers live beside its own and spilled.
struct StagedNorm {
    NormIn nm;  // a register copy
    int64_t cols;
    float* xs;
    bool write;
    __device__ void run() const {
        float ss = 0.0f;
        for (int64_t i = threadIdx.x * 4; i < cols; i += blockDim.x * 4) {
            const float4 a = *reinterpret_cast<const float4*>(nm.resid_in + i);
            const float4 b = *reinterpret_cast<const float4*>(nm.add + i);
            const float4 v = {a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w};
            *reinterpret_cast<float4*>(xs + staged_at(i)) = v;
            if (write) *reinterpret_cast<float4*>(nm.resid_out + i) = v;
            ss += (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w);
        }
        const float inv = rsqrtf(block_sum(ss) / static_cast<float>(cols) + nm.eps);
        for (int64_t i = threadIdx.x * 4; i < cols; i += blockDim.x * 4) {  // this thread's own elements
            float4 v = *reinterpret_cast<const float4*>(xs + staged_at(i));
            const float4 w = *reinterpret_cast<const float4*>(nm.weight + i);
            v = {v.x * inv * w.x, v.y * inv * w.y, v.z * inv * w.z, v.w * inv * w.w};
            *reinterpret_cast<float4*>(xs + staged_at(i)) = v;
            if (write && nm.norm_out != nullptr) *reinterpret_cast<float4*>(nm.norm_out + i) = v;
        }
        __syncthreads();
    }
};

// One chunk of the R rows of a RowSet: codes, scales and biases.
template <int R>
struct Chunk {
    uint4 q[R];
    float sc[R], bi[R];
};

__device__ __forceinline__ uint32_t chunk_word(const uint4& q, int j) {
    return j == 0 ? q.x : j == 1 ? q.y : j == 2 ? q.z : q.w;
}

template <int R, int kFirst>
__device__ __forceinline__ void chunk_load(Chunk<R>& ch, const RowSet<R, kFirst>& rs, ScaleType st, int c,
                                           int chunks_per_group) {
    const int g = c / chunks_per_group;
#pragma unroll
    for (int i = 0; i < R; ++i) {
        ch.q[i] = __ldcs(reinterpret_cast<const uint4*>(rs.data[i]) + c);  // streamed: read once per token
        ch.sc[i] = load_scale(rs.scales[i < kFirst ? 0 : 1], st, rs.group0[i] + g);
        ch.bi[i] = load_scale(rs.biases[i < kFirst ? 0 : 1], st, rs.group0[i] + g);
    }
}

// acc[i] += s·Σ q·x + b·Σ x over the chunk's columns; xc: the chunk's staged x.
//
// 4-bit codes become floats without a conversion: one byte permute puts a code (pre-shifted to
// bits 3..6 of its byte) at mantissa bits 19..22 under the exponent of 0.5, giving exactly
// v = 0.5 + q/32, and Σ q·x = 32·Σ v·x − 16·Σ x. Per code: a permute and an FMA (plus two shifts
// and masks per 8 codes) instead of shift, mask, I2F and FMA (SASS, session 5).
template <int R>
__device__ __forceinline__ void chunk_fma_q4(const Chunk<R>& ch, const float* xc, float (&acc)[R]) {
    const float4* x4 = reinterpret_cast<const float4*>(xc);
    float vx[R] = {};
    float sx = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float4 xa = x4[2 * j], xb = x4[2 * j + 1];  // the word's columns 0..3 and 4..7
        sx += ((xa.x + xa.y) + (xa.z + xa.w)) + ((xb.x + xb.y) + (xb.z + xb.w));
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const uint32_t w = chunk_word(ch.q[i], j);
            const uint32_t even = (w << 3) & 0x78787878u;  // codes 0, 2, 4, 6 at bits 3..6 of bytes 0..3
            const uint32_t odd = (w >> 1) & 0x78787878u;   // codes 1, 3, 5, 7
            constexpr uint32_t kHalf = 0x3F000000u;        // byte 3: sign and exponent of 0.5
            float v = vx[i];
            v = fmaf(__uint_as_float(__byte_perm(even, kHalf, 0x7044)), xa.x, v);
            v = fmaf(__uint_as_float(__byte_perm(odd, kHalf, 0x7044)), xa.y, v);
            v = fmaf(__uint_as_float(__byte_perm(even, kHalf, 0x7144)), xa.z, v);
            v = fmaf(__uint_as_float(__byte_perm(odd, kHalf, 0x7144)), xa.w, v);
            v = fmaf(__uint_as_float(__byte_perm(even, kHalf, 0x7244)), xb.x, v);
            v = fmaf(__uint_as_float(__byte_perm(odd, kHalf, 0x7244)), xb.y, v);
            v = fmaf(__uint_as_float(__byte_perm(even, kHalf, 0x7344)), xb.z, v);
            v = fmaf(__uint_as_float(__byte_perm(odd, kHalf, 0x7344)), xb.w, v);
            vx[i] = v;
        }
    }
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] += ch.sc[i] * fmaf(32.0f, vx[i], -16.0f * sx) + ch.bi[i] * sx;
}

template <int kBits, int R>
__device__ __forceinline__ void chunk_fma(const Chunk<R>& ch, const float* xc, float (&acc)[R]) {
    if constexpr (kBits == 4) {
        chunk_fma_q4(ch, xc, acc);
        return;
    }
    constexpr int kPerWord = 32 / kBits;
    constexpr uint32_t kMask = (1u << kBits) - 1u;
    const float4* x4 = reinterpret_cast<const float4*>(xc);
    float qx[R] = {};
    float sx = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int c4 = 0; c4 < kPerWord / 4; ++c4) {
            const float4 xv = x4[j * (kPerWord / 4) + c4];
            sx += (xv.x + xv.y) + (xv.z + xv.w);
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const uint32_t word = chunk_word(ch.q[i], j) >> (kBits * 4 * c4);
                qx[i] += static_cast<float>(word & kMask) * xv.x;
                qx[i] += static_cast<float>((word >> kBits) & kMask) * xv.y;
                qx[i] += static_cast<float>((word >> (2 * kBits)) & kMask) * xv.z;
                qx[i] += static_cast<float>((word >> (3 * kBits)) & kMask) * xv.w;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] += ch.sc[i] * qx[i] + ch.bi[i] * sx;
}

// The lookahead loop of rowset_dot_chunks: chunk c summed while chunk c + step loads.
template <int kBits, int R, int kFirst>
__device__ __forceinline__ void rowset_chunks_ahead(const RowSet<R, kFirst>& rs, ScaleType st,
                                                    const float* xs, int c0, int step, int chunks,
                                                    int per_group, Chunk<R> cur, float (&acc)[R]) {
    constexpr int kCols = 128 / kBits;
    for (int c = c0;;) {
        const int next = c + step;
        if (next >= chunks) {
            chunk_fma<kBits>(cur, xs + staged_at(static_cast<int64_t>(c) * kCols), acc);
            break;
        }
        Chunk<R> ahead;
        chunk_load(ahead, rs, st, next, per_group);
        chunk_fma<kBits>(cur, xs + staged_at(static_cast<int64_t>(c) * kCols), acc);
        cur = ahead;
        c = next;
    }
}

// This lane's partial sums of the R rows of rs over chunks c0, c0 + step, … against the staged x,
// the next chunk's loads in flight while one is summed. Calls ready() once, after the first chunk's
// loads are issued (every thread of the block must call this function). Requires
// quant_vector_layout.
// kAhead = false: one chunk in flight at a time (fewer registers, for rows of one or two steps).
template <int kBits, bool kAhead, int R, int kFirst, typename Ready>
__device__ void rowset_dot_chunks(const RowSet<R, kFirst>& rs, int64_t cols, int64_t group_size, ScaleType st,
                                  const float* xs, int c0, int step, const Ready& ready, float (&acc)[R]) {
    constexpr int kCols = 128 / kBits;  // columns per chunk
    const int chunks = static_cast<int>(cols / kCols);
    const int per_group = static_cast<int>(group_size / kCols);
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0.0f;
    Chunk<R> cur;
    const bool any = c0 < chunks;
    if (any) chunk_load(cur, rs, st, c0, per_group);
    ready();
    if (!any) return;
    if constexpr (!kAhead) {
        chunk_fma<kBits>(cur, xs + staged_at(static_cast<int64_t>(c0) * kCols), acc);
        for (int c = c0 + step; c < chunks; c += step) {
            chunk_load(cur, rs, st, c, per_group);
            chunk_fma<kBits>(cur, xs + staged_at(static_cast<int64_t>(c) * kCols), acc);
        }
    } else {
        rowset_chunks_ahead<kBits>(rs, st, xs, c0, step, chunks, per_group, cur, acc);
    }
}

template <bool kAhead = true, int R, int kFirst, typename Ready>
__device__ __forceinline__ void rowset_dot_chunks_any(const RowSet<R, kFirst>& rs, const DevWeight& shape,
                                                      const float* xs, int c0, int step, const Ready& ready,
                                                      float (&acc)[R]) {
    if (shape.type == WeightType::kQ4) {
        rowset_dot_chunks<4, kAhead>(rs, shape.cols, shape.group_size, shape.scale_type, xs, c0, step, ready,
                                     acc);
    } else {
        rowset_dot_chunks<8, kAhead>(rs, shape.cols, shape.group_size, shape.scale_type, xs, c0, step, ready,
                                     acc);
    }
}

// Sums acc over each warp's lanes and over the S warps of each group (warps g·S … g·S + S − 1);
// the totals are valid on lane 0 of the group's first warp. Every thread of the block calls it
// (S > 1 synchronises the block).
template <int S, int R>
__device__ __forceinline__ void group_sum(float (&acc)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = warp_sum(acc[i]);
    if constexpr (S > 1) {
        __shared__ float part[kWarps][R];
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        __syncthreads();  // a previous call's readers are done with part
        if (lane == 0)
#pragma unroll
            for (int i = 0; i < R; ++i) part[warp][i] = acc[i];
        __syncthreads();
        if (lane == 0 && warp % S == 0)
#pragma unroll
            for (int i = 0; i < R; ++i) {
                float sum = 0.0f;
                for (int j = 0; j < S; ++j) sum += part[warp + j][i];
                acc[i] = sum;
            }
    }
}

// The rows a block covers for a column split S.
__host__ __device__ constexpr int64_t rows_per_block(int s, int64_t rows_per_group = kGroupRows) {
    return kWarps / s * rows_per_group;
}

// ---- host side: the split and the path ----------------------------------------------------------
// Blocks of one kernel instance resident per SM (of the current device).
template <typename Kernel>
int resident_blocks(Kernel* kernel, size_t smem = 0) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 32 * kWarps, smem) != cudaSuccess) {
        cudaGetLastError();
        n = 1;
    }
    return std::max(n, 1);
}

// The column split for a launch of `groups` row groups whose rows have `chunks` 16-byte code chunks
// (0: not the chunk path): the largest S whose groups · S warps still fit one wave of resident
// blocks, while every lane keeps a chunk per row; 1 when even that takes several waves (the
// lm_head). Measured against the alternatives on the 35B (session 4, with 4-byte words): forcing one
// S for every launch gave 139 (S = 1) to 110 (S = 8) tok/s, an earlier rule 148, this one 213; a
// cost model of waves × round trips per lane (preferring S = 2 for the 8192-row inputs) 167.
inline int split_for(const LaunchContext& ctx, int64_t groups, int64_t chunks,
                     const SplitOccupancy& occupancy) {
    if (ctx.forced_split > 0) return ctx.forced_split;
    const int64_t sms = ctx.sm_count;
    int best = 1;
    for (int s = 2, i = 1; s <= kWarps; s *= 2, ++i) {
        if (chunks < 32 * s || groups * s > sms * occupancy[static_cast<size_t>(i)] * kWarps) break;
        best = s;
    }
    return best;
}

// The column split off the chunk path (16/32-bit weights, codes off the word layout): a group's S
// warps take its 4 rows one each, so a launch of few rows spreads over S times the warps. A router is
// such a launch: gpt-oss-20b's F32 router (32 rows of 2,880) ran as one block of 8 warps, 19 µs a call
// and 10% of a decode token's GPU time (ncu, session 30; a GGUF keeps every router in F32). ggml block
// rows stay with a group's first warp (S = 1: more warps would idle).
inline int generic_split(const LaunchContext& ctx, int64_t groups, bool ggml) {
    if (ctx.forced_split > 0) return ctx.forced_split;
    if (ggml) return 1;
    int best = 1;
    for (int s = 2; s <= kGroupRows; s *= 2) {
        if (groups * s > ctx.sm_count * ctx.matvec_occupancy[0] * kWarps) break;
        best = s;
    }
    return best;
}

// Dynamic shared memory of the chunk path's staged x, and the most a launch may stage (past 48 KB by
// opting in: LaunchContext::staged_limit, the device's opt-in limit capped here).
inline size_t staged_bytes(int64_t cols) {
    return static_cast<size_t>(staged_floats(cols)) * sizeof(float);
}
constexpr size_t kMaxStagedBytes = 96 * 1024;

// Whether a matrix takes the chunk path, and its chunks per row.
inline bool chunk_path(const LaunchContext& ctx, const DevWeight& w) {
    return quant_vector_layout(w) && staged_bytes(w.cols) <= ctx.staged_limit;
}
inline int64_t chunks_of(const LaunchContext& ctx, const DevWeight& w) {
    return chunk_path(ctx, w) ? w.cols / (w.type == WeightType::kQ4 ? 32 : 16) : 0;
}

template <typename Launch>
void with_split(int s, Launch&& launch) {
    switch (s) {
        case 1: launch(std::integral_constant<int, 1>{}); break;
        case 2: launch(std::integral_constant<int, 2>{}); break;
        case 4: launch(std::integral_constant<int, 4>{}); break;
        default: launch(std::integral_constant<int, 8>{}); break;
    }
}

}  // namespace sluice::cuda
