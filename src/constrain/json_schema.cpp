// JSON Schema → grammar (GrammarBuilder::add_json_schema, see sluice/constrain.h): dispatch,
// $ref, enum/const, numbers, arrays and the shared helper rules. Strings are in
// json_schema_strings.cpp, objects in json_schema_objects.cpp.
//
// The grammar derives a SUBSET of the texts a schema accepts, chosen so that every text it
// derives validates (soundness) and a model can still say what it needs:
// - objects list their `properties` in declaration order (required ones always, optional ones
//   when the model chooses), then extra keys: those `patternProperties` or an
//   `additionalProperties` schema describe (json_schema_objects.cpp has the details).
// - numbers: integers have at most 15 digits, numbers at most 15+15 digits and a 2-digit
//   exponent, so every value is finite in a double (ajv/JS refuse Infinity) and a model cannot
//   write digits forever. minimum/maximum/exclusive* bound integers exactly (digit-range rules);
//   a bounded number is an in-range integer or a non-negative integer part ip with ip + 1 within
//   range followed by a fraction (no exponent; negative non-integers are not generated). An
//   integer multipleOf m (m <= 1000) is exact: the decimal digits run through an automaton of
//   their value modulo m, intersected with the range; with it, numbers are integers.
// - strings: valid UTF-8; escapes except \u surrogates (a pair would count as 2 characters here
//   but 1 for minLength/maxLength). `pattern` and `format` are automata over code points.
// - arrays: `items`, tuples (`prefixItems` + `items`, or the draft-7 `items: [...]` +
//   `additionalItems`), minItems/maxItems.
// - whitespace: between tokens nothing, one space, or a newline and up to 16 spaces of indentation;
//   none before or after the value.
// - oneOf is compiled like anyOf: sound when the branches are disjoint (the usual discriminated
//   unions); a text matching two overlapping branches would fail oneOf.
// Anything else a schema says is either supported exactly or refused with an error naming the
// keyword (not, if, uniqueItems, ...): a constraint is never dropped silently.
//
// Rejected alternative: compiling `pattern` through PCRE2 — its regexes are not regular in
// general and mapping them to a byte automaton is a project of its own; regex.cpp parses the
// regular subset itself.
#include <algorithm>
#include <cmath>

#include "constrain/json_schema_compiler.h"
#include "constrain/regex.h"

namespace sluice {

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

constexpr int kMaxIndent = 16;  // spaces after a newline between tokens

bool type_matches(const ojson& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "string") return v.is_string();
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "number") return v.is_number();
    if (t == "integer")
        return v.is_number_integer() ||
               (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
    return false;
}
const std::set<std::string>& type_names() {
    static const std::set<std::string> k = {"null",  "boolean", "string", "object",
                                            "array", "number",  "integer"};
    return k;
}
// The keywords of a typed schema, with the kind of value each one constrains (a schema without
// `type` generates the kinds its keywords name).
const std::map<std::string, std::string>& typed_keywords() {
    static const std::map<std::string, std::string> k = {
        {"type", ""},
        {"properties", "object"},
        {"required", "object"},
        {"additionalProperties", "object"},
        {"patternProperties", "object"},
        {"propertyNames", "object"},
        {"minProperties", "object"},
        {"maxProperties", "object"},
        {"items", "array"},
        {"prefixItems", "array"},
        {"additionalItems", "array"},
        {"minItems", "array"},
        {"maxItems", "array"},
        {"uniqueItems", "array"},
        {"minLength", "string"},
        {"maxLength", "string"},
        {"pattern", "string"},
        {"format", "string"},
        {"minimum", "number"},
        {"maximum", "number"},
        {"exclusiveMinimum", "number"},
        {"exclusiveMaximum", "number"},
        {"multipleOf", "number"},
    };
    return k;
}

// Decimal numerals of one length between a and b inclusive: the split of digit_range() (the rules
// plain bounds use, sub-ranges shared between schemas), as a regex for the multipleOf automaton.
constrain::Regex digit_range_regex(const std::string& a, const std::string& b) {
    using constrain::CharSet;
    using constrain::Regex;
    const size_t n = a.size();
    if (n == 0) return Regex{};
    const Regex any_rest = Regex::repeat(Regex::of_chars(CharSet::range('0', '9')),
                                         static_cast<int64_t>(n - 1), static_cast<int64_t>(n - 1));
    const std::string a1 = a.substr(1), b1 = b.substr(1), zeros(n - 1, '0'), nines(n - 1, '9');
    auto digit = [](char lo, char hi) {
        return Regex::of_chars(CharSet::range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)));
    };
    if (a[0] == b[0]) return Regex::concat({digit(a[0], a[0]), digit_range_regex(a1, b1)});
    if (a1 == zeros && b1 == nines) return Regex::concat({digit(a[0], b[0]), any_rest});
    std::vector<Regex> alts;
    alts.push_back(Regex::concat({digit(a[0], a[0]), digit_range_regex(a1, nines)}));
    if (a[0] + 1 <= b[0] - 1)
        alts.push_back(
            Regex::concat({digit(static_cast<char>(a[0] + 1), static_cast<char>(b[0] - 1)), any_rest}));
    alts.push_back(Regex::concat({digit(b[0], b[0]), digit_range_regex(zeros, b1)}));
    return Regex::alternation(std::move(alts));
}

// Decimal numerals of the integers in [lo, hi] (0 <= lo <= hi), without leading zeros.
constrain::Regex natural_range_regex(int64_t lo, int64_t hi) {
    const size_t lo_len = std::to_string(lo).size(), hi_len = std::to_string(hi).size();
    std::vector<constrain::Regex> alts;
    int64_t pow10 = 1;
    for (size_t n = 1; n < lo_len; ++n) pow10 *= 10;
    for (size_t n = lo_len; n <= hi_len; ++n, pow10 *= 10) {
        const int64_t lower = n == lo_len ? lo : pow10;           // pow10 = 10^(n-1)
        const int64_t upper = n == hi_len ? hi : pow10 * 10 - 1;  // 10^n - 1
        alts.push_back(digit_range_regex(std::to_string(lower), std::to_string(upper)));
    }
    return alts.size() == 1 ? std::move(alts[0]) : constrain::Regex::alternation(std::move(alts));
}

}  // namespace

const std::set<std::string>& annotation_keywords() {
    static const std::set<std::string> k = {"title",    "description", "default",  "examples",
                                            "$schema",  "$id",         "$comment", "deprecated",
                                            "readOnly", "writeOnly",   "$defs",    "definitions"};
    return k;
}

bool constrains_nothing(const ojson& schema) {
    if (schema.is_boolean()) return schema.get<bool>();
    if (!schema.is_object()) return false;
    return std::all_of(schema.items().begin(), schema.items().end(),
                       [](const auto& item) { return annotation_keywords().count(item.key()) > 0; });
}

// ---- helpers ----

RuleId JsonSchemaCompiler::shared(const std::string& name, const std::function<RuleId(RuleId)>& make) {
    auto it = b_.shared_rules_.find(name);
    if (it != b_.shared_rules_.end()) return it->second;
    const RuleId self = b_.add_rule();
    b_.shared_rules_[name] = self;  // before make(): recursive helpers (any) find themselves
    const RuleId r = make(self);
    if (r != self) b_.add_alternative(self, {S(r)});
    return self;
}

std::optional<RuleId> JsonSchemaCompiler::find_shared(const std::string& name) const {
    auto it = b_.shared_rules_.find(name);
    if (it == b_.shared_rules_.end()) return std::nullopt;
    return it->second;
}

Status JsonSchemaCompiler::fail(const std::string& path, const std::string& message) const {
    return error(
        ErrorCode::kInvalidArgument,
        "[json_schema] " + (where_.empty() ? std::string() : where_ + " ") + "at '" + path + "': " + message);
}

Status JsonSchemaCompiler::unsupported(const std::string& path, const std::string& keyword,
                                       const std::string& why) const {
    return fail(path, "keyword '" + keyword + "' is not supported" + (why.empty() ? "" : " (" + why + ")"));
}

Status JsonSchemaCompiler::automaton_error(const std::string& path, const std::string& keyword,
                                           const std::string& subject, const Status& cause) const {
    if (cause.code() == ErrorCode::kUnsupported)
        return fail(
            path, "keyword '" + keyword + "' " + subject + ": " + cause.message() +
                      (cause.message().find("not supported") == std::string::npos ? " (not supported)" : ""));
    return fail(path, "keyword '" + keyword + "' " + subject + ": " + cause.message());
}

Expected<int64_t> JsonSchemaCompiler::count(const ojson& s, const std::string& path, const char* key,
                                            int64_t fallback) {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() &&
        !(it->is_number_float() && it->get<double>() == std::floor(it->get<double>())))
        return fail(path, std::string("'") + key + "' must be a non-negative integer, got " + it->dump());
    const double v = it->get<double>();
    if (v < 0) return fail(path, std::string("'") + key + "' must be non-negative, got " + it->dump());
    if (v > static_cast<double>(kMaxRepetition))
        return unsupported(path, key, "values above " + std::to_string(kMaxRepetition) + " are not expanded");
    return static_cast<int64_t>(v);
}

// ---- shared helper rules ----

// Free runs of whitespace are not allowed: small models pad with them endlessly.
RuleId JsonSchemaCompiler::ws() {
    return shared("ws", [&](RuleId self) {
        RuleId indent = b_.add_rule();
        b_.add_alternative(indent, {});
        for (int k = 1; k <= kMaxIndent; ++k) {
            const RuleId r = b_.add_rule();
            b_.add_alternative(r, {});
            b_.add_alternative(r, {B(' '), S(indent)});
            indent = r;
        }
        b_.add_alternative(self, {});
        b_.add_alternative(self, L(" "));
        b_.add_alternative(self, {B('\n'), S(indent)});
        return self;
    });
}

std::vector<Sequence> JsonSchemaCompiler::json_chars() {
    // One character: an unescaped UTF-8 scalar or an escape, inlined into each position's rule
    // (not a rule of its own), so that a character costs no extra stack frame in the trie walk.
    const Symbol x = R(0x80, 0xBF);
    const RuleId esc = shared("escape", [&](RuleId e) {
        const Symbol hex = Symbol::byte_set("0123456789abcdefABCDEF");
        b_.add_alternative(e, {Symbol::byte_set("\"\\/bfnrt")});
        b_.add_alternative(e, {B('u'), Symbol::byte_set("0123456789abcABC"), hex, hex, hex});
        b_.add_alternative(e, {B('u'), Symbol::byte_set("dD"), R('0', '7'), hex, hex});
        b_.add_alternative(e, {B('u'), Symbol::byte_set("efEF"), hex, hex, hex});
        return e;
    });
    return {{R(0x20, 0x7F).remove('"').remove('\\')},
            {R(0xC2, 0xDF), x},
            {B('\xE0'), R(0xA0, 0xBF), x},
            {R(0xE1, 0xEC), x, x},
            {B('\xED'), R(0x80, 0x9F), x},
            {R(0xEE, 0xEF), x, x},
            {B('\xF0'), R(0x90, 0xBF), x, x},
            {R(0xF1, 0xF3), x, x, x},
            {B('\xF4'), R(0x80, 0x8F), x, x},
            {B('\\'), S(esc)}};
}

RuleId JsonSchemaCompiler::string_rule(int64_t min, int64_t max) {
    // A string shorter than the guard cannot spell it.
    if (!guard().empty() && (max < 0 || max >= static_cast<int64_t>(guard().size())))
        return guarded_string_rule(min, max);
    return shared("str" + std::to_string(min) + "_" + std::to_string(max), [&](RuleId self) {
        const std::vector<Sequence> chars = json_chars();
        const int64_t last = max < 0 ? min : max;
        std::vector<RuleId> s(static_cast<size_t>(last + 1));
        for (auto& r : s) r = b_.add_rule();
        for (int64_t k = 0; k <= last; ++k) {
            const RuleId r = s[static_cast<size_t>(k)];
            if (k >= min) b_.add_alternative(r, L("\""));
            const RuleId next = max < 0 && k == last ? r : k < last ? s[static_cast<size_t>(k + 1)] : r;
            if (max >= 0 && k == last) continue;
            for (const Sequence& c : chars) b_.add_alternative(r, cat({c, {S(next)}}));
        }
        b_.add_alternative(self, {B('"'), S(s[0])});
        return self;
    });
}

// Under a guard G of n bytes, a rule per (k characters so far, the last m of them spelling G's first
// m): G[m] leads to m + 1, except the last, G[n - 1], which is left to its escape (\u00XX, one of
// the escapes) and so to 0; G[0] (nowhere else in G) leads to 1; any other character to 0. In state
// 0 the characters are inline as in string_rule; inside a spelling of G (rare) the other characters
// are one shared rule per m — a frame more per character there, 4 alternatives instead of 12.
RuleId JsonSchemaCompiler::guarded_string_rule(int64_t min, int64_t max) {
    const std::string& g = guard();
    const auto n = static_cast<int64_t>(g.size());
    const auto byte = [](char c) { return static_cast<uint8_t>(c); };
    return shared("gstr" + std::to_string(min) + "_" + std::to_string(max), [&](RuleId self) {
        const std::vector<Sequence> chars = json_chars();  // chars[0]: the one-byte characters
        std::vector<RuleId> other(static_cast<size_t>(n));
        for (int64_t m = 1; m < n; ++m)
            other[static_cast<size_t>(m)] = shared("gchar" + std::to_string(m), [&](RuleId r) {
                for (Sequence c : chars) {
                    if (!c[0].is_rule && c.size() == 1)
                        c[0].remove(byte(g[0])).remove(byte(g[static_cast<size_t>(m)]));
                    b_.add_alternative(r, std::move(c));
                }
                return r;
            });
        const int64_t last = max < 0 ? min : max;
        // Rule (k, m) exists where it is reachable: m <= k, or k at the saturated last layer.
        std::vector<RuleId> s(static_cast<size_t>((last + 1) * n));
        auto at = [&](int64_t k, int64_t m) { return s[static_cast<size_t>(k * n + m)]; };
        for (int64_t k = 0; k <= last; ++k)
            for (int64_t m = 0; m < n && (m <= k || k == last); ++m)
                s[static_cast<size_t>(k * n + m)] = b_.add_rule();
        for (int64_t k = 0; k <= last; ++k) {
            for (int64_t m = 0; m < n && (m <= k || k == last); ++m) {
                const RuleId r = at(k, m);
                if (k >= min) b_.add_alternative(r, L("\""));
                if (max >= 0 && k == last) continue;
                const int64_t k_next = k < last ? k + 1 : k;
                if (m == 0) {
                    for (Sequence c : chars) {
                        if (!c[0].is_rule && c.size() == 1) c[0].remove(byte(g[0]));
                        c.push_back(S(at(k_next, 0)));
                        b_.add_alternative(r, std::move(c));
                    }
                } else {
                    if (m + 1 < n)
                        b_.add_alternative(r, {B(g[static_cast<size_t>(m)]), S(at(k_next, m + 1))});
                    b_.add_alternative(r, {S(other[static_cast<size_t>(m)]), S(at(k_next, 0))});
                }
                b_.add_alternative(r, {B(g[0]), S(at(k_next, 1))});
            }
        }
        b_.add_alternative(self, {B('"'), S(at(0, 0))});
        return self;
    });
}

std::string json_escape(char c) {
    static constexpr char kHex[] = "0123456789abcdef";
    const auto u = static_cast<uint8_t>(c);
    return std::string("\\u00") + kHex[u >> 4] + kHex[u & 15];
}

std::string JsonSchemaCompiler::json_text(const ojson& v) const {
    std::string text = v.dump();
    const std::string& g = guard();
    if (g.empty()) return text;
    // '<' only occurs inside strings in JSON text, so each spelling of G is inside one string.
    const std::string escaped = g.substr(0, g.size() - 1) + json_escape(g.back());
    for (size_t at = text.find(g); at != std::string::npos; at = text.find(g, at + escaped.size()))
        text.replace(at, g.size(), escaped);
    return text;
}

RuleId JsonSchemaCompiler::digits_upto(int n) {
    return shared("digits" + std::to_string(n), [&](RuleId self) {
        RuleId prev = b_.add_rule();
        b_.add_alternative(prev, {});
        for (int k = 1; k < n; ++k) {
            RuleId r = b_.add_rule();
            b_.add_alternative(r, {});
            b_.add_alternative(r, {R('0', '9'), S(prev)});
            prev = r;
        }
        b_.add_alternative(self, {});
        b_.add_alternative(self, {R('0', '9'), S(prev)});
        return self;
    });
}

RuleId JsonSchemaCompiler::integer() {
    return shared("int", [&](RuleId self) {
        const RuleId nat = b_.add_rule();
        b_.add_alternative(nat, L("0"));
        b_.add_alternative(nat, {R('1', '9'), S(digits_upto(kMaxIntegerDigits - 1))});
        b_.add_alternative(self, {B('-'), S(nat)});
        b_.add_alternative(self, {S(nat)});
        return self;
    });
}

RuleId JsonSchemaCompiler::number() {
    return shared("num", [&](RuleId self) {
        const RuleId frac = b_.add_rule();
        b_.add_alternative(frac, {});
        b_.add_alternative(frac, {B('.'), R('0', '9'), S(digits_upto(kMaxIntegerDigits - 1))});
        const RuleId exp = b_.add_rule();
        b_.add_alternative(exp, {});
        const RuleId sign = b_.add_rule();
        b_.add_alternative(sign, {});
        b_.add_alternative(sign, {Symbol::byte_set("+-")});
        b_.add_alternative(exp, {Symbol::byte_set("eE"), S(sign), R('0', '9'), S(digits_upto(1))});
        b_.add_alternative(self, {S(integer()), S(frac), S(exp)});
        return self;
    });
}

RuleId JsonSchemaCompiler::any_value() {
    return shared("any", [&](RuleId self) {
        b_.add_alternative(self, {S(free_object(self))});
        b_.add_alternative(self, {S(array_of(self, 0, -1))});
        b_.add_alternative(self, {S(string_rule(0, -1))});
        b_.add_alternative(self, {S(number())});
        b_.add_alternative(self, L("true"));
        b_.add_alternative(self, L("false"));
        b_.add_alternative(self, L("null"));
        return self;
    });
}

// '{' ws ('}' | pair M), M = ws ('}' | ',' ws pair M).
RuleId JsonSchemaCompiler::free_object(RuleId value) {
    return shared("map" + std::to_string(value), [&](RuleId self) {
        const RuleId pair = b_.add_rule();
        b_.add_alternative(pair, {S(string_rule(0, -1)), S(ws()), B(':'), S(ws()), S(value)});
        const RuleId m = b_.add_rule(), mb = b_.add_rule(), ob = b_.add_rule();
        b_.add_alternative(m, {S(ws()), S(mb)});
        b_.add_alternative(mb, L("}"));
        b_.add_alternative(mb, {B(','), S(ws()), S(pair), S(m)});
        b_.add_alternative(ob, L("}"));
        b_.add_alternative(ob, {S(pair), S(m)});
        b_.add_alternative(self, {B('{'), S(ws()), S(ob)});
        return self;
    });
}

RuleId JsonSchemaCompiler::array_of(RuleId item, int64_t min, int64_t max) {
    return shared("arr" + std::to_string(item) + "_" + std::to_string(min) + "_" + std::to_string(max),
                  [&](RuleId) { return tuple_rule({}, item, min, max); });
}

// [prefix[0], prefix[1], ..., rest, rest, ...] with a count in [min, max] (max < 0: unbounded;
// without `rest`, max <= prefix.size()). after[k] (k >= 1): ws then ']' or ',' ws item_k after[k+1].
RuleId JsonSchemaCompiler::tuple_rule(const std::vector<RuleId>& prefix, std::optional<RuleId> rest,
                                      int64_t min, int64_t max) {
    const auto p = static_cast<int64_t>(prefix.size());
    auto item_at = [&](int64_t k) { return k < p ? prefix[static_cast<size_t>(k)] : *rest; };
    // Unbounded: the states up to `last` are distinct (prefix items, minItems), the last one loops.
    const int64_t last = max < 0 ? std::max({min, p, int64_t{1}}) : max;
    std::vector<RuleId> after(static_cast<size_t>(last + 1));
    for (auto& x : after) x = b_.add_rule();
    for (int64_t k = 1; k <= last; ++k) {
        const RuleId rb = b_.add_rule();
        b_.add_alternative(after[static_cast<size_t>(k)], {S(ws()), S(rb)});
        if (k >= min) b_.add_alternative(rb, L("]"));
        if (max < 0 && k == last)
            b_.add_alternative(rb, {B(','), S(ws()), S(item_at(k)), S(after[static_cast<size_t>(k)])});
        else if (k < last)
            b_.add_alternative(rb, {B(','), S(ws()), S(item_at(k)), S(after[static_cast<size_t>(k + 1)])});
    }
    const RuleId open = b_.add_rule(), self = b_.add_rule();
    if (min == 0) b_.add_alternative(open, L("]"));
    if (max != 0) b_.add_alternative(open, {S(item_at(0)), S(after[1])});
    b_.add_alternative(self, {B('['), S(ws()), S(open)});
    return self;
}

// ---- dispatch ----

Expected<RuleId> JsonSchemaCompiler::compile(const ojson& s, const std::string& path) {
    if (s.is_boolean()) {
        if (s.get<bool>()) return any_value();
        return fail(path, "the schema 'false' admits no value");
    }
    if (!s.is_object())
        return fail(path, "a schema must be an object or a boolean, got " + s.dump().substr(0, 64));
    const auto& annotations = annotation_keywords();
    auto only_with = [&](const char* keyword, std::initializer_list<const char*> also) -> Status {
        for (const auto& item : s.items()) {
            const std::string& k = item.key();  // a named reference: clang 14 cannot capture a binding
            if (k == keyword || annotations.count(k)) continue;
            if (std::find_if(also.begin(), also.end(), [&](const char* a) { return k == a; }) != also.end())
                continue;
            return unsupported(path, k, std::string("beside '") + keyword + "'");
        }
        return Status::ok();
    };
    if (s.contains("$ref")) {
        SLUICE_RETURN_IF_ERROR(only_with("$ref", {}));
        return compile_ref(s, path);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
        if (!s.contains(key)) continue;
        SLUICE_RETURN_IF_ERROR(only_with(key, {}));
        const ojson& branches = s.at(key);
        if (!branches.is_array() || branches.empty())
            return fail(path, std::string("'") + key + "' must be a non-empty array");
        // Nested alternations multiply the parse stacks alive at once (2 branches nested 20 deep:
        // a million); bound the product so a schema cannot stall the mask walk.
        const int64_t product = alternation_product_ * static_cast<int64_t>(branches.size());
        if (product > kMaxAlternationProduct)
            return unsupported(path, key,
                               "nested anyOf/oneOf whose branch counts multiply past " +
                                   std::to_string(kMaxAlternationProduct));
        const int64_t saved = alternation_product_;
        alternation_product_ = product;
        const RuleId self = b_.add_rule();
        for (size_t i = 0; i < branches.size(); ++i) {
            SLUICE_ASSIGN_OR_RETURN(RuleId r,
                                    compile(branches[i], path + "/" + key + "/" + std::to_string(i)));
            b_.add_alternative(self, {S(r)});
        }
        alternation_product_ = saved;
        return self;
    }
    if (s.contains("allOf")) {
        SLUICE_RETURN_IF_ERROR(only_with("allOf", {}));
        const ojson& parts = s.at("allOf");
        if (!parts.is_array() || parts.size() != 1)
            return unsupported(path, "allOf", "only a single-element allOf is supported");
        return compile(parts[0], path + "/allOf/0");
    }
    if (s.contains("enum") || s.contains("const")) {
        SLUICE_RETURN_IF_ERROR(only_with(s.contains("enum") ? "enum" : "const", {"type", "const", "enum"}));
        return compile_enum(s, path);
    }

    // Typed schema: check every keyword first (an unknown one is refused, never ignored).
    const auto& typed = typed_keywords();
    for (const auto& [k, v] : s.items()) {
        if (annotations.count(k)) continue;
        if (!typed.count(k)) return unsupported(path, k);
        if (k == "uniqueItems" && v != false) return unsupported(path, "uniqueItems");
    }
    std::vector<std::string> types;
    if (auto it = s.find("type"); it != s.end()) {
        if (it->is_string()) {
            types.push_back(it->get<std::string>());
        } else if (it->is_array() && !it->empty()) {
            for (const auto& t : *it) {
                if (!t.is_string()) return fail(path, "'type' entries must be strings, got " + t.dump());
                types.push_back(t.get<std::string>());
            }
        } else {
            return fail(path, "'type' must be a string or a non-empty array of strings, got " + it->dump());
        }
        for (const auto& t : types)
            if (!type_names().count(t)) return fail(path, "unknown type '" + t + "'");
    } else {
        // No type: the keywords say which kinds the schema constrains; other kinds are not
        // generated (a subset, so still valid). No keywords at all: any value.
        for (const auto& item : s.items()) {
            auto kind = typed.find(item.key());
            if (kind != typed.end() && !kind->second.empty() &&
                std::find(types.begin(), types.end(), kind->second) == types.end())
                types.push_back(kind->second);
        }
        if (types.empty()) return any_value();
    }
    if (types.size() == 1) return compile_type(s, types[0], path);
    const RuleId self = b_.add_rule();
    for (const auto& t : types) {
        SLUICE_ASSIGN_OR_RETURN(RuleId r, compile_type(s, t, path));
        b_.add_alternative(self, {S(r)});
    }
    return self;
}

Expected<RuleId> JsonSchemaCompiler::compile_ref(const ojson& s, const std::string& path) {
    const ojson& ref = s.at("$ref");
    if (!ref.is_string()) return fail(path, "'$ref' must be a string");
    const std::string target = ref.get<std::string>();
    if (target.empty() || target[0] != '#')
        return unsupported(path, "$ref", "only local references '#...' are supported, got '" + target + "'");
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const ojson* node = &root_;
    if (target.size() > 1) {
        try {
            node = &root_.at(ojson::json_pointer(target.substr(1)));
        } catch (const std::exception&) {
            return fail(path, "'$ref' '" + target + "' does not resolve inside the schema");
        }
    }
    const RuleId self = b_.add_rule();
    refs_[target] = self;
    SLUICE_ASSIGN_OR_RETURN(RuleId r, compile(*node, target));
    b_.add_alternative(self, {S(r)});
    return self;
}

Expected<RuleId> JsonSchemaCompiler::compile_enum(const ojson& s, const std::string& path) {
    std::vector<ojson> values;
    if (auto it = s.find("enum"); it != s.end()) {
        if (!it->is_array()) return fail(path, "'enum' must be an array");
        values.assign(it->begin(), it->end());
    }
    if (auto it = s.find("const"); it != s.end()) {
        if (s.contains("enum")) {
            // Both: the const, if the enum lists it.
            const bool listed = std::find(values.begin(), values.end(), *it) != values.end();
            values.clear();
            if (listed) values.push_back(*it);
        } else {
            values.push_back(*it);
        }
    }
    if (auto it = s.find("type"); it != s.end()) {
        std::vector<std::string> types;
        if (it->is_string()) types.push_back(it->get<std::string>());
        if (it->is_array())
            for (const auto& t : *it)
                if (t.is_string()) types.push_back(t.get<std::string>());
        if (types.empty()) return fail(path, "'type' must be a string or an array of strings");
        std::erase_if(values, [&](const ojson& v) {
            return std::none_of(types.begin(), types.end(),
                                [&](const std::string& t) { return type_matches(v, t); });
        });
    }
    if (values.empty()) return fail(path, "'enum'/'const' leaves no value (of the given type)");
    const RuleId self = b_.add_rule();
    for (const auto& v : values) b_.add_alternative(self, L(json_text(v)));
    return self;
}

Expected<RuleId> JsonSchemaCompiler::compile_type(const ojson& s, const std::string& type,
                                                  const std::string& path) {
    if (type == "null")
        return shared("null", [&](RuleId self) { return b_.add_alternative(self, L("null")), self; });
    if (type == "boolean")
        return shared("bool", [&](RuleId self) {
            b_.add_alternative(self, L("true"));
            b_.add_alternative(self, L("false"));
            return self;
        });
    if (type == "integer" || type == "number") return compile_number(s, type == "integer", path);
    if (type == "string") return compile_string(s, path);
    if (type == "array") return compile_array(s, path);
    return compile_object(s, path);
}

// ---- numbers ----

// Digit strings of one length between a and b inclusive (a <= b, same length): the usual split on
// the first digit where they differ.
RuleId JsonSchemaCompiler::digit_range(const std::string& a, const std::string& b) {
    return shared("digits:" + a + "-" + b, [&](RuleId self) {
        const size_t n = a.size();
        if (n == 0) {
            b_.add_alternative(self, {});
            return self;
        }
        const std::string a1 = a.substr(1), b1 = b.substr(1);
        if (a[0] == b[0]) {
            b_.add_alternative(self, {B(a[0]), S(digit_range(a1, b1))});
        } else if (a1 == std::string(n - 1, '0') && b1 == std::string(n - 1, '9')) {
            b_.add_alternative(
                self, {R(static_cast<uint8_t>(a[0]), static_cast<uint8_t>(b[0])), S(digit_range(a1, b1))});
        } else {
            const std::string zeros(n - 1, '0'), nines(n - 1, '9');
            b_.add_alternative(self, {B(a[0]), S(digit_range(a1, nines))});
            if (a[0] + 1 <= b[0] - 1)
                b_.add_alternative(self, {R(static_cast<uint8_t>(a[0] + 1), static_cast<uint8_t>(b[0] - 1)),
                                          S(digit_range(zeros, nines))});
            b_.add_alternative(self, {B(b[0]), S(digit_range(zeros, b1))});
        }
        return self;
    });
}

// Decimal integers in [lo, hi] (0 <= lo <= hi), without leading zeros.
RuleId JsonSchemaCompiler::natural_range(int64_t lo, int64_t hi) {
    return shared("nat:" + std::to_string(lo) + "-" + std::to_string(hi), [&](RuleId self) {
        const size_t lo_len = std::to_string(lo).size(), hi_len = std::to_string(hi).size();
        int64_t pow10 = 1;
        for (size_t n = 1; n < lo_len; ++n) pow10 *= 10;
        for (size_t n = lo_len; n <= hi_len; ++n, pow10 *= 10) {
            const int64_t lower = n == lo_len ? lo : pow10;           // pow10 = 10^(n-1)
            const int64_t upper = n == hi_len ? hi : pow10 * 10 - 1;  // 10^n - 1
            b_.add_alternative(self, {S(digit_range(std::to_string(lower), std::to_string(upper)))});
        }
        return self;
    });
}

// The integers in [lo, hi] that are multiples of `modulus`: for each sign, the numerals of the
// range intersected with the automaton of the value modulo `modulus` (minimised first, so that a
// modulus dividing a power of ten costs a handful of states, not 15 × modulus).
Expected<RuleId> JsonSchemaCompiler::multiples_rule(int64_t lo, int64_t hi, int64_t modulus,
                                                    const std::string& path) {
    const std::string name =
        "mult:" + std::to_string(modulus) + ":" + std::to_string(lo) + ":" + std::to_string(hi);
    if (auto r = find_shared(name)) return *r;
    const constrain::Dfa residues =
        constrain::Dfa::decimal_multiples(static_cast<uint32_t>(modulus)).minimized();
    const std::string subject =
        std::to_string(modulus) + " in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    // The numerals of [a, b] (0 <= a <= b) that are multiples.
    auto multiples = [&](int64_t a, int64_t b) -> Expected<std::optional<RuleId>> {
        auto range = constrain::regex_dfa(constrain::Regex::whole_text(natural_range_regex(a, b)),
                                          kMaxAutomatonStates);
        if (!range) return automaton_error(path, "multipleOf", subject, range.status());
        auto both = constrain::Dfa::combine(*range, residues, constrain::Dfa::Op::kAnd, kMaxAutomatonStates);
        if (!both) return automaton_error(path, "multipleOf", subject, both.status());
        const constrain::Dfa dfa = both->minimized();
        if (dfa.empty()) return std::optional<RuleId>();
        SLUICE_ASSIGN_OR_RETURN(RuleId r, emit_automaton(dfa, 0, -1, false, path, "multipleOf"));
        return std::optional<RuleId>(r);
    };
    const RuleId self = b_.add_rule();
    bool any = false;
    if (hi >= 0) {
        SLUICE_ASSIGN_OR_RETURN(std::optional<RuleId> r, multiples(std::max<int64_t>(lo, 0), hi));
        if (r) b_.add_alternative(self, {S(*r)});
        any |= r.has_value();
    }
    if (lo < 0) {
        SLUICE_ASSIGN_OR_RETURN(std::optional<RuleId> r, multiples(hi < 0 ? -hi : 1, -lo));
        if (r) b_.add_alternative(self, {B('-'), S(*r)});
        any |= r.has_value();
    }
    if (!any) return fail(path, "no multiple of " + subject + " (integers of at most 15 digits)");
    b_.shared_rules_[name] = self;
    return self;
}

// integer / number, with optional bounds, multipleOf and the numeric formats. Bounded values are
// written without exponent: integers in range, and (numbers) a non-negative integer part ip with
// ip + 1 <= the integer upper bound followed by a fraction, so the value stays in [ip, ip + 1)
// inside the range.
Expected<RuleId> JsonSchemaCompiler::compile_number(const ojson& s, bool integer_only,
                                                    const std::string& path) {
    constexpr int64_t kMax = 999999999999999;  // kMaxIntegerDigits nines
    bool bounded = false;
    int64_t lo = -kMax, hi = kMax;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
        auto it = s.find(key);
        if (it == s.end()) continue;
        if (!it->is_number())
            return unsupported(path, key, "only a number is supported (not the draft-4 boolean form)");
        const double v = it->get<double>();
        if (!std::isfinite(v)) return fail(path, std::string("'") + key + "' must be finite");
        const std::string k = key;
        const double clamped = std::clamp(v, -1e16, 1e16);
        if (k == "minimum") lo = std::max(lo, static_cast<int64_t>(std::ceil(clamped)));
        if (k == "exclusiveMinimum") lo = std::max(lo, static_cast<int64_t>(std::floor(clamped)) + 1);
        if (k == "maximum") hi = std::min(hi, static_cast<int64_t>(std::floor(clamped)));
        if (k == "exclusiveMaximum") hi = std::min(hi, static_cast<int64_t>(std::ceil(clamped)) - 1);
        bounded = true;
    }
    // `format` on a number: the numeric formats of ajv-formats; the string formats do not apply to
    // numbers (JSON Schema: a format constrains only instances of its type).
    if (auto it = s.find("format"); it != s.end() && it->is_string()) {
        const std::string f = it->get<std::string>();
        if (f == "int32") {
            lo = std::max<int64_t>(lo, -2147483648LL);
            hi = std::min<int64_t>(hi, 2147483647LL);
            bounded = true;
            integer_only = true;
        } else if (f == "int64") {
            integer_only = true;
        } else if (f != "float" && f != "double" && !is_string_format(f)) {
            return unsupported(path, "format",
                               "'" + f + "' on a number; numeric formats: int32, int64, float, double");
        }
    }
    if (auto it = s.find("multipleOf"); it != s.end()) {
        if (!it->is_number() || !(it->get<double>() > 0))
            return fail(path, "'multipleOf' must be a number greater than 0, got " + it->dump());
        const double m = it->get<double>();
        if (m != std::floor(m) || m > static_cast<double>(kMaxMultipleOf))
            return unsupported(path, "multipleOf",
                               it->dump() + ": only integers from 1 to " + std::to_string(kMaxMultipleOf) +
                                   " (decimal steps such as 0.01 are inexact in floating-point validators)");
        if (lo > hi)
            return fail(path, "no integer lies in the range [" + std::to_string(lo) + ", " +
                                  std::to_string(hi) + "]");
        // Multiples of an integer are integers: numbers are generated as integers.
        if (m > 1) return multiples_rule(lo, hi, static_cast<int64_t>(m), path);
        integer_only = true;
    }
    if (!bounded) return integer_only ? integer() : number();
    if (lo > hi)
        return fail(path, "no integer lies in the range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "] (values with at most 15 digits)");
    const RuleId self = b_.add_rule();
    if (hi >= 0) b_.add_alternative(self, {S(natural_range(std::max<int64_t>(lo, 0), hi))});
    if (lo < 0) b_.add_alternative(self, {B('-'), S(natural_range(hi < 0 ? -hi : 1, -lo))});
    if (!integer_only && hi - 1 >= std::max<int64_t>(lo, 0)) {
        const RuleId frac = b_.add_rule();
        b_.add_alternative(frac, {B('.'), R('0', '9'), S(digits_upto(kMaxIntegerDigits - 1))});
        b_.add_alternative(self, {S(natural_range(std::max<int64_t>(lo, 0), hi - 1)), S(frac)});
    }
    return self;
}

// ---- arrays ----

Expected<RuleId> JsonSchemaCompiler::compile_array(const ojson& s, const std::string& path) {
    SLUICE_ASSIGN_OR_RETURN(int64_t min, count(s, path, "minItems", 0));
    SLUICE_ASSIGN_OR_RETURN(int64_t max, count(s, path, "maxItems", -1));
    if (max >= 0 && min > max)
        return fail(path, "minItems " + std::to_string(min) + " > maxItems " + std::to_string(max));
    // The tuple's schemas (prefixItems, or the draft-7 array form of items) and the schema of the
    // items after them: `items` beside prefixItems, `additionalItems` beside an array `items`.
    const ojson* prefix = nullptr;
    const ojson* rest = nullptr;
    std::string prefix_key = "prefixItems", rest_key = "items";
    auto items = s.find("items"), prefix_items = s.find("prefixItems"),
         additional = s.find("additionalItems");
    if (prefix_items != s.end()) {
        if (!prefix_items->is_array()) return fail(path, "'prefixItems' must be an array of schemas");
        if (items != s.end() && items->is_array())
            return fail(path, "'items' must be a schema beside 'prefixItems', not an array");
        if (additional != s.end())
            return unsupported(path, "additionalItems",
                               "beside 'prefixItems' (2020-12 names the rest 'items')");
        prefix = &*prefix_items;
        if (items != s.end()) rest = &*items;
    } else if (items != s.end() && items->is_array()) {
        prefix = &*items;
        prefix_key = "items";
        rest_key = "additionalItems";
        if (additional != s.end()) rest = &*additional;
    } else {
        if (additional != s.end())
            return unsupported(path, "additionalItems", "it applies only beside an array 'items'");
        if (items != s.end()) rest = &*items;
    }
    std::vector<RuleId> prefix_rules;
    if (prefix)
        for (size_t i = 0; i < prefix->size(); ++i) {
            SLUICE_ASSIGN_OR_RETURN(RuleId r,
                                    compile((*prefix)[i], path + "/" + prefix_key + "/" + std::to_string(i)));
            prefix_rules.push_back(r);
        }
    std::optional<RuleId> rest_rule;
    if (rest == nullptr || *rest == true) {
        rest_rule = any_value();
    } else if (*rest != false) {
        SLUICE_ASSIGN_OR_RETURN(rest_rule, compile(*rest, path + "/" + rest_key));
    }
    const auto p = static_cast<int64_t>(prefix_rules.size());
    if (!rest_rule) {  // no item past the prefix
        if (min > p)
            return fail(path, "minItems " + std::to_string(min) + " needs more items than the " +
                                  std::to_string(p) + " the schema allows ('" + rest_key + "' is false)");
        max = max < 0 ? p : std::min(max, p);
    }
    if (prefix_rules.empty()) return array_of(rest_rule ? *rest_rule : any_value(), min, max);
    return tuple_rule(prefix_rules, rest_rule, min, max);
}

// ---- entry points ----

Expected<GrammarBuilder::RuleId> GrammarBuilder::add_json_schema(const nlohmann::ordered_json& schema,
                                                                 const std::string& where) {
    JsonSchemaCompiler c(*this, schema, where);
    return c.compile(schema, "#");
}

GrammarBuilder::RuleId GrammarBuilder::add_json_object() {
    static const nlohmann::ordered_json kSchema = {{"type", "object"}};
    JsonSchemaCompiler c(*this, kSchema, "");
    return c.compile(kSchema, "#").value();
}

}  // namespace sluice
