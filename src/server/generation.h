// One request's generation: queue for a pooled session (session_pool.h), run
// Session::generate, record metrics. Shared by /v1/chat/completions and /v1/completions.
//
// Threading: called on the request's HTTP worker thread; blocks while queued and generating.
#pragma once

#include <functional>
#include <variant>
#include <vector>

#include "server/api.h"
#include "server/server.h"

namespace sluice::server {

struct GenerationHooks {
    std::function<bool()> still_wanted;        // polled while queued; false: give up
    std::function<void(Session*)> on_session;  // the session is chosen (for cancel())
    TokenCallback on_token;                    // per token; false stops (client gone)
};

// Checks the prompt against the context and clamps max_tokens to what is left:
// a 400 "context_length_exceeded" naming both numbers when the prompt alone does not fit.
std::optional<ApiError> fit_context(const ServerContext& ctx, size_t prompt_tokens, CommonParams* params);

// Before tokenising: a 400 "context_length_exceeded" when `text` is too long to fit the context
// whatever its tokens (more than context × the longest token's bytes).
std::optional<ApiError> fit_context_text(const ServerContext& ctx, std::string_view text);

// The result, or an ApiError (503 when the client left while queued, 500 on an engine error).
std::variant<GenerateResult, ApiError> run_generation(ServerContext& ctx, const std::vector<int32_t>& prompt,
                                                      const GenerateOptions& options,
                                                      const GenerationHooks& hooks);

// OpenAI usage object: prompt/completion/total tokens and prompt_tokens_details.cached_tokens.
nlohmann::json usage_json(const GenerationStats& stats);

// OpenAI chat logprob entry for one token.
nlohmann::json logprob_json(const Tokenizer* tokenizer, const TokenEvent& event);

}  // namespace sluice::server
