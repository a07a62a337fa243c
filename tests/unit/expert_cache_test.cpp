// The expert cache's capacity under memory pressure: the slot table's retire/restore, and the
// store shrinking (pages handed back to the OS, pinned slots kept until released), serving a step
// larger than its shrunk size, and growing back — with every expert read back byte-exact; and the
// slot observer a GPU backend page-locks the slots in use with, told of exactly those slots.
#include "experts/expert_cache.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "convert/packer.h"
#include "experts/expert_store.h"
#include "format/pack.h"
#include "golden_store.h"
#include "test_util.h"

namespace sluice {
namespace {

using experts::ExpertKey;
using experts::SlotTable;

TEST(ExpertCache, RetiredSlotsAreNeverClaimedUntilRestored) {
    SlotTable table(4, experts::make_policy(CachePolicy::kLfu));
    bool evicted_valid = false;
    ExpertKey evicted;
    // Free slots go first; then the lowest keep score among the unpinned.
    for (int32_t e = 0; e < 3; ++e) table.claim({0, e}, &evicted_valid, &evicted);
    for (int i = 0; i < 3; ++i) table.touch({0, 0});
    table.touch({0, 1});
    const int64_t free_slot = table.retire_candidate();  // the one slot no key holds
    for (int32_t e = 0; e < 3; ++e) EXPECT_NE(table.find({0, e}), free_slot);
    table.retire(free_slot, &evicted_valid, &evicted);
    EXPECT_FALSE(evicted_valid);
    EXPECT_EQ(table.n_active(), 3);
    // Expert 2 was used least: retired next, forgetting it.
    const int64_t slot2 = table.find({0, 2});
    table.pin(table.find({0, 0}));
    EXPECT_EQ(table.retire_candidate(), slot2);
    table.retire(slot2, &evicted_valid, &evicted);
    ASSERT_TRUE(evicted_valid);
    EXPECT_EQ(evicted.expert, 2);
    EXPECT_EQ(table.find({0, 2}), -1);
    // Two active slots, one pinned: a new key evicts the unpinned one, never a retired slot.
    const int64_t got = table.claim({1, 7}, &evicted_valid, &evicted);
    EXPECT_TRUE(evicted_valid);
    EXPECT_EQ(evicted.expert, 1);
    EXPECT_FALSE(table.retired(got));
    // Everything active pinned: nothing to retire or claim.
    table.pin(got);
    EXPECT_EQ(table.retire_candidate(), -1);
    EXPECT_EQ(table.claim({1, 8}, &evicted_valid, &evicted), -1);
    // Restored slots are free again.
    const int64_t back = table.restore();
    ASSERT_GE(back, 0);
    EXPECT_EQ(table.n_active(), 3);
    EXPECT_EQ(table.claim({1, 8}, &evicted_valid, &evicted), back);
    EXPECT_FALSE(evicted_valid);
    ASSERT_GE(table.restore(), 0);
    EXPECT_EQ(table.restore(), -1);
    EXPECT_EQ(table.n_active(), 4);
}

// Pages of [p, p + bytes) resident in memory (mincore).
size_t resident_pages(const uint8_t* p, size_t bytes) {
    const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> v((bytes + page - 1) / page);
    if (mincore(const_cast<uint8_t*>(p), bytes, v.data()) != 0) return SIZE_MAX;
    size_t n = 0;
    for (unsigned char c : v) n += c & 1;
    return n;
}

TEST(ExpertCache, StoreShrinksUnderPressureAndGrowsBack) {
    testing::TempDir dir;
    const std::string packed = dir.file("packed");
    testing::GoldenStore ls;
    ASSERT_NO_FATAL_FAILURE(testing::open_layer_store(packed, 2, 2, &ls));
    experts::ExpertStore& store = *ls.store;
    const uint64_t slot = ls.slot;
    const int64_t n_experts = ls.n_experts;
    const int32_t layer = ls.layers[0];
    const std::vector<int32_t>& all = ls.all;

    // Every expert of the layer once: the bytes each view starts with, to compare after refills.
    std::vector<model::ExpertWeights> views(all.size());
    ASSERT_TRUE(store.acquire(layer, all, views.data()).is_ok());
    std::vector<std::vector<uint8_t>> bytes;
    for (const auto& v : views) {
        const auto* p = static_cast<const uint8_t*>(v.down.data);
        bytes.emplace_back(p, p + 256);
    }
    const std::span<uint8_t> memory = store.host_memory();
    const size_t full_pages = resident_pages(memory.data(), memory.size());
    EXPECT_GT(full_pages, 0u);

    // Shrink while the step holds every slot: nothing can go yet.
    EXPECT_EQ(store.set_cache_bytes(slot * 3), slot * 3);
    EXPECT_EQ(store.capacity().active_slots, n_experts);
    EXPECT_EQ(store.capacity().target_slots, 3);
    // Released: all but three slots are retired and their pages handed back.
    store.release(layer, all);
    const experts::ExpertCacheCapacity cap = store.capacity();
    EXPECT_EQ(cap.active_slots, 3);
    EXPECT_EQ(cap.floor_slots, 2);
    EXPECT_EQ(store.stats().bytes_returned, slot * static_cast<uint64_t>(n_experts - 3));
    EXPECT_LT(resident_pages(memory.data(), memory.size()), full_pages);
    // Below the floor: clamped to it.
    EXPECT_EQ(store.set_cache_bytes(0), slot * 2);
    EXPECT_EQ(store.capacity().active_slots, 2);

    // A step asking for more experts than the cache now holds still gets them all, right.
    ASSERT_TRUE(store.acquire(layer, all, views.data()).is_ok());
    for (size_t i = 0; i < views.size(); ++i)
        ASSERT_EQ(std::memcmp(views[i].down.data, bytes[i].data(), bytes[i].size()), 0) << "expert " << i;
    EXPECT_EQ(store.capacity().active_slots, n_experts);
    store.release(layer, all);
    EXPECT_EQ(store.capacity().active_slots, 2);
    EXPECT_EQ(store.max_pinned(), 2);

    // Grown back: every slot usable again, and the experts load into them as before.
    EXPECT_EQ(store.set_cache_bytes(slot * static_cast<uint64_t>(n_experts) * 4), slot * n_experts);
    EXPECT_EQ(store.capacity().active_slots, n_experts);
    ASSERT_TRUE(store.acquire(layer, all, views.data()).is_ok());
    for (size_t i = 0; i < views.size(); ++i)
        ASSERT_EQ(std::memcmp(views[i].down.data, bytes[i].data(), bytes[i].size()), 0) << "expert " << i;
    store.release(layer, all);
    // Held again: the next shrink returns them, the store still serves hits for what it keeps.
    const uint64_t before = store.stats().bytes_returned;
    store.set_cache_bytes(slot * 4);
    EXPECT_EQ(store.stats().bytes_returned - before, slot * static_cast<uint64_t>(n_experts - 4));
}

// What a store tells its slot observer (the stand-in for the GPU backend's page-locking), checked
// as it comes: a slot is announced only when not already observed, and once a read has filled it
// (its pages are there); a retirement names an observed slot and comes before madvise (its pages
// are still there). `accept`: what on_restore answers.
class RecordingObserver final : public model::SlotMemoryObserver {
 public:
    RecordingObserver(std::span<uint8_t> memory, uint64_t slot_bytes, bool accept)
        : memory_(memory), slot_bytes_(slot_bytes), accept_(accept) {}
    bool on_restore(uint8_t* data, uint64_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        const int64_t slot = slot_of(data, bytes);
        EXPECT_EQ(observed_.count(slot), 0u) << "slot " << slot << " announced twice";
        EXPECT_GT(resident_pages(data, bytes), 0u) << "slot " << slot << " announced before its read";
        restored_.insert(slot);
        if (accept_) observed_.insert(slot);
        return accept_;
    }
    void on_retire(uint8_t* data, uint64_t bytes) override {
        std::lock_guard<std::mutex> lock(mutex_);
        const int64_t slot = slot_of(data, bytes);
        EXPECT_TRUE(accept_) << "slot " << slot << ": on_retire after on_restore declined it";
        EXPECT_EQ(observed_.erase(slot), 1u) << "slot " << slot << " retired without being observed";
        EXPECT_GT(resident_pages(data, bytes), 0u) << "slot " << slot << " retired after madvise";
        retired_.insert(slot);
    }
    // The slots announced and retired since the last call, and observed now.
    std::set<int64_t> take_restored() { return take(restored_); }
    std::set<int64_t> take_retired() { return take(retired_); }
    std::set<int64_t> observed() {
        std::lock_guard<std::mutex> lock(mutex_);
        return observed_;
    }

 private:
    int64_t slot_of(const uint8_t* data, uint64_t bytes) const {
        EXPECT_EQ(bytes, slot_bytes_);
        const auto offset = static_cast<uint64_t>(data - memory_.data());
        EXPECT_EQ(offset % slot_bytes_, 0u);
        EXPECT_LT(offset, memory_.size());
        return static_cast<int64_t>(offset / slot_bytes_);
    }
    std::set<int64_t> take(std::set<int64_t>& s) {
        std::lock_guard<std::mutex> lock(mutex_);
        return std::exchange(s, {});
    }
    std::span<uint8_t> memory_;
    uint64_t slot_bytes_;
    bool accept_;
    std::mutex mutex_;
    std::set<int64_t> observed_, restored_, retired_;
};

// The slots of `store` holding pages (read into and not retired since).
std::set<int64_t> slots_with_pages(experts::ExpertStore& store) {
    std::set<int64_t> out;
    for (int64_t s = 0; s < store.n_slots(); ++s)
        if (resident_pages(store.host_memory().data() + static_cast<uint64_t>(s) * store.slot_bytes(),
                           store.slot_bytes()) > 0)
            out.insert(s);
    return out;
}

std::set<int64_t> slots_of(experts::ExpertStore& store, std::span<const model::ExpertWeights> views) {
    std::set<int64_t> out;
    for (const auto& v : views)
        out.insert((static_cast<const uint8_t*>(v.gate.data) - store.host_memory().data()) /
                   static_cast<int64_t>(store.slot_bytes()));
    return out;
}

// The slot observer sees exactly the slots in use: those already filled when it is set, each slot
// once its first read fills it, the retired ones before their pages go — at the shrink, or when a
// step that pinned them releases them — the ones a step needs back once they are read into again,
// and after growth only as reads refill them; removing it retires what it still observes.
TEST(ExpertCache, SlotObserverSeesExactlyTheSlotsInUse) {
    testing::TempDir dir;
    const std::string packed = dir.file("packed");
    testing::GoldenStore ls;
    ASSERT_NO_FATAL_FAILURE(testing::open_layer_store(packed, 2, 2, &ls));
    experts::ExpertStore& store = *ls.store;
    const uint64_t slot = ls.slot;
    const int64_t n_experts = ls.n_experts;
    const int32_t layer = ls.layers[0];
    const std::vector<int32_t>& all = ls.all;
    std::vector<model::ExpertWeights> views(all.size());

    // Three experts read before the observer is set: it is told of their slots when set.
    const std::vector<int32_t> first = {0, 1, 2};
    ASSERT_TRUE(store.acquire(layer, first, views.data()).is_ok());
    const std::set<int64_t> first_slots = slots_of(store, std::span(views.data(), first.size()));
    store.release(layer, first);
    RecordingObserver observer(store.host_memory(), slot, true);
    ASSERT_TRUE(store.set_slot_observer(&observer));
    EXPECT_EQ(observer.take_restored(), first_slots);

    // Every expert: the other slots are announced as their reads fill them; hits announce nothing.
    ASSERT_TRUE(store.acquire(layer, all, views.data()).is_ok());
    const std::set<int64_t> every_slot = slots_of(store, views);
    ASSERT_EQ(every_slot.size(), all.size());
    std::set<int64_t> rest;
    std::set_difference(every_slot.begin(), every_slot.end(), first_slots.begin(), first_slots.end(),
                        std::inserter(rest, rest.end()));
    EXPECT_EQ(observer.take_restored(), rest);
    store.release(layer, all);
    ASSERT_TRUE(store.acquire(layer, all, views.data()).is_ok());
    EXPECT_TRUE(observer.take_restored().empty());
    EXPECT_EQ(observer.observed(), every_slot);

    // Shrunk while the step pins every slot: nothing is retired until it releases them, then exactly
    // the slots whose pages went back.
    store.set_cache_bytes(slot * 3);
    EXPECT_TRUE(observer.take_retired().empty());
    store.release(layer, all);
    const std::set<int64_t> kept = slots_with_pages(store);
    EXPECT_EQ(kept.size(), 3u);
    std::set<int64_t> returned;
    std::set_difference(every_slot.begin(), every_slot.end(), kept.begin(), kept.end(),
                        std::inserter(returned, returned.end()));
    EXPECT_EQ(observer.take_retired(), returned);
    EXPECT_EQ(observer.observed(), kept);
    // An unpinned shrink retires at once.
    store.set_cache_bytes(slot * 2);
    const std::set<int64_t> floor_kept = slots_with_pages(store);
    EXPECT_EQ(floor_kept.size(), 2u);
    std::set<int64_t> one;
    std::set_difference(kept.begin(), kept.end(), floor_kept.begin(), floor_kept.end(),
                        std::inserter(one, one.end()));
    EXPECT_EQ(observer.take_retired(), one);

    // A step needing more than the floor: the slots restored for it are announced as their reads
    // refill them and retired again when it releases them.
    ASSERT_TRUE(store.acquire(layer, all, views.data()).is_ok());
    std::set<int64_t> refilled;
    std::set_difference(every_slot.begin(), every_slot.end(), floor_kept.begin(), floor_kept.end(),
                        std::inserter(refilled, refilled.end()));
    EXPECT_EQ(observer.take_restored(), refilled);
    EXPECT_EQ(observer.observed(), every_slot);
    store.release(layer, all);
    const std::set<int64_t> after_step = slots_with_pages(store);
    EXPECT_EQ(after_step.size(), 2u);
    EXPECT_EQ(observer.observed(), after_step);
    EXPECT_EQ(observer.take_retired().size(), all.size() - 2);

    // Grown back: nothing is announced until reads fill the restored slots.
    store.set_cache_bytes(slot * static_cast<uint64_t>(n_experts));
    EXPECT_TRUE(observer.take_restored().empty());
    ASSERT_TRUE(store.acquire(layer, all, views.data()).is_ok());
    std::set<int64_t> regrown;
    std::set_difference(every_slot.begin(), every_slot.end(), after_step.begin(), after_step.end(),
                        std::inserter(regrown, regrown.end()));
    EXPECT_EQ(observer.take_restored(), regrown);
    store.release(layer, all);
    EXPECT_EQ(observer.observed(), every_slot);

    // Removed: every slot it observes is retired to it (the pages stay: the cache keeps them).
    ASSERT_TRUE(store.set_slot_observer(nullptr));
    EXPECT_EQ(observer.take_retired(), every_slot);
    EXPECT_TRUE(observer.observed().empty());
    store.set_cache_bytes(slot * 2);
    EXPECT_TRUE(observer.take_retired().empty());
}

// A slot the observer declines (a GPU slot whose page-locking failed) still serves, and is never
// reported retired to it.
TEST(ExpertCache, SlotsTheObserverDeclinesAreNeverRetiredToIt) {
    testing::TempDir dir;
    const std::string packed = dir.file("packed");
    testing::GoldenStore gs;
    ASSERT_NO_FATAL_FAILURE(testing::open_layer_store(packed, 1, 2, &gs));
    experts::ExpertStore& store = *gs.store;
    const int32_t layer = gs.layers[0];
    const std::vector<int32_t>& all = gs.all;
    RecordingObserver observer(store.host_memory(), gs.slot, false);  // fails the test on any on_retire
    ASSERT_TRUE(store.set_slot_observer(&observer));
    std::vector<model::ExpertWeights> views(all.size());
    ASSERT_TRUE(store.acquire(layer, all, views.data()).is_ok());
    EXPECT_EQ(observer.take_restored().size(), all.size());
    store.release(layer, all);
    store.set_cache_bytes(0);
    EXPECT_EQ(slots_with_pages(store).size(), 1u);
    ASSERT_TRUE(store.acquire(layer, all, views.data()).is_ok());
    store.release(layer, all);
    ASSERT_TRUE(store.set_slot_observer(nullptr));
    EXPECT_TRUE(observer.take_retired().empty());
}

// The pressure monitor's thread resizes while the forward acquires and releases: every acquire
// succeeds with the right bytes, whatever size the cache has at that moment, and the slot observer
// ends up observing exactly the slots that hold pages (TSan runs this).
TEST(ExpertCache, ResizingWhileStepsRunNeverFailsThem) {
    testing::TempDir dir;
    const std::string packed = dir.file("packed");
    testing::GoldenStore gs;
    ASSERT_NO_FATAL_FAILURE(testing::open_golden_store(
        packed,
        [](experts::ExpertStoreOptions& so, const testing::GoldenStore& g) {
            so.cache_bytes =
                g.slot * static_cast<uint64_t>(g.n_experts * static_cast<int64_t>(g.layers.size()));
            so.floor_bytes = g.slot;
            so.io_threads = 3;
        },
        &gs));
    experts::ExpertStore& store = *gs.store;
    const uint64_t slot = gs.slot;
    const int64_t n_experts = gs.n_experts;
    const std::vector<int32_t>& layers = gs.layers;
    RecordingObserver observer(store.host_memory(), slot, true);
    ASSERT_TRUE(store.set_slot_observer(&observer));
    // Each expert's first bytes, read once at full size.
    std::vector<std::vector<uint8_t>> first(layers.size() * static_cast<size_t>(n_experts));
    for (size_t li = 0; li < layers.size(); ++li)
        for (int32_t e = 0; e < n_experts; ++e) {
            model::ExpertWeights w;
            ASSERT_TRUE(store.acquire(layers[li], std::span<const int32_t>(&e, 1), &w).is_ok());
            const auto* p = static_cast<const uint8_t*>(w.up.data);
            first[li * static_cast<size_t>(n_experts) + static_cast<size_t>(e)].assign(p, p + 64);
            store.release(layers[li], std::span<const int32_t>(&e, 1));
        }
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> resizes{0};
    std::thread resizer([&] {
        for (uint64_t i = 0; !stop.load(); i = ++resizes) {
            store.set_cache_bytes(slot * (1 + (i * 7) % static_cast<uint64_t>(n_experts * 2)));
            if (i % 16 == 0) store.prefetch(layers[i % layers.size()], std::vector<int32_t>{0, 1, 2});
            std::this_thread::yield();
        }
    });
    std::mt19937 rng(5);
    for (int step = 0; step < 300; ++step) {
        // Interleaved with the resizes (cache hits alone would finish before the thread starts).
        while (resizes.load() < static_cast<uint64_t>(step)) std::this_thread::yield();
        const size_t li = rng() % layers.size();
        std::vector<int32_t> ids;
        for (int32_t e = 0; e < n_experts; ++e)
            if (rng() % 3 == 0) ids.push_back(e);
        if (ids.empty()) ids.push_back(0);
        std::vector<model::ExpertWeights> w(ids.size());
        const Status st = store.acquire(layers[li], ids, w.data());
        ASSERT_TRUE(st.is_ok()) << st.message();
        for (size_t i = 0; i < ids.size(); ++i) {
            const auto& want = first[li * static_cast<size_t>(n_experts) + static_cast<size_t>(ids[i])];
            ASSERT_EQ(std::memcmp(w[i].up.data, want.data(), want.size()), 0) << "step " << step;
        }
        store.release(layers[li], ids);
    }
    stop = true;
    resizer.join();
    store.wait_idle();
    EXPECT_GT(store.stats().bytes_returned, 0u);
    EXPECT_EQ(observer.observed(), slots_with_pages(store));
    EXPECT_FALSE(observer.take_retired().empty());
    ASSERT_TRUE(store.set_slot_observer(nullptr));
}

}  // namespace
}  // namespace sluice
