// Token sampling for one request: every SamplingParams field applied in a fixed order —
//   logit bias → special-token suppression → repetition penalty (window) → presence/frequency
//   penalties (output) → external filter (grammar) → temperature → top-k → softmax → top-p →
//   min-p → draw
// — with a per-request RNG (a seed makes a request deterministic whatever else runs).
//
// Cost per token over a V-entry row: top-k is one pass with a heap of k (no V-entry candidate list);
// without top-p or min-p nothing is sorted; with a backend LogitsSummary and no bias, penalties or
// filter, greedy decoding and the reported log-probabilities need no pass at all
// (bench/sampler_bench.cpp).
//
// Threading: one Sampler per generation; not shared. Allocates its buffers once per vocabulary.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "sluice/session.h"

namespace sluice::runtime {

// What a device backend computed over a decode step's logits row before it crossed to the host
// (Backend::logits_summary): the greedy token (the first index of the maximum) and the softmax
// normaliser in f32, so greedy sampling needs no pass over the vocabulary on the host.
struct LogitsSummary {
    int32_t argmax = -1;
    float max = 0.0f;
    float sum_exp = 0.0f;  // Σ exp(l − max) over the row
};

// A row's summary computed on the host in f32, as a backend computes it: the definition the device
// summaries and the sampler's use of them are tested against.
LogitsSummary summarize_logits(std::span<const float> logits);

class Sampler {
 public:
    // `suppressed`: ids never sampled (special tokens that are not EOS), may be empty.
    Sampler(const SamplingParams& params, int64_t vocab, std::vector<int32_t> suppressed);

    // Picks the next token from `logits` (modified in place). `context` = prompt + generated so far
    // (for the repetition window), `generated` = this request's output (presence/frequency).
    // `summary` (optional) describes `logits` as the backend produced them: without bias, penalties
    // or a filter, greedy sampling takes its token from it and every request its log-probabilities
    // (no pass over the row).
    int32_t sample(std::span<float> logits, std::span<const int32_t> context,
                   std::span<const int32_t> generated, const GenerateOptions& options, TokenEvent* event,
                   const LogitsSummary* summary = nullptr);

    // The pieces of sample(), for drivers that need the distribution itself (speculative decoding's
    // rejection sampling). prepare() applies bias, suppression, penalties and the filter to `logits`
    // in place; distribution() is then what sample() draws from — (probability, id) summing to 1,
    // the single argmax with probability 1 at temperature 0 — valid until the next call.
    struct Prepared {
        bool use_summary = false;
        double summary_sum = 0;
    };
    Prepared prepare(std::span<float> logits, std::span<const int32_t> context,
                     std::span<const int32_t> generated, const GenerateOptions& options,
                     const LogitsSummary* summary = nullptr);
    const std::vector<std::pair<float, int32_t>>& distribution(std::span<const float> logits);
    // A draw from `dist` ((weight, id), any positive total) and a uniform [0, 1), from this
    // request's RNG.
    int32_t draw(std::span<const std::pair<float, int32_t>> dist);
    double uniform();
    // Fills `event` for `chosen` from the prepared row (log-probabilities, top_logprobs).
    void describe(std::span<const float> logits, int32_t chosen, const GenerateOptions& options,
                  const Prepared& prepared, const LogitsSummary* summary, TokenEvent* event) const;
    const SamplingParams& params() const { return params_; }

 private:
    static int32_t argmax(std::span<const float> logits);
    void build_candidates(std::span<const float> logits);
    SamplingParams params_;
    int64_t vocab_;
    std::vector<int32_t> suppressed_;
    std::mt19937_64 rng_;
    std::vector<int32_t> counts_;
    std::vector<std::pair<float, int32_t>> candidates_;

    // candidates_ = the k best finite logits · inv_t with their ids, best first.
    void select_top_k(std::span<const float> logits, float inv_t, size_t k);
};

}  // namespace sluice::runtime
