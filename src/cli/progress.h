// Progress reporting for long operations (load, pack, synth, verify): a bar with rate and ETA on
// a terminal, plain log lines (every ~5 s) otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice::cli {

class Progress {
 public:
    explicit Progress(std::string label, bool bytes = true);
    ~Progress();
    // Reports `done` of `total` units of the named phase.
    void update(const std::string& phase, uint64_t done, uint64_t total);
    void finish();

 private:
    std::string label_;
    bool bytes_;
    bool tty_;
    bool finished_ = false;
    std::string phase_;
    std::chrono::steady_clock::time_point start_, phase_start_, last_print_;
};

}  // namespace sluice::cli
