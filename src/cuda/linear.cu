// Linear kernels: embedding rows, matrix-vector products for decode (one warp per 4 output rows
// for 4/8-bit codes, which lanes read as interleaved 32-bit words so both the weight and the x loads
// of a warp are contiguous; 16-bit floats read 16 bytes per lane; the affine bias folded per group
// as s·Σq·x + b·Σx), tiled matrix products for prefill (f32 SIMT, W dequantized into shared memory
// per 64×32 tile), and their grouped MoE forms that pick each expert's weights from a device
// table by routed id, so a decode step needs no host round trip and can be captured in a graph.
//
// Rejected: bf16/tf32 tensor-core products for prefill. They are several times faster, but
// rounding activations to 8–10 mantissa bits breaks the goldens' 2e-3 logit tolerance that the
// CPU meets in f32; a tensor-core path belongs behind an explicit precision choice.
#include "cuda/common.cuh"

namespace sluice::cuda {
namespace {

constexpr int kRowsPerBlock = 8;     // one warp per row, 256 threads
constexpr int kMaxDownExperts = 32;  // routed experts per token the fused down projection takes

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

// R consecutive rows r0.. of a quantized W against x, each x load reused for all R rows. The lane
// takes the 32-bit words v0, v0 + step, … of every row (a warp alone: v0 = lane, step 32; a block
// splitting the columns among its warps: v0 = 32·warp + lane, step 32·warps), so a warp's weight load is 128
// contiguous bytes per row and its x load 32 × 16 (8-bit) or 32 × 32 (4-bit) contiguous bytes. (The earlier
// form gave each lane 4 consecutive words, i.e. 128 contiguous bytes of x per lane: every 16-byte x
// load of the warp then touched 32 different cache lines, and L1 wavefronts, not HBM, bounded the
// 248k-row lm_head at 0.5 TB/s.) Requires cols and group_size to be multiples of the codes per
// word. out[i] holds the warp sum for row r0 + i (rows ≥ w.rows contribute 0).
template <int kBits, int R>
__device__ void rows_dot_quant(const DevWeight& w, int64_t r0, const float* __restrict__ x, int64_t v0,
                               int64_t step, float* out) {
    constexpr int kPerWord = 32 / kBits;
    constexpr uint32_t kMask = (1u << kBits) - 1u;
    const int64_t words = w.cols / kPerWord;
    const int64_t groups = w.cols / w.group_size;
    const int64_t words_per_group = w.group_size / kPerWord;
    const uint32_t* data = static_cast<const uint32_t*>(w.data);
    float acc[R];
#pragma unroll
    for (int i = 0; i < R; ++i) acc[i] = 0.0f;
#pragma unroll 4
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
        // All R rows' words and scales are loaded before any arithmetic (rows past the end are
        // clamped to the last one and dropped by the caller), so R loads are in flight at once.
        uint32_t q[R];
        float sc[R], bi[R];
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const int64_t r = r0 + i < w.rows ? r0 + i : w.rows - 1;
            q[i] = data[r * words + v];
            sc[i] = load_scale(w.scales, w.scale_type, r * groups + g);
            bi[i] = load_scale(w.biases, w.scale_type, r * groups + g);
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
#pragma unroll
    for (int i = 0; i < R; ++i) out[i] = warp_sum(acc[i]);
}

__host__ __device__ bool quant_vector_layout(const DevWeight& w) {
    if (w.type != WeightType::kQ4 && w.type != WeightType::kQ8) return false;
    const int per_word = w.type == WeightType::kQ4 ? 8 : 4;
    return w.cols % per_word == 0 && w.group_size >= per_word && w.group_size % per_word == 0;
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
    switch (w.type) {
        case WeightType::kQ4: return row_dot_quant<4>(w, r, x, lane);
        case WeightType::kQ8: return row_dot_quant<8>(w, r, x, lane);
        default: return row_dot_float(w, r, x, lane);
    }
}

// This lane's share of row_dot (the caller reduces over the warp).
__device__ float row_dot_lane(const DevWeight& w, int64_t r, const float* __restrict__ x, int lane) {
    switch (w.type) {
        case WeightType::kQ4: return row_dot_quant<4, false>(w, r, x, lane);
        case WeightType::kQ8: return row_dot_quant<8, false>(w, r, x, lane);
        default: return row_dot_float<false>(w, r, x, lane);
    }
}

__global__ void dequantize_rows_kernel(DevWeight w, const int32_t* ids, float* out) {
    const int64_t t = blockIdx.x;
    const int64_t r = ids[t];
    for (int64_t i = threadIdx.x; i < w.cols; i += blockDim.x) out[t * w.cols + i] = weight_at(w, r, i);
}

constexpr int kRowsPerWarp = 4;  // matvec / matvec_multi: rows sharing one warp's x loads

// Rows [r0, r0 + kRowsPerWarp) of W · x into y, by one warp.
__device__ void warp_rows(const DevWeight& w, int64_t r0, const float* x, float* y) {
    const int lane = threadIdx.x % 32;
    if (quant_vector_layout(w)) {
        float out[kRowsPerWarp];
        if (w.type == WeightType::kQ4) {
            rows_dot_quant<4, kRowsPerWarp>(w, r0, x, lane, 32, out);
        } else {
            rows_dot_quant<8, kRowsPerWarp>(w, r0, x, lane, 32, out);
        }
        if (lane == 0)
            for (int i = 0; i < kRowsPerWarp && r0 + i < w.rows; ++i) y[r0 + i] = out[i];
        return;
    }
    for (int i = 0; i < kRowsPerWarp && r0 + i < w.rows; ++i) {
        const float v = row_dot(w, r0 + i, x, lane);
        if (lane == 0) y[r0 + i] = v;
    }
}

// Launches with few rows in all give warp_rows too few warps to keep enough loads in flight (a
// 2048-row projection is 512 warps, ~4 per SM: 20.5 µs on the H200). The split form gives each
// block kSplitRows rows and lets its kRowsPerBlock warps split the columns; the partial sums meet
// in shared memory (8× the warps for the same rows: 9.9 µs). With many rows the split blocks get
// too little work each and lose (the 35B's DeltaNet inputs, 3 matrices of up to 8192 rows: 30 µs
// warp_rows, 62 µs split), hence the bound on the launch's rows over all its matrices (ncu,
// session 3).
constexpr int kSplitRows = 4;
constexpr int64_t kSplitMaxRows = 4096;

bool use_split(int64_t total_rows) {
    return total_rows <= kSplitMaxRows;
}

// Rows [r0, r0 + kSplitRows) of W · x into y, by the whole block (r0 uniform over the block).
__device__ void block_rows(const DevWeight& w, int64_t r0, const float* x, float* y) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (!quant_vector_layout(w)) {  // float weights: one row per warp
        if (warp < kSplitRows && r0 + warp < w.rows) {
            const float v = row_dot(w, r0 + warp, x, lane);
            if (lane == 0) y[r0 + warp] = v;
        }
        return;
    }
    __shared__ float part[kRowsPerBlock][kSplitRows];
    float out[kSplitRows];
    if (w.type == WeightType::kQ4) {
        rows_dot_quant<4, kSplitRows>(w, r0, x, 32 * warp + lane, 32 * kRowsPerBlock, out);
    } else {
        rows_dot_quant<8, kSplitRows>(w, r0, x, 32 * warp + lane, 32 * kRowsPerBlock, out);
    }
    if (lane == 0)
        for (int i = 0; i < kSplitRows; ++i) part[warp][i] = out[i];
    __syncthreads();
    if (threadIdx.x < kSplitRows && r0 + threadIdx.x < w.rows) {
        float sum = 0.0f;
        for (int i = 0; i < kRowsPerBlock; ++i) sum += part[i][threadIdx.x];
        y[r0 + threadIdx.x] = sum;
    }
}

// The first row of this block (split) or of this warp (warp_rows).
__device__ int64_t first_row(bool split) {
    return split ? static_cast<int64_t>(blockIdx.x) * kSplitRows
                 : (static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32) * kRowsPerWarp;
}

__device__ void rows_of(bool split, const DevWeight& w, int64_t r0, const float* x, float* y) {
    if (split) {
        block_rows(w, r0, x, y);
    } else {
        warp_rows(w, r0, x, y);
    }
}

unsigned matvec_grid(int64_t rows, bool split) {
    return split ? grid_for(rows, kSplitRows) : grid_for(rows, kRowsPerBlock * kRowsPerWarp);
}

__global__ void matvec_kernel(DevWeight w, const float* x, float* y, bool split) {
    const int64_t r0 = first_row(split);
    if (r0 >= w.rows) return;  // uniform over the block when split
    rows_of(split, w, r0, x, y);
}

__global__ void moe_matvec_kernel(const DevWeight* table, int which, const int32_t* ids, int64_t rows,
                                  const float* x, float* y, float* y2, bool split) {
    const int64_t r0 = first_row(split);
    if (r0 >= rows) return;
    const int64_t k = blockIdx.y;
    const DevWeight w = table[ids[k] * 3 + which + blockIdx.z];
    rows_of(split, w, r0, x, (blockIdx.z == 0 ? y : y2) + k * rows);
}

__global__ void matvec_multi_kernel(MatvecMulti m, const float* x, bool split) {
    const DevWeight w = m.w[blockIdx.y];
    const int64_t r0 = first_row(split);
    if (r0 >= w.rows) return;
    rows_of(split, w, r0, x, m.y[blockIdx.y]);
}

// act = silu(gate) ⊙ up is formed in shared memory by every block (it is small: k·I floats).
__global__ void moe_down_swiglu_kernel(const DevWeight* table, const int32_t* ids, const float* weights,
                                       int64_t n_ids, int64_t rows, int64_t cols, const float* gate,
                                       const float* up, float* y) {
    extern __shared__ float act[];  // [n_ids, cols]
    __shared__ DevWeight down[kMaxDownExperts];
    __shared__ float wk[kMaxDownExperts];
    for (int64_t i = threadIdx.x; i < n_ids * cols; i += blockDim.x) act[i] = silu_f(gate[i]) * up[i];
    if (threadIdx.x < n_ids) {
        down[threadIdx.x] = table[ids[threadIdx.x] * 3 + 2];
        wk[threadIdx.x] = weights[threadIdx.x];
    }
    __syncthreads();
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    if (r >= rows) return;
    // Every k's row read is independent: issue them all, reduce once.
    float acc = 0.0f;
#pragma unroll 4
    for (int64_t k = 0; k < n_ids; ++k)
        acc += wk[k] * row_dot_lane(down[k], r, act + k * cols, threadIdx.x % 32);
    acc = warp_sum(acc);
    if (threadIdx.x % 32 == 0) y[r] = acc;
}

// y = down · (silu(gate) ⊙ up); mix = y, or mix += sigmoid(*gate_logit) · y.
__global__ void swiglu_down_kernel(DevWeight w, const float* gate, const float* up, const float* gate_logit,
                                   float* mix) {
    extern __shared__ float act[];  // [cols]
    for (int64_t i = threadIdx.x; i < w.cols; i += blockDim.x) act[i] = silu_f(gate[i]) * up[i];
    __syncthreads();
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    if (r >= w.rows) return;
    const float v = row_dot(w, r, act, threadIdx.x % 32);
    if (threadIdx.x % 32 == 0) mix[r] = gate_logit != nullptr ? mix[r] + sigmoid_f(*gate_logit) * v : v;
}

// The routed down projection with quantized experts: each block takes kSplitRows rows, its warps
// take the experts (warp w: experts w, w + warps, …), and the weighted partial sums meet in shared
// memory. act is formed beforehand (swiglu), so no block recomputes it.
__global__ void moe_down_split_kernel(const DevWeight* table, const int32_t* ids, const float* weights,
                                      int64_t n_ids, int64_t rows, int64_t cols, const float* act, float* y) {
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kSplitRows;
    if (r0 >= rows) return;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float acc[kSplitRows] = {};
    for (int64_t k = warp; k < n_ids; k += kRowsPerBlock) {
        const DevWeight w = table[ids[k] * 3 + 2];
        float out[kSplitRows];
        if (w.type == WeightType::kQ4) {
            rows_dot_quant<4, kSplitRows>(w, r0, act + k * cols, lane, 32, out);
        } else {
            rows_dot_quant<8, kSplitRows>(w, r0, act + k * cols, lane, 32, out);
        }
        const float wk = weights[k];
        for (int i = 0; i < kSplitRows; ++i) acc[i] += wk * out[i];
    }
    __shared__ float part[kRowsPerBlock][kSplitRows];
    if (lane == 0)
        for (int i = 0; i < kSplitRows; ++i) part[warp][i] = acc[i];
    __syncthreads();
    if (threadIdx.x < kSplitRows && r0 + threadIdx.x < rows) {
        float sum = 0.0f;
        for (int i = 0; i < kRowsPerBlock; ++i) sum += part[i][threadIdx.x];
        y[r0 + threadIdx.x] = sum;
    }
}

__global__ void moe_down_matvec_kernel(const DevWeight* table, const int32_t* ids, const float* weights,
                                       int64_t n_ids, int64_t rows, int64_t cols, const float* act,
                                       float* y) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    if (r >= rows) return;
    float acc = 0.0f;
    for (int64_t k = 0; k < n_ids; ++k) {
        const DevWeight w = table[ids[k] * 3 + 2];
        acc += weights[k] * row_dot(w, r, act + k * cols, threadIdx.x % 32);
    }
    if (threadIdx.x % 32 == 0) y[r] = acc;
}

// ---- tiled matmul ---------------------------------------------------------------------------
constexpr int kBM = 64;  // tokens per tile
constexpr int kBN = 64;  // weight rows per tile
constexpr int kBK = 32;  // inputs per step
constexpr int kMatmulThreads = 256;

// One grid z-slice per expert (or one for a dense weight). Rows of the slice are [begin, end) of
// the (permuted) token list; block y strides over its 64-token tiles.
__global__ void __launch_bounds__(kMatmulThreads)
    matmul_kernel(DevWeight dense, const DevWeight* table, int which, const int32_t* offsets,
                  const int32_t* order, int64_t n, bool gather, int64_t x_div, bool scatter,
                  const float* __restrict__ x, float* __restrict__ y) {
    const DevWeight w = table != nullptr ? table[blockIdx.z * 3 + which] : dense;
    const bool quantized_full_tiles = (w.type == WeightType::kQ4 || w.type == WeightType::kQ8) &&
                                      w.cols % kBK == 0 && w.group_size % 8 == 0;
    const int64_t begin = offsets != nullptr ? offsets[blockIdx.z] : 0;
    const int64_t end = offsets != nullptr ? offsets[blockIdx.z + 1] : n;
    const int64_t rows = w.rows, cols = w.cols;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kBN;
    __shared__ __align__(16) float xs[kBK][kBM + 4];
    __shared__ __align__(16) float ws[kBK][kBN + 4];
    const int tid = threadIdx.x;
    const int tx = tid % 16, ty = tid / 16;  // 4 rows × 4 tokens per thread
    for (int64_t m0 = begin + static_cast<int64_t>(blockIdx.y) * kBM; m0 < end;
         m0 += static_cast<int64_t>(gridDim.y) * kBM) {
        float acc[4][4] = {};
        for (int64_t k0 = 0; k0 < cols; k0 += kBK) {
            for (int e = tid; e < kBM * kBK; e += kMatmulThreads) {
                const int mm = e / kBK, kk = e % kBK;
                const int64_t m = m0 + mm;
                float v = 0.0f;
                if (m < end && k0 + kk < cols) {
                    const int64_t src = gather ? order[m] / x_div : m;
                    v = x[src * cols + k0 + kk];
                }
                xs[kk][mm] = v;
            }
            if (quantized_full_tiles) {
                // One 32-bit word (8 or 4 codes, one group) per thread per step.
                const int bits = w.type == WeightType::kQ4 ? 4 : 8;
                const int per_word = 32 / bits;
                const int words_per_row = kBK / per_word;
                const uint32_t mask = (1u << bits) - 1u;
                const int64_t row_words = cols / per_word;
                for (int e = tid; e < kBN * words_per_row; e += kMatmulThreads) {
                    const int rr = e / words_per_row, wk = e % words_per_row;
                    const int64_t r = row0 + rr;
                    if (r < rows) {
                        const uint32_t word =
                            static_cast<const uint32_t*>(w.data)[r * row_words + k0 / per_word + wk];
                        const int64_t g = r * (cols / w.group_size) + (k0 + wk * per_word) / w.group_size;
                        const float sc = load_scale(w.scales, w.scale_type, g);
                        const float bi = load_scale(w.biases, w.scale_type, g);
                        for (int c = 0; c < per_word; ++c)
                            ws[wk * per_word + c][rr] =
                                sc * static_cast<float>((word >> (bits * c)) & mask) + bi;
                    } else {
                        for (int c = 0; c < per_word; ++c) ws[wk * per_word + c][rr] = 0.0f;
                    }
                }
            } else {
                for (int e = tid; e < kBN * kBK; e += kMatmulThreads) {
                    const int rr = e / kBK, kk = e % kBK;
                    const int64_t r = row0 + rr;
                    ws[kk][rr] = (r < rows && k0 + kk < cols) ? weight_at(w, r, k0 + kk) : 0.0f;
                }
            }
            __syncthreads();
#pragma unroll 8
            for (int kk = 0; kk < kBK; ++kk) {
                const float4 a = *reinterpret_cast<const float4*>(&xs[kk][ty * 4]);
                const float4 b = *reinterpret_cast<const float4*>(&ws[kk][tx * 4]);
                const float av[4] = {a.x, a.y, a.z, a.w};
                const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
            }
            __syncthreads();
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int64_t m = m0 + ty * 4 + i;
            if (m >= end) continue;
            const int64_t dst = scatter ? order[m] : m;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t r = row0 + tx * 4 + j;
                if (r < rows) y[dst * rows + r] = acc[i][j];
            }
        }
    }
}

__global__ void moe_group_kernel(const int32_t* ids, int64_t n_pairs, int64_t n_experts, int32_t* offsets,
                                 int32_t* order) {
    extern __shared__ int32_t counts[];  // [n_experts]
    for (int64_t e = threadIdx.x; e < n_experts; e += blockDim.x) counts[e] = 0;
    __syncthreads();
    for (int64_t p = threadIdx.x; p < n_pairs; p += blockDim.x) atomicAdd(&counts[ids[p]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t sum = 0;
        for (int64_t e = 0; e < n_experts; ++e) {
            offsets[e] = sum;
            const int32_t c = counts[e];
            counts[e] = sum;  // becomes the fill cursor
            sum += c;
        }
        offsets[n_experts] = sum;
    }
    __syncthreads();
    for (int64_t p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        const int32_t slot = atomicAdd(&counts[ids[p]], 1);
        order[slot] = static_cast<int32_t>(p);
    }
}

__global__ void moe_combine_kernel(const float* pair_out, const float* weights, int64_t k, int64_t dim,
                                   float* mix) {
    const int64_t t = blockIdx.x;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t j = 0; j < k; ++j) acc += weights[t * k + j] * pair_out[(t * k + j) * dim + d];
        mix[t * dim + d] = acc;
    }
}

}  // namespace

void dequantize_rows(const DevWeight& w, const int32_t* ids, int64_t n, float* out, cudaStream_t s) {
    if (n == 0) return;
    dequantize_rows_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(w, ids, out);
}

void matvec(const DevWeight& w, const float* x, float* y, cudaStream_t s) {
    const bool split = use_split(w.rows);
    matvec_kernel<<<matvec_grid(w.rows, split), 32 * kRowsPerBlock, 0, s>>>(w, x, y, split);
}

void matmul(const DevWeight& w, const float* x, int64_t n, float* y, cudaStream_t s) {
    if (n == 0) return;
    const dim3 grid(grid_for(w.rows, kBN), grid_for(n, kBM), 1);
    matmul_kernel<<<grid, kMatmulThreads, 0, s>>>(w, nullptr, 0, nullptr, nullptr, n, false, 1, false, x, y);
}

void moe_matvec(const DevWeight* table, int which, const int32_t* ids, int64_t n_ids, int64_t rows,
                int64_t /*cols*/, const float* x, float* y, cudaStream_t s) {
    const bool split = use_split(rows * n_ids);
    const dim3 grid(matvec_grid(rows, split), static_cast<unsigned>(n_ids));
    moe_matvec_kernel<<<grid, 32 * kRowsPerBlock, 0, s>>>(table, which, ids, rows, x, y, nullptr, split);
}

void moe_matvec_gate_up(const DevWeight* table, const int32_t* ids, int64_t n_ids, int64_t rows,
                        const float* x, float* gate, float* up, cudaStream_t s) {
    const bool split = use_split(2 * rows * n_ids);
    const dim3 grid(matvec_grid(rows, split), static_cast<unsigned>(n_ids), 2);
    moe_matvec_kernel<<<grid, 32 * kRowsPerBlock, 0, s>>>(table, 0, ids, rows, x, gate, up, split);
}

void matvec_multi(const MatvecMulti& m, const float* x, cudaStream_t s) {
    int64_t rows = 0;
    for (int i = 0; i < m.n; ++i) rows = rows > m.w[i].rows ? rows : m.w[i].rows;
    if (m.n == 0 || rows == 0) return;
    const bool split = use_split(rows * m.n);
    const dim3 grid(matvec_grid(rows, split), static_cast<unsigned>(m.n));
    matvec_multi_kernel<<<grid, 32 * kRowsPerBlock, 0, s>>>(m, x, split);
}

bool vector_layout(const DevWeight& w) {
    return quant_vector_layout(w);
}

bool swiglu_fits(int64_t act_floats) {
    return act_floats * static_cast<int64_t>(sizeof(float)) <= 40 * 1024;
}

void moe_down_swiglu_matvec(const DevWeight* table, const int32_t* ids, const float* weights, int64_t n_ids,
                            int64_t rows, int64_t cols, const float* gate, const float* up, float* y,
                            cudaStream_t s) {
    const size_t smem = static_cast<size_t>(n_ids * cols) * sizeof(float);
    moe_down_swiglu_kernel<<<grid_for(rows, kRowsPerBlock), 32 * kRowsPerBlock, smem, s>>>(
        table, ids, weights, n_ids, rows, cols, gate, up, y);
}

void swiglu_down_matvec(const DevWeight& down, const float* gate, const float* up, const float* gate_logit,
                        float* mix, cudaStream_t s) {
    const size_t smem = static_cast<size_t>(down.cols) * sizeof(float);
    swiglu_down_kernel<<<grid_for(down.rows, kRowsPerBlock), 32 * kRowsPerBlock, smem, s>>>(down, gate, up,
                                                                                            gate_logit, mix);
}

void moe_down_matvec(const DevWeight* table, const int32_t* ids, const float* weights, int64_t n_ids,
                     int64_t rows, int64_t cols, const float* act, float* y, bool quant_vector,
                     cudaStream_t s) {
    if (quant_vector) {
        moe_down_split_kernel<<<grid_for(rows, kSplitRows), 32 * kRowsPerBlock, 0, s>>>(
            table, ids, weights, n_ids, rows, cols, act, y);
        return;
    }
    moe_down_matvec_kernel<<<grid_for(rows, kRowsPerBlock), 32 * kRowsPerBlock, 0, s>>>(
        table, ids, weights, n_ids, rows, cols, act, y);
}

void moe_matmul(const DevWeight* table, int which, int64_t n_experts, const int32_t* offsets,
                const int32_t* order, int64_t n_pairs, bool gather, int64_t x_div, bool scatter, int64_t rows,
                int64_t cols, const float* x, float* y, cudaStream_t s) {
    if (n_pairs == 0) return;
    // Tiles per expert at uniform routing, doubled for skew; blocks stride over the rest.
    int64_t tiles = (2 * n_pairs + n_experts * kBM - 1) / (n_experts * kBM);
    tiles = tiles < 1 ? 1 : (tiles > 16 ? 16 : tiles);
    const dim3 grid(grid_for(rows, kBN), static_cast<unsigned>(tiles), static_cast<unsigned>(n_experts));
    DevWeight unused;
    unused.rows = rows;
    unused.cols = cols;
    matmul_kernel<<<grid, kMatmulThreads, 0, s>>>(unused, table, which, offsets, order, n_pairs, gather,
                                                  x_div, scatter, x, y);
}

void moe_group(const int32_t* ids, int64_t n_pairs, int64_t n_experts, int32_t* offsets, int32_t* order,
               cudaStream_t s) {
    moe_group_kernel<<<1, 1024, static_cast<size_t>(n_experts) * sizeof(int32_t), s>>>(
        ids, n_pairs, n_experts, offsets, order);
}

void moe_combine(const float* pair_out, const float* weights, int64_t n, int64_t k, int64_t dim, float* mix,
                 cudaStream_t s) {
    if (n == 0) return;
    moe_combine_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(pair_out, weights, k, dim, mix);
}

const char* last_error() {
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace sluice::cuda
