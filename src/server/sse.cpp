// SSE framing (see sse.h).
#include "server/sse.h"

namespace sluice::server {

std::string sse_data(std::string_view payload) {
    std::string out;
    out.reserve(payload.size() + 8);
    size_t start = 0;
    for (;;) {
        size_t nl = payload.find('\n', start);
        std::string_view line =
            payload.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        out += "data: ";
        out += line;
        out += '\n';
        if (nl == std::string_view::npos) break;
        start = nl + 1;
    }
    out += '\n';
    return out;
}

std::string sse_event(const nlohmann::json& payload) {
    // error_handler_t::replace: text from the model is valid UTF-8 by construction, but a stop
    // string or a client-supplied field might not be; never throw mid-stream.
    return sse_data(payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::string sse_comment(std::string_view text) {
    std::string out = ": ";
    for (char c : text) out += (c == '\n' || c == '\r') ? ' ' : c;
    out += "\n\n";
    return out;
}

}  // namespace sluice::server
