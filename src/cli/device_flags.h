// The `--device`, `--gpu-memory` and `--gpu-expert-cache` flags shared by every command that loads a model
// (generate, bench, serve, chat, logits, perplexity).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "sluice/engine.h"

namespace sluice::cli {

struct DeviceFlags {
    std::string device = "cpu";
    std::string gpu_memory;
    std::string gpu_expert_cache;

    void add_to(CLI::App* cmd);
    // Sets EngineOptions::device, gpu_memory_bytes and gpu_expert_cache_bytes; exits with a message on a
    // malformed size.
    void apply(EngineOptions& options) const;
};

}  // namespace sluice::cli
