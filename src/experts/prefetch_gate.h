// PrefetchGate: whether a streamed decode's next-layer prefetch pays, measured rather than guessed.
//
// Prefetch overlaps the next layer's reads with this layer's compute, which pays where the disk has idle
// time, and reads experts the router then does not pick, which costs a whole read each where the disk is the
// bound. Which wins depends on the router's accuracy, the disk and the cache
// (bench/results/cpu_decode/stream_s29: on the 80B at --memory 3G with random routers, 52% accurate, decode
// ran 10-25% faster without it; trained routers are far more accurate). So decode steps run in blocks of
// kBlock with prefetch on or off, each arm keeps the median step time of its last block (a median: an idle
// gap between requests is one long step), the faster arm runs, and every kExploreEvery-th block runs the
// other to keep its measure fresh. The first block runs with prefetch, the second without.
//
// Threading: none; the ExpertStore calls it under its lock.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace sluice::experts {

class PrefetchGate {
 public:
    static constexpr int kBlock = 8;
    static constexpr int kExploreEvery = 8;

    bool enabled() const { return on_; }
    // A decode step ran in `seconds`, with enabled() as it is now.
    void step(double seconds) {
        steps_[static_cast<size_t>(n_++)] = seconds;
        if (n_ < kBlock) return;
        std::nth_element(steps_.begin(), steps_.begin() + kBlock / 2, steps_.end());
        Arm& a = arms_[on_ ? 1 : 0];
        a.median = steps_[kBlock / 2];
        a.measured = true;
        n_ = 0;
        ++blocks_;
        if (!arms_[1].measured) {
            on_ = true;
        } else if (!arms_[0].measured) {
            on_ = false;
        } else {
            on_ = arms_[1].median <= arms_[0].median;
            if (blocks_ % kExploreEvery == 0) on_ = !on_;
        }
    }
    // The steps since the last block are not comparable (a prefill ran among them): start the block again.
    void restart_block() { n_ = 0; }
    // Each arm's median step time in seconds (0: not measured yet).
    double median_on() const { return arms_[1].measured ? arms_[1].median : 0; }
    double median_off() const { return arms_[0].measured ? arms_[0].median : 0; }

 private:
    struct Arm {
        double median = 0;
        bool measured = false;
    };
    std::array<Arm, 2> arms_{};  // [off, on]
    std::array<double, kBlock> steps_{};
    int n_ = 0;
    int64_t blocks_ = 0;
    bool on_ = true;
};

}  // namespace sluice::experts
