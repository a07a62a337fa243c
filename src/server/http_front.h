// The server's HTTP/1.1 front: one event-driven IO thread (Boost.Asio) owns every socket and parses
// requests with Boost.Beast's parser, so a slow, idle or hostile client costs a little memory and
// never a thread; handlers that may block (generations) run on a thread of their own.
//
// What it enforces, each from FrontLimits:
// - a deadline for a request's whole header (slow-header clients are dropped) and one for its
//   body; a header size limit (431) and a field-count limit (431); a body limit (413, from
//   Content-Length before reading, or while reading a chunked body);
// - connections bounded overall and per client address: the excess is answered 503 at once and
//   closed; the listen backlog is SOMAXCONN;
// - blocking handlers bounded (429 server_busy past max_blocking, or past
//   max_blocking_per_client from one address);
// - a write-stall timeout: a client that stops reading is dropped and its producer unblocked;
// - disconnects noticed at once: while a response is being made the front keeps a read outstanding
//   on the socket, so a client's close or reset fires its Client::on_disconnect hook whether or not
//   any output was produced yet. Bytes read meanwhile are kept as the start of the next request.
//
// Rejected alternatives: cpp-httplib 0.11, which this replaces (a worker thread per connection,
// blocked in per-read timeouts: 20 clients sending a header byte every 3 s stopped every route,
// measured in issue 20); libmicrohttpd (its connection timeout counts inactivity, so such a header
// never times out, and it has no per-header deadline to set).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "server/http.h"
#include "sluice/status.h"

namespace sluice::server {

struct FrontLimits {
    size_t header_bytes = 32 << 10;  // request line + fields
    size_t header_fields = 100;
    size_t body_bytes = 8u << 20;
    std::chrono::milliseconds header_timeout{10'000};  // from connection start / previous response
    std::chrono::milliseconds body_timeout{60'000};    // from the end of the header
    std::chrono::milliseconds write_timeout{30'000};   // longest wait for the client to take bytes
    size_t max_connections = 1024;
    size_t max_connections_per_client = 256;
    size_t max_blocking = 256;            // handlers running on their own threads
    size_t max_blocking_per_client = 64;  // of those, from one address
};

// What the front asks of the application (routes.cpp implements it).
class HttpService {
 public:
    virtual ~HttpService() = default;
    // On the IO thread once the header is read, before the body: true answers the request with
    // `res` now (auth failures, unknown routes, refused encodings); its body is then not read.
    virtual bool screen(const HttpRequest& req, HttpResponse& res) = 0;
    // Whether handle() may block; such requests run on their own thread, the rest on the IO thread
    // (which must stay microseconds-fast: /health, /metrics, the web page).
    virtual bool blocking(const HttpRequest& req) const = 0;
    // A streamed response (res.stream) is only allowed from a blocking handler.
    virtual void handle(const HttpRequest& req, HttpResponse& res) = 0;
    // The response for an error the front answers itself (400, 413, 429, 431, 500, 503); `code` is a
    // short machine-readable name ("request_header_too_large").
    virtual void refuse(int status, const std::string& message, const std::string& code,
                        HttpResponse& res) = 0;
    // Every answered request, the front's own errors included.
    virtual void answered(const HttpRequest& req, int status) = 0;
};

struct FrontStats {
    std::atomic<int64_t> connections_open{0};
    std::atomic<uint64_t> connections_total{0};
    std::atomic<uint64_t> connections_refused_total{0};  // over a connection limit
    std::atomic<uint64_t> timeouts_total{0};             // header, body or write deadline passed
    std::atomic<int64_t> blocking_running{0};
};

class HttpFront {
 public:
    HttpFront(HttpService& service, FrontLimits limits);
    ~HttpFront();
    // Binds host:port (SO_REUSEADDR, never SO_REUSEPORT). Fails naming the address.
    Status bind(const std::string& host, int port);
    // Serves on the calling thread until stop() and every request in flight is answered.
    void run();
    // Any thread: stop accepting, close idle connections, let requests in flight finish.
    void stop();
    const FrontStats& stats() const;
    const FrontLimits& limits() const;

    struct Impl;  // defined in http_front.cpp, shared with its connections

 private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::server
