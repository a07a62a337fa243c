// ModelPlan: every family and checkpoint-layout decision the forward depends on, made once when a
// model loads, per layer. Both backends run the layer program from the plan alone: no forward code
// asks which family or which checkpoint layout it runs (config.h and weights.cpp reconcile names
// and tensor layouts; this file decides the math).
//
// A new family maps its config onto these fields (make_plan), adding a field — and the op that
// reads it on each backend — only for math the plan cannot yet express. docs/ARCHITECTURE.md has
// the recipe.
//
// Lifetime: a value owned by the Model, immutable after load.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernels.h"
#include "model/config.h"

namespace sluice::model {

enum class CheckpointLayout;

// kLatentAttention: DeepSeek-V3's multi-head latent attention (LatentAttentionPlan), run in the absorbed
// form.
enum class MixerKind { kAttention, kGatedDeltaNet, kLatentAttention };
enum class FfnKind { kDense, kMoe };
// How routing weights are made (kernels::RouterSpec has the exact definitions): softmax over the
// router's logits, then the top k (Qwen3-MoE / Next / 3.5); or sigmoid scores, a bias
// (e_score_correction_bias) added for the choice only, group-limited top-k (GLM-4.5, DeepSeek-V3).
enum class RouterKind { kSoftmaxTopK, kSigmoidBiasTopK };
// The DeltaNet input projections: Qwen3-Next's in_proj_qkvz / in_proj_ba interleaved per key-head
// group, or Qwen3.5's separate head-major in_proj_qkv / z / b / a.
enum class DeltaProjection { kInterleavedQkvzBa, kSplit };

struct AttentionPlan {
    int64_t heads = 0, kv_heads = 0, head_dim = 0;
    int64_t rotary_dim = 0;  // NeoX RoPE on the first rotary_dim dims of each head
    float rope_theta = 10000.0f;
    std::vector<float> rope_inv_freq;  // YaRN's frequencies [rotary_dim / 2]; empty: from rope_theta
    float rope_mscale = 1.0f;          // YaRN's attention factor on cos and sin
    bool qk_norm = true;               // per-head RMS norm of q and k (every family but Qwen2)
    float qk_norm_eps = 1e-6f;         // its epsilon (weights hold any +1)
    bool qkv_bias = false;             // q, k and v projections add a bias (Qwen2)
    bool output_gate = false;  // q_proj also yields a per-head sigmoid gate, interleaved with q per head
    bool o_bias = false;       // o_proj adds a bias (gpt-oss)
    bool sinks = false;        // a per-head sink logit in the softmax (kernels::AttentionExtras; gpt-oss)
    int64_t window = 0;        // sliding window: a query at P sees keys P - window + 1 .. P (0: all)
};

// Multi-head latent attention (DeepSeek-V3 / Kimi K2; models.md-style notes in docs/models-verified.md).
// Per token: q = q_b(norm(q_a(x))) (or q_proj(x)) in heads of [nope | rope]; c = kv_a(x) = [latent | k_rope];
// the cache row is [rms_norm(latent) | rope(k_rope)] (cache_dim values, one "head" shared by all heads).
// Absorbed form, as decode is meant to run: q_lat[h] = W_UK[h]ᵀ q_nope[h] (W_UK[h]: the head's nope rows
// of kv_b), scores = scale · ([q_lat | rope(q_rope)] · cache row), o_lat[h] = Σ p · latent,
// out[h] = W_UV[h] o_lat[h] (its v rows of kv_b), then o_proj. The same numbers as the expanded form
// (k_nope = W_UK latent, v = W_UV latent per position), up to rounding.
struct LatentAttentionPlan {
    int64_t heads = 0;
    int64_t q_lora_rank = 0;  // 0: a plain q_proj
    int64_t kv_lora_rank = 0, nope_dim = 0, rope_dim = 0, v_dim = 0;
    bool rope_interleaved = false;  // pairs (2i, 2i+1) rotate (DeepSeek), not halves
    float rope_theta = 10000.0f;
    std::vector<float> rope_inv_freq;  // YaRN's [rope_dim / 2]; empty: from rope_theta
    float rope_mscale = 1.0f;          // YaRN's attention factor on cos and sin
    float softmax_scale = 1.0f;        // (nope + rope)^-1/2 · DeepSeek's YaRN mscale²
    float norm_eps = 1e-6f;            // the q and kv latents' RMS norms
    int64_t q_dim() const { return nope_dim + rope_dim; }
    int64_t cache_dim() const { return kv_lora_rank + rope_dim; }
};

struct DeltaNetPlan {
    int64_t k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0, conv_kernel = 0;
    DeltaProjection projection = DeltaProjection::kSplit;
    // Epsilon of the q/k L2 norm: transformers adds 1e-6 to Σx²; mlx-lm computes the same norm as a
    // scaled RMS norm whose epsilon on Σx² is dk·1e-6. They differ only when Σx² is tiny — exactly
    // the case of tiny test models — so each checkpoint layout follows its own reference.
    float l2_eps = 1e-6f;
    float norm_eps = 1e-6f;  // the gated output RMS norm
    // Value head j uses key head j / (v_heads / k_heads) (grouped, as Hugging Face orders them), or
    // j % k_heads (tiled: llama.cpp's converter moves Qwen3.5's value heads to that order, in every
    // tensor they index, when k_heads ≠ v_heads).
    bool v_heads_tiled = false;
    int64_t key_dim() const { return k_heads * k_dim; }
    int64_t value_dim() const { return v_heads * v_dim; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

struct MoePlan {
    RouterKind router = RouterKind::kSoftmaxTopK;
    int64_t experts = 0, top_k = 0, expert_ffn = 0;
    bool renormalize = false;             // divide the k picked probabilities by their sum
    float scale = 1.0f;                   // routed_scaling_factor on the k weights
    int64_t groups = 1, topk_groups = 1;  // kSigmoidBiasTopK: the groups kept before the top k
    bool shared_expert = false;
    bool shared_gate = false;        // the shared expert's output scaled by σ(shared_expert_gate · x)
    bool router_logit_bias = false;  // the router's bias added to its logits before the top k (gpt-oss)
    bool expert_bias = false;        // routed experts add biases after gate, up and down (gpt-oss)
    // The routed experts' activation: silu(gate) · up, or with swiglu_limit > 0 gpt-oss's clamped variant
    // (kernels::swiglu_clamped): g = min(gate, limit), (clamp(up, ±limit) + 1) · g · σ(alpha · g).
    float swiglu_limit = 0.0f;
    float swiglu_alpha = 1.0f;
    // The router's RouterSpec with `bias` (the layer's e_score_correction_bias, or null).
    kernels::RouterSpec router_spec(const float* bias) const {
        kernels::RouterSpec r;
        r.scoring = router == RouterKind::kSoftmaxTopK ? kernels::RouterSpec::Scoring::kSoftmax
                                                       : kernels::RouterSpec::Scoring::kSigmoid;
        r.n_experts = experts;
        r.k = top_k;
        r.renormalize = renormalize;
        r.scale = scale;
        r.bias = bias;
        r.groups = groups;
        r.topk_groups = topk_groups;
        return r;
    }
};

struct LayerPlan {
    MixerKind mixer = MixerKind::kAttention;
    AttentionPlan attention;     // when mixer == kAttention
    LatentAttentionPlan latent;  // when mixer == kLatentAttention
    DeltaNetPlan deltanet;       // when mixer == kGatedDeltaNet
    FfnKind ffn = FfnKind::kMoe;
    MoePlan moe;             // when ffn == kMoe
    float norm_eps = 1e-6f;  // the layer's two residual RMS norms
};

struct ModelPlan {
    int64_t hidden = 0, vocab = 0;
    float final_norm_eps = 1e-6f;
    std::vector<LayerPlan> layers;  // [n_layers + mtp_layers]: the multi-token-prediction layer last
    // The multi-token-prediction head's two conventions, as vLLM runs each family's head
    // (docs/models-verified.md §16): a DeepSeek-style nextn head (GLM-4.5, DeepSeek-V3) zeroes the
    // embedding of the row at position 0 and chains its output before the shared head's norm; the
    // Qwen3-Next / Qwen3.5 head keeps that embedding and chains its normed output.
    bool mtp_zero_first_embedding = false;
    bool mtp_chain_normed = true;
};

ModelPlan make_plan(const ModelConfig& config, CheckpointLayout layout);

}  // namespace sluice::model
