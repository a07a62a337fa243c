// model_config_json (config.h): a ModelConfig written back as the config.json parse_model_config reads, in
// Hugging Face's spelling. `sluice pack FILE.gguf` writes the config a GGUF's metadata gives
// (config_gguf.h) so, so that the pack loads through the ordinary config path and runs the same model.
//
// Every field the parser reads is written explicitly, never left to a family default: the defaults differ
// by family (GLM's rms_norm_eps 1e-5 and first_k_dense_replace 1, the hybrids' partial_rotary_factor
// 0.25) and a GGUF's values are llama.cpp's, not transformers'. The rotary dims are written as
// partial_rotary_factor = rotary_dim / head_dim, which the parser rounds back to the same integer; the
// f32 fields (rms_norm_eps, rope_theta, routed_scaling_factor) by their shortest decimal ("1e-06", as
// transformers writes them), which reads back as the same f32; the doubles (YaRN's) as they are, which
// JSON carries exactly.
//
// Rejected alternative: keeping the GGUF's metadata in the pack and reading the config from it — every
// loader of a packed folder would then need a second config path, and `sluice info` / `show` one more.
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "model/config.h"

namespace sluice::model {

using nlohmann::json;

namespace {

// An f32 as the shortest decimal that reads back as it (1e-6f: 1e-06, not 9.999999974752427e-07).
json f32_number(float v) {
    char buf[32];
    const auto written = std::to_chars(buf, buf + sizeof buf, v);
    double d = v;
    std::from_chars(buf, written.ptr, d);  // locale-free both ways
    return d;
}

}  // namespace

Expected<std::string> model_config_json(const ModelConfig& c) {
    if (c.family == Family::kDeepseekV3 || c.quantization.present || c.fp8_block_rows > 0 || c.mxfp4_experts)
        return error(ErrorCode::kUnsupported,
                     std::string("[config] writing a config.json for ") + family_name(c.family) +
                         (c.quantization.present || c.fp8_block_rows > 0 ? " with quantized weights" : "") +
                         " is not implemented (only the families a GGUF holds, unquantized)");
    const bool hybrid = c.family == Family::kQwen3Next || c.family == Family::kQwen35Moe;
    json j;
    j["model_type"] = family_name(c.family);
    j["hidden_size"] = c.hidden;
    j["num_hidden_layers"] = c.n_layers;
    j["vocab_size"] = c.vocab;
    j["num_attention_heads"] = c.n_heads;
    j["num_key_value_heads"] = c.n_kv_heads;
    j["head_dim"] = c.head_dim;
    j["rms_norm_eps"] = f32_number(c.rms_eps);
    j["max_position_embeddings"] = c.max_positions;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["rope_theta"] = f32_number(c.rope_theta);
    j["partial_rotary_factor"] = static_cast<double>(c.rotary_dim) / static_cast<double>(c.head_dim);
    if (c.yarn.enabled)
        j["rope_scaling"] = {{"rope_type", "yarn"},
                             {"factor", c.yarn.factor},
                             {"original_max_position_embeddings", c.yarn.original_max_positions},
                             {"beta_fast", c.yarn.beta_fast},
                             {"beta_slow", c.yarn.beta_slow},
                             {"attention_factor", c.yarn.attention_factor},
                             {"truncate", c.yarn.truncate}};
    else if (c.family == Family::kGptOss)  // (without it, GptOssConfig's YaRN default would apply)
        j["rope_scaling"] = {{"rope_type", "default"}};

    if (c.is_dense_family()) {
        j["intermediate_size"] = c.dense_ffn;
    } else if (c.family == Family::kGptOss || c.family == Family::kMixtral) {
        // GptOssConfig, MixtralConfig: intermediate_size is every expert's
        j["num_local_experts"] = c.n_experts;
        j["num_experts_per_tok"] = c.top_k;
        j["intermediate_size"] = c.expert_ffn;
    } else {
        j[c.family == Family::kGlm4Moe ? "n_routed_experts" : "num_experts"] = c.n_experts;
        j["num_experts_per_tok"] = c.top_k;
        j["moe_intermediate_size"] = c.expert_ffn;
        j["intermediate_size"] = c.dense_ffn;
        j["decoder_sparse_step"] = c.decoder_sparse_step;
        j["mlp_only_layers"] = c.mlp_only_layers;
        j["norm_topk_prob"] = c.norm_topk_prob;
    }
    switch (c.family) {
        case Family::kQwen2: break;  // biases on q/k/v and no q/k norm: hard-wired by the parser
        case Family::kQwen3:
        case Family::kQwen3Moe: j["attention_bias"] = false; break;
        case Family::kQwen2Moe:
            j["shared_expert_intermediate_size"] = c.shared_expert_ffn;
            j["qkv_bias"] = c.attn_qkv_bias;
            break;
        case Family::kGlm4Moe:
            j["n_group"] = c.router_groups;
            j["topk_group"] = c.router_topk_groups;
            j["routed_scaling_factor"] = f32_number(c.routed_scaling);
            j["first_k_dense_replace"] = c.first_k_dense;
            j["n_shared_experts"] = c.expert_ffn > 0 ? c.shared_expert_ffn / c.expert_ffn : 0;
            j["num_nextn_predict_layers"] = c.nextn_layers;
            j["use_qk_norm"] = c.attn_qk_norm;
            j["attention_bias"] = c.attn_qkv_bias;
            break;
        case Family::kGptOss: {
            // Biases on q/k/v/o (the o bias and the sinks are always there), the router's and experts'
            // biases and the sinks are the family's; the clamped SwiGLU's limit, the window and its layers.
            j["attention_bias"] = c.attn_qkv_bias;
            j["swiglu_limit"] = f32_number(c.swiglu_limit);
            j["sliding_window"] = c.sliding_window;
            json types = json::array();
            for (int64_t l = 0; l < c.n_layers; ++l)
                types.push_back(c.window_of(l) > 0 ? "sliding_attention" : "full_attention");
            j["layer_types"] = types;
            break;
        }
        default: break;
    }
    if (hybrid) {
        j["attn_output_gate"] = c.attn_output_gate;
        j["linear_num_key_heads"] = c.linear_k_heads;
        j["linear_num_value_heads"] = c.linear_v_heads;
        j["linear_key_head_dim"] = c.linear_k_dim;
        j["linear_value_head_dim"] = c.linear_v_dim;
        j["linear_conv_kernel_dim"] = c.conv_kernel;
        j["shared_expert_intermediate_size"] = c.shared_expert_ffn;
        json types = json::array();
        for (LayerType t : c.layer_types)
            types.push_back(t == LayerType::kLinearAttention ? "linear_attention" : "full_attention");
        j["layer_types"] = types;
        // Only a declaration: the MTP layer runs when the weights hold it (ModelConfig::mtp_layers).
        j["mtp_num_hidden_layers"] = c.mtp_layers;
    }
    if (c.eos_token_ids.size() == 1)
        j["eos_token_id"] = c.eos_token_ids[0];
    else if (!c.eos_token_ids.empty())
        j["eos_token_id"] = c.eos_token_ids;
    if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
    return j.dump(2) + "\n";
}

}  // namespace sluice::model
