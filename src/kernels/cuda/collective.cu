// The same-device all-reduce of collective.h.
#include <algorithm>

#include "kernels/cuda/collective.h"

namespace sluice::cuda {
namespace {

__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void local_all_reduce_kernel(LocalReduceShared s, int rank, unsigned long long* epochs, float* buf,
                                        int64_t count) {
    const int b = static_cast<int>(blockIdx.x);
    __shared__ unsigned long long epoch;
    if (threadIdx.x == 0) epoch = epochs[b] + 1;
    __syncthreads();
    const unsigned long long e = epoch;
    const int64_t per_block = (count + gridDim.x - 1) / gridDim.x;
    const int64_t lo = std::min<int64_t>(count, per_block * b), hi = std::min<int64_t>(count, lo + per_block);
    float* half = s.staging + static_cast<int64_t>(e & 1) * s.ranks * s.capacity;
    float* mine = half + static_cast<int64_t>(rank) * s.capacity;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) mine[i] = buf[i];
    __threadfence();  // the slot's writes before the flag that announces them
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicExch(&s.flags[rank * kLocalReduceBlocks + b], e);
        const uint64_t start = global_ns();
        for (int r = 0; r < s.ranks; ++r) {
            volatile unsigned long long* flag = &s.flags[r * kLocalReduceBlocks + b];
            while (*flag < e) {
                if (global_ns() - start > kLocalReduceTimeoutNs) {
                    atomicExch(s.failed, 1);
                    break;
                }
            }
        }
        epochs[b] = e;
        __threadfence();  // the flags seen before the other ranks' slots are read
    }
    __syncthreads();
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float sum = 0.0f;
        for (int r = 0; r < s.ranks; ++r) sum += reinterpret_cast<volatile float*>(half)[r * s.capacity + i];
        buf[i] = sum;
    }
}

}  // namespace

void local_all_reduce(const LocalReduceShared& shared, int rank, unsigned long long* epochs, float* buf,
                      int64_t count, cudaStream_t stream) {
    for (int64_t at = 0; at < count; at += shared.capacity) {
        const int64_t piece = std::min(shared.capacity, count - at);
        const int blocks =
            static_cast<int>(std::clamp<int64_t>((piece + 1023) / 1024, 1, kLocalReduceBlocks));
        local_all_reduce_kernel<<<blocks, 256, 0, stream>>>(shared, rank, epochs, buf + at, piece);
    }
}

}  // namespace sluice::cuda
