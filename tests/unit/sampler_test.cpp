// The sampler's filters and penalties, each checked statistically with fixed seeds on known
// distributions, plus determinism per seed.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

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

// A backend's logits summary (greedy token, f32 normaliser) gives the same token and log-probability
// as the pass over the row, with suppressed ids taken out of the normaliser; requests that are not
// plain greedy, and a suppressed maximum, ignore it.
LogitsSummary summarize(const std::vector<float>& l) {
    LogitsSummary s;
    s.max = -INFINITY;
    for (size_t i = 0; i < l.size(); ++i)
        if (l[i] > s.max) {
            s.max = l[i];
            s.argmax = static_cast<int32_t>(i);
        }
    for (float v : l) s.sum_exp += std::exp(v - s.max);
    return s;
}

TEST(Sampler, GreedyFromBackendSummaryMatchesThePassOverTheRow) {
    std::vector<float> l(1000);
    for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(0.37f * static_cast<float>(i)) * 4.0f;
    l[613] = 9.0f;
    l[100] = 8.5f;
    SamplingParams g;
    g.temperature = 0.0f;
    GenerateOptions o;
    for (std::vector<int32_t> suppressed :
         {std::vector<int32_t>{}, std::vector<int32_t>{5, 100, 999}, std::vector<int32_t>{613, 7}}) {
        Sampler full(g, 1000, suppressed), fast(g, 1000, suppressed);
        TokenEvent ef, es;
        auto a = l, b = l;
        const LogitsSummary sum = summarize(l);
        const int32_t tf = full.sample(a, {}, {}, o, &ef);
        const int32_t ts = fast.sample(b, {}, {}, o, &es, &sum);
        EXPECT_EQ(tf, ts);
        EXPECT_EQ(ts, suppressed.size() == 2 ? 100 : 613);
        EXPECT_NEAR(ef.logprob, es.logprob, 1e-5) << suppressed.size();
        EXPECT_EQ(a, b);  // the same ids masked
    }
    // A summary that disagrees with the row is not used for sampling with temperature.
    SamplingParams warm;
    warm.temperature = 1.0f;
    warm.seed = 3;
    Sampler s1(warm, 1000, {}), s2(warm, 1000, {});
    LogitsSummary wrong;
    wrong.argmax = 1;
    wrong.max = 100.0f;
    wrong.sum_exp = 1.0f;
    auto a = l, b = l;
    EXPECT_EQ(s1.sample(a, {}, {}, o, nullptr), s2.sample(b, {}, {}, o, nullptr, &wrong));
    // Nor with top logprobs requested.
    GenerateOptions top;
    top.top_logprobs = 2;
    Sampler s3(g, 1000, {});
    TokenEvent e3;
    auto c = l;
    EXPECT_EQ(s3.sample(c, {}, {}, top, &e3, &wrong), 613);
    EXPECT_EQ(e3.top_logprobs.size(), 2u);
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
