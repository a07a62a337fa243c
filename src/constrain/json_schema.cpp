// JSON Schema → grammar (GrammarBuilder::add_json_schema, see sluice/constrain.h).
//
// The grammar derives a SUBSET of the texts a schema accepts, chosen so that every text it
// derives validates (soundness) and a model can still say what it needs:
// - objects with `properties` list them in declaration order; required ones always appear,
//   optional ones may be left out; keys not in `properties` are never generated (also when
//   additionalProperties allows them). With no `properties`, an object is a free map whose values
//   follow `additionalProperties` (any JSON when absent or true; `{}` only when false).
// - numbers: integers have at most 15 digits, numbers at most 15+15 digits and a 2-digit
//   exponent, so every value is finite in a double (ajv/JS refuse Infinity) and a model cannot
//   write digits forever. minimum/maximum/exclusive* bound integers exactly (digit-range rules);
//   a bounded number is an in-range integer or a non-negative integer part ip with ip + 1 within
//   range followed by a fraction (no exponent; negative non-integers are not generated).
// - strings: valid UTF-8; escapes except \u surrogates (a pair would count as 2 characters here
//   but 1 for minLength/maxLength).
// - whitespace: between tokens nothing, one space, or a newline and up to 16 spaces of indentation;
//   none before or after the value.
// - oneOf is compiled like anyOf: sound when the branches are disjoint (the usual discriminated
//   unions); a text matching two overlapping branches would fail oneOf.
// Anything else a schema says is either supported exactly or refused with an error naming the
// keyword (pattern, minimum, ...): a constraint is never dropped silently.
//
// Data lifetime: the compiler lives for one add_json_schema call; shared helper rules (whitespace,
// string characters, any value) are kept in the builder and reused across calls.
// Rejected alternative: compiling `pattern` through PCRE2 — its regexes are not regular in
// general and mapping them to a byte automaton is a project of its own.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "constrain/grammar_impl.h"

namespace sluice {
namespace {
using ojson = nlohmann::ordered_json;
using RuleId = GrammarBuilder::RuleId;
using Symbol = GrammarBuilder::Symbol;
using Sequence = GrammarBuilder::Sequence;

constexpr int kMaxIndent = 16;             // spaces after a newline between tokens
constexpr int64_t kMaxRepetition = 10000;  // largest minItems/maxItems/minLength/maxLength expanded
constexpr int kMaxIntegerDigits = 15;
constexpr int64_t kMaxAlternationProduct = 1024;

Symbol S(RuleId r) {
    return Symbol::ref(r);
}
Symbol B(char c) {
    return Symbol::byte_range(static_cast<uint8_t>(c), static_cast<uint8_t>(c));
}
Symbol R(uint8_t lo, uint8_t hi) {
    return Symbol::byte_range(lo, hi);
}
Sequence cat(std::initializer_list<Sequence> parts) {
    Sequence out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}
Sequence L(std::string_view text) {
    return GrammarBuilder::literal(text);
}

const std::set<std::string>& annotation_keywords() {
    static const std::set<std::string> k = {"title",    "description", "default",  "examples",
                                            "$schema",  "$id",         "$comment", "deprecated",
                                            "readOnly", "writeOnly",   "$defs",    "definitions"};
    return k;
}

}  // namespace

class JsonSchemaCompiler {
 public:
    JsonSchemaCompiler(GrammarBuilder& b, const ojson& root, std::string where)
        : b_(b), root_(root), where_(std::move(where)) {}

    Expected<RuleId> compile(const ojson& s, const std::string& path);

    // Between tokens: nothing, one space, or a newline and an indentation of up to
    // kMaxIndent spaces (pretty-printing). Free runs of whitespace are not allowed: small models
    // pad with them endlessly.
    RuleId ws() {
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
    // The ways to write one character of a JSON string body: an unescaped UTF-8 scalar or an
    // escape. Inlined into each string rule (not a rule of its own), so that a character costs
    // no extra stack frame in the trie walk.
    std::vector<Sequence> string_char_alternatives() {
        const Symbol x = R(0x80, 0xBF);
        const RuleId esc = shared("escape", [&](RuleId self) {
            const Symbol hex = Symbol::byte_set("0123456789abcdefABCDEF");
            b_.add_alternative(self, {Symbol::byte_set("\"\\/bfnrt")});
            b_.add_alternative(self, {B('u'), Symbol::byte_set("0123456789abcABC"), hex, hex, hex});
            b_.add_alternative(self, {B('u'), Symbol::byte_set("dD"), R('0', '7'), hex, hex});
            b_.add_alternative(self, {B('u'), Symbol::byte_set("efEF"), hex, hex, hex});
            return self;
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
    // "..." with a length in [min, max] characters (max < 0: unbounded).
    RuleId string_rule(int64_t min, int64_t max) {
        return shared("str" + std::to_string(min) + "_" + std::to_string(max), [&](RuleId self) {
            const std::vector<Sequence> chars = string_char_alternatives();
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
    // Up to n digits (zero or more).
    RuleId digits_upto(int n) {
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
    RuleId integer() {
        return shared("int", [&](RuleId self) {
            const RuleId nat = b_.add_rule();
            b_.add_alternative(nat, L("0"));
            b_.add_alternative(nat, {R('1', '9'), S(digits_upto(kMaxIntegerDigits - 1))});
            b_.add_alternative(self, {B('-'), S(nat)});
            b_.add_alternative(self, {S(nat)});
            return self;
        });
    }
    RuleId number() {
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
    RuleId any_value() {
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
    // {"k": value, ...} with free keys: '{' ws ('}' | pair M), M = ws ('}' | ',' ws pair M).
    RuleId free_object(RuleId value) {
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
    // [item, ...] with a count in [min, max] (max < 0: unbounded).
    RuleId array_of(RuleId item, int64_t min, int64_t max) {
        return shared(
            "arr" + std::to_string(item) + "_" + std::to_string(min) + "_" + std::to_string(max),
            [&](RuleId self) {
                // r[k]: after k items (k >= 1): ws then ']' or ',' ws item r[k+1].
                const int64_t last = max < 0 ? std::max<int64_t>(min, 1) : max;
                std::vector<RuleId> r(static_cast<size_t>(last + 1));
                for (auto& x : r) x = b_.add_rule();
                for (int64_t k = 1; k <= last; ++k) {
                    const RuleId rb = b_.add_rule();
                    b_.add_alternative(r[static_cast<size_t>(k)], {S(ws()), S(rb)});
                    if (k >= min) b_.add_alternative(rb, L("]"));
                    if (max < 0 && k == last)
                        b_.add_alternative(rb, {B(','), S(ws()), S(item), S(r[static_cast<size_t>(k)])});
                    else if (k < last)
                        b_.add_alternative(rb, {B(','), S(ws()), S(item), S(r[static_cast<size_t>(k + 1)])});
                }
                const RuleId ab = b_.add_rule();
                if (min == 0) b_.add_alternative(ab, L("]"));
                if (max != 0) b_.add_alternative(ab, {S(item), S(r[1])});
                b_.add_alternative(self, {B('['), S(ws()), S(ab)});
                return self;
            });
    }

 private:
    RuleId shared(const std::string& name, const std::function<RuleId(RuleId)>& make) {
        auto it = b_.shared_rules_.find(name);
        if (it != b_.shared_rules_.end()) return it->second;
        const RuleId self = b_.add_rule();
        b_.shared_rules_[name] = self;  // before make(): recursive helpers (any) find themselves
        const RuleId r = make(self);
        if (r != self) b_.add_alternative(self, {S(r)});
        return self;
    }

    Status fail(const std::string& path, const std::string& message) const {
        return error(ErrorCode::kInvalidArgument, "[json_schema] " +
                                                      (where_.empty() ? std::string() : where_ + " ") +
                                                      "at '" + path + "': " + message);
    }
    Status unsupported(const std::string& path, const std::string& keyword,
                       const std::string& why = "") const {
        return fail(path,
                    "keyword '" + keyword + "' is not supported" + (why.empty() ? "" : " (" + why + ")"));
    }

    Expected<int64_t> count(const ojson& s, const std::string& path, const char* key, int64_t fallback) {
        auto it = s.find(key);
        if (it == s.end()) return fallback;
        if (!it->is_number_integer() &&
            !(it->is_number_float() && it->get<double>() == std::floor(it->get<double>())))
            return fail(path, std::string("'") + key + "' must be a non-negative integer, got " + it->dump());
        const double v = it->get<double>();
        if (v < 0) return fail(path, std::string("'") + key + "' must be non-negative, got " + it->dump());
        if (v > static_cast<double>(kMaxRepetition))
            return unsupported(path, key,
                               "values above " + std::to_string(kMaxRepetition) + " are not expanded");
        return static_cast<int64_t>(v);
    }

    Expected<RuleId> compile_ref(const ojson& s, const std::string& path);
    Expected<RuleId> compile_enum(const ojson& s, const std::string& path);
    Expected<RuleId> compile_type(const ojson& s, const std::string& type, const std::string& path);
    Expected<RuleId> compile_object(const ojson& s, const std::string& path);
    Expected<RuleId> compile_array(const ojson& s, const std::string& path);
    Expected<RuleId> compile_string(const ojson& s, const std::string& path);
    Expected<RuleId> compile_number(const ojson& s, bool integer_only, const std::string& path);
    RuleId digit_range(const std::string& a, const std::string& b);
    RuleId natural_range(int64_t lo, int64_t hi);
    RuleId format_rule(const std::string& format);

    GrammarBuilder& b_;
    const ojson& root_;
    std::string where_;
    std::map<std::string, RuleId> refs_;  // JSON pointer → rule (also while being compiled: recursion)
    int64_t alternation_product_ = 1;     // product of anyOf/oneOf branch counts on the current path
};

namespace {
const std::set<std::string>& supported_formats() {
    static const std::set<std::string> k = {"date", "time", "date-time", "uuid"};
    return k;
}
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
}  // namespace

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
    static const std::set<std::string> typed = {
        "type",      "properties",       "required",        "additionalProperties",
        "items",     "minItems",         "maxItems",        "minLength",
        "maxLength", "format",           "uniqueItems",     "minimum",
        "maximum",   "exclusiveMinimum", "exclusiveMaximum"};
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
        if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
            types.push_back("object");
        if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) types.push_back("array");
        if (s.contains("minLength") || s.contains("maxLength") || s.contains("format"))
            types.push_back("string");
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
    for (const auto& v : values) b_.add_alternative(self, L(v.dump()));
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

Expected<RuleId> JsonSchemaCompiler::compile_string(const ojson& s, const std::string& path) {
    if (auto it = s.find("format"); it != s.end()) {
        if (!it->is_string()) return fail(path, "'format' must be a string");
        const std::string f = it->get<std::string>();
        if (!supported_formats().count(f))
            return unsupported(path, "format", "'" + f + "'; supported: date, time, date-time, uuid");
        if (s.contains("minLength") || s.contains("maxLength"))
            return unsupported(path, "minLength/maxLength", "together with 'format'");
        return format_rule(f);
    }
    SLUICE_ASSIGN_OR_RETURN(int64_t min, count(s, path, "minLength", 0));
    SLUICE_ASSIGN_OR_RETURN(int64_t max, count(s, path, "maxLength", -1));
    if (max >= 0 && min > max)
        return fail(path, "minLength " + std::to_string(min) + " > maxLength " + std::to_string(max));
    return string_rule(min, max);
}

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

// integer / number, with optional bounds. Bounded values are written without exponent: integers
// in range, and (numbers) a non-negative integer part ip with ip + 1 <= the integer upper bound
// followed by a fraction, so the value stays in [ip, ip + 1) inside the range.
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

Expected<RuleId> JsonSchemaCompiler::compile_array(const ojson& s, const std::string& path) {
    SLUICE_ASSIGN_OR_RETURN(int64_t min, count(s, path, "minItems", 0));
    SLUICE_ASSIGN_OR_RETURN(int64_t max, count(s, path, "maxItems", -1));
    if (max >= 0 && min > max)
        return fail(path, "minItems " + std::to_string(min) + " > maxItems " + std::to_string(max));
    RuleId item = 0;
    auto it = s.find("items");
    if (it == s.end() || *it == true) {
        item = any_value();
    } else if (*it == false) {
        if (min > 0) return fail(path, "'items' false with minItems > 0 admits no value");
        max = 0;
        item = any_value();  // unused: no item is allowed
    } else if (it->is_array()) {
        return unsupported(path, "items", "tuple form (an array of schemas)");
    } else {
        SLUICE_ASSIGN_OR_RETURN(item, compile(*it, path + "/items"));
    }
    return array_of(item, min, max);
}

Expected<RuleId> JsonSchemaCompiler::compile_object(const ojson& s, const std::string& path) {
    std::vector<std::string> names;
    std::vector<const ojson*> schemas;
    static const ojson kTrue = true;
    if (auto it = s.find("properties"); it != s.end()) {
        if (!it->is_object()) return fail(path, "'properties' must be an object");
        for (const auto& [k, v] : it->items()) {
            names.push_back(k);
            schemas.push_back(&v);
        }
    }
    const ojson* additional = &kTrue;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
        if (!it->is_boolean() && !it->is_object())
            return fail(path, "'additionalProperties' must be a boolean or a schema");
        additional = &*it;
    }
    std::set<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
        if (!it->is_array()) return fail(path, "'required' must be an array of strings");
        for (const auto& r : *it) {
            if (!r.is_string()) return fail(path, "'required' must be an array of strings");
            const std::string name = r.get<std::string>();
            required.insert(name);
            if (std::find(names.begin(), names.end(), name) == names.end()) {
                if (*additional == false)
                    return fail(path, "required property '" + name +
                                          "' is not in 'properties' and additionalProperties is false");
                names.push_back(name);
                schemas.push_back(additional);
            }
        }
    }
    if (names.empty()) {
        if (*additional == false)
            return shared("{}", [&](RuleId self) {
                b_.add_alternative(self, {B('{'), S(ws()), B('}')});
                return self;
            });
        SLUICE_ASSIGN_OR_RETURN(RuleId value, compile(*additional, path + "/additionalProperties"));
        return free_object(value);
    }
    const size_t n = names.size();
    std::vector<RuleId> pair(n);
    for (size_t i = 0; i < n; ++i) {
        const std::string sub = path + "/properties/" + names[i];
        SLUICE_ASSIGN_OR_RETURN(RuleId value, compile(*schemas[i], sub));
        pair[i] = b_.add_rule();
        b_.add_alternative(pair[i], cat({L(ojson(names[i]).dump()), {S(ws()), B(':'), S(ws()), S(value)}}));
    }
    std::vector<size_t> first_required(n + 1, n);  // first required index >= i
    for (size_t i = n; i-- > 0;) first_required[i] = required.count(names[i]) ? i : first_required[i + 1];
    // t[i]: at least one member written, the next candidate is property i.
    std::vector<RuleId> t(n + 1);
    for (auto& r : t) r = b_.add_rule();
    for (size_t i = 0; i <= n; ++i) {
        const RuleId tb = b_.add_rule();
        b_.add_alternative(t[i], {S(ws()), S(tb)});
        if (first_required[i] == n) b_.add_alternative(tb, L("}"));
        for (size_t j = i; j < n && j <= first_required[i]; ++j)
            b_.add_alternative(tb, {B(','), S(ws()), S(pair[j]), S(t[j + 1])});
    }
    const RuleId ob = b_.add_rule(), self = b_.add_rule();
    if (first_required[0] == n) b_.add_alternative(ob, L("}"));
    for (size_t j = 0; j < n && j <= first_required[0]; ++j)
        b_.add_alternative(ob, {S(pair[j]), S(t[j + 1])});
    b_.add_alternative(self, {B('{'), S(ws()), S(ob)});
    return self;
}

// Always-valid subsets of RFC 3339 (ajv-formats' full mode): dates never name Feb 29 or a day a
// month lacks; times carry seconds and a zone.
RuleId JsonSchemaCompiler::format_rule(const std::string& format) {
    return shared("format:" + format, [&](RuleId self) {
        const Symbol d = R('0', '9'), hex = Symbol::byte_set("0123456789abcdef");
        const RuleId date = b_.add_rule(), time = b_.add_rule();
        {
            const RuleId d31 = b_.add_rule(), d30 = b_.add_rule(), d28 = b_.add_rule(), md = b_.add_rule();
            b_.add_alternative(d28, {B('0'), R('1', '9')});
            b_.add_alternative(d28, {B('1'), d});
            b_.add_alternative(d28, {B('2'), R('0', '8')});
            b_.add_alternative(d30, {S(d28)});
            b_.add_alternative(d30, L("29"));
            b_.add_alternative(d30, L("30"));
            b_.add_alternative(d31, {S(d30)});
            b_.add_alternative(d31, L("31"));
            b_.add_alternative(md, {B('0'), Symbol::byte_set("13578"), B('-'), S(d31)});
            b_.add_alternative(md, {B('1'), Symbol::byte_set("02"), B('-'), S(d31)});
            b_.add_alternative(md, {B('0'), Symbol::byte_set("469"), B('-'), S(d30)});
            b_.add_alternative(md, cat({L("11-"), {S(d30)}}));
            b_.add_alternative(md, cat({L("02-"), {S(d28)}}));
            b_.add_alternative(date, {d, d, d, d, B('-'), S(md)});
        }
        {
            const RuleId hh = b_.add_rule(), frac = b_.add_rule(), zone = b_.add_rule();
            b_.add_alternative(hh, {R('0', '1'), d});
            b_.add_alternative(hh, {B('2'), R('0', '3')});
            const Symbol m0 = R('0', '5');
            b_.add_alternative(frac, {});
            b_.add_alternative(frac, {B('.'), d, S(digits_upto(5))});
            b_.add_alternative(zone, L("Z"));
            b_.add_alternative(zone, {Symbol::byte_set("+-"), S(hh), B(':'), m0, d});
            b_.add_alternative(time, {S(hh), B(':'), m0, d, B(':'), m0, d, S(frac), S(zone)});
        }
        if (format == "date") b_.add_alternative(self, {B('"'), S(date), B('"')});
        if (format == "time") b_.add_alternative(self, {B('"'), S(time), B('"')});
        if (format == "date-time") b_.add_alternative(self, {B('"'), S(date), B('T'), S(time), B('"')});
        if (format == "uuid") {
            Sequence seq = {B('"')};
            for (int group : {8, 4, 4, 4, 12}) {
                if (seq.size() > 1) seq.push_back(B('-'));
                for (int i = 0; i < group; ++i) seq.push_back(hex);
            }
            seq.push_back(B('"'));
            b_.add_alternative(self, std::move(seq));
        }
        return self;
    });
}

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
