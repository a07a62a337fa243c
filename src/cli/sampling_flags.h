// The sampling and generation flags shared by `generate` and `chat`, applied over the model's
// generation_config.json defaults (a flag given on the command line always wins).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sluice/session.h"

namespace sluice::cli {

struct SamplingFlags {
    std::optional<float> temperature, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    std::optional<int32_t> top_k, repeat_window;
    std::optional<uint64_t> seed;
    std::vector<std::string> stop;
    int64_t max_tokens = 256;

    void add_to(CLI::App* cmd);
    GenerateOptions options(const SamplingParams& defaults) const;
};

}  // namespace sluice::cli
