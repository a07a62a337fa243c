// OpenAI-compatible request types and their validation: the JSON a client sends becomes a plain
// struct (ChatRequest, CompletionRequest) or an ApiError naming the field at fault, before any
// model work starts. Nothing here touches HTTP or the engine's state, so it is unit-tested alone
// (tests/unit/server_api_test.cpp).
//
// Data lifetime: requests are values owned by the handler of one HTTP request.
// Threading: pure functions.
// Rejected alternative: validating lazily while building the prompt — errors would then depend on
// the order fields are read and some would surface mid-stream, after the 200 was sent.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sluice/session.h"

namespace sluice::server {

// An OpenAI error object: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError {
    int http_status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // empty → null
    std::string code;   // empty → null
    nlohmann::json to_json() const;
};

ApiError invalid_request(std::string message, std::string param = "", std::string code = "");
// 400 invalid_type: "'param' must be <expected>, got <type> (<the value, cut>)".
ApiError wrong_type(const std::string& param, const char* expected, const nlohmann::ordered_json& got);

// The reasoning efforts OpenAI's APIs take (chat's `reasoning_effort`, the Responses API's
// `reasoning.effort`), and what the templates are given for one: `enable_thinking` (the switch of
// Qwen3's and most templates: off for "none") and `reasoning_effort` (gpt-oss's template prints it as
// "Reasoning: low|medium|high", the three it was trained on: "none" and "minimal" give low, "xhigh"
// and "max" high). Other templates ignore what they do not read.
inline constexpr const char* kReasoningEfforts[] = {"none", "minimal", "low", "medium",
                                                    "high", "xhigh",   "max"};
nlohmann::ordered_json reasoning_effort_kwargs(std::string_view effort);

// OpenAI's rule for function and response-format names: 1 to 64 letters, digits, '_' or '-'. It is
// also what the tool-call markup can carry: no valid name holds "</tool_call>".
bool valid_function_name(std::string_view name);

// Parses a request body. Rejects malformed JSON, nesting deeper than kMaxJsonDepth (the parser is
// recursive; a body of a million '[' must not overflow the stack) and non-object bodies.
inline constexpr int kMaxJsonDepth = 128;
std::variant<nlohmann::ordered_json, ApiError> parse_body(const std::string& body);

// Fields shared by /v1/chat/completions and /v1/completions.
struct CommonParams {
    std::string model;
    GenerateOptions generate;           // sampling, stop, top_logprobs
    std::optional<int64_t> max_tokens;  // unset: the rest of the context
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage
    bool logprobs = false;
    // "speculative" (a sluice extension): true, false, or {"tokens": 1..16 | "auto"} (on, with
    // that many proposals per step). Unset: the server's --spec setting.
    std::optional<bool> speculative;
    std::optional<int> spec_tokens;  // from the object form
    bool spec_auto = false;          // {"tokens": "auto"}
    // "kv_bits" (a sluice extension, as SwiftLM's): this conversation's attention KV cache, 32, 16, 8,
    // 4 or 3 bits per element. Unset: the server's --kv-bits. Whether the memory plan holds it is the
    // engine's to say (Engine::new_session).
    std::optional<int> kv_bits;
    // "n": choices to generate (1..kMaxChoices), one after another on the pool (a choice with a seed
    // uses seed + its index, so they differ and each is reproducible).
    int n = 1;
};

inline constexpr int kMaxChoices = 16;

enum class ToolChoiceMode { kAuto, kNone, kRequired, kNamed };
enum class ResponseFormat { kText, kJsonObject, kJsonSchema };

struct ChatRequest {
    CommonParams params;
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // content flattened to strings
    nlohmann::ordered_json tools;                                       // null or the array given
    ToolChoiceMode tool_choice = ToolChoiceMode::kAuto;
    std::string tool_choice_name;     // kNamed
    bool parallel_tool_calls = true;  // several calls in one reply (enforced when forced)
    // chat_template_kwargs (object or null), over what reasoning_effort gives (reasoning_effort_kwargs)
    nlohmann::ordered_json template_kwargs;
    ResponseFormat response_format = ResponseFormat::kText;
    nlohmann::ordered_json json_schema = true;  // kJsonSchema: response_format.json_schema.schema
};

struct CompletionRequest {
    CommonParams params;
    std::variant<std::string, std::vector<int32_t>> prompt;
    bool echo = false;
};

// `defaults` are the model's sampling defaults (generation_config.json); fields the request sets
// override them. `vocab_size` bounds logit_bias keys and token-id prompts.
std::variant<ChatRequest, ApiError> parse_chat_request(const nlohmann::ordered_json& body,
                                                       const SamplingParams& defaults, int32_t vocab_size);
std::variant<CompletionRequest, ApiError> parse_completion_request(const nlohmann::ordered_json& body,
                                                                   const SamplingParams& defaults,
                                                                   int32_t vocab_size);

}  // namespace sluice::server
