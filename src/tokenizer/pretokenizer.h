// The pre-tokenizer: splits a (normalised) text fragment into the pieces BPE runs on, exactly as
// HF's `Split(pattern, behavior=Isolated)` does with the regex read from tokenizer.json; a Sequence
// of Splits (DeepSeek-V3: digits, then CJK runs, then the word regex) applies each to every piece of
// the one before. With no regex the text is one piece.
//
// The two regexes of the Qwen families (Qwen2/3/3-Next, and Qwen3.5/3.6 with \p{M}) are
// recognised by their exact text and run by a hand-written matcher that reproduces the regex's
// leftmost-first alternation and backtracking case by case (see pretokenizer.cpp); any other regex
// runs through PCRE2 (UTF + UCP, JIT), with its \p{..}, \s and \d spelled as code point ranges of
// sluice's Unicode tables (regex_classes.h) so that PCRE2's older tables do not decide. Matched
// spans become pieces, and so do the gaps between them.
//
// Thread safety: immutable after create(); split() allocates its own PCRE2 match data per call.
// Rejected alternative: PCRE2 for the Qwen regexes too. Before its classes were spelled out it was
// exact only up to its own Unicode tables (Unicode 14 in Debian's 10.42, vs 17 in the oracle) and its
// \s is not Oniguruma's White_Space; the hand-written matchers stay as the Qwen fast path and are
// checked against the spelled-out PCRE2 form (tests/unit/tokenizer_test.cpp, and both give the same
// ids on the whole oracle corpus).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/tokenizer_json.h"
#include "sluice/status.h"

namespace sluice::tok {

class PreTokenizer {
 public:
    enum class Kind { kQwen2, kQwen35, kRegex, kNone };

    // One Split step.
    static Expected<PreTokenizer> create(const std::string& regex);
    // Split steps in order; none: the text is one piece.
    static Expected<PreTokenizer> create(const std::vector<std::string>& regexes);

    // Appends the pieces of valid UTF-8 `text` to `pieces` (views into `text`).
    void split(std::string_view text, std::vector<std::string_view>* pieces) const;

    // The first step's matcher (kNone without steps).
    Kind kind() const { return steps_.empty() ? Kind::kNone : steps_[0].kind; }

    // The hand-written matchers, exposed so tests can compare them with PCRE2 on the same regex.
    static void split_qwen(std::string_view text, bool marks_join_letters,
                           std::vector<std::string_view>* pieces);

 private:
    struct Regex;
    struct Step {
        Kind kind = Kind::kRegex;
        std::shared_ptr<const Regex> regex;  // kRegex only
    };
    static Expected<Step> compile(const std::string& regex);
    // Appends the pieces of each of `texts` (one PCRE2 match data for all of them).
    static void split_step(const Step& step, std::span<const std::string_view> texts,
                           std::vector<std::string_view>* pieces);

    std::vector<Step> steps_;
};

// The regexes themselves live with the parsers that produce them (format/tokenizer_json.h).
inline constexpr std::string_view kQwen2Regex = format::kQwen2SplitRegex;
inline constexpr std::string_view kQwen35Regex = format::kQwen35SplitRegex;

}  // namespace sluice::tok
