// `sluice serve MODEL_DIR`: the OpenAI-compatible HTTP server and web chat page
// (src/server/server.h). Loads the engine, prints the memory plan, then serves until SIGINT or
// SIGTERM. Binds loopback by default and warns when it listens beyond loopback with no key.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/model_arg.h"
#include "cli/spec_flags.h"
#include "server/server.h"
#include "sluice/engine.h"

namespace sluice::cli {
namespace {

struct ServeOptions {
    EngineFlags engine;
    SpecFlags spec;
    std::string model_dir;
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;
    std::string api_key_file;
    std::string cors;
    int parallel = 1;
    int64_t ctx = 0;  // the model's context up to 8192 (EngineOptions::context_tokens)
    std::string alias;
    bool strict_model_name = false;
    int keep_alive_ms = 2000;
    double shutdown_timeout_s = 10;
    double header_timeout_s = 10;
    double body_timeout_s = 60;
    size_t max_connections = 1024;
    size_t max_connections_per_client = 256;
    size_t max_requests = 256;
    size_t max_requests_per_client = 64;
};

// The server the signal watcher stops; guarded so the watcher never touches it once listen()
// has returned and it is being destroyed.
std::mutex g_server_mutex;
server::Server* g_server = nullptr;

void run_serve(const ServeOptions& o) {
    if (o.parallel < 1 || o.parallel > 64)
        throw CliError("[serve] --parallel must be in [1, 64], got " + std::to_string(o.parallel));
    // Signals end the server from a watcher thread (stop() is not async-signal-safe). They are
    // blocked before any thread exists (the engine's compute threads included), so every thread
    // inherits the mask and only the watcher receives them.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    std::string api_key = o.api_key;
    if (!o.api_key_file.empty()) {
        std::ifstream in(o.api_key_file, std::ios::binary);
        if (!in) throw CliError("[serve] cannot read --api-key-file " + o.api_key_file);
        std::getline(in, api_key);
        while (!api_key.empty() && std::isspace(static_cast<unsigned char>(api_key.back())))
            api_key.pop_back();
        if (api_key.empty())
            throw CliError("[serve] --api-key-file " + o.api_key_file + " holds no key on its first line");
    }
    EngineOptions eo;
    eo.model_dir = o.model_dir;
    o.engine.apply(eo);
    eo.context_tokens = o.ctx;
    eo.max_sessions = o.parallel;
    // The draft model first: its budget comes out of --memory before the target plans.
    SpecFlags::Draft draft = o.spec.load(eo, o.parallel);
    auto engine = check(Engine::load(eo));
    std::fprintf(stderr, "[serve] %s\n", engine->memory_plan().describe().c_str());
    if (draft.engine)
        std::fprintf(stderr, "[serve] speculative decoding: draft %s, %s proposals per step; draft %s\n",
                     o.spec.draft.c_str(), o.spec.tokens.c_str(),
                     draft.engine->memory_plan().describe().c_str());

    server::ServerOptions so;
    so.host = o.host;
    so.port = o.port;
    so.api_key = api_key;
    so.cors_origin = o.cors;
    so.parallel = o.parallel;
    so.model_id = o.alias;
    so.strict_model_name = o.strict_model_name;
    so.keep_alive_ms = std::max(50, o.keep_alive_ms);
    so.header_timeout_ms = static_cast<int>(o.header_timeout_s * 1000);
    so.body_timeout_ms = static_cast<int>(o.body_timeout_s * 1000);
    so.max_connections = o.max_connections;
    so.max_connections_per_client = o.max_connections_per_client;
    so.max_requests = o.max_requests;
    so.max_requests_per_client = o.max_requests_per_client;
    if (draft.engine || o.spec.mtp()) o.spec.apply_tokens(so.speculative);
    so.speculative.mtp = o.spec.mtp();
    if (so.model_id.empty()) {
        std::filesystem::path p(o.model_dir);
        so.model_id = (p.has_filename() ? p.filename() : p.parent_path().filename()).string();
    }
    const bool loopback =
        o.host == "127.0.0.1" || o.host == "localhost" || o.host == "::1" || o.host.starts_with("127.");
    if (!loopback && api_key.empty())
        std::fprintf(stderr,
                     "[serve] WARNING: listening on %s without --api-key: anyone who can reach this address "
                     "can use the model\n",
                     o.host.c_str());

    server::Server srv(engine, so, draft.engine);
    {
        std::lock_guard lock(g_server_mutex);
        g_server = &srv;
    }
    // SIGINT/SIGTERM: stop accepting and let in-flight requests finish for --shutdown-timeout;
    // past it, cancel the generations still running (repeatedly: one may be just starting). A
    // second signal exits at once.
    std::thread watcher([set, timeout_s = o.shutdown_timeout_s] {
        int sig = 0;
        sigwait(&set, &sig);
        std::fprintf(
            stderr,
            "[serve] signal %d: stopping; in-flight requests get %.3g s (a second signal exits now)\n", sig,
            timeout_s);
        {
            std::lock_guard lock(g_server_mutex);
            if (g_server) g_server->stop();
        }
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        bool announced = false;
        for (;;) {
            const timespec tick{0, 200'000'000};
            const int again = sigtimedwait(&set, nullptr, &tick);
            if (again > 0) {
                std::fprintf(stderr, "[serve] signal %d again: exiting now\n", again);
                std::fflush(stderr);
                std::_Exit(128 + again);
            }
            if (std::chrono::steady_clock::now() < deadline) continue;
            std::lock_guard lock(g_server_mutex);
            if (!g_server) return;
            if (!announced)
                std::fprintf(stderr, "[serve] shutdown deadline passed: cancelling running generations\n");
            announced = true;
            g_server->cancel_generations();
        }
    });
    watcher.detach();
    Status status = srv.listen();
    {
        std::lock_guard lock(g_server_mutex);
        g_server = nullptr;
    }
    check(status);
}

}  // namespace
}  // namespace sluice::cli

SLUICE_COMMAND(serve, 15, [](CLI::App& app) {
    auto o = std::make_shared<sluice::cli::ServeOptions>();
    auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with a web chat page");
    o->engine.add_to(cmd);
    o->spec.add_to(cmd);
    sluice::cli::add_model_arg(cmd, &o->model_dir, "Model folder or .gguf");
    cmd->add_option("--host", o->host, "Address to bind")->capture_default_str();
    cmd->add_option("--port", o->port, "Port to listen on")
        ->capture_default_str()
        ->check(CLI::Range(1, 65535));
    auto* key = cmd->add_option("--api-key", o->api_key,
                                "Require 'Authorization: Bearer KEY' on the API (visible in ps: prefer "
                                "$SLUICE_API_KEY or --api-key-file)")
                    ->envname("SLUICE_API_KEY");
    cmd->add_option("--api-key-file", o->api_key_file, "Read the API key from the first line of this file")
        ->excludes(key);
    cmd->add_option("--cors", o->cors,
                    "Allow browser requests from this origin (e.g. http://localhost:3000 or *)");
    cmd->add_option("--parallel", o->parallel, "Requests generating at once (sessions); others queue")
        ->capture_default_str();
    sluice::cli::add_ctx_size(cmd, &o->ctx, "Context tokens per session");
    cmd->add_option("--keep-alive-ms", o->keep_alive_ms,
                    "SSE ': keep-alive' interval while a stream waits or prefills")
        ->capture_default_str();
    cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                    "Seconds in-flight requests get to finish after SIGINT/SIGTERM before they are cancelled")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 3600.0));
    cmd->add_option("--header-timeout", o->header_timeout_s,
                    "Seconds a client has to send a request's whole header (also the idle keep-alive time)")
        ->capture_default_str()
        ->check(CLI::Range(0.1, 3600.0));
    cmd->add_option("--body-timeout", o->body_timeout_s,
                    "Seconds a client has to send a request's whole body")
        ->capture_default_str()
        ->check(CLI::Range(0.1, 3600.0));
    cmd->add_option("--max-connections", o->max_connections,
                    "Connections open at once (more are answered 503 and closed)")
        ->capture_default_str()
        ->check(CLI::Range(size_t{1}, size_t{1} << 20));
    cmd->add_option("--max-connections-per-client", o->max_connections_per_client,
                    "Connections open at once from one client address")
        ->capture_default_str()
        ->check(CLI::Range(size_t{1}, size_t{1} << 20));
    cmd->add_option(
           "--max-requests", o->max_requests,
           "Generation and tokenizer requests in flight, queued ones included (more are answered 429)")
        ->capture_default_str()
        ->check(CLI::Range(size_t{1}, size_t{1} << 16));
    cmd->add_option("--max-requests-per-client", o->max_requests_per_client,
                    "Of those, from one client address (behind a reverse proxy every client shares "
                    "its address: raise this to --max-requests)")
        ->capture_default_str()
        ->check(CLI::Range(size_t{1}, size_t{1} << 16));
    cmd->add_option("--alias", o->alias, "Model name clients use (default: the folder name)");
    cmd->add_flag(
        "--strict-model-name", o->strict_model_name,
        "Answer a request for another model name with 404 model_not_found (default: the served model "
        "answers whatever name a client asks for, as llama-server does)");
    cmd->callback([o] { sluice::cli::run_serve(*o); });
});
