// ThreadPool: persistent workers woken per parallel_for with a spin-then-sleep handshake.
//
// Decode calls parallel_for hundreds of times per token, so dispatch must cost microseconds: the
// caller publishes a job by bumping an atomic generation, workers that are still spinning pick it
// up within ~100 ns, and only workers that have idled past the spin budget sleep on work_cv_
// (a futex wake costs several µs, paid only after a pause). Work is split into a few contiguous,
// balanced chunks per thread (kChunksPerThread), claimed with a CAS on (generation, next chunk), so a
// slow-to-wake or preempted worker simply leaves its chunks to the caller (which works too) and a
// stale worker can never run a chunk of a newer job. The caller returns when every chunk has finished.
// Rejected alternative: a mutex/condition-variable queue per call — measured at tens of µs per
// dispatch on a loaded 2-core VM, which would dominate decode.
#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SLUICE_CPU_RELAX() _mm_pause()
#else
#define SLUICE_CPU_RELAX() std::this_thread::yield()
#endif

namespace sluice {
namespace {

// Spin budget (pause instructions, ~10-40 ns each) before sleeping: long enough to bridge the
// gaps between the kernels of one token, short enough not to burn a core between requests.
constexpr int kSpinIterations = 20000;

// Chunks per thread and call: each is claimed by whichever thread is free, so a thread the OS
// preempts (a shared machine) or that runs slower leaves its share to the others instead of stalling
// the call. Decode on 2 vCPUs spent ~5% of its time in parallel_for waiting for the other thread's one
// chunk. Each chunk stays contiguous (ranges of whole grains, a stream for the prefetcher).
constexpr int64_t kChunksPerThread = 4;

thread_local bool t_inside_pool = false;

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
    if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    n_threads_ = n_threads;
    workers_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true, std::memory_order_release);
        generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    work_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks(uint64_t gen) {
    for (;;) {
        uint64_t cur = claim_.load(std::memory_order_acquire);
        if ((cur >> 32) != (gen & 0xffffffffu)) return;
        const int64_t chunks = job_chunks_.load(std::memory_order_acquire);
        const int64_t n = job_n_.load(std::memory_order_acquire);
        const auto* fn = job_.load(std::memory_order_acquire);
        const int64_t c = static_cast<int64_t>(cur & 0xffffffffu);
        if (c >= chunks) return;
        // Success proves the job was still `gen` (chunk c unclaimed, so not finished), hence the
        // fields read above belong to it: a caller closes the claim word before it writes the next
        // job's fields (parallel_for), so a field of the next job read here (acquire) makes this CAS see
        // the closed word and fail — without that, a worker holding the finished word (gen, chunks) and
        // reading a next job's larger chunk count claimed a chunk of a job not yet published.
        if (!claim_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) continue;
        (*fn)(c * n / chunks, (c + 1) * n / chunks);  // balanced: every range >= floor(n/chunks)
        if (pending_chunks_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> lock(mutex_);  // pairs with the caller's predicate check
            done_cv_.notify_all();
        }
    }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    const int64_t chunks = std::min<int64_t>(n_threads_ * kChunksPerThread, std::max<int64_t>(1, n / grain));
    if (chunks <= 1 || t_inside_pool) {
        fn(0, n);
        return;
    }
    const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
    // Close the previous job's claim word (no chunk index can reach 2^32 - 1), then publish the fields.
    claim_.store(((gen - 1) & 0xffffffffu) << 32 | 0xffffffffu, std::memory_order_relaxed);
    job_.store(&fn, std::memory_order_release);
    job_n_.store(n, std::memory_order_release);
    job_chunks_.store(chunks, std::memory_order_release);
    pending_chunks_.store(chunks, std::memory_order_relaxed);
    claim_.store((gen & 0xffffffffu) << 32, std::memory_order_release);
    {
        // The lock orders the bump against a worker that is about to sleep (it re-checks the
        // generation under the same lock), so no wake-up is lost.
        std::lock_guard<std::mutex> lock(mutex_);
        generation_.store(gen, std::memory_order_release);
    }
    work_cv_.notify_all();

    // The caller works too; if a worker is slow to wake (an oversubscribed machine), the caller
    // simply claims its chunk instead of waiting for it.
    t_inside_pool = true;
    run_chunks(gen);
    t_inside_pool = false;

    for (int i = 0; i < kSpinIterations; ++i) {
        if (pending_chunks_.load(std::memory_order_acquire) == 0) return;
        SLUICE_CPU_RELAX();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [this] { return pending_chunks_.load(std::memory_order_acquire) == 0; });
}

void ThreadPool::worker_loop(int /*index*/) {
    t_inside_pool = true;
    uint64_t seen = 0;
    for (;;) {
        uint64_t gen = generation_.load(std::memory_order_acquire);
        for (int i = 0; i < kSpinIterations && gen == seen; ++i) {
            SLUICE_CPU_RELAX();
            gen = generation_.load(std::memory_order_acquire);
        }
        if (gen == seen) {
            std::unique_lock<std::mutex> lock(mutex_);
            work_cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
            gen = generation_.load(std::memory_order_acquire);
        }
        seen = gen;
        if (stop_.load(std::memory_order_acquire)) return;
        run_chunks(gen);
    }
}

}  // namespace sluice
