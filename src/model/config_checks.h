// The range and consistency checks every ModelConfig passes, whatever file it came from: config.json
// (config.cpp) or a GGUF's metadata (config_gguf.cpp). One definition, so a GGUF model is held to the
// bounds a Hugging Face one is; each source passes the names its file gives the fields, so a message
// names what the user can find in that file ("num_attention_heads" there, "key
// 'qwen3moe.attention.head_count'" here).
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "sluice/status.h"

namespace sluice::model {

// Bounds on config values (far past any released model; see check_model_config).
inline constexpr int64_t kConfigMaxVocab = int64_t{1} << 24;  // as the tokenizer's largest id
inline constexpr int64_t kConfigMaxDim = int64_t{1} << 20;
inline constexpr int64_t kConfigMaxLayers = 4096;
inline constexpr int64_t kConfigMaxHeads = 4096;
inline constexpr int64_t kConfigMaxExperts = int64_t{1} << 16;

// What a source calls each checked field (config.json's names by default).
struct ConfigFieldNames {
    std::string hidden = "hidden_size";
    std::string n_layers = "num_hidden_layers";
    std::string vocab = "vocab_size";
    std::string n_heads = "num_attention_heads";
    std::string n_kv_heads = "num_key_value_heads";
    std::string head_dim = "head_dim";
    std::string rotary_dim = "rotary dim";
    std::string max_positions = "max_position_embeddings";
    std::string n_experts = "num_experts";
    std::string top_k = "num_experts_per_tok";
    std::string expert_ffn = "moe_intermediate_size";
    std::string dense_ffn = "intermediate_size";
    std::string shared_expert_ffn = "shared_expert_intermediate_size";
    std::string decoder_sparse_step = "decoder_sparse_step";
    std::string rms_eps = "rms_norm_eps";
    std::string rope_theta = "rope_theta";
    std::string linear_k_heads = "linear_num_key_heads";
    std::string linear_v_heads = "linear_num_value_heads";
    std::string linear_k_dim = "linear_key_head_dim";
    std::string linear_v_dim = "linear_value_head_dim";
    std::string conv_kernel = "linear_conv_kernel_dim";
    std::string first_k_dense = "first_k_dense_replace";
    std::string nextn_layers = "num_nextn_predict_layers";
    std::string router_groups = "n_group";
    std::string router_topk_groups = "topk_group";
    std::string routed_scaling = "routed_scaling_factor";
};

// "[config] SOURCE: vocab_size N is outside 1..2^24" unless 1 ≤ vocab ≤ kConfigMaxVocab (checked before
// token ids are read against it).
Status check_vocab_size(int64_t vocab, const std::string& source, const std::string& name);

// Every bound and consistency rule on a parsed config: dims positive and bounded (no product of dims
// overflows, no corrupt value becomes a huge allocation), heads a multiple of KV heads, the rotary dim
// even and within the head, top-k within the experts, eps and theta positive and finite, a dense MLP's
// size where a layer has one, the DeltaNet heads and conv kernel. kInvalidArgument "[config] SOURCE: …"
// naming the field as `names` spells it.
Status check_model_config(const ModelConfig& config, const std::string& source,
                          const ConfigFieldNames& names = {});

}  // namespace sluice::model
