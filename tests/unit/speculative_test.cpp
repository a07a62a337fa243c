// Speculative decoding: the rejection step keeps the target's distribution (a chi-square bound
// that the wrong rule — keeping every proposal — fails), greedy speculative output is plain greedy
// output for every k on the default model and an attention-only golden, and sampled first tokens
// through the engine follow the target's distribution.
#include "runtime/speculative.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "convert/packer.h"
#include "runtime/sampler.h"
#include "sluice/engine.h"
#include "sluice/tokenizer.h"
#include "test_util.h"

namespace sluice {
namespace {

using runtime::Distribution;

// Pearson's chi-square of `observed` against `expected` counts, categories expected fewer than 5
// times pooled into one (so the statistic stays chi-square distributed); *dof gets its degrees of
// freedom. An observation where nothing is expected makes it infinite.
double chi_square(const std::map<int32_t, int64_t>& observed, const std::map<int32_t, double>& expected,
                  int* dof) {
    double chi = 0, pooled_e = 0, pooled_o = 0;
    int categories = 0;
    for (const auto& [id, e] : expected) {
        const auto it = observed.find(id);
        const double o = it == observed.end() ? 0.0 : static_cast<double>(it->second);
        if (e >= 5) {
            chi += (o - e) * (o - e) / e;
            ++categories;
        } else {
            pooled_e += e;
            pooled_o += o;
        }
    }
    for (const auto& [id, o] : observed)
        if (!expected.contains(id)) pooled_o += static_cast<double>(o);
    if (pooled_o > 0 && pooled_e <= 0) return INFINITY;
    if (pooled_e > 0) {
        chi += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
        ++categories;
    }
    *dof = std::max(categories - 1, 0);
    return chi;
}

// The 99.99% point of chi-square with `dof` degrees of freedom, roughly (Wilson–Hilferty).
double chi_square_bound(int dof) {
    const double z = 3.72, d = dof;
    return d * std::pow(1 - 2 / (9 * d) + z * std::sqrt(2 / (9 * d)), 3);
}

TEST(Speculative, RejectionSamplingKeepsTheTargetDistribution) {
    const Distribution p = {{0.4f, 0}, {0.25f, 1}, {0.15f, 2}, {0.1f, 3}, {0.1f, 4}};
    const Distribution q = {{0.1f, 0}, {0.1f, 1}, {0.2f, 2}, {0.3f, 3}, {0.2f, 4}, {0.1f, 5}};
    SamplingParams params;
    params.seed = 7;
    runtime::Sampler rng(params, 8, {});
    std::vector<float> scratch(8, 0.0f);
    const int64_t n = 200000;
    std::map<int32_t, int64_t> got, always_accept;
    int64_t accepted = 0;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t x = rng.draw(q);
        const runtime::Verdict v = runtime::verify_proposal(p, q, x, rng, scratch);
        got[v.token]++;
        always_accept[x]++;  // the wrong rule: every proposal kept
        accepted += v.accepted ? 1 : 0;
    }
    for (float s : scratch) EXPECT_EQ(s, 0.0f);  // left zeroed
    std::map<int32_t, double> want;
    for (const auto& [prob, id] : p) want[id] = prob * static_cast<double>(n);
    int dof = 0;
    EXPECT_LT(chi_square(got, want, &dof), chi_square_bound(4));
    EXPECT_EQ(dof, 4);
    EXPECT_GT(chi_square(always_accept, want, &dof), chi_square_bound(4));  // the bound tells the rules apart
    // The acceptance rate is Σ min(p, q) = 0.1 + 0.1 + 0.15 + 0.1 + 0.1 = 0.55.
    EXPECT_NEAR(static_cast<double>(accepted) / static_cast<double>(n), 0.55, 0.01);

    // Greedy: point masses; kept exactly when the proposal is the target's argmax.
    const Distribution pa = {{1.0f, 3}}, qa = {{1.0f, 3}}, qb = {{1.0f, 5}};
    EXPECT_TRUE(runtime::verify_proposal(pa, qa, 3, rng, scratch).accepted);
    const runtime::Verdict no = runtime::verify_proposal(pa, qb, 5, rng, scratch);
    EXPECT_FALSE(no.accepted);
    EXPECT_EQ(no.token, 3);
}

// The chi-square of the second tokens seen after each first token (seen[t1][t2] counts) against the
// target's own distribution after prompt + t1 with the request's sampling; *dof its degrees of freedom.
double second_token_chi_square(Engine& target, const std::vector<int32_t>& prompt,
                               const std::map<int32_t, std::map<int32_t, int64_t>>& seen,
                               const GenerateOptions& o, int* dof) {
    double chi = 0;
    *dof = 0;
    const int64_t V = target.info().vocab_size;
    for (const auto& [t1, counts] : seen) {
        int64_t total = 0;
        for (const auto& [t2, c] : counts) total += c;
        std::vector<int32_t> ctx = prompt;
        ctx.push_back(t1);
        auto logits = target.new_session()->evaluate(ctx, false);
        if (!logits.has_value()) {
            ADD_FAILURE() << logits.status().message();
            continue;
        }
        runtime::Sampler sampler(o.sampling, V, {});
        sampler.prepare(*logits, ctx, std::vector<int32_t>{t1}, o);
        std::map<int32_t, double> want;
        for (const auto& [prob, id] : sampler.distribution(*logits))
            want[id] = prob * static_cast<double>(total);
        int group_dof = 0;
        chi += chi_square(counts, want, &group_dof);
        *dof += group_dof;
    }
    return chi;
}

std::shared_ptr<Engine> load(const std::string& dir, int64_t ctx = 1024) {
    return testing::load_engine(dir, ctx);
}

// `src` packed at 4 bits into `dir`: a different model with the same vocabulary, for a draft.
std::string packed(const std::string& src, const std::string& dir, int bits = 4) {
    convert::PackOptions o;
    o.src_dir = src;
    o.out_dir = dir;
    o.bits = bits;
    auto r = convert::pack_model(o);
    EXPECT_TRUE(r.has_value()) << r.status().message();
    return dir;
}

std::string tiny_next() {
    return std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";
}

TEST(Speculative, GreedyOutputIsPlainGreedyForEveryK) {
    for (const std::string& dir : {tiny_next(), testing::test_data_dir() + "/goldens/qwen3_moe_hf_bf16"}) {
        testing::TempDir tmp;
        auto target = load(dir);
        auto draft_engine = load(packed(dir, tmp.file("draft")));
        ASSERT_TRUE(target && draft_engine);
        std::vector<int32_t> prompt;
        if (target->tokenizer()) {
            prompt = target->tokenizer()->encode(
                "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n");
        } else {
            for (int32_t i = 0; i < 12; ++i) prompt.push_back(3 + 7 * i);
        }
        const int64_t n = dir == tiny_next() ? 256 : 64;
        GenerateOptions o;
        o.max_tokens = n;
        o.sampling.temperature = 0.0f;
        o.ignore_eos = true;
        auto plain = target->new_session()->generate(prompt, o);
        ASSERT_TRUE(plain.has_value()) << plain.status().message();
        ASSERT_EQ(static_cast<int64_t>(plain->tokens.size()), n);
        auto session = target->new_session();
        auto draft = draft_engine->new_session();
        for (int k = 1; k <= 8; ++k) {
            o.speculative.draft = draft.get();
            o.speculative.tokens = k;
            auto spec = session->generate(prompt, o);
            ASSERT_TRUE(spec.has_value()) << spec.status().message();
            EXPECT_EQ(spec->tokens, plain->tokens) << dir << " k=" << k;
            EXPECT_GT(spec->stats.verify_steps, 0);
            EXPECT_GT(spec->stats.accepted_tokens, 0);
            EXPECT_EQ(spec->stats.generated_tokens, n);
            // Fewer target forwards than tokens, and the session holds the reply as plain decoding
            // leaves it (every token but the last fed).
            EXPECT_LT(spec->stats.verify_steps, n);
            EXPECT_EQ(session->position(), static_cast<int64_t>(prompt.size()) + n - 1);
            std::printf("[ spec ] %s k=%d: %lld of %lld proposals kept (%.0f%%), %lld verify steps\n",
                        dir == tiny_next() ? "tiny-next" : "qwen3_moe golden", k,
                        static_cast<long long>(spec->stats.accepted_tokens),
                        static_cast<long long>(spec->stats.draft_tokens), 100 * spec->stats.acceptance_rate(),
                        static_cast<long long>(spec->stats.verify_steps));
        }
        // A model drafting for itself keeps (all but rounding-tie) proposals.
        o.speculative.tokens = 4;
        auto self = draft_engine->new_session()->generate(prompt, o);
        ASSERT_TRUE(self.has_value()) << self.status().message();
        EXPECT_GT(self->stats.acceptance_rate(), 0.95) << dir;
    }
}

// The goldens' contexts are short (DeepSeek-V3's YaRN golden holds 256 positions): 256 is what the
// tests below use of them; the default model gets more.
std::shared_ptr<Engine> load_mtp(const std::string& dir, int64_t ctx = 256) {
    EngineOptions eo;
    eo.model_dir = dir;
    eo.threads = 2;
    eo.context_tokens = ctx;
    eo.mtp = true;
    auto e = Engine::load(eo);
    EXPECT_TRUE(e.has_value()) << e.status().message();
    return e.has_value() ? *e : nullptr;
}

std::vector<std::string> mtp_goldens() {
    const std::string g = testing::test_data_dir() + "/goldens/";
    // Qwen's heads (mtp.*), then GLM-4.5's and DeepSeek-V3's nextn layers (model.layers.3).
    return {g + "qwen3_next_mtp_hf_bf16", g + "qwen3_next_mtp_mlx_q4", g + "qwen3_5_moe_mtp_hf_bf16",
            g + "glm4_moe_hf_bf16", g + "deepseek_v3_hf_bf16"};
}

// Drafting with the model's own multi-token-prediction head: greedy output is plain greedy output
// for every k (the head's KV kept in step across the steps' rollbacks), with fresh sessions and with
// one session carried over turns and a reset.
TEST(Speculative, MtpGreedyOutputIsPlainGreedyForEveryK) {
    std::vector<std::string> dirs = mtp_goldens();
    dirs.insert(dirs.begin(), tiny_next());  // the default model's trained head
    for (const std::string& dir : dirs) {
        auto engine = load_mtp(dir, dir == tiny_next() ? 1024 : 256);
        ASSERT_TRUE(engine);
        const bool trained = dir == tiny_next();
        std::vector<int32_t> prompt;
        if (trained) {
            prompt = engine->tokenizer()->encode(
                "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n");
        } else {
            for (int32_t i = 0; i < 12; ++i) prompt.push_back(3 + 7 * i);
        }
        const int64_t n = trained ? 256 : 48;
        GenerateOptions o;
        o.max_tokens = n;
        o.sampling.temperature = 0.0f;
        o.ignore_eos = true;
        auto plain = engine->new_session()->generate(prompt, o);
        ASSERT_TRUE(plain.has_value()) << plain.status().message();
        ASSERT_EQ(static_cast<int64_t>(plain->tokens.size()), n);
        for (int k = 1; k <= 8; ++k) {
            o.speculative.mtp = true;
            o.speculative.tokens = k;
            auto session = engine->new_session();
            auto spec = session->generate(prompt, o);
            ASSERT_TRUE(spec.has_value()) << spec.status().message();
            EXPECT_EQ(spec->tokens, plain->tokens) << dir << " k=" << k;
            EXPECT_GT(spec->stats.verify_steps, 0) << dir << " k=" << k;
            EXPECT_EQ(spec->stats.generated_tokens, n);
            EXPECT_EQ(session->position(), static_cast<int64_t>(prompt.size()) + n - 1);
            if (trained) {
                // The trained head's proposals are mostly kept, and each step yields more than one token.
                EXPECT_GT(spec->stats.acceptance_rate(), 0.3) << "k=" << k;
                EXPECT_LT(spec->stats.verify_steps, n / 2 + 8) << "k=" << k;
                std::printf(
                    "[ spec ] tiny-next mtp k=%d: %lld of %lld proposals kept (%.0f%%), %lld verify steps\n",
                    k, static_cast<long long>(spec->stats.accepted_tokens),
                    static_cast<long long>(spec->stats.draft_tokens), 100 * spec->stats.acceptance_rate(),
                    static_cast<long long>(spec->stats.verify_steps));
            }
        }
        // Turns: the reply and more tokens as the next prompt (prefix reuse), then a reset — beside a
        // plain session taking the same turns (a reused prefix and a fresh prefill may round apart).
        auto session = engine->new_session();
        auto plain_session = engine->new_session();
        o.speculative.tokens = 3;
        o.max_tokens = 16;
        GenerateOptions off = o;
        off.speculative.mtp = false;
        std::vector<int32_t> turn = prompt;
        for (int round = 0; round < 3; ++round) {
            auto spec = session->generate(turn, o);
            ASSERT_TRUE(spec.has_value()) << spec.status().message();
            auto want = plain_session->generate(turn, off);
            ASSERT_TRUE(want.has_value());
            EXPECT_EQ(spec->tokens, want->tokens) << dir << " round " << round;
            EXPECT_GT(spec->stats.draft_tokens, 0)
                << dir << " round " << round << ": the head fell out of step";
            turn.insert(turn.end(), spec->tokens.begin(), spec->tokens.end());
            turn.push_back(5 + round);
            if (round == 1) {
                session->reset();
                plain_session->reset();
                turn = prompt;
                turn.push_back(11);
            }
        }
    }
}

// A verification's logits (Session::evaluate_as_decode: every row through the decode kernels) are
// plain decoding's bit for bit, for every step size speculation uses.
TEST(Speculative, VerificationLogitsArePlainDecodingsBitForBit) {
    auto engine = load(tiny_next());
    ASSERT_TRUE(engine);
    const std::vector<int32_t> prompt = engine->tokenizer()->encode("def fibonacci(n):\n    return");
    const std::vector<int32_t> more = engine->tokenizer()->encode(" n if n < 2 else fibonacci(n - 1) + x");
    const int64_t V = engine->info().vocab_size;
    for (size_t n = 2; n <= 9 && n <= more.size(); ++n) {
        auto plain = engine->new_session();
        auto verify = engine->new_session();
        ASSERT_TRUE(plain->evaluate(prompt, false).has_value());
        ASSERT_TRUE(verify->evaluate(prompt, false).has_value());
        const std::span<const int32_t> step(more.data(), n);
        auto rows = verify->evaluate_as_decode(step, true);
        ASSERT_TRUE(rows.has_value()) << rows.status().message();
        for (size_t i = 0; i < n; ++i) {
            auto one = plain->evaluate(step.subspan(i, 1), false);
            ASSERT_TRUE(one.has_value());
            EXPECT_EQ(0,
                      std::memcmp(one->data(), rows->data() + i * static_cast<size_t>(V), sizeof(float) * V))
                << "n=" << n << " row " << i;
        }
    }
}

// On the GPU (resident experts): the head runs there too, and greedy output is plain greedy output.
TEST(Speculative, MtpOnCudaGreedyOutputIsPlainGreedy) {
    for (const std::string& dir : mtp_goldens()) {
        EngineOptions eo;
        eo.model_dir = dir;
        eo.device = "cuda";
        eo.context_tokens = 256;
        eo.mtp = true;
        auto engine = Engine::load(eo);
        if (!engine.has_value() && engine.status().code() == ErrorCode::kUnsupported)
            GTEST_SKIP() << engine.status().message();
        ASSERT_TRUE(engine.has_value()) << engine.status().message();
        std::vector<int32_t> prompt;
        for (int32_t i = 0; i < 12; ++i) prompt.push_back(3 + 7 * i);
        GenerateOptions o;
        o.max_tokens = 48;
        o.sampling.temperature = 0.0f;
        o.ignore_eos = true;
        auto plain = (*engine)->new_session()->generate(prompt, o);
        ASSERT_TRUE(plain.has_value()) << plain.status().message();
        for (int k : {1, 2, 4, 8}) {
            o.speculative.mtp = true;
            o.speculative.tokens = k;
            auto spec = (*engine)->new_session()->generate(prompt, o);
            ASSERT_TRUE(spec.has_value()) << spec.status().message();
            EXPECT_EQ(spec->tokens, plain->tokens) << dir << " k=" << k;
            EXPECT_GT(spec->stats.verify_steps, 0);
        }
    }
}

// Packed, the head is kept (its layer's experts streamed as the expert file of layer n_layers): an
// MLX checkpoint's bytes are copied, and a bf16 one's packed at 16 bits, so the packed model drafts
// exactly what the checkpoint does — for Qwen's mtp.* head and for DeepSeek-V3's nextn layer.
void check_head_survives_packing(const std::string& src, int bits) {
    testing::TempDir tmp;
    const std::string dir = packed(src, tmp.file("packed"), bits);
    auto original = load_mtp(src);
    auto streamed = load_mtp(dir);
    ASSERT_TRUE(original && streamed);
    std::vector<int32_t> prompt;
    for (int32_t i = 0; i < 19; ++i) prompt.push_back(9 + 13 * i);  // inside the goldens' 256 ids
    GenerateOptions o;
    o.max_tokens = 40;
    o.sampling.temperature = 0.0f;
    o.ignore_eos = true;
    o.speculative.mtp = true;
    o.speculative.tokens = 4;
    auto a = original->new_session()->generate(prompt, o);
    auto b = streamed->new_session()->generate(prompt, o);
    ASSERT_TRUE(a.has_value()) << a.status().message();
    ASSERT_TRUE(b.has_value()) << b.status().message();
    EXPECT_EQ(a->tokens, b->tokens);
    EXPECT_EQ(a->stats.draft_tokens, b->stats.draft_tokens);
    EXPECT_EQ(a->stats.accepted_tokens, b->stats.accepted_tokens);
    EXPECT_GT(b->stats.draft_tokens, 0);
}

TEST(Speculative, MtpHeadSurvivesPacking) {
    for (const auto& [src, bits] : {std::pair{mtp_goldens()[1], 4}, std::pair{mtp_goldens()[4], 16}}) {
        SCOPED_TRACE(src);
        check_head_survives_packing(src, bits);
    }
}

// A model without a head, or an engine not running it, is refused by name.
TEST(Speculative, MtpWithoutAHeadIsAClearError) {
    EngineOptions eo;
    eo.model_dir = testing::test_data_dir() + "/goldens/qwen3_next_hf_bf16";
    eo.mtp = true;
    auto e = Engine::load(eo);
    ASSERT_FALSE(e.has_value());
    EXPECT_NE(e.status().message().find("multi-token-prediction head"), std::string::npos)
        << e.status().message();
    auto plain = load(testing::test_data_dir() + "/goldens/qwen3_next_mtp_hf_bf16");
    ASSERT_TRUE(plain);
    GenerateOptions o;
    o.max_tokens = 4;
    o.speculative.mtp = true;
    auto r = plain->new_session()->generate(std::vector<int32_t>{1, 2, 3}, o);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("EngineOptions::mtp"), std::string::npos) << r.status().message();
}

// Sampling through the MTP drafter keeps the target's distribution (its proposals, from a random
// head, are often rejected: the residual path carries the weight).
TEST(Speculative, MtpSampledTokensFollowTheTargetDistribution) {
    auto target = load_mtp(mtp_goldens()[0], 256);
    ASSERT_TRUE(target);
    const std::vector<int32_t> prompt = {17, 4, 250, 9, 31};
    GenerateOptions o;
    o.max_tokens = 3;
    o.ignore_eos = true;
    // A random model's distributions are nearly flat over 300 tokens: top-k keeps each (t1, t2)
    // group to few enough categories for the chi-square, and still overlaps the random head's.
    o.sampling.temperature = 1.0f;
    o.sampling.top_k = 20;
    o.sampling.top_p = 0.95f;
    o.speculative.mtp = true;
    o.speculative.tokens = 2;
    auto session = target->new_session();
    std::map<int32_t, std::map<int32_t, int64_t>> seen;
    int64_t proposed = 0, kept = 0;
    for (int i = 0; i < 6000; ++i) {
        o.sampling.seed = 5000 + i;
        auto r = session->generate(prompt, o);
        ASSERT_TRUE(r.has_value()) << r.status().message();
        ASSERT_EQ(r->tokens.size(), 3u);
        seen[r->tokens[0]][r->tokens[1]]++;
        proposed += r->stats.draft_tokens;
        kept += r->stats.accepted_tokens;
    }
    EXPECT_GT(proposed, 0);
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, proposed);
    int dof = 0;
    const double chi = second_token_chi_square(*target, prompt, seen, o, &dof);
    ASSERT_GT(dof, 0);
    EXPECT_LT(chi, chi_square_bound(dof)) << "dof " << dof;
    std::printf("[ spec ] mtp sampled: %lld of %lld proposals kept, chi-square %.1f on %d dof (bound %.1f)\n",
                static_cast<long long>(kept), static_cast<long long>(proposed), chi, dof,
                chi_square_bound(dof));
}

TEST(Speculative, SampledTokensFollowTheTargetDistribution) {
    testing::TempDir tmp;
    auto target = load(tiny_next(), 256);
    auto draft_engine = load(packed(tiny_next(), tmp.file("draft")), 256);
    ASSERT_TRUE(target && draft_engine);
    const std::vector<int32_t> prompt = target->tokenizer()->encode("x = ");
    GenerateOptions o;
    o.max_tokens = 3;
    o.ignore_eos = true;
    o.sampling.temperature = 1.0f;
    o.sampling.top_p = 0.9f;
    o.speculative.tokens = 2;
    // A draft far from the target (a flatter distribution, proposing tokens the target's top-p
    // excludes): exactness may not depend on the drafter being good.
    o.speculative.draft_temperature = 2.0f;
    auto session = target->new_session();
    auto draft = draft_engine->new_session();
    o.speculative.draft = draft.get();
    // (t1 → counts of t2): t1 is sampled from the prompt's logits, t2 is the first verified token.
    std::map<int32_t, std::map<int32_t, int64_t>> seen;
    const int samples = 600;
    int64_t proposed = 0, kept = 0;
    for (int i = 0; i < samples; ++i) {
        o.sampling.seed = 1000 + i;
        auto r = session->generate(prompt, o);
        ASSERT_TRUE(r.has_value()) << r.status().message();
        ASSERT_EQ(r->tokens.size(), 3u);
        seen[r->tokens[0]][r->tokens[1]]++;
        proposed += r->stats.draft_tokens;
        kept += r->stats.accepted_tokens;
    }
    EXPECT_GT(proposed, 0);
    EXPECT_GT(kept, 0);
    EXPECT_LT(kept, proposed);  // some proposals rejected: the residual path is exercised
    // Expected t2 counts from the target's own distribution after prompt + t1.
    int dof = 0;
    const double chi = second_token_chi_square(*target, prompt, seen, o, &dof);
    ASSERT_GT(dof, 0);
    EXPECT_LT(chi, chi_square_bound(dof)) << "dof " << dof;
    std::printf("[ spec ] sampled: %lld of %lld proposals kept, chi-square %.1f on %d dof (bound %.1f)\n",
                static_cast<long long>(kept), static_cast<long long>(proposed), chi, dof,
                chi_square_bound(dof));
}

}  // namespace
}  // namespace sluice
