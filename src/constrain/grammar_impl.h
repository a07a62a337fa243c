// The compiled grammar and the stepping machinery shared by GrammarMatcher and TokenConstraint.
//
// A Grammar is flat: every alternative of every rule is a run of elements in `elems` ending with a
// kEnd element; a rule is the list of its alternatives' start positions. A parse stack is a list of
// positions (bottom..top); the top always points at a kBytes element (a "head"), or the stack is
// empty, meaning a whole sentence has been read.
//
// Stepper keeps stacks as frames in an arena (each frame: a position and its parent frame) under a
// Head (the top position and its parent frame), so forking a stack shares its tail. Stepping a byte advances
// every head whose byte set contains it and expands rule references until every new head is at a kBytes
// element again (a reference that is the last element of its alternative is a tail call: its continuation is
// the parent frame itself, so right recursion does not grow the stack). Termination of the expansion relies
// on build() having refused left recursion.
//
// Lifetime: the arena is owned by the caller and truncated when a trie walk backtracks.
// Threading: none; one Stepper per walk.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "sluice/constrain.h"

namespace sluice {

struct Grammar {
    enum Kind : uint8_t { kBytes, kRule, kEnd };
    struct Elem {
        Kind kind;
        uint32_t arg;  // kBytes: index into byte_sets; kRule: rule id
    };
    std::vector<Elem> elems;
    std::vector<std::array<uint64_t, 4>> byte_sets;
    std::vector<std::vector<uint32_t>> rule_alts;  // rule → start positions of its alternatives
    uint32_t root = 0;

    bool matches(uint32_t pos, uint8_t b) const {
        const auto& s = byte_sets[elems[pos].arg];
        return (s[b >> 6] >> (b & 63)) & 1;
    }
};

namespace constrain {

struct Frame {
    uint32_t pos;
    int32_t parent;  // -1: bottom
};
// The top of a stack: a kBytes position and the frame below it (not itself in the arena, so
// expanding a rule into many alternatives costs one small struct per alternative).
struct Head {
    uint32_t pos;
    int32_t parent;
};

class Stepper {
 public:
    explicit Stepper(const Grammar& g) : g_(g) {}
    static constexpr size_t kDedupeAbove = 32;

    std::vector<Frame> frames;
    std::vector<Head> heads;  // levels of a walk are ranges of this vector

    // With share_frames on (set before the first push), equal frames — the same position over the
    // same parent — are one frame, so equal stacks have equal heads: MemoDfa interns states by
    // their heads, and the same state reached along two paths (an ASCII character and a multi-byte
    // one, two stacks pushed with the same bottom) must be recognised as one. Frames are then
    // dropped with truncate_frames(), which forgets them too.
    bool share_frames = false;

    int32_t push_frame(uint32_t pos, int32_t parent) {
        if (share_frames) {
            const auto [it, fresh] =
                frame_ids_.try_emplace(frame_key(pos, parent), static_cast<int32_t>(frames.size()));
            if (!fresh) return it->second;
        }
        frames.push_back({pos, parent});
        return static_cast<int32_t>(frames.size() - 1);
    }
    void truncate_frames(size_t size) {
        if (share_frames)
            for (size_t i = size; i < frames.size(); ++i)
                frame_ids_.erase(frame_key(frames[i].pos, frames[i].parent));
        frames.resize(size);
    }

    // Pushes a stack given bottom..top positions (top at a kBytes element).
    void push_stack(const std::vector<uint32_t>& positions) {
        int32_t parent = -1;
        for (size_t i = 0; i + 1 < positions.size(); ++i) parent = push_frame(positions[i], parent);
        heads.push_back({positions.back(), parent});
    }

    // Appends to `heads` the heads reached from heads[begin, end) by byte b; sets *accept when a
    // stack empties. The new range is [old heads.size(), heads.size()).
    void step(size_t begin, size_t end, uint8_t b, bool* accept) {
        const size_t out_begin = heads.size();
        for (size_t i = begin; i < end; ++i) {
            const Head h = heads[i];
            if (g_.matches(h.pos, b)) advance(h.pos + 1, h.parent, accept);
        }
        // Duplicates (the same position over the same frame, reached along two paths of an
        // ambiguous grammar) are harmless in small numbers; removing them on every insert would
        // cost a quadratic scan per byte, so they are removed only when the range grows.
        if (heads.size() - out_begin > kDedupeAbove) {
            std::sort(heads.begin() + static_cast<std::ptrdiff_t>(out_begin), heads.end(),
                      [](Head x, Head y) { return x.pos != y.pos ? x.pos < y.pos : x.parent < y.parent; });
            heads.erase(std::unique(heads.begin() + static_cast<std::ptrdiff_t>(out_begin), heads.end(),
                                    [](Head x, Head y) { return x.pos == y.pos && x.parent == y.parent; }),
                        heads.end());
        }
    }

    // Expands position `pos` (with continuation `parent`) into heads.
    void advance(uint32_t pos, int32_t parent, bool* accept) {
        for (;;) {
            const Grammar::Elem e = g_.elems[pos];
            if (e.kind == Grammar::kBytes) {
                heads.push_back({pos, parent});
                return;
            }
            if (e.kind == Grammar::kEnd) {
                if (parent < 0) {
                    *accept = true;
                    return;
                }
                const Frame up = frames[static_cast<size_t>(parent)];
                pos = up.pos;
                parent = up.parent;
                continue;
            }
            // kRule: expand each alternative with the continuation after the reference.
            const int32_t cont =
                g_.elems[pos + 1].kind != Grammar::kEnd ? push_frame(pos + 1, parent) : parent;
            const auto& alts = g_.rule_alts[e.arg];
            for (size_t a = 0; a + 1 < alts.size(); ++a) advance(alts[a], cont, accept);
            pos = alts.back();
            parent = cont;
        }
    }

    // The positions of the stack under `h`, bottom..top.
    std::vector<uint32_t> stack_of(Head h) const {
        std::vector<uint32_t> out = {h.pos};
        for (int32_t f = h.parent; f >= 0; f = frames[static_cast<size_t>(f)].parent)
            out.push_back(frames[static_cast<size_t>(f)].pos);
        return {out.rbegin(), out.rend()};
    }

 private:
    static uint64_t frame_key(uint32_t pos, int32_t parent) {
        return (static_cast<uint64_t>(pos) << 32) | static_cast<uint32_t>(parent);
    }
    const Grammar& g_;
    std::unordered_map<uint64_t, int32_t> frame_ids_;  // share_frames: (pos, parent) → frame
};

}  // namespace constrain
}  // namespace sluice
