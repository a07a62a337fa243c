#include "cli/sampling_flags.h"

namespace sluice::cli {

void SamplingFlags::add_to(CLI::App* cmd) {
    cmd->add_option("-n,--max-tokens", max_tokens, "Tokens to generate at most")->capture_default_str();
    cmd->add_option("--temperature", temperature,
                    "Sampling temperature, 0 = greedy (default: generation_config.json, else 0)");
    cmd->add_option("--top-k", top_k, "Keep the k most likely tokens (0 = off)");
    cmd->add_option("--top-p", top_p, "Nucleus sampling mass (1 = off)");
    cmd->add_option("--min-p", min_p, "Drop tokens below min_p × the top probability (0 = off)");
    cmd->add_option("--repeat-penalty", repeat_penalty, "Multiplicative repetition penalty (1 = off)");
    cmd->add_option("--repeat-window", repeat_window,
                    "Tokens the repetition penalty looks back over (default 64)");
    cmd->add_option("--presence-penalty", presence_penalty, "OpenAI presence penalty (0 = off)");
    cmd->add_option("--frequency-penalty", frequency_penalty, "OpenAI frequency penalty (0 = off)");
    cmd->add_option("--seed", seed, "Random seed (default: random)");
    cmd->add_option("--stop", stop, "Stop string (repeatable); never printed");
}

GenerateOptions SamplingFlags::options(const SamplingParams& defaults) const {
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.stop = stop;
    SamplingParams& s = o.sampling;
    s = defaults;
    if (temperature) s.temperature = *temperature;
    if (top_k) s.top_k = *top_k;
    if (top_p) s.top_p = *top_p;
    if (min_p) s.min_p = *min_p;
    if (repeat_penalty) s.repetition_penalty = *repeat_penalty;
    if (repeat_window) s.repetition_window = *repeat_window;
    if (presence_penalty) s.presence_penalty = *presence_penalty;
    if (frequency_penalty) s.frequency_penalty = *frequency_penalty;
    if (seed) s.seed = *seed;
    return o;
}

}  // namespace sluice::cli
