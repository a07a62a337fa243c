// Whole-model goldens against Hugging Face transformers (tests/data/goldens, made by
// tools/make_goldens.py on a machine with transformers): for every family and weight layout,
// logits at every prompt position after prefill (in one batch and in uneven chunks), logits from
// step-by-step decode, top-1 agreement wherever the reference is decisive, and the greedy
// continuation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "format/safetensors.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "test_util.h"

namespace sluice {
namespace {

constexpr float kTolerance = 2e-3f;  // absolute, f32 compute
constexpr float kDecisiveMargin = 1e-2f;

std::string goldens_dir() {
    return sluice::testing::test_data_dir() + "/goldens";
}

std::vector<std::string> golden_names() {
    std::ifstream in(goldens_dir() + "/index.json");
    if (!in) return {};
    nlohmann::json index = nlohmann::json::parse(in, nullptr, false);
    std::vector<std::string> names;
    const nlohmann::json& list = index.is_object() && index.contains("goldens") ? index["goldens"] : index;
    if (list.is_array()) {
        for (const auto& e : list) {
            if (e.is_string()) names.push_back(e.get<std::string>());
            if (e.is_object() && e.contains("name")) names.push_back(e["name"].get<std::string>());
        }
    }
    return names;
}

template <typename T>
std::vector<T> read_tensor(const format::SafetensorsFile& f, const std::string& name) {
    const format::TensorInfo* t = f.find(name);
    if (t == nullptr) return {};
    std::vector<T> out(t->size_bytes / sizeof(T));
    std::memcpy(out.data(), t->data, t->size_bytes);
    return out;
}

struct Reference {
    std::vector<int32_t> ids;
    std::vector<float> logits;         // [T, V]
    std::vector<int32_t> greedy_ids;   // [G]
    std::vector<float> greedy_logits;  // [G, V]
};

Reference load_reference(const std::string& dir) {
    Reference r;
    auto f = format::SafetensorsFile::open(dir + "/golden.safetensors");
    EXPECT_TRUE(f.has_value()) << f.status().message();
    if (!f.has_value()) return r;
    r.ids = read_tensor<int32_t>(**f, "input_ids");
    r.logits = read_tensor<float>(**f, "logits");
    r.greedy_ids = read_tensor<int32_t>(**f, "greedy_ids");
    r.greedy_logits = read_tensor<float>(**f, "greedy_logits");
    return r;
}

// Max |a - b| over a row, and whether the top-1 agrees where the reference is decisive.
void expect_row_close(const float* got, const float* ref, int64_t V, const std::string& where) {
    float max_diff = 0;
    for (int64_t i = 0; i < V; ++i) max_diff = std::max(max_diff, std::fabs(got[i] - ref[i]));
    EXPECT_LE(max_diff, kTolerance) << where;
    std::vector<int64_t> order(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                      [&](int64_t a, int64_t b) { return ref[a] > ref[b]; });
    if (ref[order[0]] - ref[order[1]] > kDecisiveMargin) {
        const int64_t top = std::max_element(got, got + V) - got;
        EXPECT_EQ(top, order[0]) << where << ": top-1 differs (reference margin "
                                 << ref[order[0]] - ref[order[1]] << ")";
    }
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST(GoldenIndex, ExistsAndCoversEveryFamily) {
    auto names = golden_names();
    ASSERT_FALSE(names.empty()) << "no goldens in " << goldens_dir();
    for (const char* family : {"qwen3_hf", "qwen3_mlx", "qwen3_moe", "qwen3_next", "qwen3_5_moe"}) {
        EXPECT_TRUE(std::any_of(names.begin(), names.end(),
                                [&](const std::string& n) { return n.rfind(family, 0) == 0; }))
            << "no golden for " << family;
    }
}

// The whole check on one backend. The same tolerances hold on every device: a GPU backend sums
// in f32 like the CPU fast path.
// With `tiered` (CUDA), the GPU expert cache is capped at 2·k + 1 slots: every layer evicts, and
// prefill runs each MoE layer in token sub-ranges whose expert unions fit.
void check_golden(const std::string& name, const std::string& device, bool tiered = false) {
    const std::string dir = goldens_dir() + "/" + name;
    Reference ref = load_reference(dir);
    ASSERT_FALSE(ref.ids.empty());
    EngineOptions eo;
    eo.model_dir = dir;
    eo.threads = 2;
    eo.device = device;
    // tools/gpu_check.sh runs the CUDA goldens again with SLUICE_CUDA_UNFUSED=1.
    eo.cuda_diagnostics = cuda_diagnostics_from_env();
    eo.context_tokens = static_cast<int64_t>(ref.ids.size() + ref.greedy_ids.size() + 1);
    auto engine = Engine::load(eo);
    if (device != "cpu" && !engine.has_value() && engine.status().code() == ErrorCode::kUnsupported)
        GTEST_SKIP() << engine.status().message();  // built without CUDA, or no GPU here
    ASSERT_TRUE(engine.has_value()) << engine.status().message();
    if (tiered) {
        if (!(*engine)->info().n_experts) GTEST_SKIP() << name << ": a dense model has no experts to tier";
        const uint64_t slot = (*engine)->gpu_expert_cache_stats().slot_bytes;  // resident: one expert's size
        ASSERT_GT(slot, 0u);
        eo.gpu_expert_cache_bytes = static_cast<uint64_t>(2 * (*engine)->info().experts_per_token + 1) * slot;
        engine = Engine::load(eo);
        ASSERT_TRUE(engine.has_value()) << engine.status().message();
        ASSERT_EQ((*engine)->gpu_expert_cache_stats().slots, 2 * (*engine)->info().experts_per_token + 1);
    }
    const int64_t V = (*engine)->info().vocab_size;
    const int64_t T = static_cast<int64_t>(ref.ids.size());
    ASSERT_EQ(static_cast<int64_t>(ref.logits.size()), T * V);

    // Prefill in one batch, and in uneven chunks (state carried across forward calls).
    for (int64_t chunk : {int64_t{256}, int64_t{50}}) {
        auto session = (*engine)->new_session();
        auto logits = session->evaluate(ref.ids, true, chunk);
        ASSERT_TRUE(logits.has_value()) << logits.status().message();
        for (int64_t t = 0; t < T; ++t)
            expect_row_close(logits->data() + t * V, ref.logits.data() + t * V, V,
                             "prefill(chunk " + std::to_string(chunk) + ") position " + std::to_string(t));
    }

    // Step-by-step decode.
    {
        auto session = (*engine)->new_session();
        for (int64_t t = 0; t < T; ++t) {
            auto logits = session->evaluate(std::span<const int32_t>(&ref.ids[t], 1), false);
            ASSERT_TRUE(logits.has_value()) << logits.status().message();
            expect_row_close(logits->data(), ref.logits.data() + t * V, V,
                             "decode position " + std::to_string(t));
        }
    }

    // Greedy continuation and the logits that chose each token.
    auto session = (*engine)->new_session();
    std::vector<int32_t> generated;
    GenerateOptions go;
    go.max_tokens = static_cast<int64_t>(ref.greedy_ids.size());
    go.ignore_eos = true;  // the reference continuation runs through EOS
    go.sampling.temperature = 0.0f;
    auto finish = session->generate(ref.ids, go, [&](const TokenEvent& ev) {
        generated.push_back(ev.token);
        return true;
    });
    ASSERT_TRUE(finish.has_value()) << finish.status().message();
    EXPECT_EQ(generated, ref.greedy_ids);
    if (tiered) {
        const GpuExpertCacheStats s = (*engine)->gpu_expert_cache_stats();
        EXPECT_GT(s.misses, 0u);
        EXPECT_GT(s.evictions, 0u);
        EXPECT_GT(s.bytes_copied, 0u);
    }
    if (!ref.greedy_logits.empty()) {
        auto replay = (*engine)->new_session();
        std::vector<int32_t> seq = ref.ids;
        seq.insert(seq.end(), ref.greedy_ids.begin(), ref.greedy_ids.end() - 1);
        auto logits = replay->evaluate(seq, true);
        ASSERT_TRUE(logits.has_value());
        for (size_t g = 0; g < ref.greedy_ids.size(); ++g)
            expect_row_close(logits->data() + (T - 1 + static_cast<int64_t>(g)) * V,
                             ref.greedy_logits.data() + g * V, V, "greedy step " + std::to_string(g));
    }
}

TEST_P(Golden, PrefillDecodeAndGreedyMatchTransformers) {
    check_golden(GetParam(), "cpu");
}

TEST_P(Golden, OnCudaPrefillDecodeAndGreedyMatchTransformers) {
    check_golden(GetParam(), "cuda");
}

TEST_P(Golden, OnCudaTieredExpertsMatchTransformers) {
    check_golden(GetParam(), "cuda", /*tiered=*/true);
}

INSTANTIATE_TEST_SUITE_P(Goldens, Golden, ::testing::ValuesIn(golden_names()),
                         [](const auto& param_info) { return param_info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Golden);

}  // namespace
}  // namespace sluice
