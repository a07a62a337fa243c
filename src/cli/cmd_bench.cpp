// `sluice bench MODEL_DIR`: prefill and decode speed with the hardware use behind it, following
// ../shared/docs/benchmarking.md — mean ± sd over repetitions, TTFT, peak RSS, expert-cache hit
// rate, bytes read per token, achieved read GB/s, prefetch accuracy, and the speed-of-light bound
// from the disk and memory bandwidth measured in the same run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "cli/stats.h"
#include "sluice/engine.h"
#include "sluice/session.h"

namespace sluice::cli {
namespace {

struct BenchOptions {
    EngineFlags engine;
    std::string model_dir;
    int64_t prompt_tokens = 128;
    int64_t gen_tokens = 32;
    int reps = 3;
    int warmup = 0;  // untimed reps before the measured ones
    std::string json_path;
    std::string stats_json;
    int64_t prefill_chunk = 256;
    int64_t history_tokens = 0;  // > 0: the multi-turn TTFT measurement instead
    int64_t shared_prefix = 0;   // > 0: the prefix-cache TTFT measurement instead
    int sequences = 0;           // > 0: the batched-decode measurement instead
    int clients = 0;             // > 0: that many concurrent generations (continuous batching) instead
    int verify_curve = 0;        // > 0: the speculative step-cost curve instead, k = 1..this
    // llama-bench-style sweeps: -p/-n/--prefill-chunk take comma lists; every combination runs (the
    // model loaded for each, its context sized to it) and a table of them ends the output.
    std::vector<int64_t> prompt_list{128}, gen_list{32}, chunk_list{256};
};

struct MeanSd {
    double mean = 0, sd = 0;
};
MeanSd mean_sd(const std::vector<double>& v) {
    MeanSd r;
    if (v.empty()) return r;
    for (double x : v) r.mean += x;
    r.mean /= static_cast<double>(v.size());
    for (double x : v) r.sd += (x - r.mean) * (x - r.mean);
    r.sd = v.size() > 1 ? std::sqrt(r.sd / static_cast<double>(v.size() - 1)) : 0;
    return r;
}

// The fields every measurement's JSON starts with: what ran, where.
nlohmann::json run_json(const Engine& engine, const BenchOptions& o) {
    return {{"model", o.model_dir},
            {"family", engine.info().family},
            {"synthetic_weights", engine.info().synthetic},
            {"device", engine.backend_name()},
            {"threads", o.engine.threads}};
}

std::vector<int32_t> random_tokens(int64_t n, uint32_t seed, int64_t vocab) {
    std::mt19937 rng(seed);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (auto& id : ids)
        id = static_cast<int32_t>(rng() % static_cast<uint32_t>(std::min<int64_t>(vocab, 150000)));
    return ids;
}

// Multi-turn state reuse (`--history N`): the time to first token of a new message of
// --prompt-tokens tokens as the first turn of a conversation (a fresh session) against the same
// message as a later turn after an N-token history that the session already holds. Turn-2
// requests reuse the history from the session's checkpoint, so only the message is computed;
// the two kinds alternate (A B A B …) so drift in disk or cache state hits both alike.
void run_multi_turn(Engine& engine, const BenchOptions& o) {
    const int64_t vocab = engine.info().vocab_size;
    const std::vector<int32_t> history = random_tokens(o.history_tokens, 4321, vocab);
    GenerateOptions go;
    go.max_tokens = 1;
    go.ignore_eos = true;
    go.prefill_chunk_tokens = o.prefill_chunk;
    go.sampling.temperature = 0.0f;
    auto conversation = engine.new_session();
    std::fprintf(stderr, "history: prefilling %lld tokens...\n", static_cast<long long>(o.history_tokens));
    check(conversation->generate(history, go, nullptr));
    const GenerationStats h = conversation->stats();
    std::fprintf(stderr, "history: %.1f s (%.2f tok/s)\n", h.prefill_ms / 1e3, h.prefill_tok_s());

    std::vector<double> first, later, later_computed;
    nlohmann::json reps = nlohmann::json::array();
    for (int r = 0; r < o.reps; ++r) {
        const std::vector<int32_t> message =
            random_tokens(o.prompt_tokens, 77 + static_cast<uint32_t>(r), vocab);
        std::vector<int32_t> turn2 = history;
        turn2.insert(turn2.end(), message.begin(), message.end());
        double t1 = 0, t2 = 0;
        int64_t computed2 = 0;
        for (int k = 0; k < 2; ++k) {
            if ((k == 0) == (r % 2 == 0)) {
                auto fresh = engine.new_session();
                check(fresh->generate(message, go, nullptr));
                t1 = fresh->stats().ttft_ms;
            } else {
                check(conversation->generate(turn2, go, nullptr));
                t2 = conversation->stats().ttft_ms;
                computed2 = conversation->stats().prefilled_tokens;
            }
        }
        first.push_back(t1);
        later.push_back(t2);
        later_computed.push_back(static_cast<double>(computed2));
        reps.push_back({{"first_turn_ttft_ms", t1},
                        {"later_turn_ttft_ms", t2},
                        {"later_turn_computed_tokens", computed2}});
        std::fprintf(
            stderr,
            "rep %d: first turn TTFT %.0f ms, turn after %lld-token history %.0f ms (%lld tokens computed)\n",
            r + 1, t1, static_cast<long long>(o.history_tokens), t2, static_cast<long long>(computed2));
    }
    const MeanSd a = mean_sd(first), b = mean_sd(later);
    std::printf("model            %s (%s, %s)\n", o.model_dir.c_str(), engine.info().family.c_str(),
                engine.info().quantization.c_str());
    std::printf("memory budget    %.2f GB, peak RSS %.2f GB\n", engine.memory_plan().budget_bytes / 1e9,
                peak_rss_bytes() / 1e9);
    std::printf("history          %lld tokens, prefilled in %.1f s\n",
                static_cast<long long>(o.history_tokens), h.prefill_ms / 1e3);
    std::printf("first turn TTFT  %.0f ± %.0f ms (%lld-token message, fresh session)\n", a.mean, a.sd,
                static_cast<long long>(o.prompt_tokens));
    std::printf("later turn TTFT  %.0f ± %.0f ms (same message after the history; %.0f tokens computed)\n",
                b.mean, b.sd, mean_sd(later_computed).mean);
    std::printf("ratio            %.2f\n", b.mean / a.mean);
    if (!o.json_path.empty()) {
        nlohmann::json out = {{"model", o.model_dir},
                              {"family", engine.info().family},
                              {"synthetic_weights", engine.info().synthetic},
                              {"memory_budget_bytes", engine.memory_plan().budget_bytes},
                              {"peak_rss_bytes", peak_rss_bytes()},
                              {"history_tokens", o.history_tokens},
                              {"history_prefill_ms", h.prefill_ms},
                              {"message_tokens", o.prompt_tokens},
                              {"prefill_chunk_tokens", o.prefill_chunk},
                              {"first_turn_ttft_ms", {{"mean", a.mean}, {"sd", a.sd}}},
                              {"later_turn_ttft_ms", {{"mean", b.mean}, {"sd", b.sd}}},
                              {"ratio", b.mean / a.mean},
                              {"reps", reps}};
        write_output(o.json_path, out.dump(2) + "\n", "--json");
    }
}

// The prefix cache (`--shared-prefix N`): conversations whose prompts share an N-token prefix (a
// system prompt, tool block or document) and differ in a --prompt-tokens message after it, each in a
// fresh session, as a server's new conversations are. Per rep, with the engine's prefix cache emptied:
// the first conversation computes the prefix (and stores it), the second and the third restore it.
// The second resumes at the last block boundary the first stored a running state at (for a hybrid
// model: a multiple of the chunk, or the first prompt's last boundary more than 16 tokens before its
// end); the first conversation that resumes inside the shared prefix stores a state where it leaves
// the cached blocks, so the third resumes within a block of the shared end.
void run_shared_prefix(Engine& engine, const BenchOptions& o) {
    const int64_t vocab = engine.info().vocab_size;
    const std::vector<int32_t> prefix = random_tokens(o.shared_prefix, 2468, vocab);
    GenerateOptions go;
    go.max_tokens = 1;
    go.ignore_eos = true;
    go.prefill_chunk_tokens = o.prefill_chunk;
    go.sampling.temperature = 0.0f;
    std::vector<double> ttft[3], computed[3];
    nlohmann::json reps = nlohmann::json::array();
    for (int r = -o.warmup; r < o.reps; ++r) {
        engine.clear_prefix_cache();
        double t[3] = {0, 0, 0};
        int64_t c[3] = {0, 0, 0};
        for (int k = 0; k < 3; ++k) {
            std::vector<int32_t> prompt = prefix;
            const std::vector<int32_t> message =
                random_tokens(o.prompt_tokens, 5151u + static_cast<uint32_t>((r + o.warmup) * 3 + k), vocab);
            prompt.insert(prompt.end(), message.begin(), message.end());
            auto session = engine.new_session();
            check(session->generate(prompt, go, nullptr));
            t[k] = session->stats().ttft_ms;
            c[k] = session->stats().prefilled_tokens;
        }
        std::fprintf(
            stderr,
            "%srep %d: first conversation TTFT %.0f ms (%lld computed), second %.0f ms (%lld), third "
            "%.0f ms (%lld)\n",
            r < 0 ? "warm-up " : "", r + 1, t[0], static_cast<long long>(c[0]), t[1],
            static_cast<long long>(c[1]), t[2], static_cast<long long>(c[2]));
        if (r < 0) continue;
        for (int k = 0; k < 3; ++k) {
            ttft[k].push_back(t[k]);
            computed[k].push_back(static_cast<double>(c[k]));
        }
        reps.push_back({{"ttft_ms", {t[0], t[1], t[2]}}, {"computed_tokens", {c[0], c[1], c[2]}}});
    }
    const MeanSd a = mean_sd(ttft[0]), b = mean_sd(ttft[1]), c = mean_sd(ttft[2]);
    const PrefixCacheStats cache = engine.prefix_cache_stats();
    std::printf("model            %s (%s, %s) on %s\n", o.model_dir.c_str(), engine.info().family.c_str(),
                engine.info().quantization.c_str(), engine.backend_name().c_str());
    std::printf("prompts          a %lld-token shared prefix + a %lld-token message, fresh session each\n",
                static_cast<long long>(o.shared_prefix), static_cast<long long>(o.prompt_tokens));
    std::printf(
        "prefix cache     %.1f MB budget, %.1f MB held after the last rep (%lld blocks of %lld tokens)\n",
        static_cast<double>(cache.budget_bytes) / 1e6, static_cast<double>(cache.bytes) / 1e6,
        static_cast<long long>(cache.blocks), static_cast<long long>(cache.block_tokens));
    std::printf("first TTFT       %.0f ± %.0f ms (%.0f tokens computed)\n", a.mean, a.sd,
                mean_sd(computed[0]).mean);
    std::printf("second TTFT      %.0f ± %.0f ms (%.0f tokens computed) → %.1f%% of the first\n", b.mean,
                b.sd, mean_sd(computed[1]).mean, 100 * b.mean / a.mean);
    std::printf("third TTFT       %.0f ± %.0f ms (%.0f tokens computed) → %.1f%% of the first\n", c.mean,
                c.sd, mean_sd(computed[2]).mean, 100 * c.mean / a.mean);
    if (!o.json_path.empty()) {
        nlohmann::json out = run_json(engine, o);
        out.update({{"shared_prefix_tokens", o.shared_prefix},
                    {"message_tokens", o.prompt_tokens},
                    {"prefill_chunk_tokens", o.prefill_chunk},
                    {"prefix_cache_budget_bytes", cache.budget_bytes},
                    {"first_ttft_ms", {{"mean", a.mean}, {"sd", a.sd}}},
                    {"second_ttft_ms", {{"mean", b.mean}, {"sd", b.sd}}},
                    {"third_ttft_ms", {{"mean", c.mean}, {"sd", c.sd}}},
                    {"second_over_first", b.mean / a.mean},
                    {"third_over_first", c.mean / a.mean},
                    {"computed_tokens",
                     {mean_sd(computed[0]).mean, mean_sd(computed[1]).mean, mean_sd(computed[2]).mean}},
                    {"peak_rss_bytes", peak_rss_bytes()},
                    {"reps", reps}});
        write_output(o.json_path, out.dump(2) + "\n", "--json");
    }
}

// Batched decode (`--sequences N`): N conversations, each prefilled with its own --prompt-tokens
// prompt, then --gen-tokens greedy decode steps for all of them — once as one Engine::evaluate_batch
// of N tokens per step (one forward: each weight and each routed expert read once for every
// sequence) and once as N Session::evaluate calls per step (one forward per sequence, as
// `serve --parallel` did). The two alternate by rep. Each gives every sequence the same tokens.
void run_batched(Engine& engine, const BenchOptions& o) {
    const int64_t V = engine.info().vocab_size;
    const int n = o.sequences;
    auto argmax = [&](const std::vector<float>& l) {
        return static_cast<int32_t>(std::max_element(l.begin(), l.begin() + V) - l.begin());
    };
    std::vector<double> batched_tok_s, serial_tok_s, batched_read, serial_read;
    nlohmann::json reps = nlohmann::json::array();
    for (int r = 0; r < o.warmup + o.reps; ++r) {
        double tok_s[2] = {0, 0}, read[2] = {0, 0};
        for (int k = 0; k < 2; ++k) {
            const bool batched = (k == 0) == (r % 2 == 0);
            std::vector<std::unique_ptr<Session>> sessions;
            std::vector<int32_t> next(static_cast<size_t>(n));
            for (int i = 0; i < n; ++i) {
                sessions.push_back(engine.new_session());
                const auto prompt = random_tokens(o.prompt_tokens, 1000u + static_cast<uint32_t>(i), V);
                next[static_cast<size_t>(i)] =
                    argmax(check(sessions.back()->evaluate(prompt, false, o.prefill_chunk)));
            }
            engine.reset_expert_cache_stats();
            const auto t0 = std::chrono::steady_clock::now();
            for (int64_t step = 0; step < o.gen_tokens; ++step) {
                if (batched) {
                    std::vector<BatchEvaluation> items(static_cast<size_t>(n));
                    for (int i = 0; i < n; ++i)
                        items[static_cast<size_t>(i)] = {
                            sessions[static_cast<size_t>(i)].get(),
                            std::span<const int32_t>(&next[static_cast<size_t>(i)], 1),
                            false,
                            {}};
                    check(engine.evaluate_batch(items));
                    for (int i = 0; i < n; ++i)
                        next[static_cast<size_t>(i)] = argmax(items[static_cast<size_t>(i)].logits);
                } else {
                    for (int i = 0; i < n; ++i) {
                        auto& id = next[static_cast<size_t>(i)];
                        id = argmax(check(sessions[static_cast<size_t>(i)]->evaluate(
                            std::span<const int32_t>(&id, 1), false)));
                    }
                }
            }
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            tok_s[batched ? 0 : 1] = static_cast<double>(n * o.gen_tokens) / s;
            read[batched ? 0 : 1] = static_cast<double>(engine.expert_cache_stats().bytes_read) /
                                    static_cast<double>(n * o.gen_tokens);
        }
        std::fprintf(stderr,
                     "%srep %d: batched %.2f tok/s (%.1f MB read/token), one by one %.2f tok/s (%.1f MB)\n",
                     r < o.warmup ? "warm-up " : "", r + 1, tok_s[0], read[0] / 1e6, tok_s[1], read[1] / 1e6);
        if (r < o.warmup) continue;
        batched_tok_s.push_back(tok_s[0]);
        serial_tok_s.push_back(tok_s[1]);
        batched_read.push_back(read[0]);
        serial_read.push_back(read[1]);
        reps.push_back({{"batched_tok_s", tok_s[0]},
                        {"one_by_one_tok_s", tok_s[1]},
                        {"batched_bytes_read_per_token", read[0]},
                        {"one_by_one_bytes_read_per_token", read[1]}});
    }
    const MeanSd b = mean_sd(batched_tok_s), s = mean_sd(serial_tok_s);
    std::printf("model            %s (%s, %s) on %s\n", o.model_dir.c_str(), engine.info().family.c_str(),
                engine.info().quantization.c_str(), engine.backend_name().c_str());
    std::printf("sequences        %d, each %lld prompt + %lld decode tokens\n", n,
                static_cast<long long>(o.prompt_tokens), static_cast<long long>(o.gen_tokens));
    std::printf("batched decode   %.2f ± %.2f tok/s in all (%.1f MB of experts read per token)\n", b.mean,
                b.sd, mean_sd(batched_read).mean / 1e6);
    std::printf("one by one       %.2f ± %.2f tok/s in all (%.1f MB per token)\n", s.mean, s.sd,
                mean_sd(serial_read).mean / 1e6);
    std::printf("ratio            %.2f\n", b.mean / s.mean);
    if (!o.json_path.empty()) {
        nlohmann::json out = run_json(engine, o);
        out.update({{"sequences", n},
                    {"prompt_tokens", o.prompt_tokens},
                    {"gen_tokens", o.gen_tokens},
                    {"batched_tok_s", {{"mean", b.mean}, {"sd", b.sd}}},
                    {"one_by_one_tok_s", {{"mean", s.mean}, {"sd", s.sd}}},
                    {"ratio", b.mean / s.mean},
                    {"peak_rss_bytes", peak_rss_bytes()},
                    {"reps", reps}});
        write_output(o.json_path, out.dump(2) + "\n", "--json");
    }
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double at = p * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(at);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

// Concurrent clients (`--clients N`): N generations started together, each on its own session with
// its own --prompt-tokens prompt and --gen-tokens greedy tokens, as N server requests would run —
// their forwards batched by the engine (runtime/step_batcher.h). Reports the aggregate decode rate
// (every generated token over the wall time), each stream's rate, time to first token and the
// gaps between a stream's tokens (p50 / p99), the mean batch size and expert bytes read per token.
void run_clients(Engine& engine, const BenchOptions& o) {
    const int64_t V = engine.info().vocab_size;
    const int n = o.clients;
    std::vector<double> aggregate, stream_rates, ttft, gaps, batch_sizes, read_per_token;
    nlohmann::json reps = nlohmann::json::array();
    for (int r = 0; r < o.warmup + o.reps; ++r) {
        std::vector<std::unique_ptr<Session>> sessions;
        std::vector<std::vector<int32_t>> prompts;
        for (int i = 0; i < n; ++i) {
            sessions.push_back(engine.new_session());
            prompts.push_back(random_tokens(o.prompt_tokens, 5000u + static_cast<uint32_t>(r * 256 + i), V));
        }
        GenerateOptions g;
        g.max_tokens = o.gen_tokens;
        g.sampling.temperature = 0.0f;
        g.ignore_eos = true;
        g.prefill_chunk_tokens = o.prefill_chunk;
        std::mutex mu;
        std::vector<double> rep_ttft, rep_gaps, rep_rates;
        std::vector<std::string> errors;
        engine.reset_expert_cache_stats();
        const BatchingStats before = engine.batching_stats();
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> threads;
        int64_t generated = 0;
        for (int i = 0; i < n; ++i) {
            threads.emplace_back([&, i] {
                auto last = std::chrono::steady_clock::now();
                std::vector<double> my_gaps;
                bool first = true;
                auto result = sessions[static_cast<size_t>(i)]->generate(
                    prompts[static_cast<size_t>(i)], g, [&](const TokenEvent&) {
                        const auto now = std::chrono::steady_clock::now();
                        if (!first)
                            my_gaps.push_back(std::chrono::duration<double, std::milli>(now - last).count());
                        first = false;
                        last = now;
                        return true;
                    });
                std::lock_guard<std::mutex> lock(mu);
                if (!result.has_value()) {
                    errors.push_back(result.status().message());
                    return;
                }
                rep_ttft.push_back(result->stats.ttft_ms);
                rep_rates.push_back(result->stats.decode_tok_s());
                rep_gaps.insert(rep_gaps.end(), my_gaps.begin(), my_gaps.end());
                generated += result->stats.generated_tokens;
            });
        }
        for (auto& t : threads) t.join();
        if (!errors.empty()) throw CliError("--clients: a generation failed: " + errors.front());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const BatchingStats after = engine.batching_stats();
        const double agg = static_cast<double>(generated) / s;
        const double per_forward = after.forwards > before.forwards
                                       ? static_cast<double>(after.steps - before.steps) /
                                             static_cast<double>(after.forwards - before.forwards)
                                       : 1.0;
        const double read = static_cast<double>(engine.expert_cache_stats().bytes_read) /
                            static_cast<double>(std::max<int64_t>(generated, 1));
        std::fprintf(stderr,
                     "%srep %d: %d clients, %.2f tok/s in all, stream median %.2f tok/s, TTFT p50 %.0f ms, "
                     "token gap p50 %.1f / p99 %.1f ms, %.2f steps per forward\n",
                     r < o.warmup ? "warm-up " : "", r + 1, n, agg, percentile(rep_rates, 0.5),
                     percentile(rep_ttft, 0.5), percentile(rep_gaps, 0.5), percentile(rep_gaps, 0.99),
                     per_forward);
        if (r < o.warmup) continue;
        aggregate.push_back(agg);
        stream_rates.insert(stream_rates.end(), rep_rates.begin(), rep_rates.end());
        ttft.insert(ttft.end(), rep_ttft.begin(), rep_ttft.end());
        gaps.insert(gaps.end(), rep_gaps.begin(), rep_gaps.end());
        batch_sizes.push_back(per_forward);
        read_per_token.push_back(read);
        reps.push_back(
            {{"aggregate_tok_s", agg}, {"steps_per_forward", per_forward}, {"bytes_read_per_token", read}});
    }
    const MeanSd a = mean_sd(aggregate);
    std::printf("model            %s (%s, %s) on %s\n", o.model_dir.c_str(), engine.info().family.c_str(),
                engine.info().quantization.c_str(), engine.backend_name().c_str());
    std::printf("clients          %d, each %lld prompt + %lld greedy tokens\n", n,
                static_cast<long long>(o.prompt_tokens), static_cast<long long>(o.gen_tokens));
    std::printf("aggregate decode %.2f ± %.2f tok/s\n", a.mean, a.sd);
    std::printf("per stream       p50 %.2f tok/s\n", percentile(stream_rates, 0.5));
    std::printf("TTFT             p50 %.1f ms, p99 %.1f ms\n", percentile(ttft, 0.5), percentile(ttft, 0.99));
    std::printf("token gap        p50 %.2f ms, p99 %.2f ms\n", percentile(gaps, 0.5), percentile(gaps, 0.99));
    std::printf("batching         %.2f steps per forward; %.1f MB of experts read per token\n",
                mean_sd(batch_sizes).mean, mean_sd(read_per_token).mean / 1e6);
    if (!o.json_path.empty()) {
        nlohmann::json out = run_json(engine, o);
        out.update({{"clients", n},
                    {"prompt_tokens", o.prompt_tokens},
                    {"gen_tokens", o.gen_tokens},
                    {"aggregate_tok_s", {{"mean", a.mean}, {"sd", a.sd}}},
                    {"stream_tok_s_p50", percentile(stream_rates, 0.5)},
                    {"ttft_ms", {{"p50", percentile(ttft, 0.5)}, {"p99", percentile(ttft, 0.99)}}},
                    {"token_gap_ms", {{"p50", percentile(gaps, 0.5)}, {"p99", percentile(gaps, 0.99)}}},
                    {"steps_per_forward", mean_sd(batch_sizes).mean},
                    {"bytes_read_per_token", mean_sd(read_per_token).mean},
                    {"peak_rss_bytes", peak_rss_bytes()},
                    {"reps", reps}});
        write_output(o.json_path, out.dump(2) + "\n", "--json");
    }
}

// Speculative step cost (`--verify-curve K`): after a --prompt-tokens prompt, the time of one
// forward of n = 1..K+1 tokens with every row's logits — what verifying k = n − 1 proposals costs
// against a plain decode step (n = 1) — and the expert bytes it reads (the union of its tokens'
// experts). Each measurement starts from the same state (checkpoint, forward, truncate back), with
// fresh random tokens so the routing is not repeated; the sizes alternate within each rep. The
// implied speedup of k proposals at a per-proposal acceptance α is (1 − α^(k+1)) / (1 − α) tokens
// per step over the step's cost relative to n = 1 (a drafter whose cost is negligible, as MTP is).
void run_verify_curve(Engine& engine, const BenchOptions& o) {
    const int64_t V = engine.info().vocab_size;
    const int kmax = o.verify_curve;
    auto session = engine.new_session();
    const std::vector<int32_t> prompt = random_tokens(o.prompt_tokens, 4242, V);
    check(session->evaluate(prompt, false, o.prefill_chunk));
    const auto p0 = static_cast<int64_t>(prompt.size());
    std::vector<std::vector<double>> ms(static_cast<size_t>(kmax + 2)), bytes(static_cast<size_t>(kmax + 2));
    for (int r = 0; r < o.warmup + o.reps; ++r) {
        for (int j = 0; j <= kmax; ++j) {
            const int n = (r % 2 == 0) ? j + 1 : kmax + 1 - j;  // up, then down
            const auto tokens = random_tokens(n, 9000u + static_cast<uint32_t>(r * 64 + n), V);
            check(session->checkpoint());
            engine.reset_expert_cache_stats();
            const auto t0 = std::chrono::steady_clock::now();
            // The verification step's own path (speculative.cpp verifies through evaluate_as_decode).
            check(session->evaluate_as_decode(tokens, true));
            const double t =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            const uint64_t read =
                engine.expert_cache_stats().bytes_read + engine.gpu_expert_cache_stats().bytes_copied;
            if (check(session->truncate(p0)) != p0)
                throw CliError("the session could not return to the prompt");
            if (r < o.warmup) continue;
            ms[static_cast<size_t>(n)].push_back(t);
            bytes[static_cast<size_t>(n)].push_back(static_cast<double>(read));
        }
    }
    const double base = mean_sd(ms[1]).mean;
    std::printf("model            %s (%s, %s) on %s\n", o.model_dir.c_str(), engine.info().family.c_str(),
                engine.info().quantization.c_str(), engine.backend_name().c_str());
    std::printf("step cost        one forward of n tokens (all logits) after a %lld-token prompt, %d reps\n",
                static_cast<long long>(o.prompt_tokens), o.reps);
    std::printf("%4s %12s %8s %14s %10s %10s %10s\n", "n", "ms", "x n=1", "MB read", "a=0.5", "a=0.7",
                "a=0.9");
    nlohmann::json rows = nlohmann::json::array();
    for (int n = 1; n <= kmax + 1; ++n) {
        const MeanSd m = mean_sd(ms[static_cast<size_t>(n)]);
        const double rel = m.mean / base, mb = mean_sd(bytes[static_cast<size_t>(n)]).mean / 1e6;
        auto implied = [&](double a) { return (1 - std::pow(a, n)) / (1 - a) / rel; };
        std::printf("%4d %8.2f±%-4.2f %7.2fx %14.1f %9.2fx %9.2fx %9.2fx\n", n, m.mean, m.sd, rel, mb,
                    implied(0.5), implied(0.7), implied(0.9));
        rows.push_back(
            {{"tokens", n},
             {"ms", {{"mean", m.mean}, {"sd", m.sd}}},
             {"relative_to_one", rel},
             {"expert_mb_read", mb},
             {"implied_speedup", {{"0.5", implied(0.5)}, {"0.7", implied(0.7)}, {"0.9", implied(0.9)}}}});
    }
    if (!o.json_path.empty()) {
        nlohmann::json out = run_json(engine, o);
        out.update({{"memory_plan", engine.memory_plan().describe()},
                    {"prompt_tokens", o.prompt_tokens},
                    {"reps", o.reps},
                    {"warmup", o.warmup},
                    {"steps", rows}});
        write_output(o.json_path, out.dump(2) + "\n", "--json");
    }
}

// One measurement; the default mode returns its JSON record (the other modes write their own).
nlohmann::json run_bench(const BenchOptions& o) {
    EngineOptions eo;
    eo.model_dir = o.model_dir;
    o.engine.apply(eo);
    eo.context_tokens = o.history_tokens + o.shared_prefix + o.prompt_tokens +
                        std::max<int64_t>(o.gen_tokens, o.verify_curve + 1) + 8;
    eo.max_sessions = o.clients > 0     ? o.clients
                      : o.sequences > 0 ? o.sequences
                                        : (o.history_tokens > 0 ? 2 : 1);  // the multi-turn mode holds two
    auto engine = check(Engine::load(eo));
    const ModelInfo& info = engine->info();
    const MemoryPlan& plan = engine->memory_plan();
    std::fprintf(stderr, "%s: %s, %lld layers, %lld of %lld experts per token, %s, %s kernels\n",
                 o.model_dir.c_str(), info.family.c_str(), static_cast<long long>(info.n_layers),
                 static_cast<long long>(info.experts_per_token), static_cast<long long>(info.n_experts),
                 info.quantization.c_str(), Engine::cpu_kernels());
    std::fprintf(stderr, "%s\n", plan.describe().c_str());
    const bool on_gpu = o.engine.device != "cpu";
    std::fprintf(stderr, "device: %s\n", engine->backend_name().c_str());
    {
        // A preload (every expert fits --memory) is still reading: wait, so neither the bandwidth
        // probes nor the timed reps run against it.
        const auto t0 = std::chrono::steady_clock::now();
        engine->wait_for_expert_reads();
        const uint64_t read = engine->expert_cache_stats().bytes_read;  // nothing else has run yet
        if (read > 0)
            std::fprintf(stderr, "preloaded: %.2f GB of experts (waited %.1f s for the last of them)\n",
                         static_cast<double>(read) / 1e9,
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }

    if (o.history_tokens > 0) {
        run_multi_turn(*engine, o);
        return {};
    }
    if (o.shared_prefix > 0) {
        run_shared_prefix(*engine, o);
        return {};
    }
    if (o.sequences > 0) {
        run_batched(*engine, o);
        return {};
    }
    if (o.clients > 0) {
        run_clients(*engine, o);
        return {};
    }
    if (o.verify_curve > 0) {
        run_verify_curve(*engine, o);
        return {};
    }
    // On a GPU the ceiling is HBM: a device copy's bandwidth (read + write bytes).
    const double mem_gb_s = on_gpu ? engine->measure_device_memory_gb_s() : measure_memory_read_gb_s(2);
    // Several GPUs: one MoE layer's all-reduce, for a decode token and for a prefill chunk.
    const double all_reduce_us_1 = on_gpu ? engine->measure_all_reduce_us(1) : 0.0;
    const double all_reduce_us_chunk =
        all_reduce_us_1 > 0 ? engine->measure_all_reduce_us(o.prefill_chunk) : 0.0;
    if (all_reduce_us_1 > 0)
        std::fprintf(
            stderr,
            "measured: the expert-parallel all-reduce per MoE layer %.1f µs (1 token), %.1f µs (%lld)\n",
            all_reduce_us_1, all_reduce_us_chunk, static_cast<long long>(o.prefill_chunk));
    double disk_gb_s = 0;
    if (plan.streaming)
        disk_gb_s = measure_expert_read_gb_s(o.model_dir, plan.slot_bytes, o.engine.io_threads, 3.0);
    std::fprintf(
        stderr, "measured: memory read %.1f GB/s; expert-record O_DIRECT reads %.2f GB/s at queue depth %d\n",
        mem_gb_s, disk_gb_s, o.engine.io_threads);

    std::vector<double> prefill, decode, ttft, hit, bytes_per_tok, read_gb_s, pf_acc, prefill_read;
    std::vector<double> gpu_hit, gpu_copy_per_tok, gpu_copy_gb_s, gpu_pf_acc, gpu_wait_per_tok;
    nlohmann::json reps = nlohmann::json::array();
    GenerationStats last_gen;
    ExpertCacheStats last_cache;
    for (int r = -o.warmup; r < o.reps; ++r) {  // r < 0: untimed warm-up reps
        std::mt19937 rng(static_cast<uint32_t>(1234 + r));
        std::vector<int32_t> prompt(static_cast<size_t>(o.prompt_tokens));
        for (auto& id : prompt)
            id = static_cast<int32_t>(rng() %
                                      static_cast<uint32_t>(std::min<int64_t>(info.vocab_size, 150000)));
        auto session = engine->new_session();
        engine->reset_expert_cache_stats();
        ExpertCacheStats after_prefill;
        GpuExpertCacheStats gpu_after_prefill;
        bool first = true;
        GenerateOptions go;
        go.max_tokens = o.gen_tokens;
        go.ignore_eos = true;
        go.prefill_chunk_tokens = o.prefill_chunk;
        go.sampling.temperature = 0.0f;
        check(session->generate(prompt, go, [&](const TokenEvent&) {
            if (first) {
                after_prefill = engine->expert_cache_stats();
                gpu_after_prefill = engine->gpu_expert_cache_stats();
            }
            first = false;
            return true;
        }));
        const GenerationStats& g = session->stats();
        if (r < 0) {
            std::fprintf(stderr, "warm-up rep: prefill %.2f tok/s, decode %.2f tok/s (not counted)\n",
                         g.prefill_tok_s(), g.decode_tok_s());
            continue;
        }
        const ExpertCacheStats end = engine->expert_cache_stats();
        const GpuExpertCacheStats gpu_end = engine->gpu_expert_cache_stats();
        GpuExpertCacheStats gdec;  // decode-phase GPU tier counters
        gdec.hits = gpu_end.hits - gpu_after_prefill.hits;
        gdec.misses = gpu_end.misses - gpu_after_prefill.misses;
        gdec.bytes_copied = gpu_end.bytes_copied - gpu_after_prefill.bytes_copied;
        gdec.copy_s = gpu_end.copy_s - gpu_after_prefill.copy_s;
        gdec.wait_s = gpu_end.wait_s - gpu_after_prefill.wait_s;
        gdec.prefetch_issued = gpu_end.prefetch_issued - gpu_after_prefill.prefetch_issued;
        gdec.prefetch_used = gpu_end.prefetch_used - gpu_after_prefill.prefetch_used;
        ExpertCacheStats dec;  // decode-phase counters
        dec.hits = end.hits - after_prefill.hits;
        dec.misses = end.misses - after_prefill.misses;
        dec.bytes_read = end.bytes_read - after_prefill.bytes_read;
        dec.io_busy_s = end.io_busy_s - after_prefill.io_busy_s;
        dec.prefetch_issued = end.prefetch_issued - after_prefill.prefetch_issued;
        dec.prefetch_used = end.prefetch_used - after_prefill.prefetch_used;
        const double dec_tokens = static_cast<double>(std::max<int64_t>(1, g.generated_tokens - 1));
        prefill.push_back(g.prefill_tok_s());
        prefill_read.push_back(static_cast<double>(after_prefill.bytes_read));
        decode.push_back(g.decode_tok_s());
        ttft.push_back(g.ttft_ms);
        hit.push_back(dec.hit_rate());
        bytes_per_tok.push_back(static_cast<double>(dec.bytes_read) / dec_tokens);
        read_gb_s.push_back(end.read_gb_s());
        pf_acc.push_back(dec.prefetch_issued ? static_cast<double>(dec.prefetch_used) /
                                                   static_cast<double>(dec.prefetch_issued)
                                             : 0);
        if (gpu_end.tiered) {
            gpu_hit.push_back(gdec.hit_rate());
            gpu_copy_per_tok.push_back(static_cast<double>(gdec.bytes_copied) / dec_tokens);
            gpu_copy_gb_s.push_back(gdec.copy_gb_s());
            gpu_pf_acc.push_back(gdec.prefetch_issued ? static_cast<double>(gdec.prefetch_used) /
                                                            static_cast<double>(gdec.prefetch_issued)
                                                      : 0);
            gpu_wait_per_tok.push_back(gdec.wait_s / dec_tokens);
            std::fprintf(stderr,
                         "  GPU expert tier: decode hit rate %.1f%%, %.1f MB copied/token at %.1f GB/s, "
                         "prefetch accuracy %.1f%%, host-tier wait %.2f ms/token\n",
                         100 * gpu_hit.back(), gpu_copy_per_tok.back() / 1e6, gpu_copy_gb_s.back(),
                         100 * gpu_pf_acc.back(), 1e3 * gpu_wait_per_tok.back());
        }
        reps.push_back({{"prefill_tok_s", prefill.back()},
                        {"decode_tok_s", decode.back()},
                        {"ttft_ms", ttft.back()},
                        {"decode_hit_rate", hit.back()},
                        {"decode_bytes_read_per_token", bytes_per_tok.back()},
                        {"read_gb_s", read_gb_s.back()},
                        {"prefetch_accuracy", pf_acc.back()},
                        {"prefill_bytes_read", prefill_read.back()},
                        {"prefill_io_busy_s", after_prefill.io_busy_s},
                        {"prefill_read_stall_s", after_prefill.stall_s},
                        {"prefill_prefetch_canceled", after_prefill.prefetch_canceled}});
        if (plan.streaming)
            std::fprintf(stderr,
                         "  prefill: %.2f GB read (%.1f MB a token), reads in flight %.1f s of %.1f s, the "
                         "forward waiting for them %.1f s\n",
                         prefill_read.back() / 1e9,
                         prefill_read.back() / 1e6 / static_cast<double>(o.prompt_tokens),
                         after_prefill.io_busy_s, g.ttft_ms / 1e3, after_prefill.stall_s);
        std::fprintf(stderr,
                     "rep %d: prefill %.2f tok/s, decode %.2f tok/s, TTFT %.0f ms, decode hit rate %.1f%%, "
                     "%.1f MB read/token\n",
                     r + 1, prefill.back(), decode.back(), ttft.back(), 100 * hit.back(),
                     bytes_per_tok.back() / 1e6);
        last_gen = g;
        last_cache = end;
    }

    const MeanSd p = mean_sd(prefill), d = mean_sd(decode), t = mean_sd(ttft), h = mean_sd(hit),
                 b = mean_sd(bytes_per_tok), gbs = mean_sd(read_gb_s), pa = mean_sd(pf_acc),
                 prefill_bytes = mean_sd(prefill_read);
    // Speed of light for decode (benchmarking.md): resident bytes over memory bandwidth vs miss
    // bytes over disk bandwidth, per token.
    const double expert_bytes_per_token = static_cast<double>(info.n_layers) *
                                          static_cast<double>(info.experts_per_token) *
                                          static_cast<double>(plan.slot_bytes);
    // On a GPU every expert is resident; a token reads its k routed ones per layer and the dense core.
    const double gpu_bytes_per_token = static_cast<double>(engine->device_decode_bytes_per_token());
    const double t_mem =
        on_gpu ? gpu_bytes_per_token / (mem_gb_s * 1e9)
               : (static_cast<double>(plan.dense_bytes) + (plan.streaming ? expert_bytes_per_token : 0)) /
                     (mem_gb_s * 1e9);
    const double t_disk = plan.streaming && disk_gb_s > 0 ? b.mean / (disk_gb_s * 1e9) : 0;
    const double sol_tok_s = 1.0 / std::max(t_mem, t_disk);
    // The same disk bound at the read rate the run itself achieved while reads were in flight.
    // A probe of steady random reads over the whole expert set can read lower than the run: a
    // virtual disk's host-side cache serves recently evicted experts that are read again.
    const double t_disk_in_run = plan.streaming && gbs.mean > 0 ? b.mean / (gbs.mean * 1e9) : 0;
    const double in_run_tok_s = plan.streaming ? 1.0 / std::max(t_mem, t_disk_in_run) : 0;
    const uint64_t rss = peak_rss_bytes();

    std::printf("model            %s (%s, %s)\n", o.model_dir.c_str(), info.family.c_str(),
                info.quantization.c_str());
    std::printf("experts/token    %lld of %lld (full top-k)\n",
                static_cast<long long>(info.experts_per_token), static_cast<long long>(info.n_experts));
    std::printf("memory budget    %.2f GB, peak RSS %.2f GB\n", plan.budget_bytes / 1e9, rss / 1e9);
    std::printf("prompt/gen       %lld / %lld tokens, %d reps (expert cache carried across reps)\n",
                static_cast<long long>(o.prompt_tokens), static_cast<long long>(o.gen_tokens), o.reps);
    std::printf("prefill          %.2f ± %.2f tok/s (chunks of %lld tokens, %.1f MB read)\n", p.mean, p.sd,
                static_cast<long long>(o.prefill_chunk), prefill_bytes.mean / 1e6);
    std::printf("decode           %.2f ± %.2f tok/s\n", d.mean, d.sd);
    std::printf("TTFT             %.0f ± %.0f ms\n", t.mean, t.sd);
    if (plan.streaming) {
        std::printf("decode hit rate  %.1f%%%s\n", 100 * h.mean,
                    info.synthetic ? " (random weights: near-uniform routing, a pessimistic bound)" : "");
        std::printf("read per token   %.1f MB, achieved %.2f GB/s (disk measured %.2f GB/s)\n", b.mean / 1e6,
                    gbs.mean, disk_gb_s);
        std::printf("prefetch         %s, accuracy %.1f%%\n", o.engine.no_prefetch ? "off" : "on",
                    100 * pa.mean);
    }
    if (on_gpu)
        std::printf(
            "device           %s: %.0f MB read per decode token, %.0f GB/s achieved (%.0f%% of HBM)\n",
            engine->backend_name().c_str(), gpu_bytes_per_token / 1e6, d.mean * gpu_bytes_per_token / 1e9,
            100 * d.mean * gpu_bytes_per_token / (mem_gb_s * 1e9));
    std::printf("speed of light   %.2f tok/s (memory %.1f GB/s%s) → %.0f%% reached\n", sol_tok_s, mem_gb_s,
                plan.streaming ? (", disk " + std::to_string(disk_gb_s).substr(0, 4) + " GB/s").c_str() : "",
                100 * d.mean / sol_tok_s);
    if (plan.streaming)
        std::printf("  at in-run rate %.2f tok/s (disk %.2f GB/s achieved) → %.0f%% reached\n", in_run_tok_s,
                    gbs.mean, 100 * d.mean / in_run_tok_s);

    nlohmann::json out = {{"model", o.model_dir},
                          {"family", info.family},
                          {"synthetic_weights", info.synthetic},
                          {"quantization", info.quantization},
                          {"experts_per_token", info.experts_per_token},
                          {"n_experts", info.n_experts},
                          {"memory_budget_bytes", plan.budget_bytes},
                          {"expert_cache_bytes", plan.cache_bytes},
                          {"expert_cache_slots", plan.cache_slots},
                          {"peak_rss_bytes", rss},
                          {"prompt_tokens", o.prompt_tokens},
                          {"prefill_chunk_tokens", o.prefill_chunk},
                          {"prefill_bytes_read", prefill_bytes.mean},
                          {"gen_tokens", o.gen_tokens},
                          {"warmup_reps", o.warmup},
                          {"reps", reps},
                          {"prefill_tok_s", {{"mean", p.mean}, {"sd", p.sd}}},
                          {"decode_tok_s", {{"mean", d.mean}, {"sd", d.sd}}},
                          {"ttft_ms", {{"mean", t.mean}, {"sd", t.sd}}},
                          {"decode_hit_rate", h.mean},
                          {"decode_bytes_read_per_token", b.mean},
                          {"achieved_read_gb_s", gbs.mean},
                          {"prefetch", !o.engine.no_prefetch},
                          {"prefetch_accuracy", pa.mean},
                          {"measured_disk_gb_s", disk_gb_s},
                          {"measured_memory_gb_s", mem_gb_s},
                          {"all_reduce_us_per_layer_1_token", all_reduce_us_1},
                          {"all_reduce_us_per_layer_chunk", all_reduce_us_chunk},
                          {"speed_of_light_tok_s", sol_tok_s},
                          {"disk_bound_at_achieved_rate_tok_s", in_run_tok_s},
                          {"threads", o.engine.threads},
                          {"io_threads", o.engine.io_threads},
                          {"cpu_kernels", Engine::cpu_kernels()},
                          {"device", engine->backend_name()}};
    const GpuExpertCacheStats tier = engine->gpu_expert_cache_stats();
    if (tier.tiered) {
        const MeanSd gh = mean_sd(gpu_hit), gc = mean_sd(gpu_copy_per_tok), gg = mean_sd(gpu_copy_gb_s),
                     gp = mean_sd(gpu_pf_acc), gw = mean_sd(gpu_wait_per_tok);
        // The copy bound: bytes copied per decode token at the copy rate achieved.
        const double copy_bound = gc.mean > 0 && gg.mean > 0 ? gg.mean * 1e9 / gc.mean : 0;
        std::printf(
            "GPU expert tier  %lld slots of %.2f MB; decode hit rate %.1f%%, %.1f MB copied/token "
            "(host → GPU %.1f GB/s), prefetch accuracy %.1f%%, host-tier wait %.2f ms/token\n",
            static_cast<long long>(tier.slots), tier.slot_bytes / 1e6, 100 * gh.mean, gc.mean / 1e6, gg.mean,
            100 * gp.mean, 1e3 * gw.mean);
        std::printf("  copy bound     %.2f tok/s (copies alone at %.1f GB/s) → %.0f%% reached\n", copy_bound,
                    gg.mean, copy_bound > 0 ? 100 * d.mean / copy_bound : 0);
        out["gpu_expert_tier"] = {{"slots", tier.slots},
                                  {"slot_bytes", tier.slot_bytes},
                                  {"decode_hit_rate", gh.mean},
                                  {"decode_bytes_copied_per_token", gc.mean},
                                  {"copy_gb_s", gg.mean},
                                  {"prefetch_accuracy", gp.mean},
                                  {"host_wait_s_per_token", gw.mean},
                                  {"copy_bound_tok_s", copy_bound}};
    }
    if (on_gpu) {
        out["gpu_bytes_per_decode_token"] = gpu_bytes_per_token;
        out["gpu_memory_copy_gb_s"] = mem_gb_s;
        out["hbm_share"] = d.mean * gpu_bytes_per_token / (mem_gb_s * 1e9);
    }
    if (!o.json_path.empty()) write_output(o.json_path, out.dump(2) + "\n", "--json");
    if (!o.stats_json.empty())
        write_output(o.stats_json, stats_json(*engine, last_gen, last_cache).dump(2) + "\n", "--stats-json");
    return out;
}

// Every combination of the -p / -n / --prefill-chunk lists (one run when each has one value, as
// before), then llama-bench's table: one row per test (pp = prompt processing at that chunk, tg =
// generation) with the mean ± sd over the reps; --json gets {"sweep": [each run's record]}.
void run_sweep(const BenchOptions& base) {
    const size_t runs = base.prompt_list.size() * base.gen_list.size() * base.chunk_list.size();
    if (runs > 1 && (base.history_tokens > 0 || base.shared_prefix > 0 || base.sequences > 0 ||
                     base.clients > 0 || base.verify_curve > 0))
        throw CliError("bench: lists of -p / -n / --prefill-chunk sweep the default measurement only");
    std::vector<nlohmann::json> records;
    size_t i = 0;
    for (const int64_t p : base.prompt_list)
        for (const int64_t n : base.gen_list)
            for (const int64_t c : base.chunk_list) {
                BenchOptions o = base;
                o.prompt_tokens = p;
                o.gen_tokens = n;
                o.prefill_chunk = c;
                if (runs == 1) {
                    run_bench(o);
                    return;
                }
                o.json_path.clear();
                o.stats_json.clear();
                std::fprintf(stderr, "== bench %zu of %zu: -p %lld -n %lld --prefill-chunk %lld\n", ++i, runs,
                             static_cast<long long>(p), static_cast<long long>(n), static_cast<long long>(c));
                records.push_back(run_bench(o));
            }
    std::printf("\n| model | kv | device | threads | test | t/s |\n|---|---|---|---|---|---|\n");
    for (const nlohmann::json& r : records) {
        const std::string model = std::filesystem::path(r["model"].get<std::string>()).filename().string();
        const std::string kv = base.engine.kv_bits == 32 ? "f32" : "kv" + std::to_string(base.engine.kv_bits);
        const std::string device =
            r["device"].get<std::string>().substr(0, r["device"].get<std::string>().find(' '));
        const std::string threads = base.engine.threads == 0 ? "all" : std::to_string(base.engine.threads);
        auto row = [&](const std::string& test, const nlohmann::json& rate) {
            std::printf("| %s | %s | %s | %s | %s | %.2f ± %.2f |\n", model.c_str(), kv.c_str(),
                        device.c_str(), threads.c_str(), test.c_str(), rate["mean"].get<double>(),
                        rate["sd"].get<double>());
        };
        if (r["prompt_tokens"].get<int64_t>() > 0)
            row("pp" + std::to_string(r["prompt_tokens"].get<int64_t>()) + " (chunk " +
                    std::to_string(r["prefill_chunk_tokens"].get<int64_t>()) + ")",
                r["prefill_tok_s"]);
        if (r["gen_tokens"].get<int64_t>() > 0)
            row("tg" + std::to_string(r["gen_tokens"].get<int64_t>()) + " @ d" +
                    std::to_string(r["prompt_tokens"].get<int64_t>()),
                r["decode_tok_s"]);
    }
    if (!base.json_path.empty())
        write_output(base.json_path, nlohmann::json{{"sweep", records}}.dump(2) + "\n", "--json");
}

}  // namespace
}  // namespace sluice::cli

SLUICE_COMMAND(bench, 50, [](CLI::App& app) {
    auto o = std::make_shared<sluice::cli::BenchOptions>();
    auto* cmd = app.add_subcommand(
        "bench", "Measure prefill/decode speed, expert streaming and the speed-of-light bound");
    o->engine.add_to(cmd);
    sluice::cli::add_model_arg(cmd, &o->model_dir, "Model folder or .gguf");
    cmd->add_option("-p,--prompt-tokens", o->prompt_list,
                    "Prompt length (random ids); a comma list sweeps (llama-bench's -p)")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
    cmd->add_option("-n,--gen-tokens", o->gen_list,
                    "Tokens to generate; a comma list sweeps (llama-bench's -n)")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
    cmd->add_option("-r,--reps", o->reps, "Repetitions")->capture_default_str()->check(CLI::PositiveNumber);
    cmd->add_option("--warmup", o->warmup,
                    "Untimed repetitions first (fill the expert caches: a warm-cache measurement)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--prefill-chunk", o->chunk_list,
                    "Tokens per prefill forward (1 = token by token); a comma list sweeps")
        ->delimiter(',')
        ->capture_default_str()
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
    cmd->add_option("--history", o->history_tokens,
                    "Measure multi-turn reuse instead: TTFT of a --prompt-tokens message as a first turn vs "
                    "after a history of this many tokens");
    cmd->add_option(
           "--shared-prefix", o->shared_prefix,
           "Measure the prefix cache instead: TTFT of conversations (fresh sessions) sharing a prefix "
           "of this many tokens before a --prompt-tokens message, the first against the next two")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
    cmd->add_option(
           "--sequences", o->sequences,
           "Measure batched decode instead: this many sequences decoded in one forward per step vs one "
           "by one")
        ->check(CLI::Range(1, 256));
    cmd->add_option("--clients", o->clients,
                    "Measure serving instead: this many concurrent generations (their forwards batched), "
                    "aggregate and per-stream speed, TTFT and token gaps")
        ->check(CLI::Range(1, 256));
    cmd->add_option(
           "--verify-curve", o->verify_curve,
           "Measure speculative decoding's step cost instead: one forward of 1..K+1 tokens (verifying "
           "K proposals) against a decode step, and the speedup it implies per acceptance rate")
        ->check(CLI::Range(1, 16));
    cmd->add_option("--json", o->json_path, "Write the results as JSON ('-': standard output)");
    cmd->add_option("--stats-json", o->stats_json, "Write the last run's stats record as JSON");
    cmd->callback([o] { sluice::cli::run_sweep(*o); });
});
