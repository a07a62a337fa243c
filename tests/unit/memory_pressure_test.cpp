// The expert cache's budget under memory pressure (runtime/memory_pressure.h): the controller's
// decisions on made-up snapshots and times, the snapshot read from this machine, and the monitor
// thread starting and stopping cleanly. The end-to-end behaviour under a real memory hog is the
// oracle suite memory_pressure.test.mjs.
#include "runtime/memory_pressure.h"

#include <gtest/gtest.h>

#include <atomic>

namespace sluice::runtime {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

MemorySnapshot snapshot(uint64_t available_mib, uint64_t total_mib = 16384) {
    MemorySnapshot m;
    m.available = available_mib * kMiB;
    m.total = total_mib * kMiB;
    m.scope = "test";
    return m;
}

TEST(MemoryPressure, ShrinksOnPressureByAStepOrTheDeficit) {
    PressureController::Options o;
    o.ceiling = 4096 * kMiB;
    o.floor = 256 * kMiB;
    PressureController c(o);
    EXPECT_EQ(c.step(), (4096 - 256) * kMiB / 8);  // an eighth of the range
    const uint64_t low = 16384 * kMiB / 20;        // a twentieth of the total
    EXPECT_EQ(c.low_mark(snapshot(8000)), low);
    EXPECT_EQ(c.low_mark(snapshot(100, 1024)), 256 * kMiB);  // at least 256 MiB
    EXPECT_EQ(c.target(), o.ceiling);
    // A signal with memory to spare: one step.
    EXPECT_EQ(c.on_pressure(snapshot(4000), 0.0), o.ceiling - c.step());
    // Deep below the low mark: the whole deficit at once (more than a step).
    const uint64_t before = c.target();
    ASSERT_GT(low - 19 * kMiB, c.step());
    EXPECT_EQ(c.on_pressure(snapshot(19), 0.5), before - (low - 19 * kMiB));
    // Never below the floor.
    for (int i = 0; i < 20; ++i) c.on_pressure(snapshot(10), 1.0 + i);
    EXPECT_EQ(c.target(), o.floor);
}

TEST(MemoryPressure, GrowsBackOnlyAfterCalmAndWithRoom) {
    PressureController::Options o;
    o.ceiling = 2048 * kMiB;
    o.floor = 512 * kMiB;
    o.step = 256 * kMiB;
    o.low_mark = 512 * kMiB;
    o.calm_s = 3.0;
    PressureController c(o);
    c.on_pressure(snapshot(600), 10.0);
    c.on_pressure(snapshot(600), 10.5);
    EXPECT_EQ(c.target(), 1536 * kMiB);
    // A tick below the low mark is pressure too.
    EXPECT_EQ(c.on_tick(snapshot(300), 11.0), 1280 * kMiB);
    // Calm but not long enough: held.
    EXPECT_EQ(c.on_tick(snapshot(8000), 12.0), 1280 * kMiB);
    // Long enough, but a step would leave less than a step above the low mark: held.
    EXPECT_EQ(c.on_tick(snapshot(900), 14.5), 1280 * kMiB);
    // Room: one step per second, up to the ceiling.
    EXPECT_EQ(c.on_tick(snapshot(8000), 14.5), 1536 * kMiB);
    EXPECT_EQ(c.on_tick(snapshot(8000), 14.7), 1536 * kMiB);
    EXPECT_EQ(c.on_tick(snapshot(8000), 15.5), 1792 * kMiB);
    EXPECT_EQ(c.on_tick(snapshot(8000), 16.5), 2048 * kMiB);
    EXPECT_EQ(c.on_tick(snapshot(8000), 17.5), 2048 * kMiB);
}

TEST(MemoryPressure, SnapshotOfThisMachineIsPlausible) {
    const MemorySnapshot m = read_memory_snapshot();
    EXPECT_GT(m.total, 64 * kMiB);
    EXPECT_GT(m.available, 0u);
    EXPECT_LE(m.available, m.total);
    EXPECT_FALSE(m.scope.empty());
}

TEST(MemoryPressure, MonitorStartsAndStopsPromptly) {
    PressureController::Options o;
    o.ceiling = 1024 * kMiB;
    o.floor = 128 * kMiB;
    std::atomic<int> applied{0};
    auto monitor = MemoryPressureMonitor::start(o, [&](uint64_t bytes) {
        applied++;
        return bytes;
    });
    ASSERT_NE(monitor, nullptr);
    const MemoryPressureStats s = monitor->stats();
    EXPECT_FALSE(s.source.empty());
    EXPECT_EQ(s.budget_bytes, o.ceiling);
    monitor.reset();  // joins the thread without waiting out its one-second tick
}

}  // namespace
}  // namespace sluice::runtime
