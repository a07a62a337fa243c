// RankThreads (rank_threads.h).
#include "runtime/rank_threads.h"

namespace sluice::runtime {

RankThreads::RankThreads(int ranks) : results_(static_cast<size_t>(ranks)) {
    for (int r = 0; r < ranks; ++r) threads_.emplace_back([this, r] { loop(r); });
}

RankThreads::~RankThreads() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
}

Status RankThreads::run(const std::function<Status(int)>& fn, const std::function<void()>& on_failure) {
    std::unique_lock<std::mutex> lock(mu_);
    fn_ = &fn;
    pending_ = static_cast<int>(threads_.size());
    failed_ = false;
    ++generation_;
    work_cv_.notify_all();
    bool released = false;
    while (pending_ > 0) {
        done_cv_.wait(lock, [&] { return pending_ == 0 || (failed_ && !released); });
        if (failed_ && !released) {
            released = true;
            lock.unlock();
            on_failure();
            lock.lock();
        }
    }
    fn_ = nullptr;
    for (const Status& s : results_)
        if (!s.is_ok()) return s;
    return Status::ok();
}

void RankThreads::loop(int rank) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        const std::function<Status(int)>* fn = fn_;
        lock.unlock();
        Status st = (*fn)(rank);
        lock.lock();
        if (!st.is_ok()) failed_ = true;
        results_[static_cast<size_t>(rank)] = std::move(st);
        --pending_;
        done_cv_.notify_all();
    }
}

}  // namespace sluice::runtime
