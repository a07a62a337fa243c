// `sluice pack SRC OUT_DIR` and `sluice verify DIR|FILE.gguf`: convert a checkpoint folder or a GGUF into
// sluice's streaming layout (resumable), and check every size and checksum of a packed folder, or a GGUF's
// tensors against the checksum manifest beside it (format/gguf_manifest.h).
//
// These are conversion tools, not inference: they call the packer in src/experts directly rather
// than the Engine/Session API.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/model_arg.h"
#include "cli/progress.h"
#include "convert/packer.h"
#include "format/gguf_manifest.h"

namespace sluice::cli {
namespace {

void run_pack(const convert::PackOptions& base) {
    convert::PackOptions o = base;
    Progress progress("pack", true);
    o.progress = [&](const std::string& phase, uint64_t done, uint64_t total) {
        progress.update(phase, done, total);
    };
    auto result = check(convert::pack_model(o));
    progress.finish();
    if (result.already_complete) {
        std::fprintf(stderr, "%s is already a complete pack of %s\n", o.out_dir.c_str(), o.src_dir.c_str());
        return;
    }
    std::fprintf(stderr, "packed %s → %s%s: dense %.2f GB, %lld expert files, %.2f GB of experts\n",
                 o.src_dir.c_str(), o.out_dir.c_str(), result.resumed ? " (resumed)" : "",
                 result.dense_bytes / 1e9, static_cast<long long>(result.expert_files),
                 result.expert_bytes / 1e9);
}

// A GGUF against the checksum manifest beside it (written on first use or with --rewrite).
void run_verify_gguf(const std::string& path, bool as_json, bool rewrite) {
    Progress progress("verify", false);
    auto result =
        format::verify_gguf(path, rewrite, [&](const std::string& phase, uint64_t done, uint64_t total) {
            progress.update(phase, done, total);
        });
    progress.finish();
    if (as_json) {
        nlohmann::json out = {{"file", path}, {"ok", result.has_value() && result->problems.empty()}};
        if (!result.has_value()) {
            out["error"] = result.status().message();
        } else {
            out["manifest"] = result->manifest_path;
            out["manifest_written"] = result->manifest_written;
            out["tensors"] = result->tensors;
            out["expert_slices"] = result->expert_slices;
            out["problems"] = result->problems;
        }
        std::printf("%s\n", out.dump(2).c_str());
        if (!result.has_value()) throw CliError(result.status().message());
        if (!result->problems.empty())
            throw CliError(std::to_string(result->problems.size()) + " problem(s) found in " + path);
        return;
    }
    auto r = check(std::move(result));
    if (r.manifest_written) {
        std::printf("%s: checksums of %lld tensors (%lld expert slices) written to %s\n", path.c_str(),
                    static_cast<long long>(r.tensors), static_cast<long long>(r.expert_slices),
                    r.manifest_path.c_str());
        return;
    }
    if (r.problems.empty()) {
        std::printf("%s: OK (%lld tensors, %lld expert slices match %s)\n", path.c_str(),
                    static_cast<long long>(r.tensors), static_cast<long long>(r.expert_slices),
                    r.manifest_path.c_str());
        return;
    }
    for (const auto& p : r.problems) std::printf("%s: %s\n", path.c_str(), p.c_str());
    throw CliError(std::to_string(r.problems.size()) + " problem(s) found in " + path);
}

void run_verify(const std::string& dir, bool as_json) {
    Progress progress("verify", false);
    auto result = convert::verify_packed(dir, [&](const std::string& phase, uint64_t done, uint64_t total) {
        progress.update(phase, done, total);
    });
    progress.finish();
    if (as_json) {  // the verdict as JSON on stdout, exit 1 unless OK
        nlohmann::json out = {{"dir", dir}, {"ok", result.has_value() && result->empty()}};
        if (!result.has_value())
            out["error"] = result.status().message();
        else
            out["problems"] = *result;
        std::printf("%s\n", out.dump(2).c_str());
        if (!result.has_value()) throw CliError(result.status().message());
        if (!result->empty()) throw CliError(std::to_string(result->size()) + " problem(s) found in " + dir);
        return;
    }
    auto problems = check(std::move(result));
    if (problems.empty()) {
        std::printf("%s: OK (every size and checksum verified)\n", dir.c_str());
        return;
    }
    for (const auto& p : problems) std::printf("%s: %s\n", dir.c_str(), p.c_str());
    throw CliError(std::to_string(problems.size()) + " problem(s) found in " + dir);
}

}  // namespace
}  // namespace sluice::cli

SLUICE_COMMAND(pack, 40, [](CLI::App& app) {
    auto o = std::make_shared<sluice::convert::PackOptions>();
    auto* cmd = app.add_subcommand(
        "pack", "Convert a Hugging Face or MLX checkpoint, or a GGUF, into sluice's streaming layout");
    cmd->add_option("src_dir", o->src_dir,
                    "Source checkpoint folder, or a .gguf (the first file of a split set): its tensors are "
                    "packed as they are, in their ggml types")
        ->required();
    cmd->add_option("out_dir", o->out_dir, "Output folder (re-run to resume an interrupted pack)")
        ->required();
    cmd->add_option("--bits", o->bits,
                    "4 or 8 (MLX affine), 16 = keep float weights; default 4 (MLX sources: as stored; a "
                    "GGUF is always packed as stored)")
        ->check(CLI::IsMember({0, 4, 8, 16}))
        ->capture_default_str();
    cmd->add_option("--group-size", o->group_size, "Quantization group size")
        ->check(CLI::IsMember({32, 64, 128}))
        ->capture_default_str();
    cmd->callback([o] { sluice::cli::run_pack(*o); });
});

SLUICE_COMMAND(verify, 41, [](CLI::App& app) {
    auto dir = std::make_shared<std::string>();
    auto* cmd = app.add_subcommand(
        "verify",
        "Check every size and checksum of a packed model, or of a GGUF against the manifest beside it");
    sluice::cli::add_model_arg(cmd, dir.get(), "Packed model, or a .gguf (the first file of a split set)");
    auto as_json = std::make_shared<bool>(false);
    cmd->add_flag("--json", *as_json,
                  "Print the verdict as JSON ({dir, ok, problems | error}); exit 1 unless ok");
    auto rewrite = std::make_shared<bool>(false);
    cmd->add_flag("--rewrite", *rewrite,
                  "GGUF: write the manifest from the file as it is now (after a deliberate change)");
    cmd->callback([dir, as_json, rewrite] {
        if (std::filesystem::path(*dir).extension() == ".gguf")
            sluice::cli::run_verify_gguf(*dir, *as_json, *rewrite);
        else
            sluice::cli::run_verify(*dir, *as_json);
    });
});

namespace sluice::cli {
namespace {
void run_synth(const convert::SynthOptions& base) {
    convert::SynthOptions o = base;
    Progress progress("synth", false);
    o.progress = [&](const std::string& phase, uint64_t done, uint64_t total) {
        progress.update(phase, done, total);
    };
    auto result = check(convert::synth_model(o));
    progress.finish();
    std::fprintf(
        stderr,
        "synthesized %s → %s: dense %.2f GB, %lld expert files, %.2f GB of experts (random weights)\n",
        o.config_path.c_str(), o.out_dir.c_str(), result.dense_bytes / 1e9,
        static_cast<long long>(result.expert_files), result.expert_bytes / 1e9);
}
}  // namespace
}  // namespace sluice::cli

SLUICE_COMMAND(synth, 42, [](CLI::App& app) {
    auto o = std::make_shared<sluice::convert::SynthOptions>();
    auto* cmd =
        app.add_subcommand("synth", "Write a packed model of a real config with random weights (benchmarks)");
    cmd->add_option("config", o->config_path, "A config.json of any supported model")->required();
    cmd->add_option("out_dir", o->out_dir, "Output folder")->required();
    cmd->add_option("--bits", o->bits, "4 or 8")->check(CLI::IsMember({4, 8}))->capture_default_str();
    cmd->add_option("--group-size", o->group_size, "Quantization group size")
        ->check(CLI::IsMember({32, 64, 128}))
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "Random seed")->capture_default_str();
    cmd->add_option("--tokenizer", o->tokenizer_dir, "Copy tokenizer/template files from this folder");
    cmd->add_flag("!--no-mtp", o->mtp,
                  "Leave out the multi-token-prediction head (written for Qwen3-Next / Qwen3.5 configs, as "
                  "their checkpoints have one, and GLM-4.5 / DeepSeek-V3 ones declaring "
                  "num_nextn_predict_layers)");
    cmd->callback([o] { sluice::cli::run_synth(*o); });
});
