// ExpertSource: where the MoE block gets routed experts' weights from. The model asks for the
// experts a batch routes to, computes with them, and releases them; the source decides whether
// they are resident (a mapped checkpoint) or streamed from disk into a bounded cache
// (src/experts/expert_store.h), and may start reading experts it is told will be needed soon.
//
// Contract: views returned by acquire() stay valid and unchanged until the matching release().
// At most max_pinned() experts may be held at once; the MoE processes larger unions in rounds.
// Threading: called from the forward's thread only; implementations may read on their own threads.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "model/weights.h"
#include "sluice/status.h"

namespace sluice::model {

// Told which slots of a streaming cache's memory are in use, so a device backend can keep exactly
// those page-locked for DMA (runtime/cuda/expert_tier.h, PinnedHostSlots) while memory pressure
// hands the others back to the OS. A slot is reported restored when the first read into it since
// the observer was set or the slot was last retired has filled it, before any view of it is handed
// out (slots already holding data when the observer is set are reported then), and retired when the
// cache takes it out of use.
// Threading: on_restore runs on the source's reader threads, several at once, and on the thread
// that sets the observer; on_retire on whichever thread shrinks the cache or releases its last pin.
// Neither may call back into the source (it may hold its lock).
class SlotMemoryObserver {
 public:
    virtual ~SlotMemoryObserver() = default;
    // [data, data + bytes) comes into use. Returns whether it wants on_retire for it (false: it
    // did nothing with it).
    virtual bool on_restore(uint8_t* data, uint64_t bytes) = 0;
    // [data, data + bytes), a slot on_restore returned true for, leaves use: no view into it is
    // held and no read into it is in flight, and (under memory pressure) its pages go back to the
    // OS once this returns. Also for every such slot when the observer is removed.
    virtual void on_retire(uint8_t* data, uint64_t bytes) = 0;
};

class ExpertSource {
 public:
    virtual ~ExpertSource() = default;
    // Fills out[i] with the weights of expert ids[i] of `layer`, waiting for reads if needed.
    virtual Status acquire(int64_t layer, std::span<const int32_t> ids, ExpertWeights* out) = 0;
    // As acquire(), but hands each expert to `use(i)` (out[i] filled) as soon as it is readable, in
    // the order its reads land, so a batch computes with the experts it has while the others are still
    // read. Each expert handed to `use` is the caller's until it calls release() for it (it may, one
    // expert at a time, from inside `use`: its slot can then take the next layer's prefetch). On
    // failure, the experts not yet handed to `use` are not held. The default acquires them all, then
    // hands them in order.
    virtual Status acquire_each(int64_t layer, std::span<const int32_t> ids, ExpertWeights* out,
                                const std::function<void(size_t i)>& use) {
        Status st = acquire(layer, ids, out);
        if (!st.is_ok()) return st;
        for (size_t i = 0; i < ids.size(); ++i) use(i);
        return Status::ok();
    }
    // Ends the use of experts acquired for `layer` by the last acquire() (all of them, or some).
    virtual void release(int64_t layer, std::span<const int32_t> ids) = 0;
    // A hint: these experts of `layer` will be acquired soon.
    // `chunk`: the hint of a multi-token step (a prefill chunk: most of the layer's experts), not a
    // single-token step's k.
    virtual void prefetch(int64_t /*layer*/, std::span<const int32_t> /*ids*/, bool /*chunk*/) {}
    void prefetch(int64_t layer, std::span<const int32_t> ids) { prefetch(layer, ids, false); }
    virtual bool wants_prefetch() const { return false; }
    // Whether acquire() can fail (a read from disk can; a lookup in a mapped checkpoint cannot). A
    // forward over a source that cannot fail needs no protection against failing part-way, so the
    // CPU runs its DeltaNet state in place there (model.h, ModelState).
    virtual bool can_fail() const { return true; }
    virtual int64_t max_pinned() const = 0;
    // Acquires expert `id` of `layer` only if it is already in memory (never waits for a read);
    // false otherwise. A true answer is ended by release() like acquire().
    virtual bool try_acquire(int64_t layer, int32_t id, ExpertWeights* out) {
        return acquire(layer, std::span<const int32_t>(&id, 1), out).is_ok();
    }
    // Reports the slots of the memory acquired views point into, when the source owns it (a
    // streaming cache), to `observer` from now on (SlotMemoryObserver); null removes the one set, its
    // slots reported retired first. Returns false when there is no such memory (a mapped checkpoint):
    // nothing is reported then.
    virtual bool set_slot_observer(SlotMemoryObserver* /*observer*/) { return false; }
};

// Experts that are all in memory (mapped checkpoint): acquire is a lookup.
class ResidentExperts final : public ExpertSource {
 public:
    explicit ResidentExperts(const ModelWeights& weights) : weights_(weights) {}
    Status acquire(int64_t layer, std::span<const int32_t> ids, ExpertWeights* out) override {
        const auto& experts = weights_.layers[static_cast<size_t>(layer)].moe_w.experts;
        for (size_t i = 0; i < ids.size(); ++i) out[i] = experts[static_cast<size_t>(ids[i])];
        return Status::ok();
    }
    void release(int64_t, std::span<const int32_t>) override {}
    bool can_fail() const override { return false; }
    int64_t max_pinned() const override { return INT64_MAX; }

 private:
    const ModelWeights& weights_;
};

}  // namespace sluice::model
