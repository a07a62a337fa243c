#include "cli/model_arg.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/pull.h"
#include "convert/model_store.h"

namespace sluice::cli {

std::string resolve_model_arg(const std::string& arg, bool pull) {
    auto found = convert::resolve_model(arg);
    if (found.has_value()) {
        if (found->where != "path")
            std::fprintf(stderr, "[model] %s: %s\n", found->id->str().c_str(), found->dir.c_str());
        return found->dir;
    }
    const auto id = convert::parse_model_id(arg);
    if (!id) throw CliError(found.status().message());
    bool fetch = pull;
    if (!fetch && isatty(STDIN_FILENO) && isatty(STDERR_FILENO)) {
        std::fprintf(stderr, "%s.\nDownload %s from the Hugging Face Hub into %s? [y/N] ",
                     found.status().message().c_str(), id->str().c_str(), convert::pull_dir(*id).c_str());
        std::string answer;
        std::getline(std::cin, answer);
        fetch = answer == "y" || answer == "Y" || answer == "yes";
    }
    if (!fetch)
        throw CliError(found.status().message() + "; fetch it with `sluice pull " + id->str() +
                       "` or add --pull");
    convert::PullOptions o;
    o.repo = id->repo;
    o.revision = id->revision;
    return pull_with_progress(o);
}

void add_model_arg(CLI::App* cmd, std::string* model, const std::string& help) {
    auto pull = std::make_shared<bool>(false);
    cmd->add_option("model,-m,--model", *model,
                    help + ": a folder, or a Hugging Face id ORG/NAME[@REV] (installed, or with --pull)")
        ->required();
    cmd->add_flag("--pull", *pull, "Download the model from the Hugging Face Hub when it is not installed");
    cmd->parse_complete_callback([model, pull] { *model = resolve_model_arg(*model, *pull); });
}

}  // namespace sluice::cli
