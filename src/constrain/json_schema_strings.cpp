// Strings (minLength, maxLength, pattern, format) and the writer that turns an automaton over code
// points into grammar rules (JsonSchemaCompiler, see json_schema_compiler.h).
//
// A string with neither pattern nor format is the shared any-character rule with a length counter
// (string_rule). With either, its value is a language of an automaton (automaton.h): the pattern's
// (unanchored, JSON Schema's meaning: `ab` matches "xaby"), the format's (a regex below, anchored),
// or their intersection, so zod's `format` + `pattern` pairs are both enforced exactly.
//
// Writing an automaton out: one rule per (state, length so far); a rule's alternatives are its
// transitions, grouped by target state, each code point set written as its encodings. The
// automaton is deterministic, so a text has one parse stack: the mask walk stays as cheap as for
// a plain string. The length counter multiplies the states, up to maxLength (or up to minLength,
// where it then stays); dropped where the automaton already implies the bound. Past
// kMaxAutomatonStates a long maxLength is lowered to fit — the grammar then writes shorter
// strings, which still satisfy it (pydantic's HttpUrl has maxLength 2083: the 14 states of format
// uri would need 29 k rules; it gets URIs of up to 1169 characters).
//
// Encodings inside a JSON string: code points from U+0020 as raw UTF-8, except '"' and '\' which
// are escaped (\" and \\); control characters as \u00XX or, where one exists, a short escape
// (\b \t \n \f \r). A \u escape of any other character is not generated: the decoded language is
// the automaton's, exactly; only the ways of spelling it are fewer. The one exception is a guard
// (GrammarBuilder::guard_json_strings, e.g. "</tool_call>" in a forced call): the character that
// would complete a raw spelling of it is written as its \u escape, tracked by one more number per
// state, how many of the guard's first bytes the text ends with.
#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "constrain/json_schema_compiler.h"
#include "constrain/regex.h"
#include "core/assert.h"

namespace sluice {

using constrain::CharSet;
using constrain::Dfa;
using schema_grammar::B;
using schema_grammar::cat;
using schema_grammar::L;
using schema_grammar::R;
using schema_grammar::S;
using Symbol = GrammarBuilder::Symbol;
using RuleId = GrammarBuilder::RuleId;
using Sequence = GrammarBuilder::Sequence;
using ojson = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxInlineEncodings = 4;

// ---- formats ----
// Each format as a regex of the `pattern` subset, matched against the whole string. Each language
// is a subset of what ajv-formats (full mode, the default) accepts, so a generated string always
// validates; docs/SERVER.md lists what each leaves out.

std::string ipv6_regex() {
    // Eight groups, or "::" standing for one or more zero groups with i groups before it and at
    // most 7 - i after (RFC 4291 2.2 forms 1 and 2; the embedded IPv4 form is not generated).
    const std::string h = "[0-9a-fA-F]{1,4}";
    std::string re = "(?:" + h + ":){7}" + h;
    for (int before = 0; before <= 7; ++before) {
        re += "|";
        if (before > 0) re += "(?:" + h + ":){" + std::to_string(before - 1) + "}" + h;
        re += "::";
        if (before < 7) re += "(?:" + h + "(?::" + h + "){0," + std::to_string(6 - before) + "})?";
    }
    return re;
}

std::string format_regex(const std::string& format) {
    // RFC 3339 full-date with the real calendar: Feb 29 only in leap years (divisible by 4, and
    // centuries only when divisible by 400).
    static const std::string kDate =
        "(?:\\d\\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29"
        "|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)"
        "|02-(?:0[1-9]|1\\d|2[0-8]))";
    // RFC 3339 full-time: seconds always, 1-9 fraction digits, a zone always (ajv-formats'
    // time and date-time require one); no leap second 60.
    static const std::string kTime =
        "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,9})?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)";
    // LDH labels without a hyphen at either end: 1-4 labels of 1-62 characters, so at most 251
    // characters in all (RFC 1123 allows labels of 63 and names of 253).
    static const std::string kLabel = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,60}[A-Za-z0-9])?";
    // RFC 3986 pchar: unreserved, sub-delims, ':', '@' or a percent-encoded octet.
    static const std::string kPchar = "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})";
    static const std::string kOctet = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
    if (format == "date") return kDate;
    if (format == "time") return kTime;
    if (format == "date-time") return "(?:" + kDate + ")T" + kTime;
    if (format == "uuid") return "[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}";
    if (format == "ipv4") return "(?:" + kOctet + "\\.){3}" + kOctet;
    if (format == "ipv6") return ipv6_regex();
    if (format == "hostname") return kLabel + "(?:\\." + kLabel + "){0,3}";
    // A dot-atom local part of common characters; a domain of LDH labels ending in a top-level
    // label of 2+ letters.
    if (format == "email")
        return "[A-Za-z0-9_%+-]+(?:\\.[A-Za-z0-9_%+-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\\.)+"
               "[A-Za-z]{2,}";
    // An absolute URI: scheme ':' then either '//' host (:port) path, or a rootless path; then
    // ?query and #fragment (RFC 3986 3; no IP literals, no user info).
    if (format == "uri")
        return "[A-Za-z][A-Za-z0-9+.-]*:(?://(?:[A-Za-z0-9._~!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*(?::\\d*)?(?:/" +
               kPchar + "*)*|" + kPchar + "+(?:/" + kPchar + "*)*)(?:\\?(?:" + kPchar +
               "|[/?])*)?(?:#(?:" + kPchar + "|[/?])*)?";
    return "";
}

// ---- encodings ----

void encode_utf8(uint32_t cp, int n, uint8_t* out) {
    if (n == 1) {
        out[0] = static_cast<uint8_t>(cp);
        return;
    }
    static constexpr uint8_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int i = n - 1; i > 0; --i) {
        out[i] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    out[0] = static_cast<uint8_t>(kLead[n] | cp);
}

// [lo, hi], all of one encoded length n, split until each piece is a product of byte ranges (the
// construction of RE2's and Go's UTF-8 ranges).
void utf8_split(uint32_t lo, uint32_t hi, int n, std::vector<Sequence>* out) {
    for (int i = 1; i < n; ++i) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(lo, lo | m, n, out);
                utf8_split((lo | m) + 1, hi, n, out);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(lo, (hi & ~m) - 1, n, out);
                utf8_split(hi & ~m, hi, n, out);
                return;
            }
        }
    }
    uint8_t a[4], b[4];
    encode_utf8(lo, n, a);
    encode_utf8(hi, n, b);
    Sequence seq;
    for (int i = 0; i < n; ++i) seq.push_back(R(a[i], b[i]));
    out->push_back(std::move(seq));
}

// The UTF-8 byte sequences of the code points of `set` (surrogates never included). The
// one-byte ones are merged into a single byte set.
std::vector<Sequence> utf8_sequences(const CharSet& set) {
    static const CharSet kScalars = CharSet::range(0, 0xD7FF).add(0xE000, constrain::kMaxCodePoint);
    std::vector<Sequence> out;
    Symbol ascii;
    bool any_ascii = false;
    const CharSet scalars = set.intersect(kScalars);
    for (const CharSet::Range& r : scalars.ranges()) {
        static constexpr uint32_t kLast[] = {0x7F, 0x7FF, 0xFFFF, constrain::kMaxCodePoint};
        for (int n = 1; n <= 4; ++n) {
            const uint32_t first = n == 1 ? 0 : kLast[n - 2] + 1;
            const uint32_t lo = std::max(r.lo, first), hi = std::min(r.hi, kLast[n - 1]);
            if (lo > hi) continue;
            if (n == 1) {
                ascii.add_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
                any_ascii = true;
            } else {
                utf8_split(lo, hi, n, &out);
            }
        }
    }
    if (any_ascii) out.insert(out.begin(), Sequence{ascii});
    return out;
}

// The ways to write a code point of `set` inside a JSON string (see the file comment).
std::vector<Sequence> json_string_sequences(const CharSet& set) {
    static const CharSet kRaw =
        CharSet::range(0x20, '"' - 1).add('"' + 1, '\\' - 1).add('\\' + 1, constrain::kMaxCodePoint);
    std::vector<Sequence> out = utf8_sequences(set.intersect(kRaw));
    if (set.contains('"')) out.push_back(L("\\\""));
    if (set.contains('\\')) out.push_back(L("\\\\"));
    for (uint32_t c = 0; c < 0x20; ++c) {
        if (!set.contains(c)) continue;
        const char* short_escape = c == '\b'   ? "\\b"
                                   : c == '\t' ? "\\t"
                                   : c == '\n' ? "\\n"
                                   : c == '\f' ? "\\f"
                                   : c == '\r' ? "\\r"
                                               : nullptr;
        if (short_escape) out.push_back(L(short_escape));
        const uint32_t low = c & 15;
        const Symbol low_digit = low < 10 ? B(static_cast<char>('0' + low))
                                          : Symbol::byte_range(static_cast<uint8_t>('a' + low - 10),
                                                               static_cast<uint8_t>('a' + low - 10))
                                                .add_range(static_cast<uint8_t>('A' + low - 10),
                                                           static_cast<uint8_t>('A' + low - 10));
        out.push_back(cat({L("\\u00"), {B(static_cast<char>('0' + (c >> 4))), low_digit}}));
    }
    return out;
}

std::string quoted(const std::string& text) {
    const std::string q = ojson(text).dump();
    return q.size() <= 80 ? q : q.substr(0, 77) + "...";
}

}  // namespace

bool is_string_format(const std::string& format) {
    return !format_regex(format).empty();
}

Expected<Dfa> JsonSchemaCompiler::format_automaton(const std::string& format, const std::string& path) {
    if (auto it = formats_.find(format); it != formats_.end()) return it->second;
    const std::string re = format_regex(format);
    if (re.empty())
        return unsupported(
            path, "format",
            "'" + format + "'; supported: date, time, date-time, uuid, email, uri, hostname, ipv4, ipv6");
    auto dfa = constrain::pattern_dfa("^(?:" + re + ")$", kMaxAutomatonStates);
    if (!dfa) return automaton_error(path, "format", "'" + format + "'", dfa.status());
    return formats_.emplace(format, std::move(*dfa)).first->second;
}

Expected<Dfa> JsonSchemaCompiler::pattern_automaton(const ojson& pattern, const std::string& path,
                                                    const std::string& keyword) {
    if (!pattern.is_string())
        return fail(path, "'" + keyword + "' must be a string, got " + pattern.dump().substr(0, 64));
    const std::string text = pattern.get<std::string>();
    auto dfa = constrain::pattern_dfa(text, kMaxAutomatonStates);
    if (!dfa) return automaton_error(path, keyword, quoted(text), dfa.status());
    return std::move(*dfa);
}

Expected<JsonSchemaCompiler::StringLanguage> JsonSchemaCompiler::string_language(const ojson& s,
                                                                                 const std::string& path) {
    StringLanguage lang;
    SLUICE_ASSIGN_OR_RETURN(lang.min_length, count(s, path, "minLength", 0));
    SLUICE_ASSIGN_OR_RETURN(lang.max_length, count(s, path, "maxLength", -1));
    if (lang.max_length >= 0 && lang.min_length > lang.max_length)
        return fail(path, "minLength " + std::to_string(lang.min_length) + " > maxLength " +
                              std::to_string(lang.max_length));
    if (auto it = s.find("format"); it != s.end()) {
        if (!it->is_string()) return fail(path, "'format' must be a string");
        SLUICE_ASSIGN_OR_RETURN(Dfa f, format_automaton(it->get<std::string>(), path));
        lang.dfa = std::move(f);
    }
    if (auto it = s.find("pattern"); it != s.end()) {
        SLUICE_ASSIGN_OR_RETURN(Dfa p, pattern_automaton(*it, path, "pattern"));
        if (lang.dfa) {
            auto both = Dfa::combine(*lang.dfa, p, Dfa::Op::kAnd, kMaxAutomatonStates);
            if (!both) return automaton_error(path, "pattern", "together with 'format'", both.status());
            p = both->minimized();
            if (p.empty()) return fail(path, "no string matches both 'pattern' and 'format'");
        }
        lang.dfa = std::move(p);
    }
    return lang;
}

Expected<RuleId> JsonSchemaCompiler::compile_string(const ojson& s, const std::string& path) {
    if (!s.contains("pattern") && !s.contains("format")) {
        SLUICE_ASSIGN_OR_RETURN(StringLanguage lang, string_language(s, path));
        return string_rule(lang.min_length, lang.max_length);
    }
    // Equal string schemas (the same pattern in every item of a list, in several tools) share rules.
    std::string name = "re";
    for (const char* key : {"format", "pattern", "minLength", "maxLength"})
        name += "\x1f" + (s.contains(key) ? s.at(key).dump() : "");
    if (auto r = find_shared(name)) return *r;
    SLUICE_ASSIGN_OR_RETURN(StringLanguage lang, string_language(s, path));
    SLUICE_ASSIGN_OR_RETURN(RuleId r, string_of(lang, path, s.contains("pattern") ? "pattern" : "format"));
    b_.shared_rules_[name] = r;
    return r;
}

Expected<RuleId> JsonSchemaCompiler::string_of(const StringLanguage& lang, const std::string& path,
                                               const std::string& keyword, bool json_string) {
    int64_t min = lang.min_length, max = lang.max_length;
    SLUICE_ASSERT(lang.dfa || json_string);
    if (!lang.dfa) return string_rule(min, max);
    const Dfa& dfa = *lang.dfa;
    const int64_t shortest = dfa.shortest_length(), longest = dfa.longest_length();
    if (shortest < 0) return fail(path, "no string satisfies '" + keyword + "'");
    if (max >= 0 && max < shortest)
        return fail(path, "no string of at most " + std::to_string(max) + " characters satisfies '" +
                              keyword + "' (the shortest has " + std::to_string(shortest) + ")");
    if (longest >= 0 && min > longest)
        return fail(path, "no string of at least " + std::to_string(min) + " characters satisfies '" +
                              keyword + "' (the longest has " + std::to_string(longest) + ")");
    if (min <= shortest) min = 0;                              // implied by the automaton
    if (max >= 0 && longest >= 0 && longest <= max) max = -1;  // implied too
    const auto states = static_cast<int64_t>(dfa.state_count());
    const int64_t layers = (max >= 0 ? max : min) + 1;
    if (states * layers > static_cast<int64_t>(kMaxAutomatonStates)) {
        const int64_t fit = static_cast<int64_t>(kMaxAutomatonStates) / states - 1;
        if (max < 0 || fit < std::max(min, shortest))
            return unsupported(path, max < 0 ? "minLength" : "maxLength",
                               "with '" + keyword + "': its automaton of " + std::to_string(states) +
                                   " states times the length counter passes " +
                                   std::to_string(kMaxAutomatonStates) + " states");
        max = fit;
    }
    return emit_automaton(dfa, min, max, json_string, path, keyword);
}

Expected<RuleId> JsonSchemaCompiler::emit_automaton(const Dfa& dfa, int64_t min, int64_t max,
                                                    bool json_string, const std::string& path,
                                                    const std::string& keyword) {
    // The encodings of each distinct code point set, made once: a set of many encodings (`.`: UTF-8
    // lengths, control escapes) becomes one shared rule referenced from every state — a frame more
    // per character in the walk, but 2 alternatives per state instead of ~45. Small sets stay inline.
    std::map<std::string, std::vector<Sequence>> encodings_of;
    auto encodings = [&](const CharSet& set) -> const std::vector<Sequence>& {
        std::string name = json_string ? "jchars:" : "chars:";
        for (const CharSet::Range& range : set.ranges())
            name += std::to_string(range.lo) + "-" + std::to_string(range.hi) + ",";
        auto [it, fresh] = encodings_of.emplace(name, std::vector<Sequence>());
        if (!fresh) return it->second;
        std::vector<Sequence> all = json_string ? json_string_sequences(set) : utf8_sequences(set);
        if (all.size() > kMaxInlineEncodings) {
            const RuleId chars = shared(name, [&](RuleId self) {
                for (Sequence& e : all) b_.add_alternative(self, std::move(e));
                return self;
            });
            all = {{S(chars)}};
        }
        it->second = std::move(all);
        return it->second;
    };
    // Each state's transitions, grouped by target.
    const size_t n = dfa.state_count();
    std::vector<std::vector<std::pair<int32_t, CharSet>>> groups(n);
    for (size_t q = 0; q < n; ++q) {
        auto& by_target = groups[q];
        for (size_t c = 0; c < dfa.class_count(); ++c) {
            const int32_t t = dfa.next(static_cast<int32_t>(q), c);
            if (t == Dfa::kDead) continue;
            auto group =
                std::find_if(by_target.begin(), by_target.end(), [&](const auto& g) { return g.first == t; });
            if (group == by_target.end()) group = by_target.insert(by_target.end(), {t, CharSet()});
            group->second.add(dfa.class_set(c));
        }
    }
    // Under a guard G (GrammarBuilder::guard_json_strings, JSON strings only) a state is also the
    // number m of G's first bytes the text ends with, as in guarded_string_rule: G[m] leads to m + 1,
    // the last one written as its \u escape instead (back to 0), G[0] to 1, other characters to 0.
    const std::string no_guard;
    const std::string& g = json_string ? guard() : no_guard;
    const int64_t spelled = g.empty() ? 1 : static_cast<int64_t>(g.size());
    struct Move {
        int32_t target;
        int64_t matched;  // of the guard, after the move
        std::vector<Sequence> ways;
    };
    std::map<int64_t, std::vector<Move>> moves;  // (state, matched) → moves, made on first use
    auto moves_of = [&](int32_t q, int64_t m) -> const std::vector<Move>& {
        auto [it, fresh] = moves.emplace(static_cast<int64_t>(q) * spelled + m, std::vector<Move>());
        if (!fresh) return it->second;
        for (const auto& [t, set] : groups[static_cast<size_t>(q)]) {
            CharSet rest = set;
            if (!g.empty()) {
                const auto next = static_cast<uint32_t>(static_cast<uint8_t>(g[static_cast<size_t>(m)]));
                const auto open = static_cast<uint32_t>(static_cast<uint8_t>(g[0]));
                if (set.contains(next)) {
                    if (m + 1 < spelled)
                        it->second.push_back({t, m + 1, {L(std::string(1, g[static_cast<size_t>(m)]))}});
                    else
                        it->second.push_back({t, 0, {L(json_escape(g.back()))}});
                }
                if (m > 0 && set.contains(open)) it->second.push_back({t, 1, {L(std::string(1, g[0]))}});
                rest = rest.intersect(CharSet::single(next).add(open, open).complement());
            }
            if (const std::vector<Sequence>& e = encodings(rest); !e.empty()) it->second.push_back({t, 0, e});
        }
        return it->second;
    };
    // Rules by (state, length so far, guard matched); the length saturates at min when there is no max.
    const int64_t layers = (max >= 0 ? max : min) + 1;
    std::unordered_map<int64_t, RuleId> rules;
    std::vector<std::tuple<int32_t, int64_t, int64_t>> queue;
    // The guard's match states count 1/|G| each against the limits: a spelling of G is rare in a
    // text, and such a state has 3 alternatives (so a pattern of '.' keeps its maxLength).
    int64_t inside_guard = 0;
    auto counted = [&] {
        return static_cast<int64_t>(queue.size()) - inside_guard + (inside_guard + spelled - 1) / spelled;
    };
    auto key = [&](int32_t q, int64_t k, int64_t m) {
        return (static_cast<int64_t>(q) * layers + k) * spelled + m;
    };
    auto rule_of = [&](int32_t q, int64_t k, int64_t m) {
        auto [it, fresh] = rules.emplace(key(q, k, m), 0);
        if (fresh) {
            it->second = b_.add_rule();
            queue.emplace_back(q, k, m);
            inside_guard += m > 0 ? 1 : 0;
        }
        return it->second;
    };
    const RuleId start = rule_of(0, 0, 0);
    for (size_t i = 0; i < queue.size(); ++i) {
        if (counted() > static_cast<int64_t>(kMaxAutomatonStates))
            return unsupported(path, keyword,
                               "its automaton times the length counter passes " +
                                   std::to_string(kMaxAutomatonStates) + " states");
        const auto [q, k, m] = queue[i];
        const RuleId r = rules.at(key(q, k, m));
        if (dfa.accepting(q) && k >= min) b_.add_alternative(r, json_string ? L("\"") : Sequence{});
        if (max >= 0 && k >= max) continue;
        const int64_t k_next = max >= 0 ? k + 1 : std::min(k + 1, min);
        for (const Move& move : moves_of(q, m)) {
            const RuleId next = rule_of(move.target, k_next, move.matched);
            for (const Sequence& e : move.ways) b_.add_alternative(r, cat({e, {S(next)}}));
        }
    }
    automaton_states_ += counted();
    if (automaton_states_ > kMaxSchemaAutomatonStates)
        return unsupported(path, keyword,
                           "the schema's patterns, formats, property names and multipleOf need more than " +
                               std::to_string(kMaxSchemaAutomatonStates) + " automaton states in all");
    const RuleId self = b_.add_rule();
    b_.add_alternative(self, json_string ? Sequence{B('"'), S(start)} : Sequence{S(start)});
    return self;
}

}  // namespace sluice
