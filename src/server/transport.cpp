// HTTP/SSE helpers (see transport.h).
#include "server/transport.h"

#include "server/sse.h"

namespace sluice::server {

void send_json(httplib::Response& res, const nlohmann::json& body, int status) {
    res.status = status;
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
    send_json(res, error.to_json(), error.http_status);
}

void set_streamed_content(const httplib::Request& req, httplib::Response& res, const char* content_type,
                          httplib::ContentProviderWithoutLength provider) {
    if (req.version == "HTTP/1.0")
        res.set_content_provider(content_type, std::move(provider));
    else
        res.set_chunked_content_provider(content_type, std::move(provider));
}

bool SseWriter::write(std::string_view bytes) {
    std::lock_guard lock(mutex_);
    if (!ok_) return false;
    if (!sink_.write(bytes.data(), bytes.size())) ok_ = false;
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
            if (!writer_.write(beat) && session_) session_->cancel();
        }
    });
}

KeepAlive::~KeepAlive() {
    first_token();
    thread_.join();
}

void KeepAlive::attach(Session* session) {
    std::lock_guard lock(mutex_);
    session_ = session;
}

void KeepAlive::first_token() {
    {
        std::lock_guard lock(mutex_);
        if (stop_) return;
        stop_ = true;
        session_ = nullptr;
    }
    cv_.notify_all();
}

void respond_json_long(const httplib::Request& req, httplib::Response& res, int interval_ms,
                       std::function<nlohmann::json(SseWriter& writer, KeepAlive& beat)> produce) {
    set_streamed_content(
        req, res, "application/json; charset=utf-8",
        [interval_ms, produce = std::move(produce)](size_t, httplib::DataSink& sink) {
            SseWriter writer(sink);
            nlohmann::json body;
            {
                KeepAlive beat(writer, interval_ms, " ");
                body = produce(writer, beat);
            }
            writer.write(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
            sink.done();
            return true;
        });
}

}  // namespace sluice::server
