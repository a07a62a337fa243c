// TokenTrie and TokenConstraint (see sluice/constrain.h).
//
// The mask walk: a depth-first walk of the vocabulary trie carrying the grammar's set of parse
// stacks; an edge is followed only if some head accepts its byte, so a subtree whose first bytes
// the grammar refuses costs one byte test. Tokens ending at a reached node are allowed. Each walk
// level's heads are a range of the stepper's head vector and its frames an arena suffix, both
// truncated on backtrack, so a walk allocates nothing once the vectors have grown.
//
// compute_mask_memo() is the fast twin of that walk (memoized transitions, described there);
// compute_mask_reference() is the plain walk, its oracle in the tests and its fallback.
//
// Masks are cached by matcher state: inside a free string or between array items the state
// repeats, and the walk (which visits most of the trie in a string, where almost every token is
// allowed) is then skipped. The cache is per constraint (one generation), bounded by clearing.
//
// Threading: TokenTrie is immutable; TokenConstraint is used by the generating thread only.
// Rejected alternative: XGrammar-style precomputation, per grammar position, of the tokens whose
// acceptance does not depend on the stack below — faster still inside strings, but a compile-time
// pass over the vocabulary for every position of every request's grammar.
#include <algorithm>
#include <chrono>
#include <limits>

#include "constrain/grammar_impl.h"
#include "sluice/tokenizer.h"

namespace sluice {
namespace {

constexpr size_t kMaxCachedMasks = 256;

struct TrieBuilder {
    const std::vector<std::string_view>& bytes;  // sorted with ids
    const std::vector<int32_t>& ids;
    TokenTrie& trie;

    uint32_t build(size_t lo, size_t hi, size_t depth) {
        const auto index = static_cast<uint32_t>(trie.nodes_.size());
        trie.nodes_.push_back({});
        const auto token_begin = static_cast<uint32_t>(trie.token_ids_.size());
        while (lo < hi && bytes[lo].size() == depth) trie.token_ids_.push_back(ids[lo++]);
        const auto token_end = static_cast<uint32_t>(trie.token_ids_.size());
        std::vector<TokenTrie::Edge> kids;
        while (lo < hi) {
            const auto b = static_cast<uint8_t>(bytes[lo][depth]);
            size_t j = lo;
            while (j < hi && static_cast<uint8_t>(bytes[j][depth]) == b) ++j;
            kids.push_back({b, build(lo, j, depth + 1)});
            lo = j;
        }
        auto& node = trie.nodes_[index];
        node.token_begin = token_begin;
        node.token_end = token_end;
        node.edge_begin = static_cast<uint32_t>(trie.edges_.size());
        trie.edges_.insert(trie.edges_.end(), kids.begin(), kids.end());
        trie.nodes_[index].edge_end = static_cast<uint32_t>(trie.edges_.size());
        return index;
    }
};

}  // namespace

std::shared_ptr<const TokenTrie> TokenTrie::build(std::span<const std::string> bytes_by_id) {
    auto trie = std::make_shared<TokenTrie>();
    trie->vocab_size_ = static_cast<int32_t>(bytes_by_id.size());
    std::vector<int32_t> order;
    for (size_t id = 0; id < bytes_by_id.size(); ++id)
        if (!bytes_by_id[id].empty()) order.push_back(static_cast<int32_t>(id));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        return bytes_by_id[static_cast<size_t>(a)] < bytes_by_id[static_cast<size_t>(b)];
    });
    std::vector<std::string_view> bytes;
    for (int32_t id : order) bytes.push_back(bytes_by_id[static_cast<size_t>(id)]);
    trie->offsets_.push_back(0);
    for (const std::string& b : bytes_by_id) {
        trie->blob_ += b;
        trie->offsets_.push_back(static_cast<uint32_t>(trie->blob_.size()));
    }
    TrieBuilder{bytes, order, *trie}.build(0, bytes.size(), 0);
    return trie;
}

std::shared_ptr<const TokenTrie> TokenTrie::from_tokenizer(const Tokenizer& tokenizer) {
    std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
    for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
        if (!tokenizer.is_special(id))
            bytes[static_cast<size_t>(id)] = std::string(tokenizer.token_bytes(id));
    return build(bytes);
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> eos_ids)
    : trie_(std::move(trie)), eos_ids_(std::move(eos_ids)), matcher_(std::move(grammar)) {}

void TokenConstraint::compute_mask_reference(std::vector<uint64_t>* bits) {
    const TokenTrie& t = *trie_;
    bits->assign((static_cast<size_t>(t.vocab_size()) + 63) / 64, 0);
    auto allow = [&](int32_t id) { (*bits)[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); };
    if (matcher_.complete())
        for (int32_t id : eos_ids_)
            if (id >= 0 && id < t.vocab_size()) allow(id);
    if (!matcher_.can_continue()) return;

    const Grammar& g = *matcher_.grammar_;
    constrain::Stepper st(g);
    for (const auto& s : matcher_.stacks_) st.push_stack(s);
    int64_t visited = 0;
    // Explicit-stack DFS: (node, head range, next edge, frames size to restore).
    struct Level {
        uint32_t node;
        size_t head_begin, head_end;
        uint32_t edge;
        std::array<uint64_t, 4> first;  // union of the heads' byte sets
    };
    auto union_of = [&](size_t begin, size_t end) {
        std::array<uint64_t, 4> u{};
        for (size_t i = begin; i < end; ++i) {
            const auto& set = g.byte_sets[g.elems[st.heads[i].pos].arg];
            for (int w = 0; w < 4; ++w) u[w] |= set[w];
        }
        return u;
    };
    std::vector<Level> stack;
    std::vector<size_t> frame_marks;
    stack.push_back({0, 0, st.heads.size(), t.nodes_[0].edge_begin, union_of(0, st.heads.size())});
    while (!stack.empty()) {
        Level& lv = stack.back();
        const TokenTrie::Node& node = t.nodes_[lv.node];
        if (lv.edge == node.edge_end) {
            // Done with this node: drop its heads and frames.
            st.heads.resize(lv.head_begin);
            stack.pop_back();
            if (!frame_marks.empty()) {
                st.frames.resize(frame_marks.back());
                frame_marks.pop_back();
            }
            continue;
        }
        const TokenTrie::Edge e = t.edges_[lv.edge++];
        if (!((lv.first[e.byte >> 6] >> (e.byte & 63)) & 1)) continue;
        ++visited;
        const size_t frames_before = st.frames.size();
        const size_t out_begin = st.heads.size();
        bool accept = false;
        st.step(lv.head_begin, lv.head_end, e.byte, &accept);
        const size_t out_end = st.heads.size();
        if (out_end == out_begin && !accept) {
            st.frames.resize(frames_before);
            continue;
        }
        const TokenTrie::Node& child = t.nodes_[e.child];
        for (uint32_t k = child.token_begin; k < child.token_end; ++k) allow(t.token_ids_[k]);
        if (out_end == out_begin || child.edge_begin == child.edge_end) {
            st.heads.resize(out_begin);
            st.frames.resize(frames_before);
            continue;
        }
        frame_marks.push_back(frames_before);
        const auto first = union_of(out_begin, out_end);
        stack.push_back({e.child, out_begin, out_end, child.edge_begin, first});
    }
    stats_.trie_nodes_visited += visited;
}

// The same walk with the grammar's transitions memoized: the walk's states (sets of heads) are
// interned, and each (state, byte) step is computed once and kept in a 256-entry row. In a string
// body the state after most bytes is a state seen before (the same one at the same trie depth in
// a bounded string, the very same one in a free string), so most trie edges cost one table read.
// Frames and heads are kept for the whole walk (states refer to them); past kMaxMemoStates the
// walk gives up and the reference walk runs instead.
bool TokenConstraint::compute_mask_memo(std::vector<uint64_t>* bits) {
    constexpr int32_t kUnknown = -1, kDead = -2;
    constexpr size_t kMaxMemoStates = 4096;
    const TokenTrie& t = *trie_;
    const Grammar& g = *matcher_.grammar_;
    constrain::Stepper st(g);
    for (const auto& s : matcher_.stacks_) st.push_stack(s);
    struct State {
        uint32_t begin, end;  // heads
        std::array<uint64_t, 4> first;
    };
    std::vector<State> states;
    std::vector<int32_t> next;  // [states, 256]
    std::unordered_map<std::string, int32_t> index;
    auto head_less = [](constrain::Head x, constrain::Head y) {
        return x.pos != y.pos ? x.pos < y.pos : x.parent < y.parent;
    };
    auto head_eq = [](constrain::Head x, constrain::Head y) {
        return x.pos == y.pos && x.parent == y.parent;
    };
    // Interns heads[begin, end) as a state; -1 when the cap is reached.
    auto intern = [&](size_t begin, size_t frames_mark) -> int32_t {
        auto first_it = st.heads.begin() + static_cast<std::ptrdiff_t>(begin);
        std::sort(first_it, st.heads.end(), head_less);
        st.heads.erase(std::unique(first_it, st.heads.end(), head_eq), st.heads.end());
        std::string key(reinterpret_cast<const char*>(st.heads.data() + begin),
                        (st.heads.size() - begin) * sizeof(constrain::Head));
        if (auto it = index.find(key); it != index.end()) {
            // Equal heads refer only to frames older than this step: drop what the step made.
            st.heads.resize(begin);
            st.frames.resize(frames_mark);
            return it->second;
        }
        if (states.size() >= kMaxMemoStates) return -1;
        State s{static_cast<uint32_t>(begin), static_cast<uint32_t>(st.heads.size()), {}};
        for (size_t i = begin; i < st.heads.size(); ++i) {
            const auto& set = g.byte_sets[g.elems[st.heads[i].pos].arg];
            for (int w = 0; w < 4; ++w) s.first[w] |= set[w];
        }
        states.push_back(s);
        next.resize(states.size() * 256, kUnknown);
        const auto id = static_cast<int32_t>(states.size() - 1);
        index.emplace(std::move(key), id);
        return id;
    };
    if (intern(0, 0) < 0) return false;

    bits->assign((static_cast<size_t>(t.vocab_size()) + 63) / 64, 0);
    auto allow = [&](int32_t id) { (*bits)[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); };
    if (matcher_.complete())
        for (int32_t id : eos_ids_)
            if (id >= 0 && id < t.vocab_size()) allow(id);
    struct Level {
        uint32_t node;
        int32_t state;
        uint32_t edge;
    };
    std::vector<Level> stack = {{0, 0, t.nodes_[0].edge_begin}};
    int64_t visited = 0;
    while (!stack.empty()) {
        Level& lv = stack.back();
        if (lv.edge == t.nodes_[lv.node].edge_end) {
            stack.pop_back();
            continue;
        }
        const TokenTrie::Edge e = t.edges_[lv.edge++];
        const auto sid = static_cast<size_t>(lv.state);
        if (!((states[sid].first[e.byte >> 6] >> (e.byte & 63)) & 1)) continue;
        ++visited;
        int32_t nx = next[sid * 256 + e.byte];
        if (nx == kUnknown) {
            const size_t frames_mark = st.frames.size(), begin = st.heads.size();
            bool accept = false;
            st.step(states[sid].begin, states[sid].end, e.byte, &accept);
            if (st.heads.size() == begin && !accept) {
                st.frames.resize(frames_mark);
                nx = kDead;
            } else {
                nx = intern(begin, frames_mark);
                if (nx < 0) return false;
            }
            next[sid * 256 + e.byte] = nx;
        }
        if (nx == kDead) continue;
        const TokenTrie::Node& child = t.nodes_[e.child];
        for (uint32_t k = child.token_begin; k < child.token_end; ++k) allow(t.token_ids_[k]);
        const State& ns = states[static_cast<size_t>(nx)];
        if (ns.begin != ns.end && child.edge_begin != child.edge_end)
            stack.push_back({e.child, nx, child.edge_begin});
    }
    stats_.trie_nodes_visited += visited;
    return true;
}

void TokenConstraint::compute_mask(std::vector<uint64_t>* bits) {
    if (!matcher_.can_continue() || !compute_mask_memo(bits)) compute_mask_reference(bits);
}

const std::vector<uint64_t>& TokenConstraint::allowed() {
    ++stats_.masks;
    if (current_) {
        ++stats_.mask_cache_hits;
        return *current_;
    }
    std::string key = matcher_.state_key();
    if (auto it = cache_.find(key); it != cache_.end()) {
        ++stats_.mask_cache_hits;
        current_ = &it->second;
        return *current_;
    }
    if (cache_.size() >= kMaxCachedMasks) cache_.clear();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<uint64_t> bits;
    compute_mask(&bits);
    stats_.mask_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    current_ = &cache_.emplace(std::move(key), std::move(bits)).first->second;
    return *current_;
}

void TokenConstraint::filter(std::span<float> logits) {
    const std::vector<uint64_t>& bits = allowed();
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    const size_t n = std::min(logits.size(), static_cast<size_t>(trie_->vocab_size()));
    for (size_t id = 0; id < n; ++id)
        if (!((bits[id >> 6] >> (id & 63)) & 1)) logits[id] = kNegInf;
    for (size_t id = n; id < logits.size(); ++id) logits[id] = kNegInf;
}

bool TokenConstraint::accept(int32_t token) {
    if (std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end()) return matcher_.complete();
    if (token < 0 || token >= trie_->vocab_size()) return false;
    const std::string_view bytes = trie_->bytes(token);
    if (bytes.empty() || !matcher_.feed(bytes)) return false;
    current_ = nullptr;
    ++accepted_;
    return true;
}

void TokenConstraint::filter(std::span<float> logits, std::span<const int32_t> generated) {
    if (generated.size() <= accepted_) {
        filter(logits);
        return;
    }
    const GrammarMatcher committed = matcher_;
    bool ok = true;
    for (int32_t token : generated.subspan(accepted_)) {
        const std::string_view bytes = token >= 0 && token < trie_->vocab_size() ? trie_->bytes(token) : "";
        if (bytes.empty() || !matcher_.feed(bytes)) {
            ok = false;
            break;
        }
    }
    current_ = nullptr;
    if (ok) {
        filter(logits);
    } else {  // a prefix the grammar refuses (never proposed under this same filter): nothing may follow
        std::fill(logits.begin(), logits.end(), -std::numeric_limits<float>::infinity());
    }
    matcher_ = committed;
    current_ = nullptr;  // the mask cache may have been cleared meanwhile
}

}  // namespace sluice
