// The Responses API mapped onto the chat request, and the Response's output items (see
// responses_api.h).
//
// Input items → chat messages: a message keeps its role (developer → system) and its text parts
// joined as the chat path joins them; a function_call joins the assistant turn just before it
// (an assistant message, or the calls of the same step), or opens one; a function_call_output is a
// tool message, refused unless a function_call with its call_id came before; a reasoning item's
// text becomes the reasoning_content of the assistant turn after it (the templates keep it only
// for the current tool-calling turn, as they keep their own). `instructions` is the first system
// message, merged with a system message the input starts with (several templates refuse a second
// system message).
#include "server/responses_api.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>

namespace sluice::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string at(const std::string& base, size_t i) {
    return base + "[" + std::to_string(i) + "]";
}

#define SLUICE_RESPONSES_CHECK(expr)                      \
    do {                                                  \
        if (auto api_error_ = (expr)) return *api_error_; \
    } while (0)

// A string, or null / absent (then `out` keeps its value).
std::optional<ApiError> read_string(const ojson& body, const char* key, json* out) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_string()) return wrong_type(key, "a string", *it);
    *out = it->get<std::string>();
    return std::nullopt;
}

// One of `allowed`, or null / absent.
std::optional<ApiError> read_enum(const ojson& obj, const char* key, const std::string& param,
                                  std::initializer_list<const char*> allowed, std::string* out) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return std::nullopt;
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    if (!it->is_string()) return wrong_type(param, ("one of " + list).c_str(), *it);
    for (const char* a : allowed)
        if (*it == a) {
            *out = a;
            return std::nullopt;
        }
    return invalid_request(
        "'" + param + "' must be one of " + list + "; got '" + it->get<std::string>() + "'", param,
        "invalid_value");
}

// Refuses a field that needs what this server does not have (stored responses, conversations,
// prompts, background runs), naming it and saying what to do instead.
std::optional<ApiError> refuse_if_set(const ojson& body, const char* key, const std::string& why) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) return std::nullopt;
    return invalid_request("'" + std::string(key) + "' is not supported: " + why, key,
                           "unsupported_parameter");
}

// The text of a message's content or of a function_call_output's output: a string, or text parts
// (input_text, output_text, refusal) joined with "\n" as the chat path joins its text parts.
std::variant<std::string, ApiError> text_of(const ojson& content, const std::string& param) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) return wrong_type(param, "a string or an array of content parts", content);
    std::string out;
    for (size_t i = 0; i < content.size(); ++i) {
        const ojson& part = content[i];
        const std::string pp = at(param, i);
        if (!part.is_object()) return wrong_type(pp, "a content part object", part);
        auto type = part.find("type");
        if (type == part.end() || !type->is_string())
            return invalid_request("'" + pp + ".type' is required and must be a string", pp + ".type",
                                   "invalid_type");
        const std::string t = type->get<std::string>();
        const char* field = t == "input_text" || t == "output_text" ? "text"
                            : t == "refusal"                        ? "refusal"
                                                                    : "";
        if (*field == '\0') {
            if (t == "input_image" || t == "input_file" || t == "input_audio")
                return invalid_request("content part type '" + t + "' in '" + pp +
                                           "' is not supported: this server runs a text model (input_text, "
                                           "output_text and refusal parts are)",
                                       pp + ".type", "unsupported_content_type");
            return invalid_request(
                "'" + pp + ".type' must be input_text, output_text or refusal; got '" + t + "'", pp + ".type",
                "invalid_value");
        }
        auto text = part.find(field);
        if (text == part.end() || !text->is_string())
            return invalid_request("'" + pp + "." + field + "' is required and must be a string",
                                   pp + "." + field, "invalid_type");
        if (!out.empty()) out += "\n";
        out += text->get<std::string>();
    }
    return out;
}

// A required non-empty string field of an input item.
std::variant<std::string, ApiError> item_string(const ojson& item, const char* key,
                                                const std::string& param) {
    auto it = item.find(key);
    if (it == item.end() || it->is_null())
        return invalid_request("'" + param + "." + key + "' is required", param + "." + key,
                               "missing_required_parameter");
    if (!it->is_string()) return wrong_type(param + "." + key, "a string", *it);
    if (it->get<std::string>().empty())
        return invalid_request("'" + param + "." + key + "' must not be empty", param + "." + key,
                               "invalid_value");
    return it->get<std::string>();
}

// Input items → chat messages, one item at a time; what spans items (the assistant turn calls join,
// the reasoning waiting for its turn, the call ids a tool result may answer) is held here.
class InputMapper {
 public:
    explicit InputMapper(ojson* messages) : messages_(*messages) {}

    std::optional<ApiError> item(const ojson& item, const std::string& param) {
        if (!item.is_object()) return wrong_type(param, "an input item object", item);
        std::string type;
        if (auto t = item.find("type"); t != item.end() && !t->is_null()) {
            if (!t->is_string()) return wrong_type(param + ".type", "a string", *t);
            type = t->get<std::string>();
        } else if (item.contains("role")) {
            type = "message";  // EasyInputMessage: {role, content} without a type
        } else {
            return invalid_request(
                "'" + param + "' must be a message ({role, content}) or an item with a 'type'",
                param + ".type", "missing_required_parameter");
        }
        if (type == "message") return message(item, param);
        if (type == "function_call") return function_call(item, param);
        if (type == "function_call_output") return function_call_output(item, param);
        if (type == "reasoning") return reasoning(item, param);
        if (type == "item_reference")
            return invalid_request("'" + param +
                                       "' is an item_reference, which needs items stored on the server; this "
                                       "server stores none: send the items themselves",
                                   param + ".type", "unsupported_value");
        return invalid_request("input item type '" + type + "' in '" + param +
                                   "' is not supported (message, function_call, function_call_output and "
                                   "reasoning items are)",
                               param + ".type", "unsupported_value");
    }

 private:
    std::optional<ApiError> message(const ojson& item, const std::string& param) {
        std::string role;
        SLUICE_RESPONSES_CHECK(
            read_enum(item, "role", param + ".role", {"user", "assistant", "system", "developer"}, &role));
        if (role.empty())
            return invalid_request("'" + param + ".role' is required", param + ".role",
                                   "missing_required_parameter");
        auto content = item.find("content");
        if (content == item.end() || content->is_null())
            return invalid_request("'" + param + ".content' is required", param + ".content",
                                   "missing_required_parameter");
        auto text = text_of(*content, param + ".content");
        if (auto* e = std::get_if<ApiError>(&text)) return *e;
        if (role == "assistant") {
            assistant_turn(std::get<std::string>(std::move(text)));
            return std::nullopt;
        }
        messages_.push_back(
            {{"role", role == "developer" ? "system" : role}, {"content", std::get<std::string>(text)}});
        assistant_open_ = false;
        return std::nullopt;
    }

    // Joins the assistant turn just before it (its text, or the calls of the same step), or opens one.
    std::optional<ApiError> function_call(const ojson& item, const std::string& param) {
        auto call_id = item_string(item, "call_id", param);
        if (auto* e = std::get_if<ApiError>(&call_id)) return *e;
        auto name = item_string(item, "name", param);
        if (auto* e = std::get_if<ApiError>(&name)) return *e;
        if (!valid_function_name(std::get<std::string>(name)))
            return invalid_request("'" + param + ".name' must be 1 to 64 letters, digits, '_' or '-'",
                                   param + ".name", "invalid_value");
        auto args = item.find("arguments");
        if (args == item.end())
            return invalid_request("'" + param + ".arguments' is required (a JSON string)",
                                   param + ".arguments", "missing_required_parameter");
        if (!args->is_string()) return wrong_type(param + ".arguments", "a string (JSON text)", *args);
        if (!assistant_open_) assistant_turn("");
        ojson& turn = messages_.back();
        if (!turn.contains("tool_calls")) turn["tool_calls"] = ojson::array();
        turn["tool_calls"].push_back(
            {{"id", std::get<std::string>(call_id)},
             {"type", "function"},
             {"function", {{"name", std::get<std::string>(name)}, {"arguments", *args}}}});
        call_ids_.insert(std::get<std::string>(call_id));
        return std::nullopt;
    }

    std::optional<ApiError> function_call_output(const ojson& item, const std::string& param) {
        auto call_id = item_string(item, "call_id", param);
        if (auto* e = std::get_if<ApiError>(&call_id)) return *e;
        if (!call_ids_.count(std::get<std::string>(call_id)))
            return invalid_request("'" + param + ".call_id' is '" + std::get<std::string>(call_id) +
                                       "', but no function_call item with that call_id comes before it "
                                       "(send the function_call items of the earlier response in 'input')",
                                   param + ".call_id", "invalid_value");
        auto output = item.find("output");
        if (output == item.end() || output->is_null())
            return invalid_request("'" + param + ".output' is required", param + ".output",
                                   "missing_required_parameter");
        auto text = text_of(*output, param + ".output");
        if (auto* e = std::get_if<ApiError>(&text)) return *e;
        messages_.push_back({{"role", "tool"},
                             {"tool_call_id", std::get<std::string>(call_id)},
                             {"content", std::get<std::string>(text)}});
        assistant_open_ = false;
        return std::nullopt;
    }

    // Its reasoning_text parts, kept for the assistant turn that follows (summaries and encrypted
    // content are not the reasoning).
    std::optional<ApiError> reasoning(const ojson& item, const std::string& param) {
        if (auto content = item.find("content"); content != item.end() && !content->is_null()) {
            if (!content->is_array()) return wrong_type(param + ".content", "an array", *content);
            for (size_t j = 0; j < content->size(); ++j) {
                const ojson& part = (*content)[j];
                const std::string pp = at(param + ".content", j);
                if (!part.is_object() || part.value("type", ojson()) != "reasoning_text" ||
                    !part.contains("text") || !part["text"].is_string())
                    return invalid_request("'" + pp + "' must be {type: 'reasoning_text', text: string}", pp,
                                           "invalid_value");
                if (!reasoning_.empty()) reasoning_ += "\n";
                reasoning_ += part["text"].get<std::string>();
            }
        }
        assistant_open_ = false;  // a reasoning item starts the model's next step
        return std::nullopt;
    }

    void assistant_turn(std::string content) {
        ojson msg = {{"role", "assistant"}, {"content", std::move(content)}};
        if (!reasoning_.empty()) msg["reasoning_content"] = std::move(reasoning_);
        reasoning_.clear();
        messages_.push_back(std::move(msg));
        assistant_open_ = true;
    }

    ojson& messages_;
    std::set<std::string> call_ids_;
    std::string reasoning_;        // a reasoning item's text, for the assistant turn that follows
    bool assistant_open_ = false;  // the last message is an assistant turn a function_call may join
};

// `input` (and `instructions`) → chat messages.
std::optional<ApiError> map_input(const ojson& body, ojson* messages) {
    auto input = body.find("input");
    if (input == body.end() || input->is_null())
        return invalid_request(
            "'input' is required (this server stores no responses, conversations or prompts to start from)",
            "input", "missing_required_parameter");
    if (input->is_string()) {
        if (input->get<std::string>().empty())
            return invalid_request("'input' must not be empty", "input", "invalid_value");
        messages->push_back({{"role", "user"}, {"content", *input}});
    } else if (!input->is_array()) {
        return wrong_type("input", "a string or an array of input items", *input);
    } else if (input->empty()) {
        return invalid_request("'input' must not be empty", "input", "invalid_value");
    } else {
        InputMapper mapper(messages);
        for (size_t i = 0; i < input->size(); ++i)
            SLUICE_RESPONSES_CHECK(mapper.item((*input)[i], at("input", i)));
        if (messages->empty())
            return invalid_request("'input' holds no message, function call or function call output", "input",
                                   "invalid_value");
    }
    auto instructions = body.find("instructions");
    if (instructions != body.end() && !instructions->is_null()) {
        if (!instructions->is_string()) return wrong_type("instructions", "a string", *instructions);
        const std::string text = instructions->get<std::string>();
        if (!text.empty()) {
            ojson& first = (*messages)[0];
            if (first["role"] == "system")
                first["content"] = text + "\n\n" + first["content"].get<std::string>();
            else
                messages->insert(messages->begin(), ojson{{"role", "system"}, {"content", text}});
        }
    }
    return std::nullopt;
}

// Flat function tools → the chat's nested ones (all of them; tool_choice may narrow them later).
std::optional<ApiError> map_tools(const ojson& body, ResponsesRequest* r, ojson* chat_tools) {
    auto tools = body.find("tools");
    if (tools == body.end() || tools->is_null()) return std::nullopt;
    if (!tools->is_array()) return wrong_type("tools", "an array", *tools);
    for (size_t i = 0; i < tools->size(); ++i) {
        const ojson& t = (*tools)[i];
        const std::string param = at("tools", i);
        if (!t.is_object()) return wrong_type(param, "a tool object", t);
        auto type = t.find("type");
        if (type == t.end() || !type->is_string())
            return invalid_request("'" + param + ".type' is required and must be a string", param + ".type",
                                   "invalid_type");
        if (*type != "function")
            return invalid_request("tool type '" + type->get<std::string>() + "' in '" + param +
                                       "' is not supported: this server runs function tools only",
                                   param + ".type", "unsupported_value");
        auto name = t.find("name");
        if (name == t.end() || !name->is_string())
            return invalid_request("'" + param + ".name' is required and must be a string", param + ".name",
                                   "invalid_type");
        if (!valid_function_name(name->get<std::string>()))
            return invalid_request("'" + param + ".name' must be 1 to 64 letters, digits, '_' or '-'",
                                   param + ".name", "invalid_value");
        ojson fn = {{"name", *name}};
        json echo = {{"type", "function"}, {"name", name->get<std::string>()}};
        echo["description"] = nullptr;
        if (auto d = t.find("description"); d != t.end() && !d->is_null()) {
            if (!d->is_string()) return wrong_type(param + ".description", "a string", *d);
            fn["description"] = *d;
            echo["description"] = d->get<std::string>();
        }
        echo["parameters"] = nullptr;
        if (auto p = t.find("parameters"); p != t.end() && !p->is_null()) {
            if (!p->is_object()) return wrong_type(param + ".parameters", "an object (a JSON Schema)", *p);
            fn["parameters"] = *p;
            echo["parameters"] = json::parse(p->dump());
        }
        echo["strict"] = nullptr;
        if (auto s = t.find("strict"); s != t.end() && !s->is_null()) {
            if (!s->is_boolean()) return wrong_type(param + ".strict", "a boolean", *s);
            fn["strict"] = *s;
            echo["strict"] = s->get<bool>();
        }
        chat_tools->push_back({{"type", "function"}, {"function", std::move(fn)}});
        r->tools.push_back(std::move(echo));
    }
    return std::nullopt;
}

// tool_choice → the chat's; allowed_tools keeps only the listed tools (their index map in
// r->tool_index) with mode auto or required.
std::optional<ApiError> map_tool_choice(const ojson& body, ResponsesRequest* r, ojson chat_tools) {
    for (size_t i = 0; i < chat_tools.size(); ++i) r->tool_index.push_back(i);
    auto choice = body.find("tool_choice");
    if (choice != body.end() && !choice->is_null()) {
        if (choice->is_string()) {
            std::string mode;
            SLUICE_RESPONSES_CHECK(
                read_enum(body, "tool_choice", "tool_choice", {"auto", "none", "required"}, &mode));
            r->chat["tool_choice"] = mode;
            r->tool_choice = mode;
        } else if (!choice->is_object()) {
            return wrong_type("tool_choice", "a string or an object", *choice);
        } else {
            auto type = choice->find("type");
            if (type == choice->end() || !type->is_string())
                return invalid_request("'tool_choice.type' is required and must be a string",
                                       "tool_choice.type", "invalid_type");
            if (*type == "function") {
                auto name = choice->find("name");
                if (name == choice->end() || !name->is_string())
                    return invalid_request("'tool_choice.name' is required and must be a string",
                                           "tool_choice.name", "invalid_type");
                r->chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
                r->tool_choice = {{"type", "function"}, {"name", name->get<std::string>()}};
            } else if (*type == "allowed_tools") {
                std::string mode;
                SLUICE_RESPONSES_CHECK(
                    read_enum(*choice, "mode", "tool_choice.mode", {"auto", "required"}, &mode));
                if (mode.empty())
                    return invalid_request("'tool_choice.mode' is required (auto or required)",
                                           "tool_choice.mode", "missing_required_parameter");
                auto allowed = choice->find("tools");
                if (allowed == choice->end() || !allowed->is_array())
                    return invalid_request("'tool_choice.tools' must be an array of {type: 'function', name}",
                                           "tool_choice.tools", "invalid_type");
                std::vector<size_t> kept;
                for (size_t k = 0; k < allowed->size(); ++k) {
                    const ojson& a = (*allowed)[k];
                    const std::string ap = at("tool_choice.tools", k);
                    if (!a.is_object() || a.value("type", ojson()) != "function" || !a.contains("name") ||
                        !a["name"].is_string())
                        return invalid_request("'" + ap + "' must be {type: 'function', name}", ap,
                                               "invalid_value");
                    size_t found = chat_tools.size();
                    for (size_t i = 0; i < chat_tools.size(); ++i)
                        if (chat_tools[i]["function"]["name"] == a["name"]) found = i;
                    if (found == chat_tools.size())
                        return invalid_request("'" + ap + ".name' names function '" +
                                                   a["name"].get<std::string>() +
                                                   "', which is not in 'tools'",
                                               ap + ".name", "invalid_value");
                    if (std::find(kept.begin(), kept.end(), found) == kept.end()) kept.push_back(found);
                }
                ojson narrowed = ojson::array();
                for (size_t i : kept) narrowed.push_back(chat_tools[i]);
                chat_tools = std::move(narrowed);
                r->tool_index = std::move(kept);
                // No tool allowed: as tool_choice "none" (the model answers in text).
                r->chat["tool_choice"] = chat_tools.empty() ? "none" : mode;
                r->tool_choice = json::parse(choice->dump());
            } else {
                return invalid_request(
                    "tool_choice type '" + type->get<std::string>() +
                        "' is not supported: this server runs function tools only (function, "
                        "allowed_tools, or the strings auto, none, required)",
                    "tool_choice.type", "unsupported_value");
            }
        }
    }
    if (!chat_tools.empty()) r->chat["tools"] = std::move(chat_tools);
    return std::nullopt;
}

// text.format → response_format; text.verbosity is accepted (one level of detail is all this
// server has).
std::optional<ApiError> map_text(const ojson& body, ResponsesRequest* r) {
    auto text = body.find("text");
    if (text == body.end() || text->is_null()) return std::nullopt;
    if (!text->is_object()) return wrong_type("text", "an object", *text);
    std::string verbosity;
    SLUICE_RESPONSES_CHECK(
        read_enum(*text, "verbosity", "text.verbosity", {"low", "medium", "high"}, &verbosity));
    if (!verbosity.empty()) r->text["verbosity"] = verbosity;
    auto format = text->find("format");
    if (format == text->end() || format->is_null()) return std::nullopt;
    if (!format->is_object()) return wrong_type("text.format", "an object", *format);
    std::string type;
    SLUICE_RESPONSES_CHECK(
        read_enum(*format, "type", "text.format.type", {"text", "json_object", "json_schema"}, &type));
    if (type.empty())
        return invalid_request("'text.format.type' is required (text, json_object or json_schema)",
                               "text.format.type", "missing_required_parameter");
    if (type == "text") return std::nullopt;
    if (type == "json_object") {
        r->chat["response_format"] = {{"type", "json_object"}};
        r->text["format"] = {{"type", "json_object"}};
        return std::nullopt;
    }
    auto name = format->find("name");
    if (name == format->end() || !name->is_string())
        return invalid_request("'text.format.name' is required and must be a string", "text.format.name",
                               "invalid_type");
    if (!valid_function_name(name->get<std::string>()))
        return invalid_request("'text.format.name' must be 1 to 64 letters, digits, '_' or '-'",
                               "text.format.name", "invalid_value");
    auto schema = format->find("schema");
    if (schema == format->end() || schema->is_null())
        return invalid_request("'text.format.schema' is required", "text.format.schema",
                               "missing_required_parameter");
    if (!schema->is_object() && !schema->is_boolean())
        return wrong_type("text.format.schema", "an object (a JSON Schema)", *schema);
    ojson js = {{"name", *name}, {"schema", *schema}};
    json echo = {
        {"type", "json_schema"}, {"name", name->get<std::string>()}, {"schema", json::parse(schema->dump())}};
    if (auto d = format->find("description"); d != format->end() && !d->is_null()) {
        if (!d->is_string()) return wrong_type("text.format.description", "a string", *d);
        js["description"] = *d;
        echo["description"] = d->get<std::string>();
    }
    echo["strict"] = nullptr;
    if (auto s = format->find("strict"); s != format->end() && !s->is_null()) {
        if (!s->is_boolean()) return wrong_type("text.format.strict", "a boolean", *s);
        js["strict"] = *s;
        echo["strict"] = s->get<bool>();
    }
    r->chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
    r->text["format"] = std::move(echo);
    return std::nullopt;
}

// An integer in [lo, hi] (or a number with no fraction, as the chat fields take them) or null /
// absent, kept as JSON for the echo.
std::optional<ApiError> read_count(const ojson& body, const char* key, int64_t lo, int64_t hi, json* out) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_number() || (it->is_number_float() && it->get<double>() != std::floor(it->get<double>())))
        return wrong_type(key, "an integer", *it);
    const double d = it->get<double>();
    if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)))
        return invalid_request("'" + std::string(key) + "' must be between " + std::to_string(lo) + " and " +
                                   std::to_string(hi) + ", got " + it->dump(),
                               key, "invalid_value");
    *out = it->is_number_float() ? static_cast<int64_t>(d) : it->get<int64_t>();
    return std::nullopt;
}

std::optional<ApiError> map_options(const ojson& body, ResponsesRequest* r) {
    ojson& chat = r->chat;
    if (auto it = body.find("stream"); it != body.end() && !it->is_null()) {
        if (!it->is_boolean()) return wrong_type("stream", "a boolean", *it);
        r->stream = it->get<bool>();
    }
    if (auto it = body.find("store"); it != body.end() && !it->is_null() && !it->is_boolean())
        return wrong_type("store", "a boolean", *it);
    SLUICE_RESPONSES_CHECK(
        read_count(body, "max_output_tokens", 1, std::numeric_limits<int32_t>::max(), &r->max_output_tokens));
    if (!r->max_output_tokens.is_null()) chat["max_tokens"] = r->max_output_tokens.get<int64_t>();
    SLUICE_RESPONSES_CHECK(
        read_count(body, "max_tool_calls", 1, std::numeric_limits<int32_t>::max(), &r->max_tool_calls));
    SLUICE_RESPONSES_CHECK(read_count(body, "top_logprobs", 0, 20, &r->top_logprobs));
    if (auto it = body.find("include"); it != body.end() && !it->is_null()) {
        if (!it->is_array()) return wrong_type("include", "an array of strings", *it);
        for (size_t i = 0; i < it->size(); ++i) {
            if (!(*it)[i].is_string()) return wrong_type(at("include", i), "a string", (*it)[i]);
            // The others name outputs of tools this server does not have, or encrypted reasoning
            // (reasoning items come back in the clear).
            if ((*it)[i] == "message.output_text.logprobs") r->logprobs = true;
        }
    }
    if (!r->top_logprobs.is_null() && r->top_logprobs.get<int64_t>() > 0) r->logprobs = true;
    if (r->logprobs) {
        chat["logprobs"] = true;
        if (!r->top_logprobs.is_null()) chat["top_logprobs"] = r->top_logprobs.get<int64_t>();
    }
    if (auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null()) {
        if (!it->is_boolean()) return wrong_type("parallel_tool_calls", "a boolean", *it);
        r->parallel_tool_calls = it->get<bool>();
        chat["parallel_tool_calls"] = r->parallel_tool_calls;
    }
    SLUICE_RESPONSES_CHECK(read_enum(body, "truncation", "truncation", {"auto", "disabled"}, &r->truncation));
    if (r->truncation.empty()) r->truncation = "disabled";
    SLUICE_RESPONSES_CHECK(read_string(body, "user", &r->user));
    SLUICE_RESPONSES_CHECK(read_string(body, "safety_identifier", &r->safety_identifier));
    SLUICE_RESPONSES_CHECK(read_string(body, "prompt_cache_key", &r->prompt_cache_key));
    if (auto it = body.find("metadata"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) return wrong_type("metadata", "an object of strings", *it);
        if (it->size() > 16)
            return invalid_request("'metadata' holds at most 16 pairs, got " + std::to_string(it->size()),
                                   "metadata", "invalid_value");
        for (auto& [key, value] : it->items()) {
            const std::string param = "metadata." + key;
            if (key.size() > 64)
                return invalid_request("'metadata' keys are at most 64 characters", param, "invalid_value");
            if (!value.is_string()) return wrong_type(param, "a string", value);
            if (value.get<std::string>().size() > 512)
                return invalid_request("'" + param + "' is longer than 512 characters", param,
                                       "invalid_value");
            r->metadata[key] = value.get<std::string>();
        }
    }
    // reasoning.effort "none" turns the template's thinking off; any other effort turns it on
    // (the templates have on and off), and is gpt-oss's reasoning_effort (reasoning_effort_kwargs);
    // absent, the template's default.
    if (auto it = body.find("reasoning"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) return wrong_type("reasoning", "an object", *it);
        std::string effort, summary;
        SLUICE_RESPONSES_CHECK(read_enum(*it, "effort", "reasoning.effort",
                                         {"none", "minimal", "low", "medium", "high", "xhigh", "max"},
                                         &effort));  // kReasoningEfforts
        SLUICE_RESPONSES_CHECK(
            read_enum(*it, "summary", "reasoning.summary", {"auto", "concise", "detailed"}, &summary));
        r->reasoning = {{"effort", effort.empty() ? json() : json(effort)},
                        {"summary", summary.empty() ? json() : json(summary)}};
        if (!effort.empty()) chat["chat_template_kwargs"] = reasoning_effort_kwargs(effort);
    }
    // What the chat path takes beyond the Responses API (sluice extensions; OpenAI clients send them
    // in extra_body): sampling fields, stop strings, KV bits, speculation, template arguments.
    for (const char* key :
         {"temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
          "frequency_penalty", "logit_bias", "seed", "stop", "kv_bits", "speculative", "model"})
        if (auto it = body.find(key); it != body.end()) chat[key] = *it;
    if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) return wrong_type("chat_template_kwargs", "an object", *it);
        ojson kwargs = chat.value("chat_template_kwargs", ojson::object());
        for (auto& [key, value] : it->items()) kwargs[key] = value;  // explicit arguments win
        chat["chat_template_kwargs"] = std::move(kwargs);
    }
    return std::nullopt;
}

// s with every "tools[i].function." rewritten as "tools[index[i]]." (the request's own numbering).
std::string rename_tools(std::string s, const std::vector<size_t>& index) {
    constexpr std::string_view kOpen = "tools[";
    constexpr std::string_view kFunction = "].function.";
    for (size_t pos = s.find(kOpen); pos != std::string::npos; pos = s.find(kOpen, pos + 1)) {
        const size_t digits = pos + kOpen.size();
        size_t end = digits;
        while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
        if (end == digits || s.compare(end, kFunction.size(), kFunction) != 0) continue;
        const size_t i = std::stoul(s.substr(digits, end - digits));
        const std::string original = std::to_string(i < index.size() ? index[i] : i);
        s.replace(digits, end + kFunction.size() - digits, original + "].");
    }
    return s;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
        s.replace(pos, from.size(), to);
}

}  // namespace

std::variant<ResponsesRequest, ApiError> parse_responses_request(const nlohmann::ordered_json& body) {
    ResponsesRequest r;
    SLUICE_RESPONSES_CHECK(
        refuse_if_set(body, "previous_response_id",
                      "this server stores no responses; send the whole conversation in 'input' "
                      "(the earlier response's output items are valid input items)"));
    SLUICE_RESPONSES_CHECK(
        refuse_if_set(body, "conversation",
                      "this server stores no conversations; send the whole conversation in "
                      "'input'"));
    SLUICE_RESPONSES_CHECK(refuse_if_set(
        body, "prompt", "this server stores no prompt templates; send 'instructions' and 'input'"));
    SLUICE_RESPONSES_CHECK(refuse_if_set(body, "background",
                                         "a background response is polled by id, and this server stores no "
                                         "responses; use stream or wait for the reply"));
    ojson messages = ojson::array();
    SLUICE_RESPONSES_CHECK(map_input(body, &messages));
    if (auto it = body.find("instructions"); it != body.end() && it->is_string())
        r.instructions = it->get<std::string>();
    r.chat["messages"] = std::move(messages);
    ojson chat_tools = ojson::array();
    SLUICE_RESPONSES_CHECK(map_tools(body, &r, &chat_tools));
    SLUICE_RESPONSES_CHECK(map_tool_choice(body, &r, std::move(chat_tools)));
    SLUICE_RESPONSES_CHECK(map_text(body, &r));
    SLUICE_RESPONSES_CHECK(map_options(body, &r));
    return r;
}

ApiError responses_error(ApiError e, const ResponsesRequest& request) {
    replace_all(e.message, "response_format.json_schema.", "text.format.");
    replace_all(e.message, "'response_format'", "'text.format'");
    replace_all(e.message, "'max_completion_tokens'", "'max_output_tokens'");
    replace_all(e.message, "'max_tokens'", "'max_output_tokens'");
    replace_all(e.message, "'messages'", "'input'");
    e.message = rename_tools(std::move(e.message), request.tool_index);
    std::string& p = e.param;
    if (p.starts_with("messages")) {
        p = "input";  // chat messages are numbered otherwise than input items
    } else if (p == "max_tokens" || p == "max_completion_tokens") {
        p = "max_output_tokens";
    } else if (p == "logprobs") {
        p = "include";
    } else {
        replace_all(p, "response_format.json_schema.", "text.format.");
        if (p.starts_with("response_format")) p = "text.format";
        p = rename_tools(std::move(p), request.tool_index);
    }
    return e;
}

// ---- the output items ----------------------------------------------------------------------------

ResponseOutput::ResponseOutput(std::string id_base, EventSink sink)
    : id_base_(std::move(id_base)), sink_(std::move(sink)) {}

bool ResponseOutput::emit(json event) {
    return !sink_ || sink_(std::move(event));
}

bool ResponseOutput::open(Open kind) {
    if (open_ == kind) return true;
    if (!close("completed")) return false;
    const size_t index = items_.size();
    json item;
    json part;
    if (kind == Open::kReasoning) {
        item = {{"id", "rs_" + id_base_ + "_" + std::to_string(index)},
                {"type", "reasoning"},
                {"summary", json::array()},
                {"content", json::array()},
                {"status", "in_progress"}};
        part = {{"type", "reasoning_text"}, {"text", ""}};
    } else {
        item = {{"id", "msg_" + id_base_ + "_" + std::to_string(index)},
                {"type", "message"},
                {"status", "in_progress"},
                {"role", "assistant"},
                {"content", json::array()}};
        part = {{"type", "output_text"},
                {"text", ""},
                {"annotations", json::array()},
                {"logprobs", json::array()}};
        has_message_ = true;
    }
    const std::string id = item["id"];
    open_ = kind;
    if (!emit({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}}))
        return false;
    item["content"].push_back(part);
    items_.push_back(std::move(item));
    return emit({{"type", "response.content_part.added"},
                 {"item_id", id},
                 {"output_index", index},
                 {"content_index", 0},
                 {"part", std::move(part)}});
}

bool ResponseOutput::close(const char* status) {
    if (open_ == Open::kNone) return true;
    const size_t index = items_.size() - 1;
    json& item = items_[index];
    item["status"] = status;
    const json& part = item["content"][0];
    const std::string id = item["id"];
    const bool reasoning = open_ == Open::kReasoning;
    open_ = Open::kNone;
    json done = {{"type", reasoning ? "response.reasoning_text.done" : "response.output_text.done"},
                 {"item_id", id},
                 {"output_index", index},
                 {"content_index", 0},
                 {"text", part["text"]}};
    if (!reasoning) done["logprobs"] = part["logprobs"];
    return emit(std::move(done)) &&
           emit({{"type", "response.content_part.done"},
                 {"item_id", id},
                 {"output_index", index},
                 {"content_index", 0},
                 {"part", part}}) &&
           emit({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
}

bool ResponseOutput::append(const std::string& text, const json& logprobs) {
    const size_t index = items_.size() - 1;
    json& part = items_[index]["content"][0];
    part["text"] = part["text"].get<std::string>() + text;
    json event = {
        {"item_id", items_[index]["id"]}, {"output_index", index}, {"content_index", 0}, {"delta", text}};
    if (open_ == Open::kReasoning) {
        event["type"] = "response.reasoning_text.delta";
    } else {
        event["type"] = "response.output_text.delta";
        event["logprobs"] = logprobs;
        for (const json& lp : logprobs) part["logprobs"].push_back(lp);
    }
    return emit(std::move(event));
}

bool ResponseOutput::function_call(const ParsedToolCall& call) {
    if (!close("completed")) return false;
    const size_t index = items_.size();
    json item = {{"id", "fc_" + id_base_ + "_" + std::to_string(index)},
                 {"type", "function_call"},
                 {"status", "in_progress"},
                 {"call_id", "call_" + id_base_ + "_" + std::to_string(function_calls_++)},
                 {"name", call.name},
                 {"arguments", ""}};
    const std::string id = item["id"];
    if (!emit({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}}))
        return false;
    item["arguments"] = call.arguments;
    item["status"] = "completed";
    items_.push_back(item);
    return emit({{"type", "response.function_call_arguments.delta"},
                 {"item_id", id},
                 {"output_index", index},
                 {"delta", call.arguments}}) &&
           emit({{"type", "response.function_call_arguments.done"},
                 {"item_id", id},
                 {"output_index", index},
                 {"name", call.name},
                 {"arguments", call.arguments}}) &&
           emit({{"type", "response.output_item.done"}, {"output_index", index}, {"item", std::move(item)}});
}

bool ResponseOutput::add(const ParsedDelta& d, const json& logprobs) {
    if (!d.reasoning.empty() && !(open(Open::kReasoning) && append(d.reasoning, json::array()))) return false;
    if (!d.content.empty() && !(open(Open::kMessage) && append(d.content, logprobs))) return false;
    for (const ParsedToolCall& call : d.tool_calls)
        if (!function_call(call)) return false;
    return true;
}

bool ResponseOutput::finish(bool incomplete) {
    if (!incomplete && !has_message_ && function_calls_ == 0 && !open(Open::kMessage)) return false;
    return close(incomplete ? "incomplete" : "completed");
}

}  // namespace sluice::server
