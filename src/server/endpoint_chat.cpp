// POST /v1/chat/completions: messages → the model's chat template → tokens → a pooled session;
// the reply is split into reasoning / content / tool calls (output_parser.h) and returned as one
// chat.completion object or streamed as chat.completion.chunk SSE events.
//
// Streaming order (what the openai clients expect): a first chunk with the role, content /
// reasoning_content / tool_calls deltas, a chunk with finish_reason, a usage chunk (choices: [])
// when stream_options.include_usage, then [DONE]. The first chunk is sent before queueing so
// the client sees the response start at once; keep-alive comments follow while queued/prefilling.
//
// tool_choice: "none" hides the tools from the template and disables parsing; "required" and a
// named function append a call's opening ("<tool_call>\n", DeepSeek's, harmony's) to the prompt and
// constrain the rest of the reply with a grammar (tool_calls.h) to calls of the allowed tools with
// arguments matching their parameters schemas, in the form the template prints calls in (Qwen3's
// JSON, the XML form of Qwen3.5 / Qwen3-Coder, DeepSeek's, harmony's), repeated when
// parallel_tool_calls (harmony: one call, <|call|> ends the generation) — a guarantee, not a hint.
// Earlier calls reach the template shaped as it prints them (ToolCallStyle).
// response_format json_object / json_schema constrain the whole reply the same way. Constrained
// replies carry no reasoning: a <think> the template opened is closed in the prompt; a harmony
// reply's prompt opens its final message.
#include <chrono>

#include "server/chat_job.h"
#include "server/endpoints.h"
#include "server/generation.h"
#include "server/output_parser.h"
#include "server/sse.h"
#include "server/tool_calls.h"
#include "server/transport.h"

namespace sluice::server {
namespace {

using json = nlohmann::json;

// response_format json_object / json_schema → the reply's grammar.
std::variant<std::shared_ptr<const Grammar>, ApiError> response_grammar(const ChatRequest& r) {
    GrammarBuilder b;
    GrammarBuilder::RuleId root = 0;
    if (r.response_format == ResponseFormat::kJsonObject) {
        root = b.add_json_object();
    } else {
        auto rule = b.add_json_schema(r.json_schema, "response_format.json_schema.schema");
        if (!rule) return schema_error(rule.status(), "response_format.json_schema.schema");
        root = *rule;
    }
    auto g = b.build(root);
    if (!g) return schema_error(g.status(), "response_format.json_schema.schema");
    return *g;
}

}  // namespace

std::variant<std::shared_ptr<ChatJob>, ApiError> prepare_chat(ServerContext& ctx,
                                                              const nlohmann::ordered_json& body,
                                                              const std::string& tenant) {
    if (!ctx.chat_template || !ctx.tokenizer)
        return invalid_request(
            "this model has no chat template or tokenizer; use /v1/completions with token ids", "",
            "no_chat_template");
    auto parsed = parse_chat_request(body, ctx.engine->default_sampling(), ctx.tokenizer->vocab_size());
    if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
    auto job = std::make_shared<ChatJob>();
    job->tenant = tenant;
    job->request = std::move(std::get<ChatRequest>(parsed));
    ChatRequest& r = job->request;
    if (auto e = check_model(ctx, r.params.model)) return *e;
    if (auto e = resolve_speculative(ctx, &r.params)) return *e;

    const bool tools_on = !r.tools.is_null() && r.tool_choice != ToolChoiceMode::kNone;
    const auto request_messages = body.find("messages");
    Expected<std::string> text = ctx.chat_template->render(
        messages_for_template(ctx.tool_call_style, r.messages,
                              request_messages == body.end() ? nlohmann::ordered_json() : *request_messages),
        tools_on ? tools_for_template(ctx.tool_call_style, r.tools) : nlohmann::ordered_json(), true,
        r.template_kwargs);
    if (!text.has_value())
        return invalid_request("the chat template failed on these messages: " + text.status().message(),
                               "messages", "template_error");
    std::string prompt_text = std::move(text).value();
    job->parse_tools = tools_on;
    job->harmony = ctx.tool_call_style.form == ToolCallForm::kHarmony;
    const bool forced_call =
        tools_on && (r.tool_choice == ToolChoiceMode::kRequired || r.tool_choice == ToolChoiceMode::kNamed);
    if (forced_call && r.response_format != ResponseFormat::kText)
        return invalid_request(
            "'response_format' " +
                std::string(r.response_format == ResponseFormat::kJsonObject ? "json_object"
                                                                             : "json_schema") +
                " cannot be combined with a forced tool call (tool_choice required or named)",
            "response_format", "invalid_value");
    std::shared_ptr<const Grammar> grammar;
    if (forced_call || r.response_format != ResponseFormat::kText) {
        auto g = forced_call ? forced_tool_call_grammar(r, ctx.tool_call_style) : response_grammar(r);
        if (auto* e = std::get_if<ApiError>(&g)) return *e;
        grammar = std::get<std::shared_ptr<const Grammar>>(g);
    }
    if (grammar) {
        // The grammar admits no reasoning: close a <think> the template opened; in harmony, open the
        // final message (a forced call's prefix opens its own).
        if (prompt_opens_reasoning(prompt_text)) prompt_text += "\n</think>\n\n";
        if (forced_call)
            job->forced_prefix = forced_call_prefix(r, ctx.tool_call_style);
        else if (job->harmony)
            job->forced_prefix = std::string(kHarmonyFinalOpen);
        job->parse_tools = forced_call;
        auto constraint =
            std::make_shared<TokenConstraint>(grammar, ctx.token_trie, ctx.engine->eos_token_ids());
        r.params.generate.logits_filter = [constraint](std::span<float> logits,
                                                       std::span<const int32_t> generated) {
            constraint->filter(logits, generated);
        };
        r.params.generate.filter_handles_speculation = true;
        r.params.generate.on_accept = [constraint](int32_t token) { constraint->accept(token); };
    }
    job->opens_reasoning = !grammar && prompt_opens_reasoning(prompt_text);
    prompt_text += job->forced_prefix;
    if (auto e = fit_context_text(ctx, prompt_text)) return *e;
    job->prompt = ctx.tokenizer->encode(prompt_text, /*parse_special=*/true);
    if (auto e = fit_context(ctx, job->prompt.size(), &r.params)) return *e;
    job->id = ctx.new_id("chatcmpl-");
    job->created = static_cast<int64_t>(
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    return job;
}

std::variant<GenerateResult, ApiError> run_chat(ServerContext& ctx, ChatJob& job, Client* client,
                                                const std::function<bool(const ParsedDelta&)>& on_delta,
                                                ChatRunExtras* extras) {
    OutputParser parser(job.opens_reasoning, job.parse_tools, job.request.tools, job.harmony);
    ParsedDelta first = parser.feed(job.forced_prefix);  // a forced call's opening: held by the parser
    if (!first.empty() && !on_delta(first))
        return ApiError{503, "the client stopped the reply", "server_error", "", "cancelled"};
    GenerationHooks hooks;
    hooks.client = client;
    hooks.tenant = job.tenant;
    hooks.kv_bits = job.request.params.kv_bits.value_or(0);
    hooks.on_token = [&](const TokenEvent& e) {
        if (extras && extras->on_token) extras->on_token(e);
        const bool was_reasoning = parser.in_reasoning();
        ParsedDelta d = parser.feed(e.text);
        // A token that opens, continues or closes the reasoning is a reasoning token.
        if (extras && (was_reasoning || parser.in_reasoning())) ++extras->reasoning_tokens;
        return d.empty() || on_delta(d);
    };
    auto outcome = run_generation(ctx, job.prompt, job.request.params.generate, hooks);
    if (auto* e = std::get_if<ApiError>(&outcome)) return *e;
    ParsedDelta tail = parser.finish();
    if (!tail.empty()) on_delta(tail);
    if (extras) extras->cut_call = parser.cut_call();
    return std::get<GenerateResult>(std::move(outcome));
}

namespace {

json tool_call_json(const ChatJob& job, const ParsedToolCall& call, size_t index, bool with_index) {
    json j = {{"id", "call_" + job.id.substr(job.id.find('-') + 1) + "_" + std::to_string(index)},
              {"type", "function"},
              {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
    if (with_index) j["index"] = index;
    return j;
}

// With complete tool calls the reply ends as "tool_calls" — also when the token limit cut a further
// call short (the parser drops that one: parallel forced calls repeat until a model stops them, and
// the complete ones are what a client runs); a cut in free text is "length".
std::string finish_reason(const GenerateResult& result, bool had_tool_calls, bool cut_call) {
    if (had_tool_calls && (result.finish_reason != FinishReason::kLength || cut_call)) return "tool_calls";
    return result.finish_reason == FinishReason::kLength ? "length" : "stop";
}

// The whole reply, or the error (its own HTTP status: the response has not started).
std::variant<json, ApiError> respond_whole(ServerContext& ctx, const std::shared_ptr<ChatJob>& job,
                                           Client* client) {
    OutputParser parser(job->opens_reasoning, job->parse_tools, job->request.tools, job->harmony);
    ParsedDelta all;
    auto absorb = [&](const ParsedDelta& d) { all.append(d); };
    absorb(parser.feed(job->forced_prefix));
    json logprobs = json::array();
    const bool want_logprobs = job->request.params.logprobs;
    GenerationHooks hooks;
    hooks.client = client;
    hooks.tenant = job->tenant;
    hooks.kv_bits = job->request.params.kv_bits.value_or(0);
    hooks.on_token = [&](const TokenEvent& e) {
        absorb(parser.feed(e.text));
        if (want_logprobs) logprobs.push_back(logprob_json(ctx.tokenizer.get(), e));
        return true;
    };
    auto outcome = run_generation(ctx, job->prompt, job->request.params.generate, hooks);
    if (auto* e = std::get_if<ApiError>(&outcome)) return *e;
    const GenerateResult& result = std::get<GenerateResult>(outcome);
    absorb(parser.finish());

    json message = {{"role", "assistant"}, {"content", all.content}};
    if (!all.reasoning.empty()) message["reasoning_content"] = all.reasoning;
    if (!all.tool_calls.empty()) {
        json calls = json::array();
        for (size_t i = 0; i < all.tool_calls.size(); ++i)
            calls.push_back(tool_call_json(*job, all.tool_calls[i], i, false));
        message["tool_calls"] = std::move(calls);
        if (all.content.empty()) message["content"] = nullptr;
    }
    json choice = {{"index", 0},
                   {"message", std::move(message)},
                   {"logprobs", want_logprobs ? json{{"content", std::move(logprobs)}} : json()},
                   {"finish_reason", finish_reason(result, !all.tool_calls.empty(), parser.cut_call())}};
    return json{{"id", job->id},
                {"object", "chat.completion"},
                {"created", job->created},
                {"model", ctx.options.model_id},
                {"choices", json::array({std::move(choice)})},
                {"usage", usage_json(result.stats)}};
}

// Runs on the request's thread as the response's body producer, after the 200 headers.
// One choice streamed as chunks of choice `index` (its role chunk first, its finish_reason chunk
// last). Returns its stats, or nothing when the client left or the generation failed (the error event
// is written then).
std::optional<GenerationStats> stream_choice(ServerContext& ctx, const std::shared_ptr<ChatJob>& job,
                                             Client* client, SseWriter& writer, int index,
                                             const std::string& id, int64_t created) {
    const bool include_usage = job->request.params.include_usage;
    auto chunk = [&](json delta, json finish, json logprobs) {
        json c = {{"id", id},
                  {"object", "chat.completion.chunk"},
                  {"created", created},
                  {"model", ctx.options.model_id},
                  {"choices", json::array({{{"index", index},
                                            {"delta", std::move(delta)},
                                            {"logprobs", std::move(logprobs)},
                                            {"finish_reason", std::move(finish)}}})}};
        if (include_usage) c["usage"] = nullptr;
        return writer.event(c);
    };
    if (!chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)) return std::nullopt;

    OutputParser parser(job->opens_reasoning, job->parse_tools, job->request.tools, job->harmony);
    size_t n_tool_calls = 0;
    auto delta_json = [&](const ParsedDelta& d) {
        json delta = json::object();
        if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
        if (!d.content.empty()) delta["content"] = d.content;
        if (!d.tool_calls.empty()) {
            json calls = json::array();
            for (const auto& c : d.tool_calls) calls.push_back(tool_call_json(*job, c, n_tool_calls++, true));
            delta["tool_calls"] = std::move(calls);
        }
        return delta;
    };
    ParsedDelta pending = parser.feed(job->forced_prefix);  // held until the call closes
    (void)pending;

    KeepAlive keep_alive(writer, ctx.options.keep_alive_ms);
    const bool want_logprobs = job->request.params.logprobs;
    GenerationHooks hooks;
    hooks.client = client;
    hooks.tenant = job->tenant;
    hooks.kv_bits = job->request.params.kv_bits.value_or(0);
    hooks.on_token = [&](const TokenEvent& e) {
        keep_alive.first_token();
        ParsedDelta d = parser.feed(e.text);
        json lp =
            want_logprobs ? json{{"content", json::array({logprob_json(ctx.tokenizer.get(), e)})}} : json();
        if (d.empty() && !want_logprobs) return writer.ok();
        return chunk(delta_json(d), nullptr, std::move(lp));
    };
    auto outcome = run_generation(ctx, job->prompt, job->request.params.generate, hooks);
    keep_alive.first_token();
    if (auto* e = std::get_if<ApiError>(&outcome)) {
        writer.event(e->to_json());
        return std::nullopt;
    }
    const GenerateResult& result = std::get<GenerateResult>(outcome);
    ParsedDelta tail = parser.finish();
    if (!tail.empty()) chunk(delta_json(tail), nullptr, nullptr);
    if (!chunk(json::object(), finish_reason(result, n_tool_calls > 0, parser.cut_call()), nullptr))
        return std::nullopt;
    return result.stats;
}

// The usage of n choices of one prompt: the prompt counted once (the first choice's cache use).
void add_choice_stats(GenerationStats& total, const GenerationStats& s, bool first) {
    if (first) {
        total = s;
        return;
    }
    total.generated_tokens += s.generated_tokens;
    total.draft_tokens += s.draft_tokens;
    total.accepted_tokens += s.accepted_tokens;
}

// Every choice of the request streamed in turn, then the usage chunk and [DONE].
void stream(ServerContext& ctx, const std::shared_ptr<ChatJob>& first,
            const std::function<std::shared_ptr<ChatJob>(int)>& choice_job, Client* client, BodySink& sink) {
    SseWriter writer(sink);
    GenerationStats total;
    for (int i = 0; i < first->request.params.n; ++i) {
        const std::shared_ptr<ChatJob> job = i == 0 ? first : choice_job(i);
        auto stats = stream_choice(ctx, job, client, writer, i, first->id, first->created);
        if (!stats) {
            writer.write(kSseDone);
            return;
        }
        add_choice_stats(total, *stats, i == 0);
    }
    if (first->request.params.include_usage)
        writer.event({{"id", first->id},
                      {"object", "chat.completion.chunk"},
                      {"created", first->created},
                      {"model", ctx.options.model_id},
                      {"choices", json::array()},
                      {"usage", usage_json(total)}});
    writer.write(kSseDone);
}

}  // namespace

void handle_chat_completions(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
    auto body = parse_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
    auto prepared = prepare_chat(ctx, std::get<nlohmann::ordered_json>(body), req.remote);
    if (auto* e = std::get_if<ApiError>(&prepared)) return send_error(res, *e);
    auto job = std::get<std::shared_ptr<ChatJob>>(prepared);
    // Choice i > 0 (n > 1): the request prepared again — a grammar's state is per generation — with
    // seed + i when it has a seed, generated after the choices before it.
    auto choice_job = [&ctx, body = std::get<nlohmann::ordered_json>(body), remote = req.remote](int i) {
        auto again = prepare_chat(ctx, body, remote);  // validated once already: it prepares again
        auto j = std::get<std::shared_ptr<ChatJob>>(again);
        std::optional<uint64_t>& seed = j->request.params.generate.sampling.seed;
        if (seed) *seed += static_cast<uint64_t>(i);
        return j;
    };
    if (!job->request.params.stream) {
        json combined;
        GenerationStats total;
        for (int i = 0; i < job->request.params.n; ++i) {
            auto outcome = respond_whole(ctx, i == 0 ? job : choice_job(i), req.client.get());
            if (auto* e = std::get_if<ApiError>(&outcome)) return send_error(res, *e);
            json& one = std::get<json>(outcome);
            if (i == 0) {
                combined = std::move(one);
                continue;
            }
            json choice = std::move(one["choices"][0]);
            choice["index"] = i;
            combined["choices"].push_back(std::move(choice));
            combined["usage"]["completion_tokens"] = combined["usage"]["completion_tokens"].get<int64_t>() +
                                                     one["usage"]["completion_tokens"].get<int64_t>();
            combined["usage"]["total_tokens"] = combined["usage"]["total_tokens"].get<int64_t>() +
                                                one["usage"]["completion_tokens"].get<int64_t>();
        }
        return send_json(res, combined);
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_stream("text/event-stream", [&ctx, job, choice_job, client = req.client](BodySink& sink) {
        stream(ctx, job, choice_job, client.get(), sink);
    });
}

}  // namespace sluice::server
