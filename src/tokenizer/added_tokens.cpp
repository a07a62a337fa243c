// See added_tokens.h. Mirrors tokenizers/src/tokenizer/added_vocabulary.rs (find_matches).
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/text.h"

namespace sluice::tok {
namespace {

// The code point that ends at byte `end` (> 0) of valid UTF-8 `s`, and its start.
uint32_t code_point_before(std::string_view s, size_t end, size_t* start) {
    size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    uint32_t cp = 0;
    next_code_point(s.data() + i, &cp);
    *start = i;
    return cp;
}

bool is_whitespace(uint32_t cp) {
    return code_point_classes(cp) & kClassWhitespace;
}
// Rust's `char::is_alphanumeric() || c == '_'`, approximated by \p{L} / \p{N}.
bool is_word_char(uint32_t cp) {
    return cp == '_' || (code_point_classes(cp) & (kClassLetter | kClassNumber));
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<format::AddedTokenSpec> tokens)
    : tokens_(std::move(tokens)) {
    std::stable_sort(tokens_.begin(), tokens_.end(),
                     [](const auto& a, const auto& b) { return a.content.size() > b.content.size(); });
    for (const auto& t : tokens_) first_byte_[static_cast<unsigned char>(t.content[0])] = true;
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special,
                              std::vector<TextSegment>* out) const {
    size_t text_start = 0;  // start of the pending text segment
    size_t pos = 0;
    while (pos < text.size()) {
        if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
            ++pos;
            continue;
        }
        const format::AddedTokenSpec* hit = nullptr;
        for (const auto& t : tokens_) {
            if (t.content.size() <= text.size() - pos &&
                std::memcmp(text.data() + pos, t.content.data(), t.content.size()) == 0) {
                hit = &t;
                break;
            }
        }
        if (!hit) {
            ++pos;
            continue;
        }
        size_t start = pos, stop = pos + hit->content.size();
        if (!parse_special && hit->special) {  // passed over; its span cannot start another match
            pos = stop;
            continue;
        }
        if (hit->single_word) {
            size_t s = 0;
            const bool word_before = start > 0 && is_word_char(code_point_before(text, start, &s));
            uint32_t cp = 0;
            const bool word_after =
                stop < text.size() && (next_code_point(text.data() + stop, &cp), is_word_char(cp));
            if (word_before || word_after) {
                pos = stop;
                continue;
            }
        }
        if (hit->lstrip) {
            while (start > text_start) {
                size_t s = 0;
                if (!is_whitespace(code_point_before(text, start, &s))) break;
                start = s;
            }
        }
        if (hit->rstrip) {
            while (stop < text.size()) {
                uint32_t cp = 0;
                const size_t len = next_code_point(text.data() + stop, &cp);
                if (!is_whitespace(cp)) break;
                stop += len;
            }
        }
        if (start > text_start) out->push_back({text.substr(text_start, start - text_start), -1});
        out->push_back({{}, hit->id});
        pos = text_start = stop;
    }
    if (text_start < text.size()) out->push_back({text.substr(text_start), -1});
}

}  // namespace sluice::tok
