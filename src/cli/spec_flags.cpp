#include "cli/spec_flags.h"

#include "cli/args.h"
#include "cli/command.h"
#include "cli/model_arg.h"

namespace sluice::cli {

void SpecFlags::add_to(CLI::App* cmd) {
    cmd->add_option("--spec", mode,
                    "Speculative decoding: off, draft (a draft model, --draft) or mtp (default: draft when "
                    "--draft is given, else off)")
        ->check(CLI::IsMember({"off", "draft", "mtp"}));
    cmd->add_option("--draft", draft,
                    "Draft model folder for speculative decoding: a smaller model with the same tokenizer");
    cmd->add_option("--draft-memory", draft_memory,
                    "The draft model's memory budget, e.g. 1G, taken out of --memory (default: a quarter of "
                    "--memory, or derived from what is available)");
    cmd->add_option("--spec-tokens", tokens,
                    "Proposals per speculative step: 1..16, or auto (chosen from the measured acceptance and "
                    "step costs, at most 8; 0 when speculation does not pay)")
        ->capture_default_str();
    cmd->add_option("--draft-temperature", draft_temperature,
                    "The draft's sampling temperature (default: the request's); the output distribution "
                    "stays the target's either way");
}

std::string SpecFlags::resolved_mode() const {
    return mode.empty() ? (draft.empty() ? "off" : "draft") : mode;
}

SpecFlags::Draft SpecFlags::load(EngineOptions& target, int sessions) const {
    const std::string m = resolved_mode();
    if (m == "off") return {};
    if (m == "mtp") {
        if (!draft.empty()) throw CliError("--spec mtp drafts with the model's own head: drop --draft");
        target.mtp = true;  // Engine::load says so when the model has no head
        return {};
    }
    if (draft.empty()) throw CliError("--spec draft needs --draft MODEL");
    EngineOptions eo = target;
    eo.model_dir = resolve_model_arg(draft, false);
    eo.max_sessions = sessions;
    eo.memory_bytes = !draft_memory.empty() ? check(parse_size(draft_memory)) : target.memory_bytes / 4;
    if (target.memory_bytes > 0) {
        if (eo.memory_bytes >= target.memory_bytes)
            throw CliError("--draft-memory must be less than --memory");
        target.memory_bytes -= eo.memory_bytes;
    }
    Draft d;
    d.engine = check(Engine::load(eo));
    if (sessions == 1) d.session = d.engine->new_session();
    return d;
}

void SpecFlags::apply(Draft& d, GenerateOptions& options) const {
    if (mtp()) {
        options.speculative.mtp = true;
        apply_tokens(options.speculative);
        return;
    }
    if (!d.session) return;
    options.speculative.draft = d.session.get();
    apply_tokens(options.speculative);
}

void SpecFlags::apply_tokens(SpeculativeOptions& out) const {
    out.draft_temperature = draft_temperature;
    if (tokens == "auto") {
        out.adaptive = true;
        out.tokens = 8;
        return;
    }
    int k = 0;
    try {
        size_t used = 0;
        k = std::stoi(tokens, &used);
        if (used != tokens.size()) k = 0;
    } catch (const std::exception&) {
        k = 0;
    }
    if (k < 1 || k > 16) throw CliError("--spec-tokens must be 1..16 or auto, not '" + tokens + "'");
    out.adaptive = false;
    out.tokens = k;
}

}  // namespace sluice::cli
