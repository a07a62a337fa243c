// Port of @huggingface/jinja lexer.ts. The structure (preprocess rewrites, then one pass that
// alternates text and tag scanning) follows the original closely so that its whitespace quirks are
// reproduced; comments name the original's step. See lexer.h for the contract.
#include "tokenizer/jinja/lexer.h"

#include <cstdint>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/text.h"

namespace sluice::jinja {

const char* token_type_name(TokenType type) {
    switch (type) {
        case TokenType::kText: return "Text";
        case TokenType::kNumericLiteral: return "NumericLiteral";
        case TokenType::kStringLiteral: return "StringLiteral";
        case TokenType::kIdentifier: return "Identifier";
        case TokenType::kEquals: return "Equals";
        case TokenType::kOpenParen: return "OpenParen";
        case TokenType::kCloseParen: return "CloseParen";
        case TokenType::kOpenStatement: return "OpenStatement";
        case TokenType::kCloseStatement: return "CloseStatement";
        case TokenType::kOpenExpression: return "OpenExpression";
        case TokenType::kCloseExpression: return "CloseExpression";
        case TokenType::kOpenSquareBracket: return "OpenSquareBracket";
        case TokenType::kCloseSquareBracket: return "CloseSquareBracket";
        case TokenType::kOpenCurlyBracket: return "OpenCurlyBracket";
        case TokenType::kCloseCurlyBracket: return "CloseCurlyBracket";
        case TokenType::kComma: return "Comma";
        case TokenType::kDot: return "Dot";
        case TokenType::kColon: return "Colon";
        case TokenType::kPipe: return "Pipe";
        case TokenType::kAdditiveBinaryOperator: return "AdditiveBinaryOperator";
        case TokenType::kMultiplicativeBinaryOperator: return "MultiplicativeBinaryOperator";
        case TokenType::kExponentiationBinaryOperator: return "ExponentiationBinaryOperator";
        case TokenType::kComparisonBinaryOperator: return "ComparisonBinaryOperator";
        case TokenType::kUnaryOperator: return "UnaryOperator";
        case TokenType::kComment: return "Comment";
    }
    return "?";
}

namespace {

bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_word(char c) {
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// Text with a map from each byte to its offset in the original template (map.size() == size()+1).
struct MappedText {
    std::string text;
    std::vector<size_t> map;
    void push(char c, size_t offset) {
        text += c;
        map.push_back(offset);
    }
};

// JS String.prototype.trimEnd: the length of `s` without trailing whitespace.
size_t trimmed_end(std::string_view s) {
    size_t end = 0;
    for (size_t i = 0; i < s.size();) {
        size_t w = js_space_at(s, i);
        if (w) {
            i += w;
        } else {
            ++i;
            end = i;
        }
    }
    return end;
}

bool is_line_terminator_end(std::string_view s, size_t i) {  // does a line terminator end at i?
    if (i == 0) return true;
    char c = s[i - 1];
    if (c == '\n' || c == '\r') return true;
    // U+2028 / U+2029 (E2 80 A8 / A9)
    return i >= 3 && static_cast<unsigned char>(s[i - 3]) == 0xE2 &&
           static_cast<unsigned char>(s[i - 2]) == 0x80 &&
           (static_cast<unsigned char>(s[i - 1]) == 0xA8 || static_cast<unsigned char>(s[i - 1]) == 0xA9);
}

// preprocess(): drop one trailing "\n"; lstrip_blocks (/^[ \t]*({[#%-])/gm → "$1"); trim_blocks
// (/([#%-]})\n/g → "$1"); remove transformers' {% generation %} / {% endgeneration %} tags.
MappedText preprocess(std::string_view src) {
    MappedText in;
    for (size_t i = 0; i < src.size(); ++i) in.push(src[i], i);
    in.map.push_back(src.size());
    if (!in.text.empty() && in.text.back() == '\n') {
        in.text.pop_back();
        in.map.erase(in.map.end() - 2);
    }

    MappedText ls;  // lstrip_blocks
    const std::string& t = in.text;
    for (size_t i = 0; i < t.size();) {
        if (is_line_terminator_end(t, i)) {
            size_t q = i;
            while (q < t.size() && (t[q] == ' ' || t[q] == '\t')) ++q;
            if (q + 1 < t.size() && t[q] == '{' && (t[q + 1] == '#' || t[q + 1] == '%' || t[q + 1] == '-')) {
                ls.push(t[q], in.map[q]);
                ls.push(t[q + 1], in.map[q + 1]);
                i = q + 2;
                continue;
            }
        }
        ls.push(t[i], in.map[i]);
        ++i;
    }
    ls.map.push_back(in.map.back());

    MappedText tb;  // trim_blocks
    const std::string& u = ls.text;
    for (size_t i = 0; i < u.size();) {
        if (i + 2 < u.size() && (u[i] == '#' || u[i] == '%' || u[i] == '-') && u[i + 1] == '}' &&
            u[i + 2] == '\n') {
            tb.push(u[i], ls.map[i]);
            tb.push(u[i + 1], ls.map[i + 1]);
            i += 3;
            continue;
        }
        tb.push(u[i], ls.map[i]);
        ++i;
    }
    tb.map.push_back(ls.map.back());

    // /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs
    MappedText out;
    const std::string& v = tb.text;
    size_t from = 0;
    for (size_t k = v.find("{%"); k != std::string::npos; k = v.find("{%", k + 1)) {
        if (k < from) continue;
        size_t p = k + 2;
        bool lstrip = p < v.size() && v[p] == '-';
        if (lstrip) ++p;
        while (p < v.size() && is_ascii_space(v[p])) ++p;
        if (v.compare(p, 3, "end") == 0 && v.compare(p + 3, 10, "generation") == 0) p += 3;
        if (v.compare(p, 10, "generation") != 0) continue;
        p += 10;
        while (p < v.size() && is_ascii_space(v[p])) ++p;
        bool rstrip = p < v.size() && v[p] == '-';
        if (rstrip) ++p;
        if (v.compare(p, 2, "%}") != 0) continue;
        p += 2;
        size_t start = k;
        while (start > from && is_ascii_space(v[start - 1])) --start;
        size_t after_end = p;
        while (after_end < v.size() && is_ascii_space(v[after_end])) ++after_end;
        for (size_t i = from; i < start; ++i) out.push(v[i], tb.map[i]);
        if (!lstrip)
            for (size_t i = start; i < k; ++i) out.push(v[i], tb.map[i]);
        if (!rstrip)
            for (size_t i = p; i < after_end; ++i) out.push(v[i], tb.map[i]);
        from = after_end;
        k = after_end == 0 ? 0 : after_end - 1;
    }
    for (size_t i = from; i < v.size(); ++i) out.push(v[i], tb.map[i]);
    out.map.push_back(tb.map.back());
    return out;
}

struct Lexer {
    MappedText src;
    std::vector<Token> tokens;
    size_t pos = 0;
    int curly_depth = 0;

    const std::string& s() const { return src.text; }
    char at(size_t i) const { return i < s().size() ? s()[i] : '\0'; }
    size_t orig(size_t i) const { return src.map[std::min(i, src.map.size() - 1)]; }
    [[noreturn]] void error(const std::string& message, size_t at_pos) const { fail(message, orig(at_pos)); }
    bool starts_with(std::string_view seq) const { return s().compare(pos, seq.size(), seq) == 0; }
    void push(std::string value, TokenType type, size_t at_pos) {
        tokens.push_back(Token{std::move(value), type, orig(at_pos)});
    }
    const Token* last() const { return tokens.empty() ? nullptr : &tokens.back(); }

    void strip_trailing_whitespace() {
        if (!tokens.empty() && tokens.back().type == TokenType::kText) {
            tokens.back().value.resize(trimmed_end(tokens.back().value));
            if (tokens.back().value.empty()) tokens.pop_back();
        }
    }
    void skip_leading_whitespace() {
        while (size_t w = js_space_at(s(), pos)) pos += w;
    }

    // consumeWhile() for string literals: handles backslash escapes.
    std::string consume_string(char quote) {
        std::string out;
        size_t start = pos;
        while (true) {
            if (pos >= s().size()) error("Unexpected end of input (unterminated string literal)", start);
            char c = s()[pos];
            if (c == quote) break;
            if (c == '\\') {
                ++pos;
                if (pos >= s().size()) error("Unexpected end of input", start);
                char e = s()[pos++];
                if (e == 'x' || e == 'u') {
                    size_t len = e == 'x' ? 2 : 4;
                    std::string hex = s().substr(pos, len);
                    bool ok = hex.size() == len;
                    for (char h : hex) ok = ok && std::isxdigit(static_cast<unsigned char>(h));
                    if (!ok)
                        error("Invalid hexadecimal escape sequence: \\" + std::string(1, e) + hex, pos - 2);
                    uint32_t cp = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
                    append_utf8(out, cp);
                    pos += len;
                    continue;
                }
                switch (e) {
                    case 'n': out += '\n'; break;
                    case 't': out += '\t'; break;
                    case 'r': out += '\r'; break;
                    case 'b': out += '\b'; break;
                    case 'f': out += '\f'; break;
                    case 'v': out += '\v'; break;
                    case '\'': out += '\''; break;
                    case '"': out += '"'; break;
                    case '\\': out += '\\'; break;
                    default: error("Unexpected escaped character: " + std::string(1, e), pos - 1);
                }
                continue;
            }
            out += c;
            ++pos;
        }
        return out;
    }

    std::string consume_digits() {
        std::string out;
        while (pos < s().size() && is_digit(s()[pos])) out += s()[pos++];
        return out;
    }

    // `{% raw %}` / `{%- raw -%}` at pos (pos at '{'): lexes through the matching endraw.
    bool try_raw() {
        size_t p = pos + 2;
        bool strip_before = at(p) == '-';
        if (strip_before) ++p;
        while (is_ascii_space(at(p))) ++p;
        if (s().compare(p, 3, "raw") != 0 || is_word(at(p + 3))) return false;
        p += 3;
        while (is_ascii_space(at(p))) ++p;
        bool strip_inner_start = at(p) == '-';
        if (strip_inner_start) ++p;
        if (s().compare(p, 2, "%}") != 0) return false;
        p += 2;
        size_t body_start = p;
        for (size_t k = s().find("{%", p); k != std::string::npos; k = s().find("{%", k + 1)) {
            size_t q = k + 2;
            bool strip_inner_end = at(q) == '-';
            if (strip_inner_end) ++q;
            while (is_ascii_space(at(q))) ++q;
            if (s().compare(q, 6, "endraw") != 0) continue;
            q += 6;
            while (is_ascii_space(at(q))) ++q;
            bool strip_after = at(q) == '-';
            if (strip_after) ++q;
            if (s().compare(q, 2, "%}") != 0) continue;
            if (strip_before) strip_trailing_whitespace();
            std::string body = s().substr(body_start, k - body_start);
            size_t body_offset = body_start;
            if (strip_inner_start) {
                size_t b = 0;
                while (size_t w = js_space_at(body, b)) b += w;
                body = body.substr(b);
                body_offset += b;
            }
            if (strip_inner_end) body.resize(trimmed_end(body));
            push(body, TokenType::kText, body_offset);
            raw_text_pending = true;
            pos = q + 2;
            if (strip_after) skip_leading_whitespace();
            return true;
        }
        error("Missing {% endraw %} for {% raw %}", pos);
    }
    bool raw_text_pending = false;

    void run() {
        static const std::pair<const char*, TokenType> kTable[] = {
            {"{%", TokenType::kOpenStatement},
            {"%}", TokenType::kCloseStatement},
            {"{{", TokenType::kOpenExpression},
            {"}}", TokenType::kCloseExpression},
            {"(", TokenType::kOpenParen},
            {")", TokenType::kCloseParen},
            {"{", TokenType::kOpenCurlyBracket},
            {"}", TokenType::kCloseCurlyBracket},
            {"[", TokenType::kOpenSquareBracket},
            {"]", TokenType::kCloseSquareBracket},
            {",", TokenType::kComma},
            {".", TokenType::kDot},
            {":", TokenType::kColon},
            {"|", TokenType::kPipe},
            {"<=", TokenType::kComparisonBinaryOperator},
            {">=", TokenType::kComparisonBinaryOperator},
            {"==", TokenType::kComparisonBinaryOperator},
            {"!=", TokenType::kComparisonBinaryOperator},
            {"<", TokenType::kComparisonBinaryOperator},
            {">", TokenType::kComparisonBinaryOperator},
            {"+", TokenType::kAdditiveBinaryOperator},
            {"-", TokenType::kAdditiveBinaryOperator},
            {"~", TokenType::kAdditiveBinaryOperator},
            {"**", TokenType::kExponentiationBinaryOperator},
            {"*", TokenType::kMultiplicativeBinaryOperator},
            {"//", TokenType::kMultiplicativeBinaryOperator},
            {"/", TokenType::kMultiplicativeBinaryOperator},
            {"%", TokenType::kMultiplicativeBinaryOperator},
            {"=", TokenType::kEquals},
        };
        const std::string& t = s();
        while (pos < t.size()) {
            // Text outside tags.
            const Token* lt = last();
            if (!lt || lt->type == TokenType::kCloseStatement || lt->type == TokenType::kCloseExpression ||
                lt->type == TokenType::kComment || raw_text_pending) {
                raw_text_pending = false;
                size_t start = pos;
                while (pos < t.size() &&
                       !(t[pos] == '{' && (at(pos + 1) == '%' || at(pos + 1) == '{' || at(pos + 1) == '#'))) {
                    ++pos;
                }
                if (pos > start) {
                    push(t.substr(start, pos - start), TokenType::kText, start);
                    continue;
                }
            }
            // Comments.
            if (t[pos] == '{' && at(pos + 1) == '#') {
                size_t start = pos;
                pos += 2;
                bool strip_before = at(pos) == '-';
                if (strip_before) ++pos;
                std::string comment;
                while (at(pos) != '#' || at(pos + 1) != '}') {
                    if (pos + 2 >= t.size()) error("Missing end of comment tag", start);
                    comment += t[pos++];
                }
                bool strip_after = !comment.empty() && comment.back() == '-';
                if (strip_after) comment.pop_back();
                if (strip_before) strip_trailing_whitespace();
                push(comment, TokenType::kComment, start);
                pos += 2;
                if (strip_after) skip_leading_whitespace();
                continue;
            }
            if (t[pos] == '{' && at(pos + 1) == '%' && try_raw()) continue;
            if (starts_with("{%-")) {
                strip_trailing_whitespace();
                push("{%", TokenType::kOpenStatement, pos);
                pos += 3;
                continue;
            }
            if (starts_with("{{-")) {
                strip_trailing_whitespace();
                push("{{", TokenType::kOpenExpression, pos);
                curly_depth = 0;
                pos += 3;
                continue;
            }
            skip_leading_whitespace();  // consumeWhile(isWhitespace)
            if (pos >= t.size()) break;
            if (starts_with("-%}")) {
                push("%}", TokenType::kCloseStatement, pos);
                pos += 3;
                skip_leading_whitespace();
                continue;
            }
            if (starts_with("-}}")) {
                push("}}", TokenType::kCloseExpression, pos);
                pos += 3;
                skip_leading_whitespace();
                continue;
            }
            char c = t[pos];
            if (c == '-' || c == '+') {
                const Token* prev = last();
                if (!prev || prev->type == TokenType::kText)
                    error(std::string("Unexpected character: ") + c, pos);
                TokenType pt = prev->type;
                bool binary = pt == TokenType::kIdentifier || pt == TokenType::kNumericLiteral ||
                              pt == TokenType::kStringLiteral || pt == TokenType::kCloseParen ||
                              pt == TokenType::kCloseSquareBracket;
                if (!binary) {
                    size_t start = pos;
                    ++pos;
                    std::string num = consume_digits();
                    if (!num.empty() && at(pos) == '.' && is_digit(at(pos + 1))) {
                        ++pos;
                        num += '.';
                        num += consume_digits();
                    }
                    push(std::string(1, c) + num,
                         num.empty() ? TokenType::kUnaryOperator : TokenType::kNumericLiteral, start);
                    continue;
                }
            }
            bool matched = false;
            for (const auto& [seq, type] : kTable) {
                std::string_view sv(seq);
                if (sv == "}}" && curly_depth > 0) continue;
                if (t.compare(pos, sv.size(), sv) == 0) {
                    push(std::string(sv), type, pos);
                    if (type == TokenType::kOpenExpression) {
                        curly_depth = 0;
                    } else if (type == TokenType::kOpenCurlyBracket) {
                        ++curly_depth;
                    } else if (type == TokenType::kCloseCurlyBracket) {
                        --curly_depth;
                    }
                    pos += sv.size();
                    matched = true;
                    break;
                }
            }
            if (matched) continue;
            if (c == '\'' || c == '"') {
                size_t start = pos;
                ++pos;
                std::string str = consume_string(c);
                push(str, TokenType::kStringLiteral, start);
                ++pos;
                continue;
            }
            if (is_digit(c)) {
                size_t start = pos;
                std::string num = consume_digits();
                bool after_dot = !tokens.empty() && tokens.back().type == TokenType::kDot;
                if (!after_dot && at(pos) == '.' && is_digit(at(pos + 1))) {
                    ++pos;
                    num += '.';
                    num += consume_digits();
                }
                push(num, TokenType::kNumericLiteral, start);
                continue;
            }
            if (is_word(c)) {
                size_t start = pos;
                while (pos < t.size() && is_word(t[pos])) ++pos;
                push(t.substr(start, pos - start), TokenType::kIdentifier, start);
                continue;
            }
            error(std::string("Unexpected character: ") + c, pos);
        }
    }
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
    Lexer lexer;
    lexer.src = preprocess(source);
    lexer.run();
    return std::move(lexer.tokens);
}

void offset_to_line_column(std::string_view source, size_t offset, size_t& line, size_t& column) {
    line = 1;
    column = 1;
    for (size_t i = 0; i < offset && i < source.size(); ++i) {
        if (source[i] == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    }
}

}  // namespace sluice::jinja
