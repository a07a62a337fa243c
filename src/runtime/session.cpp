// Session: one timeline of tokens through the model — chunked prefill, then token-by-token decode.
#include <algorithm>
#include <chrono>

#include "runtime/engine_impl.h"

namespace sluice {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int32_t argmax(const float* v, int64_t n) {
    return static_cast<int32_t>(std::max_element(v, v + n) - v);
}
}  // namespace

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

int64_t Session::position() const { return impl_->state.n_past; }
const std::vector<int32_t>& Session::tokens() const { return impl_->tokens; }
const GenerationStats& Session::stats() const { return impl_->stats; }
void Session::cancel() { impl_->cancel_requested.store(true); }

void Session::reset() {
    impl_->state.reset();
    impl_->tokens.clear();
}

Expected<std::vector<float>> Session::evaluate(std::span<const int32_t> tokens, bool all_logits,
                                               int64_t chunk_tokens) {
    Impl& s = *impl_;
    Engine::Impl& e = *s.engine->impl_;
    const int64_t V = e.info.vocab_size;
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (n == 0) return error(ErrorCode::kInvalidArgument, "[session] evaluate needs at least one token");
    if (chunk_tokens <= 0) chunk_tokens = n;
    std::vector<float> logits(static_cast<size_t>(all_logits ? n * V : V));
    std::lock_guard<std::mutex> lock(e.compute_mutex);
    for (int64_t begin = 0; begin < n; begin += chunk_tokens) {
        const int64_t count = std::min(chunk_tokens, n - begin);
        const bool last = begin + count == n;
        float* out = all_logits ? logits.data() + begin * V : (last ? logits.data() : nullptr);
        SLUICE_RETURN_IF_ERROR(e.model->forward(s.state, tokens.subspan(static_cast<size_t>(begin), static_cast<size_t>(count)),
                                                out, all_logits, s.ws, e.pool.get()));
        s.tokens.insert(s.tokens.end(), tokens.begin() + begin, tokens.begin() + begin + count);
    }
    return logits;
}

Expected<FinishReason> Session::generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                         const TokenCallback& on_token) {
    Impl& s = *impl_;
    const ModelInfo& info = s.engine->info();
    s.cancel_requested.store(false);
    s.stats = GenerationStats{};
    s.stats.prompt_tokens = static_cast<int64_t>(prompt.size());
    const auto t0 = Clock::now();

    SLUICE_ASSIGN_OR_RETURN(std::vector<float> logits, evaluate(prompt, false));
    s.stats.prefilled_tokens = static_cast<int64_t>(prompt.size());
    s.stats.prefill_ms = ms_since(t0);

    FinishReason reason = FinishReason::kLength;
    auto decode_start = Clock::now();
    for (int64_t i = 0; i < options.max_tokens; ++i) {
        const int32_t next = argmax(logits.data(), info.vocab_size);
        if (i == 0) {
            s.stats.ttft_ms = ms_since(t0);
            decode_start = Clock::now();
        }
        s.stats.generated_tokens++;
        if (!options.ignore_eos && std::find(info.eos_token_ids.begin(), info.eos_token_ids.end(), next) != info.eos_token_ids.end()) {
            reason = FinishReason::kEos;
            break;
        }
        if (on_token && !on_token(next)) {
            reason = FinishReason::kCancelled;
            break;
        }
        if (s.cancel_requested.load()) {
            reason = FinishReason::kCancelled;
            break;
        }
        if (i + 1 == options.max_tokens) break;
        SLUICE_ASSIGN_OR_RETURN(logits, evaluate(std::span<const int32_t>(&next, 1), false));
    }
    s.stats.decode_ms = ms_since(decode_start);
    return reason;
}

}  // namespace sluice
