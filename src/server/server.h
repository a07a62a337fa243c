// `sluice serve`: an OpenAI-compatible HTTP server over one Engine (public API only).
//
// Layers: http_front.h (the event-driven HTTP/1.1 front: sockets, parsing, deadlines, limits),
// http.h (the request/response types handlers see), transport.h (JSON/SSE responses), api.h
// (request types and validation), output_parser.h (reasoning / tool-call split), session_pool.h
// (concurrency and prefix affinity), generation.h (one request's generation on a pooled session),
// endpoint_*.cpp (one file per endpoint), routes.cpp (the route table, auth, CORS).
//
// Lifetime: Server owns the ServerContext that every handler borrows; listen() blocks until
// stop() (any thread, e.g. a signal watcher) and every request in flight is answered.
// Threading: the front's IO thread serves /health, /metrics, /v1/models and the web page itself;
// generation and tokenizer routes run on a thread each. Handlers share the context, whose mutable
// parts are atomics or guarded by their own mutexes.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "server/session_pool.h"
#include "server/tool_calls.h"
#include "sluice/chat_template.h"
#include "sluice/constrain.h"
#include "sluice/engine.h"
#include "sluice/status.h"
#include "sluice/tokenizer.h"

namespace sluice::server {

class HttpFront;
class HttpService;
struct FrontStats;

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string api_key;      // empty: no auth
    std::string cors_origin;  // empty: no CORS headers
    int parallel = 1;         // sessions generating at once
    std::string model_id;     // the name clients pass as "model"
    // A request naming another model: 404 model_not_found; false (default) serves it with model_id.
    bool strict_model_name = false;
    size_t max_body_bytes = 8u << 20;
    int keep_alive_ms = 2000;                 // SSE comment interval while queued or prefilling
    int header_timeout_ms = 10'000;           // a request's whole header, and idle keep-alive
    int body_timeout_ms = 60'000;             // a request's whole body
    size_t max_connections = 1024;            // open at once; more are answered 503
    size_t max_connections_per_client = 256;  // from one address
    size_t max_requests = 256;                // generation/tokenizer requests in flight (429 past it)
    size_t max_requests_per_client = 64;      // of those, from one address (429 past it)
    // Speculative decoding, with a draft model given to Server: the defaults a request's
    // "speculative" field overrides. draft is ignored (each pooled session has its own).
    SpeculativeOptions speculative;
};

// Counters for /metrics (Prometheus) and /health.
struct Metrics {
    std::atomic<uint64_t> requests_total{0};
    std::atomic<uint64_t> request_errors_total{0};  // 4xx/5xx responses
    std::atomic<uint64_t> generations_total{0};
    std::atomic<uint64_t> generation_errors_total{0};  // engine failures (500 / an error event)
    std::atomic<uint64_t> prompt_tokens_total{0};
    std::atomic<uint64_t> prefilled_tokens_total{0};
    std::atomic<uint64_t> generated_tokens_total{0};
    std::mutex mutex;  // guards the doubles below
    double prefill_seconds_total = 0, decode_seconds_total = 0;
    double last_prefill_tok_s = 0, last_decode_tok_s = 0;
    std::atomic<uint64_t> draft_tokens_total{0};     // speculative proposals
    std::atomic<uint64_t> accepted_tokens_total{0};  // of those, kept
};

struct ServerContext {
    std::shared_ptr<Engine> engine;
    std::shared_ptr<const Tokenizer> tokenizer;         // may be null (token-id endpoints only)
    std::shared_ptr<const ChatTemplate> chat_template;  // may be null (no chat endpoint)
    std::shared_ptr<const TokenTrie> token_trie;        // the vocabulary for constrained decoding
    ToolCallStyle tool_call_style;                      // how the template prints tool calls
    ServerOptions options;
    std::unique_ptr<SessionPool> pool;
    std::shared_ptr<Engine> draft;  // speculative decoding's draft model, or null
    Metrics metrics;
    std::atomic<uint64_t> next_request_id{1};
    int64_t created_unix_s = 0;
    std::string new_id(const char* prefix);  // "chatcmpl-<hex>"
    // The longest token's bytes: a text of more than context × this many bytes cannot fit the
    // context, which is checked before tokenising it (an 8 MB prompt is refused in microseconds).
    size_t max_token_bytes = 0;
    const FrontStats* front_stats = nullptr;  // connections, refusals, timeouts (for /metrics)
};

class Server {
 public:
    // `draft`: a draft model for speculative decoding (same vocabulary), or null.
    Server(std::shared_ptr<Engine> engine, ServerOptions options, std::shared_ptr<Engine> draft = nullptr);
    ~Server();
    // Binds and serves until stop(). Returns an error when the address cannot be bound.
    Status listen();
    void stop();
    // Shutdown past its drain deadline: queued requests leave and running generations are
    // cancelled, so listen() returns within a token's time. Safe to call repeatedly, any thread.
    void cancel_generations();
    ServerContext& context() { return *ctx_; }

 private:
    std::unique_ptr<ServerContext> ctx_;
    std::unique_ptr<HttpService> service_;
    std::unique_ptr<HttpFront> front_;
};

}  // namespace sluice::server
