// The route table and the cross-cutting HTTP policy: API-key auth, CORS, body-size limit,
// OpenAI-shaped bodies for errors cpp-httplib raises itself (404 route, 413, 400), exceptions
// turned into 500s, one log line per request, and Server's lifetime.
//
// Auth: with --api-key every route except the web page ("/", its files) and /health requires
// `Authorization: Bearer KEY` (the page asks for the key itself). Keys are compared in
// constant time.
#include <httplib.h>
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "server/endpoints.h"
#include "server/server.h"
#include "server/transport.h"

namespace sluice::server {
namespace {

using Handler = void (*)(ServerContext&, const httplib::Request&, httplib::Response&);

struct Route {
    const char* method;
    const char* pattern;  // cpp-httplib regex
    Handler handler;
    bool needs_key;
};

const Route kRoutes[] = {
    {"POST", "/v1/chat/completions", handle_chat_completions, true},
    {"POST", "/v1/completions", handle_completions, true},
    {"GET", "/v1/models", handle_models, true},
    {"GET", "/health", handle_health, false},
    {"GET", "/metrics", handle_metrics, true},
    {"POST", "/tokenize", handle_tokenize, true},
    {"POST", "/detokenize", handle_detokenize, true},
    {"GET", "/", handle_web, false},
    {"GET", R"(/[A-Za-z0-9_\-]+\.(html|js|css|svg|png))", handle_web, false},
};

constexpr size_t kTrimAfterBodyBytes = 1u << 20;

bool needs_key(const std::string& method, const std::string& path) {
    if (method == "OPTIONS") return false;
    if (path == "/" || path == "/health") return false;
    if (method == "GET" && path.find('/', 1) == std::string::npos && path.find('.') != std::string::npos)
        return false;
    return true;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
    unsigned diff = a.size() == b.size() ? 0u : 1u;
    for (size_t i = 0; i < a.size(); ++i)
        diff |= static_cast<unsigned>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
    return diff == 0 && !b.empty();
}

const char* status_message(int status) {
    switch (status) {
        case 400: return "the request could not be parsed";
        case 404: return "unknown route";
        case 405: return "method not allowed";
        case 413: return "the request body is too large";
        case 414: return "the request URI is too long";
        default: return "request failed";
    }
}

}  // namespace

std::string ServerContext::new_id(const char* prefix) {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx%04llx", static_cast<unsigned long long>(rng()),
                  static_cast<unsigned long long>(next_request_id++ & 0xffff));
    return std::string(prefix) + buf;
}

Server::Server(std::shared_ptr<Engine> engine, ServerOptions options)
    : ctx_(std::make_unique<ServerContext>()) {
    ServerContext& ctx = *ctx_;
    ctx.engine = std::move(engine);
    ctx.tokenizer = ctx.engine->tokenizer();
    ctx.chat_template = ctx.engine->chat_template();
    if (ctx.tokenizer) {
        ctx.token_trie = TokenTrie::from_tokenizer(*ctx.tokenizer);
        for (int32_t id = 0; id < ctx.tokenizer->vocab_size(); ++id)
            ctx.max_token_bytes = std::max(ctx.max_token_bytes, ctx.tokenizer->token_bytes(id).size());
    }
    ctx.options = std::move(options);
    ctx.pool = std::make_unique<SessionPool>(ctx.engine, ctx.options.parallel);
    ctx.created_unix_s = static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());

    http_ = std::make_unique<httplib::Server>();
    httplib::Server& http = *http_;
    // Queued requests hold a worker while they wait for a session; keep enough workers that
    // /health, /metrics and queued requests never starve each other.
    const size_t workers = static_cast<size_t>(std::max(16, ctx.options.parallel * 4 + 8));
    http.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
    http.set_payload_max_length(ctx.options.max_body_bytes);
    http.set_read_timeout(30);
    http.set_write_timeout(30);
    // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, with which a second
    // `sluice serve` on the same port starts too and the kernel splits the traffic between them.
    http.set_socket_options([](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });

    http.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
        ctx.metrics.requests_total += 1;
        if (!ctx.options.cors_origin.empty()) {
            res.set_header("Access-Control-Allow-Origin", ctx.options.cors_origin);
            res.set_header("Vary", "Origin");
        }
        // Compressed request bodies are refused before the body is read: a few hundred KB of
        // gzip expand to hundreds of MB past the body limit. The unread body ends the connection.
        if (const std::string enc = req.get_header_value("Content-Encoding");
            !enc.empty() && enc != "identity") {
            res.set_header("Connection", "close");
            send_error(res, ApiError{415,
                                     "compressed request bodies (Content-Encoding: " + enc.substr(0, 32) +
                                         ") are not accepted; send the body uncompressed",
                                     "invalid_request_error", "", "unsupported_content_encoding"});
            return httplib::Server::HandlerResponse::Handled;
        }
        if (!ctx.options.api_key.empty() && needs_key(req.method, req.path)) {
            const std::string auth = req.get_header_value("Authorization");
            const std::string prefix = "Bearer ";
            const bool ok =
                auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
                constant_time_equal(std::string_view(auth).substr(prefix.size()), ctx.options.api_key);
            if (!ok) {
                send_error(res, ApiError{401,
                                         auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'"
                                                      : "incorrect API key provided",
                                         "invalid_request_error", "", "invalid_api_key"});
                return httplib::Server::HandlerResponse::Handled;
            }
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });

    for (const Route& r : kRoutes) {
        auto fn = [&ctx, h = r.handler](const httplib::Request& req, httplib::Response& res) {
            h(ctx, req, res);
            // A large body's parse, template and tokeniser scratch is free now; hand it back to
            // the system (glibc keeps freed memory in its per-thread arenas otherwise: 16 rejected
            // 8 MB prompts used to leave 2.4 GB held).
            if (req.body.size() > kTrimAfterBodyBytes) malloc_trim(0);
        };
        if (std::string_view(r.method) == "GET")
            http.Get(r.pattern, fn);
        else
            http.Post(r.pattern, fn);
    }
    http.Options(".*", [&ctx](const httplib::Request&, httplib::Response& res) {
        if (!ctx.options.cors_origin.empty()) {
            res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
            res.set_header("Access-Control-Max-Age", "600");
        }
        res.status = 204;
    });

    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError{500, "internal error: " + what, "server_error", "", "internal_error"});
    });
    http.set_error_handler(
        httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            std::string message = status_message(res.status);
            if (res.status == 404) message = "unknown route: " + req.method + " " + req.path;
            send_error(res, ApiError{res.status, message,
                                     res.status >= 500 ? "server_error" : "invalid_request_error", "",
                                     res.status == 413 ? "request_too_large" : ""});
            return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_logger([&ctx](const httplib::Request& req, const httplib::Response& res) {
        if (res.status >= 400) ctx.metrics.request_errors_total += 1;
        std::fprintf(stderr, "[serve] %s %s -> %d\n", req.method.c_str(), req.path.c_str(), res.status);
    });
}

Server::~Server() = default;

Status Server::listen() {
    const ServerOptions& o = ctx_->options;
    if (!http_->bind_to_port(o.host, o.port))
        return error(ErrorCode::kIo, "[serve] cannot listen on " + o.host + ":" + std::to_string(o.port) +
                                         " (address in use or not available)");
    std::fprintf(stderr, "[serve] listening on http://%s:%d (model '%s', %d parallel)\n", o.host.c_str(),
                 o.port, o.model_id.c_str(), o.parallel);
    std::fflush(stderr);
    if (!http_->listen_after_bind())
        return error(ErrorCode::kIo, "[serve] the listener stopped with an error");
    return Status::ok();
}

void Server::stop() {
    http_->stop();
}

void Server::cancel_generations() {
    ctx_->pool->cancel_all();
}

}  // namespace sluice::server
