// score_prompt (src/server/generation.h), the prompt logprobs of legacy completions' echo, on the
// tiny trained model: each entry equals the log-softmax of an independent all-logits evaluation of
// the prompt, computed here; a prompt's scores at the positions a greedy generation chose equal the
// logprobs that generation reported for them; the session is left so that generating the prompt
// computes only its last token, and gives the same tokens as a fresh session.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "server/generation.h"

namespace sluice::server {
namespace {

std::shared_ptr<Engine> tiny_engine() {
    static std::shared_ptr<Engine> engine = [] {
        EngineOptions eo;
        eo.model_dir = std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";
        eo.context_tokens = 512;
        eo.threads = 2;
        eo.memory_bytes = 2ull << 30;
        auto e = Engine::load(eo);
        EXPECT_TRUE(e.has_value()) << e.status().message();
        return e.has_value() ? e.value() : nullptr;
    }();
    return engine;
}

// Over two scoring chunks and a part of a third (kScoreChunkTokens = 64).
std::vector<int32_t> long_prompt(const Engine& engine) {
    std::string text;
    for (int i = 0; i < 12; ++i) text += "The river flows past the old mill and into the sea. ";
    auto ids = engine.tokenizer()->encode(text, false);
    ids.resize(std::min<size_t>(ids.size(), 2 * kScoreChunkTokens + 9));
    return ids;
}

GenerateOptions greedy(int64_t n) {
    GenerateOptions o;
    o.max_tokens = n;
    o.sampling.temperature = 0.0f;
    return o;
}

TEST(ServerPromptScores, EqualTheLogSoftmaxOfAnIndependentEvaluation) {
    auto engine = tiny_engine();
    ASSERT_TRUE(engine);
    const int64_t V = engine->info().vocab_size;
    const std::vector<int32_t> prompt = long_prompt(*engine);
    ASSERT_GT(prompt.size(), static_cast<size_t>(2 * kScoreChunkTokens + 1));

    auto session = engine->new_session();
    auto warm = session->generate(std::vector<int32_t>(prompt.begin(), prompt.begin() + 20), greedy(3));
    ASSERT_TRUE(warm.has_value());  // the session held something: scoring starts over at 0
    auto scores = score_prompt(*session, prompt, 3, V);
    ASSERT_TRUE(scores.has_value()) << scores.status().message();
    ASSERT_EQ(scores->logprobs.size(), prompt.size() - 1);
    ASSERT_EQ(scores->top_logprobs.size(), prompt.size() - 1);
    EXPECT_EQ(session->position(), static_cast<int64_t>(prompt.size()) - 1);

    // One forward of the whole prompt in a fresh session, reduced here in double.
    auto fresh = engine->new_session();
    auto logits = fresh->evaluate(prompt, true, 256);
    ASSERT_TRUE(logits.has_value());
    double worst = 0;
    for (size_t p = 0; p + 1 < prompt.size(); ++p) {
        const float* row = logits->data() + p * static_cast<size_t>(V);
        double max = row[0], sum = 0;
        for (int64_t v = 1; v < V; ++v) max = std::max<double>(max, row[v]);
        for (int64_t v = 0; v < V; ++v) sum += std::exp(row[v] - max);
        const double lse = max + std::log(sum);
        const double want = row[prompt[p + 1]] - lse;
        worst = std::max(worst, std::abs(want - scores->logprobs[p]));
        EXPECT_NEAR(scores->logprobs[p], want, 1e-3) << "position " << p + 1;
        std::vector<int32_t> order(static_cast<size_t>(V));
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                          [&](int32_t a, int32_t b) { return row[a] > row[b]; });
        const auto& top = scores->top_logprobs[p];
        ASSERT_EQ(top.size(), 3u);
        EXPECT_EQ(top[0].first, order[0]) << "position " << p + 1;
        EXPECT_NEAR(top[0].second, row[order[0]] - lse, 1e-3);
        EXPECT_TRUE(top[0].second >= top[1].second && top[1].second >= top[2].second);
    }
    std::printf("[prompt scores] %zu positions, largest difference %.2e\n", prompt.size() - 1, worst);

    // Generating the prompt now computes its last token only, and continues as a fresh session does.
    auto after = session->generate(prompt, greedy(8));
    ASSERT_TRUE(after.has_value());
    EXPECT_EQ(after->stats.prefilled_tokens, 1);
    auto cold = engine->new_session()->generate(prompt, greedy(8));
    ASSERT_TRUE(cold.has_value());
    EXPECT_EQ(after->tokens, cold->tokens);
}

TEST(ServerPromptScores, EqualTheLogprobsAGenerationReported) {
    auto engine = tiny_engine();
    ASSERT_TRUE(engine);
    const std::vector<int32_t> prompt = engine->tokenizer()->encode("def add(a, b):\n    return", false);
    GenerateOptions o = greedy(12);
    o.ignore_eos = true;
    o.allow_special_tokens = true;  // the raw distribution, as scores are
    std::vector<float> reported;
    auto session = engine->new_session();
    auto r = session->generate(prompt, o, [&](const TokenEvent& e) {
        reported.push_back(e.logprob);
        return true;
    });
    ASSERT_TRUE(r.has_value());
    ASSERT_EQ(reported.size(), 12u);
    std::vector<int32_t> whole = prompt;
    whole.insert(whole.end(), r->tokens.begin(), r->tokens.end());
    auto scores = score_prompt(*session, whole, 0, engine->info().vocab_size);
    ASSERT_TRUE(scores.has_value());
    ASSERT_EQ(scores->logprobs.size(), whole.size() - 1);
    EXPECT_TRUE(scores->top_logprobs.empty());
    // The generation decoded token by token, the scores come from one prefill: other kernels (the
    // CPU prefill quantizes activations to int8), close values — ~0.02 nats apart here, where a wrong
    // position or an off-by-one would be off by whole nats.
    for (size_t i = 0; i < r->tokens.size(); ++i)
        EXPECT_NEAR(scores->logprobs[prompt.size() - 1 + i], reported[i], 0.1) << "token " << i;

    // One token: nothing to score.
    auto one = score_prompt(*session, std::vector<int32_t>{prompt[0]}, 2, engine->info().vocab_size);
    ASSERT_TRUE(one.has_value());
    EXPECT_TRUE(one->logprobs.empty());
    EXPECT_EQ(session->position(), 0);
}

}  // namespace
}  // namespace sluice::server
