// Splits text around added tokens (<|im_start|>, <think>, ...) before normalisation and
// pre-tokenisation, as HF's AddedVocabulary::split_with_indices does: leftmost-longest
// non-overlapping matches; `single_word` drops a match touching a word character; `lstrip` /
// `rstrip` absorb the whitespace before / after the token into it. With `parse_special` false a
// match of a special token is passed over (its text stays text), HF's `encode_special_tokens`.
//
// Immutable after construction; split() is reentrant.
// Rejected alternative: a trie or Aho-Corasick automaton. Qwen has 26 added tokens sharing two
// first bytes ('<'), so a first-byte filter plus memcmp against the few candidates is as fast.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/tokenizer_json.h"

namespace sluice::tok {

struct TextSegment {
    std::string_view text;  // a slice of the input (empty for a token)
    int32_t token_id = -1;  // >= 0: an added token
};

class AddedTokenMatcher {
 public:
    AddedTokenMatcher() = default;
    explicit AddedTokenMatcher(std::vector<format::AddedTokenSpec> tokens);

    bool empty() const { return tokens_.empty(); }
    // Appends the segments of `text` (valid UTF-8). Text segments are never empty.
    void split(std::string_view text, bool parse_special, std::vector<TextSegment>* out) const;

 private:
    std::vector<format::AddedTokenSpec> tokens_;  // longest first
    std::array<bool, 256> first_byte_{};
};

}  // namespace sluice::tok
