// Prefill products on int8 tensor cores: the CPU's int8-activation product (kernels.h,
// Activations::kInt8; reference::matmul defines it) on mma.m16n8k32. Activations are quantised per
// block of 32 inputs (d = max|x| / 127, codes rounded to nearest even) by quantize_rows_int8, the
// 4/8-bit MLX affine codes are the unsigned operand as they are stored, and for every block
//     y[t, r] += s[r, g] · d[t, b] · Σ q_w·q_x  +  b[r, g] · d[t, b] · Σ q_x
// with the integer sum from one u8·s8 → s32 MMA per 32 inputs and the rest in f32.
//
// Layout: a quantised row keeps each chunk of 8 inputs as its 4 even inputs then its 4 odd ones, so
// a 4-bit code word splits into the operand of an MMA by one mask (low nibbles: the even inputs) or
// a shift and a mask (high nibbles: the odd ones); 8-bit codes are gathered into the same order by
// one byte permute. The order is the K order of the MMA on both sides, so the products are those
// of the original order.
//
// Tiles: 128 weight rows × 64 tokens × 64 inputs per stage, three stages in flight (cp.async); 8
// warps of 32 rows × 32 tokens, each 2 × 4 MMAs per 32 inputs. Shared-memory rows are padded so the
// fragment reads of a warp hit 32 distinct banks.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/device/common.cuh"
#include "kernels/cuda/device/ggml_dot.cuh"
#include "kernels/cuda/ops.h"

namespace sluice::cuda {
namespace {

constexpr int kRowsPerTile = 128;
constexpr int kTokensPerTile = 64;
constexpr int kStageCols = 64;
constexpr int kThreads = 256;
constexpr int kStages = 4;    // pipeline buffers: the stage computed and three in flight
constexpr int kXStride = 20;  // words per token row of a stage: 64 code bytes + 16 bytes of padding

// d = a · b + kMagic for one m16n8k32 tile, a unsigned (weight codes), b signed (activations).
// Fragments (PTX, g = lane / 4, t = lane % 4): a0 row g, k 4t..4t+3; a1 row g + 8; a2, a3 the same at
// k + 16; b0 k 4t..4t+3 of column g, b1 at k + 16; d0, d1 row g, columns 2t, 2t + 1; d2, d3 row g + 8.
// The accumulator starts at kMagic (the bits of 1.5·2²³): a block's sum is below 2²² in magnitude
// (32 · 255 · 127), so the result read as a float is exactly 1.5·2²³ + sum, and one subtraction
// gives the sum as a float, where an I2F conversion runs at a quarter of the FP32 rate.
constexpr uint32_t kMagic = 0x4B400000u;
constexpr float kMagicF = 12582912.0f;

__device__ __forceinline__ void mma_u8s8(uint32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kMagic));
}

__device__ __forceinline__ float block_sum_of(uint32_t d) {
    return __uint_as_float(d) - kMagicF;
}

// Position of input i (0..31) of a block in the quantised row's order: per chunk of 8, the even
// inputs then the odd ones.
__device__ __forceinline__ int stored_position(int i) {
    const int j = i & 7;
    return (i & ~7) | ((j & 1) != 0 ? 4 + (j >> 1) : (j >> 1));
}

__device__ __forceinline__ int warp_sum_int(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp per block of 32 inputs (rows are contiguous, cols a multiple of 32).
__global__ void quantize_rows_kernel(const float* __restrict__ x, int64_t blocks, int8_t* __restrict__ q,
                                     float* __restrict__ d, float* __restrict__ dsum) {
    const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= blocks) return;
    const int lane = threadIdx.x % 32;
    const float v = x[b * 32 + lane];
    const float amax = warp_max(fabsf(v));
    // As the reference: d = amax / 127, codes round(x · (127 / amax)) to nearest even.
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    const int c = __float2int_rn(v * id);
    q[b * 32 + stored_position(lane)] = static_cast<int8_t>(c);
    const int sum = warp_sum_int(c);
    if (lane == 0) {
        const float db = amax / 127.0f;
        d[b] = db;
        dsum[b] = db * static_cast<float>(sum);
    }
}

// Same grid contract as the f32 matmul kernels (linear.cu): blockIdx.x a tile of 128 weight rows,
// blockIdx.y strides over the slice's 64-token tiles, blockIdx.z the expert (table) or 0 (dense).
// kWide: the group size is at least 64, so a stage's two blocks share one scale and bias (its
// block sums are combined before the scale: 3 FP32 operations per output and block instead of 4).
template <int kBits, bool kWide>
__global__ void __launch_bounds__(kThreads, 2)
    matmul_int8_kernel(DevWeight dense, const DevWeight* table, int which, const int32_t* offsets,
                       const int32_t* order, int64_t n, bool gather, int64_t x_div, bool scatter, Int8Rows xq,
                       float* __restrict__ y) {
    constexpr int kWStride = kBits == 4 ? 12 : 20;     // words per weight row: its code bytes + 16 bytes
    constexpr int kRowBytes = kStageCols * kBits / 8;  // code bytes of a row per stage
    constexpr int kRowChunks = kRowBytes / 16;
    // Dynamic shared memory (smem_bytes): per stage the codes ws and activations xs; per token {d of
    // block 0, d of block 1, d·Σq of block 0, of block 1} and per row {scale 0, scale 1, bias 0, bias
    // 1} (one 16-byte read each), the scales double-buffered.
    extern __shared__ __align__(16) unsigned char smem[];
    auto* ws = reinterpret_cast<uint32_t(*)[kRowsPerTile * kWStride]>(smem);
    auto* xs = reinterpret_cast<uint32_t(*)[kTokensPerTile * kXStride]>(ws + kStages);
    auto* xds = reinterpret_cast<float(*)[kTokensPerTile][4]>(xs + kStages);
    auto* wsb = reinterpret_cast<float(*)[kRowsPerTile][4]>(xds + kStages);
    auto* src = reinterpret_cast<int64_t*>(wsb + 2);

    const DevWeight w = table != nullptr ? table[blockIdx.z * 3 + which] : dense;
    const int64_t begin = offsets != nullptr ? offsets[blockIdx.z] : 0;
    const int64_t end = offsets != nullptr ? offsets[blockIdx.z + 1] : n;
    const int64_t rows = w.rows, cols = w.cols;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRowsPerTile;
    if (row0 >= rows) return;
    const int64_t blocks_per_row = cols / 32, groups_per_row = cols / w.group_size;
    const int stages = static_cast<int>((cols + kStageCols - 1) / kStageCols);
    const auto* codes = static_cast<const uint8_t*>(w.data);
    const int64_t code_row_bytes = cols * kBits / 8;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int g = lane / 4, t = lane % 4;
    const int wr = (warp % 4) * 32, wt = (warp / 4) * 32;  // this warp's rows and tokens in the tile

    for (int64_t m0 = begin + static_cast<int64_t>(blockIdx.y) * kTokensPerTile; m0 < end;
         m0 += static_cast<int64_t>(gridDim.y) * kTokensPerTile) {
        __syncthreads();  // the previous tile's reads of src and the stage buffers are done
        if (tid < kTokensPerTile) {
            const int64_t m = m0 + tid;
            src[tid] = m < end ? (gather ? order[m] / x_div : m) : -1;
        }
        __syncthreads();

        // The scale and bias this thread stages for a stage (row tid % 128, block tid / 128),
        // loaded a stage ahead and stored once the stage before it is consumed.
        const int srow = tid % kRowsPerTile, sblk = tid / kRowsPerTile;
        float next_sc = 0.0f, next_bi = 0.0f;
        auto load_scale_pair = [&](int stage) {
            const int64_t k = static_cast<int64_t>(stage) * kStageCols + sblk * 32;
            const int64_t r = row0 + srow;
            next_sc = 0.0f;
            next_bi = 0.0f;
            if (r < rows && k < cols) {
                const int64_t gi = r * groups_per_row + k / w.group_size;
                next_sc = load_scale(w.scales, w.scale_type, gi);
                next_bi = load_scale(w.biases, w.scale_type, gi);
            }
        };
        auto store_scale_pair = [&](int buf) {
            wsb[buf][srow][sblk] = next_sc;
            wsb[buf][srow][2 + sblk] = next_bi;
        };
        // Codes and activations of a stage into buffer buf (cp.async; zero-filled past the edges).
        auto load_stage = [&](int stage, int buf) {
            const int64_t k0 = static_cast<int64_t>(stage) * kStageCols;
            for (int c = tid; c < kRowsPerTile * kRowChunks; c += kThreads) {
                const int rr = c / kRowChunks, part = c % kRowChunks;
                const int64_t r = row0 + rr;
                const int64_t byte = k0 * kBits / 8 + part * 16;
                const bool valid = r < rows && byte < code_row_bytes;
                cp_async16(&ws[buf][rr * kWStride + part * 4],
                           valid ? codes + r * code_row_bytes + byte : codes, valid);
            }
            {
                const int tok = tid / 4, part = tid % 4;
                const int64_t s = src[tok];
                const int64_t k = k0 + part * 16;
                const bool valid = s >= 0 && k < cols;
                cp_async16(&xs[buf][tok * kXStride + part * 4], valid ? xq.q + s * cols + k : xq.q, valid);
            }
            {
                const int tok = tid % kTokensPerTile, blk = (tid / kTokensPerTile) % 2;
                const bool sum = tid >= 2 * kTokensPerTile;
                const int64_t s = src[tok];
                const int64_t b = k0 / 32 + blk;
                const bool valid = s >= 0 && b < blocks_per_row;
                const float* base = sum ? xq.dsum : xq.d;
                cp_async4(&xds[buf][tok][(sum ? 2 : 0) + blk], valid ? base + s * blocks_per_row + b : base,
                          valid);
            }
            cp_async_commit();
        };

        float acc[2][4][4] = {};
        load_scale_pair(0);
        store_scale_pair(0);
        for (int i = 0; i + 1 < kStages; ++i) {
            if (i < stages) {
                load_stage(i, i);
            } else {
                cp_async_commit();  // an empty group keeps the count of groups per stage
            }
        }
        for (int s = 0; s < stages; ++s) {
            const int buf = s % kStages;
            cp_async_wait<kStages - 2>();  // stage s has landed
            __syncthreads();               // ... for every thread, and stage s − 1 is consumed
            if (s + kStages - 1 < stages) {
                load_stage(s + kStages - 1, (s + kStages - 1) % kStages);
            } else {
                cp_async_commit();
            }
            if (s + 1 < stages) load_scale_pair(s + 1);
            const uint32_t* wsb_codes = ws[buf];
            const uint32_t* xsb = xs[buf];
            // Weight fragments of both blocks (a block past cols is zero-filled: its sums are 0).
            uint32_t a[2][2][4];  // [block][mi]
            float4 sb[2][2];      // [mi][h]: scales and biases of the fragment's rows
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = wr + mi * 16 + g + 8 * h;
                    sb[mi][h] = *reinterpret_cast<const float4*>(wsb[s % 2][row]);
                    const uint32_t* wrow = wsb_codes + row * kWStride;
                    if constexpr (kBits == 4) {
                        // Words kb·4 … kb·4 + 3 hold block kb's 32 codes, 8 inputs per word: this lane's
                        // are words t/2 and t/2 + 2 of each block, low nibbles (even inputs) for even t.
                        const uint4 w0 = *reinterpret_cast<const uint4*>(wrow);
                        const uint4 w1 = *reinterpret_cast<const uint4*>(wrow + 4);
                        const int shift = (t & 1) * 4;
                        const bool hi = (t >> 1) != 0;
                        a[0][mi][h] = ((hi ? w0.y : w0.x) >> shift) & 0x0F0F0F0Fu;
                        a[0][mi][2 + h] = ((hi ? w0.w : w0.z) >> shift) & 0x0F0F0F0Fu;
                        a[1][mi][h] = ((hi ? w1.y : w1.x) >> shift) & 0x0F0F0F0Fu;
                        a[1][mi][2 + h] = ((hi ? w1.w : w1.z) >> shift) & 0x0F0F0F0Fu;
                    } else {
                        // Words kb·8 … kb·8 + 7, 4 inputs per word: a chunk of 8 inputs is two words.
                        const unsigned sel = (t & 1) != 0 ? 0x7531u : 0x6420u;
#pragma unroll
                        for (int kb = 0; kb < 2; ++kb) {
                            const uint2 lo = *reinterpret_cast<const uint2*>(wrow + kb * 8 + 2 * (t >> 1));
                            const uint2 hi =
                                *reinterpret_cast<const uint2*>(wrow + kb * 8 + 4 + 2 * (t >> 1));
                            a[kb][mi][h] = __byte_perm(lo.x, lo.y, sel);
                            a[kb][mi][2 + h] = __byte_perm(hi.x, hi.y, sel);
                        }
                    }
                }
            }
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) {
                const int tok = wt + ni * 8 + g;
                uint32_t b[2][2];
#pragma unroll
                for (int kb = 0; kb < 2; ++kb) {
                    b[kb][0] = xsb[tok * kXStride + kb * 8 + t];
                    b[kb][1] = xsb[tok * kXStride + kb * 8 + 4 + t];
                }
                const float4 xa = *reinterpret_cast<const float4*>(xds[buf][wt + ni * 8 + 2 * t]);
                const float4 xb = *reinterpret_cast<const float4*>(xds[buf][wt + ni * 8 + 2 * t + 1]);
                const float dx0[2] = {xa.x, xb.x}, dx1[2] = {xa.y, xb.y};
                const float ds0[2] = {xa.z, xb.z}, ds1[2] = {xa.w, xb.w};
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    uint32_t c0[4], c1[4];
                    mma_u8s8(c0, a[0][mi], b[0][0], b[0][1]);
                    mma_u8s8(c1, a[1][mi], b[1][0], b[1][1]);
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        const int h = q >> 1, j = q & 1;
                        const float4 r = sb[mi][h];  // scale 0, scale 1, bias 0, bias 1
                        float v = acc[mi][ni][q];
                        if constexpr (kWide) {
                            float f = block_sum_of(c0[q]) * dx0[j];
                            f = fmaf(block_sum_of(c1[q]), dx1[j], f);
                            v = fmaf(r.x, f, fmaf(r.z, ds0[j] + ds1[j], v));
                        } else {
                            v = fmaf(r.x, block_sum_of(c0[q]) * dx0[j], fmaf(r.z, ds0[j], v));
                            v = fmaf(r.y, block_sum_of(c1[q]) * dx1[j], fmaf(r.w, ds1[j], v));
                        }
                        acc[mi][ni][q] = v;
                    }
                }
            }
            // Every thread passed this stage's barrier, so stage s − 1's scales are consumed.
            if (s + 1 < stages) store_scale_pair((s + 1) % 2);
        }
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const int64_t r = row0 + wr + mi * 16 + g + 8 * (q >> 1);
                    const int64_t m = m0 + wt + ni * 8 + 2 * t + (q & 1);
                    if (m < end && r < rows) y[(scatter ? order[m] : m) * rows + r] = acc[mi][ni][q];
                }
    }
}

// The kernel instance for a code width and group size.
// Dynamic shared memory of an instance (above 48 KB: opted into per launch).
constexpr size_t smem_bytes(int bits) {
    const size_t w_stride = bits == 4 ? 12 : 20;
    return kStages * (kRowsPerTile * w_stride * 4 + kTokensPerTile * kXStride * 4 + kTokensPerTile * 16) +
           2 * kRowsPerTile * 16 + kTokensPerTile * 8;
}

template <typename Launch>
void with_kernel(int bits, int64_t group_size, Launch&& launch) {
    const bool wide = group_size >= kStageCols;
    if (bits == 4) {
        wide ? launch(matmul_int8_kernel<4, true>) : launch(matmul_int8_kernel<4, false>);
    } else {
        wide ? launch(matmul_int8_kernel<8, true>) : launch(matmul_int8_kernel<8, false>);
    }
}

}  // namespace

bool int8_products(const DevWeight& w) {
    const bool pow2_group = w.group_size >= 32 && (w.group_size & (w.group_size - 1)) == 0;
    return (w.type == WeightType::kQ4 || w.type == WeightType::kQ8) && pow2_group && w.cols % 32 == 0 &&
           w.cols % w.group_size == 0;
}

int64_t int8_scale_elements(int64_t elements) {
    return (elements + 31) / 32;
}

void quantize_rows_int8(const float* x, int64_t n, int64_t cols, const Int8Rows& out, cudaStream_t s) {
    const int64_t blocks = n * cols / 32;
    if (blocks == 0) return;
    constexpr int kWarpsPerBlock = 8;
    quantize_rows_kernel<<<grid_for(blocks, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, s>>>(x, blocks, out.q,
                                                                                          out.d, out.dsum);
}

void matmul_int8(const DevWeight& w, const Int8Rows& xq, int64_t n, float* y, cudaStream_t s) {
    if (n == 0 || w.rows == 0) return;
    const dim3 grid(grid_for(w.rows, kRowsPerTile), grid_for(n, kTokensPerTile), 1);
    with_kernel(w.type == WeightType::kQ4 ? 4 : 8, w.group_size, [&](auto kernel) {
        const size_t smem = smem_bytes(w.type == WeightType::kQ4 ? 4 : 8);
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        kernel<<<grid, kThreads, smem, s>>>(w, nullptr, 0, nullptr, nullptr, n, false, 1, false, xq, y);
    });
}

void moe_matmul_int8(int bits, int64_t group_size, const DevWeight* table, int which, int64_t n_experts,
                     const int32_t* offsets, const int32_t* order, int64_t n_pairs, bool gather,
                     int64_t x_div, bool scatter, int64_t rows, int64_t cols, const Int8Rows& xq, float* y,
                     cudaStream_t s) {
    if (n_pairs == 0 || rows == 0) return;
    // Token tiles per expert at uniform routing, doubled for skew; blocks stride over the rest.
    int64_t tiles = (2 * n_pairs + n_experts * kTokensPerTile - 1) / (n_experts * kTokensPerTile);
    tiles = tiles < 1 ? 1 : (tiles > 16 ? 16 : tiles);
    const dim3 grid(grid_for(rows, kRowsPerTile), static_cast<unsigned>(tiles),
                    static_cast<unsigned>(n_experts));
    DevWeight unused;
    unused.rows = rows;
    unused.cols = cols;
    with_kernel(bits, group_size, [&](auto kernel) {
        const size_t smem = smem_bytes(bits);
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        kernel<<<grid, kThreads, smem, s>>>(unused, table, which, offsets, order, n_pairs, gather, x_div,
                                            scatter, xq, y);
    });
}

}  // namespace sluice::cuda

// ---- MXFP4 routed experts (moe_mxfp4_int8) ---------------------------------------------------------------
namespace sluice::cuda {
namespace {

// One thread per block of 32: projection `which` of experts [e0, e0 + count) of `table` into their slabs
// (slab i: codes [rows, cols] u8 in input order, then scales and biases [rows, cols / 32] f32). The code of
// input j of a block: ggml's doubled e2m1 value (low nibble of byte j for j < 16, high nibble of byte
// j − 16) plus 12; the weight is (code − 12) · 2^(e−128), what ggml's MXFP4 decodes to, exactly.
__global__ void mxfp4_as_q8_kernel(const DevWeight* __restrict__ table, int64_t e0, int which, int64_t count,
                                   int64_t rows, int64_t cols, uint8_t* __restrict__ slabs,
                                   int64_t slab_bytes) {
    const int64_t blocks_per_row = cols / 32, per_expert = rows * blocks_per_row;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= count * per_expert) return;
    const int64_t e = i / per_expert, rb = i % per_expert, r = rb / blocks_per_row, b = rb % blocks_per_row;
    const DevWeight w = table[(e0 + e) * 3 + which];
    if (w.type != WeightType::kGgmlMXFP4 || w.data == nullptr) return;  // (not routed to: never read)
    const uint8_t* src = static_cast<const uint8_t*>(w.data) + (r * blocks_per_row + b) * 17;
    uint8_t* slab = slabs + e * slab_bytes;
    uint32_t words[8];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        uint32_t lo = 0, hi = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint32_t v = src[1 + 4 * k + j];
            const int c_lo = static_cast<int>(mxfp4_code(v & 0x0Fu)) + 12;
            const int c_hi = static_cast<int>(mxfp4_code(v >> 4)) + 12;
            lo |= static_cast<uint32_t>(c_lo) << (8 * j);
            hi |= static_cast<uint32_t>(c_hi) << (8 * j);
        }
        words[k] = lo;      // inputs 4k .. 4k + 3
        words[4 + k] = hi;  // inputs 16 + 4k .. 16 + 4k + 3
    }
    auto* codes = reinterpret_cast<uint4*>(slab + (r * cols + b * 32));
    codes[0] = make_uint4(words[0], words[1], words[2], words[3]);
    codes[1] = make_uint4(words[4], words[5], words[6], words[7]);
    const float scale = ggml_e8m0_half(src[0]);
    auto* scales = reinterpret_cast<float*>(slab + rows * cols);
    scales[r * blocks_per_row + b] = scale;
    scales[rows * blocks_per_row + r * blocks_per_row + b] = -12.0f * scale;
}

int64_t align256(int64_t v) {
    return (v + 255) / 256 * 256;
}

}  // namespace

int64_t mxfp4_q8_slab_bytes(int64_t H, int64_t I) {
    const int64_t weights = H * I;  // gate, up [I, H] and down [H, I] alike
    return align256(weights + 2 * (weights / 32) * static_cast<int64_t>(sizeof(float)));
}

std::vector<DevWeight> mxfp4_q8_table(uint8_t* slabs, int64_t group, int64_t slab_bytes, int64_t H,
                                      int64_t I) {
    std::vector<DevWeight> table(static_cast<size_t>(group * 3));
    for (int64_t e = 0; e < group; ++e)
        for (int which = 0; which < 3; ++which) {
            DevWeight& w = table[static_cast<size_t>(e * 3 + which)];
            w.type = WeightType::kQ8;
            w.scale_type = kernels::ScaleType::kF32;
            w.group_size = 32;
            w.rows = which == 2 ? H : I;
            w.cols = which == 2 ? I : H;
            uint8_t* slab = slabs + e * slab_bytes;
            w.data = slab;
            w.scales = slab + w.rows * w.cols;
            w.biases = static_cast<const float*>(w.scales) + w.rows * w.cols / 32;
        }
    return table;
}

bool mxfp4_int8_products(const DevWeight& w) {
    return w.type == WeightType::kGgmlMXFP4 && w.cols % 32 == 0;
}

void moe_mxfp4_int8(const Mxfp4Q8Scratch& scratch, const DevWeight* table, int which, int64_t n_experts,
                    const int32_t* offsets, const int32_t* order, int64_t n_pairs, bool gather, int64_t x_div,
                    bool scatter, int64_t rows, int64_t cols, const Int8Rows& xq, float* y, cudaStream_t s) {
    if (n_pairs == 0 || rows == 0 || scratch.group <= 0) return;
    constexpr int kConvertThreads = 256;
    for (int64_t e0 = 0; e0 < n_experts; e0 += scratch.group) {
        const int64_t count = std::min(scratch.group, n_experts - e0);
        const int64_t blocks = count * rows * (cols / 32);
        mxfp4_as_q8_kernel<<<grid_for(blocks, kConvertThreads), kConvertThreads, 0, s>>>(
            table, e0, which, count, rows, cols, scratch.slabs, scratch.slab_bytes);
        // The group's share of the pairs sizes the token tiles (moe_matmul_int8); offsets from the group's
        // first expert, `order` and y as for the whole table.
        const int64_t share = std::max<int64_t>(1, (n_pairs * count + n_experts - 1) / n_experts);
        moe_matmul_int8(8, 32, scratch.table, which, count, offsets + e0, order, share, gather, x_div,
                        scatter, rows, cols, xq, y, s);
    }
}

}  // namespace sluice::cuda
