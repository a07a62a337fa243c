// POST /v1/completions: the legacy text-completion API over a raw prompt (a string, tokenized
// with special tokens parsed, or token ids), with the same sampling fields and streaming as chat.
// logprobs follow the legacy shape: {tokens, token_logprobs, top_logprobs, text_offset}. With echo
// they cover the prompt's tokens too (the first one's null, as OpenAI's): the prompt is scored on
// the leased session before generating (score_prompt), so a scoring request (`max_tokens: 0`)
// costs one prefill; streamed, the echoed prompt's chunk waits for its scores.
#include <chrono>

#include "server/endpoints.h"
#include "server/generation.h"
#include "server/sse.h"
#include "server/transport.h"

namespace sluice::server {
namespace {

using json = nlohmann::json;

struct CompletionJob {
    CompletionRequest request;
    std::vector<int32_t> prompt;
    std::string prompt_text;  // for echo
    std::string id;
    int64_t created = 0;
    std::string tenant;  // whose turn it is in the session queue (the client's address)
};

// text_offset: each token's byte offset in the returned text (which starts with the prompt when echo).
struct LegacyLogprobs {
    json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
    size_t offset = 0;  // where the next token starts in the returned text
    void add(const Tokenizer* tok, const TokenEvent& e) {
        add_token(tok, e.token, e.logprob, top_json(tok, e.top_logprobs));
    }
    // The echoed prompt's tokens, from offset 0; the first has no logprob (nothing predicts it).
    // The generated tokens then start at `text_start` (the prompt text's bytes).
    void add_prompt(const Tokenizer* tok, std::span<const int32_t> prompt, const PromptScores& s,
                    size_t text_start) {
        offset = 0;
        for (size_t i = 0; i < prompt.size(); ++i) {
            if (i == 0) {
                add_token(tok, prompt[i], json(), json());
                continue;
            }
            add_token(tok, prompt[i], s.logprobs[i - 1],
                      top_json(tok, s.top_logprobs.empty() ? std::span<const std::pair<int32_t, float>>()
                                                           : std::span(s.top_logprobs[i - 1])));
        }
        offset = text_start;
    }
    static json top_json(const Tokenizer* tok, std::span<const std::pair<int32_t, float>> top) {
        json t = json::object();
        for (const auto& [id, lp] : top) {
            const int32_t one[1] = {id};
            t[tok ? tok->decode(one) : std::to_string(id)] = lp;
        }
        return t;
    }
    void add_token(const Tokenizer* tok, int32_t id, json logprob, json top_entry) {
        const int32_t ids[1] = {id};
        std::string text = tok ? tok->decode(ids) : std::string();
        tokens.push_back(text);
        token_logprobs.push_back(std::move(logprob));
        top.push_back(std::move(top_entry));
        offsets.push_back(offset);
        offset += text.size();
    }
    json to_json() const {
        return {{"tokens", tokens},
                {"token_logprobs", token_logprobs},
                {"top_logprobs", top},
                {"text_offset", offsets}};
    }
};

std::variant<std::shared_ptr<CompletionJob>, ApiError> prepare(ServerContext& ctx, const HttpRequest& req) {
    auto body = parse_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return *e;
    const int32_t vocab =
        ctx.tokenizer ? ctx.tokenizer->vocab_size() : static_cast<int32_t>(ctx.engine->info().vocab_size);
    auto parsed = parse_completion_request(std::get<nlohmann::ordered_json>(body),
                                           ctx.engine->default_sampling(), vocab);
    if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
    auto job = std::make_shared<CompletionJob>();
    job->tenant = req.remote;
    job->request = std::move(std::get<CompletionRequest>(parsed));
    if (auto e = check_model(ctx, job->request.params.model)) return *e;
    if (job->request.params.n > 1)
        return invalid_request(
            "'n' > 1 is supported on /v1/chat/completions; legacy completions return one choice", "n",
            "unsupported_value");
    if (auto e = resolve_speculative(ctx, &job->request.params)) return *e;
    if (auto* text = std::get_if<std::string>(&job->request.prompt)) {
        if (!ctx.tokenizer)
            return invalid_request("this model has no tokenizer; send the prompt as token ids", "prompt",
                                   "no_tokenizer");
        if (auto e = fit_context_text(ctx, *text)) return *e;
        job->prompt = ctx.tokenizer->encode(*text, true);
        // The BOS a Llama / Mistral tokenizer adds to a prompt (add_bos_token), as HF's encode does.
        if (auto bos = ctx.tokenizer->bos_id_to_add()) job->prompt.insert(job->prompt.begin(), *bos);
        job->prompt_text = *text;
    } else {
        job->prompt = std::get<std::vector<int32_t>>(job->request.prompt);
        if (ctx.tokenizer) job->prompt_text = ctx.tokenizer->decode(job->prompt);
    }
    if (auto e = fit_context(ctx, job->prompt.size(), &job->request.params)) return *e;
    job->id = ctx.new_id("cmpl-");
    job->created = static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    return job;
}

json completion_object(ServerContext& ctx, const CompletionJob& job, json choice) {
    return {{"id", job.id},
            {"object", "text_completion"},
            {"created", job.created},
            {"model", ctx.options.model_id},
            {"choices", json::array({std::move(choice)})}};
}

const char* finish_name(FinishReason r) {
    return r == FinishReason::kLength ? "length" : "stop";
}

}  // namespace

void handle_completions(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
    auto prepared = prepare(ctx, req);
    if (auto* e = std::get_if<ApiError>(&prepared)) return send_error(res, *e);
    auto job = std::get<std::shared_ptr<CompletionJob>>(prepared);
    const bool want_logprobs = job->request.params.logprobs;
    const bool score_prompt = want_logprobs && job->request.echo;
    const size_t text_start = job->request.echo ? job->prompt_text.size() : 0;
    if (!job->request.params.stream) {
        LegacyLogprobs lp;
        lp.offset = text_start;
        GenerationHooks hooks;
        hooks.client = req.client.get();
        hooks.tenant = job->tenant;
        hooks.kv_bits = job->request.params.kv_bits.value_or(0);
        if (score_prompt) {
            hooks.prompt_top_logprobs = job->request.params.generate.top_logprobs;
            hooks.on_prompt_scores = [&](const PromptScores& s) {
                lp.add_prompt(ctx.tokenizer.get(), job->prompt, s, text_start);
                return true;
            };
        }
        hooks.on_token = [&](const TokenEvent& e) {
            if (want_logprobs) lp.add(ctx.tokenizer.get(), e);
            return true;
        };
        auto outcome = run_generation(ctx, job->prompt, job->request.params.generate, hooks);
        if (auto* e = std::get_if<ApiError>(&outcome)) return send_error(res, *e);
        const GenerateResult& result = std::get<GenerateResult>(outcome);
        json choice = {{"index", 0},
                       {"text", (job->request.echo ? job->prompt_text : std::string()) + result.text},
                       {"logprobs", want_logprobs ? lp.to_json() : json()},
                       {"finish_reason", finish_name(result.finish_reason)}};
        json out = completion_object(ctx, *job, std::move(choice));
        out["usage"] = usage_json(result.stats);
        return send_json(res, out);
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_stream("text/event-stream",
                   [&ctx, job, want_logprobs, score_prompt, text_start, client = req.client](BodySink& sink) {
                       SseWriter writer(sink);
                       const bool include_usage = job->request.params.include_usage;
                       auto chunk = [&](const std::string& text, json finish, json logprobs) {
                           json c = completion_object(ctx, *job,
                                                      {{"index", 0},
                                                       {"text", text},
                                                       {"logprobs", std::move(logprobs)},
                                                       {"finish_reason", std::move(finish)}});
                           if (include_usage) c["usage"] = nullptr;
                           return writer.event(c);
                       };
                       if (job->request.echo && !score_prompt && !chunk(job->prompt_text, nullptr, nullptr))
                           return;
                       KeepAlive keep_alive(writer, ctx.options.keep_alive_ms);
                       GenerationHooks hooks;
                       hooks.client = client.get();
                       hooks.tenant = job->tenant;
                       hooks.kv_bits = job->request.params.kv_bits.value_or(0);
                       if (score_prompt) {
                           hooks.prompt_top_logprobs = job->request.params.generate.top_logprobs;
                           hooks.on_prompt_scores = [&](const PromptScores& s) {
                               keep_alive.first_token();
                               LegacyLogprobs echoed;
                               echoed.add_prompt(ctx.tokenizer.get(), job->prompt, s, text_start);
                               return chunk(job->prompt_text, nullptr, echoed.to_json());
                           };
                       }
                       size_t offset = text_start;
                       hooks.on_token = [&](const TokenEvent& e) {
                           keep_alive.first_token();
                           if (e.text.empty() && !want_logprobs) return writer.ok();
                           json lp;
                           if (want_logprobs) {
                               LegacyLogprobs one;
                               one.offset = offset;
                               one.add(ctx.tokenizer.get(), e);
                               offset = one.offset;
                               lp = one.to_json();
                           }
                           return chunk(e.text, nullptr, std::move(lp));
                       };
                       auto outcome = run_generation(ctx, job->prompt, job->request.params.generate, hooks);
                       keep_alive.first_token();
                       if (auto* e = std::get_if<ApiError>(&outcome)) {
                           writer.event(e->to_json());
                       } else {
                           const GenerateResult& result = std::get<GenerateResult>(outcome);
                           chunk("", finish_name(result.finish_reason), nullptr);
                           if (include_usage) {
                               json u = completion_object(ctx, *job, nullptr);
                               u["choices"] = json::array();
                               u["usage"] = usage_json(result.stats);
                               writer.event(u);
                           }
                       }
                       writer.write(kSseDone);
                   });
}

}  // namespace sluice::server
