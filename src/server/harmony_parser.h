// Reads a reply in gpt-oss's harmony format into what OpenAI clients expect (the harmony side of
// output_parser.h, which hands a harmony reply to it).
//
// A harmony reply is a sequence of messages, its markup special tokens of the o200k_harmony
// vocabulary, decoded as this text. The prompt ends with "<|start|>assistant", so the reply starts
// with the first message's header:
//   <|channel|>analysis<|message|>TEXT<|end|>                       reasoning_content
//   <|start|>assistant<|channel|>final<|message|>TEXT<|return|>     content
//   <|start|>assistant<|channel|>commentary<|message|>TEXT<|end|>   content (a preamble to the user)
//   <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>
//   <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>ARGS<|call|>
//                                                                   a tool call, in either place
// A header is the text between <|start|> (or the reply's start) and <|message|>: a role, `to=`
// RECIPIENT, <|channel|> CHANNEL, a content type (`json`, `<|constrain|>json`). A message to
// `functions.NAME` (NAME a tool name OpenAI allows) is a call, its ARGS a JSON object kept as the
// model wrote them; a message to any other recipient (the built-in `python`, `browser.*`) is the
// model's own work, reasoning; an analysis message is reasoning; a final or commentary message, one
// of an unknown channel, or one of another role (a tool's result the model went on to write) is
// content.
//
// Ends: <|return|> and <|call|> end the generation (the engine's end-of-sequence ids for this
// vocabulary), so a reply's last message usually has no end tag in the text; <|end|> ends a message
// and another follows it. An end tag not followed by <|start|> or the end of the reply was text of
// its message, and is given back in it; <|start|> inside a message followed by a header begins the
// next (a model that left out <|end|>). A call ends at the first end tag (or <|start|>, or the end of
// the reply) before which ARGS reads whole, so one inside a JSON string is passed over; a call whose
// ARGS cannot be one (invalid JSON, not an object) is content, and one cut short (the token limit)
// is dropped and said to be cut. Text at the reply's start that cannot begin a header
// (`<|channel|>`, `to=`, `<|constrain|>`), and a header that cannot be one (a character no header
// has, longer than kMaxHeaderBytes), are content: a reply that is no harmony loses nothing.
//
// Streaming: feed() takes text chunks as they are generated and returns only what is certain; text
// that may be the start of a tag is held back until the next chunk decides it.
//
// Data lifetime: one parser per generated choice. Threading: a plain value, one thread.
// Rejected alternatives: reading token ids instead of text, which would tell the markup's real
// tokens from the same text spelled by ordinary ones — every reader in the server takes text (the
// forced prefixes too), and what text costs is small: a spelled end tag is given back unless a
// header follows it, one in a call's JSON string is passed over, so only a spelled
// "<|start|>HEADER<|message|>" inside a message is taken for markup. Treating <|end|> as the end of
// the reply (it separates the analysis from the answer).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/output_parser.h"

namespace sluice::server {

class HarmonyParser {
 public:
    // `parse_tool_calls`: messages to functions.NAME are calls (else their ARGS are content).
    explicit HarmonyParser(bool parse_tool_calls);

    ParsedDelta feed(std::string_view text);
    // The rest, at the end of the reply: the last message's text; its call when ARGS read whole (the
    // generation ended at <|call|>), else the call is dropped and cut_call() says so.
    ParsedDelta finish();
    bool cut_call() const { return cut_call_; }
    // Inside an analysis message (or another message that is reasoning) now.
    bool in_reasoning() const { return state_ == State::kBody && kind_ == Kind::kReasoning; }

    // The longest header read; a longer one is content.
    static constexpr size_t kMaxHeaderBytes = 512;

 private:
    // kStart: the reply's start (a header or plain content). kHeader: between <|start|> (or the
    // start) and <|message|>. kBody: a message's text. kBetween: after an end tag, before what
    // tells whether it ended the message (<|start|>, the reply's end) or was text.
    enum class State { kStart, kHeader, kBody, kBetween };
    enum class Kind { kReasoning, kContent, kCall };
    void process(ParsedDelta* out, bool final);
    // A header's text (without <|message|>): the kind of the message it opens (and call_name_).
    void read_header(std::string_view header);
    // Whether `header` can be (the start of) a header: kHeaderChars and the <|channel|> and
    // <|constrain|> tags, a tag's start at its end while `complete` is false.
    static bool header_like(std::string_view header, bool complete);
    // kBody of a call: ends it at the first end tag before which its ARGS read whole.
    void process_call(ParsedDelta* out, bool final);
    static void emit(ParsedDelta* out, Kind kind, std::string_view text);

    State state_ = State::kStart;
    Kind kind_ = Kind::kContent;
    bool parse_tool_calls_;
    std::string buffer_;         // text not yet read
    std::string call_name_;      // kCall: NAME of to=functions.NAME
    size_t call_scan_ = 0;       // kCall: where the next end tag is looked for (those before were in ARGS)
    std::string pending_end_;    // kBetween: the end tag, given back to its message if it was text
    std::string header_markup_;  // kHeader: the <|start|> that opened it, given back if no header follows
    Kind header_fallback_ = Kind::kContent;  // kHeader: where a header that is none goes
    bool cut_call_ = false;
};

}  // namespace sluice::server
