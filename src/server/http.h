// The HTTP vocabulary the server's handlers speak: a parsed request, a response (a whole body or a
// body produced while it is sent), and the client a request came from. The wire protocol lives in
// http_front.h; handlers never see a socket.
//
// Threading: a request and its response belong to the one thread running the handler. Client and
// BodySink are thread-safe: the front calls into them from its IO thread while a handler runs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::server {

// The connection a request arrived on, as its handler sees it while it works.
class Client {
 public:
    virtual ~Client() = default;
    // False once the peer has closed or reset the connection (noticed by the front within a
    // round trip, whether or not the response has started).
    virtual bool connected() const = 0;
    // `fn` runs once on the front's IO thread when the client leaves (at once, on this thread, if
    // it already has). Replaces the previous hook; nullptr clears it. When this call returns the
    // previous hook is not running and never will, so a hook that cancels a pooled session must be
    // cleared before the session goes back to the pool.
    virtual void on_disconnect(std::function<void()> fn) = 0;
};

struct HttpRequest {
    std::string method;  // "GET", "POST", ... (HEAD is answered as GET without the body)
    std::string path;    // the target before any '?'
    std::string query;   // after the '?', undecoded
    int version = 11;    // 10: HTTP/1.0, 11: HTTP/1.1
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    std::string remote;  // the peer's address
    std::shared_ptr<Client> client;

    // The first value of a header (case-insensitive name), or "" when absent.
    std::string header(std::string_view name) const;
    bool has_header(std::string_view name) const;
};

// Where a streamed body goes. write() blocks while the client reads slower than the body is made
// and returns false once the client is gone (or stopped reading for the front's write timeout).
class BodySink {
 public:
    virtual ~BodySink() = default;
    virtual bool write(std::string_view bytes) = 0;
};

struct HttpResponse {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    // When set, the body is produced by this function on the handler's thread after the headers
    // went out: chunked for HTTP/1.1, ended by closing the connection for HTTP/1.0.
    std::function<void(BodySink&)> stream;
    bool close = false;  // close the connection after this response

    void set_header(std::string name, std::string value);
    void set_content(std::string bytes, std::string type);
    void set_stream(std::string type, std::function<void(BodySink&)> producer);
};

}  // namespace sluice::server
