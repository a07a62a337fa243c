// The regular-expression subset of JSON Schema's `pattern`: ECMA-262 syntax and meaning (what ajv
// runs, with the u flag: code points, not UTF-16 units), parsed into a tree and built into an Nfa.
//
// Supported: literals and escapes (\t \n \v \f \r \0 \cX \xHH \uHHHH \u{H…} and escaped
// punctuation), \d \w \s \D \W \S, classes with ranges and negation, `.`, groups (capturing and
// (?:…)), alternation, quantifiers ? * + {n} {n,} {n,m} (lazy forms too: the same language), and
// the anchors ^ and $ (start and end of the whole text: no multiline flag in JSON Schema).
// Refused, with the construct and its offset (kUnsupported): lookaround, backreferences (\1,
// \k<…>), \b and \B, named groups, inline flags, Unicode property escapes (\p{…}), octal escapes,
// `[]` and `[^]` (ECMA-262 and Python read them differently) and a `{` that is not a quantifier.
// Malformed syntax (an unterminated group, nothing to repeat, a range out of order) is
// kInvalidArgument.
//
// Size: build_nfa refuses a tree whose automaton would pass its state limit before making any
// state (nfa_size() multiplies repetitions out, saturating), and the parser refuses nesting deeper
// than kMaxRegexDepth, so `a{1000000}` or 100 000 nested groups cost microseconds, not memory.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "constrain/automaton.h"

namespace sluice::constrain {

constexpr int kMaxRegexDepth = 64;  // nested groups

struct Regex {
    enum class Kind : uint8_t { kEmpty, kChars, kConcat, kAlternation, kRepeat, kTextStart, kTextEnd };
    Kind kind = Kind::kEmpty;
    CharSet chars;              // kChars
    std::vector<Regex> parts;   // kConcat, kAlternation: the operands; kRepeat: the one repeated
    int64_t min = 0, max = -1;  // kRepeat: bounds on the count (max -1: unbounded)

    static Regex of_chars(CharSet set);
    static Regex literal(std::u32string_view text);
    static Regex concat(std::vector<Regex> parts);
    static Regex alternation(std::vector<Regex> parts);
    static Regex repeat(Regex part, int64_t min, int64_t max);
    // `re` matching the whole text: ^(?:re)$.
    static Regex whole_text(Regex re);
};

Expected<Regex> parse_regex(std::string_view pattern);

// The number of NFA states build_nfa makes for `re` (saturating at SIZE_MAX).
size_t nfa_size(const Regex& re);

// The automaton accepting the texts in which `re` matches somewhere (JSON Schema's meaning of
// `pattern`: any prefix and suffix, unless ^ or $ pin them). Fails (kUnsupported) when it would
// pass `max_states`.
Expected<Nfa> build_nfa(const Regex& re, size_t max_states);

// parse_regex → build_nfa → Dfa::from_nfa → minimized, each step bounded by `max_states`.
Expected<Dfa> pattern_dfa(std::string_view pattern, size_t max_states);
Expected<Dfa> regex_dfa(const Regex& re, size_t max_states);

// UTF-8 → code points; false on invalid UTF-8.
bool decode_utf8(std::string_view bytes, std::u32string* out);

}  // namespace sluice::constrain
