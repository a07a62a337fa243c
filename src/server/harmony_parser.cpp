// The harmony reply reader (see harmony_parser.h): a four-state machine over a text buffer.
#include "server/harmony_parser.h"

#include <algorithm>
#include <array>
#include <span>
#include <vector>

#include "server/reply_text.h"

namespace sluice::server {
namespace {

using reply_text::CallRead;
using reply_text::is_space;
using reply_text::partial_tag_suffix;
using reply_text::read_json;
using reply_text::trim;

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kCall = "<|call|>";
constexpr std::string_view kReturn = "<|return|>";
constexpr std::string_view kFunctions = "functions.";

// What ends a message's text: its end tags, and <|start|> (the next message, <|end|> left out).
constexpr std::array<std::string_view, 4> kBodyEnds = {kEnd, kCall, kReturn, kStart};
constexpr size_t kLongestTag = kReturn.size();
// How a reply's first header can begin (the prompt wrote "<|start|>assistant").
constexpr std::array<std::string_view, 3> kOpeners = {kChannel, "to=", kConstrain};

// The first of `tags` in `text` from `from`: its position and which (npos when none).
std::pair<size_t, std::string_view> find_first(std::string_view text, size_t from,
                                               std::span<const std::string_view> tags) {
    std::pair<size_t, std::string_view> best{std::string_view::npos, {}};
    for (std::string_view tag : tags)
        if (const size_t pos = text.find(tag, from); pos < best.first) best = {pos, tag};
    return best;
}

// What a header holds besides its tags: roles, recipients (functions.get_weather, browser.search),
// channels and content types.
bool header_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == '=' || c == ':' || c == '/' || is_space(c);
}

}  // namespace

HarmonyParser::HarmonyParser(bool parse_tool_calls) : parse_tool_calls_(parse_tool_calls) {}

ParsedDelta HarmonyParser::feed(std::string_view text) {
    buffer_ += text;
    ParsedDelta out;
    process(&out, false);
    return out;
}

ParsedDelta HarmonyParser::finish() {
    ParsedDelta out;
    process(&out, true);
    return out;
}

void HarmonyParser::emit(ParsedDelta* out, Kind kind, std::string_view text) {
    if (text.empty()) return;
    (kind == Kind::kReasoning ? out->reasoning : out->content) += text;
}

bool HarmonyParser::header_like(std::string_view header, bool complete) {
    for (size_t i = 0; i < header.size();) {
        if (header_char(header[i])) {
            ++i;
            continue;
        }
        const std::string_view rest = header.substr(i);
        bool tag = false;
        for (std::string_view t : {kChannel, kConstrain}) {
            if (rest.starts_with(t)) {
                i += t.size();
                tag = true;
                break;
            }
        }
        if (tag) continue;
        // The start of a tag still arriving (the <|message|> that ends the header, too).
        if (!complete)
            for (std::string_view t : {kChannel, kConstrain, kMessage})
                if (t.starts_with(rest)) return true;
        return false;
    }
    return true;
}

void HarmonyParser::read_header(std::string_view header) {
    // Words, the tags words of their own: "assistant", "to=functions.f", "<|channel|>", "commentary",
    // "<|constrain|>", "json".
    std::vector<std::string_view> words;
    for (size_t i = 0; i < header.size();) {
        if (is_space(header[i])) {
            ++i;
            continue;
        }
        const std::string_view rest = header.substr(i);
        size_t n = 0;
        if (rest.starts_with(kChannel))
            n = kChannel.size();
        else if (rest.starts_with(kConstrain))
            n = kConstrain.size();
        else
            while (n < rest.size() && !is_space(rest[n]) && rest[n] != '<') ++n;
        if (n == 0) n = 1;  // a '<' of no tag (the start of one still arriving): a word of its own
        words.push_back(rest.substr(0, n));
        i += n;
    }
    std::string_view role, channel, recipient;
    bool channel_next = false, channel_read = false;
    for (size_t w = 0; w < words.size(); ++w) {
        const std::string_view word = words[w];
        if (word == kChannel) {
            channel_next = true;
        } else if (word == kConstrain) {
            ++w;  // its content type
        } else if (word.starts_with("to=")) {
            recipient = word.substr(3);
        } else if (channel_next) {
            channel = word;
            channel_next = false;
            channel_read = true;
        } else if (!channel_read && role.empty()) {
            role = word;
        }  // else a content type ("json")
    }
    const std::string_view name =
        recipient.starts_with(kFunctions) ? recipient.substr(kFunctions.size()) : std::string_view();
    if (!role.empty() && role != "assistant") {
        kind_ = Kind::kContent;  // another author's message (a tool's result the model went on to write)
    } else if (parse_tool_calls_ && reply_text::is_tool_name(name)) {
        kind_ = Kind::kCall;
        call_name_ = std::string(name);
        call_scan_ = 0;
    } else if (!recipient.empty() || channel == "analysis") {
        kind_ = Kind::kReasoning;  // to a built-in tool (python, browser): the model's own work
    } else {
        kind_ = Kind::kContent;  // final, a commentary preamble, or a channel it does not name
    }
}

void HarmonyParser::process_call(ParsedDelta* out, bool final) {
    for (;;) {
        const auto [pos, tag] = find_first(buffer_, call_scan_, kBodyEnds);
        if (pos == std::string::npos && !final) {
            // No tag before the last few bytes (where one may still be arriving): the next search
            // starts there, so long arguments fed token by token are scanned once.
            if (buffer_.size() >= kLongestTag)
                call_scan_ = std::max(call_scan_, buffer_.size() - kLongestTag + 1);
            return;
        }
        const std::string_view body = std::string_view(buffer_).substr(0, pos);
        const std::string_view args = trim(body);
        nlohmann::ordered_json parsed;
        // Empty ARGS before an end tag: a call of a tool without arguments written as nothing.
        CallRead read = args.empty() && pos != std::string::npos ? CallRead::kCall : read_json(args, &parsed);
        if (read == CallRead::kCall && !args.empty() && !parsed.is_object()) read = CallRead::kBad;
        if (read == CallRead::kCut && pos != std::string::npos) {
            call_scan_ = pos + tag.size();  // the tag was inside a JSON string of ARGS
            continue;
        }
        if (read == CallRead::kCut) {  // the reply ended inside ARGS
            cut_call_ = true;
            buffer_.clear();
            return;
        }
        const bool call = read == CallRead::kCall;
        if (call)
            out->tool_calls.push_back({call_name_, args.empty() ? std::string("{}") : std::string(args)});
        else
            emit(out, Kind::kContent, body);  // no call: what the model wrote is content
        kind_ = Kind::kContent;
        if (pos == std::string::npos) {
            buffer_.clear();
            return;
        }
        buffer_.erase(0, pos + tag.size());
        if (tag == kStart) {
            state_ = State::kHeader;
            header_markup_ = std::string(kStart);
            header_fallback_ = Kind::kContent;
        } else {
            state_ = State::kBetween;
            // After a call its end tag is markup whatever follows; after content, text of it when
            // text follows.
            pending_end_ = call ? std::string() : std::string(tag);
        }
        return;
    }
}

void HarmonyParser::process(ParsedDelta* out, bool final) {
    for (;;) {
        switch (state_) {
            case State::kStart: {
                size_t n = 0;
                while (n < buffer_.size() && is_space(buffer_[n])) ++n;
                const std::string_view rest = std::string_view(buffer_).substr(n);
                bool opens = false, may_open = false;
                for (std::string_view o : kOpeners) {
                    opens = opens || rest.starts_with(o);
                    may_open = may_open || o.starts_with(rest);
                }
                if (opens) {
                    state_ = State::kHeader;
                    header_markup_.clear();
                    header_fallback_ = Kind::kContent;
                    continue;
                }
                if (may_open && !final) return;
                state_ = State::kBody;  // no header: the reply is plain content
                kind_ = Kind::kContent;
                continue;
            }
            case State::kHeader: {
                const size_t pos = buffer_.find(kMessage);
                const std::string_view header = std::string_view(buffer_).substr(0, pos);
                const bool like =
                    header.size() <= kMaxHeaderBytes && header_like(header, pos != std::string::npos);
                if (like && pos != std::string::npos) {
                    read_header(header);
                    buffer_.erase(0, pos + kMessage.size());
                    header_markup_.clear();
                    state_ = State::kBody;
                    continue;
                }
                if (like && !final) return;
                if (like) {
                    // The reply ended in a header: markup, no text. A call's header is a cut call.
                    read_header(header);
                    if (kind_ == Kind::kCall) cut_call_ = true;
                    buffer_.clear();
                    return;
                }
                // No header: the <|start|> that opened it and its text are text of the message before.
                emit(out, header_fallback_, header_markup_);
                header_markup_.clear();
                kind_ = header_fallback_;
                state_ = State::kBody;
                continue;
            }
            case State::kBody: {
                if (kind_ == Kind::kCall) {
                    process_call(out, final);
                    if (state_ == State::kBody) return;  // waiting for more, or done
                    continue;
                }
                const auto [pos, tag] = find_first(buffer_, 0, kBodyEnds);
                if (pos == std::string::npos) {
                    size_t hold = 0;
                    if (!final)
                        for (std::string_view t : kBodyEnds)
                            hold = std::max(hold, partial_tag_suffix(buffer_, t));
                    emit(out, kind_, std::string_view(buffer_).substr(0, buffer_.size() - hold));
                    buffer_.erase(0, buffer_.size() - hold);
                    return;
                }
                emit(out, kind_, std::string_view(buffer_).substr(0, pos));
                buffer_.erase(0, pos + tag.size());
                if (tag == kStart) {
                    state_ = State::kHeader;
                    header_markup_ = std::string(kStart);
                    header_fallback_ = kind_;
                } else {
                    state_ = State::kBetween;
                    pending_end_ = std::string(tag);
                }
                continue;
            }
            case State::kBetween: {
                size_t n = 0;
                while (n < buffer_.size() && is_space(buffer_[n])) ++n;
                const std::string_view rest = std::string_view(buffer_).substr(n);
                if (rest.starts_with(kStart)) {
                    // The message ended; the next begins. A header that is none after it is content.
                    buffer_.erase(0, n + kStart.size());
                    pending_end_.clear();
                    state_ = State::kHeader;
                    header_markup_ = std::string(kStart);
                    header_fallback_ = Kind::kContent;
                    continue;
                }
                if (!final && kStart.starts_with(rest)) return;
                if (final && rest.empty()) {  // the reply's end: the tag ended its last message
                    buffer_.clear();
                    pending_end_.clear();
                    return;
                }
                // Text follows: the tag was text of its message (after a call: markup, dropped).
                emit(out, kind_, pending_end_);
                pending_end_.clear();
                state_ = State::kBody;
                continue;
            }
        }
    }
}

}  // namespace sluice::server
