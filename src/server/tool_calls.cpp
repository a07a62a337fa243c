// Forced tool calls in the template's own form (see tool_calls.h).
#include "server/tool_calls.h"

namespace sluice::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ToolCallForm tool_call_form(const ChatTemplate& chat_template) {
    static const ojson kTools = ojson::parse(R"([{"type": "function", "function": {"name": "probe_tool",
        "description": "d", "parameters": {"type": "object", "properties": {"probe_arg": {"type": "string"}}}}}])");
    static const ojson kMessages = ojson::parse(R"([{"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function",
            "function": {"name": "probe_tool", "arguments": {"probe_arg": "v"}}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "r"}])");
    Expected<std::string> text = chat_template.render(kMessages, kTools, false, ojson::object());
    if (!text.has_value()) return ToolCallForm::kJson;
    if (text->find("<function=probe_tool>") != std::string::npos) return ToolCallForm::kXml;
    if (text->find("<arg_key>probe_arg</arg_key>") != std::string::npos) return ToolCallForm::kGlm;
    return ToolCallForm::kJson;
}

ApiError schema_error(const Status& status, const std::string& param) {
    const bool unsupported = status.message().find("not supported") != std::string::npos;
    return invalid_request(status.message(), param, unsupported ? "unsupported_schema" : "invalid_schema");
}

std::variant<std::shared_ptr<const Grammar>, ApiError> forced_tool_call_grammar(const ChatRequest& r,
                                                                                ToolCallForm form) {
    using Seq = GrammarBuilder::Sequence;
    GrammarBuilder b;
    // The output parser ends a call at its first "</tool_call>": no JSON string may spell it (the
    // XML form's text values are kept from it by add_xml_tool_arguments).
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
        if (form == ToolCallForm::kXml) {
            auto args = b.add_xml_tool_arguments(parameters, param);
            if (args.has_value()) {
                Seq seq = GrammarBuilder::literal("<function=" + name + ">\n");
                seq.push_back(GrammarBuilder::Symbol::ref(*args));
                for (const auto& s : GrammarBuilder::literal("</function>\n" + std::string(kToolCallClose)))
                    seq.push_back(s);
                b.add_alternative(body, std::move(seq));
                continue;
            }
            // What the XML form cannot carry is written in the JSON form below; other errors are the
            // schema's.
            if (args.status().code() != ErrorCode::kUnsupported) return schema_error(args.status(), param);
        }
        auto args = b.add_json_schema(parameters, param);
        if (!args) return schema_error(args.status(), param);
        Seq seq = GrammarBuilder::literal("{\"name\": " + json(name).dump() + ", \"arguments\": ");
        seq.push_back(GrammarBuilder::Symbol::ref(*args));
        for (const auto& s : GrammarBuilder::literal("}\n" + std::string(kToolCallClose))) seq.push_back(s);
        b.add_alternative(body, std::move(seq));
    }
    GrammarBuilder::RuleId root = body;
    if (r.parallel_tool_calls) {
        // more = "" | "\n<tool_call>\n" body more
        const GrammarBuilder::RuleId more = b.add_rule();
        b.add_alternative(more, {});
        Seq again = GrammarBuilder::literal("\n" + std::string(kToolCallOpen));
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
