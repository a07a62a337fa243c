// The text rewrites before BPE: tokenizer.json's normaliser steps (NFC, Prepend, Replace) and the
// Metaspace pre-tokenizer of SentencePiece-style tokenizers, which turns spaces into "▁" (U+2581).
//
// Llama 2 / Mistral / Mixtral files spell the same tokenizer two ways, which differ on purpose at the
// edges (HF tokenizers, normalizers/prepend.rs and pre_tokenizers/metaspace.rs):
//   normaliser Sequence[Prepend "▁", Replace " " -> "▁"] ("legacy"): every text segment between
//     added tokens gets a "▁" in front, even one that starts with a space (" a" -> "▁▁a");
//   Metaspace(prepend_scheme): spaces become "▁" first, and "▁" is prepended only to a segment that
//     does not start with one -- every segment ("always") or only the one at offset 0 of the input
//     ("first": "<s>a" gives "<s>", "a" without "▁").
//
// Immutable after construction; apply() is reentrant (the caller owns the output buffer).
// Rejected alternative: a general NormalizedString with offset tracking, as HF has. sluice needs no
// offsets, and the only offset question asked ("does this segment start the input?") is answered
// by the caller, which knows where each segment came from.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "format/tokenizer_json.h"

namespace sluice::tok {

class Normalizer {
 public:
    Normalizer() = default;
    explicit Normalizer(std::vector<format::NormalizerStep> steps) : steps_(std::move(steps)) {}

    bool empty() const { return steps_.empty(); }
    // `text` (valid UTF-8) normalised. The result is `text` itself when no step changes it, else a
    // view of `*scratch`.
    std::string_view apply(std::string_view text, std::string* scratch) const;

 private:
    std::vector<format::NormalizerStep> steps_;
};

class Metaspace {
 public:
    explicit Metaspace(format::MetaspaceSpec spec) : spec_(std::move(spec)) {}

    // Writes `text` with spaces replaced and the replacement prepended (when the scheme says so;
    // `starts_input`: the text begins at offset 0 of the encoded input) into `*out`, and appends its
    // pieces (views into `*out`): the whole, or with `split` one piece per replacement character,
    // which starts its piece (HF's SplitDelimiterBehavior::MergedWithNext).
    void apply(std::string_view text, bool starts_input, std::string* out,
               std::vector<std::string_view>* pieces) const;

 private:
    format::MetaspaceSpec spec_;
};

// Every non-overlapping `pattern` (non-empty) in `text` replaced by `content`, left to right.
std::string replace_all(std::string_view text, std::string_view pattern, std::string_view content);

}  // namespace sluice::tok
