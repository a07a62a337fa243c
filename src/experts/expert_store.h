// ExpertStore: routed experts streamed from disk into a bounded cache of fixed-size slots, with
// O_DIRECT reads issued in parallel and next-layer prefetch. It is the model's ExpertSource for
// packed models and GGUF files.
//
// Data path: an expert is one or more byte ranges ("pieces") of files — a packed model's whole record
// in experts/layer_NNN.bin (4 KiB-aligned), or a GGUF's three slices of blk.N.ffn_{gate,up,down}_exps
// (aligned only to the file's 32 bytes) — each read with pread(O_DIRECT) into its place in a cache slot
// (4 KiB-aligned memory): a piece that does not start on 4 KiB is read from the 4 KiB boundary below it
// to the one above its end (a covering read), its bytes then at that distance into its place. Kernel
// WeightViews point into the slot.
// All misses of a layer are queued at once; `io_threads` reader threads keep that many reads in
// flight (the queue depth). Demand reads (a layer waiting) go before speculative prefetch reads,
// so a wrong prediction never delays the experts the forward actually needs; when a layer comes, its
// queued prefetch reads of experts it does not want are dropped unread, and a prefetch that finds every
// slot pinned waits (pending) and starts as the layer holding them releases slots. acquire_each hands
// each expert over as its read lands, so the forward computes while the rest are read, and the forward
// may release experts one at a time. A short read, an OS error or
// an xxh3 mismatch fails the acquire with a message naming the file, layer and expert — never silent
// garbage. Checksums: by default each record's first read from disk (a file corrupted on disk is caught
// the first time it matters; the hash, ~9 GB/s of memory bandwidth, is paid once per record, not per
// read — every read cost ~7% of streamed decode on 2 vCPUs); verify_reads checks every read.
//
// Slots: pinned while acquired or while a read into them is in flight; eviction picks among
// unpinned slots by the policy (expert_cache.h). Prefetched experts are read without being
// pinned; statistics tell how many were used before eviction and how many were wasted.
//
// Threading: acquire/release/prefetch are called from the forward thread; reads complete on the
// IO threads; one mutex guards the slot table. Memory: n_slots × slot_bytes, one anonymous mapping
// allocated once; memory pressure retires slots and hands their pages back (set_cache_bytes). A
// device backend that page-locks the slots for DMA follows that through a slot observer
// (set_slot_observer): a slot is announced once its first read fills it and retired before its
// pages go.
// Layout: with cpu_row_tiles, a record's Q4_0, Q6_K, Q8_0 and MXFP4 projections whose rows fill whole tiles
// are rewritten in place as row tiles (kernels/ggml_tiles.h, the CPU's decode layout) by the reader thread
// that filled the slot, after the checksum and before the slot is ready; their views then have the tiled
// type. The bytes a slot holds stay the record's size (a bijection inside each tile): no second copy.
// Rejected alternatives: mmap of the expert files (page faults serialise reads and the page cache
// ignores the budget; O_DIRECT was ~3.5× faster in a llama.cpp test, lessons.md); io_uring (a
// candidate for later: the thread pool reaches the disk's queue depth already and works on every
// kernel and filesystem).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "experts/expert_cache.h"
#include "experts/prefetch_gate.h"
#include "format/gguf.h"
#include "format/pack.h"
#include "model/expert_source.h"
#include "sluice/status.h"

namespace sluice::experts {

struct ExpertStoreOptions {
    uint64_t cache_bytes = 0;        // slot memory; at least one slot is always allocated
    int io_threads = 16;             // reads in flight (queue depth)
    bool direct_io = true;           // O_DIRECT, falling back to buffered reads where unsupported
    bool verify_reads = false;       // xxh3 of every record read
    bool verify_first_reads = true;  // xxh3 of each record's first read (once per store)
    bool prefetch = true;            // accept next-layer prefetch hints
    CachePolicy policy = CachePolicy::kLfu;
    // The least the cache keeps when memory pressure shrinks it (set_cache_bytes); at least one slot.
    uint64_t floor_bytes = 0;
    // Q4_0, Q6_K, Q8_0 and MXFP4 projections as row tiles (kernels/ggml_tiles.h), written as each read lands:
    // for a forward on the CPU with int8 activations. Never for a GPU tier (it copies slots as the file holds
    // them).
    bool cpu_row_tiles = false;
};

struct ExpertStoreStats {
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t bytes_read = 0;
    uint64_t reads = 0;
    double io_busy_s = 0;            // wall time with at least one read in flight
    double stall_s = 0;              // time the forward waited for reads
    uint64_t prefetch_issued = 0;    // prefetch reads queued (less those canceled)
    uint64_t prefetch_canceled = 0;  // queued, then dropped unread: their layer came and wanted others
    uint64_t prefetch_used = 0;      // prefetched, then acquired
    uint64_t prefetch_wasted = 0;    // prefetched, evicted unused
    uint64_t prefetch_skipped = 0;   // decode hints dropped while steps ran faster without prefetch
    uint64_t evictions = 0;
    uint64_t bytes_returned = 0;  // slot memory given back to the OS (set_cache_bytes shrinking)
    double hit_rate() const {
        return hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0;
    }
    double read_gb_s() const { return io_busy_s > 0 ? static_cast<double>(bytes_read) / io_busy_s / 1e9 : 0; }
};

// The cache's size now: slots in use or usable, the target set_cache_bytes asked for (the active
// count reaches it as pinned slots are released), and the bounds.
struct ExpertCacheCapacity {
    int64_t active_slots = 0, target_slots = 0, floor_slots = 0, max_slots = 0;
    uint64_t slot_bytes = 0;
};

// Where one MoE layer's routed experts are on disk and how a slot holding one is viewed.
struct ExpertLayerSource {
    int64_t layer = 0;
    int64_t n_experts = 0;
    // A byte range of every expert: expert e's at offset + e · stride of `file`.
    struct Piece {
        std::string file;  // path
        uint64_t offset = 0, stride = 0;
        uint64_t bytes = 0;          // what is read (a packed record: its whole stride)
        uint64_t checked_bytes = 0;  // what the checksum covers, from the piece's start
        std::vector<uint64_t> xxh3;  // [n_experts] XXH3-64; empty: not checked
    };
    std::vector<Piece> pieces;
    // gate, up, down: a view of `type` whose data (and scales, biases: MLX affine) are at these offsets
    // into piece `piece`'s bytes.
    struct View {
        kernels::WeightType type = kernels::WeightType::kF32;
        int64_t rows = 0, cols = 0;
        int32_t group_size = 0;
        kernels::ScaleType scale_type = kernels::ScaleType::kBF16;
        int piece = 0;
        uint64_t data = 0, scales = 0, biases = 0;
    };
    View views[3];
    std::string name;  // in messages: "'experts/layer_003.bin'", "'m.gguf' blk.3"
};

// A packed model's expert files (layout.json) as sources, each projection checked against the
// weight-format registry (errors name the layer and projection).
Expected<std::vector<ExpertLayerSource>> expert_sources_from_pack(const std::string& dir,
                                                                  const format::PackLayout& layout);
// A GGUF's routed experts: per MoE layer N, its blk.N.ffn_{gate,up,down}_exps slices, with the
// manifest's per-expert checksums when `manifest` is given (format/gguf_manifest.h). Errors name the
// tensor (a missing one, a type without kernels, a shape that is not [E, rows, cols]).
Expected<std::vector<ExpertLayerSource>> expert_sources_from_gguf(
    const format::GgufCheckpoint& gguf, int64_t n_layers,
    const std::map<std::string, std::vector<uint64_t>>* manifest_experts);

class ExpertStore final : public model::ExpertSource {
 public:
    static Expected<std::unique_ptr<ExpertStore>> open(const std::string& dir,
                                                       const format::PackLayout& layout,
                                                       const ExpertStoreOptions& options);
    static Expected<std::unique_ptr<ExpertStore>> open(std::vector<ExpertLayerSource> sources,
                                                       const ExpertStoreOptions& options);
    ~ExpertStore() override;

    Status acquire(int64_t layer, std::span<const int32_t> ids, model::ExpertWeights* out) override;
    Status acquire_each(int64_t layer, std::span<const int32_t> ids, model::ExpertWeights* out,
                        const std::function<void(size_t i)>& use) override;
    void release(int64_t layer, std::span<const int32_t> ids) override;
    using model::ExpertSource::prefetch;
    void prefetch(int64_t layer, std::span<const int32_t> ids, bool chunk) override;
    // When the cache has a slot for every expert of the model: queues a read of every expert not
    // held yet, behind demand reads (as prefetch reads are, but neither counted as prefetches nor
    // ever evicted, since nothing needs their slots), so a model that fits the budget becomes
    // resident without waiting for each expert's first use. Returns the bytes queued (0 when the
    // experts do not all fit).
    uint64_t preload();
    // Whether the cache has a slot for every expert record of the model (then nothing is read twice).
    bool holds_every_expert() const;
    // Blocks until no read is queued or in flight (a preload finished, say).
    void wait_idle();
    bool wants_prefetch() const override { return options_.prefetch; }
    int64_t max_pinned() const override { return target_slots_.load(std::memory_order_relaxed); }
    bool try_acquire(int64_t layer, int32_t id, model::ExpertWeights* out) override;
    // The slot memory: n_slots() slots of slot_bytes(), slot i at i · slot_bytes().
    std::span<uint8_t> host_memory() { return {memory_, static_cast<size_t>(n_slots_) * slot_bytes_}; }
    // The observer (model::SlotMemoryObserver) is told of a slot's memory when the first read into it
    // has filled it, before the slot is ready (from the reader thread, without the lock: the read's
    // pin keeps the slot from being retired meanwhile), and of its retirement (under the lock, before
    // madvise hands its pages back). Setting one waits for announcements to the previous one to
    // finish, retires the previous one's slots and announces the slots already holding data (a
    // preload under way). The observer must be removed (null) before it is destroyed; a store
    // destroyed first retires its slots with it.
    bool set_slot_observer(model::SlotMemoryObserver* observer) override;

    // Memory pressure: the cache's slot memory becomes `bytes` (clamped to [floor, the size it was
    // opened with], whole slots). Shrinking evicts the slots the policy values least and returns
    // their pages to the OS (madvise MADV_DONTNEED) at once, and slots pinned by a step in flight as
    // soon as it releases them; growing makes retired slots usable again (their pages come back as
    // reads fill them). Returns the target in bytes. Thread-safe; never fails a step in flight.
    uint64_t set_cache_bytes(uint64_t bytes);
    ExpertCacheCapacity capacity() const;

    ExpertStoreStats stats() const;
    void reset_stats();
    int64_t n_slots() const { return n_slots_; }
    uint64_t slot_bytes() const { return slot_bytes_; }
    bool direct_io() const { return direct_io_; }

    // Bytes of one expert record of the largest layer (the unit a slot holds).
    static uint64_t slot_bytes_for(const format::PackLayout& layout);
    // The same for any sources: each piece in its place, 4 KiB-aligned, with room for a covering read.
    static uint64_t slot_bytes_for(const std::vector<ExpertLayerSource>& sources);

 private:
    enum class SlotState : uint8_t { kEmpty, kLoading, kReady, kFailed };
    // What the slot observer knows of a slot's memory: nothing yet (announced by its next read),
    // announced and wanting on_retire, or announced and not interested.
    enum class SlotMemory : uint8_t { kUnannounced, kObserved, kIgnored };
    struct Slot {
        SlotState state = SlotState::kEmpty;
        SlotMemory memory = SlotMemory::kUnannounced;
        bool prefetched_unused = false;
        ExpertKey key;
        std::string error;
    };
    struct LayerFile {
        const ExpertLayerSource* src = nullptr;  // null: no routed experts in this layer
        std::vector<int> fds;                    // per piece (shared between pieces of one file)
        std::vector<uint64_t> place;             // per piece: its offset in a slot
        uint64_t read_bytes = 0;                 // what one expert's reads bring in
        // gate, up, down: the type their views have (src->views' type, or its row tiles written after
        // each read: cpu_row_tiles).
        kernels::WeightType bound[3] = {};
        // [n_experts]: records whose first read matched their checksum (verify_first_reads);
        // set by the IO threads, one record each at a time.
        std::unique_ptr<std::atomic<bool>[]> verified;
    };
    struct ReadJob {
        int64_t slot;
        ExpertKey key;
    };

    ExpertStore() = default;
    // Pins a slot for each of `ids` (hits as they are, misses claimed and queued as demand reads, waiting
    // for a slot while every one is pinned) into slots[i]; fails only for an id out of range.
    Status pin_locked(int64_t layer, std::span<const int32_t> ids, int64_t* slots,
                      std::unique_lock<std::mutex>& lock);
    // Unpins `slots` and forgets those whose read failed (read again, and the fault reported, next time).
    void unpin_failed_locked(std::span<const int64_t> slots);
    // Starts what prefetch() could not for want of an unpinned slot, as slots are released.
    void start_pending_prefetch_locked();
    // Claims a slot for `key` and queues its read; returns the slot or -1 when all are pinned.
    int64_t start_read_locked(ExpertKey key, bool prefetch);
    // Retires unpinned slots while more are active than the target (and than `need`, what an
    // acquire in progress must be able to hold), restores retired ones while fewer are.
    void apply_capacity_locked(int64_t need = 0);
    void io_loop();
    Status read_record(const ReadJob& job);
    model::ExpertWeights views_for(int64_t slot, ExpertKey key) const;
    // Where piece `p` of expert `e` starts in its slot place: past the covering read's lead.
    uint64_t lead(const LayerFile& lf, size_t p, int32_t e) const;
    bool has_layer(int64_t layer) const {
        return layer >= 0 && layer < static_cast<int64_t>(files_.size()) &&
               files_[static_cast<size_t>(layer)].src != nullptr;
    }
    uint8_t* slot_memory(int64_t slot) const { return memory_ + static_cast<uint64_t>(slot) * slot_bytes_; }
    // Tells the observer every observed slot is retired, and forgets what it was told.
    void retire_observed_locked();

    std::vector<ExpertLayerSource> sources_;
    ExpertStoreOptions options_;
    std::vector<LayerFile> files_;         // by layer (src null for non-MoE layers)
    std::map<std::string, int> open_fds_;  // every file the pieces read, once
    bool direct_io_ = true;
    int64_t n_slots_ = 0;
    uint64_t slot_bytes_ = 0;
    uint8_t* memory_ = nullptr;  // n_slots_ × slot_bytes_, an anonymous mapping (pages returnable)
    int64_t floor_slots_ = 1;
    std::atomic<int64_t> target_slots_{0};

    mutable std::mutex mutex_;
    std::condition_variable slot_cv_;
    std::condition_variable job_cv_;
    std::deque<ReadJob> jobs_;                // demand reads: served first
    std::deque<ReadJob> prefetch_jobs_;       // speculative reads: only when no demand read waits
    std::deque<ExpertKey> pending_prefetch_;  // prefetches waiting for a slot to be released
    std::vector<Slot> slots_;
    std::unique_ptr<SlotTable> table_;
    std::vector<std::thread> io_threads_;
    size_t tile_scratch_bytes_ = 0;  // what one reader thread needs to write row tiles (cpu_row_tiles)
    bool stop_ = false;
    int in_flight_ = 0;
    model::SlotMemoryObserver* observer_ = nullptr;  // set_slot_observer
    int announcing_ = 0;                             // on_restore calls running on reader threads
    std::chrono::steady_clock::time_point busy_since_;
    ExpertStoreStats stats_;
    // Decode prefetch on or off by measured step time (prefetch_gate.h): a step starts with the hint for the
    // lowest layer hinted; a prefill chunk's hint in between makes its step incomparable.
    PrefetchGate gate_;
    int64_t step_layer_ = INT64_MAX;
    std::chrono::steady_clock::time_point step_start_;
    bool step_started_ = false, chunk_since_step_ = false;
};

}  // namespace sluice::experts
