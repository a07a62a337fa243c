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

class Sampler {
 public:
    // `suppressed`: ids never sampled (special tokens that are not EOS), may be empty.
    Sampler(const SamplingParams& params, int64_t vocab, std::vector<int32_t> suppressed);

    // Picks the next token from `logits` (modified in place). `context` = prompt + generated so far
    // (for the repetition window), `generated` = this request's output (presence/frequency).
    int32_t sample(std::span<float> logits, std::span<const int32_t> context,
                   std::span<const int32_t> generated, const GenerateOptions& options, TokenEvent* event);

 private:
    SamplingParams params_;
    int64_t vocab_;
    std::vector<int32_t> suppressed_;
    std::mt19937_64 rng_;
    std::vector<int32_t> counts_;
    std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace sluice::runtime
