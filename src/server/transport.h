// HTTP helpers over cpp-httplib: JSON and error responses, and SseWriter, the one place a
// streaming response writes to the socket.
//
// SseWriter serialises writes with a mutex because two threads write to one stream: the request
// thread (tokens) and its KeepAlive thread (comment lines while queued or prefilling). A failed
// write (client gone) latches ok() = false; generation then stops at the next token.
#pragma once

#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "server/api.h"
#include "sluice/session.h"

namespace sluice::server {

void send_json(httplib::Response& res, const nlohmann::json& body, int status = 200);
void send_error(httplib::Response& res, const ApiError& error);

// A response whose body is produced while it is sent: chunked for HTTP/1.1 clients; for HTTP/1.0
// clients (which cannot parse chunked framing) the body is written as is and the connection
// closed at its end. `provider` follows cpp-httplib's contract (write to the sink, call done()).
void set_streamed_content(const httplib::Request& req, httplib::Response& res, const char* content_type,
                          httplib::ContentProviderWithoutLength provider);

class SseWriter {
 public:
    explicit SseWriter(httplib::DataSink& sink) : sink_(sink) {}
    bool write(std::string_view bytes);
    bool event(const nlohmann::json& payload);
    bool ok() const { return ok_.load(); }

 private:
    httplib::DataSink& sink_;
    std::mutex mutex_;
    std::atomic<bool> ok_{true};
};

// Writes `beat` (default `: keep-alive`) every interval until first_token() or destruction; if
// the write fails it cancels the attached session so an abandoned prefill or decode stops early.
class KeepAlive {
 public:
    KeepAlive(SseWriter& writer, int interval_ms, std::string beat = ": keep-alive\n\n");
    ~KeepAlive();
    void attach(Session* session);
    void first_token();

 private:
    SseWriter& writer_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool stop_ = false;
    Session* session_ = nullptr;
    std::thread thread_;
};

// A non-streaming JSON response that may take long (a generation). It is sent chunked: while
// `produce` runs, a space is written every interval — leading whitespace is valid JSON — so a
// client that went away is noticed (the write fails) and its generation cancelled, as for streams.
// The status is 200 once started: validation errors must be answered before calling this; a
// failure inside `produce` is returned as an error object in the body.
// Content-Type carries a charset so cpp-httplib does not gzip it (its compressor would hold the
// beats back and no write would ever fail).
void respond_json_long(const httplib::Request& req, httplib::Response& res, int interval_ms,
                       std::function<nlohmann::json(SseWriter& writer, KeepAlive& beat)> produce);

}  // namespace sluice::server
