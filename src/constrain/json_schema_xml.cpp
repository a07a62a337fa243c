// A tool's arguments in the tagged tool-call forms (GrammarBuilder::add_tagged_tool_arguments, see
// sluice/constrain.h). Qwen3.5 / Qwen3-Coder chat templates (add_xml_tool_arguments) write a call as
//
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
//
// GLM-4.5 and later as
//
//   <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n...</tool_call>
//
// (GLM-4.7 / 5 without the newlines), both with a string VALUE as its own text (no quotes, no
// escapes) and any other value as JSON (`args_value | string if args_value is string else args_value
// | tojson`). This file makes the argument blocks: one per member of the tool's parameters schema,
// in declaration order, required members always and optional ones when the model chooses, no others
// (a subset of what the schema accepts, as for JSON objects).
//
// A text value is the string's language (minLength, maxLength, pattern, format, enum/const) minus
// every text holding what ends it for the form's reader ("</parameter>" or "</tool_call>"; GLM's:
// "</arg_value>" or "</tool_call>"), so the grammar never writes one inside. A JSON value is compiled
// by the JSON Schema compiler with the parameters schema as its root, so `$ref`s into the tool's
// `$defs` resolve. In the XML form a JSON value cannot hold "\n</parameter>" (a raw newline is never
// part of a JSON string, and between tokens it is not followed by '<'); it may hold "</parameter>"
// inside a string (the reader ends a JSON value at "\n</parameter>"), but not "</tool_call>" where the
// builder guards JSON strings against it (guard_json_strings: the forced-call grammar does). GLM's
// reader ends a JSON value at the first "</arg_value>" too: its forced-call grammar guards "</".
//
// What a form cannot carry is kUnsupported (the caller may fall back to the JSON form): a
// schema that is not a plain object of named properties (patternProperties, propertyNames,
// min/maxProperties, anyOf at the top…), a required name not among the properties, a name holding
// what the form's reader ends a name at ('>' in the XML form, '<' in GLM's) or a line break, or
// surrounded by spaces (the readers trim names). A broken schema is kInvalidArgument, as from
// add_json_schema.
// Rejected alternative: every value as JSON (quoted strings) — the model's template prints strings
// raw, so a forced call would be written in a form the model never saw in its prompt, and a string
// argument "123" would read back as a number.
#include <algorithm>

#include "constrain/json_schema_compiler.h"
#include "constrain/regex.h"

namespace sluice {

using constrain::Dfa;
using schema_grammar::cat;
using schema_grammar::L;
using schema_grammar::S;
using RuleId = GrammarBuilder::RuleId;
using Sequence = GrammarBuilder::Sequence;
using ojson = nlohmann::ordered_json;

namespace {

Status form_refuses(const std::string& where, const std::string& path, const std::string& why) {
    return error(ErrorCode::kUnsupported, "[json_schema] " + (where.empty() ? std::string() : where + " ") +
                                              "at '" + path + "': the tagged tool-call form cannot carry " +
                                              why);
}

// The strings of an enum / const (null when the schema has neither).
std::optional<std::vector<std::string>> enumerated_strings(const ojson& s) {
    if (!s.contains("enum") && !s.contains("const")) return std::nullopt;
    std::vector<ojson> values;
    if (auto it = s.find("enum"); it != s.end() && it->is_array()) values.assign(it->begin(), it->end());
    if (auto it = s.find("const"); it != s.end()) {
        const bool listed =
            !s.contains("enum") || std::find(values.begin(), values.end(), *it) != values.end();
        values.clear();
        if (listed) values.push_back(*it);
    }
    std::vector<std::string> out;
    for (const ojson& v : values)
        if (v.is_string()) out.push_back(v.get<std::string>());
    return out;
}

}  // namespace

bool GrammarBuilder::xml_value_is_text(const nlohmann::ordered_json& schema) {
    if (!schema.is_object()) return false;
    if (auto t = schema.find("type"); t != schema.end()) return t->is_string() && *t == "string";
    auto strings = enumerated_strings(schema);
    if (!strings || strings->empty()) return false;
    // Every listed value a string.
    if (auto e = schema.find("enum"); e != schema.end() && e->is_array())
        for (const auto& v : *e)
            if (!v.is_string()) return false;
    if (auto c = schema.find("const"); c != schema.end() && !c->is_string()) return false;
    return true;
}

GrammarBuilder::ArgumentMarkup GrammarBuilder::ArgumentMarkup::qwen_xml() {
    return {"<parameter=", ">\n", "\n</parameter>\n", "</parameter>|</tool_call>", ">\n\r\t"};
}

GrammarBuilder::ArgumentMarkup GrammarBuilder::ArgumentMarkup::glm(std::string_view key_to_value,
                                                                   std::string_view after_value) {
    return {"<arg_key>", "</arg_key>" + std::string(key_to_value) + "<arg_value>",
            "</arg_value>" + std::string(after_value), "</arg_value>|</tool_call>", "<\n\r\t"};
}

Expected<RuleId> JsonSchemaCompiler::compile_tagged_text(const ojson& s, std::string_view text_ends,
                                                         const std::string& path) {
    auto contains_terminator = constrain::pattern_dfa(text_ends, kMaxAutomatonStates);
    if (!contains_terminator) return contains_terminator.status();
    if (auto strings = enumerated_strings(s)) {
        for (const auto& item : s.items()) {
            const std::string& k = item.key();
            if (k != "enum" && k != "const" && k != "type" && !annotation_keywords().count(k))
                return unsupported(path, k, "beside 'enum'/'const'");
        }
        const RuleId self = b_.add_rule();
        size_t written = 0;
        for (const std::string& v : *strings) {
            std::u32string text;
            if (!constrain::decode_utf8(v, &text) || contains_terminator->accepts(text)) continue;
            b_.add_alternative(self, L(v));
            ++written;
        }
        if (written == 0)
            return fail(path, "no string value of 'enum'/'const' can be written as a parameter's text");
        return self;
    }
    for (const auto& item : s.items()) {
        const std::string& k = item.key();
        if (k == "type" || k == "minLength" || k == "maxLength" || k == "pattern" || k == "format" ||
            annotation_keywords().count(k))
            continue;
        return unsupported(path, k, "for a string");
    }
    SLUICE_ASSIGN_OR_RETURN(StringLanguage lang, string_language(s, path));
    auto text = Dfa::combine(lang.dfa ? *lang.dfa : Dfa::any_text(), *contains_terminator, Dfa::Op::kAndNot,
                             kMaxAutomatonStates);
    if (!text) return automaton_error(path, "pattern", "as a parameter's text", text.status());
    lang.dfa = text->minimized();
    const std::string keyword = s.contains("pattern") ? "pattern" : s.contains("format") ? "format" : "type";
    return string_of(lang, path, keyword, /*json_string=*/false);
}

Expected<RuleId> JsonSchemaCompiler::compile_tagged_arguments(const ojson& s,
                                                              const GrammarBuilder::ArgumentMarkup& markup,
                                                              const std::string& path) {
    if (!s.is_object()) return form_refuses(where_, path, "parameters that are not an object schema");
    for (const auto& item : s.items()) {
        const std::string& k = item.key();
        if (k == "type" || k == "properties" || k == "required" || k == "additionalProperties" ||
            annotation_keywords().count(k))
            continue;
        return form_refuses(where_, path,
                            "keyword '" + k + "' (only properties, required, additionalProperties)");
    }
    if (auto t = s.find("type"); t != s.end() && !(t->is_string() && *t == "object"))
        return form_refuses(where_, path, "parameters of type " + t->dump());
    static const ojson kNone = ojson::object();
    auto p = s.find("properties");
    const ojson& properties = p == s.end() ? kNone : *p;
    if (!properties.is_object()) return fail(path, "'properties' must be an object");
    std::set<std::string> required;
    if (auto r = s.find("required"); r != s.end()) {
        if (!r->is_array()) return fail(path, "'required' must be an array of strings");
        for (const auto& name : *r) {
            if (!name.is_string()) return fail(path, "'required' must be an array of strings");
            if (!properties.contains(name.get<std::string>()))
                return form_refuses(
                    where_, path,
                    "the required name '" + name.get<std::string>() + "', which is not among the properties");
            required.insert(name.get<std::string>());
        }
    }
    Sequence all;
    for (const auto& [name, schema] : properties.items()) {
        const std::string at = path + "/properties/" + name;
        const bool trimmed = !name.empty() && name.front() != ' ' && name.back() != ' ';
        if (!trimmed || name.find_first_of(markup.name_excludes) != std::string::npos)
            return form_refuses(where_, at, "the parameter name " + ojson(name).dump());
        SLUICE_ASSIGN_OR_RETURN(RuleId value, GrammarBuilder::xml_value_is_text(schema)
                                                  ? compile_tagged_text(schema, markup.text_ends, at)
                                                  : compile(schema, at));
        const RuleId block = b_.add_rule();
        b_.add_alternative(
            block, cat({L(markup.key_open + name + markup.key_to_value), {S(value)}, L(markup.value_close)}));
        if (required.count(name)) {
            all.push_back(S(block));
        } else {
            const RuleId optional = b_.add_rule();
            b_.add_alternative(optional, {});
            b_.add_alternative(optional, {S(block)});
            all.push_back(S(optional));
        }
    }
    const RuleId self = b_.add_rule();
    b_.add_alternative(self, std::move(all));
    return self;
}

Expected<GrammarBuilder::RuleId> GrammarBuilder::add_xml_tool_arguments(const nlohmann::ordered_json& schema,
                                                                        const std::string& where) {
    return add_tagged_tool_arguments(schema, ArgumentMarkup::qwen_xml(), where);
}

Expected<GrammarBuilder::RuleId> GrammarBuilder::add_tagged_tool_arguments(
    const nlohmann::ordered_json& schema, const ArgumentMarkup& markup, const std::string& where) {
    JsonSchemaCompiler c(*this, schema, where);
    return c.compile_tagged_arguments(schema, markup, "#");
}

}  // namespace sluice
