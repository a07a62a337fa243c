// UTF-8 string helpers with JavaScript semantics, for the oracle's string operations: JS `\s`
// whitespace (trim, split), case mapping per code point, code-point iteration (Array.from(str)).
// Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::jinja {

// Byte length of the JS `\s` character starting at s[i], or 0.
size_t js_space_at(std::string_view s, size_t i);

// Decodes the UTF-8 code point at s[i] into cp; returns its byte length (1 for a malformed byte).
size_t decode_utf8(std::string_view s, size_t i, uint32_t& cp);
void append_utf8(std::string& out, uint32_t cp);

// JS trim / trimStart / trimEnd.
std::string js_trim(std::string_view s, bool start, bool end);
// Python str.strip(chars) family: removes code points contained in `chars` from the chosen ends.
std::string strip_chars(std::string_view s, std::string_view chars, bool start, bool end);

std::vector<std::string> code_points(std::string_view s);  // Array.from(str)
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);

}  // namespace sluice::jinja
