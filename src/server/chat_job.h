// A chat request prepared for generation, shared by every route that speaks chat: OpenAI's
// /v1/chat/completions (endpoint_chat.cpp) and the adapters that translate another API into the same
// request (OpenAI's /v1/responses: endpoint_responses.cpp; Anthropic's /v1/messages:
// endpoint_anthropic.cpp; Ollama's /api/chat and /api/generate: endpoint_ollama.cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "server/api.h"
#include "server/http.h"
#include "server/output_parser.h"
#include "server/server.h"
#include "sluice/session.h"

namespace sluice::server {

struct ChatJob {
    ChatRequest request;
    std::vector<int32_t> prompt;
    std::string forced_prefix;  // appended to the rendered prompt (tool_choice required/named)
    bool opens_reasoning = false;
    bool parse_tools = false;
    bool harmony = false;  // the reply is gpt-oss's harmony messages (harmony_parser.h)
    std::string id;
    int64_t created = 0;
    std::string tenant;  // whose turn it is in the session queue (the client's address)
};

// An OpenAI chat request body (already parsed JSON) → the job: validated, templated, tokenized,
// constrained (tools, response_format). Errors are OpenAI error objects naming the field.
std::variant<std::shared_ptr<ChatJob>, ApiError> prepare_chat(ServerContext& ctx,
                                                              const nlohmann::ordered_json& body,
                                                              const std::string& tenant);

// What a caller of run_chat may want beside the parsed pieces: each token as it comes (before its
// text is parsed; logprobs), and what the parse saw that GenerateResult does not say.
struct ChatRunExtras {
    std::function<void(const TokenEvent&)> on_token;  // in, optional
    int64_t reasoning_tokens = 0;  // out: tokens inside <think>…</think>, the tags included
    bool cut_call = false;         // out: the token limit cut a tool call short (dropped, never content)
};

// Generates a prepared job's reply, handing each parsed piece (reasoning, content, complete tool
// calls) to on_delta as it forms (false stops the generation). The result, or the error (queued
// client gone, engine failure, a kv_bits the plan cannot hold).
std::variant<GenerateResult, ApiError> run_chat(ServerContext& ctx, ChatJob& job, Client* client,
                                                const std::function<bool(const ParsedDelta&)>& on_delta,
                                                ChatRunExtras* extras = nullptr);

}  // namespace sluice::server
