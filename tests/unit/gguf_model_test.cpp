// A model's config and tensor map from GGUF (model/config_gguf.h, model/tensor_map_gguf.h), checked
// against what llama.cpp's own converter writes: tests/data/gguf/model/ holds, for every golden config
// (and the full-size ones in ../shared/model-configs), the metadata the converter's
// set_gguf_parameters / set_vocab wrote, and for the Hugging Face bf16 goldens every tensor it wrote
// (name, dims, SHA-256 of the values) — tools/make_gguf_model_fixtures.py, run on llama.cpp's source.
//
// - The config from each GGUF equals parse_model_config of the config.json it came from, field by field,
//   but for what a GGUF cannot say (listed in expected_from_json).
// - The map's GGUF names and dims are the converter's, tensor for tensor; its values, made from the
//   golden checkpoints by gguf_values_from_hf, are the converter's bit for bit (ssm_a within 2 ulp).
// - The map's HF names are exactly what weights.cpp binds: a checkpoint of just those tensors loads,
//   and one without any of them does not.
// - Malformed metadata: every error names the file and the key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/sha256.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "gguf_compare.h"
#include "io/mapped_file.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/config_gguf.h"
#include "model/tensor_map.h"
#include "model/tensor_map_gguf.h"
#include "model/weights.h"
#include "test_util.h"

namespace sluice {
namespace {

using format::GgufMetadata;
using format::GgufValue;
using format::GgufValueType;
using model::Family;
using model::ModelConfig;
using nlohmann::json;
using testing::expect_same_config;

std::string fixture_dir() {
    return testing::test_data_dir() + "/gguf/model";
}

json read_json(const std::string& path) {
    auto text = io::read_text_file(path);
    EXPECT_TRUE(text.has_value()) << path;
    return text.has_value() ? json::parse(*text) : json::object();
}

// One fixture of index.json.
struct Fixture {
    std::string name;
    json entry;
    std::string config_path;  // "" when ../shared is absent
    std::string gguf_path;
};

std::vector<Fixture> fixtures() {
    std::vector<Fixture> out;
    const json index = read_json(fixture_dir() + "/index.json");
    for (const auto& [name, entry] : index["fixtures"].items()) {
        Fixture f{name, entry, "", fixture_dir() + "/" + name + ".gguf"};
        const std::string ref = entry["config"].get<std::string>();
        const std::string shared = "../shared/";
        f.config_path = ref.rfind(shared, 0) == 0 ? testing::shared_dir() + "/" + ref.substr(shared.size())
                                                  : std::string(SLUICE_SOURCE_DIR) + "/" + ref;
        if (!testing::exists(f.config_path)) f.config_path.clear();
        out.push_back(std::move(f));
    }
    return out;
}

const Fixture* find_fixture(const std::vector<Fixture>& all, const std::string& name) {
    for (const Fixture& f : all)
        if (f.name == name) return &f;
    return nullptr;
}

// The fixture's metadata; where the script left the token list out (the full-size configs), `vocab`
// filler strings stand in for it, as the converter's list has config.json's vocab_size entries.
GgufMetadata fixture_metadata(const Fixture& f, int64_t vocab) {
    auto file = format::GgufFile::open(f.gguf_path);
    EXPECT_TRUE(file.has_value()) << file.status().message();
    if (!file.has_value()) return GgufMetadata(f.gguf_path);
    GgufMetadata md = (*file)->metadata();
    if (!f.entry["tokens"].get<bool>())
        md.add("tokenizer.ggml.tokens",
               GgufValue::string_array(std::vector<std::string>(static_cast<size_t>(vocab))));
    return md;
}

// What parse_model_config gives, less what a GGUF cannot say: the family's Hugging Face model_type, the
// MTP layers the file holds (the HF path counts them from the checkpoint's tensors), no MLX
// quantization block, and router renormalisation on (llama.cpp's qwen3moe graph renormalises whatever
// norm_topk_prob says; the converter writes no key for it).
ModelConfig expected_from_json(ModelConfig c, const Fixture& f) {
    c.model_type = model::family_name(c.family);
    c.mtp_layers = std::min<int64_t>(f.entry["mtp_layers"].get<int64_t>(), 1);
    c.quantization = {};
    if (c.has_experts()) c.norm_topk_prob = true;
    return c;
}

Expected<ModelConfig> fixture_config(const Fixture& f, int64_t vocab) {
    return model::parse_gguf_model_config(fixture_metadata(f, vocab), !f.entry["tied_embeddings"].get<bool>(),
                                          f.gguf_path);
}

// ---- the config --------------------------------------------------------------------------------

TEST(GgufModelConfig, EveryConfigAsTheConverterWritesIt) {
    const auto all = fixtures();
    ASSERT_GE(all.size(), 15u);
    int compared = 0;
    std::set<std::string> renormalised;  // configs whose norm_topk_prob false a GGUF cannot keep
    for (const Fixture& f : all) {
        if (f.config_path.empty()) continue;  // a full-size config without ../shared
        SCOPED_TRACE(f.name);
        auto text = io::read_text_file(f.config_path);
        ASSERT_TRUE(text.has_value());
        auto from_json = model::parse_model_config(*text, f.config_path);
        ASSERT_TRUE(from_json.has_value()) << from_json.status().message();
        auto got = fixture_config(f, from_json->vocab);
        ASSERT_TRUE(got.has_value()) << got.status().message();
        EXPECT_EQ(f.entry["architecture"].get<std::string>(), model::gguf_architecture_name(got->family));
        if (from_json->has_experts() && !from_json->norm_topk_prob) renormalised.insert(f.name);
        expect_same_config(expected_from_json(*from_json, f), *got, f.name);
        ++compared;
    }
    EXPECT_GE(compared, 15);
    // The one golden with norm_topk_prob false (transformers' Qwen3MoeConfig default): llama.cpp
    // renormalises it anyway, so its GGUF is a different model from its config.json.
    EXPECT_EQ(renormalised, std::set<std::string>{"qwen3_moe_hf_bf16"});
}

// What `sluice pack FILE.gguf` writes as config.json (model::model_config_json) reads back, through the
// ordinary config.json parser, as the config the GGUF gave — for every converter config, the full-size
// ones (YaRN, MTP, GLM's groups and dense layers, Qwen3.5's layer pattern) too. mtp_layers is a load's to
// count from the weights, not the config's.
TEST(GgufModelConfig, WrittenAsConfigJsonReadsBackTheSame) {
    int compared = 0;
    std::set<Family> families;
    auto round_trip = [&](const ModelConfig& gguf, const std::string& name) {
        SCOPED_TRACE(name);
        auto written = model::model_config_json(gguf);
        ASSERT_TRUE(written.has_value()) << written.status().message();
        auto back = model::parse_model_config(*written, name + "/config.json");
        ASSERT_TRUE(back.has_value()) << back.status().message() << "\n" << *written;
        ModelConfig want = gguf;
        want.mtp_layers = 0;
        expect_same_config(want, *back, name);
        EXPECT_EQ(back->nextn_layers, gguf.nextn_layers);
        EXPECT_EQ(back->first_k_dense, gguf.first_k_dense);
        EXPECT_EQ(back->router_sigmoid, gguf.router_sigmoid);
        EXPECT_EQ(back->router_groups, gguf.router_groups);
        EXPECT_EQ(back->router_topk_groups, gguf.router_topk_groups);
        EXPECT_EQ(back->routed_scaling, gguf.routed_scaling);
        EXPECT_EQ(back->shared_expert_gated, gguf.shared_expert_gated);
        families.insert(gguf.family);
        ++compared;
    };
    for (const Fixture& f : fixtures()) {
        int64_t vocab = 0;
        if (!f.entry["tokens"].get<bool>()) {
            if (f.config_path.empty()) continue;  // a full-size config without ../shared: no vocab size
            auto text = io::read_text_file(f.config_path);
            ASSERT_TRUE(text.has_value());
            auto from_json = model::parse_model_config(*text, f.config_path);
            ASSERT_TRUE(from_json.has_value()) << from_json.status().message();
            vocab = from_json->vocab;
        }
        auto gguf = fixture_config(f, vocab);
        ASSERT_TRUE(gguf.has_value()) << f.name << ": " << gguf.status().message();
        round_trip(*gguf, f.name);
    }
    EXPECT_GE(compared, 15);
    // The weight fixtures (make fixtures) add GLM-4.5 and Qwen2-MoE.
    const std::string weights = testing::test_data_dir() + "/gguf/weights";
    for (const char* name : {"glm4_moe_hf_bf16.q8_0.gguf", "glm4_moe_air_tiny_hf_bf16.f16.gguf",
                             "qwen2_moe_tiny_hf_bf16.q8_0.gguf", "mixtral_hf_bf16.q8_0.gguf"}) {
        if (!testing::exists(weights + "/" + name)) continue;
        auto ckpt = format::GgufCheckpoint::open(weights + "/" + name);
        ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
        auto gguf = model::load_gguf_model_config(**ckpt);
        ASSERT_TRUE(gguf.has_value()) << gguf.status().message();
        round_trip(*gguf, name);
    }
    EXPECT_GE(families.size(), 5u);
    // The family no GGUF of sluice's holds is refused, not half written.
    ModelConfig deepseek;
    deepseek.family = Family::kDeepseekV3;
    EXPECT_EQ(model::model_config_json(deepseek).status().code(), ErrorCode::kUnsupported);
}

// load_gguf_model_config reads an opened file: the same config, tied because a metadata-only file has no
// output.weight.
TEST(GgufModelConfig, TheCheckpointReaderGivesTheSameConfig) {
    const auto all = fixtures();
    const Fixture* f = find_fixture(all, "qwen3_next_mtp_hf_bf16");
    ASSERT_NE(f, nullptr);
    auto ckpt = format::GgufCheckpoint::open(f->gguf_path);
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    auto got = model::load_gguf_model_config(**ckpt);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    auto want = fixture_config(*f, 0);
    ASSERT_TRUE(want.has_value()) << want.status().message();
    EXPECT_FALSE(want->tie_word_embeddings);
    want->tie_word_embeddings = true;
    expect_same_config(*want, *got, f->name);
    EXPECT_EQ(got->mtp_layers, 1);
    EXPECT_EQ(got->n_layers, 4);
}

// Metadata edits for the error cases: every entry of `md` but `drop`, plus `add`.
GgufMetadata edited(const GgufMetadata& md, const std::string& drop,
                    std::optional<std::pair<std::string, GgufValue>> add = std::nullopt) {
    GgufMetadata out("m.gguf");
    for (const auto& [key, value] : md.entries())
        if (key != drop && (!add || key != add->first)) out.add(key, value);
    if (add) out.add(add->first, add->second);
    return out;
}
GgufValue u32(uint64_t v) {
    return GgufValue::scalar(GgufValueType::kU32, v);
}
GgufValue f32(float v) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    return GgufValue::scalar(GgufValueType::kF32, bits);
}
GgufValue str(const std::string& s) {
    return GgufValue::string(s);
}

struct ErrorCase {
    const char* fixture;
    const char* drop;  // "" for none
    std::optional<std::pair<std::string, GgufValue>> add;
    ErrorCode code;
    std::vector<std::string> message;  // substrings the message must hold (besides the file name)
};

TEST(GgufModelConfig, MalformedMetadataIsAnErrorNamingTheKey) {
    const auto all = fixtures();
    auto kv = [](const std::string& k, GgufValue v) {
        return std::make_optional(std::make_pair(k, std::move(v)));
    };
    const std::vector<ErrorCase> cases = {
        // Missing keys.
        {"qwen3_moe_hf_bf16",
         "qwen3moe.block_count",
         {},
         ErrorCode::kNotFound,
         {"'qwen3moe.block_count'", "not found"}},
        {"qwen3_moe_hf_bf16",
         "qwen3moe.embedding_length",
         {},
         ErrorCode::kNotFound,
         {"'qwen3moe.embedding_length'"}},
        {"qwen3_moe_hf_bf16",
         "qwen3moe.context_length",
         {},
         ErrorCode::kNotFound,
         {"'qwen3moe.context_length'"}},
        {"qwen3_moe_hf_bf16",
         "qwen3moe.attention.head_count",
         {},
         ErrorCode::kNotFound,
         {"'qwen3moe.attention.head_count'"}},
        {"qwen3_moe_hf_bf16",
         "qwen3moe.attention.layer_norm_rms_epsilon",
         {},
         ErrorCode::kNotFound,
         {"'qwen3moe.attention.layer_norm_rms_epsilon'"}},
        {"qwen3_moe_hf_bf16",
         "qwen3moe.expert_feed_forward_length",
         {},
         ErrorCode::kNotFound,
         {"'qwen3moe.expert_feed_forward_length'"}},
        {"qwen3_moe_hf_bf16", "qwen3moe.expert_count", {}, ErrorCode::kNotFound, {"'qwen3moe.expert_count'"}},
        {"qwen2_hf_bf16",
         "qwen2.feed_forward_length",
         {},
         ErrorCode::kNotFound,
         {"'qwen2.feed_forward_length'"}},
        {"qwen3_next_mtp_hf_bf16",
         "qwen3next.ssm.state_size",
         {},
         ErrorCode::kNotFound,
         {"'qwen3next.ssm.state_size'"}},
        {"qwen3_5_moe_hf_bf16",
         "qwen35moe.ssm.inner_size",
         {},
         ErrorCode::kNotFound,
         {"'qwen35moe.ssm.inner_size'"}},
        {"qwen3_hf_bf16", "general.architecture", {}, ErrorCode::kNotFound, {"'general.architecture'"}},
        {"qwen3_hf_bf16",
         "tokenizer.ggml.tokens",
         {},
         ErrorCode::kNotFound,
         {"'tokenizer.ggml.tokens'", "'qwen3.vocab_size'"}},
        // Wrong types.
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.block_count", str("3")),
         ErrorCode::kCorrupt,
         {"'qwen3moe.block_count'", "STRING"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.rope.freq_base", u32(10000)),
         ErrorCode::kCorrupt,
         {"'qwen3moe.rope.freq_base'", "U32"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("general.architecture", u32(1)),
         ErrorCode::kCorrupt,
         {"'general.architecture'"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.expert_used_count", GgufValue::scalar(GgufValueType::kI32, 0xffffffff)),
         ErrorCode::kCorrupt,
         {"'qwen3moe.expert_used_count'"}},
        {"qwen3_hf_bf16",
         "",
         kv("tokenizer.ggml.tokens", u32(256)),
         ErrorCode::kCorrupt,
         {"'tokenizer.ggml.tokens'"}},
        {"qwen3_next_hf_bf16",
         "",
         kv("qwen3next.attention.recurrent_layers", GgufValue::string_array({"a", "b", "c", "d"})),
         ErrorCode::kInvalidArgument,
         {"'qwen3next.attention.recurrent_layers'", "BOOL"}},
        // Architectures sluice does not run: a llama file without experts (a dense Llama / Mistral), ...
        {"qwen3_hf_bf16",
         "",
         kv("general.architecture", str("llama")),
         ErrorCode::kUnsupported,
         {"'general.architecture'", "'llama'", "'llama.expert_count'", "dense Llama"}},
        {"qwen3_hf_bf16",
         "",
         kv("general.architecture", str("qwen35")),
         ErrorCode::kUnsupported,
         {"'qwen35'"}},
        {"qwen3_hf_bf16",
         "",
         kv("general.architecture", str("deepseek2")),
         ErrorCode::kUnsupported,
         {"'deepseek2'", "glm4moe", "qwen2moe"}},
        // Inconsistent or out-of-range values.
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.attention.head_count", u32(5)),
         ErrorCode::kInvalidArgument,
         {"'qwen3moe.attention.head_count' (5)", "'qwen3moe.attention.head_count_kv' (2)"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.attention.head_count_kv", u32(0)),
         ErrorCode::kInvalidArgument,
         {"'qwen3moe.attention.head_count_kv' = 0"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.block_count", u32(5000)),
         ErrorCode::kInvalidArgument,
         {"'qwen3moe.block_count' = 5000 is outside 1..4096"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.block_count", GgufValue::scalar(GgufValueType::kU64, uint64_t{1} << 62)),
         ErrorCode::kInvalidArgument,
         {"'qwen3moe.block_count'", "too large"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.embedding_length", u32(0)),
         ErrorCode::kInvalidArgument,
         {"'qwen3moe.embedding_length'"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.expert_used_count", u32(9)),
         ErrorCode::kInvalidArgument,
         {"'qwen3moe.expert_used_count' (9)", "'qwen3moe.expert_count' (8)"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.attention.layer_norm_rms_epsilon", f32(0.0f)),
         ErrorCode::kInvalidArgument,
         {"'qwen3moe.attention.layer_norm_rms_epsilon'"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.rope.freq_base", f32(-1.0f)),
         ErrorCode::kInvalidArgument,
         {"'qwen3moe.rope.freq_base'"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.rope.dimension_count", u32(33)),
         ErrorCode::kInvalidArgument,
         {"'qwen3moe.rope.dimension_count' 33", "'qwen3moe.attention.key_length' 32"}},
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.attention.value_length", u32(64)),
         ErrorCode::kUnsupported,
         {"'qwen3moe.attention.value_length' (64)", "'qwen3moe.attention.key_length' (32)"}},
        {"qwen3_next_mtp_hf_bf16",
         "",
         kv("qwen3next.nextn_predict_layers", u32(5)),
         ErrorCode::kInvalidArgument,
         {"'qwen3next.nextn_predict_layers' (5)", "'qwen3next.block_count' (5)"}},
        {"qwen3_next_hf_bf16",
         "",
         kv("qwen3next.ssm.inner_size", u32(97)),
         ErrorCode::kInvalidArgument,
         {"'qwen3next.ssm.inner_size' (97)", "'qwen3next.ssm.time_step_rank' (4)"}},
        {"qwen3_next_hf_bf16",
         "",
         kv("qwen3next.ssm.time_step_rank", u32(3)),
         ErrorCode::kInvalidArgument,
         {"'qwen3next.ssm.time_step_rank'"}},
        {"qwen3_next_hf_bf16",
         "",
         kv("qwen3next.ssm.conv_kernel", u32(65)),
         ErrorCode::kInvalidArgument,
         {"'qwen3next.ssm.conv_kernel' must be in 1..64"}},
        {"qwen3_next_hf_bf16",
         "",
         kv("qwen3next.full_attention_interval", u32(0)),
         ErrorCode::kInvalidArgument,
         {"'qwen3next.full_attention_interval'"}},
        {"qwen3_hf_bf16",
         "",
         kv("qwen3.vocab_size", u32(300)),
         ErrorCode::kInvalidArgument,
         {"'qwen3.vocab_size' (300)", "256 entries of key 'tokenizer.ggml.tokens'"}},
        {"qwen3_hf_bf16",
         "tokenizer.ggml.tokens",
         kv("qwen3.vocab_size", u32(uint64_t{1} << 25)),
         ErrorCode::kInvalidArgument,
         {"'qwen3.vocab_size' 33554432 is outside 1..16777216"}},
        {"qwen3_hf_bf16",
         "",
         kv("tokenizer.ggml.eos_token_id", u32(256)),
         ErrorCode::kInvalidArgument,
         {"'tokenizer.ggml.eos_token_id' 256 is outside the vocabulary [0, 256)"}},
        {"qwen3_hf_bf16",
         "",
         kv("tokenizer.ggml.padding_token_id", u32(1000)),
         ErrorCode::kInvalidArgument,
         {"'tokenizer.ggml.padding_token_id'"}},
        // RoPE scaling sluice does not run, and YaRN values that cannot be.
        {"qwen3_moe_hf_bf16",
         "",
         kv("qwen3moe.rope.scaling.type", str("longrope")),
         ErrorCode::kUnsupported,
         {"'qwen3moe.rope.scaling.type' is 'longrope'"}},
        {"qwen3_moe_yarn_hf_bf16",
         "",
         kv("qwen3moe.rope.scaling.type", str("linear")),
         ErrorCode::kUnsupported,
         {"'qwen3moe.rope.scaling.type' is 'linear' with a factor of 4"}},
        {"qwen3_moe_yarn_hf_bf16",
         "",
         kv("qwen3moe.rope.scaling.factor", f32(0.5f)),
         ErrorCode::kInvalidArgument,
         {"'qwen3moe.rope.scaling.factor' must be >= 1"}},
        {"qwen3_moe_yarn_hf_bf16",
         "qwen3moe.rope.scaling.factor",
         {},
         ErrorCode::kNotFound,
         {"'qwen3moe.rope.scaling.factor'"}},
        {"qwen3_moe_yarn_hf_bf16",
         "",
         kv("qwen3moe.rope.scaling.yarn_beta_fast", f32(0.0f)),
         ErrorCode::kInvalidArgument,
         {"'qwen3moe.rope.scaling.yarn_beta_fast'"}},
    };
    for (const ErrorCase& c : cases) {
        const Fixture* f = find_fixture(all, c.fixture);
        ASSERT_NE(f, nullptr) << c.fixture;
        const GgufMetadata md = edited(fixture_metadata(*f, 0), c.drop, c.add);
        auto got = model::parse_gguf_model_config(md, true, "m.gguf");
        const std::string what = std::string(c.fixture) + " " +
                                 (*c.drop ? "without " + std::string(c.drop) : "with " + c.add->first);
        ASSERT_FALSE(got.has_value()) << what;
        EXPECT_EQ(error_code_name(got.status().code()), error_code_name(c.code))
            << what << ": " << got.status().message();
        EXPECT_NE(got.status().message().find("m.gguf"), std::string::npos) << got.status().message();
        for (const std::string& s : c.message)
            EXPECT_NE(got.status().message().find(s), std::string::npos)
                << what << ": " << got.status().message();
    }
}

TEST(GgufModelConfig, OptionalKeysTakeLlamaCppsDefaults) {
    const auto all = fixtures();
    const Fixture* f = find_fixture(all, "qwen3_next_hf_bf16");
    ASSERT_NE(f, nullptr);
    const GgufMetadata md = fixture_metadata(*f, 0);
    auto base = model::parse_gguf_model_config(md, true, "m.gguf");
    ASSERT_TRUE(base.has_value()) << base.status().message();
    // head_count_kv defaults to head_count; key_length to embedding_length / head_count; the rotary
    // dims to the head dim; freq_base to 10000; full_attention_interval to 4.
    GgufMetadata m = edited(md, "qwen3next.attention.head_count_kv");
    m = edited(m, "qwen3next.attention.key_length");
    m = edited(m, "qwen3next.attention.value_length");
    m = edited(m, "qwen3next.rope.dimension_count");
    m = edited(m, "qwen3next.rope.freq_base");
    m = edited(m, "qwen3next.full_attention_interval");
    auto got = model::parse_gguf_model_config(m, true, "m.gguf");
    ASSERT_TRUE(got.has_value()) << got.status().message();
    EXPECT_EQ(got->n_kv_heads, got->n_heads);
    EXPECT_EQ(got->head_dim, 64 / 4);
    EXPECT_EQ(got->rotary_dim, got->head_dim);
    EXPECT_EQ(got->rope_theta, 10000.0f);
    EXPECT_TRUE(got->layer_types == base->layer_types);  // the golden's interval is 4
    // attention.recurrent_layers, when present, decides which layers are linear.
    const std::vector<bool> flags = {false, true, false, true};
    std::string raw;
    for (bool b : flags) raw.push_back(static_cast<char>(b));
    m = edited(md, "",
               std::make_pair(std::string("qwen3next.attention.recurrent_layers"),
                              GgufValue::scalar_array(GgufValueType::kBool, 4, raw)));
    got = model::parse_gguf_model_config(m, true, "m.gguf");
    ASSERT_TRUE(got.has_value()) << got.status().message();
    for (int64_t l = 0; l < 4; ++l) EXPECT_EQ(!got->is_full_attention(l), flags[static_cast<size_t>(l)]) << l;
    // {arch}.vocab_size stands in for a missing token list; eos/bos are optional.
    m = edited(edited(md, "tokenizer.ggml.tokens"), "",
               std::make_pair(std::string("qwen3next.vocab_size"), u32(300)));
    m = edited(edited(m, "tokenizer.ggml.eos_token_id"), "tokenizer.ggml.bos_token_id");
    got = model::parse_gguf_model_config(m, false, "m.gguf");  // no output.weight: tied
    ASSERT_TRUE(got.has_value()) << got.status().message();
    EXPECT_EQ(got->vocab, 300);
    EXPECT_TRUE(got->eos_token_ids.empty());
    EXPECT_FALSE(got->bos_token_id.has_value());
    EXPECT_TRUE(got->tie_word_embeddings);
    // rope.scaling.type "linear" without a factor, or "none", is no scaling (llama.cpp's reading).
    for (const char* type : {"linear", "none"}) {
        got = model::parse_gguf_model_config(
            edited(md, "", std::make_pair(std::string("qwen3next.rope.scaling.type"), str(type))), true,
            "m.gguf");
        ASSERT_TRUE(got.has_value()) << got.status().message();
        EXPECT_FALSE(got->yarn.enabled);
    }
}

// ---- the tensor map ----------------------------------------------------------------------------

// The HF tensor `name` of a golden checkpoint as f32, row-major: read directly, or (for the per-expert
// names the map uses) the expert's slice of whatever layout the checkpoint has, via the tensor map.
std::optional<std::vector<float>> hf_values(const ModelConfig& cfg, const format::Checkpoint& ck,
                                            const model::TensorNames& names, const std::string& name) {
    auto to_f32 = [](const format::TensorInfo& t, uint64_t offset, int64_t n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
            if (t.dtype == format::DType::kF32) {
                std::memcpy(&v[i], t.data + offset + 4 * i, 4);
            } else {
                uint16_t h;
                std::memcpy(&h, t.data + offset + 2 * i, 2);
                v[i] = t.dtype == format::DType::kBF16 ? kernels::bf16_to_f32(h) : kernels::f16_to_f32(h);
            }
        }
        return v;
    };
    if (const format::TensorInfo* t = ck.find(name)) return to_f32(*t, 0, t->numel());
    // "...layers.L.mlp.experts.E.{gate,up,down}_proj.weight" (parsed by hand: <regex> trips GCC 12's
    // maybe-uninitialized under the sanitizers).
    const size_t lp = name.find("layers."), ep = name.find(".mlp.experts.");
    if (lp == std::string::npos || ep == std::string::npos || !name.ends_with("_proj.weight"))
        return std::nullopt;
    const std::string layer = name.substr(lp + 7, ep - lp - 7);
    const std::string rest = name.substr(ep + 13);  // "E.gate_proj.weight"
    const size_t dot = rest.find('.');
    if (layer.empty() || dot == std::string::npos || dot == 0 ||
        layer.find_first_not_of("0123456789") != std::string::npos ||
        rest.substr(0, dot).find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
    const std::string kind = rest.substr(dot + 1, rest.size() - dot - 1 - std::string("_proj.weight").size());
    if (kind != "gate" && kind != "up" && kind != "down") return std::nullopt;
    const int64_t l = std::stoll(layer), e = std::stoll(rest.substr(0, dot));
    auto experts = model::source_experts(cfg, ck, names, l);
    if (!experts.has_value()) return std::nullopt;
    const int proj = kind == "gate" ? 0 : kind == "up" ? 1 : 2;
    const model::SourceMatrix& s = (*experts)[static_cast<size_t>(e)][static_cast<size_t>(proj)];
    return to_f32(*s.w, s.offset, s.rows * s.cols);
}

std::string sha256_of(const std::vector<float>& v) {
    Sha256 h;
    h.update(v.data(), v.size() * sizeof(float));  // little-endian host, as the GGUF stores f32
    return h.hex_digest();
}

TEST(GgufTensorMap, NamesDimsAndValuesAreTheConvertersForEveryGolden) {
    int checked = 0;
    for (const Fixture& f : fixtures()) {
        if (f.entry["tensors"].is_null()) continue;
        SCOPED_TRACE(f.name);
        auto cfg = fixture_config(f, 0);
        ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
        const json manifest = read_json(fixture_dir() + "/" + f.entry["tensors"].get<std::string>());
        std::map<std::string, json> written;
        for (const json& t : manifest["tensors"]) written[t["name"].get<std::string>()] = t;

        const auto map = model::gguf_tensor_map(*cfg);
        std::set<std::string> mapped;
        for (const auto& s : map) mapped.insert(s.gguf);
        for (const auto& [name, t] : written)
            EXPECT_TRUE(mapped.contains(name)) << "the converter writes " << name;
        EXPECT_EQ(mapped.size(), map.size()) << "a GGUF name mapped twice";

        const std::string golden = testing::test_data_dir() + "/goldens/" + f.name;
        auto ck = format::Checkpoint::open(golden);
        ASSERT_TRUE(ck.has_value()) << ck.status().message();
        auto names = model::find_tensor_names(**ck, *cfg);
        ASSERT_TRUE(names.has_value()) << names.status().message();
        for (const auto& s : map) {
            auto it = written.find(s.gguf);
            if (it == written.end()) {
                ADD_FAILURE() << "the map names " << s.gguf << ", which the converter does not write";
                continue;
            }
            EXPECT_EQ(it->second["dims"].get<std::vector<int64_t>>(), s.dims) << s.gguf;
            std::vector<std::vector<float>> hf;
            for (const std::string& h : s.hf) {
                auto v = hf_values(*cfg, **ck, *names, h);
                ASSERT_TRUE(v.has_value()) << s.gguf << ": no HF tensor " << h << " in " << golden;
                hf.push_back(std::move(*v));
            }
            auto values = model::gguf_values_from_hf(s, hf);
            ASSERT_TRUE(values.has_value()) << values.status().message();
            if (it->second.contains("values")) {  // ssm_a: −exp, numpy's against std::exp
                const auto want = it->second["values"].get<std::vector<float>>();
                ASSERT_EQ(want.size(), values->size()) << s.gguf;
                for (size_t i = 0; i < want.size(); ++i)
                    EXPECT_NEAR((*values)[i], want[i], 2 * std::abs(want[i]) * 1.2e-7f)
                        << s.gguf << "[" << i << "]";
            } else {
                EXPECT_EQ(sha256_of(*values), it->second["sha256"].get<std::string>()) << s.gguf;
            }
        }
        ++checked;
    }
    EXPECT_EQ(checked, 8);  // every Hugging Face bf16 golden: all five architectures, MTP, YaRN
}

// A safetensors checkpoint of zeros (BF16) holding exactly `tensors` (name → shape), in `dir`.
void write_zero_checkpoint(const std::string& dir,
                           const std::map<std::string, std::vector<int64_t>>& tensors) {
    int64_t largest = 0;
    for (const auto& [name, shape] : tensors) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        largest = std::max(largest, n);
    }
    const std::string zeros(static_cast<size_t>(2 * largest), '\0');
    std::vector<format::TensorToWrite> out;
    for (const auto& [name, shape] : tensors) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        out.push_back({name, format::DType::kBF16, shape,
                       std::string_view(zeros).substr(0, static_cast<size_t>(2 * n))});
    }
    ASSERT_TRUE(format::write_safetensors(dir + "/model.safetensors", out).is_ok());
}

Status bind_checkpoint(const ModelConfig& cfg, const std::string& dir) {
    auto ck = format::Checkpoint::open(dir);
    if (!ck.has_value()) return ck.status();
    auto w = model::load_weights(cfg, *ck, true);
    return w.has_value() ? Status::ok() : w.status();
}

// The map's HF side is what weights.cpp binds, no more, no less: a checkpoint of exactly the map's HF
// tensors (with its shapes) binds, and dropping any one of them — one per map entry, over the global
// tensors and every kind of block (full attention, DeltaNet, MTP) — fails naming it.
TEST(GgufTensorMap, HfNamesAreExactlyWhatWeightsBinds) {
    const auto all = fixtures();
    for (const char* name : {"qwen2_hf_bf16", "qwen3_mlx_q4", "qwen3_moe_hf_bf16", "qwen3_next_mtp_hf_bf16",
                             "qwen3_5_moe_mtp_hf_bf16"}) {
        SCOPED_TRACE(name);
        const Fixture* f = find_fixture(all, name);
        ASSERT_NE(f, nullptr);
        auto cfg = fixture_config(*f, 0);
        ASSERT_TRUE(cfg.has_value()) << cfg.status().message();
        const auto map = model::gguf_tensor_map(*cfg);
        std::map<std::string, std::vector<int64_t>> tensors;
        for (const auto& s : map)
            for (const std::string& h : s.hf) {
                auto [it, added] = tensors.emplace(h, s.hf_shape);
                if (!added) {
                    EXPECT_EQ(it->second, s.hf_shape) << h;  // Next's qkvz feeds two GGUF tensors
                }
            }
        testing::TempDir dir;
        write_zero_checkpoint(dir.path(), tensors);
        const Status all_there = bind_checkpoint(*cfg, dir.path());
        ASSERT_TRUE(all_there.is_ok()) << all_there.message();

        // One block of each kind, and the global tensors.
        std::set<int64_t> blocks;
        int64_t first_full = -1, first_linear = -1;
        for (int64_t l = 0; l < cfg->n_layers; ++l) {
            if (cfg->is_full_attention(l) && first_full < 0) first_full = l;
            if (!cfg->is_full_attention(l) && first_linear < 0) first_linear = l;
        }
        for (int64_t l : {first_full, first_linear, cfg->mtp_layers > 0 ? cfg->n_layers : -1})
            if (l >= 0) blocks.insert(l);
        int dropped = 0;
        for (const auto& s : map) {
            const bool global = s.gguf.rfind("blk.", 0) != 0;
            const int64_t block = global ? -1 : std::stoll(s.gguf.substr(4));
            if (!global && !blocks.contains(block)) continue;
            auto fewer = tensors;
            fewer.erase(s.hf.front());
            testing::TempDir d;
            write_zero_checkpoint(d.path(), fewer);
            const Status st = bind_checkpoint(*cfg, d.path());
            EXPECT_FALSE(st.is_ok()) << "binds without " << s.hf.front() << " (" << s.gguf << ")";
            EXPECT_NE(st.message().find(s.hf.front()), std::string::npos) << st.message();
            ++dropped;
        }
        EXPECT_GT(dropped, 10);
    }
}

// The value steps on small hand-made tensors, where the expected order can be read off.
TEST(GgufTensorMap, ValueStepsDoWhatTheConverterDoes) {
    using Kind = model::GgufValueStep::Kind;
    // Qwen3-Next in_proj_qkvz, nk 2, dk 1, (nv/nk)·dv 2, one column: per key head [q k v v z z].
    model::GgufTensorSource qkvz{"attn_qkv", {1, 8}, {"in_proj_qkvz"}, {12, 1}, {}};
    model::GgufValueStep s{Kind::kQkvzToQkv};
    s.nk = 2;
    s.dk = 1;
    s.dv_group = 2;
    qkvz.steps = {s};
    const std::vector<float> rows = {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15};
    auto qkv = model::gguf_values_from_hf(qkvz, {rows});
    ASSERT_TRUE(qkv.has_value()) << qkv.status().message();
    EXPECT_EQ(*qkv, (std::vector<float>{0, 10, 1, 11, 2, 3, 12, 13}));
    qkvz.steps[0].kind = Kind::kQkvzToGate;
    qkvz.dims = {1, 4};
    auto z = model::gguf_values_from_hf(qkvz, {rows});
    ASSERT_TRUE(z.has_value());
    EXPECT_EQ(*z, (std::vector<float>{4, 5, 14, 15}));
    // Value heads grouped → tiled: nk 2, r 3, head_dim 1: heads g·3 + i → i·2 + g.
    model::GgufTensorSource a{"ssm_a", {6}, {"A_log"}, {6}, {}};
    model::GgufValueStep t{Kind::kVHeadsTiled};
    t.nk = 2;
    t.r = 3;
    t.head_dim = 1;
    a.steps = {t};
    auto tiled = model::gguf_values_from_hf(a, {{0, 1, 2, 3, 4, 5}});
    ASSERT_TRUE(tiled.has_value());
    EXPECT_EQ(*tiled, (std::vector<float>{0, 3, 1, 4, 2, 5}));
    // Along columns (out_proj), 2 rows, nk 2, r 2, head_dim 1.
    model::GgufTensorSource o{"ssm_out", {4, 2}, {"out_proj"}, {2, 4}, {}};
    t.axis = 1;
    t.r = 2;
    o.steps = {t};
    auto cols = model::gguf_values_from_hf(o, {{0, 1, 2, 3, 10, 11, 12, 13}});
    ASSERT_TRUE(cols.has_value());
    EXPECT_EQ(*cols, (std::vector<float>{0, 2, 1, 3, 10, 12, 11, 13}));
    // A size that does not match is an error, not a wrong tensor.
    EXPECT_FALSE(model::gguf_values_from_hf(o, {{0, 1, 2}}).has_value());
    EXPECT_FALSE(model::gguf_values_from_hf(o, {}).has_value());
}

}  // namespace
}  // namespace sluice
