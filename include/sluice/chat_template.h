// Chat templates: the Jinja program a model ships (tokenizer_config.json `chat_template`, or
// chat_template.jinja) that turns a conversation into the prompt text.
//
// Contract:
// - Rendering is byte-identical to @huggingface/jinja (the JS renderer of transformers.js, used
//   by the oracle tests) on the constructs it supports, with trim_blocks and lstrip_blocks on as
//   transformers renders. Where that package rejects a construct Python Jinja2 accepts (e.g.
//   `{% raw %}`, the `select`/`map(filter)`/`round`/`escape` filters, tests with arguments), Python
//   Jinja2's behaviour is implemented; the few places where the two disagree on output are listed
//   in src/tokenizer/chat_template.cpp.
// - Every failure (file missing, malformed JSON, template syntax error, runtime error,
//   raise_exception, exceeded limits) is an Expected error; messages name the template line and
//   column: "[chat_template] line 3, column 12: Unknown filter: foo". Nothing throws or aborts.
// - Objects keep their key order (tools rendered with tojson print keys as given), so inputs are
//   nlohmann::ordered_json.
//
// Thread safety: a ChatTemplate is immutable after load/from_string; render() is const and may be
// called from many threads at once. Copies share the parsed program.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "sluice/export.h"
#include "sluice/status.h"

namespace sluice {

namespace jinja {
struct Node;
}

class SLUICE_API ChatTemplate {
 public:
    // Reads `model_dir`/tokenizer_config.json: `chat_template` (a string, or a list of
    // {name, template}; `name` picks one, empty means "default" or the only entry), and
    // bos_token/eos_token (strings or {"content": ...}). Falls back to
    // `model_dir`/chat_template.jinja when the config has no template. kNotFound when neither exists
    // or `name` is not among the templates.
    // `model_dir` may also be a .gguf file: `tokenizer.chat_template` (`name`:
    // `tokenizer.chat_template.NAME`), with bos/eos as Tokenizer::load reads them from the same file.
    static Expected<ChatTemplate> load(const std::string& model_dir, const std::string& name = "");

    // Parses `source`. bos/eos are passed to the template as bos_token/eos_token when non-empty.
    static Expected<ChatTemplate> from_string(const std::string& source, const std::string& bos_token = "",
                                              const std::string& eos_token = "");

    // Renders with variables: messages, tools (null when absent; set even then, as transformers
    // does), add_generation_prompt, bos_token/eos_token (when known), then every key of
    // `extra_kwargs` (an object or null; a key overrides the ones before). `messages` must be an
    // array.
    Expected<std::string> render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra_kwargs) const;

    const std::string& source() const;

 private:
    struct Impl;
    explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
    std::shared_ptr<const Impl> impl_;
};

}  // namespace sluice
