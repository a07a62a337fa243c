#include "experts/expert_cache.h"

#include <algorithm>
#include <limits>

#include "core/assert.h"

namespace sluice::experts {

namespace {

class LfuPolicy final : public EvictionPolicy {
 public:
    const char* name() const override { return "lfu"; }
    void on_access(ExpertKey key, uint64_t tick) override {
        auto& e = stats_[key.packed()];
        e.count++;
        e.last = tick;
    }
    void on_insert(ExpertKey key, uint64_t tick) override { on_access(key, tick); }
    void on_evict(ExpertKey) override {}  // history is kept: a returning expert keeps its count
    double keep_score(ExpertKey key) const override {
        auto it = stats_.find(key.packed());
        if (it == stats_.end()) return 0;
        // Frequency first; recency breaks ties (ticks < 2^40 keep the fraction exact enough).
        return static_cast<double>(it->second.count) + static_cast<double>(it->second.last) * 1e-12;
    }

 private:
    struct Entry {
        uint64_t count = 0;
        uint64_t last = 0;
    };
    std::unordered_map<uint64_t, Entry> stats_;
};

class LruPolicy final : public EvictionPolicy {
 public:
    const char* name() const override { return "lru"; }
    void on_access(ExpertKey key, uint64_t tick) override { last_[key.packed()] = tick; }
    void on_insert(ExpertKey key, uint64_t tick) override { last_[key.packed()] = tick; }
    void on_evict(ExpertKey key) override { last_.erase(key.packed()); }
    double keep_score(ExpertKey key) const override {
        auto it = last_.find(key.packed());
        return it == last_.end() ? 0 : static_cast<double>(it->second);
    }

 private:
    std::unordered_map<uint64_t, uint64_t> last_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_policy(CachePolicy policy) {
    if (policy == CachePolicy::kLru) return std::make_unique<LruPolicy>();
    return std::make_unique<LfuPolicy>();
}

SlotTable::SlotTable(int64_t n_slots, std::unique_ptr<EvictionPolicy> policy)
    : policy_(std::move(policy)),
      keys_(static_cast<size_t>(n_slots)),
      used_(static_cast<size_t>(n_slots), false),
      retired_(static_cast<size_t>(n_slots), false),
      pins_(static_cast<size_t>(n_slots), 0) {
    SLUICE_ASSERT(policy_ != nullptr);
    for (int64_t s = n_slots - 1; s >= 0; --s) free_.push_back(s);
    index_.reserve(static_cast<size_t>(n_slots) * 2);
}

int64_t SlotTable::find(ExpertKey key) const {
    auto it = index_.find(key.packed());
    return it == index_.end() ? -1 : it->second;
}

void SlotTable::touch(ExpertKey key) {
    policy_->on_access(key, ++tick_);
}

int64_t SlotTable::claim(ExpertKey key, bool* evicted_valid, ExpertKey* evicted) {
    *evicted_valid = false;
    int64_t slot = -1;
    if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
    } else {
        slot = lowest_unpinned();
        if (slot < 0) return -1;
        *evicted_valid = true;
        *evicted = keys_[static_cast<size_t>(slot)];
        index_.erase(evicted->packed());
        policy_->on_evict(*evicted);
    }
    keys_[static_cast<size_t>(slot)] = key;
    used_[static_cast<size_t>(slot)] = true;
    index_[key.packed()] = slot;
    policy_->on_insert(key, ++tick_);
    return slot;
}

int64_t SlotTable::lowest_unpinned() const {
    int64_t slot = -1;
    double best = std::numeric_limits<double>::infinity();
    for (int64_t s = 0; s < n_slots(); ++s) {
        const auto i = static_cast<size_t>(s);
        if (pins_[i] > 0 || !used_[i]) continue;  // free slots are taken before any eviction
        const double score = policy_->keep_score(keys_[i]);
        if (score < best) {
            best = score;
            slot = s;
        }
    }
    return slot;
}

int64_t SlotTable::retire_candidate() const {
    return free_.empty() ? lowest_unpinned() : free_.back();
}

void SlotTable::retire(int64_t slot, bool* evicted_valid, ExpertKey* evicted) {
    const auto i = static_cast<size_t>(slot);
    SLUICE_ASSERT(pins_[i] == 0 && !retired_[i]);
    *evicted_valid = used_[i];
    if (used_[i]) {
        *evicted = keys_[i];
        index_.erase(keys_[i].packed());
        policy_->on_evict(keys_[i]);
        used_[i] = false;
    } else {
        free_.erase(std::find(free_.begin(), free_.end(), slot));
    }
    retired_[i] = true;
    n_retired_++;
}

int64_t SlotTable::restore() {
    if (n_retired_ == 0) return -1;
    for (int64_t s = 0; s < n_slots(); ++s) {
        if (!retired_[static_cast<size_t>(s)]) continue;
        retired_[static_cast<size_t>(s)] = false;
        n_retired_--;
        free_.push_back(s);
        return s;
    }
    return -1;
}

void SlotTable::drop(int64_t slot) {
    if (!used_[static_cast<size_t>(slot)]) return;
    index_.erase(keys_[static_cast<size_t>(slot)].packed());
    policy_->on_evict(keys_[static_cast<size_t>(slot)]);
    used_[static_cast<size_t>(slot)] = false;
    free_.push_back(slot);
}

double simulate_policy(CachePolicy policy, int64_t n_slots, std::span<const ExpertKey> trace) {
    auto p = make_policy(policy);
    if (n_slots <= 0 || trace.empty()) return 0;
    SlotTable table(n_slots, std::move(p));
    int64_t hits = 0;
    for (const ExpertKey& k : trace) {
        if (table.find(k) >= 0) {
            hits++;
            table.touch(k);
        } else {
            bool ev = false;
            ExpertKey old;
            table.claim(k, &ev, &old);
        }
    }
    return static_cast<double>(hits) / static_cast<double>(trace.size());
}

}  // namespace sluice::experts
