// The CPU kernel contract: every op the model forward needs, over plain pointers and the
// WeightView descriptor. Kernels know nothing about models (no model headers here).
//
// Two implementations of every op:
//   - kernels::reference::*   (src/kernels/reference/) scalar, obviously correct, the oracle in tests;
//   - kernels::*              (src/kernels/cpu/) the fast path, dispatched at run time to AVX-512,
//                             AVX2 or portable code from the CPU's features (see cpu_features()).
// Both have identical signatures and semantics; tests compare them over shape sweeps.
//
// Conventions: activations are f32, row-major. A weight is a matrix W of logical shape
// [rows = out, cols = in] (PyTorch Linear layout); matvec computes y = W·x. Quantized weights use
// the MLX affine format (models.md §5): per group of `group_size` consecutive input elements a
// scale s and bias b, w = s·q + b, codes packed LSB-first into little-endian uint32 words.
// Threading: functions taking a ThreadPool* split rows over it (nullptr = calling thread only).
// All functions are re-entrant; none allocate on the heap except where noted.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/kv_format.h"

namespace sluice {
class ThreadPool;
}

namespace sluice::kernels {

// A weight format; each value has its descriptor in the registry (kernels/weight_format.h), which
// sizes, names and defines it. Values index the registry: append new ones.
enum class WeightType : uint8_t {
    kF32,
    kF16,
    kBF16,
    kQ4,  // MLX affine 4-bit: 8 codes per uint32
    kQ8,  // MLX affine 8-bit: 4 codes per uint32
    // ggml's block formats as GGUF files store them (kernels/ggml_quants.h): each row is whole blocks
    // carrying their own scales, so a view has `data` only.
    kGgmlQ4_0,
    kGgmlQ4_1,
    kGgmlQ5_0,
    kGgmlQ5_1,
    kGgmlQ8_0,
    kGgmlQ4_K,
    kGgmlQ5_K,
    kGgmlQ6_K,
    kGgmlIQ4_NL,
    kGgmlIQ4_XS,
    kGgmlMXFP4,
    // Q4_0, Q6_K, Q8_0 and MXFP4 with 16 rows interleaved per tile: the CPU's decode layouts, written at
    // load (ggml_tiles.h).
    kGgmlQ4_0x16,
    kGgmlQ6_Kx16,
    kGgmlQ8_0x16,
    kGgmlMXFP4x16,
};

enum class ScaleType : uint8_t { kF32, kF16, kBF16 };

// How the products of a block-quantized weight take their activations (WeightView::activations).
//   kF32:  x stays f32 and meets the dequantized weight (the reference arithmetic, exact to f32
//          rounding).
//   kInt8: x is quantised per block of 32 consecutive inputs to int8 — d = max|x| / 127,
//          q = round-to-nearest-even(x · (127 / max|x|)) — and the weight's codes multiply it in
//          integer arithmetic (VNNI / maddubs), each block's integer sum scaled by d once.
//          MLX affine (groups g of group_size a power of two >= 32: MLX's 32/64/128):
//            y_r = Σ_g [ s_g · Σ_{b∈g} d_b · Σ_{i∈b} code_i · q_i  +  bias_g · Σ_{b∈g} d_b · Σ_{i∈b} q_i ]
//          ggml blocks (ggml_quants.h): each block in its integer form (ggml_block_codes: element
//          i = scale_s·code_i + bias_s over sub-blocks s of 32 elements — Q6_K's 16 — each inside one
//          x block b), and
//            y_r = Σ_s [ scale_s · d_b · Σ_{i∈s} code_i · q_i  +  bias_s · d_b · Σ_{i∈s} q_i ]
//          with code_i the integer the block stores (Q4_0: nibble − 8; Q8_0: the int8; Q4_K/Q5_K: the
//          4/5-bit unsigned code, bias −dmin·m_s; Q6_K: code − 32; IQ4_NL/IQ4_XS: the codebook's int8;
//          MXFP4: the doubled e2m1 value) and scale_s the block's (sub-)block scale in f32 as the
//          dequantisation forms it (reference/linear.cpp, ggml_vec_dot_int8: integers exact, the rest
//          summed in double).
//          The bias term runs over the same quantised x, so the error is that of the weight times the
//          activation's rounding (within Σ_b d_b/2 · Σ_{i∈b} |w_i| of the f32 product), as with
//          llama.cpp's Q8 activations. Where this differs from llama.cpp: its Q8_0 activations (for
//          Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4; Q8_1 for Q4_1/Q5_1) are the same blocks of 32 but store d as f16,
//          here d stays f32; for the K-quants and IQ4_XS it quantises x as Q8_K — one d per 256 inputs,
//          the sub-block sums scaled in integers, one float product per 256 — here each sub-block's sum
//          meets the d of its own 32 inputs. One activation format for every weight is enough: 32
//          divides every ggml (sub-)block, so each integer sum is exact; a d per 32 inputs is never
//          coarser than one per 256 (a block's max|x| is at most its 256's); and x is quantised once
//          for every product reading it, whatever their formats (matvec_jobs: a Q4_K gate beside a Q6_K
//          down). Its price, one float multiply per 32 products instead of per 256, is small beside
//          the 32 integer products. Other weights (float formats, MLX's odd groups) take the f32 path.
enum class Activations : uint8_t { kF32, kInt8 };

const char* weight_type_name(WeightType type);

// A non-owning view of one weight matrix (or one expert's slice of a stacked tensor).
struct WeightView {
    WeightType type = WeightType::kF32;
    int64_t rows = 0;  // out features
    int64_t cols = 0;  // in features
    // kF32/kF16/kBF16: rows×cols elements, row-major. kQ4/kQ8: rows × (cols·bits/32) uint32 words.
    // kGgml*: rows × (cols / block elements) blocks, row-major (ggml_quants.h); kGgml*x16: the same
    // bytes as tiles of 16 rows (ggml_tiles.h).
    // May be unaligned for float types (safetensors offsets are not aligned); quantized words and
    // scales are read with memcpy-safe loads.
    const void* data = nullptr;
    // Quantized only: rows × (cols/group_size) scales and biases of scale_type.
    const void* scales = nullptr;
    const void* biases = nullptr;
    ScaleType scale_type = ScaleType::kBF16;
    int32_t group_size = 0;
    // Quantized only: how its products take x (see Activations). Chosen by the model at bind time.
    Activations activations = Activations::kF32;

    // From the format's descriptor (weight_format.h): code bits (0: a float format), whether it is
    // block-quantized, the bytes of one row of `data`.
    int bits() const;
    bool quantized() const;
    bool ggml_blocks() const;  // a ggml block format (kGgml*): scales inside the blocks
    size_t row_bytes() const;
    // Whether products take the int8 path: activations kInt8 on a format with int8 kernels (its
    // registry entry says): a ggml block format, or MLX affine with a group size a power of two >= 32.
    bool int8_activations() const;
};

// One product of a batch of products run together (matvec_jobs): y[n, w.rows] = W · x[n, w.cols].
struct MatvecJob {
    const WeightView* w = nullptr;
    const float* x = nullptr;
    int64_t n = 0;
    float* y = nullptr;
};

// How a router turns one token's logits [n_experts] into k experts and their weights (a layer's
// model::MoePlan routing fields, with the layer's bias bound).
//   kSoftmax (Qwen): p = softmax(logits); the k largest p; weights p, divided by their sum when
//     `renormalize`.
//   kSigmoid (GLM-4.5, DeepSeek-V3): s = σ(logits) and c = s + bias, both in f32 as the references
//     compute them; c chooses, s weighs. With groups > 1 the experts form `groups` equal groups, each
//     scored by the sum of its two largest c; experts outside the `topk_groups` best groups are
//     out (c = −∞: transformers 5's masked_fill and llama.cpp's build_moe_ffn; mlx-lm's 0.0 differs
//     only when every kept c is negative); then the k largest c. Weights s, divided by (their sum
//     + 1e-20) when `renormalize`.
// Both then multiply the weights by `scale` (routed_scaling_factor). Ties: the lower index first.
// ids/weights [k] are ordered by the choosing score, largest first.
struct RouterSpec {
    enum class Scoring : uint8_t { kSoftmax, kSigmoid };
    Scoring scoring = Scoring::kSoftmax;
    int64_t n_experts = 0, k = 0;
    bool renormalize = false;
    float scale = 1.0f;
    const float* bias = nullptr;  // [n_experts] or null (kSigmoid only); on the device for CUDA
    int64_t groups = 1, topk_groups = 1;
};

// gpt-oss's attention terms: a sliding window (a query at position P sees keys max(0, P - window + 1) .. P;
// 0: every key up to P) and per-head sink logits (one more logit per query head in the softmax's
// denominator, not scaled, with no value; null: none).
struct AttentionExtras {
    int64_t window = 0;
    const float* sinks = nullptr;  // [n_heads]
};

// ---- conversions -------------------------------------------------------------------------
float bf16_to_f32(uint16_t v);
uint16_t f32_to_bf16(float v);  // round to nearest even (NaN preserved)
float f16_to_f32(uint16_t v);
uint16_t f32_to_f16(float v);
// OCP FP8 E4M3 (the "fn" variant of DeepSeek-V3's and other FP8 checkpoints): 1 sign, 4 exponent bits
// (bias 7), 3 mantissa bits, subnormals, no infinities, 0x7F / 0xFF NaN; largest finite 448.
float f8e4m3_to_f32(uint8_t v);

// ---- the op set (declared twice: reference:: and the dispatched fast path) ------------------
#define SLUICE_KERNEL_OPS                                                                                     \
    /* out[cols] = row `row` of W, dequantized (embedding lookup). */                                         \
    void dequantize_row(const WeightView& w, int64_t row, float* out);                                        \
    /* y[rows] = W · x[cols]. */                                                                             \
    void matvec(const WeightView& w, const float* x, float* y, ThreadPool* pool);                             \
    /* Y[n, rows]: row t is exactly matvec(W, X[t]) — bit for bit, whatever n — while each weight row     \
       is read from memory once for all n vectors (a decode step of n sequences: one pass over the            \
       weights serves every sequence, and each gets the logits it would get alone). */                        \
    void matvec_batch(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool);            \
    /* Every job's matvec_batch — bit for bit — in one dispatch over the pool (the threads woken once for \
       several products: a decode's q/k/v, or all its experts' gate and up), each prepared x shared by the    \
       jobs that read the same vectors. */                                                                    \
    void matvec_jobs(const MatvecJob* jobs, int64_t count, ThreadPool* pool);                                 \
    /* Y[n, rows] = X[n, cols] · Wᵀ (prefill: every token through the same weight). */                     \
    void matmul(const WeightView& w, const float* x, int64_t n, float* y, ThreadPool* pool);                  \
    /* y = x / sqrt(mean(x²) + eps) · weight, over n elements (weight already holds any +1). */             \
    void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y);                       \
    /* Gated norm of the DeltaNet output: y = rms_norm(x, weight) ⊙ silu(z). */                             \
    void rms_norm_gated(const float* x, const float* z, const float* weight, int64_t n, float eps,            \
                        float* y);                                                                            \
    /* NeoX (rotate-half) RoPE on the first rot_dim dims of each of n_heads heads of head_dim,                \
       in place; pairs (i, i + rot_dim/2); f_i = theta^(-2i/rot_dim). */                                      \
    void rope_neox(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t position,            \
                   float theta);                                                                              \
    /* rope_neox with its frequencies given, inv_freq [rot_dim / 2] (a scaled RoPE such as YaRN), and         \
       cos and sin multiplied by mscale (YaRN's attention factor; 1: none). */                                \
    void rope_neox_table(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dim, int64_t position,      \
                         const float* inv_freq, float mscale);                                                \
    /* Causal GQA attention for n_q new query rows at absolute positions                                      \
       start_pos..start_pos+n_q-1 against keys/values for positions 0..start_pos+n_q-1.                       \
       q: [n_q, n_heads, head_dim]; k, v: [n_kv_rows, n_kv_heads, head_dim] (row = position);                 \
       out: [n_q, n_heads, head_dim]. Query head h uses KV head h / (n_heads / n_kv_heads).                   \
       The query at position P attends to keys lo..P, lo = max(0, P - extras.window + 1) (0 with no           \
       window), with scores s_j = scale · q·k_j; with extras.sinks, head h's softmax also counts            \
       sinks[h] (unscaled) in its denominator: out = Σ_j exp(s_j − M) v_j / (Σ_j exp(s_j − M) +         \
       exp(sinks[h] − M)), M = max(max_j s_j, sinks[h]) (transformers' gpt-oss eager attention).            \
       Softmax in f32. Any scratch is per-thread and reused (thread_local), not allocated per call. */        \
    void attention(const float* q, const float* k, const float* v, int64_t n_q, int64_t start_pos,            \
                   int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, float scale, float* out,            \
                   ThreadPool* pool, const AttentionExtras& extras = {});                                     \
    /* n rows [n, n_kv_heads, head_dim] of f32 stored as KV cache rows of `type` (kv_format.h): row t         \
       at dst + t · n_kv_heads · kv_head_bytes(type, head_dim). */                                          \
    void kv_store(KvType type, const float* x, int64_t n, int64_t n_kv_heads, int64_t head_dim, void* dst);   \
    /* The inverse: n cache rows back to f32, as attention_kv reads them. */                                  \
    void kv_load(KvType type, const void* src, int64_t n, int64_t n_kv_heads, int64_t head_dim, float* x);    \
    /* attention() over a KV cache of `type`: k, v hold the cache rows of positions                           \
       0..start_pos+n_q-1; each key and value is read as kv_load gives it, one head at a time (the            \
       cache is never decoded as a whole), or from the f16 ring when `ring` (may be null) holds it            \
       inside its window (KvRing: the f16 copy of recent rows, independent of extras.window — both may      \
       be on). kF32 without a ring is attention() itself, extras included. */                                 \
    void attention_kv(KvType type, const float* q, const void* k, const void* v, const KvRing* ring,          \
                      int64_t n_q, int64_t start_pos, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,  \
                      float scale, float* out, ThreadPool* pool, const AttentionExtras& extras = {});         \
    /* Causal depthwise conv1d + SiLU over channels, kernel K, with a state of the K-1 previous               \
       raw inputs (oldest first), for n tokens. x: [n, channels] raw inputs; weight: [channels, K]            \
       (weight[c*K + K-1] multiplies the current token); state_in: [K-1, channels]; state_out (may be         \
       state_in: in place) gets the last K-1 raw inputs; y: [n, channels] = silu(conv). */                    \
    void conv1d_silu(const float* x, int64_t n, int64_t channels, int64_t kernel, const float* weight,        \
                     const float* state_in, float* state_out, float* y);                                      \
    /* Gated DeltaNet over n tokens for n_v value heads, token by token (models.md §3.5.6).                  \
       q, k: [n, n_k, dk] already L2-normalised (q also scaled by dk^-1/2); v: [n, n_v, dv];                  \
       beta, g: [n, n_v] (beta = sigmoid(b), g = log decay <= 0); value head j uses key head                  \
       j / (n_v / n_k). state_in: [n_v, dk, dv] f32; state_out (may be state_in: in place) gets the           \
       state after the n tokens, so a caller can keep the old state until the whole forward succeeds.         \
       out: [n, n_v, dv]. */                                                                                  \
    void gated_delta_recurrent(const float* q, const float* k, const float* v, const float* beta,             \
                               const float* g, int64_t n, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv,   \
                               const float* state_in, float* state_out, float* out, ThreadPool* pool);        \
    /* The same result computed in chunks of 64 (models.md §3.5.7); for prefill. */                          \
    void gated_delta_chunked(const float* q, const float* k, const float* v, const float* beta,               \
                             const float* g, int64_t n, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv,     \
                             const float* state_in, float* state_out, float* out, ThreadPool* pool);          \
    /* Router: the k experts and weights of logits[r.n_experts] as RouterSpec defines them.                   \
       ids/weights: [r.k]. */                                                                                 \
    void router_topk(const float* logits, const RouterSpec& r, int32_t* ids, float* weights);                 \
    /* out[i] = silu(gate[i]) * up[i]. */                                                                     \
    void swiglu(const float* gate, const float* up, int64_t n, float* out);                                   \
    /* gpt-oss's clamped SwiGLU: g = min(gate[i], limit), u = clamp(up[i], -limit, limit),                    \
       out[i] = (u + 1) · g · σ(alpha · g). */                                                            \
    void swiglu_clamped(const float* gate, const float* up, int64_t n, float alpha, float limit,              \
                        float* out);                                                                          \
    /* y[i] += a * x[i]. */                                                                                   \
    void axpy(float a, const float* x, int64_t n, float* y);

namespace reference {
SLUICE_KERNEL_OPS
}

SLUICE_KERNEL_OPS

// Which implementation the dispatched ops use on this CPU: "avx512", "avx2" or "portable".
const char* cpu_kernel_isa();
// Which implementation the int8-activation products use: "avx512-vnni" (VNNI vpdpbusd), "avx2"
// (vpmaddubsw), or "portable".
const char* cpu_int8_kernel_isa();

}  // namespace sluice::kernels
