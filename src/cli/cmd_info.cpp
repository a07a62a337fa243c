// `sluice info MODEL_DIR [--memory SIZE]`: what the model is, how big its parts are, what one
// decoded token reads, the memory plan for a budget, and the speed-of-light estimate at the disk
// bandwidth measured now.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "cli/stats.h"
#include "convert/packer.h"
#include "format/gguf.h"
#include "sluice/engine.h"

namespace sluice::cli {
namespace {

struct InfoOptions {
    std::string model_dir;
    std::string memory;
    int64_t ctx = 0;
    int weight_bits = 4;
    int group_size = 64;
    int kv_bits = 32;
    int64_t kv_window = 256;
    bool measure = true;
    bool json = false;  // --json: one JSON object on stdout instead of the text
};

nlohmann::json plan_json(const MemoryPlan& p) {
    return {{"streaming", p.streaming},
            {"budget_bytes", p.budget_bytes},
            {"dense_bytes", p.dense_bytes},
            {"dense_streamed_bytes", p.dense_streamed_bytes},
            {"dense_window_layers", p.dense_window_layers},
            {"state_bytes", p.state_bytes},
            {"kv_type", p.kv_type},
            {"kv_window", p.kv_window},
            {"kv_bytes_per_token", p.kv_bytes_per_token},
            {"scratch_bytes", p.scratch_bytes},
            {"sessions", p.sessions},
            {"runtime_bytes", p.runtime_bytes},
            {"expert_cache_bytes", p.cache_bytes},
            {"expert_cache_slots", p.cache_slots},
            {"expert_slot_bytes", p.slot_bytes},
            {"context_tokens", p.context_tokens},
            {"max_context_tokens", p.max_context_tokens},
            {"describe", p.describe()}};
}

// The disk and memory read rates measured now, and the decode rate they bound with no expert-cache
// hit (the dense bytes from memory or the routed experts from disk, whichever is slower).
struct Bandwidth {
    double disk_gb_s, memory_gb_s, tok_s;
};
Bandwidth measure_bandwidth(const std::string& dir, const MemoryPlan& plan, const EngineOptions& eo,
                            uint64_t dense_bytes, double routed_per_token) {
    Bandwidth b;
    b.disk_gb_s = measure_expert_read_gb_s(dir, plan.slot_bytes, eo.io_threads, 1.5);
    b.memory_gb_s = measure_memory_read_gb_s(2);
    b.tok_s = 1.0 / std::max(static_cast<double>(dense_bytes) / (b.memory_gb_s * 1e9),
                             routed_per_token / (b.disk_gb_s * 1e9));
    return b;
}

void print_context(const MemoryPlan& plan) {
    const std::string window =
        plan.kv_window > 0 ? " + the last " + std::to_string(plan.kv_window) + " positions in f16" : "";
    std::printf("context           %lld tokens per session, KV %s%s (%llu bytes per token)\n",
                static_cast<long long>(plan.context_tokens), plan.kv_type.c_str(), window.c_str(),
                static_cast<unsigned long long>(plan.kv_bytes_per_token));
    std::printf(
        "longest context   %lld tokens fit this budget with these settings%s (never past the model's "
        "maximum)\n",
        static_cast<long long>(plan.max_context_tokens),
        plan.streaming ? ", the expert cache shrunk to one slot" : "");
}

// `sluice info CONFIG.json`: the plan for the model before its weights are here — their sizes are
// those of the packed layout it would be converted to (a dry run of synth), nothing is read.
void run_info_config(const InfoOptions& o, const EngineOptions& eo) {
    convert::SynthOptions so;
    so.config_path = o.model_dir;
    so.bits = o.weight_bits;
    so.group_size = o.group_size;
    so.dry_run = true;
    const convert::PackResult sizes = check(convert::synth_model(so));
    PlannedWeights w;
    w.dense_bytes = sizes.dense_bytes;
    w.expert_bytes = sizes.expert_bytes;
    w.record_bytes = sizes.record_bytes;
    w.expert_records = sizes.expert_records;
    w.layers_dense_bytes = sizes.layers_dense_bytes;
    w.max_layer_dense_bytes = sizes.max_layer_dense_bytes;
    const MemoryPlan plan = check(plan_memory(o.model_dir, w, eo));
    if (o.json) {
        const nlohmann::json out = {{"config", o.model_dir},
                                    {"weights_read", false},
                                    {"weight_bits", o.weight_bits},
                                    {"group_size", o.group_size},
                                    {"dense_bytes", w.dense_bytes},
                                    {"expert_bytes", w.expert_bytes},
                                    {"expert_records", w.expert_records},
                                    {"expert_record_bytes", w.record_bytes},
                                    {"plan", plan_json(plan)}};
        std::printf("%s\n", out.dump(2).c_str());
        return;
    }
    std::printf(
        "config            %s (no weights read: sizes of the packed layout at %d-bit, group %d,\n"
        "                  or the config's own MLX quantization)\n",
        o.model_dir.c_str(), o.weight_bits, o.group_size);
    std::printf("dense bytes       %.3f GB\n", static_cast<double>(w.dense_bytes) / 1e9);
    std::printf("expert bytes      %.3f GB (%lld experts of %.2f MB, streamed)\n",
                static_cast<double>(w.expert_bytes) / 1e9, static_cast<long long>(w.expert_records),
                static_cast<double>(w.record_bytes) / 1e6);
    std::printf("%s\n", plan.describe().c_str());
    print_context(plan);
}

void run_info(const InfoOptions& o) {
    EngineOptions eo;
    eo.model_dir = o.model_dir;
    eo.context_tokens = o.ctx;
    eo.kv_bits = o.kv_bits;
    eo.kv_window = o.kv_window;
    if (!o.memory.empty()) eo.memory_bytes = check(parse_size(o.memory));
    if (std::filesystem::is_regular_file(o.model_dir) && !format::is_gguf_model_path(o.model_dir)) {
        run_info_config(o, eo);
        return;
    }
    auto engine = check(Engine::load(eo));
    const ModelInfo& m = engine->info();
    const MemoryPlan& plan = engine->memory_plan();
    const double expert_record = plan.streaming    ? static_cast<double>(plan.slot_bytes)
                                 : m.n_experts > 0 ? static_cast<double>(m.expert_bytes) /
                                                         static_cast<double>(m.n_experts * m.n_layers)
                                                   : 0.0;
    const double routed_per_token = static_cast<double>(m.n_layers * m.experts_per_token) * expert_record;
    const double expert_total =
        plan.streaming ? expert_record * static_cast<double>(m.n_experts * m.n_layers) : m.expert_bytes;
    if (o.json) {
        nlohmann::json out = {{"model", o.model_dir},
                              {"family", m.family},
                              {"layers", m.n_layers},
                              {"full_attention_layers", m.n_full_attention_layers},
                              {"sliding_window_layers", m.n_sliding_window_layers},
                              {"sliding_window", m.sliding_window},
                              {"hidden_size", m.hidden_size},
                              {"vocab_size", m.vocab_size},
                              {"experts_per_layer", m.n_experts},
                              {"experts_per_token", m.experts_per_token},
                              {"quantization", m.quantization},
                              {"layout", m.layout},
                              {"dense_bytes", m.dense_bytes},
                              {"expert_bytes", static_cast<uint64_t>(std::llround(expert_total))},
                              {"expert_record_bytes", static_cast<uint64_t>(std::llround(expert_record))},
                              {"read_per_token_bytes",
                               {{"dense", m.dense_bytes},
                                {"routed_experts", static_cast<uint64_t>(std::llround(routed_per_token))}}},
                              {"plan", plan_json(plan)}};
        if (plan.streaming && o.measure) {
            const Bandwidth b = measure_bandwidth(o.model_dir, plan, eo, m.dense_bytes, routed_per_token);
            out["measured"] = {{"disk_gb_s", b.disk_gb_s},
                               {"memory_gb_s", b.memory_gb_s},
                               {"speed_of_light_tok_s", b.tok_s}};
        }
        std::printf("%s\n", out.dump(2).c_str());
        return;
    }
    std::printf("model             %s\n", o.model_dir.c_str());
    const std::string sliding = m.n_sliding_window_layers > 0
                                    ? ", " + std::to_string(m.n_sliding_window_layers) + " sliding window " +
                                          std::to_string(m.sliding_window)
                                    : "";
    std::printf("architecture      %s, %lld layers (%lld full attention%s), hidden %lld, vocab %lld\n",
                m.family.c_str(), static_cast<long long>(m.n_layers),
                static_cast<long long>(m.n_full_attention_layers), sliding.c_str(),
                static_cast<long long>(m.hidden_size), static_cast<long long>(m.vocab_size));
    std::printf("experts           %lld per layer, %lld per token\n", static_cast<long long>(m.n_experts),
                static_cast<long long>(m.experts_per_token));
    std::printf("weights           %s (%s layout%s)\n", m.quantization.c_str(), m.layout.c_str(),
                plan.streaming ? ", packed for streaming" : "");
    std::printf("dense bytes       %.3f GB\n", m.dense_bytes / 1e9);
    std::printf("expert bytes      %.3f GB (%.2f MB per expert)\n", expert_total / 1e9, expert_record / 1e6);
    std::printf("read per token    %.3f GB dense + %.3f GB routed experts (before cache hits)\n",
                m.dense_bytes / 1e9, routed_per_token / 1e9);
    std::printf("%s\n", plan.describe().c_str());
    print_context(plan);
    if (plan.streaming && o.measure) {
        std::fflush(stdout);  // the plan is out before the measurement's seconds
        std::fprintf(
            stderr,
            "[info] measuring expert reads and memory bandwidth (about 4 s; --no-measure skips it)\n");
        const Bandwidth b = measure_bandwidth(o.model_dir, plan, eo, m.dense_bytes, routed_per_token);
        std::printf(
            "speed of light    %.2f tok/s with no expert-cache hits (disk %.2f GB/s, memory %.1f GB/s "
            "measured now);\n"
            "                  every halving of the miss rate raises the disk-bound part 2x\n",
            b.tok_s, b.disk_gb_s, b.memory_gb_s);
    }
}

}  // namespace
}  // namespace sluice::cli

SLUICE_COMMAND(info, 30, [](CLI::App& app) {
    auto o = std::make_shared<sluice::cli::InfoOptions>();
    auto* cmd =
        app.add_subcommand("info", "Describe a model: architecture, sizes, bytes per token, memory plan");
    sluice::cli::add_model_arg(
        cmd, &o->model_dir,
        "Model folder or .gguf, or a config.json to plan for before the weights are here");
    cmd->add_option("--memory", o->memory, "Memory budget to plan for, e.g. 3G (default: 80% of available)");
    sluice::cli::add_ctx_size(cmd, &o->ctx, "Context tokens per session");
    cmd->add_option("--weight-bits", o->weight_bits, "With a config.json: the packed weights' bits")
        ->capture_default_str();
    cmd->add_option("--group-size", o->group_size, "With a config.json: the packed weights' group size")
        ->capture_default_str();
    cmd->add_option("--kv-bits", o->kv_bits, "KV cache element to plan for: 32, 16, 8, 4 or 3")
        ->capture_default_str();
    cmd->add_option("--kv-window", o->kv_window, "Recent positions also kept in f16 (with --kv-bits 8, 4, 3)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_flag("!--no-measure", o->measure, "Skip the disk/memory bandwidth measurement");
    cmd->add_flag("--json", o->json, "Print one JSON object (the same fields) instead of the text");
    cmd->callback([o] { sluice::cli::run_info(*o); });
});
