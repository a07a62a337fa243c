// PrefixCache: the sequence state that prefills computed, by token prefix, shared by every session of
// an engine (issue 21). A new conversation that starts with the system prompt, tool block or
// document of an earlier one — in any session — restores that prefix and computes only the rest.
//
// What is kept. The prompt is cut into blocks of kBlockTokens tokens from its start. A block is one
// node of a tree keyed by a chain hash (block i's key hashes its tokens with block i−1's key, seeded
// by the state layout, so KV types never mix) and holds:
//   - the per-position rows of the block — attention keys and values in the sequence's KV type, the
//     bytes SequenceState::append_positions() copies (what Session::save writes for those rows);
//   - optionally the running state at the block's end — DeltaNet conv and recurrent state, a KV
//     window's ring (SequenceState::append_running()) — without which a hybrid model cannot resume
//     there. Sessions store it at the ends of their prefill forwards (see Session::generate).
// A prefix of n tokens is restored from the chain of its n / kBlockTokens blocks, the last of which
// carries the running state the layout needs. Entries are copies in and out of host memory
// (copy-in/copy-out, not blocks shared in place with the sessions' KV: the forward keeps reading one
// contiguous cache per sequence); on the GPU a restore is a host → device copy through the backend's
// row primitives, so every backend takes it.
//
// Lookups verify every block's tokens and its parent, so a hash collision can only cost a miss.
// Eviction: the least recently used block that no other block extends and no restore is copying;
// a lookup or a store touches its whole chain, ancestors after descendants, so shared leading blocks
// are the last to go. The budget counts every byte held (state copies, tokens, bookkeeping).
//
// Threading: every method is thread-safe (one mutex, never held while state is copied: a Match pins
// its blocks, so they outlive the copy; a store reads the sequence between two short critical
// sections). Rejected: refcounted copy-on-write blocks read in place by attention (vLLM's paged KV) —
// it needs block tables in every attention kernel on every backend; a later form can get there from
// the same tree.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/model.h"
#include "model/state_layout.h"
#include "sluice/engine.h"
#include "sluice/status.h"

namespace sluice::runtime {

class PrefixCache {
 public:
    // Tokens per block: a multiple of the CPU DeltaNet's chunk (64), so a state at a block boundary
    // reached by block-aligned forwards is bit for bit a cold prefill's (docs/ARCHITECTURE.md).
    static constexpr int64_t kBlockTokens = 64;

    explicit PrefixCache(uint64_t budget_bytes);
    ~PrefixCache();
    PrefixCache(const PrefixCache&) = delete;
    PrefixCache& operator=(const PrefixCache&) = delete;

    // Identifies a state layout: entries of one layout are never restored into another.
    static uint64_t layout_key(const model::StateLayout& layout);

    struct Node;
    // A restorable prefix: its blocks are pinned (never evicted) until the Match is destroyed.
    class Match {
     public:
        Match() = default;
        Match(Match&& o) noexcept;
        Match& operator=(Match&& o) noexcept;
        ~Match();
        int64_t tokens() const;                                 // positions it restores
        std::vector<std::string_view> position_blocks() const;  // each block's rows, in order
        std::string_view running() const;                       // the running state at tokens()

     private:
        friend class PrefixCache;
        PrefixCache* cache_ = nullptr;
        std::vector<Node*> chain_;
    };

    struct Query {
        std::span<const int32_t> prompt;
        uint64_t layout = 0;
        bool needs_running = false;      // the layout has buffers besides its rows (layout_key's)
        int64_t held_tokens = 0;         // what the session holds already: only a longer prefix is restored
        int64_t chunk_tokens = 256;      // the prefill's forward size (the restore point's rule below)
        std::span<const int64_t> stops;  // where the prefill stops besides the end (sorted; checkpoints)
    };
    // The longest prefix of `prompt` this cache can restore: n a multiple of kBlockTokens with
    // held_tokens < n < prompt.size() (the last token is always computed, for its logits), every block
    // present, the running state at n when the layout needs it, and n a multiple of chunk_tokens or
    // more than model::kRecurrentStepTokens before the next stop or the end (so the forward after it
    // takes the kernels a cold prefill gives those tokens). `*matched_tokens` gets the longest prefix whose
    // blocks are all here, restorable or not (where this prompt leaves the tree). Counts a lookup and its hit
    // or miss.
    std::optional<Match> lookup(const Query& query, int64_t* matched_tokens);

    // What a store reads from the sequence, outside the cache's lock.
    struct StateReader {
        uint64_t block_bytes = 0;    // one block's rows (SequenceState::positions_bytes(kBlockTokens))
        uint64_t running_bytes = 0;  // the running state; 0: the layout has none
        // Blocks [first, first + count) of the sequence, one string each (count >= 1).
        std::function<Status(int64_t first, int64_t count, std::vector<std::string>& out)> read_blocks;
        std::function<Status(std::string&)> read_running;  // the running state now (running_bytes > 0)
    };
    // Stores the state of a sequence holding `tokens` (a multiple of kBlockTokens of them): the rows of
    // every block not held yet and, when the layout has one, the running state at tokens.size(). Only
    // what the budget can hold is read: a chain is kept only if it fits the budget with everything
    // else evicted, so a prompt longer than the cache stores its leading blocks (a layout without a
    // running state) or, for a layout that needs one at the restore point, nothing beyond what is held
    // (its deeper blocks would be evicted by the store itself; counted in skipped_blocks).
    Status store(std::span<const int32_t> tokens, uint64_t layout, const StateReader& reader);

    PrefixCacheStats stats() const;
    void clear();

 private:
    void unpin(const std::vector<Node*>& chain);
    void touch(const std::vector<Node*>& chain);  // most recent: the chain's first block
    void evict_locked();
    void remove_locked(Node* node);
    static uint64_t chain_key(uint64_t parent_key, std::span<const int32_t> block);
    uint64_t node_bytes(const Node& n) const;

    const uint64_t budget_bytes_;
    mutable std::mutex mu_;
    std::unordered_map<uint64_t, std::unique_ptr<Node>> nodes_;
    std::list<Node*> lru_;  // front: least recently used
    uint64_t bytes_ = 0;
    PrefixCacheStats stats_;
};

}  // namespace sluice::runtime
