#include "cli/device_flags.h"

#include "cli/args.h"
#include "cli/command.h"

namespace sluice::cli {

void DeviceFlags::add_to(CLI::App* cmd) {
    cmd->add_option("--device", device, "Where the model runs: cpu, cuda or cuda:N")->capture_default_str();
    cmd->add_option("--gpu-memory", gpu_memory,
                    "GPU memory budget with --device cuda, e.g. 20G (default: 90% of what is free)");
}

void DeviceFlags::apply(EngineOptions& options) const {
    options.device = device;
    if (!gpu_memory.empty()) options.gpu_memory_bytes = check(parse_size(gpu_memory));
}

}  // namespace sluice::cli
