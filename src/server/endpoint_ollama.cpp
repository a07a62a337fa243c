// Ollama's API (what Open WebUI and many desktop apps speak): POST /api/chat and /api/generate
// translated into the OpenAI chat request the server already runs (chat_job.h: the same template,
// sampling, tools and structured output), answered in Ollama's shapes — one JSON object, or (the
// default, "stream": true) newline-delimited JSON objects ending with one whose "done" is true and
// which carries the counts and durations (nanoseconds). GET /api/tags, /api/ps, /api/version and
// POST /api/show describe the served model. Errors are Ollama's {"error": "..."} with the HTTP
// status; an error after a stream has started is its last line.
//
// Options mapped: temperature, top_p, top_k, min_p, seed, num_predict (max tokens; negative: up to
// the context), stop, repeat_penalty, presence_penalty, frequency_penalty. Options of Ollama's
// runner that do not apply here (num_ctx, num_thread, num_gpu, mirostat…) are ignored, as Ollama
// ignores unknown ones. "format": "json" or a JSON schema constrains the reply; "think" turns the
// template's thinking on or off; "images" are refused (this server runs text models).
#include <chrono>
#include <ctime>

#include "server/chat_job.h"
#include "server/endpoints.h"
#include "server/generation.h"
#include "server/transport.h"

namespace sluice::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// Ollama's version this API follows (clients read it to decide which fields exist).
constexpr const char* kOllamaApiVersion = "0.12.0";

std::string now_rfc3339() {
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[40];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count() % 1'000'000'000;
    char frac[16];
    std::snprintf(frac, sizeof frac, ".%09lldZ", static_cast<long long>(ns));
    return std::string(buf) + frac;
}

void send_ollama_error(HttpResponse& res, int status, const std::string& message) {
    send_json(res, {{"error", message}}, status);
}

void send_ollama_error(HttpResponse& res, const ApiError& e) {
    send_ollama_error(res, e.http_status, e.param.empty() ? e.message : e.message + " (" + e.param + ")");
}

std::string served_name(const ServerContext& ctx) {
    return ctx.options.model_id + ":latest";
}

json model_details(const ServerContext& ctx) {
    const ModelInfo& info = ctx.engine->info();
    return {{"parent_model", ""},    {"format", "sluice"},
            {"family", info.family}, {"families", json::array({info.family})},
            {"parameter_size", ""},  {"quantization_level", info.quantization}};
}

uint64_t model_bytes(const ServerContext& ctx) {
    const MemoryPlan& plan = ctx.engine->memory_plan();
    return plan.dense_bytes + plan.cache_bytes;
}

// Ollama's options and fields → the OpenAI chat body (parse_chat_request validates the result).
std::optional<ApiError> map_common(const ojson& in, ojson& out) {
    if (auto it = in.find("model"); it != in.end()) out["model"] = *it;
    if (auto it = in.find("options"); it != in.end() && !it->is_null()) {
        if (!it->is_object()) return invalid_request("'options' must be an object", "options");
        const ojson& o = *it;
        for (const char* same : {"temperature", "top_p", "top_k", "min_p", "seed", "stop", "presence_penalty",
                                 "frequency_penalty"})
            if (auto v = o.find(same); v != o.end() && !v->is_null()) out[same] = *v;
        if (auto v = o.find("repeat_penalty"); v != o.end() && !v->is_null()) out["repetition_penalty"] = *v;
        if (auto v = o.find("num_predict"); v != o.end() && !v->is_null()) {
            if (!v->is_number_integer())
                return invalid_request("'options.num_predict' must be an integer", "options");
            if (v->get<int64_t>() >= 0) out["max_tokens"] = *v;  // -1 / -2: as long as the context allows
        }
    }
    if (auto it = in.find("format"); it != in.end() && !it->is_null()) {
        if (it->is_string() && it->get<std::string>() == "json") {
            out["response_format"] = {{"type", "json_object"}};
        } else if (it->is_object()) {
            out["response_format"] = {{"type", "json_schema"},
                                      {"json_schema", {{"name", "format"}, {"schema", *it}}}};
        } else if (!(it->is_string() && it->get<std::string>().empty())) {
            return invalid_request("'format' must be \"json\" or a JSON schema object", "format");
        }
    }
    if (auto it = in.find("think"); it != in.end() && !it->is_null()) {
        // true / false, or a level ("low", "medium", "high"): most templates have on and off, gpt-oss's
        // the level (reasoning_effort_kwargs).
        const bool on =
            it->is_boolean() ? it->get<bool>() : (it->is_string() && !it->get<std::string>().empty());
        const std::string level = it->is_string() ? it->get<std::string>() : std::string();
        if (level == "low" || level == "medium" || level == "high")
            out["chat_template_kwargs"] = reasoning_effort_kwargs(level);
        else
            out["chat_template_kwargs"] = {{"enable_thinking", on}};
    }
    if (auto it = in.find("tools"); it != in.end() && !it->is_null()) out["tools"] = *it;
    if (auto it = in.find("images"); it != in.end() && it->is_array() && !it->empty())
        return invalid_request("images are not supported: this server runs a text model", "images");
    return std::nullopt;
}

// Ollama messages → OpenAI messages (tool calls' arguments become JSON text, tool results carry
// the call's id when the assistant turn before them made it).
std::variant<ojson, ApiError> map_messages(const ojson& messages) {
    if (!messages.is_array()) return invalid_request("'messages' must be an array", "messages");
    ojson out = ojson::array();
    std::vector<std::string> open_calls;
    int call_counter = 0;
    for (size_t i = 0; i < messages.size(); ++i) {
        const ojson& m = messages[i];
        const std::string param = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) return invalid_request("'" + param + "' must be an object", param);
        if (auto img = m.find("images"); img != m.end() && img->is_array() && !img->empty())
            return invalid_request("images are not supported: this server runs a text model",
                                   param + ".images");
        ojson msg = ojson::object();
        for (const char* key : {"role", "content"})
            if (auto v = m.find(key); v != m.end()) msg[key] = *v;
        if (!msg.contains("content")) msg["content"] = "";
        const std::string role = m.value("role", std::string());
        if (auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array() && !calls->empty()) {
            ojson tc = ojson::array();
            open_calls.clear();
            for (const ojson& c : *calls) {
                const ojson fn = c.value("function", ojson::object());
                const ojson args = fn.value("arguments", ojson::object());
                const std::string id = "call_" + std::to_string(call_counter++);
                open_calls.push_back(id);
                tc.push_back({{"id", id},
                              {"type", "function"},
                              {"function",
                               {{"name", fn.value("name", std::string())},
                                {"arguments", args.is_string() ? args.get<std::string>() : args.dump()}}}});
            }
            msg["tool_calls"] = std::move(tc);
        }
        if (role == "tool" && !open_calls.empty()) {
            msg["tool_call_id"] = open_calls.front();
            open_calls.erase(open_calls.begin());
        }
        out.push_back(std::move(msg));
    }
    return out;
}

// The counts and durations of Ollama's final object.
void add_stats(json& j, const GenerateResult& result, std::chrono::steady_clock::time_point start) {
    const GenerationStats& s = result.stats;
    const auto total =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start)
            .count();
    j["done_reason"] = result.finish_reason == FinishReason::kLength ? "length" : "stop";
    j["total_duration"] = total;
    j["load_duration"] = 0;
    j["prompt_eval_count"] = s.prompt_tokens;
    j["prompt_eval_duration"] = static_cast<int64_t>(s.prefill_ms * 1e6);
    j["eval_count"] = s.generated_tokens;
    j["eval_duration"] = static_cast<int64_t>(s.decode_ms * 1e6);
}

json ollama_tool_calls(const std::vector<ParsedToolCall>& calls) {
    json out = json::array();
    for (const ParsedToolCall& c : calls) {
        json args = json::parse(c.arguments, nullptr, false);
        if (args.is_discarded()) args = c.arguments;  // the grammar makes it JSON; a free reply may not
        out.push_back({{"function", {{"name", c.name}, {"arguments", std::move(args)}}}});
    }
    return out;
}

// Runs a prepared chat job in Ollama's response shape. `field`: "message" (/api/chat) or
// "response" (/api/generate).
void respond(ServerContext& ctx, const HttpRequest& req, HttpResponse& res, std::shared_ptr<ChatJob> job,
             bool stream, bool chat) {
    const auto start = std::chrono::steady_clock::now();
    const std::string name = job->request.params.model.empty() ? served_name(ctx) : job->request.params.model;
    auto piece = [chat](const ParsedDelta& d) {
        json j;
        if (chat) {
            j["message"] = {{"role", "assistant"}, {"content", d.content}};
            if (!d.reasoning.empty()) j["message"]["thinking"] = d.reasoning;
            if (!d.tool_calls.empty()) j["message"]["tool_calls"] = ollama_tool_calls(d.tool_calls);
        } else {
            j["response"] = d.content;
            if (!d.reasoning.empty()) j["thinking"] = d.reasoning;
        }
        return j;
    };
    if (!stream) {
        ParsedDelta all;
        auto outcome = run_chat(ctx, *job, req.client.get(), [&](const ParsedDelta& d) {
            all.append(d);
            return true;
        });
        if (auto* e = std::get_if<ApiError>(&outcome)) return send_ollama_error(res, *e);
        json j = {{"model", name}, {"created_at", now_rfc3339()}};
        j.update(piece(all));
        j["done"] = true;
        add_stats(j, std::get<GenerateResult>(outcome), start);
        return send_json(res, j);
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_stream("application/x-ndjson",
                   [&ctx, job, name, piece, start, client = req.client](BodySink& sink) {
                       auto line = [&](const json& j) { return sink.write(j.dump() + "\n"); };
                       bool open = true;
                       auto outcome = run_chat(ctx, *job, client.get(), [&](const ParsedDelta& d) {
                           json j = {{"model", name}, {"created_at", now_rfc3339()}};
                           j.update(piece(d));
                           j["done"] = false;
                           open = line(j);
                           return open;
                       });
                       if (!open) return;
                       if (auto* e = std::get_if<ApiError>(&outcome)) {
                           line({{"error", e->message}});
                           return;
                       }
                       json last = {{"model", name}, {"created_at", now_rfc3339()}};
                       last.update(piece(ParsedDelta{}));
                       last["done"] = true;
                       add_stats(last, std::get<GenerateResult>(outcome), start);
                       line(last);
                   });
}

// The request body, its "stream" (default true) and the translated OpenAI body's common part.
std::variant<ojson, ApiError> parse_ollama(const HttpRequest& req, bool* stream) {
    auto body = parse_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return *e;
    ojson& in = std::get<ojson>(body);
    *stream = true;
    if (auto it = in.find("stream"); it != in.end() && !it->is_null()) {
        if (!it->is_boolean()) return invalid_request("'stream' must be a boolean", "stream");
        *stream = it->get<bool>();
    }
    return std::move(in);
}

}  // namespace

void handle_ollama_chat(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
    bool stream = true;
    auto parsed = parse_ollama(req, &stream);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_ollama_error(res, *e);
    const ojson& in = std::get<ojson>(parsed);
    ojson body = ojson::object();
    auto messages = map_messages(in.value("messages", ojson::array()));
    if (auto* e = std::get_if<ApiError>(&messages)) return send_ollama_error(res, *e);
    body["messages"] = std::move(std::get<ojson>(messages));
    if (auto e = map_common(in, body)) return send_ollama_error(res, *e);
    auto job = prepare_chat(ctx, body, req.remote);
    if (auto* e = std::get_if<ApiError>(&job)) {
        if (e->code == "model_not_found") return send_ollama_error(res, 404, e->message);
        return send_ollama_error(res, *e);
    }
    respond(ctx, req, res, std::get<std::shared_ptr<ChatJob>>(job), stream, /*chat=*/true);
}

void handle_ollama_generate(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
    bool stream = true;
    auto parsed = parse_ollama(req, &stream);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_ollama_error(res, *e);
    const ojson& in = std::get<ojson>(parsed);
    auto prompt = in.find("prompt");
    if (prompt != in.end() && !prompt->is_null() && !prompt->is_string())
        return send_ollama_error(res, 400, "'prompt' must be a string");
    if (in.contains("raw") && in["raw"].is_boolean() && in["raw"].get<bool>())
        return send_ollama_error(res, 400,
                                 "\"raw\": true is not supported; use /v1/completions for raw prompts");
    const std::string text =
        prompt == in.end() || prompt->is_null() ? std::string() : prompt->get<std::string>();
    if (text.empty()) {
        // Ollama answers an empty prompt by loading the model: it is loaded.
        return send_json(res, {{"model", in.value("model", served_name(ctx))},
                               {"created_at", now_rfc3339()},
                               {"response", ""},
                               {"done", true},
                               {"done_reason", "load"}});
    }
    ojson body = ojson::object();
    ojson messages = ojson::array();
    if (auto sys = in.find("system"); sys != in.end() && sys->is_string() && !sys->get<std::string>().empty())
        messages.push_back({{"role", "system"}, {"content", *sys}});
    messages.push_back({{"role", "user"}, {"content", text}});
    body["messages"] = std::move(messages);
    if (auto e = map_common(in, body)) return send_ollama_error(res, *e);
    auto job = prepare_chat(ctx, body, req.remote);
    if (auto* e = std::get_if<ApiError>(&job)) {
        if (e->code == "model_not_found") return send_ollama_error(res, 404, e->message);
        return send_ollama_error(res, *e);
    }
    respond(ctx, req, res, std::get<std::shared_ptr<ChatJob>>(job), stream, /*chat=*/false);
}

void handle_ollama_tags(ServerContext& ctx, const HttpRequest&, HttpResponse& res) {
    const std::string name = served_name(ctx);
    json m = {{"name", name},
              {"model", name},
              {"modified_at", now_rfc3339()},
              {"size", model_bytes(ctx)},
              {"digest", ""},
              {"details", model_details(ctx)}};
    send_json(res, {{"models", json::array({m})}});
}

void handle_ollama_ps(ServerContext& ctx, const HttpRequest&, HttpResponse& res) {
    const std::string name = served_name(ctx);
    json m = {{"name", name},
              {"model", name},
              {"size", model_bytes(ctx)},
              {"digest", ""},
              {"details", model_details(ctx)},
              {"expires_at", "0001-01-01T00:00:00Z"},  // loaded for the server's lifetime
              {"size_vram", 0},
              {"context_length", ctx.engine->options().context_tokens}};
    send_json(res, {{"models", json::array({m})}});
}

void handle_ollama_version(ServerContext&, const HttpRequest&, HttpResponse& res) {
    send_json(res, {{"version", kOllamaApiVersion}});
}

void handle_ollama_show(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
    auto body = parse_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_ollama_error(res, *e);
    const ojson& in = std::get<ojson>(body);
    std::string model = in.value("model", in.value("name", std::string()));
    if (!model_matches(ctx, model) && ctx.options.strict_model_name)
        return send_ollama_error(res, 404, "model '" + model + "' not found");
    const ModelInfo& info = ctx.engine->info();
    json capabilities = json::array({"completion"});
    if (ctx.chat_template) capabilities.push_back("tools");
    json model_info = {{"general.architecture", info.family},
                       {info.family + ".context_length", ctx.engine->options().context_tokens},
                       {info.family + ".vocab_size", info.vocab_size},
                       {info.family + ".expert_count", info.n_experts},
                       {info.family + ".expert_used_count", info.experts_per_token}};
    send_json(res, {{"modelfile", ""},
                    {"parameters", ""},
                    {"template", ctx.chat_template ? ctx.chat_template->source() : std::string()},
                    {"details", model_details(ctx)},
                    {"model_info", std::move(model_info)},
                    {"capabilities", std::move(capabilities)},
                    {"modified_at", now_rfc3339()}});
}

}  // namespace sluice::server
