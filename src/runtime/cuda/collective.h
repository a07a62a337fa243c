// Collective: how the ranks of an expert-parallel group (expert_parallel.cpp) sum their MoE outputs —
// one object per rank, each call enqueued on that rank's stream like a kernel (so a decode graph
// captures it). Two kinds:
//   - NCCL (distinct GPUs): ncclAllReduce on a communicator of the group's devices (ncclCommInitAll,
//     one process). libnccl is loaded when a group is made (dlopen: SLUICE_NCCL_LIBRARY, else
//     libnccl.so.2 on the loader's path), not linked: a sluice binary that never spans GPUs needs no
//     NCCL, and the library (200+ MB) ships with the CUDA toolkit or PyTorch where it is wanted.
//   - Local (ranks sharing one GPU): cuda::local_all_reduce over a staging area in that GPU's memory —
//     the group's path on a single device, where NCCL refuses two ranks of one GPU.
// Both give every rank the same sum; NCCL's order is its own (a ring or tree over the ranks), the local
// one sums in rank order.
//
// Ranks wait for each other inside kernels (NCCL's and the local one), so CUDA must load modules eagerly:
// with lazy loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 12.2) the first launch of a kernel
// on one rank may wait for the whole device to go idle while another rank's collective waits for it — a
// deadlock (the CUDA Programming Guide's lazy-loading section names this case). Engine::load sets
// CUDA_MODULE_LOADING=EAGER for a group when the process has not yet started CUDA; the make_* functions
// refuse lazy loading with an error saying so.
//
// A rank that stops calling leaves the others waiting inside the collective. The group therefore
// validates and allocates everything a forward needs on every rank before any rank starts it, and when
// a rank fails after that, abort() releases the others (ncclCommAbort; the local kernel gives up after
// its timeout) and the group refuses further work.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "sluice/status.h"

namespace sluice::runtime::cuda_impl {

class Collective {
 public:
    virtual ~Collective() = default;
    // buf[0, count) ← the sum of every rank's buf, enqueued on `stream` (this rank's device current).
    virtual void all_reduce_sum(float* buf, int64_t count, cudaStream_t stream) = 0;
    // An error the collective recorded (a failed NCCL call, the local kernel's timeout); checked after
    // each forward.
    virtual Status check() = 0;
    // Releases ranks waiting in a collective after another rank failed; the group is unusable after.
    virtual void abort() = 0;
    virtual std::string kind() const = 0;  // "nccl 2.28.9" or "local"
};

// An error when the driver loads modules lazily (see above), else ok.
Status require_eager_module_loading();
// One Collective per entry of `devices` (distinct GPUs): an NCCL communicator over them.
Expected<std::vector<std::unique_ptr<Collective>>> make_nccl_collectives(const std::vector<int>& devices);
// `ranks` Collectives sharing GPU `device`.
Expected<std::vector<std::unique_ptr<Collective>>> make_local_collectives(int device, int ranks);

}  // namespace sluice::runtime::cuda_impl
