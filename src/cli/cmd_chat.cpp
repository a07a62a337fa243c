// `sluice chat MODEL`: an interactive terminal chat over the public API.
//
// Each turn renders the whole conversation with the model's own chat template and hands the
// tokens to Session::generate, which reuses the state of everything already computed (DeltaNet
// turn checkpoints included), so turn N only computes its new tokens. Line editing and history
// come from libedit on a terminal; with stdin not a terminal, lines are read plainly (scripted
// use). A line ending in a backslash continues on the next line. Reasoning (<think>…</think>, or a
// harmony reply's analysis) is shown dimmed, or hidden with --hide-thinking; of a harmony reply the
// conversation keeps the answer (gpt-oss's template refuses its markup in an earlier turn, and drops
// earlier reasoning anyway).
//
// Keys, as in python or bash: Ctrl-C while a reply streams stops the reply; Ctrl-C at the prompt
// discards the line being typed (with its continuation lines) and shows a fresh prompt; Ctrl-D at
// an empty prompt quits. How Ctrl-C reaches us:
//  - While a reply streams the terminal is in cooked mode; the driver sends SIGINT and on_sigint
//    cancels the session (an atomic store, so safe in a handler). The handler is installed with
//    SA_RESTART: during generation no system call should fail with EINTR.
//  - At the prompt, libedit's readline() has its own handler in place (rl_catch_signals, on by
//    default): it puts the terminal back into cooked mode, reinstalls our handler, re-raises the
//    signal, and the interrupted read() makes readline() return NULL with errno EINTR — the same
//    NULL as end of input. Treating every NULL as end of input made Ctrl-C at an idle prompt quit
//    the chat (the bug this fixes); read_input tells them apart by EINTR and by on_sigint having
//    run (the re-raised signal is delivered before read() returns).
//  - Both need the signal handled on the main thread, the one in read(): a handler on an engine
//    thread would leave read() waiting, and the re-raised signal could reach on_sigint only after
//    readline() returned. The engine's threads (thread pool, expert IO, the CUDA runtime's) all
//    start inside Engine::load, which runs with SIGINT blocked; they inherit and keep that mask,
//    so the kernel can only deliver SIGINT to the main thread.
// Rejected: turning ISIG off while editing and binding ^C as a key with the native el_* API. It
// needs no signal at the prompt, but ^Z and ^\ then become keys too (suspend reimplemented), and
// ending the line cleanly from a bound function needs libedit internals (re_goto_bottom). Also
// rejected: our own handler without SA_RESTART at the prompt (rl_catch_signals = 0): libedit then
// installs no handler at all, and loses its SIGTSTP/SIGCONT/SIGWINCH handling (terminal back to
// cooked mode on Ctrl-Z, edit mode and a redrawn line on fg, a resize).
#include <editline/readline.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "cli/sampling_flags.h"
#include "cli/spec_flags.h"
#include "cli/stats.h"
#include "server/output_parser.h"
#include "server/tool_calls.h"
#include "sluice/chat_template.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "sluice/tokenizer.h"

namespace sluice::cli {
namespace {

std::atomic<Session*> g_generating{nullptr};
std::atomic<bool> g_sigint_seen{false};  // set by every SIGINT; read_input clears it before reading

void on_sigint(int) {
    Session* s = g_generating.load();
    if (s != nullptr) s->cancel();
    g_sigint_seen.store(true);
}

void install_sigint_handler() {
    struct sigaction sa = {};
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
}

// Blocks SIGINT in the calling thread for its lifetime; threads started meanwhile inherit the mask
// and keep it (see the file comment).
class SigintBlockedScope {
 public:
    SigintBlockedScope() {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        pthread_sigmask(SIG_BLOCK, &set, &old_);
    }
    ~SigintBlockedScope() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
    SigintBlockedScope(const SigintBlockedScope&) = delete;
    SigintBlockedScope& operator=(const SigintBlockedScope&) = delete;

 private:
    sigset_t old_;
};

struct ChatOptions {
    EngineFlags engine;
    std::string model_dir;
    std::string system;
    int64_t ctx = 0;  // the model's context up to 8192 (EngineOptions::context_tokens)
    bool hide_thinking = false;
    bool no_think = false;
    std::string reasoning_effort;  // gpt-oss's template: low, medium, high (empty: its default)
    SamplingFlags sampling;
    SpecFlags spec;
};

// Prints streamed reply text, dimming (or hiding) what is inside <think>…</think>. Tags split
// across chunks are held back until they are complete. A harmony reply (gpt-oss) is split by the
// server's reader (server/harmony_parser.h): its analysis dimmed as the reasoning, its final
// messages plain, the markup not printed.
class ReplyPrinter {
 public:
    ReplyPrinter(bool tty, bool hide, bool harmony) : tty_(tty), hide_(hide) {
        if (harmony) harmony_.emplace(false, false, nlohmann::ordered_json(), /*harmony=*/true);
    }
    void feed(const std::string& text) {
        if (harmony_) {
            print(harmony_->feed(text));
            return;
        }
        pending_ += text;
        for (;;) {
            const std::string tag = thinking_ ? "</think>" : "<think>";
            const size_t at = pending_.find(tag);
            if (at == std::string::npos) {
                // Keep a possible partial tag at the end.
                size_t keep = 0;
                for (size_t k = std::min(pending_.size(), tag.size() - 1); k > 0; --k) {
                    if (pending_.compare(pending_.size() - k, k, tag, 0, k) == 0) {
                        keep = k;
                        break;
                    }
                }
                emit(pending_.substr(0, pending_.size() - keep));
                pending_.erase(0, pending_.size() - keep);
                return;
            }
            emit(pending_.substr(0, at));
            pending_.erase(0, at + tag.size());
            set_thinking(!thinking_);
        }
    }
    void finish() {
        if (harmony_) print(harmony_->finish());
        emit(pending_);
        pending_.clear();
        if (tty_) std::fputs("\033[0m", stdout);
        std::fputs("\n", stdout);
        std::fflush(stdout);
    }
    // A harmony reply's answer (its final messages' text): what the conversation keeps of it, the
    // template refusing a reply's markup in an earlier turn.
    const std::string& answer() const { return answer_; }

 private:
    void set_thinking(bool on) {
        thinking_ = on;
        if (tty_ && !hide_) std::fputs(on ? "\033[2m" : "\033[0m", stdout);
    }
    void print(const server::ParsedDelta& d) {
        if (!d.reasoning.empty()) {
            if (!thinking_) set_thinking(true);
            emit(d.reasoning);
            reasoned_ = true;
        }
        if (!d.content.empty()) {
            if (thinking_) {
                set_thinking(false);
                if (reasoned_ && !hide_) emit("\n\n");
            }
            emit(d.content);
            answer_ += d.content;
        }
    }
    void emit(const std::string& s) {
        if (s.empty() || (thinking_ && hide_)) return;
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
    }
    bool tty_, hide_;
    bool thinking_ = false;
    std::string pending_;
    std::optional<server::OutputParser> harmony_;
    bool reasoned_ = false;
    std::string answer_;
};

enum class Input { kLine, kInterrupted, kEnd };

// Reads one input (a line, or lines joined by trailing backslashes). kInterrupted: Ctrl-C at the
// prompt; what was typed is discarded. kEnd: end of input with nothing typed.
Input read_input(bool tty, std::string* out) {
    out->clear();
    const char* prompt = "> ";
    for (;;) {
        std::string line;
        if (tty) {
            g_sigint_seen.store(false);
            errno = 0;
            char* raw = readline(prompt);
            if (raw == nullptr) {
                if (errno == EINTR || g_sigint_seen.load()) {
                    // The terminal did not echo the ^C (libedit edits with ECHO off).
                    std::fputs("^C\n", stdout);
                    std::fflush(stdout);
                    out->clear();
                    return Input::kInterrupted;
                }
                return out->empty() ? Input::kEnd : Input::kLine;
            }
            line = raw;
            std::free(raw);
        } else if (!std::getline(std::cin, line)) {
            return out->empty() ? Input::kEnd : Input::kLine;
        }
        if (!line.empty() && line.back() == '\\') {
            line.pop_back();
            *out += line + "\n";
            prompt = ". ";
            continue;
        }
        *out += line;
        if (tty && !out->empty()) add_history(out->c_str());
        return Input::kLine;
    }
}

void print_help() {
    std::printf(
        "commands:\n"
        "  /reset            start a new conversation (keeps the system message)\n"
        "  /system TEXT      set the system message and start over\n"
        "  /think on|off     let the model reason before answering (template enable_thinking)\n"
        "  /effort LEVEL     how much it reasons: low, medium or high (gpt-oss's reasoning_effort)\n"
        "  /stats            statistics of the last reply and the expert cache\n"
        "  /save FILE        save the conversation and its model state\n"
        "  /load FILE        restore a saved conversation\n"
        "  /help             this help;  /exit or Ctrl-D quits;  Ctrl-C stops a reply or drops the line\n"
        "  a line ending in \\ continues on the next line\n");
}

void run_chat(const ChatOptions& o) {
    EngineOptions eo;
    eo.model_dir = o.model_dir;
    o.engine.apply(eo);
    eo.context_tokens = o.ctx;
    std::shared_ptr<Engine> engine;
    std::unique_ptr<Session> session;
    SpecFlags::Draft draft;
    {
        const SigintBlockedScope engine_threads_without_sigint;
        draft = o.spec.load(eo);
        engine = check(Engine::load(eo));
        session = engine->new_session();
    }
    auto tmpl = engine->chat_template();
    auto tok = engine->tokenizer();
    if (!tok || !tmpl)
        throw CliError(o.model_dir + " has no tokenizer.json or chat template; use `sluice generate`");
    const bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    std::string system = o.system;
    bool thinking = !o.no_think;
    std::string effort = o.reasoning_effort;
    // gpt-oss's harmony template: its replies are split as the server splits them (ReplyPrinter).
    const bool harmony = server::tool_call_style(*tmpl).form == server::ToolCallForm::kHarmony;
    auto kwargs = [&] {
        nlohmann::ordered_json k = {{"enable_thinking", thinking}};
        if (!effort.empty()) k["reasoning_effort"] = effort;
        return k;
    };
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    GenerationStats last;
    install_sigint_handler();
    if (tty) {
        std::printf("sluice chat — %s (%s). /help for commands.\n", o.model_dir.c_str(),
                    engine->info().family.c_str());
        if (engine->memory_plan().streaming) std::printf("%s\n", engine->memory_plan().describe().c_str());
    }

    std::string input;
    for (;;) {
        const Input got = read_input(tty, &input);
        if (got == Input::kEnd) break;
        if (got == Input::kInterrupted || input.empty()) continue;
        if (input[0] == '/') {
            const size_t sp = input.find(' ');
            const std::string cmd = input.substr(0, sp);
            const std::string arg = sp == std::string::npos ? "" : input.substr(sp + 1);
            if (cmd == "/exit" || cmd == "/quit") break;
            if (cmd == "/help") {
                print_help();
            } else if (cmd == "/reset") {
                messages = nlohmann::ordered_json::array();
                std::printf("(new conversation)\n");
            } else if (cmd == "/system") {
                system = arg;
                messages = nlohmann::ordered_json::array();
                std::printf("(system message set; new conversation)\n");
            } else if (cmd == "/think") {
                if (arg != "on" && arg != "off") {
                    std::printf("usage: /think on|off\n");
                } else {
                    thinking = arg == "on";
                    std::printf("(thinking %s)\n", thinking ? "on" : "off");
                }
            } else if (cmd == "/effort") {
                if (arg != "low" && arg != "medium" && arg != "high") {
                    std::printf("usage: /effort low|medium|high\n");
                } else {
                    effort = arg;
                    std::printf("(reasoning effort %s)\n", effort.c_str());
                }
            } else if (cmd == "/stats") {
                const ExpertCacheStats c = engine->expert_cache_stats();
                std::printf(
                    "last reply: prompt %lld tokens (%lld computed) at %.1f tok/s, TTFT %.0f ms, %lld tokens "
                    "at %.2f tok/s\n",
                    static_cast<long long>(last.prompt_tokens), static_cast<long long>(last.prefilled_tokens),
                    last.prefill_tok_s(), last.ttft_ms, static_cast<long long>(last.generated_tokens),
                    last.decode_tok_s());
                if (engine->memory_plan().streaming)
                    std::printf("expert cache: %.1f%% hits, %.1f MB read at %.2f GB/s; peak RSS %.2f GB\n",
                                100 * c.hit_rate(), c.bytes_read / 1e6, c.read_gb_s(),
                                peak_rss_bytes() / 1e9);
            } else if (cmd == "/save" && !arg.empty()) {
                Status st = session->save(arg);
                if (st.is_ok()) {
                    std::ofstream(arg + ".messages.json")
                        << nlohmann::ordered_json{{"system", system}, {"messages", messages}}.dump(1);
                    std::printf("(saved to %s)\n", arg.c_str());
                } else {
                    std::printf("error: %s\n", st.message().c_str());
                }
            } else if (cmd == "/load" && !arg.empty()) {
                std::ifstream in(arg + ".messages.json");
                auto saved = nlohmann::ordered_json::parse(in, nullptr, false);
                Status st = saved.is_discarded()
                                ? error(ErrorCode::kCorrupt, "cannot read " + arg + ".messages.json")
                                : session->load(arg);
                if (st.is_ok()) {
                    system = saved.value("system", "");
                    messages = saved["messages"];
                    std::printf("(loaded %zu messages)\n", messages.size());
                } else {
                    std::printf("error: %s\n", st.message().c_str());
                }
            } else {
                std::printf("unknown command %s (/help lists them)\n", cmd.c_str());
            }
            std::fflush(stdout);
            continue;
        }

        messages.push_back({{"role", "user"}, {"content", input}});
        nlohmann::ordered_json all = nlohmann::ordered_json::array();
        if (!system.empty()) all.push_back({{"role", "system"}, {"content", system}});
        for (const auto& m : messages) all.push_back(m);
        auto rendered = tmpl->render(all, nullptr, true, kwargs());
        if (!rendered.has_value()) {
            std::printf("error: %s\n", rendered.status().message().c_str());
            messages.erase(messages.end() - 1);
            continue;
        }
        const std::vector<int32_t> prompt = tok->encode(*rendered);
        GenerateOptions go = o.sampling.options(engine->default_sampling());
        o.spec.apply(draft, go);
        // A checkpoint where the conversation ends and the generation prompt begins (see
        // GenerateOptions::checkpoint_positions).
        if (auto base = tmpl->render(all, nullptr, false, kwargs()); base.has_value()) {
            const std::vector<int32_t> head = tok->encode(*base);
            if (head.size() < prompt.size() && std::equal(head.begin(), head.end(), prompt.begin()))
                go.checkpoint_positions.push_back(static_cast<int64_t>(head.size()));
        }
        ReplyPrinter printer(tty, o.hide_thinking, harmony);
        g_generating.store(session.get());
        auto result = session->generate(prompt, go, [&](const TokenEvent& ev) {
            printer.feed(ev.text);
            return true;
        });
        g_generating.store(nullptr);
        printer.finish();
        if (!result.has_value()) {
            std::printf("error: %s\n", result.status().message().c_str());
            messages.erase(messages.end() - 1);
            continue;
        }
        last = result->stats;
        if (result->finish_reason == FinishReason::kCancelled) std::printf("(stopped)\n");
        messages.push_back({{"role", "assistant"}, {"content", harmony ? printer.answer() : result->text}});
        std::fflush(stdout);
    }
    if (tty) std::printf("\n");
}

}  // namespace
}  // namespace sluice::cli

SLUICE_COMMAND(chat, 11, [](CLI::App& app) {
    auto o = std::make_shared<sluice::cli::ChatOptions>();
    auto* cmd = app.add_subcommand("chat", "Interactive chat in the terminal (/help inside for commands)");
    o->engine.add_to(cmd);
    sluice::cli::add_model_arg(cmd, &o->model_dir, "Model folder or .gguf");
    cmd->add_option("--system", o->system, "System message");
    cmd->add_flag("--no-think", o->no_think, "Start with thinking off (enable_thinking=false)");
    cmd->add_flag("--hide-thinking", o->hide_thinking, "Do not print the model's reasoning");
    cmd->add_option("--reasoning-effort", o->reasoning_effort,
                    "How much the model reasons (template reasoning_effort: gpt-oss's low, medium, high)")
        ->check(CLI::IsMember({"low", "medium", "high"}));
    sluice::cli::add_ctx_size(cmd, &o->ctx, "Context tokens");
    o->sampling.add_to(cmd);
    o->spec.add_to(cmd);
    cmd->callback([o] { sluice::cli::run_chat(*o); });
});
