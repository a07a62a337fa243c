// Continuous batching (runtime/step_batcher.h): N concurrent greedy generations on one engine each
// produce exactly the tokens they produce alone, and their forwards really were shared.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "sluice/engine.h"
#include "sluice/session.h"
#include "sluice/tokenizer.h"
#include "test_util.h"

namespace sluice {
namespace {

std::shared_ptr<Engine> load_serving(int sessions) {
    EngineOptions eo;
    eo.model_dir = std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";
    eo.threads = 2;
    eo.context_tokens = 256;
    eo.max_sessions = sessions;
    auto e = Engine::load(eo);
    EXPECT_TRUE(e.has_value()) << e.status().message();
    return e.has_value() ? *e : nullptr;
}

TEST(StepBatcher, ConcurrentGreedyRequestsMatchTheirOwnRuns) {
    constexpr int kMax = 16;
    auto engine = load_serving(kMax);
    ASSERT_TRUE(engine);
    GenerateOptions o;
    o.max_tokens = 40;
    o.sampling.temperature = 0.0f;
    o.ignore_eos = true;
    o.prefill_chunk_tokens = 16;  // several chunks per prompt: prefills interleave with decodes
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::vector<int32_t>> alone;
    for (int i = 0; i < kMax; ++i) {
        std::string text = "def f" + std::to_string(i) + "(x, y):\n    \"\"\"" +
                           std::string(static_cast<size_t>(i % 5) * 7, 'a') + "\"\"\"\n    return x";
        prompts.push_back(engine->tokenizer()->encode(text));
        auto r = engine->new_session()->generate(prompts.back(), o);
        ASSERT_TRUE(r.has_value()) << r.status().message();
        alone.push_back(r->tokens);
    }
    for (int n : {2, 4, 8, 16}) {
        const BatchingStats before = engine->batching_stats();
        std::vector<std::unique_ptr<Session>> sessions;
        for (int i = 0; i < n; ++i) sessions.push_back(engine->new_session());
        std::vector<std::vector<int32_t>> got(static_cast<size_t>(n));
        std::vector<std::string> errors(static_cast<size_t>(n));
        std::vector<std::thread> threads;
        for (int i = 0; i < n; ++i) {
            threads.emplace_back([&, i] {
                auto r = sessions[static_cast<size_t>(i)]->generate(prompts[static_cast<size_t>(i)], o);
                if (r.has_value()) {
                    got[static_cast<size_t>(i)] = r->tokens;
                } else {
                    errors[static_cast<size_t>(i)] = r.status().message();
                }
            });
        }
        for (auto& t : threads) t.join();
        for (int i = 0; i < n; ++i) {
            EXPECT_EQ(errors[static_cast<size_t>(i)], "") << "n=" << n << " stream " << i;
            EXPECT_EQ(got[static_cast<size_t>(i)], alone[static_cast<size_t>(i)])
                << "n=" << n << " stream " << i;
        }
        const BatchingStats after = engine->batching_stats();
        const int64_t forwards = after.forwards - before.forwards, steps = after.steps - before.steps;
        // Every stream's decode steps and prefill chunks went through the batcher, and most forwards
        // served more than one stream.
        EXPECT_GE(steps, static_cast<int64_t>(n) * (o.max_tokens - 1));
        EXPECT_GT(static_cast<double>(steps) / static_cast<double>(forwards), 1.5) << "n=" << n;
        std::printf("[ batch ] %d streams: %lld steps in %lld forwards (%.2f per forward)\n", n,
                    static_cast<long long>(steps), static_cast<long long>(forwards),
                    static_cast<double>(steps) / static_cast<double>(forwards));
    }
}

// A step that fails (here: a context that is full) fails alone; the streams batched with it go on.
TEST(StepBatcher, AFailingStepDoesNotFailTheOthers) {
    auto engine = load_serving(4);
    ASSERT_TRUE(engine);
    GenerateOptions o;
    o.max_tokens = 24;
    o.sampling.temperature = 0.0f;
    o.ignore_eos = true;
    const std::vector<int32_t> prompt = engine->tokenizer()->encode("import os\n");
    auto want = engine->new_session()->generate(prompt, o);
    ASSERT_TRUE(want.has_value());
    std::vector<std::thread> threads;
    std::vector<std::vector<int32_t>> got(3);
    std::string bad_error;
    auto bad = engine->new_session();
    for (int i = 0; i < 3; ++i) {
        threads.emplace_back([&, i] {
            auto r = engine->new_session()->generate(prompt, o);
            if (r.has_value()) got[static_cast<size_t>(i)] = r->tokens;
        });
    }
    threads.emplace_back([&] {
        // Evaluating past the 256-token context is refused by name.
        std::vector<int32_t> too_long(300, prompt[0]);
        auto r = bad->evaluate(too_long, false, 16);
        bad_error = r.has_value() ? "" : r.status().message();
    });
    for (auto& t : threads) t.join();
    for (const auto& g : got) EXPECT_EQ(g, want->tokens);
    EXPECT_NE(bad_error.find("context"), std::string::npos) << bad_error;
}

}  // namespace
}  // namespace sluice
