// Forced tool calls in the template's own form (see tool_calls.h).
#include "server/tool_calls.h"

#include <optional>
#include <vector>

namespace sluice::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

constexpr std::string_view kDeepSeekSep = "<｜tool▁sep｜>";
constexpr std::string_view kDeepSeekCallOpen = "<｜tool▁call▁begin｜>";
constexpr std::string_view kDeepSeekCallClose = "<｜tool▁call▁end｜>";
constexpr std::string_view kDeepSeekCallsClose = "<｜tool▁calls▁end｜>";

// The form a render of the probe call prints it in; none when it does not print the call whole
// (its arguments missing, or an object printed as text: "[object Map]").
std::optional<ToolCallForm> probe_form(const std::string& text) {
    const auto has = [&](std::string_view s) { return text.find(s) != std::string::npos; };
    // Harmony prints the arguments as JSON too, so it is told first.
    if (has("to=functions.probe_tool<|channel|>") && has("<|message|>{\"probe_arg\""))
        return ToolCallForm::kHarmony;
    if (has("<function=probe_tool>")) return ToolCallForm::kXml;
    if (has("<arg_key>probe_arg</arg_key>")) return ToolCallForm::kGlm;
    if (has("<｜tool▁sep｜>probe_tool\n```json\n{\"probe_arg\"")) return ToolCallForm::kDeepSeek;
    if (has("probe_tool<｜tool▁sep｜>{\"probe_arg\"")) return ToolCallForm::kDeepSeekV31;
    if (has("\"probe_arg\": \"v\"") || has("\"probe_arg\":\"v\"")) return ToolCallForm::kJson;
    return std::nullopt;
}

// The request's own function.arguments of call `j` of message `i`, when it is a string.
const ojson* request_arguments(const ojson& request_messages, size_t i, size_t j) {
    if (!request_messages.is_array() || i >= request_messages.size()) return nullptr;
    const ojson& m = request_messages[i];
    auto calls = m.is_object() ? m.find("tool_calls") : m.end();
    if (calls == m.end() || !calls->is_array() || j >= calls->size() || !(*calls)[j].is_object())
        return nullptr;
    auto fn = (*calls)[j].find("function");
    if (fn == (*calls)[j].end() || !fn->is_object()) return nullptr;
    auto args = fn->find("arguments");
    return args != fn->end() && args->is_string() ? &*args : nullptr;
}

// The tool choice allows one tool only: its name (tool_choice named, or required with one tool).
std::optional<std::string> single_tool(const ChatRequest& r) {
    if (r.tool_choice == ToolChoiceMode::kNamed) return r.tool_choice_name;
    if (r.tools.is_array() && r.tools.size() == 1) return r.tools[0]["function"]["name"].get<std::string>();
    return std::nullopt;
}

std::string text_of(const ojson& v) {
    return v.is_string() ? v.get<std::string>() : std::string();
}

// gpt-oss's template: see messages_for_template in tool_calls.h.
ojson harmony_messages(const ojson& messages) {
    ojson out = ojson::array();
    for (size_t i = 0; i < messages.size(); ++i) {
        ojson m = messages[i];
        if (!m.is_object() || m.value("role", "") != "assistant") {
            out.push_back(std::move(m));
            continue;
        }
        if (auto rc = m.find("reasoning_content"); rc != m.end()) {
            const std::string thinking = text_of(*rc);
            m.erase(rc);
            if (!thinking.empty() && text_of(m.value("thinking", ojson())).empty()) m["thinking"] = thinking;
        }
        auto calls = m.find("tool_calls");
        if (calls == m.end() || !calls->is_array() || calls->empty()) {
            out.push_back(std::move(m));
            continue;
        }
        if (!text_of(m.value("thinking", ojson())).empty() && !text_of(m.value("content", ojson())).empty())
            m["content"] = "";
        const ojson all_calls = *calls;
        size_t end = i + 1;  // the tool messages that follow: [i + 1, end)
        while (end < messages.size() && messages[end].is_object() &&
               messages[end].value("role", "") == "tool")
            ++end;
        // results[c]: the indices of call c's results, by tool_call_id, then the rest in order.
        std::vector<std::vector<size_t>> results(all_calls.size());
        std::vector<bool> used(end - i - 1, false);
        auto call_id = [&](size_t c) { return text_of(all_calls[c].value("id", ojson())); };
        for (size_t r = i + 1; r < end; ++r) {
            const std::string id = text_of(messages[r].value("tool_call_id", ojson()));
            for (size_t c = 0; c < all_calls.size() && !id.empty(); ++c) {
                if (call_id(c) == id) {
                    results[c].push_back(r);
                    used[r - i - 1] = true;
                    break;
                }
            }
        }
        size_t next = i + 1;
        for (size_t c = 0; c < all_calls.size(); ++c) {
            if (!results[c].empty()) continue;
            while (next < end && used[next - i - 1]) ++next;
            if (next < end) {
                results[c].push_back(next);
                used[next - i - 1] = true;
            }
        }
        for (size_t c = 0; c < all_calls.size(); ++c) {
            ojson one = m;
            one["tool_calls"] = ojson::array({all_calls[c]});
            if (c > 0) {  // the reasoning and text came before the first call
                one["content"] = "";
                one.erase("thinking");
            }
            out.push_back(std::move(one));
            for (size_t r : results[c]) out.push_back(messages[r]);
        }
        for (size_t r = i + 1; r < end; ++r)
            if (!used[r - i - 1]) out.push_back(messages[r]);
        i = end - 1;
    }
    return out;
}

// Whether a separator is whitespace only (what a forced GLM call may be written with).
bool blank(std::string_view s) {
    return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// The text between the first `from` at or after `*at` and the next `to`, `*at` moved past `to`; none
// when either is missing.
std::optional<std::string> between(const std::string& text, std::string_view from, std::string_view to,
                                   size_t* at) {
    const size_t a = text.find(from, *at);
    if (a == std::string::npos) return std::nullopt;
    const size_t b = text.find(to, a + from.size());
    if (b == std::string::npos) return std::nullopt;
    *at = b + to.size();
    return text.substr(a + from.size(), b - a - from.size());
}

// GLM's separators, from a render of two calls, the first with two arguments, given in the shape the
// probe call was printed in. Not known when the render fails, or a separator is not whitespace or
// differs between its two places.
GlmLayout glm_layout(const ChatTemplate& chat_template, const ojson& tools, bool null_content) {
    ojson messages = ojson::parse(R"([{"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": "probe_tool", "arguments": {"probe_arg": "v", "probe_more": "w"}}},
            {"id": "call_1", "type": "function", "function": {"name": "probe_tool", "arguments": {"probe_arg": "u"}}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "r"},
        {"role": "tool", "tool_call_id": "call_1", "content": "s"}])");
    if (null_content) messages[1]["content"] = nullptr;
    GlmLayout layout;
    layout.known = false;
    Expected<std::string> text = chat_template.render(messages, tools, false, ojson::object());
    if (!text.has_value()) return layout;
    size_t at = 0;
    auto after_name = between(*text, "<tool_call>probe_tool", "<arg_key>probe_arg</arg_key>", &at);
    auto key_to_value = between(*text, "", "<arg_value>v</arg_value>", &at);
    auto after_value = between(*text, "", "<arg_key>probe_more</arg_key>", &at);
    auto key_to_value_2 = between(*text, "", "<arg_value>w</arg_value>", &at);
    auto after_last = between(*text, "", "</tool_call>", &at);
    auto between_calls = between(*text, "", "<tool_call>probe_tool", &at);
    auto after_name_2 = between(*text, "", "<arg_key>probe_arg</arg_key>", &at);
    if (!after_name || !key_to_value || !after_value || !key_to_value_2 || !after_last || !between_calls ||
        !after_name_2)
        return layout;
    for (const std::string* s : {&*after_name, &*key_to_value, &*after_value, &*between_calls})
        if (!blank(*s)) return layout;
    if (*key_to_value_2 != *key_to_value || *after_last != *after_value || *after_name_2 != *after_name)
        return layout;
    return {*after_name, *key_to_value, *after_value, *between_calls, true};
}

}  // namespace

ToolCallStyle tool_call_style(const ChatTemplate& chat_template) {
    static const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "probe_tool",
        "description": "d", "parameters": {"type": "object", "properties": {"probe_arg": {"type": "string"}}}}}])");
    for (const bool null_content : {false, true}) {
        for (const bool as_text : {false, true}) {
            ojson messages = ojson::parse(R"([{"role": "user", "content": "q"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function",
                    "function": {"name": "probe_tool", "arguments": {"probe_arg": "v"}}}]},
                {"role": "tool", "tool_call_id": "call_0", "content": "r"}])");
            ojson& assistant = messages[1];
            if (null_content) assistant["content"] = nullptr;
            if (as_text) assistant["tool_calls"][0]["function"]["arguments"] = R"({"probe_arg": "v"})";
            Expected<std::string> text = chat_template.render(messages, kTools, false, ojson::object());
            if (!text.has_value()) continue;
            auto form = probe_form(*text);
            if (!form) continue;
            ToolCallStyle style{*form, as_text, null_content, {}};
            if (*form == ToolCallForm::kGlm) style.glm = glm_layout(chat_template, kTools, null_content);
            return style;
        }
    }
    return {};
}

std::string_view forced_call_open(ToolCallForm form) {
    if (form == ToolCallForm::kHarmony) return kHarmonyCallOpen;
    if (form == ToolCallForm::kGlm) return kGlmCallOpen;
    const bool deepseek = form == ToolCallForm::kDeepSeek || form == ToolCallForm::kDeepSeekV31;
    return deepseek ? kDeepSeekCallsOpen : kToolCallOpen;
}

std::string forced_call_prefix(const ChatRequest& request, const ToolCallStyle& style) {
    if (style.form == ToolCallForm::kGlm && !style.glm.known) return std::string(kToolCallOpen);
    std::string prefix(forced_call_open(style.form));
    if (style.form == ToolCallForm::kHarmony)
        if (auto name = single_tool(request)) prefix += *name + std::string(kHarmonyCallHeader);
    return prefix;
}

ojson tools_for_template(const ToolCallStyle& style, const ojson& tools) {
    if (style.form != ToolCallForm::kHarmony || !tools.is_array()) return tools;
    ojson out = tools;
    for (ojson& t : out) {
        auto fn = t.find("function");
        if (fn == t.end() || !fn->is_object()) continue;
        if (!fn->contains("description")) (*fn)["description"] = "";
        // The first revision also adds each parameter's description to a string (the current one
        // tests it first, and skips an empty one).
        auto params = fn->find("parameters");
        if (params == fn->end() || !params->is_object()) continue;
        auto props = params->find("properties");
        if (props == params->end() || !props->is_object()) continue;
        for (auto& [name, schema] : props->items())
            if (schema.is_object() && !schema.contains("description")) schema["description"] = "";
    }
    return out;
}

ojson messages_for_template(const ToolCallStyle& style, const ojson& messages,
                            const ojson& request_messages) {
    if (style.form == ToolCallForm::kHarmony) return harmony_messages(messages);
    ojson out = messages;
    if (!style.arguments_as_text && !style.null_content) return out;
    for (size_t i = 0; i < out.size(); ++i) {
        ojson& m = out[i];
        auto calls = m.find("tool_calls");
        if (m.value("role", "") != "assistant" || calls == m.end() || !calls->is_array()) continue;
        if (style.null_content && m.value("content", ojson()) == "") m["content"] = nullptr;
        if (!style.arguments_as_text) continue;
        for (size_t j = 0; j < calls->size(); ++j) {
            ojson& args = (*calls)[j]["function"]["arguments"];
            if (const ojson* text = request_arguments(request_messages, i, j))
                args = *text;
            else if (!args.is_string())
                args = args.dump();
        }
    }
    return out;
}

ApiError schema_error(const Status& status, const std::string& param) {
    const bool unsupported = status.message().find("not supported") != std::string::npos;
    return invalid_request(status.message(), param, unsupported ? "unsupported_schema" : "invalid_schema");
}

std::variant<std::shared_ptr<const Grammar>, ApiError> forced_tool_call_grammar(const ChatRequest& r,
                                                                                const ToolCallStyle& style) {
    using Seq = GrammarBuilder::Sequence;
    const auto append = [](Seq& seq, std::string_view text) {
        for (const auto& s : GrammarBuilder::literal(text)) seq.push_back(s);
    };
    // GLM with separators that are not whitespace: its calls in the JSON form (forced_call_prefix).
    const ToolCallForm form =
        style.form == ToolCallForm::kGlm && !style.glm.known ? ToolCallForm::kJson : style.form;
    const bool deepseek = form == ToolCallForm::kDeepSeek || form == ToolCallForm::kDeepSeekV31;
    const bool harmony = form == ToolCallForm::kHarmony;
    const bool glm = form == ToolCallForm::kGlm;
    // Harmony with one tool allowed: its header is in the prompt (forced_call_prefix), ARGS follow.
    const std::optional<std::string> harmony_tool = harmony ? single_tool(r) : std::nullopt;
    GrammarBuilder b;
    // The output parser ends a call at its first "</tool_call>": no JSON string may spell it (the
    // tagged forms' text values are kept from it by add_tagged_tool_arguments), nor, in GLM's form,
    // "</arg_value>", where its reader ends a JSON value too: there no JSON string holds "</".
    // DeepSeek's and harmony's readers pass over an end tag inside the arguments (see tool_calls.h).
    if (glm)
        b.guard_json_strings("</");
    else if (!deepseek && !harmony)
        b.guard_json_strings(std::string(kToolCallClose));
    const GrammarBuilder::RuleId body = b.add_rule();
    for (size_t i = 0; i < r.tools.size(); ++i) {
        const auto& fn = r.tools[i]["function"];
        const std::string name = fn["name"].get<std::string>();
        if (r.tool_choice == ToolChoiceMode::kNamed && name != r.tool_choice_name) continue;
        const std::string param = "tools[" + std::to_string(i) + "].function.parameters";
        static const ojson kNoParameters = {
            {"type", "object"}, {"properties", ojson::object()}, {"additionalProperties", false}};
        auto p = fn.find("parameters");
        const ojson& parameters = p == fn.end() || p->is_null() ? kNoParameters : *p;
        if (form == ToolCallForm::kXml || glm) {
            const GlmLayout& l = style.glm;
            auto args = b.add_tagged_tool_arguments(
                parameters,
                glm ? GrammarBuilder::ArgumentMarkup::glm(l.key_to_value, l.after_value)
                    : GrammarBuilder::ArgumentMarkup::qwen_xml(),
                param);
            if (args.has_value()) {
                Seq seq = GrammarBuilder::literal(glm ? name + l.after_name : "<function=" + name + ">\n");
                seq.push_back(GrammarBuilder::Symbol::ref(*args));
                append(seq, (glm ? "" : "</function>\n") + std::string(kToolCallClose));
                b.add_alternative(body, std::move(seq));
                continue;
            }
            // What the tagged form cannot carry is written in the JSON form below; other errors are
            // the schema's.
            if (args.status().code() != ErrorCode::kUnsupported) return schema_error(args.status(), param);
        }
        auto args = b.add_json_schema(parameters, param);
        if (!args) return schema_error(args.status(), param);
        Seq seq;
        if (harmony_tool) {
            seq = {GrammarBuilder::Symbol::ref(*args)};
        } else if (harmony) {
            seq = GrammarBuilder::literal(name + std::string(kHarmonyCallHeader));
            seq.push_back(GrammarBuilder::Symbol::ref(*args));
        } else if (form == ToolCallForm::kDeepSeek) {
            seq = GrammarBuilder::literal("function" + std::string(kDeepSeekSep) + name + "\n```json\n");
            seq.push_back(GrammarBuilder::Symbol::ref(*args));
            append(seq, "\n```" + std::string(kDeepSeekCallClose));
        } else if (form == ToolCallForm::kDeepSeekV31) {
            seq = GrammarBuilder::literal(name + std::string(kDeepSeekSep));
            seq.push_back(GrammarBuilder::Symbol::ref(*args));
            append(seq, kDeepSeekCallClose);
        } else {
            seq = GrammarBuilder::literal("{\"name\": " + json(name).dump() + ", \"arguments\": ");
            seq.push_back(GrammarBuilder::Symbol::ref(*args));
            append(seq, "}\n" + std::string(kToolCallClose));
        }
        b.add_alternative(body, std::move(seq));
    }
    GrammarBuilder::RuleId root = body;
    if (harmony) {
        // One call: <|call|> ends the generation (an end-of-sequence id), which the constraint allows
        // once ARGS are whole.
    } else if (deepseek) {
        // more = "<｜tool▁calls▁end｜>" | ["\n"] "<｜tool▁call▁begin｜>" body more   (the second when
        // parallel_tool_calls)
        const GrammarBuilder::RuleId more = b.add_rule();
        b.add_alternative(more, GrammarBuilder::literal(kDeepSeekCallsClose));
        if (r.parallel_tool_calls) {
            Seq again = GrammarBuilder::literal((form == ToolCallForm::kDeepSeek ? "\n" : "") +
                                                std::string(kDeepSeekCallOpen));
            again.push_back(GrammarBuilder::Symbol::ref(body));
            again.push_back(GrammarBuilder::Symbol::ref(more));
            b.add_alternative(more, std::move(again));
        }
        root = b.add_rule();
        b.add_alternative(root, {GrammarBuilder::Symbol::ref(body), GrammarBuilder::Symbol::ref(more)});
    } else if (r.parallel_tool_calls) {
        // more = "" | "\n<tool_call>\n" body more   (GLM: between_calls "<tool_call>")
        const GrammarBuilder::RuleId more = b.add_rule();
        b.add_alternative(more, {});
        Seq again = GrammarBuilder::literal(glm ? style.glm.between_calls + std::string(kGlmCallOpen)
                                                : "\n" + std::string(kToolCallOpen));
        again.push_back(GrammarBuilder::Symbol::ref(body));
        again.push_back(GrammarBuilder::Symbol::ref(more));
        b.add_alternative(more, std::move(again));
        root = b.add_rule();
        b.add_alternative(root, {GrammarBuilder::Symbol::ref(body), GrammarBuilder::Symbol::ref(more)});
    }
    auto g = b.build(root);
    if (!g) return schema_error(g.status(), "tools");
    return *g;
}

}  // namespace sluice::server
