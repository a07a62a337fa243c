// TextStream: stop strings matched across token boundaries and never emitted, held-back prefixes
// released when they turn out not to be stops, whole UTF-8 characters only, on the default model's
// tokenizer (byte-level BPE, so multi-byte characters do split across tokens).
#include "sluice/text_stream.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

std::shared_ptr<const Tokenizer> tokenizer() {
    static auto tok = Tokenizer::load(std::string(SLUICE_SOURCE_DIR) + "/models/tiny-next");
    EXPECT_TRUE(tok.has_value()) << tok.status().message();
    return tok.has_value() ? *tok : nullptr;
}

struct Streamed {
    std::vector<std::string> pieces;  // one per token fed
    std::string text;                 // all emitted text, flush included
    bool stopped = false;
    std::string stop;
};

Streamed stream(const std::string& input, std::vector<std::string> stops) {
    auto tok = tokenizer();
    TextStream ts(tok, std::move(stops));
    Streamed r;
    for (int32_t id : tok->encode(input, false)) {
        TextStream::Piece p = ts.feed(id);
        r.pieces.push_back(p.text);
        r.text += p.text;
        if (p.stopped) {
            r.stopped = true;
            r.stop = p.stop;
            break;
        }
    }
    if (!r.stopped) r.text += ts.flush();
    return r;
}

TEST(TextStream, StopStringAcrossTokensEndsTheStreamUnemitted) {
    ASSERT_TRUE(tokenizer());
    const auto ids = tokenizer()->encode("def f():\n    return 1\n###\nmore text", false);
    ASSERT_GT(ids.size(), 4u);
    Streamed r = stream("def f():\n    return 1\n###\nmore text", {"###"});
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.stop, "###");
    EXPECT_EQ(r.text, "def f():\n    return 1\n");
    for (const auto& p : r.pieces) EXPECT_EQ(p.find('#'), std::string::npos) << "a stop prefix was emitted";
}

TEST(TextStream, AHeldPrefixThatIsNoStopIsReleased) {
    Streamed r = stream("a # b ## c", {"###"});
    EXPECT_FALSE(r.stopped);
    EXPECT_EQ(r.text, "a # b ## c");
}

TEST(TextStream, TheEarliestStopWins) {
    Streamed r = stream("one two three four", {"four", "two"});
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.stop, "two");
    EXPECT_EQ(r.text, "one ");
}

TEST(TextStream, WholeCharactersOnlyAndEmptyStopsIgnored) {
    const std::string input = "naïve café — 日本語 ok";
    Streamed r = stream(input, {""});
    EXPECT_FALSE(r.stopped);
    EXPECT_EQ(r.text, input);
    for (const auto& p : r.pieces) {
        // Every piece is valid UTF-8 on its own: no piece ends inside a multi-byte character.
        size_t i = 0;
        while (i < p.size()) {
            const auto c = static_cast<unsigned char>(p[i]);
            const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
            ASSERT_LE(i + len, p.size()) << "a piece ends inside a character";
            i += len;
        }
    }
}

TEST(TextStream, NothingAfterAStop) {
    auto tok = tokenizer();
    ASSERT_TRUE(tok);
    TextStream ts(tok, {"x"});
    const auto ids = tok->encode("axb", false);
    bool stopped = false;
    for (int32_t id : ids) {
        auto p = ts.feed(id);
        if (stopped) {
            EXPECT_TRUE(p.text.empty());
        }
        stopped = stopped || p.stopped;
    }
    EXPECT_TRUE(stopped);
    EXPECT_TRUE(ts.stopped());
    EXPECT_TRUE(ts.flush().empty());
}

}  // namespace
}  // namespace sluice
