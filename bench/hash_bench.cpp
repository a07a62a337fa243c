// SHA-256 throughput as `sluice pull` uses it: 1 MiB updates (what a download buffer hands over)
// into one running hash, and the same with the state saved and restored every 64 MiB (a resumable
// progress record). Reported as bytes/s.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "core/sha256.h"

namespace {

const std::vector<uint8_t>& buffer() {
    static const std::vector<uint8_t> b = [] {
        std::vector<uint8_t> v(1u << 20);
        uint32_t x = 12345;
        for (auto& c : v) c = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
        return v;
    }();
    return b;
}

void BM_Sha256Update1MiB(benchmark::State& state) {
    const auto& b = buffer();
    sluice::Sha256 h;
    for (auto _ : state) h.update(b.data(), b.size());
    benchmark::DoNotOptimize(h.hex_digest());
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(b.size()));
}
BENCHMARK(BM_Sha256Update1MiB);

void BM_Sha256SaveRestore(benchmark::State& state) {
    const auto& b = buffer();
    sluice::Sha256 h;
    int64_t n = 0;
    for (auto _ : state) {
        h.update(b.data() + 3, b.size() - 3);  // leaves a partial block to carry over
        if (++n % 64 == 0) {
            sluice::Sha256 r;
            r.restore(h.save());
            h = r;
        }
    }
    benchmark::DoNotOptimize(h.hex_digest());
    state.SetBytesProcessed(n * static_cast<int64_t>(b.size() - 3));
}
BENCHMARK(BM_Sha256SaveRestore);

}  // namespace

BENCHMARK_MAIN();
