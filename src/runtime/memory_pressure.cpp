#include "runtime/memory_pressure.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "core/log.h"

namespace sluice::runtime {

namespace {

constexpr uint64_t kUnlimited = UINT64_MAX;
constexpr uint64_t kMinLowMark = 256ull << 20;
// Tasks stalled on memory for 150 ms of a 2 s window (windows must be multiples of 2 s for an
// unprivileged trigger).
constexpr const char* kPsiTrigger = "some 150000 2000000\n";

// A cgroup interface file's number: "max" (v2) and v1's near-2^63 "no limit" read as unlimited;
// a missing file as nullopt.
std::optional<uint64_t> read_limit(const std::string& path) {
    std::ifstream in(path);
    std::string word;
    if (!(in >> word)) return std::nullopt;
    if (word == "max") return kUnlimited;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(word.c_str(), &end, 10);
    if (end == word.c_str()) return std::nullopt;
    return v >= (1ull << 62) ? kUnlimited : v;
}

// The value of `key` in a "key value" file (memory.stat, memory.events), or 0.
uint64_t stat_value(const std::string& path, const std::string& key) {
    std::ifstream in(path);
    std::string k;
    uint64_t v = 0;
    while (in >> k >> v)
        if (k == key) return v;
    return 0;
}

struct Cgroups {
    std::string v1_memory;  // the v1 memory controller's directory of this process, or ""
    std::string v2;         // the v2 (unified) group's directory, or ""
};

// This process's groups from /proc/self/cgroup ("0::/path" for v2, "N:memory:/path" for v1),
// mapped to where the hierarchies are mounted (v2 at /sys/fs/cgroup, or /sys/fs/cgroup/unified
// beside v1 controllers).
Cgroups own_cgroups() {
    Cgroups g;
    std::ifstream in("/proc/self/cgroup");
    std::string line;
    while (std::getline(in, line)) {
        const size_t a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos) continue;
        const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (line.compare(0, a, "0") == 0 && controllers.empty()) {
            for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
                const std::string dir = std::string(root) + path;
                if (std::filesystem::exists(dir + "/memory.current")) {
                    g.v2 = dir;
                    break;
                }
            }
        } else {
            std::stringstream list(controllers);
            std::string c;
            while (std::getline(list, c, ','))
                if (c == "memory" && std::filesystem::exists("/sys/fs/cgroup/memory" + path))
                    g.v1_memory = "/sys/fs/cgroup/memory" + path;
        }
    }
    return g;
}

// The least headroom of `dir` and its ancestors up to `root` (a parent's limit binds its children):
// limit − usage + inactive file pages (reclaimable without a stall to speak of).
void cgroup_headroom(std::string dir, const std::string& root, bool v2, MemorySnapshot* m) {
    for (;;) {
        std::optional<uint64_t> limit;
        uint64_t usage = 0, inactive = 0;
        if (v2) {
            limit = read_limit(dir + "/memory.max");
            if (const auto high = read_limit(dir + "/memory.high"); high && (!limit || *high < *limit))
                limit = high;
            usage = read_limit(dir + "/memory.current").value_or(0);
            inactive = stat_value(dir + "/memory.stat", "inactive_file");
        } else {
            limit = read_limit(dir + "/memory.limit_in_bytes");
            usage = read_limit(dir + "/memory.usage_in_bytes").value_or(0);
            inactive = stat_value(dir + "/memory.stat", "total_inactive_file");
        }
        if (limit && *limit != kUnlimited) {
            const uint64_t room = *limit > usage ? *limit - usage + inactive : inactive;
            if (room < m->available) {
                m->available = room;
                m->scope = v2 ? "cgroup v2 limit" : "cgroup v1 limit";
            }
            m->total = std::min(m->total, *limit);
        }
        if (dir.size() <= root.size()) return;
        dir = std::filesystem::path(dir).parent_path().string();
    }
}

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

MemorySnapshot read_memory_snapshot() {
    MemorySnapshot m;
    m.scope = "MemAvailable";
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    uint64_t value = 0;
    while (in >> key >> value >> unit) {
        if (key == "MemAvailable:") m.available = value * 1024;
        if (key == "MemTotal:") m.total = value * 1024;
    }
    const Cgroups g = own_cgroups();
    if (!g.v2.empty()) {
        const std::string root =
            g.v2.rfind("/sys/fs/cgroup/unified", 0) == 0 ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup";
        cgroup_headroom(g.v2, root, true, &m);
    }
    if (!g.v1_memory.empty()) cgroup_headroom(g.v1_memory, "/sys/fs/cgroup/memory", false, &m);
    return m;
}

uint64_t PressureController::low_mark(const MemorySnapshot& m) const {
    return o_.low_mark > 0 ? o_.low_mark : std::max(kMinLowMark, m.total / 20);
}

uint64_t PressureController::step() const {
    const uint64_t span = o_.ceiling > o_.floor ? o_.ceiling - o_.floor : 0;
    return o_.step > 0 ? o_.step : std::max<uint64_t>(span / 8, 1);
}

uint64_t PressureController::on_pressure(const MemorySnapshot& m, double now_s) {
    last_pressure_s_ = now_s;
    const uint64_t low = low_mark(m);
    const uint64_t deficit = m.available < low ? low - m.available : 0;
    const uint64_t cut = std::max(step(), deficit);
    target_ = target_ > o_.floor + cut ? target_ - cut : o_.floor;
    return target_;
}

uint64_t PressureController::on_tick(const MemorySnapshot& m, double now_s) {
    const uint64_t low = low_mark(m);
    if (m.available < low) return on_pressure(m, now_s);
    if (target_ < o_.ceiling && now_s - last_pressure_s_ >= o_.calm_s && m.available >= low + 2 * step()) {
        target_ = std::min(o_.ceiling, target_ + step());
        last_pressure_s_ = now_s - o_.calm_s + 1.0;  // at most one step a second
    }
    return target_;
}

struct MemoryPressureMonitor::State {
    PressureController controller;
    std::function<uint64_t(uint64_t)> apply;
    int psi_fd = -1;     // a PSI trigger, or -1
    int events_fd = -1;  // a cgroup v2 memory.events, or -1
    std::string events_path;
    uint64_t high_events = 0;
    int stop_fd = -1;  // eventfd: the destructor's wake-up
    std::thread thread;
    mutable std::mutex mutex;
    MemoryPressureStats stats;

    explicit State(const PressureController::Options& o) : controller(o) {}
    void run();
};

void MemoryPressureMonitor::State::run() {
    uint64_t applied = controller.target();
    for (;;) {
        std::vector<pollfd> fds{{stop_fd, POLLIN, 0}};
        if (psi_fd >= 0) fds.push_back({psi_fd, POLLPRI, 0});
        if (events_fd >= 0) fds.push_back({events_fd, POLLPRI, 0});
        if (::poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) return;
        if (fds[0].revents != 0) return;
        bool pressure = false;
        for (size_t i = 1; i < fds.size(); ++i) {
            if ((fds[i].revents & POLLPRI) == 0) continue;
            if (fds[i].fd == psi_fd) pressure = true;
            if (fds[i].fd == events_fd) {
                const uint64_t high = stat_value(events_path, "high");
                pressure = pressure || high > high_events;
                high_events = high;
            }
        }
        const MemorySnapshot m = read_memory_snapshot();
        const double now = now_seconds();
        const uint64_t before = controller.target();
        const bool low = m.available < controller.low_mark(m);
        const uint64_t target = pressure ? controller.on_pressure(m, now) : controller.on_tick(m, now);
        if (target != applied) {
            applied = apply(target);
            log::info("[memory] {}: expert cache {} → {} MB ({} MB available, {})",
                      target < before ? "pressure" : "pressure gone", before >> 20, applied >> 20,
                      m.available >> 20, m.scope);
        }
        std::lock_guard<std::mutex> lock(mutex);
        stats.pressure_events += pressure || low;
        stats.grows += target > before;
        stats.budget_bytes = applied;
        stats.available_bytes = m.available;
    }
}

std::unique_ptr<MemoryPressureMonitor> MemoryPressureMonitor::start(
    const PressureController::Options& options, std::function<uint64_t(uint64_t)> apply) {
    auto monitor = std::unique_ptr<MemoryPressureMonitor>(new MemoryPressureMonitor());
    auto st = std::make_unique<State>(options);
    st->apply = std::move(apply);
    st->stop_fd = ::eventfd(0, EFD_CLOEXEC);
    if (st->stop_fd < 0) return nullptr;
    // The group's own pressure file when it has one (v2), else the system's.
    const Cgroups g = own_cgroups();
    std::vector<std::string> sources;
    for (const std::string& path :
         {g.v2.empty() ? std::string() : g.v2 + "/memory.pressure", std::string("/proc/pressure/memory")}) {
        if (path.empty() || st->psi_fd >= 0) continue;
        const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) continue;
        if (::write(fd, kPsiTrigger, std::char_traits<char>::length(kPsiTrigger)) < 0) {
            ::close(fd);
            continue;
        }
        st->psi_fd = fd;
        sources.push_back("PSI trigger on " + path);
    }
    if (!g.v2.empty() && std::filesystem::exists(g.v2 + "/memory.events")) {
        st->events_path = g.v2 + "/memory.events";
        st->events_fd = ::open(st->events_path.c_str(), O_RDONLY | O_CLOEXEC);
        st->high_events = stat_value(st->events_path, "high");
        if (st->events_fd >= 0) sources.push_back("memory.events of " + g.v2);
    }
    const MemorySnapshot m = read_memory_snapshot();
    sources.push_back(m.scope + " each second");
    for (const std::string& s : sources) st->stats.source += (st->stats.source.empty() ? "" : ", ") + s;
    st->stats.budget_bytes = options.ceiling;
    st->stats.available_bytes = m.available;
    State* raw = st.get();
    st->thread = std::thread([raw] { raw->run(); });
    monitor->state_ = std::move(st);
    log::debug("[memory] expert cache follows memory pressure between {} and {} MB: {}", options.floor >> 20,
               options.ceiling >> 20, monitor->state_->stats.source);
    return monitor;
}

MemoryPressureMonitor::~MemoryPressureMonitor() {
    if (!state_) return;
    const uint64_t one = 1;
    if (::write(state_->stop_fd, &one, sizeof one) < 0)
        log::warn("[memory] cannot wake the pressure monitor");
    if (state_->thread.joinable()) state_->thread.join();
    for (int fd : {state_->psi_fd, state_->events_fd, state_->stop_fd})
        if (fd >= 0) ::close(fd);
}

MemoryPressureStats MemoryPressureMonitor::stats() const {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->stats;
}

}  // namespace sluice::runtime
