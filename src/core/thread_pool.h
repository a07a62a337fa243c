// A fixed pool of worker threads for data-parallel loops (kernels split rows over it).
//
// parallel_for(n, fn) calls fn(begin, end) over disjoint ranges covering [0, n), using the
// calling thread as one of the workers, and returns when all ranges are done. Ranges are
// contiguous blocks of at least `grain` items (up to 4 per thread, each claimed by whichever thread
// is free), so per-thread data stays cache-local and a preempted thread does not stall the call.
//
// Thread safety: one parallel_for at a time per pool (the forward pass owns its pool); fn must be
// safe to call concurrently on disjoint ranges. Nested parallel_for from inside fn runs inline.
// Rejected alternative: OpenMP — it hides thread counts from the memory plan and fights with
// the IO threads of the expert store.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice {

class ThreadPool {
 public:
    // n_threads counts the caller: ThreadPool(1) runs everything inline. 0 = hardware threads.
    explicit ThreadPool(int n_threads = 0);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Splits [0, n) into ranges of at least `grain` items and runs fn on them in parallel.
    void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                      int64_t grain = 1);

 private:
    void worker_loop(int index);
    // Claims and runs chunks of generation `gen` until none are left.
    void run_chunks(uint64_t gen);

    int n_threads_ = 1;
    std::vector<std::thread> workers_;
    // Sleeping is the slow path: workers and the caller spin on the atomics below for a short
    // while first, and only then block on the condition variables (guarded by mutex_).
    std::mutex mutex_;
    std::condition_variable work_cv_;
    std::condition_variable done_cv_;
    // The job, written by the caller before claim_ moves to the new generation; atomics because a
    // late worker may read them while the caller rewrites them (its claim then fails).
    std::atomic<const std::function<void(int64_t, int64_t)>*> job_{nullptr};
    std::atomic<int64_t> job_n_{0};
    std::atomic<int64_t> job_chunks_{0};
    // (generation << 32) | next unclaimed chunk: a claim is a CAS that only succeeds within the
    // generation the worker saw, so a stale worker can never run a chunk of a newer job.
    std::atomic<uint64_t> claim_{0};
    // Chunks of the current job not yet finished; the caller returns when it reaches 0.
    std::atomic<int64_t> pending_chunks_{0};
    std::atomic<uint64_t> generation_{0};  // bumped per job: what sleeping workers wait on
    std::atomic<bool> stop_{false};
};

}  // namespace sluice
