// The flags that shape how a command loads a model, shared by every command that runs one
// (generate, chat, serve, bench, logits, perplexity): memory budget, compute and IO threads,
// prefetch, expert-cache policy, and the device with its GPU budgets. One definition, so the
// commands agree on names, defaults and help.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "sluice/engine.h"

namespace sluice::cli {

struct EngineFlags {
    std::string memory;        // empty: derived from what is available
    std::string memory_floor;  // empty: one layer's routed experts
    bool fixed_memory = false;
    int threads = 0;  // 0: all cores
    int io_threads = 16;
    bool no_prefetch = false;
    bool no_preload = false;
    // Streamed experts checked against their xxh3 in layout.json: true (--verify-reads) every read,
    // false (--no-verify-reads) none; unset: the engine's default, each record's first read
    // (EngineOptions::verify_first_reads).
    std::optional<bool> verify_reads;
    std::string cache_policy = "lfu";
    std::string stream_dense = "auto";
    std::string device = "cpu";
    std::string gpu_memory;
    std::string gpu_expert_cache;
    int kv_bits = 32;
    int64_t kv_window = 256;
    std::string cpu_activations = "int8";
    std::string gpu_prefill = "int8";
    std::string prefix_cache;  // empty: the engine's default share of --memory; "0": off

    void add_to(CLI::App* cmd);
    // Sets the EngineOptions fields these flags cover; exits with a message on a malformed size.
    void apply(EngineOptions& options) const;
};

// `-c, --ctx-size N`, one definition for every command that sizes a session (generate, chat, serve,
// info): the default 0 is the model's context up to 8192 tokens, or the most the memory budget holds
// when that is less (EngineOptions::context_tokens); N is range-checked.
CLI::Option* add_ctx_size(CLI::App* cmd, int64_t* ctx, const std::string& what = "Context tokens");

}  // namespace sluice::cli
