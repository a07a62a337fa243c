// Template text → tokens, a port of @huggingface/jinja's lexer.ts (preprocess + tokenize) so that
// whitespace handling is byte-identical: the oracle renders with trim_blocks and lstrip_blocks on,
// implemented as regex rewrites of the source before tokenizing, and strips whitespace for
// `{%-`/`-%}`/`{{-`/`-}}`/`{#-`/`-#}` while tokenizing.
//
// Every token keeps the byte offset of its first character in the ORIGINAL template (the rewrites
// carry an offset map), so errors can name a line and column of what the user wrote.
//
// Additions over the oracle (which rejects them): `{% raw %}…{% endraw %}` is lexed as one Text
// token, as Python Jinja2 does.
//
// Pure function of its input; no shared state.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::jinja {

enum class TokenType {
    kText,
    kNumericLiteral,
    kStringLiteral,
    kIdentifier,
    kEquals,
    kOpenParen,
    kCloseParen,
    kOpenStatement,
    kCloseStatement,
    kOpenExpression,
    kCloseExpression,
    kOpenSquareBracket,
    kCloseSquareBracket,
    kOpenCurlyBracket,
    kCloseCurlyBracket,
    kComma,
    kDot,
    kColon,
    kPipe,
    kAdditiveBinaryOperator,        // + - ~
    kMultiplicativeBinaryOperator,  // * / // %
    kExponentiationBinaryOperator,  // **
    kComparisonBinaryOperator,      // < > <= >= == !=
    kUnaryOperator,                 // - + not followed by a number
    kComment,
};

const char* token_type_name(TokenType type);

struct Token {
    std::string value;
    TokenType type;
    size_t offset;  // byte offset in the original template
};

// Throws TemplateError (with offset) on malformed input.
std::vector<Token> tokenize(std::string_view source);

// 1-based line and column (in bytes) of a byte offset in `source`.
void offset_to_line_column(std::string_view source, size_t offset, size_t& line, size_t& column);

}  // namespace sluice::jinja
