// CharSet, subset construction, products and minimisation (see automaton.h).
//
// Assertions in the subset construction: ^ and $ hold only at the start and at the end of the
// whole text. So a ^ arc is followed only in the closure of the start state (marked as such: the
// same NFA states reached after some text are a different DFA state), and a $ arc is never
// followed on the way to a transition, only when asking whether a state accepts: a state accepts
// when the final NFA state is reachable from it through epsilon and $ arcs (and ^ arcs at the
// start), i.e. when the text may end here.
#include "constrain/automaton.h"

#include <algorithm>
#include <unordered_map>

namespace sluice::constrain {
namespace {

constexpr uint32_t kEndOfCodePoints = kMaxCodePoint + 1;
// Work (NFA states visited, table cells written) one subset construction may do per DFA state it
// is allowed: a budget proportional to the state limit.
constexpr size_t kWorkPerState = 4096;
// Minimisation is an optimisation; past this many cell visits it gives up and keeps the trimmed
// automaton (Moore's refinement needs up to one round per state on a long chain).
constexpr size_t kMinimizeWork = size_t{1} << 20;

Status too_large(size_t max_states) {
    return error(ErrorCode::kUnsupported,
                 "its automaton would pass " + std::to_string(max_states) + " states");
}

}  // namespace

// ---- CharSet ----

CharSet& CharSet::add(uint32_t lo, uint32_t hi) {
    if (lo > hi) return *this;
    hi = std::min(hi, kMaxCodePoint);
    std::vector<Range> out;
    out.reserve(ranges_.size() + 1);
    size_t i = 0;
    while (i < ranges_.size() && ranges_[i].hi + 1 < lo) out.push_back(ranges_[i++]);
    Range merged{lo, hi};
    while (i < ranges_.size() && ranges_[i].lo <= hi + 1) {
        merged.lo = std::min(merged.lo, ranges_[i].lo);
        merged.hi = std::max(merged.hi, ranges_[i].hi);
        ++i;
    }
    out.push_back(merged);
    while (i < ranges_.size()) out.push_back(ranges_[i++]);
    ranges_ = std::move(out);
    return *this;
}

CharSet& CharSet::add(const CharSet& other) {
    for (const Range& r : other.ranges_) add(r.lo, r.hi);
    return *this;
}

CharSet CharSet::complement() const {
    CharSet out;
    uint32_t next = 0;
    for (const Range& r : ranges_) {
        if (r.lo > next) out.ranges_.push_back({next, r.lo - 1});
        next = r.hi + 1;
    }
    if (next <= kMaxCodePoint) out.ranges_.push_back({next, kMaxCodePoint});
    return out;
}

CharSet CharSet::intersect(const CharSet& other) const {
    CharSet out;
    size_t i = 0, j = 0;
    while (i < ranges_.size() && j < other.ranges_.size()) {
        const Range& a = ranges_[i];
        const Range& b = other.ranges_[j];
        const uint32_t lo = std::max(a.lo, b.lo), hi = std::min(a.hi, b.hi);
        if (lo <= hi) out.ranges_.push_back({lo, hi});
        if (a.hi < b.hi)
            ++i;
        else
            ++j;
    }
    return out;
}

bool CharSet::contains(uint32_t c) const {
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), c,
                               [](uint32_t x, const Range& r) { return x < r.lo; });
    return it != ranges_.begin() && std::prev(it)->hi >= c;
}

// ---- Dfa ----

size_t Dfa::class_of(uint32_t c) const {
    return static_cast<size_t>(std::upper_bound(bounds_.begin(), bounds_.end(), c) - bounds_.begin()) - 1;
}

Expected<Dfa> Dfa::from_nfa(const Nfa& nfa, size_t max_states) {
    Dfa d;
    std::vector<uint32_t> bounds = {0, kEndOfCodePoints};
    for (const CharSet& s : nfa.sets)
        for (const CharSet::Range& r : s.ranges()) {
            bounds.push_back(r.lo);
            bounds.push_back(r.hi + 1);
        }
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    d.bounds_ = std::move(bounds);
    const size_t classes = d.class_count();
    // For each character set, the class ranges it covers.
    std::vector<std::vector<std::pair<size_t, size_t>>> covers(nfa.sets.size());
    for (size_t i = 0; i < nfa.sets.size(); ++i)
        for (const CharSet::Range& r : nfa.sets[i].ranges())
            covers[i].emplace_back(d.class_of(r.lo), d.class_of(r.hi));

    const size_t work_budget = max_states * kWorkPerState;
    size_t work = 0;
    std::vector<uint32_t> seen(nfa.out.size(), 0);
    uint32_t stamp = 0;
    std::vector<uint32_t> todo;
    // The states reachable from `seeds` through epsilon arcs (and ^ arcs when `at_start`; $ arcs too
    // when `at_end`), sorted.
    auto closure = [&](const std::vector<uint32_t>& seeds, bool at_start, bool at_end) {
        ++stamp;
        std::vector<uint32_t> out;
        todo.assign(seeds.begin(), seeds.end());
        while (!todo.empty()) {
            const uint32_t s = todo.back();
            todo.pop_back();
            if (seen[s] == stamp) continue;
            seen[s] = stamp;
            out.push_back(s);
            ++work;
            for (const Nfa::Arc& a : nfa.out[s]) {
                const bool follow = a.kind == Nfa::Edge::kEpsilon ||
                                    (at_start && a.kind == Nfa::Edge::kTextStart) ||
                                    (at_end && a.kind == Nfa::Edge::kTextEnd);
                if (follow && seen[a.to] != stamp) todo.push_back(a.to);
            }
        }
        std::sort(out.begin(), out.end());
        return out;
    };
    auto accepts = [&](const std::vector<uint32_t>& set, bool at_start) {
        const std::vector<uint32_t> ends = closure(set, at_start, true);
        return std::binary_search(ends.begin(), ends.end(), nfa.final);
    };
    auto key_of = [](const std::vector<uint32_t>& set, bool at_start) {
        std::string key(1, at_start ? 'S' : '-');
        key.append(reinterpret_cast<const char*>(set.data()), set.size() * sizeof(uint32_t));
        return key;
    };

    std::vector<std::vector<uint32_t>> subsets;
    std::unordered_map<std::string, int32_t> index;
    subsets.push_back(closure({nfa.start}, true, false));
    index.emplace(key_of(subsets[0], true), 0);
    d.accepting_.push_back(accepts(subsets[0], true));
    std::vector<std::vector<uint32_t>> buckets(classes);
    for (size_t cur = 0; cur < subsets.size(); ++cur) {
        for (auto& b : buckets) b.clear();
        for (uint32_t s : subsets[cur])
            for (const Nfa::Arc& a : nfa.out[s]) {
                if (a.kind != Nfa::Edge::kChar) continue;
                for (const auto& [lo, hi] : covers[a.set]) {
                    for (size_t c = lo; c <= hi; ++c) buckets[c].push_back(a.to);
                    work += hi - lo + 1;
                }
            }
        d.next_.resize(subsets.size() * classes, kDead);
        for (size_t c = 0; c < classes; ++c) {
            if (buckets[c].empty()) continue;
            work += buckets[c].size();
            std::vector<uint32_t> target = closure(buckets[c], false, false);
            if (work > work_budget) return too_large(max_states);
            std::string key = key_of(target, false);
            auto it = index.find(key);
            if (it == index.end()) {
                if (subsets.size() >= max_states) return too_large(max_states);
                it = index.emplace(std::move(key), static_cast<int32_t>(subsets.size())).first;
                d.accepting_.push_back(accepts(target, false));
                subsets.push_back(std::move(target));
                d.next_.resize(subsets.size() * classes, kDead);
            }
            d.next_[cur * classes + c] = it->second;
        }
    }
    d.next_.resize(subsets.size() * classes, kDead);
    return d;
}

Dfa Dfa::any_text() {
    Dfa d;
    d.bounds_ = {0, kEndOfCodePoints};
    d.next_ = {0};
    d.accepting_ = {1};
    return d;
}

Dfa Dfa::decimal_multiples(uint32_t modulus) {
    Dfa d;
    // Classes: below '0', each digit, above '9'.
    d.bounds_.push_back(0);
    for (uint32_t c = '0'; c <= '9' + 1; ++c) d.bounds_.push_back(c);
    d.bounds_.push_back(kEndOfCodePoints);
    const size_t classes = d.class_count();
    d.next_.assign(static_cast<size_t>(modulus) * classes, kDead);
    d.accepting_.assign(modulus, 0);
    d.accepting_[0] = 1;
    for (uint32_t r = 0; r < modulus; ++r)
        for (uint32_t digit = 0; digit < 10; ++digit)
            d.next_[r * classes + 1 + digit] = static_cast<int32_t>((10 * r + digit) % modulus);
    return d;
}

Expected<Dfa> Dfa::combine(const Dfa& a, const Dfa& b, Op op, size_t max_states) {
    Dfa d;
    std::merge(a.bounds_.begin(), a.bounds_.end(), b.bounds_.begin(), b.bounds_.end(),
               std::back_inserter(d.bounds_));
    d.bounds_.erase(std::unique(d.bounds_.begin(), d.bounds_.end()), d.bounds_.end());
    const size_t classes = d.class_count();
    std::vector<size_t> class_a(classes), class_b(classes);
    for (size_t c = 0; c < classes; ++c) {
        class_a[c] = a.class_of(d.bounds_[c]);
        class_b[c] = b.class_of(d.bounds_[c]);
    }
    auto dead = [op](int32_t sa, int32_t sb) {
        switch (op) {
            case Op::kAnd: return sa == kDead || sb == kDead;
            case Op::kOr: return sa == kDead && sb == kDead;
            case Op::kAndNot: return sa == kDead;
        }
        return true;
    };
    auto accept = [&](int32_t sa, int32_t sb) {
        const bool in_a = sa != kDead && a.accepting(sa), in_b = sb != kDead && b.accepting(sb);
        switch (op) {
            case Op::kAnd: return in_a && in_b;
            case Op::kOr: return in_a || in_b;
            case Op::kAndNot: return in_a && !in_b;
        }
        return false;
    };
    auto key_of = [](int32_t sa, int32_t sb) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(sa + 1)) << 32) | static_cast<uint32_t>(sb + 1);
    };
    std::vector<std::pair<int32_t, int32_t>> pairs = {{0, 0}};
    std::unordered_map<uint64_t, int32_t> index = {{key_of(0, 0), 0}};
    d.accepting_.push_back(accept(0, 0));
    for (size_t cur = 0; cur < pairs.size(); ++cur) {
        d.next_.resize(pairs.size() * classes, kDead);
        const auto [sa, sb] = pairs[cur];
        for (size_t c = 0; c < classes; ++c) {
            const int32_t na = sa == kDead ? kDead : a.next(sa, class_a[c]);
            const int32_t nb = sb == kDead ? kDead : b.next(sb, class_b[c]);
            if (dead(na, nb)) continue;
            auto [it, fresh] = index.emplace(key_of(na, nb), static_cast<int32_t>(pairs.size()));
            if (fresh) {
                if (pairs.size() >= max_states) return too_large(max_states);
                pairs.emplace_back(na, nb);
                d.accepting_.push_back(accept(na, nb));
                d.next_.resize(pairs.size() * classes, kDead);
            }
            d.next_[cur * classes + c] = it->second;
        }
    }
    d.next_.resize(pairs.size() * classes, kDead);
    return d;
}

std::vector<char> Dfa::live_states() const {
    const size_t n = state_count(), classes = class_count();
    std::vector<std::vector<int32_t>> preds(n);
    for (size_t s = 0; s < n; ++s)
        for (size_t c = 0; c < classes; ++c)
            if (const int32_t t = next_[s * classes + c]; t != kDead)
                preds[static_cast<size_t>(t)].push_back(static_cast<int32_t>(s));
    std::vector<char> live(n, 0);
    std::vector<int32_t> todo;
    for (size_t s = 0; s < n; ++s)
        if (accepting_[s]) {
            live[s] = 1;
            todo.push_back(static_cast<int32_t>(s));
        }
    while (!todo.empty()) {
        const int32_t s = todo.back();
        todo.pop_back();
        for (int32_t p : preds[static_cast<size_t>(s)])
            if (!live[static_cast<size_t>(p)]) {
                live[static_cast<size_t>(p)] = 1;
                todo.push_back(p);
            }
    }
    return live;
}

Dfa Dfa::minimized() const {
    const size_t n = state_count(), classes = class_count();
    // Live: reachable from the start (all are, by construction) and able to reach acceptance.
    const std::vector<char> live = live_states();
    Dfa d;
    d.bounds_ = bounds_;
    if (!live[0]) {  // the empty language: one state with no way out
        d.next_.assign(classes, kDead);
        d.accepting_ = {0};
        return d;
    }
    // Moore's refinement over live states: a block is (accepting, block of each class's target).
    std::vector<int32_t> block(n, kDead);
    for (size_t s = 0; s < n; ++s)
        if (live[s]) block[s] = accepting_[s] ? 1 : 0;
    size_t blocks = 0, work = 0;
    bool refined_fully = false;
    for (;;) {
        std::unordered_map<std::string, int32_t> ids;
        std::vector<int32_t> next_block(n, kDead);
        std::vector<int32_t> signature(classes + 1);
        for (size_t s = 0; s < n; ++s) {
            if (!live[s]) continue;
            signature[0] = block[s];
            for (size_t c = 0; c < classes; ++c) {
                const int32_t t = next_[s * classes + c];
                signature[c + 1] = t == kDead ? kDead : block[static_cast<size_t>(t)];
            }
            std::string key(reinterpret_cast<const char*>(signature.data()),
                            signature.size() * sizeof(int32_t));
            next_block[s] = ids.emplace(std::move(key), static_cast<int32_t>(ids.size())).first->second;
        }
        work += n * (classes + 1);
        const bool stable = ids.size() == blocks;
        blocks = ids.size();
        block = std::move(next_block);
        if (stable) {
            refined_fully = true;
            break;
        }
        if (work > kMinimizeWork) break;
    }
    // Without a stable partition, every live state stays a block of its own (only trimmed).
    if (!refined_fully) {
        blocks = 0;
        for (size_t s = 0; s < n; ++s)
            if (live[s]) block[s] = static_cast<int32_t>(blocks++);
    }
    // Renumber so that the start's block is 0, in order of first appearance.
    std::vector<int32_t> renumber(blocks, kDead);
    int32_t count = 0;
    renumber[static_cast<size_t>(block[0])] = count++;
    for (size_t s = 0; s < n; ++s)
        if (live[s] && renumber[static_cast<size_t>(block[s])] == kDead)
            renumber[static_cast<size_t>(block[s])] = count++;
    d.next_.assign(static_cast<size_t>(count) * classes, kDead);
    d.accepting_.assign(static_cast<size_t>(count), 0);
    for (size_t s = 0; s < n; ++s) {
        if (!live[s]) continue;
        const auto to = static_cast<size_t>(renumber[static_cast<size_t>(block[s])]);
        d.accepting_[to] = accepting_[s];
        for (size_t c = 0; c < classes; ++c) {
            const int32_t t = next_[s * classes + c];
            if (t != kDead && live[static_cast<size_t>(t)])
                d.next_[to * classes + c] = renumber[static_cast<size_t>(block[static_cast<size_t>(t)])];
        }
    }
    return d;
}

bool Dfa::accepts(const std::u32string& text) const {
    int32_t s = 0;
    for (char32_t c : text) {
        if (static_cast<uint32_t>(c) > kMaxCodePoint) return false;
        s = next(s, class_of(static_cast<uint32_t>(c)));
        if (s == kDead) return false;
    }
    return accepting(s);
}

int64_t Dfa::shortest_length() const {
    const size_t classes = class_count();
    std::vector<int64_t> depth(state_count(), -1);
    std::vector<int32_t> frontier = {0};
    depth[0] = 0;
    for (size_t i = 0; i < frontier.size(); ++i) {
        const int32_t s = frontier[i];
        if (accepting(s)) return depth[static_cast<size_t>(s)];
        for (size_t c = 0; c < classes; ++c) {
            const int32_t t = next(s, c);
            if (t != kDead && depth[static_cast<size_t>(t)] < 0) {
                depth[static_cast<size_t>(t)] = depth[static_cast<size_t>(s)] + 1;
                frontier.push_back(t);
            }
        }
    }
    return -1;
}

int64_t Dfa::longest_length() const {
    const std::vector<char> live = live_states();
    const size_t classes = class_count();
    if (!live[0]) return -1;
    // Longest path over live states by depth-first search; a state met again while on the path is
    // a cycle, so texts are unbounded.
    std::vector<int64_t> longest(state_count(), -1);
    std::vector<char> color(state_count(), 0);  // 0 new, 1 on the path, 2 done
    struct Frame {
        int32_t state;
        size_t cls;
    };
    std::vector<Frame> stack = {{0, 0}};
    color[0] = 1;
    while (!stack.empty()) {
        Frame& f = stack.back();
        const auto s = static_cast<size_t>(f.state);
        if (f.cls == classes) {
            int64_t best = accepting(f.state) ? 0 : -1;
            for (size_t c = 0; c < classes; ++c)
                if (const int32_t t = next(f.state, c); t != kDead && longest[static_cast<size_t>(t)] >= 0)
                    best = std::max(best, longest[static_cast<size_t>(t)] + 1);
            longest[s] = best;
            color[s] = 2;
            stack.pop_back();
            continue;
        }
        const int32_t t = next(f.state, f.cls++);
        if (t == kDead || !live[static_cast<size_t>(t)]) continue;
        if (color[static_cast<size_t>(t)] == 1) return -1;
        if (color[static_cast<size_t>(t)] == 0) {
            color[static_cast<size_t>(t)] = 1;
            stack.push_back({t, 0});
        }
    }
    return longest[0];
}

}  // namespace sluice::constrain
