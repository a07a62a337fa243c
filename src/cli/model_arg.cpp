#include "cli/model_arg.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/pull.h"
#include "convert/model_store.h"
#include "convert/packer.h"
#include "format/pack.h"

namespace sluice::cli {

namespace {

// A checkpoint found in the Hugging Face cache, as its packed layout (made once beside the models
// folder, reused after): streamed experts, the integrity checks of a pack. MLX checkpoints keep their
// bytes, float ones their floats (packing never quantizes what the user downloaded). A pack that
// fails (no space, an unsupported layout) leaves the checkpoint loaded as it is.
std::string packed_from_cache(const convert::ResolvedModel& found) {
    const std::string packed = convert::hf_packed_dir(*found.id, found.dir);
    if (format::open_packed_dir(packed).has_value()) {
        std::fprintf(stderr, "[model] its packed layout: %s\n", packed.c_str());
        return packed;
    }
    std::fprintf(stderr,
                 "[model] packing it once into %s (reused from now on; --no-pack loads it as it is)\n",
                 packed.c_str());
    convert::PackOptions o;
    o.src_dir = found.dir;
    o.out_dir = packed;
    std::ifstream config(found.dir + "/config.json");
    const nlohmann::json cfg = nlohmann::json::parse(config, nullptr, false);
    o.bits =
        cfg.is_object() && (cfg.contains("quantization") || cfg.contains("quantization_config")) ? 0 : 16;
    Progress progress("pack", true);
    o.progress = [&](const std::string& phase, uint64_t done, uint64_t total) {
        progress.update(phase, done, total);
    };
    auto result = convert::pack_model(o);
    progress.finish();
    if (!result.has_value()) {
        std::fprintf(stderr, "[model] could not pack it (%s): loading the checkpoint as it is\n",
                     result.status().message().c_str());
        return found.dir;
    }
    return packed;
}

}  // namespace

std::string resolve_model_arg(const std::string& arg, bool pull, bool pack) {
    auto found = convert::resolve_model(arg);
    if (found.has_value()) {
        if (found->where != "path")
            std::fprintf(stderr, "[model] %s: %s\n", found->id->str().c_str(), found->dir.c_str());
        if (pack && found->where == "hf-cache" && !format::is_packed_dir(found->dir))
            return packed_from_cache(*found);
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
    auto no_pack = std::make_shared<bool>(false);
    cmd->add_option("model,-m,--model", *model,
                    help + ": a folder, or a Hugging Face id ORG/NAME[@REV] (installed, or with --pull)")
        ->required();
    cmd->add_flag("--pull", *pull, "Download the model from the Hugging Face Hub when it is not installed");
    cmd->add_flag(
        "--no-pack", *no_pack,
        "A checkpoint found in the Hugging Face cache is loaded as it is (default: packed once into "
        "the models folder and streamed)");
    cmd->parse_complete_callback(
        [model, pull, no_pack] { *model = resolve_model_arg(*model, *pull, !*no_pack); });
}

}  // namespace sluice::cli
