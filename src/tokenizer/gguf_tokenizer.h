// The tokenizer and chat template of a GGUF model, from its metadata (format/tokenizer_gguf.h says
// what is read and how it maps onto tokenizer.json's data). Tokenizer::load and ChatTemplate::load
// take a .gguf path through these; an engine that already holds the open GgufCheckpoint calls them
// with its metadata instead of opening the file again.
//
// Errors name the file and the metadata key (see format/tokenizer_gguf.h). Thread safety: pure
// functions; the results are the same immutable objects the folder loaders return.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "format/gguf.h"
#include "sluice/chat_template.h"
#include "sluice/status.h"
#include "sluice/tokenizer.h"

namespace sluice::tok {

// True for a path ending in ".gguf" that is not a folder: the loaders read it as a GGUF.
bool is_gguf_path(const std::string& path);

// `path` names the file in errors; `vocab_size` as in Tokenizer::load.
Expected<std::shared_ptr<const Tokenizer>> tokenizer_from_gguf(const format::GgufMetadata& metadata,
                                                               const std::string& path,
                                                               int64_t vocab_size = 0);

// tokenizer.chat_template (or tokenizer.chat_template.NAME), rendered with bos_token / eos_token as
// the tokenizer built from the same metadata reports them.
Expected<ChatTemplate> chat_template_from_gguf(const format::GgufMetadata& metadata, const std::string& path,
                                               const std::string& name = "");

}  // namespace sluice::tok
