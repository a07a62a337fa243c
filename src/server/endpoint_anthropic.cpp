// Anthropic's Messages API (what Claude-style coding agents speak): POST /v1/messages translated into
// the OpenAI chat request the server already runs (chat_job.h), answered as a Message — content
// blocks "thinking", "text" and "tool_use", stop_reason end_turn / max_tokens / stop_sequence /
// tool_use, usage — or streamed as Anthropic's named SSE events: message_start, per block
// content_block_start / content_block_delta (text_delta, thinking_delta, input_json_delta) /
// content_block_stop, then message_delta (stop reason, output tokens) and message_stop. Errors are
// {"type": "error", "error": {"type", "message"}}.
//
// Mapping: system (string or text blocks) → a system message; user text blocks → the user turn,
// tool_result blocks → tool messages; assistant text and tool_use blocks → the assistant turn with
// tool_calls; tools (input_schema) → function tools; tool_choice auto / any / tool / none → auto /
// required / named / none (disable_parallel_tool_use → parallel_tool_calls false); stop_sequences →
// stop; thinking {"type": "enabled"} turns the template's thinking on (off otherwise, as Anthropic's
// default). Images and documents are refused (text models).
#include <chrono>

#include "server/chat_job.h"
#include "server/endpoints.h"
#include "server/generation.h"
#include "server/transport.h"

namespace sluice::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

json error_body(const std::string& type, const std::string& message) {
    return {{"type", "error"}, {"error", {{"type", type}, {"message", message}}}};
}

void send_anthropic_error(HttpResponse& res, const ApiError& e) {
    const std::string type = e.http_status == 404   ? "not_found_error"
                             : e.http_status == 401 ? "authentication_error"
                             : e.http_status == 429 ? "rate_limit_error"
                             : e.http_status >= 500 ? "api_error"
                                                    : "invalid_request_error";
    send_json(res, error_body(type, e.param.empty() ? e.message : e.param + ": " + e.message), e.http_status);
}

// Text of a content value: a string, or the concatenated "text" blocks (other kinds refused).
std::variant<std::string, ApiError> text_of(const ojson& content, const std::string& param) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) return invalid_request("must be a string or an array of content blocks", param);
    std::string text;
    for (size_t i = 0; i < content.size(); ++i) {
        const ojson& b = content[i];
        const std::string type = b.is_object() ? b.value("type", std::string()) : std::string();
        if (type == "text") {
            text += b.value("text", std::string());
        } else if (type == "image" || type == "document") {
            return invalid_request(type + " blocks are not supported: this server runs a text model",
                                   param + "[" + std::to_string(i) + "]");
        } else {
            return invalid_request("unexpected block type '" + type + "'",
                                   param + "[" + std::to_string(i) + "]");
        }
    }
    return text;
}

std::variant<ojson, ApiError> map_request(const ojson& in) {
    ojson out = ojson::object();
    if (auto it = in.find("model"); it != in.end()) out["model"] = *it;
    auto max_tokens = in.find("max_tokens");
    if (max_tokens == in.end() || !max_tokens->is_number_integer() || max_tokens->get<int64_t>() < 1)
        return invalid_request("a positive integer is required", "max_tokens");
    out["max_tokens"] = *max_tokens;
    for (const char* same : {"temperature", "top_p", "top_k"})
        if (auto v = in.find(same); v != in.end() && !v->is_null()) out[same] = *v;
    if (auto v = in.find("stop_sequences"); v != in.end() && !v->is_null()) out["stop"] = *v;
    bool thinking = false;
    if (auto t = in.find("thinking"); t != in.end() && t->is_object())
        thinking = t->value("type", std::string()) == "enabled";
    out["chat_template_kwargs"] = {{"enable_thinking", thinking}};

    ojson messages = ojson::array();
    if (auto sys = in.find("system"); sys != in.end() && !sys->is_null()) {
        auto text = text_of(*sys, "system");
        if (auto* e = std::get_if<ApiError>(&text)) return *e;
        messages.push_back({{"role", "system"}, {"content", std::get<std::string>(text)}});
    }
    auto msgs = in.find("messages");
    if (msgs == in.end() || !msgs->is_array() || msgs->empty())
        return invalid_request("a non-empty array of messages is required", "messages");
    for (size_t i = 0; i < msgs->size(); ++i) {
        const ojson& m = (*msgs)[i];
        const std::string param = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) return invalid_request("must be an object", param);
        const std::string role = m.value("role", std::string());
        if (role != "user" && role != "assistant")
            return invalid_request("role must be 'user' or 'assistant'", param + ".role");
        const ojson content = m.value("content", ojson());
        if (content.is_string()) {
            messages.push_back({{"role", role}, {"content", content}});
            continue;
        }
        if (!content.is_array())
            return invalid_request("must be a string or an array of content blocks", param + ".content");
        std::string text;
        ojson calls = ojson::array();
        for (size_t j = 0; j < content.size(); ++j) {
            const ojson& b = content[j];
            const std::string bp = param + ".content[" + std::to_string(j) + "]";
            const std::string type = b.is_object() ? b.value("type", std::string()) : std::string();
            if (type == "text") {
                text += b.value("text", std::string());
            } else if (type == "tool_use" && role == "assistant") {
                calls.push_back({{"id", b.value("id", std::string())},
                                 {"type", "function"},
                                 {"function",
                                  {{"name", b.value("name", std::string())},
                                   {"arguments", b.value("input", ojson::object()).dump()}}}});
            } else if (type == "tool_result" && role == "user") {
                auto result = text_of(b.value("content", ojson("")), bp + ".content");
                if (auto* e = std::get_if<ApiError>(&result)) return *e;
                messages.push_back({{"role", "tool"},
                                    {"tool_call_id", b.value("tool_use_id", std::string())},
                                    {"content", std::get<std::string>(result)}});
            } else if (type == "thinking" || type == "redacted_thinking") {
                // Earlier turns' reasoning is not fed back (the templates drop it too).
            } else if (type == "image" || type == "document") {
                return invalid_request(type + " blocks are not supported: this server runs a text model", bp);
            } else {
                return invalid_request("unexpected block type '" + type + "' in a " + role + " turn", bp);
            }
        }
        if (!text.empty() || !calls.empty() || role == "assistant") {
            ojson msg = {{"role", role}, {"content", text}};
            if (!calls.empty()) msg["tool_calls"] = std::move(calls);
            messages.push_back(std::move(msg));
        }
    }
    out["messages"] = std::move(messages);

    if (auto tools = in.find("tools"); tools != in.end() && tools->is_array() && !tools->empty()) {
        ojson t = ojson::array();
        for (size_t i = 0; i < tools->size(); ++i) {
            const ojson& tool = (*tools)[i];
            if (!tool.is_object())
                return invalid_request("must be an object", "tools[" + std::to_string(i) + "]");
            ojson fn = {{"name", tool.value("name", std::string())}};
            if (auto d = tool.find("description"); d != tool.end()) fn["description"] = *d;
            if (auto s = tool.find("input_schema"); s != tool.end()) fn["parameters"] = *s;
            t.push_back({{"type", "function"}, {"function", std::move(fn)}});
        }
        out["tools"] = std::move(t);
    }
    if (auto tc = in.find("tool_choice"); tc != in.end() && tc->is_object()) {
        const std::string type = tc->value("type", std::string());
        if (type == "auto") {
            out["tool_choice"] = "auto";
        } else if (type == "any") {
            out["tool_choice"] = "required";
        } else if (type == "none") {
            out["tool_choice"] = "none";
        } else if (type == "tool") {
            out["tool_choice"] = {{"type", "function"},
                                  {"function", {{"name", tc->value("name", std::string())}}}};
        } else {
            return invalid_request("type must be auto, any, tool or none", "tool_choice.type");
        }
        if (tc->value("disable_parallel_tool_use", false)) out["parallel_tool_calls"] = false;
    }
    return out;
}

std::string stop_reason(const GenerateResult& result, bool tool_use, const std::vector<std::string>& stops,
                        json* stop_sequence) {
    *stop_sequence = nullptr;
    if (tool_use) return "tool_use";
    if (result.finish_reason == FinishReason::kLength) return "max_tokens";
    for (const std::string& s : stops)
        if (s == result.stop_matched) {
            *stop_sequence = s;
            return "stop_sequence";
        }
    return "end_turn";
}

json tool_use_block(const std::string& id, const ParsedToolCall& call) {
    json input = json::parse(call.arguments, nullptr, false);
    if (input.is_discarded() || !input.is_object()) input = json::object();
    return {{"type", "tool_use"}, {"id", id}, {"name", call.name}, {"input", std::move(input)}};
}

// Anthropic counts the prompt as computed (input_tokens) plus read from the cache.
json usage(const GenerationStats& s) {
    return {{"input_tokens", s.prefilled_tokens},
            {"cache_read_input_tokens", s.prompt_tokens - s.prefilled_tokens},
            {"output_tokens", s.generated_tokens}};
}

}  // namespace

void handle_anthropic_messages(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
    auto body = parse_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_anthropic_error(res, *e);
    const ojson& in = std::get<ojson>(body);
    bool stream = false;
    if (auto s = in.find("stream"); s != in.end() && !s->is_null()) {
        if (!s->is_boolean())
            return send_anthropic_error(res, invalid_request("must be a boolean", "stream"));
        stream = s->get<bool>();
    }
    auto mapped = map_request(in);
    if (auto* e = std::get_if<ApiError>(&mapped)) return send_anthropic_error(res, *e);
    auto prepared = prepare_chat(ctx, std::get<ojson>(mapped), req.remote);
    if (auto* e = std::get_if<ApiError>(&prepared)) return send_anthropic_error(res, *e);
    std::shared_ptr<ChatJob> job = std::get<std::shared_ptr<ChatJob>>(prepared);
    const std::string id = "msg_" + job->id.substr(job->id.find('-') + 1);
    const std::string model = ctx.options.model_id;
    const std::vector<std::string> stops = job->request.params.generate.stop;

    if (!stream) {
        ParsedDelta all;
        auto outcome = run_chat(ctx, *job, req.client.get(), [&](const ParsedDelta& d) {
            all.append(d);
            return true;
        });
        if (auto* e = std::get_if<ApiError>(&outcome)) return send_anthropic_error(res, *e);
        const GenerateResult& result = std::get<GenerateResult>(outcome);
        json content = json::array();
        if (!all.reasoning.empty())
            content.push_back({{"type", "thinking"}, {"thinking", all.reasoning}, {"signature", ""}});
        if (!all.content.empty()) content.push_back({{"type", "text"}, {"text", all.content}});
        for (size_t i = 0; i < all.tool_calls.size(); ++i)
            content.push_back(
                tool_use_block("toolu_" + id.substr(4) + "_" + std::to_string(i), all.tool_calls[i]));
        json stop_sequence;
        const std::string reason = stop_reason(result, !all.tool_calls.empty(), stops, &stop_sequence);
        return send_json(res, {{"id", id},
                               {"type", "message"},
                               {"role", "assistant"},
                               {"model", model},
                               {"content", std::move(content)},
                               {"stop_reason", reason},
                               {"stop_sequence", stop_sequence},
                               {"usage", usage(result.stats)}});
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_stream("text/event-stream", [&ctx, job, id, model, stops, client = req.client](BodySink& sink) {
        SseWriter writer(sink);
        auto event = [&](const char* name, const json& data) {
            return writer.write(std::string("event: ") + name + "\ndata: " + data.dump() + "\n\n");
        };
        const auto input_tokens = static_cast<int64_t>(job->prompt.size());
        if (!event("message_start", {{"type", "message_start"},
                                     {"message",
                                      {{"id", id},
                                       {"type", "message"},
                                       {"role", "assistant"},
                                       {"model", model},
                                       {"content", json::array()},
                                       {"stop_reason", nullptr},
                                       {"stop_sequence", nullptr},
                                       {"usage", {{"input_tokens", input_tokens}, {"output_tokens", 0}}}}}}))
            return;
        KeepAlive keep_alive(writer, ctx.options.keep_alive_ms,
                             "event: ping\ndata: {\"type\": \"ping\"}\n\n");
        int index = -1;
        std::string open;  // the open block's type ("" none)
        size_t n_calls = 0;
        auto close_block = [&] {
            if (open.empty()) return true;
            open.clear();
            return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}});
        };
        auto start_block = [&](const std::string& type, json block) {
            if (!close_block()) return false;
            open = type;
            ++index;
            return event(
                "content_block_start",
                {{"type", "content_block_start"}, {"index", index}, {"content_block", std::move(block)}});
        };
        auto delta = [&](json d) {
            return event("content_block_delta",
                         {{"type", "content_block_delta"}, {"index", index}, {"delta", std::move(d)}});
        };
        auto on_delta = [&](const ParsedDelta& d) {
            keep_alive.first_token();
            if (!d.reasoning.empty()) {
                if (open != "thinking" && !start_block("thinking", {{"type", "thinking"}, {"thinking", ""}}))
                    return false;
                if (!delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}})) return false;
            }
            if (!d.content.empty()) {
                if (open != "text" && !start_block("text", {{"type", "text"}, {"text", ""}})) return false;
                if (!delta({{"type", "text_delta"}, {"text", d.content}})) return false;
            }
            for (const ParsedToolCall& c : d.tool_calls) {
                json block = tool_use_block("toolu_" + id.substr(4) + "_" + std::to_string(n_calls++), c);
                const std::string args = block["input"].dump();
                block["input"] = json::object();
                if (!start_block("tool_use", std::move(block))) return false;
                if (!delta({{"type", "input_json_delta"}, {"partial_json", args}})) return false;
                if (!close_block()) return false;
            }
            return writer.ok();
        };
        auto outcome = run_chat(ctx, *job, client.get(), on_delta);
        keep_alive.first_token();
        if (auto* e = std::get_if<ApiError>(&outcome)) {
            event("error",
                  error_body(e->http_status >= 500 ? "api_error" : "invalid_request_error", e->message));
            return;
        }
        const GenerateResult& result = std::get<GenerateResult>(outcome);
        close_block();
        json stop_sequence;
        const std::string reason = stop_reason(result, n_calls > 0, stops, &stop_sequence);
        event("message_delta", {{"type", "message_delta"},
                                {"delta", {{"stop_reason", reason}, {"stop_sequence", stop_sequence}}},
                                {"usage", {{"output_tokens", result.stats.generated_tokens}}}});
        event("message_stop", {{"type", "message_stop"}});
    });
}

}  // namespace sluice::server
