// Objects (JsonSchemaCompiler::compile_object, see json_schema_compiler.h).
//
// What is generated:
// - Declared members: `properties` in declaration order, required ones always, optional ones when
//   the model chooses; a required name missing from `properties` is a member too, under the schema
//   its key falls under (the one patternProperties entry matching it, else additionalProperties).
// - Extra members, after the declared ones, in kinds: one per patternProperties entry (keys that
//   match it and no other entry: where two match, both schemas would apply, so those keys are not
//   generated) and one for additionalProperties (keys matching no entry). Every kind's keys are
//   within `propertyNames` and are never a declared name (a repeated key would replace a member).
//   The additionalProperties kind exists when additionalProperties is a schema that constrains
//   something, or for a free map (no declared member, no patternProperties); absent, true or {}
//   beside declared members it adds no key — a model asked for a shape should not invent members.
// - minProperties / maxProperties: a JSON object has one member per key, and a context-free
//   grammar cannot keep free keys distinct, so only one extra member counts toward minProperties
//   (declared members are distinct by construction); every member counts toward maxProperties
//   (a repeat only lowers the real count).
// - A member a key kind or propertyNames cannot take: an optional one is never generated, a
//   required one is an error naming it; a declared property that a patternProperties entry also
//   matches is refused unless that entry's schema constrains nothing (both would apply: allOf).
//
// The rules, with c the members written so far (kept up to maxProperties, or up to minProperties
// where it then stays), n the declared members:
//   '{' ws F(0)
//   F(i), i < n:  F(i+1) if i is optional | pair_i ws B(i+1, 1)             (nothing written yet)
//   B(i, c), i < n: B(i+1, c) if optional | ',' ws pair_i ws B(i+1, c+1)
//   F(n): '}' | extra ws X(1);  B(n, c): '}' | ',' ws extra ws X(c+1)      (when c allows)
//   X(c): '}' | ',' ws extra ws X(c+1)                                        (extras written)
// Skipping an optional member is a reference with no bytes, so every member written is one path.
#include <algorithm>
#include <map>
#include <tuple>

#include "constrain/json_schema_compiler.h"
#include "constrain/regex.h"

namespace sluice {

using constrain::Dfa;
using constrain::Regex;
using schema_grammar::B;
using schema_grammar::cat;
using schema_grammar::L;
using schema_grammar::S;
using RuleId = GrammarBuilder::RuleId;
using Sequence = GrammarBuilder::Sequence;
using ojson = nlohmann::ordered_json;

namespace {

// Keys (decoded) as code points; invalid UTF-8 cannot come out of a parsed JSON text.
std::u32string code_points(const std::string& s) {
    std::u32string out;
    constrain::decode_utf8(s, &out);
    return out;
}

}  // namespace

Expected<JsonSchemaCompiler::StringLanguage> JsonSchemaCompiler::key_language(const ojson& s,
                                                                              const std::string& path) {
    StringLanguage any;
    if (s.is_boolean()) {
        if (!s.get<bool>()) any.dfa = *constrain::regex_dfa(Regex::of_chars({}), kMaxAutomatonStates);
        return any;
    }
    if (!s.is_object()) return fail(path, "'propertyNames' must be a schema");
    auto admits_strings = [&]() {
        auto it = s.find("type");
        if (it == s.end()) return true;
        if (it->is_string()) return *it == "string";
        return it->is_array() && std::find(it->begin(), it->end(), "string") != it->end();
    };
    if (s.contains("enum") || s.contains("const")) {
        std::vector<Regex> names;
        for (const auto& item : s.items()) {
            const std::string& k = item.key();
            if (k != "enum" && k != "const" && k != "type" && !annotation_keywords().count(k))
                return unsupported(path, k, "beside 'enum'/'const' in 'propertyNames'");
        }
        std::vector<ojson> values;
        if (auto it = s.find("enum"); it != s.end()) {
            if (!it->is_array()) return fail(path, "'enum' must be an array");
            values.assign(it->begin(), it->end());
        }
        if (auto it = s.find("const"); it != s.end()) {
            const bool listed =
                !s.contains("enum") || std::find(values.begin(), values.end(), *it) != values.end();
            values.clear();
            if (listed) values.push_back(*it);
        }
        if (admits_strings())
            for (const ojson& v : values)
                if (v.is_string()) names.push_back(Regex::literal(code_points(v.get<std::string>())));
        StringLanguage lang;
        auto dfa = constrain::regex_dfa(Regex::whole_text(Regex::alternation(std::move(names))),
                                        kMaxAutomatonStates);
        if (!dfa) return automaton_error(path, "enum", "of property names", dfa.status());
        lang.dfa = std::move(*dfa);
        return lang;
    }
    for (const auto& item : s.items()) {
        const std::string& k = item.key();
        if (k == "type" || k == "minLength" || k == "maxLength" || k == "pattern" || k == "format" ||
            annotation_keywords().count(k))
            continue;
        return unsupported(
            path, k,
            "inside 'propertyNames' (keys take type, enum, const, pattern, format, minLength, maxLength)");
    }
    if (!admits_strings()) return key_language(false, path);
    return string_language(s, path);
}

Expected<RuleId> JsonSchemaCompiler::compile_object(const ojson& s, const std::string& path) {
    static const ojson kTrue = true;
    std::vector<Member> members;
    if (auto it = s.find("properties"); it != s.end()) {
        if (!it->is_object()) return fail(path, "'properties' must be an object");
        for (const auto& [k, v] : it->items())
            members.push_back({k, &v, path + "/properties/" + k, false, true});
    }
    const ojson* additional = nullptr;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
        if (!it->is_boolean() && !it->is_object())
            return fail(path, "'additionalProperties' must be a boolean or a schema");
        additional = &*it;
    }
    const bool additional_false = additional && *additional == false;
    std::vector<PatternEntry> patterns;
    if (auto it = s.find("patternProperties"); it != s.end()) {
        if (!it->is_object()) return fail(path, "'patternProperties' must be an object");
        for (const auto& [re, schema] : it->items()) {
            SLUICE_ASSIGN_OR_RETURN(Dfa dfa,
                                    pattern_automaton(re, path + "/patternProperties", "patternProperties"));
            patterns.push_back({re, &schema, std::move(dfa)});
        }
    }
    StringLanguage names;
    if (auto it = s.find("propertyNames"); it != s.end()) {
        SLUICE_ASSIGN_OR_RETURN(names, key_language(*it, path + "/propertyNames"));
    }
    auto name_allowed = [&](const std::string& name) {
        const std::u32string text = code_points(name);
        const auto length = static_cast<int64_t>(text.size());
        return (!names.dfa || names.dfa->accepts(text)) && length >= names.min_length &&
               (names.max_length < 0 || length <= names.max_length);
    };
    if (auto it = s.find("required"); it != s.end()) {
        if (!it->is_array()) return fail(path, "'required' must be an array of strings");
        for (const auto& r : *it) {
            if (!r.is_string()) return fail(path, "'required' must be an array of strings");
            const std::string name = r.get<std::string>();
            auto m =
                std::find_if(members.begin(), members.end(), [&](const Member& x) { return x.name == name; });
            if (m != members.end()) {
                m->required = true;
                continue;
            }
            // Not in `properties`: the schema of its key's kind.
            std::vector<const PatternEntry*> matching;
            for (const PatternEntry& p : patterns)
                if (p.dfa.accepts(code_points(name))) matching.push_back(&p);
            if (matching.size() > 1)
                return unsupported(path, "patternProperties",
                                   "the required property '" + name + "' matches both '" +
                                       matching[0]->regex + "' and '" + matching[1]->regex +
                                       "' (both schemas would apply)");
            if (matching.size() == 1) {
                members.push_back({name, matching[0]->schema,
                                   path + "/patternProperties/" + matching[0]->regex, true, false});
            } else {
                if (additional_false)
                    return fail(path, "required property '" + name +
                                          "' is not in 'properties' and additionalProperties is false");
                members.push_back(
                    {name, additional ? additional : &kTrue, path + "/additionalProperties", true, false});
            }
        }
    }
    // Members the key constraints rule out, and declared properties a pattern also governs.
    std::erase_if(members, [&](const Member& m) { return !m.required && !name_allowed(m.name); });
    for (const Member& m : members) {
        if (!name_allowed(m.name))
            return fail(path, "required property '" + m.name + "' does not satisfy 'propertyNames'");
        if (!m.declared) continue;
        for (const PatternEntry& p : patterns)
            if (p.dfa.accepts(code_points(m.name)) && !constrains_nothing(*p.schema))
                return unsupported(path, "patternProperties",
                                   "'" + p.regex + "' also matches the property '" + m.name +
                                       "', so both schemas would apply to it");
    }

    // Extra members: their kinds, as (key rule, value rule).
    const bool free_map = members.empty() && patterns.empty();
    const bool additional_kind =
        !additional_false && ((additional && !constrains_nothing(*additional)) || free_map);
    const bool names_restricted = names.dfa || names.min_length > 0 || names.max_length >= 0;
    SLUICE_ASSIGN_OR_RETURN(
        auto kinds, extra_kinds(members, patterns, names,
                                additional_kind ? (additional ? additional : &kTrue) : nullptr, path));

    // Counts.
    SLUICE_ASSIGN_OR_RETURN(int64_t min_props, count(s, path, "minProperties", 0));
    SLUICE_ASSIGN_OR_RETURN(int64_t max_props, count(s, path, "maxProperties", -1));
    if (max_props >= 0 && min_props > max_props)
        return fail(path, "minProperties " + std::to_string(min_props) + " > maxProperties " +
                              std::to_string(max_props));
    const auto n = static_cast<int64_t>(members.size());
    const auto required_count = static_cast<int64_t>(
        std::count_if(members.begin(), members.end(), [](const Member& m) { return m.required; }));
    if (max_props >= 0 && required_count > max_props)
        return fail(path, "maxProperties " + std::to_string(max_props) + " is less than the " +
                              std::to_string(required_count) + " required properties");
    const bool extras = !kinds.empty();
    if (min_props > n + (extras ? 1 : 0))
        return unsupported(path, "minProperties",
                           std::to_string(min_props) + " with " + std::to_string(n) + " declared properties" +
                               (extras ? " and free keys: only one free key counts, since repeated free keys "
                                         "could be the same key (a JSON object keeps one)"
                                       : " and no other key allowed"));

    // Member rules: key ws ':' ws value.
    std::vector<RuleId> pair(members.size());
    for (size_t i = 0; i < members.size(); ++i) {
        SLUICE_ASSIGN_OR_RETURN(RuleId value, compile(*members[i].schema, members[i].schema_path));
        pair[i] = b_.add_rule();
        b_.add_alternative(pair[i],
                           cat({L(json_text(ojson(members[i].name))), {S(ws()), B(':'), S(ws()), S(value)}}));
    }
    if (n == 0 && !extras)
        return shared("{}", [&](RuleId self) {
            b_.add_alternative(self, {B('{'), S(ws()), B('}')});
            return self;
        });
    if (n == 0 && kinds.size() == 1 && min_props == 0 && max_props < 0 && !names_restricted &&
        patterns.empty())
        return free_object(kinds[0].second);
    std::optional<RuleId> extra;
    if (extras) {
        extra = b_.add_rule();
        for (const auto& [key, value] : kinds)
            b_.add_alternative(*extra, {S(key), S(ws()), B(':'), S(ws()), S(value)});
    }
    std::vector<bool> required(members.size());
    for (size_t i = 0; i < members.size(); ++i) required[i] = members[i].required;
    return members_rule(pair, required, extra, min_props, max_props, path);
}

// Extra members' kinds (see the file comment): key automata names ∧ (this entry) ∧ ¬(other
// entries) ∧ ¬(declared names), each with its value schema; `additional` is the
// additionalProperties schema when that kind is generated. Kinds without a key are left out.
Expected<std::vector<std::pair<RuleId, RuleId>>> JsonSchemaCompiler::extra_kinds(
    const std::vector<Member>& members, const std::vector<PatternEntry>& patterns,
    const StringLanguage& names, const ojson* additional, const std::string& path) {
    std::vector<std::pair<RuleId, RuleId>> kinds;
    if (patterns.empty() && !additional) return kinds;
    const bool names_restricted = names.dfa || names.min_length > 0 || names.max_length >= 0;
    if (patterns.empty() && members.empty() && !names_restricted) {  // any key: the shared free string
        SLUICE_ASSIGN_OR_RETURN(RuleId value, compile(*additional, path + "/additionalProperties"));
        kinds.emplace_back(string_rule(0, -1), value);
        return kinds;
    }
    Dfa base = names.dfa ? *names.dfa : Dfa::any_text();
    if (!members.empty()) {
        std::vector<Regex> declared;
        for (const Member& m : members) declared.push_back(Regex::literal(code_points(m.name)));
        auto dfa = constrain::regex_dfa(Regex::whole_text(Regex::alternation(std::move(declared))),
                                        kMaxAutomatonStates);
        if (!dfa) return automaton_error(path, "properties", "(their names)", dfa.status());
        auto rest = Dfa::combine(base, *dfa, Dfa::Op::kAndNot, kMaxAutomatonStates);
        if (!rest) return automaton_error(path, "properties", "(keys beside them)", rest.status());
        base = rest->minimized();
    }
    // The keys of entry `entry` (none: of additionalProperties).
    auto keys_of = [&](std::optional<size_t> entry) -> Expected<Dfa> {
        Dfa keys = base;
        for (size_t j = 0; j < patterns.size(); ++j) {
            const auto op = entry == j ? Dfa::Op::kAnd : Dfa::Op::kAndNot;
            auto next = Dfa::combine(keys, patterns[j].dfa, op, kMaxAutomatonStates);
            if (!next)
                return automaton_error(path, "patternProperties", "(keys of each kind)", next.status());
            keys = next->minimized();
        }
        return keys;
    };
    auto add_kind = [&](Dfa keys, const ojson& schema, const std::string& schema_path,
                        const std::string& keyword) -> Status {
        // No key of this kind (within propertyNames' lengths too): the kind is left out.
        const int64_t shortest = keys.shortest_length(), longest = keys.longest_length();
        if (shortest < 0 || (names.max_length >= 0 && shortest > names.max_length) ||
            (longest >= 0 && longest < names.min_length))
            return Status::ok();
        StringLanguage lang{std::move(keys), names.min_length, names.max_length};
        SLUICE_ASSIGN_OR_RETURN(RuleId key, string_of(lang, path, keyword));
        SLUICE_ASSIGN_OR_RETURN(RuleId value, compile(schema, schema_path));
        kinds.emplace_back(key, value);
        return Status::ok();
    };
    for (size_t i = 0; i < patterns.size(); ++i) {
        SLUICE_ASSIGN_OR_RETURN(Dfa keys, keys_of(i));
        SLUICE_RETURN_IF_ERROR(add_kind(std::move(keys), *patterns[i].schema,
                                        path + "/patternProperties/" + patterns[i].regex,
                                        "patternProperties"));
    }
    if (additional) {
        SLUICE_ASSIGN_OR_RETURN(Dfa keys, keys_of(std::nullopt));
        SLUICE_RETURN_IF_ERROR(
            add_kind(std::move(keys), *additional, path + "/additionalProperties", "additionalProperties"));
    }
    return kinds;
}

// The state machine of the file comment over member rules `pair` (key ws ':' ws value) and the
// extra members' rule, rules made on first reference.
Expected<RuleId> JsonSchemaCompiler::members_rule(const std::vector<RuleId>& pair,
                                                  const std::vector<bool>& required,
                                                  std::optional<RuleId> extra, int64_t min_props,
                                                  int64_t max_props, const std::string& path) {
    const auto n = static_cast<int64_t>(pair.size());
    const bool bounded = max_props >= 0;
    auto saturate = [&](int64_t c) { return bounded ? c : std::min(c, min_props); };
    enum Kind { kFirst, kAfter, kExtras };
    std::map<std::tuple<Kind, int64_t, int64_t>, RuleId> rules;
    std::vector<std::tuple<Kind, int64_t, int64_t>> todo;
    auto rule_of = [&](Kind kind, int64_t i, int64_t c) {
        auto [it, fresh] = rules.emplace(std::make_tuple(kind, i, c), 0);
        if (fresh) {
            it->second = b_.add_rule();
            todo.emplace_back(kind, i, c);
        }
        return it->second;
    };
    const RuleId start = rule_of(kFirst, 0, 0);
    while (!todo.empty()) {
        if ((bounded || min_props > 0) && rules.size() > kMaxAutomatonStates)
            return unsupported(path, bounded ? "maxProperties" : "minProperties",
                               "counting " + std::to_string(n) + " properties up to " +
                                   std::to_string(bounded ? max_props : min_props) + " needs more than " +
                                   std::to_string(kMaxAutomatonStates) + " rules");
        const auto [kind, i, c] = todo.back();
        todo.pop_back();
        const RuleId r = rules.at(std::make_tuple(kind, i, c));
        const bool room = !bounded || c + 1 <= max_props;  // one more member fits
        const Sequence comma = kind == kFirst ? Sequence{} : Sequence{B(','), S(ws())};
        if (kind == kExtras) {
            b_.add_alternative(r, L("}"));
            if (room)
                b_.add_alternative(
                    r, cat({comma, {S(*extra), S(ws()), S(rule_of(kExtras, 0, bounded ? c + 1 : 0))}}));
            continue;
        }
        if (i < n) {
            if (room)
                b_.add_alternative(r, cat({comma,
                                           {S(pair[static_cast<size_t>(i)]), S(ws()),
                                            S(rule_of(kAfter, i + 1, saturate(c + 1)))}}));
            // The skip last: the matcher expands a rule's last alternative in a loop, not by recursion,
            // so a long run of optional members costs no stack depth.
            if (!required[static_cast<size_t>(i)]) b_.add_alternative(r, {S(rule_of(kind, i + 1, c))});
            continue;
        }
        if (c >= min_props) b_.add_alternative(r, L("}"));
        if (extra && room && saturate(c + 1) >= min_props)
            b_.add_alternative(
                r, cat({comma, {S(*extra), S(ws()), S(rule_of(kExtras, 0, bounded ? c + 1 : 0))}}));
    }
    const RuleId self = b_.add_rule();
    b_.add_alternative(self, {B('{'), S(ws()), S(start)});
    return self;
}

}  // namespace sluice
