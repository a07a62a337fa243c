// One request's generation: queue for a pooled session (session_pool.h), run
// Session::generate, record metrics. Shared by /v1/chat/completions and /v1/completions; the
// latter's echo with logprobs scores the prompt's own tokens first (score_prompt).
//
// Threading: called on the request's own thread (a blocking route); blocks while queued and
// generating. The client's disconnect ends either: the queue is left within kQueuePollMs and a
// running generation is cancelled at once by a Client::on_disconnect hook, cleared before the
// session returns to the pool (so a late disconnect cannot cancel the next request's generation).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "server/api.h"
#include "server/http.h"
#include "server/server.h"

namespace sluice::server {

// The model's own log-probabilities of a prompt's tokens (legacy completions' echo with logprobs,
// as OpenAI's and vLLM's prompt logprobs): entry i is for token i + 1 given tokens [0, i] — the
// first token has none — with the `top` most likely tokens there. From the raw logits: no
// logit_bias, penalties or special-token suppression (they shape sampling, not the prompt).
struct PromptScores {
    std::vector<float> logprobs;                                       // [prompt - 1]
    std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;  // [prompt - 1][top]
};

struct GenerationHooks {
    Client* client = nullptr;  // whose leaving cancels the request (null: nobody's)
    TokenCallback on_token;    // per token; false stops
    std::string tenant;        // whose request this is, for the fair session queue
    int kv_bits = 0;           // the request's KV cache type (CommonParams::kv_bits; 0: the server's)
    // Set: the prompt is scored (score_prompt, with this many top tokens per position) on the
    // leased session before generating, and the scores handed over before the first token; false
    // stops the request (the client left).
    std::function<bool(const PromptScores&)> on_prompt_scores;
    int32_t prompt_top_logprobs = 0;
};

inline constexpr int kQueuePollMs = 250;

// Checks the prompt against the context and clamps max_tokens to what is left:
// a 400 "context_length_exceeded" naming both numbers when the prompt alone does not fit.
std::optional<ApiError> fit_context(const ServerContext& ctx, size_t prompt_tokens, CommonParams* params);

// Before tokenising: a 400 "context_length_exceeded" when `text` is too long to fit the context
// whatever its tokens (more than context × the longest token's bytes).
std::optional<ApiError> fit_context_text(const ServerContext& ctx, std::string_view text);

// The request's "speculative" field against the server's setting, into params->generate.speculative
// (proposals per step, adaptive, draft temperature; tokens 0 = off; the draft session is the
// lease's, paired at run_generation). A 400 when it asks for speculation of a server that has no
// draft model.
std::optional<ApiError> resolve_speculative(const ServerContext& ctx, CommonParams* params);

// Rows of logits one scoring forward returns: 64 × vocabulary floats (39 MB for Qwen3's 151,936).
inline constexpr int64_t kScoreChunkTokens = 64;

// Scores `prompt` on `session` (PromptScores) from position 0 — what the session held is dropped:
// positions already computed have no logits left — in all-logits forwards of kScoreChunkTokens,
// and leaves the session holding prompt[0, n - 1), so a generate() of the prompt that follows
// computes only its last token. `vocab`: the model's vocabulary (a logits row).
Expected<PromptScores> score_prompt(Session& session, std::span<const int32_t> prompt, int32_t top,
                                    int64_t vocab);

// The result, or an ApiError (503 when the client left while queued, 500 on an engine error).
std::variant<GenerateResult, ApiError> run_generation(ServerContext& ctx, const std::vector<int32_t>& prompt,
                                                      const GenerateOptions& options,
                                                      const GenerationHooks& hooks);

// OpenAI usage object: prompt/completion/total tokens and prompt_tokens_details.cached_tokens.
nlohmann::json usage_json(const GenerationStats& stats);

// OpenAI chat logprob entry for one token.
nlohmann::json logprob_json(const Tokenizer* tokenizer, const TokenEvent& event);

}  // namespace sluice::server
