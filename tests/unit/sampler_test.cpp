// The sampler's filters and penalties, each checked statistically with fixed seeds on known
// distributions, plus determinism per seed.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>

namespace sluice::runtime {
namespace {

// logits of p = [0.4, 0.3, 0.15, 0.1, 0.05]
std::vector<float> base_logits() {
    return {std::log(0.4f), std::log(0.3f), std::log(0.15f), std::log(0.1f), std::log(0.05f)};
}

std::map<int32_t, int> draw(SamplingParams p, int n, std::span<const int32_t> context = {},
                            std::span<const int32_t> generated = {}, std::vector<int32_t> suppressed = {}) {
    p.seed = p.seed.value_or(7);
    Sampler s(p, 5, std::move(suppressed));
    GenerateOptions o;
    std::map<int32_t, int> counts;
    for (int i = 0; i < n; ++i) {
        auto l = base_logits();
        counts[s.sample(l, context, generated, o, nullptr)]++;
    }
    return counts;
}

TEST(Sampler, TemperatureOneFollowsTheDistribution) {
    auto c = draw({}, 20000);
    const double p[] = {0.4, 0.3, 0.15, 0.1, 0.05};
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(c[i] / 20000.0, p[i], 0.015) << "token " << i;
}

TEST(Sampler, GreedyAndLowTemperature) {
    SamplingParams g;
    g.temperature = 0.0f;
    EXPECT_EQ(draw(g, 100)[0], 100);
    SamplingParams cold;
    cold.temperature = 0.1f;
    EXPECT_NEAR(draw(cold, 1000)[0] / 1000.0, 0.946, 0.025);  // p ∝ p^10
}

// A backend's logits summary (greedy token, f32 normaliser) gives the same token and
// log-probabilities as the pass over the row, with suppressed ids taken out of the normaliser, for
// greedy and sampled requests and top logprobs; a suppressed maximum, a bias or a penalty fall back
// to the pass.
TEST(Sampler, BackendSummaryMatchesThePassOverTheRow) {
    std::vector<float> l(1000);
    for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(0.37f * static_cast<float>(i)) * 4.0f;
    l[613] = 9.0f;
    l[100] = 8.5f;
    const LogitsSummary sum = summarize_logits(l);
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    SamplingParams warm;  // the chat default's shape
    warm.temperature = 0.7f;
    warm.top_k = 20;
    warm.top_p = 0.9f;
    SamplingParams biased = greedy;
    biased.logit_bias = {{613, -5.0f}};
    SamplingParams penalised = warm;
    penalised.repetition_penalty = 1.3f;
    const std::vector<int32_t> context = {613, 100, 4};
    GenerateOptions plain, top;
    top.top_logprobs = 3;
    for (const SamplingParams& base : {greedy, warm, biased, penalised})
        for (const GenerateOptions& o : {plain, top})
            for (std::vector<int32_t> suppressed :
                 {std::vector<int32_t>{}, std::vector<int32_t>{5, 100, 999}, std::vector<int32_t>{613, 7}}) {
                SamplingParams p = base;
                p.seed = 11;
                Sampler full(p, 1000, suppressed), fast(p, 1000, suppressed);
                TokenEvent ef, es;
                auto a = l, b = l;
                const int32_t tf = full.sample(a, context, {}, o, &ef);
                const int32_t ts = fast.sample(b, context, {}, o, &es, &sum);
                const std::string what = "T " + std::to_string(p.temperature) + " suppressed " +
                                         std::to_string(suppressed.size()) + " top " +
                                         std::to_string(o.top_logprobs);
                EXPECT_EQ(tf, ts) << what;
                if (p.temperature == 0.0f && p.logit_bias.empty()) {
                    EXPECT_EQ(ts, suppressed.size() == 2 ? 100 : 613) << what;
                }
                EXPECT_NEAR(ef.logprob, es.logprob, 1e-5) << what;
                ASSERT_EQ(ef.top_logprobs.size(), es.top_logprobs.size()) << what;
                for (size_t i = 0; i < ef.top_logprobs.size(); ++i) {
                    EXPECT_EQ(ef.top_logprobs[i].first, es.top_logprobs[i].first) << what;
                    EXPECT_NEAR(ef.top_logprobs[i].second, es.top_logprobs[i].second, 1e-5) << what;
                }
                EXPECT_EQ(a, b) << what;  // the same ids masked, the same penalties
            }
}

// Top-k as one pass with a heap: exactly the k best (ties at the boundary to the lower id), each
// drawn, nothing else.
TEST(Sampler, TopKKeepsExactlyTheKBest) {
    std::vector<float> l(5000);
    std::mt19937 rng(5);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : l) v = d(rng);
    for (int32_t id : {4000, 17, 2500, 4999, 300}) l[static_cast<size_t>(id)] = 6.0f;  // a 5-way tie
    l[123] = 6.5f;
    l[3000] = -INFINITY;
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 4;
    p.seed = 2;
    Sampler s(p, 5000, {});
    std::map<int32_t, int> seen;
    GenerateOptions o;
    for (int i = 0; i < 4000; ++i) {
        auto row = l;
        seen[s.sample(row, {}, {}, o, nullptr)]++;
    }
    ASSERT_EQ(seen.size(), 4u);
    for (int32_t id : {123, 17, 300, 2500}) EXPECT_GT(seen[id], 300) << id;
}

// The top-k pass skips blocks of logits whose largest cannot enter the heap: the k best must still be
// exactly the kept set wherever they sit (block edges, the row's ragged tail, after ties, beside NaN
// and -inf), for a temperature other than 1.
TEST(Sampler, TopKFindsTheBestAcrossSkippedBlocks) {
    const int64_t vocab = 70001;
    std::vector<float> l(static_cast<size_t>(vocab));
    std::mt19937 rng(11);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& v : l) v = std::round(d(rng) * 4.0f) / 4.0f;  // coarse values: many ties below the top
    // The heap fills with ids 0..7; blocks of 32 start at 8 (edges 39|40, 71|72, the last full block
    // ends at 69991) and ids 69992.. are the scalar tail.
    const std::vector<int32_t> best = {0, 39, 40, 71, 72, 40000, 69991, 69999};
    for (int32_t id : best) l[static_cast<size_t>(id)] = 9.0f;
    l[70000] = 9.0f;  // tied with the best, but the highest id: a tie never displaces a kept entry
    l[70] = std::nanf("");
    l[96] = -INFINITY;
    SamplingParams p;
    p.temperature = 0.7f;
    p.top_k = static_cast<int32_t>(best.size());
    p.seed = 3;
    Sampler s(p, vocab, {});
    std::map<int32_t, int> seen;
    GenerateOptions o;
    for (int i = 0; i < 3000; ++i) {
        auto row = l;
        seen[s.sample(row, {}, {}, o, nullptr)]++;
    }
    for (int32_t id : best) EXPECT_GT(seen[id], 200) << id;  // equal logits: 375 each on average
    EXPECT_EQ(seen.size(), best.size());
}

TEST(Sampler, TopKTopPMinP) {
    SamplingParams k;
    k.top_k = 2;
    auto ck = draw(k, 5000);
    EXPECT_EQ(ck[2] + ck[3] + ck[4], 0);
    EXPECT_NEAR(ck[0] / 5000.0, 0.4 / 0.7, 0.03);

    SamplingParams p;
    p.top_p = 0.75f;  // 0.4 + 0.3 = 0.7 < 0.75 → the third token is kept too
    auto cp = draw(p, 5000);
    EXPECT_GT(cp[2], 0);
    EXPECT_EQ(cp[3] + cp[4], 0);

    SamplingParams m;
    m.min_p = 0.3f;  // keep p >= 0.12: tokens 0, 1, 2
    auto cm = draw(m, 5000);
    EXPECT_GT(cm[2], 0);
    EXPECT_EQ(cm[3] + cm[4], 0);
}

TEST(Sampler, PenaltiesAndBias) {
    SamplingParams rep;
    rep.temperature = 0.0f;
    rep.repetition_penalty = 100.0f;  // token 0 appeared in the window: pushed down
    std::vector<int32_t> ctx = {0};
    EXPECT_EQ(draw(rep, 10, ctx)[1], 10);
    rep.repetition_window = 1;
    std::vector<int32_t> ctx2 = {0, 3};  // token 0 is outside the 1-token window
    EXPECT_EQ(draw(rep, 10, ctx2)[0], 10);

    SamplingParams pres;
    pres.temperature = 0.0f;
    pres.presence_penalty = 0.5f;  // log .4 − .5 < log .3
    std::vector<int32_t> gen = {0};
    EXPECT_EQ(draw(pres, 10, gen, gen)[1], 10);
    SamplingParams freq;
    freq.temperature = 0.0f;
    freq.frequency_penalty = 0.2f;  // once: log .4 − .2 > log .3; twice: < log .3
    std::vector<int32_t> once = {0}, twice = {0, 0};
    EXPECT_EQ(draw(freq, 10, once, once)[0], 10);
    EXPECT_EQ(draw(freq, 10, twice, twice)[1], 10);

    SamplingParams bias;
    bias.temperature = 0.0f;
    bias.logit_bias = {{4, 10.0f}};
    EXPECT_EQ(draw(bias, 10)[4], 10);
    SamplingParams none;
    none.temperature = 0.0f;
    EXPECT_EQ(draw(none, 10, {}, {}, {0})[1], 10);  // suppressed
}

TEST(Sampler, SeedIsDeterministicAndIndependent) {
    SamplingParams a;
    a.seed = 123;
    SamplingParams b = a;
    EXPECT_EQ(draw(a, 200), draw(b, 200));
    b.seed = 124;
    EXPECT_NE(draw(a, 200), draw(b, 200));
}

}  // namespace
}  // namespace sluice::runtime
