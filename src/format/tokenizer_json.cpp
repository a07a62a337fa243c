// See tokenizer_json.h. Field names and defaults follow HF tokenizers' serde structs
// (tokenizers/src/{models/bpe/serialization.rs, pre_tokenizers/*.rs, tokenizer/added_vocabulary.rs}).
#include "format/tokenizer_json.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "format/json_text.h"

namespace sluice::format {
namespace {

using nlohmann::json;

// The largest token id accepted: far above any real vocabulary (the largest are ~256K), and small
// enough that the id-indexed tables a tokenizer builds stay a few hundred MB at worst (an id of 1e9
// would be a multi-GB allocation).
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

Status bad(const std::string& path, const std::string& what) {
    return error(ErrorCode::kCorrupt, fmt::format("[tokenizer] {}: {}", path, what));
}
Status unsupported(const std::string& path, const std::string& what) {
    return error(ErrorCode::kUnsupported, fmt::format("[tokenizer] {}: {}", path, what));
}

std::string type_of(const json& j) {
    return j.is_null() ? "null" : std::string(j.type_name());
}

// Reads an optional boolean field; a wrong type is an error.
Status read_bool(const json& obj, const char* key, bool* out, const std::string& path,
                 const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return Status::ok();
    if (!it->is_boolean())
        return bad(path, fmt::format("{}.{}: expected a boolean, got {}", where, key, type_of(*it)));
    *out = it->get<bool>();
    return Status::ok();
}

Status parse_added_token(const json& j, AddedTokenSpec* t, const std::string& path,
                         const std::string& where) {
    if (!j.is_object()) return bad(path, fmt::format("{}: expected an object, got {}", where, type_of(j)));
    auto content = j.find("content");
    if (content == j.end() || !content->is_string())
        return bad(path, fmt::format("{}.content: expected a string", where));
    t->content = content->get<std::string>();
    if (t->content.empty()) return bad(path, fmt::format("{}.content: empty added token", where));
    SLUICE_RETURN_IF_ERROR(read_bool(j, "single_word", &t->single_word, path, where));
    SLUICE_RETURN_IF_ERROR(read_bool(j, "lstrip", &t->lstrip, path, where));
    SLUICE_RETURN_IF_ERROR(read_bool(j, "rstrip", &t->rstrip, path, where));
    SLUICE_RETURN_IF_ERROR(read_bool(j, "special", &t->special, path, where));
    // HF's AddedToken::from(content, special): special tokens match the raw text, others the
    // normalised text, unless the file says otherwise.
    t->normalized = !t->special;
    SLUICE_RETURN_IF_ERROR(read_bool(j, "normalized", &t->normalized, path, where));
    return Status::ok();
}

Status parse_normalizer(const json& j, TokenizerJson* out, const std::string& path) {
    if (j.is_null()) return Status::ok();
    if (!j.is_object()) return bad(path, "normalizer: expected an object or null, got " + type_of(j));
    const std::string type = j.value("type", "");
    if (type == "NFC") {
        out->normalize_nfc = true;
        return Status::ok();
    }
    if (type == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array()) {
        for (const auto& n : j["normalizers"]) SLUICE_RETURN_IF_ERROR(parse_normalizer(n, out, path));
        return Status::ok();
    }
    return unsupported(path, "normalizer: type '" + type + "' is not supported (expected NFC or null)");
}

Status parse_byte_level(const json& j, bool* use_regex, const std::string& path, const std::string& where) {
    bool add_prefix_space = false;
    SLUICE_RETURN_IF_ERROR(read_bool(j, "add_prefix_space", &add_prefix_space, path, where));
    if (add_prefix_space) return unsupported(path, where + ".add_prefix_space: true is not supported");
    *use_regex = true;  // HF's default
    return read_bool(j, "use_regex", use_regex, path, where);
}

Status parse_pre_tokenizer(const json& j, TokenizerJson* out, const std::string& path) {
    if (!j.is_object()) return bad(path, "pre_tokenizer: expected an object, got " + type_of(j));
    std::vector<const json*> steps;
    const std::string type = j.value("type", "");
    if (type == "Sequence") {
        auto list = j.find("pretokenizers");
        if (list == j.end() || !list->is_array())
            return bad(path, "pre_tokenizer.pretokenizers: expected an array");
        for (const auto& s : *list) steps.push_back(&s);
    } else {
        steps.push_back(&j);
    }
    bool have_byte_level = false;
    for (size_t i = 0; i < steps.size(); ++i) {
        const json& s = *steps[i];
        const std::string where = fmt::format("pre_tokenizer step {}", i);
        const std::string t = s.is_object() ? s.value("type", "") : "";
        if (t == "Split") {
            if (!out->split_regex.empty() || have_byte_level)
                return unsupported(path, where + ": only one Split before ByteLevel is supported");
            auto pattern = s.find("pattern");
            if (pattern == s.end() || !pattern->is_object() || !pattern->contains("Regex") ||
                !(*pattern)["Regex"].is_string())
                return unsupported(path, where + ".pattern: expected {\"Regex\": \"...\"}");
            out->split_regex = (*pattern)["Regex"].get<std::string>();
            if (out->split_regex.empty()) return bad(path, where + ".pattern.Regex: empty");
            if (s.value("behavior", "") != "Isolated")
                return unsupported(path, where + ".behavior: only Isolated is supported, got '" +
                                             s.value("behavior", "") + "'");
            bool invert = false;
            SLUICE_RETURN_IF_ERROR(read_bool(s, "invert", &invert, path, where));
            if (invert) return unsupported(path, where + ".invert: true is not supported");
        } else if (t == "ByteLevel") {
            bool use_regex = true;
            SLUICE_RETURN_IF_ERROR(parse_byte_level(s, &use_regex, path, where));
            if (use_regex) {
                if (!out->split_regex.empty())
                    return unsupported(path, where + ": ByteLevel use_regex after a Split is not supported");
                out->split_regex = std::string(kGpt2SplitRegex);
            }
            have_byte_level = true;
        } else {
            return unsupported(path,
                               where + ": type '" + t + "' is not supported (expected Split, ByteLevel)");
        }
    }
    if (!have_byte_level)
        return unsupported(path, "pre_tokenizer: no ByteLevel step (only byte-level BPE is supported)");
    return Status::ok();
}

Status parse_model(const json& m, TokenizerJson* out, const std::string& path) {
    if (!m.is_object()) return bad(path, "model: expected an object, got " + type_of(m));
    const std::string type = m.value("type", "BPE");
    if (type != "BPE") return unsupported(path, "model.type: expected BPE, got '" + type + "'");
    if (m.contains("dropout") && !m["dropout"].is_null())
        return unsupported(path, "model.dropout: must be null");
    bool byte_fallback = false;
    SLUICE_RETURN_IF_ERROR(read_bool(m, "byte_fallback", &byte_fallback, path, "model"));
    if (byte_fallback) return unsupported(path, "model.byte_fallback: true is not supported");
    SLUICE_RETURN_IF_ERROR(read_bool(m, "ignore_merges", &out->ignore_merges, path, "model"));
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
        auto it = m.find(key);
        if (it != m.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty()))
            return unsupported(path, fmt::format("model.{}: must be empty or null", key));
    }
    if (auto unk = m.find("unk_token"); unk != m.end() && unk->is_string())
        out->unk_token = unk->get<std::string>();

    auto vocab = m.find("vocab");
    if (vocab == m.end() || !vocab->is_object())
        return bad(path, "model.vocab: expected an object {token: id}, got " +
                             (vocab == m.end() ? std::string("nothing") : type_of(*vocab)));
    out->vocab.reserve(vocab->size());
    for (auto it = vocab->begin(); it != vocab->end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
            it.value().get<int64_t>() > kMaxTokenId)
            return bad(path, fmt::format("model.vocab['{}']: expected an integer id in 0..{}, got {}",
                                         it.key(), kMaxTokenId, it.value().dump()));
        out->vocab.emplace_back(it.key(), static_cast<int32_t>(it.value().get<int64_t>()));
    }

    auto merges = m.find("merges");
    if (merges == m.end() || merges->is_null()) return Status::ok();  // a BPE with no merges is legal
    if (!merges->is_array()) return bad(path, "model.merges: expected an array, got " + type_of(*merges));
    out->merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
        const json& e = (*merges)[i];
        if (e.is_string()) {
            // "a b": split on the first space (HF: `line.split_once(' ')`); neither side may be empty.
            const std::string s = e.get<std::string>();
            const size_t sp = s.find(' ');
            if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
                s.find(' ', sp + 1) != std::string::npos)
                return bad(path, fmt::format("model.merges[{}]: expected \"a b\", got {}", i, e.dump()));
            out->merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
            out->merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
        } else {
            return bad(path, fmt::format("model.merges[{}]: expected \"a b\" or [\"a\", \"b\"], got {}", i,
                                         e.dump()));
        }
    }
    return Status::ok();
}

Expected<json> parse_json(std::string_view text, const std::string& path) {
    return parse_json_text(text, path, "[tokenizer]", ErrorCode::kCorrupt);
}

}  // namespace

Expected<TokenizerJson> parse_tokenizer_json(std::string_view text, const std::string& path) {
    SLUICE_ASSIGN_OR_RETURN(json root, parse_json(text, path));
    if (!root.is_object()) return bad(path, "expected a JSON object at the top level, got " + type_of(root));
    TokenizerJson out;
    try {
        auto model = root.find("model");
        if (model == root.end()) return bad(path, "missing field 'model'");
        SLUICE_RETURN_IF_ERROR(parse_model(*model, &out, path));

        if (auto added = root.find("added_tokens"); added != root.end() && !added->is_null()) {
            if (!added->is_array())
                return bad(path, "added_tokens: expected an array, got " + type_of(*added));
            for (size_t i = 0; i < added->size(); ++i) {
                const json& a = (*added)[i];
                AddedTokenSpec t;
                const std::string where = fmt::format("added_tokens[{}]", i);
                SLUICE_RETURN_IF_ERROR(parse_added_token(a, &t, path, where));
                auto id = a.find("id");
                if (id == a.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
                    id->get<int64_t>() > kMaxTokenId)
                    return bad(path,
                               fmt::format("{}.id: expected an integer id in 0..{}", where, kMaxTokenId));
                t.id = static_cast<int32_t>(id->get<int64_t>());
                out.added_tokens.push_back(std::move(t));
            }
        }
        if (auto n = root.find("normalizer"); n != root.end())
            SLUICE_RETURN_IF_ERROR(parse_normalizer(*n, &out, path));
        auto pre = root.find("pre_tokenizer");
        if (pre == root.end() || pre->is_null())
            return unsupported(path, "pre_tokenizer: missing (expected ByteLevel)");
        SLUICE_RETURN_IF_ERROR(parse_pre_tokenizer(*pre, &out, path));
        if (auto d = root.find("decoder"); d != root.end() && !d->is_null()) {
            const std::string type = d->is_object() ? d->value("type", "") : "";
            if (type != "ByteLevel")
                return unsupported(path, "decoder: expected type ByteLevel, got '" + type + "'");
        }
    } catch (const json::exception& e) {
        return bad(path, std::string("unexpected structure: ") + e.what());
    }
    return out;
}

Expected<TokenizerConfigJson> parse_tokenizer_config_json(std::string_view text, const std::string& path) {
    SLUICE_ASSIGN_OR_RETURN(json root, parse_json(text, path));
    if (!root.is_object()) return bad(path, "expected a JSON object at the top level, got " + type_of(root));
    TokenizerConfigJson out;
    // eos_token etc. are a string, null, or an AddedToken object {"content": ...}.
    auto token_field = [&](const char* key, std::optional<std::string>* dst) -> Status {
        auto it = root.find(key);
        if (it == root.end() || it->is_null()) return Status::ok();
        if (it->is_string()) {
            *dst = it->get<std::string>();
        } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
            *dst = (*it)["content"].get<std::string>();
        } else {
            return bad(path, fmt::format("{}: expected a string, null or {{\"content\": ...}}, got {}", key,
                                         type_of(*it)));
        }
        return Status::ok();
    };
    SLUICE_RETURN_IF_ERROR(token_field("eos_token", &out.eos_token));
    SLUICE_RETURN_IF_ERROR(token_field("bos_token", &out.bos_token));
    SLUICE_RETURN_IF_ERROR(token_field("pad_token", &out.pad_token));
    if (auto dec = root.find("added_tokens_decoder"); dec != root.end() && !dec->is_null()) {
        if (!dec->is_object())
            return bad(path, "added_tokens_decoder: expected an object, got " + type_of(*dec));
        for (auto it = dec->begin(); it != dec->end(); ++it) {
            AddedTokenSpec t;
            const std::string where = "added_tokens_decoder['" + it.key() + "']";
            char* end = nullptr;
            const long long id = std::strtoll(it.key().c_str(), &end, 10);
            if (it.key().empty() || *end != '\0' || id < 0 || id > kMaxTokenId)
                return bad(path, fmt::format("{}: the key must be a token id in 0..{}", where, kMaxTokenId));
            t.id = static_cast<int32_t>(id);
            SLUICE_RETURN_IF_ERROR(parse_added_token(it.value(), &t, path, where));
            out.added_tokens_decoder.push_back(std::move(t));
        }
    }
    return out;
}

}  // namespace sluice::format
