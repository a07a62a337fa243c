// The expert cache's bookkeeping: which (layer, expert) lives in which slot, and which slot to
// evict. Pure data structure, no IO — the ExpertStore (expert_store.h) owns the slot memory and
// the reads. Kept separate so eviction policies can be compared on the same recorded trace
// (simulate_policy) without touching a disk.
//
// Baseline policy: LFU with recency as tie-break, and frequency history kept for evicted experts
// (an expert that was popular and comes back starts with its old count), as Swiftlet found best
// for MoE routing. LRU is provided for comparison.
//
// Threading: not thread-safe; the ExpertStore guards it with its mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "sluice/types.h"

namespace sluice::experts {

struct ExpertKey {
    int32_t layer = 0;
    int32_t expert = 0;
    bool operator==(const ExpertKey& o) const { return layer == o.layer && expert == o.expert; }
    uint64_t packed() const {
        return (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) | static_cast<uint32_t>(expert);
    }
};

// Decides which resident expert to evict. Sees every access.
class EvictionPolicy {
 public:
    virtual ~EvictionPolicy() = default;
    virtual const char* name() const = 0;
    virtual void on_access(ExpertKey key, uint64_t tick) = 0;
    virtual void on_insert(ExpertKey key, uint64_t tick) = 0;
    virtual void on_evict(ExpertKey key) = 0;
    // Lower = evicted first.
    virtual double keep_score(ExpertKey key) const = 0;
};

std::unique_ptr<EvictionPolicy> make_policy(CachePolicy policy);

// Slot table: maps keys to slot indices; finds a victim among unpinned slots.
class SlotTable {
 public:
    SlotTable(int64_t n_slots, std::unique_ptr<EvictionPolicy> policy);

    int64_t n_slots() const { return static_cast<int64_t>(keys_.size()); }
    // Slot holding `key`, or -1.
    int64_t find(ExpertKey key) const;
    // Records a use of a resident key.
    void touch(ExpertKey key);
    // A slot for a new key: a free slot, else the unpinned slot with the lowest keep score
    // (its key is returned in *evicted). -1 when every slot is pinned.
    int64_t claim(ExpertKey key, bool* evicted_valid, ExpertKey* evicted);
    void pin(int64_t slot) { pins_[static_cast<size_t>(slot)]++; }
    void unpin(int64_t slot) { pins_[static_cast<size_t>(slot)]--; }
    int32_t pins(int64_t slot) const { return pins_[static_cast<size_t>(slot)]; }
    // Forgets the key of a slot (e.g. after a failed read).
    void drop(int64_t slot);
    const EvictionPolicy& policy() const { return *policy_; }

    // Capacity under memory pressure: a retired slot holds nothing and is never claimed until it is
    // restored (its memory can go back to the OS meanwhile).
    // The slot to retire next: a free one, else the unpinned one the policy would evict first; -1
    // when every active slot is pinned.
    int64_t retire_candidate() const;
    // Retires an unpinned slot, forgetting its key (*evicted_valid: it held one, *evicted).
    void retire(int64_t slot, bool* evicted_valid, ExpertKey* evicted);
    // A retired slot back to the free ones; -1 when none is retired, else the slot.
    int64_t restore();
    bool retired(int64_t slot) const { return retired_[static_cast<size_t>(slot)]; }
    int64_t n_active() const { return n_slots() - n_retired_; }

 private:
    // The used, unpinned slot with the lowest keep score, or -1.
    int64_t lowest_unpinned() const;

    std::unique_ptr<EvictionPolicy> policy_;
    std::vector<ExpertKey> keys_;
    std::vector<bool> used_;
    std::vector<bool> retired_;
    int64_t n_retired_ = 0;
    std::vector<int32_t> pins_;
    std::vector<int64_t> free_;
    std::unordered_map<uint64_t, int64_t> index_;
    uint64_t tick_ = 0;
};

// Replays a trace of per-layer expert requests through a policy with `n_slots` slots; returns
// the hit rate. Used to compare policies on the same routing.
double simulate_policy(CachePolicy policy, int64_t n_slots, std::span<const ExpertKey> trace);

}  // namespace sluice::experts
