// libFuzzer target for what the server takes from the network: the bytes of an HTTP request parsed
// as the front parses them (Boost.Beast's request parser with the front's header and body limits,
// its field-count limit), then the body through the OpenAI request validation (parse_body,
// parse_chat_request, parse_completion_request, parse_responses_request and the chat validation of
// the body it maps to). A first byte of 'J' skips the HTTP layer and feeds the rest as a body, so
// mutations reach the validators without breaking Content-Length.
// Any input must give a parsed request or a clear refusal (a Beast error code, an ApiError) —
// never a crash, an uncaught exception or a sanitizer report.
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <variant>

#include "server/api.h"
#include "server/http_front.h"
#include "server/responses_api.h"

namespace {

namespace bhttp = boost::beast::http;

void validate(const std::string& body) {
    auto parsed = sluice::server::parse_body(body);
    if (std::holds_alternative<sluice::server::ApiError>(parsed)) {
        if (std::get<sluice::server::ApiError>(parsed).message.empty()) std::abort();
        return;
    }
    const auto& json = std::get<nlohmann::ordered_json>(parsed);
    const sluice::SamplingParams defaults;
    auto chat = sluice::server::parse_chat_request(json, defaults, 8192);
    if (auto* e = std::get_if<sluice::server::ApiError>(&chat)) (void)e->to_json().dump();
    auto completion = sluice::server::parse_completion_request(json, defaults, 8192);
    if (auto* e = std::get_if<sluice::server::ApiError>(&completion)) (void)e->to_json().dump();
    auto responses = sluice::server::parse_responses_request(json);
    if (auto* e = std::get_if<sluice::server::ApiError>(&responses)) {
        (void)e->to_json().dump();
    } else {
        const auto& r = std::get<sluice::server::ResponsesRequest>(responses);
        auto mapped = sluice::server::parse_chat_request(r.chat, defaults, 8192);
        if (auto* chat_error = std::get_if<sluice::server::ApiError>(&mapped))
            (void)sluice::server::responses_error(*chat_error, r).to_json().dump();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size > 0 && data[0] == 'J') {
        validate(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
        return 0;
    }
    const sluice::server::FrontLimits limits;
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(limits.header_bytes));
    parser.body_limit(1u << 20);
    parser.eager(true);
    boost::beast::error_code ec;
    boost::asio::const_buffer input(data, size);
    while (input.size() > 0 && !parser.is_done()) {
        const size_t used = parser.put(input, ec);
        if (ec == bhttp::error::need_more) {
            ec = {};
            if (used == 0) break;
        }
        if (ec) return 0;
        input += used;
    }
    if (!parser.is_done()) {
        parser.put_eof(ec);
        if (ec || !parser.is_done()) return 0;
    }
    const auto& msg = parser.get();
    size_t fields = 0;
    for (const auto& field : msg) {
        if (++fields > limits.header_fields) return 0;
        (void)field.name_string();
    }
    (void)msg.target();
    validate(msg.body());
    return 0;
}
