// `sluice pull ORG/REPO`: download a model from the Hugging Face Hub (or the mirror in
// $HF_ENDPOINT, with $HF_TOKEN or `hf auth login`'s token for gated/private repositories) straight
// into the packed layout, in sluice's models folder unless --to says otherwise.
// Re-run the same command to resume an interrupted pull. A conversion tool like `sluice pack`,
// so it calls experts/puller.h directly rather than the Engine API.
#include <cstdio>
#include <cstdlib>

#include "cli/command.h"
#include "cli/progress.h"
#include "cli/pull.h"
#include "convert/model_store.h"
#include "convert/puller.h"

namespace sluice::cli {

std::string pull_with_progress(convert::PullOptions o) {
    // The Hub's own environment, as huggingface_hub reads it.
    if (o.token.empty()) o.token = convert::hf_token();
    if (const char* endpoint = std::getenv("HF_ENDPOINT"); endpoint && *endpoint) o.endpoint = endpoint;
    if (o.out_dir.empty()) o.out_dir = convert::pull_dir({o.repo, o.revision});
    Progress progress("pull", true);
    o.progress = [&](const std::string& phase, uint64_t done, uint64_t total) {
        progress.update(phase, done, total);
    };
    o.notice = [&](const std::string& line) { std::fprintf(stderr, "\npull: %s\n", line.c_str()); };
    auto result = check(convert::pull_model(o));
    progress.finish();
    if (result.pack.already_complete) {
        std::fprintf(stderr, "%s is already a complete pull of %s@%s\n", o.out_dir.c_str(), o.repo.c_str(),
                     result.commit.c_str());
        return o.out_dir;
    }
    std::fprintf(
        stderr,
        "pulled %s@%s → %s%s: %.2f GB downloaded; dense %.2f GB, %lld expert files, %.2f GB of experts\n",
        o.repo.c_str(), result.commit.c_str(), o.out_dir.c_str(), result.pack.resumed ? " (resumed)" : "",
        result.downloaded_bytes / 1e9, result.pack.dense_bytes / 1e9,
        static_cast<long long>(result.pack.expert_files), result.pack.expert_bytes / 1e9);
    return o.out_dir;
}

}  // namespace sluice::cli

SLUICE_COMMAND(pull, 39, [](CLI::App& app) {
    auto o = std::make_shared<sluice::convert::PullOptions>();
    auto* cmd = app.add_subcommand(
        "pull", "Download a Hugging Face model straight into sluice's streaming layout (resumable)");
    cmd->add_option("repo", o->repo, "Repository, ORG/NAME (ORG/NAME@REV sets --revision)")->required();
    cmd->add_option("--revision", o->revision, "Branch, tag or commit")->capture_default_str();
    cmd->add_option("--to", o->out_dir,
                    "Output folder (default: sluice's models folder, ORG/NAME[@REV] under $SLUICE_MODELS or "
                    "~/.local/share/sluice/models)");
    cmd->add_option("--bits", o->bits,
                    "4 or 8 (MLX affine), 16 = keep float weights; default 4 (MLX sources: as stored)")
        ->check(CLI::IsMember({0, 4, 8, 16}));
    cmd->add_option("--group-size", o->group_size, "Quantization group size")
        ->check(CLI::IsMember({32, 64, 128}))
        ->capture_default_str();
    cmd->add_option("--include", o->include, "Also fetch files matching this glob (repeatable)");
    cmd->add_option("--exclude", o->exclude, "Skip optional files matching this glob (repeatable)");
    cmd->add_option("--connections", o->connections, "Shards downloaded at once (one connection each)")
        ->check(CLI::Range(1, 32))
        ->capture_default_str();
    cmd->add_option("--stall-timeout", o->stall_timeout_s,
                    "Seconds without a byte before a connection is retried")
        ->capture_default_str();
    cmd->add_option("--retries", o->max_attempts, "Attempts per request without progress before giving up")
        ->capture_default_str();
    cmd->add_option("--retry-wait", o->retry_wait_s,
                    "First wait between attempts, seconds (doubles each time)")
        ->capture_default_str();
    cmd->callback([o] {
        sluice::convert::PullOptions p = *o;
        if (const size_t at = p.repo.find('@'); at != std::string::npos) {
            p.revision = p.repo.substr(at + 1);
            p.repo = p.repo.substr(0, at);
        }
        sluice::cli::pull_with_progress(p);
    });
});
