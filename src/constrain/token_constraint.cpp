// TokenTrie and TokenConstraint (see sluice/constrain.h).
//
// The mask walk: a depth-first walk of the vocabulary trie carrying the grammar's set of parse
// stacks; an edge is followed only if some head accepts its byte, so a subtree whose first bytes
// the grammar refuses costs one byte test. Tokens ending at a reached node are allowed. Each walk
// level's heads are a range of the stepper's head vector and its frames an arena suffix, both
// truncated on backtrack, so a walk allocates nothing once the vectors have grown.
//
// compute_mask_memo() is the fast twin of that walk (memoized transitions and the token-class
// shortcut of token_classes.h, described there); compute_mask_reference() is the plain walk, its
// oracle in the tests and its fallback.
//
// Masks are cached by matcher state: inside a free string or between array items the state
// repeats, and the walk (which visits most of the trie in a string, where almost every token is
// allowed) is then skipped. The cache is per constraint (one generation), bounded by clearing.
//
// Threading: TokenTrie is immutable; TokenConstraint is used by the generating thread only.
// Rejected alternative: XGrammar-style precomputation, per grammar position, of the tokens whose
// acceptance does not depend on the stack below — a compile-time pass over the vocabulary for every
// position of every request's grammar. The token classes get most of its gain from per-vocabulary
// data alone (token_classes.h).
#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>

#include "constrain/grammar_impl.h"
#include "constrain/token_classes.h"
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
    trie->classes_ = TokenClasses::build(*trie);
    return trie;
}

std::shared_ptr<const TokenTrie> TokenTrie::from_tokenizer(const Tokenizer& tokenizer,
                                                           std::span<const int32_t> keep_special) {
    std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
    for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
        if (!tokenizer.is_special(id) ||
            std::find(keep_special.begin(), keep_special.end(), id) != keep_special.end())
            bytes[static_cast<size_t>(id)] = std::string(tokenizer.token_bytes(id));
    return build(bytes);
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> grammar,
                                 std::shared_ptr<const TokenTrie> trie, std::vector<int32_t> eos_ids)
    : trie_(std::move(trie)), eos_ids_(std::move(eos_ids)), matcher_(std::move(grammar)) {}
TokenConstraint::~TokenConstraint() = default;
TokenConstraint::TokenConstraint(TokenConstraint&&) noexcept = default;
TokenConstraint& TokenConstraint::operator=(TokenConstraint&&) noexcept = default;

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

namespace {

// A token class in force in part of the walk (token_classes.h), found at the state of an anchor
// node: below it, along a path of the class's characters (the first one of `first`), a subtree
// whose tokens hold from there on only `skip`'s bytes and flags (the class's and the dead ones)
// and have at most `skip_chars` characters is decided without being walked. The root's class
// (`by_range` false) has put its allowed tokens in the mask from bitsets; a class found deeper
// allows the tokens of each subtree it skips from the subtree's range of token ids: those of
// `class_tokens` with at most `accept_chars` characters in all.
struct ActiveClass {
    TokenClasses::Summary first{};
    TokenClasses::Summary allowed{};  // the class's bytes and flags
    TokenClasses::Summary members{};  // those and the path's: the class tokens' whole contents
    TokenClasses::Summary skip{};     // those and the dead ones; empty: nothing is skipped
    uint64_t skip_chars = 0;
    int64_t accept_chars = 0;
    bool by_range = false;
    std::shared_ptr<const std::vector<uint64_t>> class_tokens;  // by_range: TokenClasses::class_bits(members)
};

// Whether a token's byte b may be one of the class `a`'s characters (a lead or continuation byte:
// when it holds multi-byte characters).
bool class_has_byte(const TokenClasses::Summary& a, uint8_t b) {
    if (b < 0x20) return (a[1] & TokenClasses::kControl) != 0;
    if (b >= 0x80) return (a[1] & TokenClasses::kMultibyte) != 0;
    const int i = b - 0x20;
    return ((i < 64 ? a[0] >> i : a[1] >> (i - 64)) & 1) != 0;
}

// Whether a character starting with byte b may be one of `a`'s.
bool class_has_first(const TokenClasses::Summary& a, uint8_t b) {
    return b < 0x80 ? class_has_byte(a, b) : b >= 0xC2 && b <= 0xF4 && (a[1] & TokenClasses::kMultibyte);
}

// The class `plan` found at a node reached along a path of `path_chars` characters holding `path`'s
// bytes. Edge summaries hold the bytes from the edge on, so the path's own bytes do not count
// against a subtree; but the class's token bitset reads whole tokens, so it is taken for the
// class's bytes and the path's, and a dead byte that is also a path byte may not be skipped (it
// would stand for a byte past the path the bitset cannot tell from one in it). Below the root
// (`in_force`: the class it would replace, or none), only a class holding more is worth its ranges.
std::optional<ActiveClass> active_class(const constrain::ClassPlan& plan, int64_t path_chars,
                                        const TokenClasses::Summary& path,
                                        const TokenClasses::Summary* in_force) {
    if (!plan.usable) return std::nullopt;
    if (in_force && !((plan.allowed[0] & ~(*in_force)[0]) | (plan.allowed[1] & ~(*in_force)[1])))
        return std::nullopt;
    ActiveClass c;
    c.first = plan.first;
    c.allowed = plan.allowed;
    c.members = {plan.allowed[0] | path[0], plan.allowed[1] | path[1]};
    c.skip = {plan.allowed[0] | (plan.dead[0] & ~path[0]),
              plan.allowed[1] | (plan.dead[1] & ~path[1]) | TokenClasses::kCharsMask};
    const int64_t limit = path_chars + plan.accept_chars;
    c.skip_chars = plan.decided_beyond ? 255 : static_cast<uint64_t>(std::min<int64_t>(limit, 255));
    c.accept_chars = limit;
    c.by_range = path_chars > 0;
    return c;
}

// A trie path read as UTF-8, byte by byte: its characters (a partial one counted), the bytes it
// holds (as a Summary: kMultibyte for a byte from 0x80), and the continuation bytes its last
// character still needs (kBroken: not UTF-8).
struct PathText {
    static constexpr uint8_t kBroken = 0xFF;
    uint16_t chars = 0;
    uint8_t pending = 0;
    TokenClasses::Summary bytes{};

    PathText then(uint8_t b) const {
        PathText p = *this;
        const bool continuation = b >= 0x80 && b < 0xC0;
        p.chars = static_cast<uint16_t>(chars + (continuation ? 0 : 1));
        if (pending == 0 && b < 0x80)
            p.pending = 0;
        else if (pending == 0 && b >= 0xC2 && b <= 0xF4)
            p.pending = b < 0xE0 ? 1 : b < 0xF0 ? 2 : 3;
        else if (continuation && pending != kBroken && pending > 0)
            p.pending = static_cast<uint8_t>(pending - 1);
        else
            p.pending = kBroken;
        if (b < 0x20)
            p.bytes[1] |= TokenClasses::kControl;
        else if (b >= 0x80)
            p.bytes[1] |= TokenClasses::kMultibyte;
        else
            (b - 0x20 < 64 ? p.bytes[0] : p.bytes[1]) |= uint64_t{1} << ((b - 0x20) & 63);
        return p;
    }
};

}  // namespace

// The same walk with the grammar's transitions memoized (constrain::MemoDfa): the walk's states
// (sets of heads) are interned, and each (state, byte) step is computed once, and kept for the
// generation's later masks. In a string body the state after most bytes is a state seen before (the
// same one at the same trie depth in a bounded string, the very same one in a free string), so most
// trie edges cost one table read. When the automaton fills up during a walk, the walk runs once
// more on an empty one, and past that the reference walk runs instead.
//
// With the token-class shortcut (token_classes.h): when the start state has a class — ASCII bytes
// and maybe multi-byte characters that all lead to one state, and on along a chain — the class's
// tokens are decided from bitsets, and the walk skips every subtree whose tokens are all in the
// class (and, where the chain was not followed to its end, short enough): it enters only the
// subtrees holding a token with another byte, a partial character, or too many characters.
// Where the walk enters a large subtree that the class in force does not cover (or with none), at
// a character boundary, the state reached there may have a class of its own, which then decides
// that subtree's tokens the same way (after a backslash in a JSON string, the subtree of 'n').
bool TokenConstraint::compute_mask_memo(std::vector<uint64_t>* bits) {
    using constrain::MemoDfa;
    constexpr int kMaxChainSteps = 32;           // tokens of more characters are walked (0.3% of Qwen3's)
    constexpr uint32_t kNestedMinTokens = 2048;  // smaller subtrees are walked without looking for a class
    constexpr size_t kMaxClasses = 16;           // classes in force in one walk
    const TokenTrie& t = *trie_;
    const TokenClasses* tc = t.classes_.get();
    auto walk = [&](MemoDfa& dfa) {
        const int32_t x0 = dfa.add_start(matcher_.stacks_);
        if (x0 < 0) return false;
        bits->assign((static_cast<size_t>(t.vocab_size()) + 63) / 64, 0);
        auto allow = [&](int32_t id) { (*bits)[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); };
        // The subtree below edge `edge` of `node` is token_ids_[its child's token_begin, end).
        auto subtree_end = [&](const TokenTrie::Node& node, uint32_t edge, uint32_t node_end) {
            return edge + 1 < node.edge_end ? t.nodes_[t.edges_[edge + 1].child].token_begin : node_end;
        };
        const auto all_tokens = static_cast<uint32_t>(t.token_ids_.size());
        // classes[0]: none. The class of a state reached after `path_chars` characters (0: the root's).
        std::vector<ActiveClass> classes(1);
        classes.reserve(kMaxClasses);
        bool ok = true;
        auto class_at = [&](int32_t state, const PathText& path,
                            const TokenClasses::Summary* in_force) -> uint16_t {
            const constrain::ClassPlan plan =
                constrain::plan_token_class(dfa, state, tc->max_chars, kMaxChainSteps, &ok);
            std::optional<ActiveClass> c = active_class(plan, path.chars, path.bytes, in_force);
            if (!ok || !c) return 0;
            if (c->by_range) c->class_tokens = class_bits(c->members);
            classes.push_back(std::move(*c));
            return static_cast<uint16_t>(classes.size() - 1);
        };
        const uint16_t root_class = tc ? class_at(x0, PathText{}, nullptr) : 0;
        if (!ok) return false;
        if (root_class) {
            // The class's tokens (all characters of `skip`), less those whose first character may
            // not be first (their subtrees below the root are walked).
            const ActiveClass& c = classes[root_class];
            tc->or_at_most(*class_bits(c.allowed),
                           static_cast<int>(std::min<int64_t>(c.accept_chars, INT32_MAX)), bits);
            const TokenTrie::Node& root = t.nodes_[0];
            for (uint32_t edge = root.edge_begin; edge < root.edge_end; ++edge) {
                const uint8_t b = t.edges_[edge].byte;
                if (!class_has_first(c.allowed, b) || class_has_first(c.first, b)) continue;
                for (uint32_t k = t.nodes_[t.edges_[edge].child].token_begin,
                              end = subtree_end(root, edge, all_tokens);
                     k < end; ++k) {
                    const auto id = static_cast<size_t>(t.token_ids_[k]);
                    (*bits)[id >> 6] &= ~(uint64_t{1} << (id & 63));
                }
            }
        }
        if (matcher_.complete())
            for (int32_t id : eos_ids_)
                if (id >= 0 && id < t.vocab_size()) allow(id);
        const TokenClasses::Summary* summary = tc ? tc->edge_summary.data() : nullptr;
        struct Level {
            uint32_t node;
            int32_t state;
            uint32_t edge;
            uint32_t token_end;  // the node's subtree is token_ids_[node.token_begin, token_end)
            uint16_t cls;        // in classes
            bool anchor;         // the class was found at this node: its edges are first characters
            PathText path;       // from the root
        };
        std::vector<Level> stack = {
            {0, x0, t.nodes_[0].edge_begin, all_tokens, root_class, true, PathText{}}};
        int64_t visited = 0;
        while (!stack.empty()) {
            Level& lv = stack.back();
            const TokenTrie::Node& node = t.nodes_[lv.node];
            // The node's edges up to the next one to step: those whose byte no head accepts, and
            // those whose subtree the class in force decides, cost a few bit tests here.
            const MemoDfa::Bytes first = dfa.state(lv.state).first;
            const ActiveClass& c = classes[lv.cls];  // (reserved: class_at does not move it)
            const bool test_first = lv.anchor;
            uint32_t edge = lv.edge;
            for (; edge < node.edge_end; ++edge) {
                const uint8_t b = t.edges_[edge].byte;
                if (!((first[b >> 6] >> (b & 63)) & 1)) continue;
                if (!lv.cls || (test_first && !class_has_first(c.first, b))) break;
                const TokenClasses::Summary& s = summary[edge];
                if (((s[0] & ~c.skip[0]) | (s[1] & ~c.skip[1])) != 0 ||
                    (s[1] >> TokenClasses::kCharsShift) > c.skip_chars)
                    break;
                if (c.by_range) {
                    // The class's tokens (none with a dead byte) of at most accept_chars characters.
                    const std::vector<uint64_t>& in_class = *c.class_tokens;
                    for (uint32_t k = t.nodes_[t.edges_[edge].child].token_begin,
                                  end = subtree_end(node, edge, lv.token_end);
                         k < end; ++k) {
                        const auto id = static_cast<size_t>(t.token_ids_[k]);
                        if (((in_class[id >> 6] >> (id & 63)) & 1) && tc->token_chars[id] <= c.accept_chars)
                            allow(static_cast<int32_t>(id));
                    }
                }
            }
            if (edge == node.edge_end) {
                stack.pop_back();
                continue;
            }
            lv.edge = edge + 1;
            const TokenTrie::Edge e = t.edges_[edge];
            ++visited;
            const int32_t nx = dfa.next(lv.state, e.byte);
            if (nx == MemoDfa::kOverflow) return false;
            if (nx == MemoDfa::kDead) continue;
            const TokenTrie::Node& child = t.nodes_[e.child];
            for (uint32_t k = child.token_begin; k < child.token_end; ++k) allow(t.token_ids_[k]);
            if (!dfa.has_heads(nx) || child.edge_begin == child.edge_end) continue;
            const uint32_t token_end = subtree_end(node, edge, lv.token_end);
            const uint8_t b = e.byte;
            const PathText path = lv.path.then(b);
            // The class in force goes on below the edge while the path past its anchor holds only
            // the class's characters (the first of them one that may be first).
            uint16_t cls = lv.cls;
            if (cls && !(class_has_byte(c.allowed, b) && (!test_first || class_has_first(c.first, b))))
                cls = 0;
            bool anchor = false;
            // A class of its own for a large subtree the class in force does not cover, or where a
            // class found below the root may give way to a broader one.
            if (summary && path.pending == 0 && token_end - child.token_begin >= kNestedMinTokens &&
                classes.size() < kMaxClasses && (cls == 0 || cls != root_class)) {
                const uint16_t here = class_at(nx, path, cls ? &classes[cls].allowed : nullptr);
                if (!ok) return false;
                if (here) {
                    cls = here;
                    anchor = true;
                }
            }
            stack.push_back({e.child, nx, child.edge_begin, token_end, cls, anchor, path});
        }
        stats_.trie_nodes_visited += visited;
        stats_.class_masks += classes.size() > 1;
        stats_.class_subtrees += static_cast<int64_t>(classes.size()) - 1 - (root_class != 0);
        return true;
    };
    const Grammar& g = *matcher_.grammar_;
    // An automaton past half its states is dropped before a walk rather than in the middle of one.
    if (dfa_ && dfa_->state_count() > MemoDfa::kMaxStates / 2) {
        dfa_.reset();
        ++stats_.automaton_resets;
    }
    if (!dfa_) dfa_ = std::make_unique<MemoDfa>(g);
    if (walk(*dfa_)) return true;
    dfa_ = std::make_unique<MemoDfa>(g);
    ++stats_.automaton_resets;
    return walk(*dfa_);
}

std::shared_ptr<const std::vector<uint64_t>> TokenConstraint::class_bits(
    const std::array<uint64_t, 2>& allowed) {
    constexpr size_t kMaxClassBitsets = 8;  // 19 KB each for Qwen3
    for (const auto& [key, bits] : class_bits_)
        if (key == allowed) return bits;
    if (class_bits_.size() >= kMaxClassBitsets) class_bits_.erase(class_bits_.begin());
    auto bits = std::make_shared<std::vector<uint64_t>>();
    trie_->classes_->class_bits(allowed, bits.get());
    class_bits_.emplace_back(allowed, bits);
    return bits;
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
