// Decode products over several activation rows (matvec_multi_rows): a speculative verification's k + 1
// tokens, or one decode token of each of several batched sequences, through the decode kernels with each
// weight read once per launch of up to kRowsPerLaunch rows, instead of once per row. Each row's result is
// matvec_multi's on that row alone, bit for bit: the same column split S, the same chunk order per lane,
// the same chunk sums (chunk_fma) and the same warp and group reductions, only repeated per staged row.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/device/chunk_path.cuh"
#include "kernels/cuda/device/common.cuh"

namespace sluice::cuda {
namespace {

// Rows of x one launch stages (each staged_bytes(cols) of shared memory): the chunk loop's registers
// hold kRowsPerLaunch × 4 sums beside two chunks in flight.
constexpr int kRowsPerLaunch = 4;

// This lane's partial sums of the R rows of rs against each of the NV staged rows of x (xs, one every
// `stride` floats), over chunks c0, c0 + step, …, each chunk summed against every row in turn
// (rowset_dot_chunks per row). kAhead: the next chunk's loads are in flight while one is summed (the
// registers for it: see matvec_rows_kernel). Waits for the staged rows once the first chunk's loads are
// issued.
template <int kBits, bool kAhead, int NV, int R>
__device__ void rowset_dot_chunks_rows(const RowSet<R>& rs, int64_t cols, int64_t group_size, ScaleType st,
                                       const float* xs, int64_t stride, int c0, int step,
                                       float (&acc)[NV][R]) {
    constexpr int kCols = 128 / kBits;  // columns per chunk
    const int chunks = static_cast<int>(cols / kCols);
    const int per_group = static_cast<int>(group_size / kCols);
#pragma unroll
    for (int v = 0; v < NV; ++v)
#pragma unroll
        for (int i = 0; i < R; ++i) acc[v][i] = 0.0f;
    Chunk<R> cur;
    const bool any = c0 < chunks;
    if (any) chunk_load(cur, rs, st, c0, per_group);
    staged_wait();
    if (!any) return;
    for (int c = c0;;) {
        const int next = c + step;
        const int64_t at = staged_at(static_cast<int64_t>(c) * kCols);
        if constexpr (kAhead) {
            if (next >= chunks) {
#pragma unroll
                for (int v = 0; v < NV; ++v) chunk_fma<kBits>(cur, xs + v * stride + at, acc[v]);
                break;
            }
            Chunk<R> ahead;
            chunk_load(ahead, rs, st, next, per_group);
#pragma unroll
            for (int v = 0; v < NV; ++v) chunk_fma<kBits>(cur, xs + v * stride + at, acc[v]);
            cur = ahead;
        } else {
#pragma unroll
            for (int v = 0; v < NV; ++v) chunk_fma<kBits>(cur, xs + v * stride + at, acc[v]);
            if (next >= chunks) break;
            chunk_load(cur, rs, st, next, per_group);
        }
        c = next;
    }
}

// y[i] + t·rows_i = m.w[i] · x[t, :] for the NV rows t = t0 … t0 + NV − 1 of x (rows past n repeat row
// n − 1, their results dropped): blockIdx.y picks the weight, as in matvec_multi_kernel. Every weight
// of m has the chunk layout and m.w[0]'s columns. Registers (ptxas, sm_90): 2 rows without the
// lookahead fit 128 (two blocks an SM); 4 rows with it take 243 (one block an SM: its 8 warps have a
// chunk of 4 rows in flight per lane while summing 4 rows' worth) — at 128 either spilled.
template <int S, int NV>
__global__ void __launch_bounds__(32 * kWarps, NV <= 2 ? 2 : 1)
    matvec_rows_kernel(MatvecMulti m, const float* x, int64_t t0, int64_t n) {
    extern __shared__ float4 staged[];
    const DevWeight w = m.w[blockIdx.y];  // a register copy (see matvec_multi_kernel)
    const int64_t block_r0 = static_cast<int64_t>(blockIdx.x) * rows_per_block(S);
    grid_dependency_wait();  // x comes from the kernels before
    allow_dependents();
    if (block_r0 >= w.rows) return;  // uniform over the block
    float* xs = reinterpret_cast<float*>(staged);
    const int64_t stride = staged_floats(w.cols);
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        const int64_t t = t0 + v < n ? t0 + v : n - 1;
        stage_async(xs + v * stride, x + t * w.cols, w.cols);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t r0 = block_r0 + warp / S * kGroupRows;
    RowSet<kGroupRows> rs;
    const RowShape shape = row_shape(w);
#pragma unroll
    for (int i = 0; i < kGroupRows; ++i) set_row(rs, i, w, shape, r0 + i);
    float acc[NV][kGroupRows];
    const int c0 = (warp % S) * 32 + lane;
    constexpr bool kAhead = NV > 2;
    if (w.type == WeightType::kQ4) {
        rowset_dot_chunks_rows<4, kAhead>(rs, w.cols, w.group_size, w.scale_type, xs, stride, c0, 32 * S,
                                          acc);
    } else {
        rowset_dot_chunks_rows<8, kAhead>(rs, w.cols, w.group_size, w.scale_type, xs, stride, c0, 32 * S,
                                          acc);
    }
    float* y = m.y[blockIdx.y];
#pragma unroll
    for (int v = 0; v < NV; ++v) {
        group_sum<S>(acc[v]);
        if (lane == 0 && warp % S == 0 && t0 + v < n)
#pragma unroll
            for (int i = 0; i < kGroupRows; ++i)
                if (r0 + i < w.rows) y[(t0 + v) * w.rows + r0 + i] = acc[v][i];
    }
}

}  // namespace

void matvec_multi_rows(const LaunchContext& ctx, const MatvecMulti& m, const float* x, int64_t n,
                       cudaStream_t s) {
    if (m.n == 0 || n <= 0) return;
    int64_t rows = 0, groups = 0, chunks = 0;
    bool vector = m.norm.weight == nullptr && m.topk.counter == nullptr;
    for (int i = 0; i < m.n; ++i) {
        rows = std::max(rows, m.w[i].rows);
        groups += (m.w[i].rows + kGroupRows - 1) / kGroupRows;
        chunks = std::max(chunks, chunks_of(ctx, m.w[i]));
        vector = vector && chunk_path(ctx, m.w[i]) && m.w[i].cols == m.w[0].cols;
    }
    if (rows == 0) return;
    const int64_t cols = m.w[0].cols;
    const size_t one = staged_bytes(cols);
    const int64_t fit =
        vector ? std::min<int64_t>(kRowsPerLaunch, static_cast<int64_t>(ctx.staged_limit / one)) : 1;
    if (n == 1 || fit < 2) {  // one row at a time: matvec_multi itself
        for (int64_t t = 0; t < n; ++t) {
            MatvecMulti row = m;
            for (int i = 0; i < m.n; ++i) row.y[i] = m.y[i] + t * m.w[i].rows;
            matvec_multi(ctx, row, x + t * cols, s);
        }
        return;
    }
    // matvec_multi's split for these weights, so each row sums in its order.
    const int split = split_for(ctx, groups, chunks, ctx.matvec_occupancy);
    with_split(split, [&](auto S) {
        const dim3 grid(grid_for(rows, static_cast<int>(rows_per_block(S))), static_cast<unsigned>(m.n));
        for (int64_t t0 = 0; t0 < n;) {
            const int64_t left = n - t0;
            if (left >= 3 && fit >= 4) {
                launch_dependent(ctx.dependent_launch, matvec_rows_kernel<S, 4>, grid, dim3(32 * kWarps),
                                 4 * one, s, m, x, t0, n);
                t0 += 4;
            } else if (left >= 2) {
                launch_dependent(ctx.dependent_launch, matvec_rows_kernel<S, 2>, grid, dim3(32 * kWarps),
                                 2 * one, s, m, x, t0, n);
                t0 += 2;
            } else {
                MatvecMulti row = m;
                for (int i = 0; i < m.n; ++i) row.y[i] = m.y[i] + t0 * m.w[i].rows;
                matvec_multi(ctx, row, x + t0 * cols, s);
                t0 += 1;
            }
        }
    });
}

void matvec_rows(const LaunchContext& ctx, const DevWeight& w, const float* x, int64_t n, float* y,
                 cudaStream_t s) {
    MatvecMulti m;
    m.add(w, y);
    matvec_multi_rows(ctx, m, x, n, s);
}

}  // namespace sluice::cuda
