// Pooled generation with metrics (see generation.h).
#include "server/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

namespace sluice::server {

Expected<PromptScores> score_prompt(Session& session, std::span<const int32_t> prompt, int32_t top,
                                    int64_t vocab) {
    PromptScores out;
    if (Expected<int64_t> start = session.truncate(0); !start.has_value()) return start.status();
    const auto scored = static_cast<int64_t>(prompt.size()) - 1;  // the last token predicts no prompt token
    if (scored <= 0) return out;
    out.logprobs.reserve(static_cast<size_t>(scored));
    out.top_logprobs.resize(static_cast<size_t>(top > 0 ? scored : 0));
    std::vector<int32_t> ids(static_cast<size_t>(top > 0 ? vocab : 0));
    for (int64_t begin = 0; begin < scored; begin += kScoreChunkTokens) {
        const int64_t count = std::min(kScoreChunkTokens, scored - begin);
        SLUICE_ASSIGN_OR_RETURN(
            std::vector<float> logits,
            session.evaluate(prompt.subspan(static_cast<size_t>(begin), static_cast<size_t>(count)), true,
                             count));
        for (int64_t r = 0; r < count; ++r) {
            const std::span<const float> row(logits.data() + r * vocab, static_cast<size_t>(vocab));
            // log Σ exp, in double as the sampler's (sampler.cpp describe)
            const float max = *std::max_element(row.begin(), row.end());
            double sum = 0;
            for (float v : row) sum += std::exp(static_cast<double>(v - max));
            const double lse = max + std::log(sum);
            auto logprob = [&](int32_t id) { return static_cast<float>(row[static_cast<size_t>(id)] - lse); };
            const int64_t p = begin + r;  // row p predicts prompt[p + 1]
            out.logprobs.push_back(logprob(prompt[static_cast<size_t>(p + 1)]));
            if (top <= 0) continue;
            std::iota(ids.begin(), ids.end(), 0);
            const auto k = static_cast<long>(std::min<int64_t>(top, vocab));
            std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
                return row[static_cast<size_t>(a)] > row[static_cast<size_t>(b)];
            });
            auto& t = out.top_logprobs[static_cast<size_t>(p)];
            for (long i = 0; i < k; ++i)
                t.emplace_back(ids[static_cast<size_t>(i)], logprob(ids[static_cast<size_t>(i)]));
        }
    }
    return out;
}

std::optional<ApiError> fit_context(const ServerContext& ctx, size_t prompt_tokens, CommonParams* params) {
    const int64_t context = ctx.engine->options().context_tokens;
    const int64_t prompt = static_cast<int64_t>(prompt_tokens);
    if (prompt == 0) return invalid_request("the prompt is empty (0 tokens)", "prompt", "invalid_value");
    if (prompt >= context)
        return invalid_request("This model's maximum context length is " + std::to_string(context) +
                                   " tokens. However, your request has " + std::to_string(prompt) +
                                   " prompt tokens (and at least one completion token is needed).",
                               "messages", "context_length_exceeded");
    const int64_t room = context - prompt;
    params->generate.max_tokens = params->max_tokens ? std::min(*params->max_tokens, room) : room;
    return std::nullopt;
}

std::optional<ApiError> fit_context_text(const ServerContext& ctx, std::string_view text) {
    const size_t context = static_cast<size_t>(ctx.engine->options().context_tokens);
    if (ctx.max_token_bytes == 0 || text.size() <= context * ctx.max_token_bytes) return std::nullopt;
    return invalid_request("This model's maximum context length is " + std::to_string(context) +
                               " tokens. However, your prompt is " + std::to_string(text.size()) +
                               " bytes, more than that many tokens can hold (a token is at most " +
                               std::to_string(ctx.max_token_bytes) + " bytes).",
                           "messages", "context_length_exceeded");
}

std::optional<ApiError> resolve_speculative(const ServerContext& ctx, CommonParams* params) {
    SpeculativeOptions& s = params->generate.speculative;
    s = ctx.options.speculative;
    s.draft = nullptr;
    const bool drafter = ctx.draft != nullptr || ctx.options.speculative.mtp;
    const bool on = params->speculative.value_or(drafter && ctx.options.speculative.tokens > 0);
    if (on && !drafter)
        return invalid_request("speculative decoding needs a server started with --draft MODEL or --spec mtp",
                               "speculative", "unsupported_value");
    if (!on) {
        s.tokens = 0;
        return std::nullopt;
    }
    if (params->spec_auto) {
        s.adaptive = true;
        s.tokens = 8;
    } else if (params->spec_tokens) {
        s.adaptive = false;
        s.tokens = *params->spec_tokens;
    } else if (s.tokens <= 0) {  // the server is off by default; on for this request
        s.tokens = 4;
    }
    return std::nullopt;
}

std::variant<GenerateResult, ApiError> run_generation(ServerContext& ctx, const std::vector<int32_t>& prompt,
                                                      const GenerateOptions& options,
                                                      const GenerationHooks& hooks) {
    Client* client = hooks.client;
    SessionPool::Lease lease = ctx.pool->acquire(
        prompt, [client] { return client == nullptr || client->connected(); }, kQueuePollMs, hooks.tenant,
        hooks.kv_bits);
    if (!lease)
        return ApiError{503, "the client disconnected while the request was queued", "server_error", "",
                        "cancelled"};
    if (ctx.pool->closing())
        return ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"};
    if (Status kv = lease.use_kv_bits(hooks.kv_bits); !kv.is_ok())
        return ApiError{400, "kv_bits " + std::to_string(hooks.kv_bits) + ": " + kv.message(),
                        "invalid_request_error", "kv_bits", "invalid_value"};
    Session* session = &lease.session();
    GenerateOptions run_options = options;
    if (run_options.speculative.tokens > 0 && !run_options.speculative.mtp)
        run_options.speculative.draft = lease.draft();
    if (client) {
        client->on_disconnect([session] { session->cancel(); });
        // generate() clears a cancel made before it starts: a client gone by now is not served.
        if (!client->connected()) {
            client->on_disconnect(nullptr);
            return ApiError{503, "the client disconnected", "server_error", "", "cancelled"};
        }
    }
    // Echo with logprobs: the prompt's own tokens scored before generating. Their forwards are the
    // request's prefill (usage counts no cached tokens; prefill time includes them).
    std::optional<PromptScores> scores;
    double score_ms = 0;
    if (hooks.on_prompt_scores) {
        const auto t0 = std::chrono::steady_clock::now();
        Expected<PromptScores> s =
            score_prompt(*session, prompt, hooks.prompt_top_logprobs, ctx.engine->info().vocab_size);
        score_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (!s.has_value()) {
            if (client) client->on_disconnect(nullptr);
            ctx.metrics.generation_errors_total += 1;
            return ApiError{500, "scoring the prompt failed: " + s.status().message(), "server_error", "",
                            "generation_failed"};
        }
        if (!hooks.on_prompt_scores(*s) || (client && !client->connected())) {
            if (client) client->on_disconnect(nullptr);
            return ApiError{503, "the client disconnected", "server_error", "", "cancelled"};
        }
        scores = std::move(s).value();
    }
    Expected<GenerateResult> result = session->generate(prompt, run_options, [&](const TokenEvent& e) {
        return (client == nullptr || client->connected()) && (!hooks.on_token || hooks.on_token(e));
    });
    if (client) client->on_disconnect(nullptr);  // before the lease returns the session
    if (result.has_value() && scores) {
        GenerationStats& st = result.value().stats;
        st.prefilled_tokens = st.prompt_tokens;
        st.prefix_cache_tokens = 0;
        st.prefill_ms += score_ms;
        st.ttft_ms += score_ms;
    }
    if (!result.has_value()) {
        ctx.metrics.generation_errors_total += 1;
        return ApiError{500, "generation failed: " + result.status().message(), "server_error", "",
                        "generation_failed"};
    }
    const GenerationStats& s = result.value().stats;
    Metrics& m = ctx.metrics;
    m.generations_total += 1;
    m.prompt_tokens_total += static_cast<uint64_t>(s.prompt_tokens);
    m.prefilled_tokens_total += static_cast<uint64_t>(s.prefilled_tokens);
    m.generated_tokens_total += static_cast<uint64_t>(s.generated_tokens);
    m.draft_tokens_total += static_cast<uint64_t>(s.draft_tokens);
    m.accepted_tokens_total += static_cast<uint64_t>(s.accepted_tokens);
    {
        std::lock_guard lock(m.mutex);
        m.prefill_seconds_total += s.prefill_ms / 1000.0;
        m.decode_seconds_total += s.decode_ms / 1000.0;
        if (s.prefill_tok_s() > 0) m.last_prefill_tok_s = s.prefill_tok_s();
        if (s.decode_tok_s() > 0) m.last_decode_tok_s = s.decode_tok_s();
    }
    return std::move(result).value();
}

nlohmann::json usage_json(const GenerationStats& stats) {
    nlohmann::json u = {
        {"prompt_tokens", stats.prompt_tokens},
        {"completion_tokens", stats.generated_tokens},
        {"total_tokens", stats.prompt_tokens + stats.generated_tokens},
        {"prompt_tokens_details", {{"cached_tokens", stats.prompt_tokens - stats.prefilled_tokens}}}};
    // Speculative decoding, in the fields OpenAI gives predicted outputs: proposals the target
    // kept and proposals it rejected.
    if (stats.draft_tokens > 0)
        u["completion_tokens_details"] = {
            {"accepted_prediction_tokens", stats.accepted_tokens},
            {"rejected_prediction_tokens", stats.draft_tokens - stats.accepted_tokens}};
    return u;
}

namespace {
nlohmann::json token_entry(const Tokenizer* tokenizer, int32_t id, float logprob) {
    nlohmann::json bytes = nlohmann::json::array();
    std::string text;
    if (tokenizer) {
        std::string_view raw = tokenizer->token_bytes(id);
        for (unsigned char c : raw) bytes.push_back(c);
        const int32_t ids[1] = {id};
        text = tokenizer->decode(ids);
    }
    return {{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
}
}  // namespace

nlohmann::json logprob_json(const Tokenizer* tokenizer, const TokenEvent& event) {
    nlohmann::json e = token_entry(tokenizer, event.token, event.logprob);
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [id, lp] : event.top_logprobs) top.push_back(token_entry(tokenizer, id, lp));
    e["top_logprobs"] = std::move(top);
    return e;
}

}  // namespace sluice::server
