// Finite automata over Unicode code points: the regular languages behind a schema's `pattern`,
// `format`, `propertyNames`, `patternProperties` and integer `multipleOf`, before they become
// grammar rules (json_schema_strings.cpp writes a Dfa out as rules, one per state).
//
// CharSet is a set of code points as ranges. Nfa is a Thompson automaton with two assertion edges
// (^ and $, true only at the start and at the end of the whole text), built by regex.cpp. Dfa is
// what the compiler works with: made by subset construction, combined by product (intersection,
// union, difference: a key kind of patternProperties is "matches this pattern and no other one"),
// measured (shortest and longest text) and emitted.
//
// A Dfa's alphabet is a partition of the code points into classes (class i = [bounds[i],
// bounds[i+1])) chosen so that every transition set is a union of classes: the transition table is
// dense, [states, classes], which keeps the product and minimisation simple array walks.
//
// Budgets: every construction takes a state limit and fails with kUnsupported past it (a schema
// must not make the server build a huge automaton: `(a|b)*a(a|b){30}` has 2^31 subset states).
// Data lifetime: plain values, built and dropped within one schema compilation. Threading: none.
// Rejected alternative: a byte-level automaton (UTF-8 inside the states) — classes such as `.` or
// [^"] would become dozens of byte paths per state, and a key of patternProperties needs the
// complement of a pattern, which is simplest over whole code points.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::constrain {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// A set of code points: sorted, disjoint, non-adjacent closed ranges.
class CharSet {
 public:
    struct Range {
        uint32_t lo, hi;
    };
    CharSet() = default;
    static CharSet single(uint32_t c) { return range(c, c); }
    static CharSet range(uint32_t lo, uint32_t hi) { return CharSet().add(lo, hi); }
    static CharSet all() { return range(0, kMaxCodePoint); }

    CharSet& add(uint32_t lo, uint32_t hi);
    CharSet& add(const CharSet& other);
    CharSet complement() const;  // within [0, kMaxCodePoint]
    CharSet intersect(const CharSet& other) const;
    bool contains(uint32_t c) const;
    bool empty() const { return ranges_.empty(); }
    const std::vector<Range>& ranges() const { return ranges_; }

 private:
    std::vector<Range> ranges_;
};

// A Thompson automaton: states joined by character, epsilon and assertion edges; one start and one
// final state.
struct Nfa {
    enum class Edge : uint8_t { kChar, kEpsilon, kTextStart, kTextEnd };  // ^ and $
    struct Arc {
        Edge kind;
        uint32_t set;  // kChar: index into `sets`
        uint32_t to;
    };
    std::vector<std::vector<Arc>> out;  // by state
    std::vector<CharSet> sets;
    uint32_t start = 0, final = 0;

    uint32_t add_state() {
        out.emplace_back();
        return static_cast<uint32_t>(out.size() - 1);
    }
    void add_arc(uint32_t from, Edge kind, uint32_t to) { out[from].push_back({kind, 0, to}); }
    void add_chars(uint32_t from, CharSet set, uint32_t to) {
        sets.push_back(std::move(set));
        out[from].push_back({Edge::kChar, static_cast<uint32_t>(sets.size() - 1), to});
    }
};

class Dfa {
 public:
    static constexpr int32_t kDead = -1;

    // Subset construction. Fails (kUnsupported) past `max_states` states or past a budget of work
    // proportional to it, so a hostile automaton is refused in milliseconds.
    static Expected<Dfa> from_nfa(const Nfa& nfa, size_t max_states);
    // Every text (one accepting state).
    static Dfa any_text();
    // Texts that are decimal numerals (digits '0'..'9') of a value ≡ 0 (mod `modulus`), leading zeros
    // included (the caller intersects with a numeral language that has none). `modulus` >= 1.
    static Dfa decimal_multiples(uint32_t modulus);

    enum class Op { kAnd, kOr, kAndNot };
    // The product automaton (reachable pairs only): a ∧ b, a ∨ b, a ∧ ¬b.
    static Expected<Dfa> combine(const Dfa& a, const Dfa& b, Op op, size_t max_states);

    // The same language with dead states dropped (transitions into them become kDead) and, below
    // a size where it is cheap, equivalent states merged (Moore's partition refinement).
    Dfa minimized() const;

    size_t state_count() const { return accepting_.size(); }
    size_t class_count() const { return bounds_.size() - 1; }
    int32_t next(int32_t state, size_t cls) const {
        return next_[static_cast<size_t>(state) * class_count() + cls];
    }
    bool accepting(int32_t state) const { return accepting_[static_cast<size_t>(state)] != 0; }
    CharSet class_set(size_t cls) const { return CharSet::range(bounds_[cls], bounds_[cls + 1] - 1); }
    // The class holding code point c.
    size_t class_of(uint32_t c) const;

    bool accepts(const std::u32string& text) const;
    bool empty() const { return shortest_length() < 0; }
    // Length in code points of the shortest accepted text (-1: none) and of the longest (-1:
    // unbounded or none).
    int64_t shortest_length() const;
    int64_t longest_length() const;

 private:
    // States reachable from the start that can reach acceptance (all are reachable by construction).
    std::vector<char> live_states() const;

    std::vector<uint32_t> bounds_;  // [classes + 1]: class i is [bounds_[i], bounds_[i + 1])
    std::vector<int32_t> next_;     // [states, classes]; state 0 is the start
    std::vector<char> accepting_;   // [states]
};

}  // namespace sluice::constrain
