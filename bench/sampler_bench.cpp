// The sampler over a Qwen3.6-sized row (248,320 logits, peaked like a model's): greedy,
// temperature with top-k (the chat default shape), temperature alone and with top-p, each with and
// without a backend LogitsSummary (what the CUDA backend hands the sampler), with log-probabilities
// reported as the session does. The row is refilled before every call (sampling modifies it in
// place); the refill is timed apart (BM_RefillOnly) so it can be subtracted.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/sampler.h"

namespace {

using namespace sluice;
using namespace sluice::runtime;

constexpr int64_t kVocab = 248320;

const std::vector<float>& row() {
    static const std::vector<float> r = [] {
        // Peaked like a language model's row: a broad floor and 64 likely tokens well above it
        // (they hold about 99% of the probability at temperature 1).
        std::vector<float> v(static_cast<size_t>(kVocab));
        std::mt19937 rng(7);
        std::normal_distribution<float> d(0.0f, 2.0f);
        for (auto& x : v) x = d(rng);
        std::uniform_int_distribution<int64_t> id(0, kVocab - 1);
        std::uniform_real_distribution<float> lift(14.0f, 20.0f);
        for (int i = 0; i < 64; ++i) v[static_cast<size_t>(id(rng))] += lift(rng);
        return v;
    }();
    return r;
}

// Vocabulary padding and special tokens, as an engine suppresses them.
std::vector<int32_t> suppressed() {
    std::vector<int32_t> ids;
    for (int32_t i = 248044; i < kVocab; ++i) ids.push_back(i);
    return ids;
}

void run(benchmark::State& state, SamplingParams p) {
    const bool with_summary = state.range(0) != 0;
    p.seed = 1;
    Sampler sampler(p, kVocab, suppressed());
    const LogitsSummary sum = summarize_logits(row());
    std::vector<float> logits;
    GenerateOptions o;
    TokenEvent ev;
    for (auto _ : state) {
        logits = row();
        benchmark::DoNotOptimize(sampler.sample(logits, {}, {}, o, &ev, with_summary ? &sum : nullptr));
    }
    state.SetLabel(with_summary ? "with summary" : "pass over the row");
}

void BM_RefillOnly(benchmark::State& state) {
    std::vector<float> logits;
    for (auto _ : state) {
        logits = row();
        benchmark::DoNotOptimize(logits.data());
    }
}

BENCHMARK(BM_RefillOnly)->Unit(benchmark::kMicrosecond);

// The request shapes: name, temperature, top-k, top-p.
struct Shape {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
};
constexpr Shape kShapes[] = {
    {"BM_Greedy", 0.0f, 0, 1.0f},
    {"BM_TopK20", 0.7f, 20, 0.8f},  // the chat defaults' shape
    {"BM_TemperatureOnly", 1.0f, 0, 1.0f},
    {"BM_TopPOnly", 1.0f, 0, 0.9f},
};

const bool registered = [] {
    for (const Shape& sh : kShapes) {
        SamplingParams p;
        p.temperature = sh.temperature;
        p.top_k = sh.top_k;
        p.top_p = sh.top_p;
        benchmark::RegisterBenchmark(sh.name, [p](benchmark::State& state) { run(state, p); })
            ->Arg(0)
            ->Arg(1)
            ->Unit(benchmark::kMicrosecond);
    }
    return true;
}();

}  // namespace

BENCHMARK_MAIN();
