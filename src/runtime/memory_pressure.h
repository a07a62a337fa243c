// Living beside other programs: the expert cache's budget follows memory pressure.
//
// sluice's --memory is a ceiling, not a claim. A monitor thread watches what the OS says about
// memory and moves the expert cache's size (ExpertStore::set_cache_bytes) between a floor that
// still runs and that ceiling: it shrinks when another program needs the RAM — the slots the
// cache values least are evicted and their pages handed back at once — and grows back when the
// pressure has been gone a while. Dense weights and session state are never touched, so a step
// in flight never fails; it only reads more from disk.
//
// Signals, without polling overhead where the kernel offers it:
//   - a PSI trigger (Linux ≥ 5.2): "some 150000 2000000" on /proc/pressure/memory — woken when
//     tasks stalled on memory for 150 ms within 2 s — or on the cgroup v2 group's own
//     memory.pressure when sluice runs in one;
//   - a cgroup v2 group's memory.events "high" count (reclaim past memory.high);
//   - once a second, what is available: MemAvailable, or a cgroup's limit minus its usage plus its
//     inactive file pages (v2 memory.max / memory.high, v1 memory.limit_in_bytes) when lower —
//     the fallback on kernels without PSI, and the measure every decision is sized by.
// The decisions themselves (PressureController) are kept apart from the OS so tests drive them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace sluice::runtime {

// What the machine — or the cgroup sluice runs in, when that is tighter — has left.
struct MemorySnapshot {
    uint64_t available = 0;
    uint64_t total = 0;
    std::string scope;  // "MemAvailable", "cgroup v1 limit", "cgroup v2 memory.max", ...
};
MemorySnapshot read_memory_snapshot();

// The budget between floor and ceiling. Shrinks by a step — or by the deficit below the low mark
// when that is more — on every pressure signal; grows one step toward the ceiling per tick once
// calm_s passed without pressure and a step still leaves the low mark free.
class PressureController {
 public:
    struct Options {
        uint64_t ceiling = 0;
        uint64_t floor = 0;
        uint64_t step = 0;      // 0: an eighth of ceiling − floor
        uint64_t low_mark = 0;  // 0: a twentieth of the total, at least 256 MiB
        double calm_s = 3.0;
    };
    explicit PressureController(const Options& options) : o_(options), target_(options.ceiling) {}
    // A pressure signal at time now_s (seconds, any origin): the new target.
    uint64_t on_pressure(const MemorySnapshot& m, double now_s);
    // A periodic look: pressure when below the low mark, else maybe a step back up.
    uint64_t on_tick(const MemorySnapshot& m, double now_s);
    uint64_t target() const { return target_; }
    uint64_t low_mark(const MemorySnapshot& m) const;
    uint64_t step() const;

 private:
    Options o_;
    uint64_t target_ = 0;
    double last_pressure_s_ = -1e300;
};

struct MemoryPressureStats {
    std::string source;            // which signals are watched
    uint64_t pressure_events = 0;  // signals that shrank (or tried to shrink) the budget
    uint64_t grows = 0;            // steps back up
    uint64_t budget_bytes = 0;     // the expert cache's target now
    uint64_t available_bytes = 0;  // at the last look
};

// The thread. `apply` sets the cache's size and returns what it became (whole slots, clamped).
class MemoryPressureMonitor {
 public:
    static std::unique_ptr<MemoryPressureMonitor> start(const PressureController::Options& options,
                                                        std::function<uint64_t(uint64_t)> apply);
    ~MemoryPressureMonitor();
    MemoryPressureMonitor(const MemoryPressureMonitor&) = delete;
    MemoryPressureMonitor& operator=(const MemoryPressureMonitor&) = delete;
    MemoryPressureStats stats() const;

    struct State;  // private; defined in memory_pressure.cpp

 private:
    MemoryPressureMonitor() = default;
    std::unique_ptr<State> state_;
};

}  // namespace sluice::runtime
