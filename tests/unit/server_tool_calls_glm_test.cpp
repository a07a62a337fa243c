// Forced tool calls in GLM's form (src/server/tool_calls.h, GrammarBuilder::ArgumentMarkup::glm):
// the separators are read from renders of the template — GLM-4.5 / 4.6's newlines, GLM-4.7 / 5's
// none — and the grammar accepts exactly the bytes each template prints for its calls, which the
// output parser reads back to the same typed arguments. It refuses what breaks the schema or the
// form: a text holding "</arg_value>" or "</tool_call>", a JSON string spelling "</" (GLM's reader
// ends every value at the first "</arg_value>": the '/' is written \u002f and reads back the same),
// an undeclared argument, another tool when one is named. A template whose separators are not
// whitespace gets its forced calls as JSON, which the parser reads too.
#include <gtest/gtest.h>

#include "server/api.h"
#include "server/output_parser.h"
#include "server/tool_calls.h"
#include "sluice/chat_template.h"
#include "sluice/constrain.h"
#include "tool_call_grammar.h"

namespace sluice::server {
namespace {

using tool_call_testing::accepts;
using tool_call_testing::grammar_of;

using ojson = nlohmann::ordered_json;

// GLM-4.5 / 4.6's assistant turn as their chat_template.jinja prints it (the reasoning and tool
// parts kept; rendered with trim_blocks and lstrip_blocks, as transformers does).
constexpr const char* kGlm45Template = R"([gMASK]<sop>
{%- for m in messages %}
{%- if m.role == 'user' %}<|user|>
{{ m.content }}
{%- elif m.role == 'assistant' %}<|assistant|>
{{- '\n<think></think>' }}
{%- if m.content %}{{ '\n' + m.content.strip() }}{%- endif %}
{% if m.tool_calls %}
{% for tc in m.tool_calls %}
{%- if tc.function %}
    {%- set tc = tc.function %}
{%- endif %}
{{ '\n<tool_call>' + tc.name }}
{% set _args = tc.arguments %}
{% for k, v in _args.items() %}
<arg_key>{{ k }}</arg_key>
<arg_value>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</arg_value>
{% endfor %}
</tool_call>{% endfor %}
{% endif %}
{%- elif m.role == 'tool' %}<|observation|>
<tool_response>
{{ m.content }}
</tool_response>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>{%- endif %})";

// GLM-4.7 / 5's: no separators.
constexpr const char* kGlm47Template = R"([gMASK]<sop>
{%- for m in messages %}
{%- if m.role == 'user' %}<|user|>{{ m.content }}
{%- elif m.role == 'assistant' %}<|assistant|><think></think>
{%- if m.content %}{{ m.content.strip() }}{%- endif %}
{% if m.tool_calls %}
{% for tc in m.tool_calls %}
{%- if tc.function %}
    {%- set tc = tc.function %}
{%- endif %}
{{- '<tool_call>' + tc.name -}}
{% set _args = tc.arguments %}{% for k, v in _args.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</arg_value>{% endfor %}</tool_call>{% endfor %}
{% endif %}
{%- elif m.role == 'tool' %}<|observation|><tool_response>{{ m.content }}</tool_response>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|><think>{%- endif %})";

// A GLM-like template whose calls carry a comma after each value: not whitespace.
constexpr const char* kOddGlmTemplate = R"({%- for m in messages %}
{%- if m.role == 'assistant' %}
{%- for tc in m.tool_calls %}<tool_call>{{ tc.function.name }}
{% for k, v in tc.function.arguments.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value>,{% endfor %}</tool_call>
{%- endfor %}
{%- else %}{{ m.content }}{%- endif %}
{%- endfor %})";

const ojson& tools() {
    static const ojson t = ojson::parse(R"([
      {"type": "function", "function": {"name": "write_file", "description": "Write a file",
        "parameters": {"type": "object", "properties": {
          "path": {"type": "string", "maxLength": 40},
          "content": {"type": "string"},
          "mode": {"enum": ["create", "append"]},
          "size": {"type": "integer", "minimum": 0, "maximum": 9999},
          "options": {"$ref": "#/$defs/options"},
          "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
          "append": {"type": "boolean"}},
          "required": ["path", "content", "size"],
          "$defs": {"options": {"type": "object", "properties": {"overwrite": {"type": "boolean"}},
                                "required": ["overwrite"], "additionalProperties": false}}}}},
      {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}},
      {"type": "function", "function": {"name": "headers", "parameters": {"type": "object",
        "patternProperties": {"^x-": {"type": "string"}}}}}])");
    return t;
}

ChatRequest forced(const std::string& named = "", bool parallel = true) {
    ChatRequest r;
    r.tools = tools();
    r.tool_choice = named.empty() ? ToolChoiceMode::kRequired : ToolChoiceMode::kNamed;
    r.tool_choice_name = named;
    r.parallel_tool_calls = parallel;
    return r;
}

ojson call(const std::string& name, ojson args) {
    return {{"type", "function"}, {"function", {{"name", name}, {"arguments", std::move(args)}}}};
}

ToolCallStyle style_of(const char* source) {
    auto t = ChatTemplate::from_string(source);
    EXPECT_TRUE(t.has_value()) << t.status().message();
    return t.has_value() ? tool_call_style(*t) : ToolCallStyle{};
}

// What the template prints for an assistant turn with these calls, from its first "<tool_call>" on
// (the part the forced prompt holds left out), to the end of its last call.
std::string rendered_calls(const char* source, const ojson& calls) {
    auto t = ChatTemplate::from_string(source);
    EXPECT_TRUE(t.has_value());
    ojson messages = ojson::array();
    messages.push_back({{"role", "user"}, {"content", "q"}});
    messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}});
    auto text = t->render(messages, tools(), false, ojson::object());
    EXPECT_TRUE(text.has_value()) << text.status().message();
    const std::string s = text.has_value() ? *text : std::string();
    const size_t begin = s.find(kGlmCallOpen);
    const size_t end = s.rfind("</tool_call>");
    EXPECT_NE(begin, std::string::npos) << s;
    return s.substr(begin + kGlmCallOpen.size(), end + 12 - begin - kGlmCallOpen.size());
}

std::vector<ParsedToolCall> parse(const std::string& prefix, const std::string& reply) {
    OutputParser p(false, true, tools());
    ParsedDelta all = p.feed(prefix + reply);
    all.append(p.finish());
    EXPECT_EQ(all.content, "") << reply;
    return all.tool_calls;
}

TEST(ServerToolCallsGlm, TheSeparatorsAreReadFromTheTemplate) {
    const ToolCallStyle glm45 = style_of(kGlm45Template);
    ASSERT_EQ(glm45.form, ToolCallForm::kGlm);
    EXPECT_TRUE(glm45.glm.known);
    EXPECT_EQ(glm45.glm.after_name, "\n");
    EXPECT_EQ(glm45.glm.key_to_value, "\n");
    EXPECT_EQ(glm45.glm.after_value, "\n");
    EXPECT_EQ(glm45.glm.between_calls, "\n");
    const ToolCallStyle glm47 = style_of(kGlm47Template);
    ASSERT_EQ(glm47.form, ToolCallForm::kGlm);
    EXPECT_TRUE(glm47.glm.known);
    EXPECT_EQ(glm47.glm.after_name + glm47.glm.key_to_value + glm47.glm.after_value + glm47.glm.between_calls,
              "");
    EXPECT_EQ(forced_call_prefix(forced(), glm45), "<tool_call>");
    EXPECT_EQ(forced_call_prefix(forced("now"), glm47), "<tool_call>");

    const ToolCallStyle odd = style_of(kOddGlmTemplate);
    ASSERT_EQ(odd.form, ToolCallForm::kGlm);
    EXPECT_FALSE(odd.glm.known);
    EXPECT_EQ(forced_call_prefix(forced(), odd), kToolCallOpen);
}

TEST(ServerToolCallsGlm, TheGrammarAcceptsEachTemplatesOwnCallsAndTheyReadBackTyped) {
    // Strings that look like other values stay strings; a multi-line text with markup-like bytes.
    const ojson full = {{"path", "123"},
                        {"content", "line 1\n<b>x</b> </arg_value\n\"quoted\" {\"a\": 1}\n"},
                        {"mode", "append"},
                        {"size", 42},
                        {"options", {{"overwrite", true}}},
                        {"tags", {"a", "b"}},
                        {"append", false}};
    const ojson minimal = {{"path", "a.txt"}, {"content", ""}, {"size", 0}};
    const ojson calls =
        ojson::array({call("write_file", full), call("now", ojson::object()), call("write_file", minimal)});
    for (const char* source : {kGlm45Template, kGlm47Template}) {
        const ToolCallStyle style = style_of(source);
        auto g = grammar_of(forced(), style);
        ASSERT_TRUE(g);
        const std::string reply = rendered_calls(source, calls);
        EXPECT_TRUE(accepts(g, reply)) << reply;
        const auto parsed = parse(forced_call_prefix(forced(), style), reply);
        ASSERT_EQ(parsed.size(), 3u) << reply;
        EXPECT_EQ(parsed[0].name, "write_file");
        EXPECT_EQ(ojson::parse(parsed[0].arguments), full) << parsed[0].arguments;
        EXPECT_EQ(parsed[1].name + parsed[1].arguments, "now{}");
        EXPECT_EQ(ojson::parse(parsed[2].arguments), minimal) << parsed[2].arguments;
        // Each call alone, and every prefix of the reply continues a sentence (no dead end).
        EXPECT_TRUE(accepts(g, rendered_calls(source, ojson::array({call("now", ojson::object())}))));
        for (size_t i = 0; i < reply.size(); ++i)
            ASSERT_TRUE(GrammarMatcher(g).feed(reply.substr(0, i))) << i << " of " << reply;
        // The other layout's bytes are not this template's.
        const char* other = source == kGlm45Template ? kGlm47Template : kGlm45Template;
        EXPECT_FALSE(accepts(g, rendered_calls(other, calls)));
    }
}

TEST(ServerToolCallsGlm, TheGrammarRefusesWhatBreaksTheSchemaOrTheForm) {
    const ToolCallStyle style = style_of(kGlm45Template);
    auto g = grammar_of(forced(), style);
    ASSERT_TRUE(g);
    const std::string head = "write_file\n<arg_key>path</arg_key>\n<arg_value>a</arg_value>\n";
    const std::string size = "<arg_key>size</arg_key>\n<arg_value>3</arg_value>\n</tool_call>";
    auto with_content = [&](const std::string& c) {
        return head + "<arg_key>content</arg_key>\n<arg_value>" + c + "</arg_value>\n" + size;
    };
    auto with_tags = [&](const std::string& tags) {
        return head + "<arg_key>content</arg_key>\n<arg_value>x</arg_value>\n" +
               "<arg_key>size</arg_key>\n<arg_value>3</arg_value>\n<arg_key>tags</arg_key>\n<arg_value>" +
               tags + "</arg_value>\n</tool_call>";
    };
    EXPECT_TRUE(accepts(g, with_content("ok")));
    EXPECT_FALSE(accepts(g, head + size)) << "a required argument left out";
    EXPECT_FALSE(accepts(g, with_content("a </arg_value> b"))) << "a text holding the value's end";
    EXPECT_FALSE(accepts(g, with_content("a </tool_call> b"))) << "a text holding the call's end";
    EXPECT_FALSE(accepts(g, with_content("ok").substr(0, 60))) << "a cut call is not complete";
    EXPECT_FALSE(accepts(g, head + "<arg_key>content</arg_key>\n<arg_value>x</arg_value>\n"
                                   "<arg_key>size</arg_key>\n<arg_value>\"3\"</arg_value>\n</tool_call>"))
        << "an integer as a JSON string";
    EXPECT_FALSE(accepts(g, head +
                                "<arg_key>content</arg_key>\n<arg_value>x</arg_value>\n"
                                "<arg_key>color</arg_key>\n<arg_value>red</arg_value>\n" +
                                size))
        << "an undeclared argument";
    EXPECT_FALSE(accepts(g, "delete\n</tool_call>")) << "an unknown tool";
    // A JSON string never spells "</" (where GLM's reader would end the value): its '/' is escaped,
    // and reads back the same.
    EXPECT_TRUE(accepts(g, with_tags(R"(["a"])")));
    EXPECT_FALSE(accepts(g, with_tags(R"(["</arg_value>"])")));
    EXPECT_FALSE(accepts(g, with_tags(R"(["</x"])")));
    const std::string escaped = with_tags(R"(["<\u002farg_value>"])");
    EXPECT_TRUE(accepts(g, escaped)) << escaped;
    const auto parsed = parse("<tool_call>", escaped);
    ASSERT_EQ(parsed.size(), 1u);
    EXPECT_EQ(ojson::parse(parsed[0].arguments)["tags"], ojson::array({"</arg_value>"}));
    // A model that began "</" in a string has a way on.
    EXPECT_TRUE(GrammarMatcher(g).feed(with_tags(R"(["<)").substr(0, with_tags(R"(["<)").find("\"<") + 2) +
                                       "\\u002f"));

    // A named tool: only it. Without parallel_tool_calls: one call.
    const std::string now = "now\n</tool_call>";
    auto named = grammar_of(forced("now"), style);
    EXPECT_TRUE(accepts(named, now));
    EXPECT_FALSE(accepts(named, with_content("ok")));
    auto single = grammar_of(forced("", false), style);
    EXPECT_TRUE(accepts(single, now));
    EXPECT_FALSE(accepts(single, now + "\n<tool_call>" + now));
    EXPECT_TRUE(accepts(g, now + "\n<tool_call>" + now));
    EXPECT_FALSE(accepts(g, now + "\n<tool_call>\n" + now)) << "GLM's name follows the tag";
}

TEST(ServerToolCallsGlm, WhatTheFormCannotCarryOrAnUnknownLayoutIsForcedAsJson) {
    // "headers" (patternProperties) has no tagged rendering of its free keys: its calls are JSON,
    // which the parser reads too; the other tools stay in GLM's form.
    const ToolCallStyle style = style_of(kGlm45Template);
    auto g = grammar_of(forced(), style);
    ASSERT_TRUE(g);
    const std::string as_json = "{\"name\": \"headers\", \"arguments\": {\"x-a\": \"1\"}}\n</tool_call>";
    EXPECT_TRUE(accepts(g, as_json));
    EXPECT_FALSE(accepts(g, "headers\n<arg_key>x-a</arg_key>\n<arg_value>1</arg_value>\n</tool_call>"));
    auto parsed = parse("<tool_call>", as_json);
    ASSERT_EQ(parsed.size(), 1u);
    EXPECT_EQ(parsed[0].name + parsed[0].arguments, R"(headers{"x-a":"1"})");
    EXPECT_FALSE(accepts(g, "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"))
        << "a tool the form carries is written in it";

    // Separators that are not whitespace: every call as JSON after "<tool_call>\n".
    const ToolCallStyle odd = style_of(kOddGlmTemplate);
    auto j = grammar_of(forced(), odd);
    ASSERT_TRUE(j);
    const std::string now = "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    EXPECT_TRUE(accepts(j, now));
    EXPECT_FALSE(accepts(j, "now\n</tool_call>"));
    parsed = parse(forced_call_prefix(forced(), odd), now);
    ASSERT_EQ(parsed.size(), 1u);
    EXPECT_EQ(parsed[0].name + parsed[0].arguments, "now{}");
}

}  // namespace
}  // namespace sluice::server
