// GrammarBuilder::build (checks, pruning, flattening) and GrammarMatcher (see sluice/constrain.h
// and grammar_impl.h).
//
// build() computes two fixpoints over the rules (worklists, linear time): productive (some alternative
// consists only of bytes and productive rules — it can derive a finite string) and nullable (can derive the
// empty string). Unproductive alternatives are dropped, which is what makes every accepted prefix
// completable; left recursion (a rule reachable from itself through nullable prefixes) is refused
// because expansion would not terminate.
#include <algorithm>
#include <functional>

#include "constrain/grammar_impl.h"
#include "core/assert.h"

namespace sluice {

using Symbol = GrammarBuilder::Symbol;

Symbol Symbol::byte_set(std::string_view chars) {
    Symbol s;
    for (char c : chars) s.add_range(static_cast<uint8_t>(c), static_cast<uint8_t>(c));
    return s;
}

Symbol Symbol::byte_range(uint8_t lo, uint8_t hi) {
    Symbol s;
    s.add_range(lo, hi);
    return s;
}

Symbol Symbol::ref(RuleId id) {
    Symbol s;
    s.is_rule = true;
    s.rule = id;
    return s;
}

Symbol& Symbol::add_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) bytes[b >> 6] |= uint64_t{1} << (b & 63);
    return *this;
}

Symbol& Symbol::remove(uint8_t b) {
    bytes[b >> 6] &= ~(uint64_t{1} << (b & 63));
    return *this;
}

GrammarBuilder::GrammarBuilder() = default;
GrammarBuilder::~GrammarBuilder() = default;
GrammarBuilder::GrammarBuilder(GrammarBuilder&&) noexcept = default;
GrammarBuilder& GrammarBuilder::operator=(GrammarBuilder&&) noexcept = default;

GrammarBuilder::Sequence GrammarBuilder::literal(std::string_view text) {
    Sequence seq;
    for (char c : text) seq.push_back(Symbol::byte_range(static_cast<uint8_t>(c), static_cast<uint8_t>(c)));
    return seq;
}

GrammarBuilder::RuleId GrammarBuilder::add_rule() {
    rules_.emplace_back();
    return static_cast<RuleId>(rules_.size() - 1);
}

void GrammarBuilder::add_alternative(RuleId rule, Sequence sequence) {
    rules_.at(rule).push_back(std::move(sequence));
}

void GrammarBuilder::guard_json_strings(std::string tag) {
    SLUICE_ASSERT(rules_.empty());
    SLUICE_ASSERT(tag.size() >= 2 && tag[0] == '<' && tag.find('<', 1) == std::string::npos);
    for (char c : tag) SLUICE_ASSERT(c >= 0x20 && c < 0x7F && c != '"' && c != '\\');
    json_string_guard_ = std::move(tag);
}

Expected<std::shared_ptr<const Grammar>> GrammarBuilder::build(RuleId root) const {
    const size_t n = rules_.size();
    if (root >= n)
        return error(ErrorCode::kInvalidArgument,
                     "[grammar] root rule " + std::to_string(root) + " does not exist");
    for (const auto& alts : rules_)
        for (const auto& seq : alts)
            for (const Symbol& s : seq)
                if (s.is_rule && s.rule >= n)
                    return error(ErrorCode::kInvalidArgument,
                                 "[grammar] reference to missing rule " + std::to_string(s.rule));
    auto empty_set = [](const Symbol& s) { return !s.is_rule && s.bytes == std::array<uint64_t, 4>{}; };

    // Both fixpoints are worklists (a rule is marked once, when the count of unmarked references
    // of one of its alternatives drops to zero): linear in the grammar's size. Repeated passes
    // would be quadratic on the long chains a maxLength of 10000 builds.
    // `eligible(seq)`: the alternative may count at all; `counts(sym)`: the symbol must be marked.
    auto fixpoint = [&](auto eligible, auto counts, const std::vector<char>* within) {
        std::vector<char> marked(n, 0);
        std::vector<std::pair<uint32_t, uint32_t>> alts;  // (rule, missing references)
        std::vector<std::vector<uint32_t>> users(n);      // rule → alternatives referencing it
        std::vector<uint32_t> queue;
        for (size_t r = 0; r < n; ++r) {
            if (within && !(*within)[r]) continue;
            for (const auto& seq : rules_[r]) {
                if (!eligible(seq)) continue;
                const auto id = static_cast<uint32_t>(alts.size());
                uint32_t missing = 0;
                for (const Symbol& sym : seq)
                    if (counts(sym)) {
                        ++missing;
                        users[sym.rule].push_back(id);
                    }
                alts.emplace_back(static_cast<uint32_t>(r), missing);
                if (missing == 0 && !marked[r]) {
                    marked[r] = 1;
                    queue.push_back(static_cast<uint32_t>(r));
                }
            }
        }
        while (!queue.empty()) {
            const uint32_t r = queue.back();
            queue.pop_back();
            for (uint32_t id : users[r]) {
                auto& [rule, missing] = alts[id];
                if (--missing == 0 && !marked[rule]) {
                    marked[rule] = 1;
                    queue.push_back(rule);
                }
            }
        }
        return marked;
    };
    // Productive: derives at least one finite string.
    const std::vector<char> productive =
        fixpoint([&](const Sequence& seq) { return std::none_of(seq.begin(), seq.end(), empty_set); },
                 [](const Symbol& sym) { return sym.is_rule; }, nullptr);
    if (!productive[root])
        return error(ErrorCode::kInvalidArgument,
                     "[grammar] the grammar derives no string (nothing satisfies it)");
    auto keep = [&](const Sequence& seq) {
        for (const Symbol& s : seq)
            if (s.is_rule ? !productive[s.rule] : empty_set(s)) return false;
        return true;
    };
    // Nullable (derives the empty string), over the kept alternatives.
    const std::vector<char> nullable = fixpoint(
        [&](const Sequence& seq) {
            return keep(seq) &&
                   std::all_of(seq.begin(), seq.end(), [](const Symbol& sym) { return sym.is_rule; });
        },
        [](const Symbol& sym) { return sym.is_rule; }, &productive);
    // Left recursion: edges r → rules at a leftmost position of r's alternatives.
    std::vector<std::vector<uint32_t>> left(n);
    for (size_t r = 0; r < n; ++r) {
        if (!productive[r]) continue;
        for (const auto& seq : rules_[r]) {
            if (!keep(seq)) continue;
            for (const Symbol& s : seq) {
                if (!s.is_rule) break;
                left[r].push_back(s.rule);
                if (!nullable[s.rule]) break;
            }
        }
    }
    std::vector<char> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::function<bool(uint32_t)> cyclic = [&](uint32_t r) {
        color[r] = 1;
        for (uint32_t next : left[r]) {
            if (color[next] == 1) return true;
            if (color[next] == 0 && cyclic(next)) return true;
        }
        color[r] = 2;
        return false;
    };
    for (uint32_t r = 0; r < n; ++r)
        if (productive[r] && color[r] == 0 && cyclic(r))
            return error(ErrorCode::kInvalidArgument,
                         "[grammar] rule " + std::to_string(r) +
                             " is left-recursive (e.g. a $ref cycle that consumes no input)");

    auto g = std::make_shared<Grammar>();
    g->root = root;
    g->rule_alts.resize(n);
    for (size_t r = 0; r < n; ++r) {
        if (!productive[r]) continue;
        for (const auto& seq : rules_[r]) {
            if (!keep(seq)) continue;
            g->rule_alts[r].push_back(static_cast<uint32_t>(g->elems.size()));
            for (const Symbol& s : seq) {
                if (s.is_rule) {
                    g->elems.push_back({Grammar::kRule, s.rule});
                    continue;
                }
                auto it = std::find(g->byte_sets.begin(), g->byte_sets.end(), s.bytes);
                if (it == g->byte_sets.end()) it = g->byte_sets.insert(g->byte_sets.end(), s.bytes);
                g->elems.push_back({Grammar::kBytes, static_cast<uint32_t>(it - g->byte_sets.begin())});
            }
            g->elems.push_back({Grammar::kEnd, 0});
        }
    }
    // The start: one synthetic alternative [root, end] so the matcher's initial expansion is an
    // ordinary advance().
    g->elems.push_back({Grammar::kRule, root});
    g->elems.push_back({Grammar::kEnd, 0});
    return std::shared_ptr<const Grammar>(std::move(g));
}

// ---- GrammarMatcher ----

namespace {
// The stacks under heads [begin, end) of `st`, sorted and unique.
void collect(const constrain::Stepper& st, size_t begin, std::vector<std::vector<uint32_t>>* out) {
    out->clear();
    for (size_t i = begin; i < st.heads.size(); ++i) out->push_back(st.stack_of(st.heads[i]));
    std::sort(out->begin(), out->end());
    out->erase(std::unique(out->begin(), out->end()), out->end());
}
}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
    constrain::Stepper st(*grammar_);
    bool accept = false;
    st.advance(static_cast<uint32_t>(grammar_->elems.size() - 2), -1, &accept);
    collect(st, 0, &stacks_);
    accepting_ = accept;
}

bool GrammarMatcher::feed(std::string_view bytes) {
    if (bytes.empty()) return true;
    constrain::Stepper st(*grammar_);
    for (const auto& s : stacks_) st.push_stack(s);
    size_t begin = 0;
    bool accept = false;
    for (char c : bytes) {
        const size_t end = st.heads.size();
        if (begin == end) return false;
        accept = false;
        st.step(begin, end, static_cast<uint8_t>(c), &accept);
        begin = end;
        if (st.heads.size() == begin && !accept) return false;
    }
    collect(st, begin, &stacks_);
    accepting_ = accept;
    return true;
}

std::string GrammarMatcher::state_key() const {
    std::string key(accepting_ ? "A" : "-");
    for (const auto& s : stacks_) {
        const auto size = static_cast<uint32_t>(s.size());
        key.append(reinterpret_cast<const char*>(&size), sizeof(size));
        key.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(uint32_t));
    }
    return key;
}

}  // namespace sluice
