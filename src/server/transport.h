// Response helpers over the server's HTTP vocabulary (http.h): JSON and error bodies, and
// SseWriter, the one place a streaming response writes its body.
//
// SseWriter serialises writes with a mutex because two threads write to one stream: the request
// thread (tokens) and its KeepAlive thread (comment lines while queued or prefilling). A failed
// write (client gone) latches ok() = false; generation then stops at the next token. Cancelling a
// generation whose client left is not done here but by the front's disconnect hook
// (Client::on_disconnect, installed by run_generation), which fires whether or not a byte was
// written.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "server/api.h"
#include "server/http.h"

namespace sluice::server {

void send_json(HttpResponse& res, const nlohmann::json& body, int status = 200);
void send_error(HttpResponse& res, const ApiError& error);

class SseWriter {
 public:
    explicit SseWriter(BodySink& sink) : sink_(sink) {}
    bool write(std::string_view bytes);
    bool event(const nlohmann::json& payload);
    bool ok() const { return ok_.load(); }

 private:
    BodySink& sink_;
    std::mutex mutex_;
    std::atomic<bool> ok_{true};
};

// Writes `beat` (default `: keep-alive`) every interval until first_token() or destruction, so
// proxies and clients with idle timeouts keep a stream open while it is queued or prefilling.
class KeepAlive {
 public:
    KeepAlive(SseWriter& writer, int interval_ms, std::string beat = ": keep-alive\n\n");
    ~KeepAlive();
    void first_token();

 private:
    SseWriter& writer_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace sluice::server
