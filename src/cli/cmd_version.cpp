// `sluice version`: the build's version and which CPU kernels it selected.
#include <cstdio>

#include "cli/command.h"

SLUICE_COMMAND(version, 1000, [](CLI::App& app) {
    auto* cmd = app.add_subcommand("version", "Print the version");
    cmd->callback([] { std::printf("sluice %s\n", SLUICE_VERSION); });
});
