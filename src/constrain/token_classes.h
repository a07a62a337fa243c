// The token-class shortcut of the mask walk (TokenConstraint::compute_mask, see token_constraint.cpp).
//
// Where nearly every token fits — inside a JSON string, an XML text value, a pattern of a broad
// character class — the plain trie walk visits most of the vocabulary's trie (325 k nodes for
// Qwen3) to allow tokens whose fate was clear from their bytes alone. The shortcut decides those
// tokens as a class, from precomputed bitsets, and walks only the rest:
//
//   1. The grammar side (plan_token_class, per mask, on the walk's memoized automaton MemoDfa).
//      From the start state X0, the ASCII bytes that all lead to one common state X1 are the
//      characters a class token may begin with; X1's own class (found the same way) gives the
//      characters it may go on with (after "</" in XML text 'p' may continue "</parameter>", but
//      after "</p" every letter is text again); multi-byte UTF-8 characters belong when every one
//      of them (every lead byte, every continuation) leads where the ASCII ones do. The chain X1,
//      X2, ... is followed while every class character keeps leading to one common next state: a
//      token of ℓ class characters goes X0 → Xℓ and is allowed exactly when the chain is alive for
//      ℓ steps (a free string: a cycle, alive forever; a maxLength string: dead after the count).
//      The bytes no state of the chain accepts are noted too: a token of class characters and
//      those is refused at the first of them. Every claim is checked on the automaton's own
//      transitions, so nothing about the grammar's rules is assumed.
//   2. The vocabulary side (TokenClasses, once per TokenTrie): token bitsets by content (per
//      printable byte, control, multi-byte, complete UTF-8, at most ℓ characters), combined per
//      class into "tokens made only of its characters"; and, on every trie edge, a summary of the
//      tokens below it (the bytes they hold from the edge on, whether one is not whole UTF-8, the
//      most characters of one), so the walk skips a subtree whose tokens are all decided.
//
// The mask is then the class's allowed tokens (bitset operations) OR what the walk finds in the
// subtrees it still enters (tokens with a quote, a backslash, a control byte, a partial character,
// or longer than the chain was followed). Deeper in the walk, a large subtree the class in force
// does not cover may get a class of its own, found at the state the walk reached there. The same
// state gives the same mask as the plain walk; tests/unit/constrain_mask_test.cpp compares them.
//
// Memory (Qwen3, 151,669 tokens, 333 k trie edges): 16 bytes per trie edge (5.3 MB), 132 bitsets
// of 19 KB (2.5 MB) and a byte per token: 8.0 MB per vocabulary, built in ~12 ms with the trie and
// shared by all requests. Per request, TokenConstraint keeps the automaton (MemoDfa) and the class
// bitsets of its last 8 classes.
//
// Threading: TokenClasses is immutable after build. MemoDfa belongs to one TokenConstraint.
// Rejected alternatives: XGrammar's per-grammar-position precomputation (a pass over the vocabulary
// for every position of every request's grammar: a first visit would cost more than the old walk);
// a separate trie of the tokens outside the JSON-string class (one byte set only, while guarded
// strings, XML text and patterns each have their own); deciding multi-byte tokens only up to a
// shorter chain (CJK tokens are long in bytes: walking those past 8 characters doubles the walk).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "constrain/grammar_impl.h"

namespace sluice {

// What a vocabulary's tokens hold, for the token-class shortcut (see the file comment).
struct TokenClasses {
    // Token contents in two words. word 0: printable bytes 0x20-0x5F (bit b - 0x20); word 1: bits
    // 0-31 printable bytes 0x60-0x7F, then the flags below, then a character count (saturated at
    // 255) in bits 40-47. Also a class's characters (kControl: all control bytes are).
    using Summary = std::array<uint64_t, 2>;
    static constexpr uint64_t kControl = uint64_t{1} << 32;     // a byte 0x00-0x1F
    static constexpr uint64_t kMultibyte = uint64_t{1} << 33;   // a character of 2-4 bytes (a byte from 0x80)
    static constexpr uint64_t kIncomplete = uint64_t{1} << 34;  // not whole, valid UTF-8 (or empty)
    static constexpr int kCharsShift = 40;
    static constexpr uint64_t kCharsMask = uint64_t{0xFF} << kCharsShift;
    // Bitsets "at most ℓ characters" are kept for ℓ up to this; longer tokens are listed.
    static constexpr int kMaxCountedChars = 32;

    static std::shared_ptr<const TokenClasses> build(const TokenTrie& trie);

    // The tokens (as a bitset over ids) whose contents fit `allowed` (a Summary whose set bits are
    // the bytes and flags a token may hold; kIncomplete is never allowed).
    void class_bits(const Summary& allowed, std::vector<uint64_t>* out) const;
    // ORs into `bits` the tokens of `cls` (class_bits) with at most `max_chars` characters.
    void or_at_most(const std::vector<uint64_t>& cls, int max_chars, std::vector<uint64_t>* bits) const;

    size_t memory_bytes() const;

    // [trie edges]: the tokens below edges_[e] (its child's subtree): the bytes they hold from the
    // edge's byte on (kControl, kMultibyte there: a byte 0x00-0x1F, a byte from 0x80), whether one
    // is not whole UTF-8 (kIncomplete) and the most characters of one (both of whole tokens).
    std::vector<Summary> edge_summary;
    int max_chars = 0;                // the longest complete token, in characters
    size_t words = 0;                 // of a bitset over token ids
    std::vector<uint64_t> complete;   // [words] whole, valid UTF-8, non-empty
    std::vector<uint64_t> multibyte;  // [words] holds a character of 2-4 bytes
    std::vector<uint64_t> control;    // [words] holds a byte 0x00-0x1F
    std::vector<uint64_t> printable;  // [96][words]: holds byte 0x20 + i
    std::vector<uint64_t> at_most;    // [kMaxCountedChars + 1][words]: complete, at most ℓ characters
    std::vector<std::pair<int32_t, int32_t>> long_tokens;  // (characters, id) past kMaxCountedChars, sorted
    std::vector<uint8_t> token_chars;  // [vocabulary] characters of a complete token (at most 255)
};

namespace constrain {

// The mask walk's grammar states: sets of heads interned as they are reached, and each (state,
// byte) transition computed once (a dense row of 256 per state): a deterministic automaton over
// bytes, built lazily. One lives with each TokenConstraint and is kept from mask to mask, so the
// states of one string, one array, one key (and the chain of a bounded string) are stepped once per
// generation, not once per token. Frames are shared (Stepper::share_frames): equal stacks have
// equal heads, so a start state met again, pushed from the matcher's stacks, is the state already
// interned. Past kMaxStates the automaton is full: the caller drops it and starts a new one.
//
// Memory: per state 512 bytes of row plus its heads (~8 bytes each) and ~64 bytes of bookkeeping;
// at most kMaxStates (about 2.5 MB with Qwen3-sized grammars, far less in practice).
class MemoDfa {
 public:
    static constexpr int32_t kUnknown = -1, kDead = -2, kOverflow = -3, kMixed = -10;
    static constexpr size_t kMaxStates = 4096;
    struct State {
        uint32_t begin, end;  // heads
        std::array<uint64_t, 4> first;
        uint64_t hash;
    };

    explicit MemoDfa(const Grammar& g);
    // The state of `stacks` (a matcher's), kOverflow when the automaton is full.
    int32_t add_start(const std::vector<std::vector<uint32_t>>& stacks);
    size_t state_count() const { return states_.size(); }

    // The state after byte b (kDead; kOverflow when the automaton is full).
    int32_t next(int32_t s, uint8_t b) {
        const int32_t n = next_[static_cast<size_t>(s) * 256 + b];
        return n != kUnknown ? n : step(s, b);
    }
    using Bytes = std::array<uint64_t, 4>;  // a set of byte values
    // Computes the transitions of `s` by `bytes`: bytes that the same heads accept share one step.
    // False on overflow.
    bool fill(int32_t s, const Bytes& bytes);
    // Where every whole multi-byte UTF-8 character (RFC 3629) read from `s` leads: `expected` if all
    // of them lead to it, kDead if every lead byte is refused, else kMixed. The states inside a
    // character are stepped without being interned (the mask walk seldom needs them).
    int32_t multibyte_target(int32_t s, int32_t expected);
    const State& state(int32_t s) const { return states_[static_cast<size_t>(s)]; }
    bool first_has(int32_t s, uint8_t b) const {
        return (states_[static_cast<size_t>(s)].first[b >> 6] >> (b & 63)) & 1;
    }
    bool has_heads(int32_t s) const { return state(s).begin != state(s).end; }

    // What plan_token_class found about a state, kept with it (kUnknown: not computed yet).
    struct ClassInfo {
        int32_t multibyte = kUnknown;  // multibyte_target(multibyte_expected)
        int32_t multibyte_expected = kUnknown;
        int32_t next = kUnknown;  // the class's next state (kDead: no class here)
        TokenClasses::Summary allowed{};
        TokenClasses::Summary target_of{};  // the class last asked about from this state, and
        int32_t target = kUnknown;          // where all its characters lead (kDead, kMixed)
    };
    ClassInfo& info(int32_t s) { return info_[static_cast<size_t>(s)]; }

 private:
    int32_t step(int32_t s, uint8_t b);
    int32_t intern(size_t begin, size_t frames_mark);
    // Partitions `within` by the heads [begin, end) that accept each byte, into classes_; the count.
    size_t partition(uint32_t begin, uint32_t end, const Bytes& within);
    bool continues_to(uint32_t begin, uint32_t end, int follow, int lo, int hi, int32_t expected,
                      bool* any_dead);

    const Grammar& g_;
    Stepper st_;
    std::vector<State> states_;
    std::vector<ClassInfo> info_;
    std::vector<int16_t> next_;   // [states, 256]; kMaxStates fits
    std::vector<int32_t> slots_;  // open-addressing index of states by their heads' hash
    std::vector<uint32_t> sets_;  // partition's scratch
    std::array<Bytes, 256> classes_;
};

// What the shortcut decides for one mask (see the file comment).
struct ClassPlan {
    bool usable = false;
    TokenClasses::Summary first{};    // what a class token's first character may be (leads to X1)
    TokenClasses::Summary allowed{};  // the class: bytes (and kControl, kMultibyte) its tokens may hold
    // Bytes (and kControl, kMultibyte, kIncomplete) that no state along the chain accepts: a token
    // of class characters and these is refused (at the first of these).
    TokenClasses::Summary dead{};
    int accept_chars = 0;  // a class token with at most this many characters is allowed
    // A class token with more characters is refused (true), or is walked (false: the chain was
    // not followed that far, or stopped being uniform).
    bool decided_beyond = false;
};

// Finds the class of state `x0` and follows its chain, up to `max_chars` steps (the vocabulary's
// longest token) or `chain_cap`. Not usable when fewer than kMinClassBytes ASCII bytes share a
// target (nothing to gain); *ok false on overflow. What it learns is kept in `dfa` (ClassInfo).
constexpr int kMinClassBytes = 16;
constexpr int32_t kMixed = MemoDfa::kMixed;
ClassPlan plan_token_class(MemoDfa& dfa, int32_t x0, int max_chars, int chain_cap, bool* ok);

}  // namespace constrain
}  // namespace sluice
