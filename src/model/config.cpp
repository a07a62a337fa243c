#include "model/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <numbers>
#include <tuple>

#include "format/json_text.h"
#include "io/mapped_file.h"
#include "model/config_checks.h"

namespace sluice::model {

using nlohmann::json;

const char* family_name(Family family) {
    switch (family) {
        case Family::kQwen2: return "qwen2";
        case Family::kQwen3: return "qwen3";
        case Family::kQwen3Moe: return "qwen3_moe";
        case Family::kQwen3Next: return "qwen3_next";
        case Family::kQwen35Moe: return "qwen3_5_moe";
        case Family::kGlm4Moe: return "glm4_moe";
        case Family::kQwen2Moe: return "qwen2_moe";
        case Family::kMixtral: return "mixtral";
        case Family::kGptOss: return "gpt_oss";
        case Family::kDeepseekV3: return "deepseek_v3";
    }
    return "?";
}

const char* supported_model_types() {
    return "qwen2, qwen2_moe, qwen3, qwen3_moe, qwen3_next, qwen3_5_moe (text_config: qwen3_5_moe_text), "
           "glm4_moe, mixtral, deepseek_v3 (and kimi_k2), gpt_oss";
}

QuantSpec QuantConfig::for_module(const std::string& path) const {
    auto it = overrides.find(path);
    return it != overrides.end() ? it->second : global;
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
    if (n_experts == 0) return false;
    if (is_mtp_layer(layer)) return true;  // the MTP layer of an MoE family is MoE
    if (layer < first_k_dense) return false;
    for (int64_t l : mlp_only_layers)
        if (l == layer) return false;
    return decoder_sparse_step <= 1 || (layer + 1) % decoder_sparse_step == 0;
}

namespace {

// Field readers that turn a missing or mistyped field into a message naming it.
class Reader {
 public:
    Reader(const json& obj, std::string source) : obj_(obj), source_(std::move(source)) {}

    Status status() const { return status_; }

    int64_t required_int(const char* key) {
        auto it = obj_.find(key);
        if (it == obj_.end()) {
            fail(std::string("missing required field '") + key + "'");
            return 0;
        }
        if (!it->is_number_integer() || it->get<int64_t>() < 0) {
            fail(std::string("field '") + key + "' must be a non-negative integer, got " + it->dump());
            return 0;
        }
        return it->get<int64_t>();
    }
    // The first of several spellings of one field that the file has (transformers reads them all:
    // e.g. Qwen3-MoE's num_experts, which transformers 5 writes as num_local_experts).
    int64_t required_int(std::initializer_list<const char*> keys) {
        for (const char* key : keys)
            if (obj_.contains(key)) return required_int(key);
        std::string names;
        for (const char* key : keys) names += std::string(names.empty() ? "'" : " or '") + key + "'";
        fail("missing required field " + names);
        return 0;
    }
    int64_t int_or(const char* key, int64_t fallback) {
        auto it = obj_.find(key);
        if (it == obj_.end() || it->is_null()) return fallback;
        if (!it->is_number_integer()) {
            fail(std::string("field '") + key + "' must be an integer, got " + it->dump());
            return fallback;
        }
        return it->get<int64_t>();
    }
    double number_or(const char* key, double fallback) {
        auto it = obj_.find(key);
        if (it == obj_.end() || it->is_null()) return fallback;
        if (!it->is_number()) {
            fail(std::string("field '") + key + "' must be a number, got " + it->dump());
            return fallback;
        }
        return it->get<double>();
    }
    std::string string_or(const char* key, const std::string& fallback) {
        auto it = obj_.find(key);
        if (it == obj_.end() || it->is_null()) return fallback;
        if (!it->is_string()) {
            fail(std::string("field '") + key + "' must be a string, got " + it->dump());
            return fallback;
        }
        return it->get<std::string>();
    }
    bool bool_or(const char* key, bool fallback) {
        auto it = obj_.find(key);
        if (it == obj_.end() || it->is_null()) return fallback;
        if (!it->is_boolean()) {
            fail(std::string("field '") + key + "' must be true or false, got " + it->dump());
            return fallback;
        }
        return it->get<bool>();
    }
    void fail(const std::string& what) {
        if (status_.is_ok())
            status_ = error(ErrorCode::kInvalidArgument, "[config] " + source_ + ": " + what);
    }

 private:
    const json& obj_;
    std::string source_;
    Status status_;
};

Status parse_quantization(const json& q, const std::string& source, QuantConfig* out) {
    auto bad = [&](const std::string& what) {
        return error(ErrorCode::kInvalidArgument, "[config] " + source + ": quantization: " + what);
    };
    if (!q.is_object()) return bad("expected an object");
    out->present = true;
    if (auto m = q.find("mode"); m != q.end() && !m->is_null()) {
        if (!m->is_string()) return bad("'mode' must be a string");
        out->mode = m->get<std::string>();
        if (out->mode != "affine") {
            return error(ErrorCode::kUnsupported, "[config] " + source + ": quantization mode '" + out->mode +
                                                      "' is not supported (sluice runs MLX 'affine' 4/8-bit; "
                                                      "mxfp4, nvfp4 and mxfp8 are not implemented)");
        }
    }
    auto read_spec = [&](const json& obj, const std::string& where, QuantSpec* spec) -> Status {
        auto b = obj.find("bits");
        auto g = obj.find("group_size");
        if (b == obj.end() || !b->is_number_integer()) return bad(where + "'bits' missing or not an integer");
        if (g == obj.end() || !g->is_number_integer())
            return bad(where + "'group_size' missing or not an integer");
        // Bounded before narrowing: a get<int>() of 4294967300 would wrap to a plausible 4.
        for (const auto& [v, key] : {std::pair<const json&, const char*>{*b, "bits"}, {*g, "group_size"}})
            if ((v.is_number_unsigned() && v.get<uint64_t>() > 1024) || v.get<int64_t>() < 0 ||
                v.get<int64_t>() > 1024)
                return error(ErrorCode::kUnsupported, "[config] " + source + ": quantization " + where + key +
                                                          " = " + v.dump() +
                                                          " (supported: bits 4, 8; group_size 32, 64, 128)");
        spec->bits = b->get<int>();
        spec->group_size = g->get<int>();
        if (spec->bits != 4 && spec->bits != 8)
            return error(ErrorCode::kUnsupported, "[config] " + source + ": quantization " + where +
                                                      "bits = " + std::to_string(spec->bits) +
                                                      " (supported: 4, 8)");
        if (spec->group_size != 32 && spec->group_size != 64 && spec->group_size != 128)
            return error(ErrorCode::kUnsupported, "[config] " + source + ": quantization " + where +
                                                      "group_size = " + std::to_string(spec->group_size) +
                                                      " (supported: 32, 64, 128)");
        return Status::ok();
    };
    SLUICE_RETURN_IF_ERROR(read_spec(q, "", &out->global));
    for (auto it = q.begin(); it != q.end(); ++it) {
        if (!it.value().is_object() && !it.value().is_boolean()) continue;  // bits, group_size, mode
        if (it.value().is_boolean()) {
            if (!it.value().get<bool>()) out->overrides[it.key()] = QuantSpec{};  // explicitly unquantized
            continue;
        }
        QuantSpec spec;
        SLUICE_RETURN_IF_ERROR(read_spec(it.value(), "'" + it.key() + "': ", &spec));
        out->overrides[it.key()] = spec;
    }
    return Status::ok();
}

// A token id field (an integer, an array of them, or null), each id checked against the vocabulary
// before it is narrowed: `4294967297` must not wrap to 1.
Status read_ids(const json& v, const char* key, int64_t vocab, const std::string& source,
                std::vector<int32_t>* out) {
    if (v.is_null()) return Status::ok();
    auto one = [&](const json& e) -> Status {
        const bool in_range = e.is_number_integer() &&
                              !(e.is_number_unsigned() && e.get<uint64_t>() > INT64_MAX) &&
                              e.get<int64_t>() >= 0 && e.get<int64_t>() < vocab;
        if (!in_range)
            return error(ErrorCode::kInvalidArgument, "[config] " + source + ": " + key + " " + e.dump() +
                                                          " is outside the vocabulary [0, " +
                                                          std::to_string(vocab) + ")");
        out->push_back(static_cast<int32_t>(e.get<int64_t>()));
        return Status::ok();
    };
    if (!v.is_array()) return one(v);
    for (const auto& e : v) SLUICE_RETURN_IF_ERROR(one(e));
    return Status::ok();
}

}  // namespace

namespace {
Expected<ModelConfig> parse_model_config_json(const json& root, const std::string& source);
}  // namespace

Expected<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
    SLUICE_ASSIGN_OR_RETURN(
        const json root, format::parse_json_text(json_text, source, "[config]", ErrorCode::kInvalidArgument));
    if (!root.is_object())
        return error(ErrorCode::kInvalidArgument,
                     "[config] " + source + ": expected a JSON object, got " + format::json_type_of(root));
    try {
        return parse_model_config_json(root, source);
    } catch (const json::exception& e) {  // a backstop: the fields are read type-checked
        return error(ErrorCode::kInvalidArgument,
                     "[config] " + source + ": unexpected structure: " + e.what());
    }
}

namespace {

Expected<ModelConfig> parse_model_config_json(const json& root, const std::string& source) {
    ModelConfig cfg;
    auto mt = root.find("model_type");
    if (mt == root.end() || !mt->is_string()) {
        return error(
            ErrorCode::kInvalidArgument,
            "[config] " + source + ": missing 'model_type' (supported: " + supported_model_types() + ")");
    }
    cfg.model_type = mt->get<std::string>();

    // Nested configs (Qwen3.5/3.6 VLM wrapper): the text model's fields live in text_config.
    const json* text = &root;
    if (cfg.model_type == "qwen2") {
        cfg.family = Family::kQwen2;
    } else if (cfg.model_type == "qwen3") {
        cfg.family = Family::kQwen3;
    } else if (cfg.model_type == "qwen3_moe") {
        cfg.family = Family::kQwen3Moe;
    } else if (cfg.model_type == "qwen3_next") {
        cfg.family = Family::kQwen3Next;
    } else if (cfg.model_type == "qwen3_5_moe" || cfg.model_type == "qwen3_5_moe_text") {
        cfg.family = Family::kQwen35Moe;
        if (auto tc = root.find("text_config"); tc != root.end()) {
            if (!tc->is_object())
                return error(ErrorCode::kInvalidArgument,
                             "[config] " + source + ": 'text_config' is not an object");
            text = &*tc;
        }
    } else if (cfg.model_type == "glm4_moe") {
        cfg.family = Family::kGlm4Moe;
    } else if (cfg.model_type == "qwen2_moe") {
        cfg.family = Family::kQwen2Moe;
    } else if (cfg.model_type == "mixtral") {
        cfg.family = Family::kMixtral;
    } else if (cfg.model_type == "deepseek_v3" || cfg.model_type == "kimi_k2") {
        cfg.family = Family::kDeepseekV3;  // Kimi K2 ships DeepSeek-V3's architecture
    } else if (cfg.model_type == "gpt_oss") {
        cfg.family = Family::kGptOss;
    } else {
        return error(ErrorCode::kUnsupported,
                     "[config] " + source + ": model_type '" + cfg.model_type +
                         "' is not supported (supported: " + supported_model_types() + ")");
    }

    Reader r(*text, source);
    cfg.hidden = r.required_int("hidden_size");
    cfg.n_layers = r.required_int("num_hidden_layers");
    cfg.vocab = r.required_int("vocab_size");
    cfg.n_heads = r.required_int("num_attention_heads");
    const bool glm = cfg.family == Family::kGlm4Moe, mixtral = cfg.family == Family::kMixtral;
    const bool deepseek = cfg.family == Family::kDeepseekV3, gpt_oss = cfg.family == Family::kGptOss;
    // MLA's heads all read one latent: num_key_value_heads (= the heads, when written) does not matter.
    cfg.n_kv_heads =
        deepseek ? r.int_or("num_key_value_heads", cfg.n_heads) : r.required_int("num_key_value_heads");
    // Glm4MoeConfig's defaults where a file leaves a field out: eps 1e-5, half rotary (transformers 5.17
    // has no head_dim default for it: hidden / heads, as for the others); MixtralConfig's: eps 1e-5,
    // rope_theta 1e6.
    cfg.rms_eps = static_cast<float>(r.number_or("rms_norm_eps", glm || mixtral || gpt_oss ? 1e-5 : 1e-6));
    cfg.max_positions = r.int_or("max_position_embeddings", 0);
    cfg.tie_word_embeddings = r.bool_or("tie_word_embeddings", false);
    cfg.head_dim = r.int_or("head_dim", 0);
    if (cfg.head_dim == 0 && cfg.n_heads > 0) {
        // No head_dim: hidden / heads, which must then divide (transformers would floor it into a model
        // whose projections do not match any checkpoint, e.g. GLM-4.5-Air's 4096 / 96).
        if (cfg.hidden % cfg.n_heads != 0 && !deepseek)
            return error(ErrorCode::kInvalidArgument,
                         fmt::format("[config] {}: no head_dim, and hidden_size {} is not a multiple of "
                                     "num_attention_heads {} ({:.2f} a head): the config must give head_dim",
                                     source, cfg.hidden, cfg.n_heads,
                                     static_cast<double>(cfg.hidden) / static_cast<double>(cfg.n_heads)));
        cfg.head_dim = cfg.hidden / cfg.n_heads;
    }
    if (deepseek) {
        // DeepseekV3Config's defaults; its head_dim (written as qk_rope_head_dim) is not the q·k dim.
        const auto ql = text->find("q_lora_rank");  // null: a plain q_proj (0)
        cfg.q_lora_rank = ql != text->end() && ql->is_null() ? 0 : r.int_or("q_lora_rank", 1536);
        cfg.kv_lora_rank = r.int_or("kv_lora_rank", 512);
        cfg.qk_nope_dim = r.int_or("qk_nope_head_dim", 128);
        cfg.qk_rope_dim = r.int_or("qk_rope_head_dim", 64);
        cfg.v_head_dim = r.int_or("v_head_dim", 128);
        cfg.rope_interleave = r.bool_or("rope_interleave", true);
        cfg.head_dim = cfg.qk_nope_dim + cfg.qk_rope_dim;
    }

    // RoPE: rope_theta at the top level (older files) or inside rope_parameters (newer ones).
    const bool hybrid = cfg.family == Family::kQwen3Next || cfg.family == Family::kQwen35Moe;
    double default_partial = hybrid ? 0.25 : glm ? 0.5 : 1.0;
    double theta = r.number_or("rope_theta", mixtral ? 1e6 : gpt_oss ? 150000.0 : 10000.0);
    double partial = r.number_or("partial_rotary_factor", default_partial);
    // The rope type and its parameters: rope_parameters (transformers 5) or rope_scaling (older).
    // mrope with text-only input reduces exactly to plain RoPE (models.md §4.2 item 6).
    auto read_scaling = [&](const nlohmann::json& block, const std::string& where) -> Status {
        auto type = block.find("rope_type");
        if (type == block.end()) type = block.find("type");
        const std::string t = type != block.end() && type->is_string() ? type->get<std::string>() : "";
        if (t.empty() || t == "default" || t == "mrope") return Status::ok();
        if (t != "yarn")
            return error(ErrorCode::kUnsupported, "[config] " + source + ": " + where + " type '" + t +
                                                      "' is not supported (default, mrope or yarn)");
        Reader yr(block, source + " " + where);
        auto& y = cfg.yarn;
        y.enabled = true;
        y.factor = yr.number_or("factor", 0.0);
        y.original_max_positions = yr.int_or("original_max_position_embeddings", cfg.max_positions);
        y.beta_fast = yr.number_or("beta_fast", 32.0);
        y.beta_slow = yr.number_or("beta_slow", 1.0);
        y.truncate = yr.bool_or("truncate", true);
        const double mscale = yr.number_or("mscale", 0.0),
                     mscale_all_dim = yr.number_or("mscale_all_dim", 0.0);
        SLUICE_RETURN_IF_ERROR(yr.status());
        if (!(y.factor >= 1.0) || !std::isfinite(y.factor))
            return error(ErrorCode::kInvalidArgument, "[config] " + source + ": " + where +
                                                          " yarn needs a factor >= 1, got " +
                                                          std::to_string(y.factor));
        if (y.original_max_positions <= 0)
            return error(ErrorCode::kInvalidArgument, "[config] " + source + ": " + where +
                                                          " yarn needs original_max_position_embeddings > 0");
        if (!(y.beta_fast > 0.0) || !(y.beta_slow > 0.0))
            return error(ErrorCode::kInvalidArgument, "[config] " + source + ": " + where +
                                                          " yarn beta_fast and beta_slow must be positive");
        auto get_mscale = [](double scale, double m) {
            return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
        };
        if (deepseek && mscale_all_dim != 0.0) {
            const double m = get_mscale(y.factor, mscale_all_dim);
            y.softmax_mscale = m * m;
        }
        if (auto af = block.find("attention_factor"); af != block.end() && af->is_number()) {
            y.attention_factor = af->get<double>();
        } else if (mscale != 0.0 && mscale_all_dim != 0.0) {
            y.attention_factor = get_mscale(y.factor, mscale) / get_mscale(y.factor, mscale_all_dim);
        } else {
            y.attention_factor = get_mscale(y.factor, 1.0);
        }
        if (!(y.attention_factor > 0.0) || !std::isfinite(y.attention_factor))
            return error(ErrorCode::kInvalidArgument, "[config] " + source + ": " + where +
                                                          " yarn attention_factor must be a positive number");
        return Status::ok();
    };
    if (auto rp = text->find("rope_parameters"); rp != text->end() && rp->is_object()) {
        Reader rr(*rp, source + " rope_parameters");
        theta = rr.number_or("rope_theta", theta);
        partial = rr.number_or("partial_rotary_factor", partial);
        SLUICE_RETURN_IF_ERROR(rr.status());
        SLUICE_RETURN_IF_ERROR(read_scaling(*rp, "rope_parameters"));
    }
    if (auto rs = text->find("rope_scaling"); rs != text->end() && rs->is_object() && !cfg.yarn.enabled)
        SLUICE_RETURN_IF_ERROR(read_scaling(*rs, "rope_scaling"));
    if (gpt_oss && text->find("rope_parameters") == text->end() &&
        text->find("rope_scaling") == text->end()) {
        // GptOssConfig's default when a file names no RoPE parameters: YaRN ×32 over 4096 positions,
        // untruncated.
        const json yarn = {{"rope_type", "yarn"}, {"factor", 32.0},
                           {"beta_fast", 32.0},   {"beta_slow", 1.0},
                           {"truncate", false},   {"original_max_position_embeddings", 4096}};
        SLUICE_RETURN_IF_ERROR(read_scaling(yarn, "rope_parameters (GptOssConfig's default)"));
    }
    cfg.rope_theta = static_cast<float>(theta);
    cfg.rotary_dim = static_cast<int64_t>(std::lround(static_cast<double>(cfg.head_dim) * partial));
    if (deepseek) cfg.rotary_dim = cfg.qk_rope_dim;  // RoPE on the rope part only

    // MoE (a dense family has none: a dense MLP in every layer, is_moe_layer() false).
    if (cfg.is_dense_family()) {
        cfg.dense_ffn = r.required_int("intermediate_size");
    } else {
        cfg.n_experts = glm || deepseek
                            ? r.required_int({"n_routed_experts", "num_experts", "num_local_experts"})
                            : r.required_int({"num_experts", "num_local_experts"});
        cfg.top_k = gpt_oss ? r.required_int({"num_experts_per_tok", "experts_per_token"})
                            : r.required_int("num_experts_per_tok");
        if (mixtral || gpt_oss) {
            cfg.expert_ffn = r.required_int("intermediate_size");  // every expert's; no dense MLP
        } else {
            cfg.expert_ffn = r.required_int("moe_intermediate_size");
            cfg.dense_ffn = r.int_or("intermediate_size", 0);
        }
        cfg.decoder_sparse_step = r.int_or("decoder_sparse_step", 1);
        if (auto m = text->find("mlp_only_layers"); m != text->end() && m->is_array())
            for (const auto& l : *m)
                if (l.is_number_integer()) cfg.mlp_only_layers.push_back(l.get<int64_t>());
    }

    switch (cfg.family) {
        case Family::kQwen2:
        case Family::kQwen3: break;
        case Family::kQwen3Moe:
            // HF Qwen3MoeConfig defaults norm_topk_prob to false; the released checkpoints set it true.
            cfg.norm_topk_prob = r.bool_or("norm_topk_prob", false);
            break;
        case Family::kQwen3Next: cfg.norm_topk_prob = r.bool_or("norm_topk_prob", true); break;
        case Family::kQwen35Moe:
            // The Qwen3.5/3.6 router renormalises unconditionally, whatever the file says (models.md §4.2.3).
            cfg.norm_topk_prob = true;
            break;
        case Family::kMixtral:
            // MixtralSparseMoeBlock: softmax over the router's logits, the top k, divided by their sum.
            cfg.norm_topk_prob = true;
            break;
        case Family::kGptOss: {
            // GptOssTopKRouter: logits = W·x + b, the top k of them, a softmax over those k — the same
            // weights as a softmax over all E renormalised over the k (monotone, and the sum cancels).
            cfg.norm_topk_prob = true;
            cfg.router_logit_bias = true;
            cfg.expert_bias = true;
            // GptOssExperts hard-wires alpha 1.702 and limit 7.0; the Hub's config.json writes the limit.
            cfg.swiglu_limit = static_cast<float>(r.number_or("swiglu_limit", 7.0));
            cfg.swiglu_alpha = 1.702f;
            if (!(cfg.swiglu_limit > 0.0f) || !std::isfinite(cfg.swiglu_limit))
                return error(ErrorCode::kInvalidArgument, "[config] " + source + ": swiglu_limit " +
                                                              std::to_string(cfg.swiglu_limit) +
                                                              " must be a positive number");
            cfg.attn_qk_norm = false;
            cfg.attn_qkv_bias = cfg.attn_o_bias = r.bool_or("attention_bias", true);
            cfg.attn_sinks = true;
            break;
        }
        case Family::kQwen2Moe:
            // Qwen2MoeSparseMoeBlock: softmax top-k (renormalised only with norm_topk_prob, false by
            // default) and a shared expert scaled by σ(shared_expert_gate · x).
            cfg.norm_topk_prob = r.bool_or("norm_topk_prob", false);
            cfg.shared_expert_ffn = r.int_or("shared_expert_intermediate_size", 0);
            break;
        case Family::kGlm4Moe:
        case Family::kDeepseekV3: {
            // Glm4MoeMoE / DeepseekV3MoE: sigmoid + e_score_correction_bias, group-limited top-k, an
            // ungated shared MLP of n_shared_experts × moe_intermediate_size, dense layers before
            // first_k_dense_replace.
            if (deepseek) {
                const std::string scoring = r.string_or("scoring_func", "sigmoid");
                const std::string method = r.string_or("topk_method", "noaux_tc");
                if (scoring != "sigmoid" ||
                    (method != "noaux_tc" && method != "greedy" && method != "group_limited_greedy"))
                    return error(ErrorCode::kUnsupported,
                                 "[config] " + source + ": scoring_func '" + scoring +
                                     "' with topk_method '" + method +
                                     "' is not supported (DeepSeek-V3's sigmoid + noaux_tc)");
                if (r.int_or("moe_layer_freq", 1) != 1)
                    return error(ErrorCode::kUnsupported,
                                 "[config] " + source + ": moe_layer_freq other than 1 is not supported");
            }
            cfg.norm_topk_prob = r.bool_or("norm_topk_prob", true);
            cfg.router_sigmoid = true;
            cfg.router_groups = r.int_or("n_group", 1);
            cfg.router_topk_groups = r.int_or("topk_group", 1);
            cfg.routed_scaling = static_cast<float>(r.number_or("routed_scaling_factor", 1.0));
            cfg.first_k_dense = r.int_or("first_k_dense_replace", 1);
            const int64_t shared = r.int_or("n_shared_experts", 1);
            if (shared < 0 || shared > 64)
                return error(ErrorCode::kInvalidArgument, "[config] " + source + ": n_shared_experts = " +
                                                              std::to_string(shared) + " is outside 0..64");
            cfg.shared_expert_ffn = shared * cfg.expert_ffn;
            cfg.shared_expert_gated = false;
            // num_mtp_layers is transformers 5's other name for it (Glm4MoeConfig.attribute_map).
            cfg.nextn_layers = r.int_or("num_nextn_predict_layers", r.int_or("num_mtp_layers", 0));
            if (glm) {
                cfg.attn_qk_norm = r.bool_or("use_qk_norm", false);
                cfg.attn_qkv_bias = r.bool_or("attention_bias", false);
            } else {
                cfg.attn_qk_norm = false;  // MLA normalises the q and kv latents instead
            }
            break;
        }
    }

    if (hybrid) {
        cfg.attn_output_gate = r.bool_or("attn_output_gate", true);
        cfg.linear_k_heads = r.required_int("linear_num_key_heads");
        cfg.linear_v_heads = r.required_int("linear_num_value_heads");
        cfg.linear_k_dim = r.required_int("linear_key_head_dim");
        cfg.linear_v_dim = r.required_int("linear_value_head_dim");
        cfg.conv_kernel = r.int_or("linear_conv_kernel_dim", 4);
        cfg.shared_expert_ffn = r.int_or("shared_expert_intermediate_size", 0);
        cfg.split_linear_projections = cfg.family == Family::kQwen35Moe;
    }
    // Attention biases and q/k norms: Qwen2's reference hard-wires biases on q/k/v (not o) and has no
    // q/k norm; the Qwen3 families have the norms and, with attention_bias (false in every released
    // checkpoint), biases on all four projections — not implemented, so refused rather than ignored.
    if (cfg.family == Family::kQwen2) {
        cfg.attn_qk_norm = false;
        cfg.attn_qkv_bias = true;
    } else if (mixtral) {
        cfg.attn_qk_norm = false;  // Llama's attention: no q/k norm, no biases
    } else if (cfg.family == Family::kQwen2Moe) {
        cfg.attn_qk_norm = false;
        cfg.attn_qkv_bias = r.bool_or("qkv_bias", true);  // Qwen2MoeAttention: biases on q/k/v unless false
    } else if (glm || gpt_oss) {
        // GLM's attention_bias puts biases on q, k and v only (o_proj has none); gpt-oss's on all four:
        // read above.
    } else if (deepseek) {
        if (r.bool_or("attention_bias", false)) {
            SLUICE_RETURN_IF_ERROR(r.status());
            return error(ErrorCode::kUnsupported,
                         "[config] " + source +
                             ": attention_bias true (biases on q_a / kv_a / o) is not "
                             "supported for deepseek_v3");
        }
    } else if (r.bool_or("attention_bias", false)) {
        SLUICE_RETURN_IF_ERROR(r.status());
        return error(ErrorCode::kUnsupported,
                     "[config] " + source + ": attention_bias true (biases on q/k/v/o) is not supported");
    }
    SLUICE_RETURN_IF_ERROR(r.status());

    // Layer pattern.
    cfg.layer_types.assign(static_cast<size_t>(cfg.n_layers), LayerType::kFullAttention);
    if (mixtral) {
        // Mistral-style sliding-window attention (sliding_window set below the context) is not
        // implemented: refused rather than run as full attention. Mixtral's releases set it null.
        if (auto sw = text->find("sliding_window");
            sw != text->end() && sw->is_number_integer() && sw->get<int64_t>() > 0 &&
            sw->get<int64_t>() < std::max<int64_t>(cfg.max_positions, 1))
            return error(ErrorCode::kUnsupported, "[config] " + source + ": sliding_window " + sw->dump() +
                                                      " (sliding-window attention) is not supported");
    }
    if (gpt_oss) {
        // layer_types (GptOssConfig's default: sliding on even layers, full on odd ones) and the window.
        cfg.sliding_window = r.int_or("sliding_window", 128);
        SLUICE_RETURN_IF_ERROR(r.status());  // read after the check above: a non-integer is named here
        cfg.layer_sliding.assign(static_cast<size_t>(cfg.n_layers), false);
        auto lt = text->find("layer_types");
        if (lt != text->end() && lt->is_array()) {
            if (static_cast<int64_t>(lt->size()) != cfg.n_layers)
                return error(ErrorCode::kInvalidArgument,
                             "[config] " + source + ": layer_types has " + std::to_string(lt->size()) +
                                 " entries, expected " + std::to_string(cfg.n_layers));
            for (size_t i = 0; i < lt->size(); ++i) {
                const std::string t = (*lt)[i].is_string() ? (*lt)[i].get<std::string>() : "";
                if (t != "sliding_attention" && t != "full_attention")
                    return error(ErrorCode::kUnsupported,
                                 "[config] " + source + ": layer_types[" + std::to_string(i) + "] = " +
                                     (*lt)[i].dump() + " (expected sliding_attention or full_attention)");
                cfg.layer_sliding[i] = t == "sliding_attention";
            }
        } else {
            for (int64_t i = 0; i < cfg.n_layers; ++i)
                cfg.layer_sliding[static_cast<size_t>(i)] = (i + 1) % 2 != 0;
        }
        if (cfg.sliding_window < 1 || cfg.sliding_window > (int64_t{1} << 40))
            return error(ErrorCode::kInvalidArgument, "[config] " + source + ": sliding_window " +
                                                          std::to_string(cfg.sliding_window) +
                                                          " must be a positive number of positions");
    }
    if (cfg.is_dense_family() || cfg.family == Family::kQwen2Moe) {
        // The optional sliding window of Qwen2 / Qwen3 (off in every released checkpoint) is not
        // implemented: refused rather than run as full attention.
        bool sliding = r.bool_or("use_sliding_window", false);
        if (auto lt = text->find("layer_types"); lt != text->end() && lt->is_array())
            for (const auto& t : *lt)
                sliding = sliding || (t.is_string() && t.get<std::string>() != "full_attention");
        if (sliding)
            return error(ErrorCode::kUnsupported, "[config] " + source +
                                                      ": sliding-window attention (use_sliding_window / "
                                                      "layer_types 'sliding_attention') is not supported");
    }
    if (hybrid) {
        auto lt = text->find("layer_types");
        if (lt != text->end() && lt->is_array()) {
            if (static_cast<int64_t>(lt->size()) != cfg.n_layers) {
                return error(ErrorCode::kInvalidArgument,
                             "[config] " + source + ": layer_types has " + std::to_string(lt->size()) +
                                 " entries, expected " + std::to_string(cfg.n_layers));
            }
            for (size_t i = 0; i < lt->size(); ++i) {
                std::string t = (*lt)[i].is_string() ? (*lt)[i].get<std::string>() : "";
                if (t == "linear_attention") {
                    cfg.layer_types[i] = LayerType::kLinearAttention;
                } else if (t != "full_attention") {
                    return error(ErrorCode::kUnsupported,
                                 "[config] " + source + ": layer_types[" + std::to_string(i) + "] = " +
                                     (*lt)[i].dump() + " (expected linear_attention or full_attention)");
                }
            }
        } else {
            int64_t interval = r.int_or("full_attention_interval", 4);
            if (interval <= 0) interval = 4;
            for (int64_t i = 0; i < cfg.n_layers; ++i)
                cfg.layer_types[i] =
                    (i + 1) % interval == 0 ? LayerType::kFullAttention : LayerType::kLinearAttention;
        }
    }

    // Token ids (the outer config of a nested file may carry them too), each inside the vocabulary.
    SLUICE_RETURN_IF_ERROR(check_vocab_size(cfg.vocab, source, "vocab_size"));
    for (const json* obj : {text, static_cast<const json*>(&root)}) {
        if (cfg.eos_token_ids.empty())
            if (auto e = obj->find("eos_token_id"); e != obj->end())
                SLUICE_RETURN_IF_ERROR(read_ids(*e, "eos_token_id", cfg.vocab, source, &cfg.eos_token_ids));
        if (!cfg.bos_token_id)
            if (auto b = obj->find("bos_token_id"); b != obj->end() && !b->is_null()) {
                std::vector<int32_t> id;
                SLUICE_RETURN_IF_ERROR(read_ids(*b, "bos_token_id", cfg.vocab, source, &id));
                if (id.size() == 1) cfg.bos_token_id = id[0];
            }
        if (auto p = obj->find("pad_token_id"); p != obj->end()) {
            std::vector<int32_t> unused;
            SLUICE_RETURN_IF_ERROR(read_ids(*p, "pad_token_id", cfg.vocab, source, &unused));
        }
    }

    // The Hub's gpt-oss: routed experts in MXFP4 blocks (modules_to_not_convert: everything else); a pack of
    // it keeps that block beside the MLX one of its dense weights.
    if (auto q = root.find("quantization_config");
        gpt_oss && q != root.end() && q->is_object() && q->value("quant_method", "") == "mxfp4")
        cfg.mxfp4_experts = true;
    // MLX quantization block (top level, mirrored as quantization_config).
    for (const char* key : {"quantization", "quantization_config"}) {
        if (cfg.mxfp4_experts && std::string(key) == "quantization_config") break;
        if (auto q = root.find(key); q != root.end() && q->is_object() && q->contains("bits")) {
            SLUICE_RETURN_IF_ERROR(parse_quantization(*q, source, &cfg.quantization));
            break;
        }
        if (auto q = root.find(key);
            q != root.end() && q->is_object() && q->value("quant_method", "") == "fp8") {
            // DeepSeek-V3's FP8: e4m3 weights with an f32 weight_scale_inv per block (pack converts them).
            const std::string fmt = q->value("fmt", "e4m3");
            const json block = q->value("weight_block_size", json::array({128, 128}));
            if (fmt != "e4m3" || !block.is_array() || block.size() != 2 || !block[0].is_number_integer() ||
                !block[1].is_number_integer() || block[0].get<int64_t>() <= 0 ||
                block[1].get<int64_t>() <= 0 || block[0].get<int64_t>() > 4096 ||
                block[1].get<int64_t>() > 4096)
                return error(ErrorCode::kUnsupported,
                             "[config] " + source + ": " + key + " fp8 with fmt " + json(fmt).dump() +
                                 " and weight_block_size " + block.dump() +
                                 " is not supported (e4m3 with [rows, cols] blocks)");
            cfg.fp8_block_rows = block[0].get<int64_t>();
            cfg.fp8_block_cols = block[1].get<int64_t>();
            break;
        }
        if (auto q = root.find(key); q != root.end() && q->is_object() && q->contains("quant_method")) {
            return error(ErrorCode::kUnsupported,
                         "[config] " + source + ": " + key + " with quant_method " +
                             (*q)["quant_method"].dump() +
                             " is not supported (sluice reads bf16/f16/f32, MLX affine, or packs fp8)");
        }
    }

    // Consistency checks: a wrong shape here would be a confusing error much later.
    SLUICE_RETURN_IF_ERROR(check_model_config(cfg, source));
    return cfg;
}

}  // namespace

Status check_vocab_size(int64_t vocab, const std::string& source, const std::string& name) {
    if (vocab <= 0 || vocab > kConfigMaxVocab)
        return error(ErrorCode::kInvalidArgument, "[config] " + source + ": " + name + " " +
                                                      std::to_string(vocab) + " is outside 1.." +
                                                      std::to_string(kConfigMaxVocab));
    return Status::ok();
}

Status check_model_config(const ModelConfig& cfg, const std::string& source, const ConfigFieldNames& n) {
    auto invalid = [&](const std::string& what) {
        return error(ErrorCode::kInvalidArgument, "[config] " + source + ": " + what);
    };
    if (cfg.hidden <= 0 || cfg.n_layers <= 0 || cfg.vocab <= 0)
        return invalid(n.hidden + ", " + n.n_layers + " and " + n.vocab + " must be > 0");
    SLUICE_RETURN_IF_ERROR(check_vocab_size(cfg.vocab, source, n.vocab));
    // Upper bounds far past any released model, so no product of dims overflows and no corrupt
    // value turns into a huge allocation before a shape check can refuse it.
    const struct {
        const std::string& name;
        int64_t value, lo, hi;
    } bounds[] = {{n.hidden, cfg.hidden, 1, kConfigMaxDim},
                  {n.n_layers, cfg.n_layers, 1, kConfigMaxLayers},
                  {n.n_heads, cfg.n_heads, 1, kConfigMaxHeads},
                  {n.n_kv_heads, cfg.n_kv_heads, 1, kConfigMaxHeads},
                  {n.head_dim, cfg.head_dim, 1, kConfigMaxDim},
                  {n.max_positions, cfg.max_positions, 0, int64_t{1} << 40},
                  {n.n_experts, cfg.n_experts, 0, kConfigMaxExperts},
                  {n.expert_ffn, cfg.expert_ffn, cfg.n_experts > 0 ? 1 : 0, kConfigMaxDim},
                  {n.dense_ffn, cfg.dense_ffn, 0, kConfigMaxDim},
                  {n.shared_expert_ffn, cfg.shared_expert_ffn, 0, kConfigMaxDim},
                  {n.decoder_sparse_step, cfg.decoder_sparse_step, 0, kConfigMaxLayers}};
    for (const auto& b : bounds)
        if (b.value < b.lo || b.value > b.hi)
            return invalid(b.name + " = " + std::to_string(b.value) + " is outside " + std::to_string(b.lo) +
                           ".." + std::to_string(b.hi));
    for (int64_t l : cfg.mlp_only_layers)
        if (l < 0 || l >= cfg.n_layers)
            return invalid("mlp_only_layers names layer " + std::to_string(l) + " of a " +
                           std::to_string(cfg.n_layers) + "-layer model");
    if (cfg.n_heads <= 0 || cfg.n_kv_heads <= 0 || cfg.n_heads % cfg.n_kv_heads != 0)
        return invalid(n.n_heads + " (" + std::to_string(cfg.n_heads) + ") must be a positive multiple of " +
                       n.n_kv_heads + " (" + std::to_string(cfg.n_kv_heads) + ")");
    if (cfg.rotary_dim <= 0 || cfg.rotary_dim > cfg.head_dim || cfg.rotary_dim % 2 != 0)
        return invalid(n.rotary_dim + " " + std::to_string(cfg.rotary_dim) + " must be even and within " +
                       n.head_dim + " " + std::to_string(cfg.head_dim));
    if (cfg.n_experts > 0 && (cfg.top_k <= 0 || cfg.top_k > cfg.n_experts))
        return invalid(n.top_k + " (" + std::to_string(cfg.top_k) + ") must be in 1.." + n.n_experts + " (" +
                       std::to_string(cfg.n_experts) + ")");
    // Values a forward would turn into NaNs or silence rather than an error.
    if (!(cfg.rms_eps > 0.0f) || !std::isfinite(cfg.rms_eps))
        return invalid(n.rms_eps + " must be a positive number, got " + std::to_string(cfg.rms_eps));
    if (!(cfg.rope_theta > 0.0f) || !std::isfinite(cfg.rope_theta))
        return invalid(n.rope_theta + " must be a positive number, got " + std::to_string(cfg.rope_theta));
    if (cfg.first_k_dense < 0 || cfg.first_k_dense > cfg.n_layers)
        return invalid(n.first_k_dense + " = " + std::to_string(cfg.first_k_dense) + " is outside 0.." +
                       std::to_string(cfg.n_layers));
    if (cfg.nextn_layers < 0 || cfg.nextn_layers > 16)
        return invalid(n.nextn_layers + " = " + std::to_string(cfg.nextn_layers) + " is outside 0..16");
    if (cfg.n_experts > 0 && cfg.router_sigmoid) {
        const int64_t g = cfg.router_groups;
        if (g < 1 || cfg.n_experts % g != 0 || cfg.n_experts / g < 2)
            return invalid(n.router_groups + " (" + std::to_string(g) + ") must divide " + n.n_experts +
                           " (" + std::to_string(cfg.n_experts) + ") into groups of at least 2");
        if (cfg.router_topk_groups < 1 || cfg.router_topk_groups > g)
            return invalid(n.router_topk_groups + " (" + std::to_string(cfg.router_topk_groups) +
                           ") must be in 1.." + n.router_groups + " (" + std::to_string(g) + ")");
        if (cfg.top_k > cfg.router_topk_groups * (cfg.n_experts / g))
            return invalid(n.top_k + " (" + std::to_string(cfg.top_k) + ") exceeds the experts of the " +
                           std::to_string(cfg.router_topk_groups) + " groups kept");
        if (!(cfg.routed_scaling > 0.0f) || !std::isfinite(cfg.routed_scaling))
            return invalid(n.routed_scaling + " must be a positive number, got " +
                           std::to_string(cfg.routed_scaling));
    }
    if (cfg.latent_attention() || cfg.family == Family::kDeepseekV3) {
        for (const auto& [name, v, lo] :
             {std::tuple<const char*, int64_t, int64_t>{"q_lora_rank", cfg.q_lora_rank, 0},
              {"kv_lora_rank", cfg.kv_lora_rank, 1},
              {"qk_nope_head_dim", cfg.qk_nope_dim, 1},
              {"qk_rope_head_dim", cfg.qk_rope_dim, 2},
              {"v_head_dim", cfg.v_head_dim, 1}})
            if (v < lo || v > kConfigMaxDim)
                return invalid(std::string(name) + " = " + std::to_string(v) + " is outside " +
                               std::to_string(lo) + ".." + std::to_string(kConfigMaxDim));
        if (cfg.qk_rope_dim % 2 != 0)
            return invalid("qk_rope_head_dim " + std::to_string(cfg.qk_rope_dim) + " must be even");
    }
    for (int64_t l = 0; l < cfg.n_layers; ++l)
        if (!cfg.is_moe_layer(l) && cfg.dense_ffn <= 0)
            return invalid("layer " + std::to_string(l) + " has a dense MLP but " + n.dense_ffn +
                           " is missing or 0");
    if (cfg.family == Family::kQwen3Next || cfg.family == Family::kQwen35Moe) {
        if (cfg.linear_k_heads <= 0 || cfg.linear_v_heads % cfg.linear_k_heads != 0)
            return invalid(n.linear_v_heads + " (" + std::to_string(cfg.linear_v_heads) +
                           ") must be a multiple of " + n.linear_k_heads + " (" +
                           std::to_string(cfg.linear_k_heads) + ")");
        if (cfg.conv_kernel < 1 || cfg.conv_kernel > 64) return invalid(n.conv_kernel + " must be in 1..64");
        for (const auto& [name, v] :
             {std::pair<const std::string&, int64_t>{n.linear_k_heads, cfg.linear_k_heads},
              {n.linear_v_heads, cfg.linear_v_heads},
              {n.linear_k_dim, cfg.linear_k_dim},
              {n.linear_v_dim, cfg.linear_v_dim}})
            if (v <= 0 || v > kConfigMaxHeads * 64)
                return invalid(name + " = " + std::to_string(v) + " is outside 1.." +
                               std::to_string(kConfigMaxHeads * 64));
    }
    return Status::ok();
}

Expected<ModelConfig> load_model_config(const std::string& model_dir) {
    std::string path = (std::filesystem::path(model_dir) / "config.json").string();
    SLUICE_ASSIGN_OR_RETURN(std::string text, io::read_text_file(path));
    return parse_model_config(text, path);
}

int64_t ModelConfig::context_limit() const {
    if (!yarn.enabled) return max_positions;
    const auto extended =
        static_cast<int64_t>(std::floor(yarn.factor * static_cast<double>(yarn.original_max_positions)));
    return std::max(max_positions, extended);
}

std::vector<float> ModelConfig::rope_inv_freq() const {
    if (!yarn.enabled) return {};
    // transformers' _compute_yarn_parameters, in its f32 arithmetic where it has it.
    const int64_t dim = rotary_dim, half = rotary_dim / 2;
    const double base = rope_theta;
    auto correction_dim = [&](double rotations) {
        return static_cast<double>(dim) *
               std::log(static_cast<double>(yarn.original_max_positions) /
                        (rotations * 2.0 * std::numbers::pi)) /
               (2.0 * std::log(base));
    };
    double low = correction_dim(yarn.beta_fast), high = correction_dim(yarn.beta_slow);
    if (yarn.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
    const auto factor = static_cast<float>(yarn.factor);
    std::vector<float> inv(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
        const auto pos_freq = static_cast<float>(std::pow(base, static_cast<double>(exponent)));
        const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (factor * pos_freq);
        const float ramp =
            std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
        const float keep = 1.0f - ramp;  // transformers' inv_freq_extrapolation_factor
        inv[static_cast<size_t>(i)] = interpolation * (1.0f - keep) + extrapolation * keep;
    }
    return inv;
}

}  // namespace sluice::model
