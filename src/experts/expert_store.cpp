#include "experts/expert_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/log.h"
#include "kernels/ggml_tiles.h"
#include "kernels/weight_format.h"
#include "model/tensor_map.h"

namespace sluice::experts {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kAlign = 4096;  // O_DIRECT's offset, length and buffer alignment

uint64_t align_up(uint64_t v) {
    return (v + kAlign - 1) / kAlign * kAlign;
}

// A piece read with covering reads when its experts do not all start on kAlign.
bool misaligned(const ExpertLayerSource::Piece& p) {
    return p.offset % kAlign != 0 || p.stride % kAlign != 0;
}

// The bytes a piece takes in a slot: its own, rounded up, plus a lead of up to kAlign − 1.
uint64_t place_bytes(const ExpertLayerSource::Piece& p) {
    return align_up(p.bytes) + (misaligned(p) ? kAlign : 0);
}

ExpertLayerSource::View projection_source(const format::PackProjection& p) {
    ExpertLayerSource::View v;
    v.rows = p.rows;
    v.cols = p.cols;
    v.type = *model::weight_type_of(p);  // checked by check_projection
    v.data = p.weight.offset;
    if (p.bits == 0) return v;
    v.group_size = p.group_size;
    v.scales = p.scales.offset;
    v.biases = p.biases.offset;
    v.scale_type = model::scale_type_of(p.scales.dtype);
    return v;
}

// layout.json's description of one projection against the format registry (float, MLX affine, or a
// GGUF pack's ggml blocks, whose scales are inside the blocks): a registered format,
// a well-formed shape for it, sections as large as rows × row bytes — so no view of a record can
// reach past it. Errors name the layer and projection.
Status check_projection(const format::PackExpertFile& f, const format::PackProjection& p, const char* which) {
    const std::string where = "[experts] layout.json, layer " + std::to_string(f.layer) + " " + which + ": ";
    auto type = model::weight_type_of(p);
    if (!type.has_value()) return error(ErrorCode::kCorrupt, where + type.status().message());
    const kernels::WeightFormat& fmt = kernels::weight_format(*type);
    if (p.rows <= 0 || p.cols <= 0) return error(ErrorCode::kCorrupt, where + "empty shape");
    if (const char* bad = fmt.shape_error(p.cols, p.group_size))
        return error(ErrorCode::kCorrupt, where + fmt.name + " with " + bad);
    auto fits = [&](const format::PackSection& s, uint64_t need) {
        return s.size >= need && s.offset <= f.record_bytes && s.size <= f.record_bytes - s.offset;
    };
    const auto rows = static_cast<uint64_t>(p.rows);
    if (!fits(p.weight, rows * fmt.data_row_bytes(p.cols)))
        return error(ErrorCode::kCorrupt, where + "the weight section does not hold its rows");
    if (fmt.quantized()) {
        const uint64_t half =
            rows * fmt.aux_row_bytes(p.cols, p.group_size, model::scale_type_of(p.scales.dtype)) / 2;
        if (!fits(p.scales, half) || !fits(p.biases, half))
            return error(ErrorCode::kCorrupt, where + "the scale or bias section does not hold its rows");
    }
    return Status::ok();
}

}  // namespace

Expected<std::vector<ExpertLayerSource>> expert_sources_from_pack(const std::string& dir,
                                                                  const format::PackLayout& layout) {
    std::vector<ExpertLayerSource> out;
    for (const format::PackExpertFile& f : layout.expert_files) {
        SLUICE_RETURN_IF_ERROR(check_projection(f, f.gate, "gate"));
        SLUICE_RETURN_IF_ERROR(check_projection(f, f.up, "up"));
        SLUICE_RETURN_IF_ERROR(check_projection(f, f.down, "down"));
        ExpertLayerSource& src = out.emplace_back();
        src.layer = f.layer;
        src.n_experts = layout.n_experts;
        src.name = "'" + f.file + "'";
        ExpertLayerSource::Piece piece;
        piece.file = (std::filesystem::path(dir) / f.file).string();
        piece.stride = f.record_stride;
        piece.bytes = f.record_stride;
        piece.checked_bytes = f.record_bytes;
        piece.xxh3 = f.record_xxh3;
        src.pieces.push_back(std::move(piece));
        src.views[0] = projection_source(f.gate);
        src.views[1] = projection_source(f.up);
        src.views[2] = projection_source(f.down);
    }
    return out;
}

Expected<std::vector<ExpertLayerSource>> expert_sources_from_gguf(
    const format::GgufCheckpoint& gguf, int64_t n_layers,
    const std::map<std::string, std::vector<uint64_t>>* manifest_experts) {
    std::vector<ExpertLayerSource> out;
    const std::string file = gguf.files().front()->path();
    for (int64_t l = 0; l < n_layers; ++l) {
        const std::string blk = "blk." + std::to_string(l) + ".";
        if (gguf.find(blk + "ffn_gate_exps.weight") == nullptr) continue;  // a dense layer
        ExpertLayerSource& src = out.emplace_back();
        src.layer = l;
        src.name = "'" + file + "' " + blk.substr(0, blk.size() - 1);
        static const char* const kProj[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        for (int p = 0; p < 3; ++p) {
            const std::string name = blk + kProj[p] + ".weight";
            const format::GgufTensor* t = gguf.find(name);
            const auto bad = [&](const std::string& what) {
                return error(ErrorCode::kInvalidArgument,
                             "[experts] " + file + ": tensor '" + name + "' " + what);
            };
            if (t == nullptr) return bad("is missing");
            const kernels::WeightFormat* f = kernels::ggml_weight_format(static_cast<uint32_t>(t->type));
            if (f == nullptr || !f->cpu_kernels)
                return bad(std::string("is of ggml type ") + format::ggml_type_name(t->type) +
                           ", which sluice has no kernels for");
            if (t->dims.size() != 3 || f->shape_error(t->cols(), 0) != nullptr)
                return bad("is not [experts, rows, cols] of whole blocks: " + format::describe(*t));
            const int64_t experts = t->dims[2];
            if (p == 0) src.n_experts = experts;
            if (experts != src.n_experts)
                return bad("holds " + std::to_string(experts) + " experts, ffn_gate_exps " +
                           std::to_string(src.n_experts));
            ExpertLayerSource::Piece piece;
            piece.file = gguf.files()[t->file_index]->path();
            piece.stride = t->size_bytes / static_cast<uint64_t>(experts);
            piece.offset = t->file_offset;
            piece.bytes = piece.stride;
            piece.checked_bytes = piece.stride;
            if (manifest_experts != nullptr) {
                auto it = manifest_experts->find(name);
                if (it != manifest_experts->end() && static_cast<int64_t>(it->second.size()) == experts)
                    piece.xxh3 = it->second;
            }
            src.pieces.push_back(std::move(piece));
            ExpertLayerSource::View& v = src.views[p];
            v.type = f->type;
            v.rows = t->dims[1];
            v.cols = t->dims[0];
            v.piece = p;
        }
    }
    return out;
}

uint64_t ExpertStore::slot_bytes_for(const format::PackLayout& layout) {
    uint64_t b = 0;
    for (const auto& f : layout.expert_files) b = std::max(b, f.record_stride);
    return b;
}

uint64_t ExpertStore::slot_bytes_for(const std::vector<ExpertLayerSource>& sources) {
    uint64_t b = 0;
    for (const ExpertLayerSource& s : sources) {
        uint64_t layer = 0;
        for (const auto& p : s.pieces) layer += place_bytes(p);
        b = std::max(b, layer);
    }
    return b;
}

Expected<std::unique_ptr<ExpertStore>> ExpertStore::open(const std::string& dir,
                                                         const format::PackLayout& layout,
                                                         const ExpertStoreOptions& options) {
    SLUICE_ASSIGN_OR_RETURN(auto sources, expert_sources_from_pack(dir, layout));
    if (sources.empty()) return error(ErrorCode::kCorrupt, "[experts] packed model has no expert files");
    return open(std::move(sources), options);
}

Expected<std::unique_ptr<ExpertStore>> ExpertStore::open(std::vector<ExpertLayerSource> sources,
                                                         const ExpertStoreOptions& options) {
    auto store = std::unique_ptr<ExpertStore>(new ExpertStore());
    store->sources_ = std::move(sources);
    store->options_ = options;
    auto policy = make_policy(options.policy);

    int64_t max_layer = -1;
    for (const auto& f : store->sources_) max_layer = std::max(max_layer, f.layer);
    store->files_.resize(static_cast<size_t>(max_layer + 1));
    store->direct_io_ = options.direct_io;
    for (const ExpertLayerSource& src : store->sources_) {
        if (src.n_experts <= 0 || src.pieces.empty())
            return error(ErrorCode::kCorrupt, "[experts] " + src.name + " holds no experts");
        auto& lf = store->files_[static_cast<size_t>(src.layer)];
        lf.src = &src;
        uint64_t place = 0;
        for (const ExpertLayerSource::Piece& piece : src.pieces) {
            auto it = store->open_fds_.find(piece.file);
            if (it == store->open_fds_.end()) {
                int fd = -1;
                if (store->direct_io_) {
                    fd = ::open(piece.file.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
                    if (fd < 0 && errno == EINVAL) {
                        log::warn("[experts] O_DIRECT is not supported for {}; using buffered reads",
                                  piece.file);
                        store->direct_io_ = false;
                    }
                }
                if (fd < 0) fd = ::open(piece.file.c_str(), O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                    return error(ErrorCode::kIo,
                                 "[experts] cannot open '" + piece.file + "': " + std::strerror(errno));
                it = store->open_fds_.emplace(piece.file, fd).first;
            }
            lf.fds.push_back(it->second);
            lf.place.push_back(place);
            place += place_bytes(piece);
            lf.read_bytes += piece.bytes;
        }
        for (int i = 0; i < 3; ++i) {
            const ExpertLayerSource::View& d = src.views[i];
            lf.bound[i] = d.type;
            if (!options.cpu_row_tiles) continue;
            kernels::WeightView probe;
            probe.type = d.type;
            probe.rows = d.rows;
            probe.cols = d.cols;
            lf.bound[i] = kernels::tiled_type(probe);
            if (lf.bound[i] != d.type)
                store->tile_scratch_bytes_ =
                    std::max(store->tile_scratch_bytes_, kernels::ggml_tile_scratch_bytes(d.type, d.cols));
        }
        if (options.verify_first_reads) {
            lf.verified = std::make_unique<std::atomic<bool>[]>(static_cast<size_t>(src.n_experts));
            for (int64_t e = 0; e < src.n_experts; ++e) lf.verified[static_cast<size_t>(e)] = false;
        }
    }

    store->slot_bytes_ = slot_bytes_for(store->sources_);
    if (store->slot_bytes_ == 0) return error(ErrorCode::kCorrupt, "[experts] the model has no expert files");
    store->n_slots_ = std::max<int64_t>(1, static_cast<int64_t>(options.cache_bytes / store->slot_bytes_));
    store->floor_slots_ = std::clamp<int64_t>(static_cast<int64_t>(options.floor_bytes / store->slot_bytes_),
                                              1, store->n_slots_);
    store->target_slots_ = store->n_slots_;
    // An anonymous mapping (page-aligned, so every slot's pages can be handed back by madvise under
    // memory pressure); its pages are only backed once reads fill them.
    void* memory = ::mmap(nullptr, store->n_slots_ * store->slot_bytes_, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    store->memory_ = memory == MAP_FAILED ? nullptr : static_cast<uint8_t*>(memory);
    if (store->memory_ == nullptr) {
        return error(ErrorCode::kOutOfMemory, "[experts] cannot allocate " + std::to_string(store->n_slots_) +
                                                  " cache slots of " + std::to_string(store->slot_bytes_) +
                                                  " bytes");
    }
    store->slots_.resize(static_cast<size_t>(store->n_slots_));
    store->table_ = std::make_unique<SlotTable>(store->n_slots_, std::move(policy));
    const int threads = std::max(1, options.io_threads);
    for (int i = 0; i < threads; ++i) store->io_threads_.emplace_back([s = store.get()] { s->io_loop(); });
    log::debug("[experts] {} slots of {:.2f} MB, {} IO threads, {} reads, policy {}", store->n_slots_,
               store->slot_bytes_ / 1e6, threads, store->direct_io_ ? "O_DIRECT" : "buffered",
               cache_policy_name(options.policy));
    return store;
}

ExpertStore::~ExpertStore() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    job_cv_.notify_all();
    for (auto& t : io_threads_) t.join();
    for (const auto& [path, fd] : open_fds_) ::close(fd);
    if (observer_ != nullptr) {
        std::lock_guard<std::mutex> lock(mutex_);
        retire_observed_locked();
    }
    if (memory_ != nullptr) ::munmap(memory_, static_cast<size_t>(n_slots_) * slot_bytes_);
}

int64_t ExpertStore::start_read_locked(ExpertKey key, bool prefetch) {
    bool evicted_valid = false;
    ExpertKey evicted;
    const int64_t slot = table_->claim(key, &evicted_valid, &evicted);
    if (slot < 0) return -1;
    Slot& s = slots_[static_cast<size_t>(slot)];
    if (evicted_valid) {
        stats_.evictions++;
        if (s.prefetched_unused) {
            stats_.prefetch_wasted++;
        }
    }
    s.state = SlotState::kLoading;
    s.key = key;
    s.prefetched_unused = prefetch;
    s.error.clear();
    table_->pin(slot);  // held by the read until it completes
    (prefetch ? prefetch_jobs_ : jobs_).push_back({slot, key});
    job_cv_.notify_one();
    return slot;
}

Status ExpertStore::pin_locked(int64_t layer, std::span<const int32_t> ids, int64_t* slots,
                               std::unique_lock<std::mutex>& lock) {
    if (!has_layer(layer))
        return error(ErrorCode::kInternal,
                     "[experts] layer " + std::to_string(layer) + " has no expert file");
    const int64_t n_experts = files_[static_cast<size_t>(layer)].src->n_experts;
    for (int32_t id : ids)
        if (id < 0 || id >= n_experts)
            return error(ErrorCode::kInternal, "[experts] expert id " + std::to_string(id) + " out of range");
    // This layer's experts are wanted now: what a prefetch could not yet start for it is moot, and its
    // queued speculative reads of experts it does not want are dropped unread (a prefill's prediction
    // from the layer before covers most experts; the disk is its bound, so each wasted read costs).
    std::erase_if(pending_prefetch_, [&](const ExpertKey& k) { return k.layer == layer; });
    std::vector<bool> wanted(static_cast<size_t>(n_experts), false);
    for (int32_t id : ids) wanted[static_cast<size_t>(id)] = true;
    std::erase_if(prefetch_jobs_, [&](const ReadJob& j) {
        Slot& s = slots_[static_cast<size_t>(j.slot)];
        // A preload's reads are not predictions: they stay.
        if (j.key.layer != layer || wanted[static_cast<size_t>(j.key.expert)] || !s.prefetched_unused)
            return false;
        s.state = SlotState::kEmpty;
        s.prefetched_unused = false;
        table_->unpin(j.slot);  // the read's pin
        table_->drop(j.slot);
        stats_.prefetch_issued--;
        stats_.prefetch_canceled++;
        return true;
    });
    // A step sized by max_pinned() before a shrink may ask for more than the cache now holds: it
    // gets them (retired slots come back for it), and they are retired again when it releases.
    apply_capacity_locked(static_cast<int64_t>(ids.size()));
    for (size_t i = 0; i < ids.size(); ++i) {
        const ExpertKey key{static_cast<int32_t>(layer), ids[i]};
        int64_t slot = table_->find(key);
        if (slot >= 0) {
            stats_.hits++;
            table_->touch(key);
            Slot& s = slots_[static_cast<size_t>(slot)];
            if (s.prefetched_unused) {
                s.prefetched_unused = false;
                stats_.prefetch_used++;
                if (s.state == SlotState::kLoading) {
                    // Needed now: a queued speculative read becomes a demand read.
                    auto it = std::find_if(prefetch_jobs_.begin(), prefetch_jobs_.end(),
                                           [&](const ReadJob& j) { return j.slot == slot; });
                    if (it != prefetch_jobs_.end()) {
                        jobs_.push_back(*it);
                        prefetch_jobs_.erase(it);
                    }
                }
            }
        } else {
            stats_.misses++;
            while ((slot = start_read_locked(key, false)) < 0) {
                // Every slot is pinned by reads in flight (prefetches): wait for one to land.
                slot_cv_.wait(lock);
            }
        }
        table_->pin(slot);
        slots[i] = slot;
    }
    return Status::ok();
}

void ExpertStore::unpin_failed_locked(std::span<const int64_t> slots) {
    for (int64_t slot : slots) {
        table_->unpin(slot);
        if (slots_[static_cast<size_t>(slot)].state == SlotState::kFailed) {
            slots_[static_cast<size_t>(slot)].state = SlotState::kEmpty;
            table_->drop(slot);
        }
    }
}

Status ExpertStore::acquire(int64_t layer, std::span<const int32_t> ids, model::ExpertWeights* out) {
    std::vector<int64_t> slots(ids.size(), -1);
    std::unique_lock<std::mutex> lock(mutex_);
    SLUICE_RETURN_IF_ERROR(pin_locked(layer, ids, slots.data(), lock));
    // Wait for every requested slot to be readable.
    const auto wait_start = Clock::now();
    Status failure;
    for (size_t i = 0; i < ids.size(); ++i) {
        Slot& s = slots_[static_cast<size_t>(slots[i])];
        slot_cv_.wait(lock, [&] { return s.state != SlotState::kLoading; });
        if (s.state == SlotState::kFailed && failure.is_ok()) failure = error(ErrorCode::kIo, s.error);
    }
    stats_.stall_s += std::chrono::duration<double>(Clock::now() - wait_start).count();
    if (!failure.is_ok()) {
        unpin_failed_locked(slots);
        return failure;
    }
    for (size_t i = 0; i < ids.size(); ++i)
        out[i] = views_for(slots[i], {static_cast<int32_t>(layer), ids[i]});
    return Status::ok();
}

Status ExpertStore::acquire_each(int64_t layer, std::span<const int32_t> ids, model::ExpertWeights* out,
                                 const std::function<void(size_t i)>& use) {
    std::vector<int64_t> slots(ids.size(), -1);
    std::vector<size_t> waiting(ids.size()), ready;  // indices not handed out yet; those readable now
    for (size_t i = 0; i < ids.size(); ++i) waiting[i] = i;
    std::unique_lock<std::mutex> lock(mutex_);
    SLUICE_RETURN_IF_ERROR(pin_locked(layer, ids, slots.data(), lock));
    while (!waiting.empty()) {
        // Everything readable now, in request order (hits first of all, then reads as they land).
        const auto wait_start = Clock::now();
        bool failed = false;
        slot_cv_.wait(lock, [&] {
            for (size_t i : waiting)
                if (slots_[static_cast<size_t>(slots[i])].state != SlotState::kLoading) return true;
            return false;
        });
        stats_.stall_s += std::chrono::duration<double>(Clock::now() - wait_start).count();
        ready.clear();
        std::erase_if(waiting, [&](size_t i) {
            const SlotState st = slots_[static_cast<size_t>(slots[i])].state;
            if (st == SlotState::kFailed) failed = true;
            if (st != SlotState::kReady) return false;
            ready.push_back(i);
            return true;
        });
        if (failed) {
            // The experts not handed out are let go once their reads settle; those handed out are the
            // caller's, released by it.
            Status failure;
            std::vector<int64_t> held;
            for (size_t i : ready) held.push_back(slots[i]);
            for (size_t i : waiting) {
                Slot& s = slots_[static_cast<size_t>(slots[i])];
                slot_cv_.wait(lock, [&] { return s.state != SlotState::kLoading; });
                if (s.state == SlotState::kFailed && failure.is_ok())
                    failure = error(ErrorCode::kIo, s.error);
                held.push_back(slots[i]);
            }
            unpin_failed_locked(held);
            slot_cv_.notify_all();
            return failure;
        }
        lock.unlock();
        for (size_t i : ready) {
            out[i] = views_for(slots[i], {static_cast<int32_t>(layer), ids[i]});
            use(i);
        }
        lock.lock();
    }
    return Status::ok();
}

bool ExpertStore::try_acquire(int64_t layer, int32_t id, model::ExpertWeights* out) {
    if (!has_layer(layer) || id < 0 || id >= files_[static_cast<size_t>(layer)].src->n_experts) return false;
    std::lock_guard<std::mutex> lock(mutex_);
    const ExpertKey key{static_cast<int32_t>(layer), id};
    const int64_t slot = table_->find(key);
    if (slot < 0) return false;
    Slot& s = slots_[static_cast<size_t>(slot)];
    if (s.state != SlotState::kReady) return false;
    stats_.hits++;
    table_->touch(key);
    if (s.prefetched_unused) {
        s.prefetched_unused = false;
        stats_.prefetch_used++;
    }
    table_->pin(slot);
    *out = views_for(slot, key);
    return true;
}

void ExpertStore::release(int64_t layer, std::span<const int32_t> ids) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int32_t id : ids) {
        const int64_t slot = table_->find({static_cast<int32_t>(layer), id});
        if (slot >= 0 && table_->pins(slot) > 0) table_->unpin(slot);
    }
    if (table_->n_active() > target_slots_.load(std::memory_order_relaxed)) apply_capacity_locked();
    start_pending_prefetch_locked();
    slot_cv_.notify_all();
}

void ExpertStore::start_pending_prefetch_locked() {
    while (!pending_prefetch_.empty()) {
        const ExpertKey key = pending_prefetch_.front();
        if (table_->find(key) < 0) {
            // Never in place of a prediction not used yet (the same hint's earlier reads, most likely).
            const int64_t victim = table_->retire_candidate();
            if (victim < 0 || slots_[static_cast<size_t>(victim)].prefetched_unused) return;
            if (start_read_locked(key, true) < 0) return;
            stats_.prefetch_issued++;
        }
        pending_prefetch_.pop_front();
    }
}

void ExpertStore::apply_capacity_locked(int64_t need) {
    const int64_t want = std::max(target_slots_.load(std::memory_order_relaxed), need);
    while (table_->n_active() > want) {
        const int64_t slot = table_->retire_candidate();
        if (slot < 0) break;  // the rest are pinned: retired when released
        bool evicted_valid = false;
        ExpertKey evicted;
        table_->retire(slot, &evicted_valid, &evicted);
        Slot& s = slots_[static_cast<size_t>(slot)];
        if (evicted_valid) {
            stats_.evictions++;
            if (s.prefetched_unused) stats_.prefetch_wasted++;
        }
        // Page-locked memory first goes back to its observer: the driver holds its pages, so madvise
        // would free nothing, and the device's mapping of them would outlive the pages.
        if (s.memory == SlotMemory::kObserved) observer_->on_retire(slot_memory(slot), slot_bytes_);
        s = Slot{};
        // The pages go back to the OS now; the mapping stays, and a later read faults in zeroed pages.
        ::madvise(slot_memory(slot), slot_bytes_, MADV_DONTNEED);
        stats_.bytes_returned += slot_bytes_;
    }
    while (table_->n_active() < want)
        if (table_->restore() < 0) break;
}

uint64_t ExpertStore::set_cache_bytes(uint64_t bytes) {
    const int64_t slots =
        std::clamp<int64_t>(static_cast<int64_t>(bytes / slot_bytes_), floor_slots_, n_slots_);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        target_slots_ = slots;
        apply_capacity_locked();
    }
    slot_cv_.notify_all();  // an acquire waiting for a slot may have one now
    return static_cast<uint64_t>(slots) * slot_bytes_;
}

bool ExpertStore::set_slot_observer(model::SlotMemoryObserver* observer) {
    std::unique_lock<std::mutex> lock(mutex_);
    // A reader thread telling the previous observer of a slot finishes first (it holds no lock).
    slot_cv_.wait(lock, [&] { return announcing_ == 0; });
    retire_observed_locked();
    observer_ = observer;
    if (observer_ == nullptr) return true;
    // Slots that already hold data (or are being read into: both page-locking and a read pin the
    // pages, neither moves them) are announced now; the others before their first read.
    for (int64_t i = 0; i < n_slots_; ++i) {
        Slot& s = slots_[static_cast<size_t>(i)];
        if (s.state == SlotState::kEmpty || table_->retired(i)) continue;
        s.memory =
            observer_->on_restore(slot_memory(i), slot_bytes_) ? SlotMemory::kObserved : SlotMemory::kIgnored;
    }
    return true;
}

void ExpertStore::retire_observed_locked() {
    for (int64_t i = 0; i < n_slots_; ++i) {
        Slot& s = slots_[static_cast<size_t>(i)];
        if (s.memory == SlotMemory::kObserved) observer_->on_retire(slot_memory(i), slot_bytes_);
        s.memory = SlotMemory::kUnannounced;
    }
}

ExpertCacheCapacity ExpertStore::capacity() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {table_->n_active(), target_slots_.load(std::memory_order_relaxed), floor_slots_, n_slots_,
            slot_bytes_};
}

void ExpertStore::prefetch(int64_t layer, std::span<const int32_t> ids, bool chunk) {
    if (!options_.prefetch || !has_layer(layer)) return;
    const int64_t n_experts = files_[static_cast<size_t>(layer)].src->n_experts;
    std::lock_guard<std::mutex> lock(mutex_);
    if (chunk) {
        chunk_since_step_ = true;
    } else {
        // A single-token step's hint for the lowest layer hinted starts a decode step: the one before it is
        // timed for the gate (PrefetchGate), unless a prefill chunk ran in between.
        if (layer <= step_layer_) {
            step_layer_ = layer;
            const auto now = Clock::now();
            if (chunk_since_step_)
                gate_.restart_block();
            else if (step_started_)
                gate_.step(std::chrono::duration<double>(now - step_start_).count());
            step_start_ = now;
            step_started_ = true;
            chunk_since_step_ = false;
        }
        if (!gate_.enabled()) {
            stats_.prefetch_skipped++;
            return;
        }
    }
    // A newer hint replaces what an older one could not start.
    pending_prefetch_.clear();
    bool full = false;
    for (int32_t id : ids) {
        if (id < 0 || id >= n_experts) continue;
        const ExpertKey key{static_cast<int32_t>(layer), id};
        if (table_->find(key) >= 0) continue;
        // Every slot pinned (a prefill holding this layer's union): the read starts when the layer
        // releases a slot (release), so the next layer's reads follow this one's without a gap.
        if (!full && start_read_locked(key, true) < 0) full = true;
        if (full) {
            pending_prefetch_.push_back(key);
            continue;
        }
        stats_.prefetch_issued++;
    }
}

bool ExpertStore::holds_every_expert() const {
    int64_t records = 0;
    for (const LayerFile& f : files_) records += f.src != nullptr ? f.src->n_experts : 0;
    return n_slots_ >= records;
}

uint64_t ExpertStore::preload() {
    int64_t records = 0;
    for (const LayerFile& f : files_) records += f.src != nullptr ? f.src->n_experts : 0;
    if (records == 0 || n_slots_ < records) return 0;
    std::lock_guard<std::mutex> lock(mutex_);
    uint64_t bytes = 0;
    for (size_t layer = 0; layer < files_.size(); ++layer) {
        if (files_[layer].src == nullptr) continue;
        for (int32_t id = 0; id < files_[layer].src->n_experts; ++id) {
            const ExpertKey key{static_cast<int32_t>(layer), id};
            if (table_->find(key) >= 0) continue;
            const int64_t slot = start_read_locked(key, true);
            if (slot < 0) return bytes;
            slots_[static_cast<size_t>(slot)].prefetched_unused = false;  // not a prediction
            bytes += files_[layer].read_bytes;
        }
    }
    return bytes;
}

void ExpertStore::wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    slot_cv_.wait(lock, [&] { return jobs_.empty() && prefetch_jobs_.empty() && in_flight_ == 0; });
}

void ExpertStore::io_loop() {
    for (;;) {
        ReadJob job;
        model::SlotMemoryObserver* announce = nullptr;  // told of the slot once this read is done
        {
            std::unique_lock<std::mutex> lock(mutex_);
            job_cv_.wait(lock, [&] { return stop_ || !jobs_.empty() || !prefetch_jobs_.empty(); });
            if (stop_) return;
            std::deque<ReadJob>& queue = jobs_.empty() ? prefetch_jobs_ : jobs_;
            job = queue.front();
            queue.pop_front();
            if (in_flight_++ == 0) busy_since_ = Clock::now();
            if (observer_ != nullptr &&
                slots_[static_cast<size_t>(job.slot)].memory == SlotMemory::kUnannounced) {
                announce = observer_;
                announcing_++;
            }
        }
        Status st = read_record(job);
        // After the read, which faulted the pages in (page-locking pages already there costs a
        // quarter of locking fresh ones, measured on an H200), and before any view of the slot exists;
        // outside the lock, so the forward and the other readers go on: the read's pin keeps the slot
        // from being retired meanwhile, and set_slot_observer waits for us.
        const bool observed = announce != nullptr && announce->on_restore(slot_memory(job.slot), slot_bytes_);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            Slot& s = slots_[static_cast<size_t>(job.slot)];
            if (announce != nullptr) {
                s.memory = observed ? SlotMemory::kObserved : SlotMemory::kIgnored;
                announcing_--;
            }
            if (st.is_ok()) {
                s.state = SlotState::kReady;
                stats_.reads++;
                stats_.bytes_read += files_[static_cast<size_t>(job.key.layer)].read_bytes;
            } else {
                s.state = SlotState::kFailed;
                s.error = st.message();
                s.prefetched_unused = false;
            }
            table_->unpin(job.slot);
            if (table_->n_active() > target_slots_.load(std::memory_order_relaxed)) apply_capacity_locked();
            if (s.state == SlotState::kFailed && table_->pins(job.slot) == 0 && !table_->retired(job.slot)) {
                // A speculative read (prefetch, preload) nobody waits for: forget it, so the record is
                // read again — and the fault reported — when a forward needs it (after a repair, it
                // then simply loads).
                s.state = SlotState::kEmpty;
                table_->drop(job.slot);
            }
            if (--in_flight_ == 0)
                stats_.io_busy_s += std::chrono::duration<double>(Clock::now() - busy_since_).count();
        }
        slot_cv_.notify_all();
    }
}

uint64_t ExpertStore::lead(const LayerFile& lf, size_t p, int32_t e) const {
    const ExpertLayerSource::Piece& piece = lf.src->pieces[p];
    return misaligned(piece) ? (piece.offset + static_cast<uint64_t>(e) * piece.stride) % kAlign : 0;
}

Status ExpertStore::read_record(const ReadJob& job) {
    const LayerFile& lf = files_[static_cast<size_t>(job.key.layer)];
    const ExpertLayerSource& src = *lf.src;
    const int32_t e = job.key.expert;
    auto where = [&] {
        return "layer " + std::to_string(job.key.layer) + " expert " + std::to_string(e) + " from " +
               src.name;
    };
    std::atomic<bool>* first = lf.verified ? &lf.verified[static_cast<size_t>(e)] : nullptr;
    const bool check = options_.verify_reads || (first != nullptr && !first->load(std::memory_order_relaxed));
    for (size_t p = 0; p < src.pieces.size(); ++p) {
        const ExpertLayerSource::Piece& piece = src.pieces[p];
        // From the kAlign boundary at or below the piece's first byte (its lead) to past its last.
        const uint64_t at = piece.offset + static_cast<uint64_t>(e) * piece.stride;
        const uint64_t skip = lead(lf, p, e), start = at - skip;
        const uint64_t want = skip + piece.bytes, length = misaligned(piece) ? align_up(want) : want;
        uint8_t* dst = slot_memory(job.slot) + lf.place[p];
        uint64_t done = 0;
        while (done < want) {
            const ssize_t n = ::pread(lf.fds[p], dst + done, length - done, static_cast<off_t>(start + done));
            if (n < 0) {
                if (errno == EINTR) continue;
                return error(ErrorCode::kIo,
                             "[experts] read of " + where() + " failed: " + std::strerror(errno));
            }
            if (n == 0) {
                return error(ErrorCode::kCorrupt, "[experts] short read of " + where() + ": got " +
                                                      std::to_string(done > skip ? done - skip : 0) + " of " +
                                                      std::to_string(piece.bytes) +
                                                      " bytes (file truncated?)");
            }
            done += static_cast<uint64_t>(n);
        }
        if (check && !piece.xxh3.empty()) {
            const uint64_t h = XXH3_64bits(dst + skip, piece.checked_bytes);
            const uint64_t expected = piece.xxh3[static_cast<size_t>(e)];
            if (h != expected) {
                char hex[80];
                std::snprintf(hex, sizeof hex, "xxh3 %016llx, expected %016llx",
                              static_cast<unsigned long long>(h), static_cast<unsigned long long>(expected));
                return error(ErrorCode::kCorrupt,
                             "[experts] checksum mismatch in " + src.name + " layer " +
                                 std::to_string(job.key.layer) + " expert " + std::to_string(e) +
                                 (src.pieces.size() > 1 ? " (piece " + std::to_string(p) + ")" : "") + ": " +
                                 hex);
            }
        }
    }
    if (check && first != nullptr) first->store(true, std::memory_order_relaxed);
    // Row tiles, in place, once the bytes are checked (cpu_row_tiles).
    for (int i = 0; i < 3; ++i) {
        const ExpertLayerSource::View& d = src.views[i];
        if (lf.bound[i] == d.type) continue;
        thread_local std::vector<uint8_t> scratch;
        if (scratch.size() < tile_scratch_bytes_) scratch.resize(tile_scratch_bytes_);
        uint8_t* data = slot_memory(job.slot) + lf.place[static_cast<size_t>(d.piece)] +
                        lead(lf, static_cast<size_t>(d.piece), e) + d.data;
        kernels::ggml_tile_in_place(d.type, data, d.rows, d.cols, scratch.data());
    }
    return Status::ok();
}

model::ExpertWeights ExpertStore::views_for(int64_t slot, ExpertKey key) const {
    const LayerFile& lf = files_[static_cast<size_t>(key.layer)];
    const uint8_t* base = slot_memory(slot);
    kernels::WeightView v[3];
    for (int i = 0; i < 3; ++i) {
        const ExpertLayerSource::View& d = lf.src->views[i];
        const uint8_t* piece = base + lf.place[static_cast<size_t>(d.piece)] +
                               lead(lf, static_cast<size_t>(d.piece), key.expert);
        v[i].type = lf.bound[i];
        v[i].rows = d.rows;
        v[i].cols = d.cols;
        v[i].data = piece + d.data;
        if (kernels::weight_format(d.type).quantized()) {
            v[i].group_size = d.group_size;
            v[i].scale_type = d.scale_type;
            v[i].scales = piece + d.scales;
            v[i].biases = piece + d.biases;
        }
    }
    return {v[0], v[1], v[2]};
}

ExpertStoreStats ExpertStore::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

void ExpertStore::reset_stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_ = ExpertStoreStats{};
    // Prefetches issued before the reset must not count as used after it.
    for (Slot& slot : slots_) slot.prefetched_unused = false;
}

}  // namespace sluice::experts
