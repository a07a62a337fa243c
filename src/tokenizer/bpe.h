// BPE over token ids: a piece starts as the ids of its symbols, then the adjacent pair with the
// lowest merge rank (leftmost on ties) is merged until no pair is in the merge table -- HF
// tokenizers' `BPE::merge_word` (models/bpe/model.rs, word.rs). The symbols are
//   byte-level: each byte's one-character token in the GPT-2 alphabet (Qwen, DeepSeek, gpt-oss);
//   characters (SentencePiece-style, Llama 2 / Mistral): each code point's token; one with no token
//     becomes its UTF-8 bytes' "<0xNN>" tokens (byte_fallback), else unk (runs fused with fuse_unk).
//
// Data: the merge table maps (left id, right id) to (rank, merged id) in an open-addressing hash
// (~1 M slots for Qwen3's 151 k merges). Built once at load, immutable after: any number of threads
// may call encode_piece() at once.
// Piece cache: like HF (a 10 k-entry cache in front of merge_word) results are memoised, here in a
// per-thread map (no lock on the hot path) tagged with the model's unique instance number, so
// a thread that switches models -- or meets a new model at a freed one's address -- starts
// afresh. At most kCacheEntries pieces of <= kCachePieceBytes bytes per thread (a few MB).
// Rejected alternatives: merging on strings (ids keep the inner loop to integer compares); a
// shared cache behind a mutex (contended by concurrent encoders).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice::tok {

struct BpeOptions {
    bool byte_level = true;      // symbols are bytes (GPT-2 alphabet); false: characters
    bool byte_fallback = false;  // characters only: a character with no token becomes <0xNN> tokens
    bool fuse_unk = false;       // characters only: consecutive unknown characters give one unk
    bool ignore_merges = false;  // a piece that is itself a token is taken whole
    std::optional<std::string> unk_token;
};

class BpeModel {
 public:
    // `vocab` maps token strings (byte-level: GPT-2 alphabet) to ids; `merges` in rank order.
    // `path` names the file in errors, `merges_field` the merges' field in it.
    static Expected<BpeModel> build(const std::vector<std::pair<std::string, int32_t>>& vocab,
                                    const std::vector<std::pair<std::string, std::string>>& merges,
                                    const BpeOptions& options, const std::string& path,
                                    std::string_view merges_field = "model.merges");

    // Appends the ids of one pre-tokenized piece (raw UTF-8 bytes).
    void encode_piece(std::string_view piece, std::vector<int32_t>* out) const;
    // The same without the cache (benchmarks, tests).
    void encode_piece_uncached(std::string_view piece, std::vector<int32_t>* out) const;

    static constexpr size_t kCacheEntries = 1 << 16;
    static constexpr size_t kCachePieceBytes = 128;

 private:
    struct Slot {
        uint64_t key = kEmpty;
        int32_t rank = 0;
        int32_t merged = 0;
    };
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
    static size_t hash(uint64_t key) { return size_t((key * 0x9E3779B97F4A7C15ull) >> 20); }
    const Slot* find(int32_t a, int32_t b) const {
        const uint64_t key = pair_key(a, b);
        for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
            const Slot& s = slots_[i];
            if (s.key == key) return &s;
            if (s.key == kEmpty) return nullptr;
        }
    }
    void insert(int32_t a, int32_t b, int32_t rank, int32_t merged);
    void merge_short(std::vector<int32_t>& ids, std::vector<int32_t>* out) const;
    void merge_long(std::vector<int32_t>& ids, std::vector<int32_t>* out) const;
    void character_symbols(std::string_view piece, std::vector<int32_t>* ids) const;

    uint64_t instance_ = 0;  // unique per build(): tags the per-thread cache
    std::vector<Slot> slots_;
    size_t mask_ = 0;
    bool byte_level_ = true;
    std::array<int32_t, 256> byte_token_{};  // byte-level: id of each byte's one-char token, or -1
    // characters: the id of each one-code-point token, and of each byte's "<0xNN>" token (or -1)
    std::unordered_map<uint32_t, int32_t> char_token_;
    std::array<int32_t, 256> fallback_token_{};
    bool byte_fallback_ = false;
    bool fuse_unk_ = false;
    int32_t unk_id_ = -1;
    bool ignore_merges_ = false;
    std::unordered_map<std::string, int32_t> piece_to_id_;  // only with ignore_merges: piece bytes -> id
};

}  // namespace sluice::tok
