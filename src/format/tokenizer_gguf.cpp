// See tokenizer_gguf.h. Mirrors of the writer: llama.cpp's conversion/base.py (get_vocab_base,
// _set_vocab_gpt2) and gguf-py/gguf/vocab.py (SpecialVocab); of the reader: llama-vocab.cpp
// (llama_vocab::impl::load: "gpt2" is LLAMA_VOCAB_TYPE_BPE, the pre names, the merge split).
#include "format/tokenizer_gguf.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice::format {
namespace {

// gguf-py's TokenType (llama.h's llama_token_type).
enum GgufTokenType : int64_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
};

// Added tokens the Qwen tokenizers flag not special (tokenizer_config.json's added_tokens_decoder, Qwen2.5
// through Qwen3.5) although they look special, so the converter wrote them CONTROL (get_vocab_base:
// CONTROL when special *or* "<|...|>"). HF keeps them in skip_special decodes, matches them with
// split_special_tokens, and sluice's engine does not suppress them in sampling; read as HF has them.
// Rejected alternative: CONTROL as special for these too — a FIM completion with a Qwen coder GGUF could
// then never emit <|file_sep|>, and its decode would differ from the same model's HF files.
constexpr std::string_view kQwenNotSpecial[] = {"<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                                                "<|fim_pad|>",    "<|repo_name|>",  "<|file_sep|>"};

// Same bound as tokenizer.json's ids (format/tokenizer_json.cpp): id-indexed tables stay small.
constexpr int64_t kMaxTokens = int64_t{1} << 24;

Status bad(const std::string& path, const std::string& what) {
    return error(ErrorCode::kCorrupt, fmt::format("[tokenizer] {}: {}", path, what));
}
Status unsupported(const std::string& path, const std::string& what) {
    return error(ErrorCode::kUnsupported, fmt::format("[tokenizer] {}: {}", path, what));
}

// The converter's filler for an id the HF tokenizer does not have (config.json's vocab_size is
// larger): "[PAD{id}]", UNUSED (USER_DEFINED in converters before mid-2024).
bool is_filler(std::string_view text, int64_t id) {
    return text.size() > 6 && text.substr(0, 4) == "[PAD" && text.back() == ']' &&
           text.substr(4, text.size() - 5) == std::to_string(id);
}

// tokenizer.ggml.tokens and token_type, checked against each other.
struct TokenTable {
    const std::vector<std::string>* texts = nullptr;
    std::vector<int64_t> types;

    bool is_token(int64_t id) const {
        const int64_t t = types[static_cast<size_t>(id)];
        return t != kUnused && !(t == kUserDefined && is_filler((*texts)[static_cast<size_t>(id)], id));
    }
};

// `spm`: a SentencePiece ("llama") vocabulary, which has UNKNOWN and BYTE tokens; a gpt2 one has neither.
Expected<TokenTable> read_token_table(const GgufMetadata& md, const std::string& path, bool spm = false) {
    TokenTable table;
    const GgufValue* tokens = md.find(kGgufTokens);
    if (tokens == nullptr || !tokens->is_array() || tokens->element_type() != GgufValueType::kString) {
        return md.get_strings(kGgufTokens).status();  // "[gguf] FILE: key '...' not found" / wrong type
    }
    table.texts = &tokens->strings();
    const int64_t n = static_cast<int64_t>(table.texts->size());
    if (n == 0) return bad(path, fmt::format("key '{}': no tokens", kGgufTokens));
    if (n > kMaxTokens)
        return bad(path, fmt::format("key '{}': {} tokens, more than the {} sluice accepts", kGgufTokens, n,
                                     kMaxTokens));
    SLUICE_ASSIGN_OR_RETURN(table.types, md.get_ints(kGgufTokenType));
    if (static_cast<int64_t>(table.types.size()) != n)
        return bad(path, fmt::format("key '{}' has {} entries but '{}' has {}", kGgufTokenType,
                                     table.types.size(), kGgufTokens, n));
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = table.types[static_cast<size_t>(i)];
        const std::string& text = (*table.texts)[static_cast<size_t>(i)];
        if (!spm && (t == kUnknown || t == kByte))
            return unsupported(path,
                               fmt::format("key '{}'[{}]: token '{}' is of type {} ({}), which a gpt2 "
                                           "(byte-level BPE) vocabulary does not have",
                                           kGgufTokenType, i, text, t, t == kUnknown ? "UNKNOWN" : "BYTE"));
        if (t < kNormal || t > kByte)
            return bad(path, fmt::format("key '{}'[{}]: {} is no token type (1 NORMAL .. 6 BYTE)",
                                         kGgufTokenType, i, t));
    }
    return table;
}

// One of eos/bos/padding: nullopt when absent; an id past the tokens or naming a filler is an error.
Expected<std::optional<std::string>> special_token(const GgufMetadata& md, const TokenTable& table,
                                                   const char* key, const std::string& path) {
    if (!md.has(key)) return std::optional<std::string>();
    auto id = md.get_uint(key);
    if (!id.has_value()) return id.status();
    const uint64_t n = table.texts->size();
    if (*id >= n) return bad(path, fmt::format("key '{}': id {} is past the {} tokens", key, *id, n));
    const auto i = static_cast<int64_t>(*id);
    if (!table.is_token(i))
        return bad(path, fmt::format("key '{}': id {} is '{}', an unused filler, not a token", key, *id,
                                     (*table.texts)[*id]));
    return std::optional<std::string>((*table.texts)[*id]);
}

// `add_bos_default`: what a missing add_bos_token means (llama.cpp: true for SentencePiece, false for gpt2).
Expected<GgufSpecialTokens> read_special_tokens(const GgufMetadata& md, const TokenTable& table,
                                                const std::string& path, bool add_bos_default = false) {
    GgufSpecialTokens out;
    SLUICE_ASSIGN_OR_RETURN(out.eos_token, special_token(md, table, kGgufEosId, path));
    SLUICE_ASSIGN_OR_RETURN(out.pad_token, special_token(md, table, kGgufPadId, path));
    SLUICE_ASSIGN_OR_RETURN(auto bos, special_token(md, table, kGgufBosId, path));
    bool add_bos = add_bos_default;
    if (md.has(kGgufAddBos)) {
        SLUICE_ASSIGN_OR_RETURN(add_bos, md.get_bool(kGgufAddBos));
    }
    if (add_bos) {
        if (!bos)
            return bad(path, fmt::format("key '{}' is true but '{}' is missing", kGgufAddBos, kGgufBosId));
        out.bos_token = std::move(bos);
        out.add_bos = true;
    }
    return out;
}

// A SentencePiece BPE vocabulary ("llama": _set_vocab_sentencepiece) as the tokenizer.json that
// transformers' LlamaConverter makes of the same tokenizer.model (Llama-2's, Mistral's, Mixtral's): the
// "legacy" layout — normaliser Prepend "▁" (when add_space_prefix, llama.cpp's default true) then Replace
// " " → "▁", no pre-tokenizer, BPE over every piece with byte_fallback and fuse_unk, <unk> the unknown
// token; the decoder Replace "▁" → " ", ByteFallback, Fuse, Strip one leading space. The merges are not in
// the file: they are derived from the scores as the converter derives them (SentencePieceExtractor.extract
// with vocab_scores): for each piece in id order, every split of it (at code points) into two pieces,
// ordered by (left id, right id); then all of them stably sorted by the piece's score, highest first.
// Checked on Llama-2's vocabulary against its tokenizer.json: the same 58,980 merges in the same order
// (tests/unit/gguf_tokenizer_test.cpp).
// Rejected alternative: llama.cpp's own SPM tokenizer (llm_tokenizer_spm: merge the adjacent pair whose
// result scores best) — the same on these vocabularies, but the oracle is HF's, and the BPE that runs
// every other family then runs this one too.
Expected<GgufTokenizerSpec> parse_spm_tokenizer(const GgufMetadata& md, const std::string& path) {
    GgufTokenizerSpec out;
    TokenizerJson& tok = out.tokenizer;
    if (md.has(kGgufTokenizerPre)) {
        SLUICE_ASSIGN_OR_RETURN(std::string pre, md.get_string(kGgufTokenizerPre));
        if (pre != "default")
            return unsupported(path, fmt::format("key '{}' is '{}': a 'llama' (SentencePiece) vocabulary "
                                                 "has the pre-tokenizer 'default'",
                                                 kGgufTokenizerPre, pre));
    }
    bool space_prefix = true;
    if (md.has(kGgufAddSpacePrefix)) {
        SLUICE_ASSIGN_OR_RETURN(space_prefix, md.get_bool(kGgufAddSpacePrefix));
    }
    SLUICE_ASSIGN_OR_RETURN(TokenTable table, read_token_table(md, path, /*spm=*/true));
    const auto& texts = *table.texts;
    const int64_t n = static_cast<int64_t>(texts.size());
    out.n_tokens = n;
    SLUICE_ASSIGN_OR_RETURN(const std::vector<double> scores, md.get_floats(kGgufScores));
    if (static_cast<int64_t>(scores.size()) != n)
        return bad(path, fmt::format("key '{}' has {} entries but '{}' has {}", kGgufScores, scores.size(),
                                     kGgufTokens, n));

    const std::string kSpace = "\xE2\x96\x81";  // U+2581 ▁
    if (space_prefix) tok.normalizer.push_back({NormalizerStep::Kind::kPrepend, "", kSpace});
    tok.normalizer.push_back({NormalizerStep::Kind::kReplace, " ", kSpace});
    tok.byte_level = false;
    tok.byte_fallback = true;
    tok.fuse_unk = true;
    tok.decoder.kind = DecoderSpec::Kind::kPieces;
    tok.decoder.replacements = {{kSpace, " "}};
    tok.decoder.byte_fallback = true;
    tok.decoder.strip_content = " ";
    tok.decoder.strip_start = 1;

    // The vocabulary: every piece but the fillers, as LlamaConverter's vocab holds them (the specials too).
    std::unordered_map<std::string_view, int32_t> ids;
    ids.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        if (!table.is_token(i)) continue;
        const std::string& text = texts[static_cast<size_t>(i)];
        const int64_t type = table.types[static_cast<size_t>(i)];
        if (text.empty()) return bad(path, fmt::format("key '{}'[{}]: empty token", kGgufTokens, i));
        if (auto [it, fresh] = ids.emplace(text, static_cast<int32_t>(i)); !fresh)
            return bad(path, fmt::format("key '{}'[{}]: token '{}' is also token {}", kGgufTokens, i, text,
                                         it->second));
        tok.vocab.emplace_back(text, static_cast<int32_t>(i));
        if (type == kUnknown && !md.has(kGgufUnkId)) {
            if (tok.unk_token)
                return bad(path, fmt::format("key '{}'[{}]: a second UNKNOWN token ('{}' is one)",
                                             kGgufTokenType, i, *tok.unk_token));
            tok.unk_token = text;
        }
        // The specials (<unk>, <s>, </s>: UNKNOWN, CONTROL) and the added tokens of added_tokens.json
        // (USER_DEFINED) are added tokens too, matched on the raw text as HF's normalized: false ones.
        if (type == kUnknown || type == kControl || type == kUserDefined) {
            AddedTokenSpec a;
            a.id = static_cast<int32_t>(i);
            a.content = text;
            a.special = type != kUserDefined;
            tok.added_tokens.push_back(std::move(a));
        }
    }

    // HF's unk_token: the one SpecialVocab wrote (tokenizer.ggml.unknown_token_id; the converter makes <unk>
    // CONTROL where tokenizer_config.json flags it special, as Llama-2's and Mixtral's do), else the
    // UNKNOWN piece.
    if (md.has(kGgufUnkId)) {
        SLUICE_ASSIGN_OR_RETURN(auto unk, special_token(md, table, kGgufUnkId, path));
        tok.unk_token = std::move(unk);
    }

    // The merges (SentencePieceExtractor.extract).
    struct Merge {
        int32_t left, right;
        float score;
    };
    std::vector<Merge> merges;
    std::vector<Merge> local;
    for (const auto& [text, id] : tok.vocab) {
        local.clear();
        for (size_t cut = 1; cut < text.size(); ++cut) {
            if ((static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) continue;  // inside a code point
            const auto l = ids.find(std::string_view(text).substr(0, cut));
            const auto r = ids.find(std::string_view(text).substr(cut));
            if (l != ids.end() && r != ids.end())
                local.push_back({l->second, r->second, static_cast<float>(scores[static_cast<size_t>(id)])});
        }
        std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
            return a.left != b.left ? a.left < b.left : a.right < b.right;
        });
        merges.insert(merges.end(), local.begin(), local.end());
    }
    std::stable_sort(merges.begin(), merges.end(),
                     [](const Merge& a, const Merge& b) { return a.score > b.score; });
    tok.merges.reserve(merges.size());
    for (const Merge& m : merges)
        tok.merges.emplace_back(texts[static_cast<size_t>(m.left)], texts[static_cast<size_t>(m.right)]);

    SLUICE_ASSIGN_OR_RETURN(out.special, read_special_tokens(md, table, path, /*add_bos_default=*/true));
    return out;
}

}  // namespace

Expected<GgufSpecialTokens> parse_gguf_special_tokens(const GgufMetadata& metadata, const std::string& path) {
    bool spm = false;
    if (metadata.has(kGgufTokenizerModel)) {
        SLUICE_ASSIGN_OR_RETURN(const std::string model, metadata.get_string(kGgufTokenizerModel));
        spm = model == "llama";
    }
    SLUICE_ASSIGN_OR_RETURN(TokenTable table, read_token_table(metadata, path, spm));
    return read_special_tokens(metadata, table, path, spm);
}

Expected<GgufTokenizerSpec> parse_gguf_tokenizer(const GgufMetadata& md, const std::string& path) {
    GgufTokenizerSpec out;
    TokenizerJson& tok = out.tokenizer;

    SLUICE_ASSIGN_OR_RETURN(std::string model, md.get_string(kGgufTokenizerModel));
    if (model == "llama") return parse_spm_tokenizer(md, path);
    if (model != "gpt2")
        return unsupported(path,
                           fmt::format("key '{}' is '{}': sluice implements 'gpt2' (byte-level BPE) and "
                                       "'llama' (SentencePiece BPE)",
                                       kGgufTokenizerModel, model));
    SLUICE_ASSIGN_OR_RETURN(std::string pre, md.get_string(kGgufTokenizerPre));
    if (pre == "qwen2") {
        tok.split_regexes = {std::string(kQwen2SplitRegex)};
    } else if (pre == "qwen35") {
        tok.split_regexes = {std::string(kQwen35SplitRegex)};
    } else if (pre == "glm4" || pre == "chatglm-bpe") {
        tok.split_regexes = {std::string(kGlm4SplitRegex)};
    } else if (pre == "gpt-4o") {
        tok.split_regexes = {std::string(kO200kSplitRegex)};
    } else {
        return unsupported(
            path, fmt::format("key '{}' is '{}': sluice implements 'qwen2', 'qwen35', 'glm4' and 'gpt-4o'",
                              kGgufTokenizerPre, pre));
    }
    // The Qwen tokenizer.json normaliser, NFC; o200k's (gpt-oss's tokenizer.json) has none, and its BPE
    // takes a pre-token found whole in the vocabulary as it is (ignore_merges, tiktoken's rule). A
    // Lowercase / StripAccents one (BERT's) would be written here.
    if (pre == "gpt-4o") {
        tok.ignore_merges = true;
    } else {
        tok.normalizer = {NormalizerStep{NormalizerStep::Kind::kNfc, "", ""}};
    }
    for (const char* key :
         {"tokenizer.ggml.normalizer.lowercase", "tokenizer.ggml.normalizer.strip_accents"}) {
        if (!md.has(key)) continue;
        SLUICE_ASSIGN_OR_RETURN(bool on, md.get_bool(key));
        if (on)
            return unsupported(path, fmt::format("key '{}' is true: sluice's normaliser is NFC only", key));
    }

    SLUICE_ASSIGN_OR_RETURN(TokenTable table, read_token_table(md, path));
    const auto& texts = *table.texts;
    const int64_t n = static_cast<int64_t>(texts.size());
    out.n_tokens = n;
    std::unordered_map<std::string_view, int64_t> normal_ids, added_ids;
    normal_ids.reserve(static_cast<size_t>(n));
    tok.vocab.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        const std::string& text = texts[static_cast<size_t>(i)];
        const int64_t type = table.types[static_cast<size_t>(i)];
        if (!table.is_token(i)) continue;
        const auto id = static_cast<int32_t>(i);
        if (type == kNormal) {
            if (auto [it, fresh] = normal_ids.emplace(text, i); !fresh)
                return bad(path, fmt::format("key '{}'[{}]: token '{}' is also token {}", kGgufTokens, i,
                                             text, it->second));
            tok.vocab.emplace_back(text, id);
            continue;
        }
        // CONTROL or USER_DEFINED: an added token, matched on the raw text (get_vocab_base writes an
        // added token's content; CONTROL when HF flags it special or it looks special, "<|...|>").
        if (text.empty())
            return bad(path, fmt::format("key '{}'[{}]: empty added token ({} {})", kGgufTokens, i,
                                         kGgufTokenType, type));
        if (auto [it, fresh] = added_ids.emplace(text, i); !fresh)
            return bad(path, fmt::format("key '{}'[{}]: added token '{}' is also token {}", kGgufTokens, i,
                                         text, it->second));
        AddedTokenSpec a;
        a.id = id;
        a.content = text;
        a.special = type == kControl && std::find(std::begin(kQwenNotSpecial), std::end(kQwenNotSpecial),
                                                  text) == std::end(kQwenNotSpecial);
        tok.added_tokens.push_back(std::move(a));
    }

    const GgufValue* merges = md.find(kGgufMerges);
    if (merges == nullptr || !merges->is_array() || merges->element_type() != GgufValueType::kString)
        return md.get_strings(kGgufMerges).status();
    tok.merges.reserve(merges->strings().size());
    for (size_t i = 0; i < merges->strings().size(); ++i) {
        // "a b", split on the one space (byte-level tokens hold no space: it is 'Ġ'); llama.cpp splits at
        // the first space after the first byte, HF tokenizers at the first space: the same on these.
        const std::string& s = merges->strings()[i];
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
            s.find(' ', sp + 1) != std::string::npos)
            return bad(path, fmt::format("key '{}'[{}]: expected \"a b\", got '{}'", kGgufMerges, i, s));
        tok.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    }

    SLUICE_ASSIGN_OR_RETURN(out.special, read_special_tokens(md, table, path));
    return out;
}

Expected<std::string> parse_gguf_chat_template(const GgufMetadata& md, const std::string& path,
                                               const std::string& name) {
    const std::string key = name.empty() || name == "default" ? std::string(kGgufChatTemplate)
                                                              : std::string(kGgufChatTemplate) + "." + name;
    if (md.has(key)) return md.get_string(key);
    std::string names;
    if (md.has("tokenizer.chat_templates")) {
        auto list = md.get_strings("tokenizer.chat_templates");
        if (list.has_value())
            for (const auto& n : *list) names += (names.empty() ? "" : ", ") + n;
    }
    return error(ErrorCode::kNotFound,
                 fmt::format("[tokenizer] {}: no chat template: key '{}' not found{}", path, key,
                             names.empty() ? std::string() : " (named templates: " + names + ")"));
}

Expected<HfTokenizerFiles> hf_tokenizer_files_from_gguf(const GgufMetadata& md, const std::string& path) {
    using nlohmann::json;
    SLUICE_ASSIGN_OR_RETURN(GgufTokenizerSpec spec, parse_gguf_tokenizer(md, path));
    const TokenizerJson& tok = spec.tokenizer;
    // parse_gguf_tokenizer's two shapes: NFC or no normaliser, Split regexes then ByteLevel, BPE, ByteLevel
    // decoding; or SentencePiece's (parse_spm_tokenizer), written as LlamaConverter writes it.
    const bool spm = !tok.byte_level;
    if (!spm && (tok.split_regexes.size() != 1 || tok.normalizer.size() > 1))
        return error(ErrorCode::kInternal, "[tokenizer] " + path + ": not a byte-level BPE with one Split");
    const json byte_level = {
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
    json vocab = json::object();
    for (const auto& [text, id] : tok.vocab) vocab[text] = id;
    json merges = json::array();
    for (const auto& [a, b] : tok.merges) merges.push_back({a, b});
    json added = json::array();
    json added_decoder = json::object();
    for (const AddedTokenSpec& a : tok.added_tokens) {
        const json entry = {{"content", a.content}, {"single_word", a.single_word}, {"lstrip", a.lstrip},
                            {"rstrip", a.rstrip},   {"normalized", a.normalized},   {"special", a.special}};
        json with_id = {{"id", a.id}};
        with_id.update(entry);
        added.push_back(with_id);
        added_decoder[std::to_string(a.id)] = entry;
    }
    // dump() throws on a token or template that is not UTF-8, which JSON cannot hold.
    std::string tokenizer_text;
    try {
        if (spm) {
            json steps = json::array();
            for (const NormalizerStep& n : tok.normalizer) {
                if (n.kind == NormalizerStep::Kind::kPrepend)
                    steps.push_back({{"type", "Prepend"}, {"prepend", n.content}});
                if (n.kind == NormalizerStep::Kind::kReplace)
                    steps.push_back(
                        {{"type", "Replace"}, {"pattern", {{"String", n.pattern}}}, {"content", n.content}});
            }
            json decoders = json::array();
            for (const auto& [pattern, content] : tok.decoder.replacements)
                decoders.push_back(
                    {{"type", "Replace"}, {"pattern", {{"String", pattern}}}, {"content", content}});
            decoders.push_back({{"type", "ByteFallback"}});
            decoders.push_back({{"type", "Fuse"}});
            decoders.push_back({{"type", "Strip"},
                                {"content", tok.decoder.strip_content},
                                {"start", tok.decoder.strip_start},
                                {"stop", 0}});
            json tokenizer = {{"version", "1.0"},
                              {"truncation", nullptr},
                              {"padding", nullptr},
                              {"added_tokens", added},
                              {"normalizer", {{"type", "Sequence"}, {"normalizers", steps}}},
                              {"pre_tokenizer", nullptr},
                              {"post_processor", nullptr},
                              {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
                              {"model",
                               {{"type", "BPE"},
                                {"dropout", nullptr},
                                {"unk_token", tok.unk_token ? json(*tok.unk_token) : json(nullptr)},
                                {"continuing_subword_prefix", nullptr},
                                {"end_of_word_suffix", nullptr},
                                {"fuse_unk", tok.fuse_unk},
                                {"byte_fallback", tok.byte_fallback},
                                {"ignore_merges", false},
                                {"vocab", vocab},
                                {"merges", merges}}}};
            tokenizer_text = tokenizer.dump(1) + "\n";
        } else {
            json tokenizer = {
                {"version", "1.0"},
                {"truncation", nullptr},
                {"padding", nullptr},
                {"added_tokens", added},
                {"normalizer", tok.normalizer.empty() ? json(nullptr) : json{{"type", "NFC"}}},
                {"pre_tokenizer",
                 {{"type", "Sequence"},
                  {"pretokenizers", json::array({{{"type", "Split"},
                                                  {"pattern", {{"Regex", tok.split_regexes[0]}}},
                                                  {"behavior", "Isolated"},
                                                  {"invert", false}},
                                                 byte_level})}}},
                {"post_processor", byte_level},
                {"decoder", byte_level},
                {"model",
                 {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", ""},
                  {"end_of_word_suffix", ""},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", tok.ignore_merges},
                  {"vocab", vocab},
                  {"merges", merges}}}};
            tokenizer_text = tokenizer.dump(1) + "\n";
        }
    } catch (const json::exception& e) {
        return bad(path, std::string("cannot be written as tokenizer.json: ") + e.what());
    }

    auto text_or_null = [](const std::optional<std::string>& t) { return t ? json(*t) : json(nullptr); };
    json config = {{"add_bos_token", spec.special.add_bos},
                   {"bos_token", text_or_null(spec.special.bos_token)},
                   {"eos_token", text_or_null(spec.special.eos_token)},
                   {"pad_token", text_or_null(spec.special.pad_token)},
                   {"added_tokens_decoder", added_decoder},
                   {"model_max_length", 1ull << 30},
                   {"tokenizer_class", "PreTrainedTokenizerFast"}};
    // The chat templates: the default alone as a string, or every named one beside it as a list.
    std::vector<std::string> names;
    if (md.has("tokenizer.chat_templates")) {
        SLUICE_ASSIGN_OR_RETURN(names, md.get_strings("tokenizer.chat_templates"));
    }
    if (md.has(kGgufChatTemplate) && names.empty()) {
        SLUICE_ASSIGN_OR_RETURN(const std::string t, md.get_string(kGgufChatTemplate));
        config["chat_template"] = t;
    } else if (!names.empty()) {
        json list = json::array();
        if (md.has(kGgufChatTemplate)) {
            SLUICE_ASSIGN_OR_RETURN(const std::string t, md.get_string(kGgufChatTemplate));
            list.push_back({{"name", "default"}, {"template", t}});
        }
        for (const std::string& name : names) {
            if (name == "default") continue;
            SLUICE_ASSIGN_OR_RETURN(const std::string t, parse_gguf_chat_template(md, path, name));
            list.push_back({{"name", name}, {"template", t}});
        }
        config["chat_template"] = list;
    }
    try {
        return HfTokenizerFiles{tokenizer_text, config.dump(2) + "\n"};
    } catch (const json::exception& e) {  // a token or template that is not UTF-8, which JSON cannot hold
        return bad(path, std::string("cannot be written as tokenizer.json: ") + e.what());
    }
}

}  // namespace sluice::format
