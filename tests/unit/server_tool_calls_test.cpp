// Forced tool calls in the template's own form (src/server/tool_calls.h) and their reading back
// (output_parser.h): the form is told from a render of the template (XML for a Qwen3.5-style
// template, JSON for Qwen3's); the XML grammar accepts exactly the bytes the template prints for
// a call — parsed back to the same typed arguments — and refuses what breaks the schema or the
// form (a missing required parameter, a string holding "</parameter>", the JSON form, another
// tool when one is named, a second call without parallel_tool_calls); a tool the XML form cannot
// carry is forced in the JSON form. No JSON string of a forced call spells "</tool_call>" (where
// the parser ends the call), a call cut by the token limit is never content, and booleans are
// forced as the template prints them and read back in Python's spelling too.
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

// The tool-call parts of the Qwen3.5 / Qwen3-Coder chat templates (their system prompt and
// reasoning handling trimmed): arguments one <parameter=…> block each, a string as its text,
// mappings and sequences with tojson, other values with `string`.
constexpr const char* kQwen35Template = R"({%- if tools %}
{{- '<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>' }}
{%- for tool in tools %}{{- '\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\n</tools><|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' %}
{{- '<|im_start|>user\n' + message.content + '<|im_end|>\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\n' + (message.content or '') }}
{%- if message.tool_calls %}
{%- for tool_call in message.tool_calls %}
{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
{%- if loop.first %}{{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}
{%- else %}{{- '\n<tool_call>\n<function=' + tool_call.name + '>\n' }}{%- endif %}
{%- if tool_call.arguments is defined %}
{%- for args_name, args_value in tool_call.arguments|items %}
{{- '<parameter=' + args_name + '>\n' }}
{%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}
{{- args_value }}
{{- '\n</parameter>\n' }}
{%- endfor %}
{%- endif %}
{{- '</function>\n</tool_call>' }}
{%- endfor %}
{%- endif %}
{{- '<|im_end|>\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %})";

// Qwen3's: the call as JSON.
constexpr const char* kQwen3Template = R"({%- for message in messages %}
{{- '<|im_start|>' + message.role + '\n' + (message.content or '') }}
{%- for tool_call in message.tool_calls or [] %}
{%- set tool_call = tool_call.function %}
{{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' + (tool_call.arguments | tojson) + '}\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\n' }}
{%- endfor %})";

const ojson& tools() {
    static const ojson t = ojson::parse(R"([
      {"type": "function", "function": {"name": "write_file", "description": "Write a file",
        "parameters": {"type": "object", "properties": {
          "path": {"type": "string", "maxLength": 40},
          "content": {"type": "string"},
          "mode": {"enum": ["create", "append"]},
          "size": {"type": "integer", "minimum": 0, "maximum": 9999},
          "id": {"type": "string", "pattern": "^[0-9]+$"},
          "options": {"$ref": "#/$defs/options"},
          "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
          "append": {"type": "boolean"}},
          "required": ["path", "content", "size"],
          "$defs": {"options": {"type": "object", "properties": {"overwrite": {"type": "boolean"}},
                                "required": ["overwrite"], "additionalProperties": false}}}}},
      {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}},
      {"type": "function", "function": {"name": "headers", "parameters": {"type": "object",
        "patternProperties": {"^x-": {"type": "string"}}}}},
      {"type": "function", "function": {"name": "note", "parameters": {"type": "object", "properties": {
          "line": {"type": "string", "pattern": "^[^\\n]*$"},
          "short": {"type": "string", "maxLength": 20},
          "kind": {"enum": ["</tool_call>", "plain"]},
          "meta": {}}}}}])");
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

// What the template prints after "<|im_start|>assistant\n" for an assistant turn with these calls,
// from its first "<tool_call>\n" on (the part the forced prompt already holds left out).
std::string rendered_calls(const ChatTemplate& t, const ojson& calls) {
    ojson messages = ojson::array();
    messages.push_back({{"role", "user"}, {"content", "q"}});
    messages.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", calls}});
    auto text = t.render(messages, tools(), false, ojson::object());
    EXPECT_TRUE(text.has_value()) << text.status().message();
    const std::string s = text.has_value() ? *text : std::string();
    const size_t begin = s.find(kToolCallOpen);
    const size_t end = s.rfind("</tool_call>");
    EXPECT_NE(begin, std::string::npos) << s;
    return s.substr(begin + kToolCallOpen.size(), end + 12 - begin - kToolCallOpen.size());
}

ojson call(const std::string& name, ojson args) {
    return {{"type", "function"}, {"function", {{"name", name}, {"arguments", std::move(args)}}}};
}

std::vector<ParsedToolCall> parse(const std::string& reply) {
    OutputParser p(false, true, tools());
    ParsedDelta all = p.feed(std::string(kToolCallOpen) + reply);
    all.append(p.finish());
    EXPECT_EQ(all.content, "") << reply;
    return all.tool_calls;
}

// GLM-4.5 / 4.6's tool-call part (its chat_template.jinja trimmed to the calls): the name on the first
// line, then one <arg_key>/<arg_value> pair per argument, a string as its text, anything else tojson.
constexpr const char* kGlmTemplate = R"([gMASK]<sop>
{%- for m in messages %}
{%- if m.role == 'user' %}<|user|>
{{ m.content }}
{%- elif m.role == 'assistant' %}<|assistant|>
{{ m.content or '' }}
{%- for tc in m.tool_calls or [] %}
{%- if tc.function is defined %}{%- set tc = tc.function %}{%- endif %}
<tool_call>{{ tc.name }}
{% for k, v in (tc.arguments or {}) | items %}<arg_key>{{ k }}</arg_key>
<arg_value>{{ v | tojson if v is not string else v }}</arg_value>
{% endfor %}</tool_call>
{%- endfor %}
{%- elif m.role == 'tool' %}<|observation|>
<tool_response>
{{ m.content }}
</tool_response>
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|assistant|>{%- endif %})";

TEST(ServerToolCalls, GlmFormIsToldFromTheTemplateAndItsCallsReadBackTyped) {
    auto glm = ChatTemplate::from_string(kGlmTemplate);
    ASSERT_TRUE(glm.has_value()) << glm.status().message();
    EXPECT_EQ(tool_call_style(*glm).form, ToolCallForm::kGlm);
    // The calls the template prints for an assistant turn, read back as the same typed arguments.
    const ojson args = {
        {"path", "007"}, {"content", "x\n<b>y</b>"}, {"size", 12}, {"options", {{"overwrite", true}}}};
    const ojson messages = ojson::array(
        {{{"role", "user"}, {"content", "q"}},
         {{"role", "assistant"},
          {"content", ""},
          {"tool_calls",
           ojson::array(
               {{{"type", "function"}, {"function", {{"name", "write_file"}, {"arguments", args}}}},
                {{"type", "function"}, {"function", {{"name", "now"}, {"arguments", ojson::object()}}}}})}}});
    auto text = glm->render(messages, tools(), false, ojson::object());
    ASSERT_TRUE(text.has_value()) << text.status().message();
    const size_t at = text->find("<tool_call>");
    ASSERT_NE(at, std::string::npos) << *text;
    // Fed one byte at a time, as a stream: every call, nothing left as content but the separator.
    OutputParser p(false, true, tools());
    ParsedDelta all;
    for (char c : text->substr(at)) all.append(p.feed(std::string(1, c)));
    all.append(p.finish());
    ASSERT_EQ(all.tool_calls.size(), 2u) << *text << "\ncontent: " << all.content;
    EXPECT_EQ(all.tool_calls[0].name, "write_file");
    EXPECT_EQ(ojson::parse(all.tool_calls[0].arguments), args) << all.tool_calls[0].arguments;
    EXPECT_EQ(all.tool_calls[1].name, "now");
    EXPECT_EQ(ojson::parse(all.tool_calls[1].arguments), ojson::object());
}

TEST(ServerToolCalls, GlmArgumentsAreTypedByTheSchema) {
    const auto parsed = parse(
        "write_file\n<arg_key>path</arg_key>\n<arg_value>007</arg_value>\n<arg_key>size</arg_key>\n"
        "<arg_value>12</arg_value>\n<arg_key>options</arg_key>\n<arg_value>{\"overwrite\": "
        "True}</arg_value>\n"
        "<arg_key>extra</arg_key>\n<arg_value>[1]</arg_value>\n</tool_call>");
    ASSERT_EQ(parsed.size(), 1u);
    EXPECT_EQ(
        ojson::parse(parsed[0].arguments),
        ojson::parse(R"({"path": "007", "size": 12, "options": "{\"overwrite\": True}", "extra": [1]})"))
        << parsed[0].arguments;
    const auto bare = parse("now\n</tool_call>");
    ASSERT_EQ(bare.size(), 1u);
    EXPECT_EQ(bare[0].name, "now");
    EXPECT_EQ(bare[0].arguments, "{}");
    // Not a call: a name OpenAI would refuse, a word that names no tool of the request, a value
    // without its key, an unclosed pair: given back as content.
    for (const std::string bad :
         {"not a name\n</tool_call>", "oops</tool_call>", "now\n<arg_value>1</arg_value>\n</tool_call>",
          "now\n<arg_key>a</arg_key>\n</tool_call>"}) {
        OutputParser p(false, true, tools());
        ParsedDelta all = p.feed(std::string(kToolCallOpen) + bad);
        all.append(p.finish());
        EXPECT_TRUE(all.tool_calls.empty()) << bad;
        EXPECT_EQ(all.content, std::string(kToolCallOpen) + bad) << bad;
    }
}

TEST(ServerToolCalls, TheFormComesFromARenderOfTheTemplate) {
    auto xml = ChatTemplate::from_string(kQwen35Template);
    auto json = ChatTemplate::from_string(kQwen3Template);
    ASSERT_TRUE(xml.has_value() && json.has_value());
    EXPECT_EQ(tool_call_style(*xml).form, ToolCallForm::kXml);
    EXPECT_EQ(tool_call_style(*json).form, ToolCallForm::kJson);
    auto tiny = ChatTemplate::load(std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next");
    ASSERT_TRUE(tiny.has_value());
    EXPECT_EQ(tool_call_style(*tiny).form, ToolCallForm::kJson);  // Qwen3's
}

TEST(ServerToolCalls, XmlGrammarAcceptsTheTemplatesOwnCallsAndReadsThemBackTyped) {
    auto t = ChatTemplate::from_string(kQwen35Template);
    ASSERT_TRUE(t.has_value());
    auto g = grammar_of(forced(), ToolCallForm::kXml);
    ASSERT_TRUE(g);
    // Strings that look like other values stay strings; a multi-line text with markup-like bytes.
    const ojson full = {
        {"path", "123"},     {"content", "line 1\n<b>x</b> </parameter\n\"quoted\" {\"a\": 1}\n"},
        {"mode", "append"},  {"size", 42},
        {"id", "0077"},      {"options", {{"overwrite", true}}},
        {"tags", {"a", "b"}}};
    const ojson minimal = {{"path", "a.txt"}, {"content", ""}, {"size", 0}};
    const ojson calls =
        ojson::array({call("write_file", full), call("now", ojson::object()), call("write_file", minimal)});
    const std::string reply = rendered_calls(*t, calls);
    EXPECT_TRUE(accepts(g, reply)) << reply;
    const auto parsed = parse(reply);
    ASSERT_EQ(parsed.size(), 3u);
    EXPECT_EQ(parsed[0].name, "write_file");
    EXPECT_EQ(ojson::parse(parsed[0].arguments), full) << parsed[0].arguments;
    EXPECT_EQ(parsed[1].name + parsed[1].arguments, "now{}");
    EXPECT_EQ(ojson::parse(parsed[2].arguments), minimal) << parsed[2].arguments;

    // Each call alone, and every prefix of the reply continues a sentence (no dead end).
    EXPECT_TRUE(accepts(g, rendered_calls(*t, ojson::array({call("now", ojson::object())}))));
    for (size_t i = 0; i < reply.size(); ++i) ASSERT_TRUE(GrammarMatcher(g).feed(reply.substr(0, i))) << i;
}

TEST(ServerToolCalls, XmlGrammarRefusesWhatBreaksTheSchemaOrTheForm) {
    auto g = grammar_of(forced(), ToolCallForm::kXml);
    ASSERT_TRUE(g);
    const std::string head = "<function=write_file>\n<parameter=path>\na\n</parameter>\n";
    const std::string tail = "<parameter=size>\n3\n</parameter>\n</function>\n</tool_call>";
    auto with_content = [&](const std::string& c) {
        return head + "<parameter=content>\n" + c + "\n</parameter>\n" + tail;
    };
    EXPECT_TRUE(accepts(g, with_content("ok")));
    EXPECT_FALSE(accepts(g, head + tail)) << "a required parameter left out";
    EXPECT_FALSE(accepts(g, with_content("a </parameter> b"))) << "a text holding the closing tag";
    EXPECT_FALSE(accepts(g, with_content("a </tool_call> b"))) << "a text holding the call's end";
    EXPECT_FALSE(accepts(g,
                         "<function=write_file>\n<parameter=content>\nx\n</parameter>\n"
                         "<parameter=path>\na\n</parameter>\n" +
                             tail))
        << "declaration order";
    EXPECT_FALSE(accepts(g, head +
                                "<parameter=content>\nx\n</parameter>\n<parameter=size>\n-1\n</parameter>\n"
                                "</function>\n</tool_call>"))
        << "an integer below its minimum";
    EXPECT_FALSE(
        accepts(g, head + "<parameter=content>\nx\n</parameter>\n<parameter=size>\n\"3\"\n</parameter>\n"
                          "</function>\n</tool_call>"))
        << "an integer as a JSON string";
    EXPECT_FALSE(accepts(
        g, head + "<parameter=content>\nx\n</parameter>\n<parameter=mode>\nremove\n</parameter>\n" + tail))
        << "a value outside the enum";
    EXPECT_FALSE(
        accepts(g, head + "<parameter=content>\nx\n</parameter>\n<parameter=id>\n12a\n</parameter>\n" + tail))
        << "a string outside its pattern";
    EXPECT_FALSE(accepts(
        g, head + "<parameter=content>\nx\n</parameter>\n<parameter=color>\nred\n</parameter>\n" + tail))
        << "an undeclared parameter";
    EXPECT_FALSE(accepts(g, "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>")) << "the JSON form";
    EXPECT_FALSE(accepts(g, "<function=delete>\n</function>\n</tool_call>")) << "an unknown tool";
    EXPECT_FALSE(accepts(g, with_content("ok").substr(0, 60))) << "a cut call is not complete";

    // A named tool: only it. Without parallel_tool_calls: one call.
    const std::string now = "<function=now>\n</function>\n</tool_call>";
    auto named = grammar_of(forced("now"), ToolCallForm::kXml);
    EXPECT_TRUE(accepts(named, now));
    EXPECT_FALSE(accepts(named, with_content("ok")));
    auto single = grammar_of(forced("", false), ToolCallForm::kXml);
    EXPECT_TRUE(accepts(single, now));
    EXPECT_FALSE(accepts(single, now + "\n<tool_call>\n" + now));
    EXPECT_TRUE(accepts(g, now + "\n<tool_call>\n" + now));
}

TEST(ServerToolCalls, WhatTheXmlFormCannotCarryIsForcedAsJson) {
    // "headers" (patternProperties) has no XML rendering of its free keys: its calls are JSON,
    // which the parser reads too; the other tools stay XML.
    auto g = grammar_of(forced(), ToolCallForm::kXml);
    ASSERT_TRUE(g);
    const std::string as_json = "{\"name\": \"headers\", \"arguments\": {\"x-a\": \"1\"}}\n</tool_call>";
    EXPECT_TRUE(accepts(g, as_json));
    EXPECT_FALSE(
        accepts(g, "<function=headers>\n<parameter=x-a>\n1\n</parameter>\n</function>\n</tool_call>"));
    const auto parsed = parse(as_json);
    ASSERT_EQ(parsed.size(), 1u);
    EXPECT_EQ(parsed[0].name + parsed[0].arguments, R"(headers{"x-a":"1"})");
    // In the JSON form (Qwen3's templates) every tool is JSON.
    auto j = grammar_of(forced(), ToolCallForm::kJson);
    EXPECT_TRUE(accepts(j, "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
    EXPECT_FALSE(accepts(j, "<function=now>\n</function>\n</tool_call>"));
    // A broken schema is still the request's error.
    ChatRequest bad = forced();
    bad.tools[1]["function"]["parameters"] = {
        {"type", "object"}, {"properties", {{"n", {{"type", "integer"}, {"minimum", "x"}}}}}};
    auto e = forced_tool_call_grammar(bad, ToolCallStyle{.form = ToolCallForm::kXml});
    ASSERT_TRUE(std::holds_alternative<ApiError>(e));
    EXPECT_EQ(std::get<ApiError>(e).param, "tools[1].function.parameters");
}

TEST(ServerToolCalls, XmlArgumentsAreTypedByTheSchema) {
    // A declared string stays a string ("007", "1.5"); a JSON value holding "</parameter>" in a
    // string ends at "\n</parameter>"; a declared non-string that is not JSON is kept as its text
    // (the client's validation sees it); an undeclared parameter is JSON when it parses as JSON.
    const auto parsed = parse(
        "<function=write_file>\n<parameter=path>\n007\n</parameter>\n<parameter=content>\n1.5\n</parameter>\n"
        "<parameter=size>\n12\n</parameter>\n<parameter=options>\n{\"overwrite\": True}\n</parameter>\n"
        "<parameter=tags>\n[\"</parameter>\"]\n</parameter>\n<parameter=extra>\n[1]\n</parameter>\n"
        "</function>\n</tool_call>");
    ASSERT_EQ(parsed.size(), 1u);
    EXPECT_EQ(
        ojson::parse(parsed[0].arguments),
        ojson::parse(R"({"path": "007", "content": "1.5", "size": 12, "options": "{\"overwrite\": True}",
                              "tags": ["</parameter>"], "extra": [1]})"))
        << parsed[0].arguments;
}

// Issue 22: a string argument holding "</tool_call>" ended the call there and it came back as
// content with the markup in it. Under the forcing grammar no JSON string spells it — in the JSON
// form and in the XML form's JSON values, with or without a pattern, as an enum literal, a free
// value or a key — while every string is still there: the '>' that would complete the tag is
// written \u003e, which reads back as the same text.
TEST(ServerToolCalls, NoJsonStringOfAForcedCallSpellsTheCallsEnd) {
    const std::string end = "</tool_call>", escaped = "</tool_call\\u003e";
    auto json_form = grammar_of(forced(), ToolCallForm::kJson);
    auto xml_form = grammar_of(forced(), ToolCallForm::kXml);
    ASSERT_TRUE(json_form && xml_form);
    auto note = [](const std::string& args) { return R"({"name": "note", "arguments": )" + args + "}"; };
    auto param = [](const std::string& name, const std::string& value) {
        return "<parameter=" + name + ">\n" + value + "\n</parameter>\n";
    };
    struct Case {
        std::shared_ptr<const Grammar> g;
        std::string reply;  // each '@' stands for the tag, spelled one way or another
        ojson args;         // what the parser reads back
        enum { kAnyText, kPattern, kEnum } kind = kAnyText;
    };
    const std::vector<Case> cases = {
        {json_form,
         R"({"name": "write_file", "arguments": {"path": "a", "content": "x @ y", "size": 1}})",
         {{"path", "a"}, {"content", "x " + end + " y"}, {"size", 1}}},
        {json_form, note(R"({"line": "a @ b"})"), {{"line", "a " + end + " b"}}, Case::kPattern},
        {json_form, note(R"({"short": "@"})"), {{"short", end}}},
        {json_form, note(R"({"kind": "@"})"), {{"kind", end}}, Case::kEnum},
        {json_form, note(R"({"meta": {"@": ["@"]}})"), {{"meta", {{end, {end}}}}}},
        // The XML form's JSON values, and a tool it writes as JSON (patternProperties).
        {xml_form,
         "<function=note>\n" + param("meta", R"({"@": ["@"]})") + "</function>",
         {{"meta", {{end, {end}}}}}},
        {xml_form,
         "<function=write_file>\n" + param("path", "a") + param("content", "x") + param("size", "3") +
             param("tags", R"(["@"])") + "</function>",
         {{"path", "a"}, {"content", "x"}, {"size", 3}, {"tags", {end}}}},
        {xml_form, R"({"name": "headers", "arguments": {"x-a": "@"}})", {{"x-a", end}}},
    };
    for (const Case& c : cases) {
        auto spelled = [&](const std::string& as) {
            std::string out = c.reply;
            for (size_t at = out.find('@'); at != std::string::npos; at = out.find('@', at + as.size()))
                out.replace(at, 1, as);
            return out + "\n" + end;
        };
        EXPECT_FALSE(accepts(c.g, spelled(end))) << spelled(end);
        EXPECT_TRUE(accepts(c.g, spelled(escaped))) << spelled(escaped);
        // Other spellings: a pattern's or an enum's strings have one spelling each.
        EXPECT_EQ(accepts(c.g, spelled("\\u003c/tool_call>")), c.kind == Case::kAnyText) << "'<' escaped";
        EXPECT_EQ(accepts(c.g, spelled("</tool_call")), c.kind != Case::kEnum) << "a prefix of the tag";
        // A model that began the tag is never stuck: its '>' has a way on.
        const std::string raw = spelled(end);
        const std::string upto = raw.substr(0, raw.find(end) + end.size() - 1);
        EXPECT_TRUE(GrammarMatcher(c.g).feed(upto + "\\u003e")) << upto;
        const auto parsed = parse(spelled(escaped));
        ASSERT_EQ(parsed.size(), 1u);
        // (The JSON form's arguments are read through an unordered json.)
        EXPECT_EQ(nlohmann::json::parse(parsed[0].arguments), nlohmann::json(c.args)) << parsed[0].arguments;
    }
}

// A call the token limit cuts is dropped, never content — also when the cut falls inside the tag
// of a further call (parallel forced calls go on "\n<tool_call>\n…").
TEST(ServerToolCalls, ACutCallIsNeverContent) {
    const std::string now = "<function=now>\n</function>\n</tool_call>";
    for (const std::string& cut : {std::string("<function=write_file>\n<parameter=path>\na"),
                                   std::string("{\"name\": \"now\", \"argu"), now + "\n<tool_", now + "\n<",
                                   now + "\n<tool_call>\n<function=n"}) {
        OutputParser p(false, true, tools());
        ParsedDelta all = p.feed(std::string(kToolCallOpen) + cut);
        all.append(p.finish());
        EXPECT_EQ(all.content, "") << cut;
        EXPECT_TRUE(p.cut_call()) << cut;
        EXPECT_EQ(all.tool_calls.size(), cut.starts_with(now) ? 1u : 0u) << cut;
    }
    // Text after a call is still content, and a lone '<' ending free text too.
    OutputParser p(false, true, tools());
    ParsedDelta all = p.feed(std::string(kToolCallOpen) + now + "\n\nso a <");
    all.append(p.finish());
    EXPECT_EQ(all.content, "so a <");
    EXPECT_FALSE(p.cut_call());
}

// Qwen3.5 / Qwen3-Coder print a boolean argument with `| string`: "true" in sluice's renderer (as
// in @huggingface/jinja), "True" under Python's Jinja, which the model saw in training. The grammar
// forces what sluice renders the call as in later turns (JSON's spelling), and the parser reads
// either back as a boolean (None as null).
TEST(ServerToolCalls, XmlBooleansAreForcedAsTheTemplatePrintsThemAndReadInEitherSpelling) {
    auto t = ChatTemplate::from_string(kQwen35Template);
    ASSERT_TRUE(t.has_value());
    auto g = grammar_of(forced(), ToolCallForm::kXml);
    ASSERT_TRUE(g);
    const ojson args = {{"path", "a"}, {"content", "x"}, {"size", 3}, {"append", true}};
    const std::string reply = rendered_calls(*t, ojson::array({call("write_file", args)}));
    EXPECT_NE(reply.find("<parameter=append>\ntrue\n</parameter>"), std::string::npos) << reply;
    EXPECT_TRUE(accepts(g, reply)) << reply;
    auto parsed = parse(reply);
    ASSERT_EQ(parsed.size(), 1u);
    EXPECT_EQ(ojson::parse(parsed[0].arguments), args);

    const std::string head =
        "<function=write_file>\n<parameter=path>\na\n</parameter>\n"
        "<parameter=content>\nx\n</parameter>\n<parameter=size>\n3\n</parameter>\n";
    for (const auto& [spelled, value] : std::vector<std::pair<std::string, bool>>{
             {"True", true}, {"False", false}, {"true", true}, {"false", false}}) {
        parsed = parse(head + "<parameter=append>\n" + spelled + "\n</parameter>\n</function>\n</tool_call>");
        ASSERT_EQ(parsed.size(), 1u);
        EXPECT_EQ(ojson::parse(parsed[0].arguments)["append"], value) << spelled;
    }
    EXPECT_FALSE(accepts(g, head + "<parameter=append>\nTrue\n</parameter>\n</function>\n</tool_call>"))
        << "forced in the spelling sluice renders";
    // A string parameter keeps "True" as its text; None is null for a non-string one.
    parsed = parse(
        "<function=write_file>\n<parameter=path>\nTrue\n</parameter>\n<parameter=content>\nNone\n</"
        "parameter>\n"
        "<parameter=size>\nNone\n</parameter>\n</function>\n</tool_call>");
    ASSERT_EQ(parsed.size(), 1u);
    EXPECT_EQ(ojson::parse(parsed[0].arguments),
              ojson::parse(R"({"path": "True", "content": "None", "size": null})"));
}

}  // namespace
}  // namespace sluice::server
