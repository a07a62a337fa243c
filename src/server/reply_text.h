// Small text helpers shared by the reply readers (output_parser.cpp, harmony_parser.cpp): tags that
// may still be arriving, tool names, a JSON value that may be cut short.
//
// Data lifetime: pure functions over views. Threading: none.
#pragma once

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>

namespace sluice::server::reply_text {

// Length of the longest suffix of `text` that is a proper prefix of `tag` (it may become the tag).
inline size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
    const size_t max = std::min(text.size(), tag.size() - 1);
    for (size_t n = max; n > 0; --n)
        if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
    return 0;
}

inline bool is_space(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

inline std::string_view trim(std::string_view s) {
    while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
    return s;
}

// A tool name as OpenAI allows it: ^[a-zA-Z0-9_-]{1,64}$ (dots too, as some clients send them).
inline bool is_tool_name(std::string_view name) {
    if (name.empty() || name.size() > 64) return false;
    return std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
               c == '-' || c == '.';
    });
}

// How much of a call the text before a possible end tag is.
enum class CallRead {
    kCall,  // a whole call
    kCut,   // a call so far, its JSON arguments unfinished: the tag was inside a JSON string
    kBad,   // no call
};

// `text` as one JSON value: kCall when it is one, kCut when it is the start of one (the parse ran
// off its end), kBad otherwise.
inline CallRead read_json(std::string_view text, nlohmann::ordered_json* out) {
    try {
        *out = nlohmann::ordered_json::parse(text);
        return CallRead::kCall;
    } catch (const nlohmann::ordered_json::parse_error& e) {
        return e.byte > text.size() ? CallRead::kCut : CallRead::kBad;  // byte: 1-based, where it stopped
    }
}

}  // namespace sluice::server::reply_text
