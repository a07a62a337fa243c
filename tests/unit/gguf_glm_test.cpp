// GLM-4.5 MoE (glm4moe) from GGUF files: the tiny checkpoints of tools/make_glm4_moe_checkpoints.py
// (tests/data/gguf/hf: a GLM-4.5-style one with q/k norms, 4 router groups and routed_scaling_factor 2.5,
// and a GLM-4.5-Air-style one) converted by llama.cpp's own converter (tools/make_gguf_weight_fixtures.py,
// F16 and Q8_0, tests/data/gguf/weights/glm4_moe_*). llama.cpp's logits of the same files are checked in
// gguf_llama_test.cpp (GgufLlamaCpp). Here, with no transformers golden for GLM yet:
//   - the file gives the logits of the Hugging Face checkpoint it came from (F16 holds the bf16 weights
//     exactly, so only f32 rounding separates them; Q8_0 is held to the llama.cpp comparison's bounds);
//   - routed experts streamed out of the file through a one-slot cache give the resident model's logits,
//     and every streamed slice is its part of the file (the dense first layer and the MTP block have none);
//   - sluice's tensor map (names, dims, values from the HF tensors) is what the converter wrote;
//   - the MTP block the converter writes (blk.3, nextn_predict_layers 1) is left alone, while a block past it
//     is refused; GLM's end-of-turn ids (eot, eom) stop a generation as eos does;
//   - malformed glm4moe metadata fails with a message naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "experts/expert_store.h"
#include "format/gguf.h"
#include "format/gguf_manifest.h"
#include "format/safetensors.h"
#include "gguf_compare.h"
#include "gguf_fixture_prompt.h"
#include "kernels/kernels.h"
#include "model/config_gguf.h"
#include "model/model.h"
#include "model/tensor_map_gguf.h"
#include "model/weights_gguf.h"
#include "model/workspace.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "test_util.h"

namespace sluice {
namespace {

std::string weights_dir() {
    return testing::test_data_dir() + "/gguf/weights";
}

nlohmann::json index_json() {
    std::ifstream in(weights_dir() + "/index.json");
    return nlohmann::json::parse(in, nullptr, false);
}

// The GLM files of index.json: file name → its entry.
std::vector<std::string> glm_fixtures() {
    const nlohmann::json index = index_json();
    std::vector<std::string> out;
    if (!index.is_object() || !index.contains("files")) return out;
    for (const auto& [file, e] : index["files"].items())
        if (e.value("architecture", "") == "glm4moe") out.push_back(file);
    return out;
}

std::string source_dir(const std::string& file) {
    return testing::gguf_fixture_source(file);
}

std::vector<int32_t> prompt_ids(const std::string& file) {
    return testing::gguf_fixture_prompt(file);
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Where a GGUF key's value starts: past its length-prefixed name and its u32 type (which must be `type`).
size_t key_value_at(const std::string& bytes, const std::string& key, uint32_t type) {
    std::string prefixed(8, '\0');
    const uint64_t len = key.size();
    std::memcpy(prefixed.data(), &len, 8);
    prefixed += key;
    const size_t at = bytes.find(prefixed);
    EXPECT_NE(at, std::string::npos) << key;
    if (at == std::string::npos) return 0;
    uint32_t t = 0;
    std::memcpy(&t, bytes.data() + at + prefixed.size(), 4);
    EXPECT_EQ(t, type) << key;
    return at + prefixed.size() + 4;
}

constexpr uint32_t kGgufUint32 = 4;

std::string load_error(const std::string& bytes) {
    testing::TempDir dir;
    const std::string path = dir.file("bad.gguf");
    std::ofstream(path, std::ios::binary) << bytes;
    auto m = model::Model::load(path);
    EXPECT_FALSE(m.has_value());
    return m.has_value() ? std::string() : m.status().message();
}

using testing::engine_logits;
using testing::Logits;
using testing::median;
using testing::row_distances;

class GgufGlm : public ::testing::TestWithParam<std::string> {};

// The two tiny checkpoints and the transformers golden glm4_moe_hf_bf16 (whose F16 file GgufGolden
// also checks against transformers), each in F16 and Q8_0.
TEST(GgufGlmIndex, EveryCheckpointInF16AndQ8_0) {
    EXPECT_EQ(glm_fixtures(), (std::vector<std::string>{
                                  "glm4_moe_air_tiny_hf_bf16.f16.gguf", "glm4_moe_air_tiny_hf_bf16.q8_0.gguf",
                                  "glm4_moe_hf_bf16.f16.gguf", "glm4_moe_hf_bf16.q8_0.gguf",
                                  "glm4_moe_tiny_hf_bf16.f16.gguf", "glm4_moe_tiny_hf_bf16.q8_0.gguf"}));
}

// The GGUF file against the Hugging Face checkpoint it was converted from, both loaded by sluice: the
// config from the glm4moe keys, the tensors bound by name (exp_probs_b.bias, post_attention_norm, the
// shared expert without a gate). F16: the same weights (bf16 → f16 is exact at these magnitudes), so only
// the summation order of f32 products differs (measured: worst row 4.9e-7 of its largest logit, prefill and
// decode). Q8_0: 8-bit weights, held to the llama.cpp comparison's bounds (median row ≤ 3%, top-1 ≥ 90%;
// measured 1.3% / 1.4%, top-1 64/64 and 63/64).
TEST_P(GgufGlm, GivesTheLogitsOfTheCheckpointItCameFrom) {
    const std::string file = GetParam();
    const bool f16 = file.find(".f16.") != std::string::npos;
    const std::vector<int32_t> ids = prompt_ids(file);
    ASSERT_GE(ids.size(), 32u);
    const Logits hf = engine_logits(source_dir(file), ids);
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
            "[ glm gguf ] %s %s vs its HF checkpoint: median row max|Δ|/max|logit| %.2e, worst %.2e, "
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

// Routed experts streamed out of the file (their slices of blk.N.ffn_*_exps) through a one-slot cache: the
// resident model's logits (experts bound in place, model::Model::load), to f32 rounding.
TEST_P(GgufGlm, StreamedExpertsGiveTheResidentLogits) {
    const std::string path = weights_dir() + "/" + GetParam();
    const std::vector<int32_t> ids = prompt_ids(GetParam());
    auto resident = model::Model::load(path);
    ASSERT_TRUE(resident.has_value()) << resident.status().message();
    (*resident)->use_activations(kernels::Activations::kF32);
    const int64_t V = (*resident)->config().vocab, T = static_cast<int64_t>(ids.size());
    model::ModelState state = (*resident)->new_state(T + 1);
    model::Workspace ws;
    std::vector<float> want(static_cast<size_t>(T * V));
    ASSERT_TRUE((*resident)->forward(state, ids, want.data(), true, ws, nullptr).is_ok());
    const Logits streamed = engine_logits(path, ids, /*expert_cache_bytes=*/1);
    ASSERT_EQ(streamed.prefill.size(), want.size());
    int64_t same = 0;
    const std::vector<double> rel = row_distances(streamed.prefill, want, V, &same);
    EXPECT_LE(*std::max_element(rel.begin(), rel.end()), 1e-5);
    EXPECT_EQ(same, T);
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufGlm, ::testing::ValuesIn(glm_fixtures()), testing::GgufFixtureTestName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GgufGlm);

// The converter writes GLM's MTP layer (model.layers.3 of a 3-layer model) as block 3 with
// nextn_predict_layers 1; sluice leaves it alone, as it does the Hugging Face checkpoint's.
TEST(GgufGlmFile, TheMtpBlockIsLeftAlone) {
    const std::string path = weights_dir() + "/glm4_moe_tiny_hf_bf16.q8_0.gguf";
    auto ckpt = format::GgufCheckpoint::open(path);
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    ASSERT_NE((*ckpt)->find("blk.3.nextn.eh_proj.weight"), nullptr);
    ASSERT_NE((*ckpt)->find("blk.3.ffn_gate_exps.weight"), nullptr);
    auto config = model::load_gguf_model_config(**ckpt);
    ASSERT_TRUE(config.has_value()) << config.status().message();
    EXPECT_EQ(config->family, model::Family::kGlm4Moe);
    EXPECT_EQ(config->n_layers, 3);
    EXPECT_EQ(config->nextn_layers, 1);
    EXPECT_EQ(config->mtp_layers, 0);
    EXPECT_EQ(config->first_k_dense, 1);
    EXPECT_EQ(config->n_experts, 16);
    EXPECT_EQ(config->top_k, 4);
    EXPECT_EQ(config->router_groups, 4);
    EXPECT_EQ(config->router_topk_groups, 2);
    EXPECT_FLOAT_EQ(config->routed_scaling, 2.5f);
    EXPECT_TRUE(config->router_sigmoid);
    EXPECT_TRUE(config->norm_topk_prob);
    EXPECT_EQ(config->shared_expert_ffn, 32);
    EXPECT_FALSE(config->shared_expert_gated);
    EXPECT_TRUE(config->attn_qk_norm);
    EXPECT_TRUE(config->attn_qkv_bias);
    EXPECT_EQ(config->rotary_dim, 16);
    // The stop ids: eos <|endoftext|> and GLM's end-of-turn tokens, eot <|user|> and eom <|observation|>.
    EXPECT_EQ(config->eos_token_ids, (std::vector<int32_t>{0, 2, 3}));
    auto weights = model::load_gguf_weights(*config, *ckpt);
    ASSERT_TRUE(weights.has_value()) << weights.status().message();
    EXPECT_EQ(weights->layers.size(), 3u);
    EXPECT_TRUE(weights->layers[0].moe_w.experts.empty());  // dense layer 0
    EXPECT_EQ(weights->layers[1].moe_w.experts.size(), 16u);
    EXPECT_EQ(weights->layers[1].moe_w.router_bias.size(), 16u);

    auto air = model::Model::load(weights_dir() + "/glm4_moe_air_tiny_hf_bf16.f16.gguf");
    ASSERT_TRUE(air.has_value()) << air.status().message();
    EXPECT_FALSE((*air)->config().attn_qk_norm);
    EXPECT_EQ((*air)->config().router_groups, 1);
    EXPECT_FLOAT_EQ((*air)->config().routed_scaling, 1.0f);
}

// sluice's tensor map (model/tensor_map_gguf.h) against what the converter wrote: every tensor it names is
// in the file with its dims and the values it derives from the Hugging Face checkpoint (bf16 → f16: equal
// but for f16's subnormals, below 6.1e-5, rounded to 2^-24), and the file holds nothing else but the MTP
// block (blk.3: its nextn.* tensors and a full MoE layer).
TEST(GgufGlmFile, TensorMapIsWhatTheConverterWrote) {
    for (const char* name : {"glm4_moe_tiny_hf_bf16.f16.gguf", "glm4_moe_air_tiny_hf_bf16.f16.gguf"}) {
        SCOPED_TRACE(name);
        auto ckpt = format::GgufCheckpoint::open(weights_dir() + "/" + name);
        ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
        auto config = model::load_gguf_model_config(**ckpt);
        ASSERT_TRUE(config.has_value()) << config.status().message();
        auto hf = format::SafetensorsFile::open(source_dir(name) + "/model.safetensors");
        ASSERT_TRUE(hf.has_value()) << hf.status().message();
        std::set<std::string> mapped;
        testing::expect_tensor_map_matches(**ckpt, *config, **hf, &mapped);
        if (::testing::Test::HasFatalFailure()) return;
        for (const format::GgufTensor* t : (*ckpt)->tensors()) {
            if (mapped.contains(t->name)) continue;
            EXPECT_EQ(t->name.rfind("blk.3.", 0), 0u) << t->name << " is read by no one";
        }
    }
}

// A block past the MTP blocks is still a file that describes another model than its metadata.
TEST(GgufGlmFile, ABlockPastTheMtpBlocksIsRefused) {
    std::string bytes = read_file(weights_dir() + "/glm4_moe_tiny_hf_bf16.q8_0.gguf");
    ASSERT_FALSE(bytes.empty());
    const std::string from = "blk.3.attn_norm.weight", to = "blk.5.attn_norm.weight";
    const size_t at = bytes.find(from);
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at, from.size(), to);
    const std::string e = load_error(bytes);
    EXPECT_NE(e.find("blk.5.attn_norm.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("3 decoder blocks"), std::string::npos) << e;
}

// glm4moe keys a model cannot run: each error names the key and the value.
TEST(GgufGlmFile, MalformedRouterMetadataIsNamed) {
    const std::string good = read_file(weights_dir() + "/glm4_moe_tiny_hf_bf16.q8_0.gguf");
    ASSERT_FALSE(good.empty());
    auto with = [&](const std::string& key, uint32_t value) {
        std::string bytes = good;
        const size_t at = key_value_at(bytes, key, kGgufUint32);
        std::memcpy(bytes.data() + at, &value, 4);
        return load_error(bytes);
    };
    {  // softmax (1): llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX, not GLM's router
        const std::string e = with("glm4moe.expert_gating_func", 1);
        EXPECT_NE(e.find("glm4moe.expert_gating_func"), std::string::npos) << e;
        EXPECT_NE(e.find("= 1"), std::string::npos) << e;
    }
    {  // 3 groups of 16 experts
        const std::string e = with("glm4moe.expert_group_count", 3);
        EXPECT_NE(e.find("glm4moe.expert_group_count"), std::string::npos) << e;
        EXPECT_NE(e.find("must divide"), std::string::npos) << e;
    }
    {  // more groups kept than there are
        const std::string e = with("glm4moe.expert_group_used_count", 5);
        EXPECT_NE(e.find("glm4moe.expert_group_used_count"), std::string::npos) << e;
    }
    {  // more dense leading blocks than decoder blocks
        const std::string e = with("glm4moe.leading_dense_block_count", 9);
        EXPECT_NE(e.find("glm4moe.leading_dense_block_count"), std::string::npos) << e;
    }
}

// Every expert slice the store reads out of a GLM file is byte for byte its part of the mapped file; the
// dense layer 0 and the MTP block 3 have no sources.
TEST(GgufGlmFile, EveryStreamedSliceIsItsPartOfTheFile) {
    testing::TempDir dir;
    const std::string path = dir.file("m.gguf");
    std::ofstream(path, std::ios::binary) << read_file(weights_dir() + "/glm4_moe_tiny_hf_bf16.q8_0.gguf");
    auto verified = format::verify_gguf(path);
    ASSERT_TRUE(verified.has_value()) << verified.status().message();
    auto resident = format::GgufCheckpoint::open(path);
    ASSERT_TRUE(resident.has_value());
    std::string why;
    auto manifest = format::gguf_manifest_for_reads(**resident, &why);
    ASSERT_TRUE(manifest.has_value() && manifest->has_value()) << why;
    auto config = model::load_gguf_model_config(**resident);
    ASSERT_TRUE(config.has_value());
    auto sources = experts::expert_sources_from_gguf(**resident, config->n_layers, &(*manifest)->experts);
    ASSERT_TRUE(sources.has_value()) << sources.status().message();
    ASSERT_EQ(sources->size(), 2u);
    EXPECT_EQ((*sources)[0].layer, 1);
    EXPECT_EQ((*sources)[1].layer, 2);
    experts::ExpertStoreOptions so;
    so.cache_bytes = 1;
    so.verify_reads = true;
    auto store = experts::ExpertStore::open(*sources, so);
    ASSERT_TRUE(store.has_value()) << store.status().message();
    for (int64_t l = 1; l < config->n_layers; ++l) {
        const std::string blk = "blk." + std::to_string(l) + ".ffn_";
        for (int32_t e = 0; e < config->n_experts; ++e) {
            model::ExpertWeights got;
            ASSERT_TRUE((*store)->acquire(l, std::span<const int32_t>(&e, 1), &got).is_ok());
            const kernels::WeightView* views[3] = {&got.gate, &got.up, &got.down};
            const char* names[3] = {"gate_exps.weight", "up_exps.weight", "down_exps.weight"};
            for (int p = 0; p < 3; ++p) {
                const format::GgufTensor* t = (*resident)->find(blk + names[p]);
                ASSERT_NE(t, nullptr);
                const kernels::WeightView want = model::gguf_matrix_view(*t, t->data, e);
                ASSERT_EQ(views[p]->type, want.type);
                ASSERT_EQ(views[p]->rows, want.rows);
                ASSERT_EQ(views[p]->cols, want.cols);
                const size_t n = static_cast<size_t>(want.rows) * want.row_bytes();
                ASSERT_EQ(std::memcmp(views[p]->data, want.data, n), 0) << blk << names[p] << " expert " << e;
            }
            (*store)->release(l, std::span<const int32_t>(&e, 1));
        }
    }
}

}  // namespace
}  // namespace sluice
