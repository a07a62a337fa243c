// The tokenizer and chat template a GGUF's metadata describes, as llama.cpp's converter writes them
// (convert_hf_to_gguf.py `get_vocab_base` / `_set_vocab_gpt2`, gguf-py's `SpecialVocab`), turned into
// the same plain data the tokenizer.json parser returns (format/tokenizer_json.h), so one builder
// (src/tokenizer/) makes the Tokenizer from either.
//
// What is read (docs/FORMATS.md, GGUF):
//   tokenizer.ggml.model       STRING, "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE, below) —
//                              anything else is refused
//   tokenizer.ggml.pre         STRING, "qwen2" (Qwen2/3/3-Next regex) or "qwen35" (Qwen3.5/3.6, \p{M})
//   tokenizer.ggml.tokens      ARRAY[STRING]: token i's text — NORMAL ones in the byte-level alphabet
//                              (tokenizer.json's vocab keys), added ones as their content
//   tokenizer.ggml.token_type  ARRAY[integer], one per token: 1 NORMAL (the BPE vocab), 3 CONTROL (an
//                              added token flagged special), 4 USER_DEFINED (an added token not
//                              special), 5 UNUSED (no token: the converter's "[PAD{i}]" filler up to
//                              config.json's vocab_size); 2 UNKNOWN and 6 BYTE (SentencePiece's) refused
//   tokenizer.ggml.merges      ARRAY[STRING] "a b", in rank order
//   tokenizer.ggml.{eos,bos,padding}_token_id   unsigned integer (optional)
//   tokenizer.ggml.add_bos_token                BOOL (optional, false when absent, as llama.cpp does
//                                               for gpt2 vocabularies)
//   tokenizer.ggml.normalizer.{lowercase,strip_accents}  BOOL (optional; true is refused)
//   tokenizer.chat_template[.NAME]              STRING (optional)
//
// What the metadata does not carry is what the HF tokenizer.json of these families says: an NFC
// normaliser, added tokens matched on the raw text (normalized, lstrip, rstrip, single_word all false),
// ByteLevel decoding, and six added tokens that are not special although the converter writes them
// CONTROL because they look special: <|fim_prefix|>, <|fim_middle|>, <|fim_suffix|>, <|fim_pad|>,
// <|repo_name|>, <|file_sep|>. Older converters wrote the "[PAD{i}]" fillers as USER_DEFINED: a USER_DEFINED
// token whose text is exactly "[PAD{i}]" at id i is taken as a filler too (HF's tokenizer has no such
// id, so encode never produces it and decode skips it).
// bos_token is the text of bos_token_id only when add_bos_token is true: the converter fills
// bos_token_id from config.json even for tokenizers without a BOS (Qwen's: tokenizer_config.json
// bos_token null), and HF's tokenizer, whose bos_token a chat template sees, has none there.
//
// A "llama" vocabulary (_set_vocab_sentencepiece: Llama-2, Mistral, Mixtral) is read as transformers'
// LlamaConverter writes the same tokenizer.model as tokenizer.json: pre "default", the normaliser Prepend "▁"
// (unless tokenizer.ggml.add_space_prefix is false) + Replace " " → "▁", BPE over every piece with
// byte_fallback and fuse_unk, the merges derived from tokenizer.ggml.scores (which it requires; the file has
// no merges), UNKNOWN and BYTE types allowed, CONTROL / UNKNOWN / USER_DEFINED pieces added tokens too, unk
// from tokenizer.ggml.unknown_token_id, add_bos_token true when absent (llama.cpp's default), and the
// Replace / ByteFallback / Fuse / Strip decoder (format/tokenizer_gguf.cpp parse_spm_tokenizer).
//
// Pure functions over parsed metadata; every failure is a Status naming the file and the key: a missing
// key or a value of the wrong type as GgufMetadata reports it ("[gguf] m.gguf: key
// 'tokenizer.ggml.merges' not found"), the rest as "[tokenizer] m.gguf: key 'tokenizer.ggml.pre' is
// 'llama-bpe': sluice implements 'qwen2' and 'qwen35'".
// Rejected alternative: running llama.cpp's own pre-tokenizer regexes — they are rewrites of the
// tokenizer.json ones (case-insensitive groups spelled out); sluice's matchers are exact for the
// originals, which is what the HF reference runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "format/gguf.h"
#include "format/tokenizer_json.h"
#include "sluice/status.h"

namespace sluice::format {

struct GgufSpecialTokens {
    std::optional<std::string> eos_token;  // text of tokenizer.ggml.eos_token_id
    std::optional<std::string> bos_token;  // text of bos_token_id when add_bos_token is true
    std::optional<std::string> pad_token;  // text of tokenizer.ggml.padding_token_id
    bool add_bos = false;                  // tokenizer.ggml.add_bos_token
};

struct GgufTokenizerSpec {
    TokenizerJson tokenizer;  // vocab (NORMAL tokens), merges, added tokens, regex, nfc
    GgufSpecialTokens special;
    int64_t n_tokens = 0;  // entries of tokenizer.ggml.tokens, fillers included (the model's vocab)
};

// `path` names the file in errors.
Expected<GgufTokenizerSpec> parse_gguf_tokenizer(const GgufMetadata& metadata, const std::string& path);

// Only the special tokens (what a chat template needs), with the same checks on their ids.
Expected<GgufSpecialTokens> parse_gguf_special_tokens(const GgufMetadata& metadata, const std::string& path);

// tokenizer.chat_template (`name` empty or "default") or tokenizer.chat_template.NAME; kNotFound naming
// the key (and the names tokenizer.chat_templates lists) when the file has none.
Expected<std::string> parse_gguf_chat_template(const GgufMetadata& metadata, const std::string& path,
                                               const std::string& name = "");

// The same tokenizer and chat templates as Hugging Face `tokenizers` files: tokenizer.json (the NFC
// normaliser, the Split regex and ByteLevel, the BPE vocabulary of the NORMAL tokens with the merges in
// rank order, the added tokens with their special flags, the ByteLevel decoder) and tokenizer_config.json
// (eos / bos / pad as GgufSpecialTokens has them, add_bos_token, the chat template — a list of {name,
// template} when the file names more than the default). Tokenizer::load and ChatTemplate::load of a folder
// holding them give what the metadata gives, id for id: what `sluice pack FILE.gguf` writes, so a pack
// tokenizes as its GGUF does and needs nothing of the GGUF to do so. The fillers (UNUSED ids) are in
// neither file, as in the HF files the converter read.
struct HfTokenizerFiles {
    std::string tokenizer_json;
    std::string tokenizer_config_json;
};
Expected<HfTokenizerFiles> hf_tokenizer_files_from_gguf(const GgufMetadata& metadata,
                                                        const std::string& path);

// Metadata keys (gguf-py's Keys.Tokenizer).
inline constexpr const char* kGgufTokenizerModel = "tokenizer.ggml.model";
inline constexpr const char* kGgufTokenizerPre = "tokenizer.ggml.pre";
inline constexpr const char* kGgufTokens = "tokenizer.ggml.tokens";
inline constexpr const char* kGgufTokenType = "tokenizer.ggml.token_type";
inline constexpr const char* kGgufMerges = "tokenizer.ggml.merges";
inline constexpr const char* kGgufScores = "tokenizer.ggml.scores";
inline constexpr const char* kGgufAddSpacePrefix = "tokenizer.ggml.add_space_prefix";
inline constexpr const char* kGgufEosId = "tokenizer.ggml.eos_token_id";
inline constexpr const char* kGgufBosId = "tokenizer.ggml.bos_token_id";
inline constexpr const char* kGgufPadId = "tokenizer.ggml.padding_token_id";
inline constexpr const char* kGgufUnkId = "tokenizer.ggml.unknown_token_id";
inline constexpr const char* kGgufAddBos = "tokenizer.ggml.add_bos_token";
inline constexpr const char* kGgufChatTemplate = "tokenizer.chat_template";

}  // namespace sluice::format
