// Splits a model's streamed reply into what OpenAI clients expect: reasoning (Qwen3's, DeepSeek-R1's
// <think>…</think>) into `reasoning_content`, tool calls into `tool_calls` — Qwen3's
// <tool_call>{json}</tool_call>, the XML form of Qwen3.5 / Qwen3-Coder templates,
// <tool_call><function=NAME><parameter=P>VALUE</parameter></function></tool_call>, and GLM-4.5's,
// <tool_call>NAME\n<arg_key>P</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>, their values
// typed by the tool's parameters schema where the request gives one; DeepSeek's block
// <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>…<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>, a call
// "function<｜tool▁sep｜>NAME\n```json\nARGS\n```" (V3, R1) or "NAME<｜tool▁sep｜>ARGS" (V3.1), ARGS
// as the model wrote them — the rest into `content`. Every form is read whatever the template's.
// A reply in gpt-oss's harmony format (analysis / final / commentary messages in special tokens) is
// read instead by harmony_parser.h, whose reader this class hands it to when told so.
//
// Streaming: feed() takes text chunks as they are generated and returns only what is certain;
// text that might be the start of a tag ("<thi", "</tool_") is held back until the next chunk
// decides it. finish() releases what is held: an unterminated <think> stays reasoning, an
// unparsable <tool_call> becomes plain content (nothing the model wrote is lost). A DeepSeek call
// ends at the first <｜tool▁call▁end｜> before which it reads whole (one inside a JSON string of its
// arguments is passed over); one that cannot become a call is content, with the block's opening when
// no call of the block read before it; text in the block that is no call ends the block.
//
// Data lifetime: one parser per generated choice. Threading: a plain value, one thread.
// Rejected alternative: parsing the whole reply at the end — streaming clients would then see no
// reasoning/content split until the reply is over.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sluice::server {

class HarmonyParser;

struct ParsedToolCall {
    std::string name;
    std::string arguments;  // a JSON text (OpenAI sends arguments as a string)
};

struct ParsedDelta {
    std::string reasoning;
    std::string content;
    std::vector<ParsedToolCall> tool_calls;
    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
    // Appends a later piece of the same reply (a whole reply gathered from its pieces).
    void append(const ParsedDelta& d) {
        reasoning += d.reasoning;
        content += d.content;
        tool_calls.insert(tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
    }
};

class OutputParser {
 public:
    // start_in_reasoning: the prompt already opened <think> (templates that end the generation
    // prompt with "<think>\n"), so the reply begins inside the reasoning. `tools`: the request's
    // (OpenAI's array, or null): an XML-form argument is typed by its parameter's schema, a
    // string's text kept as it is (GrammarBuilder::xml_value_is_text), any other value read as JSON.
    // `harmony`: the reply is gpt-oss's harmony messages (harmony_parser.h reads it; the other
    // arguments but parse_tool_calls do not apply).
    OutputParser(bool start_in_reasoning, bool parse_tool_calls,
                 nlohmann::ordered_json tools = nlohmann::ordered_json(), bool harmony = false);
    ~OutputParser();
    OutputParser(OutputParser&&) noexcept;
    OutputParser& operator=(OutputParser&&) noexcept;

    ParsedDelta feed(std::string_view text);
    // The rest, at the end of the reply. A tool call still open (the generation ran out of tokens
    // inside it, or inside the "<tool_call>" of a call after a call, or in DeepSeek's block before
    // a call read) is dropped — never handed back as markup in the content — and cut_call() says so.
    ParsedDelta finish();
    bool cut_call() const;
    // Inside <think>…</think> now (the text fed so far opened the reasoning and has not closed it);
    // in harmony, inside an analysis message.
    bool in_reasoning() const;

 private:
    // kCallBlock: inside DeepSeek's <｜tool▁calls▁begin｜>…<｜tool▁calls▁end｜>, between calls;
    // kDsCall: in one of its calls, from its <｜tool▁call▁begin｜>.
    enum class State { kStart, kReasoning, kContent, kToolCall, kCallBlock, kDsCall };
    void process(ParsedDelta* out, bool final);

    State state_;
    bool parse_tool_calls_;
    nlohmann::ordered_json tools_;
    bool strip_leading_space_ = false;  // after </think> or </tool_call>: drop the "\n\n" separator
    std::string buffer_;                // text not yet emitted
    bool cut_call_ = false;
    bool after_call_ = false;   // a tool call was read and no content has come since
    std::string block_opener_;  // DeepSeek's <｜tool▁calls▁begin｜> while no call in its block has read
    std::unique_ptr<HarmonyParser> harmony_;  // a harmony reply: read by it instead
};

// True when `prompt_text` (a rendered generation prompt) leaves the reply inside <think>.
bool prompt_opens_reasoning(std::string_view prompt_text);

}  // namespace sluice::server
