// `sluice generate MODEL`: one prompt in, streamed text out (stdout), statistics on stderr and
// optionally as JSON (--stats-json). --json-schema FILE constrains the output to JSON valid
// against that schema (sluice/constrain.h; the subset is in docs/SERVER.md).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "cli/sampling_flags.h"
#include "cli/spec_flags.h"
#include "cli/stats.h"
#include "server/tool_calls.h"
#include "sluice/chat_template.h"
#include "sluice/constrain.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "sluice/tokenizer.h"

namespace sluice::cli {
namespace {

struct GenerateCliOptions {
    EngineFlags engine;
    std::string model_dir;
    std::string prompt;
    std::string prompt_file;
    std::string ids;
    bool chat = false;
    std::string system;
    bool no_think = false;
    int64_t ctx = 0;  // the model's context up to 8192 (EngineOptions::context_tokens)
    std::string stats_json;
    bool quiet_stats = false;
    std::string json_schema;  // file
    SamplingFlags sampling;
    SpecFlags spec;
};

void run_generate(const GenerateCliOptions& o) {
    const int sources = !o.prompt.empty() + !o.prompt_file.empty() + !o.ids.empty();
    if (sources != 1) throw CliError("give exactly one of --prompt, --file or --ids");
    EngineOptions eo;
    eo.model_dir = o.model_dir;
    o.engine.apply(eo);
    eo.context_tokens = o.ctx;
    SpecFlags::Draft draft = o.spec.load(eo);
    auto engine = check(Engine::load(eo));
    if (engine->memory_plan().streaming && !o.quiet_stats)
        std::fprintf(stderr, "%s\n", engine->memory_plan().describe().c_str());
    auto tokenizer = engine->tokenizer();

    std::vector<int32_t> prompt;
    if (!o.ids.empty()) {
        prompt = check(parse_ids(o.ids));
    } else {
        if (!tokenizer) throw CliError(o.model_dir + " has no tokenizer.json; use --ids");
        std::string text = o.prompt;
        if (!o.prompt_file.empty()) text = read_input(o.prompt_file, "prompt file");
        if (o.chat) {
            auto tmpl = engine->chat_template();
            if (!tmpl) throw CliError(o.model_dir + " has no chat template; drop --chat");
            nlohmann::ordered_json messages = nlohmann::ordered_json::array();
            if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
            messages.push_back({{"role", "user"}, {"content", text}});
            nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
            if (o.no_think) kwargs["enable_thinking"] = false;
            text = check(tmpl->render(messages, nullptr, true, kwargs));
            // A constrained reply has no reasoning: close a <think> the template opened; a harmony
            // reply (gpt-oss) is one final message, opened here (as the server does).
            std::string_view t = text;
            while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
            if (!o.json_schema.empty() && t.ends_with("<think>")) text += "\n</think>\n\n";
            if (!o.json_schema.empty() &&
                server::tool_call_style(*tmpl).form == server::ToolCallForm::kHarmony)
                text += server::kHarmonyFinalOpen;
        }
        prompt = tokenizer->encode(text);
        // A raw prompt gets the BOS a Llama / Mistral tokenizer adds (a chat template writes its own).
        if (auto bos = tokenizer->bos_id_to_add(); bos && !o.chat) prompt.insert(prompt.begin(), *bos);
    }
    GenerateOptions go = o.sampling.options(engine->default_sampling());
    if (!o.json_schema.empty()) {
        if (!tokenizer) throw CliError("--json-schema needs the model's tokenizer");
        std::ifstream in(o.json_schema, std::ios::binary);
        if (!in) throw CliError("cannot read " + o.json_schema);
        auto schema = nlohmann::ordered_json::parse(in, nullptr, false);
        if (schema.is_discarded()) throw CliError(o.json_schema + " is not valid JSON");
        GrammarBuilder builder;
        auto root = check(builder.add_json_schema(schema, o.json_schema));
        auto grammar = check(builder.build(root));
        auto constraint = std::make_shared<TokenConstraint>(grammar, TokenTrie::from_tokenizer(*tokenizer),
                                                            engine->eos_token_ids());
        go.logits_filter = [constraint](std::span<float> logits, std::span<const int32_t> generated) {
            constraint->filter(logits, generated);
        };
        go.filter_handles_speculation = true;
        go.on_accept = [constraint](int32_t token) { constraint->accept(token); };
    }
    o.spec.apply(draft, go);
    auto session = engine->new_session();
    auto result = check(session->generate(prompt, go, [&](const TokenEvent& ev) {
        if (tokenizer) {
            std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
        } else if (ev.token >= 0) {
            std::printf("%d ", ev.token);
        }
        std::fflush(stdout);
        return true;
    }));
    std::printf("\n");
    const GenerationStats& g = result.stats;
    const ExpertCacheStats cache = engine->expert_cache_stats();
    if (!o.quiet_stats) {
        std::fprintf(stderr,
                     "\n[%s] prompt %lld tokens (%lld computed) at %.2f tok/s, TTFT %.0f ms; %lld generated "
                     "at %.2f tok/s\n",
                     finish_reason_name(result.finish_reason), static_cast<long long>(g.prompt_tokens),
                     static_cast<long long>(g.prefilled_tokens), g.prefill_tok_s(), g.ttft_ms,
                     static_cast<long long>(g.generated_tokens), g.decode_tok_s());
        if (g.verify_steps > 0)
            std::fprintf(
                stderr, "speculative: %lld of %lld proposals kept (%.1f%%), %.2f tokens per target step\n",
                static_cast<long long>(g.accepted_tokens), static_cast<long long>(g.draft_tokens),
                100 * g.acceptance_rate(),
                static_cast<double>(g.generated_tokens) /
                    static_cast<double>(std::max<int64_t>(1, g.generated_tokens - g.accepted_tokens)));
        if (engine->memory_plan().streaming) {
            std::fprintf(stderr,
                         "expert cache: %.1f%% hits (%llu of %llu), %.1f MB read at %.2f GB/s, prefetch %llu "
                         "issued / %llu used / %llu wasted; peak RSS %.2f GB\n",
                         100 * cache.hit_rate(), static_cast<unsigned long long>(cache.hits),
                         static_cast<unsigned long long>(cache.hits + cache.misses), cache.bytes_read / 1e6,
                         cache.read_gb_s(), static_cast<unsigned long long>(cache.prefetch_issued),
                         static_cast<unsigned long long>(cache.prefetch_used),
                         static_cast<unsigned long long>(cache.prefetch_wasted), peak_rss_bytes() / 1e9);
        }
    }
    if (!o.stats_json.empty()) {
        write_output(o.stats_json, stats_json(*engine, g, cache).dump(2) + "\n", "--stats-json");
    }
}

}  // namespace
}  // namespace sluice::cli

SLUICE_COMMAND(generate, 10, [](CLI::App& app) {
    auto o = std::make_shared<sluice::cli::GenerateCliOptions>();
    auto* cmd = app.add_subcommand("generate", "Generate text from a prompt, streaming to stdout");
    o->engine.add_to(cmd);
    sluice::cli::add_model_arg(cmd, &o->model_dir, "Model folder (Hugging Face, MLX or packed) or .gguf");
    cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
    cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from a file (- for standard input)");
    cmd->add_option("--ids", o->ids, "Prompt as token ids, e.g. 1,2,3");
    cmd->add_flag("--chat", o->chat, "Wrap the prompt as a user message in the model's chat template");
    cmd->add_option("--system", o->system, "System message (with --chat)");
    cmd->add_flag("--no-think", o->no_think, "Render the template with enable_thinking=false (with --chat)");
    sluice::cli::add_ctx_size(cmd, &o->ctx, "Context tokens");
    cmd->add_option("--stats-json", o->stats_json, "Write run statistics as JSON (- for standard output)");
    cmd->add_flag("--quiet-stats", o->quiet_stats, "Do not print the memory plan and statistics on stderr");
    cmd->add_option("--json-schema", o->json_schema,
                    "Constrain the output to JSON valid against this schema file");
    o->sampling.add_to(cmd);
    o->spec.add_to(cmd);
    cmd->callback([o] { sluice::cli::run_generate(*o); });
});
