// ShardedState (sharded_state.h).
#include "runtime/sharded_state.h"

namespace sluice::runtime {

ShardedState::ShardedState(const void* owner, std::vector<std::unique_ptr<SequenceState>> parts)
    : SequenceState(parts.front()->layout(), parts.front()->capacity(), parts.front()->max_snapshots()),
      owner_(owner),
      parts_(std::move(parts)) {}

void ShardedState::align() {
    for (auto& p : parts_) p->set_position(position());
}

std::vector<int> ShardedState::committed_copies() const {
    std::vector<int> out;
    for (const auto& p : parts_) out.push_back(p->committed_copy());
    return out;
}

void ShardedState::restore(const std::vector<int>& copies) {
    for (size_t i = 0; i < parts_.size(); ++i) {
        parts_[i]->set_position(position());
        parts_[i]->set_committed_copy(copies[i]);
    }
}

Status ShardedState::read_rows(int slot, int64_t layer, int buffer, int64_t row0, int64_t rows,
                               void* dst) const {
    return parts_[0]->read_rows(slot, layer, buffer, row0, rows, dst);
}

Status ShardedState::write_rows(int slot, int64_t layer, int buffer, int64_t row0, int64_t rows,
                                const void* src) {
    for (auto& p : parts_) SLUICE_RETURN_IF_ERROR(p->write_rows(slot, layer, buffer, row0, rows, src));
    return Status::ok();
}

Status ShardedState::copy_recurrent(int from, int to) {
    for (auto& p : parts_) SLUICE_RETURN_IF_ERROR(p->copy_recurrent(from, to));
    return Status::ok();
}

Status ShardedState::zero_recurrent() {
    for (auto& p : parts_) SLUICE_RETURN_IF_ERROR(p->zero_recurrent());
    return Status::ok();
}

}  // namespace sluice::runtime
