// `sluice version [--json]`: the build (version, commit, build type, CPU kernels, CUDA).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "sluice/version.h"

SLUICE_COMMAND(version, 1000, [](CLI::App& app) {
    auto as_json = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("version", "Print the version, commit, build type, CPU kernels and CUDA");
    cmd->add_flag("--json", *as_json, "Print JSON");
    cmd->callback([as_json] {
        if (!*as_json) {
            std::printf("%s\n", sluice::version_line().c_str());
            return;
        }
        const sluice::BuildInfo b = sluice::build_info();
        const nlohmann::json j = {{"version", b.version},
                                  {"commit", b.commit},
                                  {"commit_date", b.commit_date},
                                  {"build_type", b.build_type},
                                  {"cpu_kernels", b.cpu_isa},
                                  {"cuda", b.cuda},
                                  {"cuda_architectures", b.cuda_archs}};
        std::printf("%s\n", j.dump(2).c_str());
    });
});
