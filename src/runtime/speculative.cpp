// Speculative decoding's pieces (speculative.h): the rejection step, the draft-model drafter and
// the choice of k.
#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

namespace sluice::runtime {

namespace {

// A drafter's k proposals: each drawn from `sampler`'s final distribution over `logits` with the
// context it would have (`context` and `generated` grow by each draw, in the scratch copies);
// `next(token)` makes `logits` the drafter's for the token after it (not called after the last).
Status draw_chain(std::span<const int32_t> context, std::span<const int32_t> generated, int k,
                  const GenerateOptions& options, Sampler& sampler, std::vector<float>& logits,
                  std::vector<int32_t>& scratch_context, std::vector<int32_t>& scratch_generated,
                  const std::function<Status(int32_t)>& next, std::vector<int32_t>* tokens,
                  std::vector<Distribution>* dists) {
    scratch_context.assign(context.begin(), context.end());
    scratch_generated.assign(generated.begin(), generated.end());
    for (int i = 0; i < k; ++i) {
        sampler.prepare(logits, scratch_context, scratch_generated, options);
        dists->push_back(sampler.distribution(logits));
        const int32_t token = sampler.draw(dists->back());
        tokens->push_back(token);
        scratch_context.push_back(token);
        scratch_generated.push_back(token);
        if (i + 1 < k) SLUICE_RETURN_IF_ERROR(next(token));
    }
    return Status::ok();
}

}  // namespace

Verdict verify_proposal(std::span<const std::pair<float, int32_t>> p,
                        std::span<const std::pair<float, int32_t>> q, int32_t proposal, Sampler& rng,
                        std::vector<float>& scratch) {
    float px = 0, qx = 0;
    for (const auto& [prob, id] : p)
        if (id == proposal) px = prob;
    for (const auto& [prob, id] : q)
        if (id == proposal) qx = prob;
    // Accept with probability min(1, p/q): always when p >= q (no uniform needed, so greedy's
    // point masses never touch the RNG).
    if (px > 0 && (px >= qx || rng.uniform() * static_cast<double>(qx) < static_cast<double>(px)))
        return {true, proposal};
    // Residual max(0, p − q): q scattered into the scratch row, read back per p entry, cleared.
    for (const auto& [prob, id] : q) scratch[static_cast<size_t>(id)] = prob;
    Distribution residual;
    residual.reserve(p.size());
    double total = 0;
    for (const auto& [prob, id] : p) {
        const float r = prob - scratch[static_cast<size_t>(id)];
        if (r > 0) {
            residual.emplace_back(r, id);
            total += r;
        }
    }
    for (const auto& [prob, id] : q) scratch[static_cast<size_t>(id)] = 0.0f;
    // A residual that rounds to nothing (p and q equal but for rounding) leaves p itself.
    if (total <= 0) return {false, rng.draw(p)};
    return {false, rng.draw(residual)};
}

DraftModelDrafter::DraftModelDrafter(Session* draft, const SamplingParams& params, int64_t vocab,
                                     std::vector<int32_t> suppressed)
    : draft_(draft), sampler_(params, vocab, std::move(suppressed)) {}

Status DraftModelDrafter::propose(std::span<const int32_t> context, std::span<const int32_t> generated, int k,
                                  const GenerateOptions& options, std::vector<int32_t>* tokens,
                                  std::vector<Distribution>* dists) {
    tokens->clear();
    dists->clear();
    // Catch the draft up with the context: keep the shared prefix, feed the rest (at least one
    // token, for its logits). A rollback lands on the draft's checkpoint at or before the prefix.
    const std::vector<int32_t>& have = draft_->tokens();
    size_t lcp = 0;
    while (lcp < have.size() && lcp < context.size() && have[lcp] == context[lcp]) ++lcp;
    if (lcp == context.size()) --lcp;
    SLUICE_ASSIGN_OR_RETURN(const int64_t at, draft_->truncate(static_cast<int64_t>(lcp)));
    const int64_t room = draft_->context_size() - static_cast<int64_t>(context.size());
    k = static_cast<int>(std::min<int64_t>(k, room));
    if (k <= 0) return Status::ok();
    // Through the kernels the target used for the same positions, so a draft of the target's own
    // model proposes exactly what the target then computes: the prompt by the prefill kernels, the
    // generated tokens (decoded or verified one by one) by the decode kernels.
    const int64_t decoded_from =
        std::max<int64_t>(at, static_cast<int64_t>(context.size() - generated.size()));
    if (decoded_from > at) {
        const auto prompt_part =
            context.subspan(static_cast<size_t>(at), static_cast<size_t>(decoded_from - at));
        SLUICE_ASSIGN_OR_RETURN(logits_, draft_->evaluate(prompt_part, false));
    }
    if (decoded_from < static_cast<int64_t>(context.size())) {
        const auto decoded = context.subspan(static_cast<size_t>(decoded_from));
        SLUICE_ASSIGN_OR_RETURN(logits_, draft_->evaluate_as_decode(decoded, false));
    }
    // The next step's rollback target: the context itself (its proposals may all be rejected).
    SLUICE_RETURN_IF_ERROR(draft_->checkpoint());
    return draw_chain(
        context, generated, k, options, sampler_, logits_, scratch_context_, scratch_generated_,
        [&](int32_t token) -> Status {
            SLUICE_ASSIGN_OR_RETURN(logits_, draft_->evaluate(std::span<const int32_t>(&token, 1), false));
            return Status::ok();
        },
        tokens, dists);
}

MtpDrafter::MtpDrafter(Backend* backend, std::unique_ptr<SequenceState> state, std::mutex* compute,
                       int64_t hidden, int64_t vocab)
    : backend_(backend), state_(std::move(state)), compute_(compute), hidden_(hidden), vocab_(vocab) {}

void MtpDrafter::observe(int64_t from, std::span<const float> rows) {
    if (from == 0) lost_ = false;  // a timeline from the start: in step again
    if (from < rows_begin_ || from > rows_end()) {
        // Rows before `from` are no longer the target's (it went back past them), or there is a
        // gap: start over at `from`.
        rows_.clear();
        rows_begin_ = from;
    } else {
        rows_.resize(static_cast<size_t>((from - rows_begin_) * hidden_));
    }
    rows_.insert(rows_.end(), rows.begin(), rows.end());
}

void MtpDrafter::reset() {
    ctx_.clear();
    rows_.clear();
    rows_begin_ = 0;
    lost_ = false;
    std::lock_guard<std::mutex> lock(*compute_);
    (void)state_->reset();
}

Status MtpDrafter::propose(std::span<const int32_t> context, std::span<const int32_t> generated, int k,
                           const GenerateOptions& options, Sampler& sampler, std::vector<int32_t>* tokens,
                           std::vector<Distribution>* dists) {
    tokens->clear();
    dists->clear();
    const auto n = static_cast<int64_t>(context.size()) - 1;  // the target's positions
    if (lost_ || n < 1) return Status::ok();
    // Rows past the target's position belong to proposals it did not keep.
    if (rows_end() > n) rows_.resize(static_cast<size_t>(std::max<int64_t>(0, n - rows_begin_) * hidden_));
    if (rows_end() != n) {
        lost_ = true;  // a forward the head did not see
        return Status::ok();
    }
    // The head's valid positions: p stays while tokens 0..p+1 are unchanged.
    size_t lcp = 0;
    while (lcp < ctx_.size() && lcp < context.size() && ctx_[lcp] == context[lcp]) ++lcp;
    int64_t m = std::min<int64_t>(state_->position(), static_cast<int64_t>(lcp) - 1);
    m = std::clamp<int64_t>(m, 0, n - 1);  // position n-1 is computed afresh for its logits
    if (m < rows_begin_) {
        // The target went back exactly to where its rows start: the head keeps its entry at the
        // position before (right hidden state, the old next token). Further back the rows to
        // recompute from are gone.
        if (m + 1 == rows_begin_ && state_->position() >= rows_begin_) {
            m = rows_begin_;
        } else {
            lost_ = true;
            return Status::ok();
        }
    }
    if (m >= n) return Status::ok();
    const int64_t room = state_->capacity() - n;
    k = static_cast<int>(std::min<int64_t>(k, room));
    if (k <= 0) return Status::ok();

    std::lock_guard<std::mutex> lock(*compute_);
    SLUICE_ASSIGN_OR_RETURN(const int64_t at, state_->truncate(m));
    (void)at;  // no recurrent buffers: exactly m
    // Catch up over positions [m, n): the token after each, the target's row at each.
    const int64_t fresh = n - m;
    out_.resize(static_cast<size_t>(fresh * hidden_));
    logits_.resize(static_cast<size_t>(vocab_));
    SLUICE_RETURN_IF_ERROR(backend_->forward_mtp(*state_, context.subspan(static_cast<size_t>(m + 1)),
                                                 rows_.data() + (m - rows_begin_) * hidden_, logits_.data(),
                                                 false, out_.data()));
    ctx_.assign(context.begin(), context.end());
    // Keep the last consumed row: a rewind to here re-runs position n-1 from it.
    rows_.erase(rows_.begin(), rows_.end() - hidden_);
    rows_begin_ = n - 1;

    std::vector<float> prev(out_.end() - hidden_, out_.end());
    // Chained: each draft and the head's own output, at the next position.
    const Status status = draw_chain(
        context, generated, k, options, sampler, logits_, scratch_context_, scratch_generated_,
        [&](int32_t token) -> Status {
            SLUICE_RETURN_IF_ERROR(backend_->forward_mtp(*state_, std::span<const int32_t>(&token, 1),
                                                         prev.data(), logits_.data(), false, out_.data()));
            prev.assign(out_.begin(), out_.begin() + hidden_);
            return Status::ok();
        },
        tokens, dists);
    // The chained positions are the head's guesses; the target's rows replace them next time.
    SLUICE_ASSIGN_OR_RETURN(const int64_t back, state_->truncate(n));
    (void)back;
    if (!status.is_ok()) {
        tokens->clear();
        dists->clear();
        return status;
    }
    return Status::ok();
}

double SpeculationController::target_ms(int tokens) const {
    if (target_ms_[static_cast<size_t>(tokens)] >= 0) return target_ms_[static_cast<size_t>(tokens)];
    // A line through the measured points (least squares), or flat through the one there is.
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t t = 1; t < target_ms_.size(); ++t) {
        if (target_ms_[t] < 0) continue;
        const auto x = static_cast<double>(t);
        n += 1;
        sx += x;
        sy += target_ms_[t];
        sxx += x * x;
        sxy += x * target_ms_[t];
    }
    if (n == 0) return 1.0;
    const double denom = n * sxx - sx * sx;
    if (n < 2 || denom <= 0) return sy / n;
    const double slope = std::max(0.0, (n * sxy - sx * sy) / denom);
    const double intercept = (sy - slope * sx) / n;
    return std::max(1e-3, intercept + slope * tokens);
}

int SpeculationController::choose() {
    if (draft_ms_per_token_ < 0) return std::min(max_, 2);  // measure the drafter first
    const double a = std::clamp(alpha_, 0.0, 0.999);
    double best_rate = 1.0 / target_ms(1);
    int best = 0;
    for (int k = 1; k <= max_; ++k) {
        const double tokens = (1 - std::pow(a, k + 1)) / (1 - a);
        const double rate = tokens / (k * draft_ms_per_token_ + target_ms(k + 1));
        if (rate > best_rate) {
            best_rate = rate;
            best = k;
        }
    }
    // Off, the acceptance is no longer measured: probe with one proposal now and then, less often
    // each time the probe finds it still does not pay (a probe costs the draft's catching up).
    if (best > 0) {
        probe_every_ = 16;
        return best;
    }
    if (++since_probe_ >= probe_every_) {
        since_probe_ = 0;
        probe_every_ = std::min(probe_every_ * 2, 1024);
        return 1;
    }
    return 0;
}

void SpeculationController::record_target(int tokens, double ms) {
    if (tokens <= 0 || tokens >= static_cast<int>(target_ms_.size())) return;
    double& t = target_ms_[static_cast<size_t>(tokens)];
    t = t < 0 ? ms : 0.8 * t + 0.2 * ms;
}

void SpeculationController::record_draft(int proposals, double ms) {
    if (proposals <= 0) return;
    const double per = ms / proposals;
    draft_ms_per_token_ = draft_ms_per_token_ < 0 ? per : 0.8 * draft_ms_per_token_ + 0.2 * per;
}

void SpeculationController::record_acceptance(int proposed, int accepted) {
    if (proposed <= 0) return;
    // The rate of a kept proposal given the ones before it were kept: accepted / (accepted + one
    // rejection, if there was one) is the per-position estimate; a running mean over recent steps.
    const double positions = accepted + (accepted < proposed ? 1 : 0);
    const double step_alpha = positions > 0 ? accepted / positions : 0;
    proposed_ += proposed;
    const double w = proposed_ < 32 ? 0.5 : 0.1;
    alpha_ = (1 - w) * alpha_ + w * step_alpha;
}

}  // namespace sluice::runtime
