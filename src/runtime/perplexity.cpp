#include "sluice/perplexity.h"

#include <chrono>
#include <cmath>

#include "sluice/session.h"

namespace sluice {

Expected<PerplexityResult> compute_perplexity(Engine& engine, std::span<const int32_t> tokens, int64_t ctx,
                                              int64_t max_windows,
                                              const std::function<void(int64_t, int64_t)>& progress) {
    if (ctx < 4 || ctx % 2 != 0)
        return error(ErrorCode::kInvalidArgument, "[perplexity] ctx must be an even number >= 4");
    PerplexityResult r;
    r.ctx = ctx;
    int64_t windows = static_cast<int64_t>(tokens.size()) / ctx;
    if (windows == 0) {
        return error(ErrorCode::kInvalidArgument,
                     "[perplexity] the text has " + std::to_string(tokens.size()) +
                         " tokens, fewer than one window of " + std::to_string(ctx));
    }
    if (max_windows > 0) windows = std::min(windows, max_windows);
    const int64_t V = engine.info().vocab_size;
    auto session = engine.new_session();
    if (session->context_size() < ctx)
        return error(ErrorCode::kInvalidArgument,
                     "[perplexity] ctx " + std::to_string(ctx) + " exceeds the engine's context");
    double total_nll = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t w = 0; w < windows; ++w) {
        session->reset();
        auto window = tokens.subspan(static_cast<size_t>(w * ctx), static_cast<size_t>(ctx));
        SLUICE_ASSIGN_OR_RETURN(std::vector<float> logits, session->evaluate(window, true));
        for (int64_t i = ctx / 2 - 1; i <= ctx - 2; ++i) {
            const float* row = logits.data() + i * V;
            double mx = row[0];
            for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
            double sum = 0;
            for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
            total_nll += mx + std::log(sum) - row[window[static_cast<size_t>(i + 1)]];
            r.scored_tokens++;
        }
        if (progress) progress(w + 1, windows);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.windows = windows;
    r.mean_nll = total_nll / static_cast<double>(r.scored_tokens);
    r.perplexity = std::exp(r.mean_nll);
    r.tokens_per_s = seconds > 0 ? static_cast<double>(windows * ctx) / seconds : 0;
    return r;
}

}  // namespace sluice
