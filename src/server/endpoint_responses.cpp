// OpenAI's Responses API: POST /v1/responses translated into the chat request the server already
// runs (responses_api.h → chat_job.h: the same template, sampling, tool grammars and structured
// output), answered as a Response object — `output` with reasoning / message / function_call items,
// status completed or incomplete (incomplete_details.reason max_output_tokens), usage with cached
// and reasoning tokens — or streamed as the API's semantic events: response.created,
// response.in_progress, the items' events (responses_api.h: ResponseOutput), then
// response.completed or response.incomplete; an error after the stream started is an `error` event
// followed by response.failed. Every event carries `type` and `sequence_number` (and an SSE
// `event:` line, as OpenAI writes them); the stream has no [DONE], as OpenAI's has none.
//
// Nothing is stored: `store` is accepted and reported false, and what needs a stored response
// (previous_response_id, conversation, background, item_reference) is a 400 naming the field;
// GET / DELETE /v1/responses/{id} say so with a 404.
#include <chrono>
#include <cmath>

#include "server/chat_job.h"
#include "server/endpoints.h"
#include "server/generation.h"
#include "server/responses_api.h"
#include "server/sse.h"
#include "server/transport.h"

namespace sluice::server {
namespace {

using json = nlohmann::json;

int64_t now_unix_s() {
    return static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
}

// A sampling value as the client would write it (0.7, not the float's 0.699999988).
json number(float v) {
    return std::round(static_cast<double>(v) * 1e6) / 1e6;
}

// The Response before any output: what the request asked for, with the effective sampling values.
json response_object(const ServerContext& ctx, const ResponsesRequest& r, const ChatJob& job,
                     const std::string& id) {
    const SamplingParams& s = job.request.params.generate.sampling;
    return {
        {"id", id},
        {"object", "response"},
        {"created_at", job.created},
        {"status", "in_progress"},
        {"background", false},
        {"error", nullptr},
        {"incomplete_details", nullptr},
        {"instructions", r.instructions},
        {"max_output_tokens", r.max_output_tokens},
        {"max_tool_calls", r.max_tool_calls},
        {"model", ctx.options.model_id},
        {"output", json::array()},
        {"parallel_tool_calls", r.parallel_tool_calls},
        {"previous_response_id", nullptr},
        {"prompt_cache_key", r.prompt_cache_key},
        {"reasoning", r.reasoning.is_null() ? json{{"effort", nullptr}, {"summary", nullptr}} : r.reasoning},
        {"safety_identifier", r.safety_identifier},
        {"store", false},
        {"temperature", number(s.temperature)},
        {"text", r.text},
        {"tool_choice", r.tool_choice},
        {"tools", r.tools},
        {"top_logprobs", r.top_logprobs.is_null() ? json(0) : r.top_logprobs},
        {"top_p", number(s.top_p)},
        {"truncation", r.truncation},
        {"usage", nullptr},
        {"user", r.user},
        {"metadata", r.metadata}};
}

json usage_object(const GenerationStats& s, int64_t reasoning_tokens) {
    json u = {{"input_tokens", s.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", s.prompt_tokens - s.prefilled_tokens}}},
              {"output_tokens", s.generated_tokens},
              {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
              {"total_tokens", s.prompt_tokens + s.generated_tokens}};
    // Speculative decoding, in the fields the chat endpoint uses for it (a sluice extension here).
    if (s.draft_tokens > 0) {
        u["output_tokens_details"]["accepted_prediction_tokens"] = s.accepted_tokens;
        u["output_tokens_details"]["rejected_prediction_tokens"] = s.draft_tokens - s.accepted_tokens;
    }
    return u;
}

// Cut by the token limit, unless complete function calls came before a call it cut (those are
// what a client runs; the chat endpoint ends such a reply "tool_calls").
bool is_incomplete(const GenerateResult& result, const ResponseOutput& out, const ChatRunExtras& extras) {
    return result.finish_reason == FinishReason::kLength && !(out.function_calls() > 0 && extras.cut_call);
}

// The Response at its end: status, output, usage.
void complete(json& response, const GenerateResult& result, const ResponseOutput& out,
              const ChatRunExtras& extras) {
    const bool incomplete = is_incomplete(result, out, extras);
    response["status"] = incomplete ? "incomplete" : "completed";
    if (incomplete) response["incomplete_details"] = {{"reason", "max_output_tokens"}};
    if (!incomplete) response["completed_at"] = now_unix_s();
    response["output"] = out.items();
    response["usage"] = usage_object(result.stats, extras.reasoning_tokens);
}

// Runs the job, building `out` from its parsed pieces. With logprobs asked for, a piece's content
// takes the entries of the tokens since the piece before (a reasoning or tool-call piece takes its
// tokens' away).
std::variant<GenerateResult, ApiError> run_into(ServerContext& ctx, ChatJob& job, Client* client,
                                                const ResponsesRequest& request, ResponseOutput& out,
                                                ChatRunExtras& extras) {
    json pending = json::array();
    if (request.logprobs)
        extras.on_token = [&](const TokenEvent& e) {
            pending.push_back(logprob_json(ctx.tokenizer.get(), e));
        };
    auto on_delta = [&](const ParsedDelta& d) {
        json logprobs = d.content.empty() ? json::array() : std::move(pending);
        pending = json::array();
        return out.add(d, logprobs);
    };
    return run_chat(ctx, job, client, on_delta, &extras);
}

}  // namespace

void handle_responses(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
    auto body = parse_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
    auto parsed = parse_responses_request(std::get<nlohmann::ordered_json>(body));
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    auto request = std::make_shared<ResponsesRequest>(std::get<ResponsesRequest>(std::move(parsed)));
    auto prepared = prepare_chat(ctx, request->chat, req.remote);
    if (auto* e = std::get_if<ApiError>(&prepared)) return send_error(res, responses_error(*e, *request));
    std::shared_ptr<ChatJob> job = std::get<std::shared_ptr<ChatJob>>(prepared);
    const std::string base = job->id.substr(job->id.find('-') + 1);
    auto response = std::make_shared<json>(response_object(ctx, *request, *job, "resp_" + base));

    if (!request->stream) {
        ResponseOutput out(base);
        ChatRunExtras extras;
        auto outcome = run_into(ctx, *job, req.client.get(), *request, out, extras);
        if (auto* e = std::get_if<ApiError>(&outcome)) return send_error(res, responses_error(*e, *request));
        const GenerateResult& result = std::get<GenerateResult>(outcome);
        out.finish(is_incomplete(result, out, extras));
        complete(*response, result, out, extras);
        return send_json(res, *response);
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_stream("text/event-stream", [&ctx, job, request, response, base,
                                         client = req.client](BodySink& sink) {
        SseWriter writer(sink);
        int64_t sequence = 0;
        auto emit = [&](json event) {
            event["sequence_number"] = sequence++;
            return writer.write("event: " + event["type"].get<std::string>() + "\n" + sse_event(event));
        };
        if (!emit({{"type", "response.created"}, {"response", *response}})) return;
        if (!emit({{"type", "response.in_progress"}, {"response", *response}})) return;
        KeepAlive keep_alive(writer, ctx.options.keep_alive_ms);
        ResponseOutput out(base, [&](json event) {
            keep_alive.first_token();
            return emit(std::move(event));
        });
        ChatRunExtras extras;
        auto outcome = run_into(ctx, *job, client.get(), *request, out, extras);
        keep_alive.first_token();
        if (auto* failed = std::get_if<ApiError>(&outcome)) {
            const ApiError e = responses_error(*failed, *request);
            emit({{"type", "error"},
                  {"code", e.code.empty() ? json() : json(e.code)},
                  {"message", e.message},
                  {"param", e.param.empty() ? json() : json(e.param)}});
            (*response)["status"] = "failed";
            (*response)["error"] = {{"code", e.http_status >= 500 ? std::string("server_error") : e.code},
                                    {"message", e.message}};
            (*response)["output"] = out.items();
            emit({{"type", "response.failed"}, {"response", *response}});
            return;
        }
        const GenerateResult& result = std::get<GenerateResult>(outcome);
        if (!out.finish(is_incomplete(result, out, extras))) return;
        complete(*response, result, out, extras);
        const bool incomplete = (*response)["status"] == "incomplete";
        emit({{"type", incomplete ? "response.incomplete" : "response.completed"}, {"response", *response}});
    });
}

void handle_stored_response(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
    (void)ctx;
    std::string id = req.path.substr(std::string_view("/v1/responses/").size());
    id = id.substr(0, id.find('/'));  // /v1/responses/{id}/input_items too
    if (id.size() > 100) id = id.substr(0, 100) + "...";
    send_error(res, ApiError{404,
                             "Response with id '" + id +
                                 "' not found: this server stores no responses (each POST /v1/responses is "
                                 "answered and not kept)",
                             "invalid_request_error", "", "not_found"});
}

}  // namespace sluice::server
