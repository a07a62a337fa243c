// Linear kernels: embedding rows, matrix-vector products for decode (groups of 4 output rows whose
// 4/8-bit codes the lanes of 1–8 warps read as 16-byte chunks against x staged in shared memory,
// or as interleaved 32-bit words in the MoE down projection; 16-bit floats read 16 bytes per lane;
// the affine bias folded per group as s·Σq·x + b·Σx), and their grouped MoE forms that pick each
// expert's weights from a device table by routed id, so a decode step needs no host round trip and can
// be captured in a graph. The decode MoE launches fuse SwiGLU into the gate/up products, run the shared
// expert beside the routed ones, and the router top-k runs in the last block of the router's product.
// Prefill's f32-accurate tiled products are matmul_f32.cu's; the chunk path's device code is
// device/chunk_path.cuh, shared with the products over several rows (matvec_rows.cu).
#include <algorithm>
#include <array>
#include <atomic>
#include <type_traits>

#include "kernels/cuda/device/chunk_path.cuh"
#include "kernels/cuda/device/common.cuh"
#include "kernels/cuda/device/ggml_dot.cuh"

namespace sluice::cuda {
namespace {

// Σ_i W[r, i] · x[i] over one row, reduced across the warp (every lane returns the sum).
template <int kBits, bool kReduce = true>
__device__ float row_dot_quant(const DevWeight& w, int64_t r, const float* __restrict__ x, int lane) {
    constexpr int kPerWord = 32 / kBits;
    constexpr uint32_t kMask = (1u << kBits) - 1u;
    const int64_t words = w.cols / kPerWord;
    const uint32_t* row = static_cast<const uint32_t*>(w.data) + r * words;
    const int64_t gbase = r * (w.cols / w.group_size);
    float acc = 0.0f;
    if (words % 4 == 0 && w.group_size % (4 * kPerWord) == 0) {
        // 4 words (32 or 16 inputs) per lane per step, all inside one group.
        const uint4* row4 = reinterpret_cast<const uint4*>(row);
        for (int64_t v = lane; v < words / 4; v += 32) {
            const uint4 q = row4[v];
            const int64_t col0 = v * 4 * kPerWord;
            const int64_t g = gbase + col0 / w.group_size;
            const float s = load_scale(w.scales, w.scale_type, g);
            const float b = load_scale(w.biases, w.scale_type, g);
            const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
            const float4* x4 = reinterpret_cast<const float4*>(x + col0);
            float qx = 0.0f, sx = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int c4 = 0; c4 < kPerWord / 4; ++c4) {
                    const float4 xv = x4[j * (kPerWord / 4) + c4];
                    const uint32_t word = qw[j] >> (kBits * 4 * c4);
                    qx += static_cast<float>(word & kMask) * xv.x;
                    qx += static_cast<float>((word >> kBits) & kMask) * xv.y;
                    qx += static_cast<float>((word >> (2 * kBits)) & kMask) * xv.z;
                    qx += static_cast<float>((word >> (3 * kBits)) & kMask) * xv.w;
                    sx += (xv.x + xv.y) + (xv.z + xv.w);
                }
            }
            acc += s * qx + b * sx;
        }
    } else {
        for (int64_t v = lane; v < words; v += 32) {
            const uint32_t word = row[v];
            const int64_t col0 = v * kPerWord;
            const int64_t g = gbase + col0 / w.group_size;
            float qx = 0.0f, sx = 0.0f;
#pragma unroll
            for (int c = 0; c < kPerWord; ++c) {
                const float xv = x[col0 + c];
                qx += static_cast<float>((word >> (kBits * c)) & kMask) * xv;
                sx += xv;
            }
            acc += load_scale(w.scales, w.scale_type, g) * qx + load_scale(w.biases, w.scale_type, g) * sx;
        }
    }
    return kReduce ? warp_sum(acc) : acc;
}

template <bool kReduce = true>
__device__ float row_dot_float(const DevWeight& w, int64_t r, const float* __restrict__ x, int lane) {
    float acc = 0.0f;
    const int64_t cols = w.cols;
    if (w.type == WeightType::kF32) {
        const float* row = static_cast<const float*>(w.data) + r * cols;
        if (cols % 4 == 0) {
            for (int64_t v = lane; v < cols / 4; v += 32) {
                const float4 a = reinterpret_cast<const float4*>(row)[v];
                const float4 b = reinterpret_cast<const float4*>(x)[v];
                acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
            }
        } else {
            for (int64_t i = lane; i < cols; i += 32) acc += row[i] * x[i];
        }
    } else {
        const bool bf16 = w.type == WeightType::kBF16;
        const uint16_t* row = static_cast<const uint16_t*>(w.data) + r * cols;
        if (cols % 8 == 0) {
            for (int64_t v = lane; v < cols / 8; v += 32) {
                const uint4 q = reinterpret_cast<const uint4*>(row)[v];
                const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
                const float4* x4 = reinterpret_cast<const float4*>(x + v * 8);
                const float4 xa = x4[0], xb = x4[1];
                const float xs[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const uint32_t lo = qw[j] & 0xffffu, hi = qw[j] >> 16;
                    const float wl = bf16 ? bf16_bits_to_f32(lo) : f16_bits_to_f32(lo);
                    const float wh = bf16 ? bf16_bits_to_f32(hi) : f16_bits_to_f32(hi);
                    acc += wl * xs[2 * j] + wh * xs[2 * j + 1];
                }
            }
        } else {
            for (int64_t i = lane; i < cols; i += 32)
                acc += (bf16 ? bf16_bits_to_f32(row[i]) : f16_bits_to_f32(row[i])) * x[i];
        }
    }
    return kReduce ? warp_sum(acc) : acc;
}

__device__ float row_dot(const DevWeight& w, int64_t r, const float* __restrict__ x, int lane) {
    if (is_ggml(w.type)) return row_dot_ggml(w, r, x, lane);
    switch (w.type) {
        case WeightType::kQ4: return row_dot_quant<4>(w, r, x, lane);
        case WeightType::kQ8: return row_dot_quant<8>(w, r, x, lane);
        default: return row_dot_float(w, r, x, lane);
    }
}

__global__ void dequantize_rows_kernel(DevWeight param, const int32_t* ids, float* out) {
    const DevWeight w = param;  // a register copy (see matvec_multi_kernel)
    const int64_t t = blockIdx.x;
    const int64_t r = ids[t];
    for (int64_t i = threadIdx.x; i < w.cols; i += blockDim.x) out[t * w.cols + i] = weight_at(w, r, i);
}

// Rows [r0, r0 + kGroupRows) of w · x into y, by the S warps of this thread's group. kVector: w has
// the code-word layout (quant_vector_layout) and x is staged (stage_async; every thread of the
// block calls this); the other instance serves every weight type through row_dot from x in global
// memory, and its registers would otherwise lower the chunk path's occupancy.
template <int S, bool kVector, typename Ready = StagedCopy>
__device__ void group_rows(const DevWeight& w, int64_t r0, const float* x, float* y,
                           const Ready& ready = {}) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if constexpr (kVector) {
        RowSet<kGroupRows> rs;
        const RowShape shape = row_shape(w);
#pragma unroll
        for (int i = 0; i < kGroupRows; ++i) set_row(rs, i, w, shape, r0 + i);
        float acc[kGroupRows];
        rowset_dot_chunks_any(rs, w, x, (warp % S) * 32 + lane, 32 * S, ready, acc);
        group_sum<S>(acc);
        if (lane == 0 && warp % S == 0)
#pragma unroll
            for (int i = 0; i < kGroupRows; ++i)
                if (r0 + i < w.rows) y[r0 + i] = acc[i];  // constant indices: acc stays in registers
    } else if (is_ggml(w.type)) {
        // ggml block formats: the group's rows together (ggml_rows_dot), by its first warp (the split
        // rule gives S = 1 off the chunk path).
        if (warp % S != 0) return;
        const uint8_t* rows[kGroupRows];
        const int64_t row_bytes = ggml_row_bytes(w);
#pragma unroll
        for (int i = 0; i < kGroupRows; ++i)
            rows[i] =
                static_cast<const uint8_t*>(w.data) + (r0 + i < w.rows ? r0 + i : w.rows - 1) * row_bytes;
        float acc[kGroupRows];
        ggml_rows_dot<kGroupRows>(w.type, rows, w.cols / 32, x, lane, acc);
#pragma unroll
        for (int i = 0; i < kGroupRows; ++i) acc[i] = warp_sum(acc[i]);
        if (lane == 0)
#pragma unroll
            for (int i = 0; i < kGroupRows; ++i)
                if (r0 + i < w.rows) y[r0 + i] = acc[i];
    } else {
        // 16-bit and f32 weights, or codes off the word layout: the group's warps share its rows.
        for (int i = warp % S; i < kGroupRows; i += S) {
            if (r0 + i >= w.rows) break;
            const float v = row_dot(w, r0 + i, x, lane);
            if (lane == 0) y[r0 + i] = v;
        }
    }
}

// The last block of a launch slice to finish (counted on *counter, which it resets for the next
// launch or graph replay) runs the router top-k over the logits the slice wrote.
__device__ void topk_if_last(const MatvecTopk& t, const float* logits) {
    __shared__ bool last;
    __threadfence();  // this block's logits are visible before it is counted
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(t.counter, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (threadIdx.x < 32) router_topk_warp(logits, t.router, t.ids, t.weights, true);
    if (threadIdx.x == 0) *t.counter = 0;
}

// Kernel parameters are copied into registers before use: taking a parameter's address (a
// reference passed on) makes every thread copy the whole parameter block to local memory first,
// which doubled these kernels' time (ncu, session 4).
// kTopk: the launch carries a fused router top-k (a separate instance, so the top-k's registers do
// not lower every other product's occupancy).
// kVector: x is staged in dynamic shared memory (staged_floats(cols) floats), copied from x, or with
// kNorm computed from m.norm (an instance of its own: both forms in one kernel spilled registers).
template <int S, bool kTopk, bool kVector, bool kNorm = false>
__global__ void __launch_bounds__(32 * kWarps, 3) matvec_multi_kernel(MatvecMulti m, const float* x) {
    extern __shared__ float4 staged[];
    const DevWeight w = m.w[blockIdx.y];
    const int64_t block_r0 = static_cast<int64_t>(blockIdx.x) * rows_per_block(S);
    const int64_t r0 = block_r0 + (threadIdx.x / 32) / S * kGroupRows;
    if (block_r0 >= w.rows) {  // uniform over the block
        grid_dependency_wait();
        allow_dependents();
    } else if constexpr (kNorm) {
        // The first chunk of this thread's rows into L2 while the kernel before finishes and the
        // norm is computed.
        const RowShape shape = row_shape(w);
        const int64_t c0 = (threadIdx.x / 32) % S * 32 + threadIdx.x % 32;
        if (c0 * 4 < shape.words)
            for (int i = 0; i < kGroupRows; ++i) {
                const int64_t r = r0 + i < w.rows ? r0 + i : w.rows - 1;
                const uint32_t* chunk = static_cast<const uint32_t*>(w.data) + r * shape.words + c0 * 4;
                asm volatile("prefetch.global.L2 [%0];" ::"l"(chunk));
            }
        grid_dependency_wait();
        allow_dependents();
        float* xs = reinterpret_cast<float*>(staged);
        StagedNorm{m.norm, w.cols, xs, blockIdx.x == 0 && blockIdx.y == 0}.run();
        group_rows<S, true>(w, r0, xs, m.y[blockIdx.y], StagedAlready{});
    } else if constexpr (kVector) {
        float* xs = reinterpret_cast<float*>(staged);
        group_rows<S, true>(w, r0, xs, m.y[blockIdx.y], StagedCopyAfterWait{x, xs, w.cols});
    } else {
        grid_dependency_wait();
        allow_dependents();
        group_rows<S, false>(w, r0, x, m.y[blockIdx.y]);
    }
    if (kTopk && static_cast<int>(blockIdx.y) == m.topk.which) {
        const MatvecTopk topk = m.topk;
        topk_if_last(topk, m.y[blockIdx.y]);
    }
}

// The routed gate and up projections of each token t (ids [t, n_ids], x [t, cols]), slot k of token t
// = blockIdx.y as t · slices + k (slices per token: n_ids, and the shared expert's when sh has one).
// kSwiglu: a group takes 2 rows of gate and the same 2 rows of up and writes act = silu(gate) ⊙ up, and
// slot n_ids (when the grid has it) is the shared expert; otherwise blockIdx.z picks gate (0) or up (1)
// and a group takes 4 rows. A token's outputs start out_stride floats after the one before.
template <int S, bool kSwiglu, bool kVector>
__global__ void __launch_bounds__(32 * kWarps, 3)
    moe_gate_up_kernel(const DevWeight* table, const int32_t* ids, int64_t n_ids, int64_t rows,
                       SharedExpert sh, const float* x, int64_t cols, float* gate, float* up, float* act,
                       int64_t out_stride) {
    extern __shared__ float4 staged[];  // kVector: x, staged
    grid_dependency_wait();             // ids and x come from the kernels before
    allow_dependents();
    const int64_t slices = n_ids + (kSwiglu && sh.gate.data != nullptr ? 1 : 0);
    const int64_t t = blockIdx.y / slices, k = blockIdx.y % slices;
    ids += t * n_ids;
    x += t * cols;
    const int64_t out0 = t * out_stride;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const float* xv = kVector ? reinterpret_cast<const float*>(staged) : x;
    if constexpr (!kSwiglu) {
        const DevWeight* ew = table + static_cast<int64_t>(ids[k]) * 3;
        const int64_t block_r0 = static_cast<int64_t>(blockIdx.x) * rows_per_block(S);
        if (block_r0 >= rows) return;  // uniform over the block
        const DevWeight w = ew[blockIdx.z];
        if constexpr (kVector) stage_async(reinterpret_cast<float*>(staged), x, w.cols);
        group_rows<S, kVector>(w, block_r0 + warp / S * kGroupRows, xv,
                               (blockIdx.z == 0 ? gate : up) + out0 + k * rows);
        return;
    }
    const bool is_shared = k == n_ids;
    constexpr int kPairRows = kGroupRows / 2;
    const int64_t block_r0 = static_cast<int64_t>(blockIdx.x) * rows_per_block(S, kPairRows);
    if (block_r0 >= (is_shared ? sh.gate.rows : rows)) return;  // uniform over the block
    DevWeight wg, wu;                                           // copies (see matvec_multi_kernel)
    if (is_shared) {
        wg = sh.gate;
        wu = sh.up;
    } else {
        wg = table[static_cast<int64_t>(ids[k]) * 3];
        wu = table[static_cast<int64_t>(ids[k]) * 3 + 1];
    }
    if constexpr (kVector) stage_async(reinterpret_cast<float*>(staged), x, wg.cols);
    const int64_t r0 = block_r0 + warp / S * kPairRows;
    float* out = act + out0 + k * rows;
    if constexpr (kVector) {  // gate and up share the code-word shape
        RowSet<kGroupRows, kPairRows> rs;
        const RowShape shape = row_shape(wg);  // wu has the same
#pragma unroll
        for (int i = 0; i < kPairRows; ++i) {
            set_row(rs, i, wg, shape, r0 + i);
            set_row(rs, kPairRows + i, wu, shape, r0 + i);
        }
        float acc[kGroupRows];
        rowset_dot_chunks_any(rs, wg, xv, (warp % S) * 32 + lane, 32 * S, StagedCopy{}, acc);
        group_sum<S>(acc);
        if (lane == 0 && warp % S == 0)
#pragma unroll
            for (int i = 0; i < kPairRows; ++i)
                if (r0 + i < wg.rows) out[r0 + i] = silu_f(acc[i]) * acc[kPairRows + i];
    } else if (S == 1 && is_ggml(wg.type) && wg.type == wu.type && wg.cols == wu.cols) {
        // ggml block formats: the pair's gate and up rows together (ggml_rows_dot).
        const uint8_t* rws[kGroupRows];
        const int64_t row_bytes = ggml_row_bytes(wg);
#pragma unroll
        for (int i = 0; i < kPairRows; ++i) {
            const int64_t r = r0 + i < wg.rows ? r0 + i : wg.rows - 1;
            rws[i] = static_cast<const uint8_t*>(wg.data) + r * row_bytes;
            rws[kPairRows + i] = static_cast<const uint8_t*>(wu.data) + r * row_bytes;
        }
        float acc[kGroupRows];
        ggml_rows_dot<kGroupRows>(wg.type, rws, wg.cols / 32, x, lane, acc);
#pragma unroll
        for (int i = 0; i < kGroupRows; ++i) acc[i] = warp_sum(acc[i]);
        if (lane == 0)
#pragma unroll
            for (int i = 0; i < kPairRows; ++i)
                if (r0 + i < wg.rows) out[r0 + i] = silu_f(acc[i]) * acc[kPairRows + i];
    } else {
        for (int i = warp % S; i < kPairRows; i += S) {
            if (r0 + i >= wg.rows) break;
            const float g = row_dot(wg, r0 + i, x, lane);
            const float u = row_dot(wu, r0 + i, x, lane);
            if (lane == 0) out[r0 + i] = silu_f(g) * u;
        }
    }
}

// The routed down projections and their weighted sum, plus (optionally) the shared expert:
// y[r] = Σ_k weights[k] · (down_{ids[k]} · act[k, :])[r] + σ(gate_logit) · (down_s · act[n_ids, :])[r].
// Each block takes kGroupRows rows; its warps take the tasks (warp t: routed expert t, the last
// warp the shared expert) and their partial sums meet in shared memory in task order. blockIdx.y is the
// token: its ids, weights, gate logit and y row, and its act act_stride floats after the one before.
constexpr int kMaxDownWarps = 16;

template <bool kVector>
__global__ void __launch_bounds__(32 * kMaxDownWarps)
    moe_down_kernel(const DevWeight* table, const int32_t* ids, const float* weights, int64_t n_ids,
                    SharedExpert shared, int64_t rows, int64_t cols, const float* act, float* y,
                    int64_t act_stride) {
    grid_dependency_wait();  // ids and act come from the kernels before
    allow_dependents();
    const int64_t token = blockIdx.y;  // (scalars: no reference to a parameter, see matvec_multi_kernel)
    ids += token * n_ids;
    weights += token * n_ids;
    act += token * act_stride;
    y += token * rows;
    const float* gate_logit = shared.gate_logit != nullptr ? shared.gate_logit + token : nullptr;
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kGroupRows;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    const int64_t n_tasks = n_ids + (shared.down.data != nullptr ? 1 : 0);
    float total[kGroupRows] = {};
    for (int64_t t = warp; t < n_tasks; t += n_warps) {
        const bool is_shared = t == n_ids;
        DevWeight w;
        if (is_shared) {
            w = shared.down;
        } else {
            w = table[static_cast<int64_t>(ids[t]) * 3 + 2];
        }
        const float* x = act + t * cols;  // the shared expert's act follows the routed ones
        float out[kGroupRows];
        if constexpr (kVector) {
            RowSet<kGroupRows> rs;
            const RowShape shape = row_shape(w);
#pragma unroll
            for (int i = 0; i < kGroupRows; ++i) set_row(rs, i, w, shape, r0 + i);
            rowset_dot_any<1>(rs, w, x, lane, 32, out);
#pragma unroll
            for (int i = 0; i < kGroupRows; ++i) out[i] = warp_sum(out[i]);
        } else if (is_ggml(w.type)) {
            const uint8_t* rws[kGroupRows];
            const int64_t row_bytes = ggml_row_bytes(w);
#pragma unroll
            for (int i = 0; i < kGroupRows; ++i)
                rws[i] =
                    static_cast<const uint8_t*>(w.data) + (r0 + i < rows ? r0 + i : rows - 1) * row_bytes;
            ggml_rows_dot<kGroupRows>(w.type, rws, w.cols / 32, x, lane, out);
#pragma unroll
            for (int i = 0; i < kGroupRows; ++i) out[i] = r0 + i < rows ? warp_sum(out[i]) : 0.0f;
        } else {
#pragma unroll
            for (int i = 0; i < kGroupRows; ++i) out[i] = r0 + i < rows ? row_dot(w, r0 + i, x, lane) : 0.0f;
        }
        const float wk = is_shared ? (gate_logit != nullptr ? sigmoid_f(*gate_logit) : 1.0f) : weights[t];
#pragma unroll
        for (int i = 0; i < kGroupRows; ++i) total[i] += wk * out[i];
    }
    __shared__ float part[kMaxDownWarps][kGroupRows];
    if (lane == 0)
#pragma unroll
        for (int i = 0; i < kGroupRows; ++i) part[warp][i] = total[i];
    __syncthreads();
    if (threadIdx.x < kGroupRows && r0 + threadIdx.x < rows) {
        float sum = 0.0f;
        for (int j = 0; j < n_warps; ++j) sum += part[j][threadIdx.x];
        y[r0 + threadIdx.x] = sum;
    }
}

__device__ __forceinline__ float half_warp_sum(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// moe_down_kernel on the chunk path: every task's act staged in shared memory, one warp per task
// whose two half-warps take 4 rows each, a lane one chunk of each row per step (the experts' 512-column
// rows are 16 chunks of 4-bit codes: one load per row and lane). Requires one task per warp.
constexpr int kDownChunkRows = 2 * kGroupRows;
__global__ void __launch_bounds__(32 * kMaxDownWarps)
    moe_down_chunks_kernel(const DevWeight* table, const int32_t* ids, const float* weights, int64_t n_ids,
                           SharedExpert shared, int64_t rows, int64_t cols, const float* act, float* y,
                           int64_t act_stride) {
    extern __shared__ float4 staged[];
    grid_dependency_wait();  // ids and act come from the kernels before
    allow_dependents();
    const int64_t token = blockIdx.y;  // (scalars: no reference to a parameter, see matvec_multi_kernel)
    ids += token * n_ids;
    weights += token * n_ids;
    act += token * act_stride;
    y += token * rows;
    const float* gate_logit = shared.gate_logit != nullptr ? shared.gate_logit + token : nullptr;
    float* xs = reinterpret_cast<float*>(staged);
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kDownChunkRows;
    const int lane = threadIdx.x % 32, t = threadIdx.x / 32, half = lane / 16;
    const int n_tasks = static_cast<int>(blockDim.x / 32);
    // The shared expert's act (slot n_ids) has its own width.
    const int64_t shared_cols = shared.down.data != nullptr ? shared.down.cols : 0;
    const int64_t stride = staged_floats(cols > shared_cols ? cols : shared_cols);
    for (int task = 0; task < n_tasks; ++task)
        stage_async(xs + task * stride, act + task * cols, task == n_ids ? shared_cols : cols);
    const bool is_shared = t == n_ids;
    const DevWeight w = is_shared ? shared.down : table[static_cast<int64_t>(ids[t]) * 3 + 2];
    RowSet<kGroupRows> rs;
    const RowShape shape = row_shape(w);
#pragma unroll
    for (int i = 0; i < kGroupRows; ++i) set_row(rs, i, w, shape, r0 + half * kGroupRows + i);
    float out[kGroupRows];
    rowset_dot_chunks_any<false>(rs, w, xs + t * stride, lane % 16, 16, StagedCopy{}, out);
    const float wk = is_shared ? (gate_logit != nullptr ? sigmoid_f(*gate_logit) : 1.0f) : weights[t];
    __shared__ float part[kMaxDownWarps][kDownChunkRows];
#pragma unroll
    for (int i = 0; i < kGroupRows; ++i) {
        const float v = half_warp_sum(out[i]);
        if (lane % 16 == 0) part[t][half * kGroupRows + i] = wk * v;
    }
    __syncthreads();
    if (threadIdx.x < kDownChunkRows && r0 + threadIdx.x < rows) {
        float sum = 0.0f;
        for (int j = 0; j < n_tasks; ++j) sum += part[j][threadIdx.x];
        y[r0 + threadIdx.x] = sum;
    }
}

// ---- logits summary --------------------------------------------------------------------------------
constexpr int kSummaryBlocks = 128;

// (max, Σ exp(l − max), index of the first max) merged; an empty side has max −∞.
struct Lse {
    float max;
    float sum;
    int32_t arg;
};

__device__ __forceinline__ Lse lse_merge(Lse a, Lse b) {
    if (b.max == -INFINITY) return a;
    if (a.max == -INFINITY) return b;
    const float m = fmaxf(a.max, b.max);
    Lse out;
    out.max = m;
    out.sum = a.sum * expf(a.max - m) + b.sum * expf(b.max - m);
    out.arg = a.max > b.max ? a.arg : (b.max > a.max ? b.arg : min(a.arg, b.arg));
    return out;
}

// lse_merge over a warp's lanes (every lane gets the result).
__device__ __forceinline__ Lse warp_lse(Lse v) {
    for (int o = 16; o > 0; o >>= 1) {
        Lse other;
        other.max = __shfl_xor_sync(0xffffffffu, v.max, o);
        other.sum = __shfl_xor_sync(0xffffffffu, v.sum, o);
        other.arg = __shfl_xor_sync(0xffffffffu, v.arg, o);
        v = lse_merge(v, other);
    }
    return v;
}

__device__ Lse block_lse(Lse v) {
    v = warp_lse(v);
    __shared__ Lse part[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = warp_lse(lane < static_cast<int>(blockDim.x / 32) ? part[lane] : Lse{-INFINITY, 0.0f, 0});
    }
    return v;  // valid on thread 0
}

__global__ void logits_summary_kernel(const float* logits, int64_t n, float* partial, unsigned* counter,
                                      DevLogitsSummary* out) {
    Lse v{-INFINITY, 0.0f, 0};
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float l = logits[i];
        if (l > v.max) {  // strictly: the first index of a tie stays
            v.sum = v.max == -INFINITY ? 1.0f : v.sum * expf(v.max - l) + 1.0f;
            v.max = l;
            v.arg = static_cast<int32_t>(i);
        } else if (l != -INFINITY) {
            v.sum += expf(l - v.max);
        }
    }
    v = block_lse(v);
    __shared__ bool last;
    if (threadIdx.x == 0) {
        partial[3 * blockIdx.x] = v.max;
        partial[3 * blockIdx.x + 1] = v.sum;
        partial[3 * blockIdx.x + 2] = __int_as_float(v.arg);
        __threadfence();
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    Lse m{-INFINITY, 0.0f, 0};
    for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x)
        m = lse_merge(m, Lse{__ldcg(partial + 3 * b), __ldcg(partial + 3 * b + 1),
                             __float_as_int(__ldcg(partial + 3 * b + 2))});
    m = block_lse(m);
    if (threadIdx.x == 0) {
        out->max = m.max;
        out->sum_exp = m.sum;
        out->argmax = m.arg;
        *counter = 0;
    }
}

// y = down · (silu(gate) ⊙ up); mix = y, or mix += sigmoid(*gate_logit) · y.
__global__ void swiglu_down_kernel(DevWeight param, const float* gate, const float* up,
                                   const float* gate_logit, float* mix) {
    const DevWeight w = param;      // a register copy (see matvec_multi_kernel)
    extern __shared__ float act[];  // [cols]
    for (int64_t i = threadIdx.x; i < w.cols; i += blockDim.x) act[i] = silu_f(gate[i]) * up[i];
    __syncthreads();
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (r >= w.rows) return;
    const float v = row_dot(w, r, act, threadIdx.x % 32);
    if (threadIdx.x % 32 == 0) mix[r] = gate_logit != nullptr ? mix[r] + sigmoid_f(*gate_logit) * v : v;
}

// ---- decode launchers ------------------------------------------------------------------------------
// The occupancy the split rule assumes: x of 4096 columns staged.
const size_t kTypicalStagedBytes = staged_bytes(4096);

}  // namespace

void dequantize_rows(const DevWeight& w, const int32_t* ids, int64_t n, float* out, cudaStream_t s) {
    if (n == 0) return;
    dequantize_rows_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(w, ids, out);
}

LaunchContext make_launch_context(int device, int forced_split, bool tensor_cores, bool dependent_launch) {
    LaunchContext ctx;
    cudaSetDevice(device);
    int sms = 0, major = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    ctx.sm_count = sms > 0 ? sms : 1;
    // Occupancy bounds the decode products, so the chunk-path instances are the ones the split rule
    // reads (x of 4096 columns staged); queried for this device, once per backend.
    ctx.matvec_occupancy = {resident_blocks(matvec_multi_kernel<1, false, true>, kTypicalStagedBytes),
                            resident_blocks(matvec_multi_kernel<2, false, true>, kTypicalStagedBytes),
                            resident_blocks(matvec_multi_kernel<4, false, true>, kTypicalStagedBytes),
                            resident_blocks(matvec_multi_kernel<8, false, true>, kTypicalStagedBytes)};
    ctx.gate_up_occupancy = {resident_blocks(moe_gate_up_kernel<1, true, true>, kTypicalStagedBytes),
                             resident_blocks(moe_gate_up_kernel<2, true, true>, kTypicalStagedBytes),
                             resident_blocks(moe_gate_up_kernel<4, true, true>, kTypicalStagedBytes),
                             resident_blocks(moe_gate_up_kernel<8, true, true>, kTypicalStagedBytes)};
    ctx.forced_split =
        forced_split == 1 || forced_split == 2 || forced_split == 4 || forced_split == 8 ? forced_split : 0;
    ctx.tensor_cores = tensor_cores;
    ctx.dependent_launch = dependent_launch && major >= 9;
    int optin = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    ctx.staged_limit = std::clamp<size_t>(static_cast<size_t>(optin), 48 * 1024, kMaxStagedBytes);
    return ctx;
}

void matvec(const LaunchContext& ctx, const DevWeight& w, const float* x, float* y, cudaStream_t s) {
    MatvecMulti m;
    m.add(w, y);
    matvec_multi(ctx, m, x, s);
}

void matvec_multi(const LaunchContext& ctx, const MatvecMulti& m, const float* x, cudaStream_t s) {
    int64_t rows = 0, groups = 0, chunks = 0;
    bool vector = true, ggml = false;
    for (int i = 0; i < m.n; ++i) {
        rows = std::max(rows, m.w[i].rows);
        groups += (m.w[i].rows + kGroupRows - 1) / kGroupRows;
        chunks = std::max(chunks, chunks_of(ctx, m.w[i]));
        vector = vector && chunk_path(ctx, m.w[i]);
        ggml = ggml || is_ggml(m.w[i].type);
    }
    if (m.n == 0 || rows == 0) return;
    if (m.norm.weight != nullptr && !vector) {  // the residual add and norm as their own launch
        add_rms_norm_to(m.norm.resid_in, m.norm.add, m.norm.weight, 1, m.w[0].cols, m.norm.eps,
                        m.norm.resid_out, m.norm.norm_out, s);
        MatvecMulti plain = m;
        plain.norm = NormIn{};
        matvec_multi(ctx, plain, m.norm.norm_out, s);
        return;
    }
    // Every weight of a launch multiplies the same x (cols); the chunk path stages it.
    const size_t smem = vector ? staged_bytes(m.w[0].cols) : 0;
    const int split =
        vector ? split_for(ctx, groups, chunks, ctx.matvec_occupancy) : generic_split(ctx, groups, ggml);
    with_split(split, [&](auto S) {
        const dim3 grid(grid_for(rows, static_cast<int>(rows_per_block(S))), static_cast<unsigned>(m.n));
        const bool topk = m.topk.counter != nullptr;
        const bool norm = m.norm.weight != nullptr;
        const dim3 block(32 * kWarps);
        if (topk && norm) {
            launch_dependent(ctx.dependent_launch, matvec_multi_kernel<S, true, true, true>, grid, block,
                             smem, s, m, x);
        } else if (norm) {
            launch_dependent(ctx.dependent_launch, matvec_multi_kernel<S, false, true, true>, grid, block,
                             smem, s, m, x);
        } else if (topk && vector) {
            launch_dependent(ctx.dependent_launch, matvec_multi_kernel<S, true, true>, grid, block, smem, s,
                             m, x);
        } else if (topk) {
            launch_dependent(ctx.dependent_launch, matvec_multi_kernel<S, true, false>, grid, block, 0, s, m,
                             x);
        } else if (vector) {
            launch_dependent(ctx.dependent_launch, matvec_multi_kernel<S, false, true>, grid, block, smem, s,
                             m, x);
        } else {
            launch_dependent(ctx.dependent_launch, matvec_multi_kernel<S, false, false>, grid, block, 0, s, m,
                             x);
        }
    });
}

void moe_matvec_gate_up(const LaunchContext& ctx, const DevWeight* table, const int32_t* ids, int64_t n_ids,
                        int64_t rows, int64_t cols, const float* x, float* gate, float* up, float* act,
                        const SharedExpert* shared, bool quant_vector, cudaStream_t s, int64_t n_tokens) {
    const bool fused = act != nullptr;
    const SharedExpert sh = fused && shared != nullptr ? *shared : SharedExpert{};
    const int64_t slices = n_ids + (sh.gate.data != nullptr ? 1 : 0);
    const int64_t max_rows = std::max(rows, sh.gate.rows);
    if (slices == 0 || max_rows == 0 || n_tokens <= 0) return;
    const int64_t out_stride = n_ids * rows + (sh.gate.data != nullptr ? sh.gate.rows : 0);
    const int64_t group_rows = fused ? kGroupRows / 2 : kGroupRows;
    // The split of one token's launch, whatever n_tokens: each token's sums are then its own launch's.
    const int64_t groups = (max_rows + group_rows - 1) / group_rows * slices * (fused ? 1 : 2);
    quant_vector = quant_vector && staged_bytes(cols) <= ctx.staged_limit;
    const size_t smem = quant_vector ? staged_bytes(cols) : 0;
    // The split is chosen for 4-bit codes (cols / 32 chunks): the experts' type is on the device.
    with_split(split_for(ctx, groups, quant_vector ? cols / 32 : 0, ctx.gate_up_occupancy), [&](auto S) {
        const dim3 grid(grid_for(max_rows, static_cast<int>(rows_per_block(S, group_rows))),
                        static_cast<unsigned>(slices * n_tokens), fused ? 1 : 2);
        auto launch = [&](auto kernel) {
            launch_dependent(ctx.dependent_launch, kernel, grid, dim3(32 * kWarps), smem, s, table, ids,
                             n_ids, rows, sh, x, cols, gate, up, act, out_stride);
        };
        if (fused && quant_vector) {
            launch(moe_gate_up_kernel<S, true, true>);
        } else if (fused) {
            launch(moe_gate_up_kernel<S, true, false>);
        } else if (quant_vector) {
            launch(moe_gate_up_kernel<S, false, true>);
        } else {
            launch(moe_gate_up_kernel<S, false, false>);
        }
    });
}

bool vector_layout(const DevWeight& w) {
    return quant_vector_layout(w);
}

bool swiglu_fits(int64_t act_floats) {
    return act_floats * static_cast<int64_t>(sizeof(float)) <= 40 * 1024;
}

void swiglu_down_matvec(const DevWeight& down, const float* gate, const float* up, const float* gate_logit,
                        float* mix, cudaStream_t s) {
    const size_t smem = static_cast<size_t>(down.cols) * sizeof(float);
    swiglu_down_kernel<<<grid_for(down.rows, kWarps), 32 * kWarps, smem, s>>>(down, gate, up, gate_logit,
                                                                              mix);
}

void moe_down_matvec(const LaunchContext& ctx, const DevWeight* table, const int32_t* ids,
                     const float* weights, int64_t n_ids, int64_t rows, int64_t cols, const float* act,
                     const SharedExpert* shared, bool quant_vector, float* y, cudaStream_t s,
                     int64_t n_tokens) {
    if (rows == 0 || n_tokens <= 0) return;
    SharedExpert folded;
    if (shared != nullptr) folded = *shared;
    const int64_t tasks = n_ids + (shared != nullptr ? 1 : 0);
    const int64_t act_stride = n_ids * cols + (shared != nullptr ? shared->down.cols : 0);
    const auto tokens = static_cast<unsigned>(n_tokens);
    const int warps = static_cast<int>(std::clamp<int64_t>(tasks, 1, kMaxDownWarps));
    const size_t smem =
        static_cast<size_t>(tasks) * staged_bytes(std::max(cols, shared != nullptr ? shared->down.cols : 0));
    if (quant_vector && tasks <= kMaxDownWarps && smem <= ctx.staged_limit) {
        launch_dependent(ctx.dependent_launch, moe_down_chunks_kernel,
                         dim3(grid_for(rows, kDownChunkRows), tokens), dim3(32 * warps), smem, s, table, ids,
                         weights, n_ids, folded, rows, cols, act, y, act_stride);
    } else if (quant_vector) {
        launch_dependent(ctx.dependent_launch, moe_down_kernel<true>,
                         dim3(grid_for(rows, kGroupRows), tokens), dim3(32 * warps), 0, s, table, ids,
                         weights, n_ids, folded, rows, cols, act, y, act_stride);
    } else {
        launch_dependent(ctx.dependent_launch, moe_down_kernel<false>,
                         dim3(grid_for(rows, kGroupRows), tokens), dim3(32 * warps), 0, s, table, ids,
                         weights, n_ids, folded, rows, cols, act, y, act_stride);
    }
}

void logits_summary(const float* logits, int64_t n, float* partial, unsigned* counter, DevLogitsSummary* out,
                    cudaStream_t s) {
    if (n == 0) return;
    const unsigned blocks = std::min<unsigned>(kSummaryBlocks, grid_for(n, 4 * 256));
    logits_summary_kernel<<<blocks, 256, 0, s>>>(logits, n, partial, counter, out);
}

int64_t logits_summary_scratch_floats() {
    return 3 * kSummaryBlocks;
}

const char* last_error() {
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace sluice::cuda
