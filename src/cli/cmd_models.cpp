// `sluice list`, `sluice show MODEL`, `sluice rm ORG/NAME[@REV]`: the models installed in sluice's
// models folder and the Hugging Face cache (convert/model_store.h).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "convert/model_store.h"

namespace sluice::cli {
namespace {

std::string gb(uint64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / 1e9);
    return buf;
}

nlohmann::json model_json(const convert::InstalledModel& m) {
    return {{"id", m.id},         {"where", m.where}, {"dir", m.dir},
            {"commit", m.commit}, {"bytes", m.bytes}, {"complete", m.complete}};
}

void run_list(bool as_json) {
    const auto models = convert::list_models();
    if (as_json) {
        nlohmann::json out = {{"models_folder", convert::models_root()},
                              {"hf_cache", convert::hf_hub_cache()},
                              {"models", nlohmann::json::array()}};
        for (const auto& m : models) out["models"].push_back(model_json(m));
        std::printf("%s\n", out.dump(2).c_str());
        return;
    }
    if (models.empty()) {
        std::printf("no models in %s or %s\n", convert::models_root().c_str(),
                    convert::hf_hub_cache().c_str());
        return;
    }
    std::printf("%-44s %-9s %10s  %-12s %s\n", "MODEL", "WHERE", "SIZE", "COMMIT", "FOLDER");
    for (const auto& m : models)
        std::printf("%-44s %-9s %10s  %-12s %s%s\n", m.id.c_str(), m.where.c_str(), gb(m.bytes).c_str(),
                    m.commit.substr(0, 12).c_str(), m.dir.c_str(), m.complete ? "" : "  (incomplete)");
}

void run_show(const std::string& arg, bool as_json) {
    const convert::ResolvedModel r = check(convert::resolve_model(arg));
    convert::InstalledModel found;
    found.dir = r.dir;
    found.where = r.where;
    found.id = r.id ? r.id->str() : "";
    for (const auto& m : convert::list_models())
        if (m.dir == r.dir) found = m;
    if (as_json) {
        std::printf("%s\n", model_json(found).dump(2).c_str());
        return;
    }
    if (!found.id.empty()) std::printf("model   %s\n", found.id.c_str());
    std::printf("where   %s\nfolder  %s\n", found.where.c_str(), found.dir.c_str());
    if (!found.commit.empty()) std::printf("commit  %s\n", found.commit.c_str());
    if (found.bytes) std::printf("size    %s\n", gb(found.bytes).c_str());
    std::printf("(`sluice info %s` describes the model and its memory plan)\n", arg.c_str());
}

void run_rm(const std::string& arg) {
    const auto id = convert::parse_model_id(arg);
    if (!id)
        throw CliError("'" + arg +
                       "' is not a model id (ORG/NAME[@REV]); sluice rm deletes only installed models");
    const std::string dir = check(convert::remove_model(*id));
    std::fprintf(stderr, "deleted %s (%s)\n", id->str().c_str(), dir.c_str());
}

}  // namespace
}  // namespace sluice::cli

SLUICE_COMMAND(list, 41, [](CLI::App& app) {
    auto as_json = std::make_shared<bool>(false);
    auto* cmd =
        app.add_subcommand("list", "List the models in sluice's models folder and the Hugging Face cache");
    cmd->add_flag("--json", *as_json, "Print JSON");
    cmd->callback([as_json] { sluice::cli::run_list(*as_json); });
});

SLUICE_COMMAND(show, 42, [](CLI::App& app) {
    auto arg = std::make_shared<std::string>();
    auto as_json = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand("show", "Where a model is installed: folder, commit, size");
    cmd->add_option("model", *arg, "A folder or a Hugging Face id ORG/NAME[@REV]")->required();
    cmd->add_flag("--json", *as_json, "Print JSON");
    cmd->callback([arg, as_json] { sluice::cli::run_show(*arg, *as_json); });
});

SLUICE_COMMAND(rm, 43, [](CLI::App& app) {
    auto arg = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand("rm", "Delete a model from sluice's models folder");
    cmd->add_option("model", *arg, "Hugging Face id ORG/NAME[@REV]")->required();
    cmd->callback([arg] { sluice::cli::run_rm(*arg); });
});
