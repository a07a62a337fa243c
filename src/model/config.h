// ModelConfig: the one place where Hugging Face / MLX config.json names become sluice's names.
// Every dimension used anywhere in the forward is a field here, with its glossary letter from
// models.md §0 in the comment. Parsed once at load; immutable afterwards.
//
// Families: qwen2 (dense Qwen2 / Qwen2.5: biases on q/k/v, no q/k norm, a dense MLP in every layer),
// qwen3 (dense: Qwen3-MoE's attention, a dense MLP in every layer), qwen3_moe (models.md §2),
// qwen3_next (§3), qwen3_5_moe (§4; nested `text_config`), qwen2_moe (Qwen1.5-MoE / Qwen2-57B-A14B:
// Qwen2's attention with Qwen3-Next's softmax router and gated shared expert), glm4_moe (GLM-4.5 / 4.6
// / 4.5-Air: Qwen3-MoE's decoder with q/k/v biases, optional q/k norms, half-rotary RoPE, a sigmoid router
// whose bias chooses, an ungated shared expert and dense first layers), deepseek_v3 (DeepSeek-V3 / R1 /
// V3.1 and Kimi K2: GLM's router and experts under multi-head latent attention), gpt_oss (gpt-oss-20b /
// 120b: biases on every attention projection, per-head sinks, sliding-window layers alternating with full
// ones, a biased router, experts with biases and a clamped SwiGLU, MXFP4 experts on the Hub). Family defaults
// are applied here and nowhere else (e.g. Qwen3.5/3.6 routers always renormalise).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::model {

enum class Family {
    kQwen2,
    kQwen3,
    kQwen3Moe,
    kQwen3Next,
    kQwen35Moe,
    kGlm4Moe,
    kQwen2Moe,
    kMixtral,
    kDeepseekV3,
    kGptOss
};
const char* family_name(Family family);

enum class LayerType { kFullAttention, kLinearAttention };

// MLX affine quantization of one module (models.md §5).
struct QuantSpec {
    int bits = 0;  // 0 = not quantized
    int group_size = 0;
};

// The `quantization` block of an MLX config.json: global default plus per-module overrides keyed
// by module path (e.g. "model.layers.0.mlp.gate").
struct QuantConfig {
    bool present = false;
    QuantSpec global;
    std::string mode = "affine";
    std::map<std::string, QuantSpec> overrides;

    // Spec for a module path: the override if any, else the global one.
    QuantSpec for_module(const std::string& path) const;
};

struct ModelConfig {
    // The longest context the model runs: max_position_embeddings, or with YaRN at least
    // factor × original_max_position_embeddings (0: unknown).
    int64_t context_limit() const;
    // The inverse frequencies of the rotated dims [rotary_dim / 2] under YaRN (f32 as transformers
    // computes them); empty without scaling (the kernels derive them from rope_theta).
    std::vector<float> rope_inv_freq() const;

    Family family = Family::kQwen3Moe;
    std::string model_type;  // as written in the file (outer type for nested configs)

    int64_t hidden = 0;     // H: hidden_size
    int64_t n_layers = 0;   // num_hidden_layers
    int64_t vocab = 0;      // V: vocab_size (embedding rows)
    float rms_eps = 1e-6f;  // rms_norm_eps
    int64_t max_positions = 0;
    bool tie_word_embeddings = false;

    // Full attention (§1.5, §2.2, §3.4).
    int64_t n_heads = 0;     // nh: num_attention_heads
    int64_t n_kv_heads = 0;  // nkv: num_key_value_heads
    int64_t head_dim = 0;    // hd
    int64_t rotary_dim = 0;  // R = head_dim · partial_rotary_factor
    float rope_theta = 10000.0f;
    // YaRN (rope_scaling / rope_parameters rope_type "yarn", as transformers computes it): the
    // frequencies of the rotated dims interpolated by `factor` below the correction range of
    // beta_fast..beta_slow rotations over original_max_position_embeddings, kept above it, a ramp
    // between; cos and sin scaled by attention_factor (default 0.1·ln(factor) + 1, or DeepSeek's
    // mscale ratio). It lets a model run to factor × original_max_position_embeddings tokens.
    struct Yarn {
        bool enabled = false;
        double factor = 1.0;
        int64_t original_max_positions = 0;
        double beta_fast = 32.0, beta_slow = 1.0;
        double attention_factor = 1.0;
        bool truncate = true;  // the correction range rounded outwards to whole dims
        // DeepSeek's attention also multiplies the softmax scale by mscale(factor, mscale_all_dim)²
        // (0.1·mscale_all_dim·ln(factor) + 1, squared); 1 elsewhere.
        double softmax_mscale = 1.0;
    } yarn;
    // Multi-head latent attention (DeepSeek-V3, Kimi K2; kv_lora_rank > 0): q through a rank-q_lora_rank
    // bottleneck (q_a_proj → RMS norm → q_b_proj; 0: a plain q_proj) into heads of qk_nope_dim + qk_rope_dim
    // (head_dim is their sum, rotary_dim = qk_rope_dim); keys and values from one kv_lora_rank latent (its
    // RMS norm) through kv_b_proj, plus one rope key shared by every head; values of v_head_dim. The cache
    // holds only the normed latent and the roped key: one row of kv_lora_rank + qk_rope_dim per position.
    int64_t q_lora_rank = 0;
    int64_t kv_lora_rank = 0;
    int64_t qk_nope_dim = 0;
    int64_t qk_rope_dim = 0;
    int64_t v_head_dim = 0;
    bool rope_interleave = false;   // RoPE rotates pairs (2i, 2i+1) of the rope dims (DeepSeek), not halves
    bool attn_output_gate = false;  // q_proj also yields a per-head sigmoid gate (Next, 3.5)
    bool attn_qk_norm = true;       // per-head RMS norms of q and k (every family but Qwen2)
    bool attn_qkv_bias = false;     // q_proj, k_proj and v_proj have biases (Qwen2)
    bool attn_o_bias = false;       // o_proj has a bias too (gpt-oss)
    bool attn_sinks = false;        // self_attn.sinks [nh]: a logit per head in the softmax (gpt-oss)
    // Sliding-window attention (gpt-oss's "sliding_attention" layers): a query at position P sees keys
    // P - sliding_window + 1 .. P on the layers layer_sliding marks; 0: none.
    int64_t sliding_window = 0;
    std::vector<bool> layer_sliding;  // [n_layers] (empty: none)

    // Gated DeltaNet (§3.5).
    int64_t linear_k_heads = 0;             // nk
    int64_t linear_v_heads = 0;             // nv
    int64_t linear_k_dim = 0;               // dk
    int64_t linear_v_dim = 0;               // dv
    int64_t conv_kernel = 0;                // K
    bool split_linear_projections = false;  // 3.5: in_proj_qkv/z/b/a; Next: interleaved qkvz/ba

    // MoE (§1.7, §3.6).
    int64_t n_experts = 0;            // E
    int64_t top_k = 0;                // num_experts_per_tok
    int64_t expert_ffn = 0;           // I: moe_intermediate_size
    int64_t shared_expert_ffn = 0;    // I_s: shared_expert_intermediate_size (0 = none); GLM:
                                      // moe_intermediate_size × n_shared_experts
    bool shared_expert_gated = true;  // scaled by σ(shared_expert_gate · x) (Qwen); GLM's is not
    int64_t dense_ffn = 0;            // intermediate_size: dense MLP of non-MoE layers
    bool norm_topk_prob = false;
    int64_t decoder_sparse_step = 1;
    std::vector<int64_t> mlp_only_layers;
    int64_t first_k_dense = 0;  // first_k_dense_replace: layers [0, first_k_dense) are dense
    // The router (kernels::RouterSpec): softmax (Qwen) or sigmoid scores with a selection bias
    // (`mlp.gate.e_score_correction_bias`, GLM / DeepSeek-V3), group-limited top-k over n_group
    // groups keeping topk_group, weights times routed_scaling_factor.
    bool router_sigmoid = false;
    int64_t router_groups = 1;       // n_group
    int64_t router_topk_groups = 1;  // topk_group
    float routed_scaling = 1.0f;     // routed_scaling_factor
    // DeepSeek-style multi-token-prediction layers stored after the decoder's layers
    // (model.layers.N .. N + nextn_layers - 1: num_nextn_predict_layers). Not run; accepted in a
    // checkpoint and left out of a pack.
    int64_t nextn_layers = 0;
    // gpt-oss's MoE: the router's own bias added to its logits (choosing and weighting, unlike the
    // selection bias above); experts with biases on gate, up and down; the clamped SwiGLU of the
    // reference, out = (clamp(up, ±limit) + 1) · g·σ(alpha·g) with g = min(gate, limit); the gate and up
    // rows of its fused gate_up_proj interleaved (2j gate, 2j + 1 up).
    bool router_logit_bias = false;
    bool expert_bias = false;
    float swiglu_limit = 0.0f;  // 0: the plain SwiGLU
    float swiglu_alpha = 1.0f;
    // The Hub's gpt-oss checkpoints: quantization_config quant_method "mxfp4", the routed experts stored as
    // gate_up_proj_blocks / _scales and down_proj_blocks / _scales (OCP MXFP4: e2m1 codes, an e8m0 scale per
    // 32), which sluice repacks into ggml's MXFP4 blocks (model/gpt_oss_experts.h).
    bool mxfp4_experts = false;

    std::vector<LayerType> layer_types;  // [n_layers]
    // Multi-token-prediction layers the checkpoint holds (models.md §3.7): 0 or 1, set at load from
    // its tensors (`mtp.fc.weight`); config.json's num_nextn_predict_layers / mtp_num_hidden_layers
    // only declare them (mlx-lm checkpoints drop the head). The MTP layer is layer index n_layers of
    // the weights and the plan: a full-attention MoE decoder layer.
    int64_t mtp_layers = 0;
    std::vector<int32_t> eos_token_ids;  // from config (generation_config may add more)
    std::optional<int32_t> bos_token_id;

    QuantConfig quantization;  // MLX checkpoints only
    // An FP8 checkpoint (quantization_config quant_method "fp8", DeepSeek-V3's): e4m3 weights, each block of
    // fp8_block_rows × fp8_block_cols scaled by its f32 `weight_scale_inv`; 0 otherwise. `sluice pack` and
    // `pull` convert them to MLX affine 4/8-bit (convert/pack_plan.h); they do not run as stored.
    int64_t fp8_block_rows = 0, fp8_block_cols = 0;

    // Derived helpers.
    bool is_full_attention(int64_t layer) const {
        return layer >= n_layers || layer_types[layer] == LayerType::kFullAttention;  // MTP: attention
    }
    bool is_mtp_layer(int64_t layer) const { return layer >= n_layers; }
    // The layer's attention window (0: full attention).
    int64_t window_of(int64_t layer) const {
        return layer < static_cast<int64_t>(layer_sliding.size()) && layer_sliding[static_cast<size_t>(layer)]
                   ? sliding_window
                   : 0;
    }
    bool is_moe_layer(int64_t layer) const;
    bool latent_attention() const { return kv_lora_rank > 0; }
    // The geometry of one position's cached keys: n heads of this many values each (MLA: one latent row).
    int64_t kv_cache_heads() const { return latent_attention() ? 1 : n_kv_heads; }
    int64_t kv_cache_dim() const { return latent_attention() ? kv_lora_rank + qk_rope_dim : head_dim; }
    bool has_experts() const { return n_experts > 0; }  // false for a dense family
    bool is_dense_family() const { return family == Family::kQwen2 || family == Family::kQwen3; }
    int64_t linear_key_dim() const { return linear_k_heads * linear_k_dim; }    // nk·dk
    int64_t linear_value_dim() const { return linear_v_heads * linear_v_dim; }  // nv·dv
    int64_t conv_dim() const { return 2 * linear_key_dim() + linear_value_dim(); }
    bool zero_centered_norms() const { return family == Family::kQwen3Next || family == Family::kQwen35Moe; }
    bool has_linear_attention() const {
        for (LayerType t : layer_types)
            if (t == LayerType::kLinearAttention) return true;
        return false;
    }
};

// Parses config.json text. `source` (usually the path) is used in error messages.
Expected<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);
Expected<ModelConfig> load_model_config(const std::string& model_dir);

// The config.json, in Hugging Face's spelling, that parse_model_config reads back as `config` field for
// field (but mtp_layers, which a load counts from the weights): what `sluice pack FILE.gguf` writes for
// the config a GGUF's metadata gives. kUnsupported for the family no GGUF of sluice's holds
// (DeepSeek-V3) and for quantization blocks, which it does not write.
Expected<std::string> model_config_json(const ModelConfig& config);

// The model types sluice can run, for error messages and `sluice info`.
const char* supported_model_types();

}  // namespace sluice::model
