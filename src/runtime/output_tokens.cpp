// End-of-sequence and suppressed ids (see output_tokens.h).
#include "runtime/output_tokens.h"

#include <algorithm>
#include <array>
#include <optional>
#include <span>
#include <string_view>

namespace sluice::runtime {
namespace {

constexpr std::array<std::string_view, 5> kHarmonyMarkup = {"<|start|>", "<|channel|>", "<|message|>",
                                                            "<|end|>", "<|constrain|>"};
constexpr std::array<std::string_view, 2> kHarmonyEnds = {"<|return|>", "<|call|>"};

std::optional<int32_t> special_id(const Tokenizer& tokenizer, std::string_view text) {
    auto id = tokenizer.token_id(text);
    if (!id || !tokenizer.is_special(*id)) return std::nullopt;
    return id;
}

bool contains(const std::vector<int32_t>& ids, int32_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

std::vector<int32_t> harmony_markup_ids(const Tokenizer& tokenizer) {
    std::vector<int32_t> ids;
    for (auto set :
         {std::span<const std::string_view>(kHarmonyMarkup), std::span<const std::string_view>(kHarmonyEnds)})
        for (std::string_view text : set) {
            auto id = special_id(tokenizer, text);
            if (!id) return {};
            ids.push_back(*id);
        }
    ids.resize(kHarmonyMarkup.size());  // the ends are end-of-sequence ids, not markup
    return ids;
}

OutputTokens output_tokens(const Tokenizer* tokenizer, std::vector<int32_t> file_eos_ids,
                           int64_t vocab_size) {
    OutputTokens out;
    out.eos_ids = std::move(file_eos_ids);
    std::vector<int32_t> markup;
    if (tokenizer) {
        if (tokenizer->eos_token())
            if (auto id = tokenizer->token_id(*tokenizer->eos_token())) out.eos_ids.push_back(*id);
        markup = harmony_markup_ids(*tokenizer);
        if (!markup.empty()) {
            for (std::string_view text : kHarmonyEnds) out.eos_ids.push_back(*special_id(*tokenizer, text));
            const int32_t end = *special_id(*tokenizer, "<|end|>");
            std::erase(out.eos_ids, end);
        }
    }
    std::sort(out.eos_ids.begin(), out.eos_ids.end());
    out.eos_ids.erase(std::unique(out.eos_ids.begin(), out.eos_ids.end()), out.eos_ids.end());
    if (!tokenizer) return out;
    for (int32_t id = 0; id < static_cast<int32_t>(vocab_size); ++id) {
        if (contains(out.eos_ids, id) || contains(markup, id)) continue;
        // Rows past the tokenizer's vocabulary are padding: never a valid output.
        if (id >= tokenizer->vocab_size() || tokenizer->is_special(id)) out.suppressed_ids.push_back(id);
    }
    return out;
}

}  // namespace sluice::runtime
