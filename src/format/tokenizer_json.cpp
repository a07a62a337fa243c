// See tokenizer_json.h. Field names and defaults follow HF tokenizers' serde structs
// (tokenizers/src/{models/bpe/serialization.rs, normalizers/*.rs, pre_tokenizers/*.rs, decoders/*.rs,
// tokenizer/added_vocabulary.rs}).
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

// Reads a required string field.
Status read_string(const json& obj, const char* key, std::string* out, const std::string& path,
                   const std::string& where) {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_string())
        return bad(path, fmt::format("{}.{}: expected a string, got {}", where, key,
                                     it == obj.end() ? std::string("nothing") : type_of(*it)));
    *out = it->get<std::string>();
    return Status::ok();
}

// A field HF reads as a Rust `char`: a string of exactly one code point.
Status read_char(const json& obj, const char* key, std::string* out, const std::string& path,
                 const std::string& where) {
    SLUICE_RETURN_IF_ERROR(read_string(obj, key, out, path, where));
    const auto* u = reinterpret_cast<const unsigned char*>(out->data());
    const size_t len = out->empty() ? 0 : u[0] < 0x80 ? 1 : u[0] < 0xE0 ? 2 : u[0] < 0xF0 ? 3 : 4;
    if (len == 0 || len != out->size())
        return bad(path, fmt::format("{}.{}: expected one character, got '{}'", where, key, *out));
    return Status::ok();
}

// Replace's pattern: {"String": "..."} (a literal); a {"Regex": ...} pattern is refused.
Status read_replace(const json& j, std::string* pattern, std::string* content, const std::string& path,
                    const std::string& where) {
    auto p = j.find("pattern");
    if (p == j.end() || !p->is_object()) return bad(path, where + ".pattern: expected {\"String\": \"...\"}");
    if (p->contains("Regex"))
        return unsupported(path, where + ".pattern: a Regex pattern is not supported (only String)");
    SLUICE_RETURN_IF_ERROR(read_string(*p, "String", pattern, path, where + ".pattern"));
    if (pattern->empty()) return bad(path, where + ".pattern.String: empty");
    return read_string(j, "content", content, path, where);
}

Status parse_normalizer(const json& j, TokenizerJson* out, const std::string& path, const std::string& where,
                        int depth = 0) {
    if (j.is_null()) return Status::ok();
    if (depth > 8) return unsupported(path, where + ": Sequences nested deeper than 8");
    if (!j.is_object()) return bad(path, where + ": expected an object or null, got " + type_of(j));
    const std::string type = j.value("type", "");
    NormalizerStep step;
    if (type == "NFC") {
        step.kind = NormalizerStep::Kind::kNfc;
    } else if (type == "Prepend") {
        step.kind = NormalizerStep::Kind::kPrepend;
        SLUICE_RETURN_IF_ERROR(read_string(j, "prepend", &step.content, path, where));
    } else if (type == "Replace") {
        step.kind = NormalizerStep::Kind::kReplace;
        SLUICE_RETURN_IF_ERROR(read_replace(j, &step.pattern, &step.content, path, where));
    } else if (type == "Sequence") {
        auto list = j.find("normalizers");
        if (list == j.end() || !list->is_array()) return bad(path, where + ".normalizers: expected an array");
        for (size_t i = 0; i < list->size(); ++i)
            SLUICE_RETURN_IF_ERROR(parse_normalizer((*list)[i], out, path,
                                                    fmt::format("{}.normalizers[{}]", where, i), depth + 1));
        return Status::ok();
    } else {
        return unsupported(path, where + ": type '" + type +
                                     "' is not supported (expected NFC, Prepend, Replace, a Sequence of "
                                     "them, or null)");
    }
    out->normalizer.push_back(std::move(step));
    return Status::ok();
}

Status parse_byte_level(const json& j, bool* use_regex, const std::string& path, const std::string& where) {
    bool add_prefix_space = false;
    SLUICE_RETURN_IF_ERROR(read_bool(j, "add_prefix_space", &add_prefix_space, path, where));
    if (add_prefix_space) return unsupported(path, where + ".add_prefix_space: true is not supported");
    *use_regex = true;  // HF's default
    return read_bool(j, "use_regex", use_regex, path, where);
}

// Metaspace's prepend_scheme and the add_prefix_space it replaced, as HF's deserializer reads them:
// prepend_scheme defaults to "always"; add_prefix_space false demands prepend_scheme "never".
Status parse_prepend_scheme(const json& j, PrependScheme* out, const std::string& path,
                            const std::string& where) {
    *out = PrependScheme::kAlways;
    if (auto it = j.find("prepend_scheme"); it != j.end() && !it->is_null()) {
        const std::string s = it->is_string() ? it->get<std::string>() : it->dump();
        if (s == "always") {
            *out = PrependScheme::kAlways;
        } else if (s == "first") {
            *out = PrependScheme::kFirst;
        } else if (s == "never") {
            *out = PrependScheme::kNever;
        } else {
            return bad(path,
                       where + ".prepend_scheme: expected \"always\", \"first\" or \"never\", got " + s);
        }
    }
    bool add_prefix_space = true;
    SLUICE_RETURN_IF_ERROR(read_bool(j, "add_prefix_space", &add_prefix_space, path, where));
    if (!add_prefix_space && *out != PrependScheme::kNever)
        return bad(path,
                   where + ".add_prefix_space: false contradicts prepend_scheme (HF refuses this file)");
    return Status::ok();
}

Status parse_pre_tokenizer(const json& j, TokenizerJson* out, const std::string& path) {
    out->byte_level = false;
    if (j.is_null()) return Status::ok();  // the normalised text is one piece
    if (!j.is_object()) return bad(path, "pre_tokenizer: expected an object or null, got " + type_of(j));
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
    for (size_t i = 0; i < steps.size(); ++i) {
        const json& s = *steps[i];
        const std::string where = fmt::format("pre_tokenizer step {}", i);
        const std::string t = s.is_object() ? s.value("type", "") : "";
        if (out->byte_level || out->metaspace)
            return unsupported(path, fmt::format("{}: type '{}' after {} is not supported", where, t,
                                                 out->byte_level ? "ByteLevel" : "Metaspace"));
        if (t == "Split") {
            auto pattern = s.find("pattern");
            if (pattern == s.end() || !pattern->is_object() || !pattern->contains("Regex") ||
                !(*pattern)["Regex"].is_string())
                return unsupported(path, where + ".pattern: expected {\"Regex\": \"...\"}");
            std::string regex = (*pattern)["Regex"].get<std::string>();
            if (regex.empty()) return bad(path, where + ".pattern.Regex: empty");
            if (s.value("behavior", "") != "Isolated")
                return unsupported(path, where + ".behavior: only Isolated is supported, got '" +
                                             s.value("behavior", "") + "'");
            bool invert = false;
            SLUICE_RETURN_IF_ERROR(read_bool(s, "invert", &invert, path, where));
            if (invert) return unsupported(path, where + ".invert: true is not supported");
            out->split_regexes.push_back(std::move(regex));
        } else if (t == "ByteLevel") {
            bool use_regex = true;
            SLUICE_RETURN_IF_ERROR(parse_byte_level(s, &use_regex, path, where));
            if (use_regex) {
                if (!out->split_regexes.empty())
                    return unsupported(path, where + ": ByteLevel use_regex after a Split is not supported");
                out->split_regexes.emplace_back(kGpt2SplitRegex);
            }
            out->byte_level = true;
        } else if (t == "Metaspace") {
            if (!out->split_regexes.empty())
                return unsupported(path, where + ": Metaspace after a Split is not supported");
            MetaspaceSpec m;
            SLUICE_RETURN_IF_ERROR(read_char(s, "replacement", &m.replacement, path, where));
            SLUICE_RETURN_IF_ERROR(parse_prepend_scheme(s, &m.prepend_scheme, path, where));
            SLUICE_RETURN_IF_ERROR(read_bool(s, "split", &m.split, path, where));  // HF: true when absent
            out->metaspace = std::move(m);
        } else {
            return unsupported(
                path, where + ": type '" + t + "' is not supported (expected Split, ByteLevel, Metaspace)");
        }
    }
    if (!out->byte_level && !out->split_regexes.empty())
        return unsupported(path,
                           "pre_tokenizer: Split without a ByteLevel step is not supported (byte-level BPE "
                           "ends with ByteLevel)");
    return Status::ok();
}

// decoder Sequence for SentencePiece-style BPE: Replace* ByteFallback? Fuse? Strip?, in that order
// (the order LlamaConverter writes; another order means different text, so it is refused).
Status parse_pieces_decoder(const json& list, DecoderSpec* out, const std::string& path) {
    out->kind = DecoderSpec::Kind::kPieces;
    enum Stage { kReplaces, kByteFallback, kFuse, kStrip } stage = kReplaces;
    bool fused = false;
    for (size_t i = 0; i < list.size(); ++i) {
        const json& d = list[i];
        const std::string where = fmt::format("decoder.decoders[{}]", i);
        const std::string t = d.is_object() ? d.value("type", "") : "";
        auto order = [&](Stage next) -> Status {
            if (next < stage || (next == stage && next != kReplaces))
                return unsupported(
                    path,
                    where + ": " + t + " out of order (expected Replace..., ByteFallback, Fuse, Strip)");
            stage = next;
            return Status::ok();
        };
        if (t == "Replace") {
            SLUICE_RETURN_IF_ERROR(order(kReplaces));
            std::pair<std::string, std::string> r;
            SLUICE_RETURN_IF_ERROR(read_replace(d, &r.first, &r.second, path, where));
            out->replacements.push_back(std::move(r));
        } else if (t == "ByteFallback") {
            SLUICE_RETURN_IF_ERROR(order(kByteFallback));
            out->byte_fallback = true;
        } else if (t == "Fuse") {
            SLUICE_RETURN_IF_ERROR(order(kFuse));
            fused = true;
        } else if (t == "Strip") {
            SLUICE_RETURN_IF_ERROR(order(kStrip));
            // Without a Fuse before it, Strip would cut every token; only the fused text is supported.
            if (!fused) return unsupported(path, where + ": Strip without a Fuse before it is not supported");
            SLUICE_RETURN_IF_ERROR(read_char(d, "content", &out->strip_content, path, where));
            for (const char* key : {"start", "stop"}) {
                auto it = d.find(key);
                if (it == d.end() || !it->is_number_unsigned() || it->get<uint64_t>() > 1024)
                    return bad(path, fmt::format("{}.{}: expected an integer in 0..1024", where, key));
            }
            if (d["stop"].get<uint64_t>() != 0)
                return unsupported(path, where +
                                             ".stop: only 0 is supported (a streamed text cannot lose "
                                             "its end)");
            out->strip_start = static_cast<int32_t>(d["start"].get<uint64_t>());
        } else {
            return unsupported(path, where + ": type '" + t +
                                         "' is not supported in a decoder Sequence (expected Replace, "
                                         "ByteFallback, Fuse, Strip)");
        }
    }
    return Status::ok();
}

Status parse_decoder(const json& j, TokenizerJson* out, const std::string& path) {
    const std::string type = j.is_object() ? j.value("type", "") : "";
    if (type == "ByteLevel") {
        out->decoder.kind = DecoderSpec::Kind::kByteLevel;
    } else if (type == "Metaspace") {
        out->decoder.kind = DecoderSpec::Kind::kMetaspace;
        SLUICE_RETURN_IF_ERROR(read_char(j, "replacement", &out->decoder.replacement, path, "decoder"));
        SLUICE_RETURN_IF_ERROR(parse_prepend_scheme(j, &out->decoder.prepend_scheme, path, "decoder"));
    } else if (type == "Sequence") {
        auto list = j.find("decoders");
        if (list == j.end() || !list->is_array()) return bad(path, "decoder.decoders: expected an array");
        SLUICE_RETURN_IF_ERROR(parse_pieces_decoder(*list, &out->decoder, path));
    } else {
        return unsupported(path, "decoder: type '" + type +
                                     "' is not supported (expected ByteLevel, Metaspace, or a Sequence of "
                                     "Replace, ByteFallback, Fuse, Strip)");
    }
    const bool byte_level_decoder = out->decoder.kind == DecoderSpec::Kind::kByteLevel;
    if (byte_level_decoder != out->byte_level)
        return unsupported(
            path, out->byte_level
                      ? "decoder: a ByteLevel pre-tokenizer needs the ByteLevel decoder, got '" + type + "'"
                      : "decoder: ByteLevel needs a ByteLevel pre-tokenizer step");
    return Status::ok();
}

Status parse_model(const json& m, TokenizerJson* out, const std::string& path) {
    if (!m.is_object()) return bad(path, "model: expected an object, got " + type_of(m));
    const std::string type = m.value("type", "BPE");
    if (type != "BPE") return unsupported(path, "model.type: expected BPE, got '" + type + "'");
    if (m.contains("dropout") && !m["dropout"].is_null())
        return unsupported(path, "model.dropout: must be null");
    SLUICE_RETURN_IF_ERROR(read_bool(m, "byte_fallback", &out->byte_fallback, path, "model"));
    SLUICE_RETURN_IF_ERROR(read_bool(m, "fuse_unk", &out->fuse_unk, path, "model"));
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
            SLUICE_RETURN_IF_ERROR(parse_normalizer(*n, &out, path, "normalizer"));
        auto pre = root.find("pre_tokenizer");
        SLUICE_RETURN_IF_ERROR(parse_pre_tokenizer(pre == root.end() ? json() : *pre, &out, path));
        if (auto d = root.find("decoder"); d != root.end() && !d->is_null()) {
            SLUICE_RETURN_IF_ERROR(parse_decoder(*d, &out, path));
        } else if (!out.byte_level) {
            // HF joins the tokens with spaces when there is no decoder; no real file relies on that.
            return unsupported(path,
                               "decoder: missing (a tokenizer without a ByteLevel pre-tokenizer needs "
                               "Metaspace or a Sequence of Replace, ByteFallback, Fuse, Strip)");
        }
        if (out.byte_level && out.byte_fallback)
            return unsupported(path,
                               "model.byte_fallback: true with a ByteLevel pre-tokenizer is not supported");
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
    if (auto it = root.find("add_bos_token"); it != root.end() && !it->is_null()) {
        if (!it->is_boolean()) return bad(path, "add_bos_token: expected a boolean, got " + type_of(*it));
        out.add_bos_token = it->get<bool>();
    }
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
