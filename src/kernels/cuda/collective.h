// The all-reduce that lets ranks of an expert-parallel group share one GPU (runtime/cuda/collective.h's
// LocalCollective): the group's path, collectives included, runs and is tested on a single device, where
// NCCL refuses two ranks of one communicator on the same GPU.
//
// Each rank's launch copies its buffer into its slot of a shared staging area, publishes the call's
// epoch in a flag, waits until every rank has published it, then sums the slots in rank order into its
// own buffer, so every rank gets the same bits. It runs as a few blocks, each with its own slice, flag
// and epoch counter: a block waits only for the same block of the other ranks, and the spinning blocks
// of one rank never hold enough of the GPU to keep the others' kernels from running. Staging is double
// buffered by epoch parity: a rank reaches call e + 2 (which reuses call e's half) only after every
// rank has published e + 1, which each does after it finished reading call e's sums.
//
// Graph-capturable (everything lives in device memory, epochs advance on the device). A wait past
// kLocalReduceTimeoutNs (a rank that never arrives) sets *failed and returns rather than hanging the
// device; the caller turns that into an error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace sluice::cuda {

constexpr int kLocalReduceBlocks = 8;
constexpr uint64_t kLocalReduceTimeoutNs = 20'000'000'000ull;

// Device memory shared by the ranks (allocated by the group): staging [2][ranks][capacity] floats,
// flags [ranks][kLocalReduceBlocks], *failed.
struct LocalReduceShared {
    float* staging = nullptr;
    unsigned long long* flags = nullptr;
    int* failed = nullptr;
    int ranks = 1;
    int64_t capacity = 0;  // floats per rank and half; longer buffers go in pieces
};

// buf[0, count) ← Σ over ranks of each rank's buf, in rank order. `epochs`: this rank's
// kLocalReduceBlocks counters (device memory, zeroed at allocation). Every rank must make the same
// sequence of calls with the same counts.
void local_all_reduce(const LocalReduceShared& shared, int rank, unsigned long long* epochs, float* buf,
                      int64_t count, cudaStream_t stream);

}  // namespace sluice::cuda
