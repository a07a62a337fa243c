// Response helpers (see transport.h).
#include "server/transport.h"

#include "server/sse.h"

namespace sluice::server {

void send_json(HttpResponse& res, const nlohmann::json& body, int status) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void send_error(HttpResponse& res, const ApiError& error) {
    send_json(res, error.to_json(), error.http_status);
}

bool SseWriter::write(std::string_view bytes) {
    std::lock_guard lock(mutex_);
    if (!ok_) return false;
    if (!sink_.write(bytes)) ok_ = false;
    return ok_;
}

bool SseWriter::event(const nlohmann::json& payload) {
    return write(sse_event(payload));
}

KeepAlive::KeepAlive(SseWriter& writer, int interval_ms, std::string beat) : writer_(writer) {
    thread_ = std::thread([this, interval_ms, beat = std::move(beat)] {
        std::unique_lock lock(mutex_);
        while (!stop_) {
            if (cv_.wait_for(lock, std::chrono::milliseconds(interval_ms), [this] { return stop_; })) break;
            if (!writer_.write(beat)) break;
        }
    });
}

KeepAlive::~KeepAlive() {
    first_token();
    thread_.join();
}

void KeepAlive::first_token() {
    {
        std::lock_guard lock(mutex_);
        if (stop_) return;
        stop_ = true;
    }
    cv_.notify_all();
}

}  // namespace sluice::server
