// SessionPool (src/server/session_pool.h) on the tiny trained model: one client's requests are
// served in arrival order, clients take turns, a request lands on the session that holds the longest prefix
// of its prompt, and a waiter that gives up leaves the queue without blocking the ones behind it.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "server/session_pool.h"

namespace sluice::server {
namespace {

std::shared_ptr<Engine> tiny_engine() {
    static std::shared_ptr<Engine> engine = [] {
        EngineOptions eo;
        eo.model_dir = std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";
        eo.context_tokens = 256;
        eo.threads = 2;
        eo.memory_bytes = 2ull << 30;
        auto e = Engine::load(eo);
        EXPECT_TRUE(e.has_value()) << e.status().message();
        return e.has_value() ? e.value() : nullptr;
    }();
    return engine;
}

TEST(ServerSessionPool, FifoOrder) {
    auto engine = tiny_engine();
    ASSERT_TRUE(engine);
    SessionPool pool(engine, 1);
    const std::vector<int32_t> prompt = {1, 2, 3};
    std::vector<int> order;
    std::mutex mutex;
    std::vector<std::thread> threads;
    {
        SessionPool::Lease held = pool.acquire(prompt, {}, 10);
        ASSERT_TRUE(held);
        for (int i = 0; i < 4; ++i) {
            threads.emplace_back([&, i] {
                SessionPool::Lease lease = pool.acquire(prompt, {}, 10);
                std::lock_guard lock(mutex);
                order.push_back(i);
            });
            // Wait until the thread is queued before starting the next one.
            while (pool.queue_depth() < i + 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        EXPECT_EQ(pool.queue_depth(), 4);
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(pool.queue_depth(), 0);
    EXPECT_EQ(pool.active(), 0);
}

// Queues `names` (tenant per waiter, in this arrival order) behind a session held by `holder`,
// releases it, and returns the tenants in the order they were served.
std::vector<std::string> served_order(SessionPool& pool, const std::string& holder,
                                      const std::vector<std::string>& names) {
    const std::vector<int32_t> prompt = {1, 2, 3};
    std::vector<std::string> order;
    std::mutex mutex;
    std::vector<std::thread> threads;
    {
        SessionPool::Lease held = pool.acquire(prompt, {}, 10, holder);
        EXPECT_TRUE(held);
        for (size_t i = 0; i < names.size(); ++i) {
            threads.emplace_back([&, i] {
                SessionPool::Lease lease = pool.acquire(prompt, {}, 10, names[i]);
                std::lock_guard lock(mutex);
                order.push_back(names[i] + std::to_string(i));
            });
            while (pool.queue_depth() < static_cast<int64_t>(i + 1))
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    for (auto& t : threads) t.join();
    return order;
}

TEST(ServerSessionPool, ClientsTakeTurns) {
    auto engine = tiny_engine();
    ASSERT_TRUE(engine);
    SessionPool pool(engine, 1);
    // A client that queued four requests behind its own running one does not hold back a client
    // that arrives after them: that one is served next, then the burst in its order.
    EXPECT_EQ(served_order(pool, "hog", {"hog", "hog", "hog", "hog", "polite"}),
              (std::vector<std::string>{"polite4", "hog0", "hog1", "hog2", "hog3"}));
    // Two clients' bursts interleave, each in its own arrival order.
    EXPECT_EQ(served_order(pool, "c", {"a", "a", "a", "b", "b"}),
              (std::vector<std::string>{"a0", "b3", "a1", "b4", "a2"}));
    EXPECT_EQ(pool.queue_depth(), 0);
    EXPECT_EQ(pool.active(), 0);
}

TEST(ServerSessionPool, AbandonedWaiterLeavesTheQueue) {
    auto engine = tiny_engine();
    ASSERT_TRUE(engine);
    SessionPool pool(engine, 1);
    const std::vector<int32_t> prompt = {1, 2, 3};
    std::atomic<bool> want{true};
    std::thread quitter, next;
    bool quitter_got = true, next_got = false;
    {
        SessionPool::Lease held = pool.acquire(prompt, {}, 10);
        quitter = std::thread([&] {
            quitter_got = static_cast<bool>(pool.acquire(
                prompt, [&] { return want.load(); }, 10));
        });
        while (pool.queue_depth() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        next = std::thread([&] { next_got = static_cast<bool>(pool.acquire(prompt, {}, 10)); });
        while (pool.queue_depth() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        want = false;
        quitter.join();
    }
    next.join();
    EXPECT_FALSE(quitter_got);
    EXPECT_TRUE(next_got);
}

TEST(ServerSessionPool, PrefixAffinity) {
    auto engine = tiny_engine();
    ASSERT_TRUE(engine);
    SessionPool pool(engine, 3);
    const std::vector<int32_t> a = {10, 11, 12, 13}, b = {20, 21, 22};
    int slot_a = -1, slot_b = -1;
    {
        SessionPool::Lease la = pool.acquire(a, {});
        SessionPool::Lease lb = pool.acquire(b, {});
        ASSERT_TRUE(la.session().evaluate(a, false).has_value());
        ASSERT_TRUE(lb.session().evaluate(b, false).has_value());
        slot_a = la.slot();
        slot_b = lb.slot();
    }
    ASSERT_NE(slot_a, slot_b);
    const std::vector<int32_t> a_next = {10, 11, 12, 13, 14, 15}, b_next = {20, 21, 99};
    EXPECT_EQ(pool.acquire(a_next, {}).slot(), slot_a);
    EXPECT_EQ(pool.acquire(b_next, {}).slot(), slot_b);
    // No shared prefix: the least recently used session (the untouched third one).
    const std::vector<int32_t> other = {30};
    SessionPool::Lease lo = pool.acquire(other, {});
    EXPECT_NE(lo.slot(), slot_a);
    EXPECT_NE(lo.slot(), slot_b);
}

// A request's KV type (kv_bits): the leased session is re-made with it, and only sessions of the
// wanted type count their shared prefix.
TEST(ServerSessionPool, KvBitsRemakeTheSessionAndSteerAffinity) {
    auto engine = tiny_engine();
    ASSERT_TRUE(engine);
    SessionPool pool(engine, 2);
    const std::vector<int32_t> a = {10, 11, 12, 13}, a_next = {10, 11, 12, 13, 14};
    int q4_slot = -1;
    {
        SessionPool::Lease l = pool.acquire(a, {}, 1000, {}, 4);
        ASSERT_TRUE(l.use_kv_bits(4).is_ok());
        EXPECT_EQ(l.session().kv_bits(), 4);
        ASSERT_TRUE(l.session().evaluate(a, false).has_value());
        q4_slot = l.slot();
        EXPECT_EQ(l.use_kv_bits(5).code(), ErrorCode::kInvalidArgument);
        EXPECT_EQ(l.session().kv_bits(), 4) << "a failed change leaves the session as it was";
        EXPECT_EQ(l.session().position(), 4);
    }
    EXPECT_EQ(pool.acquire(a_next, {}, 1000, {}, 4).slot(), q4_slot);  // the q4 session holds the prefix
    {
        // The engine's type (0) does not reuse a q4 session's cache: the other, least recently used.
        SessionPool::Lease l = pool.acquire(a_next, {}, 1000, {}, 0);
        EXPECT_NE(l.slot(), q4_slot);
        ASSERT_TRUE(l.use_kv_bits(0).is_ok());
        EXPECT_EQ(l.session().kv_bits(), engine->new_session()->kv_bits());
    }
}

}  // namespace
}  // namespace sluice::server
