// The MoE's routed experts computed in the order their weights become readable (moe.cpp routed_each over
// ExpertSource::acquire_each): whatever order a source hands the experts in — ascending, descending,
// shuffled — a prefill's logits are bit for bit those of the resident, in-order run, every expert is
// released exactly once, and a source that fails part-way leaves the sequence where it was with nothing
// held. Also the expert store's own acquire_each (each expert once, the bytes acquire() gives, slots
// released one by one) and its prefetch that waits for a slot instead of being dropped.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "convert/packer.h"
#include "core/thread_pool.h"
#include "experts/expert_store.h"
#include "experts/prefetch_gate.h"
#include "format/pack.h"
#include "golden_store.h"
#include "model/model.h"
#include "test_util.h"

namespace sluice {
namespace {

// Hands a resident model's experts to acquire_each in an order of its choosing, counting pins.
class ReorderingSource final : public model::ExpertSource {
 public:
    enum class Order { kAscending, kDescending, kShuffled };
    ReorderingSource(model::ExpertSource* inner, Order order) : inner_(inner), order_(order) {}

    Status acquire(int64_t layer, std::span<const int32_t> ids, model::ExpertWeights* out) override {
        for (int32_t id : ids) pins_[{layer, id}]++;
        return inner_->acquire(layer, ids, out);
    }
    Status acquire_each(int64_t layer, std::span<const int32_t> ids, model::ExpertWeights* out,
                        const std::function<void(size_t i)>& use) override {
        SLUICE_RETURN_IF_ERROR(inner_->acquire(layer, ids, out));
        std::vector<size_t> order(ids.size());
        std::iota(order.begin(), order.end(), size_t{0});
        if (order_ == Order::kDescending) std::reverse(order.begin(), order.end());
        if (order_ == Order::kShuffled) std::shuffle(order.begin(), order.end(), rng_);
        for (size_t k = 0; k < order.size(); ++k) {
            if (fail_after_ >= 0 && handed_ >= fail_after_)
                return error(ErrorCode::kIo, "layer " + std::to_string(layer) + ": injected read failure");
            pins_[{layer, ids[order[k]]}]++;
            ++handed_;
            use(order[k]);
        }
        return Status::ok();
    }
    void release(int64_t layer, std::span<const int32_t> ids) override {
        for (int32_t id : ids) {
            int& pins = pins_[{layer, id}];
            EXPECT_GT(pins, 0) << "layer " << layer << " expert " << id << " released without a pin";
            --pins;
        }
    }
    int64_t max_pinned() const override { return INT64_MAX; }
    void fail_after(int64_t n) {
        fail_after_ = n;
        handed_ = 0;
    }
    int64_t held() const {
        int64_t n = 0;
        for (const auto& [key, pins] : pins_) n += pins;
        return n;
    }

 private:
    model::ExpertSource* inner_;
    Order order_;
    std::mt19937 rng_{7};
    std::map<std::pair<int64_t, int32_t>, int> pins_;
    int64_t fail_after_ = -1, handed_ = 0;
};

std::vector<int32_t> prompt(int64_t n, int64_t vocab) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % vocab);
    return ids;
}

// All-position logits of a prompt of 80 tokens (a DeltaNet chunk boundary and a MoE block boundary
// inside it) in one forward.
std::vector<float> prefill_logits(const model::Model& m, ThreadPool& pool) {
    const int64_t T = 80, V = m.config().vocab;
    model::ModelState state = m.new_state(T + 1);
    model::Workspace ws;
    std::vector<float> logits(static_cast<size_t>(T * V));
    const std::vector<int32_t> ids = prompt(T, V);
    const Status st = m.forward(state, ids, logits.data(), /*all_logits=*/true, ws, &pool);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return logits;
}

class MoeOrder : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeOrder, ExpertsLandingInAnyOrderGiveTheInOrderBits) {
    auto loaded = model::Model::load(testing::test_data_dir() + "/goldens/" + GetParam());
    ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
    model::Model& m = **loaded;
    ThreadPool pool(2);
    const std::vector<float> want = prefill_logits(m, pool);
    model::ExpertSource* resident = m.expert_source();
    for (auto order : {ReorderingSource::Order::kAscending, ReorderingSource::Order::kDescending,
                       ReorderingSource::Order::kShuffled}) {
        SCOPED_TRACE("order " + std::to_string(static_cast<int>(order)));
        ReorderingSource source(resident, order);
        m.set_expert_source(&source);
        const std::vector<float> got = prefill_logits(m, pool);
        m.set_expert_source(nullptr);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
            << "logits differ from the in-order run";
        EXPECT_EQ(source.held(), 0) << "experts left pinned";
    }
}

TEST_P(MoeOrder, ASourceFailingPartWayLeavesTheStateAndNothingHeld) {
    auto loaded = model::Model::load(testing::test_data_dir() + "/goldens/" + GetParam());
    ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
    model::Model& m = **loaded;
    ThreadPool pool(2);
    ReorderingSource source(m.expert_source(), ReorderingSource::Order::kDescending);
    m.set_expert_source(&source);
    const int64_t T = 80, V = m.config().vocab;
    model::ModelState state = m.new_state(T + 1);
    model::Workspace ws;
    std::vector<float> logits(static_cast<size_t>(V));
    source.fail_after(3);  // the first MoE layer's fourth expert (descending: several held by then)
    const Status st = m.forward(state, prompt(T, V), logits.data(), false, ws, &pool);
    m.set_expert_source(nullptr);
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("injected read failure"), std::string::npos) << st.message();
    EXPECT_EQ(state.n_past, 0);
    EXPECT_EQ(source.held(), 0) << "experts left pinned after the failure";
}

// Goldens whose top-k is 3 or 4: their n·k rows overflow the 2n-row ring, so out-of-order experts are
// both kept in the ring and held; with and without routed-expert biases (gpt-oss), shared experts and
// groups.
INSTANTIATE_TEST_SUITE_P(Goldens, MoeOrder,
                         ::testing::Values("qwen3_next_hf_bf16", "qwen3_next_mlx_q4", "gpt_oss_hf_bf16",
                                           "glm4_moe_hf_bf16", "deepseek_v3_hf_bf16", "qwen2_moe_mlx_q4"));

// The store's acquire_each over a packed golden: each expert handed once with the bytes acquire() gives,
// releasable one at a time inside the callback; then no slot is pinned (the cache shrinks to its floor).
TEST(ExpertStoreEach, HandsEveryExpertOnceWithAcquiresBytes) {
    testing::TempDir dir;
    const std::string packed = dir.file("packed");
    testing::GoldenStore gs;
    ASSERT_NO_FATAL_FAILURE(testing::open_layer_store(packed, 1, 3, &gs));
    experts::ExpertStore& store = *gs.store;
    const uint64_t slot = gs.slot;
    const int64_t n_experts = gs.n_experts;
    const int32_t layer = gs.layers[0];
    const std::vector<int32_t>& all = gs.all;

    // The reference bytes, through acquire(), then evicted by a shrink to one slot and grown back.
    std::vector<model::ExpertWeights> views(all.size());
    ASSERT_TRUE(store.acquire(layer, all, views.data()).is_ok());
    std::vector<std::vector<uint8_t>> want;
    for (const auto& v : views) {
        const auto* p = static_cast<const uint8_t*>(v.down.data);
        want.emplace_back(p, p + 512);
    }
    store.release(layer, all);
    store.set_cache_bytes(slot);
    store.set_cache_bytes(slot * static_cast<uint64_t>(n_experts));
    // Two experts are hits, the others read.
    std::vector<model::ExpertWeights> two(2);
    ASSERT_TRUE(store.acquire(layer, std::span<const int32_t>(all.data() + 2, 2), two.data()).is_ok());
    store.release(layer, std::span<const int32_t>(all.data() + 2, 2));

    std::vector<int> handed(all.size(), 0);
    std::vector<model::ExpertWeights> got(all.size());
    const Status st = store.acquire_each(layer, all, got.data(), [&](size_t i) {
        handed[i]++;
        EXPECT_EQ(0, std::memcmp(got[i].down.data, want[i].data(), want[i].size())) << "expert " << i;
        store.release(layer, std::span<const int32_t>(&all[i], 1));
    });
    ASSERT_TRUE(st.is_ok()) << st.message();
    for (size_t i = 0; i < handed.size(); ++i) EXPECT_EQ(handed[i], 1) << "expert " << i;
    EXPECT_EQ(store.set_cache_bytes(slot), slot);
    EXPECT_EQ(store.capacity().active_slots, 1) << "a slot is still pinned";
}

// A prefetch hint that finds every slot pinned (a prefill holding its layer's union) starts its reads as
// the layer releases slots, instead of being dropped; the next layer then finds them as hits.
TEST(ExpertStoreEach, APrefetchWaitingForSlotsStartsAsTheLayerReleasesThem) {
    testing::TempDir dir;
    const std::string packed = dir.file("packed");
    testing::GoldenStore gs;
    ASSERT_NO_FATAL_FAILURE(testing::open_golden_store(
        packed,
        [](experts::ExpertStoreOptions& so, const testing::GoldenStore& g) {
            so.cache_bytes = g.slot * static_cast<uint64_t>(g.n_experts);  // one layer's experts
            so.io_threads = 2;
        },
        &gs));
    experts::ExpertStore& store = *gs.store;
    const int32_t first = gs.layers[0], second = gs.layers[1];
    const std::vector<int32_t>& all = gs.all;

    std::vector<model::ExpertWeights> views(all.size());
    ASSERT_TRUE(store.acquire(first, all, views.data()).is_ok());  // every slot pinned
    store.prefetch(second, std::span<const int32_t>(all.data(), 3));
    EXPECT_EQ(store.stats().prefetch_issued, 0u) << "no slot was free";
    for (size_t i = 0; i < 3; ++i) store.release(first, std::span<const int32_t>(&all[i], 1));
    EXPECT_EQ(store.stats().prefetch_issued, 3u) << "the released slots took the waiting prefetch";
    store.release(first, std::span<const int32_t>(all.data() + 3, all.size() - 3));
    store.wait_idle();
    const uint64_t misses = store.stats().misses;
    ASSERT_TRUE(store.acquire(second, std::span<const int32_t>(all.data(), 3), views.data()).is_ok());
    EXPECT_EQ(store.stats().misses, misses) << "the prefetched experts were not hits";
    EXPECT_EQ(store.stats().prefetch_used, 3u);
    store.release(second, std::span<const int32_t>(all.data(), 3));
}

// Holds the store's only reader thread inside its first read's announcement until let go, so the reads
// queued behind it stay queued.
class GateObserver final : public model::SlotMemoryObserver {
 public:
    bool on_restore(uint8_t*, uint64_t) override {
        while (!open_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return false;
    }
    void on_retire(uint8_t*, uint64_t) override {}
    void open() { open_ = true; }

 private:
    std::atomic<bool> open_{false};
};

// A layer's prefetch reads that have not started when the layer comes, of experts it does not route to, are
// dropped unread: counted as canceled, not as issued, never read.
TEST(ExpertStoreEach, QueuedPrefetchesTheLayerDoesNotWantAreDroppedUnread) {
    testing::TempDir dir;
    const std::string packed = dir.file("packed");
    testing::GoldenStore gs;
    ASSERT_NO_FATAL_FAILURE(testing::open_golden_store(
        packed,
        [](experts::ExpertStoreOptions& so, const testing::GoldenStore& g) {
            so.cache_bytes = g.slot * static_cast<uint64_t>(g.n_experts);
            so.io_threads = 1;
        },
        &gs));
    experts::ExpertStore& store = *gs.store;
    const int64_t n_experts = gs.n_experts;
    const int32_t layer = gs.layers[1];
    GateObserver gate;
    store.set_slot_observer(&gate);
    store.prefetch(layer, gs.all);  // the reader takes expert 0's read and stops at the gate
    ASSERT_EQ(store.stats().prefetch_issued, static_cast<uint64_t>(n_experts));

    // The layer comes and wants experts 0 and 1 only: 2 .. n-1 are dropped before their reads start.
    const std::vector<int32_t> wanted = {0, 1};
    std::vector<model::ExpertWeights> views(2);
    Status st;
    std::thread forward([&] { st = store.acquire(layer, wanted, views.data()); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (store.stats().prefetch_canceled < static_cast<uint64_t>(n_experts - 2) &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    gate.open();
    forward.join();
    ASSERT_TRUE(st.is_ok()) << st.message();
    store.release(layer, wanted);
    store.wait_idle();
    const experts::ExpertStoreStats stats = store.stats();
    EXPECT_EQ(stats.prefetch_canceled, static_cast<uint64_t>(n_experts - 2));
    EXPECT_EQ(stats.prefetch_issued, 2u);
    EXPECT_EQ(stats.prefetch_used, 2u);
    EXPECT_EQ(stats.reads, 2u) << "a canceled prefetch was read";
    store.set_slot_observer(nullptr);
}

// The decode prefetch gate: on for the first block, off for the second, then the arm with the lower median
// step time, the other every kExploreEvery-th block; one long step (an idle gap) does not move a median; a
// prefill among the steps restarts the block.
TEST(PrefetchGate, RunsTheFasterArmAndKeepsMeasuringTheOther) {
    using experts::PrefetchGate;
    constexpr int B = PrefetchGate::kBlock;
    PrefetchGate g;
    auto block = [&](double on_s, double off_s, bool long_step = false) {
        const bool on = g.enabled();
        for (int i = 0; i < B; ++i) g.step(long_step && i == 3 ? 30.0 : (on ? on_s : off_s));
        return on;
    };
    EXPECT_TRUE(block(0.5, 0.4));   // block 1: prefetch on
    EXPECT_FALSE(block(0.5, 0.4));  // block 2: off
    EXPECT_DOUBLE_EQ(g.median_on(), 0.5);
    EXPECT_DOUBLE_EQ(g.median_off(), 0.4);
    // Off is faster: off from now on, but for every 8th block, which measures on again.
    int on_blocks = 0;
    for (int b = 3; b <= 2 + 2 * PrefetchGate::kExploreEvery; ++b) on_blocks += block(0.5, 0.4, b == 5);
    EXPECT_EQ(on_blocks, 2);
    EXPECT_DOUBLE_EQ(g.median_off(), 0.4) << "one idle gap moved the median";
    // Prefetch becomes the faster (a trained router, say): the next exploring block finds it, and it stays.
    for (int b = 0; b < PrefetchGate::kExploreEvery && !g.enabled(); ++b) block(0.3, 0.4);
    EXPECT_TRUE(block(0.3, 0.4)) << "no block explored prefetch";
    EXPECT_DOUBLE_EQ(g.median_on(), 0.3);
    EXPECT_TRUE(g.enabled());
    EXPECT_TRUE(block(0.3, 0.4));
    // A restarted block counts only what follows.
    for (int i = 0; i < B - 1; ++i) g.step(9.0);
    g.restart_block();
    EXPECT_TRUE(block(0.3, 0.4));
    EXPECT_DOUBLE_EQ(g.median_on(), 0.3);
}

}  // namespace
}  // namespace sluice
