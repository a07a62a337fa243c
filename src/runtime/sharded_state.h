// ShardedState: one sequence held as several equal parts — an expert-parallel group's sequence
// (runtime/cuda/expert_parallel.cpp), one part per rank, each rank's forward advancing its own part. This
// state keeps the position and snapshot bookkeeping once (SequenceState's); its buffer primitives write every
// part and read part 0, so snapshots, truncation, session files and the prefix cache's copies treat the
// parts as one. Before a forward the owner aligns the parts' positions with this one; after every part's
// forward succeeded it calls committed(n); when one failed, restore() puts every part back (its position,
// and the committed copy of backends that keep two).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/sequence_state.h"

namespace sluice::runtime {

class ShardedState final : public SequenceState {
 public:
    // `owner`: the backend that made it (its forwards check it); parts alike in layout, capacity and
    // snapshot slots.
    ShardedState(const void* owner, std::vector<std::unique_ptr<SequenceState>> parts);

    const void* owner() const { return owner_; }
    size_t parts() const { return parts_.size(); }
    SequenceState& part(size_t i) { return *parts_[i]; }
    // Every part at this state's position.
    void align();
    std::vector<int> committed_copies() const;
    // After a failed forward: every part at this state's position with the committed copies it had.
    void restore(const std::vector<int>& copies);
    // Every part's forward of n tokens succeeded.
    void committed(int64_t n) { advance(n); }

 protected:
    Status read_rows(int slot, int64_t layer, int buffer, int64_t row0, int64_t rows,
                     void* dst) const override;
    Status write_rows(int slot, int64_t layer, int buffer, int64_t row0, int64_t rows,
                      const void* src) override;
    Status copy_recurrent(int from, int to) override;
    Status zero_recurrent() override;

 private:
    const void* owner_;
    std::vector<std::unique_ptr<SequenceState>> parts_;
};

}  // namespace sluice::runtime
