#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace sluice::log {
namespace {
std::atomic<Level> g_level{Level::kInfo};
std::mutex g_mutex;
}  // namespace

void set_level(Level level) {
    g_level.store(level);
}
Level level() {
    return g_level.load(std::memory_order_relaxed);
}

void write(Level level, std::string_view line) {
    static const char* const kPrefix[] = {"debug: ", "", "warning: ", "error: ", ""};
    std::lock_guard<std::mutex> lock(g_mutex);
    std::fprintf(stderr, "%s%.*s\n", kPrefix[static_cast<int>(level)], static_cast<int>(line.size()),
                 line.data());
}

}  // namespace sluice::log
