#include "model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "io/mapped_file.h"
#include "test_util.h"

namespace sluice::model {
namespace {

Expected<ModelConfig> load_shared(const std::string& rel) {
    std::string path = sluice::testing::shared_dir() + "/" + rel;
    auto text = io::read_text_file(path);
    if (!text.has_value()) return text.status();
    return parse_model_config(*text, path);
}

#define SKIP_WITHOUT_SHARED()                                                       \
    if (!sluice::testing::exists(sluice::testing::shared_dir() + "/model-configs")) \
    GTEST_SKIP() << "../shared absent"

TEST(ModelConfig, Qwen3Next80B) {
    SKIP_WITHOUT_SHARED();
    auto cfg = load_shared("model-configs/qwen3-next-80b-a3b.hf.json");
    ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
    EXPECT_EQ(cfg->family, Family::kQwen3Next);
    EXPECT_EQ(cfg->hidden, 2048);
    EXPECT_EQ(cfg->n_layers, 48);
    EXPECT_EQ(cfg->head_dim, 256);
    EXPECT_EQ(cfg->rotary_dim, 64);
    EXPECT_FLOAT_EQ(cfg->rope_theta, 1e7f);
    EXPECT_EQ(cfg->n_experts, 512);
    EXPECT_EQ(cfg->top_k, 10);
    EXPECT_EQ(cfg->linear_v_heads, 32);
    EXPECT_EQ(cfg->conv_dim(), 8192);
    EXPECT_TRUE(cfg->norm_topk_prob);
    EXPECT_FALSE(cfg->split_linear_projections);
    int full = 0;
    for (int64_t l = 0; l < cfg->n_layers; ++l) full += cfg->is_full_attention(l);
    EXPECT_EQ(full, 12);
    EXPECT_TRUE(cfg->is_full_attention(3));
    EXPECT_FALSE(cfg->is_full_attention(4));
    EXPECT_FALSE(cfg->quantization.present);
}

TEST(ModelConfig, Qwen3NextMlx4bitWithRouterOverrides) {
    SKIP_WITHOUT_SHARED();
    auto cfg = load_shared("model-configs/qwen3-next-80b-a3b.mlx-4bit.json");
    ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
    ASSERT_TRUE(cfg->quantization.present);
    EXPECT_EQ(cfg->quantization.global.bits, 4);
    EXPECT_EQ(cfg->quantization.global.group_size, 64);
    EXPECT_EQ(cfg->quantization.for_module("model.layers.0.mlp.gate").bits, 8);
    EXPECT_EQ(cfg->quantization.for_module("model.layers.0.mlp.shared_expert_gate").bits, 8);
    EXPECT_EQ(cfg->quantization.for_module("model.layers.0.mlp.switch_mlp.up_proj").bits, 4);
}

TEST(ModelConfig, NestedQwen36And35) {
    SKIP_WITHOUT_SHARED();
    for (const char* file : {"model-configs/qwen3.6-35b-a3b.json", "model-configs/qwen3.5-397b-a17b.json"}) {
        auto cfg = load_shared(file);
        ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
        EXPECT_EQ(cfg->family, Family::kQwen35Moe) << file;
        EXPECT_TRUE(cfg->norm_topk_prob) << file;  // always renormalises
        EXPECT_TRUE(cfg->split_linear_projections);
        EXPECT_EQ(cfg->rotary_dim, 64) << file;
        EXPECT_FLOAT_EQ(cfg->rope_theta, 1e7f) << file;
        EXPECT_EQ(cfg->vocab, 248320) << file;
    }
    auto c36 = load_shared("model-configs/qwen3.6-35b-a3b.json");
    EXPECT_EQ(c36->n_layers, 40);
    EXPECT_EQ(c36->n_experts, 256);
    EXPECT_EQ(c36->top_k, 8);
    auto c397 = load_shared("model-configs/qwen3.5-397b-a17b.json");
    EXPECT_EQ(c397->n_layers, 60);
    EXPECT_EQ(c397->hidden, 4096);
    EXPECT_EQ(c397->linear_v_heads, 64);
    EXPECT_EQ(c397->n_experts, 512);
}

TEST(ModelConfig, MlxFixtures) {
    SKIP_WITHOUT_SHARED();
    for (const char* dir : {"tiny-model", "tiny-model-q4", "tiny-model-q35"}) {
        auto cfg = load_shared(std::string("fixtures/mlx-lm/") + dir + "/config.json");
        ASSERT_TRUE(cfg.has_value()) << dir << ": " << cfg.status().message();
        EXPECT_EQ(cfg->hidden, 64);
        EXPECT_EQ(cfg->rotary_dim, 4);
        EXPECT_EQ(cfg->shared_expert_ffn, 32);
    }
    auto q4 = load_shared("fixtures/mlx-lm/tiny-model-q4/config.json");
    EXPECT_EQ(q4->quantization.global.bits, 4);
    EXPECT_EQ(q4->quantization.global.group_size, 32);
}

TEST(ModelConfig, Qwen3MoeDefaults) {
    auto cfg = parse_model_config(R"({"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":2,
        "vocab_size":100,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,
        "num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":16,"rope_theta":1000000,
        "eos_token_id":[5,6]})",
                                  "c.json");
    ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
    EXPECT_FALSE(cfg->norm_topk_prob);  // the HF default
    EXPECT_EQ(cfg->rotary_dim, 32);     // full rotary
    EXPECT_FALSE(cfg->zero_centered_norms());
    EXPECT_EQ(cfg->eos_token_ids, (std::vector<int32_t>{5, 6}));
    EXPECT_TRUE(cfg->is_full_attention(1));
}

// YaRN as Qwen3's model card configures it (factor 4 over 32768 positions), in either spelling:
// the context it runs to, transformers' attention factor, and frequencies that keep the fast dims
// (more than beta_fast rotations over the original context), interpolate the slow ones by the
// factor, and ramp between.
TEST(ModelConfig, YarnRopeScaling) {
    const std::string base = R"("model_type":"qwen3_moe","hidden_size":2048,"num_hidden_layers":2,
        "vocab_size":100,"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,
        "num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":16,"rope_theta":1000000,
        "max_position_embeddings":40960)";
    const std::string yarn = R"("rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768)";
    const std::string spellings[] = {",\"rope_scaling\":{" + yarn + "}",
                                     ",\"rope_parameters\":{\"rope_theta\":1000000," + yarn + "}"};
    for (const std::string& spelling : spellings) {
        SCOPED_TRACE(spelling);
        auto cfg = parse_model_config("{" + base + spelling + "}", "c.json");
        ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
        ASSERT_TRUE(cfg->yarn.enabled);
        EXPECT_EQ(cfg->context_limit(), 131072);
        EXPECT_NEAR(cfg->yarn.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-12);
        const std::vector<float> inv = cfg->rope_inv_freq();
        ASSERT_EQ(inv.size(), 64u);
        // Correction range: dims floor(128·ln(32768/(32·2π))/(2·ln 1e6)) = floor(23.60) = 23 to
        // ceil(128·ln(32768/2π)/(2·ln 1e6)) = ceil(39.65) = 40.
        for (size_t i = 0; i < inv.size(); ++i) {
            const double plain = 1.0 / std::pow(1e6, 2.0 * static_cast<double>(i) / 128.0);
            if (i <= 23) {
                EXPECT_NEAR(inv[i] / plain, 1.0, 1e-6) << i;
            } else if (i >= 40) {
                EXPECT_NEAR(inv[i] / plain, 0.25, 1e-6) << i;
            } else {
                const double keep = 1.0 - (static_cast<double>(i) - 23.0) / 17.0;
                EXPECT_NEAR(inv[i] / plain, 0.25 + 0.75 * keep, 1e-5) << i;
            }
        }
    }
    auto plain = parse_model_config("{" + base + "}", "c.json");
    ASSERT_TRUE(plain.has_value());
    EXPECT_EQ(plain->context_limit(), 40960);
    EXPECT_TRUE(plain->rope_inv_freq().empty());
    // DeepSeek's mscale ratio.
    auto ds = parse_model_config("{" + base + R"(,"rope_scaling":{"rope_type":"yarn","factor":40,
        "original_max_position_embeddings":4096,"mscale":1.0,"mscale_all_dim":1.0}})",
                                 "c.json");
    ASSERT_TRUE(ds.has_value()) << ds.status().message();
    EXPECT_NEAR(ds->yarn.attention_factor, 1.0, 1e-12);
    for (const char* bad : {R"({"rope_type":"linear","factor":2})", R"({"rope_type":"yarn","factor":0.5})",
                            R"({"rope_type":"yarn"})"}) {
        auto cfg = parse_model_config("{" + base + ",\"rope_scaling\":" + bad + "}", "c.json");
        ASSERT_FALSE(cfg.has_value()) << bad;
        EXPECT_NE(cfg.status().message().find("rope_scaling"), std::string::npos) << cfg.status().message();
    }
}

// Dense Qwen3 (Qwen3ForCausalLM): no experts, a dense MLP of intermediate_size in every layer.
TEST(ModelConfig, DenseQwen3) {
    const std::string base = R"("model_type":"qwen3","hidden_size":64,"num_hidden_layers":3,
        "vocab_size":100,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,
        "intermediate_size":96,"rope_theta":1000000,"tie_word_embeddings":true)";
    auto cfg = parse_model_config("{" + base + "}", "c.json");
    ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
    EXPECT_EQ(cfg->family, Family::kQwen3);
    EXPECT_FALSE(cfg->has_experts());
    for (int64_t l = 0; l < 3; ++l) EXPECT_FALSE(cfg->is_moe_layer(l));
    EXPECT_EQ(cfg->dense_ffn, 96);
    EXPECT_EQ(cfg->rotary_dim, 32);
    EXPECT_FALSE(cfg->zero_centered_norms());
    EXPECT_TRUE(cfg->tie_word_embeddings);

    // transformers 5 writes layer_types; full attention everywhere is what sluice runs, a sliding
    // window is refused by name rather than run as full attention.
    auto full = parse_model_config(
        "{" + base + R"(,"layer_types":["full_attention","full_attention","full_attention"]})", "c.json");
    EXPECT_TRUE(full.has_value()) << full.status().message();
    for (const char* sliding :
         {R"(,"use_sliding_window":true})",
          R"(,"layer_types":["full_attention","sliding_attention","full_attention"]})"}) {
        auto s = parse_model_config("{" + base + sliding, "c.json");
        ASSERT_FALSE(s.has_value());
        EXPECT_EQ(s.status().code(), ErrorCode::kUnsupported);
        EXPECT_NE(s.status().message().find("sliding-window"), std::string::npos) << s.status().message();
    }
    auto no_ffn = parse_model_config(R"({"model_type":"qwen3","hidden_size":64,"num_hidden_layers":3,
        "vocab_size":100,"num_attention_heads":4,"num_key_value_heads":2})",
                                     "c.json");
    ASSERT_FALSE(no_ffn.has_value());
    EXPECT_NE(no_ffn.status().message().find("'intermediate_size'"), std::string::npos);
}

// A Qwen3-MoE checkpoint saved by transformers 5 names the expert count num_local_experts.
TEST(ModelConfig, ExpertCountSpellings) {
    const std::string base = R"("model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":2,
        "vocab_size":100,"num_attention_heads":4,"num_key_value_heads":2,
        "num_experts_per_tok":2,"moe_intermediate_size":16)";
    for (const char* key : {"num_experts", "num_local_experts"}) {
        auto cfg = parse_model_config("{" + base + ",\"" + key + "\":8}", "c.json");
        ASSERT_TRUE(cfg.has_value()) << key << ": " << cfg.status().message();
        EXPECT_EQ(cfg->n_experts, 8) << key;
    }
    auto none = parse_model_config("{" + base + "}", "c.json");
    ASSERT_FALSE(none.has_value());
    EXPECT_NE(none.status().message().find("missing required field 'num_experts' or 'num_local_experts'"),
              std::string::npos)
        << none.status().message();
}

TEST(ModelConfig, ClearErrors) {
    auto bad_type = parse_model_config(R"({"model_type":"llama"})", "c.json");
    ASSERT_FALSE(bad_type.has_value());
    EXPECT_EQ(bad_type.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(bad_type.status().message().find("qwen3_next"), std::string::npos);  // lists what is supported

    auto missing = parse_model_config(R"({"model_type":"qwen3_moe","hidden_size":64})", "c.json");
    ASSERT_FALSE(missing.has_value());
    EXPECT_NE(missing.status().message().find("missing required field 'num_hidden_layers'"),
              std::string::npos)
        << missing.status().message();

    auto wrong = parse_model_config(R"({"model_type":"qwen3_moe","hidden_size":"64"})", "c.json");
    ASSERT_FALSE(wrong.has_value());
    EXPECT_NE(wrong.status().message().find("'hidden_size' must be a non-negative integer"),
              std::string::npos);

    auto mode = parse_model_config(R"({"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":2,
        "vocab_size":100,"num_attention_heads":4,"num_key_value_heads":2,"num_experts":8,
        "num_experts_per_tok":2,"moe_intermediate_size":16,
        "quantization":{"bits":4,"group_size":32,"mode":"mxfp4"}})",
                                   "c.json");
    ASSERT_FALSE(mode.has_value());
    EXPECT_NE(mode.status().message().find("'mxfp4' is not supported"), std::string::npos);

    EXPECT_FALSE(parse_model_config("not json", "c.json").has_value());
}

// Values a forward would turn into NaNs, garbage or a crash are refused by name at load.
TEST(ModelConfig, OutOfRangeValuesAreRefused) {
    const std::string base = R"({"model_type":"qwen3_moe","hidden_size":64,"num_hidden_layers":2,
        "vocab_size":100,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":32,
        "num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":16)";
    ASSERT_TRUE(parse_model_config(base + "}", "c.json").has_value());
    const std::vector<std::pair<std::string, std::string>> cases = {
        {R"(,"rms_norm_eps":-1})", "rms_norm_eps must be a positive number"},
        {R"(,"rms_norm_eps":0})", "rms_norm_eps must be a positive number"},
        {R"(,"rope_theta":0})", "rope_theta must be a positive number"},
        {R"(,"rope_parameters":{"rope_theta":-5}})", "rope_theta must be a positive number"},
        {R"(,"eos_token_id":[5,100]})", "eos_token_id 100 is outside the vocabulary [0, 100)"},
        {R"(,"bos_token_id":-3})", "bos_token_id -3 is outside the vocabulary"},
        // Ids checked before they are narrowed (2^32 + 1 once wrapped to a valid 1), pad included.
        {R"(,"eos_token_id":4294967297})", "eos_token_id 4294967297 is outside the vocabulary [0, 100)"},
        {R"(,"pad_token_id":100})", "pad_token_id 100 is outside the vocabulary"},
        {R"(,"bos_token_id":"1"})", "bos_token_id \"1\" is outside the vocabulary"},
        // Dims positive and bounded before anything is sized by them.
        {R"(,"head_dim":-32})", "head_dim = -32 is outside 1..1048576"},
        {R"(,"vocab_size":1000000000})", "vocab_size 1000000000 is outside 1..16777216"},
        {R"(,"vocab_size":50000000})", "vocab_size 50000000 is outside 1..16777216"},
        {R"(,"num_attention_heads":1000000,"num_key_value_heads":1000000})",
         "num_attention_heads = 1000000 is outside 1..4096"},
        {R"(,"max_position_embeddings":-1})", "max_position_embeddings = -1 is outside"},
        {R"(,"mlp_only_layers":[7]})", "mlp_only_layers names layer 7 of a 2-layer model"},
        // A quantization value that would wrap to a supported one (4294967300 → 4).
        {R"(,"quantization":{"bits":4294967300,"group_size":64}})", "quantization bits = 4294967300"},
        // Number overflow (nlohmann's out_of_range, once "not a valid JSON object") names the key.
        {R"(,"rope_theta":1e999})", "rope_theta: [json.exception.out_of_range.406] number overflow"},
        {R"(,"rope_parameters":{"rope_theta":1e999}})", "rope_parameters.rope_theta: "},
        {R"(,"eos_token_id":[1,2,1e999]})", "eos_token_id[2]: "},
    };
    for (const auto& [tail, expect] : cases) {
        auto cfg = parse_model_config(base + tail, "c.json");
        ASSERT_FALSE(cfg.has_value()) << tail;
        EXPECT_NE(cfg.status().message().find(expect), std::string::npos) << cfg.status().message();
        EXPECT_NE(cfg.status().message().find("c.json"), std::string::npos) << cfg.status().message();
    }
}

// GLM-4.5-Air's config.json as the Hub ships it: every GLM field, and the defaults of Glm4MoeConfig
// where a field is left out.
TEST(ModelConfig, Glm4MoeAsTheHubWritesIt) {
    const std::string air = R"({"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe",
        "attention_bias": true, "eos_token_id": [151329, 151336, 151338], "first_k_dense_replace": 1,
        "head_dim": 128, "hidden_size": 4096, "intermediate_size": 10944, "max_position_embeddings": 131072,
        "moe_intermediate_size": 1408, "n_group": 1, "n_routed_experts": 128, "n_shared_experts": 1,
        "norm_topk_prob": true, "num_attention_heads": 96, "num_experts_per_tok": 8, "num_hidden_layers": 46,
        "num_key_value_heads": 8, "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5,
        "rms_norm_eps": 1e-05, "rope_theta": 1000000, "routed_scaling_factor": 1.0, "topk_group": 1,
        "use_qk_norm": false, "vocab_size": 151552})";
    auto cfg = parse_model_config(air, "air.json");
    ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
    EXPECT_EQ(cfg->family, Family::kGlm4Moe);
    EXPECT_EQ(cfg->n_experts, 128);
    EXPECT_EQ(cfg->rotary_dim, 64);
    EXPECT_TRUE(cfg->attn_qkv_bias);
    EXPECT_FALSE(cfg->attn_qk_norm);
    EXPECT_TRUE(cfg->router_sigmoid);
    EXPECT_EQ(cfg->shared_expert_ffn, 1408);
    EXPECT_FALSE(cfg->shared_expert_gated);
    EXPECT_FALSE(cfg->is_moe_layer(0));
    EXPECT_TRUE(cfg->is_moe_layer(1));
    EXPECT_EQ(cfg->dense_ffn, 10944);
    EXPECT_EQ(cfg->nextn_layers, 1);
    EXPECT_EQ(cfg->rms_eps, 1e-5f);
    // Left out: Glm4MoeConfig's defaults (head_dim hidden / heads, half rotary, eps 1e-5, one shared
    // expert, one dense layer).
    auto bare = parse_model_config(R"({"model_type": "glm4_moe", "hidden_size": 256, "num_hidden_layers": 2,
        "vocab_size": 100, "num_attention_heads": 4, "num_key_value_heads": 2, "n_routed_experts": 8,
        "num_experts_per_tok": 2, "moe_intermediate_size": 32, "intermediate_size": 64})",
                                   "bare.json");
    ASSERT_TRUE(bare.has_value()) << bare.status().message();
    EXPECT_EQ(bare->head_dim, 64);
    EXPECT_EQ(bare->rotary_dim, 32);
    EXPECT_EQ(bare->rms_eps, 1e-5f);
    EXPECT_EQ(bare->first_k_dense, 1);
    EXPECT_EQ(bare->shared_expert_ffn, 32);
    EXPECT_TRUE(bare->norm_topk_prob);
    // Groups that do not divide the experts, or keep too few of them, are named.
    for (const auto& [fields, expect] :
         {std::pair<std::string, std::string>{R"("n_group": 3)", "n_group (3) must divide"},
          {R"("n_group": 4, "topk_group": 5)", "topk_group (5) must be in 1..n_group"},
          {R"("n_group": 4, "topk_group": 1, "num_experts_per_tok": 3)",
           "exceeds the experts of the 1 groups"},
          {R"("routed_scaling_factor": -1)", "routed_scaling_factor must be a positive number"},
          {R"("first_k_dense_replace": 9)", "first_k_dense_replace = 9 is outside 0..2"}}) {
        const std::string text = R"({"model_type": "glm4_moe", "hidden_size": 256, "num_hidden_layers": 2,
            "vocab_size": 100, "num_attention_heads": 4, "num_key_value_heads": 2, "n_routed_experts": 8,
            "num_experts_per_tok": 2, "moe_intermediate_size": 32, "intermediate_size": 64, )" +
                                 fields + "}";
        auto bad = parse_model_config(text, "g.json");
        ASSERT_FALSE(bad.has_value()) << fields;
        EXPECT_NE(bad.status().message().find(expect), std::string::npos) << bad.status().message();
    }
}

// DeepSeek-V3 and Kimi K2 as transformers 5 writes them (../shared/model-configs): multi-head latent
// attention's dims, the cache row of one latent, and DeepSeek's router fields.
TEST(ModelConfig, DeepseekV3AndKimiK2) {
    SKIP_WITHOUT_SHARED();
    auto v3 = load_shared("model-configs/deepseek-v3-671b.json");
    ASSERT_TRUE(v3.has_value()) << v3.status().message();
    EXPECT_EQ(v3->family, Family::kDeepseekV3);
    EXPECT_TRUE(v3->latent_attention());
    EXPECT_EQ(v3->q_lora_rank, 1536);
    EXPECT_EQ(v3->kv_lora_rank, 512);
    EXPECT_EQ(v3->head_dim, 192);  // q·k per head: nope 128 + rope 64 (the file's head_dim is the rope part)
    EXPECT_EQ(v3->rotary_dim, 64);
    EXPECT_EQ(v3->v_head_dim, 128);
    EXPECT_TRUE(v3->rope_interleave);
    EXPECT_EQ(v3->kv_cache_heads(), 1);
    EXPECT_EQ(v3->kv_cache_dim(), 576);  // the 576 values per token and layer of the issue
    EXPECT_EQ(v3->n_experts, 256);
    EXPECT_EQ(v3->router_groups, 8);
    EXPECT_EQ(v3->router_topk_groups, 4);
    EXPECT_FLOAT_EQ(v3->routed_scaling, 2.5f);
    EXPECT_TRUE(v3->router_sigmoid);
    EXPECT_FALSE(v3->shared_expert_gated);
    EXPECT_EQ(v3->shared_expert_ffn, 2048);
    EXPECT_EQ(v3->first_k_dense, 3);
    EXPECT_FALSE(v3->is_moe_layer(2));
    EXPECT_TRUE(v3->is_moe_layer(3));
    EXPECT_EQ(v3->nextn_layers, 1);
    auto k2 = load_shared("model-configs/kimi-k2-1t.json");
    ASSERT_TRUE(k2.has_value()) << k2.status().message();
    EXPECT_EQ(k2->n_experts, 384);
    EXPECT_EQ(k2->n_heads, 64);
    EXPECT_EQ(k2->router_groups, 1);
    EXPECT_FLOAT_EQ(k2->routed_scaling, 2.827f);
}

// DeepSeek-V3's config.json as the Hub ships it (rope_scaling YaRN with mscale / mscale_all_dim, no
// transformers keys), Kimi K2's model_type, a null q_lora_rank (a plain q_proj), and what is refused.
TEST(ModelConfig, DeepseekV3AsTheHubWritesIt) {
    const std::string hub = R"({"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
        "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
        "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8,
        "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
        "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06, "first_k_dense_replace": 3,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"},
        "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "topk_group": 4,
        "topk_method": "noaux_tc", "v_head_dim": 128, "vocab_size": 129280, "bos_token_id": 0,
        "eos_token_id": 1})";
    auto cfg = parse_model_config(hub, "v3.json");
    ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
    EXPECT_TRUE(cfg->yarn.enabled);
    EXPECT_EQ(cfg->yarn.original_max_positions, 4096);
    EXPECT_DOUBLE_EQ(cfg->yarn.attention_factor, 1.0);  // mscale / mscale_all_dim
    const double m = 0.1 * std::log(40.0) + 1.0;
    EXPECT_NEAR(cfg->yarn.softmax_mscale, m * m, 1e-12);
    EXPECT_EQ(cfg->context_limit(), 163840);
    EXPECT_EQ(cfg->rope_inv_freq().size(), 32u);

    std::string kimi = hub;
    kimi.replace(kimi.find("\"deepseek_v3\""), 13, "\"kimi_k2\"");
    kimi.replace(kimi.find("\"q_lora_rank\": 1536"), 19, "\"q_lora_rank\": null");
    auto k = parse_model_config(kimi, "k.json");
    ASSERT_TRUE(k.has_value()) << k.status().message();
    EXPECT_EQ(k->family, Family::kDeepseekV3);
    EXPECT_EQ(k->q_lora_rank, 0);

    for (const auto& [from, to, expect] :
         {std::tuple<std::string, std::string, std::string>{
              "\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"softmax\"", "scoring_func 'softmax'"},
          {"\"moe_layer_freq\": 1", "\"moe_layer_freq\": 2", "moe_layer_freq"},
          {"\"qk_rope_head_dim\": 64", "\"qk_rope_head_dim\": 63", "rotary dim 63 must be even"},
          {"\"kv_lora_rank\": 512", "\"kv_lora_rank\": 0", "kv_lora_rank = 0 is outside"},
          {"\"n_group\": 8", "\"n_group\": 7", "n_group (7) must divide"}}) {
        std::string text = hub;
        text.replace(text.find(from), from.size(), to);
        auto bad = parse_model_config(text, "bad.json");
        ASSERT_FALSE(bad.has_value()) << to;
        EXPECT_NE(bad.status().message().find(expect), std::string::npos) << bad.status().message();
    }
}

// ../shared/model-configs/glm-4.5-air.json carries no head_dim, and its hidden_size 4096 is not a multiple of
// its 96 heads: hidden / heads would floor to 42 (a rotary width of 21), a model no checkpoint has. It is
// refused by name; given GLM-4.5-Air's released head_dim (128) it parses to the released shapes.
TEST(ModelConfig, Glm45AirWithoutHeadDimIsRefusedByName) {
    SKIP_WITHOUT_SHARED();
    auto bad = load_shared("model-configs/glm-4.5-air.json");
    ASSERT_FALSE(bad.has_value());
    EXPECT_NE(bad.status().message().find("no head_dim, and hidden_size 4096 is not a multiple of "
                                          "num_attention_heads 96 (42.67 a head)"),
              std::string::npos)
        << bad.status().message();
    std::ifstream in(sluice::testing::shared_dir() + "/model-configs/glm-4.5-air.json");
    nlohmann::json j = nlohmann::json::parse(in);
    j["head_dim"] = 128;
    auto cfg = parse_model_config(j.dump(), "glm-4.5-air.json");
    ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
    EXPECT_EQ(cfg->family, Family::kGlm4Moe);
    EXPECT_EQ(cfg->head_dim, 128);
    EXPECT_EQ(cfg->rotary_dim, 64);
    EXPECT_EQ(cfg->n_experts, 128);
    EXPECT_EQ(cfg->top_k, 8);
}

// gpt-oss-120b as transformers 5 writes it (../shared/model-configs: rope_parameters, layer_types, no
// swiglu_limit, no quantization_config).
TEST(ModelConfig, GptOss120b) {
    SKIP_WITHOUT_SHARED();
    auto cfg = load_shared("model-configs/gpt-oss-120b.json");
    ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
    EXPECT_EQ(cfg->family, Family::kGptOss);
    EXPECT_EQ(cfg->hidden, 2880);
    EXPECT_EQ(cfg->n_layers, 36);
    EXPECT_EQ(cfg->n_heads, 64);
    EXPECT_EQ(cfg->n_kv_heads, 8);
    EXPECT_EQ(cfg->head_dim, 64);
    EXPECT_EQ(cfg->rotary_dim, 64);
    EXPECT_EQ(cfg->vocab, 201088);
    EXPECT_EQ(cfg->n_experts, 128);
    EXPECT_EQ(cfg->top_k, 4);
    EXPECT_EQ(cfg->expert_ffn, 2880);
    EXPECT_EQ(cfg->shared_expert_ffn, 0);
    EXPECT_TRUE(cfg->is_moe_layer(0));
    EXPECT_TRUE(cfg->norm_topk_prob);
    EXPECT_FALSE(cfg->router_sigmoid);
    EXPECT_TRUE(cfg->router_logit_bias);
    EXPECT_TRUE(cfg->expert_bias);
    EXPECT_FLOAT_EQ(cfg->swiglu_limit, 7.0f);
    EXPECT_FLOAT_EQ(cfg->swiglu_alpha, 1.702f);
    EXPECT_TRUE(cfg->attn_qkv_bias);
    EXPECT_TRUE(cfg->attn_o_bias);
    EXPECT_TRUE(cfg->attn_sinks);
    EXPECT_FALSE(cfg->attn_qk_norm);
    EXPECT_EQ(cfg->rms_eps, 1e-5f);
    EXPECT_FLOAT_EQ(cfg->rope_theta, 150000.0f);
    EXPECT_EQ(cfg->sliding_window, 128);
    ASSERT_EQ(cfg->layer_sliding.size(), 36u);
    for (int64_t l = 0; l < 36; ++l) {
        EXPECT_EQ(cfg->layer_sliding[static_cast<size_t>(l)], l % 2 == 0) << l;
        EXPECT_EQ(cfg->window_of(l), l % 2 == 0 ? 128 : 0) << l;
        EXPECT_TRUE(cfg->is_full_attention(l)) << l;  // softmax attention on every layer
    }
    EXPECT_TRUE(cfg->yarn.enabled);
    EXPECT_DOUBLE_EQ(cfg->yarn.factor, 32.0);
    EXPECT_EQ(cfg->yarn.original_max_positions, 4096);
    EXPECT_FALSE(cfg->yarn.truncate);
    EXPECT_NEAR(cfg->yarn.attention_factor, 0.1 * std::log(32.0) + 1.0, 1e-12);
    EXPECT_EQ(cfg->context_limit(), 131072);
    EXPECT_EQ(cfg->rope_inv_freq().size(), 32u);
    EXPECT_FALSE(cfg->mxfp4_experts);  // no quantization_config in this file
    EXPECT_FALSE(cfg->quantization.present);
}

// A gpt-oss-20b config.json as the Hub ships it (transformers 4.55: rope_scaling with a top-level
// rope_theta, experts_per_token beside num_experts_per_tok, swiglu_limit, the mxfp4 quantization_config),
// GptOssConfig's defaults where fields are left out, and what is refused.
TEST(ModelConfig, GptOssAsTheHubWritesIt) {
    std::string layer_types;
    for (int l = 0; l < 24; ++l)
        layer_types +=
            std::string(l ? ", " : "") + (l % 2 == 0 ? "\"sliding_attention\"" : "\"full_attention\"");
    const std::string hub = R"({"architectures": ["GptOssForCausalLM"], "attention_bias": true,
        "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64,
        "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
        "intermediate_size": 2880, "layer_types": [)" +
                            layer_types + R"(], "max_position_embeddings": 131072, "model_type": "gpt_oss",
        "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
        "num_local_experts": 32, "output_router_logits": false, "pad_token_id": 199999,
        "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
            "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
        "rms_norm_eps": 1e-05, "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
            "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
        "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
        "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0", "use_cache": true,
        "vocab_size": 201088})";
    auto cfg = parse_model_config(hub, "20b.json");
    ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
    EXPECT_EQ(cfg->family, Family::kGptOss);
    EXPECT_EQ(cfg->n_layers, 24);
    EXPECT_EQ(cfg->n_experts, 32);
    EXPECT_EQ(cfg->top_k, 4);
    EXPECT_EQ(cfg->expert_ffn, 2880);
    EXPECT_EQ(cfg->rotary_dim, 64);
    EXPECT_FLOAT_EQ(cfg->rope_theta, 150000.0f);
    EXPECT_TRUE(cfg->mxfp4_experts);
    EXPECT_FALSE(cfg->quantization.present);
    EXPECT_FLOAT_EQ(cfg->swiglu_limit, 7.0f);
    EXPECT_TRUE(cfg->attn_o_bias);
    EXPECT_TRUE(cfg->attn_sinks);
    EXPECT_EQ(cfg->sliding_window, 128);
    for (int64_t l = 0; l < 24; ++l) EXPECT_EQ(cfg->window_of(l), l % 2 == 0 ? 128 : 0) << l;
    EXPECT_TRUE(cfg->yarn.enabled);
    EXPECT_DOUBLE_EQ(cfg->yarn.factor, 32.0);
    EXPECT_FALSE(cfg->yarn.truncate);
    EXPECT_NEAR(cfg->yarn.attention_factor, 0.1 * std::log(32.0) + 1.0, 1e-12);
    EXPECT_EQ(cfg->eos_token_ids, std::vector<int32_t>{200002});
    // experts_per_token alone names the top k.
    std::string only_experts_per_token = hub;
    only_experts_per_token.erase(only_experts_per_token.find("\"num_experts_per_tok\": 4, "), 26);
    auto k = parse_model_config(only_experts_per_token, "k.json");
    ASSERT_TRUE(k.has_value()) << k.status().message();
    EXPECT_EQ(k->top_k, 4);

    // Left out: GptOssConfig's defaults — sliding on even layers, window 128, YaRN ×32 over 4096
    // untruncated, theta 150000, eps 1e-5, limit 7, biases on the attention projections.
    auto bare = parse_model_config(R"({"model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 5,
        "vocab_size": 100, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 32})",
                                   "bare.json");
    ASSERT_TRUE(bare.has_value()) << bare.status().message();
    EXPECT_EQ(bare->sliding_window, 128);
    EXPECT_EQ(bare->layer_sliding, (std::vector<bool>{true, false, true, false, true}));
    EXPECT_TRUE(bare->yarn.enabled);
    EXPECT_DOUBLE_EQ(bare->yarn.factor, 32.0);
    EXPECT_EQ(bare->yarn.original_max_positions, 4096);
    EXPECT_FALSE(bare->yarn.truncate);
    EXPECT_DOUBLE_EQ(bare->yarn.beta_fast, 32.0);
    EXPECT_DOUBLE_EQ(bare->yarn.beta_slow, 1.0);
    EXPECT_NEAR(bare->yarn.attention_factor, 0.1 * std::log(32.0) + 1.0, 1e-12);
    EXPECT_FLOAT_EQ(bare->rope_theta, 150000.0f);
    EXPECT_EQ(bare->rms_eps, 1e-5f);
    EXPECT_FLOAT_EQ(bare->swiglu_limit, 7.0f);
    EXPECT_TRUE(bare->attn_qkv_bias);
    EXPECT_TRUE(bare->attn_o_bias);
    EXPECT_FALSE(bare->mxfp4_experts);
    EXPECT_EQ(bare->expert_ffn, 32);
    EXPECT_EQ(bare->rotary_dim, 16);

    const std::string small = R"({"model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 2,
        "vocab_size": 100, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 32)";
    for (const auto& [fields, expect] : {
             std::pair<std::string, std::string>{R"("layer_types": ["sliding_attention"])",
                                                 "layer_types has 1 entries, expected 2"},
             {R"("layer_types": ["sliding_attention", "linear_attention"])",
              "layer_types[1] = \"linear_attention\" (expected sliding_attention or full_attention)"},
             {R"("layer_types": ["sliding_attention", 3])", "layer_types[1] = 3"},
             {R"("sliding_window": 0)", "sliding_window 0 must be a positive number of positions"},
             {R"("sliding_window": -128)", "sliding_window -128 must be a positive number of positions"},
             {R"("sliding_window": 12.5)", "'sliding_window' must be an integer"},
             {R"("swiglu_limit": 0)", "swiglu_limit 0.000000 must be a positive number"},
             {R"("swiglu_limit": -7)", "swiglu_limit -7.000000 must be a positive number"},
             {R"("quantization_config": {"quant_method": "awq"})",
              "quantization_config with quant_method \"awq\" is not supported"},
             {R"("quantization_config": {"quant_method": "mxfp4 "})",
              "quant_method \"mxfp4 \" is not supported"},
         }) {
        auto bad = parse_model_config(small + ", " + fields + "}", "o.json");
        ASSERT_FALSE(bad.has_value()) << fields;
        EXPECT_NE(bad.status().message().find(expect), std::string::npos) << bad.status().message();
        EXPECT_NE(bad.status().message().find("o.json"), std::string::npos) << bad.status().message();
    }
    // The Hub's mxfp4 quantization_config is gpt-oss's alone: elsewhere it is still refused.
    auto qwen = parse_model_config(R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 2,
        "vocab_size": 100, "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 8,
        "num_experts_per_tok": 2, "moe_intermediate_size": 16, "quantization_config": {"quant_method": "mxfp4"}})",
                                   "q.json");
    ASSERT_FALSE(qwen.has_value());
    EXPECT_NE(qwen.status().message().find("quant_method \"mxfp4\" is not supported"), std::string::npos)
        << qwen.status().message();
}

// Every golden's config.json against the config transformers itself writes for the same model
// (tools/make_goldens.py --save-configs: save_pretrained, the spelling of a checkpoint saved by
// transformers 5, e.g. num_local_experts, rope_parameters, layer_types): both must read as the same
// model, field by field.
TEST(ModelConfig, ConfigsAsTransformersWritesThem) {
    const std::string data = sluice::testing::test_data_dir();
    std::ifstream in(data + "/goldens/index.json");
    ASSERT_TRUE(in) << "no goldens index";
    const auto index = nlohmann::json::parse(in);
    int compared = 0;
    for (const auto& g : index["goldens"]) {
        const std::string name = g["name"].get<std::string>();
        SCOPED_TRACE(name);
        auto ours = load_model_config(data + "/goldens/" + name);
        ASSERT_TRUE(ours.has_value()) << ours.status().message();
        const std::string saved_path = data + "/configs/transformers/" + name + ".json";
        auto text = io::read_text_file(saved_path);
        ASSERT_TRUE(text.has_value()) << "every golden has its save_pretrained config: " << saved_path;
        auto saved = parse_model_config(*text, saved_path);
        ASSERT_TRUE(saved.has_value()) << saved.status().message();
        const ModelConfig& a = *ours;
        const ModelConfig& b = *saved;
        EXPECT_EQ(a.family, b.family);
        EXPECT_EQ(a.hidden, b.hidden);
        EXPECT_EQ(a.n_layers, b.n_layers);
        EXPECT_EQ(a.vocab, b.vocab);
        EXPECT_EQ(a.rms_eps, b.rms_eps);
        EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
        EXPECT_EQ(a.n_heads, b.n_heads);
        EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
        EXPECT_EQ(a.head_dim, b.head_dim);
        EXPECT_EQ(a.rotary_dim, b.rotary_dim);
        EXPECT_EQ(a.rope_theta, b.rope_theta);
        EXPECT_EQ(a.attn_output_gate, b.attn_output_gate);
        EXPECT_EQ(a.linear_k_heads, b.linear_k_heads);
        EXPECT_EQ(a.linear_v_heads, b.linear_v_heads);
        EXPECT_EQ(a.linear_k_dim, b.linear_k_dim);
        EXPECT_EQ(a.linear_v_dim, b.linear_v_dim);
        EXPECT_EQ(a.conv_kernel, b.conv_kernel);
        EXPECT_EQ(a.split_linear_projections, b.split_linear_projections);
        EXPECT_EQ(a.n_experts, b.n_experts);
        EXPECT_EQ(a.top_k, b.top_k);
        EXPECT_EQ(a.expert_ffn, b.expert_ffn);
        EXPECT_EQ(a.shared_expert_ffn, b.shared_expert_ffn);
        EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
        EXPECT_EQ(a.shared_expert_gated, b.shared_expert_gated);
        EXPECT_EQ(a.router_sigmoid, b.router_sigmoid);
        EXPECT_EQ(a.router_groups, b.router_groups);
        EXPECT_EQ(a.router_topk_groups, b.router_topk_groups);
        EXPECT_EQ(a.routed_scaling, b.routed_scaling);
        EXPECT_EQ(a.first_k_dense, b.first_k_dense);
        EXPECT_EQ(a.nextn_layers, b.nextn_layers);
        EXPECT_EQ(a.attn_qk_norm, b.attn_qk_norm);
        EXPECT_EQ(a.attn_qkv_bias, b.attn_qkv_bias);
        for (int64_t l = 0; l < a.n_layers && a.n_layers == b.n_layers; ++l) {
            EXPECT_EQ(a.is_moe_layer(l), b.is_moe_layer(l)) << "layer " << l;
            EXPECT_EQ(a.is_full_attention(l), b.is_full_attention(l)) << "layer " << l;
        }
        if (!a.is_moe_layer(0) || !b.is_moe_layer(0)) {
            EXPECT_EQ(a.dense_ffn, b.dense_ffn);
        }
        EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
        ++compared;
    }
    EXPECT_GE(compared, 9);  // every family and layout of the goldens
}

}  // namespace
}  // namespace sluice::model
