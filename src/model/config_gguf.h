// ModelConfig from a GGUF's metadata, as llama.cpp's converter (convert_hf_to_gguf.py, conversion/qwen.py
// and base.py `set_gguf_parameters`) writes it for the families sluice runs, equal field by field to
// what parse_model_config makes of the config.json the file was converted from
// (tests/unit/gguf_model_test.cpp checks it on every golden, with files the converter's own code wrote).
//
// general.architecture → family: qwen2 → qwen2, qwen3 → qwen3, qwen3moe → qwen3_moe, qwen3next →
// qwen3_next, qwen35moe → qwen3_5_moe (Qwen3.5 / 3.6 MoE), glm4moe → glm4_moe, qwen2moe → qwen2_moe,
// gpt-oss → gpt_oss, llama with expert_count → mixtral (a llama file without experts, a dense Llama /
// Mistral, is refused by name). Then, {arch}. omitted:
//   block_count − nextn_predict_layers   n_layers (the converter counts the MTP blocks in block_count)
//   nextn_predict_layers (0)             mtp_layers: 1 when ≥ 1 on Qwen3-Next / 3.5 (sluice runs one)
//   embedding_length                     hidden
//   context_length                       max_positions (llama.cpp requires it; so does sluice)
//   feed_forward_length                  dense_ffn (required for qwen2 / qwen3; 0 when absent otherwise)
//   attention.head_count                 n_heads
//   attention.head_count_kv (head_count) n_kv_heads
//   attention.key_length (H / n_heads)   head_dim; attention.value_length, when present, must equal it
//   rope.dimension_count (head_dim)      rotary_dim
//   rope.freq_base (10000)               rope_theta (an F32 in the file)
//   rope.scaling.type (none)             none; "linear" only with a factor of 0 or 1 (llama.cpp's "no
//                                        scaling"); yarn: rope.scaling.factor, .original_context_length
//                                        (context_length), .yarn_beta_fast (32), .yarn_beta_slow (1),
//                                        .yarn_attn_factor (HF's attention_factor; else 0.1·ln(factor) + 1,
//                                        as transformers computes it); anything else refused
//   attention.layer_norm_rms_epsilon     rms_eps (an F32, as llama.cpp requires it)
//   expert_count, expert_used_count,     n_experts, top_k, expert_ffn (required for the MoE families)
//   expert_feed_forward_length
//   expert_shared_feed_forward_length(0) shared_expert_ffn
//   ssm.group_count, ssm.time_step_rank, linear_k_heads, linear_v_heads, linear_k_dim,
//   ssm.state_size, ssm.inner_size,      linear_v_dim = inner_size / time_step_rank, conv_kernel
//   ssm.conv_kernel                      (required for Qwen3-Next / 3.5)
//   attention.recurrent_layers, or       layer_types: the BOOL array when present (llama.cpp reads it
//   full_attention_interval (4)          first), else every interval-th layer full attention
//   tokenizer.ggml.tokens (count), or    vocab (the converter pads the token list to config.json's
//   {arch}.vocab_size                    vocab_size with "[PAD{i}]" fillers; both present must agree)
//   tokenizer.ggml.eos_token_id,         eos_token_ids ([id]), bos_token_id; each (and padding_token_id)
//   .bos_token_id                        inside the vocabulary
// What the metadata does not say is each family's fixed choice, the one llama.cpp's graphs hard-wire:
// Qwen2 has q/k/v biases and no q/k norms; Qwen3-Next / 3.5 gate attention outputs; every MoE family
// renormalises its top-k router weights (llama.cpp's qwen3moe graph does so whatever config.json's
// norm_topk_prob said: the converter writes no key for it); an MoE in every layer (no decoder_sparse_step
// or mlp_only_layers in a GGUF). Tied embeddings are the absence of the output.weight tensor, which is
// why the file's tensor list is an input. ModelConfig::model_type is the family's Hugging Face name
// (family_name()); quantization stays absent (a GGUF's weight types are per tensor).
//
// gpt-oss (conversion/gpt_oss.py, llama_model_openai_moe): attention.sliding_window (required) on the layers
// of set_swa_pattern(attention.sliding_window_pattern, default 2) — the even layers, transformers'
// layer_types; q/k/v biases where the tensors are, o bias and sinks always; the router's bias, the experts'
// biases and the clamped SwiGLU (limit 7.0, alpha 1.702: llama.cpp hard-wires them, the converter writes no
// key) — and YaRN's correction range unrounded (truncate false, as gpt-oss defines it; llama.cpp rounds it).
// A rope.freq_base_swa other than rope.freq_base is refused.
//
// Mixtral (conversion/llama.py LlamaModel, llama_model_llama): the experts feed_forward_length wide (no
// expert_feed_forward_length), a softmax router renormalised over the top k; q/k/o biases, rope_freqs
// factors and attention.scale, which the llama graph can hold and Mixtral has not, are refused by name.
// Its q/k rows are permuted for llama.cpp's pairwise RoPE: undone where the weights are bound
// (model/tensor_map_gguf.h kRopePairs).
//
// Not read: general.* (but the architecture), rope.dimension_sections (M-RoPE sections: text-only
// positions make it plain RoPE), rope.scaling.yarn_ext_factor / yarn_log_multiplier / finetuned, the
// tokenizer's other keys. Fields config.json can say and a GGUF cannot — YaRN's truncate (true), a
// layer_types that is not the interval pattern, norm_topk_prob false — take llama.cpp's reading.
//
// Errors name the file and the key: a missing key or a value of another type as GgufMetadata reports
// them ("[gguf] m.gguf: key 'qwen3moe.block_count' not found"), the rest "[config] m.gguf: key
// 'qwen3moe.attention.head_count' (5) must be a positive multiple of key
// 'qwen3moe.attention.head_count_kv' (2)"; every bound parse_model_config enforces is enforced here
// by the same code (config_checks.h). An architecture sluice does not run is kUnsupported listing the
// ones it does.
//
// Pure functions over parsed metadata; thread-safe.
// Rejected alternative: converting the metadata back into a config.json and parsing that — the
// messages would name config.json fields the file does not have, and llama.cpp's defaults (head_count_kv,
// key_length, dimension_count) are not config.json's.
#pragma once

#include <string>
#include <string_view>

#include "format/gguf.h"
#include "model/config.h"
#include "sluice/status.h"

namespace sluice::model {

// The llama.cpp architectures (general.architecture) sluice runs, for messages.
const char* supported_gguf_architectures();
// The family of a general.architecture value; kUnsupported naming it and the supported ones otherwise.
Expected<Family> gguf_architecture_family(std::string_view architecture, const std::string& path);
// The general.architecture the converter writes for a family ("qwen35moe" for kQwen35Moe).
const char* gguf_architecture_name(Family family);

// What a file's tensors say that its metadata does not: llama.cpp decides these by the tensors'
// presence.
struct GgufTensorFacts {
    bool output = true;        // output.weight (false: tied embeddings)
    bool attn_q_norm = false;  // blk.0.attn_q_norm.weight: glm4moe's optional q/k norms (use_qk_norm)
    bool attn_q_bias = false;  // blk.0.attn_q.bias: glm4moe's optional q/k/v biases (attention_bias)
    bool attn_o_bias = false;  // blk.0.attn_output.bias (llama: refused)
    bool rope_freqs = false;   // rope_freqs.weight: llama3 / LongRoPE factors (llama: refused)
};
// `path` names the file in messages.
Expected<ModelConfig> parse_gguf_model_config(const format::GgufMetadata& metadata,
                                              const GgufTensorFacts& facts, const std::string& path);
// `has_output_tensor`: whether the file holds output.weight (false: tied embeddings, as llama.cpp reads it).
inline Expected<ModelConfig> parse_gguf_model_config(const format::GgufMetadata& metadata,
                                                     bool has_output_tensor, const std::string& path) {
    return parse_gguf_model_config(metadata, GgufTensorFacts{has_output_tensor}, path);
}
// The same for an opened file or split set (its first file's metadata, output.weight looked up in all).
Expected<ModelConfig> load_gguf_model_config(const format::GgufCheckpoint& checkpoint);

}  // namespace sluice::model
