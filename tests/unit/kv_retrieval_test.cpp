// Retrieval through the KV cache types (issue 16, "Quality"): a fact planted at a random depth of a
// long haystack of held-out code and asked for at the end, on the trained default model.
//
// The fact is one line of the training distribution, `scale_edge_q7z2 = "a8f3k2m9"` (a random
// identifier, a random 8-character string); after the haystack the key is asked for again
// (`scale_edge_q7z2 =`) and the planted value must be the likeliest of 10 candidates — itself and 9
// fresh strings of the same kind — by the log-likelihood of its tokens (a forced choice). Not a greedy
// continuation: the default model (trained on 512-token windows) makes a planted value ~33 nats
// likelier than without it in 1000–2000-token haystacks, but greedy decoding writes the whole value
// for 1 fact in 40 at f32; and it does not bind values to keys when several facts share a haystack
// (the other planted values as distractors: 5 of 24, chance), so each fact has a haystack of its own.
// Without the planted line (the control) its value wins about as often as chance has it (1 in 10);
// with the compressed cache zeroed behind a 256-position f16 window (an experiment, not in the tree)
// 0 of 12 facts win and the planted value gains 0.01 nats: the fact reaches the question through
// attention over the cache, not through the DeltaNet state. Measurements: bench/results/kv/retrieval.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "sluice/tokenizer.h"

namespace sluice {
namespace {

constexpr int kCandidates = 10;  // the planted value and 9 distractors

Expected<std::shared_ptr<Engine>> load(int kv_bits, int64_t window) {
    EngineOptions eo;
    eo.model_dir = std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";
    eo.threads = 2;
    eo.context_tokens = 4096;
    eo.memory_bytes = 2ull << 30;
    eo.kv_bits = kv_bits;
    eo.kv_window = window;
    eo.cpu_int8_activations = false;  // the KV types' own effect, as kv_cache_test.cpp measures it
    return Engine::load(eo);
}

// The held-out text's tokens, and where a line may be planted: after a token that ends a line.
struct Haystack {
    std::vector<int32_t> ids;
    std::vector<size_t> line_starts;  // i with ids[i - 1] ending in '\n', ascending
};

Haystack heldout_haystack(const Tokenizer& tok) {
    Haystack h;
    auto text = io::read_text_file(std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next/heldout.txt");
    EXPECT_TRUE(text.has_value());
    if (!text.has_value()) return h;
    h.ids = tok.encode(*text, false);
    for (size_t i = 1; i < h.ids.size(); ++i) {
        const std::string_view piece = tok.token_bytes(h.ids[i - 1]);
        if (!piece.empty() && piece.back() == '\n') h.line_starts.push_back(i);
    }
    return h;
}

std::string random_chars(std::mt19937& rng, std::string_view alphabet, int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
    return s;
}

// One planted fact: the haystack around its line, its key, and the candidate values.
struct Trial {
    std::vector<int32_t> before, after;
    std::string key;
    std::vector<std::string> values;  // [0] the planted one, then the distractors
    double depth = 0;                 // where the line starts, as a share of the haystack
};

// `n` trials from `seed`: trial i plants its fact at a depth drawn from [i/n, (i+1)/n) of its own
// stretch of held-out text, min_tokens..max_tokens long (whole lines). rng() % k, not <random>'s
// distributions, whose results differ between standard libraries.
std::vector<Trial> make_trials(const Haystack& h, uint32_t seed, int n, size_t min_tokens,
                               size_t max_tokens) {
    static const char* const kWords[] = {"alpha", "beta",  "count", "index", "value", "offset", "buffer",
                                         "scale", "total", "shape", "node",  "edge",  "item",   "level",
                                         "state", "block", "frame", "layer", "limit", "cache",  "table"};
    constexpr std::string_view kAlnum = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::mt19937 rng(seed);
    const auto word = [&] { return std::string(kWords[rng() % std::size(kWords)]); };
    const auto value = [&] { return "\"" + random_chars(rng, kAlnum, 8) + "\""; };
    const auto& starts = h.line_starts;
    std::vector<Trial> trials;
    for (int i = 0; i < n; ++i) {
        Trial t;
        t.key = word() + "_" + word() + "_" + random_chars(rng, kAlnum, 4);
        for (int c = 0; c < kCandidates; ++c) t.values.push_back(value());
        const size_t length = min_tokens + rng() % (max_tokens - min_tokens + 1);
        const size_t last = static_cast<size_t>(
            std::upper_bound(starts.begin(), starts.end(), h.ids.size() - max_tokens - 200) - starts.begin());
        const size_t begin = starts[rng() % last];
        const size_t end = *std::lower_bound(starts.begin(), starts.end(), begin + length);
        const double want = (i + static_cast<double>(rng() % 1000) / 1000.0) / n;
        const size_t at = std::min(*std::lower_bound(starts.begin(), starts.end(),
                                                     begin + static_cast<size_t>(want * (end - begin))),
                                   end);
        t.before.assign(h.ids.begin() + static_cast<std::ptrdiff_t>(begin),
                        h.ids.begin() + static_cast<std::ptrdiff_t>(at));
        t.after.assign(h.ids.begin() + static_cast<std::ptrdiff_t>(at),
                       h.ids.begin() + static_cast<std::ptrdiff_t>(end));
        t.depth = static_cast<double>(at - begin) / static_cast<double>(end - begin);
        trials.push_back(std::move(t));
    }
    return trials;
}

double log_softmax_at(const float* row, int64_t V, int32_t id) {
    const float mx = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(row[i] - mx));
    return static_cast<double>(row[id] - mx) - std::log(sum);
}

// What the model makes of one trial's question `key =` after the haystack (with the fact planted or
// not): the log-likelihood of each candidate's tokens (` "a8f3k2m9"` and the line end), and whether
// greedy decoding would write the planted one.
struct Answer {
    std::vector<double> ll;  // [kCandidates]; empty when the evaluation failed (a test failure already)
    bool greedy = false;
    bool retrieved() const { return ll.size() > 1 && std::max_element(ll.begin(), ll.end()) == ll.begin(); }
    double margin() const {
        return ll.size() > 1 ? ll[0] - *std::max_element(ll.begin() + 1, ll.end()) : -HUGE_VAL;
    }
    double planted() const { return ll.empty() ? -HUGE_VAL : ll[0]; }
};

Answer ask(Engine& engine, const Trial& t, bool plant) {
    const Tokenizer& tok = *engine.tokenizer();
    const int64_t V = engine.info().vocab_size;
    const std::vector<int32_t> question = tok.encode(t.key + " =", false);
    std::vector<int32_t> context = t.before;
    if (plant) {
        const std::vector<int32_t> fact = tok.encode(t.key + " = " + t.values[0] + "\n", false);
        context.insert(context.end(), fact.begin(), fact.end());
    }
    context.insert(context.end(), t.after.begin(), t.after.end());
    context.insert(context.end(), question.begin(), question.end());
    Answer a;
    auto s = engine.new_session();
    auto last = s->evaluate(context, false);
    EXPECT_TRUE(last.has_value()) << last.status().message();
    if (!last.has_value()) return a;
    const int64_t asked = s->position();
    EXPECT_TRUE(s->checkpoint().is_ok());
    for (const std::string& value : t.values) {
        // The candidate's tokens as the line tokenizes: the question is a token prefix of it.
        const std::vector<int32_t> line = tok.encode(t.key + " = " + value + "\n", false);
        EXPECT_TRUE(std::equal(question.begin(), question.end(), line.begin())) << t.key << " = " << value;
        const std::vector<int32_t> answer(line.begin() + static_cast<std::ptrdiff_t>(question.size()),
                                          line.end());
        double ll = log_softmax_at(last->data(), V, answer[0]);
        bool greedy = std::max_element(last->data(), last->data() + V) - last->data() == answer[0];
        auto rows = s->evaluate(std::span<const int32_t>(answer.data(), answer.size() - 1), true);
        EXPECT_TRUE(rows.has_value()) << rows.status().message();
        if (!rows.has_value()) return a;
        for (size_t j = 1; j < answer.size(); ++j) {
            const float* row = rows->data() + static_cast<int64_t>(j - 1) * V;
            ll += log_softmax_at(row, V, answer[j]);
            greedy = greedy && std::max_element(row, row + V) - row == answer[j];
        }
        a.ll.push_back(ll);
        if (a.ll.size() == 1) a.greedy = greedy;
        auto back = s->truncate(asked);
        EXPECT_TRUE(back.has_value() && *back == asked);
    }
    return a;
}

std::vector<Answer> ask_all(Engine& engine, const std::vector<Trial>& trials, bool plant) {
    std::vector<Answer> answers;
    for (const Trial& t : trials) answers.push_back(ask(engine, t, plant));
    return answers;
}

// A KV type's answers, the planted value's log-likelihood measured against the control's.
struct Tally {
    int retrieved = 0, greedy = 0;
    double gain = 0;            // mean log-likelihood of the planted value over the control's, nats
    double least_margin = 1e9;  // smallest lead of the planted value over the best distractor
};

Tally tally(const std::vector<Answer>& got, const std::vector<Answer>& control) {
    Tally t;
    for (size_t i = 0; i < got.size(); ++i) {
        t.retrieved += got[i].retrieved();
        t.greedy += got[i].greedy;
        t.gain += (got[i].planted() - control[i].planted()) / static_cast<double>(got.size());
        t.least_margin = std::min(t.least_margin, got[i].margin());
    }
    return t;
}

std::string kv_name(int bits, int64_t window) {
    const char* type = bits == 32 ? "f32" : bits == 16 ? "f16" : bits == 8 ? "q8" : bits == 4 ? "q4" : "q3";
    return std::string(type) + ", window " + std::to_string(window);
}

struct Config {
    int bits;
    int64_t window;
};
constexpr Config kConfigs[] = {{32, 0}, {16, 0}, {8, 0}, {8, 256}, {4, 0}, {4, 256}, {3, 0}, {3, 256}};

// Six facts, one per sixth of the depth, in 1000–2000 tokens of held-out code, 73–1115 tokens before
// the question: with the 256-position window the compressed cache is what holds all but the nearest.
// Measured on these seeds (2-core AVX2 VM): every type retrieves 6 / 6 and the control 0 / 6; the
// planted value leads the best distractor by at least 12.8 nats (q3, window 256) and gains +38.89
// nats over the control at f32, f16 and q8, +38.11 / +38.51 at q4 (window 0 / 256: 98.0% / 99.0% of
// f32's), +36.82 / +36.02 at q3 (94.7% / 92.6%). Over 20 more facts (DISABLED_Table) every type
// retrieves 20 / 20, least margin 6.4 nats. With the compressed cache zeroed behind the window (the
// experiment above) the windowed types retrieve 1 / 6 (the nearest fact) and gain +6.6 nats: this
// test fails.
TEST(KvRetrieval, APlantedFactIsRetrievedThroughEveryKvType) {
    auto f32 = load(32, 0);
    ASSERT_TRUE(f32.has_value()) << f32.status().message();
    const Haystack h = heldout_haystack(*(*f32)->tokenizer());
    ASSERT_GT(h.ids.size(), 50000u);
    const std::vector<Trial> trials = make_trials(h, 16, 6, 1000, 2000);
    std::printf("facts at depth (tokens before the question):");
    for (const Trial& t : trials) std::printf(" %.2f (%zu)", t.depth, t.after.size());
    std::printf("\n");
    const std::vector<Answer> control = ask_all(**f32, trials, false);
    const Tally none = tally(control, control);
    std::printf("control (no fact planted): %d / %zu retrieved\n", none.retrieved, trials.size());
    EXPECT_LE(none.retrieved, 2) << "the question alone picks the planted value: the test measures nothing";
    double f32_gain = 0;
    for (const Config& c : kConfigs) {
        SCOPED_TRACE(kv_name(c.bits, c.window));
        auto engine = c.bits == 32 ? f32 : load(c.bits, c.window);
        ASSERT_TRUE(engine.has_value()) << engine.status().message();
        const Tally t = tally(ask_all(**engine, trials, true), control);
        if (c.bits == 32) f32_gain = t.gain;
        std::printf(
            "kv %-14s: %d / %zu retrieved (greedy %d), log-likelihood %+.2f nats over the control "
            "(f32 %+.2f), least margin %.2f nats\n",
            kv_name(c.bits, c.window).c_str(), t.retrieved, trials.size(), t.greedy, t.gain, f32_gain,
            t.least_margin);
        // Every type, q3 included: every fact. The likelihood the fact lends its value may shrink
        // with the cache's precision — f16 and q8 by under 1%, q4 by under 5%, q3 by under 15% —
        // measured 0%, 0%, 1–2% and 5–7%.
        EXPECT_EQ(t.retrieved, static_cast<int>(trials.size()));
        const double keep = c.bits >= 8 ? 0.99 : c.bits == 4 ? 0.95 : 0.85;
        EXPECT_GE(t.gain, keep * f32_gain);
    }
}

// The measured table of bench/results/kv/retrieval.md: 20 facts per haystack range, every type (about
// 5 minutes on 2 cores, so not run by default):
//   sluice_tests --gtest_also_run_disabled_tests --gtest_filter=KvRetrieval.DISABLED_Table
TEST(KvRetrieval, DISABLED_Table) {
    auto f32 = load(32, 0);
    ASSERT_TRUE(f32.has_value()) << f32.status().message();
    const Haystack h = heldout_haystack(*(*f32)->tokenizer());
    struct Range {
        size_t min_tokens, max_tokens;
    };
    for (const Range r : {Range{1000, 2000}, Range{2000, 3500}}) {
        const std::vector<Trial> trials =
            make_trials(h, 1600 + static_cast<uint32_t>(r.min_tokens), 20, r.min_tokens, r.max_tokens);
        const std::vector<Answer> control = ask_all(**f32, trials, false);
        std::printf("\nhaystacks of %zu-%zu tokens, %zu facts\n\n", r.min_tokens, r.max_tokens,
                    trials.size());
        std::printf(
            "| KV cache | retrieved | depth 0-0.2 | 0.2-0.4 | 0.4-0.6 | 0.6-0.8 | 0.8-1 | "
            "log-likelihood over the control, nats | least margin, nats | greedy |\n");
        std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
        const auto row = [&](const std::string& name, const std::vector<Answer>& got) {
            const Tally t = tally(got, control);
            int by_depth[5] = {0, 0, 0, 0, 0}, of_depth[5] = {0, 0, 0, 0, 0};
            for (size_t i = 0; i < trials.size(); ++i) {
                const int d = std::min(4, static_cast<int>(trials[i].depth * 5));
                by_depth[d] += got[i].retrieved();
                ++of_depth[d];
            }
            std::printf("| %s | %d / %zu |", name.c_str(), t.retrieved, trials.size());
            for (int d = 0; d < 5; ++d) std::printf(" %d / %d |", by_depth[d], of_depth[d]);
            std::printf(" %+.2f | %.2f | %d |\n", t.gain, t.least_margin, t.greedy);
        };
        row("control (f32, nothing planted)", control);
        for (const Config& c : kConfigs) {
            auto engine = c.bits == 32 ? f32 : load(c.bits, c.window);
            ASSERT_TRUE(engine.has_value()) << engine.status().message();
            row(kv_name(c.bits, c.window), ask_all(**engine, trials, true));
        }
    }
}

}  // namespace
}  // namespace sluice
