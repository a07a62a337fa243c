// Sessions through the public API on real models: the trained default model (tokenizer, chat
// template, hybrid DeltaNet + attention) and the goldens. Multi-turn reuse computes only new
// tokens and gives the same outputs as a fresh session; save → load → continue is identical;
// cancellation leaves the session usable; sampling options are applied and seeds are per request.
#include "sluice/session.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "io/mapped_file.h"
#include "sluice/chat_template.h"
#include "sluice/engine.h"
#include "sluice/tokenizer.h"
#include "test_util.h"

namespace sluice {
namespace {

std::string tiny_next() {
    return std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";
}

std::shared_ptr<Engine> load(const std::string& dir, int64_t ctx = 1024) {
    return testing::load_engine(dir, ctx);
}

GenerateOptions greedy(int64_t n) {
    GenerateOptions o;
    o.max_tokens = n;
    o.sampling.temperature = 0.0f;
    return o;
}

std::vector<int32_t> render(Engine& e, const nlohmann::ordered_json& messages) {
    auto text = e.chat_template()->render(messages, nullptr, true, nlohmann::ordered_json::object());
    EXPECT_TRUE(text.has_value()) << text.status().message();
    return e.tokenizer()->encode(*text);
}

TEST(Session, MultiTurnComputesOnlyNewTokensAndMatchesAFreshSession) {
    auto engine = load(tiny_next());
    ASSERT_TRUE(engine && engine->chat_template() && engine->tokenizer());
    auto session = engine->new_session();
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", "Write a Python function that adds two numbers."}});
    for (int turn = 0; turn < 3; ++turn) {
        const auto prompt = render(*engine, messages);
        const int64_t held = session->position();
        auto r = session->generate(prompt, greedy(24));
        ASSERT_TRUE(r.has_value()) << r.status().message();
        if (turn > 0) {
            // Only what the previous turn did not already hold is computed (>= 1 for the last token).
            int64_t shared = 0;
            while (shared < held && shared < static_cast<int64_t>(prompt.size()) &&
                   session->tokens()[shared] == prompt[shared])
                ++shared;
            EXPECT_LT(r->stats.prefilled_tokens, static_cast<int64_t>(prompt.size()) / 2) << "turn " << turn;
            EXPECT_LE(r->stats.prefilled_tokens, static_cast<int64_t>(prompt.size()) - held + 48)
                << "turn " << turn;
        }
        // The same conversation from scratch gives the same reply.
        auto fresh = engine->new_session();
        auto f = fresh->generate(prompt, greedy(24));
        ASSERT_TRUE(f.has_value());
        EXPECT_EQ(f->tokens, r->tokens) << "turn " << turn;
        // (Of the prompt, a fresh session computes what the engine's prefix cache does not restore.)
        EXPECT_EQ(f->stats.prefilled_tokens + f->stats.prefix_cache_tokens,
                  static_cast<int64_t>(prompt.size()));
        messages.push_back({{"role", "assistant"}, {"content", r->text}});
        messages.push_back(
            {{"role", "user"}, {"content", turn == 0 ? "Now make it multiply." : "Add a docstring."}});
    }
}

TEST(Session, DivergingHistoryFallsBackToACheckpointNeverToWrongState) {
    auto engine = load(tiny_next());
    auto tok = engine->tokenizer();
    auto session = engine->new_session();
    const auto a = tok->encode("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n");
    ASSERT_TRUE(session->generate(a, greedy(8)).has_value());
    // Same start, different middle: the DeltaNet state cannot rewind, so the session restarts from
    // a checkpoint at or before the divergence and still matches a fresh session.
    auto b = tok->encode("def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n");
    auto r = session->generate(b, greedy(12));
    auto fresh = engine->new_session()->generate(b, greedy(12));
    ASSERT_TRUE(r.has_value() && fresh.has_value());
    EXPECT_EQ(r->tokens, fresh->tokens);
}

TEST(Session, SaveLoadContinueIsIdentical) {
    auto engine = load(tiny_next());
    auto tok = engine->tokenizer();
    sluice::testing::TempDir dir;
    auto s1 = engine->new_session();
    const auto p1 = tok->encode("class Stack:\n    def __init__(self):\n");
    auto r1 = s1->generate(p1, greedy(10));
    ASSERT_TRUE(r1.has_value());
    ASSERT_TRUE(s1->save(dir.file("s.bin")).is_ok());
    std::vector<int32_t> p2 = p1;
    p2.insert(p2.end(), r1->tokens.begin(), r1->tokens.end());
    const auto more = tok->encode("\n    def push(self, x):\n");
    p2.insert(p2.end(), more.begin(), more.end());

    auto a = s1->generate(p2, greedy(10));
    auto s2 = engine->new_session();
    ASSERT_TRUE(s2->load(dir.file("s.bin")).is_ok());
    auto b = s2->generate(p2, greedy(10));
    ASSERT_TRUE(a.has_value() && b.has_value());
    EXPECT_EQ(a->tokens, b->tokens);
    EXPECT_EQ(a->stats.prefilled_tokens, b->stats.prefilled_tokens);

    // A damaged file and a different model are refused.
    {
        std::string bytes = *io::read_text_file(dir.file("s.bin"));
        bytes[bytes.size() / 2] ^= 1;
        std::ofstream(dir.file("bad.bin"), std::ios::binary) << bytes;
    }
    auto bad = engine->new_session()->load(dir.file("bad.bin"));
    EXPECT_NE(bad.message().find("checksum"), std::string::npos) << bad.message();
    auto other = load(sluice::testing::test_data_dir() + "/goldens/qwen3_next_hf_bf16");
    auto wrong = other->new_session()->load(dir.file("s.bin"));
    EXPECT_NE(wrong.message().find("different model"), std::string::npos) << wrong.message();
}

TEST(Session, CancellationStopsAndLeavesTheSessionUsable) {
    auto engine = load(tiny_next());
    auto tok = engine->tokenizer();
    auto session = engine->new_session();
    const auto p = tok->encode("import sys\n");
    int seen = 0;
    auto r = session->generate(p, greedy(50), [&](const TokenEvent&) {
        if (++seen == 5) session->cancel();
        return true;
    });
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->finish_reason, FinishReason::kCancelled);
    EXPECT_LE(r->tokens.size(), 6u);
    auto again = session->generate(p, greedy(8));
    auto fresh = engine->new_session()->generate(p, greedy(8));
    ASSERT_TRUE(again.has_value() && fresh.has_value());
    EXPECT_EQ(again->tokens, fresh->tokens);
}

TEST(Session, StopStringsAcrossTokensAreNeverEmitted) {
    auto engine = load(tiny_next());
    auto tok = engine->tokenizer();
    const auto p = tok->encode("def add(a, b):\n");
    auto full = engine->new_session()->generate(p, greedy(30));
    ASSERT_TRUE(full.has_value());
    ASSERT_GT(full->text.size(), 12u);
    // A stop string spanning a token boundary in the middle of the greedy text.
    const std::string stop = full->text.substr(5, 6);
    GenerateOptions o = greedy(30);
    o.stop = {stop};
    std::string streamed;
    auto r = engine->new_session()->generate(p, o, [&](const TokenEvent& ev) {
        streamed += ev.text;
        return true;
    });
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->finish_reason, FinishReason::kStop);
    EXPECT_EQ(r->stop_matched, stop);
    EXPECT_EQ(r->text, full->text.substr(0, full->text.find(stop)));
    EXPECT_EQ(streamed, r->text);
}

TEST(Session, SeedsAreDeterministicPerRequest) {
    auto engine = load(tiny_next());
    auto tok = engine->tokenizer();
    const auto p = tok->encode("for i in range(");
    GenerateOptions o;
    o.max_tokens = 20;
    o.sampling.temperature = 1.0f;
    o.sampling.seed = 42;
    auto a = engine->new_session()->generate(p, o);
    auto b = engine->new_session()->generate(p, o);
    o.sampling.seed = 43;
    auto c = engine->new_session()->generate(p, o);
    ASSERT_TRUE(a.has_value() && b.has_value() && c.has_value());
    EXPECT_EQ(a->tokens, b->tokens);
    EXPECT_NE(a->tokens, c->tokens);
}

TEST(Session, SpecialTokensAreNeverSampledUnlessEos) {
    auto engine = load(tiny_next());
    auto tok = engine->tokenizer();
    const auto p = tok->encode("x = ");
    GenerateOptions o;
    o.max_tokens = 40;
    o.sampling.temperature = 1.0f;
    o.sampling.seed = 1;
    // Push a special, non-EOS token to the top: it must still never appear.
    const auto im_start = tok->token_id("<|im_start|>");
    ASSERT_TRUE(im_start.has_value());
    o.sampling.logit_bias = {{*im_start, 100.0f}};
    auto r = engine->new_session()->generate(p, o);
    ASSERT_TRUE(r.has_value());
    for (int32_t t : r->tokens) EXPECT_NE(t, *im_start);
    // EOS is allowed and ends the generation.
    const auto& eos = engine->eos_token_ids();
    ASSERT_FALSE(eos.empty());
    o.sampling.logit_bias = {{eos[0], 100.0f}};
    auto e = engine->new_session()->generate(p, o);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->finish_reason, FinishReason::kStop);
    EXPECT_TRUE(e->tokens.empty());
}

TEST(Session, StreamedTextIsValidUtf8AndEqualsTheDecodedOutput) {
    auto engine = load(tiny_next());
    auto tok = engine->tokenizer();
    GenerateOptions o;
    o.max_tokens = 60;
    o.sampling.temperature = 1.5f;
    o.sampling.seed = 9;
    std::string streamed;
    auto r = engine->new_session()->generate(
        tok->encode("# 日本語のコメント 🎉👍🏽\n"), o, [&](const TokenEvent& ev) {
            streamed += ev.text;
            // Every chunk is whole UTF-8.
            size_t i = 0;
            while (i < ev.text.size()) {
                const unsigned char c = static_cast<unsigned char>(ev.text[i]);
                const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
                EXPECT_LE(i + len, ev.text.size()) << "partial code point in a streamed chunk";
                i += len;
            }
            return true;
        });
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(streamed, tok->decode(r->tokens));
}

// The driver interface of speculative decoding: checkpoint, evaluate proposed tokens with all their
// logits, accept some, truncate, continue — equal to a session that only ever saw the accepted
// tokens. On a DeltaNet model truncate lands on the checkpoint (the recurrent state exists only
// there) and the accepted tokens are fed again; on an attention-only model it lands exactly.
TEST(Session, CheckpointEvaluateTruncateMatchesASessionWithoutTheRejectedTokens) {
    for (const std::string& dir : {tiny_next(), testing::test_data_dir() + "/goldens/qwen3_moe_hf_bf16"}) {
        auto engine = load(dir, 256);
        ASSERT_TRUE(engine);
        const bool recurrent = dir == tiny_next();
        std::vector<int32_t> prompt, draft = {41, 42, 43, 44}, next = {7, 8};
        for (int32_t i = 0; i < 10; ++i) prompt.push_back(100 + 13 * i);
        auto s = engine->new_session();
        ASSERT_TRUE(s->evaluate(prompt, false).has_value());
        ASSERT_TRUE(s->checkpoint().is_ok());
        auto rows = s->evaluate(draft, true);
        ASSERT_TRUE(rows.has_value());
        EXPECT_EQ(rows->size(), draft.size() * static_cast<size_t>(engine->info().vocab_size));
        // Accept the first two draft tokens.
        auto back = s->truncate(12);
        ASSERT_TRUE(back.has_value()) << back.status().message();
        EXPECT_EQ(*back, recurrent ? 10 : 12) << dir;
        EXPECT_EQ(s->position(), *back);
        EXPECT_EQ(static_cast<int64_t>(s->tokens().size()), *back);
        std::vector<int32_t> refeed(draft.begin() + (*back - 10), draft.begin() + 2);
        refeed.insert(refeed.end(), next.begin(), next.end());
        auto got = s->evaluate(refeed, true);
        ASSERT_TRUE(got.has_value());

        auto fresh = engine->new_session();
        ASSERT_TRUE(fresh->evaluate(prompt, false).has_value());
        if (!recurrent) {
            ASSERT_TRUE(fresh->evaluate(std::span<const int32_t>(draft.data(), 2), false).has_value());
        }
        auto want = fresh->evaluate(refeed, true);
        ASSERT_TRUE(want.has_value());
        ASSERT_EQ(got->size(), want->size());
        if (recurrent) {
            EXPECT_EQ(*got, *want) << dir;  // the same chunks: bit for bit
        } else {
            // The accepted tokens' KV came from a 4-token chunk here and a 2-token one there.
            float diff = 0;
            for (size_t i = 0; i < got->size(); ++i) diff = std::max(diff, std::fabs((*got)[i] - (*want)[i]));
            EXPECT_LT(diff, 1e-4f) << dir;
        }
        EXPECT_FALSE(s->truncate(-1).has_value());
    }
}

}  // namespace
}  // namespace sluice
