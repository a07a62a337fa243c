// Compressed KV caches (--kv-bits 16 / 8 / 4 / 3, with and without the f16 --kv-window) through the
// public API on the trained default model: logits along held-out text against the f32 cache
// (top-1 agreement, logit deviation, the next-token NLL), the memory plan's KV bytes, saved
// sessions that keep the compressed cache as it is, results that do not depend on how a prompt
// was batched, and clear errors for a bad type or a file of another type or window.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "io/mapped_file.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "sluice/tokenizer.h"
#include "test_util.h"

namespace sluice {
namespace {

std::string tiny_next() {
    return std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";
}

Expected<std::shared_ptr<Engine>> load(int kv_bits, int64_t ctx = 1024, int64_t window = 0) {
    EngineOptions eo;
    eo.kv_window = window;
    eo.model_dir = tiny_next();
    eo.threads = 2;
    eo.context_tokens = ctx;
    eo.memory_bytes = 2ull << 30;
    eo.kv_bits = kv_bits;
    // f32 activations: these tests measure the KV types' own error and their independence of the
    // batching, which int8 activations' rounding (prefill and decode round differently) would mask.
    eo.cpu_int8_activations = false;
    return Engine::load(eo);
}

using sluice::testing::heldout_ids;
using sluice::testing::logit_agreement;
using sluice::testing::LogitAgreement;

TEST(KvCache, CompressedTypesTrackTheF32CacheOnTheDefaultModel) {
    auto f32 = load(32);
    ASSERT_TRUE(f32.has_value()) << f32.status().message();
    const auto ids = heldout_ids(**f32, 1000);
    const int64_t V = (*f32)->info().vocab_size;
    auto ref = (*f32)->new_session()->evaluate(ids, true);
    ASSERT_TRUE(ref.has_value()) << ref.status().message();
    const LogitAgreement base = logit_agreement(*ref, *ref, ids, V);
    // Measured on this model over these 1000 tokens without a window: top-1 agreement 1.000 /
    // 0.997 / 0.975 / 0.948 and NLL +0.006% / +0.016% / +0.196% / +0.411% for f16 / q8 / q4 / q3;
    // with the default 256-position f16 window, q8 / q4 / q3: 1.000 / 0.995 / 0.993 and +0.013% /
    // +0.017% / +0.008%. The bounds keep a margin above that; the window must help q3.
    struct Bound {
        int bits;
        int64_t window;
        double min_top1, max_nll_rise;
    };
    double q3_rise[2] = {0, 0};
    for (const Bound& b : {Bound{16, 0, 0.998, 0.0005}, Bound{8, 0, 0.99, 0.002}, Bound{4, 0, 0.95, 0.01},
                           Bound{3, 0, 0.93, 0.015}, Bound{8, 256, 0.99, 0.002}, Bound{4, 256, 0.98, 0.002},
                           Bound{3, 256, 0.98, 0.002}}) {
        SCOPED_TRACE("kv_bits " + std::to_string(b.bits) + " window " + std::to_string(b.window));
        auto engine = load(b.bits, 1024, b.window);
        ASSERT_TRUE(engine.has_value()) << engine.status().message();
        auto got = (*engine)->new_session()->evaluate(ids, true);
        ASSERT_TRUE(got.has_value()) << got.status().message();
        const LogitAgreement a = logit_agreement(*got, *ref, ids, V);
        const double rise = (a.nll - base.nll) / base.nll;
        std::printf(
            "kv %2d bits, window %3lld: top-1 agreement %.4f, max |Δlogit| %.4f, NLL %.5f (f32 %.5f, "
            "%+.3f%%)\n",
            b.bits, static_cast<long long>(b.window), a.top1, a.max_diff, a.nll, base.nll, 100.0 * rise);
        EXPECT_GE(a.top1, b.min_top1);
        EXPECT_LE(rise, b.max_nll_rise);
        EXPECT_GT(a.max_diff, 0.0) << "a compressed cache that changes nothing is not compressed";
        if (b.bits == 3) q3_rise[b.window > 0] = rise;
    }
    EXPECT_LT(q3_rise[1], q3_rise[0] / 2) << "the f16 window did not help the 3-bit cache";
}

// A windowed compressed cache reads each query's window in f16 whatever the batching: a prompt
// evaluated at once, in chunks longer than the ring's slack, or token by token gives the same
// logits (the ring sub-steps keep every window intact; kernels are deterministic per query).
TEST(KvCache, TheWindowDoesNotDependOnHowThePromptWasBatched) {
    auto engine = load(3, 1024, 100);
    ASSERT_TRUE(engine.has_value()) << engine.status().message();
    const auto ids = heldout_ids(**engine, 400);
    const int64_t V = (*engine)->info().vocab_size;
    auto whole = (*engine)->new_session()->evaluate(ids, true);
    ASSERT_TRUE(whole.has_value()) << whole.status().message();
    for (size_t chunk : {size_t{1}, size_t{37}, size_t{150}}) {
        SCOPED_TRACE(chunk);
        auto s = (*engine)->new_session();
        std::vector<float> logits;
        for (size_t i = 0; i < ids.size(); i += chunk) {
            const std::vector<int32_t> part(
                ids.begin() + static_cast<std::ptrdiff_t>(i),
                ids.begin() + static_cast<std::ptrdiff_t>(std::min(ids.size(), i + chunk)));
            auto got = s->evaluate(part, true);
            ASSERT_TRUE(got.has_value()) << got.status().message();
            logits.insert(logits.end(), got->begin(), got->end());
        }
        ASSERT_EQ(logits.size(), whole->size());
        double worst = 0.0;
        for (size_t i = 0; i < logits.size(); ++i)
            worst = std::max(worst, static_cast<double>(std::fabs(logits[i] - (*whole)[i])));
        // Prefill and decode run different (exact up to rounding) matmul kernels; a window read
        // from the q3 cache instead of f16 moves logits by ~1 (see the test above).
        EXPECT_LT(worst, 2e-3) << "over " << V << "-entry logit rows";
    }
}

TEST(KvCache, TheMemoryPlanCountsKvBytesByType) {
    uint64_t per_token[2] = {0, 0};
    int i = 0;
    for (int bits : {32, 8}) {
        auto engine = load(bits, 4096);
        ASSERT_TRUE(engine.has_value()) << engine.status().message();
        const MemoryPlan& plan = (*engine)->memory_plan();
        per_token[i++] = plan.kv_bytes_per_token;
        EXPECT_NE(plan.describe().find(bits == 32 ? "KV f32" : "KV q8"), std::string::npos)
            << plan.describe();
    }
    // The default model: 2 attention layers × 2 KV heads × 64 × (K, V). f32: 4 bytes per element;
    // q8: 64 codes + 2 f16 scales (one per 32) per head = 68 bytes.
    EXPECT_EQ(per_token[0], 2u * 2 * 2 * 64 * 4);
    EXPECT_EQ(per_token[1], 2u * 2 * 2 * 68);
}

TEST(KvCache, SavedSessionsKeepTheCompressedCache) {
    testing::TempDir dir;
    auto q8 = load(8);
    ASSERT_TRUE(q8.has_value()) << q8.status().message();
    auto ids = heldout_ids(**q8, 300);
    const std::vector<int32_t> first(ids.begin(), ids.begin() + 200), rest(ids.begin() + 200, ids.end());
    auto s1 = (*q8)->new_session();
    ASSERT_TRUE(s1->evaluate(first, false).has_value());
    ASSERT_TRUE(s1->save(dir.file("q8.bin")).is_ok());
    auto s2 = (*q8)->new_session();
    ASSERT_TRUE(s2->load(dir.file("q8.bin")).is_ok());
    auto a = s1->evaluate(rest, true);
    auto b = s2->evaluate(rest, true);
    ASSERT_TRUE(a.has_value() && b.has_value());
    EXPECT_EQ(0, std::memcmp(a->data(), b->data(), a->size() * sizeof(float)))
        << "a loaded q8 session continues differently: its cache was not kept as it was";

    auto f32 = load(32);
    ASSERT_TRUE(f32.has_value());
    auto s3 = (*f32)->new_session();
    ASSERT_TRUE(s3->evaluate(first, false).has_value());
    ASSERT_TRUE(s3->save(dir.file("f32.bin")).is_ok());
    // The KV rows of 200 tokens: 2 layers × K,V × 2 heads × (256 vs 68 bytes).
    const auto size = [&](const char* f) { return std::filesystem::file_size(dir.file(f)); };
    EXPECT_EQ(size("f32.bin") - size("q8.bin"), 200u * 2 * 2 * 2 * (256 - 68));

    const Status wrong = (*f32)->new_session()->load(dir.file("q8.bin"));
    EXPECT_FALSE(wrong.is_ok());
    EXPECT_NE(wrong.message().find("holds a q8 KV cache; this session keeps f32"), std::string::npos)
        << wrong.message();

    // A windowed cache keeps its f16 ring in the file: a loaded session continues bit for bit, and
    // an engine with another window refuses the file by name.
    auto q3w = load(3, 1024, 100);
    ASSERT_TRUE(q3w.has_value()) << q3w.status().message();
    auto w1 = (*q3w)->new_session();
    ASSERT_TRUE(w1->evaluate(first, false).has_value());
    ASSERT_TRUE(w1->save(dir.file("q3w.bin")).is_ok());
    auto w2 = (*q3w)->new_session();
    ASSERT_TRUE(w2->load(dir.file("q3w.bin")).is_ok());
    auto wa = w1->evaluate(rest, true);
    auto wb = w2->evaluate(rest, true);
    ASSERT_TRUE(wa.has_value() && wb.has_value());
    EXPECT_EQ(0, std::memcmp(wa->data(), wb->data(), wa->size() * sizeof(float)))
        << "a loaded windowed session continues differently: its ring was not kept";
    auto q3 = load(3);
    ASSERT_TRUE(q3.has_value());
    const Status other = (*q3)->new_session()->load(dir.file("q3w.bin"));
    EXPECT_FALSE(other.is_ok());
    EXPECT_NE(
        other.message().find("keeps the last 100 positions of its KV cache in f16; this session keeps 0"),
        std::string::npos)
        << other.message();
}

// A session may keep its own KV type (SessionOptions, a server request's kv_bits): it computes exactly
// what an engine loaded with that type computes, beside sessions of the engine's type, saves and
// loads as that type, and is refused by name when its state would not fit the plan's reservation.
TEST(KvCache, ASessionKeepsItsOwnKvType) {
    auto f32 = load(32, 1024, 256);
    ASSERT_TRUE(f32.has_value()) << f32.status().message();
    const auto ids = heldout_ids(**f32, 300);
    const std::span<const int32_t> prompt(ids.data(), 200), rest(ids.data() + 200, 100);
    for (int bits : {16, 8, 4, 3}) {
        SCOPED_TRACE("kv_bits " + std::to_string(bits));
        auto own = load(bits, 1024, 256);
        ASSERT_TRUE(own.has_value()) << own.status().message();
        SessionOptions so;
        so.kv_bits = bits;
        auto s = (*f32)->new_session(so);
        ASSERT_TRUE(s.has_value()) << s.status().message();
        EXPECT_EQ((*s)->kv_bits(), bits);
        EXPECT_EQ((*s)->kv_window(), bits <= 8 ? 256 : 0);
        auto plain = (*f32)->new_session();  // the engine's type, alongside
        EXPECT_EQ(plain->kv_bits(), 32);
        auto want = (*own)->new_session();
        auto got = (*s)->evaluate(prompt, true);
        auto beside = plain->evaluate(prompt, true);
        auto ref = want->evaluate(prompt, true);
        ASSERT_TRUE(got.has_value() && beside.has_value() && ref.has_value()) << got.status().message();
        EXPECT_EQ(0, std::memcmp(got->data(), ref->data(), got->size() * sizeof(float)))
            << "a session's own KV type computes differently from an engine of that type";
        EXPECT_NE(0, std::memcmp(got->data(), beside->data(), got->size() * sizeof(float)));
        for (int64_t i = 0; i < 20; ++i) {  // decode steps
            auto g = (*s)->evaluate(rest.subspan(static_cast<size_t>(i), 1), false);
            auto w = want->evaluate(rest.subspan(static_cast<size_t>(i), 1), false);
            ASSERT_TRUE(g.has_value() && w.has_value());
            ASSERT_EQ(0, std::memcmp(g->data(), w->data(), g->size() * sizeof(float))) << "decode " << i;
        }
    }

    // Saved as its own type: a session of that type loads it, one of the engine's type refuses it.
    testing::TempDir dir;
    SessionOptions q4;
    q4.kv_bits = 4;
    auto a = (*f32)->new_session(q4);
    ASSERT_TRUE(a.has_value());
    ASSERT_TRUE((*a)->evaluate(prompt, false).has_value());
    ASSERT_TRUE((*a)->save(dir.file("q4.bin")).is_ok());
    auto b = (*f32)->new_session(q4);
    ASSERT_TRUE(b.has_value());
    ASSERT_TRUE((*b)->load(dir.file("q4.bin")).is_ok());
    auto ca = (*a)->evaluate(rest, true), cb = (*b)->evaluate(rest, true);
    ASSERT_TRUE(ca.has_value() && cb.has_value());
    EXPECT_EQ(0, std::memcmp(ca->data(), cb->data(), ca->size() * sizeof(float)));
    const Status wrong = (*f32)->new_session()->load(dir.file("q4.bin"));
    EXPECT_NE(wrong.message().find("holds a q4 KV cache; this session keeps f32"), std::string::npos)
        << wrong.message();

    // A type larger than the plan reserves, and one that does not exist, are errors naming them.
    auto q8 = load(8);
    ASSERT_TRUE(q8.has_value());
    SessionOptions big;
    big.kv_bits = 32;
    auto too_big = (*q8)->new_session(big);
    ASSERT_FALSE(too_big.has_value());
    EXPECT_NE(too_big.status().message().find("the memory plan reserves"), std::string::npos)
        << too_big.status().message();
    SessionOptions smaller;
    smaller.kv_bits = 4;
    EXPECT_TRUE((*q8)->new_session(smaller).has_value());
    SessionOptions odd;
    odd.kv_bits = 5;
    auto bad = (*f32)->new_session(odd);
    ASSERT_FALSE(bad.has_value());
    EXPECT_NE(bad.status().message().find("kv_bits 5"), std::string::npos) << bad.status().message();
}

TEST(KvCache, UnsupportedBitsAreRefusedByName) {
    for (int bits : {0, 2, 5, 64}) {
        auto engine = load(bits);
        ASSERT_FALSE(engine.has_value()) << bits;
        EXPECT_NE(engine.status().message().find("--kv-bits " + std::to_string(bits)), std::string::npos)
            << engine.status().message();
    }
}

// A context the model was not trained for, or one the budget cannot hold, is refused at load with
// the numbers — never an allocation failure later.
TEST(KvCache, ContextsBeyondTheModelOrTheBudgetAreRefusedAtLoad) {
    auto too_long = load(32, 8192);  // the default model has max_position_embeddings 4096
    ASSERT_FALSE(too_long.has_value());
    EXPECT_NE(too_long.status().message().find("more than this model's 4096"), std::string::npos)
        << too_long.status().message();

    EngineOptions eo;
    eo.model_dir = tiny_next();
    eo.context_tokens = 4096;
    eo.memory_bytes = 72ull << 20;  // less than scratch + runtime + this context's state
    auto small = Engine::load(eo);
    ASSERT_FALSE(small.has_value());
    EXPECT_EQ(small.status().code(), ErrorCode::kOutOfMemory);
    // Nothing fits beside the scratch and runtime: fewer KV bits would not help, more memory would.
    for (const char* part :
         {"a context of 4096 tokens needs", "f32 KV", "holds about 0 tokens", "raise --memory"})
        EXPECT_NE(small.status().message().find(part), std::string::npos) << small.status().message();
    EXPECT_EQ(small.status().message().find("--kv-bits"), std::string::npos) << small.status().message();
    // Part of the context fits: the error names how much, and fewer KV bits are one way to hold the rest.
    eo.memory_bytes = 80ull << 20;
    auto part_fits = Engine::load(eo);
    ASSERT_FALSE(part_fits.has_value());
    for (const char* part : {"a context of 4096 tokens needs", "holds about", "--kv-bits", "--ctx-size"})
        EXPECT_NE(part_fits.status().message().find(part), std::string::npos) << part_fits.status().message();
    EXPECT_EQ(part_fits.status().message().find("holds about 0 tokens"), std::string::npos);

    eo.context_tokens = 0;  // the model's own context
    eo.memory_bytes = 2ull << 30;
    auto model_ctx = Engine::load(eo);
    ASSERT_TRUE(model_ctx.has_value()) << model_ctx.status().message();
    EXPECT_EQ((*model_ctx)->options().context_tokens, 4096);

    // With no context asked for, a budget that cannot hold the model's takes the longest that fits
    // (the one the refusal above names) instead of failing; too small for even 256 tokens fails.
    eo.memory_bytes = 80ull << 20;
    auto fitted = Engine::load(eo);
    ASSERT_TRUE(fitted.has_value()) << fitted.status().message();
    const MemoryPlan& plan = (*fitted)->memory_plan();
    EXPECT_GE(plan.context_tokens, 256);
    EXPECT_LT(plan.context_tokens, 4096);
    EXPECT_EQ((*fitted)->options().context_tokens, plan.context_tokens);
    EXPECT_EQ(plan.context_tokens, plan.max_context_tokens);
    // (The default model's weights are mapped, not streamed: the plan holds state, scratch and runtime.)
    EXPECT_LE(plan.state_bytes + plan.scratch_bytes + plan.runtime_bytes, plan.budget_bytes);
    auto session = (*fitted)->new_session();
    ASSERT_TRUE(session->evaluate(heldout_ids(**fitted, 200), false).has_value());
    eo.memory_bytes = 72ull << 20;  // the refusal above: about 0 tokens fit
    auto none = Engine::load(eo);
    ASSERT_FALSE(none.has_value());
    EXPECT_EQ(none.status().code(), ErrorCode::kOutOfMemory);
}

}  // namespace
}  // namespace sluice
