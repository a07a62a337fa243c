// Server-sent events framing (https://html.spec.whatwg.org/multipage/server-sent-events.html) as
// OpenAI streams use it: every event is `data: <one line of JSON>\n\n`, the stream ends with
// `data: [DONE]\n\n`, and comment lines (`: keep-alive\n\n`) keep proxies and clients from timing
// out while a long prompt is prefilled or a request waits in the queue.
//
// Pure string functions (unit-tested); the socket side is SseWriter in transport.h.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace sluice::server {

// `data: ...\n\n`. A payload with newlines is split into one data line per line, as the spec
// requires (JSON dumped by nlohmann never has raw newlines, but [DONE]-style text might).
std::string sse_data(std::string_view payload);
std::string sse_event(const nlohmann::json& payload);  // compact JSON, non-ASCII kept as UTF-8
std::string sse_comment(std::string_view text);        // `: text\n\n`
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace sluice::server
