// sluice against llama.cpp on the same GGUF files (issue 26): the fixtures of tests/data/gguf/weights
// run by llama.cpp's CPU backend at every position of their checkpoint's prompt (gguf_fixture_prompt.h;
// tools/llama_logits/make_fixture_logits.sh wrote tests/data/gguf/weights/llama/NAME.cpu.npy) and by
// sluice here, f32 activations.
//
// What separates the two is arithmetic, not the model: llama.cpp's CPU products take F16 weights with
// activations rounded to f16, and block-quantized weights with activations rounded to 8 bits per block
// (Q8_0), where sluice's f32 path keeps them f32. Measured when the fixtures were written: F16 files
// median row max|Δ|/max|logit| 3.7e-4 … 4.5e-4 (worst row 1.0e-3), every top-1 the same; Q8_0/Q5_0/Q4_0/
// MXFP4 files median 0.9 … 1.3% (worst row 58% on one Q4_0 row whose logits are near-flat), top-1 on
// 131–135 of 137 positions. GLM-4.5 / 4.5-Air (glm4moe, tools/make_glm4_moe_checkpoints.py's checkpoints,
// 64 positions): F16 median 4.7e-4 / 4.6e-4 (worst row 8.2e-4 / 8.8e-4), Q8_0 1.4% / 1.3%, top-1 61/64 and
// 64/64. Qwen2-MoE (qwen2moe, tools/make_qwen2_moe_checkpoints.py's checkpoint, 64 positions): F16 median
// 4.1e-4 (worst row 7.0e-4), top-1 64/64; Q8_0 1.2% (worst row 6.4%), top-1 63/64 (the router renormalised,
// as the Qwen3 MoE graphs do, moves the F16 median to 24%; the shared expert dropped, to 34%). The bounds
// below hold those with a margin; a wrong tensor, head or norm moves every row (the one family setting the
// two engines read differently, norm_topk_prob false on a Qwen3-MoE golden, moved the median to 28%; on the
// GLM-4.5 F16 file each GLM setting read wrong moves it to 25–65%: routed_scaling_factor 1 for 2.5, all
// groups kept, no renormalisation, the selection bias zeroed, full rotary, no shared expert), and on F32
// files — where both engines multiply in f32 — the engines agree to 2.4e-4 of the largest logit on full-width
// Qwen3-Next and Qwen3.6 models (bench/results/gguf). The Qwen3-Next / 3.5 fixtures are not here: llama.cpp
// needs their DeltaNet key and value head dims equal (the goldens' are 16 and 24). gpt-oss (its bf16 and
// MXFP4 goldens, 137 positions): llama.cpp rounds YaRN's correction range to whole dims, gpt-oss's definition
// (and sluice) does not; so read, F16 median 4.5e-3 (worst row 21%), top-1 136/137; the MXFP4-expert F16
// file 1.4%, Q8_0 2.2% / 2.1%, top-1 131, 134, 125 of 137. Read with llama.cpp's rounding the F16 file is
// at 7.0e-4 (gguf_gpt_oss_test.cpp). Mixtral (llama, the golden, 137 positions): F16 median 4.0e-4, every
// top-1 the same, one row at 29% (a router near-tie: below); Q8_0 1.1%, top-1 134/137.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gguf_fixture_prompt.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> fixtures() {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(testing::test_data_dir() + "/gguf/weights/llama", ec))
        if (e.path().extension() == ".npy") out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

class GgufLlamaCpp : public ::testing::TestWithParam<std::string> {};

TEST(GgufLlamaCppIndex, EveryFileLlamaCppLoadsHasItsLogits) {
    // qwen2, qwen3 (F16, Q8_0); Qwen3-MoE (F16, Q8_0, Q5_0, Q4_0, MXFP4); GLM-4.5 and GLM-4.5-Air (F16,
    // Q8_0); Qwen2-MoE (F16, Q8_0); gpt-oss bf16 and MXFP4 (F16, Q8_0); Mixtral (llama: F16, Q8_0)
    EXPECT_EQ(fixtures().size(), 23u);
}

TEST_P(GgufLlamaCpp, LogitsOfTheSameFileMatchLlamaCpps) {
    const std::string npy = GetParam();                      // NAME.cpu.npy
    const std::string name = npy.substr(0, npy.size() - 8);  // golden.outtype
    // gpt-oss's files: llama.cpp rounds YaRN's correction range where gpt-oss (and sluice) does not, and the
    // MXFP4 golden's experts take its 8-bit activations — the quantized bounds here; read with llama.cpp's
    // rounding, the F16 file meets the F16 bounds (gguf_gpt_oss_test.cpp, GgufGptOssLlamaCpp).
    const bool f16 = name.substr(name.find('.') + 1) == "f16" && !name.starts_with("gpt_oss");
    int64_t T = 0, V = 0;
    const std::vector<float> want =
        testing::read_npy(testing::test_data_dir() + "/gguf/weights/llama/" + npy, &T, &V);
    ASSERT_FALSE(want.empty()) << npy;

    const std::vector<int32_t> ids = testing::gguf_fixture_prompt(name + ".gguf");
    ASSERT_EQ(static_cast<int64_t>(ids.size()), T);

    EngineOptions eo;
    eo.model_dir = testing::test_data_dir() + "/gguf/weights/" + name + ".gguf";
    eo.threads = 2;
    eo.cpu_int8_activations = false;
    eo.context_tokens = T + 1;
    auto engine = Engine::load(eo);
    ASSERT_TRUE(engine.has_value()) << engine.status().message();
    ASSERT_EQ((*engine)->info().vocab_size, V);
    auto logits = (*engine)->new_session()->evaluate(ids, true);
    ASSERT_TRUE(logits.has_value()) << logits.status().message();

    std::vector<double> rel;
    int64_t same_top1 = 0;
    for (int64_t r = 0; r < T; ++r) {
        const float* a = logits->data() + r * V;
        const float* b = want.data() + r * V;
        float diff = 0, scale = 0;
        for (int64_t i = 0; i < V; ++i) {
            diff = std::max(diff, std::fabs(a[i] - b[i]));
            scale = std::max(scale, std::fabs(b[i]));
        }
        rel.push_back(diff / std::max(scale, 1e-6f));
        same_top1 += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
    }
    std::vector<double> sorted = rel;
    std::nth_element(sorted.begin(), sorted.begin() + T / 2, sorted.end());
    const double median = sorted[static_cast<size_t>(T / 2)];
    std::printf("[ llama.cpp ] %s: median row max|Δ|/max|logit| %.2e, worst %.2e, top-1 %lld/%lld\n",
                name.c_str(), median, *std::max_element(rel.begin(), rel.end()),
                static_cast<long long>(same_top1), static_cast<long long>(T));
    if (f16) {
        EXPECT_LE(median, 1e-3);
        // Mixtral's F16 file: one row (position 115) is 29% away from llama.cpp's — and llama.cpp's is as far
        // from transformers' there, where sluice's is within 4.3e-7 of both the golden and the HF checkpoint
        // (GgufGolden, GgufMixtral). There layer 2's router has the closest call of the prompt — its 2nd and
        // 3rd logits 2.6e-4 apart (the next closest 4.9e-3; a float64 numpy forward of the checkpoint, which
        // gives the golden's logits to 1.8e-6) — and llama.cpp's f16-rounded activations choose the other
        // expert. Every other row is within 7.9e-4; one such row is allowed, not two.
        const auto far = std::count_if(rel.begin(), rel.end(), [](double d) { return d > 3e-3; });
        EXPECT_LE(far, name.starts_with("mixtral") ? 1 : 0);
        EXPECT_EQ(same_top1, T);
    } else {
        EXPECT_LE(median, 0.03);
        EXPECT_GE(same_top1, T * 9 / 10);
    }
}

INSTANTIATE_TEST_SUITE_P(Gguf, GgufLlamaCpp, ::testing::ValuesIn(fixtures()), [](const auto& param_info) {
    std::string n = param_info.param.substr(0, param_info.param.size() - 8);
    std::replace(n.begin(), n.end(), '.', '_');
    return n;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GgufLlamaCpp);

}  // namespace
}  // namespace sluice
