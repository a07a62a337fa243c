// Which ids end a model's reply and which it may never write: decided once per model at load
// (Engine::load_text_side), read by every sampler of its sessions.
//
// End of sequence: the ids config.json and generation_config.json name, and the tokenizer's eos
// token. Suppressed: every other special token (an added token flagged special: <|im_start|>,
// <|endoftext|>, reserved ids) and the embedding rows past the tokenizer's vocabulary — a model
// that writes one has left its format.
//
// gpt-oss's harmony vocabulary (o200k_harmony) is the exception its format makes: a reply is a
// sequence of messages written in special tokens,
//   <|channel|>analysis<|message|>…<|end|><|start|>assistant<|channel|>final<|message|>…<|return|>
//   …<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>
// so <|start|>, <|channel|>, <|message|>, <|end|> and <|constrain|> are not suppressed; <|return|>
// and <|call|> end the reply whatever the files say (a GGUF names <|return|> alone), and <|end|>
// does not, even when a file names it (it ends the analysis, and the answer follows) — as
// llama.cpp's vocabulary does for this family. A vocabulary is harmony's when all seven of those
// tokens are in it, special.
//
// Data lifetime: plain values. Threading: none.
// Rejected: a per-request list of special tokens to allow (the chat front ends would each have to
// know it, and raw completions of a harmony model would still lose their markup); allowing every
// special token of a harmony vocabulary (a thousand reserved ids).
#pragma once

#include <cstdint>
#include <vector>

#include "sluice/tokenizer.h"

namespace sluice::runtime {

struct OutputTokens {
    std::vector<int32_t> eos_ids;         // sorted, unique
    std::vector<int32_t> suppressed_ids;  // ascending
};

// `file_eos_ids`: those of config.json and generation_config.json. `tokenizer` may be null (a
// model run on token ids only: nothing is suppressed). `vocab_size`: the model's embedding rows.
OutputTokens output_tokens(const Tokenizer* tokenizer, std::vector<int32_t> file_eos_ids, int64_t vocab_size);

// The harmony markup ids of `tokenizer` (<|start|>, <|channel|>, <|message|>, <|end|>,
// <|constrain|>), empty when it is no harmony vocabulary.
std::vector<int32_t> harmony_markup_ids(const Tokenizer& tokenizer);

}  // namespace sluice::runtime
