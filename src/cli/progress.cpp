#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>

namespace sluice::cli {

namespace {
std::string human(double v, bool bytes) {
    if (!bytes) return std::to_string(static_cast<long long>(v));
    const char* units[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    while (v >= 1000 && u < 4) {
        v /= 1000;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}
}  // namespace

Progress::Progress(std::string label, bool bytes)
    : label_(std::move(label)), bytes_(bytes), tty_(isatty(STDERR_FILENO) != 0) {
    start_ = phase_start_ = last_print_ = std::chrono::steady_clock::now();
}

Progress::~Progress() {
    finish();
}

void Progress::update(const std::string& phase, uint64_t done, uint64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (phase != phase_) {
        if (tty_ && !phase_.empty()) std::fprintf(stderr, "\n");
        phase_ = phase;
        phase_start_ = now;
    }
    const double since_print = std::chrono::duration<double>(now - last_print_).count();
    if (done < total && since_print < (tty_ ? 0.1 : 5.0)) return;
    last_print_ = now;
    const double elapsed = std::chrono::duration<double>(now - phase_start_).count();
    const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
    const double eta = rate > 0 && total > done ? static_cast<double>(total - done) / rate : 0;
    const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    if (tty_) {
        const int width = 30;
        std::string bar(static_cast<size_t>(frac * width), '#');
        bar.resize(width, '.');
        std::fprintf(stderr, "\r%s %-8s [%s] %5.1f%%  %s/s  ETA %.0fs   ", label_.c_str(), phase.c_str(),
                     bar.c_str(), frac * 100, human(rate, bytes_).c_str(), eta);
    } else {
        std::fprintf(stderr, "%s %s: %s of %s (%.1f%%), %s/s, ETA %.0fs\n", label_.c_str(), phase.c_str(),
                     human(static_cast<double>(done), bytes_).c_str(),
                     human(static_cast<double>(total), bytes_).c_str(), frac * 100,
                     human(rate, bytes_).c_str(), eta);
    }
    std::fflush(stderr);
}

void Progress::finish() {
    if (finished_) return;
    finished_ = true;
    if (tty_ && !phase_.empty()) std::fprintf(stderr, "\n");
}

}  // namespace sluice::cli
