// Token sampling for one request: every SamplingParams field applied in a fixed order —
//   logit bias → special-token suppression → repetition penalty (window) → presence/frequency
//   penalties (output) → external filter (grammar) → temperature → top-k → softmax → top-p →
//   min-p → draw
// — with a per-request RNG (a seed makes a request deterministic whatever else runs).
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

class Sampler {
 public:
    // `suppressed`: ids never sampled (special tokens that are not EOS), may be empty.
    Sampler(const SamplingParams& params, int64_t vocab, std::vector<int32_t> suppressed);

    // Picks the next token from `logits` (modified in place). `context` = prompt + generated so far
    // (for the repetition window), `generated` = this request's output (presence/frequency).
    // `summary` (optional) describes `logits` as the backend produced them: greedy sampling without
    // bias, penalties, filter or top logprobs then takes its token and log-probability from it.
    int32_t sample(std::span<float> logits, std::span<const int32_t> context,
                   std::span<const int32_t> generated, const GenerateOptions& options, TokenEvent* event,
                   const LogitsSummary* summary = nullptr);

 private:
    SamplingParams params_;
    int64_t vocab_;
    std::vector<int32_t> suppressed_;
    std::mt19937_64 rng_;
    std::vector<int32_t> counts_;
    std::vector<std::pair<float, int32_t>> candidates_;

    // The greedy token from `summary` when the request is plain greedy decoding (else -1); suppressed
    // ids are masked in `logits` and their share taken out of the normaliser.
    int32_t greedy_from_summary(std::span<float> logits, const GenerateOptions& options, TokenEvent* event,
                                const LogitsSummary& summary);
};

}  // namespace sluice::runtime
