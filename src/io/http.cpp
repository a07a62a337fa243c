#include "io/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>
#include <vector>

namespace sluice::io {

namespace {

constexpr uint64_t kDeliverBytes = 8ull << 20;   // sink calls come in slices of this size
constexpr uint64_t kMaxRangeBytes = 1ull << 30;  // one request asks for at most this much
constexpr size_t kErrorSnippetBytes = 200;

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::string trim(const std::string& s) {
    size_t a = 0, b = s.size();
    while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
    while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
    return s.substr(a, b - a);
}

// Printable start of an error body, for messages ("<!DOCTYPE html><html>...").
std::string snippet(const std::string& body) {
    std::string s;
    for (char c : body.substr(0, kErrorSnippetBytes))
        s += std::isprint(static_cast<unsigned char>(c)) ? c : ' ';
    return trim(s);
}

// One request and what came back.
struct Transfer {
    CURL* curl = nullptr;
    bool range = false;
    uint64_t want_first = 0, want_total = 0;
    uint64_t max_body = 0;
    const std::function<Status(std::span<const uint8_t>)>* sink = nullptr;

    std::map<std::string, std::string> headers;
    long status = 0;
    bool checked = false;
    bool rejected = false;  // the answer was the wrong one; nothing of it was delivered
    std::string reject_reason;
    std::string body;  // get(): the body; rejected answers: the start of it
    std::vector<uint8_t> pending;
    std::chrono::steady_clock::time_point last_deliver = std::chrono::steady_clock::now();
    uint64_t delivered = 0;  // bytes handed to the sink
    Status sink_status = Status::ok();

    bool check_answer() {
        checked = true;
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        if (status < 200 || status >= 300) {
            reject_reason = "HTTP " + std::to_string(status);
            return false;
        }
        if (!range) return true;
        uint64_t first = 0, last = 0, total = 0;
        const auto cr = headers.find("content-range");
        if (status != 206) {
            reject_reason = "HTTP " + std::to_string(status) + " to a range request (206 expected)";
            return false;
        }
        if (cr == headers.end() || !parse_content_range(cr->second, &first, &last, &total) ||
            first != want_first || (want_total != 0 && total != want_total)) {
            reject_reason = "Content-Range '" + (cr == headers.end() ? std::string() : cr->second) +
                            "' does not match the bytes asked for (from " + std::to_string(want_first) +
                            " of " + std::to_string(want_total) + ")";
            return false;
        }
        return true;
    }

    bool deliver_pending() {
        if (pending.empty() || !sink_status.is_ok()) return sink_status.is_ok();
        sink_status = (*sink)({pending.data(), pending.size()});
        if (sink_status.is_ok()) delivered += pending.size();
        pending.clear();
        return sink_status.is_ok();
    }
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const std::string line(data, size * n);
    const size_t colon = line.find(':');
    if (colon != std::string::npos && line.rfind("HTTP/", 0) != 0)
        t->headers[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
    return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const size_t bytes = size * n;
    if (!t->checked && !t->check_answer()) {
        t->rejected = true;
        t->body.assign(data, std::min(bytes, kErrorSnippetBytes));
        return 0;  // abort: not a byte of a wrong answer is kept
    }
    if (t->sink == nullptr) {
        if (t->body.size() + bytes > t->max_body) {
            t->rejected = true;
            t->reject_reason = "body larger than " + std::to_string(t->max_body) + " bytes";
            return 0;
        }
        t->body.append(data, bytes);
        return bytes;
    }
    t->pending.insert(t->pending.end(), data, data + bytes);
    // Hand over in big slices, but at least twice a second so that a slow link still advances the
    // caller's progress record.
    const auto now = std::chrono::steady_clock::now();
    if (t->pending.size() >= kDeliverBytes || now - t->last_deliver >= std::chrono::milliseconds(500)) {
        t->last_deliver = now;
        if (!t->deliver_pending()) return 0;
    }
    return bytes;
}

void global_init() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool retryable_status(long status) {
    return status == 408 || status == 429 || status >= 500;
}

}  // namespace

bool parse_content_range(const std::string& value, uint64_t* first, uint64_t* last, uint64_t* total) {
    const std::string v = trim(value);
    if (v.rfind("bytes ", 0) != 0) return false;
    const size_t dash = v.find('-', 6), slash = v.find('/', 6);
    if (dash == std::string::npos || slash == std::string::npos || dash > slash) return false;
    auto number = [](const std::string& s, uint64_t* out) {
        if (s.empty() || s.size() > 19) return false;
        uint64_t x = 0;
        for (char c : s) {
            if (c < '0' || c > '9') return false;
            x = x * 10 + static_cast<uint64_t>(c - '0');
        }
        *out = x;
        return true;
    };
    if (!number(v.substr(6, dash - 6), first) || !number(v.substr(dash + 1, slash - dash - 1), last))
        return false;
    const std::string t = v.substr(slash + 1);
    if (t == "*") {
        *total = 0;
    } else if (!number(t, total) || *last >= *total) {
        return false;
    }
    return *first <= *last;
}

struct HttpClient::Impl {
    HttpOptions o;
    CURL* curl = nullptr;
    curl_slist* auth = nullptr;

    // One attempt: fills `t`, returns the curl result.
    CURLcode perform(const std::string& url, Transfer& t, const std::string& range) {
        curl_easy_reset(curl);
        t.curl = curl;
        curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
        curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
        curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl, CURLOPT_USERAGENT, o.user_agent.c_str());
        const long stall = std::max(1L, static_cast<long>(std::ceil(o.stall_timeout_s)));
        curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, stall);
        curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, stall);
        if (auth) curl_easy_setopt(curl, CURLOPT_HTTPHEADER, auth);
        if (!range.empty()) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
        curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
        const CURLcode rc = curl_easy_perform(curl);
        if (!t.checked && rc == CURLE_OK && !t.check_answer()) t.rejected = true;  // an empty body
        return rc;
    }

    // Why an attempt failed, and whether to try again.
    struct Failure {
        bool retry = false;
        double wait_s = 0;  // Retry-After, when the server gave one
        std::string reason;
    };
    Failure classify(const std::string& url, const Transfer& t, CURLcode rc) const {
        Failure f;
        if (t.rejected) {
            f.reason = t.reject_reason;
            const std::string body = snippet(t.body);
            if (!body.empty()) f.reason += " (body starts: \"" + body + "\")";
            if (t.status == 401 || t.status == 403) {
                f.reason = "HTTP " + std::to_string(t.status) + " for " + url +
                           ": access denied — a gated or private repository needs a token "
                           "(set HF_TOKEN; for a gated model, accept its licence on the Hub first)";
                return f;
            }
            if (t.status == 404) {
                f.reason = "HTTP 404 for " + url + ": not found (check the repository name and revision)";
                return f;
            }
            f.retry = t.status < 400 || retryable_status(t.status);  // wrong-shaped 2xx answers too
            if (auto ra = t.headers.find("retry-after"); ra != t.headers.end())
                f.wait_s = std::min(300.0, std::max(0.0, std::atof(ra->second.c_str())));
            return f;
        }
        f.retry = true;
        f.reason = rc == CURLE_OPERATION_TIMEDOUT
                       ? "stalled (no data for " + std::to_string(static_cast<int>(o.stall_timeout_s)) + " s)"
                       : std::string(curl_easy_strerror(rc));
        return f;
    }

    void backoff(const Failure& f, double* wait, int attempt) {
        const double s = f.wait_s > 0 ? f.wait_s : *wait;
        if (o.on_retry) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "; retry %d of %d in %.1f s", attempt, o.max_attempts - 1, s);
            o.on_retry(f.reason + buf);
        }
        std::this_thread::sleep_for(std::chrono::duration<double>(s));
        *wait = std::min(*wait * 2, o.retry_wait_max_s);
    }
};

HttpClient::HttpClient(HttpOptions options) : impl_(std::make_unique<Impl>()) {
    global_init();
    impl_->o = std::move(options);
    impl_->curl = curl_easy_init();
    if (!impl_->o.token.empty())
        impl_->auth = curl_slist_append(nullptr, ("Authorization: Bearer " + impl_->o.token).c_str());
}

HttpClient::~HttpClient() {
    if (impl_->auth) curl_slist_free_all(impl_->auth);
    if (impl_->curl) curl_easy_cleanup(impl_->curl);
}

Expected<HttpResponse> HttpClient::get(const std::string& url, uint64_t max_body_bytes) {
    if (impl_->curl == nullptr) return error(ErrorCode::kInternal, "[http] curl_easy_init failed");
    double wait = impl_->o.retry_wait_s;
    for (int attempt = 1;; ++attempt) {
        Transfer t;
        t.max_body = max_body_bytes;
        const CURLcode rc = impl_->perform(url, t, "");
        if (rc == CURLE_OK && !t.rejected) {
            HttpResponse r;
            r.status = t.status;
            r.headers = std::move(t.headers);
            r.body = std::move(t.body);
            char* eff = nullptr;
            curl_easy_getinfo(impl_->curl, CURLINFO_EFFECTIVE_URL, &eff);
            if (eff) r.effective_url = eff;
            return r;
        }
        const Impl::Failure f = impl_->classify(url, t, rc);
        if (!f.retry || attempt >= impl_->o.max_attempts) {
            const ErrorCode code = t.status == 404 ? ErrorCode::kNotFound : ErrorCode::kIo;
            return error(code,
                         "[http] GET " + url + ": " + f.reason +
                             (f.retry ? " (gave up after " + std::to_string(attempt) + " attempts)" : ""));
        }
        impl_->backoff(f, &wait, attempt);
    }
}

Status HttpClient::get_range(const std::string& url, uint64_t begin, uint64_t end, uint64_t total,
                             const std::function<Status(std::span<const uint8_t>)>& sink) {
    if (impl_->curl == nullptr) return error(ErrorCode::kInternal, "[http] curl_easy_init failed");
    double wait = impl_->o.retry_wait_s;
    int failures = 0;
    uint64_t pos = begin;
    while (pos < end) {
        const uint64_t last = std::min(end, pos + kMaxRangeBytes) - 1;
        Transfer t;
        t.range = true;
        t.want_first = pos;
        t.want_total = total;
        t.sink = &sink;
        const CURLcode rc = impl_->perform(url, t, std::to_string(pos) + "-" + std::to_string(last));
        if (!t.rejected) t.deliver_pending();  // what arrived before a drop is good: keep it
        if (!t.sink_status.is_ok()) return t.sink_status;
        pos += t.delivered;
        if (t.delivered > 0) {
            failures = 0;
            wait = impl_->o.retry_wait_s;
        }
        if (rc == CURLE_OK && !t.rejected && pos > last) continue;
        Impl::Failure f = impl_->classify(url, t, rc);
        if (rc == CURLE_OK && !t.rejected) f.reason = "answer ended early";
        ++failures;
        if (!f.retry || failures >= impl_->o.max_attempts) {
            return error(t.status == 404 ? ErrorCode::kNotFound : ErrorCode::kIo,
                         "[http] GET " + url + " bytes " + std::to_string(pos) + "-" + std::to_string(last) +
                             ": " + f.reason +
                             (f.retry ? " (gave up after " + std::to_string(failures) + " attempts)" : ""));
        }
        impl_->backoff(f, &wait, failures);
    }
    return Status::ok();
}

}  // namespace sluice::io
