// The text <-> token id boundary: the exact HF `tokenizers` BPE of tokenizer.json files -- byte-level
// (Qwen2/3, Qwen3-Next, Qwen3.5/3.6, DeepSeek-V3, gpt-oss) and SentencePiece-style with byte fallback
// (Llama 2, Mistral, Mixtral) (docs/models.md section 7, docs/FORMATS.md) -- and a streaming
// detokenizer for generation.
//
// Tokenizer
//   Ownership: load() returns a shared_ptr to an immutable tokenizer; share it freely (sessions,
//   server handlers, IncrementalDetokenizers all hold a reference).
//   Thread safety: every member is const and touches no shared mutable state, so any number of
//   threads may call encode()/decode() on one instance at the same time.
//   Errors: load() returns a Status naming the file and the problem (missing file, bad JSON,
//   unsupported model/normalizer/pre-tokenizer type, merge naming a token not in the vocab, a GGUF
//   metadata key missing or of the wrong type, ...).
//   encode()/decode() cannot fail: invalid UTF-8 input to encode() is first repaired to U+FFFD
//   (HF takes a Rust &str, which is valid by construction); ids decode() does not know are skipped
//   (HF does the same), and invalid UTF-8 produced by a token sequence becomes U+FFFD per maximal
//   ill-formed subsequence (Rust String::from_utf8_lossy, WHATWG TextDecoder).
//
// IncrementalDetokenizer
//   One per output stream. Not thread-safe (a plain mutable object); it keeps its tokenizer alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/export.h"
#include "sluice/status.h"

namespace sluice {

class SLUICE_API Tokenizer {
 public:
    // `path` is a model folder or a .gguf file.
    // A folder: reads `path`/tokenizer.json (required) and `path`/tokenizer_config.json (optional:
    // added-token flags from `added_tokens_decoder` override tokenizer.json's, and it supplies the
    // eos/bos/pad token strings).
    // A .gguf file (or the first file of a split set): the same tokenizer from its metadata as
    // llama.cpp's converter writes it -- `tokenizer.ggml.model` "gpt2" with `tokenizer.ggml.pre`
    // "qwen2" or "qwen35", the tokens, token types and merges; eos/pad from their ids, bos only when
    // `tokenizer.ggml.add_bos_token` is true (docs/FORMATS.md, GGUF). Any other model or pre-tokenizer
    // is refused naming the key and the value.
    // With `vocab_size` > 0 (the model's embedding rows) every token id must be below it, checked
    // before the id tables are allocated.
    static Expected<std::shared_ptr<const Tokenizer>> load(const std::string& path, int64_t vocab_size = 0);

    ~Tokenizer();
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    // Text -> ids. With parse_special = true every added token (special or not) found in the text
    // becomes its id; with false, tokens flagged `special` (e.g. <|im_start|>) are ordinary text and
    // get BPE'd, while non-special added tokens (<think>, <tool_call>) are still matched -- HF's
    // `split_special_tokens=True`. No BOS/EOS is added (see bos_id_to_add()).
    std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;

    // Ids -> text (HF fast-tokenizer decode, clean_up_tokenization_spaces = false).
    std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

    // The raw vocabulary string of `id` (byte-level alphabet, e.g. "Ġthe"), or an added token's
    // content; empty for an unknown id.
    std::string_view token_text(int32_t id) const;
    // The bytes `id` contributes to decoded text (byte-level mapping undone); empty if unknown.
    std::string_view token_bytes(int32_t id) const;
    // One more than the largest id (BPE vocabulary plus added tokens): 151669 for Qwen3.
    int32_t vocab_size() const;
    // Id of an added token's content (e.g. "<|im_end|>") or of a raw vocabulary string.
    std::optional<int32_t> token_id(std::string_view content) const;
    bool is_special(int32_t id) const;  // an added token flagged special: true
    bool is_added(int32_t id) const;    // any added token

    // From tokenizer_config.json when present (and not null there); from a GGUF, the text of
    // `tokenizer.ggml.{eos,bos,padding}_token_id`.
    const std::optional<std::string>& eos_token() const;
    const std::optional<std::string>& bos_token() const;
    const std::optional<std::string>& pad_token() const;

    // The id HF's encode(text, add_special_tokens=True) starts with: bos_token's when
    // tokenizer_config.json's add_bos_token is true (absent counts as false) or a GGUF's
    // tokenizer.ggml.add_bos_token is; nullopt otherwise. A caller encoding a whole prompt outside a
    // chat template (whose text carries its own bos_token) prepends it.
    std::optional<int32_t> bos_id_to_add() const;

    struct Impl;

 private:
    friend class IncrementalDetokenizer;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Turns a stream of ids into text chunks that are always complete UTF-8: bytes of a code point
// split across tokens (CJK, emoji, the parts of a ZWJ / skin-tone / flag / keycap sequence) are
// held back until the code point is complete -- with a byte-fallback vocabulary (Llama 2, Mistral),
// until the run of <0xNN> tokens ends. The concatenation of every feed() plus flush()
// equals tokenizer.decode(all ids, skip_special).
class SLUICE_API IncrementalDetokenizer {
 public:
    IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special = false);

    // Returns the text that became complete with `id` (often empty, never a partial code point).
    std::string feed(int32_t id);
    // End of stream: returns what is still held (an incomplete tail becomes U+FFFD, as in decode).
    std::string flush();

 private:
    std::shared_ptr<const Tokenizer> tokenizer_;
    bool skip_special_;
    // ByteLevel decoder: an incomplete UTF-8 tail (at most 3 bytes). Byte-fallback decoder: the run
    // of <0xNN> bytes not yet ended by another token.
    std::string pending_bytes_;
    size_t tokens_ = 0;      // tokens decoded so far (the Metaspace decoder treats the first apart)
    size_t strip_left_ = 0;  // leading characters the Strip decoder may still remove
};

}  // namespace sluice
