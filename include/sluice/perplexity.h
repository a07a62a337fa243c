// Perplexity of a model over a token sequence, the way llama.cpp's perplexity tool and the
// reference in models/tiny-next/reference_perplexity.json compute it: consecutive
// non-overlapping windows of `ctx` tokens (the incomplete tail dropped), each evaluated from a
// fresh state, scoring only the second half of each window (the first half is context).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "sluice/engine.h"
#include "sluice/export.h"
#include "sluice/status.h"

namespace sluice {

struct PerplexityResult {
    int64_t ctx = 0;
    int64_t windows = 0;
    int64_t scored_tokens = 0;
    double mean_nll = 0;
    double perplexity = 0;
    double tokens_per_s = 0;
};

// `max_windows` > 0 evaluates only the first windows. progress(done, total) after each window.
SLUICE_API Expected<PerplexityResult> compute_perplexity(
    Engine& engine, std::span<const int32_t> tokens, int64_t ctx, int64_t max_windows = 0,
    const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace sluice
