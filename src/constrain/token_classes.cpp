// TokenClasses (the vocabulary side), MemoDfa and plan_token_class (the grammar side) of the
// token-class shortcut; see token_classes.h.
#include "constrain/token_classes.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "core/assert.h"

namespace sluice {
namespace {

using Summary = TokenClasses::Summary;

int chars_of(const Summary& s) {
    return static_cast<int>((s[1] >> TokenClasses::kCharsShift) & 0xFF);
}

// a ∪ b, the character count the larger one.
Summary combine(const Summary& a, const Summary& b) {
    const int chars = std::max(chars_of(a), chars_of(b));
    return {a[0] | b[0], ((a[1] | b[1]) & ~TokenClasses::kCharsMask) |
                             (static_cast<uint64_t>(chars) << TokenClasses::kCharsShift)};
}

// The multi-byte UTF-8 characters (RFC 3629: no overlongs, no surrogates, nothing past U+10FFFF) as
// lead bytes and the ranges of the bytes that follow.
struct Utf8Shape {
    uint8_t lead_lo, lead_hi;
    int follow;
    uint8_t second_lo, second_hi;  // the rest are 0x80-0xBF
};
constexpr Utf8Shape kUtf8Shapes[] = {
    {0xC2, 0xDF, 1, 0x80, 0xBF}, {0xE0, 0xE0, 2, 0xA0, 0xBF}, {0xE1, 0xEC, 2, 0x80, 0xBF},
    {0xED, 0xED, 2, 0x80, 0x9F}, {0xEE, 0xEF, 2, 0x80, 0xBF}, {0xF0, 0xF0, 3, 0x90, 0xBF},
    {0xF1, 0xF3, 3, 0x80, 0xBF}, {0xF4, 0xF4, 3, 0x80, 0x8F},
};

const Utf8Shape* shape_of(uint8_t lead) {
    for (const Utf8Shape& s : kUtf8Shapes)
        if (lead >= s.lead_lo && lead <= s.lead_hi) return &s;
    return nullptr;
}

// What a token's bytes hold (a Summary of one token).
Summary summarize(std::string_view bytes) {
    Summary s{};
    int chars = 0;
    bool complete = !bytes.empty();
    for (size_t i = 0; i < bytes.size();) {
        const auto c = static_cast<uint8_t>(bytes[i]);
        ++chars;
        if (c < 0x80) {
            if (c < 0x20)
                s[1] |= TokenClasses::kControl;
            else if (c < 0x60)
                s[0] |= uint64_t{1} << (c - 0x20);
            else
                s[1] |= uint64_t{1} << (c - 0x60);
            ++i;
            continue;
        }
        const Utf8Shape* shape = shape_of(c);
        bool whole = shape && i + static_cast<size_t>(shape->follow) < bytes.size();
        for (int k = 1; whole && k <= shape->follow; ++k) {
            const auto f = static_cast<uint8_t>(bytes[i + static_cast<size_t>(k)]);
            whole = k == 1 ? f >= shape->second_lo && f <= shape->second_hi : f >= 0x80 && f <= 0xBF;
        }
        if (!whole) {  // the class never holds it: nothing more about it is needed
            complete = false;
            break;
        }
        s[1] |= TokenClasses::kMultibyte;
        i += 1 + static_cast<size_t>(shape->follow);
    }
    if (!complete) s[1] |= TokenClasses::kIncomplete;
    s[1] |= static_cast<uint64_t>(std::min(chars, 255)) << TokenClasses::kCharsShift;
    return s;
}

void set_bit(std::vector<uint64_t>& bits, size_t offset, int32_t id) {
    bits[offset + (static_cast<size_t>(id) >> 6)] |= uint64_t{1} << (id & 63);
}

}  // namespace

std::shared_ptr<const TokenClasses> TokenClasses::build(const TokenTrie& trie) {
    auto tc = std::make_shared<TokenClasses>();
    const auto vocab = static_cast<size_t>(trie.vocab_size());
    const size_t words = (vocab + 63) / 64;
    tc->words = words;
    tc->complete.assign(words, 0);
    tc->multibyte.assign(words, 0);
    tc->control.assign(words, 0);
    tc->printable.assign(96 * words, 0);
    tc->at_most.assign((kMaxCountedChars + 1) * words, 0);
    tc->token_chars.assign(vocab, 0);
    std::vector<Summary> by_id(vocab, Summary{});
    for (size_t i = 0; i < vocab; ++i) {
        const auto id = static_cast<int32_t>(i);
        const std::string_view bytes = trie.bytes(id);
        if (bytes.empty()) continue;
        const Summary s = summarize(bytes);
        by_id[i] = s;
        if (s[1] & kIncomplete) continue;  // only complete tokens are ever in a class
        set_bit(tc->complete, 0, id);
        if (s[1] & kMultibyte) set_bit(tc->multibyte, 0, id);
        if (s[1] & kControl) set_bit(tc->control, 0, id);
        for (uint64_t w = s[0]; w; w &= w - 1)
            set_bit(tc->printable, static_cast<size_t>(std::countr_zero(w)) * words, id);
        for (uint64_t w = s[1] & 0xFFFFFFFFu; w; w &= w - 1)
            set_bit(tc->printable, static_cast<size_t>(64 + std::countr_zero(w)) * words, id);
        const int chars = chars_of(s);
        tc->token_chars[i] = static_cast<uint8_t>(chars);
        tc->max_chars = std::max(tc->max_chars, chars);
        if (chars <= kMaxCountedChars)
            set_bit(tc->at_most, static_cast<size_t>(chars) * words, id);
        else
            tc->long_tokens.emplace_back(chars, id);
    }
    for (size_t l = 1; l <= kMaxCountedChars; ++l)
        for (size_t w = 0; w < words; ++w) tc->at_most[l * words + w] |= tc->at_most[(l - 1) * words + w];
    std::sort(tc->long_tokens.begin(), tc->long_tokens.end());
    // Edge summaries, children before parents (a child's index is above its parent's: the trie is
    // built in preorder). below[n]: the bytes under node n; whole[n]: kIncomplete and the
    // character count over the tokens of n's subtree.
    auto byte_bit = [](uint8_t b) -> Summary {
        if (b < 0x20) return {0, kControl};
        if (b >= 0x80) return {0, kMultibyte};
        const int i = b - 0x20;
        return i < 64 ? Summary{uint64_t{1} << i, 0} : Summary{0, uint64_t{1} << (i - 64)};
    };
    const Summary whole_mask = {0, kIncomplete | kCharsMask};
    std::vector<Summary> below(trie.nodes_.size(), Summary{}), whole(trie.nodes_.size(), Summary{});
    tc->edge_summary.resize(trie.edges_.size());
    for (size_t n = trie.nodes_.size(); n-- > 0;) {
        const TokenTrie::Node& nd = trie.nodes_[n];
        Summary w{}, b{};
        for (uint32_t k = nd.token_begin; k < nd.token_end; ++k) {
            const Summary& t = by_id[static_cast<size_t>(trie.token_ids_[k])];
            w = combine(w, {0, t[1] & whole_mask[1]});
        }
        for (uint32_t e = nd.edge_begin; e < nd.edge_end; ++e) {
            const uint32_t c = trie.edges_[e].child;
            SLUICE_ASSERT(c > n);
            const Summary from_edge = combine(byte_bit(trie.edges_[e].byte), below[c]);
            tc->edge_summary[e] = combine(from_edge, whole[c]);
            b = combine(b, from_edge);
            w = combine(w, whole[c]);
        }
        below[n] = b;
        whole[n] = w;
    }
    return tc;
}

void TokenClasses::class_bits(const Summary& allowed, std::vector<uint64_t>* out) const {
    SLUICE_ASSERT(!(allowed[1] & kIncomplete));
    *out = complete;
    auto remove = [&](const uint64_t* set) {
        for (size_t w = 0; w < words; ++w) (*out)[w] &= ~set[w];
    };
    if (!(allowed[1] & kMultibyte)) remove(multibyte.data());
    if (!(allowed[1] & kControl)) remove(control.data());
    for (int b = 0; b < 96; ++b)
        if (!((b < 64 ? allowed[0] >> b : allowed[1] >> (b - 64)) & 1))
            remove(printable.data() + static_cast<size_t>(b) * words);
}

void TokenClasses::or_at_most(const std::vector<uint64_t>& cls, int chars,
                              std::vector<uint64_t>* bits) const {
    uint64_t* out = bits->data();
    if (chars >= max_chars) {
        for (size_t w = 0; w < words; ++w) out[w] |= cls[w];
        return;
    }
    const uint64_t* within = at_most.data() + static_cast<size_t>(std::min(chars, kMaxCountedChars)) * words;
    for (size_t w = 0; w < words; ++w) out[w] |= cls[w] & within[w];
    for (const auto& [n, id] : long_tokens) {
        if (n > chars) break;
        const auto i = static_cast<size_t>(id);
        out[i >> 6] |= cls[i >> 6] & (uint64_t{1} << (i & 63));
    }
}

size_t TokenClasses::memory_bytes() const {
    return edge_summary.size() * sizeof(Summary) +
           (complete.size() + multibyte.size() + control.size() + printable.size() + at_most.size()) *
               sizeof(uint64_t) +
           long_tokens.size() * sizeof(long_tokens[0]) + token_chars.size();
}

namespace constrain {

// ---- MemoDfa ----

namespace {
uint64_t hash_heads(const Head* h, size_t n) {
    uint64_t x = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; ++i) {
        x ^= (static_cast<uint64_t>(h[i].pos) << 32) | static_cast<uint32_t>(h[i].parent);
        x *= 0xFF51AFD7ED558CCDull;
        x ^= x >> 29;
    }
    return x;
}
}  // namespace

MemoDfa::MemoDfa(const Grammar& g) : g_(g), st_(g) {
    st_.share_frames = true;
    slots_.assign(2 * kMaxStates, -1);  // a load factor of at most 1/2
    // Reserved whole (address space only until used), so rows are never copied as states are added.
    next_.reserve(kMaxStates * 256);
    states_.reserve(kMaxStates);
    info_.reserve(kMaxStates);
}

int32_t MemoDfa::add_start(const std::vector<std::vector<uint32_t>>& stacks) {
    const size_t frames_mark = st_.frames.size(), begin = st_.heads.size();
    for (const auto& s : stacks) st_.push_stack(s);
    return intern(begin, frames_mark);
}

int32_t MemoDfa::step(int32_t s, uint8_t b) {
    const size_t frames_mark = st_.frames.size(), begin = st_.heads.size();
    bool accept = false;
    const State from = states_[static_cast<size_t>(s)];
    st_.step(from.begin, from.end, b, &accept);
    int32_t nx = kDead;
    if (st_.heads.size() == begin && !accept) {
        st_.truncate_frames(frames_mark);
    } else {
        nx = intern(begin, frames_mark);
        if (nx == kOverflow) return kOverflow;
    }
    next_[static_cast<size_t>(s) * 256 + b] = static_cast<int16_t>(nx);
    return nx;
}

// Interns heads[begin, end) as a state (kOverflow when full, the heads and frames then dropped).
int32_t MemoDfa::intern(size_t begin, size_t frames_mark) {
    auto head_less = [](Head x, Head y) { return x.pos != y.pos ? x.pos < y.pos : x.parent < y.parent; };
    auto head_eq = [](Head x, Head y) { return x.pos == y.pos && x.parent == y.parent; };
    auto& heads = st_.heads;
    auto first_it = heads.begin() + static_cast<std::ptrdiff_t>(begin);
    std::sort(first_it, heads.end(), head_less);
    heads.erase(std::unique(first_it, heads.end(), head_eq), heads.end());
    const size_t n = heads.size() - begin;
    const uint64_t hash = hash_heads(heads.data() + begin, n);
    const size_t mask = slots_.size() - 1;
    size_t slot = hash & mask;
    for (; slots_[slot] >= 0; slot = (slot + 1) & mask) {
        const State& other = states_[static_cast<size_t>(slots_[slot])];
        if (other.hash == hash && other.end - other.begin == n &&
            std::equal(first_it, heads.end(), heads.begin() + other.begin, head_eq)) {
            // Equal heads refer only to frames older than this step: drop what the step made.
            heads.resize(begin);
            st_.truncate_frames(frames_mark);
            return slots_[slot];
        }
    }
    if (states_.size() >= kMaxStates) {
        heads.resize(begin);
        st_.truncate_frames(frames_mark);
        return kOverflow;
    }
    State s{static_cast<uint32_t>(begin), static_cast<uint32_t>(heads.size()), {}, hash};
    for (size_t i = begin; i < heads.size(); ++i) {
        const auto& set = g_.byte_sets[g_.elems[heads[i].pos].arg];
        for (int w = 0; w < 4; ++w) s.first[w] |= set[w];
    }
    const auto id = static_cast<int32_t>(states_.size());
    states_.push_back(s);
    info_.emplace_back();
    next_.resize(states_.size() * 256, static_cast<int16_t>(kUnknown));
    slots_[slot] = id;
    return id;
}

size_t MemoDfa::partition(uint32_t begin, uint32_t end, const Bytes& within) {
    // Refined once per distinct byte set of the heads: a step depends only on which heads match a
    // byte, so the bytes of one class step alike.
    sets_.clear();
    for (uint32_t i = begin; i < end; ++i) sets_.push_back(g_.elems[st_.heads[i].pos].arg);
    std::sort(sets_.begin(), sets_.end());
    sets_.erase(std::unique(sets_.begin(), sets_.end()), sets_.end());
    classes_[0] = within;
    size_t n = 1;
    for (uint32_t set_index : sets_) {
        const Bytes& set = g_.byte_sets[set_index];
        for (size_t c = 0, count = n; c < count; ++c) {
            Bytes in, out;
            uint64_t any_in = 0, any_out = 0;
            for (int w = 0; w < 4; ++w) {
                in[w] = classes_[c][w] & set[w];
                out[w] = classes_[c][w] & ~set[w];
                any_in |= in[w];
                any_out |= out[w];
            }
            if (any_in && any_out) {
                classes_[c] = in;
                classes_[n++] = out;
            }
        }
    }
    return n;
}

namespace {
int lowest(const MemoDfa::Bytes& bytes) {
    for (int w = 0; w < 4; ++w)
        if (bytes[static_cast<size_t>(w)]) return w * 64 + std::countr_zero(bytes[static_cast<size_t>(w)]);
    return -1;
}
MemoDfa::Bytes byte_range(int lo, int hi) {
    MemoDfa::Bytes r{};
    for (int b = lo; b <= hi; ++b) r[static_cast<size_t>(b >> 6)] |= uint64_t{1} << (b & 63);
    return r;
}
}  // namespace

bool MemoDfa::fill(int32_t s, const Bytes& bytes) {
    const State from = states_[static_cast<size_t>(s)];
    const size_t n = partition(from.begin, from.end, bytes);
    for (size_t i = 0; i < n; ++i) {
        const Bytes& c = classes_[i];  // (next() does not partition)
        const int rep = lowest(c);
        if (rep < 0) continue;
        const int32_t r = next(s, static_cast<uint8_t>(rep));
        if (r == kOverflow) return false;
        for (int w = 0; w < 4; ++w)
            for (uint64_t bits = c[static_cast<size_t>(w)]; bits; bits &= bits - 1)
                next_[static_cast<size_t>(s) * 256 + static_cast<size_t>(w * 64 + std::countr_zero(bits))] =
                    static_cast<int16_t>(r);
    }
    return true;
}

// Heads [begin, end) are the stepper's last ones (a transient state). Whether every way of reading
// `follow` more bytes — the first in [lo, hi], the rest 0x80-0xBF — ends with exactly the heads of
// `expected`; a way that dies sets *any_dead and does not count against it.
bool MemoDfa::continues_to(uint32_t begin, uint32_t end, int follow, int lo, int hi, int32_t expected,
                           bool* any_dead) {
    auto& heads = st_.heads;
    if (follow == 0) {
        auto head_less = [](Head x, Head y) { return x.pos != y.pos ? x.pos < y.pos : x.parent < y.parent; };
        auto head_eq = [](Head x, Head y) { return x.pos == y.pos && x.parent == y.parent; };
        const auto first = heads.begin() + begin;
        std::sort(first, heads.begin() + end, head_less);
        const auto last = std::unique(first, heads.begin() + end, head_eq);
        const State& e = states_[static_cast<size_t>(expected)];
        return last - first == static_cast<std::ptrdiff_t>(e.end - e.begin) &&
               std::equal(first, last, heads.begin() + e.begin, head_eq);
    }
    // At most 64 classes (of at most 64 bytes), copied: the recursion partitions again.
    const size_t n = partition(begin, end, byte_range(lo, hi));
    std::array<Bytes, 64> classes;
    std::copy(classes_.begin(), classes_.begin() + static_cast<std::ptrdiff_t>(n), classes.begin());
    for (size_t i = 0; i < n; ++i) {
        const Bytes& c = classes[i];
        const int rep = lowest(c);
        if (rep < 0) continue;
        const auto heads_mark = static_cast<uint32_t>(heads.size());
        const size_t frames_mark = st_.frames.size();
        bool accept = false;
        st_.step(begin, end, static_cast<uint8_t>(rep), &accept);
        const auto reached = static_cast<uint32_t>(heads.size());
        bool same = true;
        if (reached == heads_mark && !(accept && follow == 1))
            *any_dead = true;  // nothing left, or an end of the text inside a character
        else
            same = continues_to(heads_mark, reached, follow - 1, 0x80, 0xBF, expected, any_dead);
        heads.resize(heads_mark);
        st_.truncate_frames(frames_mark);
        if (!same) return false;
    }
    return true;
}

int32_t MemoDfa::multibyte_target(int32_t s, int32_t expected) {
    ClassInfo& known = info_[static_cast<size_t>(s)];
    if (known.multibyte != kUnknown && known.multibyte_expected == expected) return known.multibyte;
    bool any_live = false, any_dead = false, same = true;
    for (const Utf8Shape& shape : kUtf8Shapes) {
        const State from = states_[static_cast<size_t>(s)];
        const size_t n = partition(from.begin, from.end, byte_range(shape.lead_lo, shape.lead_hi));
        std::array<Bytes, 64> classes;
        std::copy(classes_.begin(), classes_.begin() + static_cast<std::ptrdiff_t>(n), classes.begin());
        for (size_t i = 0; i < n; ++i) {
            const Bytes& c = classes[i];
            const int rep = lowest(c);
            if (rep < 0) continue;
            const auto heads_mark = static_cast<uint32_t>(st_.heads.size());
            const size_t frames_mark = st_.frames.size();
            bool accept = false;
            st_.step(from.begin, from.end, static_cast<uint8_t>(rep), &accept);
            const auto reached = static_cast<uint32_t>(st_.heads.size());
            if (reached == heads_mark) {
                any_dead = true;
            } else {
                any_live = true;
                same = same && expected >= 0 &&
                       continues_to(heads_mark, reached, shape.follow, shape.second_lo, shape.second_hi,
                                    expected, &any_dead);
            }
            st_.heads.resize(heads_mark);
            st_.truncate_frames(frames_mark);
        }
    }
    const int32_t result = !any_live ? kDead : any_dead || !same ? kMixed : expected;
    ClassInfo& info = info_[static_cast<size_t>(s)];
    info.multibyte = result;
    info.multibyte_expected = expected;
    return result;
}

// ---- plan_token_class ----

namespace {

// Where every character of the class `allowed` leads from state s: one state (its id), all dead
// (kDead), or different states (kMixed). Kept in the state's ClassInfo.
int32_t class_target(MemoDfa& dfa, int32_t s, const Summary& allowed, bool* ok) {
    MemoDfa::ClassInfo& known = dfa.info(s);
    if (known.target != MemoDfa::kUnknown && known.target_of == allowed) return known.target;
    MemoDfa::Bytes ascii{};
    for (int b = 0; b < 0x80; ++b)
        if (b < 0x20 ? (allowed[1] & TokenClasses::kControl) != 0
                     : ((b - 0x20 < 64 ? allowed[0] >> (b - 0x20) : allowed[1] >> (b - 0x20 - 64)) & 1) != 0)
            ascii[static_cast<size_t>(b >> 6)] |= uint64_t{1} << (b & 63);
    if (!dfa.fill(s, ascii)) {
        *ok = false;
        return kMixed;
    }
    int32_t target = MemoDfa::kUnknown;
    bool mixed = false;
    for (int b = 0; b < 0x80; ++b) {
        if (!((ascii[static_cast<size_t>(b >> 6)] >> (b & 63)) & 1)) continue;
        const int32_t t = dfa.next(s, static_cast<uint8_t>(b));
        if (target == MemoDfa::kUnknown) target = t;
        mixed |= t != target;
    }
    if (!mixed && (allowed[1] & TokenClasses::kMultibyte)) mixed = dfa.multibyte_target(s, target) != target;
    const int32_t result = mixed ? kMixed : target;
    MemoDfa::ClassInfo& info = dfa.info(s);  // (the vector may have grown)
    info.target_of = allowed;
    info.target = result;
    return result;
}

// The class of state s: the ASCII bytes that lead to the most common target, with the multi-byte
// characters when they all lead there too. Kept in the state's ClassInfo (next kDead: none).
const MemoDfa::ClassInfo& class_of(MemoDfa& dfa, int32_t s, bool* ok) {
    if (dfa.info(s).next != MemoDfa::kUnknown) return dfa.info(s);
    const auto& first = dfa.state(s).first;
    int32_t x1 = MemoDfa::kDead;
    Summary a{};
    if (std::popcount(first[0]) + std::popcount(first[1]) >= kMinClassBytes) {
        if (!dfa.fill(s, {~uint64_t{0}, ~uint64_t{0}, 0, 0})) {
            *ok = false;
            return dfa.info(s);
        }
        std::array<int32_t, 128> to;
        for (int b = 0; b < 128; ++b) to[static_cast<size_t>(b)] = dfa.next(s, static_cast<uint8_t>(b));
        std::array<int32_t, 128> sorted = to;
        std::sort(sorted.begin(), sorted.end());
        int best = 0;
        for (size_t i = 0, j = 0; i < sorted.size(); i = j) {
            while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
            if (sorted[i] >= 0 && static_cast<int>(j - i) > best) {
                best = static_cast<int>(j - i);
                x1 = sorted[i];
            }
        }
        if (best < kMinClassBytes) {
            x1 = MemoDfa::kDead;
        } else {
            bool all_controls = true;
            for (int b = 0; b < 128; ++b) {
                if (to[static_cast<size_t>(b)] != x1) {
                    all_controls &= b >= 0x20;
                    continue;
                }
                const int i = b - 0x20;
                if (i >= 0) (i < 64 ? a[0] : a[1]) |= uint64_t{1} << (i & 63);
            }
            if (all_controls) a[1] |= TokenClasses::kControl;  // else tokens with one are walked
            if (dfa.multibyte_target(s, x1) == x1) a[1] |= TokenClasses::kMultibyte;
        }
    }
    MemoDfa::ClassInfo& info = dfa.info(s);
    info.next = x1;
    info.allowed = a;
    return info;
}

}  // namespace

ClassPlan plan_token_class(MemoDfa& dfa, int32_t x0, int max_chars, int chain_cap, bool* ok) {
    SLUICE_ASSERT(chain_cap >= 1 && chain_cap < 255);
    *ok = true;
    ClassPlan plan;
    const MemoDfa::ClassInfo c0 = class_of(dfa, x0, ok);
    if (!*ok || c0.next < 0) return plan;
    // The first character: X0's class. The others: X1's own class where it has one (after "</" in
    // XML text, 'p' may continue "</parameter>", but after one more character every letter is text
    // again), else the first one's.
    const MemoDfa::ClassInfo c1 = class_of(dfa, c0.next, ok);
    if (!*ok) return plan;
    plan.usable = true;
    plan.first = c0.allowed;
    plan.allowed = c1.next >= 0 ? c1.allowed : c0.allowed;
    // The chain X1, X2, ...: where the class's characters all lead one step further.
    std::array<int32_t, 256> chain;
    chain[0] = x0;
    chain[1] = c0.next;
    int j = 1;
    for (;; ++j) {
        const int32_t last = chain[static_cast<size_t>(j)];
        if (std::find(chain.begin() + 1, chain.begin() + j, last) != chain.begin() + j || j >= max_chars) {
            // A cycle (alive forever) or no token is longer.
            plan.accept_chars = std::numeric_limits<int>::max();
            plan.decided_beyond = true;
            break;
        }
        if (j >= chain_cap) {
            plan.accept_chars = j;
            break;
        }
        const int32_t t = class_target(dfa, last, plan.allowed, ok);
        if (!*ok) return plan;
        if (t == MemoDfa::kDead || t == kMixed) {
            plan.accept_chars = j;
            plan.decided_beyond = t == MemoDfa::kDead;
            break;
        }
        chain[static_cast<size_t>(j + 1)] = t;
    }
    // Bytes that no state of the chain accepts (no head's byte set holds them). A token whose
    // characters are the class's up to one of these is refused at it, wherever it comes.
    MemoDfa::Bytes dead = {~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}};
    for (int k = 0; k <= j; ++k)
        for (int w = 0; w < 4; ++w)
            dead[static_cast<size_t>(w)] &=
                ~dfa.state(chain[static_cast<size_t>(k)]).first[static_cast<size_t>(w)];
    auto all_dead = [&](int lo, int hi) {
        for (int b = lo; b <= hi; ++b)
            if (!((dead[static_cast<size_t>(b >> 6)] >> (b & 63)) & 1)) return false;
        return true;
    };
    for (int b = 0x20; b < 0x80; ++b)
        if ((dead[static_cast<size_t>(b >> 6)] >> (b & 63)) & 1) {
            const int i = b - 0x20;
            (i < 64 ? plan.dead[0] : plan.dead[1]) |= uint64_t{1} << (i & 63);
        }
    if (all_dead(0x00, 0x1F)) plan.dead[1] |= TokenClasses::kControl;
    if (all_dead(0xC2, 0xF4)) plan.dead[1] |= TokenClasses::kMultibyte;
    // A token that is not whole UTF-8 holds a byte from 0x80 (the first such is where it goes wrong
    // or where its multi-byte part starts).
    if (all_dead(0x80, 0xFF)) plan.dead[1] |= TokenClasses::kIncomplete;
    return plan;
}

}  // namespace constrain
}  // namespace sluice
