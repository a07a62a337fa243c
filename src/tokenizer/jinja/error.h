// The interpreter's internal error: thrown anywhere below ChatTemplate (lexer, parser, evaluator,
// builtins) and converted to a Status naming the template line and column at the API boundary
// (src/tokenizer/chat_template.cpp). Exceptions never leave the jinja module.
//
// `offset` is a byte offset into the original template text, or kNoOffset when the thrower does not
// know it (a builtin); the evaluator then attaches the offset of the node being evaluated.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace sluice::jinja {

inline constexpr size_t kNoOffset = static_cast<size_t>(-1);

struct TemplateError : std::runtime_error {
    TemplateError(const std::string& message, size_t offset_in = kNoOffset)
        : std::runtime_error(message), offset(offset_in) {}
    size_t offset;
};

// raise_exception(msg) from the template: reported with the template's own message.
struct RaisedError : TemplateError {
    using TemplateError::TemplateError;
};

[[noreturn]] inline void fail(const std::string& message, size_t offset = kNoOffset) {
    throw TemplateError(message, offset);
}

}  // namespace sluice::jinja
