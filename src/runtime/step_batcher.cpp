// The step batcher (step_batcher.h): leader/follower batching of concurrent forwards.
#include "runtime/step_batcher.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace sluice::runtime {

StepBatcher::StepBatcher(Backend* backend, std::mutex* compute, int64_t max_tokens)
    : backend_(backend), compute_(compute), max_tokens_(max_tokens) {}

StepBatcher::Counters StepBatcher::counters() const {
    std::lock_guard<std::mutex> lock(mu_);
    return counters_;
}

void StepBatcher::enter() {
    std::lock_guard<std::mutex> lock(mu_);
    ++streams_;
}

void StepBatcher::leave() {
    std::lock_guard<std::mutex> lock(mu_);
    --streams_;
    cv_.notify_all();  // a leader waiting for this stream's step stops waiting
}

StepBatcher::Outcome StepBatcher::run(const BatchStep& step) {
    using Clock = std::chrono::steady_clock;
    Waiter me{&step, {}, false};
    std::unique_lock<std::mutex> lock(mu_);
    queue_.push_back(&me);
    cv_.notify_all();  // a leader gathering steps counts this one
    while (!me.done) {
        if (leading_) {
            cv_.wait(lock);
            continue;
        }
        leading_ = true;
        // Gather: the open streams' next steps, for a moment.
        const auto wait = std::chrono::duration<double, std::milli>(
            std::clamp(last_forward_ms_ / 2, 0.05, std::max(2.0, 0.05 * last_forward_ms_)));
        const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(wait);
        while (static_cast<int64_t>(queue_.size()) < streams_ &&
               cv_.wait_until(lock, deadline) != std::cv_status::timeout) {
        }
        // Lead: the queued steps in arrival order within the token budget (the first always).
        std::deque<Waiter*> batch;
        int64_t tokens = 0;
        while (!queue_.empty()) {
            const auto n = static_cast<int64_t>(queue_.front()->step->tokens.size());
            if (!batch.empty() && tokens + n > max_tokens_) break;
            tokens += n;
            batch.push_back(queue_.front());
            queue_.pop_front();
        }
        lock.unlock();
        const auto t0 = Clock::now();
        forward(batch);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        lock.lock();
        last_forward_ms_ = last_forward_ms_ == 0.0 ? ms : 0.8 * last_forward_ms_ + 0.2 * ms;
        counters_.forwards++;
        counters_.steps += static_cast<int64_t>(batch.size());
        counters_.tokens += tokens;
        for (Waiter* w : batch) w->done = true;
        leading_ = false;
        cv_.notify_all();
    }
    return me.outcome;
}

void StepBatcher::forward(std::deque<Waiter*>& batch) {
    std::lock_guard<std::mutex> compute(*compute_);
    if (batch.size() == 1) {
        Waiter& w = *batch.front();
        w.outcome.status = backend_->forward_batch(std::span<const BatchStep>(w.step, 1));
        w.outcome.batch_steps = 1;
        if (w.outcome.status.is_ok() && w.step->tokens.size() == 1)
            w.outcome.summary = backend_->logits_summary();
        return;
    }
    std::vector<BatchStep> steps;
    steps.reserve(batch.size());
    for (const Waiter* w : batch) steps.push_back(*w->step);
    const Status st = backend_->forward_batch(steps);
    if (st.is_ok()) {
        for (Waiter* w : batch) w->outcome.batch_steps = static_cast<int64_t>(batch.size());
        return;
    }
    // A failed batch moved no sequence: each step again on its own, for its own outcome.
    for (Waiter* w : batch) {
        w->outcome.status = backend_->forward_batch(std::span<const BatchStep>(w->step, 1));
        w->outcome.batch_steps = 1;
        if (w->outcome.status.is_ok() && w->step->tokens.size() == 1)
            w->outcome.summary = backend_->logits_summary();
    }
}

}  // namespace sluice::runtime
