// The CUDA op set: launchers for every kernel the GPU forward uses, over device pointers, each
// enqueued on the given stream (nothing here synchronises). The CPU twins are the ops of
// kernels/kernels.h; tests/cuda/ compares each launcher against kernels::reference over shape
// sweeps. Host-callable (included by .cu and .cpp files); device code lives in the .cu files.
//
// Layouts and semantics follow kernels.h exactly (row-major f32 activations, PyTorch Linear
// weights, MLX affine 4/8-bit). Differences that are the GPU's: sums are in f32 (the reference
// sums in double), and position-dependent ops read the first position from device memory
// (`pos0_dev`) so a captured decode graph stays valid from step to step.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace sluice::cuda {

// A weight matrix in device memory: WeightView with device pointers.
struct DevWeight {
    kernels::WeightType type = kernels::WeightType::kF32;
    kernels::ScaleType scale_type = kernels::ScaleType::kBF16;
    int32_t group_size = 0;
    int64_t rows = 0, cols = 0;
    const void* data = nullptr;
    const void* scales = nullptr;
    const void* biases = nullptr;
};

// The DevWeight of a host view with its bytes at the given device pointers (scales and biases only
// for quantized types).
inline DevWeight dev_weight(const kernels::WeightView& v, const void* data, const void* scales,
                            const void* biases) {
    DevWeight d;
    d.type = v.type;
    d.scale_type = v.scale_type;
    d.group_size = v.group_size;
    d.rows = v.rows;
    d.cols = v.cols;
    d.data = data;
    d.scales = v.quantized() ? scales : nullptr;
    d.biases = v.quantized() ? biases : nullptr;
    return d;
}

// ---- launch context ----------------------------------------------------------------------------
// Resident blocks per SM of a decode kernel family's instances for column splits S = 1, 2, 4, 8.
using SplitOccupancy = std::array<int, 4>;

// How one backend's launches run on its device: the device's SM count and the decode kernels'
// occupancy there (queried once for that device, not for whichever device is current), and the
// backend's diagnostic switches. The launchers that choose a kernel form by them take it; it is a
// value the backend holds, so two backends on two devices never share a setting.
struct LaunchContext {
    int sm_count = 1;
    SplitOccupancy matvec_occupancy{1, 1, 1, 1};
    SplitOccupancy gate_up_occupancy{1, 1, 1, 1};
    // Diagnostics: the decode products' column split forced (1, 2, 4 or 8 warps per row group; 0:
    // chosen per launch from the rows and the occupancy).
    int forced_split = 0;
    // matmul and moe_matmul on tensor cores at f32 accuracy (3xTF32), or on the f32 SIMT kernel.
    bool tensor_cores = true;
    // The decode products (matvec, matvec_multi, the MoE decode launches) start while the kernel
    // before them finishes, loading their first weights (programmatic dependent launch; sm_90+).
    bool dependent_launch = false;
    // The most dynamic shared memory a decode product stages its x in (the chunk path; wider inputs
    // take the generic row path): the device's opt-in limit, at most 96 KB (x of 21K columns, as
    // GLM-4.5's 12,288-column out projection and DeepSeek-V3's 16,384 have), so two blocks still fit an SM.
    size_t staged_limit = 48 * 1024;
};
// For `device` (made current): its SMs, the kernels' occupancy, and the switches (dependent launch
// only where the device has it).
LaunchContext make_launch_context(int device, int forced_split, bool tensor_cores, bool dependent_launch);

// ---- linear ------------------------------------------------------------------------------------
// out[i, :] = row ids[i] of W dequantized, for i < n (embedding lookup; ids on the device).
void dequantize_rows(const DevWeight& w, const int32_t* ids, int64_t n, float* out, cudaStream_t s);
// Decode matrix-vector products (for 4/8-bit codes: groups of 4 rows whose 16-byte code chunks the
// lanes of S warps read against x staged in shared memory, S chosen per launch from the rows and the
// kernel's occupancy).
// y[rows] = W · x[cols].
void matvec(const LaunchContext& ctx, const DevWeight& w, const float* x, float* y, cudaStream_t s);
// Y[n, rows] = X[n, cols] · Wᵀ: tiled product, W dequantized into shared memory per tile; on
// tensor cores at f32 accuracy (3xTF32), or by the f32 SIMT kernel (ctx.tensor_cores).
void matmul(const LaunchContext& ctx, const DevWeight& w, const float* x, int64_t n, float* y,
            cudaStream_t s);

// ---- int8 tensor-core products (prefill) ---------------------------------------------------------
// Activations quantised for them: per block of 32 inputs of a row, int8 codes (d = max|x| / 127,
// rounded to nearest even: the CPU's Activations::kInt8), the block's d and d·Σcodes. Each chunk
// of 8 inputs is stored as its 4 even inputs then its 4 odd ones (the order the MMA reads 4-bit
// code words in). capacity: the most elements (rows × cols) the buffers hold.
struct Int8Rows {
    int8_t* q = nullptr;
    float* d = nullptr;     // [rows, cols / 32]
    float* dsum = nullptr;  // [rows, cols / 32]
    int64_t capacity = 0;
};
// Whether w's products can take the int8 kernels: MLX affine 4/8-bit, cols a multiple of 32 and
// a power-of-two group of at least 32 inputs (a block of 32 never straddles two groups).
bool int8_products(const DevWeight& w);
// Scale elements (d or dsum) for `elements` quantised inputs.
int64_t int8_scale_elements(int64_t elements);
// out = x[n, cols] quantised (cols a multiple of 32, n·cols ≤ out.capacity).
void quantize_rows_int8(const float* x, int64_t n, int64_t cols, const Int8Rows& out, cudaStream_t s);
// Y[n, rows] = W · X[n, :] with X quantised by quantize_rows_int8 (int8_products(w)): on int8
// tensor cores, each block's integer sum scaled in f32 (reference::matmul with kInt8 activations).
void matmul_int8(const DevWeight& w, const Int8Rows& xq, int64_t n, float* y, cudaStream_t s);
// moe_matmul on the int8 kernels: every expert's weights of one code width (bits 4 or 8) with
// int8_products() and a group size of at least group_size; xq holds the quantised rows of x (the
// n_pairs / x_div tokens when gathering).
void moe_matmul_int8(int bits, int64_t group_size, const DevWeight* table, int which, int64_t n_experts,
                     const int32_t* offsets, const int32_t* order, int64_t n_pairs, bool gather,
                     int64_t x_div, bool scatter, int64_t rows, int64_t cols, const Int8Rows& xq, float* y,
                     cudaStream_t s);

// Routed experts stored as MXFP4 ggml blocks on the int8 kernels: each pass rewrites a group of experts'
// projections as the MLX affine 8-bit rows they exactly are (ggml's doubled e2m1 code c ∈ [−12, 12] as the
// unsigned code c + 12, the block's 2^(e−128) as the scale and −12 times it as the bias, groups of 32, f32
// scales), then runs moe_matmul_int8 on them. Scratch: a slab per expert of a group, the codes, scales and
// biases of its largest projection; `table` the group's DevWeights on the device, [group][3], all three of an
// expert on its slab (one projection is converted at a time).
struct Mxfp4Q8Scratch {
    int64_t group = 0;       // experts per pass
    int64_t slab_bytes = 0;  // one projection's codes, scales and biases
    uint8_t* slabs = nullptr;
    const DevWeight* table = nullptr;
};
// Bytes of one slab for experts of gate and up [I, H] and down [H, I] (H, I multiples of 32).
int64_t mxfp4_q8_slab_bytes(int64_t H, int64_t I);
// The host side of Mxfp4Q8Scratch::table for slabs at `slabs` (device memory), to copy to the device.
std::vector<DevWeight> mxfp4_q8_table(uint8_t* slabs, int64_t group, int64_t slab_bytes, int64_t H,
                                      int64_t I);
// Whether moe_mxfp4_int8 can run an expert's projection w: MXFP4 ggml rows of a multiple of 32 inputs.
bool mxfp4_int8_products(const DevWeight& w);
// moe_matmul_int8 over routed experts whose `which` projections are MXFP4 (mxfp4_int8_products) in `table`
// [n_experts][3], converted `scratch.group` experts at a time (arguments as moe_matmul_int8's).
void moe_mxfp4_int8(const Mxfp4Q8Scratch& scratch, const DevWeight* table, int which, int64_t n_experts,
                    const int32_t* offsets, const int32_t* order, int64_t n_pairs, bool gather, int64_t x_div,
                    bool scatter, int64_t rows, int64_t cols, const Int8Rows& xq, float* y, cudaStream_t s);

// Router top-k fused into a matvec_multi launch: the last block of slice `which` to finish runs
// router_topk over that slice's output (n_experts logits) into ids / weights [k]. counter: a
// device word that is 0 before the launch; the kernel leaves it 0 again (graph replays reuse it).
struct MatvecTopk {
    int which = -1;
    kernels::RouterSpec router;  // its bias, if any, in device memory
    int32_t* ids = nullptr;
    float* weights = nullptr;
    unsigned* counter = nullptr;
};
// A residual add and RMS norm run by a decode product before it (its input): resid_out = resid_in +
// add, x = rms_norm(resid_out) · weight; the launch writes resid_out and norm_out = x (nullable).
// resid_out must not alias resid_in (every block of the launch reads resid_in). On the chunk path
// each block computes x into its staged copy, saving the add_rms_norm launch between the two
// (otherwise add_rms_norm_to runs first).
struct NormIn {
    const float* resid_in = nullptr;
    const float* add = nullptr;
    const float* weight = nullptr;
    float eps = 0.0f;
    float* resid_out = nullptr;
    float* norm_out = nullptr;
};
// y[i] = w[i] · x for the n (≤ 4) weights of one input, in one launch (decode projections that
// read the same activations: q/k/v, the DeltaNet inputs, router + shared expert). With norm.weight
// set the input is the NormIn's x (the x argument is unused; norm_out is required).
struct MatvecMulti {
    DevWeight w[4];
    float* y[4] = {};
    int n = 0;
    MatvecTopk topk;
    NormIn norm;
    void add(const DevWeight& weight, float* out) {
        w[n] = weight;
        y[n] = out;
        ++n;
    }
};
void matvec_multi(const LaunchContext& ctx, const MatvecMulti& m, const float* x, cudaStream_t s);
// The decode products over n activation rows (matvec_rows.cu): y[i][t, :] = w[i] · x[t, :] for t < n (x
// [n, cols]; y[i] [n, w[i].rows]), each row's result bit for bit matvec_multi's on that row alone. Where
// every weight takes the chunk path (4/8-bit codes of one width of x, staged) one launch serves up to 4
// rows, reading each weight once for them; otherwise, or with a norm prologue or a fused top-k (decode
// forms of one row), matvec_multi runs once per row. matvec_rows: one weight.
void matvec_multi_rows(const LaunchContext& ctx, const MatvecMulti& m, const float* x, int64_t n,
                       cudaStream_t s);
void matvec_rows(const LaunchContext& ctx, const DevWeight& w, const float* x, int64_t n, float* y,
                 cudaStream_t s);

// A shared expert beside the routed ones in the decode MoE launches: its act = silu(gate · x) ⊙
// (up · x) is slot n_ids of the routed act, its down output is scaled by sigmoid(*gate_logit) (1
// without a gate) and added to the routed sum.
struct SharedExpert {
    DevWeight gate, up, down;
    const float* gate_logit = nullptr;
};
// MoE decode, one token: for k < n_ids, with e = ids[k], gate[k, :] = W_gate(e) · x and up[k, :] =
// W_up(e) · x (table[e·3 + 0 / 1]; rows, cols: every expert's shape), or with act set only
// act[k, :] = silu(gate) ⊙ up (a group of warps computes 2 rows of both; gate and up unused), and
// with `shared` also act[n_ids, :shared.gate.rows] for the shared expert. quant_vector: every
// expert's (and the shared expert's) gate and up have vector_layout(), in one code width and shape.
// n_tokens > 1: the same for each token t of a multi-row decode step in one launch, ids [t, n_ids] and x
// [t, cols], its gate / up / act slots after the previous token's (n_ids · rows floats, plus the shared
// expert's rows in act), each token's results bit for bit its own launch's.
void moe_matvec_gate_up(const LaunchContext& ctx, const DevWeight* table, const int32_t* ids, int64_t n_ids,
                        int64_t rows, int64_t cols, const float* x, float* gate, float* up, float* act,
                        const SharedExpert* shared, bool quant_vector, cudaStream_t s, int64_t n_tokens = 1);
// Whether a fused SwiGLU down projection's activations (act_floats) fit in shared memory.
bool swiglu_fits(int64_t act_floats);
// y = down · (silu(gate) ⊙ up); mix = y, or mix += sigmoid(*gate_logit) · y when gate_logit is set
// (the shared expert's gated add).
void swiglu_down_matvec(const DevWeight& down, const float* gate, const float* up, const float* gate_logit,
                        float* mix, cudaStream_t s);
// MoE decode down projection and weighted sum: y[r] = Σ_k weights[k] · (down_{ids[k]} · act[k, :])[r]
// (+ the shared expert's, from act[n_ids, :shared.down.cols], when `shared` is set). Blocks of 4 rows
// whose warps take the experts. quant_vector: every down projection has vector_layout(). n_tokens > 1:
// each token t's sum into y[t, :] in one launch (ids, weights [t, n_ids], shared.gate_logit [t], act laid
// out as moe_matvec_gate_up writes it for n_tokens), each bit for bit its own launch's.
void moe_down_matvec(const LaunchContext& ctx, const DevWeight* table, const int32_t* ids,
                     const float* weights, int64_t n_ids, int64_t rows, int64_t cols, const float* act,
                     const SharedExpert* shared, bool quant_vector, float* y, cudaStream_t s,
                     int64_t n_tokens = 1);
// Whether the decode kernels read W as interleaved 32-bit code words (4/8-bit codes, cols and
// group size multiples of the codes per word).
bool vector_layout(const DevWeight& w);

// The greedy token and the softmax normaliser of one row of logits, on the device: max, Σ exp(l −
// max) (f32) and the first index of the max. partial: logits_summary_scratch_floats() floats;
// counter: a device word that is 0 before the launch and is left 0.
struct DevLogitsSummary {
    float max;
    float sum_exp;
    int32_t argmax;
    int32_t pad;
};
void logits_summary(const float* logits, int64_t n, float* partial, unsigned* counter, DevLogitsSummary* out,
                    cudaStream_t s);
int64_t logits_summary_scratch_floats();

// MoE prefill: pairs (token, slot) grouped by expert. order[offsets[e] .. offsets[e+1]) are the
// pair indices routed to expert e (pair p = token p / k_per_token, slot p % k_per_token).
// The input row of permuted pair i is x[gather ? order[i] / x_div : i]; its result row goes to
// y[scatter ? order[i] : i]. W = table[e·3 + which].
void moe_matmul(const LaunchContext& ctx, const DevWeight* table, int which, int64_t n_experts,
                const int32_t* offsets, const int32_t* order, int64_t n_pairs, bool gather, int64_t x_div,
                bool scatter, int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t s);
// Counting sort of ids[n_pairs] (expert ids < n_experts) into offsets[n_experts + 1] and
// order[n_pairs]. One block; scratch-free. A rank of an expert-parallel group (ranks > 1) groups only
// the pairs of its own experts (id mod ranks == rank): the others go after offsets[n_experts], where no
// grouped product reads them, and moe_combine with the same ranks leaves them out.
void moe_group(const int32_t* ids, int64_t n_pairs, int64_t n_experts, int32_t* offsets, int32_t* order,
               cudaStream_t s, int ranks = 1, int rank = 0);
// gpt-oss's routed experts (model/moe.cpp ExpertExtras), beside the unfused MoE forms: for rows r < rows
// of `cols` values with expert e = ids[order != null ? order[r] : r] (decode: slot r of one token's ids;
// prefill: permuted pair r of moe_group's order), act[r, :] = kernels::swiglu_clamped(gate[r, :] +
// gate_bias[e, :], up[r, :] + up_bias[e, :], alpha, limit), or silu(g) ⊙ u when limit is 0; a null bias
// adds nothing. Biases [n_experts, cols] in device memory.
void expert_swiglu(const float* gate, const float* up, const int32_t* ids, const int32_t* order,
                   const float* gate_bias, const float* up_bias, int64_t rows, int64_t cols, float alpha,
                   float limit, float* act, cudaStream_t s);
// mix[t, :] += Σ_j weights[t·k + j] · bias[ids[t·k + j], :] for t < n: the routed experts' down
// biases ([n_experts, dim]; null: nothing), weighted as their outputs are (moe_down_matvec, moe_combine).
void moe_add_expert_bias(const int32_t* ids, const float* weights, const float* bias, int64_t n, int64_t k,
                         int64_t dim, float* mix, cudaStream_t s);
// mix[t, :] = Σ_j weights[t·k + j] · pair_out[t·k + j, :]; with ranks > 1 only over the pairs whose
// expert ids[t·k + j] is the rank's (moe_group's grouping of a rank).
void moe_combine(const float* pair_out, const float* weights, int64_t n, int64_t k, int64_t dim, float* mix,
                 cudaStream_t s, const int32_t* ids = nullptr, int ranks = 1, int rank = 0);

// ---- norms and elementwise ------------------------------------------------------------------------
// Per (token t, head h): y = x / sqrt(mean(x²) + eps) · weight (l2 = false), or
// y = x · scale / sqrt(Σx² + eps) (l2 = true, weight unused). Strides in elements.
struct HeadLayout {
    int64_t n_tokens = 0, n_heads = 1, dim = 0;
    int64_t in_token_stride = 0, in_head_stride = 0;
    int64_t out_token_stride = 0, out_head_stride = 0;
};
void row_norm(const float* x, const float* weight, const HeadLayout& layout, float eps, bool l2, float scale,
              float* y, cudaStream_t s);
// Per (token, head): y = rms_norm(x, weight) ⊙ silu(z), contiguous rows of dim.
void rms_norm_gated(const float* x, const float* z, const float* weight, int64_t rows, int64_t dim, float eps,
                    float* y, cudaStream_t s);
// Copies dim elements per (token, head) between strided layouts.
void copy_heads(const float* x, const HeadLayout& layout, float* y, cudaStream_t s);
// The RoPE of an attention layer: plain (frequencies from theta) or scaled (YaRN: inv_freq, a
// device array of rot_dim / 2 floats, and cos/sin times mscale).
struct RopeParams {
    float theta = 10000.0f;
    const float* inv_freq = nullptr;
    float mscale = 1.0f;
};
// NeoX RoPE in place on x [n_tokens, n_heads, head_dim]; token t is at position *pos0_dev + t.
void rope_neox(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rot_dim,
               const int32_t* pos0_dev, const RopeParams& rope, cudaStream_t s);
// cache[(*pos0_dev + t), :] = x[t, :] for t < n (row = row_elems floats).
void write_rows_at(const float* x, int64_t n, int64_t row_elems, const int32_t* pos0_dev, float* cache,
                   cudaStream_t s);
// The per-head vectors of attention_prep: the q and k RMS-norm weights (null: no norm, Qwen2) and the
// q/k/v projections' biases (null: none; [n_heads · head_dim] for q, [n_kv_heads · head_dim] for k, v).
struct PrepWeights {
    const float* q_norm = nullptr;
    const float* k_norm = nullptr;
    const float* q_bias = nullptr;
    const float* k_bias = nullptr;
    const float* v_bias = nullptr;
};
// Attention prep for n tokens in one launch (the fused form of add_bias(q, k, v) + row_norm(q) +
// copy_heads(gate) + row_norm(k) + rope_neox(q, k) + write_rows_at(k, v), numerically the same ops):
// qg [n, n_heads, head_dim · (gated ? 2 : 1)] (per head: q, then the output gate when gated),
// k, v [n, n_kv_heads, head_dim]. Writes q_out [n, n_heads, head_dim] = rope(rms_norm(q + q_bias) ·
// q_norm), gate_out [n, n_heads, head_dim] (gated only), and rows *pos0_dev + t of k_cache =
// rope(rms_norm(k + k_bias) · k_norm) and v_cache = v + v_bias — or, with !at_positions, rows t (f32
// rows staged for kv_store into a compressed cache; k_cache and v_cache may then be k and v
// themselves). head_dim ≤ 256; a bias only without a gate.
void attention_prep(const float* qg, const float* k, const float* v, const PrepWeights& w, int64_t n,
                    int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, int64_t rot_dim, bool gated,
                    float eps, const int32_t* pos0_dev, const RopeParams& rope, float* q_out, float* gate_out,
                    float* k_cache, float* v_cache, cudaStream_t s, bool at_positions = true);
// x[r, :] += bias for r < rows (row = cols floats): the unfused form of attention_prep's biases.
void add_bias_rows(float* x, const float* bias, int64_t rows, int64_t cols, cudaStream_t s);

// ---- the KV cache (kernels/kv_format.h; kv.cu) ---------------------------------------------------
// One attention layer's cache in device memory: rows [positions][n_kv_heads] of heads stored as
// `type` (kv_head_bytes each) for K and for V, and with a --kv-window (window > 0, a compressed
// type) the f16 ring in model::ModelState's layout: `slots` rows of n_kv_heads f16 heads for K, as
// many for V, then `slots` int64 tags (kernels::KvRing).
struct KvCache {
    kernels::KvType type = kernels::KvType::kF32;
    void* k = nullptr;
    void* v = nullptr;
    int64_t window = 0, slots = 0;
    void* ring = nullptr;
    // What the layer's attention adds to the softmax (kernels::AttentionExtras; gpt-oss), read by
    // attention_kv and flash_attention_kv: a sliding window — a query at P sees keys P − sliding + 1 .. P
    // (0: every key; unrelated to the ring's `window`) — and a sink logit per query head (device
    // [n_heads], unscaled; null: none), one more term of the softmax's denominator.
    int64_t sliding = 0;
    const float* sinks = nullptr;
};
// Rows *pos0_dev + offset + t (t < n) of the cache from k, v [n, n_kv_heads, head_dim] f32:
// kernels::kv_store bit for bit, and into the ring (f16, tagged with its position) when there is one.
// A row's ring slot is written before any query reads it, so a caller writes at most
// model::kKvRingSlack rows per call before attending over them (attention_layer's sub-steps).
void kv_store(const float* k, const float* v, int64_t n, int64_t offset, const int32_t* pos0_dev,
              int64_t n_kv_heads, int64_t head_dim, const KvCache& cache, cudaStream_t s);
// kernels::attention_kv over the cache as stored, for queries q [n_q, n_heads, head_dim] at positions
// *pos0_dev + offset + t: keys and values decoded in registers, the ring's rows inside each query's
// window. For steps of up to 16 queries with a split_scratch of attention_split_scratch_floats(n_heads,
// head_dim, max_keys) floats, the keys are split over many blocks (flash-decoding); max_keys bounds
// the last position + 1 (the context capacity). gate (nullable, [n_q, n_heads, head_dim]): out ⊙=
// sigmoid(gate) in the epilogue (mul_sigmoid fused).
void attention_kv(const float* q, const KvCache& cache, int64_t n_q, int64_t offset, const int32_t* pos0_dev,
                  int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, const float* gate,
                  float* out, float* split_scratch, int64_t max_keys, cudaStream_t s);
// attention_kv over an f32 cache (k, v [positions, n_kv_heads, head_dim]) at offset 0.
void attention(const float* q, const float* k, const float* v, int64_t n_q, const int32_t* pos0_dev,
               int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, const float* gate,
               float* out, float* split_scratch, int64_t max_keys, cudaStream_t s);
int64_t attention_split_scratch_floats(int64_t n_heads, int64_t head_dim, int64_t max_keys);
// Prefill attention on tensor cores (flash_attention.cu): attention_kv's result with q, k, v and the
// softmax weights rounded to f16 (f32 accumulation; within ~1e-3 of it), for steps of many queries.
// Covers head_dim 32, 64, 128 or 256 (flash_attention_fits), with or without a --kv-window ring (then,
// as for kv_store, at most model::kKvRingSlack rows per call); otherwise returns false having
// launched nothing. scratch (scratch_floats floats, may be null):
// per-split partials when the keys are split over blocks to fill the GPU at long contexts;
// keys_hint: the last position + 1 as the host knows it (sizes the split only).
bool flash_attention_fits(const KvCache& cache, int64_t head_dim);
bool flash_attention_kv(const float* q, const KvCache& cache, int64_t n_q, int64_t offset,
                        const int32_t* pos0_dev, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                        float scale, const float* gate, float* out, float* scratch, int64_t scratch_floats,
                        int64_t keys_hint, cudaStream_t s);
// x += add; y = rms_norm(x) · weight, per row of dim (the residual add fused with the next norm).
void add_rms_norm(float* x, const float* add, const float* weight, int64_t rows, int64_t dim, float eps,
                  float* y, cudaStream_t s);
// x_out = x + add (x_out may be x); y = rms_norm(x_out) · weight.
void add_rms_norm_to(const float* x, const float* add, const float* weight, int64_t rows, int64_t dim,
                     float eps, float* x_out, float* y, cudaStream_t s);
// kernels::conv1d_silu (state_out may be state: in place).
void conv1d_silu(const float* x, int64_t n, int64_t channels, int64_t kernel, const float* weight,
                 const float* state, float* state_out, float* y, cudaStream_t s);
// kernels::gated_delta_recurrent (also used for prefill: the state stays in registers over the
// whole batch, which on a GPU beats the chunked form at the batch sizes sluice runs). state_out may
// be state (in place). v_heads_tiled: value head j takes key head j mod n_k (model::DeltaNetPlan), not
// j / (n_v / n_k).
void gated_delta(const float* q, const float* k, const float* v, const float* beta, const float* g, int64_t n,
                 int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, const float* state, float* state_out,
                 float* out, cudaStream_t s, bool v_heads_tiled = false);
// The DeltaNet step after conv1d_silu, fused (numerically the same ops as row_norm(q, l2, q_scale) +
// row_norm(k, l2) + copy_heads(v) + deltanet_gates + gated_delta + rms_norm_gated): conv_out
// [n, q (n_k·dk) | k (n_k·dk) | v (n_v·dv)], b and a [n, n_v] raw (not overwritten), z [n, n_v·dv],
// state [n_v, dk, dv] read, the new state written to state_out (may be state); y [n, n_v·dv] = rms_norm(out,
// norm_weight) ⊙ silu(z). A head's columns are spread over blocks of 32, so the unnormalised outputs go
// through raw [n, n_v·dv] and the norm runs in each head's last block; counters: n_v device words that are 0
// before the launch and are left 0. Only when deltanet_fused_fits(dk, dv) (dk ≤ 256).
bool deltanet_fused_fits(int64_t dk, int64_t dv);
void deltanet_fused(const float* conv_out, const float* b, const float* a, const float* z, const float* neg_a,
                    const float* dt_bias, const float* norm_weight, int64_t n, int64_t n_k, int64_t n_v,
                    int64_t dk, int64_t dv, float l2_eps, float q_scale, float norm_eps, const float* state,
                    float* state_out, float* raw, unsigned* counters, float* y, cudaStream_t s,
                    bool v_heads_tiled = false);

// One sequence of a multi-sequence DeltaNet step (a batch of several sequences' decode rows): its rows
// [row0, row0 + n) of the batch, and the conv and recurrent state it reads and the copies it writes.
struct DeltaPart {
    int64_t row0 = 0, n = 0;
    const float* conv_state = nullptr;
    float* conv_state_out = nullptr;
    const float* state = nullptr;
    float* state_out = nullptr;
};
// conv1d_silu and deltanet_fused over n_parts sequences in one launch each, sequence p's rows and state
// as parts[p] (device memory) says, each sequence's result bit for bit its own launch's (x, y, conv_out,
// b, a, z, raw as the one-sequence forms lay them out over the whole batch; counters: n_parts · n_v
// words, 0 before and after). max_rows: the most rows of any part.
void conv1d_silu_parts(const float* x, const DeltaPart* parts, int64_t n_parts, int64_t max_rows,
                       int64_t channels, int64_t kernel, const float* weight, float* y, cudaStream_t s);
void deltanet_fused_parts(const float* conv_out, const float* b, const float* a, const float* z,
                          const float* neg_a, const float* dt_bias, const float* norm_weight,
                          const DeltaPart* parts, int64_t n_parts, int64_t n_k, int64_t n_v, int64_t dk,
                          int64_t dv, float l2_eps, float q_scale, float norm_eps, float* raw,
                          unsigned* counters, float* y, cudaStream_t s, bool v_heads_tiled = false);
// kernels::router_topk for n tokens: logits [n, r.n_experts] → ids, weights [n, r.k] (r.bias, if
// any, in device memory). The sigmoid router takes at most 32 groups (kMaxRouterGroups).
inline constexpr int64_t kMaxRouterGroups = 32;
void router_topk(const float* logits, int64_t n, const kernels::RouterSpec& r, int32_t* ids, float* weights,
                 cudaStream_t s);
// out = silu(gate) ⊙ up.
void swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s);
// y += a · x.
void axpy(float a, const float* x, int64_t n, float* y, cudaStream_t s);
// x ⊙= sigmoid(gate).
void mul_sigmoid(float* x, const float* gate, int64_t n, cudaStream_t s);
// mix[t, :] += sigmoid(gate_logit[t]) · out[t, :].
void add_gated_rows(const float* out, const float* gate_logit, int64_t n, int64_t dim, float* mix,
                    cudaStream_t s);
// DeltaNet gates over [n, nv]: b ← sigmoid(b); a ← neg_a[j] · softplus(a + dt_bias[j]).
void deltanet_gates(float* b, float* a, const float* neg_a, const float* dt_bias, int64_t n, int64_t nv,
                    cudaStream_t s);
// Qwen3-Next's interleaved in_proj_qkvz [n, nk·(2dk + 2r·dv)] and in_proj_ba [n, nk·2r] into
// u [n, q | k | v] (conv input), z [n, nv·dv], b and a [n, nv] (models.md §3.5.2).
void split_qkvz(const float* p, const float* ba, int64_t n, int64_t nk, int64_t dk, int64_t r, int64_t dv,
                float* u, float* z, float* b, float* a, cudaStream_t s);

// The last launch error as text, or nullptr.
const char* last_error();

}  // namespace sluice::cuda
