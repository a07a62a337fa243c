// The route table and the cross-cutting HTTP policy, as the HttpService the front calls: API-key
// auth, CORS, refused encodings, unknown routes and methods (all answered from the header, before
// any body is read), OpenAI-shaped bodies for the front's own errors, exceptions turned into
// 500s, one log line per request, and Server's lifetime.
//
// Auth: with --api-key every route except the web page ("/", its files) and /health requires
// `Authorization: Bearer KEY` (the page asks for the key itself). Keys are compared in
// constant time.
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "server/endpoints.h"
#include "server/http_front.h"
#include "server/server.h"
#include "server/transport.h"
#include "server/web_assets.h"

namespace sluice::server {
namespace {

using Handler = void (*)(ServerContext&, const HttpRequest&, HttpResponse&);

struct Route {
    const char* method;
    const char* path;  // exact, "*.asset" for the web page's embedded files, or "PREFIX/*" (a non-empty rest)
    Handler handler;
    bool blocking;  // may wait for a session or take long: runs on its own thread
};

const Route kRoutes[] = {
    {"POST", "/v1/chat/completions", handle_chat_completions, true},
    {"POST", "/v1/completions", handle_completions, true},
    {"POST", "/v1/responses", handle_responses, true},
    {"GET", "/v1/responses/*", handle_stored_response, false},
    {"DELETE", "/v1/responses/*", handle_stored_response, false},
    {"POST", "/v1/messages", handle_anthropic_messages, true},
    {"GET", "/v1/models", handle_models, false},
    {"GET", "/v1/models/*", handle_model, false},
    {"GET", "/props", handle_props, false},
    {"GET", "/slots", handle_slots, false},
    {"POST", "/api/chat", handle_ollama_chat, true},
    {"POST", "/api/generate", handle_ollama_generate, true},
    {"GET", "/api/tags", handle_ollama_tags, false},
    {"GET", "/api/ps", handle_ollama_ps, false},
    {"POST", "/api/show", handle_ollama_show, false},
    {"GET", "/api/version", handle_ollama_version, false},
    {"GET", "/health", handle_health, false},
    {"GET", "/metrics", handle_metrics, false},
    {"POST", "/tokenize", handle_tokenize, true},
    {"POST", "/detokenize", handle_detokenize, true},
    {"GET", "/", handle_web, false},
    {"GET", "*.asset", handle_web, false},
};

constexpr size_t kTrimAfterBodyBytes = 1u << 20;

// A file of the web page: exactly the paths embedded from web/ ("/index.html", "/js/app.js",
// "/vendor/katex/fonts/KaTeX_Main-Regular.woff2"), so no other path escapes the API key.
bool is_asset_path(std::string_view path) {
    return find_web_asset(path) != nullptr;
}

bool path_matches(const Route& r, std::string_view path) {
    const std::string_view pattern(r.path);
    if (pattern == "*.asset") return is_asset_path(path);
    if (pattern.ends_with("/*")) {
        const std::string_view prefix = pattern.substr(0, pattern.size() - 1);  // keeps the '/'
        return path.size() > prefix.size() && path.starts_with(prefix);
    }
    return path == pattern;
}

const Route* find_route(const HttpRequest& req, bool* path_known) {
    *path_known = false;
    for (const Route& r : kRoutes) {
        if (!path_matches(r, req.path)) continue;
        *path_known = true;
        if (req.method == r.method) return &r;
    }
    return nullptr;
}

bool needs_key(const std::string& method, const std::string& path) {
    if (method == "OPTIONS") return false;
    if (path == "/" || path == "/health") return false;
    if (method == "GET" && is_asset_path(path)) return false;
    return true;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (size_t i = 0; i < a.size(); ++i)
        diff |= static_cast<unsigned>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
    return diff == 0 && !b.empty();
}

std::string printable(std::string_view s, size_t max) {
    std::string out;
    for (char c : s.substr(0, max)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
    if (s.size() > max) out += "...";
    return out;
}

}  // namespace

// The application side of the front: routes.cpp's policy over ServerContext.
class RouteService final : public HttpService {
 public:
    explicit RouteService(ServerContext& ctx) : ctx_(ctx) {}

    bool screen(const HttpRequest& req, HttpResponse& res) override {
        ctx_.metrics.requests_total += 1;
        // Compressed request bodies are refused before the body is read: a few hundred KB of
        // gzip expand to hundreds of MB past the body limit.
        if (const std::string enc = req.header("Content-Encoding"); !enc.empty() && enc != "identity") {
            res.close = true;
            return answer(res, ApiError{415,
                                        "compressed request bodies (Content-Encoding: " + printable(enc, 32) +
                                            ") are not accepted; send the body uncompressed",
                                        "invalid_request_error", "", "unsupported_content_encoding"});
        }
        if (req.method == "OPTIONS") {
            if (!ctx_.options.cors_origin.empty()) {
                res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
                res.set_header("Access-Control-Allow-Headers",
                               "Authorization, Content-Type, x-api-key, anthropic-version");
                res.set_header("Access-Control-Max-Age", "600");
            }
            res.status = 204;
            cors(res);
            return true;
        }
        if (!ctx_.options.api_key.empty() && needs_key(req.method, req.path)) {
            // `Authorization: Bearer KEY`, or Anthropic's clients' `x-api-key: KEY`.
            const std::string x_key = req.header("x-api-key");
            const std::string auth = x_key.empty() ? req.header("Authorization") : "Bearer " + x_key;
            const std::string prefix = "Bearer ";
            const bool ok =
                auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
                constant_time_equal(std::string_view(auth).substr(prefix.size()), ctx_.options.api_key);
            if (!ok)
                return answer(res,
                              ApiError{401,
                                       auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'"
                                                    : "incorrect API key provided",
                                       "invalid_request_error", "", "invalid_api_key"});
        }
        bool path_known = false;
        if (find_route(req, &path_known)) return false;
        if (path_known) {
            res.set_header("Allow", allowed_methods(req.path));
            return answer(res, ApiError{405,
                                        "method " + printable(req.method, 16) + " is not allowed on " +
                                            printable(req.path, 200),
                                        "invalid_request_error", "", "method_not_allowed"});
        }
        return answer(
            res, ApiError{404, "unknown route: " + printable(req.method, 16) + " " + printable(req.path, 200),
                          "invalid_request_error", "", "not_found"});
    }

    bool blocking(const HttpRequest& req) const override {
        bool known = false;
        const Route* r = find_route(req, &known);
        return r != nullptr && r->blocking;
    }

    void handle(const HttpRequest& req, HttpResponse& res) override {
        bool known = false;
        const Route* r = find_route(req, &known);
        try {
            r->handler(ctx_, req, res);
        } catch (const std::exception& e) {
            res = HttpResponse{};
            send_error(res, ApiError{500, std::string("internal error: ") + e.what(), "server_error", "",
                                     "internal_error"});
        }
        cors(res);
        // A large body's parse, template and tokeniser scratch is free now; hand it back to the
        // system (glibc keeps freed memory in its per-thread arenas otherwise: 16 rejected 8 MB
        // prompts used to leave 2.4 GB held).
        if (req.body.size() > kTrimAfterBodyBytes) malloc_trim(0);
    }

    void refuse(int status, const std::string& message, const std::string& code, HttpResponse& res) override {
        answer(res,
               ApiError{status, message, status >= 500 ? "server_error" : "invalid_request_error", "", code});
    }

    void answered(const HttpRequest& req, int status) override {
        if (status >= 400) ctx_.metrics.request_errors_total += 1;
        // Successful polls of the status routes (the web page reads /health every 2 s, scrapers
        // /metrics) would bury the requests that matter; their failures are still logged.
        const bool poll = req.method == "GET" && (req.path == "/health" || req.path == "/metrics" ||
                                                  req.path == "/slots" || req.path == "/api/ps");
        if (poll && status < 400) return;
        std::fprintf(stderr, "[serve] %s %s -> %d\n", printable(req.method, 16).c_str(),
                     printable(req.path, 200).c_str(), status);
    }

 private:
    bool answer(HttpResponse& res, const ApiError& e) {
        send_error(res, e);
        cors(res);
        return true;
    }

    void cors(HttpResponse& res) const {
        if (ctx_.options.cors_origin.empty()) return;
        res.set_header("Access-Control-Allow-Origin", ctx_.options.cors_origin);
        res.set_header("Vary", "Origin");
    }

    static std::string allowed_methods(const std::string& path) {
        std::string out;
        for (const Route& r : kRoutes)
            if (path_matches(r, path) && out.find(r.method) == std::string::npos)
                out += (out.empty() ? "" : ", ") + std::string(r.method);
        return out + ", OPTIONS";
    }

    ServerContext& ctx_;
};

std::string ServerContext::new_id(const char* prefix) {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx%04llx", static_cast<unsigned long long>(rng()),
                  static_cast<unsigned long long>(next_request_id++ & 0xffff));
    return std::string(prefix) + buf;
}

Server::Server(std::shared_ptr<Engine> engine, ServerOptions options, std::shared_ptr<Engine> draft)
    : ctx_(std::make_unique<ServerContext>()) {
    ServerContext& ctx = *ctx_;
    ctx.engine = std::move(engine);
    ctx.tokenizer = ctx.engine->tokenizer();
    ctx.chat_template = ctx.engine->chat_template();
    if (ctx.chat_template) ctx.tool_call_style = tool_call_style(*ctx.chat_template);
    if (ctx.tokenizer) {
        // A forced harmony call's grammar writes its header's <|channel|> and <|message|> (tool_calls.h).
        std::vector<int32_t> markup;
        if (ctx.tool_call_style.form == ToolCallForm::kHarmony)
            for (std::string_view tag : {"<|channel|>", "<|message|>"})
                if (auto id = ctx.tokenizer->token_id(tag)) markup.push_back(*id);
        ctx.token_trie = TokenTrie::from_tokenizer(*ctx.tokenizer, markup);
        for (int32_t id = 0; id < ctx.tokenizer->vocab_size(); ++id)
            ctx.max_token_bytes = std::max(ctx.max_token_bytes, ctx.tokenizer->token_bytes(id).size());
    }
    ctx.options = std::move(options);
    ctx.draft = std::move(draft);
    ctx.pool = std::make_unique<SessionPool>(ctx.engine, ctx.options.parallel, ctx.draft);
    ctx.created_unix_s = static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());

    service_ = std::make_unique<RouteService>(ctx);
    const ServerOptions& o = ctx.options;
    FrontLimits limits;
    limits.body_bytes = o.max_body_bytes;
    limits.header_timeout = std::chrono::milliseconds(o.header_timeout_ms);
    limits.body_timeout = std::chrono::milliseconds(o.body_timeout_ms);
    limits.max_connections = o.max_connections;
    limits.max_connections_per_client = o.max_connections_per_client;
    limits.max_blocking = o.max_requests;
    limits.max_blocking_per_client = o.max_requests_per_client;
    front_ = std::make_unique<HttpFront>(*service_, limits);
    ctx.front_stats = &front_->stats();
}

Server::~Server() = default;

Status Server::listen() {
    const ServerOptions& o = ctx_->options;
    if (Status s = front_->bind(o.host, o.port); !s.is_ok()) return s;
    std::fprintf(stderr, "[serve] listening on http://%s:%d (model '%s', %d parallel, %zu connections)\n",
                 o.host.c_str(), o.port, o.model_id.c_str(), o.parallel, front_->limits().max_connections);
    std::fflush(stderr);
    front_->run();
    return Status::ok();
}

void Server::stop() {
    front_->stop();
}

void Server::cancel_generations() {
    ctx_->pool->cancel_all();
}

}  // namespace sluice::server
