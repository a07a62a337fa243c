// ChatTemplate: loading a model's template and rendering it with the Jinja interpreter in
// src/tokenizer/jinja/. This file is the module boundary: the interpreter's TemplateError
// exceptions stop here and become Status values with a line and column.
//
// Lifetime: Impl (source text + syntax tree) is created once and shared read-only by all copies
// and all concurrent renders; each render builds its own scopes and values.
//
// Where the output can differ from @huggingface/jinja (the oracle) — deliberately, toward Python
// Jinja2 / transformers, because the oracle's behaviour there is a bug:
//   * str.strip/lstrip/rstrip(chars) and |trim(chars) honour `chars` (the oracle ignores it and
//     strips whitespace);
//   * text rendered before {% break %}/{% continue %} in an iteration is kept (the oracle drops it);
//   * `%` with a negative operand takes the divisor's sign; division by zero is an error (the
//     oracle prints Infinity/NaN); float|int truncates toward zero (the oracle floors);
//   * where the oracle throws (raw blocks, tests with arguments, select/reject/round/escape/count,
//     map by filter name, string ordering, iterating a string, `in` between lists, str.find/count/
//     join), Python Jinja2's result is produced.
// Where the oracle (and so sluice) differs from Python Jinja2 / transformers on output:
//   * booleans print as true/false (Python: True/False) — visible in templates that print a bool
//     argument with |string, e.g. Qwen3-Coder's XML tool calls; none prints as "" (Python: None);
//   * tojson prints integral floats without ".0", treats indent=0 as no indent, sorts keys with a
//     locale-style collation, and (oracle only) rounds integers beyond 2^53; JSON inputs' integral
//     floats (1.0) become integers;
//   * `list + str` / `str + list` concatenate the list's text form (Python raises), so a
//     content-parts array reaching `message.content + ...` renders as JSON-ish text;
//   * string |length counts UTF-16 code units; `==` is JavaScript's loose equality; title and
//     capitalize do not lower-case the rest of the word; `unique` is case-sensitive; a tuple prints
//     as a JSON list (the oracle throws).
//
// Rejected alternative: embedding minja or jinja2cpp. Neither matches the oracle's whitespace and
// formatting quirks byte for byte, and both would pull a large dependency into the tokenizer.
#include "sluice/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "format/gguf.h"
#include "format/tokenizer_gguf.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/evaluator.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace sluice {

struct ChatTemplate::Impl {
    std::string source;
    std::string bos_token;
    std::string eos_token;
    jinja::NodePtr program;
};

namespace {

Status template_error(const std::string& source, const jinja::TemplateError& e, const char* phase) {
    std::string where;
    if (e.offset != jinja::kNoOffset) {
        size_t line = 0, column = 0;
        jinja::offset_to_line_column(source, e.offset, line, column);
        where = " at line " + std::to_string(line) + ", column " + std::to_string(column);
    }
    bool raised = dynamic_cast<const jinja::RaisedError*>(&e) != nullptr;
    std::string what = raised ? std::string("raise_exception: ") + e.what() : std::string(e.what());
    return error(ErrorCode::kInvalidArgument, std::string("[chat_template] ") + phase + where + ": " + what);
}

Expected<std::string> read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return error(ErrorCode::kNotFound, "[chat_template] cannot open '" + path.string() + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return error(ErrorCode::kIo, "[chat_template] read failed: '" + path.string() + "'");
    return ss.str();
}

// A special token in tokenizer_config.json: a string, {"content": "..."} (AddedToken), or null.
std::string token_text(const nlohmann::json& config, const char* key) {
    auto it = config.find(key);
    if (it == config.end()) return "";
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object()) {
        auto c = it->find("content");
        if (c != it->end() && c->is_string()) return c->get<std::string>();
    }
    return "";
}

}  // namespace

Expected<ChatTemplate> ChatTemplate::from_string(const std::string& source, const std::string& bos_token,
                                                 const std::string& eos_token) {
    auto impl = std::make_shared<Impl>();
    impl->source = source;
    impl->bos_token = bos_token;
    impl->eos_token = eos_token;
    try {
        std::vector<jinja::Token> tokens = jinja::tokenize(source);
        impl->program = jinja::parse(tokens, source.size());
    } catch (const jinja::TemplateError& e) {
        return template_error(source, e, "syntax error");
    } catch (const std::exception& e) {
        return error(ErrorCode::kInternal, std::string("[chat_template] parse failed: ") + e.what());
    }
    return ChatTemplate(std::move(impl));
}

Expected<ChatTemplate> tok::chat_template_from_gguf(const format::GgufMetadata& metadata,
                                                    const std::string& path, const std::string& name) {
    SLUICE_ASSIGN_OR_RETURN(std::string source, format::parse_gguf_chat_template(metadata, path, name));
    SLUICE_ASSIGN_OR_RETURN(format::GgufSpecialTokens special,
                            format::parse_gguf_special_tokens(metadata, path));
    auto parsed =
        ChatTemplate::from_string(source, special.bos_token.value_or(""), special.eos_token.value_or(""));
    if (!parsed.has_value()) return parsed.status().with_context(path);
    return parsed;
}

Expected<ChatTemplate> ChatTemplate::load(const std::string& model_dir, const std::string& name) {
    if (tok::is_gguf_path(model_dir)) {
        SLUICE_ASSIGN_OR_RETURN(auto gguf, format::GgufCheckpoint::open(model_dir));
        return tok::chat_template_from_gguf(gguf->metadata(), model_dir, name);
    }
    namespace fs = std::filesystem;
    fs::path dir(model_dir);
    fs::path config_path = dir / "tokenizer_config.json";
    fs::path jinja_path = dir / "chat_template.jinja";
    std::string source, bos, eos;
    bool have_template = false;
    std::error_code ec;
    if (fs::exists(config_path, ec)) {
        SLUICE_ASSIGN_OR_RETURN(std::string text, read_file(config_path));
        nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (config.is_discarded() || !config.is_object()) {
            return error(ErrorCode::kCorrupt,
                         "[chat_template] '" + config_path.string() + "': not a JSON object");
        }
        bos = token_text(config, "bos_token");
        eos = token_text(config, "eos_token");
        auto it = config.find("chat_template");
        if (it != config.end() && it->is_string()) {
            if (!name.empty() && name != "default") {
                return error(ErrorCode::kNotFound, "[chat_template] '" + config_path.string() +
                                                       "': has a single template, no template named '" +
                                                       name + "'");
            }
            source = it->get<std::string>();
            have_template = true;
        } else if (it != config.end() && it->is_array()) {
            std::string want = name.empty() ? "default" : name;
            std::string names;
            for (const auto& entry : *it) {
                if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
                    !entry.contains("template") || !entry["template"].is_string()) {
                    return error(ErrorCode::kCorrupt,
                                 "[chat_template] '" + config_path.string() +
                                     "': chat_template entries must be {name, template}");
                }
                std::string n = entry["name"].get<std::string>();
                names += (names.empty() ? "" : ", ") + n;
                if (n == want) {
                    source = entry["template"].get<std::string>();
                    have_template = true;
                }
            }
            if (!have_template && name.empty() && it->size() == 1) {
                source = (*it)[0]["template"].get<std::string>();
                have_template = true;
            }
            if (!have_template) {
                return error(ErrorCode::kNotFound, "[chat_template] '" + config_path.string() +
                                                       "': no template named '" + want + "' (have: " + names +
                                                       ")");
            }
        } else if (it != config.end() && !it->is_null()) {
            return error(ErrorCode::kCorrupt,
                         "[chat_template] '" + config_path.string() +
                             "': chat_template must be a string or a list of {name, template}");
        }
    }
    if (!have_template && fs::exists(jinja_path, ec)) {
        SLUICE_ASSIGN_OR_RETURN(source, read_file(jinja_path));
        have_template = true;
    }
    if (!have_template) {
        return error(ErrorCode::kNotFound, "[chat_template] no chat template in '" + model_dir +
                                               "': expected tokenizer_config.json with chat_template, or "
                                               "chat_template.jinja");
    }
    auto parsed = from_string(source, bos, eos);
    if (!parsed.has_value()) return parsed.status().with_context(model_dir);
    return parsed;
}

Expected<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                           const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                           const nlohmann::ordered_json& extra_kwargs) const {
    if (!messages.is_array()) {
        return error(ErrorCode::kInvalidArgument,
                     std::string("[chat_template] messages must be an array, got ") + messages.type_name());
    }
    if (!tools.is_null() && !tools.is_array()) {
        return error(ErrorCode::kInvalidArgument,
                     std::string("[chat_template] tools must be null or an array, got ") + tools.type_name());
    }
    if (!extra_kwargs.is_null() && !extra_kwargs.is_object()) {
        return error(
            ErrorCode::kInvalidArgument,
            std::string("[chat_template] extra kwargs must be an object, got ") + extra_kwargs.type_name());
    }
    try {
        auto globals = std::make_shared<jinja::Env>();
        jinja::install_globals(*globals);
        globals->set("messages", jinja::Value::from_json(messages));
        globals->set("tools", jinja::Value::from_json(tools));
        globals->set("add_generation_prompt", jinja::Value::boolean(add_generation_prompt));
        if (!impl_->bos_token.empty()) globals->set("bos_token", jinja::Value::string(impl_->bos_token));
        if (!impl_->eos_token.empty()) globals->set("eos_token", jinja::Value::string(impl_->eos_token));
        if (extra_kwargs.is_object()) {
            for (auto it = extra_kwargs.begin(); it != extra_kwargs.end(); ++it) {
                globals->set(it.key(), jinja::Value::from_json(it.value()));
            }
        }
        jinja::Interpreter interp;
        return interp.render(*impl_->program, globals);
    } catch (const jinja::TemplateError& e) {
        return template_error(impl_->source, e, "render error");
    } catch (const std::bad_alloc&) {
        return error(ErrorCode::kOutOfMemory, "[chat_template] render ran out of memory");
    } catch (const std::exception& e) {
        return error(ErrorCode::kInternal, std::string("[chat_template] render failed: ") + e.what());
    }
}

const std::string& ChatTemplate::source() const {
    return impl_->source;
}

}  // namespace sluice
