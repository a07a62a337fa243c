// Unit tests of the Responses API's pure parts (server/responses_api.h): a Responses body mapped
// onto the chat request — which the chat validation must then accept as it is — the errors that
// name the Responses fields, and the output items with the streaming events that rebuild them
// (replayed here the way the openai client's ResponseAccumulator replays them).
#include <gtest/gtest.h>

#include "server/responses_api.h"

namespace sluice::server {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

ResponsesRequest responses_ok(const std::string& body) {
    auto parsed = parse_body(body);
    EXPECT_TRUE(std::holds_alternative<ojson>(parsed)) << body;
    auto r = parse_responses_request(std::get<ojson>(parsed));
    if (auto* e = std::get_if<ApiError>(&r)) {
        ADD_FAILURE() << body << ": " << e->message;
        return ResponsesRequest{};
    }
    return std::get<ResponsesRequest>(r);
}

ApiError responses_error_of(const std::string& body) {
    auto r = parse_responses_request(std::get<ojson>(parse_body(body)));
    EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

// The mapped body through the chat validation, as prepare_chat runs it.
ChatRequest as_chat(const ResponsesRequest& r) {
    auto c = parse_chat_request(r.chat, SamplingParams{}, 1000);
    if (auto* e = std::get_if<ApiError>(&c)) ADD_FAILURE() << r.chat.dump() << ": " << e->message;
    return std::holds_alternative<ChatRequest>(c) ? std::get<ChatRequest>(c) : ChatRequest{};
}

TEST(ServerResponses, StringInputAndInstructions) {
    ChatRequest c = as_chat(responses_ok(R"({"input":"hi","instructions":"be brief"})"));
    ASSERT_EQ(c.messages.size(), 2u);
    EXPECT_EQ(c.messages[0]["role"], "system");
    EXPECT_EQ(c.messages[0]["content"], "be brief");
    EXPECT_EQ(c.messages[1]["role"], "user");
    EXPECT_EQ(c.messages[1]["content"], "hi");
    // A developer message the input starts with joins the instructions: one system turn.
    ChatRequest d = as_chat(responses_ok(
        R"({"instructions":"A","input":[{"role":"developer","content":"B"},{"role":"user","content":"q"}]})"));
    ASSERT_EQ(d.messages.size(), 2u);
    EXPECT_EQ(d.messages[0]["content"], "A\n\nB");
}

TEST(ServerResponses, InputItemsBecomeChatTurns) {
    const ResponsesRequest r = responses_ok(R"({"input":[
        {"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
        {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"think"}]},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"let me look","annotations":[]}]},
        {"type":"function_call","call_id":"c1","name":"f","arguments":"{\"x\":1}"},
        {"type":"function_call","call_id":"c2","name":"g","arguments":"{}"},
        {"type":"function_call_output","call_id":"c1","output":"42"},
        {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"ok"}]},
        {"type":"function_call","call_id":"c3","name":"f","arguments":"{}"},
        {"type":"function_call_output","call_id":"c3","output":"7"},
        {"role":"user","content":"thanks"}]})");
    const ChatRequest c = as_chat(r);
    ASSERT_EQ(c.messages.size(), 7u) << c.messages.dump();
    EXPECT_EQ(c.messages[0]["content"], "a\nb");
    // The reasoning, the text and both calls of one step are one assistant turn.
    EXPECT_EQ(c.messages[1]["role"], "assistant");
    EXPECT_EQ(c.messages[1]["content"], "let me look");
    EXPECT_EQ(c.messages[1]["reasoning_content"], "think");
    ASSERT_EQ(c.messages[1]["tool_calls"].size(), 2u);
    EXPECT_EQ(c.messages[1]["tool_calls"][0]["id"], "c1");
    EXPECT_EQ(c.messages[1]["tool_calls"][0]["function"]["arguments"]["x"], 1);  // parsed for tojson
    EXPECT_EQ(c.messages[2]["role"], "tool");
    EXPECT_EQ(c.messages[2]["tool_call_id"], "c1");
    EXPECT_EQ(c.messages[3]["content"], "ok");
    // After the tool results, a call opens a new assistant turn.
    EXPECT_EQ(c.messages[4]["role"], "assistant");
    EXPECT_EQ(c.messages[4]["content"], "");
    EXPECT_EQ(c.messages[4]["tool_calls"][0]["id"], "c3");
    EXPECT_EQ(c.messages[6]["content"], "thanks");
}

TEST(ServerResponses, ToolsAndToolChoice) {
    const std::string tools =
        R"("tools":[{"type":"function","name":"f","description":"F","parameters":{"type":"object"},"strict":true},
                    {"type":"function","name":"g"}])";
    ResponsesRequest r = responses_ok(R"({"input":"x",)" + tools + R"(,"tool_choice":"required"})");
    ChatRequest c = as_chat(r);
    ASSERT_EQ(c.tools.size(), 2u);
    EXPECT_EQ(c.tools[0]["function"]["name"], "f");
    EXPECT_EQ(c.tools[0]["function"]["description"], "F");
    EXPECT_EQ(c.tools[0]["function"]["strict"], true);
    EXPECT_EQ(c.tool_choice, ToolChoiceMode::kRequired);
    EXPECT_EQ(r.tools[1], (json{{"type", "function"},
                                {"name", "g"},
                                {"description", nullptr},
                                {"parameters", nullptr},
                                {"strict", nullptr}}));

    c = as_chat(
        responses_ok(R"({"input":"x",)" + tools + R"(,"tool_choice":{"type":"function","name":"g"}})"));
    EXPECT_EQ(c.tool_choice, ToolChoiceMode::kNamed);
    EXPECT_EQ(c.tool_choice_name, "g");

    // allowed_tools narrows the tools the model sees; errors on the chat body name the original index.
    r = responses_ok(
        R"({"input":"x",)" + tools +
        R"(,"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"g"}]}})");
    c = as_chat(r);
    ASSERT_EQ(c.tools.size(), 1u);
    EXPECT_EQ(c.tools[0]["function"]["name"], "g");
    EXPECT_EQ(c.tool_choice, ToolChoiceMode::kRequired);
    EXPECT_EQ(r.tool_index, std::vector<size_t>{1});
    const ApiError renamed =
        responses_error(invalid_request("[json_schema] tools[0].function.parameters at '#': bad",
                                        "tools[0].function.parameters"),
                        r);
    EXPECT_EQ(renamed.param, "tools[1].parameters");
    EXPECT_EQ(renamed.message, "[json_schema] tools[1].parameters at '#': bad");

    EXPECT_FALSE(as_chat(responses_ok(R"({"input":"x","parallel_tool_calls":false})")).parallel_tool_calls);
}

TEST(ServerResponses, TextFormatAndOptions) {
    ResponsesRequest r = responses_ok(R"({"input":"x","text":{"format":{"type":"json_schema","name":"movie",
        "schema":{"type":"object","properties":{"t":{"type":"string"}}},"strict":true}},"max_output_tokens":17,
        "temperature":0.5,"top_p":0.9,"seed":3,"stop":["END"],"stream":true,"store":true,
        "reasoning":{"effort":"none"},"metadata":{"k":"v"},"include":["message.output_text.logprobs"],"top_logprobs":2})");
    ChatRequest c = as_chat(r);
    EXPECT_EQ(c.response_format, ResponseFormat::kJsonSchema);
    EXPECT_EQ(c.json_schema["properties"]["t"]["type"], "string");
    EXPECT_EQ(c.params.max_tokens, 17);
    EXPECT_FLOAT_EQ(c.params.generate.sampling.temperature, 0.5f);
    EXPECT_FLOAT_EQ(c.params.generate.sampling.top_p, 0.9f);
    EXPECT_EQ(c.params.generate.sampling.seed, 3u);
    EXPECT_EQ(c.params.generate.stop, std::vector<std::string>{"END"});
    EXPECT_EQ(c.template_kwargs["enable_thinking"], false);
    EXPECT_EQ(c.template_kwargs["reasoning_effort"], "low");
    EXPECT_TRUE(c.params.logprobs);
    EXPECT_EQ(c.params.generate.top_logprobs, 2);
    EXPECT_FALSE(c.params.stream);  // the Responses stream is the endpoint's, not the chat one's
    EXPECT_TRUE(r.stream);
    EXPECT_EQ(r.metadata["k"], "v");
    EXPECT_EQ(r.text["format"]["name"], "movie");
    EXPECT_EQ(r.reasoning["effort"], "none");

    c = as_chat(responses_ok(
        R"({"input":"x","text":{"format":{"type":"json_object"}},"reasoning":{"effort":"high"}})"));
    EXPECT_EQ(c.response_format, ResponseFormat::kJsonObject);
    EXPECT_EQ(c.template_kwargs["enable_thinking"], true);
    EXPECT_EQ(c.template_kwargs["reasoning_effort"], "high");  // gpt-oss's template reads it
    // Explicit template arguments (a sluice extension) win over reasoning.effort.
    c = as_chat(responses_ok(
        R"({"input":"x","reasoning":{"effort":"high"},"chat_template_kwargs":{"enable_thinking":false}})"));
    EXPECT_EQ(c.template_kwargs["enable_thinking"], false);
    EXPECT_TRUE(as_chat(responses_ok(R"({"input":"x"})")).template_kwargs.is_null());
}

TEST(ServerResponses, RejectsBadRequestsNamingTheField) {
    EXPECT_EQ(responses_error_of("{}").param, "input");
    EXPECT_EQ(responses_error_of(R"({"input":[]})").param, "input");
    EXPECT_EQ(responses_error_of(R"({"input":""})").param, "input");
    EXPECT_EQ(responses_error_of(R"({"input":{}})").code, "invalid_type");
    EXPECT_EQ(responses_error_of(R"({"input":[1]})").param, "input[0]");
    EXPECT_EQ(responses_error_of(R"({"input":[{"content":"x"}]})").param, "input[0].type");
    EXPECT_EQ(responses_error_of(R"({"input":[{"type":"web_search_call"}]})").param, "input[0].type");
    EXPECT_EQ(responses_error_of(R"({"input":[{"type":"item_reference","id":"msg_1"}]})").code,
              "unsupported_value");
    EXPECT_EQ(responses_error_of(R"({"input":[{"role":"bot","content":"x"}]})").param, "input[0].role");
    EXPECT_EQ(responses_error_of(R"({"input":[{"role":"user"}]})").param, "input[0].content");
    EXPECT_EQ(responses_error_of(R"({"input":[{"role":"user","content":[{"type":"input_image"}]}]})").code,
              "unsupported_content_type");
    EXPECT_EQ(responses_error_of(R"({"input":[{"role":"user","content":[{"type":"input_text"}]}]})").param,
              "input[0].content[0].text");
    EXPECT_EQ(responses_error_of(R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})").param,
              "input[0].call_id");
    EXPECT_EQ(
        responses_error_of(
            R"({"input":[{"type":"function_call","call_id":"c","name":"a</tool_call>","arguments":"{}"}]})")
            .param,
        "input[0].name");
    EXPECT_EQ(
        responses_error_of(R"({"input":[{"type":"function_call","call_id":"c","name":"f","arguments":{}}]})")
            .param,
        "input[0].arguments");
    EXPECT_EQ(
        responses_error_of(R"({"input":[{"type":"function_call_output","call_id":"c","output":"x"}]})").param,
        "input[0].call_id");
    EXPECT_EQ(responses_error_of(R"({"input":[{"type":"reasoning","content":[{"type":"x"}]}]})").param,
              "input[0].content[0]");
    EXPECT_EQ(responses_error_of(R"({"input":[{"type":"reasoning","summary":[]}]})").param, "input");
    const std::string in = R"("input":"x")";
    EXPECT_EQ(responses_error_of("{" + in + R"(,"instructions":5})").param, "instructions");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"previous_response_id":"resp_1"})").param,
              "previous_response_id");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"conversation":"conv_1"})").param, "conversation");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"background":true})").param, "background");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"prompt":{"id":"p"}})").param, "prompt");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"tools":{}})").param, "tools");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"tools":[{"type":"file_search"}]})").param, "tools[0].type");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"tools":[{"type":"function","name":")" +
                                 std::string(65, 'x') + R"("}]})")
                  .param,
              "tools[0].name");
    EXPECT_EQ(
        responses_error_of("{" + in + R"(,"tools":[{"type":"function","name":"f","parameters":[]}]})").param,
        "tools[0].parameters");
    EXPECT_EQ(
        responses_error_of("{" + in + R"(,"tools":[{"type":"function","name":"f","strict":"yes"}]})").param,
        "tools[0].strict");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"tool_choice":"sometimes"})").param, "tool_choice");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"tool_choice":{"type":"mcp","server_label":"s"}})").param,
              "tool_choice.type");
    EXPECT_EQ(
        responses_error_of("{" + in +
                           R"(,"tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools",
                                 "mode":"auto","tools":[{"type":"function","name":"g"}]}})")
            .param,
        "tool_choice.tools[0].name");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"text":{"format":{"type":"xml"}}})").param,
              "text.format.type");
    EXPECT_EQ(
        responses_error_of("{" + in + R"(,"text":{"format":{"type":"json_schema","schema":{}}}})").param,
        "text.format.name");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"text":{"format":{"type":"json_schema","name":"n"}}})").param,
              "text.format.schema");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"max_output_tokens":0})").param, "max_output_tokens");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"max_output_tokens":1.5})").param, "max_output_tokens");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"top_logprobs":21})").param, "top_logprobs");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"stream":"yes"})").param, "stream");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"store":1})").param, "store");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"include":[1]})").param, "include[0]");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"reasoning":{"effort":"extreme"}})").param,
              "reasoning.effort");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"truncation":"middle"})").param, "truncation");
    EXPECT_EQ(responses_error_of("{" + in + R"(,"metadata":{"k":1}})").param, "metadata.k");
}

TEST(ServerResponses, ChatErrorsNameTheResponsesFields) {
    const ResponsesRequest r;
    EXPECT_EQ(responses_error(invalid_request("'max_tokens' must be between", "max_tokens"), r).param,
              "max_output_tokens");
    EXPECT_EQ(responses_error(invalid_request("the template failed", "messages"), r).param, "input");
    const ApiError schema =
        responses_error(invalid_request("[json_schema] response_format.json_schema.schema at '#': bad",
                                        "response_format.json_schema.schema", "unsupported_schema"),
                        r);
    EXPECT_EQ(schema.param, "text.format.schema");
    EXPECT_EQ(schema.message, "[json_schema] text.format.schema at '#': bad");
    EXPECT_EQ(schema.code, "unsupported_schema");
    EXPECT_EQ(responses_error(invalid_request("'response_format' json_object cannot", "response_format"), r)
                  .message,
              "'text.format' json_object cannot");
    EXPECT_EQ(responses_error(invalid_request("'temperature' must be", "temperature"), r).param,
              "temperature");
}

// Replays events as the openai client's ResponseAccumulator does; fails on an event it would
// refuse (an unknown type, an index out of range, a delta for another part type).
struct Replay {
    json output = json::array();
    int64_t last_sequence = -1;
    std::vector<std::string> types;

    bool apply(json e) {
        types.push_back(e["type"]);
        if (e.contains("sequence_number")) {
            EXPECT_EQ(e["sequence_number"].get<int64_t>(), last_sequence + 1);
            last_sequence = e["sequence_number"];
        }
        const std::string type = e["type"];
        auto item = [&]() -> json& {
            const size_t i = e["output_index"];
            EXPECT_LT(i, output.size()) << e.dump();
            return output[std::min(i, output.size() - 1)];
        };
        if (type == "response.output_item.added") {
            EXPECT_EQ(e["output_index"], output.size());
            output.push_back(e["item"]);
        } else if (type == "response.output_item.done") {
            item() = e["item"];
        } else if (type == "response.content_part.added") {
            item()["content"].push_back(e["part"]);
        } else if (type == "response.content_part.done") {
            item()["content"][e["content_index"].get<size_t>()] = e["part"];
        } else if (type == "response.output_text.delta" || type == "response.reasoning_text.delta") {
            json& part = item()["content"][e["content_index"].get<size_t>()];
            EXPECT_EQ(part["type"], type == "response.output_text.delta" ? "output_text" : "reasoning_text");
            part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
        } else if (type == "response.output_text.done" || type == "response.reasoning_text.done") {
            EXPECT_EQ(item()["content"][e["content_index"].get<size_t>()]["text"], e["text"]);
        } else if (type == "response.function_call_arguments.delta") {
            item()["arguments"] = item()["arguments"].get<std::string>() + e["delta"].get<std::string>();
        } else if (type == "response.function_call_arguments.done") {
            EXPECT_EQ(item()["arguments"], e["arguments"]);
        } else {
            ADD_FAILURE() << "unexpected event " << e.dump();
        }
        return true;
    }
};

ParsedDelta piece(std::string reasoning, std::string content, std::vector<ParsedToolCall> calls = {}) {
    ParsedDelta d;
    d.reasoning = std::move(reasoning);
    d.content = std::move(content);
    d.tool_calls = std::move(calls);
    return d;
}

TEST(ServerResponses, OutputItemsAndTheirEvents) {
    Replay replay;
    int64_t sequence = 0;
    ResponseOutput out("abc", [&](json e) {
        e["sequence_number"] = sequence++;
        return replay.apply(std::move(e));
    });
    const json lp = json::array(
        {{{"token", "He"}, {"logprob", -0.5}, {"bytes", {72, 101}}, {"top_logprobs", json::array()}}});
    ASSERT_TRUE(out.add(piece("I should ", "")));
    ASSERT_TRUE(out.add(piece("call f.", "He", {}), lp));
    ASSERT_TRUE(out.add(piece("", "llo", {{"f", R"({"x":1})"}, {"g", "{}"}})));
    ASSERT_TRUE(out.add(piece("", "after")));
    ASSERT_TRUE(out.finish(false));

    const json& items = out.items();
    ASSERT_EQ(items.size(), 5u) << items.dump();
    EXPECT_EQ(items[0]["type"], "reasoning");
    EXPECT_EQ(items[0]["content"][0], (json{{"type", "reasoning_text"}, {"text", "I should call f."}}));
    EXPECT_EQ(items[0]["summary"], json::array());
    EXPECT_EQ(items[1]["type"], "message");
    EXPECT_EQ(items[1]["role"], "assistant");
    EXPECT_EQ(items[1]["status"], "completed");
    EXPECT_EQ(items[1]["content"][0]["text"], "Hello");
    EXPECT_EQ(items[1]["content"][0]["annotations"], json::array());
    EXPECT_EQ(items[1]["content"][0]["logprobs"], lp);
    EXPECT_EQ(items[2]["type"], "function_call");
    EXPECT_EQ(items[2]["name"], "f");
    EXPECT_EQ(items[2]["arguments"], R"({"x":1})");
    EXPECT_EQ(items[2]["call_id"], "call_abc_0");
    EXPECT_EQ(items[2]["id"], "fc_abc_2");
    EXPECT_EQ(items[2]["status"], "completed");
    EXPECT_EQ(items[3]["call_id"], "call_abc_1");
    EXPECT_EQ(items[4]["content"][0]["text"], "after");
    EXPECT_EQ(out.function_calls(), 2u);
    // The events rebuild exactly the items.
    EXPECT_EQ(replay.output, items);
    EXPECT_EQ(replay.types.front(), "response.output_item.added");
    EXPECT_EQ(replay.types.back(), "response.output_item.done");
}

TEST(ServerResponses, OutputStatusAtTheEnd) {
    ResponseOutput cut("x");
    cut.add(piece("", "partial"));
    cut.finish(true);
    ASSERT_EQ(cut.items().size(), 1u);
    EXPECT_EQ(cut.items()[0]["status"], "incomplete");

    // A reply with nothing to say still answers with a message; one cut in its reasoning does not.
    ResponseOutput empty("x");
    empty.finish(false);
    ASSERT_EQ(empty.items().size(), 1u);
    EXPECT_EQ(empty.items()[0]["type"], "message");
    EXPECT_EQ(empty.items()[0]["content"][0]["text"], "");
    ResponseOutput thinking("x");
    thinking.add(piece("hmm", ""));
    thinking.finish(true);
    ASSERT_EQ(thinking.items().size(), 1u);
    EXPECT_EQ(thinking.items()[0]["status"], "incomplete");

    ResponseOutput calls("x");
    calls.add(piece("", "", {{"f", "{}"}}));
    calls.finish(false);
    ASSERT_EQ(calls.items().size(), 1u);
    EXPECT_EQ(calls.items()[0]["type"], "function_call");

    // A client gone stops the building.
    int events = 0;
    ResponseOutput gone("x", [&](json) { return ++events < 2; });
    EXPECT_FALSE(gone.add(piece("", "a")));
    EXPECT_EQ(events, 2);
}

}  // namespace
}  // namespace sluice::server
