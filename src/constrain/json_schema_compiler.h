// The JSON Schema → grammar compiler behind GrammarBuilder::add_json_schema (sluice/constrain.h),
// split by kind of value: json_schema.cpp (dispatch, $ref, enum, numbers, arrays, the shared
// helper rules), json_schema_strings.cpp (strings: pattern, format, lengths, and any automaton
// written out as rules), json_schema_objects.cpp (objects: properties, additional and pattern
// properties, property names and counts), json_schema_xml.cpp (a tool's arguments in the XML
// tool-call form of Qwen3.5 / Qwen3-Coder). What the grammar derives for each keyword is described
// at the top of json_schema.cpp and in docs/SERVER.md.
//
// Data lifetime: one compiler per add_json_schema call; helper rules shared between calls (and
// between equal sub-schemas) live in the builder's shared_rules_. Threading: none.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "constrain/automaton.h"
#include "constrain/grammar_impl.h"

namespace sluice {

// Short names for building rule sequences: S(rule), B(byte), R(lo, hi), L("literal"), cat({...}).
namespace schema_grammar {
using RuleId = GrammarBuilder::RuleId;
using Symbol = GrammarBuilder::Symbol;
using Sequence = GrammarBuilder::Sequence;
inline Symbol S(RuleId r) {
    return Symbol::ref(r);
}
inline Symbol B(char c) {
    return Symbol::byte_range(static_cast<uint8_t>(c), static_cast<uint8_t>(c));
}
inline Symbol R(uint8_t lo, uint8_t hi) {
    return Symbol::byte_range(lo, hi);
}
inline Sequence L(std::string_view text) {
    return GrammarBuilder::literal(text);
}
inline Sequence cat(std::initializer_list<Sequence> parts) {
    Sequence out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}
}  // namespace schema_grammar

// Limits that keep a hostile schema from making a huge grammar (each refusal names the keyword).
constexpr int64_t kMaxRepetition = 10000;  // largest minItems/maxItems/minLength/maxLength expanded
constexpr int kMaxIntegerDigits = 15;      // integers stay exact in a double
constexpr int64_t kMaxAlternationProduct = 1024;
// States of one automaton (a pattern, a format, their intersection, a key language, the digits of
// a multipleOf), and of one string's automaton times its length counter.
constexpr size_t kMaxAutomatonStates = 16384;
// Automaton states written as rules by one add_json_schema call, all strings and numbers together.
constexpr int64_t kMaxSchemaAutomatonStates = 8 * static_cast<int64_t>(kMaxAutomatonStates);
constexpr int64_t kMaxMultipleOf = 1000;

class JsonSchemaCompiler {
 public:
    using RuleId = GrammarBuilder::RuleId;
    using Sequence = GrammarBuilder::Sequence;
    using ojson = nlohmann::ordered_json;

    JsonSchemaCompiler(GrammarBuilder& b, const ojson& root, std::string where)
        : b_(b), root_(root), where_(std::move(where)) {}

    Expected<RuleId> compile(const ojson& s, const std::string& path);
    // A tool's arguments in a tagged tool-call form (json_schema_xml.cpp,
    // GrammarBuilder::add_tagged_tool_arguments), `s` the parameters schema (the root).
    Expected<RuleId> compile_tagged_arguments(const ojson& s, const GrammarBuilder::ArgumentMarkup& markup,
                                              const std::string& path);

    // ---- shared helper rules (json_schema.cpp) ----
    // Between tokens: nothing, one space, or a newline and up to kMaxIndent spaces.
    RuleId ws();
    // "..." with a length in [min, max] code points (max < 0: unbounded), any characters.
    RuleId string_rule(int64_t min, int64_t max);
    // `v` as JSON text for a literal (an enum value, a property name), the guard's last character
    // escaped wherever a string spells the guard (GrammarBuilder::guard_json_strings).
    std::string json_text(const ojson& v) const;
    RuleId digits_upto(int n);  // zero to n digits
    RuleId integer();
    RuleId number();
    RuleId any_value();
    RuleId free_object(RuleId value);  // {"k": value, ...} with any keys
    RuleId array_of(RuleId item, int64_t min, int64_t max);

 private:
    // A set of strings: those of an automaton over code points (none: any string), with a length
    // in [min_length, max_length] (max_length < 0: unbounded).
    struct StringLanguage {
        std::optional<constrain::Dfa> dfa;
        int64_t min_length = 0, max_length = -1;
    };

    // The text no JSON string holds (GrammarBuilder::guard_json_strings; empty: none).
    const std::string& guard() const { return b_.json_string_guard_; }
    // string_rule under a guard: the length counter times the guard's match state.
    RuleId guarded_string_rule(int64_t min, int64_t max);
    // The ways to write one character inside a JSON string: the one-byte characters (one byte set)
    // first, the UTF-8 sequences, then '\\' and an escape.
    std::vector<Sequence> json_chars();
    RuleId shared(const std::string& name, const std::function<RuleId(RuleId)>& make);
    std::optional<RuleId> find_shared(const std::string& name) const;
    Status fail(const std::string& path, const std::string& message) const;
    Status unsupported(const std::string& path, const std::string& keyword,
                       const std::string& why = "") const;
    // A regex/automaton error about `keyword` at `path`: kUnsupported ones say "not supported".
    Status automaton_error(const std::string& path, const std::string& keyword, const std::string& subject,
                           const Status& cause) const;
    Expected<int64_t> count(const ojson& s, const std::string& path, const char* key, int64_t fallback);

    // json_schema.cpp
    Expected<RuleId> compile_ref(const ojson& s, const std::string& path);
    Expected<RuleId> compile_enum(const ojson& s, const std::string& path);
    Expected<RuleId> compile_type(const ojson& s, const std::string& type, const std::string& path);
    Expected<RuleId> compile_array(const ojson& s, const std::string& path);
    RuleId tuple_rule(const std::vector<RuleId>& prefix, std::optional<RuleId> rest, int64_t min,
                      int64_t max);
    Expected<RuleId> compile_number(const ojson& s, bool integer_only, const std::string& path);
    Expected<RuleId> multiples_rule(int64_t lo, int64_t hi, int64_t modulus, const std::string& path);
    RuleId digit_range(const std::string& a, const std::string& b);
    RuleId natural_range(int64_t lo, int64_t hi);

    // json_schema_strings.cpp
    Expected<RuleId> compile_string(const ojson& s, const std::string& path);
    // minLength, maxLength, pattern and format of `s` (other keywords are not looked at).
    Expected<StringLanguage> string_language(const ojson& s, const std::string& path);
    // `pattern` as an automaton (unanchored: JSON Schema's meaning); `keyword` names it in errors.
    Expected<constrain::Dfa> pattern_automaton(const ojson& pattern, const std::string& path,
                                               const std::string& keyword);
    Expected<constrain::Dfa> format_automaton(const std::string& format, const std::string& path);
    // A JSON string whose value is in `language` (the quotes included); with json_string false, the
    // text itself (its UTF-8 bytes; `language` must have an automaton).
    Expected<RuleId> string_of(const StringLanguage& language, const std::string& path,
                               const std::string& keyword, bool json_string = true);
    // The texts of `dfa` with a length in [min, max], each code point as its JSON string
    // encodings inside quotes (`json_string`) or as its UTF-8 bytes.
    Expected<RuleId> emit_automaton(const constrain::Dfa& dfa, int64_t min, int64_t max, bool json_string,
                                    const std::string& path, const std::string& keyword);

    // json_schema_objects.cpp
    struct Member {  // a declared member: in `properties`, or a required name
        std::string name;
        const ojson* schema;
        std::string schema_path;
        bool required = false;
        bool declared = false;  // listed in `properties`
    };
    struct PatternEntry {  // one entry of patternProperties
        std::string regex;
        const ojson* schema;
        constrain::Dfa dfa;
    };
    Expected<RuleId> compile_object(const ojson& s, const std::string& path);
    // `propertyNames` as a language of keys.
    Expected<StringLanguage> key_language(const ojson& s, const std::string& path);
    Expected<std::vector<std::pair<RuleId, RuleId>>> extra_kinds(const std::vector<Member>& members,
                                                                 const std::vector<PatternEntry>& patterns,
                                                                 const StringLanguage& names,
                                                                 const ojson* additional,
                                                                 const std::string& path);
    Expected<RuleId> members_rule(const std::vector<RuleId>& pair, const std::vector<bool>& required,
                                  std::optional<RuleId> extra, int64_t min_props, int64_t max_props,
                                  const std::string& path);

    // json_schema_xml.cpp: a string, written as its text (the XML tool-call form)
    Expected<RuleId> compile_tagged_text(const ojson& s, std::string_view text_ends, const std::string& path);

    GrammarBuilder& b_;
    const ojson& root_;
    std::string where_;
    std::map<std::string, RuleId> refs_;  // JSON pointer → rule (also while being compiled: recursion)
    int64_t alternation_product_ = 1;     // product of anyOf/oneOf branch counts on the current path
    std::map<std::string, constrain::Dfa> formats_;  // format name → automaton, built on first use
    int64_t automaton_states_ = 0;                   // written as rules so far (kMaxSchemaAutomatonStates)
};

// Annotation keywords: accepted anywhere, no effect on the grammar.
const std::set<std::string>& annotation_keywords();
// A schema every value satisfies (true, or an object of annotations only).
bool constrains_nothing(const nlohmann::ordered_json& schema);
// One of the string formats json_schema_strings.cpp compiles.
bool is_string_format(const std::string& format);
// "\u00XX" for an ASCII character `c`.
std::string json_escape(char c);

}  // namespace sluice
