// The event-driven HTTP front (see http_front.h).
//
// One io_context, run by the thread that calls run(), owns every socket, timer and parser; nothing
// else touches them. A blocking handler's thread talks to its connection only through
// Connection::send() / end_response(), which post to the IO thread, and through the mutex-guarded
// part of Connection (the client-gone flag, its hook, the bytes queued but not yet written).
//
// A connection's life: kHeader (deadline: header_timeout) -> kBody (deadline: body_timeout) ->
// kResponding (no deadline; a read stays outstanding to notice the client leaving; writes have a
// stall deadline) -> kHeader again for keep-alive, or kLingering (our side shut, the client's
// remaining bytes drained for a moment so a close does not reset the reply) -> closed.
#include "server/http_front.h"

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

namespace sluice::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr size_t kHighWater = 1u << 20;   // a producer waits while this much is unwritten
constexpr size_t kReadChunk = 16u << 10;  // one read of the disconnect watch
// Drained from a client after our side closes (bounded by kLingerTime as well): enough for a
// client still sending a refused body of several times the default 8 MiB limit to finish
// writing and read the 413, instead of taking a reset mid-upload (EPIPE) and never seeing it.
constexpr size_t kLingerBytes = 64u << 20;
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);

const char* reason_phrase(int status) {
    switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 204: return "No Content";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 403: return "Forbidden";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 413: return "Payload Too Large";
        case 415: return "Unsupported Media Type";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        default: return status < 400 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
    }
}

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

enum class Framing { kLength, kChunked, kUntilClose };

// The status line and headers. The application's headers come last but cannot override framing.
std::string head_bytes(const HttpResponse& res, int version, Framing framing, bool close) {
    std::string h;
    h.reserve(256);
    h += version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
    h += std::to_string(res.status);
    h += ' ';
    h += reason_phrase(res.status);
    h += "\r\nServer: sluice\r\n";
    if (res.status != 204 && res.status != 304) {
        h += "Content-Type: " + res.content_type + "\r\n";
        if (framing == Framing::kLength) h += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
        if (framing == Framing::kChunked) h += "Transfer-Encoding: chunked\r\n";
    }
    if (close)
        h += "Connection: close\r\n";
    else if (version == 10)
        h += "Connection: keep-alive\r\n";
    for (const auto& [name, value] : res.headers) {
        if (iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") ||
            iequals(name, "Connection"))
            continue;
        h += name + ": " + value + "\r\n";
    }
    h += "\r\n";
    return h;
}

bool is_parse_error(const error_code& ec) {
    static const auto& category = bhttp::make_error_code(bhttp::error::bad_target).category();
    return ec.category() == category && ec != bhttp::error::end_of_stream &&
           ec != bhttp::error::partial_message;
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
    for (const auto& [k, v] : headers)
        if (iequals(k, name)) return v;
    return {};
}

bool HttpRequest::has_header(std::string_view name) const {
    return std::any_of(headers.begin(), headers.end(),
                       [&](const auto& kv) { return iequals(kv.first, name); });
}

void HttpResponse::set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
}

void HttpResponse::set_content(std::string bytes, std::string type) {
    body = std::move(bytes);
    content_type = std::move(type);
}

void HttpResponse::set_stream(std::string type, std::function<void(BodySink&)> producer) {
    content_type = std::move(type);
    stream = std::move(producer);
}

class Connection;

struct HttpFront::Impl {
    Impl(HttpService& s, FrontLimits l) : service(s), limits(l), acceptor(io), retry(io) {}

    void accept();
    void on_accepted(tcp::socket socket);
    void unregister(Connection* c, const std::string& remote);
    void stop_on_io();
    void worker_done(const std::string& remote);

    HttpService& service;
    FrontLimits limits;
    FrontStats stats;
    asio::io_context io{1};
    tcp::acceptor acceptor;
    asio::steady_timer retry;
    bool stopping = false;                                                   // IO thread
    std::unordered_map<Connection*, std::weak_ptr<Connection>> connections;  // IO thread
    std::unordered_map<std::string, size_t> per_client;                      // IO thread
    std::mutex workers_mutex;
    std::condition_variable workers_cv;
    int64_t workers = 0;
    std::unordered_map<std::string, size_t> workers_by_client;  // under workers_mutex
};

class Connection final : public Client, public std::enable_shared_from_this<Connection> {
 public:
    Connection(HttpFront::Impl& front, tcp::socket socket, std::string remote)
        : front_(front),
          socket_(std::move(socket)),
          remote_(std::move(remote)),
          buffer_(front.limits.header_bytes + kReadChunk),
          deadline_(front.io),
          write_timer_(front.io) {}

    // ---- Client (any thread) ----
    bool connected() const override {
        std::lock_guard lock(mutex_);
        return !gone_;
    }
    void on_disconnect(std::function<void()> fn) override {
        std::unique_lock lock(mutex_);
        if (gone_) {
            lock.unlock();
            if (fn) fn();
            return;
        }
        on_gone_ = std::move(fn);
    }

    // ---- IO thread ----
    void start() {
        arm_deadline(front_.limits.header_timeout);
        read_header();
    }
    // The front is stopping: a connection between requests closes now; one with a request in
    // flight closes after its response.
    void on_stop() {
        close_after_ = true;
        if (phase_ == Phase::kHeader) close_now();
    }
    const std::string& remote() const { return remote_; }

    // ---- a blocking handler's thread ----
    // Queues bytes for the client; waits while more than kHighWater are unwritten. False once the
    // client is gone.
    bool send(std::string bytes) {
        std::unique_lock lock(mutex_);
        if (gone_) return false;
        queued_ += bytes.size();
        lock.unlock();
        asio::post(front_.io, [self = shared_from_this(), b = std::move(bytes)]() mutable {
            self->append(std::move(b));
        });
        lock.lock();
        cv_.wait(lock, [&] { return gone_ || queued_ <= kHighWater; });
        return !gone_;
    }
    // The response is complete (every byte handed to send()).
    void end_response(int status, bool close) {
        asio::post(front_.io,
                   [self = shared_from_this(), status, close] { self->response_ended(status, close); });
    }

 private:
    enum class Phase { kHeader, kBody, kResponding, kLingering, kClosed };

    // ---- reading ----
    void read_header() {
        phase_ = Phase::kHeader;
        if (front_.stopping && buffer_.size() == 0) return close_now();
        parser_.emplace();
        parser_->header_limit(static_cast<std::uint32_t>(front_.limits.header_bytes));
        parser_->body_limit(front_.limits.body_bytes);
        reading_ = true;
        bhttp::async_read_header(socket_, buffer_, *parser_,
                                 [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
    }

    void on_header(error_code ec) {
        reading_ = false;
        if (phase_ == Phase::kClosed) return;
        if (ec) {
            if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow)
                return refuse(431,
                              "the request header is larger than " +
                                  std::to_string(front_.limits.header_bytes) + " bytes",
                              "request_header_too_large");
            if (ec == bhttp::error::body_limit) return refuse_too_large();
            if (is_parse_error(ec))
                return refuse(400, "malformed HTTP request: " + ec.message(), "bad_request");
            return close_now();  // the client left, or the deadline closed the socket
        }
        const auto& msg = parser_->get();
        req_ = std::make_shared<HttpRequest>();
        HttpRequest& r = *req_;
        r.method = std::string(msg.method_string());
        head_only_ = r.method == "HEAD";
        if (head_only_) r.method = "GET";
        const std::string_view target(msg.target().data(), msg.target().size());
        const size_t q = target.find('?');
        r.path = std::string(target.substr(0, q));
        if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
        r.version = msg.version() == 10 ? 10 : 11;
        r.remote = remote_;
        for (const auto& field : msg) {
            if (r.headers.size() == front_.limits.header_fields)
                return refuse(431,
                              "the request has more than " + std::to_string(front_.limits.header_fields) +
                                  " header fields",
                              "too_many_header_fields");
            r.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
        }
        r.client = shared_from_this();
        close_after_ = close_after_ || !parser_->keep_alive() || r.version == 10;

        HttpResponse res;
        if (front_.service.screen(r, res)) {
            if (!parser_->is_done()) close_after_ = true;  // its body stays unread
            return respond_now(std::move(res));
        }
        if (parser_->is_done()) return dispatch();
        if (r.version == 11 && iequals(r.header("Expect"), "100-continue"))
            append("HTTP/1.1 100 Continue\r\n\r\n", /*count=*/true);
        phase_ = Phase::kBody;
        arm_deadline(front_.limits.body_timeout);
        reading_ = true;
        bhttp::async_read(socket_, buffer_, *parser_,
                          [self = shared_from_this()](error_code e, size_t) { self->on_body(e); });
    }

    void on_body(error_code ec) {
        reading_ = false;
        if (phase_ == Phase::kClosed) return;
        if (ec) {
            if (ec == bhttp::error::body_limit) return refuse_too_large();
            if (is_parse_error(ec))
                return refuse(400, "malformed request body: " + ec.message(), "bad_request");
            return close_now();
        }
        req_->body = std::move(parser_->get().body());
        dispatch();
    }

    // While a response is made: a read outstanding so a close or reset is seen at once. What it
    // reads is the start of the client's next request.
    void watch() {
        if (reading_ || phase_ == Phase::kClosed || phase_ == Phase::kLingering) return;
        const size_t room = buffer_.max_size() - buffer_.size();
        if (room == 0) return;  // a client pipelining this much waits for its turn
        reading_ = true;
        socket_.async_read_some(
            buffer_.prepare(std::min(room, kReadChunk)),
            [self = shared_from_this()](error_code ec, size_t n) { self->on_watch(ec, n); });
    }

    void on_watch(error_code ec, size_t n) {
        reading_ = false;
        if (phase_ == Phase::kClosed) return;
        if (phase_ == Phase::kLingering) {  // the reply is out: this read is now the drain
            drained_ += n;
            return ec || drained_ > kLingerBytes ? close_now() : drain();
        }
        // Cancelled by finish_response: the next request is already buffered.
        if (ec == asio::error::operation_aborted && phase_ == Phase::kHeader) return read_header();
        if (ec) return close_now();  // EOF or reset: the client is gone
        buffer_.commit(n);
        if (phase_ == Phase::kResponding) return watch();
        read_header();  // the response ended meanwhile: this is the next request
    }

    // ---- answering ----
    void dispatch() {
        phase_ = Phase::kResponding;
        disarm_deadline();
        response_done_ = false;
        watch();
        HttpService& service = front_.service;
        if (!service.blocking(*req_)) {
            HttpResponse res;
            try {
                service.handle(*req_, res);
                if (res.stream) {
                    res = HttpResponse{};
                    service.refuse(500, "a streamed response from a non-blocking route", "internal_error",
                                   res);
                }
            } catch (const std::exception& e) {
                res = HttpResponse{};
                service.refuse(500, std::string("internal error: ") + e.what(), "internal_error", res);
            }
            return respond_now(std::move(res));
        }
        {
            std::lock_guard lock(front_.workers_mutex);
            const size_t mine =
                front_.workers_by_client.count(remote_) ? front_.workers_by_client[remote_] : 0;
            const bool overall = front_.workers >= static_cast<int64_t>(front_.limits.max_blocking);
            if (overall || mine >= front_.limits.max_blocking_per_client) {
                HttpResponse res;
                service.refuse(429,
                               overall ? "the server is busy (" + std::to_string(front_.limits.max_blocking) +
                                             " requests in flight); retry shortly"
                                       : "too many requests in flight from " + remote_ + " (" +
                                             std::to_string(front_.limits.max_blocking_per_client) +
                                             "); retry when one finishes",
                               overall ? "server_busy" : "too_many_requests", res);
                res.set_header("Retry-After", "1");
                return respond_now(std::move(res));
            }
            front_.workers_by_client[remote_] += 1;
            front_.workers += 1;
            front_.stats.blocking_running = front_.workers;
        }
        const bool chunked = req_->version == 11;
        std::thread([self = shared_from_this(), req = req_, chunked, head_only = head_only_,
                     closing = close_after_, work = asio::make_work_guard(front_.io)]() mutable {
            HttpFront::Impl& front = self->front_;
            {
                HttpResponse res;  // its body producer may hold the connection: gone before `self`
                try {
                    front.service.handle(*req, res);
                } catch (const std::exception& e) {
                    res = HttpResponse{};
                    front.service.refuse(500, std::string("internal error: ") + e.what(), "internal_error",
                                         res);
                }
                if (!res.stream) {
                    const bool close = res.close || closing;
                    if (head_only) res.body.clear();
                    std::string bytes = head_bytes(res, req->version, Framing::kLength, close);
                    bytes += res.body;
                    self->send(std::move(bytes));
                    self->end_response(res.status, close);
                } else {
                    const bool close = res.close || closing || !chunked;
                    const Framing framing = chunked ? Framing::kChunked : Framing::kUntilClose;
                    if (self->send(head_bytes(res, req->version, framing, close))) {
                        StreamSink sink(*self, chunked);
                        try {
                            res.stream(sink);
                        } catch (const std::exception& e) {
                            std::fprintf(stderr, "[serve] a response stream failed: %s\n", e.what());
                        }
                        if (chunked) self->send("0\r\n\r\n");
                    }
                    self->end_response(res.status, close);
                }
            }
            const std::string self_remote = self->remote_;
            req.reset();
            self.reset();  // the connection dies here if the client left: while the io_context runs
            work.reset();
            front.worker_done(self_remote);
        }).detach();
    }

    class StreamSink final : public BodySink {
     public:
        StreamSink(Connection& c, bool chunked) : c_(c), chunked_(chunked) {}
        bool write(std::string_view bytes) override {
            if (bytes.empty()) return c_.connected();
            if (!chunked_) return c_.send(std::string(bytes));
            char size[24];
            const int n = std::snprintf(size, sizeof size, "%zx\r\n", bytes.size());
            std::string frame;
            frame.reserve(static_cast<size_t>(n) + bytes.size() + 2);
            frame.append(size, static_cast<size_t>(n));
            frame.append(bytes);
            frame += "\r\n";
            return c_.send(std::move(frame));
        }

     private:
        Connection& c_;
        bool chunked_;
    };

    void refuse(int status, const std::string& message, const std::string& code) {
        if (!req_) {
            req_ = std::make_shared<HttpRequest>();
            req_->method = "?";
            req_->path = "?";
        }
        HttpResponse res;
        front_.service.refuse(status, message, code, res);
        close_after_ = true;
        phase_ = Phase::kResponding;
        disarm_deadline();
        respond_now(std::move(res));
    }

    void refuse_too_large() {
        refuse(413, "the request body is larger than " + std::to_string(front_.limits.body_bytes) + " bytes",
               "request_too_large");
    }

    // IO thread: a whole response made here.
    void respond_now(HttpResponse res) {
        phase_ = Phase::kResponding;
        close_after_ = close_after_ || res.close;
        if (head_only_) res.body.clear();
        std::string bytes = head_bytes(res, req_ ? req_->version : 11, Framing::kLength, close_after_);
        bytes += res.body;
        append(std::move(bytes), /*count=*/true);
        response_ended(res.status, false);
    }

    void response_ended(int status, bool close) {
        if (phase_ == Phase::kClosed || phase_ == Phase::kLingering) return;
        status_ = status;
        close_after_ = close_after_ || close;
        response_done_ = true;
        if (!writing_ && out_next_.empty()) finish_response();
    }

    void finish_response() {
        {
            std::lock_guard lock(mutex_);
            on_gone_ = nullptr;
        }
        if (req_) front_.service.answered(*req_, status_);
        req_.reset();
        head_only_ = false;
        response_done_ = false;
        if (close_after_ || front_.stopping) return linger();
        phase_ = Phase::kHeader;
        arm_deadline(front_.limits.header_timeout);
        if (!reading_) return read_header();
        // The watch's completion starts the next request; if its start is already buffered
        // (pipelining) stop waiting for more.
        if (buffer_.size() > 0) {
            error_code ignored;
            socket_.cancel(ignored);
        }
    }

    // ---- writing (IO thread) ----
    void append(std::string bytes, bool count = false) {
        if (phase_ == Phase::kClosed || phase_ == Phase::kLingering) return;
        if (count) {
            std::lock_guard lock(mutex_);
            queued_ += bytes.size();
        }
        out_next_ += bytes;
        if (!writing_) start_write();
    }

    void start_write() {
        out_now_.swap(out_next_);
        out_next_.clear();
        writing_ = true;
        const uint64_t seq = ++write_seq_;
        write_timer_.expires_after(front_.limits.write_timeout);
        write_timer_.async_wait([self = shared_from_this(), seq](error_code ec) {
            if (ec || seq != self->write_seq_ || !self->writing_) return;
            self->front_.stats.timeouts_total += 1;
            self->close_now();  // the client stopped reading
        });
        asio::async_write(socket_, asio::buffer(out_now_),
                          [self = shared_from_this()](error_code ec, size_t n) { self->on_written(ec, n); });
    }

    void on_written(error_code ec, size_t n) {
        writing_ = false;
        ++write_seq_;
        write_timer_.cancel();
        if (phase_ == Phase::kClosed) return;
        if (ec) return close_now();
        {
            std::lock_guard lock(mutex_);
            queued_ -= std::min(queued_, n);
        }
        cv_.notify_all();
        out_now_.clear();
        if (!out_next_.empty()) return start_write();
        if (phase_ == Phase::kLingering) return shutdown_and_drain();
        if (response_done_) finish_response();
    }

    // ---- closing (IO thread) ----
    // Our side is done: shut down sending once the reply is out, then read and drop what the
    // client still sends for a moment, so closing does not reset a reply it has not read yet.
    void linger() {
        phase_ = Phase::kLingering;
        if (!writing_) shutdown_and_drain();
    }

    void shutdown_and_drain() {
        error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_send, ignored);
        arm_deadline(kLingerTime);
        drain();
    }

    void drain() {
        if (reading_) return;  // the watch is outstanding; its completion comes here
        reading_ = true;
        socket_.async_read_some(asio::buffer(drain_buf_),
                                [self = shared_from_this()](error_code ec, size_t n) {
                                    self->reading_ = false;
                                    if (self->phase_ != Phase::kLingering) return;
                                    self->drained_ += n;
                                    if (ec || self->drained_ > kLingerBytes) return self->close_now();
                                    self->drain();
                                });
    }

    void close_now() {
        if (phase_ == Phase::kClosed) return;
        phase_ = Phase::kClosed;
        {
            std::lock_guard lock(mutex_);
            gone_ = true;
            if (on_gone_) {
                on_gone_();  // cancels the session; runs under the lock so on_disconnect() syncs
                on_gone_ = nullptr;
            }
        }
        cv_.notify_all();
        error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_both, ignored);
        socket_.close(ignored);
        deadline_.cancel();
        write_timer_.cancel();
        if (req_) front_.service.answered(*req_, response_done_ ? status_ : 499);  // 499: client left
        req_.reset();
        front_.unregister(this, remote_);
    }

    void arm_deadline(std::chrono::steady_clock::duration d) {
        const uint64_t seq = ++deadline_seq_;
        deadline_.expires_after(d);
        deadline_.async_wait([self = shared_from_this(), seq](error_code ec) {
            if (ec || seq != self->deadline_seq_ || self->phase_ == Phase::kClosed) return;
            if (self->phase_ != Phase::kLingering) self->front_.stats.timeouts_total += 1;
            self->close_now();
        });
    }

    void disarm_deadline() {
        ++deadline_seq_;
        deadline_.cancel();
    }

    HttpFront::Impl& front_;
    tcp::socket socket_;
    std::string remote_;
    beast::flat_buffer buffer_;
    std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
    asio::steady_timer deadline_;
    asio::steady_timer write_timer_;
    uint64_t deadline_seq_ = 0, write_seq_ = 0;
    Phase phase_ = Phase::kHeader;
    bool reading_ = false, writing_ = false, response_done_ = false, close_after_ = false, head_only_ = false;
    int status_ = 0;
    std::string out_now_, out_next_;
    std::array<char, 4096> drain_buf_{};
    size_t drained_ = 0;
    std::shared_ptr<HttpRequest> req_;

    mutable std::mutex mutex_;  // guards the members below
    std::condition_variable cv_;
    bool gone_ = false;
    size_t queued_ = 0;
    std::function<void()> on_gone_;
};

void HttpFront::Impl::accept() {
    acceptor.async_accept([this](error_code ec, tcp::socket socket) {
        if (stopping || !acceptor.is_open()) return;
        if (ec) {
            // Out of descriptors (EMFILE) or a transient error: retry shortly instead of spinning.
            retry.expires_after(kAcceptRetry);
            retry.async_wait([this](error_code e) {
                if (!e && !stopping) accept();
            });
            return;
        }
        on_accepted(std::move(socket));
        accept();
    });
}

void HttpFront::Impl::on_accepted(tcp::socket socket) {
    error_code ec;
    socket.set_option(tcp::no_delay(true), ec);
    const tcp::endpoint peer = socket.remote_endpoint(ec);
    if (ec) return;  // already gone
    std::string remote = peer.address().to_string();
    stats.connections_total += 1;
    size_t& mine = per_client[remote];
    if (connections.size() >= limits.max_connections || mine >= limits.max_connections_per_client) {
        if (mine == 0) per_client.erase(remote);
        stats.connections_refused_total += 1;
        const bool overall = connections.size() >= limits.max_connections;
        HttpResponse res;
        service.refuse(503,
                       overall ? "too many connections to this server (" +
                                     std::to_string(limits.max_connections) + "); retry shortly"
                               : "too many connections from " + remote + " (" +
                                     std::to_string(limits.max_connections_per_client) + "); retry shortly",
                       "too_many_connections", res);
        res.set_header("Retry-After", "1");
        auto s = std::make_shared<tcp::socket>(std::move(socket));
        auto bytes = std::make_shared<std::string>(head_bytes(res, 11, Framing::kLength, true) + res.body);
        asio::async_write(*s, asio::buffer(*bytes), [s, bytes](error_code, size_t) {
            error_code ignored;
            s->shutdown(tcp::socket::shutdown_both, ignored);
            s->close(ignored);
        });
        HttpRequest r;
        r.method = "?";
        r.path = "?";
        r.remote = remote;
        service.answered(r, 503);
        return;
    }
    mine += 1;
    auto c = std::make_shared<Connection>(*this, std::move(socket), remote);
    connections.emplace(c.get(), c);
    stats.connections_open = static_cast<int64_t>(connections.size());
    c->start();
}

void HttpFront::Impl::unregister(Connection* c, const std::string& remote) {
    if (connections.erase(c) == 0) return;
    if (auto it = per_client.find(remote); it != per_client.end() && --it->second == 0) per_client.erase(it);
    stats.connections_open = static_cast<int64_t>(connections.size());
}

void HttpFront::Impl::stop_on_io() {
    if (stopping) return;
    stopping = true;
    error_code ignored;
    acceptor.close(ignored);
    retry.cancel();
    std::vector<std::shared_ptr<Connection>> live;
    for (auto& [raw, weak] : connections)
        if (auto c = weak.lock()) live.push_back(std::move(c));
    for (auto& c : live) c->on_stop();
}

void HttpFront::Impl::worker_done(const std::string& remote) {
    std::lock_guard lock(workers_mutex);
    if (auto it = workers_by_client.find(remote); it != workers_by_client.end() && --it->second == 0)
        workers_by_client.erase(it);
    workers -= 1;
    stats.blocking_running = workers;
    workers_cv.notify_all();
}

HttpFront::HttpFront(HttpService& service, FrontLimits limits)
    : impl_(std::make_unique<Impl>(service, limits)) {
    // Every connection is a descriptor: raise the soft limit to the hard one and keep the
    // connection bound below it (the engine's files and the pipes need some too).
    rlimit nofile{};
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
        if (nofile.rlim_cur < nofile.rlim_max) {
            nofile.rlim_cur = nofile.rlim_max;
            setrlimit(RLIMIT_NOFILE, &nofile);
            getrlimit(RLIMIT_NOFILE, &nofile);
        }
        const size_t room = nofile.rlim_cur > 256 ? static_cast<size_t>(nofile.rlim_cur) - 128
                                                  : static_cast<size_t>(nofile.rlim_cur) / 2;
        impl_->limits.max_connections = std::min(impl_->limits.max_connections, room);
    }
}

HttpFront::~HttpFront() = default;

Status HttpFront::bind(const std::string& host, int port) {
    Impl& f = *impl_;
    const std::string where = host + ":" + std::to_string(port);
    error_code ec;
    tcp::resolver resolver(f.io);
    auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
    if (ec || endpoints.empty())
        return error(ErrorCode::kIo, "[serve] cannot listen on " + where + ": cannot resolve the host (" +
                                         ec.message() + ")");
    const tcp::endpoint endpoint = *endpoints.begin();
    f.acceptor.open(endpoint.protocol(), ec);
    if (!ec) f.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) f.acceptor.bind(endpoint, ec);
    if (!ec) f.acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        error_code ignored;
        f.acceptor.close(ignored);
        return error(ErrorCode::kIo, "[serve] cannot listen on " + where + " (" + ec.message() + ")");
    }
    return Status::ok();
}

void HttpFront::run() {
    Impl& f = *impl_;
    f.accept();
    f.io.run();
    // Every blocking handler held work on the io_context, so none is left; wait for their
    // threads' last step all the same.
    std::unique_lock lock(f.workers_mutex);
    f.workers_cv.wait(lock, [&] { return f.workers == 0; });
}

void HttpFront::stop() {
    asio::post(impl_->io, [f = impl_.get()] { f->stop_on_io(); });
}

const FrontStats& HttpFront::stats() const {
    return impl_->stats;
}

const FrontLimits& HttpFront::limits() const {
    return impl_->limits;
}

}  // namespace sluice::server
