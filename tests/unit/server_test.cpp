// Unit tests of the server's pure parts: request validation (api.h), SSE framing (sse.h) and the
// reasoning / tool-call splitter (output_parser.h), including every split of a reply into
// stream chunks (the streamed result must equal the one-shot result).
#include <gtest/gtest.h>

#include "server/api.h"
#include "server/output_parser.h"
#include "server/sse.h"

namespace sluice::server {
namespace {

using ojson = nlohmann::ordered_json;

ApiError chat_error(const std::string& body) {
    auto parsed = parse_body(body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
    auto r = parse_chat_request(std::get<ojson>(parsed), SamplingParams{}, 1000);
    EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

ChatRequest chat_ok(const std::string& body) {
    auto parsed = parse_body(body);
    EXPECT_TRUE(std::holds_alternative<ojson>(parsed)) << body;
    auto r = parse_chat_request(std::get<ojson>(parsed), SamplingParams{}, 1000);
    if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
    return std::holds_alternative<ChatRequest>(r) ? std::get<ChatRequest>(r) : ChatRequest{};
}

TEST(ServerApi, ParsesSamplingFields) {
    ChatRequest r =
        chat_ok(R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.5,"top_p":0.9,
        "top_k":40,"min_p":0.05,"repetition_penalty":1.1,"presence_penalty":0.5,"frequency_penalty":-0.5,
        "logit_bias":{"7":-100,"9":2.5},"seed":42,"stop":"END","max_completion_tokens":17,"stream":true,
        "stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":3,"kv_bits":4})");
    const SamplingParams& s = r.params.generate.sampling;
    EXPECT_EQ(r.params.model, "m");
    EXPECT_FLOAT_EQ(s.temperature, 0.5f);
    EXPECT_FLOAT_EQ(s.top_p, 0.9f);
    EXPECT_EQ(s.top_k, 40);
    EXPECT_FLOAT_EQ(s.min_p, 0.05f);
    EXPECT_FLOAT_EQ(s.repetition_penalty, 1.1f);
    EXPECT_FLOAT_EQ(s.presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
    ASSERT_EQ(s.logit_bias.size(), 2u);
    EXPECT_EQ(s.logit_bias[0], (std::pair<int32_t, float>{7, -100.0f}));
    EXPECT_EQ(s.seed, 42u);
    EXPECT_EQ(r.params.generate.stop, std::vector<std::string>{"END"});
    EXPECT_EQ(r.params.max_tokens, 17);
    EXPECT_TRUE(r.params.stream);
    EXPECT_TRUE(r.params.include_usage);
    EXPECT_TRUE(r.params.logprobs);
    EXPECT_EQ(r.params.generate.top_logprobs, 3);
    EXPECT_EQ(r.params.kv_bits, 4);
    EXPECT_FALSE(chat_ok(R"({"messages":[{"role":"user","content":"hi"}]})").params.kv_bits.has_value());
}

TEST(ServerApi, FlattensContentAndMapsRoles) {
    ChatRequest r = chat_ok(R"({"messages":[{"role":"developer","content":"be brief"},
        {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
        {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},
        {"role":"tool","tool_call_id":"c1","content":"42"}]})");
    ASSERT_EQ(r.messages.size(), 4u);
    EXPECT_EQ(r.messages[0]["role"], "system");
    EXPECT_EQ(r.messages[1]["content"], "a\nb");
    EXPECT_EQ(r.messages[2]["content"], "");
    EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"]["x"], 1);  // parsed for tojson
    EXPECT_EQ(r.messages[3]["tool_call_id"], "c1");
}

TEST(ServerApi, RejectsBadRequestsNamingTheField) {
    EXPECT_EQ(chat_error("{").code, "invalid_json");
    EXPECT_EQ(chat_error("[1]").code, "invalid_json");
    EXPECT_EQ(chat_error(std::string(1000, '[')).code, "invalid_json");
    EXPECT_EQ(chat_error("{}").param, "messages");
    EXPECT_EQ(chat_error(R"({"messages":[]})").param, "messages");
    EXPECT_EQ(chat_error(R"({"messages":[{"role":"user"}]})").param, "messages[0].content");
    EXPECT_EQ(chat_error(R"({"messages":[{"role":"bot","content":"x"}]})").param, "messages[0].role");
    const ApiError image = chat_error(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})");
    EXPECT_EQ(image.param, "messages[0].content[0].type");
    EXPECT_NE(image.message.find("image_url"), std::string::npos);
    const std::string m = R"("messages":[{"role":"user","content":"x"}])";
    EXPECT_EQ(chat_error("{" + m + R"(,"temperature":"hot"})").param, "temperature");
    EXPECT_EQ(chat_error("{" + m + R"(,"temperature":-1})").param, "temperature");
    EXPECT_EQ(chat_error("{" + m + R"(,"top_p":0})").param, "top_p");
    EXPECT_EQ(chat_error("{" + m + R"(,"n":17})").param, "n");
    EXPECT_EQ(chat_error("{" + m + R"(,"n":0})").param, "n");
    EXPECT_EQ(chat_ok("{" + m + R"(,"n":3})").params.n, 3);
    EXPECT_EQ(chat_error("{" + m + R"(,"kv_bits":5})").param, "kv_bits");
    EXPECT_EQ(chat_error("{" + m + R"(,"kv_bits":"4"})").param, "kv_bits");
    EXPECT_EQ(
        chat_error("{" + m + R"(,"tools":[{"type":"function","function":{"name":"a</tool_call>"}}]})").param,
        "tools[0].function.name");
    EXPECT_EQ(chat_error("{" + m + R"(,"tools":[{"type":"function","function":{"name":")" +
                         std::string(65, 'x') + R"("}}]})")
                  .param,
              "tools[0].function.name");
    EXPECT_EQ(chat_error("{" + m + R"(,"max_tokens":1.5})").param, "max_tokens");
    EXPECT_EQ(chat_error("{" + m + R"(,"max_tokens":-1})").param, "max_tokens");
    EXPECT_EQ(chat_error("{" + m + R"(,"logit_bias":{"1000":1}})").param, "logit_bias");
    EXPECT_EQ(chat_error("{" + m + R"(,"logit_bias":{"abc":1}})").param, "logit_bias");
    EXPECT_EQ(chat_error("{" + m + R"(,"logit_bias":{"5":1000}})").param, "logit_bias.5");
    EXPECT_EQ(chat_error("{" + m + R"(,"stop":[1]})").param, "stop[0]");
    EXPECT_EQ(chat_error("{" + m + R"(,"top_logprobs":2})").param, "top_logprobs");
    EXPECT_EQ(chat_error("{" + m + R"(,"stream":"yes"})").param, "stream");
    EXPECT_EQ(chat_error("{" + m + R"(,"tool_choice":"required"})").param, "tool_choice");
    EXPECT_EQ(
        chat_error(
            "{" + m +
            R"(,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}})")
            .param,
        "tool_choice");
    EXPECT_EQ(
        chat_error("{" + m + R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{}}}})")
            .param,
        "response_format.json_schema.name");
    EXPECT_EQ(chat_error("{" + m + R"(,"response_format":{"type":"xml"}})").param, "response_format.type");
    EXPECT_EQ(chat_error("{" + m + R"(,"parallel_tool_calls":1})").param, "parallel_tool_calls");
    EXPECT_EQ(
        chat_error("{" + m + R"(,"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]})")
            .param,
        "tools[0].function.parameters");
    EXPECT_EQ(chat_error("{" + m + R"(,"chat_template_kwargs":[1]})").param, "chat_template_kwargs");
}

// reasoning_effort (OpenAI's chat field) reaches the template as enable_thinking and gpt-oss's
// reasoning_effort (low / medium / high); chat_template_kwargs given beside it win.
TEST(ServerApi, ReasoningEffortIsGivenToTheTemplate) {
    const std::string m = R"("messages":[{"role":"user","content":"hi"}])";
    EXPECT_TRUE(chat_ok("{" + m + "}").template_kwargs.is_null());
    const std::pair<const char*, ojson> cases[] = {
        {"none", {{"enable_thinking", false}, {"reasoning_effort", "low"}}},
        {"minimal", {{"enable_thinking", true}, {"reasoning_effort", "low"}}},
        {"low", {{"enable_thinking", true}, {"reasoning_effort", "low"}}},
        {"medium", {{"enable_thinking", true}, {"reasoning_effort", "medium"}}},
        {"high", {{"enable_thinking", true}, {"reasoning_effort", "high"}}},
        {"xhigh", {{"enable_thinking", true}, {"reasoning_effort", "high"}}},
    };
    for (const auto& [effort, kwargs] : cases)
        EXPECT_EQ(chat_ok("{" + m + R"(,"reasoning_effort":")" + effort + R"("})").template_kwargs, kwargs)
            << effort;
    const ChatRequest both = chat_ok(
        "{" + m + R"(,"reasoning_effort":"low","chat_template_kwargs":{"reasoning_effort":"high","x":1}})");
    EXPECT_EQ(both.template_kwargs,
              (ojson{{"enable_thinking", true}, {"reasoning_effort", "high"}, {"x", 1}}));
    EXPECT_EQ(chat_ok("{" + m + R"(,"chat_template_kwargs":{"x":1}})").template_kwargs, (ojson{{"x", 1}}));
    EXPECT_EQ(chat_error("{" + m + R"(,"reasoning_effort":"ultra"})").param, "reasoning_effort");
    EXPECT_EQ(chat_error("{" + m + R"(,"reasoning_effort":3})").code, "invalid_type");
}

TEST(ServerApi, ErrorObjectShape) {
    const nlohmann::json j = invalid_request("bad", "temperature", "invalid_type").to_json();
    EXPECT_EQ(j["error"]["message"], "bad");
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_EQ(j["error"]["param"], "temperature");
    EXPECT_EQ(j["error"]["code"], "invalid_type");
    const nlohmann::json k = invalid_request("bad").to_json();
    EXPECT_TRUE(k["error"]["param"].is_null());
    EXPECT_TRUE(k["error"]["code"].is_null());
}

TEST(ServerApi, CompletionPrompts) {
    auto parse = [](const std::string& body) {
        return parse_completion_request(std::get<ojson>(parse_body(body)), SamplingParams{}, 100);
    };
    auto ids = parse(R"({"prompt":[1,2,3]})");
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(ids));
    EXPECT_EQ(std::get<std::vector<int32_t>>(std::get<CompletionRequest>(ids).prompt),
              (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(std::get<CompletionRequest>(ids).params.max_tokens, 16);
    EXPECT_TRUE(std::holds_alternative<ApiError>(parse(R"({"prompt":[1,200]})")));
    EXPECT_TRUE(std::holds_alternative<ApiError>(parse(R"({"prompt":{}})")));
    EXPECT_TRUE(std::holds_alternative<ApiError>(parse(R"({})")));
}

TEST(ServerSse, Framing) {
    EXPECT_EQ(sse_data("x"), "data: x\n\n");
    EXPECT_EQ(sse_data("a\nb"), "data: a\ndata: b\n\n");
    EXPECT_EQ(sse_event(nlohmann::json{{"t", "é\n"}}), "data: {\"t\":\"é\\n\"}\n\n");
    EXPECT_EQ(sse_comment("keep-alive"), ": keep-alive\n\n");
    EXPECT_EQ(sse_comment("a\nb"), ": a b\n\n");
    // Invalid UTF-8 must not throw mid-stream.
    EXPECT_NO_THROW(sse_event(nlohmann::json{{"t", std::string("\xff")}}));
}

// Feeds `text` split at every pair of cut points and requires the one-shot result.
void expect_split(const std::string& text, bool start_in_reasoning, bool tools, const std::string& reasoning,
                  const std::string& content, const std::vector<std::string>& calls) {
    auto run = [&](const std::vector<std::string>& chunks) {
        OutputParser p(start_in_reasoning, tools);
        ParsedDelta all;
        auto add = [&](ParsedDelta d) {
            all.reasoning += d.reasoning;
            all.content += d.content;
            for (auto& c : d.tool_calls) all.tool_calls.push_back(c);
        };
        for (const auto& c : chunks) add(p.feed(c));
        add(p.finish());
        return all;
    };
    for (size_t i = 0; i <= text.size(); ++i) {
        for (size_t j = i; j <= text.size(); j += 3) {
            ParsedDelta d = run({text.substr(0, i), text.substr(i, j - i), text.substr(j)});
            ASSERT_EQ(d.reasoning, reasoning) << "cuts " << i << "," << j;
            ASSERT_EQ(d.content, content) << "cuts " << i << "," << j;
            ASSERT_EQ(d.tool_calls.size(), calls.size());
            for (size_t k = 0; k < calls.size(); ++k)
                ASSERT_EQ(d.tool_calls[k].name + d.tool_calls[k].arguments, calls[k]);
        }
    }
}

TEST(ServerOutputParser, ReasoningSplit) {
    expect_split("<think>\nhmm\n</think>\n\nHello", false, false, "\nhmm\n", "Hello", {});
    expect_split("plain <think> text", false, false, "", "plain <think> text", {});
    expect_split("still thinking", true, false, "still thinking", "", {});
    expect_split("a</think>b", true, false, "a", "b", {});
    expect_split("<thi", false, false, "", "<thi", {});
    expect_split("", false, false, "", "", {});
}

TEST(ServerOutputParser, ToolCalls) {
    expect_split("Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>", false,
                 true, "", "Sure.\n", {"f{\"x\":1}"});
    expect_split(
        "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"b\"}</tool_call>",
        false, true, "", "", {"a{}", "b{}"});
    // Not JSON, or tools off: the text is kept as content. Unterminated (the reply ran out of tokens
    // inside a call): the cut call is dropped, never returned as markup.
    expect_split("<tool_call>oops</tool_call>", false, true, "", "<tool_call>oops</tool_call>", {});
    expect_split("x <tool_call>{\"name\"", false, true, "", "x ", {});
    {
        OutputParser p(false, true);
        ParsedDelta d = p.feed("<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"na");
        EXPECT_FALSE(p.cut_call());
        ParsedDelta tail = p.finish();
        EXPECT_TRUE(p.cut_call());
        EXPECT_EQ(d.tool_calls.size(), 1u);
        EXPECT_TRUE(tail.content.empty()) << tail.content;
    }
    expect_split("<tool_call>{\"name\":\"a\"}</tool_call>", false, false, "",
                 "<tool_call>{\"name\":\"a\"}</tool_call>", {});
    expect_split("<think>plan</think>\n<tool_call>{\"name\":\"a\"}</tool_call>", false, true, "plan", "",
                 {"a{}"});
    // Qwen3.5 / Qwen3-Coder XML form: strings raw, other values JSON; two calls.
    expect_split(
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n"
        "</parameter>\n<parameter=opts>\n{\"a\": [1]}\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
        "<function=now>\n</function>\n</tool_call>",
        false, true, "", "", {R"(get_weather{"city":"New York","days":3,"opts":{"a":[1]}})", "now{}"});
    expect_split("<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>", false, true, "",
                 "<tool_call>\n<function=f>\n<parameter=x>\n1\n</function>\n</tool_call>", {});
}

TEST(ServerOutputParser, PromptOpensReasoning) {
    EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
    EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
}

}  // namespace
}  // namespace sluice::server
