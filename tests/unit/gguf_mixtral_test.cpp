// Mixtral from GGUF files (issues 25 / 26): llama.cpp's converter writes MixtralForCausalLM as architecture
// `llama` (conversion/llama.py LlamaModel) with llama.expert_count / expert_used_count, the experts stacked
// into blk.N.ffn_{gate,up,down}_exps, q/k permuted for llama.cpp's pairwise RoPE, and a SentencePiece
// vocabulary (tokenizer.ggml.model "llama"). The fixtures: the mixtral golden's checkpoint converted by the
// converter itself (tools/make_gguf_weight_fixtures.py, F16 and Q8_0; its tokenizer a 256-piece SentencePiece
// model read through the converter's own _set_vocab_sentencepiece). The golden's transformers logits are
// checked in golden_test.cpp (GgufGolden, also streamed through a one-slot cache), llama.cpp's in
// gguf_llama_test.cpp (GgufLlamaCpp), the Q8_0 blocks against their dequantization in gguf_weights_test.cpp
// (GgufQuantized), Llama-2's real vocabulary against its tokenizer.json in gguf_tokenizer_test.cpp. Here:
//   - the config from the llama keys is the golden's config.json, field for field;
//   - the tensor map — the q/k permutation among it — is what the converter wrote, and the file holds
//     nothing else;
//   - the file gives the logits of the checkpoint it came from, prefill and decode; streamed = resident;
//   - the tiny vocabulary tokenizes as SentencePiece BPE does (merges from the scores, byte fallback, BOS);
//   - a llama file without experts (a dense Llama / Mistral), q/k biases, rope_freqs: refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "format/tokenizer_gguf.h"
#include "gguf_compare.h"
#include "gguf_fixture_prompt.h"
#include "model/config.h"
#include "model/config_gguf.h"
#include "model/tensor_map_gguf.h"
#include "model/weights_gguf.h"
#include "sluice/tokenizer.h"
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

// The llama files of index.json, in name order.
std::vector<std::string> mixtral_fixtures() {
    std::ifstream in(weights_dir() + "/index.json");
    const nlohmann::json index = nlohmann::json::parse(in, nullptr, false);
    std::vector<std::string> out;
    if (!index.is_object() || !index.contains("files")) return out;
    for (const auto& [file, e] : index["files"].items())
        if (e.value("architecture", "") == "llama") out.push_back(file);
    return out;
}

TEST(GgufMixtralIndex, TheGoldenInF16AndQ8_0) {
    EXPECT_EQ(mixtral_fixtures(),
              (std::vector<std::string>{"mixtral_hf_bf16.f16.gguf", "mixtral_hf_bf16.q8_0.gguf"}));
}

class GgufMixtral : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufMixtral, ConfigIsTheCheckpointsConfig) {
    const std::string file = GetParam();
    auto ckpt = format::GgufCheckpoint::open(weights_dir() + "/" + file);
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    auto got = model::load_gguf_model_config(**ckpt);
    ASSERT_TRUE(got.has_value()) << got.status().message();
    auto want = model::load_model_config(testing::gguf_fixture_source(file));
    ASSERT_TRUE(want.has_value()) << want.status().message();
    testing::expect_same_config(*want, *got, file);
    EXPECT_EQ(got->family, model::Family::kMixtral);
    EXPECT_STREQ(model::gguf_architecture_name(got->family), "llama");
    EXPECT_EQ(got->n_experts, 8);
    EXPECT_EQ(got->top_k, 2);
    EXPECT_EQ(got->expert_ffn, 48);
    EXPECT_EQ(got->head_dim, 32);  // key_length: not hidden / heads (16)
    EXPECT_TRUE(got->norm_topk_prob);
    EXPECT_FALSE(got->attn_qk_norm);
    EXPECT_FALSE(got->attn_qkv_bias);
    EXPECT_EQ(got->shared_expert_ffn, 0);
    EXPECT_EQ(got->bos_token_id, std::optional<int32_t>(1));
}

// The GGUF against the Hugging Face checkpoint it was converted from, both loaded by sluice. F16 holds
// the bf16 weights exactly: only the f32 summation order differs. Q8_0: the llama.cpp comparison's bounds.
TEST_P(GgufMixtral, GivesTheLogitsOfTheCheckpointItCameFrom) {
    const std::string file = GetParam();
    const bool f16 = file.find(".f16.") != std::string::npos;
    const std::vector<int32_t> ids = testing::gguf_fixture_prompt(file);
    ASSERT_GE(ids.size(), 32u);
    const Logits hf = engine_logits(testing::gguf_fixture_source(file), ids);
    const Logits gguf = engine_logits(weights_dir() + "/" + file, ids);
    ASSERT_GT(hf.vocab, 0);
    ASSERT_GT(gguf.vocab, 0);
    ASSERT_EQ(hf.vocab, gguf.vocab);
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
            "[ mixtral gguf ] %s %s vs its HF checkpoint: median row max|Δ|/max|logit| %.2e, worst %.2e, "
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

// Routed experts streamed out of the file through a one-slot cache give the resident logits, bit for bit.
TEST_P(GgufMixtral, StreamedFromTheFileEqualsResident) {
    const std::string file = weights_dir() + "/" + GetParam();
    const std::vector<int32_t> ids = testing::gguf_fixture_prompt(GetParam());
    const Logits resident = engine_logits(file, ids);
    const Logits streamed = engine_logits(file, ids, /*expert_cache_bytes=*/1);
    ASSERT_FALSE(resident.prefill.empty());
    EXPECT_EQ(streamed.prefill, resident.prefill);
    EXPECT_EQ(streamed.decode, resident.decode);
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufMixtral, ::testing::ValuesIn(mixtral_fixtures()),
                         testing::GgufFixtureTestName());
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GgufMixtral);

// sluice's tensor map against what the converter wrote: the q/k rows permuted per head (kRopePairs, with
// n_head for q and n_head_kv for k), w1 / w3 / w2 stacked into ffn_gate / up / down_exps, ffn_norm for
// post_attention_layernorm — and nothing else in the file.
TEST(GgufMixtralFile, TensorMapIsWhatTheConverterWrote) {
    const std::string name = "mixtral_hf_bf16.f16.gguf";
    auto ckpt = format::GgufCheckpoint::open(weights_dir() + "/" + name);
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    auto config = model::load_gguf_model_config(**ckpt);
    ASSERT_TRUE(config.has_value()) << config.status().message();
    auto hf = format::SafetensorsFile::open(testing::gguf_fixture_source(name) + "/model.safetensors");
    ASSERT_TRUE(hf.has_value()) << hf.status().message();
    std::set<std::string> mapped;
    testing::expect_tensor_map_matches(**ckpt, *config, **hf, &mapped);
    if (::testing::Test::HasFatalFailure()) return;
    for (const model::GgufTensorSource& s : model::gguf_tensor_map(*config)) {
        const bool qk = s.gguf.ends_with("attn_q.weight") || s.gguf.ends_with("attn_k.weight");
        EXPECT_EQ(!s.steps.empty() && s.steps[0].kind == model::GgufValueStep::Kind::kRopePairs, qk)
            << s.gguf;
    }
    EXPECT_TRUE(mapped.contains("blk.2.ffn_norm.weight"));
    for (const format::GgufTensor* t : (*ckpt)->tensors())
        EXPECT_TRUE(mapped.contains(t->name)) << t->name << " is read by no one";
}

// The permutation the map declares is the converter's (LlamaModel.permute: reshape(n_head, 2, hd / 2, ...)
// .swapaxes(1, 2)) on a small case worked by hand: 2 heads of 4 rows, one column.
TEST(GgufMixtralFile, RopePairsIsLlamaModelsPermute) {
    model::GgufTensorSource s;
    s.gguf = "blk.0.attn_q.weight";
    s.dims = {1, 8};
    s.hf = {"q"};
    s.hf_shape = {8, 1};
    model::GgufValueStep pairs{model::GgufValueStep::Kind::kRopePairs};
    pairs.nk = 2;
    pairs.head_dim = 4;
    s.steps = {pairs};
    auto v = model::gguf_values_from_hf(s, {{0, 1, 2, 3, 4, 5, 6, 7}});
    ASSERT_TRUE(v.has_value()) << v.status().message();
    EXPECT_EQ(*v, (std::vector<float>{0, 2, 1, 3, 4, 6, 5, 7}));
    pairs.nk = 3;  // 3 heads of 4 rows are not 8 rows
    s.steps = {pairs};
    EXPECT_FALSE(model::gguf_values_from_hf(s, {{0, 1, 2, 3, 4, 5, 6, 7}}).has_value());
}

// The file's SentencePiece vocabulary (<unk> <s> </s>, 243 byte tokens, then "▁t" "he" "▁th" "▁the" "▁a" and
// the characters "▁" "e" "t" "a" "h" scored in that order): BPE with the merges the scores give — the
// best-scored piece first, whichever split leads to it — byte fallback for every other character, and <s>.
TEST(GgufMixtralFile, TheSentencePieceVocabularyTokenizes) {
    auto tok = Tokenizer::load(weights_dir() + "/mixtral_hf_bf16.f16.gguf");
    ASSERT_TRUE(tok.has_value()) << tok.status().message();
    const Tokenizer& t = **tok;
    ASSERT_EQ(t.vocab_size(), 256);
    EXPECT_EQ(t.bos_id_to_add(), std::optional<int32_t>(1));
    // 246 "▁t", 247 "he", 248 "▁th", 249 "▁the", 250 "▁a", 251 "▁", 252 "e", 253 "t", 254 "a", 255 "h"; the
    // byte <0xNN> at 3 + NN for NN < 0xC0, 1 + NN for 0xC2..0xF4.
    EXPECT_EQ(t.encode("the"), (std::vector<int32_t>{249}));
    EXPECT_EQ(t.encode("a the hat"), (std::vector<int32_t>{250, 249, 251, 255, 254, 253}));
    EXPECT_EQ(t.encode("x"), (std::vector<int32_t>{251, 3 + 'x'}));
    EXPECT_EQ(t.encode("\xC3\xA9"), (std::vector<int32_t>{251, 1 + 0xC3, 3 + 0xA9}));
    EXPECT_EQ(t.encode("<s>the</s>"), (std::vector<int32_t>{1, 249, 2}));
    const std::vector<int32_t> ids = {1, 250, 249, 251, 255, 254, 253, 251, 1 + 0xC3, 3 + 0xA9};
    EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "a the hat \xC3\xA9");
}

// A llama file the graph can hold and sluice does not run is refused by name: no experts (a dense Llama /
// Mistral), q/k biases, rope_freqs. The fixture's own metadata, one thing changed.
TEST(GgufMixtralFile, WhatSluiceDoesNotRunIsRefusedByName) {
    auto ckpt = format::GgufCheckpoint::open(weights_dir() + "/mixtral_hf_bf16.f16.gguf");
    ASSERT_TRUE(ckpt.has_value()) << ckpt.status().message();
    auto without = [&](const std::string& key) {
        format::GgufMetadata md("m.gguf");
        for (const auto& [k, v] : (*ckpt)->metadata().entries())
            if (k != key) md.add(k, v);
        return md;
    };
    {
        auto cfg = model::parse_gguf_model_config(without("llama.expert_count"), true, "m.gguf");
        ASSERT_FALSE(cfg.has_value());
        EXPECT_EQ(cfg.status().code(), ErrorCode::kUnsupported);
        EXPECT_NE(cfg.status().message().find("'llama.expert_count'"), std::string::npos)
            << cfg.status().message();
        EXPECT_NE(cfg.status().message().find("dense Llama"), std::string::npos) << cfg.status().message();
    }
    {
        format::GgufMetadata md = without("");
        model::GgufTensorFacts facts;
        facts.attn_q_bias = true;
        auto cfg = model::parse_gguf_model_config(md, facts, "m.gguf");
        ASSERT_FALSE(cfg.has_value());
        EXPECT_NE(cfg.status().message().find("blk.0.attn_q.bias"), std::string::npos)
            << cfg.status().message();
        facts = {};
        facts.rope_freqs = true;
        cfg = model::parse_gguf_model_config(md, facts, "m.gguf");
        ASSERT_FALSE(cfg.has_value());
        EXPECT_NE(cfg.status().message().find("rope_freqs.weight"), std::string::npos)
            << cfg.status().message();
        ASSERT_TRUE(model::parse_gguf_model_config(md, model::GgufTensorFacts{}, "m.gguf").has_value());
    }
    {
        // A vocabulary without scores (SentencePiece's merges cannot be derived), with too few, of strings,
        // with a pre-tokenizer a SentencePiece vocabulary does not have, with an unk id past the tokens.
        auto spec = format::parse_gguf_tokenizer(without("tokenizer.ggml.scores"), "m.gguf");
        ASSERT_FALSE(spec.has_value());
        EXPECT_NE(spec.status().message().find("'tokenizer.ggml.scores' not found"), std::string::npos)
            << spec.status().message();
        format::GgufMetadata md = without("tokenizer.ggml.scores");
        md.add("tokenizer.ggml.scores",
               format::GgufValue::scalar_array(format::GgufValueType::kF32, 3, std::string(12, '\0')));
        spec = format::parse_gguf_tokenizer(md, "m.gguf");
        ASSERT_FALSE(spec.has_value());
        EXPECT_NE(spec.status().message().find("'tokenizer.ggml.scores' has 3 entries"), std::string::npos)
            << spec.status().message();
        md = without("tokenizer.ggml.scores");
        md.add("tokenizer.ggml.scores", format::GgufValue::string_array({"a", "b"}));
        spec = format::parse_gguf_tokenizer(md, "m.gguf");
        ASSERT_FALSE(spec.has_value());
        EXPECT_NE(spec.status().message().find("tokenizer.ggml.scores"), std::string::npos)
            << spec.status().message();
        md = without("tokenizer.ggml.pre");
        md.add("tokenizer.ggml.pre", format::GgufValue::string("llama-bpe"));
        spec = format::parse_gguf_tokenizer(md, "m.gguf");
        ASSERT_FALSE(spec.has_value());
        EXPECT_NE(spec.status().message().find("'tokenizer.ggml.pre' is 'llama-bpe'"), std::string::npos)
            << spec.status().message();
        md = without("");
        md.add("tokenizer.ggml.unknown_token_id",
               format::GgufValue::scalar(format::GgufValueType::kU32, 999));
        spec = format::parse_gguf_tokenizer(md, "m.gguf");
        ASSERT_FALSE(spec.has_value());
        EXPECT_NE(spec.status().message().find("'tokenizer.ggml.unknown_token_id': id 999 is past"),
                  std::string::npos)
            << spec.status().message();
    }
}

}  // namespace
}  // namespace sluice
