#include "runtime/cuda/expert_tier.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/log.h"

namespace sluice::cuda {
namespace {

constexpr uint64_t kAlign = 256;
// Device pointers the kernels receive must be at least this aligned (vector loads); the weight
// arena gives 256. A record whose parts all sit at this alignment is copied whole.
constexpr uintptr_t kPartAlign = 64;

uint64_t align_up(uint64_t v) {
    return (v + kAlign - 1) / kAlign * kAlign;
}

Status cuda_status(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::ok();
    return error(ErrorCode::kInternal, fmt::format("[cuda] {}: {}", what, cudaGetErrorString(e)));
}

// The (pointer, bytes) parts of one expert: data, scales and biases of gate, up and down.
struct Part {
    const void* host = nullptr;
    uint64_t bytes = 0;
};

void parts_of(const model::ExpertWeights& e, Part out[9]) {
    const kernels::WeightView* w[3] = {&e.gate, &e.up, &e.down};
    for (int p = 0; p < 3; ++p) {
        const kernels::WeightView& v = *w[p];
        out[p * 3] = {v.data, static_cast<uint64_t>(v.rows) * v.row_bytes()};
        uint64_t sb = 0;
        if (v.quantized())
            sb = static_cast<uint64_t>(v.rows) * static_cast<uint64_t>(v.cols / v.group_size) *
                 (v.scale_type == kernels::ScaleType::kF32 ? 4 : 2);
        out[p * 3 + 1] = {v.scales, sb};
        out[p * 3 + 2] = {v.biases, sb};
    }
}

// [lo, hi) of the parts, lo rounded down to kAlign so device offsets keep the host alignment.
std::pair<uintptr_t, uintptr_t> span_of(const Part parts[9]) {
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < 9; ++i) {
        if (parts[i].bytes == 0) continue;
        const auto a = reinterpret_cast<uintptr_t>(parts[i].host);
        lo = std::min(lo, a);
        hi = std::max(hi, a + parts[i].bytes);
    }
    if (hi == 0) return {0, 0};
    return {lo / kAlign * kAlign, hi};
}

}  // namespace

bool PinnedHostSlots::on_restore(uint8_t* data, uint64_t bytes) {
    cudaError_t e = cudaSetDevice(device_);  // a reader thread's device is not the backend's by default
    // Portable: page-locked for every device's context, as the ranks of an expert-parallel group copy from
    // the one host cache they share.
    if (e == cudaSuccess) e = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
    if (e == cudaSuccess) return true;
    cudaGetLastError();  // this thread's error state, cleared: the slot works unlocked
    if (!warned_.exchange(true)) {
        log::warn(
            "[cuda] cannot page-lock host expert cache slots ({}); copies from them to the GPU are staged",
            cudaGetErrorString(e));
    }
    return false;
}

void PinnedHostSlots::on_retire(uint8_t* data, uint64_t /*bytes*/) {
    cudaError_t e = cudaSetDevice(device_);
    if (e == cudaSuccess) e = cudaHostUnregister(data);
    if (e != cudaSuccess) cudaGetLastError();
}

uint64_t ExpertTier::slot_bytes_for(const model::ExpertWeights& e) {
    Part parts[9];
    parts_of(e, parts);
    uint64_t laid_out = 0;
    for (const Part& p : parts) laid_out += align_up(p.bytes);
    const auto [lo, hi] = span_of(parts);
    const uint64_t span = hi - lo;
    // A contiguous record (packed model) is copied whole; scattered parts (a mapped checkpoint)
    // are laid out one by one.
    return span <= 2 * laid_out ? std::max(laid_out, align_up(span)) : laid_out;
}

Expected<std::unique_ptr<ExpertTier>> ExpertTier::create(model::ExpertSource* source,
                                                         std::vector<DevWeight*> tables,
                                                         const Options& options) {
    if (options.n_slots <= 0 || options.slot_bytes == 0 || options.n_experts <= 0)
        return error(ErrorCode::kInvalidArgument, "[cuda] expert tier needs slots and experts");
    auto policy = experts::make_policy(options.policy);
    auto t = std::unique_ptr<ExpertTier>(new ExpertTier());
    t->source_ = source;
    t->options_ = options;
    t->tables_ = std::move(tables);
    t->table_ = std::make_unique<experts::SlotTable>(options.n_slots, std::move(policy));
    t->info_.resize(static_cast<size_t>(options.n_slots));
    t->prefetched_.resize(t->tables_.size());
    const uint64_t slot_mem = static_cast<uint64_t>(options.n_slots) * options.slot_bytes;
    SLUICE_RETURN_IF_ERROR(
        cuda_status(cudaMalloc(&t->slots_, slot_mem),
                    fmt::format("allocating {} expert slots ({} bytes)", options.n_slots, slot_mem).c_str()));
    const size_t table_entries = t->tables_.size() * static_cast<size_t>(options.n_experts) * 3;
    SLUICE_RETURN_IF_ERROR(cuda_status(cudaMallocHost(&t->host_tables_, table_entries * sizeof(DevWeight)),
                                       "allocating the expert tables"));
    for (size_t i = 0; i < table_entries; ++i) t->host_tables_[i] = DevWeight{};
    SLUICE_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&t->stream_, cudaStreamNonBlocking),
                                       "creating the copy stream"));
    for (Batch& b : t->ring_) {
        SLUICE_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&b.start), "creating events"));
        SLUICE_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&b.end), "creating events"));
    }
    return t;
}

ExpertTier::~ExpertTier() {
    if (stream_ != nullptr) {
        (void)retire(true);
        unpin_current();
        cudaStreamDestroy(stream_);
    }
    for (Batch& b : ring_) {
        if (b.start != nullptr) cudaEventDestroy(b.start);
        if (b.end != nullptr) cudaEventDestroy(b.end);
    }
    if (host_tables_ != nullptr) cudaFreeHost(host_tables_);
    if (slots_ != nullptr) cudaFree(slots_);
}

int64_t ExpertTier::claim(experts::ExpertKey key) {
    bool evicted_valid = false;
    experts::ExpertKey evicted;
    const int64_t slot = table_->claim(key, &evicted_valid, &evicted);
    if (slot < 0) return -1;
    SlotInfo& s = info_[static_cast<size_t>(slot)];
    if (evicted_valid) {
        stats_.evictions++;
        if (s.prefetched_unused) stats_.prefetch_wasted++;
    }
    s.prefetched_unused = false;
    table_->pin(slot);
    return slot;
}

void ExpertTier::copy_expert(const model::ExpertWeights& e, char* slot, DevWeight* out) {
    Part parts[9];
    parts_of(e, parts);
    const auto [lo, hi] = span_of(parts);
    const void* dev[9] = {};
    uint64_t copied = 0;
    bool whole = hi - lo <= options_.slot_bytes;
    for (int i = 0; i < 9 && whole; ++i)
        whole = parts[i].bytes == 0 || reinterpret_cast<uintptr_t>(parts[i].host) % kPartAlign == 0;
    if (whole) {
        // One copy of the whole record; parts keep their offsets.
        cudaMemcpyAsync(slot, reinterpret_cast<const void*>(lo), hi - lo, cudaMemcpyHostToDevice, stream_);
        for (int i = 0; i < 9; ++i)
            if (parts[i].bytes > 0) dev[i] = slot + (reinterpret_cast<uintptr_t>(parts[i].host) - lo);
        copied = hi - lo;
    } else {
        uint64_t at = 0;
        for (int i = 0; i < 9; ++i) {
            if (parts[i].bytes == 0) continue;
            cudaMemcpyAsync(slot + at, parts[i].host, parts[i].bytes, cudaMemcpyHostToDevice, stream_);
            dev[i] = slot + at;
            at += align_up(parts[i].bytes);
            copied += parts[i].bytes;
        }
    }
    out[0] = dev_weight(e.gate, dev[0], dev[1], dev[2]);
    out[1] = dev_weight(e.up, dev[3], dev[4], dev[5]);
    out[2] = dev_weight(e.down, dev[6], dev[7], dev[8]);
    stats_.bytes_copied += copied;
}

Status ExpertTier::copy_batch(int64_t layer, std::span<const int32_t> ids, const model::ExpertWeights* views,
                              std::span<const int64_t> slots) {
    if (next_seq_ - completed_seq_ >= kRing) SLUICE_RETURN_IF_ERROR(retire(true));
    const uint64_t seq = next_seq_++;
    Batch& b = ring_[seq % kRing];
    b.seq = seq;
    b.layer = layer;
    b.ids.assign(ids.begin(), ids.end());
    host_held_ += ids.size();
    const int64_t E = options_.n_experts;
    DevWeight* host_table = host_tables_ + static_cast<size_t>(layer * E * 3);
    cudaEventRecord(b.start, stream_);
    for (size_t i = 0; i < ids.size(); ++i) {
        const auto s = static_cast<uint64_t>(slots[i]);
        copy_expert(views[i], slots_ + s * options_.slot_bytes, host_table + ids[i] * 3);
        info_[s].ready_seq = seq;
    }
    // The whole layer's table in one copy (E·3 entries, a few tens of KB).
    cudaMemcpyAsync(tables_[static_cast<size_t>(layer)], host_table,
                    static_cast<size_t>(E * 3) * sizeof(DevWeight), cudaMemcpyHostToDevice, stream_);
    cudaEventRecord(b.end, stream_);
    return cuda_status(cudaGetLastError(), "enqueuing expert copies");
}

// The host views of a batch are released only here, after its end event: the store may retire
// (unregister, hand back) a host slot as soon as its last pin goes (PinnedHostSlots).
Status ExpertTier::retire(bool wait) {
    while (completed_seq_ + 1 < next_seq_) {
        Batch& b = ring_[(completed_seq_ + 1) % kRing];
        if (wait) {
            SLUICE_RETURN_IF_ERROR(cuda_status(cudaEventSynchronize(b.end), "copying experts to the GPU"));
        } else {
            const cudaError_t e = cudaEventQuery(b.end);
            if (e == cudaErrorNotReady) break;
            SLUICE_RETURN_IF_ERROR(cuda_status(e, "copying experts to the GPU"));
        }
        float ms = 0;
        if (cudaEventElapsedTime(&ms, b.start, b.end) == cudaSuccess) stats_.copy_s += ms * 1e-3;
        source_->release(b.layer, b.ids);
        host_held_ -= b.ids.size();
        b.ids.clear();
        completed_seq_ = b.seq;
    }
    return Status::ok();
}

void ExpertTier::unpin_current() {
    for (int64_t s : current_) table_->unpin(s);
    current_.clear();
}

Status ExpertTier::use(int64_t layer, std::span<const int32_t> ids, cudaStream_t compute) {
    unpin_current();
    SLUICE_RETURN_IF_ERROR(retire(false));
    std::vector<int32_t> miss_ids;
    std::vector<int64_t> miss_slots;
    uint64_t wait_seq = 0;
    for (int32_t id : ids) {
        const experts::ExpertKey key{static_cast<int32_t>(layer), id};
        int64_t slot = table_->find(key);
        if (slot >= 0) {
            stats_.hits++;
            table_->touch(key);
            table_->pin(slot);
            SlotInfo& s = info_[static_cast<size_t>(slot)];
            if (s.prefetched_unused) {
                s.prefetched_unused = false;
                stats_.prefetch_used++;
            }
            wait_seq = std::max(wait_seq, s.ready_seq);
        } else {
            stats_.misses++;
            slot = claim(key);
            if (slot < 0) {
                for (int64_t s : miss_slots) table_->drop(s);
                return error(ErrorCode::kOutOfMemory,
                             fmt::format("[cuda] all {} GPU expert slots are in use; raise --gpu-memory",
                                         options_.n_slots));
            }
            miss_ids.push_back(id);
            miss_slots.push_back(slot);
        }
        current_.push_back(slot);
    }
    // Prefetch pins of this layer end here: used slots are pinned again above, the rest may go.
    auto& pre = prefetched_[static_cast<size_t>(layer)];
    for (int64_t s : pre) table_->unpin(s);
    pre.clear();
    // Misses in rounds the host tier can hold pinned at once; each round's host views are released
    // once its copy has landed.
    const size_t round = static_cast<size_t>(std::max<int64_t>(1, source_->max_pinned()));
    std::vector<model::ExpertWeights> views;
    for (size_t at = 0; at < miss_ids.size(); at += round) {
        const size_t count = std::min(round, miss_ids.size() - at);
        // Copies still in flight hold host views; wait for them when this round could not be pinned
        // beside them (a small host cache).
        if (host_held_ + count > round) SLUICE_RETURN_IF_ERROR(retire(true));
        const std::span<const int32_t> ids_now(miss_ids.data() + at, count);
        const std::span<const int64_t> slots_now(miss_slots.data() + at, count);
        views.resize(count);
        const auto t0 = std::chrono::steady_clock::now();
        Status st = source_->acquire(layer, ids_now, views.data());
        stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (st.is_ok()) st = copy_batch(layer, ids_now, views.data(), slots_now);
        if (!st.is_ok()) {
            for (size_t i = at; i < miss_slots.size(); ++i) table_->drop(miss_slots[i]);
            return st;
        }
        wait_seq = next_seq_ - 1;
    }
    if (wait_seq > completed_seq_)
        SLUICE_RETURN_IF_ERROR(cuda_status(cudaStreamWaitEvent(compute, ring_[wait_seq % kRing].end, 0),
                                           "ordering compute after expert copies"));
    return Status::ok();
}

void ExpertTier::prefetch(int64_t layer, std::span<const int32_t> ids) {
    if (!options_.prefetch || layer < 0 || layer >= static_cast<int64_t>(tables_.size()) ||
        tables_[static_cast<size_t>(layer)] == nullptr)
        return;
    if (!retire(false).is_ok()) return;
    std::vector<int32_t> copy_ids, read_ids;
    std::vector<int64_t> slots;
    std::vector<model::ExpertWeights> views;
    for (int32_t id : ids) {
        const experts::ExpertKey key{static_cast<int32_t>(layer), id};
        if (table_->find(key) >= 0) continue;
        model::ExpertWeights w;
        if (!source_->try_acquire(layer, id, &w)) {
            read_ids.push_back(id);
            continue;
        }
        const int64_t slot = claim(key);
        if (slot < 0) {
            source_->release(layer, std::span<const int32_t>(&id, 1));
            break;
        }
        info_[static_cast<size_t>(slot)].prefetched_unused = true;
        copy_ids.push_back(id);
        slots.push_back(slot);
        views.push_back(w);
    }
    if (!read_ids.empty()) source_->prefetch(layer, read_ids);  // SSD → host, for a later use()
    if (copy_ids.empty()) return;
    if (!copy_batch(layer, copy_ids, views.data(), slots).is_ok()) {
        for (int64_t s : slots) table_->drop(s);
        return;
    }
    stats_.prefetch_issued += copy_ids.size();
    auto& pre = prefetched_[static_cast<size_t>(layer)];
    pre.insert(pre.end(), slots.begin(), slots.end());
}

Status ExpertTier::finish() {
    unpin_current();
    for (auto& pre : prefetched_) {
        for (int64_t s : pre) table_->unpin(s);
        pre.clear();
    }
    return retire(true);
}

GpuExpertCacheStats ExpertTier::stats() const {
    GpuExpertCacheStats out = stats_;
    out.tiered = true;
    out.slots = options_.n_slots;
    out.slot_bytes = options_.slot_bytes;
    return out;
}

void ExpertTier::reset_stats() {
    stats_ = GpuExpertCacheStats{};
    for (SlotInfo& s : info_) s.prefetched_unused = false;
}

}  // namespace sluice::cuda
