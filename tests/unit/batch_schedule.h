// A mixed batching schedule shared by the CPU and GPU batch tests: n sequences, each a prompt fed in
// chunks of varying size (some wanting every row of logits) and then single decode tokens, started
// at staggered rounds so that each batched step mixes prefill chunks, decode tokens and idle
// sequences. Runs it twice on one engine — each sequence alone in a session of its own, and all of
// them through Engine::evaluate_batch, round by round — and returns both sets of logits.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "sluice/engine.h"
#include "sluice/session.h"

namespace sluice::testing {

struct Chunk {
    std::vector<int32_t> tokens;
    bool all_logits = false;
};

// Sequence i's chunks: a prompt of 1 + (7i mod 13) tokens in chunks of 1 + (i mod 4) (every third
// sequence wants all rows), then four decode tokens.
inline std::vector<Chunk> schedule_chunks(int i, int64_t vocab) {
    std::vector<Chunk> out;
    const int64_t prompt = 1 + (7 * i) % 13, chunk = 1 + i % 4;
    auto id = [&](int64_t t) { return static_cast<int32_t>((t * 37 + i * 101 + 3) % vocab); };
    for (int64_t at = 0; at < prompt; at += chunk) {
        Chunk c;
        for (int64_t t = at; t < std::min(prompt, at + chunk); ++t) c.tokens.push_back(id(t));
        c.all_logits = i % 3 == 2;
        out.push_back(std::move(c));
    }
    for (int64_t t = prompt; t < prompt + 4; ++t) out.push_back(Chunk{{id(t)}, false});
    return out;
}

// logits[seq][chunk] for n sequences, alone and batched (sequence i joins at round i mod 3).
struct ScheduleLogits {
    std::vector<std::vector<std::vector<float>>> alone, batched;
};

inline ScheduleLogits run_schedule(Engine& engine, int n) {
    ScheduleLogits out;
    const int64_t V = engine.info().vocab_size;
    std::vector<std::vector<Chunk>> chunks;
    for (int i = 0; i < n; ++i) chunks.push_back(schedule_chunks(i, V));

    out.alone.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
        auto s = engine.new_session();
        for (const Chunk& c : chunks[static_cast<size_t>(i)]) {
            auto l = s->evaluate(c.tokens, c.all_logits, static_cast<int64_t>(c.tokens.size()));
            EXPECT_TRUE(l.has_value()) << l.status().message();
            out.alone[static_cast<size_t>(i)].push_back(l.has_value() ? *l : std::vector<float>{});
        }
    }

    std::vector<std::unique_ptr<Session>> sessions;
    for (int i = 0; i < n; ++i) sessions.push_back(engine.new_session());
    out.batched.resize(static_cast<size_t>(n));
    for (int round = 0;; ++round) {
        std::vector<BatchEvaluation> items;
        std::vector<int> who;
        for (int i = 0; i < n; ++i) {
            const int64_t next = round - i % 3;
            if (next < 0 || next >= static_cast<int64_t>(chunks[static_cast<size_t>(i)].size())) continue;
            const Chunk& c = chunks[static_cast<size_t>(i)][static_cast<size_t>(next)];
            items.push_back(
                BatchEvaluation{sessions[static_cast<size_t>(i)].get(), c.tokens, c.all_logits, {}});
            who.push_back(i);
        }
        if (items.empty()) break;
        const Status st = engine.evaluate_batch(items);
        EXPECT_TRUE(st.is_ok()) << "round " << round << ": " << st.message();
        if (!st.is_ok()) break;
        for (size_t k = 0; k < items.size(); ++k)
            out.batched[static_cast<size_t>(who[k])].push_back(std::move(items[k].logits));
    }
    for (int i = 0; i < n; ++i) {
        int64_t fed = 0;
        for (const Chunk& c : chunks[static_cast<size_t>(i)]) fed += static_cast<int64_t>(c.tokens.size());
        EXPECT_EQ(sessions[static_cast<size_t>(i)]->position(), fed) << "sequence " << i;
    }
    return out;
}

}  // namespace sluice::testing
