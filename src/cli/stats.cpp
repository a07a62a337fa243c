#include "cli/stats.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "io/mapped_file.h"

namespace sluice::cli {

uint64_t peak_rss_bytes() {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

nlohmann::json stats_json(const Engine& engine, const GenerationStats& gen, const ExpertCacheStats& cache) {
    const MemoryPlan& plan = engine.memory_plan();
    const MemoryPressureStatus pressure = engine.memory_pressure();
    return {{"prompt_tokens", gen.prompt_tokens},
            {"prefilled_tokens", gen.prefilled_tokens},
            {"generated_tokens", gen.generated_tokens},
            {"ttft_ms", gen.ttft_ms},
            {"prefill_tok_s", gen.prefill_tok_s()},
            {"decode_tok_s", gen.decode_tok_s()},
            {"spec_draft_tokens", gen.draft_tokens},
            {"spec_accepted_tokens", gen.accepted_tokens},
            {"spec_verify_steps", gen.verify_steps},
            {"spec_acceptance_rate", gen.acceptance_rate()},
            {"peak_rss_bytes", peak_rss_bytes()},
            {"expert_cache_hits", cache.hits},
            {"expert_cache_misses", cache.misses},
            {"expert_cache_hit_rate", cache.hit_rate()},
            {"expert_bytes_read", cache.bytes_read},
            {"expert_read_gb_s", cache.read_gb_s()},
            {"expert_read_stall_s", cache.stall_s},
            {"prefetch_issued", cache.prefetch_issued},
            {"prefetch_used", cache.prefetch_used},
            {"prefetch_wasted", cache.prefetch_wasted},
            {"prefetch_canceled", cache.prefetch_canceled},
            {"memory_budget_bytes", plan.budget_bytes},
            {"expert_cache_bytes", plan.cache_bytes},
            {"expert_cache_budget_bytes", pressure.budget_bytes},
            {"memory_returned_bytes", pressure.bytes_returned},
            {"memory_pressure_events", pressure.pressure_events},
            {"streaming", plan.streaming}};
}

double measure_expert_read_gb_s(const std::string& model_dir, uint64_t record_bytes, int queue_depth,
                                double seconds) {
    namespace fs = std::filesystem;
    std::vector<std::pair<std::string, uint64_t>> files;  // path, size
    std::error_code ec;
    // A packed model's expert files; a GGUF's file itself (or a folder's split files), whose experts are
    // slices of it.
    for (const auto& e : fs::directory_iterator(fs::path(model_dir) / "experts", ec))
        if (e.path().extension() == ".bin") files.emplace_back(e.path().string(), e.file_size(ec));
    if (files.empty() && fs::is_regular_file(model_dir, ec))
        files.emplace_back(model_dir, fs::file_size(model_dir, ec));
    if (files.empty())
        for (const auto& e : fs::directory_iterator(fs::path(model_dir), ec))
            if (e.path().extension() == ".gguf") files.emplace_back(e.path().string(), e.file_size(ec));
    if (files.empty()) return 0;
    const uint64_t block = record_bytes;  // a multiple of 4 KiB
    std::atomic<uint64_t> bytes{0};
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    const auto t0 = std::chrono::steady_clock::now();
    for (int t = 0; t < queue_depth; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937_64 rng(static_cast<uint64_t>(t) * 7919 + 1);
            void* buf = std::aligned_alloc(4096, block);
            std::vector<int> fds;
            for (const auto& f : files) {
                int fd = ::open(f.first.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
                if (fd < 0) fd = ::open(f.first.c_str(), O_RDONLY | O_CLOEXEC);
                fds.push_back(fd);
            }
            while (!stop.load(std::memory_order_relaxed)) {
                const size_t i = rng() % files.size();
                if (fds[i] < 0 || files[i].second < block) continue;
                // A record's size at a 4 KiB-aligned offset (GGUF slices need not be record-aligned).
                const uint64_t off = (rng() % ((files[i].second - block) / 4096 + 1)) * 4096;
                const ssize_t n = ::pread(fds[i], buf, block, static_cast<off_t>(off));
                if (n > 0) bytes += static_cast<uint64_t>(n);
            }
            for (int fd : fds)
                if (fd >= 0) ::close(fd);
            std::free(buf);
        });
    }
    // Only the steady state counts: thread start, file opens and the first reads' ramp-up (a
    // virtual disk takes a moment to reach its rate) are excluded by measuring from a snapshot
    // taken after a warm-up to one taken before the stop.
    std::this_thread::sleep_until(t0 + std::chrono::duration<double>(std::min(0.5, seconds / 4)));
    const uint64_t bytes0 = bytes.load();
    const auto t1 = std::chrono::steady_clock::now();
    std::this_thread::sleep_until(t1 + std::chrono::duration<double>(seconds));
    const uint64_t bytes1 = bytes.load();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    stop = true;
    for (auto& th : threads) th.join();
    return static_cast<double>(bytes1 - bytes0) / elapsed / 1e9;
}

namespace {
double memory_read_in_process(int threads) {
    const size_t n = (512ull << 20) / sizeof(uint64_t);
    std::vector<uint64_t> buf(n, 1);
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
        std::atomic<uint64_t> sink{0};
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t) {
            ts.emplace_back([&, t] {
                const size_t begin = n / threads * t, end = t + 1 == threads ? n : n / threads * (t + 1);
                uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                for (size_t i = begin; i + 4 <= end; i += 4) {
                    s0 += buf[i];
                    s1 += buf[i + 1];
                    s2 += buf[i + 2];
                    s3 += buf[i + 3];
                }
                sink += s0 + s1 + s2 + s3;
            });
        }
        for (auto& th : ts) th.join();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / s / 1e9);
    }
    return best;
}
}  // namespace

double measure_memory_read_gb_s(int threads) {
    // In a child process, so the 512 MB probe buffer never counts in this process's peak RSS.
    int fds[2];
    if (::pipe(fds) != 0) return 0;
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(fds[0]);
        const double v = memory_read_in_process(threads);
        ssize_t w = ::write(fds[1], &v, sizeof v);
        (void)w;
        ::_exit(0);
    }
    ::close(fds[1]);
    double v = 0;
    if (pid > 0) {
        if (::read(fds[0], &v, sizeof v) != static_cast<ssize_t>(sizeof v)) v = 0;
        ::waitpid(pid, nullptr, 0);
    }
    ::close(fds[0]);
    return v;
}

}  // namespace sluice::cli
