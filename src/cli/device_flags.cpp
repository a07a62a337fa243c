#include "cli/device_flags.h"

#include "cli/args.h"
#include "cli/command.h"

namespace sluice::cli {

void DeviceFlags::add_to(CLI::App* cmd) {
    cmd->add_option("--device", device, "Where the model runs: cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--gpu-memory", gpu_memory,
                    "GPU memory budget with --device cuda, e.g. 20G (default: 90% of what is free); routed "
                    "experts that do not fit are cached in GPU memory and streamed from the host");
    cmd->add_option("--gpu-expert-cache", gpu_expert_cache,
                    "Cap the GPU expert cache, e.g. 2G (tiers the experts even when they would fit)");
}

void DeviceFlags::apply(EngineOptions& options) const {
    options.device = device;
    if (!gpu_memory.empty()) options.gpu_memory_bytes = check(parse_size(gpu_memory));
    if (!gpu_expert_cache.empty()) options.gpu_expert_cache_bytes = check(parse_size(gpu_expert_cache));
}

}  // namespace sluice::cli
