// The pre-tokenizer: splits a (normalised) text fragment into the pieces BPE runs on, exactly as
// HF's `Split(pattern, behavior=Isolated)` does with the regex read from tokenizer.json.
//
// The two regexes of the Qwen families (Qwen2/3/3-Next, and Qwen3.5/3.6 with \p{M}) are
// recognised by their exact text and run by a hand-written matcher that reproduces the regex's
// leftmost-first alternation and backtracking case by case (see pretokenizer.cpp); any other regex
// runs through PCRE2 (UTF + UCP, JIT). Matched spans become pieces, and so do the gaps between them.
//
// Thread safety: immutable after create(); split() allocates its own PCRE2 match data per call.
// Rejected alternative: PCRE2 for the Qwen regexes too. It is exact only up to its Unicode tables
// (Unicode 14 in Debian's 10.42, vs 17 in the oracle) and its \s is not Oniguruma's White_Space.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "format/tokenizer_json.h"
#include "sluice/status.h"

namespace sluice::tok {

class PreTokenizer {
 public:
    enum class Kind { kQwen2, kQwen35, kRegex };

    static Expected<PreTokenizer> create(const std::string& regex);

    // Appends the pieces of valid UTF-8 `text` to `pieces` (views into `text`).
    void split(std::string_view text, std::vector<std::string_view>* pieces) const;

    Kind kind() const { return kind_; }

    // The hand-written matchers, exposed so tests can compare them with PCRE2 on the same regex.
    static void split_qwen(std::string_view text, bool marks_join_letters,
                           std::vector<std::string_view>* pieces);

 private:
    struct Regex;
    Kind kind_ = Kind::kRegex;
    std::shared_ptr<const Regex> regex_;
};

// The regexes themselves live with the parsers that produce them (format/tokenizer_json.h).
inline constexpr std::string_view kQwen2Regex = format::kQwen2SplitRegex;
inline constexpr std::string_view kQwen35Regex = format::kQwen35SplitRegex;

}  // namespace sluice::tok
