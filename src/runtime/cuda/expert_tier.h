// ExpertTier: the GPU's routed-expert cache when the experts do not all fit in GPU memory. Three
// tiers: VRAM slots (this class) → the host's expert source (for a packed model the streaming
// cache of expert_store.h, whose slots in use PinnedHostSlots keeps page-locked so copies are DMA;
// for a mapped checkpoint the mapping) → SSD (the store's reader threads).
//
// A VRAM slot holds one expert (gate, up, down with their scales and biases). Each MoE layer has
// a device table [E][3] of DevWeight that the expert kernels index by routed id; loading an expert
// into a slot rewrites its table entries. Entries of evicted experts go stale and are never read:
// every routed id passes through use() before a kernel reads its entry.
//
// Protocol (one forward at a time): the backend learns a layer's routed ids (a device→host copy
// after the router), calls use(layer, ids, compute): hits are pinned; misses take slots (evicting
// by the policy of expert_cache.h), their host copies are acquired from the source (waiting for
// SSD reads if needed) and copied on the tier's own stream; `compute` is made to wait for those
// copies. The slots stay pinned until the next use(), which the caller makes only after
// synchronising with the work that read them. prefetch(layer + 1, predicted ids) copies predicted
// experts the host already holds into free slots while the current layer computes, and asks the
// source to read the others from SSD. Host views are released once their copy has completed.
//
// Threading: called from the forward's thread only. Rejected: reading the host copy directly from
// kernels (zero-copy mapped memory): each decode token would pull every routed expert over PCIe
// again, where the VRAM cache keeps the popular ones; unified memory: the driver pages on fault,
// serialising what the copy stream pipelines.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "experts/expert_cache.h"
#include "kernels/cuda/ops.h"
#include "model/expert_source.h"
#include "sluice/engine.h"
#include "sluice/status.h"

namespace sluice::cuda {

// Keeps the host expert cache's slots in use page-locked, slot by slot, so memory pressure can still
// shrink it (the store's slot observer, model::SlotMemoryObserver): a slot is registered with
// cudaHostRegister once its first read has filled it (on the store's reader thread, before the slot
// is handed out) and unregistered when the store retires it, before madvise hands its pages back —
// the driver holds the pages of registered memory, so they would not be freed, and the device would
// keep a mapping of memory the process gave away. A slot that cannot be registered still works:
// copies from pageable memory are staged by the driver, only slower (logged once).
//
// No copy from a slot is in flight when it is unregistered: the store retires only unpinned slots,
// and ExpertTier holds its acquire() / try_acquire() pin on a slot until the copy batch that reads
// it has completed (ExpertTier::retire(): its end event).
//
// Per slot, not per range: cudaHostUnregister takes back a whole registration, so slots registered
// as one range could only be retired together, while the store retires the slots its policy values
// least, wherever they sit (retiring whole groups would evict experts it values more, or hand back
// less than asked). Measured on an H200 (driver 580, 2048 slots of 1.77 MB): registering fresh
// pages costs 546 µs a slot one by one, and 1.8 s for the 3.6 GB as one range (one by one was no
// slower); pages a read already faulted in, 127 µs a slot (76 µs a slot's worth as one range);
// registrations serialise in the driver (16 threads took no less time than one); copies reach
// 50 GB/s from registered slots against 15 from pageable ones. So a slot is registered after its
// read, at its first use, and load pays nothing up front (one registration of the whole cache
// locked every page at load, used or not: 0.5 s per GB). Unregistering costs 61–75 µs a slot, under
// the store's lock, and waits for the device to be idle (it returned only after a running kernel
// finished): once per retired slot, only when memory pressure shrinks the cache.
// Thread-safe: reader threads register, the thread shrinking the store unregisters.
class PinnedHostSlots final : public model::SlotMemoryObserver {
 public:
    explicit PinnedHostSlots(int device) : device_(device) {}
    bool on_restore(uint8_t* data, uint64_t bytes) override;
    void on_retire(uint8_t* data, uint64_t bytes) override;

 private:
    int device_;                       // the registrations belong to its context, whichever thread makes them
    std::atomic<bool> warned_{false};  // a failed registration was logged
};

class ExpertTier {
 public:
    struct Options {
        int64_t n_slots = 0;
        uint64_t slot_bytes = 0;  // one expert: see slot_bytes_for()
        int64_t n_experts = 0;    // per layer
        bool prefetch = true;
        CachePolicy policy = CachePolicy::kLfu;
    };
    // tables[l]: the device table [E][3] of layer l (null for layers without routed experts).
    static Expected<std::unique_ptr<ExpertTier>> create(model::ExpertSource* source,
                                                        std::vector<DevWeight*> tables,
                                                        const Options& options);
    ~ExpertTier();
    ExpertTier(const ExpertTier&) = delete;
    ExpertTier& operator=(const ExpertTier&) = delete;

    // Bytes a slot needs for experts shaped like `e`: its parts laid out at 256-byte alignment, or
    // its host span when the parts are contiguous (a packed record), whichever is larger.
    static uint64_t slot_bytes_for(const model::ExpertWeights& e);

    // Makes experts `ids` (distinct) of `layer` resident, their table entries current and `compute`
    // ordered after their copies. Ends the previous use(): its slots become evictable, so the work
    // that read them must have finished.
    Status use(int64_t layer, std::span<const int32_t> ids, cudaStream_t compute);
    // A hint: experts of `layer` likely needed next (never blocks on the host tier).
    void prefetch(int64_t layer, std::span<const int32_t> ids);
    // Ends the last use() and prefetches, and waits for copies in flight (end of a forward).
    Status finish();

    // Counters since creation or reset_stats(); copy_s counts batches known complete.
    GpuExpertCacheStats stats() const;
    void reset_stats();
    int64_t n_slots() const { return options_.n_slots; }
    uint64_t slot_bytes() const { return options_.slot_bytes; }

 private:
    struct SlotInfo {
        uint64_t ready_seq = 0;  // the copy batch that filled it
        bool prefetched_unused = false;
    };
    struct Batch {
        cudaEvent_t start = nullptr, end = nullptr;
        uint64_t seq = 0;
        int64_t layer = -1;
        std::vector<int32_t> ids;  // host views held until the copy completes
    };
    static constexpr size_t kRing = 64;

    ExpertTier() = default;
    // Claims and pins a slot for key; -1 when every slot is pinned.
    int64_t claim(experts::ExpertKey key);
    // Enqueues the copies of experts `ids` of `layer` (host views `views`) into `slots` as one batch.
    Status copy_batch(int64_t layer, std::span<const int32_t> ids, const model::ExpertWeights* views,
                      std::span<const int64_t> slots);
    void copy_expert(const model::ExpertWeights& e, char* slot, DevWeight* out);
    // Releases the host views of completed batches; with `wait`, of all batches.
    Status retire(bool wait);
    void unpin_current();

    model::ExpertSource* source_ = nullptr;
    Options options_;
    std::vector<DevWeight*> tables_;    // device, per layer
    DevWeight* host_tables_ = nullptr;  // pinned [layers][E][3] mirror
    char* slots_ = nullptr;             // device [n_slots][slot_bytes]
    cudaStream_t stream_ = nullptr;
    std::unique_ptr<experts::SlotTable> table_;
    std::vector<SlotInfo> info_;
    Batch ring_[kRing];
    uint64_t next_seq_ = 1, completed_seq_ = 0;
    size_t host_held_ = 0;                          // host views held by copies in flight
    std::vector<int64_t> current_;                  // slots pinned by the last use()
    std::vector<std::vector<int64_t>> prefetched_;  // per layer: slots pinned by prefetch()
    GpuExpertCacheStats stats_;  // the counters (tiered, slots and slot_bytes are set by stats())
};

}  // namespace sluice::cuda
