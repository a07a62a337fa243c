// SequenceState (sequence_state.h): snapshots, truncation and serialisation over the backend's
// buffer primitives.
#include "runtime/sequence_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace sluice::runtime {

SequenceState::SequenceState(const model::StateLayout& layout, int64_t capacity, int max_snapshots)
    : layout_(layout), capacity_(capacity), max_snapshots_(layout.has_recurrent() ? max_snapshots : 0) {}

std::vector<int64_t> SequenceState::snapshot_positions() const {
    std::vector<int64_t> out;
    for (const Snapshot& s : snapshots_) out.push_back(s.position);
    return out;
}

int SequenceState::free_slot() const {
    for (int slot = 0; slot < max_snapshots_; ++slot) {
        bool used = false;
        for (const Snapshot& s : snapshots_) used = used || s.slot == slot;
        if (!used) return slot;
    }
    return -1;
}

Status SequenceState::snapshot() {
    if (max_snapshots_ == 0) return Status::ok();
    for (const Snapshot& s : snapshots_)
        if (s.position == position_) return Status::ok();
    if (static_cast<int>(snapshots_.size()) == max_snapshots_) snapshots_.erase(snapshots_.begin());
    const int slot = free_slot();
    SLUICE_RETURN_IF_ERROR(copy_recurrent(kLive, slot));
    snapshots_.push_back({position_, slot});
    return Status::ok();
}

bool SequenceState::has_snapshot_at(int64_t position) const {
    return std::any_of(snapshots_.begin(), snapshots_.end(),
                       [&](const Snapshot& s) { return s.position == position; });
}

void SequenceState::drop_snapshot(int64_t position) {
    std::erase_if(snapshots_, [&](const Snapshot& s) { return s.position == position; });
}

Expected<int64_t> SequenceState::truncate(int64_t keep) {
    if (keep >= position_) return position_;
    keep = std::max<int64_t>(keep, 0);
    int64_t target = keep;
    if (layout_.has_recurrent()) {
        const Snapshot* best = nullptr;
        for (const Snapshot& s : snapshots_)
            if (s.position <= keep && (best == nullptr || s.position > best->position)) best = &s;
        if (best == nullptr) {
            SLUICE_RETURN_IF_ERROR(zero_recurrent());
            target = 0;
        } else {
            SLUICE_RETURN_IF_ERROR(copy_recurrent(best->slot, kLive));
            target = best->position;
        }
    }
    position_ = target;  // per-position rows past it are overwritten by later forwards
    std::erase_if(snapshots_, [&](const Snapshot& s) { return s.position > target; });
    return target;
}

Status SequenceState::reset() {
    snapshots_.clear();
    position_ = 0;
    return zero_recurrent();
}

Status SequenceState::write(std::string& out) const {
    auto put_buffer = [&](int slot, int64_t l, int b, int64_t rows) -> Status {
        const model::StateBuffer& buf =
            layout_.layers[static_cast<size_t>(l)].buffers[static_cast<size_t>(b)];
        const uint64_t n = buf.per_position ? buf.bytes(rows) : buf.bytes(0);
        if (n == 0) return Status::ok();
        const size_t at = out.size();
        out.resize(at + n);
        return read_rows(slot, l, b, 0, buf.per_position ? rows : 1, out.data() + at);
    };
    const auto n_layers = static_cast<int64_t>(layout_.layers.size());
    for (int64_t l = 0; l < n_layers; ++l)
        for (size_t b = 0; b < layout_.layers[static_cast<size_t>(l)].buffers.size(); ++b)
            SLUICE_RETURN_IF_ERROR(put_buffer(kLive, l, static_cast<int>(b), position_));
    const auto n_snapshots = static_cast<uint32_t>(snapshots_.size());
    out.append(reinterpret_cast<const char*>(&n_snapshots), sizeof n_snapshots);
    for (const Snapshot& s : snapshots_) {
        out.append(reinterpret_cast<const char*>(&s.position), sizeof s.position);
        for (int64_t l = 0; l < n_layers; ++l) {
            const auto& buffers = layout_.layers[static_cast<size_t>(l)].buffers;
            for (size_t b = 0; b < buffers.size(); ++b)
                if (buffers[b].recurrent())
                    SLUICE_RETURN_IF_ERROR(put_buffer(s.slot, l, static_cast<int>(b), 0));
        }
    }
    return Status::ok();
}

Status SequenceState::read(std::string_view in, size_t* at, int64_t position) {
    SLUICE_RETURN_IF_ERROR(reset());
    auto fail = [&](const std::string& what) {
        (void)reset();
        return error(ErrorCode::kCorrupt, "[state] " + what);
    };
    if (position < 0 || position > capacity_)
        return error(ErrorCode::kInvalidArgument,
                     fmt::format("[state] the saved state holds {} tokens; this sequence's context is {}",
                                 position, capacity_));
    auto get_buffer = [&](int slot, int64_t l, int b, int64_t rows) -> Status {
        const model::StateBuffer& buf =
            layout_.layers[static_cast<size_t>(l)].buffers[static_cast<size_t>(b)];
        const uint64_t n = buf.per_position ? buf.bytes(rows) : buf.bytes(0);
        if (n == 0) return Status::ok();
        if (*at + n > in.size()) return fail(fmt::format("truncated {} of layer {}", buf.name, l));
        SLUICE_RETURN_IF_ERROR(write_rows(slot, l, b, 0, buf.per_position ? rows : 1, in.data() + *at));
        *at += n;
        return Status::ok();
    };
    const auto n_layers = static_cast<int64_t>(layout_.layers.size());
    for (int64_t l = 0; l < n_layers; ++l)
        for (size_t b = 0; b < layout_.layers[static_cast<size_t>(l)].buffers.size(); ++b)
            SLUICE_RETURN_IF_ERROR(get_buffer(kLive, l, static_cast<int>(b), position));
    uint32_t n_snapshots = 0;
    if (*at + sizeof n_snapshots > in.size()) return fail("truncated snapshot count");
    std::memcpy(&n_snapshots, in.data() + *at, sizeof n_snapshots);
    *at += sizeof n_snapshots;
    // Files may hold more snapshots than this sequence keeps: the newest ones are kept.
    if (n_snapshots > 64) return fail(fmt::format("bad snapshot count {}", n_snapshots));
    if (n_snapshots > 0 && max_snapshots_ == 0) return fail("snapshots for a model without recurrent state");
    std::vector<Snapshot> snapshots;
    for (uint32_t i = 0; i < n_snapshots; ++i) {
        int64_t p = 0;
        if (*at + sizeof p > in.size()) return fail("truncated snapshot");
        std::memcpy(&p, in.data() + *at, sizeof p);
        *at += sizeof p;
        if (p < 0 || p > position)
            return fail(fmt::format("snapshot at {} past the position {}", p, position));
        const int slot = static_cast<int>(i) % max_snapshots_;  // later ones overwrite the oldest
        for (int64_t l = 0; l < n_layers; ++l) {
            const auto& buffers = layout_.layers[static_cast<size_t>(l)].buffers;
            for (size_t b = 0; b < buffers.size(); ++b)
                if (buffers[b].recurrent())
                    SLUICE_RETURN_IF_ERROR(get_buffer(slot, l, static_cast<int>(b), 0));
        }
        std::erase_if(snapshots, [&](const Snapshot& s) { return s.slot == slot; });
        snapshots.push_back({p, slot});
    }
    snapshots_ = std::move(snapshots);
    position_ = position;
    return Status::ok();
}

// Appends, layer by layer, the bytes of every buffer of one kind: the per-position ones' rows
// [row0, row0 + rows), or the running (recurrent) ones whole.
Status SequenceState::append_buffers(bool per_position, int64_t row0, int64_t rows, std::string& out) const {
    for (size_t l = 0; l < layout_.layers.size(); ++l) {
        const auto& buffers = layout_.layers[l].buffers;
        for (size_t b = 0; b < buffers.size(); ++b) {
            if (buffers[b].per_position != per_position) continue;
            const uint64_t n = buffers[b].bytes(per_position ? rows : 0);
            if (n == 0) continue;
            const size_t at = out.size();
            out.resize(at + n);
            SLUICE_RETURN_IF_ERROR(
                read_rows(kLive, static_cast<int64_t>(l), static_cast<int>(b), row0, rows, out.data() + at));
        }
    }
    return Status::ok();
}

Status SequenceState::append_positions(int64_t row0, int64_t rows, std::string& out) const {
    if (row0 < 0 || rows < 0 || row0 + rows > position_)
        return error(ErrorCode::kInvalidArgument,
                     fmt::format("[state] rows [{}, {}) are not all held (position {})", row0, row0 + rows,
                                 position_));
    return append_buffers(true, row0, rows, out);
}

Status SequenceState::read_position_blocks(int64_t row0, int64_t blocks, int64_t block_rows,
                                           std::vector<std::string>& out) const {
    if (row0 < 0 || blocks < 0 || block_rows < 0 || row0 + blocks * block_rows > position_)
        return error(ErrorCode::kInvalidArgument,
                     fmt::format("[state] rows [{}, {}) are not all held (position {})", row0,
                                 row0 + blocks * block_rows, position_));
    out.assign(static_cast<size_t>(blocks), std::string());
    for (std::string& o : out) o.reserve(positions_bytes(block_rows));
    std::vector<char> staging;
    for (size_t l = 0; l < layout_.layers.size(); ++l) {
        const auto& buffers = layout_.layers[l].buffers;
        for (size_t b = 0; b < buffers.size(); ++b) {
            if (!buffers[b].per_position) continue;
            const uint64_t n = buffers[b].bytes(block_rows);  // one block's rows of this buffer
            if (n == 0) continue;
            staging.resize(n * static_cast<uint64_t>(blocks));
            SLUICE_RETURN_IF_ERROR(read_rows(kLive, static_cast<int64_t>(l), static_cast<int>(b), row0,
                                             blocks * block_rows, staging.data()));
            for (int64_t i = 0; i < blocks; ++i)
                out[static_cast<size_t>(i)].append(staging.data() + static_cast<uint64_t>(i) * n, n);
        }
    }
    return Status::ok();
}

Status SequenceState::append_running(std::string& out) const {
    return append_buffers(false, 0, 1, out);
}

Status SequenceState::assign_prefix(std::span<const std::string_view> blocks, int64_t block_rows,
                                    std::string_view running, int64_t position) {
    SLUICE_RETURN_IF_ERROR(reset());
    auto fail = [&](const std::string& what) {
        (void)reset();
        return error(ErrorCode::kInvalidArgument, "[state] " + what);
    };
    if (position < 0 || position > capacity_ || static_cast<int64_t>(blocks.size()) * block_rows != position)
        return fail(fmt::format("{} blocks of {} rows for a state at {} (context {})", blocks.size(),
                                block_rows, position, capacity_));
    const uint64_t want_running = running_bytes();
    if (running.size() != want_running)
        return fail(
            fmt::format("the running state is {} bytes; this layout's is {}", running.size(), want_running));
    for (size_t i = 0; i < blocks.size(); ++i) {
        if (blocks[i].size() != positions_bytes(block_rows))
            return fail(fmt::format("block {} is {} bytes; {} rows are {}", i, blocks[i].size(), block_rows,
                                    positions_bytes(block_rows)));
        const int64_t row0 = static_cast<int64_t>(i) * block_rows;
        size_t at = 0;
        for (size_t l = 0; l < layout_.layers.size(); ++l) {
            const auto& buffers = layout_.layers[l].buffers;
            for (size_t b = 0; b < buffers.size(); ++b) {
                if (!buffers[b].per_position) continue;
                const uint64_t n = buffers[b].bytes(block_rows);
                if (n == 0) continue;
                const Status st = write_rows(kLive, static_cast<int64_t>(l), static_cast<int>(b), row0,
                                             block_rows, blocks[i].data() + at);
                if (!st.is_ok()) return fail(st.message());
                at += n;
            }
        }
    }
    size_t at = 0;
    for (size_t l = 0; l < layout_.layers.size(); ++l) {
        const auto& buffers = layout_.layers[l].buffers;
        for (size_t b = 0; b < buffers.size(); ++b) {
            if (buffers[b].per_position) continue;
            const uint64_t n = buffers[b].bytes(0);
            if (n == 0) continue;
            const Status st =
                write_rows(kLive, static_cast<int64_t>(l), static_cast<int>(b), 0, 1, running.data() + at);
            if (!st.is_ok()) return fail(st.message());
            at += n;
        }
    }
    position_ = position;
    return Status::ok();
}

}  // namespace sluice::runtime
