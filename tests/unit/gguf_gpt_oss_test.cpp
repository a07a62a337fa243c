// gpt-oss (llama.cpp's architecture `gpt-oss`) from GGUF files: the two gpt-oss goldens — the bf16
// checkpoint and the Hub-style MXFP4 one (tests/data/goldens/gpt_oss_hf_{bf16,mxfp4}) — converted by
// llama.cpp's own converter (tools/make_gguf_weight_fixtures.py, conversion/gpt_oss.py GptOssModel, F16 and
// Q8_0: the MXFP4 checkpoint's experts stay MXFP4, repacked by the converter's repack_mxfp4, the rest takes
// the outtype). transformers' logits of the F16 files are checked in golden_test.cpp (GgufGolden, resident
// and streamed through a one-slot cache), llama.cpp's of every file in gguf_llama_test.cpp (GgufLlamaCpp),
// the Q8_0 files' kernels in gguf_weights_test.cpp (GgufQuantized). Here:
//   - the config read from the gpt-oss keys is the one config.json gives, with what llama.cpp's graph
//     hard-wires (sliding layers by set_swa_pattern(2), the clamped SwiGLU's 7.0 and 1.702, the harmony
//     end tokens);
//   - sluice's tensor map (names, dims, values from the HF tensors: gate_up_proj transposed and
//     de-interleaved, down_proj transposed, the biases split) is what the converter wrote, and the file holds
//     nothing else;
//   - the converter's MXFP4 experts are byte for byte the blocks sluice repacks from the same Hub checkpoint
//     (model/gpt_oss_experts.h) — two independent repacks of the OCP MXFP4 codes agree;
//   - streamed out of the file through a small expert cache, the logits are bit for bit the resident ones;
//   - a damaged file (sinks missing, a bias or the sinks of another shape, no sliding window) is an error
//     naming the tensor or key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "gguf_compare.h"
#include "gguf_fixture_prompt.h"
#include "model/config.h"
#include "model/config_gguf.h"
#include "model/model.h"
#include "model/weights_gguf.h"
#include "model/workspace.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "sluice/tokenizer.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::engine_logits;
using testing::Logits;

std::string weights_dir() {
    return testing::test_data_dir() + "/gguf/weights";
}

// The gpt-oss files of index.json, in name order.
std::vector<std::string> gpt_oss_fixtures() {
    std::ifstream in(weights_dir() + "/index.json");
    const nlohmann::json index = nlohmann::json::parse(in, nullptr, false);
    std::vector<std::string> out;
    if (!index.is_object() || !index.contains("files")) return out;
    for (const auto& [file, e] : index["files"].items())
        if (e.value("architecture", "") == "gpt-oss") out.push_back(file);
    return out;
}

TEST(GgufGptOssIndex, BothGoldensInF16AndQ8_0) {
    EXPECT_EQ(gpt_oss_fixtures(),
              (std::vector<std::string>{"gpt_oss_hf_bf16.f16.gguf", "gpt_oss_hf_bf16.q8_0.gguf",
                                        "gpt_oss_hf_mxfp4.f16.gguf", "gpt_oss_hf_mxfp4.q8_0.gguf"}));
}

class GgufGptOss : public ::testing::TestWithParam<std::string> {};

// The config from the metadata against config.json's, every field expect_same_config compares; then what
// says it is gpt-oss.
TEST_P(GgufGptOss, ConfigIsTheCheckpointsConfig) {
    const std::string file = GetParam();
    auto ckpt = format::GgufCheckpoint::open(weights_dir() + "/" + file);
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    auto got = model::load_gguf_model_config(**ckpt);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    auto want = model::load_model_config(testing::gguf_fixture_source(file));
    ASSERT_TRUE(want.has_value()) << want.status().message();
    testing::expect_same_config(*want, *got, file);

    EXPECT_EQ(got->family, model::Family::kGptOss);
    EXPECT_STREQ(model::gguf_architecture_name(got->family), "gpt-oss");
    EXPECT_EQ(got->sliding_window, want->sliding_window);
    EXPECT_EQ(got->layer_sliding, want->layer_sliding);  // sliding, full, sliding, full
    EXPECT_EQ(got->layer_sliding, (std::vector<bool>{true, false, true, false}));
    EXPECT_EQ(got->attn_o_bias, want->attn_o_bias);
    EXPECT_EQ(got->attn_sinks, want->attn_sinks);
    EXPECT_EQ(got->router_logit_bias, want->router_logit_bias);
    EXPECT_EQ(got->expert_bias, want->expert_bias);
    EXPECT_EQ(got->swiglu_limit, want->swiglu_limit);
    EXPECT_EQ(got->swiglu_alpha, want->swiglu_alpha);
    EXPECT_FALSE(got->mxfp4_experts);  // a GGUF's types are per tensor

    auto weights = model::load_gguf_weights(*got, *ckpt);
    ASSERT_TRUE(weights.has_value()) << weights.status().message();
    const bool mxfp4 = file.find("mxfp4") != std::string::npos;
    for (const auto& lw : weights->layers) {
        EXPECT_EQ(lw.attn.sinks.size(), 4u);
        EXPECT_EQ(lw.attn.o_bias.size(), 64u);
        EXPECT_EQ(lw.attn.q_bias.size(), 64u);
        EXPECT_EQ(lw.moe_w.router_logit_bias.size(), 8u);
        EXPECT_EQ(lw.moe_w.expert_gate_bias.size(), 8u * 64u);
        EXPECT_EQ(lw.moe_w.expert_down_bias.size(), 8u * 64u);
        ASSERT_EQ(lw.moe_w.experts.size(), 8u);
        if (mxfp4) {
            EXPECT_EQ(lw.moe_w.experts[0].down.type, kernels::WeightType::kGgmlMXFP4);
        }
    }
}

// Streamed out of the file through an expert cache of one slot (every routed expert a read of its slices of
// blk.N.ffn_*_exps, the biases resident), prefill and decode give the resident model's logits bit for bit.
TEST_P(GgufGptOss, StreamedFromTheFileEqualsResident) {
    const std::string file = weights_dir() + "/" + GetParam();
    const std::vector<int32_t> ids = testing::gguf_fixture_prompt(GetParam());
    ASSERT_GE(ids.size(), 8u);
    const Logits resident = engine_logits(file, ids);
    const Logits streamed = engine_logits(file, ids, /*expert_cache_bytes=*/1);
    ASSERT_GT(resident.vocab, 0);
    ASSERT_EQ(resident.prefill.size(), ids.size() * static_cast<size_t>(resident.vocab));
    EXPECT_EQ(streamed.prefill, resident.prefill);
    EXPECT_EQ(streamed.decode, resident.decode);
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufGptOss, ::testing::ValuesIn(gpt_oss_fixtures()),
                         testing::GgufFixtureTestName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GgufGptOss);

// sluice's tensor map against what the converter wrote from the bf16 checkpoint: every tensor it names is in
// the file with its dims and the values it derives from the HF tensors (bf16 → f16: exact but for f16's
// subnormals) — the transposed, de-interleaved experts and their biases, the sinks, the o and router biases,
// post_attention_norm — and the file holds nothing else.
TEST(GgufGptOssFile, TensorMapIsWhatTheConverterWrote) {
    const std::string name = "gpt_oss_hf_bf16.f16.gguf";
    auto ckpt = format::GgufCheckpoint::open(weights_dir() + "/" + name);
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    auto config = model::load_gguf_model_config(**ckpt);
    ASSERT_TRUE(config.has_value()) << config.status().message();
    auto hf = format::SafetensorsFile::open(testing::gguf_fixture_source(name) + "/model.safetensors");
    ASSERT_TRUE(hf.has_value()) << hf.status().message();
    std::set<std::string> mapped;
    testing::expect_tensor_map_matches(**ckpt, *config, **hf, &mapped);
    if (::testing::Test::HasFatalFailure()) return;
    for (const char* t : {"blk.0.attn_sinks.weight", "blk.3.ffn_up_exps.bias", "blk.1.ffn_gate_inp.bias",
                          "blk.2.attn_output.bias", "blk.0.post_attention_norm.weight"})
        EXPECT_TRUE(mapped.contains(t)) << t;
    for (const format::GgufTensor* t : (*ckpt)->tensors())
        EXPECT_TRUE(mapped.contains(t->name)) << t->name << " is read by no one";
}

// The converter's MXFP4 experts (gpt_oss.py repack_mxfp4: nibbles re-paired, the scale byte put before the
// 16 code bytes, gate_up split by its interleave) against sluice's own repack of the same Hub blocks
// (model/gpt_oss_experts.h, what a folder or a pack of it runs): the same ggml MXFP4 blocks, byte for byte,
// for every expert of every layer. The other tensors are the outtype's (F16 or Q8_0) and checked by the map.
TEST(GgufGptOssFile, Mxfp4ExpertsAreSluicesOwnRepackOfTheHubBlocks) {
    auto hub = model::Model::load(testing::test_data_dir() + "/goldens/gpt_oss_hf_mxfp4");
    ASSERT_TRUE(hub.has_value()) << hub.status().message();
    for (const char* file : {"gpt_oss_hf_mxfp4.f16.gguf", "gpt_oss_hf_mxfp4.q8_0.gguf"}) {
        auto gguf = model::Model::load(weights_dir() + "/" + file);
        ASSERT_TRUE(gguf.has_value()) << gguf.status().message();
        const auto& a = (*hub)->weights().layers;
        const auto& b = (*gguf)->weights().layers;
        ASSERT_EQ(a.size(), b.size());
        int64_t compared = 0;
        for (size_t l = 0; l < a.size(); ++l) {
            ASSERT_EQ(a[l].moe_w.experts.size(), b[l].moe_w.experts.size());
            for (size_t e = 0; e < a[l].moe_w.experts.size(); ++e) {
                const model::ExpertWeights &x = a[l].moe_w.experts[e], &y = b[l].moe_w.experts[e];
                for (const auto& [p, q] : {std::pair{&x.gate, &y.gate}, {&x.up, &y.up}, {&x.down, &y.down}}) {
                    ASSERT_EQ(p->type, kernels::WeightType::kGgmlMXFP4);
                    ASSERT_EQ(q->type, kernels::WeightType::kGgmlMXFP4) << file;
                    ASSERT_EQ(p->rows, q->rows);
                    ASSERT_EQ(p->cols, q->cols);
                    const size_t bytes = static_cast<size_t>(p->rows) * p->row_bytes();
                    EXPECT_EQ(std::memcmp(p->data, q->data, bytes), 0)
                        << file << " layer " << l << " expert " << e;
                    ++compared;
                }
            }
            EXPECT_EQ(a[l].moe_w.expert_gate_bias, b[l].moe_w.expert_gate_bias) << l;
            EXPECT_EQ(a[l].moe_w.expert_up_bias, b[l].moe_w.expert_up_bias) << l;
            EXPECT_EQ(a[l].moe_w.expert_down_bias, b[l].moe_w.expert_down_bias) << l;
        }
        EXPECT_EQ(compared, 4 * 8 * 3);
    }
}

// llama.cpp's logits of the same files (tools/llama_logits), against sluice's with the one reading in which
// the engines differ made llama.cpp's: YaRN's correction range rounded outwards to whole dims
// (ggml_rope_yarn_corr_dims' floor / ceil), where gpt-oss defines it unrounded (config_gguf.cpp; with it,
// GgufLlamaCpp measures the F16 file at median 4.5e-3, worst row 21%). Read so, the F16 file meets the F16
// bound of the other families at the median — 7.0e-4 of the largest logit — and every top-1 is llama.cpp's;
// one row (position 96) differs by 8.8%, which this test does not explain (not the K/V precision: sluice with
// an f16 KV cache moves no row by more than 7.9e-4); the bound holds it with a margin. The files with MXFP4
// or Q8_0 weights take llama.cpp's 8-bit activation rounding: the quantized bounds (median 3%, top-1 90%).
TEST(GgufGptOssLlamaCpp, ReadWithLlamaCppsYarnRoundingGivesItsLogits) {
    for (const std::string name :
         {"gpt_oss_hf_bf16.f16", "gpt_oss_hf_bf16.q8_0", "gpt_oss_hf_mxfp4.f16", "gpt_oss_hf_mxfp4.q8_0"}) {
        SCOPED_TRACE(name);
        int64_t T = 0, V = 0;
        const std::vector<float> want =
            testing::read_npy(weights_dir() + "/llama/" + name + ".cpu.npy", &T, &V);
        ASSERT_FALSE(want.empty());
        const std::vector<int32_t> ids = testing::gguf_fixture_prompt(name + ".gguf");
        ASSERT_EQ(static_cast<int64_t>(ids.size()), T);
        const std::string path = weights_dir() + "/" + name + ".gguf";
        auto ckpt = format::GgufCheckpoint::open(path);
        ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
        auto config = model::load_gguf_model_config(**ckpt);
        ASSERT_TRUE(config.has_value()) << config.status().message();
        ASSERT_FALSE(config->yarn.truncate);
        config->yarn.truncate = true;
        auto weights = model::load_gguf_weights(*config, *ckpt);
        ASSERT_TRUE(weights.has_value()) << weights.status().message();
        auto m = model::Model::create(*config, std::move(*weights), path);
        model::ModelState state = m->new_state(T + 1);
        model::Workspace ws;
        std::vector<float> got(static_cast<size_t>(T * V));
        ASSERT_TRUE(m->forward(state, ids, got.data(), true, ws, nullptr).is_ok());
        int64_t same = 0;
        const std::vector<double> rel = testing::row_distances(got, want, V, &same);
        const double median = testing::median(rel), worst = *std::max_element(rel.begin(), rel.end());
        std::printf(
            "[ llama.cpp ] %s, YaRN range rounded: median row max|Δ|/max|logit| %.2e, worst %.2e, "
            "top-1 %lld/%lld\n",
            name.c_str(), median, worst, static_cast<long long>(same), static_cast<long long>(T));
        if (name == "gpt_oss_hf_bf16.f16") {
            EXPECT_LE(median, 1e-3);
            EXPECT_LE(worst, 0.12);
            EXPECT_EQ(same, T);
        } else {
            EXPECT_LE(median, 0.03);
            EXPECT_GE(same, T * 9 / 10);
        }
    }
}

// The keys the converter does not write but llama.cpp reads: attention.sliding_window_pattern (layer l slides
// when l % period < period − 1; 0: every layer) and rope.freq_base_swa (refused unless it is the base).
TEST(GgufGptOssConfig, SlidingWindowPatternAndSwaRopeBase) {
    auto ckpt = format::GgufCheckpoint::open(weights_dir() + "/gpt_oss_hf_bf16.f16.gguf");
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    model::GgufTensorFacts facts;
    facts.output = true;
    facts.attn_q_bias = true;
    auto with = [&](const std::string& key, format::GgufValue v) {
        format::GgufMetadata md("m.gguf");
        for (const auto& [k, value] : (*ckpt)->metadata().entries()) md.add(k, value);
        md.add(key, std::move(v));
        return model::parse_gguf_model_config(md, facts, "m.gguf");
    };
    auto u32 = [](uint32_t v) { return format::GgufValue::scalar(format::GgufValueType::kU32, v); };
    auto f32 = [](float v) {
        uint32_t bits = 0;
        std::memcpy(&bits, &v, 4);
        return format::GgufValue::scalar(format::GgufValueType::kF32, bits);
    };
    auto three = with("gpt-oss.attention.sliding_window_pattern", u32(3));
    ASSERT_TRUE(three.has_value()) << three.status().message();
    EXPECT_EQ(three->layer_sliding, (std::vector<bool>{true, true, false, true}));
    auto zero = with("gpt-oss.attention.sliding_window_pattern", u32(0));
    ASSERT_TRUE(zero.has_value()) << zero.status().message();
    EXPECT_EQ(zero->layer_sliding, (std::vector<bool>{true, true, true, true}));
    auto same = with("gpt-oss.rope.freq_base_swa", f32(150000.0f));
    ASSERT_TRUE(same.has_value()) << same.status().message();
    auto other = with("gpt-oss.rope.freq_base_swa", f32(10000.0f));
    ASSERT_FALSE(other.has_value());
    EXPECT_EQ(other.status().code(), ErrorCode::kUnsupported);
    EXPECT_NE(other.status().message().find("gpt-oss.rope.freq_base_swa"), std::string::npos)
        << other.status().message();
}

// ---- bad files -----------------------------------------------------------------------------------

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The byte offset of tensor `name`'s info in a GGUF: just past its name string.
size_t tensor_info_at(const std::string& bytes, const std::string& name) {
    std::string key(8, '\0');
    const uint64_t len = name.size();
    std::memcpy(key.data(), &len, 8);
    key += name;
    const size_t at = bytes.find(key);
    EXPECT_NE(at, std::string::npos) << name;
    return at + key.size();
}

std::string load_error(const std::string& bytes) {
    testing::TempDir dir;
    const std::string path = dir.file("bad.gguf");
    std::ofstream(path, std::ios::binary) << bytes;
    auto m = model::Model::load(path);
    EXPECT_FALSE(m.has_value());
    return m.has_value() ? std::string() : m.status().message();
}

// Dims {d0, d1} of a 2-D tensor swapped (the same bytes: the file stays valid).
void swap_dims(std::string* bytes, const std::string& name) {
    const size_t at = tensor_info_at(*bytes, name);
    int64_t d0 = 0, d1 = 0;
    std::memcpy(&d0, bytes->data() + at + 4, 8);
    std::memcpy(&d1, bytes->data() + at + 12, 8);
    ASSERT_NE(d0, d1) << name;
    std::memcpy(bytes->data() + at + 4, &d1, 8);
    std::memcpy(bytes->data() + at + 12, &d0, 8);
}

TEST(GgufGptOssBadFiles, EachProblemNamesTheTensorOrKey) {
    const std::string good = read_file(weights_dir() + "/gpt_oss_hf_mxfp4.q8_0.gguf");
    ASSERT_FALSE(good.empty());
    {
        testing::TempDir dir;
        std::ofstream(dir.file("ok.gguf"), std::ios::binary) << good;
        auto m = model::Model::load(dir.file("ok.gguf"));
        ASSERT_TRUE(m.has_value()) << m.status().message();
    }
    // The sinks missing: blk.2.attn_sinks renamed (the file is otherwise whole).
    {
        std::string bytes = good;
        const size_t at = tensor_info_at(bytes, "blk.2.attn_sinks.weight");
        bytes[at - std::string("s.weight").size()] = 'x';  // attn_sinkx.weight
        const std::string e = load_error(bytes);
        EXPECT_NE(e.find("missing tensor 'blk.2.attn_sinks.weight'"), std::string::npos) << e;
    }
    // The sinks of another length: 4 heads read as 2 (the dims say 2, the data still 4 floats long).
    {
        std::string bytes = good;
        const size_t at = tensor_info_at(bytes, "blk.0.attn_sinks.weight");
        const int64_t two = 2;
        std::memcpy(bytes.data() + at + 4, &two, 8);
        const std::string e = load_error(bytes);
        EXPECT_NE(e.find("blk.0.attn_sinks.weight"), std::string::npos) << e;
        EXPECT_NE(e.find("expected [4]"), std::string::npos) << e;
    }
    // An expert bias of another shape: ffn_down_exps.bias {H, E} read as {E, H}.
    {
        std::string bytes = good;
        swap_dims(&bytes, "blk.1.ffn_down_exps.bias");
        const std::string e = load_error(bytes);
        EXPECT_NE(e.find("blk.1.ffn_down_exps.bias"), std::string::npos) << e;
        EXPECT_NE(e.find("expected [64, 8]"), std::string::npos) << e;
    }
    // The router bias missing.
    {
        std::string bytes = good;
        const size_t at = tensor_info_at(bytes, "blk.3.ffn_gate_inp.bias");
        bytes[at - 1] = 'z';  // .biaz
        const std::string e = load_error(bytes);
        EXPECT_NE(e.find("missing tensor 'blk.3.ffn_gate_inp.bias'"), std::string::npos) << e;
    }
    // The experts of another shape: ffn_up_exps's rows and expert count swapped ({64, 64, 8} → {64, 8, 64},
    // the same bytes).
    {
        std::string bytes = good;
        const size_t at = tensor_info_at(bytes, "blk.0.ffn_up_exps.weight");
        int64_t d1 = 0, d2 = 0;
        std::memcpy(&d1, bytes.data() + at + 12, 8);
        std::memcpy(&d2, bytes.data() + at + 20, 8);
        std::memcpy(bytes.data() + at + 12, &d2, 8);
        std::memcpy(bytes.data() + at + 20, &d1, 8);
        const std::string e = load_error(bytes);
        EXPECT_NE(e.find("blk.0.ffn_up_exps.weight"), std::string::npos) << e;
    }
    // No sliding window: the key renamed.
    {
        std::string bytes = good;
        const std::string key = "gpt-oss.attention.sliding_window";
        const size_t at = bytes.find(key);
        ASSERT_NE(at, std::string::npos);
        bytes[at + key.size() - 1] = 'x';
        const std::string e = load_error(bytes);
        EXPECT_NE(e.find("gpt-oss.attention.sliding_window"), std::string::npos) << e;
        EXPECT_NE(e.find("not found"), std::string::npos) << e;
    }
}

}  // namespace
}  // namespace sluice
