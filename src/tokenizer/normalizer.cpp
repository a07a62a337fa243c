// See normalizer.h. Mirrors HF tokenizers' normalizers/{unicode,prepend,replace}.rs and
// pre_tokenizers/metaspace.rs (PreTokenizer for Metaspace).
#include "tokenizer/normalizer.h"

#include "tokenizer/text.h"

namespace sluice::tok {

std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content) {
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    size_t pos = 0;
    for (size_t hit; (hit = text.find(pattern, pos)) != std::string_view::npos; pos = hit + pattern.size()) {
        out.append(text.substr(pos, hit - pos));
        out.append(content);
    }
    out.append(text.substr(pos));
    return out;
}

std::string_view Normalizer::apply(std::string_view text, std::string* scratch) const {
    using Kind = format::NormalizerStep::Kind;
    std::string next;
    for (const auto& step : steps_) {
        switch (step.kind) {
            case Kind::kNfc:
                if (is_nfc_quick(text)) continue;
                next = nfc(text);
                break;
            case Kind::kPrepend:
                if (text.empty()) continue;  // HF: only a non-empty text gets the prefix
                next.reserve(step.content.size() + text.size());
                next.assign(step.content).append(text);
                break;
            case Kind::kReplace:
                if (text.find(step.pattern) == std::string_view::npos) continue;
                next = replace_all(text, step.pattern, step.content);
                break;
        }
        scratch->swap(next);  // `text` may view the old *scratch, now in `next`: read it no more
        text = *scratch;
    }
    return text;
}

void Metaspace::apply(std::string_view text, bool starts_input, std::string* out,
                      std::vector<std::string_view>* pieces) const {
    if (text.empty()) return;  // HF drops empty splits before the pre-tokenizer sees them
    const std::string& rep = spec_.replacement;
    *out = replace_all(text, " ", rep);
    const bool prepend = spec_.prepend_scheme == format::PrependScheme::kAlways ||
                         (spec_.prepend_scheme == format::PrependScheme::kFirst && starts_input);
    if (prepend && out->compare(0, rep.size(), rep) != 0) out->insert(0, rep);
    const std::string_view s = *out;
    if (!spec_.split) {
        pieces->push_back(s);
        return;
    }
    size_t start = 0;
    for (size_t hit = s.find(rep, 1); hit != std::string_view::npos; hit = s.find(rep, hit + rep.size())) {
        pieces->push_back(s.substr(start, hit - start));
        start = hit;
    }
    pieces->push_back(s.substr(start));
}

}  // namespace sluice::tok
