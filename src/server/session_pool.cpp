// The session pool (see session_pool.h).
#include "server/session_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace sluice::server {

SessionPool::SessionPool(const std::shared_ptr<Engine>& engine, int size,
                         const std::shared_ptr<Engine>& draft)
    : engine_(engine) {
    slots_.resize(static_cast<size_t>(std::max(1, size)));
    for (Slot& s : slots_) {
        s.session = engine->new_session();
        if (draft) s.draft = draft->new_session();
    }
    default_kv_bits_ = slots_[0].session->kv_bits();
}

std::vector<SessionPool::SlotInfo> SessionPool::slot_info() const {
    std::lock_guard lock(mutex_);
    std::vector<SlotInfo> out;
    for (const Slot& s : slots_) {
        SlotInfo i;
        i.busy = s.busy;
        // A busy session's timeline is its request's to change: only its type is read.
        i.tokens = s.busy ? 0 : static_cast<int64_t>(s.session->tokens().size());
        i.kv_bits = s.session->kv_bits();
        out.push_back(i);
    }
    return out;
}

Status SessionPool::Lease::use_kv_bits(int kv_bits) {
    SessionPool& pool = *pool_;
    const int want = kv_bits > 0 ? kv_bits : pool.default_kv_bits_;
    std::lock_guard lock(pool.mutex_);
    Slot& slot = pool.slots_[static_cast<size_t>(slot_)];
    if (slot.session->kv_bits() == want) return Status::ok();
    SessionOptions options;
    options.kv_bits = want;
    SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Session> made, pool.engine_->new_session(options));
    slot.session = std::move(made);  // the old session's state is freed; the new one's made on first use
    return Status::ok();
}

SessionPool::Lease::~Lease() {
    if (pool_) pool_->release(slot_);
}

Session& SessionPool::Lease::session() const {
    return *pool_->slots_[static_cast<size_t>(slot_)].session;
}

Session* SessionPool::Lease::draft() const {
    return pool_->slots_[static_cast<size_t>(slot_)].draft.get();
}

uint64_t SessionPool::next_to_serve() const {
    const Waiter* best = nullptr;
    const Tenant* best_tenant = nullptr;
    for (const Waiter& w : waiters_) {  // in arrival order: the first of the least served wins
        const Tenant& t = tenants_.at(w.tenant);
        if (best == nullptr || t.in_use < best_tenant->in_use ||
            (t.in_use == best_tenant->in_use && t.last_served < best_tenant->last_served)) {
            best = &w;
            best_tenant = &t;
        }
    }
    return best ? best->ticket : UINT64_MAX;
}

void SessionPool::forget_if_idle(const std::string& tenant) {
    if (auto it = tenants_.find(tenant);
        it != tenants_.end() && it->second.in_use == 0 && it->second.waiting == 0)
        tenants_.erase(it);
}

SessionPool::Lease SessionPool::acquire(std::span<const int32_t> prompt,
                                        const std::function<bool()>& still_wanted, int poll_ms,
                                        std::string_view tenant_name, int kv_bits) {
    std::unique_lock lock(mutex_);
    const uint64_t ticket = next_ticket_++;
    const std::string tenant(tenant_name);
    waiters_.push_back(Waiter{ticket, tenant});
    tenants_[tenant].waiting += 1;
    auto leave_queue = [&] {
        waiters_.erase(std::find_if(waiters_.begin(), waiters_.end(),
                                    [&](const Waiter& w) { return w.ticket == ticket; }));
        tenants_[tenant].waiting -= 1;
    };
    auto my_turn = [&] {
        return next_to_serve() == ticket &&
               std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return !s.busy; });
    };
    while (!my_turn()) {
        cv_.wait_for(lock, std::chrono::milliseconds(poll_ms));
        if (my_turn()) break;
        if (closing_ || (still_wanted && !still_wanted())) {
            leave_queue();
            forget_if_idle(tenant);
            cv_.notify_all();  // someone else may be next now
            return Lease();
        }
    }
    leave_queue();
    // Best free slot: longest shared prefix (in a session of the wanted KV type), then least recently
    // used.
    const int want = kv_bits > 0 ? kv_bits : default_kv_bits_;
    int best = -1;
    size_t best_shared = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
        const Slot& s = slots_[i];
        if (s.busy) continue;
        const std::vector<int32_t>& held = s.session->tokens();
        const size_t n = s.session->kv_bits() == want ? std::min(held.size(), prompt.size()) : 0;
        size_t shared = 0;
        while (shared < n && held[shared] == prompt[shared]) ++shared;
        if (best < 0 || shared > best_shared ||
            (shared == best_shared && s.last_used < slots_[static_cast<size_t>(best)].last_used)) {
            best = static_cast<int>(i);
            best_shared = shared;
        }
    }
    Slot& slot = slots_[static_cast<size_t>(best)];
    slot.busy = true;
    slot.last_used = ++use_clock_;
    slot.tenant = tenant;
    Tenant& t = tenants_[tenant];
    t.in_use += 1;
    t.last_served = ++serve_clock_;
    cv_.notify_all();  // the next waiter may also find a free slot
    return Lease(this, best);
}

void SessionPool::release(int slot) {
    {
        std::lock_guard lock(mutex_);
        Slot& s = slots_[static_cast<size_t>(slot)];
        s.busy = false;
        tenants_[s.tenant].in_use -= 1;
        forget_if_idle(s.tenant);
    }
    cv_.notify_all();
}

void SessionPool::cancel_all() {
    {
        std::lock_guard lock(mutex_);
        closing_ = true;
        for (Slot& s : slots_)
            if (s.busy) s.session->cancel();  // the draft runs inside the target's generate()
    }
    cv_.notify_all();
}

bool SessionPool::closing() const {
    std::lock_guard lock(mutex_);
    return closing_;
}

int64_t SessionPool::queue_depth() const {
    std::lock_guard lock(mutex_);
    return static_cast<int64_t>(waiters_.size());
}

int64_t SessionPool::active() const {
    std::lock_guard lock(mutex_);
    return std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy; });
}

}  // namespace sluice::server
