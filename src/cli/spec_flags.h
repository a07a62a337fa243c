// Speculative decoding flags, shared by the commands that generate (generate, chat, bench):
// --spec off|draft|mtp, --draft MODEL with its own memory budget (deducted from --memory), and
// --spec-tokens K|auto. One definition, so the commands agree on names, defaults and help.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "sluice/engine.h"
#include "sluice/session.h"

namespace sluice::cli {

struct SpecFlags {
    std::string mode;  // off, draft, mtp; empty: draft when --draft is given, else off
    std::string draft;
    std::string draft_memory;
    std::string tokens = "4";  // K or "auto"
    float draft_temperature = -1.0f;

    void add_to(CLI::App* cmd);
    // off, draft or mtp: --spec, or draft when --draft is given.
    std::string resolved_mode() const;
    bool mtp() const { return resolved_mode() == "mtp"; }

    // The draft model loaded for a target loaded with `target` (its budget is taken out of
    // target.memory_bytes when that is set); empty when speculation is off. Throws CliError on a
    // bad flag, a draft that does not load, or a mode this build cannot run.
    struct Draft {
        std::shared_ptr<Engine> engine;
        std::unique_ptr<Session> session;
    };
    // `sessions`: how many draft sessions the caller will make at once (the server: one per
    // pooled session); `Draft::session` is made only for one.
    Draft load(EngineOptions& target, int sessions = 1) const;
    // Points `options.speculative` at the draft (nothing when it is empty).
    void apply(Draft& draft, GenerateOptions& options) const;
    // The proposals per step and adaptivity of --spec-tokens, into `out` (its draft untouched).
    void apply_tokens(SpeculativeOptions& out) const;
};

}  // namespace sluice::cli
