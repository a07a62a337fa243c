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
    std::string memory;  // empty: derived from what is available
    int threads = 0;     // 0: all cores
    int io_threads = 16;
    bool no_prefetch = false;
    // Streamed experts: the xxh3 of every record read checked against layout.json. Unset: the
    // engine's default (EngineOptions::verify_reads).
    std::optional<bool> verify_reads;
    std::string cache_policy = "lfu";
    std::string device = "cpu";
    std::string gpu_memory;
    std::string gpu_expert_cache;
    int kv_bits = 32;
    int64_t kv_window = 256;

    void add_to(CLI::App* cmd);
    // Sets the EngineOptions fields these flags cover; exits with a message on a malformed size.
    void apply(EngineOptions& options) const;
};

}  // namespace sluice::cli
