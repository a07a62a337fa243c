// RankThreads (runtime/rank_threads.h): the ranks of an expert-parallel group run at once — a rank's part
// blocks until the others arrive, as a collective does — and a failing rank releases the others through
// on_failure instead of leaving them waiting.
#include "runtime/rank_threads.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace sluice::runtime {
namespace {

// What a collective does to its ranks: each waits until all have arrived, or until abort().
class Rendezvous {
 public:
    explicit Rendezvous(int ranks) : ranks_(ranks) {}
    // False when released by abort() or after 10 s without the others.
    bool arrive() {
        std::unique_lock<std::mutex> lock(mu_);
        const uint64_t round = round_;
        if (++arrived_ == ranks_) {
            arrived_ = 0;
            ++round_;
            cv_.notify_all();
            return true;
        }
        const bool met =
            cv_.wait_for(lock, std::chrono::seconds(10), [&] { return round_ != round || aborted_; });
        return met && !aborted_;
    }
    void abort() {
        std::lock_guard<std::mutex> lock(mu_);
        aborted_ = true;
        cv_.notify_all();
    }

 private:
    std::mutex mu_;
    std::condition_variable cv_;
    int ranks_;
    int arrived_ = 0;
    uint64_t round_ = 0;
    bool aborted_ = false;
};

TEST(RankThreads, EveryRankRunsAtOnceCallAfterCall) {
    for (int ranks : {1, 2, 3, 8}) {
        RankThreads threads(ranks);
        EXPECT_EQ(threads.ranks(), ranks);
        Rendezvous meet(ranks);
        std::atomic<int> failures{0};
        for (int call = 0; call < 50; ++call) {
            std::vector<int> ran(static_cast<size_t>(ranks), 0);
            const Status st = threads.run(
                [&](int r) {
                    ran[static_cast<size_t>(r)] = 1;
                    // Three collectives in one call: every rank must be running at the same time.
                    for (int i = 0; i < 3; ++i)
                        if (!meet.arrive()) return error(ErrorCode::kInternal, "a rank never arrived");
                    return Status::ok();
                },
                [&] { ++failures; });
            ASSERT_TRUE(st.is_ok()) << ranks << " ranks, call " << call << ": " << st.message();
            EXPECT_EQ(ran, std::vector<int>(static_cast<size_t>(ranks), 1));
        }
        EXPECT_EQ(failures.load(), 0);
    }
}

TEST(RankThreads, AFailingRankReleasesTheOthersWaitingForIt) {
    RankThreads threads(3);
    Rendezvous meet(3);
    int released = 0;
    const auto start = std::chrono::steady_clock::now();
    const Status st = threads.run(
        [&](int r) {
            if (r == 1) return error(ErrorCode::kOutOfMemory, "rank 1 could not allocate");
            // The others wait in the "collective" rank 1 never reaches, until the group aborts it.
            if (!meet.arrive()) return error(ErrorCode::kInternal, fmt::format("rank {} released", r));
            return Status::ok();
        },
        [&] {
            ++released;
            meet.abort();
        });
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
        << "released at once, not by timeout";
    EXPECT_EQ(released, 1);
    ASSERT_FALSE(st.is_ok());
    // The lowest failed rank's error: rank 0 was released (an error too), rank 1's caused it.
    EXPECT_EQ(st.message(), "rank 0 released");

    // The threads serve the next call; a call where only rank 2 fails returns rank 2's error.
    released = 0;
    const Status again =
        threads.run([&](int r) { return r == 2 ? error(ErrorCode::kInternal, "rank 2") : Status::ok(); },
                    [&] { ++released; });
    EXPECT_EQ(again.message(), "rank 2");
    EXPECT_EQ(released, 1);
    EXPECT_TRUE(threads.run([](int) { return Status::ok(); }, [] { FAIL() << "no rank failed"; }).is_ok());
}

}  // namespace
}  // namespace sluice::runtime
