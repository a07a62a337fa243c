// SequenceState: one sequence's model state, owned by the backend that runs its forwards and
// authoritative there — host vectors for the CPU, device buffers for CUDA; nothing mirrors it
// elsewhere. The buffers follow the model's StateLayout (model/state_layout.h).
//
// Besides the live state a sequence keeps up to max_snapshots() snapshots of its recurrent buffers
// (DeltaNet conv and recurrent state) at positions its owner asks for, where the forward runs (on
// the device for CUDA). That is what makes it possible to go back: per-position buffers (attention
// KV) are cut back by moving the position, recurrent ones by restoring the latest snapshot at or
// before the wanted position. The session takes snapshots at turn boundaries; a speculative
// decoder would take one before the tokens it may reject.
//
// This class holds the bookkeeping (position, snapshot positions) and the serialisation, written
// once over a few buffer primitives each backend implements. A forward advances the position only
// when it has succeeded as a whole (backends keep the recurrent buffers twice and swap on success),
// so a failed forward leaves the sequence at its last consistent position.
//
// Threading: one caller at a time (the engine's compute lock); not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/state_layout.h"
#include "sluice/status.h"

namespace sluice::runtime {

class SequenceState {
 public:
    SequenceState(const model::StateLayout& layout, int64_t capacity, int max_snapshots);
    virtual ~SequenceState() = default;
    SequenceState(const SequenceState&) = delete;
    SequenceState& operator=(const SequenceState&) = delete;

    const model::StateLayout& layout() const { return layout_; }
    int64_t position() const { return position_; }  // tokens whose state is held
    int64_t capacity() const { return capacity_; }  // most positions the per-position buffers hold
    int max_snapshots() const { return max_snapshots_; }
    // Positions that have a snapshot, oldest snapshot first.
    std::vector<int64_t> snapshot_positions() const;

    // Keeps a snapshot of the recurrent buffers at the current position (nothing to do when the
    // layout has none, or one is there already); past max_snapshots() the oldest is dropped.
    Status snapshot();
    bool has_snapshot_at(int64_t position) const;
    // Forgets the snapshot at `position` (none there: nothing to do).
    void drop_snapshot(int64_t position);
    // Goes back to at most `keep` tokens: to `keep` itself when the layout has no recurrent
    // buffers, else to the latest snapshot at or before it (or to the empty state). Snapshots past
    // the new position are dropped. Returns the new position (<= keep; the position when keep is
    // not behind it).
    Expected<int64_t> truncate(int64_t keep);
    // Back to position 0 with zero recurrent state; drops the snapshots.
    Status reset();

    // Appends the state to `out`: per layer, each buffer (per-position ones for rows [0,
    // position)), then u32 n_snapshots and per snapshot i64 position + each layer's recurrent
    // buffers. The session file's payload (docs/FORMATS.md); the same bytes on every backend.
    Status write(std::string& out) const;
    // Reads what write() wrote for a state at `position` from in[*at...], advancing *at. On any error
    // the sequence is left reset (callers load into a fresh sequence and swap it in on success).
    Status read(std::string_view in, size_t* at, int64_t position);

    // The prefix cache's copies (runtime/prefix_cache.h): the same bytes write() lays out, taken in
    // pieces. append_positions: rows [row0, row0 + rows) (below position()) of every per-position
    // buffer, layer by layer — positions_bytes(rows) bytes. append_running: every buffer that is not
    // per-position (DeltaNet conv and recurrent state, a KV window's ring) of the live state, layer
    // by layer — running_bytes() bytes; what a state at position() holds besides its rows.
    uint64_t positions_bytes(int64_t rows) const { return layout_.per_position_bytes(rows); }
    uint64_t running_bytes() const { return layout_.recurrent_bytes() + layout_.window_bytes(); }
    Status append_positions(int64_t row0, int64_t rows, std::string& out) const;
    Status append_running(std::string& out) const;
    // append_positions() of `blocks` consecutive blocks of `block_rows` rows from row0, one string
    // each, in one read per buffer (a GPU's copies: one per layer and buffer, not per block).
    Status read_position_blocks(int64_t row0, int64_t blocks, int64_t block_rows,
                                std::vector<std::string>& out) const;
    // Makes this the state at `position`: `blocks` are append_positions() copies of consecutive rows
    // from row 0 (`block_rows` rows each; together `position` rows) and `running` an append_running()
    // copy taken at `position` (empty when the layout has no such buffers). Snapshots are dropped. On
    // error the sequence is left reset.
    Status assign_prefix(std::span<const std::string_view> blocks, int64_t block_rows,
                         std::string_view running, int64_t position);

 protected:
    static constexpr int kLive = -1;  // the slot argument naming the live (committed) buffers
    // The backend's primitives. read_rows/write_rows: rows [row0, row0 + rows) of a per-position
    // buffer, or the whole recurrent buffer (row0 0, rows 1) of the live state or of a snapshot slot.
    virtual Status read_rows(int slot, int64_t layer, int buffer, int64_t row0, int64_t rows,
                             void* dst) const = 0;
    virtual Status write_rows(int slot, int64_t layer, int buffer, int64_t row0, int64_t rows,
                              const void* src) = 0;
    // Copies every recurrent buffer from slot `from` to slot `to` (either may be kLive).
    virtual Status copy_recurrent(int from, int to) = 0;
    // Zeroes the live recurrent buffers.
    virtual Status zero_recurrent() = 0;
    // The backend's forward, once it has succeeded: n more positions are held.
    void advance(int64_t n) { position_ += n; }
    // A part of a composite state (runtime/sharded_state.h: a rank's share of an expert-parallel group's
    // sequence), whose owner keeps the bookkeeping: its position follows the owner's before each forward.
    void set_position(int64_t position) { position_ = position; }
    // Backends that keep the recurrent buffers twice and flip on success (CUDA's parity): which copy is
    // committed, so a composite can put it back when another part's forward failed. 0 where there is one.
    virtual int committed_copy() const { return 0; }
    virtual void set_committed_copy(int copy) { (void)copy; }
    friend class ShardedState;

 private:
    // The bytes of every per-position buffer's rows [row0, row0 + rows), or of every running buffer.
    Status append_buffers(bool per_position, int64_t row0, int64_t rows, std::string& out) const;
    struct Snapshot {
        int64_t position;
        int slot;
    };
    int free_slot() const;

    model::StateLayout layout_;
    int64_t capacity_;
    int max_snapshots_;
    int64_t position_ = 0;
    std::vector<Snapshot> snapshots_;  // oldest first
};

}  // namespace sluice::runtime
