// A small HTTP(S) client over libcurl for `sluice pull`: GETs of small bodies and streamed range
// requests, both with the defences a long download from a rate-limited host needs.
//
// - Every answer is checked before a byte of its body is handed on: a non-2xx status, or a status
//   other than 206 with the exact Content-Range asked for (when a range was asked), aborts the
//   transfer. An HTML error page served with 200 therefore never reaches a weight file.
// - Transient failures are retried with exponential backoff (honouring Retry-After): dropped or
//   refused connections, a stall (no byte for `stall_timeout_s`), 408/429/5xx, and answers of the
//   wrong shape. A range transfer resumes at the first byte not yet delivered. `max_attempts`
//   consecutive failures without progress end it.
// - Redirects are followed (the Hub sends LFS files to a CDN host); the token is sent to the
//   first host only (libcurl does not forward a custom Authorization header to another host).
//
// Threading: an HttpClient is used by one thread at a time (it owns one curl handle so that
// connections are reused).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "sluice/status.h"

namespace sluice::io {

struct HttpOptions {
    std::string token;  // sent as "Authorization: Bearer ..." to the first host
    double stall_timeout_s = 60;
    int max_attempts = 10;
    double retry_wait_s = 1.0;  // first backoff; doubles up to retry_wait_max_s
    double retry_wait_max_s = 60.0;
    std::string user_agent = "sluice";
    // Called with a line for each retry ("429 Too Many Requests; retrying in 2.0 s").
    std::function<void(const std::string&)> on_retry;
};

struct HttpResponse {
    long status = 0;
    std::map<std::string, std::string> headers;  // lowercase names; every hop merged, last wins
    std::string body;
    std::string effective_url;
};

class HttpClient {
 public:
    explicit HttpClient(HttpOptions options);
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    // GET with a 2xx answer required (retried as above); bodies over max_body_bytes are an error.
    // A 401/403/404 fails at once with a message naming the status.
    Expected<HttpResponse> get(const std::string& url, uint64_t max_body_bytes = 64ull << 20);

    // Streams bytes [begin, end) of `url` into `sink` in order, with range requests; `total` is
    // the file size every Content-Range must report (0 = not checked). Resumes after failures.
    Status get_range(const std::string& url, uint64_t begin, uint64_t end, uint64_t total,
                     const std::function<Status(std::span<const uint8_t>)>& sink);

 private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Parses "bytes A-B/T" (T may be "*"): true and the three values (total 0 for "*") on success.
bool parse_content_range(const std::string& value, uint64_t* first, uint64_t* last, uint64_t* total);

}  // namespace sluice::io
