// OpenAI's Responses API (POST /v1/responses) in the terms of the chat request the server already
// runs. parse_responses_request validates a Responses body — `input` as a string or as items
// (messages with text parts, function_call, function_call_output, reasoning), `instructions`, flat
// function tools, tool_choice (allowed_tools included), text.format, max_output_tokens,
// reasoning.effort — and writes the equivalent /v1/chat/completions body, which prepare_chat
// (chat_job.h) validates further, templates, tokenizes and constrains. ResponseOutput turns the
// chat job's parsed pieces (output_parser.h) into the Response's output items and, when streaming,
// the semantic events that build the same items in a client.
//
// Pure: no HTTP, no engine state (unit-tested in tests/unit/server_responses_test.cpp; fuzzed with
// the other request validators). Data lifetime: values owned by one request's handler. Threading:
// one thread.
// Rejected alternative: a second validator and prompt builder beside the chat one — the two APIs
// would drift apart in templates, sampling, tool grammars and structured output; one path serves
// both, and only the shapes differ.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "server/api.h"
#include "server/output_parser.h"

namespace sluice::server {

struct ResponsesRequest {
    nlohmann::ordered_json chat = nlohmann::ordered_json::object();  // the equivalent chat body
    bool stream = false;
    bool logprobs = false;  // include "message.output_text.logprobs" (or top_logprobs > 0)
    // chat tools[i] is the request's tools[tool_index[i]] (allowed_tools may leave some out), so
    // that errors found on the chat body name the field the client sent.
    std::vector<size_t> tool_index;
    // Echoed in the Response object (normalised, defaults filled in as OpenAI reports them).
    nlohmann::json instructions;  // string or null
    nlohmann::json tools = nlohmann::json::array();
    nlohmann::json tool_choice = "auto";
    nlohmann::json text = {{"format", {{"type", "text"}}}};
    nlohmann::json reasoning;          // {"effort", "summary"} or null
    nlohmann::json max_output_tokens;  // integer or null
    nlohmann::json max_tool_calls;  // integer or null (bounds built-in tools, which this server has none of)
    nlohmann::json metadata = nlohmann::json::object();
    nlohmann::json top_logprobs;  // integer or null
    nlohmann::json user;          // string or null
    nlohmann::json safety_identifier;
    nlohmann::json prompt_cache_key;
    bool parallel_tool_calls = true;
    std::string truncation = "disabled";
};

// A Responses body (already parsed JSON) → the request, or a 400 naming the field as the client
// wrote it ("input[2].content[0].type", "tools[1].name", "text.format.schema").
std::variant<ResponsesRequest, ApiError> parse_responses_request(const nlohmann::ordered_json& body);

// An error found while preparing the chat body (prepare_chat: sampling fields, schemas, the
// template, the context) with the chat field it names rewritten as the Responses field
// ("response_format.json_schema.schema" → "text.format.schema", "tools[0].function.parameters" →
// "tools[i].parameters", "max_tokens" → "max_output_tokens", "messages" → "input").
ApiError responses_error(ApiError error, const ResponsesRequest& request);

// The output items of one Response, built from the parsed pieces of its reply in the order the model
// wrote them: a "reasoning" item (one reasoning_text part), "message" items (one output_text part,
// annotations []) and "function_call" items (arguments as a JSON string). Given an event sink,
// every change is also written as the streaming events that rebuild the same items client-side:
// output_item.added, content_part.added, output_text / reasoning_text / function_call_arguments
// deltas, their .done events, content_part.done, output_item.done. The sink numbers them
// (sequence_number) and returns false when the client is gone, which stops the building.
class ResponseOutput {
 public:
    using EventSink = std::function<bool(nlohmann::json event)>;

    // `id_base`: the hex part of the response's id, shared by its items ("msg_<base>_<n>",
    // "fc_<base>_<n>", call ids "call_<base>_<n>").
    explicit ResponseOutput(std::string id_base, EventSink sink = nullptr);

    // One parsed piece; `logprobs` (OpenAI logprob entries) belong to its content, if it has any.
    bool add(const ParsedDelta& delta, const nlohmann::json& logprobs = nlohmann::json::array());
    // Closes the open item: "incomplete" when the reply was cut by max_output_tokens, else
    // "completed". A reply that ends complete with neither a message nor a function call gets an
    // empty message, so `output` always holds the answer.
    bool finish(bool incomplete);

    const nlohmann::json& items() const { return items_; }
    size_t function_calls() const { return function_calls_; }

 private:
    enum class Open { kNone, kReasoning, kMessage };
    bool emit(nlohmann::json event);
    bool open(Open kind);
    bool close(const char* status);
    bool append(const std::string& text, const nlohmann::json& logprobs);
    bool function_call(const ParsedToolCall& call);

    std::string id_base_;
    EventSink sink_;
    nlohmann::json items_ = nlohmann::json::array();
    Open open_ = Open::kNone;
    size_t function_calls_ = 0;
    bool has_message_ = false;
};

}  // namespace sluice::server
