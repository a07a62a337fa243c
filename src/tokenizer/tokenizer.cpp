// The Tokenizer behind include/sluice/tokenizer.h: loads the HF files or a GGUF's tokenizer
// metadata (both parsed by src/format/ into the same plain data), builds the id tables, and runs the pipeline
// of docs/models.md 7.1 -- added tokens split out on the raw text, the normaliser (NFC; Prepend/Replace for
// SentencePiece-style files) on the rest, added tokens flagged `normalized` split out of the normalised text,
// the pre-tokenizer (Split regexes, or Metaspace), then BPE per piece.
// Decoding, by the file's decoder:
//   ByteLevel: concatenates every token's bytes and repairs invalid UTF-8 once over the whole (HF's
//     ByteLevel decoder calls String::from_utf8_lossy on all bytes).
//   Pieces (Replace "▁" -> " ", ByteFallback, Fuse, Strip): token texts concatenated; a run of <0xNN>
//     tokens is its bytes when they are valid UTF-8, else one U+FFFD per byte (HF's ByteFallback, which
//     judges the run as a whole); then the text loses up to Strip.start leading spaces.
//   Metaspace: "▁" -> " ", and the first token loses its "▁"s.
// decode() and IncrementalDetokenizer run the same per-token steps, so a stream's text is decode()'s.
//
// Lifetime: everything is built in load() and never modified, so concurrent encode/decode calls
// need no locks; per-call scratch lives on the stack or in thread_local buffers.
// Rejected alternative: decoding the runs between added tokens separately (transformers.js and
// HF's slow Python tokenizer do). Since an added token's content is valid UTF-8 starting with a
// non-continuation byte, a broken sequence can never be completed across it, so the text is the
// same -- except for contents made of byte-alphabet characters (e.g. "Ġx"), which HF's fast
// decoder maps to bytes and which we therefore map too; the joint form is also what the
// streaming detokenizer needs.
#include "sluice/tokenizer.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <unordered_map>

#include "format/gguf.h"
#include "format/tokenizer_gguf.h"
#include "format/tokenizer_json.h"
#include "io/mapped_file.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/text.h"

namespace sluice {

namespace {
enum TokenFlags : uint8_t {
    kKnown = 1,
    kAdded = 2,
    kSpecial = 4,
    kByteToken = 8,  // Pieces decoder with ByteFallback: a "<0xNN>" token, id_bytes is the byte
};

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// HF ByteFallback's test: 6 bytes "<0x..>" whose middle Rust's u8::from_str_radix(_, 16) accepts
// (two hex digits, or '+' and one).
bool byte_fallback_value(std::string_view s, unsigned char* byte) {
    if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return false;
    auto hex = [](char c) {
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
    };
    const int hi = s[3] == '+' ? 0 : hex(s[3]), lo = hex(s[4]);
    if (hi < 0 || lo < 0) return false;
    *byte = static_cast<unsigned char>(hi * 16 + lo);
    return true;
}

bool file_exists(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}
}  // namespace

struct Tokenizer::Impl {
    tok::BpeModel bpe;
    tok::PreTokenizer pre;
    tok::Normalizer normalizer;
    std::optional<tok::Metaspace> metaspace;  // the pre-tokenizer when the file has Metaspace
    format::DecoderSpec decoder;
    tok::AddedTokenMatcher raw_matcher;         // added tokens with normalized = false
    tok::AddedTokenMatcher normalized_matcher;  // added tokens with normalized = true
    std::vector<std::string> id_text;           // raw vocab string / added content
    std::vector<std::string> id_bytes;          // bytes in decoded text
    std::vector<uint8_t> id_flags;
    std::unordered_map<std::string, int32_t> added_ids;
    std::unordered_map<std::string, int32_t> vocab_ids;
    std::optional<std::string> eos, bos, pad;
    std::optional<int32_t> bos_to_add;

    // An added token's content or a vocabulary string -> its id (Tokenizer::token_id).
    std::optional<int32_t> token_id_of(const std::string& content) const {
        if (auto it = added_ids.find(content); it != added_ids.end()) return it->second;
        if (auto it = vocab_ids.find(content); it != vocab_ids.end()) return it->second;
        return std::nullopt;
    }

    // `starts_input`: `text` begins at offset 0 of the encoded input (Metaspace's "first" scheme).
    void encode_text(std::string_view text, bool starts_input, std::vector<int32_t>* out) const;

    // The Pieces and Metaspace decoders, one decoded token at a time (decode() and the stream share
    // them). `run`: the open run of byte-fallback bytes; `tokens`: tokens decoded before this one;
    // `strip_left`: how many leading strip characters may still go. Appends to `*out`.
    void decode_token(int32_t id, std::string& run, size_t& tokens, size_t& strip_left,
                      std::string* out) const;
    void decode_end(std::string& run, size_t& strip_left, std::string* out) const;
    void strip_front(std::string* out, size_t from, size_t& strip_left) const;

    // A nested class may call the private constructor: the one way a built Impl becomes a Tokenizer.
    static std::shared_ptr<const Tokenizer> wrap(std::unique_ptr<Impl> impl) {
        return std::shared_ptr<const Tokenizer>(new Tokenizer(std::move(impl)));
    }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

namespace {

// Where the parsed data came from, for error messages.
struct SourceNames {
    std::string file;          // tokenizer.json, or the .gguf
    std::string vocab_field;   // "model.vocab" / "tokenizer.ggml.tokens"
    std::string merges_field;  // "model.merges" / "tokenizer.ggml.merges"
};

// Builds the id tables from parsed data: tokenizer.json's (with tokenizer_config.json's flags
// already applied to `added`) or a GGUF's metadata. One builder, so both sources give the same
// tokenizer for the same data.
Expected<std::unique_ptr<Tokenizer::Impl>> build_impl(format::TokenizerJson spec,
                                                      const std::vector<format::AddedTokenSpec>& added,
                                                      int64_t vocab_size, const SourceNames& names) {
    auto impl = std::make_unique<Tokenizer::Impl>();
    impl->normalizer = tok::Normalizer(std::move(spec.normalizer));
    if (spec.metaspace) impl->metaspace.emplace(std::move(*spec.metaspace));
    impl->decoder = std::move(spec.decoder);
    SLUICE_ASSIGN_OR_RETURN(impl->pre, tok::PreTokenizer::create(spec.split_regexes));
    tok::BpeOptions options;
    options.byte_level = spec.byte_level;
    options.byte_fallback = spec.byte_fallback;
    options.fuse_unk = spec.fuse_unk;
    options.ignore_merges = spec.ignore_merges;
    options.unk_token = spec.unk_token;
    SLUICE_ASSIGN_OR_RETURN(
        impl->bpe, tok::BpeModel::build(spec.vocab, spec.merges, options, names.file, names.merges_field));

    int32_t max_id = -1;
    for (const auto& [text, id] : spec.vocab) max_id = std::max(max_id, id);
    for (const auto& t : added) max_id = std::max(max_id, t.id);
    if (vocab_size > 0 && max_id >= vocab_size) {
        for (const auto& [text, id] : spec.vocab)
            if (id == max_id)
                return error(ErrorCode::kCorrupt,
                             fmt::format("[tokenizer] {}: {}: '{}' has id {}, past the model's vocab_size {}",
                                         names.file, names.vocab_field, text, id, vocab_size));
        for (const auto& t : added)
            if (t.id == max_id)
                return error(ErrorCode::kCorrupt,
                             fmt::format("[tokenizer] {}: added token '{}' has id {}, past the model's "
                                         "vocab_size {}",
                                         names.file, t.content, t.id, vocab_size));
    }
    const size_t n = static_cast<size_t>(max_id + 1);
    impl->id_text.resize(n);
    impl->id_bytes.resize(n);
    impl->id_flags.assign(n, 0);
    // A token's decoded bytes, by the decoder -- added tokens go through it too in HF's fast decode.
    // ByteLevel: its characters mapped back through the byte table, or -- when a character is outside
    // the table -- its UTF-8 as is. Pieces: the Replace steps, then a "<0xNN>" result is the byte NN.
    // Metaspace: the replacement character becomes a space (the first token's case is decode_token's).
    const format::DecoderSpec& dec = impl->decoder;
    auto set_bytes = [&](int32_t id, const std::string& text) {
        std::string bytes;
        switch (dec.kind) {
            case format::DecoderSpec::Kind::kByteLevel:
                if (!tok::byte_level_to_bytes(text, &bytes)) bytes = text;
                break;
            case format::DecoderSpec::Kind::kPieces: {
                bytes = text;
                for (const auto& [pattern, content] : dec.replacements)
                    bytes = tok::replace_all(bytes, pattern, content);
                unsigned char b = 0;
                if (dec.byte_fallback && byte_fallback_value(bytes, &b)) {
                    bytes.assign(1, static_cast<char>(b));
                    impl->id_flags[id] |= kByteToken;  // the caller set the flags just before
                }
                break;
            }
            case format::DecoderSpec::Kind::kMetaspace:
                bytes = tok::replace_all(text, dec.replacement, " ");
                break;
        }
        impl->id_bytes[id] = std::move(bytes);
    };
    impl->vocab_ids.reserve(spec.vocab.size());
    for (auto& [text, id] : spec.vocab) {
        if (impl->id_flags[id] & kKnown)
            return error(ErrorCode::kCorrupt,
                         fmt::format("[tokenizer] {}: {}: id {} is used by both '{}' and '{}'", names.file,
                                     names.vocab_field, id, impl->id_text[id], text));
        impl->id_flags[id] = kKnown;
        set_bytes(id, text);
        impl->vocab_ids.emplace(text, id);
        impl->id_text[id] = std::move(text);
    }
    std::vector<format::AddedTokenSpec> raw, normalized;
    for (const auto& t : added) {
        if ((impl->id_flags[t.id] & kKnown) && impl->id_text[t.id] != t.content)
            return error(ErrorCode::kCorrupt,
                         fmt::format("[tokenizer] {}: added token '{}' has id {}, which the "
                                     "vocab gives to '{}'",
                                     names.file, t.content, t.id, impl->id_text[t.id]));
        impl->id_text[t.id] = t.content;
        impl->id_flags[t.id] = kKnown | kAdded | (t.special ? kSpecial : 0);
        set_bytes(t.id, t.content);
        impl->added_ids[t.content] = t.id;
        (t.normalized ? normalized : raw).push_back(t);
    }
    impl->raw_matcher = tok::AddedTokenMatcher(std::move(raw));
    impl->normalized_matcher = tok::AddedTokenMatcher(std::move(normalized));
    return impl;
}

}  // namespace

bool tok::is_gguf_path(const std::string& path) {
    constexpr std::string_view kExt = ".gguf";
    struct stat st {};
    return path.size() > kExt.size() && path.compare(path.size() - kExt.size(), kExt.size(), kExt) == 0 &&
           !(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
}

Expected<std::shared_ptr<const Tokenizer>> tok::tokenizer_from_gguf(const format::GgufMetadata& metadata,
                                                                    const std::string& path,
                                                                    int64_t vocab_size) {
    SLUICE_ASSIGN_OR_RETURN(format::GgufTokenizerSpec spec, format::parse_gguf_tokenizer(metadata, path));
    const std::vector<format::AddedTokenSpec> added = std::move(spec.tokenizer.added_tokens);
    // A SentencePiece vocabulary's merges are derived from its scores (format/tokenizer_gguf.h).
    const std::string merges_name =
        spec.tokenizer.byte_level ? fmt::format("key '{}'", format::kGgufMerges)
                                  : fmt::format("the merges derived from key '{}'", format::kGgufScores);
    SLUICE_ASSIGN_OR_RETURN(
        auto impl, build_impl(std::move(spec.tokenizer), added, vocab_size,
                              SourceNames{path, fmt::format("key '{}'", format::kGgufTokens), merges_name}));
    impl->eos = std::move(spec.special.eos_token);
    impl->bos = std::move(spec.special.bos_token);
    impl->pad = std::move(spec.special.pad_token);
    if (spec.special.add_bos) impl->bos_to_add = impl->token_id_of(*impl->bos);
    return Tokenizer::Impl::wrap(std::move(impl));
}

Expected<std::shared_ptr<const Tokenizer>> Tokenizer::load(const std::string& path, int64_t vocab_size) {
    if (tok::is_gguf_path(path)) {
        SLUICE_ASSIGN_OR_RETURN(auto gguf, format::GgufCheckpoint::open(path));
        return tok::tokenizer_from_gguf(gguf->metadata(), path, vocab_size);
    }
    const std::string json_path = path + "/tokenizer.json";
    if (!file_exists(json_path))
        return error(ErrorCode::kNotFound, fmt::format("[tokenizer] {}: file not found", json_path));
    SLUICE_ASSIGN_OR_RETURN(std::string json_text, io::read_text_file(json_path));
    SLUICE_ASSIGN_OR_RETURN(format::TokenizerJson spec, format::parse_tokenizer_json(json_text, json_path));
    json_text.clear();
    json_text.shrink_to_fit();

    std::optional<format::TokenizerConfigJson> config;
    const std::string config_path = path + "/tokenizer_config.json";
    if (file_exists(config_path)) {
        SLUICE_ASSIGN_OR_RETURN(std::string config_text, io::read_text_file(config_path));
        SLUICE_ASSIGN_OR_RETURN(config, format::parse_tokenizer_config_json(config_text, config_path));
    }

    // Added tokens: tokenizer.json's list, with tokenizer_config.json's flags taking precedence
    // (transformers re-registers added_tokens_decoder on the fast tokenizer at load).
    std::vector<format::AddedTokenSpec> added = std::move(spec.added_tokens);
    if (config) {
        for (const auto& t : config->added_tokens_decoder) {
            auto it = std::find_if(added.begin(), added.end(), [&](const auto& a) { return a.id == t.id; });
            if (it == added.end()) {
                added.push_back(t);
            } else {
                if (it->content != t.content)
                    return error(
                        ErrorCode::kCorrupt,
                        fmt::format("[tokenizer] {}: added_tokens_decoder['{}'] is '{}' but {} says '{}'",
                                    config_path, t.id, t.content, json_path, it->content));
                *it = t;
            }
        }
    }
    SLUICE_ASSIGN_OR_RETURN(auto impl, build_impl(std::move(spec), added, vocab_size,
                                                  SourceNames{json_path, "model.vocab", "model.merges"}));
    if (config) {
        impl->eos = std::move(config->eos_token);
        impl->bos = std::move(config->bos_token);
        impl->pad = std::move(config->pad_token);
        if (config->add_bos_token) {
            // transformers refuses add_bos_token without a bos_token (LlamaTokenizerFast); so does sluice.
            if (!impl->bos)
                return error(ErrorCode::kCorrupt,
                             fmt::format("[tokenizer] {}: add_bos_token is true but bos_token is missing",
                                         config_path));
            impl->bos_to_add = impl->token_id_of(*impl->bos);
            if (!impl->bos_to_add)
                return error(
                    ErrorCode::kCorrupt,
                    fmt::format("[tokenizer] {}: bos_token '{}' (add_bos_token is true) is not a token "
                                "of {}",
                                config_path, *impl->bos, json_path));
        }
    }
    return Impl::wrap(std::move(impl));
}

void Tokenizer::Impl::encode_text(std::string_view text, bool starts_input, std::vector<int32_t>* out) const {
    thread_local std::vector<std::string_view> pieces;
    thread_local std::string spaced;  // Metaspace's rewrite of `text`
    pieces.clear();
    if (metaspace) {
        metaspace->apply(text, starts_input, &spaced, &pieces);
    } else {
        pre.split(text, &pieces);
    }
    for (std::string_view piece : pieces) bpe.encode_piece(piece, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
    std::string repaired;
    if (!tok::is_valid_utf8(text)) {
        repaired = tok::utf8_lossy(text);
        text = repaired;
    }
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    std::vector<tok::TextSegment> segments, inner;
    impl_->raw_matcher.split(text, parse_special, &segments);
    std::string normalized;
    for (const auto& seg : segments) {
        if (seg.token_id >= 0) {
            ids.push_back(seg.token_id);
            continue;
        }
        const bool starts_input = seg.text.data() == text.data();
        std::string_view part =
            impl_->normalizer.empty() ? seg.text : impl_->normalizer.apply(seg.text, &normalized);
        if (impl_->normalized_matcher.empty()) {
            impl_->encode_text(part, starts_input, &ids);
            continue;
        }
        inner.clear();
        impl_->normalized_matcher.split(part, parse_special, &inner);
        for (const auto& s : inner) {
            if (s.token_id >= 0) {
                ids.push_back(s.token_id);
            } else {
                impl_->encode_text(s.text, starts_input && s.text.data() == part.data(), &ids);
            }
        }
    }
    return ids;
}

void Tokenizer::Impl::strip_front(std::string* out, size_t from, size_t& strip_left) const {
    const std::string& c = decoder.strip_content;
    while (strip_left > 0 && out->size() > from) {
        if (out->compare(from, c.size(), c) != 0) {
            strip_left = 0;
            break;
        }
        out->erase(from, c.size());
        --strip_left;
    }
}

void Tokenizer::Impl::decode_token(int32_t id, std::string& run, size_t& tokens, size_t& strip_left,
                                   std::string* out) const {
    const size_t from = out->size();
    if (decoder.kind == format::DecoderSpec::Kind::kMetaspace) {
        if (tokens == 0 && decoder.prepend_scheme != format::PrependScheme::kNever) {
            // HF: every replacement character of the first token is dropped, not only a leading one.
            *out += tok::replace_all(id_text[id], decoder.replacement, "");
        } else {
            *out += id_bytes[id];
        }
    } else if (id_flags[id] & kByteToken) {
        run += id_bytes[id];
    } else {
        decode_end(run, strip_left, out);
        *out += id_bytes[id];
    }
    ++tokens;
    strip_front(out, from, strip_left);
}

void Tokenizer::Impl::decode_end(std::string& run, size_t& strip_left, std::string* out) const {
    if (run.empty()) return;
    const size_t from = out->size();
    if (tok::is_valid_utf8(run)) {
        *out += run;
    } else {
        for (size_t i = 0; i < run.size(); ++i) *out += kReplacementChar;
    }
    run.clear();
    strip_front(out, from, strip_left);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
    const Impl& impl = *impl_;
    auto skipped = [&](int32_t id) {
        if (id < 0 || static_cast<size_t>(id) >= impl.id_flags.size()) return true;
        const uint8_t f = impl.id_flags[id];
        return !(f & kKnown) || (skip_special && (f & kSpecial));
    };
    std::string bytes;
    if (impl.decoder.kind != format::DecoderSpec::Kind::kByteLevel) {
        std::string run;
        size_t tokens = 0;
        size_t strip_left = static_cast<size_t>(impl.decoder.strip_start);
        for (int32_t id : ids)
            if (!skipped(id)) impl.decode_token(id, run, tokens, strip_left, &bytes);
        impl.decode_end(run, strip_left, &bytes);
        return bytes;  // valid UTF-8: token texts are, and byte runs were checked
    }
    for (int32_t id : ids)
        if (!skipped(id)) bytes += impl.id_bytes[id];
    if (tok::is_valid_utf8(bytes)) return bytes;
    return tok::utf8_lossy(bytes);
}

std::string_view Tokenizer::token_text(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_text.size()) return {};
    return impl_->id_text[id];
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size()) return {};
    return impl_->id_bytes[id];
}

int32_t Tokenizer::vocab_size() const {
    return static_cast<int32_t>(impl_->id_flags.size());
}

std::optional<int32_t> Tokenizer::token_id(std::string_view content) const {
    return impl_->token_id_of(std::string(content));
}

bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < impl_->id_flags.size() && (impl_->id_flags[id] & kSpecial);
}
bool Tokenizer::is_added(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < impl_->id_flags.size() && (impl_->id_flags[id] & kAdded);
}

const std::optional<std::string>& Tokenizer::eos_token() const {
    return impl_->eos;
}
const std::optional<std::string>& Tokenizer::bos_token() const {
    return impl_->bos;
}
const std::optional<std::string>& Tokenizer::pad_token() const {
    return impl_->pad;
}
std::optional<int32_t> Tokenizer::bos_id_to_add() const {
    return impl_->bos_to_add;
}

// ---- IncrementalDetokenizer -------------------------------------------------------------------

IncrementalDetokenizer::IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special)
    : tokenizer_(std::move(tokenizer)),
      skip_special_(skip_special),
      strip_left_(tokenizer_ ? static_cast<size_t>(tokenizer_->impl_->decoder.strip_start) : 0) {}

std::string IncrementalDetokenizer::feed(int32_t id) {
    // decode() skips unknown ids and (optionally) special tokens; so does the stream.
    if (tokenizer_->token_text(id).empty() || (skip_special_ && tokenizer_->is_special(id))) return {};
    const Tokenizer::Impl& impl = *tokenizer_->impl_;
    if (impl.decoder.kind != format::DecoderSpec::Kind::kByteLevel) {
        // A byte-fallback run is held whole until a token ends it: HF judges the run's UTF-8 as a
        // whole, so a later bad byte would turn characters already complete into U+FFFD too.
        std::string out;
        impl.decode_token(id, pending_bytes_, tokens_, strip_left_, &out);
        return out;
    }
    pending_bytes_ += impl.id_bytes[id];
    const size_t ready = tok::utf8_stable_prefix(pending_bytes_);
    std::string out = tok::utf8_lossy(std::string_view(pending_bytes_).substr(0, ready));
    pending_bytes_.erase(0, ready);
    return out;
}

std::string IncrementalDetokenizer::flush() {
    const Tokenizer::Impl& impl = *tokenizer_->impl_;
    if (impl.decoder.kind != format::DecoderSpec::Kind::kByteLevel) {
        std::string out;
        impl.decode_end(pending_bytes_, strip_left_, &out);
        return out;
    }
    std::string out = tok::utf8_lossy(pending_bytes_);
    pending_bytes_.clear();
    return out;
}

}  // namespace sluice
