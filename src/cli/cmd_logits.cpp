// `sluice logits MODEL_DIR --ids 1,2,3 --out FILE.npy [--stepwise]`: the logits at every position,
// after one prefill or through the decode path one token at a time — the tool the golden checks
// against reference implementations are built on.
#include <cstdio>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "format/npy.h"
#include "sluice/engine.h"
#include "sluice/session.h"

namespace sluice::cli {
namespace {

struct LogitsOptions {
    EngineFlags engine;
    std::string model_dir;
    std::string ids;
    std::string out;
    bool stepwise = false;
    int64_t chunk = 256;
};

void run_logits(const LogitsOptions& o) {
    std::vector<int32_t> ids = check(parse_ids(o.ids));
    EngineOptions eo;
    eo.model_dir = o.model_dir;
    o.engine.apply(eo);
    eo.context_tokens = static_cast<int64_t>(ids.size());
    auto engine = check(Engine::load(eo));
    auto session = engine->new_session();
    const int64_t V = engine->info().vocab_size;
    std::vector<float> logits;
    if (o.stepwise) {
        logits.reserve(ids.size() * static_cast<size_t>(V));
        for (int32_t id : ids) {
            auto step = check(session->evaluate(std::span<const int32_t>(&id, 1), false));
            logits.insert(logits.end(), step.begin(), step.end());
        }
    } else {
        logits = check(session->evaluate(ids, true, o.chunk));
    }
    check(format::write_npy_f32(o.out, logits, {static_cast<int64_t>(ids.size()), V}));
    std::fprintf(stderr, "wrote %s: float32 [%zu, %lld]\n", o.out.c_str(), ids.size(),
                 static_cast<long long>(V));
}

}  // namespace
}  // namespace sluice::cli

SLUICE_COMMAND(logits, 60, [](CLI::App& app) {
    auto o = std::make_shared<sluice::cli::LogitsOptions>();
    auto* cmd =
        app.add_subcommand("logits", "Write the logits of every position as a float32 .npy [n_ids, vocab]");
    o->engine.add_to(cmd);
    sluice::cli::add_model_arg(cmd, &o->model_dir, "Model folder (Hugging Face, MLX or packed) or .gguf");
    cmd->add_option("--ids", o->ids, "Token ids, e.g. 1,2,3")->required();
    cmd->add_option("--out", o->out, "Output .npy file")->required();
    cmd->add_flag("--stepwise", o->stepwise, "Feed the ids one at a time through the decode path");
    cmd->add_option("--prefill-chunk,--chunk", o->chunk, "Prefill chunk size in tokens")
        ->capture_default_str();
    cmd->callback([o] { sluice::cli::run_logits(*o); });
});
