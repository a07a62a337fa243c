// `sluice perplexity MODEL FILE [--ctx N]`: perplexity over a text file in llama.cpp's way
// (include/sluice/perplexity.h).
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "cli/progress.h"
#include "sluice/engine.h"
#include "sluice/perplexity.h"
#include "sluice/tokenizer.h"

namespace sluice::cli {
namespace {

struct PplOptions {
    EngineFlags engine;
    std::string model_dir, file;
    int64_t ctx = 256;
    int64_t max_windows = 0;
};

void run_perplexity(const PplOptions& o) {
    EngineOptions eo;
    eo.model_dir = o.model_dir;
    o.engine.apply(eo);
    eo.context_tokens = o.ctx;
    auto engine = check(Engine::load(eo));
    if (!engine->tokenizer()) throw CliError(o.model_dir + " has no tokenizer.json");
    std::ifstream in(o.file, std::ios::binary);
    if (!in) throw CliError("cannot read " + o.file);
    std::stringstream ss;
    ss << in.rdbuf();
    std::vector<int32_t> tokens = engine->tokenizer()->encode(ss.str(), /*parse_special=*/false);
    // The BOS a Llama / Mistral tokenizer adds (HF's encode with add_special_tokens) starts the text.
    if (auto bos = engine->tokenizer()->bos_id_to_add()) tokens.insert(tokens.begin(), *bos);
    Progress progress("perplexity", false);
    auto r =
        check(compute_perplexity(*engine, tokens, o.ctx, o.max_windows, [&](int64_t done, int64_t total) {
            progress.update("windows", static_cast<uint64_t>(done), static_cast<uint64_t>(total));
        }));
    progress.finish();
    std::printf(
        "perplexity %.4f (mean NLL %.5f) over %lld scored tokens in %lld windows of %lld; %.0f tok/s\n",
        r.perplexity, r.mean_nll, static_cast<long long>(r.scored_tokens), static_cast<long long>(r.windows),
        static_cast<long long>(r.ctx), r.tokens_per_s);
}

}  // namespace
}  // namespace sluice::cli

SLUICE_COMMAND(perplexity, 55, [](CLI::App& app) {
    auto o = std::make_shared<sluice::cli::PplOptions>();
    auto* cmd =
        app.add_subcommand("perplexity", "Perplexity over a text file (sliding windows, second half scored)");
    o->engine.add_to(cmd);
    sluice::cli::add_model_arg(cmd, &o->model_dir, "Model folder or .gguf");
    cmd->add_option("file", o->file, "Text file")->required();
    cmd->add_option("-c,--ctx-size", o->ctx, "Window size in tokens")->capture_default_str();
    cmd->add_option("--max-windows", o->max_windows, "Evaluate only the first N windows (0 = all)")
        ->capture_default_str();
    cmd->callback([o] { sluice::cli::run_perplexity(*o); });
});
