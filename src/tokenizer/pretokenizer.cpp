// See pretokenizer.h. The hand-written matcher below implements, at each position, the first
// alternative of the Qwen regex that matches (regex alternation is leftmost-first, quantifiers
// greedy with backtracking):
//
//   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)      case-insensitive contraction (ASCII, and 'ſ as 's)
//   2 [^\r\n\p{L}\p{N}]?\p{L}+           optional non-letter/digit/newline, then a letter run
//                                        (Qwen3.5: [\p{L}\p{M}]+ -- marks join letters)
//   3 \p{N}                              one digit
//   4 ' '?[^\s\p{L}\p{N}]+[\r\n]*        optional space, a "punctuation" run (Qwen3.5 also
//                                        excludes \p{M}), then any newlines
//   5 \s*[\r\n]+                         whitespace up to and including the run's last CR/LF
//   6 \s+(?!\S)                          whitespace not followed by non-space: the whole run at
//                                        the end of the text, else the run minus its last char
//   7 \s+                                the (single) whitespace char left over
//
// \s is Unicode White_Space (Oniguruma's definition, the engine HF tokenizers uses).
#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include "core/log.h"
#include "tokenizer/regex_classes.h"
#include "tokenizer/text.h"

namespace sluice::tok {

struct PreTokenizer::Regex {
    pcre2_code* code = nullptr;
    ~Regex() {
        if (code) pcre2_code_free(code);
    }
};

Expected<PreTokenizer::Step> PreTokenizer::compile(const std::string& regex) {
    Step step;
    if (regex == kQwen2Regex) {
        step.kind = Kind::kQwen2;
        return step;
    }
    if (regex == kQwen35Regex) {
        step.kind = Kind::kQwen35;
        return step;
    }
    log::debug("[tokenizer] pre-tokenizer regex is not a known Qwen pattern; matching it with PCRE2: {}",
               regex);
    SLUICE_ASSIGN_OR_RETURN(const std::string spelled, spell_unicode_classes(regex));
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    auto r = std::make_shared<Regex>();
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(spelled.data()), spelled.size(),
                            PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
    if (!r->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        return error(ErrorCode::kUnsupported,
                     fmt::format("[tokenizer] pre-tokenizer regex does not compile at offset "
                                 "{} of its PCRE2 spelling: {} (regex: {})",
                                 err_offset, reinterpret_cast<const char*>(msg), regex));
    }
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
    step.kind = Kind::kRegex;
    step.regex = std::move(r);
    return step;
}

Expected<PreTokenizer> PreTokenizer::create(const std::string& regex) {
    return create(std::vector<std::string>{regex});
}

Expected<PreTokenizer> PreTokenizer::create(const std::vector<std::string>& regexes) {
    PreTokenizer p;
    for (const auto& regex : regexes) {
        SLUICE_ASSIGN_OR_RETURN(Step step, compile(regex));
        p.steps_.push_back(std::move(step));
    }
    return p;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>* pieces) const {
    if (text.empty()) return;
    if (steps_.empty()) {
        pieces->push_back(text);
        return;
    }
    if (steps_.size() == 1) {
        split_step(steps_[0], std::span<const std::string_view>(&text, 1), pieces);
        return;
    }
    // A Sequence: every piece of step k is split by step k+1 (HF PreTokenizedString::split).
    thread_local std::vector<std::string_view> current, next;
    current.assign(1, text);
    for (const Step& step : steps_) {
        next.clear();
        split_step(step, current, &next);
        current.swap(next);
    }
    pieces->insert(pieces->end(), current.begin(), current.end());
}

void PreTokenizer::split_step(const Step& step, std::span<const std::string_view> texts,
                              std::vector<std::string_view>* pieces) {
    if (step.kind != Kind::kRegex) {
        for (std::string_view text : texts) split_qwen(text, step.kind == Kind::kQwen35, pieces);
        return;
    }
    const Regex& regex = *step.regex;
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex.code, nullptr);
    for (std::string_view text : texts) {
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        size_t pos = 0, last = 0;
        while (pos <= text.size()) {
            int rc = pcre2_match(regex.code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
            if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its backtracking state on the heap
                rc = pcre2_match(regex.code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                                 nullptr);
            if (rc < 0) break;  // no more matches (or the heap limit: the rest becomes one piece)
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            const size_t start = ov[0], end = ov[1];
            if (start > last) pieces->push_back(text.substr(last, start - last));
            if (end > start) {
                pieces->push_back(text.substr(start, end - start));
                pos = last = end;
            } else {
                // Empty match: step one code point so the search progresses (HF keeps nothing for it).
                last = start;
                if (start >= text.size()) break;
                uint32_t cp = 0;
                pos = start + next_code_point(text.data() + start, &cp);
            }
        }
        if (last < text.size()) pieces->push_back(text.substr(last));
    }
    pcre2_match_data_free(md);
}

void PreTokenizer::split_qwen(std::string_view text, bool marks_join_letters,
                              std::vector<std::string_view>* pieces) {
    constexpr uint8_t kCrLf = 32, kSpace = 64;  // extra bits next to CodePointClass
    // Decode once: byte offsets and classes of every code point (offset[n] = text.size()).
    thread_local std::vector<uint32_t> offset;
    thread_local std::vector<uint8_t> cls;
    offset.clear();
    cls.clear();
    for (size_t i = 0; i < text.size();) {
        uint32_t cp = 0;
        const size_t len = next_code_point(text.data() + i, &cp);
        uint8_t f = code_point_classes(cp);
        if (cp == '\r' || cp == '\n') f |= kCrLf;
        if (cp == ' ') f |= kSpace;
        offset.push_back(static_cast<uint32_t>(i));
        cls.push_back(f);
        i += len;
    }
    const size_t n = cls.size();
    offset.push_back(static_cast<uint32_t>(text.size()));

    const uint8_t letter = marks_join_letters ? (kClassLetter | kClassMark) : kClassLetter;
    const uint8_t not_punct =
        kClassWhitespace | kClassLetter | kClassNumber | (marks_join_letters ? kClassMark : 0);
    auto lower_ascii = [&](size_t k) -> char {
        const char c = text[offset[k]];
        // Oniguruma's (?i) uses Unicode case folding: U+017F LATIN SMALL LETTER LONG S folds to 's'
        // (the only non-ASCII code point folding to one of the contraction letters).
        if (c == '\xC5' && text[offset[k] + 1] == '\xBF') return 's';
        return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;  // non-ASCII lead bytes stay >= 0x80
    };

    size_t i = 0;
    while (i < n) {
        const uint8_t c = cls[i];
        size_t j = i + 1;
        // 1: contractions.
        if (text[offset[i]] == '\'' && i + 1 < n) {
            const char a = lower_ascii(i + 1);
            if (a == 's' || a == 't' || a == 'm' || a == 'd') {
                j = i + 2;
                goto emit;
            }
            if (i + 2 < n) {
                const char b = lower_ascii(i + 2);
                if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
                    j = i + 3;
                    goto emit;
                }
            }
        }
        // 2: [^\r\n\p{L}\p{N}]?\p{L}+
        if (c & letter) {
            while (j < n && (cls[j] & letter)) ++j;
            goto emit;
        }
        if (!(c & (kClassLetter | kClassNumber | kCrLf)) && i + 1 < n && (cls[i + 1] & letter)) {
            j = i + 2;
            while (j < n && (cls[j] & letter)) ++j;
            goto emit;
        }
        // 3: \p{N}
        if (c & kClassNumber) goto emit;
        // 4: ' '?[^\s\p{L}\p{N}]+[\r\n]*
        {
            size_t k = i;
            if ((c & kSpace) && i + 1 < n && !(cls[i + 1] & not_punct)) k = i + 1;
            if (!(cls[k] & not_punct)) {
                j = k + 1;
                while (j < n && !(cls[j] & not_punct)) ++j;
                while (j < n && (cls[j] & kCrLf)) ++j;
                goto emit;
            }
        }
        // 5-7: c is whitespace here (every other class was taken above).
        {
            size_t run_end = i;
            size_t last_newline = n;
            while (run_end < n && (cls[run_end] & kClassWhitespace)) {
                if (cls[run_end] & kCrLf) last_newline = run_end;
                ++run_end;
            }
            if (run_end == i) {
                j = i + 1;  // unreachable: every code point falls in one of the classes above
            } else if (last_newline != n) {
                j = last_newline + 1;  // 5
            } else if (run_end == n || run_end - i == 1) {
                j = run_end;  // 6 at the end of the text, or 7 for a single char
            } else {
                j = run_end - 1;  // 6: leave the last space to prefix the next word
            }
        }
    emit:
        pieces->push_back(text.substr(offset[i], offset[j] - offset[i]));
        i = j;
    }
}

}  // namespace sluice::tok
