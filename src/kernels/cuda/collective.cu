// The same-device all-reduce of collective.h.
#include <algorithm>
#include <cuda/atomic>

#include "kernels/cuda/collective.h"

namespace sluice::cuda {
namespace {

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void local_all_reduce_kernel(LocalReduceShared s, int rank, unsigned long long* epochs, float* buf,
                                        int64_t count, int64_t slice) {
    const int b = static_cast<int>(blockIdx.x);
    __shared__ unsigned long long epoch;
    if (threadIdx.x == 0) epoch = epochs[b] + 1;
    __syncthreads();
    const unsigned long long e = epoch;
    // Block b always owns the same indices [b·slice, (b + 1)·slice), whatever the count, so a block's
    // epochs order every use of its part of the staging.
    const int64_t lo = std::min<int64_t>(count, slice * b), hi = std::min<int64_t>(count, lo + slice);
    float* half = s.staging + static_cast<int64_t>(e & 1) * s.ranks * s.capacity;
    float* mine = half + static_cast<int64_t>(rank) * s.capacity;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) __stcg(mine + i, buf[i]);
    __threadfence();  // every thread's slot writes before the flag that announces them
    __syncthreads();
    if (threadIdx.x == 0) {
        ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> mine_flag(
            s.flags[rank * kLocalReduceBlocks + b]);
        mine_flag.store(e, ::cuda::memory_order_release);
        const uint64_t start = global_ns();
        for (int r = 0; r < s.ranks; ++r) {
            ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> flag(
                s.flags[r * kLocalReduceBlocks + b]);
            while (flag.load(::cuda::memory_order_acquire) < e) {
                if (global_ns() - start > kLocalReduceTimeoutNs) {
                    atomicExch(s.failed, 1);
                    break;
                }
            }
        }
        epochs[b] = e;
    }
    __syncthreads();
    __threadfence();  // the flags seen (by thread 0, acquired) before this thread reads the others' slots
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float sum = 0.0f;
        for (int r = 0; r < s.ranks; ++r) sum += __ldcg(half + r * s.capacity + i);
        buf[i] = sum;
    }
}

}  // namespace

void local_all_reduce(const LocalReduceShared& shared, int rank, unsigned long long* epochs, float* buf,
                      int64_t count, cudaStream_t stream) {
    const int64_t slice = (shared.capacity + kLocalReduceBlocks - 1) / kLocalReduceBlocks;
    for (int64_t at = 0; at < count; at += shared.capacity) {
        const int64_t piece = std::min(shared.capacity, count - at);
        const int blocks = static_cast<int>((piece + slice - 1) / slice);
        local_all_reduce_kernel<<<blocks, 256, 0, stream>>>(shared, rank, epochs, buf + at, piece, slice);
    }
}

}  // namespace sluice::cuda
