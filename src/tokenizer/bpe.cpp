// See bpe.h. Two merge loops with identical results: a quadratic one over a flat array for the
// usual short pieces (fast: no heap, the pair ranks are cached and only the two neighbours of a
// merge are looked up again), and HF's heap-based one for long pieces (a 10 k-space run must not
// take 10 k x 10 k steps).
#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <limits>
#include <queue>

#include "tokenizer/byte_level.h"
#include "tokenizer/text.h"

namespace sluice::tok {

// Pieces up to this many bytes take the array loop (O(n^2) compares, no allocation); longer ones
// the heap. Measured on the oracle corpus: 32 beats 16, 64 and 256.
constexpr size_t kShortPieceBytes = 32;

bool byte_level_to_bytes(std::string_view s, std::string* out) {
    out->clear();
    for (size_t i = 0; i < s.size();) {
        uint32_t cp = 0;
        i += next_code_point(s.data() + i, &cp);
        const int b = unicode_to_byte(cp);
        if (b < 0) return false;
        out->push_back(static_cast<char>(b));
    }
    return true;
}

std::string bytes_to_byte_level(std::string_view bytes) {
    std::string out;
    for (unsigned char b : bytes) append_utf8(out, kByteToUnicode[b]);
    return out;
}

void BpeModel::insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    const uint64_t key = pair_key(a, b);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
        Slot& s = slots_[i];
        if (s.key == key || s.key == kEmpty) {  // a repeated pair: the later line wins, as in HF
            s = {key, rank, merged};
            return;
        }
    }
}

Expected<BpeModel> BpeModel::build(const std::vector<std::pair<std::string, int32_t>>& vocab,
                                   const std::vector<std::pair<std::string, std::string>>& merges,
                                   const BpeOptions& options, const std::string& path,
                                   std::string_view merges_field) {
    static std::atomic<uint64_t> next_instance{1};
    BpeModel m;
    m.instance_ = next_instance++;
    m.byte_level_ = options.byte_level;
    m.byte_fallback_ = options.byte_fallback && !options.byte_level;
    m.fuse_unk_ = options.fuse_unk;
    m.ignore_merges_ = options.ignore_merges;
    std::unordered_map<std::string_view, int32_t> ids;
    ids.reserve(vocab.size() * 2);
    for (const auto& [text, id] : vocab) ids.emplace(text, id);

    m.byte_token_.fill(-1);
    m.fallback_token_.fill(-1);
    if (m.byte_level_) {
        for (int b = 0; b < 256; ++b) {
            std::string s;
            append_utf8(s, kByteToUnicode[b]);
            if (auto it = ids.find(s); it != ids.end()) m.byte_token_[b] = it->second;
        }
    } else {
        for (const auto& [text, id] : vocab) {
            uint32_t cp = 0;
            if (!text.empty() && next_code_point(text.data(), &cp) == text.size())
                m.char_token_.emplace(cp, id);
        }
        for (int b = 0; b < 256 && m.byte_fallback_; ++b)
            if (auto it = ids.find(fmt::format("<0x{:02X}>", b)); it != ids.end())
                m.fallback_token_[b] = it->second;
    }
    if (options.unk_token) {
        auto it = ids.find(*options.unk_token);
        if (it == ids.end())
            return error(ErrorCode::kCorrupt,
                         fmt::format("[tokenizer] {}: model.unk_token '{}' is not in the vocab", path,
                                     *options.unk_token));
        m.unk_id_ = it->second;
    }

    size_t capacity = 1024;
    while (capacity < merges.size() * 4) capacity *= 2;
    m.slots_.assign(capacity, Slot{});
    m.mask_ = capacity - 1;
    std::string joined;
    for (size_t r = 0; r < merges.size(); ++r) {
        const auto& [a, b] = merges[r];
        auto ia = ids.find(a);
        auto ib = ids.find(b);
        joined = a + b;
        auto ij = ids.find(joined);
        const std::string* missing = ia == ids.end()   ? &a
                                     : ib == ids.end() ? &b
                                     : ij == ids.end() ? &joined
                                                       : nullptr;
        if (missing)
            return error(ErrorCode::kCorrupt, fmt::format("[tokenizer] {}: {}[{}] ('{}' + '{}'): token '{}' "
                                                          "is not in the vocab",
                                                          path, merges_field, r, a, b, *missing));
        m.insert(ia->second, ib->second, static_cast<int32_t>(r), ij->second);
    }

    if (m.ignore_merges_) {
        // Pieces arrive as raw UTF-8; a byte-level token's string is mapped back to its bytes.
        std::string bytes;
        for (const auto& [text, id] : vocab) {
            if (!m.byte_level_) {
                m.piece_to_id_.emplace(text, id);
            } else if (byte_level_to_bytes(text, &bytes)) {
                m.piece_to_id_.emplace(bytes, id);
            }
        }
    }
    return m;
}

void BpeModel::character_symbols(std::string_view piece, std::vector<int32_t>* ids) const {
    // HF merge_word: a pending unk is written before the next character that has a token, or at the
    // end -- not before byte-fallback tokens, which therefore come first ("?<0x41>" gives <0x41>,
    // unk when '?' has neither a token nor every byte token). Mirrored as is.
    int32_t pending_unk = -1;
    for (size_t i = 0; i < piece.size();) {
        uint32_t cp = 0;
        const size_t len = next_code_point(piece.data() + i, &cp);
        if (auto it = char_token_.find(cp); it != char_token_.end()) {
            if (pending_unk >= 0) ids->push_back(pending_unk);
            pending_unk = -1;
            ids->push_back(it->second);
            i += len;
            continue;
        }
        bool all_bytes = byte_fallback_;
        for (size_t k = 0; k < len && all_bytes; ++k)
            all_bytes = fallback_token_[static_cast<unsigned char>(piece[i + k])] >= 0;
        if (all_bytes) {
            for (size_t k = 0; k < len; ++k)
                ids->push_back(fallback_token_[static_cast<unsigned char>(piece[i + k])]);
        } else if (unk_id_ >= 0) {
            if (pending_unk >= 0 && !fuse_unk_) ids->push_back(pending_unk);
            pending_unk = unk_id_;
        }  // else: HF drops a character with no token and no unk
        i += len;
    }
    if (pending_unk >= 0) ids->push_back(pending_unk);
}

namespace {
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct PieceCache {
    uint64_t owner = 0;
    // piece bytes -> its ids, stored as the raw bytes of an int32_t array
    std::unordered_map<std::string, std::string, StringHash, std::equal_to<>> map;
};
}  // namespace

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>* out) const {
    if (piece.size() > kCachePieceBytes || piece.size() <= 1) return encode_piece_uncached(piece, out);
    thread_local PieceCache cache;
    if (cache.owner != instance_) {
        cache.map.clear();
        cache.owner = instance_;
    }
    if (auto it = cache.map.find(piece); it != cache.map.end()) {
        const size_t at = out->size();
        out->resize(at + it->second.size() / sizeof(int32_t));
        std::memcpy(out->data() + at, it->second.data(), it->second.size());
        return;
    }
    const size_t before = out->size();
    encode_piece_uncached(piece, out);
    if (cache.map.size() >= kCacheEntries) cache.map.clear();
    cache.map.emplace(std::string(piece), std::string(reinterpret_cast<const char*>(out->data() + before),
                                                      (out->size() - before) * sizeof(int32_t)));
}

void BpeModel::encode_piece_uncached(std::string_view piece, std::vector<int32_t>* out) const {
    if (piece.empty()) return;
    if (ignore_merges_) {
        if (auto it = piece_to_id_.find(std::string(piece)); it != piece_to_id_.end()) {
            out->push_back(it->second);
            return;
        }
    }
    thread_local std::vector<int32_t> ids;
    ids.clear();
    if (!byte_level_) {
        character_symbols(piece, &ids);
    } else {
        // Every byte's token exists in real vocabularies; an unknown one becomes unk as in HF.
        bool unk_pending = false;
        for (unsigned char b : piece) {
            const int32_t id = byte_token_[b];
            if (id >= 0) {
                if (unk_pending) ids.push_back(unk_id_);
                unk_pending = false;
                ids.push_back(id);
            } else if (unk_id_ >= 0) {
                if (unk_pending && !fuse_unk_) ids.push_back(unk_id_);
                unk_pending = true;
            }  // else: HF drops a symbol with no token and no unk
        }
        if (unk_pending) ids.push_back(unk_id_);
    }
    if (ids.size() <= 1) {
        out->insert(out->end(), ids.begin(), ids.end());
        return;
    }
    if (ids.size() <= kShortPieceBytes) {
        merge_short(ids, out);
    } else {
        merge_long(ids, out);
    }
}

void BpeModel::merge_short(std::vector<int32_t>& ids, std::vector<int32_t>* out) const {
    constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
    // rank[k] / merged[k]: the merge of (ids[k], ids[k+1]), kNone when there is none.
    int32_t rank[kShortPieceBytes], merged[kShortPieceBytes];
    size_t n = ids.size();
    auto lookup = [&](size_t k) {
        const Slot* s = find(ids[k], ids[k + 1]);
        rank[k] = s ? s->rank : kNone;
        merged[k] = s ? s->merged : 0;
    };
    for (size_t k = 0; k + 1 < n; ++k) lookup(k);
    while (n > 1) {
        size_t best = 0;
        for (size_t k = 1; k + 1 < n; ++k)
            if (rank[k] < rank[best]) best = k;
        if (rank[best] == kNone) break;
        ids[best] = merged[best];
        // Remove element best+1 from ids and pair best from the pair arrays.
        for (size_t k = best + 1; k + 1 < n; ++k) ids[k] = ids[k + 1];
        for (size_t k = best; k + 2 < n; ++k) {
            rank[k] = rank[k + 1];
            merged[k] = merged[k + 1];
        }
        --n;
        if (best > 0) lookup(best - 1);
        if (best + 1 < n) lookup(best);
    }
    out->insert(out->end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n));
}

void BpeModel::merge_long(std::vector<int32_t>& ids, std::vector<int32_t>* out) const {
    // HF word.rs: a min-heap of (rank, position); stale entries are recognised and dropped when
    // popped. A symbol's position is the index of its first byte; prev/next link live symbols.
    struct Candidate {
        int32_t rank;
        int32_t pos;
        int32_t left;
        int32_t right;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    const int32_t n = static_cast<int32_t>(ids.size());
    thread_local std::vector<int32_t> prev, next;
    prev.resize(n);
    next.resize(n);
    for (int32_t k = 0; k < n; ++k) {
        prev[k] = k - 1;
        next[k] = k + 1 < n ? k + 1 : -1;
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    auto push = [&](int32_t pos) {
        const int32_t nx = next[pos];
        if (nx < 0) return;
        if (const Slot* s = find(ids[pos], ids[nx])) heap.push({s->rank, pos, ids[pos], ids[nx]});
    };
    for (int32_t k = 0; k + 1 < n; ++k) push(k);
    std::vector<bool> alive(n, true);
    while (!heap.empty()) {
        const Candidate c = heap.top();
        heap.pop();
        const int32_t nx = next[c.pos];
        if (!alive[c.pos] || nx < 0 || ids[c.pos] != c.left || ids[nx] != c.right) continue;  // stale
        ids[c.pos] = find(c.left, c.right)->merged;
        alive[nx] = false;
        next[c.pos] = next[nx];
        if (next[nx] >= 0) prev[next[nx]] = c.pos;
        if (prev[c.pos] >= 0) push(prev[c.pos]);
        push(c.pos);
    }
    for (int32_t k = 0; k >= 0; k = next[k]) out->push_back(ids[k]);
}

}  // namespace sluice::tok
