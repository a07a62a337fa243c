// Prefill's tiled matrix products at f32 accuracy: tensor cores by the 3xTF32 split (matmul_tc_kernel)
// and the f32 SIMT kernel as its twin (and for bisecting), in a dense form and a grouped MoE form that
// picks each expert's weights from a device table (moe_matmul over the pairs moe_group sorts by expert;
// moe_combine sums each token's weighted expert outputs). The decode products are linear.cu's; the int8
// tensor-core prefill is matmul_int8.cu's.
//
// Rejected: plain bf16 or tf32 tensor-core products for prefill. Rounding activations to 8–10
// mantissa bits breaks the goldens' 2e-3 logit tolerance that the CPU meets in f32; the split
// keeps 21 bits of each operand for 3 MMAs instead of 1, and the tensor cores have the headroom.
#include "kernels/cuda/device/common.cuh"
#include "kernels/cuda/device/ggml_dot.cuh"

namespace sluice::cuda {
namespace {

// ---- tiled matmul ---------------------------------------------------------------------------
constexpr int kBM = 64;  // tokens per tile
constexpr int kBN = 64;  // weight rows per tile
constexpr int kBK = 32;  // inputs per step
constexpr int kMatmulThreads = 256;

// A matmul grid's z-slice: one per expert (or one for a dense weight), whose rows are [begin, end)
// of the (permuted) token list.
struct MatmulSlice {
    DevWeight w;  // a register copy (see matvec_multi_kernel)
    int64_t begin, end;
};

__device__ __forceinline__ MatmulSlice matmul_slice(const DevWeight& dense, const DevWeight* table, int which,
                                                    const int32_t* offsets, int64_t n) {
    MatmulSlice s;
    if (table != nullptr) {
        s.w = table[blockIdx.z * 3 + which];
    } else {
        s.w = dense;
    }
    s.begin = offsets != nullptr ? offsets[blockIdx.z] : 0;
    s.end = offsets != nullptr ? offsets[blockIdx.z + 1] : n;
    return s;
}

// Block y strides over the slice's 64-token tiles.
__global__ void __launch_bounds__(kMatmulThreads)
    matmul_kernel(DevWeight dense, const DevWeight* table, int which, const int32_t* offsets,
                  const int32_t* order, int64_t n, bool gather, int64_t x_div, bool scatter,
                  const float* __restrict__ x, float* __restrict__ y) {
    const auto [w, begin, end] = matmul_slice(dense, table, which, offsets, n);
    const bool quantized_full_tiles = (w.type == WeightType::kQ4 || w.type == WeightType::kQ8) &&
                                      w.cols % kBK == 0 && w.group_size % 8 == 0;
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

// ---- tensor-core matmul (3xTF32) --------------------------------------------------------------------
// The prefill products on tensor cores at f32 accuracy: every operand a is split into a_hi =
// tf32(a) and a_lo = tf32(a − a_hi) (10 + 10 mantissa bits; the rest, ≤ 2⁻²²·|a|, is dropped), and
// x·w is taken as x_hi·w_hi + x_hi·w_lo + x_lo·w_hi with f32 accumulation (the dropped x_lo·w_lo is
// ≤ 2⁻²²·|x·w|). Weights are dequantized exactly as the SIMT kernel does (s·q + b in f32) before
// the split. Tiles: 64 tokens × 64 weight rows × 32 inputs per step; 8 warps of 32 × 16 outputs,
// each 2 × 2 mma.m16n8k8 tiles.
constexpr int kTcBM = 64, kTcBN = 64, kTcBK = 32, kTcThreads = 256;
constexpr int kTcStride = kTcBK + 4;  // 36 words per row: the fragment loads hit 32 distinct banks

__device__ __forceinline__ uint32_t to_tf32(float f) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
    return r;
}

// c += a · b for one m16n8k8 tile (PTX fragment layout: g = lane / 4, t = lane % 4; a: rows g and
// g + 8, columns t and t + 4; b: rows t and t + 4, column g; c: rows g and g + 8, columns 2t, 2t + 1).
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// v[8] split into the hi and lo rows of a tile.
__device__ __forceinline__ void store_split(const float (&v)[8], uint32_t* hi, uint32_t* lo) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const uint32_t h = to_tf32(v[j]);
        hi[j] = h;
        lo[j] = to_tf32(v[j] - __uint_as_float(h));
    }
}

// Same contract as matmul_kernel.
__global__ void __launch_bounds__(kTcThreads, 2)
    matmul_tc_kernel(DevWeight dense, const DevWeight* table, int which, const int32_t* offsets,
                     const int32_t* order, int64_t n, bool gather, int64_t x_div, bool scatter,
                     const float* __restrict__ x, float* __restrict__ y) {
    const auto [w, begin, end] = matmul_slice(dense, table, which, offsets, n);
    const int64_t rows = w.rows, cols = w.cols;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTcBN;
    const bool quant_words = (w.type == WeightType::kQ4 || w.type == WeightType::kQ8) && cols % kTcBK == 0 &&
                             w.group_size % 8 == 0;
    const bool bf16_rows = w.type == WeightType::kBF16 && cols % 8 == 0;
    const bool x_vec = cols % 8 == 0;
    __shared__ __align__(16) uint32_t xh[kTcBM][kTcStride], xl[kTcBM][kTcStride];
    __shared__ __align__(16) uint32_t wh[kTcBN][kTcStride], wl[kTcBN][kTcStride];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int wm = (warp / 4) * 32, wn = (warp % 4) * 16;  // this warp's outputs in the tile
    const int fr = tid / 4, fc = (tid % 4) * 8;            // this thread's 8 elements of each fill
    for (int64_t m0 = begin + static_cast<int64_t>(blockIdx.y) * kTcBM; m0 < end;
         m0 += static_cast<int64_t>(gridDim.y) * kTcBM) {
        // Each 32-input step accumulates on the tensor cores from zero and is added to acc in f32:
        // the MMA's internal accumulation is not IEEE-rounded, so long sums stay out of it.
        float acc[2][2][4] = {};
        const int64_t m = m0 + fr;
        const float* xrow = nullptr;
        if (m < end) xrow = x + (gather ? order[m] / x_div : m) * cols;
        const int64_t r = row0 + fr;
        for (int64_t k0 = 0; k0 < cols; k0 += kTcBK) {
            const int64_t k = k0 + fc;
            float v[8];
            if (xrow != nullptr && x_vec && k + 8 <= cols) {
                const float4 a = *reinterpret_cast<const float4*>(xrow + k);
                const float4 b = *reinterpret_cast<const float4*>(xrow + k + 4);
                v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z,
                v[7] = b.w;
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) v[j] = xrow != nullptr && k + j < cols ? xrow[k + j] : 0.0f;
            }
            store_split(v, &xh[fr][fc], &xl[fr][fc]);
            if (r >= rows) {
#pragma unroll
                for (int j = 0; j < 8; ++j) v[j] = 0.0f;
            } else if (quant_words) {
                const float sc =
                    load_scale(w.scales, w.scale_type, r * (cols / w.group_size) + k / w.group_size);
                const float bi =
                    load_scale(w.biases, w.scale_type, r * (cols / w.group_size) + k / w.group_size);
                const uint32_t* words = static_cast<const uint32_t*>(w.data);
                if (w.type == WeightType::kQ4) {
                    const uint32_t q = words[(r * cols + k) / 8];
#pragma unroll
                    for (int j = 0; j < 8; ++j) v[j] = sc * static_cast<float>((q >> (4 * j)) & 0xFu) + bi;
                } else {
                    const uint2 q = *reinterpret_cast<const uint2*>(words + (r * cols + k) / 4);
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        v[j] = sc * static_cast<float>((q.x >> (8 * j)) & 0xFFu) + bi;
                        v[4 + j] = sc * static_cast<float>((q.y >> (8 * j)) & 0xFFu) + bi;
                    }
                }
            } else if (bf16_rows && k + 8 <= cols) {
                const uint4 q =
                    *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.data) + r * cols + k);
                const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    v[2 * j] = bf16_bits_to_f32(qw[j] & 0xFFFFu);
                    v[2 * j + 1] = bf16_bits_to_f32(qw[j] >> 16);
                }
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) v[j] = k + j < cols ? weight_at(w, r, k + j) : 0.0f;
            }
            store_split(v, &wh[fr][fc], &wl[fr][fc]);
            __syncthreads();
            float part[2][2][4] = {};
#pragma unroll
            for (int kk = 0; kk < kTcBK; kk += 8) {
                uint32_t ah[2][4], al[2][4], bh[2][2], bl[2][2];
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    const int row = wm + mi * 16 + g;
                    ah[mi][0] = xh[row][kk + t];
                    ah[mi][1] = xh[row + 8][kk + t];
                    ah[mi][2] = xh[row][kk + t + 4];
                    ah[mi][3] = xh[row + 8][kk + t + 4];
                    al[mi][0] = xl[row][kk + t];
                    al[mi][1] = xl[row + 8][kk + t];
                    al[mi][2] = xl[row][kk + t + 4];
                    al[mi][3] = xl[row + 8][kk + t + 4];
                }
#pragma unroll
                for (int ni = 0; ni < 2; ++ni) {
                    const int col = wn + ni * 8 + g;
                    bh[ni][0] = wh[col][kk + t];
                    bh[ni][1] = wh[col][kk + t + 4];
                    bl[ni][0] = wl[col][kk + t];
                    bl[ni][1] = wl[col][kk + t + 4];
                }
#pragma unroll
                for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                    for (int ni = 0; ni < 2; ++ni) {
                        mma_tf32(part[mi][ni], al[mi], bh[ni]);  // the small terms first
                        mma_tf32(part[mi][ni], ah[mi], bl[ni]);
                        mma_tf32(part[mi][ni], ah[mi], bh[ni]);
                    }
            }
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int ni = 0; ni < 2; ++ni)
#pragma unroll
                    for (int q = 0; q < 4; ++q) acc[mi][ni][q] += part[mi][ni][q];
            __syncthreads();
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 2; ++ni)
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int64_t mrow = m0 + wm + mi * 16 + g + (q >= 2 ? 8 : 0);
                    const int64_t ncol = row0 + wn + ni * 8 + 2 * t + (q & 1);
                    if (mrow < end && ncol < rows)
                        y[(scatter ? order[mrow] : mrow) * rows + ncol] = acc[mi][ni][q];
                }
    }
}

__global__ void moe_group_kernel(const int32_t* ids, int64_t n_pairs, int64_t n_experts, int32_t* offsets,
                                 int32_t* order, int ranks, int rank) {
    extern __shared__ int32_t counts[];  // [n_experts]
    __shared__ int32_t others;           // the cursor of the pairs of other ranks' experts
    for (int64_t e = threadIdx.x; e < n_experts; e += blockDim.x) counts[e] = 0;
    __syncthreads();
    for (int64_t p = threadIdx.x; p < n_pairs; p += blockDim.x)
        if (ids[p] % ranks == rank) atomicAdd(&counts[ids[p]], 1);
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
        others = sum;
    }
    __syncthreads();
    for (int64_t p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        const int32_t slot = ids[p] % ranks == rank ? atomicAdd(&counts[ids[p]], 1) : atomicAdd(&others, 1);
        order[slot] = static_cast<int32_t>(p);
    }
}

__global__ void moe_combine_kernel(const float* pair_out, const float* weights, int64_t k, int64_t dim,
                                   float* mix, const int32_t* ids, int ranks, int rank) {
    const int64_t t = blockIdx.x;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t j = 0; j < k; ++j) {
            if (ranks > 1 && ids[t * k + j] % ranks != rank) continue;  // another rank's expert
            acc += weights[t * k + j] * pair_out[(t * k + j) * dim + d];
        }
        mix[t * dim + d] = acc;
    }
}

}  // namespace

void matmul(const LaunchContext& ctx, const DevWeight& w, const float* x, int64_t n, float* y,
            cudaStream_t s) {
    if (n == 0) return;
    static_assert(kTcBM == kBM && kTcBN == kBN, "the two matmul kernels share a grid");
    const dim3 grid(grid_for(w.rows, kBN), grid_for(n, kBM), 1);
    if (ctx.tensor_cores) {
        matmul_tc_kernel<<<grid, kTcThreads, 0, s>>>(w, nullptr, 0, nullptr, nullptr, n, false, 1, false, x,
                                                     y);
    } else {
        matmul_kernel<<<grid, kMatmulThreads, 0, s>>>(w, nullptr, 0, nullptr, nullptr, n, false, 1, false, x,
                                                      y);
    }
}

void moe_matmul(const LaunchContext& ctx, const DevWeight* table, int which, int64_t n_experts,
                const int32_t* offsets, const int32_t* order, int64_t n_pairs, bool gather, int64_t x_div,
                bool scatter, int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t s) {
    if (n_pairs == 0) return;
    // Tiles per expert at uniform routing, doubled for skew; blocks stride over the rest.
    int64_t tiles = (2 * n_pairs + n_experts * kBM - 1) / (n_experts * kBM);
    tiles = tiles < 1 ? 1 : (tiles > 16 ? 16 : tiles);
    const dim3 grid(grid_for(rows, kBN), static_cast<unsigned>(tiles), static_cast<unsigned>(n_experts));
    DevWeight unused;
    unused.rows = rows;
    unused.cols = cols;
    if (ctx.tensor_cores) {
        matmul_tc_kernel<<<grid, kTcThreads, 0, s>>>(unused, table, which, offsets, order, n_pairs, gather,
                                                     x_div, scatter, x, y);
    } else {
        matmul_kernel<<<grid, kMatmulThreads, 0, s>>>(unused, table, which, offsets, order, n_pairs, gather,
                                                      x_div, scatter, x, y);
    }
}

void moe_group(const int32_t* ids, int64_t n_pairs, int64_t n_experts, int32_t* offsets, int32_t* order,
               cudaStream_t s, int ranks, int rank) {
    moe_group_kernel<<<1, 1024, static_cast<size_t>(n_experts) * sizeof(int32_t), s>>>(
        ids, n_pairs, n_experts, offsets, order, ranks, rank);
}

void moe_combine(const float* pair_out, const float* weights, int64_t n, int64_t k, int64_t dim, float* mix,
                 cudaStream_t s, const int32_t* ids, int ranks, int rank) {
    if (n == 0) return;
    moe_combine_kernel<<<static_cast<unsigned>(n), 256, 0, s>>>(pair_out, weights, k, dim, mix, ids, ranks,
                                                                rank);
}

}  // namespace sluice::cuda
