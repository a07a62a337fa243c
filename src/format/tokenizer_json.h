// Parser for HF `tokenizers` files: tokenizer.json (model, added tokens, normaliser,
// pre-tokenizer, decoder) and the parts of tokenizer_config.json the tokenizer needs.
//
// A pure function over the file's text: it validates that the file describes the tokenizer sluice
// implements (byte-level BPE, NFC or no normaliser, a Split regex and/or ByteLevel pre-tokenizer,
// ByteLevel decoder) and returns plain data; anything else is a Status naming the file, the JSON
// field and what was found. Building lookup tables is src/tokenizer/'s job.
// Rejected alternative: accepting unknown component types and ignoring them -- a tokenizer that
// silently differs from the reference is worse than one that refuses to load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice::format {

struct AddedTokenSpec {
    int32_t id = -1;
    std::string content;
    bool single_word = false;
    bool lstrip = false;
    bool rstrip = false;
    bool normalized = false;
    bool special = false;
};

struct TokenizerJson {
    std::vector<AddedTokenSpec> added_tokens;
    bool normalize_nfc = false;  // normalizer NFC (or a Sequence of NFC); false for null
    std::string split_regex;     // the pre-tokenizer regex (Split, or ByteLevel's GPT-2 default)
    std::vector<std::pair<std::string, int32_t>> vocab;       // byte-level strings
    std::vector<std::pair<std::string, std::string>> merges;  // in rank order
    bool ignore_merges = false;
    std::optional<std::string> unk_token;
};

struct TokenizerConfigJson {
    std::optional<std::string> eos_token;
    std::optional<std::string> bos_token;
    std::optional<std::string> pad_token;
    std::vector<AddedTokenSpec> added_tokens_decoder;  // flags that override tokenizer.json's
};

// `path` is used only in error messages.
Expected<TokenizerJson> parse_tokenizer_json(std::string_view text, const std::string& path);
Expected<TokenizerConfigJson> parse_tokenizer_config_json(std::string_view text, const std::string& path);

// The GPT-2 pre-tokenizer regex HF's ByteLevel pre-tokenizer uses when `use_regex` is true.
inline constexpr std::string_view kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The Split regexes of the Qwen families' tokenizer.json: Qwen2/3/3-Next, and Qwen3.5/3.6 (letters
// joined by combining marks, \p{M}). tok::PreTokenizer recognises them by this exact text and runs
// its hand-written matchers; a GGUF's `tokenizer.ggml.pre` "qwen2" / "qwen35" names them.
inline constexpr std::string_view kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kQwen35SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace sluice::format
