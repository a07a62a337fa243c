// ModelConfig from a GGUF's metadata (config_gguf.h). Each key below is cited with the converter call
// that writes it (llama.cpp conversion/base.py TextModel.set_gguf_parameters unless said otherwise) and,
// where a key is optional, llama.cpp's default (src/llama-model.cpp load_hparams, src/models/*.cpp).
#include "model/config_gguf.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "model/config_checks.h"

namespace sluice::model {

using format::GgufMetadata;
using format::GgufValue;

namespace {

struct ArchEntry {
    const char* name;
    Family family;
};
constexpr ArchEntry kArchitectures[] = {
    {"qwen2", Family::kQwen2},         {"qwen3", Family::kQwen3},         {"qwen3moe", Family::kQwen3Moe},
    {"qwen3next", Family::kQwen3Next}, {"qwen35moe", Family::kQwen35Moe}, {"glm4moe", Family::kGlm4Moe},
    {"qwen2moe", Family::kQwen2Moe},   {"gpt-oss", Family::kGptOss},      {"llama", Family::kMixtral}};

// The largest integer a count key may hold before it is narrowed (far past every bound checked later,
// so the bound's message shows the value).
constexpr uint64_t kMaxCount = uint64_t{1} << 40;

// Reads `{arch}.NAME` keys: typed by GgufMetadata (its messages name the file and the key), counts
// bounded before they are narrowed, optional keys with llama.cpp's defaults.
class Keys {
 public:
    Keys(const GgufMetadata& md, std::string arch, std::string path)
        : md_(md), arch_(std::move(arch)), path_(std::move(path)) {}

    std::string key(const char* name) const { return arch_ + "." + name; }
    // How messages name a key: "key 'qwen3moe.embedding_length'".
    std::string quoted(const char* name) const { return "key '" + key(name) + "'"; }
    bool has(const char* name) const { return md_.has(key(name)); }

    Expected<int64_t> count(const char* name) const { return count_of(key(name)); }
    Expected<int64_t> count_or(const char* name, int64_t fallback) const {
        return has(name) ? count(name) : Expected<int64_t>(fallback);
    }
    Expected<int64_t> count_of(const std::string& full_key) const {
        SLUICE_ASSIGN_OR_RETURN(const uint64_t v, md_.get_uint(full_key));
        if (v > kMaxCount) return invalid("key '" + full_key + "' = " + std::to_string(v) + " is too large");
        return static_cast<int64_t>(v);
    }
    Expected<double> real(const char* name) const { return md_.get_float(key(name)); }
    Expected<double> real_or(const char* name, double fallback) const {
        return has(name) ? real(name) : Expected<double>(fallback);
    }

    Status invalid(const std::string& what) const {
        return error(ErrorCode::kInvalidArgument, "[config] " + path_ + ": " + what);
    }
    Status unsupported(const std::string& what) const {
        return error(ErrorCode::kUnsupported, "[config] " + path_ + ": " + what);
    }

 private:
    const GgufMetadata& md_;
    std::string arch_;
    std::string path_;
};

// RoPE scaling (base.py: add_rope_scaling_type / _factor / _orig_ctx_len / _yarn_*): none, or YaRN as
// ModelConfig::Yarn holds it. llama.cpp reads a missing type as "linear" and a missing factor as 0,
// which is no scaling.
Status read_rope_scaling(const GgufMetadata& md, const Keys& k, ModelConfig* cfg) {
    std::string type = "none";
    if (k.has("rope.scaling.type")) {
        SLUICE_ASSIGN_OR_RETURN(type, md.get_string(k.key("rope.scaling.type")));
    }
    SLUICE_ASSIGN_OR_RETURN(const double factor, k.real_or("rope.scaling.factor", 0.0));
    if (type == "none" || (type == "linear" && (factor == 0.0 || factor == 1.0))) return Status::ok();
    if (type != "yarn")
        return k.unsupported(k.quoted("rope.scaling.type") + " is '" + type +
                             (type == "linear" ? "' with a factor of " + std::to_string(factor) : "'") +
                             ": sluice runs yarn or no scaling");
    ModelConfig::Yarn& y = cfg->yarn;
    y.enabled = true;
    SLUICE_ASSIGN_OR_RETURN(y.factor, k.real("rope.scaling.factor"));
    SLUICE_ASSIGN_OR_RETURN(y.original_max_positions,
                            k.count_or("rope.scaling.original_context_length", cfg->max_positions));
    SLUICE_ASSIGN_OR_RETURN(y.beta_fast, k.real_or("rope.scaling.yarn_beta_fast", 32.0));
    SLUICE_ASSIGN_OR_RETURN(y.beta_slow, k.real_or("rope.scaling.yarn_beta_slow", 1.0));
    if (!(y.factor >= 1.0) || !std::isfinite(y.factor))
        return k.invalid(k.quoted("rope.scaling.factor") + " must be >= 1 for yarn, got " +
                         std::to_string(y.factor));
    if (y.original_max_positions <= 0)
        return k.invalid(k.quoted("rope.scaling.original_context_length") + " must be > 0 for yarn");
    if (!(y.beta_fast > 0.0) || !(y.beta_slow > 0.0))
        return k.invalid(k.quoted("rope.scaling.yarn_beta_fast") + " and " +
                         k.quoted("rope.scaling.yarn_beta_slow") + " must be positive");
    // The converter copies HF's attention_factor here when config.json has one; else transformers'
    // default, as config.cpp computes it.
    const double fallback = y.factor <= 1.0 ? 1.0 : 0.1 * std::log(y.factor) + 1.0;
    SLUICE_ASSIGN_OR_RETURN(y.attention_factor, k.real_or("rope.scaling.yarn_attn_factor", fallback));
    if (!(y.attention_factor > 0.0) || !std::isfinite(y.attention_factor))
        return k.invalid(k.quoted("rope.scaling.yarn_attn_factor") + " must be a positive number");
    return Status::ok();
}

// gpt-oss's sliding-window layers (llama_model_openai_moe::load_arch_hparams): the window
// attention.sliding_window (required; gpt_oss.py writes sliding_window), on the layers of
// set_swa_pattern(attention.sliding_window_pattern, default 2): layer l slides when l % period < period − 1,
// 0 sliding everywhere — with 2 the even layers, transformers' layer_types for gpt-oss (sliding first).
// A separate RoPE base for the sliding layers (rope.freq_base_swa) is refused unless it is the model's.
Status read_sliding_window(const Keys& k, ModelConfig* cfg) {
    SLUICE_ASSIGN_OR_RETURN(cfg->sliding_window, k.count("attention.sliding_window"));
    if (cfg->sliding_window < 1)
        return k.invalid(k.quoted("attention.sliding_window") + " must be a positive number of positions");
    SLUICE_ASSIGN_OR_RETURN(const int64_t period, k.count_or("attention.sliding_window_pattern", 2));
    cfg->layer_sliding.assign(static_cast<size_t>(cfg->n_layers), false);
    for (int64_t l = 0; l < cfg->n_layers; ++l)
        cfg->layer_sliding[static_cast<size_t>(l)] = period == 0 || l % period < period - 1;
    if (k.has("rope.freq_base_swa")) {
        SLUICE_ASSIGN_OR_RETURN(const double swa_theta, k.real("rope.freq_base_swa"));
        if (static_cast<float>(swa_theta) != cfg->rope_theta)
            return k.unsupported(k.quoted("rope.freq_base_swa") + " (" + std::to_string(swa_theta) +
                                 ") differs from " + k.quoted("rope.freq_base") + " (" +
                                 std::to_string(cfg->rope_theta) +
                                 "): sluice runs one RoPE base for every layer");
    }
    return Status::ok();
}

// A token id key (tokenizer.ggml.*_token_id, written by gguf-py's SpecialVocab), inside the vocabulary.
Expected<std::optional<int32_t>> token_id(const GgufMetadata& md, const char* key, int64_t vocab,
                                          const Keys& k) {
    if (!md.has(key)) return std::optional<int32_t>{};
    SLUICE_ASSIGN_OR_RETURN(const uint64_t id, md.get_uint(key));
    if (id >= static_cast<uint64_t>(vocab))
        return k.invalid("key '" + std::string(key) + "' " + std::to_string(id) +
                         " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    return std::optional<int32_t>(static_cast<int32_t>(id));
}

// The names check_model_config uses for this file's keys.
ConfigFieldNames field_names(const Keys& k, bool hybrid, bool mixtral) {
    ConfigFieldNames n;
    n.hidden = k.quoted("embedding_length");
    n.n_layers = k.quoted("block_count") +
                 (k.has("nextn_predict_layers") ? " - " + k.quoted("nextn_predict_layers") : "");
    n.vocab = "the vocabulary";
    n.n_heads = k.quoted("attention.head_count");
    n.n_kv_heads = k.quoted("attention.head_count_kv");
    n.head_dim = k.quoted("attention.key_length");
    n.rotary_dim = k.quoted("rope.dimension_count");
    n.max_positions = k.quoted("context_length");
    n.n_experts = k.quoted("expert_count");
    n.top_k = k.quoted("expert_used_count");
    n.expert_ffn = k.quoted(mixtral ? "feed_forward_length" : "expert_feed_forward_length");
    n.dense_ffn = k.quoted("feed_forward_length");
    n.shared_expert_ffn = k.quoted("expert_shared_feed_forward_length");
    n.decoder_sparse_step = "decoder_sparse_step";
    n.rms_eps = k.quoted("attention.layer_norm_rms_epsilon");
    n.rope_theta = k.quoted("rope.freq_base");
    n.first_k_dense = k.quoted("leading_dense_block_count");
    n.nextn_layers = k.quoted("nextn_predict_layers");
    n.router_groups = k.quoted("expert_group_count");
    n.router_topk_groups = k.quoted("expert_group_used_count");
    n.routed_scaling = k.quoted("expert_weights_scale");
    if (hybrid) {
        n.linear_k_heads = k.quoted("ssm.group_count");
        n.linear_v_heads = k.quoted("ssm.time_step_rank");
        n.linear_k_dim = k.quoted("ssm.state_size");
        n.linear_v_dim = k.quoted("ssm.inner_size") + " / " + k.quoted("ssm.time_step_rank");
        n.conv_kernel = k.quoted("ssm.conv_kernel");
    }
    return n;
}

// A `llama` file is Mixtral when it has experts (LlamaModel converts MixtralForCausalLM under the llama
// arch: expert_count, expert_used_count, the stacked ffn_*_exps); without them it is a dense Llama /
// Mistral, which sluice does not run. What llama.cpp's llama graph can hold that Mixtral has not — q/k/v/o
// biases, llama3 or LongRoPE frequency factors (rope_freqs), an attention scale other than 1/√head_dim —
// is refused by name rather than ignored.
Status check_llama_file(const GgufMetadata& md, const GgufTensorFacts& facts, const Keys& k) {
    uint64_t experts = 0;
    if (k.has("expert_count")) {
        SLUICE_ASSIGN_OR_RETURN(experts, md.get_uint(k.key("expert_count")));
    }
    if (experts == 0)
        return k.unsupported(
            "key 'general.architecture' is 'llama' with no " + k.quoted("expert_count") +
            ": a dense Llama / Mistral model, which sluice does not run (it runs llama files with experts: "
            "Mixtral)");
    if (facts.attn_q_bias || facts.attn_o_bias)
        return k.unsupported(std::string("tensor '") +
                             (facts.attn_q_bias ? "blk.0.attn_q.bias" : "blk.0.attn_output.bias") +
                             "': attention biases in a llama file are not supported (Mixtral has none)");
    if (facts.rope_freqs)
        return k.unsupported(
            "tensor 'rope_freqs.weight': RoPE frequency factors (llama3 / LongRoPE scaling) are not "
            "supported");
    if (k.has("attention.scale"))
        return k.unsupported(k.quoted("attention.scale") +
                             ": a custom attention scale is not supported (Mixtral's is 1/sqrt(head_dim))");
    return Status::ok();
}

}  // namespace

const char* supported_gguf_architectures() {
    return "qwen2, qwen3, qwen3moe, qwen3next, qwen35moe (Qwen3.5 / Qwen3.6 MoE), glm4moe (GLM-4.5 / 4.6), "
           "qwen2moe (Qwen1.5-MoE / Qwen2-57B-A14B), gpt-oss (gpt-oss-20b / 120b), llama with experts "
           "(Mixtral)";
}

const char* gguf_architecture_name(Family family) {
    for (const ArchEntry& a : kArchitectures)
        if (a.family == family) return a.name;
    return "?";
}

Expected<Family> gguf_architecture_family(std::string_view architecture, const std::string& path) {
    for (const ArchEntry& a : kArchitectures)
        if (architecture == a.name) return a.family;
    return error(ErrorCode::kUnsupported, "[config] " + path + ": key 'general.architecture' is '" +
                                              std::string(architecture) + "': sluice runs " +
                                              supported_gguf_architectures());
}

Expected<ModelConfig> parse_gguf_model_config(const GgufMetadata& md, const GgufTensorFacts& facts,
                                              const std::string& path) {
    SLUICE_ASSIGN_OR_RETURN(const std::string arch, md.get_string("general.architecture"));
    ModelConfig cfg;
    SLUICE_ASSIGN_OR_RETURN(cfg.family, gguf_architecture_family(arch, path));
    cfg.model_type = family_name(cfg.family);
    const Keys k(md, arch, path);
    const bool hybrid = cfg.family == Family::kQwen3Next || cfg.family == Family::kQwen35Moe;
    const bool glm = cfg.family == Family::kGlm4Moe;
    const bool qwen2moe = cfg.family == Family::kQwen2Moe;
    const bool gpt_oss = cfg.family == Family::kGptOss;
    const bool mixtral = cfg.family == Family::kMixtral;
    if (mixtral) {
        SLUICE_RETURN_IF_ERROR(check_llama_file(md, facts, k));
    }

    // Blocks: the converter's block_count includes the MTP blocks (qwen.py _QwenMtpMixin.__init__:
    // block_count += n_mtp) and says how many with add_nextn_predict_layers.
    SLUICE_ASSIGN_OR_RETURN(const int64_t blocks, k.count("block_count"));
    SLUICE_ASSIGN_OR_RETURN(const int64_t nextn, k.count_or("nextn_predict_layers", 0));
    if (nextn >= blocks)
        return k.invalid(k.quoted("nextn_predict_layers") + " (" + std::to_string(nextn) +
                         ") must be below " + k.quoted("block_count") + " (" + std::to_string(blocks) + ")");
    cfg.n_layers = blocks - nextn;
    cfg.mtp_layers = hybrid && nextn > 0 ? 1 : 0;  // sluice runs the first MTP block (as with HF)
    if (glm) cfg.nextn_layers = nextn;             // glm.py Glm4MoeModel: blocks not run (as with HF)

    SLUICE_ASSIGN_OR_RETURN(cfg.hidden, k.count("embedding_length"));
    SLUICE_ASSIGN_OR_RETURN(cfg.max_positions, k.count("context_length"));
    SLUICE_ASSIGN_OR_RETURN(const double eps, k.real("attention.layer_norm_rms_epsilon"));
    cfg.rms_eps = static_cast<float>(eps);
    cfg.tie_word_embeddings = !facts.output;

    // Attention. head_count_kv, key_length and rope.dimension_count default as llama.cpp defaults them.
    SLUICE_ASSIGN_OR_RETURN(cfg.n_heads, k.count("attention.head_count"));
    SLUICE_ASSIGN_OR_RETURN(cfg.n_kv_heads, k.count_or("attention.head_count_kv", cfg.n_heads));
    SLUICE_ASSIGN_OR_RETURN(
        cfg.head_dim, k.count_or("attention.key_length", cfg.n_heads > 0 ? cfg.hidden / cfg.n_heads : 0));
    if (k.has("attention.value_length")) {
        SLUICE_ASSIGN_OR_RETURN(const int64_t v, k.count("attention.value_length"));
        if (v != cfg.head_dim)
            return k.unsupported(k.quoted("attention.value_length") + " (" + std::to_string(v) +
                                 ") differs from " + k.quoted("attention.key_length") + " (" +
                                 std::to_string(cfg.head_dim) + "): sluice's attention has one head dim");
    }
    // Qwen3-Next / 3.5: qwen.py Qwen3NextModel.set_gguf_parameters writes head_dim × partial_rotary_factor.
    SLUICE_ASSIGN_OR_RETURN(cfg.rotary_dim, k.count_or("rope.dimension_count", cfg.head_dim));
    SLUICE_ASSIGN_OR_RETURN(const double theta, k.real_or("rope.freq_base", 10000.0));
    cfg.rope_theta = static_cast<float>(theta);
    SLUICE_RETURN_IF_ERROR(read_rope_scaling(md, k, &cfg));
    cfg.attn_output_gate = hybrid;  // llama.cpp's qwen3next / qwen35moe graphs always gate
    // glm4moe: q/k norms and q/k/v biases where the tensors are (llama_model_glm4_moe::load_arch_tensors
    // creates them optional). qwen2moe: Qwen2's attention, no q/k norm, q/k/v biases where the tensors are
    // (create_tensor_qkv loads them optional; HF's qkv_bias, true in every release).
    // gpt-oss (llama_model_openai_moe::load_arch_tensors): no q/k norms, q/k/v biases where the tensors
    // are (create_tensor_qkv), the o bias and the sinks required.
    // llama (Mixtral): no q/k norm, no biases (refused above where the tensors are).
    cfg.attn_qk_norm =
        glm ? facts.attn_q_norm : cfg.family != Family::kQwen2 && !qwen2moe && !gpt_oss && !mixtral;
    cfg.attn_qkv_bias = glm || qwen2moe || gpt_oss ? facts.attn_q_bias : cfg.family == Family::kQwen2;
    cfg.attn_o_bias = cfg.attn_sinks = gpt_oss;

    // MLP / MoE (Qwen2MoeModel.set_gguf_parameters: expert_feed_forward_length,
    // expert_shared_feed_forward_length; the base class: feed_forward_length from intermediate_size).
    if (cfg.is_dense_family()) {
        SLUICE_ASSIGN_OR_RETURN(cfg.dense_ffn, k.count("feed_forward_length"));
    } else {
        SLUICE_ASSIGN_OR_RETURN(cfg.n_experts, k.count("expert_count"));
        SLUICE_ASSIGN_OR_RETURN(cfg.top_k, k.count("expert_used_count"));
        if (!mixtral) {
            SLUICE_ASSIGN_OR_RETURN(cfg.expert_ffn, k.count("expert_feed_forward_length"));
        }
        SLUICE_ASSIGN_OR_RETURN(cfg.dense_ffn, k.count_or("feed_forward_length", 0));
        // llama.cpp's qwen3moe / qwen3next / qwen35moe: build_moe_ffn(norm_w = true); qwen2moe: norm_w =
        // false (Qwen2MoeSparseMoeBlock's norm_topk_prob, false in every release; the converter writes no
        // key for it).
        cfg.norm_topk_prob = !qwen2moe;
    }
    if (gpt_oss) {
        // gpt_oss.py GptOssModel.set_gguf_parameters writes expert_feed_forward_length and the base class
        // feed_forward_length, both intermediate_size: every layer is MoE, there is no dense MLP. The graph
        // (llama_model_openai_moe::graph): the router's bias added to its logits, a softmax over the top k
        // (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT, the weights renormalised over the k), biases on
        // the experts' gate, up and down, and LLM_FFN_SWIGLU_OAI_MOE with alpha 1.702 and limit 7.0
        // hard-wired (llama-graph.cpp build_moe_ffn): the converter writes no key for the limit, and
        // GptOssConfig's default and every release's swiglu_limit is 7.0.
        cfg.dense_ffn = 0;
        cfg.norm_topk_prob = true;
        cfg.router_logit_bias = true;
        cfg.expert_bias = true;
        cfg.swiglu_limit = 7.0f;
        cfg.swiglu_alpha = 1.702f;
    }
    if (mixtral) {
        // llama.cpp's llama arch (llama_model_llama::load_arch_tensors): the experts are n_ff
        // (feed_forward_length, from intermediate_size) wide, every block is MoE; build_moe_ffn with a
        // softmax router, the top k renormalised (norm_w = true), as MixtralSparseMoeBlock.
        SLUICE_ASSIGN_OR_RETURN(cfg.expert_ffn, k.count("feed_forward_length"));
        cfg.dense_ffn = 0;
        cfg.norm_topk_prob = true;
    }
    if (qwen2moe) {
        // Qwen2MoeModel.set_gguf_parameters: expert_shared_feed_forward_length from
        // shared_expert_intermediate_size; llama_model_qwen2moe::load_arch_tensors defaults it to n_ff. The
        // shared expert is scaled by σ(ffn_gate_inp_shexp · x), every block is MoE (no
        // decoder_sparse_step / mlp_only_layers in the graph), the router is softmax.
        SLUICE_ASSIGN_OR_RETURN(cfg.shared_expert_ffn,
                                k.count_or("expert_shared_feed_forward_length", cfg.dense_ffn));
        cfg.shared_expert_gated = true;
    }
    if (glm) {
        // glm.py Glm4MoeModel.set_gguf_parameters: expert_shared_count, leading_dense_block_count,
        // expert_gating_func (SIGMOID), expert_weights_scale, expert_weights_norm; llama.cpp reads a
        // missing gating func as sigmoid, a scale of 0 as none, the group counts (LLM_KV_EXPERT_GROUP_*)
        // as one group.
        SLUICE_ASSIGN_OR_RETURN(const int64_t shared, k.count_or("expert_shared_count", 0));
        if (shared > 64)
            return k.invalid(k.quoted("expert_shared_count") + " = " + std::to_string(shared) +
                             " is outside 0..64");
        cfg.shared_expert_ffn = shared * cfg.expert_ffn;
        cfg.shared_expert_gated = false;
        SLUICE_ASSIGN_OR_RETURN(cfg.first_k_dense, k.count_or("leading_dense_block_count", 0));
        SLUICE_ASSIGN_OR_RETURN(const int64_t gating, k.count_or("expert_gating_func", 0));
        if (gating != 0 && gating != 2)
            return k.unsupported(k.quoted("expert_gating_func") + " = " + std::to_string(gating) +
                                 ": sluice runs glm4moe's sigmoid router (2)");
        cfg.router_sigmoid = true;
        SLUICE_ASSIGN_OR_RETURN(const double scale, k.real_or("expert_weights_scale", 0.0));
        cfg.routed_scaling = scale == 0.0 ? 1.0f : static_cast<float>(scale);
        if (k.has("expert_weights_norm")) {
            SLUICE_ASSIGN_OR_RETURN(cfg.norm_topk_prob, md.get_bool(k.key("expert_weights_norm")));
        } else {
            cfg.norm_topk_prob = false;
        }
        SLUICE_ASSIGN_OR_RETURN(cfg.router_groups, k.count_or("expert_group_count", 1));
        SLUICE_ASSIGN_OR_RETURN(cfg.router_topk_groups, k.count_or("expert_group_used_count", 1));
        if (cfg.router_groups == 0) cfg.router_groups = 1;
        if (cfg.router_topk_groups == 0) cfg.router_topk_groups = 1;
    }

    // Gated DeltaNet (Qwen3NextModel.set_gguf_parameters: ssm_conv_kernel, ssm_state_size =
    // linear_key_head_dim, ssm_group_count = linear_num_key_heads, ssm_time_step_rank =
    // linear_num_value_heads, ssm_inner_size = linear_value_head_dim × linear_num_value_heads).
    if (hybrid) {
        cfg.split_linear_projections = cfg.family == Family::kQwen35Moe;
        SLUICE_ASSIGN_OR_RETURN(cfg.shared_expert_ffn, k.count_or("expert_shared_feed_forward_length", 0));
        SLUICE_ASSIGN_OR_RETURN(cfg.conv_kernel, k.count("ssm.conv_kernel"));
        SLUICE_ASSIGN_OR_RETURN(cfg.linear_k_dim, k.count("ssm.state_size"));
        SLUICE_ASSIGN_OR_RETURN(cfg.linear_k_heads, k.count("ssm.group_count"));
        SLUICE_ASSIGN_OR_RETURN(cfg.linear_v_heads, k.count("ssm.time_step_rank"));
        SLUICE_ASSIGN_OR_RETURN(const int64_t inner, k.count("ssm.inner_size"));
        if (cfg.linear_v_heads <= 0 || inner % cfg.linear_v_heads != 0)
            return k.invalid(k.quoted("ssm.inner_size") + " (" + std::to_string(inner) +
                             ") must be a positive multiple of " + k.quoted("ssm.time_step_rank") + " (" +
                             std::to_string(cfg.linear_v_heads) + ")");
        cfg.linear_v_dim = inner / cfg.linear_v_heads;
    }

    // The vocabulary: the token list's length (get_vocab_base pads it to config.json's vocab_size), or
    // {arch}.vocab_size where a file has no token list; both present must agree.
    const std::string tokens_key = "tokenizer.ggml.tokens";
    if (const GgufValue* tokens = md.find(tokens_key)) {
        if (!tokens->is_array() || tokens->element_type() != format::GgufValueType::kString)
            return error(ErrorCode::kCorrupt, "[gguf] " + path + ": key '" + tokens_key +
                                                  "': expected an array of STRING, got " +
                                                  tokens->describe());
        cfg.vocab = static_cast<int64_t>(std::min<uint64_t>(tokens->size(), kMaxCount));
        if (k.has("vocab_size")) {
            SLUICE_ASSIGN_OR_RETURN(const int64_t v, k.count("vocab_size"));
            if (v != cfg.vocab)
                return k.invalid(k.quoted("vocab_size") + " (" + std::to_string(v) + ") differs from the " +
                                 std::to_string(cfg.vocab) + " entries of key '" + tokens_key + "'");
        }
    } else if (k.has("vocab_size")) {
        SLUICE_ASSIGN_OR_RETURN(cfg.vocab, k.count("vocab_size"));
    } else {
        return error(ErrorCode::kNotFound, "[gguf] " + path + ": key '" + tokens_key + "' not found (nor " +
                                               k.quoted("vocab_size") + "): the vocabulary size is unknown");
    }
    const std::string vocab_name =
        md.has(tokens_key) ? "the vocabulary (key '" + tokens_key + "')" : k.quoted("vocab_size");
    SLUICE_RETURN_IF_ERROR(check_vocab_size(cfg.vocab, path, vocab_name));
    SLUICE_ASSIGN_OR_RETURN(const auto eos, token_id(md, "tokenizer.ggml.eos_token_id", cfg.vocab, k));
    if (eos) cfg.eos_token_ids.push_back(*eos);
    // End of turn and end of message end a generation too (llama.cpp's special_eog_ids). GLM's
    // _set_vocab_glm writes eos <|endoftext|>, eot <|user|> and eom <|observation|>: config.json's
    // eos_token_id list [151329, 151336, 151338], which a GLM chat turn ends with.
    for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
        SLUICE_ASSIGN_OR_RETURN(const auto id, token_id(md, key, cfg.vocab, k));
        if (id &&
            std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), *id) == cfg.eos_token_ids.end())
            cfg.eos_token_ids.push_back(*id);
    }
    SLUICE_ASSIGN_OR_RETURN(cfg.bos_token_id, token_id(md, "tokenizer.ggml.bos_token_id", cfg.vocab, k));
    SLUICE_ASSIGN_OR_RETURN(const auto pad, token_id(md, "tokenizer.ggml.padding_token_id", cfg.vocab, k));
    (void)pad;  // checked as config.json's pad_token_id is; not kept

    SLUICE_RETURN_IF_ERROR(check_model_config(cfg, path, field_names(k, hybrid, mixtral)));

    // The layer pattern, once n_layers is known to be bounded.
    cfg.layer_types.assign(static_cast<size_t>(cfg.n_layers), LayerType::kFullAttention);
    if (hybrid) {
        // Which layers are linear: attention.recurrent_layers (a BOOL per block) when the file has it,
        // else full_attention_interval (default 4), as llama.cpp's load_arch_hparams decides.
        if (md.has(k.key("attention.recurrent_layers"))) {
            const GgufValue& v = *md.find(k.key("attention.recurrent_layers"));
            const auto flags = v.to_bools();
            if (!flags || static_cast<int64_t>(flags->size()) != blocks)
                return k.invalid(k.quoted("attention.recurrent_layers") + ": expected an array of " +
                                 std::to_string(blocks) + " BOOL, got " + v.describe());
            for (int64_t l = 0; l < cfg.n_layers; ++l)
                if ((*flags)[static_cast<size_t>(l)]) cfg.layer_types[l] = LayerType::kLinearAttention;
        } else {
            SLUICE_ASSIGN_OR_RETURN(const int64_t interval, k.count_or("full_attention_interval", 4));
            if (interval < 1) return k.invalid(k.quoted("full_attention_interval") + " must be >= 1");
            for (int64_t l = 0; l < cfg.n_layers; ++l)
                if ((l + 1) % interval != 0) cfg.layer_types[l] = LayerType::kLinearAttention;
        }
    }
    if (gpt_oss) {
        SLUICE_RETURN_IF_ERROR(read_sliding_window(k, &cfg));
        // YaRN's correction range unrounded, as gpt-oss defines it (GptOssConfig's rope_parameters and every
        // release's config.json: truncate false; OpenAI's reference RotaryEmbedding computes it so). The
        // file cannot say it; llama.cpp rounds the range outwards for every architecture
        // (ggml_rope_yarn_corr_dims: floor / ceil), which moves the golden's logits by up to 1.2e-2 — the
        // one place sluice reads a gpt-oss GGUF otherwise than llama.cpp (docs/FORMATS.md).
        if (cfg.yarn.enabled) cfg.yarn.truncate = false;
    }
    return cfg;
}

Expected<ModelConfig> load_gguf_model_config(const format::GgufCheckpoint& checkpoint) {
    const std::string& path = checkpoint.files().front()->path();
    GgufTensorFacts facts;
    facts.output = checkpoint.find("output.weight") != nullptr;
    facts.attn_q_norm = checkpoint.find("blk.0.attn_q_norm.weight") != nullptr;
    facts.attn_q_bias = checkpoint.find("blk.0.attn_q.bias") != nullptr;
    facts.attn_o_bias = checkpoint.find("blk.0.attn_output.bias") != nullptr;
    facts.rope_freqs = checkpoint.find("rope_freqs.weight") != nullptr;
    return parse_gguf_model_config(checkpoint.metadata(), facts, path);
}

}  // namespace sluice::model
