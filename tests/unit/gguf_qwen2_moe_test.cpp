// Qwen2-MoE (qwen2moe: Qwen1.5-MoE-A2.7B / Qwen2-57B-A14B) from GGUF files: the tiny checkpoint of
// tools/make_qwen2_moe_checkpoints.py (tests/data/gguf/hf/qwen2_moe_tiny_hf_bf16: q/k/v biases, no q/k
// norm, 8 experts top-2 with a softmax router not renormalised, a 96-wide shared expert scaled by
// σ(shared_expert_gate · x)) converted by llama.cpp's own converter (tools/make_gguf_weight_fixtures.py,
// conversion/qwen.py Qwen2MoeModel, F16 and Q8_0). llama.cpp's logits of the same files are checked in
// gguf_llama_test.cpp (GgufLlamaCpp). Here, as gguf_glm_test.cpp does for GLM:
//   - the config read from the qwen2moe keys is the one config.json gives (norm_topk_prob false included:
//     llama.cpp's qwen2moe graph calls build_moe_ffn with norm_w = false);
//   - the file gives the logits of the Hugging Face checkpoint it came from (F16 holds the bf16 weights
//     exactly, so only f32 rounding separates them; Q8_0 is held to the llama.cpp comparison's bounds);
//   - sluice's tensor map (names, dims, values from the HF tensors) is what the converter wrote, and the
//     file holds nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "gguf_compare.h"
#include "gguf_fixture_prompt.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/config_gguf.h"
#include "model/tensor_map_gguf.h"
#include "model/weights_gguf.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::engine_logits;
using testing::Logits;
using testing::median;
using testing::row_distances;

std::string weights_dir() {
    return testing::test_data_dir() + "/gguf/weights";
}

// The qwen2moe files of index.json, in name order.
std::vector<std::string> qwen2_moe_fixtures() {
    std::ifstream in(weights_dir() + "/index.json");
    const nlohmann::json index = nlohmann::json::parse(in, nullptr, false);
    std::vector<std::string> out;
    if (!index.is_object() || !index.contains("files")) return out;
    for (const auto& [file, e] : index["files"].items())
        if (e.value("architecture", "") == "qwen2moe") out.push_back(file);
    return out;
}

TEST(GgufQwen2MoeIndex, TheCheckpointInF16AndQ8_0) {
    EXPECT_EQ(qwen2_moe_fixtures(), (std::vector<std::string>{"qwen2_moe_tiny_hf_bf16.f16.gguf",
                                                              "qwen2_moe_tiny_hf_bf16.q8_0.gguf"}));
}

class GgufQwen2Moe : public ::testing::TestWithParam<std::string> {};

// The config from the metadata (qwen2moe.expert_count, expert_used_count, expert_feed_forward_length,
// expert_shared_feed_forward_length, feed_forward_length; the attention biases from the tensors) against
// config.json's, every field; then the values that say it is Qwen2-MoE.
TEST_P(GgufQwen2Moe, ConfigIsTheCheckpointsConfig) {
    const std::string file = GetParam();
    auto ckpt = format::GgufCheckpoint::open(weights_dir() + "/" + file);
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    auto got = model::load_gguf_model_config(**ckpt);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    auto want = model::load_model_config(testing::gguf_fixture_source(file));
    ASSERT_TRUE(want.has_value()) << want.status().message();
    testing::expect_same_config(*want, *got, file);
    EXPECT_EQ(got->family, model::Family::kQwen2Moe);
    EXPECT_STREQ(model::gguf_architecture_name(got->family), "qwen2moe");
    EXPECT_EQ(got->n_experts, 8);
    EXPECT_EQ(got->top_k, 2);
    EXPECT_EQ(got->expert_ffn, 32);
    EXPECT_EQ(got->shared_expert_ffn, 96);
    EXPECT_TRUE(got->shared_expert_gated);
    EXPECT_FALSE(got->norm_topk_prob);
    EXPECT_FALSE(got->router_sigmoid);
    EXPECT_FALSE(got->attn_qk_norm);
    EXPECT_TRUE(got->attn_qkv_bias);
    for (int64_t l = 0; l < got->n_layers; ++l) EXPECT_TRUE(got->is_moe_layer(l)) << l;
    auto weights = model::load_gguf_weights(*got, *ckpt);
    ASSERT_TRUE(weights.has_value()) << weights.status().message();
    for (const auto& lw : weights->layers) {
        EXPECT_EQ(lw.moe_w.experts.size(), 8u);
        EXPECT_TRUE(lw.moe_w.has_shared);
        EXPECT_EQ(lw.attn.q_bias.size(), 64u);
        EXPECT_TRUE(lw.attn.q_norm.empty());
    }
}

// The GGUF file against the Hugging Face checkpoint it was converted from, both loaded by sluice, prefill
// and decode. F16: the same weights (bf16 → f16 is exact at these magnitudes), so only the summation order
// of f32 products differs. Q8_0: 8-bit weights, held to the llama.cpp comparison's bounds (median row
// ≤ 3%, top-1 ≥ 90%).
TEST_P(GgufQwen2Moe, GivesTheLogitsOfTheCheckpointItCameFrom) {
    const std::string file = GetParam();
    const bool f16 = file.find(".f16.") != std::string::npos;
    const std::vector<int32_t> ids = testing::gguf_fixture_prompt(file);
    ASSERT_GE(ids.size(), 32u);
    const Logits hf = engine_logits(testing::gguf_fixture_source(file), ids);
    const Logits gguf = engine_logits(weights_dir() + "/" + file, ids);
    ASSERT_GT(hf.vocab, 0);  // both loaded (a missing fixture fails above, not as an empty comparison)
    ASSERT_GT(gguf.vocab, 0);
    ASSERT_EQ(hf.vocab, gguf.vocab);
    ASSERT_EQ(hf.prefill.size(), ids.size() * static_cast<size_t>(hf.vocab));
    ASSERT_EQ(gguf.prefill.size(), hf.prefill.size());
    ASSERT_EQ(gguf.decode.size(), hf.decode.size());
    for (const auto& [what, a, b] :
         {std::tuple<const char*, const std::vector<float>&, const std::vector<float>&>{
              "prefill", gguf.prefill, hf.prefill},
          {"decode", gguf.decode, hf.decode}}) {
        int64_t same = 0;
        const std::vector<double> rel = row_distances(a, b, hf.vocab, &same);
        const double worst = *std::max_element(rel.begin(), rel.end());
        std::printf(
            "[ qwen2moe gguf ] %s %s vs its HF checkpoint: median row max|Δ|/max|logit| %.2e, worst %.2e, "
            "top-1 %lld/%zu\n",
            file.c_str(), what, median(rel), worst, static_cast<long long>(same), rel.size());
        if (f16) {
            EXPECT_LE(worst, 1e-4) << what;
            EXPECT_EQ(same, static_cast<int64_t>(rel.size())) << what;
        } else {
            EXPECT_LE(median(rel), 0.03) << what;
            EXPECT_GE(same, static_cast<int64_t>(rel.size()) * 9 / 10) << what;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufQwen2Moe, ::testing::ValuesIn(qwen2_moe_fixtures()),
                         testing::GgufFixtureTestName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GgufQwen2Moe);

// sluice's tensor map (model/tensor_map_gguf.h) against what the converter wrote: every tensor it names is
// in the file with its dims and the values it derives from the Hugging Face checkpoint (bf16 → f16: equal
// but for f16's subnormals, below 6.1e-5, rounded to 2^-24) — ffn_norm for post_attention_layernorm, the
// stacked experts, the shared expert and its gate ffn_gate_inp_shexp, the q/k/v biases — and the file
// holds nothing else.
TEST(GgufQwen2MoeFile, TensorMapIsWhatTheConverterWrote) {
    const std::string name = "qwen2_moe_tiny_hf_bf16.f16.gguf";
    auto ckpt = format::GgufCheckpoint::open(weights_dir() + "/" + name);
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    auto config = model::load_gguf_model_config(**ckpt);
    ASSERT_TRUE(config.has_value()) << config.status().message();
    auto hf = format::SafetensorsFile::open(testing::gguf_fixture_source(name) + "/model.safetensors");
    ASSERT_TRUE(hf.has_value()) << hf.status().message();
    std::set<std::string> mapped;
    testing::expect_tensor_map_matches(**ckpt, *config, **hf, &mapped);
    if (::testing::Test::HasFatalFailure()) return;
    EXPECT_TRUE(mapped.contains("blk.0.ffn_gate_inp_shexp.weight"));
    EXPECT_TRUE(mapped.contains("blk.2.ffn_norm.weight"));
    for (const format::GgufTensor* t : (*ckpt)->tensors())
        EXPECT_TRUE(mapped.contains(t->name)) << t->name << " is read by no one";
}

}  // namespace
}  // namespace sluice
