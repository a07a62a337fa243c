// Validation of OpenAI request bodies (see api.h). Every rejection names the field
// ("messages[2].content[0].type") and what was expected, the way OpenAI's own errors do.
#include "server/api.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

namespace sluice::server {
namespace {

using ojson = nlohmann::ordered_json;

std::string type_name(const ojson& v) {
    switch (v.type()) {
        case ojson::value_t::null: return "null";
        case ojson::value_t::boolean: return "boolean";
        case ojson::value_t::string: return "string";
        case ojson::value_t::array: return "array";
        case ojson::value_t::object: return "object";
        case ojson::value_t::number_float: return "number";
        default: return "integer";
    }
}

ApiError out_of_range(const std::string& param, const std::string& range, const ojson& got) {
    return invalid_request("'" + param + "' must be " + range + ", got " + got.dump().substr(0, 64), param,
                           "invalid_value");
}

// A number field within [lo, hi]; absent or null leaves `out` unchanged.
std::optional<ApiError> read_number(const ojson& body, const char* key, double lo, double hi, float* out) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) return wrong_type(key, "a number", *it);
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < lo || v > hi)
        return out_of_range(key, "between " + ojson(lo).dump() + " and " + ojson(hi).dump(), *it);
    *out = static_cast<float>(v);
    return std::nullopt;
}

std::optional<ApiError> read_integer(const ojson& body, const char* key, int64_t lo, int64_t hi,
                                     std::optional<int64_t>* out) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (it->is_number_float()) {
        const double d = it->get<double>();
        if (d != std::floor(d)) return wrong_type(key, "an integer", *it);
    } else if (!it->is_number_integer()) {
        return wrong_type(key, "an integer", *it);
    }
    const double d = it->get<double>();
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi))
        return out_of_range(key, "between " + std::to_string(lo) + " and " + std::to_string(hi), *it);
    *out = it->is_number_unsigned() ? static_cast<int64_t>(it->get<uint64_t>()) : it->get<int64_t>();
    return std::nullopt;
}

std::optional<ApiError> read_bool(const ojson& body, const char* key, bool* out) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) return wrong_type(key, "a boolean", *it);
    *out = it->get<bool>();
    return std::nullopt;
}

#define SLUICE_API_CHECK(expr)                            \
    do {                                                  \
        if (auto api_error_ = (expr)) return *api_error_; \
    } while (0)

std::optional<ApiError> parse_common(const ojson& body, const SamplingParams& defaults, int32_t vocab_size,
                                     CommonParams* p) {
    auto model = body.find("model");
    if (model != body.end() && !model->is_null()) {
        if (!model->is_string()) return wrong_type("model", "a string", *model);
        p->model = model->get<std::string>();
    }
    SamplingParams& s = p->generate.sampling;
    s = defaults;
    SLUICE_API_CHECK(read_number(body, "temperature", 0, 100, &s.temperature));
    SLUICE_API_CHECK(read_number(body, "top_p", 0, 1, &s.top_p));
    if (s.top_p <= 0 && body.contains("top_p")) return out_of_range("top_p", "in (0, 1]", body.at("top_p"));
    SLUICE_API_CHECK(read_number(body, "min_p", 0, 1, &s.min_p));
    SLUICE_API_CHECK(read_number(body, "repetition_penalty", 1e-3, 100, &s.repetition_penalty));
    SLUICE_API_CHECK(read_number(body, "presence_penalty", -2, 2, &s.presence_penalty));
    SLUICE_API_CHECK(read_number(body, "frequency_penalty", -2, 2, &s.frequency_penalty));
    std::optional<int64_t> v;
    SLUICE_API_CHECK(read_integer(body, "top_k", -1, std::numeric_limits<int32_t>::max(), &v));
    if (v) s.top_k = *v < 0 ? 0 : static_cast<int32_t>(*v);
    v.reset();
    SLUICE_API_CHECK(read_integer(body, "seed", std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::max(), &v));
    if (v) s.seed = static_cast<uint64_t>(*v);
    v.reset();
    SLUICE_API_CHECK(read_integer(body, "kv_bits", 0, 64, &v));
    if (v) {
        if (*v != 32 && *v != 16 && *v != 8 && *v != 4 && *v != 3)
            return invalid_request(
                "'kv_bits' must be 32, 16, 8, 4 or 3 (bits per element of the KV cache), got " +
                    std::to_string(*v),
                "kv_bits", "invalid_value");
        p->kv_bits = static_cast<int>(*v);
    }
    v.reset();
    SLUICE_API_CHECK(read_integer(body, "n", 1, kMaxChoices, &v));
    if (v) p->n = static_cast<int>(*v);

    if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) return wrong_type("logit_bias", "an object of token id → bias", *it);
        s.logit_bias.clear();
        for (auto& [key, bias] : it->items()) {
            const std::string param = "logit_bias." + key;
            char* end = nullptr;
            const long long id = std::strtoll(key.c_str(), &end, 10);
            if (key.empty() || *end != '\0' || id < 0 || id >= vocab_size)
                return invalid_request("'logit_bias' key '" + key + "' is not a token id in [0, " +
                                           std::to_string(vocab_size) + ")",
                                       "logit_bias", "invalid_value");
            if (!bias.is_number()) return wrong_type(param, "a number", bias);
            const double b = bias.get<double>();
            if (!(b >= -100 && b <= 100)) return out_of_range(param, "between -100 and 100", bias);
            s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(b));
        }
    }

    if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
        if (it->is_string()) {
            if (!it->get<std::string>().empty()) p->generate.stop.push_back(it->get<std::string>());
        } else if (it->is_array()) {
            if (it->size() > 16) return out_of_range("stop", "at most 16 strings", ojson(it->size()));
            for (size_t i = 0; i < it->size(); ++i) {
                const ojson& e = (*it)[i];
                if (!e.is_string()) return wrong_type("stop[" + std::to_string(i) + "]", "a string", e);
                if (!e.get<std::string>().empty()) p->generate.stop.push_back(e.get<std::string>());
            }
        } else {
            return wrong_type("stop", "a string or an array of strings", *it);
        }
    }

    v.reset();
    SLUICE_API_CHECK(read_integer(body, "max_tokens", 0, std::numeric_limits<int32_t>::max(), &v));
    std::optional<int64_t> mct;
    SLUICE_API_CHECK(
        read_integer(body, "max_completion_tokens", 0, std::numeric_limits<int32_t>::max(), &mct));
    p->max_tokens = mct ? mct : v;

    if (auto it = body.find("speculative"); it != body.end() && !it->is_null()) {
        if (it->is_boolean()) {
            p->speculative = it->get<bool>();
        } else if (it->is_object()) {
            p->speculative = true;
            for (auto& [key, value] : it->items()) {
                const std::string param = "speculative." + key;
                if (key != "tokens")
                    return invalid_request("'" + param + "' is not a known field (only 'tokens')", param,
                                           "unknown_parameter");
                if (value.is_string() && value.get<std::string>() == "auto") {
                    p->spec_auto = true;
                } else if (value.is_number_integer()) {
                    const int64_t k = value.is_number_unsigned() ? static_cast<int64_t>(value.get<uint64_t>())
                                                                 : value.get<int64_t>();
                    if (k < 1 || k > 16) return out_of_range(param, "between 1 and 16", value);
                    p->spec_tokens = static_cast<int>(k);
                } else {
                    return wrong_type(param, "an integer 1..16 or \"auto\"", value);
                }
            }
        } else {
            return wrong_type("speculative", "a boolean or an object", *it);
        }
    }

    SLUICE_API_CHECK(read_bool(body, "stream", &p->stream));
    if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) return wrong_type("stream_options", "an object", *it);
        if (auto u = it->find("include_usage"); u != it->end() && !u->is_null()) {
            if (!u->is_boolean()) return wrong_type("stream_options.include_usage", "a boolean", *u);
            p->include_usage = u->get<bool>();
        }
    }
    return std::nullopt;
}

// "a" | null | [{type: "text", text}] → a string.
std::variant<std::string, ApiError> flatten_content(const ojson& content, const std::string& param) {
    if (content.is_null()) return std::string();
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) return wrong_type(param, "a string, null or an array of content parts", content);
    std::string out;
    for (size_t i = 0; i < content.size(); ++i) {
        const ojson& part = content[i];
        const std::string pp = param + "[" + std::to_string(i) + "]";
        if (!part.is_object()) return wrong_type(pp, "a content part object", part);
        auto type = part.find("type");
        if (type == part.end() || !type->is_string())
            return invalid_request("'" + pp + ".type' is required and must be a string", pp + ".type",
                                   "invalid_type");
        if (*type != "text")
            return invalid_request("content part type '" + type->get<std::string>() + "' in '" + pp +
                                       "' is not supported by this model (only 'text')",
                                   pp + ".type", "unsupported_content_type");
        auto text = part.find("text");
        if (text == part.end() || !text->is_string())
            return invalid_request("'" + pp + ".text' is required and must be a string", pp + ".text",
                                   "invalid_type");
        if (!out.empty()) out += "\n";
        out += text->get<std::string>();
    }
    return out;
}

std::optional<ApiError> parse_messages(const ojson& body, ojson* out) {
    auto it = body.find("messages");
    if (it == body.end())
        return invalid_request("'messages' is required", "messages", "missing_required_parameter");
    if (!it->is_array()) return wrong_type("messages", "an array", *it);
    if (it->empty()) return invalid_request("'messages' must not be empty", "messages", "invalid_value");
    for (size_t i = 0; i < it->size(); ++i) {
        const ojson& m = (*it)[i];
        const std::string param = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) return wrong_type(param, "an object", m);
        auto role = m.find("role");
        if (role == m.end())
            return invalid_request("'" + param + ".role' is required", param + ".role",
                                   "missing_required_parameter");
        if (!role->is_string()) return wrong_type(param + ".role", "a string", *role);
        std::string r = role->get<std::string>();
        if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
            return invalid_request(
                "'" + param + ".role' must be one of system, developer, user, assistant, tool; got '" + r +
                    "'",
                param + ".role", "invalid_value");
        ojson msg = ojson::object();
        msg["role"] = r == "developer" ? "system" : r;  // Qwen templates know no developer role
        auto content = m.find("content");
        if (content == m.end() && r != "assistant")
            return invalid_request("'" + param + ".content' is required", param + ".content",
                                   "missing_required_parameter");
        auto flat = flatten_content(content == m.end() ? ojson() : *content, param + ".content");
        if (auto* e = std::get_if<ApiError>(&flat)) return *e;
        msg["content"] = std::get<std::string>(flat);
        if (auto rc = m.find("reasoning_content"); rc != m.end() && !rc->is_null()) {
            if (!rc->is_string()) return wrong_type(param + ".reasoning_content", "a string", *rc);
            msg["reasoning_content"] = *rc;
        }
        if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
            if (r != "assistant")
                return invalid_request("'" + param + ".tool_calls' is only allowed on assistant messages",
                                       param + ".tool_calls", "invalid_value");
            if (!tc->is_array()) return wrong_type(param + ".tool_calls", "an array", *tc);
            ojson calls = ojson::array();
            for (size_t j = 0; j < tc->size(); ++j) {
                const ojson& call = (*tc)[j];
                const std::string cp = param + ".tool_calls[" + std::to_string(j) + "]";
                if (!call.is_object()) return wrong_type(cp, "an object", call);
                auto fn = call.find("function");
                if (fn == call.end() || !fn->is_object())
                    return invalid_request("'" + cp + ".function' must be an object", cp + ".function",
                                           "invalid_type");
                auto name = fn->find("name");
                if (name == fn->end() || !name->is_string())
                    return invalid_request("'" + cp + ".function.name' must be a string",
                                           cp + ".function.name", "invalid_type");
                ojson args = ojson::object();
                if (auto a = fn->find("arguments"); a != fn->end() && !a->is_null()) {
                    if (a->is_string()) {
                        // Templates print arguments with tojson; a JSON string argument is parsed
                        // so that it is not printed as a quoted string.
                        ojson parsed = ojson::parse(a->get<std::string>(), nullptr, false);
                        args = parsed.is_discarded() ? *a : parsed;
                    } else {
                        args = *a;
                    }
                }
                ojson out_call = ojson::object();
                if (auto id = call.find("id"); id != call.end() && id->is_string()) out_call["id"] = *id;
                out_call["type"] = "function";
                out_call["function"] = {{"name", *name}, {"arguments", args}};
                calls.push_back(std::move(out_call));
            }
            msg["tool_calls"] = std::move(calls);
        }
        if (auto id = m.find("tool_call_id"); id != m.end() && !id->is_null()) {
            if (!id->is_string()) return wrong_type(param + ".tool_call_id", "a string", *id);
            msg["tool_call_id"] = *id;
        }
        if (auto name = m.find("name"); name != m.end() && name->is_string()) msg["name"] = *name;
        out->push_back(std::move(msg));
    }
    return std::nullopt;
}

std::optional<ApiError> parse_tools(const ojson& body, ChatRequest* r) {
    if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) return wrong_type("tools", "an array", *it);
        for (size_t i = 0; i < it->size(); ++i) {
            const ojson& t = (*it)[i];
            const std::string param = "tools[" + std::to_string(i) + "]";
            if (!t.is_object()) return wrong_type(param, "an object", t);
            auto type = t.find("type");
            if (type == t.end() || *type != "function")
                return invalid_request("'" + param + ".type' must be 'function'", param + ".type",
                                       "invalid_value");
            auto fn = t.find("function");
            if (fn == t.end() || !fn->is_object())
                return invalid_request("'" + param + ".function' must be an object", param + ".function",
                                       "invalid_type");
            auto name = fn->find("name");
            if (name == fn->end() || !name->is_string() || name->get<std::string>().empty())
                return invalid_request("'" + param + ".function.name' must be a non-empty string",
                                       param + ".function.name", "invalid_value");
            if (!valid_function_name(name->get<std::string>()))
                return invalid_request(
                    "'" + param + ".function.name' must be 1 to 64 letters, digits, '_' or '-'",
                    param + ".function.name", "invalid_value");
            if (auto params = fn->find("parameters");
                params != fn->end() && !params->is_null() && !params->is_object())
                return wrong_type(param + ".function.parameters", "an object (a JSON Schema)", *params);
        }
        if (!it->empty()) r->tools = *it;
    }
    if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
        if (it->is_string()) {
            const std::string c = it->get<std::string>();
            if (c == "auto")
                r->tool_choice = ToolChoiceMode::kAuto;
            else if (c == "none")
                r->tool_choice = ToolChoiceMode::kNone;
            else if (c == "required")
                r->tool_choice = ToolChoiceMode::kRequired;
            else
                return invalid_request(
                    "'tool_choice' must be 'auto', 'none', 'required' or {type: 'function', function: "
                    "{name}}; got '" +
                        c + "'",
                    "tool_choice", "invalid_value");
        } else if (it->is_object()) {
            auto fn = it->find("function");
            auto name = fn != it->end() && fn->is_object() ? fn->find("name") : it->end();
            if (fn == it->end() || !fn->is_object() || name == fn->end() || !name->is_string())
                return invalid_request("'tool_choice.function.name' must be a string", "tool_choice",
                                       "invalid_value");
            r->tool_choice = ToolChoiceMode::kNamed;
            r->tool_choice_name = name->get<std::string>();
        } else {
            return wrong_type("tool_choice", "a string or an object", *it);
        }
        if (r->tool_choice == ToolChoiceMode::kRequired || r->tool_choice == ToolChoiceMode::kNamed) {
            if (r->tools.is_null())
                return invalid_request("'tool_choice' requires 'tools'", "tool_choice", "invalid_value");
        }
        if (r->tool_choice == ToolChoiceMode::kNamed) {
            bool found = false;
            for (const auto& t : r->tools) found |= t["function"]["name"] == r->tool_choice_name;
            if (!found)
                return invalid_request(
                    "'tool_choice' names function '" + r->tool_choice_name + "', which is not in 'tools'",
                    "tool_choice", "invalid_value");
        }
    }
    return std::nullopt;
}

}  // namespace

nlohmann::json ApiError::to_json() const {
    nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
    if (!param.empty()) e["param"] = param;
    if (!code.empty()) e["code"] = code;
    return {{"error", e}};
}

ApiError invalid_request(std::string message, std::string param, std::string code) {
    return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

ApiError wrong_type(const std::string& param, const char* expected, const nlohmann::ordered_json& got) {
    return invalid_request("'" + param + "' must be " + expected + ", got " + type_name(got) + " (" +
                               got.dump().substr(0, 64) + ")",
                           param, "invalid_type");
}

ojson reasoning_effort_kwargs(std::string_view effort) {
    const char* level = effort == "none" || effort == "minimal" || effort == "low" ? "low"
                        : effort == "medium"                                       ? "medium"
                                                                                   : "high";
    return {{"enable_thinking", effort != "none"}, {"reasoning_effort", level}};
}

bool valid_function_name(std::string_view name) {
    return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
}

std::variant<nlohmann::ordered_json, ApiError> parse_body(const std::string& body) {
    // Depth pre-scan: nlohmann's parser recurses once per nesting level.
    int depth = 0;
    bool in_string = false, escaped = false;
    for (char c : body) {
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > kMaxJsonDepth)
                return invalid_request(
                    "the request body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels", "",
                    "invalid_json");
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    ojson parsed = ojson::parse(body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
        try {
            [[maybe_unused]] ojson again = ojson::parse(body);
        } catch (const std::exception& e) {
            return invalid_request(std::string("the request body is not valid JSON: ") + e.what(), "",
                                   "invalid_json");
        }
        return invalid_request("the request body is not valid JSON", "", "invalid_json");
    }
    if (!parsed.is_object())
        return invalid_request("the request body must be a JSON object, got " + type_name(parsed), "",
                               "invalid_json");
    return parsed;
}

std::variant<ChatRequest, ApiError> parse_chat_request(const nlohmann::ordered_json& body,
                                                       const SamplingParams& defaults, int32_t vocab_size) {
    ChatRequest r;
    SLUICE_API_CHECK(parse_messages(body, &r.messages));
    SLUICE_API_CHECK(parse_common(body, defaults, vocab_size, &r.params));
    SLUICE_API_CHECK(read_bool(body, "logprobs", &r.params.logprobs));
    std::optional<int64_t> top;
    SLUICE_API_CHECK(read_integer(body, "top_logprobs", 0, 20, &top));
    if (top && *top > 0 && !r.params.logprobs)
        return invalid_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs",
                               "invalid_value");
    if (top) r.params.generate.top_logprobs = static_cast<int32_t>(*top);
    SLUICE_API_CHECK(parse_tools(body, &r));
    if (auto it = body.find("reasoning_effort"); it != body.end() && !it->is_null()) {
        std::string list;
        for (const char* e : kReasoningEfforts) list += (list.empty() ? "" : ", ") + std::string(e);
        const bool known =
            it->is_string() && std::any_of(std::begin(kReasoningEfforts), std::end(kReasoningEfforts),
                                           [&](const char* e) { return *it == e; });
        if (!it->is_string()) return wrong_type("reasoning_effort", ("one of " + list).c_str(), *it);
        if (!known)
            return invalid_request(
                "'reasoning_effort' must be one of " + list + "; got '" + it->get<std::string>() + "'",
                "reasoning_effort", "invalid_value");
        r.template_kwargs = reasoning_effort_kwargs(it->get<std::string>());
    }
    if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) return wrong_type("chat_template_kwargs", "an object", *it);
        if (!r.template_kwargs.is_object()) r.template_kwargs = ojson::object();
        for (auto& [key, value] : it->items()) r.template_kwargs[key] = value;  // explicit arguments win
    }
    if (auto it = body.find("response_format"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) return wrong_type("response_format", "an object", *it);
        auto type = it->find("type");
        if (type == it->end() || !type->is_string())
            return invalid_request("'response_format.type' must be a string", "response_format.type",
                                   "invalid_type");
        if (*type == "json_object") {
            r.response_format = ResponseFormat::kJsonObject;
        } else if (*type == "json_schema") {
            auto js = it->find("json_schema");
            if (js == it->end() || !js->is_object())
                return invalid_request(
                    "'response_format.json_schema' must be an object with 'name' and 'schema'",
                    "response_format.json_schema", "invalid_type");
            auto name = js->find("name");
            if (name == js->end() || !name->is_string() || name->get<std::string>().empty())
                return invalid_request("'response_format.json_schema.name' must be a non-empty string",
                                       "response_format.json_schema.name", "invalid_value");
            if (auto strict = js->find("strict");
                strict != js->end() && !strict->is_null() && !strict->is_boolean())
                return wrong_type("response_format.json_schema.strict", "a boolean", *strict);
            if (auto schema = js->find("schema"); schema != js->end() && !schema->is_null()) {
                if (!schema->is_object() && !schema->is_boolean())
                    return wrong_type("response_format.json_schema.schema", "an object (a JSON Schema)",
                                      *schema);
                r.json_schema = *schema;
            }
            r.response_format = ResponseFormat::kJsonSchema;
        } else if (*type != "text") {
            return invalid_request(
                "'response_format.type' must be 'text', 'json_object' or 'json_schema'; got '" +
                    type->get<std::string>() + "'",
                "response_format.type", "invalid_value");
        }
    }
    SLUICE_API_CHECK(read_bool(body, "parallel_tool_calls", &r.parallel_tool_calls));
    return r;
}

std::variant<CompletionRequest, ApiError> parse_completion_request(const nlohmann::ordered_json& body,
                                                                   const SamplingParams& defaults,
                                                                   int32_t vocab_size) {
    CompletionRequest r;
    auto it = body.find("prompt");
    if (it == body.end())
        return invalid_request("'prompt' is required", "prompt", "missing_required_parameter");
    if (it->is_string()) {
        r.prompt = it->get<std::string>();
    } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
        r.prompt = (*it)[0].get<std::string>();
    } else if (it->is_array() && !it->empty() && (*it)[0].is_number()) {
        std::vector<int32_t> ids;
        for (size_t i = 0; i < it->size(); ++i) {
            const ojson& e = (*it)[i];
            if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= vocab_size)
                return invalid_request("'prompt[" + std::to_string(i) + "]' must be a token id in [0, " +
                                           std::to_string(vocab_size) + "), got " + e.dump().substr(0, 64),
                                       "prompt", "invalid_value");
            ids.push_back(static_cast<int32_t>(e.get<int64_t>()));
        }
        r.prompt = std::move(ids);
    } else {
        return wrong_type("prompt", "a string, an array of one string, or a non-empty array of token ids",
                          *it);
    }
    SLUICE_API_CHECK(parse_common(body, defaults, vocab_size, &r.params));
    SLUICE_API_CHECK(read_bool(body, "echo", &r.echo));
    std::optional<int64_t> lp;
    SLUICE_API_CHECK(read_integer(body, "logprobs", 0, 20, &lp));
    if (lp) {
        r.params.logprobs = true;
        r.params.generate.top_logprobs = static_cast<int32_t>(*lp);
    }
    if (!r.params.max_tokens) r.params.max_tokens = 16;  // OpenAI's default for completions
    return r;
}

}  // namespace sluice::server
