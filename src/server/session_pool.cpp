// The session pool (see session_pool.h).
#include "server/session_pool.h"

#include <algorithm>
#include <chrono>

namespace sluice::server {

SessionPool::SessionPool(const std::shared_ptr<Engine>& engine, int size) {
    slots_.resize(static_cast<size_t>(std::max(1, size)));
    for (Slot& s : slots_) s.session = engine->new_session();
}

SessionPool::Lease::~Lease() {
    if (pool_) pool_->release(slot_);
}

Session& SessionPool::Lease::session() const {
    return *pool_->slots_[static_cast<size_t>(slot_)].session;
}

SessionPool::Lease SessionPool::acquire(std::span<const int32_t> prompt,
                                        const std::function<bool()>& still_wanted, int poll_ms) {
    std::unique_lock lock(mutex_);
    const uint64_t ticket = next_ticket_++;
    ++waiting_;
    auto skip_abandoned = [&] {
        for (auto it = std::find(abandoned_.begin(), abandoned_.end(), serving_); it != abandoned_.end();
             it = std::find(abandoned_.begin(), abandoned_.end(), serving_)) {
            abandoned_.erase(it);
            ++serving_;
        }
    };
    for (;;) {
        skip_abandoned();
        const bool any_free =
            std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.busy; });
        if (serving_ == ticket && any_free) break;
        cv_.wait_for(lock, std::chrono::milliseconds(poll_ms));
        skip_abandoned();
        if (serving_ == ticket &&
            std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.busy; }))
            break;
        if (closing_ || (still_wanted && !still_wanted())) {
            --waiting_;
            abandoned_.push_back(ticket);
            skip_abandoned();
            cv_.notify_all();
            return Lease();
        }
    }
    // Best free slot: longest shared prefix, then least recently used.
    int best = -1;
    size_t best_shared = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
        const Slot& s = slots_[i];
        if (s.busy) continue;
        const std::vector<int32_t>& held = s.session->tokens();
        const size_t n = std::min(held.size(), prompt.size());
        size_t shared = 0;
        while (shared < n && held[shared] == prompt[shared]) ++shared;
        if (best < 0 || shared > best_shared ||
            (shared == best_shared && s.last_used < slots_[static_cast<size_t>(best)].last_used)) {
            best = static_cast<int>(i);
            best_shared = shared;
        }
    }
    slots_[static_cast<size_t>(best)].busy = true;
    slots_[static_cast<size_t>(best)].last_used = ++use_clock_;
    ++serving_;
    --waiting_;
    cv_.notify_all();  // the next ticket may also find a free slot
    return Lease(this, best);
}

void SessionPool::release(int slot) {
    {
        std::lock_guard lock(mutex_);
        slots_[static_cast<size_t>(slot)].busy = false;
    }
    cv_.notify_all();
}

void SessionPool::cancel_all() {
    {
        std::lock_guard lock(mutex_);
        closing_ = true;
        for (Slot& s : slots_)
            if (s.busy) s.session->cancel();
    }
    cv_.notify_all();
}

bool SessionPool::closing() const {
    std::lock_guard lock(mutex_);
    return closing_;
}

int64_t SessionPool::queue_depth() const {
    std::lock_guard lock(mutex_);
    return waiting_;
}

int64_t SessionPool::active() const {
    std::lock_guard lock(mutex_);
    return std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy; });
}

}  // namespace sluice::server
