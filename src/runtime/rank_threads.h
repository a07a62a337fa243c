// RankThreads: one thread per rank of an expert-parallel group (runtime/cuda/expert_parallel.cpp), each
// running the rank's part of a call at the same time as the others — which a group needs, since a rank's
// forward blocks inside each collective until every rank has arrived. When a rank fails, the others may
// be waiting in a collective for it: run() calls the caller's on_failure() at once (the group aborts its
// collectives there, releasing them), then waits for every rank to return.
//
// Threading: run() from one thread at a time (the engine's compute lock).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "sluice/status.h"

namespace sluice::runtime {

class RankThreads {
 public:
    explicit RankThreads(int ranks);
    ~RankThreads();
    RankThreads(const RankThreads&) = delete;
    RankThreads& operator=(const RankThreads&) = delete;

    int ranks() const { return static_cast<int>(threads_.size()); }
    // fn(r) on rank r's thread, every rank at once. The first failure calls on_failure() (once, on the
    // calling thread) while the other ranks may still be running. Returns when every rank has returned:
    // the error of the lowest failed rank, else ok.
    Status run(const std::function<Status(int)>& fn, const std::function<void()>& on_failure);

 private:
    void loop(int rank);

    std::mutex mu_;
    std::condition_variable work_cv_, done_cv_;
    std::vector<std::thread> threads_;
    std::vector<Status> results_;
    const std::function<Status(int)>* fn_ = nullptr;
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool failed_ = false;
    bool stop_ = false;
};

}  // namespace sluice::runtime
