// Parser for HF `tokenizers` files: tokenizer.json (model, added tokens, normaliser,
// pre-tokenizer, decoder) and the parts of tokenizer_config.json the tokenizer needs.
//
// A pure function over the file's text: it validates that the file describes a tokenizer sluice
// implements and returns plain data; anything else is a Status naming the file, the JSON field and
// what was found. Building lookup tables is src/tokenizer/'s job. Two families are implemented:
//   byte-level BPE (GPT-2 / Qwen / DeepSeek-V3 / gpt-oss): a ByteLevel pre-tokenizer step, after
//     any number of Split(Isolated) regex steps; a ByteLevel decoder; normaliser NFC or none.
//   SentencePiece-style BPE (Llama 2, Mistral, Mixtral): no ByteLevel step; the BPE symbols are
//     characters, with byte_fallback (<0xNN> tokens) and fuse_unk; spaces become "▁" either by a
//     normaliser Sequence[Prepend "▁", Replace " " -> "▁"] or by a Metaspace pre-tokenizer
//     (split false or true); decoder Sequence[Replace "▁" -> " ", ByteFallback, Fuse, Strip] or
//     Metaspace.
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

// One normaliser step, in file order (a Sequence is flattened). HF normalizers/{unicode,prepend,replace}.rs.
struct NormalizerStep {
    enum class Kind {
        kNfc,      // Unicode NFC
        kPrepend,  // `content` before a non-empty text
        kReplace,  // every `pattern` (a literal, non-empty) replaced by `content`, left to right
    };
    Kind kind = Kind::kNfc;
    std::string pattern;
    std::string content;
};

// Metaspace's prepend_scheme (HF pre_tokenizers/metaspace.rs).
enum class PrependScheme {
    kAlways,  // prepend the replacement to every piece that does not start with it
    kFirst,   // only to a piece that starts at offset 0 of the input text
    kNever,
};

// The Metaspace pre-tokenizer: every ' ' becomes `replacement`, which is then prepended as the scheme
// says; with `split` the text is cut before every replacement (HF's MergedWithNext).
struct MetaspaceSpec {
    std::string replacement;  // one code point (UTF-8), "▁" in every known file
    PrependScheme prepend_scheme = PrependScheme::kAlways;
    bool split = true;
};

// How a token sequence becomes text (HF decoders/).
struct DecoderSpec {
    enum class Kind {
        kByteLevel,  // each character through the GPT-2 byte table; the bytes repaired once, lossily
        kPieces,     // Sequence of Replace* (literal), ByteFallback?, Fuse?, Strip? -- in that order
        kMetaspace,  // `replacement` -> ' ', except in the first token, where it is dropped
    };
    Kind kind = Kind::kByteLevel;
    // kPieces
    std::vector<std::pair<std::string, std::string>> replacements;  // (pattern, content), in order
    bool byte_fallback = false;  // a token "<0xNN>" (after the replacements) is the byte NN
    std::string strip_content;   // Strip's character (UTF-8), "" without a Strip step
    int32_t strip_start = 0;     // at most this many leading strip_content characters of the text go
    // kMetaspace
    std::string replacement;
    PrependScheme prepend_scheme = PrependScheme::kAlways;
};

struct TokenizerJson {
    std::vector<AddedTokenSpec> added_tokens;
    std::vector<NormalizerStep> normalizer;  // empty for null
    // The pre-tokenizer's Split regexes (or ByteLevel's GPT-2 default), in order: each splits every
    // piece of the one before. None: the (normalised) text is one piece.
    std::vector<std::string> split_regexes;
    bool byte_level = true;                  // a ByteLevel step: BPE over the GPT-2 byte alphabet
    std::optional<MetaspaceSpec> metaspace;  // a Metaspace pre-tokenizer (never with byte_level)
    DecoderSpec decoder;
    std::vector<std::pair<std::string, int32_t>> vocab;       // byte-level strings or raw pieces
    std::vector<std::pair<std::string, std::string>> merges;  // in rank order
    bool ignore_merges = false;
    bool byte_fallback = false;  // characters with no token become their <0xNN> tokens
    bool fuse_unk = false;       // consecutive unknown characters become one unk
    std::optional<std::string> unk_token;
};

struct TokenizerConfigJson {
    std::optional<std::string> eos_token;
    std::optional<std::string> bos_token;
    std::optional<std::string> pad_token;
    bool add_bos_token = false;  // HF's encode(add_special_tokens=True) starts with bos_token
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
// GLM-4 / 4.5 / 4.6 (a GGUF's "glm4" / "chatglm-bpe": llama.cpp's LLAMA_VOCAB_PRE_TYPE_CHATGLM4): Qwen2's
// with digits in runs of up to three.
inline constexpr std::string_view kGlm4SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// o200k (gpt-oss's tokenizer.json, the GPT-4o family; a GGUF's "gpt-4o": llama.cpp's
// LLAMA_VOCAB_PRE_TYPE_GPT4O): cased letter runs with an optional contraction, digits in runs of up to three.
inline constexpr std::string_view kO200kSplitRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace sluice::format
