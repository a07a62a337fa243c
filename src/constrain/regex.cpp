// The `pattern` regex subset: a recursive-descent parser over code points and a Thompson
// construction (see regex.h for what is supported and refused, and why).
//
// The grammar parsed (ECMA-262 21.2.1, without the refused parts):
//   disjunction := alternative ('|' alternative)*
//   alternative := term*
//   term        := '^' | '$' | atom quantifier?
//   atom        := '.' | '\' escape | class | '(' ('?:')? disjunction ')' | character
//   quantifier  := ('*' | '+' | '?' | '{' n (',' m?)? '}') '?'?
// A lone ']' or '}' is the character itself (as in Python and ECMA-262 without the u flag).
#include "constrain/regex.h"

#include <cstdio>
#include <limits>

namespace sluice::constrain {
namespace {

constexpr int64_t kMaxCount = 1'000'000'000;  // larger repetition counts saturate (then are refused)

CharSet digits() {
    return CharSet::range('0', '9');
}
CharSet word_chars() {
    return CharSet::range('0', '9').add('A', 'Z').add('_', '_').add('a', 'z');
}
// ECMA-262 WhiteSpace and LineTerminator.
CharSet space_chars() {
    CharSet s = CharSet::range('\t', '\r');
    for (uint32_t c : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu})
        s.add(c, c);
    return s.add(0x2000, 0x200A);
}
// `.`: anything but a line terminator.
CharSet dot_chars() {
    return CharSet().add('\n', '\n').add('\r', '\r').add(0x2028, 0x2029).complement();
}

bool is_hex(char32_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
uint32_t hex_value(char32_t c) {
    if (c <= '9') return c - '0';
    return (c | 0x20) - 'a' + 10;
}
bool is_ascii_alnum(char32_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
// A character for a message: itself when printable ASCII, else U+XXXX.
std::string printable(char32_t c) {
    if (c >= 0x20 && c < 0x7F) return std::string(1, static_cast<char>(c));
    char buf[16];
    std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(c));
    return buf;
}

size_t add_sat(size_t a, size_t b) {
    return a > std::numeric_limits<size_t>::max() - b ? std::numeric_limits<size_t>::max() : a + b;
}
size_t mul_sat(size_t a, size_t b) {
    if (a != 0 && b > std::numeric_limits<size_t>::max() / a) return std::numeric_limits<size_t>::max();
    return a * b;
}

class Parser {
 public:
    explicit Parser(std::u32string text) : text_(std::move(text)) {}

    Expected<Regex> parse() {
        SLUICE_ASSIGN_OR_RETURN(Regex re, disjunction());
        if (!eof()) return invalid("unmatched ')'");  // alternative() stops only at '|', ')' or the end
        return re;
    }

 private:
    bool eof() const { return pos_ >= text_.size(); }
    char32_t peek(size_t ahead = 0) const {
        return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : char32_t{0};
    }
    bool looking_at(std::u32string_view s) const {
        return std::u32string_view(text_).substr(pos_).starts_with(s);
    }

    Status invalid(const std::string& what) const {
        return error(ErrorCode::kInvalidArgument, what + " at offset " + std::to_string(pos_));
    }
    Status refused(const std::string& what, size_t at) const {
        return error(ErrorCode::kUnsupported,
                     what + " at offset " + std::to_string(at) + " is not supported");
    }

    Expected<Regex> disjunction() {
        std::vector<Regex> parts;
        SLUICE_ASSIGN_OR_RETURN(Regex first, alternative());
        parts.push_back(std::move(first));
        while (peek() == '|' && !eof()) {
            ++pos_;
            SLUICE_ASSIGN_OR_RETURN(Regex next, alternative());
            parts.push_back(std::move(next));
        }
        return parts.size() == 1 ? std::move(parts[0]) : Regex::alternation(std::move(parts));
    }

    Expected<Regex> alternative() {
        std::vector<Regex> terms;
        while (!eof() && peek() != '|' && peek() != ')') {
            SLUICE_ASSIGN_OR_RETURN(Regex t, term());
            terms.push_back(std::move(t));
        }
        if (terms.empty()) return Regex{};
        return terms.size() == 1 ? std::move(terms[0]) : Regex::concat(std::move(terms));
    }

    Expected<Regex> term() {
        const char32_t c = peek();
        if (c == '^' || c == '$') {
            ++pos_;
            if (starts_quantifier()) return invalid("nothing to repeat (a quantifier after an anchor)");
            Regex r;
            r.kind = c == '^' ? Regex::Kind::kTextStart : Regex::Kind::kTextEnd;
            return r;
        }
        SLUICE_ASSIGN_OR_RETURN(Regex a, atom());
        return quantified(std::move(a));
    }

    // '*', '+', '?' or a well-formed {n}, {n,}, {n,m}.
    bool starts_quantifier() {
        const char32_t c = peek();
        if (c == '*' || c == '+' || c == '?') return true;
        if (c != '{') return false;
        const size_t saved = pos_;
        int64_t n = 0, m = 0;
        const bool ok = brace_quantifier(&n, &m);
        pos_ = saved;
        return ok;
    }

    // Parses {n}, {n,} or {n,m} at pos_ (advancing past it); false, pos_ unspecified, otherwise.
    bool brace_quantifier(int64_t* min, int64_t* max) {
        if (peek() != '{') return false;
        ++pos_;
        auto number = [&](int64_t* out) {
            if (!(peek() >= '0' && peek() <= '9')) return false;
            int64_t v = 0;
            while (peek() >= '0' && peek() <= '9') {
                v = std::min(kMaxCount, v * 10 + static_cast<int64_t>(peek() - '0'));
                ++pos_;
            }
            *out = v;
            return true;
        };
        if (!number(min)) return false;
        *max = *min;
        if (peek() == ',') {
            ++pos_;
            *max = -1;
            if (peek() != '}' && !number(max)) return false;
        }
        if (peek() != '}') return false;
        ++pos_;
        return true;
    }

    Expected<Regex> quantified(Regex atom) {
        const size_t at = pos_;
        int64_t min = 0, max = -1;
        const char32_t c = peek();
        if (c == '*') {
            ++pos_;
        } else if (c == '+') {
            min = 1;
            ++pos_;
        } else if (c == '?') {
            max = 1;
            ++pos_;
        } else if (c == '{') {
            if (!brace_quantifier(&min, &max))
                return refused(
                    "'{' that is not a quantifier {n}, {n,} or {n,m} (write \\{ for the character)", at);
            if (max >= 0 && min > max)
                return invalid("quantifier {" + std::to_string(min) + "," + std::to_string(max) +
                               "} out of order");
        } else {
            return atom;
        }
        if (peek() == '?') ++pos_;  // lazy: the same language
        if (starts_quantifier()) return invalid("nothing to repeat (two quantifiers in a row)");
        return Regex::repeat(std::move(atom), min, max);
    }

    Expected<Regex> atom() {
        const size_t at = pos_;
        const char32_t c = peek();
        switch (c) {
            case '(': return group();
            case '[': {
                SLUICE_ASSIGN_OR_RETURN(CharSet set, char_class());
                return Regex::of_chars(std::move(set));
            }
            case '.': ++pos_; return Regex::of_chars(dot_chars());
            case '\\': {
                SLUICE_ASSIGN_OR_RETURN(CharSet set, escape(false));
                return Regex::of_chars(std::move(set));
            }
            case '*':
            case '+':
            case '?': return invalid("nothing to repeat");
            case '{':
                if (starts_quantifier()) return invalid("nothing to repeat");
                return refused(
                    "'{' that is not a quantifier {n}, {n,} or {n,m} (write \\{ for the character)", at);
            default: ++pos_; return Regex::of_chars(CharSet::single(c));
        }
    }

    Expected<Regex> group() {
        const size_t at = pos_;
        if (++depth_ > kMaxRegexDepth)
            return refused("nesting deeper than " + std::to_string(kMaxRegexDepth) + " levels", at);
        ++pos_;  // '('
        if (peek() == '?') {
            if (looking_at(U"?:")) {
                pos_ += 2;
            } else if (looking_at(U"?=") || looking_at(U"?!")) {
                return refused("lookahead '(?" + printable(peek(1)) + "'", at);
            } else if (looking_at(U"?<=") || looking_at(U"?<!")) {
                return refused("lookbehind '(?<" + printable(peek(2)) + "'", at);
            } else if (looking_at(U"?<") || looking_at(U"?P<")) {
                return refused("named group '(?<name>…)' (use '(…)' or '(?:…)')", at);
            } else {
                return refused("group modifier '(?" + printable(peek(1)) + "' (inline flags)", at);
            }
        }
        SLUICE_ASSIGN_OR_RETURN(Regex inner, disjunction());
        if (peek() != ')' || eof())
            return invalid("unterminated group opened at offset " + std::to_string(at));
        ++pos_;
        --depth_;
        return inner;
    }

    Expected<CharSet> char_class() {
        const size_t at = pos_;
        ++pos_;  // '['
        const bool negate = peek() == '^' && !eof();
        if (negate) ++pos_;
        if (peek() == ']' && !eof()) return refused(negate ? "the class '[^]'" : "the empty class '[]'", at);
        CharSet set;
        for (;;) {
            if (eof()) return invalid("unterminated character class opened at offset " + std::to_string(at));
            if (peek() == ']') {
                ++pos_;
                break;
            }
            SLUICE_ASSIGN_OR_RETURN(CharSet lo, class_atom());
            if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
                ++pos_;
                SLUICE_ASSIGN_OR_RETURN(CharSet hi, class_atom());
                const bool single = lo.ranges().size() == 1 && lo.ranges()[0].lo == lo.ranges()[0].hi &&
                                    hi.ranges().size() == 1 && hi.ranges()[0].lo == hi.ranges()[0].hi;
                if (!single) return refused("a range with a class escape such as \\d as an end", pos_);
                if (lo.ranges()[0].lo > hi.ranges()[0].lo)
                    return invalid("range out of order in character class");
                set.add(lo.ranges()[0].lo, hi.ranges()[0].lo);
            } else {
                set.add(lo);
            }
        }
        return negate ? set.complement() : set;
    }

    Expected<CharSet> class_atom() {
        if (peek() == '\\') return escape(true);
        return CharSet::single(text_[pos_++]);
    }

    // After a backslash: a character or a class escape. `in_class`: \b is backspace there.
    Expected<CharSet> escape(bool in_class) {
        const size_t at = pos_;
        ++pos_;  // '\'
        if (eof()) return invalid("'\\' at the end of the pattern");
        const char32_t c = text_[pos_++];
        switch (c) {
            case 'd': return digits();
            case 'D': return digits().complement();
            case 'w': return word_chars();
            case 'W': return word_chars().complement();
            case 's': return space_chars();
            case 'S': return space_chars().complement();
            case 't': return CharSet::single('\t');
            case 'n': return CharSet::single('\n');
            case 'v': return CharSet::single('\v');
            case 'f': return CharSet::single('\f');
            case 'r': return CharSet::single('\r');
            case 'b':
                if (in_class) return CharSet::single('\b');
                return refused("word boundary '\\b'", at);
            case 'B': return refused("word boundary '\\B'", at);
            case '0':
                if (peek() >= '0' && peek() <= '9')
                    return refused("octal escape '\\0" + printable(peek()) + "'", at);
                return CharSet::single(0);
            case 'k': return refused("named backreference '\\k'", at);
            case 'p':
            case 'P': return refused("Unicode property escape '\\" + printable(c) + "{…}'", at);
            case 'c':
                if ((peek() >= 'a' && peek() <= 'z') || (peek() >= 'A' && peek() <= 'Z'))
                    return CharSet::single(text_[pos_++] % 32);
                return invalid("'\\c' without a letter");
            case 'x': {
                if (!is_hex(peek()) || !is_hex(peek(1))) return invalid("'\\x' without two hex digits");
                const uint32_t v = hex_value(peek()) * 16 + hex_value(peek(1));
                pos_ += 2;
                return CharSet::single(v);
            }
            case 'u': return unicode_escape();
            default: break;
        }
        if (c >= '1' && c <= '9') return refused("backreference '\\" + printable(c) + "'", at);
        if (is_ascii_alnum(c)) return refused("escape '\\" + printable(c) + "'", at);
        return CharSet::single(c);  // escaped punctuation (or any other non-alphanumeric character)
    }

    // After "\u": HHHH (a surrogate pair \uHHHH\uHHHH is one code point, as with the u flag) or {H…}.
    Expected<CharSet> unicode_escape() {
        if (peek() == '{') {
            ++pos_;
            uint32_t v = 0;
            size_t n = 0;
            while (is_hex(peek())) {
                v = v * 16 + hex_value(text_[pos_++]);
                if (v > kMaxCodePoint) return invalid("'\\u{…}' beyond U+10FFFF");
                ++n;
            }
            if (n == 0 || peek() != '}') return invalid("malformed '\\u{…}'");
            ++pos_;
            return CharSet::single(v);
        }
        auto four = [&](uint32_t* out) {
            for (size_t i = 0; i < 4; ++i)
                if (!is_hex(peek(i))) return false;
            *out = 0;
            for (size_t i = 0; i < 4; ++i) *out = *out * 16 + hex_value(text_[pos_++]);
            return true;
        };
        uint32_t v = 0;
        if (!four(&v)) return invalid("'\\u' without four hex digits");
        if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
            const size_t saved = pos_;
            pos_ += 2;
            uint32_t low = 0;
            if (four(&low) && low >= 0xDC00 && low <= 0xDFFF)
                return CharSet::single(0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00));
            pos_ = saved;
        }
        return CharSet::single(v);
    }

    std::u32string text_;
    size_t pos_ = 0;
    int depth_ = 0;
};

// Adds arcs from `from` to `to` spelling `re`. Loops always go through fresh states, never through
// `from` or `to`, which alternatives share.
void build(const Regex& re, uint32_t from, uint32_t to, Nfa* nfa) {
    switch (re.kind) {
        case Regex::Kind::kEmpty: nfa->add_arc(from, Nfa::Edge::kEpsilon, to); return;
        case Regex::Kind::kTextStart: nfa->add_arc(from, Nfa::Edge::kTextStart, to); return;
        case Regex::Kind::kTextEnd: nfa->add_arc(from, Nfa::Edge::kTextEnd, to); return;
        case Regex::Kind::kChars: nfa->add_chars(from, re.chars, to); return;
        case Regex::Kind::kAlternation:
            for (const Regex& p : re.parts) build(p, from, to, nfa);
            return;
        case Regex::Kind::kConcat: {
            uint32_t cur = from;
            for (size_t i = 0; i < re.parts.size(); ++i) {
                const uint32_t next = i + 1 == re.parts.size() ? to : nfa->add_state();
                build(re.parts[i], cur, next, nfa);
                cur = next;
            }
            return;
        }
        case Regex::Kind::kRepeat: {
            const Regex& part = re.parts[0];
            uint32_t cur = from;
            for (int64_t i = 0; i < re.min; ++i) {
                const uint32_t next = nfa->add_state();
                build(part, cur, next, nfa);
                cur = next;
            }
            if (re.max < 0) {
                const uint32_t loop = nfa->add_state();
                nfa->add_arc(cur, Nfa::Edge::kEpsilon, loop);
                build(part, loop, loop, nfa);
                nfa->add_arc(loop, Nfa::Edge::kEpsilon, to);
                return;
            }
            // Optional copies nested rather than in a row ((x(x)?)? rather than x?x?), so that a
            // text has one path and subsets stay small.
            for (int64_t i = re.min; i < re.max; ++i) {
                nfa->add_arc(cur, Nfa::Edge::kEpsilon, to);
                const uint32_t next = nfa->add_state();
                build(part, cur, next, nfa);
                cur = next;
            }
            nfa->add_arc(cur, Nfa::Edge::kEpsilon, to);
            return;
        }
    }
}

}  // namespace

Regex Regex::of_chars(CharSet set) {
    Regex r;
    r.kind = Kind::kChars;
    r.chars = std::move(set);
    return r;
}

Regex Regex::literal(std::u32string_view text) {
    std::vector<Regex> parts;
    for (char32_t c : text) parts.push_back(of_chars(CharSet::single(c)));
    if (parts.empty()) return Regex{};
    return parts.size() == 1 ? std::move(parts[0]) : concat(std::move(parts));
}

Regex Regex::concat(std::vector<Regex> parts) {
    Regex r;
    r.kind = Kind::kConcat;
    r.parts = std::move(parts);
    return r;
}

Regex Regex::alternation(std::vector<Regex> parts) {
    Regex r;
    r.kind = Kind::kAlternation;
    r.parts = std::move(parts);
    return r;
}

Regex Regex::repeat(Regex part, int64_t min, int64_t max) {
    Regex r;
    r.kind = Kind::kRepeat;
    r.parts.push_back(std::move(part));
    r.min = min;
    r.max = max;
    return r;
}

Regex Regex::whole_text(Regex re) {
    Regex start, end;
    start.kind = Kind::kTextStart;
    end.kind = Kind::kTextEnd;
    std::vector<Regex> parts;
    parts.push_back(std::move(start));
    parts.push_back(std::move(re));
    parts.push_back(std::move(end));
    return concat(std::move(parts));
}

bool decode_utf8(std::string_view bytes, std::u32string* out) {
    out->clear();
    for (size_t i = 0; i < bytes.size();) {
        const auto b0 = static_cast<uint8_t>(bytes[i]);
        size_t n = 0;
        uint32_t cp = 0;
        if (b0 < 0x80) {
            n = 1;
            cp = b0;
        } else if (b0 >= 0xC2 && b0 <= 0xDF) {
            n = 2;
            cp = b0 & 0x1F;
        } else if (b0 >= 0xE0 && b0 <= 0xEF) {
            n = 3;
            cp = b0 & 0x0F;
        } else if (b0 >= 0xF0 && b0 <= 0xF4) {
            n = 4;
            cp = b0 & 0x07;
        } else {
            return false;
        }
        if (i + n > bytes.size()) return false;
        for (size_t k = 1; k < n; ++k) {
            const auto b = static_cast<uint8_t>(bytes[i + k]);
            if ((b & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (b & 0x3F);
        }
        const uint32_t min_for_length[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_for_length[n] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        out->push_back(static_cast<char32_t>(cp));
        i += n;
    }
    return true;
}

Expected<Regex> parse_regex(std::string_view pattern) {
    std::u32string text;
    if (!decode_utf8(pattern, &text)) return error(ErrorCode::kInvalidArgument, "invalid UTF-8");
    return Parser(std::move(text)).parse();
}

size_t nfa_size(const Regex& re) {
    switch (re.kind) {
        case Regex::Kind::kEmpty:
        case Regex::Kind::kTextStart:
        case Regex::Kind::kTextEnd:
        case Regex::Kind::kChars: return 0;
        case Regex::Kind::kAlternation: {
            size_t n = 0;
            for (const Regex& p : re.parts) n = add_sat(n, nfa_size(p));
            return n;
        }
        case Regex::Kind::kConcat: {
            size_t n = re.parts.size() - 1;
            for (const Regex& p : re.parts) n = add_sat(n, nfa_size(p));
            return n;
        }
        case Regex::Kind::kRepeat: {
            const size_t copy = add_sat(nfa_size(re.parts[0]), 1);
            const auto copies = static_cast<size_t>(re.max < 0 ? re.min + 1 : re.max);
            return mul_sat(copy, copies);
        }
    }
    return 0;
}

Expected<Nfa> build_nfa(const Regex& re, size_t max_states) {
    if (add_sat(nfa_size(re), 2) > max_states)
        return error(ErrorCode::kUnsupported, "its automaton would pass " + std::to_string(max_states) +
                                                  " states (repetitions are expanded: {n,m} makes m copies)");
    Nfa nfa;
    nfa.start = nfa.add_state();
    nfa.final = nfa.add_state();
    // Unanchored: any text before and after a match. ^ and $ inside `re` still pin it to the ends.
    nfa.add_chars(nfa.start, CharSet::all(), nfa.start);
    nfa.add_chars(nfa.final, CharSet::all(), nfa.final);
    build(re, nfa.start, nfa.final, &nfa);
    return nfa;
}

Expected<Dfa> regex_dfa(const Regex& re, size_t max_states) {
    SLUICE_ASSIGN_OR_RETURN(Nfa nfa, build_nfa(re, max_states));
    SLUICE_ASSIGN_OR_RETURN(Dfa dfa, Dfa::from_nfa(nfa, max_states));
    return dfa.minimized();
}

Expected<Dfa> pattern_dfa(std::string_view pattern, size_t max_states) {
    SLUICE_ASSIGN_OR_RETURN(Regex re, parse_regex(pattern));
    return regex_dfa(re, max_states);
}

}  // namespace sluice::constrain
